/* npy.c - float32 .npy arrays (datasets/npy.h). */
#include "datasets/npy.h"
#include "graph/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>
#include <zlib.h>

#include "graph/loader.h"
#include "graph/outfile.h"

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

/* How many times key `key` (quoted with ' or ", followed by ':') appears
 * in the header dict. */
static int key_count(const char *h, const char *key) {
  int n = 0;
  size_t kl = strlen(key);
  for (const char *p = h; *p; p++) {
    if ((*p != '\'' && *p != '"') || strncmp(p + 1, key, kl) != 0 || p[1 + kl] != *p)
      continue;
    const char *c = p + 2 + kl;
    while (*c == ' ')
      c++;
    n += *c == ':';
  }
  return n;
}

/* The dtype of a descr ("<f4"), or 0. */
static int npy_dtype(const char *s, size_t n, gcc_dtype *dt, size_t *elem) {
  static const struct {
    const char *descr;
    gcc_dtype dt;
    size_t elem;
  } k[] = {{"<f4", GCC_DT_FLOAT32, 4}, {"=f4", GCC_DT_FLOAT32, 4}, {"<i8", GCC_DT_INT64, 8},
           {"=i8", GCC_DT_INT64, 8},   {"<i4", GCC_DT_INT32, 4},   {"=i4", GCC_DT_INT32, 4},
           {"|u1", GCC_DT_UINT8, 1},   {"<u1", GCC_DT_UINT8, 1},   {"=u1", GCC_DT_UINT8, 1}};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
    if (n == 3 && strncmp(s, k[i].descr, 3) == 0) {
      *dt = k[i].dt;
      *elem = k[i].elem;
      return 1;
    }
  return 0;
}

gcc_status gcc_npy_parse_header(const uint8_t *bytes, size_t size, const char *source,
                                gcc_npy_array *arr, gcc_diag *d) {
  memset(arr, 0, sizeof *arr);
  gcc_shape *shape = &arr->shape;
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
    return gcc_diag_set(d, GCC_ERR_PARSE, "%s: truncated .npy header (%zu bytes announced)", source,
                        hlen);
  char *h = malloc(hlen + 1);
  if (!h)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (.npy header)");
  memcpy(h, bytes + start, hlen);
  h[hlen] = '\0';
  gcc_status st = GCC_OK;
  if (strlen(h) != hlen || hlen < 2 || h[0] != '{' || !strchr(h, '}'))
    st = gcc_diag_set(d, GCC_ERR_PARSE, "%s: the .npy header is not a dict", source);
  /* numpy's header dict keeps the last of a repeated key, a reader that
   * searches the first: ambiguous, refused */
  const char *const keys[3] = {"descr", "fortran_order", "shape"};
  for (int k = 0; k < 3 && st == GCC_OK; k++)
    if (key_count(h, keys[k]) > 1)
      st = gcc_diag_set(d, GCC_ERR_PARSE,
                        "%s: the .npy header gives '%s' more than once (ambiguous)", source,
                        keys[k]);
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
    else if (!npy_dtype(descr + 1, n, &arr->dtype, &arr->elem))
      st = gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: .npy dtype '%.*s'; read are little-endian float32 ('<f4'), int64 "
                        "('<i8'), int32 ('<i4') and uint8 ('|u1')",
                        source, (int)(n < 32 ? n : 32), descr + 1);
    else
      snprintf(arr->descr, sizeof arr->descr, "%.*s", (int)n, descr + 1);
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
          st = gcc_diag_set(d, GCC_ERR_PARSE, "%s: malformed 'shape' in the .npy header", source);
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
          st =
              gcc_diag_set(d, GCC_ERR_PARSE, "%s: .npy shape with a dim of 0 or too large", source);
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
    size_t have = size - start - hlen, want = (size_t)numel * arr->elem;
    if (have != want)
      st = gcc_diag_set(d, GCC_ERR_PARSE,
                        "%s: the .npy shape needs %zu data bytes, the file has %zu (%s)", source,
                        want, have, have < want ? "truncated" : "trailing bytes");
  }
  if (st == GCC_OK) {
    arr->numel = numel;
    arr->data = bytes + start + hlen;
  } else {
    memset(arr, 0, sizeof *arr);
  }
  return st;
}

