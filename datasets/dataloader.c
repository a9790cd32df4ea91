/*
 * dataloader.c - batching, shuffling, normalisation and the prefetch thread.
 *
 * Two batch slots. A slot is EMPTY (free for the thread), FILLING (the
 * thread writes it without holding the lock), READY (filled, waiting for
 * the caller) or HELD (handed to the caller by gcc_dataloader_next, until
 * the next call). Batch k always goes to slot k % 2, so while the caller
 * holds batch k the thread fills batch k + 1, and batch k + 2 waits until the
 * caller gives batch k back by asking for k + 1.
 *
 * Every change of slot state, of the epoch and of the permutation happens
 * under `mu`, which orders the thread's writes to a slot before the caller's
 * reads of it. The permutation is rewritten only while the thread is idle
 * (start_epoch waits for `busy` to drop), so the thread reads it without the
 * lock. `generation` counts epoch starts (and the final stop); it is atomic
 * only so that the thread can poll it while filling a large batch and give
 * up early when the batch has become useless.
 */
#include "datasets/dataloader.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/rng.h"

enum slot_state { SLOT_EMPTY, SLOT_FILLING, SLOT_READY, SLOT_HELD };

enum { CANCEL_CHECK_ROWS = 256 }; /* rows filled between polls of generation */

struct gcc_dataloader {
  gcc_dataset ds; /* borrowed arrays */
  gcc_dataloader_options opt;
  int64_t sample_elems; /* channels * height * width */
  int64_t cap_rows;     /* rows per slot: min(batch_size, n) */
  int64_t num_batches;
  /* normalised value of every pixel value, per channel */
  float lut[GCC_DATALOADER_MAX_CHANNELS][256];

  int64_t *perm; /* sample order of the current epoch */
  int64_t epoch; /* the current epoch (augmentation draws) */
  float *images[2];
  int64_t *labels[2];
  int64_t rows[2], index[2];
  int state[2];

  int64_t next_fill; /* next batch the thread fills (prefetch only) */
  int64_t next_take; /* next batch gcc_dataloader_next hands out */
  int held;          /* slot the caller holds, or -1 */
  int epoch_active;  /* an epoch has been started and not cancelled */
  int busy;          /* the thread is filling a slot outside the lock */
  int quit;
  atomic_uint_fast64_t generation;

  gcc_prof_track *track; /* profiling: batch assembly events, or NULL */
  int site;

  int has_thread;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* the thread waits: a slot freed, epoch, quit */
  pthread_cond_t done_cv; /* the caller waits: a slot ready, thread idle */
};

/* Sample i normalised into dst through a random crop of the zero-padded
 * image and a random horizontal flip (gcc_dataloader_options). */
static void augment(const gcc_dataloader *dl, int64_t i, const uint8_t *src, float *dst) {
  int64_t H = dl->ds.height, W = dl->ds.width, pad = dl->opt.crop_pad;
  gcc_rng r;
  gcc_rng_seed(&r, dl->opt.seed ^ GCC_AUGMENT_SALT, (uint64_t)(dl->epoch * dl->ds.n + i));
  int64_t dy = pad > 0 ? gcc_rng_below(&r, (uint32_t)(2 * pad + 1)) : pad;
  int64_t dx = pad > 0 ? gcc_rng_below(&r, (uint32_t)(2 * pad + 1)) : pad;
  int flip = dl->opt.flip && gcc_rng_uniform(&r) < 0.5f;
  int per_channel = dl->opt.n_channel_norm > 0;
  for (int64_t c = 0; c < dl->ds.channels; c++) {
    const float *lut = dl->lut[per_channel ? c : 0];
    const uint8_t *plane = src + c * H * W;
    float *out = dst + c * H * W;
    for (int64_t y = 0; y < H; y++) {
      int64_t sy = y + dy - pad; /* row of the source image */
      for (int64_t x = 0; x < W; x++) {
        int64_t cx = flip ? W - 1 - x : x; /* column of the crop */
        int64_t sx = cx + dx - pad;
        int in = sy >= 0 && sy < H && sx >= 0 && sx < W;
        out[y * W + x] = lut[in ? plane[sy * W + sx] : 0];
      }
    }
  }
}

