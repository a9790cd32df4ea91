/*
 * util.c - strdup, the whole-file reader and the integer parser (util.h).
 */
#include "graph/util.h"

#include <errno.h>
#include <fcntl.h>
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
