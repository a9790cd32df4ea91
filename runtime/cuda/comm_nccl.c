/*
 * comm_nccl.c - the NCCL communicator (comm_nccl.h).
 */
#include "runtime/cuda/comm_nccl.h"

#include <stdlib.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "runtime/cuda/cuda_check.h"

/* Every NCCL call: on failure, GCC_ERR_DEVICE naming the call, NCCL's
 * error string, its last error message and the file and line. */
#define GCC_NCCL_CHECK(call)                                                                       \
  do {                                                                                             \
    ncclResult_t gcc_nr_ = (call);                                                                 \
    if (gcc_nr_ != ncclSuccess)                                                                    \
      return gcc_diag_set(d, GCC_ERR_DEVICE, "%s failed: %s (%s) at %s:%d", #call,                 \
                          ncclGetErrorString(gcc_nr_), ncclGetLastError(NULL), __FILE__,           \
                          __LINE__);                                                               \
  } while (0)

typedef struct nccl_comm {
  gcc_comm pub; /* first: the gcc_comm * is the nccl_comm * */
  gcc_comm *base;
  ncclComm_t nc;
  int device;
} nccl_comm;

static gcc_status nccl_broadcast(gcc_comm *c, void *buf, size_t bytes, int root, gcc_diag *d) {
  nccl_comm *n = (nccl_comm *)c;
  return n->base->broadcast(n->base, buf, bytes, root, d);
}

static gcc_status nccl_allreduce_f32(gcc_comm *c, float *buf, int64_t count, float weight,
                                     void *stream, gcc_diag *d) {
  nccl_comm *n = (nccl_comm *)c;
  c->allreduce_calls++;
  c->allreduce_bytes += count * (int64_t)sizeof(float);
  GCC_CUDA_CHECK(cudaSetDevice(n->device));
  if (weight == 1.0f) {
    GCC_NCCL_CHECK(
        ncclAllReduce(buf, buf, (size_t)count, ncclFloat, ncclSum, n->nc, (cudaStream_t)stream));
    return GCC_OK;
  }
  /* the sum of weight_r * buf_r: NCCL multiplies before it sums */
  ncclRedOp_t op;
  GCC_NCCL_CHECK(ncclRedOpCreatePreMulSum(&op, &weight, ncclFloat, ncclScalarHostImmediate, n->nc));
  ncclResult_t r =
      ncclAllReduce(buf, buf, (size_t)count, ncclFloat, op, n->nc, (cudaStream_t)stream);
  ncclResult_t r2 = ncclRedOpDestroy(op, n->nc);
  GCC_NCCL_CHECK(r);
  GCC_NCCL_CHECK(r2);
  return GCC_OK;
}

static gcc_status nccl_allreduce_f64(gcc_comm *c, double *buf, int64_t count, gcc_diag *d) {
  nccl_comm *n = (nccl_comm *)c;
  return n->base->allreduce_f64(n->base, buf, count, d);
}

static gcc_status nccl_barrier(gcc_comm *c, gcc_diag *d) {
  nccl_comm *n = (nccl_comm *)c;
  return n->base->barrier(n->base, d);
}

static void nccl_abort(gcc_comm *c, int code, const char *msg) {
  nccl_comm *n = (nccl_comm *)c;
  ncclCommAbort(n->nc); /* no rank waits in a collective of this one */
  n->nc = NULL;
  n->base->abort(n->base, code, msg);
}

static void nccl_destroy(gcc_comm *c) {
  nccl_comm *n = (nccl_comm *)c;
  if (n->nc)
    ncclCommDestroy(n->nc);
  free(n);
}

static gcc_status join(nccl_comm *n, gcc_diag *d) {
  ncclUniqueId id;
  if (n->base->rank == 0)
    GCC_NCCL_CHECK(ncclGetUniqueId(&id));
  GCC_TRY(n->base->broadcast(n->base, &id, sizeof id, 0, d));
  GCC_CUDA_CHECK(cudaSetDevice(n->device));
  GCC_NCCL_CHECK(ncclCommInitRank(&n->nc, n->base->size, id, n->base->rank));
  return GCC_OK;
}

gcc_status gcc_comm_nccl_create(gcc_comm *base, int cuda_device, gcc_comm **out, gcc_diag *d) {
  *out = NULL;
  nccl_comm *n = calloc(1, sizeof *n);
  if (!n)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (NCCL communicator)");
  n->base = base;
  n->device = cuda_device;
  gcc_status s = join(n, d);
  if (s != GCC_OK) {
    free(n);
    return gcc_diag_prefix(d, "rank %d/%d on cuda:%d", base->rank, base->size, cuda_device);
  }
  n->pub = *base;
  n->pub.self = n;
  n->pub.name = "nccl";
  n->pub.broadcast = nccl_broadcast;
  n->pub.allreduce_f32 = nccl_allreduce_f32;
  n->pub.allreduce_f64 = nccl_allreduce_f64;
  n->pub.barrier = nccl_barrier;
  n->pub.abort = nccl_abort;
  n->pub.destroy = nccl_destroy;
  *out = &n->pub;
  return GCC_OK;
}
