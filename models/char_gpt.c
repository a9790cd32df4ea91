/*
 * char_gpt.c - nanoGPT's GPT (model.py) built in code: the character-level
 * "baby GPT" of shakespeare_char (models.h gcc_model_char_gpt_sized).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/builder.h"
#include "graph/ops.h"
#include "graph/rng.h"
#include "models/models.h"

/* N(0, std) by Box-Muller from the builder's generator (torch.nn.init.normal_). */
static void normal_fill(gcc_rng *r, float *w, int64_t n, double std) {
  for (int64_t i = 0; i < n; i += 2) {
    double u1 = ((double)gcc_rng_u32(r) + 1.0) / 4294967297.0, u2 = gcc_rng_uniform(r);
    double rad = sqrt(-2.0 * log(u1));
    w[i] = (float)(std * rad * cos(2.0 * M_PI * u2));
    if (i + 1 < n)
      w[i + 1] = (float)(std * rad * sin(2.0 * M_PI * u2));
  }
}

typedef struct {
  gcc_builder *b;
  float *buf; /* scratch of the largest parameter */
} gpt_ctx;

/* A parameter "<prefix>.<what>" of `ndim` dims: N(0, std), or the constant
 * `fill` when std == 0. */
static int param(gpt_ctx *c, const char *prefix, const char *what, int ndim, const int64_t *dims,
                 double std, float fill) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++)
    n *= dims[i];
  if (std > 0)
    normal_fill(&c->b->rng, c->buf, n, std);
  else
    for (int64_t i = 0; i < n; i++)
      c->buf[i] = fill;
  char name[128];
  snprintf(name, sizeof name, "%s.%s", prefix, what);
  return gcc_build_param(c->b, name, ndim, dims, c->buf);
}

static int op1(gpt_ctx *c, int op, const char *name, int x) {
  return gcc_build_op(c->b, op, name, name, &x, 1);
}

static int op2(gpt_ctx *c, int op, const char *name, int x, int y) {
  int in[2] = {x, y};
  return gcc_build_op(c->b, op, name, name, in, 2);
}

static int reshape(gpt_ctx *c, const char *name, int x, const int64_t *dims, int n) {
  int y = op1(c, GCC_OP_RESHAPE, name, x);
  gcc_build_set_ints(c->b, y, "shape", dims, n);
  return y;
}

/* nn.Linear(in, out) on rows x (N, in): Gemm(x, W (out, in), b, transB),
 * W ~ N(0, std), b = 0 (nanoGPT's _init_weights). */
static int linear(gpt_ctx *c, const char *name, int x, int64_t in, int64_t out, double std) {
  const int64_t wd[2] = {out, in}, bd[1] = {out};
  int w = param(c, name, "weight", 2, wd, std, 0), bias = param(c, name, "bias", 1, bd, 0, 0.0f);
  int ins[3] = {x, w, bias};
  int y = gcc_build_op(c->b, GCC_OP_GEMM, name, name, ins, 3);
  gcc_build_set_int(c->b, y, "transB", 1);
  return y;
}

/* nn.LayerNorm(C) (weight 1, bias 0, eps 1e-5) over the last axis. */
static int layer_norm(gpt_ctx *c, const char *name, int x, int64_t C) {
  const int64_t d[1] = {C};
  int w = param(c, name, "weight", 1, d, 0, 1.0f), bias = param(c, name, "bias", 1, d, 0, 0.0f);
  int ins[3] = {x, w, bias};
  return gcc_build_op(c->b, GCC_OP_LAYER_NORM, name, name, ins, 3);
}

static int dropout(gpt_ctx *c, const char *name, int x, float p) {
  if (p <= 0.0f)
    return x;
  int y = op1(c, GCC_OP_DROPOUT, name, x);
  gcc_build_set_float(c->b, y, "ratio", p);
  return y;
}

/* One head-split input of the attention: rows (B*T, 3C) sliced at
 * [k C, (k+1) C) -> (B, T, H, D) -> (B, H, T, D). */
