// Reliability of gcc-train and gcc-run at their edges (issue 16): values read
// back row by row must be batch-shaped, a diverged run writes nothing, output
// files never destroy what their path names, and bad paths fail before any
// work. The real binaries are run with fork/exec.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include "graph/ir.h"
#include "graph/loader.h"
#include "graph/ops.h"
#include "tests/subprocess.h"
#include "tests/testutil.h"

namespace {

using gcc_test::Exists;
using gcc_test::ReadText;
using gcc_test::Runfile;
using gcc_test::TempDir;
using gcc_test::WriteText;

using Result = gcc_test::ProcResult; // tests/subprocess.h

// Run in the child between fork and exec (resource limits), if set.
std::function<void()> g_child_setup;

// Runs `bin_rel` (a runfile path) with `args`; stdin is /dev/null. `during`,
// if set, is called with the child's pid once stdout contains `marker`.
Result RunBin(const std::string &bin_rel, const std::vector<std::string> &args,
              double timeout_s = 120, const std::string &marker = "",
              const std::function<void(pid_t)> &during = nullptr) {
  gcc_test::ProcOptions o;
  o.timeout_s = timeout_s;
  o.child_setup = g_child_setup;
  bool fired = false;
  if (during)
    o.on_stdout = [&](pid_t pid, const std::string &out) {
      if (!fired && out.find(marker) != std::string::npos) {
        fired = true;
        during(pid);
      }
    };
  return gcc_test::RunRunfile(bin_rel, args, o);
}

bool Has(const std::string &s, const std::string &needle) {
  return s.find(needle) != std::string::npos;
}

// Copies the model at runfile `rel` to `out` with `edit` applied to its graph.
void EditModel(const std::string &rel, const std::string &out,
               const std::function<void(gcc_graph *)> &edit) {
  gcc_graph *g = nullptr;
  gcc_diag d = {};
  ASSERT_EQ(gcc_model_load(Runfile(rel).c_str(), &g, &d), GCC_OK) << d.msg;
  edit(g);
  ASSERT_EQ(gcc_model_save(g, out.c_str(), &d), GCC_OK) << d.msg;
  gcc_graph_free(g);
}

void SetField(char **field, const char *value) {
  free(*field);
  *field = strdup(value);
}

class Reliability : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(Runfile("cli/gcc-train").empty());
    ASSERT_FALSE(Runfile("cli/gcc-run").empty());
    data_ = Runfile("data/mnist");
    ASSERT_FALSE(data_.empty());
  }
  std::string data_;
  TempDir tmp_{"gcc_reliability"};
};

// ---- 1. a prediction (or loss) whose shape does not fit is refused ------------------

TEST_F(Reliability, LoaderRefusesAPredictionThatIsNotBatchShaped) {
  for (const auto &c : {std::make_pair("models/linear.pb", "fc.weight"),
                        std::make_pair("models/mnist_mlp.pb", "fc5.weight"),
                        // (64, 10) at the MLP's batch 64: equal to the batch, yet no batch dim
                        std::make_pair("models/mnist_mlp.pb", "fc1.weight")}) {
    std::string path = tmp_.file("bad_prediction.pb");
    EditModel(c.first, path, [&](gcc_graph *g) { SetField(&g->training.prediction, c.second); });
    gcc_graph *g = nullptr;
    gcc_diag d = {};
    EXPECT_EQ(gcc_model_load(path.c_str(), &g, &d), GCC_ERR_INVALID_GRAPH) << c.first;
    EXPECT_TRUE(Has(d.msg, "training.prediction '" + std::string(c.second) + "'")) << d.msg;
    EXPECT_TRUE(Has(d.msg, "one row per sample")) << d.msg;
    gcc_graph_free(g);
  }
}

TEST_F(Reliability, LoaderRefusesALossThatIsNotAScalar) {
  std::string path = tmp_.file("bad_loss.pb");
  EditModel("models/linear.pb", path, [](gcc_graph *g) { SetField(&g->training.loss, "fc.out"); });
  gcc_graph *g = nullptr;
  gcc_diag d = {};
  EXPECT_EQ(gcc_model_load(path.c_str(), &g, &d), GCC_ERR_INVALID_GRAPH);
  EXPECT_TRUE(Has(d.msg, "training.loss 'fc.out' must be a float32 scalar")) << d.msg;
  gcc_graph_free(g);
}

// Before the fix: exported, and gcc-run read past the output tensor; the
// MLP's evaluation read out of bounds and printed a garbage accuracy.
TEST_F(Reliability, CliRefusesAWeightAsPrediction) {
  std::string lin = tmp_.file("linear_w.pb"), mlp = tmp_.file("mlp_w.pb");
  EditModel("models/linear.pb", lin,
            [](gcc_graph *g) { SetField(&g->training.prediction, "fc.weight"); });
  EditModel("models/mnist_mlp.pb", mlp,
            [](gcc_graph *g) { SetField(&g->training.prediction, "fc5.weight"); });
  Result r = RunBin("cli/gcc-train",
                    {lin, "--epochs", "0", "--no-output", "--export", tmp_.file("b.gccx")});
  EXPECT_EQ(r.exit_code, 3) << r;
  EXPECT_TRUE(Has(r.err, "training.prediction 'fc.weight'")) << r;
  EXPECT_FALSE(Exists(tmp_.file("b.gccx")));
  r = RunBin("cli/gcc-train", {mlp, "--data", data_, "--max-steps", "1", "--eval-batch-size",
                               "10000", "--no-output", "--quiet"});
  EXPECT_EQ(r.exit_code, 3) << r;
  EXPECT_TRUE(Has(r.err, "training.prediction 'fc5.weight'")) << r;
}

// ---- 2. a diverged run writes nothing ---------------------------------------------------

// The outputs of a run: an existing model file that must stay as it was, and
// three that must not appear.
struct Outputs {
  explicit Outputs(const TempDir &t)
      : model(t.file("m.pb")), preds(t.file("p.csv")), bundle(t.file("m.gccx")),
        trace(t.file("trace.json")) {
    WriteText(model, "the previous model");
  }
  std::vector<std::string> Flags() const {
    return {"--output", model, "--predictions", preds, "--export", bundle, "--profile", trace};
  }
  void ExpectUntouched() const {
    EXPECT_EQ(ReadText(model), "the previous model");
    EXPECT_FALSE(Exists(preds));
    EXPECT_FALSE(Exists(bundle));
    EXPECT_FALSE(Exists(trace));
  }
  std::string model, preds, bundle, trace;
};

