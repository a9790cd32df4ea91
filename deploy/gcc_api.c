/* gcc_api.c - the deployment C API (deploy/gcc_api.h) over the bundle
 * reader and the plan runner. */
#include "deploy/gcc_api.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deploy/model_bundle.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/device.h"
#include "runtime/plan.h"

struct gccx_bundle {
  gcc_bundle *b;
  atomic_int refs; /* the caller's handle (until closed) + one per session */
};

/* A compiled plan and the batch it runs: the rows themselves on the CPU,
 * the exported batch size they pad to on a GPU. */
typedef struct plan_slot {
  int64_t batch;
  gcc_plan *plan;
} plan_slot;

struct gccx_session {
  gccx_bundle *bundle;
  int device; /* GCC_DEV_CPU or GCC_DEV_CUDA(n) */
  char device_name[32];
  int threads;
  int64_t max_batch, per_sample, rows;
  float *input; /* max_batch x per_sample */
  /* gccx_set_input_images: pixel value -> normalised float, per channel,
   * computed by the first call (lut_channels > 0 once it is) */
  float lut[GCC_MAX_CHANNELS][256];
  int lut_channels;
  plan_slot plans[2]; /* [0]: the batch of max_batch rows, [1]: the last other one */
  gcc_plan *last;     /* the plan of the last run, NULL before one (or after new input) */
  int has_image;
  gcc_kernel_image image;
  const void *image_bytes;
  size_t image_size;
  const char *launches;
  /* CUDA: the backend, the bundle's weights on the device; plans are built
   * per exported batch size used (runs are padded to it), from the bundle's
   * kernel images */
  gcc_cuda_backend *cuda;
  const gcc_device_backend *be;
  gcc_device_info gpu;
  void *dev_weights;
  size_t *weight_off; /* per value of the bundle graph */
  float *padded;      /* the input, padded to the plan's batch */
};

static gcc_status null_arg(gcc_diag *d, const char *fn, const char *what) {
  return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s: %s is NULL%s", fn, what,
                      strstr(what, "handle") ? " (closed or never opened?)" : "");
}

static void bundle_unref(gccx_bundle *b) {
  if (b && atomic_fetch_sub(&b->refs, 1) == 1) {
    gcc_bundle_free(b->b);
    free(b);
  }
}

static gcc_status wrap(gcc_bundle *raw, gccx_bundle **out, gcc_diag *d) {
  gccx_bundle *b = calloc(1, sizeof *b);
  if (!b) {
    gcc_bundle_free(raw);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (bundle)");
  }
  b->b = raw;
  atomic_init(&b->refs, 1);
  *out = b;
  return GCC_OK;
}

gcc_status gccx_bundle_open(const char *path, gccx_bundle **out, gcc_diag *d) {
  if (!out)
    return null_arg(d, "gccx_bundle_open", "out");
  *out = NULL;
  if (!path)
    return null_arg(d, "gccx_bundle_open", "path");
  gcc_bundle *raw;
  GCC_TRY(gcc_bundle_open(path, &raw, d));
  return wrap(raw, out, d);
}

gcc_status gccx_bundle_open_memory(const void *bytes, size_t size, const char *name,
                                   gccx_bundle **out, gcc_diag *d) {
  if (!out)
    return null_arg(d, "gccx_bundle_open_memory", "out");
  *out = NULL;
  if (!bytes)
    return null_arg(d, "gccx_bundle_open_memory", "bytes");
  gcc_bundle *raw;
  GCC_TRY(gcc_bundle_open_bytes(bytes, size, name ? name : "<memory>", &raw, d));
  return wrap(raw, out, d);
}

void gccx_bundle_close(gccx_bundle **b) {
  if (!b || !*b)
    return;
  bundle_unref(*b);
  *b = NULL;
}

gcc_status gccx_bundle_info(const gccx_bundle *b, const gcc_bundle_info **info, gcc_diag *d) {
  if (!b)
    return null_arg(d, "gccx_bundle_info", "bundle handle");
  if (!info)
    return null_arg(d, "gccx_bundle_info", "info");
  *info = gcc_bundle_get_info(b->b);
  return GCC_OK;
}

