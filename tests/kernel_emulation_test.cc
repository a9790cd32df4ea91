// Generated CUDA kernels run on the CPU through tests/cuda_host_shim.h
// and must match the CPU backend.
//
// (a) The shim itself, with hand-written kernels in the emitter's style:
//     grid-stride loops cover every element exactly once for odd grids and
//     blocks; __syncthreads() is a real barrier (block tree reductions,
//     a scan that keeps locals across barriers, a kernel whose result needs
//     the barrier); float4; device math; scalar arguments; several host
//     threads launching at once; errors (bad source, bad launch, missing
//     wrapper).
// (b) Every kernel gcc_codegen_emit generates for the reference plans (the
//     MNIST MLP and nn.Linear for cuda:0, training at batch 64 and 13 with
//     SGD, SGD with Nesterov / dampening / weight decay and Adam, evaluation,
//     plus small models that reach the broadcast, float4, reduction,
//     class-weight and int32-label paths) runs on random inputs (labels in
//     range with some rows at ignore_index -100; outputs poisoned) and is
//     compared with the CPU backend running the group's nodes one by one;
//     the optimizer kernel with gcc_cpu_sgd / gcc_cpu_adam per parameter
//     over the flat parallel sections, at the first and at later steps;
//     loss kernels also report the row of an out-of-range label.
//     Every launch is repeated with another grid / block (or, for one-block
//     kernels, extra blocks), other poison and the threads of each block in
//     reverse order: the bits must not change.
#include <gtest/gtest.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "codegen/emit.h"
#include "graph/builder.h"
#include "codegen/lowering.h"
#include "graph/ops.h"
#include "models/models.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/plan.h"
}

#include "tests/kernel_emulation.h"
#include "tests/test_graphs.h"

using gcc_test::FinishInlineTraining; // tests/test_graphs.h
using gcc_test::Opt;
using gcc_test::TinyRegressor;
using gcc_test::WideSoftmaxModel;

namespace {

using gcc_emu_test::EmulatedModule;

// ---- buffers ----------------------------------------------------------

// 64-byte aligned, zeroed storage (float4 loads need 16).
struct Buf {
  std::shared_ptr<unsigned char> mem;
  size_t bytes = 0;
  static Buf Alloc(size_t bytes) {
    size_t cap = (bytes + 63) / 64 * 64;
    if (cap == 0)
      cap = 64;
    auto *p = static_cast<unsigned char *>(aligned_alloc(64, cap));
    memset(p, 0, cap);
    Buf b;
    b.mem.reset(p, free);
    b.bytes = bytes;
    return b;
  }
  Buf Clone() const {
    Buf b = Alloc(bytes);
    memcpy(b.data(), data(), bytes);
    return b;
  }
  void *data() const { return mem.get(); }
  float *f() const { return reinterpret_cast<float *>(mem.get()); }
  size_t floats() const { return bytes / sizeof(float); }
};

void Fill(const Buf &b, float v) {
  for (size_t i = 0; i < b.floats(); i++)
    b.f()[i] = v;
}

bool SameBits(const Buf &a, const Buf &b) {
  return a.bytes == b.bytes && memcmp(a.data(), b.data(), a.bytes) == 0;
}

// ---- comparison -------------------------------------------------------

struct Cmp {
  size_t n = 0, bad = 0, unwritten = 0;
  double max_abs = 0, max_rel = 0;
  std::string first;
};

// |a - b| <= tol * max(1, |b|) per element; NaN only where the reference
// is NaN. `exact`: every element bit-equal.
Cmp Compare(const float *got, const float *want, size_t n, double tol, bool exact) {
  Cmp c;
  c.n = n;
  for (size_t i = 0; i < n; i++) {
    float a = got[i], b = want[i];
    bool ok;
    if (std::isnan(b)) {
      ok = std::isnan(a);
    } else if (std::isnan(a)) {
      ok = false;
      c.unwritten++;
    } else {
      double d = fabs((double)a - (double)b);
      c.max_abs = std::max(c.max_abs, d);
      c.max_rel = std::max(c.max_rel, d / std::max(1.0, fabs((double)b)));
      ok = exact ? memcmp(&a, &b, sizeof a) == 0 : d <= tol * std::max(1.0, fabs((double)b));
    }
    if (!ok) {
      if (c.bad == 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "element %zu: emulated %.9g, CPU %.9g", i, (double)a, (double)b);
        c.first = msg;
      }
      c.bad++;
    }
  }
  return c;
}

// ==== (a) the shim ======================================================

const char *kShimKernels = R"CUDA(
extern "C" __global__ void stride_fill(const float* __restrict__ in, float* __restrict__ out, int* __restrict__ hits, long long n) {
  /* nodes: a grid-stride loop */
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    out[i] = in[i] * 2.0f + 1.0f;
    hits[i] += 1;
  }
}
#ifdef GCC_HOST_EMULATION
extern "C" void stride_fill_launch(unsigned grid, unsigned block, void **args) {
  GCC_EMU_LAUNCH(stride_fill, grid, block, *(const float * *)args[0], *(float * *)args[1], *(int * *)args[2], *(long long *)args[3]);
}
#endif

/* one block (others return at once), power-of-two tree as the loss kernels */
extern "C" __global__ void tree_sum(const float* __restrict__ in, float* __restrict__ out, long long n) {
  __shared__ float s[1024];
  if (blockIdx.x != 0) return;
  float acc = 0.0f;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) acc += in[i];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = s[0];
}
#ifdef GCC_HOST_EMULATION
extern "C" void tree_sum_launch(unsigned grid, unsigned block, void **args) {
  GCC_EMU_LAUNCH(tree_sum, grid, block, *(const float * *)args[0], *(float * *)args[1], *(long long *)args[2]);
}
#endif

/* every block reduces its chunk; any blockDim (pairwise strides) */
extern "C" __global__ void block_sums(const float* __restrict__ in, double* __restrict__ partial, long long n) {
  __shared__ double s[1024];
  const long long chunk = (n + gridDim.x - 1) / gridDim.x;
  const long long lo = (long long)blockIdx.x * chunk, hi = lo + chunk < n ? lo + chunk : n;
  double acc = 0.0;
  for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) acc += in[i];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned st = 1; st < blockDim.x; st *= 2) {
    if (threadIdx.x % (2 * st) == 0 && threadIdx.x + st < blockDim.x) s[threadIdx.x] += s[threadIdx.x + st];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}
#ifdef GCC_HOST_EMULATION
extern "C" void block_sums_launch(unsigned grid, unsigned block, void **args) {
  GCC_EMU_LAUNCH(block_sums, grid, block, *(const float * *)args[0], *(double * *)args[1], *(long long *)args[2]);
}
#endif

/* Hillis-Steele inclusive scan of each block's blockDim elements: locals live across barriers */
extern "C" __global__ void block_scan(const float* __restrict__ in, float* __restrict__ out) {
  __shared__ float s[1024];
  const unsigned t = threadIdx.x;
  const long long base = (long long)blockIdx.x * blockDim.x;
  s[t] = in[base + t];
  __syncthreads();
  for (unsigned off = 1; off < blockDim.x; off *= 2) {
    float v = t >= off ? s[t - off] : 0.0f;
    __syncthreads();
    s[t] += v;
    __syncthreads();
  }
  out[base + t] = s[t];
}
#ifdef GCC_HOST_EMULATION
extern "C" void block_scan_launch(unsigned grid, unsigned block, void **args) {
  GCC_EMU_LAUNCH(block_scan, grid, block, *(const float * *)args[0], *(float * *)args[1]);
}
#endif

/* reads another thread's shared element: correct only with the barrier */
extern "C" __global__ void rotate(const float* __restrict__ in, float* __restrict__ out, int sync) {
  __shared__ float s[1024];
  const unsigned t = threadIdx.x;
  s[t] = in[t];
  if (sync) __syncthreads();
  out[t] = s[(t + 1) % blockDim.x];
}
#ifdef GCC_HOST_EMULATION
extern "C" void rotate_launch(unsigned grid, unsigned block, void **args) {
  GCC_EMU_LAUNCH(rotate, grid, block, *(const float * *)args[0], *(float * *)args[1], *(int *)args[2]);
}
#endif

/* thread 0 leaves before the barrier the others pass */
extern "C" __global__ void early_exit(float* __restrict__ out) {
  if (threadIdx.x == 0) { out[blockIdx.x * blockDim.x] = 1.0f; return; }
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = 2.0f;
}
#ifdef GCC_HOST_EMULATION
extern "C" void early_exit_launch(unsigned grid, unsigned block, void **args) {
  GCC_EMU_LAUNCH(early_exit, grid, block, *(float * *)args[0]);
}
#endif

extern "C" __global__ void axpy4(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out, float a, long long n4) {
  for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < n4; q += (long long)gridDim.x * blockDim.x) {
    float4 u = reinterpret_cast<const float4*>(x)[q];
    float4 v = reinterpret_cast<const float4*>(y)[q];
    reinterpret_cast<float4*>(out)[q] = make_float4(a * u.x + v.x, a * u.y + v.y, a * u.z + v.z, a * u.w + v.w);
  }
}
#ifdef GCC_HOST_EMULATION
extern "C" void axpy4_launch(unsigned grid, unsigned block, void **args) {
  GCC_EMU_LAUNCH(axpy4, grid, block, *(const float * *)args[0], *(const float * *)args[1], *(float * *)args[2], *(float *)args[3], *(long long *)args[4]);
}
#endif

__device__ __forceinline__ float mathfn_elem(float v) { return fmaxf(v, 0.25f); }

extern "C" __global__ void mathfn(const float* __restrict__ x, float* __restrict__ out, long long n) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    float v = x[i];
    out[4 * i + 0] = expf(v);
    out[4 * i + 1] = logf(fabsf(v) + 1.0f);
    out[4 * i + 2] = sqrtf(fabsf(v));
    out[4 * i + 3] = mathfn_elem(v) + (float)exp((double)v) * 0.0f;
  }
}
#ifdef GCC_HOST_EMULATION
extern "C" void mathfn_launch(unsigned grid, unsigned block, void **args) {
  GCC_EMU_LAUNCH(mathfn, grid, block, *(const float * *)args[0], *(float * *)args[1], *(long long *)args[2]);
}
#endif
)CUDA";

