/*
 * ir.c - the Graph IR (ir.h): dtypes and shapes, growable value and node
 * arrays, attributes, groups, linking, topological sort, batch binding,
 * pruning, cloning and node descriptions for messages.
 */
#include "graph/ir.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "graph/util.h"

/* ---- dtypes and shapes ------------------------------------------------- */

size_t gcc_dtype_size(gcc_dtype t) {
  switch (t) {
  case GCC_DT_FLOAT32: return 4;
  case GCC_DT_INT64: return 8;
  case GCC_DT_INT32: return 4;
  case GCC_DT_FLOAT16: return 2;
  case GCC_DT_BFLOAT16: return 2;
  case GCC_DT_FLOAT64: return 8;
  case GCC_DT_UINT8: return 1;
  case GCC_DT_BOOL: return 1;
  default: return 0;
  }
}

const char *gcc_dtype_name(gcc_dtype t) {
  static const char *const names[] = {"undefined", "float32", "int64", "int32", "float16",
                                      "bfloat16",  "float64", "uint8", "bool"};
  _Static_assert(sizeof names / sizeof names[0] == GCC_DT_COUNT, "dtype names");
  if ((unsigned)t >= GCC_DT_COUNT)
    return "?";
  return names[t];
}

int gcc_dtype_supported(gcc_dtype t) {
  return t == GCC_DT_FLOAT32 || t == GCC_DT_INT64 || t == GCC_DT_INT32 || t == GCC_DT_BOOL;
}

int gcc_dtype_is_float(gcc_dtype t) {
  return t == GCC_DT_FLOAT32 || t == GCC_DT_FLOAT16 || t == GCC_DT_BFLOAT16;
}

static const char *const kPrecisionNames[] = {"fp32", "tf32", "bf16", "fp16"};
_Static_assert(sizeof kPrecisionNames / sizeof kPrecisionNames[0] == GCC_PRECISION_COUNT,
               "precision names");

const char *gcc_precision_name(int p) {
  return (unsigned)p < GCC_PRECISION_COUNT ? kPrecisionNames[p] : "?";
}

int gcc_precision_lookup(const char *name) {
  for (int i = 0; name && i < GCC_PRECISION_COUNT; i++)
    if (strcmp(name, kPrecisionNames[i]) == 0)
      return i;
  return -1;
}

const char *gcc_layout_name(int layout) {
  return layout == GCC_LAYOUT_NCHW ? "NCHW" : layout == GCC_LAYOUT_NHWC ? "NHWC" : "?";
}

int gcc_layout_axis(int layout, int ndim, int axis, int inverse) {
  /* NHWC: physical [N, H, W, C] = logical axes [0, 2, 3, 1] */
  static const int to_logical[4] = {0, 2, 3, 1}, to_physical[4] = {0, 3, 1, 2};
  if (layout != GCC_LAYOUT_NHWC || ndim != 4 || axis < 0 || axis > 3)
    return axis;
  return inverse ? to_logical[axis] : to_physical[axis];
}

gcc_shape gcc_layout_physical(const gcc_shape *logical, int layout) {
  gcc_shape p = *logical;
  for (int q = 0; q < logical->ndim; q++)
    p.dims[q] = logical->dims[gcc_layout_axis(layout, logical->ndim, q, 1)];
  return p;
}

gcc_dtype gcc_precision_dtype(int p) {
  return p == GCC_PRECISION_BF16   ? GCC_DT_BFLOAT16
         : p == GCC_PRECISION_FP16 ? GCC_DT_FLOAT16
                                   : GCC_DT_FLOAT32;
}

int64_t gcc_shape_numel(const gcc_shape *s, int *overflow) {
  int64_t n = 1;
  if (overflow)
    *overflow = 0;
  for (int i = 0; i < s->ndim; i++) {
    if (s->dims[i] < 0)
      return -1;
    if (s->dims[i] != 0 && n > INT64_MAX / s->dims[i]) {
      if (overflow)
        *overflow = 1;
      return -1;
    }
    n *= s->dims[i];
  }
  return n;
}

char *gcc_shape_str(const gcc_shape *s, char *buf, size_t cap) {
  size_t used = 0;
  if (cap == 0)
    return buf;
  buf[0] = '\0';
  used += (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < s->ndim && used < cap; i++) {
    if (s->dims[i] == GCC_BATCH_DIM)
      used += (size_t)snprintf(buf + used, cap - used, "%sN", i ? ", " : "");
    else
      used += (size_t)snprintf(buf + used, cap - used, "%s%" PRId64, i ? ", " : "", s->dims[i]);
  }
  if (used < cap)
    snprintf(buf + used, cap - used, "]");
  return buf;
}

