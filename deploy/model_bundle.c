/* model_bundle.c - the inference graph of a model and the CPU part of its
 * .gccx bundle (deploy/model_bundle.h): what gcc-run and the C API make of
 * a model file, without a compiler. */
#include "deploy/model_bundle.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "deploy/bundle_internal.h"
#include "graph/graph.pb-c.h"
#include "graph/half.h"
#include "graph/loader.h"
#include "graph/ops.h"
#include "graph/util.h"
#include "onnx/model_file.h"
#include "passes/passes.h"
#include "runtime/compile.h"
#include "runtime/device.h"
#include "runtime/placement_report.h"

/* ---- the inference graph ---------------------------------------------------- */

/* A model without a training spec whose outputs are already `logits` and
 * `probabilities` (an inference graph written out, e.g. by gcc-train
 * --export-onnx and read back): kept as it is, after the same checks. */
static gcc_status kept_inference_graph(const gcc_graph *model, gcc_graph **out, gcc_diag *d) {
  const gcc_value *in = &model->values[model->inputs[0]];
  if (in->shape.ndim < 1 || in->shape.dims[0] != GCC_BATCH_DIM) {
    char sh[128];
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: input '%s' has the fixed shape %s; a bundle (and gcc-run) needs a "
                        "symbolic batch as dim 0",
                        model->source, in->name, gcc_shape_str(&in->shape, sh, sizeof sh));
  }
  gcc_graph *g, *probe = NULL;
  GCC_TRY(gcc_graph_clone(model, &g, d));
  gcc_status s = gcc_graph_clone_borrowing_params(g, &probe, d);
  if (s == GCC_OK)
    s = gcc_graph_bind_batch(probe, 1, d);
  if (s == GCC_OK)
    s = gcc_infer_shapes(probe, d);
  for (int k = 0; k < 2 && s == GCC_OK; k++) {
    const gcc_value *v = &probe->values[probe->outputs[k]];
    if (v->dtype != GCC_DT_FLOAT32 || v->shape.ndim != 2)
      s = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                       "%s: output '%s' must be float32 of shape (N, C) for an inference graph",
                       model->source, v->name);
  }
  gcc_graph_free(probe);
  if (s != GCC_OK) {
    gcc_graph_free(g);
    return s;
  }
  *out = g;
  return GCC_OK;
}

/* The dtype and shape of `model`'s value `v` with the batch bound to
 * `batch` (shape inference on a copy). */
static gcc_status probe_value(const gcc_graph *model, int v, int64_t batch, gcc_dtype *dtype,
                              gcc_shape *shape, gcc_diag *d) {
  gcc_graph *probe;
  GCC_TRY(gcc_graph_clone_borrowing_params(model, &probe, d));
  gcc_status s = gcc_graph_bind_batch(probe, batch, d);
  if (s == GCC_OK)
    s = gcc_infer_shapes(probe, d);
  if (s == GCC_OK) {
    const gcc_value *pv = &probe->values[gcc_graph_find(probe, model->values[v].name)];
    *dtype = pv->dtype;
    *shape = pv->shape;
  }
  gcc_graph_free(probe);
  return s;
}

/* A model of one input and one output that is not float32 (N, C) logits:
 * its graph pruned to that output, kept as it is (no softmax): a tensor
 * bundle (deploy/bundle.h, format version 3). The output must be float32
 * with the batch as dim 0: (1, ...) at batch 1 and (2, ...) at batch 2. */
