// Every kernel the code generator emits for the reference plans compiles
// with NVRTC to PTX and to a cubin for sm_80 and sm_90, and ptxas accepts
// the PTX. Plans: the MNIST MLP (training at batch 64 and 13, evaluation,
// the CNNs cifar_cnn and mnist_cnn (training and evaluation),
// SGD and Adam), the nn.Linear MSE model, and a pointwise chain ending in
// a reduction (broadcast, float4 and reduction code paths); in bfloat16 and
// float16 (--precision) the MLP, both CNNs, MixedOpsNet (16-bit poolings,
// BatchNorm, Concat, Transpose, Pad, ConvTranspose) and the imported
// ResNet-style and MobileNet-style fixtures; LayerNormalization's kernels
// (forward with and without Mean / InvStdDev, dX, dScale, dB; float32 and
// behind a bfloat16 Linear).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

extern "C" {
#include "codegen/emit.h"
#include "codegen/nvrtc.h"
#include "graph/builder.h"
#include "graph/ops.h"
#include "models/models.h"
#include "runtime/plan.h"
}
#include "tests/imported_graphs.h"
#include "tests/test_graphs.h"
#include "tests/testutil.h"

using namespace gcc_test; // tests/testutil.h

namespace {

int Ptxas(const std::string &ptx, int sm, std::string *log) {
  std::string base = TmpDir() + "/codegen_" + std::to_string(getpid()) + "_" + std::to_string(sm);
  std::ofstream(base + ".ptx") << ptx;
  std::string cmd = "/usr/local/cuda/bin/ptxas -arch=sm_" + std::to_string(sm) + " -o " + base +
                    ".cubin " + base + ".ptx > " + base + ".log 2>&1";
  int rc = system(cmd.c_str());
  std::ifstream in(base + ".log");
  log->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

gcc_graph *ChainModel() {
  gcc_builder *b = gcc_builder_new("chain", 1);
  int64_t xd[2] = {GCC_BATCH_DIM, 12}, bd[1] = {12}, td[2] = {GCC_BATCH_DIM, 12};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, xd);
  int t = gcc_build_input(b, "t", GCC_DT_FLOAT32, 2, td);
  float zeros[12] = {0};
  int p = gcc_build_param(b, "bias", 1, bd, zeros);
  int ins[2] = {x, p};
  int y = gcc_build_op(b, GCC_OP_ADD, "add", "add.out", ins, 2);
  y = gcc_build_relu(b, "relu", y);
  int ins2[2] = {y, x};
  y = gcc_build_op(b, GCC_OP_ADD, "add2", "add2.out", ins2, 2);
  int loss = gcc_build_mse(b, "loss", y, t);
  gcc_build_output(b, loss);
  return FinishInlineTraining(b, "loss", nullptr, "x", "t", Opt(GCC_OPT_ADAM, 0.01f));
}

// Gather (an embedding of int64 ids), Slice with a step and Expand, in
// training: their kernels and GatherGrad's, SliceGrad's.
gcc_graph *IndexModel() {
  gcc_builder *b = gcc_builder_new("index", 1);
  int64_t idd[2] = {GCC_BATCH_DIM, 5}, ed[2] = {7, 6}, pd[2] = {5, 1},
          td[3] = {GCC_BATCH_DIM, 5, 3};
  int ids = gcc_build_input(b, "ids", GCC_DT_INT64, 2, idd);
  int t = gcc_build_input(b, "t", GCC_DT_FLOAT32, 3, td);
  std::vector<float> e(42, 0.5f), p(5, 0.25f);
  int table = gcc_build_param(b, "table", 2, ed, e.data());
  int pos = gcc_build_param(b, "pos", 2, pd, p.data());
  int gi[2] = {table, ids};
  int y = gcc_build_op(b, GCC_OP_GATHER, "emb", "emb.out", gi, 2); // [N, 5, 6]
  int sl = gcc_build_op(b, GCC_OP_SLICE, "every_other", "every_other.out", &y, 1);
  int64_t st[1] = {0}, en[1] = {6}, ax[1] = {2}, sp[1] = {2};
  gcc_build_set_ints(b, sl, "starts", st, 1);
  gcc_build_set_ints(b, sl, "ends", en, 1);
  gcc_build_set_ints(b, sl, "axes", ax, 1);
  gcc_build_set_ints(b, sl, "steps", sp, 1);
  int ex = gcc_build_op(b, GCC_OP_EXPAND, "pos_expand", "pos_expand.out", &pos, 1);
  int64_t es[2] = {5, 3};
  gcc_build_set_ints(b, ex, "shape", es, 2);
  int ai[2] = {sl, ex};
  int sum = gcc_build_op(b, GCC_OP_ADD, "add", "add.out", ai, 2);
  int loss = gcc_build_mse(b, "loss", sum, t);
  gcc_build_output(b, loss);
  return FinishInlineTraining(b, "loss", nullptr, "ids", "t", Opt(GCC_OPT_SGD, 0.1f));
}

struct Case {
  std::string name;
  gcc_graph *model;
  gcc_mode mode;
  int64_t batch;
  int expect_min_kernels;
  int precision = 0;       /* --precision: 16-bit kernels for bf16 / fp16 */
  bool loss_scale = false; /* fp16 dynamic loss scaling (GradScaler's kernels) */
  /* substrings of kernel names the set must have (space-separated), or NULL */
  const char *expect_kernels = nullptr;
};

void CompileAll(const Case &c) {
  SCOPED_TRACE(c.name);
  gcc_options o{};
  o.mode = c.mode;
  o.batch_size = c.batch;
  o.opt = c.model->training.opt;
  o.device = GCC_DEV_CUDA(0);
  o.device_explicit = 1;
  o.n_cuda_devices = 1;
  o.precision = c.precision;
  if (c.loss_scale)
    o.opt.scaler = {GCC_LOSS_SCALE_DYNAMIC, GCC_SCALER_INIT_SCALE, GCC_SCALER_GROWTH_FACTOR,
                    GCC_SCALER_BACKOFF_FACTOR, GCC_SCALER_GROWTH_INTERVAL};
  FILE *sink = fopen("/dev/null", "w");
  o.warn_file = sink;
  gcc_graph *g = nullptr;
  gcc_mem_plan mem{};
  gcc_diag d{};
  ASSERT_EQ(gcc_compile_graph(c.model, &o, &g, &mem, &d), GCC_OK) << d.msg;
  fclose(sink);
  gcc_kernel_set ks;
  ASSERT_EQ(gcc_codegen_emit(g, GCC_DEV_CUDA(0), 132, &ks, &d), GCC_OK) << d.msg;
  EXPECT_GE(ks.n_kernels, c.expect_min_kernels);
  if (c.expect_kernels) {
    std::string want(c.expect_kernels), have;
    for (int i = 0; i < ks.n_kernels; i++)
      have += std::string(" ") + ks.kernels[i].name;
    for (size_t at = 0, sp; at < want.size(); at = sp + 1) {
      sp = want.find(' ', at);
      if (sp == std::string::npos)
        sp = want.size();
      std::string k = want.substr(at, sp - at);
      EXPECT_NE(have.find(k), std::string::npos) << "no kernel named *" << k << "*:" << have;
    }
  }
  if (c.loss_scale) { /* the check, the update, and the unscale in the optimizer */
    const std::string src(ks.source);
    EXPECT_NE(src.find("AmpNonFiniteCheck"), std::string::npos);
    EXPECT_NE(src.find("AmpUpdateScale"), std::string::npos);
    EXPECT_NE(src.find("g[i] * inv"), std::string::npos);
  }
  if (c.precision == GCC_PRECISION_BF16 || c.precision == GCC_PRECISION_FP16) { /* 16 bits */
    bool bf16 = c.precision == GCC_PRECISION_BF16;
    std::string src(ks.source);
    EXPECT_NE(src.find(bf16 ? "__nv_bfloat16*" : "__half*"), std::string::npos);
    // training: the optimizer kernel stores each updated weight's 16-bit copy
    // (passes/autocast.c), and no Cast of a parameter is left
    size_t store =
        src.find(bf16 ? "h[i] = __float2bfloat16_rn(p[i]);" : "h[i] = __float2half_rn(p[i]);");
    EXPECT_EQ(store != std::string::npos, c.mode == GCC_MODE_TRAIN) << src;
    if (c.mode == GCC_MODE_TRAIN) {
      EXPECT_NE(src.rfind("optimizer_", store), std::string::npos);
      for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == GCC_OP_CAST) {
          EXPECT_NE(g->values[g->nodes[i].inputs[0]].kind, GCC_VALUE_PARAM) << g->nodes[i].name;
        }
    }
  }
  for (int sm : {80, 90}) {
    gcc_nvrtc_output out{};
    ASSERT_EQ(gcc_nvrtc_compile(ks.source, c.name.c_str(), sm, &out, &d), GCC_OK) << d.msg << "\n"
                                                                                  << ks.source;
    EXPECT_GT(out.cubin_size, 4u);
    EXPECT_EQ(memcmp(out.cubin,
                     "\x7f"
                     "ELF",
                     4),
              0);
    std::string ptx(out.ptx, out.ptx_size);
    for (int k = 0; k < ks.n_kernels; k++)
      EXPECT_NE(ptx.find(std::string(".entry ") + ks.kernels[k].name), std::string::npos)
          << ks.kernels[k].name;
    std::string log;
    EXPECT_EQ(Ptxas(ptx, sm, &log), 0) << log;
    gcc_nvrtc_output_free(&out);
  }
  gcc_kernel_set_free(&ks);
  gcc_mem_plan_free(&mem);
  gcc_graph_free(g);
}

