// Tests of datasets/dataloader.h on synthetic data sets whose pixels encode
// the sample index, so that every batch row can be traced back to its sample
// and checked value by value.
#include "datasets/dataloader.h"

#include <math.h>
#include <time.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "graph/rng.h"

namespace {

// Sample i: pixel 0 = i % 256, pixel 1 = i / 256, pixel j >= 2 =
// (i * 31 + j * 7) % 256; label i % 10.
class Synthetic {
public:
  Synthetic(int64_t n, int64_t c, int64_t h, int64_t w)
      : images_(static_cast<size_t>(n * c * h * w)), labels_(static_cast<size_t>(n)) {
    int64_t elems = c * h * w;
    for (int64_t i = 0; i < n; i++) {
      for (int64_t j = 0; j < elems; j++)
        images_[i * elems + j] = Pixel(i, j);
      labels_[i] = static_cast<uint8_t>(i % 10);
    }
    ds_.n = n;
    ds_.channels = c;
    ds_.height = h;
    ds_.width = w;
    ds_.images = images_.data();
    ds_.labels = labels_.data();
    ds_.num_classes = 10;
  }
  static uint8_t Pixel(int64_t i, int64_t j) {
    if (j == 0)
      return static_cast<uint8_t>(i % 256);
    if (j == 1)
      return static_cast<uint8_t>(i / 256);
    return static_cast<uint8_t>((i * 31 + j * 7) % 256);
  }
  const gcc_dataset *ds() const { return &ds_; }
  int64_t elems() const { return ds_.channels * ds_.height * ds_.width; }

private:
  std::vector<uint8_t> images_, labels_;
  gcc_dataset ds_ = {};
};

gcc_dataloader_options Options(int64_t batch_size, int shuffle, int prefetch) {
  gcc_dataloader_options o = {};
  o.batch_size = batch_size;
  o.shuffle = shuffle;
  o.seed = 1234;
  o.drop_last = 0;
  o.mean = 0.0f;
  o.std = 1.0f;
  o.prefetch = prefetch;
  return o;
}

float Normalised(uint8_t p, float mean, float std) {
  return (static_cast<float>(p) / 255.0f - mean) / std;
}

// One epoch as the caller sees it.
struct Epoch {
  std::vector<int64_t> order;      // sample indices, in batch order
  std::vector<int64_t> rows;       // rows of each batch
  std::vector<float> values;       // every float of every batch
  std::set<const float *> buffers; // image buffers handed out
};

// Decodes the sample of row r from its first two pixels and checks the whole
// row and its label against that sample.
int64_t CheckRow(const Synthetic &data, const gcc_dataloader_options &o, const gcc_batch &b,
                 int64_t r) {
  const float *row = b.images + r * data.elems();
  int64_t lo = lround((row[0] * o.std + o.mean) * 255.0f);
  int64_t hi = lround((row[1] * o.std + o.mean) * 255.0f);
  int64_t i = lo + 256 * hi;
  EXPECT_GE(i, 0);
  EXPECT_LT(i, data.ds()->n);
  if (i < 0 || i >= data.ds()->n)
    return -1;
  for (int64_t j = 0; j < data.elems(); j++) {
    float want = Normalised(Synthetic::Pixel(i, j), o.mean, o.std);
    if (row[j] != want) {
      ADD_FAILURE() << "sample " << i << " pixel " << j << ": " << row[j] << " != " << want;
      break;
    }
  }
  EXPECT_EQ(b.labels[r], i % 10) << "sample " << i;
  return i;
}

Epoch RunEpoch(gcc_dataloader *dl, const Synthetic &data, const gcc_dataloader_options &o,
               int64_t epoch) {
  Epoch e;
  gcc_diag d = {};
  EXPECT_EQ(gcc_dataloader_start_epoch(dl, epoch, &d), GCC_OK) << d.msg;
  for (int64_t k = 0;; k++) {
    gcc_batch b;
    int has = -1;
    EXPECT_EQ(gcc_dataloader_next(dl, &b, &has, &d), GCC_OK) << d.msg;
    if (has != 1) {
      EXPECT_EQ(has, 0);
      EXPECT_EQ(k, gcc_dataloader_num_batches(dl));
      break;
    }
    EXPECT_EQ(b.index, k);
    EXPECT_GT(b.rows, 0);
    EXPECT_LE(b.rows, o.batch_size);
    e.rows.push_back(b.rows);
    e.buffers.insert(b.images);
    for (int64_t r = 0; r < b.rows; r++)
      e.order.push_back(CheckRow(data, o, b, r));
    e.values.insert(e.values.end(), b.images, b.images + b.rows * data.elems());
  }
  return e;
}

gcc_dataloader *Create(const Synthetic &data, const gcc_dataloader_options &o) {
  gcc_diag d = {};
  gcc_dataloader *dl = nullptr;
  EXPECT_EQ(gcc_dataloader_create(data.ds(), &o, &dl, &d), GCC_OK) << d.msg;
  return dl;
}

void ExpectEachSampleOnce(const std::vector<int64_t> &order, int64_t n) {
  ASSERT_EQ(static_cast<int64_t>(order.size()), n);
  std::vector<int> seen(static_cast<size_t>(n), 0);
  for (int64_t i : order) {
    ASSERT_GE(i, 0);
    ASSERT_LT(i, n);
    seen[static_cast<size_t>(i)]++;
  }
  for (int64_t i = 0; i < n; i++)
    EXPECT_EQ(seen[static_cast<size_t>(i)], 1) << "sample " << i;
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++)
    v[static_cast<size_t>(i)] = i;
  return v;
}

