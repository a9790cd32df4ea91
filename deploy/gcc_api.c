/* gcc_api.c - the deployment C API (deploy/gcc_api.h) over the bundle
 * reader and the plan runner. */
#include "deploy/gcc_api.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deploy/gcc_api_internal.h"
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
  int64_t runs; /* gcc_plan_run's step counter: captures start at the second use of a slot */
} plan_slot;

struct gccx_session {
  gccx_bundle *bundle;
  int device; /* GCC_DEV_CPU or GCC_DEV_CUDA(n) */
  char device_name[32];
  int threads;
  int64_t max_batch, per_sample;
  int64_t rows;      /* rows of the input set for the next run (0: none) */
  int64_t last_rows; /* rows of the last run */
  float *input;      /* the CPU: max_batch x per_sample, read by the plan in place */
  gcc_plan *staged;  /* a GPU: the plan whose pinned staging buffer holds the input */
  /* gccx_session_stats of plans since freed (a batch size replaced) */
  int64_t runs, old_replays, old_captures, plans_built;
  /* gccx_set_input_images: pixel value -> normalised float, per channel,
   * computed by the first call (lut_channels > 0 once it is) */
  float lut[GCC_MAX_CHANNELS][256];
  int lut_channels;
  plan_slot plans[2]; /* [0]: the batch of max_batch rows, [1]: the last other one */
  gcc_plan *last;     /* the plan of the last run, NULL before one */
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
  int own_cuda;       /* 1: the session created `cuda` (else a test's backend) */
  int no_cuda_graph;  /* gccx_session_set_cuda_graphs(s, 0) */
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
  gcc_plan *old = s->plans[slot].plan;
  if (old) { /* a new batch size replaces the other one: its results and staging go */
    s->old_replays += gcc_plan_graph_replays(old);
    s->old_captures += gcc_plan_graph_captures(old);
    if (s->last == old)
      s->last = NULL;
    if (s->staged == old)
      s->staged = NULL;
    gcc_plan_free(old);
  }
  s->plans[slot].plan = NULL;
  s->plans[slot].runs = 0;
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
  /* a GPU: the forward is captured into a CUDA Graph per input slot on
   * its second use and replayed after that (runtime/plan.h); the CPU
   * ignores it */
  cfg.cuda_graph = !s->no_cuda_graph;
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
  s->plans_built++;
  *out = s->plans[slot].plan;
  return GCC_OK;
}

/* The session without its device: options, sizes. */
static gcc_status session_new(gccx_bundle *b, const gccx_session_options *o, int device,
                              gccx_session **out, gcc_diag *d) {
  gccx_session *s = calloc(1, sizeof *s);
  if (!s)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (session)");
  s->bundle = b;
  atomic_fetch_add(&b->refs, 1);
  s->device = device;
  gcc_dev_name(s->device, s->device_name, sizeof s->device_name);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  s->threads = o->threads > 0 ? o->threads : (cpus > 0 ? (int)cpus : 1);
  s->max_batch = o->max_batch > 0 ? o->max_batch : 1;
  const gcc_bundle_info *info = gcc_bundle_get_info(b->b);
  s->per_sample = 1;
  for (int i = 1; i < info->input.shape.ndim; i++)
    s->per_sample *= info->input.shape.dims[i];
  *out = s;
  if (s->max_batch > ((int64_t)1 << 40) / (s->per_sample > 0 ? s->per_sample : 1))
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gccx_session_create: max_batch %lld is too large",
                        (long long)s->max_batch);
  return GCC_OK;
}

/* The kernel image for GPU `gi`: a cubin for it, else the PTX; never NVRTC
 * (compiled for the exported batch size that max_batch pads to). */
static gcc_status choose_image(gccx_session *s, const gcc_device_info *gi, gcc_diag *d) {
  char desc[200];
  snprintf(desc, sizeof desc, "%s (%s)", s->device_name, gi->name);
  int64_t batch = gcc_bundle_batch_for(s->bundle->b, s->max_batch);
  gcc_status st = gcc_bundle_kernel_image(s->bundle->b, gi->cc_major * 10 + gi->cc_minor,
                                          batch ? batch : s->max_batch, desc, &s->image,
                                          &s->image_bytes, &s->image_size, &s->launches, d);
  s->has_image = st == GCC_OK;
  return st;
}

