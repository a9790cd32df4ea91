/* bundle.c - the .gccx container: checked reading, the kernel image choice,
 * and the section writer used by export (deploy/export.c). */
#include "deploy/bundle.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.pb-c.h"
#include "graph/half.h"
#include "graph/loader.h"
#include "deploy/bundle.pb-c.h"
#include "deploy/bundle_internal.h"
#include "graph/util.h"

/* ---- SHA-256 --------------------------------------------------------------- */

int gcc_bundle_sha256(const char *name, const void *data, size_t size, uint8_t out[32]) {
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  unsigned len = 0;
  int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
           EVP_DigestUpdate(ctx, name, strlen(name) + 1) == 1 &&
           (size == 0 || EVP_DigestUpdate(ctx, data, size) == 1) &&
           EVP_DigestFinal_ex(ctx, out, &len) == 1 && len == 32;
  EVP_MD_CTX_free(ctx);
  return ok;
}

void gcc_bundle_hex(const uint8_t h[32], char out[65]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 32; i++) {
    out[2 * i] = digits[h[i] >> 4];
    out[2 * i + 1] = digits[h[i] & 15];
  }
  out[64] = '\0';
}

/* ---- the container --------------------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}
static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

gcc_status gcc_bundle_pack(const gcc_bundle_section_ref *secs, int n, uint8_t **bytes, size_t *size,
                           gcc_diag *d) {
  return gcc_bundle_pack_version(secs, n, GCC_BUNDLE_FORMAT_VERSION_MIN, bytes, size, d);
}

gcc_status gcc_bundle_pack_version(const gcc_bundle_section_ref *secs, int n, uint32_t version,
                                   uint8_t **bytes, size_t *size, gcc_diag *d) {
  *bytes = NULL;
  *size = 0;
  Gccx__Section *s = calloc((size_t)(n ? n : 1), sizeof *s);
  Gccx__Section **ptrs = calloc((size_t)(n ? n : 1), sizeof *ptrs);
  uint8_t(*sums)[32] = calloc((size_t)(n ? n : 1), 32);
  gcc_status st = GCC_OK;
  if (!s || !ptrs || !sums)
    st = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (bundle)");
  for (int i = 0; i < n && st == GCC_OK; i++) {
    gccx__section__init(&s[i]);
    s[i].name = (char *)secs[i].name;
    s[i].has_data = 1;
    s[i].data.data = (uint8_t *)secs[i].data;
    s[i].data.len = secs[i].size;
    if (!gcc_bundle_sha256(secs[i].name, secs[i].data, secs[i].size, sums[i]))
      st = gcc_diag_set(d, GCC_ERR_INTERNAL, "SHA-256 of bundle section '%s' failed", secs[i].name);
    s[i].has_sha256 = 1;
    s[i].sha256.data = sums[i];
    s[i].sha256.len = 32;
    ptrs[i] = &s[i];
  }
  if (st == GCC_OK) {
    Gccx__Bundle b = GCCX__BUNDLE__INIT;
    b.n_sections = (size_t)n;
    b.sections = ptrs;
    size_t p = gccx__bundle__get_packed_size(&b);
    uint8_t *buf = malloc(GCC_BUNDLE_HEADER_BYTES + p);
    if (!buf) {
      st = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory: the bundle needs %zu bytes",
                        GCC_BUNDLE_HEADER_BYTES + p);
    } else {
      memcpy(buf, GCC_BUNDLE_MAGIC, 8);
      put_u32(buf + 8, version);
      put_u32(buf + 12, 0);
      put_u64(buf + 16, p);
      gccx__bundle__pack(&b, buf + GCC_BUNDLE_HEADER_BYTES);
      *bytes = buf;
      *size = GCC_BUNDLE_HEADER_BYTES + p;
    }
  }
  free(s);
  free(ptrs);
  free(sums);
  return st;
}

/* ---- reading --------------------------------------------------------------- */

typedef struct section {
  char *name;
  uint8_t *data; /* NUL-terminated copy (so text sections are C strings) */
  size_t size;
} section;

struct gcc_bundle {
  char *source;
  section *secs;
  int n_secs;
  gcc_bundle_info info;
  json_t *manifest;
  gcc_graph *graph;
  uint32_t header_version; /* the format version in the file's header */
};

void gcc_bundle_free(gcc_bundle *b) {
  if (!b)
    return;
  for (int i = 0; i < b->n_secs; i++) {
    free(b->secs[i].name);
    free(b->secs[i].data);
  }
  free(b->secs);
  free(b->source);
  json_decref(b->manifest);
  gcc_graph_free(b->graph);
  free(b);
}

static const section *find_section(const gcc_bundle *b, const char *name) {
  for (int i = 0; i < b->n_secs; i++)
    if (strcmp(b->secs[i].name, name) == 0)
      return &b->secs[i];
  return NULL;
}

