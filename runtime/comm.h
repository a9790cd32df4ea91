/*
 * comm.h - the communicator of data-parallel training: what one rank of
 * `mpirun -np N gcc-train ...` needs from the others. A table of functions
 * with three implementations behind it:
 *
 *   runtime/comm_mpi.c       gcc_comm_create: MPI (OpenMPI) between
 *                            processes when launched under mpirun, a
 *                            single-process communicator (world size 1,
 *                            every collective a no-op) when not;
 *   runtime/cuda/comm_nccl.c gcc_comm_nccl_create: NCCL for the all-reduce of
 *                            device buffers (on a CUDA stream), the MPI
 *                            communicator underneath for the rest (the NCCL
 *                            unique id travels by MPI broadcast).
 *
 * The semantics are MPI's (MPI_Bcast, MPI_Allreduce with MPI_SUM): every
 * rank calls every collective in the same order with the same counts;
 * after an all-reduce every rank holds the same bits (OpenMPI's and NCCL's
 * reduction trees give every rank the same result). A failing rank calls
 * abort(), which prints its message and brings every rank down
 * (MPI_Abort): no rank waits forever in a collective of a rank that died.
 *
 * Buffers: `host` functions take host memory; allreduce_f32 takes memory
 * of the device the communicator was made for (host memory for MPI, device
 * memory for NCCL) and, for NCCL, a cudaStream_t (`stream`, NULL: the
 * legacy default stream) on which the reduction is ordered; MPI ignores
 * `stream` and returns when the sum is in `buf`.
 *
 * Errors: GCC_ERR_DEVICE naming the MPI/NCCL/CUDA call and its error
 * string; GCC_ERR_INVALID_ARGUMENT for a count that does not fit the
 * library's int.
 */
#ifndef GCC_RUNTIME_COMM_H
#define GCC_RUNTIME_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "graph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gcc_comm gcc_comm;

struct gcc_comm {
  void *self;
  const char *name; /* "single", "mpi", "nccl": for messages and --dump-placement */
  int rank;         /* 0 .. size - 1 */
  int size;         /* world size (>= 1) */
  int local_rank;   /* rank among the ranks of this node (OMPI_COMM_WORLD_LOCAL_RANK) */
  int local_size;   /* ranks on this node */
  /* Statistics of allreduce_f32 (the gradient buckets): calls, float32
   * bytes summed, and wall seconds inside the calls (for NCCL: the time to
   * enqueue them). */
  int64_t allreduce_calls, allreduce_bytes;
  double allreduce_seconds;
  /* `bytes` of host memory from rank `root` to every rank. */
  gcc_status (*broadcast)(gcc_comm *c, void *buf, size_t bytes, int root, gcc_diag *d);
  /* In place: buf[i] = sum over ranks r of weight_r * buf_r[i], float32, n
   * elements (see the top of this file for the device and the stream): each
   * rank's gradient weighted by its share of the global batch (weight 1: a
   * plain sum). MPI multiplies in place then MPI_Allreduce(MPI_SUM); NCCL
   * reduces with ncclRedOpCreatePreMulSum(weight). */
  gcc_status (*allreduce_f32)(gcc_comm *c, float *buf, int64_t n, float weight, void *stream,
                              gcc_diag *d);
  /* In place, float64 in host memory: metrics (evaluation counts and loss
   * sums, checksums), reduced exactly. */
  gcc_status (*allreduce_f64)(gcc_comm *c, double *buf, int64_t n, gcc_diag *d);
  /* Waits for every rank. */
  gcc_status (*barrier)(gcc_comm *c, gcc_diag *d);
  /* Prints "gcc-train: rank R/N: MESSAGE" on stderr and ends every rank
   * with exit status `code` (MPI_Abort); returns only for a world of 1. */
  void (*abort)(gcc_comm *c, int code, const char *msg);
  /* Releases the communicator (MPI_Finalize for the MPI one, after a
   * barrier). */
  void (*destroy)(gcc_comm *c);
};

/* The process's communicator: MPI when the process was started by
 * mpirun/mpiexec (OMPI_COMM_WORLD_SIZE or PMIX_RANK in the environment),
 * MPI_Init_thread(MPI_THREAD_FUNNELED) then MPI_COMM_WORLD; otherwise the
 * single-process communicator, without initialising MPI. rank, size and
 * local_rank come from MPI (local rank: OMPI_COMM_WORLD_LOCAL_RANK, or the
 * rank within MPI_COMM_TYPE_SHARED). Errors: GCC_ERR_DEVICE when MPI_Init
 * fails. */
gcc_status gcc_comm_create(gcc_comm **out, gcc_diag *d);

/* 1 when the process was started by an MPI launcher (see gcc_comm_create). */
int gcc_comm_launched_by_mpi(void);

/* The weight of this rank's gradients in an all-reduce: shard_rows /
 * global_rows for a mean loss (`mean`), 1 for a sum; 0 for a rank without
 * rows (shard_rows 0). */
float gcc_comm_weight(int mean, int64_t shard_rows, int64_t global_rows);

/* Contiguous shares of a global batch of `global_rows` rows over `size`
 * ranks: rank r takes rows [*first, *first + *rows); the first
 * global_rows % size ranks take one row more (shares differ by at most one;
 * a rank may get 0 rows when global_rows < size). */
void gcc_comm_share(int64_t global_rows, int rank, int size, int64_t *first, int64_t *rows);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_COMM_H */
