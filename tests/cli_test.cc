// Tests of the gcc-train command line (cli/gcc_train.c): the real binary is
// run with fork/exec, its stdout, stderr and exit status captured. Checks
// the documented exit codes (0 ok, 1 run-time failure, 2 bad command line,
// 3 invalid model, 4 device unusable, 130 interrupted), that every error
// message names the flag / file at fault, and short real runs: the linear
// model trained and saved, the MNIST MLP for 50 steps, and SIGINT mid-run.
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "graph/builder.h"
#include "graph/ir.h"
#include "graph/loader.h"
#include "runtime/device.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/session.h"
#include "tests/subprocess.h"
#include "tests/testutil.h"
#include "tests/tfevents.h"

using namespace gcc_test; // tests/testutil.h, tests/subprocess.h

namespace {

using Result = ProcResult; // tests/subprocess.h

// Runs gcc-train with `args`. `on_stdout` (if set) is called with the child's
// pid and all of stdout so far whenever more arrives. The child is killed
// after `timeout_s` seconds. It runs in `cwd` (if not empty) with `env` set.
Result RunCli(const std::vector<std::string> &args, double timeout_s = 60,
              const std::function<void(pid_t, const std::string &)> &on_stdout = nullptr,
              const std::string &cwd = "",
              const std::vector<std::pair<std::string, std::string>> &env = {}) {
  ProcOptions o;
  o.timeout_s = timeout_s;
  o.on_stdout = on_stdout;
  o.cwd = cwd;
  o.env = env;
  return RunRunfile("cli/gcc-train", args, o);
}

bool Has(const std::string &s, const std::string &needle) {
  return s.find(needle) != std::string::npos;
}

int CudaDevices() {
  char reason[512];
  return gcc_cuda_device_count(reason, sizeof reason);
}

class CliTest : public ::testing::Test {
protected:
  void SetUp() override {
    mnist_ = Runfile("models/mnist_mlp.pb");
    linear_ = Runfile("models/linear.pb");
    data_ = Runfile("data/mnist");
    ASSERT_FALSE(Runfile("cli/gcc-train").empty()) << "gcc-train not in the runfiles";
    ASSERT_FALSE(mnist_.empty());
    ASSERT_FALSE(linear_.empty());
    ASSERT_FALSE(data_.empty());
  }
  std::string mnist_, linear_, data_;
  TempDir tmp_;
};

// ---- help, version, command-line errors (exit 2) ---------------------------------

// The long options of main.c's `longopts` table, read from the source:
// every entry {"name", no_argument | required_argument | optional_argument.
std::vector<std::string> FlagsInMainC() {
  std::vector<std::string> flags;
  std::string src = ReadText(Runfile("cli/train_args.c"));
  size_t at = src.find("longopts[]");
  size_t end = src.find("{0, 0, 0, 0}", at);
  if (at == std::string::npos || end == std::string::npos)
    return flags;
  for (size_t p = src.find("{\"", at); p < end; p = src.find("{\"", p + 1)) {
    size_t q = src.find('"', p + 2);
    if (q == std::string::npos || q > end)
      break;
    std::string name = src.substr(p + 2, q - p - 2);
    size_t kind = src.find_first_not_of(", \t\n", q + 1);
    if (kind == std::string::npos)
      break;
    for (const char *k : {"no_argument", "required_argument", "optional_argument"})
      if (src.compare(kind, strlen(k), k) == 0)
        flags.push_back("--" + name);
  }
  return flags;
}

// Whether the help text has a line documenting `flag`: two spaces, the flag,
// then a space, '=', '[' or the end of the line.
bool Documents(const std::string &help, const std::string &flag) {
  std::string key = "\n  " + flag;
  for (size_t p = help.find(key); p != std::string::npos; p = help.find(key, p + 1)) {
    size_t after = p + key.size();
    if (after < help.size() && strchr(" =[\n", help[after]) != nullptr)
      return true;
  }
  return false;
}

// Numbers after each occurrence of `prefix` in `s`.
std::vector<double> NumbersAfter(const std::string &s, const std::string &prefix) {
  std::vector<double> v;
  for (size_t p = s.find(prefix); p != std::string::npos; p = s.find(prefix, p + 1)) {
    const char *start = s.c_str() + p + prefix.size();
    char *end = nullptr;
    double x = strtod(start, &end);
    if (end != start)
      v.push_back(x);
  }
  return v;
}

TEST_F(CliTest, HelpDocumentsEveryFlag) {
  Result r = RunCli({"--help"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(Has(r.out, "usage: gcc-train MODEL.pb")) << r;
  EXPECT_TRUE(r.err.empty()) << r;
  std::vector<std::string> flags = FlagsInMainC();
  ASSERT_FALSE(flags.empty()) << "cli/train_args.c not readable from the test";
  EXPECT_GE(flags.size(), 20u);
  for (const char *f : {"--device",
                        "--data",
                        "--epochs",
                        "--batch-size",
                        "--eval-batch-size",
                        "--lr",
                        "--seed",
                        "--threads",
                        "--log-every",
                        "--max-steps",
                        "--output",
                        "--no-output",
                        "--dump-after",
                        "--dump-placement",
                        "--dump-placement-file",
                        "--cuda-arch",
                        "--strict-placement",
                        "--quiet",
                        "--version",
                        "--help"})
    EXPECT_NE(std::find(flags.begin(), flags.end(), f), flags.end()) << f << " not in longopts";
  for (const std::string &f : flags)
    EXPECT_TRUE(Documents(r.out, f)) << f << " is not documented in --help";
  // the exit codes are documented too
  for (const char *code : {"0 ok", "1 run-time failure", "2 bad command line", "3 invalid model",
                           "4 device unusable", "130 interrupted"})
    EXPECT_TRUE(Has(r.out, code)) << code;
}

TEST_F(CliTest, Version) {
  Result r = RunCli({"--version"});
  ASSERT_EQ(r.exit_code, 0) << r;
  // "gcc-train X.Y.Z\n"
  ASSERT_EQ(r.out.rfind("gcc-train ", 0), 0u) << r;
  std::string v = r.out.substr(10);
  ASSERT_FALSE(v.empty());
  EXPECT_EQ(v.back(), '\n') << r;
  v.pop_back();
  EXPECT_EQ(std::count(v.begin(), v.end(), '.'), 2) << r;
  EXPECT_EQ(v.find_first_not_of("0123456789."), std::string::npos) << r;
  EXPECT_TRUE(isdigit(static_cast<unsigned char>(v.front())) &&
              isdigit(static_cast<unsigned char>(v.back())))
      << r;
  EXPECT_TRUE(r.err.empty()) << r;
}

TEST_F(CliTest, NoModel) {
  Result r = RunCli({});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(Has(r.err, "no model given")) << r;
  EXPECT_TRUE(Has(r.err, "usage:")) << r;
  EXPECT_TRUE(r.out.empty()) << r;
  Result two = RunCli({linear_, mnist_});
  EXPECT_EQ(two.exit_code, 2) << two;
  EXPECT_TRUE(Has(two.err, "exactly one model")) << two;
}

TEST_F(CliTest, UnknownFlag) {
  Result r = RunCli({linear_, "--frobnicate", "--no-output"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(Has(r.err, "--frobnicate")) << r;
  EXPECT_TRUE(Has(r.err, "unknown option")) << r;
  Result s = RunCli({"-x", linear_});
  EXPECT_EQ(s.exit_code, 2) << s;
  EXPECT_TRUE(Has(s.err, "'-x'")) << s;
}

TEST_F(CliTest, BadNumbers) {
  struct Case {
    std::vector<std::string> args;
    std::string flag, value;
  } cases[] = {
      {{"--epochs", "-1"}, "--epochs", "-1"},
      {{"--epochs", "3x"}, "--epochs", "3x"},
      {{"--epochs", "99999999999999999999"}, "--epochs", "99999999999999999999"},
      {{"--batch-size", "0"}, "--batch-size", "0"},
      {{"--batch-size", ""}, "--batch-size", ""},
      {{"--lr", "abc"}, "--lr", "abc"},
      {{"--lr", "-0.5"}, "--lr", "-0.5"},
      {{"--lr", "nan"}, "--lr", "nan"},
      {{"--threads", "0"}, "--threads", "0"},
      {{"--max-steps", "0"}, "--max-steps", "0"},
      {{"--eval-batch-size", "-3"}, "--eval-batch-size", "-3"},
      {{"--seed", "x"}, "--seed", "x"},
      {{"--log-every", "1.5"}, "--log-every", "1.5"},
  };
  for (const Case &c : cases) {
    std::vector<std::string> args = {linear_, "--no-output"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    Result r = RunCli(args);
    EXPECT_EQ(r.exit_code, 2) << c.flag << " " << c.value << ": " << r;
    EXPECT_TRUE(Has(r.err, c.flag + " '" + c.value + "'")) << r;
    EXPECT_TRUE(r.out.empty()) << r; // nothing ran
  }
  // a flag whose value is missing says so (not "unknown option")
  Result r = RunCli({linear_, "--no-output", "--epochs"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(Has(r.err, "--epochs needs a value")) << r;
}

TEST_F(CliTest, BogusDevice) {
  for (const char *dev : {"bogus", "gpu", "cuda:x", "cuda:-1", ""}) {
    Result r = RunCli({linear_, "--no-output", "--device", dev});
    EXPECT_EQ(r.exit_code, 2) << dev << ": " << r;
    EXPECT_TRUE(Has(r.err, std::string("--device '") + dev + "'")) << r;
    EXPECT_TRUE(Has(r.err, "cpu, cuda, cuda:N or auto")) << r;
  }
}

// ---- devices -----------------------------------------------------------------------

TEST_F(CliTest, DeviceCudaWithoutAUsableGpu) {
  std::string out = tmp_.file("cuda.pb");
  Result r = RunCli({linear_, "--device", "cuda", "--output", out});
  EXPECT_EQ(r.exit_code, 4) << r;
  if (CudaDevices() == 0) {
    EXPECT_TRUE(Has(r.err, "no usable CUDA GPU")) << r;
  } else { // this build has no CUDA execution backend yet
    EXPECT_TRUE(Has(r.err, "CUDA")) << r;
  }
  EXPECT_TRUE(Has(r.err, "--device cpu")) << r;
  EXPECT_TRUE(Has(r.err, "--device auto")) << r;
  EXPECT_FALSE(Exists(out));
  Result n = RunCli({linear_, "--device", "cuda:7", "--output", out});
  EXPECT_EQ(n.exit_code, 4) << n;
  EXPECT_TRUE(Has(n.err, "cuda:7")) << n;
}

TEST_F(CliTest, DeviceAutoRunsOnTheCpuAndSaysWhy) {
  Result r =
      RunCli({linear_, "--device", "auto", "--epochs", "1", "--no-output", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(Has(r.err, "--device auto")) << r;
  EXPECT_TRUE(Has(r.err, "running on the CPU")) << r;
  if (CudaDevices() == 0) {
    EXPECT_TRUE(Has(r.err, "no usable CUDA GPU (")) << r;
  }
  EXPECT_TRUE(Has(r.out, " on cpu,")) << r;
  // the default is auto
  Result d = RunCli({linear_, "--epochs", "1", "--no-output", "--threads", "1"});
  ASSERT_EQ(d.exit_code, 0) << d;
  EXPECT_TRUE(Has(d.err, "--device auto")) << d;
  // an explicit cpu says nothing about CUDA
  Result c = RunCli({linear_, "--device", "cpu", "--epochs", "1", "--no-output", "--threads", "1"});
  ASSERT_EQ(c.exit_code, 0) << c;
  EXPECT_FALSE(Has(c.err, "CUDA")) << c;
  EXPECT_TRUE(Has(c.out, " on cpu,")) << c;
}

// ---- bad model files -----------------------------------------------------------------

TEST_F(CliTest, MissingModelFile) {
  std::string path = tmp_.file("no_such_model.pb");
  Result r = RunCli({path, "--device", "cpu", "--no-output"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(Has(r.err, path)) << r;
  EXPECT_TRUE(Has(r.err, "cannot open")) << r;
}

TEST_F(CliTest, CorruptModelFile) {
  std::string model = ReadText(linear_);
  ASSERT_GT(model.size(), 100u);
  std::string cut = tmp_.file("cut.pb");
  ASSERT_TRUE(WriteText(cut, model.substr(0, model.size() / 2)));
  Result r = RunCli({cut, "--device", "cpu", "--no-output"});
  EXPECT_EQ(r.exit_code, 3) << r;
  EXPECT_TRUE(Has(r.err, cut)) << r;
  EXPECT_TRUE(Has(r.err, "not a gcc-train model")) << r;
  std::string text = tmp_.file("text.pb");
  ASSERT_TRUE(WriteText(text, "\xff not a model at all\n"));
  Result t = RunCli({text, "--device", "cpu", "--no-output"});
  EXPECT_EQ(t.exit_code, 3) << t;
  EXPECT_TRUE(Has(t.err, text)) << t;
  EXPECT_EQ(ListDir(tmp_.path()), (std::vector<std::string>{"cut.pb", "text.pb"}));
}

// ---- real runs ---------------------------------------------------------------------

// Mean squared error of `g` over its inline data set, by the library.
double InlineMse(const gcc_graph *g) {
  gcc_diag d = {};
  gcc_session_options so = {};
  so.threads = 1;
  so.opt = g->training.opt;
  gcc_session *s = nullptr;
  EXPECT_EQ(gcc_session_create(g, &so, &s, &d), GCC_OK) << d.msg;
  if (s == nullptr)
    return NAN;
  const gcc_value *x = &g->values[g->training.inline_inputs];
  const gcc_value *y = &g->values[g->training.inline_targets];
  float loss = NAN;
  int64_t correct = 0;
  EXPECT_EQ(
      gcc_session_eval_batch(s, x->data, y->data, x->shape.dims[0], &loss, &correct, nullptr, &d),
      GCC_OK)
      << d.msg;
  gcc_session_destroy(s);
  return loss;
}

// ---- the CNNs: CIFAR-10 files written here, --show-predictions -----------------

// Writes `n` CIFAR-10 binary records (label byte + 3072 pixel bytes) with
// labels (seed + i) % 10 and a label-dependent pattern into `path`.
void WriteCifar(const std::string &path, int n, int seed) {
  FILE *f = fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  for (int i = 0; i < n; i++) {
    int label = (seed + i) % 10;
    fputc(label, f);
    for (int j = 0; j < 3072; j++)
      fputc((label * 25 + j * (seed + 3) + i) % 256, f);
  }
  fclose(f);
}

TEST_F(CliTest, CifarCnnTrainsOnCifarFormatFilesAndShowsPredictions) {
  std::string dir = tmp_.file("cifar");
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  for (int k = 1; k <= 5; k++)
    WriteCifar(dir + "/data_batch_" + std::to_string(k) + ".bin", 8, k);
  WriteCifar(dir + "/test_batch.bin", 6, 3); // labels 3 4 5 6 7 8
  Result r = RunCli({Runfile("models/cifar_cnn.pb"), "--device", "cpu", "--threads", "1", "--data",
                     dir, "--epochs", "1", "--no-output", "--show-predictions", "4"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(Has(r.out, "epoch 1: test accuracy")) << r;
  EXPECT_TRUE(Has(r.out, "trained 1 epochs (10 steps)")) << r; // 40 images, batch 4
  // the tutorial's lines: class names of the first 4 test images, then predictions
  EXPECT_TRUE(Has(r.out, "GroundTruth: cat   deer  dog   frog")) << r;
  size_t p = r.out.find("Predicted:   ");
  ASSERT_NE(p, std::string::npos) << r;
  std::string line = r.out.substr(p + 13, r.out.find('\n', p) - p - 13);
  int names = 0;
  for (const char *c :
       {"plane", "car", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"})
    for (size_t q = line.find(c); q != std::string::npos; q = line.find(c, q + 1))
      if ((q == 0 || line[q - 1] == ' ') &&
          (q + strlen(c) == line.size() || line[q + strlen(c)] == ' '))
        names++;
  EXPECT_EQ(names, 4) << line;
  // the tutorial's per-class lines, with CIFAR-10's names; the test set
  // holds classes 3 .. 8, one image each
  EXPECT_TRUE(Has(r.out, "Accuracy for class: plane has no test samples\n")) << r;
  EXPECT_TRUE(Has(r.out, "Accuracy for class: cat   is ")) << r;
  EXPECT_TRUE(Has(r.out, "Accuracy for class: ship  is ")) << r;
  EXPECT_TRUE(Has(r.out, "Accuracy for class: truck has no test samples\n")) << r;
  // more than the test set holds: all 6
  Result all = RunCli({Runfile("models/cifar_cnn.pb"), "--device", "cpu", "--threads", "1",
                       "--data", dir, "--epochs", "0", "--no-output", "--show-predictions", "50"});
  ASSERT_EQ(all.exit_code, 0) << all;
  EXPECT_TRUE(Has(all.out, "GroundTruth: cat   deer  dog   frog  horse ship \n")) << all;
}

TEST_F(CliTest, CifarDataErrorsNameTheFile) {
  std::string dir = tmp_.file("cifar_bad");
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  Result missing =
      RunCli({Runfile("models/cifar_cnn.pb"), "--device", "cpu", "--data", dir, "--no-output"});
  EXPECT_EQ(missing.exit_code, 1) << missing;
  EXPECT_TRUE(Has(missing.err, dir + "/data_batch_1.bin: cannot open")) << missing;
  for (int k = 1; k <= 5; k++)
    WriteCifar(dir + "/data_batch_" + std::to_string(k) + ".bin", 2, k);
  WriteCifar(dir + "/test_batch.bin", 2, 0);
  ASSERT_EQ(truncate((dir + "/test_batch.bin").c_str(), 3073 + 100), 0);
  Result cut =
      RunCli({Runfile("models/cifar_cnn.pb"), "--device", "cpu", "--data", dir, "--no-output"});
  EXPECT_EQ(cut.exit_code, 1) << cut;
  EXPECT_TRUE(Has(cut.err, dir + "/test_batch.bin: 3173 bytes")) << cut;
  EXPECT_TRUE(Has(cut.err, "3073-byte")) << cut;
  // MNIST files are not CIFAR-10: the CNN for 3x32x32 on --data data/mnist
  Result wrong =
      RunCli({Runfile("models/mnist_cnn.pb"), "--device", "cpu", "--data", dir, "--no-output"});
  EXPECT_EQ(wrong.exit_code, 1) << wrong;
  EXPECT_TRUE(Has(wrong.err, "train-images-idx3-ubyte")) << wrong;
}

TEST_F(CliTest, MnistCnnShowsDigitPredictions) {
  Result r =
      RunCli({Runfile("models/mnist_cnn.pb"), "--device", "cpu", "--threads", "1", "--data", data_,
              "--max-steps", "30", "--no-output", "--log-every", "0", "--show-predictions", "4"});
  ASSERT_EQ(r.exit_code, 0) << r;
  // the first four MNIST test digits
  EXPECT_TRUE(Has(r.out, "GroundTruth: 7     2     1     0    \n")) << r;
  EXPECT_TRUE(Has(r.out, "Predicted:   ")) << r;
}

TEST_F(CliTest, LinearTrainsAndWritesALoadableModel) {
  std::string out = tmp_.file("linear.trained.pb");
  Result r = RunCli({linear_, "--device", "cpu", "--threads", "1", "--output", out});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(Has(r.out, "epoch 20: train-set loss")) << r;
  EXPECT_TRUE(Has(r.out, "trained 20 epochs (320 steps)")) << r;
  EXPECT_TRUE(Has(r.out, "saved the trained model to " + out)) << r;
  EXPECT_EQ(ListDir(tmp_.path()), std::vector<std::string>{"linear.trained.pb"});

  gcc_diag d = {};
  gcc_graph *before = nullptr, *after = nullptr;
  ASSERT_EQ(gcc_model_load(linear_.c_str(), &before, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_model_load(out.c_str(), &after, &d), GCC_OK) << d.msg;
  for (const char *p : {"fc.weight", "fc.bias"}) {
    const gcc_value *a = &before->values[gcc_graph_find(before, p)];
    int vb = gcc_graph_find(after, p);
    ASSERT_GE(vb, 0) << p;
    const gcc_value *b = &after->values[vb];
    EXPECT_EQ(b->kind, GCC_VALUE_PARAM) << p;
    ASSERT_EQ(a->data_bytes, b->data_bytes) << p;
    EXPECT_NE(memcmp(a->data, b->data, a->data_bytes), 0) << p << " did not change";
  }
  const float *w =
      static_cast<const float *>(after->values[gcc_graph_find(after, "fc.weight")].data);
  EXPECT_NEAR(w[0], 2.0, 0.02);
  EXPECT_NEAR(w[1], -3.0, 0.02);
  EXPECT_NEAR(w[2], 0.5, 0.02);
  // same graph and data, lower loss
  EXPECT_EQ(after->n_nodes, before->n_nodes);
  ASSERT_GE(after->training.inline_inputs, 0);
  double mse_before = InlineMse(before), mse_after = InlineMse(after);
  EXPECT_LT(mse_after, 1e-3);
  EXPECT_LT(mse_after, 0.01 * mse_before) << "before " << mse_before << ", after " << mse_after;
  gcc_graph_free(before);
  gcc_graph_free(after);
}

TEST_F(CliTest, NoOutputWritesNothingAndTheDefaultOutputIsNextToTheModel) {
  std::string model = tmp_.file("linear.pb");
  ASSERT_TRUE(WriteText(model, ReadText(linear_)));
  Result r = RunCli({model, "--device", "cpu", "--threads", "1", "--epochs", "2", "--no-output"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_FALSE(Has(r.out, "saved")) << r;
  EXPECT_EQ(ListDir(tmp_.path()), std::vector<std::string>{"linear.pb"});
  // without --output: MODEL with .pb replaced by .trained.pb
  Result d = RunCli({model, "--device", "cpu", "--threads", "1", "--epochs", "2"});
  ASSERT_EQ(d.exit_code, 0) << d;
  EXPECT_EQ(ListDir(tmp_.path()), (std::vector<std::string>{"linear.pb", "linear.trained.pb"}));
  EXPECT_TRUE(Has(d.out, "saved the trained model to " + tmp_.file("linear.trained.pb"))) << d;
}

// --epochs 0 trains nothing: no MODEL.trained.pb (issue 30), unless --output
// names a file.
TEST_F(CliTest, EpochsZeroWritesNoTrainedModelUnlessOutputIsGiven) {
  std::string model = tmp_.file("linear.pb");
  ASSERT_TRUE(WriteText(model, ReadText(linear_)));
  Result r = RunCli({model, "--device", "cpu", "--threads", "1", "--epochs", "0"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_FALSE(Has(r.out, "saved")) << r;
  EXPECT_TRUE(Has(r.out, "nothing trained (0 epochs): no trained model written")) << r;
  EXPECT_EQ(ListDir(tmp_.path()), std::vector<std::string>{"linear.pb"});
  std::string out = tmp_.file("asis.pb");
  Result o = RunCli({model, "--device", "cpu", "--threads", "1", "--epochs", "0", "--output", out});
  ASSERT_EQ(o.exit_code, 0) << o;
  EXPECT_EQ(ListDir(tmp_.path()), (std::vector<std::string>{"asis.pb", "linear.pb"}));
}

TEST_F(CliTest, OutputIntoAMissingDirectoryFails) {
  std::string out = tmp_.file("no/such/dir/m.pb");
  Result r =
      RunCli({linear_, "--device", "cpu", "--threads", "1", "--epochs", "1", "--output", out});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(Has(r.err, out)) << r;
  EXPECT_TRUE(ListDir(tmp_.path()).empty());
}

TEST_F(CliTest, MnistFiftySteps) {
  Result r = RunCli({mnist_, "--device", "cpu", "--data", data_, "--max-steps", "50", "--epochs",
                     "1", "--log-every", "10", "--threads", "1", "--no-output"});
  ASSERT_EQ(r.exit_code, 0) << r;
  // "[1,    10] loss: 2.2972" for batches 10, 20, ..., 50
  std::vector<double> batches = NumbersAfter(r.out, "\n[1,");
  std::vector<double> losses = NumbersAfter(r.out, "] loss: ");
  ASSERT_EQ(batches, (std::vector<double>{10, 20, 30, 40, 50})) << r;
  ASSERT_EQ(losses.size(), 5u) << r;
  EXPECT_GT(losses.front(), 2.0) << r; // about ln(10) at the start
  EXPECT_LT(losses.back(), losses.front()) << r;
  std::vector<double> acc = NumbersAfter(r.out, "epoch 1: test accuracy ");
  ASSERT_EQ(acc.size(), 1u) << r;
  EXPECT_GT(acc[0], 30.0) << r; // 50 steps: well above chance (10%)
  EXPECT_TRUE(Has(r.out, "/10000), test loss")) << r;
  EXPECT_TRUE(Has(r.out, "trained 1 epochs (50 steps)")) << r;
  EXPECT_TRUE(Has(r.out, "test accuracy")) << r;
  EXPECT_FALSE(Has(r.out, "saved")) << r;
}

TEST_F(CliTest, MissingDataDirectory) {
  std::string out = tmp_.file("m.pb");
  Result r = RunCli(
      {mnist_, "--device", "cpu", "--data", "/nonexistent", "--max-steps", "5", "--output", out});
  EXPECT_NE(r.exit_code, 0) << r;
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(Has(r.err, "/nonexistent/train-images-idx3-ubyte")) << r;
  EXPECT_FALSE(Exists(out));
  // a directory without the files
  Result e = RunCli(
      {mnist_, "--device", "cpu", "--data", tmp_.path(), "--max-steps", "5", "--output", out});
  EXPECT_EQ(e.exit_code, 1) << e;
  EXPECT_TRUE(Has(e.err, tmp_.path() + "/train-images-idx3-ubyte")) << e;
  EXPECT_FALSE(Exists(out));
}

TEST_F(CliTest, SigintStopsTheRunWithoutWritingAModel) {
  std::string out = tmp_.file("interrupted.pb");
  bool sent = false;
  std::string seen_at_signal;
  Result r = RunCli({mnist_, "--device", "cpu", "--data", data_, "--epochs", "1000", "--log-every",
                     "20", "--threads", "1", "--output", out},
                    60, [&](pid_t pid, const std::string &so_far) {
                      if (!sent && Has(so_far, "[1,")) {
                        seen_at_signal = so_far;
                        kill(pid, SIGINT);
                        sent = true;
                      }
                    });
  ASSERT_TRUE(sent) << "no loss line before the end: " << r;
  EXPECT_FALSE(r.timed_out) << r;
  EXPECT_EQ(r.exit_code, 130) << r;
  EXPECT_TRUE(Has(r.err, "interrupted after")) << r;
  EXPECT_TRUE(Has(r.err, "no model written")) << r;
  EXPECT_FALSE(Has(r.out, "saved")) << r;
  EXPECT_FALSE(Exists(out));
  EXPECT_TRUE(ListDir(tmp_.path()).empty()) << "a temporary file was left behind";
  // Loss lines reach a pipe as they are printed, not when stdio's buffer
  // fills or the epoch ends: a line every 20 steps fills 4 KiB only after
  // about 3000 steps, more than the 938 of an epoch, so without a flush per
  // line the first output would be the whole epoch with its "epoch 1:" line.
  EXPECT_FALSE(Has(seen_at_signal, "epoch 1:")) << seen_at_signal;
  // interrupted within the first epoch
  std::vector<double> steps = NumbersAfter(r.err, "interrupted after ");
  ASSERT_EQ(steps.size(), 1u) << r;
  EXPECT_GE(steps[0], 20) << r;
  EXPECT_LT(steps[0], 938) << r;
}

// ---- honest messages (issue 20) ------------------------------------------------------

TEST_F(CliTest, EpochsZeroSaysEvaluatedWithoutARate) {
  Result r = RunCli({mnist_, "--device", "cpu", "--threads", "1", "--data", data_, "--epochs", "0",
                     "--no-output"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(Has(r.out, "0 epochs (evaluation only)")) << r;
  EXPECT_TRUE(Has(r.out, "evaluated: test accuracy")) << r;
  EXPECT_TRUE(Has(r.out, "evaluated " + mnist_ + " (no training); test accuracy")) << r;
  EXPECT_FALSE(Has(r.out, "untrained")) << r;
  EXPECT_FALSE(Has(r.out, "trained 0 epochs")) << r;
  EXPECT_FALSE(Has(r.out, "samples/s")) << r;
}

TEST_F(CliTest, MaxStepsIsInTheBanner) {
  Result r = RunCli({linear_, "--device", "cpu", "--threads", "1", "--epochs", "3", "--max-steps",
                     "5", "--no-output"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(Has(r.out, "3 epochs or 5 steps (--max-steps), whichever ends first")) << r;
  EXPECT_TRUE(Has(r.out, "trained 1 epochs (5 steps)")) << r;
}

// A rate is printed only for a span the clock can time (1 ms and more):
// one step of the linear model (16 samples) must not claim more than 16k
// samples/s, whatever the machine; it says "too short to time" instead.
TEST_F(CliTest, NoRateForASubMillisecondRun) {
  for (int i = 0; i < 3; i++) {
    Result r = RunCli({linear_, "--device", "cpu", "--threads", "1", "--epochs", "1", "--max-steps",
                       "1", "--no-output"});
    ASSERT_EQ(r.exit_code, 0) << r;
    std::vector<double> rates = NumbersAfter(r.out, " s: ");
    std::vector<double> secs = NumbersAfter(r.out, "(1 steps) in ");
    ASSERT_EQ(secs.size(), 1u) << r;
    if (rates.empty()) {
      EXPECT_TRUE(Has(r.out, "(too short to time)")) << r;
    } else {
      EXPECT_LE(rates[0], 16.0 / 1e-3) << r;
    }
  }
}

TEST_F(CliTest, EveryFlagIsCheckedBeforeAnythingRuns) {
  std::string out = tmp_.file("m.pb");
  Result r = RunCli({mnist_, "--data", data_, "--dump-after", "inferr", "--output", out});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(Has(r.err, "--dump-after=inferr: no such pass")) << r;
  EXPECT_TRUE(r.out.empty()) << r; // no banner: nothing started
  EXPECT_FALSE(Has(r.err, "CUDA")) << r;
  EXPECT_FALSE(Exists(out));
  // a real pass name still dumps
  Result ok = RunCli({linear_, "--device", "cpu", "--threads", "1", "--epochs", "1", "--dump-after",
                      "autodiff", "--no-output"});
  EXPECT_EQ(ok.exit_code, 0) << ok;
  EXPECT_TRUE(Has(ok.err, "; IR after pass autodiff")) << ok;
}

// The run summary's "fp16 loss scaling: N of 32 steps skipped (inf/nan
// gradients), scale S" line in `out`, S a whole number: N and S, or false.
bool LossScaleLine(const std::string &out, int *skipped, std::string *scale) {
  const std::string head = "fp16 loss scaling: ";
  size_t at = out.find(head);
  size_t eol = at == std::string::npos ? at : out.find('\n', at);
  if (eol == std::string::npos)
    return false;
  std::string line = out.substr(at + head.size(), eol - at - head.size());
  char s[64] = "";
  int end = 0;
  if (sscanf(line.c_str(), "%d of 32 steps skipped (inf/nan gradients), scale %63s%n", skipped, s,
             &end) != 2 ||
      end != (int)line.size() || s[strspn(s, "0123456789")] != '\0')
    return false;
  *scale = s;
  return true;
}

// fp16 loss scaling (--loss-scale): dynamic by default under --precision
// fp16, a summary line of the skipped steps and the final scale; a
// meaningless or malformed setting is a command-line error before anything
// runs.
TEST_F(CliTest, LossScaleDefaultsToDynamicUnderFp16AndReportsSkippedSteps) {
  const std::vector<std::string> base = {linear_, "--device", "cpu", "--threads",
                                         "1",     "--epochs", "2",   "--no-output"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return RunCli(a);
  };
  Result r = with({"--precision", "fp16"});
  ASSERT_EQ(r.exit_code, 0) << r;
  int skipped = -1;
  std::string scale;
  ASSERT_TRUE(LossScaleLine(r.out, &skipped, &scale)) << r;
  // 32 steps cannot reach a growth (every 2000): each skip halved 65536
  EXPECT_GE(skipped, 1) << "65536 overflows this model's float16 gradients at first";
  EXPECT_LT(skipped, 32);
  EXPECT_EQ(std::stod(scale), std::ldexp(65536.0, -skipped)) << r;
  // --log-dir: the scale and the skipped steps after every epoch
  std::string dir = tmp_.file("runs");
  Result lg = with({"--precision", "fp16", "--log-dir", dir});
  ASSERT_EQ(lg.exit_code, 0) << lg;
  std::string csv = ReadText(dir + "/" + ListDir(dir).back()); // metrics.*.csv
  EXPECT_TRUE(Has(csv, ",32,train/loss_scale," + scale + "\n")) << csv;
  EXPECT_TRUE(Has(csv, ",32,train/skipped_steps," + std::to_string(skipped) + "\n")) << csv;
  EXPECT_TRUE(Has(csv, ",16,train/loss_scale,")) << csv;
  // growth after every good step: the scale ends above where it started to fall
  Result g = with({"--precision", "fp16", "--loss-scale-growth-interval", "1"});
  ASSERT_EQ(g.exit_code, 0) << g;
  int skipped_g = -1;
  ASSERT_TRUE(LossScaleLine(g.out, &skipped_g, &scale)) << g;
  EXPECT_GT(skipped_g, skipped) << "doubling every step overflows again and again";
  // a fixed scale never moves; one this large skips every step
  Result f = with({"--precision", "fp16", "--loss-scale", "1e30"});
  ASSERT_EQ(f.exit_code, 0) << f;
  EXPECT_TRUE(Has(f.out, "fp16 loss scaling: 32 of 32 steps skipped (inf/nan gradients), "
                         "scale 1e+30"))
      << f;
  // none, and the other precisions: no scaling, no line
  for (const std::vector<std::string> &x :
       {std::vector<std::string>{"--precision", "fp16", "--loss-scale", "none"},
        std::vector<std::string>{"--precision", "bf16"}, std::vector<std::string>{}}) {
    Result n = with(x);
    ASSERT_EQ(n.exit_code, 0) << n;
    EXPECT_FALSE(Has(n.out, "loss scaling")) << n;
  }
  // errors, before anything runs
  struct Bad {
    std::vector<std::string> args;
    const char *says;
  };
  const Bad bad[] = {
      {{"--loss-scale", "dynamic"}, "--loss-scale dynamic needs --precision fp16"},
      {{"--precision", "bf16", "--loss-scale", "128"}, "--loss-scale 128 needs --precision fp16"},
      {{"--precision", "fp16", "--loss-scale", "huge"}, "--loss-scale 'huge': expected"},
      {{"--precision", "fp16", "--loss-scale", "0"}, "--loss-scale '0': expected"},
      {{"--precision", "fp16", "--loss-scale", "-4"}, "--loss-scale '-4': expected"},
      {{"--precision", "fp16", "--loss-scale-growth-interval", "0"},
       "--loss-scale-growth-interval"},
      {{"--precision", "fp16", "--loss-scale", "none", "--loss-scale-growth-interval", "10"},
       "--loss-scale-growth-interval needs a dynamic loss scale"},
  };
  for (const Bad &b : bad) {
    Result e = with(b.args);
    EXPECT_EQ(e.exit_code, 2) << e;
    EXPECT_TRUE(Has(e.err, b.says)) << e;
    EXPECT_TRUE(e.out.empty()) << e;
  }
  // and without fp16 an explicit none is harmless
  Result ok = with({"--loss-scale", "none"});
  EXPECT_EQ(ok.exit_code, 0) << ok;
}

TEST_F(CliTest, NoCudaNoticeBeforeAnUnrelatedError) {
  Result r = RunCli({tmp_.file("mistyped.pb"), "--no-output"}); // --device auto
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(Has(r.err, "mistyped.pb: cannot open")) << r;
  EXPECT_FALSE(Has(r.err, "CUDA")) << r;
  EXPECT_FALSE(Has(r.err, "running on the CPU")) << r;
}

TEST_F(CliTest, MissingDefaultDataFolderSuggestsDataAndSaysWhereItLooked) {
  std::string dir = tmp_.file("models");
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_TRUE(WriteText(dir + "/mnist_mlp.pb", ReadText(mnist_)));
  Result r = RunCli({"models/mnist_mlp.pb", "--no-output"}, 60, nullptr, tmp_.path());
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(Has(r.err, "no MNIST data folder")) << r;
  EXPECT_TRUE(Has(r.err, "looked in data/mnist and models/../data/mnist")) << r;
  EXPECT_TRUE(Has(r.err, "--data DIR")) << r;
  EXPECT_FALSE(Has(r.err, "CUDA")) << r;
  EXPECT_TRUE(r.out.empty()) << r;
  std::string cifar = tmp_.file("cifar_cnn.pb");
  ASSERT_TRUE(WriteText(cifar, ReadText(Runfile("models/cifar_cnn.pb"))));
  Result c = RunCli({"cifar_cnn.pb", "--no-output"}, 60, nullptr, tmp_.path());
  EXPECT_EQ(c.exit_code, 1) << c;
  EXPECT_TRUE(Has(c.err, "no CIFAR-10 data folder: looked in data/cifar-10-batches-bin and "
                         "./../data/cifar-10-batches-bin"))
      << c;
}

// A classifier (Linear 2 -> 3, CrossEntropy) whose inline data set carries
// int64 labels: the class of (x0, x1) is which of x0 > 0.5, x1 > 0.5, else.
// `float_labels`: the labels stored as float32 instead (a dtype mismatch).
std::string WriteInlineClassifier(const std::string &path, bool float_labels) {
  enum { N = 96 };
  static float xs[N * 2], ys[N];
  static int64_t labels[N];
  for (int i = 0; i < N; i++) {
    xs[2 * i] = static_cast<float>((i * 37) % 97) / 97.0f;
    xs[2 * i + 1] = static_cast<float>((i * 53) % 89) / 89.0f;
    labels[i] = xs[2 * i] > 0.5f ? 0 : xs[2 * i + 1] > 0.5f ? 1 : 2;
    ys[i] = static_cast<float>(labels[i]);
  }
  gcc_builder *b = gcc_builder_new("inline_classifier", 1);
  int64_t xd[2] = {GCC_BATCH_DIM, 2}, yd[1] = {GCC_BATCH_DIM};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, xd);
  int y = gcc_build_input(b, "label", GCC_DT_INT64, 1, yd);
  int logits = gcc_build_linear(b, "fc", x, 2, 3);
  int loss = gcc_build_cross_entropy(b, "loss", logits, y, -1);
  gcc_build_output(b, loss);
  gcc_build_output(b, logits);
  gcc_build_training_spec t = {};
  t.loss = "loss";
  t.prediction = "fc.out";
  t.input = "x";
  t.target = "label";
  t.dataset = "inline";
  t.opt.kind = GCC_OPT_SGD;
  t.opt.lr = 0.5f;
  t.batch_size = 16;
  t.epochs = 30;
  t.seed = 1;
  t.inline_inputs = xs;
  t.inline_inputs_shape = gcc_shape{2, {N, 2}};
  if (float_labels)
    t.inline_targets = ys;
  else
    t.inline_labels = labels;
  t.inline_targets_shape = gcc_shape{1, {N}};
  gcc_build_training(b, &t);
  gcc_graph *g = nullptr;
  gcc_diag d = {};
  if (gcc_builder_finish(b, &g, &d) != GCC_OK)
    return std::string("build: ") + d.msg;
  gcc_status s = gcc_model_save(g, path.c_str(), &d);
  gcc_graph_free(g);
  return s == GCC_OK ? "" : std::string("save: ") + d.msg;
}

TEST_F(CliTest, InlineClassifierTakesInt64Labels) {
  std::string model = tmp_.file("inline_cls.pb");
  ASSERT_EQ(WriteInlineClassifier(model, false), "");
  Result r = RunCli({model, "--device", "cpu", "--threads", "1", "--no-output"});
  ASSERT_EQ(r.exit_code, 0) << r;
  std::vector<double> acc = NumbersAfter(r.out, "epoch 30: train-set accuracy ");
  ASSERT_EQ(acc.size(), 1u) << r;
  EXPECT_GT(acc[0], 80.0) << r; // three half-planes: a linear model separates them well
  // float32 labels for an int64 target: the error names both dtypes
  std::string bad = tmp_.file("inline_float_labels.pb");
  ASSERT_EQ(WriteInlineClassifier(bad, true), "");
  Result m = RunCli({bad, "--device", "cpu", "--threads", "1", "--no-output"});
  EXPECT_EQ(m.exit_code, 3) << m;
  EXPECT_TRUE(Has(m.err, "training.inline_data.targets are float32, but target 'label' takes "
                         "int64"))
      << m;
}

// ---- per-class accuracy and the confusion matrix ------------------------------------

TEST_F(CliTest, PerClassAccuracyAndConfusionMatrixAgreeWithTheTotal) {
  Result r = RunCli({mnist_, "--device", "cpu", "--threads", "1", "--data", data_, "--max-steps",
                     "30", "--log-every", "0", "--no-output", "--confusion-matrix"});
  ASSERT_EQ(r.exit_code, 0) << r;
  // the matrix: a header of the ten classes, then one row per true class
  size_t at = r.out.find("confusion matrix (rows: true class, columns: predicted class):\n");
  ASSERT_NE(at, std::string::npos) << r;
  std::vector<std::vector<int64_t>> m;
  size_t line = r.out.find('\n', at) + 1;
  line = r.out.find('\n', line) + 1; // the header
  for (int k = 0; k < 10; k++) {
    size_t end = r.out.find('\n', line);
    ASSERT_NE(end, std::string::npos) << r;
    std::vector<int64_t> row;
    const char *p = r.out.c_str() + line;
    char *q = nullptr;
    EXPECT_EQ(strtoll(p, &q, 10), k) << r; // the row's class
    for (p = q; p < r.out.c_str() + end; p = q) {
      long long v = strtoll(p, &q, 10);
      if (q == p)
        break;
      row.push_back(v);
    }
    ASSERT_EQ(row.size(), 10u) << r.out.substr(line, end - line);
    m.push_back(row);
    line = end + 1;
  }
  // rows sum to the classes of the MNIST test set (t10k-labels), the
  // diagonal to the reported correct count
  const int64_t per_class[10] = {980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009};
  int64_t diag = 0;
  for (int k = 0; k < 10; k++) {
    int64_t n = 0;
    for (int64_t v : m[k])
      n += v;
    EXPECT_EQ(n, per_class[k]) << "class " << k;
    diag += m[k][k];
    // the tutorial's line, from the same counts
    char want[64];
    snprintf(want, sizeof want, "Accuracy for class: %-5d is %.1f %%\n", k,
             100.0 * static_cast<double>(m[k][k]) / static_cast<double>(n));
    EXPECT_TRUE(Has(r.out, want)) << want << r;
  }
  EXPECT_TRUE(Has(r.out, "(" + std::to_string(diag) + "/10000)")) << diag << r;
  // off: neither; the default prints the lines but no matrix
  Result off = RunCli({mnist_, "--device", "cpu", "--threads", "1", "--data", data_, "--epochs",
                       "0", "--no-output", "--per-class", "off"});
  ASSERT_EQ(off.exit_code, 0) << off;
  EXPECT_FALSE(Has(off.out, "Accuracy for class")) << off;
  EXPECT_FALSE(Has(off.out, "confusion matrix")) << off;
  Result def = RunCli({mnist_, "--device", "cpu", "--threads", "1", "--data", data_, "--epochs",
                       "0", "--no-output"});
  ASSERT_EQ(def.exit_code, 0) << def;
  EXPECT_TRUE(Has(def.out, "Accuracy for class: 9     is ")) << def;
  EXPECT_FALSE(Has(def.out, "confusion matrix")) << def;
  // a regression has no classes, whatever is asked
  Result lin = RunCli({linear_, "--device", "cpu", "--threads", "1", "--epochs", "1", "--no-output",
                       "--per-class", "on", "--confusion-matrix"});
  ASSERT_EQ(lin.exit_code, 0) << lin;
  EXPECT_FALSE(Has(lin.out, "Accuracy for class")) << lin;
  EXPECT_FALSE(Has(lin.out, "confusion matrix")) << lin;
  Result bad = RunCli({linear_, "--no-output", "--per-class", "maybe"});
  EXPECT_EQ(bad.exit_code, 2) << bad;
  EXPECT_TRUE(Has(bad.err, "--per-class 'maybe': expected auto, on or off")) << bad;
}

// ---- the progress bar ---------------------------------------------------------------

// Runs gcc-train with its stdout on a pseudo-terminal `cols` columns wide
// (what a user's terminal is); returns what the terminal received and the
// exit status in *rc.
std::string RunCliOnATerminal(const std::vector<std::string> &args, int cols, int *rc) {
  *rc = -1;
  std::string bin = Runfile("cli/gcc-train");
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0)
    return "posix_openpt failed";
  std::string slave_name = ptsname(master);
  int slave = open(slave_name.c_str(), O_RDWR | O_NOCTTY);
  if (slave < 0)
    return "cannot open " + slave_name;
  struct winsize ws = {};
  ws.ws_row = 24;
  ws.ws_col = static_cast<unsigned short>(cols);
  ioctl(slave, TIOCSWINSZ, &ws);
  std::vector<char *> argv;
  argv.push_back(const_cast<char *>(bin.c_str()));
  for (const std::string &a : args)
    argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(slave, 1);
    int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, 0);
    dup2(devnull, 2);
    close(master);
    close(slave);
    unsetenv("COLUMNS"); // the terminal's own width is what counts
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(slave);
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(master, buf, sizeof buf);
    if (n > 0)
      out.append(buf, static_cast<size_t>(n));
    else if (n < 0 && errno == EINTR)
      continue;
    else
      break; // EIO once the child closed the terminal
  }
  close(master);
  int st = 0;
  waitpid(pid, &st, 0);
  *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

// The redraws of the bar: every piece between carriage returns and line
// feeds that shows the batch count of an MNIST epoch.
std::vector<std::string> BarDraws(const std::string &out) {
  std::vector<std::string> draws;
  size_t start = 0;
  for (size_t i = 0; i <= out.size(); i++) {
    if (i == out.size() || out[i] == '\r' || out[i] == '\n') {
      std::string piece = out.substr(start, i - start);
      if (Has(piece, "/938 ["))
        draws.push_back(piece);
      start = i + 1;
    }
  }
  return draws;
}

TEST_F(CliTest, ProgressBarFitsTheTerminalWithElapsedAndEta) {
  for (int cols : {80, 50}) {
    int rc = 0;
    std::string out = RunCliOnATerminal({mnist_, "--device", "cpu", "--threads", "1", "--data",
                                         data_, "--max-steps", "40", "--no-output"},
                                        cols, &rc);
    ASSERT_EQ(rc, 0) << out;
    std::vector<std::string> draws = BarDraws(out);
    ASSERT_GE(draws.size(), 3u) << cols << " columns:\n" << out;
    for (const std::string &d : draws) {
      // never wraps: at most cols - 1 characters, padded to clear a longer one
      EXPECT_LE(d.size(), static_cast<size_t>(cols - 1)) << d;
      EXPECT_TRUE(Has(d, "|")) << cols << " columns, no bar: " << d;
      EXPECT_TRUE(Has(d, "%|")) << d;
      // [elapsed<remaining, ...] as tqdm writes them
      size_t lb = d.find(" ["), lt = d.find('<');
      ASSERT_NE(lb, std::string::npos) << d;
      ASSERT_NE(lt, std::string::npos) << d;
      EXPECT_EQ(d[lb + 4], ':') << d;
      EXPECT_TRUE(Has(d, "loss ")) << d;
    }
    if (cols == 80) {
      EXPECT_TRUE(Has(draws.back(), "epoch 1/5 ")) << draws.back();
      EXPECT_TRUE(Has(draws.back(), " samples/s, loss ")) << draws.back();
    }
    EXPECT_FALSE(Has(out, "[1,    ")) << "per-batch lines on a terminal:\n" << out;
  }
}

TEST_F(CliTest, ProgressBarOffATerminalWhenAskedAndLinesOtherwise) {
  Result r = RunCli({mnist_, "--device", "cpu", "--threads", "1", "--data", data_, "--max-steps",
                     "30", "--no-output", "--progress", "bar"},
                    60, nullptr, "", {{"COLUMNS", "50"}});
  ASSERT_EQ(r.exit_code, 0) << r;
  std::vector<std::string> draws = BarDraws(r.out);
  ASSERT_GE(draws.size(), 3u) << r;
  for (const std::string &d : draws)
    EXPECT_LE(d.size(), 49u) << d;
  // --progress lines on a terminal: the per-N-batches lines
  int rc = 0;
  std::string out = RunCliOnATerminal({mnist_, "--device", "cpu", "--threads", "1", "--data", data_,
                                       "--max-steps", "30", "--log-every", "10", "--no-output",
                                       "--progress", "lines"},
                                      80, &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(BarDraws(out).empty()) << out;
  EXPECT_TRUE(Has(out, "[1,    30] loss: ")) << out;
  Result bad = RunCli({linear_, "--no-output", "--progress", "tqdm"});
  EXPECT_EQ(bad.exit_code, 2) << bad;
  EXPECT_TRUE(Has(bad.err, "--progress 'tqdm': expected auto, bar or lines")) << bad;
}

// ---- --log-dir: TensorBoard event files and metrics CSVs ------------------------------

// --log-dir under a file-size limit (issue 32): the run fails (EFBIG), and
// what it wrote is whole records only, the event file and the CSV alike;
// at a limit of 0 no empty event file (or CSV) is left. Before: a
// record cut mid-write, and a 0-byte event file.
TEST_F(CliTest, LogDirNeverKeepsAHalfRecordOrAnEmptyFile) {
  for (rlim_t limit : {(rlim_t)1500, (rlim_t)0}) {
    std::string dir = tmp_.file("capped" + std::to_string(limit));
    ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
    ProcOptions o;
    o.child_setup = [limit] {
      struct rlimit rl = {limit, limit};
      setrlimit(RLIMIT_FSIZE, &rl);
    };
    Result r = RunRunfile("cli/gcc-train",
                          {linear_, "--device", "cpu", "--quiet", "--no-output", "--log-every", "1",
                           "--epochs", "3", "--log-dir", dir},
                          o);
    EXPECT_EQ(r.exit_code, 1) << r;
    EXPECT_TRUE(Has(r.err, strerror(EFBIG))) << r;
    std::vector<std::string> files = ListDir(dir);
    if (limit == 0) {
      EXPECT_TRUE(files.empty()) << "left: " << (files.empty() ? "" : files[0]);
      continue;
    }
    ASSERT_EQ(files.size(), 2u);
    std::vector<TfEvent> ev;
    EXPECT_EQ(ReadTfEvents(dir + "/" + files[0], &ev), "") << "a record was cut";
    EXPECT_GE(ev.size(), 2u); // the file version and at least one scalar
    std::string csv = ReadText(dir + "/" + files[1]);
    ASSERT_FALSE(csv.empty());
    EXPECT_EQ(csv.back(), '\n') << "a row was cut: " << csv;
  }
}

TEST_F(CliTest, LogDirWritesTensorBoardEventsAndMetricsCsv) {
  std::string dir = tmp_.file("runs");
  Result r =
      RunCli({mnist_, "--device", "cpu", "--threads", "1", "--data", data_, "--max-steps", "60",
              "--log-every", "20", "--no-output", "--per-class", "off", "--log-dir", dir});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(Has(r.out, "tensorboard --logdir " + dir)) << r;
  std::vector<std::string> files = ListDir(dir);
  ASSERT_EQ(files.size(), 2u) << r;
  ASSERT_EQ(files[0].rfind("events.out.tfevents.", 0), 0u) << files[0];
  // the CSV is named as the event file: one file set per run
  EXPECT_EQ(files[1], "metrics." + files[0].substr(20) + ".csv");
  std::vector<TfEvent> ev;
  ASSERT_EQ(ReadTfEvents(dir + "/" + files[0], &ev), "");
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev[0].file_version, "brain.Event:2");
  std::vector<int64_t> loss_steps;
  std::vector<double> losses;
  int lr = 0, test_loss = 0, acc = 0, rate = 0;
  for (const TfEvent &e : ev) {
    if (e.tag == "train/loss") {
      loss_steps.push_back(e.step);
      losses.push_back(e.value);
    }
    lr += e.tag == "train/lr" && std::fabs(e.value - 0.1f) < 1e-7;
    if (e.tag == "test/loss" || e.tag == "test/accuracy" || e.tag == "train/samples_per_sec") {
      EXPECT_EQ(e.step, 60) << e.tag;
    }
    test_loss += e.tag == "test/loss";
    rate += e.tag == "train/samples_per_sec" && e.value > 0;
    if (e.tag == "test/accuracy") {
      acc++;
      // the fraction the summary line prints as a percentage
      std::vector<double> pct = NumbersAfter(r.out, "epoch 1: test accuracy ");
      ASSERT_EQ(pct.size(), 1u) << r;
      EXPECT_NEAR(100.0 * e.value, pct[0], 0.005) << r;
    }
  }
  // every --log-every steps, the interval's mean: what the loss lines print
  EXPECT_EQ(loss_steps, (std::vector<int64_t>{20, 40, 60})) << r;
  std::vector<double> printed = NumbersAfter(r.out, "] loss: ");
  ASSERT_EQ(printed.size(), 3u) << r;
  for (size_t i = 0; i < 3; i++)
    EXPECT_NEAR(losses[i], printed[i], 5e-5) << i;
  EXPECT_EQ(lr, 3);
  EXPECT_EQ(test_loss, 1);
  EXPECT_EQ(acc, 1);
  EXPECT_EQ(rate, 1);
  // the CSV holds the same scalars, one per row
  std::string csv = ReadText(dir + "/" + files[1]);
  EXPECT_EQ(csv.rfind("wall_time,step,tag,value\n", 0), 0u) << csv;
  EXPECT_EQ(static_cast<size_t>(std::count(csv.begin(), csv.end(), '\n')), ev.size()) << csv;
  EXPECT_TRUE(Has(csv, ",60,test/accuracy,")) << csv;
  // a log folder under a plain file: exit 1 before anything runs
  std::string bad = tmp_.file("plain");
  ASSERT_TRUE(WriteText(bad, "x"));
  Result b = RunCli({linear_, "--no-output", "--log-dir", bad + "/runs"});
  EXPECT_EQ(b.exit_code, 1) << b;
  EXPECT_TRUE(Has(b.err, "--log-dir " + bad + "/runs")) << b;
  EXPECT_TRUE(b.out.empty()) << b;
}

// ---- a CPU-only build (bazel --config=cpu_only) ---------------------------------------

TEST_F(CliTest, ACpuOnlyBuildSaysItWasBuiltWithoutCuda) {
  Result list = RunCli({"--list-devices"});
  ASSERT_EQ(list.exit_code, 0) << list;
  EXPECT_TRUE(Has(list.out, "\ncuda") || Has(list.out, "CUDA")) << list;
  Result dev = RunCli({linear_, "--device", "cuda", "--no-output"});
  EXPECT_EQ(dev.exit_code, 4) << dev;
#ifdef GCC_NO_CUDA // tests/BUILD: defined in --config=cpu_only
  EXPECT_TRUE(Has(list.out, "cuda    none: this gcc-train was built without CUDA")) << list;
  EXPECT_TRUE(Has(dev.err, "built without CUDA")) << dev;
  EXPECT_TRUE(Has(dev.err, "--device cpu")) << dev;
  // the CPU path is whole: auto trains on the CPU and says why
  Result run = RunCli({linear_, "--epochs", "1", "--no-output", "--threads", "1"});
  ASSERT_EQ(run.exit_code, 0) << run;
  EXPECT_TRUE(Has(run.err, "built without CUDA")) << run;
  EXPECT_TRUE(Has(run.out, " on cpu,")) << run;
#else
  EXPECT_FALSE(Has(list.out, "built without CUDA")) << list;
  EXPECT_FALSE(Has(dev.err, "built without CUDA")) << dev;
#endif
}

} // namespace