std::vector<std::string> Cat(std::vector<std::string> a, const std::vector<std::string> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The reproduction: before, exit 0 with the NaN model saved over
// m.pb, all-zero predictions and a bundle of NaN probabilities.
TEST_F(Reliability, DivergedMlpWritesNothing) {
  Outputs o(tmp_);
  Result r = RunBin("cli/gcc-train", Cat({Runfile("models/mnist_mlp.pb"), "--data", data_, "--lr",
                                          "1e6", "--max-steps", "2", "--quiet", "--device", "cpu"},
                                         o.Flags()));
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(Has(r.err, "the evaluation loss is") && Has(r.err, "after optimizer step 2")) << r;
  o.ExpectUntouched();
}

// A run whose last output fails (/dev/full) leaves the others as they were
// (issue 32: --output and --predictions were in place, exit 1): every
// output is staged and all are renamed only when each was written. The
// control: the same run with a writable last output writes them all.
TEST_F(Reliability, AFailedOutputLeavesNoOtherOutput) {
  std::vector<std::string> base = {Runfile("models/mnist_mlp.pb"),
                                   "--data",
                                   data_,
                                   "--max-steps",
                                   "2",
                                   "--quiet",
                                   "--device",
                                   "cpu"};
  for (const std::vector<std::string> &last :
       {std::vector<std::string>{"--export-onnx", "/dev/full"},
        std::vector<std::string>{"--export-onnx", tmp_.file("m.onnx"), "--profile", "/dev/full"}}) {
    Outputs o(tmp_);
    Result r = RunBin("cli/gcc-train", Cat(Cat(base, o.Flags()), last));
    EXPECT_EQ(r.exit_code, 1) << r;
    EXPECT_TRUE(Has(r.err, "/dev/full: write failed: No space left on device")) << r;
    EXPECT_FALSE(Has(r.err, "--export-onnx: --export-onnx")) << "the flag once: " << r;
    o.ExpectUntouched();
    EXPECT_FALSE(Exists(tmp_.file("m.onnx")));
    for (const std::string &f : gcc_test::ListDir(tmp_.file("")))
      EXPECT_EQ(f.find(".tmp."), std::string::npos) << "a temporary is left: " << f;
  }
  Outputs o(tmp_);
  Result r = RunBin("cli/gcc-train", Cat(Cat(base, o.Flags()), {"--export-onnx", "/dev/null"}));
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_NE(ReadText(o.model), "the previous model");
  EXPECT_TRUE(Exists(o.preds) && Exists(o.bundle) && Exists(o.trace));
}

// A learning rate that overflows the parameters in the first update, whose
// loss (computed before the update) is finite: the parameter check names the
// step and the parameter.
TEST_F(Reliability, NonFiniteParameterStopsTheRunNamingStepAndParameter) {
  std::string model = tmp_.file("linear_lr.pb");
  EditModel("models/linear.pb", model, [](gcc_graph *g) {
    g->training.opt.lr = 1e38f; // with the decay, the first update overflows
    g->training.opt.weight_decay = 3e38f;
  });
  Outputs o(tmp_);
  Result r = RunBin("cli/gcc-train", Cat({model, "--max-steps", "3", "--quiet", "--device", "cpu"},
                                         {"--output", o.model, "--profile", o.trace}));
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(Has(r.err, "parameter 'fc.weight' is non-finite (")) << r;
  EXPECT_TRUE(Has(r.err, "after optimizer step 1 ")) << r;
  o.ExpectUntouched();
}

TEST_F(Reliability, DetectAnomalyNamesTheFirstNodeProducingANonFiniteValue) {
  Outputs o(tmp_);
  Result r = RunBin("cli/gcc-train",
                    Cat({Runfile("models/mnist_mlp.pb"), "--data", data_, "--lr", "1e6",
                         "--max-steps", "3", "--quiet", "--device", "cpu", "--detect-anomaly"},
                        o.Flags()));
  EXPECT_EQ(r.exit_code, 1) << r;
  // the forward GEMM of the second layer overflows first, in step 3
  EXPECT_TRUE(Has(r.err, "--detect-anomaly: node 'fc2' (Gemm) produced a non-finite value in "
                         "output 'fc2.out'"))
      << r;
  EXPECT_TRUE(Has(r.err, "in training step 3")) << r;
  o.ExpectUntouched();
  // the parameter overflow of the linear model: the SGD node that made it
  std::string model = tmp_.file("linear_lr.pb");
  EditModel("models/linear.pb", model, [](gcc_graph *g) {
    g->training.opt.lr = 1e38f; // with the decay, the first update overflows
    g->training.opt.weight_decay = 3e38f;
  });
  r = RunBin("cli/gcc-train",
             {model, "--max-steps", "3", "--no-output", "--device", "cpu", "--detect-anomaly"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(Has(r.err, "(SGD) produced a non-finite value in parameter 'fc.")) << r;
  EXPECT_TRUE(Has(r.err, "in training step 1")) << r;
  // a healthy run passes the checks
  r = RunBin("cli/gcc-train", {Runfile("models/linear.pb"), "--max-steps", "20", "--no-output",
                               "--device", "cpu", "--detect-anomaly", "--quiet"});
  EXPECT_EQ(r.exit_code, 0) << r;
}

// ---- 3. outputs never destroy what their path names -----------------------------------

mode_t ModeOf(const std::string &p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 ? st.st_mode : 0;
}

bool IsLink(const std::string &p) {
  struct stat st;
  return lstat(p.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

// A model written through a symbolic link replaces the link's target; the
// link stays. Before: the link became a regular file, the target untouched.
TEST_F(Reliability, OutputThroughASymlinkReplacesItsTarget) {
  ASSERT_EQ(mkdir(tmp_.file("real").c_str(), 0755), 0);
  std::string target = tmp_.file("real/model.pb"), link = tmp_.file("link.pb");
  ASSERT_TRUE(WriteText(target, "old"));
  ASSERT_EQ(symlink("real/model.pb", link.c_str()), 0); // relative to the link's directory
  Result r = RunBin("cli/gcc-train", {Runfile("models/linear.pb"), "--max-steps", "2", "--quiet",
                                      "--device", "cpu", "--output", link});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(IsLink(link));
  gcc_graph *g = nullptr;
  gcc_diag d = {};
  EXPECT_EQ(gcc_model_load(target.c_str(), &g, &d), GCC_OK) << d.msg;
  gcc_graph_free(g);
  EXPECT_EQ(gcc_test::ListDir(tmp_.file("real")), std::vector<std::string>{"model.pb"});
}

// An existing file keeps its mode (0600 stays 0600; before: 0644); a new
// file follows the umask (077: 0600; before: 0644 whatever the umask).
TEST_F(Reliability, OutputKeepsTheModeAndANewFileFollowsTheUmask) {
  std::string kept = tmp_.file("kept.pb"), fresh = tmp_.file("fresh.pb");
  ASSERT_TRUE(WriteText(kept, "old"));
  ASSERT_EQ(chmod(kept.c_str(), 0600), 0);
  Result r = RunBin("cli/gcc-train", {Runfile("models/linear.pb"), "--max-steps", "1", "--quiet",
                                      "--device", "cpu", "--output", kept});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(ModeOf(kept) & 07777, 0600u);
  EXPECT_NE(ReadText(kept), "old");
  mode_t old_mask = umask(077);
  r = RunBin("cli/gcc-train", {Runfile("models/linear.pb"), "--max-steps", "1", "--quiet",
                               "--device", "cpu", "--output", fresh});
  umask(old_mask);
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(ModeOf(fresh) & 07777, 0600u);
}

// A FIFO (like a character device such as /dev/null) is written in place,
// never replaced by a regular file. Before: renamed over, the reader got
// nothing and the FIFO was gone.
TEST_F(Reliability, OutputToAFifoWritesIntoIt) {
  std::string fifo = tmp_.file("model.fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  int rd = open(fifo.c_str(), O_RDONLY | O_NONBLOCK); // a reader, so that writers can open
  ASSERT_GE(rd, 0);
  Result r = RunBin("cli/gcc-train", {Runfile("models/linear.pb"), "--max-steps", "1", "--quiet",
                                      "--device", "cpu", "--output", fifo});
  EXPECT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(S_ISFIFO(ModeOf(fifo)));
  std::string got;
  char buf[65536];
  ssize_t n;
  while ((n = read(rd, buf, sizeof buf)) > 0)
    got.append(buf, static_cast<size_t>(n));
  close(rd);
  gcc_graph *g = nullptr;
  gcc_diag d = {};
  EXPECT_EQ(
      gcc_model_parse(reinterpret_cast<const uint8_t *>(got.data()), got.size(), "fifo", &g, &d),
      GCC_OK)
      << d.msg << " (" << got.size() << " bytes read from the FIFO)";
  gcc_graph_free(g);
  EXPECT_EQ(gcc_test::ListDir(tmp_.path()), std::vector<std::string>{"model.fifo"});
}

// Colliding paths are refused at start (exit 2), before any work.
TEST_F(Reliability, CollidingPathsAreRefusedAtStart) {
  std::string model = tmp_.file("model.pb");
  ASSERT_TRUE(WriteText(model, ReadText(Runfile("models/mnist_mlp.pb"))));
  ASSERT_EQ(mkdir(tmp_.file("sub").c_str(), 0755), 0);
  const std::vector<std::vector<std::string>> cases = {
      {"--output", tmp_.file("x"), "--predictions", tmp_.file("x")},
      {"--output", tmp_.file("sub/../x"), "--export", tmp_.file("./x")},
      {"--no-output", "--export", model},
      {"--no-output", "--predictions", tmp_.file("sub/../model.pb")},
      {"--output", tmp_.file("t.json"), "--profile", tmp_.file("t.json")},
  };
  for (const auto &flags : cases) {
    Result r = RunBin("cli/gcc-train",
                      Cat({model, "--data", data_, "--max-steps", "50", "--device", "cpu"}, flags));
    EXPECT_EQ(r.exit_code, 2) << flags[0] << " " << flags[1] << "\n" << r;
    EXPECT_TRUE(Has(r.err, "name the same file") || Has(r.err, "never overwrites an input")) << r;
    EXPECT_FALSE(Has(r.out, "on cpu")) << r; // nothing ran
  }
  EXPECT_EQ(gcc_test::ListDir(tmp_.path()), (std::vector<std::string>{"model.pb", "sub"}));
  EXPECT_EQ(ReadText(model), ReadText(Runfile("models/mnist_mlp.pb")));
  // gcc-run: the output may not be the bundle or an input
  std::string bundle = tmp_.file("b.gccx");
  ASSERT_TRUE(WriteText(bundle, "not read: refused before"));
  for (const auto &flags : std::vector<std::vector<std::string>>{
           {"--output", bundle}, {"--output", data_ + "/t10k-images-idx3-ubyte.gz"}}) {
    Result r = RunBin("cli/gcc-run",
                      Cat({bundle, "--input", data_ + "/t10k-images-idx3-ubyte.gz"}, flags));
    EXPECT_EQ(r.exit_code, 2) << r;
    EXPECT_TRUE(Has(r.err, "never overwrites an input")) << r;
  }
  EXPECT_EQ(ReadText(bundle), "not read: refused before");
}

// ---- 4. bad output paths fail before the work ------------------------------------------

TEST_F(Reliability, BadOutputPathsFailBeforeAnyWork) {
  ASSERT_TRUE(WriteText(tmp_.file("regular"), "a file"));
  ASSERT_EQ(mkdir(tmp_.file("dir").c_str(), 0755), 0);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--output", tmp_.file("nonexistent/dir/x.pb")},
      {"--output", tmp_.file("regular/x.pb")},
      {"--output", tmp_.file("dir")},
      {"--predictions", tmp_.file("nonexistent/p.csv")},
      {"--export", tmp_.file("regular/b.gccx")},
      {"--profile", tmp_.file("dir")},
  };
  std::string good = tmp_.file("good.pb");
  for (const auto &b : bad) {
    std::vector<std::string> args = {Runfile("models/mnist_mlp.pb"),
                                     "--data",
                                     data_,
                                     "--max-steps",
                                     "100",
                                     "--device",
                                     "cpu",
                                     b.first,
                                     b.second};
    if (b.first != "--output")
      args.insert(args.end(), {"--output", good});
    Result r = RunBin("cli/gcc-train", args);
    EXPECT_EQ(r.exit_code, 1) << r;
    EXPECT_TRUE(Has(r.err, b.first + " " + b.second)) << r;
    EXPECT_FALSE(Has(r.out, "on cpu")) << r; // failed before the model and data were read
    EXPECT_FALSE(Exists(good)) << "an output was written by a run that failed";
  }
  EXPECT_EQ(gcc_test::ListDir(tmp_.path()), (std::vector<std::string>{"dir", "regular"}));
  Result r =
      RunBin("cli/gcc-run", {tmp_.file("regular"), "--input", data_ + "/t10k-images-idx3-ubyte.gz",
                             "--output", tmp_.file("nonexistent/p.csv")});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(Has(r.err, "--output " + tmp_.file("nonexistent/p.csv"))) << r;
}

// ---- 6. special and huge inputs ----------------------------------------------------------

// A FIFO as the model, the bundle, --input or a data file is refused at once
// (before: blocked forever); /dev/zero as a bundle or --input is refused
// (before: read without end).
TEST_F(Reliability, FifosAndDevicesAsInputsAreRefused) {
  std::string fifo = tmp_.file("in.fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  const double kSeconds = 30; // a blocked reader times out here
  Result r = RunBin("cli/gcc-train", {fifo, "--no-output", "--device", "cpu"}, kSeconds);
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(Has(r.err, fifo + ": not a regular file")) << r;
  for (const std::string &bundle : {fifo, std::string("/dev/zero")}) {
    r = RunBin("cli/gcc-run", {bundle, "--input", data_ + "/t10k-images-idx3-ubyte.gz"}, kSeconds);
    EXPECT_EQ(r.exit_code, 1) << r;
    EXPECT_TRUE(Has(r.err, bundle + ": not a regular file")) << r;
  }
  // a real bundle, then FIFO and /dev/zero as --input
  std::string bundle = tmp_.file("b.gccx");
  r = RunBin("cli/gcc-train", {Runfile("models/mnist_mlp.pb"), "--data", data_, "--epochs", "0",
                               "--no-output", "--quiet", "--device", "cpu", "--export", bundle});
  ASSERT_EQ(r.exit_code, 0) << r;
  for (const std::string &input : {fifo, std::string("/dev/zero")}) {
    r = RunBin("cli/gcc-run", {bundle, "--input", input, "--device", "cpu"}, kSeconds);
    EXPECT_EQ(r.exit_code, 1) << r;
    EXPECT_TRUE(Has(r.err, input + ": not a regular file")) << r;
  }
  // a FIFO among the MNIST files
  TempDir data("gcc_fifo_data");
  for (const char *f :
       {"train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    ASSERT_TRUE(WriteText(data.file(f), ReadText(data_ + "/" + f)));
  ASSERT_EQ(mkfifo(data.file("train-images-idx3-ubyte.gz").c_str(), 0644), 0);
  r = RunBin("cli/gcc-train",
             {Runfile("models/mnist_mlp.pb"), "--data", data.path(), "--max-steps", "1",
              "--no-output", "--device", "cpu"},
             kSeconds);
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(Has(r.err, "train-images-idx3-ubyte.gz: not a regular file")) << r;
}

// A sparse model or bundle over the size limit is refused by its size, before
// it is read (before: a 2 GB file was read whole; a 5 GB one ran out of
// memory and exited 3).
TEST_F(Reliability, HugeFilesAreRefusedByTheirSize) {
  std::string model = tmp_.file("huge.pb"), bundle = tmp_.file("huge.gccx");
  for (const std::string &p : {model, bundle}) {
    int fd = open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, (off_t{1} << 30) + 1), 0); // sparse: no disk used
    close(fd);
  }
  Result r = RunBin("cli/gcc-train", {model, "--no-output", "--device", "cpu"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(Has(r.err, "1073741825 bytes, more than the 1073741824 this reader takes")) << r;
  r = RunBin("cli/gcc-run", {bundle, "--input", data_ + "/t10k-images-idx3-ubyte.gz"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(Has(r.err, "1073741825 bytes, more than the 1073741824 this reader takes")) << r;
}

// ---- 7. shape and range checks ---------------------------------------------------------

// An IDX file of unsigned bytes: magic 0x0000080N, then the big-endian dims.
std::string Idx(const std::vector<uint32_t> &dims, const std::string &bytes) {
  std::string s = {0, 0, 8, static_cast<char>(dims.size())};
  for (uint32_t v : dims)
    for (int k = 3; k >= 0; k--)
      s.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
  return s + bytes;
}

// 14x56 images have MNIST's 784 pixels; before, they trained the 28x28 model.
TEST_F(Reliability, ImagesOfAnotherHeightAndWidthAreRefused) {
  for (const auto &hw : {std::make_pair(14u, 56u), std::make_pair(784u, 1u)}) {
    TempDir data("gcc_idx");
    const uint32_t n = 8, pixels = hw.first * hw.second;
    std::string images(n * pixels, '\x40'), labels;
    for (uint32_t i = 0; i < n; i++)
      labels.push_back(static_cast<char>(i % 10));
    for (const char *set : {"train", "t10k"}) {
      ASSERT_TRUE(WriteText(data.file(std::string(set) + "-images-idx3-ubyte"),
                            Idx({n, hw.first, hw.second}, images)));
      ASSERT_TRUE(WriteText(data.file(std::string(set) + "-labels-idx1-ubyte"), Idx({n}, labels)));
    }
    Result r = RunBin("cli/gcc-train", {Runfile("models/mnist_mlp.pb"), "--data", data.path(),
                                        "--max-steps", "1", "--no-output", "--device", "cpu"});
    EXPECT_EQ(r.exit_code, 3) << r;
    EXPECT_TRUE(Has(r.err, "takes 1x28x28 (channels x height x width) images, but the MNIST "
                           "training set's are 1x" +
                               std::to_string(hw.first) + "x" + std::to_string(hw.second)))
        << r;
  }
}

// gcc-run --labels: a label outside the bundle's classes (255 of 10) is
// refused as gcc-train refuses it; before, it was counted as a wrong answer.
TEST_F(Reliability, GccRunRefusesALabelOutsideTheClasses) {
  std::string bundle = tmp_.file("b.gccx");
  Result r =
      RunBin("cli/gcc-train", {Runfile("models/mnist_mlp.pb"), "--data", data_, "--epochs", "0",
                               "--no-output", "--quiet", "--device", "cpu", "--export", bundle});
  ASSERT_EQ(r.exit_code, 0) << r;
  const uint32_t n = 5;
  std::string images(n * 784, '\x20');
  ASSERT_TRUE(WriteText(tmp_.file("x.idx"), Idx({n, 28, 28}, images)));
  ASSERT_TRUE(WriteText(tmp_.file("ok.idx"), Idx({n}, std::string("\x00\x01\x02\x03\x09", 5))));
  ASSERT_TRUE(WriteText(tmp_.file("bad.idx"), Idx({n}, std::string("\x00\x01\xff\x03\x09", 5))));
  r = RunBin("cli/gcc-run", {bundle, "--input", tmp_.file("x.idx"), "--labels", tmp_.file("ok.idx"),
                             "--device", "cpu", "--quiet"});
  EXPECT_EQ(r.exit_code, 0) << r;
  r = RunBin("cli/gcc-run", {bundle, "--input", tmp_.file("x.idx"), "--labels",
                             tmp_.file("bad.idx"), "--device", "cpu", "--quiet"});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(Has(r.err, "label 255 of sample 2 is not a class of the bundle (0 to 9)")) << r;
}

// Model files: attributes and hyperparameters out of range, duplicate names.
TEST_F(Reliability, LoaderRefusesOutOfRangeAttributesAndHyperparameters) {
  struct Case {
    const char *what;
    std::function<void(gcc_graph *)> edit;
    const char *message;
  };
  auto gemm_attr = [](const char *name, int64_t v) {
    return [=](gcc_graph *g) {
      for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == GCC_OP_GEMM) {
          gcc_node_set_int(g, i, name, v);
          return;
        }
    };
  };
  const std::vector<Case> cases = {
      {"transB 7", gemm_attr("transB", 7), "attribute 'transB' is 7; it must be 0 or 1"},
      {"transA -1", gemm_attr("transA", -1), "attribute 'transA' is -1; it must be 0 or 1"},
      {"lr inf", [](gcc_graph *g) { g->training.opt.lr = INFINITY; },
       "training.optimizer.sgd.lr is inf: it must be a finite number >= 0"},
      {"momentum NaN", [](gcc_graph *g) { g->training.opt.momentum = NAN; },
       "training.optimizer.sgd.momentum is nan: it must be a finite number >= 0"},
      {"weight_decay -1", [](gcc_graph *g) { g->training.opt.weight_decay = -1; },
       "training.optimizer.sgd.weight_decay is -1"},
      {"duplicate node names", [](gcc_graph *g) { SetField(&g->nodes[1].name, g->nodes[0].name); },
       "two nodes are named"},
  };
  for (const Case &c : cases) {
    std::string path = tmp_.file("bad.pb");
    EditModel("models/mnist_mlp.pb", path, c.edit);
    gcc_graph *g = nullptr;
    gcc_diag d = {};
    EXPECT_EQ(gcc_model_load(path.c_str(), &g, &d), GCC_ERR_INVALID_GRAPH) << c.what;
    EXPECT_TRUE(Has(d.msg, c.message)) << c.what << ": " << d.msg;
    gcc_graph_free(g);
  }
}

// TrainingSpec.seed is a uint64: every value can be given on the command line.
TEST_F(Reliability, SeedTakesTheWholeUint64Range) {
  for (const char *seed : {"9223372036854775808", "18446744073709551615"}) {
    std::string out = tmp_.file("seeded.pb");
    Result r = RunBin("cli/gcc-train", {Runfile("models/linear.pb"), "--seed", seed, "--max-steps",
                                        "1", "--quiet", "--device", "cpu", "--output", out});
    EXPECT_EQ(r.exit_code, 0) << r;
    gcc_graph *g = nullptr;
    gcc_diag d = {};
    ASSERT_EQ(gcc_model_load(out.c_str(), &g, &d), GCC_OK) << d.msg;
    EXPECT_EQ(g->training.seed, strtoull(seed, nullptr, 10)); // the recipe records it
    gcc_graph_free(g);
  }
  for (const char *seed : {"18446744073709551616", "-1", "1x"}) {
    Result r = RunBin("cli/gcc-train", {Runfile("models/linear.pb"), "--seed", seed, "--max-steps",
                                        "1", "--no-output"});
    EXPECT_EQ(r.exit_code, 2) << r;
    EXPECT_TRUE(Has(r.err, "--seed '" + std::string(seed) + "'")) << r;
  }
}

// ---- 8. a graph of 0 nodes (UBSan: memcpy(NULL, ..., 0) in the toposort) ----------------

TEST(ReliabilityGraph, ToposortOfAGraphWithoutNodes) {
  gcc_graph *g = gcc_graph_new("empty", "test");
  ASSERT_NE(g, nullptr);
  gcc_diag d = {};
  EXPECT_EQ(gcc_graph_toposort(g, &d), GCC_OK) << d.msg;
  gcc_graph *copy = nullptr;
  EXPECT_EQ(gcc_graph_clone(g, &copy, &d), GCC_OK) << d.msg;
  gcc_graph_free(copy);
  gcc_graph_free(g);
}

// ---- 5. signals and limits --------------------------------------------------------------

// SIGTERM is handled as SIGINT: stop after the batch, say so, write the
// trace, no model; exit 143. Before: killed, exit 143 without a word or trace.
TEST_F(Reliability, SigtermStopsTheRunLikeCtrlC) {
  std::string model = tmp_.file("m.pb"), trace = tmp_.file("t.json");
  Result r = RunBin("cli/gcc-train",
                    {Runfile("models/mnist_mlp.pb"), "--data", data_, "--device", "cpu",
                     "--log-every", "5", "--output", model, "--profile", trace},
                    120, "[1,    10]", [](pid_t pid) { kill(pid, SIGTERM); });
  EXPECT_EQ(r.exit_code, 143) << r;
  EXPECT_TRUE(Has(r.err, "interrupted after") && Has(r.err, "SIGTERM")) << r;
  EXPECT_FALSE(Exists(model));
  EXPECT_TRUE(Has(ReadText(trace), "traceEvents")) << "no trace after SIGTERM";
}

// A file-size limit: a reported EFBIG, the old file kept, no temporary left.
// Before: killed by SIGXFSZ with model.pb.tmp.* left behind.
TEST_F(Reliability, FileSizeLimitIsAnErrorThatLeavesNothingBehind) {
  std::string model = tmp_.file("m.pb");
  ASSERT_TRUE(WriteText(model, "the previous model"));
  g_child_setup = [] {
    struct rlimit rl = {100000, 100000}; // the MLP is 2.1 MB
    setrlimit(RLIMIT_FSIZE, &rl);
  };
  Result r = RunBin("cli/gcc-train", {Runfile("models/mnist_mlp.pb"), "--data", data_, "--epochs",
                                      "0", "--device", "cpu", "--quiet", "--output", model});
  g_child_setup = nullptr;
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(Has(r.err, strerror(EFBIG))) << r;
  EXPECT_EQ(ReadText(model), "the previous model");
  EXPECT_EQ(gcc_test::ListDir(tmp_.path()), std::vector<std::string>{"m.pb"});
}

// Temporaries of a killed run (TARGET.tmp.PID.XXXXXX of a dead PID) are
// removed by the next run writing TARGET; a live process's are not.
TEST_F(Reliability, StaleTemporariesOfDeadRunsAreRemoved) {
  pid_t dead = fork();
  if (dead == 0)
    _exit(0);
  ASSERT_GT(dead, 0);
  waitpid(dead, nullptr, 0);
  std::string stale = tmp_.file("m.pb.tmp." + std::to_string(dead) + ".abc123");
  std::string live = tmp_.file("m.pb.tmp." + std::to_string(getpid()) + ".abc123");
  ASSERT_TRUE(WriteText(stale, "left by kill -9"));
  ASSERT_TRUE(WriteText(live, "being written"));
  Result r = RunBin("cli/gcc-train", {Runfile("models/linear.pb"), "--max-steps", "1", "--quiet",
                                      "--device", "cpu", "--output", tmp_.file("m.pb")});
  EXPECT_EQ(r.exit_code, 0) << r;
  EXPECT_FALSE(Exists(stale));
  EXPECT_TRUE(Exists(live));
}

// ---- checkpoints and resume --------------------------------------------------------------

// The parameters of a saved model, by name.
std::map<std::string, std::vector<float>> Params(const std::string &path) {
  std::map<std::string, std::vector<float>> m;
  gcc_graph *g = nullptr;
  gcc_diag d = {};
  if (gcc_model_load(path.c_str(), &g, &d) != GCC_OK) {
    ADD_FAILURE() << d.msg;
    return m;
  }
  for (int v = 0; v < g->n_values; v++) {
    const gcc_value &val = g->values[v];
    if (val.kind != GCC_VALUE_PARAM)
      continue;
    const float *x = static_cast<const float *>(val.data);
    m[val.name].assign(x, x + gcc_shape_numel(&val.shape, nullptr));
  }
  gcc_graph_free(g);
  return m;
}

// Bitwise equal (memcmp), with the first differing parameter named.
void ExpectSameParams(const std::string &a, const std::string &b) {
  auto pa = Params(a), pb = Params(b);
  ASSERT_EQ(pa.size(), pb.size());
  ASSERT_FALSE(pa.empty());
  for (const auto &kv : pa) {
    const auto &y = pb[kv.first];
    ASSERT_EQ(kv.second.size(), y.size()) << kv.first;
    EXPECT_EQ(memcmp(kv.second.data(), y.data(), y.size() * sizeof(float)), 0)
        << "parameter " << kv.first << " differs";
  }
}

// The linear model (inline data, 16 batches an epoch): stopped at step 23
// with checkpoints every 5, resumed from step 20 (epoch 2, batch 4), it ends
// bitwise where the uninterrupted run does.
TEST_F(Reliability, ResumeIsBitwiseTheUninterruptedRunAcrossEpochs) {
  std::vector<std::string> base = {Runfile("models/linear.pb"),
                                   "--epochs",
                                   "3",
                                   "--seed",
                                   "7",
                                   "--device",
                                   "cpu",
                                   "--threads",
                                   "1",
                                   "--quiet"};
  std::string ck = tmp_.file("ck");
  Result r = RunBin("cli/gcc-train", Cat(base, {"--output", tmp_.file("u.pb")}));
  ASSERT_EQ(r.exit_code, 0) << r;
  r = RunBin("cli/gcc-train", Cat(base, {"--checkpoint-dir", ck, "--checkpoint-every", "5",
                                         "--max-steps", "23", "--no-output"}));
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_EQ(gcc_test::ListDir(ck),
            (std::vector<std::string>{"ckpt-000000000010.gcck", "ckpt-000000000015.gcck",
                                      "ckpt-000000000020.gcck"})); // the newest 3
  r = RunBin("cli/gcc-train", Cat(base, {"--resume", ck, "--output", tmp_.file("r.pb")}));
  ASSERT_EQ(r.exit_code, 0) << r;
  ExpectSameParams(tmp_.file("u.pb"), tmp_.file("r.pb"));
  // and the whole saved model, recipe included, byte for byte
  EXPECT_EQ(ReadText(tmp_.file("u.pb")), ReadText(tmp_.file("r.pb")));
}

// The same under fp16 dynamic loss scaling (growth every 4 good steps, so
// the scale moves and skips recur): the checkpoint carries the scale, the
// growth tracker and the applied steps, and the resumed run ends bitwise
// where the uninterrupted one does, with the same summary; a resume with
// other loss-scaling settings is refused.
TEST_F(Reliability, ResumeIsBitwiseTheUninterruptedRunUnderFp16LossScaling) {
  std::vector<std::string> base = {Runfile("models/linear.pb"),
                                   "--epochs",
                                   "3",
                                   "--seed",
                                   "7",
                                   "--device",
                                   "cpu",
                                   "--threads",
                                   "1",
                                   "--precision",
                                   "fp16",
                                   "--loss-scale-growth-interval",
                                   "4"};
  std::string ck = tmp_.file("ck");
  Result u = RunBin("cli/gcc-train", Cat(base, {"--output", tmp_.file("u.pb")}));
  ASSERT_EQ(u.exit_code, 0) << u;
  Result r = RunBin("cli/gcc-train", Cat(base, {"--checkpoint-dir", ck, "--checkpoint-every", "5",
                                                "--max-steps", "23", "--no-output"}));
  ASSERT_EQ(r.exit_code, 0) << r;
  Result other = RunBin("cli/gcc-train", {Runfile("models/linear.pb"), "--epochs", "3", "--seed",
                                          "7", "--device", "cpu", "--threads", "1", "--precision",
                                          "fp16", "--resume", ck, "--no-output"});
  EXPECT_EQ(other.exit_code, 2) << other;
  EXPECT_TRUE(Has(other.err, "growth_interval is 4, this run's is 2000")) << other;
  r = RunBin("cli/gcc-train", Cat(base, {"--resume", ck, "--output", tmp_.file("r.pb")}));
  ASSERT_EQ(r.exit_code, 0) << r;
  ExpectSameParams(tmp_.file("u.pb"), tmp_.file("r.pb"));
  EXPECT_EQ(ReadText(tmp_.file("u.pb")), ReadText(tmp_.file("r.pb")));
  auto summary = [](const std::string &out) {
    size_t at = out.find("fp16 loss scaling: ");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  EXPECT_FALSE(summary(u.out).empty()) << u;
  EXPECT_EQ(summary(u.out), summary(r.out)) << u << r;
}

// The MNIST MLP (SGD momentum 0.5: the momentum buffers are state), resumed
// mid-epoch from the data loader's order, two threads as in the run before.
TEST_F(Reliability, ResumeIsBitwiseTheUninterruptedRunForTheMlp) {
  std::vector<std::string> base = {Runfile("models/mnist_mlp.pb"),
                                   "--data",
                                   data_,
                                   "--device",
                                   "cpu",
                                   "--threads",
                                   "2",
                                   "--quiet",
                                   "--max-steps",
                                   "60"};
  std::string ck = tmp_.file("ck");
  Result r = RunBin("cli/gcc-train", Cat(base, {"--output", tmp_.file("u.pb")}));
  ASSERT_EQ(r.exit_code, 0) << r;
  r = RunBin("cli/gcc-train", Cat(base, {"--checkpoint-dir", ck, "--checkpoint-every", "10",
                                         "--max-steps", "37", "--no-output"}));
  ASSERT_EQ(r.exit_code, 0) << r;
  r = RunBin("cli/gcc-train", Cat(base, {"--resume", ck, "--output", tmp_.file("r.pb")}));
  ASSERT_EQ(r.exit_code, 0) << r;
  ExpectSameParams(tmp_.file("u.pb"), tmp_.file("r.pb"));
  // the control: a run one step shorter ends elsewhere, so the comparison
  // above can fail
  r = RunBin("cli/gcc-train", Cat(base, {"--max-steps", "59", "--output", tmp_.file("v.pb")}));
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_NE(ReadText(tmp_.file("u.pb")), ReadText(tmp_.file("v.pb")));
}

TEST_F(Reliability, ResumeRefusesAnotherRecipeOrModelAndSkipsACorruptCheckpoint) {
  std::vector<std::string> base = {Runfile("models/linear.pb"), "--device", "cpu", "--quiet"};
  std::string ck = tmp_.file("ck");
  Result r = RunBin("cli/gcc-train", Cat(base, {"--checkpoint-dir", ck, "--checkpoint-every", "4",
                                                "--max-steps", "12", "--no-output"}));
  ASSERT_EQ(r.exit_code, 0) << r;
  r = RunBin("cli/gcc-train", Cat(base, {"--resume", ck, "--lr", "0.5", "--no-output"}));
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(Has(r.err, "the checkpoint's optimizer lr is 0.00999999978, this run's is 0.5") ||
              Has(r.err, "optimizer lr is"))
      << r;
  r = RunBin("cli/gcc-train", Cat(base, {"--resume", ck, "--batch-size", "8", "--no-output"}));
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(Has(r.err, "the checkpoint's batch size is 16, this run's is 8")) << r;
  r = RunBin("cli/gcc-train", {Runfile("models/mnist_mlp.pb"), "--data", data_, "--resume", ck,
                               "--no-output", "--device", "cpu"});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(Has(r.err, "another model") || Has(r.err, "nodes")) << r;
  // a flipped byte in the newest: the checksum refuses it, the one before is used
  std::string newest = ck + "/ckpt-000000000012.gcck";
  std::string bytes = ReadText(newest);
  ASSERT_GT(bytes.size(), 100u);
  bytes[bytes.size() / 2] ^= 0x10;
  ASSERT_TRUE(WriteText(newest, bytes));
  r = RunBin("cli/gcc-train", Cat(base, {"--resume", ck, "--max-steps", "12", "--no-output"}));
  EXPECT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(Has(r.err, "skipping checkpoint " + newest + ": SHA-256 mismatch")) << r;
  r = RunBin("cli/gcc-train", Cat(base, {"--resume", newest, "--no-output"}));
  EXPECT_EQ(r.exit_code, 3) << r; // corrupt
}

// A checkpoint's header edited and its SHA-256 recomputed (as a hostile file
// would be): every position field is range-checked against the model's data
// (the linear model: 256 rows at batch 16, 16 batches an epoch) and a bad one
// is refused as corrupt (exit 3) naming the field, before any step. Before
// the checks, batch -1 crashed on .npy data and the others "resumed",
// trained nothing and wrote the model (exit 0).
void PutU64(std::string *b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; i++)
    (*b)[at + i] = static_cast<char>(v >> (8 * i));
}

std::string Resealed(std::string b) { // the trailer: SHA-256 of the rest
  unsigned char sum[32];
  unsigned len = 0;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  bool ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1 &&
            EVP_DigestUpdate(ctx, b.data(), b.size() - 32) == 1 &&
            EVP_DigestFinal_ex(ctx, sum, &len) == 1 && len == 32;
  EVP_MD_CTX_free(ctx);
  EXPECT_TRUE(ok);
  b.replace(b.size() - 32, 32, reinterpret_cast<const char *>(sum), 32);
  return b;
}

TEST_F(Reliability, ResumeRefusesACraftedCheckpointPosition) {
  std::vector<std::string> base = {
      Runfile("models/linear.pb"), "--device", "cpu", "--quiet", "--epochs", "2"};
  std::string ck = tmp_.file("ck");
  Result r = RunBin("cli/gcc-train", Cat(base, {"--checkpoint-dir", ck, "--checkpoint-every", "4",
                                                "--max-steps", "12", "--no-output"}));
  ASSERT_EQ(r.exit_code, 0) << r;
  std::string good = ReadText(ck + "/ckpt-000000000012.gcck");
  ASSERT_GT(good.size(), 88u);
  // the control: the untouched file resumes (step 12 = epoch 0, batch 12)
  std::string file = tmp_.file("crafted.gcck");
  ASSERT_TRUE(WriteText(file, Resealed(good)));
  r = RunBin("cli/gcc-train", Cat(base, {"--resume", file, "--output", tmp_.file("ok.pb")}));
  EXPECT_EQ(r.exit_code, 0) << r;
  const int64_t kMax = INT64_MAX;
  struct Case {
    int64_t step, epoch, batch;
    int exit_code;
    const char *says;
  } cases[] = {
      {12, 0, -1, 3, "its batch field is -1 (must be >= 0)"},
      {12, 0, -3, 3, "its batch field is -3 (must be >= 0)"},
      {-5, 0, 12, 3, "its step field is -5 (must be >= 0)"},
      {12, -1, 12, 3, "its epoch field is -1 (must be >= 0)"},
      {16, 0, 16, 3, "its batch field is 16, but an epoch of this training set has 16 batches"},
      {1000, 0, 1000, 3, "its batch field is 1000, but an epoch"},
      {12, 1000000, 12, 3, "step 12 cannot be epoch 1000000, batch 12"},
      {kMax, 0, 12, 3, "its step field is 9223372036854775807, but epoch 0, batch 12"},
      {kMax, kMax / 16, 14, 3, "its step field is 9223372036854775807"},
      {13, 0, 12, 3,
       "its step field is 13, but epoch 0, batch 12 at 16 batches per epoch is "
       "step 12"},
      // consistent, but past this run's 2 epochs: a command-line mismatch
      {16000012, 1000000, 12, 2, "has finished 1000000 epochs, more than this run's 2"},
  };
  for (const Case &c : cases) {
    std::string b = good;
    PutU64(&b, 16, static_cast<uint64_t>(c.step));
    PutU64(&b, 24, static_cast<uint64_t>(c.epoch));
    PutU64(&b, 32, static_cast<uint64_t>(c.batch));
    ASSERT_TRUE(WriteText(file, Resealed(b)));
    std::string out = tmp_.file("out.pb");
    unlink(out.c_str());
    r = RunBin("cli/gcc-train", Cat(base, {"--resume", file, "--output", out}));
    EXPECT_EQ(r.exit_code, c.exit_code) << c.step << " " << c.epoch << " " << c.batch << r;
    EXPECT_TRUE(Has(r.err, c.says)) << r;
    EXPECT_TRUE(Has(r.err, file)) << "the file is named: " << r;
    EXPECT_FALSE(Exists(out)) << "a refused resume wrote " << out;
  }
  // a checkpoint FILE whose checksum fails is corrupt too (exit 3)
  std::string b = Resealed(good);
  b[b.size() / 2] ^= 0x10;
  ASSERT_TRUE(WriteText(file, b));
  r = RunBin("cli/gcc-train", Cat(base, {"--resume", file, "--no-output"}));
  EXPECT_EQ(r.exit_code, 3) << r;
  EXPECT_TRUE(Has(r.err, "SHA-256 mismatch (corrupt)")) << r;
}

// 1 if `dir` holds a checkpoint file.
bool HasCheckpoint(const std::string &dir) {
  for (const std::string &n : gcc_test::ListDir(dir))
    if (n.size() > 5 && n.compare(n.size() - 5, 5, ".gcck") == 0)
      return true;
  return false;
}

// Two runs sharing a --checkpoint-dir pruned each other's checkpoints
// without a word (issue 32): the folder is locked (flock) by the run that
// writes there, and a second writer is refused (exit 2) before any work.
// The test holds the lock as a running gcc-train would.
TEST_F(Reliability, ASecondWriterOfACheckpointFolderIsRefused) {
  std::string ck = tmp_.file("shared");
  ASSERT_EQ(mkdir(ck.c_str(), 0755), 0);
  std::vector<std::string> run = {Runfile("models/linear.pb"),
                                  "--device",
                                  "cpu",
                                  "--quiet",
                                  "--no-output",
                                  "--max-steps",
                                  "4",
                                  "--checkpoint-dir",
                                  ck,
                                  "--checkpoint-every",
                                  "2"};
  int fd = open(ck.c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);
  Result r = RunBin("cli/gcc-train", run);
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(Has(r.err, "--checkpoint-dir " + ck + ": another run writes checkpoints there")) << r;
  EXPECT_FALSE(HasCheckpoint(ck)) << "the second writer wrote";
  close(fd); // the first run ends: the folder is free again
  r = RunBin("cli/gcc-train", run);
  EXPECT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(HasCheckpoint(ck)) << r;
}

// kill -9 at 20 random moments, each run resuming from the newest complete
// checkpoint: the run then finishes bitwise where an uninterrupted one does.
TEST_F(Reliability, TwentyKillsThenResumeGivesTheUninterruptedResult) {
  // 160,000 steps of the linear model, about 2 s with a checkpoint every 50
  std::vector<std::string> base = {Runfile("models/linear.pb"),
                                   "--epochs",
                                   "10000",
                                   "--seed",
                                   "3",
                                   "--device",
                                   "cpu",
                                   "--threads",
                                   "1",
                                   "--log-every",
                                   "0"};
  Result r = RunBin("cli/gcc-train", Cat(base, {"--output", tmp_.file("u.pb")}));
  ASSERT_EQ(r.exit_code, 0) << r;
  std::string ck = tmp_.file("ck");
  std::vector<std::string> run = Cat(
      base, {"--checkpoint-dir", ck, "--checkpoint-every", "50", "--output", tmp_.file("k.pb")});
  unsigned seed = 12345;
  int killed = 0, resumed = 0;
  for (int k = 0; k < 20; k++) {
    resumed += HasCheckpoint(ck);
    // killed 0 to 100 ms after it said it starts training (its first line)
    unsigned delay = rand_r(&seed) % 100000;
    r = RunBin("cli/gcc-train", HasCheckpoint(ck) ? Cat(run, {"--resume", ck}) : run, 120,
               " threads\n", [delay](pid_t pid) {
                 usleep(delay);
                 kill(pid, SIGKILL);
               });
    killed += r.term_signal == SIGKILL;
    EXPECT_TRUE(r.term_signal == SIGKILL || r.exit_code == 0) << r;
  }
  EXPECT_GE(killed, 15) << "the runs finished before the kills: make them longer";
  EXPECT_GE(resumed, 10) << "the runs were killed before their first checkpoint";
  r = RunBin("cli/gcc-train", HasCheckpoint(ck) ? Cat(run, {"--resume", ck}) : run);
  ASSERT_EQ(r.exit_code, 0) << r;
  ExpectSameParams(tmp_.file("u.pb"), tmp_.file("k.pb"));
  for (const std::string &n : gcc_test::ListDir(ck))
    EXPECT_EQ(n.find(".tmp."), std::string::npos) << n << ": a temporary outlived its run";
  printf("20 runs, %d killed with SIGKILL before they finished, %d resumed from a checkpoint; "
         "the final resume is bitwise the uninterrupted run\n",
         killed, resumed);
}

// ---- determinism ---------------------------------------------------------------------------

// The same seed and thread count give a bitwise-identical trained model twice
// in a row (shuffling, initialization, GEMM and convolution order), for the
// MLP and the MNIST CNN. A different seed gives another model (the control).
TEST_F(Reliability, SameSeedAndThreadsGiveTheSameModelTwice) {
  for (const char *model : {"models/mnist_mlp.pb", "models/mnist_cnn.pb"}) {
    std::vector<std::string> base = {
        Runfile(model), "--data",      data_, "--device", "cpu", "--threads",         "2",
        "--quiet",      "--max-steps", "12",  "--seed",   "5",   "--eval-batch-size", "2000"};
    Result r = RunBin("cli/gcc-train", Cat(base, {"--output", tmp_.file("a.pb")}));
    ASSERT_EQ(r.exit_code, 0) << r;
    r = RunBin("cli/gcc-train", Cat(base, {"--output", tmp_.file("b.pb")}));
    ASSERT_EQ(r.exit_code, 0) << r;
    r = RunBin("cli/gcc-train", Cat(base, {"--seed", "6", "--output", tmp_.file("c.pb")}));
    ASSERT_EQ(r.exit_code, 0) << r;
    ExpectSameParams(tmp_.file("a.pb"), tmp_.file("b.pb"));
    EXPECT_EQ(ReadText(tmp_.file("a.pb")), ReadText(tmp_.file("b.pb"))) << model;
    EXPECT_NE(Params(tmp_.file("a.pb")), Params(tmp_.file("c.pb"))) << model;
  }
}

} // namespace
