// host_backend.h - a gcc_device_backend (runtime/backend.h) that runs on the
// host, exactly as the CUDA backend's contract says (test support):
//  - generated kernels: the plan's CUDA C compiled with the host compiler and
//    tests/cuda_host_shim.h (tests/kernel_emulation.h) and launched through
//    the same argument arrays cudaLaunchKernel would get; the cubin NVRTC made
//    is required to exist;
//  - GEMMs: the column-major call of codegen/gemm_map.h executed by OpenBLAS
//    in column-major mode (cblas_sgemm(CblasColMajor, ...) has cuBLAS's
//    semantics) plus the cuBLASLt epilogue written out in loops (bias, ReLU,
//    ReLU bit-mask, DRELU, bias gradients);
//  - library calls (cuDNN's convolutions and poolings): the node's own CPU
//    kernel on the device (here: host) addresses, with its workspace;
//  - capture records the issued work with its argument *values* and replay
//    re-issues the recording, as a CUDA Graph does.
// Used by tests/device_plan_test.cc and the ONNX tests.
#ifndef GCC_TESTS_HOST_BACKEND_H_
#define GCC_TESTS_HOST_BACKEND_H_

#include <cblas.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

extern "C" {
#include "codegen/gemm_map.h"
#include "codegen/lowering.h"
#include "graph/ops.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/plan.h"
}
#include "tests/kernel_emulation.h"

namespace gcc_host_test {

using gcc_emu_test::EmulatedModule;
using gcc_emu_test::LaunchFn;

// ---- the column-major GEMM with its epilogue, as cuBLASLt defines it --------

inline void ColMajorGemm(const gcc_colmajor_gemm &m, const float *A, const float *B, const float *C,
                  float *D, float *bias, uint8_t *aux) {
  const int64_t ldd = m.ldd;
  float beta = 0.0f;
  if (m.c_value >= 0 && C) {
    if (C != D)
      for (int64_t j = 0; j < m.n; j++)
        std::memcpy(D + j * ldd, C + j * ldd, (size_t)m.m * sizeof(float));
    beta = m.beta;
  }
  cblas_sgemm(CblasColMajor, m.trans_a ? CblasTrans : CblasNoTrans,
              m.trans_b ? CblasTrans : CblasNoTrans, (int)m.m, (int)m.n, (int)m.k, m.alpha, A,
              (int)m.lda, B, (int)m.ldb, beta, D, (int)ldd);
  auto bit = [&](int64_t i, int64_t j) -> bool {
    int64_t idx = j * m.aux_ld + i;
    return (aux[idx / 8] >> (idx % 8)) & 1;
  };
  switch (m.epilogue) {
  case GCC_EPI_DEFAULT: break;
  case GCC_EPI_BIAS:
  case GCC_EPI_RELU_BIAS:
  case GCC_EPI_RELU_AUX_BIAS:
    for (int64_t j = 0; j < m.n; j++)
      for (int64_t i = 0; i < m.m; i++) {
        float x = D[i + j * ldd] + bias[i];
        if (m.epilogue != GCC_EPI_BIAS) {
          if (m.epilogue == GCC_EPI_RELU_AUX_BIAS) {
            int64_t idx = j * m.aux_ld + i;
            if (x > 0.0f)
              aux[idx / 8] |= (uint8_t)(1u << (idx % 8));
            else
              aux[idx / 8] &= (uint8_t)~(1u << (idx % 8));
          }
          x = x > 0.0f ? x : 0.0f;
        }
        D[i + j * ldd] = x;
      }
    break;
  case GCC_EPI_DRELU:
  case GCC_EPI_DRELU_BGRAD:
    for (int64_t j = 0; j < m.n; j++)
      for (int64_t i = 0; i < m.m; i++)
        if (!bit(i, j))
          D[i + j * ldd] = 0.0f;
    if (m.epilogue == GCC_EPI_DRELU_BGRAD)
      for (int64_t i = 0; i < m.m; i++) {
        double s = 0;
        for (int64_t j = 0; j < m.n; j++)
          s += D[i + j * ldd];
        bias[i] = (float)s;
      }
    break;
  case GCC_EPI_BGRADB:
    for (int64_t j = 0; j < m.n; j++) {
      double s = 0;
      for (int64_t kk = 0; kk < m.k; kk++)
        s += m.trans_b ? B[j + kk * m.ldb] : B[kk + j * m.ldb];
      bias[j] = (float)s;
    }
    break;
  default: ADD_FAILURE() << "epilogue " << gcc_epilogue_name(m.epilogue); break;
  }
}

// ---- the host backend ---------------------------------------------------

struct Recorded {
  enum Kind { kLaunch, kGemm, kMemset, kCopy, kLibrary } kind = kLaunch;
  const gcc_graph *graph = nullptr;  // kLibrary: the node, and its operands
  int node = -1;
  std::vector<void *> lib_in, lib_out;
  LaunchFn fn = nullptr;
  unsigned grid = 0, block = 0;
  std::vector<uint64_t> args;  // argument values, 8 bytes each
  gcc_colmajor_gemm gemm{};
  const void *a = nullptr, *b = nullptr, *c = nullptr;
  void *dst = nullptr, *bias = nullptr, *aux = nullptr;
  const void *src = nullptr;
  int byte = 0;
  size_t bytes = 0;
};

struct HostBackend {
  gcc_device_backend be{};
  size_t limit = SIZE_MAX;  // device memory for the OOM tests
  bool fail_d2h = false;    // device-to-host copies fail (a device error)
  size_t used = 0;
  std::vector<std::unique_ptr<EmulatedModule>> modules;
  std::vector<std::pair<void *, size_t>> blocks;
  bool capturing = false;
  std::vector<Recorded> rec;
  std::vector<Recorded> graphs[2];
  int launches = 0, gemms = 0, captures = 0, replays = 0, library_calls = 0;
  std::vector<std::string> epilogues;
  std::string failure;

