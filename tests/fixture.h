// Header-only reader for the gcc-train test fixture format written by
// tests/fixtures/make_fixtures.py.
//
// Format (little-endian): the 13-byte magic "gcc-fixture1\n", then records
// until EOF.  Each record is one ASCII header line
//     <name> <dtype> <ndim> <d0> ... <d(ndim-1)>\n
// (dtype is f32, f64 or i64; ndim 0 is a scalar with one element),
// immediately followed by the raw element bytes (row-major, no padding).
#ifndef GCC_TEST_FIXTURE_H_
#define GCC_TEST_FIXTURE_H_

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testutil.h"

namespace gcc_test {

struct FixtureArray {
  std::string name;
  std::string dtype; // "f32", "f64" or "i64"
  std::vector<int64_t> dims;
  std::vector<unsigned char> bytes;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims)
      n *= d;
    return n;
  }
  const float *f32() const {
    Check("f32");
    return reinterpret_cast<const float *>(bytes.data());
  }
  const int64_t *i64() const {
    Check("i64");
    return reinterpret_cast<const int64_t *>(bytes.data());
  }
  const double *f64() const {
    Check("f64");
    return reinterpret_cast<const double *>(bytes.data());
  }
  std::string ShapeString() const {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i) {
      if (i)
        s += ",";
      s += std::to_string(dims[i]);
    }
    return s + "]";
  }

private:
  void Check(const char *want) const {
    if (dtype != want) {
      std::fprintf(stderr, "fixture: record '%s' has dtype %s, accessed as %s\n", name.c_str(),
                   dtype.c_str(), want);
      std::abort();
    }
  }
};

class Fixture {
public:
  // Loads `path`. On failure returns false and sets *err (if non-null) to a
  // message naming the file and, where relevant, the record.
  static bool Load(const std::string &path, Fixture *out, std::string *err) {
    static const char kMagic[] = "gcc-fixture1\n";
    static const size_t kMagicLen = sizeof(kMagic) - 1; // 13
    auto fail = [&](const std::string &msg) {
      if (err)
        *err = "fixture " + path + ": " + msg;
      return false;
    };

    std::vector<unsigned char> buf;
    errno = 0;
    if (!ReadFile(path, &buf))
      return fail(std::string("cannot read: ") + (errno ? std::strerror(errno) : "read error"));

    if (buf.size() < kMagicLen || std::memcmp(buf.data(), kMagic, kMagicLen) != 0)
      return fail("bad magic (expected \"gcc-fixture1\\n\")");

    Fixture fx;
    fx.path_ = path;
    size_t pos = kMagicLen;
    int index = 0;
    while (pos < buf.size()) {
      const std::string where = "record #" + std::to_string(index);
      // Header line.
      size_t eol = pos;
      while (eol < buf.size() && buf[eol] != '\n') {
        unsigned char c = buf[eol];
        if (c < 0x20 || c > 0x7e)
          return fail(where + ": non-printable byte in header line");
        if (eol - pos > 4096)
          return fail(where + ": header line too long");
        ++eol;
      }
      if (eol >= buf.size())
        return fail(where + ": truncated header line (no newline)");
      std::string line(reinterpret_cast<const char *>(buf.data() + pos), eol - pos);
      pos = eol + 1;

      std::vector<std::string> tok;
      {
        std::istringstream is(line);
        std::string t;
        while (is >> t)
          tok.push_back(t);
      }
      if (tok.size() < 3)
        return fail(where + ": malformed header '" + line + "'");
      FixtureArray a;
      a.name = tok[0];
      a.dtype = tok[1];
      const std::string rec = "record '" + a.name + "'";
      size_t esize;
      if (a.dtype == "f32")
        esize = 4;
      else if (a.dtype == "f64")
        esize = 8;
      else if (a.dtype == "i64")
        esize = 8;
      else
        return fail(rec + ": unknown dtype '" + a.dtype + "'");
      int64_t ndim;
      if (!ParseInt(tok[2], &ndim) || ndim < 0 || ndim > 16)
        return fail(rec + ": bad ndim '" + tok[2] + "'");
      if (tok.size() != static_cast<size_t>(3 + ndim))
        return fail(rec + ": header has " + std::to_string(tok.size() - 3) + " dims, ndim says " +
                    std::to_string(ndim));
      uint64_t n = 1;
      for (int64_t i = 0; i < ndim; ++i) {
        int64_t d;
        if (!ParseInt(tok[3 + i], &d) || d < 0)
          return fail(rec + ": bad dim '" + tok[3 + i] + "'");
        a.dims.push_back(d);
        if (d != 0 && n > std::numeric_limits<uint64_t>::max() / 16 / static_cast<uint64_t>(d))
          return fail(rec + ": shape too large");
        n *= static_cast<uint64_t>(d);
      }
      uint64_t nbytes = n * esize;
      if (nbytes > buf.size() - pos)
        return fail(rec + ": truncated data (need " + std::to_string(nbytes) + " bytes, " +
                    std::to_string(buf.size() - pos) + " left)");
      if (fx.arrays_.count(a.name))
        return fail(rec + ": duplicate record name");
      a.bytes.assign(buf.begin() + pos, buf.begin() + pos + nbytes);
      pos += nbytes;
      fx.order_.push_back(a.name);
      fx.arrays_.emplace(a.name, std::move(a));
      ++index;
    }
    if (out)
      *out = std::move(fx);
    return true;
  }

  bool Has(const std::string &name) const { return arrays_.count(name) != 0; }

  // Aborts with a clear message if `name` is missing.
  const FixtureArray &Get(const std::string &name) const {
    auto it = arrays_.find(name);
    if (it == arrays_.end()) {
      std::fprintf(stderr, "fixture %s: missing record '%s'\n", path_.c_str(), name.c_str());
      std::abort();
    }
    return it->second;
  }

  // Record names in file order.
  std::vector<std::string> Names() const { return order_; }

  const std::string &path() const { return path_; }

private:
  static bool ParseInt(const std::string &s, int64_t *v) {
    if (s.empty() || s.size() > 18)
      return false;
    int64_t r = 0;
    for (char c : s) {
      if (c < '0' || c > '9')
        return false;
      r = r * 10 + (c - '0');
    }
    *v = r;
    return true;
  }

  std::string path_;
  std::vector<std::string> order_;
  std::map<std::string, FixtureArray> arrays_;
};

} // namespace gcc_test

#endif // GCC_TEST_FIXTURE_H_
