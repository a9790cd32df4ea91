// train -> export -> gcc-run, with the real binaries (fork/exec): a short
// MNIST training (200 SGD steps on real MNIST) exported with --export, then
// gcc-run on the MNIST test set must give exactly the predicted classes of
// gcc-train's final evaluation (--predictions) and the same accuracy; the
// C API example classifies one image as gcc-run does; gcc-run's exit codes
// (2 command line, 1 run-time, 3 invalid bundle, 4 device) and messages.
#include <fcntl.h>
#include <libgen.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/device.h"
#include "runtime/cuda/cuda_device.h"
#include "tests/subprocess.h"
#include "tests/testutil.h"

using namespace gcc_test; // tests/testutil.h

namespace {

using Result = ProcResult; // tests/subprocess.h

// Runs binary `rel` (a runfile) with `args`.
Result Exec(const std::string &rel, const std::vector<std::string> &args) {
  return RunRunfile(rel, args);
}

// The class column (column 1) of a CSV with a header line.
std::vector<int> Classes(const std::string &csv) {
  std::vector<int> c;
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line); // header
  while (std::getline(in, line)) {
    size_t a = line.find(',');
    c.push_back(atoi(line.c_str() + a + 1));
  }
  return c;
}

class ExportCli : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    std::string img = Runfile("data/mnist/t10k-images-idx3-ubyte.gz");
    ASSERT_FALSE(img.empty());
    images_ = img;
    labels_ = Runfile("data/mnist/t10k-labels-idx1-ubyte.gz");
    std::vector<char> buf(img.begin(), img.end());
    buf.push_back('\0');
    data_dir_ = dirname(buf.data());
    bundle_ = TmpPath("mlp.gccx");
    train_ =
        Exec("cli/gcc-train", {Runfile("models/mnist_mlp.pb"), "--data", data_dir_, "--max-steps",
                               "200", "--threads", "1", "--output", TmpPath("mlp.trained.pb"),
                               "--no-kernel-cache", "--device", "cpu", "--export", bundle_,
                               "--predictions", TmpPath("train_predictions.csv")});
    ASSERT_EQ(train_.exit_code, 0) << train_;
  }
  static Result train_;
  static std::string images_, labels_, data_dir_, bundle_;
};
Result ExportCli::train_;
std::string ExportCli::images_, ExportCli::labels_, ExportCli::data_dir_, ExportCli::bundle_;

TEST_F(ExportCli, GccRunReproducesTheFinalEvaluationExactly) {
  EXPECT_NE(train_.out.find("exported the inference graph to " + bundle_ +
                            " (cubin for sm_80, sm_90, PTX for compute_90; batch sizes 1, 1000)"),
            std::string::npos)
      << train_;
  Result run = Exec("cli/gcc-run", {bundle_, "--input", images_, "--labels", labels_, "--device",
                                    "cpu", "--threads", "1", "--output", TmpPath("run.csv")});
  ASSERT_EQ(run.exit_code, 0) << run;
  std::vector<int> want = Classes(ReadText(TmpPath("train_predictions.csv")));
  std::vector<int> got = Classes(ReadText(TmpPath("run.csv")));
  ASSERT_EQ(want.size(), 10000u);
  ASSERT_EQ(got.size(), want.size());
  int differ = 0;
  for (size_t i = 0; i < want.size(); i++)
    differ += want[i] != got[i];
  EXPECT_EQ(differ, 0);
  // the same accuracy, as both print it
  size_t at = train_.out.find("test accuracy ");
  ASSERT_NE(at, std::string::npos) << train_;
  std::string acc = train_.out.substr(at + 14, train_.out.find('%', at) - at - 14);
  EXPECT_NE(run.out.find("accuracy " + acc + "% ("), std::string::npos) << acc << "\n" << run;
  EXPECT_NE(ReadText(TmpPath("run.csv")).find("index,class,probability,label\n0,"),
            std::string::npos);
}

