#!/usr/bin/env python3
"""PyTorch's side of bench/resnet50_gpu.sh (issue 29): torchvision's
ResNet-50 on synthetic data on one GPU, and the synthetic data sets that
gcc-train reads.

  python3 bench/resnet50_gpu.py torch --mode train|eval --batch B
      --precision fp32|tf32|bf16 --variant nchw|channels_last|compile
      [--steps 30] [--warmup 5] [--seed 0]
    prints one key=value line:
      images_per_s=... step_ms=... peak_bytes=... compile_s=... variant=...
    --device cpu (bench/resnet50_cpu.sh): the same on the CPU with
    torch.set_num_threads(--threads), no TF32 or cuDNN settings (fp32 only),
    and peak_bytes the process's peak RSS (getrusage ru_maxrss).
    train: SGD(lr 0.1, momentum 0.9), cross-entropy, model.train() (batch
    statistics), labels uniform in [0, 256) as the data subcommand's; eval: model.eval() under torch.inference_mode(). The batch
    lies on the GPU already (no data loading in the timed loop), random
    N(0, 1) images and uniform labels from torch.Generator(seed). fp32 sets
    torch.backends.cuda.matmul.allow_tf32 and cudnn.allow_tf32 to False,
    tf32 to True; bf16 is torch.autocast(device_type="cuda",
    dtype=torch.bfloat16) with TF32 on (autocast's recipe: float32 master
    weights, the loss in float32). `compile` is torch.compile(model) in
    NCHW (its compile time is compile_s: the first warm-up step). Timing:
    `warmup` steps, then `steps` steps between two torch.cuda.synchronize()
    calls; peak_bytes is torch.cuda.max_memory_allocated() after the run
    (reset before the model is built).

  python3 bench/resnet50_gpu.py ort MODEL.onnx --batch B [--threads 2]
      [--steps 10] [--warmup 2] [--seed 0]
    ONNX Runtime (CPU execution provider, intra_op_num_threads --threads,
    inter_op 1, its other settings at their defaults) on the EVAL export:
    images_per_s=... step_ms=... peak_bytes=... (peak RSS).

  python3 bench/resnet50_gpu.py data DIR --n N [--test N] [--seed 0]
    writes DIR/x_train.npy (uint8, (N, 3, 224, 224)), y_train.npy (int64,
    (N,), classes 0..255 of the 1000: gcc-train's npy loader keeps labels as
    uint8), x_test.npy and y_test.npy (--test rows, default 64):
    gcc-train's `--dataset npy` scales uint8 images by --mean/--std.

  python3 bench/resnet50_gpu.py images FILE --n N [--seed 0]
    writes a float32 .npy of shape (N, 3, 224, 224) for gcc-run --input.

Needs torch, torchvision (torch subcommand) and numpy.
"""
import argparse
import os
import sys
import time

# labels are drawn from the first 256 classes on both sides (the 1000-way
# softmax is computed all the same): datasets/npy.c holds labels as uint8
LABELS = 256


def cmd_data(a):
    import numpy as np
    rng = np.random.default_rng(a.seed)
    os.makedirs(a.dir, exist_ok=True)
    for split, n in (("train", a.n), ("test", a.test)):
        x = rng.integers(0, 256, size=(n, 3, 224, 224), dtype=np.uint8)
        y = rng.integers(0, LABELS, size=(n,), dtype=np.int64)
        np.save(os.path.join(a.dir, "x_%s.npy" % split), x)
        np.save(os.path.join(a.dir, "y_%s.npy" % split), y)
    print("wrote %s: %d train and %d test images, uint8 (N, 3, 224, 224)" % (a.dir, a.n, a.test))


def cmd_images(a):
    import numpy as np
    rng = np.random.default_rng(a.seed)
    x = rng.standard_normal(size=(a.n, 3, 224, 224), dtype=np.float32)
    np.save(a.file, x)
    print("wrote %s: float32 (%d, 3, 224, 224)" % (a.file, a.n))