const gcc_bundle_info *gcc_bundle_get_info(const gcc_bundle *b) {
  return &b->info;
}
const gcc_graph *gcc_bundle_graph(const gcc_bundle *b) {
  return b->graph;
}

gcc_status gcc_bundle_section(const gcc_bundle *b, const char *name, const void **data,
                              size_t *size, gcc_diag *d) {
  const section *s = find_section(b, name);
  if (!s)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s: the bundle has no section '%s'",
                        b->source, name);
  *data = s->data;
  *size = s->size;
  return GCC_OK;
}

static gcc_status bad(gcc_bundle *b, gcc_diag *d, const char *fmt, const char *what) {
  return gcc_diag_set(d, GCC_ERR_PARSE, "%s: %s%s", b->source, fmt, what ? what : "");
}

/* "sm_90" -> 90, "compute_90" -> 90 with the given prefix; 0 if malformed. */
static int parse_arch(const char *s, const char *prefix) {
  size_t n = strlen(prefix);
  if (!s || strncmp(s, prefix, n) != 0)
    return 0;
  int v = 0, digits = 0;
  for (const char *p = s + n; *p; p++) {
    if (*p < '0' || *p > '9' || ++digits > 4)
      return 0;
    v = v * 10 + (*p - '0');
  }
  return digits >= 2 && v > 0 ? v : 0;
}

static gcc_dtype dtype_from_name(const char *s) {
  for (int t = 1; t < GCC_DT_COUNT; t++)
    if (s && strcmp(s, gcc_dtype_name((gcc_dtype)t)) == 0)
      return (gcc_dtype)t;
  return GCC_DT_UNDEFINED;
}

static gcc_status read_tensor(gcc_bundle *b, json_t *j, const char *what, gcc_bundle_tensor *t,
                              gcc_diag *d) {
  json_t *name = json_object_get(j, "name"), *dt = json_object_get(j, "dtype"),
         *shape = json_object_get(j, "shape");
  if (!json_is_string(name) || !json_is_string(dt) || !json_is_array(shape) ||
      json_array_size(shape) < 1 || json_array_size(shape) > GCC_MAX_DIMS)
    return bad(b, d, "manifest: malformed entry in ", what);
  t->name = json_string_value(name);
  t->dtype = dtype_from_name(json_string_value(dt));
  if (t->dtype != GCC_DT_FLOAT32)
    return bad(b, d, "manifest: dtype other than float32 in ", what);
  t->shape.ndim = (int)json_array_size(shape);
  for (int i = 0; i < t->shape.ndim; i++) {
    json_t *v = json_array_get(shape, (size_t)i);
    if (!json_is_integer(v) ||
        (json_integer_value(v) <= 0 && !(i == 0 && json_integer_value(v) == -1)))
      return bad(b, d, "manifest: bad shape in ", what);
    t->shape.dims[i] = json_integer_value(v);
  }
  return GCC_OK;
}

static gcc_status read_floats(gcc_bundle *b, json_t *a, float *out, int *n, const char *what,
                              gcc_diag *d) {
  if (!json_is_array(a) || json_array_size(a) > GCC_MAX_CHANNELS)
    return bad(b, d, "manifest: malformed normalization ", what);
  *n = (int)json_array_size(a);
  for (int i = 0; i < *n; i++) {
    json_t *v = json_array_get(a, (size_t)i);
    if (!json_is_number(v))
      return bad(b, d, "manifest: malformed normalization ", what);
    out[i] = (float)json_number_value(v);
  }
  return GCC_OK;
}

/* The manifest: its fields into b->info, and the section list checked
 * against the sections present. */
