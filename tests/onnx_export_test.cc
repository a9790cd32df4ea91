// onnx_export_test: gcc-train's ONNX export (onnx/export.h, gcc-train
// --export-onnx).
//
//  - ONNX Runtime agreement: the MNIST MLP and CNN (models/*.pb), the
//    ResNet-style network of train_import_test (imported for training,
//    BatchNormalization kept, trained 3 SGD steps on its fixture batch) and
//    the MobileNetV2-style import of tests/onnx, plus a chain of every other
//    mapped op built in the IR, are exported here; ONNX Runtime ran the same
//    exported files (tests/fixtures/make_onnx_export_fixtures.py, which also
//    runs onnx.checker.check_model on each) and its outputs are the fixture
//    (tests/fixtures/onnx_export.fix). gcc-train's outputs for the fixture's
//    inputs must be within 1e-5 of the largest magnitude of ONNX Runtime's.
//    The fixture records a digest of each file ONNX Runtime ran; the models
//    whose export is deterministic across machines must match it exactly.
//  - Round trip: the exported bytes imported again with our importer give
//    the same outputs bitwise (BatchNormalization kept, gcc_onnx_options
//    .train) or within 1e-6 (folded into the Conv, the default import).
//  - The exported ModelProto itself: opset, IR version, inputs with the
//    symbolic batch, outputs logits and probabilities, BatchNormalization in
//    inference form holding the trained running statistics bit for bit, no
//    loss, every node input defined before use.
//  - Refusals naming the node (an op with no ONNX counterpart, a dilated
//    AveragePool, a graph with a training spec), the IR op -> ONNX table.
//  - gcc-train --export-onnx: the file written, collisions and symbolic
//    links as every output, the exportability checked before training,
//    the exported file run by gcc-run.
//
// Regenerating the fixture (needs onnx and onnxruntime, e.g. the bench venv):
//   GCC_ONNX_EXPORT_DIR=$PWD/runs/onnx-export bazel run //tests:onnx_export_test --
//       --gtest_filter='OnnxExportOrt.*'   (one command)
//   python3 tests/fixtures/make_onnx_export_fixtures.py --models runs/onnx-export
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

extern "C" {
#include "datasets/npy.h"
#include "deploy/model_bundle.h"
#include "graph/ir.h"
#include "graph/loader.h"
#include "graph/ops.h"
#include "graph/util.h"
#include "onnx/export.h"
#include "onnx/import.h"
#include "onnx/model_file.h"
#include "onnx/onnx.pb-c.h"
#include "runtime/plan.h"
#include "runtime/session.h"
}
#include "tests/fixture.h"
#include "tests/onnx_builder.h"
#include "tests/subprocess.h"
#include "tests/testutil.h"

namespace {

using gcc_test::Bytes;
using gcc_test::Fixture;

std::string Runfile(const std::string &rel) {
  std::string p = gcc_test::Runfile(rel);
  return p.empty() ? rel : p;
}

// FNV-1a, 64 bits: the digest the fixture script computes of each file.
int64_t Fnv64(const std::vector<uint8_t> &b) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t c : b) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return static_cast<int64_t>(h);
}

// ---- running a graph on the CPU ------------------------------------------

struct Output {
  gcc_shape shape{};
  std::vector<float> v;
};
using Outputs = std::map<std::string, Output>;

void *BindFrom(void *user, const gcc_graph *g, int v) {
  const gcc_graph *m = static_cast<const gcc_graph *>(user);
  int mv = gcc_graph_find(m, g->values[v].name);
  return mv < 0 ? nullptr : m->values[mv].data;
}

// Runs inference graph `g` (one input) on the CPU at `rows` rows of `x`;
// "" or what failed.
std::string RunCpu(const gcc_graph *g, const float *x, int64_t rows, Outputs *outs) {
  gcc_options o{};
  o.mode = GCC_MODE_EVAL;
  o.batch_size = rows;
  o.device = GCC_DEV_CPU;
  o.device_explicit = 1;
  o.n_cuda_devices = 1;
  FILE *quiet = fopen("/dev/null", "w");
  o.warn_file = quiet;
  gcc_plan_config cfg{};
  cfg.threads = 1;
  cfg.readback_ring = 1;
  gcc_plan *p = nullptr;
  gcc_diag d{};
  gcc_status s = gcc_plan_compile(g, &o, &cfg, BindFrom, const_cast<gcc_graph *>(g), &p, &d);
  if (quiet)
    fclose(quiet);
  if (s != GCC_OK)
    return std::string("compile: ") + d.msg;
  std::string err;
  if (gcc_plan_bind_input(p, g->values[g->inputs[0]].name, x, &d) != GCC_OK ||
      gcc_plan_run(p, 0, &d) != GCC_OK)
    err = d.msg;
  outs->clear();
  for (int k = 0; k < g->n_outputs && err.empty(); k++) {
    const char *name = g->values[g->outputs[k]].name;
    const gcc_tensor *t = gcc_plan_host_tensor(p, name, &d);
    if (!t || t->dtype != GCC_DT_FLOAT32) {
      err = std::string("output '") + name + "' is not a float32 tensor of the plan";
      break;
    }
    Output &out = (*outs)[name];
    out.shape = t->shape;
    out.v.assign(static_cast<const float *>(t->data),
                 static_cast<const float *>(t->data) + t->numel);
  }
  gcc_plan_free(p);
  return err;
}

// max |a - b| / max |b| (0 when equal); infinity on a size mismatch.
double RelErr(const std::vector<float> &a, const std::vector<float> &b) {
  if (a.size() != b.size() || a.empty())
    return INFINITY;
  double e = 0, m = 0;
  for (size_t i = 0; i < a.size(); i++) {
    e = std::max(e, std::fabs((double)a[i] - b[i]));
    m = std::max(m, std::fabs((double)b[i]));
  }
  return m > 0 ? e / m : e;
}

