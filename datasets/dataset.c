/*
 * dataset.c - IDX reader (plain or gzip, through zlib's gzread) and MNIST
 * loader. The format is described in dataset.h.
 */
#include "datasets/dataset.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "graph/outfile.h"

enum {
  IDX_TYPE_U8 = 0x08,
  IDX_MAX_NDIM = 4,
  PATH_CAP = 4096,
  INITIAL_CAPACITY = 1 << 20, /* bytes allocated before any data is read */
  MAX_READ_CHUNK = 1 << 30,   /* gzread takes an unsigned and returns an int */
  MNIST_CLASSES = 10,
};

/* The other type codes of the IDX description: valid files, elements that
 * are not unsigned bytes. */
static const char *idx_type_name(int code) {
  switch (code) {
  case 0x08: return "unsigned byte";
  case 0x09: return "signed byte";
  case 0x0B: return "short";
  case 0x0C: return "int";
  case 0x0D: return "float";
  case 0x0E: return "double";
  default: return NULL;
  }
}

/* zlib's gzerror message is "<path>: <what>"; keeps <what> only, since our
 * messages already begin with the path. */
static const char *zlib_reason(const char *zmsg, const char *path) {
  size_t n = strlen(path);
  if (strncmp(zmsg, path, n) == 0 && zmsg[n] == ':' && zmsg[n + 1] == ' ')
    return zmsg + n + 2;
  return zmsg;
}

/* Turns a failed or short gzread into a status. `what` says what was being
 * read ("header", "data"); `got` and `want` are byte counts. */
static gcc_status read_failure(gzFile f, const char *path, const char *what, int64_t got,
                               int64_t want, gcc_diag *d) {
  int zerr = Z_OK;
  const char *zmsg = gzerror(f, &zerr);
  switch (zerr) {
  case Z_ERRNO:
    return gcc_diag_set(d, GCC_ERR_IO, "%s: read error in the IDX %s: %s", path, what,
                        strerror(errno));
  case Z_MEM_ERROR:
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "%s: out of memory while decompressing", path);
  case Z_OK:
  case Z_BUF_ERROR: /* zlib's "unexpected end of file" in a gzip stream */
    return gcc_diag_set(d, GCC_ERR_PARSE,
                        "%s: truncated IDX file: the %s needs %lld bytes, "
                        "the file has %lld%s",
                        path, what, (long long)want, (long long)got,
                        zerr == Z_BUF_ERROR ? " (the gzip stream ends early)" : "");
  default: /* Z_DATA_ERROR, Z_STREAM_ERROR: not a valid gzip stream */
    return gcc_diag_set(d, GCC_ERR_PARSE, "%s: corrupt gzip stream: %s", path,
                        zlib_reason(zmsg, path));
  }
}

/* Reads exactly `len` (< 2^30) bytes; *got receives how many arrived. */
static int read_exact(gzFile f, void *buf, unsigned len, int64_t *got) {
  int r = gzread(f, buf, len);
  *got = r < 0 ? 0 : r;
  return r == (int)len;
}