gcc_status gcc_npy_parse_f32(const uint8_t *bytes, size_t size, const char *source,
                             gcc_shape *shape, float **data, gcc_diag *d) {
  *data = NULL;
  memset(shape, 0, sizeof *shape);
  gcc_npy_array a;
  GCC_TRY(gcc_npy_parse_header(bytes, size, source, &a, d));
  if (a.dtype != GCC_DT_FLOAT32)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: .npy dtype '%s'; gcc-run reads little-endian float32 ('<f4': "
                        "numpy.float32)",
                        source, a.descr);
  *data = malloc((size_t)a.numel * 4);
  if (!*data)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (.npy data, %lld floats)",
                        (long long)a.numel);
  memcpy(*data, a.data, (size_t)a.numel * 4);
  *shape = a.shape;
  return GCC_OK;
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

/* ---- writing ------------------------------------------------------------------ */

gcc_status gcc_npy_encode_f32(const gcc_shape *shape, const float *data, uint8_t **bytes,
                              size_t *size, gcc_diag *d) {
  *bytes = NULL;
  *size = 0;
  if (shape->ndim < 1 || shape->ndim > GCC_MAX_DIMS)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, ".npy: %d dims (1 to %d)", shape->ndim,
                        GCC_MAX_DIMS);
  char dims[256] = "";
  size_t l = 0;
  int64_t numel = 1;
  for (int i = 0; i < shape->ndim; i++) {
    if (shape->dims[i] <= 0)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, ".npy: dim %d is %lld", i,
                          (long long)shape->dims[i]);
    numel *= shape->dims[i];
    l += (size_t)snprintf(dims + l, sizeof dims - l, "%lld%s", (long long)shape->dims[i],
                          shape->ndim == 1 || i + 1 < shape->ndim ? ", " : "");
  }
  if (shape->ndim == 1) /* a 1-tuple keeps its comma: (5,) */
    dims[l - 1] = '\0';
  char dict[512];
  int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }",
                   dims);
  size_t hlen = (size_t)n + 1; /* + '\n' */
  size_t total_header = 10 + hlen;
  size_t pad = (64 - total_header % 64) % 64;
  hlen += pad;
  size_t data_bytes = (size_t)numel * sizeof(float);
  uint8_t *b = malloc(10 + hlen + data_bytes);
  if (!b)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, ".npy: out of memory (%zu bytes)", data_bytes);
  memcpy(b, "\x93NUMPY\x01\x00", 8);
  b[8] = (uint8_t)(hlen & 0xff);
  b[9] = (uint8_t)(hlen >> 8);
  memcpy(b + 10, dict, (size_t)n);
  memset(b + 10 + n, ' ', pad);
  b[10 + hlen - 1] = '\n';
  memcpy(b + 10 + hlen, data, data_bytes);
  *bytes = b;
  *size = 10 + hlen + data_bytes;
  return GCC_OK;
}

static void put16(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v) {
  put16(p, v & 0xffff);
  put16(p + 2, v >> 16);
}