class DataloaderModes : public ::testing::TestWithParam<int> {}; // prefetch 0 / 1

TEST_P(DataloaderModes, EverySampleExactlyOncePerEpoch) {
  Synthetic data(1000, 1, 4, 5);
  gcc_dataloader_options o = Options(64, 1, GetParam());
  gcc_dataloader *dl = Create(data, o);
  ASSERT_NE(dl, nullptr);
  EXPECT_EQ(gcc_dataloader_num_batches(dl), 16);
  for (int64_t epoch = 0; epoch < 4; epoch++) {
    SCOPED_TRACE(epoch);
    Epoch e = RunEpoch(dl, data, o, epoch);
    ExpectEachSampleOnce(e.order, 1000);
    EXPECT_NE(e.order, Iota(1000));
  }
  gcc_dataloader_destroy(dl);
}

TEST_P(DataloaderModes, OrderIsFisherYatesFromSeedAndEpoch) {
  Synthetic data(300, 1, 2, 2);
  gcc_dataloader_options o = Options(7, 1, GetParam());
  o.seed = 99;
  gcc_dataloader *dl = Create(data, o);
  ASSERT_NE(dl, nullptr);
  for (int64_t epoch : {0, 1, 5}) {
    std::vector<int64_t> want = Iota(300);
    gcc_rng rng;
    gcc_rng_seed(&rng, 99, static_cast<uint64_t>(epoch));
    for (int64_t i = 299; i > 0; i--)
      std::swap(want[static_cast<size_t>(i)],
                want[gcc_rng_below(&rng, static_cast<uint32_t>(i + 1))]);
    EXPECT_EQ(RunEpoch(dl, data, o, epoch).order, want) << "epoch " << epoch;
  }
  gcc_dataloader_destroy(dl);
}

TEST_P(DataloaderModes, SameSeedSameOrderOtherEpochOrSeedOtherOrder) {
  Synthetic data(500, 1, 3, 3);
  gcc_dataloader_options o = Options(32, 1, GetParam());
  gcc_dataloader *a = Create(data, o);
  gcc_dataloader *b = Create(data, o);
  gcc_dataloader_options o2 = o;
  o2.seed = o.seed + 1;
  gcc_dataloader *c = Create(data, o2);
  ASSERT_TRUE(a != nullptr && b != nullptr && c != nullptr);
  Epoch a3 = RunEpoch(a, data, o, 3);
  Epoch a4 = RunEpoch(a, data, o, 4);
  // b sees epoch 4 first: the order does not depend on history.
  Epoch b4 = RunEpoch(b, data, o, 4);
  Epoch b3 = RunEpoch(b, data, o, 3);
  EXPECT_EQ(a3.order, b3.order);
  EXPECT_EQ(a4.order, b4.order);
  EXPECT_NE(a3.order, a4.order);
  EXPECT_NE(RunEpoch(c, data, o2, 3).order, a3.order);
  gcc_dataloader_destroy(a);
  gcc_dataloader_destroy(b);
  gcc_dataloader_destroy(c);
}

TEST_P(DataloaderModes, NoShuffleKeepsFileOrder) {
  Synthetic data(100, 3, 2, 2);
  gcc_dataloader_options o = Options(16, 0, GetParam());
  gcc_dataloader *dl = Create(data, o);
  ASSERT_NE(dl, nullptr);
  EXPECT_EQ(RunEpoch(dl, data, o, 0).order, Iota(100));
  EXPECT_EQ(RunEpoch(dl, data, o, 7).order, Iota(100));
  gcc_dataloader_destroy(dl);
}

