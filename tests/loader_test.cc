// Tests of the model loader and writer (graph/loader.h): every validation
// error a bad .pb file can trigger, each checked for its status code and for
// a message that names the file and the node / value / field at fault; the
// serialize -> parse -> serialize round trip; and the atomic writer
// (gcc_model_save): failures leave no file and no temporary behind, and an
// overwrite replaces the old file as a whole (rename, not rewrite in place).
//
// Bad models are written here with protobuf-c (graph/graph.pb-c.h) from a
// small C++ description (ModelSpec), starting from a valid model (Base())
// that each test breaks in exactly one way.
#include "graph/loader.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "graph/graph.pb-c.h"
#include "graph/ir.h"
#include "models/models.h"
#include "tests/testutil.h"

using namespace gcc_test; // tests/testutil.h

namespace {

using Bytes = std::vector<uint8_t>;

// ---- files ----------------------------------------------------------------

// ---- models as data ---------------------------------------------------------

struct TensorSpec {
  std::string name;
  int dtype = GCC__DATA_TYPE__DT_FLOAT32;
  std::vector<int64_t> dims;
  std::string raw;
  bool has_raw = true;
};

struct ValueInfoSpec {
  std::string name;
  int dtype = GCC__DATA_TYPE__DT_FLOAT32;
  std::vector<int64_t> dims;
};

struct AttrSpec {
  std::string name;
  int type = GCC__ATTRIBUTE__TYPE__INT;
  int64_t i = 0;
  float f = 0.0f;
  std::string s;
  std::vector<int64_t> ints;
};

struct NodeSpec {
  std::string name, op;
  std::vector<std::string> inputs, outputs;
  std::vector<AttrSpec> attrs;
  std::string device;
};

struct TrainingSpec {
  bool present = false;
  std::string loss, prediction, input, target;
  int64_t batch_size = 8;
  float lr = 0.1f;
};

struct ModelSpec {
  bool has_version = true;
  uint32_t version = GCC_FORMAT_VERSION;
  std::string graph_name = "base";
  std::vector<NodeSpec> nodes;
  std::vector<TensorSpec> initializers;
  std::vector<ValueInfoSpec> inputs, outputs;
  TrainingSpec training;