TEST(CodegenNvrtc, EveryGeneratedKernelCompilesForSm80AndSm90) {
  gcc_graph *mlp = nullptr, *lin = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &mlp, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_model_linear(GCC_LINEAR_SEED, &lin, &d), GCC_OK) << d.msg;
  gcc_graph *chain = ChainModel();
  ASSERT_NE(chain, nullptr);
  gcc_graph *mlp_adam = nullptr;
  ASSERT_EQ(gcc_graph_clone(mlp, &mlp_adam, &d), GCC_OK) << d.msg;
  mlp_adam->training.opt.kind = GCC_OPT_ADAM;
  mlp_adam->training.opt.lr = 1e-3f;
  std::vector<Case> cases = {
      {"mnist_mlp_train_b64", mlp, GCC_MODE_TRAIN, 64, 2},
      {"mnist_mlp_train_b13", mlp, GCC_MODE_TRAIN, 13, 2},
      {"mnist_mlp_eval_b1000", mlp, GCC_MODE_EVAL, 1000, 1},
      {"mnist_mlp_adam_b64", mlp_adam, GCC_MODE_TRAIN, 64, 2},
      {"linear_train_b16", lin, GCC_MODE_TRAIN, 16, 2},
      {"chain_train_b8", chain, GCC_MODE_TRAIN, 8, 3},
      {"chain_train_b5", chain, GCC_MODE_TRAIN, 5, 3},
      // past 16384 logits: the loss a block per row, then one block sums
      {"mnist_mlp_train_b2048", mlp, GCC_MODE_TRAIN, 2048, 3},
      {"mnist_mlp_eval_b2000", mlp, GCC_MODE_EVAL, 2000, 2},
  };
  for (const Case &c : cases)
    CompileAll(c);
  { // Softmax and LogSoftmax a block per line, 1000 classes' loss a block per row
    gcc_graph *wide = gcc_test::WideSoftmaxModel();
    ASSERT_NE(wide, nullptr);
    CompileAll({"wide_softmax_eval_b7", wide, GCC_MODE_EVAL, 7, 4});
    CompileAll({"wide_softmax_train_b64", wide, GCC_MODE_TRAIN, 64, 4});
    gcc_graph_free(wide);
  }
  // the CNNs: the generated groups around the cuDNN calls (ReLU and its
  // gradient, bias epilogues, loss, optimizer)
  gcc_graph *cifar = nullptr, *mcnn = nullptr;
  ASSERT_EQ(gcc_model_cifar_cnn(GCC_CIFAR_CNN_SEED, &cifar, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_model_mnist_cnn(GCC_MNIST_CNN_SEED, &mcnn, &d), GCC_OK) << d.msg;
  const Case cnn_cases[] = {
      {"cifar_cnn_train_b4", cifar, GCC_MODE_TRAIN, 4, 4},
      {"cifar_cnn_train_b64", cifar, GCC_MODE_TRAIN, 64, 4},
      // evaluation: the ReLUs joined their convolutions' cuDNN calls (issue
      // 29), the loss kernel is what is generated
      {"cifar_cnn_eval_b1000", cifar, GCC_MODE_EVAL, 1000, 1},
      {"mnist_cnn_train_b64", mcnn, GCC_MODE_TRAIN, 64, 4},
      {"mnist_cnn_eval_b1000", mcnn, GCC_MODE_EVAL, 1000, 1},
  };
  for (const Case &c : cnn_cases)
    CompileAll(c);
  { // the indexing ops (Gather, Slice, Expand and their gradients)
    gcc_graph *index = IndexModel();
    ASSERT_NE(index, nullptr);
    CompileAll({"index_train_b4", index, GCC_MODE_TRAIN, 4, 5});
    gcc_graph_free(index);
  }
  // mixed precision: the same plans with 16-bit storage (cuda_bf16.h,
  // cuda_fp16.h from the toolkit's include directory)
  const Case mixed[] = {
      {"mnist_mlp_train_b64_bf16", mlp, GCC_MODE_TRAIN, 64, 2, GCC_PRECISION_BF16},
      {"mnist_mlp_train_b13_fp16", mlp, GCC_MODE_TRAIN, 13, 2, GCC_PRECISION_FP16},
      {"mnist_mlp_eval_b1000_bf16", mlp, GCC_MODE_EVAL, 1000, 1, GCC_PRECISION_BF16},
      {"mnist_mlp_adam_b64_fp16", mlp_adam, GCC_MODE_TRAIN, 64, 2, GCC_PRECISION_FP16},
      {"linear_train_b16_bf16", lin, GCC_MODE_TRAIN, 16, 2, GCC_PRECISION_BF16},
      {"cifar_cnn_train_b64_bf16", cifar, GCC_MODE_TRAIN, 64, 4, GCC_PRECISION_BF16},
      {"mnist_cnn_eval_b1000_fp16", mcnn, GCC_MODE_EVAL, 1000, 2, GCC_PRECISION_FP16},
      {"mnist_mlp_adam_b64_bf16", mlp_adam, GCC_MODE_TRAIN, 64, 2, GCC_PRECISION_BF16},
      // fp16 loss scaling: the gradient check, the scale update, and the
      // optimizers reading the scale from device memory (SGD with and without
      // a momentum buffer, Adam)
      {"mnist_mlp_train_b64_fp16_scaled", mlp, GCC_MODE_TRAIN, 64, 4, GCC_PRECISION_FP16, true},
      {"mnist_mlp_adam_b64_fp16_scaled", mlp_adam, GCC_MODE_TRAIN, 64, 4, GCC_PRECISION_FP16, true},
      {"linear_train_b16_fp16_scaled", lin, GCC_MODE_TRAIN, 16, 4, GCC_PRECISION_FP16, true},
  };
  for (const Case &c : mixed)
    CompileAll(c);
  gcc_graph_free(cifar);
  gcc_graph_free(mcnn);
  gcc_graph_free(mlp);
  gcc_graph_free(mlp_adam);
  gcc_graph_free(lin);
  gcc_graph_free(chain);
}

