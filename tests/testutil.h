// testutil.h - the helpers every GoogleTest suite of gcc-train shares: files
// in the Bazel runfiles tree, whole-file reads and writes, temporary
// directories, directory listings and a monotonic clock. Header-only
// (inline), C++17, no dependency but POSIX.
#ifndef GCC_TESTS_TESTUTIL_H_
#define GCC_TESTS_TESTUTIL_H_

#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace gcc_test {

using Bytes = std::vector<uint8_t>;

// 1 if `p` exists (a dangling link counts).
inline bool Exists(const std::string &p) {
  struct stat st;
  return lstat(p.c_str(), &st) == 0;
}

// `rel` (a path from the repository root) in the Bazel runfiles tree, else
// relative to the working directory; "" when absent, with the places
// looked at appended to *looked (if not NULL).
inline std::string FindRunfile(const std::string &rel, std::string *looked) {
  std::vector<std::string> candidates;
  if (const char *srcdir = getenv("TEST_SRCDIR")) {
    candidates.push_back(std::string(srcdir) + "/gcc_train/" + rel);
    if (const char *ws = getenv("TEST_WORKSPACE"))
      candidates.push_back(std::string(srcdir) + "/" + ws + "/" + rel);
  }
  candidates.push_back(rel);
  for (const std::string &c : candidates) {
    if (Exists(c))
      return c;
    if (looked != nullptr)
      looked->append(c).append("; ");
  }
  return "";
}

inline std::string Runfile(const std::string &rel) {
  return FindRunfile(rel, nullptr);
}

// The whole file; false (and *out empty) when it cannot be read.
inline bool ReadFile(const std::string &path, Bytes *out) {
  out->clear();
  FILE *f = fopen(path.c_str(), "rb");
  if (f == nullptr)
    return false;
  uint8_t buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    out->insert(out->end(), buf, buf + n);
  bool ok = !ferror(f);
  fclose(f);
  if (!ok)
    out->clear();
  return ok;
}

inline Bytes ReadBytes(const std::string &path) {
  Bytes b;
  ReadFile(path, &b);
  return b;
}

inline std::string ReadText(const std::string &path) {
  Bytes b = ReadBytes(path);
  return std::string(b.begin(), b.end());
}

inline bool WriteFile(const std::string &path, const void *p, size_t n) {
  FILE *f = fopen(path.c_str(), "wb");
  if (f == nullptr)
    return false;
  bool ok = n == 0 || fwrite(p, 1, n, f) == n;
  return fclose(f) == 0 && ok;
}

inline bool WriteFile(const std::string &path, const Bytes &b) {
  return WriteFile(path, b.data(), b.size());
}

inline bool WriteText(const std::string &path, const std::string &s) {
  return WriteFile(path, s.data(), s.size());
}

// The names in `dir` but "." and "..", sorted; empty if it cannot be read.
inline std::vector<std::string> ListDir(const std::string &dir) {
  std::vector<std::string> names;
  DIR *d = opendir(dir.c_str());
  if (d == nullptr)
    return names;
  while (struct dirent *e = readdir(d))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
      names.push_back(e->d_name);
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// Seconds on the monotonic clock.
inline double Now() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// The directory for scratch files: $TEST_TMPDIR (Bazel), else /tmp.
inline std::string TmpDir() {
  const char *base = getenv("TEST_TMPDIR");
  return base != nullptr && *base != '\0' ? base : "/tmp";
}

// `name` under TmpDir().
inline std::string TmpPath(const std::string &name) {
  return TmpDir() + "/" + name;
}

// A fresh directory under TmpDir(), removed with everything in it at the
// end (also sub-directories a test made read-only). path() is "" when it
// could not be made.
class TempDir {
public:
  explicit TempDir(const std::string &prefix = "gcc_test") {
    std::string tmpl = TmpDir() + "/" + prefix + "_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) != nullptr)
      path_ = buf.data();
  }
  ~TempDir() {
    if (path_.empty())
      return;
    nftw(
        path_.c_str(),
        [](const char *p, const struct stat *, int type, struct FTW *) {
          if (type == FTW_D || type == FTW_DP)
            chmod(p, 0755);
          return 0;
        },
        16, FTW_PHYS);
    nftw(
        path_.c_str(),
        [](const char *p, const struct stat *, int, struct FTW *) { return remove(p); }, 16,
        FTW_DEPTH | FTW_PHYS);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  const std::string &path() const { return path_; }
  std::string file(const std::string &name) const { return path_ + "/" + name; }

private:
  std::string path_;
};

} // namespace gcc_test

#endif // GCC_TESTS_TESTUTIL_H_
