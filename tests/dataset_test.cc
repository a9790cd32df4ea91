// Tests of the IDX reader and the MNIST loader (datasets/dataset.h): small
// files written here, plain and gzip, every error path, and the real MNIST
// files of data/mnist.
#include "datasets/dataset.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include "tests/testutil.h"

using namespace gcc_test; // tests/testutil.h

namespace {

using Bytes = std::vector<uint8_t>;

void Put32(Bytes *b, uint32_t v) {
  b->push_back(static_cast<uint8_t>(v >> 24));
  b->push_back(static_cast<uint8_t>(v >> 16));
  b->push_back(static_cast<uint8_t>(v >> 8));
  b->push_back(static_cast<uint8_t>(v));
}

// An IDX file: header (type code, dims) followed by `data`.
Bytes Idx(uint8_t type, const std::vector<uint32_t> &dims, const Bytes &data) {
  Bytes b = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    Put32(&b, d);
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

Bytes Pattern(size_t n, unsigned mul = 7, unsigned add = 3) {
  Bytes b(n);
  for (size_t i = 0; i < n; i++)
    b[i] = static_cast<uint8_t>((i * mul + add) & 0xff);
  return b;
}

bool WritePlain(const std::string &path, const Bytes &b) {
  FILE *f = fopen(path.c_str(), "wb");
  if (f == nullptr)
    return false;
  bool ok = b.empty() || fwrite(b.data(), 1, b.size(), f) == b.size();
  return fclose(f) == 0 && ok;
}

bool WriteGzip(const std::string &path, const Bytes &b) {
  gzFile f = gzopen(path.c_str(), "wb");
  if (f == nullptr)
    return false;
  bool ok = b.empty() ||
            gzwrite(f, b.data(), static_cast<unsigned>(b.size())) == static_cast<int>(b.size());
  return gzclose(f) == Z_OK && ok;
}

Bytes ReadAll(const std::string &path) {
  Bytes b;
  FILE *f = fopen(path.c_str(), "rb");
  if (f == nullptr)
    return b;
  int c;
  while ((c = fgetc(f)) != EOF)
    b.push_back(static_cast<uint8_t>(c));
  fclose(f);
  return b;
}

class IdxReadTest : public ::testing::Test {
protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()) << "mkdtemp failed"; }

  // Reads `path` expecting failure with `want`; checks the outputs are
  // cleared and the message names the file. Returns the message.
  std::string ExpectError(const std::string &path, int ndim, gcc_status want) {
    gcc_diag d = {};
    int64_t dims[4] = {7, 7, 7, 7};
    uint8_t *data = reinterpret_cast<uint8_t *>(&dims); // must be reset
    gcc_status s = gcc_idx_read(path.c_str(), ndim, dims, &data, &d);
    EXPECT_EQ(s, want) << gcc_status_name(s) << ": " << d.msg;
    EXPECT_EQ(d.status, want);
    EXPECT_EQ(data, nullptr);
    for (int i = 0; i < 4; i++)
      EXPECT_EQ(dims[i], 0) << i;
    EXPECT_NE(std::string(d.msg).find(path), std::string::npos)
        << "message does not name " << path << ": " << d.msg;
    free(data);
    return d.msg;
  }

  TempDir dir_;
};

TEST_F(IdxReadTest, PlainRoundTrip3D) {
  Bytes data = Pattern(2 * 3 * 4);
  std::string p = dir_.file("x-idx3");
  ASSERT_TRUE(WritePlain(p, Idx(0x08, {2, 3, 4}, data)));
  gcc_diag d = {};
  int64_t dims[4];
  uint8_t *out = nullptr;
  ASSERT_EQ(gcc_idx_read(p.c_str(), 3, dims, &out, &d), GCC_OK) << d.msg;
  EXPECT_EQ(dims[0], 2);
  EXPECT_EQ(dims[1], 3);
  EXPECT_EQ(dims[2], 4);
  EXPECT_EQ(dims[3], 1);
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(Bytes(out, out + data.size()), data);
  free(out);
}