class Shim : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    mod_ = new EmulatedModule;
    std::string err;
    if (!mod_->Compile(kShimKernels, "shim_selftest", &err))
      compile_error_ = new std::string(err);
  }
  static void TearDownTestSuite() {
    delete mod_;
    delete compile_error_;
    mod_ = nullptr;
    compile_error_ = nullptr;
  }
  void SetUp() override {
    ASSERT_EQ(compile_error_, nullptr) << *compile_error_;
    mod_->SetReversedThreadOrder(false);
  }
  static void Launch(const char *k, unsigned grid, unsigned block, std::vector<void *> args) {
    std::string err;
    ASSERT_TRUE(mod_->Launch(k, grid, block, args.data(), &err)) << err;
  }
  static EmulatedModule *mod_;
  static std::string *compile_error_;
};
EmulatedModule *Shim::mod_ = nullptr;
std::string *Shim::compile_error_ = nullptr;

TEST_F(Shim, GridStrideCoversEveryElementExactlyOnce) {
  const long long n = 10007; // prime: no launch shape divides it
  Buf in = Buf::Alloc(n * 4), out = Buf::Alloc(n * 4), hits = Buf::Alloc(n * 4);
  for (long long i = 0; i < n; i++)
    in.f()[i] = (float)(i % 97) - 48.0f;
  const unsigned shapes[][2] = {{1, 1}, {3, 7}, {7, 33}, {13, 96}, {65, 256}, {1, 1024}, {41, 5}};
  for (auto &s : shapes) {
    SCOPED_TRACE("grid " + std::to_string(s[0]) + " block " + std::to_string(s[1]));
    Fill(out, NAN);
    memset(hits.data(), 0, hits.bytes);
    const float *pi = in.f();
    float *po = out.f();
    int *ph = reinterpret_cast<int *>(hits.data());
    long long nn = n;
    Launch("stride_fill", s[0], s[1], {&pi, &po, &ph, &nn});
    long long wrong = 0, miss = 0;
    for (long long i = 0; i < n; i++) {
      wrong += out.f()[i] != in.f()[i] * 2.0f + 1.0f;
      miss += ph[i] != 1;
    }
    EXPECT_EQ(wrong, 0);
    EXPECT_EQ(miss, 0) << "elements not visited exactly once";
  }
}

TEST_F(Shim, SyncthreadsTreeReductionEqualsSequentialSum) {
  const long long n = 5000;
  Buf in = Buf::Alloc(n * 4);
  double seq = 0;
  for (long long i = 0; i < n; i++) {
    in.f()[i] = (float)((i * 37) % 101) - 50.0f; // integers: every order is exact
    seq += in.f()[i];
  }
  for (unsigned block : {1u, 2u, 64u, 256u, 1024u}) {
    for (unsigned grid : {1u, 3u}) {
      for (bool rev : {false, true}) {
        SCOPED_TRACE("block " + std::to_string(block) + " grid " + std::to_string(grid) +
                     (rev ? " reversed" : ""));
        mod_->SetReversedThreadOrder(rev);
        float out = NAN;
        const float *pi = in.f();
        float *po = &out;
        long long nn = n;
        Launch("tree_sum", grid, block, {&pi, &po, &nn});
        EXPECT_EQ(out, (float)seq);
        EXPECT_EQ(mod_->BarrierMismatches(), 0u);
      }
    }
  }
}

TEST_F(Shim, EveryBlockReducesInItsOwnSharedMemoryAnyBlockSize) {
  const long long n = 100003;
  Buf in = Buf::Alloc(n * 4);
  for (long long i = 0; i < n; i++)
    in.f()[i] = (float)((i * 13) % 29) - 14.0f;
  for (unsigned grid : {1u, 5u, 37u}) {
    for (unsigned block : {1u, 7u, 100u, 255u, 1000u}) {
      SCOPED_TRACE("grid " + std::to_string(grid) + " block " + std::to_string(block));
      std::vector<double> part(grid, NAN);
      const float *pi = in.f();
      double *pp = part.data();
      long long nn = n;
      Launch("block_sums", grid, block, {&pi, &pp, &nn});
      const long long chunk = (n + grid - 1) / grid;
      for (unsigned b = 0; b < grid; b++) {
        double want = 0;
        for (long long i = b * chunk; i < std::min(n, (b + 1) * chunk); i++)
          want += in.f()[i];
        EXPECT_EQ(part[b], want) << "block " << b;
      }
      EXPECT_EQ(mod_->BarrierMismatches(), 0u);
    }
  }
}

TEST_F(Shim, LocalsSurviveBarriersInABlockScan) {
  for (unsigned block : {1u, 5u, 64u, 96u, 512u}) {
    const unsigned grid = 3;
    const size_t n = (size_t)grid * block;
    Buf in = Buf::Alloc(n * 4), out = Buf::Alloc(n * 4);
    for (size_t i = 0; i < n; i++)
      in.f()[i] = (float)(i % 11);
    for (bool rev : {false, true}) {
      SCOPED_TRACE("block " + std::to_string(block) + (rev ? " reversed" : ""));
      mod_->SetReversedThreadOrder(rev);
      Fill(out, NAN);
      const float *pi = in.f();
      float *po = out.f();
      Launch("block_scan", grid, block, {&pi, &po});
      for (unsigned b = 0; b < grid; b++) {
        float run = 0;
        for (unsigned t = 0; t < block; t++) {
          run += in.f()[b * block + t];
          ASSERT_EQ(out.f()[b * block + t], run) << "block " << b << " thread " << t;
        }
      }
    }
  }
}

TEST_F(Shim, BarrierIsRealAndThreadOrderExposesAMissingOne) {
  const unsigned block = 128;
  Buf in = Buf::Alloc(block * 4), out_f = Buf::Alloc(block * 4), out_r = Buf::Alloc(block * 4);
  for (int round = 0; round < 2; round++) {
    for (unsigned t = 0; t < block; t++)
      in.f()[t] = (float)(t + 1000 * (round + 1)); // differs from what shared memory held
    for (int sync : {1, 0}) {
      for (bool rev : {false, true}) {
        mod_->SetReversedThreadOrder(rev);
        const Buf &out = rev ? out_r : out_f;
        Fill(out, NAN);
        const float *pi = in.f();
        float *po = out.f();
        int s = sync;
        Launch("rotate", 1, block, {&pi, &po, &s});
        if (sync) {
          for (unsigned t = 0; t < block; t++)
            ASSERT_EQ(out.f()[t], in.f()[(t + 1) % block]) << "thread " << t;
        }
      }
      if (sync)
        EXPECT_TRUE(SameBits(out_f, out_r));
      else
        EXPECT_FALSE(SameBits(out_f, out_r)) << "without the barrier the order must show";
      // bump the input so stale shared values differ from fresh ones
      for (unsigned t = 0; t < block; t++)
        in.f()[t] += 1.0f;
    }
  }
}

TEST_F(Shim, ThreadsThatReturnDoNotHoldTheBarrierAndDivergenceIsCounted) {
  const unsigned grid = 4, block = 32;
  Buf out = Buf::Alloc(grid * block * 4);
  Fill(out, NAN);
  float *po = out.f();
  Launch("early_exit", grid, block, {&po});
  for (unsigned i = 0; i < grid * block; i++)
    EXPECT_EQ(out.f()[i], i % block == 0 ? 1.0f : 2.0f) << i;
  EXPECT_EQ(mod_->BarrierMismatches(), grid);
}

TEST_F(Shim, Float4LoadsAndStores) {
  const long long n4 = 1001;
  Buf x = Buf::Alloc(n4 * 16), y = Buf::Alloc(n4 * 16), out = Buf::Alloc(n4 * 16);
  for (long long i = 0; i < 4 * n4; i++) {
    x.f()[i] = (float)i * 0.25f;
    y.f()[i] = 3.0f - (float)i;
  }
  for (auto shape : {std::pair<unsigned, unsigned>{4, 256}, {3, 37}}) {
    Fill(out, NAN);
    const float *px = x.f(), *py = y.f();
    float *po = out.f();
    float a = -1.5f;
    long long nn = n4;
    Launch("axpy4", shape.first, shape.second, {&px, &py, &po, &a, &nn});
    for (long long i = 0; i < 4 * n4; i++)
      ASSERT_EQ(out.f()[i], a * x.f()[i] + y.f()[i]) << i;
  }
}

TEST_F(Shim, DeviceMathIsTheHostLibm) {
  const long long n = 777;
  Buf x = Buf::Alloc(n * 4), out = Buf::Alloc(n * 16);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-20.0f, 20.0f);
  for (long long i = 0; i < n; i++)
    x.f()[i] = u(rng);
  Fill(out, NAN);
  const float *px = x.f();
  float *po = out.f();
  long long nn = n;
  Launch("mathfn", 5, 64, {&px, &po, &nn});
  for (long long i = 0; i < n; i++) {
    float v = x.f()[i];
    EXPECT_EQ(out.f()[4 * i + 0], expf(v));
    EXPECT_EQ(out.f()[4 * i + 1], logf(fabsf(v) + 1.0f));
    EXPECT_EQ(out.f()[4 * i + 2], sqrtf(fabsf(v)));
    EXPECT_EQ(out.f()[4 * i + 3], fmaxf(v, 0.25f));
  }
}