const gcc_bundle *gccx_bundle_raw(const gccx_bundle *b) {
  return b ? b->b : NULL;
}

/* Parameters are the bundle graph's initializers: the compiled graph's
 * value is found there by name (read only in inference); on a GPU, in the
 * weights uploaded once. */
static void *bind_weights(void *user, const gcc_graph *g, int v) {
  const gccx_session *s = user;
  const gcc_graph *m = gcc_bundle_graph(s->bundle->b);
  int mv = gcc_graph_find(m, g->values[v].name);
  if (mv < 0 || m->values[mv].kind != GCC_VALUE_PARAM)
    return NULL;
  return s->be ? (char *)s->dev_weights + s->weight_off[mv] : m->values[mv].data;
}

static gcc_status upload_weights(gccx_session *s, gcc_diag *d) {
  const gcc_graph *m = gcc_bundle_graph(s->bundle->b);
  s->weight_off = calloc((size_t)(m->n_values ? m->n_values : 1), sizeof *s->weight_off);
  if (!s->weight_off)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (weights)");
  size_t total = 0;
  for (int v = 0; v < m->n_values; v++)
    if (m->values[v].kind == GCC_VALUE_PARAM) {
      s->weight_off[v] = total;
      total += (m->values[v].data_bytes + 255) / 256 * 256;
    }
  GCC_TRY(s->be->alloc(s->be->self, total ? total : 256, &s->dev_weights, d));
  void *stage = NULL;
  GCC_TRY(s->be->host_alloc(s->be->self, total ? total : 256, &stage, d));
  for (int v = 0; v < m->n_values; v++)
    if (m->values[v].kind == GCC_VALUE_PARAM)
      memcpy((char *)stage + s->weight_off[v], m->values[v].data, m->values[v].data_bytes);
  gcc_status st =
      s->be->copy(s->be->self, s->dev_weights, stage, total, GCC_COPY_H2D, GCC_STREAM_COMPUTE, d);
  if (st == GCC_OK)
    st = s->be->sync(s->be->self, d);
  s->be->host_release(s->be->self, stage);
  return st;
}

/* The plan for `rows` rows: on the CPU, compiled for exactly that batch;
 * on a GPU, for the exported batch size they pad to, its kernels loaded
 * from the bundle's image (no NVRTC). */
static gcc_status plan_for(gccx_session *s, int64_t rows, gcc_plan **out, gcc_diag *d) {
  int64_t batch = rows;
  if (s->be) {
    batch = gcc_bundle_batch_for(s->bundle->b, rows);
    if (batch <= 0)
      return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                          "gccx_run: %lld rows exceed every batch size the bundle has kernels for",
                          (long long)rows);
  }
  int64_t full = s->be ? gcc_bundle_batch_for(s->bundle->b, s->max_batch) : s->max_batch;
  int slot = batch == full ? 0 : 1;
  if (s->plans[slot].plan && s->plans[slot].batch == batch) {
    *out = s->plans[slot].plan;
    return GCC_OK;
  }
  gcc_plan_free(s->plans[slot].plan);
  s->plans[slot].plan = NULL;
  gcc_options o = {0};
  o.mode = GCC_MODE_EVAL;
  o.batch_size = batch;
  /* the bundle's precision: the plan its kernels were compiled from */
  o.precision = gcc_bundle_get_info(s->bundle->b)->precision;
  o.device = s->device;
  o.device_explicit = 1;
  o.n_cuda_devices = GCC_DEV_IS_CUDA(s->device) ? GCC_DEV_CUDA_INDEX(s->device) + 1 : 1;
  gcc_plan_config cfg = {0};
  cfg.threads = s->threads;
  cfg.readback_ring = 1;
  gcc_nvrtc_output image = {0};
  if (s->be) {
    char desc[200];
    snprintf(desc, sizeof desc, "%s (%s)", s->device_name, s->gpu.name);
    gcc_kernel_image img;
    const void *bytes;
    size_t size;
    const char *launches;
    GCC_TRY(gcc_bundle_kernel_image(s->bundle->b, s->gpu.cc_major * 10 + s->gpu.cc_minor, batch,
                                    desc, &img, &bytes, &size, &launches, d));
    if (img.kind == GCC_IMAGE_CUBIN) {
      image.cubin = (void *)bytes;
      image.cubin_size = size;
    } else {
      image.ptx = (char *)bytes;
      image.ptx_size = size;
    }
    cfg.device = s->be;
    cfg.sm = s->gpu.cc_major * 10 + s->gpu.cc_minor;
    cfg.sm_count = s->gpu.units;
    cfg.image = &image;
    cfg.image_arch = img.arch;
  }
  GCC_TRY(gcc_plan_compile(gcc_bundle_graph(s->bundle->b), &o, &cfg, bind_weights, s,
                           &s->plans[slot].plan, d));
  s->plans[slot].batch = batch;
  *out = s->plans[slot].plan;
  return GCC_OK;
}

