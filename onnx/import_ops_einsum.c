/*
 * import_ops_einsum.c - ONNX Einsum (opset 12, float32) lowered at import
 * onto IR ops that have CPU and CUDA kernels, gradients and an ONNX export:
 * Transpose, Reshape, MatMul (batch dims broadcast), ReduceSumTo and Slice.
 * No IR op of its own. Semantics: ONNX Einsum-12 = numpy.einsum =
 * torch.einsum.
 *
 * The equation: terms of letters (a-z, A-Z; case matters) separated by
 * commas, one per input, optionally "->" and the output's letters;
 * whitespace anywhere is ignored; "..." (at most once per term) stands for
 * the dims not named, right-aligned across the terms (numpy broadcasting: an
 * ellipsis dim of size 1 broadcasts against another size where the dim is
 * kept in the output). Without "->" the output is the ellipsis dims, then
 * the letters that appear once in the whole equation in ASCII order
 * (upper case first), as numpy's implicit mode. A letter's dims must agree
 * in size wherever it appears.
 *
 * The lowering, per operand then left to right over the operands:
 *  - a letter repeated within one term is that operand's diagonal: the two
 *    dims moved last (Transpose), merged (Reshape [.., n * n]), every
 *    (n + 1)-th element taken (Slice, step n + 1);
 *  - a letter that neither the other operand of the step, the later
 *    operands nor the output has is summed (ReduceSumTo + Reshape);
 *  - two operands A and B: the letters of both that are kept (in the output
 *    or a later operand) are batch dims, those of both that are not are
 *    contracted, the others are free: A is permuted to [batch, free A,
 *    contracted] and reshaped to [batch.., M, K], B to [batch.., K, N],
 *    one MatMul [batch.., M, N], reshaped to [batch.., free A.., free B..];
 *    three or more operands are folded pairwise left to right;
 *  - the result is permuted to the output's order (Transpose), else
 *    reshaped into it.
 * Transposes that keep the order and Reshapes to the same shape are left
 * out: 'BGHID,BGHJD->BGHIJ' (MaxViT's attention) is one Transpose of the
 * second operand and one MatMul.
 *
 * Refused naming the node and the equation: a dtype other than float32, a
 * malformed equation (a character other than a letter, ',', '->', '...' or
 * whitespace; a term count other than the input count; a term whose
 * letters do not match its operand's rank; an output letter that no input
 * has or that repeats), letters whose sizes differ (but for the
 * broadcasting of ellipsis dims kept in the output), the diagonal of a dim
 * that depends on the symbolic batch N, and intermediate ranks above
 * GCC_MAX_DIMS.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ops.h"
#include "onnx/import_ops_internal.h"

/* Label ids: 'a'..'z' 0..25, 'A'..'Z' 26..51, ellipsis dims 52.. (right
 * aligned: the last ellipsis dim of every term is 52 + n_ell - 1). */
#define EIN_ELL    52
#define EIN_LABELS (EIN_ELL + GCC_MAX_DIMS)

typedef struct eop {
  int ir;    /* the IR value */
  tshape sh; /* its shape */
  int lab[GCC_MAX_DIMS];
} eop;

typedef struct einsum {
  nctx *c;
  const char *eq; /* the equation as written, for messages */
  int n_ops;
  eop *ops;
  int n_out, out[GCC_MAX_DIMS];
  sdim size[EIN_LABELS]; /* the size of each label (the largest of a broadcast) */
  int seen[EIN_LABELS];  /* occurrences in the inputs */
} einsum;

static gcc_status eerr(einsum *e, gcc_diag *d, gcc_status s, const char *what) {
  return node_err(e->c, d, s, "equation '%s': %s", e->eq, what);
}

static int letter_id(char ch) {
  if (ch >= 'a' && ch <= 'z')
    return ch - 'a';
  if (ch >= 'A' && ch <= 'Z')
    return 26 + (ch - 'A');
  return -1;
}

/* One term (whitespace removed) into labels: ids of its letters, -1 where
 * "..." stands; *n their count, *ell 1 when it has "...". */