static gcc_status read_manifest(gcc_bundle *b, gcc_diag *d) {
  const section *ms = find_section(b, "manifest");
  if (!ms)
    return bad(b, d, "missing section 'manifest'", NULL);
  json_error_t err;
  b->manifest = json_loadb((const char *)ms->data, ms->size, JSON_REJECT_DUPLICATES, &err);
  json_t *m = b->manifest;
  if (!json_is_object(m))
    return gcc_diag_set(d, GCC_ERR_PARSE, "%s: section 'manifest' is not JSON: %s", b->source,
                        m ? "not an object" : err.text);
  json_t *schema = json_object_get(m, "schema");
  if (!json_is_string(schema) || strcmp(json_string_value(schema), "gcc-train.bundle/1") != 0)
    return bad(b, d, "manifest: schema is not gcc-train.bundle/1", NULL);
  json_t *fv = json_object_get(m, "format_version");
  if (!json_is_integer(fv))
    return bad(b, d, "manifest: missing format_version", NULL);
  if (json_integer_value(fv) < GCC_BUNDLE_FORMAT_VERSION_MIN ||
      json_integer_value(fv) > GCC_BUNDLE_FORMAT_VERSION)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: manifest: bundle format version %" PRId64 ", but this gcc-train (%s) "
                        "reads versions %u to %u",
                        b->source, (int64_t)json_integer_value(fv), GCC_TRAIN_VERSION,
                        GCC_BUNDLE_FORMAT_VERSION_MIN, GCC_BUNDLE_FORMAT_VERSION);
  if ((uint64_t)json_integer_value(fv) != b->header_version)
    return gcc_diag_set(d, GCC_ERR_PARSE,
                        "%s: manifest: format_version %" PRId64 " differs from the header's %u",
                        b->source, (int64_t)json_integer_value(fv), b->header_version);
  b->info.format_version = b->header_version;
  b->info.precision = GCC_PRECISION_FP32;
  if (b->header_version >= 2) { /* the precision its plans compute in */
    json_t *p = json_object_get(m, "precision");
    int prec = json_is_string(p) ? gcc_precision_lookup(json_string_value(p)) : -1;
    if (prec != GCC_PRECISION_FP32 && prec != GCC_PRECISION_BF16 && prec != GCC_PRECISION_FP16)
      return bad(b, d,
                 "manifest: a version 2 bundle needs \"precision\": \"fp32\", \"bf16\" "
                 "or \"fp16\"",
                 NULL);
    b->info.precision = prec;
  }
  const char *keys[3] = {"gcc_train_version", "created", "model"};
  const char **dst[3] = {&b->info.gcc_train_version, &b->info.created, &b->info.model};
  for (int i = 0; i < 3; i++) {
    json_t *v = json_object_get(m, keys[i]);
    if (!json_is_string(v))
      return bad(b, d, "manifest: missing string ", keys[i]);
    *dst[i] = json_string_value(v);
  }
  json_t *ins = json_object_get(m, "inputs"), *outs = json_object_get(m, "outputs");
  if (!json_is_array(ins) || json_array_size(ins) != 1)
    return bad(b, d, "manifest: 'inputs' must list exactly one input", NULL);
  b->info.kind = GCC_BUNDLE_CLASSIFIER; /* versions 1 and 2 */
  if (b->header_version >= 3) {
    json_t *k = json_object_get(m, "kind");
    const char *ks = json_is_string(k) ? json_string_value(k) : "";
    if (strcmp(ks, "tensor") == 0)
      b->info.kind = GCC_BUNDLE_TENSOR;
    else if (strcmp(ks, "classifier") != 0)
      return bad(b, d, "manifest: a version 3 bundle needs \"kind\": \"classifier\" or \"tensor\"",
                 NULL);
  }
  b->info.n_outputs = b->info.kind == GCC_BUNDLE_TENSOR ? 1 : 2;
  if (!json_is_array(outs) || json_array_size(outs) != (size_t)b->info.n_outputs)
    return bad(b, d,
               b->info.kind == GCC_BUNDLE_TENSOR
                   ? "manifest: 'outputs' of a tensor bundle must list exactly one output"
                   : "manifest: 'outputs' must list logits and probabilities",
               NULL);
  GCC_TRY(read_tensor(b, json_array_get(ins, 0), "inputs", &b->info.input, d));
  for (int i = 0; i < b->info.n_outputs; i++)
    GCC_TRY(read_tensor(b, json_array_get(outs, (size_t)i), "outputs", &b->info.outputs[i], d));
  if (b->info.kind == GCC_BUNDLE_TENSOR && b->info.outputs[0].shape.dims[0] != -1)
    return bad(b, d, "manifest: a tensor bundle's output needs the batch (-1) as dim 0", NULL);
  if (b->info.kind == GCC_BUNDLE_CLASSIFIER &&
      (strcmp(b->info.outputs[0].name, "logits") != 0 ||
       strcmp(b->info.outputs[1].name, "probabilities") != 0))
    return bad(b, d, "manifest: the outputs must be logits and probabilities", NULL);
  json_t *norm = json_object_get(m, "normalization");
  if (!json_is_object(norm))
    return bad(b, d, "manifest: missing normalization", NULL);
  GCC_TRY(read_floats(b, json_object_get(norm, "mean"), b->info.mean, &b->info.n_mean, "mean", d));
  GCC_TRY(read_floats(b, json_object_get(norm, "std"), b->info.std, &b->info.n_std, "std", d));
  for (int i = 0; i < b->info.n_std; i++)
    if (!(b->info.std[i] > 0.0f))
      return bad(b, d, "manifest: normalization std must be > 0", NULL);
  json_t *archs = json_object_get(m, "cubin_archs");
  if (!json_is_array(archs) || json_array_size(archs) > GCC_BUNDLE_MAX_ARCHS)
    return bad(b, d, "manifest: malformed cubin_archs", NULL);
  b->info.n_cubin_archs = (int)json_array_size(archs);
  for (int i = 0; i < b->info.n_cubin_archs; i++) {
    int a = parse_arch(json_string_value(json_array_get(archs, (size_t)i)), "sm_");
    if (!a || (i > 0 && a <= b->info.cubin_archs[i - 1]))
      return bad(b, d, "manifest: malformed cubin_archs", NULL);
    b->info.cubin_archs[i] = a;
  }
  json_t *batches = json_object_get(m, "batch_sizes");
  if (!json_is_array(batches) || json_array_size(batches) > GCC_BUNDLE_MAX_BATCHES)
    return bad(b, d, "manifest: malformed batch_sizes", NULL);
  b->info.n_batch_sizes = (int)json_array_size(batches);
  for (int i = 0; i < b->info.n_batch_sizes; i++) {
    json_t *v = json_array_get(batches, (size_t)i);
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > INT32_MAX ||
        (i > 0 && json_integer_value(v) <= b->info.batch_sizes[i - 1]))
      return bad(b, d, "manifest: malformed batch_sizes", NULL);
    b->info.batch_sizes[i] = json_integer_value(v);
  }
  if (b->info.n_cubin_archs > 0 && b->info.n_batch_sizes == 0)
    return bad(b, d, "manifest: cubins without batch_sizes", NULL);
  json_t *ptx = json_object_get(m, "ptx");
  if (json_is_string(ptx)) {
    b->info.ptx_arch = parse_arch(json_string_value(ptx), "compute_");
    if (!b->info.ptx_arch)
      return bad(b, d, "manifest: malformed ptx", NULL);
  } else if (!json_is_null(ptx)) {
    return bad(b, d, "manifest: missing ptx (a string or null)", NULL);
  }

  /* the section list: every section present is listed with its size and
   * SHA-256, and every listed one is present */
  json_t *list = json_object_get(m, "sections");
  if (!json_is_array(list))
    return bad(b, d, "manifest: missing the section list", NULL);
  char *listed = calloc((size_t)b->n_secs + 1, 1);
  if (!listed)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (bundle)");
  gcc_status st = GCC_OK;
  for (size_t i = 0; i < json_array_size(list) && st == GCC_OK; i++) {
    json_t *e = json_array_get(list, i);
    json_t *nm = json_object_get(e, "name"), *sz = json_object_get(e, "bytes"),
           *sh = json_object_get(e, "sha256");
    if (!json_is_string(nm) || !json_is_integer(sz) || !json_is_string(sh)) {
      st = bad(b, d, "manifest: malformed section list", NULL);
      break;
    }
    const section *s = find_section(b, json_string_value(nm));
    if (!s) {
      st = gcc_diag_set(d, GCC_ERR_PARSE, "%s: missing section '%s' (listed in the manifest)",
                        b->source, json_string_value(nm));
      break;
    }
    uint8_t h[32];
    char hex[65];
    if (!gcc_bundle_sha256(s->name, s->data, s->size, h)) {
      st = gcc_diag_set(d, GCC_ERR_INTERNAL, "%s: SHA-256 failed", b->source);
      break;
    }
    gcc_bundle_hex(h, hex);
    if ((uint64_t)json_integer_value(sz) != s->size || strcmp(hex, json_string_value(sh)) != 0) {
      st = gcc_diag_set(d, GCC_ERR_PARSE,
                        "%s: section '%s' (%zu bytes, SHA-256 %.16s...) differs from the "
                        "manifest's (%" PRId64 " bytes, SHA-256 %.16s...)",
                        b->source, s->name, s->size, hex, (int64_t)json_integer_value(sz),
                        json_string_value(sh));
      break;
    }
    int idx = (int)(s - b->secs);
    if (listed[idx]) {
      st = gcc_diag_set(d, GCC_ERR_PARSE, "%s: manifest: section '%s' listed twice", b->source,
                        s->name);
      break;
    }
    listed[idx] = 1;
  }
  for (int i = 0; i < b->n_secs && st == GCC_OK; i++)
    if (!listed[i] && strcmp(b->secs[i].name, "manifest") != 0)
      st = gcc_diag_set(d, GCC_ERR_PARSE, "%s: section '%s' is not listed in the manifest",
                        b->source, b->secs[i].name);
  free(listed);
  GCC_TRY(st);

  /* what this reader needs */
  const char *req[] = {"graph", "weights", "plan.cpu"};
  for (int i = 0; i < 3; i++)
    if (!find_section(b, req[i]))
      return gcc_diag_set(d, GCC_ERR_PARSE, "%s: missing section '%s'", b->source, req[i]);
  for (int j = 0; j < b->info.n_batch_sizes; j++) {
    int64_t n = b->info.batch_sizes[j];
    char name[64];
    for (int i = 0; i < b->info.n_cubin_archs; i++) {
      const char *kinds[3] = {"cubin", "kernels", "plan"};
      for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "%s.sm_%d.b%" PRId64, kinds[k], b->info.cubin_archs[i], n);
        if (!find_section(b, name))
          return gcc_diag_set(d, GCC_ERR_PARSE, "%s: missing section '%s'", b->source, name);
      }
    }
    snprintf(name, sizeof name, "ptx.b%" PRId64, n);
    if (b->info.ptx_arch && !find_section(b, name))
      return gcc_diag_set(d, GCC_ERR_PARSE, "%s: missing section '%s'", b->source, name);
  }
  return GCC_OK;
}

