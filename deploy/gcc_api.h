/*
 * gcc_api.h - the C API for deploying exported models: open a .gccx bundle
 * (written by `gcc-train MODEL.pb --export OUT.gccx`, format in
 * deploy/bundle.h), create an inference session on a device, set the
 * input, run, read the outputs, close.
 *
 *   gccx_bundle *b;  gccx_session *s;  gcc_diag d = {0};
 *   gccx_bundle_open("mnist.gccx", &b, &d);
 *   gccx_session_options o = {"cpu", 1, 0};
 *   gccx_session_create(b, &o, &s, &d);
 *   gccx_set_input_images(s, pixels, 1, &d);        // or gccx_set_input
 *   gccx_run(s, &d);
 *   gccx_get_output(s, "probabilities", &p, &rows, &cols, &d);
 *   gccx_session_destroy(&s);  gccx_bundle_close(&b);
 *
 * Semantics: a classifier bundle's inference graph is the trained model's
 * forward pass up to its logits (float32 (N, C)), plus probabilities =
 * Softmax(logits) along the classes (ONNX Softmax / torch.softmax, dim 1).
 * A tensor bundle (info->kind GCC_BUNDLE_TENSOR: a model of one input and
 * one output that is not (N, C) logits, e.g. nn.TransformerEncoder's
 * (N, T, C)) has that one output as the model computes it, under its own
 * name, no softmax: what ONNX Runtime's session.run returns. Callers size
 * their buffers from gccx_bundle_output_count / gccx_bundle_output.
 *
 * Conventions:
 *  - Every fallible function returns a gcc_status (graph/status.h) and, on
 *    failure, fills the caller's gcc_diag (which may be NULL) with a message
 *    naming the bundle, input, output or device at fault. Nothing prints
 *    or exits.
 *  - Handles are opaque. A NULL handle is GCC_ERR_INVALID_ARGUMENT, and the
 *    close/destroy functions take the handle's address and set it to NULL,
 *    so a closed handle reads as NULL afterwards instead of dangling.
 *  - Ownership: a session holds a reference to its bundle; closing the
 *    bundle while sessions exist is allowed (they keep working, and the
 *    bundle's memory goes with the last of them). Pointers returned by
 *    getters are owned by the bundle or session and stay valid as stated.
 *  - Thread safety: the bundle is read-only after opening and its
 *    reference count is atomic, so sessions of one bundle may be created,
 *    run and destroyed on different threads at once; one session must not
 *    be used by two threads at once. (OpenBLAS's thread count is process
 *    wide: concurrent CPU sessions with different `threads` share it.)
 */
#ifndef GCC_RUNTIME_GCC_API_H
#define GCC_RUNTIME_GCC_API_H

#include <stddef.h>
#include <stdint.h>

#include "graph/status.h"
#include "deploy/bundle.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gccx_bundle gccx_bundle;
typedef struct gccx_session gccx_session;

/* Opens and verifies the bundle at `path` (every check of deploy/bundle.h:
 * magic, version, sizes, SHA-256 of every section, manifest, graph).
 * A model file instead of a bundle (an ONNX model or a gcc-train .pb,
 * recognised by content: onnx/model_file.h) is opened as the CPU-only
 * bundle of its inference graph (deploy/model_bundle.h): its one input
 * must have a symbolic batch dim 0 and its training prediction be float32
 * (N, C) logits, or, without a training spec, its one output be float32
 * with the batch as dim 0 ((N, C): a classifier; any other shape: a
 * tensor bundle); errors are then the model
 * loader's (GCC_ERR_PARSE, GCC_ERR_INVALID_GRAPH, GCC_ERR_UNSUPPORTED,
 * GCC_ERR_SHAPE naming the file and node).
 * Errors: GCC_ERR_INVALID_ARGUMENT (NULL path or out); GCC_ERR_IO (cannot
 * read the file); GCC_ERR_PARSE (corrupt, truncated or inconsistent,
 * naming the section); GCC_ERR_UNSUPPORTED (another format version);
 * GCC_ERR_OUT_OF_MEMORY. On failure *out is NULL. */
gcc_status gccx_bundle_open(const char *path, gccx_bundle **out, gcc_diag *d);

/* The same from `size` bytes in memory (copied; `name` names them in
 * messages, NULL: "<memory>"). */
gcc_status gccx_bundle_open_memory(const void *bytes, size_t size, const char *name,
                                   gccx_bundle **out, gcc_diag *d);

/* Drops the caller's reference and sets *b to NULL. NULL and *b == NULL are
 * accepted. */
void gccx_bundle_close(gccx_bundle **b);

