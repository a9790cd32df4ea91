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

/* The CPU backend's oneDNN primitives and pointwise kernels run on
 * libgomp, whose idle workers by default spin for a while (300,000 spins)
 * after each parallel region. On a machine whose cores other processes
 * also use, a spinning worker is descheduled as a CPU hog and every parallel
 * region then waits for its time slice (MNIST MLP training 4-20x slower
 * with a build beside it; with two busy loops beside it, 96 s against 20-25
 * s passive). Passive waiting (a futex wake-up per region) costs on an idle
 * machine instead: the README's MNIST MLP run took 13.6-14.9 s passive
 * against 7.4-9.1 s spinning on a quiet 2-core Xeon, and the char GPT's
 * step 110 ms against 88. A short spin, GOMP_SPINCOUNT=10000 (some tens of
 * microseconds: the gap between two kernels of a step), keeps most of the
 * idle machine's speed (8.7-10.1 s, 93.6 ms) and the busy machine's (22.5-
 * 25.1 s). libgomp reads these variables once, when it is loaded, before
 * main; so when neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set, this
 * sets GOMP_SPINCOUNT=GCC_CLI_SPINCOUNT and re-executes the program
 * (/proc/self/exe, same argv). Setting either variable keeps the user's
 * choice (OMP_WAIT_POLICY=active on a machine of one's own, passive on a
 * shared one). Returns only when nothing was re-executed (or exec failed). */
#define GCC_CLI_SPINCOUNT "10000"
void gcc_cli_omp_wait_policy(char **argv);

#endif /* GCC_CLI_FLAGS_H */
