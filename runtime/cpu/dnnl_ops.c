/*
 * dnnl_ops.c - oneDNN 2.6 primitives for the CPU backend (see dnnl_ops.h).
 *
 * Structure: a context holds the engine, the stream and a primitive cache
 * (a list of primitive descriptors and primitives keyed on a flat array of
 * every number that changes the primitive). An op is one or two "steps",
 * each a cached primitive with its execution arguments; an argument's
 * storage is one of the run's pointers or a region of the scratch. oneDNN's
 * scratchpad is in user mode, so the caller's scratch holds it too.
 */
#include "runtime/cpu/dnnl_ops.h"

#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include "runtime/cpu/dnnl_internal.h"

#if DNNL_VERSION_MAJOR != 2 || DNNL_VERSION_MINOR < 6
#error "runtime/cpu/dnnl_ops.c is written against the oneDNN 2.6 C API (Debian 12 libdnnl-dev)"
#endif
#if DNNL_CPU_RUNTIME != DNNL_RUNTIME_OMP
#error "runtime/cpu/dnnl_ops.c expects oneDNN's OpenMP CPU runtime (Debian's build)"
#endif

/* ---- errors ---------------------------------------------------------------- */

static gcc_status status_of(dnnl_status_t st) {
  switch (st) {
  case dnnl_unimplemented: return GCC_ERR_UNSUPPORTED;
  case dnnl_invalid_arguments: return GCC_ERR_INVALID_ARGUMENT;
  case dnnl_out_of_memory: return GCC_ERR_OUT_OF_MEMORY;
  default: return GCC_ERR_DEVICE;
  }
}

gcc_status gdn_fail(gcc_diag *d, const char *fn, dnnl_status_t st, const char *what) {
  return gcc_diag_set(d, status_of(st), "oneDNN: %s failed (%s) for %s", fn, dnnl_status2str(st),
                      what);
}

/* The OpenMP thread count oneDNN sizes a primitive for and runs it with:
 * the calling thread's ICV (omp_set_num_threads). */
static void use_threads(int threads) {
  if (omp_get_max_threads() != threads)
    omp_set_num_threads(threads);
}

gcc_status gcc_dnnl_create(int threads, gcc_dnnl **out, gcc_diag *d) {
  const char *what = "the CPU engine";
  gcc_status s = GCC_OK;
  *out = NULL;
  if (threads < 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "oneDNN context: threads = %d (want >= 0)",
                        threads);
  gcc_dnnl *dn = calloc(1, sizeof *dn);
  if (!dn)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (oneDNN context)");
  dn->threads = threads > 0 ? threads : omp_get_max_threads();
  const char *wp = getenv("OMP_WAIT_POLICY");
  dn->passive = wp && strcasecmp(wp, "passive") == 0;
  if (dnnl_engine_get_count(dnnl_cpu) < 1) {
    free(dn);
    return gcc_diag_set(d, GCC_ERR_DEVICE, "oneDNN: dnnl_engine_get_count: no CPU engine");
  }
  DNNL_CALL(dnnl_engine_create, (&dn->engine, dnnl_cpu, 0));
  DNNL_CALL(dnnl_stream_create, (&dn->stream, dn->engine, dnnl_stream_default_flags));
  *out = dn;
  return GCC_OK;
fail:
  gcc_dnnl_free(dn);
  return s;
}

void gcc_dnnl_free(gcc_dnnl *dn) {
  if (!dn)
    return;
  for (int i = 0; i < dn->n_cache; i++) {
    dnnl_primitive_destroy(dn->cache[i]->prim);
    dnnl_primitive_desc_destroy(dn->cache[i]->pd);
    free(dn->cache[i]);
  }
  free(dn->cache);
  if (dn->stream)
    dnnl_stream_destroy(dn->stream);
  if (dn->engine)
    dnnl_engine_destroy(dn->engine);
  free(dn);
}

int gcc_dnnl_threads(const gcc_dnnl *dn) {
  return dn->threads;
}

void gcc_dnnl_cache_stats(const gcc_dnnl *dn, int *entries, int64_t *hits, int64_t *misses) {
  if (entries)
    *entries = dn->n_cache;
  if (hits)
    *hits = dn->hits;
  if (misses)
    *misses = dn->misses;
}

const char *gcc_dnnl_version(void) {
  static char buf[32];
  const dnnl_version_t *v = dnnl_version();
  snprintf(buf, sizeof buf, "%d.%d.%d", v->major, v->minor, v->patch);
  return buf;
}

const char *gcc_dnnl_isa(void) {
  switch (dnnl_get_effective_cpu_isa()) {
  case dnnl_cpu_isa_sse41: return "SSE4.1";
  case dnnl_cpu_isa_avx: return "AVX";
  case dnnl_cpu_isa_avx2: return "AVX2";
  case dnnl_cpu_isa_avx2_vnni: return "AVX2 with VNNI";
  case dnnl_cpu_isa_avx512_mic: return "AVX-512 (Xeon Phi)";
  case dnnl_cpu_isa_avx512_mic_4ops: return "AVX-512 (Xeon Phi, 4 ops)";
  case dnnl_cpu_isa_avx512_core: return "AVX-512";
  case dnnl_cpu_isa_avx512_core_vnni: return "AVX-512 with VNNI";
  case dnnl_cpu_isa_avx512_core_bf16: return "AVX-512 with VNNI and BF16";
  case dnnl_cpu_isa_avx512_core_amx: return "AVX-512 with VNNI, BF16 and AMX";
  default: return "baseline x86-64";
  }
}

gcc_status gcc_dnnl_set_verbose(int level, gcc_diag *d) {
  const char *what = "the verbose level";
  DNNL_RET(dnnl_set_verbose, (level));
  return GCC_OK;
}

/* The cached primitive of `key` (its v[1] is the thread count it runs
 * with), or a new one from `build`. `mds` (two memory descriptors, or NULL)
 * must match too: reorders are keyed on their descriptors. */
gcc_status gdn_cache_get_mds(gcc_dnnl *dn, const prim_key *key, const dnnl_memory_desc_t *mds,
                             pd_builder build, const void *desc, const char *what,
                             cache_entry **out, gcc_diag *d) {
  for (int i = 0; i < dn->n_cache; i++) {
    const cache_entry *e = dn->cache[i];
    if (e->key.n == key->n && memcmp(e->key.v, key->v, (size_t)key->n * sizeof key->v[0]) == 0 &&
        (!mds || (e->has_mds && dnnl_memory_desc_equal(&e->from, &mds[0]) &&
                  dnnl_memory_desc_equal(&e->to, &mds[1])))) {
      dn->hits++;
      *out = dn->cache[i];
      return GCC_OK;
    }
  }
  gcc_status s = GCC_OK;
  dnnl_primitive_attr_t attr = NULL;
  cache_entry *e = calloc(1, sizeof *e);
  if (!e)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (oneDNN primitive cache)");
  e->key = *key;
  if (mds) {
    e->has_mds = 1;
    e->from = mds[0];
    e->to = mds[1];
  }
  use_threads((int)key->v[1]); /* implementations size their blocking by the thread count */
  DNNL_CALL(dnnl_primitive_attr_create, (&attr));
  DNNL_CALL(dnnl_primitive_attr_set_scratchpad_mode, (attr, dnnl_scratchpad_mode_user));
  s = build(dn, desc, attr, &e->pd, what, d);
  if (s != GCC_OK)
    goto fail;
  DNNL_CALL(dnnl_primitive_create, (&e->prim, e->pd));
  DNNL_CALL(dnnl_primitive_desc_query, (e->pd, dnnl_query_impl_info_str, 0, &e->impl));
  e->scratchpad =
      dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(e->pd, dnnl_query_scratchpad_md, 0));
  e->workspace =
      dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(e->pd, dnnl_query_workspace_md, 0));
  if (dn->n_cache == dn->cap_cache) {
    int cap = dn->cap_cache ? 2 * dn->cap_cache : 16;
    cache_entry **c = realloc(dn->cache, (size_t)cap * sizeof *c);
    if (!c) {
      s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (oneDNN primitive cache)");
      goto fail;
    }
    dn->cache = c;
    dn->cap_cache = cap;
  }
  dnnl_primitive_attr_destroy(attr);
  dn->cache[dn->n_cache++] = e;
  dn->misses++;
  *out = e;
  return GCC_OK;
fail:
  if (attr)
    dnnl_primitive_attr_destroy(attr);
  if (e->prim)
    dnnl_primitive_destroy(e->prim);
  if (e->pd)
    dnnl_primitive_desc_destroy(e->pd);
  free(e);
  return s;
}

gcc_status gdn_cache_get(gcc_dnnl *dn, const prim_key *key, pd_builder build, const void *desc,
                         const char *what, cache_entry **out, gcc_diag *d) {
  return gdn_cache_get_mds(dn, key, NULL, build, desc, what, out, d);
}

gcc_status gdn_op_new(gcc_dnnl *dn, int n_ptrs, gcc_dnnl_op **out, gcc_diag *d) {
  gcc_dnnl_op *op = calloc(1, sizeof *op);
  if (!op)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (oneDNN op)");
  op->dn = dn;
  op->threads = dn->threads;
  op->n_ptrs = n_ptrs;
  *out = op;
  return GCC_OK;
}

void gcc_dnnl_op_free(gcc_dnnl_op *op) {
  if (!op)
    return;
  for (int s = 0; s < op->n_steps; s++)
    for (int i = 0; i < op->step[s].n_args; i++)
      if (op->step[s].args[i].memory)
        dnnl_memory_destroy(op->step[s].args[i].memory);
  free(op->corr_h);
  free(op->corr_w);
  free(op);
}

/* Adds a step running cache entry `e`; its arguments follow with gdn_op_arg. */
op_step *gdn_op_step_add(gcc_dnnl_op *op, cache_entry *e) {
  op_step *st = &op->step[op->n_steps++];
  st->e = e;
  return st;
}

/* Argument `arg` (DNNL_ARG_*) of step `st`, stored in run pointer `index`
 * (FROM_PTR) or at byte offset `index` of the scratch (FROM_SCRATCH); its
 * memory descriptor is the one the primitive expects (dnnl_query_exec_arg_md). */
