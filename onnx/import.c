/*
 * import.c - reading an ONNX ModelProto: tensors (raw, typed, external),
 * values, node order, attributes, and the final checks of the IR graph
 * (onnx/import.h). The op mapping is in onnx/import_ops.c.
 */
#include "onnx/import.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/loader.h"
#include "graph/ops.h"
#include "graph/outfile.h"
#include "graph/util.h"
#include "onnx/import_internal.h"

/* ---- dtypes ------------------------------------------------------------- */

size_t onnx_dtype_size(int t) {
  switch (t) {
  case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32: return 4;
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT8:
  case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: return 1;
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16:
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT16:
  case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
  case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: return 2;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64:
  case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: return 8;
  default: return 0;
  }
}

const char *onnx_dtype_name(int t) {
  static const char *const names[] = {"undefined",  "float",   "uint8",  "int8",   "uint16",
                                      "int16",      "int32",   "int64",  "string", "bool",
                                      "float16",    "double",  "uint32", "uint64", "complex64",
                                      "complex128", "bfloat16"};
  if (t >= 0 && t < (int)(sizeof names / sizeof names[0]))
    return names[t];
  return "unknown";
}

gcc_dtype onnx_to_gcc_dtype(int t) {
  switch (t) {
  case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: return GCC_DT_FLOAT32;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: return GCC_DT_INT64;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: return GCC_DT_INT32;
  case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: return GCC_DT_BOOL;
  default: return GCC_DT_UNDEFINED;
  }
}

/* ---- shapes ------------------------------------------------------------- */

char *tshape_str(const tshape *s, char *buf, size_t cap) {
  size_t n = 0;
  n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "[");
  for (int i = 0; i < s->ndim; i++) {
    const char *sep = i ? ", " : "";
    if (s->d[i].sym && s->d[i].v == 1)
      n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%sN", sep);
    else if (s->d[i].sym)
      n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%" PRId64 "N", sep, s->d[i].v);
    else
      n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, "%s%" PRId64, sep, s->d[i].v);
  }
  snprintf(buf + n, n < cap ? cap - n : 0, "]");
  return buf;
}

int tshape_has_sym(const tshape *s) {
  for (int i = 0; i < s->ndim; i++)
    if (s->d[i].sym)
      return 1;
  return 0;
}

int tshape_numel(const tshape *s, sdim *out) {
  sdim r = {1, 0};
  for (int i = 0; i < s->ndim; i++) {
    if (s->d[i].sym) {
      if (r.sym)
        return 0; /* N * N */
      r.sym = 1;
    }
    if (s->d[i].v != 0 && r.v > INT64_MAX / s->d[i].v)
      return 0;
    r.v *= s->d[i].v;
  }
  *out = r;
  return 1;
}

int64_t tshape_static_numel(const tshape *s) {
  sdim n;
  if (!tshape_numel(s, &n) || n.sym)
    return -1;
  return n.v;
}

int tshape_broadcast(const tshape *a, const tshape *b, tshape *out) {
  int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
  tshape r = {nd, {{0, 0}}};
  for (int i = 0; i < nd; i++) {
    int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
    sdim x = ia >= 0 ? a->d[ia] : (sdim){1, 0};
    sdim y = ib >= 0 ? b->d[ib] : (sdim){1, 0};
    if (x.v == y.v && x.sym == y.sym)
      r.d[i] = x;
    else if (!x.sym && x.v == 1)
      r.d[i] = y;
    else if (!y.sym && y.v == 1)
      r.d[i] = x;
    else
      return 0;
  }
  *out = r;
  return 1;
}

/* ---- messages ------------------------------------------------------------ */

gcc_status node_err(nctx *c, gcc_diag *d, gcc_status s, const char *fmt, ...) {
  char msg[1600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return gcc_diag_set(d, s, "%s: %s: %s", c->I->src, c->desc, msg);
}

static gcc_status oom(gcc_diag *d, const char *what) {
  return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (%s)", what);
}

/* ---- the value table ------------------------------------------------------- */

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

static int find_val(const imp *I, const char *name) {
  if (!I->map_cap)
    return -1;
  size_t mask = (size_t)I->map_cap - 1;
  for (size_t h = hash_str(name) & mask;; h = (h + 1) & mask) {
    int k = I->map[h];
    if (k < 0)
      return -1;
    if (strcmp(I->v[k].name, name) == 0)
      return k;
  }
}

int imp_find(const imp *I, const char *name) {
  return find_val(I, name);
}

static gcc_status map_grow(imp *I, gcc_diag *d) {
  int cap = I->map_cap ? I->map_cap * 2 : 1024;
  int *m = malloc((size_t)cap * sizeof *m);
  if (!m)
    return oom(d, "ONNX value table");
  for (int i = 0; i < cap; i++)
    m[i] = -1;
  size_t mask = (size_t)cap - 1;
  for (int k = 0; k < I->n_v; k++) {
    size_t h = hash_str(I->v[k].name) & mask;
    while (m[h] >= 0)
      h = (h + 1) & mask;
    m[h] = k;
  }
  free(I->map);
  I->map = m;
  I->map_cap = cap;
  return GCC_OK;
}

/* The value called `name`, created if new. */
static gcc_status get_val(imp *I, const char *name, int *out, gcc_diag *d) {
  int k = find_val(I, name);
  if (k >= 0) {
    *out = k;
    return GCC_OK;
  }
  if (2 * (I->n_v + 1) > I->map_cap)
    GCC_TRY(map_grow(I, d));
  if (I->n_v == I->cap_v) {
    int nc = I->cap_v ? 2 * I->cap_v : 256;
    ival *nv = realloc(I->v, (size_t)nc * sizeof *nv);
    if (!nv)
      return oom(d, "ONNX values");
    I->v = nv;
    I->cap_v = nc;
  }
  ival *v = &I->v[I->n_v];
  memset(v, 0, sizeof *v);
  v->name = name;
  v->producer = -1;
  v->alias = -1;
  v->ir = -1;
  v->conv_node = -1;
  v->ir_node = -1;
  v->copy_ir = v->copy_node = -1;
  size_t mask = (size_t)I->map_cap - 1;
  size_t h = hash_str(name) & mask;
  while (I->map[h] >= 0)
    h = (h + 1) & mask;
  I->map[h] = I->n_v;
  *out = I->n_v++;
  return GCC_OK;
}

ival *imp_val(imp *I, int idx) {
  return idx >= 0 && idx < I->n_v ? &I->v[idx] : NULL;
}

int imp_root(imp *I, int idx) {
  for (int guard = 0; idx >= 0 && I->v[idx].alias >= 0 && guard < I->n_v; guard++)
    idx = I->v[idx].alias;
  return idx;
}

gcc_status pool_add(imp *I, void *p, gcc_diag *d) {
  if (I->n_pool == I->cap_pool) {
    int nc = I->cap_pool ? 2 * I->cap_pool : 64;
    void **np = realloc(I->pool, (size_t)nc * sizeof *np);
    if (!np) {
      free(p);
      return oom(d, "constants");
    }
    I->pool = np;
    I->cap_pool = nc;
  }
  I->pool[I->n_pool++] = p;
  return GCC_OK;
}

int n_in(nctx *c) {
  return (int)c->n->n_input;
}
int n_out(nctx *c) {
  return (int)c->n->n_output;
}

int in_idx(nctx *c, int k) {
  if (k < 0 || k >= (int)c->n->n_input || !c->n->input[k] || !*c->n->input[k])
    return -1;
  return imp_root(c->I, find_val(c->I, c->n->input[k]));
}

int out_idx(nctx *c, int k) {
  if (k < 0 || k >= (int)c->n->n_output || !c->n->output[k] || !*c->n->output[k])
    return -1;
  return find_val(c->I, c->n->output[k]);
}

int out_used(nctx *c, int k) {
  int o = out_idx(c, k);
  return o >= 0 && c->I->v[o].n_uses > 0;
}

void set_alias(nctx *c, int k, int idx) {
  int o = out_idx(c, k);
  if (o < 0)
    return;
  ival *v = &c->I->v[o];
  v->alias = imp_root(c->I, idx);
  v->onnx_dt = c->I->v[v->alias].onnx_dt;
  v->sh = c->I->v[v->alias].sh;
  v->done = 1;
}

gcc_status set_const(nctx *c, int k, int onnx_dt, const tshape *s, void *data, size_t bytes,
                     gcc_diag *d) {
  GCC_TRY(pool_add(c->I, data, d));
  int o = out_idx(c, k);
  if (o < 0)
    return GCC_OK;
  ival *v = &c->I->v[o];
  v->is_const = 1;
  v->onnx_dt = onnx_dt;
  v->sh = *s;
  v->data = data;
  v->bytes = bytes;
  v->done = 1;
  return GCC_OK;
}

void mark_folded(nctx *c) {
  c->folded = 1;
}

/* ---- IR emission ------------------------------------------------------------ */

/* A name for a new IR value or node: `base` if free (neither an ONNX value
 * nor an IR value), else base_1, base_2, ... */
static void fresh_name(imp *I, const char *base, char *out, size_t cap) {
  snprintf(out, cap, "%s", base);
  for (int k = 1; find_val(I, out) >= 0 || gcc_graph_find(I->g, out) >= 0; k++)
    snprintf(out, cap, "%s_%d", base, k);
}

static int to_gcc_shape(const tshape *s, int64_t batch, gcc_shape *out) {
  out->ndim = s->ndim;
  for (int i = 0; i < s->ndim; i++)
    out->dims[i] = s->d[i].sym ? s->d[i].v * batch : s->d[i].v;
  return 1;
}

/* Adds constant v as a new IR initializer into *ir (its own name the first
 * time, "<name>_<k>" for a copy). */
static gcc_status materialise(nctx *c, ival *v, int *ir, gcc_diag *d) {
  imp *I = c->I;
  if (v->symv)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "value '%s' is computed from the symbolic batch size (shape arithmetic); "
                    "this node cannot read it",
                    v->name);
  if (v->aff)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "value '%s' is an index tensor computed from the symbolic batch size (Range "
                    "over N); only Add, Mul, Squeeze, Unsqueeze, Reshape and Gather's indices "
                    "can read it",
                    v->name);
  if (v->seq)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "value '%s' is a sequence (SplitToSequence); only SequenceAt at a constant "
                    "position can read it",
                    v->name);
  if (!v->is_const)
    return node_err(c, d, GCC_ERR_INTERNAL, "value '%s' has no IR value", v->name);
  gcc_dtype dt = onnx_to_gcc_dtype(v->onnx_dt);
  if (dt == GCC_DT_UNDEFINED)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "constant '%s' has dtype %s, which this version does not compute "
                    "(float, int64, int32, bool)",
                    v->name, onnx_dtype_name(v->onnx_dt));
  int64_t numel = tshape_static_numel(&v->sh);
  if (numel <= 0) {
    char sh[128];
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "constant '%s' of shape %s is empty (zero-size tensors are not supported)",
                    v->name, tshape_str(&v->sh, sh, sizeof sh));
  }
  gcc_shape s;
  to_gcc_shape(&v->sh, 1, &s);
  char name[512];
  if (gcc_graph_find(I->g, v->name) < 0)
    snprintf(name, sizeof name, "%s", v->name);
  else
    fresh_name(I, v->name, name, sizeof name);
  int kind = (v->trainable && dt == GCC_DT_FLOAT32) ? GCC_VALUE_PARAM : GCC_VALUE_CONST;
  return gcc_graph_add_value(I->g, name, dt, &s, kind, v->data, v->bytes, ir, d);
}

