// onnx_conformance_test: ONNX's own backend test cases, run through the
// importer and the CPU backend.
//
// The cases come from Debian's libonnx-testdata (@onnx_testdata, ONNX
// 1.12): data/node/<case>/ (one operator each), data/pytorch-converted/ and
// data/pytorch-operator/ (models exported from PyTorch's nn modules and
// operators). Each case is model.onnx plus test_data_set_N/input_K.pb and
// output_K.pb (serialized TensorProto).
//
// Every case whose ops are all in the importer's table runs, on the CPU,
// and each output is compared as ONNX's runner does
// (onnx/backend/test/runner: numpy.testing.assert_allclose with rtol 1e-3,
// atol 1e-7, same dtype and shape). A case with an op outside the table is
// skipped and counted per op. A case with only supported ops that the
// importer refuses (an attribute value, dtype or rank the mapping does not
// handle; the message says which) must be listed in kRefused below with the
// reason; an unlisted refusal, a listed case that no longer is refused, and
// any wrong output fail the test.
//
// Output, per suite part (the suites are split into parts for Bazel shards):
//   node: ran N, passed P, failed F, skipped S (op not supported)
//   node: refused R (supported ops, variant not supported), each listed
//   node: skipped ops: Abs (2), ...
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

extern "C" {
#include "graph/ops.h"
#include "onnx/import.h"
#include "onnx/onnx.pb-c.h"
#include "codegen/kernel_cache.h"
#include "runtime/cuda/cuda_ops.h"
#include "runtime/cuda/cudnn_conv.h"
#include "runtime/plan.h"
}
#include "tests/host_backend.h"
#include "tests/testutil.h"
#include "tests/test_kernel_cache.h"