gcc_status gdn_op_arg(gcc_dnnl_op *op, op_step *st, int arg, arg_src src, int64_t index,
                      const char *what, gcc_diag *d) {
  gcc_status s = GCC_OK;
  const dnnl_memory_desc_t *md =
      dnnl_primitive_desc_query_md(st->e->pd, dnnl_query_exec_arg_md, arg);
  if (!md || md->ndims == 0)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "oneDNN: %s: the primitive (%s) has no argument %d",
                        what, st->e->impl, arg);
  int i = st->n_args;
  if (i == MAX_ARGS)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "oneDNN: %s: too many arguments", what);
  DNNL_CALL(dnnl_memory_create, (&st->args[i].memory, md, op->dn->engine, DNNL_MEMORY_NONE));
  st->args[i].arg = arg;
  st->src[i] = src;
  st->index[i] = index;
  st->n_args++;
  return GCC_OK;
fail:
  return s;
}

/* The scratchpad argument of every step, at offset op->temps, and the total. */
gcc_status gdn_op_finish(gcc_dnnl_op *op, const char *what, gcc_diag *d) {
  size_t pad = 0;
  for (int k = 0; k < op->n_steps; k++) {
    op_step *st = &op->step[k];
    if (st->e->scratchpad) {
      GCC_TRY(gdn_op_arg(op, st, DNNL_ARG_SCRATCHPAD, FROM_SCRATCH, (int64_t)align_up(op->temps),
                         what, d));
      pad = st->e->scratchpad > pad ? st->e->scratchpad : pad;
    }
  }
  op->scratch_bytes = pad ? align_up(op->temps) + align_up(pad) : align_up(op->temps);
  return GCC_OK;
}

size_t gcc_dnnl_op_scratch_bytes(const gcc_dnnl_op *op) {
  return op->scratch_bytes;
}
size_t gcc_dnnl_op_workspace_bytes(const gcc_dnnl_op *op) {
  return op->workspace;
}
const char *gcc_dnnl_op_name(const gcc_dnnl_op *op) {
  return op->name;
}
const char *gcc_dnnl_op_impl(const gcc_dnnl_op *op) {
  if (op->impl[0])
    return op->impl;
  return op->step[op->main_step].e->impl;
}

gcc_status gcc_dnnl_op_run(gcc_dnnl_op *op, void *const *ptrs, void *scratch, gcc_diag *d) {
  const char *what = op->name;
  if (op->scratch_bytes && !scratch)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "oneDNN: %s needs %zu bytes of scratch, got none", op->name,
                        op->scratch_bytes);
  use_threads(op->threads);
  if (op->custom) {
    for (int i = 0; i < op->n_ptrs; i++)
      if (!ptrs[i] && i != op->optional_ptr)
        return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                            "oneDNN: %s: operand %d of the run is NULL", op->name, i);
    op->custom(op, ptrs, scratch);
    return GCC_OK;
  }
  if (op->pre)
    op->pre(op, ptrs, scratch);
  for (int k = 0; k < op->n_steps; k++) {
    op_step *st = &op->step[k];
    for (int i = 0; i < st->n_args; i++) {
      void *p = st->src[i] == FROM_PTR ? ptrs[st->index[i]] : (char *)scratch + st->index[i];
      if (!p)
        return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                            "oneDNN: %s: operand %" PRId64 " of the run is NULL", op->name,
                            st->index[i]);
      if (p != st->bound[i]) {
        DNNL_RET(dnnl_memory_set_data_handle, (st->args[i].memory, p));
        st->bound[i] = p;
      }
    }
    DNNL_RET(dnnl_primitive_execute, (st->e->prim, op->dn->stream, st->n_args, st->args));
  }
  DNNL_RET(dnnl_stream_wait, (op->dn->stream));
  if (op->post)
    op->post(op, ptrs, scratch);
  return GCC_OK;
}

/* ---- memory descriptors ------------------------------------------------------ */

gcc_status gdn_md_strided(dnnl_memory_desc_t *md, int nd, const int64_t *dims,
                          const int64_t *strides, const char *what, gcc_diag *d) {
  dnnl_dims_t dd, ss;
  for (int i = 0; i < nd; i++)
    dd[i] = dims[i], ss[i] = strides[i];
  DNNL_RET(dnnl_memory_desc_init_by_strides, (md, nd, dd, dnnl_f32, ss));
  return GCC_OK;
}

gcc_status gdn_md_tag(dnnl_memory_desc_t *md, int nd, const int64_t *dims, dnnl_format_tag_t tag,
                      const char *what, gcc_diag *d) {
  dnnl_dims_t dd;
  for (int i = 0; i < nd; i++)
    dd[i] = dims[i];
  DNNL_RET(dnnl_memory_desc_init_by_tag, (md, nd, dd, dnnl_f32, tag));
  return GCC_OK;
}

/* ---- hand-written epilogues ------------------------------------------------ */

/* Columns per task: 64 floats, so a task's piece of a row is whole cache
 * lines and no two threads write one line of db. */
#define COL_BLOCK 64
/* Below this many elements the loop stays on the calling thread: waking the
 * OpenMP team costs more than it saves. */
#define PARALLEL_ELEMS (32 * 1024)

void gcc_dnnl_relu_mask_bgrad(const float *dh, const float *y, float *dx, float *db, int64_t rows,
                              int64_t cols, int threads) {
  int64_t nb = (cols + COL_BLOCK - 1) / COL_BLOCK;
  int t = rows * cols >= PARALLEL_ELEMS && threads > 1 ? threads : 1;
#pragma omp parallel for num_threads(t) schedule(static) if (t > 1)
  for (int64_t b = 0; b < nb; b++) {
    int64_t c0 = b * COL_BLOCK, c1 = c0 + COL_BLOCK < cols ? c0 + COL_BLOCK : cols;
    if (db)
      for (int64_t c = c0; c < c1; c++)
        db[c] = 0.0f;
    for (int64_t r = 0; r < rows; r++) {
      const float *hr = dh + r * cols, *yr = y + r * cols;
      float *xr = dx + r * cols;
      if (db) {
        for (int64_t c = c0; c < c1; c++) {
          float v = yr[c] > 0.0f ? hr[c] : 0.0f;
          xr[c] = v;
          db[c] += v;
        }
      } else {
        for (int64_t c = c0; c < c1; c++)
          xr[c] = yr[c] > 0.0f ? hr[c] : 0.0f;
      }
    }
  }
}

void gcc_dnnl_col_sums(const float *x, float *db, int64_t rows, int64_t cols, int threads) {
  int64_t nb = (cols + COL_BLOCK - 1) / COL_BLOCK;
  int t = rows * cols >= PARALLEL_ELEMS && threads > 1 ? threads : 1;
#pragma omp parallel for num_threads(t) schedule(static) if (t > 1)
  for (int64_t b = 0; b < nb; b++) {
    int64_t c0 = b * COL_BLOCK, c1 = c0 + COL_BLOCK < cols ? c0 + COL_BLOCK : cols;
    for (int64_t c = c0; c < c1; c++)
      db[c] = 0.0f;
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = c0; c < c1; c++)
        db[c] += x[r * cols + c];
  }
}

/* ---- convolution ------------------------------------------------------------- */

void gcc_dnnl_conv_out_dims(const gcc_dnnl_conv_desc *c, int64_t *oh, int64_t *ow) {
  int64_t eh = c->dh * (c->kh - 1) + 1, ew = c->dw * (c->kw - 1) + 1;
  int64_t nh = c->h + c->pt + c->pb - eh, nw = c->w + c->pl + c->pr - ew;
  *oh = nh < 0 || c->sh < 1 ? 0 : nh / c->sh + 1;
  *ow = nw < 0 || c->sw < 1 ? 0 : nw / c->sw + 1;
}

static gcc_status conv_check(const gcc_dnnl_conv_desc *c, const char *what, gcc_diag *d) {
  int64_t oh, ow;
  gcc_dnnl_conv_out_dims(c, &oh, &ow);
  if (c->n < 1 || c->c < 1 || c->h < 1 || c->w < 1 || c->m < 1 || c->kh < 1 || c->kw < 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "oneDNN: %s: a size is below 1", what);
  if (c->sh < 1 || c->sw < 1 || c->dh < 1 || c->dw < 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "oneDNN: %s: strides and dilations must be >= 1", what);
  if (c->pt < 0 || c->pl < 0 || c->pb < 0 || c->pr < 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "oneDNN: %s: pads must be >= 0", what);
  if (c->group < 1 || c->c % c->group || c->m % c->group)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "oneDNN: %s: group %" PRId64 " does not divide the channels (%" PRId64
                        " in, %" PRId64 " out)",
                        what, c->group, c->c, c->m);
  if (oh < 1 || ow < 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "oneDNN: %s: the dilated kernel does not fit in the padded input", what);
  return GCC_OK;
}

typedef struct conv_mds {
  dnnl_memory_desc_t x, w, b, y;
  dnnl_dims_t strides, dil, pad_l, pad_r;
} conv_mds;

/* The convolution's memory descriptors: plain (NCHW, OIHW / GOIHW), or
 * "any" for activations and filters when `c->layout` is BLOCKED, so that
 * oneDNN picks the layouts its fastest kernel wants. */
static gcc_status conv_mds_make(const gcc_dnnl_conv_desc *c, conv_mds *m, const char *what,
                                gcc_diag *d) {
  int64_t oh, ow;
  gcc_dnnl_conv_out_dims(c, &oh, &ow);
  int blocked = c->layout == GCC_DNNL_LAYOUT_BLOCKED;
  GCC_TRY(gdn_md_tag(&m->x, 4, (int64_t[]){c->n, c->c, c->h, c->w},
                     blocked ? dnnl_format_tag_any : dnnl_nchw, what, d));
  GCC_TRY(gdn_md_tag(&m->y, 4, (int64_t[]){c->n, c->m, oh, ow},
                     blocked ? dnnl_format_tag_any : dnnl_nchw, what, d));
  if (c->group > 1)
    GCC_TRY(gdn_md_tag(&m->w, 5,
                       (int64_t[]){c->group, c->m / c->group, c->c / c->group, c->kh, c->kw},
                       blocked ? dnnl_format_tag_any : dnnl_goihw, what, d));
  else
    GCC_TRY(gdn_md_tag(&m->w, 4, (int64_t[]){c->m, c->c, c->kh, c->kw},
                       blocked ? dnnl_format_tag_any : dnnl_oihw, what, d));
  GCC_TRY(gdn_md_tag(&m->b, 1, (int64_t[]){c->m}, dnnl_a, what, d));
  m->strides[0] = c->sh, m->strides[1] = c->sw;
  m->dil[0] = c->dh - 1, m->dil[1] = c->dw - 1; /* oneDNN counts the gaps */
  m->pad_l[0] = c->pt, m->pad_l[1] = c->pl;
  m->pad_r[0] = c->pb, m->pad_r[1] = c->pr;
  return GCC_OK;
}