TEST_P(DataloaderModes, NormalisationIsExact) {
  // MNIST's usual statistics; the sample with index 200 has pixel 0 == 200.
  Synthetic data(256, 1, 2, 2);
  gcc_dataloader_options o = Options(256, 0, GetParam());
  o.mean = 0.1307f;
  o.std = 0.3081f;
  gcc_dataloader *dl = Create(data, o);
  ASSERT_NE(dl, nullptr);
  gcc_diag d = {};
  ASSERT_EQ(gcc_dataloader_start_epoch(dl, 0, &d), GCC_OK);
  gcc_batch b;
  int has = 0;
  ASSERT_EQ(gcc_dataloader_next(dl, &b, &has, &d), GCC_OK);
  ASSERT_EQ(has, 1);
  ASSERT_EQ(b.rows, 256);
  const float want200 = (200.0f / 255.0f - 0.1307f) / 0.3081f;
  EXPECT_EQ(b.images[200 * 4], want200); // bit-exact, float32 arithmetic
  EXPECT_NEAR(b.images[200 * 4], 2.1214340f, 1e-6f);
  EXPECT_EQ(b.images[0], -0.1307f / 0.3081f);               // pixel 0
  EXPECT_EQ(b.images[255 * 4], (1.0f - 0.1307f) / 0.3081f); // pixel 255
  EXPECT_NEAR(b.images[255 * 4], 2.8214867f, 1e-6f);
  EXPECT_EQ(b.labels[200], 0);
  EXPECT_EQ(b.labels[255], 5);
  ASSERT_EQ(gcc_dataloader_next(dl, &b, &has, &d), GCC_OK);
  EXPECT_EQ(has, 0);
  gcc_dataloader_destroy(dl);
}

TEST_P(DataloaderModes, PerChannelNormalisation) {
  // 3 channels of 2x2: each channel gets its own mean and std
  // (torchvision Normalize((m0, m1, m2), (s0, s1, s2)))
  Synthetic data(5, 3, 2, 2);
  gcc_dataloader_options o = Options(5, 0, GetParam());
  o.n_channel_norm = 3;
  const float mean[3] = {0.4914f, 0.4822f, 0.4465f}, sd[3] = {0.2470f, 0.2435f, 0.2616f};
  for (int c = 0; c < 3; c++) {
    o.channel_mean[c] = mean[c];
    o.channel_std[c] = sd[c];
  }
  gcc_dataloader *dl = Create(data, o);
  ASSERT_NE(dl, nullptr);
  gcc_diag d = {};
  ASSERT_EQ(gcc_dataloader_start_epoch(dl, 0, &d), GCC_OK);
  gcc_batch b;
  int has = 0;
  ASSERT_EQ(gcc_dataloader_next(dl, &b, &has, &d), GCC_OK);
  ASSERT_EQ(has, 1);
  for (int64_t i = 0; i < 5; i++)
    for (int64_t j = 0; j < 12; j++)
      EXPECT_EQ(b.images[i * 12 + j], Normalised(Synthetic::Pixel(i, j), mean[j / 4], sd[j / 4]))
          << "sample " << i << " element " << j;
  gcc_dataloader_destroy(dl);
}

TEST_P(DataloaderModes, LastPartialBatch) {
  Synthetic data(10, 1, 1, 2);
  gcc_dataloader_options o = Options(4, 1, GetParam());
  gcc_dataloader *dl = Create(data, o);
  ASSERT_NE(dl, nullptr);
  EXPECT_EQ(gcc_dataloader_num_batches(dl), 3);
  Epoch e = RunEpoch(dl, data, o, 0);
  EXPECT_EQ(e.rows, (std::vector<int64_t>{4, 4, 2}));
  ExpectEachSampleOnce(e.order, 10);
  gcc_dataloader_destroy(dl);
}