int gcc_shape_equal(const gcc_shape *a, const gcc_shape *b) {
  if (a->ndim != b->ndim)
    return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->dims[i] != b->dims[i])
      return 0;
  return 1;
}

const char *gcc_dev_name(int id, char *buf, size_t cap) {
  if (id < 0)
    snprintf(buf, cap, "?");
  else if (id == GCC_DEV_CPU)
    snprintf(buf, cap, "cpu");
  else
    snprintf(buf, cap, "cuda:%d", GCC_DEV_CUDA_INDEX(id));
  return buf;
}

int gcc_param_decayed(const gcc_optimizer *o, const gcc_value *v) {
  return !o->decay_matrices_only || v->shape.ndim >= 2;
}

int gcc_group_point(const gcc_group *gr) {
  int pos = gr->nodes[0];
  for (int i = 0; i < gr->n_nodes; i++)
    pos = gr->at_first ? (gr->nodes[i] < pos ? gr->nodes[i] : pos)
                       : (gr->nodes[i] > pos ? gr->nodes[i] : pos);
  return pos;
}

void gcc_graph_clear_groups(gcc_graph *g) {
  for (int i = 0; i < g->n_groups; i++) {
    free(g->groups[i].name);
    free(g->groups[i].nodes);
  }
  free(g->groups);
  g->groups = NULL;
  g->n_groups = 0;
  for (int i = 0; i < g->n_nodes; i++)
    g->nodes[i].group = -1;
}

gcc_status gcc_graph_add_group(gcc_graph *g, const char *name, int kind, int device,
                               const int *nodes, int n, int epi, int *out, gcc_diag *d) {
  gcc_group *ng = realloc(g->groups, (size_t)(g->n_groups + 1) * sizeof *ng);
  if (!ng)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (fusion groups)");
  g->groups = ng;
  gcc_group *gr = &ng[g->n_groups];
  memset(gr, 0, sizeof *gr);
  gr->name = gcc_strdup(name);
  gr->nodes = malloc((size_t)(n > 0 ? n : 1) * sizeof *gr->nodes);
  if (!gr->name || !gr->nodes) {
    free(gr->name);
    free(gr->nodes);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (fusion groups)");
  }
  if (n > 0)
    memcpy(gr->nodes, nodes, (size_t)n * sizeof *nodes);
  gr->n_nodes = n;
  gr->kind = kind;
  gr->device = device;
  gr->epilogue = epi;
  for (int i = 0; i < n; i++)
    g->nodes[nodes[i]].group = g->n_groups;
  if (out)
    *out = g->n_groups;
  g->n_groups++;
  return GCC_OK;
}

const char *gcc_value_kind_name(gcc_value_kind k) {
  static const char *const names[] = {"activation", "input", "param", "const", "grad", "opt-state"};
  _Static_assert(sizeof names / sizeof names[0] == GCC_VALUE_KIND_COUNT, "kinds");
  if ((unsigned)k >= GCC_VALUE_KIND_COUNT)
    return "?";
  return names[k];
}

/* ---- name map: open addressing, FNV-1a -------------------------------- */

typedef struct gcc_name_map {
  int *slots; /* value index or -1 */
  size_t cap; /* power of two */
  size_t used;
} gcc_name_map;

static uint64_t fnv1a(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ULL;
  }
  return h;
}

static int map_grow(gcc_graph *g) {
  gcc_name_map *m = g->names;
  size_t ncap = m->cap ? m->cap * 2 : 64;
  int *ns = malloc(ncap * sizeof *ns);
  if (!ns)
    return 0;
  for (size_t i = 0; i < ncap; i++)
    ns[i] = -1;
  for (size_t i = 0; i < m->cap; i++) {
    int v = m->slots[i];
    if (v < 0)
      continue;
    size_t j = fnv1a(g->values[v].name) & (ncap - 1);
    while (ns[j] >= 0)
      j = (j + 1) & (ncap - 1);
    ns[j] = v;
  }
  free(m->slots);
  m->slots = ns;
  m->cap = ncap;
  return 1;
}