namespace {

using gcc_test::ReadFile;

// Cases whose ops are all supported but which the importer refuses, with
// the part of the refusal message that says why. Each is a variant of a
// supported op that this version does not handle.
struct Refusal {
  const char *test_case;
  const char *reason; // a substring of the importer's message
};

const Refusal kRefused[] = {
    // element types the IR does not compute (it has float32, int64, int32)
    {"test_add_uint8", "dtype uint8"},
    {"test_sub_uint8", "dtype uint8"},
    {"test_mul_uint8", "dtype uint8"},
    {"test_div_uint8", "dtype uint8"},
    {"test_maxpool_2d_uint8", "dtype uint8"},
    {"test_clip_default_int8_inbounds", "dtype int8"},
    {"test_clip_default_int8_max", "dtype int8"},
    {"test_clip_default_int8_min", "dtype int8"},
    {"test_training_dropout_default_mask", "output 1 (mask) is used"},
    {"test_training_dropout_mask", "output 1 (mask) is used"},
    {"test_training_dropout_zero_ratio_mask", "output 1 (mask) is used"},
    // ONNX's Einsum cases are all float64 (tests/onnx_einsum_test.cc runs
    // their equations, and more, in float32 against a float64 loop)
    {"test_einsum_batch_diagonal", "dtype double"},
    {"test_einsum_batch_matmul", "dtype double"},
    {"test_einsum_inner_prod", "dtype double"},
    {"test_einsum_sum", "dtype double"},
    {"test_einsum_transpose", "dtype double"},
    {"test_operator_add_broadcast", "dtype double"},
    {"test_operator_add_size1_broadcast", "dtype double"},
    {"test_operator_add_size1_right_broadcast", "dtype double"},
    {"test_operator_add_size1_singleton_broadcast", "dtype double"},
    {"test_operator_addconstant", "dtype double"},
    // Mod at run time (issue 30: only constants and shapes are folded at import; the
    // run-time op is another change), and element types the IR does not compute (Cast
    // runs between float32, int64, int32 and bool)
    {"test_cast_BFLOAT16_to_FLOAT", "dtype bfloat16"},
    {"test_cast_DOUBLE_to_FLOAT", "dtype double"},
    {"test_cast_DOUBLE_to_FLOAT16", "dtype double"},
    {"test_cast_FLOAT16_to_DOUBLE", "dtype float16"},
    {"test_cast_FLOAT16_to_FLOAT", "dtype float16"},
    {"test_cast_FLOAT_to_BFLOAT16", "this version casts between float, int64, int32 and bool"},
    {"test_cast_FLOAT_to_DOUBLE", "this version casts between float, int64, int32 and bool"},
    {"test_cast_FLOAT_to_FLOAT16", "this version casts between float, int64, int32 and bool"},
    {"test_cast_FLOAT_to_STRING", "this version casts between float, int64, int32 and bool"},
    {"test_cast_STRING_to_FLOAT", "dtype string"},
    {"test_castlike_BFLOAT16_to_FLOAT", "dtype bfloat16"},
    {"test_castlike_DOUBLE_to_FLOAT16", "dtype double"},
    {"test_castlike_DOUBLE_to_FLOAT", "dtype double"},
    {"test_castlike_FLOAT16_to_DOUBLE", "dtype float16"},
    {"test_castlike_FLOAT16_to_FLOAT", "dtype float16"},
    {"test_castlike_FLOAT_to_BFLOAT16", "dtype bfloat16"},
    {"test_castlike_FLOAT_to_DOUBLE", "dtype double"},
    {"test_castlike_FLOAT_to_FLOAT16", "dtype float16"},
    {"test_castlike_FLOAT_to_STRING", "dtype string"},
    {"test_castlike_STRING_to_FLOAT", "dtype string"},
    // Range is folded at import (issue 30): a bound computed at run time (the window
    // functions' size from a graph input's value) is refused
    {"test_blackmanwindow_expanded", "is not a constant (computed at run time)"},
    {"test_blackmanwindow_symmetric_expanded", "is not a constant (computed at run time)"},
    {"test_hammingwindow_expanded", "is not a constant (computed at run time)"},
    {"test_hammingwindow_symmetric_expanded", "is not a constant (computed at run time)"},
    {"test_hannwindow_expanded", "is not a constant (computed at run time)"},
    {"test_hannwindow_symmetric_expanded", "is not a constant (computed at run time)"},
    // GatherND is Gather: batch_dims 0 and one index per tuple only (issue 30)
    {"test_gathernd_example_float32", "only batch_dims 0 with one index per tuple"},
    {"test_gathernd_example_int32", "only batch_dims 0 with one index per tuple"},
    {"test_gathernd_example_int32_batch_dim1", "only batch_dims 0 with one index per tuple"},
    // ScatterND is folded at import (issue 30: the masks built from constants), not run
    {"test_scatternd", "ScatterND is folded at import only"},
    {"test_scatternd_add", "reduction 'add' (only 'none')"},
    {"test_scatternd_multiply", "reduction 'mul' (only 'none')"},
    {"test_castlike_BFLOAT16_to_FLOAT_expanded", "dtype bfloat16"},
    {"test_castlike_DOUBLE_to_FLOAT16_expanded", "dtype double"},
    {"test_castlike_DOUBLE_to_FLOAT_expanded", "dtype double"},
    {"test_castlike_FLOAT16_to_DOUBLE_expanded", "dtype float16"},
    {"test_castlike_FLOAT16_to_FLOAT_expanded", "dtype float16"},
    {"test_castlike_FLOAT_to_BFLOAT16_expanded", "dtype bfloat16"},
    {"test_castlike_FLOAT_to_DOUBLE_expanded", "dtype double"},
    {"test_castlike_FLOAT_to_FLOAT16_expanded", "dtype float16"},
    {"test_castlike_FLOAT_to_STRING_expanded", "dtype string"},
    {"test_castlike_STRING_to_FLOAT_expanded", "dtype string"},
    {"test_mod_broadcast", "Mod at run time is not supported here"},
    {"test_mod_int64_fmod", "Mod at run time is not supported here"},
    {"test_mod_mixed_sign_float16", "dtype float16"},
    {"test_mod_mixed_sign_float32", "Mod at run time is not supported here"},
    {"test_mod_mixed_sign_float64", "dtype double"},
    {"test_mod_mixed_sign_int16", "dtype int16"},
    {"test_mod_mixed_sign_int32", "Mod at run time is not supported here"},
    {"test_mod_mixed_sign_int64", "Mod at run time is not supported here"},
    {"test_mod_mixed_sign_int8", "dtype int8"},
    {"test_mod_uint16", "dtype uint16"},
    {"test_mod_uint32", "dtype uint32"},
    {"test_mod_uint64", "dtype uint64"},
    {"test_mod_uint8", "dtype uint8"},
    // types that are not tensors
    {"test_identity_opt", "is not a tensor"},
    {"test_identity_sequence", "is not a tensor"},
    // zero-size tensors
    {"test_reshape_allowzero_reordered", "zero-size tensors are not supported"},
    {"test_split_zero_size_splits", "zero-size tensors are not supported"},
    {"test_slice_start_out_of_bounds", "zero-size tensors are not supported"},
    {"test_tril_zero", "zero-size tensors are not supported"},
    {"test_triu_zero", "zero-size tensors are not supported"},
    // an empty `axes` graph input (every dim, or with noop_with_empty_axes none)
    {"test_reduce_sum_default_axes_keepdims_example", "zero-size tensors are not supported"},
    {"test_reduce_sum_default_axes_keepdims_random", "zero-size tensors are not supported"},
    {"test_reduce_sum_empty_axes_input_noop_example", "zero-size tensors are not supported"},
    {"test_reduce_sum_empty_axes_input_noop_random", "zero-size tensors are not supported"},
    {"test_reduce_sum_negative_axes_keepdims_random", "zero-size tensors are not supported"},
    {"test_constantofshape_int_shape_zero", "zero-size tensors are not supported"},
    // ReduceLogSumExp's cases are all float64 (its float32 form runs in
    // tests/onnx_import_test: OnnxImport.LogSumExpIsStableAndMatchesFloat64)
    {"test_reduce_log_sum_exp_default_axes_keepdims_example", "dtype double"},
    {"test_reduce_log_sum_exp_default_axes_keepdims_random", "dtype double"},
    {"test_reduce_log_sum_exp_do_not_keepdims_example", "dtype double"},
    {"test_reduce_log_sum_exp_do_not_keepdims_random", "dtype double"},
    {"test_reduce_log_sum_exp_keepdims_example", "dtype double"},
    {"test_reduce_log_sum_exp_keepdims_random", "dtype double"},
    {"test_reduce_log_sum_exp_negative_axes_keepdims_example", "dtype double"},
    {"test_reduce_log_sum_exp_negative_axes_keepdims_random", "dtype double"},
    // Max / Min of element types other than float32 (the IR's Max and Min are float)
    {"test_max_float16", "dtype float16"},
    {"test_max_float64", "dtype double"},
    {"test_max_int16", "dtype int16"},
    {"test_max_int32", "this op is supported for float only"},
    {"test_max_int64", "this op is supported for float only"},
    {"test_max_int8", "dtype int8"},
    {"test_max_uint16", "dtype uint16"},
    {"test_max_uint32", "dtype uint32"},
    {"test_max_uint64", "dtype uint64"},
    {"test_max_uint8", "dtype uint8"},
    {"test_min_float16", "dtype float16"},
    {"test_min_float64", "dtype double"},
    {"test_min_int16", "dtype int16"},
    {"test_min_int32", "this op is supported for float only"},
    {"test_min_int64", "this op is supported for float only"},
    {"test_min_int8", "dtype int8"},
    {"test_min_uint16", "dtype uint16"},
    {"test_min_uint32", "dtype uint32"},
    {"test_min_uint64", "dtype uint64"},
    {"test_min_uint8", "dtype uint8"},
    // Pow with integer operands given as graph inputs (a constant integer
    // exponent is converted): the IR's Pow is float
    {"test_pow_types_float", "this op is supported for float only"},
    {"test_pow_types_float32_int32", "this op is supported for float only"},
    {"test_pow_types_float32_int64", "this op is supported for float only"},
    {"test_pow_types_int", "this op is supported for float only"},
    {"test_pow_types_int32_float32", "this op is supported for float only"},
    {"test_pow_types_int32_int32", "this op is supported for float only"},
    {"test_pow_types_int64_float32", "this op is supported for float only"},
    {"test_pow_types_int64_int64", "this op is supported for float only"},
    {"test_pow_types_float32_uint32", "dtype uint32"},
    {"test_pow_types_float32_uint64", "dtype uint64"},
    // training mode (batch statistics, random masks) and its extra outputs
    {"test_batchnorm_epsilon_training_mode", "training_mode = 1"},
    {"test_batchnorm_example_training_mode", "training_mode = 1"},
    {"test_dropout_default_mask", "output 1 (mask) is used"},
    {"test_dropout_default_mask_ratio", "output 1 (mask) is used"},
    {"test_maxpool_with_argmax_2d_precomputed_pads", "output 1 (Indices) is used"},
    {"test_maxpool_with_argmax_2d_precomputed_strides", "output 1 (Indices) is used"},
    // 3-D convolutions and poolings (the op set is 1-D and 2-D)
    {"test_averagepool_3d_default", "only 1-D (N, C, L) and 2-D"},
    {"test_maxpool_3d_default", "only 1-D (N, C, L) and 2-D"},
    {"test_convtranspose_3d", "only 1-D (N, C, L) and 2-D"},
    {"test_AvgPool3d", "only 1-D (N, C, L) and 2-D"},
    {"test_AvgPool3d_stride", "only 1-D (N, C, L) and 2-D"},
    {"test_AvgPool3d_stride1_pad0_gpu_input", "only 1-D (N, C, L) and 2-D"},
    {"test_Conv3d", "only 1-D (N, C, L) and 2-D"},
    {"test_Conv3d_dilated", "only 1-D (N, C, L) and 2-D"},
    {"test_Conv3d_dilated_strided", "only 1-D (N, C, L) and 2-D"},
    {"test_Conv3d_groups", "only 1-D (N, C, L) and 2-D"},
    {"test_Conv3d_no_bias", "only 1-D (N, C, L) and 2-D"},
    {"test_Conv3d_stride", "only 1-D (N, C, L) and 2-D"},
    {"test_Conv3d_stride_padding", "only 1-D (N, C, L) and 2-D"},
    {"test_MaxPool3d", "only 1-D (N, C, L) and 2-D"},
    {"test_MaxPool3d_stride", "only 1-D (N, C, L) and 2-D"},
    {"test_MaxPool3d_stride_padding", "only 1-D (N, C, L) and 2-D"},
};

std::string Dir() {
  const char *srcdir = getenv("TEST_SRCDIR");
  std::string base = srcdir ? std::string(srcdir) + "/onnx_testdata/data" : "";
  struct stat st;
  if (base.empty() || stat(base.c_str(), &st) != 0)
    base = "external/onnx_testdata/data";
  return base;
}

std::vector<std::string> List(const std::string &dir, bool dirs) {
  std::vector<std::string> out;
  DIR *d = opendir(dir.c_str());
  if (!d)
    return out;
  while (struct dirent *e = readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..")
      continue;
    struct stat st;
    if (stat((dir + "/" + n).c_str(), &st) == 0 && (S_ISDIR(st.st_mode) != 0) == dirs)
      out.push_back(n);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

struct Tensor {
  int onnx_dtype = 0;
  gcc_shape shape{};
  std::vector<uint8_t> bytes;
};

bool ReadTensor(const std::string &path, Tensor *t, std::string *err) {
  std::vector<uint8_t> b;
  if (!ReadFile(path, &b)) {
    *err = "cannot read " + path;
    return false;
  }
  gcc_diag d{};
  void *data = nullptr;
  size_t n = 0;
  if (gcc_onnx_parse_tensor(b.data(), b.size(), path.c_str(), &t->onnx_dtype, &t->shape, &data, &n,
                            &d) != GCC_OK) {
    *err = d.msg;
    return false;
  }
  t->bytes.assign(static_cast<uint8_t *>(data), static_cast<uint8_t *>(data) + n);
  free(data);
  return true;
}

std::string ShapeStr(const gcc_shape &s) {
  char buf[128];
  return gcc_shape_str(&s, buf, sizeof buf);
}

// The op types of a model (default domain) and the non-default domains.
bool ModelOps(const std::vector<uint8_t> &bytes, std::set<std::string> *ops,
              std::set<std::string> *domains, std::vector<std::string> *inputs) {
  Onnx__ModelProto *m = onnx__model_proto__unpack(nullptr, bytes.size(), bytes.data());
  if (!m || !m->graph) {
    if (m)
      onnx__model_proto__free_unpacked(m, nullptr);
    return false;
  }
  for (size_t i = 0; i < m->graph->n_node; i++) {
    const Onnx__NodeProto *n = m->graph->node[i];
    std::string dom = n->domain ? n->domain : "";
    if (!dom.empty() && dom != "ai.onnx")
      domains->insert(dom);
    ops->insert(n->op_type ? n->op_type : "");
  }
  std::set<std::string> inits;
  for (size_t i = 0; i < m->graph->n_initializer; i++)
    inits.insert(m->graph->initializer[i]->name ? m->graph->initializer[i]->name : "");
  for (size_t i = 0; i < m->graph->n_input; i++) {
    std::string n = m->graph->input[i]->name ? m->graph->input[i]->name : "";
    if (!inits.count(n))
      inputs->push_back(n);
  }
  onnx__model_proto__free_unpacked(m, nullptr);
  return true;
}

// numpy.testing.assert_allclose(actual, desired, rtol, atol): |a - d| <=
// atol + rtol * |d|, NaN equal to NaN.
bool Close(double a, double e, double rtol, double atol) {
  if (std::isnan(a) || std::isnan(e))
    return std::isnan(a) && std::isnan(e);
  if (std::isinf(a) || std::isinf(e))
    return a == e;
  return std::fabs(a - e) <= atol + rtol * std::fabs(e);
}

double Element(const void *p, gcc_dtype dt, int64_t i) {
  switch (dt) {
  case GCC_DT_FLOAT32: return static_cast<const float *>(p)[i];
  case GCC_DT_INT64: return (double)static_cast<const int64_t *>(p)[i];
  case GCC_DT_INT32: return static_cast<const int32_t *>(p)[i];
  case GCC_DT_BOOL: return static_cast<const uint8_t *>(p)[i];
  default: return NAN;
  }
}

enum class Outcome { kPassed, kFailed, kSkipped, kRefused };

struct CaseResult {
  Outcome outcome = Outcome::kFailed;
  std::string detail;
  std::vector<std::string> missing_ops;
};

struct DataSet {
  std::vector<Tensor> ins, outs; // inputs in the graph's input order
};

bool ReadDataSet(const std::string &dir, DataSet *ds, std::string *err) {
  for (int out = 0; out < 2; out++)
    for (int k = 0;; k++) {
      std::string p = dir + (out ? "/output_" : "/input_") + std::to_string(k) + ".pb";
      struct stat st;
      if (stat(p.c_str(), &st) != 0)
        break;
      Tensor t;
      if (!ReadTensor(p, &t, err))
        return false;
      (out ? ds->outs : ds->ins).push_back(std::move(t));
    }
  return true;
}

// Runs one data set on the CPU plan of `model` (whose inputs are found by
// name among `names`, the ONNX graph's inputs); "" when every output
// matches, else what differs.
// The host backend every CUDA plan of the run shares (its emulated modules
// are kept until the end).
gcc_host_test::HostBackend *Host() {
  static gcc_host_test::HostBackend *hb = new gcc_host_test::HostBackend();
  return hb;
}

// What the CUDA plans ran where: nodes on cuda:0 per op, and nodes the
// placement kept on the CPU (integer values, ops without a CUDA lowering).
std::map<std::string, int> g_on_device, g_on_host;

std::string RunDataSet(const gcc_graph *model, const std::vector<std::string> &names,
                       const DataSet &ds, bool cuda) {
  if (ds.ins.size() != names.size())
    return "the data set has " + std::to_string(ds.ins.size()) + " inputs, the graph " +
           std::to_string(names.size());
  if ((int)ds.outs.size() != model->n_outputs)
    return "the data set has " + std::to_string(ds.outs.size()) + " outputs, the graph " +
           std::to_string(model->n_outputs);
  std::vector<const Tensor *> ins;
  int64_t batch = 1;
  for (int k = 0; k < model->n_inputs; k++) {
    const gcc_value *v = &model->values[model->inputs[k]];
    size_t j = std::find(names.begin(), names.end(), v->name) - names.begin();
    if (j == names.size())
      return std::string("graph input '") + v->name + "' is not in the data set";
    const Tensor &t = ds.ins[j];
    if (gcc_onnx_dtype(t.onnx_dtype) != v->dtype)
      return "input " + std::to_string(k) + " is " + gcc_onnx_dtype_name(t.onnx_dtype) +
             ", the graph takes " + gcc_dtype_name(v->dtype);
    if (v->shape.ndim > 0 && v->shape.dims[0] == GCC_BATCH_DIM && t.shape.ndim > 0)
      batch = t.shape.dims[0];
    ins.push_back(&t);
  }
  gcc_options o{};
  o.mode = GCC_MODE_EVAL;
  o.batch_size = batch;
  o.device = cuda ? GCC_DEV_CUDA(0) : GCC_DEV_CPU;
  o.device_explicit = 1;
  o.n_cuda_devices = 1;
  FILE *quiet = fopen("/dev/null", "w"); // copies inside the step are expected here
  o.warn_file = quiet;
  gcc_plan *p = nullptr;
  gcc_diag d{};
  gcc_plan_config cfg{};
  cfg.threads = 1;
  cfg.readback_ring = 1;
  gcc_host_test::ModelWeights weights(model, cuda ? Host() : nullptr);
  if (cuda) {
    cfg.device = &Host()->be;
    cfg.sm = 90;
    cfg.sm_count = 4;
    cfg.compile = gcc_kernel_cache_hook;
    cfg.compile_user = gcc_test::TestKernelCache();
  }
  gcc_status cs =
      gcc_plan_compile(model, &o, &cfg, gcc_host_test::ModelWeights::Bind, &weights, &p, &d);
  if (quiet)
    fclose(quiet);
  if (cs != GCC_OK)
    return std::string(cuda ? "CUDA plan: " : "") + "compile: " + d.msg;
  std::string result;
  if (cuda) {
    const gcc_graph *cg = gcc_plan_graph(p);
    for (int i = 0; i < cg->n_nodes; i++) {
      const gcc_node *n = &cg->nodes[i];
      if (gcc_op(n->op)->flags & GCC_OPF_COPY)
        continue;
      (GCC_DEV_IS_CUDA(n->device) ? g_on_device : g_on_host)[gcc_op_name(n->op)]++;
    }
    // the host backend runs cuDNN groups with the CPU kernels: make the
    // cuDNN descriptors of each (no GPU needed), so that a shape cuDNN
    // refuses, or whose output it computes differently, fails here
    for (int gi = 0; gi < cg->n_groups && result.empty(); gi++) {
      if (cg->groups[gi].kind != GCC_GROUP_CUDNN)
        continue;
      int node = cg->groups[gi].nodes[0];
      gcc_cuda_call call = gcc_cuda_op_of(cg->nodes[node].op)->call;
      gcc_diag cd{};
      if (call == GCC_CUDA_CALL_POOL_FORWARD || call == GCC_CUDA_CALL_POOL_BACKWARD) {
        gcc_pool2d_shape ps;
        gcc_cudnn_pool *pl = nullptr;
        if (gcc_pool2d_shape_of(cg, node, &ps, &cd) != GCC_OK ||
            gcc_cudnn_pool_create(&ps, &pl, &cd) != GCC_OK)
          result = std::string("cuDNN pooling descriptors: ") + cd.msg;
        gcc_cudnn_pool_destroy(pl);
      } else {
        gcc_conv2d_shape cs2;
        gcc_cudnn_conv *cv = nullptr;
        if (gcc_conv2d_shape_of(cg, node, &cs2, &cd) != GCC_OK ||
            gcc_cudnn_conv_create(&cs2, &cv, &cd) != GCC_OK)
          result = std::string("cuDNN convolution descriptors: ") + cd.msg;
        gcc_cudnn_conv_destroy(cv);
      }
    }
  }
  for (int k = 0; k < model->n_inputs && result.empty(); k++) {
    const gcc_value *v = &model->values[model->inputs[k]];
    if (!cuda) {
      const gcc_tensor *bound = gcc_plan_tensor(p, v->name);
      if (!bound || !gcc_shape_equal(&bound->shape, &ins[k]->shape)) {
        result = std::string("input '") + v->name + "' is " + ShapeStr(ins[k]->shape) +
                 ", the plan takes " + (bound ? ShapeStr(bound->shape) : "nothing");
        break;
      }
    }
    if (gcc_plan_bind_input(p, v->name, ins[k]->bytes.data(), &d) != GCC_OK)
      result = d.msg;
  }
  if (result.empty() && gcc_plan_run(p, 0, &d) != GCC_OK)
    result = std::string("run: ") + d.msg;
  for (int k = 0; k < model->n_outputs && result.empty(); k++) {
    const char *name = model->values[model->outputs[k]].name;
    const gcc_tensor *t = gcc_plan_host_tensor(p, name, &d);
    const Tensor &want = ds.outs[k];
    gcc_dtype wdt = gcc_onnx_dtype(want.onnx_dtype);
    if (!t) {
      result = std::string("output '") + name + "' is not in the plan";
    } else if (t->dtype != wdt) {
      result = std::string("output '") + name + "' is " + gcc_dtype_name(t->dtype) + ", expected " +
               gcc_onnx_dtype_name(want.onnx_dtype);
    } else if (!gcc_shape_equal(&t->shape, &want.shape)) {
      result = std::string("output '") + name + "' has shape " + ShapeStr(t->shape) +
               ", expected " + ShapeStr(want.shape);
    } else {
      int64_t bad = 0, first = -1;
      double worst = 0;
      for (int64_t i = 0; i < t->numel; i++) {
        double a = Element(t->data, t->dtype, i), e = Element(want.bytes.data(), wdt, i);
        if (!Close(a, e, 1e-3, 1e-7)) {
          if (first < 0)
            first = i;
          bad++;
          worst = std::max(worst, std::fabs(a - e));
        }
      }
      if (bad) {
        std::ostringstream os;
        os << "output '" << name << "': " << bad << " of " << t->numel
           << " elements differ (rtol 1e-3, atol 1e-7); first at " << first << ": got "
           << Element(t->data, t->dtype, first) << ", expected "
           << Element(want.bytes.data(), wdt, first) << "; max abs error " << worst;
        result = os.str();
      }
    }
  }
  gcc_plan_free(p);
  if (!result.empty() && cuda)
    result = "CUDA plan (host-emulated): " + result;
  return result;
}

// Imports the case (with `frozen` graph inputs taken as constants).
gcc_status Import(const std::vector<uint8_t> &bytes, const std::string &dir,
                  const std::vector<gcc_onnx_tensor> &frozen, gcc_graph **g, gcc_diag *d) {
  size_t at = dir.rfind("/data/");
  std::string src = dir.substr(at == std::string::npos ? 0 : at + 6) + "/model.onnx";
  gcc_onnx_options o{};
  o.base_dir = dir.c_str();
  o.frozen = frozen.empty() ? nullptr : frozen.data();
  o.n_frozen = (int)frozen.size();
  return gcc_onnx_import(bytes.data(), bytes.size(), src.c_str(), &o, g, nullptr, d);
}

CaseResult RunCase(const std::string &dir) {
  CaseResult r;
  std::vector<uint8_t> bytes;
  if (!ReadFile(dir + "/model.onnx", &bytes)) {
    r.detail = "cannot read model.onnx";
    return r;
  }
  std::set<std::string> ops, domains;
  std::vector<std::string> names;
  if (!ModelOps(bytes, &ops, &domains, &names)) {
    r.detail = "model.onnx does not parse";
    return r;
  }
  for (const std::string &dom : domains)
    r.missing_ops.push_back("domain " + dom);
  for (const std::string &op : ops)
    if (!gcc_onnx_op_supported(op.c_str()))
      r.missing_ops.push_back(op);
  if (!r.missing_ops.empty()) {
    r.outcome = Outcome::kSkipped;
    return r;
  }
  gcc_graph *g = nullptr;
  gcc_diag d{};
  gcc_status st = Import(bytes, dir, {}, &g, &d);
  // ONNX's runner feeds shape inputs (Reshape's shape, Squeeze's axes,
  // Clip's bounds, Pad's pads and value) at run time; gcc-train takes them at
  // import. Such a case is imported once per data set with exactly the
  // graph inputs the importer names as needing a constant frozen to the
  // data set's values (gcc_onnx_options.frozen).
  bool freeze = st == GCC_ERR_SHAPE && strstr(d.msg, "is not a constant") != nullptr;
  if (st != GCC_OK && !freeze) {
    r.outcome =
        st == GCC_ERR_UNSUPPORTED || st == GCC_ERR_SHAPE ? Outcome::kRefused : Outcome::kFailed;
    r.detail = d.msg;
    return r;
  }
  std::vector<DataSet> sets;
  for (const std::string &set : List(dir, true)) {
    if (set.rfind("test_data_set_", 0) != 0)
      continue;
    DataSet ds;
    if (!ReadDataSet(dir + "/" + set, &ds, &r.detail)) {
      r.detail = set + ": " + r.detail;
      gcc_graph_free(g);
      return r;
    }
    sets.push_back(std::move(ds));
  }
  r.outcome = Outcome::kPassed;
  for (size_t k = 0; k < sets.size() && r.outcome == Outcome::kPassed; k++) {
    if (freeze) {
      std::vector<gcc_onnx_tensor> frozen;
      for (int tries = 0; tries <= (int)names.size(); tries++) {
        gcc_graph_free(g);
        g = nullptr;
        d = gcc_diag{};
        st = Import(bytes, dir, frozen, &g, &d);
        const char *at = st == GCC_ERR_SHAPE ? strstr(d.msg, " input '") : nullptr;
        if (!at || !strstr(d.msg, "is not a constant"))
          break;
        std::string name(at + 8, strchr(at + 8, '\'') ? strchr(at + 8, '\'') - (at + 8) : 0);
        size_t j = std::find(names.begin(), names.end(), name) - names.begin();
        if (j == names.size() || j >= sets[k].ins.size())
          break; // not a graph input: the refusal stands
        const Tensor &t = sets[k].ins[j];
        frozen.push_back({names[j].c_str(), t.onnx_dtype, t.shape, t.bytes.data(), t.bytes.size()});
      }
      if (st != GCC_OK) {
        r.outcome =
            st == GCC_ERR_UNSUPPORTED || st == GCC_ERR_SHAPE ? Outcome::kRefused : Outcome::kFailed;
        r.detail = std::string("with its shape inputs frozen: ") + d.msg;
        break;
      }
    }
    for (bool cuda : {false, true}) {
      std::string why = RunDataSet(g, names, sets[k], cuda);
      if (!why.empty()) {
        r.outcome = Outcome::kFailed;
        r.detail = "test_data_set_" + std::to_string(k) + ": " + why;
        break;
      }
    }
  }
  gcc_graph_free(g);
  return r;
}

// Cases whose expected output is one random draw: training-mode Dropout
// (ratio > 0), whose mask ONNX's reference draws with numpy's generator. An
// inference import takes Dropout as the identity whatever the file's
// training_mode (onnx/import_ops_elementwise.c cv_dropout), so these run
// and differ; they are counted apart, and fail the test if they pass.
const char *const kRandomOutput[] = {"test_training_dropout", "test_training_dropout_default"};

bool IsRandomOutput(const std::string &name) {
  for (const char *n : kRandomOutput)
    if (name == n)
      return true;
  return false;
}

const Refusal *FindRefusal(const std::string &name) {
  for (const Refusal &r : kRefused)
    if (name == r.test_case)
      return &r;
  return nullptr;
}

// Runs the cases of `suite` whose position in the sorted list is `part`
// modulo `parts`: a suite is split into parts that Bazel's test shards run
// side by side (shard_count in tests/BUILD), each far from the timeout.
void RunSuite(const std::string &suite, int part, int parts) {
  std::string root = Dir() + "/" + suite;
  std::vector<std::string> all = List(root, true);
  ASSERT_FALSE(all.empty()) << "no cases under " << root
                            << " (is libonnx-testdata installed? tools/install-deps.sh)";
  std::vector<std::string> cases;
  for (size_t i = 0; i < all.size(); i++)
    if (static_cast<int>(i % parts) == part)
      cases.push_back(all[i]);
  std::string label = suite + " (part " + std::to_string(part + 1) + " of " +
                      std::to_string(parts) + ", " + std::to_string(cases.size()) + " of " +
                      std::to_string(all.size()) + " cases)";
  int ran = 0, passed = 0, failed = 0, skipped = 0, refused = 0, random = 0;
  std::map<std::string, int> skipped_ops;
  std::vector<std::string> failures, refusals;
  for (const std::string &name : cases) {
    CaseResult r = RunCase(root + "/" + name);
    const Refusal *listed = FindRefusal(name);
    if (IsRandomOutput(name)) {
      if (r.outcome == Outcome::kFailed && r.detail.find("elements differ") != std::string::npos)
        random++;
      else
        failures.push_back(name +
                           ": listed in kRandomOutput but did not run and differ: " + r.detail);
      continue;
    }
    switch (r.outcome) {
    case Outcome::kSkipped:
      skipped++;
      for (const std::string &op : r.missing_ops)
        skipped_ops[op]++;
      break;
    case Outcome::kRefused:
      refused++;
      refusals.push_back(name + ": " + r.detail);
      if (!listed || r.detail.find(listed->reason) == std::string::npos)
        failures.push_back(name +
                           ": refused, and not listed in kRefused with this reason: " + r.detail);
      break;
    case Outcome::kPassed:
      ran++;
      passed++;
      if (listed)
        failures.push_back(name + ": listed in kRefused but imports and passes now; remove it");
      break;
    case Outcome::kFailed:
      ran++;
      failed++;
      failures.push_back(name + ": " + r.detail);
      break;
    }
  }
  printf("%s: ran %d, passed %d, failed %d, skipped %d (op not supported)\n", label.c_str(), ran,
         passed, failed, skipped);
  printf("%s: the same cases through the CUDA plan (host-emulated): IR nodes on cuda:0:",
         label.c_str());
  for (const auto &kv : g_on_device)
    printf(" %s %d", kv.first.c_str(), kv.second);
  printf("; kept on the CPU:");
  for (const auto &kv : g_on_host)
    printf(" %s %d", kv.first.c_str(), kv.second);
  printf("\n");
  g_on_device.clear();
  g_on_host.clear();
  printf("%s: refused %d (supported ops, variant not supported)\n", label.c_str(), refused);
  if (random)
    printf("%s: not compared %d (a random expected output: kRandomOutput)\n", label.c_str(),
           random);
  for (const std::string &s : refusals)
    printf("  refused %s\n", s.c_str());
  std::vector<std::pair<int, std::string>> by_count;
  for (const auto &kv : skipped_ops)
    by_count.push_back({-kv.second, kv.first});
  std::sort(by_count.begin(), by_count.end());
  printf("%s: skipped ops (cases):", label.c_str());
  for (size_t i = 0; i < by_count.size(); i++)
    printf("%s %s (%d)", i ? "," : "", by_count[i].second.c_str(), -by_count[i].first);
  printf("\n");
  fflush(stdout);
  for (const std::string &f : failures)
    ADD_FAILURE() << suite << "/" << f;
}

// The node suite (over 800 cases, each compiled for the CPU and for the
// host-emulated CUDA plan: NVRTC and the host compiler) in 6 parts, the
// models of pytorch-converted in 2; gtest's sharding spreads the tests over
// Bazel's shards.
class NodeCases : public ::testing::TestWithParam<int> {};
TEST_P(NodeCases, Part) {
  RunSuite("node", GetParam(), 6);
}
INSTANTIATE_TEST_SUITE_P(OnnxConformance, NodeCases, ::testing::Range(0, 6));

class PytorchConverted : public ::testing::TestWithParam<int> {};
TEST_P(PytorchConverted, Part) {
  RunSuite("pytorch-converted", GetParam(), 2);
}
INSTANTIATE_TEST_SUITE_P(OnnxConformance, PytorchConverted, ::testing::Range(0, 2));

TEST(OnnxConformance, PytorchOperator) {
  RunSuite("pytorch-operator", 0, 1);
}

} // namespace