TEST_F(ExportCli, ClassifyOneAgreesWithGccRun) {
  Result run =
      Exec("cli/gcc-run", {bundle_, "--input", images_, "--device", "cpu", "--batch-size", "1"});
  ASSERT_EQ(run.exit_code, 0) << run;
  std::vector<int> classes = Classes(run.out); // CSV on stdout, the summary on stderr
  ASSERT_EQ(classes.size(), 10000u);
  EXPECT_NE(run.err.find("gcc-run: 10000 samples on cpu"), std::string::npos) << run;
  for (int index : {0, 1, 9999}) {
    Result one = Exec("examples/classify_one", {bundle_, images_, std::to_string(index)});
    ASSERT_EQ(one.exit_code, 0) << one;
    EXPECT_NE(one.out.find("image " + std::to_string(index) + ": class " +
                           std::to_string(classes[static_cast<size_t>(index)]) + " "),
              std::string::npos)
        << one;
  }
  Result bad = Exec("examples/classify_one", {bundle_, images_, "10000"});
  EXPECT_EQ(bad.exit_code, 1) << bad;
  EXPECT_NE(bad.err.find("out of range"), std::string::npos) << bad;
}

TEST_F(ExportCli, NpyInput) {
  // five images as float32, normalized the way the bundle says (MNIST)
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (5, 1, 28, 28), }";
  while ((10 + dict.size() + 1) % 64)
    dict += ' ';
  dict += '\n';
  std::string npy = std::string("\x93NUMPY\x01\x00", 8);
  npy += static_cast<char>(dict.size());
  npy += '\0';
  npy += dict;
  std::vector<float> x(5 * 784);
  for (size_t i = 0; i < x.size(); i++)
    x[i] = (i % 29 == 0) ? 2.5f : -0.4242f;
  npy.append(reinterpret_cast<const char *>(x.data()), x.size() * sizeof(float));
  WriteText(TmpPath("x.npy"), npy);
  Result run = Exec("cli/gcc-run", {bundle_, "--input", TmpPath("x.npy"), "--device", "cpu"});
  ASSERT_EQ(run.exit_code, 0) << run;
  EXPECT_EQ(Classes(run.out).size(), 5u);
  // the wrong shape for the model's input
  std::string bad = npy;
  bad.replace(bad.find("(5, 1, 28, 28)"), 14, "(5, 1, 28, 27)");
  bad.resize(bad.size() - 5 * 28 * 4);
  WriteText(TmpPath("bad.npy"), bad);
  run = Exec("cli/gcc-run", {bundle_, "--input", TmpPath("bad.npy"), "--device", "cpu"});
  EXPECT_EQ(run.exit_code, 1) << run;
  EXPECT_NE(run.err.find("array of shape [5, 1, 28, 27], but input 'image' takes [N, 1, 28, 28]"),
            std::string::npos)
      << run;
}