gcc_status ir_of(nctx *c, int idx, int *ir, gcc_diag *d) {
  imp *I = c->I;
  idx = imp_root(I, idx);
  ival *v = &I->v[idx];
  /* training: a shared weight is one parameter per reading node, unless the
   * exporter says it is one nn.Parameter (tied weights: one IR parameter,
   * whose gradient autodiff sums over its readers) */
  if (v->ir >= 0 && I->train && v->tied && v->ir_node >= 0 && v->ir_node != c->index &&
      !v->tie_counted && I->g->values[v->ir].kind == GCC_VALUE_PARAM &&
      !I->g->values[v->ir].state) {
    v->tie_counted = 1;
    I->rep->n_tied++;
  }
  if (v->ir >= 0 && I->train && v->is_init && v->trainable && !v->tied &&
      I->g->values[v->ir].kind == GCC_VALUE_PARAM && v->ir_node >= 0 && v->ir_node != c->index) {
    if (v->copy_node != c->index) {
      GCC_TRY(materialise(c, v, &v->copy_ir, d));
      v->copy_node = c->index;
    }
    *ir = v->copy_ir;
    return GCC_OK;
  }
  if (v->ir >= 0) {
    *ir = v->ir;
    return GCC_OK;
  }
  GCC_TRY(materialise(c, v, &v->ir, d));
  v->ir_node = c->index;
  *ir = v->ir;
  return GCC_OK;
}

gcc_status ir_private_copy(nctx *c, int idx, int *ir, gcc_diag *d) {
  return materialise(c, &c->I->v[imp_root(c->I, idx)], ir, d);
}

gcc_status emit(nctx *c, int op, const int *ins, int n_ins, int out_k, int onnx_dt, const tshape *s,
                int *tmp, int *node, gcc_diag *d) {
  imp *I = c->I;
  int outv;
  if (out_k >= 0) {
    int o = out_idx(c, out_k);
    if (o < 0)
      return node_err(c, d, GCC_ERR_INTERNAL, "output %d has no name", out_k);
    GCC_TRY(gcc_graph_add_value(I->g, I->v[o].name, GCC_DT_UNDEFINED, NULL, GCC_VALUE_ACTIVATION,
                                NULL, 0, &outv, d));
    ival *v = &I->v[o];
    v->ir = outv;
    v->onnx_dt = onnx_dt;
    v->sh = *s;
    v->done = 1;
  } else {
    char base[300], name[320];
    snprintf(base, sizeof base, "%s/%s", c->ir_name, gcc_op_name(op));
    fresh_name(I, base, name, sizeof name);
    GCC_TRY(gcc_graph_add_value(I->g, name, GCC_DT_UNDEFINED, NULL, GCC_VALUE_ACTIVATION, NULL, 0,
                                &outv, d));
    if (tmp)
      *tmp = outv;
  }
  char nname[320];
  if (c->n_ir == 0)
    snprintf(nname, sizeof nname, "%s", c->ir_name);
  else
    snprintf(nname, sizeof nname, "%s/%d", c->ir_name, c->n_ir);
  GCC_TRY(gcc_graph_add_node(I->g, nname, op, ins, n_ins, &outv, 1, node, d));
  c->n_ir++;
  size_t l = strlen(c->ir_ops);
  if (!strstr(c->ir_ops, gcc_op_name(op)))
    snprintf(c->ir_ops + l, sizeof c->ir_ops - l, "%s%s", l ? "+" : "", gcc_op_name(op));
  return GCC_OK;
}

gcc_status emit_output(nctx *c, int node, int out_k, int onnx_dt, const tshape *s, gcc_diag *d) {
  imp *I = c->I;
  int outv, o = out_idx(c, out_k);
  if (o >= 0) {
    GCC_TRY(gcc_graph_add_value(I->g, I->v[o].name, GCC_DT_UNDEFINED, NULL, GCC_VALUE_ACTIVATION,
                                NULL, 0, &outv, d));
    ival *v = &I->v[o];
    v->ir = outv;
    v->onnx_dt = onnx_dt;
    v->sh = *s;
    v->done = 1;
  } else {
    char base[300], name[320];
    snprintf(base, sizeof base, "%s/output%d", c->ir_name, out_k);
    fresh_name(I, base, name, sizeof name);
    GCC_TRY(gcc_graph_add_value(I->g, name, GCC_DT_UNDEFINED, NULL, GCC_VALUE_ACTIVATION, NULL, 0,
                                &outv, d));
  }
  gcc_node *n = &I->g->nodes[node];
  int *no = realloc(n->outputs, (size_t)(n->n_outputs + 1) * sizeof *no);
  if (!no)
    return oom(d, "node outputs");
  no[n->n_outputs++] = outv;
  n->outputs = no;
  I->g->values[outv].producer = node;
  return GCC_OK;
}

gcc_status emit_reshape(nctx *c, int x, const tshape *s, int out_k, int onnx_dt, int *tmp,
                        gcc_diag *d) {
  int64_t dims[GCC_MAX_DIMS];
  int n_sym = 0;
  for (int i = 0; i < s->ndim; i++) {
    dims[i] = s->d[i].sym ? -1 : s->d[i].v;
    n_sym += s->d[i].sym;
  }
  if (n_sym > 1) {
    char sh[128];
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "the result %s has more than one dim that depends on the symbolic batch N; "
                    "give the input a fixed batch",
                    tshape_str(s, sh, sizeof sh));
  }
  int node;
  GCC_TRY(emit(c, GCC_OP_RESHAPE, &x, 1, out_k, onnx_dt, s, tmp, &node, d));
  return gcc_node_set_ints(c->I->g, node, "shape", dims, s->ndim) == GCC_OK ? GCC_OK
                                                                            : oom(d, "attributes");
}

/* ---- attributes ------------------------------------------------------------- */

const Onnx__AttributeProto *attr(nctx *c, const char *name) {
  for (size_t i = 0; i < c->n->n_attribute; i++) {
    const Onnx__AttributeProto *a = c->n->attribute[i];
    if (a && a->name && strcmp(a->name, name) == 0)
      return a;
  }
  return NULL;
}

