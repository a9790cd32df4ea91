/*
 * util.h - the small helpers every layer shares, written once: a NULL-safe
 * strdup, the whole-file reader, the parser of decimal integers (flags,
 * device ordinals, batch-size lists), and the on-disk cache folder that the
 * NVRTC kernel cache and the CPU library choice share.
 */
#ifndef GCC_GRAPH_UTIL_H
#define GCC_GRAPH_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "graph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A malloc'ed copy of `s`; NULL for a NULL `s` or when out of memory. */
char *gcc_strdup(const char *s);

/* Reads the whole regular file at `path` into a malloc'ed buffer (*bytes,
 * *size bytes, followed by one NUL byte that *size does not count, so text
 * can be used as a string). Files larger than `max_bytes` are refused
 * (0: no limit). A FIFO or device is refused without blocking. The caller
 * frees *bytes. Errors (GCC_ERR_IO unless stated, each naming `path`):
 * cannot open (with strerror), not a regular file, larger than the limit,
 * a read error or short read; GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_read_file(const char *path, size_t max_bytes, uint8_t **bytes, size_t *size,
                         gcc_diag *d);

/* Reads exactly `n` bytes from file descriptor `fd` into `buf`, retrying
 * interrupted and partial reads. Returns the bytes read: fewer than `n` at
 * end of file or on an error (errno then says which). */
size_t gcc_read_fd(int fd, void *buf, size_t n);

/* Parses all of `s` as a decimal integer in [lo, hi] (strtoll's syntax:
 * leading white space and a sign allowed, nothing after the digits). Returns 1 and sets *out, or 0 (out of
 * range, overflow, empty, trailing characters) leaving *out unchanged. */
int gcc_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);

/* The cache folder into buf: `dir` when given (non-empty), else
 * $XDG_CACHE_HOME/gcc-train when XDG_CACHE_HOME is absolute (a relative one
 * is invalid and ignored, as the XDG spec says), else $HOME/.cache/gcc-train.
 * Errors (GCC_ERR_INVALID_ARGUMENT, the message starting with `what`, e.g.
 * "kernel cache"): neither variable usable, or a path longer than `size`. */
gcc_status gcc_cache_dir(const char *dir, const char *what, char *buf, size_t size, gcc_diag *d);

/* mkdir -p with mode 0700: 0, or an errno (ENOTDIR when a file is in the
 * way, ENAMETOOLONG past 4095 bytes). */
int gcc_mkdir_p(const char *dir);

#ifdef __cplusplus
}
#endif

#endif /* GCC_GRAPH_UTIL_H */
