// Tests of NVRTC compilation (codegen/nvrtc.c) and the on-disk kernel cache
// (codegen/kernel_cache.c). No GPU is needed: NVRTC compiles without one,
// and /usr/local/cuda/bin/ptxas validates the PTX offline.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "codegen/kernel_cache.h"
#include "codegen/nvrtc.h"
#include "tests/testutil.h"

using namespace gcc_test; // tests/testutil.h

namespace {

// Three kernels in the conventions of codegen/emit.h: extern "C"
// __global__, grid-stride loops with 64-bit indices, shapes as constants,
// float4 for aligned equal-shaped operands, and a one-block loss kernel that
// reduces deterministically in shared memory with __syncthreads.
const char kSource[] =
    R"CUDA(/* gcc-train generated kernels: nvrtc_test, device 0, codegen version 1. */

__device__ __forceinline__ float fused_add_relu_elem(float a, float b) {
  float t0 = a + b; /* add1 */
  float t1 = t0 > 0.0f ? t0 : 0.0f; /* relu1 */
  return t1;
}

extern "C" __global__ void fused_add_relu(const float* __restrict__ in0, const float* __restrict__ in1, float* __restrict__ out0) {
  /* nodes: add1 (Add), relu1 (Relu) */
  const long long stride = (long long)gridDim.x * blockDim.x;
  /* float4: every operand has the full 1024 elements */
  for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < 256LL; q += stride) {
    float4 a0 = reinterpret_cast<const float4*>(in0)[q];
    float4 a1 = reinterpret_cast<const float4*>(in1)[q];
    float4 r;
    r.x = fused_add_relu_elem(a0.x, a1.x);
    r.y = fused_add_relu_elem(a0.y, a1.y);
    r.z = fused_add_relu_elem(a0.z, a1.z);
    r.w = fused_add_relu_elem(a0.w, a1.w);
    reinterpret_cast<float4*>(out0)[q] = r;
  }
}

extern "C" __global__ void fused_mul_bias(const float* __restrict__ in0, const float* __restrict__ in1, float* __restrict__ out0) {
  /* nodes: mul2 (Mul), add3 (Add: bias [64] broadcast over [32, 64]) */
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < 2048LL; i += stride)
    out0[i] = in0[i] * 0.5f + in1[i % 64LL];
}

extern "C" __global__ void mse_loss(const float* __restrict__ pred, const float* __restrict__ target, float* __restrict__ out0) {
  /* nodes: loss (MseLoss, mean); runs as exactly one block of 256 threads */
  __shared__ double s_sum[256];
  double acc = 0.0;
  for (long long i = threadIdx.x; i < 2048LL; i += blockDim.x) {
    double e = (double)pred[i] - (double)target[i];
    acc += e * e;
  }
  s_sum[threadIdx.x] = acc;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (threadIdx.x < s)
      s_sum[threadIdx.x] += s_sum[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    out0[0] = (float)(s_sum[0] / 2048.0);
}
)CUDA";

const char *const kKernels[] = {"fused_add_relu", "fused_mul_bias", "mse_loss"};
const char kProgram[] = "nvrtc_test(add1,relu1,mul2,add3,loss)";

struct Output {
  gcc_nvrtc_output o = {};
  Output() = default;
  Output(const Output &) = delete;
  Output &operator=(const Output &) = delete;
  ~Output() { gcc_nvrtc_output_free(&o); }
};

// A fresh, empty directory path (not created) unique to the test.
std::string FreshDir(const char *tag) {
  static int counter = 0;
  const ::testing::TestInfo *ti = ::testing::UnitTest::GetInstance()->current_test_info();
  return TmpDir() + "/" + ti->name() + "_" + tag + "_" + std::to_string(getpid()) + "_" +
         std::to_string(counter++);
}

