/*
 * status.c - diagnostics (status.h): setting and prefixing messages, and
 * the stable names of statuses.
 */
#include "graph/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

gcc_status gcc_diag_set(gcc_diag *d, gcc_status s, const char *fmt, ...) {
  if (d == NULL)
    return s;
  d->status = s;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->msg, sizeof d->msg, fmt, ap);
  va_end(ap);
  return s;
}

gcc_status gcc_diag_prefix(gcc_diag *d, const char *fmt, ...) {
  if (d == NULL)
    return GCC_ERR_INTERNAL;
  char prefix[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  char old[sizeof d->msg];
  memcpy(old, d->msg, sizeof old);
  snprintf(d->msg, sizeof d->msg, "%s: %s", prefix, old);
  return d->status;
}

const char *gcc_status_name(gcc_status s) {
  static const char *const names[] = {
      "ok",          "invalid-argument", "io",     "parse",   "invalid-graph", "shape",
      "unsupported", "out-of-memory",    "device", "numeric", "interrupted",   "internal",
  };
  _Static_assert(sizeof names / sizeof names[0] == GCC_STATUS_COUNT,
                 "status name table out of date");
  if ((unsigned)s >= GCC_STATUS_COUNT)
    return "unknown";
  return names[s];
}
