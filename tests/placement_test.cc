// Tests of device placement, copy insertion and the placement report
// (passes/placement.c, runtime/placement_report.c) on the MNIST MLP, compiled
// without a GPU for the CPU and for cuda:0 (gcc_compile_graph), and of the
// --dump-placement flags of the gcc-train CLI.
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "graph/ir.h"
#include "graph/loader.h"
#include "codegen/lowering.h"
#include "graph/ops.h"
#include "models/models.h"
#include "passes/memplan.h"
#include "passes/passes.h"
#include "runtime/device.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/plan.h"
#include "runtime/placement_report.h"
#include "tests/subprocess.h"
#include "tests/testutil.h"

using namespace gcc_test; // tests/testutil.h

namespace {

constexpr int kCpu = GCC_DEV_CPU;
const int kCuda0 = GCC_DEV_CUDA(0);

struct GraphDeleter {
  void operator()(gcc_graph *g) const { gcc_graph_free(g); }
};
using GraphPtr = std::unique_ptr<gcc_graph, GraphDeleter>;

GraphPtr Mlp() {
  gcc_diag d = {};
  gcc_graph *g = nullptr;
  gcc_status s = gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &g, &d);
  EXPECT_EQ(s, GCC_OK) << d.msg;
  return GraphPtr(g);
}

std::string Dev(int id) {
  char b[32];
  return gcc_dev_name(id, b, sizeof b);
}

int NodeIndex(const gcc_graph *g, const std::string &name) {
  for (int i = 0; i < g->n_nodes; i++)
    if (name == g->nodes[i].name)
      return i;
  return -1;
}

void Pin(gcc_graph *g, const char *node, const char *dev) {
  int i = NodeIndex(g, node);
  ASSERT_GE(i, 0) << node;
  free(g->nodes[i].pin);
  g->nodes[i].pin = strdup(dev);
}

bool IsCopy(const gcc_graph *g, int i) {
  return (gcc_op(g->nodes[i].op)->flags & GCC_OPF_COPY) != 0;
}
bool IsOptimizer(const gcc_graph *g, int i) {
  return (gcc_op(g->nodes[i].op)->flags & GCC_OPF_OPTIMIZER) != 0;
}
bool IsView(const gcc_graph *g, int i) {
  return (gcc_op(g->nodes[i].op)->flags & GCC_OPF_ALIAS) != 0;
}
bool CopyOnce(const gcc_graph *g, int i) {
  const gcc_node *n = &g->nodes[i];
  return n->n_av > COPY_ONCE && n->av[COPY_ONCE].i != 0;
}
int64_t Bytes(const gcc_value *v) {
  return gcc_shape_numel(&v->shape, nullptr) * static_cast<int64_t>(gcc_dtype_size(v->dtype));
}

std::string ReadStream(FILE *f) {
  std::string s;
  if (f == nullptr)
    return s;
  fflush(f);
  rewind(f);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    s.append(buf, n);
  return s;
}

// One compilation: the compiled graph, its memory plan, the diagnostic and
// the warnings copy insertion printed.
struct Compiled {
  gcc_status status = GCC_OK;
  gcc_diag diag = {};
  gcc_graph *g = nullptr;
  gcc_mem_plan mem = {};
  std::string warnings;
  gcc_options opt = {};

  Compiled() = default;
  Compiled(const Compiled &) = delete;
  Compiled &operator=(const Compiled &) = delete;
  ~Compiled() {
    gcc_mem_plan_free(&mem);
    gcc_graph_free(g);
  }
};

gcc_options Options(const gcc_graph *model, int device, gcc_mode mode = GCC_MODE_TRAIN) {
  gcc_options o = {};
  o.mode = mode;
  o.batch_size = 64;
  o.opt = model->training.opt;
  o.device = device;
  o.device_explicit = 1;
  o.n_cuda_devices = 1;
  return o;
}

std::unique_ptr<Compiled> Compile(const gcc_graph *model, gcc_options o) {
  auto c = std::make_unique<Compiled>();
  FILE *warn = tmpfile();
  o.warn_file = warn;
  c->opt = o;
  c->status = gcc_compile_graph(model, &o, &c->g, &c->mem, &c->diag);
  c->warnings = ReadStream(warn);
  if (warn != nullptr)
    fclose(warn);
  return c;
}

// A Copy node as the tests see it.
struct CopyInfo {
  std::string value;
  int from, to;
  int64_t bytes;
  bool once;
};

std::map<std::string, CopyInfo> Copies(const gcc_graph *g) {
  std::map<std::string, CopyInfo> m;
  for (int i = 0; i < g->n_nodes; i++) {
    if (!IsCopy(g, i))
      continue;
    const gcc_value *src = &g->values[g->nodes[i].inputs[0]];
    CopyInfo c{src->name, src->device, g->nodes[i].device, Bytes(src), CopyOnce(g, i)};
    EXPECT_TRUE(m.emplace(g->nodes[i].name, c).second)
        << "two copy nodes named " << g->nodes[i].name;
  }
  return m;
}

std::map<std::string, CopyInfo> PerStepCopies(const gcc_graph *g) {
  std::map<std::string, CopyInfo> m;
  for (auto &kv : Copies(g))
    if (!kv.second.once)
      m.insert(kv);
  return m;
}

// Invariants every compiled graph must satisfy, whatever the placement:
// every node and value placed, copy nodes named "<value>@<device>" with one
// per (value, destination), and no edge left that crosses devices.
void CheckCopyInvariants(const gcc_graph *g) {
  gcc_diag d = {};
  EXPECT_EQ(gcc_verify(g, &d), GCC_OK) << d.msg;
  std::set<std::pair<int, int>> seen;
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    ASSERT_GE(n->device, 0) << n->name;
    ASSERT_GE(n->reason, 0) << n->name;
    ASSERT_LT(n->reason, GCC_PLACEMENT_REASON_COUNT) << n->name;
    for (int k = 0; k < n->n_outputs; k++)
      EXPECT_EQ(g->values[n->outputs[k]].device, n->device)
          << "output " << g->values[n->outputs[k]].name << " of " << n->name;
    if (IsCopy(g, i)) {
      ASSERT_EQ(n->n_inputs, 1);
      ASSERT_EQ(n->n_outputs, 1);
      const gcc_value *src = &g->values[n->inputs[0]];
      const gcc_value *dst = &g->values[n->outputs[0]];
      std::string want = std::string(src->name) + "@" + Dev(n->device);
      EXPECT_EQ(want, n->name);
      EXPECT_EQ(want, dst->name);
      EXPECT_NE(src->device, n->device) << n->name << " copies within a device";
      EXPECT_EQ(n->reason, GCC_PLACED_COPY_DESTINATION) << n->name;
      EXPECT_TRUE(seen.insert({n->inputs[0], n->device}).second)
          << "second copy of " << src->name << " to " << Dev(n->device);
      EXPECT_EQ(CopyOnce(g, i), src->kind == GCC_VALUE_CONST) << n->name;
      continue;
    }
    for (int k = 0; k < n->n_inputs; k++) {
      int v = n->inputs[k];
      if (v < 0)
        continue;
      EXPECT_EQ(g->values[v].device, n->device)
          << "edge " << g->values[v].name << " (" << Dev(g->values[v].device) << ") -> " << n->name
          << " (" << Dev(n->device) << ") crosses devices without a copy";
    }
  }
  for (int v = 0; v < g->n_values; v++)
    EXPECT_GE(g->values[v].device, 0) << g->values[v].name;
}