/* Version 2: the manifest's "weights" summary agrees with the weights
 * section (as read_graph counted it). */
static gcc_status check_weights_summary(gcc_bundle *b, gcc_diag *d) {
  json_t *w = json_object_get(b->manifest, "weights");
  json_t *dt = json_object_get(w, "dtype"), *by = json_object_get(w, "bytes"),
         *fb = json_object_get(w, "float32_bytes"), *n16 = json_object_get(w, "tensors_16bit");
  if (!json_is_object(w) || !json_is_string(dt) || !json_is_integer(by) || !json_is_integer(fb) ||
      !json_is_integer(n16))
    return bad(b, d, "manifest: malformed \"weights\" (dtype, bytes, float32_bytes, tensors_16bit)",
               NULL);
  gcc_dtype want =
      b->info.n_weights_16bit ? gcc_precision_dtype(b->info.precision) : GCC_DT_FLOAT32;
  if (strcmp(json_string_value(dt), gcc_dtype_name(want)) != 0 ||
      (uint64_t)json_integer_value(by) != b->info.weight_bytes ||
      (uint64_t)json_integer_value(fb) != b->info.weight_bytes_fp32 ||
      json_integer_value(n16) != b->info.n_weights_16bit)
    return gcc_diag_set(d, GCC_ERR_PARSE,
                        "%s: manifest: \"weights\" says %s, %" PRId64 " bytes, %" PRId64
                        " tensors in 16 bits; section 'weights' has %s, %" PRIu64 " bytes, %d",
                        b->source, json_string_value(dt), (int64_t)json_integer_value(by),
                        (int64_t)json_integer_value(n16), gcc_dtype_name(want),
                        b->info.weight_bytes, b->info.n_weights_16bit);
  return GCC_OK;
}

