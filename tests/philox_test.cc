// philox_test: graph/philox.h's Philox-4x32-10 against the known-answer
// vectors of Random123 (kat_vectors, "philox4x32 10": Salmon et al. 2011;
// cuRAND's PHILOX4_32_10 is the same function), and the pieces of Dropout's
// mask built on it (block layout, threshold, scale, node keys); and the CPU
// kernels' words drawn many blocks at a time (runtime/cpu/cpu_philox.h)
// against the scalar blocks, bit for bit, on every path the CPU runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "graph/philox.h"

extern "C" {
#include "runtime/cpu/cpu_philox.h"
}

namespace {

struct Kat {
  unsigned ctr[4], key[2], want[4];
};

TEST(Philox, KnownAnswersOfRandom123) {
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat &k : kats) {
    unsigned out[4];
    gcc_philox4x32_10(k.ctr, k.key, out);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(out[i], k.want[i]) << std::hex << "key " << k.key[0] << " " << k.key[1]
                                   << ", counter " << k.ctr[0] << ", word " << i;
  }
}

TEST(Philox, DropoutBlockIsPhiloxOfIndexAndStep) {
  const uint64_t key = 0x0123456789abcdefull;
  const long long q = 0x1234567887654321ll, step = 0x0000000500000007ll;
  unsigned got[4], want[4];
  gcc_dropout_block(key, q, step, got);
  const unsigned ctr[4] = {0x87654321u, 0x12345678u, 0x00000007u, 0x00000005u};
  const unsigned k[2] = {0x89abcdefu, 0x01234567u};
  gcc_philox4x32_10(ctr, k, want);
  EXPECT_EQ(std::memcmp(got, want, sizeof got), 0);
}

TEST(Philox, ThresholdAndScaleAsPyTorch) {
  EXPECT_EQ(gcc_dropout_threshold(0.0f), 0u);
  EXPECT_EQ(gcc_dropout_threshold(-0.0f), 0u);
  EXPECT_EQ(gcc_dropout_threshold(0.5f), uint64_t(1) << 31);
  EXPECT_EQ(gcc_dropout_threshold(0.25f), uint64_t(1) << 30);
  EXPECT_EQ(gcc_dropout_threshold(1.0f), uint64_t(1) << 32); // every 32-bit word is below
  EXPECT_EQ(gcc_dropout_scale(0.0f), 1.0f);
  EXPECT_EQ(gcc_dropout_scale(0.5f), 2.0f);
  EXPECT_EQ(gcc_dropout_scale(0.2f), 1.0f / static_cast<float>(1.0 - 0.2f));
  EXPECT_EQ(gcc_dropout_scale(1.0f), 0.0f);
}

TEST(Philox, NodeKeysDependOnSeedNameAndNodeSeed) {
  std::set<uint64_t> keys;
  for (uint64_t seed : {0ull, 1ull, 0xffffffffffffffffull})
    for (const char *name : {"drop", "drop2", "/classifier/Dropout", ""})
      for (int64_t ns : {0, 1})
        keys.insert(gcc_dropout_key(seed, name, ns));
  EXPECT_EQ(keys.size(), 3u * 4u * 2u);
  EXPECT_EQ(gcc_dropout_key(7, "drop", 0), gcc_dropout_key(7, "drop", 0));
  // FNV-1a 64 of "a" is af63dc4c8601ec8c: counter {8601ec8c, af63dc4c, 0, 0}, key {7, 0}
  const unsigned ctr[4] = {0x8601ec8cu, 0xaf63dc4cu, 0, 0}, k[2] = {7, 0};
  unsigned out[4];
  gcc_philox4x32_10(ctr, k, out);
  EXPECT_EQ(gcc_dropout_key(7, "a", 0), (uint64_t)out[0] | (uint64_t)out[1] << 32);
}

// The CUDA source is the C code, stringified: the same function names and
// constants, with the device qualifiers.
TEST(Philox, CudaSourceIsTheSameCode) {
  const std::string src = GCC_PHILOX_CUDA_SOURCE;
  for (const char *s : {"static __device__ __forceinline__ void gcc_philox4x32_10",
                        "static __device__ __forceinline__ void gcc_dropout_block", "0xD2511F53u",
                        "0xCD9E8D57u", "0x9E3779B9u", "0xBB67AE85u"})
    EXPECT_NE(src.find(s), std::string::npos) << s << "\n" << src;
  EXPECT_EQ(src.find('#'), std::string::npos) << "no preprocessor line in the generated source";
}