// Copy insertion and autodiff add values with the shape of an existing one
// (gcc_graph_add_value(g, ..., &g->values[v].shape, ...)) while the value
// array may grow: the shape must be read before the array moves (ASan
// reported a heap-use-after-free here when compiling the MLP with Adam).
TEST(Placement, AddValueWithTheShapeOfAnotherAcrossGrowth) {
  gcc_diag d = {};
  GraphPtr g(gcc_graph_new("grow", "<grow>"));
  ASSERT_NE(g, nullptr);
  gcc_shape s = {};
  s.ndim = 3;
  s.dims[0] = 2;
  s.dims[1] = 3;
  s.dims[2] = 5;
  int v0;
  ASSERT_EQ(gcc_graph_add_value(g.get(), "v0", GCC_DT_FLOAT32, &s, GCC_VALUE_ACTIVATION, nullptr, 0,
                                &v0, &d),
            GCC_OK);
  for (int i = 1; i < 300; i++) {
    int v;
    std::string name = "v" + std::to_string(i);
    ASSERT_EQ(gcc_graph_add_value(g.get(), name.c_str(), GCC_DT_FLOAT32, &g->values[i - 1].shape,
                                  GCC_VALUE_ACTIVATION, nullptr, 0, &v, &d),
              GCC_OK)
        << d.msg;
    ASSERT_TRUE(gcc_shape_equal(&g->values[v].shape, &s)) << name;
  }
}

// ---- 1. CPU ----------------------------------------------------------------

TEST(Placement, MlpOnCpuHasNoCopies) {
  GraphPtr m = Mlp();
  ASSERT_NE(m, nullptr);
  for (int explicit_device : {0, 1}) {
    SCOPED_TRACE(explicit_device ? "--device cpu" : "default device");
    gcc_options o = Options(m.get(), kCpu);
    o.device_explicit = explicit_device;
    auto c = Compile(m.get(), o);
    ASSERT_EQ(c->status, GCC_OK) << c->diag.msg;
    const gcc_graph *g = c->g;
    CheckCopyInvariants(g);
    int optimizers = 0;
    for (int i = 0; i < g->n_nodes; i++) {
      const gcc_node *n = &g->nodes[i];
      EXPECT_EQ(n->device, kCpu) << n->name;
      EXPECT_FALSE(IsCopy(g, i)) << n->name;
      if (IsOptimizer(g, i)) {
        optimizers++;
        EXPECT_EQ(n->reason, GCC_PLACED_WITH_PARAMETER) << n->name;
      } else {
        EXPECT_EQ(n->reason, explicit_device ? GCC_PLACED_REQUESTED : GCC_PLACED_DEFAULT)
            << n->name << ": " << gcc_placement_reason_name(n->reason);
      }
    }
    EXPECT_EQ(optimizers, 10);
    for (int v = 0; v < g->n_values; v++)
      EXPECT_EQ(g->values[v].device, kCpu) << g->values[v].name;
    EXPECT_EQ(c->warnings, "");
    EXPECT_EQ(c->mem.n_devices, 1);
    EXPECT_GT(c->mem.arena_bytes, 0u);
  }
}

// The compiled graph keeps no copy of the weights (gcc_compile_graph): a
// plan binds every parameter to storage of its own, so each PARAM's data is
// NULL there, the constants are the compiled graph's own copies, and the
// model's weights are where and what they were, for the CPU and cuda:0,
// training and inference.
TEST(Placement, CompiledGraphHoldsNoCopyOfTheWeights) {
  GraphPtr m = Mlp();
  ASSERT_NE(m, nullptr);
  std::map<std::string, std::pair<const void *, std::vector<unsigned char>>> before;
  int params = 0;
  for (int v = 0; v < m->n_values; v++) {
    const gcc_value *val = &m->values[v];
    if (!val->data)
      continue;
    params += val->kind == GCC_VALUE_PARAM;
    const unsigned char *b = static_cast<const unsigned char *>(val->data);
    before[val->name] = {val->data, std::vector<unsigned char>(b, b + val->data_bytes)};
  }
  ASSERT_EQ(params, 10); // 5 layers' weights and biases
  for (int device : {kCpu, kCuda0})
    for (gcc_mode mode : {GCC_MODE_TRAIN, GCC_MODE_EVAL}) {
      SCOPED_TRACE(std::string(device == kCpu ? "cpu" : "cuda:0") +
                   (mode == GCC_MODE_TRAIN ? " train" : " eval"));
      auto c = Compile(m.get(), Options(m.get(), device, mode));
      ASSERT_EQ(c->status, GCC_OK) << c->diag.msg;
      int seen = 0;
      for (int v = 0; v < c->g->n_values; v++) {
        const gcc_value *val = &c->g->values[v];
        EXPECT_EQ(val->data_borrowed, 0) << val->name;
        if (val->kind == GCC_VALUE_PARAM) {
          seen++;
          EXPECT_EQ(val->data, nullptr) << val->name;
          EXPECT_EQ(val->data_bytes, 0u) << val->name;
        } else if (val->data) {
          auto it = before.find(val->name);
          if (it != before.end()) {
            EXPECT_NE(val->data, it->second.first) << val->name << ": the model's own bytes";
          }
        }
      }
      EXPECT_EQ(seen, params);
    }
  for (int v = 0; v < m->n_values; v++) {
    const gcc_value *val = &m->values[v];
    if (!val->data)
      continue;
    const auto &b = before.at(val->name);
    EXPECT_EQ(val->data, b.first) << val->name;
    ASSERT_EQ(val->data_bytes, b.second.size()) << val->name;
    EXPECT_EQ(memcmp(val->data, b.second.data(), val->data_bytes), 0) << val->name;
  }
}

// ---- 2. cuda:0 ---------------------------------------------------------------

