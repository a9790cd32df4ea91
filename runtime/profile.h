/*
 * profile.h - the `gcc-train --profile FILE` tracer: timed events of a run
 * (every executed op or kernel, every copy, every training step and
 * evaluation batch, the data loader's batch assembly on its own thread and
 * the trainer's waits for a batch, plan compiles), written at the end as a
 * Chrome trace-event JSON file, plus a per-op time table.
 *
 * File format: the Trace Event Format of Chrome's about:tracing, which
 * Perfetto (ui.perfetto.dev) and chrome://tracing open:
 *   {"traceEvents":[ ... ], "displayTimeUnit":"ms", "otherData":{...}}
 * with one "M" (metadata) event naming the process and one per thread
 * ("main", "data loader (train)", ...), then one "X" (complete) event per
 * timed region: "name", "cat", "ph":"X", "ts" and "dur" in microseconds
 * (exact nanoseconds, three decimals, ts counted from gcc_profiler_create),
 * "pid", "tid", and "args". Categories (gcc_prof_cat_name):
 *   op       one executed node: name "<node> (<OpType>)"; args: op, plan
 *            ("train b64", "eval b1000"), inputs and outputs (shapes),
 *            bytes (inputs + outputs, the memory the kernel touches),
 *            flops (gcc_op_flops), step (optimizer steps before this run)
 *   copy     a host/device copy node (GCC_OPF_COPY): the same args
 *   step     one training step (gcc_session_train_step: bind + run of the
 *            training plan + loss check); args: step
 *   eval     one evaluation batch (gcc_session_eval_batch: bind + run +
 *            argmax count); args: batch (counted over the run)
 *   loader   the loader thread assembling batch k of an epoch (shuffled
 *            gather + normalisation to float); args: batch
 *   wait     the trainer waiting for (or, without a loader thread,
 *            assembling) the next batch; args: batch
 *   compile  one plan compile (passes, memory plan, binding)
 *   phase    one training epoch ("epoch"), one test-set pass ("evaluate")
 * Events of one thread nest properly (a step contains its ops); op events
 * of one thread never overlap.
 *
 * Storage: each thread appends fixed-size records (32 bytes) to its own
 * track, in chunks, without locks; names and args are interned once per
 * "site" (a plan's node, a loader, ...). Nothing is formatted while the run
 * is timed. At most GCC_PROF_MAX_EVENTS events are kept; later ones are
 * counted as dropped (the trace says how many, in otherData).
 *
 * Writing: the JSON is streamed through a 1 MiB stdio buffer into a
 * temporary file next to FILE, which is fsync'ed and renamed over FILE: a
 * reader sees the old file or the whole new trace, never a partial one.
 * What events of one site share (name, category, op, plan, shapes, FLOPs,
 * bytes) is rendered and escaped once per site; per event only the thread,
 * times and index are formatted (about 0.4 us of CPU per event). A DOM
 * library (jansson) would need a json_t per field of every event, hundreds
 * of bytes each, for a trace of hundreds of thousands of events; the tests
 * parse the output with jansson. Strings are escaped per RFC 8259; bytes
 * that are not UTF-8 become U+FFFD.
 *
 * Threading: gcc_profiler_track and gcc_profiler_site may be called from any
 * thread (they lock). A track is written by one thread at a time (the thread
 * that drives it). gcc_profiler_write, gcc_profiler_summary and
 * gcc_profiler_print_table must run when no thread records any more (after
 * gcc_train_run returned, loaders joined).
 */
#ifndef GCC_RUNTIME_PROFILE_H
#define GCC_RUNTIME_PROFILE_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "graph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 16 Mi events (512 MiB of records) at most; later events are dropped. */
#define GCC_PROF_MAX_EVENTS (16LL * 1024 * 1024)

typedef enum gcc_prof_cat {
  GCC_PROF_OP,
  GCC_PROF_COPY,
  GCC_PROF_STEP,
  GCC_PROF_EVAL,
  GCC_PROF_LOADER,
  GCC_PROF_WAIT,
  GCC_PROF_COMPILE,
  GCC_PROF_PHASE,
  GCC_PROF_CAT_COUNT
} gcc_prof_cat;

typedef struct gcc_profiler gcc_profiler;
typedef struct gcc_prof_track gcc_prof_track;

/* "op", "copy", "step", "eval", "loader", "wait", "compile", "phase" ("?"
 * when out of range): the "cat" field of the trace. */
const char *gcc_prof_cat_name(gcc_prof_cat c);