static gcc_status conv_fwd_pd(gcc_dnnl *dn, const gcc_dnnl_conv_desc *c, dnnl_primitive_attr_t attr,
                              int bias, dnnl_primitive_desc_t *pd, const char *what, gcc_diag *d) {
  conv_mds m;
  GCC_TRY(conv_mds_make(c, &m, what, d));
  dnnl_convolution_desc_t cd;
  DNNL_RET(dnnl_dilated_convolution_forward_desc_init,
           (&cd, dnnl_forward_training, dnnl_convolution_direct, &m.x, &m.w, bias ? &m.b : NULL,
            &m.y, m.strides, m.dil, m.pad_l, m.pad_r));
  DNNL_RET(dnnl_primitive_desc_create, (pd, &cd, attr, dn->engine, NULL));
  return GCC_OK;
}

static gcc_status build_conv_fwd(gcc_dnnl *dn, const void *desc, dnnl_primitive_attr_t attr,
                                 dnnl_primitive_desc_t *pd, const char *what, gcc_diag *d) {
  const gcc_dnnl_conv_desc *c = desc;
  gcc_status s = GCC_OK;
  dnnl_post_ops_t po = NULL;
  if (c->relu) {
    DNNL_CALL(dnnl_post_ops_create, (&po));
    DNNL_CALL(dnnl_post_ops_append_eltwise, (po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f));
    DNNL_CALL(dnnl_primitive_attr_set_post_ops, (attr, po));
  }
  s = conv_fwd_pd(dn, c, attr, c->bias, pd, what, d);
fail:
  if (po)
    dnnl_post_ops_destroy(po);
  return s;
}

/* The forward primitive descriptor a backward one needs as its hint. */
static gcc_status conv_hint(gcc_dnnl *dn, const gcc_dnnl_conv_desc *c, dnnl_primitive_desc_t *hint,
                            const char *what, gcc_diag *d) {
  gcc_status s = GCC_OK;
  dnnl_primitive_attr_t attr = NULL;
  DNNL_CALL(dnnl_primitive_attr_create, (&attr));
  DNNL_CALL(dnnl_primitive_attr_set_scratchpad_mode, (attr, dnnl_scratchpad_mode_user));
  s = conv_fwd_pd(dn, c, attr, c->bias, hint, what, d);
fail:
  if (attr)
    dnnl_primitive_attr_destroy(attr);
  return s;
}

/* A backward convolution's primitive descriptor: of the data (dX) or, with
 * `weights`, of the weights and bias (dW, dB), with the forward one as hint. */
static gcc_status build_conv_bwd(gcc_dnnl *dn, const gcc_dnnl_conv_desc *c, int weights,
                                 dnnl_primitive_attr_t attr, dnnl_primitive_desc_t *pd,
                                 const char *what, gcc_diag *d) {
  gcc_status s = GCC_OK;
  dnnl_primitive_desc_t hint = NULL;
  conv_mds m;
  GCC_TRY(conv_mds_make(c, &m, what, d));
  GCC_TRY(conv_hint(dn, c, &hint, what, d));
  dnnl_convolution_desc_t cd;
  if (weights)
    DNNL_CALL(dnnl_dilated_convolution_backward_weights_desc_init,
              (&cd, dnnl_convolution_direct, &m.x, &m.w, c->bias ? &m.b : NULL, &m.y, m.strides,
               m.dil, m.pad_l, m.pad_r));
  else
    DNNL_CALL(dnnl_dilated_convolution_backward_data_desc_init,
              (&cd, dnnl_convolution_direct, &m.x, &m.w, &m.y, m.strides, m.dil, m.pad_l, m.pad_r));
  DNNL_CALL(dnnl_primitive_desc_create, (pd, &cd, attr, dn->engine, hint));
fail:
  if (hint)
    dnnl_primitive_desc_destroy(hint);
  return s;
}

static gcc_status build_conv_bwd_data(gcc_dnnl *dn, const void *desc, dnnl_primitive_attr_t attr,
                                      dnnl_primitive_desc_t *pd, const char *what, gcc_diag *d) {
  return build_conv_bwd(dn, desc, 0, attr, pd, what, d);
}

static gcc_status build_conv_bwd_weights(gcc_dnnl *dn, const void *desc, dnnl_primitive_attr_t attr,
                                         dnnl_primitive_desc_t *pd, const char *what, gcc_diag *d) {
  return build_conv_bwd(dn, desc, 1, attr, pd, what, d);
}

static void conv_key(gcc_dnnl *dn, int kind, const gcc_dnnl_conv_desc *c, prim_key *k) {
  memset(k, 0, sizeof *k);
  key_i(k, kind);
  key_i(k, dn->threads);
  const int64_t f[] = {c->n,  c->c,  c->h,  c->w,  c->m,  c->kh, c->kw, c->sh,
                       c->sw, c->pt, c->pl, c->pb, c->pr, c->dh, c->dw, c->group};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    key_i(k, f[i]);
  key_i(k, c->bias);
  key_i(k, kind == K_CONV_FWD ? c->relu : 0);
  key_i(k, c->layout);
}

static void conv_what(const char *kind, const gcc_dnnl_conv_desc *c, char *buf, size_t cap) {
  snprintf(buf, cap,
           "%s %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " * %" PRId64 "x%" PRId64 "x%" PRId64
           "x%" PRId64 " s%" PRId64 ",%" PRId64 " p%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64
           " d%" PRId64 ",%" PRId64 " g%" PRId64 "%s%s",
           kind, c->n, c->c, c->h, c->w, c->m, c->group ? c->c / c->group : c->c, c->kh, c->kw,
           c->sh, c->sw, c->pt, c->pl, c->pb, c->pr, c->dh, c->dw, c->group, c->bias ? " bias" : "",
           c->relu && strcmp(kind, "conv_fwd") == 0 ? " relu" : "");
}

/* ---- reorders ---------------------------------------------------------------- */

static gcc_status build_reorder(gcc_dnnl *dn, const void *desc, dnnl_primitive_attr_t attr,
                                dnnl_primitive_desc_t *pd, const char *what, gcc_diag *d) {
  const dnnl_memory_desc_t *mds = desc;
  DNNL_RET(dnnl_reorder_primitive_desc_create,
           (pd, &mds[0], dn->engine, &mds[1], dn->engine, attr));
  return GCC_OK;
}

/* The cached reorder from layout mds[0] to mds[1] (same dims). */
gcc_status gdn_reorder_entry(gcc_dnnl *dn, int threads, const dnnl_memory_desc_t *mds,
                             const char *what, cache_entry **out, gcc_diag *d) {
  prim_key key = {0};
  key_i(&key, K_REORDER);
  key_i(&key, threads);
  key_i(&key, mds[0].ndims);
  for (int i = 0; i < mds[0].ndims; i++)
    key_i(&key, mds[0].dims[i]);
  key_i(&key, (int64_t)dnnl_memory_desc_get_size(&mds[0]));
  key_i(&key, (int64_t)dnnl_memory_desc_get_size(&mds[1]));
  return gdn_cache_get_mds(dn, &key, mds, build_reorder, mds, what, out, d);
}

/* oneDNN's name of a blocked layout: dims ordered outermost first by
 * stride, letters a, b, c... (upper case when blocked), then the inner
 * blocks: "aBcd16b" is nChw16c, "ABcd16b16a" a filter blocked 16o16i. */