gcc_status gcc_npz_write(const char *path, const char *const *names, const gcc_shape *shapes,
                         const float *const *data, int n, gcc_diag *d) {
  uint8_t **files = calloc((size_t)n + 1, sizeof *files);
  size_t *sizes = calloc((size_t)n + 1, sizeof *sizes);
  uint32_t *crcs = calloc((size_t)n + 1, sizeof *crcs);
  uint8_t *zip = NULL;
  gcc_status st =
      files && sizes && crcs ? GCC_OK : gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory");
  uint64_t total = 22; /* the end record */
  for (int i = 0; i < n && st == GCC_OK; i++) {
    st = gcc_npy_encode_f32(&shapes[i], data[i], &files[i], &sizes[i], d);
    if (st == GCC_OK && strlen(names[i]) > 200)
      st = gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, ".npz: array name too long");
    if (st != GCC_OK)
      break;
    crcs[i] = (uint32_t)crc32(crc32(0L, Z_NULL, 0), files[i], (uInt)sizes[i]);
    size_t name_len = strlen(names[i]) + 4;
    total += 30 + name_len + sizes[i] + 46 + name_len;
  }
  if (st == GCC_OK && total >= 0xffffffffull)
    st = gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "%s: more than 4 GiB of outputs (no ZIP64)", path);
  if (st == GCC_OK && !(zip = malloc((size_t)total)))
    st = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (%s)", path);
  if (st == GCC_OK) {
    size_t o = 0;
    uint32_t *offsets = malloc(((size_t)n + 1) * sizeof *offsets);
    size_t *fsize = sizes;
    if (!offsets) {
      free(zip);
      zip = NULL;
      st = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (int i = 0; st == GCC_OK && i < n; i++) {
      char name[256];
      snprintf(name, sizeof name, "%s.npy", names[i]);
      size_t nl = strlen(name);
      uint8_t *h = zip + o;
      memset(h, 0, 30);
      put32(h, 0x04034b50); /* local file header */
      put16(h + 4, 20);     /* version needed: 2.0 */
      put32(h + 14, crcs[i]);
      put32(h + 18, (uint32_t)fsize[i]); /* compressed = uncompressed: stored */
      put32(h + 22, (uint32_t)fsize[i]);
      put16(h + 26, (uint32_t)nl);
      memcpy(h + 30, name, nl);
      memcpy(h + 30 + nl, files[i], fsize[i]);
      offsets[i] = (uint32_t)o;
      o += 30 + nl + fsize[i];
    }
    size_t cd = o;
    for (int i = 0; st == GCC_OK && i < n; i++) {
      char name[256];
      snprintf(name, sizeof name, "%s.npy", names[i]);
      size_t nl = strlen(name);
      uint8_t *h = zip + o;
      memset(h, 0, 46);
      put32(h, 0x02014b50); /* central directory entry */
      put16(h + 4, 20);
      put16(h + 6, 20);
      put32(h + 16, crcs[i]);
      put32(h + 20, (uint32_t)fsize[i]);
      put32(h + 24, (uint32_t)fsize[i]);
      put16(h + 28, (uint32_t)nl);
      put32(h + 42, offsets[i]);
      memcpy(h + 46, name, nl);
      o += 46 + nl;
    }
    if (st == GCC_OK) {
      uint8_t *e = zip + o;
      memset(e, 0, 22);
      put32(e, 0x06054b50); /* end of central directory */
      put16(e + 8, (uint32_t)n);
      put16(e + 10, (uint32_t)n);
      put32(e + 12, (uint32_t)(o - cd));
      put32(e + 16, (uint32_t)cd);
      o += 22;
      st = gcc_write_file_atomic(path, zip, o, d);
    }
    free(offsets);
  }
  for (int i = 0; files && i < n; i++)
    free(files[i]);
  free(files);
  free(sizes);
  free(crcs);
  free(zip);
  return st;
}

/* ---- --dataset npy ------------------------------------------------------------ */

/* The bytes of one array: a memory-mapped .npy file, or an entry of a
 * .npz read into memory. */
typedef struct npy_bytes {
  const uint8_t *p;
  size_t n;
  void *map; /* munmap(map, n) */
  uint8_t *buf;
  char name[4200];
} npy_bytes;

static void npy_bytes_free(npy_bytes *b) {
  if (b->map)
    munmap(b->map, b->n);
  free(b->buf);
  b->map = NULL;
  b->buf = NULL;
}

