// Tests of the --profile tracer (runtime/profile.h) and its hooks in the
// plan runner, the session, the data loader and the trainer: a few MNIST MLP
// steps are profiled and the Chrome trace is parsed back with jansson. The
// structure is checked (every executed node of the plan once per step, in
// plan order, inside its step, op events of a thread never overlapping,
// loader and wait events present), the per-op table is checked against sums
// over the trace, and the gcc-train CLI's --profile errors and atomic
// output. No timing assertions: durations are only checked to be >= 0.
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <jansson.h>

#include "graph/ops.h"
#include "models/models.h"
#include "datasets/dataloader.h"
#include "runtime/plan.h"
#include "runtime/profile.h"
#include "runtime/session.h"
#include "runtime/trainer.h"
#include "tests/subprocess.h"
#include "tests/testutil.h"

using namespace gcc_test; // tests/testutil.h

namespace {

// One "X" event of the trace, times in integer nanoseconds.
struct Ev {
  std::string name, cat, op, plan;
  int tid = -1;
  int64_t ts = 0, dur = 0, index = -1;
  double flops = 0;
};

int64_t Ns(json_t *v) {
  return static_cast<int64_t>(std::llround(json_number_value(v) * 1000));
}

// Parses the trace; on a structural error fails the test and returns false.
bool ParseTrace(const std::string &path, std::vector<Ev> *evs, std::map<int, std::string> *threads,
                json_int_t *dropped) {
  json_error_t err;
  json_t *root = json_load_file(path.c_str(), 0, &err);
  EXPECT_NE(root, nullptr) << path << ":" << err.line << ": " << err.text;
  if (root == nullptr)
    return false;
  json_t *arr = json_object_get(root, "traceEvents");
  EXPECT_TRUE(json_is_array(arr));
  json_t *other = json_object_get(root, "otherData");
  EXPECT_TRUE(json_is_object(other));
  *dropped = json_integer_value(json_object_get(other, "dropped_events"));
  size_t i;
  json_t *e;
  json_int_t n_x = 0;
  json_array_foreach(arr, i, e) {
    const char *ph = json_string_value(json_object_get(e, "ph"));
    EXPECT_NE(ph, nullptr);
    if (ph == nullptr)
      continue;
    EXPECT_TRUE(json_is_integer(json_object_get(e, "pid")));
    EXPECT_TRUE(json_is_integer(json_object_get(e, "tid")));
    int tid = static_cast<int>(json_integer_value(json_object_get(e, "tid")));
    json_t *args = json_object_get(e, "args");
    EXPECT_TRUE(json_is_object(args));
    if (strcmp(ph, "M") == 0) {
      if (strcmp(json_string_value(json_object_get(e, "name")), "thread_name") == 0)
        (*threads)[tid] = json_string_value(json_object_get(args, "name"));
      continue;
    }
    EXPECT_STREQ(ph, "X");
    n_x++;
    Ev ev;
    ev.name = json_string_value(json_object_get(e, "name"));
    ev.cat = json_string_value(json_object_get(e, "cat"));
    ev.tid = tid;
    EXPECT_TRUE(json_is_number(json_object_get(e, "ts")));
    EXPECT_TRUE(json_is_number(json_object_get(e, "dur")));
    ev.ts = Ns(json_object_get(e, "ts"));
    ev.dur = Ns(json_object_get(e, "dur"));
    if (json_t *op = json_object_get(args, "op"))
      ev.op = json_string_value(op);
    if (json_t *pl = json_object_get(args, "plan"))
      ev.plan = json_string_value(pl);
    if (json_t *f = json_object_get(args, "flops"))
      ev.flops = json_number_value(f);
    for (const char *k : {"step", "batch", "index"})
      if (json_t *x = json_object_get(args, k))
        ev.index = json_integer_value(x);
    if (ev.cat == "op" || ev.cat == "copy") {
      EXPECT_TRUE(json_is_array(json_object_get(args, "inputs"))) << ev.name;
      EXPECT_TRUE(json_is_array(json_object_get(args, "outputs"))) << ev.name;
      EXPECT_TRUE(json_is_integer(json_object_get(args, "bytes"))) << ev.name;
    }
    evs->push_back(ev);
  }
  EXPECT_EQ(json_integer_value(json_object_get(other, "events")), n_x);
  json_decref(root);
  return true;
}

// The names the plan runner gives the executed nodes of a plan, in order.
std::vector<std::string> PlanSteps(gcc_plan *p) {
  std::vector<std::string> names;
  const gcc_graph *g = gcc_plan_graph(p);
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_op_desc *op = gcc_op(g->nodes[i].op);
    if (op->flags & GCC_OPF_ALIAS)
      continue;
    names.push_back(std::string(g->nodes[i].name) + " (" + op->name + ")");
  }
  return names;
}

