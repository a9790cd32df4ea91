/* export.c - gcc-train --export: the .gccx bundle of a model with its CUDA
 * kernels (NVRTC); the rest of the bundle is deploy/model_bundle.c's. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/emit.h"
#include "codegen/kernel_cache.h"
#include "codegen/nvrtc.h"
#include "graph/graph.pb-c.h"
#include "graph/loader.h"
#include "graph/ops.h"
#include "deploy/export.h"
#include "deploy/model_bundle.h"
#include "deploy/bundle_internal.h"
#include "runtime/device.h"
#include "runtime/compile.h"
#include "runtime/placement_report.h"
#include "graph/util.h"

/* ---- export --------------------------------------------------------------- */

gcc_status gcc_export_parse_archs(const char *list, gcc_export_options *o, gcc_diag *d) {
  o->n_archs = 0;
  if (!list || !*list)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "--export-archs: empty list");
  const char *p = list;
  while (*p) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    char item[32];
    if (n == 0 || n >= sizeof item)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "--export-archs '%s': expected a comma-separated list like "
                          "sm_80,sm_90",
                          list);
    memcpy(item, p, n);
    item[n] = '\0';
    int v = 0, digits = 0, ok = strncmp(item, "sm_", 3) == 0;
    for (const char *q = item + 3; ok && *q; q++, digits++) {
      ok = *q >= '0' && *q <= '9';
      v = v * 10 + (*q - '0');
    }
    if (!ok || digits < 2 || digits > 3 || v <= 0)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "--export-archs: '%s' is not an architecture like sm_80 or sm_90", item);
    for (int i = 0; i < o->n_archs; i++)
      if (o->archs[i] == v)
        return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "--export-archs: %s is listed twice",
                            item);
    if (o->n_archs == GCC_BUNDLE_MAX_ARCHS)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "--export-archs: more than %d architectures",
                          GCC_BUNDLE_MAX_ARCHS);
    gcc_status s = gcc_nvrtc_check_arch(v, d);
    if (s != GCC_OK)
      return gcc_diag_prefix(d, "--export-archs %s", item);
    o->archs[o->n_archs++] = v;
    p = e ? e + 1 : p + n;
    if (e && !*p)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "--export-archs '%s': trailing comma", list);
  }
  for (int i = 1; i < o->n_archs; i++) /* ascending */
    for (int j = i; j > 0 && o->archs[j - 1] > o->archs[j]; j--) {
      int t = o->archs[j];
      o->archs[j] = o->archs[j - 1];
      o->archs[j - 1] = t;
    }
  return GCC_OK;
}

gcc_status gcc_export_parse_batch_sizes(const char *list, gcc_export_options *o, gcc_diag *d) {
  o->n_batch_sizes = 0;
  const char *p = list ? list : "";
  if (!*p)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "--export-batch-sizes: empty list");
  for (;;) {
    if (*p < '0' || *p > '9')
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "--export-batch-sizes '%s': expected a comma-separated list of "
                          "batch sizes like 1,1000",
                          list);
    const char *end = strchr(p, ',');
    if (!end)
      end = p + strlen(p);
    char entry[32];
    int64_t v = 0;
    int fits = (size_t)(end - p) < sizeof entry;
    if (fits) {
      memcpy(entry, p, (size_t)(end - p));
      entry[end - p] = '\0';
    }
    if (!fits || !gcc_parse_i64(entry, 1, INT32_MAX, &v))
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "--export-batch-sizes '%s': each batch size must be an integer in "
                          "[1, 2^31)",
                          list);
    for (int i = 0; i < o->n_batch_sizes; i++)
      if (o->batch_sizes[i] == v)
        return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                            "--export-batch-sizes: %lld is listed twice", (long long)v);
    if (o->n_batch_sizes == GCC_BUNDLE_MAX_BATCHES)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "--export-batch-sizes: more than %d batch sizes", GCC_BUNDLE_MAX_BATCHES);
    o->batch_sizes[o->n_batch_sizes++] = v;
    if (!*end)
      break;
    p = end + 1;
  }
  for (int i = 1; i < o->n_batch_sizes; i++) /* ascending */
    for (int j = i; j > 0 && o->batch_sizes[j - 1] > o->batch_sizes[j]; j--) {
      int64_t t = o->batch_sizes[j];
      o->batch_sizes[j] = o->batch_sizes[j - 1];
      o->batch_sizes[j - 1] = t;
    }
  return GCC_OK;
}

gcc_status gcc_export_parse_precision(const char *name, gcc_export_options *o, gcc_diag *d) {
  int p = name ? gcc_precision_lookup(name) : -1;
  if (p != GCC_PRECISION_FP32 && p != GCC_PRECISION_BF16 && p != GCC_PRECISION_FP16)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--export-precision '%s': expected fp32, bf16 or fp16%s", name ? name : "",
                        p == GCC_PRECISION_TF32 ? " (tf32 is a math mode of float32 GEMMs, not a "
                                                  "storage format: export fp32)"
                                                : "");
  o->precision = p;
  return GCC_OK;
}