TEST_F(Shim, LaunchesFromSeveralHostThreadsAreCorrect) {
  // tree_sum's __shared__ array is one static: launches must not overlap.
  const int kThreads = 4, kRounds = 12;
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; t++)
    ts.emplace_back([t, &failures] {
      const long long n = 3000 + 17 * t;
      Buf in = Buf::Alloc(n * 4);
      double seq = 0;
      for (long long i = 0; i < n; i++) {
        in.f()[i] = (float)((i + t) % 23);
        seq += in.f()[i];
      }
      for (int r = 0; r < kRounds; r++) {
        float out = NAN;
        const float *pi = in.f();
        float *po = &out;
        long long nn = n;
        void *args[3] = {&pi, &po, &nn};
        std::string err;
        if (!mod_->Launch("tree_sum", 1, 256, args, &err) || out != (float)seq)
          failures[t]++;
      }
    });
  for (auto &th : ts)
    th.join();
  for (int t = 0; t < kThreads; t++)
    EXPECT_EQ(failures[t], 0) << "host thread " << t;
}

TEST_F(Shim, BadLaunchConfigurationIsAnErrorNotACrash) {
  float *po = nullptr;
  void *args[1] = {&po};
  std::string err;
  EXPECT_FALSE(mod_->Launch("early_exit", 0, 32, args, &err));
  EXPECT_NE(err.find("invalid launch configuration"), std::string::npos) << err;
  EXPECT_FALSE(mod_->Launch("early_exit", 1, 1025, args, &err));
  EXPECT_FALSE(mod_->Launch("no_such_kernel", 1, 1, args, &err));
  EXPECT_NE(err.find("no_such_kernel_launch"), std::string::npos) << err;
}

TEST(KernelEmulation, CompilerErrorsAreReportedWithTheCompilerOutput) {
  EmulatedModule m;
  std::string err;
  EXPECT_FALSE(m.Compile("extern \"C\" __global__ void broken(float *x) { x[0] = undeclared_y; }\n",
                         "broken", &err));
  EXPECT_NE(err.find("undeclared_y"), std::string::npos) << err;
  EXPECT_NE(err.find("error"), std::string::npos) << err;
  EXPECT_FALSE(m.loaded());
}

// ==== (b) generated kernels against the CPU backend =====================

struct Summary {
  std::string plan, kernel, kind;
  size_t elements;
  double max_abs, max_rel;
  bool exact;
};
std::vector<Summary> g_summary;
std::string g_sources; // every kernel set of the current test (code paths reached)

bool Emitted(const char *what) {
  return g_sources.find(what) != std::string::npos;
}

struct PlanCase {
  std::string name;
  const gcc_graph *model;
  gcc_mode mode;
  int64_t batch;
  gcc_optimizer opt;
  int sm_count;
  int min_kernels;
};

const double kTol = 1e-6;

bool Kept(const gcc_graph *g, int v) {
  const gcc_training *t = &g->training;
  const char *n = g->values[v].name;
  if ((t->loss && strcmp(n, t->loss) == 0) || (t->prediction && strcmp(n, t->prediction) == 0))
    return true;
  for (int i = 0; i < g->n_outputs; i++)
    if (g->outputs[i] == v)
      return true;
  return false;
}

bool InGroup(const gcc_group *gr, int node) {
  for (int i = 0; i < gr->n_nodes; i++)
    if (gr->nodes[i] == node)
      return true;
  return false;
}

std::string Where(const gcc_kernel_set &ks, const gcc_kernel_info &k) {
  // the kernel's source, for failure messages
  std::string src(ks.source);
  size_t at = src.find(std::string("float ") + k.name + "_elem("); // its element function
  if (at == std::string::npos)
    at = src.find(std::string("void ") + k.name + "(");
  if (at == std::string::npos)
    return "";
  size_t end = src.find("#endif", at);
  return "\n---- " + std::string(k.name) + " ----\n" +
         src.substr(at, end == std::string::npos ? std::string::npos : end - at + 6);
}

// Arguments, groups and values agree (what the runtime will bind).
// A group's kernels are ks.kernels[k0 .. k1], launched in that order (a loss
// group with its loss: the rows, then their sum), the last named after it.
void CheckStructure(const gcc_graph *g, const gcc_kernel_set &ks, int k0, int k1) {
  const gcc_kernel_info &k = ks.kernels[k1];
  SCOPED_TRACE(k.name);
  ASSERT_GE(k.group, 0);
  ASSERT_LT(k.group, g->n_groups);
  const gcc_group *gr = &g->groups[k.group];
  EXPECT_STREQ(k.name, gr->name);
  std::set<int> ins, outs;
  for (int ki = k0; ki <= k1; ki++) {
    const gcc_kernel_info &k = ks.kernels[ki];
    EXPECT_EQ(k.group, ks.kernels[k1].group);
    EXPECT_GE(k.block_dim, 1);
    EXPECT_LE(k.block_dim, 1024);
    EXPECT_GE(k.grid_dim, 1);
    EXPECT_LE(k.grid_dim, 65535);
    if (k.single_block) {
      EXPECT_EQ(k.grid_dim, 1);
    }
    for (int a = 0; a < k.n_args; a++) {
      const gcc_kernel_arg &arg = k.args[a];
      EXPECT_NE(strstr(ks.source, arg.name), nullptr) << arg.name;
      if (arg.kind == GCC_KARG_INPUT || arg.kind == GCC_KARG_OUTPUT) {
        ASSERT_GE(arg.value, 0) << arg.name;
        ASSERT_LT(arg.value, g->n_values) << arg.name;
        int p = g->values[arg.value].producer;
        if (arg.kind == GCC_KARG_INPUT) {
          EXPECT_FALSE(p >= 0 && InGroup(gr, p))
              << "input " << arg.name << " = '" << g->values[arg.value].name
              << "' is computed inside the kernel" << Where(ks, k);
          ins.insert(arg.value);
        } else {
          EXPECT_TRUE(p >= 0 && InGroup(gr, p))
              << "output " << arg.name << " = '" << g->values[arg.value].name
              << "' is not produced by the group" << Where(ks, k);
          EXPECT_TRUE(outs.insert(arg.value).second) << "output bound twice: " << arg.name;
        }
      } else {
        EXPECT_EQ(arg.value, -1) << arg.name;
      }
    }
  }
  for (int m = 0; m < gr->n_nodes; m++) {
    const gcc_node *n = &g->nodes[gr->nodes[m]];
    for (int q = 0; q < n->n_inputs; q++) {
      int v = n->inputs[q];
      if (v < 0)
        continue;
      int p = g->values[v].producer;
      if (!(p >= 0 && InGroup(gr, p)) && gr->kind != GCC_GROUP_OPTIMIZER) {
        EXPECT_TRUE(ins.count(v)) << "node '" << n->name << "' reads '" << g->values[v].name
                                  << "', which the kernel does not take" << Where(ks, k);
      }
    }
    for (int q = 0; q < n->n_outputs; q++) {
      int v = n->outputs[q];
      bool outside = Kept(g, v);
      for (int c = 0; c < g->values[v].n_consumers; c++)
        outside |= !InGroup(gr, g->values[v].consumers[c]);
      if (outside) {
        EXPECT_TRUE(outs.count(v))
            << "'" << g->values[v].name << "' (node '" << n->name
            << "') is used after the kernel but not written by it" << Where(ks, k);
      }
    }
  }
}

// Random contents for value v (labels: in range for the loss that reads
// them, with some ignore_index rows).
Buf RandomValue(const gcc_graph *g, int v, std::mt19937 *rng) {
  const gcc_value *val = &g->values[v];
  int64_t n = gcc_shape_numel(&val->shape, nullptr);
  Buf b = Buf::Alloc((size_t)n * gcc_dtype_size(val->dtype));
  if (val->dtype == GCC_DT_FLOAT32) {
    std::uniform_real_distribution<float> u(-3.0f, 3.0f);
    for (int64_t i = 0; i < n; i++) {
      int r = (int)((*rng)() % 16);
      b.f()[i] = r == 0 ? 0.0f : r == 1 ? -0.0f : u(*rng); // both ReLU edges
    }
  }
  // integer values: filled by FillLabels (or left zero)
  return b;
}

void SetLabel(const Buf &b, gcc_dtype dt, int64_t i, int64_t y) {
  if (dt == GCC_DT_INT64)
    reinterpret_cast<int64_t *>(b.data())[i] = y;
  else
    reinterpret_cast<int32_t *>(b.data())[i] = (int32_t)y;
}

void FillLabels(const Buf &b, gcc_dtype dt, int64_t n, int64_t c, int64_t ignore,
                std::mt19937 *rng) {
  for (int64_t i = 0; i < n; i++)
    SetLabel(b, dt, i, (*rng)() % 5 == 0 && i != 0 ? ignore : (int64_t)((*rng)() % c));
}

struct LabelInfo {
  int value = -1; // labels value
  int64_t rows = 0, classes = 0, ignore = -100;
};

// The labels of a SoftmaxCrossEntropy(Grad) in the group, if any.
LabelInfo FindLabels(const gcc_graph *g, const gcc_group *gr) {
  LabelInfo li;
  for (int m = 0; m < gr->n_nodes; m++) {
    const gcc_node *n = &g->nodes[gr->nodes[m]];
    int first = n->op == GCC_OP_SOFTMAX_CROSS_ENTROPY        ? 0
                : n->op == GCC_OP_SOFTMAX_CROSS_ENTROPY_GRAD ? 1
                                                             : -1;
    if (first < 0)
      continue;
    const gcc_shape &xs = g->values[n->inputs[first]].shape;
    li.value = n->inputs[first + 1];
    li.rows = xs.dims[0];
    li.classes = xs.dims[1];
    li.ignore = n->av[SCE_IGNORE_INDEX].i;
  }
  return li;
}

// One launch of a pointwise / loss kernel on given inputs.
struct GroupRun {
  std::map<int, Buf> in;  // INPUT value -> data
  std::map<int, Buf> out; // OUTPUT value -> data
  int bad_label = GCC_BAD_LABEL_NONE;
  std::vector<float> scratch; // GCC_KARG_SCRATCH: partials from one kernel to the next
};