class ProfileTest : public ::testing::Test {
protected:
  void SetUp() override {
    data_ = Runfile("data/mnist");
    ASSERT_FALSE(data_.empty()) << "data/mnist not in the runfiles";
    gcc_diag d = {};
    ASSERT_EQ(gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &model_, &d), GCC_OK) << d.msg;
  }
  void TearDown() override { gcc_graph_free(model_); }

  gcc_session *NewSession() {
    gcc_session_options so = {};
    so.threads = 1;
    so.opt = model_->training.opt;
    gcc_session *s = nullptr;
    gcc_diag d = {};
    EXPECT_EQ(gcc_session_create(model_, &so, &s, &d), GCC_OK) << d.msg;
    return s;
  }

  // Trains `steps` steps of batch 64 (then evaluates the test set) with
  // the given profiler (or none).
  gcc_status Train(gcc_session *s, gcc_profiler *prof, int64_t steps, gcc_train_report *r) {
    gcc_train_config cfg = {};
    cfg.data_dir = data_.c_str();
    cfg.epochs = 1;
    cfg.batch_size = 64;
    cfg.seed = 7;
    cfg.max_steps = steps;
    cfg.eval_batch = 2500;
    cfg.quiet = 1;
    cfg.out = stderr;
    cfg.profiler = prof;
    gcc_diag d = {};
    gcc_status st = gcc_train_run(s, model_, &cfg, r, &d);
    EXPECT_EQ(st, GCC_OK) << d.msg;
    return st;
  }

  std::string data_;
  gcc_graph *model_ = nullptr;
  TempDir tmp_;
};

