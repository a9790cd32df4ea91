/*
 * kernel_cache.c - the on-disk NVRTC output cache (layout and guarantees in
 * kernel_cache.h).
 */
#include "codegen/kernel_cache.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#ifndef GCC_NO_CUDA
#include <nvrtc.h>
#endif
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "codegen/emit.h"
#include "graph/util.h"

static const char MAGIC[8] = {'G', 'C', 'C', 'K', 'C', 'A', 'C', 'H'};
enum {
  KEY_BYTES = 32,
  HEADER_BYTES = 8 + 4 + 4 + KEY_BYTES + 8 + 8, /* magic, version, reserved, key, sizes */
  TRAILER_BYTES = 32,                           /* SHA-256 of everything before it */
};
/* An entry larger than this is not ours (the biggest plans give a few MB). */
#define MAX_ENTRY_BYTES ((uint64_t)1 << 30)

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- SHA-256 (OpenSSL EVP) ------------------------------------------------ */

typedef struct hasher {
  EVP_MD_CTX *ctx;
  int ok;
} hasher;

static void h_init(hasher *h) {
  h->ctx = EVP_MD_CTX_new();
  h->ok = h->ctx && EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) == 1;
}

static void h_raw(hasher *h, const void *p, size_t n) {
  if (h->ok && n > 0)
    h->ok = EVP_DigestUpdate(h->ctx, p, n) == 1;
}

static void h_u64(hasher *h, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; i++)
    b[i] = (unsigned char)(v >> (8 * i));
  h_raw(h, b, 8);
}

/* length-prefixed, so that no two different field lists hash the same */
static void h_field(hasher *h, const void *p, size_t n) {
  h_u64(h, n);
  h_raw(h, p, n);
}

static void h_str(hasher *h, const char *s) {
  h_field(h, s, strlen(s));
}

/* Finishes into out[32]; returns 0 on any failure along the way. */
static int h_final(hasher *h, unsigned char out[32]) {
  unsigned int len = 0;
  if (h->ok)
    h->ok = EVP_DigestFinal_ex(h->ctx, out, &len) == 1 && len == 32;
  EVP_MD_CTX_free(h->ctx);
  h->ctx = NULL;
  return h->ok;
}

static int sha256(const void *p, size_t n, unsigned char out[32]) {
  hasher h;
  h_init(&h);
  h_raw(&h, p, n);
  return h_final(&h, out);
}

/* ---- key ---------------------------------------------------------------- */

/* The size of the libnvrtc this process loaded (0 if unknown): nvrtcVersion
 * says 13.0 for every 13.0.x, the library file differs between them. */
static uint64_t nvrtc_library_size(void) {
#ifdef GCC_NO_CUDA /* --config=cpu_only: no NVRTC, nothing is compiled */
  return 0;
#else
  Dl_info info;
  struct stat st;
  if (dladdr((void *)nvrtcVersion, &info) && info.dli_fname && stat(info.dli_fname, &st) == 0)
    return (uint64_t)st.st_size;
  return 0;
#endif
}

static void to_hex(const unsigned char *b, size_t n, char *hex) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    hex[2 * i] = digits[b[i] >> 4];
    hex[2 * i + 1] = digits[b[i] & 15];
  }
  hex[2 * n] = '\0';
}

static gcc_status compute_key(const char *source, const char *program_name, int sm,
                              const gcc_nvrtc_opts *opts, unsigned char key[KEY_BYTES],
                              gcc_diag *d) {
  int major = 0, minor = 0;
  if (gcc_nvrtc_version(&major, &minor) != GCC_OK)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "kernel cache: nvrtcVersion failed");
  gcc_nvrtc_opts def;
  if (!opts) {
    gcc_nvrtc_options(sm, &def);
    opts = &def;
  }
  const char *name = program_name && *program_name ? program_name : GCC_NVRTC_DEFAULT_PROGRAM_NAME;
  hasher h;
  h_init(&h);
  h_str(&h, "gcc-train kernel cache key 1");
  h_u64(&h, GCC_CODEGEN_VERSION);
  h_u64(&h, (uint64_t)major);
  h_u64(&h, (uint64_t)minor);
  h_u64(&h, nvrtc_library_size());
  h_u64(&h, (uint64_t)(int64_t)sm);
  h_u64(&h, (uint64_t)opts->n);
  for (int i = 0; i < opts->n; i++)
    h_str(&h, opts->v[i]);
  h_str(&h, name);
  h_str(&h, source);
  if (!h_final(&h, key))
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "kernel cache: SHA-256 (OpenSSL EVP) failed");
  return GCC_OK;
}