gcc_status gccx_session_create(gccx_bundle *b, const gccx_session_options *o, gccx_session **out,
                               char *note, size_t note_cap, gcc_diag *d) {
  if (!out)
    return null_arg(d, "gccx_session_create", "out");
  *out = NULL;
  if (note && note_cap)
    note[0] = '\0';
  if (!b)
    return null_arg(d, "gccx_session_create", "bundle handle");
  gccx_session_options defaults = {"auto", 0, 1};
  if (!o)
    o = &defaults;
  gcc_device want, dev;
  GCC_TRY(gcc_device_parse(o->device ? o->device : "auto", &want, d));
  char why[768] = "";
  /* no NVRTC check here: a bundle carries its kernels; whether they fit
   * the GPU is the image choice below */
  GCC_TRY(gcc_device_resolve(&want, NULL, &dev, why, sizeof why, d));
  if (note && note_cap && why[0])
    snprintf(note, note_cap, "%s", why);
  gccx_session *s = calloc(1, sizeof *s);
  if (!s)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (session)");
  s->bundle = b;
  atomic_fetch_add(&b->refs, 1);
  s->device = dev.kind == GCC_DEVICE_CUDA ? GCC_DEV_CUDA(dev.index) : GCC_DEV_CPU;
  gcc_dev_name(s->device, s->device_name, sizeof s->device_name);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  s->threads = o->threads > 0 ? o->threads : (cpus > 0 ? (int)cpus : 1);
  s->max_batch = o->max_batch > 0 ? o->max_batch : 1;
  const gcc_bundle_info *info = gcc_bundle_get_info(b->b);
  s->per_sample = 1;
  for (int i = 1; i < info->input.shape.ndim; i++)
    s->per_sample *= info->input.shape.dims[i];
  gcc_status st = GCC_OK;
  if (s->max_batch > ((int64_t)1 << 40) / (s->per_sample > 0 ? s->per_sample : 1))
    st = gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                      "gccx_session_create: max_batch %lld is too "
                      "large",
                      (long long)s->max_batch);
  if (st == GCC_OK && GCC_DEV_IS_CUDA(s->device)) {
    /* the kernels: a cubin for this GPU, else the PTX; never NVRTC */
    gcc_device_info gi;
    st = gcc_device_info_cuda(dev.index, &gi, d);
    if (st == GCC_OK) {
      char desc[200];
      snprintf(desc, sizeof desc, "%s (%s)", s->device_name, gi.name);
      /* kernels for the exported batch size that max_batch pads to */
      int64_t batch = gcc_bundle_batch_for(b->b, s->max_batch);
      gcc_diag img = {0};
      st = gcc_bundle_kernel_image(b->b, gi.cc_major * 10 + gi.cc_minor,
                                   batch ? batch : s->max_batch, desc, &s->image, &s->image_bytes,
                                   &s->image_size, &s->launches, &img);
      s->has_image = st == GCC_OK;
      if (st == GCC_ERR_UNSUPPORTED && want.kind == GCC_DEVICE_AUTO) {
        /* "auto" and a GPU the bundle has no kernels for: the CPU, saying why */
        if (note && note_cap)
          snprintf(note, note_cap, "--device auto: %s is not usable (%s); running on the CPU",
                   s->device_name, img.msg);
        s->device = GCC_DEV_CPU;
        gcc_dev_name(s->device, s->device_name, sizeof s->device_name);
        st = GCC_OK;
      } else if (st != GCC_OK && d) {
        *d = img;
      }
    }
    if (st == GCC_OK && GCC_DEV_IS_CUDA(s->device)) {
      s->gpu = gi;
      st = gcc_cuda_backend_create(dev.index, &s->cuda, d);
    }
    if (st == GCC_OK && s->cuda) {
      s->be = gcc_cuda_backend_table(s->cuda);
      st = upload_weights(s, d);
    }
    if (st == GCC_OK && s->cuda) {
      int64_t batch = gcc_bundle_batch_for(b->b, s->max_batch);
      s->padded = calloc((size_t)((batch ? batch : s->max_batch) * s->per_sample), sizeof(float));
      if (!s->padded)
        st = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (padded input)");
    }
  }
  if (st == GCC_OK) {
    s->input = malloc((size_t)(s->max_batch * s->per_sample) * sizeof *s->input);
    if (!s->input)
      st = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory: the input buffer of %lld rows",
                        (long long)s->max_batch);
  }
  if (st == GCC_OK) { /* compile the full-batch plan now: errors surface here */
    gcc_plan *p;
    st = plan_for(s, s->max_batch, &p, d);
  }
  if (st != GCC_OK) {
    gccx_session_destroy(&s);
    return st;
  }
  *out = s;
  return GCC_OK;
}

