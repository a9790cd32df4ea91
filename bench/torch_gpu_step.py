#!/usr/bin/env python3
"""PyTorch on the same GPU as gcc-train, for bench/gpu_check.sh's table.

  python3 bench/torch_gpu_step.py [--batch 1024] [--steps 300] [--precision fp32|tf32|bf16|fp16]

Trains the MNIST MLP of models/mnist_mlp.pb (Flatten, Linear 784-512, ReLU,
512-256, ReLU, 256-128, ReLU, 128-64, ReLU, 64-10; CrossEntropyLoss; SGD lr
0.1 momentum 0.5) on cuda:0 with random batches already on the GPU (no data
loader, as gcc-train with its data set uploaded to the device), and prints
key=value lines: samples_per_s (--steps steps after 50 warm-up steps,
issued asynchronously and synchronised once at the end, as gcc-train's steps
are).

Precision, as PyTorch users set it:
  fp32  torch.backends.cuda.matmul.allow_tf32 = False (PyTorch's default)
  tf32  allow_tf32 = True (cuBLAS TF32 tensor cores; cudnn.allow_tf32 too)
  bf16  torch.autocast("cuda", dtype=torch.bfloat16) around forward and loss
  fp16  torch.autocast("cuda", dtype=torch.float16) and a GradScaler (init
        scale 65536, growth 2 every 2000 steps, backoff 0.5: PyTorch's AMP
        recipe; its step() skips a step with inf/nan gradients, reading the
        flag on the host)
Exits 4 when PyTorch sees no GPU.
"""
import argparse
import sys
import time

import torch
import torch.nn as nn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16", "fp16"], default="fp32")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_gpu_step: PyTorch sees no CUDA GPU", file=sys.stderr)
        return 4
    torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    dev = torch.device("cuda:0")
    torch.manual_seed(20261126)
    widths = [784, 512, 256, 128, 64, 10]
    layers = [nn.Flatten()]
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(a.batch, 1, 28, 28, device=dev)
    y = torch.randint(0, 10, (a.batch,), device=dev)

    # fp16: torch.amp.GradScaler's dynamic loss scaling, as gcc-train's default
    scaler = torch.amp.GradScaler("cuda", enabled=a.precision == "fp16")
    low = torch.float16 if a.precision == "fp16" else torch.bfloat16

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=low, enabled=a.precision in ("bf16", "fp16")):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(50):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    torch.cuda.synchronize()
    m = (time.perf_counter() - t0) / a.steps
    print(f"torch_version={torch.__version__}")
    print(f"device={torch.cuda.get_device_name(0).replace(' ', '_')}")
    print(f"precision={a.precision}")
    print(f"batch={a.batch}")
    print(f"step_ms={1e3 * m:.4f}")
    print(f"samples_per_s={a.batch / m:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