static gcc_status parse_term(einsum *e, const char *t, size_t len, int *ids, int *n, int *ell,
                             gcc_diag *d) {
  *n = 0;
  *ell = 0;
  for (size_t i = 0; i < len;) {
    if (t[i] == '.') {
      if (i + 3 > len || t[i + 1] != '.' || t[i + 2] != '.' || *ell)
        return eerr(e, d, GCC_ERR_INVALID_GRAPH, "a '.' that is not part of one '...' per term");
      *ell = 1;
      if (*n >= GCC_MAX_DIMS + 1)
        return eerr(e, d, GCC_ERR_UNSUPPORTED, "a term has more dims than the IR's maximum");
      ids[(*n)++] = -1;
      i += 3;
      continue;
    }
    int id = letter_id(t[i]);
    if (id < 0) {
      char msg[64];
      snprintf(msg, sizeof msg, "character '%c' is not a letter, ',', '->' or '...'", t[i]);
      return eerr(e, d, GCC_ERR_INVALID_GRAPH, msg);
    }
    if (*n >= GCC_MAX_DIMS + 1)
      return eerr(e, d, GCC_ERR_UNSUPPORTED, "a term has more dims than the IR's maximum");
    ids[(*n)++] = id;
    i++;
  }
  return GCC_OK;
}

/* Records label `id` of size `s` (an ellipsis label may broadcast). */
static gcc_status see_label(einsum *e, int id, sdim s, gcc_diag *d) {
  char msg[160];
  if (e->seen[id]++ == 0) {
    e->size[id] = s;
    return GCC_OK;
  }
  sdim *have = &e->size[id];
  if (have->v == s.v && have->sym == s.sym)
    return GCC_OK;
  if (id >= EIN_ELL && !s.sym && s.v == 1)
    return GCC_OK;
  if (id >= EIN_ELL && !have->sym && have->v == 1) {
    *have = s;
    return GCC_OK;
  }
  if (id >= EIN_ELL)
    snprintf(msg, sizeof msg,
             "ellipsis dims of sizes %" PRId64 "%s and %" PRId64 "%s do not broadcast", have->v,
             have->sym ? "N" : "", s.v, s.sym ? "N" : "");
  else
    snprintf(msg, sizeof msg, "letter '%c' has sizes %" PRId64 "%s and %" PRId64 "%s",
             id < 26 ? 'a' + id : 'A' + (id - 26), have->v, have->sym ? "N" : "", s.v,
             s.sym ? "N" : "");
  return eerr(e, d, GCC_ERR_SHAPE, msg);
}