  NodeSpec *Node(const std::string &name) {
    for (NodeSpec &n : nodes)
      if (n.name == name)
        return &n;
    return nullptr;
  }
  TensorSpec *Init(const std::string &name) {
    for (TensorSpec &t : initializers)
      if (t.name == name)
        return &t;
    return nullptr;
  }
  ValueInfoSpec *Input(const std::string &name) {
    for (ValueInfoSpec &v : inputs)
      if (v.name == name)
        return &v;
    return nullptr;
  }
};

std::string Floats(size_t n, float start = 0.01f) {
  std::string s(n * sizeof(float), '\0');
  for (size_t i = 0; i < n; i++) {
    float v = start * static_cast<float>((i % 7) + 1) * ((i % 2) ? -1.0f : 1.0f);
    memcpy(&s[i * sizeof(float)], &v, sizeof v);
  }
  return s;
}

char *C(const std::string &s) {
  return const_cast<char *>(s.c_str());
}

// Serializes `m` with protobuf-c. Everything the protobuf-c structs point to
// lives in `m` or in the vectors below until gcc__model__pack returns.
Bytes Pack(const ModelSpec &m) {
  std::vector<Gcc__Tensor> tensors(m.initializers.size());
  std::vector<Gcc__Tensor *> tensor_ptrs;
  for (size_t i = 0; i < m.initializers.size(); i++) {
    const TensorSpec &t = m.initializers[i];
    Gcc__Tensor *pt = &tensors[i];
    gcc__tensor__init(pt);
    pt->name = C(t.name);
    pt->has_dtype = 1;
    pt->dtype = static_cast<Gcc__DataType>(t.dtype);
    pt->n_dims = t.dims.size();
    pt->dims = const_cast<int64_t *>(t.dims.data());
    pt->has_raw_data = t.has_raw ? 1 : 0;
    pt->raw_data.len = t.raw.size();
    pt->raw_data.data = reinterpret_cast<uint8_t *>(const_cast<char *>(t.raw.data()));
    tensor_ptrs.push_back(pt);
  }
  auto infos = [](const std::vector<ValueInfoSpec> &in, std::vector<Gcc__ValueInfo> *store,
                  std::vector<Gcc__ValueInfo *> *ptrs) {
    store->resize(in.size());
    for (size_t i = 0; i < in.size(); i++) {
      Gcc__ValueInfo *vi = &(*store)[i];
      gcc__value_info__init(vi);
      vi->name = C(in[i].name);
      vi->has_dtype = 1;
      vi->dtype = static_cast<Gcc__DataType>(in[i].dtype);
      vi->n_dims = in[i].dims.size();
      vi->dims = const_cast<int64_t *>(in[i].dims.data());
      ptrs->push_back(vi);
    }
  };
  std::vector<Gcc__ValueInfo> in_store, out_store;
  std::vector<Gcc__ValueInfo *> in_ptrs, out_ptrs;
  infos(m.inputs, &in_store, &in_ptrs);
  infos(m.outputs, &out_store, &out_ptrs);

  size_t n_attrs = 0;
  for (const NodeSpec &n : m.nodes)
    n_attrs += n.attrs.size();
  std::vector<Gcc__Node> nodes(m.nodes.size());
  std::vector<Gcc__Node *> node_ptrs;
  std::vector<Gcc__Attribute> attrs(n_attrs);
  std::vector<Gcc__Attribute *> attr_ptrs(n_attrs);
  std::vector<std::vector<char *>> names(m.nodes.size() * 2);
  size_t ai = 0;
  for (size_t i = 0; i < m.nodes.size(); i++) {
    const NodeSpec &n = m.nodes[i];
    Gcc__Node *pn = &nodes[i];
    gcc__node__init(pn);
    pn->name = C(n.name);
    pn->op_type = C(n.op);
    if (!n.device.empty())
      pn->device = C(n.device);
    for (const std::string &s : n.inputs)
      names[2 * i].push_back(C(s));
    for (const std::string &s : n.outputs)
      names[2 * i + 1].push_back(C(s));
    pn->n_inputs = n.inputs.size();
    pn->inputs = names[2 * i].data();
    pn->n_outputs = n.outputs.size();
    pn->outputs = names[2 * i + 1].data();
    pn->n_attributes = n.attrs.size();
    pn->attributes = n.attrs.empty() ? nullptr : &attr_ptrs[ai];
    for (const AttrSpec &a : n.attrs) {
      Gcc__Attribute *pa = &attrs[ai];
      gcc__attribute__init(pa);
      pa->name = C(a.name);
      pa->has_type = 1;
      pa->type = static_cast<Gcc__Attribute__Type>(a.type);
      switch (a.type) {
      case GCC__ATTRIBUTE__TYPE__INT:
        pa->has_i = 1;
        pa->i = a.i;
        break;
      case GCC__ATTRIBUTE__TYPE__FLOAT:
        pa->has_f = 1;
        pa->f = a.f;
        break;
      case GCC__ATTRIBUTE__TYPE__STRING: pa->s = C(a.s); break;
      case GCC__ATTRIBUTE__TYPE__INTS:
        pa->n_ints = a.ints.size();
        pa->ints = const_cast<int64_t *>(a.ints.data());
        break;
      default: break;
      }
      attr_ptrs[ai++] = pa;
    }
    node_ptrs.push_back(pn);
  }

  Gcc__Graph g;
  gcc__graph__init(&g);
  g.name = C(m.graph_name);
  g.n_nodes = node_ptrs.size();
  g.nodes = node_ptrs.data();
  g.n_initializers = tensor_ptrs.size();
  g.initializers = tensor_ptrs.data();
  g.n_inputs = in_ptrs.size();
  g.inputs = in_ptrs.data();
  g.n_outputs = out_ptrs.size();
  g.outputs = out_ptrs.data();

  Gcc__Model pm;
  gcc__model__init(&pm);
  pm.has_format_version = m.has_version ? 1 : 0;
  pm.format_version = m.version;
  static const std::string kProducer = "loader_test";
  pm.producer = C(kProducer);
  pm.graph = &g;
  Gcc__TrainingSpec ts;
  Gcc__Optimizer opt;
  Gcc__SGD sgd;
  if (m.training.present) {
    gcc__training_spec__init(&ts);
    gcc__optimizer__init(&opt);
    gcc__sgd__init(&sgd);
    sgd.has_lr = 1;
    sgd.lr = m.training.lr;
    opt.kind_case = GCC__OPTIMIZER__KIND_SGD;
    opt.sgd = &sgd;
    ts.optimizer = &opt;
    ts.loss = C(m.training.loss);
    if (!m.training.prediction.empty())
      ts.prediction = C(m.training.prediction);
    if (!m.training.input.empty())
      ts.input = C(m.training.input);
    if (!m.training.target.empty())
      ts.target = C(m.training.target);
    ts.has_batch_size = 1;
    ts.batch_size = m.training.batch_size;
    pm.training = &ts;
  }
  Bytes out(gcc__model__get_packed_size(&pm));
  size_t packed = gcc__model__pack(&pm, out.data());
  out.resize(packed);
  return out;
}

AttrSpec IntAttr(const std::string &name, int64_t v) {
  AttrSpec a;
  a.name = name;
  a.type = GCC__ATTRIBUTE__TYPE__INT;
  a.i = v;
  return a;
}

// A valid classifier: logits = Gemm(x, fc.weight, fc.bias, transB = 1),
// loss = SoftmaxCrossEntropy(logits, y), with a training spec.
ModelSpec Base() {
  ModelSpec m;
  m.inputs = {{"x", GCC__DATA_TYPE__DT_FLOAT32, {-1, 4}}, {"y", GCC__DATA_TYPE__DT_INT64, {-1}}};
  m.initializers = {{"fc.weight", GCC__DATA_TYPE__DT_FLOAT32, {3, 4}, Floats(12), true},
                    {"fc.bias", GCC__DATA_TYPE__DT_FLOAT32, {3}, Floats(3), true}};
  NodeSpec fc{"fc", "Gemm", {"x", "fc.weight", "fc.bias"}, {"logits"}, {IntAttr("transB", 1)}, ""};
  NodeSpec loss{"loss", "SoftmaxCrossEntropy", {"logits", "y"}, {"loss"}, {}, ""};
  m.nodes = {fc, loss};
  m.outputs = {{"loss", GCC__DATA_TYPE__DT_FLOAT32, {}},
               {"logits", GCC__DATA_TYPE__DT_FLOAT32, {}}};
  m.training.present = true;
  m.training.loss = "loss";
  m.training.prediction = "logits";
  m.training.input = "x";
  m.training.target = "y";
  return m;
}

// ---- the checks ---------------------------------------------------------------

class LoaderTest : public ::testing::Test {
protected:
  // Writes `bytes` to a file named after the running test.
  std::string Write(const Bytes &bytes) {
    const ::testing::TestInfo *ti = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string path = dir_.file(std::string(ti->name()) + "_" + std::to_string(files_++) + ".pb");
    EXPECT_TRUE(WriteFile(path, bytes)) << path;
    return path;
  }

  // Loads `bytes` from a file; expects status `want` and a message that
  // contains the file's path and every one of `needles`.
  ::testing::AssertionResult LoadFails(const Bytes &bytes, gcc_status want,
                                       const std::vector<std::string> &needles) {
    std::string path = Write(bytes);
    return LoadPathFails(path, want, needles);
  }
  ::testing::AssertionResult LoadFails(const ModelSpec &m, gcc_status want,
                                       const std::vector<std::string> &needles) {
    return LoadFails(Pack(m), want, needles);
  }

