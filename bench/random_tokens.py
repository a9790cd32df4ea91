#!/usr/bin/env python3
"""Writes a random token data set for gcc-train's --dataset tokens (and
nanoGPT's / llm.c's headerless format): DIR/train.bin and DIR/val.bin, each a
headerless array of little-endian uint16 token ids drawn uniformly from
[0, VOCAB) by Python's random.Random(SEED), the same files for the same
arguments on any machine. For throughput only (bench/gpu_check.sh's gpt
check: GPT-2 124M's shape): nothing in them can be learned.

  python3 bench/random_tokens.py DIR [--vocab 50257] [--train N] [--val N] [--seed 1337]

Prints "wrote DIR/train.bin (N tokens), DIR/val.bin (N tokens), vocab V".
"""
import argparse
import array
import os
import random
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--train", type=int, default=1 << 20)
    ap.add_argument("--val", type=int, default=1 << 17)
    ap.add_argument("--seed", type=int, default=1337)
    a = ap.parse_args()
    if not 1 <= a.vocab <= 65536:
        ap.error("--vocab must be in [1, 65536] (uint16 ids)")
    if a.train < 1 or a.val < 1:
        ap.error("--train and --val must be positive")
    os.makedirs(a.dir, exist_ok=True)
    rng = random.Random(a.seed)
    for name, n in (("train.bin", a.train), ("val.bin", a.val)):
        ids = array.array("H", (rng.randrange(a.vocab) for _ in range(n)))
        if sys.byteorder != "little":
            ids.byteswap()
        with open(os.path.join(a.dir, name), "wb") as f:
            ids.tofile(f)
    print(f"wrote {a.dir}/train.bin ({a.train} tokens), {a.dir}/val.bin ({a.val} tokens), vocab {a.vocab}")


if __name__ == "__main__":
    main()
