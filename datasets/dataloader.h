/*
 * dataloader.h - mini-batches from a gcc_dataset: per-epoch shuffling,
 * normalisation to float, and a background thread that prepares the next
 * batch while the caller trains on the current one.
 *
 * The model is PyTorch's DataLoader(dataset, batch_size, shuffle, drop_last,
 * num_workers=1) over torchvision's ToTensor() + Normalize(mean, std), with
 * two batch buffers (the double buffering of pin_memory): while the caller
 * works on batch k the thread fills batch k+1.
 *
 * Every buffer is allocated by gcc_dataloader_create; producing batches never
 * allocates. The batch order depends only on (seed, epoch), never on the
 * history of the loader or on prefetch, so a run resumed at epoch e sees the
 * same batches as an uninterrupted one.
 *
 * Threading: a loader is driven by one caller thread at a time (its functions
 * are not reentrant); the background thread is private. All signals are
 * blocked in the background thread, so they are delivered to the caller's
 * threads.
 */
#ifndef GCC_RUNTIME_DATALOADER_H
#define GCC_RUNTIME_DATALOADER_H

#include <stdint.h>

#include "graph/status.h"
#include "datasets/dataset.h"
#include "runtime/profile.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GCC_DATALOADER_MAX_CHANNELS 4

typedef struct gcc_dataloader_options {
  int64_t batch_size; /* samples per batch, > 0 */
  int shuffle;        /* non-zero: a new permutation every epoch;
                         zero: file order */
  uint64_t seed;      /* the permutation of epoch e is Fisher-Yates driven by
                         gcc_rng_seed(&rng, seed, e) and gcc_rng_below:
                         deterministic on every platform */
  int drop_last;      /* non-zero: drop the last batch if it is partial;
                         zero: return it with fewer rows (PyTorch default) */
  float mean, std;    /* every pixel p becomes, in float32,
                         ((float)p / 255.0f - mean) / std; std > 0, both
                         finite (torchvision ToTensor then Normalize) */
  int n_channel_norm; /* 0: mean and std above apply to every channel;
                         otherwise mean and std are ignored, it must
                         equal the data set's channels, and
                         pixel p of channel c becomes
                         ((float)p / 255.0f - channel_mean[c]) /
                         channel_std[c] (Normalize with one value per
                         channel, as the CIFAR-10 tutorial) */
  float channel_mean[GCC_DATALOADER_MAX_CHANNELS];
  float channel_std[GCC_DATALOADER_MAX_CHANNELS];
  int prefetch;           /* non-zero: a background thread prepares the next
                         batch; zero: batches are made synchronously inside
                         gcc_dataloader_next (for tests and debugging).
                         Both give bit-identical batches. */
  gcc_profiler *profiler; /* non-NULL: every batch assembly (gather +
                             normalisation) is recorded as a "loader" event
                             on a track of its own called profile_name
                             (default "data loader"); the profiler must
                             outlive the loader */
  const char *profile_name;
  /* Augmentation of every sample (training loaders), as torchvision's
   * RandomCrop(size=(H, W), padding=crop_pad) then RandomHorizontalFlip():
   * the image padded by crop_pad pixels of value 0 on each side (padded
   * pixels normalise as pixel 0 does), an H x W window at offsets drawn
   * uniformly in [0, 2 * crop_pad], then mirrored left-right with
   * probability 1/2 when `flip`. Drawn from gcc_rng_seed(seed ^
   * GCC_AUGMENT_SALT, epoch * n + sample): the same for a seed whatever the
   * batch size, thread or prefetching. 0 and 0: none. */
  int crop_pad;
  int flip;
} gcc_dataloader_options;

#define GCC_AUGMENT_SALT 0x9e3779b97f4a7c15ull

/* One batch. images is rows x (channels * height * width) float32, row r
 * the normalised sample in the dataset's NCHW layout; labels[r] is its class
 * index (int64, as loss functions index with it). Both point into the
 * loader's buffers and stay valid until the next call of
 * gcc_dataloader_next, gcc_dataloader_start_epoch or gcc_dataloader_destroy
 * on the same loader; the caller must not write through them. */
typedef struct gcc_batch {
  const float *images;
  const int64_t *labels;
  int64_t rows;  /* batch_size, or fewer for the last batch of an epoch */
  int64_t index; /* 0-based index of the batch within its epoch */
} gcc_batch;