/* graph + weights -> one Model -> the loader (which checks everything a
 * model file must satisfy). */
static gcc_status read_graph(gcc_bundle *b, gcc_diag *d) {
  const section *gs = find_section(b, "graph"), *ws = find_section(b, "weights");
  Gcc__Model *m = gcc__model__unpack(NULL, gs->size, gs->data);
  Gcc__Graph *w = gcc__graph__unpack(NULL, ws->size, ws->data);
  gcc_status st = GCC_OK;
  if (!m || !m->graph)
    st = bad(b, d, "section 'graph' is not a gcc Model", NULL);
  else if (!w)
    st = bad(b, d, "section 'weights' is not a gcc Graph", NULL);
  else if (w->n_initializers != m->graph->n_initializers)
    st = bad(b, d, "section 'weights' does not match the graph's initializers", NULL);
  ProtobufCBinaryData *saved = NULL;
  protobuf_c_boolean *saved_has = NULL;
  size_t n = st == GCC_OK ? w->n_initializers : 0;
  if (st == GCC_OK) {
    saved = calloc(n + 1, sizeof *saved);
    saved_has = calloc(n + 1, sizeof *saved_has);
    if (!saved || !saved_has)
      st = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (bundle)");
  }
  /* a 16-bit weight (version 2): widened to float32 for the loader */
  gcc_dtype low = gcc_precision_dtype(b->info.precision);
  float **wide = NULL;
  if (st == GCC_OK && !(wide = calloc(n + 1, sizeof *wide)))
    st = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (bundle)");
  size_t swapped = 0;
  for (size_t i = 0; i < n && st == GCC_OK; i++) {
    Gcc__Tensor *t = m->graph->initializers[i], *wt = w->initializers[i];
    int half = low != GCC_DT_FLOAT32 && (int)wt->dtype == (int)low &&
               t->dtype == GCC__DATA_TYPE__DT_FLOAT32;
    int same_dims = t->n_dims == wt->n_dims;
    for (size_t k = 0; same_dims && k < t->n_dims; k++)
      same_dims = t->dims[k] == wt->dims[k];
    if (!t->name || !wt->name || strcmp(t->name, wt->name) != 0 || !same_dims ||
        (t->dtype != wt->dtype && !half) || !wt->has_raw_data) {
      st = gcc_diag_set(
          d, GCC_ERR_PARSE,
          "%s: section 'weights': tensor %zu ('%s'%s%s) does not match the graph's "
          "initializer '%s'%s",
          b->source, i, wt->name ? wt->name : "", wt->dtype != t->dtype ? ", dtype " : "",
          wt->dtype != t->dtype && wt->dtype >= 0 && (int)wt->dtype < (int)GCC_DT_COUNT
              ? gcc_dtype_name((gcc_dtype)wt->dtype)
              : "",
          t->name ? t->name : "",
          wt->dtype != t->dtype && b->info.precision == GCC_PRECISION_FP32
              ? " (a float32 bundle has no 16-bit weights)"
              : "");
      break;
    }
    uint64_t numel = 1;
    for (size_t k = 0; k < t->n_dims && numel; k++)
      numel = t->dims[k] > 0 && (uint64_t)t->dims[k] <= (UINT64_MAX >> 3) / numel
                  ? numel * (uint64_t)t->dims[k]
                  : 0;
    if (half && (numel == 0 || wt->raw_data.len != 2 * numel)) {
      st = gcc_diag_set(d, GCC_ERR_PARSE,
                        "%s: section 'weights': %s tensor '%s' has %zu bytes, not 2 per element "
                        "(%" PRIu64 " elements)",
                        b->source, gcc_dtype_name(low), wt->name, wt->raw_data.len, numel);
      break;
    }
    b->info.n_weight_tensors++;
    b->info.weight_bytes += wt->raw_data.len;
    b->info.weight_bytes_fp32 += half ? 2 * (uint64_t)wt->raw_data.len : wt->raw_data.len;
    saved[i] = t->raw_data;
    saved_has[i] = t->has_raw_data;
    t->raw_data = wt->raw_data;
    t->has_raw_data = 1;
    swapped = i + 1;
    if (half) {
      b->info.n_weights_16bit++;
      if (!(wide[i] = malloc((size_t)numel * sizeof(float)))) {
        st = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (bundle weights)");
        break;
      }
      const uint8_t *h = wt->raw_data.data;
      for (uint64_t k = 0; k < numel; k++) { /* little-endian, exact */
        uint16_t u = (uint16_t)(h[2 * k] | h[2 * k + 1] << 8);
        wide[i][k] = low == GCC_DT_BFLOAT16 ? gcc_bf16_to_f32(u) : gcc_f16_to_f32(u);
      }
      t->raw_data.data = (uint8_t *)wide[i];
      t->raw_data.len = (size_t)numel * sizeof(float);
    }
  }
  uint8_t *bytes = NULL;
  size_t size = 0;
  if (st == GCC_OK) {
    size = gcc__model__get_packed_size(m);
    bytes = malloc(size ? size : 1);
    if (!bytes)
      st = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (bundle)");
    else
      gcc__model__pack(m, bytes);
  }
  for (size_t i = 0; i < swapped; i++) { /* give the messages their own buffers back */
    m->graph->initializers[i]->raw_data = saved[i];
    m->graph->initializers[i]->has_raw_data = saved_has[i];
  }
  free(saved);
  free(saved_has);
  for (size_t i = 0; wide && i < n; i++)
    free(wide[i]);
  free(wide);
  if (m)
    gcc__model__free_unpacked(m, NULL);
  if (w)
    gcc__graph__free_unpacked(w, NULL);
  if (st == GCC_OK) {
    char src[4200];
    snprintf(src, sizeof src, "%s (section graph)", b->source);
    st = gcc_model_parse(bytes, size, src, &b->graph, d);
    if (st != GCC_OK)
      d->status = st = GCC_ERR_PARSE;
  }
  free(bytes);
  GCC_TRY(st);

  /* the graph agrees with the manifest's signature */
  const gcc_graph *g = b->graph;
  if (g->n_inputs != 1 || strcmp(g->values[g->inputs[0]].name, b->info.input.name) != 0 ||
      !gcc_shape_equal(&g->values[g->inputs[0]].shape, &b->info.input.shape) ||
      g->values[g->inputs[0]].dtype != GCC_DT_FLOAT32)
    return bad(b, d, "the graph's input differs from the manifest's", NULL);
  if (g->n_outputs != b->info.n_outputs)
    return bad(b, d, "the graph's outputs differ from the manifest's", NULL);
  for (int i = 0; i < g->n_outputs; i++)
    if (strcmp(g->values[g->outputs[i]].name, b->info.outputs[i].name) != 0)
      return bad(b, d, "the graph's outputs differ from the manifest's", NULL);
  return b->header_version >= 2 ? check_weights_summary(b, d) : GCC_OK;
}

