/*
 * tokens.c - memory-mapped token data sets and nanoGPT's get_batch
 * (tokens.h).
 */
#include "datasets/tokens.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/outfile.h"

static const char *split_name(int split) {
  return split == GCC_SPLIT_TRAIN ? "training" : "validation";
}

/* Maps `path` read-only; *size its bytes (a 0-byte file maps nothing). */
static gcc_status map_file(const char *path, void **map, size_t *size, gcc_diag *d) {
  *map = NULL;
  *size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return gcc_diag_set(d, GCC_ERR_IO, "%s: cannot open it: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return gcc_diag_set(d, GCC_ERR_IO, "%s: not a regular file", path);
  }
  gcc_input_note(path, fd); /* an input of the run: no output may replace it */
  if (st.st_size > 0) {
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      int err = errno;
      close(fd);
      return gcc_diag_set(d, GCC_ERR_IO, "%s: cannot map it: %s", path, strerror(err));
    }
    *map = m;
  }
  close(fd);
  *size = (size_t)st.st_size;
  return GCC_OK;
}

void gcc_tokens_close(gcc_tokens *t) {
  if (!t)
    return;
  for (int k = 0; k < 2; k++)
    if (t->map[k])
      munmap(t->map[k], t->map_size[k]);
  memset(t, 0, sizeof *t);
}

gcc_status gcc_tokens_open_text(const char *path, gcc_tokens *out, gcc_diag *d) {
  if (!path || !out)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "gcc_tokens_open_text: NULL argument");
  memset(out, 0, sizeof *out);
  if (strlen(path) >= sizeof out->path[0])
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%.200s...: path too long", path);
  GCC_TRY(map_file(path, &out->map[0], &out->map_size[0], d));
  out->kind = GCC_TOKENS_TEXT;
  snprintf(out->path[0], sizeof out->path[0], "%s", path);
  snprintf(out->path[1], sizeof out->path[1], "%s", path);
  out->text = out->map[0];
  int64_t n = (int64_t)out->map_size[0];
  /* prepare.py: train_data = data[:int(n*0.9)]; val_data = data[int(n*0.9):] */
  int64_t cut = (int64_t)((double)n * 0.9);
  out->first[0] = 0;
  out->n[0] = cut;
  out->first[1] = cut;
  out->n[1] = n - cut;
  if (n == 0 || out->n[0] < 2 || out->n[1] < 2) {
    gcc_status s = gcc_diag_set(d, GCC_ERR_PARSE,
                                "%s: %" PRId64 " bytes: too short for --dataset text (the first "
                                "90%% train and the last 10%% validate; each needs at least 2 "
                                "bytes, an input and its target)",
                                path, n);
    gcc_tokens_close(out);
    return s;
  }
  int seen[256] = {0};
  for (int64_t i = 0; i < n; i++)
    seen[out->text[i]] = 1;
  for (int b = 0; b < 256; b++)
    if (seen[b]) {
      out->id_of[b] = (uint8_t)out->vocab_size;
      out->vocab[out->vocab_size++] = (uint8_t)b;
    }
  return GCC_OK;
}

gcc_status gcc_tokens_open_bin(const char *dir, gcc_tokens *out, gcc_diag *d) {
  if (!dir || !out)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "gcc_tokens_open_bin: NULL argument");
  memset(out, 0, sizeof *out);
  static const char *names[2] = {"train.bin", "val.bin"};
  out->kind = GCC_TOKENS_BIN;
  for (int k = 0; k < 2; k++) {
    if (strlen(dir) + 16 >= sizeof out->path[k]) {
      gcc_tokens_close(out);
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%.200s...: path too long", dir);
    }
    snprintf(out->path[k], sizeof out->path[k], "%s/%s", dir, names[k]);
    gcc_status s = map_file(out->path[k], &out->map[k], &out->map_size[k], d);
    if (s == GCC_OK && out->map_size[k] % 2 != 0)
      s = gcc_diag_set(d, GCC_ERR_PARSE,
                       "%s: %zu bytes, an odd count: not an array of uint16 token ids "
                       "(--dataset tokens reads nanoGPT's train.bin/val.bin)",
                       out->path[k], out->map_size[k]);
    if (s == GCC_OK && out->map_size[k] < 4)
      s = gcc_diag_set(d, GCC_ERR_PARSE,
                       "%s: %zu tokens: the %s split needs at least 2 (an input and its "
                       "target)",
                       out->path[k], out->map_size[k] / 2, split_name(k));
    if (s != GCC_OK) {
      gcc_tokens_close(out);
      return s;
    }
    out->bin[k] = out->map[k];
    out->n[k] = (int64_t)(out->map_size[k] / 2);
  }
  return GCC_OK;
}

