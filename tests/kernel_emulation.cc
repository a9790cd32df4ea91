#include "tests/kernel_emulation.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>
#include "tests/testutil.h"

using namespace gcc_test; // tests/testutil.h

extern char **environ;

namespace gcc_emu_test {
namespace {

std::string Sanitize(const std::string &s) {
  std::string o;
  for (char c : s)
    o += ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) ? c : '_';
  return o.substr(0, 64);
}

// Runs argv with stdout and stderr into `log`; returns the exit status, or
// -1 when it could not start / was killed.
int Run(const std::vector<std::string> &argv, const std::string &log, std::string *why) {
  std::vector<char *> av;
  for (const std::string &a : argv)
    av.push_back(const_cast<char *>(a.c_str()));
  av.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  int rc = posix_spawn(&pid, av[0], &fa, nullptr, av.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    *why = "cannot start " + argv[0] + ": " + strerror(rc);
    return -1;
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0) {
    if (errno != EINTR) {
      *why = std::string("waitpid: ") + strerror(errno);
      return -1;
    }
  }
  if (!WIFEXITED(st)) {
    *why = argv[0] + " was killed by signal " + std::to_string(WTERMSIG(st));
    return -1;
  }
  return WEXITSTATUS(st);
}

} // namespace

std::string ShimPath() {
  const char *env = getenv("GCC_CUDA_HOST_SHIM");
  if (env && Exists(env))
    return env;
  const char *rel = "tests/cuda_host_shim.h";
  for (const char *var : {"TEST_SRCDIR", "RUNFILES_DIR"}) {
    const char *root = getenv(var);
    if (!root || !*root)
      continue;
    const char *ws = getenv("TEST_WORKSPACE");
    for (std::string w : {std::string(ws ? ws : ""), std::string("gcc_train")}) {
      if (w.empty())
        continue;
      std::string p = std::string(root) + "/" + w + "/" + rel;
      if (Exists(p))
        return p;
    }
  }
  if (Exists(rel)) { // the runfiles tree is the test's working directory
    char cwd[4096];
    if (getcwd(cwd, sizeof cwd))
      return std::string(cwd) + "/" + rel;
    return rel;
  }
  return "";
}

std::string Compiler() {
  const char *cxx = getenv("GCC_EMU_CXX");
  return cxx && *cxx ? cxx : "/usr/bin/g++";
}

EmulatedModule::~EmulatedModule() {
  if (handle_)
    dlclose(handle_);
}

