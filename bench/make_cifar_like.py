#!/usr/bin/env python3
"""Writes a CIFAR-10-shaped data set in the official binary format
(data_batch_1.bin ... data_batch_5.bin of 10000 records, test_batch.bin;
a record is 1 label byte and 3072 pixel bytes, channel-major 32x32) with
pseudo-random pixels and labels, for timing the CIFAR tutorial's training
in bench/compare.sh where the real set is not on the machine: the time per
epoch does not depend on the pixel values (no data-dependent control flow,
no denormals from bytes in [0, 255]), only on the sizes. Deterministic
(Python's random with --seed). Standard library only.

  python3 bench/make_cifar_like.py DIR [--seed 20261124]
"""
import argparse
import os
import random


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--seed", type=int, default=20261124)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    rng = random.Random(a.seed)
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    for name in names:
        rec = bytearray()
        for _ in range(10000):
            rec.append(rng.randrange(10))
            rec += rng.randbytes(3072)
        tmp = os.path.join(a.dir, name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(rec)
        os.replace(tmp, os.path.join(a.dir, name))


if __name__ == "__main__":
    main()
