// Tests of the token data sets (datasets/tokens.h): the text vocabulary and
// 90/10 split of nanoGPT's shakespeare_char/prepare.py, uint16 .bin files,
// nanoGPT's get_batch windows (inputs and shifted targets), the offsets'
// range and determinism, and the errors that name the file.
#include "datasets/tokens.h"

#include <stdint.h>

#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include "tests/testutil.h"

using namespace gcc_test; // tests/testutil.h

namespace {

std::string Msg(const gcc_diag &d) {
  return d.msg;
}

TEST(Tokens, TextVocabularyIsTheSortedDistinctBytesAndSplitsAsPrepareDotPy) {
  TempDir dir;
  // 1000 bytes: int(1000 * 0.9) = 900 train, 100 validation
  std::string text;
  for (int i = 0; i < 1000; i++)
    text += "hello world\n"[i % 12];
  ASSERT_TRUE(WriteText(dir.file("in.txt"), text));
  gcc_tokens t;
  gcc_diag d = {};
  ASSERT_EQ(gcc_tokens_open_text(dir.file("in.txt").c_str(), &t, &d), GCC_OK) << Msg(d);
  std::set<unsigned char> distinct(text.begin(), text.end());
  ASSERT_EQ(t.vocab_size, (int)distinct.size());
  int k = 0;
  for (unsigned char c : distinct) { // std::set iterates in ascending order
    EXPECT_EQ(t.vocab[k], c);
    EXPECT_EQ(t.id_of[c], k);
    k++;
  }
  EXPECT_EQ(gcc_tokens_count(&t, GCC_SPLIT_TRAIN), 900);
  EXPECT_EQ(gcc_tokens_count(&t, GCC_SPLIT_VAL), 100);
  // a window of the validation split starts at byte 900 + offset
  int64_t off[2] = {0, 95}, x[8], y[8];
  ASSERT_EQ(gcc_tokens_window(&t, GCC_SPLIT_VAL, off, 2, 4, 0, x, y, &d), GCC_OK) << Msg(d);
  for (int b = 0; b < 2; b++)
    for (int i = 0; i < 4; i++) {
      EXPECT_EQ(t.vocab[x[b * 4 + i]], (unsigned char)text[900 + off[b] + i]);
      EXPECT_EQ(t.vocab[y[b * 4 + i]], (unsigned char)text[900 + off[b] + i + 1]);
    }
  // the last window of the split ends at its last byte; one further is refused
  int64_t last = 100 - 5;
  EXPECT_EQ(gcc_tokens_window(&t, GCC_SPLIT_VAL, &last, 1, 4, 0, x, y, &d), GCC_OK);
  int64_t past = last + 1;
  EXPECT_EQ(gcc_tokens_window(&t, GCC_SPLIT_VAL, &past, 1, 4, 0, x, y, &d),
            GCC_ERR_INVALID_ARGUMENT);
  gcc_tokens_close(&t);
}

TEST(Tokens, SplitMatchesPythonsIntOfNTimesPointNine) {
  // int(n * 0.9) in Python is the double product truncated: 18 for 20,
  // 26 for 29 (26.1), 90 for 101 (90.9)
  TempDir dir;
  for (int n : {20, 29, 101, 1234}) {
    ASSERT_TRUE(WriteText(dir.file("t.txt"), std::string(n, 'a')));
    gcc_tokens t;
    gcc_diag d = {};
    ASSERT_EQ(gcc_tokens_open_text(dir.file("t.txt").c_str(), &t, &d), GCC_OK) << Msg(d);
    EXPECT_EQ(gcc_tokens_count(&t, GCC_SPLIT_TRAIN), (int64_t)(n * 0.9)) << n;
    EXPECT_EQ(gcc_tokens_count(&t, GCC_SPLIT_VAL), n - (int64_t)(n * 0.9)) << n;
    EXPECT_EQ(t.vocab_size, 1);
    gcc_tokens_close(&t);
  }
}

TEST(Tokens, OffsetsAreUniformInRangeAndDependOnTheSeedOnly) {
  TempDir dir;
  ASSERT_TRUE(WriteText(dir.file("t.txt"), std::string(200, 'x')));
  gcc_tokens t;
  gcc_diag d = {};
  ASSERT_EQ(gcc_tokens_open_text(dir.file("t.txt").c_str(), &t, &d), GCC_OK) << Msg(d);
  // train split: 180 tokens, T = 8: offsets in [0, 172)
  std::vector<int64_t> a(4000), b(4000);
  gcc_rng r1, r2;
  gcc_rng_seed(&r1, 42, 7);
  gcc_rng_seed(&r2, 42, 7);
  ASSERT_EQ(gcc_tokens_offsets(&t, GCC_SPLIT_TRAIN, 4000, 8, &r1, a.data(), &d), GCC_OK);
  ASSERT_EQ(gcc_tokens_offsets(&t, GCC_SPLIT_TRAIN, 4000, 8, &r2, b.data(), &d), GCC_OK);
  EXPECT_EQ(a, b);
  std::set<int64_t> seen(a.begin(), a.end());
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), 171);
  // 4000 draws over 172 values: each is missed with probability
  // (171/172)^4000 ~ 8e-11, so every one is seen
  EXPECT_EQ(seen.size(), 172u);
  // another stream gives other offsets
  gcc_rng_seed(&r1, 42, 8);
  ASSERT_EQ(gcc_tokens_offsets(&t, GCC_SPLIT_TRAIN, 4000, 8, &r1, b.data(), &d), GCC_OK);
  EXPECT_NE(a, b);
  // a block size the split cannot hold names the file and the split
  EXPECT_EQ(gcc_tokens_offsets(&t, GCC_SPLIT_VAL, 1, 20, &r1, b.data(), &d),
            GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(Msg(d).find(dir.file("t.txt")), std::string::npos) << Msg(d);
  EXPECT_NE(Msg(d).find("validation split has 20 tokens"), std::string::npos) << Msg(d);
  gcc_tokens_close(&t);
}

