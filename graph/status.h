/*
 * status.h - status codes and diagnostics shared by every stage of gcc-train.
 *
 * Every fallible public function returns a gcc_status and, when it fails,
 * fills a caller-owned gcc_diag with a message that names the thing at fault
 * (file, node, value, field or flag). Nothing in the library prints or exits:
 * the caller decides what to do with the message.
 */
#ifndef GCC_GRAPH_STATUS_H
#define GCC_GRAPH_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gcc_status {
  GCC_OK = 0,
  GCC_ERR_INVALID_ARGUMENT, /* a caller passed a bad value (flag, option, API argument) */
  GCC_ERR_IO,               /* a file could not be opened, read or written */
  GCC_ERR_PARSE,            /* bytes are not in the expected format (protobuf, IDX, ...) */
  GCC_ERR_INVALID_GRAPH,    /* the model is malformed: unknown op, arity, names, cycle */
  GCC_ERR_SHAPE,            /* shape or dtype inference found incompatible operands */
  GCC_ERR_UNSUPPORTED,      /* valid but not supported (dtype, attribute value, device) */
  GCC_ERR_OUT_OF_MEMORY,    /* an allocation failed */
  GCC_ERR_DEVICE,           /* a device is missing or failed (no GPU, driver error) */
  GCC_ERR_NUMERIC,          /* a NaN or Inf appeared where it must not */
  GCC_ERR_INTERRUPTED,      /* the user interrupted a run (SIGINT) */
  GCC_ERR_INTERNAL,         /* a bug in gcc-train: an invariant did not hold */
  GCC_STATUS_COUNT
} gcc_status;

/* A diagnostic: the message of the most recent failure. Zero-initialise it. */
typedef struct gcc_diag {
  gcc_status status;
  char msg[2048];
} gcc_diag;

/* Sets d->status = s and d->msg from a printf format; returns s so that the
 * idiom `return gcc_diag_set(d, GCC_ERR_IO, "...", ...)` works. A NULL d is
 * allowed (the message is dropped). Messages longer than the buffer are
 * truncated, never overflowed. */
gcc_status gcc_diag_set(gcc_diag *d, gcc_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to the message already in d (used to add context such
 * as the file name as an error travels up); returns d->status. */
gcc_status gcc_diag_prefix(gcc_diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A short stable name for a status ("ok", "io", "invalid-graph", ...). */
const char *gcc_status_name(gcc_status s);

/* Propagates a non-OK status to the caller. */
#define GCC_TRY(expr)                                                                              \
  do {                                                                                             \
    gcc_status gcc_try_s_ = (expr);                                                                \
    if (gcc_try_s_ != GCC_OK)                                                                      \
      return gcc_try_s_;                                                                           \
  } while (0)

#ifdef __cplusplus
}
#endif

#endif /* GCC_GRAPH_STATUS_H */