int gcc_graph_find(const gcc_graph *g, const char *name) {
  const gcc_name_map *m = g->names;
  if (!name || m->cap == 0)
    return -1;
  size_t j = fnv1a(name) & (m->cap - 1);
  while (m->slots[j] >= 0) {
    if (strcmp(g->values[m->slots[j]].name, name) == 0)
      return m->slots[j];
    j = (j + 1) & (m->cap - 1);
  }
  return -1;
}

static int map_insert(gcc_graph *g, int v) {
  gcc_name_map *m = g->names;
  if ((m->used + 1) * 2 > m->cap && !map_grow(g))
    return 0;
  size_t j = fnv1a(g->values[v].name) & (m->cap - 1);
  while (m->slots[j] >= 0)
    j = (j + 1) & (m->cap - 1);
  m->slots[j] = v;
  m->used++;
  return 1;
}

/* ---- graph ------------------------------------------------------------ */

gcc_graph *gcc_graph_new(const char *name, const char *source) {
  gcc_graph *g = calloc(1, sizeof *g);
  if (!g)
    return NULL;
  g->names = calloc(1, sizeof *g->names);
  g->name = gcc_strdup(name ? name : "graph");
  g->source = gcc_strdup(source ? source : "<memory>");
  g->training.inline_inputs = g->training.inline_targets = -1;
  if (!g->names || !g->name || !g->source) {
    gcc_graph_free(g);
    return NULL;
  }
  return g;
}

static void attr_free(gcc_attr *a) {
  free(a->name);
  free(a->s);
  free(a->ints);
  free(a->floats);
}

static void training_free(gcc_training *t) {
  free(t->loss);
  free(t->prediction);
  free(t->input);
  free(t->target);
  free(t->dataset);
}

void gcc_graph_free(gcc_graph *g) {
  if (!g)
    return;
  for (int i = 0; i < g->n_values; i++) {
    free(g->values[i].name);
    free(g->values[i].consumers);
    if (!g->values[i].data_borrowed)
      free(g->values[i].data);
  }
  for (int i = 0; i < g->n_nodes; i++) {
    gcc_node *n = &g->nodes[i];
    free(n->name);
    free(n->inputs);
    free(n->outputs);
    for (int k = 0; k < n->n_attrs; k++)
      attr_free(&n->attrs[k]);
    free(n->attrs);
    for (int k = 0; k < n->n_av; k++)
      attr_free(&n->av[k]);
    free(n->av);
    free(n->pin);
  }
  for (int i = 0; i < g->n_groups; i++) {
    free(g->groups[i].name);
    free(g->groups[i].nodes);
  }
  free(g->groups);
  free(g->values);
  free(g->nodes);
  free(g->inputs);
  free(g->outputs);
  training_free(&g->training);
  if (g->names)
    free(g->names->slots);
  free(g->names);
  free(g->name);
  free(g->source);
  free(g->producer);
  free(g);
}

static gcc_status oom(gcc_diag *d, const char *what) {
  return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (%s)", what);
}

gcc_status gcc_graph_add_value(gcc_graph *g, const char *name, gcc_dtype dt, const gcc_shape *shape,
                               gcc_value_kind kind, const void *data, size_t data_bytes,
                               int *out_index, gcc_diag *d) {
  if (!name || !*name)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: a value has an empty name", g->source);
  if (gcc_graph_find(g, name) >= 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: value '%s' is defined twice", g->source,
                        name);
  /* `shape` may point into g->values (a pass copying the shape of another
   * value): read it before growing the array moves it */
  gcc_shape sh = {0};
  if (shape)
    sh = *shape;
  if (g->n_values == g->cap_values) {
    int nc = g->cap_values ? g->cap_values * 2 : 64;
    gcc_value *nv = realloc(g->values, (size_t)nc * sizeof *nv);
    if (!nv)
      return oom(d, "graph values");
    g->values = nv;
    g->cap_values = nc;
  }
  gcc_value *v = &g->values[g->n_values];
  memset(v, 0, sizeof *v);
  v->name = gcc_strdup(name);
  v->dtype = dt;
  v->shape = sh;
  v->kind = kind;
  v->producer = -1;
  v->param_of = -1;
  v->device = -1;
  if (!v->name)
    return oom(d, "value name");
  if (data_bytes) {
    v->data = malloc(data_bytes);
    if (!v->data) {
      free(v->name);
      return oom(d, "initializer data");
    }
    if (data)
      memcpy(v->data, data, data_bytes);
    else
      memset(v->data, 0, data_bytes);
    v->data_bytes = data_bytes;
  }
  g->n_values++;
  if (!map_insert(g, g->n_values - 1)) {
    g->n_values--;
    free(v->name);
    free(v->data);
    return oom(d, "name map");
  }
  if (out_index)
    *out_index = g->n_values - 1;
  return GCC_OK;
}