/* Fills slot s with batch k of the current permutation. Returns 0 if the
 * generation moved on while filling (the batch is then incomplete). */
static int fill_slot(gcc_dataloader *dl, int s, int64_t k, uint64_t gen) {
  int64_t bs = dl->opt.batch_size;
  int64_t first = k * bs;
  int64_t rows = dl->ds.n - first < bs ? dl->ds.n - first : bs;
  int64_t elems = dl->sample_elems;
  int64_t plane = dl->ds.height * dl->ds.width;
  int64_t channels = dl->ds.channels;
  int per_channel = dl->opt.n_channel_norm > 0;
  float *img = dl->images[s];
  int64_t *lab = dl->labels[s];
  for (int64_t r = 0; r < rows; r++) {
    if (r % CANCEL_CHECK_ROWS == CANCEL_CHECK_ROWS - 1 &&
        atomic_load_explicit(&dl->generation, memory_order_relaxed) != gen)
      return 0;
    int64_t i = dl->perm[first + r];
    const uint8_t *src = dl->ds.images + i * elems;
    float *dst = img + r * elems;
    if (dl->opt.crop_pad > 0 || dl->opt.flip) {
      augment(dl, i, src, dst);
    } else {
      for (int64_t c = 0; c < channels; c++) {
        const float *lut = dl->lut[per_channel ? c : 0];
        for (int64_t j = c * plane; j < (c + 1) * plane; j++)
          dst[j] = lut[src[j]];
      }
    }
    lab[r] = dl->ds.labels[i];
  }
  dl->rows[s] = rows;
  dl->index[s] = k;
  return 1;
}

static void *producer_main(void *arg) {
  gcc_dataloader *dl = arg;
  pthread_mutex_lock(&dl->mu);
  for (;;) {
    while (!dl->quit && !(dl->epoch_active && dl->next_fill < dl->num_batches &&
                          dl->state[dl->next_fill % 2] == SLOT_EMPTY))
      pthread_cond_wait(&dl->work_cv, &dl->mu);
    if (dl->quit)
      break;
    int64_t k = dl->next_fill;
    int s = (int)(k % 2);
    uint64_t gen = atomic_load(&dl->generation);
    dl->state[s] = SLOT_FILLING;
    dl->busy = 1;
    pthread_mutex_unlock(&dl->mu);

    int64_t t0 = dl->track ? gcc_prof_now() : 0;
    int complete = fill_slot(dl, s, k, gen);
    if (dl->track)
      gcc_prof_record(dl->track, dl->site, t0, gcc_prof_now(), k);

    pthread_mutex_lock(&dl->mu);
    dl->busy = 0;
    if (complete && gen == atomic_load(&dl->generation)) {
      dl->state[s] = SLOT_READY;
      dl->next_fill = k + 1;
    } else {
      dl->state[s] = SLOT_EMPTY;
    }
    pthread_cond_broadcast(&dl->done_cv);
  }
  pthread_mutex_unlock(&dl->mu);
  return NULL;
}

static void free_buffers(gcc_dataloader *dl) {
  free(dl->perm);
  for (int s = 0; s < 2; s++) {
    free(dl->images[s]);
    free(dl->labels[s]);
  }
  free(dl);
}

/* Floats per sample and rows per slot; 0 if a slot's size in bytes would
 * not fit in size_t (or its element count in int64). Every product is
 * checked before it is formed. Dimensions are positive. */
static int buffer_sizes(const gcc_dataset *ds, int64_t batch_size, uint64_t *elems,
                        uint64_t *cap_rows) {
  const uint64_t max =
      (uint64_t)SIZE_MAX < (uint64_t)INT64_MAX ? (uint64_t)SIZE_MAX : (uint64_t)INT64_MAX;
  uint64_t e = (uint64_t)ds->channels;
  if (e > max / (uint64_t)ds->height)
    return 0;
  e *= (uint64_t)ds->height;
  if (e > max / (uint64_t)ds->width)
    return 0;
  e *= (uint64_t)ds->width;
  uint64_t rows = (uint64_t)(batch_size < ds->n ? batch_size : ds->n);
  if (e > max / sizeof(float) / rows)
    return 0;
  *elems = e;
  *cap_rows = rows;
  return 1;
}

