/*
 * checkpoint.h - training checkpoints: everything a bit-exact resume needs.
 *
 * A checkpoint holds the session's whole persistent arena (parameters,
 * gradients, optimizer state such as SGD momentum buffers and Adam moments,
 * fp16 loss scaling's state: GradScaler's state_dict scale, _growth_tracker,
 * growth_factor, backoff_factor and growth_interval, and the steps applied,
 * in the session's layout: session.h), the optimizer steps taken, the position in the
 * data (the epoch to continue and the batches of it already taken: the
 * shuffled order of an epoch is a function of the seed and the epoch, see
 * datasets/dataloader.h, so this is the data order's RNG state and
 * position), and the model with its recipe (the training spec with the
 * command line's overrides). The model has no BatchNorm statistics to keep:
 * no op of this version has running state.
 *
 * File DIR/ckpt-SSSSSSSSSSSS.gcck (S: the step, zero-padded), little-endian:
 *
 *   0  8  magic "GCCK\r\n\x1a\n"
 *   8  4  format version (1)      12 4  reserved, 0
 *   16 8  optimizer steps taken   24 8  epoch to continue
 *   32 8  batches of that epoch already taken
 *   40 8  model bytes (M)         48 8  arena bytes (A)
 *   56 M  the graph.proto Model (its initializers hold the parameters)
 *   56+M A  the persistent arena
 *   end 32  SHA-256 of everything before it
 *
 * Writes go through graph/outfile.h (temporary file, fsync, rename, fsync of
 * the directory), so a reader sees a whole checkpoint or none; `keep` bounds
 * how many stay. A kill -9 at any moment leaves the newest complete
 * checkpoint loadable (stale temporaries are removed by the next write).
 */
#ifndef GCC_RUNTIME_CHECKPOINT_H
#define GCC_RUNTIME_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "graph/ir.h"
#include "graph/status.h"
#include "runtime/session.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GCC_CHECKPOINT_VERSION 1

typedef struct gcc_checkpoint {
  char *path;       /* the file it was read from */
  int64_t step;     /* optimizer steps taken */
  int64_t epoch;    /* the epoch to continue (0-based) */
  int64_t batch;    /* batches of that epoch already taken */
  gcc_graph *model; /* the model with the recipe it was trained with */
  uint8_t *arena;   /* the persistent arena */
  size_t arena_size;
} gcc_checkpoint;

/* Writes the checkpoint of session `s` (training `model`, whose training
 * spec is the recipe) at position (epoch, batch) into `dir` (created if
 * missing, one level), then removes all but the newest `keep` (>= 1)
 * checkpoints of that directory and stale temporaries of dead processes.
 * Errors: GCC_ERR_IO naming the file; those of the session (device). */
gcc_status gcc_checkpoint_write(const char *dir, gcc_session *s, const gcc_graph *model,
                                int64_t epoch, int64_t batch, int keep, gcc_diag *d);

/* Reads and verifies one checkpoint file (magic, version, sizes, SHA-256,
 * the position's fields >= 0 and consistent with each other, the model).
 * Errors: GCC_ERR_IO; GCC_ERR_PARSE naming the file and what is wrong
 * (truncated, checksum mismatch, another format version, a field out of
 * range). */
gcc_status gcc_checkpoint_read(const char *path, gcc_checkpoint *out, gcc_diag *d);

/* gcc_checkpoint_read of `size` bytes in memory; `path` names them in
 * messages and becomes out->path. */
gcc_status gcc_checkpoint_parse(const uint8_t *bytes, size_t size, const char *path,
                                gcc_checkpoint *out, gcc_diag *d);

/* `path` is a checkpoint file, or a directory whose newest valid checkpoint
 * is read; a newer one that does not verify is skipped with a line on
 * `note` (if not NULL) saying why. Errors: GCC_ERR_IO when the directory
 * holds no valid checkpoint (naming it), those of gcc_checkpoint_read. */
gcc_status gcc_checkpoint_find(const char *path, gcc_checkpoint *out, FILE *note, gcc_diag *d);

/* GCC_OK if checkpoint `c` belongs to `model` (the same nodes, ops and
 * parameters with their shapes) trained with the same recipe (batch size,
 * seed, optimizer and its hyperparameters, dataset, normalization; the
 * epoch count may differ) and the session's arena size; else
 * GCC_ERR_INVALID_ARGUMENT saying what differs, both values. */
gcc_status gcc_checkpoint_check(const gcc_checkpoint *c, const gcc_graph *model,
                                const gcc_session *s, gcc_diag *d);

/* GCC_OK if the position of checkpoint `c` is one of this run's: step,
 * epoch and batch >= 0, batch < batches_per_epoch (of the training set at
 * the checkpoint's batch size), step == epoch * batches_per_epoch + batch
 * (each step took one batch), and epoch <= `epochs` (the run's --epochs).
 * Errors: GCC_ERR_PARSE naming the file and the field for a corrupt
 * position (a crafted header with a valid checksum, or a training set of
 * another size); GCC_ERR_INVALID_ARGUMENT for a checkpoint past `epochs`
 * or a training set without a batch. */
gcc_status gcc_checkpoint_check_position(const gcc_checkpoint *c, int64_t batches_per_epoch,
                                         int64_t epochs, gcc_diag *d);

void gcc_checkpoint_free(gcc_checkpoint *c);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_CHECKPOINT_H */