// Every 16-bit plan of the CNNs not above, and of the models whose
// poolings, BatchNorms, Concat, Transpose, Pad, ConvTranspose and Dropout
// run in 16 bits (their generated kernels load and store __nv_bfloat16 /
// __half): MixedOpsNet and the imported ResNet-style and MobileNet-style
// fixtures, each dtype in training (about 20 s of NVRTC and ptxas per
// training plan on a loaded 2-core machine).
TEST(CodegenNvrtc, EverySixteenBitKernelOfTheCnnsAndImportedModelsCompiles) {
  gcc_graph *cifar = nullptr, *mcnn = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_cifar_cnn(GCC_CIFAR_CNN_SEED, &cifar, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_model_mnist_cnn(GCC_MNIST_CNN_SEED, &mcnn, &d), GCC_OK) << d.msg;
  gcc_graph *net = MixedOpsNet(), *resnet = ImportForTraining("resnet_tiny"),
            *mobilenet = ImportForTraining("mobilenet_tiny");
  ASSERT_TRUE(net && resnet && mobilenet);
  const Case mixed_cnn[] = {
      {"cifar_cnn_train_b64_fp16", cifar, GCC_MODE_TRAIN, 64, 4, GCC_PRECISION_FP16},
      {"cifar_cnn_eval_b1000_bf16", cifar, GCC_MODE_EVAL, 1000, 2, GCC_PRECISION_BF16},
      {"mnist_cnn_train_b64_bf16", mcnn, GCC_MODE_TRAIN, 64, 4, GCC_PRECISION_BF16},
      {"mnist_cnn_train_b64_fp16", mcnn, GCC_MODE_TRAIN, 64, 4, GCC_PRECISION_FP16},
      {"mixed_ops_net_train_b5_fp16", net, GCC_MODE_TRAIN, 5, 8, GCC_PRECISION_FP16},
      {"mixed_ops_net_eval_b64_bf16", net, GCC_MODE_EVAL, 64, 4, GCC_PRECISION_BF16},
      {"resnet_tiny_train_b64_bf16", resnet, GCC_MODE_TRAIN, 64, 6, GCC_PRECISION_BF16},
      {"resnet_tiny_train_b4_fp16", resnet, GCC_MODE_TRAIN, 4, 6, GCC_PRECISION_FP16},
      {"resnet_tiny_eval_b1000_fp16", resnet, GCC_MODE_EVAL, 1000, 3, GCC_PRECISION_FP16},
      {"mobilenet_tiny_train_b64_bf16", mobilenet, GCC_MODE_TRAIN, 64, 6, GCC_PRECISION_BF16},
      {"mobilenet_tiny_train_b4_fp16", mobilenet, GCC_MODE_TRAIN, 4, 6, GCC_PRECISION_FP16},
      {"mobilenet_tiny_eval_b1000_bf16", mobilenet, GCC_MODE_EVAL, 1000, 3, GCC_PRECISION_BF16},
  };
  for (const Case &c : mixed_cnn)
    CompileAll(c);
  gcc_graph_free(net);
  gcc_graph_free(resnet);
  gcc_graph_free(mobilenet);
  gcc_graph_free(cifar);
  gcc_graph_free(mcnn);
}

