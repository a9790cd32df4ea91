/*
 * checkpoint.c - training checkpoints (checkpoint.h): write, keep the last
 * K, find the newest valid one, check it against the model and recipe.
 */
#include "runtime/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/loader.h"
#include "graph/outfile.h"
#include "graph/recipe.h"
#include "graph/util.h"

enum { HEADER = 56, TRAILER = 32 };
static const uint8_t kMagic[8] = {'G', 'C', 'C', 'K', '\r', '\n', 0x1a, '\n'};

static int sha256(const void *p, size_t n, uint8_t out[32]) {
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  unsigned len = 0;
  int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
           EVP_DigestUpdate(ctx, p, n) == 1 && EVP_DigestFinal_ex(ctx, out, &len) == 1 && len == 32;
  EVP_MD_CTX_free(ctx);
  return ok;
}

static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* 1 if `name` is ckpt-<12 digits>.gcck; *step receives the number */
static int is_checkpoint_name(const char *name, int64_t *step) {
  if (strlen(name) != 22 || strncmp(name, "ckpt-", 5) != 0 || strcmp(name + 17, ".gcck") != 0)
    return 0;
  int64_t v = 0;
  for (int i = 5; i < 17; i++) {
    if (name[i] < '0' || name[i] > '9')
      return 0;
    v = v * 10 + (name[i] - '0');
  }
  *step = v;
  return 1;
}

static int cmp_i64_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* The steps of the checkpoints in `dir`, newest first (malloc'ed). */
static int64_t *list_steps(const char *dir, int *n_out) {
  *n_out = 0;
  DIR *dh = opendir(dir);
  if (!dh)
    return NULL;
  int n = 0, cap = 16;
  int64_t *steps = malloc((size_t)cap * sizeof *steps);
  struct dirent *e;
  while (steps && (e = readdir(dh)) != NULL) {
    int64_t st;
    if (!is_checkpoint_name(e->d_name, &st))
      continue;
    if (n == cap) {
      int64_t *g = realloc(steps, (size_t)(cap *= 2) * sizeof *steps);
      if (!g) {
        free(steps);
        steps = NULL;
        break;
      }
      steps = g;
    }
    steps[n++] = st;
  }
  closedir(dh);
  if (steps)
    qsort(steps, (size_t)n, sizeof *steps, cmp_i64_desc);
  *n_out = steps ? n : 0;
  return steps;
}

static void checkpoint_path(char *buf, size_t n, const char *dir, int64_t step) {
  snprintf(buf, n, "%s/ckpt-%012" PRId64 ".gcck", dir, step);
}

/* Removes temporaries ckpt-*.gcck.tmp.PID.XXXXXX whose process is gone. */
static void remove_stale(const char *dir) {
  DIR *dh = opendir(dir);
  if (!dh)
    return;
  struct dirent *e;
  while ((e = readdir(dh)) != NULL) {
    const char *n = e->d_name, *t = strstr(n, ".gcck.tmp.");
    if (strncmp(n, "ckpt-", 5) != 0 || !t)
      continue;
    char *end;
    long pid = strtol(t + 10, &end, 10);
    if (pid <= 0 || *end != '.' || pid == (long)getpid())
      continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
      continue;
    char full[4096];
    snprintf(full, sizeof full, "%s/%s", dir, n);
    unlink(full);
  }
  closedir(dh);
}

gcc_status gcc_checkpoint_write(const char *dir, gcc_session *s, const gcc_graph *model,
                                int64_t epoch, int64_t batch, int keep, gcc_diag *d) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return gcc_diag_set(d, GCC_ERR_IO, "--checkpoint-dir %s: cannot create it: %s", dir,
                        strerror(errno));
  const void *arena;
  size_t arena_size;
  GCC_TRY(gcc_session_arena(s, &arena, &arena_size, d));
  gcc_graph *trained; /* serialized and freed before the session runs on */
  GCC_TRY(gcc_session_export_view(s, &trained, d));
  (void)model;
  uint8_t *mbytes;
  size_t msize;
  gcc_status st = gcc_model_serialize(trained, &mbytes, &msize, d);
  gcc_graph_free(trained);
  if (st != GCC_OK)
    return st;
  uint8_t head[HEADER] = {0}, sum[32];
  memcpy(head, kMagic, 8);
  head[8] = GCC_CHECKPOINT_VERSION;
  put_u64(head + 16, (uint64_t)gcc_session_steps(s));
  put_u64(head + 24, (uint64_t)epoch);
  put_u64(head + 32, (uint64_t)batch);
  put_u64(head + 40, (uint64_t)msize);
  put_u64(head + 48, (uint64_t)arena_size);
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  unsigned len = 0;
  int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
           EVP_DigestUpdate(ctx, head, HEADER) == 1 && EVP_DigestUpdate(ctx, mbytes, msize) == 1 &&
           EVP_DigestUpdate(ctx, arena, arena_size) == 1 &&
           EVP_DigestFinal_ex(ctx, sum, &len) == 1 && len == 32;
  EVP_MD_CTX_free(ctx);
  if (!ok) {
    free(mbytes);
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "checkpoint: SHA-256 (OpenSSL EVP) failed");
  }
  char path[4096];
  checkpoint_path(path, sizeof path, dir, gcc_session_steps(s));
  remove_stale(dir);
  gcc_outfile o;
  st = gcc_outfile_open(&o, path, "checkpoint", d);
  if (st == GCC_OK) {
    gcc_outfile_write(&o, head, HEADER);
    gcc_outfile_write(&o, mbytes, msize);
    gcc_outfile_write(&o, arena, arena_size);
    gcc_outfile_write(&o, sum, 32);
    st = gcc_outfile_commit(&o, d);
  }
  free(mbytes);
  if (st != GCC_OK)
    return st;
  /* keep the newest `keep` */
  int n = 0;
  int64_t *steps = list_steps(dir, &n);
  for (int i = keep > 0 ? keep : 1; i < n; i++) {
    checkpoint_path(path, sizeof path, dir, steps[i]);
    unlink(path);
  }
  free(steps);
  return GCC_OK;
}