TEST_F(ProfileTest, TraceHasEveryNodeOfEveryStepInOrder) {
  const int64_t kSteps = 6;
  std::string path = tmp_.file("trace.json");
  gcc_diag d = {};
  gcc_profiler *prof = nullptr;
  ASSERT_EQ(gcc_profiler_create(path.c_str(), &prof, &d), GCC_OK) << d.msg;
  EXPECT_FALSE(Exists(path)) << "nothing is written before gcc_profiler_write";
  gcc_session *s = NewSession();
  ASSERT_NE(s, nullptr);
  gcc_train_report r;
  ASSERT_EQ(Train(s, prof, kSteps, &r), GCC_OK);
  ASSERT_EQ(r.steps, kSteps);
  ASSERT_EQ(gcc_profiler_write(prof, &d), GCC_OK) << d.msg;
  EXPECT_EQ(ListDir(tmp_.path()), std::vector<std::string>{"trace.json"})
      << "a temporary file was left behind";

  std::vector<Ev> evs;
  std::map<int, std::string> threads;
  json_int_t dropped = -1;
  ASSERT_TRUE(ParseTrace(path, &evs, &threads, &dropped));
  EXPECT_EQ(dropped, 0);
  int main_tid = -1, loader_tid = -1;
  for (auto &t : threads) {
    if (t.second == "main")
      main_tid = t.first;
    if (t.second == "data loader (train)")
      loader_tid = t.first;
  }
  ASSERT_GE(main_tid, 0);
  ASSERT_GE(loader_tid, 0);
  for (const Ev &e : evs) {
    EXPECT_GE(e.dur, 0) << e.name;
    EXPECT_GE(e.ts, 0) << e.name;
    EXPECT_TRUE(threads.count(e.tid)) << e.name << ": tid " << e.tid << " has no thread name";
  }

  gcc_plan *train = nullptr, *eval = nullptr;
  ASSERT_EQ(gcc_session_plan(s, GCC_MODE_TRAIN, 64, &train, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_plan(s, GCC_MODE_EVAL, 2500, &eval, &d), GCC_OK) << d.msg;
  const std::vector<std::string> want_train = PlanSteps(train), want_eval = PlanSteps(eval);
  ASSERT_GT(want_train.size(), want_eval.size());

  // op events of the main thread, in time order: never overlapping
  std::vector<Ev> ops;
  for (const Ev &e : evs)
    if ((e.cat == "op" || e.cat == "copy") && e.tid == main_tid)
      ops.push_back(e);
  std::sort(ops.begin(), ops.end(), [](const Ev &a, const Ev &b) { return a.ts < b.ts; });
  for (size_t i = 1; i < ops.size(); i++)
    EXPECT_LE(ops[i - 1].ts + ops[i - 1].dur, ops[i].ts)
        << ops[i - 1].name << " overlaps " << ops[i].name;
  for (const Ev &e : evs)
    EXPECT_TRUE(e.cat == "op" || e.cat == "copy" ? e.tid == main_tid : true)
        << e.name << " ran off the main thread";

  // every step and evaluation batch holds exactly its plan's nodes, in order
  // A node run by a library kernel names it: "fc1 [matmul (brg:avx512_core)
  // 64x512x784 B^T bias] (Gemm)"; the node itself is "fc1 (Gemm)".
  int library_named = 0;
  auto node_of = [&](std::string n) {
    size_t b = n.find(" ["), e = n.rfind("] (");
    if (b != std::string::npos && e != std::string::npos && e > b) {
      n.erase(b, e + 1 - b);
      library_named++;
    }
    return n;
  };
  auto ops_within = [&](const Ev &outer) {
    std::vector<std::string> names;
    for (const Ev &o : ops)
      if (o.ts >= outer.ts && o.ts + o.dur <= outer.ts + outer.dur)
        names.push_back(node_of(o.name));
    return names;
  };
  int steps = 0, eval_batches = 0;
  std::vector<int64_t> step_index;
  for (const Ev &e : evs) {
    if (e.cat == "step") {
      EXPECT_EQ(e.tid, main_tid);
      EXPECT_EQ(ops_within(e), want_train) << "step " << e.index;
      step_index.push_back(e.index);
      steps++;
    } else if (e.cat == "eval") {
      EXPECT_EQ(ops_within(e), want_eval) << "eval batch " << e.index;
      eval_batches++;
    }
  }
  EXPECT_EQ(steps, kSteps);
  EXPECT_EQ(eval_batches, 4); // 10000 test images / 2500
  EXPECT_GT(library_named, 0) << "the MLP's Gemm nodes run on oneDNN and say so";
  std::sort(step_index.begin(), step_index.end());
  for (int64_t i = 0; i < kSteps; i++)
    EXPECT_EQ(step_index[static_cast<size_t>(i)], i);
  // all op events belong to a step or an evaluation batch
  EXPECT_EQ(ops.size(), kSteps * want_train.size() + 4 * want_eval.size());

  // the loader thread assembled at least every batch trained on, in order,
  // one at a time; the trainer waited once per batch it took
  std::vector<Ev> fills;
  int waits_train = 0, waits_eval = 0, epochs = 0, evaluates = 0, compiles = 0;
  for (const Ev &e : evs) {
    if (e.cat == "loader" && e.tid == loader_tid)
      fills.push_back(e);
    if (e.cat == "wait") {
      EXPECT_EQ(e.tid, main_tid);
      (e.name == "wait for batch (train)" ? waits_train : waits_eval)++;
    }
    if (e.cat == "phase")
      (e.name == "epoch" ? epochs : evaluates)++;
    if (e.cat == "compile")
      compiles++;
  }
  ASSERT_GE(fills.size(), static_cast<size_t>(kSteps));
  for (size_t i = 0; i < fills.size(); i++) {
    EXPECT_EQ(fills[i].name, "batch assembly");
    EXPECT_EQ(fills[i].index, static_cast<int64_t>(i));
    if (i) {
      EXPECT_LE(fills[i - 1].ts + fills[i - 1].dur, fills[i].ts);
    }
  }
  EXPECT_EQ(waits_train, kSteps);
  EXPECT_EQ(waits_eval, 4);
  EXPECT_EQ(epochs, 1);
  EXPECT_EQ(evaluates, 1);
  EXPECT_EQ(compiles, 2); // train b64, eval b2500

  // the table's figures are sums over the trace
  gcc_prof_summary sum;
  ASSERT_EQ(gcc_profiler_summary(prof, &sum, &d), GCC_OK) << d.msg;
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>> by_op;
  std::map<std::pair<std::string, std::string>, double> flops;
  for (const Ev &e : ops) {
    std::string mode = e.plan.substr(0, e.plan.find(' '));
    auto &v = by_op[{mode, e.op}];
    v.first++;
    v.second += e.dur;
    flops[{mode, e.op}] += e.flops;
  }
  ASSERT_EQ(static_cast<size_t>(sum.n_rows), by_op.size());
  int64_t train_op_ns = 0;
  for (int i = 0; i < sum.n_rows; i++) {
    const gcc_prof_row &row = sum.rows[i];
    auto it = by_op.find({row.mode, row.op});
    ASSERT_NE(it, by_op.end()) << row.mode << " " << row.op;
    EXPECT_EQ(row.calls, it->second.first) << row.op;
    EXPECT_EQ(row.total_ns, it->second.second) << row.op;
    EXPECT_NEAR(row.flops, (flops[{row.mode, row.op}]), 1e-9 * row.flops + 1) << row.op;
    if (i > 0 && strcmp(sum.rows[i - 1].mode, row.mode) == 0) {
      EXPECT_GE(sum.rows[i - 1].total_ns, row.total_ns) << "rows sorted by time";
    }
    if (strcmp(row.mode, "train") == 0)
      train_op_ns += row.total_ns;
  }
  int64_t step_ns = 0;
  for (const Ev &e : evs)
    if (e.cat == "step")
      step_ns += e.dur;
  EXPECT_EQ(sum.count[GCC_PROF_STEP], kSteps);
  EXPECT_EQ(sum.total_ns[GCC_PROF_STEP], step_ns);
  EXPECT_LE(train_op_ns, step_ns) << "ops run inside their steps";
  EXPECT_GE(sum.count[GCC_PROF_LOADER], static_cast<int64_t>(fills.size())); // + test loader
  EXPECT_EQ(sum.count[GCC_PROF_WAIT], kSteps + 4);
  EXPECT_EQ(sum.events, static_cast<int64_t>(evs.size()));
  // the Gemm GFLOP/s: 2 m n k per forward GEMM, known for every Gemm
  auto gemm = by_op.find({"train", "Gemm"});
  ASSERT_NE(gemm, by_op.end());
  EXPECT_GT((flops[{"train", "Gemm"}]), 0);
  gcc_prof_summary_free(&sum);

  // the printed table says the same
  std::string table_path = tmp_.file("table.txt");
  FILE *tf = fopen(table_path.c_str(), "w+");
  ASSERT_NE(tf, nullptr);
  ASSERT_EQ(gcc_profiler_print_table(prof, tf, &d), GCC_OK) << d.msg;
  rewind(tf);
  std::string table;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, tf)) > 0)
    table.append(buf, n);
  fclose(tf);
  char line[160];
  snprintf(line, sizeof line, "| train | Gemm | %lld | %.3f |",
           static_cast<long long>(gemm->second.first), 1e-6 * gemm->second.second);
  EXPECT_NE(table.find(line), std::string::npos) << line << "\n" << table;
  EXPECT_NE(table.find("6 training steps"), std::string::npos) << table;

  gcc_session_destroy(s);
  gcc_profiler_destroy(prof);
}