static gcc_status parse(einsum *e, const char *raw, gcc_diag *d) {
  size_t L = strlen(raw);
  char *s = malloc(L + 1);
  if (!s)
    return oom(d);
  size_t n = 0;
  for (size_t i = 0; i < L; i++)
    if (raw[i] != ' ' && raw[i] != '\t' && raw[i] != '\n' && raw[i] != '\r')
      s[n++] = raw[i];
  s[n] = '\0';
  gcc_status st = GCC_OK;
  char *arrow = strstr(s, "->");
  size_t lhs_len = arrow ? (size_t)(arrow - s) : n;
  int n_ell = 0;
  /* the input terms */
  int term = 0;
  size_t start = 0;
  int ids[GCC_MAX_DIMS + 1], ni, ell;
  int *tell = calloc((size_t)e->n_ops, sizeof *tell);
  if (!tell) {
    free(s);
    return oom(d);
  }
  for (size_t i = 0; i <= lhs_len && st == GCC_OK; i++) {
    if (i < lhs_len && s[i] != ',')
      continue;
    if (term >= e->n_ops) {
      st = eerr(e, d, GCC_ERR_INVALID_GRAPH, "it has more terms than the node has inputs");
      break;
    }
    st = parse_term(e, s + start, i - start, ids, &ni, &ell, d);
    if (st != GCC_OK)
      break;
    eop *o = &e->ops[term];
    int rank = o->sh.ndim, named = ni - ell;
    if (named > rank || (!ell && named != rank)) {
      char msg[160];
      snprintf(msg, sizeof msg, "term %d names %d dims; input %d has rank %d", term + 1, named,
               term, rank);
      st = eerr(e, d, GCC_ERR_SHAPE, msg);
      break;
    }
    int en = rank - named; /* dims "..." stands for */
    if (en > n_ell)
      n_ell = en;
    tell[term] = ell ? en : 0;
    /* the labels, ellipsis ones as -2 - k (resolved below, once n_ell is known) */
    int k = 0;
    for (int j = 0; j < ni; j++) {
      if (ids[j] >= 0)
        o->lab[k++] = ids[j];
      else
        for (int q = 0; q < en; q++)
          o->lab[k++] = -2 - q;
    }
    term++;
    start = i + 1;
  }
  if (st == GCC_OK && term != e->n_ops)
    st = eerr(e, d, GCC_ERR_INVALID_GRAPH, "it has fewer terms than the node has inputs");
  for (int t = 0; st == GCC_OK && t < e->n_ops; t++) {
    eop *o = &e->ops[t];
    for (int j = 0; j < o->sh.ndim; j++) {
      if (o->lab[j] < 0)
        o->lab[j] = EIN_ELL + (n_ell - tell[t]) + (-2 - o->lab[j]);
      st = see_label(e, o->lab[j], o->sh.d[j], d);
      if (st != GCC_OK)
        break;
    }
  }
  /* the output */
  if (st == GCC_OK && arrow) {
    const char *r = arrow + 2;
    if (strstr(r, "->"))
      st = eerr(e, d, GCC_ERR_INVALID_GRAPH, "it has more than one '->'");
    else if (strchr(r, ','))
      st = eerr(e, d, GCC_ERR_INVALID_GRAPH, "the output has a ','");
    if (st == GCC_OK)
      st = parse_term(e, r, strlen(r), ids, &ni, &ell, d);
    int used[EIN_LABELS] = {0};
    e->n_out = 0;
    for (int j = 0; st == GCC_OK && j < ni; j++) {
      int first = ids[j], last = ids[j];
      if (ids[j] < 0) {
        first = EIN_ELL;
        last = EIN_ELL + n_ell - 1;
      }
      for (int id = first; id <= last; id++) {
        if (!e->seen[id]) {
          st = eerr(e, d, GCC_ERR_INVALID_GRAPH, "an output letter appears in no input term");
          break;
        }
        if (used[id]++) {
          st = eerr(e, d, GCC_ERR_INVALID_GRAPH, "an output letter repeats");
          break;
        }
        if (e->n_out >= GCC_MAX_DIMS) {
          st = eerr(e, d, GCC_ERR_UNSUPPORTED, "the output has more dims than the IR's maximum");
          break;
        }
        e->out[e->n_out++] = id;
      }
    }
  } else if (st == GCC_OK) { /* implicit: "...", then the letters seen once, ASCII order */
    e->n_out = 0;
    for (int id = EIN_ELL; id < EIN_ELL + n_ell; id++)
      e->out[e->n_out++] = id;
    for (int a = 0; a < 52; a++) {
      int id = a < 26 ? 26 + a : a - 26; /* 'A'..'Z' first */
      if (e->seen[id] == 1) {
        if (e->n_out >= GCC_MAX_DIMS) {
          st = eerr(e, d, GCC_ERR_UNSUPPORTED, "the output has more dims than the IR's maximum");
          break;
        }
        e->out[e->n_out++] = id;
      }
    }
  }
  free(tell);
  free(s);
  return st;
}

/* ---- emitting ----------------------------------------------------------------------- */

static int same_shape(const tshape *a, const tshape *b) {
  if (a->ndim != b->ndim)
    return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->d[i].v != b->d[i].v || a->d[i].sym != b->d[i].sym)
      return 0;
  return 1;
}

/* o permuted so that dim i is old dim perm[i] (nothing when the order stays). */
static gcc_status permute(einsum *e, eop *o, const int *perm, gcc_diag *d) {
  int identity = 1;
  int64_t p[GCC_MAX_DIMS];
  eop r = *o;
  for (int i = 0; i < o->sh.ndim; i++) {
    p[i] = perm[i];
    identity &= perm[i] == i;
    r.sh.d[i] = o->sh.d[perm[i]];
    r.lab[i] = o->lab[perm[i]];
  }
  if (identity)
    return GCC_OK;
  int node, next;
  GCC_TRY(emit(e->c, GCC_OP_TRANSPOSE, &o->ir, 1, -1, F32, &r.sh, &next, &node, d));
  if (gcc_node_set_ints(e->c->I->g, node, "perm", p, o->sh.ndim))
    return oom(d);
  r.ir = next;
  *o = r;
  return GCC_OK;
}

