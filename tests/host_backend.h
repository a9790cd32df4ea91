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
//    re-issues the recording, as a CUDA Graph does;
//  - what a GPU would punish is checked (see HostBackend): freed memory
//    touched by recorded work, leaked graphs and GEMM handles, misaligned
//    GEMM operands, epilogues cuBLASLt does not offer, and the like.
// Used by tests/device_plan_test.cc and the ONNX tests.
#ifndef GCC_TESTS_HOST_BACKEND_H_
#define GCC_TESTS_HOST_BACKEND_H_

#include <cblas.h>
#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

extern "C" {
#include "codegen/fusion.h"
#include "codegen/gemm_map.h"
#include "codegen/lowering.h"
#include "codegen/nvrtc.h"
#include "graph/half.h"
#include "graph/ops.h"
#include "runtime/comm.h"
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
              aux[idx / 8] &= (uint8_t) ~(1u << (idx % 8));
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

// A matmul of 16-bit operands (a mixed-precision plan) as cuBLASLt runs it
// with CUBLAS_COMPUTE_32F: the operands widened to float32 (exact), the
// float32 GEMM and epilogue, then D (and a bias gradient) rounded to the
// operands' dtype, to nearest even. The bias and the bias gradient have D's
// type (cublasLt.h: CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE defaults to D's type,
// other types are documented for FP8 and IMMA kernels only; "Bias gradient
// vector elements are the same type as the output elements"). A BGRADB sum
// reads the 16-bit operand (exact values); a DRELU_BGRAD sum here reads the
// float32 epilogue values before D is rounded (the epilogue reduces its
// accumulators: an assumption only a GPU can confirm; a sum of the stored
// 16-bit values, as the CPU plan and the fallback kernel take it, differs
// by at most 2^-8 of the sum of magnitudes, plus the final rounding).
// float32 (or unset) dtype: ColMajorGemm.
inline void ColMajorGemmOfDtype(const gcc_colmajor_gemm &m, const void *A, const void *B,
                                const void *C, void *D, void *bias, uint8_t *aux) {
  if (m.dtype != GCC_DT_BFLOAT16 && m.dtype != GCC_DT_FLOAT16) {
    ColMajorGemm(m, static_cast<const float *>(A), static_cast<const float *>(B),
                 static_cast<const float *>(C), static_cast<float *>(D), static_cast<float *>(bias),
                 aux);
    return;
  }
  const bool bf = m.dtype == GCC_DT_BFLOAT16;
  auto widen = [&](const void *p, int64_t n) {
    std::vector<float> f((size_t)n);
    const uint16_t *h = static_cast<const uint16_t *>(p);
    for (int64_t i = 0; i < n; i++)
      f[(size_t)i] = bf ? gcc_bf16_to_f32(h[i]) : gcc_f16_to_f32(h[i]);
    return f;
  };
  auto narrow = [&](const std::vector<float> &f, void *p) {
    uint16_t *h = static_cast<uint16_t *>(p);
    for (size_t i = 0; i < f.size(); i++)
      h[i] = bf ? gcc_f32_to_bf16(f[i]) : gcc_f32_to_f16(f[i]);
  };
  std::vector<float> a = widen(A, m.lda * (m.trans_a ? m.m : m.k));
  std::vector<float> b = widen(B, m.ldb * (m.trans_b ? m.k : m.n));
  std::vector<float> c, dd((size_t)(m.ldd * m.n)), bs;
  if (m.c_value >= 0 && C)
    c = widen(C, m.ldd * m.n);
  bool bgrad = m.epilogue == GCC_EPI_DRELU_BGRAD || m.epilogue == GCC_EPI_BGRADB;
  int64_t nbias = m.epilogue == GCC_EPI_BGRADB ? m.n : m.m;
  if (bias)
    bs = bgrad ? std::vector<float>((size_t)nbias) : widen(bias, nbias);
  ColMajorGemm(m, a.data(), b.data(), c.empty() ? nullptr : c.data(), dd.data(),
               bias ? bs.data() : nullptr, aux);
  narrow(dd, D);
  if (bias && bgrad)
    narrow(bs, bias);
}

// ---- the host backend ---------------------------------------------------

// A device address the recorded work dereferences (checked live on every run).
struct Ref {
  const void *p;
  size_t bytes;
  const char *what;
};

struct Recorded {
  enum Kind { kLaunch, kGemm, kMemset, kCopy, kLibrary } kind = kLaunch;
  const gcc_graph *graph = nullptr; // kLibrary: the node, and its operands
  int node = -1;
  std::vector<void *> lib_in, lib_out;
  void *workspace = nullptr; // kLibrary: the workspace the plan gave the call
  size_t workspace_bytes = 0;
  LaunchFn fn = nullptr;
  unsigned grid = 0, block = 0;
  std::vector<uint64_t> args; // argument values, 8 bytes each
  gcc_colmajor_gemm gemm{};
  const void *a = nullptr, *b = nullptr, *c = nullptr;
  void *dst = nullptr, *bias = nullptr, *aux = nullptr;
  const void *src = nullptr;
  int byte = 0;
  size_t bytes = 0;
  std::vector<Ref> refs;
};

// A captured CUDA Graph: the recorded work with its argument values.
struct Graph {
  std::vector<Recorded> work;
};

// A prepared matmul: what cuBLASLt's heuristic was asked with.
struct Prepared {
  gcc_colmajor_gemm g;
  gcc_gemm_operands ops;
};

// The host backend models what can go wrong on a GPU without an error:
//  - memory: every device (and pinned) block is tracked; recorded work that
//    touches an address outside the live blocks is an illegal address, and
//    freeing a block (or unloading a module) a live CUDA Graph still refers
//    to is a violation;
//  - CUDA Graphs are handles owned by the caller; replaying or leaking a
//    destroyed one is a violation;
//  - cuBLASLt: the "heuristic" (gemm_prepare) returns an algorithm that
//    assumes exactly the alignments it was asked for; running it on less
//    aligned operands is recorded in `misaligned`. It offers no algorithm
//    for BGRADB with n = 1, DRELU* with k = 1, and the epilogues in
//    `refuse`. Types as cuBLASLt documents them for CUBLAS_COMPUTE_32F
//    (ColMajorGemmOfDtype): A, B, C, D, the bias and the bias gradient all
//    of the GEMM's dtype (codegen/gemm_map.c refuses a plan that would
//    need another bias type);
//  - the device has a compute capability (be.arch) and loads modules
//    lazily: an image it cannot run fails at its first launch;
//  - launch limits (max_threads, max_grid_x, max_block_x, max_dyn_smem,
//    fake ones for the tests): launch_limits reports them, and a launch past
//    them fails as cudaErrorInvalidConfiguration would (and is a violation:
//    the runner must refuse such a plan before launching anything);
//  - heuristics and algorithm choices (gemm_prepare, library_prepare)
//    during a capture are violations; `prep_log` records every prepare and
//    capture in order, with the GEMM's shape;
//  - emulated timing events (the host clock when recorded; the work before
//    them has run, as the host executes it synchronously) and NVTX ranges,
//    recorded in `ranges` (a pop without a push is a violation);
//  - H2D copies on the copy stream stay in flight until something orders
//    them (an event the host or the compute stream waits for); a staging
//    buffer rewritten meanwhile is a violation.
struct HostBackend {
  gcc_device_backend be{};
  size_t limit = SIZE_MAX; // device memory for the OOM tests
  bool fail_d2h = false;   // device-to-host copies fail (a device error)
  size_t used = 0;
  std::vector<std::unique_ptr<EmulatedModule>> modules;
  std::map<uintptr_t, std::pair<size_t, bool>> live; // device and pinned blocks: bytes, pinned
  std::vector<std::string> violations;               // contract breaches seen
  std::set<std::string> misaligned; // GEMM operands less aligned than their algorithm assumes
  bool capturing = false;
  std::vector<Recorded> rec;
  std::set<Graph *> graphs;      // live captured graphs
  std::set<Prepared *> prepared; // live prepared matmuls
  std::set<std::pair<const gcc_graph *, int>> lib_prepared;
  int launches = 0, gemms = 0, captures = 0, replays = 0, library_calls = 0;
  // copies by kind, device-wide synchronisations (sync), host waits for an
  // event (event_sync), and their order: 'h' H2D, 'd' D2H, 'D' D2D, 's' sync,
  // 'e' event_sync, 'c' capture, 'g' graph replay, 'k' launch / GEMM / library call
  int h2d = 0, d2h = 0, d2d = 0, device_syncs = 0, event_syncs = 0;
  std::string log;
  bool fail_capture = false; // capture_end fails (cudaStreamEndCapture's error)
  // every library call (cuDNN) issued: the node's op, and whether an operand is 16-bit
  std::vector<std::pair<int, bool>> library_ops;
  int conv_relu_calls = 0; // Conv calls with their Relu fused (codegen/fusion.h)
  std::vector<std::string> epilogues;
  std::set<int> refuse;                                // epilogues whose heuristic returns nothing
  std::map<void *, std::pair<bool, int>> module_image; // cubin?, arch
  std::map<LaunchFn, void *> module_of;
  struct InFlight {
    void *dst;
    const void *src;
    size_t bytes;
    std::vector<uint8_t> snapshot;
    uint64_t seq;
  };
  std::deque<InFlight> copy_queue;
  uint64_t copy_seq = 0, compute_dep = 0;
  std::map<int, std::pair<int, uint64_t>> event_mark; // event -> stream, copies it covers
  int fail_gemm_at = -1;                              // inject a failure at this GEMM call
  // launch limits (a fake device's, for the tests); with limit_prefix set,
  // only the kernels whose names start with it get them (the others an
  // H100's)
  int max_threads = 1024, max_grid_x = INT_MAX, max_block_x = 1024;
  size_t max_dyn_smem = 227 * 1024;
  std::string limit_prefix;
  std::map<LaunchFn, std::string> kernel_name; // every loaded kernel's name
  std::vector<std::string> sources;            // the source of every loaded kernel set
  // prepares and captures in order: "gemm MxNxK EPILOGUE", "library NODE", "capture"
  std::vector<std::string> prep_log;
  // emulated timing events: ms on the host clock when recorded (NaN: never)
  std::vector<double> timer_ms;
  int timer_records = 0;
  // NVTX: every range pushed, in order, and the current depth
  std::vector<std::string> ranges;
  int range_depth = 0;
  static double NowMs() {
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // the host's waits on step-done events: (steps issued so far, the step waited for)
  int steps_recorded = 0;
  std::map<int, int> event_step;
  std::vector<std::pair<int, int>> step_waits;
  // data-parallel: each all-reduce ('r', bucket) and each wait of the
  // compute stream for one ('w', bucket), in issue order; a wait for a
  // bucket not reduced since its last wait is a violation (the update
  // would read an unreduced gradient)
  std::vector<std::pair<char, int>> collective_log;
  std::map<int, int> reduced_in; // bucket -> the step (backward pass) that reduced it last
  int comm_step = 0;

  void Track(void *p, size_t bytes, bool pinned) { live[(uintptr_t)p] = {bytes, pinned}; }
  void Untrack(void *p) {
    auto it = live.find((uintptr_t)p);
    if (it == live.end())
      return;
    uintptr_t lo = it->first, hi = lo + it->second.first;
    for (Graph *g : graphs)
      for (const Recorded &r : g->work)
        for (const Ref &ref : r.refs)
          if ((uintptr_t)ref.p >= lo && (uintptr_t)ref.p < hi) {
            violations.push_back(
                std::string("memory freed while a CUDA Graph still refers to it (") + ref.what +
                ")");
            goto done;
          }
  done:
    live.erase(it);
  }
  bool Live(const void *p, size_t bytes) const {
    auto it = live.upper_bound((uintptr_t)p);
    if (it == live.begin())
      return false;
    --it;
    return (uintptr_t)p + bytes <= it->first + it->second.first;
  }
  gcc_status Check(const Recorded &r, gcc_diag *d) {
    for (const Ref &ref : r.refs)
      if (ref.p && !Live(ref.p, ref.bytes ? ref.bytes : 1)) {
        char m[200];
        snprintf(m, sizeof m, "illegal address: %s at %p is not live device memory", ref.what,
                 ref.p);
        violations.push_back(m);
        return gcc_diag_set(d, GCC_ERR_DEVICE, "%s", m);
      }
    return GCC_OK;
  }
  // completes the in-flight H2D copies up to `seq`
  void Drain(uint64_t seq) {
    while (!copy_queue.empty() && copy_queue.front().seq <= seq) {
      InFlight &c = copy_queue.front();
      if (std::memcmp(c.src, c.snapshot.data(), c.bytes) != 0)
        violations.push_back("a pinned staging buffer was rewritten while its H2D copy was in "
                             "flight");
      std::memcpy(c.dst, c.src, c.bytes);
      copy_queue.pop_front();
    }
  }
  void BeforeCompute() { Drain(compute_dep); }
  gcc_status Issue(Recorded &r, gcc_diag *d) {
    if (capturing) {
      rec.push_back(r);
      return GCC_OK;
    }
    BeforeCompute();
    return Run(r, d);
  }

  HostBackend() {
    be.self = this;
    be.name = "host-emulation";
    be.arch = 90;
    be.supports_op = [](void *, int op) -> int { return gcc_cuda_supports_op(op); };
    be.run_node = nullptr;
    be.alloc = [](void *self, size_t bytes, void **out, gcc_diag *d) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      if (h->used + bytes > h->limit)
        return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "cudaMalloc(%zu): out of memory", bytes);
      *out = aligned_alloc(256, (bytes + 255) / 256 * 256);
      std::memset(*out, 0xA5, bytes); // garbage, as cudaMalloc leaves it
      h->used += bytes;
      h->Track(*out, bytes, false);
      return GCC_OK;
    };
    be.release = [](void *self, void *p) {
      auto *h = static_cast<HostBackend *>(self);
      auto it = h->live.find((uintptr_t)p);
      if (it != h->live.end())
        h->used -= it->second.first;
      h->Untrack(p);
      free(p);
    };
    be.mem_info = [](void *self, size_t *fr, size_t *tot, gcc_diag *) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      *tot = h->limit;
      *fr = h->limit - h->used;
      return GCC_OK;
    };
    be.host_alloc = [](void *self, size_t bytes, void **out, gcc_diag *) -> gcc_status {
      *out = malloc(bytes);
      static_cast<HostBackend *>(self)->Track(*out, bytes, true);
      return GCC_OK;
    };
    be.host_release = [](void *self, void *p) {
      static_cast<HostBackend *>(self)->Untrack(p);
      free(p);
    };
    be.copy = [](void *self, void *dst, const void *src, size_t bytes, gcc_copy_kind kind,
                 int stream, gcc_diag *d) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      (kind == GCC_COPY_H2D ? h->h2d : kind == GCC_COPY_D2H ? h->d2h : h->d2d)++;
      h->log += kind == GCC_COPY_H2D ? 'h' : kind == GCC_COPY_D2H ? 'd' : 'D';
      if (h->fail_d2h && kind == GCC_COPY_D2H)
        return gcc_diag_set(d, GCC_ERR_DEVICE,
                            "cudaMemcpyAsync failed: cudaErrorIllegalAddress (emulated)");
      Recorded r;
      r.kind = Recorded::kCopy;
      r.dst = dst;
      r.src = src;
      r.bytes = bytes;
      if (kind != GCC_COPY_D2H)
        r.refs.push_back({dst, bytes, "copy destination"});
      if (kind != GCC_COPY_H2D)
        r.refs.push_back({src, bytes, "copy source"});
      if (!h->capturing && stream == GCC_STREAM_COPY && kind == GCC_COPY_H2D) {
        GCC_TRY(h->Check(r, d));
        const uint8_t *s = static_cast<const uint8_t *>(src);
        h->copy_queue.push_back(
            {dst, src, bytes, std::vector<uint8_t>(s, s + bytes), ++h->copy_seq});
        return GCC_OK;
      }
      return h->Issue(r, d);
    };
    be.memset = [](void *self, void *dst, int byte, size_t bytes, int, gcc_diag *d) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      Recorded r;
      r.kind = Recorded::kMemset;
      r.dst = dst;
      r.byte = byte;
      r.bytes = bytes;
      r.refs.push_back({dst, bytes, "memset destination"});
      return h->Issue(r, d);
    };
    be.load = [](void *self, const gcc_kernel_set *ks, const gcc_nvrtc_output *img, int arch,
                 void **module, void **kernels, gcc_diag *d) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      bool cubin = img->cubin && img->cubin_size > 0, ptx = img->ptx && img->ptx_size > 0;
      if (cubin == ptx)
        return gcc_diag_set(d, GCC_ERR_INTERNAL,
                            "load: expected exactly one image (cubin %d, PTX %d)", cubin, ptx);
      auto mod = std::make_unique<EmulatedModule>();
      std::string err;
      if (!mod->Compile(ks->source, "device_plan", &err))
        return gcc_diag_set(d, GCC_ERR_INTERNAL, "%s", err.c_str());
      for (int i = 0; i < ks->n_kernels; i++) {
        LaunchFn f = mod->Find(ks->kernels[i].name, &err);
        if (!f)
          return gcc_diag_set(d, GCC_ERR_INTERNAL, "%s", err.c_str());
        kernels[i] = reinterpret_cast<void *>(f);
        h->module_of[f] = mod.get();
        h->kernel_name[f] = ks->kernels[i].name;
      }
      h->module_image[mod.get()] = {cubin, arch};
      h->sources.push_back(ks->source);
      *module = mod.get();
      h->modules.push_back(std::move(mod));
      return GCC_OK;
    };
    be.unload = [](void *self, void *module) {
      auto *h = static_cast<HostBackend *>(self);
      for (Graph *g : h->graphs)
        for (const Recorded &r : g->work)
          if (r.kind == Recorded::kLaunch && h->module_of[r.fn] == module) {
            h->violations.push_back("a module unloaded while a CUDA Graph launches its kernels");
            return;
          }
    };
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
        size_t sz = (kk == GCC_KARG_FIRST_STEP || kk == GCC_KARG_STEP_SIZE ||
                     kk == GCC_KARG_BC2_SQRT || kk == GCC_KARG_LR)
                        ? 4
                        : 8;
        std::memcpy(&v, args[i], sz);
        r.args.push_back(v);
        if (kk == GCC_KARG_INPUT || kk == GCC_KARG_OUTPUT || kk == GCC_KARG_PARAMS ||
            kk == GCC_KARG_GRADS || kk == GCC_KARG_STATE0 || kk == GCC_KARG_STATE1 ||
            kk == GCC_KARG_BAD_LABEL || kk == GCC_KARG_PARAM_COPY || kk == GCC_KARG_SCRATCH)
          r.refs.push_back({reinterpret_cast<const void *>(v), 1, "kernel argument"});
      }
      h->launches++;
      h->log += 'k';
      return h->Issue(r, d);
    };
    be.gemm_prepare = [](void *self, const gcc_colmajor_gemm *g, const gcc_gemm_operands *ops,
                         void **out, gcc_diag *d) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      *out = nullptr;
      char shape[160];
      snprintf(shape, sizeof shape, "gemm %lldx%lldx%lld %s %s", (long long)g->m, (long long)g->n,
               (long long)g->k, gcc_epilogue_name(g->epilogue),
               gcc_dtype_name(g->dtype ? g->dtype : GCC_DT_FLOAT32));
      h->prep_log.push_back(shape);
      if (h->capturing) {
        h->violations.push_back(std::string("cuBLASLt heuristic asked during a capture (") + shape +
                                ")");
        return gcc_diag_set(d, GCC_ERR_INTERNAL, "heuristic during capture");
      }
      bool none =
          h->refuse.count((int)g->epilogue) || (g->epilogue == GCC_EPI_BGRADB && g->n == 1) ||
          ((g->epilogue == GCC_EPI_DRELU || g->epilogue == GCC_EPI_DRELU_BGRAD) && g->k == 1);
      if (none)
        return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                            "cuBLASLt has no algorithm for a %lld x %lld x %lld %s GEMM with %s",
                            (long long)g->m, (long long)g->n, (long long)g->k,
                            gcc_dtype_name(g->dtype ? g->dtype : GCC_DT_FLOAT32),
                            gcc_epilogue_name(g->epilogue));
      bool needs_bias = g->epilogue != GCC_EPI_DEFAULT && g->epilogue != GCC_EPI_DRELU;
      bool needs_aux = g->epilogue == GCC_EPI_RELU_AUX_BIAS || g->epilogue == GCC_EPI_DRELU ||
                       g->epilogue == GCC_EPI_DRELU_BGRAD;
      if (needs_bias != (ops->bias != nullptr) || needs_aux != (ops->aux != nullptr))
        return gcc_diag_set(d, GCC_ERR_INTERNAL,
                            "gemm_prepare(%s): the heuristic must be asked with the bias and "
                            "aux pointers the epilogue uses",
                            gcc_epilogue_name(g->epilogue));
      auto *pr = new Prepared{*g, *ops};
      h->prepared.insert(pr);
      *out = pr;
      return GCC_OK;
    };
    be.gemm_release = [](void *self, void *pr) {
      auto *h = static_cast<HostBackend *>(self);
      auto *p = static_cast<Prepared *>(pr);
      if (!h->prepared.erase(p))
        h->violations.push_back("gemm_release of a handle that is not live");
      delete p;
    };
    be.gemm = [](void *self, void *pr, const void *a, const void *b, const void *c, void *dst,
                 gcc_diag *d) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      auto *p = static_cast<Prepared *>(pr);
      if (!h->prepared.count(p))
        return gcc_diag_set(d, GCC_ERR_INTERNAL, "gemm with a handle that is not live");
      const gcc_colmajor_gemm *g = &p->g;
      if (h->fail_gemm_at >= 0 && h->gemms == h->fail_gemm_at) {
        h->gemms++;
        return gcc_diag_set(d, GCC_ERR_DEVICE, "cublasLtMatmul failed: injected failure");
      }
      const void *ops[4] = {a, b, g->c_value >= 0 ? c : nullptr, dst};
      unsigned want[4] = {p->ops.align_a, p->ops.align_b, p->ops.align_c, p->ops.align_d};
      const char *names[4] = {"A", "B", "C", "D"};
      for (int i = 0; i < 4; i++)
        if (ops[i] && gcc_lt_alignment(ops[i]) < want[i])
          h->misaligned.insert(std::string("cublasLtMatmul: ") + names[i] + " is " +
                               std::to_string(gcc_lt_alignment(ops[i])) +
                               "-byte aligned, the algorithm was chosen for " +
                               std::to_string(want[i]) + " (" + gcc_epilogue_name(g->epilogue) +
                               ")");
      Recorded r;
      r.kind = Recorded::kGemm;
      r.gemm = *g;
      r.a = a;
      r.b = b;
      r.c = c;
      r.dst = dst;
      r.bias = p->ops.bias;
      r.aux = p->ops.aux;
      r.refs = {{a, 1, "GEMM A"},   {b, 1, "GEMM B"},         {ops[2], 1, "GEMM C"},
                {dst, 1, "GEMM D"}, {r.bias, 1, "GEMM bias"}, {r.aux, 1, "GEMM aux"}};
      h->gemms++;
      h->log += 'k';
      h->epilogues.push_back(gcc_epilogue_name(g->epilogue));
      return h->Issue(r, d);
    };
    // cuDNN's convolutions and poolings: the node's own CPU kernel on the
    // device (here: host) addresses, with the workspace the plan gives it
    // (the CPU kernel's im2col scratch stands for cuDNN's workspace)
    be.library_prepare = [](void *self, const gcc_graph *g, int node, size_t *ws,
                            gcc_diag *d) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      h->prep_log.push_back(std::string("library ") + g->nodes[node].name);
      if (h->capturing) {
        h->violations.push_back(std::string("cuDNN algorithm chosen during a capture (node ") +
                                g->nodes[node].name + ")");
        return gcc_diag_set(d, GCC_ERR_INTERNAL, "algorithm choice during capture");
      }
      *ws = gcc_cpu_workspace(g, node);
      h->lib_prepared.insert({g, node});
      return GCC_OK;
    };
    be.library_op = [](void *self, const gcc_graph *g, int node, void *const *in, void *const *out,
                       void *ws, size_t ws_bytes, gcc_diag *d) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      if (!h->lib_prepared.count({g, node}))
        return gcc_diag_set(d, GCC_ERR_INTERNAL, "library call of node %d before its prepare",
                            node);
      Recorded r;
      r.kind = Recorded::kLibrary;
      r.graph = g;
      r.node = node;
      const gcc_node *n = &g->nodes[node];
      r.lib_in.assign(in, in + n->n_inputs);
      r.lib_out.assign(out, out + n->n_outputs);
      for (int k = 0; k < n->n_inputs; k++)
        r.refs.push_back({in[k], 1, "library input"});
      for (int k = 0; k < n->n_outputs; k++)
        r.refs.push_back({out[k], 1, "library output"});
      size_t need = gcc_cpu_workspace(g, node);
      if (need > ws_bytes)
        return gcc_diag_set(d, GCC_ERR_INTERNAL, "node %d needs a %zu-byte workspace, got %zu",
                            node, need, ws_bytes);
      r.workspace = ws;
      r.workspace_bytes = ws_bytes;
      if (need)
        r.refs.push_back({ws, need, "cuDNN workspace"});
      h->library_calls++;
      h->log += 'k';
      bool b16 = false;
      for (int k = 0; k < n->n_inputs + n->n_outputs; k++) {
        int v = k < n->n_inputs ? n->inputs[k] : n->outputs[k - n->n_inputs];
        b16 |= v >= 0 &&
               (g->values[v].dtype == GCC_DT_BFLOAT16 || g->values[v].dtype == GCC_DT_FLOAT16);
      }
      h->library_ops.push_back({n->op, b16});
      h->conv_relu_calls += gcc_fusion_conv_relu(g, node) >= 0;
      return h->Issue(r, d);
    };
    be.event_record = [](void *self, int e, int stream, gcc_diag *) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      h->event_mark[e] = {stream, stream == GCC_STREAM_COPY ? h->copy_seq : h->compute_dep};
      if (e == GCC_EVENT_STEP_DONE || e == GCC_EVENT_STEP_DONE + 1)
        h->event_step[e] = h->steps_recorded++;
      return GCC_OK;
    };
    be.stream_wait = [](void *self, int stream, int e, gcc_diag *) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      auto it = h->event_mark.find(e);
      if (stream == GCC_STREAM_COMPUTE && it != h->event_mark.end())
        h->compute_dep = std::max(h->compute_dep, it->second.second);
      return GCC_OK;
    };
    be.event_sync = [](void *self, int e, gcc_diag *) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      h->event_syncs++;
      h->log += 'e';
      auto it = h->event_mark.find(e);
      if (it != h->event_mark.end())
        h->Drain(it->second.second);
      if (h->event_step.count(e))
        h->step_waits.push_back({h->steps_recorded, h->event_step[e]});
      return GCC_OK;
    };
    be.sync = [](void *self, gcc_diag *) -> gcc_status {
      static_cast<HostBackend *>(self)->device_syncs++;
      static_cast<HostBackend *>(self)->log += 's';
      static_cast<HostBackend *>(self)->Drain(UINT64_MAX);
      return GCC_OK;
    };
    be.capture_begin = [](void *self, gcc_diag *) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      h->prep_log.push_back("capture");
      h->capturing = true;
      h->rec.clear();
      return GCC_OK;
    };
    be.capture_end = [](void *self, void **out, gcc_diag *d) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      h->capturing = false;
      *out = nullptr;
      if (h->fail_capture) { // what was recorded is dropped, as cudaStreamEndCapture does
        h->rec.clear();
        return gcc_diag_set(d, GCC_ERR_DEVICE,
                            "cudaStreamEndCapture: operation not permitted when stream is "
                            "capturing (cudaErrorStreamCaptureInvalidated, emulated)");
      }
      h->log += 'c';
      auto *g = new Graph{h->rec};
      h->graphs.insert(g);
      h->captures++;
      *out = g;
      return GCC_OK;
    };
    be.graph_launch = [](void *self, void *graph, gcc_diag *d) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      auto *g = static_cast<Graph *>(graph);
      if (!h->graphs.count(g))
        return gcc_diag_set(d, GCC_ERR_INTERNAL, "launch of a CUDA Graph that is not live");
      h->replays++;
      h->log += 'g';
      h->BeforeCompute();
      for (const Recorded &r : g->work)
        GCC_TRY(h->Run(r, d));
      return GCC_OK;
    };
    // NCCL's all-reduce on the communication stream: here, once the
    // compute work before it is done, the communicator (MPI standing in for
    // NCCL behind runtime/comm.h) sums each gradient in place
    be.collective = [](void *self, gcc_comm *comm, void *const *grads, const int64_t *numel, int n,
                       float weight, int bucket, gcc_diag *d) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      if (h->capturing) {
        h->violations.push_back("an all-reduce inside a CUDA Graph capture");
        return gcc_diag_set(d, GCC_ERR_INTERNAL, "all-reduce under capture");
      }
      h->BeforeCompute();
      for (int k = 0; k < n; k++) {
        if (!h->Live(grads[k], (size_t)numel[k] * sizeof(float))) {
          h->violations.push_back("all-reduce of memory that is not live device memory");
          return gcc_diag_set(d, GCC_ERR_DEVICE, "illegal address in an all-reduce");
        }
        GCC_TRY(comm->allreduce_f32(comm, static_cast<float *>(grads[k]), numel[k], weight, nullptr,
                                    d));
      }
      if (!h->collective_log.empty() && h->collective_log.back().first == 'w')
        h->comm_step++; // a reduction after a wait: the next step's backward pass
      h->collective_log.push_back({'r', bucket});
      h->reduced_in[bucket] = h->comm_step;
      return GCC_OK;
    };
    be.collective_wait = [](void *self, int bucket, gcc_diag *) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      h->collective_log.push_back({'w', bucket});
      auto it = h->reduced_in.find(bucket);
      if (it == h->reduced_in.end() || it->second != h->comm_step)
        h->violations.push_back("the compute stream waits for bucket " + std::to_string(bucket) +
                                ", which was not reduced in this step");
      return GCC_OK;
    };
    be.launch_limits = [](void *self, void *kernel, gcc_launch_limits *out,
                          gcc_diag *) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      out->max_threads_per_block = h->max_threads;
      out->max_grid_x = h->max_grid_x;
      out->max_block_x = h->max_block_x;
      out->max_dynamic_smem = h->max_dyn_smem;
      auto it = h->kernel_name.find(reinterpret_cast<LaunchFn>(kernel));
      if (!h->limit_prefix.empty() &&
          (it == h->kernel_name.end() || it->second.rfind(h->limit_prefix, 0) != 0)) {
        out->max_threads_per_block = out->max_block_x = 1024; // an H100's, for the others
        out->max_grid_x = INT_MAX;
        out->max_dynamic_smem = 227 * 1024;
      }
      return GCC_OK;
    };
    be.timer_reserve = [](void *self, int n, gcc_diag *) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      if ((int)h->timer_ms.size() < n)
        h->timer_ms.resize((size_t)n, std::nan(""));
      return GCC_OK;
    };
    be.timer_record = [](void *self, int id, int stream, gcc_diag *d) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      if (id < 0 || id >= (int)h->timer_ms.size())
        return gcc_diag_set(d, GCC_ERR_INTERNAL, "timing event %d not reserved", id);
      if (h->capturing)
        h->violations.push_back("a timing event recorded inside a capture");
      if (stream == GCC_STREAM_COPY) // the copies before it are done when it is
        h->Drain(h->copy_seq);
      h->timer_ms[(size_t)id] = NowMs();
      h->timer_records++;
      return GCC_OK;
    };
    be.timer_elapsed = [](void *self, int a, int b, double *ms, gcc_diag *d) -> gcc_status {
      auto *h = static_cast<HostBackend *>(self);
      if (a < 0 || b < 0 || a >= (int)h->timer_ms.size() || b >= (int)h->timer_ms.size() ||
          std::isnan(h->timer_ms[(size_t)a]) || std::isnan(h->timer_ms[(size_t)b]))
        return gcc_diag_set(d, GCC_ERR_DEVICE,
                            "cudaEventElapsedTime: cudaErrorInvalidResourceHandle (an event "
                            "never recorded)");
      *ms = h->timer_ms[(size_t)b] - h->timer_ms[(size_t)a];
      return GCC_OK;
    };
    be.range_push = [](void *self, const char *name) {
      auto *h = static_cast<HostBackend *>(self);
      h->ranges.push_back(name);
      h->range_depth++;
    };
    be.range_pop = [](void *self) {
      auto *h = static_cast<HostBackend *>(self);
      if (--h->range_depth < 0)
        h->violations.push_back("nvtxRangePop without a range");
    };
    be.graph_destroy = [](void *self, void *graph) {
      auto *h = static_cast<HostBackend *>(self);
      auto *g = static_cast<Graph *>(graph);
      if (!h->graphs.erase(g))
        h->violations.push_back("graph_destroy of a graph that is not live");
      delete g;
    };
  }

  ~HostBackend() {
    for (Graph *g : graphs)
      delete g;
    for (Prepared *p : prepared)
      delete p;
  }

  // The memory index of NCHW element i of a 4-D value laid out NHWC.
  static size_t NhwcIndex(const gcc_shape &s, size_t i) {
    const size_t C = (size_t)s.dims[1], H = (size_t)s.dims[2], W = (size_t)s.dims[3];
    const size_t w = i % W, h = (i / W) % H, c = (i / (W * H)) % C, nn = i / (W * H * C);
    return ((nn * H + h) * W + w) * C + c;
  }

  gcc_status Run(const Recorded &r, gcc_diag *d) {
    GCC_TRY(Check(r, d));
    switch (r.kind) {
    case Recorded::kLaunch: {
      if ((int)r.block > max_threads || (int)r.block > max_block_x || (int)r.grid > max_grid_x ||
          r.grid < 1 || r.block < 1) {
        violations.push_back("a launch past the device's limits (" + std::to_string(r.grid) +
                             " blocks of " + std::to_string(r.block) + " threads)");
        return gcc_diag_set(d, GCC_ERR_DEVICE,
                            "cudaLaunchKernel failed: cudaErrorInvalidConfiguration (emulated)");
      }
      auto mi = module_of.find(r.fn);
      if (mi != module_of.end()) { // lazy loading: the image meets the device here
        std::pair<bool, int> img = module_image[mi->second];
        bool runs = img.first ? img.second / 10 == be.arch / 10 && img.second % 10 <= be.arch % 10
                              : img.second <= be.arch;
        if (!runs)
          return gcc_diag_set(d, GCC_ERR_DEVICE,
                              "cudaLaunchKernel failed: cudaErrorNoKernelImageForDevice (the "
                              "%s for %s_%d does not run on sm_%d; found at the first launch: "
                              "lazy loading)",
                              img.first ? "cubin" : "PTX", img.first ? "sm" : "compute", img.second,
                              be.arch);
      }
      std::vector<uint64_t> vals = r.args;
      std::vector<void *> ptrs;
      for (uint64_t &v : vals)
        ptrs.push_back(&v);
      r.fn(r.grid, r.block, ptrs.data());
      return GCC_OK;
    }
    case Recorded::kGemm:
      ColMajorGemmOfDtype(r.gemm, r.a, r.b, r.c, r.dst, r.bias, static_cast<uint8_t *>(r.aux));
      return GCC_OK;
    case Recorded::kMemset: std::memset(r.dst, r.byte, r.bytes); return GCC_OK;
    case Recorded::kCopy: std::memcpy(r.dst, r.src, r.bytes); return GCC_OK;
    case Recorded::kLibrary: {
      const gcc_node *n = &r.graph->nodes[r.node];
      std::vector<gcc_tensor> ts(n->n_inputs + n->n_outputs);
      std::vector<gcc_tensor *> in(n->n_inputs), out(n->n_outputs);
      // 16-bit operands widened, NHWC operands in NCHW order: the CPU
      // kernel's float32 NCHW view of the operand
      std::vector<std::vector<float>> wide(ts.size());
      std::vector<int> is16(ts.size(), 0), nhwc(ts.size(), 0);
      for (int k = 0; k < n->n_inputs + n->n_outputs; k++) {
        int v = k < n->n_inputs ? n->inputs[k] : n->outputs[k - n->n_inputs];
        void *ptr = k < n->n_inputs ? r.lib_in[k] : r.lib_out[k - n->n_inputs];
        if (v < 0)
          continue;
        const gcc_value *val = &r.graph->values[v];
        ts[k] = gcc_tensor{val->dtype, val->shape, gcc_shape_numel(&val->shape, nullptr), ptr};
        is16[k] = val->dtype == GCC_DT_BFLOAT16 || val->dtype == GCC_DT_FLOAT16;
        // cuDNN with CUDNN_TENSOR_NHWC descriptors (filters KRSC): the
        // layout pass's channels-last operands, read and written here in
        // their memory order
        nhwc[k] = val->layout == GCC_LAYOUT_NHWC;
        if (is16[k] || nhwc[k]) {
          // cuDNN computes 16-bit data in float32: the CPU kernel on widened
          // copies, its results rounded back (as the plan runs CPU nodes)
          std::vector<float> &f = wide[k];
          f.resize((size_t)ts[k].numel);
          const uint16_t *h = static_cast<const uint16_t *>(ptr);
          const float *p32 = static_cast<const float *>(ptr);
          for (size_t i = 0; k < n->n_inputs && i < f.size(); i++) {
            size_t src = nhwc[k] ? NhwcIndex(val->shape, i) : i;
            f[i] = !is16[k]                        ? p32[src]
                   : val->dtype == GCC_DT_BFLOAT16 ? gcc_bf16_to_f32(h[src])
                                                   : gcc_f16_to_f32(h[src]);
          }
          ts[k].dtype = GCC_DT_FLOAT32;
          ts[k].data = f.data();
        }
      }
      for (int k = 0; k < n->n_inputs; k++)
        in[k] = n->inputs[k] >= 0 ? &ts[k] : nullptr;
      for (int k = 0; k < n->n_outputs; k++)
        out[k] = &ts[n->n_inputs + k];
      // cuDNN stores a 16-bit convolution's result, then adds the bias to it
      // (cudnnAddTensor): the kernel without B, B added after rounding
      const float *bias_after = nullptr;
      if (gcc_cpu_op_of(n->op)->bias_after_16bit && n->n_inputs > 2 && n->inputs[2] >= 0 &&
          is16[n->n_inputs]) {
        bias_after = static_cast<const float *>(ts[2].data);
        in[2] = nullptr;
      }
      size_t ws = gcc_cpu_workspace(r.graph, r.node);
      gcc_cpu_ctx ctx{};
      ctx.max_threads = 1;
      ctx.diag = d;
      ctx.source = r.graph->source;
      gcc_kernel_args ka{n,
                         in.data(),
                         n->n_inputs,
                         out.data(),
                         n->n_outputs,
                         &ctx,
                         ws ? r.workspace : nullptr,
                         ws ? r.workspace_bytes : 0,
                         nullptr};
      gcc_status st = gcc_cpu_op_of(n->op)->kernel(&ka);
      // a Conv with its Relu fused (float32 only): the plan passed the
      // Relu's output, and cuDNN applies max(y, 0) after the bias, NaN kept
      // (CUDNN_PROPAGATE_NAN), whether in one fused call or two
      if (st == GCC_OK && gcc_fusion_conv_relu(r.graph, r.node) >= 0) {
        const gcc_tensor &y = ts[n->n_inputs];
        float *f = static_cast<float *>(y.data);
        for (int64_t i = 0; i < y.numel; i++)
          f[i] = f[i] < 0.0f ? 0.0f : f[i];
      }
      if (st == GCC_OK && bias_after) {
        const gcc_tensor &y = ts[n->n_inputs];
        bool bf = r.graph->values[n->outputs[0]].dtype == GCC_DT_BFLOAT16;
        int64_t inner = 1;
        for (int q = 2; q < y.shape.ndim; q++)
          inner *= y.shape.dims[q];
        std::vector<float> &f = wide[n->n_inputs];
        for (size_t i = 0; i < f.size(); i++)
          f[i] =
              (bf ? gcc_bf16_to_f32(gcc_f32_to_bf16(f[i])) : gcc_f16_to_f32(gcc_f32_to_f16(f[i]))) +
              bias_after[(i / (size_t)inner) % (size_t)y.shape.dims[1]];
      }
      for (int k = n->n_inputs; k < n->n_inputs + n->n_outputs && st == GCC_OK; k++) {
        if (wide[k].empty())
          continue;
        const gcc_value *val = &r.graph->values[n->outputs[k - n->n_inputs]];
        bool bf = val->dtype == GCC_DT_BFLOAT16;
        uint16_t *h = static_cast<uint16_t *>(r.lib_out[k - n->n_inputs]);
        float *p32 = static_cast<float *>(r.lib_out[k - n->n_inputs]);
        for (size_t i = 0; i < wide[k].size(); i++) {
          size_t dst = nhwc[k] ? NhwcIndex(val->shape, i) : i;
          if (!is16[k])
            p32[dst] = wide[k][i];
          else
            h[dst] = bf ? gcc_f32_to_bf16(wide[k][i]) : gcc_f32_to_f16(wide[k][i]);
        }
      }
      return st;
    }
    }
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "unknown recorded work");
  }
};

