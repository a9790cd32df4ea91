// device_plan_test: the CUDA execution path without a GPU.
//
// runtime/plan.c (the runner every CUDA plan goes through: memory
// layout, argument binding, optimizer sections, ReLU bit-masks, input
// double-buffering, the read-back ring, CUDA Graph capture and replay) is
// driven here through a host backend that implements gcc_device_backend
// exactly as the CUDA backend's contract says:
//  - generated kernels: the plan's CUDA C compiled with the host compiler and
//    tests/cuda_host_shim.h (tests/kernel_emulation.h) and launched through
//    the same argument arrays cudaLaunchKernel would get; the cubin NVRTC made
//    for sm_90 is required to exist;
//  - GEMMs: the column-major call of codegen/gemm_map.h executed by OpenBLAS
//    in column-major mode (cblas_sgemm(CblasColMajor, ...) has cuBLAS's
//    semantics) plus the cuBLASLt epilogue written out in loops (bias, ReLU,
//    ReLU bit-mask, DRELU, bias gradients);
//  - capture records the issued work with its argument *values* and replay
//    re-issues the recording, as a CUDA Graph does.
// Every result is compared with the CPU backend (a CPU session of the same
// model): training losses and parameters after several steps, evaluation,
// bad labels, out-of-memory messages.
#include <cblas.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "graph/builder.h"
#include "codegen/lowering.h"
#include "graph/ops.h"
#include "models/models.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/plan.h"
#include "codegen/gemm_map.h"
#include "runtime/session.h"
#include "runtime/trainer.h"
#include "codegen/kernel_cache.h"
}
#include <sys/stat.h>
#include "tests/kernel_emulation.h"

namespace {

// NVRTC without the on-disk cache (the plans' kernel compiler)
const gcc_kernel_cache_config kNoKernelCache = {nullptr, 0};

using gcc_emu_test::EmulatedModule;
using gcc_emu_test::LaunchFn;

// ---- the column-major GEMM with its epilogue, as cuBLASLt defines it --------

void ColMajorGemm(const gcc_colmajor_gemm &m, const float *A, const float *B, const float *C,
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
                         ws ? scratch.data() : nullptr, ws, nullptr};
      return gcc_cpu_op_of(n->op)->kernel(&ka);
    }
    }
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "unknown recorded work");
  }
};

// ---- models and data -------------------------------------------------------

gcc_graph *SmallMlp(gcc_opt_kind kind, bool bias_free_last = false) {
  gcc_builder *b = gcc_builder_new("small_mlp", 11);
  int64_t xd[4] = {GCC_BATCH_DIM, 1, 6, 6}, yd[1] = {GCC_BATCH_DIM};
  int x = gcc_build_input(b, "image", GCC_DT_FLOAT32, 4, xd);
  int y = gcc_build_input(b, "label", GCC_DT_INT64, 1, yd);
  int h = gcc_build_flatten(b, "flatten", x, 1);
  h = gcc_build_relu(b, "relu1", gcc_build_linear(b, "fc1", h, 36, 24));
  h = gcc_build_relu(b, "relu2", gcc_build_linear(b, "fc2", h, 24, 16));
  int logits;
  if (bias_free_last) {  // MatMul: no bias, no transpose
    int64_t wd[2] = {16, 5};
    std::vector<float> w(80);
    for (int i = 0; i < 80; i++)
      w[i] = 0.05f * (float)((i * 7) % 11 - 5);
    int W = gcc_build_param(b, "fc3.w", 2, wd, w.data());
    int in[2] = {h, W};
    logits = gcc_build_op(b, GCC_OP_MATMUL, "fc3", "fc3.out", in, 2);
  } else {
    logits = gcc_build_linear(b, "fc3", h, 16, 5);
  }
  int loss = gcc_build_cross_entropy(b, "loss", logits, y, -1);
  gcc_build_output(b, loss);
  gcc_build_training_spec ts{};
  ts.loss = "loss";
  ts.prediction = bias_free_last ? "fc3.out" : "fc3.out";
  ts.input = "image";
  ts.target = "label";
  ts.dataset = "inline";
  ts.opt.kind = kind;
  ts.opt.lr = kind == GCC_OPT_ADAM ? 0.01f : 0.1f;
  ts.opt.momentum = 0.5f;
  ts.opt.beta1 = 0.9f;
  ts.opt.beta2 = 0.999f;
  ts.opt.eps = 1e-8f;
  ts.opt.weight_decay = kind == GCC_OPT_ADAM ? 1e-2f : 0.0f;
  ts.batch_size = 8;
  ts.epochs = 1;
  gcc_build_training(b, &ts);
  gcc_graph *g = nullptr;
  gcc_diag d{};
  EXPECT_EQ(gcc_builder_finish(b, &g, &d), GCC_OK) << d.msg;
  return g;
}