static gcc_status tensor_inference_graph(const gcc_graph *model, gcc_dtype dtype,
                                         const gcc_shape *at1, gcc_graph **out, gcc_diag *d) {
  int o = model->outputs[0], in = model->inputs[0];
  const char *oname = model->values[o].name;
  char sh[128], sh2[128];
  if (o == in || model->values[o].kind != GCC_VALUE_ACTIVATION)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: output '%s' is %s, not computed from the input; a bundle runs a model "
                        "whose output is computed from its input",
                        model->source, oname, o == in ? "the input itself" : "a constant");
  if (dtype != GCC_DT_FLOAT32)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: output '%s' is %s; a bundle (and gcc-run) returns float32 outputs",
                        model->source, oname, gcc_dtype_name(dtype));
  gcc_dtype dt2;
  gcc_shape at2;
  GCC_TRY(probe_value(model, o, 2, &dt2, &at2, d));
  int batched = at1->ndim >= 1 && at1->dims[0] == 1 && at2.ndim == at1->ndim && at2.dims[0] == 2;
  for (int i = 1; batched && i < at1->ndim; i++)
    batched = at1->dims[i] == at2.dims[i];
  if (!batched)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: output '%s' has the shape %s at batch 1 and %s at batch 2; a bundle "
                        "(and gcc-run) needs the batch as the output's dim 0, as the input's",
                        model->source, oname, gcc_shape_str(at1, sh, sizeof sh),
                        gcc_shape_str(&at2, sh2, sizeof sh2));
  gcc_graph *g;
  GCC_TRY(gcc_graph_clone(model, &g, d));
  int keep = o;
  gcc_status s = gcc_graph_prune(g, &keep, 1, d);
  if (s == GCC_OK) {
    int input = gcc_graph_find(g, model->values[in].name), output = gcc_graph_find(g, oname);
    g->n_inputs = 0;
    g->n_outputs = 0;
    s = gcc_graph_add_input(g, input);
    if (s == GCC_OK)
      s = gcc_graph_add_output(g, output);
  }
  if (s == GCC_OK)
    s = gcc_graph_link(g, d);
  if (s == GCC_OK)
    s = gcc_graph_toposort(g, d);
  if (s != GCC_OK) {
    gcc_graph_free(g);
    return s;
  }
  *out = g;
  return GCC_OK;
}

gcc_bundle_kind gcc_inference_graph_kind(const gcc_graph *ig) {
  return ig->n_outputs == 2 && strcmp(ig->values[ig->outputs[0]].name, "logits") == 0 &&
                 strcmp(ig->values[ig->outputs[1]].name, "probabilities") == 0
             ? GCC_BUNDLE_CLASSIFIER
             : GCC_BUNDLE_TENSOR;
}

