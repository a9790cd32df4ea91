#!/usr/bin/env python3
"""ONNX Runtime's CPU inference speed on an ONNX model, measured as
bench/onnx_bench.c measures gcc-train: R timed runs of B rows after W
warm-up runs, each run = session.run on the float32 input (the same formula
input), median / p10 / p90 in ms and samples/s from the median, key=value
lines on stdout.

    python3 bench/ort_bench.py MODEL.onnx [--threads N] [--batch B] [--runs R] [--warmup W]

ONNX Runtime from PyPI, CPUExecutionProvider, intra_op_num_threads = N,
inter_op_num_threads = 1, sequential execution, graph optimizations at
their default (ORT_ENABLE_ALL).
"""
import argparse
import time

import numpy as np
import onnxruntime as ort


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    shape = [a.batch] + [int(d) for d in inp.shape[1:]]
    n = int(np.prod(shape))
    i = np.arange(n, dtype=np.uint64)
    x = ((i * np.uint64(2654435761)) % np.uint64(1 << 32)).astype(np.float64) / float(1 << 32)
    x = (x - 0.5).astype(np.float32).reshape(shape)
    out = sess.get_outputs()[0].name
    t = []
    for k in range(-a.warmup, a.runs):
        t0 = time.perf_counter()
        sess.run([out], {inp.name: x})
        dt = time.perf_counter() - t0
        if k >= 0:
            t.append(dt)
    t.sort()
    med = t[a.runs // 2]
    print("runtime=onnxruntime-%s" % ort.__version__)
    print("model=%s\nthreads=%d\nbatch=%d\nruns=%d" % (a.model, a.threads, a.batch, a.runs))
    print("median_ms=%.4f\np10_ms=%.4f\np90_ms=%.4f\nsamples_per_s=%.1f"
          % (1e3 * med, 1e3 * t[a.runs // 10], 1e3 * t[a.runs * 9 // 10], a.batch / med))


if __name__ == "__main__":
    main()