int64_t gcc_tokens_count(const gcc_tokens *t, int split) {
  return t->n[split];
}

gcc_status gcc_tokens_offsets(const gcc_tokens *t, int split, int64_t B, int64_t T, gcc_rng *rng,
                              int64_t *offsets, gcc_diag *d) {
  if (B < 1 || T < 1)
    return gcc_diag_set(
        d, GCC_ERR_INVALID_ARGUMENT,
        "gcc_tokens_offsets: batch %" PRId64 " and block size %" PRId64 " must be >= 1", B, T);
  int64_t n = t->n[split];
  if (n < T + 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: the %s split has %" PRId64 " tokens; a window of block size %" PRId64
                        " needs %" PRId64 " (--block-size)",
                        t->path[split], split_name(split), n, T, T + 1);
  uint64_t range = (uint64_t)(n - T);
  for (int64_t b = 0; b < B; b++) {
    if (range <= UINT32_MAX) {
      offsets[b] = gcc_rng_below(rng, (uint32_t)range);
      continue;
    }
    /* 64-bit range: rejection sampling over the next power of two */
    uint64_t mask = range - 1;
    for (int s = 1; s < 64; s <<= 1)
      mask |= mask >> s;
    uint64_t v;
    do
      v = (((uint64_t)gcc_rng_u32(rng) << 32) | gcc_rng_u32(rng)) & mask;
    while (v >= range);
    offsets[b] = (int64_t)v;
  }
  return GCC_OK;
}

static gcc_status bad_id(const gcc_tokens *t, int split, int64_t index, int64_t id, int64_t vocab,
                         gcc_diag *d) {
  return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                      "%s: the token at index %" PRId64 " of the file is id %" PRId64
                      ", but the model's vocabulary has %" PRId64 " tokens (0 to %" PRId64 ")",
                      t->path[split], index, id, vocab, vocab - 1);
}

gcc_status gcc_tokens_check_ids(const gcc_tokens *t, int64_t vocab, gcc_diag *d) {
  if (!t || vocab < 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gcc_tokens_check_ids: no token set, or a vocabulary of %" PRId64 " tokens",
                        vocab);
  if (t->kind != GCC_TOKENS_BIN || vocab > UINT16_MAX)
    return GCC_OK; /* text ids come from the file's own vocabulary; uint16 ids all fit */
  enum { CHUNK = 64 * 1024 };
  for (int split = 0; split < 2; split++) {
    const uint16_t *p = t->bin[split];
    const int64_t n = t->n[split];
    for (int64_t c = 0; c < n; c += CHUNK) {
      const int64_t e = n - c < CHUNK ? n : c + CHUNK;
      uint16_t mx = 0;
      for (int64_t i = c; i < e; i++) /* a branch-free maximum: vectorized */
        mx = p[i] > mx ? p[i] : mx;
      if (mx < vocab)
        continue;
      for (int64_t i = c; i < e; i++) /* the first offending id of the chunk */
        if (p[i] >= vocab)
          return bad_id(t, split, t->first[split] + i, p[i], vocab, d);
    }
  }
  return GCC_OK;
}

gcc_status gcc_tokens_window(const gcc_tokens *t, int split, const int64_t *offsets, int64_t B,
                             int64_t T, int64_t vocab, int64_t *x, int64_t *y, gcc_diag *d) {
  int64_t n = t->n[split];
  for (int64_t b = 0; b < B; b++) {
    int64_t o = offsets[b];
    if (o < 0 || o + T + 1 > n)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "%s: window at %" PRId64 " of %" PRId64 " tokens outside the %s split "
                          "of %" PRId64,
                          t->path[split], o, T + 1, split_name(split), n);
    int64_t *xb = x + b * T, *yb = y + b * T;
    if (t->kind == GCC_TOKENS_TEXT) {
      const uint8_t *p = t->text + t->first[split] + o;
      for (int64_t i = 0; i < T; i++) {
        xb[i] = t->id_of[p[i]];
        yb[i] = t->id_of[p[i + 1]];
      }
    } else {
      const uint16_t *p = t->bin[split] + o;
      for (int64_t i = 0; i < T; i++) {
        xb[i] = p[i];
        yb[i] = p[i + 1];
      }
    }
    if (vocab > 0)
      for (int64_t i = 0; i <= T; i++) {
        int64_t id = i < T ? xb[i] : yb[T - 1];
        if (id >= vocab)
          return bad_id(t, split, t->first[split] + o + i, id, vocab, d);
      }
  }
  return GCC_OK;
}