gcc_status gcc_bundle_parse(const uint8_t *bytes, size_t size, const char *source, gcc_bundle **out,
                            gcc_diag *d) {
  *out = NULL;
  gcc_bundle *b = calloc(1, sizeof *b);
  if (!b || !(b->source = strdup(source ? source : "<memory>"))) {
    free(b);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (bundle)");
  }
  gcc_status st = GCC_OK;
  if (size < GCC_BUNDLE_HEADER_BYTES) {
    st = gcc_diag_set(d, GCC_ERR_PARSE,
                      "%s: not a .gccx bundle: %zu bytes, shorter than the %d-byte header "
                      "(truncated?)",
                      b->source, size, GCC_BUNDLE_HEADER_BYTES);
  } else if (memcmp(bytes, GCC_BUNDLE_MAGIC, 8) != 0) {
    st = gcc_diag_set(d, GCC_ERR_PARSE, "%s: not a .gccx bundle (wrong magic bytes)", b->source);
  } else if (get_u32(bytes + 8) < GCC_BUNDLE_FORMAT_VERSION_MIN ||
             get_u32(bytes + 8) > GCC_BUNDLE_FORMAT_VERSION) {
    st = gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                      "%s: bundle format version %u, but this gcc-train (%s) reads versions %u "
                      "to %u%s",
                      b->source, get_u32(bytes + 8), GCC_TRAIN_VERSION,
                      GCC_BUNDLE_FORMAT_VERSION_MIN, GCC_BUNDLE_FORMAT_VERSION,
                      get_u32(bytes + 8) > GCC_BUNDLE_FORMAT_VERSION
                          ? ": re-export it with this version, or use a newer gcc-run"
                          : "");
  } else if (get_u32(bytes + 12) != 0) {
    st = gcc_diag_set(d, GCC_ERR_PARSE, "%s: corrupt bundle header (reserved word is %u, not 0)",
                      b->source, get_u32(bytes + 12));
  } else if (get_u64(bytes + 16) != size - GCC_BUNDLE_HEADER_BYTES) {
    uint64_t want = get_u64(bytes + 16);
    st = gcc_diag_set(d, GCC_ERR_PARSE,
                      "%s: the header promises a %" PRIu64 "-byte payload but the file has %zu "
                      "bytes after the header (%s)",
                      b->source, want, size - GCC_BUNDLE_HEADER_BYTES,
                      want > size - GCC_BUNDLE_HEADER_BYTES ? "truncated" : "trailing bytes");
  }
  if (st == GCC_OK)
    b->header_version = get_u32(bytes + 8);
  Gccx__Bundle *pb = NULL;
  if (st == GCC_OK) {
    pb =
        gccx__bundle__unpack(NULL, size - GCC_BUNDLE_HEADER_BYTES, bytes + GCC_BUNDLE_HEADER_BYTES);
    if (!pb)
      st = gcc_diag_set(d, GCC_ERR_PARSE, "%s: corrupt bundle: the payload is not a gccx.Bundle",
                        b->source);
  }
  if (st == GCC_OK) {
    b->secs = calloc(pb->n_sections + 1, sizeof *b->secs);
    if (!b->secs)
      st = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (bundle)");
  }
  for (size_t i = 0; st == GCC_OK && i < pb->n_sections; i++) {
    const Gccx__Section *s = pb->sections[i];
    if (!s->name || !s->name[0]) {
      st = gcc_diag_set(d, GCC_ERR_PARSE, "%s: corrupt bundle: section %zu has no name", b->source,
                        i);
      break;
    }
    if (!s->has_sha256 || s->sha256.len != 32) {
      st = gcc_diag_set(d, GCC_ERR_PARSE, "%s: section '%s' has no SHA-256", b->source, s->name);
      break;
    }
    const uint8_t *data = s->has_data ? s->data.data : NULL;
    size_t len = s->has_data ? s->data.len : 0;
    uint8_t h[32];
    if (!gcc_bundle_sha256(s->name, data, len, h)) {
      st = gcc_diag_set(d, GCC_ERR_INTERNAL, "%s: SHA-256 failed", b->source);
      break;
    }
    if (memcmp(h, s->sha256.data, 32) != 0) {
      st = gcc_diag_set(d, GCC_ERR_PARSE,
                        "%s: section '%s' is corrupt: its SHA-256 does not match (%zu bytes)",
                        b->source, s->name, len);
      break;
    }
    if (find_section(b, s->name)) {
      st = gcc_diag_set(d, GCC_ERR_PARSE, "%s: section '%s' appears twice", b->source, s->name);
      break;
    }
    section *o = &b->secs[b->n_secs];
    o->name = strdup(s->name);
    o->data = malloc(len + 1);
    if (!o->name || !o->data) {
      free(o->name);
      free(o->data);
      st = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (bundle)");
      break;
    }
    if (len)
      memcpy(o->data, data, len);
    o->data[len] = 0;
    o->size = len;
    b->n_secs++;
  }
  if (pb)
    gccx__bundle__free_unpacked(pb, NULL);
  if (st == GCC_OK)
    st = read_manifest(b, d);
  if (st == GCC_OK)
    st = read_graph(b, d);
  if (st != GCC_OK) {
    gcc_bundle_free(b);
    return st;
  }
  *out = b;
  return GCC_OK;
}