// The group's kernels ks.kernels[k0 .. k1] in order, each with (grid,
// block) (0: the kernel's own, as the runtime launches it), but a single-block kernel with its own block_dim (it may size
// shared memory by it) and grid 1 or 3 (its other blocks return).
bool LaunchGroup(const EmulatedModule &mod, const gcc_kernel_set &ks, int k0, int k1, GroupRun *r,
                 unsigned grid, unsigned block, float poison, std::string *err) {
  for (auto &o : r->out)
    Fill(o.second, poison);
  r->bad_label = GCC_BAD_LABEL_NONE;
  size_t scratch = 0;
  for (int ki = k0; ki <= k1; ki++)
    scratch = std::max(scratch, ks.kernels[ki].scratch_bytes);
  r->scratch.assign(scratch / 4 + 1, NAN); // a partial read before it is written: NaN
  for (int ki = k0; ki <= k1; ki++) {
    const gcc_kernel_info &k = ks.kernels[ki];
    std::vector<void *> ptrs(k.n_args), argv(k.n_args);
    for (int a = 0; a < k.n_args; a++) {
      const gcc_kernel_arg &arg = k.args[a];
      switch (arg.kind) {
      case GCC_KARG_INPUT: ptrs[a] = r->in.at(arg.value).data(); break;
      case GCC_KARG_OUTPUT: ptrs[a] = r->out.at(arg.value).data(); break;
      case GCC_KARG_BAD_LABEL: ptrs[a] = &r->bad_label; break;
      case GCC_KARG_SCRATCH: ptrs[a] = r->scratch.data(); break;
      default:
        *err = std::string("unexpected argument kind for a non-optimizer kernel: ") + arg.name;
        return false;
      }
      argv[a] = &ptrs[a];
    }
    unsigned gr = grid == 0 ? (unsigned)k.grid_dim : k.single_block ? (grid == 1 ? 1u : 3u) : grid;
    unsigned bl = block == 0 || k.single_block ? (unsigned)k.block_dim : block;
    if (!mod.Launch(k.name, gr, bl, argv.data(), err))
      return false;
  }
  return true;
}

// The group's nodes one by one on the CPU backend; fills ref[v] for every
// OUTPUT value. Returns the first kernel status.
gcc_status RunReference(const gcc_graph *g, const gcc_group *gr, const GroupRun &r,
                        std::map<int, Buf> *ref, gcc_diag *d) {
  std::map<int, gcc_tensor> t;
  std::vector<Buf> keep;
  auto tensor = [&](int v, void *data) {
    gcc_tensor x;
    x.dtype = g->values[v].dtype;
    x.shape = g->values[v].shape;
    x.numel = gcc_shape_numel(&x.shape, nullptr);
    x.data = data;
    t[v] = x;
  };
  for (auto &i : r.in)
    tensor(i.first, i.second.data());
  gcc_cpu_ctx ctx{};
  ctx.max_threads = 1;
  ctx.diag = d;
  ctx.source = g->source;
  for (int m = 0; m < gr->n_nodes; m++) {
    const gcc_node *n = &g->nodes[gr->nodes[m]];
    const gcc_op_desc *op = gcc_op(n->op);
    std::vector<gcc_tensor *> ins(n->n_inputs ? n->n_inputs : 1),
        outs(n->n_outputs ? n->n_outputs : 1);
    for (int q = 0; q < n->n_inputs; q++) {
      int v = n->inputs[q];
      if (v < 0) {
        ins[q] = nullptr;
        continue;
      }
      if (!t.count(v))
        return gcc_diag_set(d, GCC_ERR_INTERNAL, "reference: '%s' has no data", g->values[v].name);
      ins[q] = &t[v];
    }
    if (op->flags & GCC_OPF_ALIAS) {
      tensor(n->outputs[0], ins[0]->data);
      continue;
    }
    for (int q = 0; q < n->n_outputs; q++) {
      int v = n->outputs[q];
      int64_t numel = gcc_shape_numel(&g->values[v].shape, nullptr);
      Buf b = Buf::Alloc((size_t)numel * gcc_dtype_size(g->values[v].dtype));
      Fill(b, NAN);
      keep.push_back(b);
      (*ref)[v] = b;
      tensor(v, b.data());
      outs[q] = &t[v];
    }
    gcc_kernel_args a{n,    ins.data(), n->n_inputs, outs.data(), n->n_outputs,
                      &ctx, nullptr,    0,           nullptr};
    gcc_status s = gcc_cpu_op_of(n->op)->kernel(&a);
    if (s != GCC_OK)
      return s;
  }
  return GCC_OK;
}

void CheckGroupKernel(const std::string &plan, const gcc_graph *g, const gcc_kernel_set &ks, int k0,
                      int k1, const EmulatedModule &mod, std::mt19937 *rng) {
  const gcc_kernel_info &k = ks.kernels[k1];
  SCOPED_TRACE(k.name);
  const gcc_group *gr = &g->groups[k.group];
  LabelInfo li = FindLabels(g, gr);
  GroupRun r;
  bool has_bad_label_arg = false;
  for (int ki = k0; ki <= k1; ki++)
    for (int a = 0; a < ks.kernels[ki].n_args; a++) {
      const gcc_kernel_arg &arg = ks.kernels[ki].args[a];
      if (arg.kind == GCC_KARG_INPUT && !r.in.count(arg.value)) {
        r.in[arg.value] = RandomValue(g, arg.value, rng);
        const gcc_value *val = &g->values[arg.value];
        if (arg.value == li.value)
          FillLabels(r.in[arg.value], val->dtype, li.rows, li.classes, li.ignore, rng);
        else if (val->dtype != GCC_DT_FLOAT32)
          ADD_FAILURE() << "integer input '" << val->name << "' that is not a loss's labels";
        // class weights are positive
        for (int m = 0; m < gr->n_nodes; m++) {
          const gcc_node *n = &g->nodes[gr->nodes[m]];
          int wpos = n->op == GCC_OP_SOFTMAX_CROSS_ENTROPY        ? 2
                     : n->op == GCC_OP_SOFTMAX_CROSS_ENTROPY_GRAD ? 3
                                                                  : -1;
          if (wpos >= 0 && n->n_inputs > wpos && n->inputs[wpos] == arg.value)
            for (size_t i = 0; i < r.in[arg.value].floats(); i++)
              r.in[arg.value].f()[i] = 0.25f + fabsf(r.in[arg.value].f()[i]);
        }
      } else if (arg.kind == GCC_KARG_OUTPUT) {
        const gcc_value *val = &g->values[arg.value];
        ASSERT_EQ(val->dtype, GCC_DT_FLOAT32) << val->name;
        r.out[arg.value] = Buf::Alloc((size_t)gcc_shape_numel(&val->shape, nullptr) * 4);
      } else if (arg.kind == GCC_KARG_BAD_LABEL) {
        has_bad_label_arg = true;
      }
    }
  EXPECT_EQ(has_bad_label_arg, li.value >= 0) << "a kernel with labels reports bad ones";
  std::map<int, Buf> pristine;
  for (auto &i : r.in)
    pristine[i.first] = i.second.Clone();

  // the reference
  std::map<int, Buf> ref;
  gcc_diag d{};
  ASSERT_EQ(RunReference(g, gr, r, &ref, &d), GCC_OK) << d.msg;

  // the kernel, as the runtime will launch it
  std::string err;
  ASSERT_TRUE(LaunchGroup(mod, ks, k0, k1, &r, 0, 0, NAN, &err)) << err << Where(ks, k);
  EXPECT_EQ(mod.BarrierMismatches(), 0u) << "divergent __syncthreads" << Where(ks, k);
  EXPECT_EQ(r.bad_label, GCC_BAD_LABEL_NONE) << "labels are all in range";
  for (auto &i : r.in)
    EXPECT_TRUE(SameBits(i.second, pristine[i.first]))
        << "the kernel wrote its input '" << g->values[i.first].name << "'";
  // pointwise and optimizer code mirrors the CPU kernels operation for
  // operation: bit-exact; a loss reduces in another order: 1e-6.
  bool exact = gr->kind == GCC_GROUP_POINTWISE;
  for (auto &o : r.out) {
    const gcc_value *val = &g->values[o.first];
    Cmp c = Compare(o.second.f(), ref.at(o.first).f(), o.second.floats(), kTol, exact);
    EXPECT_EQ(c.unwritten, 0u) << "'" << val->name << "': elements left unwritten (NaN poison)"
                               << Where(ks, k);
    EXPECT_EQ(c.bad, 0u) << "'" << val->name << "': " << c.bad << " of " << c.n
                         << " elements differ from the CPU backend ("
                         << (exact ? "bit-exact" : "1e-6") << "); first: " << c.first
                         << Where(ks, k);
    g_summary.push_back({plan, std::string(k.name) + " -> " + val->name,
                         gcc_group_kind_name(gr->kind), c.n, c.max_abs, c.max_rel, exact});
  }

  // other launch shapes, other poison, reversed thread order: same bits
  std::map<int, Buf> first;
  for (auto &o : r.out)
    first[o.first] = o.second.Clone();
  struct Shape {
    unsigned grid, block;
    bool rev;
  };
  std::vector<Shape> shapes;
  if (k.single_block && k0 == k1) // else: the rows kernel any shape, the sum one block
    shapes = {{1, (unsigned)k.block_dim, true}, {3, (unsigned)k.block_dim, false}};
  else
    shapes = {{3, 37, false}, {(unsigned)k.grid_dim, (unsigned)k.block_dim, true}, {1, 1, false}};
  for (const Shape &s : shapes) {
    SCOPED_TRACE("grid " + std::to_string(s.grid) + " block " + std::to_string(s.block) +
                 (s.rev ? " reversed" : ""));
    mod.SetReversedThreadOrder(s.rev);
    bool ok = LaunchGroup(mod, ks, k0, k1, &r, s.grid, s.block, 3.0e38f, &err);
    mod.SetReversedThreadOrder(false);
    ASSERT_TRUE(ok) << err;
    EXPECT_EQ(mod.BarrierMismatches(), 0u);
    for (auto &o : r.out)
      EXPECT_TRUE(SameBits(o.second, first[o.first]))
          << "'" << g->values[o.first].name << "' changes with the launch shape" << Where(ks, k);
  }

  if (li.value < 0)
    return;
  // out-of-range labels: the kernel names a bad row; the CPU backend fails
  const gcc_value *lv = &g->values[li.value];
  const Buf labels = r.in.at(li.value);
  Buf saved = labels.Clone();
  std::vector<std::pair<int64_t, int64_t>> bad = {
      {li.rows - 1, li.classes}, {li.rows / 2, -7}, {0, li.classes + 1000}};
  for (auto &b : bad) {
    SCOPED_TRACE("label " + std::to_string(b.second) + " in row " + std::to_string(b.first));
    memcpy(labels.data(), saved.data(), saved.bytes);
    SetLabel(labels, lv->dtype, b.first, b.second);
    ASSERT_TRUE(LaunchGroup(mod, ks, k0, k1, &r, 0, 0, NAN, &err)) << err;
    EXPECT_EQ(r.bad_label, (int)b.first);
    std::map<int, Buf> ref2;
    gcc_diag d2{};
    EXPECT_EQ(RunReference(g, gr, r, &ref2, &d2), GCC_ERR_INVALID_ARGUMENT);
  }
  // two bad rows: the first is reported, as the CPU backend reports it,
  // whichever order the threads run in (atomicMin)
  memcpy(labels.data(), saved.data(), saved.bytes);
  if (li.rows >= 2) {
    SetLabel(labels, lv->dtype, 1, li.classes);
    SetLabel(labels, lv->dtype, li.rows - 1, -3);
    for (bool reversed : {false, true}) {
      mod.SetReversedThreadOrder(reversed);
      ASSERT_TRUE(LaunchGroup(mod, ks, k0, k1, &r, 0, 0, NAN, &err)) << err;
      EXPECT_EQ(r.bad_label, 1) << (reversed ? "threads in descending order" : "ascending");
    }
    mod.SetReversedThreadOrder(false);
  }
  // every row ignored: as PyTorch, a NaN mean and a zero gradient
  for (int64_t i = 0; i < li.rows; i++)
    SetLabel(labels, lv->dtype, i, li.ignore);
  std::map<int, Buf> ref3;
  gcc_diag d3{};
  ASSERT_EQ(RunReference(g, gr, r, &ref3, &d3), GCC_OK) << d3.msg;
  ASSERT_TRUE(LaunchGroup(mod, ks, k0, k1, &r, 0, 0, 3.0e38f, &err)) << err;
  EXPECT_EQ(r.bad_label, GCC_BAD_LABEL_NONE);
  for (auto &o : r.out) {
    Cmp c = Compare(o.second.f(), ref3.at(o.first).f(), o.second.floats(), kTol, false);
    EXPECT_EQ(c.bad, 0u) << "all rows ignored: '" << g->values[o.first].name << "': " << c.first
                         << Where(ks, k);
  }
  memcpy(labels.data(), saved.data(), saved.bytes);
}