struct Batch {
  std::vector<float> x;
  std::vector<int64_t> y;
  int64_t rows;
};

Batch MakeBatch(int64_t rows, int64_t features, int classes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  Batch b{std::vector<float>((size_t)(rows * features)), std::vector<int64_t>((size_t)rows), rows};
  for (float &v : b.x)
    v = n(rng);
  for (int64_t &v : b.y)
    v = (int64_t)(rng() % (uint32_t)classes);
  return b;
}

gcc_session_options CpuOptions(const gcc_graph *g) {
  gcc_session_options so{};
  so.threads = 1;
  so.opt = g->training.opt;
  return so;
}

// sm_count sizes the grids: 132 (an H100) emulates 4224 blocks of 256
// threads per launch, so the tests of big models use 4 (grids are
// grid-stride: any size computes the same).
gcc_session_options DeviceOptions(const gcc_graph *g, HostBackend *hb, bool graphs, int pending,
                                  int sm_count = 4) {
  gcc_session_options so = CpuOptions(g);
  so.backend = &hb->be;
  so.device = GCC_DEV_CUDA(0);
  so.plan.sm = 90;
  so.plan.sm_count = sm_count;
  so.plan.compile = gcc_kernel_cache_hook;
  so.plan.compile_user = (void *)&kNoKernelCache;
  so.plan.cuda_graph = graphs ? 1 : 0;
  so.max_pending = pending;
  return so;
}

double MaxRelErr(const float *a, const float *b, int64_t n) {
  double m = 0, e = 0;
  for (int64_t i = 0; i < n; i++) {
    m = std::max(m, std::fabs((double)b[i]));
    e = std::max(e, std::fabs((double)a[i] - (double)b[i]));
  }
  return m > 0 ? e / m : e;
}

void ExpectSameParameters(const gcc_graph *g, gcc_session *dev, gcc_session *cpu, double tol) {
  for (int v = 0; v < g->n_values; v++) {
    if (g->values[v].kind != GCC_VALUE_PARAM)
      continue;
    int64_t n1 = 0, n2 = 0;
    float *a = nullptr;
    gcc_session_param(dev, g->values[v].name, &a, &n1, nullptr);
    float *b = nullptr;
    gcc_session_param(cpu, g->values[v].name, &b, &n2, nullptr);
    ASSERT_TRUE(a && b) << g->values[v].name;
    ASSERT_EQ(n1, n2);
    EXPECT_LE(MaxRelErr(a, b, n1), tol) << g->values[v].name;
  }
}