gcc_status gcc_graph_add_temp(gcc_graph *g, const char *base, gcc_value_kind kind, int *out_index,
                              gcc_diag *d) {
  char name[512];
  snprintf(name, sizeof name, "%s", base);
  for (int k = 1; gcc_graph_find(g, name) >= 0; k++)
    snprintf(name, sizeof name, "%s_%d", base, k);
  return gcc_graph_add_value(g, name, GCC_DT_UNDEFINED, NULL, kind, NULL, 0, out_index, d);
}

gcc_status gcc_graph_add_node(gcc_graph *g, const char *name, int op, const int *inputs,
                              int n_inputs, const int *outputs, int n_outputs, int *out_index,
                              gcc_diag *d) {
  if (g->n_nodes == g->cap_nodes) {
    int nc = g->cap_nodes ? g->cap_nodes * 2 : 32;
    gcc_node *nn = realloc(g->nodes, (size_t)nc * sizeof *nn);
    if (!nn)
      return oom(d, "graph nodes");
    g->nodes = nn;
    g->cap_nodes = nc;
  }
  gcc_node *n = &g->nodes[g->n_nodes];
  memset(n, 0, sizeof *n);
  n->op = op;
  n->device = -1;
  n->group = -1;
  n->name = gcc_strdup(name ? name : "");
  n->inputs = malloc((size_t)(n_inputs ? n_inputs : 1) * sizeof(int));
  n->outputs = malloc((size_t)(n_outputs ? n_outputs : 1) * sizeof(int));
  if (!n->name || !n->inputs || !n->outputs) {
    free(n->name);
    free(n->inputs);
    free(n->outputs);
    return oom(d, "node");
  }
  if (n_inputs)
    memcpy(n->inputs, inputs, (size_t)n_inputs * sizeof(int));
  if (n_outputs)
    memcpy(n->outputs, outputs, (size_t)n_outputs * sizeof(int));
  n->n_inputs = n_inputs;
  n->n_outputs = n_outputs;
  g->n_nodes++;
  for (int i = 0; i < n_outputs; i++)
    if (outputs[i] >= 0 && outputs[i] < g->n_values)
      g->values[outputs[i]].producer = g->n_nodes - 1;
  if (out_index)
    *out_index = g->n_nodes - 1;
  return GCC_OK;
}

void gcc_node_clear_attrs(gcc_graph *g, int node) {
  gcc_node *n = &g->nodes[node];
  for (int k = 0; k < n->n_attrs; k++)
    attr_free(&n->attrs[k]);
  free(n->attrs);
  for (int k = 0; k < n->n_av; k++)
    attr_free(&n->av[k]);
  free(n->av);
  n->attrs = NULL;
  n->n_attrs = 0;
  n->av = NULL;
  n->n_av = 0;
}

static gcc_attr *attr_slot(gcc_graph *g, int node, const char *name) {
  gcc_node *n = &g->nodes[node];
  for (int k = 0; k < n->n_attrs; k++)
    if (strcmp(n->attrs[k].name, name) == 0) {
      attr_free(&n->attrs[k]);
      memset(&n->attrs[k], 0, sizeof n->attrs[k]);
      n->attrs[k].name = gcc_strdup(name);
      return n->attrs[k].name ? &n->attrs[k] : NULL;
    }
  gcc_attr *na = realloc(n->attrs, (size_t)(n->n_attrs + 1) * sizeof *na);
  if (!na)
    return NULL;
  n->attrs = na;
  gcc_attr *a = &n->attrs[n->n_attrs];
  memset(a, 0, sizeof *a);
  a->name = gcc_strdup(name);
  if (!a->name)
    return NULL;
  n->n_attrs++;
  return a;
}

gcc_status gcc_node_set_int(gcc_graph *g, int node, const char *name, int64_t v) {
  gcc_attr *a = attr_slot(g, node, name);
  if (!a)
    return GCC_ERR_OUT_OF_MEMORY;
  a->type = GCC_ATTR_INT;
  a->i = v;
  return GCC_OK;
}