void gccx_session_destroy(gccx_session **sp) {
  if (!sp || !*sp)
    return;
  gccx_session *s = *sp;
  for (int i = 0; i < 2; i++)
    gcc_plan_free(s->plans[i].plan);
  if (s->dev_weights)
    s->be->release(s->be->self, s->dev_weights);
  gcc_cuda_backend_destroy(s->cuda);
  free(s->weight_off);
  free(s->padded);
  free(s->input);
  bundle_unref(s->bundle);
  free(s);
  *sp = NULL;
}

const char *gccx_session_device(const gccx_session *s) {
  return s ? s->device_name : NULL;
}

static gcc_status check_rows(const gccx_session *s, const char *fn, int64_t rows, gcc_diag *d) {
  if (rows < 1 || rows > s->max_batch)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: %lld rows; the session takes 1 to %lld (its max_batch)", fn,
                        (long long)rows, (long long)s->max_batch);
  return GCC_OK;
}

gcc_status gccx_set_input(gccx_session *s, const char *name, const float *data, int64_t rows,
                          gcc_diag *d) {
  if (!s)
    return null_arg(d, "gccx_set_input", "session handle");
  if (!name || !data)
    return null_arg(d, "gccx_set_input", !name ? "name" : "data");
  const gcc_bundle_info *info = gcc_bundle_get_info(s->bundle->b);
  if (strcmp(name, info->input.name) != 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gccx_set_input: the bundle has no input '%s' (its input is '%s')", name,
                        info->input.name);
  GCC_TRY(check_rows(s, "gccx_set_input", rows, d));
  memcpy(s->input, data, (size_t)(rows * s->per_sample) * sizeof *data);
  s->rows = rows;
  s->last = NULL;
  return GCC_OK;
}

gcc_status gccx_set_input_images(gccx_session *s, const uint8_t *pixels, int64_t rows,
                                 gcc_diag *d) {
  if (!s)
    return null_arg(d, "gccx_set_input_images", "session handle");
  if (!pixels)
    return null_arg(d, "gccx_set_input_images", "pixels");
  GCC_TRY(check_rows(s, "gccx_set_input_images", rows, d));
  const gcc_bundle_info *info = gcc_bundle_get_info(s->bundle->b);
  int64_t channels = info->input.shape.ndim == 4 ? info->input.shape.dims[1] : 1;
  int64_t plane = s->per_sample / channels;
  if (channels > GCC_MAX_CHANNELS && (info->n_mean > 1 || info->n_std > 1))
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "gccx_set_input_images: %lld channels with per-channel normalization",
                        (long long)channels);
  /* one lookup table per channel, computed as datasets/dataloader.c does,
   * once per session */
  int nc = channels < GCC_MAX_CHANNELS ? (int)channels : GCC_MAX_CHANNELS;
  if (s->lut_channels != nc) {
    for (int c = 0; c < nc; c++) {
      float mean = info->n_mean == 0 ? 0.0f : info->mean[info->n_mean == 1 ? 0 : c];
      float std = info->n_std == 0 ? 1.0f : info->std[info->n_std == 1 ? 0 : c];
      for (int p = 0; p < 256; p++)
        s->lut[c][p] = ((float)p / 255.0f - mean) / std;
    }
    s->lut_channels = nc;
  }
  /* NCHW (or one plane per sample): a plain gather per channel plane */
  const uint8_t *src = pixels;
  float *dst = s->input;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < channels; c++) {
      const float *lut = s->lut[c < nc ? c : 0];
      for (int64_t i = 0; i < plane; i++)
        dst[i] = lut[src[i]];
      src += plane;
      dst += plane;
    }
  s->rows = rows;
  s->last = NULL;
  return GCC_OK;
}