bool Bitwise(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---- models ----------------------------------------------------------------

struct GraphPtr {
  gcc_graph *g = nullptr;
  GraphPtr() = default;
  explicit GraphPtr(gcc_graph *p) : g(p) {}
  GraphPtr(const GraphPtr &) = delete;
  GraphPtr &operator=(const GraphPtr &) = delete;
  GraphPtr(GraphPtr &&o) noexcept : g(o.g) { o.g = nullptr; }
  GraphPtr &operator=(GraphPtr &&o) noexcept {
    std::swap(g, o.g);
    return *this;
  }
  ~GraphPtr() { gcc_graph_free(g); }
};

GraphPtr Open(const std::string &path, std::string *err) {
  gcc_graph *g = nullptr;
  gcc_diag d{};
  if (gcc_model_open(path.c_str(), &g, nullptr, &d) != GCC_OK)
    *err = d.msg;
  return GraphPtr(g);
}

// The ResNet-style network of train_import_test: imported for training
// (BatchNormalization kept, running statistics as state), cross-entropy and
// SGD as its fixture says, trained 3 steps on the fixture batch (CPU, one
// thread); returns the trained model (gcc_session_export).
GraphPtr TrainedResNet(std::string *err) {
  Fixture fx;
  if (!Fixture::Load(Runfile("tests/fixtures/resnet_tiny.fix"), &fx, err))
    return GraphPtr();
  Bytes bytes;
  std::string onnx = Runfile("tests/fixtures/resnet_tiny.onnx");
  if (!gcc_test::ReadFile(onnx, &bytes)) {
    *err = "cannot read " + onnx;
    return GraphPtr();
  }
  gcc_onnx_options o{};
  o.train = 1;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  if (gcc_onnx_import(bytes.data(), bytes.size(), onnx.c_str(), &o, &g, nullptr, &d) != GCC_OK) {
    *err = d.msg;
    return GraphPtr();
  }
  GraphPtr model(g);
  int logits = gcc_graph_find(g, "logits");
  gcc_shape ls = {1, {GCC_BATCH_DIM}};
  gcc_shape scalar = {0, {0}};
  int labels = -1, loss = -1, node = -1;
  if (logits < 0 ||
      gcc_graph_add_value(g, "labels", GCC_DT_INT64, &ls, GCC_VALUE_INPUT, nullptr, 0, &labels,
                          &d) != GCC_OK ||
      gcc_graph_add_input(g, labels) != GCC_OK ||
      gcc_graph_add_value(g, "loss", GCC_DT_FLOAT32, &scalar, GCC_VALUE_ACTIVATION, nullptr, 0,
                          &loss, &d) != GCC_OK) {
    *err = logits < 0 ? "no logits" : d.msg;
    return GraphPtr();
  }
  int ins[2] = {logits, labels};
  if (gcc_graph_add_node(g, "loss", GCC_OP_SOFTMAX_CROSS_ENTROPY, ins, 2, &loss, 1, &node, &d) !=
          GCC_OK ||
      gcc_graph_add_output(g, loss) != GCC_OK || gcc_graph_link(g, &d) != GCC_OK ||
      gcc_graph_toposort(g, &d) != GCC_OK) {
    *err = d.msg;
    return GraphPtr();
  }
  gcc_training *t = &g->training;
  t->present = 1;
  t->loss = gcc_strdup("loss");
  t->prediction = gcc_strdup("logits");
  t->input = gcc_strdup("input");
  t->target = gcc_strdup("labels");
  t->opt.kind = GCC_OPT_SGD;
  t->opt.lr = static_cast<float>(fx.Get("lr").f64()[0]);
  t->opt.momentum = static_cast<float>(fx.Get("momentum").f64()[0]);
  t->opt.weight_decay = static_cast<float>(fx.Get("weight_decay").f64()[0]);
  t->batch_size = 4;
  t->epochs = 1;
  gcc_session_options so{};
  so.threads = 1;
  so.opt = t->opt;
  gcc_session *s = nullptr;
  if (gcc_session_create(g, &so, &s, &d) != GCC_OK) {
    *err = d.msg;
    return GraphPtr();
  }
  for (int step = 0; step < 3 && err->empty(); step++) {
    float l = 0;
    if (gcc_session_train_step(s, fx.Get("x").f32(), fx.Get("labels").i64(), 4, &l, &d) != GCC_OK)
      *err = d.msg;
  }
  gcc_graph *trained = nullptr;
  if (err->empty() && gcc_session_export(s, &trained, &d) != GCC_OK)
    *err = d.msg;
  gcc_session_destroy(s);
  return GraphPtr(trained);
}

// Adds initializer `name` of `shape` filled with a fixed pseudo-random
// pattern in [lo, hi) (a parameter, or with `state` a running statistic).
int AddInit(gcc_graph *g, const char *name, gcc_shape shape, float lo, float hi, int state = 0) {
  int64_t n = gcc_shape_numel(&shape, nullptr);
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t r = 12345u + static_cast<uint32_t>(std::strlen(name)) * 7919u;
  for (float &x : v) {
    r = r * 1664525u + 1013904223u;
    x = lo + (hi - lo) * static_cast<float>(r >> 8) / 16777216.0f;
  }
  int id = -1;
  gcc_diag d{};
  if (gcc_graph_add_value(g, name, GCC_DT_FLOAT32, &shape, GCC_VALUE_PARAM, v.data(),
                          v.size() * sizeof(float), &id, &d) != GCC_OK)
    return -1;
  g->values[id].state = state;
  return id;
}

// A node `name` of `op` reading `ins` into a new value named `name`.
int AddNode(gcc_graph *g, const char *name, int op, std::vector<int> ins) {
  int out = -1, node = -1;
  gcc_diag d{};
  if (gcc_graph_add_temp(g, name, GCC_VALUE_ACTIVATION, &out, &d) != GCC_OK ||
      gcc_graph_add_node(g, name, op, ins.data(), static_cast<int>(ins.size()), &out, 1, &node,
                         &d) != GCC_OK)
    return -1;
  return out;
}

int LastNode(const gcc_graph *g) {
  return g->n_nodes - 1;
}

// An inference model (no training spec, one input, one output) through
// every mapped op that the other models do not use: Conv with pads and a
// bias, BatchNormalization (with running statistics), LRN, ConvTranspose
// with strides, Pad (reflect and constant), LeakyRelu, Sigmoid, Tanh, Sub,
// Mul, Sqrt, Div, Clip, MaxPool, AveragePool with pads and
// count_include_pad, Transpose, Concat, Flatten, Reshape, MatMul, Add,
// LogSoftmax.
GraphPtr OpsChain(std::string *err) {
  gcc_graph *g = gcc_graph_new("ops_chain", "ops_chain");
  GraphPtr gp(g);
  gcc_diag d{};
  int x = -1;
  gcc_shape xs = {4, {GCC_BATCH_DIM, 2, 6, 6}};
  if (gcc_graph_add_value(g, "x", GCC_DT_FLOAT32, &xs, GCC_VALUE_INPUT, nullptr, 0, &x, &d) !=
          GCC_OK ||
      gcc_graph_add_input(g, x) != GCC_OK) {
    *err = d.msg;
    return GraphPtr();
  }
  int64_t p1[4] = {1, 1, 1, 1}, s2[2] = {2, 2};
  int c = AddNode(g, "conv", GCC_OP_CONV,
                  {x, AddInit(g, "conv.w", {4, {4, 2, 3, 3}}, -0.4f, 0.4f),
                   AddInit(g, "conv.b", {1, {4}}, -0.1f, 0.1f)});
  gcc_node_set_ints(g, LastNode(g), "pads", p1, 4);
  int bn = AddNode(g, "bn", GCC_OP_BATCH_NORM,
                   {c, AddInit(g, "bn.scale", {1, {4}}, 0.5f, 1.5f),
                    AddInit(g, "bn.bias", {1, {4}}, -0.2f, 0.2f),
                    AddInit(g, "bn.running_mean", {1, {4}}, -0.1f, 0.1f, 1),
                    AddInit(g, "bn.running_var", {1, {4}}, 0.5f, 1.5f, 1)});
  gcc_node_set_float(g, LastNode(g), "epsilon", 1e-3f);
  int lrn = AddNode(g, "lrn", GCC_OP_LRN, {bn});
  gcc_node_set_int(g, LastNode(g), "size", 3);
  int ct = AddNode(g, "convt", GCC_OP_CONV_TRANSPOSE,
                   {lrn, AddInit(g, "convt.w", {4, {4, 2, 2, 2}}, -0.5f, 0.5f)});
  gcc_node_set_ints(g, LastNode(g), "strides", s2, 2); // [N, 2, 12, 12]
  int64_t rp[8] = {0, 0, 1, 2, 0, 0, 2, 1};
  int pad = AddNode(g, "pad_reflect", GCC_OP_PAD, {ct});
  gcc_node_set_ints(g, LastNode(g), "pads", rp, 8); // [N, 2, 15, 15]
  gcc_node_set_string(g, LastNode(g), "mode", "reflect");
  int lr = AddNode(g, "leaky", GCC_OP_LEAKY_RELU, {pad});
  gcc_node_set_float(g, LastNode(g), "alpha", 0.2f);
  int elu = AddNode(g, "elu", GCC_OP_ELU, {lr});
  gcc_node_set_float(g, LastNode(g), "alpha", 0.7f);
  int selu = AddNode(g, "selu", GCC_OP_SELU, {elu});
  gcc_node_set_float(g, LastNode(g), "gamma", 0.9f);
  int celu = AddNode(g, "celu", GCC_OP_CELU, {selu});
  gcc_node_set_float(g, LastNode(g), "alpha", 1.5f);
  int ssn = AddNode(g, "softsign", GCC_OP_SOFTSIGN, {celu});
  int spl = AddNode(g, "softplus", GCC_OP_SOFTPLUS, {ssn});
  int trl = AddNode(g, "thresholded_relu", GCC_OP_THRESHOLDED_RELU, {spl});
  gcc_node_set_float(g, LastNode(g), "alpha", 0.6f);
  int sin = AddNode(g, "sin", GCC_OP_SIN, {trl});
  int cos = AddNode(g, "cos", GCC_OP_COS, {sin});
  int act = AddNode(g, "prelu", GCC_OP_PRELU,
                    {cos, AddInit(g, "prelu.slope", {3, {2, 1, 1}}, 0.1f, 0.3f)});
  int sg = AddNode(g, "sigmoid", GCC_OP_SIGMOID, {act});
  int th = AddNode(g, "tanh", GCC_OP_TANH, {act});
  int sub = AddNode(g, "sub", GCC_OP_SUB, {sg, th});
  int mul = AddNode(g, "mul", GCC_OP_MUL, {sub, sg});
  int sq = AddNode(g, "sqrt", GCC_OP_SQRT, {sg});
  int dv = AddNode(g, "div", GCC_OP_DIV, {mul, sq});
  int cl = AddNode(g, "clip", GCC_OP_CLIP, {dv});
  gcc_node_set_float(g, LastNode(g), "min", -0.3f);
  gcc_node_set_float(g, LastNode(g), "max", 0.25f);
  int64_t k2[2] = {2, 2}, k3[2] = {3, 3};
  int mp = AddNode(g, "maxpool", GCC_OP_MAX_POOL, {cl});
  gcc_node_set_ints(g, LastNode(g), "kernel_shape", k2, 2);
  gcc_node_set_ints(g, LastNode(g), "strides", s2, 2); // [N, 2, 7, 7]
  int64_t cp[8] = {0, 0, 1, 1, 0, 0, 1, 1};
  int padc = AddNode(g, "pad_constant", GCC_OP_PAD, {mp});
  gcc_node_set_ints(g, LastNode(g), "pads", cp, 8); // [N, 2, 9, 9]
  gcc_node_set_float(g, LastNode(g), "value", 0.5f);
  int ap = AddNode(g, "avgpool", GCC_OP_AVERAGE_POOL, {padc});
  gcc_node_set_ints(g, LastNode(g), "kernel_shape", k3, 2);
  gcc_node_set_ints(g, LastNode(g), "strides", s2, 2);
  gcc_node_set_ints(g, LastNode(g), "pads", p1, 4);
  gcc_node_set_int(g, LastNode(g), "count_include_pad", 1); // [N, 2, 5, 5]
  int64_t perm[4] = {0, 1, 3, 2};
  int tr = AddNode(g, "transpose", GCC_OP_TRANSPOSE, {ap});
  gcc_node_set_ints(g, LastNode(g), "perm", perm, 4);
  int cc = AddNode(g, "concat", GCC_OP_CONCAT, {ap, tr});
  gcc_node_set_int(g, LastNode(g), "axis", 1); // [N, 4, 5, 5]
  int fl = AddNode(g, "flatten", GCC_OP_FLATTEN, {cc});
  int64_t shape[2] = {-1, 100};
  int rs = AddNode(g, "reshape", GCC_OP_RESHAPE, {fl});
  gcc_node_set_ints(g, LastNode(g), "shape", shape, 2);
  int mm =
      AddNode(g, "matmul", GCC_OP_MATMUL, {rs, AddInit(g, "fc.w", {2, {100, 6}}, -0.3f, 0.3f)});
  int add = AddNode(g, "add", GCC_OP_ADD, {mm, AddInit(g, "fc.b", {1, {6}}, -0.1f, 0.1f)});
  int ls = AddNode(g, "log_softmax", GCC_OP_LOG_SOFTMAX, {add});
  gcc_node_set_int(g, LastNode(g), "axis", 1);
  if (ls < 0 || gcc_graph_add_output(g, ls) != GCC_OK || gcc_graph_link(g, &d) != GCC_OK ||
      gcc_graph_toposort(g, &d) != GCC_OK) {
    *err = ls < 0 ? "building the chain failed" : d.msg;
    return GraphPtr();
  }
  return gp;
}

// The model named `name` (with its training spec when it has one).
GraphPtr Model(const std::string &name, std::string *err) {
  if (name == "mnist_mlp" || name == "mnist_cnn")
    return Open(Runfile("models/" + name + ".pb"), err);
  if (name == "resnet_tiny_trained")
    return TrainedResNet(err);
  if (name == "mobilenet_small")
    return Open(Runfile("tests/onnx/mobilenet_small.onnx"), err);
  if (name == "ops_chain")
    return OpsChain(err);
  *err = "no model " + name;
  return GraphPtr();
}

// Its inference graph (deploy/model_bundle.h) and that graph's ONNX bytes.
std::vector<uint8_t> Export(const gcc_graph *model, GraphPtr *ig, std::string *err) {
  gcc_diag d{};
  gcc_graph *g = nullptr;
  if (gcc_inference_graph(model, &g, &d) != GCC_OK) {
    *err = d.msg;
    return {};
  }
  *ig = GraphPtr(g);
  uint8_t *bytes = nullptr;
  size_t size = 0;
  if (gcc_onnx_export_memory(g, nullptr, &bytes, &size, &d) != GCC_OK) {
    *err = d.msg;
    return {};
  }
  std::vector<uint8_t> out(bytes, bytes + size);
  free(bytes);
  return out;
}

GraphPtr Import(const std::vector<uint8_t> &b, bool train, std::string *err) {
  gcc_onnx_options o{};
  o.train = train;
  gcc_graph *g = nullptr;
  gcc_diag d{};
  if (gcc_onnx_import(b.data(), b.size(), "exported.onnx", &o, &g, nullptr, &d) != GCC_OK)
    *err = d.msg;
  return GraphPtr(g);
}

std::map<std::string, int> OpCounts(const Onnx__ModelProto *m) {
  std::map<std::string, int> c;
  for (size_t i = 0; i < m->graph->n_node; i++)
    c[m->graph->node[i]->op_type]++;
  return c;
}

const Onnx__TensorProto *FindInit(const Onnx__ModelProto *m, const std::string &name) {
  for (size_t i = 0; i < m->graph->n_initializer; i++)
    if (name == m->graph->initializer[i]->name)
      return m->graph->initializer[i];
  return nullptr;
}

// What ONNX's checker would say about the graph's wiring: every node input
// is "" (omitted), a graph input, an initializer or an earlier node's
// output; every value is produced once; the outputs exist. "" if so.
std::string CheckWiring(const Onnx__ModelProto *m) {
  std::set<std::string> defined;
  const Onnx__GraphProto *g = m->graph;
  for (size_t i = 0; i < g->n_input; i++)
    defined.insert(g->input[i]->name);
  for (size_t i = 0; i < g->n_initializer; i++)
    if (!defined.insert(g->initializer[i]->name).second)
      return std::string("initializer '") + g->initializer[i]->name + "' is defined twice";
  for (size_t i = 0; i < g->n_node; i++) {
    const Onnx__NodeProto *n = g->node[i];
    for (size_t k = 0; k < n->n_input; k++)
      if (n->input[k][0] && !defined.count(n->input[k]))
        return std::string("node '") + n->name + "' reads '" + n->input[k] +
               "' before it is defined";
    for (size_t k = 0; k < n->n_output; k++)
      if (!defined.insert(n->output[k]).second)
        return std::string("'") + n->output[k] + "' is produced twice";
  }
  for (size_t i = 0; i < g->n_output; i++)
    if (!defined.count(g->output[i]->name))
      return std::string("output '") + g->output[i]->name + "' is never produced";
  return "";
}

// ---- ONNX Runtime agreement and round trips ----------------------------------

const Fixture &OrtFixture() {
  static Fixture *fx = [] {
    auto *f = new Fixture;
    std::string err;
    if (!Fixture::Load(Runfile("tests/fixtures/onnx_export.fix"), f, &err))
      ADD_FAILURE() << err;
    return f;
  }();
  return *fx;
}

// `deterministic`: the exported bytes are the same on every machine (the
// model's weights come from a file), so they must be the bytes ONNX Runtime
// ran. A model trained here may differ in the last bits of its weights on
// another CPU (oneDNN picks kernels by the vector ISA).
void CheckAgainstOrt(const std::string &name, bool deterministic) {
  SCOPED_TRACE(name);
  std::string err;
  GraphPtr model = Model(name, &err);
  ASSERT_NE(model.g, nullptr) << err;
  GraphPtr ig;
  std::vector<uint8_t> bytes = Export(model.g, &ig, &err);
  ASSERT_FALSE(bytes.empty()) << err;
  if (const char *dir = getenv("GCC_ONNX_EXPORT_DIR")) {
    mkdir(dir, 0777);
    std::string path = std::string(dir) + "/" + name + ".onnx";
    ASSERT_TRUE(gcc_test::WriteFile(path, bytes.data(), bytes.size())) << path;
    std::printf("[onnx_export] wrote %s (%zu bytes)\n", path.c_str(), bytes.size());
  }
  const Fixture &fx = OrtFixture();
  ASSERT_TRUE(fx.Has(name + ".shape")) << "tests/fixtures/onnx_export.fix has no " << name
                                       << " (regenerate it: see the top of this file)";
  int64_t digest = fx.Get(name + ".digest").i64()[0];
  if (deterministic)
    EXPECT_EQ(Fnv64(bytes), digest)
        << "the export differs from the file ONNX Runtime ran: regenerate the fixture (see the "
           "top of this file) if the change is meant";
  else if (Fnv64(bytes) != digest)
    std::printf("[onnx_export] %s: the trained weights differ from the fixture machine's in "
                "their last bits; compared within the tolerance\n",
                name.c_str());
  // the input ONNX Runtime ran: element i = float32(i * 7919 % 2001) / 1000 - 1
  const gcc_test::FixtureArray &shape = fx.Get(name + ".shape");
  int64_t rows = shape.i64()[0], numel = 1;
  for (int64_t i = 0; i < shape.numel(); i++)
    numel *= shape.i64()[i];
  std::vector<float> xv(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; i++)
    xv[static_cast<size_t>(i)] = static_cast<float>((i * 7919) % 2001) / 1000.0f - 1.0f;

  Outputs ours, back, kept;
  ASSERT_EQ(RunCpu(ig.g, xv.data(), rows, &ours), "");
  for (const char *out : {"logits", "probabilities"}) {
    const gcc_test::FixtureArray &want = fx.Get(name + "." + out);
    std::vector<float> w(want.f32(), want.f32() + want.numel());
    double e = RelErr(ours[out].v, w);
    EXPECT_LE(e, 1e-5) << out << ": gcc-train against ONNX Runtime on the exported file";
    std::printf("[onnx_export] %s %s: max |gcc-train - ONNX Runtime| = %.3g of max |ORT|\n",
                name.c_str(), out, e);
  }
  // round trip through our importer: BatchNormalization folded (default) or
  // kept (train)
  GraphPtr rt = Import(bytes, false, &err);
  ASSERT_NE(rt.g, nullptr) << err;
  ASSERT_EQ(RunCpu(rt.g, xv.data(), rows, &back), "");
  GraphPtr rk = Import(bytes, true, &err);
  ASSERT_NE(rk.g, nullptr) << err;
  ASSERT_EQ(RunCpu(rk.g, xv.data(), rows, &kept), "");
  for (const char *out : {"logits", "probabilities"}) {
    EXPECT_TRUE(Bitwise(kept[out].v, ours[out].v))
        << out << ": re-imported with BatchNormalization kept, "
        << RelErr(kept[out].v, ours[out].v);
    double e = RelErr(back[out].v, ours[out].v);
    EXPECT_LE(e, 1e-6) << out << ": re-imported with the default import";
    char within[64];
    std::snprintf(within, sizeof within, "within %.3g", e);
    std::printf("[onnx_export] %s %s: round trip %s, with BatchNormalization kept %s\n",
                name.c_str(), out, Bitwise(back[out].v, ours[out].v) ? "bitwise" : within,
                Bitwise(kept[out].v, ours[out].v) ? "bitwise" : "not bitwise");
  }
}

TEST(OnnxExportOrt, MnistMlp) {
  CheckAgainstOrt("mnist_mlp", true);
}
TEST(OnnxExportOrt, MnistCnn) {
  CheckAgainstOrt("mnist_cnn", true);
}
TEST(OnnxExportOrt, ResNetStyleTrainedThreeSteps) {
  CheckAgainstOrt("resnet_tiny_trained", false);
}
TEST(OnnxExportOrt, MobileNetStyleImported) {
  CheckAgainstOrt("mobilenet_small", true);
}
TEST(OnnxExportOrt, EveryOtherMappedOp) {
  CheckAgainstOrt("ops_chain", true);
}

// ---- the ModelProto --------------------------------------------------------

TEST(OnnxExport, TheModelProtoOfATrainedResNet) {
  std::string err;
  GraphPtr model = TrainedResNet(&err);
  ASSERT_NE(model.g, nullptr) << err;
  GraphPtr ig;
  std::vector<uint8_t> bytes = Export(model.g, &ig, &err);
  ASSERT_FALSE(bytes.empty()) << err;
  Onnx__ModelProto *m = onnx__model_proto__unpack(nullptr, bytes.size(), bytes.data());
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->ir_version, GCC_ONNX_EXPORT_IR_VERSION);
  ASSERT_EQ(m->n_opset_import, 1u);
  EXPECT_STREQ(m->opset_import[0]->domain, "");
  EXPECT_EQ(m->opset_import[0]->version, 17);
  EXPECT_STREQ(m->producer_name, "gcc-train");
  EXPECT_EQ(CheckWiring(m), "");
  // one input with the symbolic batch, outputs logits and probabilities
  ASSERT_EQ(m->graph->n_input, 1u);
  const Onnx__TensorShapeProto *in = m->graph->input[0]->type->tensor_type->shape;
  ASSERT_EQ(in->n_dim, 4u);
  EXPECT_EQ(in->dim[0]->value_case, ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM);
  EXPECT_EQ(in->dim[1]->dim_value, 3);
  ASSERT_EQ(m->graph->n_output, 2u);
  EXPECT_STREQ(m->graph->output[0]->name, "logits");
  EXPECT_STREQ(m->graph->output[1]->name, "probabilities");
  const Onnx__TensorShapeProto *out = m->graph->output[1]->type->tensor_type->shape;
  ASSERT_EQ(out->n_dim, 2u);
  EXPECT_EQ(out->dim[0]->value_case, ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM);
  EXPECT_EQ(out->dim[1]->dim_value, 5);
  // BatchNormalization in inference form with the trained running
  // statistics; no loss, no Dropout, Softmax last
  std::map<std::string, int> ops = OpCounts(m);
  int n_bn = 0, n_state = 0;
  for (int i = 0; i < model.g->n_nodes; i++)
    n_bn += model.g->nodes[i].op == GCC_OP_BATCH_NORM;
  EXPECT_GT(n_bn, 0);
  EXPECT_EQ(ops["BatchNormalization"], n_bn);
  EXPECT_EQ(ops.count("SoftmaxCrossEntropy"), 0u);
  EXPECT_EQ(ops.count("Dropout"), 0u);
  EXPECT_STREQ(m->graph->node[m->graph->n_node - 1]->op_type, "Softmax");
  for (size_t i = 0; i < m->graph->n_node; i++) {
    const Onnx__NodeProto *n = m->graph->node[i];
    if (std::string(n->op_type) != "BatchNormalization")
      continue;
    ASSERT_EQ(n->n_output, 1u) << n->name;
    for (size_t a = 0; a < n->n_attribute; a++)
      EXPECT_STRNE(n->attribute[a]->name, "training_mode") << n->name;
  }
  for (int v = 0; v < model.g->n_values; v++) {
    const gcc_value *val = &model.g->values[v];
    if (!val->state)
      continue;
    n_state++;
    const Onnx__TensorProto *t = FindInit(m, val->name);
    ASSERT_NE(t, nullptr) << val->name;
    ASSERT_EQ(t->raw_data.len, val->data_bytes) << val->name;
    EXPECT_EQ(std::memcmp(t->raw_data.data, val->data, val->data_bytes), 0)
        << val->name << ": the running statistic after training, bit for bit";
  }
  EXPECT_EQ(n_state, 2 * n_bn);
  onnx__model_proto__free_unpacked(m, nullptr);
}

