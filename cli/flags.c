/*
 * flags.c - integer flag values of the command lines (flags.h).
 */
#include "cli/flags.h"

#include <inttypes.h>
#include <stdio.h>

#include "graph/util.h"

int gcc_flag_i64(const char *prog, const char *flag, const char *s, int64_t lo, int64_t *out) {
  if (gcc_parse_i64(s, lo, INT64_MAX, out))
    return 1;
  fprintf(stderr, "%s: %s '%s': expected an integer >= %" PRId64 "\n", prog, flag, s, lo);
  return 0;
}