gcc_status gcc_inference_graph(const gcc_graph *model, gcc_graph **out, gcc_diag *d) {
  *out = NULL;
  const gcc_training *t = &model->training;
  int pred, in;
  if (!t->present && model->n_inputs == 1 && model->n_outputs == 2 &&
      strcmp(model->values[model->outputs[0]].name, "logits") == 0 &&
      strcmp(model->values[model->outputs[1]].name, "probabilities") == 0)
    return kept_inference_graph(model, out, d);
  if (!t->present && model->n_inputs == 1 && model->n_outputs == 1) {
    /* an inference model (an imported ONNX classifier): its one input and
     * its one output */
    in = model->inputs[0];
    pred = model->outputs[0];
  } else {
    if (!t->present || !t->prediction || !t->input)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: export needs a training spec naming the input and the prediction "
                          "(the logits), or a model of one input and one output",
                          model->source);
    pred = gcc_graph_find(model, t->prediction);
    in = gcc_graph_find(model, t->input);
    if (pred < 0 || in < 0)
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: the training spec names '%s' or '%s', "
                          "which the graph lacks",
                          model->source, t->prediction, t->input);
  }
  const char *pred_name = model->values[pred].name, *in_name = model->values[in].name;
  const gcc_shape *ins = &model->values[in].shape;
  if (ins->ndim < 1 || ins->dims[0] != GCC_BATCH_DIM) {
    char sh[128];
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: input '%s' has the fixed shape %s; a bundle (and gcc-run) needs a "
                        "symbolic batch as dim 0 (in ONNX a dim_param, e.g. torch.onnx.export(..., "
                        "dynamic_axes={'%s': {0: 'batch'}}))",
                        model->source, in_name, gcc_shape_str(ins, sh, sizeof sh), in_name);
  }
  if (!t->present && model->n_inputs == 1 && model->n_outputs == 1) {
    /* float32 (N, C): a classifier, as before; anything else: the output as
     * it is (a tensor bundle) */
    gcc_dtype dt1;
    gcc_shape at1;
    GCC_TRY(probe_value(model, pred, 1, &dt1, &at1, d));
    if (dt1 != GCC_DT_FLOAT32 || at1.ndim != 2)
      return tensor_inference_graph(model, dt1, &at1, out, d);
  }
  const char *taken[2] = {"logits", "probabilities"};
  for (int i = 0; i < 2; i++) {
    int v = gcc_graph_find(model, taken[i]);
    if (v >= 0 && !(i == 0 && v == pred))
      return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                          "%s: value '%s' exists; export names its outputs logits and "
                          "probabilities",
                          model->source, taken[i]);
  }
  gcc_graph *g;
  GCC_TRY(gcc_graph_clone(model, &g, d));
  gcc_status s = gcc_graph_prune(g, &pred, 1, d);
  int logits = pred, probs = -1, node;
  if (s == GCC_OK && strcmp(g->values[pred].name, "logits") != 0) {
    s = gcc_graph_add_temp(g, "logits", GCC_VALUE_ACTIVATION, &logits, d);
    if (s == GCC_OK)
      s = gcc_graph_add_node(g, "logits", GCC_OP_IDENTITY, &pred, 1, &logits, 1, &node, d);
  }
  if (s == GCC_OK)
    s = gcc_graph_add_temp(g, "probabilities", GCC_VALUE_ACTIVATION, &probs, d);
  if (s == GCC_OK)
    s = gcc_graph_add_node(g, "softmax", GCC_OP_SOFTMAX, &logits, 1, &probs, 1, &node, d);
  if (s == GCC_OK)
    s = gcc_node_set_int(g, node, "axis", 1);
  if (s == GCC_OK) {
    int input = gcc_graph_find(g, in_name);
    g->n_inputs = 0;
    g->n_outputs = 0;
    s = gcc_graph_add_input(g, input);
    if (s == GCC_OK)
      s = gcc_graph_add_output(g, logits);
    if (s == GCC_OK)
      s = gcc_graph_add_output(g, probs);
  }
  if (s == GCC_OK) {
    /* no training spec: the graph is inference only. Its inline data set
     * (if any) must not travel as initializers either. */
    int drop[2] = {g->training.inline_inputs, g->training.inline_targets};
    for (int i = 0; i < 2; i++)
      if (drop[i] >= 0)
        g->values[drop[i]].kind = GCC_VALUE_ACTIVATION;
    g->training.present = 0;
    g->training.inline_inputs = g->training.inline_targets = -1;
    s = gcc_graph_link(g, d);
  }
  if (s == GCC_OK)
    s = gcc_graph_toposort(g, d);
  if (s == GCC_OK) { /* shapes on a copy bound to batch 1: the graph keeps its -1 */
    gcc_graph *probe;
    s = gcc_graph_clone_borrowing_params(g, &probe, d);
    if (s == GCC_OK) {
      s = gcc_graph_bind_batch(probe, 1, d);
      if (s == GCC_OK)
        s = gcc_infer_shapes(probe, d);
      const gcc_value *pv = &probe->values[gcc_graph_find(probe, g->values[logits].name)];
      if (s == GCC_OK && (pv->dtype != GCC_DT_FLOAT32 || pv->shape.ndim != 2))
        s = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                         "%s: the prediction '%s' must be float32 logits of shape (N, C) to "
                         "export a classifier",
                         model->source, pred_name);
      gcc_graph_free(probe);
    }
  }
  if (s != GCC_OK) {
    gcc_graph_free(g);
    return s;
  }
  *out = g;
  return GCC_OK;
}

/* ---- the bundle ------------------------------------------------------------ */

void gcc_bundle_add_section(gcc_bundle_sections *s, const char *name, void *data, size_t size,
                            int owned) {
  snprintf(s->names[s->n], sizeof s->names[s->n], "%s", name);
  s->ref[s->n].name = s->names[s->n];
  s->ref[s->n].data = data;
  s->ref[s->n].size = size;
  s->own[s->n] = owned ? data : NULL;
  s->n++;
}

