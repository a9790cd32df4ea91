// test_kernel_cache.h - the NVRTC kernel cache the tests' CUDA plans use.
//
// Tests build the same plans many times (the CPU twin and the CUDA plan,
// each epilogue refused in turn, resume and replay checks), and NVRTC is
// most of their time (a profile of device_plan_test: 67% of its samples in
// libnvrtc). gcc_kernel_cache_hook with this config keeps each compiled
// image in a directory of its own under $TEST_TMPDIR (one per process, so
// Bazel's test shards and runs never share one): the first plan that needs a
// kernel set still runs NVRTC and ptxas on its source, every later plan of
// the same process with the same source, options and architecture loads
// that image (codegen/kernel_cache.h keys it by SHA-256 of all three). What
// a fresh directory per process leaves out is only the cross-run reuse that
// tests of the cache itself (cli_test, export_cli_test) check on purpose.
#ifndef GCC_TESTS_TEST_KERNEL_CACHE_H
#define GCC_TESTS_TEST_KERNEL_CACHE_H

#include <unistd.h>

#include <string>

extern "C" {
#include "codegen/kernel_cache.h"
}
#include "tests/testutil.h"

namespace gcc_test {

// The config to pass as gcc_plan_config.compile_user beside
// compile = gcc_kernel_cache_hook; lives as long as the process.
inline void *TestKernelCache() {
  static const std::string dir = TmpDir() + "/kernel_cache_" + std::to_string(getpid());
  static const gcc_kernel_cache_config cfg = {dir.c_str(), 1};
  return (void *)&cfg;
}

} // namespace gcc_test

#endif // GCC_TESTS_TEST_KERNEL_CACHE_H
