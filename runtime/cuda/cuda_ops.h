/*
 * cuda_ops.h - the CUDA backend's per-op table: for each op that
 * codegen/lowering.c lowers to a LIBRARY call, the cuDNN call that runs it
 * and where its operands are among the node's inputs and outputs. Plain
 * data (no CUDA header): runtime/cuda/cuda_backend.c issues the calls,
 * runtime/cuda/cudnn_conv.c reads the geometry.
 */
#ifndef GCC_RUNTIME_CUDA_CUDA_OPS_H
#define GCC_RUNTIME_CUDA_CUDA_OPS_H

#ifdef __cplusplus
extern "C" {
#endif

/* The library calls of the CUDA backend (runtime/cuda/cudnn_conv.h). */
typedef enum gcc_cuda_call {
  GCC_CUDA_CALL_UNSET = 0,            /* an entry left empty (tests/op_tables_test fails) */
  GCC_CUDA_CALL_NONE,                 /* not a library call on this backend */
  GCC_CUDA_CALL_CONV_FORWARD,         /* cudnnConvolutionForward (+ cudnnAddTensor: bias) */
  GCC_CUDA_CALL_CONV_BACKWARD_DATA,   /* cudnnConvolutionBackwardData */
  GCC_CUDA_CALL_CONV_BACKWARD_FILTER, /* cudnnConvolutionBackwardFilter */
  GCC_CUDA_CALL_CONV_BACKWARD_BIAS,   /* cudnnConvolutionBackwardBias */
  GCC_CUDA_CALL_POOL_FORWARD,         /* cudnnPoolingForward */
  GCC_CUDA_CALL_POOL_BACKWARD,        /* cudnnPoolingBackward */
  GCC_CUDA_CALL_CONV_TRANSPOSE,       /* cudnnConvolutionBackwardData with x as its dy and y as
                                        its dx (+ cudnnAddTensor: bias) */
  GCC_CUDA_CALL_ALL_REDUCE,           /* the communicator's all-reduce (runtime/comm.h: NCCL)
                                        of the bucket's gradients, each input in place */
} gcc_cuda_call;

/* An operand slot: input k, output k, or none (0). */
#define GCC_CUDA_IN(k)  ((k) + 1)
#define GCC_CUDA_OUT(k) (-(k)-1)

/* One entry (runtime/cuda/cuda_ops.c). The operands of the call are named
 * as cuDNN names them (x, w, b, y and their gradients dx, dw, db, dy);
 * `xs` and `ws` are where the shapes of X [N, C, H, W] and W [M, C, kh,
 * kw] are found, which the descriptors are made from. */
typedef struct gcc_cuda_op {
  gcc_cuda_call call;
  int xs, ws;                     /* shape slots: X, and W (convolutions) */
  int x, w, b, y, dx, dw, db, dy; /* operand slots of the call */
  int max_pool;                   /* pooling: 1 max, 0 average (count_include_pad
                                             from the node's attributes) */
  const char *none;               /* GCC_CUDA_CALL_NONE: how the op runs instead */
} gcc_cuda_op;

/* The entry of op `op`; NULL when `op` is out of range. */
const gcc_cuda_op *gcc_cuda_op_of(int op);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_CUDA_CUDA_OPS_H */