static gcc_status idx_read_open(gzFile f, const char *path, int expect_ndim, int64_t dims[4],
                                uint8_t **data, gcc_diag *d) {
  unsigned char head[4 + 4 * IDX_MAX_NDIM];
  int64_t got = 0;

  (void)gzbuffer(f, 1u << 17); /* larger reads; fails only after a read */
  if (!read_exact(f, head, 4, &got))
    return read_failure(f, path, "header", got, 4, d);
  uint32_t magic = (uint32_t)head[0] << 24 | (uint32_t)head[1] << 16 | (uint32_t)head[2] << 8 |
                   (uint32_t)head[3];
  if (head[0] != 0 || head[1] != 0)
    return gcc_diag_set(d, GCC_ERR_PARSE,
                        "%s: bad IDX magic number 0x%08x (the first two "
                        "bytes must be zero; expected 0x0000%02x%02x for "
                        "%d-d unsigned bytes)",
                        path, magic, IDX_TYPE_U8, expect_ndim, expect_ndim);
  int type = head[2], ndim = head[3];
  if (type != IDX_TYPE_U8) {
    const char *name = idx_type_name(type);
    if (name != NULL)
      return gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                          "%s: IDX type code 0x%02x (%s) is not supported: "
                          "only 0x08 (unsigned byte) is",
                          path, type, name);
    return gcc_diag_set(d, GCC_ERR_PARSE, "%s: unknown IDX type code 0x%02x (magic 0x%08x)", path,
                        type, magic);
  }
  if (ndim != expect_ndim)
    return gcc_diag_set(d, GCC_ERR_PARSE,
                        "%s: IDX file has %d dimensions, expected %d "
                        "(magic 0x%08x, expected 0x0000%02x%02x)",
                        path, ndim, expect_ndim, magic, IDX_TYPE_U8, expect_ndim);

  unsigned dim_bytes = 4u * (unsigned)ndim;
  if (!read_exact(f, head + 4, dim_bytes, &got))
    return read_failure(f, path, "header", 4 + got, 4 + dim_bytes, d);

  /* The product is bounded by both int64 and size_t (and by what gzread's
   * chunks can address, which is the same bound on 64-bit hosts). */
  uint64_t limit = (uint64_t)INT64_MAX;
  if ((uint64_t)SIZE_MAX < limit)
    limit = (uint64_t)SIZE_MAX;
  uint64_t total = 1;
  int64_t sizes[IDX_MAX_NDIM];
  for (int i = 0; i < ndim; i++) {
    const unsigned char *p = head + 4 + 4 * i;
    uint32_t v = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
    if (v == 0)
      return gcc_diag_set(d, GCC_ERR_PARSE,
                          "%s: IDX dimension %d is 0 (every dimension must "
                          "be positive)",
                          path, i);
    if (total > limit / v)
      return gcc_diag_set(d, GCC_ERR_PARSE,
                          "%s: IDX dimensions overflow: the product of the "
                          "sizes up to dimension %d (size %u) exceeds %llu "
                          "bytes",
                          path, i, v, (unsigned long long)limit);
    total *= v;
    sizes[i] = v;
  }

  /* Grow the buffer with the data actually present, so a header that
   * promises more than the file holds fails on "truncated", not on malloc. */
  size_t cap = total < INITIAL_CAPACITY ? (size_t)total : INITIAL_CAPACITY;
  uint8_t *buf = malloc(cap);
  if (buf == NULL)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes", path, cap);
  uint64_t have = 0;
  while (have < total) {
    if (have == cap) {
      if (have >= GCC_IDX_MAX_BYTES) { /* the data is really there: refuse by the limit */
        free(buf);
        return gcc_diag_set(d, GCC_ERR_IO,
                            "%s: IDX data of %llu bytes, more than the %llu this reader takes",
                            path, (unsigned long long)total, (unsigned long long)GCC_IDX_MAX_BYTES);
      }
      size_t next = cap > (size_t)(total - cap) ? (size_t)total : cap * 2;
      uint8_t *grown = realloc(buf, next);
      if (grown == NULL) {
        free(buf);
        return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes for IDX data",
                            path, next);
      }
      buf = grown;
      cap = next;
    }
    size_t want = cap - (size_t)have;
    if (want > MAX_READ_CHUNK)
      want = MAX_READ_CHUNK;
    int r = gzread(f, buf + have, (unsigned)want);
    if (r <= 0) {
      free(buf);
      return read_failure(f, path, "data", (int64_t)have, (int64_t)total, d);
    }
    have += (uint64_t)r;
  }

  /* Anything after the data is an error: a file that is longer than its
   * header says is not the file the header describes. */
  unsigned char scratch[4096];
  int64_t extra = 0;
  for (;;) {
    int r = gzread(f, scratch, sizeof scratch);
    if (r < 0) {
      free(buf);
      return read_failure(f, path, "trailer", 0, 0, d);
    }
    if (r == 0)
      break;
    extra += r;
  }
  if (extra > 0) {
    free(buf);
    return gcc_diag_set(d, GCC_ERR_PARSE,
                        "%s: %lld trailing bytes after the %llu data bytes "
                        "that the IDX header describes",
                        path, (long long)extra, (unsigned long long)total);
  }
  int zerr = Z_OK;
  (void)gzerror(f, &zerr);
  if (zerr != Z_OK) { /* a gzip stream cut inside its CRC/length trailer */
    free(buf);
    return gcc_diag_set(d, GCC_ERR_PARSE,
                        "%s: truncated gzip stream: it ends before its "
                        "trailer (%s)",
                        path, zlib_reason(gzerror(f, &zerr), path));
  }

  for (int i = 0; i < ndim; i++)
    dims[i] = sizes[i];
  *data = buf;
  return GCC_OK;
}