gcc_status gcc_dataloader_create(const gcc_dataset *ds, const gcc_dataloader_options *o,
                                 gcc_dataloader **out, gcc_diag *d) {
  if (out != NULL)
    *out = NULL;
  if (ds == NULL || o == NULL || out == NULL)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gcc_dataloader_create: dataset, options and out "
                        "must not be NULL");
  if (ds->n <= 0 || ds->channels <= 0 || ds->height <= 0 || ds->width <= 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gcc_dataloader_create: the dataset must be "
                        "non-empty with positive dimensions (n=%lld, "
                        "channels=%lld, height=%lld, width=%lld)",
                        (long long)ds->n, (long long)ds->channels, (long long)ds->height,
                        (long long)ds->width);
  if (ds->images == NULL || ds->labels == NULL)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gcc_dataloader_create: the dataset has no images "
                        "or labels");
  if (o->batch_size <= 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gcc_dataloader_create: batch_size must be > 0, "
                        "got %lld",
                        (long long)o->batch_size);
  if (o->n_channel_norm == 0 && (!(o->std > 0.0f) || !isfinite(o->std) || !isfinite(o->mean)))
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gcc_dataloader_create: normalisation needs a finite "
                        "mean and a finite std > 0, got mean=%g std=%g",
                        (double)o->mean, (double)o->std);
  if (o->n_channel_norm != 0 &&
      (o->n_channel_norm != ds->channels || o->n_channel_norm > GCC_DATALOADER_MAX_CHANNELS))
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gcc_dataloader_create: %d per-channel mean/std values for "
                        "images of %lld channels (at most %d)",
                        o->n_channel_norm, (long long)ds->channels, GCC_DATALOADER_MAX_CHANNELS);
  for (int c = 0; c < o->n_channel_norm; c++)
    if (!(o->channel_std[c] > 0.0f) || !isfinite(o->channel_std[c]) ||
        !isfinite(o->channel_mean[c]))
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "gcc_dataloader_create: channel %d: normalisation needs a "
                          "finite mean and a finite std > 0, got mean=%g std=%g",
                          c, (double)o->channel_mean[c], (double)o->channel_std[c]);
  if ((uint64_t)ds->n > UINT32_MAX)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "gcc_dataloader_create: %lld samples: shuffling "
                        "supports at most 2^32 - 1",
                        (long long)ds->n);

  uint64_t elems, cap_rows;
  if (!buffer_sizes(ds, o->batch_size, &elems, &cap_rows))
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY,
                        "gcc_dataloader_create: batch buffers of %lld rows x "
                        "%lld x %lld x %lld floats overflow the address "
                        "space",
                        (long long)o->batch_size, (long long)ds->channels, (long long)ds->height,
                        (long long)ds->width);

  gcc_dataloader *dl = calloc(1, sizeof *dl);
  if (dl == NULL)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "gcc_dataloader_create: out of memory");
  dl->ds = *ds;
  dl->opt = *o;
  dl->sample_elems = (int64_t)elems;
  dl->cap_rows = (int64_t)cap_rows;
  dl->num_batches =
      o->drop_last ? ds->n / o->batch_size : (ds->n + o->batch_size - 1) / o->batch_size;
  for (int c = 0; c < (o->n_channel_norm > 0 ? o->n_channel_norm : 1); c++) {
    float mean = o->n_channel_norm > 0 ? o->channel_mean[c] : o->mean;
    float sd = o->n_channel_norm > 0 ? o->channel_std[c] : o->std;
    for (int p = 0; p < 256; p++)
      dl->lut[c][p] = ((float)p / 255.0f - mean) / sd;
  }
  dl->held = -1;
  atomic_init(&dl->generation, 0);
  if (o->profiler) { /* no track (out of memory): this loader is not profiled */
    char args[96];
    snprintf(args, sizeof args, "\"batch_size\":%lld,\"sample_floats\":%llu",
             (long long)o->batch_size, (unsigned long long)elems);
    dl->site = gcc_profiler_site(o->profiler, GCC_PROF_LOADER, "batch assembly", NULL, NULL, args,
                                 0, (double)(cap_rows * elems * (1 + sizeof(float))));
    if (dl->site >= 0)
      dl->track =
          gcc_profiler_track(o->profiler, o->profile_name ? o->profile_name : "data loader");
  }

  dl->perm = malloc((size_t)ds->n * sizeof *dl->perm);
  for (int s = 0; s < 2; s++) {
    dl->images[s] = malloc((size_t)(cap_rows * elems) * sizeof(float));
    dl->labels[s] = malloc((size_t)cap_rows * sizeof(int64_t));
  }
  if (dl->perm == NULL || dl->images[0] == NULL || dl->images[1] == NULL || dl->labels[0] == NULL ||
      dl->labels[1] == NULL) {
    free_buffers(dl);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY,
                        "gcc_dataloader_create: cannot allocate two batches "
                        "of %llu x %llu floats",
                        (unsigned long long)cap_rows, (unsigned long long)elems);
  }

  if (o->prefetch) {
    int err = pthread_mutex_init(&dl->mu, NULL);
    if (err == 0) {
      err = pthread_cond_init(&dl->work_cv, NULL);
      if (err == 0) {
        err = pthread_cond_init(&dl->done_cv, NULL);
        if (err == 0) {
          /* The thread inherits the mask: block everything so that signals
           * (SIGINT for an interrupted run) reach the caller's threads. */
          sigset_t all, old;
          sigfillset(&all);
          pthread_sigmask(SIG_SETMASK, &all, &old);
          err = pthread_create(&dl->thread, NULL, producer_main, dl);
          pthread_sigmask(SIG_SETMASK, &old, NULL);
          if (err == 0) {
            dl->has_thread = 1;
            *out = dl;
            return GCC_OK;
          }
          pthread_cond_destroy(&dl->done_cv);
        }
        pthread_cond_destroy(&dl->work_cv);
      }
      pthread_mutex_destroy(&dl->mu);
    }
    free_buffers(dl);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY,
                        "gcc_dataloader_create: cannot start the prefetch "
                        "thread: %s",
                        strerror(err));
  }
  *out = dl;
  return GCC_OK;
}