/* A GPU session's device: backend `be`, the weights uploaded once. */
static gcc_status attach_gpu(gccx_session *s, const gcc_device_backend *be,
                             const gcc_device_info *gi, gcc_diag *d) {
  s->gpu = *gi;
  s->be = be;
  return upload_weights(s, d);
}

/* The input buffer of a CPU session, and the full-batch plan compiled now:
 * its errors surface at creation. */
static gcc_status session_finish(gccx_session *s, gcc_diag *d) {
  if (!s->be) {
    s->input = malloc((size_t)(s->max_batch * s->per_sample) * sizeof *s->input);
    if (!s->input)
      return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory: the input buffer of %lld rows",
                          (long long)s->max_batch);
  }
  gcc_plan *p;
  return plan_for(s, s->max_batch, &p, d);
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
  gccx_session *s = NULL;
  gcc_status st =
      session_new(b, o, dev.kind == GCC_DEVICE_CUDA ? GCC_DEV_CUDA(dev.index) : GCC_DEV_CPU, &s, d);
  if (st == GCC_OK && GCC_DEV_IS_CUDA(s->device)) {
    gcc_device_info gi;
    st = gcc_device_info_cuda(dev.index, &gi, d);
    gcc_diag img = {0};
    if (st == GCC_OK)
      st = choose_image(s, &gi, &img);
    if (st == GCC_ERR_UNSUPPORTED && want.kind == GCC_DEVICE_AUTO) {
      /* "auto" and a GPU the bundle has no kernels for: the CPU, saying why */
      if (note && note_cap)
        snprintf(note, note_cap, "--device auto: %s is not usable (%s); running on the CPU",
                 s->device_name, img.msg);
      s->device = GCC_DEV_CPU;
      gcc_dev_name(s->device, s->device_name, sizeof s->device_name);
      st = GCC_OK;
    } else if (st != GCC_OK && img.status != GCC_OK && d) {
      *d = img;
    }
    if (st == GCC_OK && GCC_DEV_IS_CUDA(s->device)) {
      st = gcc_cuda_backend_create(dev.index, &s->cuda, d);
      s->own_cuda = 1;
      if (st == GCC_OK)
        st = attach_gpu(s, gcc_cuda_backend_table(s->cuda), &gi, d);
    }
  }
  if (st == GCC_OK)
    st = session_finish(s, d);
  if (st != GCC_OK) {
    gccx_session_destroy(&s);
    return st;
  }
  *out = s;
  return GCC_OK;
}

