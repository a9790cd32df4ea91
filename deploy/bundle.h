/*
 * bundle.h - .gccx deployment bundles: export of a trained model's
 * inference graph, and the checked reader that gcc-run and the C API
 * (deploy/gcc_api.h) load.
 *
 * File layout (all integers little-endian):
 *
 *   offset 0   8 bytes  magic "GCCX\r\n\x1a\n" (the PNG trick: a text-mode
 *                       transfer or a truncation to 7 bits breaks it)
 *   offset 8   uint32   format version: 1 for a float32 classifier bundle
 *                       (the layout of every bundle before
 *                       --export-precision), 2 for a classifier with 16-bit
 *                       weights (--export-precision bf16 or fp16), 3 for a
 *                       tensor bundle (a model whose output is not
 *                       classifier logits); see "Format versions" below
 *   offset 12  uint32   0 (reserved; a non-zero value is rejected)
 *   offset 16  uint64   payload size P
 *   offset 24  P bytes  one serialized gccx.Bundle (deploy/bundle.proto):
 *                       sections, each a name, bytes and the SHA-256 of
 *                       name + NUL + bytes
 *
 * Sections:
 *   manifest       JSON (schema "gcc-train.bundle/1"): format version,
 *                  gcc-train version, creation time (UTC, ISO 8601), the
 *                  source model, inputs and outputs (name, dtype, shape with
 *                  -1 for the batch; version 3: "kind", see below),
 *                  normalization (mean/std per channel of x = (byte / 255 -
 *                  mean) / std, the trainer's data loader),
 *                  the CUDA architectures with a cubin, the PTX target, and
 *                  every other section's name, size and SHA-256
 *   graph          a graph.proto Model: the inference graph (backward,
 *                  optimizer and loss pruned; outputs `logits` and
 *                  `probabilities` = Softmax(logits), or for a tensor
 *                  bundle the model's one output as it is), initializers
 *                  without their data
 *   weights        a graph.proto Graph holding only the initializers with
 *                  their data (float32 parameters and constants; in a
 *                  version 2 bundle of precision bf16 / fp16, the
 *                  initializers that the autocast pass rounds to that
 *                  dtype for every reader are stored in it: dtype
 *                  DT_BFLOAT16 / DT_FLOAT16, 2 bytes per element, little-
 *                  endian, rounded to nearest even as graph/half.h does;
 *                  the graph section keeps them float32)
 *   plan.cpu       the CPU plan's placement and memory report (JSON, schema
 *                  of runtime/placement_report.h), batch 1
 *
 * and, because generated kernels have their shapes as compile-time
 * constants (codegen/emit.h), per CUDA architecture sm_XX and per batch
 * size N of the manifest's batch_sizes:
 *   plan.sm_XX.bN     the CUDA plan's placement and memory report
 *   kernels.sm_XX.bN  the launch manifest of its generated kernels
 *                     (codegen/emit.h, schema "gcc-train.kernels/1")
 *   cubin.sm_XX.bN    the kernels compiled by NVRTC to SASS for sm_XX
 *   ptx.bN            the same kernels as PTX for compute_XX of the newest
 *                     architecture, which the driver JIT-compiles on newer
 *                     GPUs
 *   source.bN         the CUDA C they were compiled from (for inspection)
 * A plan on a GPU runs a batch of another size padded to the next larger
 * exported size (gcc_bundle_batch_for); the CPU compiles any batch size.
 *
 * Format versions. Version 1 is float32 throughout. Version 2 adds the
 * manifest's "precision" ("fp32", "bf16" or "fp16", gcc-train
 * --export-precision) and "weights" ({"dtype": the dtype of the 16-bit
 * tensors or "float32", "bytes": the tensor bytes of the weights section,
 * "float32_bytes": what they take in float32, "tensors_16bit": how many are
 * stored in 16 bits}). Its plans (plan.*, the kernels, cubins and PTX) are
 * compiled with the autocast pass at that precision (passes/autocast.c,
 * an EVAL plan: GEMMs and convolutions read and write 16 bits and
 * accumulate in float32; softmax, reductions and normalization in float32),
 * and every reader compiles the graph the same way. Readers widen the
 * 16-bit weights to float32 when loading (exact), so the plan's Cast of a
 * weight to 16 bits gives back exactly the stored bits: a bundle's outputs
 * are those of the trained model's own evaluation plan at that precision.
 * Inputs and outputs stay float32. gcc-train writes version 1 for float32
 * exports (older readers keep reading them) and version 2 only for 16-bit
 * ones, which a version 1 reader refuses by the header's version
 * (GCC_ERR_UNSUPPORTED: "bundle format version 2, but this gcc-train reads
 * version 1").
 *
 * Version 3 is a tensor bundle: the manifest of version 2 (precision,
 * weights; any precision) plus "kind": "tensor" (or "classifier"), and for
 * "tensor" exactly one output: the model's own output, any name, float32 of
 * shape [-1, d1, ...] (batch first, any rank >= 1), with no softmax added
 * (what ONNX Runtime returns for the model). gcc-train writes version 3 only
 * for such models (one input, one output that is not float32 (N, C)
 * logits), so classifier bundles keep versions 1 and 2 and the readers of
 * before refuse a tensor bundle by its header's version. A version 1 or 2
 * bundle is a classifier (kind GCC_BUNDLE_CLASSIFIER): outputs logits and
 * probabilities.
 *
 * Reading rejects, with GCC_ERR_PARSE and a message naming the file and,
 * where one is at fault, the section: a file shorter than the header, a
 * wrong magic, a non-zero reserved word, a payload size that disagrees with
 * the file's size (truncated, or bytes after the payload), a payload that is
 * not a Bundle, a section without a name or a checksum, a duplicated
 * section, a checksum mismatch, a manifest that is not the expected JSON, a
 * section the manifest does not list or lists with another size or SHA-256,
 * a section the manifest lists that is missing, and a graph or weights
 * section the model loader rejects; a manifest format_version other than
 * the header's; in version 2, a missing or unknown precision, a weights
 * summary that disagrees with the weights section, and a 16-bit weight
 * tensor whose dtype is not the precision's, whose graph initializer is
 * not float32 or whose byte count is not 2 per element; in version 1 any
 * 16-bit tensor; in version 3, a missing or unknown "kind", outputs other
 * than logits and probabilities for a classifier or other than one for a
 * tensor bundle, and a tensor output without -1 as dim 0. A format version outside [GCC_BUNDLE_FORMAT_VERSION_MIN,
 * GCC_BUNDLE_FORMAT_VERSION] is GCC_ERR_UNSUPPORTED naming both sides. Nothing is trusted before its
 * checksum is verified, and nothing crashes on any byte string.
 */
