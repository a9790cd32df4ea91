/*
 * npy.h - reading float32 arrays from NumPy .npy files (gcc-run --input).
 *
 * Format (NumPy's "NEP 1" / numpy.lib.format): the magic "\x93NUMPY", a
 * major and a minor version byte, the header length (uint16 little-endian
 * for version 1.0, uint32 for 2.0 and 3.0), then that many bytes of a
 * Python dict literal padded with spaces and ending in '\n':
 *     {'descr': '<f4', 'fortran_order': False, 'shape': (10000, 1, 28, 28), }
 * then the data, C order when fortran_order is False.
 *
 * Accepted: versions 1.0, 2.0 and 3.0; descr '<f4' (little-endian float32;
 * '=f4' too, on this little-endian host); fortran_order False; a shape of
 * 1 to 8 dims, each > 0; exactly numel * 4 data bytes.
 */
#ifndef GCC_RUNTIME_NPY_H
#define GCC_RUNTIME_NPY_H

/* The largest .npy file gcc_npy_read_f32 reads (refused by its size). */
#define GCC_NPY_MAX_BYTES ((size_t)4 << 30)

#include <stddef.h>
#include <stdint.h>

#include "datasets/dataset.h"
#include "graph/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A parsed .npy header: the array's dtype (float32, int64, int32 or
 * uint8), shape, element count and a pointer to its C-order data inside the
 * bytes given (not copied). */
typedef struct gcc_npy_array {
  gcc_dtype dtype;
  char descr[8]; /* as in the file: "<f4", "|u1", ... */
  size_t elem;   /* bytes per element */
  gcc_shape shape;
  int64_t numel;
  const uint8_t *data;
} gcc_npy_array;

/* Parses the header of `size` bytes of a .npy file and checks that the
 * data is exactly numel elements. Errors as gcc_npy_parse_f32's, with
 * GCC_ERR_UNSUPPORTED for dtypes other than '<f4', '<i8', '<i4', '|u1'. */
gcc_status gcc_npy_parse_header(const uint8_t *bytes, size_t size, const char *source,
                                gcc_npy_array *arr, gcc_diag *d);

/* Parses `size` bytes of a .npy file (`source` names it in messages). On
 * success *shape is the array's shape and *data a malloc'ed copy of its
 * numel float32 values (the caller frees it). Errors, with *data = NULL:
 * GCC_ERR_PARSE (bad magic, version, header or dict, a missing key, data
 * shorter or longer than the shape needs); GCC_ERR_UNSUPPORTED (a dtype
 * other than float32, big-endian data, fortran_order True, more than 8
 * dims); GCC_ERR_OUT_OF_MEMORY. Messages name the source. */
gcc_status gcc_npy_parse_f32(const uint8_t *bytes, size_t size, const char *source,
                             gcc_shape *shape, float **data, gcc_diag *d);

/* Reads the file at `path` (GCC_ERR_IO when it cannot be read) and parses
 * it. */
gcc_status gcc_npy_read_f32(const char *path, gcc_shape *shape, float **data, gcc_diag *d);

/* Encodes a float32 array as a .npy file (version 1.0, '<f4', C order, the
 * header padded to 64 bytes) in a malloc'ed buffer the caller frees.
 * Errors: GCC_ERR_INVALID_ARGUMENT (a shape of 0 or more than 8 dims, a dim
 * <= 0), GCC_ERR_OUT_OF_MEMORY. */
gcc_status gcc_npy_encode_f32(const gcc_shape *shape, const float *data, uint8_t **bytes,
                              size_t *size, gcc_diag *d);

/* Writes arrays names[i] (shape shapes[i], float32 data[i]) as NumPy's
 * .npz: a zip archive (stored, no compression; CRC-32 from zlib) holding
 * "<name>.npy" per array, which numpy.load reads as a dict of arrays.
 * Written atomically to `path` (gcc_write_file_atomic). Errors: those of
 * gcc_npy_encode_f32, GCC_ERR_UNSUPPORTED past the 4 GiB of a zip without
 * ZIP64, GCC_ERR_IO naming the path. */
gcc_status gcc_npz_write(const char *path, const char *const *names, const gcc_shape *shapes,
                         const float *const *data, int n, gcc_diag *d);

/* A labelled image set from NumPy arrays, for `--dataset npy` (PyTorch
 * users' own data as np.save / np.savez write it) of uint8 images and
 * class indices (float32 inputs or regression targets are read with
 * gcc_npy_load_pair below and fed as rows by the trainer).
 *
 * `path` is a folder holding x_train.npy, y_train.npy, x_test.npy and
 * y_test.npy, or a .npz archive (read with libzip; stored or deflated)
 * holding arrays of those names. `train` picks the pair. x: uint8 images
 * of shape (N, H, W) (one channel), (N, C, H, W) or (N, D) (taken as
 * 1 x 1 x D), pixels 0..255 that the data loader scales as ToTensor +
 * Normalize; y: class indices of shape (N), int64, int32 or uint8, in
 * [0, 255]. .npy files are memory-mapped (no second copy of a large file
 * while it is read). The result is what gcc_mnist_load gives for MNIST.
 * Errors name the file and its shape or dtype: GCC_ERR_IO (a file
 * missing: its path), GCC_ERR_PARSE (not .npy / .npz), GCC_ERR_SHAPE (x
 * and y disagree on N, y not 1-D, x of 1 or more than 4 dims),
 * GCC_ERR_UNSUPPORTED (x not uint8, y not an integer type, a label out of
 * [0, 255]). */
gcc_status gcc_npy_dataset_load(const char *path, int train, gcc_dataset *out, gcc_diag *d);

/* One array of a .npy file or .npz entry as it is: dtype (float32, int64,
 * int32 or uint8), shape and a malloc'ed copy of its C-order elements. */
typedef struct gcc_npy_tensor {
  gcc_dtype dtype;
  char descr[8]; /* as in the file: "<f4", "|u1", ... */
  gcc_shape shape;
  int64_t numel;
  void *data;
  char name[4200]; /* the file (or archive:entry) it came from, for messages */
} gcc_npy_tensor;

/* The pair x_train.npy / y_train.npy (`train`) or x_test.npy / y_test.npy
 * of `path` (a folder or a .npz, as gcc_npy_dataset_load) as they are, for
 * float32 inputs of any shape and float32 regression targets: the trainer
 * checks them against the model's input and target. Errors name the file:
 * those of gcc_npy_dataset_load for reading and parsing; GCC_ERR_SHAPE when
 * x has fewer than 2 dims or x and y disagree on dim 0 (the samples). On
 * failure both are empty. Free with gcc_npy_tensor_free. */
gcc_status gcc_npy_load_pair(const char *path, int train, gcc_npy_tensor *x, gcc_npy_tensor *y,
                             gcc_diag *d);
void gcc_npy_tensor_free(gcc_npy_tensor *t);

/* 1 if the bytes start with the .npy magic. */
int gcc_npy_is_npy(const uint8_t *bytes, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_NPY_H */