// LayerNormalization (issue 30): x [N, 16, 384] (a GPT block's width, more
// than the 256 lanes of a row) -> LayerNormalization -> MSE, trained with
// Adam (the forward, dX, and the chunked column sums of dScale and dB); the
// same behind a Linear in bfloat16 (a Cast to float32 before it); and an
// evaluation graph whose LayerNormalization over axis 2 of [N, 3, 4, 5], with
// no B, also writes Mean and InvStdDev (graph outputs).
gcc_graph *LayerNormNet(bool linear) {
  gcc_builder *b = gcc_builder_new(linear ? "ln_linear" : "ln_net", 1);
  int64_t xd[3] = {GCC_BATCH_DIM, 16, 384}, cd = 384;
  std::vector<float> ones(384, 1.0f), zeros(384, 0.0f);
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 3, xd);
  int t = gcc_build_input(b, "t", GCC_DT_FLOAT32, 3, xd);
  int h = x;
  if (linear) {
    int64_t x2[2] = {GCC_BATCH_DIM, 384};
    x = gcc_build_input(b, "x2", GCC_DT_FLOAT32, 2, x2);
    t = gcc_build_input(b, "t2", GCC_DT_FLOAT32, 2, x2);
    h = gcc_build_linear(b, "fc", x, 384, 384);
  }
  int in[3] = {h, gcc_build_param(b, "ln.weight", 1, &cd, ones.data()),
               gcc_build_param(b, "ln.bias", 1, &cd, zeros.data())};
  int y = gcc_build_op(b, GCC_OP_LAYER_NORM, "ln", "ln.out", in, 3);
  int loss = gcc_build_mse(b, "loss", y, t);
  gcc_build_output(b, loss);
  return FinishInlineTraining(b, "loss", "ln.out", linear ? "x2" : "x", linear ? "t2" : "t",
                              Opt(GCC_OPT_ADAM, 0.01f));
}

