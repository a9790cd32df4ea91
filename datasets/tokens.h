/*
 * tokens.h - token data sets for language models, memory-mapped (no copy
 * of the file is made), and nanoGPT's get_batch over them.
 *
 * Two sources, as nanoGPT's data preparation writes them:
 *   text   one file of bytes (data/shakespeare/input.txt); the vocabulary
 *          is the file's sorted distinct byte values, a token id is a byte's
 *          index in it (shakespeare_char/prepare.py: chars =
 *          sorted(list(set(data))), stoi); the first int(n * 0.9) bytes are
 *          the training split, the rest the validation split, as
 *          prepare.py splits them;
 *   tokens a folder with train.bin and val.bin, each a headerless array of
 *          little-endian uint16 token ids (np.array(ids, dtype=np.uint16)
 *          .tofile: nanoGPT's openwebtext and shakespeare preparations and
 *          llm.c's tokenised data without its header); the vocabulary size
 *          is the model's (gcc_tokens_check_ids checks every id against it
 *          before training starts, and each batch's again as it is cut).
 *
 * Dimension letters: B windows of a batch, T tokens per window (the block
 * size, nanoGPT's block_size), V the vocabulary size.
 */
#ifndef GCC_DATASETS_TOKENS_H
#define GCC_DATASETS_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "graph/rng.h"
#include "graph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { GCC_SPLIT_TRAIN = 0, GCC_SPLIT_VAL = 1 };

typedef enum gcc_token_kind { GCC_TOKENS_TEXT = 1, GCC_TOKENS_BIN = 2 } gcc_token_kind;

/* An open token data set. The mappings are read-only and private; the
 * struct owns them (release with gcc_tokens_close). A zeroed struct is
 * closed. */
typedef struct gcc_tokens {
  gcc_token_kind kind;
  char path[2][4096]; /* the file of each split (text: the same file twice) */
  void *map[2];       /* the mappings (text: map[1] is NULL) */
  size_t map_size[2];
  /* text: the bytes of split k are text + first[k], n[k] of them; bin: the
   * ids are bin[k][0 .. n[k]) */
  const uint8_t *text;
  const uint16_t *bin[2];
  int64_t first[2], n[2];
  /* text: the vocabulary (sorted distinct bytes) and each byte's id */
  uint8_t vocab[256];
  int vocab_size; /* text: the distinct bytes; bin: 0 (the model's) */
  uint8_t id_of[256];
} gcc_tokens;

/* Opens the text file `path` (--dataset text): maps it, finds its
 * vocabulary and splits it 90/10. Errors, each message naming the file:
 *   GCC_ERR_INVALID_ARGUMENT  path or out is NULL, or the path is too long;
 *   GCC_ERR_IO                it cannot be opened, is not a regular file,
 *                             or cannot be mapped;
 *   GCC_ERR_PARSE             it is empty, or either split has fewer than 2
 *                             bytes (no window of one input and one target).
 * On failure *out is zeroed. */
gcc_status gcc_tokens_open_text(const char *path, gcc_tokens *out, gcc_diag *d);

/* Opens DIR/train.bin and DIR/val.bin (--dataset tokens) and maps them.
 * Errors, naming the file: GCC_ERR_INVALID_ARGUMENT (NULL arguments, a
 * path too long), GCC_ERR_IO (missing, not a regular file, unreadable,
 * cannot be mapped), GCC_ERR_PARSE (an odd byte count: not uint16 ids; fewer
 * than 2 tokens). On failure *out is zeroed. */
gcc_status gcc_tokens_open_bin(const char *dir, gcc_tokens *out, gcc_diag *d);

/* Checks that every id of both splits is below `vocab` (the model's
 * vocabulary size), so that a bad id deep in a file stops a run before its
 * first step rather than hours into it: one pass over each mapping (a
 * uint16 maximum per 64 Ki-token chunk: 2.1 GB in 0.14-0.25 s from the
 * page cache on a 2-core EPYC, so about 1 s for nanoGPT's 9 GB openwebtext
 * train.bin; the disk's read rate when the file is not cached). Text data sets pass (their ids come from their own
 * vocabulary). Errors: GCC_ERR_INVALID_ARGUMENT naming the file, the first
 * offending token's index in it, its id and the vocabulary size (the
 * message gcc_tokens_window gives), or vocab < 1. */
gcc_status gcc_tokens_check_ids(const gcc_tokens *t, int64_t vocab, gcc_diag *d);

/* Unmaps and zeroes *t; a zeroed or NULL t is accepted. */
void gcc_tokens_close(gcc_tokens *t);

/* Tokens in split `split` (GCC_SPLIT_TRAIN or GCC_SPLIT_VAL). */
int64_t gcc_tokens_count(const gcc_tokens *t, int split);

/* The offsets of one batch, as nanoGPT's get_batch draws them: B offsets,
 * each uniform in [0, n - T) of the split (torch.randint(len(data) -
 * block_size, (batch_size,))), from `rng` (PCG32; 64-bit offsets from two
 * draws, without modulo bias). Errors: GCC_ERR_INVALID_ARGUMENT when the
 * split has fewer than T + 1 tokens (the message names the file, the split
 * and T) or B, T < 1. */
gcc_status gcc_tokens_offsets(const gcc_tokens *t, int split, int64_t B, int64_t T, gcc_rng *rng,
                              int64_t *offsets, gcc_diag *d);

/* One batch: for window b at offsets[b], x[b, i] = data[o + i] and
 * y[b, i] = data[o + i + 1] for i in [0, T): inputs (B, T) and the shifted
 * targets (B, T), int64 token ids, row-major. With vocab > 0 every id must
 * be below it: GCC_ERR_INVALID_ARGUMENT names the file, the token's index
 * in it and the vocabulary size otherwise. */
gcc_status gcc_tokens_window(const gcc_tokens *t, int split, const int64_t *offsets, int64_t B,
                             int64_t T, int64_t vocab, int64_t *x, int64_t *y, gcc_diag *d);

/* Stream salts of the generator: training batches draw from
 * gcc_rng_seed(seed ^ GCC_TOKENS_TRAIN_SALT, step), evaluation batches from
 * gcc_rng_seed(seed ^ GCC_TOKENS_EVAL_SALT, evaluation * 2 + split): a
 * step's batch depends on (seed, step) only, so a resumed run sees the
 * batches the uninterrupted one did. */
#define GCC_TOKENS_TRAIN_SALT 0x7f4a7c159e3779b9ull
#define GCC_TOKENS_EVAL_SALT  0x94d049bb133111ebull

#ifdef __cplusplus
}
#endif

#endif /* GCC_DATASETS_TOKENS_H */
