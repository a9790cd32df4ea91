/*
 * flags.c - integer flag values of the command lines and the OpenMP wait
 * policy (flags.h).
 */
#include "cli/flags.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "graph/util.h"

int gcc_flag_i64(const char *prog, const char *flag, const char *s, int64_t lo, int64_t *out) {
  if (gcc_parse_i64(s, lo, INT64_MAX, out))
    return 1;
  fprintf(stderr, "%s: %s '%s': expected an integer >= %" PRId64 "\n", prog, flag, s, lo);
  return 0;
}

void gcc_cli_omp_wait_policy(char **argv) {
  if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT"))
    return;
  if (setenv("GOMP_SPINCOUNT", GCC_CLI_SPINCOUNT, 1) != 0)
    return;
  execv("/proc/self/exe", argv);
  /* exec failed (no /proc): run on with libgomp's default policy */
}
