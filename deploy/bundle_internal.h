/*
 * bundle_internal.h - pieces of the .gccx container shared by the reader
 * (deploy/bundle.c) and the writers (deploy/model_bundle.c, deploy/export.c); tests use them to
 * build deliberately inconsistent bundles.
 */
#ifndef GCC_RUNTIME_BUNDLE_INTERNAL_H
#define GCC_RUNTIME_BUNDLE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "graph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One section to write: name and bytes (borrowed). */
typedef struct gcc_bundle_section_ref {
  const char *name;
  const void *data;
  size_t size;
} gcc_bundle_section_ref;

/* SHA-256 of `name`, one NUL byte, then `size` bytes of `data` (what a
 * section's checksum covers). Returns 0 if OpenSSL fails. */
int gcc_bundle_sha256(const char *name, const void *data, size_t size, uint8_t out[32]);

/* Lower-case hex of a SHA-256, NUL-terminated. */
void gcc_bundle_hex(const uint8_t h[32], char out[65]);

/* The whole file (header + gccx.Bundle with every section's checksum) in a
 * malloc'ed buffer, with format version GCC_BUNDLE_FORMAT_VERSION_MIN (a
 * float32 bundle) in its header. Errors: GCC_ERR_OUT_OF_MEMORY,
 * GCC_ERR_INTERNAL. */
gcc_status gcc_bundle_pack(const gcc_bundle_section_ref *secs, int n, uint8_t **bytes, size_t *size,
                           gcc_diag *d);

/* The same with format version `version` in the header (deploy/bundle.h:
 * 2 for a bundle with 16-bit weights). */
gcc_status gcc_bundle_pack_version(const gcc_bundle_section_ref *secs, int n, uint32_t version,
                                   uint8_t **bytes, size_t *size, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_BUNDLE_INTERNAL_H */