gcc_status gcc_idx_read(const char *path, int expect_ndim, int64_t dims[4], uint8_t **data,
                        gcc_diag *d) {
  if (data != NULL)
    *data = NULL;
  if (dims != NULL)
    for (int i = 0; i < 4; i++)
      dims[i] = 0;
  if (path == NULL || dims == NULL || data == NULL)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: gcc_idx_read: path, dims and data must not be "
                        "NULL",
                        path != NULL ? path : "(null)");
  if (expect_ndim < 1 || expect_ndim > IDX_MAX_NDIM)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s: gcc_idx_read: expect_ndim must be in [1, %d], "
                        "got %d",
                        path, IDX_MAX_NDIM, expect_ndim);

  /* O_NONBLOCK and fstat: a FIFO or device in place of the file is
   * refused, never waited on or read without end */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return gcc_diag_set(d, GCC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return gcc_diag_set(d, GCC_ERR_IO, "%s: not a regular file", path);
  }
  gcc_input_note(path, fd);
  errno = 0;
  gzFile f = gzdopen(fd, "rb");
  if (f == NULL) {
    close(fd);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "%s: cannot open: out of memory", path);
  }
  gcc_status s = idx_read_open(f, path, expect_ndim, dims, data, d);
  gzclose(f);
  if (s == GCC_OK)
    for (int i = expect_ndim; i < 4; i++)
      dims[i] = 1;
  return s;
}

/* Chooses "<dir>/<name>.gz" if it exists, else "<dir>/<name>"; in the second
 * case `alt` gets the ".gz" path that was looked for (for error messages),
 * in the first it is empty. */
static gcc_status mnist_path(const char *dir, const char *name, char *path, char *alt,
                             gcc_diag *d) {
  int n = snprintf(path, PATH_CAP, "%s/%s.gz", dir, name);
  if (n < 0 || n >= PATH_CAP)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s/%s.gz: path longer than %d bytes", dir,
                        name, PATH_CAP - 1);
  struct stat st;
  if (stat(path, &st) == 0) {
    alt[0] = '\0';
    return GCC_OK;
  }
  memcpy(alt, path, (size_t)n + 1);
  snprintf(path, PATH_CAP, "%s/%s", dir, name);
  return GCC_OK;
}

/* gcc_idx_read, adding the ".gz" name that was looked for to "cannot open"
 * messages, so that a missing file names both candidates. */
static gcc_status mnist_read(const char *path, const char *alt, int ndim, int64_t dims[4],
                             uint8_t **data, gcc_diag *d) {
  gcc_status s = gcc_idx_read(path, ndim, dims, data, d);
  if (s == GCC_ERR_IO && alt[0] != '\0' && d != NULL && strstr(d->msg, "cannot open") != NULL) {
    size_t len = strlen(d->msg);
    snprintf(d->msg + len, sizeof d->msg - len, " (also tried %s)", alt);
  }
  return s;
}

gcc_status gcc_mnist_load(const char *dir, int train, gcc_dataset *out, gcc_diag *d) {
  if (out != NULL)
    memset(out, 0, sizeof *out);
  if (dir == NULL || out == NULL)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gcc_mnist_load: dir and out must not be NULL");
  const char *img_name = train ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte";
  const char *lab_name = train ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte";
  char img_path[PATH_CAP], img_alt[PATH_CAP];
  char lab_path[PATH_CAP], lab_alt[PATH_CAP];
  GCC_TRY(mnist_path(dir, img_name, img_path, img_alt, d));
  GCC_TRY(mnist_path(dir, lab_name, lab_path, lab_alt, d));

  int64_t idims[4], ldims[4];
  uint8_t *images = NULL, *labels = NULL;
  GCC_TRY(mnist_read(img_path, img_alt, 3, idims, &images, d));
  gcc_status s = mnist_read(lab_path, lab_alt, 1, ldims, &labels, d);
  if (s != GCC_OK) {
    free(images);
    return s;
  }
  if (idims[0] != ldims[0]) {
    free(images);
    free(labels);
    return gcc_diag_set(d, GCC_ERR_PARSE, "%s has %lld images but %s has %lld labels", img_path,
                        (long long)idims[0], lab_path, (long long)ldims[0]);
  }
  for (int64_t i = 0; i < ldims[0]; i++) {
    if (labels[i] >= MNIST_CLASSES) {
      int bad = labels[i];
      free(images);
      free(labels);
      return gcc_diag_set(d, GCC_ERR_PARSE,
                          "%s: label of sample %lld is %d, not a class in "
                          "[0, %d)",
                          lab_path, (long long)i, bad, MNIST_CLASSES);
    }
  }
  out->n = idims[0];
  out->channels = 1;
  out->height = idims[1];
  out->width = idims[2];
  out->images = images;
  out->labels = labels;
  out->num_classes = MNIST_CLASSES;
  return GCC_OK;
}

/* ---- CIFAR-10 binary version ---------------------------------------------- */

enum {
  CIFAR_SIDE = 32,
  CIFAR_CHANNELS = 3,
  CIFAR_PIXELS = 3072,
  CIFAR_RECORD = 3073,
  CIFAR_TRAIN_FILES = 5
};

const char *const gcc_cifar10_classes[10] = {"plane", "car",  "bird",  "cat",  "deer",
                                             "dog",   "frog", "horse", "ship", "truck"};

static const char kCifarFiles[] =
    "(CIFAR-10 binary version: data_batch_1.bin ... data_batch_5.bin and test_batch.bin)";