/* The bundle's manifest: input (name, float32, shape [-1, C, H, W] or
 * [-1, F]), kind and outputs (a classifier: logits and probabilities,
 * float32 [-1, classes]; a tensor bundle: its one output, float32
 * [-1, d1, ...]; info->n_outputs of info->outputs),
 * normalization, CUDA architectures, versions, and the precision with the
 * weights' bytes (info->precision: GCC_PRECISION_FP32, BF16 or FP16 of
 * graph/ir.h; weight_bytes as stored, weight_bytes_fp32 in float32,
 * n_weights_16bit of n_weight_tensors stored in 16 bits; deploy/bundle.h).
 * Inputs and outputs are float32 whatever the precision. Owned by the
 * bundle, valid until it is freed. Errors: GCC_ERR_INVALID_ARGUMENT for a
 * NULL bundle. */
gcc_status gccx_bundle_info(const gccx_bundle *b, const gcc_bundle_info **info, gcc_diag *d);

/* How many outputs the bundle has: 2 for a classifier (logits,
 * probabilities), 1 for a tensor bundle. Errors: GCC_ERR_INVALID_ARGUMENT
 * for a NULL bundle or n. */
gcc_status gccx_bundle_output_count(const gccx_bundle *b, int *n, gcc_diag *d);

/* Output `index` (0 to count - 1, in the order of the manifest: logits
 * then probabilities for a classifier): name, dtype (always float32) and
 * shape with dims[0] = -1 for the batch; a run of R rows gives R x
 * dims[1] x ... x dims[ndim - 1] floats in C order (gccx_get_output's
 * rows x cols). Owned by the bundle, valid until it is freed. Errors:
 * GCC_ERR_INVALID_ARGUMENT for a NULL bundle or out, or an index out of
 * range (the message gives the count). */
gcc_status gccx_bundle_output(const gccx_bundle *b, int index, const gcc_bundle_tensor **out,
                              gcc_diag *d);

/* The underlying bundle (sections, graph; deploy/bundle.h), owned by `b`;
 * NULL for a NULL handle. */
const gcc_bundle *gccx_bundle_raw(const gccx_bundle *b);

typedef struct gccx_session_options {
  const char *device; /* "cpu", "cuda", "cuda:N" or "auto" (NULL: "auto") */
  int threads;        /* OpenBLAS threads at most on the CPU (<= 0: online CPUs) */
  int64_t max_batch;  /* most rows one run takes (<= 0: 1) */
} gccx_session_options;

/* Creates a session on o->device. Its plans are compiled at the bundle's
 * precision (info->precision): for a bf16 / fp16 bundle (gcc-train
 * --export-precision) the autocast pass's plan, whose GEMMs and
 * convolutions read and write 16 bits and accumulate in float32 (on the
 * CPU: computed in float32, rounded to 16 bits where the GPU stores 16
 * bits; runtime/plan.c), so the outputs are those of the trained model's
 * evaluation plan at that precision. The 16-bit weights are held widened
 * to float32 (exact; 4 bytes per element in memory, on a GPU too) and
 * rounded back, exactly, by the plan's Cast of each weight. "auto" uses a
 * usable CUDA GPU, else the
 * CPU, and says why in `note` (may be NULL; "" when there is nothing to
 * say). On a CUDA device the session first chooses the kernel image
 * (gcc_bundle_kernel_image: a cubin for the device's architecture, else the
 * PTX; NVRTC is never used) compiled for the smallest exported batch size
 * >= max_batch (runs of fewer rows are padded to it), uploads the weights
 * once, and runs the device plan (runtime/plan.h) with the kernels
 * loaded from that image. A run of R rows uses the smallest exported batch
 * size >= R, padded with zeros; outputs then have R rows.
 * Errors: GCC_ERR_INVALID_ARGUMENT (NULL handle, bad device string);
 * GCC_ERR_DEVICE (a CUDA device that is missing or cannot run plans, with
 * the device's reason); GCC_ERR_UNSUPPORTED (no kernel image fits the
 * device: the message names the bundle's architectures and the device's;
 * or max_batch exceeds every exported batch size);
 * compile errors of the bundle's graph; GCC_ERR_OUT_OF_MEMORY. */
gcc_status gccx_session_create(gccx_bundle *b, const gccx_session_options *o, gccx_session **out,
                               char *note, size_t note_cap, gcc_diag *d);

/* Frees the session (and the bundle, if it was closed and this was its last
 * session) and sets *s to NULL. NULL and *s == NULL are accepted. */
void gccx_session_destroy(gccx_session **s);

/* The device the session runs on ("cpu", "cuda:0"); NULL for NULL. */
const char *gccx_session_device(const gccx_session *s);