gcc_status gccx_run(gccx_session *s, gcc_diag *d) {
  if (!s)
    return null_arg(d, "gccx_run", "session handle");
  if (s->rows < 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gccx_run: no input set (call gccx_set_input or gccx_set_input_images)");
  const gcc_bundle_info *info = gcc_bundle_get_info(s->bundle->b);
  gcc_plan *p;
  GCC_TRY(plan_for(s, s->rows, &p, d));
  const float *in = s->input;
  if (s->be) { /* on a GPU: the rows, padded with zeros to the plan's batch */
    int64_t batch = gcc_bundle_batch_for(s->bundle->b, s->rows);
    memcpy(s->padded, s->input, (size_t)(s->rows * s->per_sample) * sizeof(float));
    memset(s->padded + s->rows * s->per_sample, 0,
           (size_t)((batch - s->rows) * s->per_sample) * sizeof(float));
    in = s->padded;
  }
  GCC_TRY(gcc_plan_bind_input(p, info->input.name, in, d));
  GCC_TRY(gcc_plan_run(p, 0, d));
  GCC_TRY(gcc_plan_sync(p, d));
  s->last = p;
  return GCC_OK;
}

gcc_status gccx_get_output(const gccx_session *s, const char *name, const float **data,
                           int64_t *rows, int64_t *cols, gcc_diag *d) {
  if (!s)
    return null_arg(d, "gccx_get_output", "session handle");
  if (!name || !data)
    return null_arg(d, "gccx_get_output", !name ? "name" : "data");
  const gcc_bundle_info *info = gcc_bundle_get_info(s->bundle->b);
  if (strcmp(name, info->outputs[0].name) != 0 && strcmp(name, info->outputs[1].name) != 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gccx_get_output: the bundle has no output '%s' (its outputs are '%s' "
                        "and '%s')",
                        name, info->outputs[0].name, info->outputs[1].name);
  if (!s->last)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gccx_get_output: no results: gccx_run has not run since the input "
                        "was set");
  const gcc_tensor *t = gcc_plan_host_tensor(s->last, name, d);
  if (!t || !t->data || t->shape.ndim != 2)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "gccx_get_output: output '%s' is not in the plan",
                        name);
  if (t->shape.dims[0] < s->rows)
    return gcc_diag_set(d, GCC_ERR_INTERNAL,
                        "gccx_get_output: output '%s' has %lld rows, fewer than the %lld input "
                        "rows",
                        name, (long long)t->shape.dims[0], (long long)s->rows);
  *data = t->data;
  if (rows) /* a device plan's batch is padded: the first s->rows rows are the answer */
    *rows = s->rows;
  if (cols)
    *cols = t->shape.dims[1];
  return GCC_OK;
}

gcc_status gccx_session_kernel_image(const gccx_session *s, gcc_kernel_image *img,
                                     const void **image, size_t *image_size, const char **launches,
                                     gcc_diag *d) {
  if (!s)
    return null_arg(d, "gccx_session_kernel_image", "session handle");
  if (!s->has_image)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gccx_session_kernel_image: the session runs on %s, which loads no "
                        "kernel image",
                        s->device_name);
  if (img)
    *img = s->image;
  if (image)
    *image = s->image_bytes;
  if (image_size)
    *image_size = s->image_size;
  if (launches)
    *launches = s->launches;
  return GCC_OK;
}