TEST_F(ExportCli, ExitCodesAndMessages) {
  Result r = Exec("cli/gcc-run", {});
  EXPECT_EQ(r.exit_code, 2) << r;
  r = Exec("cli/gcc-run", {bundle_});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_NE(r.err.find("--input FILE is required"), std::string::npos) << r;
  r = Exec("cli/gcc-run", {bundle_, "--input", images_, "--batch-size", "0"});
  EXPECT_EQ(r.exit_code, 2) << r;
  r = Exec("cli/gcc-run", {bundle_, "--input", images_, "--device", "tpu"});
  EXPECT_EQ(r.exit_code, 2) << r;
  r = Exec("cli/gcc-run", {bundle_, "--input", images_, "--frobnicate"});
  EXPECT_EQ(r.exit_code, 2) << r;
  r = Exec("cli/gcc-run", {TmpPath("missing.gccx"), "--input", images_});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_NE(r.err.find("missing.gccx: cannot open"), std::string::npos) << r;
  r = Exec("cli/gcc-run",
           {bundle_, "--input", labels_, "--device", "cpu"}); // IDX1 is no image file
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_NE(r.err.find(labels_), std::string::npos) << r;
  // corrupt and truncated bundles: exit 3, the file and the fault named, no output written
  std::string good = ReadText(bundle_);
  std::string flipped = good;
  flipped[flipped.size() / 3] ^= 0x10;
  WriteText(TmpPath("flipped.gccx"), flipped);
  r = Exec("cli/gcc-run",
           {TmpPath("flipped.gccx"), "--input", images_, "--output", TmpPath("never.csv")});
  EXPECT_EQ(r.exit_code, 3) << r;
  EXPECT_NE(r.err.find("flipped.gccx: section '"), std::string::npos) << r;
  EXPECT_NE(r.err.find("is corrupt"), std::string::npos) << r;
  struct stat st;
  EXPECT_NE(stat(TmpPath("never.csv").c_str(), &st), 0);
  WriteText(TmpPath("short.gccx"), good.substr(0, good.size() - 100));
  r = Exec("cli/gcc-run", {TmpPath("short.gccx"), "--input", images_});
  EXPECT_EQ(r.exit_code, 3) << r;
  EXPECT_NE(r.err.find("short.gccx: the header promises"), std::string::npos) << r;
  EXPECT_NE(r.err.find("(truncated)"), std::string::npos) << r;
  std::string future = good;
  future[8] = 9;
  WriteText(TmpPath("future.gccx"), future);
  r = Exec("cli/gcc-run", {TmpPath("future.gccx"), "--input", images_});
  EXPECT_EQ(r.exit_code, 3) << r;
  EXPECT_NE(r.err.find("bundle format version 9"), std::string::npos) << r;
  // gcc-train's own flags
  r = Exec("cli/gcc-train", {Runfile("models/mnist_mlp.pb"), "--export", TmpPath("x.gccx"),
                             "--export-archs", "sm_80,sm_8"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_NE(r.err.find("--export-archs: 'sm_8'"), std::string::npos) << r;
  r = Exec("cli/gcc-train", {Runfile("models/mnist_mlp.pb"), "--export-archs", "sm_80"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_NE(r.err.find("--export-archs needs --export FILE"), std::string::npos) << r;
  r = Exec("cli/gcc-train", {Runfile("models/mnist_mlp.pb"), "--export", TmpPath("x.gccx"),
                             "--export-batch-sizes", "0"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_NE(r.err.find("--export-batch-sizes '0'"), std::string::npos) << r;
}

// The accuracy on gcc-run's output (its summary line), in percent.
double Accuracy(const Result &r) {
  const std::string &s = r.err.find("accuracy ") != std::string::npos ? r.err : r.out;
  size_t at = s.find("accuracy ");
  return at == std::string::npos ? -1.0 : atof(s.c_str() + at + 9);
}

// --export-precision: the trained MLP (200 steps) exported again from its
// trained model in bf16 and fp16, by a gcc-train run that evaluates it at
// the same --precision; gcc-run on the 10,000 MNIST test images predicts
// exactly that evaluation's classes, keeps the float32 bundle's accuracy
// within 0.5 points and its classes on all but 1% of the images; --info
// and gcc-train say what the bundle holds.
TEST_F(ExportCli, SixteenBitBundlesKeepTheTrainedAccuracy) {
  Result fp32 = Exec("cli/gcc-run", {bundle_, "--input", images_, "--labels", labels_, "--device",
                                     "cpu", "--threads", "1", "--output", TmpPath("fp32.csv")});
  ASSERT_EQ(fp32.exit_code, 0) << fp32;
  double acc32 = Accuracy(fp32);
  EXPECT_GT(acc32, 85.0) << fp32; // trained: a check that cannot pass on an untrained model
  std::vector<int> classes32 = Classes(ReadText(TmpPath("fp32.csv")));
  Result info = Exec("cli/gcc-run", {bundle_, "--info"});
  ASSERT_EQ(info.exit_code, 0) << info;
  EXPECT_NE(info.out.find("format version 1,"), std::string::npos) << info;
  EXPECT_NE(info.out.find("precision fp32: weights 2300200 bytes (0 of 10 tensors in 16 bits"),
            std::string::npos)
      << info;
  for (const char *p : {"bf16", "fp16"}) {
    SCOPED_TRACE(p);
    std::string b = TmpPath(std::string("mlp.") + p + ".gccx");
    Result exp =
        Exec("cli/gcc-train", {TmpPath("mlp.trained.pb"), "--data", data_dir_, "--epochs", "0",
                               "--threads", "1", "--no-output", "--no-kernel-cache", "--device",
                               "cpu", "--export", b, "--export-precision", p, "--precision", p,
                               "--predictions", TmpPath(std::string("eval.") + p + ".csv")});
    ASSERT_EQ(exp.exit_code, 0) << exp;
    EXPECT_NE(exp.out.find(std::string("bundle precision ") + p +
                           ": 10 of 10 weight tensors in 16 bits, 1150100 weight bytes (2300200 "
                           "in float32)"),
              std::string::npos)
        << exp;
    info = Exec("cli/gcc-run", {b, "--info"});
    ASSERT_EQ(info.exit_code, 0) << info;
    EXPECT_NE(info.out.find("format version 2,"), std::string::npos) << info;
    EXPECT_NE(info.out.find(std::string("precision ") + p +
                            ": weights 1150100 bytes (10 of 10 tensors in 16 bits; 2300200 bytes "
                            "in float32)"),
              std::string::npos)
        << info;
    EXPECT_NE(
        info.out.find("CUDA: cubin for sm_80, sm_90, PTX for compute_90; batch sizes 1, 1000"),
        std::string::npos)
        << info;
    std::string csv = TmpPath(std::string("run.") + p + ".csv");
    Result run = Exec("cli/gcc-run", {b, "--input", images_, "--labels", labels_, "--device", "cpu",
                                      "--threads", "1", "--output", csv});
    ASSERT_EQ(run.exit_code, 0) << run;
    double acc = Accuracy(run);
    printf("%s: accuracy %.2f%% (float32 %.2f%%)\n", p, acc, acc32);
    EXPECT_NEAR(acc, acc32, 0.5) << run;
    std::vector<int> classes = Classes(ReadText(csv));
    // the training binary's own evaluation at that precision, class for class
    std::vector<int> eval = Classes(ReadText(TmpPath(std::string("eval.") + p + ".csv")));
    ASSERT_EQ(eval.size(), classes.size());
    int from_eval = 0;
    for (size_t i = 0; i < classes.size(); i++)
      from_eval += classes[i] != eval[i];
    EXPECT_EQ(from_eval, 0);
    size_t at = exp.out.find("test accuracy ");
    ASSERT_NE(at, std::string::npos) << exp;
    std::string acc_eval = exp.out.substr(at + 14, exp.out.find('%', at) - at - 14);
    EXPECT_NE((run.out + run.err).find("accuracy " + acc_eval + "% ("), std::string::npos)
        << acc_eval << run;
    ASSERT_EQ(classes.size(), classes32.size());
    int differ = 0;
    for (size_t i = 0; i < classes.size(); i++)
      differ += classes[i] != classes32[i];
    printf("%s: %d of %zu classes differ from the float32 bundle's\n", p, differ, classes.size());
    EXPECT_LE(differ, 100); // 1%
  }
}

TEST_F(ExportCli, ExportPrecisionFlagIsCheckedBeforeAnyData) {
  // a data folder that does not exist: the flag's error comes first
  for (const char *bad : {"fp8", "tf32", "BF16"}) {
    Result r =
        Exec("cli/gcc-train", {Runfile("models/mnist_mlp.pb"), "--data", "/nonexistent", "--export",
                               TmpPath("never.gccx"), "--export-precision", bad});
    EXPECT_EQ(r.exit_code, 2) << r;
    EXPECT_NE(
        r.err.find(std::string("--export-precision '") + bad + "': expected fp32, bf16 or fp16"),
        std::string::npos)
        << r;
  }
  Result r = Exec("cli/gcc-train", {Runfile("models/mnist_mlp.pb"), "--data", "/nonexistent",
                                    "--export-precision", "bf16"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_NE(r.err.find("--export-precision needs --export FILE"), std::string::npos) << r;
  struct stat st;
  EXPECT_NE(stat(TmpPath("never.gccx").c_str(), &st), 0);
}

TEST_F(ExportCli, CudaWithoutAGpu) {
  char why[512];
  if (gcc_cuda_device_count(why, sizeof why) > 0)
    GTEST_SKIP() << "a CUDA GPU is present: the no-GPU behaviour is not testable here";
  Result r = Exec("cli/gcc-run", {bundle_, "--input", images_, "--device", "cuda"});
  EXPECT_EQ(r.exit_code, 4) << r;
  EXPECT_NE(r.err.find("no usable CUDA GPU"), std::string::npos) << r;
  r = Exec("cli/gcc-run",
           {bundle_, "--input", images_, "--device", "auto", "--output", TmpPath("auto.csv")});
  EXPECT_EQ(r.exit_code, 0) << r;
  EXPECT_NE(r.err.find("running on the CPU"), std::string::npos) << r;
}

} // namespace