  ::testing::AssertionResult LoadPathFails(const std::string &path, gcc_status want,
                                           const std::vector<std::string> &needles) {
    gcc_diag d = {};
    gcc_graph *g = reinterpret_cast<gcc_graph *>(0x1);
    gcc_status s = gcc_model_load(path.c_str(), &g, &d);
    if (s == GCC_OK) {
      gcc_graph_free(g);
      return ::testing::AssertionFailure() << path << " loaded, expected " << gcc_status_name(want);
    }
    if (g != nullptr)
      return ::testing::AssertionFailure() << "*out not NULL after a failed load";
    if (s != want || d.status != want)
      return ::testing::AssertionFailure()
             << "status " << gcc_status_name(s) << " (diag " << gcc_status_name(d.status)
             << "), expected " << gcc_status_name(want) << ": " << d.msg;
    std::string msg = d.msg;
    if (msg.find(path) == std::string::npos)
      return ::testing::AssertionFailure()
             << "message does not name the file " << path << ": " << msg;
    for (const std::string &n : needles)
      if (msg.find(n) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks \"" << n << "\": " << msg;
    return ::testing::AssertionSuccess() << msg;
  }

  TempDir dir_;
  int files_ = 0;
};

TEST_F(LoaderTest, BaseModelIsValid) {
  // the starting point of every error case below must itself load
  std::string path = Write(Pack(Base()));
  gcc_diag d = {};
  gcc_graph *g = nullptr;
  ASSERT_EQ(gcc_model_load(path.c_str(), &g, &d), GCC_OK) << d.msg;
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->n_nodes, 2);
  EXPECT_STREQ(g->source, path.c_str());
  EXPECT_TRUE(g->training.present);
  EXPECT_EQ(g->training.batch_size, 8);
  int w = gcc_graph_find(g, "fc.weight");
  ASSERT_GE(w, 0);
  EXPECT_EQ(g->values[w].kind, GCC_VALUE_PARAM);
  // the batch dim stays symbolic in the loaded model
  int x = gcc_graph_find(g, "x");
  ASSERT_GE(x, 0);
  EXPECT_EQ(g->values[x].shape.dims[0], GCC_BATCH_DIM);
  gcc_graph_free(g);
}

// ---- bytes that are not a model -------------------------------------------------

TEST_F(LoaderTest, RandomBytesAreNotAProtobuf) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 8; trial++) {
    Bytes b(256 + 64 * trial);
    for (uint8_t &c : b)
      c = static_cast<uint8_t>(rng());
    b[0] = 0xff; // field 31, wire type 7: never valid
    EXPECT_TRUE(LoadFails(b, GCC_ERR_PARSE, {"could not be parsed", std::to_string(b.size())}));
  }
  const std::string words = "this is a text file, not a model\n";
  Bytes text(words.begin(), words.end());
  EXPECT_TRUE(LoadFails(text, GCC_ERR_PARSE, {"could not be parsed"}));
}

TEST_F(LoaderTest, TruncatedModel) {
  gcc_diag d = {};
  gcc_graph *g = nullptr;
  ASSERT_EQ(gcc_model_linear(GCC_LINEAR_SEED, &g, &d), GCC_OK) << d.msg;
  uint8_t *bytes = nullptr;
  size_t size = 0;
  ASSERT_EQ(gcc_model_serialize(g, &bytes, &size, &d), GCC_OK) << d.msg;
  gcc_graph_free(g);
  Bytes half(bytes, bytes + size / 2);
  Bytes all_but_one(bytes, bytes + size - 1);
  free(bytes);
  EXPECT_TRUE(LoadFails(half, GCC_ERR_PARSE, {"could not be parsed", "truncated"}));
  EXPECT_TRUE(LoadFails(all_but_one, GCC_ERR_PARSE, {"could not be parsed"}));
}

TEST_F(LoaderTest, EmptyFile) {
  // zero bytes are a valid, empty protobuf message: it has no format_version
  EXPECT_TRUE(LoadFails(Bytes{}, GCC_ERR_INVALID_GRAPH, {"format_version is missing"}));
}

TEST_F(LoaderTest, MissingFile) {
  std::string path = dir_.file("does_not_exist.pb");
  EXPECT_TRUE(LoadPathFails(path, GCC_ERR_IO, {"cannot open", "No such file"}));
  // a directory is not a model file either
  EXPECT_TRUE(LoadPathFails(dir_.path(), GCC_ERR_IO, {}));
}

TEST_F(LoaderTest, FormatVersion) {
  ModelSpec m = Base();
  m.has_version = false;
  EXPECT_TRUE(LoadFails(m, GCC_ERR_INVALID_GRAPH, {"format_version is missing"}));
  m.has_version = true;
  m.version = 2;
  EXPECT_TRUE(LoadFails(m, GCC_ERR_UNSUPPORTED, {"format_version is 2", "version 1"}));
  m.version = 0;
  EXPECT_TRUE(LoadFails(m, GCC_ERR_UNSUPPORTED, {"format_version is 0"}));
}

// ---- nodes ---------------------------------------------------------------------

TEST_F(LoaderTest, UnknownOpType) {
  ModelSpec m = Base();
  m.Node("fc")->op = "Conv3DTranspose";
  EXPECT_TRUE(
      LoadFails(m, GCC_ERR_INVALID_GRAPH, {"node 'fc'", "unknown op 'Conv3DTranspose'", "Gemm"}));
  // op names are case-sensitive, as in ONNX
  m.Node("fc")->op = "gemm";
  EXPECT_TRUE(LoadFails(m, GCC_ERR_INVALID_GRAPH, {"node 'fc'", "unknown op 'gemm'"}));
}

TEST_F(LoaderTest, TooFewInputs) {
  ModelSpec m = Base();
  m.Node("fc")->inputs = {"x"};
  EXPECT_TRUE(
      LoadFails(m, GCC_ERR_INVALID_GRAPH, {"node 'fc' (Gemm)", "takes 2 to 3 inputs", "got 1"}));
  // an empty name for a required input is not an input either
  m.Node("fc")->inputs = {"x", ""};
  EXPECT_TRUE(LoadFails(m, GCC_ERR_INVALID_GRAPH, {"node 'fc' (Gemm)", "required input 1"}));
}