static gcc_status map_file(const char *path, npy_bytes *b, gcc_diag *d) {
  snprintf(b->name, sizeof b->name, "%s", path);
  /* O_NONBLOCK and fstat: a FIFO or device in place of the file is
   * refused, never waited on */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return gcc_diag_set(d, GCC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  int regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (regular)
    gcc_input_note(path, fd);
  if (!regular || st.st_size < 10) {
    close(fd);
    return gcc_diag_set(d, GCC_ERR_PARSE,
                        "%s: not a .npy file (not a regular file of 10 bytes "
                        "or more)",
                        path);
  }
  b->n = (size_t)st.st_size;
  b->map = mmap(NULL, b->n, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (b->map == MAP_FAILED) {
    b->map = NULL;
    return gcc_diag_set(d, GCC_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
  }
  b->p = b->map;
  return GCC_OK;
}

/* `archive_bytes`: the .npz file's size, which bounds what a member can
 * hold before any allocation (stored: its own bytes; deflated: at most
 * 1032 times them, deflate's largest ratio). */
static gcc_status zip_entry(zip_t *z, const char *zpath, const char *entry, uint64_t archive_bytes,
                            npy_bytes *b, gcc_diag *d) {
  snprintf(b->name, sizeof b->name, "%s:%s", zpath, entry);
  /* numpy.load reads the last of two members of one name, libzip the
   * first: ambiguous, refused */
  int same = 0;
  zip_int64_t members = zip_get_num_entries(z, 0);
  for (zip_int64_t i = 0; i < members; i++) {
    const char *name = zip_get_name(z, (zip_uint64_t)i, ZIP_FL_ENC_RAW);
    same += name && strcmp(name, entry) == 0;
  }
  if (same > 1)
    return gcc_diag_set(d, GCC_ERR_PARSE,
                        "%s: the archive holds %d members named '%s' (ambiguous: numpy reads the "
                        "last, other readers the first)",
                        zpath, same, entry);
  zip_stat_t zs;
  zip_stat_init(&zs);
  if (zip_stat(z, entry, 0, &zs) != 0 || !(zs.valid & ZIP_STAT_SIZE))
    return gcc_diag_set(d, GCC_ERR_IO, "%s: the archive has no '%s'", zpath, entry);
  if (zs.size > GCC_NPY_MAX_BYTES)
    return gcc_diag_set(d, GCC_ERR_PARSE, "%s: %llu bytes (at most %zu)", b->name,
                        (unsigned long long)zs.size, GCC_NPY_MAX_BYTES);
  uint64_t packed = (zs.valid & ZIP_STAT_COMP_SIZE) ? zs.comp_size : archive_bytes;
  int stored = (zs.valid & ZIP_STAT_COMP_METHOD) && zs.comp_method == ZIP_CM_STORE;
  if (packed > archive_bytes || (stored && zs.size != packed) ||
      zs.size / 1032 > packed + 1) /* refused before the allocation */
    return gcc_diag_set(d, GCC_ERR_PARSE,
                        "%s: the archive says %llu bytes from %llu packed bytes in a %llu-byte "
                        "file: corrupt",
                        b->name, (unsigned long long)zs.size, (unsigned long long)packed,
                        (unsigned long long)archive_bytes);
  b->buf = malloc(zs.size ? zs.size : 1);
  if (!b->buf)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (%s)", b->name);
  zip_file_t *f = zip_fopen(z, entry, 0);
  if (!f && zip_error_code_zip(zip_get_error(z)) == ZIP_ER_COMPNOTSUPP)
    return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                        "%s: compressed with method %u, which this reader does not support "
                        "(numpy writes stored or deflated members)",
                        b->name, (zs.valid & ZIP_STAT_COMP_METHOD) ? (unsigned)zs.comp_method : 0u);
  zip_int64_t got = f ? zip_fread(f, b->buf, zs.size) : -1;
  if (f)
    zip_fclose(f);
  if (got < 0 || (zip_uint64_t)got != zs.size)
    return gcc_diag_set(d, GCC_ERR_PARSE, "%s: cannot read it: %s", b->name, zip_strerror(z));
  b->p = b->buf;
  b->n = zs.size;
  return GCC_OK;
}

static gcc_status labels_from(const gcc_npy_array *y, const char *name, uint8_t *out,
                              int64_t *classes, gcc_diag *d) {
  int64_t mx = -1;
  for (int64_t i = 0; i < y->numel; i++) {
    int64_t v;
    if (y->dtype == GCC_DT_INT64)
      memcpy(&v, y->data + 8 * i, 8);
    else if (y->dtype == GCC_DT_INT32) {
      int32_t w;
      memcpy(&w, y->data + 4 * i, 4);
      v = w;
    } else {
      v = y->data[i];
    }
    if (v < 0 || v > 255)
      return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                          "%s: label %lld at index %lld: class indices must be in [0, 255]", name,
                          (long long)v, (long long)i);
    out[i] = (uint8_t)v;
    mx = v > mx ? v : mx;
  }
  *classes = mx + 1;
  return GCC_OK;
}

/* The x and y arrays of the training (train = 1) or test set: mapped from a
 * folder's x_*.npy / y_*.npy, or read from a .npz (*z: the open archive,
 * for the caller to discard). */
static gcc_status open_pair(const char *path, int train, npy_bytes *xb, npy_bytes *yb, zip_t **z,
                            gcc_diag *d) {
  const char *xn = train ? "x_train.npy" : "x_test.npy", *yn = train ? "y_train.npy" : "y_test.npy";
  struct stat st;
  gcc_status s = GCC_OK;
  if (stat(path, &st) != 0)
    return gcc_diag_set(d, GCC_ERR_IO,
                        "--dataset npy: %s: %s (a folder of x_train.npy, "
                        "y_train.npy, x_test.npy, y_test.npy, or a .npz of them)",
                        path, strerror(errno));
  if (S_ISDIR(st.st_mode)) {
    char px[4200], py[4200];
    snprintf(px, sizeof px, "%s/%s", path, xn);
    snprintf(py, sizeof py, "%s/%s", path, yn);
    s = map_file(px, xb, d);
    if (s == GCC_OK)
      s = map_file(py, yb, d);
  } else {
    /* opened here (O_NONBLOCK, fstat) so that a FIFO is refused, not
     * waited on; libzip takes the descriptor */
    int err = 0, fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      err = fd < 0 ? errno : 0;
      if (fd >= 0)
        close(fd);
      return gcc_diag_set(d, GCC_ERR_IO, "--dataset npy: %s: %s", path,
                          err ? strerror(err) : "not a folder or a regular (.npz) file");
    }
    gcc_input_note(path, fd);
    *z = zip_fdopen(fd, ZIP_RDONLY, &err);
    if (!*z) {
      close(fd);
      zip_error_t ze;
      zip_error_init_with_code(&ze, err);
      gcc_status zs =
          err == ZIP_ER_NOZIP
              ? gcc_diag_set(d, GCC_ERR_PARSE, "%s: not a .npz (zip) archive (libzip: %s)", path,
                             zip_error_strerror(&ze))
              : gcc_diag_set(d, GCC_ERR_PARSE, "%s: a .npz (zip) archive libzip cannot open: %s",
                             path, zip_error_strerror(&ze));
      zip_error_fini(&ze);
      return zs;
    }
    s = zip_entry(*z, path, xn, (uint64_t)st.st_size, xb, d);
    if (s == GCC_OK)
      s = zip_entry(*z, path, yn, (uint64_t)st.st_size, yb, d);
  }
  return s;
}

