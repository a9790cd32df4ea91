// Fusion of the plans placed on CUDA: which groups form, their cuBLASLt
// epilogues, and the launch count of the MNIST MLP training step (the target
// of the codegen issue: at most 16 launches, against ~40 for PyTorch eager).
#include <gtest/gtest.h>

#include <map>
#include <string>

extern "C" {
#include "codegen/emit.h"
#include "codegen/fusion.h"
#include "graph/builder.h"
#include "codegen/lowering.h"
#include "graph/ops.h"
#include "models/models.h"
#include "runtime/plan.h"
#include "codegen/gemm_map.h"
#include "tests/test_graphs.h"

using gcc_test::FinishInlineTraining; // tests/test_graphs.h
using gcc_test::Opt;
using gcc_test::TinyRegressor;
}

namespace {

struct Compiled {
  gcc_graph *g = nullptr;
  gcc_mem_plan mem{};
  ~Compiled() {
    gcc_mem_plan_free(&mem);
    gcc_graph_free(g);
  }
};

void Compile(const gcc_graph *model, int device, gcc_mode mode, int64_t batch, Compiled *c,
             int precision = GCC_PRECISION_FP32) {
  gcc_options o{};
  o.precision = precision;
  o.mode = mode;
  o.batch_size = batch;
  o.opt = model->training.opt;
  o.device = device;
  o.device_explicit = 1;
  o.n_cuda_devices = 1;
  gcc_diag d{};
  FILE *sink = fopen("/dev/null", "w");
  o.warn_file = sink;
  ASSERT_EQ(gcc_compile_graph(model, &o, &c->g, &c->mem, &d), GCC_OK) << d.msg;
  fclose(sink);
}

int Launches(const gcc_graph *g) {
  int n = 0;
  for (int k = 0; k < g->n_groups; k++)
    n += g->groups[k].kind != GCC_GROUP_COPY;
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_op_desc *op = gcc_op(g->nodes[i].op);
    if (g->nodes[i].group < 0 && !(op->flags & (GCC_OPF_ALIAS | GCC_OPF_COPY)))
      n++;
  }
  return n;
}

std::map<std::string, std::string> EpilogueByFirstNode(const gcc_graph *g) {
  std::map<std::string, std::string> m;
  for (int k = 0; k < g->n_groups; k++)
    if (g->groups[k].kind == GCC_GROUP_GEMM)
      m[g->nodes[g->groups[k].nodes[0]].name] = gcc_epilogue_name(g->groups[k].epilogue);
  return m;
}

// Mixed precision (issue 19): the 16-bit plans of the MLP and both CNNs
// fold the same cuBLASLt epilogues into the same GEMMs as their float32
// plans (RELU_AUX_BIAS, BIAS, DRELU_BGRAD, BGRADA, and RELU_BIAS in
// evaluation), the bias and bias gradient in the GEMM's dtype as cuBLASLt
// takes them (gemm_map accepts every group); the only extra launches are
// the Casts that widen the 16-bit bias gradients to their float32 .grad.
TEST(Fusion, SixteenBitPlansKeepTheEpiloguesOfFloat32Plans) {
  struct Model {
    const char *name;
    gcc_status (*make)(uint64_t, gcc_graph **, gcc_diag *);
    uint64_t seed;
  } models[] = {{"mnist_mlp", gcc_model_mnist_mlp, GCC_MNIST_MLP_SEED},
                {"mnist_cnn", gcc_model_mnist_cnn, GCC_MNIST_CNN_SEED},
                {"cifar_cnn", gcc_model_cifar_cnn, GCC_CIFAR_CNN_SEED}};
  for (const Model &m : models)
    for (gcc_mode mode : {GCC_MODE_TRAIN, GCC_MODE_EVAL})
      for (int prec : {GCC_PRECISION_BF16, GCC_PRECISION_FP16}) {
        SCOPED_TRACE(std::string(m.name) + (mode == GCC_MODE_TRAIN ? " train " : " eval ") +
                     (prec == GCC_PRECISION_BF16 ? "bf16" : "fp16"));
        gcc_graph *model = nullptr;
        gcc_diag d{};
        ASSERT_EQ(m.make(m.seed, &model, &d), GCC_OK) << d.msg;
        Compiled a, b;
        Compile(model, GCC_DEV_CUDA(0), mode, 64, &a);
        Compile(model, GCC_DEV_CUDA(0), mode, 64, &b, prec);
        gcc_graph_free(model);
        std::map<std::string, std::string> e32 = EpilogueByFirstNode(a.g),
                                           e16 = EpilogueByFirstNode(b.g);
        EXPECT_EQ(e16, e32);
        int fused = 0;
        for (const auto &kv : e32)
          fused += kv.second != "CUBLASLT_EPILOGUE_DEFAULT";
        EXPECT_GE(fused, mode == GCC_MODE_TRAIN ? 5 : 3);
        gcc_dtype low = prec == GCC_PRECISION_BF16 ? GCC_DT_BFLOAT16 : GCC_DT_FLOAT16;
        int bias_grads = 0;
        for (int k = 0; k < b.g->n_groups; k++) {
          if (b.g->groups[k].kind != GCC_GROUP_GEMM)
            continue;
          gcc_colmajor_gemm cm;
          ASSERT_EQ(gcc_gemm_map(b.g, k, &cm, &d), GCC_OK) << d.msg;
          EXPECT_EQ(cm.dtype, low) << b.g->groups[k].name;
          if (cm.bias_value >= 0) {
            EXPECT_EQ(b.g->values[cm.bias_value].dtype, low) << b.g->groups[k].name;
          }
          bias_grads += cm.epilogue == GCC_EPI_DRELU_BGRAD || cm.epilogue == GCC_EPI_BGRADB;
        }
        EXPECT_EQ(bias_grads, mode == GCC_MODE_TRAIN ? 3 + 2 * (m.make == gcc_model_mnist_mlp) : 0);
      }
}