void gcc_checkpoint_free(gcc_checkpoint *c) {
  if (!c)
    return;
  free(c->path);
  gcc_graph_free(c->model);
  free(c->arena);
  memset(c, 0, sizeof *c);
}

gcc_status gcc_checkpoint_read(const char *path, gcc_checkpoint *out, gcc_diag *d) {
  memset(out, 0, sizeof *out);
  uint8_t *b;
  size_t size;
  GCC_TRY(gcc_read_file(path, 0, &b, &size, d)); /* regular files only */
  gcc_status s = gcc_checkpoint_parse(b, size, path, out, d);
  free(b);
  return s;
}

gcc_status gcc_checkpoint_parse(const uint8_t *b, size_t size, const char *path,
                                gcc_checkpoint *out, gcc_diag *d) {
  memset(out, 0, sizeof *out);
  if (size < HEADER + TRAILER)
    return gcc_diag_set(d, GCC_ERR_PARSE, "checkpoint %s: truncated (%zu bytes)", path, size);
  gcc_status s = GCC_OK;
  uint8_t sum[32];
  uint64_t msize = get_u64(b + 40), asize = get_u64(b + 48);
  if (memcmp(b, kMagic, 8) != 0)
    s = gcc_diag_set(d, GCC_ERR_PARSE, "checkpoint %s: not a gcc-train checkpoint (bad magic)",
                     path);
  else if (b[8] != GCC_CHECKPOINT_VERSION || b[9] || b[10] || b[11])
    s = gcc_diag_set(d, GCC_ERR_PARSE,
                     "checkpoint %s: format version %u; this gcc-train reads version %d", path,
                     (unsigned)b[8] | (unsigned)b[9] << 8, GCC_CHECKPOINT_VERSION);
  else if (msize > size || asize > size || HEADER + msize + asize + TRAILER != size)
    s = gcc_diag_set(d, GCC_ERR_PARSE,
                     "checkpoint %s: truncated or padded: %zu bytes, the header says %" PRIu64,
                     path, size, (uint64_t)HEADER + msize + asize + TRAILER);
  else if (!sha256(b, size - TRAILER, sum) || memcmp(sum, b + size - TRAILER, 32) != 0)
    s = gcc_diag_set(d, GCC_ERR_PARSE, "checkpoint %s: SHA-256 mismatch (corrupt)", path);
  if (s == GCC_OK) {
    out->step = (int64_t)get_u64(b + 16);
    out->epoch = (int64_t)get_u64(b + 24);
    out->batch = (int64_t)get_u64(b + 32);
    /* a checksum proves integrity, not validity: a position is never
     * negative, and each step took one batch (the rest needs the data:
     * gcc_checkpoint_check_position) */
    const struct {
      const char *name;
      int64_t v;
    } field[] = {{"step", out->step}, {"epoch", out->epoch}, {"batch", out->batch}};
    for (int i = 0; i < 3 && s == GCC_OK; i++)
      if (field[i].v < 0)
        s = gcc_diag_set(d, GCC_ERR_PARSE,
                         "checkpoint %s: corrupt: its %s field is %" PRId64 " (must be >= 0)", path,
                         field[i].name, field[i].v);
    if (s == GCC_OK && (out->batch > out->step || out->epoch > out->step - out->batch))
      s = gcc_diag_set(d, GCC_ERR_PARSE,
                       "checkpoint %s: corrupt: step %" PRId64 " cannot be epoch %" PRId64
                       ", batch %" PRId64 " (every epoch before it took at least one step, and "
                       "every batch one)",
                       path, out->step, out->epoch, out->batch);
    if (s == GCC_OK)
      s = gcc_model_parse(b + HEADER, (size_t)msize, path, &out->model, d);
  }
  if (s == GCC_OK) {
    out->arena = malloc(asize ? (size_t)asize : 1);
    out->path = gcc_strdup(path);
    if (!out->arena || !out->path)
      s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "checkpoint %s: out of memory", path);
    else {
      memcpy(out->arena, b + HEADER + msize, (size_t)asize);
      out->arena_size = (size_t)asize;
    }
  }
  if (s != GCC_OK)
    gcc_checkpoint_free(out);
  return s;
}