gcc_status gcc_bundle_read(const char *path, gcc_bundle **out, gcc_diag *d) {
  *out = NULL;
  uint8_t *buf;
  size_t n;
  GCC_TRY(gcc_read_file(path, GCC_BUNDLE_MAX_BYTES, &buf, &n, d));
  gcc_status st = gcc_bundle_parse(buf, n, path, out, d);
  free(buf);
  return st;
}

/* ---- the kernel image ------------------------------------------------------ */

static void arch_list(char *buf, size_t cap, const int *archs, int n) {
  size_t o = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && o < cap; i++)
    o += (size_t)snprintf(buf + o, cap - o, "%ssm_%d", i ? ", " : "", archs[i]);
}

gcc_status gcc_kernel_image_select(const int *cubin_archs, int n_cubins, int ptx_arch,
                                   int device_arch, const char *device, gcc_kernel_image *out,
                                   gcc_diag *d) {
  if (device_arch <= 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "kernel image: device architecture %d is not a compute capability",
                        device_arch);
  int dev_major = device_arch / 10, dev_minor = device_arch % 10, best = -1;
  for (int i = 0; i < n_cubins; i++) {
    int a = cubin_archs[i];
    if (a / 10 == dev_major && a % 10 <= dev_minor && (best < 0 || a > cubin_archs[best]))
      best = i;
  }
  if (best >= 0) {
    out->kind = GCC_IMAGE_CUBIN;
    out->arch = cubin_archs[best];
    return GCC_OK;
  }
  if (ptx_arch > 0 && ptx_arch <= device_arch) {
    out->kind = GCC_IMAGE_PTX;
    out->arch = ptx_arch;
    return GCC_OK;
  }
  char have[256], ptx[64];
  arch_list(have, sizeof have, cubin_archs, n_cubins);
  if (ptx_arch > 0)
    snprintf(ptx, sizeof ptx, "PTX for compute_%d", ptx_arch);
  else
    snprintf(ptx, sizeof ptx, "no PTX");
  char why_ptx[128];
  if (ptx_arch > 0)
    snprintf(why_ptx, sizeof why_ptx, "PTX for compute_%d needs sm_%d or newer", ptx_arch,
             ptx_arch);
  else
    snprintf(why_ptx, sizeof why_ptx, "there is no PTX to JIT-compile");
  return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                      "bundle has %s%s and %s; device %s is sm_%d: no cubin for sm_%dx with a "
                      "minor <= %d, and %s. Re-export with --export-archs including sm_%d",
                      n_cubins ? "cubin for " : "no cubin", have, ptx,
                      device && device[0] ? device : "?", device_arch, dev_major, dev_minor,
                      why_ptx, device_arch);
}

