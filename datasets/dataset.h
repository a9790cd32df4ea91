/*
 * dataset.h - an in-memory image classification data set and the reader for
 * the IDX files that MNIST is distributed in.
 *
 * The IDX format (Y. LeCun, C. Cortes, C. J. C. Burges, "THE MNIST DATABASE
 * of handwritten digits", http://yann.lecun.com/exdb/mnist/, section "FILE
 * FORMATS FOR THE MNIST DATABASE"):
 *
 *   bytes 0-1  0x00 0x00
 *   byte  2    type code of the elements: 0x08 unsigned byte, 0x09 signed
 *              byte, 0x0B short (2 bytes), 0x0C int (4 bytes), 0x0D float
 *              (4 bytes), 0x0E double (8 bytes)
 *   byte  3    number of dimensions (1 for vectors, 2 for matrices, ...)
 *   then       one 32-bit big-endian (MSB first) size per dimension
 *   then       the data, in C order (the last dimension changes fastest),
 *              multi-byte elements big-endian.
 *
 * MNIST uses type 0x08: labels are an IDX1 file (magic 0x00000801, n), images
 * an IDX3 file (magic 0x00000803, n, 28, 28) with one byte per pixel, 0 the
 * background and 255 the ink. The files are usually served gzip-compressed;
 * the reader accepts both forms (zlib's gzread passes plain files through).
 */
#ifndef GCC_RUNTIME_DATASET_H
#define GCC_RUNTIME_DATASET_H

#include <stdint.h>

#include "graph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A labelled image data set held in memory.
 *
 * images holds n samples back to back; sample i starts at
 * images + i * channels * height * width and is stored channel-major, then
 * row-major (NCHW for the whole array): pixel (c, y, x) of sample i is
 * images[((i * channels + c) * height + y) * width + x], a uint8 in [0, 255].
 * labels[i] is the class index of sample i, in [0, num_classes).
 *
 * The struct owns both arrays; release them with gcc_dataset_free. A
 * zero-initialised gcc_dataset is empty and may be freed. */
/* The most data bytes gcc_idx_read takes from one file (decompressed):
 * MNIST's training images are 47 MB. */
#define GCC_IDX_MAX_BYTES ((uint64_t)4 << 30)

typedef struct gcc_dataset {
  int64_t n;                       /* number of samples */
  int64_t channels, height, width; /* MNIST: 1, 28, 28 */
  uint8_t *images;                 /* n * channels * height * width bytes */
  uint8_t *labels;                 /* n class indices */
  int64_t num_classes;             /* MNIST: 10 */
} gcc_dataset;

/* Reads the IDX file at `path`, whose elements must be unsigned bytes (type
 * code 0x08) and which must have exactly `expect_ndim` dimensions (1 to 4).
 * The file may be gzip-compressed or plain; the content is detected, not the
 * name.
 *
 * On success returns GCC_OK, sets dims[0 .. expect_ndim-1] to the sizes in
 * the file's order (outermost first), sets the remaining entries of dims to
 * 1 (so the product of all four is the element count), and sets *data to a
 * malloc'd array of that many bytes in the file's (C) order; the caller
 * frees it with free().
 *
 * On failure sets *data = NULL and every dims[i] = 0, fills d (may be NULL)
 * with a message that begins with `path`, and returns:
 *   GCC_ERR_INVALID_ARGUMENT  path, dims or data is NULL, or expect_ndim is
 *                             not in [1, 4];
 *   GCC_ERR_IO                the file cannot be opened or read (missing,
 *                             no permission, a directory, read error);
 *   GCC_ERR_PARSE             the bytes are not a valid IDX file of the
 *                             expected shape: header shorter than 4 + 4*ndim
 *                             bytes, first two bytes not zero (bad magic),
 *                             unknown type code, ndim != expect_ndim, a
 *                             dimension of 0, a total size that overflows
 *                             int64/size_t, fewer data bytes than the
 *                             dimensions promise (truncated file or gzip
 *                             stream), bytes after the data (trailing
 *                             garbage), or a corrupt gzip stream;
 *   GCC_ERR_UNSUPPORTED       a valid IDX type code other than 0x08 (signed
 *                             bytes, shorts, ints, floats, doubles);
 *   GCC_ERR_OUT_OF_MEMORY     the data buffer could not be allocated.
 *
 * Memory grows with the bytes actually read, so a corrupt header that
 * promises gigabytes does not allocate them before the file runs out. */
