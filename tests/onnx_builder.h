// onnx_builder.h - builds ONNX ModelProto bytes in tests, through the
// protobuf-c structs generated from onnx.proto (the importer's own schema),
// so that each bad-input case is a few readable lines.
//
//   OnnxModel m(13);
//   m.Input("x", {kBatch, 4});
//   m.Init("W", {4, 3}, {...});
//   m.Node("MatMul", {"x", "W"}, {"y"});
//   m.Output("y");
//   std::vector<uint8_t> bytes = m.Bytes();
#ifndef GCC_TESTS_ONNX_BUILDER_H_
#define GCC_TESTS_ONNX_BUILDER_H_

#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

extern "C" {
#include "onnx/onnx.pb-c.h"
}

namespace gcc_test {

constexpr int64_t kBatch = -1; // a dim_param "N" in a value info

class OnnxModel {
public:
  explicit OnnxModel(int64_t opset, const std::string &domain = "") {
    onnx__model_proto__init(&model_);
    onnx__graph_proto__init(&graph_);
    model_.has_ir_version = 1;
    model_.ir_version = 8;
    model_.producer_name = Str("gcc-train tests");
    model_.graph = &graph_;
    graph_.name = Str("test");
    auto *o = New<Onnx__OperatorSetIdProto>(onnx__operator_set_id_proto__init);
    o->domain = Str(domain);
    o->has_version = 1;
    o->version = opset;
    opsets_.push_back(o);
  }
  OnnxModel(const OnnxModel &) = delete;
  OnnxModel &operator=(const OnnxModel &) = delete;

  void Input(const std::string &name, const std::vector<int64_t> &dims,
             int elem = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, const char *param = "N") {
    inputs_.push_back(ValueInfo(name, dims, elem, param));
  }
  // A graph input with no shape at all.
  void InputNoShape(const std::string &name) {
    auto *vi = New<Onnx__ValueInfoProto>(onnx__value_info_proto__init);
    vi->name = Str(name);
    auto *tp = New<Onnx__TypeProto>(onnx__type_proto__init);
    auto *tt = New<Onnx__TypeProto__Tensor>(onnx__type_proto__tensor__init);
    tt->has_elem_type = 1;
    tt->elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->type = tp;
    inputs_.push_back(vi);
  }
  void Output(const std::string &name) {
    auto *vi = New<Onnx__ValueInfoProto>(onnx__value_info_proto__init);
    vi->name = Str(name);
    outputs_.push_back(vi);
  }
  Onnx__TensorProto *Init(const std::string &name, const std::vector<int64_t> &dims,
                          const std::vector<float> &v) {
    Onnx__TensorProto *t = Tensor(name, dims, v);
    inits_.push_back(t);
    return t;
  }
  Onnx__TensorProto *InitI64(const std::string &name, const std::vector<int64_t> &dims,
                             const std::vector<int64_t> &v) {
    auto *t = New<Onnx__TensorProto>(onnx__tensor_proto__init);
    t->name = Str(name);
    SetDims(t, dims);
    t->has_data_type = 1;
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    t->n_int64_data = v.size();
    t->int64_data = Copy(v);
    inits_.push_back(t);
    return t;
  }
  // A float tensor whose data lives in an external file.
  Onnx__TensorProto *InitExternal(const std::string &name, const std::vector<int64_t> &dims,
                                  const std::vector<std::pair<std::string, std::string>> &kv) {
    auto *t = New<Onnx__TensorProto>(onnx__tensor_proto__init);
    t->name = Str(name);
    SetDims(t, dims);
    t->has_data_type = 1;
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    t->has_data_location = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    std::vector<Onnx__StringStringEntryProto *> es;
    for (const auto &e : kv) {
      auto *p = New<Onnx__StringStringEntryProto>(onnx__string_string_entry_proto__init);
      p->key = Str(e.first);
      p->value = Str(e.second);
      es.push_back(p);
    }
    t->n_external_data = es.size();
    t->external_data = Copy(es);
    inits_.push_back(t);
    return t;
  }
  Onnx__TensorProto *Tensor(const std::string &name, const std::vector<int64_t> &dims,
                            const std::vector<float> &v, bool raw = true) {
    auto *t = New<Onnx__TensorProto>(onnx__tensor_proto__init);
    t->name = Str(name);
    SetDims(t, dims);
    t->has_data_type = 1;
    t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    if (raw) {
      t->has_raw_data = 1;
      t->raw_data.len = v.size() * sizeof(float);
      t->raw_data.data = reinterpret_cast<uint8_t *>(Copy(v));
    } else {
      t->n_float_data = v.size();
      t->float_data = Copy(v);
    }
    return t;
  }