gcc_status gcc_npy_dataset_load(const char *path, int train, gcc_dataset *out, gcc_diag *d) {
  memset(out, 0, sizeof *out);
  npy_bytes xb = {0}, yb = {0};
  zip_t *z = NULL;
  gcc_status s = open_pair(path, train, &xb, &yb, &z, d);
  gcc_npy_array x, y;
  if (s == GCC_OK)
    s = gcc_npy_parse_header(xb.p, xb.n, xb.name, &x, d);
  if (s == GCC_OK)
    s = gcc_npy_parse_header(yb.p, yb.n, yb.name, &y, d);
  char sx[128], sy[128];
  if (s == GCC_OK) {
    gcc_shape_str(&x.shape, sx, sizeof sx);
    gcc_shape_str(&y.shape, sy, sizeof sy);
  }
  if (s == GCC_OK && x.dtype != GCC_DT_UINT8)
    s = gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                     "%s: dtype '%s' %s; --dataset npy reads uint8 images (pixels 0..255, "
                     "scaled by --mean/--std): save x.astype(numpy.uint8)",
                     xb.name, x.descr, sx);
  if (s == GCC_OK && y.dtype == GCC_DT_FLOAT32)
    s = gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                     "%s: dtype '%s' %s; the targets must be integer class indices (int64, "
                     "int32 or uint8)",
                     yb.name, y.descr, sy);
  if (s == GCC_OK && (x.shape.ndim < 2 || x.shape.ndim > 4))
    s = gcc_diag_set(d, GCC_ERR_SHAPE,
                     "%s: shape %s; expected (N, D), (N, H, W) or (N, C, H, W) images", xb.name,
                     sx);
  if (s == GCC_OK && (y.shape.ndim != 1 || y.shape.dims[0] != x.shape.dims[0]))
    s = gcc_diag_set(d, GCC_ERR_SHAPE, "%s: shape %s; expected (%lld) class indices for %s %s",
                     yb.name, sy, (long long)x.shape.dims[0], xb.name, sx);
  if (s == GCC_OK) {
    const gcc_shape *xs = &x.shape;
    out->n = xs->dims[0];
    out->channels = xs->ndim == 4 ? xs->dims[1] : 1;
    out->height = xs->ndim == 4 ? xs->dims[2] : xs->ndim == 3 ? xs->dims[1] : 1;
    out->width = xs->dims[xs->ndim - 1];
    out->images = malloc((size_t)x.numel ? (size_t)x.numel : 1);
    out->labels = malloc((size_t)out->n);
    if (!out->images || !out->labels)
      s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (%s, %lld bytes)", xb.name,
                       (long long)x.numel);
  }
  if (s == GCC_OK) {
    memcpy(out->images, x.data, (size_t)x.numel);
    s = labels_from(&y, yb.name, out->labels, &out->num_classes, d);
  }
  npy_bytes_free(&xb);
  npy_bytes_free(&yb);
  if (z)
    zip_discard(z);
  if (s != GCC_OK)
    gcc_dataset_free(out);
  return s;
}