void gdn_layout_str(const dnnl_memory_desc_t *md, char *buf, size_t cap) {
  buf[0] = '\0';
  if (md->format_kind != dnnl_blocked) {
    snprintf(buf, cap, "?");
    return;
  }
  const dnnl_blocking_desc_t *b = &md->format_desc.blocking;
  int order[DNNL_MAX_NDIMS], nd = md->ndims;
  for (int i = 0; i < nd; i++)
    order[i] = i;
  for (int i = 1; i < nd; i++) /* outermost (largest stride) first, stable */
    for (int j = i; j > 0 && b->strides[order[j]] > b->strides[order[j - 1]]; j--) {
      int t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  size_t len = 0;
  for (int i = 0; i < nd && len + 1 < cap; i++) {
    int blocked = 0;
    for (int k = 0; k < b->inner_nblks; k++)
      blocked |= b->inner_idxs[k] == order[i];
    buf[len++] = (char)((blocked ? 'A' : 'a') + order[i]);
  }
  buf[len] = '\0';
  for (int k = 0; k < b->inner_nblks && len + 8 < cap; k++)
    len += (size_t)snprintf(buf + len, cap - len, "%" PRId64 "%c", (int64_t)b->inner_blks[k],
                            (int)('a' + b->inner_idxs[k]));
}

/* ---- convolution ops ---------------------------------------------------------- */

/* AUTO: oneDNN's blocked layouts with reorders inside the op, except the
 * backward-data pass of a convolution with fewer than 4 input channels per
 * group, where oneDNN's plain (gemm) kernel is faster. Measured on the
 * reference models' layers, 1 and 2 threads (bench/dnnl_ops_bench), reorders
 * included: MNIST CNN conv2 forward 115 us blocked against 568 plain (1
 * thread), backward weights 268 / 656, backward data 295 / 633; conv1 (1
 * input channel) forward 249 / 546, backward weights 256 / 832, but backward
 * data 2539 / 630 (the image's gradient, which training does not compute). */
static gcc_dnnl_layout conv_layout(const gcc_dnnl_conv_desc *c, int kind) {
  if (c->layout != GCC_DNNL_LAYOUT_AUTO)
    return c->layout;
  if (kind == K_CONV_BWD_DATA && c->c / c->group < 4)
    return GCC_DNNL_LAYOUT_PLAIN;
  return GCC_DNNL_LAYOUT_BLOCKED;
}

typedef struct conv_arg {
  int arg;    /* DNNL_ARG_* of the convolution */
  int ptr;    /* its run pointer; -1: not used */
  int output; /* written by the convolution */
} conv_arg;

static const dnnl_memory_desc_t *plain_md_of(const conv_mds *pm, int arg) {
  switch (arg) {
  case DNNL_ARG_SRC:
  case DNNL_ARG_DIFF_SRC: return &pm->x;
  case DNNL_ARG_WEIGHTS:
  case DNNL_ARG_DIFF_WEIGHTS: return &pm->w;
  case DNNL_ARG_BIAS:
  case DNNL_ARG_DIFF_BIAS: return &pm->b;
  default: return &pm->y;
  }
}

/* A conv op: the convolution, and for every operand whose layout oneDNN
 * chose blocked, a reorder from the caller's plain buffer into the scratch
 * before it (inputs) or from the scratch into the caller's buffer after it
 * (outputs). */
static gcc_status conv_create(gcc_dnnl *dn, const gcc_dnnl_conv_desc *c0, int kind,
                              const char *kind_name, pd_builder build, const conv_arg *args,
                              int n_args, int n_ptrs, gcc_dnnl_op **out, gcc_diag *d) {
  *out = NULL;
  char what[256];
  conv_what(kind_name, c0, what, sizeof what);
  GCC_TRY(conv_check(c0, what, d));
  gcc_dnnl_conv_desc c = *c0;
  c.layout = conv_layout(c0, kind);
  prim_key key;
  conv_key(dn, kind, &c, &key);
  cache_entry *e = NULL;
  GCC_TRY(gdn_cache_get(dn, &key, build, &c, what, &e, d));
  gcc_dnnl_conv_desc plain = c;
  plain.layout = GCC_DNNL_LAYOUT_PLAIN;
  conv_mds pm;
  GCC_TRY(conv_mds_make(&plain, &pm, what, d));
  /* which operands need a reorder, and where their blocked copies live */
  cache_entry *re[MAX_ARGS] = {0};
  size_t off[MAX_ARGS] = {0}, temps = 0;
  char layouts[160] = "";
  for (int i = 0; i < n_args; i++) {
    if (args[i].ptr < 0)
      continue;
    const dnnl_memory_desc_t *md =
        dnnl_primitive_desc_query_md(e->pd, dnnl_query_exec_arg_md, args[i].arg);
    const dnnl_memory_desc_t *pl = plain_md_of(&pm, args[i].arg);
    if (!md || dnnl_memory_desc_equal(md, pl))
      continue;
    dnnl_memory_desc_t pair[2] = {args[i].output ? *md : *pl, args[i].output ? *pl : *md};
    GCC_TRY(gdn_reorder_entry(dn, dn->threads, pair, what, &re[i], d));
    off[i] = temps;
    temps += align_up(dnnl_memory_desc_get_size(md));
    char l[48];
    gdn_layout_str(md, l, sizeof l);
    size_t len = strlen(layouts);
    snprintf(layouts + len, sizeof layouts - len, "%s%s %s", len ? ", " : "; ",
             args[i].arg == DNNL_ARG_SRC || args[i].arg == DNNL_ARG_DIFF_SRC           ? "x"
             : args[i].arg == DNNL_ARG_WEIGHTS || args[i].arg == DNNL_ARG_DIFF_WEIGHTS ? "w"
                                                                                       : "y",
             l);
  }
  gcc_dnnl_op *op = NULL;
  GCC_TRY(gdn_op_new(dn, n_ptrs, &op, d));
  op->temps = temps;
  snprintf(op->name, sizeof op->name, "%s (%s%s%s)%s", kind_name, e->impl, layouts,
           layouts[0] ? " via reorders" : "", what + strlen(kind_name));
  gcc_status s = GCC_OK;
  for (int i = 0; i < n_args && s == GCC_OK; i++) /* inputs into their layouts */
    if (re[i] && !args[i].output) {
      op_step *st = gdn_op_step_add(op, re[i]);
      s = gdn_op_arg(op, st, DNNL_ARG_FROM, FROM_PTR, args[i].ptr, what, d);
      if (s == GCC_OK)
        s = gdn_op_arg(op, st, DNNL_ARG_TO, FROM_SCRATCH, (int64_t)off[i], what, d);
    }
  op->main_step = op->n_steps;
  op_step *st = gdn_op_step_add(op, e);
  for (int i = 0; i < n_args && s == GCC_OK; i++)
    if (args[i].ptr >= 0)
      s = re[i] ? gdn_op_arg(op, st, args[i].arg, FROM_SCRATCH, (int64_t)off[i], what, d)
                : gdn_op_arg(op, st, args[i].arg, FROM_PTR, args[i].ptr, what, d);
  for (int i = 0; i < n_args && s == GCC_OK; i++) /* outputs back to plain */
    if (re[i] && args[i].output) {
      op_step *rs = gdn_op_step_add(op, re[i]);
      s = gdn_op_arg(op, rs, DNNL_ARG_FROM, FROM_SCRATCH, (int64_t)off[i], what, d);
      if (s == GCC_OK)
        s = gdn_op_arg(op, rs, DNNL_ARG_TO, FROM_PTR, args[i].ptr, what, d);
    }
  if (s == GCC_OK)
    s = gdn_op_finish(op, what, d);
  if (s != GCC_OK) {
    gcc_dnnl_op_free(op);
    return s;
  }
  *out = op;
  return GCC_OK;
}

gcc_status gcc_dnnl_conv_fwd_create(gcc_dnnl *dn, const gcc_dnnl_conv_desc *c, gcc_dnnl_op **out,
                                    gcc_diag *d) {
  const conv_arg args[] = {{DNNL_ARG_SRC, 0, 0},
                           {DNNL_ARG_WEIGHTS, 1, 0},
                           {DNNL_ARG_BIAS, c->bias ? 2 : -1, 0},
                           {DNNL_ARG_DST, 3, 1}};
  return conv_create(dn, c, K_CONV_FWD, "conv_fwd", build_conv_fwd, args, 4, 4, out, d);
}

gcc_status gcc_dnnl_conv_bwd_data_create(gcc_dnnl *dn, const gcc_dnnl_conv_desc *c,
                                         gcc_dnnl_op **out, gcc_diag *d) {
  const conv_arg args[] = {
      {DNNL_ARG_DIFF_DST, 0, 0}, {DNNL_ARG_WEIGHTS, 1, 0}, {DNNL_ARG_DIFF_SRC, 2, 1}};
  return conv_create(dn, c, K_CONV_BWD_DATA, "conv_bwd_data", build_conv_bwd_data, args, 3, 3, out,
                     d);
}

gcc_status gcc_dnnl_conv_bwd_weights_create(gcc_dnnl *dn, const gcc_dnnl_conv_desc *c,
                                            gcc_dnnl_op **out, gcc_diag *d) {
  const conv_arg args[] = {{DNNL_ARG_DIFF_DST, 0, 0},
                           {DNNL_ARG_SRC, 1, 0},
                           {DNNL_ARG_DIFF_WEIGHTS, 2, 1},
                           {DNNL_ARG_DIFF_BIAS, c->bias ? 3 : -1, 1}};
  return conv_create(dn, c, K_CONV_BWD_WEIGHTS, "conv_bwd_weights", build_conv_bwd_weights, args, 4,
                     4, out, d);
}

/* ---- pooling --------------------------------------------------------------- */

/* PyTorch's pooling_output_shape (aten/src/ATen/native/Pool.h), with
 * ONNX's asymmetric pads: a ceil_mode window that would start past the
 * input and its leading pad is dropped. */
static int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p0, int64_t p1, int64_t dil,
                        int ceil_mode) {
  int64_t span = in + p0 + p1 - dil * (k - 1) - 1;
  if (span < 0 || s < 1)
    return 0;
  int64_t out = (ceil_mode ? span + s - 1 : span) / s + 1;
  if (ceil_mode && (out - 1) * s >= in + p0)
    out--;
  return out;
}

void gcc_dnnl_pool_out_dims(const gcc_dnnl_pool_desc *p, int64_t *oh, int64_t *ow) {
  *oh = pool_out(p->h, p->kh, p->sh, p->pt, p->pb, p->dh, p->ceil_mode);
  *ow = pool_out(p->w, p->kw, p->sw, p->pl, p->pr, p->dw, p->ceil_mode);
}

/* The trailing pad oneDNN needs to produce `out` windows (oneDNN's output
 * size is always the floor form): the given pad, or more in ceil mode. */
static int64_t pool_pad_r(int64_t in, int64_t k, int64_t s, int64_t p0, int64_t p1, int64_t dil,
                          int64_t out) {
  int64_t need = (out - 1) * s + dil * (k - 1) + 1 - in - p0;
  return need > p1 ? need : p1;
}

static gcc_status pool_check(const gcc_dnnl_pool_desc *p, const char *what, gcc_diag *d) {
  int64_t oh, ow;
  gcc_dnnl_pool_out_dims(p, &oh, &ow);
  if (p->kind < GCC_DNNL_POOL_MAX || p->kind > GCC_DNNL_POOL_AVG_EXCLUDE)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "oneDNN: %s: unknown pooling kind %d", what,
                        (int)p->kind);
  if (p->n < 1 || p->c < 1 || p->h < 1 || p->w < 1 || p->kh < 1 || p->kw < 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "oneDNN: %s: a size is below 1", what);
  if (p->sh < 1 || p->sw < 1 || p->dh < 1 || p->dw < 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "oneDNN: %s: strides and dilations must be >= 1", what);
  if (p->pt < 0 || p->pl < 0 || p->pb < 0 || p->pr < 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "oneDNN: %s: pads must be >= 0", what);
  /* PyTorch's rule (a pad covers at most half the window): with more, a
   * window could lie in the padding alone and its max would be -inf */
  if (2 * p->pt > p->kh || 2 * p->pb > p->kh || 2 * p->pl > p->kw || 2 * p->pr > p->kw)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "oneDNN: %s: a pad is more than half the kernel", what);
  if (oh < 1 || ow < 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "oneDNN: %s: the dilated window does not fit in the padded input", what);
  return GCC_OK;
}

static dnnl_alg_kind_t pool_alg(gcc_dnnl_pool_kind k) {
  return k == GCC_DNNL_POOL_MAX           ? dnnl_pooling_max
         : k == GCC_DNNL_POOL_AVG_INCLUDE ? dnnl_pooling_avg_include_padding
                                          : dnnl_pooling_avg_exclude_padding;
}

typedef struct pool_mds {
  dnnl_memory_desc_t x, y;
  dnnl_dims_t strides, kernel, dil, pad_l, pad_r;
} pool_mds;

static gcc_status pool_mds_make(const gcc_dnnl_pool_desc *p, pool_mds *m, const char *what,
                                gcc_diag *d) {
  int64_t oh, ow;
  gcc_dnnl_pool_out_dims(p, &oh, &ow);
  GCC_TRY(gdn_md_tag(&m->x, 4, (int64_t[]){p->n, p->c, p->h, p->w}, dnnl_nchw, what, d));
  GCC_TRY(gdn_md_tag(&m->y, 4, (int64_t[]){p->n, p->c, oh, ow}, dnnl_nchw, what, d));
  m->strides[0] = p->sh, m->strides[1] = p->sw;
  m->kernel[0] = p->kh, m->kernel[1] = p->kw;
  m->dil[0] = p->dh - 1, m->dil[1] = p->dw - 1;
  m->pad_l[0] = p->pt, m->pad_l[1] = p->pl;
  m->pad_r[0] = pool_pad_r(p->h, p->kh, p->sh, p->pt, p->pb, p->dh, oh);
  m->pad_r[1] = pool_pad_r(p->w, p->kw, p->sw, p->pl, p->pr, p->dw, ow);
  return GCC_OK;
}

