/*
 * no_comm_nccl.c - the NCCL communicator of a CPU-only build (bazel
 * --config=cpu_only): gcc_comm_nccl_create says that this build has no
 * CUDA. Nothing reaches it in practice: the device probe finds no CUDA
 * device, so GPU ranks (--device cuda under mpirun) stop there; CPU ranks
 * use the MPI communicator (runtime/comm_mpi.c).
 */
#include <stddef.h>

#include "runtime/cuda/comm_nccl.h"
#include "runtime/cuda/cuda_device.h"

gcc_status gcc_comm_nccl_create(gcc_comm *base, int cuda_device, gcc_comm **out, gcc_diag *d) {
  (void)base;
  *out = NULL;
  return gcc_diag_set(d, GCC_ERR_DEVICE, "cuda:%d: NCCL: %s", cuda_device, GCC_NO_CUDA_REASON);
}
