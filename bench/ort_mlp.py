#!/usr/bin/env python3
"""ONNX Runtime (PyPI) on the MNIST MLP's inference graph, the peer of
gcc-run / the C API (bench/gcc_run_bench.c) in bench/compare.sh.

  VENV/bin/python bench/ort_mlp.py --init FILE [--threads 2] [--data data/mnist]

The graph is what `gcc-train --export` deploys: x (N, 784) -> Gemm(transB=1)
+ Relu four times -> Gemm = logits (N, 10), and Softmax(logits) =
probabilities, built with onnx.helper (opset 17) from the weights in FILE
(`mlp_bench --dump-init FILE`: models/mnist_mlp.pb's). ONNX Runtime runs it
on its CPU execution provider with intra_op_num_threads = --threads,
inter_op_num_threads = 1, all graph optimizations, fetching both outputs.
Inputs are MNIST test images normalised as in training ((byte / 255 -
0.1307) / 0.3081), made before the timed calls.

  - batch-1 latency: median of 2000 session.run calls after 100 warm-up
    calls, one test image each (cycling through the test set);
  - batch-1024 throughput: 1024 / the median of 60 calls after 5 warm-up
    calls over consecutive 1024-image slices.

Output: key=value lines on stdout.
"""
import argparse
import os
import statistics
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from torch_mlp import load_init, read_idx


def build_model(params):
    """params: [(name, array)] in graph order: fc1.weight, fc1.bias, ..."""
    weights = [w for n, w in params if w.ndim == 2]
    biases = [w for n, w in params if w.ndim == 1]
    assert len(weights) == len(biases) == 5, [n for n, _ in params]
    inits, nodes, x = [], [], "x"
    for i, (w, b) in enumerate(zip(weights, biases)):
        inits += [numpy_helper.from_array(np.ascontiguousarray(w), f"fc{i + 1}.weight"),
                  numpy_helper.from_array(np.ascontiguousarray(b), f"fc{i + 1}.bias")]
        y = "logits" if i == 4 else f"h{i + 1}"
        nodes.append(helper.make_node("Gemm", [x, f"fc{i + 1}.weight", f"fc{i + 1}.bias"], [y],
                                      transB=1))
        if i < 4:
            nodes.append(helper.make_node("Relu", [y], [y + "_relu"]))
            y += "_relu"
        x = y
    nodes.append(helper.make_node("Softmax", ["logits"], ["probabilities"], axis=-1))
    graph = helper.make_graph(
        nodes, "mnist_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 784])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10]),
         helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", required=True, help="weights from mlp_bench --dump-init")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", default="data/mnist")
    a = ap.parse_args()
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(build_model(load_init(a.init)).SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    imgs = read_idx(os.path.join(a.data, "t10k-images-idx3-ubyte"))
    x = ((imgs.reshape(-1, 784).astype(np.float32) / 255.0 - 0.1307) / 0.3081).astype(np.float32)
    n = x.shape[0]
    now = time.perf_counter
    print(f"ort_version={ort.__version__}")
    print(f"threads={a.threads}")
    ts = []
    for i in range(2100):
        k = i % n
        xb = x[k:k + 1]
        t0 = now()
        sess.run(None, {"x": xb})
        if i >= 100:
            ts.append(now() - t0)
    print(f"infer_latency_us_b1={1e6 * statistics.median(ts):.2f}")
    ts = []
    for i in range(65):
        k = (i * 1024) % (n - 1024)
        xb = x[k:k + 1024]
        t0 = now()
        sess.run(None, {"x": xb})
        if i >= 5:
            ts.append(now() - t0)
    print(f"infer_samples_per_s_b1024={1024 / statistics.median(ts):.1f}")


if __name__ == "__main__":
    main()
