#!/usr/bin/env python3
"""ONNX Runtime's outputs for the model-zoo architectures of tests/onnx/light
with pseudo-random weights instead of their constant ones.

The light models carry every weight as ConstantOfShape(value = 0.02), so
their reference outputs (*_output_0.pb, from ONNX's reference evaluator)
are nearly uniform (every class scores the same). To check the
architectures numerically, this script replaces each such node by a
Constant whose elements come from a formula gcc-train's test computes too
(tests/onnx_models_test.cc, RandomizedLightModel), runs ONNX Runtime on the
input ONNX's test runner generates (generate_dummy_data(seed=0,
random=False): arange(n) / n), and writes <model>.ort_random.npy (float32).

The formula, for the ConstantOfShape output named NAME of shape S:
    h    = FNV-1a 32-bit hash of NAME's UTF-8 bytes
    u[i] = ((h + i * 2654435761) mod 2^32) / 2^32          (float64)
    rank >= 2:  w[i] = (2 u[i] - 1) * sqrt(6 / fan_in),  fan_in = prod(S) / S[0]
    rank <  2:  w[i] = 0.5 + u[i]     (BatchNorm scales, shifts, means, variances, biases)
rounded to float32.

Usage (needs onnx, onnxruntime and numpy from PyPI):
    python3 tests/onnx/make_light_references.py [--dir DIR]
"""
import argparse
import glob
import math
import os

import numpy as np
import onnx
import onnxruntime as ort

ort.set_default_logger_severity(3)  # no warnings about the unused shape initializers
from onnx import numpy_helper

SCRIPT_DIR = os.path.dirname(os.path.abspath(__file__))


def fnv1a(name):
    h = 2166136261
    for b in name.encode("utf-8"):
        h ^= b
        h = (h * 16777619) & 0xFFFFFFFF
    return h


def weights(name, shape):
    n = int(np.prod(shape)) if len(shape) else 1
    i = np.arange(n, dtype=np.uint64)
    u = ((np.uint64(fnv1a(name)) + i * np.uint64(2654435761)) % np.uint64(1 << 32)).astype(
        np.float64) / float(1 << 32)
    if len(shape) >= 2:
        w = (2.0 * u - 1.0) * math.sqrt(6.0 / (n / shape[0]))
    else:
        w = 0.5 + u
    return w.astype(np.float32).reshape(shape)


def randomize(model):
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape":
            continue
        shape = [int(d) for d in inits[node.input[0]]]
        t = numpy_helper.from_array(weights(node.output[0], shape))
        node.op_type = "Constant"
        del node.input[:]
        del node.attribute[:]
        node.attribute.extend([onnx.helper.make_attribute("value", t)])
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.path.join(SCRIPT_DIR, "light"))
    args = ap.parse_args()
    for path in sorted(glob.glob(os.path.join(args.dir, "light_*.onnx"))):
        model = randomize(onnx.load(path))
        inits = {t.name for t in model.graph.initializer}
        feeds = {}
        for x in model.graph.input:
            if x.name in inits:
                continue
            shape = [d.dim_value if d.HasField("dim_value") else 1 for d in x.type.tensor_type.shape.dim]
            n = int(np.prod(shape))
            feeds[x.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        (y,) = sess.run([model.graph.output[0].name], feeds)
        out = os.path.splitext(path)[0] + ".ort_random.npy"
        np.save(out, y.astype(np.float32))
        p = y.reshape(-1)
        print("%s: %s, max %.4g, argmax %d, entropy %.3f" % (
            os.path.basename(out), y.shape, p.max(), int(p.argmax()),
            float(-(p * np.log(np.maximum(p, 1e-30))).sum())))


if __name__ == "__main__":
    main()