TEST_F(IdxReadTest, GzipRoundTrip1D) {
  Bytes data = Pattern(1000, 13, 1);
  std::string p = dir_.file("y-idx1.gz");
  ASSERT_TRUE(WriteGzip(p, Idx(0x08, {1000}, data)));
  ASSERT_EQ(ReadAll(p).at(0), 0x1f); // really compressed
  gcc_diag d = {};
  int64_t dims[4];
  uint8_t *out = nullptr;
  ASSERT_EQ(gcc_idx_read(p.c_str(), 1, dims, &out, &d), GCC_OK) << d.msg;
  EXPECT_EQ(dims[0], 1000);
  EXPECT_EQ(dims[1], 1);
  EXPECT_EQ(Bytes(out, out + data.size()), data);
  free(out);
}

TEST_F(IdxReadTest, GzipRoundTrip4DLargerThanInitialBuffer) {
  // 3 MiB: exercises the buffer growth past its first megabyte.
  Bytes data = Pattern(3u << 20, 31, 5);
  std::string p = dir_.file("z-idx4.gz");
  ASSERT_TRUE(WriteGzip(p, Idx(0x08, {3, 1024, 32, 32}, data)));
  gcc_diag d = {};
  int64_t dims[4];
  uint8_t *out = nullptr;
  ASSERT_EQ(gcc_idx_read(p.c_str(), 4, dims, &out, &d), GCC_OK) << d.msg;
  EXPECT_EQ(dims[0], 3);
  EXPECT_EQ(dims[1], 1024);
  EXPECT_EQ(dims[2], 32);
  EXPECT_EQ(dims[3], 32);
  EXPECT_TRUE(Bytes(out, out + data.size()) == data);
  free(out);
}

TEST_F(IdxReadTest, MissingFileIsIoError) {
  std::string msg = ExpectError(dir_.file("does-not-exist"), 1, GCC_ERR_IO);
  EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;
}

TEST_F(IdxReadTest, DirectoryIsIoError) {
  ExpectError(dir_.path(), 1, GCC_ERR_IO);
}

TEST_F(IdxReadTest, EmptyFileIsParseError) {
  std::string p = dir_.file("empty");
  ASSERT_TRUE(WritePlain(p, {}));
  ExpectError(p, 1, GCC_ERR_PARSE);
}

TEST_F(IdxReadTest, BadMagic) {
  for (uint8_t first : {0x01, 0x1f}) { // 0x1f alone is no gzip header
    Bytes b = Idx(0x08, {4}, Pattern(4));
    b[0] = first;
    std::string p = dir_.file("bad-magic");
    ASSERT_TRUE(WritePlain(p, b));
    std::string msg = ExpectError(p, 1, GCC_ERR_PARSE);
    EXPECT_NE(msg.find("magic"), std::string::npos) << msg;
  }
  Bytes b = Idx(0x08, {4}, Pattern(4));
  b[1] = 0x08;
  std::string p = dir_.file("bad-magic.gz");
  ASSERT_TRUE(WriteGzip(p, b));
  ExpectError(p, 1, GCC_ERR_PARSE);
}

TEST_F(IdxReadTest, OtherIdxTypeCodeIsUnsupported) {
  for (uint8_t type : {0x09, 0x0B, 0x0C, 0x0D, 0x0E}) {
    std::string p = dir_.file("float-idx1");
    ASSERT_TRUE(WritePlain(p, Idx(type, {4}, Pattern(32))));
    std::string msg = ExpectError(p, 1, GCC_ERR_UNSUPPORTED);
    EXPECT_NE(msg.find("type code"), std::string::npos) << msg;
  }
}

TEST_F(IdxReadTest, UnknownTypeCodeIsParseError) {
  for (uint8_t type : {0x00, 0x07, 0x0A, 0x0F, 0xFF}) {
    std::string p = dir_.file("unknown-type");
    ASSERT_TRUE(WritePlain(p, Idx(type, {4}, Pattern(4))));
    ExpectError(p, 1, GCC_ERR_PARSE);
  }
}

TEST_F(IdxReadTest, WrongNdim) {
  std::string p = dir_.file("labels-as-images");
  ASSERT_TRUE(WritePlain(p, Idx(0x08, {4}, Pattern(4))));
  std::string msg = ExpectError(p, 3, GCC_ERR_PARSE);
  EXPECT_NE(msg.find("1 dimensions, expected 3"), std::string::npos) << msg;
  std::string q = dir_.file("images-as-labels.gz");
  ASSERT_TRUE(WriteGzip(q, Idx(0x08, {2, 2, 2}, Pattern(8))));
  ExpectError(q, 1, GCC_ERR_PARSE);
}