#ifndef GCC_DEPLOY_BUNDLE_H
#define GCC_DEPLOY_BUNDLE_H

#include <stddef.h>
#include <stdint.h>

#include "graph/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GCC_TRAIN_VERSION "0.1.0"
/* The newest bundle format version this reads and writes (3: a tensor
 * bundle; 2: a classifier with 16-bit weights), and the oldest it reads (1,
 * also what float32 classifier exports write). */
#define GCC_BUNDLE_FORMAT_VERSION     3u
#define GCC_BUNDLE_FORMAT_VERSION_MIN 1u
#define GCC_BUNDLE_MAGIC              "GCCX\r\n\x1a\n"
#define GCC_BUNDLE_HEADER_BYTES       24
#define GCC_BUNDLE_MAX_ARCHS          16
#define GCC_BUNDLE_MAX_BATCHES        8
/* The largest bundle file gcc_bundle_read reads (refused by its size). */
#define GCC_BUNDLE_MAX_BYTES ((size_t)1 << 30)

/* ---- reading ------------------------------------------------------------ */

typedef struct gcc_bundle gcc_bundle;

/* What a bundle's outputs are (deploy/bundle.h "Format versions"). */
typedef enum gcc_bundle_kind {
  /* outputs[0] logits, float32 [-1, C]; outputs[1] probabilities =
   * Softmax(logits, axis 1) (ONNX Softmax / torch.softmax(dim=1)); format
   * versions 1 and 2, or 3 with "kind": "classifier" */
  GCC_BUNDLE_CLASSIFIER = 0,
  /* outputs[0] only: the model's one output as the model computes it,
   * float32 [-1, d1, ...] (any rank >= 1, batch first); format version 3 */
  GCC_BUNDLE_TENSOR = 1,
} gcc_bundle_kind;

/* One tensor of the bundle's signature. */
typedef struct gcc_bundle_tensor {
  const char *name;
  gcc_dtype dtype;
  gcc_shape shape; /* dims[0] = -1: the batch */
} gcc_bundle_tensor;

/* What the manifest says (strings owned by the bundle). */
typedef struct gcc_bundle_info {
  uint32_t format_version;
  const char *gcc_train_version, *created, *model;
  gcc_bundle_tensor input; /* the one input (float32, [-1, ...]) */
  /* n_outputs of them: a classifier's logits and probabilities (float32
   * [-1, C], n_outputs 2), a tensor bundle's one output (float32
   * [-1, d1, ...], n_outputs 1; its name is the model's) */
  gcc_bundle_tensor outputs[2];
  int n_outputs;
  gcc_bundle_kind kind;
  int n_mean, n_std; /* normalization of raw image bytes */
  float mean[GCC_MAX_CHANNELS], std[GCC_MAX_CHANNELS];
  int cubin_archs[GCC_BUNDLE_MAX_ARCHS]; /* 10 * major + minor, ascending */
  int n_cubin_archs;
  int ptx_arch;                                /* compute_XX of the PTX, 0 if none */
  int64_t batch_sizes[GCC_BUNDLE_MAX_BATCHES]; /* of the CUDA kernels, ascending */
  int n_batch_sizes;
  /* What the plans compute in (graph/ir.h gcc_precision): GCC_PRECISION_FP32
   * for every version 1 bundle, else the manifest's (FP32, BF16 or FP16).
   * Every plan of the bundle is compiled at it (gcc_options.precision). */
  int precision;
  /* The weights section's tensor data: bytes as stored (16-bit tensors at 2
   * bytes per element), the same with the 16-bit tensors widened to float32
   * (4 bytes per element: what the reader holds in memory), and how many
   * tensors are stored in 16 bits (of n_weight_tensors). Computed from the
   * section itself (a version 2 manifest's "weights" must agree). */
  uint64_t weight_bytes, weight_bytes_fp32;
  int n_weights_16bit, n_weight_tensors;
} gcc_bundle_info;