TEST(Placement, MlpOnCudaCopiesOnlyTheBatchAndTheLoss) {
  GraphPtr m = Mlp();
  ASSERT_NE(m, nullptr);
  for (gcc_opt_kind kind : {GCC_OPT_SGD, GCC_OPT_ADAM}) {
    SCOPED_TRACE(kind == GCC_OPT_SGD ? "the model's SGD" : "Adam");
    gcc_options o = Options(m.get(), kCuda0);
    if (kind == GCC_OPT_ADAM) {
      o.opt = {};
      o.opt.kind = GCC_OPT_ADAM;
      o.opt.lr = 1e-3f;
      o.opt.beta1 = 0.9f;
      o.opt.beta2 = 0.999f;
      o.opt.eps = 1e-8f;
    }
    auto c = Compile(m.get(), o);
    ASSERT_EQ(c->status, GCC_OK) << c->diag.msg;
    const gcc_graph *g = c->g;
    CheckCopyInvariants(g);

    // every compute node on cuda:0
    int optimizers = 0;
    for (int i = 0; i < g->n_nodes; i++) {
      const gcc_node *n = &g->nodes[i];
      if (IsCopy(g, i))
        continue;
      EXPECT_EQ(n->device, kCuda0) << n->name;
      if (IsOptimizer(g, i)) {
        optimizers++;
        EXPECT_EQ(n->op, kind == GCC_OPT_SGD ? GCC_OP_SGD : GCC_OP_ADAM);
        EXPECT_STREQ(gcc_placement_reason_name(n->reason), "with its parameter") << n->name;
        const gcc_value *param = &g->values[n->inputs[0]];
        EXPECT_EQ(param->kind, GCC_VALUE_PARAM) << n->name;
        EXPECT_EQ(param->device, kCuda0) << param->name;
        int states = 0;
        for (int k = 1; k < n->n_inputs; k++) {
          int v = n->inputs[k];
          if (v < 0)
            continue;
          const gcc_value *val = &g->values[v];
          EXPECT_EQ(val->device, kCuda0) << n->name << " reads " << val->name;
          if (val->kind == GCC_VALUE_OPT_STATE) {
            states++;
            EXPECT_EQ(val->param_of, n->inputs[0]) << val->name;
            std::string name = val->name, prefix = std::string(param->name) + ".";
            EXPECT_EQ(name.compare(0, prefix.size(), prefix), 0) << name;
          }
        }
        // SGD with momentum 0.5: momentum_buffer; Adam: exp_avg, exp_avg_sq
        EXPECT_EQ(states, kind == GCC_OPT_SGD ? 1 : 2) << n->name;
      } else {
        EXPECT_EQ(n->reason, GCC_PLACED_REQUESTED)
            << n->name << ": " << gcc_placement_reason_name(n->reason);
      }
    }
    EXPECT_EQ(optimizers, 10);
    int params = 0;
    for (int v = 0; v < g->n_values; v++) {
      const gcc_value *val = &g->values[v];
      if (val->kind == GCC_VALUE_PARAM)
        params++;
      if (val->kind == GCC_VALUE_PARAM || val->kind == GCC_VALUE_GRAD ||
          val->kind == GCC_VALUE_OPT_STATE) {
        EXPECT_EQ(val->device, kCuda0) << val->name;
      }
    }
    EXPECT_EQ(params, 10);
    EXPECT_EQ(g->values[gcc_graph_find(g, "image")].device, kCpu);
    EXPECT_EQ(g->values[gcc_graph_find(g, "label")].device, kCpu);

    // exactly these per-step copies, and no Copy node for a parameter
    auto copies = Copies(g);
    auto step = PerStepCopies(g);
    EXPECT_EQ(copies.size(), step.size()) << "a once-copy node (a parameter copied per node?)";
    ASSERT_EQ(step.size(), 3u);
    ASSERT_TRUE(step.count("image@cuda:0"));
    ASSERT_TRUE(step.count("label@cuda:0"));
    ASSERT_TRUE(step.count("loss@cpu"));
    EXPECT_EQ(step["image@cuda:0"].value, "image");
    EXPECT_EQ(step["image@cuda:0"].from, kCpu);
    EXPECT_EQ(step["image@cuda:0"].to, kCuda0);
    EXPECT_EQ(step["image@cuda:0"].bytes, 64 * 784 * 4);
    EXPECT_EQ(step["label@cuda:0"].from, kCpu);
    EXPECT_EQ(step["label@cuda:0"].to, kCuda0);
    EXPECT_EQ(step["label@cuda:0"].bytes, 64 * 8);
    EXPECT_EQ(step["loss@cpu"].value, "loss");
    EXPECT_EQ(step["loss@cpu"].from, kCuda0);
    EXPECT_EQ(step["loss@cpu"].to, kCpu);
    EXPECT_EQ(step["loss@cpu"].bytes, 4);
    // batch and loss copies are not activations crossing inside the step
    EXPECT_EQ(c->warnings, "");

    // the report: the parameters are uploaded once, at session start
    gcc_device_info devs[2];
    gcc_device_info_cpu(&devs[0]);
    gcc_diag d = {};
    ASSERT_EQ(gcc_device_info_from_arch("sm_90", 0, &devs[1], &d), GCC_OK) << d.msg;
    char *json = nullptr;
    ASSERT_EQ(
        gcc_placement_report_string(g, &c->mem, devs, 2, o.mode, 64, GCC_DUMP_JSON, &json, &d),
        GCC_OK)
        << d.msg;
    json_error_t err;
    json_t *r = json_loads(json, 0, &err);
    free(json);
    ASSERT_NE(r, nullptr) << err.text;
    int param_uploads = 0, per_step = 0;
    size_t i;
    json_t *cj;
    json_array_foreach(json_object_get(r, "copies"), i, cj) {
      std::string value = json_string_value(json_object_get(cj, "value"));
      std::string when = json_string_value(json_object_get(cj, "when"));
      int v = gcc_graph_find(g, value.c_str());
      ASSERT_GE(v, 0) << value;
      if (json_is_null(json_object_get(cj, "node"))) {
        EXPECT_EQ(when, "once") << value;
        EXPECT_STREQ(json_string_value(json_object_get(cj, "from")), "cpu");
        EXPECT_STREQ(json_string_value(json_object_get(cj, "to")), "cuda:0");
        EXPECT_STREQ(json_string_value(json_object_get(cj, "kind")), "H2D");
        EXPECT_EQ(json_integer_value(json_object_get(cj, "bytes")), Bytes(&g->values[v])) << value;
        if (g->values[v].kind == GCC_VALUE_PARAM)
          param_uploads++;
        else
          EXPECT_EQ(g->values[v].kind, GCC_VALUE_CONST) << value << " uploaded at start";
      } else {
        EXPECT_EQ(when, "per_step") << value;
        per_step++;
      }
    }
    EXPECT_EQ(param_uploads, 10);
    EXPECT_EQ(per_step, 3);
    json_decref(r);
  }
}

// ---- 3. a node pinned to the CPU ----------------------------------------------

TEST(Placement, LossPinnedToCpu) {
  GraphPtr m = Mlp();
  ASSERT_NE(m, nullptr);
  Pin(m.get(), "loss", "cpu");
  auto c = Compile(m.get(), Options(m.get(), kCuda0));
  ASSERT_EQ(c->status, GCC_OK) << c->diag.msg;
  const gcc_graph *g = c->g;
  CheckCopyInvariants(g);

  int loss = NodeIndex(g, "loss"), dlogits = NodeIndex(g, "loss/dlogits");
  ASSERT_GE(loss, 0);
  ASSERT_GE(dlogits, 0);
  EXPECT_EQ(g->nodes[loss].device, kCpu);
  EXPECT_EQ(g->nodes[loss].reason, GCC_PLACED_PINNED);
  // the backward node of the loss inherits its pin
  EXPECT_EQ(g->nodes[dlogits].device, kCpu);
  EXPECT_EQ(g->nodes[dlogits].reason, GCC_PLACED_PINNED);
  ASSERT_NE(g->nodes[dlogits].pin, nullptr);
  EXPECT_STREQ(g->nodes[dlogits].pin, "cpu");
  for (int i = 0; i < g->n_nodes; i++) {
    if (!IsCopy(g, i) && i != loss && i != dlogits) {
      EXPECT_EQ(g->nodes[i].device, kCuda0) << g->nodes[i].name;
    }
  }

  auto step = PerStepCopies(g);
  ASSERT_EQ(step.size(), 3u);
  ASSERT_TRUE(step.count("image@cuda:0"));
  ASSERT_TRUE(step.count("fc5.out@cpu"));
  ASSERT_TRUE(step.count("loss/dlogits@cuda:0"));
  EXPECT_EQ(step["image@cuda:0"].bytes, 64 * 784 * 4);
  const CopyInfo &logits = step["fc5.out@cpu"];
  EXPECT_EQ(logits.value, "fc5.out");
  EXPECT_EQ(logits.from, kCuda0);
  EXPECT_EQ(logits.to, kCpu);
  EXPECT_EQ(logits.bytes, 64 * 10 * 4);
  const CopyInfo &grad = step["loss/dlogits@cuda:0"];
  EXPECT_EQ(grad.value, "loss/dlogits");
  EXPECT_EQ(grad.from, kCpu);
  EXPECT_EQ(grad.to, kCuda0);
  EXPECT_EQ(grad.bytes, 64 * 10 * 4);
  // the label stays on the host with its consumers; the loss is already there
  for (auto &kv : Copies(g)) {
    EXPECT_NE(kv.second.value, "label") << kv.first;
    EXPECT_NE(kv.second.value, "loss") << kv.first;
  }
  EXPECT_EQ(g->values[gcc_graph_find(g, "loss")].device, kCpu);
  // both activation crossings inside the step are reported, naming the nodes
  EXPECT_NE(c->warnings.find("'fc5.out'"), std::string::npos) << c->warnings;
  EXPECT_NE(c->warnings.find("'loss/dlogits'"), std::string::npos) << c->warnings;
  EXPECT_NE(c->warnings.find("pinned"), std::string::npos) << c->warnings;
}

// ---- 4. soft placement ----------------------------------------------------------