// Trains `steps` steps (the last batch `last_rows` rows) on the device
// session and on a CPU session; losses and parameters must agree.
void TrainAndCompare(gcc_graph *g, bool graphs, int pending, int steps, int64_t rows,
                     int64_t last_rows, HostBackend *hb, double tol, int sm_count = 4) {
  gcc_diag d{};
  gcc_session *cpu = nullptr, *dev = nullptr;
  gcc_session_options co = CpuOptions(g), dso = DeviceOptions(g, hb, graphs, pending, sm_count);
  ASSERT_EQ(gcc_session_create(g, &co, &cpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  std::vector<float> cpu_losses, dev_losses(steps);
  int collected = 0;
  for (int s = 0; s < steps; s++) {
    int64_t r = s == steps - 1 ? last_rows : rows;
    Batch b = MakeBatch(r, 36, 5, 100 + (uint32_t)s);
    float l = 0;
    ASSERT_EQ(gcc_session_train_step(cpu, b.x.data(), b.y.data(), r, &l, &d), GCC_OK) << d.msg;
    cpu_losses.push_back(l);
    ASSERT_EQ(gcc_session_train_step_async(dev, b.x.data(), b.y.data(), r, &d), GCC_OK) << d.msg;
    // the host buffers may be reused as soon as the call returns
    std::fill(b.x.begin(), b.x.end(), 1e30f);
    if ((s + 1) % pending == 0 || s == steps - 1) {
      int n = 0;
      ASSERT_EQ(gcc_session_collect_losses(dev, dev_losses.data() + collected, pending, &n, &d),
                GCC_OK)
          << d.msg;
      collected += n;
    }
  }
  ASSERT_EQ(collected, steps);
  for (int s = 0; s < steps; s++)
    EXPECT_NEAR(dev_losses[s], cpu_losses[s], 1e-5 * std::max(1.0f, std::fabs(cpu_losses[s])))
        << "step " << s;
  ExpectSameParameters(g, dev, cpu, tol);
  // evaluation: loss and correct count as on the CPU
  Batch e = MakeBatch(20, 36, 5, 999);
  float l1 = 0, l2 = 0;
  int64_t c1 = -2, c2 = -3;
  const gcc_tensor *p1 = nullptr, *p2 = nullptr;
  ASSERT_EQ(gcc_session_eval_batch(dev, e.x.data(), e.y.data(), 20, &l1, &c1, &p1, &d), GCC_OK)
      << d.msg;
  ASSERT_EQ(gcc_session_eval_batch(cpu, e.x.data(), e.y.data(), 20, &l2, &c2, &p2, &d), GCC_OK)
      << d.msg;
  EXPECT_NEAR(l1, l2, 1e-5 * std::max(1.0f, std::fabs(l2)));
  EXPECT_EQ(c1, c2);
  ASSERT_TRUE(p1 && p2);
  EXPECT_LE(MaxRelErr((const float *)p1->data, (const float *)p2->data, 100), tol);
  gcc_session_destroy(dev);
  gcc_session_destroy(cpu);
  EXPECT_EQ(hb->used, 0u) << "device memory leaked";
}

class DevicePlan : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gcc_emu_test::ShimPath().empty())
      GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  }
};

TEST_F(DevicePlan, SgdTrainingMatchesTheCpuBackendStepByStep) {
  HostBackend hb;
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  TrainAndCompare(g, /*graphs=*/false, /*pending=*/1, 6, 8, 5, &hb, 1e-5, /*sm_count=*/132);
  // every GEMM went through cuBLASLt epilogues, the forward ReLUs with bit-masks
  bool aux = false, drelu = false, bgradb = false;
  for (const std::string &e : hb.epilogues) {
    aux |= e == "CUBLASLT_EPILOGUE_RELU_AUX_BIAS";
    drelu |= e == "CUBLASLT_EPILOGUE_DRELU_BGRAD";
    bgradb |= e == "CUBLASLT_EPILOGUE_BGRADB";
  }
  EXPECT_TRUE(aux && drelu && bgradb);
  EXPECT_EQ(hb.captures, 0);
  gcc_graph_free(g);
}

TEST_F(DevicePlan, CudaGraphReplayGivesTheSameTrainingAsIssuingEveryStep) {
  HostBackend hb;
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  // losses collected every 4 steps: 4 ring entries in flight
  TrainAndCompare(g, /*graphs=*/true, /*pending=*/4, 9, 8, 8, &hb, 1e-5);
  EXPECT_EQ(hb.captures, 2) << "one graph per input slot";
  EXPECT_GE(hb.replays, 6);
  gcc_graph_free(g);
}

TEST_F(DevicePlan, AdamPlansAreNotCapturedAndMatchTheCpuBackend) {
  HostBackend hb;
  gcc_graph *g = SmallMlp(GCC_OPT_ADAM, /*bias_free_last=*/true);
  TrainAndCompare(g, /*graphs=*/true, /*pending=*/3, 7, 8, 3, &hb, 2e-5);
  EXPECT_EQ(hb.captures, 0);
  gcc_graph_free(g);
}