gcc_status gcc_node_set_float(gcc_graph *g, int node, const char *name, float v) {
  gcc_attr *a = attr_slot(g, node, name);
  if (!a)
    return GCC_ERR_OUT_OF_MEMORY;
  a->type = GCC_ATTR_FLOAT;
  a->f = v;
  return GCC_OK;
}

gcc_status gcc_node_set_string(gcc_graph *g, int node, const char *name, const char *v) {
  gcc_attr *a = attr_slot(g, node, name);
  if (!a)
    return GCC_ERR_OUT_OF_MEMORY;
  a->type = GCC_ATTR_STRING;
  a->s = gcc_strdup(v);
  return a->s ? GCC_OK : GCC_ERR_OUT_OF_MEMORY;
}

gcc_status gcc_node_set_ints(gcc_graph *g, int node, const char *name, const int64_t *v, int n) {
  gcc_attr *a = attr_slot(g, node, name);
  if (!a)
    return GCC_ERR_OUT_OF_MEMORY;
  a->type = GCC_ATTR_INTS;
  a->ints = malloc((size_t)(n ? n : 1) * sizeof *a->ints);
  if (!a->ints)
    return GCC_ERR_OUT_OF_MEMORY;
  if (n)
    memcpy(a->ints, v, (size_t)n * sizeof *v);
  a->n_ints = n;
  return GCC_OK;
}

gcc_status gcc_node_set_floats(gcc_graph *g, int node, const char *name, const float *v, int n) {
  gcc_attr *a = attr_slot(g, node, name);
  if (!a)
    return GCC_ERR_OUT_OF_MEMORY;
  a->type = GCC_ATTR_FLOATS;
  a->floats = malloc((size_t)(n ? n : 1) * sizeof *a->floats);
  if (!a->floats)
    return GCC_ERR_OUT_OF_MEMORY;
  if (n)
    memcpy(a->floats, v, (size_t)n * sizeof *v);
  a->n_floats = n;
  return GCC_OK;
}

const gcc_attr *gcc_node_attr(const gcc_node *n, const char *name) {
  for (int k = 0; k < n->n_attrs; k++)
    if (strcmp(n->attrs[k].name, name) == 0)
      return &n->attrs[k];
  return NULL;
}

static gcc_status push_index(int **arr, int *n, int *cap, int v) {
  if (*n == *cap) {
    int nc = *cap ? *cap * 2 : 8;
    int *na = realloc(*arr, (size_t)nc * sizeof *na);
    if (!na)
      return GCC_ERR_OUT_OF_MEMORY;
    *arr = na;
    *cap = nc;
  }
  (*arr)[(*n)++] = v;
  return GCC_OK;
}

gcc_status gcc_graph_add_input(gcc_graph *g, int value) {
  return push_index(&g->inputs, &g->n_inputs, &g->cap_inputs, value);
}

gcc_status gcc_graph_add_output(gcc_graph *g, int value) {
  return push_index(&g->outputs, &g->n_outputs, &g->cap_outputs, value);
}

const char *gcc_node_desc(const gcc_graph *g, int node, char *buf, size_t cap) {
  const gcc_node *n = &g->nodes[node];
  snprintf(buf, cap, "node '%s' (%s)", n->name, gcc_op_name(n->op));
  return buf;
}

gcc_status gcc_graph_link(gcc_graph *g, gcc_diag *d) {
  for (int v = 0; v < g->n_values; v++) {
    free(g->values[v].consumers);
    g->values[v].consumers = NULL;
    g->values[v].n_consumers = 0;
    g->values[v].producer = -1;
  }
  int *caps = calloc((size_t)(g->n_values ? g->n_values : 1), sizeof *caps);
  if (!caps)
    return oom(d, "link");
  char desc[600];
  for (int i = 0; i < g->n_nodes; i++) {
    gcc_node *n = &g->nodes[i];
    /* an optimizer's output (a parameter's 16-bit copy) is written for the
     * next step: within a step it is read before the update, as the
     * parameter is, and has no producer (GCC_OPF_OPTIMIZER) */
    const gcc_op_desc *od = gcc_op(n->op);
    int carried = od && (od->flags & GCC_OPF_OPTIMIZER);
    for (int k = 0; k < n->n_outputs && !carried; k++) {
      gcc_value *v = &g->values[n->outputs[k]];
      if (v->producer >= 0) {
        free(caps);
        return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                            "%s: value '%s' is produced twice (by node '%s' and node '%s')",
                            g->source, v->name, g->nodes[v->producer].name, n->name);
      }
      if (v->kind != GCC_VALUE_ACTIVATION && v->kind != GCC_VALUE_GRAD &&
          v->kind != GCC_VALUE_OPT_STATE) {
        free(caps);
        return gcc_diag_set(
            d, GCC_ERR_INVALID_GRAPH, "%s: %s writes value '%s', which is a graph %s", g->source,
            gcc_node_desc(g, i, desc, sizeof desc), v->name, gcc_value_kind_name(v->kind));
      }
      v->producer = i;
    }
    for (int k = 0; k < n->n_inputs; k++) {
      int vi = n->inputs[k];
      if (vi < 0)
        continue;
      gcc_value *v = &g->values[vi];
      if (v->n_consumers > 0 && v->consumers[v->n_consumers - 1] == i)
        continue; /* same value twice as input of one node */
      if (push_index(&v->consumers, &v->n_consumers, &caps[vi], i) != GCC_OK) {
        free(caps);
        return oom(d, "link");
      }
    }
  }
  free(caps);
  return GCC_OK;
}

