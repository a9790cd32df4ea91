// run_plans.h - runs an inference graph once on the CPU backend or through
// a CUDA plan on the host backend (tests/host_backend.h: generated kernels
// host-emulated, cuBLASLt calls as column-major OpenBLAS, cuDNN calls as
// the CPU kernels), and returns its outputs (test support).
#ifndef GCC_TESTS_RUN_PLANS_H_
#define GCC_TESTS_RUN_PLANS_H_

#include <cstdio>
#include <string>
#include <vector>

extern "C" {
#include "codegen/kernel_cache.h"
#include "graph/ir.h"
#include "runtime/plan.h"
}
#include "tests/host_backend.h"
#include "tests/test_kernel_cache.h"

namespace gcc_test {

struct PlanOutput {
  gcc_dtype dtype = GCC_DT_UNDEFINED;
  gcc_shape shape{};
  std::vector<float> f32;   // float32 outputs
  std::vector<int64_t> i64; // int64, int32 and bool outputs (widened)
};

inline gcc_host_test::HostBackend *SharedHostBackend() {
  static gcc_host_test::HostBackend *hb = new gcc_host_test::HostBackend();
  return hb;
}

// Runs `model` (inputs[k] holds graph input k's elements) at `batch` on the
// CPU, or with `cuda` through a CUDA plan for cuda:0 (sm_90) on the host
// backend. "" on success, else what failed.
inline std::string RunPlan(const gcc_graph *model, const std::vector<const void *> &inputs,
                           int64_t batch, bool cuda, std::vector<PlanOutput> *outs, int threads = 1,
                           int precision = 0) {
  gcc_options o{};
  o.mode = GCC_MODE_EVAL;
  o.batch_size = batch;
  o.device = cuda ? GCC_DEV_CUDA(0) : GCC_DEV_CPU;
  o.device_explicit = 1;
  o.n_cuda_devices = 1;
  o.precision = precision; // --precision (graph/ir.h gcc_precision)
  FILE *quiet = fopen("/dev/null", "w");
  o.warn_file = quiet;
  gcc_plan *p = nullptr;
  gcc_diag d{};
  gcc_plan_config cfg{};
  cfg.threads = threads;
  cfg.readback_ring = 1;
  if (cuda) {
    cfg.device = &SharedHostBackend()->be;
    cfg.sm = 90;
    cfg.sm_count = 4;
    cfg.compile = gcc_kernel_cache_hook;
    cfg.compile_user = gcc_test::TestKernelCache();
  }
  gcc_host_test::ModelWeights weights(model, cuda ? SharedHostBackend() : nullptr);
  gcc_status s =
      gcc_plan_compile(model, &o, &cfg, gcc_host_test::ModelWeights::Bind, &weights, &p, &d);
  if (quiet)
    fclose(quiet);
  if (s != GCC_OK)
    return std::string("compile: ") + d.msg;
  std::string err;
  for (int k = 0; k < model->n_inputs && err.empty(); k++) {
    const char *name = model->values[model->inputs[k]].name;
    if (gcc_plan_bind_input(p, name, inputs[k], &d) != GCC_OK)
      err = d.msg;
  }
  if (err.empty() && gcc_plan_run(p, 0, &d) != GCC_OK)
    err = std::string("run: ") + d.msg;
  outs->clear();
  for (int k = 0; k < model->n_outputs && err.empty(); k++) {
    const char *name = model->values[model->outputs[k]].name;
    const gcc_tensor *t = gcc_plan_host_tensor(p, name, &d);
    if (!t) { /* not in the plan, or the step's data error found on the GPU (read back) */
      err = std::string("output '") + name + "' is not in the plan or not read: " + d.msg;
      break;
    }
    PlanOutput po;
    po.dtype = t->dtype;
    po.shape = t->shape;
    if (t->dtype == GCC_DT_FLOAT32)
      po.f32.assign(static_cast<const float *>(t->data),
                    static_cast<const float *>(t->data) + t->numel);
    for (int64_t i = 0; i < t->numel; i++) {
      if (t->dtype == GCC_DT_INT64)
        po.i64.push_back(static_cast<const int64_t *>(t->data)[i]);
      else if (t->dtype == GCC_DT_INT32)
        po.i64.push_back(static_cast<const int32_t *>(t->data)[i]);
      else if (t->dtype == GCC_DT_BOOL)
        po.i64.push_back(static_cast<const uint8_t *>(t->data)[i]);
    }
    outs->push_back(po);
  }
  gcc_plan_free(p);
  return err;
}

} // namespace gcc_test

#endif // GCC_TESTS_RUN_PLANS_H_