unsigned ScalarWord(uint64_t key, int64_t w, int64_t step) {
  unsigned r[4];
  gcc_dropout_block(key, w / 4, step, r);
  return r[w % 4];
}

// The paths this CPU runs, widest last; each test restores the machine's.
std::vector<int> Paths() {
  std::vector<int> p;
  const int widest = gcc_cpu_set_philox_path(-1);
  for (int k = GCC_PHILOX_SCALAR; k <= widest; k++)
    p.push_back(k);
  return p;
}

// Starts at every offset inside a block and past the counter's low word
// wrapping (4 * 2^32 elements: q = 2^32, where lanes of one vector carry into
// the high word), lengths around the 16- and 8-block groups; the word after
// the last must stay untouched.
TEST(Philox, CpuWordsAreTheScalarBlocksOnEveryPath) {
  const uint64_t key = 0x0123456789abcdefull;
  const int64_t step = (int64_t{1} << 33) + 77;
  const int64_t starts[] = {
      0, 1, 2, 3, 5, 63, 64, 65, (int64_t{4} << 32) - 37, (int64_t{4} << 32) - 400, 12345678901};
  const int64_t lens[] = {0, 1, 3, 4, 5, 17, 31, 32, 33, 63, 64, 65, 100, 257, 1000};
  for (int path : Paths()) {
    ASSERT_EQ(gcc_cpu_set_philox_path(path), path);
    std::vector<unsigned> out(1001);
    for (int64_t w0 : starts)
      for (int64_t n : lens) {
        std::fill(out.begin(), out.end(), 0xeeeeeeeeu);
        gcc_cpu_dropout_words(key, w0, n, step, out.data());
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++)
          if (out[i] != ScalarWord(key, w0 + i, step))
            bad = i;
        EXPECT_EQ(bad, -1) << "path " << path << ", elements " << w0 << " + " << n;
        EXPECT_EQ(out[n], 0xeeeeeeeeu) << "path " << path << " wrote past " << n << " words";
      }
  }
  gcc_cpu_set_philox_path(-1);
  RecordProperty("paths", (int)Paths().size());
}

// y = x * (word >= thr ? scale : 0) as the scalar kernel computed it (and x
// times gcc_cpu_dropout_factors' factor), for
// p = 0 (all kept), 0.2, 0.5 and 1 (none kept, scale 0), with signed zeros,
// infinities and NaNs among x: the same bits.
TEST(Philox, CpuDropoutApplyIsTheScalarProductBitwise) {
  const uint64_t key = 0xfeedfacecafebeefull;
  const int64_t step = 3, w0 = 4093, n = 3000;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; i++)
    x[i] = std::sin(0.37f * (float)i) * (float)(1 + i % 7);
  x[5] = -0.0f;
  x[6] = std::numeric_limits<float>::infinity();
  x[7] = -std::numeric_limits<float>::infinity();
  x[8] = std::numeric_limits<float>::quiet_NaN();
  for (int path : Paths()) {
    gcc_cpu_set_philox_path(path);
    for (float p : {0.0f, 0.2f, 0.5f, 1.0f}) {
      const uint64_t thr = gcc_dropout_threshold(p);
      const float scale = gcc_dropout_scale(p);
      std::vector<float> want(n), got(n), inplace(x);
      for (int64_t i = 0; i < n; i++)
        want[i] = x[i] * ((uint64_t)ScalarWord(key, w0 + i, step) >= thr ? scale : 0.0f);
      gcc_cpu_dropout_apply(x.data(), got.data(), w0, n, key, step, thr, scale);
      gcc_cpu_dropout_apply(inplace.data(), inplace.data(), w0, n, key, step, thr, scale);
      std::vector<float> f(n);
      gcc_cpu_dropout_factors(key, w0, n, step, thr, scale, f.data());
      for (int64_t i = 0; i < n; i++)
        f[i] = x[i] * f[i];
      EXPECT_EQ(std::memcmp(f.data(), want.data(), n * sizeof(float)), 0)
          << "factors, path " << path << ", p " << p;
      EXPECT_EQ(std::memcmp(got.data(), want.data(), n * sizeof(float)), 0)
          << "path " << path << ", p " << p;
      EXPECT_EQ(std::memcmp(inplace.data(), want.data(), n * sizeof(float)), 0)
          << "in place, path " << path << ", p " << p;
    }
  }
  gcc_cpu_set_philox_path(-1);
}

} // namespace