/* Size in records of CIFAR-10 file `path`, checked. */
static gcc_status cifar_records(const char *path, int64_t *records, gcc_diag *d) {
  struct stat st;
  if (stat(path, &st) != 0)
    return gcc_diag_set(d, GCC_ERR_IO, "%s: cannot open: %s %s", path, strerror(errno),
                        kCifarFiles);
  if (!S_ISREG(st.st_mode))
    return gcc_diag_set(d, GCC_ERR_IO, "%s: not a regular file %s", path, kCifarFiles);
  if (st.st_size <= 0 || st.st_size % CIFAR_RECORD != 0)
    return gcc_diag_set(d, GCC_ERR_PARSE,
                        "%s: %lld bytes is not a whole, positive number of %d-byte CIFAR-10 "
                        "records (1 label byte + 3072 pixel bytes); truncated, or not the "
                        "binary version?",
                        path, (long long)st.st_size, CIFAR_RECORD);
  *records = st.st_size / CIFAR_RECORD;
  return GCC_OK;
}

/* Reads `records` records of `path` into images/labels (room for them). */
static gcc_status cifar_read(const char *path, int64_t records, uint8_t *images, uint8_t *labels,
                             gcc_diag *d) {
  /* O_NONBLOCK and fstat: a FIFO put in place of the file since
   * cifar_records is refused, never waited on */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    int err = fd < 0 ? errno : 0;
    if (fd >= 0)
      close(fd);
    return gcc_diag_set(d, GCC_ERR_IO, "%s: cannot open: %s %s", path,
                        err ? strerror(err) : "not a regular file", kCifarFiles);
  }
  gcc_input_note(path, fd);
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    close(fd);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "%s: cannot open: out of memory", path);
  }
  uint8_t rec[CIFAR_RECORD];
  for (int64_t i = 0; i < records; i++) {
    if (fread(rec, 1, sizeof rec, f) != sizeof rec) {
      int err = ferror(f) ? errno : 0;
      fclose(f);
      return gcc_diag_set(d, err ? GCC_ERR_IO : GCC_ERR_PARSE, "%s: record %lld: %s", path,
                          (long long)i,
                          err ? strerror(err) : "the file ends early (it shrank while read?)");
    }
    if (rec[0] >= 10) {
      fclose(f);
      return gcc_diag_set(d, GCC_ERR_PARSE, "%s: record %lld has label %d, not a class in [0, 10)",
                          path, (long long)i, rec[0]);
    }
    labels[i] = rec[0];
    memcpy(images + i * CIFAR_PIXELS, rec + 1, CIFAR_PIXELS);
  }
  fclose(f);
  return GCC_OK;
}

gcc_status gcc_cifar10_load(const char *dir, int train, gcc_dataset *out, gcc_diag *d) {
  if (out != NULL)
    memset(out, 0, sizeof *out);
  if (dir == NULL || out == NULL)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gcc_cifar10_load: dir and out must not be NULL");
  int n_files = train ? CIFAR_TRAIN_FILES : 1;
  char paths[CIFAR_TRAIN_FILES][PATH_CAP];
  int64_t records[CIFAR_TRAIN_FILES], total = 0;
  for (int k = 0; k < n_files; k++) {
    int len = train ? snprintf(paths[k], PATH_CAP, "%s/data_batch_%d.bin", dir, k + 1)
                    : snprintf(paths[k], PATH_CAP, "%s/test_batch.bin", dir);
    if (len < 0 || len >= PATH_CAP)
      return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                          "gcc_cifar10_load: the path under '%.200s...' is too long", dir);
    GCC_TRY(cifar_records(paths[k], &records[k], d));
    total += records[k];
  }
  uint8_t *images = malloc((size_t)total * CIFAR_PIXELS);
  uint8_t *labels = malloc((size_t)total);
  if (!images || !labels) {
    free(images);
    free(labels);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld images", dir,
                        (long long)total);
  }
  int64_t at = 0;
  for (int k = 0; k < n_files; k++) {
    gcc_status s = cifar_read(paths[k], records[k], images + at * CIFAR_PIXELS, labels + at, d);
    if (s != GCC_OK) {
      free(images);
      free(labels);
      return s;
    }
    at += records[k];
  }
  out->n = total;
  out->channels = CIFAR_CHANNELS;
  out->height = CIFAR_SIDE;
  out->width = CIFAR_SIDE;
  out->images = images;
  out->labels = labels;
  out->num_classes = 10;
  return GCC_OK;
}

void gcc_dataset_free(gcc_dataset *ds) {
  if (ds == NULL)
    return;
  free(ds->images);
  free(ds->labels);
  memset(ds, 0, sizeof *ds);
}