gcc_status gcc_checkpoint_find(const char *path, gcc_checkpoint *out, FILE *note, gcc_diag *d) {
  struct stat st;
  if (stat(path, &st) != 0)
    return gcc_diag_set(d, GCC_ERR_IO, "--resume %s: %s", path, strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return gcc_checkpoint_read(path, out, d);
  int n = 0;
  int64_t *steps = list_steps(path, &n);
  for (int i = 0; i < n; i++) {
    char file[4096];
    checkpoint_path(file, sizeof file, path, steps[i]);
    gcc_diag why = {0};
    if (gcc_checkpoint_read(file, out, &why) == GCC_OK) {
      free(steps);
      return GCC_OK;
    }
    if (note)
      fprintf(note, "gcc-train: skipping %s\n", why.msg);
  }
  free(steps);
  return gcc_diag_set(d, GCC_ERR_IO, "--resume %s: no valid checkpoint (ckpt-*.gcck) in it", path);
}

#define DIFF(what, fmt, a, b)                                                                      \
  return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,                                                 \
                      "--resume %s: the checkpoint's " what " is " fmt ", this run's is " fmt,     \
                      c->path, a, b)

static const char *or_none(const char *s) {
  return s ? s : "(none)";
}

static int same_str(const char *a, const char *b) {
  return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

gcc_status gcc_checkpoint_check(const gcc_checkpoint *c, const gcc_graph *model,
                                const gcc_session *s, gcc_diag *d) {
  const gcc_graph *g = c->model;
  const gcc_training *a = &g->training, *b = &model->training;
  if (g->n_nodes != model->n_nodes)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--resume %s: another model: %d nodes there, %d here", c->path, g->n_nodes,
                        model->n_nodes);
  for (int i = 0; i < g->n_nodes; i++)
    if (strcmp(g->nodes[i].name, model->nodes[i].name) != 0 || g->nodes[i].op != model->nodes[i].op)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "--resume %s: another model: node %d is '%s' there, '%s' here", c->path,
                          i, g->nodes[i].name, model->nodes[i].name);
  for (int v = 0; v < model->n_values; v++) {
    const gcc_value *mv = &model->values[v];
    if (mv->kind != GCC_VALUE_PARAM)
      continue;
    int u = gcc_graph_find(g, mv->name);
    char s1[128], s2[128];
    if (u < 0 || g->values[u].kind != GCC_VALUE_PARAM)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "--resume %s: another model: it has no parameter '%s'", c->path,
                          mv->name);
    if (!gcc_shape_equal(&g->values[u].shape, &mv->shape))
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "--resume %s: parameter '%s' is %s there, %s here", c->path, mv->name,
                          gcc_shape_str(&g->values[u].shape, s1, sizeof s1),
                          gcc_shape_str(&mv->shape, s2, sizeof s2));
  }
  if (a->batch_size != b->batch_size)
    DIFF("batch size", "%" PRId64, a->batch_size, b->batch_size);
  if (a->seed != b->seed)
    DIFF("seed", "%" PRIu64, a->seed, b->seed);
  if (!same_str(a->dataset, b->dataset))
    DIFF("dataset", "%s", or_none(a->dataset), or_none(b->dataset));
  if (a->opt.kind != b->opt.kind || a->opt.decoupled != b->opt.decoupled)
    DIFF("optimizer", "%s", gcc_optimizer_name(&a->opt), gcc_optimizer_name(&b->opt));
  /* the learning rate of the epoch resumed at comes from the schedule */
  if (a->sched.kind != b->sched.kind || a->sched.step_size != b->sched.step_size ||
      memcmp(&a->sched.gamma, &b->sched.gamma, sizeof(float)) != 0 ||
      memcmp(&a->sched.eta_min, &b->sched.eta_min, sizeof(float)) != 0 ||
      a->sched.warmup != b->sched.warmup || gcc_lr_schedule_t_max(a) != gcc_lr_schedule_t_max(b)) {
    char x[64], y[64];
    DIFF("lr schedule", "%s", gcc_lr_schedule_str(a, x, sizeof x),
         gcc_lr_schedule_str(b, y, sizeof y));
  }
  const struct {
    const char *name;
    float x, y;
  } hp[] = {
      {"lr", a->opt.lr, b->opt.lr},
      {"momentum", a->opt.momentum, b->opt.momentum},
      {"dampening", a->opt.dampening, b->opt.dampening},
      {"weight_decay", a->opt.weight_decay, b->opt.weight_decay},
      {"nesterov", (float)a->opt.nesterov, (float)b->opt.nesterov},
      {"beta1", a->opt.beta1, b->opt.beta1},
      {"beta2", a->opt.beta2, b->opt.beta2},
      {"eps", a->opt.eps, b->opt.eps},
      {"decay_matrices_only", (float)a->opt.decay_matrices_only, (float)b->opt.decay_matrices_only},
      {"clip_grad_norm", a->opt.clip_grad_norm, b->opt.clip_grad_norm}};
  for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++)
    if (memcmp(&hp[i].x, &hp[i].y, sizeof(float)) != 0)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "--resume %s: the checkpoint's optimizer %s is %.9g, this run's is "
                          "%.9g",
                          c->path, hp[i].name, (double)hp[i].x, (double)hp[i].y);
  if (a->n_mean != b->n_mean || memcmp(a->mean, b->mean, sizeof a->mean) != 0 ||
      memcmp(a->std, b->std, sizeof a->std) != 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--resume %s: the checkpoint's normalization (mean, std) differs", c->path);
  if (c->arena_size != gcc_session_persistent_bytes(s))
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--resume %s: the checkpoint's arena has %zu bytes, this session's %zu "
                        "(the optimizer, and fp16 loss scaling (--precision, --loss-scale), must "
                        "be the checkpoint's)",
                        c->path, c->arena_size, gcc_session_persistent_bytes(s));
  return gcc_session_check_loss_scale(s, c->arena, c->arena_size, c->path, d);
}