TEST(Placement, SoftPlacementMovesReluToCpuWithCopiesAround) {
  GraphPtr m = Mlp();
  ASSERT_NE(m, nullptr);
  unsigned char disabled[GCC_OP_COUNT] = {};
  disabled[GCC_OP_RELU] = 1;
  gcc_options o = Options(m.get(), kCuda0);
  o.cuda_disabled = disabled;
  auto c = Compile(m.get(), o);
  ASSERT_EQ(c->status, GCC_OK) << c->diag.msg;
  const gcc_graph *g = c->g;
  CheckCopyInvariants(g);

  auto step = PerStepCopies(g);
  int relus = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    if (IsCopy(g, i))
      continue;
    if (n->op != GCC_OP_RELU) {
      EXPECT_EQ(n->device, kCuda0) << n->name;
      continue;
    }
    relus++;
    EXPECT_EQ(n->device, kCpu) << n->name;
    EXPECT_STREQ(gcc_placement_reason_name(n->reason),
                 "no kernel on the requested device (soft placement)")
        << n->name;
    // its input arrives through a D2H copy, its output leaves through an H2D copy
    const gcc_value *in = &g->values[n->inputs[0]];
    ASSERT_GE(in->producer, 0);
    EXPECT_TRUE(IsCopy(g, in->producer)) << n->name << " reads " << in->name;
    std::string out = g->values[n->outputs[0]].name;
    std::string down = std::string(g->values[g->nodes[in->producer].inputs[0]].name) + "@cpu";
    std::string up = out + "@cuda:0";
    ASSERT_TRUE(step.count(down)) << down;
    ASSERT_TRUE(step.count(up)) << up;
    EXPECT_EQ(step[down].from, kCuda0);
    EXPECT_EQ(step[down].to, kCpu);
    EXPECT_EQ(step[up].from, kCpu);
    EXPECT_EQ(step[up].to, kCuda0);
    EXPECT_EQ(step[up].bytes, Bytes(&g->values[n->outputs[0]]));
    EXPECT_NE(c->warnings.find("'" + std::string(n->name) + "'"), std::string::npos) << c->warnings;
  }
  EXPECT_EQ(relus, 4);
  // image, label, loss, and two per Relu
  EXPECT_EQ(step.size(), 3u + 2u * 4u);

  o.strict_placement = 1;
  auto strict = Compile(m.get(), o);
  EXPECT_EQ(strict->status, GCC_ERR_UNSUPPORTED);
  EXPECT_EQ(strict->g, nullptr);
  std::string msg = strict->diag.msg;
  EXPECT_NE(msg.find("relu1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Relu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;

  // strict placement with every kernel available compiles
  o.cuda_disabled = nullptr;
  auto ok = Compile(m.get(), o);
  EXPECT_EQ(ok->status, GCC_OK) << ok->diag.msg;
}

// ---- 5. pins naming devices the target lacks, and bad pin strings ---------------

TEST(Placement, PinToMissingCudaDeviceIsAnError) {
  GraphPtr m = Mlp();
  ASSERT_NE(m, nullptr);
  Pin(m.get(), "fc2", "cuda:3");
  auto c = Compile(m.get(), Options(m.get(), kCuda0));
  EXPECT_EQ(c->status, GCC_ERR_INVALID_GRAPH);
  EXPECT_EQ(c->g, nullptr);
  std::string msg = c->diag.msg;
  EXPECT_NE(msg.find("'fc2'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda:3"), std::string::npos) << msg;

  // the same pin on a target with four GPUs: fc2 (and its backward and
  // parameters) on cuda:3, with device-to-device copies around it
  gcc_options o = Options(m.get(), kCuda0);
  o.n_cuda_devices = 4;
  auto four = Compile(m.get(), o);
  ASSERT_EQ(four->status, GCC_OK) << four->diag.msg;
  const gcc_graph *g = four->g;
  CheckCopyInvariants(g);
  const int cuda3 = GCC_DEV_CUDA(3);
  for (const char *name : {"fc2", "fc2/dA", "fc2/dB", "fc2/dC"}) {
    int i = NodeIndex(g, name);
    ASSERT_GE(i, 0) << name;
    EXPECT_EQ(g->nodes[i].device, cuda3) << name;
    EXPECT_EQ(g->nodes[i].reason, GCC_PLACED_PINNED) << name;
  }
  for (const char *name :
       {"fc2.weight", "fc2.bias", "fc2.weight.grad", "fc2.weight.momentum_buffer"}) {
    int v = gcc_graph_find(g, name);
    ASSERT_GE(v, 0) << name;
    EXPECT_EQ(g->values[v].device, cuda3) << name;
  }
  auto step = PerStepCopies(g);
  ASSERT_TRUE(step.count("relu1.out@cuda:3"));
  ASSERT_TRUE(step.count("fc2.out@cuda:0"));
  EXPECT_EQ(step["relu1.out@cuda:3"].from, kCuda0);
  EXPECT_EQ(step["fc2.out@cuda:0"].from, cuda3);
}

TEST(Placement, BadPinStringsAreRejected) {
  // by the loader, naming the node and the string
  for (const char *bad :
       {"gpu0", "cuda:", "cuda:x", "cuda:-1", "cuda:1a", "CPU", "cuda:12345", "cuda0", " cpu"}) {
    SCOPED_TRACE(bad);
    GraphPtr m = Mlp();
    ASSERT_NE(m, nullptr);
    Pin(m.get(), "fc1", bad);
    uint8_t *bytes = nullptr;
    size_t size = 0;
    gcc_diag d = {};
    ASSERT_EQ(gcc_model_serialize(m.get(), &bytes, &size, &d), GCC_OK) << d.msg;
    gcc_graph *g = nullptr;
    gcc_status s = gcc_model_parse(bytes, size, "pinned.pb", &g, &d);
    free(bytes);
    gcc_graph_free(g);
    EXPECT_EQ(s, GCC_ERR_INVALID_GRAPH);
    std::string msg = d.msg;
    EXPECT_NE(msg.find("pinned.pb"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'fc1'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string("'") + bad + "'"), std::string::npos) << msg;
  }
  // good pins load and keep their string
  for (const char *good : {"cpu", "cuda", "cuda:0", "cuda:7"}) {
    SCOPED_TRACE(good);
    GraphPtr m = Mlp();
    ASSERT_NE(m, nullptr);
    Pin(m.get(), "fc1", good);
    uint8_t *bytes = nullptr;
    size_t size = 0;
    gcc_diag d = {};
    ASSERT_EQ(gcc_model_serialize(m.get(), &bytes, &size, &d), GCC_OK) << d.msg;
    gcc_graph *g = nullptr;
    gcc_status s = gcc_model_parse(bytes, size, "pinned.pb", &g, &d);
    free(bytes);
    GraphPtr loaded(g);
    ASSERT_EQ(s, GCC_OK) << d.msg;
    int i = NodeIndex(g, "fc1");
    ASSERT_GE(i, 0);
    ASSERT_NE(g->nodes[i].pin, nullptr);
    EXPECT_STREQ(g->nodes[i].pin, good);
  }
  // a pin set in memory (no loader) is checked by placement itself
  GraphPtr m = Mlp();
  ASSERT_NE(m, nullptr);
  Pin(m.get(), "relu3", "tpu:0");
  auto c = Compile(m.get(), Options(m.get(), kCuda0));
  EXPECT_EQ(c->status, GCC_ERR_INVALID_GRAPH);
  EXPECT_NE(std::string(c->diag.msg).find("relu3"), std::string::npos) << c->diag.msg;
  EXPECT_NE(std::string(c->diag.msg).find("tpu:0"), std::string::npos) << c->diag.msg;
}

// ---- 6. the report: JSON, text and DOT agree with each other and the graph --------

struct TextReport {
  struct Device {
    long long nodes = -1, launches = -1, persistent = -1, arena = -1;
  };
  std::map<std::string, Device> devices;
  std::vector<std::vector<std::string>> nodes; // name, op, device
  long long copies_per_step = -1, bytes_per_step = -1, copies_once = -1, bytes_once = -1;
  long long launches = -1;
  std::vector<std::vector<std::string>> copies; // value from -> to kind bytes when...
};

std::vector<std::string> Split(const std::string &line) {
  std::istringstream in(line);
  std::vector<std::string> t;
  std::string w;
  while (in >> w)
    t.push_back(w);
  return t;
}

bool StartsWith(const std::string &s, const std::string &p) {
  return s.compare(0, p.size(), p) == 0;
}

TextReport ParseText(const std::string &text) {
  TextReport r;
  std::istringstream in(text);
  std::string line, section, last_device;
  bool header = false;
  while (std::getline(in, line)) {
    if (line.empty()) {
      section.clear();
      continue;
    }
    if (line == "devices" || line == "nodes") {
      section = line;
      header = line == "nodes";
      continue;
    }
    if (StartsWith(line, "copies: ")) {
      EXPECT_EQ(sscanf(line.c_str(),
                       "copies: %lld per step (%lld bytes per step), %lld once (%lld bytes at "
                       "session start)",
                       &r.copies_per_step, &r.bytes_per_step, &r.copies_once, &r.bytes_once),
                4)
          << line;
      section = "copies";
      header = true;
      continue;
    }
    if (StartsWith(line, "launches per step")) {
      const char *colon = strrchr(line.c_str(), ':');
      EXPECT_NE(colon, nullptr) << line;
      if (colon != nullptr)
        r.launches = atoll(colon + 1);
      continue;
    }
    if (section == "devices") {
      if (StartsWith(line, "          ")) {
        TextReport::Device dv;
        double mflop;
        EXPECT_EQ(sscanf(line.c_str(),
                         " %lld nodes, %lld launches per step, %lf MFLOP per step, persistent "
                         "arena %lld bytes, step arena %lld bytes",
                         &dv.nodes, &dv.launches, &mflop, &dv.persistent, &dv.arena),
                  5)
            << line;
        r.devices[last_device] = dv;
      } else {
        last_device = Split(line).at(0);
      }
    } else if (section == "nodes") {
      if (header) {
        header = false;
        continue;
      }
      auto t = Split(line);
      EXPECT_GE(t.size(), 3u) << line;
      if (t.size() >= 3)
        r.nodes.push_back({t[0], t[1], t[2]});
    } else if (section == "copies") {
      if (header) {
        header = false;
        continue;
      }
      r.copies.push_back(Split(line));
    }
  }
  return r;
}

long long JInt(const json_t *o, const char *k) {
  const json_t *v = json_object_get(o, k);
  EXPECT_TRUE(json_is_integer(v)) << k;
  return static_cast<long long>(json_integer_value(v));
}
std::string JStr(const json_t *o, const char *k) {
  const char *s = json_string_value(json_object_get(o, k));
  EXPECT_NE(s, nullptr) << k;
  return s != nullptr ? s : "";
}

void CheckReport(const Compiled &c) {
  const gcc_graph *g = c.g;
  gcc_device_info devs[2];
  gcc_device_info_cpu(&devs[0]);
  gcc_diag d = {};
  ASSERT_EQ(gcc_device_info_from_arch("sm_80", 0, &devs[1], &d), GCC_OK) << d.msg;
  char *json = nullptr, *text = nullptr, *dot = nullptr;
  ASSERT_EQ(gcc_placement_report_string(g, &c.mem, devs, 2, c.opt.mode, c.opt.batch_size,
                                        GCC_DUMP_JSON, &json, &d),
            GCC_OK)
      << d.msg;
  ASSERT_EQ(gcc_placement_report_string(g, &c.mem, devs, 2, c.opt.mode, c.opt.batch_size,
                                        GCC_DUMP_TEXT, &text, &d),
            GCC_OK)
      << d.msg;
  ASSERT_EQ(gcc_placement_report_string(g, &c.mem, devs, 2, c.opt.mode, c.opt.batch_size,
                                        GCC_DUMP_DOT, &dot, &d),
            GCC_OK)
      << d.msg;
  std::string text_s = text, dot_s = dot;
  json_error_t err;
  json_t *r = json_loads(json, 0, &err);
  free(json);
  free(text);
  free(dot);
  ASSERT_NE(r, nullptr) << err.text << " at line " << err.line;
  std::unique_ptr<json_t, void (*)(json_t *)> guard(r, [](json_t *j) { json_decref(j); });

  EXPECT_EQ(JStr(r, "schema"), "gcc-train.placement/1");
  EXPECT_EQ(JStr(r, "mode"), c.opt.mode == GCC_MODE_EVAL ? "eval" : "train");
  EXPECT_EQ(JInt(r, "batch_size"), c.opt.batch_size);

  // independent figures from the compiled graph
  std::vector<char> ref(static_cast<size_t>(g->n_values), 0);
  for (int i = 0; i < g->n_nodes; i++) {
    for (int k = 0; k < g->nodes[i].n_inputs; k++)
      if (g->nodes[i].inputs[k] >= 0)
        ref[g->nodes[i].inputs[k]] = 1;
    for (int k = 0; k < g->nodes[i].n_outputs; k++)
      ref[g->nodes[i].outputs[k]] = 1;
  }
  std::map<std::string, long long> nodes_on, launches_on, persistent_on;
  long long copies_step = 0, bytes_step = 0, copies_once = 0, bytes_once = 0, launches = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_node *n = &g->nodes[i];
    nodes_on[Dev(n->device)]++;
    if (IsCopy(g, i)) {
      long long b = Bytes(&g->values[n->inputs[0]]);
      if (CopyOnce(g, i)) {
        copies_once++;
        bytes_once += b;
      } else {
        copies_step++;
        bytes_step += b;
      }
    } else if (!IsView(g, i) && n->group < 0) {
      // an unfused node is one launch; a fused group (below) is one launch
      launches_on[Dev(n->device)]++;
      launches++;
    }
  }
  for (int k = 0; k < g->n_groups; k++) {
    if (g->groups[k].kind == GCC_GROUP_COPY)
      continue;
    launches_on[Dev(g->groups[k].device)]++;
    launches++;
  }
  for (int v = 0; v < g->n_values; v++) {
    const gcc_value *val = &g->values[v];
    if (!ref[v])
      continue;
    if (val->kind == GCC_VALUE_PARAM || val->kind == GCC_VALUE_GRAD ||
        val->kind == GCC_VALUE_OPT_STATE)
      persistent_on[Dev(val->device)] += Bytes(val);
    if ((val->kind == GCC_VALUE_PARAM || val->kind == GCC_VALUE_CONST) && val->device != kCpu) {
      copies_once++;
      bytes_once += Bytes(val);
    }
  }

  TextReport t = ParseText(text_s);

  // totals: JSON == graph == text
  const json_t *tot = json_object_get(r, "totals");
  EXPECT_EQ(JInt(tot, "copies_per_step"), copies_step);
  EXPECT_EQ(JInt(tot, "bytes_per_step"), bytes_step);
  EXPECT_EQ(JInt(tot, "copies_once"), copies_once);
  EXPECT_EQ(JInt(tot, "bytes_once"), bytes_once);
  EXPECT_EQ(JInt(tot, "launches_per_step"), launches);
  EXPECT_EQ(t.copies_per_step, copies_step);
  EXPECT_EQ(t.bytes_per_step, bytes_step);
  EXPECT_EQ(t.copies_once, copies_once);
  EXPECT_EQ(t.bytes_once, bytes_once);
  EXPECT_EQ(t.launches, launches);

  // devices
  const json_t *devices = json_object_get(r, "devices");
  std::set<std::string> listed;
  size_t i;
  json_t *dj;
  json_array_foreach(devices, i, dj) {
    std::string id = JStr(dj, "id");
    SCOPED_TRACE(id);
    listed.insert(id);
    int dev = id == "cpu" ? kCpu : GCC_DEV_CUDA(atoi(id.c_str() + 5));
    long long arena = dev < c.mem.n_devices ? static_cast<long long>(c.mem.device_bytes[dev]) : 0;
    EXPECT_EQ(JInt(dj, "nodes"), nodes_on[id]);
    EXPECT_EQ(JInt(dj, "launches_per_step"), launches_on[id]);
    EXPECT_EQ(JInt(dj, "persistent_bytes"), persistent_on[id]);
    EXPECT_EQ(JInt(dj, "step_arena_bytes"), arena);
    if (GCC_DEV_IS_CUDA(dev))
      EXPECT_EQ(JStr(dj, "compute_capability"), "8.0");
    else
      EXPECT_TRUE(json_is_null(json_object_get(dj, "compute_capability")));
    ASSERT_TRUE(t.devices.count(id)) << text_s;
    EXPECT_EQ(t.devices[id].nodes, nodes_on[id]);
    EXPECT_EQ(t.devices[id].launches, launches_on[id]);
    EXPECT_EQ(t.devices[id].persistent, persistent_on[id]);
    EXPECT_EQ(t.devices[id].arena, arena);
  }
  EXPECT_EQ(t.devices.size(), listed.size());
  for (auto &kv : nodes_on)
    EXPECT_TRUE(listed.count(kv.first)) << kv.first << " not listed";

  // nodes: JSON == graph == text, in order
  const json_t *nodes = json_object_get(r, "nodes");
  ASSERT_EQ(json_array_size(nodes), static_cast<size_t>(g->n_nodes));
  ASSERT_EQ(t.nodes.size(), static_cast<size_t>(g->n_nodes));
  json_t *nj;
  json_array_foreach(nodes, i, nj) {
    const gcc_node *n = &g->nodes[i];
    EXPECT_EQ(JStr(nj, "name"), n->name);
    EXPECT_EQ(JStr(nj, "op"), gcc_op_name(n->op));
    EXPECT_EQ(JStr(nj, "device"), Dev(n->device)) << n->name;
    EXPECT_EQ(JStr(nj, "reason"), gcc_placement_reason_name(n->reason)) << n->name;
    EXPECT_EQ(json_array_size(json_object_get(nj, "outputs")), static_cast<size_t>(n->n_outputs));
    EXPECT_EQ(t.nodes[i][0], n->name);
    EXPECT_EQ(t.nodes[i][1], gcc_op_name(n->op));
    EXPECT_EQ(t.nodes[i][2], Dev(n->device)) << n->name;
  }

  // copies: JSON == text, line by line
  const json_t *copies = json_object_get(r, "copies");
  ASSERT_EQ(t.copies.size(), json_array_size(copies));
  long long n_step = 0, n_once = 0;
  json_t *cj;
  json_array_foreach(copies, i, cj) {
    const auto &row = t.copies[i];
    ASSERT_GE(row.size(), 7u);
    EXPECT_EQ(row[0], JStr(cj, "value"));
    EXPECT_EQ(row[1], JStr(cj, "from"));
    EXPECT_EQ(row[3], JStr(cj, "to"));
    EXPECT_EQ(row[4], JStr(cj, "kind"));
    EXPECT_EQ(atoll(row[5].c_str()), JInt(cj, "bytes"));
    std::string when = JStr(cj, "when");
    EXPECT_EQ(row[6], when == "once" ? "once" : "per");
    (when == "once" ? n_once : n_step)++;
    std::string from = JStr(cj, "from"), to = JStr(cj, "to"), kind = JStr(cj, "kind");
    EXPECT_EQ(kind, std::string(from == "cpu" ? "H" : "D") + "2" + (to == "cpu" ? "H" : "D"));
    EXPECT_NE(from, to);
  }
  EXPECT_EQ(n_step, copies_step);
  EXPECT_EQ(n_once, copies_once);

  // DOT: a digraph with one node statement per graph node and one edge per input
  EXPECT_TRUE(StartsWith(dot_s, "digraph")) << dot_s.substr(0, 40);
  std::istringstream in(dot_s);
  std::string line;
  std::map<int, int> stmts;
  int edges = 0, expected_edges = 0;
  while (std::getline(in, line)) {
    int a, b;
    char q;
    if (sscanf(line.c_str(), " \"n%d\" [label=%c", &a, &q) == 2) // at any cluster depth
      stmts[a]++;
    if (sscanf(line.c_str(), "  \"n%d\" -> \"n%d\"", &a, &b) == 2 ||
        sscanf(line.c_str(), "  \"v%d\" -> \"n%d\"", &a, &b) == 2)
      edges++;
  }
  EXPECT_EQ(stmts.size(), static_cast<size_t>(g->n_nodes));
  for (int k = 0; k < g->n_nodes; k++)
    EXPECT_EQ(stmts[k], 1) << "DOT statements of node " << k;
  for (int k = 0; k < g->n_nodes; k++)
    for (int j = 0; j < g->nodes[k].n_inputs; j++)
      expected_edges += g->nodes[k].inputs[j] >= 0;
  EXPECT_EQ(edges, expected_edges);
  EXPECT_EQ(dot_s.substr(dot_s.size() - 2), "}\n");
  // readable: left to right, phases and launches as clusters, copies in the legend
  EXPECT_NE(dot_s.find("  rankdir=LR;\n"), std::string::npos);
  EXPECT_NE(dot_s.find("\"legend_copy\""), std::string::npos);
  EXPECT_NE(dot_s.find("subgraph cluster_forward {"), std::string::npos);
  int groups = 0;
  for (int k = 0; k < g->n_groups; k++)
    if (g->groups[k].n_nodes > 0) {
      groups++;
      EXPECT_NE(dot_s.find("subgraph cluster_group_" + std::to_string(k) + " {"), std::string::npos)
          << g->groups[k].name;
    }
  size_t clusters = 0;
  for (size_t at = dot_s.find("subgraph cluster_group_"); at != std::string::npos;
       at = dot_s.find("subgraph cluster_group_", at + 1))
    clusters++;
  EXPECT_EQ(clusters, static_cast<size_t>(groups));
  // the phases in order: forward's cluster before backward's before the optimizer's
  size_t fw = dot_s.find("cluster_forward"), bw = dot_s.find("cluster_backward"),
         op = dot_s.find("cluster_optimizer");
  bool training = false;
  for (int k = 0; k < g->n_nodes; k++)
    training |= g->nodes[k].phase == GCC_PHASE_OPTIMIZER;
  if (training) {
    EXPECT_LT(fw, bw);
    EXPECT_LT(bw, op);
    EXPECT_NE(op, std::string::npos);
  }
}

