// program_split_test: a generated translation unit split into NVRTC programs
// (codegen/program_split.h) and compiled on several threads.
//  - the split of a hand-written source in the generator's shape: every kernel
//    in exactly one program, contiguous runs in source order, its
//    host-emulation launcher with it, shared helpers in every program, the
//    same programs whatever the run; sources it must refuse;
//  - gcc_compile_programs with a recording compiler: names, every program
//    once, the lowest failing program's error whatever the thread count;
//  - a real plan (tests/fixtures/resnet_tiny.onnx trained: BatchNorm, ReLU,
//    Add, pooling, loss and SGD kernels; NVRTC for sm_90): each
//    program compiles, the programs' PTX hold exactly the plan's kernels, and
//    the cubins are byte for byte the same on 1 and 3 threads and on a rerun
//    (NVRTC output is deterministic; nothing depends on the thread count).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "codegen/emit.h"
#include "codegen/kernel_cache.h"
#include "codegen/nvrtc.h"
#include "codegen/program_split.h"
#include "graph/builder.h"
#include "graph/ops.h"
#include "models/models.h"
#include "runtime/compile.h"
#include "tests/imported_graphs.h"

namespace {

// A source shaped as codegen/emit.c writes one: a header comment, a header
// block under #ifndef, a helper every kernel uses, then per kernel a helper,
// the kernel and its launcher under #ifdef GCC_HOST_EMULATION.
std::string Source(int n) {
  std::string s =
      "/* generated kernels: test, codegen version 2.\n * { not a brace: a comment } */\n\n"
      "#ifndef GCC_HOST_EMULATION\n#include <cuda_fp16.h>\n#endif\n"
      "__device__ __forceinline__ float shared_twice(float a) { return a + a; }\n\n";
  for (int k = 0; k < n; k++) {
    std::string K = "kern_" + std::to_string(k);
    s += "__device__ __forceinline__ float " + K + "_elem(float a) {\n  return a * " +
         std::to_string(k + 1) + ".0f; /* '}' */\n}\n";
    s += "extern \"C\" __global__ void " + K +
         "(const float* __restrict__ x,\n    float* __restrict__ y) {\n"
         "  /* fuses: \"{\" */\n  const char* t = \"}\"; (void)t;\n"
         "  y[threadIdx.x] = shared_twice(" +
         K + "_elem(x[threadIdx.x]));\n}\n";
    s += "#ifdef GCC_HOST_EMULATION\nextern \"C\" void " + K +
         "_launch(unsigned g, unsigned b, void** a) {\n  (void)g; (void)b; (void)a; /* " + K +
         " */\n  " + K + "(0, 0);\n}\n#endif\n\n";
  }
  return s;
}

int Count(const std::string &s, const std::string &what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size()))
    n++;
  return n;
}

TEST(ProgramSplit, ProgramCountDependsOnTheKernelsOnly) {
  EXPECT_EQ(gcc_program_count(0), 0);
  EXPECT_EQ(gcc_program_count(1), 1);
  EXPECT_EQ(gcc_program_count(GCC_PROGRAM_KERNELS), 1);
  EXPECT_EQ(gcc_program_count(GCC_PROGRAM_KERNELS + 1), 2);
  EXPECT_EQ(gcc_program_count(20), 3);
  EXPECT_EQ(gcc_program_count(313), GCC_PROGRAM_MAX); // the ResNet-50 training plan
}

TEST(ProgramSplit, EveryKernelInOneProgramWithItsLauncherAndEveryHelperEverywhere) {
  const int n = 20; // 3 programs: kernels 0-6, 7-13, 14-19
  std::string src = Source(n);
  gcc_program_split sp{};
  gcc_diag d{};
  ASSERT_EQ(gcc_program_split_source(src.c_str(), &sp, &d), GCC_OK) << d.msg;
  ASSERT_EQ(sp.n_programs, 3);
  ASSERT_EQ(sp.n_kernels, n);
  const int first[3] = {0, 7, 14}, count[3] = {7, 7, 6};
  for (int p = 0; p < 3; p++) {
    EXPECT_EQ(sp.programs[p].first, first[p]);
    EXPECT_EQ(sp.programs[p].count, count[p]);
  }
  for (int k = 0; k < n; k++) {
    std::string K = "kern_" + std::to_string(k);
    EXPECT_EQ(sp.kernel_names[k], K);
    for (int p = 0; p < 3; p++) {
      std::string ps = sp.programs[p].source;
      bool mine = k >= first[p] && k < first[p] + count[p];
      EXPECT_EQ(Count(ps, "__global__ void " + K + "("), mine ? 1 : 0) << K << " program " << p;
      EXPECT_EQ(Count(ps, "void " + K + "_launch("), mine ? 1 : 0) << K << " program " << p;
      // helpers are shared: every program has every one (a helper naming no kernel)
      EXPECT_EQ(Count(ps, "float " + K + "_elem("), 1) << K << " program " << p;
    }
  }
  for (int p = 0; p < 3; p++) {
    std::string ps = sp.programs[p].source;
    EXPECT_EQ(Count(ps, "shared_twice(float a)"), 1);
    EXPECT_EQ(Count(ps, "#include <cuda_fp16.h>"), 1);
    EXPECT_EQ(ps.rfind("/* generated kernels: test", 0), 0u) << "the header comment comes first";
    EXPECT_EQ(Count(ps, "#if"), Count(ps, "#endif"));
  }
  // the same programs on a second split
  gcc_program_split again{};
  ASSERT_EQ(gcc_program_split_source(src.c_str(), &again, &d), GCC_OK) << d.msg;
  ASSERT_EQ(again.n_programs, sp.n_programs);
  for (int p = 0; p < sp.n_programs; p++)
    EXPECT_STREQ(again.programs[p].source, sp.programs[p].source);
  gcc_program_split_free(&again);
  gcc_program_split_free(&sp);
}

