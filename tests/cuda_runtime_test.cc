// cuda_runtime_test: the CUDA runtime's behaviour on a machine without a
// usable GPU (this project's CI): clear errors, never a crash. On a machine
// with a GPU the no-driver cases are skipped with a message and the
// positive cases run instead (tests/gpu/ holds the GPU-only suite).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

// both include the CUDA headers: not inside extern "C"
#include "runtime/cuda/cublaslt_api.h"
#include "runtime/cuda/cuda_check.h"
extern "C" {
#include "runtime/cuda/cuda_backend.h"
#include "runtime/device.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/arch_check.h"
}

namespace {

bool HaveGpu(std::string *why) {
  char reason[512] = "";
  int n = gcc_cuda_device_count(reason, sizeof reason);
  *why = reason;
  return n > 0;
}

std::string ListDevices() {
  char *buf = nullptr;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  gcc_list_devices(f, gcc_cuda_check_supported);
  fclose(f);
  std::string s(buf, len);
  free(buf);
  return s;
}

gcc_status FailingCall(gcc_diag *d) {
  GCC_CUDA_CHECK(cudaSetDevice(100000)); // no such device, with or without a driver
  return GCC_OK;
}

// The process's mapped files (/proc/self/maps).
std::string Maps() {
  std::ifstream f("/proc/self/maps");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// First in the file, so that no other test has created a backend yet: the
// program that links the CUDA backend has not loaded cuBLASLt (about 150 MB
// resident), and gcc_cublaslt_load does.
TEST(CudaRuntime, CublasLtIsLoadedOnlyWhenABackendAsksForIt) {
  ASSERT_EQ(Maps().find("libcublasLt"), std::string::npos)
      << "libcublasLt is loaded before any CUDA backend: is it linked again?";
  EXPECT_STREQ(gcc_cublaslt_status_name(CUBLAS_STATUS_SUCCESS), "(cuBLASLt not loaded)");
  const gcc_cublaslt_api *lt = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_cublaslt_load(&lt, &d), GCC_OK) << d.msg;
  ASSERT_NE(lt, nullptr);
  EXPECT_NE(Maps().find(GCC_CUBLASLT_SONAME), std::string::npos);
  const gcc_cublaslt_api *again = nullptr;
  ASSERT_EQ(gcc_cublaslt_load(&again, &d), GCC_OK) << d.msg;
  EXPECT_EQ(again, lt); // one table per process
}

// The table's functions are the library's: its status names, and the
// host-only descriptor calls (no GPU needed) of a 2 x 3 x 4 GEMM as
// cuda_backend.c prepares one.
TEST(CudaRuntime, CublasLtTableCallsTheLibrary) {
  const gcc_cublaslt_api *lt = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_cublaslt_load(&lt, &d), GCC_OK) << d.msg;
  EXPECT_STREQ(lt->cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED),
               "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_STREQ(gcc_cublaslt_status_name(CUBLAS_STATUS_INVALID_VALUE),
               "CUBLAS_STATUS_INVALID_VALUE");
  EXPECT_STRNE(gcc_cublaslt_status_string(CUBLAS_STATUS_INVALID_VALUE), "");
  cublasLtMatmulDesc_t op = nullptr;
  ASSERT_EQ(lt->cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            CUBLAS_STATUS_SUCCESS);
  cublasOperation_t t = CUBLAS_OP_T;
  EXPECT_EQ(lt->cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(lt->cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, 1),
            CUBLAS_STATUS_INVALID_VALUE); // the library checks the size
  cublasLtMatrixLayout_t a = nullptr;
  ASSERT_EQ(lt->cublasLtMatrixLayoutCreate(&a, CUDA_R_32F, 4, 2, 4), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(lt->cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  size_t ws = 1 << 20;
  EXPECT_EQ(lt->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &ws, sizeof ws),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(lt->cublasLtMatmulPreferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(lt->cublasLtMatrixLayoutDestroy(a), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(lt->cublasLtMatmulDescDestroy(op), CUBLAS_STATUS_SUCCESS);
}

TEST(CudaRuntime, CheckMacroNamesTheCallTheErrorAndTheLine) {
  gcc_diag d{};
  EXPECT_NE(FailingCall(&d), GCC_OK);
  std::string m = d.msg;
  EXPECT_NE(m.find("cudaSetDevice(100000) failed: cuda"), std::string::npos) << m;
  EXPECT_NE(m.find("cuda_runtime_test.cc:"), std::string::npos) << m;
}

TEST(CudaRuntime, ListDevicesShowsTheCpuVersionsAndTheReason) {
  std::string why;
  std::string s = ListDevices();
  EXPECT_NE(s.find("cpu "), std::string::npos) << s;
  EXPECT_NE(s.find("CUDA runtime 13."), std::string::npos) << s;
  EXPECT_NE(s.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << s;
  if (HaveGpu(&why)) {
    EXPECT_NE(s.find("cuda:0 "), std::string::npos) << s;
    EXPECT_NE(s.find("compute capability"), std::string::npos) << s;
  } else {
    EXPECT_NE(s.find("no usable CUDA device: " + why), std::string::npos) << s;
  }
}

TEST(CudaRuntime, CudaVisibleDevicesIsReported) {
  setenv("CUDA_VISIBLE_DEVICES", "3", 1);
  std::string s = ListDevices();
  unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_NE(s.find("CUDA_VISIBLE_DEVICES 3"), std::string::npos) << s;
}

TEST(CudaRuntime, BackendCreationWithoutAGpuIsADeviceErrorNamingTheCall) {
  std::string why;
  if (HaveGpu(&why))
    GTEST_SKIP() << "a GPU is usable here; the no-GPU path cannot be exercised";
  gcc_cuda_backend *b = nullptr;
  gcc_diag d{};
  EXPECT_EQ(gcc_cuda_backend_create(0, &b, &d), GCC_ERR_DEVICE);
  EXPECT_EQ(b, nullptr);
  EXPECT_NE(std::string(d.msg).find("failed: cuda"), std::string::npos) << d.msg;
  gcc_cuda_backend_destroy(nullptr); // accepted
}

TEST(CudaRuntime, ResolveCudaFailsAndAutoFallsBackWithTheReason) {
  std::string why;
  if (HaveGpu(&why))
    GTEST_SKIP() << "a GPU is usable here";
  gcc_device want{GCC_DEVICE_CUDA, 1}, got{};
  char note[768];
  gcc_diag d{};
  EXPECT_EQ(gcc_device_resolve(&want, gcc_cuda_check_supported, &got, note, sizeof note, &d),
            GCC_ERR_DEVICE);
  EXPECT_NE(std::string(d.msg).find("--device cuda:1: no usable CUDA GPU: " + why),
            std::string::npos)
      << d.msg;
  EXPECT_NE(std::string(d.msg).find("--device cpu"), std::string::npos) << d.msg;
  want.kind = GCC_DEVICE_AUTO;
  EXPECT_EQ(gcc_device_resolve(&want, gcc_cuda_check_supported, &got, note, sizeof note, &d),
            GCC_OK);
  EXPECT_EQ(got.kind, GCC_DEVICE_CPU);
  EXPECT_NE(std::string(note).find("running on the CPU"), std::string::npos) << note;
  EXPECT_NE(std::string(note).find(why), std::string::npos) << note;
}

TEST(CudaRuntime, AGpuNvrtcCannotTargetGetsAMessageSayingWhatToDo) {
  // a Kepler K80 (3.7) and a Volta V100 (7.0): CUDA 13's NVRTC starts at sm_75
  for (int minor : {7, 0}) {
    gcc_device_info info{};
    info.id = GCC_DEV_CUDA(0);
    snprintf(info.name, sizeof info.name, "%s", minor == 7 ? "Tesla K80" : "Tesla V100-SXM2-16GB");
    info.cc_major = minor == 7 ? 3 : 7;
    info.cc_minor = minor;
    gcc_diag d{};
    EXPECT_EQ(gcc_cuda_check_supported(&info, &d), GCC_ERR_DEVICE) << info.name;
    std::string m = d.msg;
    EXPECT_NE(m.find(info.name), std::string::npos) << m;
    EXPECT_NE(
        m.find("compute capability " + std::to_string(info.cc_major) + "." + std::to_string(minor)),
        std::string::npos)
        << m;
    EXPECT_NE(m.find("no longer supported"), std::string::npos) << m;
    EXPECT_NE(m.find("--device cpu"), std::string::npos) << m;
  }
  for (int cc : {75, 80, 86, 89, 90}) {
    gcc_device_info info{};
    info.id = GCC_DEV_CUDA(0);
    info.cc_major = cc / 10;
    info.cc_minor = cc % 10;
    gcc_diag d{};
    EXPECT_EQ(gcc_cuda_check_supported(&info, &d), GCC_OK) << cc << ": " << d.msg;
  }
}

} // namespace