TEST_F(IdxReadTest, ZeroDimension) {
  for (int zero_at = 0; zero_at < 3; zero_at++) {
    std::vector<uint32_t> dims = {2, 3, 4};
    dims[zero_at] = 0;
    std::string p = dir_.file("zero-dim");
    ASSERT_TRUE(WritePlain(p, Idx(0x08, dims, {})));
    std::string msg = ExpectError(p, 3, GCC_ERR_PARSE);
    EXPECT_NE(msg.find("dimension " + std::to_string(zero_at) + " is 0"), std::string::npos) << msg;
  }
}

TEST_F(IdxReadTest, SizeOverflow) {
  std::string p = dir_.file("overflow");
  ASSERT_TRUE(WritePlain(p, Idx(0x08, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, Pattern(16))));
  std::string msg = ExpectError(p, 3, GCC_ERR_PARSE);
  EXPECT_NE(msg.find("overflow"), std::string::npos) << msg;
}

TEST_F(IdxReadTest, HugeHeaderOnSmallFileIsTruncatedNotOutOfMemory) {
  // 2^31 * 2^16 bytes promised, 16 present: must fail on "truncated" without
  // allocating what the header claims.
  std::string p = dir_.file("huge");
  ASSERT_TRUE(WritePlain(p, Idx(0x08, {0x80000000u, 0x10000u}, Pattern(16))));
  std::string msg = ExpectError(p, 2, GCC_ERR_PARSE);
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST_F(IdxReadTest, TruncatedHeader) {
  Bytes full = Idx(0x08, {2, 3, 4}, Pattern(24));
  for (size_t keep : {size_t{1}, size_t{3}, size_t{4}, size_t{9}, size_t{15}}) {
    std::string p = dir_.file("short-header");
    ASSERT_TRUE(WritePlain(p, Bytes(full.begin(), full.begin() + keep)));
    std::string msg = ExpectError(p, 3, GCC_ERR_PARSE);
    EXPECT_NE(msg.find("truncated"), std::string::npos) << keep << ": " << msg;
  }
}

TEST_F(IdxReadTest, TruncatedData) {
  Bytes full = Idx(0x08, {2, 3, 4}, Pattern(24));
  Bytes cut(full.begin(), full.end() - 1);
  std::string p = dir_.file("truncated");
  ASSERT_TRUE(WritePlain(p, cut));
  std::string msg = ExpectError(p, 3, GCC_ERR_PARSE);
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("needs 24 bytes, the file has 23"), std::string::npos) << msg;

  std::string q = dir_.file("truncated.gz");
  ASSERT_TRUE(WriteGzip(q, cut));
  msg = ExpectError(q, 3, GCC_ERR_PARSE);
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST_F(IdxReadTest, TruncatedGzipStream) {
  // A complete IDX file inside a gzip stream that is cut short: in the
  // middle of the deflate data, and inside the 8-byte CRC/size trailer.
  std::string whole = dir_.file("whole.gz");
  ASSERT_TRUE(WriteGzip(whole, Idx(0x08, {64, 64}, Pattern(64 * 64, 101, 7))));
  Bytes gz = ReadAll(whole);
  ASSERT_GT(gz.size(), 40u);
  for (size_t drop : {gz.size() / 2, size_t{4}}) {
    std::string p = dir_.file("cut.gz");
    ASSERT_TRUE(WritePlain(p, Bytes(gz.begin(), gz.end() - static_cast<long>(drop))));
    std::string msg = ExpectError(p, 2, GCC_ERR_PARSE);
    EXPECT_NE(msg.find("truncated"), std::string::npos) << drop << ": " << msg;
  }
}

TEST_F(IdxReadTest, CorruptGzipStream) {
  std::string whole = dir_.file("whole.gz");
  ASSERT_TRUE(WriteGzip(whole, Idx(0x08, {64, 64}, Pattern(64 * 64, 101, 7))));
  Bytes gz = ReadAll(whole);
  // Flip a byte of the stored CRC-32: the data inflates but does not check.
  Bytes bad_crc = gz;
  bad_crc[bad_crc.size() - 6] ^= 0xff;
  std::string p = dir_.file("bad-crc.gz");
  ASSERT_TRUE(WritePlain(p, bad_crc));
  ExpectError(p, 2, GCC_ERR_PARSE);
  // A gzip header followed by bytes that are not deflate data.
  Bytes junk = {0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 3};
  for (int i = 0; i < 64; i++)
    junk.push_back(0xff);
  std::string q = dir_.file("junk.gz");
  ASSERT_TRUE(WritePlain(q, junk));
  std::string msg = ExpectError(q, 2, GCC_ERR_PARSE);
  EXPECT_NE(msg.find("gzip"), std::string::npos) << msg;
}

TEST_F(IdxReadTest, TrailingGarbage) {
  Bytes b = Idx(0x08, {2, 3}, Pattern(6));
  b.push_back(0);
  b.push_back(42);
  std::string p = dir_.file("trailing");
  ASSERT_TRUE(WritePlain(p, b));
  std::string msg = ExpectError(p, 2, GCC_ERR_PARSE);
  EXPECT_NE(msg.find("2 trailing bytes"), std::string::npos) << msg;
  std::string q = dir_.file("trailing.gz");
  ASSERT_TRUE(WriteGzip(q, b));
  msg = ExpectError(q, 2, GCC_ERR_PARSE);
  EXPECT_NE(msg.find("trailing"), std::string::npos) << msg;
}

TEST_F(IdxReadTest, InvalidArguments) {
  std::string p = dir_.file("ok");
  ASSERT_TRUE(WritePlain(p, Idx(0x08, {4}, Pattern(4))));
  for (int ndim : {0, 5, -1})
    ExpectError(p, ndim, GCC_ERR_INVALID_ARGUMENT);
  gcc_diag d = {};
  int64_t dims[4];
  EXPECT_EQ(gcc_idx_read(p.c_str(), 1, dims, nullptr, &d), GCC_ERR_INVALID_ARGUMENT);
  uint8_t *data = nullptr;
  EXPECT_EQ(gcc_idx_read(p.c_str(), 1, nullptr, &data, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gcc_idx_read(nullptr, 1, dims, &data, &d), GCC_ERR_INVALID_ARGUMENT);
}

TEST_F(IdxReadTest, NullDiagIsAllowed) {
  int64_t dims[4];
  uint8_t *data = nullptr;
  EXPECT_EQ(gcc_idx_read(dir_.file("missing").c_str(), 1, dims, &data, nullptr), GCC_ERR_IO);
  EXPECT_EQ(data, nullptr);
}

// ---------------------------------------------------------------------------
// gcc_mnist_load on small files.

class MnistLoadTest : public IdxReadTest {
protected:
  // Writes an n-sample set of h x w images (pixel values from Pattern) and
  // the given labels under the train or t10k names.
  void WriteSet(bool train, bool gzip, uint32_t n, uint32_t h, uint32_t w, const Bytes &labels,
                uint32_t label_count) {
    std::string pre = train ? "train" : "t10k";
    std::string suffix = gzip ? ".gz" : "";
    auto write = gzip ? WriteGzip : WritePlain;
    ASSERT_TRUE(write(dir_.file(pre + "-images-idx3-ubyte" + suffix),
                      Idx(0x08, {n, h, w}, Pattern(size_t{n} * h * w))));
    ASSERT_TRUE(
        write(dir_.file(pre + "-labels-idx1-ubyte" + suffix), Idx(0x08, {label_count}, labels)));
  }

  std::string ExpectLoadError(bool train, gcc_status want) {
    gcc_diag d = {};
    gcc_dataset ds;
    memset(&ds, 0x5a, sizeof ds);
    gcc_status s = gcc_mnist_load(dir_.path().c_str(), train, &ds, &d);
    EXPECT_EQ(s, want) << gcc_status_name(s) << ": " << d.msg;
    EXPECT_EQ(ds.n, 0);
    EXPECT_EQ(ds.images, nullptr);
    EXPECT_EQ(ds.labels, nullptr);
    gcc_dataset_free(&ds);
    return d.msg;
  }
};

TEST_F(MnistLoadTest, LoadsPlainTrainingSet) {
  Bytes labels = {3, 0, 9};
  WriteSet(true, false, 3, 2, 5, labels, 3);
  gcc_diag d = {};
  gcc_dataset ds = {};
  ASSERT_EQ(gcc_mnist_load(dir_.path().c_str(), 1, &ds, &d), GCC_OK) << d.msg;
  EXPECT_EQ(ds.n, 3);
  EXPECT_EQ(ds.channels, 1);
  EXPECT_EQ(ds.height, 2);
  EXPECT_EQ(ds.width, 5);
  EXPECT_EQ(ds.num_classes, 10);
  EXPECT_EQ(Bytes(ds.labels, ds.labels + 3), labels);
  EXPECT_EQ(Bytes(ds.images, ds.images + 30), Pattern(30));
  gcc_dataset_free(&ds);
  EXPECT_EQ(ds.images, nullptr);
  EXPECT_EQ(ds.n, 0);
  gcc_dataset_free(&ds); // freeing twice is harmless
  gcc_dataset_free(nullptr);
}

TEST_F(MnistLoadTest, LoadsGzipTestSet) {
  Bytes labels = {7, 2, 1, 0};
  WriteSet(false, true, 4, 28, 28, labels, 4);
  gcc_diag d = {};
  gcc_dataset ds = {};
  ASSERT_EQ(gcc_mnist_load(dir_.path().c_str(), 0, &ds, &d), GCC_OK) << d.msg;
  EXPECT_EQ(ds.n, 4);
  EXPECT_EQ(ds.height, 28);
  EXPECT_EQ(ds.width, 28);
  EXPECT_EQ(Bytes(ds.labels, ds.labels + 4), labels);
  EXPECT_EQ(Bytes(ds.images, ds.images + 4 * 784), Pattern(4 * 784));
  gcc_dataset_free(&ds);
  // The training set is not there.
  std::string msg = ExpectLoadError(true, GCC_ERR_IO);
  EXPECT_NE(msg.find("train-images-idx3-ubyte"), std::string::npos) << msg;
}

TEST_F(MnistLoadTest, PrefersGzipOverPlain) {
  WriteSet(true, true, 2, 1, 1, {4, 5}, 2);
  WriteSet(true, false, 3, 1, 1, {1, 2, 3}, 3);
  gcc_diag d = {};
  gcc_dataset ds = {};
  ASSERT_EQ(gcc_mnist_load(dir_.path().c_str(), 1, &ds, &d), GCC_OK) << d.msg;
  EXPECT_EQ(ds.n, 2);
  EXPECT_EQ(ds.labels[0], 4);
  gcc_dataset_free(&ds);
}

TEST_F(MnistLoadTest, MissingFilesNameBothCandidates) {
  std::string msg = ExpectLoadError(true, GCC_ERR_IO);
  EXPECT_NE(msg.find(dir_.file("train-images-idx3-ubyte:")), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir_.file("train-images-idx3-ubyte.gz")), std::string::npos) << msg;
  // Images present, labels missing.
  ASSERT_TRUE(WritePlain(dir_.file("train-images-idx3-ubyte"), Idx(0x08, {1, 1, 1}, {0})));
  msg = ExpectLoadError(true, GCC_ERR_IO);
  EXPECT_NE(msg.find(dir_.file("train-labels-idx1-ubyte")), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir_.file("train-labels-idx1-ubyte.gz")), std::string::npos) << msg;
}