TEST(OnnxExport, TheBytesDependOnlyOnTheGraph) {
  std::string err;
  GraphPtr model = Open(Runfile("models/mnist_cnn.pb"), &err);
  ASSERT_NE(model.g, nullptr) << err;
  GraphPtr a, b;
  std::vector<uint8_t> x = Export(model.g, &a, &err), y = Export(model.g, &b, &err);
  ASSERT_FALSE(x.empty()) << err;
  EXPECT_EQ(x, y);
  Onnx__ModelProto *m = onnx__model_proto__unpack(nullptr, x.size(), x.data());
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(CheckWiring(m), "");
  std::map<std::string, int> ops = OpCounts(m);
  EXPECT_EQ(ops["Conv"], 2);
  EXPECT_EQ(ops["MaxPool"], 2);
  EXPECT_EQ(ops["Gemm"], 3);
  EXPECT_EQ(ops["Softmax"], 1);
  onnx__model_proto__free_unpacked(m, nullptr);
}

// Light models of ONNX's zoo (tests/onnx/light) with their many ops
// (Concat, LRN, Transpose, Reshape, Dropout folded at import, poolings with
// ceil_mode) round-trip bitwise: import, export, import again.
TEST(OnnxExport, ZooArchitecturesRoundTripBitwise) {
  for (const char *name : {"light_squeezenet", "light_shufflenet", "light_inception_v1"}) {
    SCOPED_TRACE(name);
    std::string err;
    GraphPtr g = Open(Runfile(std::string("tests/onnx/light/") + name + ".onnx"), &err);
    ASSERT_NE(g.g, nullptr) << err;
    uint8_t *bytes = nullptr;
    size_t size = 0;
    gcc_diag d{};
    ASSERT_EQ(gcc_onnx_export_memory(g.g, nullptr, &bytes, &size, &d), GCC_OK) << d.msg;
    std::vector<uint8_t> b(bytes, bytes + size);
    free(bytes);
    GraphPtr back = Import(b, false, &err);
    ASSERT_NE(back.g, nullptr) << err;
    const gcc_value *in = &g.g->values[g.g->inputs[0]];
    gcc_shape s = in->shape;
    if (s.dims[0] == GCC_BATCH_DIM)
      s.dims[0] = 1;
    std::vector<float> x(static_cast<size_t>(gcc_shape_numel(&s, nullptr)));
    for (size_t i = 0; i < x.size(); i++)
      x[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
    Outputs a, c;
    ASSERT_EQ(RunCpu(g.g, x.data(), 1, &a), "");
    ASSERT_EQ(RunCpu(back.g, x.data(), 1, &c), "");
    ASSERT_EQ(a.size(), 1u);
    ASSERT_EQ(c.size(), 1u);
    EXPECT_TRUE(Bitwise(a.begin()->second.v, c.begin()->second.v))
        << RelErr(c.begin()->second.v, a.begin()->second.v);
  }
}

// Trilu (upper, k as an int64 scalar input) and ArgMax / ArgMin (axis,
// keepdims, select_last_index) export with their attributes, and the
// importer reads them back to the same IR nodes.
TEST(OnnxExport, TriluAndArgMaxRoundTrip) {
  gcc_graph *g = gcc_graph_new("select", "select.pb");
  GraphPtr gp(g);
  gcc_diag d{};
  gcc_shape xs = {3, {GCC_BATCH_DIM, 4, 5}};
  int x = -1;
  ASSERT_EQ(gcc_graph_add_value(g, "x", GCC_DT_FLOAT32, &xs, GCC_VALUE_INPUT, nullptr, 0, &x, &d),
            GCC_OK);
  gcc_graph_add_input(g, x);
  int t = AddNode(g, "tril", GCC_OP_TRILU, {x});
  gcc_node_set_int(g, LastNode(g), "upper", 0);
  gcc_node_set_int(g, LastNode(g), "k", -1);
  int am = AddNode(g, "argmax", GCC_OP_ARG_MAX, {t});
  gcc_node_set_int(g, LastNode(g), "axis", 2);
  gcc_node_set_int(g, LastNode(g), "keepdims", 0);
  gcc_node_set_int(g, LastNode(g), "select_last_index", 1);
  int an = AddNode(g, "argmin", GCC_OP_ARG_MIN, {t});
  gcc_node_set_int(g, LastNode(g), "axis", 1);
  ASSERT_GE(an, 0);
  gcc_graph_add_output(g, t);
  gcc_graph_add_output(g, am);
  gcc_graph_add_output(g, an);
  ASSERT_EQ(gcc_graph_link(g, &d), GCC_OK) << d.msg;
  uint8_t *bytes = nullptr;
  size_t size = 0;
  ASSERT_EQ(gcc_onnx_export_memory(g, nullptr, &bytes, &size, &d), GCC_OK) << d.msg;
  std::vector<uint8_t> b(bytes, bytes + size);
  free(bytes);
  Onnx__ModelProto *m = onnx__model_proto__unpack(nullptr, b.size(), b.data());
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(CheckWiring(m), "");
  std::map<std::string, int> ops = OpCounts(m);
  EXPECT_EQ(ops["Trilu"], 1);
  EXPECT_EQ(ops["ArgMax"], 1);
  EXPECT_EQ(ops["ArgMin"], 1);
  onnx__model_proto__free_unpacked(m, nullptr);
  std::string err;
  GraphPtr back = Import(b, false, &err);
  ASSERT_NE(back.g, nullptr) << err;
  std::map<int, const gcc_node *> by_op;
  for (int i = 0; i < back.g->n_nodes; i++)
    by_op[back.g->nodes[i].op] = &back.g->nodes[i];
  ASSERT_TRUE(by_op.count(GCC_OP_TRILU) && by_op.count(GCC_OP_ARG_MAX) &&
              by_op.count(GCC_OP_ARG_MIN));
  auto attr = [&](int op, const char *name) -> int64_t {
    const gcc_attr *a = gcc_node_attr(by_op[op], name);
    EXPECT_NE(a, nullptr) << gcc_op_name(op) << " has no attribute " << name;
    return a ? a->i : -99;
  };
  EXPECT_EQ(attr(GCC_OP_TRILU, "upper"), 0);
  EXPECT_EQ(attr(GCC_OP_TRILU, "k"), -1);
  EXPECT_EQ(attr(GCC_OP_ARG_MAX, "axis"), 2);
  EXPECT_EQ(attr(GCC_OP_ARG_MAX, "keepdims"), 0);
  EXPECT_EQ(attr(GCC_OP_ARG_MAX, "select_last_index"), 1);
  EXPECT_EQ(attr(GCC_OP_ARG_MIN, "axis"), 1);
  EXPECT_EQ(attr(GCC_OP_ARG_MIN, "keepdims"), 1);
  EXPECT_EQ(attr(GCC_OP_ARG_MIN, "select_last_index"), 0);
}

// ---- refusals ----------------------------------------------------------------

TEST(OnnxExport, AGraphWithATrainingSpecIsRefused) {
  std::string err;
  GraphPtr model = Open(Runfile("models/mnist_mlp.pb"), &err);
  ASSERT_NE(model.g, nullptr) << err;
  gcc_diag d{};
  EXPECT_EQ(gcc_onnx_export_check(model.g, &d), GCC_ERR_INVALID_GRAPH);
  EXPECT_NE(std::string(d.msg).find("training spec"), std::string::npos) << d.msg;
}

TEST(OnnxExport, AnOpWithoutAnOnnxCounterpartIsRefusedNamingTheNode) {
  gcc_graph *g = gcc_graph_new("loss_graph", "loss_graph.pb");
  GraphPtr gp(g);
  gcc_diag d{};
  gcc_shape xs = {2, {GCC_BATCH_DIM, 4}}, ys = {1, {GCC_BATCH_DIM}};
  int x = -1, y = -1;
  ASSERT_EQ(gcc_graph_add_value(g, "x", GCC_DT_FLOAT32, &xs, GCC_VALUE_INPUT, nullptr, 0, &x, &d),
            GCC_OK);
  ASSERT_EQ(gcc_graph_add_value(g, "y", GCC_DT_INT64, &ys, GCC_VALUE_INPUT, nullptr, 0, &y, &d),
            GCC_OK);
  gcc_graph_add_input(g, x);
  gcc_graph_add_input(g, y);
  int loss = AddNode(g, "xent", GCC_OP_SOFTMAX_CROSS_ENTROPY, {x, y});
  ASSERT_GE(loss, 0);
  gcc_graph_add_output(g, loss);
  ASSERT_EQ(gcc_graph_link(g, &d), GCC_OK) << d.msg;
  EXPECT_EQ(gcc_onnx_export_check(g, &d), GCC_ERR_UNSUPPORTED);
  std::string msg = d.msg;
  EXPECT_NE(msg.find("loss_graph.pb"), std::string::npos) << msg;
  EXPECT_NE(msg.find("node 'xent' (SoftmaxCrossEntropy)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("training loss"), std::string::npos) << msg;
}

TEST(OnnxExport, ADilatedAveragePoolIsRefusedNamingTheNode) {
  gcc_graph *g = gcc_graph_new("pool", "pool.onnx");
  GraphPtr gp(g);
  gcc_diag d{};
  gcc_shape xs = {4, {GCC_BATCH_DIM, 1, 6, 6}};
  int x = -1;
  ASSERT_EQ(gcc_graph_add_value(g, "x", GCC_DT_FLOAT32, &xs, GCC_VALUE_INPUT, nullptr, 0, &x, &d),
            GCC_OK);
  gcc_graph_add_input(g, x);
  int y = AddNode(g, "pool1", GCC_OP_AVERAGE_POOL, {x});
  int64_t k[2] = {2, 2}, dl[2] = {2, 2};
  gcc_node_set_ints(g, LastNode(g), "kernel_shape", k, 2);
  gcc_node_set_ints(g, LastNode(g), "dilations", dl, 2);
  gcc_graph_add_output(g, y);
  ASSERT_EQ(gcc_graph_link(g, &d), GCC_OK) << d.msg;
  EXPECT_EQ(gcc_onnx_export_check(g, &d), GCC_ERR_UNSUPPORTED);
  std::string msg = d.msg;
  EXPECT_NE(msg.find("node 'pool1' (AveragePool)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dilations 2x2"), std::string::npos) << msg;
  // the same window undilated exports
  int64_t one[2] = {1, 1};
  gcc_node_set_ints(g, LastNode(g), "dilations", one, 2);
  EXPECT_EQ(gcc_onnx_export_check(g, &d), GCC_OK) << d.msg;
}

TEST(OnnxExport, TheTableMapsEveryForwardOpAndNoTrainingOp) {
  const unsigned training = GCC_OPF_INTERNAL | GCC_OPF_OPTIMIZER | GCC_OPF_LOSS | GCC_OPF_COPY |
                            GCC_OPF_COLLECTIVE | GCC_OPF_FUSED;
  for (int op = 0; op < GCC_OP_COUNT; op++) {
    const gcc_onnx_export_op *e = gcc_onnx_export_op_of(op);
    ASSERT_NE(e, nullptr) << gcc_op_name(op);
    EXPECT_TRUE((e->onnx != nullptr) != (e->none != nullptr))
        << gcc_op_name(op) << ": onnx/export.c kOnnxExport needs exactly one of .onnx and .none";
    EXPECT_EQ(e->onnx == nullptr, (gcc_op(op)->flags & training) != 0)
        << gcc_op_name(op) << ": a forward op maps to ONNX, a training op does not";
    if (e->onnx) { // the importer reads what the export writes
      EXPECT_TRUE(gcc_onnx_op_supported(e->onnx)) << e->onnx;
    }
  }
  EXPECT_EQ(gcc_onnx_export_op_of(GCC_OP_COUNT), nullptr);
  EXPECT_EQ(gcc_onnx_export_op_of(-1), nullptr);
}

TEST(OnnxExport, FileErrorsNameTheFlagAndThePath) {
  std::string err;
  GraphPtr model = Open(Runfile("models/mnist_mlp.pb"), &err);
  ASSERT_NE(model.g, nullptr) << err;
  GraphPtr ig;
  ASSERT_FALSE(Export(model.g, &ig, &err).empty()) << err;
  gcc_diag d{};
  EXPECT_EQ(gcc_onnx_export_file(ig.g, nullptr, "/nonexistent-dir/m.onnx", "--export-onnx", &d),
            GCC_ERR_IO);
  EXPECT_NE(std::string(d.msg).find("--export-onnx"), std::string::npos) << d.msg;
  EXPECT_NE(std::string(d.msg).find("/nonexistent-dir/m.onnx"), std::string::npos) << d.msg;
  EXPECT_EQ(gcc_onnx_export_file(nullptr, nullptr, "x.onnx", nullptr, &d),
            GCC_ERR_INVALID_ARGUMENT);
}

// ---- gcc-train --export-onnx ------------------------------------------------

using gcc_test::ProcResult;

ProcResult Train(const std::vector<std::string> &args) {
  return gcc_test::RunRunfile("cli/gcc-train", args);
}

bool Has(const std::string &s, const std::string &sub) {
  return s.find(sub) != std::string::npos;
}

std::string MnistDir() {
  std::string img = Runfile("data/mnist/t10k-images-idx3-ubyte.gz");
  return img.substr(0, img.rfind('/'));
}

TEST(OnnxExportCli, TrainsThenWritesTheOnnxFile) {
  std::string out = gcc_test::TmpPath("cli_mlp.onnx");
  unlink(out.c_str());
  ProcResult r =
      Train({Runfile("models/mnist_mlp.pb"), "--data", MnistDir(), "--max-steps", "20", "--threads",
             "1", "--device", "cpu", "--no-output", "--log-every", "0", "--export-onnx", out});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(Has(r.out, "exported the inference graph as ONNX (opset 17) to " + out)) << r;
  std::string err;
  Bytes b;
  ASSERT_TRUE(gcc_test::ReadFile(out, &b));
  GraphPtr back = Import(std::vector<uint8_t>(b.begin(), b.end()), false, &err);
  ASSERT_NE(back.g, nullptr) << err;
  EXPECT_EQ(back.g->n_outputs, 2);
  // gcc-run takes the exported file as a model (an inference graph of
  // logits and probabilities)
  std::vector<float> x(2 * 784);
  for (size_t i = 0; i < x.size(); i++)
    x[i] = static_cast<float>(i % 17) / 17.0f;
  gcc_shape xs = {4, {2, 1, 28, 28}};
  uint8_t *npy = nullptr;
  size_t npy_size = 0;
  gcc_diag d{};
  ASSERT_EQ(gcc_npy_encode_f32(&xs, x.data(), &npy, &npy_size, &d), GCC_OK) << d.msg;
  std::string xpath = gcc_test::TmpPath("cli_x.npy");
  ASSERT_TRUE(gcc_test::WriteFile(xpath, npy, npy_size));
  free(npy);
  ProcResult run = gcc_test::RunRunfile(
      "cli/gcc-run", {out, "--input", xpath, "--device", "cpu", "--threads", "1"});
  ASSERT_EQ(run.exit_code, 0) << run;
  EXPECT_TRUE(Has(run.out, "index,class,probability\n0,")) << run;
}

TEST(OnnxExportCli, CollisionsAndBadCombinationsAreCommandLineErrors) {
  std::string out = gcc_test::TmpPath("collide.onnx");
  unlink(out.c_str());
  ProcResult r = Train({Runfile("models/mnist_mlp.pb"), "--data", MnistDir(), "--output", out,
                        "--export-onnx", out});
  EXPECT_EQ(r.exit_code, 2) << r;
  EXPECT_TRUE(Has(r.err, "--export-onnx") && Has(r.err, "--output")) << r;
  EXPECT_TRUE(r.out.empty()) << r;
  ProcResult m = Train({Runfile("models/mnist_mlp.pb"), "--export-onnx",
                        Runfile("models/mnist_mlp.pb"), "--no-output"});
  EXPECT_EQ(m.exit_code, 2) << m;
  EXPECT_TRUE(Has(m.err, "--export-onnx")) << m;
  ProcResult p = Train({Runfile("models/mnist_mlp.pb"), "--dump-placement", "--export-onnx", out});
  EXPECT_EQ(p.exit_code, 2) << p;
  EXPECT_TRUE(Has(p.err, "--export-onnx")) << p;
  ProcResult dir = Train({Runfile("models/mnist_mlp.pb"), "--no-output", "--export-onnx",
                          gcc_test::TmpPath("no-such-dir/x.onnx")});
  EXPECT_EQ(dir.exit_code, 1) << dir;
  EXPECT_TRUE(Has(dir.err, "--export-onnx")) << dir;
  EXPECT_FALSE(gcc_test::Exists(out));
}

TEST(OnnxExportCli, ASymbolicLinkKeepsPointingAtTheReplacedFile) {
  std::string target = gcc_test::TmpPath("link_target.onnx");
  std::string link = gcc_test::TmpPath("link.onnx");
  unlink(link.c_str());
  ASSERT_TRUE(gcc_test::WriteText(target, "old"));
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  // an inference model (an ONNX file without a recipe) is exported as it is
  ProcResult r = Train({Runfile("tests/onnx/mobilenet_small.onnx"), "--export-onnx", link});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(Has(r.out, "as ONNX to " + link)) << r;
  struct stat st;
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  std::string err;
  Bytes b;
  ASSERT_TRUE(gcc_test::ReadFile(target, &b));
  GraphPtr back = Import(std::vector<uint8_t>(b.begin(), b.end()), false, &err);
  EXPECT_NE(back.g, nullptr) << err;
}

// The exportability is checked before training: a model whose inference
// graph has a node ONNX cannot express (an AveragePool with dilations,
// opset 19, when the export writes opset 17) fails at once, naming the
// node, before the data (which does not exist here) is read.
TEST(OnnxExportCli, AnUnexportableModelFailsBeforeTraining) {
  gcc_test::OnnxModel m(19);
  m.Input("x", {gcc_test::kBatch, 1, 6, 6});
  m.Node("AveragePool", {"x"}, {"p"}, {m.Ints("kernel_shape", {2, 2}), m.Ints("dilations", {2, 2})},
         "dilated_pool");
  m.Node("Flatten", {"p"}, {"logits"});
  m.Output("logits");
  std::vector<uint8_t> bytes = m.Bytes();
  std::string path = gcc_test::TmpPath("dilated.onnx"), out = gcc_test::TmpPath("dilated_out.onnx");
  ASSERT_TRUE(gcc_test::WriteFile(path, bytes.data(), bytes.size()));
  unlink(out.c_str());
  ProcResult r = Train({path, "--loss", "cross-entropy", "--lr", "0.1", "--dataset", "npy",
                        "--data", gcc_test::TmpPath("no-such-data"), "--no-output", "--device",
                        "cpu", "--export-onnx", out});
  EXPECT_EQ(r.exit_code, 3) << r;
  EXPECT_TRUE(Has(r.err, "--export-onnx")) << r;
  EXPECT_TRUE(Has(r.err, "node 'dilated_pool' (AveragePool)")) << r;
  EXPECT_TRUE(Has(r.err, "dilations")) << r;
  EXPECT_FALSE(Has(r.out, "epochs")) << "no training started: " << r;
  EXPECT_FALSE(Has(r.err, "no-such-data")) << "the data is never read: " << r;
  EXPECT_FALSE(gcc_test::Exists(out));
}

} // namespace

namespace {

// gcc-import converts a trained .pb to ONNX without its data.
TEST(OnnxExportCli, GccImportWritesTheOnnxFileOfATrainedPb) {
  std::string out = gcc_test::TmpPath("import_cnn.onnx");
  unlink(out.c_str());
  ProcResult r = gcc_test::RunRunfile("cli/gcc-import",
                                      {Runfile("models/mnist_cnn.pb"), "--export-onnx", out});
  ASSERT_EQ(r.exit_code, 0) << r;
  EXPECT_TRUE(Has(r.out, "wrote " + out + " (ONNX opset 17: the inference graph")) << r;
  Bytes b;
  ASSERT_TRUE(gcc_test::ReadFile(out, &b));
  std::string err;
  GraphPtr back = Import(std::vector<uint8_t>(b.begin(), b.end()), false, &err);
  ASSERT_NE(back.g, nullptr) << err;
  EXPECT_EQ(back.g->n_outputs, 2);
  ProcResult same = gcc_test::RunRunfile(
      "cli/gcc-import", {Runfile("models/mnist_cnn.pb"), "-o", out, "--export-onnx", out});
  EXPECT_EQ(same.exit_code, 2) << same;
  EXPECT_TRUE(Has(same.err, "--export-onnx")) << same;
  ProcResult none = gcc_test::RunRunfile("cli/gcc-import", {Runfile("models/mnist_cnn.pb")});
  EXPECT_EQ(none.exit_code, 2) << none;
}

} // namespace
