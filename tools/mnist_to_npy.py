#!/usr/bin/env python3
"""Writes MNIST's IDX files as the .npy arrays `gcc-train --dataset npy` reads.

Usage: python3 tools/mnist_to_npy.py [--data data/mnist] [--out DIR] [--npz FILE]

x_train.npy uint8 (60000, 1, 28, 28), y_train.npy int64 (60000),
x_test.npy uint8 (10000, 1, 28, 28), y_test.npy int64 (10000) in DIR
(default data/mnist-npy); --npz writes the four into one .npz instead
(numpy.savez). numpy only.
"""
import argparse
import gzip
import os
import struct
import sys

import numpy as np


def read_idx(path):
    opener = gzip.open if os.path.exists(path + ".gz") and not os.path.exists(path) else open
    with opener(path + ".gz" if opener is gzip.open else path, "rb") as f:
        data = f.read()
    zero, code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or code != 0x08:
        raise SystemExit("%s: not an unsigned-byte IDX file" % path)
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data/mnist")
    ap.add_argument("--out", default="data/mnist-npy")
    ap.add_argument("--npz")
    a = ap.parse_args()
    arrays = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        x = read_idx(os.path.join(a.data, prefix + "-images-idx3-ubyte"))
        y = read_idx(os.path.join(a.data, prefix + "-labels-idx1-ubyte"))
        arrays["x_" + split] = x.reshape(len(x), 1, 28, 28)
        arrays["y_" + split] = y.astype(np.int64)
    if a.npz:
        np.savez(a.npz, **arrays)
        print("wrote %s" % a.npz)
    else:
        os.makedirs(a.out, exist_ok=True)
        for k, v in arrays.items():
            np.save(os.path.join(a.out, k + ".npy"), v)
        print("wrote %s/{x,y}_{train,test}.npy" % a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