gcc_status allow_attrs(nctx *c, gcc_diag *d, ...) {
  for (size_t i = 0; i < c->n->n_attribute; i++) {
    const Onnx__AttributeProto *a = c->n->attribute[i];
    const char *name = a && a->name ? a->name : "";
    if (a && a->ref_attr_name && *a->ref_attr_name)
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "attribute '%s' refers to a function attribute (not supported)", name);
    for (size_t j = 0; j < i; j++)
      if (c->n->attribute[j]->name && strcmp(c->n->attribute[j]->name, name) == 0)
        return node_err(c, d, GCC_ERR_INVALID_GRAPH, "attribute '%s' is given twice", name);
    va_list ap;
    va_start(ap, d);
    int ok = 0;
    char list[512] = "";
    for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *)) {
      if (strcmp(s, name) == 0)
        ok = 1;
      size_t l = strlen(list);
      snprintf(list + l, sizeof list - l, "%s%s", l ? ", " : "", s);
    }
    va_end(ap);
    if (!ok)
      return node_err(c, d, GCC_ERR_UNSUPPORTED,
                      "attribute '%s' is not handled by the import of %s-%d (handled: %s)", name,
                      c->n->op_type, c->ver, list[0] ? list : "none");
  }
  return GCC_OK;
}

/* The attribute's type, inferred from the field that is set when `type` is
 * missing (files written before IR version 3 left it out). */
static int attr_type(const Onnx__AttributeProto *a) {
  if (a->has_type)
    return (int)a->type;
  if (a->has_f)
    return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
  if (a->has_i)
    return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  if (a->has_s)
    return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
  if (a->t)
    return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
  if (a->n_floats)
    return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
  if (a->n_ints)
    return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
  return 0;
}

static gcc_status want_type(nctx *c, const Onnx__AttributeProto *a, int type, const char *tn,
                            gcc_diag *d) {
  if (attr_type(a) != type)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "attribute '%s' must be of type %s", a->name, tn);
  return GCC_OK;
}

gcc_status a_int(nctx *c, const char *name, int64_t def, int64_t *out, gcc_diag *d) {
  const Onnx__AttributeProto *a = attr(c, name);
  *out = def;
  if (!a)
    return GCC_OK;
  GCC_TRY(want_type(c, a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, "int", d));
  *out = a->i;
  return GCC_OK;
}

gcc_status a_float(nctx *c, const char *name, float def, float *out, gcc_diag *d) {
  const Onnx__AttributeProto *a = attr(c, name);
  *out = def;
  if (!a)
    return GCC_OK;
  GCC_TRY(want_type(c, a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT, "float", d));
  *out = a->f;
  return GCC_OK;
}

gcc_status a_ints(nctx *c, const char *name, const int64_t **v, int *n, gcc_diag *d) {
  const Onnx__AttributeProto *a = attr(c, name);
  *v = NULL;
  *n = -1;
  if (!a)
    return GCC_OK;
  GCC_TRY(want_type(c, a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, "ints", d));
  if (a->n_ints > 64)
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "attribute '%s' has %zu entries", name, a->n_ints);
  *v = a->ints;
  *n = (int)a->n_ints;
  return GCC_OK;
}

gcc_status a_string(nctx *c, const char *name, const char *def, char *out, size_t cap,
                    gcc_diag *d) {
  const Onnx__AttributeProto *a = attr(c, name);
  snprintf(out, cap, "%s", def);
  if (!a)
    return GCC_OK;
  GCC_TRY(want_type(c, a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, "string", d));
  if (a->s.len >= cap || memchr(a->s.data, 0, a->s.len))
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "attribute '%s' is not a short string", name);
  memcpy(out, a->s.data, a->s.len);
  out[a->s.len] = '\0';
  return GCC_OK;
}

/* ---- tensors ---------------------------------------------------------------- */

/* Reads `len` bytes at `offset` of external file `location` (relative to
 * the model's folder, which it must stay inside). */
static gcc_status read_external(imp *I, const Onnx__TensorProto *t, const char *what, size_t want,
                                void *dst, gcc_diag *d) {
  const char *location = NULL;
  int64_t offset = 0, length = -1;
  for (size_t i = 0; i < t->n_external_data; i++) {
    const Onnx__StringStringEntryProto *e = t->external_data[i];
    const char *k = e && e->key ? e->key : "", *val = e && e->value ? e->value : "";
    char *end;
    if (strcmp(k, "location") == 0) {
      location = val;
    } else if (strcmp(k, "offset") == 0 || strcmp(k, "length") == 0) {
      errno = 0;
      long long x = strtoll(val, &end, 10);
      if (errno || end == val || *end || x < 0)
        return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                            "%s: %s: external_data '%s' is '%s', not a byte count", I->src, what, k,
                            val);
      *(k[0] == 'o' ? &offset : &length) = x;
    } else {
      return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                          "%s: %s: external_data key '%s' is not handled (handled: location, "
                          "offset, length)",
                          I->src, what, k);
    }
  }
  if (!location || !*location)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s: external data without a location",
                        I->src, what);
  if (!I->base_dir[0])
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: %s: external data '%s' needs the model's folder (the model was "
                        "read from memory)",
                        I->src, what, location);
  if (location[0] == '/')
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: %s: external data location '%s' is an absolute path; it must be "
                        "relative to the model's folder",
                        I->src, what, location);
  char path[8192], real_dir[PATH_MAX], real_file[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", I->base_dir, location);
  if (!realpath(I->base_dir, real_dir))
    return gcc_diag_set(d, GCC_ERR_IO, "%s: cannot resolve the model's folder %s: %s", I->src,
                        I->base_dir, strerror(errno));
  if (!realpath(path, real_file))
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s: external data file %s: %s", I->src, what,
                        path, strerror(errno));
  size_t ld = strlen(real_dir);
  if (strcmp(real_file, real_dir) == 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: %s: external data location '%s' is the model's folder %s itself, "
                        "not a file in it",
                        I->src, what, location, real_dir);
  if (strncmp(real_file, real_dir, ld) != 0 || (real_file[ld] != '/' && ld > 1))
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: %s: external data location '%s' resolves to %s, outside the "
                        "model's folder %s",
                        I->src, what, location, real_file, real_dir);
  /* the type before the open (O_NONBLOCK, then fstat): a FIFO or device
   * is refused, never waited on */
  struct stat st;
  int fd = open(real_file, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  FILE *f = NULL;
  if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
    f = fdopen(fd, "rb");
  if (!f) {
    if (fd >= 0)
      close(fd);
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: %s: external data file %s is not a readable file", I->src, what,
                        real_file);
  }
  gcc_input_note(real_file, fd);
  if (length < 0)
    length = (int64_t)st.st_size - offset;
  if ((uint64_t)length != want || offset > (int64_t)st.st_size ||
      (int64_t)st.st_size - offset < length) {
    fclose(f);
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: %s: external data %s holds %" PRId64 " bytes at offset %" PRId64
                        " (file of %lld bytes), the tensor needs %zu",
                        I->src, what, real_file, length, offset, (long long)st.st_size, want);
  }
  int ok = fseeko(f, (off_t)offset, SEEK_SET) == 0 && fread(dst, 1, want, f) == want;
  fclose(f);
  if (!ok)
    return gcc_diag_set(d, GCC_ERR_IO, "%s: %s: cannot read %zu bytes of %s", I->src, what, want,
                        real_file);
  I->rep->n_external++;
  return GCC_OK;
}

