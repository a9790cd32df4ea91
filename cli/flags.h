/*
 * flags.h - what gcc-train and gcc-run share on their command lines: the
 * exit codes, and integer flag values with the message a user sees.
 */
#ifndef GCC_CLI_FLAGS_H
#define GCC_CLI_FLAGS_H

#include <stdint.h>

/* Exit status of both programs (EXIT_MODEL: gcc-train's invalid model, and
 * gcc-run's invalid bundle). */
enum {
  EXIT_RUN = 1,    /* run-time failure: data, numerics, I/O */
  EXIT_USAGE = 2,  /* bad command line */
  EXIT_MODEL = 3,  /* invalid model (gcc-train) or bundle (gcc-run) */
  EXIT_DEVICE = 4, /* the requested device is unusable */
  EXIT_INTERRUPTED = 130,
};

/* The value of integer flag `flag` ("--epochs") in `s`, >= lo, into *out;
 * else prints "PROG: FLAG 'S': expected an integer >= LO" on stderr and
 * returns 0. */
int gcc_flag_i64(const char *prog, const char *flag, const char *s, int64_t lo, int64_t *out);

#endif /* GCC_CLI_FLAGS_H */