/* IR value *ir of shape *sh reshaped to `to` (nothing when the same). */
static gcc_status reshape_to(einsum *e, int *ir, tshape *sh, const tshape *to, gcc_diag *d) {
  if (same_shape(sh, to))
    return GCC_OK;
  int next;
  GCC_TRY(emit_reshape(e->c, *ir, to, -1, F32, &next, d));
  *ir = next;
  *sh = *to;
  return GCC_OK;
}

/* The product of dims [lo, hi) of s; an error when two depend on N. */
static gcc_status prod(einsum *e, const tshape *s, int lo, int hi, sdim *out, gcc_diag *d) {
  sdim p = {1, 0};
  for (int i = lo; i < hi; i++) {
    if (p.sym && s->d[i].sym)
      return eerr(e, d, GCC_ERR_UNSUPPORTED,
                  "two dims that depend on the symbolic batch N would be merged; give the input "
                  "a fixed batch");
    p.v *= s->d[i].v;
    p.sym |= s->d[i].sym;
  }
  *out = p;
  return GCC_OK;
}

/* The diagonals of o: while a label repeats, its two dims become one. */
static gcc_status diagonals(einsum *e, eop *o, gcc_diag *d) {
  for (;;) {
    int r = o->sh.ndim, p = -1, q = -1;
    for (int i = 0; i < r && p < 0; i++)
      for (int j = i + 1; j < r; j++)
        if (o->lab[i] == o->lab[j]) {
          p = i;
          q = j;
          break;
        }
    if (p < 0)
      return GCC_OK;
    sdim n = o->sh.d[p];
    if (n.sym)
      return eerr(e, d, GCC_ERR_UNSUPPORTED,
                  "the diagonal of a dim that depends on the symbolic batch N is not supported");
    int perm[GCC_MAX_DIMS], k = 0;
    for (int i = 0; i < r; i++)
      if (i != p && i != q)
        perm[k++] = i;
    perm[k++] = p;
    perm[k++] = q;
    GCC_TRY(permute(e, o, perm, d));
    tshape flat = o->sh;
    flat.ndim = r - 1;
    flat.d[r - 2] = (sdim){n.v * n.v, 0};
    GCC_TRY(reshape_to(e, &o->ir, &o->sh, &flat, d));
    tshape diag = flat;
    diag.d[r - 2] = n;
    int node, next;
    GCC_TRY(emit(e->c, GCC_OP_SLICE, &o->ir, 1, -1, F32, &diag, &next, &node, d));
    int64_t st = 0, en = n.v * n.v, ax = r - 2, step = n.v + 1;
    gcc_graph *g = e->c->I->g;
    if (gcc_node_set_ints(g, node, "starts", &st, 1) ||
        gcc_node_set_ints(g, node, "ends", &en, 1) || gcc_node_set_ints(g, node, "axes", &ax, 1) ||
        gcc_node_set_ints(g, node, "steps", &step, 1))
      return oom(d);
    o->ir = next;
    o->sh = diag;
    o->sh.ndim = r - 1;
  }
}

/* Sums the dims of o whose label keep[] does not hold. */
static gcc_status sum_out(einsum *e, eop *o, const int *keep, gcc_diag *d) {
  int r = o->sh.ndim, any = 0;
  int64_t ints[GCC_MAX_DIMS];
  tshape kept = o->sh, out = {0, {{0, 0}}};
  eop res = *o;
  for (int i = 0; i < r; i++) {
    int red = !keep[o->lab[i]];
    any |= red;
    ints[i] = red;
    if (red) {
      kept.d[i] = (sdim){1, 0};
    } else {
      res.lab[out.ndim] = o->lab[i];
      out.d[out.ndim++] = o->sh.d[i];
    }
  }
  if (!any)
    return GCC_OK;
  int node, next;
  GCC_TRY(emit(e->c, GCC_OP_REDUCE_SUM_TO, &o->ir, 1, -1, F32, &kept, &next, &node, d));
  if (gcc_node_set_ints(e->c->I->g, node, "shape", ints, r) ||
      gcc_node_set_float(e->c->I->g, node, "scale", 1.0f))
    return oom(d);
  res.ir = next;
  res.sh = kept;
  GCC_TRY(reshape_to(e, &res.ir, &res.sh, &out, d));
  *o = res;
  return GCC_OK;
}

static int has_label(const eop *o, int id) {
  for (int i = 0; i < o->sh.ndim; i++)
    if (o->lab[i] == id)
      return 1;
  return 0;
}