TEST_F(DevicePlan, MnistMlpPlanRunsTheSixteenLaunchesAndMatchesTheCpu) {
  HostBackend hb;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &g, &d), GCC_OK) << d.msg;
  gcc_session_options co = CpuOptions(g), dso = DeviceOptions(g, &hb, true, 2);
  gcc_session *cpu = nullptr, *dev = nullptr;
  ASSERT_EQ(gcc_session_create(g, &co, &cpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  gcc_plan *p = nullptr;
  ASSERT_EQ(gcc_session_plan(dev, GCC_MODE_TRAIN, 16, &p, &d), GCC_OK) << d.msg;
  EXPECT_EQ(gcc_plan_launches(p), 16);  // 14 cuBLASLt GEMMs, the loss and the optimizer kernel
  EXPECT_EQ(gcc_plan_copies(p), 3);     // image and label H2D, loss D2H
  EXPECT_STREQ(gcc_plan_graph_note(p), "");
  for (int s = 0; s < 4; s++) {
    Batch b = MakeBatch(16, 784, 10, 7 + (uint32_t)s);
    float l1 = 0, l2 = 0;
    ASSERT_EQ(gcc_session_train_step(dev, b.x.data(), b.y.data(), 16, &l1, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_train_step(cpu, b.x.data(), b.y.data(), 16, &l2, &d), GCC_OK) << d.msg;
    EXPECT_NEAR(l1, l2, 1e-5 * std::max(1.0f, std::fabs(l2))) << "step " << s;
  }
  EXPECT_GE(gcc_plan_graph_replays(p), 1);
  ExpectSameParameters(g, dev, cpu, 2e-5);
  gcc_session_destroy(dev);
  gcc_session_destroy(cpu);
  gcc_graph_free(g);
}

// The CIFAR-10 tutorial CNN on the device: convolutions and poolings go to
// the backend's library calls (cuDNN on a GPU), the rest to cuBLASLt and
// generated kernels; a few SGD steps and an evaluation against the CPU.
TEST_F(DevicePlan, CifarCnnWithLibraryConvolutionsMatchesTheCpuBackend) {
  HostBackend hb;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_cifar_cnn(GCC_CIFAR_CNN_SEED, &g, &d), GCC_OK) << d.msg;
  gcc_session_options co = CpuOptions(g), dso = DeviceOptions(g, &hb, true, 2);
  gcc_session *cpu = nullptr, *dev = nullptr;
  ASSERT_EQ(gcc_session_create(g, &co, &cpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  for (int s = 0; s < 4; s++) {
    Batch b = MakeBatch(8, 3 * 32 * 32, 10, 77 + (uint32_t)s);
    float l1 = 0, l2 = 0;
    ASSERT_EQ(gcc_session_train_step(dev, b.x.data(), b.y.data(), 8, &l1, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_train_step(cpu, b.x.data(), b.y.data(), 8, &l2, &d), GCC_OK) << d.msg;
    EXPECT_NEAR(l1, l2, 1e-5 * std::max(1.0f, std::fabs(l2))) << "step " << s;
  }
  EXPECT_GT(hb.library_calls, 0);
  gcc_plan *p = nullptr;
  ASSERT_EQ(gcc_session_plan(dev, GCC_MODE_TRAIN, 8, &p, &d), GCC_OK) << d.msg;
  EXPECT_GE(gcc_plan_graph_replays(p), 1) << gcc_plan_graph_note(p);
  ExpectSameParameters(g, dev, cpu, 1e-5);
  Batch e = MakeBatch(16, 3 * 32 * 32, 10, 5);
  float l1 = 0, l2 = 0;
  int64_t c1 = -1, c2 = -2;
  ASSERT_EQ(gcc_session_eval_batch(dev, e.x.data(), e.y.data(), 16, &l1, &c1, nullptr, &d), GCC_OK)
      << d.msg;
  ASSERT_EQ(gcc_session_eval_batch(cpu, e.x.data(), e.y.data(), 16, &l2, &c2, nullptr, &d), GCC_OK)
      << d.msg;
  EXPECT_NEAR(l1, l2, 1e-5 * std::max(1.0f, std::fabs(l2)));
  EXPECT_EQ(c1, c2);
  gcc_session_destroy(dev);
  gcc_session_destroy(cpu);
  gcc_graph_free(g);
}

TEST_F(DevicePlan, ALabelOutOfRangeIsReportedWhenTheLossesAreCollected) {
  HostBackend hb;
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  gcc_session_options dso = DeviceOptions(g, &hb, false, 2);
  gcc_session *dev = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  Batch b = MakeBatch(8, 36, 5, 1);
  b.y[3] = 5;  // classes are 0..4
  ASSERT_EQ(gcc_session_train_step_async(dev, b.x.data(), b.y.data(), 8, &d), GCC_OK) << d.msg;
  float losses[2];
  int n = 0;
  EXPECT_EQ(gcc_session_collect_losses(dev, losses, 2, &n, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d.msg).find("'loss'"), std::string::npos) << d.msg;
  EXPECT_NE(std::string(d.msg).find("row 3"), std::string::npos) << d.msg;
  gcc_session_destroy(dev);
  gcc_graph_free(g);
}

// gcc_session_param / _grad tell an unknown name from a device that fails
// to give the parameters back.
TEST_F(DevicePlan, SessionParamSaysWhetherTheNameIsUnknownOrTheDeviceFailed) {
  HostBackend hb;
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  gcc_session_options dso = DeviceOptions(g, &hb, false, 1);
  gcc_session *dev = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  Batch b = MakeBatch(8, 36, 5, 1);
  float loss = 0;
  ASSERT_EQ(gcc_session_train_step(dev, b.x.data(), b.y.data(), 8, &loss, &d), GCC_OK) << d.msg;
  float *p = nullptr;
  int64_t n = 0;
  EXPECT_EQ(gcc_session_param(dev, "no.such.weight", &p, &n, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d.msg).find("'no.such.weight' is not a parameter"), std::string::npos)
      << d.msg;
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(gcc_session_grad(dev, "no.such.weight", &p, &n, &d), GCC_ERR_INVALID_ARGUMENT);
  hb.fail_d2h = true;  // the parameters are newer on the device: the copy back fails
  EXPECT_EQ(gcc_session_param(dev, "fc1.weight", &p, &n, &d), GCC_ERR_DEVICE);
  EXPECT_NE(std::string(d.msg).find("fc1.weight"), std::string::npos) << d.msg;
  EXPECT_NE(std::string(d.msg).find("cudaErrorIllegalAddress"), std::string::npos) << d.msg;
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(gcc_session_grad(dev, "fc1.weight", &p, &n, &d), GCC_ERR_DEVICE);
  hb.fail_d2h = false;  // it recovers: the next read copies again
  EXPECT_EQ(gcc_session_param(dev, "fc1.weight", &p, &n, &d), GCC_OK) << d.msg;
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(n, 36 * 24);
  gcc_session_destroy(dev);
  gcc_graph_free(g);
}

TEST_F(DevicePlan, OutOfDeviceMemoryNamesRequestedFreeTotalAndTheLargestValues) {
  HostBackend hb;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &g, &d), GCC_OK) << d.msg;
  hb.limit = 8u << 20;  // the persistent arena (6.9 MB) fits, a batch-4096 step does not
  gcc_session_options dso = DeviceOptions(g, &hb, false, 1);
  gcc_session *dev = nullptr;
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  gcc_plan *p = nullptr;
  EXPECT_EQ(gcc_session_plan(dev, GCC_MODE_TRAIN, 4096, &p, &d), GCC_ERR_OUT_OF_MEMORY);
  std::string m = d.msg;
  EXPECT_NE(m.find("out of memory on cuda:0"), std::string::npos) << m;
  EXPECT_NE(m.find("bytes are free"), std::string::npos) << m;
  EXPECT_NE(m.find(std::to_string(8u << 20)), std::string::npos) << m;  // the total
  EXPECT_NE(m.find("fc1.out"), std::string::npos) << m;  // 4096 x 512 floats: among the largest
  EXPECT_NE(m.find("--batch-size"), std::string::npos) << m;
  gcc_session_destroy(dev);
  EXPECT_EQ(hb.used, 0u);
  // the persistent arena itself
  hb.limit = 1u << 20;
  EXPECT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_ERR_OUT_OF_MEMORY);
  EXPECT_NE(std::string(d.msg).find("persistent arena"), std::string::npos) << d.msg;
  gcc_graph_free(g);
}

TEST_F(DevicePlan, BatchesGatheredFromAnUploadedDatasetTrainAsHostBatches) {
  HostBackend hb;
  gcc_graph *g = SmallMlp(GCC_OPT_SGD);
  gcc_diag d{};
  const int64_t n = 29;  // 3 batches of 8 and one of 5
  Batch all = MakeBatch(n, 36, 5, 4242);
  std::vector<int64_t> perm(n);
  for (int64_t i = 0; i < n; i++) perm[i] = (i * 11) % n;  // 11 is prime to 29
  gcc_session *cpu = nullptr, *dev = nullptr;
  gcc_session_options co = CpuOptions(g), dso = DeviceOptions(g, &hb, true, 4);
  ASSERT_EQ(gcc_session_create(g, &co, &cpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  EXPECT_EQ(gcc_session_upload_dataset(cpu, all.x.data(), all.y.data(), n, &d),
            GCC_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(gcc_session_upload_dataset(dev, all.x.data(), all.y.data(), n, &d), GCC_OK) << d.msg;
  std::vector<float> cl, dl(8);
  int got = 0;
  for (int epoch = 0; epoch < 2; epoch++) {
    if (epoch == 1) std::reverse(perm.begin(), perm.end());
    ASSERT_EQ(gcc_session_set_order(dev, perm.data(), &d), GCC_OK) << d.msg;
    for (int64_t first = 0; first < n; first += 8) {
      int64_t rows = std::min<int64_t>(8, n - first);
      Batch b{std::vector<float>(rows * 36), std::vector<int64_t>(rows), rows};
      for (int64_t r = 0; r < rows; r++) {
        std::memcpy(&b.x[r * 36], &all.x[perm[first + r] * 36], 36 * sizeof(float));
        b.y[r] = all.y[perm[first + r]];
      }
      float l = 0;
      ASSERT_EQ(gcc_session_train_step(cpu, b.x.data(), b.y.data(), rows, &l, &d), GCC_OK) << d.msg;
      cl.push_back(l);
      ASSERT_EQ(gcc_session_train_step_uploaded(dev, first, rows, &d), GCC_OK) << d.msg;
    }
    int k = 0;
    ASSERT_EQ(gcc_session_collect_losses(dev, dl.data() + got, 4, &k, &d), GCC_OK) << d.msg;
    got += k;
  }
  ASSERT_EQ(got, 8);
  for (int s = 0; s < 8; s++)
    EXPECT_NEAR(dl[s], cl[s], 1e-5 * std::max(1.0f, std::fabs(cl[s]))) << "step " << s;
  ExpectSameParameters(g, dev, cpu, 1e-5);
  EXPECT_EQ(gcc_session_train_step_uploaded(dev, 25, 8, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d.msg).find("outside the 29 uploaded samples"), std::string::npos) << d.msg;
  gcc_session_destroy(dev);
  gcc_session_destroy(cpu);
  gcc_graph_free(g);
}

std::string MnistDir() {
  for (const char *root : {(const char *)getenv("TEST_SRCDIR"), (const char *)"."}) {
    if (!root) continue;
    for (const char *ws : {"/gcc_train/", "/"}) {
      std::string p = std::string(root) + ws + "data/mnist";
      struct stat st;
      if (stat(p.c_str(), &st) == 0) return p;
    }
  }
  return "";
}

// The trainer on real MNIST (a slice of an epoch): the device session with
// the dataset uploaded and batches gathered on the device, losses collected
// every 10 steps, against the CPU session fed by the host data loader. The
// emulated device does its GEMMs with OpenBLAS, so the CPU session runs the
// op table's OpenBLAS kernels too (GCC_CPU_ONEDNN=0): over 40 steps the
// oneDNN kernels' other summation order moves the loss by about 3e-5.
TEST_F(DevicePlan, TrainerWithTheDatasetOnTheDeviceMatchesTheCpuTrainer) {
  struct ReferenceCpuKernels {  // for this test only, even when an ASSERT returns early
    ReferenceCpuKernels() { setenv("GCC_CPU_ONEDNN", "0", 1); }
    ~ReferenceCpuKernels() { unsetenv("GCC_CPU_ONEDNN"); }
  } reference;
  std::string data = MnistDir();
  ASSERT_FALSE(data.empty()) << "data/mnist missing from the runfiles";
  HostBackend hb;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &g, &d), GCC_OK) << d.msg;
  gcc_train_report rep[2];
  for (int dev = 0; dev < 2; dev++) {
    gcc_session_options so = dev ? DeviceOptions(g, &hb, true, 10) : CpuOptions(g);
    gcc_session *s = nullptr;
    ASSERT_EQ(gcc_session_create(g, &so, &s, &d), GCC_OK) << d.msg;
    gcc_train_config cfg{};
    cfg.data_dir = data.c_str();
    cfg.epochs = 1;
    cfg.batch_size = 64;
    cfg.seed = 3;
    cfg.log_every = 10;
    cfg.max_steps = 40;
    cfg.eval_batch = 1000;
    cfg.quiet = 1;
    cfg.out = stdout;
    cfg.dataset_on_device = dev ? 1 : 2;  // auto on the CPU: nothing to do
    cfg.note = stdout;
    ASSERT_EQ(gcc_train_run(s, g, &cfg, &rep[dev], &d), GCC_OK) << d.msg;
    EXPECT_EQ(rep[dev].dataset_on_device, dev);
    gcc_session_destroy(s);
  }
  EXPECT_EQ(rep[0].steps, 40);
  EXPECT_EQ(rep[1].steps, 40);
  EXPECT_NEAR(rep[1].final_train_loss, rep[0].final_train_loss, 1e-5);
  EXPECT_NEAR(rep[1].test_loss, rep[0].test_loss, 1e-5);
  EXPECT_EQ(rep[1].test_accuracy, rep[0].test_accuracy);
  EXPECT_GT(rep[0].test_accuracy, 0.3);  // 40 steps learn something (chance: 0.1)
  gcc_graph_free(g);
}

// The mapping alone, for every transpose combination of Gemm, with alpha,
// a full C and beta: compared with the CPU backend's row-major Gemm.
TEST(GemmMap, EveryTransposeCombinationMatchesTheRowMajorCpuGemm) {
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int withc = 0; withc < 2; withc++) {
        const int64_t M = 5, N = 7, K = 3;
        gcc_graph *g = gcc_graph_new("gemm", "<test>");
        gcc_diag d{};
        gcc_shape sa{2, {ta ? K : M, ta ? M : K}}, sb{2, {tb ? N : K, tb ? K : N}}, sc{2, {M, N}};
        std::mt19937 rng(ta * 4 + tb * 2 + withc);
        std::uniform_real_distribution<float> u(-1, 1);
        std::vector<float> A(M * K), B(K * N), C(M * N);
        for (float &v : A) v = u(rng);
        for (float &v : B) v = u(rng);
        for (float &v : C) v = u(rng);
        int a, b, c = -1, y, node;
        ASSERT_EQ(gcc_graph_add_value(g, "A", GCC_DT_FLOAT32, &sa, GCC_VALUE_CONST, A.data(),
                                      A.size() * 4, &a, &d), GCC_OK);
        ASSERT_EQ(gcc_graph_add_value(g, "B", GCC_DT_FLOAT32, &sb, GCC_VALUE_CONST, B.data(),
                                      B.size() * 4, &b, &d), GCC_OK);
        if (withc) {
          ASSERT_EQ(gcc_graph_add_value(g, "C", GCC_DT_FLOAT32, &sc, GCC_VALUE_CONST, C.data(),
                                        C.size() * 4, &c, &d), GCC_OK);
        }
        ASSERT_EQ(gcc_graph_add_value(g, "Y", GCC_DT_FLOAT32, &sc, GCC_VALUE_ACTIVATION, nullptr,
                                      0, &y, &d), GCC_OK);
        int ins[3] = {a, b, c};
        ASSERT_EQ(gcc_graph_add_node(g, "gemm", GCC_OP_GEMM, ins, withc ? 3 : 2, &y, 1, &node, &d),
                  GCC_OK);
        gcc_node_set_int(g, node, "transA", ta);
        gcc_node_set_int(g, node, "transB", tb);
        gcc_node_set_float(g, node, "alpha", 0.75f);
        gcc_node_set_float(g, node, "beta", 0.5f);
        ASSERT_EQ(gcc_graph_add_output(g, y), GCC_OK);
        ASSERT_EQ(gcc_graph_link(g, &d), GCC_OK) << d.msg;
        ASSERT_EQ(gcc_infer_shapes(g, &d), GCC_OK) << d.msg;
        g->nodes[node].device = GCC_DEV_CUDA(0);
        int grp = -1;
        ASSERT_EQ(gcc_graph_add_group(g, "gemm_k0", GCC_GROUP_GEMM, GCC_DEV_CUDA(0), &node, 1,
                                      GCC_EPI_DEFAULT, &grp, &d), GCC_OK);
        gcc_colmajor_gemm m{};
        ASSERT_EQ(gcc_gemm_map(g, grp, &m, &d), GCC_OK) << d.msg;
        EXPECT_EQ(m.m, N);
        EXPECT_EQ(m.n, M);
        EXPECT_EQ(m.k, K);
        EXPECT_EQ(m.a_value, b);
        EXPECT_EQ(m.b_value, a);
        std::vector<float> got(M * N, 0.0f), want(M * N, 0.0f);
        ColMajorGemm(m, B.data(), A.data(), withc ? C.data() : nullptr, got.data(), nullptr,
                     nullptr);
        // the CPU backend's kernel on the same operands
        gcc_tensor tA{GCC_DT_FLOAT32, sa, M * K, A.data()}, tB{GCC_DT_FLOAT32, sb, K * N, B.data()};
        gcc_tensor tC{GCC_DT_FLOAT32, sc, M * N, C.data()}, tY{GCC_DT_FLOAT32, sc, M * N, want.data()};
        gcc_tensor *in[3] = {&tA, &tB, withc ? &tC : nullptr}, *out[1] = {&tY};
        gcc_cpu_ctx ctx{};
        ctx.max_threads = 1;
        ctx.diag = &d;
        gcc_kernel_args ka{&g->nodes[node], in, withc ? 3 : 2, out, 1, &ctx, nullptr, 0,
                           nullptr};
        ASSERT_EQ(gcc_cpu_gemm(&ka), GCC_OK) << d.msg;
        EXPECT_LE(MaxRelErr(got.data(), want.data(), M * N), 1e-6)
            << "transA " << ta << " transB " << tb << " C " << withc;
        gcc_graph_free(g);
      }
}

TEST(GemmMap, BiasGradientOfOperandABecomesBgradbAfterTheSwap) {
  gcc_graph *g = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &g, &d), GCC_OK) << d.msg;
  gcc_options o{};
  o.mode = GCC_MODE_TRAIN;
  o.batch_size = 64;
  o.opt = g->training.opt;
  o.device = GCC_DEV_CUDA(0);
  o.device_explicit = 1;
  o.n_cuda_devices = 1;
  gcc_graph *c = nullptr;
  gcc_mem_plan mem{};
  ASSERT_EQ(gcc_compile_graph(g, &o, &c, &mem, &d), GCC_OK) << d.msg;
  int bgrad = 0, drelu = 0, relu_aux = 0;
  for (int gi = 0; gi < c->n_groups; gi++) {
    if (c->groups[gi].kind != GCC_GROUP_GEMM)
      continue;
    gcc_colmajor_gemm m{};
    ASSERT_EQ(gcc_gemm_map(c, gi, &m, &d), GCC_OK) << d.msg;
    if (c->groups[gi].epilogue == GCC_EPI_BGRADA) {
      EXPECT_EQ(m.epilogue, GCC_EPI_BGRADB);
      EXPECT_EQ(m.n, 10);  // fc5.bias.grad: the columns of D^T = dW^T (64 x 10)
      bgrad++;
    }
    if (m.epilogue == GCC_EPI_DRELU_BGRAD) {
      EXPECT_GE(m.aux_group, 0);
      EXPECT_EQ(c->groups[m.aux_group].epilogue, GCC_EPI_RELU_AUX_BIAS);
      EXPECT_EQ(m.aux_ld % 128, 0);
      EXPECT_GE(m.aux_ld, m.m);
      drelu++;
    }
    relu_aux += m.epilogue == GCC_EPI_RELU_AUX_BIAS;
  }
  EXPECT_EQ(bgrad, 1);
  EXPECT_EQ(drelu, 4);
  EXPECT_EQ(relu_aux, 4);
  gcc_mem_plan_free(&mem);
  gcc_graph_free(c);
  gcc_graph_free(g);
}

}  // namespace
