/* export.c - the inference graph of a trained model and its .gccx bundle
 * (deploy/bundle.h). */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/emit.h"
#include "codegen/kernel_cache.h"
#include "codegen/nvrtc.h"
#include "graph/graph.pb-c.h"
#include "graph/loader.h"
#include "graph/ops.h"
#include "deploy/export.h"
#include "deploy/bundle_internal.h"
#include "runtime/device.h"
#include "runtime/compile.h"
#include "runtime/placement_report.h"
#include "graph/util.h"

/* ---- the inference graph ---------------------------------------------------- */

gcc_status gcc_inference_graph(const gcc_graph *model, gcc_graph **out, gcc_diag *d) {
  *out = NULL;
  const gcc_training *t = &model->training;
  if (!t->present || !t->prediction || !t->input)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                        "%s: export needs a training spec naming the input and the prediction "
                        "(the logits)",
                        model->source);
  int pred = gcc_graph_find(model, t->prediction), in = gcc_graph_find(model, t->input);
  if (pred < 0 || in < 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_GRAPH, "%s: the training spec names '%s' or '%s', "
                        "which the graph lacks", model->source, t->prediction, t->input);
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
    int input = gcc_graph_find(g, t->input);
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
    s = gcc_graph_clone(g, &probe, d);
    if (s == GCC_OK) {
      s = gcc_graph_bind_batch(probe, 1, d);
      if (s == GCC_OK)
        s = gcc_infer_shapes(probe, d);
      const gcc_value *pv = &probe->values[gcc_graph_find(probe, g->values[logits].name)];
      if (s == GCC_OK && (pv->dtype != GCC_DT_FLOAT32 || pv->shape.ndim != 2))
        s = gcc_diag_set(d, GCC_ERR_INVALID_GRAPH,
                         "%s: the prediction '%s' must be float32 logits of shape (N, C) to "
                         "export a classifier",
                         model->source, t->prediction);
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

/* ---- export --------------------------------------------------------------- */

gcc_status gcc_export_parse_archs(const char *list, gcc_export_options *o, gcc_diag *d) {
  o->n_archs = 0;
  if (!list || !*list)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "--export-archs: empty list");
  const char *p = list;
  while (*p) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    char item[32];
    if (n == 0 || n >= sizeof item)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "--export-archs '%s': expected a comma-separated list like "
                          "sm_80,sm_90",
                          list);
    memcpy(item, p, n);
    item[n] = '\0';
    int v = 0, digits = 0, ok = strncmp(item, "sm_", 3) == 0;
    for (const char *q = item + 3; ok && *q; q++, digits++) {
      ok = *q >= '0' && *q <= '9';
      v = v * 10 + (*q - '0');
    }
    if (!ok || digits < 2 || digits > 3 || v <= 0)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "--export-archs: '%s' is not an architecture like sm_80 or sm_90", item);
    for (int i = 0; i < o->n_archs; i++)
      if (o->archs[i] == v)
        return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "--export-archs: %s is listed twice",
                            item);
    if (o->n_archs == GCC_BUNDLE_MAX_ARCHS)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "--export-archs: more than %d architectures", GCC_BUNDLE_MAX_ARCHS);
    gcc_status s = gcc_nvrtc_check_arch(v, d);
    if (s != GCC_OK)
      return gcc_diag_prefix(d, "--export-archs %s", item);
    o->archs[o->n_archs++] = v;
    p = e ? e + 1 : p + n;
    if (e && !*p)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "--export-archs '%s': trailing comma",
                          list);
  }
  for (int i = 1; i < o->n_archs; i++) /* ascending */
    for (int j = i; j > 0 && o->archs[j - 1] > o->archs[j]; j--) {
      int t = o->archs[j];
      o->archs[j] = o->archs[j - 1];
      o->archs[j - 1] = t;
    }
  return GCC_OK;
}

gcc_status gcc_export_parse_batch_sizes(const char *list, gcc_export_options *o, gcc_diag *d) {
  o->n_batch_sizes = 0;
  const char *p = list ? list : "";
  if (!*p)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "--export-batch-sizes: empty list");
  for (;;) {
    if (*p < '0' || *p > '9')
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "--export-batch-sizes '%s': expected a comma-separated list of "
                          "batch sizes like 1,1000",
                          list);
    const char *end = strchr(p, ',');
    if (!end)
      end = p + strlen(p);
    char entry[32];
    int64_t v = 0;
    int fits = (size_t)(end - p) < sizeof entry;
    if (fits) {
      memcpy(entry, p, (size_t)(end - p));
      entry[end - p] = '\0';
    }
    if (!fits || !gcc_parse_i64(entry, 1, INT32_MAX, &v))
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "--export-batch-sizes '%s': each batch size must be an integer in "
                          "[1, 2^31)",
                          list);
    for (int i = 0; i < o->n_batch_sizes; i++)
      if (o->batch_sizes[i] == v)
        return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                            "--export-batch-sizes: %lld is listed twice", (long long)v);
    if (o->n_batch_sizes == GCC_BUNDLE_MAX_BATCHES)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "--export-batch-sizes: more than %d batch sizes",
                          GCC_BUNDLE_MAX_BATCHES);
    o->batch_sizes[o->n_batch_sizes++] = v;
    if (!*end)
      break;
    p = end + 1;
  }
  for (int i = 1; i < o->n_batch_sizes; i++) /* ascending */
    for (int j = i; j > 0 && o->batch_sizes[j - 1] > o->batch_sizes[j]; j--) {
      int64_t t = o->batch_sizes[j];
      o->batch_sizes[j] = o->batch_sizes[j - 1];
      o->batch_sizes[j - 1] = t;
    }
  return GCC_OK;
}

