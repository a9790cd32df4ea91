/*
 * flags.h - what gcc-train and gcc-run share on their command lines: the
 * exit codes, integer flag values with the message a user sees, and the
 * OpenMP wait policy of the process.
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

/* The CPU backend's oneDNN primitives run on libgomp, whose idle threads
 * by default spin for a while after each parallel region. On a machine
 * whose cores other processes also use, a spinning worker is descheduled
 * as a CPU hog and every parallel region then waits for its time slice
 * (measured here with a build beside the run: MNIST MLP training 4-20x
 * slower than with passive waiting). libgomp reads OMP_WAIT_POLICY once,
 * when it is loaded, before main; so when neither OMP_WAIT_POLICY nor
 * GOMP_SPINCOUNT is set, this sets OMP_WAIT_POLICY=passive and re-executes
 * the program (/proc/self/exe, same argv). Setting either variable keeps
 * the user's choice (OMP_WAIT_POLICY=active on a machine of one's own).
 * Returns only when nothing was re-executed (or exec failed). */
void gcc_cli_omp_wait_policy(char **argv);

#endif /* GCC_CLI_FLAGS_H */