gcc_status read_tensor(imp *I, const Onnx__TensorProto *t, const char *what, int *onnx_dt,
                       tshape *s, void **data, size_t *bytes, gcc_diag *d) {
  *data = NULL;
  *bytes = 0;
  int dt = t->has_data_type ? t->data_type : 0;
  size_t es = onnx_dtype_size(dt);
  if (!es)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s: %s has dtype %s, which is not supported",
                        I->src, what, onnx_dtype_name(dt));
  if (t->n_dims > GCC_MAX_DIMS)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s: %s has %zu dims (at most %d)", I->src, what,
                        t->n_dims, GCC_MAX_DIMS);
  if (t->segment)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s: %s is a segment (not supported)", I->src,
                        what);
  s->ndim = (int)t->n_dims;
  uint64_t numel = 1;
  for (size_t i = 0; i < t->n_dims; i++) {
    if (t->dims[i] < 0 || t->dims[i] > ((int64_t)1 << 40))
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s: dim %zu is %" PRId64, I->src, what, i,
                          t->dims[i]);
    s->d[i] = (sdim){t->dims[i], 0};
    numel *= (uint64_t)t->dims[i];
    if (numel > ((uint64_t)1 << 40))
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s: element count overflows", I->src,
                          what);
  }
  size_t want = (size_t)numel * es;
  int external =
      t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  size_t typed =
      dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT    ? t->n_float_data
      : dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT64  ? t->n_int64_data
      : dt == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE ? t->n_double_data
      : dt == ONNX__TENSOR_PROTO__DATA_TYPE__UINT64 || dt == ONNX__TENSOR_PROTO__DATA_TYPE__UINT32
          ? t->n_uint64_data
          : t->n_int32_data;
  int sources = (t->has_raw_data ? 1 : 0) + (typed ? 1 : 0) + (external ? 1 : 0);
  if (sources > 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: %s has its data in more than one place (raw_data, typed field, "
                        "external)",
                        I->src, what);
  void *buf = malloc(want ? want : 1);
  if (!buf)
    return oom(d, "tensor data");
  gcc_status st = GCC_OK;
  if (external) {
    st = read_external(I, t, what, want, buf, d);
  } else if (t->has_raw_data) {
    if (t->raw_data.len != want)
      st = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: %s: raw_data has %zu bytes, the %s tensor of %" PRIu64
                        " elements needs %zu",
                        I->src, what, t->raw_data.len, onnx_dtype_name(dt), numel, want);
    else if (want)
      memcpy(buf, t->raw_data.data, want);
  } else if (typed != numel) {
    st = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                      "%s: %s: %zu values in its typed field, the tensor has %" PRIu64 " elements",
                      I->src, what, typed, numel);
  } else {
    for (uint64_t i = 0; i < numel; i++) {
      switch (dt) {
      case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: ((float *)buf)[i] = t->float_data[i]; break;
      case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: ((int64_t *)buf)[i] = t->int64_data[i]; break;
      case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: ((double *)buf)[i] = t->double_data[i]; break;
      case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64: ((uint64_t *)buf)[i] = t->uint64_data[i]; break;
      case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32:
        ((uint32_t *)buf)[i] = (uint32_t)t->uint64_data[i];
        break;
      case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: ((int32_t *)buf)[i] = t->int32_data[i]; break;
      case ONNX__TENSOR_PROTO__DATA_TYPE__INT16:
      case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16:
      case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
      case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: {
        uint16_t x = (uint16_t)t->int32_data[i];
        memcpy((uint16_t *)buf + i, &x, 2);
        break;
      }
      default: ((uint8_t *)buf)[i] = (uint8_t)t->int32_data[i]; break;
      }
    }
  }
  if (st != GCC_OK) {
    free(buf);
    return st;
  }
  if (dt == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL) /* numpy's bool: any nonzero byte is true */
    for (uint64_t i = 0; i < numel; i++)
      ((uint8_t *)buf)[i] = ((uint8_t *)buf)[i] != 0;
  *onnx_dt = dt;
  *data = buf;
  *bytes = want;
  return GCC_OK;
}

static gcc_status const_of(nctx *c, int idx, const char *what, gcc_diag *d) {
  if (idx < 0)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "%s is missing", what);
  ival *v = &c->I->v[idx];
  if (v->symv)
    return node_err(c, d, GCC_ERR_UNSUPPORTED,
                    "%s '%s' depends on the symbolic batch size; bind the batch (freeze the "
                    "input's shape) to import this node",
                    what, v->name);
  if (!v->is_const)
    return node_err(c, d, GCC_ERR_SHAPE,
                    "%s '%s' is not a constant (computed at run time); this importer needs it "
                    "known at import",
                    what, v->name);
  return GCC_OK;
}

gcc_status const_ints(nctx *c, int idx, const char *what, const int64_t **out, int64_t *n,
                      gcc_diag *d) {
  GCC_TRY(const_of(c, idx, what, d));
  ival *v = &c->I->v[idx];
  int64_t numel = tshape_static_numel(&v->sh);
  if (v->onnx_dt == ONNX__TENSOR_PROTO__DATA_TYPE__INT64) {
    *out = v->data;
    *n = numel;
    return GCC_OK;
  }
  if (v->onnx_dt != ONNX__TENSOR_PROTO__DATA_TYPE__INT32)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "%s '%s' must be int64, got %s", what, v->name,
                    onnx_dtype_name(v->onnx_dt));
  int64_t *r = malloc((size_t)(numel > 0 ? numel : 1) * sizeof *r);
  if (!r)
    return oom(d, "constant");
  for (int64_t i = 0; i < numel; i++)
    r[i] = ((const int32_t *)v->data)[i];
  GCC_TRY(pool_add(c->I, r, d));
  *out = r;
  *n = numel;
  return GCC_OK;
}

gcc_status const_scalar(nctx *c, int idx, const char *what, double *out, gcc_diag *d) {
  GCC_TRY(const_of(c, idx, what, d));
  ival *v = &c->I->v[idx];
  if (tshape_static_numel(&v->sh) != 1)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "%s '%s' must be a scalar", what, v->name);
  const void *p = v->data;
  switch (v->onnx_dt) {
  case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: *out = *(const float *)p; break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: *out = *(const double *)p; break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: *out = (double)*(const int64_t *)p; break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: *out = *(const int32_t *)p; break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: *out = *(const int8_t *)p; break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8: *out = *(const uint8_t *)p; break;
  case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: *out = *(const uint8_t *)p != 0; break;
  default:
    return node_err(c, d, GCC_ERR_UNSUPPORTED, "%s '%s' has dtype %s", what, v->name,
                    onnx_dtype_name(v->onnx_dt));
  }
  return GCC_OK;
}

/* ---- sniffing ------------------------------------------------------------------ */

static int read_varint(const uint8_t *p, size_t n, size_t *pos, uint64_t *out) {
  uint64_t r = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*pos >= n)
      return 0;
    uint8_t b = p[(*pos)++];
    r |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *out = r;
      return 1;
    }
  }
  return 0;
}

int gcc_onnx_sniff(const uint8_t *p, size_t n) {
  size_t pos = 0;
  for (int fields = 0; pos < n && fields < 64; fields++) {
    uint64_t key, x;
    if (!read_varint(p, n, &pos, &key))
      return 0;
    uint64_t field = key >> 3, wire = key & 7;
    if (field == 0)
      return 0;
    switch (wire) {
    case 0:
      if (!read_varint(p, n, &pos, &x))
        return 0;
      break;
    case 1: pos += 8; break;
    case 5: pos += 4; break;
    case 2:
      if (!read_varint(p, n, &pos, &x))
        return 0;
      if (field == 7 || field == 8) /* ModelProto.graph / opset_import */
        return 1;
      if (x > n - pos)
        return 0;
      pos += (size_t)x;
      break;
    default: return 0;
    }
  }
  return 0;
}

/* ---- reading the graph ---------------------------------------------------------- */

static void imp_free(imp *I) {
  for (int i = 0; i < I->n_pool; i++)
    free(I->pool[i]);
  free(I->pool);
  free(I->rename);
  free(I->v);
  free(I->map);
  if (I->m)
    onnx__model_proto__free_unpacked(I->m, NULL);
  gcc_graph_free(I->g);
}

static const char *node_name(const Onnx__NodeProto *n, int i, char *buf, size_t cap) {
  if (n->name && *n->name)
    snprintf(buf, cap, "%s", n->name);
  else
    snprintf(buf, cap, "%s_%d", n->op_type && *n->op_type ? n->op_type : "node", i);
  return buf;
}

static void node_desc(const Onnx__NodeProto *n, int i, char *buf, size_t cap) {
  char nm[256];
  snprintf(buf, cap, "node '%s' (%s)", node_name(n, i, nm, sizeof nm),
           n->op_type ? n->op_type : "?");
}

static int is_default_domain(const char *dom) {
  return !dom || !*dom || strcmp(dom, "ai.onnx") == 0;
}

static gcc_status read_model_header(imp *I, gcc_diag *d) {
  const Onnx__ModelProto *m = I->m;
  I->rep->ir_version = m->has_ir_version ? m->ir_version : 0;
  snprintf(I->rep->producer, sizeof I->rep->producer, "%s%s%s",
           m->producer_name ? m->producer_name : "",
           m->producer_version && *m->producer_version ? " " : "",
           m->producer_version ? m->producer_version : "");
  if (!m->graph)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: the ONNX model has no graph", I->src);
  I->opset = -1;
  for (size_t i = 0; i < m->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *o = m->opset_import[i];
    if (o && is_default_domain(o->domain))
      I->opset = o->has_version ? o->version : 0;
  }
  if (I->opset < 0) {
    if (m->n_opset_import > 0 || (m->has_ir_version && m->ir_version >= 3))
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: the model imports no opset of the default ONNX domain", I->src);
    I->opset = 1; /* IR version < 3 had no opset_import: opset 1 */
  }
  if (I->opset < 1 || I->opset > GCC_ONNX_MAX_OPSET)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: the model uses opset %" PRId64
                        " of the default domain; this importer reads opsets 1 to %d",
                        I->src, I->opset, GCC_ONNX_MAX_OPSET);
  I->rep->opset = I->opset;
  if (m->n_training_info > 0)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: the model has training_info (ONNX training), which is not supported",
                        I->src);
  I->gp = m->graph;
  /* an empty graph is no model (it imported as one that computes nothing) */
  const char *none = !I->gp->n_node ? "nodes" : !I->gp->n_output ? "outputs" : NULL;
  if (none)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: the graph has no %s (%zu nodes, %zu inputs, %zu outputs): nothing "
                        "to import",
                        I->src, none, I->gp->n_node, I->gp->n_input, I->gp->n_output);
  if (I->gp->n_sparse_initializer > 0)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: the graph has sparse initializers, which are not supported", I->src);
  return GCC_OK;
}