TEST(Fusion, MnistMlpTrainingStepIsSixteenLaunches) {
  gcc_graph *model;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &model, &d), GCC_OK) << d.msg;
  Compiled c;
  Compile(model, GCC_DEV_CUDA(0), GCC_MODE_TRAIN, 64, &c);
  EXPECT_EQ(Launches(c.g), 16);
  auto epi = EpilogueByFirstNode(c.g);
  for (const char *fc : {"fc1", "fc2", "fc3", "fc4"})
    EXPECT_EQ(epi[fc], "CUBLASLT_EPILOGUE_RELU_AUX_BIAS") << fc;
  EXPECT_EQ(epi["fc5"], "CUBLASLT_EPILOGUE_BIAS");
  for (const char *da : {"fc5/dA", "fc4/dA", "fc3/dA", "fc2/dA"})
    EXPECT_EQ(epi[da], "CUBLASLT_EPILOGUE_DRELU_BGRAD") << da;
  EXPECT_EQ(epi["fc5/dB"], "CUBLASLT_EPILOGUE_BGRADA");
  for (const char *db : {"fc4/dB", "fc3/dB", "fc2/dB", "fc1/dB"})
    EXPECT_EQ(epi[db], "CUBLASLT_EPILOGUE_DEFAULT") << db;
  int loss = 0, opt = 0, opt_nodes = 0;
  for (int k = 0; k < c.g->n_groups; k++) {
    loss += c.g->groups[k].kind == GCC_GROUP_LOSS;
    if (c.g->groups[k].kind == GCC_GROUP_OPTIMIZER) {
      opt++;
      opt_nodes = c.g->groups[k].n_nodes;
    }
  }
  EXPECT_EQ(loss, 1);
  EXPECT_EQ(opt, 1);
  EXPECT_EQ(opt_nodes, 10); // every parameter's update in one kernel
  // every CUDA node is in a group, except views
  for (int i = 0; i < c.g->n_nodes; i++) {
    const gcc_node *n = &c.g->nodes[i];
    if (GCC_DEV_IS_CUDA(n->device) && !(gcc_op(n->op)->flags & GCC_OPF_ALIAS)) {
      EXPECT_GE(n->group, 0) << n->name;
    }
  }
  // the generated program has exactly the two generated groups
  gcc_kernel_set ks;
  ASSERT_EQ(gcc_codegen_emit(c.g, GCC_DEV_CUDA(0), 132, &ks, &d), GCC_OK) << d.msg;
  EXPECT_EQ(ks.n_kernels, 2);
  EXPECT_NE(std::string(ks.source).find("extern \"C\" __global__ void"), std::string::npos);
  gcc_kernel_set_free(&ks);
  gcc_graph_free(model);
}

TEST(Fusion, CpuPlansAreNotFused) {
  gcc_graph *model;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &model, &d), GCC_OK) << d.msg;
  Compiled c;
  Compile(model, GCC_DEV_CPU, GCC_MODE_TRAIN, 64, &c);
  EXPECT_EQ(c.g->n_groups, 0);
  gcc_graph_free(model);
}