// ---- the optimizer kernel ----

int64_t Padded(int64_t n) {
  return (n + 15) / 16 * 16;
} // 64-byte tensors, as the session

void CheckOptimizerKernel(const std::string &plan, const gcc_graph *g, const gcc_kernel_set &ks,
                          const gcc_kernel_info &k, const EmulatedModule &mod, std::mt19937 *rng) {
  SCOPED_TRACE(k.name);
  const gcc_group *gr = &g->groups[k.group];
  ASSERT_GE(gr->n_nodes, 1);
  const gcc_node *n0 = &g->nodes[gr->nodes[0]];
  const bool adam = n0->op == GCC_OP_ADAM;
  const int n_state = adam ? 2 : (n0->n_inputs > 2 && n0->inputs[2] >= 0 ? 1 : 0);
  std::vector<int64_t> off(gr->n_nodes), numel(gr->n_nodes);
  int64_t total = 0;
  for (int m = 0; m < gr->n_nodes; m++) {
    const gcc_node *n = &g->nodes[gr->nodes[m]];
    ASSERT_EQ(n->op, n0->op) << n->name;
    ASSERT_EQ(n->n_inputs, n0->n_inputs) << n->name;
    off[m] = total;
    numel[m] = gcc_shape_numel(&g->values[n->inputs[0]].shape, nullptr);
    total += Padded(numel[m]);
  }
  EXPECT_EQ(k.work_items, total);
  // The sections are the session's persistent arena (runtime/session.c):
  // every parameter of the model, each padded to 64 bytes, in parallel
  // [params][grads][state0][state1]. The kernel covers `total` floats from
  // each base, so it must update every parameter, or it would walk the
  // wrong slots (a parameter whose gradient does not reach the loss, or
  // one on another device, breaks this).
  std::set<int> updated;
  for (int m = 0; m < gr->n_nodes; m++)
    updated.insert(g->nodes[gr->nodes[m]].inputs[0]);
  for (int v = 0; v < g->n_values; v++)
    if (g->values[v].kind == GCC_VALUE_PARAM) {
      EXPECT_TRUE(updated.count(v)) << "parameter '" << g->values[v].name
                                    << "' has a slot in the sections but no update in " << k.name;
    }
  // argument kinds the kernel takes
  std::map<gcc_karg_kind, int> kinds;
  for (int a = 0; a < k.n_args; a++)
    kinds[k.args[a].kind]++;
  EXPECT_EQ(kinds[GCC_KARG_PARAMS], 1);
  EXPECT_EQ(kinds[GCC_KARG_GRADS], 1);
  EXPECT_EQ(kinds[GCC_KARG_STATE0], n_state >= 1 ? 1 : 0) << Where(ks, k);
  EXPECT_EQ(kinds[GCC_KARG_STATE1], n_state >= 2 ? 1 : 0) << Where(ks, k);
  EXPECT_EQ(kinds[GCC_KARG_NUMEL], 1);
  EXPECT_EQ(kinds[GCC_KARG_FIRST_STEP], adam ? 0 : 1);
  EXPECT_EQ(kinds[GCC_KARG_STEP_SIZE], adam ? 1 : 0);
  EXPECT_EQ(kinds[GCC_KARG_BC2_SQRT], adam ? 1 : 0);
  // the learning rate: SGD's always (an lr schedule changes it), AdamW's decay
  EXPECT_EQ(kinds[GCC_KARG_LR], adam ? (int)n0->av[ADAM_DECOUPLED].i : 1);
  EXPECT_EQ(kinds[GCC_KARG_INPUT] + kinds[GCC_KARG_OUTPUT] + kinds[GCC_KARG_BAD_LABEL], 0);

  const size_t bytes = (size_t)total * 4;
  Buf P = Buf::Alloc(bytes), G = Buf::Alloc(bytes), S[2] = {Buf::Alloc(bytes), Buf::Alloc(bytes)};
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto random_sections = [&](const Buf &b, bool positive) {
    for (int m = 0; m < gr->n_nodes; m++)
      for (int64_t i = 0; i < numel[m]; i++) {
        float x = u(*rng);
        b.f()[off[m] + i] = positive ? x * x : x;
      }
  };
  random_sections(P, false);
  if (!adam && n_state)
    Fill(S[0], NAN); // SGD's first step must not read the momentum buffer
  // Adam's moments start at zero (PyTorch)
  Buf refP = P.Clone(), refS[2] = {S[0].Clone(), S[1].Clone()};

  for (int64_t step : {0, 1, 2, 9}) {
    SCOPED_TRACE("optimizer step " + std::to_string(step));
    random_sections(G, false);
    Buf pristineG = G.Clone();
    // the kernel
    long long n_arg = total;
    int first = step == 0;
    float step_size = 0, bc2_sqrt = 0;
    float lr_arg = n0->av[0].f; // SGD_LR == ADAM_LR == 0
    if (adam) {
      double t = (double)(step + 1);
      step_size = (float)((double)n0->av[ADAM_LR].f / (1.0 - pow((double)n0->av[ADAM_BETA1].f, t)));
      bc2_sqrt = (float)sqrt(1.0 - pow((double)n0->av[ADAM_BETA2].f, t));
    }
    Buf before[3] = {P.Clone(), S[0].Clone(), S[1].Clone()};
    auto launch = [&](unsigned grid, unsigned block, bool rev, std::string *err) {
      std::vector<void *> ptrs(k.n_args), argv(k.n_args);
      for (int a = 0; a < k.n_args; a++) {
        switch (k.args[a].kind) {
        case GCC_KARG_PARAMS:
          ptrs[a] = P.data();
          argv[a] = &ptrs[a];
          break;
        case GCC_KARG_GRADS:
          ptrs[a] = G.data();
          argv[a] = &ptrs[a];
          break;
        case GCC_KARG_STATE0:
          ptrs[a] = S[0].data();
          argv[a] = &ptrs[a];
          break;
        case GCC_KARG_STATE1:
          ptrs[a] = S[1].data();
          argv[a] = &ptrs[a];
          break;
        case GCC_KARG_NUMEL: argv[a] = &n_arg; break;
        case GCC_KARG_FIRST_STEP: argv[a] = &first; break;
        case GCC_KARG_STEP_SIZE: argv[a] = &step_size; break;
        case GCC_KARG_BC2_SQRT: argv[a] = &bc2_sqrt; break;
        case GCC_KARG_LR: argv[a] = &lr_arg; break;
        default:
          *err = std::string("unexpected optimizer argument ") + k.args[a].name;
          return false;
        }
      }
      mod.SetReversedThreadOrder(rev);
      bool ok = mod.Launch(k.name, grid, block, argv.data(), err);
      mod.SetReversedThreadOrder(false);
      return ok;
    };
    std::string err;
    ASSERT_TRUE(launch((unsigned)k.grid_dim, (unsigned)k.block_dim, false, &err))
        << err << Where(ks, k);
    EXPECT_TRUE(SameBits(G, pristineG)) << "the optimizer wrote the gradients";
    if (step == 0 || step == 9) { // another launch shape from the same state: same bits
      Buf after[3] = {P.Clone(), S[0].Clone(), S[1].Clone()};
      memcpy(P.data(), before[0].data(), bytes);
      memcpy(S[0].data(), before[1].data(), bytes);
      memcpy(S[1].data(), before[2].data(), bytes);
      ASSERT_TRUE(launch(7, 96, step == 9, &err)) << err;
      EXPECT_TRUE(SameBits(P, after[0]) && SameBits(S[0], after[1]) && SameBits(S[1], after[2]))
          << "the update changes with the launch shape" << Where(ks, k);
    }
    // the CPU backend, parameter by parameter
    gcc_diag d{};
    gcc_cpu_ctx ctx{};
    ctx.max_threads = 1;
    ctx.optimizer_step = step;
    ctx.diag = &d;
    ctx.source = g->source;
    for (int m = 0; m < gr->n_nodes; m++) {
      const gcc_node *n = &g->nodes[gr->nodes[m]];
      std::vector<gcc_tensor> t(n->n_inputs);
      std::vector<gcc_tensor *> tp(n->n_inputs);
      float *bases[4] = {refP.f(), G.f(), refS[0].f(), refS[1].f()};
      for (int q = 0; q < n->n_inputs; q++) {
        const gcc_value *val = &g->values[n->inputs[q]];
        t[q].dtype = val->dtype;
        t[q].shape = val->shape;
        t[q].numel = gcc_shape_numel(&val->shape, nullptr);
        ASSERT_EQ(t[q].numel, numel[m]) << val->name;
        t[q].data = bases[q] + off[m];
        tp[q] = &t[q];
      }
      gcc_kernel_args a{n, tp.data(), n->n_inputs, nullptr, 0, &ctx, nullptr, 0, nullptr};
      ASSERT_EQ(gcc_cpu_op_of(n->op)->kernel(&a), GCC_OK) << d.msg;
    }
    const char *names[3] = {"parameters", adam ? "exp_avg" : "momentum_buffer", "exp_avg_sq"};
    const Buf *got[3] = {&P, &S[0], &S[1]}, *want[3] = {&refP, &refS[0], &refS[1]};
    for (int s = 0; s < 1 + n_state; s++) {
      Cmp all;
      for (int m = 0; m < gr->n_nodes; m++) {
        Cmp c = Compare(got[s]->f() + off[m], want[s]->f() + off[m], (size_t)numel[m], kTol, true);
        all.n += c.n;
        all.bad += c.bad;
        all.unwritten += c.unwritten;
        all.max_abs = std::max(all.max_abs, c.max_abs);
        all.max_rel = std::max(all.max_rel, c.max_rel);
        if (c.bad && all.first.empty())
          all.first = std::string(g->nodes[gr->nodes[m]].name) + ": " + c.first;
      }
      EXPECT_EQ(all.bad, 0u) << names[s] << ": " << all.bad << " of " << all.n
                             << " differ from the CPU backend; first: " << all.first
                             << Where(ks, k);
      g_summary.push_back(
          {plan, std::string(k.name) + " -> " + names[s] + " (step " + std::to_string(step) + ")",
           gcc_group_kind_name(gr->kind), all.n, all.max_abs, all.max_rel, true});
    }
    // padding between tensors: zero parameters stay zero
    for (int m = 0; m < gr->n_nodes; m++)
      for (int64_t i = numel[m]; i < Padded(numel[m]); i++)
        ASSERT_EQ(P.f()[off[m] + i], 0.0f) << "padding of " << g->nodes[gr->nodes[m]].name;
    // the next step continues from the kernel's state (equal to the reference's)
    memcpy(refP.data(), P.data(), bytes);
    memcpy(refS[0].data(), S[0].data(), bytes);
    memcpy(refS[1].data(), S[1].data(), bytes);
  }
}