/* The tensor type of a graph input or output: elem type and shape. */
static gcc_status read_value_info(imp *I, const Onnx__ValueInfoProto *vi, const char *what,
                                  int need_shape, int *dt, tshape *s, int *has_shape, gcc_diag *d) {
  const char *name = vi->name ? vi->name : "";
  *has_shape = 0;
  if (!vi->type) {
    if (need_shape)
      return gcc_diag_set(d, GCC_ERR_SHAPE, "%s: %s '%s' has no type, so its shape is unknown",
                          I->src, what, name);
    *dt = 0;
    return GCC_OK;
  }
  if (vi->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: %s '%s' is not a tensor (sequence, map, optional and sparse types "
                        "are not supported)",
                        I->src, what, name);
  const Onnx__TypeProto__Tensor *tt = vi->type->tensor_type;
  *dt = tt && tt->has_elem_type ? tt->elem_type : 0;
  if (!tt || !tt->shape) {
    if (need_shape)
      return gcc_diag_set(d, GCC_ERR_SHAPE,
                          "%s: %s '%s' has no shape; the importer needs every dim but the batch",
                          I->src, what, name);
    return GCC_OK;
  }
  if (tt->shape->n_dim > GCC_MAX_DIMS)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s: %s '%s' has %zu dims (at most %d)", I->src,
                        what, name, tt->shape->n_dim, GCC_MAX_DIMS);
  s->ndim = (int)tt->shape->n_dim;
  int known = 1;
  for (size_t i = 0; i < tt->shape->n_dim; i++) {
    const Onnx__TensorShapeProto__Dimension *dm = tt->shape->dim[i];
    if (dm && dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
        dm->dim_value > 0) {
      s->d[i] = (sdim){dm->dim_value, 0};
      continue;
    }
    if (dm && dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
      if (need_shape)
        return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                            "%s: %s '%s': dim %zu is %" PRId64
                            " (zero-size tensors are not supported)",
                            I->src, what, name, i, dm->dim_value);
      known = 0;
      continue;
    }
    const char *param = dm && dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM
                            ? dm->dim_param
                            : "";
    if (i == 0) {
      s->d[i] = (sdim){1, 1}; /* the batch */
      continue;
    }
    if (need_shape)
      return gcc_diag_set(d, GCC_ERR_SHAPE,
                          "%s: %s '%s': dim %zu is symbolic%s%s%s; only dim 0 (the batch) may be "
                          "symbolic, every other dim must have a value",
                          I->src, what, name, i, *param ? " ('" : "", param, *param ? "')" : "");
    known = 0;
  }
  *has_shape = known;
  return GCC_OK;
}

/* Graph inputs, initializers, node outputs: every name gets a value. */
static gcc_status read_values(imp *I, gcc_diag *d) {
  const Onnx__GraphProto *gp = I->gp;
  for (size_t i = 0; i < gp->n_initializer; i++) {
    const Onnx__TensorProto *t = gp->initializer[i];
    if (!t->name || !*t->name)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: initializer %zu has no name", I->src, i);
    int k;
    GCC_TRY(get_val(I, t->name, &k, d));
    if (I->v[k].is_init)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: initializer '%s' is defined twice", I->src,
                          t->name);
    char what[600];
    snprintf(what, sizeof what, "initializer '%s'", t->name);
    void *data;
    size_t bytes;
    int dt;
    tshape s;
    GCC_TRY(read_tensor(I, t, what, &dt, &s, &data, &bytes, d));
    GCC_TRY(pool_add(I, data, d));
    ival *v = &I->v[k];
    v->is_init = v->is_const = v->done = 1;
    v->onnx_dt = dt;
    v->sh = s;
    v->data = data;
    v->bytes = bytes;
    v->trainable = dt == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    I->rep->n_initializers++;
    I->rep->initializer_bytes += bytes;
  }
  for (size_t i = 0; i < gp->n_input; i++) {
    const Onnx__ValueInfoProto *vi = gp->input[i];
    if (!vi->name || !*vi->name)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: graph input %zu has no name", I->src, i);
    int k;
    GCC_TRY(get_val(I, vi->name, &k, d));
    if (I->v[k].is_init)
      continue; /* IR version < 4: initializers are listed as inputs too */
    if (I->v[k].is_input)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: graph input '%s' is listed twice", I->src,
                          vi->name);
    int dt, has;
    tshape s = {0, {{0, 0}}};
    const gcc_onnx_tensor *fz = NULL;
    for (int f = 0; f < I->n_frozen; f++)
      if (I->frozen[f].name && strcmp(I->frozen[f].name, vi->name) == 0)
        fz = &I->frozen[f];
    if (fz) { /* a constant from the caller */
      GCC_TRY(read_value_info(I, vi, "graph input", 0, &dt, &s, &has, d));
      int same = fz->shape.ndim == s.ndim || !has;
      for (int k = 0; same && has && k < s.ndim; k++)
        same = s.d[k].sym || s.d[k].v == fz->shape.dims[k];
      uint64_t numel = 1;
      for (int k = 0; k < fz->shape.ndim; k++)
        numel *= fz->shape.dims[k] > 0 ? (uint64_t)fz->shape.dims[k] : 0;
      if ((dt && dt != fz->onnx_dtype) || !same || fz->shape.ndim > GCC_MAX_DIMS ||
          numel * onnx_dtype_size(fz->onnx_dtype) != fz->bytes || (fz->bytes && !fz->data))
        return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                            "%s: the value given for graph input '%s' does not match its "
                            "declared dtype and shape",
                            I->src, vi->name);
      void *copy = malloc(fz->bytes ? fz->bytes : 1);
      if (!copy)
        return oom(d, "frozen input");
      if (fz->bytes)
        memcpy(copy, fz->data, fz->bytes);
      GCC_TRY(pool_add(I, copy, d));
      ival *v = &I->v[k];
      v->is_const = v->done = 1;
      v->onnx_dt = fz->onnx_dtype;
      v->sh.ndim = fz->shape.ndim;
      for (int j = 0; j < fz->shape.ndim; j++)
        v->sh.d[j] = (sdim){fz->shape.dims[j], 0};
      v->data = copy;
      v->bytes = fz->bytes;
      continue;
    }
    GCC_TRY(read_value_info(I, vi, "graph input", 1, &dt, &s, &has, d));
    gcc_dtype gdt = onnx_to_gcc_dtype(dt);
    if (gdt == GCC_DT_UNDEFINED)
      return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                          "%s: graph input '%s' has dtype %s, which this version does not "
                          "compute (float, int64, int32, bool)",
                          I->src, vi->name, onnx_dtype_name(dt));
    ival *v = &I->v[k];
    v->is_input = v->done = 1;
    v->onnx_dt = dt;
    v->sh = s;
    gcc_shape gs;
    to_gcc_shape(&s, 1, &gs);
    if (s.ndim > 0 && s.d[0].sym)
      gs.dims[0] = GCC_BATCH_DIM;
    GCC_TRY(gcc_graph_add_value(I->g, vi->name, gdt, &gs, GCC_VALUE_INPUT, NULL, 0, &v->ir, d));
    if (gcc_graph_add_input(I->g, v->ir) != GCC_OK)
      return oom(d, "graph inputs");
  }
  for (size_t i = 0; i < gp->n_node; i++) {
    const Onnx__NodeProto *n = gp->node[i];
    char desc[400];
    node_desc(n, (int)i, desc, sizeof desc);
    if (!n->op_type || !*n->op_type)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: %s has no op_type", I->src, desc);
    for (size_t k = 0; k < n->n_output; k++) {
      const char *on = n->output[k];
      if (!on || !*on)
        continue; /* an omitted optional output */
      int o;
      GCC_TRY(get_val(I, on, &o, d));
      ival *v = &I->v[o];
      if (v->is_init || v->is_input)
        return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                            "%s: %s: output '%s' is also a graph %s (values are SSA: one "
                            "definition each)",
                            I->src, desc, on, v->is_init ? "initializer" : "input");
      if (v->producer >= 0) {
        char other[400];
        node_desc(gp->node[v->producer], v->producer, other, sizeof other);
        return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                            "%s: %s: output '%s' is also produced by %s (values are SSA)", I->src,
                            desc, on, other);
      }
      v->producer = (int)i;
    }
  }
  for (size_t i = 0; i < gp->n_node; i++) {
    const Onnx__NodeProto *n = gp->node[i];
    for (size_t k = 0; k < n->n_input; k++) {
      const char *in = n->input[k];
      if (!in || !*in)
        continue;
      int idx = find_val(I, in);
      if (idx < 0) {
        char desc[400];
        node_desc(n, (int)i, desc, sizeof desc);
        return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                            "%s: %s: input '%s' is not defined: no graph input, initializer or "
                            "node output has that name (a missing initializer?)",
                            I->src, desc, in);
      }
      I->v[idx].n_uses++;
    }
  }
  for (size_t i = 0; i < gp->n_output; i++) {
    const char *on = gp->output[i]->name;
    int idx = on && *on ? find_val(I, on) : -1;
    if (idx < 0)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: graph output '%s' is not defined by any node, input or "
                          "initializer",
                          I->src, on ? on : "");
    if (I->v[idx].is_output)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: graph output '%s' is listed twice", I->src,
                          on);
    I->v[idx].is_output = 1;
    I->v[idx].n_uses++;
  }
  return GCC_OK;
}