static int head_split(gpt_ctx *c, const char *prefix, const char *what, int qkv, int k, int64_t T,
                      int64_t H, int64_t C) {
  char name[128];
  snprintf(name, sizeof name, "%s.%s", prefix, what);
  int s = op1(c, GCC_OP_SLICE, name, qkv);
  const int64_t st[1] = {k * C}, en[1] = {(k + 1) * C}, ax[1] = {1};
  gcc_build_set_ints(c->b, s, "starts", st, 1);
  gcc_build_set_ints(c->b, s, "ends", en, 1);
  gcc_build_set_ints(c->b, s, "axes", ax, 1);
  const int64_t hd[4] = {-1, T, H, C / H}, perm[4] = {0, 2, 1, 3};
  snprintf(name, sizeof name, "%s.%s_heads", prefix, what);
  int r = reshape(c, name, s, hd, 4);
  snprintf(name, sizeof name, "%s.%s_bhtd", prefix, what);
  int t = op1(c, GCC_OP_TRANSPOSE, name, r);
  gcc_build_set_ints(c->b, t, "perm", perm, 4);
  return t;
}

/* CausalSelfAttention on rows x (B*T, C) -> (B*T, C). */
static int attention(gpt_ctx *c, const char *p, int x, int64_t T, int64_t H, int64_t C,
                     double proj_std, float p_drop) {
  char name[128];
  snprintf(name, sizeof name, "%s.c_attn", p);
  int qkv = linear(c, name, x, C, 3 * C, 0.02);
  int q = head_split(c, p, "q", qkv, 0, T, H, C), k = head_split(c, p, "k", qkv, 1, T, H, C),
      v = head_split(c, p, "v", qkv, 2, T, H, C);
  /* Attention -> O, L (the logsumexp kept for the backward) */
  gcc_graph *g = c->b->g;
  int o = -1, l = -1, node = -1;
  if (c->b->status == GCC_OK) {
    char on[160], ln[160];
    snprintf(name, sizeof name, "%s.sdpa", p);
    snprintf(on, sizeof on, "%s.O", name);
    snprintf(ln, sizeof ln, "%s.L", name);
    gcc_status st = gcc_graph_add_temp(g, on, GCC_VALUE_ACTIVATION, &o, &c->b->diag);
    if (st == GCC_OK)
      st = gcc_graph_add_temp(g, ln, GCC_VALUE_ACTIVATION, &l, &c->b->diag);
    int ins[3] = {q, k, v}, outs[2] = {o, l};
    if (st == GCC_OK)
      st = gcc_graph_add_node(g, name, GCC_OP_ATTENTION, ins, 3, outs, 2, &node, &c->b->diag);
    if (st == GCC_OK)
      st = gcc_node_set_int(g, node, "is_causal", 1);
    if (st == GCC_OK && p_drop > 0.0f) /* nanoGPT's attn_dropout, on the probabilities */
      st = gcc_node_set_float(g, node, "dropout_p", p_drop);
    if (st != GCC_OK) {
      c->b->status = st;
      return -1;
    }
  }
  const int64_t perm[4] = {0, 2, 1, 3}, rows[2] = {-1, C};
  snprintf(name, sizeof name, "%s.y_bthd", p);
  int t = op1(c, GCC_OP_TRANSPOSE, name, o);
  gcc_build_set_ints(c->b, t, "perm", perm, 4);
  snprintf(name, sizeof name, "%s.y_rows", p);
  int y = reshape(c, name, t, rows, 2);
  snprintf(name, sizeof name, "%s.c_proj", p);
  y = linear(c, name, y, C, C, proj_std);
  snprintf(name, sizeof name, "%s.resid_dropout", p);
  return dropout(c, name, y, p_drop);
}