void CheckPlan(const PlanCase &pc) {
  SCOPED_TRACE(pc.name);
  gcc_options o{};
  o.mode = pc.mode;
  o.batch_size = pc.batch;
  o.opt = pc.opt;
  o.device = GCC_DEV_CUDA(0);
  o.device_explicit = 1;
  o.n_cuda_devices = 1;
  FILE *sink = fopen("/dev/null", "w");
  o.warn_file = sink;
  gcc_graph *g = nullptr;
  gcc_mem_plan mem{};
  gcc_diag d{};
  gcc_status s = gcc_compile_graph(pc.model, &o, &g, &mem, &d);
  fclose(sink);
  ASSERT_EQ(s, GCC_OK) << d.msg;
  gcc_kernel_set ks{};
  s = gcc_codegen_emit(g, GCC_DEV_CUDA(0), pc.sm_count, &ks, &d);
  if (s != GCC_OK) {
    gcc_mem_plan_free(&mem);
    gcc_graph_free(g);
    FAIL() << d.msg;
  }
  EXPECT_GE(ks.n_kernels, pc.min_kernels);
  // every generated group of the device has its kernel, once (a loss
  // group with its loss of more than a few classes two: the rows, then their sum)
  std::map<int, int> per_group;
  for (int i = 0; i < ks.n_kernels; i++)
    per_group[ks.kernels[i].group]++;
  for (int gi = 0; gi < g->n_groups; gi++) {
    const gcc_group *gr = &g->groups[gi];
    bool generated = gr->kind == GCC_GROUP_POINTWISE || gr->kind == GCC_GROUP_LOSS ||
                     gr->kind == GCC_GROUP_OPTIMIZER;
    bool sce = false; // with the loss, of more than a small batch of few classes
    bool big_mse = false, mse_fwd = false, mse_grad = false; // over 16,384 elements
    for (int m = 0; m < gr->n_nodes; m++) {
      const gcc_node *n = &g->nodes[gr->nodes[m]];
      if (n->op == GCC_OP_SOFTMAX_CROSS_ENTROPY) {
        const gcc_shape &xs = g->values[n->inputs[0]].shape;
        sce = !(xs.dims[1] <= 32 && xs.dims[0] * xs.dims[1] <= 16384);
      }
      if (n->op == GCC_OP_MEAN_SQUARED_ERROR || n->op == GCC_OP_MEAN_SQUARED_ERROR_GRAD) {
        bool fwd = n->op == GCC_OP_MEAN_SQUARED_ERROR;
        mse_fwd |= fwd;
        mse_grad |= !fwd;
        big_mse = gcc_shape_numel(&g->values[n->inputs[fwd ? 0 : 1]].shape, nullptr) > 16384;
      }
    }
    // a large MSE: the chunks' partial sums, their sum, and the gradient
    int kernels = big_mse ? 2 * mse_fwd + mse_grad : sce ? 2 : 1;
    if (gr->device == GCC_DEV_CUDA(0)) {
      EXPECT_EQ(per_group[gi], generated ? kernels : 0) << gr->name;
    }
  }
  g_sources += ks.source;
  EmulatedModule mod;
  std::string err;
  bool compiled = mod.Compile(ks.source, pc.name, &err);
  EXPECT_TRUE(compiled) << err << "\n---- source ----\n" << ks.source;
  std::mt19937 rng(1234);
  for (int i = 0; compiled && i < ks.n_kernels; i++) {
    int k0 = i; // the group's kernels are consecutive
    while (i + 1 < ks.n_kernels && ks.kernels[i + 1].group == ks.kernels[k0].group)
      i++;
    const gcc_kernel_info &k = ks.kernels[i];
    CheckStructure(g, ks, k0, i);
    if (g->groups[k.group].kind == GCC_GROUP_OPTIMIZER)
      CheckOptimizerKernel(pc.name, g, ks, k, mod, &rng);
    else
      CheckGroupKernel(pc.name, g, ks, k0, i, mod, &rng);
  }
  gcc_kernel_set_free(&ks);
  gcc_mem_plan_free(&mem);
  gcc_graph_free(g);
}

// x (N, 3, 5) + b (3, 1) -> relu -> + x -> + c (scalar const) -> relu ->
// MSE with t (N, 3, 5); and an (N, 12) branch that reaches float4: y =
// relu(z + w (12)) + z -> MSE. Broadcast, float4 and reductions to (3, 1)
// and (12) in the backward.
gcc_graph *PointwiseModel(gcc_opt_kind kind) {
  gcc_builder *b = gcc_builder_new("pointwise", 5);
  int64_t xd[3] = {GCC_BATCH_DIM, 3, 5}, bd[2] = {3, 1}, cd[1] = {1};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 3, xd);
  int t = gcc_build_input(b, "t", GCC_DT_FLOAT32, 3, xd);
  float bias[3] = {0.5f, -0.25f, 0.125f}, c1[1] = {0.75f};
  int p = gcc_build_param(b, "b3", 2, bd, bias);
  int c = gcc_build_const(b, "c", GCC_DT_FLOAT32, 1, cd, c1);
  int in1[2] = {x, p};
  int y = gcc_build_op(b, GCC_OP_ADD, "add_b", "add_b.out", in1, 2);
  y = gcc_build_relu(b, "relu_a", y);
  int in2[2] = {y, x};
  y = gcc_build_op(b, GCC_OP_ADD, "add_x", "add_x.out", in2, 2);
  int in3[2] = {y, c};
  y = gcc_build_op(b, GCC_OP_ADD, "add_c", "add_c.out", in3, 2);
  y = gcc_build_relu(b, "relu_b", y);
  int loss1 = gcc_build_mse(b, "loss1", y, t);
  gcc_build_output(b, loss1);
  return FinishInlineTraining(b, "loss1", nullptr, "x", "t", Opt(kind, 0.05f, 0.9f));
}

gcc_graph *Float4Model() {
  gcc_builder *b = gcc_builder_new("float4", 6);
  int64_t zd[2] = {GCC_BATCH_DIM, 12}, wd[1] = {12};
  int z = gcc_build_input(b, "z", GCC_DT_FLOAT32, 2, zd);
  int t = gcc_build_input(b, "t", GCC_DT_FLOAT32, 2, zd);
  float w0[12];
  for (int i = 0; i < 12; i++)
    w0[i] = 0.1f * (float)(i - 6);
  int w = gcc_build_param(b, "w", 1, wd, w0);
  int in1[2] = {z, w};
  int y = gcc_build_op(b, GCC_OP_ADD, "add_w", "add_w.out", in1, 2);
  y = gcc_build_relu(b, "relu", y);
  int in2[2] = {y, z};
  y = gcc_build_op(b, GCC_OP_ADD, "add_z", "add_z.out", in2, 2);
  int in3[2] = {y, t}; // equal shapes: float4 in the backward chain too
  y = gcc_build_op(b, GCC_OP_ADD, "add_t", "add_t.out", in3, 2);
  int loss = gcc_build_mse(b, "loss", y, t);
  gcc_build_output(b, loss);
  return FinishInlineTraining(b, "loss", nullptr, "z", "t", Opt(GCC_OPT_SGD, 0.1f));
}