TEST(PlacementReport, RenderingsAgreeWithTheGraph) {
  GraphPtr m = Mlp();
  ASSERT_NE(m, nullptr);
  unsigned char disabled[GCC_OP_COUNT] = {};
  disabled[GCC_OP_RELU] = 1;
  struct Case {
    const char *what;
    int device;
    gcc_mode mode;
    const char *pin_node, *pin;
    bool soft;
  } cases[] = {
      {"cpu", kCpu, GCC_MODE_TRAIN, nullptr, nullptr, false},
      {"cuda", kCuda0, GCC_MODE_TRAIN, nullptr, nullptr, false},
      {"cuda eval", kCuda0, GCC_MODE_EVAL, nullptr, nullptr, false},
      {"cuda, loss on cpu", kCuda0, GCC_MODE_TRAIN, "loss", "cpu", false},
      {"cpu, fc3 on cuda", kCpu, GCC_MODE_TRAIN, "fc3", "cuda:0", false},
      {"cuda, soft Relu", kCuda0, GCC_MODE_TRAIN, nullptr, nullptr, true},
  };
  for (const Case &k : cases) {
    SCOPED_TRACE(k.what);
    GraphPtr model = Mlp();
    ASSERT_NE(model, nullptr);
    if (k.pin_node != nullptr)
      Pin(model.get(), k.pin_node, k.pin);
    gcc_options o = Options(model.get(), k.device, k.mode);
    if (k.soft)
      o.cuda_disabled = disabled;
    auto c = Compile(model.get(), o);
    ASSERT_EQ(c->status, GCC_OK) << c->diag.msg;
    CheckCopyInvariants(c->g);
    CheckReport(*c);
  }
  // the linear model too (MSE loss, inline data)
  gcc_graph *lin = nullptr;
  gcc_diag d = {};
  ASSERT_EQ(gcc_model_linear(GCC_LINEAR_SEED, &lin, &d), GCC_OK) << d.msg;
  GraphPtr linear(lin);
  auto c = Compile(lin, Options(lin, kCuda0));
  ASSERT_EQ(c->status, GCC_OK) << c->diag.msg;
  CheckCopyInvariants(c->g);
  CheckReport(*c);
}