/* A binary min-heap of node indices (the ready nodes of toposort). */
static void heap_push_min(int *h, int *n, int x) {
  int i = (*n)++;
  while (i > 0 && h[(i - 1) / 2] > x) {
    h[i] = h[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h[i] = x;
}

static void heap_pop_min(int *h, int *n) {
  int x = h[--*n], i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= *n)
      break;
    if (c + 1 < *n && h[c + 1] < h[c])
      c++;
    if (h[c] >= x)
      break;
    h[i] = h[c];
    i = c;
  }
  if (*n > 0)
    h[i] = x;
}

gcc_status gcc_graph_toposort(gcc_graph *g, gcc_diag *d) {
  GCC_TRY(gcc_graph_link(g, d));
  int n = g->n_nodes;
  int *pending = calloc((size_t)(n ? n : 1), sizeof *pending);
  int *order = malloc((size_t)(n ? n : 1) * sizeof *order);
  char *done = calloc((size_t)(n ? n : 1), 1);
  if (!pending || !order || !done) {
    free(pending);
    free(order);
    free(done);
    return oom(d, "toposort");
  }
  /* pending[i] = number of distinct producer nodes of i's inputs not yet placed */
  for (int i = 0; i < n; i++) {
    const gcc_node *nd = &g->nodes[i];
    for (int k = 0; k < nd->n_inputs; k++) {
      int vi = nd->inputs[k];
      if (vi < 0)
        continue;
      int dup = 0;
      for (int j = 0; j < k; j++)
        if (nd->inputs[j] == vi)
          dup = 1;
      if (!dup && g->values[vi].producer >= 0)
        pending[i]++;
    }
  }
  /* Stable Kahn: repeatedly take the lowest-index ready node, the ready
   * nodes in a binary min-heap (O(n log n)). */
  int *heap = malloc((size_t)(n ? n : 1) * sizeof *heap);
  if (!heap) {
    free(pending);
    free(order);
    free(done);
    return oom(d, "toposort");
  }
  int nh = 0;
  for (int i = 0; i < n; i++)
    if (pending[i] == 0)
      heap[nh++] = i; /* ascending: already a heap */
  int placed = 0;
  while (nh > 0) {
    int pick = heap[0];
    heap_pop_min(heap, &nh);
    done[pick] = 1;
    order[placed++] = pick;
    const gcc_node *nd = &g->nodes[pick];
    const gcc_op_desc *od = gcc_op(nd->op);
    if (od && (od->flags & GCC_OPF_OPTIMIZER))
      continue; /* its output is for the next step (gcc_graph_link) */
    for (int k = 0; k < nd->n_outputs; k++) {
      const gcc_value *v = &g->values[nd->outputs[k]];
      for (int c = 0; c < v->n_consumers; c++)
        if (--pending[v->consumers[c]] == 0 && !done[v->consumers[c]])
          heap_push_min(heap, &nh, v->consumers[c]);
    }
  }
  free(heap);
  if (placed < n) {
    int bad = -1;
    for (int i = 0; i < n && bad < 0; i++)
      if (!done[i])
        bad = i;
    char desc[600];
    gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                 "%s: the graph has a cycle through %s (its inputs depend on its own output)",
                 g->source, gcc_node_desc(g, bad, desc, sizeof desc));
    free(pending);
    free(order);
    free(done);
    return GCC_ERR_INVALID_GRAPH;
  }
  gcc_node *sorted = malloc((size_t)(n > 0 ? (unsigned)n : 1u) * sizeof *sorted);
  if (!sorted) {
    free(pending);
    free(order);
    free(done);
    return oom(d, "toposort");
  }
  for (int i = 0; i < n; i++)
    sorted[i] = g->nodes[order[i]];
  if (n > 0) /* 0 nodes: g->nodes may be NULL, and memcpy(NULL, ..., 0) is undefined */
    memcpy(g->nodes, sorted, (size_t)n * sizeof *sorted);
  free(sorted);
  free(pending);
  free(order);
  free(done);
  return gcc_graph_link(g, d);
}