gcc_status gcc_bundle_weights_16bit(const gcc_graph *ig, int precision, unsigned char *is16,
                                    gcc_diag *d) {
  memset(is16, 0, (size_t)ig->n_values);
  gcc_dtype low = gcc_precision_dtype(precision);
  if (low == GCC_DT_FLOAT32)
    return GCC_OK;
  gcc_graph *probe;
  GCC_TRY(gcc_graph_clone_borrowing_params(ig, &probe, d));
  gcc_options o = {0};
  o.mode = GCC_MODE_EVAL;
  o.batch_size = 1;
  o.precision = precision;
  gcc_status s = gcc_graph_bind_batch(probe, 1, d);
  if (s == GCC_OK)
    s = gcc_infer_shapes(probe, d);
  if (s == GCC_OK)
    s = gcc_pass_autocast(probe, &o, d);
  for (int v = 0; v < ig->n_values && s == GCC_OK; v++) {
    const gcc_value *val = &ig->values[v];
    if (!val->data || val->dtype != GCC_DT_FLOAT32)
      continue;
    int pv = gcc_graph_find(probe, val->name), readers = 0, to_low = 0;
    for (int i = 0; pv >= 0 && i < probe->n_nodes; i++) {
      const gcc_node *n = &probe->nodes[i];
      for (int k = 0; k < n->n_inputs; k++)
        if (n->inputs[k] == pv) {
          readers++;
          to_low += gcc_autocast_is_cast_to(n, low);
        }
    }
    is16[v] = readers > 0 && readers == to_low;
  }
  gcc_graph_free(probe);
  return s;
}

/* Bytes of the weights section's tensor data (as gcc_bundle_info counts
 * them). */
typedef struct weight_stats {
  uint64_t bytes, bytes_fp32;
  int n16;
} weight_stats;

/* The graph (initializers without data) and the weights (a Graph of the
 * initializers with data) from one serialized Model; the initializers
 * is16 marks (by value of g) stored in `low` (a 16-bit dtype). */
