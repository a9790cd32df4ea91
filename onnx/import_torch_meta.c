/*
 * import_torch_meta.c - what PyTorch's dynamo exporter (torch.onnx.export,
 * dynamo=True) says about each initializer: the ValueInfoProto of an
 * initializer carries metadata_props (ONNX IR version 10, field 4) with
 * "pkg.torch.export.graph_signature.InputSpec.kind" = PARAMETER (an
 * nn.Parameter), BUFFER (a registered buffer: a mask, a running
 * statistic) or CONSTANT_TENSOR (a lifted constant). The schema compiled
 * here (ONNX 1.12) predates the field, so protobuf-c keeps it as an unknown
 * field, decoded here as the StringStringEntryProto it is.
 */
#include <stdio.h>
#include <string.h>

#include "onnx/import_internal.h"

#define TORCH_KIND_KEY            "pkg.torch.export.graph_signature.InputSpec.kind"
#define VALUE_INFO_METADATA_PROPS 4 /* ValueInfoProto.metadata_props (IR 10) */

/* The InputSpec.kind of `vi` (a PARAMETER, BUFFER, ... string copied into
 * out), "" when it has none. */
static void torch_kind(const Onnx__ValueInfoProto *vi, char *out, size_t cap) {
  out[0] = 0;
  const ProtobufCMessage *m = &vi->base;
  for (unsigned i = 0; i < m->n_unknown_fields; i++) {
    const ProtobufCMessageUnknownField *f = &m->unknown_fields[i];
    if (f->tag != VALUE_INFO_METADATA_PROPS || f->wire_type != PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED)
      continue;
    /* protobuf-c keeps a length-prefixed unknown field with its prefix (a
     * varint of the payload's length) */
    size_t at = 0, n = 0;
    for (int shift = 0; at < f->len && shift < 64; shift += 7) {
      n |= (size_t)(f->data[at] & 0x7f) << shift;
      if (!(f->data[at++] & 0x80))
        break;
    }
    if (n != f->len - at)
      continue; /* not the entry ONNX 1.16 defines: not the exporter's */
    Onnx__StringStringEntryProto *e =
        onnx__string_string_entry_proto__unpack(NULL, n, f->data + at);
    if (!e)
      continue;
    if (e->key && e->value && strcmp(e->key, TORCH_KIND_KEY) == 0)
      snprintf(out, cap, "%s", e->value);
    onnx__string_string_entry_proto__free_unpacked(e, NULL);
  }
}

gcc_status read_torch_kinds(imp *I, gcc_diag *d) {
  (void)d;
  const Onnx__GraphProto *gp = I->gp;
  for (int list = 0; list < 2; list++) {
    size_t n = list ? gp->n_input : gp->n_value_info;
    Onnx__ValueInfoProto **vis = list ? gp->input : gp->value_info;
    for (size_t i = 0; i < n; i++) {
      if (!vis[i]->name)
        continue;
      int k = imp_find(I, vis[i]->name);

      if (k < 0 || !I->v[k].is_init)
        continue;
      char kind[32];
      torch_kind(vis[i], kind, sizeof kind);

      ival *v = &I->v[k];
      if (strcmp(kind, "PARAMETER") == 0) {
        v->tied = 1;
      } else if (strcmp(kind, "BUFFER") == 0 || strcmp(kind, "CONSTANT_TENSOR") == 0) {
        v->trainable = 0;
        I->rep->n_torch_buffers++;
      }
    }
  }
  return GCC_OK;
}