TEST_F(LoaderTest, TooManyInputs) {
  ModelSpec m = Base();
  m.Node("fc")->inputs = {"x", "fc.weight", "fc.bias", "fc.bias"};
  EXPECT_TRUE(
      LoadFails(m, GCC_ERR_INVALID_GRAPH, {"node 'fc' (Gemm)", "takes 2 to 3 inputs", "got 4"}));
  ModelSpec r = Base();
  r.Node("fc")->outputs = {"h"};
  r.nodes.push_back({"act", "Relu", {"h", "x"}, {"logits"}, {}, ""});
  EXPECT_TRUE(
      LoadFails(r, GCC_ERR_INVALID_GRAPH, {"node 'act' (Relu)", "takes 1 inputs", "got 2"}));
}

TEST_F(LoaderTest, MissingRequiredAttribute) {
  ModelSpec m = Base();
  m.Node("fc")->outputs = {"h"};
  m.nodes.push_back({"rs", "Reshape", {"h"}, {"logits"}, {}, ""});
  EXPECT_TRUE(LoadFails(m, GCC_ERR_INVALID_GRAPH,
                        {"node 'rs' (Reshape)", "missing required attribute 'shape'"}));
  // with the attribute it loads
  AttrSpec shape;
  shape.name = "shape";
  shape.type = GCC__ATTRIBUTE__TYPE__INTS;
  shape.ints = {-1, 3};
  m.Node("rs")->attrs = {shape};
  std::string path = Write(Pack(m));
  gcc_diag d = {};
  gcc_graph *g = nullptr;
  EXPECT_EQ(gcc_model_load(path.c_str(), &g, &d), GCC_OK) << d.msg;
  gcc_graph_free(g);
}

TEST_F(LoaderTest, AttributeOfWrongType) {
  ModelSpec m = Base();
  AttrSpec a;
  a.name = "transB";
  a.type = GCC__ATTRIBUTE__TYPE__FLOAT;
  a.f = 1.0f;
  m.Node("fc")->attrs = {a};
  EXPECT_TRUE(LoadFails(m, GCC_ERR_INVALID_GRAPH,
                        {"node 'fc' (Gemm)", "attribute 'transB'", "int", "float"}));
  // an attribute without a type
  AttrSpec u;
  u.name = "alpha";
  u.type = GCC__ATTRIBUTE__TYPE__UNDEFINED;
  m.Node("fc")->attrs = {IntAttr("transB", 1), u};
  EXPECT_TRUE(LoadFails(m, GCC_ERR_INVALID_GRAPH, {"node 'fc'", "attribute 'alpha'"}));
}

TEST_F(LoaderTest, UnknownAttribute) {
  ModelSpec m = Base();
  m.Node("fc")->attrs.push_back(IntAttr("gamma", 3));
  EXPECT_TRUE(
      LoadFails(m, GCC_ERR_INVALID_GRAPH, {"node 'fc' (Gemm)", "unknown attribute 'gamma'"}));
  ModelSpec twice = Base();
  twice.Node("fc")->attrs.push_back(IntAttr("transB", 1));
  EXPECT_TRUE(LoadFails(twice, GCC_ERR_INVALID_GRAPH, {"node 'fc'", "'transB' given twice"}));
}

// ---- values ---------------------------------------------------------------------

TEST_F(LoaderTest, UndefinedInputName) {
  ModelSpec m = Base();
  m.Node("fc")->inputs[1] = "fc.weights"; // a typo
  EXPECT_TRUE(LoadFails(m, GCC_ERR_INVALID_GRAPH,
                        {"node 'fc' (Gemm)", "input 'fc.weights' is not defined"}));
  ModelSpec out = Base();
  out.outputs.push_back({"probabilities", GCC__DATA_TYPE__DT_FLOAT32, {}});
  EXPECT_TRUE(LoadFails(out, GCC_ERR_INVALID_GRAPH, {"graph output 'probabilities'"}));
}

TEST_F(LoaderTest, TwoNodesWithTheSameOutput) {
  ModelSpec m = Base();
  m.nodes.push_back({"act", "Relu", {"x"}, {"logits"}, {}, ""});
  EXPECT_TRUE(
      LoadFails(m, GCC_ERR_INVALID_GRAPH, {"node 'act'", "output 'logits' is already defined"}));
}

TEST_F(LoaderTest, NodeOutputNamedLikeAnInitializer) {
  ModelSpec m = Base();
  m.nodes.push_back({"act", "Relu", {"x"}, {"fc.bias"}, {}, ""});
  EXPECT_TRUE(LoadFails(m, GCC_ERR_INVALID_GRAPH, {"node 'act'", "'fc.bias' is already defined"}));
}

TEST_F(LoaderTest, InitializerAndInputWithTheSameName) {
  ModelSpec m = Base();
  m.inputs.push_back({"fc.weight", GCC__DATA_TYPE__DT_FLOAT32, {3, 4}});
  EXPECT_TRUE(LoadFails(m, GCC_ERR_INVALID_GRAPH, {"value 'fc.weight' is defined twice"}));
  ModelSpec twice = Base();
  twice.initializers.push_back(twice.initializers[1]);
  EXPECT_TRUE(LoadFails(twice, GCC_ERR_INVALID_GRAPH, {"value 'fc.bias' is defined twice"}));
}

TEST_F(LoaderTest, Cycle) {
  ModelSpec m = Base();
  m.nodes.push_back({"r1", "Relu", {"h2"}, {"h1"}, {}, ""});
  m.nodes.push_back({"r2", "Relu", {"h1"}, {"h2"}, {}, ""});
  ::testing::AssertionResult r = LoadFails(m, GCC_ERR_INVALID_GRAPH, {"cycle", "(Relu)"});
  EXPECT_TRUE(r);
  std::string msg = r.message();
  EXPECT_TRUE(msg.find("'r1'") != std::string::npos || msg.find("'r2'") != std::string::npos)
      << msg;
  // a node reading its own output
  ModelSpec self = Base();
  self.nodes.push_back({"loop", "Relu", {"h"}, {"h"}, {}, ""});
  EXPECT_TRUE(LoadFails(self, GCC_ERR_INVALID_GRAPH, {"cycle", "node 'loop'"}));
}