static gcc_status split_model(const gcc_graph *g, const unsigned char *is16, gcc_dtype low,
                              weight_stats *ws, gcc_bundle_sections *secs, gcc_diag *d) {
  uint8_t *bytes;
  size_t size;
  GCC_TRY(gcc_model_serialize(g, &bytes, &size, d));
  Gcc__Model *m = gcc__model__unpack(NULL, size, bytes);
  free(bytes);
  if (!m || !m->graph) {
    if (m)
      gcc__model__free_unpacked(m, NULL);
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "export: the serialized model does not parse");
  }
  Gcc__Graph w = GCC__GRAPH__INIT;
  w.n_initializers = m->graph->n_initializers;
  w.initializers = m->graph->initializers;
  size_t wsize = gcc__graph__get_packed_size(&w);
  uint8_t *wbytes = malloc(wsize ? wsize : 1);
  size_t n = m->graph->n_initializers;
  protobuf_c_boolean *had = calloc(n + 1, sizeof *had);
  uint8_t *gbytes = NULL;
  size_t gsize = 0;
  /* the 16-bit tensors: rounded to nearest even, little-endian */
  uint8_t **half = calloc(n + 1, sizeof *half);
  ProtobufCBinaryData *keep = calloc(n + 1, sizeof *keep);
  gcc_status st = GCC_OK;
  if (!half || !keep)
    st = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (export)");
  for (size_t i = 0; i < n && st == GCC_OK; i++) {
    Gcc__Tensor *t = m->graph->initializers[i];
    int v = gcc_graph_find(g, t->name);
    keep[i] = t->raw_data;
    ws->bytes_fp32 += t->raw_data.len;
    if (v < 0 || !is16 || !is16[v] || t->dtype != GCC__DATA_TYPE__DT_FLOAT32) {
      ws->bytes += t->raw_data.len;
      continue;
    }
    size_t numel = t->raw_data.len / sizeof(float);
    if (!(half[i] = malloc(2 * numel + 1))) {
      st = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (export)");
      break;
    }
    const float *f = (const float *)g->values[v].data;
    for (size_t k = 0; k < numel; k++) {
      uint16_t h = low == GCC_DT_BFLOAT16 ? gcc_f32_to_bf16(f[k]) : gcc_f32_to_f16(f[k]);
      if (isfinite(f[k]) && (h & 0x7fffu) >= (low == GCC_DT_BFLOAT16 ? 0x7f80u : 0x7c00u)) {
        st = gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "--export-precision %s: weight '%s' holds %g, beyond the largest "
                          "finite %s (%s); export with --export-precision bf16 or fp32",
                          low == GCC_DT_BFLOAT16 ? "bf16" : "fp16", t->name, (double)f[k],
                          gcc_dtype_name(low), low == GCC_DT_BFLOAT16 ? "3.39e38" : "65504");
        break;
      }
      half[i][2 * k] = (uint8_t)(h & 0xff);
      half[i][2 * k + 1] = (uint8_t)(h >> 8);
    }
    t->raw_data.data = half[i];
    t->raw_data.len = 2 * numel;
    t->dtype = (Gcc__DataType)low;
    ws->bytes += 2 * numel;
    ws->n16++;
  }
  if (st == GCC_OK && wbytes && had) {
    wsize = gcc__graph__get_packed_size(&w); /* the 16-bit tensors are smaller */
    gcc__graph__pack(&w, wbytes);
    for (size_t i = 0; i < n; i++) /* the graph keeps float32 initializers */
      if (half[i]) {
        m->graph->initializers[i]->raw_data = keep[i];
        m->graph->initializers[i]->dtype = GCC__DATA_TYPE__DT_FLOAT32;
      }
    for (size_t i = 0; i < n; i++) { /* the graph without the tensor bytes */
      had[i] = m->graph->initializers[i]->has_raw_data;
      m->graph->initializers[i]->has_raw_data = 0;
    }
    gsize = gcc__model__get_packed_size(m);
    gbytes = malloc(gsize ? gsize : 1);
    if (gbytes)
      gcc__model__pack(m, gbytes);
    for (size_t i = 0; i < n; i++)
      m->graph->initializers[i]->has_raw_data = had[i];
  }
  free(had);
  for (size_t i = 0; keep && i < n; i++) { /* the message frees its own buffers */
    if (half && half[i]) {
      m->graph->initializers[i]->raw_data = keep[i];
      m->graph->initializers[i]->dtype = GCC__DATA_TYPE__DT_FLOAT32;
    }
  }
  for (size_t i = 0; half && i < n; i++)
    free(half[i]);
  free(half);
  free(keep);
  gcc__model__free_unpacked(m, NULL);
  if (st != GCC_OK || !wbytes || !gbytes) {
    free(wbytes);
    free(gbytes);
    return st != GCC_OK ? st : gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (export)");
  }
  gcc_bundle_add_section(secs, "graph", gbytes, gsize, 1);
  gcc_bundle_add_section(secs, "weights", wbytes, wsize, 1);
  return GCC_OK;
}

/* Compiles the inference graph for device `dev` and `batch` rows and
 * returns the compiled graph and its JSON placement report. */
gcc_status gcc_bundle_compile_for(const gcc_graph *ig, const gcc_device_info *devs, int n_devs,
                                  int dev, int64_t batch, int precision, gcc_graph **cg,
                                  char **report, gcc_diag *d) {
  gcc_options o = {0};
  o.mode = GCC_MODE_EVAL;
  o.precision = precision;
  o.batch_size = batch;
  o.device = dev;
  o.device_explicit = 1;
  o.n_cuda_devices = 1;
  FILE *quiet = fopen("/dev/null", "w"); /* placement warnings are the report's business */
  o.warn_file = quiet;
  gcc_mem_plan mem;
  gcc_status s = gcc_compile_graph(ig, &o, cg, &mem, d);
  if (quiet)
    fclose(quiet);
  GCC_TRY(s);
  s = gcc_placement_report_string(*cg, &mem, devs, n_devs, GCC_MODE_EVAL, batch, GCC_DUMP_JSON,
                                  report, d);
  gcc_mem_plan_free(&mem);
  if (s != GCC_OK) {
    gcc_graph_free(*cg);
    *cg = NULL;
  }
  return s;
}