/* Kahn's algorithm over the producers, stable (the lowest index first):
 * node indices in execution order into order[]. A cycle is named. */
static gcc_status node_order(imp *I, int *order, gcc_diag *d) {
  const Onnx__GraphProto *gp = I->gp;
  int nn = (int)gp->n_node;
  int *pending = calloc((size_t)nn + 1, sizeof *pending);
  int *heap = malloc(((size_t)nn + 1) * sizeof *heap);
  int *users_start = calloc((size_t)nn + 2, sizeof *users_start);
  if (!pending || !heap || !users_start) {
    free(pending);
    free(heap);
    free(users_start);
    return oom(d, "node order");
  }
  /* consumers of each node: CSR of (producer -> consumer) edges */
  int n_edges = 0;
  for (int i = 0; i < nn; i++)
    for (size_t k = 0; k < gp->node[i]->n_input; k++) {
      const char *in = gp->node[i]->input[k];
      int p = in && *in ? I->v[find_val(I, in)].producer : -1;
      if (p >= 0) {
        pending[i]++;
        users_start[p + 1]++;
        n_edges++;
      }
    }
  for (int i = 0; i < nn; i++)
    users_start[i + 1] += users_start[i];
  int *users = malloc(((size_t)n_edges + 1) * sizeof *users);
  int *fill = calloc((size_t)nn + 1, sizeof *fill);
  if (!users || !fill) {
    free(pending);
    free(heap);
    free(users_start);
    free(users);
    free(fill);
    return oom(d, "node order");
  }
  for (int i = 0; i < nn; i++)
    for (size_t k = 0; k < gp->node[i]->n_input; k++) {
      const char *in = gp->node[i]->input[k];
      int p = in && *in ? I->v[find_val(I, in)].producer : -1;
      if (p >= 0)
        users[users_start[p] + fill[p]++] = i;
    }
  int hn = 0, done = 0;
#define HEAP_PUSH(x)                                                                               \
  do {                                                                                             \
    int j_ = hn++;                                                                                 \
    heap[j_] = (x);                                                                                \
    while (j_ > 0 && heap[(j_ - 1) / 2] > heap[j_]) {                                              \
      int t_ = heap[j_];                                                                           \
      heap[j_] = heap[(j_ - 1) / 2];                                                               \
      heap[(j_ - 1) / 2] = t_;                                                                     \
      j_ = (j_ - 1) / 2;                                                                           \
    }                                                                                              \
  } while (0)
  for (int i = 0; i < nn; i++)
    if (!pending[i])
      HEAP_PUSH(i);
  while (hn > 0) {
    int x = heap[0];
    heap[0] = heap[--hn];
    for (int j = 0;;) {
      int l = 2 * j + 1, r = l + 1, m = j;
      if (l < hn && heap[l] < heap[m])
        m = l;
      if (r < hn && heap[r] < heap[m])
        m = r;
      if (m == j)
        break;
      int t = heap[j];
      heap[j] = heap[m];
      heap[m] = t;
      j = m;
    }
    order[done++] = x;
    for (int e = users_start[x]; e < users_start[x + 1]; e++)
      if (--pending[users[e]] == 0)
        HEAP_PUSH(users[e]);
  }
#undef HEAP_PUSH
  gcc_status st = GCC_OK;
  if (done < nn) {
    /* walk back from a waiting node through waiting producers until a node
     * repeats: that is the cycle */
    int start = -1;
    for (int i = 0; i < nn && start < 0; i++)
      if (pending[i])
        start = i;
    int *seen = calloc((size_t)nn + 1, sizeof *seen);
    int x = start, steps = 0;
    while (seen && !seen[x] && steps++ < nn) {
      seen[x] = steps;
      int next = -1;
      for (size_t k = 0; k < gp->node[x]->n_input && next < 0; k++) {
        const char *in = gp->node[x]->input[k];
        int p = in && *in ? I->v[find_val(I, in)].producer : -1;
        if (p >= 0 && pending[p])
          next = p;
      }
      if (next < 0)
        break;
      x = next;
    }
    char list[1200] = "";
    int cyc = x, count = 0;
    do {
      char desc[400];
      node_desc(gp->node[cyc], cyc, desc, sizeof desc);
      size_t l = strlen(list);
      snprintf(list + l, sizeof list - l, "%s%s", l ? " <- " : "", desc);
      int next = -1;
      for (size_t k = 0; k < gp->node[cyc]->n_input && next < 0; k++) {
        const char *in = gp->node[cyc]->input[k];
        int p = in && *in ? I->v[find_val(I, in)].producer : -1;
        if (p >= 0 && pending[p])
          next = p;
      }
      cyc = next;
    } while (cyc >= 0 && cyc != x && ++count < 8);
    free(seen);
    st = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                      "%s: the graph has a cycle (%d of %d nodes can never run): %s%s", I->src,
                      nn - done, nn, list, cyc == x ? " <- (back to the first)" : " ...");
  }
  free(pending);
  free(heap);
  free(users_start);
  free(users);
  free(fill);
  return st;
}

/* The report's entry of op `op`. */
static void report_op(gcc_onnx_report *r, const char *op, int folded, const char *ir) {
  int i = 0;
  while (i < r->n_ops && strcmp(r->ops[i].op, op) != 0)
    i++;
  if (i == r->n_ops) {
    if (r->n_ops == GCC_ONNX_REPORT_OPS)
      return;
    snprintf(r->ops[i].op, sizeof r->ops[i].op, "%s", op);
    r->n_ops++;
  }
  r->ops[i].count++;
  r->ops[i].folded += folded;
  if (ir && *ir && !strstr(r->ops[i].ir, ir)) {
    size_t l = strlen(r->ops[i].ir);
    snprintf(r->ops[i].ir + l, sizeof r->ops[i].ir - l, "%s%s", l ? ", " : "", ir);
  }
}

static gcc_status convert_nodes(imp *I, gcc_diag *d) {
  const Onnx__GraphProto *gp = I->gp;
  int nn = (int)gp->n_node;
  int *order = malloc(((size_t)nn + 1) * sizeof *order);
  if (!order)
    return oom(d, "node order");
  gcc_status st = node_order(I, order, d);
  for (int j = 0; j < nn && st == GCC_OK; j++) {
    int i = order[j];
    const Onnx__NodeProto *n = gp->node[i];
    nctx c;
    memset(&c, 0, sizeof c);
    c.I = I;
    c.n = n;
    c.index = i;
    node_desc(n, i, c.desc, sizeof c.desc);
    node_name(n, i, c.ir_name, sizeof c.ir_name);
    if (!is_default_domain(n->domain)) {
      st = gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: %s is in domain '%s'; only the default ONNX domain (\"\" or "
                        "ai.onnx) is supported",
                        I->src, c.desc, n->domain);
      break;
    }
    const onnx_op_map *op = onnx_op_find(n->op_type);
    if (!op) {
      st = gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: %s: op '%s' is not supported (supported ops: %s)", I->src, c.desc,
                        n->op_type, gcc_onnx_supported_ops());
      break;
    }
    c.ver = 0;
    for (int k = 0; k < 12 && op->versions[k]; k++)
      if (op->versions[k] <= I->opset)
        c.ver = op->versions[k];
    if (!c.ver) {
      st = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: %s: op %s does not exist in opset %" PRId64 " (it appears in %d)",
                        I->src, c.desc, n->op_type, I->opset, op->versions[0]);
      break;
    }
    I->cur_node = i;
    st = op->convert(&c, d);
    if (st != GCC_OK)
      break;
    for (int k = 0; k < (int)n->n_output; k++) {
      int o = out_idx(&c, k);
      if (o >= 0 && !I->v[o].done && I->v[o].n_uses > 0) {
        st = node_err(&c, d, GCC_ERR_INTERNAL, "output '%s' was not produced", I->v[o].name);
        break;
      }
    }
    I->rep->n_nodes++;
    report_op(I->rep, n->op_type, c.n_ir == 0, c.ir_ops);
  }
  free(order);
  return st;
}

static gcc_status add_rename(imp *I, int ir, const char *name, gcc_diag *d) {
  if (I->n_rename == I->cap_rename) {
    int nc = I->cap_rename ? 2 * I->cap_rename : 16;
    void *np = realloc(I->rename, (size_t)nc * sizeof *I->rename);
    if (!np)
      return oom(d, "output names");
    I->rename = np;
    I->cap_rename = nc;
  }
  I->rename[I->n_rename].ir = ir;
  I->rename[I->n_rename].name = name;
  I->n_rename++;
  return GCC_OK;
}