gcc_status gcc_kernel_cache_key(const char *source, const char *program_name, int sm,
                                const gcc_nvrtc_opts *opts, char hex[65], gcc_diag *d) {
  if (!source || !hex)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "kernel cache: key: %s is NULL",
                        source ? "hex" : "source");
  unsigned char key[KEY_BYTES];
  GCC_TRY(compute_key(source, program_name, sm, opts, key, d));
  to_hex(key, KEY_BYTES, hex);
  return GCC_OK;
}

/* ---- directory ------------------------------------------------------------ */

gcc_status gcc_kernel_cache_dir(const char *cache_dir, char *buf, size_t size, gcc_diag *d) {
  return gcc_cache_dir(cache_dir, "kernel cache", buf, size, d);
}

gcc_status gcc_kernel_cache_entry_path(const char *cache_dir, const char *source,
                                       const char *program_name, int sm, char *buf, size_t size,
                                       gcc_diag *d) {
  char dir[4096], hex[65];
  GCC_TRY(gcc_kernel_cache_dir(cache_dir, dir, sizeof dir, d));
  GCC_TRY(gcc_kernel_cache_key(source, program_name, sm, NULL, hex, d));
  int w = snprintf(buf, size, "%s/%s.gcck", dir, hex);
  if (w < 0 || (size_t)w >= size)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "kernel cache: entry path is longer than %zu bytes", size);
  return GCC_OK;
}

/* ---- entries -------------------------------------------------------------- */

static void put_u32(unsigned char *b, uint32_t v) {
  for (int i = 0; i < 4; i++)
    b[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *b, uint64_t v) {
  for (int i = 0; i < 8; i++)
    b[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *b) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--)
    v = v << 8 | b[i];
  return v;
}
static uint64_t get_u64(const unsigned char *b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | b[i];
  return v;
}

/* Why an entry's bytes are not a valid entry for `key`, or NULL if they are. */
static const char *check_entry(const unsigned char *b, uint64_t n, const unsigned char *key,
                               uint64_t *ptx_size, uint64_t *cubin_size) {
  if (n < HEADER_BYTES + TRAILER_BYTES)
    return "truncated (shorter than header and checksum)";
  if (memcmp(b, MAGIC, sizeof MAGIC) != 0)
    return "bad magic";
  if (get_u32(b + 8) != GCC_KERNEL_CACHE_FORMAT)
    return "other format version";
  if (memcmp(b + 16, key, KEY_BYTES) != 0)
    return "key does not match its file name";
  uint64_t ps = get_u64(b + 16 + KEY_BYTES), cs = get_u64(b + 24 + KEY_BYTES);
  uint64_t payload = n - HEADER_BYTES - TRAILER_BYTES;
  if (ps > payload || cs > payload - ps || ps + cs != payload)
    return "sizes do not match the file size (truncated or extended)";
  if (ps == 0 || cs == 0)
    return "empty PTX or cubin";
  unsigned char sum[32];
  if (!sha256(b, n - TRAILER_BYTES, sum))
    return "SHA-256 failed";
  if (memcmp(sum, b + n - TRAILER_BYTES, TRAILER_BYTES) != 0)
    return "checksum mismatch";
  if (memchr(b + HEADER_BYTES, '\0', ps))
    return "NUL inside the PTX";
  *ptx_size = ps;
  *cubin_size = cs;
  return NULL;
}