/* ---- the arrays as they are ------------------------------------------------- */

void gcc_npy_tensor_free(gcc_npy_tensor *t) {
  free(t->data);
  memset(t, 0, sizeof *t);
}

static gcc_status take_array(const npy_bytes *b, gcc_npy_tensor *t, gcc_diag *d) {
  gcc_npy_array a;
  GCC_TRY(gcc_npy_parse_header(b->p, b->n, b->name, &a, d));
  snprintf(t->name, sizeof t->name, "%s", b->name);
  snprintf(t->descr, sizeof t->descr, "%s", a.descr);
  t->dtype = a.dtype;
  t->shape = a.shape;
  t->numel = a.numel;
  size_t bytes = (size_t)a.numel * a.elem;
  t->data = malloc(bytes ? bytes : 1);
  if (!t->data)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (%s, %zu bytes)", b->name, bytes);
  memcpy(t->data, a.data, bytes);
  return GCC_OK;
}

gcc_status gcc_npy_load_pair(const char *path, int train, gcc_npy_tensor *x, gcc_npy_tensor *y,
                             gcc_diag *d) {
  memset(x, 0, sizeof *x);
  memset(y, 0, sizeof *y);
  npy_bytes xb = {0}, yb = {0};
  zip_t *z = NULL;
  gcc_status s = open_pair(path, train, &xb, &yb, &z, d);
  if (s == GCC_OK)
    s = take_array(&xb, x, d);
  if (s == GCC_OK)
    s = take_array(&yb, y, d);
  if (s == GCC_OK &&
      (x->shape.ndim < 2 || y->shape.ndim < 1 || y->shape.dims[0] != x->shape.dims[0])) {
    char sx[128], sy[128];
    s = gcc_diag_set(d, GCC_ERR_SHAPE,
                     "%s has shape %s and %s %s: expected the samples along dim 0 of both, and "
                     "at least one more dim in x",
                     x->name, gcc_shape_str(&x->shape, sx, sizeof sx), y->name,
                     gcc_shape_str(&y->shape, sy, sizeof sy));
  }
  npy_bytes_free(&xb);
  npy_bytes_free(&yb);
  if (z)
    zip_discard(z);
  if (s != GCC_OK) {
    gcc_npy_tensor_free(x);
    gcc_npy_tensor_free(y);
  }
  return s;
}