/* A value of the batch-1 compiled graph, with its batch dim written -1. */
static json_t *tensor_json(const gcc_value *v, const char *name) {
  json_t *t = json_object(), *shape = json_array();
  json_object_set_new(t, "name", json_string(name));
  json_object_set_new(t, "dtype", json_string(gcc_dtype_name(v->dtype)));
  for (int i = 0; i < v->shape.ndim; i++)
    json_array_append_new(shape, json_integer(i == 0 ? -1 : v->shape.dims[i]));
  json_object_set_new(t, "shape", shape);
  return t;
}

/* The inference graph of `model` as a bundle's reader loads it (written
 * out and parsed back): the plans and kernels of the bundle are compiled
 * from exactly the graph gcc-run and the C API compile, so that a 16-bit
 * plan's casts, kernels and their names agree (the autocast pass keeps the
 * dtype of values a training spec names, which the written graph has no
 * longer). */
static gcc_status reader_graph(const gcc_graph *model, gcc_graph **out, gcc_diag *d) {
  *out = NULL;
  gcc_graph *ig;
  GCC_TRY(gcc_inference_graph(model, &ig, d));
  uint8_t *bytes;
  size_t size;
  gcc_status s = gcc_model_serialize(ig, &bytes, &size, d);
  if (s == GCC_OK) {
    s = gcc_model_parse(bytes, size, ig->source, out, d);
    free(bytes);
    if (s != GCC_OK)
      d->status = s = GCC_ERR_INTERNAL;
  }
  gcc_graph_free(ig);
  return s;
}