TEST_F(LoaderTest, NodeOrderInTheFileIsFree) {
  // not an error: the loader sorts topologically
  ModelSpec m = Base();
  std::swap(m.nodes[0], m.nodes[1]);
  std::string path = Write(Pack(m));
  gcc_diag d = {};
  gcc_graph *g = nullptr;
  ASSERT_EQ(gcc_model_load(path.c_str(), &g, &d), GCC_OK) << d.msg;
  EXPECT_STREQ(g->nodes[0].name, "fc");
  EXPECT_STREQ(g->nodes[1].name, "loss");
  gcc_graph_free(g);
}

// ---- tensors and shapes ----------------------------------------------------------

TEST_F(LoaderTest, NonPositiveDimsInAnInitializer) {
  ModelSpec m = Base();
  m.Init("fc.bias")->dims = {0};
  m.Init("fc.bias")->raw.clear();
  EXPECT_TRUE(
      LoadFails(m, GCC_ERR_INVALID_GRAPH, {"initializer 'fc.bias'", "dim 0 is 0", "must be > 0"}));
  ModelSpec neg = Base();
  neg.Init("fc.weight")->dims = {3, -4};
  EXPECT_TRUE(LoadFails(neg, GCC_ERR_INVALID_GRAPH, {"initializer 'fc.weight'", "dim 1 is -4"}));
}

TEST_F(LoaderTest, BatchDimOnlyAtDimZeroOfAnInput) {
  ModelSpec m = Base();
  m.Input("x")->dims = {4, -1};
  EXPECT_TRUE(LoadFails(m, GCC_ERR_INVALID_GRAPH,
                        {"graph input 'x'", "dim 1 is -1", "-1 only as the batch dim 0"}));
  ModelSpec twice = Base();
  twice.Input("x")->dims = {-1, -1};
  EXPECT_TRUE(LoadFails(twice, GCC_ERR_INVALID_GRAPH, {"graph input 'x'", "dim 1 is -1"}));
  // an initializer has no batch dim: -1 is not allowed even at dim 0
  ModelSpec init = Base();
  init.Init("fc.weight")->dims = {-1, 4};
  EXPECT_TRUE(LoadFails(init, GCC_ERR_INVALID_GRAPH, {"initializer 'fc.weight'", "dim 0 is -1"}));
  // -2 is not the batch dim either
  ModelSpec m2 = Base();
  m2.Input("x")->dims = {-2, 4};
  EXPECT_TRUE(LoadFails(m2, GCC_ERR_INVALID_GRAPH, {"graph input 'x'", "dim 0 is -2"}));
  ModelSpec zero = Base();
  zero.Input("x")->dims = {-1, 0};
  EXPECT_TRUE(LoadFails(zero, GCC_ERR_INVALID_GRAPH, {"graph input 'x'", "dim 1 is 0"}));
  // a graph output's declared dims follow the same rule
  ModelSpec out = Base();
  out.outputs[1].dims = {-1, -1};
  EXPECT_TRUE(LoadFails(out, GCC_ERR_INVALID_GRAPH, {"graph output 'logits'", "dim 1 is -1"}));
  out.outputs[1].dims = {-1, 3};
  std::string path = Write(Pack(out));
  gcc_diag d = {};
  gcc_graph *g = nullptr;
  EXPECT_EQ(gcc_model_load(path.c_str(), &g, &d), GCC_OK) << d.msg;
  gcc_graph_free(g);
}

TEST_F(LoaderTest, ElementCountOverflow) {
  ModelSpec m = Base();
  TensorSpec big{
      "big", GCC__DATA_TYPE__DT_FLOAT32, {int64_t{1} << 32, int64_t{1} << 32}, Floats(1), true};
  m.initializers.push_back(big);
  EXPECT_TRUE(
      LoadFails(m, GCC_ERR_INVALID_GRAPH, {"initializer 'big'", "element count overflows"}));
  // fits in int64 elements, but not in int64 bytes
  ModelSpec bytes = Base();
  big.dims = {int64_t{1} << 31, int64_t{1} << 31};
  bytes.initializers.push_back(big);
  EXPECT_TRUE(
      LoadFails(bytes, GCC_ERR_INVALID_GRAPH, {"initializer 'big'", "element count overflows"}));
  ModelSpec in = Base();
  in.Input("x")->dims = {-1, int64_t{1} << 40, int64_t{1} << 40};
  EXPECT_TRUE(LoadFails(in, GCC_ERR_INVALID_GRAPH, {"graph input 'x'", "element count overflows"}));
}

TEST_F(LoaderTest, RawDataSizeMismatch) {
  ModelSpec m = Base();
  m.Init("fc.weight")->raw.pop_back(); // 47 bytes for 3 x 4 float32
  EXPECT_TRUE(LoadFails(
      m, GCC_ERR_INVALID_GRAPH,
      {"initializer 'fc.weight'", "raw_data has 47 bytes, expected 48", "[3, 4]", "float32"}));
  ModelSpec more = Base();
  more.Init("fc.bias")->raw += std::string(4, '\0');
  EXPECT_TRUE(
      LoadFails(more, GCC_ERR_INVALID_GRAPH, {"initializer 'fc.bias'", "16 bytes, expected 12"}));
  ModelSpec none = Base();
  none.Init("fc.bias")->raw.clear();
  none.Init("fc.bias")->has_raw = false;
  EXPECT_TRUE(
      LoadFails(none, GCC_ERR_INVALID_GRAPH, {"initializer 'fc.bias'", "0 bytes, expected 12"}));
}