int64_t gcc_dataloader_num_batches(const gcc_dataloader *dl) {
  return dl == NULL ? 0 : dl->num_batches;
}

/* Identity, then (with shuffle) Fisher-Yates from the back: position i swaps
 * with a uniform j in [0, i]. */
static void make_permutation(gcc_dataloader *dl, int64_t epoch) {
  int64_t n = dl->ds.n;
  dl->epoch = epoch;
  int64_t *perm = dl->perm;
  for (int64_t i = 0; i < n; i++)
    perm[i] = i;
  if (!dl->opt.shuffle)
    return;
  gcc_rng rng;
  gcc_rng_seed(&rng, dl->opt.seed, (uint64_t)epoch);
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = gcc_rng_below(&rng, (uint32_t)(i + 1));
    int64_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

gcc_status gcc_dataloader_start_epoch(gcc_dataloader *dl, int64_t epoch, gcc_diag *d) {
  return gcc_dataloader_start_epoch_at(dl, epoch, 0, d);
}

gcc_status gcc_dataloader_start_epoch_at(gcc_dataloader *dl, int64_t epoch, int64_t first_batch,
                                         gcc_diag *d) {
  if (dl != NULL && (first_batch < 0 || first_batch > dl->num_batches))
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gcc_dataloader_start_epoch_at: batch %lld outside [0, %lld]",
                        (long long)first_batch, (long long)dl->num_batches);
  if (dl == NULL)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "gcc_dataloader_start_epoch: loader is NULL");
  if (epoch < 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gcc_dataloader_start_epoch: epoch must be >= 0, "
                        "got %lld",
                        (long long)epoch);
  if (!dl->has_thread) {
    make_permutation(dl, epoch);
    dl->next_take = first_batch;
    dl->held = -1;
    dl->epoch_active = 1;
    return GCC_OK;
  }
  pthread_mutex_lock(&dl->mu);
  /* Stop the old epoch: no new batch may start, the one being filled is
   * abandoned (the thread polls generation) and we wait until it has let
   * go of the permutation and its slot. */
  dl->epoch_active = 0;
  atomic_fetch_add(&dl->generation, 1);
  while (dl->busy)
    pthread_cond_wait(&dl->done_cv, &dl->mu);
  make_permutation(dl, epoch);
  dl->state[0] = dl->state[1] = SLOT_EMPTY;
  dl->held = -1;
  dl->next_fill = first_batch;
  dl->next_take = first_batch;
  dl->epoch_active = 1;
  pthread_cond_broadcast(&dl->work_cv);
  pthread_mutex_unlock(&dl->mu);
  return GCC_OK;
}

