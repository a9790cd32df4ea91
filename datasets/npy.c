/* npy.c - float32 .npy arrays (datasets/npy.h). */
#include "datasets/npy.h"
#include "graph/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int gcc_npy_is_npy(const uint8_t *bytes, size_t size) {
  return size >= 6 && memcmp(bytes, "\x93NUMPY", 6) == 0;
}

/* The value of key `key` in the header dict: a pointer just after the ':'
 * (spaces skipped), or NULL. Keys are quoted with ' or ". */
static const char *dict_value(const char *h, const char *key) {
  char q1[64], q2[64];
  snprintf(q1, sizeof q1, "'%s'", key);
  snprintf(q2, sizeof q2, "\"%s\"", key);
  const char *p = strstr(h, q1);
  if (!p)
    p = strstr(h, q2);
  if (!p)
    return NULL;
  p += strlen(q1);
  while (*p == ' ')
    p++;
  if (*p != ':')
    return NULL;
  p++;
  while (*p == ' ')
    p++;
  return p;
}

gcc_status gcc_npy_parse_f32(const uint8_t *bytes, size_t size, const char *source,
                             gcc_shape *shape, float **data, gcc_diag *d) {
  *data = NULL;
  memset(shape, 0, sizeof *shape);
  if (!gcc_npy_is_npy(bytes, size) || size < 10)
    return gcc_diag_set(d, GCC_ERR_PARSE, "%s: not a .npy file (no \\x93NUMPY magic)", source);
  int major = bytes[6], minor = bytes[7];
  size_t hlen, start;
  if (major == 1 && minor == 0) {
    hlen = (size_t)bytes[8] | (size_t)bytes[9] << 8;
    start = 10;
  } else if ((major == 2 || major == 3) && minor == 0) {
    if (size < 12)
      return gcc_diag_set(d, GCC_ERR_PARSE, "%s: truncated .npy header", source);
    hlen = (size_t)bytes[8] | (size_t)bytes[9] << 8 | (size_t)bytes[10] << 16 |
           (size_t)bytes[11] << 24;
    start = 12;
  } else {
    return gcc_diag_set(d, GCC_ERR_PARSE, "%s: .npy version %d.%d (1.0, 2.0 and 3.0 are read)",
                        source, major, minor);
  }
  if (hlen > size - start || hlen > (1u << 20))
    return gcc_diag_set(d, GCC_ERR_PARSE, "%s: truncated .npy header (%zu bytes announced)",
                        source, hlen);
  char *h = malloc(hlen + 1);
  if (!h)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (.npy header)");
  memcpy(h, bytes + start, hlen);
  h[hlen] = '\0';
  gcc_status st = GCC_OK;
  if (strlen(h) != hlen || hlen < 2 || h[0] != '{' || !strchr(h, '}'))
    st = gcc_diag_set(d, GCC_ERR_PARSE, "%s: the .npy header is not a dict", source);
  const char *descr = st == GCC_OK ? dict_value(h, "descr") : NULL;
  const char *fortran = st == GCC_OK ? dict_value(h, "fortran_order") : NULL;
  const char *shp = st == GCC_OK ? dict_value(h, "shape") : NULL;
  if (st == GCC_OK && (!descr || !fortran || !shp))
    st = gcc_diag_set(d, GCC_ERR_PARSE,
                      "%s: the .npy header lacks 'descr', 'fortran_order' or 'shape'", source);
  if (st == GCC_OK) {
    char q = descr[0];
    const char *end = (q == '\'' || q == '"') ? strchr(descr + 1, q) : NULL;
    size_t n = end ? (size_t)(end - descr - 1) : 0;
    if (!end)
      st = gcc_diag_set(d, GCC_ERR_PARSE, "%s: malformed 'descr' in the .npy header", source);
    else if (!((n == 3 && (strncmp(descr + 1, "<f4", 3) == 0 ||
                           strncmp(descr + 1, "=f4", 3) == 0))))
      st = gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: .npy dtype '%.*s'; gcc-run reads little-endian float32 ('<f4': "
                        "numpy.float32)",
                        source, (int)(n < 32 ? n : 32), descr + 1);
  }
  if (st == GCC_OK) {
    if (strncmp(fortran, "True", 4) == 0)
      st = gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: the .npy array is in Fortran order; save it in C order "
                        "(numpy.ascontiguousarray)",
                        source);
    else if (strncmp(fortran, "False", 5) != 0)
      st = gcc_diag_set(d, GCC_ERR_PARSE, "%s: malformed 'fortran_order' in the .npy header",
                        source);
  }
  int64_t numel = 1;
  if (st == GCC_OK) {
    const char *p = shp;
    if (*p != '(') {
      st = gcc_diag_set(d, GCC_ERR_PARSE, "%s: malformed 'shape' in the .npy header", source);
    } else {
      p++;
      for (;;) {
        while (*p == ' ' || *p == ',')
          p++;
        if (*p == ')')
          break;
        if (*p < '0' || *p > '9') {
          st = gcc_diag_set(d, GCC_ERR_PARSE, "%s: malformed 'shape' in the .npy header",
                            source);
          break;
        }
        int64_t v = 0;
        while (*p >= '0' && *p <= '9' && v < ((int64_t)1 << 40))
          v = v * 10 + (*p++ - '0');
        if (shape->ndim == GCC_MAX_DIMS) {
          st = gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s: the .npy array has more than %d dims",
                            source, GCC_MAX_DIMS);
          break;
        }
        if (v <= 0 || v >= ((int64_t)1 << 40) || numel > (((int64_t)1 << 40) / v)) {
          st = gcc_diag_set(d, GCC_ERR_PARSE, "%s: .npy shape with a dim of 0 or too large",
                            source);
          break;
        }
        numel *= v;
        shape->dims[shape->ndim++] = v;
      }
      if (st == GCC_OK && shape->ndim == 0)
        st = gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s: the .npy array is a scalar (shape ())",
                          source);
    }
  }
  free(h);
  if (st == GCC_OK) {
    size_t have = size - start - hlen, want = (size_t)numel * 4;
    if (have != want)
      st = gcc_diag_set(d, GCC_ERR_PARSE,
                        "%s: the .npy shape needs %zu data bytes, the file has %zu (%s)", source,
                        want, have, have < want ? "truncated" : "trailing bytes");
  }
  if (st == GCC_OK) {
    *data = malloc((size_t)numel * 4);
    if (!*data)
      st = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (.npy data, %lld floats)",
                        (long long)numel);
    else
      memcpy(*data, bytes + start + hlen, (size_t)numel * 4);
  }
  if (st != GCC_OK)
    memset(shape, 0, sizeof *shape);
  return st;
}

gcc_status gcc_npy_read_f32(const char *path, gcc_shape *shape, float **data, gcc_diag *d) {
  *data = NULL;
  uint8_t *buf;
  size_t n;
  GCC_TRY(gcc_read_file(path, GCC_NPY_MAX_BYTES, &buf, &n, d));
  gcc_status st = gcc_npy_parse_f32(buf, n, path, shape, data, d);
  free(buf);
  return st;
}