gcc_status gcc_bundle_build(const gcc_graph *model, const gcc_export_options *o,
                            gcc_bundle_cuda_fn cuda, const char *source, uint8_t **out,
                            size_t *out_size, gcc_diag *d) {
  *out = NULL;
  *out_size = 0;
  if (o->n_archs < 0 || o->n_archs > GCC_BUNDLE_MAX_ARCHS)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "export: %d architectures (0 to %d)",
                        o->n_archs, GCC_BUNDLE_MAX_ARCHS);
  static const int64_t default_batches[2] = {1, 1000};
  const int64_t *batches = o->n_batch_sizes ? o->batch_sizes : default_batches;
  int n_batches = o->n_batch_sizes ? o->n_batch_sizes : 2;
  if (n_batches < 0 || n_batches > GCC_BUNDLE_MAX_BATCHES)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "export: %d batch sizes (0 to %d)", n_batches,
                        GCC_BUNDLE_MAX_BATCHES);
  for (int j = 0; j < n_batches; j++)
    if (batches[j] < 1 || batches[j] > INT32_MAX || (j > 0 && batches[j] <= batches[j - 1]))
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "export: batch sizes must be ascending integers in [1, 2^31)");
  if (o->precision != GCC_PRECISION_FP32 && o->precision != GCC_PRECISION_BF16 &&
      o->precision != GCC_PRECISION_FP16)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "export: precision %s; a bundle is fp32, bf16 or fp16",
                        gcc_precision_name(o->precision));
  gcc_dtype low = gcc_precision_dtype(o->precision);
  gcc_graph *ig;
  GCC_TRY(reader_graph(model, &ig, d));
  /* deploy/bundle.h "Format versions": 3 for a tensor bundle; a classifier
   * keeps 1 (float32) or 2 (16-bit weights) */
  gcc_bundle_kind kind = gcc_inference_graph_kind(ig);
  uint32_t version = kind == GCC_BUNDLE_TENSOR ? 3u
                     : low == GCC_DT_FLOAT32   ? GCC_BUNDLE_FORMAT_VERSION_MIN
                                               : 2u;
  gcc_bundle_sections *secs = calloc(1, sizeof *secs);
  unsigned char *is16 = malloc((size_t)ig->n_values + 1);
  if (!secs || !is16) {
    free(secs);
    free(is16);
    gcc_graph_free(ig);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (export)");
  }
  gcc_bundle_add_section(secs, "manifest", NULL, 0, 0); /* filled last: it lists the others */
  weight_stats ws = {0};
  gcc_status s = gcc_bundle_weights_16bit(ig, o->precision, is16, d);
  if (s == GCC_OK)
    s = split_model(ig, is16, low, &ws, secs, d);
  free(is16);
  gcc_graph *cg = NULL; /* the CPU plan's graph: the signature's shapes */
  if (s == GCC_OK) {
    gcc_device_info cpu;
    gcc_device_info_cpu(&cpu);
    char *report = NULL;
    s = gcc_bundle_compile_for(ig, &cpu, 1, GCC_DEV_CPU, 1, o->precision, &cg, &report, d);
    if (s == GCC_OK)
      gcc_bundle_add_section(secs, "plan.cpu", report, strlen(report), 1);
  }
  if (s == GCC_OK && o->n_archs > 0) {
    if (cuda)
      s = cuda(ig, o, batches, n_batches, secs, d);
    else
      s = gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                       "%s: %d CUDA architectures asked for, but this program has no compiler "
                       "(export with gcc-train --export)",
                       source, o->n_archs);
  }

  char *manifest = NULL;
  if (s == GCC_OK) {
    json_t *m = json_object();
    json_object_set_new(m, "schema", json_string("gcc-train.bundle/1"));
    json_object_set_new(m, "format_version", json_integer(version));
    json_object_set_new(m, "gcc_train_version", json_string(GCC_TRAIN_VERSION));
    time_t now = o->created ? (time_t)o->created : time(NULL);
    struct tm tmv;
    char when[64];
    gmtime_r(&now, &tmv);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tmv);
    json_object_set_new(m, "created", json_string(when));
    json_object_set_new(m, "model", json_string(model->source));
    json_t *ins = json_array(), *outs = json_array();
    const char *in_name = ig->values[ig->inputs[0]].name;
    json_array_append_new(ins, tensor_json(&cg->values[gcc_graph_find(cg, in_name)], in_name));
    for (int i = 0; i < ig->n_outputs; i++) {
      const char *on = ig->values[ig->outputs[i]].name;
      json_array_append_new(outs, tensor_json(&cg->values[gcc_graph_find(cg, on)], on));
    }
    json_object_set_new(m, "inputs", ins);
    json_object_set_new(m, "outputs", outs);
    json_t *norm = json_object(), *mean = json_array(), *stdv = json_array();
    for (int i = 0; i < model->training.n_mean; i++)
      json_array_append_new(mean, json_real(model->training.mean[i]));
    for (int i = 0; i < model->training.n_std; i++)
      json_array_append_new(stdv, json_real(model->training.std[i]));
    json_object_set_new(norm, "mean", mean);
    json_object_set_new(norm, "std", stdv);
    json_object_set_new(norm, "formula", json_string("x = (byte / 255 - mean[c]) / std[c]"));
    json_object_set_new(m, "normalization", norm);
    json_t *archs = json_array();
    char a[32];
    for (int i = 0; i < o->n_archs; i++) {
      snprintf(a, sizeof a, "sm_%d", o->archs[i]);
      json_array_append_new(archs, json_string(a));
    }
    json_object_set_new(m, "cubin_archs", archs);
    if (o->n_archs > 0) {
      snprintf(a, sizeof a, "compute_%d", o->archs[o->n_archs - 1]);
      json_object_set_new(m, "ptx", json_string(a));
    } else { /* a CPU-only bundle */
      json_object_set_new(m, "ptx", json_null());
    }
    json_t *bj = json_array();
    for (int j = 0; o->n_archs > 0 && j < n_batches; j++)
      json_array_append_new(bj, json_integer(batches[j]));
    json_object_set_new(m, "batch_sizes", bj);
    if (version >= 3)
      json_object_set_new(m, "kind",
                          json_string(kind == GCC_BUNDLE_TENSOR ? "tensor" : "classifier"));
    if (version >= 2) { /* deploy/bundle.h: "Format versions" */
      json_object_set_new(m, "precision", json_string(gcc_precision_name(o->precision)));
      json_t *w = json_object();
      json_object_set_new(w, "dtype", json_string(gcc_dtype_name(ws.n16 ? low : GCC_DT_FLOAT32)));
      json_object_set_new(w, "bytes", json_integer((json_int_t)ws.bytes));
      json_object_set_new(w, "float32_bytes", json_integer((json_int_t)ws.bytes_fp32));
      json_object_set_new(w, "tensors_16bit", json_integer(ws.n16));
      json_object_set_new(m, "weights", w);
    }
    json_t *list = json_array();
    for (int i = 1; i < secs->n; i++) {
      uint8_t h[32];
      char hex[65];
      if (!gcc_bundle_sha256(secs->ref[i].name, secs->ref[i].data, secs->ref[i].size, h)) {
        s = gcc_diag_set(d, GCC_ERR_INTERNAL, "export: SHA-256 failed");
        break;
      }
      gcc_bundle_hex(h, hex);
      json_t *e = json_object();
      json_object_set_new(e, "name", json_string(secs->ref[i].name));
      json_object_set_new(e, "bytes", json_integer((json_int_t)secs->ref[i].size));
      json_object_set_new(e, "sha256", json_string(hex));
      json_array_append_new(list, e);
    }
    json_object_set_new(m, "sections", list);
    manifest = json_dumps(m, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(m);
    if (s == GCC_OK && !manifest)
      s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (export manifest)");
  }
  if (s == GCC_OK) {
    secs->ref[0].data = manifest;
    secs->ref[0].size = strlen(manifest);
    uint8_t *bytes;
    size_t size;
    s = gcc_bundle_pack_version(secs->ref, secs->n, version, &bytes, &size, d);
    if (s == GCC_OK) { /* what we write must read back */
      gcc_bundle *b;
      s = gcc_bundle_parse(bytes, size, source, &b, d);
      if (s != GCC_OK)
        d->status = s = GCC_ERR_INTERNAL;
      gcc_bundle_free(b);
    }
    if (s == GCC_OK) {
      *out = bytes;
      *out_size = size;
    } else {
      free(bytes);
    }
  }
  free(manifest);
  for (int i = 0; i < secs->n; i++)
    free(secs->own[i]);
  free(secs);
  gcc_graph_free(cg);
  gcc_graph_free(ig);
  return s;
}