/* Owned section bytes, freed at the end of the export. */
#define MAX_SECTIONS (8 + (3 * GCC_BUNDLE_MAX_ARCHS + 2) * GCC_BUNDLE_MAX_BATCHES)
typedef struct sections {
  gcc_bundle_section_ref ref[MAX_SECTIONS];
  void *own[MAX_SECTIONS];
  char names[MAX_SECTIONS][32];
  int n;
} sections;

static void add_section(sections *s, const char *name, void *data, size_t size, int owned) {
  snprintf(s->names[s->n], sizeof s->names[s->n], "%s", name);
  s->ref[s->n].name = s->names[s->n];
  s->ref[s->n].data = data;
  s->ref[s->n].size = size;
  s->own[s->n] = owned ? data : NULL;
  s->n++;
}

/* The graph (initializers without data) and the weights (a Graph of the
 * initializers with data) from one serialized Model. */
static gcc_status split_model(const gcc_graph *g, sections *secs, gcc_diag *d) {
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
  if (wbytes && had) {
    gcc__graph__pack(&w, wbytes);
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
  gcc__model__free_unpacked(m, NULL);
  if (!wbytes || !gbytes) {
    free(wbytes);
    free(gbytes);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (export)");
  }
  add_section(secs, "graph", gbytes, gsize, 1);
  add_section(secs, "weights", wbytes, wsize, 1);
  return GCC_OK;
}

/* Compiles the inference graph for device `dev` and `batch` rows and
 * returns the compiled graph and its JSON placement report. */
static gcc_status compile_for(const gcc_graph *ig, const gcc_device_info *devs, int n_devs,
                              int dev, int64_t batch, gcc_graph **cg, char **report,
                              gcc_diag *d) {
  gcc_options o = {0};
  o.mode = GCC_MODE_EVAL;
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

/* Per architecture and batch size: the CUDA plan's report, its kernels'
 * launch manifest and cubin; per batch size the PTX and the source of the
 * newest architecture. */
static gcc_status export_cuda(const gcc_graph *ig, const gcc_export_options *o,
                              const int64_t *batches, int n_batches, sections *secs,
                              gcc_diag *d) {
  gcc_status s = GCC_OK;
  for (int j = 0; j < n_batches && s == GCC_OK; j++) {
    int64_t batch = batches[j];
    char *source = NULL;
    for (int i = 0; i < o->n_archs && s == GCC_OK; i++) {
      int sm = o->archs[i];
      char arch[16], name[64];
      snprintf(arch, sizeof arch, "sm_%d", sm);
      gcc_device_info devs[2];
      gcc_device_info_cpu(&devs[0]);
      gcc_diag ignore = {0};
      if (gcc_device_info_from_arch(arch, 0, &devs[1], &ignore) != GCC_OK) {
        /* an architecture without a reference device: its compute
         * capability and the SM count of the largest part we describe
         * (grids only: every generated loop is grid-stride) */
        gcc_device_info_from_arch("sm_90", 0, &devs[1], &ignore);
        snprintf(devs[1].name, sizeof devs[1].name, "CUDA device (assumed from %s)", arch);
        devs[1].cc_major = sm / 10;
        devs[1].cc_minor = sm % 10;
      }
      gcc_graph *cg = NULL;
      char *report = NULL, *launches = NULL;
      gcc_kernel_set ks = {0};
      gcc_nvrtc_output nv = {0};
      int hit = 0;
      s = compile_for(ig, devs, 2, GCC_DEV_CUDA(0), batch, &cg, &report, d);
      if (s == GCC_OK)
        s = gcc_codegen_emit(cg, GCC_DEV_CUDA(0), devs[1].units, &ks, d);
      if (s == GCC_OK) {
        char program[256];
        snprintf(program, sizeof program, "%s inference kernels (%d, batch %" PRId64 ")",
                 ig->name, ks.n_kernels, batch);
        s = gcc_kernel_cache_compile(NULL, o->use_kernel_cache, ks.source, program, sm, &nv,
                                     &hit, d);
      }
      if (s == GCC_OK)
        s = gcc_codegen_manifest(cg, GCC_DEV_CUDA(0), arch, &ks, &launches, d);
      if (s == GCC_OK) {
        snprintf(name, sizeof name, "plan.%s.b%" PRId64, arch, batch);
        add_section(secs, name, report, strlen(report), 1);
        report = NULL;
        snprintf(name, sizeof name, "kernels.%s.b%" PRId64, arch, batch);
        add_section(secs, name, launches, strlen(launches), 1);
        launches = NULL;
        snprintf(name, sizeof name, "cubin.%s.b%" PRId64, arch, batch);
        add_section(secs, name, nv.cubin, nv.cubin_size, 1);
        nv.cubin = NULL;
        if (i == o->n_archs - 1) { /* the newest: its PTX runs on later GPUs */
          snprintf(name, sizeof name, "ptx.b%" PRId64, batch);
          add_section(secs, name, nv.ptx, nv.ptx_size, 1);
          nv.ptx = NULL;
          source = ks.source;
          ks.source = NULL;
        }
      } else {
        gcc_diag_prefix(d, "export for %s, batch %" PRId64, arch, batch);
      }
      free(report);
      free(launches);
      gcc_nvrtc_output_free(&nv);
      gcc_kernel_set_free(&ks);
      gcc_graph_free(cg);
    }
    if (s == GCC_OK && source) {
      char name[64];
      snprintf(name, sizeof name, "source.b%" PRId64, batch);
      add_section(secs, name, source, strlen(source), 1);
    } else {
      free(source);
    }
  }
  return s;
}

gcc_status gcc_export_bundle(const gcc_graph *model, const gcc_export_options *o,
                             const char *path, gcc_diag *d) {
  if (o->n_archs < 1 || o->n_archs > GCC_BUNDLE_MAX_ARCHS)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "export: %d architectures (1 to %d)",
                        o->n_archs, GCC_BUNDLE_MAX_ARCHS);
  static const int64_t default_batches[2] = {1, 1000};
  const int64_t *batches = o->n_batch_sizes ? o->batch_sizes : default_batches;
  int n_batches = o->n_batch_sizes ? o->n_batch_sizes : 2;
  if (n_batches < 0 || n_batches > GCC_BUNDLE_MAX_BATCHES)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "export: %d batch sizes (0 to %d)",
                        n_batches, GCC_BUNDLE_MAX_BATCHES);
  for (int j = 0; j < n_batches; j++)
    if (batches[j] < 1 || batches[j] > INT32_MAX || (j > 0 && batches[j] <= batches[j - 1]))
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "export: batch sizes must be ascending integers in [1, 2^31)");
  gcc_graph *ig;
  GCC_TRY(gcc_inference_graph(model, &ig, d));
  sections *secs = calloc(1, sizeof *secs);
  if (!secs) {
    gcc_graph_free(ig);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (export)");
  }
  add_section(secs, "manifest", NULL, 0, 0); /* filled last: it lists the others */
  gcc_status s = split_model(ig, secs, d);
  gcc_graph *cg = NULL; /* the CPU plan's graph: the signature's shapes */
  if (s == GCC_OK) {
    gcc_device_info cpu;
    gcc_device_info_cpu(&cpu);
    char *report = NULL;
    s = compile_for(ig, &cpu, 1, GCC_DEV_CPU, 1, &cg, &report, d);
    if (s == GCC_OK)
      add_section(secs, "plan.cpu", report, strlen(report), 1);
  }
  if (s == GCC_OK)
    s = export_cuda(ig, o, batches, n_batches, secs, d);

  char *manifest = NULL;
  if (s == GCC_OK) {
    json_t *m = json_object();
    json_object_set_new(m, "schema", json_string("gcc-train.bundle/1"));
    json_object_set_new(m, "format_version", json_integer(GCC_BUNDLE_FORMAT_VERSION));
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
    for (int i = 0; i < 2; i++) {
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
    snprintf(a, sizeof a, "compute_%d", o->archs[o->n_archs - 1]);
    json_object_set_new(m, "ptx", json_string(a));
    json_t *bj = json_array();
    for (int j = 0; j < n_batches; j++)
      json_array_append_new(bj, json_integer(batches[j]));
    json_object_set_new(m, "batch_sizes", bj);
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
    s = gcc_bundle_pack(secs->ref, secs->n, &bytes, &size, d);
    if (s == GCC_OK) { /* what we write must read back */
      gcc_bundle *b;
      s = gcc_bundle_parse(bytes, size, path, &b, d);
      if (s != GCC_OK)
        d->status = s = GCC_ERR_INTERNAL;
      gcc_bundle_free(b);
    }
    if (s == GCC_OK)
      s = gcc_write_file_atomic(path, bytes, size, d);
    free(bytes);
  }
  free(manifest);
  for (int i = 0; i < secs->n; i++)
    free(secs->own[i]);
  free(secs);
  gcc_graph_free(cg);
  gcc_graph_free(ig);
  return s;
}