// x (N, C) -> Add bias (C) -> Relu -> Identity -> ReduceSumTo (C): one
// pointwise group that ends in the reduction.
TEST(Fusion, PointwiseChainEndsInOneReduction) {
  gcc_builder *b = gcc_builder_new("chain", 1);
  int64_t xd[2] = {GCC_BATCH_DIM, 8}, bd[1] = {8}, td[1] = {GCC_BATCH_DIM};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, xd);
  int t = gcc_build_input(b, "t", GCC_DT_FLOAT32, 1, bd);
  (void)td;
  float bias[8] = {0};
  int p = gcc_build_param(b, "bias", 1, bd, bias);
  int ins[2] = {x, p};
  int y = gcc_build_op(b, GCC_OP_ADD, "add", "add.out", ins, 2);
  y = gcc_build_relu(b, "relu", y);
  y = gcc_build_op(b, GCC_OP_IDENTITY, "id", "id.out", &y, 1);
  y = gcc_build_op(b, GCC_OP_REDUCE_SUM_TO, "sum", "sum.out", &y, 1);
  int64_t shape[1] = {8};
  if (y >= 0)
    gcc_node_set_ints(b->g, b->g->values[y].producer, "shape", shape, 1);
  int loss = gcc_build_mse(b, "loss", y, t);
  gcc_build_output(b, loss);
  gcc_build_training_spec ts{};
  ts.loss = "loss";
  ts.input = "x";
  ts.target = "t";
  ts.dataset = "inline";
  ts.opt.kind = GCC_OPT_SGD;
  ts.opt.lr = 0.1f;
  ts.batch_size = 4;
  ts.epochs = 1;
  gcc_build_training(b, &ts);
  gcc_graph *model;
  gcc_diag d{};
  ASSERT_EQ(gcc_builder_finish(b, &model, &d), GCC_OK) << d.msg;
  Compiled c;
  Compile(model, GCC_DEV_CUDA(0), GCC_MODE_EVAL, 4, &c);
  int found = 0;
  for (int k = 0; k < c.g->n_groups; k++) {
    const gcc_group *gr = &c.g->groups[k];
    if (gr->kind != GCC_GROUP_POINTWISE)
      continue;
    std::string names;
    for (int m = 0; m < gr->n_nodes; m++)
      names += std::string(c.g->nodes[gr->nodes[m]].name) + ",";
    if (names == "add,relu,id,sum,")
      found = 1;
  }
  EXPECT_TRUE(found);
  gcc_kernel_set ks;
  ASSERT_EQ(gcc_codegen_emit(c.g, GCC_DEV_CUDA(0), 132, &ks, &d), GCC_OK) << d.msg;
  std::string src(ks.source);
  EXPECT_NE(src.find("fuses: add (Add), relu (Relu), id (Identity), sum (ReduceSumTo)"),
            std::string::npos)
      << src;
  gcc_kernel_set_free(&ks);
  gcc_graph_free(model);
}