/* a <- contraction of a and b; keep[]: the labels the output or a later
 * operand has. */
static gcc_status contract(einsum *e, eop *a, eop *b, const int *keep, gcc_diag *d) {
  int ra = a->sh.ndim, rb = b->sh.ndim;
  int batch[GCC_MAX_DIMS], fa[GCC_MAX_DIMS], con[GCC_MAX_DIMS], fb[GCC_MAX_DIMS];
  int nb = 0, nfa = 0, nc = 0, nfb = 0;
  for (int i = 0; i < ra; i++) {
    int id = a->lab[i];
    if (!has_label(b, id))
      fa[nfa++] = id;
    else if (keep[id])
      batch[nb++] = id;
    else
      con[nc++] = id;
  }
  for (int i = 0; i < rb; i++)
    if (!has_label(a, b->lab[i]))
      fb[nfb++] = b->lab[i];
  if (nb + 2 > GCC_MAX_DIMS || nb + nfa + nfb > GCC_MAX_DIMS)
    return eerr(e, d, GCC_ERR_UNSUPPORTED,
                "a contraction step would need more dims than the IR's maximum");
  /* positions of labels in a and b */
  int pa[EIN_LABELS], pb[EIN_LABELS];
  for (int i = 0; i < ra; i++)
    pa[a->lab[i]] = i;
  for (int i = 0; i < rb; i++)
    pb[b->lab[i]] = i;
  for (int i = 0; i < nc; i++) {
    sdim x = a->sh.d[pa[con[i]]], y = b->sh.d[pb[con[i]]];
    if (x.v != y.v || x.sym != y.sym)
      return eerr(e, d, GCC_ERR_UNSUPPORTED,
                  "an ellipsis dim that broadcasts is summed (not in the output); this is not "
                  "supported");
  }
  int perm[GCC_MAX_DIMS], k = 0;
  for (int i = 0; i < nb; i++)
    perm[k++] = pa[batch[i]];
  for (int i = 0; i < nfa; i++)
    perm[k++] = pa[fa[i]];
  for (int i = 0; i < nc; i++)
    perm[k++] = pa[con[i]];
  GCC_TRY(permute(e, a, perm, d));
  k = 0;
  for (int i = 0; i < nb; i++)
    perm[k++] = pb[batch[i]];
  for (int i = 0; i < nc; i++)
    perm[k++] = pb[con[i]];
  for (int i = 0; i < nfb; i++)
    perm[k++] = pb[fb[i]];
  GCC_TRY(permute(e, b, perm, d));
  /* [batch.., M, K] x [batch.., K, N] */
  tshape ta = a->sh, tb = b->sh, res = {0, {{0, 0}}}, mm;
  sdim M, K, Nn;
  GCC_TRY(prod(e, &a->sh, nb, nb + nfa, &M, d));
  GCC_TRY(prod(e, &a->sh, nb + nfa, ra, &K, d));
  GCC_TRY(prod(e, &b->sh, nb + nc, rb, &Nn, d));
  ta.ndim = nb + 2;
  ta.d[nb] = M;
  ta.d[nb + 1] = K;
  tb.ndim = nb + 2;
  tb.d[nb] = K;
  tb.d[nb + 1] = Nn;
  /* the MatMul's shape and the result's, from the operands' own sizes (an
   * ellipsis dim may be 1 in one and broadcast to the other's size) */
  mm.ndim = nb + 2;
  int lab[GCC_MAX_DIMS];
  for (int i = 0; i < nb; i++) {
    sdim x = a->sh.d[i], y = b->sh.d[i];
    mm.d[i] = (!x.sym && x.v == 1) ? y : x;
    res.d[res.ndim] = mm.d[i];
    lab[res.ndim++] = batch[i];
  }
  mm.d[nb] = M;
  mm.d[nb + 1] = Nn;
  for (int i = 0; i < nfa; i++) {
    res.d[res.ndim] = a->sh.d[nb + i];
    lab[res.ndim++] = fa[i];
  }
  for (int i = 0; i < nfb; i++) {
    res.d[res.ndim] = b->sh.d[nb + nc + i];
    lab[res.ndim++] = fb[i];
  }
  GCC_TRY(reshape_to(e, &a->ir, &a->sh, &ta, d));
  GCC_TRY(reshape_to(e, &b->ir, &b->sh, &tb, d));
  int ins[2] = {a->ir, b->ir}, node, next;
  GCC_TRY(emit(e->c, GCC_OP_MATMUL, ins, 2, -1, F32, &mm, &next, &node, d));
  a->ir = next;
  a->sh = mm;
  GCC_TRY(reshape_to(e, &a->ir, &a->sh, &res, d));
  memcpy(a->lab, lab, sizeof lab);
  return GCC_OK;
}