  struct Attr {
    Onnx__AttributeProto *a;
  };
  Attr Int(const std::string &name, int64_t v) {
    auto *a = NewAttr(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    a->has_i = 1;
    a->i = v;
    return {a};
  }
  Attr Float(const std::string &name, float v) {
    auto *a = NewAttr(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    a->has_f = 1;
    a->f = v;
    return {a};
  }
  Attr Ints(const std::string &name, const std::vector<int64_t> &v) {
    auto *a = NewAttr(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    a->n_ints = v.size();
    a->ints = Copy(v);
    return {a};
  }
  Attr String(const std::string &name, const std::string &v) {
    auto *a = NewAttr(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    a->has_s = 1;
    a->s.len = v.size();
    a->s.data = reinterpret_cast<uint8_t *>(Str(v));
    return {a};
  }
  Attr TensorAttr(const std::string &name, Onnx__TensorProto *t) {
    auto *a = NewAttr(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
    a->t = t;
    return {a};
  }

  Onnx__NodeProto *Node(const std::string &op, const std::vector<std::string> &in,
                        const std::vector<std::string> &out, const std::vector<Attr> &attrs = {},
                        const std::string &name = "", const std::string &domain = "") {
    auto *n = New<Onnx__NodeProto>(onnx__node_proto__init);
    n->op_type = Str(op);
    n->name = Str(name.empty() ? op + "_" + std::to_string(nodes_.size()) : name);
    if (!domain.empty())
      n->domain = Str(domain);
    std::vector<char *> i, o;
    for (const auto &s : in)
      i.push_back(Str(s));
    for (const auto &s : out)
      o.push_back(Str(s));
    n->n_input = i.size();
    n->input = Copy(i);
    n->n_output = o.size();
    n->output = Copy(o);
    std::vector<Onnx__AttributeProto *> as;
    for (const Attr &a : attrs)
      as.push_back(a.a);
    n->n_attribute = as.size();
    n->attribute = Copy(as);
    nodes_.push_back(n);
    return n;
  }

  std::vector<uint8_t> Bytes() {
    graph_.n_node = nodes_.size();
    graph_.node = nodes_.data();
    graph_.n_initializer = inits_.size();
    graph_.initializer = inits_.data();
    graph_.n_input = inputs_.size();
    graph_.input = inputs_.data();
    graph_.n_output = outputs_.size();
    graph_.output = outputs_.data();
    model_.n_opset_import = opsets_.size();
    model_.opset_import = opsets_.data();
    std::vector<uint8_t> b(onnx__model_proto__get_packed_size(&model_));
    onnx__model_proto__pack(&model_, b.data());
    return b;
  }

  Onnx__ModelProto *model() { return &model_; }

private:
  template <typename T> T *New(void (*init)(T *)) {
    storage_.emplace_back(sizeof(T));
    T *p = reinterpret_cast<T *>(storage_.back().data());
    init(p);
    return p;
  }
  char *Str(const std::string &s) {
    storage_.emplace_back(s.size() + 1);
    std::memcpy(storage_.back().data(), s.c_str(), s.size() + 1);
    return reinterpret_cast<char *>(storage_.back().data());
  }
  template <typename T> T *Copy(const std::vector<T> &v) {
    storage_.emplace_back(v.size() * sizeof(T) + 1);
    if (!v.empty())
      std::memcpy(storage_.back().data(), v.data(), v.size() * sizeof(T));
    return reinterpret_cast<T *>(storage_.back().data());
  }
  void SetDims(Onnx__TensorProto *t, const std::vector<int64_t> &dims) {
    t->n_dims = dims.size();
    t->dims = Copy(dims);
  }
  Onnx__AttributeProto *NewAttr(const std::string &name, Onnx__AttributeProto__AttributeType type) {
    auto *a = New<Onnx__AttributeProto>(onnx__attribute_proto__init);
    a->name = Str(name);
    a->has_type = 1;
    a->type = type;
    return a;
  }
  Onnx__ValueInfoProto *ValueInfo(const std::string &name, const std::vector<int64_t> &dims,
                                  int elem, const char *param) {
    auto *vi = New<Onnx__ValueInfoProto>(onnx__value_info_proto__init);
    vi->name = Str(name);
    auto *tp = New<Onnx__TypeProto>(onnx__type_proto__init);
    auto *tt = New<Onnx__TypeProto__Tensor>(onnx__type_proto__tensor__init);
    tt->has_elem_type = 1;
    tt->elem_type = elem;
    auto *sh = New<Onnx__TensorShapeProto>(onnx__tensor_shape_proto__init);
    std::vector<Onnx__TensorShapeProto__Dimension *> ds;
    for (int64_t d : dims) {
      auto *dm = New<Onnx__TensorShapeProto__Dimension>(onnx__tensor_shape_proto__dimension__init);
      if (d == kBatch) {
        dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
        dm->dim_param = Str(param);
      } else {
        dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        dm->dim_value = d;
      }
      ds.push_back(dm);
    }
    sh->n_dim = ds.size();
    sh->dim = Copy(ds);
    tt->shape = sh;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->type = tp;
    return vi;
  }

  // every allocation of the model: a deque never moves its elements
  std::deque<std::vector<uint8_t>> storage_;
  Onnx__ModelProto model_;
  Onnx__GraphProto graph_;
  std::vector<Onnx__NodeProto *> nodes_;
  std::vector<Onnx__TensorProto *> inits_;
  std::vector<Onnx__ValueInfoProto *> inputs_, outputs_;
  std::vector<Onnx__OperatorSetIdProto *> opsets_;
};

} // namespace gcc_test

#endif // GCC_TESTS_ONNX_BUILDER_H_
