#!/usr/bin/env python3
"""PyTorch's F.layer_norm forward and backward (dX, dweight, dbias together,
one autograd call) on the shapes of bench/layer_norm_bench.c, CPU float32,
median of `reps` runs after a warm-up, at 1 and 2 threads.

    ~/.cache/gcc-train/bench-venv/bin/python bench/torch_layer_norm.py [reps]
"""
import sys
import time

import torch
import torch.nn.functional as F

CASES = [("char GPT CPU goal (B 32, T 64, C 128)", 32 * 64, 128),
         ("baby GPT (B 64, T 256, C 384)", 64 * 256, 384),
         ("GPT-2 124M row (B 8, T 1024, C 768)", 8 * 1024, 768)]


def median(fn, reps):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[reps // 2]


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    print("torch %s" % torch.__version__)
    print("%-40s %-18s %7s %10s" % ("shape", "kernel", "threads", "ms"))
    for what, rows, c in CASES:
        x = (torch.rand(rows, c) * 4 - 2).requires_grad_()
        w = torch.ones(c, requires_grad=True)
        b = torch.zeros(c, requires_grad=True)
        dy = torch.rand(rows, c) * 2 - 1
        for threads in (1, 2):
            torch.set_num_threads(threads)
            with torch.no_grad():
                t = median(lambda: F.layer_norm(x, (c,), w, b), reps)
            print("%-40s %-18s %7d %10.3f" % (what, "forward", threads, 1e3 * t))
            y = F.layer_norm(x, (c,), w, b)

            def bwd():
                torch.autograd.grad(y, (x, w, b), dy, retain_graph=True)
            t = median(bwd, reps)
            print("%-40s %-18s %7d %10.3f" % (what, "dX+dweight+dbias", threads, 1e3 * t))


if __name__ == "__main__":
    main()
