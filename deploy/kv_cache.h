/*
 * kv_cache.h - the decoder form of a causal language model for sampling
 * (deploy/generate.h): one new position per run, the keys and values of the
 * earlier positions read from a cache instead of recomputed (a KV cache, as
 * Hugging Face's static cache and llm.c's inference: the work per token is
 * one row through every layer and one query row against the cache).
 *
 * The rewrite of the logits graph (batch 1, window T):
 *   - the input ids (1, T) become (1, 1); a constant position table
 *     arange(T) gathered by the model (nanoGPT's torch.arange(t) into wpe)
 *     becomes the input GCC_KV_POS_INPUT, int64 (1), the new position;
 *   - the token dim (entry 1 of a Reshape's target shape of rank >= 3, when
 *     it is T) becomes 1;
 *   - every causal Attention (Q, K, V) [1, H, T, D] (after the attention
 *     pass fused the model's chain) reads K' = Concat(cache_k, K) and
 *     V' = Concat(cache_v, V) along the position axis, caches [1, H, T - 1, D]
 *     (inputs "<node>.kv_cache.k" / ".v"), with the additive mask input
 *     GCC_KV_MASK_INPUT [1, 1, 1, T]: 0 on the cached positions 0 .. p - 1
 *     and on the new one (the last slot), -Inf on the unused slots p ..
 *     T - 2; K and V (the new position's, [1, H, 1, D]) become outputs for
 *     the caller to store at slot p.
 * Nothing else in the graph may mix positions: the caller checks the
 * decoder's logits against the full window's once before relying on it
 * (generate.c) and falls back to the window when they differ.
 */
#ifndef GCC_DEPLOY_KV_CACHE_H
#define GCC_DEPLOY_KV_CACHE_H

#include <stdint.h>

#include "graph/ir.h"
#include "graph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GCC_KV_POS_INPUT  "gen.position"
#define GCC_KV_MASK_INPUT "gen.kv_mask"
#define GCC_KV_MAX_LAYERS 256

typedef struct gcc_kv_layer {
  char k_cache[256], v_cache[256]; /* input names, [1, H, T - 1, D] float32 */
  char k_new[256], v_new[256];     /* output names, [1, H, 1, D] float32 */
  int64_t heads, dk, dv;           /* H, D of K, D of V */
} gcc_kv_layer;

typedef struct gcc_kv_decoder {
  gcc_graph *g; /* owned (but its parameters' data: logits_g's, borrowed): inputs ids
                   (1, 1), GCC_KV_POS_INPUT, GCC_KV_MASK_INPUT, the caches; outputs the
                   logits (1, 1, V) then every layer's k_new, v_new */
  int n_layers;
  gcc_kv_layer layer[GCC_KV_MAX_LAYERS];
} gcc_kv_decoder;

/* Builds the decoder form of `logits_g` (the model pruned to its logits,
 * one input: int64 ids (B, T); batch not yet bound) for window T.
 * GCC_ERR_UNSUPPORTED with the reason when the model is not of that form
 * (no causal Attention, no constant position table, a shape that does not
 * follow): the caller samples with the full window then. Other errors:
 * out of memory. The decoder's graph reads the parameters' data of
 * `logits_g` in place (gcc_graph_clone_borrowing_params): logits_g, or the
 * graph it borrows them from, must outlive it. */
gcc_status gcc_kv_decoder_build(const gcc_graph *logits_g, int64_t T, gcc_kv_decoder *out,
                                gcc_diag *d);

void gcc_kv_decoder_free(gcc_kv_decoder *k);

#ifdef __cplusplus
}
#endif

#endif /* GCC_DEPLOY_KV_CACHE_H */
