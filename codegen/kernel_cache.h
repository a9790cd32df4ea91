/*
 * kernel_cache.h - on-disk cache of NVRTC-compiled programs (codegen/nvrtc.h).
 *
 * Directory: the explicit `cache_dir` argument, else
 * $XDG_CACHE_HOME/gcc-train (when XDG_CACHE_HOME is an absolute path), else
 * $HOME/.cache/gcc-train. It is created on demand like `mkdir -p` (mode
 * 0700 for the directories it creates).
 *
 * Key: SHA-256 (OpenSSL EVP) over, each length-prefixed: a key-format tag,
 * GCC_CODEGEN_VERSION, NVRTC's version (major.minor) and the size of the
 * loaded libnvrtc (patch releases keep 13.0 but change the library), sm,
 * every NVRTC option (gcc_nvrtc_options), the program name (it is written
 * into the PTX's .file directive) and the source. Everything that changes
 * the bytes NVRTC produces must be in the key.
 *
 * One entry per key: `<64 hex digits of the key>.gcck`, laid out as
 *   "GCCKCACH" (8 bytes) | format version u32 | reserved u32 (0) |
 *   key (32 bytes) | ptx_size u64 | cubin_size u64 | PTX (no NUL) | cubin |
 *   SHA-256 of every byte before it (32 bytes)
 * (integers little-endian). An entry is trusted only if the magic, version,
 * key (equal to the one asked for), sizes (adding up to the file size)
 * and checksum all agree; anything else (corrupt, truncated, foreign,
 * other version) is removed and rebuilt. Entries are written to a
 * temporary file in the same directory and renamed into place, so readers
 * never see a partial entry and concurrent writers of one key are safe
 * (the last rename wins; both wrote the same bytes). No fsync: a torn
 * entry after a crash fails its checksum and is rebuilt.
 *
 * The cache never makes a compile fail: an unusable directory (not
 * creatable, not writable, a regular file in its place, no $HOME) or a
 * failed read or write degrades to compiling without it, and
 * out->cache_note says so (nothing is printed).
 */
#ifndef GCC_CODEGEN_KERNEL_CACHE_H
#define GCC_CODEGEN_KERNEL_CACHE_H

#include <stddef.h>

#include "codegen/nvrtc.h"
#include "graph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GCC_KERNEL_CACHE_FORMAT 1

/* Compiles `source` for sm_XX like gcc_nvrtc_compile, through the cache in
 * `cache_dir` (NULL: the default directory above). use_cache == 0 is
 * `--no-kernel-cache`: compile, neither read nor write. `*hit` (hit may be
 * NULL) is 1 when the output came from the cache, else 0.
 *
 * Ownership: as gcc_nvrtc_compile: out is zeroed first, its buffers belong
 * to the caller (gcc_nvrtc_output_free, also after a failure). On a hit
 * out->log is NULL (the log is not cached).
 *
 * Errors: those of gcc_nvrtc_compile (GCC_ERR_INVALID_ARGUMENT,
 * GCC_ERR_UNSUPPORTED, GCC_ERR_INTERNAL with the NVRTC log,
 * GCC_ERR_OUT_OF_MEMORY), and GCC_ERR_INTERNAL if SHA-256 fails. Cache
 * problems are never errors (see out->cache_note). */
gcc_status gcc_kernel_cache_compile(const char *cache_dir, int use_cache, const char *source,
                                    const char *program_name, int sm, gcc_nvrtc_output *out,
                                    int *hit, gcc_diag *d);

/* The kernel compiler the plan runner calls (runtime/plan.h
 * gcc_plan_config.compile): gcc_kernel_cache_compile with the directory and
 * switch of `config`, a gcc_kernel_cache_config. Errors: as
 * gcc_kernel_cache_compile. */
typedef struct gcc_kernel_cache_config {
  const char *dir; /* NULL: the default directory */
  int use_cache;   /* 0: --no-kernel-cache */
} gcc_kernel_cache_config;
gcc_status gcc_kernel_cache_hook(void *config, const char *source, const char *program_name, int sm,
                                 gcc_nvrtc_output *out, gcc_diag *d);

/* The cache key, as 64 lowercase hex digits plus NUL, of `source` named
 * `program_name` (NULL: as gcc_nvrtc_compile) compiled for sm_XX with
 * `opts` (NULL: the options gcc_nvrtc_compile uses, gcc_nvrtc_options).
 * Errors: GCC_ERR_INVALID_ARGUMENT (NULL source or hex); GCC_ERR_INTERNAL
 * (NVRTC version or SHA-256 failed). */
gcc_status gcc_kernel_cache_key(const char *source, const char *program_name, int sm,
                                const gcc_nvrtc_opts *opts, char hex[65], gcc_diag *d);

/* The directory the cache uses for `cache_dir` (NULL: the default), into
 * buf. Errors: GCC_ERR_INVALID_ARGUMENT when neither XDG_CACHE_HOME nor
 * HOME gives one, or when it does not fit in `size`. */
gcc_status gcc_kernel_cache_dir(const char *cache_dir, char *buf, size_t size, gcc_diag *d);

/* The path of the entry for `source` (same arguments as
 * gcc_kernel_cache_key) in the cache directory for `cache_dir`, into buf.
 * Errors: those of gcc_kernel_cache_dir and gcc_kernel_cache_key. */
gcc_status gcc_kernel_cache_entry_path(const char *cache_dir, const char *source,
                                       const char *program_name, int sm, char *buf, size_t size,
                                       gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_CODEGEN_KERNEL_CACHE_H */