/* Per architecture and batch size: the CUDA plan's report, its kernels'
 * launch manifest and cubin; per batch size the PTX and the source of the
 * newest architecture. */
static gcc_status export_cuda(const gcc_graph *ig, const gcc_export_options *o,
                              const int64_t *batches, int n_batches, gcc_bundle_sections *secs,
                              gcc_diag *d) {
  gcc_status s = GCC_OK;
  for (int j = 0; j < n_batches && s == GCC_OK; j++) {
    int64_t batch = batches[j];
    char *source = NULL;
    for (int i = 0; i < o->n_archs && s == GCC_OK; i++) {
      int sm = o->archs[i];
      char arch[16], name[64];
      snprintf(arch, sizeof arch, "sm_%d", sm);
      gcc_device_info devs[2];
      gcc_device_info_cpu(&devs[0]);
      gcc_diag ignore = {0};
      if (gcc_device_info_from_arch(arch, 0, &devs[1], &ignore) != GCC_OK) {
        /* an architecture without a reference device: its compute
         * capability and the SM count of the largest part we describe
         * (grids only: every generated loop is grid-stride) */
        gcc_device_info_from_arch("sm_90", 0, &devs[1], &ignore);
        snprintf(devs[1].name, sizeof devs[1].name, "CUDA device (assumed from %s)", arch);
        devs[1].cc_major = sm / 10;
        devs[1].cc_minor = sm % 10;
      }
      gcc_graph *cg = NULL;
      char *report = NULL, *launches = NULL;
      gcc_kernel_set ks = {0};
      gcc_nvrtc_output nv = {0};
      int hit = 0;
      s = gcc_bundle_compile_for(ig, devs, 2, GCC_DEV_CUDA(0), batch, o->precision, &cg, &report,
                                 d);
      if (s == GCC_OK)
        s = gcc_codegen_emit(cg, GCC_DEV_CUDA(0), devs[1].units, &ks, d);
      if (s == GCC_OK) {
        char program[256];
        snprintf(program, sizeof program, "%s inference kernels (%d, batch %" PRId64 ")", ig->name,
                 ks.n_kernels, batch);
        s = gcc_kernel_cache_compile(NULL, o->use_kernel_cache, ks.source, program, sm, &nv, &hit,
                                     d);
      }
      if (s == GCC_OK)
        s = gcc_codegen_manifest(cg, GCC_DEV_CUDA(0), arch, &ks, &launches, d);
      if (s == GCC_OK) {
        snprintf(name, sizeof name, "plan.%s.b%" PRId64, arch, batch);
        gcc_bundle_add_section(secs, name, report, strlen(report), 1);
        report = NULL;
        snprintf(name, sizeof name, "kernels.%s.b%" PRId64, arch, batch);
        gcc_bundle_add_section(secs, name, launches, strlen(launches), 1);
        launches = NULL;
        snprintf(name, sizeof name, "cubin.%s.b%" PRId64, arch, batch);
        gcc_bundle_add_section(secs, name, nv.cubin, nv.cubin_size, 1);
        nv.cubin = NULL;
        if (i == o->n_archs - 1) { /* the newest: its PTX runs on later GPUs */
          snprintf(name, sizeof name, "ptx.b%" PRId64, batch);
          gcc_bundle_add_section(secs, name, nv.ptx, nv.ptx_size, 1);
          nv.ptx = NULL;
          source = ks.source;
          ks.source = NULL;
        }
      } else {
        gcc_diag_prefix(d, "export for %s, batch %" PRId64, arch, batch);
      }
      free(report);
      free(launches);
      gcc_nvrtc_output_free(&nv);
      gcc_kernel_set_free(&ks);
      gcc_graph_free(cg);
    }
    if (s == GCC_OK && source) {
      char name[64];
      snprintf(name, sizeof name, "source.b%" PRId64, batch);
      gcc_bundle_add_section(secs, name, source, strlen(source), 1);
    } else {
      free(source);
    }
  }
  return s;
}

gcc_status gcc_export_bundle(const gcc_graph *model, const gcc_export_options *o, const char *path,
                             gcc_diag *d) {
  if (o->n_archs < 1 || o->n_archs > GCC_BUNDLE_MAX_ARCHS)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "export: %d architectures (1 to %d)",
                        o->n_archs, GCC_BUNDLE_MAX_ARCHS);
  uint8_t *bytes;
  size_t size;
  GCC_TRY(gcc_bundle_build(model, o, export_cuda, path, &bytes, &size, d));
  gcc_status s = gcc_write_file_atomic(path, bytes, size, d);
  free(bytes);
  return s;
}