/* Parses and verifies `size` bytes of a bundle (see the top of this file
 * for every check); `source` names it in messages. On success the caller
 * frees *out with gcc_bundle_free. The bytes are copied. */
gcc_status gcc_bundle_parse(const uint8_t *bytes, size_t size, const char *source, gcc_bundle **out,
                            gcc_diag *d);

/* Reads the file at `path` and parses it (GCC_ERR_IO naming the path when
 * it cannot be read). A model file in place of a bundle:
 * gcc_bundle_open (deploy/model_bundle.h). */
gcc_status gcc_bundle_read(const char *path, gcc_bundle **out, gcc_diag *d);

void gcc_bundle_free(gcc_bundle *b);

const gcc_bundle_info *gcc_bundle_get_info(const gcc_bundle *b);

/* The inference graph with its weights (owned by the bundle). */
const gcc_graph *gcc_bundle_graph(const gcc_bundle *b);

/* The bytes of section `name` (owned by the bundle, valid until it is
 * freed). GCC_ERR_INVALID_ARGUMENT naming the section when there is none. */
gcc_status gcc_bundle_section(const gcc_bundle *b, const char *name, const void **data,
                              size_t *size, gcc_diag *d);

/* ---- kernel image choice ------------------------------------------------ */

typedef enum gcc_image_kind {
  GCC_IMAGE_CUBIN = 0, /* SASS: loaded as is, no JIT, no NVRTC */
  GCC_IMAGE_PTX,       /* PTX: the driver JIT-compiles it for the device */
} gcc_image_kind;

typedef struct gcc_kernel_image {
  gcc_image_kind kind;
  int arch; /* the cubin's sm_XX or the PTX's compute_XX, as 10 * major + minor */
} gcc_kernel_image;

/* Chooses the kernel image for a device of compute capability
 * `device_arch` (10 * major + minor) by the CUDA binary compatibility
 * rules: a cubin for sm_XY runs on a device of the same major version X and
 * a minor >= Y (the largest such minor wins); otherwise PTX for compute_XY
 * runs on any device with arch >= XY. A pure function.
 * `cubin_archs` may be NULL when n_cubins is 0; `ptx_arch` is 0 for none;
 * `device` describes the device in the message ("cuda:0 (NVIDIA A10)").
 * Errors: GCC_ERR_UNSUPPORTED when neither fits, e.g. "bundle has cubin for
 * sm_80, sm_90 and PTX for compute_90; device cuda:0 (NVIDIA V100) is sm_70:
 * no cubin for sm_7x with a minor <= 0, and PTX for compute_90 needs sm_90
 * or newer"; GCC_ERR_INVALID_ARGUMENT for a device_arch <= 0. */
gcc_status gcc_kernel_image_select(const int *cubin_archs, int n_cubins, int ptx_arch,
                                   int device_arch, const char *device, gcc_kernel_image *out,
                                   gcc_diag *d);

/* The smallest exported batch size >= `rows` (the batch a plan on a GPU
 * pads `rows` rows to), or 0 if rows exceeds them all. */
int64_t gcc_bundle_batch_for(const gcc_bundle *b, int64_t rows);

/* The hook for plans on a GPU: selects the image for a device of
 * `device_arch` and kernels compiled for batch size `batch` (one of the
 * manifest's batch_sizes) from the bundle (gcc_kernel_image_select) and
 * returns its
 * bytes (`image`: cubin ELF, or NUL-terminated PTX text; `image_size`
 * without the NUL) and the launch manifest JSON of those kernels
 * (`launches`, NUL-terminated, schema "gcc-train.kernels/1", naming every
 * kernel with its grid, block and arguments). The bytes are owned by the
 * bundle. Load them with cudaLibraryLoadData; NVRTC is not needed. Errors:
 * those of gcc_kernel_image_select; GCC_ERR_UNSUPPORTED naming the
 * exported batch sizes when `batch` is not one of them. */
gcc_status gcc_bundle_kernel_image(const gcc_bundle *b, int device_arch, int64_t batch,
                                   const char *device, gcc_kernel_image *img, const void **image,
                                   size_t *image_size, const char **launches, gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_DEPLOY_BUNDLE_H */