void WriteIds(const std::string &path, const std::vector<uint16_t> &ids) {
  ASSERT_TRUE(WriteFile(path, ids.data(), ids.size() * sizeof(uint16_t)));
}

TEST(Tokens, BinFilesAreUint16IdsWithShiftedTargets) {
  TempDir dir;
  std::vector<uint16_t> train, val;
  for (int i = 0; i < 300; i++)
    train.push_back((uint16_t)(i * 211 % 50257)); // GPT-2's vocabulary
  for (int i = 0; i < 40; i++)
    val.push_back((uint16_t)(60000 + i)); // the top of the uint16 range
  WriteIds(dir.file("train.bin"), train);
  WriteIds(dir.file("val.bin"), val);
  gcc_tokens t;
  gcc_diag d = {};
  ASSERT_EQ(gcc_tokens_open_bin(dir.path().c_str(), &t, &d), GCC_OK) << Msg(d);
  EXPECT_EQ(gcc_tokens_count(&t, GCC_SPLIT_TRAIN), 300);
  EXPECT_EQ(gcc_tokens_count(&t, GCC_SPLIT_VAL), 40);
  int64_t off[3] = {0, 17, 291}, x[24], y[24];
  ASSERT_EQ(gcc_tokens_window(&t, GCC_SPLIT_TRAIN, off, 3, 8, 50257, x, y, &d), GCC_OK) << Msg(d);
  for (int b = 0; b < 3; b++)
    for (int i = 0; i < 8; i++) {
      EXPECT_EQ(x[b * 8 + i], train[off[b] + i]);
      EXPECT_EQ(y[b * 8 + i], train[off[b] + i + 1]);
    }
  int64_t v0 = 3;
  ASSERT_EQ(gcc_tokens_window(&t, GCC_SPLIT_VAL, &v0, 1, 8, 0, x, y, &d), GCC_OK);
  EXPECT_EQ(x[0], 60003);
  EXPECT_EQ(y[7], 60011);
  // an id beyond the model's vocabulary names the file and the index
  EXPECT_EQ(gcc_tokens_window(&t, GCC_SPLIT_VAL, &v0, 1, 8, 60005, x, y, &d),
            GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(Msg(d).find(dir.file("val.bin")), std::string::npos) << Msg(d);
  EXPECT_NE(Msg(d).find("index 5 of the file is id 60005"), std::string::npos) << Msg(d);
  gcc_tokens_close(&t);
  gcc_tokens_close(&t); // closing twice is harmless
}

// gcc_tokens_check_ids: every id of both splits against the vocabulary, the
// first offending one named with its index in the file, across the scan's
// 64 Ki-token chunks and in a chunk's tail
TEST(Tokens, CheckIdsFindsTheFirstIdPastTheVocabularyInEitherFile) {
  TempDir dir;
  std::vector<uint16_t> train(200000), val(1000);
  for (size_t i = 0; i < train.size(); i++)
    train[i] = (uint16_t)(i * 211 % 1000);
  for (size_t i = 0; i < val.size(); i++)
    val[i] = (uint16_t)(i % 1000);
  WriteIds(dir.file("train.bin"), train);
  WriteIds(dir.file("val.bin"), val);
  gcc_tokens t;
  gcc_diag d = {};
  ASSERT_EQ(gcc_tokens_open_bin(dir.path().c_str(), &t, &d), GCC_OK) << Msg(d);
  EXPECT_EQ(gcc_tokens_check_ids(&t, 1000, &d), GCC_OK) << Msg(d); // ids 0..999
  EXPECT_EQ(gcc_tokens_check_ids(&t, 999, &d), GCC_ERR_INVALID_ARGUMENT);
  // 211 i % 1000 == 999 first at i = 109 (211 * 109 = 22999)
  EXPECT_NE(Msg(d).find(dir.file("train.bin") + ": the token at index 109 of the file is id 999, "
                                                "but the model's vocabulary has 999 tokens"),
            std::string::npos)
      << Msg(d);
  EXPECT_EQ(gcc_tokens_check_ids(&t, 0, &d), GCC_ERR_INVALID_ARGUMENT);
  gcc_tokens_close(&t);
  // ids past 1000: one in the third chunk (index 140000), one after it; one
  // in the last partial chunk of val.bin
  train[140000] = 5000;
  train[150000] = 6000;
  WriteIds(dir.file("train.bin"), train);
  ASSERT_EQ(gcc_tokens_open_bin(dir.path().c_str(), &t, &d), GCC_OK) << Msg(d);
  EXPECT_EQ(gcc_tokens_check_ids(&t, 1000, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(Msg(d).find("train.bin: the token at index 140000 of the file is id 5000"),
            std::string::npos)
      << Msg(d);
  EXPECT_EQ(gcc_tokens_check_ids(&t, 65535, &d), GCC_OK) << Msg(d);
  gcc_tokens_close(&t);
  train[140000] = train[150000] = 7;
  val[999] = 1000;
  WriteIds(dir.file("train.bin"), train);
  WriteIds(dir.file("val.bin"), val);
  ASSERT_EQ(gcc_tokens_open_bin(dir.path().c_str(), &t, &d), GCC_OK) << Msg(d);
  EXPECT_EQ(gcc_tokens_check_ids(&t, 1000, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(Msg(d).find(dir.file("val.bin") + ": the token at index 999 of the file is id 1000"),
            std::string::npos)
      << Msg(d);
  gcc_tokens_close(&t);
  // a text data set: its ids come from its own vocabulary
  ASSERT_TRUE(WriteText(dir.file("t.txt"), "abcabcabcabc"));
  ASSERT_EQ(gcc_tokens_open_text(dir.file("t.txt").c_str(), &t, &d), GCC_OK) << Msg(d);
  EXPECT_EQ(gcc_tokens_check_ids(&t, 3, &d), GCC_OK) << Msg(d);
  gcc_tokens_close(&t);
}

TEST(Tokens, BadFilesGiveErrorsNamingTheFile) {
  TempDir dir;
  gcc_tokens t;
  gcc_diag d = {};
  // a missing val.bin
  WriteIds(dir.file("train.bin"), std::vector<uint16_t>(10, 1));
  EXPECT_EQ(gcc_tokens_open_bin(dir.path().c_str(), &t, &d), GCC_ERR_IO);
  EXPECT_NE(Msg(d).find(dir.file("val.bin")), std::string::npos) << Msg(d);
  EXPECT_EQ(t.map[0], nullptr); // nothing stays mapped
  // an odd byte count: not uint16
  ASSERT_TRUE(WriteText(dir.file("val.bin"), "abc"));
  EXPECT_EQ(gcc_tokens_open_bin(dir.path().c_str(), &t, &d), GCC_ERR_PARSE);
  EXPECT_NE(Msg(d).find(dir.file("val.bin") + ": 3 bytes, an odd count"), std::string::npos)
      << Msg(d);
  // one token: no window of an input and a target
  WriteIds(dir.file("val.bin"), {7});
  EXPECT_EQ(gcc_tokens_open_bin(dir.path().c_str(), &t, &d), GCC_ERR_PARSE);
  EXPECT_NE(Msg(d).find(dir.file("val.bin")), std::string::npos) << Msg(d);
  // a folder where a file is expected, an empty text, a missing text
  EXPECT_EQ(gcc_tokens_open_text(dir.path().c_str(), &t, &d), GCC_ERR_IO);
  EXPECT_NE(Msg(d).find("not a regular file"), std::string::npos) << Msg(d);
  ASSERT_TRUE(WriteText(dir.file("empty.txt"), ""));
  EXPECT_EQ(gcc_tokens_open_text(dir.file("empty.txt").c_str(), &t, &d), GCC_ERR_PARSE);
  EXPECT_NE(Msg(d).find(dir.file("empty.txt") + ": 0 bytes"), std::string::npos) << Msg(d);
  EXPECT_EQ(gcc_tokens_open_text(dir.file("none.txt").c_str(), &t, &d), GCC_ERR_IO);
  EXPECT_NE(Msg(d).find(dir.file("none.txt")), std::string::npos) << Msg(d);
}

TEST(Tokens, TheShakespeareCorpus) {
  std::string path = Runfile("data/shakespeare/input.txt");
  gcc_tokens t;
  gcc_diag d = {};
  ASSERT_EQ(gcc_tokens_open_text(path.c_str(), &t, &d), GCC_OK) << Msg(d);
  // data/shakespeare/README.md: 5,057,282 bytes, 84 distinct byte values
  EXPECT_EQ(gcc_tokens_count(&t, GCC_SPLIT_TRAIN) + gcc_tokens_count(&t, GCC_SPLIT_VAL), 5057282);
  EXPECT_EQ(gcc_tokens_count(&t, GCC_SPLIT_TRAIN), (int64_t)(5057282 * 0.9));
  EXPECT_EQ(t.vocab_size, 84);
  EXPECT_EQ(t.vocab[0], '\n');
  gcc_tokens_close(&t);
}

} // namespace