/* forward training for MAX with `training` (it writes the workspace), else
 * forward inference */
static gcc_status pool_fwd_pd(gcc_dnnl *dn, const gcc_dnnl_pool_desc *p, dnnl_primitive_attr_t attr,
                              int training, dnnl_primitive_desc_t *pd, const char *what,
                              gcc_diag *d) {
  pool_mds m;
  GCC_TRY(pool_mds_make(p, &m, what, d));
  dnnl_pooling_v2_desc_t pdsc;
  DNNL_RET(dnnl_pooling_v2_forward_desc_init,
           (&pdsc, training ? dnnl_forward_training : dnnl_forward_inference, pool_alg(p->kind),
            &m.x, &m.y, m.strides, m.kernel, m.dil, m.pad_l, m.pad_r));
  DNNL_RET(dnnl_primitive_desc_create, (pd, &pdsc, attr, dn->engine, NULL));
  return GCC_OK;
}

static int pool_training(const gcc_dnnl_pool_desc *p) {
  return p->kind == GCC_DNNL_POOL_MAX && p->training;
}

static gcc_status build_pool_fwd(gcc_dnnl *dn, const void *desc, dnnl_primitive_attr_t attr,
                                 dnnl_primitive_desc_t *pd, const char *what, gcc_diag *d) {
  const gcc_dnnl_pool_desc *p = desc;
  return pool_fwd_pd(dn, p, attr, pool_training(p), pd, what, d);
}

static gcc_status build_pool_bwd(gcc_dnnl *dn, const void *desc, dnnl_primitive_attr_t attr,
                                 dnnl_primitive_desc_t *pd, const char *what, gcc_diag *d) {
  const gcc_dnnl_pool_desc *p = desc;
  gcc_status s = GCC_OK;
  dnnl_primitive_attr_t hattr = NULL;
  dnnl_primitive_desc_t hint = NULL;
  pool_mds m;
  GCC_TRY(pool_mds_make(p, &m, what, d));
  DNNL_CALL(dnnl_primitive_attr_create, (&hattr));
  DNNL_CALL(dnnl_primitive_attr_set_scratchpad_mode, (hattr, dnnl_scratchpad_mode_user));
  s = pool_fwd_pd(dn, p, hattr, 1, &hint, what, d);
  if (s != GCC_OK)
    goto fail;
  dnnl_pooling_v2_desc_t pdsc;
  DNNL_CALL(dnnl_pooling_v2_backward_desc_init,
            (&pdsc, pool_alg(p->kind), &m.x, &m.y, m.strides, m.kernel, m.dil, m.pad_l, m.pad_r));
  DNNL_CALL(dnnl_primitive_desc_create, (pd, &pdsc, attr, dn->engine, hint));
fail:
  if (hint)
    dnnl_primitive_desc_destroy(hint);
  if (hattr)
    dnnl_primitive_attr_destroy(hattr);
  return s;
}

static void pool_key(gcc_dnnl *dn, int kind, const gcc_dnnl_pool_desc *p, int training,
                     prim_key *k) {
  memset(k, 0, sizeof *k);
  key_i(k, kind);
  key_i(k, dn->threads);
  const int64_t f[] = {p->kind, p->n,  p->c,  p->h,  p->w,  p->kh, p->kw, p->sh,
                       p->sw,   p->pt, p->pl, p->pb, p->pr, p->dh, p->dw, p->ceil_mode};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    key_i(k, f[i]);
  key_i(k, training);
}

static const char *pool_kind_name(gcc_dnnl_pool_kind k) {
  return k == GCC_DNNL_POOL_MAX           ? "max"
         : k == GCC_DNNL_POOL_AVG_INCLUDE ? "avg_include_pad"
                                          : "avg_exclude_pad";
}

static void pool_what(const char *kind, const gcc_dnnl_pool_desc *p, char *buf, size_t cap) {
  snprintf(buf, cap,
           "%s %s %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " k%" PRId64 "x%" PRId64
           " s%" PRId64 ",%" PRId64 " p%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 " d%" PRId64
           ",%" PRId64 "%s",
           kind, pool_kind_name(p->kind), p->n, p->c, p->h, p->w, p->kh, p->kw, p->sh, p->sw, p->pt,
           p->pl, p->pb, p->pr, p->dh, p->dw, p->ceil_mode ? " ceil" : "");
}

/* Taps of window `o` along one dim inside [lo, hi) of the input coordinates. */
static int64_t taps_inside(int64_t o, int64_t s, int64_t p0, int64_t k, int64_t dil, int64_t lo,
                           int64_t hi) {
  int64_t n = 0;
  for (int64_t t = 0; t < k; t++) {
    int64_t i = o * s - p0 + t * dil;
    n += i >= lo && i < hi;
  }
  return n;
}

/* AVG_INCLUDE: oneDNN divides every window by kh*kw, counting the pad it
 * was given to make the ceil_mode windows; PyTorch counts the window's taps
 * inside [-p0, in + p1) only. The factors kh*kw / PyTorch's divisor, per
 * output row and column (the divisor is a product of the two), or none when
 * they are all 1. */
static gcc_status pool_corrections(gcc_dnnl_op *op, const gcc_dnnl_pool_desc *p, int64_t oh,
                                   int64_t ow, gcc_diag *d) {
  if (p->kind != GCC_DNNL_POOL_AVG_INCLUDE)
    return GCC_OK;
  int any = 0;
  for (int64_t o = 0; o < oh; o++)
    any |= taps_inside(o, p->sh, p->pt, p->kh, p->dh, -p->pt, p->h + p->pb) != p->kh;
  for (int64_t o = 0; o < ow; o++)
    any |= taps_inside(o, p->sw, p->pl, p->kw, p->dw, -p->pl, p->w + p->pr) != p->kw;
  if (!any)
    return GCC_OK;
  op->corr_h = malloc((size_t)oh * sizeof *op->corr_h);
  op->corr_w = malloc((size_t)ow * sizeof *op->corr_w);
  if (!op->corr_h || !op->corr_w)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (pooling divisors)");
  for (int64_t o = 0; o < oh; o++)
    op->corr_h[o] =
        (float)p->kh / (float)taps_inside(o, p->sh, p->pt, p->kh, p->dh, -p->pt, p->h + p->pb);
  for (int64_t o = 0; o < ow; o++)
    op->corr_w[o] =
        (float)p->kw / (float)taps_inside(o, p->sw, p->pl, p->kw, p->dw, -p->pl, p->w + p->pr);
  op->nc = p->n * p->c;
  op->oh = oh;
  op->ow = ow;
  return GCC_OK;
}

/* dst[i] = src[i] * corr_h[oy] * corr_w[ox] over the NC planes of Y */
static void apply_corrections(const gcc_dnnl_op *op, const float *src, float *dst) {
  int64_t plane = op->oh * op->ow;
  int t = op->nc * plane >= PARALLEL_ELEMS ? op->dn->threads : 1;
#pragma omp parallel for num_threads(t) schedule(static) if (t > 1)
  for (int64_t pc = 0; pc < op->nc; pc++)
    for (int64_t oy = 0; oy < op->oh; oy++)
      for (int64_t ox = 0; ox < op->ow; ox++) {
        int64_t i = pc * plane + oy * op->ow + ox;
        dst[i] = src[i] * (op->corr_h[oy] * op->corr_w[ox]);
      }
}

static void post_fwd_corr(const gcc_dnnl_op *op, void *const *ptrs, char *scratch) {
  (void)scratch;
  apply_corrections(op, ptrs[1], ptrs[1]); /* Y in place */
}

static void pre_bwd_corr(const gcc_dnnl_op *op, void *const *ptrs, char *scratch) {
  apply_corrections(op, ptrs[0], (float *)scratch); /* dY scaled into the scratch */
}

/* ---- max pooling, by hand -------------------------------------------------
 *
 * Every max pooling of a plan (the forward without a workspace and the
 * backward from X) runs on the loops below, not on oneDNN, for two reasons:
 *
 * - Semantics that do not depend on the machine. oneDNN 2.6 JITs a pooling
 *   kernel per ISA, and its AVX2 and AVX-512 kernels break ties between equal
 *   maxima of a window differently (measured: the float32 MaxPoolGrad of
 *   precision_test's Kernels16 case sent the gradient of 4 and 49 tied windows
 *   to another element on an AVX-512 machine than on an AVX2 one). Ties are
 *   common (after a ReLU, whole windows are 0). Here the maximum is always
 *   PyTorch's (max_pool2d on CPU and CUDA): the first largest value in
 *   row-major window order, a NaN winning (the last NaN), as
 *   runtime/cpu_kernels' reference max pooling; the gradient of a window goes
 *   to that element. Padding never wins (it is -inf).
 * - Speed where the windows tile the input (kernel = stride, no pads, no
 *   dilation, floor mode: the CNNs' MaxPool2d(2, 2)): oneDNN took 244 us
 *   forward and 215 backward for 64x6x24x24 on 2 threads in NCHW, 185 / 156
 *   in nChw16c, against 40-50 us for the tiled loops (bench/dnnl_ops_bench).
 *   Every input belongs to at most one window there: the forward is a max per
 *   window and the backward writes each input once (no scatter-add, no
 *   zeroing pass but for the rows and columns no window covers).
 *
 * Other windows (overlapping, padded, dilated, ceil mode: ResNet's
 * MaxPool2d(3, 2, 1)) take the general loops: per window the tap range inside
 * the input, the argmax, and in the backward a scatter-add of dY into the
 * zeroed plane of dX, in output order (deterministic). Planes are split
 * between the threads, so no two threads write one plane. */
static int pool_tiles(const gcc_dnnl_pool_desc *p) {
  return p->kind == GCC_DNNL_POOL_MAX && p->kh == p->sh && p->kw == p->sw && !p->pt && !p->pl &&
         !p->pb && !p->pr && p->dh == 1 && p->dw == 1 && !p->ceil_mode && p->kh * p->kw <= 64;
}

/* the index in the window (row-major) of its maximum, PyTorch's rule */
static inline int window_argmax(const float *plane, int64_t w, int64_t y0, int64_t x0, int64_t kh,
                                int64_t kw) {
  int best_i = 0;
  float best = plane[y0 * w + x0];
  for (int64_t i = 0; i < kh; i++)
    for (int64_t j = 0; j < kw; j++) {
      float v = plane[(y0 + i) * w + x0 + j];
      if (v > best || isnan(v)) {
        best = v;
        best_i = (int)(i * kw + j);
      }
    }
  return best_i;
}