TEST_F(LoaderTest, UnsupportedDtypes) {
  ModelSpec m = Base();
  m.initializers.push_back({"half", GCC__DATA_TYPE__DT_FLOAT16, {2}, std::string(4, '\0'), true});
  EXPECT_TRUE(LoadFails(m, GCC_ERR_UNSUPPORTED, {"initializer 'half'", "float16"}));
  ModelSpec in = Base();
  in.Input("x")->dtype = GCC__DATA_TYPE__DT_FLOAT64;
  EXPECT_TRUE(LoadFails(in, GCC_ERR_UNSUPPORTED, {"graph input 'x'", "float64"}));
  ModelSpec bf = Base();
  bf.Init("fc.bias")->dtype = GCC__DATA_TYPE__DT_BFLOAT16;
  EXPECT_TRUE(LoadFails(bf, GCC_ERR_UNSUPPORTED, {"initializer 'fc.bias'", "bfloat16"}));
  // a number outside the enum
  ModelSpec odd = Base();
  odd.Input("y")->dtype = 99;
  gcc_status got;
  {
    std::string path = Write(Pack(odd));
    gcc_diag d = {};
    gcc_graph *g = nullptr;
    got = gcc_model_load(path.c_str(), &g, &d);
    gcc_graph_free(g);
    EXPECT_NE(got, GCC_OK);
    EXPECT_NE(std::string(d.msg).find(path), std::string::npos) << d.msg;
  }
  // no dtype at all
  ModelSpec undef = Base();
  undef.Input("x")->dtype = GCC__DATA_TYPE__DT_UNDEFINED;
  EXPECT_TRUE(LoadFails(undef, GCC_ERR_INVALID_GRAPH, {"graph input 'x'", "has no dtype"}));
}

TEST_F(LoaderTest, GemmWithMismatchedInnerDims) {
  ModelSpec m = Base();
  m.training.batch_size = 64;
  m.Input("x")->dims = {-1, 784};
  m.Init("fc.weight")->dims = {512, 100};
  m.Init("fc.weight")->raw = Floats(512 * 100);
  m.Init("fc.bias")->dims = {512};
  m.Init("fc.bias")->raw = Floats(512);
  EXPECT_TRUE(LoadFails(m, GCC_ERR_SHAPE, {"node 'fc' (Gemm)", "[64, 784]", "[512, 100]"}));
}

TEST_F(LoaderTest, AddWithNonBroadcastableShapes) {
  ModelSpec m = Base();
  m.initializers.push_back({"a", GCC__DATA_TYPE__DT_FLOAT32, {2, 3}, Floats(6), true});
  m.initializers.push_back({"b", GCC__DATA_TYPE__DT_FLOAT32, {4}, Floats(4), true});
  m.nodes.push_back({"sum", "Add", {"a", "b"}, {"s"}, {}, ""});
  EXPECT_TRUE(LoadFails(m, GCC_ERR_SHAPE, {"node 'sum' (Add)", "broadcast", "[2, 3]", "[4]"}));
  // (2, 3) + (3) broadcasts
  m.Init("b")->dims = {3};
  m.Init("b")->raw = Floats(3);
  std::string path = Write(Pack(m));
  gcc_diag d = {};
  gcc_graph *g = nullptr;
  EXPECT_EQ(gcc_model_load(path.c_str(), &g, &d), GCC_OK) << d.msg;
  gcc_graph_free(g);
}

// ---- training spec and device pins -----------------------------------------------

TEST_F(LoaderTest, TrainingSpecNamingAMissingValue) {
  ModelSpec m = Base();
  m.training.loss = "total_loss";
  EXPECT_TRUE(LoadFails(m, GCC_ERR_INVALID_GRAPH, {"training.loss", "'total_loss'"}));
  m = Base();
  m.training.prediction = "probs";
  EXPECT_TRUE(LoadFails(m, GCC_ERR_INVALID_GRAPH, {"training.prediction", "'probs'"}));
  m = Base();
  m.training.input = "image";
  EXPECT_TRUE(LoadFails(m, GCC_ERR_INVALID_GRAPH, {"training.input", "'image'"}));
  m = Base();
  m.training.target = "label";
  EXPECT_TRUE(LoadFails(m, GCC_ERR_INVALID_GRAPH, {"training.target", "'label'"}));
}

TEST_F(LoaderTest, BadDevicePin) {
  for (const char *bad : {"gpu", "cuda:", "cuda:x", "CUDA", "cpu:0", "cuda:-1", "cuda:0 "}) {
    ModelSpec m = Base();
    m.Node("fc")->device = bad;
    EXPECT_TRUE(
        LoadFails(m, GCC_ERR_INVALID_GRAPH, {"node 'fc'", std::string("device '") + bad + "'"}))
        << bad;
  }
  for (const char *good : {"cpu", "cuda", "cuda:0", "cuda:3"}) {
    ModelSpec m = Base();
    m.Node("fc")->device = good;
    std::string path = Write(Pack(m));
    gcc_diag d = {};
    gcc_graph *g = nullptr;
    EXPECT_EQ(gcc_model_load(path.c_str(), &g, &d), GCC_OK) << good << ": " << d.msg;
    if (g != nullptr) {
      EXPECT_STREQ(g->nodes[0].pin, good);
      gcc_graph_free(g);
    }
  }
}

// ---- round trip ------------------------------------------------------------------

::testing::AssertionResult RoundTrips(const gcc_graph *g) {
  gcc_diag d = {};
  uint8_t *b1 = nullptr, *b2 = nullptr;
  size_t n1 = 0, n2 = 0;
  if (gcc_model_serialize(g, &b1, &n1, &d) != GCC_OK)
    return ::testing::AssertionFailure() << "serialize: " << d.msg;
  gcc_graph *back = nullptr;
  if (gcc_model_parse(b1, n1, "roundtrip.pb", &back, &d) != GCC_OK) {
    free(b1);
    return ::testing::AssertionFailure() << "parse: " << d.msg;
  }
  gcc_status s = gcc_model_serialize(back, &b2, &n2, &d);
  gcc_graph_free(back);
  if (s != GCC_OK) {
    free(b1);
    return ::testing::AssertionFailure() << "serialize again: " << d.msg;
  }
  bool same = n1 == n2 && memcmp(b1, b2, n1) == 0;
  free(b1);
  free(b2);
  if (!same)
    return ::testing::AssertionFailure() << "bytes differ: " << n1 << " vs " << n2;
  return ::testing::AssertionSuccess();
}

TEST_F(LoaderTest, RoundTripReferenceModels) {
  gcc_diag d = {};
  gcc_graph *g = nullptr;
  ASSERT_EQ(gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &g, &d), GCC_OK) << d.msg;
  EXPECT_TRUE(RoundTrips(g));
  gcc_graph_free(g);
  ASSERT_EQ(gcc_model_linear(GCC_LINEAR_SEED, &g, &d), GCC_OK) << d.msg;
  EXPECT_TRUE(RoundTrips(g));
  gcc_graph_free(g);
}

