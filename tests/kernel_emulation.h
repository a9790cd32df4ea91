// kernel_emulation.h - runs generated CUDA C on the CPU (test support).
//
// A kernel-set source (codegen/emit.h) is written to $TEST_TMPDIR,
// compiled with the host C++ compiler and tests/cuda_host_shim.h
//
//   /usr/bin/g++ -std=c++17 -O1 -fPIC -shared -fno-strict-aliasing -pthread
//       -include tests/cuda_host_shim.h -DGCC_HOST_EMULATION src.cc -o src.so
//
// into a shared object, which is dlopen'ed; each kernel is then called
// through the `<kernel>_launch(grid, block, args)` wrapper the emitter
// prints (args[i] points at argument i, as cudaLaunchKernel's). The shim is
// found in the test's runfiles (data dependency :cuda_host_shim.h)
// or at $GCC_CUDA_HOST_SHIM; the compiler is $GCC_EMU_CXX or /usr/bin/g++.
// The shared object is not sanitized under --config=asan (it need not be).
#ifndef GCC_TESTS_KERNEL_EMULATION_H
#define GCC_TESTS_KERNEL_EMULATION_H

#include <string>

namespace gcc_emu_test {

using LaunchFn = void (*)(unsigned grid, unsigned block, void **args);

// Absolute or runfiles-relative path of tests/cuda_host_shim.h; empty when
// it cannot be found.
std::string ShimPath();

// The compiler used ($GCC_EMU_CXX, else /usr/bin/g++).
std::string Compiler();

class EmulatedModule {
public:
  EmulatedModule() = default;
  ~EmulatedModule();
  EmulatedModule(const EmulatedModule &) = delete;
  EmulatedModule &operator=(const EmulatedModule &) = delete;

  // Compiles `source` into $TEST_TMPDIR/<name>_<pid>_<n>.so and loads it.
  // On failure returns false and sets *error to the command line and the
  // compiler's output (or dlerror()). `name` only names the files.
  bool Compile(const std::string &source, const std::string &name, std::string *error);

  // `<kernel>_launch`, or nullptr with *error set.
  LaunchFn Find(const std::string &kernel, std::string *error) const;

  // Runs `<kernel>_launch(grid, block, args)`; false with *error set when the
  // wrapper is missing or the emulator rejected the launch (grid 0, ...).
  bool Launch(const std::string &kernel, unsigned grid, unsigned block, void **args,
              std::string *error) const;

  // State of the module's emulator after its last launch.
  std::string LastError() const;           // "" when the launch ran
  unsigned long BarrierMismatches() const; // blocks with divergent __syncthreads
  // Later launches run a block's threads in descending threadIdx order.
  void SetReversedThreadOrder(bool reversed) const;

  const std::string &compiler_output() const { return log_; } // warnings
  const std::string &so_path() const { return so_; }
  bool loaded() const { return handle_ != nullptr; }

private:
  void *handle_ = nullptr;
  std::string so_, log_;
};

} // namespace gcc_emu_test

#endif // GCC_TESTS_KERNEL_EMULATION_H