/* {X, Y} */
static void run_tiled_max_fwd(const gcc_dnnl_op *op, void *const *ptrs, char *scratch) {
  (void)scratch;
  const gcc_dnnl_pool_desc *p = &op->pool;
  const float *x = ptrs[0];
  float *y = ptrs[1];
  int64_t planes = p->n * p->c, oh = op->oh, ow = op->ow, h = p->h, w = p->w;
  int t = planes * h * w >= PARALLEL_ELEMS ? op->threads : 1;
#pragma omp parallel for num_threads(t) schedule(static) if (t > 1)
  for (int64_t pc = 0; pc < planes; pc++) {
    const float *plane = x + pc * h * w;
    float *out = y + pc * oh * ow;
    if (p->kh == 2 && p->kw == 2) {
      for (int64_t oy = 0; oy < oh; oy++) {
        const float *r0 = plane + 2 * oy * w, *r1 = r0 + w;
        for (int64_t ox = 0; ox < ow; ox++) {
          float m = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], e = r1[2 * ox + 1];
          m = b > m || isnan(b) ? b : m;
          m = c > m || isnan(c) ? c : m;
          m = e > m || isnan(e) ? e : m;
          out[oy * ow + ox] = m;
        }
      }
    } else {
      for (int64_t oy = 0; oy < oh; oy++)
        for (int64_t ox = 0; ox < ow; ox++) {
          int k = window_argmax(plane, w, oy * p->kh, ox * p->kw, p->kh, p->kw);
          out[oy * ow + ox] = plane[(oy * p->kh + k / p->kw) * w + ox * p->kw + k % p->kw];
        }
    }
  }
}

/* {dY, X, dX} */
static void run_tiled_max_bwd(const gcc_dnnl_op *op, void *const *ptrs, char *scratch) {
  (void)scratch;
  const gcc_dnnl_pool_desc *p = &op->pool;
  const float *dy = ptrs[0], *x = ptrs[1];
  float *dx = ptrs[2];
  int64_t planes = p->n * p->c, oh = op->oh, ow = op->ow, h = p->h, w = p->w;
  int64_t kh = p->kh, kw = p->kw;
  int t = planes * h * w >= PARALLEL_ELEMS ? op->threads : 1;
#pragma omp parallel for num_threads(t) schedule(static) if (t > 1)
  for (int64_t pc = 0; pc < planes; pc++) {
    const float *plane = x + pc * h * w, *d = dy + pc * oh * ow;
    float *o = dx + pc * h * w;
    for (int64_t oy = 0; oy < oh; oy++) {
      if (kh == 2 && kw == 2) { /* the CNNs' pools: branch-free, vectorisable */
        const float *r0 = plane + 2 * oy * w, *r1 = r0 + w;
        float *o0 = o + 2 * oy * w, *o1 = o0 + w;
        const float *dr = d + oy * ow;
        for (int64_t ox = 0; ox < ow; ox++) {
          float m = r0[2 * ox], b = r0[2 * ox + 1], c = r1[2 * ox], e = r1[2 * ox + 1];
          int k = 0;
          k = b > m || isnan(b) ? 1 : k;
          m = b > m || isnan(b) ? b : m;
          k = c > m || isnan(c) ? 2 : k;
          m = c > m || isnan(c) ? c : m;
          k = e > m || isnan(e) ? 3 : k;
          float g = dr[ox];
          o0[2 * ox] = k == 0 ? g : 0.0f;
          o0[2 * ox + 1] = k == 1 ? g : 0.0f;
          o1[2 * ox] = k == 2 ? g : 0.0f;
          o1[2 * ox + 1] = k == 3 ? g : 0.0f;
        }
      } else {
        for (int64_t ox = 0; ox < ow; ox++) {
          int k = window_argmax(plane, w, oy * kh, ox * kw, kh, kw);
          float g = d[oy * ow + ox];
          for (int64_t i = 0; i < kh; i++)
            for (int64_t j = 0; j < kw; j++)
              o[(oy * kh + i) * w + ox * kw + j] = i * kw + j == k ? g : 0.0f;
        }
      }
      for (int64_t i = 0; i < kh; i++) /* columns past the last window */
        for (int64_t ix = ow * kw; ix < w; ix++)
          o[(oy * kh + i) * w + ix] = 0.0f;
    }
    for (int64_t iy = oh * kh; iy < h; iy++) /* rows past the last window */
      for (int64_t ix = 0; ix < w; ix++)
        o[iy * w + ix] = 0.0f;
  }
}

/* The taps [*lo, *hi) of window `o` (of k taps, stride s, leading pad p0,
 * dilation dil) whose input o * s - p0 + t * dil lies in [0, n). */
static void pool_taps(int64_t o, int64_t s, int64_t p0, int64_t dil, int64_t k, int64_t n,
                      int64_t *lo, int64_t *hi) {
  int64_t start = o * s - p0;
  int64_t a = 0, b = k;
  while (a < k && start + a * dil < 0)
    a++;
  while (b > a && start + (b - 1) * dil >= n)
    b--;
  *lo = a;
  *hi = b;
}

/* Flat index in the (h, w) plane of the maximum of window (oy, ox), the
 * first largest in row-major window order, a NaN winning; the window has a
 * tap inside the input (pool_check: pads are at most half the kernel). */
static inline int64_t general_argmax(const gcc_dnnl_pool_desc *p, const float *plane, int64_t oy,
                                     int64_t ox) {
  int64_t y0 = oy * p->sh - p->pt, x0 = ox * p->sw - p->pl;
  int64_t i0 = 0, i1 = p->kh, j0 = 0, j1 = p->kw;
  if (y0 < 0 || y0 + (p->kh - 1) * p->dh >= p->h)
    pool_taps(oy, p->sh, p->pt, p->dh, p->kh, p->h, &i0, &i1);
  if (x0 < 0 || x0 + (p->kw - 1) * p->dw >= p->w)
    pool_taps(ox, p->sw, p->pl, p->dw, p->kw, p->w, &j0, &j1);
  int64_t best_i = (y0 + i0 * p->dh) * p->w + x0 + j0 * p->dw;
  float best = plane[best_i];
  for (int64_t i = i0; i < i1; i++) {
    int64_t row = (y0 + i * p->dh) * p->w + x0;
    for (int64_t j = j0; j < j1; j++) {
      float v = plane[row + j * p->dw];
      if (v > best || isnan(v)) {
        best = v;
        best_i = row + j * p->dw;
      }
    }
  }
  return best_i;
}

/* The output columns [*lo, *hi) of windows that lie inside the input's
 * columns (no tap in the padding). */
static void inner_cols(const gcc_dnnl_pool_desc *p, int64_t ow, int64_t *lo, int64_t *hi) {
  int64_t a = (p->pl + p->sw - 1) / p->sw;
  int64_t last = p->w - 1 - (p->kw - 1) * p->dw + p->pl; /* ox * sw <= last */
  int64_t b = last < 0 ? 0 : last / p->sw + 1;
  b = b > ow ? ow : b;
  *lo = a > b ? b : a;
  *hi = b;
}

#define POOL_CHUNK 64

/* One output row oy of a plane: the maximum of each window (PyTorch's rule)
 * into y_row when it is not NULL, and the row's gradients dy_row scattered
 * into the plane dx in output order when dx is not NULL. The columns of
 * windows inside the input run tap by tap over up to 64 windows at once
 * (loops the compiler vectorises; the same argmax: taps in row-major order,
 * a tap replaces the maximum when larger or NaN); the others tap range by
 * tap range. */
static void max_pool_row(const gcc_dnnl_pool_desc *p, int64_t ow, const float *plane, int64_t oy,
                         int64_t c_lo, int64_t c_hi, float *y_row, const float *dy_row, float *dx) {
  int64_t y0 = oy * p->sh - p->pt, i0 = 0, i1 = p->kh;
  if (y0 < 0 || y0 + (p->kh - 1) * p->dh >= p->h)
    pool_taps(oy, p->sh, p->pt, p->dh, p->kh, p->h, &i0, &i1);
  for (int64_t ox = 0; ox < c_lo; ox++) {
    int64_t at = general_argmax(p, plane, oy, ox);
    if (y_row)
      y_row[ox] = plane[at];
    if (dx)
      dx[at] += dy_row[ox];
  }
  const int64_t sw = p->sw;
  for (int64_t q0 = c_lo; q0 < c_hi; q0 += POOL_CHUNK) {
    int64_t nq = c_hi - q0 < POOL_CHUNK ? c_hi - q0 : POOL_CHUNK;
    float m[POOL_CHUNK];
    int32_t k[POOL_CHUNK];
    int first = 1;
    for (int64_t i = i0; i < i1; i++) {
      const float *row = plane + (y0 + i * p->dh) * p->w + q0 * sw - p->pl;
      for (int64_t j = 0; j < p->kw; j++) {
        const float *src = row + j * p->dw;
        int32_t tap = (int32_t)(i * p->kw + j);
        if (first) {
          for (int64_t q = 0; q < nq; q++) {
            m[q] = src[q * sw];
            k[q] = tap;
          }
          first = 0;
          continue;
        }
        for (int64_t q = 0; q < nq; q++) {
          float v = src[q * sw];
          int take = v > m[q] || v != v;
          m[q] = take ? v : m[q];
          k[q] = take ? tap : k[q];
        }
      }
    }
    if (y_row)
      for (int64_t q = 0; q < nq; q++)
        y_row[q0 + q] = m[q];
    if (dx)
      for (int64_t q = 0; q < nq; q++) {
        int64_t i = k[q] / p->kw, j = k[q] % p->kw;
        dx[(y0 + i * p->dh) * p->w + (q0 + q) * sw - p->pl + j * p->dw] += dy_row[q0 + q];
      }
  }
  for (int64_t ox = c_hi; ox < ow; ox++) {
    int64_t at = general_argmax(p, plane, oy, ox);
    if (y_row)
      y_row[ox] = plane[at];
    if (dx)
      dx[at] += dy_row[ox];
  }
}