gcc_status cv_einsum(nctx *c, gcc_diag *d) {
  GCC_TRY(allow_attrs(c, d, "equation", (char *)NULL));
  int n = n_in(c);
  if (n < 1)
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "takes at least one input");
  for (int k = 0; k < n; k++) {
    if (in_idx(c, k) < 0)
      return node_err(c, d, GCC_ERR_INVALID_GRAPH, "input %d is empty", k);
    GCC_TRY(need_float(c, k, d));
  }
  char eq[1024];
  GCC_TRY(a_string(c, "equation", "", eq, sizeof eq, d));
  if (!attr(c, "equation"))
    return node_err(c, d, GCC_ERR_INVALID_GRAPH, "attribute 'equation' is required");
  einsum e;
  memset(&e, 0, sizeof e);
  e.c = c;
  e.eq = eq;
  e.n_ops = n;
  e.ops = calloc((size_t)n, sizeof *e.ops);
  if (!e.ops)
    return oom(d);
  gcc_status st = GCC_OK;
  for (int k = 0; k < n && st == GCC_OK; k++)
    e.ops[k].sh = *in_sh(c, k);
  if (st == GCC_OK)
    st = parse(&e, eq, d);
  for (int k = 0; k < n && st == GCC_OK; k++) {
    st = in_ir(c, k, &e.ops[k].ir, d);
    if (st == GCC_OK)
      st = diagonals(&e, &e.ops[k], d);
  }
  /* left to right: acc (ops[0]) with ops[k] */
  eop *acc = &e.ops[0];
  for (int k = 0; k < n && st == GCC_OK; k++) {
    int keep[EIN_LABELS] = {0};
    for (int i = 0; i < e.n_out; i++)
      keep[e.out[i]] = 1;
    for (int j = k + 1; j < n; j++)
      for (int i = 0; i < e.ops[j].sh.ndim; i++)
        keep[e.ops[j].lab[i]] = 1;
    if (k == 0) {
      if (n == 1)
        st = sum_out(&e, acc, keep, d);
      continue;
    }
    eop *b = &e.ops[k];
    int keep_a[EIN_LABELS], keep_b[EIN_LABELS];
    for (int id = 0; id < EIN_LABELS; id++) {
      keep_a[id] = keep[id] || has_label(b, id);
      keep_b[id] = keep[id] || has_label(acc, id);
    }
    st = sum_out(&e, acc, keep_a, d);
    if (st == GCC_OK)
      st = sum_out(&e, b, keep_b, d);
    if (st == GCC_OK)
      st = contract(&e, acc, b, keep, d);
  }
  if (st == GCC_OK) { /* into the output's order */
    int pos[EIN_LABELS], perm[GCC_MAX_DIMS], identity = 1;
    tshape os = {e.n_out, {{0, 0}}};
    for (int i = 0; i < acc->sh.ndim; i++)
      pos[acc->lab[i]] = i;
    if (acc->sh.ndim != e.n_out)
      st = eerr(&e, d, GCC_ERR_INTERNAL, "the result's rank is not the output's");
    for (int i = 0; i < e.n_out && st == GCC_OK; i++) {
      perm[i] = pos[e.out[i]];
      identity &= perm[i] == i;
      os.d[i] = acc->sh.d[perm[i]];
    }
    if (st == GCC_OK && identity) {
      st = emit_reshape(c, acc->ir, &os, 0, F32, NULL, d);
    } else if (st == GCC_OK) {
      int64_t p[GCC_MAX_DIMS];
      for (int i = 0; i < e.n_out; i++)
        p[i] = perm[i];
      int node;
      st = emit(c, GCC_OP_TRANSPOSE, &acc->ir, 1, 0, F32, &os, NULL, &node, d);
      if (st == GCC_OK && gcc_node_set_ints(c->I->g, node, "perm", p, e.n_out))
        st = oom(d);
    }
  }
  free(e.ops);
  return st;
}