TEST_F(MnistLoadTest, CountMismatchNamesBothFiles) {
  WriteSet(true, true, 3, 2, 2, {1, 2}, 2);
  std::string msg = ExpectLoadError(true, GCC_ERR_PARSE);
  EXPECT_NE(msg.find(dir_.file("train-images-idx3-ubyte.gz")), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir_.file("train-labels-idx1-ubyte.gz")), std::string::npos) << msg;
  EXPECT_NE(msg.find("3 images"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 labels"), std::string::npos) << msg;
}

TEST_F(MnistLoadTest, LabelOutOfRange) {
  WriteSet(false, false, 4, 2, 2, {1, 9, 10, 3}, 4);
  std::string msg = ExpectLoadError(false, GCC_ERR_PARSE);
  EXPECT_NE(msg.find(dir_.file("t10k-labels-idx1-ubyte")), std::string::npos) << msg;
  EXPECT_NE(msg.find("sample 2 is 10"), std::string::npos) << msg;
  WriteSet(false, false, 1, 2, 2, {255}, 1);
  ExpectLoadError(false, GCC_ERR_PARSE);
}

TEST_F(MnistLoadTest, ErrorsInEitherFileNameThatFile) {
  // Images file with the labels' shape.
  ASSERT_TRUE(WritePlain(dir_.file("train-images-idx3-ubyte"), Idx(0x08, {2}, {1, 2})));
  ASSERT_TRUE(WritePlain(dir_.file("train-labels-idx1-ubyte"), Idx(0x08, {2}, {1, 2})));
  std::string msg = ExpectLoadError(true, GCC_ERR_PARSE);
  EXPECT_NE(msg.find(dir_.file("train-images-idx3-ubyte")), std::string::npos) << msg;
  // Good images, truncated labels.
  ASSERT_TRUE(WritePlain(dir_.file("train-images-idx3-ubyte"), Idx(0x08, {2, 1, 1}, {1, 2})));
  ASSERT_TRUE(WritePlain(dir_.file("train-labels-idx1-ubyte"), Idx(0x08, {2}, {1})));
  msg = ExpectLoadError(true, GCC_ERR_PARSE);
  EXPECT_NE(msg.find(dir_.file("train-labels-idx1-ubyte")), std::string::npos) << msg;
  // A labels file of floats.
  ASSERT_TRUE(WritePlain(dir_.file("train-labels-idx1-ubyte"), Idx(0x0D, {2}, Pattern(8))));
  msg = ExpectLoadError(true, GCC_ERR_UNSUPPORTED);
  EXPECT_NE(msg.find(dir_.file("train-labels-idx1-ubyte")), std::string::npos) << msg;
}

TEST_F(MnistLoadTest, InvalidArguments) {
  gcc_diag d = {};
  gcc_dataset ds = {};
  EXPECT_EQ(gcc_mnist_load(nullptr, 1, &ds, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gcc_mnist_load(dir_.path().c_str(), 1, nullptr, &d), GCC_ERR_INVALID_ARGUMENT);
  std::string long_dir(5000, 'a');
  EXPECT_EQ(gcc_mnist_load(long_dir.c_str(), 1, &ds, &d), GCC_ERR_INVALID_ARGUMENT);
}

// ---------------------------------------------------------------------------
// gcc_cifar10_load on files written here in the CIFAR-10 binary format.

class Cifar10LoadTest : public IdxReadTest {
protected:
  // A record: the label byte, then R, G, B planes of 32x32; pixel (c, y, x)
  // of record `r` of file `f` holds (f * 31 + r * 7 + c * 5 + y * 3 + x) % 256.
  static Bytes Records(int f, const Bytes &labels) {
    Bytes b;
    for (size_t r = 0; r < labels.size(); r++) {
      b.push_back(labels[r]);
      for (int c = 0; c < 3; c++)
        for (int y = 0; y < 32; y++)
          for (int x = 0; x < 32; x++)
            b.push_back(static_cast<uint8_t>((f * 31 + r * 7 + c * 5 + y * 3 + x) % 256));
    }
    return b;
  }
  void WriteTrain(const std::vector<Bytes> &labels) {
    for (int k = 0; k < 5; k++)
      ASSERT_TRUE(WritePlain(dir_.file("data_batch_" + std::to_string(k + 1) + ".bin"),
                             Records(k, labels[k])));
  }
  std::string ExpectLoadError(bool train, gcc_status want) {
    gcc_diag d = {};
    gcc_dataset ds;
    memset(&ds, 0x5a, sizeof ds);
    gcc_status s = gcc_cifar10_load(dir_.path().c_str(), train, &ds, &d);
    EXPECT_EQ(s, want) << gcc_status_name(s) << ": " << d.msg;
    EXPECT_EQ(ds.n, 0);
    EXPECT_EQ(ds.images, nullptr);
    EXPECT_EQ(ds.labels, nullptr);
    gcc_dataset_free(&ds);
    return d.msg;
  }
};

TEST_F(Cifar10LoadTest, LoadsTheFiveTrainingBatchesInOrderAsNchw) {
  WriteTrain({{3, 0}, {9}, {1, 2, 3}, {4}, {5, 6}});
  gcc_diag d = {};
  gcc_dataset ds = {};
  ASSERT_EQ(gcc_cifar10_load(dir_.path().c_str(), 1, &ds, &d), GCC_OK) << d.msg;
  EXPECT_EQ(ds.n, 9);
  EXPECT_EQ(ds.channels, 3);
  EXPECT_EQ(ds.height, 32);
  EXPECT_EQ(ds.width, 32);
  EXPECT_EQ(ds.num_classes, 10);
  const Bytes want_labels = {3, 0, 9, 1, 2, 3, 4, 5, 6};
  const int file_of[] = {0, 0, 1, 2, 2, 2, 3, 4, 4}, rec_of[] = {0, 1, 0, 0, 1, 2, 0, 0, 1};
  for (int i = 0; i < 9; i++) {
    EXPECT_EQ(ds.labels[i], want_labels[i]) << i;
    for (int c = 0; c < 3; c++)
      for (int y = 0; y < 32; y += 7)
        for (int x = 0; x < 32; x += 5)
          ASSERT_EQ(ds.images[((i * 3 + c) * 32 + y) * 32 + x],
                    (file_of[i] * 31 + rec_of[i] * 7 + c * 5 + y * 3 + x) % 256)
              << "sample " << i << " pixel " << c << "," << y << "," << x;
  }
  gcc_dataset_free(&ds);
}

TEST_F(Cifar10LoadTest, LoadsTheTestBatch) {
  ASSERT_TRUE(WritePlain(dir_.file("test_batch.bin"), Records(7, {8, 1, 0})));
  gcc_diag d = {};
  gcc_dataset ds = {};
  ASSERT_EQ(gcc_cifar10_load(dir_.path().c_str(), 0, &ds, &d), GCC_OK) << d.msg;
  EXPECT_EQ(ds.n, 3);
  EXPECT_EQ(ds.labels[0], 8);
  EXPECT_EQ(ds.images[3072 + 1024 * 2 + 32 * 4 + 6], (7 * 31 + 7 + 10 + 12 + 6) % 256);
  gcc_dataset_free(&ds);
  EXPECT_STREQ(gcc_cifar10_classes[0], "plane");
  EXPECT_STREQ(gcc_cifar10_classes[3], "cat");
  EXPECT_STREQ(gcc_cifar10_classes[8], "ship");
  EXPECT_STREQ(gcc_cifar10_classes[9], "truck");
}

TEST_F(Cifar10LoadTest, MissingFileNamesItAndTheExpectedFiles) {
  std::string msg = ExpectLoadError(false, GCC_ERR_IO);
  EXPECT_NE(msg.find(dir_.file("test_batch.bin")), std::string::npos) << msg;
  EXPECT_NE(msg.find("data_batch_1.bin"), std::string::npos) << msg;
  WriteTrain({{1}, {1}, {1}, {1}, {1}});
  ASSERT_EQ(remove(dir_.file("data_batch_4.bin").c_str()), 0);
  msg = ExpectLoadError(true, GCC_ERR_IO);
  EXPECT_NE(msg.find(dir_.file("data_batch_4.bin")), std::string::npos) << msg;
  ASSERT_EQ(mkdir(dir_.file("data_batch_4.bin").c_str(), 0700), 0); // a directory
  msg = ExpectLoadError(true, GCC_ERR_IO);
  EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
}

TEST_F(Cifar10LoadTest, WrongSizesAreParseErrors) {
  Bytes rec = Records(0, {2, 3});
  ASSERT_TRUE(WritePlain(dir_.file("test_batch.bin"), Bytes(rec.begin(), rec.end() - 1)));
  std::string msg = ExpectLoadError(false, GCC_ERR_PARSE);
  EXPECT_NE(msg.find(dir_.file("test_batch.bin")), std::string::npos) << msg;
  EXPECT_NE(msg.find("6145 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("3073-byte"), std::string::npos) << msg;
  ASSERT_TRUE(WritePlain(dir_.file("test_batch.bin"), Bytes())); // empty
  ExpectLoadError(false, GCC_ERR_PARSE);
  // an MNIST IDX file is not CIFAR-10
  ASSERT_TRUE(WritePlain(dir_.file("test_batch.bin"), Idx(0x08, {2, 28, 28}, Pattern(2 * 784))));
  ExpectLoadError(false, GCC_ERR_PARSE);
}

TEST_F(Cifar10LoadTest, LabelOutOfRangeNamesTheRecord) {
  WriteTrain({{1}, {2}, {3, 10}, {4}, {5}});
  std::string msg = ExpectLoadError(true, GCC_ERR_PARSE);
  EXPECT_NE(msg.find(dir_.file("data_batch_3.bin")), std::string::npos) << msg;
  EXPECT_NE(msg.find("record 1 has label 10"), std::string::npos) << msg;
}

TEST_F(Cifar10LoadTest, InvalidArguments) {
  gcc_diag d = {};
  gcc_dataset ds = {};
  EXPECT_EQ(gcc_cifar10_load(nullptr, 1, &ds, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gcc_cifar10_load(dir_.path().c_str(), 1, nullptr, &d), GCC_ERR_INVALID_ARGUMENT);
  std::string long_dir(5000, 'a');
  EXPECT_EQ(gcc_cifar10_load(long_dir.c_str(), 0, &ds, &d), GCC_ERR_INVALID_ARGUMENT);
}

// ---------------------------------------------------------------------------
// The real MNIST files (data/mnist, see its README.md for their provenance).

bool IsDir(const std::string &p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// data/mnist relative to the working directory, else under the Bazel
// runfiles tree. Returns "" and fills `looked` when it is in neither.
std::string FindMnist(std::string *looked) {
  std::vector<std::string> candidates = {"data/mnist"};
  if (const char *srcdir = getenv("TEST_SRCDIR")) {
    candidates.push_back(std::string(srcdir) + "/gcc_train/data/mnist");
    for (const char *ws : {static_cast<const char *>(getenv("TEST_WORKSPACE")), "_main"}) {
      std::string c = ws != nullptr ? std::string(srcdir) + "/" + ws + "/data/mnist" : "";
      if (!c.empty() && std::find(candidates.begin(), candidates.end(), c) == candidates.end())
        candidates.push_back(c);
    }
  } else {
    looked->append("(TEST_SRCDIR is not set) ");
  }
  char cwd[4096];
  std::string here = getcwd(cwd, sizeof cwd) != nullptr ? cwd : "?";
  for (const std::string &c : candidates) {
    if (IsDir(c))
      return c;
    looked->append(c[0] == '/' ? c : here + "/" + c).append("; ");
  }
  return "";
}

TEST(MnistRealDataTest, TrainingAndTestSets) {
  std::string looked;
  std::string dir = FindMnist(&looked);
  ASSERT_FALSE(dir.empty()) << "MNIST not found; looked in: " << looked;

  struct Expect {
    int train;
    int64_t n;
    std::array<int64_t, 10> hist;
    std::array<int, 10> first;
  };
  const Expect sets[] = {
      {1,
       60000,
       {5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949},
       {5, 0, 4, 1, 9, 2, 1, 3, 1, 4}},
      {0,
       10000,
       {980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009},
       {7, 2, 1, 0, 4, 1, 4, 9, 5, 9}},
  };
  for (const Expect &e : sets) {
    SCOPED_TRACE(e.train ? "train" : "t10k");
    gcc_diag d = {};
    gcc_dataset ds = {};
    ASSERT_EQ(gcc_mnist_load(dir.c_str(), e.train, &ds, &d), GCC_OK) << d.msg;
    EXPECT_EQ(ds.n, e.n);
    EXPECT_EQ(ds.channels, 1);
    EXPECT_EQ(ds.height, 28);
    EXPECT_EQ(ds.width, 28);
    EXPECT_EQ(ds.num_classes, 10);
    if (e.train) {
      EXPECT_EQ(ds.labels[0], 5);
    }
    for (int i = 0; i < 10; i++)
      EXPECT_EQ(ds.labels[i], e.first[i]) << i;
    std::array<int64_t, 10> hist = {};
    for (int64_t i = 0; i < ds.n; i++)
      hist.at(ds.labels[i])++;
    int64_t sum = 0;
    for (int64_t h : hist)
      sum += h;
    EXPECT_EQ(sum, ds.n);
    EXPECT_EQ(hist, e.hist);
    // Background is 0, ink reaches 255; the border pixel of image 0 is blank.
    int64_t zeros = 0;
    uint8_t maxv = 0;
    for (int64_t i = 0; i < ds.n * 784; i++) {
      zeros += ds.images[i] == 0;
      if (ds.images[i] > maxv)
        maxv = ds.images[i];
    }
    EXPECT_EQ(maxv, 255);
    EXPECT_GT(zeros, ds.n * 784 * 3 / 4);
    EXPECT_EQ(ds.images[0], 0);
    gcc_dataset_free(&ds);
  }
}

} // namespace