TEST_P(DataloaderModes, DropLast) {
  Synthetic data(10, 1, 1, 2);
  gcc_dataloader_options o = Options(4, 1, GetParam());
  o.drop_last = 1;
  gcc_dataloader *dl = Create(data, o);
  ASSERT_NE(dl, nullptr);
  EXPECT_EQ(gcc_dataloader_num_batches(dl), 2);
  for (int64_t epoch = 0; epoch < 3; epoch++) {
    Epoch e = RunEpoch(dl, data, o, epoch);
    EXPECT_EQ(e.rows, (std::vector<int64_t>{4, 4}));
    EXPECT_EQ(std::set<int64_t>(e.order.begin(), e.order.end()).size(), 8u);
  }
  gcc_dataloader_destroy(dl);
  // An exact multiple drops nothing; a batch larger than the set drops all.
  Synthetic eight(8, 1, 1, 2);
  dl = Create(eight, o);
  EXPECT_EQ(gcc_dataloader_num_batches(dl), 2);
  EXPECT_EQ(RunEpoch(dl, eight, o, 0).order.size(), 8u);
  gcc_dataloader_destroy(dl);
  o.batch_size = 20;
  dl = Create(data, o);
  EXPECT_EQ(gcc_dataloader_num_batches(dl), 0);
  EXPECT_TRUE(RunEpoch(dl, data, o, 0).order.empty());
  gcc_dataloader_destroy(dl);
  o.drop_last = 0; // without drop_last the one batch holds all 10
  dl = Create(data, o);
  EXPECT_EQ(RunEpoch(dl, data, o, 0).rows, std::vector<int64_t>{10});
  gcc_dataloader_destroy(dl);
}

TEST_P(DataloaderModes, EndOfEpochKeepsSayingNoBatch) {
  Synthetic data(5, 1, 1, 2);
  gcc_dataloader_options o = Options(2, 0, GetParam());
  gcc_dataloader *dl = Create(data, o);
  ASSERT_NE(dl, nullptr);
  RunEpoch(dl, data, o, 0);
  gcc_diag d = {};
  for (int i = 0; i < 3; i++) {
    gcc_batch b;
    int has = -1;
    ASSERT_EQ(gcc_dataloader_next(dl, &b, &has, &d), GCC_OK);
    EXPECT_EQ(has, 0);
    EXPECT_EQ(b.images, nullptr);
    EXPECT_EQ(b.rows, 0);
  }
  gcc_dataloader_destroy(dl);
}

TEST_P(DataloaderModes, BuffersAreAllocatedOnceAndReused) {
  Synthetic data(200, 1, 2, 2);
  gcc_dataloader_options o = Options(10, 1, GetParam());
  gcc_dataloader *dl = Create(data, o);
  ASSERT_NE(dl, nullptr);
  std::set<const float *> all;
  for (int64_t epoch = 0; epoch < 3; epoch++) {
    Epoch e = RunEpoch(dl, data, o, epoch);
    all.insert(e.buffers.begin(), e.buffers.end());
  }
  EXPECT_EQ(all.size(), 2u); // double buffering, nothing per batch
  gcc_dataloader_destroy(dl);
}

TEST_P(DataloaderModes, RestartEpochMidway) {
  Synthetic data(333, 1, 3, 3);
  gcc_dataloader_options o = Options(10, 1, GetParam());
  gcc_dataloader *ref = Create(data, o);
  gcc_dataloader *dl = Create(data, o);
  ASSERT_TRUE(ref != nullptr && dl != nullptr);
  Epoch want2 = RunEpoch(ref, data, o, 2);
  Epoch want5 = RunEpoch(ref, data, o, 5);
  gcc_diag d = {};
  for (int taken = 0; taken < 36; taken += 5) { // 34 batches per epoch
    ASSERT_EQ(gcc_dataloader_start_epoch(dl, taken % 2 ? 5 : 2, &d), GCC_OK);
    for (int k = 0; k < taken; k++) {
      gcc_batch b;
      int has = 0;
      ASSERT_EQ(gcc_dataloader_next(dl, &b, &has, &d), GCC_OK);
    }
    // Restart, sometimes the same epoch, sometimes another one.
    Epoch got = RunEpoch(dl, data, o, taken % 3 ? 2 : 5);
    EXPECT_EQ(got.order, taken % 3 ? want2.order : want5.order) << "after " << taken;
    EXPECT_EQ(got.values, taken % 3 ? want2.values : want5.values);
  }
  // Back-to-back restarts with no batch taken in between.
  for (int i = 0; i < 20; i++)
    ASSERT_EQ(gcc_dataloader_start_epoch(dl, i, &d), GCC_OK);
  EXPECT_EQ(RunEpoch(dl, data, o, 2).order, want2.order);
  gcc_dataloader_destroy(ref);
  gcc_dataloader_destroy(dl);
}