// The CIFAR-10 CNN on cuda:0: every convolution and pooling (forward and
// backward) is a cuDNN call of its own, never fused into a generated
// kernel; the ReLU after each forward convolution joins its cuDNN call
// (issue 29: cudnnConvolutionBiasActivationForward), the ReLU gradients are
// generated kernels; the manifest lists each cuDNN call by name.
TEST(Fusion, CifarCnnConvolutionsArecuDnnCallsOfTheirOwn) {
  gcc_graph *model = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_cifar_cnn(GCC_CIFAR_CNN_SEED, &model, &d), GCC_OK) << d.msg;
  Compiled c;
  Compile(model, GCC_DEV_CUDA(0), GCC_MODE_TRAIN, 4, &c);
  if (HasFatalFailure())
    return;
  std::map<std::string, std::string> calls; // node -> cuDNN call
  for (int k = 0; k < c.g->n_groups; k++) {
    const gcc_group *gr = &c.g->groups[k];
    for (int m = 0; m < gr->n_nodes; m++) {
      const gcc_node *n = &c.g->nodes[gr->nodes[m]];
      bool cudnn_op = gcc_lowering_of(n->op)->kind == GCC_LOWER_LIBRARY ||
                      (m == 1 && gcc_fusion_conv_relu(c.g, gr->nodes[0]) == gr->nodes[1]);
      EXPECT_EQ(cudnn_op, gr->kind == GCC_GROUP_CUDNN) << n->name << " in " << gr->name;
    }
    if (gr->kind == GCC_GROUP_CUDNN) {
      // a forward convolution with its ReLU, else one node
      const gcc_node *first = &c.g->nodes[gr->nodes[0]];
      ASSERT_EQ(gr->n_nodes, first->op == GCC_OP_CONV ? 2 : 1) << gr->name;
      if (gr->n_nodes == 2) {
        EXPECT_EQ(c.g->nodes[gr->nodes[1]].op, GCC_OP_RELU) << gr->name;
      }
      calls[c.g->nodes[gr->nodes[0]].name] = gcc_lowering_of(c.g->nodes[gr->nodes[0]].op)->call;
    }
  }
  const std::map<std::string, std::string> want = {{"conv1", "cudnnConvolutionForward"},
                                                   {"pool1", "cudnnPoolingForward"},
                                                   {"conv2", "cudnnConvolutionForward"},
                                                   {"pool2", "cudnnPoolingForward"},
                                                   {"pool2/dX", "cudnnPoolingBackward"},
                                                   {"conv2/dX", "cudnnConvolutionBackwardData"},
                                                   {"conv2/dW", "cudnnConvolutionBackwardFilter"},
                                                   {"conv2/dB", "cudnnConvolutionBackwardBias"},
                                                   {"pool1/dX", "cudnnPoolingBackward"},
                                                   {"conv1/dW", "cudnnConvolutionBackwardFilter"},
                                                   {"conv1/dB", "cudnnConvolutionBackwardBias"}};
  EXPECT_EQ(calls, want);
  // 11 cuDNN calls (two with their ReLU), 9 cuBLASLt GEMMs, 2 ReLU-gradient
  // kernels, the loss and the optimizer kernel
  EXPECT_EQ(Launches(c.g), 24);
  gcc_kernel_set ks;
  ASSERT_EQ(gcc_codegen_emit(c.g, GCC_DEV_CUDA(0), 132, &ks, &d), GCC_OK) << d.msg;
  EXPECT_EQ(ks.n_kernels, 4);
  char *json = nullptr;
  ASSERT_EQ(gcc_codegen_manifest(c.g, GCC_DEV_CUDA(0), "sm_90", &ks, &json, &d), GCC_OK) << d.msg;
  std::string m(json);
  EXPECT_NE(m.find("\"library\": \"cudnn\""), std::string::npos);
  EXPECT_NE(m.find("\"call\": \"cudnnConvolutionBackwardFilter\""), std::string::npos);
  EXPECT_NE(m.find("\"activation\": \"relu\""), std::string::npos);
  EXPECT_NE(m.find("\"launches_per_step\": 24"), std::string::npos) << m.substr(m.size() - 200);
  free(json);
  gcc_kernel_set_free(&ks);
  gcc_graph_free(model);
}

TEST(Fusion, NoEpilogueCublasLtLacksForTheShape) {
  gcc_graph *lin = nullptr;
  gcc_diag d{};
  ASSERT_EQ(gcc_model_linear(1, &lin, &d), GCC_OK) << d.msg;
  gcc_graph *reg = TinyRegressor();
  for (const gcc_graph *model : {(const gcc_graph *)lin, (const gcc_graph *)reg}) {
    SCOPED_TRACE(model->name);
    Compiled c;
    Compile(model, GCC_DEV_CUDA(0), GCC_MODE_TRAIN, 8, &c);
    if (HasFatalFailure())
      break;
    int gemms = 0, reductions = 0;
    for (int gi = 0; gi < c.g->n_groups; gi++) {
      const gcc_group *gr = &c.g->groups[gi];
      for (int i = 0; i < gr->n_nodes; i++)
        reductions +=
            gr->kind == GCC_GROUP_POINTWISE && c.g->nodes[gr->nodes[i]].op == GCC_OP_REDUCE_SUM_TO;
      if (gr->kind != GCC_GROUP_GEMM)
        continue;
      gcc_colmajor_gemm m{};
      ASSERT_EQ(gcc_gemm_map(c.g, gi, &m, &d), GCC_OK) << d.msg;
      gemms++;
      EXPECT_FALSE(m.epilogue == GCC_EPI_BGRADB && m.n == 1)
          << "group " << gr->name << " is BGRADB with n = 1";
      EXPECT_FALSE((m.epilogue == GCC_EPI_DRELU || m.epilogue == GCC_EPI_DRELU_BGRAD) && m.k == 1)
          << "group " << gr->name << " is " << gcc_epilogue_name(m.epilogue) << " with k = 1";
      // a forward ReLU writes its bit-mask only for a DRELU GEMM that reads it
      EXPECT_NE(m.epilogue, GCC_EPI_RELU_AUX_BIAS) << "group " << gr->name;
    }
    EXPECT_GT(gemms, 0);
    EXPECT_GT(reductions, 0) << "the bias sums are generated kernels";
  }
  gcc_graph_free(reg);
  gcc_graph_free(lin);
}

} // namespace