gcc_graph *LayerNormStatsNet() {
  gcc_builder *b = gcc_builder_new("ln_stats", 1);
  int64_t xd[4] = {GCC_BATCH_DIM, 3, 4, 5}, sd[2] = {4, 5};
  std::vector<float> scale(20, 0.5f);
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 4, xd);
  int in[2] = {x, gcc_build_const(b, "scale", GCC_DT_FLOAT32, 2, sd, scale.data())};
  int y = gcc_build_op(b, GCC_OP_LAYER_NORM, "ln", "ln.out", in, 2);
  gcc_build_set_int(b, y, "axis", 2);
  gcc_graph *g = b->g;
  int node = g->values[y].producer, stats[2];
  gcc_diag d{};
  const char *names[2] = {"ln.mean", "ln.inv_std_dev"};
  for (int k = 0; k < 2; k++) {
    EXPECT_EQ(gcc_graph_add_value(g, names[k], GCC_DT_UNDEFINED, nullptr, GCC_VALUE_ACTIVATION,
                                  nullptr, 0, &stats[k], &d),
              GCC_OK)
        << d.msg;
    gcc_node *n = &g->nodes[node];
    int *o = static_cast<int *>(realloc(n->outputs, (size_t)(n->n_outputs + 1) * sizeof(int)));
    EXPECT_NE(o, nullptr);
    o[n->n_outputs++] = stats[k];
    n->outputs = o;
    g->values[stats[k]].producer = node;
  }
  gcc_build_output(b, y);
  gcc_build_output(b, stats[0]);
  gcc_build_output(b, stats[1]);
  gcc_graph *out = nullptr;
  EXPECT_EQ(gcc_builder_finish(b, &out, &d), GCC_OK) << d.msg;
  return out;
}

