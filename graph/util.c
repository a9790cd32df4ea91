/*
 * util.c - strdup, the whole-file reader and the integer parser (util.h).
 */
#include "graph/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/outfile.h"

char *gcc_strdup(const char *s) {
  if (!s)
    return NULL;
  size_t n = strlen(s) + 1;
  char *r = malloc(n);
  if (r)
    memcpy(r, s, n);
  return r;
}

size_t gcc_read_fd(int fd, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char *)buf + got, n - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    got += (size_t)r;
  }
  return got;
}

gcc_status gcc_read_file(const char *path, size_t max_bytes, uint8_t **bytes, size_t *size,
                         gcc_diag *d) {
  *bytes = NULL;
  *size = 0;
  /* O_NONBLOCK: a FIFO in place of the file must not hang the reader */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return gcc_diag_set(d, GCC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return gcc_diag_set(d, GCC_ERR_IO, "%s: not a regular file", path);
  }
  gcc_input_note(path, fd);
  size_t n = (size_t)st.st_size;
  if (max_bytes && n > max_bytes) {
    close(fd);
    return gcc_diag_set(d, GCC_ERR_IO, "%s: %zu bytes, more than the %zu this reader takes", path,
                        n, max_bytes);
  }
  uint8_t *b = malloc(n + 1);
  if (!b) {
    close(fd);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "%s: out of memory reading %zu bytes", path, n);
  }
  errno = 0;
  size_t got = gcc_read_fd(fd, b, n);
  int err = errno;
  close(fd);
  if (got != n) {
    free(b);
    return gcc_diag_set(d, GCC_ERR_IO, "%s: read error: %s", path,
                        err ? strerror(err) : "the file shrank while it was read");
  }
  b[n] = '\0';
  *bytes = b;
  *size = n;
  return GCC_OK;
}

int gcc_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  if (!s || !*s)
    return 0;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi)
    return 0;
  *out = v;
  return 1;
}

gcc_status gcc_cache_dir(const char *dir, const char *what, char *buf, size_t size, gcc_diag *d) {
  int w;
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (dir && *dir)
    w = snprintf(buf, size, "%s", dir);
  else if (xdg && xdg[0] == '/') /* a relative XDG_CACHE_HOME is invalid */
    w = snprintf(buf, size, "%s/gcc-train", xdg);
  else if (home && *home)
    w = snprintf(buf, size, "%s/.cache/gcc-train", home);
  else
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: no directory: neither XDG_CACHE_HOME (absolute) nor HOME is set",
                        what);
  if (w < 0 || (size_t)w >= size)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s: directory path is longer than %zu bytes",
                        what, size);
  return GCC_OK;
}

int gcc_mkdir_p(const char *dir) {
  char p[4096];
  size_t n = strlen(dir);
  if (n == 0 || n >= sizeof p)
    return ENAMETOOLONG;
  memcpy(p, dir, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (p[i] != '/' && p[i] != '\0')
      continue;
    char c = p[i];
    p[i] = '\0';
    if (mkdir(p, 0700) != 0 && errno != EEXIST)
      return errno;
    p[i] = c;
  }
  struct stat st;
  if (stat(dir, &st) != 0)
    return errno;
  return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}