TEST_P(DataloaderModes, DestroyAtAnyPoint) {
  Synthetic data(2000, 1, 8, 8);
  gcc_dataloader_options o = Options(50, 1, GetParam());
  gcc_diag d = {};
  for (int taken = -2; taken <= 40; taken++) {
    gcc_dataloader *dl = Create(data, o);
    ASSERT_NE(dl, nullptr);
    if (taken >= -1) {
      ASSERT_EQ(gcc_dataloader_start_epoch(dl, 0, &d), GCC_OK);
    }
    for (int k = 0; k < taken; k++) {
      gcc_batch b;
      int has = 0;
      ASSERT_EQ(gcc_dataloader_next(dl, &b, &has, &d), GCC_OK);
      ASSERT_EQ(has, 1);
    }
    gcc_dataloader_destroy(dl); // must not hang; ASan checks for leaks
  }
  gcc_dataloader_destroy(nullptr);
}

INSTANTIATE_TEST_SUITE_P(Prefetch, DataloaderModes, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int> &i) {
                           return i.param ? std::string("Thread") : std::string("Sync");
                         });

TEST(DataloaderTest, PrefetchAndSynchronousAreIdentical) {
  Synthetic data(777, 2, 3, 4);
  gcc_dataloader_options o = Options(50, 1, 0);
  o.mean = 0.5f;
  o.std = 0.25f;
  gcc_dataloader_options p = o;
  p.prefetch = 1;
  gcc_dataloader *sync = Create(data, o);
  gcc_dataloader *pre = Create(data, p);
  ASSERT_TRUE(sync != nullptr && pre != nullptr);
  for (int64_t epoch = 0; epoch < 3; epoch++) {
    Epoch a = RunEpoch(sync, data, o, epoch);
    Epoch b = RunEpoch(pre, data, p, epoch);
    EXPECT_EQ(a.order, b.order);
    EXPECT_EQ(a.rows, b.rows);
    ASSERT_EQ(a.values.size(), b.values.size());
    EXPECT_EQ(memcmp(a.values.data(), b.values.data(), a.values.size() * sizeof(float)), 0);
  }
  gcc_dataloader_destroy(sync);
  gcc_dataloader_destroy(pre);
}

TEST(DataloaderTest, HeldBatchIsNotOverwrittenWhileThreadWorks) {
  Synthetic data(64, 1, 4, 4);
  gcc_dataloader_options o = Options(8, 1, 1);
  gcc_dataloader *dl = Create(data, o);
  ASSERT_NE(dl, nullptr);
  gcc_diag d = {};
  ASSERT_EQ(gcc_dataloader_start_epoch(dl, 0, &d), GCC_OK);
  for (int k = 0; k < 8; k++) {
    gcc_batch b;
    int has = 0;
    ASSERT_EQ(gcc_dataloader_next(dl, &b, &has, &d), GCC_OK);
    ASSERT_EQ(has, 1);
    std::vector<float> copy(b.images, b.images + b.rows * 16);
    std::vector<int64_t> labels(b.labels, b.labels + b.rows);
    struct timespec ts = {0, 2000000}; // 2 ms: time for the thread to run ahead
    nanosleep(&ts, nullptr);
    EXPECT_EQ(std::vector<float>(b.images, b.images + b.rows * 16), copy) << "batch " << k;
    EXPECT_EQ(std::vector<int64_t>(b.labels, b.labels + b.rows), labels);
  }
  gcc_dataloader_destroy(dl);
}

TEST(DataloaderTest, LargeBatchesRestartAndDestroyPromptly) {
  // One batch of 6000 MNIST-sized images (~19 MB of floats): restarts and
  // destroy while the thread is filling it.
  Synthetic data(6000, 1, 28, 28);
  gcc_dataloader_options o = Options(6000, 1, 1);
  gcc_dataloader *dl = Create(data, o);
  ASSERT_NE(dl, nullptr);
  gcc_diag d = {};
  for (int i = 0; i < 10; i++)
    ASSERT_EQ(gcc_dataloader_start_epoch(dl, i, &d), GCC_OK);
  Epoch e = RunEpoch(dl, data, o, 3);
  ExpectEachSampleOnce(e.order, 6000);
  ASSERT_EQ(gcc_dataloader_start_epoch(dl, 4, &d), GCC_OK);
  gcc_dataloader_destroy(dl);
}