gcc_status gcc_dataloader_next(gcc_dataloader *dl, gcc_batch *out, int *has_batch, gcc_diag *d) {
  if (has_batch != NULL)
    *has_batch = 0;
  if (out != NULL)
    memset(out, 0, sizeof *out);
  if (dl == NULL || out == NULL || has_batch == NULL)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gcc_dataloader_next: loader, out and has_batch "
                        "must not be NULL");
  if (!dl->has_thread) {
    if (!dl->epoch_active)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "gcc_dataloader_next: no epoch started (call "
                          "gcc_dataloader_start_epoch first)");
    if (dl->next_take >= dl->num_batches)
      return GCC_OK;
    int64_t k = dl->next_take++;
    int s = (int)(k % 2);
    int64_t t0 = dl->track ? gcc_prof_now() : 0;
    fill_slot(dl, s, k, 0); /* generation never moves without a thread */
    if (dl->track)
      gcc_prof_record(dl->track, dl->site, t0, gcc_prof_now(), k);
    out->images = dl->images[s];
    out->labels = dl->labels[s];
    out->rows = dl->rows[s];
    out->index = dl->index[s];
    *has_batch = 1;
    return GCC_OK;
  }

  pthread_mutex_lock(&dl->mu);
  if (!dl->epoch_active) {
    pthread_mutex_unlock(&dl->mu);
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gcc_dataloader_next: no epoch started (call "
                        "gcc_dataloader_start_epoch first)");
  }
  if (dl->held >= 0) { /* the caller is done with the previous batch */
    dl->state[dl->held] = SLOT_EMPTY;
    dl->held = -1;
    pthread_cond_signal(&dl->work_cv);
  }
  if (dl->next_take >= dl->num_batches) {
    pthread_mutex_unlock(&dl->mu);
    return GCC_OK;
  }
  int s = (int)(dl->next_take % 2);
  while (dl->state[s] != SLOT_READY)
    pthread_cond_wait(&dl->done_cv, &dl->mu);
  dl->state[s] = SLOT_HELD;
  dl->held = s;
  dl->next_take++;
  out->images = dl->images[s];
  out->labels = dl->labels[s];
  out->rows = dl->rows[s];
  out->index = dl->index[s];
  pthread_mutex_unlock(&dl->mu);
  *has_batch = 1;
  return GCC_OK;
}

void gcc_dataloader_destroy(gcc_dataloader *dl) {
  if (dl == NULL)
    return;
  if (dl->has_thread) {
    pthread_mutex_lock(&dl->mu);
    dl->quit = 1;
    atomic_fetch_add(&dl->generation, 1);
    pthread_cond_broadcast(&dl->work_cv);
    pthread_mutex_unlock(&dl->mu);
    pthread_join(dl->thread, NULL);
    pthread_cond_destroy(&dl->done_cv);
    pthread_cond_destroy(&dl->work_cv);
    pthread_mutex_destroy(&dl->mu);
  }
  free_buffers(dl);
}

void gcc_dataloader_materialize(const gcc_dataloader *dl, float *images, int64_t *labels) {
  int64_t elems = dl->sample_elems, plane = dl->ds.height * dl->ds.width;
  int per_channel = dl->opt.n_channel_norm > 0;
  for (int64_t i = 0; i < dl->ds.n; i++) { /* as fill_slot */
    const uint8_t *src = dl->ds.images + i * elems;
    float *dst = images + i * elems;
    for (int64_t c = 0; c < dl->ds.channels; c++) {
      const float *lut = dl->lut[per_channel ? c : 0];
      for (int64_t j = c * plane; j < (c + 1) * plane; j++)
        dst[j] = lut[src[j]];
    }
    labels[i] = dl->ds.labels[i];
  }
}

const int64_t *gcc_dataloader_order(const gcc_dataloader *dl) {
  return dl->perm;
}