typedef enum { ENTRY_MISS, ENTRY_HIT, ENTRY_BAD } entry_result;

/* Reads and verifies the entry at `path`. On a hit fills out->ptx/cubin. A
 * bad entry is removed (if the file is still the one we read). */
static entry_result read_entry(const char *path, const unsigned char *key, gcc_nvrtc_output *out,
                               char *note, size_t note_size) {
  /* O_NONBLOCK: a FIFO planted at the entry path must not hang us */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno != ENOENT && errno != ENOTDIR)
      snprintf(note, note_size, "kernel cache: cannot read '%s': %s", path, strerror(errno));
    return ENTRY_MISS;
  }
  struct stat st;
  const char *why = NULL;
  unsigned char *b = NULL;
  uint64_t n = 0, ps = 0, cs = 0;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    why = "not a regular file";
  } else if ((uint64_t)st.st_size > MAX_ENTRY_BYTES) {
    why = "larger than any entry";
  } else {
    n = (uint64_t)st.st_size;
    b = malloc(n ? n : 1);
    if (!b) {
      close(fd);
      snprintf(note, note_size, "kernel cache: out of memory reading '%s'", path);
      return ENTRY_MISS;
    }
    uint64_t got = gcc_read_fd(fd, b, (size_t)n);
    if (got != n)
      why = "short read (truncated while reading)";
    else
      why = check_entry(b, n, key, &ps, &cs);
  }
  if (why) {
    /* remove it, unless a writer has renamed a fresh entry into place since */
    struct stat now;
    if (stat(path, &now) == 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino)
      unlink(path);
    close(fd);
    free(b);
    snprintf(note, note_size, "kernel cache: entry '%s' was invalid (%s): removed and rebuilt",
             path, why);
    return ENTRY_BAD;
  }
  close(fd);
  out->ptx = malloc(ps + 1);
  out->cubin = malloc(cs);
  if (!out->ptx || !out->cubin) {
    free(out->ptx);
    free(out->cubin);
    out->ptx = NULL;
    out->cubin = NULL;
    free(b);
    snprintf(note, note_size, "kernel cache: out of memory reading '%s'", path);
    return ENTRY_MISS;
  }
  memcpy(out->ptx, b + HEADER_BYTES, ps);
  out->ptx[ps] = '\0';
  out->ptx_size = ps;
  memcpy(out->cubin, b + HEADER_BYTES + ps, cs);
  out->cubin_size = cs;
  free(b);
  return ENTRY_HIT;
}

static int write_all(int fd, const unsigned char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return 0;
    p += w;
    n -= (size_t)w;
  }
  return 1;
}

/* Writes the entry atomically (temp file in `dir` + rename). Returns 1, or
 * 0 with a note. */