gcc_status gcc_checkpoint_check_position(const gcc_checkpoint *c, int64_t batches_per_epoch,
                                         int64_t epochs, gcc_diag *d) {
  const char *p = c->path ? c->path : "(checkpoint)";
  if (c->step < 0 || c->epoch < 0 || c->batch < 0)
    return gcc_diag_set(d, GCC_ERR_PARSE,
                        "checkpoint %s: corrupt: step %" PRId64 ", epoch %" PRId64
                        ", batch %" PRId64 " (must be >= 0)",
                        p, c->step, c->epoch, c->batch);
  if (batches_per_epoch < 1)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--resume %s: this run's training set has no batch", p);
  if (c->batch >= batches_per_epoch)
    return gcc_diag_set(d, GCC_ERR_PARSE,
                        "checkpoint %s: corrupt: its batch field is %" PRId64
                        ", but an epoch of this training set has %" PRId64 " batches",
                        p, c->batch, batches_per_epoch);
  /* step == epoch * batches_per_epoch + batch, without overflow */
  if (c->epoch > (c->step - c->batch) / batches_per_epoch ||
      c->epoch * batches_per_epoch + c->batch != c->step)
    return gcc_diag_set(d, GCC_ERR_PARSE,
                        "checkpoint %s: corrupt: its step field is %" PRId64 ", but epoch %" PRId64
                        ", batch %" PRId64 " at %" PRId64 " batches per epoch is step %.0f (or "
                        "another training set than the checkpoint's)",
                        p, c->step, c->epoch, c->batch, batches_per_epoch,
                        (double)c->epoch * (double)batches_per_epoch + (double)c->batch);
  if (c->epoch > epochs)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "--resume %s: the checkpoint has finished %" PRId64
                        " epochs, more than this run's %" PRId64 " (--epochs)",
                        p, c->epoch, epochs);
  return GCC_OK;
}