/* MLP on rows x (B*T, C): c_fc (4C), GELU (erf), c_proj, dropout. */
static int mlp(gpt_ctx *c, const char *p, int x, int64_t C, double proj_std, float p_drop) {
  char name[128];
  snprintf(name, sizeof name, "%s.c_fc", p);
  int h = linear(c, name, x, C, 4 * C, 0.02);
  snprintf(name, sizeof name, "%s.gelu", p);
  h = op1(c, GCC_OP_GELU, name, h); /* approximate "none": nn.GELU() */
  snprintf(name, sizeof name, "%s.c_proj", p);
  h = linear(c, name, h, 4 * C, C, proj_std);
  snprintf(name, sizeof name, "%s.dropout", p);
  return dropout(c, name, h, p_drop);
}

gcc_status gcc_model_char_gpt_sized(int64_t vocab, int64_t block, int64_t n_layer, int64_t n_head,
                                    int64_t n_embd, float dropout_p, uint64_t seed, gcc_graph **out,
                                    gcc_diag *d) {
  if (vocab < 1 || block < 1 || n_layer < 1 || n_head < 1 || n_embd < 1 || n_embd % n_head != 0 ||
      !(dropout_p >= 0.0f && dropout_p < 1.0f))
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "char_gpt: vocab %lld, block %lld, n_layer %lld, n_head %lld, n_embd %lld, "
                        "dropout %g (all >= 1, n_embd a multiple of n_head, dropout in [0, 1))",
                        (long long)vocab, (long long)block, (long long)n_layer, (long long)n_head,
                        (long long)n_embd, (double)dropout_p);
  const int64_t C = n_embd, T = block, V = vocab;
  int64_t largest = V * C > 4 * C * C ? V * C : 4 * C * C;
  if (T * C > largest)
    largest = T * C;
  gpt_ctx c = {gcc_builder_new("char_gpt", seed), malloc((size_t)largest * sizeof(float))};
  if (!c.b || !c.buf) {
    free(c.buf);
    if (c.b)
      gcc_builder_finish(c.b, out, d); /* frees it */
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (char_gpt)");
  }
  const int64_t xd[2] = {GCC_BATCH_DIM, T}, ed[2] = {V, C}, pd[2] = {T, C};
  int idx = gcc_build_input(c.b, "idx", GCC_DT_INT64, 2, xd);
  int y = gcc_build_input(c.b, "targets", GCC_DT_INT64, 2, xd);
  int wte = param(&c, "transformer.wte", "weight", 2, ed, 0.02, 0);
  int wpe = param(&c, "transformer.wpe", "weight", 2, pd, 0.02, 0);
  /* positions 0..T-1: a constant (torch.arange(t)) */
  int64_t *pos = malloc((size_t)T * sizeof *pos);
  if (!pos) {
    free(c.buf);
    gcc_builder_finish(c.b, out, d);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (char_gpt)");
  }
  for (int64_t t = 0; t < T; t++)
    pos[t] = t;
  const int64_t posd[1] = {T}, rows[2] = {-1, C};
  int posv = gcc_build_const(c.b, "transformer.pos", GCC_DT_INT64, 1, posd, pos);
  free(pos);
  int tok = op2(&c, GCC_OP_GATHER, "transformer.tok_emb", wte, idx); /* (B, T, C) */
  int pe = op2(&c, GCC_OP_GATHER, "transformer.pos_emb", wpe, posv); /* (T, C) */
  int x = op2(&c, GCC_OP_ADD, "transformer.emb", tok, pe);
  x = reshape(&c, "transformer.emb_rows", x, rows, 2);
  x = dropout(&c, "transformer.drop", x, dropout_p);
  const double proj_std = 0.02 / sqrt(2.0 * (double)n_layer);
  for (int64_t l = 0; l < n_layer; l++) {
    char p[64], name[128];
    snprintf(p, sizeof p, "transformer.h.%lld", (long long)l);
    snprintf(name, sizeof name, "%s.ln_1", p);
    int h = layer_norm(&c, name, x, C);
    snprintf(name, sizeof name, "%s.attn", p);
    h = attention(&c, name, h, T, n_head, C, proj_std, dropout_p);
    snprintf(name, sizeof name, "%s.attn_add", p);
    x = op2(&c, GCC_OP_ADD, name, x, h);
    snprintf(name, sizeof name, "%s.ln_2", p);
    h = layer_norm(&c, name, x, C);
    snprintf(name, sizeof name, "%s.mlp", p);
    h = mlp(&c, name, h, C, proj_std, dropout_p);
    snprintf(name, sizeof name, "%s.mlp_add", p);
    x = op2(&c, GCC_OP_ADD, name, x, h);
  }
  x = layer_norm(&c, "transformer.ln_f", x, C);
  /* lm_head: x wte^T, the token embedding read a second time (weight tying) */
  int lin[2] = {x, wte};
  int flat = gcc_build_op(c.b, GCC_OP_GEMM, "lm_head", "logits_flat", lin, 2);
  gcc_build_set_int(c.b, flat, "transB", 1);
  const int64_t seq[3] = {-1, T, V}, tshape[1] = {-1};
  int logits = reshape(&c, "logits", flat, seq, 3);
  int yflat = reshape(&c, "target_flat", y, tshape, 1);
  int loss = gcc_build_cross_entropy(c.b, "loss", flat, yflat, -1);
  gcc_build_output(c.b, loss);
  gcc_build_output(c.b, logits);
  free(c.buf);
  /* nanoGPT's config/train_shakespeare_char.py: AdamW lr 1e-3, betas
   * (0.9, 0.99), weight decay 0.1 on the matrices, batch 64 */
  gcc_build_training_spec t = {0};
  t.loss = "loss";
  t.prediction = "logits";
  t.input = "idx";
  t.target = "targets";
  t.dataset = "text";
  t.opt.kind = GCC_OPT_ADAM;
  t.opt.decoupled = 1;
  t.opt.lr = 1e-3f;
  t.opt.beta1 = 0.9f;
  t.opt.beta2 = 0.99f;
  t.opt.eps = 1e-8f;
  t.opt.weight_decay = 0.1f;
  t.opt.decay_matrices_only = 1;
  t.opt.clip_grad_norm = 1.0f;
  t.batch_size = 64;
  t.epochs = 1;
  t.seed = seed;
  gcc_build_training(c.b, &t);
  return gcc_builder_finish(c.b, out, d);
}