static int write_entry(const char *dir, const char *path, const char *hex, const unsigned char *key,
                       const gcc_nvrtc_output *o, char *note, size_t note_size) {
  size_t n = HEADER_BYTES + o->ptx_size + o->cubin_size + TRAILER_BYTES;
  unsigned char *b = malloc(n);
  if (!b) {
    snprintf(note, note_size, "kernel cache: out of memory writing '%s'", path);
    return 0;
  }
  memcpy(b, MAGIC, sizeof MAGIC);
  put_u32(b + 8, GCC_KERNEL_CACHE_FORMAT);
  put_u32(b + 12, 0);
  memcpy(b + 16, key, KEY_BYTES);
  put_u64(b + 16 + KEY_BYTES, o->ptx_size);
  put_u64(b + 24 + KEY_BYTES, o->cubin_size);
  memcpy(b + HEADER_BYTES, o->ptx, o->ptx_size);
  memcpy(b + HEADER_BYTES + o->ptx_size, o->cubin, o->cubin_size);
  if (!sha256(b, n - TRAILER_BYTES, b + n - TRAILER_BYTES)) {
    free(b);
    snprintf(note, note_size, "kernel cache: SHA-256 failed; '%s' not written", path);
    return 0;
  }
  char tmp[4200];
  int w = snprintf(tmp, sizeof tmp, "%s/.%s.tmp.XXXXXX", dir, hex);
  if (w < 0 || (size_t)w >= sizeof tmp) {
    free(b);
    snprintf(note, note_size, "kernel cache: directory path too long: '%s'", dir);
    return 0;
  }
  int fd = mkstemp(tmp);
  if (fd < 0) {
    snprintf(note, note_size, "kernel cache: cannot create a file in '%s': %s", dir,
             strerror(errno));
    free(b);
    return 0;
  }
  int ok = write_all(fd, b, n);
  int err = ok ? 0 : errno;
  free(b);
  if (close(fd) != 0 && ok) {
    ok = 0;
    err = errno;
  }
  if (ok && rename(tmp, path) != 0) {
    ok = 0;
    err = errno;
  }
  if (!ok) {
    unlink(tmp);
    snprintf(note, note_size, "kernel cache: cannot write '%s': %s", path,
             err ? strerror(err) : "short write");
  }
  return ok;
}

/* ---- compile through the cache ------------------------------------------ */

gcc_status gcc_kernel_cache_compile(const char *cache_dir, int use_cache, const char *source,
                                    const char *program_name, int sm, gcc_nvrtc_output *out,
                                    int *hit, gcc_diag *d) {
  double t0 = now_seconds();
  if (hit)
    *hit = 0;
  if (!out)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "kernel cache: out is NULL");
  memset(out, 0, sizeof *out);
  if (!use_cache) {
    gcc_status s = gcc_nvrtc_compile(source, program_name, sm, out, d);
    out->seconds = now_seconds() - t0;
    return s;
  }
  if (!source)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "kernel cache: source is NULL");
  GCC_TRY(gcc_nvrtc_check_arch(sm, d));

  unsigned char key[KEY_BYTES];
  char hex[65], dir[4096], path[4200];
  char note[sizeof out->cache_note] = "";
  GCC_TRY(compute_key(source, program_name, sm, NULL, key, d));
  to_hex(key, KEY_BYTES, hex);

  gcc_diag dd = {0};
  int have_dir = gcc_kernel_cache_dir(cache_dir, dir, sizeof dir, &dd) == GCC_OK;
  if (have_dir) {
    int w = snprintf(path, sizeof path, "%s/%s.gcck", dir, hex);
    have_dir = w > 0 && (size_t)w < sizeof path;
    if (!have_dir)
      snprintf(note, sizeof note, "kernel cache disabled: directory path too long");
  } else {
    snprintf(note, sizeof note, "kernel cache disabled: %s", dd.msg);
  }

  if (have_dir) {
    entry_result r = read_entry(path, key, out, note, sizeof note);
    if (r == ENTRY_HIT) {
      if (hit)
        *hit = 1;
      out->seconds = now_seconds() - t0;
      return GCC_OK;
    }
  }

  gcc_status s = gcc_nvrtc_compile(source, program_name, sm, out, d); /* zeroes out */
  if (s == GCC_OK && have_dir) {
    int e = gcc_mkdir_p(dir);
    if (e != 0)
      snprintf(note, sizeof note, "kernel cache disabled: cannot create directory '%s': %s", dir,
               strerror(e));
    else
      write_entry(dir, path, hex, key, out, note, sizeof note);
  }
  memcpy(out->cache_note, note, sizeof note);
  out->seconds = now_seconds() - t0;
  return s;
}

gcc_status gcc_kernel_cache_hook(void *config, const char *source, const char *program_name, int sm,
                                 gcc_nvrtc_output *out, gcc_diag *d) {
  const gcc_kernel_cache_config *c = config;
  return gcc_kernel_cache_compile(c ? c->dir : NULL, c ? c->use_cache : 1, source, program_name, sm,
                                  out, NULL, d);
}