// Profiling observes; it does not change what is computed.
TEST_F(ProfileTest, ProfilingLeavesTheParametersBitIdentical) {
  gcc_diag d = {};
  gcc_profiler *prof = nullptr;
  ASSERT_EQ(gcc_profiler_create(tmp_.file("t.json").c_str(), &prof, &d), GCC_OK) << d.msg;
  gcc_session *a = NewSession(), *b = NewSession();
  gcc_train_report ra, rb;
  ASSERT_EQ(Train(a, nullptr, 5, &ra), GCC_OK);
  ASSERT_EQ(Train(b, prof, 5, &rb), GCC_OK);
  int64_t na = 0, nb = 0;
  float *pa = nullptr;
  gcc_session_param(a, "fc1.weight", &pa, &na, nullptr);
  float *pb = nullptr;
  gcc_session_param(b, "fc1.weight", &pb, &nb, nullptr);
  ASSERT_NE(pa, nullptr);
  ASSERT_NE(pb, nullptr);
  ASSERT_EQ(na, nb);
  EXPECT_EQ(memcmp(pa, pb, sizeof(float) * static_cast<size_t>(na)), 0);
  EXPECT_EQ(ra.test_loss, rb.test_loss);
  gcc_session_destroy(a);
  gcc_session_destroy(b);
  gcc_profiler_destroy(prof);
  EXPECT_TRUE(ListDir(tmp_.path()).empty()) << "an unwritten profile leaves no file";
}