TEST(ProgramSplit, SourcesThatCannotBeSplitAreRefusedWithTheReason) {
  struct Bad {
    std::string src, why;
  } cases[] = {
      // a top-level item naming kernels of two programs (0 and 19)
      {Source(20) + "void both() { kern_0(0, 0); kern_19(0, 0); }\n", "names kernels of programs"},
      {"__global__ void k(float* x) { x[0] = 1; }\n", "is not extern \"C\""},
      {"extern \"C\" __global__ void k(float* x) { x[0] = 1;\n", "still open"},
      {"#ifdef A\nextern \"C\" __global__ void k(float* x) { x[0] = 1; }\n", "still open"},
      {"extern \"C\" __global__ void k(float* x) { x[0] = 1; }\n#endif\n", "#endif without #if"},
      {"/* only a comment */\n__device__ float f(float a) { return a; }\n", "defines no kernel"},
      {"extern \"C\" __global__ void k(float* x) { }\nextern \"C\" __global__ void k(float* y) { "
       "}\n",
       "defined twice"},
  };
  for (const Bad &b : cases) {
    gcc_program_split sp{};
    gcc_diag d{};
    EXPECT_EQ(gcc_program_split_source(b.src.c_str(), &sp, &d), GCC_ERR_UNSUPPORTED) << b.src;
    EXPECT_NE(std::string(d.msg).find(b.why), std::string::npos) << d.msg;
    EXPECT_EQ(sp.n_programs, 0);
    gcc_program_split_free(&sp);
  }
}

// A compiler that records what it was asked and fails where told to: its
// "PTX" is the program's name and source, so outputs can be compared.
struct Recorder {
  std::mutex mu;
  std::vector<std::string> names;
  std::set<std::string> fail; // program names that fail
  std::atomic<int> calls{0};
};

gcc_status RecordingCompile(void *user, const char *source, const char *program, int sm,
                            gcc_nvrtc_output *out, gcc_diag *d) {
  auto *r = static_cast<Recorder *>(user);
  r->calls++;
  {
    std::lock_guard<std::mutex> lock(r->mu);
    r->names.push_back(program);
  }
  memset(out, 0, sizeof *out);
  if (r->fail.count(program))
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "%s does not compile for sm_%d", program, sm);
  std::string text = std::string(program) + "\n" + source;
  out->ptx = strdup(text.c_str());
  out->ptx_size = text.size();
  return GCC_OK;
}