gcc_status gccx_session_create_on(gccx_bundle *b, const gccx_session_options *o,
                                  const gcc_device_backend *be, const gcc_device_info *gpu,
                                  gccx_session **out, gcc_diag *d) {
  if (!out || !b || !o || !be || !gpu)
    return null_arg(d, "gccx_session_create_on", !out ? "out" : !b ? "bundle handle" : "argument");
  *out = NULL;
  gccx_session *s = NULL;
  gcc_status st = session_new(b, o, GCC_DEV_CUDA(0), &s, d);
  if (st == GCC_OK)
    st = choose_image(s, gpu, d);
  if (st == GCC_OK)
    st = attach_gpu(s, be, gpu, d);
  if (st == GCC_OK)
    st = session_finish(s, d);
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
  if (s->own_cuda)
    gcc_cuda_backend_destroy(s->cuda);
  free(s->weight_off);
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

/* Where the next input of `rows` rows goes: on the CPU, the session's
 * buffer (the plan reads it in place); on a GPU, the pinned staging buffer
 * of the plan for `rows` rows once it is free (runtime/plan.h
 * gcc_plan_input_staging), its padding rows zeroed: the caller's rows are
 * written once on the host, and go to the device from there. */
static gcc_status input_begin(gccx_session *s, int64_t rows, float **dst, gcc_diag *d) {
  s->rows = 0;
  s->staged = NULL;
  if (!s->be) {
    *dst = s->input;
    return GCC_OK;
  }
  gcc_plan *p;
  GCC_TRY(plan_for(s, rows, &p, d));
  void *buf;
  GCC_TRY(gcc_plan_input_staging(p, gcc_bundle_get_info(s->bundle->b)->input.name, &buf, d));
  int64_t batch = gcc_bundle_batch_for(s->bundle->b, rows);
  memset((float *)buf + rows * s->per_sample, 0,
         (size_t)((batch - rows) * s->per_sample) * sizeof(float));
  *dst = buf;
  s->staged = p;
  return GCC_OK;
}

/* The input is written: on a GPU, its H2D is issued now, on the copy
 * stream, so that it overlaps the batch the device is still computing. */
static gcc_status input_end(gccx_session *s, int64_t rows, float *buf, gcc_diag *d) {
  if (s->staged) {
    GCC_TRY(gcc_plan_bind_input(s->staged, gcc_bundle_get_info(s->bundle->b)->input.name, buf, d));
    GCC_TRY(gcc_plan_issue_inputs(s->staged, d));
  }
  s->rows = rows;
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
  float *dst;
  GCC_TRY(input_begin(s, rows, &dst, d));
  memcpy(dst, data, (size_t)(rows * s->per_sample) * sizeof *data);
  return input_end(s, rows, dst, d);
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
  float *buf;
  GCC_TRY(input_begin(s, rows, &buf, d));
  float *dst = buf;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < channels; c++) {
      const float *lut = s->lut[c < nc ? c : 0];
      for (int64_t i = 0; i < plane; i++)
        dst[i] = lut[src[i]];
      src += plane;
      dst += plane;
    }
  return input_end(s, rows, buf, d);
}

gcc_status gccx_run(gccx_session *s, gcc_diag *d) {
  if (!s)
    return null_arg(d, "gccx_run", "session handle");
  if (s->rows < 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gccx_run: no input set (call gccx_set_input or gccx_set_input_images)");
  const gcc_bundle_info *info = gcc_bundle_get_info(s->bundle->b);
  gcc_plan *p = s->staged;
  if (!s->be) { /* the CPU: the plan for exactly these rows reads the session's buffer */
    GCC_TRY(plan_for(s, s->rows, &p, d));
    GCC_TRY(gcc_plan_bind_input(p, info->input.name, s->input, d));
  }
  plan_slot *ps = &s->plans[p == s->plans[0].plan ? 0 : 1];
  /* a GPU: issues the step (its inputs' H2D is in flight since the input
   * was set) and returns; gccx_get_output waits for its results */
  GCC_TRY(gcc_plan_run(p, ps->runs, d));
  ps->runs++;
  s->runs++;
  s->last = p;
  s->last_rows = s->rows;
  return GCC_OK;
}

gcc_status gccx_get_output(const gccx_session *s, const char *name, const float **data,
                           int64_t *rows, int64_t *cols, gcc_diag *d) {
  if (!s)
    return null_arg(d, "gccx_get_output", "session handle");
  if (!name || !data)
    return null_arg(d, "gccx_get_output", !name ? "name" : "data");
  const gcc_bundle_info *info = gcc_bundle_get_info(s->bundle->b);
  int known = 0;
  for (int i = 0; i < info->n_outputs; i++)
    known |= strcmp(name, info->outputs[i].name) == 0;
  if (!known && info->n_outputs == 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gccx_get_output: the bundle has no output '%s' (its output is '%s')", name,
                        info->outputs[0].name);
  if (!known)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gccx_get_output: the bundle has no output '%s' (its outputs are '%s' "
                        "and '%s')",
                        name, info->outputs[0].name, info->outputs[1].name);
  if (!s->last)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gccx_get_output: no results: gccx_run has not run yet (or its batch "
                        "size's plan was replaced since)");
  /* a GPU: the read-back ring (both outputs) comes back in one D2H, once
   * the run is done; no device-wide synchronisation */
  const gcc_tensor *t = NULL;
  if (s->be) {
    GCC_TRY(gcc_plan_wait_readback(s->last, 0, d));
    t = gcc_plan_readback(s->last, name, 0);
  }
  if (!t)
    t = gcc_plan_host_tensor(s->last, name, d);
  if (!t || !t->data || t->shape.ndim < 1)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "gccx_get_output: output '%s' is not in the plan",
                        name);
  if (t->shape.dims[0] < s->last_rows)
    return gcc_diag_set(d, GCC_ERR_INTERNAL,
                        "gccx_get_output: output '%s' has %lld rows, fewer than the %lld input "
                        "rows",
                        name, (long long)t->shape.dims[0], (long long)s->last_rows);
  *data = t->data;
  if (rows) /* a device plan's batch is padded: the first last_rows rows are the answer */
    *rows = s->last_rows;
  if (cols) { /* the values per row: C for logits, d1 x ... x dk for a tensor output */
    int64_t per_row = 1;
    for (int i = 1; i < t->shape.ndim; i++)
      per_row *= t->shape.dims[i];
    *cols = per_row;
  }
  return GCC_OK;
}

