/*
 * gcc_api_internal.h - test support for the deployment C API
 * (deploy/gcc_api.h): a GPU session on a given device backend, so that the
 * tests run a bundle's CUDA plans on the host emulation of a GPU
 * (tests/host_backend.h) as gcc-run runs them on a real one.
 */
#ifndef GCC_DEPLOY_GCC_API_INTERNAL_H
#define GCC_DEPLOY_GCC_API_INTERNAL_H

#include "deploy/gcc_api.h"
#include "runtime/backend.h"
#include "runtime/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* As gccx_session_create with o->device "cuda:0", on device backend `be`
 * (not owned: it must outlive the session) described by `gpu` (compute
 * capability for the kernel image, streaming multiprocessors), instead of
 * the CUDA runtime's device: the kernel image is chosen for gpu's
 * architecture, the weights are uploaded through `be`, and every plan runs
 * on it. o->device is ignored. Errors: GCC_ERR_INVALID_ARGUMENT for a NULL
 * argument; then as gccx_session_create. */
gcc_status gccx_session_create_on(gccx_bundle *b, const gccx_session_options *o,
                                  const gcc_device_backend *be, const gcc_device_info *gpu,
                                  gccx_session **out, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_DEPLOY_GCC_API_INTERNAL_H */