TEST(ProgramSplit, EveryProgramCompilesOnceAndTheLowestFailureIsReported) {
  std::string src = Source(40); // 5 programs
  gcc_program_split sp{};
  gcc_diag d{};
  ASSERT_EQ(gcc_program_split_source(src.c_str(), &sp, &d), GCC_OK) << d.msg;
  ASSERT_EQ(sp.n_programs, 5);
  std::vector<std::string> reference;
  for (int threads : {1, 3, 8}) {
    Recorder r;
    std::vector<gcc_nvrtc_output> outs(sp.n_programs);
    int used = 0;
    ASSERT_EQ(gcc_compile_programs(&sp, "plan.cu", 90, threads, RecordingCompile, &r, outs.data(),
                                   &used, &d),
              GCC_OK)
        << d.msg;
    EXPECT_EQ(used, threads < 5 ? threads : 5);
    EXPECT_EQ(r.calls.load(), 5);
    std::set<std::string> names(r.names.begin(), r.names.end());
    EXPECT_EQ(names, (std::set<std::string>{"plan.p0.cu", "plan.p1.cu", "plan.p2.cu", "plan.p3.cu",
                                            "plan.p4.cu"}));
    std::vector<std::string> got;
    for (auto &o : outs) {
      got.emplace_back(o.ptx, o.ptx_size);
      gcc_nvrtc_output_free(&o);
    }
    for (int p = 0; p < 5; p++)
      EXPECT_EQ(got[p], "plan.p" + std::to_string(p) + ".cu\n" + sp.programs[p].source);
    if (reference.empty())
      reference = got;
    EXPECT_EQ(got, reference) << threads << " threads";
  }
  for (int threads : {1, 5}) {
    Recorder r;
    r.fail = {"plan.p3.cu", "plan.p1.cu"};
    std::vector<gcc_nvrtc_output> outs(sp.n_programs);
    EXPECT_EQ(gcc_compile_programs(&sp, "plan", 90, threads, RecordingCompile, &r, outs.data(),
                                   nullptr, &d),
              GCC_ERR_INTERNAL);
    EXPECT_EQ(std::string(d.msg),
              "plan.p1.cu (kernels kern_8 .. kern_15): plan.p1.cu does not compile for sm_90")
        << threads << " threads";
    for (auto &o : outs)
      gcc_nvrtc_output_free(&o);
  }
  gcc_program_split_free(&sp);
}

// The training plan of the imported tiny ResNet on cuda:0: its generated
// kernels split and compiled by NVRTC (no cache) on 1 and 3 threads.
TEST(ProgramSplit, ARealPlanSplitsIntoProgramsThatCompileToTheSameCubins) {
  gcc_diag d{};
  gcc_graph *model = gcc_test::ImportForTraining("resnet_tiny"), *g = nullptr;
  ASSERT_NE(model, nullptr);
  gcc_options o{};
  o.mode = GCC_MODE_TRAIN;
  o.batch_size = 8;
  o.opt = model->training.opt;
  o.device = GCC_DEV_CUDA(0);
  o.device_explicit = 1;
  o.n_cuda_devices = 1;
  gcc_mem_plan mem{};
  ASSERT_EQ(gcc_compile_graph(model, &o, &g, &mem, &d), GCC_OK) << d.msg;
  gcc_kernel_set ks{};
  ASSERT_EQ(gcc_codegen_emit(g, GCC_DEV_CUDA(0), 132, &ks, &d), GCC_OK) << d.msg;
  ASSERT_GT(ks.n_kernels, GCC_PROGRAM_KERNELS) << "the test wants several programs";
  gcc_program_split sp{};
  ASSERT_EQ(gcc_program_split_source(ks.source, &sp, &d), GCC_OK) << d.msg;
  EXPECT_EQ(sp.n_programs, gcc_program_count(ks.n_kernels));
  ASSERT_EQ(sp.n_kernels, ks.n_kernels);
  for (int k = 0; k < ks.n_kernels; k++)
    EXPECT_STREQ(sp.kernel_names[k], ks.kernels[k].name) << "the plan's order";
  gcc_kernel_cache_config no_cache = {nullptr, 0};
  std::vector<std::string> first;
  for (int threads : {1, 3, 3}) {
    std::vector<gcc_nvrtc_output> outs(sp.n_programs);
    ASSERT_EQ(gcc_compile_programs(&sp, "resnet_tiny.cu", 90, threads, gcc_kernel_cache_hook,
                                   &no_cache, outs.data(), nullptr, &d),
              GCC_OK)
        << d.msg;
    std::vector<std::string> cubins;
    for (int p = 0; p < sp.n_programs; p++) {
      std::string ptx(outs[p].ptx, outs[p].ptx_size);
      // exactly this program's kernels
      EXPECT_EQ(Count(ptx, ".entry "), sp.programs[p].count) << "program " << p;
      for (int k = sp.programs[p].first; k < sp.programs[p].first + sp.programs[p].count; k++)
        EXPECT_NE(ptx.find(std::string(".entry ") + ks.kernels[k].name), std::string::npos)
            << ks.kernels[k].name;
      cubins.emplace_back(static_cast<const char *>(outs[p].cubin), outs[p].cubin_size);
      gcc_nvrtc_output_free(&outs[p]);
    }
    if (first.empty())
      first = cubins;
    EXPECT_TRUE(cubins == first) << threads << " threads: other cubins";
  }
  gcc_program_split_free(&sp);
  gcc_kernel_set_free(&ks);
  gcc_mem_plan_free(&mem);
  gcc_graph_free(g);
  gcc_graph_free(model);
}

} // namespace