// Names and args are escaped: quotes, backslashes, control characters and
// bytes that are not UTF-8 still give JSON that parses, with the same text.
TEST_F(ProfileTest, NamesAreEscaped) {
  std::string path = tmp_.file("esc.json");
  gcc_diag d = {};
  gcc_profiler *prof = nullptr;
  ASSERT_EQ(gcc_profiler_create(path.c_str(), &prof, &d), GCC_OK) << d.msg;
  gcc_prof_track *t = gcc_profiler_track(prof, "thread \"q\"\n");
  ASSERT_NE(t, nullptr);
  const char *name = "a\"b\\c\td\x01"
                     "e\xc3\xa9"
                     "f\xff";
  int site = gcc_profiler_site(prof, GCC_PROF_PHASE, name, "Op\"x", "train b1", "\"k\":1", 10, 20);
  ASSERT_GE(site, 0);
  int64_t t0 = gcc_prof_now();
  gcc_prof_record(t, site, t0, t0 + 1500, 3);
  gcc_prof_record(t, site, t0 + 2000, t0 + 1000, 4); // t1 < t0: recorded as 0 long
  gcc_prof_record(nullptr, site, t0, t0, 0);         // no track: nothing
  gcc_prof_record(t, -1, t0, t0, 0);                 // no site: nothing
  ASSERT_EQ(gcc_profiler_write(prof, &d), GCC_OK) << d.msg;
  std::vector<Ev> evs;
  std::map<int, std::string> threads;
  json_int_t dropped = -1;
  ASSERT_TRUE(ParseTrace(path, &evs, &threads, &dropped));
  ASSERT_EQ(evs.size(), 2u);
  EXPECT_EQ(evs[0].name, "a\"b\\c\td\x01"
                         "e\xc3\xa9"
                         "f\xef\xbf\xbd");
  EXPECT_EQ(evs[0].op, "Op\"x");
  EXPECT_EQ(evs[0].dur, 1500);
  EXPECT_EQ(evs[0].index, 3);
  EXPECT_EQ(evs[1].dur, 0);
  EXPECT_EQ(threads[evs[0].tid], "thread \"q\"\n");
  gcc_profiler_destroy(prof);
}

