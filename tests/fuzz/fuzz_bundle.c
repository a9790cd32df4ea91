/* libFuzzer harness: .gccx bundles (gcc_bundle_parse, deploy/bundle.h).
 * Two passes per input: as is (header, sizes, checksums first), and with
 * every section's SHA-256 and the manifest's section list (sizes and
 * checksums) recomputed and the header's format version kept, so that the
 * fuzzer also reaches the manifest, graph and (version 2) 16-bit weight
 * checks behind them. Built and run by tools/fuzz.sh. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "deploy/bundle.h"
#include "deploy/bundle.pb-c.h"
#include "deploy/bundle_internal.h"

/* The bundle in `data` repacked with consistent checksums; 0 if its
 * container does not parse (the first pass covers that). */
static int fix_checksums(const uint8_t *data, size_t size, uint8_t **out, size_t *n) {
  if (size < GCC_BUNDLE_HEADER_BYTES)
    return 0;
  Gccx__Bundle *pb =
      gccx__bundle__unpack(NULL, size - GCC_BUNDLE_HEADER_BYTES, data + GCC_BUNDLE_HEADER_BYTES);
  if (!pb)
    return 0;
  int ns = (int)pb->n_sections, ok = 0;
  gcc_bundle_section_ref *refs = calloc((size_t)(ns ? ns : 1), sizeof *refs);
  char *manifest_text = NULL;
  for (int i = 0; refs && i < ns; i++) {
    const Gccx__Section *s = pb->sections[i];
    refs[i].name = s->name ? s->name : "";
    refs[i].data = s->data.data;
    refs[i].size = s->data.len;
  }
  for (int i = 0; refs && i < ns; i++) { /* the manifest's list, as the sections are */
    if (strcmp(refs[i].name, "manifest") != 0)
      continue;
    json_t *m = json_loadb((const char *)refs[i].data, refs[i].size, 0, NULL);
    json_t *list = m ? json_object_get(m, "sections") : NULL;
    for (size_t k = 0; json_is_array(list) && k < json_array_size(list); k++) {
      json_t *e = json_array_get(list, k);
      const char *nm = json_string_value(json_object_get(e, "name"));
      for (int j = 0; nm && j < ns; j++)
        if (strcmp(refs[j].name, nm) == 0) {
          uint8_t h[32];
          char hex[65];
          if (gcc_bundle_sha256(refs[j].name, refs[j].data, refs[j].size, h)) {
            gcc_bundle_hex(h, hex);
            json_object_set_new(e, "sha256", json_string(hex));
            json_object_set_new(e, "bytes", json_integer((json_int_t)refs[j].size));
          }
        }
    }
    if (m && (manifest_text = json_dumps(m, JSON_COMPACT)) != NULL) {
      refs[i].data = manifest_text;
      refs[i].size = strlen(manifest_text);
    }
    json_decref(m);
    break;
  }
  gcc_diag d = {0};
  uint32_t version = (uint32_t)data[8] | (uint32_t)data[9] << 8 | (uint32_t)data[10] << 16 |
                     (uint32_t)data[11] << 24; /* kept: version 2 reaches the 16-bit checks */
  if (refs && gcc_bundle_pack_version(refs, ns, version, out, n, &d) == GCC_OK)
    ok = 1;
  free(manifest_text);
  free(refs);
  gccx__bundle__free_unpacked(pb, NULL);
  return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gcc_bundle *b = NULL;
  gcc_diag d = {0};
  if (gcc_bundle_parse(data, size, "fuzz.gccx", &b, &d) == GCC_OK)
    gcc_bundle_free(b);
  uint8_t *fixed = NULL;
  size_t n = 0;
  if (fix_checksums(data, size, &fixed, &n)) {
    b = NULL;
    if (gcc_bundle_parse(fixed, n, "fuzz.gccx", &b, &d) == GCC_OK)
      gcc_bundle_free(b);
    free(fixed);
  }
  return 0;
}