/* {X, Y} */
static void run_general_max_fwd(const gcc_dnnl_op *op, void *const *ptrs, char *scratch) {
  (void)scratch;
  const gcc_dnnl_pool_desc *p = &op->pool;
  const float *x = ptrs[0];
  float *y = ptrs[1];
  int64_t planes = p->n * p->c, oh = op->oh, ow = op->ow, hw = p->h * p->w, c_lo, c_hi;
  inner_cols(p, ow, &c_lo, &c_hi);
  int t = planes * oh * ow * p->kh * p->kw >= PARALLEL_ELEMS ? op->threads : 1;
#pragma omp parallel for num_threads(t) schedule(static) if (t > 1)
  for (int64_t pc = 0; pc < planes; pc++)
    for (int64_t oy = 0; oy < oh; oy++)
      max_pool_row(p, ow, x + pc * hw, oy, c_lo, c_hi, y + (pc * oh + oy) * ow, NULL, NULL);
}

/* {dY, X, dX} */
static void run_general_max_bwd(const gcc_dnnl_op *op, void *const *ptrs, char *scratch) {
  (void)scratch;
  const gcc_dnnl_pool_desc *p = &op->pool;
  const float *dy = ptrs[0], *x = ptrs[1];
  float *dx = ptrs[2];
  int64_t planes = p->n * p->c, oh = op->oh, ow = op->ow, hw = p->h * p->w, c_lo, c_hi;
  inner_cols(p, ow, &c_lo, &c_hi);
  int t = planes * oh * ow * p->kh * p->kw >= PARALLEL_ELEMS ? op->threads : 1;
#pragma omp parallel for num_threads(t) schedule(static) if (t > 1)
  for (int64_t pc = 0; pc < planes; pc++) {
    float *o = dx + pc * hw;
    memset(o, 0, (size_t)hw * sizeof *o);
    for (int64_t oy = 0; oy < oh; oy++)
      max_pool_row(p, ow, x + pc * hw, oy, c_lo, c_hi, NULL, dy + (pc * oh + oy) * ow, o);
  }
}

static gcc_status max_pool_own_create(gcc_dnnl *dn, const gcc_dnnl_pool_desc *p, int bwd,
                                      const char *what, gcc_dnnl_op **out, gcc_diag *d) {
  gcc_dnnl_op *op = NULL;
  GCC_TRY(gdn_op_new(dn, bwd ? 3 : 2, &op, d));
  op->pool = *p;
  int tiles = pool_tiles(p);
  op->custom = tiles ? (bwd ? run_tiled_max_bwd : run_tiled_max_fwd)
                     : (bwd ? run_general_max_bwd : run_general_max_fwd);
  op->optional_ptr = -1;
  gcc_dnnl_pool_out_dims(p, &op->oh, &op->ow);
  snprintf(op->impl, sizeof op->impl, "%s", tiles ? "gcc:max_pool_tiled" : "gcc:max_pool");
  const char *sp = strchr(what, ' ');
  snprintf(op->name, sizeof op->name, "%.*s (%s)%s", sp ? (int)(sp - what) : (int)strlen(what),
           what, op->impl, sp ? sp : "");
  *out = op;
  return GCC_OK;
}

gcc_status gcc_dnnl_pool_fwd_create(gcc_dnnl *dn, const gcc_dnnl_pool_desc *p, gcc_dnnl_op **out,
                                    gcc_diag *d) {
  *out = NULL;
  char what[256];
  pool_what("pool_fwd", p, what, sizeof what);
  GCC_TRY(pool_check(p, what, d));
  if (p->kind == GCC_DNNL_POOL_MAX && !p->training)
    return max_pool_own_create(dn, p, 0, what, out, d);
  int training = pool_training(p);
  prim_key key;
  pool_key(dn, K_POOL_FWD, p, training, &key);
  cache_entry *e = NULL;
  GCC_TRY(gdn_cache_get(dn, &key, build_pool_fwd, p, what, &e, d));
  gcc_dnnl_op *op = NULL;
  GCC_TRY(gdn_op_new(dn, training ? 3 : 2, &op, d));
  snprintf(op->name, sizeof op->name, "pool_fwd (%s)%s", e->impl, what + strlen("pool_fwd"));
  int64_t oh, ow;
  gcc_dnnl_pool_out_dims(p, &oh, &ow);
  op_step *st = gdn_op_step_add(op, e);
  gcc_status s = gdn_op_arg(op, st, DNNL_ARG_SRC, FROM_PTR, 0, what, d);
  if (s == GCC_OK)
    s = gdn_op_arg(op, st, DNNL_ARG_DST, FROM_PTR, 1, what, d);
  if (s == GCC_OK && training) {
    s = gdn_op_arg(op, st, DNNL_ARG_WORKSPACE, FROM_PTR, 2, what, d);
    op->workspace = e->workspace;
  }
  if (s == GCC_OK)
    s = pool_corrections(op, p, oh, ow, d);
  if (s == GCC_OK && op->corr_h)
    op->post = post_fwd_corr;
  if (s == GCC_OK)
    s = gdn_op_finish(op, what, d);
  if (s != GCC_OK) {
    gcc_dnnl_op_free(op);
    return s;
  }
  *out = op;
  return GCC_OK;
}

gcc_status gcc_dnnl_pool_bwd_create(gcc_dnnl *dn, const gcc_dnnl_pool_desc *p, gcc_dnnl_op **out,
                                    gcc_diag *d) {
  *out = NULL;
  char what[256];
  pool_what("pool_bwd", p, what, sizeof what);
  GCC_TRY(pool_check(p, what, d));
  int max = p->kind == GCC_DNNL_POOL_MAX;
  prim_key key;
  pool_key(dn, K_POOL_BWD, p, 1, &key);
  cache_entry *e = NULL;
  GCC_TRY(gdn_cache_get(dn, &key, build_pool_bwd, p, what, &e, d));
  gcc_dnnl_op *op = NULL;
  GCC_TRY(gdn_op_new(dn, max ? 3 : 2, &op, d));
  snprintf(op->name, sizeof op->name, "pool_bwd (%s)%s", e->impl, what + strlen("pool_bwd"));
  int64_t oh, ow;
  gcc_dnnl_pool_out_dims(p, &oh, &ow);
  gcc_status s = pool_corrections(op, p, oh, ow, d);
  if (s == GCC_OK && op->corr_h) { /* dY * corrections in the scratch, then oneDNN */
    op->temps = align_up((size_t)(p->n * p->c * oh * ow) * sizeof(float));
    op->pre = pre_bwd_corr;
  }
  op_step *st = gdn_op_step_add(op, e);
  if (s == GCC_OK)
    s = op->corr_h ? gdn_op_arg(op, st, DNNL_ARG_DIFF_DST, FROM_SCRATCH, 0, what, d)
                   : gdn_op_arg(op, st, DNNL_ARG_DIFF_DST, FROM_PTR, 0, what, d);
  if (s == GCC_OK && max)
    s = gdn_op_arg(op, st, DNNL_ARG_WORKSPACE, FROM_PTR, 1, what, d);
  if (s == GCC_OK)
    s = gdn_op_arg(op, st, DNNL_ARG_DIFF_SRC, FROM_PTR, max ? 2 : 1, what, d);
  if (s == GCC_OK)
    s = gdn_op_finish(op, what, d);
  if (s != GCC_OK) {
    gcc_dnnl_op_free(op);
    return s;
  }
  *out = op;
  return GCC_OK;
}

gcc_status gcc_dnnl_max_pool_bwd_from_x_create(gcc_dnnl *dn, const gcc_dnnl_pool_desc *p,
                                               gcc_dnnl_op **out, gcc_diag *d) {
  *out = NULL;
  char what[256];
  pool_what("max_pool_bwd_from_x", p, what, sizeof what);
  if (p->kind != GCC_DNNL_POOL_MAX)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "oneDNN: %s: only max pooling has an argmax",
                        what);
  GCC_TRY(pool_check(p, what, d));
  return max_pool_own_create(dn, p, 1, what, out, d);
}

/* ---- eltwise (ReLU) -------------------------------------------------------- */

static gcc_status relu_fwd_pd(gcc_dnnl *dn, int64_t numel, dnnl_alg_kind_t alg,
                              dnnl_primitive_attr_t attr, dnnl_primitive_desc_t *pd,
                              const char *what, gcc_diag *d) {
  dnnl_memory_desc_t md;
  GCC_TRY(gdn_md_tag(&md, 1, (int64_t[]){numel}, dnnl_a, what, d));
  dnnl_eltwise_desc_t ed;
  DNNL_RET(dnnl_eltwise_forward_desc_init, (&ed, dnnl_forward_training, alg, &md, 0.0f, 0.0f));
  DNNL_RET(dnnl_primitive_desc_create, (pd, &ed, attr, dn->engine, NULL));
  return GCC_OK;
}

static gcc_status build_relu_fwd(gcc_dnnl *dn, const void *desc, dnnl_primitive_attr_t attr,
                                 dnnl_primitive_desc_t *pd, const char *what, gcc_diag *d) {
  return relu_fwd_pd(dn, *(const int64_t *)desc, dnnl_eltwise_relu, attr, pd, what, d);
}

static gcc_status build_relu_bwd(gcc_dnnl *dn, const void *desc, dnnl_primitive_attr_t attr,
                                 dnnl_primitive_desc_t *pd, const char *what, gcc_diag *d) {
  int64_t numel = *(const int64_t *)desc;
  gcc_status s = GCC_OK;
  dnnl_primitive_desc_t hint = NULL;
  dnnl_memory_desc_t md;
  GCC_TRY(gdn_md_tag(&md, 1, (int64_t[]){numel}, dnnl_a, what, d));
  GCC_TRY(relu_fwd_pd(dn, numel, dnnl_eltwise_relu_use_dst_for_bwd, NULL, &hint, what, d));
  dnnl_eltwise_desc_t ed;
  DNNL_CALL(dnnl_eltwise_backward_desc_init,
            (&ed, dnnl_eltwise_relu_use_dst_for_bwd, &md, &md, 0.0f, 0.0f));
  DNNL_CALL(dnnl_primitive_desc_create, (pd, &ed, attr, dn->engine, hint));
fail:
  if (hint)
    dnnl_primitive_desc_destroy(hint);
  return s;
}