def peak_rss():
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def cmd_ort(a):
    import numpy as np
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(a.seed)
    x = rng.standard_normal(size=(a.batch, 3, 224, 224), dtype=np.float32)
    name = sess.get_inputs()[0].name
    for _ in range(a.warmup):
        sess.run(None, {name: x})
    t0 = time.perf_counter()
    for _ in range(a.steps):
        sess.run(None, {name: x})
    secs = time.perf_counter() - t0
    print("images_per_s=%.2f step_ms=%.3f peak_bytes=%d variant=ort mode=eval batch=%d"
          % (a.batch * a.steps / secs, 1e3 * secs / a.steps, peak_rss(), a.batch))
    return 0


def cmd_torch(a):
    import torch
    import torchvision

    cpu = a.device == "cpu"
    if cpu:
        if a.precision != "fp32":
            print("error=--device cpu measures fp32 only")
            return 1
        torch.set_num_threads(a.threads)
        dev = torch.device("cpu")
    else:
        if not torch.cuda.is_available():
            print("error=no CUDA device for PyTorch")
            return 1
        dev = torch.device("cuda")
        tf32 = a.precision in ("tf32", "bf16")
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = True  # PyTorch's usual setting for fixed shapes
        torch.cuda.reset_peak_memory_stats()
    sync = (lambda: None) if cpu else torch.cuda.synchronize
    torch.manual_seed(a.seed)
    model = torchvision.models.resnet50(weights=None).to(dev)
    mem_format = torch.channels_last if a.variant == "channels_last" else torch.contiguous_format
    model = model.to(memory_format=mem_format)
    g = torch.Generator(device=dev.type)
    g.manual_seed(a.seed)
    x = torch.randn(a.batch, 3, 224, 224, device=dev, generator=g)
    x = x.contiguous(memory_format=mem_format)
    y = torch.randint(0, LABELS, (a.batch,), device=dev, generator=g)
    train = a.mode == "train"
    model.train(train)
    run = torch.compile(model) if a.variant == "compile" else model
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if train else None
    loss_fn = torch.nn.CrossEntropyLoss()
    autocast = a.precision == "bf16"

    def step():
        if train:
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=autocast):
                loss = loss_fn(run(x), y)
            loss.backward()
            opt.step()
        else:
            with torch.inference_mode(), torch.autocast(device_type=dev.type,
                                                         dtype=torch.bfloat16, enabled=autocast):
                run(x)

    t0 = time.perf_counter()
    step()
    sync()
    first_s = time.perf_counter() - t0
    for _ in range(max(0, a.warmup - 1)):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    sync()
    secs = time.perf_counter() - t0
    print("images_per_s=%.2f step_ms=%.3f peak_bytes=%d compile_s=%.2f variant=%s mode=%s "
          "batch=%d precision=%s" % (a.batch * a.steps / secs, 1e3 * secs / a.steps,
                                     peak_rss() if cpu else torch.cuda.max_memory_allocated(),
                                     first_s if a.variant == "compile" else 0.0, a.variant,
                                     a.mode, a.batch, a.precision))
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("torch")
    t.add_argument("--mode", choices=["train", "eval"], required=True)
    t.add_argument("--batch", type=int, required=True)
    t.add_argument("--precision", choices=["fp32", "tf32", "bf16"], required=True)
    t.add_argument("--variant", choices=["nchw", "channels_last", "compile"], default="nchw")
    t.add_argument("--steps", type=int, default=30)
    t.add_argument("--warmup", type=int, default=5)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    t.add_argument("--threads", type=int, default=2)
    o = sub.add_parser("ort")
    o.add_argument("model")
    o.add_argument("--batch", type=int, required=True)
    o.add_argument("--threads", type=int, default=2)
    o.add_argument("--steps", type=int, default=10)
    o.add_argument("--warmup", type=int, default=2)
    o.add_argument("--seed", type=int, default=0)
    d = sub.add_parser("data")
    d.add_argument("dir")
    d.add_argument("--n", type=int, required=True)
    d.add_argument("--test", type=int, default=64)
    d.add_argument("--seed", type=int, default=0)
    i = sub.add_parser("images")
    i.add_argument("file")
    i.add_argument("--n", type=int, required=True)
    i.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    return {"torch": cmd_torch, "ort": cmd_ort, "data": cmd_data,
            "images": cmd_images}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