// The persistent values (parameters) of a plan compiled from `model`, for
// gcc_plan_compile's bind function: on the CPU the model's own initializer
// data; for a CUDA plan (`hb` not NULL) a copy of it in the backend's
// device memory, as a session uploads weights, released with this object.
class ModelWeights {
public:
  ModelWeights(const gcc_graph *model, HostBackend *hb) : model_(model), hb_(hb) {}
  ModelWeights(const ModelWeights &) = delete;
  ModelWeights &operator=(const ModelWeights &) = delete;
  ~ModelWeights() {
    for (void *p : blocks_)
      hb_->be.release(hb_->be.self, p);
  }
  static void *Bind(void *user, const gcc_graph *g, int v) {
    auto *w = static_cast<ModelWeights *>(user);
    int mv = gcc_graph_find(w->model_, g->values[v].name);
    if (mv < 0 || !w->model_->values[mv].data)
      return nullptr;
    const gcc_value *val = &w->model_->values[mv];
    if (!w->hb_)
      return val->data;
    size_t bytes = (size_t)gcc_shape_numel(&val->shape, nullptr) * gcc_dtype_size(val->dtype);
    void *p = nullptr;
    gcc_diag d{};
    if (w->hb_->be.alloc(w->hb_->be.self, bytes ? bytes : 1, &p, &d) != GCC_OK)
      return nullptr;
    std::memcpy(p, val->data, bytes);
    w->blocks_.push_back(p);
    return p;
  }

private:
  const gcc_graph *model_;
  HostBackend *hb_;
  std::vector<void *> blocks_;
};

} // namespace gcc_host_test

#endif // GCC_TESTS_HOST_BACKEND_H_