// Runs ptxas on `ptx` for sm_XX; returns its exit status and fills `log`.
int Ptxas(const std::string &ptx, int sm, std::string *log) {
  static int counter = 0;
  std::string base =
      TmpDir() + "/ptxas_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  EXPECT_TRUE(WriteFile(base + ".ptx", ptx.data(), ptx.size()));
  std::string cmd = "/usr/local/cuda/bin/ptxas -arch=sm_" + std::to_string(sm) + " -o /dev/null " +
                    base + ".ptx > " + base + ".log 2>&1";
  int rc = system(cmd.c_str());
  *log = ReadText(base + ".log");
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string Ptx(const gcc_nvrtc_output &o) {
  return std::string(o.ptx, o.ptx_size);
}
std::string Cubin(const gcc_nvrtc_output &o) {
  return std::string(static_cast<const char *>(o.cubin), o.cubin_size);
}

// ---- NVRTC ----------------------------------------------------------------

TEST(Nvrtc, VersionAndOptions) {
  int major = 0, minor = -1;
  ASSERT_EQ(gcc_nvrtc_version(&major, &minor), GCC_OK);
  EXPECT_GE(major, 13);
  EXPECT_GE(minor, 0);
  gcc_nvrtc_opts o;
  gcc_nvrtc_options(90, &o);
  std::string all;
  for (int i = 0; i < o.n; i++)
    all += std::string(o.v[i]) + " ";
  EXPECT_NE(all.find("-arch=sm_90 "), std::string::npos) << all;
  EXPECT_NE(all.find("--std=c++17 "), std::string::npos) << all;
  EXPECT_NE(all.find("-lineinfo "), std::string::npos) << all;
  EXPECT_NE(all.find("--fmad=false "), std::string::npos) << all;
  EXPECT_EQ(all.find("fast_math"), std::string::npos) << all;
}

class NvrtcArch : public ::testing::TestWithParam<int> {};

TEST_P(NvrtcArch, CompilesToPtxAndCubin) {
  const int sm = GetParam();
  Output out;
  gcc_diag d = {};
  ASSERT_EQ(gcc_nvrtc_compile(kSource, kProgram, sm, &out.o, &d), GCC_OK) << d.msg;
  const gcc_nvrtc_output &o = out.o;

  ASSERT_NE(o.ptx, nullptr);
  ASSERT_GT(o.ptx_size, 0u);
  EXPECT_EQ(strlen(o.ptx), o.ptx_size);
  std::string ptx = Ptx(o);
  EXPECT_NE(ptx.find(".target sm_" + std::to_string(sm)), std::string::npos);
  for (const char *k : kKernels)
    EXPECT_NE(ptx.find(std::string(".entry ") + k + "("), std::string::npos)
        << "no .entry for " << k;
  EXPECT_NE(ptx.find("bar.sync"), std::string::npos) << "__syncthreads lost";
  EXPECT_EQ(ptx.find("fma.rn.f32"), std::string::npos) << "--fmad=false not honoured";

  ASSERT_NE(o.cubin, nullptr);
  ASSERT_GT(o.cubin_size, 64u);
  const unsigned char *c = static_cast<const unsigned char *>(o.cubin);
  EXPECT_EQ(memcmp(c,
                   "\x7f"
                   "ELF",
                   4),
            0)
      << "cubin is not an ELF file";
  EXPECT_EQ(c[18] | c[19] << 8, 190) << "ELF e_machine is not EM_CUDA";
  for (const char *k : kKernels)
    EXPECT_NE(Cubin(o).find(k), std::string::npos) << "cubin lacks " << k;

  ASSERT_NE(o.log, nullptr);
  EXPECT_GT(o.seconds, 0.0);

  // ptxas accepts the PTX for its own arch, and sm_80 PTX also for sm_90
  // (what a driver JIT does on a newer GPU).
  std::string log;
  EXPECT_EQ(Ptxas(ptx, sm, &log), 0) << log;
  if (sm != 90) {
    EXPECT_EQ(Ptxas(ptx, 90, &log), 0) << log;
  }

  // ... and rejects a corrupted one: a bogus instruction, and a cut-off file.
  std::string bad = ptx;
  size_t at = bad.find("ld.param");
  ASSERT_NE(at, std::string::npos);
  bad.replace(at, 8, "ld.bogus");
  EXPECT_NE(Ptxas(bad, sm, &log), 0) << "ptxas accepted a bogus instruction";
  EXPECT_NE(Ptxas(ptx.substr(0, ptx.size() / 2), sm, &log), 0) << "ptxas accepted half a file";
}

INSTANTIATE_TEST_SUITE_P(Archs, NvrtcArch, ::testing::Values(80, 90),
                         [](const ::testing::TestParamInfo<int> &i) {
                           return "sm_" + std::to_string(i.param);
                         });

TEST(Nvrtc, ArchesGiveDifferentCubins) {
  Output a, b;
  gcc_diag d = {};
  ASSERT_EQ(gcc_nvrtc_compile(kSource, kProgram, 80, &a.o, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_nvrtc_compile(kSource, kProgram, 90, &b.o, &d), GCC_OK) << d.msg;
  EXPECT_NE(Cubin(a.o), Cubin(b.o));
}

TEST(Nvrtc, CompileErrorNamesProgramLogAndSourceLine) {
  const char src[] = "extern \"C\" __global__ void fused_broken(float* __restrict__ out0) {\n"
                     "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
                     "  float y = out0[0] +;\n"
                     "  out0[0] = y;\n"
                     "}\n";
  const char name[] = "fused_broken(add7,relu8)";
  Output out;
  gcc_diag d = {};
  ASSERT_EQ(gcc_nvrtc_compile(src, name, 90, &out.o, &d), GCC_ERR_INTERNAL);
  EXPECT_EQ(d.status, GCC_ERR_INTERNAL);
  std::string msg = d.msg;
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
  EXPECT_NE(msg.find("sm_90"), std::string::npos) << msg;
  // the log line, as NVRTC wrote it
  EXPECT_NE(msg.find("fused_broken(add7,relu8)(3): error: expected an expression"),
            std::string::npos)
      << msg;
  // the offending source line, with its number
  EXPECT_NE(msg.find("    3 |   float y = out0[0] +;"), std::string::npos) << msg;
  // the full log stays available; no outputs
  ASSERT_NE(out.o.log, nullptr);
  EXPECT_NE(std::string(out.o.log).find("expected an expression"), std::string::npos);
  EXPECT_EQ(out.o.ptx, nullptr);
  EXPECT_EQ(out.o.cubin, nullptr);
}

TEST(Nvrtc, UnsupportedArchIsAClearError) {
  gcc_diag d = {};
  EXPECT_EQ(gcc_nvrtc_check_arch(90, &d), GCC_OK);
  EXPECT_EQ(gcc_nvrtc_check_arch(80, &d), GCC_OK);
  ASSERT_EQ(gcc_nvrtc_check_arch(70, &d), GCC_ERR_UNSUPPORTED);
  std::string msg = d.msg;
  EXPECT_NE(msg.find("sm_70"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no longer supported"), std::string::npos) << msg;
  EXPECT_NE(msg.find("sm_75"), std::string::npos) << msg; // the supported list
  EXPECT_NE(msg.find("sm_90"), std::string::npos) << msg;

  Output out;
  gcc_diag d2 = {};
  EXPECT_EQ(gcc_nvrtc_compile(kSource, kProgram, 70, &out.o, &d2), GCC_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(d2.msg).find("no longer supported"), std::string::npos) << d2.msg;
  EXPECT_EQ(gcc_nvrtc_check_arch(5000 / 5, &d), GCC_ERR_UNSUPPORTED); // sm_1000: too new
  EXPECT_NE(std::string(d.msg).find("too new"), std::string::npos) << d.msg;
  EXPECT_EQ(gcc_nvrtc_check_arch(0, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gcc_nvrtc_compile(nullptr, kProgram, 90, &out.o, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gcc_nvrtc_compile(kSource, kProgram, 90, nullptr, &d), GCC_ERR_INVALID_ARGUMENT);
}

// ---- kernel cache -----------------------------------------------------------

TEST(KernelCache, MissThenHit) {
  std::string dir = FreshDir("cache") + "/nested/deeper"; // mkdir -p
  Output a, b;
  gcc_diag d = {};
  int hit = -1;
  ASSERT_EQ(gcc_kernel_cache_compile(dir.c_str(), 1, kSource, kProgram, 90, &a.o, &hit, &d), GCC_OK)
      << d.msg;
  EXPECT_EQ(hit, 0);
  EXPECT_STREQ(a.o.cache_note, "");
  ASSERT_NE(a.o.log, nullptr);

  char path[4096];
  ASSERT_EQ(gcc_kernel_cache_entry_path(dir.c_str(), kSource, kProgram, 90, path, sizeof path, &d),
            GCC_OK);
  struct stat st;
  ASSERT_EQ(stat(path, &st), 0) << path;
  EXPECT_EQ(ListDir(dir).size(), 1u) << "temporary files left behind";

  ASSERT_EQ(gcc_kernel_cache_compile(dir.c_str(), 1, kSource, kProgram, 90, &b.o, &hit, &d), GCC_OK)
      << d.msg;
  EXPECT_EQ(hit, 1);
  EXPECT_STREQ(b.o.cache_note, "");
  EXPECT_EQ(b.o.log, nullptr);
  EXPECT_EQ(Ptx(a.o), Ptx(b.o));
  EXPECT_EQ(Cubin(a.o), Cubin(b.o));
  EXPECT_EQ(strlen(b.o.ptx), b.o.ptx_size);

  // Same bytes as a direct compilation.
  Output c;
  ASSERT_EQ(gcc_nvrtc_compile(kSource, kProgram, 90, &c.o, &d), GCC_OK) << d.msg;
  EXPECT_EQ(Ptx(c.o), Ptx(b.o));
  EXPECT_EQ(Cubin(c.o), Cubin(b.o));

  // Another arch is another entry; the first is still a hit.
  Output e, f;
  ASSERT_EQ(gcc_kernel_cache_compile(dir.c_str(), 1, kSource, kProgram, 80, &e.o, &hit, &d),
            GCC_OK);
  EXPECT_EQ(hit, 0);
  EXPECT_EQ(ListDir(dir).size(), 2u);
  ASSERT_EQ(gcc_kernel_cache_compile(dir.c_str(), 1, kSource, kProgram, 90, &f.o, &hit, &d),
            GCC_OK);
  EXPECT_EQ(hit, 1);
}

TEST(KernelCache, KeyCoversSourceArchOptionsAndName) {
  char k0[65], k1[65];
  gcc_diag d = {};
  ASSERT_EQ(gcc_kernel_cache_key(kSource, kProgram, 90, nullptr, k0, &d), GCC_OK);
  EXPECT_EQ(strlen(k0), 64u);
  ASSERT_EQ(gcc_kernel_cache_key(kSource, kProgram, 90, nullptr, k1, &d), GCC_OK);
  EXPECT_STREQ(k0, k1) << "key is not deterministic";

  gcc_nvrtc_opts o;
  gcc_nvrtc_options(90, &o);
  ASSERT_EQ(gcc_kernel_cache_key(kSource, kProgram, 90, &o, k1, &d), GCC_OK);
  EXPECT_STREQ(k0, k1) << "NULL options must mean gcc_nvrtc_options";

  std::string src2 = std::string(kSource) + " ";
  ASSERT_EQ(gcc_kernel_cache_key(src2.c_str(), kProgram, 90, nullptr, k1, &d), GCC_OK);
  EXPECT_STRNE(k0, k1) << "source";
  ASSERT_EQ(gcc_kernel_cache_key(kSource, kProgram, 80, nullptr, k1, &d), GCC_OK);
  EXPECT_STRNE(k0, k1) << "sm";
  ASSERT_EQ(gcc_kernel_cache_key(kSource, "other_name", 90, nullptr, k1, &d), GCC_OK);
  EXPECT_STRNE(k0, k1) << "program name";

  // every option matters: drop one, change one, add one
  for (int drop = 0; drop < o.n; drop++) {
    gcc_nvrtc_opts p;
    gcc_nvrtc_options(90, &p);
    for (int i = drop; i + 1 < p.n; i++)
      p.v[i] = p.v[i + 1];
    p.n--;
    ASSERT_EQ(gcc_kernel_cache_key(kSource, kProgram, 90, &p, k1, &d), GCC_OK);
    EXPECT_STRNE(k0, k1) << "dropping option " << o.v[drop];
  }
  gcc_nvrtc_opts p;
  gcc_nvrtc_options(90, &p);
  p.v[p.n - 1] = "--fmad=true";
  ASSERT_EQ(gcc_kernel_cache_key(kSource, kProgram, 90, &p, k1, &d), GCC_OK);
  EXPECT_STRNE(k0, k1) << "--fmad=true";
  gcc_nvrtc_options(90, &p);
  p.v[p.n++] = "-G";
  ASSERT_EQ(gcc_kernel_cache_key(kSource, kProgram, 90, &p, k1, &d), GCC_OK);
  EXPECT_STRNE(k0, k1) << "-G";
  // option boundaries are part of the key ("-a" "b" differs from "-ab")
  gcc_nvrtc_opts q1, q2;
  gcc_nvrtc_options(90, &q1);
  gcc_nvrtc_options(90, &q2);
  q1.v[q1.n++] = "-Dx";
  q1.v[q1.n++] = "=1";
  q2.v[q2.n++] = "-Dx=1";
  char a[65], b[65];
  ASSERT_EQ(gcc_kernel_cache_key(kSource, kProgram, 90, &q1, a, &d), GCC_OK);
  ASSERT_EQ(gcc_kernel_cache_key(kSource, kProgram, 90, &q2, b, &d), GCC_OK);
  EXPECT_STRNE(a, b);
}

// Damages the entry at `path` with `damage`, then checks the cache detects
// it (hit=0, a note), rebuilds the same bytes, and hits again afterwards.
void ExpectRebuilt(const std::string &dir, const char *path, const Output &ref,
                   const std::function<void(std::string *)> &damage, const char *what) {
  SCOPED_TRACE(what);
  std::string bytes = ReadText(path);
  ASSERT_FALSE(bytes.empty());
  damage(&bytes);
  ASSERT_TRUE(WriteFile(path, bytes.data(), bytes.size()));

  Output a, b;
  gcc_diag d = {};
  int hit = -1;
  ASSERT_EQ(gcc_kernel_cache_compile(dir.c_str(), 1, kSource, kProgram, 90, &a.o, &hit, &d), GCC_OK)
      << d.msg;
  EXPECT_EQ(hit, 0);
  EXPECT_NE(std::string(a.o.cache_note).find("removed and rebuilt"), std::string::npos)
      << a.o.cache_note;
  EXPECT_EQ(Ptx(a.o), Ptx(ref.o));
  EXPECT_EQ(Cubin(a.o), Cubin(ref.o));
  ASSERT_EQ(gcc_kernel_cache_compile(dir.c_str(), 1, kSource, kProgram, 90, &b.o, &hit, &d), GCC_OK)
      << d.msg;
  EXPECT_EQ(hit, 1) << "not rewritten after the rebuild";
  EXPECT_STREQ(b.o.cache_note, "");
  EXPECT_EQ(Cubin(b.o), Cubin(ref.o));
}

TEST(KernelCache, CorruptOrTruncatedEntriesAreRebuilt) {
  std::string dir = FreshDir("cache");
  Output ref;
  gcc_diag d = {};
  int hit = -1;
  ASSERT_EQ(gcc_kernel_cache_compile(dir.c_str(), 1, kSource, kProgram, 90, &ref.o, &hit, &d),
            GCC_OK)
      << d.msg;
  char path[4096];
  ASSERT_EQ(gcc_kernel_cache_entry_path(dir.c_str(), kSource, kProgram, 90, path, sizeof path, &d),
            GCC_OK);

  ExpectRebuilt(
      dir, path, ref, [](std::string *b) { (*b)[b->size() / 2] ^= 0x01; }, "flipped payload byte");
  ExpectRebuilt(
      dir, path, ref, [](std::string *b) { (*b)[80] ^= 0x20; }, "flipped PTX byte");
  ExpectRebuilt(
      dir, path, ref, [](std::string *b) { (*b)[b->size() - 1] ^= 0x80; }, "flipped checksum byte");
  ExpectRebuilt(
      dir, path, ref, [](std::string *b) { (*b)[0] = 'X'; }, "bad magic");
  ExpectRebuilt(
      dir, path, ref, [](std::string *b) { (*b)[8] = 99; }, "other version");
  ExpectRebuilt(
      dir, path, ref, [](std::string *b) { (*b)[20] ^= 1; }, "other key");
  ExpectRebuilt(
      dir, path, ref, [](std::string *b) { (*b)[48] ^= 0x40; }, "huge ptx size");
  ExpectRebuilt(
      dir, path, ref, [](std::string *b) { (*b)[63] = (char)0xff; }, "cubin size near 2^64");
  ExpectRebuilt(
      dir, path, ref, [](std::string *b) { b->resize(b->size() / 2); }, "truncated to half");
  ExpectRebuilt(
      dir, path, ref, [](std::string *b) { b->resize(b->size() - 1); }, "truncated by one byte");
  ExpectRebuilt(
      dir, path, ref, [](std::string *b) { b->resize(10); }, "truncated to 10 bytes");
  ExpectRebuilt(
      dir, path, ref, [](std::string *b) { b->clear(); }, "empty file");
  ExpectRebuilt(
      dir, path, ref, [](std::string *b) { b->append("junk"); }, "trailing junk");

  // A directory where the entry should be: not trusted, compiled anyway.
  ASSERT_EQ(unlink(path), 0);
  ASSERT_EQ(mkdir(path, 0700), 0);
  Output c;
  ASSERT_EQ(gcc_kernel_cache_compile(dir.c_str(), 1, kSource, kProgram, 90, &c.o, &hit, &d), GCC_OK)
      << d.msg;
  EXPECT_EQ(hit, 0);
  EXPECT_EQ(Cubin(c.o), Cubin(ref.o));
  EXPECT_STRNE(c.o.cache_note, "");

  // A FIFO there: must neither hang nor be trusted.
  ASSERT_EQ(rmdir(path), 0);
  ASSERT_EQ(mkfifo(path, 0600), 0);
  Output f, g;
  ASSERT_EQ(gcc_kernel_cache_compile(dir.c_str(), 1, kSource, kProgram, 90, &f.o, &hit, &d), GCC_OK)
      << d.msg;
  EXPECT_EQ(hit, 0);
  EXPECT_EQ(Cubin(f.o), Cubin(ref.o));
  ASSERT_EQ(gcc_kernel_cache_compile(dir.c_str(), 1, kSource, kProgram, 90, &g.o, &hit, &d),
            GCC_OK);
  EXPECT_EQ(hit, 1) << "the FIFO was not replaced by an entry";
}

TEST(KernelCache, NoKernelCacheNeitherReadsNorWrites) {
  std::string missing = FreshDir("never_created");
  Output a;
  gcc_diag d = {};
  int hit = -1;
  ASSERT_EQ(gcc_kernel_cache_compile(missing.c_str(), 0, kSource, kProgram, 90, &a.o, &hit, &d),
            GCC_OK)
      << d.msg;
  EXPECT_EQ(hit, 0);
  struct stat st;
  EXPECT_NE(stat(missing.c_str(), &st), 0) << "use_cache=0 created the directory";

  // An existing, populated cache is not read either.
  std::string dir = FreshDir("cache");
  Output warm, b;
  ASSERT_EQ(gcc_kernel_cache_compile(dir.c_str(), 1, kSource, kProgram, 90, &warm.o, &hit, &d),
            GCC_OK);
  ASSERT_EQ(gcc_kernel_cache_compile(dir.c_str(), 0, kSource, kProgram, 90, &b.o, &hit, &d),
            GCC_OK);
  EXPECT_EQ(hit, 0);
  ASSERT_NE(b.o.log, nullptr) << "came from the cache";
  EXPECT_EQ(Cubin(b.o), Cubin(warm.o));
  // ... nor written to: another arch leaves no entry.
  Output c;
  ASSERT_EQ(gcc_kernel_cache_compile(dir.c_str(), 0, kSource, kProgram, 80, &c.o, &hit, &d),
            GCC_OK);
  EXPECT_EQ(ListDir(dir).size(), 1u);
}

TEST(KernelCache, UnusableDirectoryStillCompiles) {
  std::string file = FreshDir("file");
  ASSERT_TRUE(WriteFile(file, "not a dir", 9));
  for (std::string dir : {file, file + "/sub/dir"}) {
    SCOPED_TRACE(dir);
    for (int round = 0; round < 2; round++) {
      Output out;
      gcc_diag d = {};
      int hit = -1;
      ASSERT_EQ(gcc_kernel_cache_compile(dir.c_str(), 1, kSource, kProgram, 90, &out.o, &hit, &d),
                GCC_OK)
          << d.msg;
      EXPECT_EQ(hit, 0);
      EXPECT_GT(out.o.ptx_size, 0u);
      EXPECT_GT(out.o.cubin_size, 0u);
      std::string note = out.o.cache_note;
      EXPECT_NE(note.find("kernel cache disabled"), std::string::npos) << note;
      EXPECT_NE(note.find(dir), std::string::npos) << note;
    }
  }
  EXPECT_EQ(ReadText(file), "not a dir");
}

TEST(KernelCache, ConcurrentWritersOfOneKey) {
  std::string dir = FreshDir("cache");
  const int kThreads = 4;
  std::vector<gcc_status> st(kThreads, GCC_ERR_INTERNAL);
  std::vector<std::string> cubins(kThreads);
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; t++)
    ts.emplace_back([&, t] {
      Output out;
      gcc_diag d = {};
      int hit = -1;
      st[t] = gcc_kernel_cache_compile(dir.c_str(), 1, kSource, kProgram, 90, &out.o, &hit, &d);
      if (st[t] == GCC_OK)
        cubins[t] = Cubin(out.o);
    });
  for (auto &t : ts)
    t.join();
  for (int t = 0; t < kThreads; t++) {
    EXPECT_EQ(st[t], GCC_OK);
    EXPECT_EQ(cubins[t], cubins[0]);
  }
  EXPECT_EQ(ListDir(dir).size(), 1u) << "temporary files left behind";
  Output out;
  gcc_diag d = {};
  int hit = -1;
  ASSERT_EQ(gcc_kernel_cache_compile(dir.c_str(), 1, kSource, kProgram, 90, &out.o, &hit, &d),
            GCC_OK);
  EXPECT_EQ(hit, 1);
  EXPECT_EQ(Cubin(out.o), cubins[0]);
}

// Saves and restores one environment variable.
struct EnvGuard {
  std::string name, old;
  bool had;
  explicit EnvGuard(const char *n) : name(n) {
    const char *v = getenv(n);
    had = v != nullptr;
    if (had)
      old = v;
  }
  ~EnvGuard() {
    if (had)
      setenv(name.c_str(), old.c_str(), 1);
    else
      unsetenv(name.c_str());
  }
};

TEST(KernelCache, DefaultDirectory) {
  EnvGuard xdg("XDG_CACHE_HOME"), home("HOME");
  char buf[4096];
  gcc_diag d = {};
  ASSERT_EQ(gcc_kernel_cache_dir("/explicit/dir", buf, sizeof buf, &d), GCC_OK);
  EXPECT_STREQ(buf, "/explicit/dir");

  std::string base = FreshDir("xdg");
  setenv("XDG_CACHE_HOME", base.c_str(), 1);
  setenv("HOME", "/nonexistent-home", 1);
  ASSERT_EQ(gcc_kernel_cache_dir(nullptr, buf, sizeof buf, &d), GCC_OK);
  EXPECT_EQ(std::string(buf), base + "/gcc-train");

  setenv("XDG_CACHE_HOME", "relative/ignored", 1);
  ASSERT_EQ(gcc_kernel_cache_dir(nullptr, buf, sizeof buf, &d), GCC_OK);
  EXPECT_STREQ(buf, "/nonexistent-home/.cache/gcc-train");
  unsetenv("XDG_CACHE_HOME");
  ASSERT_EQ(gcc_kernel_cache_dir(nullptr, buf, sizeof buf, &d), GCC_OK);
  EXPECT_STREQ(buf, "/nonexistent-home/.cache/gcc-train");

  unsetenv("HOME");
  EXPECT_EQ(gcc_kernel_cache_dir(nullptr, buf, sizeof buf, &d), GCC_ERR_INVALID_ARGUMENT);
  // ... which disables the cache but not the compile
  Output out;
  int hit = -1;
  ASSERT_EQ(gcc_kernel_cache_compile(nullptr, 1, kSource, kProgram, 90, &out.o, &hit, &d), GCC_OK)
      << d.msg;
  EXPECT_EQ(hit, 0);
  EXPECT_NE(std::string(out.o.cache_note).find("kernel cache disabled"), std::string::npos);

  // The default directory is used (and created) when no directory is given.
  setenv("XDG_CACHE_HOME", base.c_str(), 1);
  Output a, b;
  ASSERT_EQ(gcc_kernel_cache_compile(nullptr, 1, kSource, kProgram, 90, &a.o, &hit, &d), GCC_OK);
  EXPECT_EQ(hit, 0);
  EXPECT_EQ(ListDir(base + "/gcc-train").size(), 1u);
  ASSERT_EQ(gcc_kernel_cache_compile(nullptr, 1, kSource, kProgram, 90, &b.o, &hit, &d), GCC_OK);
  EXPECT_EQ(hit, 1);
}

TEST(KernelCache, CompileErrorsAreNotCached) {
  std::string dir = FreshDir("cache");
  const char src[] = "extern \"C\" __global__ void k(float *o) { o[0] = ; }\n";
  for (int round = 0; round < 2; round++) {
    Output out;
    gcc_diag d = {};
    int hit = -1;
    EXPECT_EQ(gcc_kernel_cache_compile(dir.c_str(), 1, src, "k(n1)", 90, &out.o, &hit, &d),
              GCC_ERR_INTERNAL);
    EXPECT_EQ(hit, 0);
    EXPECT_NE(std::string(d.msg).find("k(n1)"), std::string::npos) << d.msg;
  }
  EXPECT_EQ(ListDir(dir).size(), 0u);
  Output out;
  gcc_diag d = {};
  EXPECT_EQ(gcc_kernel_cache_compile(dir.c_str(), 1, kSource, kProgram, 70, &out.o, nullptr, &d),
            GCC_ERR_UNSUPPORTED);
}

} // namespace