gcc_status gcc_model_char_gpt(uint64_t seed, gcc_graph **out, gcc_diag *d) {
  return gcc_model_char_gpt_sized(84, 256, 6, 6, 384, 0.2f, seed, out, d);
}

/* strtoll/strtof of one field ending at `stop` ('\0' for the last one) */
static int parse_field(const char **p, int is_float, char stop, int64_t *iv, float *fv) {
  char *end;
  errno = 0;
  if (is_float)
    *fv = strtof(*p, &end);
  else
    *iv = strtoll(*p, &end, 10);
  if (errno || end == *p || *end != stop)
    return 0;
  *p = stop ? end + 1 : end;
  return 1;
}

gcc_status gcc_char_gpt_sizes_parse(const char *text, gcc_char_gpt_sizes *out, gcc_diag *d) {
  if (!text || !out)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "char_gpt sizes: NULL argument");
  gcc_char_gpt_sizes s = {0};
  s.vocab = 84;
  const char *p = text;
  int64_t *ints[4] = {&s.n_layer, &s.n_head, &s.n_embd, &s.block};
  int ok = 1;
  for (int i = 0; i < 4 && ok; i++)
    ok = parse_field(&p, 0, ',', ints[i], NULL);
  /* DROPOUT ends the text, or a comma and VOCAB follow */
  const char *comma = ok ? strchr(p, ',') : NULL;
  if (ok)
    ok = parse_field(&p, 1, comma ? ',' : '\0', NULL, &s.dropout);
  if (ok && comma)
    ok = parse_field(&p, 0, '\0', &s.vocab, NULL);
  if (!ok)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "char_gpt sizes '%s': expected N_LAYER,N_HEAD,N_EMBD,BLOCK,DROPOUT[,VOCAB]",
                        text);
  *out = s;
  return GCC_OK;
}