/* A model file given where a bundle is expected (gcc-run, the C API). */
static int is_model_file(const uint8_t *bytes, size_t size) {
  gcc_model_format f = gcc_model_sniff(bytes, size);
  if (f == GCC_MODEL_FORMAT_ONNX)
    return 1;
  if (f != GCC_MODEL_FORMAT_GCC)
    return 0;
  Gcc__Model *m = gcc__model__unpack(NULL, size, bytes);
  int yes = m && m->has_format_version && m->graph;
  if (m)
    gcc__model__free_unpacked(m, NULL);
  return yes;
}

gcc_status gcc_bundle_open_bytes(const uint8_t *bytes, size_t size, const char *source,
                                 gcc_bundle **out, gcc_diag *d) {
  *out = NULL;
  if (!is_model_file(bytes, size))
    return gcc_bundle_parse(bytes, size, source, out, d);
  gcc_graph *m;
  GCC_TRY(gcc_model_open_memory(bytes, size, source, &m, NULL, d));
  gcc_export_options eo;
  memset(&eo, 0, sizeof eo); /* no architectures: CPU only, nothing for NVRTC */
  uint8_t *b;
  size_t n;
  gcc_status s = gcc_bundle_build(m, &eo, NULL, source, &b, &n, d);
  gcc_graph_free(m);
  if (s != GCC_OK)
    return s;
  s = gcc_bundle_parse(b, n, source, out, d);
  free(b);
  return s;
}

gcc_status gcc_bundle_open(const char *path, gcc_bundle **out, gcc_diag *d) {
  *out = NULL;
  uint8_t *buf;
  size_t n;
  GCC_TRY(gcc_read_file(path, GCC_BUNDLE_MAX_BYTES, &buf, &n, d));
  gcc_status s = gcc_bundle_open_bytes(buf, n, path, out, d);
  free(buf);
  return s;
}