gcc_status gccx_bundle_output_count(const gccx_bundle *b, int *n, gcc_diag *d) {
  if (!b)
    return null_arg(d, "gccx_bundle_output_count", "bundle handle");
  if (!n)
    return null_arg(d, "gccx_bundle_output_count", "n");
  *n = gcc_bundle_get_info(b->b)->n_outputs;
  return GCC_OK;
}

gcc_status gccx_bundle_output(const gccx_bundle *b, int index, const gcc_bundle_tensor **out,
                              gcc_diag *d) {
  if (!b)
    return null_arg(d, "gccx_bundle_output", "bundle handle");
  if (!out)
    return null_arg(d, "gccx_bundle_output", "out");
  const gcc_bundle_info *info = gcc_bundle_get_info(b->b);
  if (index < 0 || index >= info->n_outputs)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gccx_bundle_output: output %d; the bundle has %d (0 to %d)", index,
                        info->n_outputs, info->n_outputs - 1);
  *out = &info->outputs[index];
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

gcc_status gccx_session_stats(const gccx_session *s, gccx_run_stats *out, gcc_diag *d) {
  if (!s)
    return null_arg(d, "gccx_session_stats", "session handle");
  if (!out)
    return null_arg(d, "gccx_session_stats", "out");
  memset(out, 0, sizeof *out);
  out->runs = s->runs;
  out->replays = s->old_replays;
  out->captures = s->old_captures;
  out->plans = s->plans_built;
  for (int i = 0; i < 2; i++)
    if (s->plans[i].plan) {
      out->replays += gcc_plan_graph_replays(s->plans[i].plan);
      out->captures += gcc_plan_graph_captures(s->plans[i].plan);
    }
  const char *note = !s->be    ? "the CPU runs no CUDA Graphs"
                     : s->last ? gcc_plan_graph_note(s->last)
                               : "";
  snprintf(out->graph_note, sizeof out->graph_note, "%s", note);
  return GCC_OK;
}

gcc_status gccx_session_set_cuda_graphs(gccx_session *s, int on, gcc_diag *d) {
  if (!s)
    return null_arg(d, "gccx_session_set_cuda_graphs", "session handle");
  if (!s->be || s->no_cuda_graph == !on)
    return GCC_OK;
  s->no_cuda_graph = !on;
  for (int i = 0; i < 2; i++)
    if (s->plans[i].plan) {
      s->old_replays += gcc_plan_graph_replays(s->plans[i].plan);
      s->old_captures += gcc_plan_graph_captures(s->plans[i].plan);
      gcc_plan_free(s->plans[i].plan);
      s->plans[i].plan = NULL;
    }
  s->last = s->staged = NULL;
  s->rows = 0;
  return GCC_OK;
}