/* CLOCK_MONOTONIC in nanoseconds: the clock of every event. */
static inline int64_t gcc_prof_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Starts a profile that gcc_profiler_write will write to `path`. Checks now
 * that a temporary file can be created next to `path` (and removes it), so
 * that a bad path fails before any training. Errors: GCC_ERR_IO naming the
 * path and the reason (no such directory, permission); GCC_ERR_OUT_OF_MEMORY;
 * GCC_ERR_INVALID_ARGUMENT for a NULL or empty path, or a NULL out. */
gcc_status gcc_profiler_create(const char *path, gcc_profiler **out, gcc_diag *d);

/* Frees everything. Writes nothing: a profile that was not written leaves
 * no file behind. NULL is accepted. */
void gcc_profiler_destroy(gcc_profiler *p);

/* A new track (one "tid" of the trace) called `thread_name` ("main",
 * "data loader (train)"). Owned by the profiler. NULL when out of memory:
 * recording into a NULL track does nothing. */
gcc_prof_track *gcc_profiler_track(gcc_profiler *p, const char *thread_name);

/* Interns a site: the event name (the trace's "name"), its category, the op
 * type it aggregates under in the table ("Gemm"; NULL for non-op sites),
 * the plan label ("train b64"; NULL if none), a JSON object of extra args
 * (without the braces, e.g. "\"rows\":64"; NULL for none; the caller
 * formats it, this module copies it verbatim), and the FLOPs and bytes of
 * one execution (0 when unknown). Returns the site id (>= 0), or -1 when out
 * of memory (recording site -1 does nothing). */
int gcc_profiler_site(gcc_profiler *p, gcc_prof_cat cat, const char *name, const char *op,
                      const char *plan, const char *args_json, double flops, double bytes);

/* Records one event of `site` on track `t`, from t0 to t1 (gcc_prof_now
 * nanoseconds, t1 >= t0), with `index` in its args: "step" (optimizer steps
 * before it) for op, copy and step events, "batch" for eval, loader and wait
 * events, "index" otherwise. No-op for a NULL track or a negative site.
 * Never locks; allocates one chunk of events every 4096 events. */
void gcc_prof_record(gcc_prof_track *t, int site, int64_t t0, int64_t t1, int64_t index);

/* One row of the per-op table: all op/copy events of one op type in plans of
 * one mode ("train" or "eval", the first word of the plan label). */
typedef struct gcc_prof_row {
  char mode[16]; /* "train" or "eval" */
  char op[192];  /* op type (node name, with the library kernel that ran it, in
                        gcc_prof_summary.nodes) */
  int64_t calls;
  int64_t total_ns;
  double flops; /* summed over the calls; 0 when unknown */
} gcc_prof_row;

/* The summary of the events recorded so far. */
typedef struct gcc_prof_summary {
  gcc_prof_row *rows; /* sorted by mode ("train" first), then total_ns descending */
  int n_rows;
  gcc_prof_row *nodes; /* op/copy events of "train" plans per node, total_ns
                          descending: op holds the node name (truncated to 95
                          bytes), mode its op type (truncated to 15) */
  int n_nodes;
  int64_t count[GCC_PROF_CAT_COUNT];    /* events per category */
  int64_t total_ns[GCC_PROF_CAT_COUNT]; /* their summed durations */
  int64_t events, dropped;
} gcc_prof_summary;

/* Aggregates the events. Errors: GCC_ERR_OUT_OF_MEMORY. Free with
 * gcc_prof_summary_free. */
gcc_status gcc_profiler_summary(const gcc_profiler *p, gcc_prof_summary *s, gcc_diag *d);
void gcc_prof_summary_free(gcc_prof_summary *s);

/* Prints the per-op table (op type per mode: calls, total ms, mean us, % of
 * that mode's step time, GFLOP/s), then the ten slowest training-plan nodes,
 * then the loader, wait, evaluation and compile totals. Errors: GCC_ERR_IO
 * when `f` fails, GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_profiler_print_table(const gcc_profiler *p, FILE *f, gcc_diag *d);

/* Writes the trace to the path given at creation, atomically (temporary
 * file in the same directory, fsync, rename, fsync of the directory).
 * Errors: GCC_ERR_IO naming the path (the previous file, if any, is left
 * unchanged). */
gcc_status gcc_profiler_write(const gcc_profiler *p, gcc_diag *d);

/* The path given at creation. */
const char *gcc_profiler_path(const gcc_profiler *p);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_PROFILE_H */