/* Graph outputs: each names an IR activation (an Identity node when the
 * ONNX output is an input, a constant or an alias). Declared dtypes and
 * static shapes must agree with the import's. */
static gcc_status bind_outputs(imp *I, gcc_diag *d) {
  const Onnx__GraphProto *gp = I->gp;
  for (size_t i = 0; i < gp->n_output; i++) {
    const Onnx__ValueInfoProto *vi = gp->output[i];
    int idx = find_val(I, vi->name);
    ival *v = &I->v[idx];
    int root = imp_root(I, idx);
    ival *r = &I->v[root];
    int ir = -1;
    nctx c;
    memset(&c, 0, sizeof c);
    c.I = I;
    snprintf(c.desc, sizeof c.desc, "graph output '%s'", vi->name);
    snprintf(c.ir_name, sizeof c.ir_name, "%s", vi->name);
    int taken = 0; /* is the root's IR value already a graph output? */
    for (int k = 0; r->ir >= 0 && k < I->g->n_outputs; k++)
      taken |= I->g->outputs[k] == r->ir;
    if (root == idx && v->ir >= 0 && !v->is_input) {
      ir = v->ir;
    } else if (root != idx && r->ir >= 0 && !r->is_input && !r->is_const && !r->is_output &&
               !taken && I->g->values[r->ir].kind == GCC_VALUE_ACTIVATION) {
      /* an alias (Identity, Dropout, a folded BatchNormalization) of an
       * activation that is nothing else: the activation takes the
       * output's name (applied when the graph is finished) */
      ir = r->ir;
      GCC_TRY(add_rename(I, ir, vi->name, d));
    } else {
      int src;
      GCC_TRY(ir_of(&c, root, &src, d));
      char name[512];
      if (gcc_graph_find(I->g, vi->name) < 0)
        snprintf(name, sizeof name, "%s", vi->name);
      else
        fresh_name(I, vi->name, name, sizeof name);
      int node;
      GCC_TRY(gcc_graph_add_value(I->g, name, GCC_DT_UNDEFINED, NULL, GCC_VALUE_ACTIVATION, NULL, 0,
                                  &ir, d));
      char nname[600];
      snprintf(nname, sizeof nname, "%s/output", vi->name);
      GCC_TRY(gcc_graph_add_node(I->g, nname, GCC_OP_IDENTITY, &src, 1, &ir, 1, &node, d));
    }
    int dt, has;
    tshape s = {0, {{0, 0}}};
    GCC_TRY(read_value_info(I, vi, "graph output", 0, &dt, &s, &has, d));
    if (dt && dt != r->onnx_dt)
      return gcc_diag_set(d, GCC_ERR_SHAPE, "%s: graph output '%s' is declared %s but computes %s",
                          I->src, vi->name, onnx_dtype_name(dt), onnx_dtype_name(r->onnx_dt));
    if (has && !tshape_has_sym(&r->sh)) {
      int same = s.ndim == r->sh.ndim;
      for (int k = 0; same && k < s.ndim; k++)
        same = s.d[k].v == r->sh.d[k].v && !s.d[k].sym;
      if (!same) {
        char a[128], b[128];
        return gcc_diag_set(d, GCC_ERR_SHAPE,
                            "%s: graph output '%s' is declared %s but computes %s", I->src,
                            vi->name, tshape_str(&s, a, sizeof a), tshape_str(&r->sh, b, sizeof b));
      }
    }
    if (gcc_graph_add_output(I->g, ir) != GCC_OK)
      return oom(d, "graph outputs");
  }
  return GCC_OK;
}

/* A copy of the graph without the initializers nothing reads (weights that
 * folding replaced): values renumbered, nodes and attributes copied. */
static gcc_status drop_unused(imp *I, gcc_diag *d) {
  gcc_graph *g = I->g;
  GCC_TRY(gcc_graph_link(g, d));
  int *map = malloc(((size_t)g->n_values + 1) * sizeof *map);
  if (!map)
    return oom(d, "graph copy");
  int drop = 0;
  for (int v = 0; v < g->n_values; v++) {
    const gcc_value *x = &g->values[v];
    int unused = (x->kind == GCC_VALUE_PARAM || x->kind == GCC_VALUE_CONST) && x->n_consumers == 0;
    for (int k = 0; unused && k < g->n_outputs; k++)
      unused = g->outputs[k] != v;
    map[v] = unused ? -1 : 0;
    drop += unused;
  }
  if (!drop && !I->n_rename) {
    free(map);
    return GCC_OK;
  }
  gcc_graph *h = gcc_graph_new(g->name, g->source);
  gcc_status st = h ? GCC_OK : oom(d, "graph copy");
  for (int v = 0; v < g->n_values && st == GCC_OK; v++) {
    if (map[v] < 0)
      continue;
    const gcc_value *x = &g->values[v];
    const char *name = x->name;
    for (int k = 0; k < I->n_rename; k++)
      if (I->rename[k].ir == v)
        name = I->rename[k].name;
    st = gcc_graph_add_value(h, name, x->dtype, &x->shape, x->kind, x->data, x->data_bytes, &map[v],
                             d);
  }
  for (int i = 0; i < g->n_inputs && st == GCC_OK; i++)
    st = gcc_graph_add_input(h, map[g->inputs[i]]);
  for (int i = 0; i < g->n_nodes && st == GCC_OK; i++) {
    const gcc_node *n = &g->nodes[i];
    /* any arity (a Concat of DenseNet-121 has 25 inputs) */
    int *ins = malloc((size_t)(n->n_inputs + n->n_outputs + 1) * sizeof *ins), *outs, node;
    if (!ins) {
      st = oom(d, "nodes");
      break;
    }
    outs = ins + n->n_inputs;
    for (int k = 0; k < n->n_inputs; k++)
      ins[k] = n->inputs[k] >= 0 ? map[n->inputs[k]] : -1;
    for (int k = 0; k < n->n_outputs; k++)
      outs[k] = map[n->outputs[k]];
    st = gcc_graph_add_node(h, n->name, n->op, ins, n->n_inputs, outs, n->n_outputs, &node, d);
    free(ins);
    for (int k = 0; k < n->n_attrs && st == GCC_OK; k++) {
      const gcc_attr *a = &n->attrs[k];
      switch (a->type) {
      case GCC_ATTR_INT: st = gcc_node_set_int(h, node, a->name, a->i); break;
      case GCC_ATTR_FLOAT: st = gcc_node_set_float(h, node, a->name, a->f); break;
      case GCC_ATTR_STRING: st = gcc_node_set_string(h, node, a->name, a->s ? a->s : ""); break;
      case GCC_ATTR_INTS: st = gcc_node_set_ints(h, node, a->name, a->ints, a->n_ints); break;
      case GCC_ATTR_FLOATS:
        st = gcc_node_set_floats(h, node, a->name, a->floats, a->n_floats);
        break;
      default: break;
      }
      if (st != GCC_OK)
        st = oom(d, "attributes");
    }
  }
  for (int i = 0; i < g->n_outputs && st == GCC_OK; i++)
    st = gcc_graph_add_output(h, map[g->outputs[i]]);
  free(map);
  if (st != GCC_OK) {
    gcc_graph_free(h);
    return st;
  }
  gcc_graph_free(g);
  I->g = h;
  /* IR indices held by the value table are stale from here on */
  for (int k = 0; k < I->n_v; k++)
    I->v[k].ir = -1;
  return GCC_OK;
}

/* Shape inference of the IR (bound to a probe batch) must agree with the
 * shapes the import tracked: a check of the mapping itself. */