bool EmulatedModule::Compile(const std::string &source, const std::string &name,
                             std::string *error) {
  static std::atomic<int> counter{0};
  if (handle_) {
    *error = "module already loaded";
    return false;
  }
  std::string shim = ShimPath();
  if (shim.empty()) {
    *error = "tests/cuda_host_shim.h not found in the runfiles (TEST_SRCDIR=" +
             std::string(getenv("TEST_SRCDIR") ? getenv("TEST_SRCDIR") : "") +
             "); add :cuda_host_shim.h to the test's data";
    return false;
  }
  std::string cxx = Compiler();
  if (access(cxx.c_str(), X_OK) != 0) {
    *error = "host compiler " + cxx + " is not executable here (set GCC_EMU_CXX)";
    return false;
  }
  std::string base = TmpDir() + "/" + Sanitize(name) + "_" + std::to_string(getpid()) + "_" +
                     std::to_string(counter++);
  std::string src = base + ".cc", so = base + ".so", logf = base + ".log";
  {
    std::ofstream out(src, std::ios::binary);
    out << source;
    if (!out) {
      *error = "cannot write " + src;
      return false;
    }
  }
  std::vector<std::string> argv = {cxx,
                                   "-std=c++17",
                                   "-O1",
                                   "-fPIC",
                                   "-shared",
                                   "-fno-strict-aliasing",
                                   "-pthread",
                                   "-Wall",
                                   "-include",
                                   shim,
                                   "-DGCC_HOST_EMULATION",
                                   "-x",
                                   "c++",
                                   src,
                                   "-o",
                                   so};
  std::string cmd;
  for (const std::string &a : argv)
    cmd += (cmd.empty() ? "" : " ") + a;
  // The same kernel set is often loaded many times by one process (a plan
  // and its twin, each epilogue refused in turn, resume checks): the first
  // load compiles it, later loads get a byte copy of that shared object
  // under their own name. A copy, not the same file: glibc's dlopen returns
  // the already loaded object for the same file, and each module needs its
  // own emulator state (the shim's globals: last error, thread order).
  static std::mutex compiled_mu;
  static std::map<std::string, std::pair<std::string, std::string>>
      compiled; // source -> .so, compiler output
  const std::string key = cxx + '\n' + shim + '\n' + source;
  std::string cached_so;
  {
    std::lock_guard<std::mutex> lock(compiled_mu);
    auto it = compiled.find(key);
    if (it != compiled.end()) {
      cached_so = it->second.first;
      log_ = it->second.second;
    }
  }
  if (!cached_so.empty()) {
    std::ifstream in(cached_so, std::ios::binary);
    std::ofstream out(so, std::ios::binary);
    out << in.rdbuf();
    out.close();
    if (!in || !out) {
      *error = "cannot copy " + cached_so + " to " + so;
      return false;
    }
  } else {
    std::string why;
    int rc = Run(argv, logf, &why);
    log_ = ReadText(logf);
    if (rc != 0) {
      *error = "host compilation failed (" + (rc < 0 ? why : "exit status " + std::to_string(rc)) +
               "):\n  " + cmd + "\n" + log_;
      return false;
    }
    std::lock_guard<std::mutex> lock(compiled_mu);
    compiled.emplace(key, std::make_pair(so, log_));
  }
  handle_ = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char *e = dlerror();
    *error = "dlopen " + so + ": " + (e ? e : "?");
    return false;
  }
  so_ = so;
  return true;
}

LaunchFn EmulatedModule::Find(const std::string &kernel, std::string *error) const {
  if (!handle_) {
    *error = "no module loaded";
    return nullptr;
  }
  std::string sym = kernel + "_launch";
  dlerror();
  void *f = dlsym(handle_, sym.c_str());
  if (!f) {
    const char *e = dlerror();
    *error = "no symbol " + sym + " in " + so_ + (e ? std::string(": ") + e : "") +
             " (the emitter must print the host-emulation wrapper for every kernel)";
    return nullptr;
  }
  return reinterpret_cast<LaunchFn>(f);
}

bool EmulatedModule::Launch(const std::string &kernel, unsigned grid, unsigned block, void **args,
                            std::string *error) const {
  LaunchFn f = Find(kernel, error);
  if (!f)
    return false;
  f(grid, block, args);
  std::string e = LastError();
  if (!e.empty()) {
    *error = kernel + ": " + e;
    return false;
  }
  return true;
}

std::string EmulatedModule::LastError() const {
  if (!handle_)
    return "no module loaded";
  auto f = reinterpret_cast<const char *(*)()>(dlsym(handle_, "gcc_emu_last_error"));
  return f ? std::string(f()) : "the module lacks gcc_emu_last_error (not built with the shim?)";
}

unsigned long EmulatedModule::BarrierMismatches() const {
  auto f = handle_
               ? reinterpret_cast<unsigned long (*)()>(dlsym(handle_, "gcc_emu_barrier_mismatches"))
               : nullptr;
  return f ? f() : ~0ul;
}

void EmulatedModule::SetReversedThreadOrder(bool reversed) const {
  auto f = handle_ ? reinterpret_cast<void (*)(int)>(dlsym(handle_, "gcc_emu_set_thread_order"))
                   : nullptr;
  if (f)
    f(reversed ? 1 : 0);
}

} // namespace gcc_emu_test
