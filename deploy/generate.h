/*
 * generate.h - sampling text from a trained language model (gcc-run
 * --generate), as nanoGPT's sample.py / GPT.generate: for each new token,
 * the model runs on the last T tokens of the sequence (T its block size),
 * the logits of the last position are divided by the temperature, all but
 * the top k set to -inf (ties with the k-th kept, as torch.topk's
 * threshold), softmax, and one token drawn (torch.multinomial).
 *
 * The window: a plan of fixed T; a context shorter than T sits at
 * positions 0 .. len-1, the rest filled with token 0, and the logits of
 * position len-1 are read. That is exact for causal models (a GPT:
 * position t sees positions <= t only) and for position-wise ones (a bigram
 * model); nanoGPT runs the shorter sequence instead.
 *
 * The KV cache (deploy/kv_cache.h): for a GPT with causal attentions and a
 * constant position table, while the context fits the window (len <= T)
 * each token is one run of the decoder form (one position through every
 * layer, the earlier keys and values from the caches); the prompt's
 * positions go through it one by one first. Its logits of the first token
 * are checked against the window's (within 1e-3 of the largest |logit|,
 * float32 rounding of sums of other lengths being ~1e-6 of it); a model
 * whose other nodes mix positions fails that and keeps the window. Past T
 * tokens every position of the window changes (nanoGPT crops the context
 * to the last T tokens), so the window runs again for each token, as
 * nanoGPT without a cache. Only the sequence's last T tokens are kept (in
 * 2T slots): memory does not grow with N or the prompt's length.
 *
 * The model: a gcc-train model (.pb) whose training spec names the input
 * (int64 ids (B, T), or float32 one-hot rows (B, T, V)) and the prediction
 * (logits (B, T, V)); with training.vocab (--dataset text) prompts are
 * encoded and tokens decoded as bytes, and only the vocabulary's ids are
 * drawn (logits past it, V > the vocabulary, belong to ids the training
 * text never had); else tokens are printed as decimal ids. Runs on the
 * CPU; links no compiler (NVRTC).
 */
#ifndef GCC_DEPLOY_GENERATE_H
#define GCC_DEPLOY_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "graph/ir.h"
#include "graph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gcc_generate_options {
  int64_t n_new;      /* tokens to sample (>= 0) */
  const char *prompt; /* bytes to start from (NULL or "": "\n" when the vocabulary has it,
                             as sample.py's start, else token 0) */
  double temperature; /* > 0 (1.0: the model's distribution) */
  int64_t top_k;      /* 0: every token; else the k most likely */
  uint64_t seed;      /* the draws: gcc_rng_seed(seed, GCC_GENERATE_STREAM) */
  int threads;        /* CPU threads (<= 0: 1) */
  /* Called with the prompt's bytes once, then with each new token's bytes
   * (its vocabulary byte, or "<id> " without a vocabulary); a status other
   * than GCC_OK stops generation with it. */
  gcc_status (*emit)(void *user, const char *bytes, size_t n, gcc_diag *d);
  void *user;
  int no_kv_cache; /* 1: run the whole window for every token */
  /* When not NULL: which way the tokens were computed, one line written at
   * the end: "KV cache (one position per run)", with "for N tokens, then
   * the whole window for M (the context passed the block size T)" when the
   * run outgrew the block, or "the whole window per token" and why (the
   * prompt longer than T, --no-kv-cache, a model without a decoder form);
   * "no token drawn" when n_new is 0 */
  char *report;
  size_t report_cap;
  /* When not NULL: called with each new token's logits (V floats, before
   * temperature and top-k) just before it is drawn (tests, tools) */
  void (*on_logits)(void *user, const float *logits, int64_t V);
} gcc_generate_options;

#define GCC_GENERATE_STREAM 0x5a3d1e6b9c27f041ull

/* Samples o->n_new tokens from `model`. Errors:
 *   GCC_ERR_INVALID_ARGUMENT  NULL arguments, temperature not > 0, top_k < 0,
 *                             a prompt byte outside the model's vocabulary
 *                             (named with its position), a prompt given to a
 *                             model without a vocabulary;
 *   GCC_ERR_INVALID_GRAPH     no training spec naming input and prediction,
 *                             or shapes that are not a language model's
 *                             (the message says which);
 *   those of compiling and running the plan. */
gcc_status gcc_generate(const gcc_graph *model, const gcc_generate_options *o, gcc_diag *d);

/* The sampling step alone (for tests): from `logits` (V) with `temperature`
 * and `top_k` as above, and `u` uniform in [0, 1), the token whose
 * cumulative probability (in index order, float64) first exceeds u. */
int64_t gcc_generate_pick(const float *logits, int64_t V, double temperature, int64_t top_k,
                          double u, double *scratch);

#ifdef __cplusplus
}
#endif

#endif /* GCC_DEPLOY_GENERATE_H */