// A classifier with CrossEntropyLoss class weights and int32 labels.
gcc_graph *WeightedClassifier(const char *reduction) {
  gcc_builder *b = gcc_builder_new("weighted", 9);
  int64_t xd[2] = {GCC_BATCH_DIM, 6}, ld[1] = {GCC_BATCH_DIM}, wd[1] = {5};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, xd);
  int lab = gcc_build_input(b, "label", GCC_DT_INT32, 1, ld);
  float cw[5] = {1.0f, 0.5f, 2.0f, 0.25f, 1.5f};
  int w = gcc_build_const(b, "class_weight", GCC_DT_FLOAT32, 1, wd, cw);
  int logits = gcc_build_linear(b, "fc", x, 6, 5);
  int loss = gcc_build_cross_entropy(b, "loss", logits, lab, w);
  gcc_build_output(b, loss);
  gcc_build_training_spec ts{};
  ts.loss = "loss";
  ts.prediction = "fc.out";
  ts.input = "x";
  ts.target = "label";
  ts.dataset = "inline";
  ts.opt.kind = GCC_OPT_SGD;
  ts.opt.lr = 0.1f;
  ts.opt.momentum = 0.9f;
  ts.batch_size = 8;
  ts.epochs = 1;
  gcc_build_training(b, &ts);
  gcc_graph *g = nullptr;
  gcc_diag d{};
  EXPECT_EQ(gcc_builder_finish(b, &g, &d), GCC_OK) << d.msg;
  if (g && strcmp(reduction, "mean") != 0)
    for (int i = 0; i < g->n_nodes; i++)
      if (g->nodes[i].op == GCC_OP_SOFTMAX_CROSS_ENTROPY) {
        EXPECT_EQ(gcc_node_set_string(g, i, "reduction", reduction), GCC_OK);
      }
  return g;
}

// y1 = x (N, 7) + b (7); y2 = Gemm(y1, W, c, beta = 0.5); y4 = (y2 + q) + q:
// standalone reductions (of a GEMM output and of the loss gradient), a
// reduction with scale 0.5 (dC of the Gemm), gradient accumulation of q
// used twice, broadcast with a width that is not a multiple of 4.
gcc_graph *ReductionModel() {
  gcc_builder *b = gcc_builder_new("reductions", 11);
  int64_t xd[2] = {GCC_BATCH_DIM, 7}, td[2] = {GCC_BATCH_DIM, 3}, bd[1] = {7}, qd[1] = {3};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, xd);
  int t = gcc_build_input(b, "t", GCC_DT_FLOAT32, 2, td);
  float b0[7] = {0.1f, -0.2f, 0.3f, -0.4f, 0.5f, -0.6f, 0.7f}, q0[3] = {0.25f, -0.5f, 1.0f};
  int bias = gcc_build_param(b, "b", 1, bd, b0);
  int q = gcc_build_param(b, "q", 1, qd, q0);
  int in1[2] = {x, bias};
  int y = gcc_build_op(b, GCC_OP_ADD, "add_b", "add_b.out", in1, 2);
  y = gcc_build_linear(b, "fc", y, 7, 3);
  gcc_build_set_float(b, y, "beta", 0.5f);
  int in2[2] = {y, q};
  y = gcc_build_op(b, GCC_OP_ADD, "add_q1", "add_q1.out", in2, 2);
  int in3[2] = {y, q};
  y = gcc_build_op(b, GCC_OP_ADD, "add_q2", "add_q2.out", in3, 2);
  int loss = gcc_build_mse(b, "loss", y, t);
  gcc_build_output(b, loss);
  return FinishInlineTraining(b, "loss", nullptr, "x", "t", Opt(GCC_OPT_SGD, 0.1f, 0.5f));
}

// x (N, 1000) + b -> LogSoftmax over the 1000 classes -> MSE with t (N,
// 1000): LogSoftmaxGrad's lines of 1000 (a block per line, the sum of dY
// over 256 lanes in a fixed tree) and, from 17 rows on, an MSE over more
// than 16,384 elements (per-chunk partial sums, then one block over them,
// and an elementwise gradient kernel).
gcc_graph *WideLogSoftmaxMseModel() {
  gcc_builder *b = gcc_builder_new("wide_log_softmax_mse", 5);
  int64_t xd[2] = {GCC_BATCH_DIM, 1000}, bd[1] = {1000};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, xd);
  int t = gcc_build_input(b, "t", GCC_DT_FLOAT32, 2, xd);
  std::vector<float> bias(1000);
  for (size_t i = 0; i < bias.size(); i++)
    bias[i] = 0.002f * (float)(i % 89) - 0.05f;
  int in[2] = {x, gcc_build_param(b, "b", 1, bd, bias.data())};
  int y = gcc_build_op(b, GCC_OP_ADD, "add_b", "add_b.out", in, 2);
  int lsm = gcc_build_op(b, GCC_OP_LOG_SOFTMAX, "lsm", "lsm.out", &y, 1);
  gcc_build_set_int(b, lsm, "axis", 1);
  int loss = gcc_build_mse(b, "loss", lsm, t);
  gcc_build_output(b, loss);
  return FinishInlineTraining(b, "loss", nullptr, "x", "t", Opt(GCC_OPT_SGD, 0.1f));
}

// x (N, 4) + c0 + c1 + ... (n_adds constants of shape (4)): one pointwise
// group of up to 64 nodes, with n_adds + 1 external inputs.
gcc_graph *LongChain(int n_adds) {
  gcc_builder *b = gcc_builder_new("chain", 1);
  int64_t xd[2] = {GCC_BATCH_DIM, 4}, cd[1] = {4};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, xd);
  int t = gcc_build_input(b, "t", GCC_DT_FLOAT32, 2, xd);
  int y = x;
  for (int i = 0; i < n_adds; i++) {
    float cv[4] = {0.01f * i, -0.02f * i, 0.5f, -0.5f};
    char cn[32], nn[32], on[32];
    snprintf(cn, sizeof cn, "c%d", i);
    snprintf(nn, sizeof nn, "add%d", i);
    snprintf(on, sizeof on, "add%d.out", i);
    int c = gcc_build_const(b, cn, GCC_DT_FLOAT32, 1, cd, cv);
    int in[2] = {y, c};
    y = gcc_build_op(b, GCC_OP_ADD, nn, on, in, 2);
  }
  int loss = gcc_build_mse(b, "loss", y, t);
  gcc_build_output(b, loss);
  return FinishInlineTraining(b, "loss", nullptr, "x", "t", Opt(GCC_OPT_SGD, 0.1f));
}
void PrintSummary() {
  double worst_abs = 0, worst_rel = 0;
  printf("\n%-28s %-64s %-10s %9s %11s %11s\n", "plan", "kernel -> output", "kind", "elements",
         "max |err|", "max rel");
  for (const Summary &s : g_summary) {
    printf("%-28s %-64s %-10s %9zu %11.3g %11.3g%s\n", s.plan.c_str(), s.kernel.c_str(),
           s.kind.c_str(), s.elements, s.max_abs, s.max_rel, s.exact ? " (bit-exact)" : "");
    worst_abs = std::max(worst_abs, s.max_abs);
    worst_rel = std::max(worst_rel, s.max_rel);
  }
  printf("%zu outputs compared; worst |err| %.3g, worst relative %.3g\n", g_summary.size(),
         worst_abs, worst_rel);
  g_summary.clear();
}

class Generated : public ::testing::Test {
protected:
  void SetUp() override { g_sources.clear(); }
  void TearDown() override { PrintSummary(); }
};

TEST_F(Generated, MnistMlpKernelsMatchTheCpuBackend) {
  gcc_graph *mlp = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &mlp, &d), GCC_OK) << d.msg;
  gcc_optimizer sgd = mlp->training.opt; // SGD lr 0.1 momentum 0.5
  gcc_optimizer nesterov = sgd;
  nesterov.momentum = 0.9f;
  nesterov.nesterov = 1;
  nesterov.weight_decay = 1e-4f;
  gcc_optimizer damp = sgd;
  damp.momentum = 0.9f;
  damp.dampening = 0.1f;
  damp.weight_decay = 5e-4f;
  gcc_optimizer adam{};
  adam.kind = GCC_OPT_ADAM;
  adam.lr = 1e-3f;
  adam.beta1 = 0.9f;
  adam.beta2 = 0.999f;
  adam.eps = 1e-8f;
  adam.weight_decay = 1e-2f;
  const PlanCase cases[] = {
      {"mlp_train_b64_sgd", mlp, GCC_MODE_TRAIN, 64, sgd, 132, 2},
      {"mlp_train_b13_sgd_2sm", mlp, GCC_MODE_TRAIN, 13, sgd, 2, 2},
      {"mlp_train_b64_nesterov_wd", mlp, GCC_MODE_TRAIN, 64, nesterov, 132, 2},
      {"mlp_train_b13_dampening", mlp, GCC_MODE_TRAIN, 13, damp, 132, 2},
      {"mlp_train_b64_adam", mlp, GCC_MODE_TRAIN, 64, adam, 132, 2},
      {"mlp_eval_b1000", mlp, GCC_MODE_EVAL, 1000, sgd, 132, 1},
  };
  for (const PlanCase &c : cases)
    CheckPlan(c);
  EXPECT_TRUE(Emitted("const long long* __restrict__ labels"));
  EXPECT_TRUE(Emitted("float* __restrict__ buf")); // SGD momentum
  EXPECT_TRUE(Emitted("bc2_sqrt"));                // Adam
  gcc_graph_free(mlp);
}

