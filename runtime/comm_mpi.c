/*
 * comm_mpi.c - the MPI communicator and the single-process one (comm.h).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "runtime/comm.h"

int gcc_comm_launched_by_mpi(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMIX_RANK") != NULL ||
         getenv("PMI_RANK") != NULL;
}

/* ---- one process ------------------------------------------------------ */

static gcc_status single_broadcast(gcc_comm *c, void *buf, size_t bytes, int root, gcc_diag *d) {
  (void)c;
  (void)buf;
  (void)bytes;
  if (root != 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "broadcast from rank %d in a world of 1",
                        root);
  return GCC_OK;
}

static gcc_status single_allreduce_f32(gcc_comm *c, float *buf, int64_t n, float weight,
                                       void *stream, gcc_diag *d) {
  (void)c;
  (void)stream;
  (void)d;
  if (weight != 1.0f)
    for (int64_t i = 0; i < n; i++)
      buf[i] *= weight;
  return GCC_OK;
}

static gcc_status single_allreduce_f64(gcc_comm *c, double *buf, int64_t n, gcc_diag *d) {
  (void)c;
  (void)buf;
  (void)n;
  (void)d;
  return GCC_OK;
}

static gcc_status single_barrier(gcc_comm *c, gcc_diag *d) {
  (void)c;
  (void)d;
  return GCC_OK;
}

static void single_abort(gcc_comm *c, int code, const char *msg) {
  (void)c;
  (void)code;
  (void)msg; /* the caller reports and exits as a single process does */
}

static void single_destroy(gcc_comm *c) {
  free(c);
}

/* ---- MPI -------------------------------------------------------------- */

static gcc_status mpi_error(gcc_diag *d, const char *call, int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
    snprintf(msg, sizeof msg, "error %d", rc);
  return gcc_diag_set(d, GCC_ERR_DEVICE, "%s failed: %s", call, msg);
}

static gcc_status mpi_broadcast(gcc_comm *c, void *buf, size_t bytes, int root, gcc_diag *d) {
  (void)c;
  char *p = buf;
  while (bytes > 0) { /* MPI counts are ints */
    int n = bytes > (size_t)INT_MAX ? INT_MAX : (int)bytes;
    int rc = MPI_Bcast(p, n, MPI_BYTE, root, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS)
      return mpi_error(d, "MPI_Bcast", rc);
    p += n;
    bytes -= (size_t)n;
  }
  return GCC_OK;
}

static gcc_status mpi_allreduce_f32(gcc_comm *c, float *buf, int64_t n, float weight, void *stream,
                                    gcc_diag *d) {
  (void)stream;
  double t0 = MPI_Wtime();
  if (weight != 1.0f)
    for (int64_t i = 0; i < n; i++)
      buf[i] *= weight;
  c->allreduce_calls++;
  c->allreduce_bytes += n * (int64_t)sizeof(float);
  while (n > 0) {
    int k = n > INT_MAX ? INT_MAX : (int)n;
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS)
      return mpi_error(d, "MPI_Allreduce (float32 sum)", rc);
    buf += k;
    n -= k;
  }
  c->allreduce_seconds += MPI_Wtime() - t0;
  return GCC_OK;
}

static gcc_status mpi_allreduce_f64(gcc_comm *c, double *buf, int64_t n, gcc_diag *d) {
  (void)c;
  if (n > INT_MAX)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "MPI_Allreduce of %lld doubles", (long long)n);
  int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? GCC_OK : mpi_error(d, "MPI_Allreduce (float64 sum)", rc);
}

static gcc_status mpi_barrier(gcc_comm *c, gcc_diag *d) {
  (void)c;
  int rc = MPI_Barrier(MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? GCC_OK : mpi_error(d, "MPI_Barrier", rc);
}

static void mpi_abort(gcc_comm *c, int code, const char *msg) {
  fprintf(stderr, "gcc-train: rank %d/%d: %s\n", c->rank, c->size, msg);
  fflush(stderr);
  fflush(stdout);
  MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
}

static void mpi_destroy(gcc_comm *c) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin)
    MPI_Finalize();
  free(c);
}

gcc_status gcc_comm_create(gcc_comm **out, gcc_diag *d) {
  *out = NULL;
  gcc_comm *c = calloc(1, sizeof *c);
  if (!c)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (communicator)");
  c->size = 1;
  c->local_size = 1;
  if (!gcc_comm_launched_by_mpi()) {
    c->name = "single";
    c->broadcast = single_broadcast;
    c->allreduce_f32 = single_allreduce_f32;
    c->allreduce_f64 = single_allreduce_f64;
    c->barrier = single_barrier;
    c->abort = single_abort;
    c->destroy = single_destroy;
    *out = c;
    return GCC_OK;
  }
  int provided = 0;
  int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) {
    free(c);
    return gcc_diag_set(d, GCC_ERR_DEVICE, "MPI_Init_thread failed (error %d)", rc);
  }
  /* errors come back as codes (reported with the call), not a silent abort */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c->size);
  MPI_Comm node;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
      MPI_SUCCESS) {
    MPI_Comm_rank(node, &c->local_rank);
    MPI_Comm_size(node, &c->local_size);
    MPI_Comm_free(&node);
  }
  const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (lr && *lr)
    c->local_rank = atoi(lr);
  c->name = "mpi";
  c->broadcast = mpi_broadcast;
  c->allreduce_f32 = mpi_allreduce_f32;
  c->allreduce_f64 = mpi_allreduce_f64;
  c->barrier = mpi_barrier;
  c->abort = mpi_abort;
  c->destroy = mpi_destroy;
  *out = c;
  return GCC_OK;
}
