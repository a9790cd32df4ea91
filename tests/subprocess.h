// subprocess.h - runs a program of the build (gcc-train, gcc-run, gcc-import)
// from a test: the one fork/exec/poll loop of the CLI tests.
//
// The child gets stdin from /dev/null, stdout and stderr on pipes that the
// parent drains as they fill (so a chatty child never blocks), SIGINT and
// SIGTERM at their defaults and no BUILD_WORKING_DIRECTORY (so relative paths
// resolve against the test's working directory, not `bazel run`'s).
#ifndef GCC_TESTS_SUBPROCESS_H_
#define GCC_TESTS_SUBPROCESS_H_

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "tests/testutil.h"

namespace gcc_test {

struct ProcResult {
  int exit_code = -1; // -1: killed by a signal (see term_signal) or not run
  int term_signal = 0;
  bool timed_out = false; // killed with SIGKILL after ProcOptions::timeout_s
  std::string out, err;   // everything the child wrote (err also says why it did not run)
  double seconds = 0;     // wall time from fork to exit
};

inline std::ostream &operator<<(std::ostream &os, const ProcResult &r) {
  os << "exit " << r.exit_code;
  if (r.term_signal)
    os << " (signal " << r.term_signal << ")";
  if (r.timed_out)
    os << " (timed out)";
  return os << "\n--- stdout ---\n" << r.out << "--- stderr ---\n" << r.err << "---";
}

struct ProcOptions {
  double timeout_s = 120; // then the child is killed with SIGKILL
  // Called with the child's pid and all of its stdout so far whenever more
  // arrives (to signal the child at a given point of its output).
  std::function<void(pid_t, const std::string &)> on_stdout;
  // Run in the child between fork and exec (resource limits, privileges).
  std::function<void()> child_setup;
  std::string cwd; // the child's working directory; "": the test's
  std::vector<std::pair<std::string, std::string>> env; // variables set in the child
};

// Runs the program at path `bin` with `args` (argv[1] on) and waits for it.
inline ProcResult RunProcess(const std::string &bin, const std::vector<std::string> &args,
                             const ProcOptions &o = ProcOptions()) {
  ProcResult r;
  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0) {
    r.err = std::string("pipe: ") + strerror(errno);
    return r;
  }
  if (pipe(err_pipe) != 0) {
    r.err = std::string("pipe: ") + strerror(errno);
    close(out_pipe[0]);
    close(out_pipe[1]);
    return r;
  }
  std::vector<char *> argv;
  argv.push_back(const_cast<char *>(bin.c_str()));
  for (const std::string &a : args)
    argv.push_back(const_cast<char *>(a.c_str()));
  argv.push_back(nullptr);
  double t0 = Now();
  pid_t pid = fork();
  if (pid < 0) {
    r.err = std::string("fork: ") + strerror(errno);
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]})
      close(fd);
    return r;
  }
  if (pid == 0) {
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    close(out_pipe[0]);
    close(out_pipe[1]);
    close(err_pipe[0]);
    close(err_pipe[1]);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
      dup2(devnull, 0);
    unsetenv("BUILD_WORKING_DIRECTORY");
    if (!o.cwd.empty() && chdir(o.cwd.c_str()) != 0)
      _exit(126);
    for (const auto &kv : o.env)
      setenv(kv.first.c_str(), kv.second.c_str(), 1);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (o.child_setup)
      o.child_setup();
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  struct pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    double left = o.timeout_s - (Now() - t0);
    if (left <= 0) {
      r.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    int n = poll(fds, 2, static_cast<int>(std::min(left, 0.2) * 1000) + 1);
    if (n < 0 && errno != EINTR)
      break;
    for (int i = 0; i < 2; i++) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      char buf[65536];
      ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(got));
        if (i == 0 && o.on_stdout)
          o.on_stdout(pid, r.out);
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(fds[i].fd);
        fds[i].fd = -1;
        open_fds--;
      }
    }
  }
  for (struct pollfd &p : fds)
    if (p.fd >= 0)
      close(p.fd);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  r.seconds = Now() - t0;
  if (WIFEXITED(st))
    r.exit_code = WEXITSTATUS(st);
  if (WIFSIGNALED(st))
    r.term_signal = WTERMSIG(st);
  return r;
}

// RunProcess on the runfile `rel` (e.g. "cli/gcc-train"); a missing runfile
// is a result with exit_code -1 and the reason in err.
inline ProcResult RunRunfile(const std::string &rel, const std::vector<std::string> &args,
                             const ProcOptions &o = ProcOptions()) {
  std::string bin = Runfile(rel);
  if (bin.empty()) {
    ProcResult r;
    r.err = rel + " not found in the runfiles (add it to the test's data)";
    return r;
  }
  return RunProcess(bin, args, o);
}

} // namespace gcc_test

#endif // GCC_TESTS_SUBPROCESS_H_