TEST_F(LoaderTest, RoundTripKeepsPinsAttributesAndData) {
  ModelSpec m = Base();
  m.Node("fc")->device = "cuda:1";
  AttrSpec alpha;
  alpha.name = "alpha";
  alpha.type = GCC__ATTRIBUTE__TYPE__FLOAT;
  alpha.f = 0.5f;
  m.Node("fc")->attrs.push_back(alpha);
  AttrSpec red;
  red.name = "reduction";
  red.type = GCC__ATTRIBUTE__TYPE__STRING;
  red.s = "sum";
  m.Node("loss")->attrs.push_back(red);
  m.initializers.push_back({"classes", GCC__DATA_TYPE__DT_INT64, {2}, std::string(16, '\7'), true});
  Bytes bytes = Pack(m);
  gcc_diag d = {};
  gcc_graph *g = nullptr;
  ASSERT_EQ(gcc_model_parse(bytes.data(), bytes.size(), "spec.pb", &g, &d), GCC_OK) << d.msg;
  EXPECT_TRUE(RoundTrips(g));
  uint8_t *b = nullptr;
  size_t n = 0;
  ASSERT_EQ(gcc_model_serialize(g, &b, &n, &d), GCC_OK) << d.msg;
  gcc_graph_free(g);
  ASSERT_EQ(gcc_model_parse(b, n, "spec2.pb", &g, &d), GCC_OK) << d.msg;
  free(b);
  int fc = -1;
  for (int i = 0; i < g->n_nodes; i++)
    if (strcmp(g->nodes[i].name, "fc") == 0)
      fc = i;
  ASSERT_GE(fc, 0);
  EXPECT_STREQ(g->nodes[fc].pin, "cuda:1");
  const gcc_attr *a = gcc_node_attr(&g->nodes[fc], "alpha");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->type, GCC_ATTR_FLOAT);
  EXPECT_EQ(a->f, 0.5f);
  int w = gcc_graph_find(g, "fc.weight");
  ASSERT_GE(w, 0);
  EXPECT_EQ(g->values[w].kind, GCC_VALUE_PARAM);
  ASSERT_EQ(g->values[w].data_bytes, 48u);
  EXPECT_EQ(memcmp(g->values[w].data, m.Init("fc.weight")->raw.data(), 48), 0);
  int c = gcc_graph_find(g, "classes");
  ASSERT_GE(c, 0);
  EXPECT_EQ(g->values[c].kind, GCC_VALUE_CONST);
  EXPECT_EQ(g->values[c].dtype, GCC_DT_INT64);
  gcc_graph_free(g);
}

TEST_F(LoaderTest, StateInitializersRoundTripAndAreNotParametersToTrain) {
  // BatchNormalization's running statistics: FLOAT32 initializers marked
  // `state` read back as parameters with the mark (saved and checkpointed
  // with them; autodiff gives them no gradient)
  ModelSpec m = Base();
  Bytes bytes = Pack(m);
  gcc_diag d = {};
  gcc_graph *g = nullptr;
  ASSERT_EQ(gcc_model_parse(bytes.data(), bytes.size(), "spec.pb", &g, &d), GCC_OK) << d.msg;
  int w = gcc_graph_find(g, "fc.weight");
  ASSERT_GE(w, 0);
  EXPECT_EQ(g->values[w].state, 0);
  g->values[w].state = 1;
  uint8_t *b = nullptr;
  size_t n = 0;
  ASSERT_EQ(gcc_model_serialize(g, &b, &n, &d), GCC_OK) << d.msg;
  gcc_graph_free(g);
  g = nullptr;
  ASSERT_EQ(gcc_model_parse(b, n, "spec2.pb", &g, &d), GCC_OK) << d.msg;
  free(b);
  w = gcc_graph_find(g, "fc.weight");
  ASSERT_GE(w, 0);
  EXPECT_EQ(g->values[w].kind, GCC_VALUE_PARAM);
  EXPECT_EQ(g->values[w].state, 1);
  gcc_graph *c = nullptr;
  ASSERT_EQ(gcc_graph_clone(g, &c, &d), GCC_OK) << d.msg;
  EXPECT_EQ(c->values[gcc_graph_find(c, "fc.weight")].state, 1);
  gcc_graph_free(c);
  gcc_graph_free(g);
}

// ---- atomic save -------------------------------------------------------------------

class SaveTest : public ::testing::Test {
protected:
  void SetUp() override {
    gcc_diag d = {};
    ASSERT_EQ(gcc_model_linear(GCC_LINEAR_SEED, &g_, &d), GCC_OK) << d.msg;
    uint8_t *b = nullptr;
    size_t n = 0;
    ASSERT_EQ(gcc_model_serialize(g_, &b, &n, &d), GCC_OK) << d.msg;
    bytes_.assign(b, b + n);
    free(b);
  }
  void TearDown() override { gcc_graph_free(g_); }

  gcc_graph *g_ = nullptr;
  Bytes bytes_;
  TempDir dir_;
};

TEST_F(SaveTest, WritesTheSerializedBytes) {
  std::string path = dir_.file("model.pb");
  gcc_diag d = {};
  ASSERT_EQ(gcc_model_save(g_, path.c_str(), &d), GCC_OK) << d.msg;
  Bytes got;
  ASSERT_TRUE(ReadFile(path, &got));
  EXPECT_EQ(got, bytes_);
  EXPECT_EQ(ListDir(dir_.path()), std::vector<std::string>{"model.pb"}); // no temporary left
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  // and it loads back
  gcc_graph *back = nullptr;
  ASSERT_EQ(gcc_model_load(path.c_str(), &back, &d), GCC_OK) << d.msg;
  gcc_graph_free(back);
}