typedef struct gcc_dataloader gcc_dataloader;

/* Creates a loader over ds. The loader copies the gcc_dataset struct but not
 * its arrays: ds->images and ds->labels must stay alive and unchanged until
 * gcc_dataloader_destroy. Allocates two batch buffers of
 * min(batch_size, n) rows and the permutation, and (with prefetch) starts
 * the background thread, which waits for gcc_dataloader_start_epoch.
 *
 * On success returns GCC_OK and sets *out. On failure sets *out = NULL (if
 * out is not NULL), fills d (may be NULL) and returns:
 *   GCC_ERR_INVALID_ARGUMENT  ds, o or out is NULL; the data set is empty
 *                             (n <= 0), has a non-positive channels, height
 *                             or width, or NULL arrays; batch_size <= 0;
 *                             (without per-channel values) std <= 0 or
 *                             not finite, or mean not finite;
 *                             n_channel_norm not 0 and not the data set's
 *                             channels (or above
 *                             GCC_DATALOADER_MAX_CHANNELS), or a per-channel
 *                             mean/std that is not finite (std > 0);
 *   GCC_ERR_UNSUPPORTED       n >= 2^32 (the permutation draws with
 *                             gcc_rng_below, a 32-bit generator);
 *   GCC_ERR_OUT_OF_MEMORY     a buffer could not be allocated, its size
 *                             overflows, or the thread could not be
 *                             created. */
gcc_status gcc_dataloader_create(const gcc_dataset *ds, const gcc_dataloader_options *o,
                                 gcc_dataloader **out, gcc_diag *d);

/* Batches per epoch: ceil(n / batch_size), or floor(n / batch_size) with
 * drop_last (which can be 0 when n < batch_size). */
int64_t gcc_dataloader_num_batches(const gcc_dataloader *dl);

/* Begins epoch `epoch` (>= 0): computes its permutation and, with prefetch,
 * lets the thread start on batch 0. May be called at any time, including in
 * the middle of an epoch: the batch the thread is filling is finished and
 * discarded, and the previous epoch's batches are gone (pointers from an
 * earlier gcc_dataloader_next become invalid). Epochs need not be
 * consecutive; calling it twice with the same epoch restarts that epoch with
 * the same order.
 *
 * Returns GCC_OK, or GCC_ERR_INVALID_ARGUMENT (dl is NULL or epoch < 0; the
 * loader is left as it was). */
gcc_status gcc_dataloader_start_epoch(gcc_dataloader *dl, int64_t epoch, gcc_diag *d);

/* As gcc_dataloader_start_epoch, from batch `first_batch` (0 to the batch
 * count) of the epoch's order: the batches a resumed run has not taken yet
 * (runtime/checkpoint.h), without assembling those it has. */
gcc_status gcc_dataloader_start_epoch_at(gcc_dataloader *dl, int64_t epoch, int64_t first_batch,
                                         gcc_diag *d);

/* Hands out the next batch of the current epoch: on GCC_OK, *has_batch is 1
 * and *out is filled, or *has_batch is 0 and *out is zeroed when the epoch
 * has no more batches (every later call says the same, until the next
 * gcc_dataloader_start_epoch). Calling it returns the buffer of the previous
 * batch to the thread. Blocks (without spinning) until the batch is ready.
 *
 * Returns GCC_ERR_INVALID_ARGUMENT if an argument is NULL or no epoch has
 * been started. */
gcc_status gcc_dataloader_next(gcc_dataloader *dl, gcc_batch *out, int *has_batch, gcc_diag *d);

/* Stops and joins the background thread (finishing at most the one batch it
 * is filling) and frees the loader. Safe at any point, mid-epoch included.
 * NULL is accepted. */
void gcc_dataloader_destroy(gcc_dataloader *dl);

/* The whole dataset in file order, normalised exactly as batches are:
 * images gets n x (channels * height * width) float32, labels n int64
 * (both caller-allocated). For --dataset-on-device. */
void gcc_dataloader_materialize(const gcc_dataloader *dl, float *images, int64_t *labels);

/* The sample order of the epoch last started (n indices; the order batches
 * come in), valid until the next gcc_dataloader_start_epoch. */
const int64_t *gcc_dataloader_order(const gcc_dataloader *dl);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_DATALOADER_H */