  HostBackend() {
    be.self = this;
    be.name = "host-emulation";
    be.supports_op = [](void *, int op) -> int { return gcc_cuda_supports_op(op); };
    be.run_node = nullptr;
    be.alloc = [](void *self, size_t bytes, void **out, gcc_diag *d) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      if (h->used + bytes > h->limit)
        return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "cudaMalloc(%zu): out of memory", bytes);
      *out = aligned_alloc(256, (bytes + 255) / 256 * 256);
      std::memset(*out, 0xA5, bytes);  // garbage, as cudaMalloc leaves it
      h->used += bytes;
      h->blocks.push_back({*out, bytes});
      return GCC_OK;
    };
    be.release = [](void *self, void *p) {
      auto *h = static_cast<HostBackend *>(self);
      for (size_t i = 0; i < h->blocks.size(); i++)
        if (h->blocks[i].first == p) {
          h->used -= h->blocks[i].second;
          h->blocks.erase(h->blocks.begin() + (long)i);
          break;
        }
      free(p);
    };
    be.mem_info = [](void *self, size_t *fr, size_t *tot, gcc_diag *) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      *tot = h->limit;
      *fr = h->limit - h->used;
      return GCC_OK;
    };
    be.host_alloc = [](void *, size_t bytes, void **out, gcc_diag *) -> gcc_status {
      *out = malloc(bytes);
      return GCC_OK;
    };
    be.host_release = [](void *, void *p) { free(p); };
    be.copy = [](void *self, void *dst, const void *src, size_t bytes, gcc_copy_kind kind, int,
                 gcc_diag *d) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      if (h->fail_d2h && kind == GCC_COPY_D2H)
        return gcc_diag_set(d, GCC_ERR_DEVICE,
                            "cudaMemcpyAsync failed: cudaErrorIllegalAddress (emulated)");
      if (h->capturing) {
        Recorded r;
      r.kind = Recorded::kCopy;
        r.dst = dst;
        r.src = src;
        r.bytes = bytes;
        h->rec.push_back(r);
      } else {
        std::memcpy(dst, src, bytes);
      }
      return GCC_OK;
    };
    be.memset = [](void *self, void *dst, int byte, size_t bytes, int, gcc_diag *) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      if (h->capturing) {
        Recorded r;
      r.kind = Recorded::kMemset;
        r.dst = dst;
        r.byte = byte;
        r.bytes = bytes;
        h->rec.push_back(r);
      } else {
        std::memset(dst, byte, bytes);
      }
      return GCC_OK;
    };
    be.load = [](void *self, const gcc_kernel_set *ks, const gcc_nvrtc_output *img, void **module,
                 void **kernels, gcc_diag *d) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      if (!img->cubin || img->cubin_size == 0 || !img->ptx)
        return gcc_diag_set(d, GCC_ERR_INTERNAL, "NVRTC produced no cubin/PTX");
      auto mod = std::make_unique<EmulatedModule>();
      std::string err;
      if (!mod->Compile(ks->source, "device_plan", &err))
        return gcc_diag_set(d, GCC_ERR_INTERNAL, "%s", err.c_str());
      for (int i = 0; i < ks->n_kernels; i++) {
        LaunchFn f = mod->Find(ks->kernels[i].name, &err);
        if (!f)
          return gcc_diag_set(d, GCC_ERR_INTERNAL, "%s", err.c_str());
        kernels[i] = reinterpret_cast<void *>(f);
      }
      *module = mod.get();
      h->modules.push_back(std::move(mod));
      return GCC_OK;
    };
    be.unload = [](void *, void *) {};
    be.launch = [](void *self, void *kernel, const gcc_kernel_info *k, void **args,
                   gcc_diag *d) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      Recorded r;
      r.kind = Recorded::kLaunch;
      r.fn = reinterpret_cast<LaunchFn>(kernel);
      r.grid = (unsigned)k->grid_dim;
      r.block = (unsigned)k->block_dim;
      for (int i = 0; i < k->n_args; i++) {
        uint64_t v = 0;
        gcc_karg_kind kk = k->args[i].kind;
        size_t sz = (kk == GCC_KARG_FIRST_STEP || kk == GCC_KARG_STEP_SIZE || kk == GCC_KARG_BC2_SQRT)
                        ? 4
                        : 8;
        std::memcpy(&v, args[i], sz);
        r.args.push_back(v);
      }
      h->launches++;
      if (h->capturing) {
        h->rec.push_back(r);
        return GCC_OK;
      }
      return h->Run(r, d);
    };
    be.gemm = [](void *self, const gcc_colmajor_gemm *g, const void *a, const void *b,
                 const void *c, void *dst, void *bias, void *aux, gcc_diag *d) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      Recorded r;
      r.kind = Recorded::kGemm;
      r.gemm = *g;
      r.a = a;
      r.b = b;
      r.c = c;
      r.dst = dst;
      r.bias = bias;
      r.aux = aux;
      h->gemms++;
      h->epilogues.push_back(gcc_epilogue_name(g->epilogue));
      if (h->capturing) {
        h->rec.push_back(r);
        return GCC_OK;
      }
      return h->Run(r, d);
    };
    // cuDNN's convolutions and poolings: the node's own CPU kernel on the
    // device (here: host) addresses, with its workspace
    be.library_op = [](void *self, const gcc_graph *g, int node, void *const *in,
                       void *const *out, gcc_diag *d) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      Recorded r;
      r.kind = Recorded::kLibrary;
      r.graph = g;
      r.node = node;
      const gcc_node *n = &g->nodes[node];
      r.lib_in.assign(in, in + n->n_inputs);
      r.lib_out.assign(out, out + n->n_outputs);
      h->library_calls++;
      if (h->capturing) {
        h->rec.push_back(r);
        return GCC_OK;
      }
      return h->Run(r, d);
    };
    be.event_record = [](void *, int, int, gcc_diag *) -> gcc_status { return GCC_OK; };
    be.stream_wait = [](void *, int, int, gcc_diag *) -> gcc_status { return GCC_OK; };
    be.event_sync = [](void *, int, gcc_diag *) -> gcc_status { return GCC_OK; };
    be.sync = [](void *, gcc_diag *) -> gcc_status { return GCC_OK; };
    be.capture_begin = [](void *self, gcc_diag *) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      h->capturing = true;
      h->rec.clear();
      return GCC_OK;
    };
    be.capture_end = [](void *self, int slot, gcc_diag *) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      h->capturing = false;
      h->graphs[slot] = h->rec;
      h->captures++;
      return GCC_OK;
    };
    be.graph_launch = [](void *self, int slot, gcc_diag *d) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      h->replays++;
      for (const Recorded &r : h->graphs[slot])
        GCC_TRY(h->Run(r, d));
      return GCC_OK;
    };
  }

  gcc_status Run(const Recorded &r, gcc_diag *d) {
    switch (r.kind) {
    case Recorded::kLaunch: {
      std::vector<uint64_t> vals = r.args;
      std::vector<void *> ptrs;
      for (uint64_t &v : vals)
        ptrs.push_back(&v);
      r.fn(r.grid, r.block, ptrs.data());
      return GCC_OK;
    }
    case Recorded::kGemm:
      ColMajorGemm(r.gemm, static_cast<const float *>(r.a), static_cast<const float *>(r.b),
                   static_cast<const float *>(r.c), static_cast<float *>(r.dst),
                   static_cast<float *>(r.bias), static_cast<uint8_t *>(r.aux));
      return GCC_OK;
    case Recorded::kMemset: std::memset(r.dst, r.byte, r.bytes); return GCC_OK;
    case Recorded::kCopy: std::memcpy(r.dst, r.src, r.bytes); return GCC_OK;
    case Recorded::kLibrary: {
      const gcc_node *n = &r.graph->nodes[r.node];
      std::vector<gcc_tensor> ts(n->n_inputs + n->n_outputs);
      std::vector<gcc_tensor *> in(n->n_inputs), out(n->n_outputs);
      for (int k = 0; k < n->n_inputs + n->n_outputs; k++) {
        int v = k < n->n_inputs ? n->inputs[k] : n->outputs[k - n->n_inputs];
        void *ptr = k < n->n_inputs ? r.lib_in[k] : r.lib_out[k - n->n_inputs];
        if (v < 0) continue;
        const gcc_value *val = &r.graph->values[v];
        ts[k] = gcc_tensor{val->dtype, val->shape, gcc_shape_numel(&val->shape, nullptr), ptr};
      }
      for (int k = 0; k < n->n_inputs; k++) in[k] = n->inputs[k] >= 0 ? &ts[k] : nullptr;
      for (int k = 0; k < n->n_outputs; k++) out[k] = &ts[n->n_inputs + k];
      size_t ws = gcc_cpu_workspace(r.graph, r.node);
      std::vector<float> scratch(ws / sizeof(float) + 1);
      gcc_cpu_ctx ctx{};
      ctx.max_threads = 1;
      ctx.diag = d;
      ctx.source = r.graph->source;
      gcc_kernel_args ka{n, in.data(), n->n_inputs, out.data(), n->n_outputs, &ctx,
                         ws ? scratch.data() : nullptr, ws};
      return gcc_cpu_op_of(n->op)->kernel(&ka);
    }
    }
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "unknown recorded work");
  }
};

}  // namespace gcc_host_test

#endif  // GCC_TESTS_HOST_BACKEND_H_
