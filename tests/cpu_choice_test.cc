// The CPU GEMM library chosen by measurement (runtime/cpu/cpu_choice.h):
// the key and entry path, timing that picks the faster candidate, the
// process memo, the disk cache (a hit runs nothing; a corrupted, truncated,
// foreign or misplaced entry is ignored with a note, re-timed and
// replaced; a valid entry is obeyed whatever timing would say), the
// untimed and cache-off paths, and GCC_CPU_GEMM's parsing. The candidates
// here are fake (functions that wait a known time), so the outcome of
// timing does not depend on the machine's load: the slow one waits 20x the
// fast one.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <vector>
#include <unistd.h>

#include "runtime/cpu/cpu_choice.h"
#include "tests/testutil.h"

namespace {

struct Fake {
  int calls[GCC_CPU_LIB_COUNT] = {0, 0, 0};
  int us[GCC_CPU_LIB_COUNT] = {2000, 100, 2000}; // openblas the fastest
  std::vector<int> order;                        // the libraries run, in order
};

gcc_status RunFake(void *user, int lib, gcc_diag *) {
  Fake *f = static_cast<Fake *>(user);
  f->calls[lib]++;
  f->order.push_back(lib);
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(f->us[lib]);
  while (std::chrono::steady_clock::now() < until) { // busy: a sleep may overshoot by ms
  }
  return GCC_OK;
}

int Calls(const Fake &f) {
  return f.calls[0] + f.calls[1] + f.calls[2];
}

std::string Slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Spit(const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

class CpuChoice : public ::testing::Test {
protected:
  void SetUp() override {
    gcc_cpu_choice_forget();
    unsetenv("GCC_CPU_CHOICE_CACHE");
    dir_ = tmp_.path() + "/cache";
    key_ = "cpu=test isa=test onednn=0 threads=2 wait=passive Gemm m=64 n=512 k=784 ta=0 tb=1 "
           "alpha=0x1p+0 beta=0x0p+0 c=bias candidates=onednn,openblas";
  }
  void TearDown() override { gcc_cpu_choice_forget(); }

  gcc_cpu_choice Choose(Fake *f, unsigned candidates = 3, double budget = 0.5, int disk = 1) {
    gcc_cpu_choice_req r{key_.c_str(), candidates, RunFake, f, dir_.c_str(), disk, budget, 0};
    gcc_cpu_choice c{};
    gcc_diag d{};
    EXPECT_EQ(gcc_cpu_choose(&r, &c, &d), GCC_OK) << d.msg;
    return c;
  }

  std::string Path() {
    char p[4300];
    gcc_diag d{};
    EXPECT_EQ(gcc_cpu_choice_entry_path(dir_.c_str(), key_.c_str(), p, sizeof p, &d), GCC_OK)
        << d.msg;
    return p;
  }

  gcc_test::TempDir tmp_;
  std::string dir_, key_;
};

TEST_F(CpuChoice, EntryPathIsInTheDirectoryAndDependsOnTheKey) {
  std::string a = Path();
  EXPECT_EQ(a.rfind(dir_ + "/cpu-choice-", 0), 0u) << a;
  EXPECT_EQ(a.size(), dir_.size() + strlen("/cpu-choice-") + 16 + strlen(".txt")) << a;
  EXPECT_EQ(a, Path()) << "the same key, the same file";
  key_ += " x";
  EXPECT_NE(a, Path());
  // the default directory is the kernel cache's: $XDG_CACHE_HOME/gcc-train
  char p[4300];
  gcc_diag d{};
  std::string xdg = tmp_.path() + "/xdg";
  setenv("XDG_CACHE_HOME", xdg.c_str(), 1);
  ASSERT_EQ(gcc_cpu_choice_entry_path(nullptr, "k", p, sizeof p, &d), GCC_OK) << d.msg;
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(std::string(p).rfind(xdg + "/gcc-train/cpu-choice-", 0), 0u) << p;
}

TEST_F(CpuChoice, TimingPicksTheFastestAndWritesTheEntry) {
  Fake f;
  gcc_cpu_choice c = Choose(&f);
  EXPECT_EQ(c.how, GCC_CPU_CHOICE_TIMED);
  EXPECT_EQ(c.lib, GCC_CPU_LIB_OPENBLAS);
  EXPECT_GE(c.rounds, 1);
  EXPECT_LE(c.rounds, GCC_CPU_CHOICE_ROUNDS);
  EXPECT_EQ(f.calls[GCC_CPU_LIB_GEMV], 0) << "not a candidate";
  EXPECT_EQ(f.calls[0], c.rounds + 1) << "one warm-up run, then one per round";
  EXPECT_EQ(f.calls[1], c.rounds + 1);
  // a fake's run is at least its wait
  EXPECT_GE(c.min_us[GCC_CPU_LIB_ONEDNN], 2000.0);
  EXPECT_GE(c.min_us[GCC_CPU_LIB_OPENBLAS], 100.0);
  EXPECT_STREQ(c.note, "");
  std::string e = Slurp(Path());
  EXPECT_EQ(e.rfind("gcc-train cpu choice 1\nkey " + key_ + "\nchoice openblas\nus onednn=", 0), 0u)
      << e;
}

// Grouped (the whole plan's GEMMs: OpenBLAS's workers spin after a run):
// every run of one candidate, warm-up first, before any of the next one,
// in enum order; the fastest still wins and is cached.
TEST_F(CpuChoice, GroupedTimingRunsEachCandidateAlone) {
  Fake f;
  gcc_cpu_choice_req r{key_.c_str(), 3, RunFake, &f, dir_.c_str(), 1, 0.5, 1};
  gcc_cpu_choice c{};
  gcc_diag d{};
  ASSERT_EQ(gcc_cpu_choose(&r, &c, &d), GCC_OK) << d.msg;
  EXPECT_EQ(c.how, GCC_CPU_CHOICE_TIMED);
  EXPECT_EQ(c.lib, GCC_CPU_LIB_OPENBLAS);
  EXPECT_GE(c.rounds, 1);
  ASSERT_GE(f.calls[0], 2) << "a warm-up and at least one round";
  ASSERT_GE(f.calls[1], 2);
  for (size_t i = 0; i < f.order.size(); i++)
    EXPECT_EQ(f.order[i], i < (size_t)f.calls[0] ? 0 : 1) << "run " << i;
  EXPECT_NE(Slurp(Path()).find("\nchoice openblas\n"), std::string::npos);
}

TEST_F(CpuChoice, ABudgetEndsTheRoundsAfterOne) {
  for (double budget : {1e-9, 0.0}) { // 0: a plan past its budget still times one round
    gcc_cpu_choice_forget();
    Fake f;
    gcc_cpu_choice c = Choose(&f, 3, budget, 0);
    EXPECT_EQ(c.how, GCC_CPU_CHOICE_TIMED) << budget;
    EXPECT_EQ(c.rounds, 1) << budget;
    EXPECT_EQ(c.lib, GCC_CPU_LIB_OPENBLAS) << budget;
    EXPECT_EQ(Calls(f), 4) << "a warm-up and one round of two candidates";
  }
}

TEST_F(CpuChoice, ACacheHitTimesNothing) {
  Fake f;
  ASSERT_EQ(Choose(&f).how, GCC_CPU_CHOICE_TIMED);
  int before = Calls(f);
  gcc_cpu_choice c = Choose(&f);
  EXPECT_EQ(c.how, GCC_CPU_CHOICE_MEMO) << "the same process: the memo";
  EXPECT_EQ(c.lib, GCC_CPU_LIB_OPENBLAS);
  gcc_cpu_choice_forget(); // as a new process
  c = Choose(&f);
  EXPECT_EQ(c.how, GCC_CPU_CHOICE_CACHED);
  EXPECT_EQ(c.lib, GCC_CPU_LIB_OPENBLAS);
  EXPECT_STREQ(c.note, "");
  EXPECT_EQ(Calls(f), before) << "a hit must not run any candidate";
}

TEST_F(CpuChoice, AValidEntryIsObeyedWhateverTimingWouldSay) {
  // the same cache file gives the same choice: an entry naming the slower
  // candidate is kept (the machine's load when it was timed decided it)
  Fake f;
  ASSERT_EQ(Choose(&f).lib, GCC_CPU_LIB_OPENBLAS);
  Spit(Path(),
       "gcc-train cpu choice 1\nkey " + key_ + "\nchoice onednn\nus onednn=1.0 openblas=2.0\n");
  for (int i = 0; i < 3; i++) {
    gcc_cpu_choice_forget();
    int before = Calls(f);
    gcc_cpu_choice c = Choose(&f);
    EXPECT_EQ(c.how, GCC_CPU_CHOICE_CACHED);
    EXPECT_EQ(c.lib, GCC_CPU_LIB_ONEDNN);
    EXPECT_EQ(Calls(f), before);
  }
}

TEST_F(CpuChoice, BadEntriesAreIgnoredWithANoteRetimedAndReplaced) {
  struct Bad {
    const char *what;
    std::string text;
    const char *why;
  };
  const std::string good =
      "gcc-train cpu choice 1\nkey " + key_ + "\nchoice onednn\nus onednn=1.0 openblas=2.0\n";
  const Bad bads[] = {
      {"garbage", "\x01\x02garbage", "not a gcc-train cpu choice entry"},
      {"empty", "", "not a gcc-train cpu choice entry"},
      {"other format", "gcc-train cpu choice 2\n" + good.substr(good.find('\n') + 1),
       "not a gcc-train cpu choice entry"},
      {"truncated", good.substr(0, good.size() - 10), "no timing line"},
      {"no newline at the end", good.substr(0, good.size() - 1), "no timing line"},
      {"another key", "gcc-train cpu choice 1\nkey other\nchoice onednn\nus onednn=1\n",
       "its key is another one"},
      {"an unknown library", "gcc-train cpu choice 1\nkey " + key_ + "\nchoice mkl\nus mkl=1\n",
       "names no library"},
      {"not a candidate", "gcc-train cpu choice 1\nkey " + key_ + "\nchoice gemv\nus gemv=1\n",
       "not a candidate"},
      {"bytes after it", good + "more\n", "bytes after the entry"},
      {"larger than any entry", good + std::string(5000, 'x'), "larger than any entry"},
  };
  ASSERT_EQ(mkdir(dir_.c_str(), 0700), 0);
  for (const Bad &b : bads) {
    gcc_cpu_choice_forget();
    Spit(Path(), b.text);
    Fake f;
    gcc_cpu_choice c = Choose(&f);
    EXPECT_EQ(c.how, GCC_CPU_CHOICE_TIMED) << b.what;
    EXPECT_EQ(c.lib, GCC_CPU_LIB_OPENBLAS) << b.what;
    EXPECT_NE(strstr(c.note, "ignored"), nullptr) << b.what << ": " << c.note;
    EXPECT_NE(strstr(c.note, b.why), nullptr) << b.what << ": " << c.note;
    EXPECT_NE(strstr(c.note, Path().c_str()), nullptr) << b.what << ": names the file";
    std::string e = Slurp(Path());
    EXPECT_EQ(e.rfind("gcc-train cpu choice 1\nkey " + key_ + "\nchoice openblas\n", 0), 0u)
        << b.what << ": replaced by " << e;
  }
}

TEST_F(CpuChoice, ADirectoryInPlaceOfTheEntryIsIgnored) {
  ASSERT_EQ(mkdir(dir_.c_str(), 0700), 0);
  ASSERT_EQ(mkdir(Path().c_str(), 0700), 0);
  Fake f;
  gcc_cpu_choice c = Choose(&f);
  EXPECT_EQ(c.how, GCC_CPU_CHOICE_TIMED);
  EXPECT_EQ(c.lib, GCC_CPU_LIB_OPENBLAS);
  EXPECT_NE(strstr(c.note, "not a regular file"), nullptr) << c.note;
  EXPECT_NE(strstr(c.note, "cannot write"), nullptr) << c.note;
}

TEST_F(CpuChoice, AnUnusableDirectoryStillChooses) {
  Spit(tmp_.path() + "/file", "x");
  dir_ = tmp_.path() + "/file/sub"; // a regular file where a directory must be
  Fake f;
  gcc_cpu_choice c = Choose(&f);
  EXPECT_EQ(c.how, GCC_CPU_CHOICE_TIMED);
  EXPECT_EQ(c.lib, GCC_CPU_LIB_OPENBLAS);
  EXPECT_NE(strstr(c.note, "cannot create directory"), nullptr) << c.note;
}

TEST_F(CpuChoice, CacheOffAndNoBudget) {
  setenv("GCC_CPU_CHOICE_CACHE", "0", 1);
  Fake f;
  gcc_cpu_choice c = Choose(&f);
  unsetenv("GCC_CPU_CHOICE_CACHE");
  EXPECT_EQ(c.how, GCC_CPU_CHOICE_TIMED);
  struct stat st;
  EXPECT_NE(stat(Path().c_str(), &st), 0) << "GCC_CPU_CHOICE_CACHE=0 writes nothing";
  gcc_cpu_choice_forget();
  Fake g;
  c = Choose(&g, 3, -1.0);
  EXPECT_EQ(c.how, GCC_CPU_CHOICE_UNTIMED);
  EXPECT_EQ(c.lib, GCC_CPU_LIB_ONEDNN) << "untimed: the lowest candidate";
  EXPECT_EQ(Calls(g), 0);
  EXPECT_NE(stat(Path().c_str(), &st), 0) << "an untimed choice is not cached";
  c = Choose(&g, 3, 0.5);
  EXPECT_EQ(c.how, GCC_CPU_CHOICE_MEMO) << "but kept for the process";
  EXPECT_EQ(c.lib, GCC_CPU_LIB_ONEDNN);
  gcc_cpu_choice_forget();
  c = Choose(&g, 1u << GCC_CPU_LIB_GEMV, 0.5);
  EXPECT_EQ(c.how, GCC_CPU_CHOICE_UNTIMED) << "one candidate: nothing to time";
  EXPECT_EQ(c.lib, GCC_CPU_LIB_GEMV);
  EXPECT_EQ(Calls(g), 0);
}

TEST_F(CpuChoice, BadRequestsAreErrors) {
  Fake f;
  gcc_cpu_choice c{};
  gcc_diag d{};
  gcc_cpu_choice_req r{"a\nb", 3, RunFake, &f, dir_.c_str(), 1, 0.1, 0};
  EXPECT_EQ(gcc_cpu_choose(&r, &c, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(strstr(d.msg, "newline"), nullptr) << d.msg;
  std::string longkey(1001, 'k');
  r.key = longkey.c_str();
  EXPECT_EQ(gcc_cpu_choose(&r, &c, &d), GCC_ERR_INVALID_ARGUMENT);
  r.key = "k";
  r.candidates = 0;
  EXPECT_EQ(gcc_cpu_choose(&r, &c, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(strstr(d.msg, "no candidate"), nullptr) << d.msg;
  r.candidates = 3;
  r.run = nullptr;
  EXPECT_EQ(gcc_cpu_choose(&r, &c, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(Calls(f), 0);
}

TEST(CpuChoiceEnv, ForcedLibraryParsing) {
  int lib = 7;
  gcc_diag d{};
  unsetenv("GCC_CPU_GEMM_TEST");
  EXPECT_EQ(gcc_cpu_lib_forced("GCC_CPU_GEMM_TEST", &lib, &d), GCC_OK);
  EXPECT_EQ(lib, -1);
  const struct {
    const char *v;
    int lib;
  } ok[] = {{"", -1},
            {"auto", -1},
            {"onednn", GCC_CPU_LIB_ONEDNN},
            {"openblas", GCC_CPU_LIB_OPENBLAS},
            {"gemv", GCC_CPU_LIB_GEMV}};
  for (const auto &o : ok) {
    setenv("GCC_CPU_GEMM_TEST", o.v, 1);
    EXPECT_EQ(gcc_cpu_lib_forced("GCC_CPU_GEMM_TEST", &lib, &d), GCC_OK) << o.v;
    EXPECT_EQ(lib, o.lib) << o.v;
  }
  setenv("GCC_CPU_GEMM_TEST", "mkl", 1);
  EXPECT_EQ(gcc_cpu_lib_forced("GCC_CPU_GEMM_TEST", &lib, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(strstr(d.msg, "GCC_CPU_GEMM_TEST=mkl"), nullptr) << d.msg;
  EXPECT_NE(strstr(d.msg, "openblas"), nullptr) << d.msg;
  unsetenv("GCC_CPU_GEMM_TEST");
}

TEST(CpuChoiceEnv, MachineNamesTheIsaAndThreads) {
  char m[512];
  gcc_cpu_choice_machine(3, m, sizeof m);
  EXPECT_NE(strstr(m, "cpu="), nullptr) << m;
  EXPECT_NE(strstr(m, " isa="), nullptr) << m;
  EXPECT_NE(strstr(m, " threads=3 "), nullptr) << m;
  EXPECT_EQ(strchr(m, '\n'), nullptr) << m;
}

} // namespace