TEST(ProfilerCreate, BadPathsFailBeforeAnythingRuns) {
  TempDir tmp;
  gcc_diag d = {};
  gcc_profiler *prof = reinterpret_cast<gcc_profiler *>(1);
  EXPECT_EQ(gcc_profiler_create("/nonexistent-dir/x/trace.json", &prof, &d), GCC_ERR_IO);
  EXPECT_EQ(prof, nullptr);
  EXPECT_NE(strstr(d.msg, "/nonexistent-dir/x/trace.json"), nullptr) << d.msg;
  EXPECT_NE(strstr(d.msg, "No such file or directory"), nullptr) << d.msg;
  EXPECT_EQ(gcc_profiler_create(tmp.path().c_str(), &prof, &d), GCC_ERR_IO);
  EXPECT_NE(strstr(d.msg, "is a directory"), nullptr) << d.msg;
  EXPECT_EQ(gcc_profiler_create("", &prof, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gcc_profiler_create(tmp.file("t.json").c_str(), nullptr, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(ListDir(tmp.path()).empty()) << "the probe file was left behind";
}

// A loader without a thread (prefetch 0) records its batches on its track
// too, from the caller's thread.
TEST(ProfileLoader, SynchronousLoaderRecordsItsBatches) {
  TempDir tmp;
  std::vector<uint8_t> images(10 * 4, 7);
  std::vector<uint8_t> labels(10, 1);
  gcc_dataset ds = {};
  ds.n = 10;
  ds.channels = 1;
  ds.height = 2;
  ds.width = 2;
  ds.images = images.data();
  ds.labels = labels.data();
  gcc_diag d = {};
  gcc_profiler *prof = nullptr;
  ASSERT_EQ(gcc_profiler_create(tmp.file("l.json").c_str(), &prof, &d), GCC_OK) << d.msg;
  gcc_dataloader_options o = {};
  o.batch_size = 4;
  o.std = 1;
  o.profiler = prof;
  gcc_dataloader *dl = nullptr;
  ASSERT_EQ(gcc_dataloader_create(&ds, &o, &dl, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_dataloader_start_epoch(dl, 0, &d), GCC_OK);
  gcc_batch b;
  int has = 1, n = 0;
  while (gcc_dataloader_next(dl, &b, &has, &d) == GCC_OK && has)
    n++;
  EXPECT_EQ(n, 3);
  gcc_dataloader_destroy(dl);
  gcc_prof_summary sum;
  ASSERT_EQ(gcc_profiler_summary(prof, &sum, &d), GCC_OK);
  EXPECT_EQ(sum.count[GCC_PROF_LOADER], 3);
  gcc_prof_summary_free(&sum);
  gcc_profiler_destroy(prof);
}

// ---- the CLI -----------------------------------------------------------------

using Result = ProcResult; // tests/subprocess.h

// Runs gcc-train with `args`; `on_stdout` sees stdout as it arrives.
Result RunCli(const std::vector<std::string> &args,
              const std::function<void(pid_t, const std::string &)> &on_stdout = nullptr) {
  ProcOptions o;
  o.on_stdout = on_stdout;
  return RunRunfile("cli/gcc-train", args, o);
}

bool Has(const std::string &s, const std::string &needle) {
  return s.find(needle) != std::string::npos;
}

class ProfileCliTest : public ::testing::Test {
protected:
  void SetUp() override {
    mnist_ = Runfile("models/mnist_mlp.pb");
    linear_ = Runfile("models/linear.pb");
    data_ = Runfile("data/mnist");
    ASSERT_FALSE(Runfile("cli/gcc-train").empty());
    ASSERT_FALSE(mnist_.empty());
    ASSERT_FALSE(linear_.empty());
    ASSERT_FALSE(data_.empty());
  }
  std::string mnist_, linear_, data_;
  TempDir tmp_;
};

TEST_F(ProfileCliTest, UnwritablePathFailsBeforeTraining) {
  std::string model_out = tmp_.file("m.pb");
  Result r = RunCli(
      {linear_, "--device", "cpu", "--profile", "/nonexistent-dir/t.json", "--output", model_out});
  EXPECT_EQ(r.exit_code, 1) << r;
  EXPECT_TRUE(Has(r.err, "--profile /nonexistent-dir/t.json")) << r;
  EXPECT_TRUE(Has(r.err, "No such file or directory")) << r;
  EXPECT_FALSE(Has(r.out, "epoch")) << "trained before failing: " << r;
  EXPECT_TRUE(ListDir(tmp_.path()).empty()) << r;
  Result dir = RunCli({linear_, "--device", "cpu", "--profile", tmp_.path(), "--no-output"});
  EXPECT_EQ(dir.exit_code, 1) << dir;
  EXPECT_TRUE(Has(dir.err, "is a directory")) << dir;
  EXPECT_TRUE(ListDir(tmp_.path()).empty()) << dir;
  Result missing = RunCli({linear_, "--profile"});
  EXPECT_EQ(missing.exit_code, 2) << missing;
  Result dump = RunCli({linear_, "--dump-placement", "--profile", tmp_.file("t.json")});
  EXPECT_EQ(dump.exit_code, 2) << dump;
  EXPECT_TRUE(Has(dump.err, "--profile")) << dump;
}

TEST_F(ProfileCliTest, WritesTheTraceAndPrintsTheTable) {
  std::string trace = tmp_.file("linear.json");
  Result r = RunCli(
      {linear_, "--device", "cpu", "--epochs", "2", "--profile", trace, "--no-output", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(Has(r.out, "| mode | op | calls | total ms | mean us | % of step time | GFLOP/s |"))
      << r;
  EXPECT_TRUE(Has(r.out, "| train | Gemm |")) << r;
  EXPECT_TRUE(Has(r.out, "trace " + trace)) << r;
  std::vector<Ev> evs;
  std::map<int, std::string> threads;
  json_int_t dropped = -1;
  ASSERT_TRUE(ParseTrace(trace, &evs, &threads, &dropped));
  int steps = 0;
  for (const Ev &e : evs)
    steps += e.cat == "step";
  EXPECT_EQ(steps, 2 * 16) << "linear.pb: 256 samples, batch 16, 2 epochs";
  EXPECT_EQ(ListDir(tmp_.path()), std::vector<std::string>{"linear.json"});
}

// Ctrl-C: exit 130, no model, and the trace of the steps done, complete.
TEST_F(ProfileCliTest, SigintWritesTheTraceOfTheStepsDone) {
  std::string trace = tmp_.file("int.json"), model_out = tmp_.file("m.pb");
  bool sent = false;
  Result r = RunCli({mnist_, "--device", "cpu", "--data", data_, "--epochs", "1000", "--log-every",
                     "20", "--threads", "1", "--output", model_out, "--profile", trace},
                    [&](pid_t pid, const std::string &so_far) {
                      if (!sent && Has(so_far, "[1,")) {
                        kill(pid, SIGINT);
                        sent = true;
                      }
                    });
  ASSERT_TRUE(sent) << r;
  EXPECT_EQ(r.exit_code, 130) << r;
  EXPECT_FALSE(Exists(model_out));
  EXPECT_TRUE(Has(r.out, "| train | Gemm |")) << r;
  std::vector<Ev> evs;
  std::map<int, std::string> threads;
  json_int_t dropped = -1;
  ASSERT_TRUE(ParseTrace(trace, &evs, &threads, &dropped));
  int steps = 0;
  for (const Ev &e : evs)
    steps += e.cat == "step";
  EXPECT_GE(steps, 20);
  EXPECT_EQ(ListDir(tmp_.path()), std::vector<std::string>{"int.json"});
}

} // namespace