int64_t gcc_bundle_batch_for(const gcc_bundle *b, int64_t rows) {
  for (int i = 0; i < b->info.n_batch_sizes; i++)
    if (b->info.batch_sizes[i] >= rows)
      return b->info.batch_sizes[i];
  return 0;
}

gcc_status gcc_bundle_kernel_image(const gcc_bundle *b, int device_arch, int64_t batch,
                                   const char *device, gcc_kernel_image *img, const void **image,
                                   size_t *image_size, const char **launches, gcc_diag *d) {
  int known = 0;
  char list[256] = "";
  size_t o = 0;
  for (int i = 0; i < b->info.n_batch_sizes; i++) {
    known |= b->info.batch_sizes[i] == batch;
    if (o < sizeof list)
      o += (size_t)snprintf(list + o, sizeof list - o, "%s%" PRId64, i ? ", " : "",
                            b->info.batch_sizes[i]);
  }
  if (b->info.n_cubin_archs == 0 && b->info.ptx_arch == 0)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: no CUDA kernels (a CPU-only bundle, such as the one made from a "
                        "model file given instead of a bundle); for a GPU, export one with "
                        "gcc-train MODEL --export OUT.gccx",
                        b->source);
  if (!known)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: the bundle has CUDA kernels for batch sizes %s, not %" PRId64
                        " (pad the batch to one of them, or re-export with "
                        "--export-batch-sizes)",
                        b->source, list[0] ? list : "(none)", batch);
  GCC_TRY(gcc_kernel_image_select(b->info.cubin_archs, b->info.n_cubin_archs, b->info.ptx_arch,
                                  device_arch, device, img, d));
  char name[64], kname[64];
  if (img->kind == GCC_IMAGE_CUBIN)
    snprintf(name, sizeof name, "cubin.sm_%d.b%" PRId64, img->arch, batch);
  else
    snprintf(name, sizeof name, "ptx.b%" PRId64, batch);
  /* the PTX comes from the newest architecture's compilation: its launch
   * manifest is that architecture's */
  snprintf(kname, sizeof kname, "kernels.sm_%d.b%" PRId64, img->arch, batch);
  const section *s = find_section(b, name), *k = find_section(b, kname);
  if (!s || !k)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "%s: section '%s' or '%s' vanished", b->source, name,
                        kname);
  *image = s->data;
  *image_size = s->size;
  *launches = (const char *)k->data;
  return GCC_OK;
}