TEST(CodegenNvrtc, LayerNormKernelsCompileForSm80AndSm90) {
  gcc_graph *net = LayerNormNet(false), *lin = LayerNormNet(true), *stats = LayerNormStatsNet();
  ASSERT_TRUE(net && lin && stats);
  const Case cases[] = {
      {"layer_norm_train_b4", net, GCC_MODE_TRAIN, 4, 6, 0, false,
       "k_ln_k ln_dScale_k ln_dB_k _stats _part"},
      {"layer_norm_eval_b3", net, GCC_MODE_EVAL, 3, 1, 0, false, "k_ln_k"},
      {"layer_norm_linear_train_b64_bf16", lin, GCC_MODE_TRAIN, 64, 6, GCC_PRECISION_BF16, false,
       "k_ln_k ln_dX_k ln_dScale_k ln_dB_k _stats _part"},
      {"layer_norm_stats_eval_b2", stats, GCC_MODE_EVAL, 2, 1, 0, false, "k_ln_k"},
  };
  for (const Case &c : cases)
    CompileAll(c);
  gcc_graph_free(net);
  gcc_graph_free(lin);
  gcc_graph_free(stats);
}

// The generated epilogue kernels (cuBLASLt refused the fused epilogue) for
// every epilogue and every GEMM dtype.
TEST(CodegenNvrtc, EpilogueKernelsOfEveryDtypeCompileForSm80AndSm90) {
  std::vector<gcc_epilogue_work> w;
  for (gcc_dtype t : {GCC_DT_FLOAT32, GCC_DT_BFLOAT16, GCC_DT_FLOAT16})
    for (int kind : {4, 6, 134, 136, 152, 512}) {
      gcc_epilogue_work e{};
      e.kind = kind;
      e.m = 40;
      e.n = 24;
      e.k = 16;
      e.ldd = 40;
      e.ldb = 24;
      e.aux_ld = 128;
      e.dtype = t;
      w.push_back(e);
    }
  gcc_kernel_set ks;
  gcc_diag d{};
  ASSERT_EQ(gcc_codegen_gemm_epilogues(w.data(), (int)w.size(), 132, &ks, &d), GCC_OK) << d.msg;
  EXPECT_NE(std::string(ks.source).find("__float2bfloat16_rn("), std::string::npos);
  EXPECT_NE(std::string(ks.source).find("__half2float("), std::string::npos);
  for (int sm : {80, 90}) {
    gcc_nvrtc_output out{};
    ASSERT_EQ(gcc_nvrtc_compile(ks.source, "epilogues_all_dtypes", sm, &out, &d), GCC_OK)
        << d.msg << "\n"
        << ks.source;
    std::string log;
    EXPECT_EQ(Ptxas(std::string(out.ptx, out.ptx_size), sm, &log), 0) << log;
    gcc_nvrtc_output_free(&out);
  }
  gcc_kernel_set_free(&ks);
}

} // namespace