static gcc_status relu_create(gcc_dnnl *dn, int64_t numel, int bwd, gcc_dnnl_op **out,
                              gcc_diag *d) {
  *out = NULL;
  char what[96];
  snprintf(what, sizeof what, "%s %" PRId64, bwd ? "relu_bwd" : "relu_fwd", numel);
  if (numel < 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "oneDNN: %s: no elements", what);
  prim_key key = {0};
  key_i(&key, bwd ? K_RELU_BWD : K_RELU_FWD);
  key_i(&key, dn->threads);
  key_i(&key, numel);
  cache_entry *e = NULL;
  GCC_TRY(gdn_cache_get(dn, &key, bwd ? build_relu_bwd : build_relu_fwd, &numel, what, &e, d));
  gcc_dnnl_op *op = NULL;
  GCC_TRY(gdn_op_new(dn, bwd ? 3 : 2, &op, d));
  snprintf(op->name, sizeof op->name, "%s (%s) %" PRId64, bwd ? "relu_bwd" : "relu_fwd", e->impl,
           numel);
  op_step *st = gdn_op_step_add(op, e);
  gcc_status s;
  if (bwd) {
    s = gdn_op_arg(op, st, DNNL_ARG_DIFF_DST, FROM_PTR, 0, what, d);
    if (s == GCC_OK)
      s = gdn_op_arg(op, st, DNNL_ARG_DST, FROM_PTR, 1, what, d);
    if (s == GCC_OK)
      s = gdn_op_arg(op, st, DNNL_ARG_DIFF_SRC, FROM_PTR, 2, what, d);
  } else {
    s = gdn_op_arg(op, st, DNNL_ARG_SRC, FROM_PTR, 0, what, d);
    if (s == GCC_OK)
      s = gdn_op_arg(op, st, DNNL_ARG_DST, FROM_PTR, 1, what, d);
  }
  if (s == GCC_OK)
    s = gdn_op_finish(op, what, d);
  if (s != GCC_OK) {
    gcc_dnnl_op_free(op);
    return s;
  }
  *out = op;
  return GCC_OK;
}

gcc_status gcc_dnnl_relu_fwd_create(gcc_dnnl *dn, int64_t numel, gcc_dnnl_op **out, gcc_diag *d) {
  return relu_create(dn, numel, 0, out, d);
}

gcc_status gcc_dnnl_relu_bwd_create(gcc_dnnl *dn, int64_t numel, gcc_dnnl_op **out, gcc_diag *d) {
  return relu_create(dn, numel, 1, out, d);
}

/* ---- batch normalization ------------------------------------------------------ */

#define BN_FLAGS ((unsigned)(dnnl_use_scale | dnnl_use_shift))

static gcc_status bnorm_fwd_pd(gcc_dnnl *dn, const gcc_dnnl_bnorm_desc *b, int training,
                               dnnl_primitive_attr_t attr, dnnl_primitive_desc_t *pd,
                               const char *what, gcc_diag *d) {
  dnnl_memory_desc_t md;
  GCC_TRY(gdn_md_tag(&md, 4, (int64_t[]){b->n, b->c, b->h, b->w}, dnnl_nchw, what, d));
  dnnl_batch_normalization_desc_t bd;
  DNNL_RET(dnnl_batch_normalization_forward_desc_init,
           (&bd, training ? dnnl_forward_training : dnnl_forward_inference, &md, b->eps,
            training ? BN_FLAGS : BN_FLAGS | (unsigned)dnnl_use_global_stats));
  DNNL_RET(dnnl_primitive_desc_create, (pd, &bd, attr, dn->engine, NULL));
  return GCC_OK;
}

static gcc_status build_bnorm_train(gcc_dnnl *dn, const void *desc, dnnl_primitive_attr_t attr,
                                    dnnl_primitive_desc_t *pd, const char *what, gcc_diag *d) {
  return bnorm_fwd_pd(dn, desc, 1, attr, pd, what, d);
}

static gcc_status build_bnorm_infer(gcc_dnnl *dn, const void *desc, dnnl_primitive_attr_t attr,
                                    dnnl_primitive_desc_t *pd, const char *what, gcc_diag *d) {
  return bnorm_fwd_pd(dn, desc, 0, attr, pd, what, d);
}

static gcc_status build_bnorm_bwd(gcc_dnnl *dn, const void *desc, dnnl_primitive_attr_t attr,
                                  dnnl_primitive_desc_t *pd, const char *what, gcc_diag *d) {
  const gcc_dnnl_bnorm_desc *b = desc;
  gcc_status s = GCC_OK;
  dnnl_primitive_desc_t hint = NULL;
  dnnl_memory_desc_t md;
  GCC_TRY(gdn_md_tag(&md, 4, (int64_t[]){b->n, b->c, b->h, b->w}, dnnl_nchw, what, d));
  GCC_TRY(bnorm_fwd_pd(dn, b, 1, NULL, &hint, what, d));
  dnnl_batch_normalization_desc_t bd;
  DNNL_CALL(dnnl_batch_normalization_backward_desc_init,
            (&bd, dnnl_backward, &md, &md, b->eps, BN_FLAGS));
  DNNL_CALL(dnnl_primitive_desc_create, (pd, &bd, attr, dn->engine, hint));
fail:
  if (hint)
    dnnl_primitive_desc_destroy(hint);
  return s;
}

static gcc_status bnorm_create(gcc_dnnl *dn, const gcc_dnnl_bnorm_desc *b, int kind,
                               gcc_dnnl_op **out, gcc_diag *d) {
  *out = NULL;
  static const char *names[] = {[K_BNORM_FWD_TRAIN] = "bnorm_fwd_train",
                                [K_BNORM_FWD_INFER] = "bnorm_fwd_infer",
                                [K_BNORM_BWD] = "bnorm_bwd"};
  char what[160];
  snprintf(what, sizeof what, "%s %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " eps %g",
           names[kind], b->n, b->c, b->h, b->w, (double)b->eps);
  if (b->n < 1 || b->c < 1 || b->h < 1 || b->w < 1 || !(b->eps >= 0.0f))
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "oneDNN: %s: sizes must be >= 1 and eps >= 0",
                        what);
  prim_key key = {0};
  key_i(&key, kind);
  key_i(&key, dn->threads);
  key_i(&key, b->n), key_i(&key, b->c), key_i(&key, b->h), key_i(&key, b->w);
  key_f(&key, b->eps);
  pd_builder build = kind == K_BNORM_FWD_TRAIN   ? build_bnorm_train
                     : kind == K_BNORM_FWD_INFER ? build_bnorm_infer
                                                 : build_bnorm_bwd;
  cache_entry *e = NULL;
  GCC_TRY(gdn_cache_get(dn, &key, build, b, what, &e, d));
  static const int train_args[] = {DNNL_ARG_SRC, DNNL_ARG_SCALE, DNNL_ARG_SHIFT,
                                   DNNL_ARG_DST, DNNL_ARG_MEAN,  DNNL_ARG_VARIANCE};
  static const int infer_args[] = {DNNL_ARG_SRC,  DNNL_ARG_SCALE,    DNNL_ARG_SHIFT,
                                   DNNL_ARG_MEAN, DNNL_ARG_VARIANCE, DNNL_ARG_DST};
  /* oneDNN 2.6 takes the shift as an input of the backward too */
  static const int bwd_args[] = {DNNL_ARG_SRC,      DNNL_ARG_DIFF_DST,   DNNL_ARG_SCALE,
                                 DNNL_ARG_SHIFT,    DNNL_ARG_MEAN,       DNNL_ARG_VARIANCE,
                                 DNNL_ARG_DIFF_SRC, DNNL_ARG_DIFF_SCALE, DNNL_ARG_DIFF_SHIFT};
  const int *args = kind == K_BNORM_FWD_TRAIN   ? train_args
                    : kind == K_BNORM_FWD_INFER ? infer_args
                                                : bwd_args;
  int n = kind == K_BNORM_BWD ? 9 : 6;
  gcc_dnnl_op *op = NULL;
  GCC_TRY(gdn_op_new(dn, n, &op, d));
  snprintf(op->name, sizeof op->name, "%s (%s)%s", names[kind], e->impl,
           what + strlen(names[kind]));
  op_step *st = gdn_op_step_add(op, e);
  gcc_status s = GCC_OK;
  for (int i = 0; i < n && s == GCC_OK; i++)
    s = gdn_op_arg(op, st, args[i], FROM_PTR, i, what, d);
  if (s == GCC_OK)
    s = gdn_op_finish(op, what, d);
  if (s != GCC_OK) {
    gcc_dnnl_op_free(op);
    return s;
  }
  *out = op;
  return GCC_OK;
}

gcc_status gcc_dnnl_bnorm_fwd_train_create(gcc_dnnl *dn, const gcc_dnnl_bnorm_desc *bd,
                                           gcc_dnnl_op **out, gcc_diag *d) {
  return bnorm_create(dn, bd, K_BNORM_FWD_TRAIN, out, d);
}

gcc_status gcc_dnnl_bnorm_fwd_infer_create(gcc_dnnl *dn, const gcc_dnnl_bnorm_desc *bd,
                                           gcc_dnnl_op **out, gcc_diag *d) {
  return bnorm_create(dn, bd, K_BNORM_FWD_INFER, out, d);
}

gcc_status gcc_dnnl_bnorm_bwd_create(gcc_dnnl *dn, const gcc_dnnl_bnorm_desc *bd, gcc_dnnl_op **out,
                                     gcc_diag *d) {
  return bnorm_create(dn, bd, K_BNORM_BWD, out, d);
}

/* ---- sgemm peak ---------------------------------------------------------------- */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

gcc_status gcc_dnnl_sgemm_gflops(gcc_dnnl *dn, int64_t m, int64_t n, int64_t k, int reps,
                                 double *gflops, gcc_diag *d) {
  char what[96];
  snprintf(what, sizeof what, "dnnl_sgemm %" PRId64 "x%" PRId64 "x%" PRId64, m, n, k);
  *gflops = 0;
  if (m < 1 || n < 1 || k < 1 || reps < 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "oneDNN: %s: sizes and reps must be >= 1",
                        what);
  float *a = aligned_alloc(ALIGN, align_up((size_t)(m * k) * sizeof(float)));
  float *b = aligned_alloc(ALIGN, align_up((size_t)(k * n) * sizeof(float)));
  float *c = aligned_alloc(ALIGN, align_up((size_t)(m * n) * sizeof(float)));
  gcc_status s = GCC_OK;
  if (!a || !b || !c) {
    s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (%s)", what);
    goto fail;
  }
  for (int64_t i = 0; i < m * k; i++)
    a[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
  for (int64_t i = 0; i < k * n; i++)
    b[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
  use_threads(dn->threads);
  double best = 1e30;
  for (int r = 0; r <= reps; r++) {
    double t0 = now_s();
    DNNL_CALL(dnnl_sgemm, ('N', 'N', m, n, k, 1.0f, a, k, b, n, 0.0f, c, n));
    double t = now_s() - t0;
    if (r > 0 && t < best)
      best = t;
  }
  *gflops = 2.0 * (double)m * (double)n * (double)k / best * 1e-9;
fail:
  free(a);
  free(b);
  free(c);
  return s;
}