TEST(DataloaderTest, CreateRejectsBadArguments) {
  Synthetic data(10, 1, 2, 2);
  gcc_diag d = {};
  gcc_dataloader *dl = reinterpret_cast<gcc_dataloader *>(&d);
  auto expect = [&](const gcc_dataset *ds, const gcc_dataloader_options *o, gcc_status want,
                    const char *needle) {
    dl = reinterpret_cast<gcc_dataloader *>(&d);
    gcc_status s = gcc_dataloader_create(ds, o, &dl, &d);
    EXPECT_EQ(s, want) << d.msg;
    EXPECT_EQ(dl, nullptr);
    EXPECT_NE(std::string(d.msg).find(needle), std::string::npos) << d.msg;
  };
  gcc_dataloader_options o = Options(4, 1, 1);
  expect(nullptr, &o, GCC_ERR_INVALID_ARGUMENT, "NULL");
  expect(data.ds(), nullptr, GCC_ERR_INVALID_ARGUMENT, "NULL");
  EXPECT_EQ(gcc_dataloader_create(data.ds(), &o, nullptr, &d), GCC_ERR_INVALID_ARGUMENT);
  gcc_dataloader_options bad = o;
  bad.batch_size = 0;
  expect(data.ds(), &bad, GCC_ERR_INVALID_ARGUMENT, "batch_size");
  bad.batch_size = -3;
  expect(data.ds(), &bad, GCC_ERR_INVALID_ARGUMENT, "batch_size");
  bad = o;
  bad.std = 0.0f;
  expect(data.ds(), &bad, GCC_ERR_INVALID_ARGUMENT, "std");
  bad.std = -1.0f;
  expect(data.ds(), &bad, GCC_ERR_INVALID_ARGUMENT, "std");
  bad.std = NAN;
  expect(data.ds(), &bad, GCC_ERR_INVALID_ARGUMENT, "std");
  bad = o;
  bad.mean = INFINITY;
  expect(data.ds(), &bad, GCC_ERR_INVALID_ARGUMENT, "mean");
  bad = o;
  bad.n_channel_norm = 3; // the images have 1 channel
  expect(data.ds(), &bad, GCC_ERR_INVALID_ARGUMENT, "channels");
  bad.n_channel_norm = 1;
  bad.channel_mean[0] = 0.5f;
  bad.channel_std[0] = 0.0f;
  expect(data.ds(), &bad, GCC_ERR_INVALID_ARGUMENT, "channel 0");
  gcc_dataset empty = {};
  expect(&empty, &o, GCC_ERR_INVALID_ARGUMENT, "non-empty");
  gcc_dataset no_images = *data.ds();
  no_images.images = nullptr;
  expect(&no_images, &o, GCC_ERR_INVALID_ARGUMENT, "no images");
  gcc_dataset huge = *data.ds();
  huge.n = int64_t{1} << 33;
  expect(&huge, &o, GCC_ERR_UNSUPPORTED, "2^32");
  gcc_dataset wide = *data.ds();
  wide.height = wide.width = int64_t{1} << 40;
  expect(&wide, &o, GCC_ERR_OUT_OF_MEMORY, "overflow");
}

TEST(DataloaderTest, NextAndStartEpochRejectBadArguments) {
  Synthetic data(10, 1, 2, 2);
  for (int prefetch : {0, 1}) {
    gcc_dataloader_options o = Options(4, 1, prefetch);
    gcc_dataloader *dl = Create(data, o);
    ASSERT_NE(dl, nullptr);
    gcc_diag d = {};
    gcc_batch b;
    int has = -1;
    EXPECT_EQ(gcc_dataloader_next(dl, &b, &has, &d), GCC_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(d.msg).find("start_epoch"), std::string::npos) << d.msg;
    EXPECT_EQ(has, 0);
    EXPECT_EQ(gcc_dataloader_start_epoch(dl, -1, &d), GCC_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(gcc_dataloader_start_epoch(nullptr, 0, &d), GCC_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(gcc_dataloader_next(dl, nullptr, &has, &d), GCC_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(gcc_dataloader_next(dl, &b, nullptr, &d), GCC_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(gcc_dataloader_next(nullptr, &b, &has, &d), GCC_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(gcc_dataloader_num_batches(nullptr), 0);
    // Still usable afterwards.
    ASSERT_EQ(gcc_dataloader_start_epoch(dl, 0, &d), GCC_OK);
    ASSERT_EQ(gcc_dataloader_next(dl, &b, &has, &d), GCC_OK);
    EXPECT_EQ(has, 1);
    gcc_dataloader_destroy(dl);
  }
}

} // namespace