TEST_F(Generated, CnnKernelsMatchTheCpuBackend) {
  // the generated groups of the CNN plans: ReLU and its gradient over
  // NCHW activations (the convolutions and poolings are cuDNN calls), the
  // fully connected layers' epilogue-free parts, the loss and the SGD
  // momentum update
  gcc_graph *cifar = nullptr, *mcnn = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_cifar_cnn(GCC_CIFAR_CNN_SEED, &cifar, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_model_mnist_cnn(GCC_MNIST_CNN_SEED, &mcnn, &d), GCC_OK) << d.msg;
  const PlanCase cases[] = {
      {"cifar_cnn_train_b4", cifar, GCC_MODE_TRAIN, 4, cifar->training.opt, 132, 4},
      {"cifar_cnn_train_b64_2sm", cifar, GCC_MODE_TRAIN, 64, cifar->training.opt, 2, 4},
      // evaluation: the ReLUs joined their convolutions' cuDNN calls (issue
      // 29), the loss kernel is what is generated
      {"cifar_cnn_eval_b100", cifar, GCC_MODE_EVAL, 100, cifar->training.opt, 132, 1},
      {"mnist_cnn_train_b64", mcnn, GCC_MODE_TRAIN, 64, mcnn->training.opt, 132, 4},
      {"mnist_cnn_eval_b100", mcnn, GCC_MODE_EVAL, 100, mcnn->training.opt, 132, 1},
  };
  for (const PlanCase &c : cases)
    CheckPlan(c);
  gcc_graph_free(cifar);
  gcc_graph_free(mcnn);
}

TEST_F(Generated, LinearModelKernelsMatchTheCpuBackend) {
  gcc_graph *lin = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_linear(GCC_LINEAR_SEED, &lin, &d), GCC_OK) << d.msg;
  gcc_optimizer sgd = lin->training.opt; // plain SGD: no momentum buffer
  gcc_optimizer adam{};
  adam.kind = GCC_OPT_ADAM;
  adam.lr = 1e-2f;
  adam.beta1 = 0.8f;
  adam.beta2 = 0.99f;
  adam.eps = 1e-6f;
  const PlanCase cases[] = {
      {"linear_train_b16", lin, GCC_MODE_TRAIN, 16, sgd, 132, 2},
      {"linear_train_b13", lin, GCC_MODE_TRAIN, 13, sgd, 1, 2},
      {"linear_train_b16_adam", lin, GCC_MODE_TRAIN, 16, adam, 132, 2},
      {"linear_eval_b7", lin, GCC_MODE_EVAL, 7, sgd, 132, 1},
  };
  for (const PlanCase &c : cases)
    CheckPlan(c);
  gcc_graph_free(lin);
}

TEST_F(Generated, BroadcastFloat4AndReductionKernelsMatchTheCpuBackend) {
  gcc_graph *pw_sgd = PointwiseModel(GCC_OPT_SGD), *pw_adam = PointwiseModel(GCC_OPT_ADAM);
  gcc_graph *f4 = Float4Model();
  ASSERT_TRUE(pw_sgd && pw_adam && f4);
  const PlanCase cases[] = {
      {"pointwise_train_b8", pw_sgd, GCC_MODE_TRAIN, 8, pw_sgd->training.opt, 132, 3},
      {"pointwise_train_b5_adam", pw_adam, GCC_MODE_TRAIN, 5, pw_adam->training.opt, 132, 3},
      {"pointwise_eval_b3", pw_sgd, GCC_MODE_EVAL, 3, pw_sgd->training.opt, 132, 2},
      {"float4_train_b8", f4, GCC_MODE_TRAIN, 8, f4->training.opt, 132, 3},
      {"float4_train_b5", f4, GCC_MODE_TRAIN, 5, f4->training.opt, 132, 3},
      {"float4_train_b4096", f4, GCC_MODE_TRAIN, 4096, f4->training.opt, 4, 3},
  };
  for (const PlanCase &c : cases)
    CheckPlan(c);
  EXPECT_TRUE(Emitted("reinterpret_cast<const float4*>")); // float4 path
  EXPECT_TRUE(Emitted("LL) % "));                          // broadcast index
  EXPECT_TRUE(Emitted("0LL]"));                            // scalar broadcast
  EXPECT_TRUE(Emitted("float acc = 0.0f;"));               // reduction
  EXPECT_TRUE(Emitted("m[i] = m[i] * b1"));                // Adam
  gcc_graph_free(pw_sgd);
  gcc_graph_free(pw_adam);
  gcc_graph_free(f4);
}

TEST_F(Generated, WeightedCrossEntropyWithInt32LabelsMatchesTheCpuBackend) {
  gcc_graph *mean = WeightedClassifier("mean"), *sum = WeightedClassifier("sum");
  ASSERT_TRUE(mean && sum);
  const PlanCase cases[] = {
      {"weighted_mean_train_b13", mean, GCC_MODE_TRAIN, 13, mean->training.opt, 132, 2},
      {"weighted_sum_train_b300", sum, GCC_MODE_TRAIN, 300, sum->training.opt, 132, 2},
      {"weighted_mean_eval_b9", mean, GCC_MODE_EVAL, 9, mean->training.opt, 132, 1},
  };
  for (const PlanCase &c : cases)
    CheckPlan(c);
  EXPECT_TRUE(Emitted("const int* __restrict__ labels"));
  EXPECT_TRUE(Emitted("(double)weight[y]"));
  EXPECT_TRUE(Emitted("loss[0] = (float)(s_sum[0]);")); // reduction "sum"
  gcc_graph_free(mean);
  gcc_graph_free(sum);
}

TEST_F(Generated, ReductionsScaledReductionsAndGradientAccumulationMatchTheCpuBackend) {
  gcc_graph *m = ReductionModel();
  ASSERT_TRUE(m);
  const PlanCase cases[] = {
      {"reductions_train_b8", m, GCC_MODE_TRAIN, 8, m->training.opt, 132, 4},
      {"reductions_train_b13", m, GCC_MODE_TRAIN, 13, m->training.opt, 3, 4},
  };
  for (const PlanCase &c : cases)
    CheckPlan(c);
  EXPECT_TRUE(Emitted("acc += in0[i];"));         // a reduction alone
  EXPECT_TRUE(Emitted("acc * 5.000000000e-01f")); // scaled (Gemm beta 0.5)
  gcc_graph_free(m);
}

TEST_F(Generated, SoftmaxLinesAndAThousandClassLossMatchTheCpuBackend) {
  gcc_graph *m = WideSoftmaxModel();
  ASSERT_TRUE(m);
  const PlanCase cases[] = {
      {"wide_softmax_eval_b7", m, GCC_MODE_EVAL, 7, m->training.opt, 132, 3},
      {"wide_softmax_train_b5", m, GCC_MODE_TRAIN, 5, m->training.opt, 2, 2},
  };
  for (const PlanCase &c : cases)
    CheckPlan(c);
  EXPECT_TRUE(Emitted("for (long long i = blockIdx.x; i < 7LL; i += gridDim.x)"));    // rows
  EXPECT_TRUE(Emitted("for (long long i = blockIdx.x; i < 1000LL; i += gridDim.x)")); // axis 0
  EXPECT_TRUE(Emitted("loss[0] = (float)(s_l[0] / s_w[0]);")); // the rows' losses summed
  gcc_graph_free(m);
}

// Issue 29: no thread walks a long line alone. LogSoftmaxGrad is a block
// per line (1000 classes); an MSE over 20,000 elements sums 10 chunks of
// 2,048 in as many blocks, then the partials in one block; at 5 rows (5,000
// elements) it stays the single-block kernel.
TEST_F(Generated, LogSoftmaxGradLinesAndALargeMseMatchTheCpuBackend) {
  gcc_graph *m = WideLogSoftmaxMseModel();
  ASSERT_TRUE(m);
  const PlanCase cases[] = {
      {"wide_lsm_mse_train_b20", m, GCC_MODE_TRAIN, 20, m->training.opt, 132, 4},
      {"wide_lsm_mse_train_b20_2sm", m, GCC_MODE_TRAIN, 20, m->training.opt, 2, 4},
      {"wide_lsm_mse_train_b5", m, GCC_MODE_TRAIN, 5, m->training.opt, 132, 2},
  };
  for (const PlanCase &c : cases)
    CheckPlan(c);
  EXPECT_TRUE(Emitted("for (long long b = blockIdx.x; b < 10LL; b += gridDim.x)")); // chunks
  EXPECT_TRUE(Emitted("for (long long b = l; b < 10LL; b += 256) a += part[b];"));  // partials
  EXPECT_TRUE(Emitted("for (long long i = blockIdx.x; i < 20LL; i += gridDim.x)")); // lines
  gcc_graph_free(m);
}

TEST_F(Generated, LongPointwiseChainKeepsEveryInput) {
  gcc_graph *m = LongChain(63); // 63 nodes, 64 external inputs
  ASSERT_TRUE(m);
  CheckPlan({"chain63_eval_b3", m, GCC_MODE_EVAL, 3, m->training.opt, 132, 2});
  gcc_graph_free(m);
}

// EMITTER BUG (codegen/emit.c, emit_pointwise): fusion puts up to 64 nodes
// in a pointwise group, which can read 65 external values, but the emitter
// keeps at most 64 (`if (!seen && n_ext < 64) ext[n_ext++] = v;`) and
// silently drops the rest; the dropped operand's name buffer `a[q]` keeps
// the previous node's, so the kernel compiles (NVRTC too) and computes
//   float t64 = t63 + in63; /* add63 */     (c62 added twice, c63 never)
// Fixed: fusion caps pointwise groups at 32 nodes and the emitter refuses
// more than 64 operands instead of dropping one.
TEST_F(Generated, PointwiseGroupWith65ExternalInputs) {
  gcc_graph *m = LongChain(64);
  ASSERT_TRUE(m);
  CheckPlan({"chain64_eval_b3", m, GCC_MODE_EVAL, 3, m->training.opt, 132, 2});
  gcc_graph_free(m);
}

} // namespace