TEST(PlacementReport, FormatNames) {
  gcc_dump_format f;
  gcc_diag d = {};
  EXPECT_EQ(gcc_dump_format_parse(nullptr, &f, &d), GCC_OK);
  EXPECT_EQ(f, GCC_DUMP_TEXT);
  EXPECT_EQ(gcc_dump_format_parse("json", &f, &d), GCC_OK);
  EXPECT_EQ(f, GCC_DUMP_JSON);
  EXPECT_EQ(gcc_dump_format_parse("dot", &f, &d), GCC_OK);
  EXPECT_EQ(f, GCC_DUMP_DOT);
  EXPECT_EQ(gcc_dump_format_parse("yaml", &f, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(d.msg).find("yaml"), std::string::npos) << d.msg;
}

// ---- 7. the CLI ------------------------------------------------------------------

// Runs gcc-train with `args` (tests/subprocess.h).
gcc_test::ProcResult Cli(const std::vector<std::string> &args) {
  return gcc_test::RunRunfile("cli/gcc-train", args);
}

bool Contains(const std::string &s, const std::string &w) {
  return s.find(w) != std::string::npos;
}

// On the CPU the text report ends with each node's library kernel: the plan
// is built as a run builds it, so a GEMM's library is the one a run would
// use (forced here with GCC_CPU_GEMM; measured or cached otherwise).
TEST(PlacementCli, CpuDumpListsEachGemmsLibrary) {
  std::string model = Runfile("models/mnist_mlp.pb");
  gcc_test::ProcOptions o;
  o.env = {{"GCC_CPU_GEMM", "openblas"}, {"XDG_CACHE_HOME", TmpPath("cpu_choice_cache")}};
  gcc_test::ProcResult r = gcc_test::RunRunfile(
      "cli/gcc-train", {model, "--device", "cpu", "--threads", "2", "--dump-placement"}, o);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "\nCPU library kernels (2 threads;")) << r.out;
  EXPECT_TRUE(Contains(r.out, "\n  fc1 (Gemm): sgemm (OpenBLAS) 64x512x784 B^T bias "
                              "[openblas: GCC_CPU_GEMM=openblas]\n"))
      << r.out;
  EXPECT_TRUE(Contains(r.out, "\n  fc1/dB (Gemm): sgemm (OpenBLAS) 512x784x64 A^T "
                              "[openblas: GCC_CPU_GEMM=openblas]\n"))
      << r.out;
  o.env[0].second = "onednn";
  r = gcc_test::RunRunfile("cli/gcc-train",
                           {model, "--device", "cpu", "--threads", "2", "--dump-placement"}, o);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "\n  fc1 (Gemm): matmul (")) << r.out;
  EXPECT_TRUE(Contains(r.out, "[onednn: GCC_CPU_GEMM=onednn]\n")) << r.out;
  o.env[0].second = "mkl";
  r = gcc_test::RunRunfile("cli/gcc-train",
                           {model, "--device", "cpu", "--threads", "2", "--dump-placement"}, o);
  EXPECT_TRUE(Contains(r.out, "CPU library kernels: not known")) << r.out;
  EXPECT_TRUE(Contains(r.out, "GCC_CPU_GEMM=mkl: expected auto, onednn, openblas or gemv"))
      << r.out;
}