TEST_F(SaveTest, MissingDirectory) {
  std::string path = dir_.file("no/such/dir/model.pb");
  gcc_diag d = {};
  EXPECT_EQ(gcc_model_save(g_, path.c_str(), &d), GCC_ERR_IO);
  EXPECT_EQ(d.status, GCC_ERR_IO);
  EXPECT_NE(std::string(d.msg).find(path), std::string::npos) << d.msg;
  EXPECT_NE(std::string(d.msg).find("No such file"), std::string::npos) << d.msg;
  EXPECT_FALSE(Exists(dir_.file("no")));
  EXPECT_TRUE(ListDir(dir_.path()).empty());
}

// Saves g into `dir` as an unprivileged user (a forked child that drops
// root): 100 + status, or 100 if privileges cannot be dropped (a user
// namespace without uid 65534, as Bazel's sandbox).
int SaveAsNobody(const gcc_graph *g, const std::string &path, std::string *msg) {
  int fds[2];
  if (pipe(fds) != 0)
    return -1;
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    close(fds[0]);
    if (setgid(65534) != 0 || setuid(65534) != 0)
      _exit(100);
    gcc_diag d = {};
    gcc_status cs = gcc_model_save(g, path.c_str(), &d);
    ssize_t w = write(fds[1], d.msg, strlen(d.msg));
    (void)w;
    _exit(101 + static_cast<int>(cs));
  }
  close(fds[1]);
  char buf[2048];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0)
    msg->append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int wst = 0;
  if (waitpid(pid, &wst, 0) != pid || !WIFEXITED(wst))
    return -1;
  return WEXITSTATUS(wst);
}

TEST_F(SaveTest, ReadOnlyDirectory) {
  std::string ro = dir_.file("ro");
  ASSERT_EQ(mkdir(ro.c_str(), 0755), 0);
  ASSERT_EQ(chmod(ro.c_str(), 0555), 0);
  std::string path = ro + "/model.pb";
  std::string msg;
  gcc_status s = GCC_OK;
  if (geteuid() != 0) {
    gcc_diag d = {};
    s = gcc_model_save(g_, path.c_str(), &d);
    msg = d.msg;
  } else {
    // root writes into a 0555 directory: save as nobody instead
    int rc = SaveAsNobody(g_, path, &msg);
    ASSERT_GE(rc, 100) << "fork / wait failed";
    if (rc == 100) {
      // cannot drop privileges: use a directory on a read-only file system
      // (Bazel's sandbox mounts most of the tree read-only), if there is one
      ro.clear();
      std::vector<std::string> candidates = {"/usr", "/", "/sys", "/proc/sys"};
      if (const char *srcdir = getenv("TEST_SRCDIR"))
        candidates.insert(candidates.begin(), srcdir);
      for (const std::string &c : candidates) {
        errno = 0;
        if (access(c.c_str(), W_OK) != 0 && errno == EROFS) {
          ro = c;
          break;
        }
      }
      if (ro.empty())
        GTEST_SKIP() << "root, cannot drop privileges, no read-only file system";
      std::printf("[save] running as root in a user namespace: read-only file system %s\n",
                  ro.c_str());
      std::vector<std::string> before = ListDir(ro);
      path = ro + "/gcc_loader_test_model.pb";
      gcc_diag d = {};
      s = gcc_model_save(g_, path.c_str(), &d);
      msg = d.msg;
      EXPECT_NE(msg.find("Read-only file system"), std::string::npos) << msg;
      EXPECT_EQ(ListDir(ro), before);
    } else {
      s = static_cast<gcc_status>(rc - 101);
      EXPECT_NE(msg.find("Permission denied"), std::string::npos) << msg;
    }
  }
  EXPECT_EQ(s, GCC_ERR_IO) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_FALSE(Exists(path));
  if (ro == dir_.file("ro")) {
    EXPECT_TRUE(ListDir(ro).empty());
  }
}

TEST_F(SaveTest, FailedRenameLeavesNoTemporary) {
  // the target is a non-empty directory: the temporary is written, the
  // rename fails, and the temporary must be removed again
  std::string path = dir_.file("model.pb");
  ASSERT_EQ(mkdir(path.c_str(), 0755), 0);
  ASSERT_TRUE(WriteFile(path + "/keep", Bytes{1, 2, 3}));
  gcc_diag d = {};
  EXPECT_EQ(gcc_model_save(g_, path.c_str(), &d), GCC_ERR_IO);
  EXPECT_NE(std::string(d.msg).find(path), std::string::npos) << d.msg;
  EXPECT_NE(std::string(d.msg).find("not changed"), std::string::npos) << d.msg;
  EXPECT_EQ(ListDir(dir_.path()), std::vector<std::string>{"model.pb"});
  EXPECT_EQ(ListDir(path), std::vector<std::string>{"keep"});
}

TEST_F(SaveTest, OverwriteReplacesTheWholeFile) {
  std::string path = dir_.file("model.pb");
  // an old file much longer than the model, and a second name for it
  Bytes old(bytes_.size() * 3 + 12345, 0xab);
  ASSERT_TRUE(WriteFile(path, old));
  std::string link = dir_.file("old.pb");
  ASSERT_EQ(::link(path.c_str(), link.c_str()), 0);
  gcc_diag d = {};
  ASSERT_EQ(gcc_model_save(g_, path.c_str(), &d), GCC_OK) << d.msg;
  Bytes got;
  ASSERT_TRUE(ReadFile(path, &got));
  EXPECT_EQ(got, bytes_); // no tail of the old file
  // a rename replaces the directory entry: the old inode is untouched, so a
  // reader that had the old file open never sees a half-written model
  Bytes old_back;
  ASSERT_TRUE(ReadFile(link, &old_back));
  EXPECT_EQ(old_back, old);
  EXPECT_EQ(ListDir(dir_.path()), (std::vector<std::string>{"model.pb", "old.pb"}));
  // saving again over it gives the same bytes
  ASSERT_EQ(gcc_model_save(g_, path.c_str(), &d), GCC_OK) << d.msg;
  ASSERT_TRUE(ReadFile(path, &got));
  EXPECT_EQ(got, bytes_);
  EXPECT_EQ(ListDir(dir_.path()), (std::vector<std::string>{"model.pb", "old.pb"}));
}

} // namespace