/* Copies `rows` samples of input `name` (float32, C order, rows x the
 * input's per-sample shape, already normalized) into the session: on the
 * CPU into the buffer the plan reads; on a GPU straight into the pinned
 * (cudaHostAlloc) staging buffer of the plan for `rows` rows (zero padding
 * rows after them), from which its H2D is issued at once on the copy
 * stream, so that it overlaps the batch the GPU is still computing (the
 * results of the last gccx_run stay readable). One host copy per batch;
 * it may wait for the batch before the last one to finish with that
 * staging buffer (double buffering). On a GPU a row count that needs
 * another exported batch size compiles (or switches to) that plan here.
 * Errors: GCC_ERR_INVALID_ARGUMENT for a NULL handle or data, an unknown
 * input name (the message names the bundle's input), or rows outside
 * [1, max_batch]. */
gcc_status gccx_set_input(gccx_session *s, const char *name, const float *data, int64_t rows,
                          gcc_diag *d);

/* Sets the input from raw image bytes (uint8, rows x C x H x W, NCHW, 0 =
 * background), normalized exactly as the trainer's data loader does:
 * x = ((float)byte / 255.0f - mean[c]) / std[c] in float32, with mean[0]
 * and std[0] for every channel when the bundle has one of each, and 0 / 1
 * when it has none. Errors: as gccx_set_input. */
gcc_status gccx_set_input_images(gccx_session *s, const uint8_t *pixels, int64_t rows, gcc_diag *d);

/* Runs the inference graph on the rows last set. On the CPU the run is
 * done when this returns. On a GPU it is issued and this returns without
 * waiting (gccx_get_output waits for it): the plan of each batch size
 * replays its forward from a CUDA Graph, captured per input slot on the
 * slot's second use (the 3rd and 4th run of that batch size; the runs
 * before are launched kernel by kernel and give bitwise the same outputs),
 * unless a capture fails (then launches, gccx_session_stats says why).
 * Errors: GCC_ERR_INVALID_ARGUMENT (NULL handle, no input set yet);
 * compile errors for a new row count; GCC_ERR_DEVICE from the device. */
gcc_status gccx_run(gccx_session *s, gcc_diag *d);

/* Output `name` ("logits" or "probabilities" of a classifier; a tensor
 * bundle's one output by its name, gccx_bundle_output) of the last run:
 * *data points at rows x cols float32 values in C order, cols being the
 * values per row (classes; for an output of shape [-1, d1, ..., dk],
 * d1 x ... x dk: the row-major flattening of each row), owned by the
 * session and valid until the next gccx_run or gccx_session_destroy
 * (setting the next input keeps them). On a GPU the first call after a run
 * waits for that run (not for the device as a whole: an input H2D issued
 * since may still be in flight) and brings every output back in one D2H
 * into pinned memory, which *data then points into. Errors:
 * GCC_ERR_INVALID_ARGUMENT for a NULL handle or pointer, an unknown output
 * name (the message lists the outputs), or no run yet (or its batch
 * size's plan was replaced by a third batch size since); GCC_ERR_DEVICE
 * from the device. */
gcc_status gccx_get_output(const gccx_session *s, const char *name, const float **data,
                           int64_t *rows, int64_t *cols, gcc_diag *d);

/* How a session's runs went on the device (gcc-run prints it): */
typedef struct gccx_run_stats {
  int64_t runs;     /* gccx_run calls that ran or issued a batch */
  int64_t replays;  /* of them, replayed from a CUDA Graph (a GPU session) */
  int64_t captures; /* CUDA Graphs captured: per batch size, one per input slot */
  int64_t plans;    /* plans compiled: one per batch size used (a GPU: exported batch size) */
  /* why the last run's plan is not replayed: "" when it is (or will be
   * from its slots' second use), "not used: the capture failed (WHY);
   * launches instead", "disabled (...)"; "the CPU runs no CUDA Graphs" */
  char graph_note[256];
} gccx_run_stats;

/* Fills *out. Errors: GCC_ERR_INVALID_ARGUMENT for a NULL handle or out. */
gcc_status gccx_session_stats(const gccx_session *s, gccx_run_stats *out, gcc_diag *d);

/* on = 0: a GPU session launches every batch kernel by kernel from now on,
 * never replaying a CUDA Graph (gcc-run --no-cuda-graph; graph_note then
 * says "disabled (--no-cuda-graph)"); 1: replays again (the default). The
 * compiled plans are dropped and compiled again at the next input (their
 * last results with them); no effect on the CPU. Errors:
 * GCC_ERR_INVALID_ARGUMENT for a NULL handle. */
gcc_status gccx_session_set_cuda_graphs(gccx_session *s, int on, gcc_diag *d);

/* The kernel image a CUDA session loaded (the CUDA plan runner's hook):
 * what gcc_bundle_kernel_image returned for the session's device. Errors:
 * GCC_ERR_INVALID_ARGUMENT for a NULL handle or a CPU session. */
gcc_status gccx_session_kernel_image(const gccx_session *s, gcc_kernel_image *img,
                                     const void **image, size_t *image_size, const char **launches,
                                     gcc_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_GCC_API_H */