// Issue 29: --deterministic (default) / --no-deterministic reach the
// convolutions: --dump-placement names the mode (without a GPU, on stderr;
// on one, the training plan is built there and the report of each shape's
// timed algorithms follows the placement).
TEST(PlacementCli, DeterministicFlagNamedWithTheConvolutions) {
  std::string model = Runfile("models/mnist_cnn.pb");
  char reason[512];
  const bool no_gpu = gcc_cuda_device_count(reason, sizeof reason) == 0;
  for (const char *flag : {"", "--deterministic", "--no-deterministic"}) {
    SCOPED_TRACE(flag);
    std::vector<std::string> args = {model, "--device", "cuda", "--dump-placement"};
    if (*flag)
      args.push_back(flag);
    gcc_test::ProcResult r = Cli(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    bool any = std::string(flag) == "--no-deterministic";
    EXPECT_TRUE(Contains(r.err, any ? "cuDNN convolutions (5 nodes): any algorithm "
                                      "(--no-deterministic)"
                                    : "cuDNN convolutions (5 nodes): deterministic algorithms "
                                      "only (--deterministic, the default)"))
        << r.err;
    if (!no_gpu) {
      EXPECT_TRUE(Contains(r.out, any ? "cuDNN convolutions (any algorithms"
                                      : "cuDNN convolutions (deterministic algorithms"))
          << r.out;
    }
  }
  // the MLP has no convolution: nothing said
  gcc_test::ProcResult mlp = Cli({Runfile("models/mnist_mlp.pb"), "--device", "cuda",
                                  "--dump-placement", "--no-deterministic"});
  ASSERT_EQ(mlp.exit_code, 0) << mlp.err;
  EXPECT_FALSE(Contains(mlp.err, "cuDNN convolutions")) << mlp.err;
}

TEST(PlacementCli, DumpPlacementFormats) {
  std::string model = Runfile("models/mnist_mlp.pb");
  char reason[512];
  const bool no_gpu = gcc_cuda_device_count(reason, sizeof reason) == 0;

  gcc_test::ProcResult text = Cli({model, "--device", "cuda", "--dump-placement"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(StartsWith(text.out, "placement of ")) << text.out;
  EXPECT_TRUE(Contains(text.out, "image@cuda:0")) << text.out;
  EXPECT_TRUE(Contains(text.out, "copies: 3 per step (201220 bytes per step)")) << text.out;
  TextReport t = ParseText(text.out);
  EXPECT_TRUE(t.devices.count("cuda:0"));
  EXPECT_GT(t.nodes.size(), 40u);
  if (no_gpu) {
    EXPECT_TRUE(Contains(text.err, "no usable CUDA GPU")) << text.err;
    EXPECT_TRUE(Contains(text.out, "compute capability 9.0")) << text.out;
    // which cuBLASLt epilogues fall back is known only on the GPU (issue 19)
    EXPECT_TRUE(Contains(text.err, "GEMM epilogues: which ones cuBLASLt offers is decided when "
                                   "the plan is built on the GPU"))
        << text.err;
  } else { // the plan built on the GPU says which GEMM groups fall back, and why
    EXPECT_TRUE(Contains(text.out, "GEMM epilogue")) << text.out;
  }

  gcc_test::ProcResult json = Cli({model, "--device", "cuda", "--dump-placement=json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  json_error_t err;
  json_t *r = json_loads(json.out.c_str(), 0, &err);
  ASSERT_NE(r, nullptr) << err.text;
  EXPECT_STREQ(json_string_value(json_object_get(r, "schema")), "gcc-train.placement/1");
  EXPECT_EQ(json_integer_value(json_object_get(json_object_get(r, "totals"), "copies_per_step")),
            3);
  EXPECT_EQ(json_integer_value(json_object_get(json_object_get(r, "totals"), "bytes_per_step")),
            t.bytes_per_step);
  json_decref(r);

  gcc_test::ProcResult dot = Cli({model, "--device", "cuda", "--dump-placement=dot"});
  ASSERT_EQ(dot.exit_code, 0) << dot.err;
  EXPECT_TRUE(StartsWith(dot.out, "digraph")) << dot.out.substr(0, 60);
  EXPECT_TRUE(Contains(dot.out, "image@cuda:0"));

  gcc_test::ProcResult yaml = Cli({model, "--device", "cuda", "--dump-placement=yaml"});
  EXPECT_EQ(yaml.exit_code, 2) << yaml.err;
  EXPECT_TRUE(Contains(yaml.err, "yaml")) << yaml.err;
  EXPECT_EQ(yaml.out, "");
}

// --precision bf16: the report gives each value's dtype and what 16-bit
// storage saves; a precision that is none of the four is a command-line
// error before anything is read.
TEST(PlacementCli, DumpPlacementShowsSixteenBitValuesAndTheirSavings) {
  std::string model = Runfile("models/mnist_mlp.pb");
  gcc_test::ProcResult text =
      Cli({model, "--device", "cuda", "--precision", "bf16", "--dump-placement"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(Contains(text.out, "precision bf16: ")) << text.out;
  EXPECT_TRUE(Contains(text.out, "fc1.weight.bf16")) << text.out;
  // the weight copies are the optimizer updates' outputs: no Cast of a parameter each step
  EXPECT_FALSE(Contains(text.out, "fc1.weight/cast_bf16")) << text.out;
  size_t at = text.out.find("fc1.weight/update");
  ASSERT_NE(at, std::string::npos) << text.out;
  std::string line = text.out.substr(at, text.out.find('\n', at) - at);
  EXPECT_TRUE(Contains(line, "fc1.weight.bf16 bfloat16[512, 784]")) << line;
  EXPECT_TRUE(Contains(text.out, "bfloat16[64, 512]")) << text.out; // a node's output column

  gcc_test::ProcResult json =
      Cli({model, "--device", "cuda", "--precision", "bf16", "--dump-placement=json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  json_error_t err;
  json_t *r = json_loads(json.out.c_str(), 0, &err);
  ASSERT_NE(r, nullptr) << err.text;
  const json_t *p = json_object_get(r, "precision");
  EXPECT_STREQ(json_string_value(json_object_get(p, "mode")), "bf16");
  const json_t *values = json_object_get(p, "values");
  ASSERT_GT(json_array_size(values), 10u);
  long long sum = 0;
  size_t i;
  json_t *v;
  json_array_foreach(values, i, v) {
    EXPECT_STREQ(json_string_value(json_object_get(v, "dtype")), "bfloat16");
    // 2 bytes an element instead of 4: it saves as much as it takes
    EXPECT_EQ(json_integer_value(json_object_get(v, "saved_bytes")),
              json_integer_value(json_object_get(v, "bytes")));
    sum += json_integer_value(json_object_get(v, "saved_bytes"));
  }
  EXPECT_EQ(json_integer_value(json_object_get(p, "saved_bytes")), sum);
  EXPECT_GE(sum, 2 * 784 * 512) << "at least fc1's weight copy"; // 784x512 bfloat16
  json_decref(r);

  // float32: no 16-bit value, and the report says nothing of precision
  gcc_test::ProcResult plain = Cli({model, "--device", "cuda", "--dump-placement"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_FALSE(Contains(plain.out, "precision")) << plain.out;
  EXPECT_FALSE(Contains(plain.out, "bfloat16")) << plain.out;

  gcc_test::ProcResult bad = Cli({model, "--precision", "fp64", "--dump-placement"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(Contains(bad.err, "--precision 'fp64'")) << bad.err;
  EXPECT_EQ(bad.out, "");
}

// Both CNNs on --device cuda: every convolution and pooling node, forward
// and backward, stays on cuda:0 (cuDNN), none falls back to the CPU, also
// under --strict-placement; the JSON names each group's cuDNN call.
TEST(PlacementCli, CnnConvolutionsGoToCudaThroughCudnn) {
  for (const char *name : {"models/cifar_cnn.pb", "models/mnist_cnn.pb"}) {
    SCOPED_TRACE(name);
    std::string model = Runfile(name);
    gcc_test::ProcResult json =
        Cli({model, "--device", "cuda", "--strict-placement", "--dump-placement=json"});
    ASSERT_EQ(json.exit_code, 0) << json.err;
    json_error_t err;
    json_t *r = json_loads(json.out.c_str(), 0, &err);
    ASSERT_NE(r, nullptr) << err.text;
    size_t i;
    json_t *nj;
    int cudnn_nodes = 0;
    json_array_foreach(json_object_get(r, "nodes"), i, nj) {
      std::string op = json_string_value(json_object_get(nj, "op"));
      if (op.find("Conv") == 0 || op.find("Pool") != std::string::npos) {
        cudnn_nodes++;
        EXPECT_STREQ(json_string_value(json_object_get(nj, "device")), "cuda:0")
            << json_string_value(json_object_get(nj, "name"));
      }
    }
    EXPECT_EQ(cudnn_nodes, 4 + 7); // conv1, pool1, conv2, pool2 and their 7 gradients
    int cudnn_groups = 0;
    json_t *gj;
    json_array_foreach(json_object_get(r, "groups"), i, gj) {
      if (std::string(json_string_value(json_object_get(gj, "kind"))) != "cudnn")
        continue;
      cudnn_groups++;
      const char *call = json_string_value(json_object_get(gj, "call"));
      ASSERT_NE(call, nullptr);
      EXPECT_EQ(std::string(call).find("cudnn"), 0u) << call;
    }
    EXPECT_EQ(cudnn_groups, 11);
    json_decref(r);
    gcc_test::ProcResult text = Cli({model, "--device", "cuda", "--dump-placement"});
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_TRUE(Contains(text.out, "cudnnConvolutionBackwardData")) << text.out;
    EXPECT_FALSE(Contains(text.out, "soft placement")) << text.out; // no CPU fallback
  }
}

TEST(PlacementCli, DumpPlacementFileAndCudaArch) {
  std::string model = Runfile("models/mnist_mlp.pb");
  char reason[512];
  const bool no_gpu = gcc_cuda_device_count(reason, sizeof reason) == 0;

  std::string file = TmpPath("placement.json");
  unlink(file.c_str());
  gcc_test::ProcResult f =
      Cli({model, "--device", "cuda", "--dump-placement=json", "--dump-placement-file", file});
  ASSERT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(f.out, "");
  std::string written = gcc_test::ReadText(file);
  json_error_t err;
  json_t *r = json_loads(written.c_str(), 0, &err);
  ASSERT_NE(r, nullptr) << err.text << ": " << written.substr(0, 80);
  EXPECT_STREQ(json_string_value(json_object_get(r, "schema")), "gcc-train.placement/1");
  json_decref(r);

  // the file alone implies the dump (text by default)
  std::string tfile = TmpPath("placement.txt");
  unlink(tfile.c_str());
  gcc_test::ProcResult ft = Cli({model, "--device", "cpu", "--dump-placement-file", tfile});
  ASSERT_EQ(ft.exit_code, 0) << ft.err;
  EXPECT_TRUE(StartsWith(gcc_test::ReadText(tfile), "placement of ")) << gcc_test::ReadText(tfile);

  gcc_test::ProcResult a80 =
      Cli({model, "--device", "cuda", "--cuda-arch", "sm_80", "--dump-placement"});
  ASSERT_EQ(a80.exit_code, 0) << a80.err;
  if (no_gpu) {
    EXPECT_TRUE(Contains(a80.out, "compute capability 8.0")) << a80.out;
    EXPECT_TRUE(Contains(a80.out, "108 SMs")) << a80.out;
  }

  gcc_test::ProcResult a70 =
      Cli({model, "--device", "cuda", "--cuda-arch", "sm_70", "--dump-placement"});
  EXPECT_EQ(a70.exit_code, 2);
  EXPECT_TRUE(Contains(a70.err, "sm_70")) << a70.err;
  EXPECT_EQ(a70.out, "");
}

} // namespace