gcc_status gcc_graph_bind_batch(gcc_graph *g, int64_t batch, gcc_diag *d) {
  if (batch <= 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "batch size must be > 0 (got %" PRId64 ")",
                        batch);
  for (int i = 0; i < g->n_inputs; i++) {
    gcc_value *v = &g->values[g->inputs[i]];
    if (v->shape.ndim > 0 && v->shape.dims[0] == GCC_BATCH_DIM)
      v->shape.dims[0] = batch;
  }
  return GCC_OK;
}

gcc_status gcc_graph_prune(gcc_graph *g, const int *keep, int n_keep, gcc_diag *d) {
  GCC_TRY(gcc_graph_link(g, d));
  char *live_v = calloc((size_t)(g->n_values ? g->n_values : 1), 1);
  char *live_n = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), 1);
  if (!live_v || !live_n) {
    free(live_v);
    free(live_n);
    return oom(d, "prune");
  }
  if (keep)
    for (int i = 0; i < n_keep; i++)
      live_v[keep[i]] = 1;
  else
    for (int i = 0; i < g->n_outputs; i++)
      live_v[g->outputs[i]] = 1;
  /* nodes are in topological order: one backward sweep marks everything */
  for (int i = g->n_nodes - 1; i >= 0; i--) {
    const gcc_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_outputs && !live_n[i]; k++)
      if (live_v[n->outputs[k]])
        live_n[i] = 1;
    if (!live_n[i])
      continue;
    for (int k = 0; k < n->n_inputs; k++)
      if (n->inputs[k] >= 0)
        live_v[n->inputs[k]] = 1;
  }
  for (int i = 0; i < g->n_nodes; i++)
    live_n[i] = !live_n[i]; /* now: the dead ones */
  free(live_v);
  gcc_status s = gcc_graph_remove_nodes(g, live_n, d);
  free(live_n);
  return s;
}

gcc_status gcc_graph_remove_nodes(gcc_graph *g, const char *dead, gcc_diag *d) {
  int w = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    if (!dead[i]) {
      g->nodes[w++] = g->nodes[i];
      continue;
    }
    gcc_node *n = &g->nodes[i];
    free(n->name);
    free(n->inputs);
    free(n->outputs);
    for (int k = 0; k < n->n_attrs; k++)
      attr_free(&n->attrs[k]);
    free(n->attrs);
    for (int k = 0; k < n->n_av; k++)
      attr_free(&n->av[k]);
    free(n->av);
    free(n->pin);
  }
  g->n_nodes = w;
  return gcc_graph_link(g, d);
}

/* ---- clone ------------------------------------------------------------ */

static gcc_status attr_copy(gcc_attr *dst, const gcc_attr *src) {
  *dst = *src;
  dst->name = gcc_strdup(src->name);
  dst->s = src->s ? gcc_strdup(src->s) : NULL;
  dst->ints = NULL;
  dst->floats = NULL;
  if (src->ints) {
    dst->ints = malloc((size_t)(src->n_ints ? src->n_ints : 1) * sizeof *dst->ints);
    if (dst->ints && src->n_ints)
      memcpy(dst->ints, src->ints, (size_t)src->n_ints * sizeof *dst->ints);
  }
  if (src->floats) {
    dst->floats = malloc((size_t)(src->n_floats ? src->n_floats : 1) * sizeof *dst->floats);
    if (dst->floats && src->n_floats)
      memcpy(dst->floats, src->floats, (size_t)src->n_floats * sizeof *dst->floats);
  }
  if (!dst->name || (src->s && !dst->s) || (src->ints && !dst->ints) ||
      (src->floats && !dst->floats))
    return GCC_ERR_OUT_OF_MEMORY;
  return GCC_OK;
}