gcc_status gcc_idx_read(const char *path, int expect_ndim, int64_t dims[4], uint8_t **data,
                        gcc_diag *d);

/* Loads MNIST (or any data set in the same four-file layout, such as
 * Fashion-MNIST) from directory `dir`: the training set if `train` is
 * non-zero (train-images-idx3-ubyte, train-labels-idx1-ubyte), otherwise the
 * test set (t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte). For each file
 * "<name>.gz" is used if it exists, otherwise "<name>".
 *
 * The images file must be IDX type 0x08 with 3 dimensions (n, height, width;
 * any positive height and width are accepted, MNIST has 28 x 28), the labels
 * file IDX type 0x08 with 1 dimension (n).
 *
 * On success returns GCC_OK and fills *out: n samples, channels = 1,
 * height and width from the images file, num_classes = 10, images and labels
 * owned by *out (release with gcc_dataset_free).
 *
 * On failure *out is zeroed (and may still be passed to gcc_dataset_free),
 * d (may be NULL) gets a message that names the file at fault, and the
 * status is:
 *   GCC_ERR_INVALID_ARGUMENT  dir or out is NULL, or a path would be longer
 *                             than 4095 bytes;
 *   GCC_ERR_IO                neither "<name>.gz" nor "<name>" can be opened
 *                             (the message names both), or a read error;
 *   GCC_ERR_PARSE             any IDX error of gcc_idx_read, the image and
 *                             label counts differ (the message names both
 *                             files), or a label is >= 10 (the message names
 *                             the labels file and the sample index);
 *   GCC_ERR_UNSUPPORTED       a file's IDX type code is not 0x08;
 *   GCC_ERR_OUT_OF_MEMORY     an allocation failed. */
gcc_status gcc_mnist_load(const char *dir, int train, gcc_dataset *out, gcc_diag *d);

/* Loads CIFAR-10 in its binary version (A. Krizhevsky, "Learning Multiple
 * Layers of Features from Tiny Images", 2009; the "CIFAR-10 binary version"
 * of https://www.cs.toronto.edu/~kriz/cifar.html) from directory `dir`:
 * the training set if `train` is non-zero (data_batch_1.bin ...
 * data_batch_5.bin, concatenated in that order), otherwise the test set
 * (test_batch.bin). Each file is a sequence of 3073-byte records: one label
 * byte (0-9), then 3072 pixel bytes, the 1024 red, then green, then blue
 * values of a 32x32 image, rows first. The official files hold 10000
 * records each; any positive whole number of records is accepted (so tests
 * can write small files in the same format).
 *
 * On success returns GCC_OK and fills *out: channels = 3, height = width =
 * 32, the images in NCHW order (the record layout), num_classes = 10.
 *
 * On failure *out is zeroed, d (may be NULL) gets a message that names the
 * file at fault, and the status is:
 *   GCC_ERR_INVALID_ARGUMENT  dir or out is NULL, or a path would be longer
 *                             than 4095 bytes;
 *   GCC_ERR_IO                a file is missing, not a regular file, or
 *                             cannot be read (the message lists the files
 *                             the data set needs);
 *   GCC_ERR_PARSE             a file is empty or its size is not a whole
 *                             number of 3073-byte records (truncated or not
 *                             CIFAR-10), or a label byte is >= 10 (the
 *                             message names the record);
 *   GCC_ERR_OUT_OF_MEMORY     an allocation failed. */
gcc_status gcc_cifar10_load(const char *dir, int train, gcc_dataset *out, gcc_diag *d);

/* The CIFAR-10 class names in label order, as the PyTorch tutorial spells
 * them: plane car bird cat deer dog frog horse ship truck. */
extern const char *const gcc_cifar10_classes[10];

/* Frees the arrays of ds and zeroes it. NULL and already-freed (zeroed)
 * data sets are accepted. */
void gcc_dataset_free(gcc_dataset *ds);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_DATASET_H */