static gcc_status check_shapes(imp *I, gcc_diag *d) {
  /* the probe needs no initializer data (a model-zoo graph has hundreds of
   * MB): detach it for the clone */
  gcc_graph *g = I->g;
  void **data = malloc(((size_t)g->n_values + 1) * sizeof *data);
  size_t *bytes = malloc(((size_t)g->n_values + 1) * sizeof *bytes);
  if (!data || !bytes) {
    free(data);
    free(bytes);
    return oom(d, "shape check");
  }
  for (int v = 0; v < g->n_values; v++) {
    data[v] = g->values[v].data;
    bytes[v] = g->values[v].data_bytes;
    g->values[v].data = NULL;
    g->values[v].data_bytes = 0;
  }
  gcc_graph *probe;
  gcc_status cs = gcc_graph_clone(g, &probe, d);
  for (int v = 0; v < g->n_values; v++) {
    g->values[v].data = data[v];
    g->values[v].data_bytes = bytes[v];
  }
  free(data);
  free(bytes);
  GCC_TRY(cs);
  int sym = 0;
  for (int k = 0; k < I->n_v; k++)
    sym |= I->v[k].is_input && tshape_has_sym(&I->v[k].sh);
  int64_t batch = sym ? 2 : 1;
  gcc_status st = gcc_graph_bind_batch(probe, batch, d);
  if (st == GCC_OK)
    st = gcc_graph_toposort(probe, d);
  if (st == GCC_OK)
    st = gcc_infer_shapes(probe, d);
  for (int k = 0; k < I->n_v && st == GCC_OK; k++) {
    const ival *v = &I->v[k];
    if (v->alias >= 0 || v->is_const || !v->done)
      continue;
    int pv = gcc_graph_find(probe, v->name);
    if (pv < 0)
      continue;
    /* the value of a pattern's inner node, removed (GELU): nothing computes it */
    if (probe->values[pv].kind == GCC_VALUE_ACTIVATION && probe->values[pv].producer < 0)
      continue;
    gcc_shape want;
    to_gcc_shape(&v->sh, batch, &want);
    if (!gcc_shape_equal(&want, &probe->values[pv].shape) ||
        probe->values[pv].dtype != onnx_to_gcc_dtype(v->onnx_dt)) {
      char a[128], b[128];
      st = gcc_diag_set(d, GCC_ERR_INTERNAL,
                        "%s: value '%s': the import expected %s %s, shape inference gives %s %s "
                        "(batch %" PRId64 ")",
                        I->src, v->name, onnx_dtype_name(v->onnx_dt),
                        gcc_shape_str(&want, a, sizeof a), gcc_dtype_name(probe->values[pv].dtype),
                        gcc_shape_str(&probe->values[pv].shape, b, sizeof b), batch);
    }
  }
  gcc_graph_free(probe);
  return st;
}

gcc_status gcc_onnx_import(const uint8_t *bytes, size_t size, const char *source,
                           const gcc_onnx_options *o, gcc_graph **out, gcc_onnx_report *rep,
                           gcc_diag *d) {
  *out = NULL;
  gcc_onnx_report local;
  imp I;
  memset(&I, 0, sizeof I);
  I.src = source ? source : "<memory>";
  I.rep = rep ? rep : &local;
  memset(I.rep, 0, sizeof *I.rep);
  I.cur_node = -1;
  if (o) {
    I.frozen = o->frozen;
    I.n_frozen = o->n_frozen;
    I.train = o->train;
  }
  if (o && o->base_dir) {
    snprintf(I.base_dir, sizeof I.base_dir, "%s", o->base_dir);
  } else if (source) {
    snprintf(I.base_dir, sizeof I.base_dir, "%s", source);
    char *slash = strrchr(I.base_dir, '/');
    if (slash)
      *(slash == I.base_dir ? slash + 1 : slash) = '\0';
    else
      snprintf(I.base_dir, sizeof I.base_dir, ".");
  }
  if (!bytes && size)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "gcc_onnx_import: NULL bytes");
  I.m = onnx__model_proto__unpack(NULL, size, bytes);
  if (!I.m)
    return gcc_diag_set(d, GCC_ERR_PARSE,
                        "%s: not a valid ONNX model: the protobuf could not be parsed (%zu bytes; "
                        "truncated or corrupt)",
                        I.src, size);
  gcc_status st = read_model_header(&I, d);
  if (st == GCC_OK) {
    const char *gname = I.gp->name && *I.gp->name ? I.gp->name : "onnx";
    I.g = gcc_graph_new(gname, I.src);
    if (!I.g)
      st = oom(d, "graph");
    else if (I.rep->producer[0])
      I.g->producer = gcc_strdup(I.rep->producer);
  }
  if (st == GCC_OK)
    st = read_values(&I, d);
  if (st == GCC_OK)
    st = read_torch_kinds(&I, d);
  if (st == GCC_OK)
    st = convert_nodes(&I, d);
  if (st == GCC_OK)
    st = bind_outputs(&I, d);
  /* the IR nodes of a pattern's inner ONNX nodes (GELU) that nothing reads */
  if (st == GCC_OK && I.n_patterns)
    st = gcc_graph_prune(I.g, NULL, 0, d);
  if (st == GCC_OK)
    st = drop_unused(&I, d);
  if (st == GCC_OK)
    st = gcc_graph_toposort(I.g, d);
  if (st == GCC_OK)
    st = check_shapes(&I, d);
  if (st == GCC_OK) {
    I.rep->n_ir_nodes = I.g->n_nodes;
    for (int v = 0; v < I.g->n_values; v++) {
      I.rep->n_params += I.g->values[v].kind == GCC_VALUE_PARAM;
      I.rep->n_consts += I.g->values[v].kind == GCC_VALUE_CONST;
    }
    *out = I.g;
    I.g = NULL;
  }
  imp_free(&I);
  return st;
}

gcc_status gcc_onnx_import_file(const char *path, gcc_graph **out, gcc_onnx_report *rep,
                                gcc_diag *d) {
  *out = NULL;
  uint8_t *buf;
  size_t size;
  GCC_TRY(gcc_read_file(path, GCC_MODEL_MAX_BYTES, &buf, &size, d));
  gcc_status s = gcc_onnx_import(buf, size, path, NULL, out, rep, d);
  free(buf);
  return s;
}

gcc_status gcc_onnx_parse_tensor(const uint8_t *bytes, size_t size, const char *source,
                                 int *onnx_dtype, gcc_shape *shape, void **data, size_t *nbytes,
                                 gcc_diag *d) {
  *data = NULL;
  *nbytes = 0;
  gcc_onnx_report rep;
  imp I;
  memset(&I, 0, sizeof I);
  I.src = source ? source : "<memory>";
  I.rep = &rep;
  Onnx__TensorProto *t = onnx__tensor_proto__unpack(NULL, size, bytes);
  if (!t)
    return gcc_diag_set(d, GCC_ERR_PARSE, "%s: not an ONNX TensorProto (%zu bytes)", I.src, size);
  tshape s;
  gcc_status st = read_tensor(&I, t, "tensor", onnx_dtype, &s, data, nbytes, d);
  onnx__tensor_proto__free_unpacked(t, NULL);
  if (st == GCC_OK) {
    shape->ndim = s.ndim;
    for (int i = 0; i < s.ndim; i++)
      shape->dims[i] = s.d[i].v;
  }
  return st;
}

gcc_dtype gcc_onnx_dtype(int onnx_dtype) {
  return onnx_to_gcc_dtype(onnx_dtype);
}
const char *gcc_onnx_dtype_name(int onnx_dtype) {
  return onnx_dtype_name(onnx_dtype);
}

int gcc_onnx_op_supported(const char *op_type) {
  return op_type && onnx_op_find(op_type) != NULL;
}

const char *gcc_onnx_supported_ops(void) {
  static char list[2048];
  if (!list[0]) {
    size_t l = 0;
    for (int i = 0; i < onnx_op_count(); i++)
      l += (size_t)snprintf(list + l, l < sizeof list ? sizeof list - l : 0, "%s%s", i ? ", " : "",
                            onnx_op_at(i)->op_type);
  }
  return list;
}

char *gcc_onnx_report_str(const gcc_onnx_report *r, char *buf, size_t cap) {
  size_t l = 0;
#define OUT(...) l += (size_t)snprintf(buf + l, l < cap ? cap - l : 0, __VA_ARGS__)
  OUT("ONNX IR version %" PRId64 ", opset %" PRId64 "%s%s%s\n", r->ir_version, r->opset,
      r->producer[0] ? ", produced by " : "", r->producer, "");
  OUT("%d ONNX nodes -> %d IR nodes\n", r->n_nodes, r->n_ir_nodes);
  OUT("%-24s %6s %6s  %s\n", "ONNX op", "nodes", "folded", "IR ops");
  for (int i = 0; i < r->n_ops; i++)
    OUT("%-24s %6d %6d  %s\n", r->ops[i].op, r->ops[i].count, r->ops[i].folded,
        r->ops[i].ir[0] ? r->ops[i].ir : "-");
  OUT("initializers: %d (%zu bytes, %d from external data) -> %d parameters, %d constants\n",
      r->n_initializers, r->initializer_bytes, r->n_external, r->n_params, r->n_consts);
  if (r->n_tied)
    OUT("kept %d initializer%s read by several nodes as one parameter each (PyTorch's tied "
        "weights: the exporter's InputSpec.kind PARAMETER)\n",
        r->n_tied, r->n_tied == 1 ? "" : "s");
  if (r->n_torch_buffers)
    OUT("%d initializer%s the exporter marks as buffers (not trained)\n", r->n_torch_buffers,
        r->n_torch_buffers == 1 ? "" : "s");
  if (r->n_bn_folded)
    OUT("folded %d BatchNormalization node%s into the preceding Conv\n", r->n_bn_folded,
        r->n_bn_folded == 1 ? "" : "s");
  if (r->n_bn_train)
    OUT("kept %d BatchNormalization node%s for training (nn.BatchNorm2d: batch statistics in "
        "training, running mean and var as state)\n",
        r->n_bn_train, r->n_bn_train == 1 ? "" : "s");
#undef OUT
  return buf;
}