static gcc_status clone(const gcc_graph *g, int borrow_params, gcc_graph **out, gcc_diag *d) {
  gcc_graph *c = gcc_graph_new(g->name, g->source);
  if (!c)
    return oom(d, "clone");
  gcc_status s = GCC_OK;
  for (int i = 0; i < g->n_values && s == GCC_OK; i++) {
    const gcc_value *v = &g->values[i];
    int borrow = borrow_params && v->kind == GCC_VALUE_PARAM && v->data;
    int idx;
    s = gcc_graph_add_value(c, v->name, v->dtype, &v->shape, v->kind, borrow ? NULL : v->data,
                            borrow ? 0 : v->data_bytes, &idx, d);
    if (s == GCC_OK && borrow) {
      c->values[idx].data = v->data;
      c->values[idx].data_bytes = v->data_bytes;
      c->values[idx].data_borrowed = 1;
    }
    if (s == GCC_OK) {
      c->values[idx].param_of = v->param_of;
      c->values[idx].state = v->state;
      c->values[idx].device = v->device;
      c->values[idx].layout = v->layout;
    }
  }
  for (int i = 0; i < g->n_nodes && s == GCC_OK; i++) {
    const gcc_node *n = &g->nodes[i];
    int idx;
    s = gcc_graph_add_node(c, n->name, n->op, n->inputs, n->n_inputs, n->outputs, n->n_outputs,
                           &idx, d);
    if (s != GCC_OK)
      break;
    gcc_node *cn = &c->nodes[idx];
    cn->phase = n->phase;
    cn->device = n->device;
    cn->reason = n->reason;
    cn->pin = n->pin ? gcc_strdup(n->pin) : NULL;
    cn->attrs = calloc((size_t)(n->n_attrs ? n->n_attrs : 1), sizeof *cn->attrs);
    cn->av = calloc((size_t)(n->n_av ? n->n_av : 1), sizeof *cn->av);
    if (!cn->attrs || !cn->av || (n->pin && !cn->pin)) {
      s = oom(d, "clone");
      break;
    }
    cn->n_attrs = n->n_attrs;
    cn->n_av = n->n_av;
    for (int k = 0; k < n->n_attrs && s == GCC_OK; k++)
      s = attr_copy(&cn->attrs[k], &n->attrs[k]);
    for (int k = 0; k < n->n_av && s == GCC_OK; k++)
      s = attr_copy(&cn->av[k], &n->av[k]);
    if (s != GCC_OK)
      s = oom(d, "clone attributes");
  }
  for (int i = 0; i < g->n_inputs && s == GCC_OK; i++)
    s = gcc_graph_add_input(c, g->inputs[i]);
  for (int i = 0; i < g->n_outputs && s == GCC_OK; i++)
    s = gcc_graph_add_output(c, g->outputs[i]);
  if (s == GCC_OK) {
    const gcc_training *t = &g->training;
    c->training = *t;
    c->training.loss = gcc_strdup(t->loss);
    c->training.prediction = gcc_strdup(t->prediction);
    c->training.input = gcc_strdup(t->input);
    c->training.target = gcc_strdup(t->target);
    c->training.dataset = gcc_strdup(t->dataset);
    c->producer = gcc_strdup(g->producer);
    c->precision = g->precision;
    c->nondeterministic = g->nondeterministic;
    if ((t->loss && !c->training.loss) || (t->prediction && !c->training.prediction) ||
        (t->input && !c->training.input) || (t->target && !c->training.target) ||
        (t->dataset && !c->training.dataset) || (g->producer && !c->producer))
      s = oom(d, "clone");
  }
  if (s == GCC_OK)
    s = gcc_graph_link(c, d);
  if (s != GCC_OK) {
    gcc_graph_free(c);
    return s;
  }
  *out = c;
  return GCC_OK;
}

gcc_status gcc_graph_clone(const gcc_graph *g, gcc_graph **out, gcc_diag *d) {
  return clone(g, 0, out, d);
}

gcc_status gcc_graph_clone_borrowing_params(const gcc_graph *g, gcc_graph **out, gcc_diag *d) {
  return clone(g, 1, out, d);
}

void gcc_graph_drop_param_data(gcc_graph *g) {
  for (int i = 0; i < g->n_values; i++) {
    gcc_value *v = &g->values[i];
    if (v->kind != GCC_VALUE_PARAM)
      continue;
    if (!v->data_borrowed)
      free(v->data);
    v->data = NULL;
    v->data_bytes = 0;
    v->data_borrowed = 0;
  }
}
