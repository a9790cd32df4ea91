/*
 * comm_nccl.h - the NCCL communicator of GPU ranks (runtime/comm.h): one
 * rank per GPU, `mpirun -np N gcc-train MODEL --device cuda`.
 */
#ifndef GCC_RUNTIME_CUDA_COMM_NCCL_H
#define GCC_RUNTIME_CUDA_COMM_NCCL_H

#include "runtime/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A communicator whose allreduce_f32 is ncclAllReduce (ncclFloat, ncclSum)
 * of device memory on CUDA device `cuda_device` (cudaSetDevice'd here), on
 * the cudaStream_t the caller passes; broadcast, the float64 all-reduce,
 * barrier and abort are `base`'s (MPI: they move host memory). Rank 0 makes
 * the NCCL unique id (ncclGetUniqueId) and `base` broadcasts it; every rank
 * then joins with ncclCommInitRank(size, id, rank). `base` must outlive the
 * result; destroy ends the NCCL communicator (ncclCommDestroy), not `base`.
 * Errors: GCC_ERR_DEVICE naming the CUDA or NCCL call and its error string
 * (every call is checked); `base`'s errors. */
gcc_status gcc_comm_nccl_create(gcc_comm *base, int cuda_device, gcc_comm **out, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_CUDA_COMM_NCCL_H */
