/*
 * outfile.h - output files that never destroy what their path names.
 *
 * Every file gcc-train and gcc-run write (models, predictions, bundles,
 * traces, reports, kernel dumps) goes through here:
 *
 *  - A symbolic link is followed to its target (as `sed -i
 *    --follow-symlinks`): the target is replaced, the link stays a link.
 *  - A regular file (or a new one) is written atomically: a temporary file
 *    in the target's directory, fsync, rename over the target, fsync of the
 *    directory. A reader sees the old file or the whole new one. An existing
 *    file keeps its permission bits and, where the process may set them, its
 *    owner and group; a new file gets 0666 less the umask.
 *  - A character device or FIFO (/dev/null, /dev/stdout, a named pipe) is
 *    opened and written directly: it is never replaced by a regular file.
 *  - A directory is an error.
 *
 * Temporary files are named `TARGET.tmp.PID.XXXXXX`. While one exists its
 * name is registered, so that gcc_outfile_cleanup_signal_safe() (from a
 * signal handler) can remove it; gcc_outfile_remove_stale() removes those a
 * killed process of ours left next to a target.
 *
 * Errors are GCC_ERR_IO with a message naming `what` (a flag such as
 * "--output") and the path.
 */
#ifndef GCC_GRAPH_OUTFILE_H
#define GCC_GRAPH_OUTFILE_H

#include <stddef.h>
#include <stdio.h>

#include "graph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gcc_outfile {
  char *what;   /* for messages: the flag, or the path */
  char *target; /* the path after following symbolic links */
  char *tmp;    /* the temporary file, or NULL when the target is written directly */
  FILE *f;      /* open for writing (buffered) */
  int err;      /* the first errno of a failed write, 0 if none */
  int keep_mode, keep_owner;
  unsigned mode;
  long uid, gid;
} gcc_outfile;

/* Checks, before any work, that `path` can be written as gcc_outfile_open
 * would write it: not a directory, inside an existing directory where a file
 * can be created (a temporary is created and removed), or an existing
 * character device or FIFO open for writing. Errors: GCC_ERR_IO naming
 * `what` and the path (no such directory, not a directory, permission
 * denied, read-only file system, a directory, a symbolic link loop). */
gcc_status gcc_outfile_check(const char *path, const char *what, gcc_diag *d);

/* Opens `path` for writing as described above. On success *o must be
 * finished with gcc_outfile_commit or gcc_outfile_abort. Errors: those of
 * gcc_outfile_check, GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_outfile_open(gcc_outfile *o, const char *path, const char *what, gcc_diag *d);

/* Appends n bytes (buffered). A failure is remembered and reported by
 * gcc_outfile_commit. */
void gcc_outfile_write(gcc_outfile *o, const void *bytes, size_t n);

/* Flushes, fsyncs and (for a temporary) applies the old file's mode and
 * owner, renames it over the target and fsyncs the directory. On any error
 * the temporary is removed and the target is unchanged: GCC_ERR_IO naming
 * what failed ("write failed: No space left on device (the file was not
 * changed)"). *o is released either way. */
gcc_status gcc_outfile_commit(gcc_outfile *o, gcc_diag *d);

/* Staging, so that a run's outputs appear together or not at all (a
 * failed run writes nothing): after gcc_outfiles_stage_begin(), a
 * gcc_outfile_commit of a temporary file flushes, fsyncs and keeps it
 * instead of renaming it; gcc_outfiles_stage_end(1, d) then renames every
 * kept temporary over its target (GCC_ERR_IO naming the first that fails;
 * those after it are removed), and gcc_outfiles_stage_end(0, d) removes
 * them all, every target unchanged. Devices and FIFOs are written directly
 * as always. Either ends the staging. Not thread-safe: one thread writes a
 * run's outputs. */
void gcc_outfiles_stage_begin(void);
gcc_status gcc_outfiles_stage_end(int commit, gcc_diag *d);

/* Closes and removes the temporary; the target is unchanged. */
void gcc_outfile_abort(gcc_outfile *o);

/* Writes `size` bytes to `path` (open, write, commit). */
gcc_status gcc_outfile_write_all(const char *path, const char *what, const void *bytes, size_t size,
                                 gcc_diag *d);

/* 1 if paths a and b name the same file: the same inode when both exist,
 * else the same directory entry after following links (a/./x, a/../a/x and a
 * link to x are all x). */
int gcc_outfile_same(const char *a, const char *b);

/* A file a program reads or writes, named by its flag (for messages). */
typedef struct gcc_named_path {
  const char *flag; /* "--output", "the model", ... */
  const char *path; /* NULL: not given (skipped) */
} gcc_named_path;

/* The start-up check of a program's outputs, before any work: no two
 * outputs name the same regular (or new) file, no output names one of the
 * `inputs` (devices and FIFOs such as /dev/null may repeat), and each output
 * passes gcc_outfile_check. Stale temporaries of each output are removed
 * (gcc_outfile_remove_stale). Errors: GCC_ERR_INVALID_ARGUMENT naming both
 * flags for a collision; those of gcc_outfile_check. */
gcc_status gcc_outfiles_check(const gcc_named_path *outputs, int n_outputs,
                              const gcc_named_path *inputs, int n_inputs, gcc_diag *d);

/* The files a run reads, by identity (device and inode), so that no output
 * replaces one that is only known once the inputs are read (ONNX external
 * data, the files of a data set, a checkpoint found in a folder). Off by
 * default: a program calls gcc_inputs_track(1) first; then every reader of
 * this project (graph/util.h gcc_read_file, the ONNX importer's external
 * data, datasets/) notes the regular files it opens with gcc_input_note.
 * gcc_inputs_track(0) stops and forgets them. Thread-safe. */
void gcc_inputs_track(int on);

/* Notes the regular file at `path` (fd >= 0: its open descriptor, whose
 * identity is used) as read by this run; a no-op while not tracking, and
 * for devices and FIFOs. */
void gcc_input_note(const char *path, int fd);

/* GCC_OK unless an output that exists as a regular file (after following
 * links) is one of the files noted as read: then GCC_ERR_INVALID_ARGUMENT
 * naming the flag, the output and the input. Call it once the inputs are
 * read and before any work whose result the outputs hold. */
gcc_status gcc_outfiles_check_inputs(const gcc_named_path *outputs, int n_outputs, gcc_diag *d);

/* From a signal handler: unlinks every temporary file still open (only
 * async-signal-safe calls). */
void gcc_outfile_cleanup_signal_safe(void);

/* Removes the temporaries `TARGET.tmp.PID.*` next to path's target whose
 * process PID no longer runs (left by a killed run). Returns how many. */
int gcc_outfile_remove_stale(const char *path);

#ifdef __cplusplus
}
#endif

#endif /* GCC_GRAPH_OUTFILE_H */
