#!/usr/bin/env python3
"""PyTorch reference for bench/mlp_bench.c: the same MNIST MLP measurements.

bench/compare.sh runs it with current PyTorch from PyPI in a virtual
environment (MKL and oneDNN inside), eager and with --compile:

  VENV/bin/python bench/torch_mlp.py [--threads 2] [--data data/mnist] [--compile]

(Debian's python3-torch 1.13 also runs it; then select the OpenMP OpenBLAS
for the process with LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp,
or it runs 5-25x slower than it can.)

--compile: the model is torch.compile()d (Inductor's C++ CPU backend); its
compilation happens in the warm-up steps, outside the timed region.

Model: Flatten, Linear 784-512, ReLU, 512-256, ReLU, 256-128, ReLU, 128-64,
ReLU, 64-10; CrossEntropyLoss; SGD lr 0.1 momentum 0.5. Initial weights:
with --init FILE (written by `mlp_bench --dump-init FILE`) those of
models/mnist_mlp.pb, so both sides start from the same parameters; without it
PyTorch's default nn.Linear init with torch.manual_seed(20261122).

With --cifar DIR: the CIFAR-10 tutorial's training ("Training a
classifier": models/cifar_cnn.pb's network, batch 4, SGD lr 0.001 momentum
0.9, the set shuffled every epoch, x = (byte / 255 - 0.5) / 0.5) for
--epochs epochs on the CIFAR-10 binary batches in DIR (data_batch_1.bin ...
data_batch_5.bin), printing the time per epoch as cifar_epoch_s (training
only; the tutorial evaluates after the loop).

With --cnn: only the training step at batch 64 of the MNIST CNN of
models/mnist_cnn.pb (conv 1->6 5x5, ReLU, max-pool 2; conv 6->16 5x5, ReLU,
max-pool 2; fc 256-120-84-10 with ReLU; cross-entropy; SGD momentum 0.9), from
the --init parameters of that model (`mlp_bench --model models/mnist_cnn.pb
--dump-init FILE`), printed as model_train_*_b64 like `mlp_bench --model`.

What is timed (mirrors mlp_bench.c):
  - train step, batch 64/256/1024: median of N (default 200) steps after 20
    warm-up steps; one step = zero_grad(set_to_none=True), forward, loss,
    backward, optimizer.step(). Batches come from a shuffled, pre-normalised
    float32 tensor (index_select of a torch.randperm slice, drop_last),
    made outside the timed region.
  - the tutorial's training, 5 epochs (--epochs) at batch 64, on a fresh model from the
    initial weights: per epoch a torch.randperm shuffle, then per batch
    index_select of the uint8 images, conversion to float, /255,
    (x - 0.1307) / 0.3081, and the step; the last partial batch (32 rows)
    included. Epoch time = training seconds / 5; the test-set accuracy after
    the 5 epochs is reported (its evaluation is not timed).
  - inference under torch.inference_mode(): forward + argmax (gcc-train's
    gcc_session_eval_batch also computes the loss and the correct count);
    batch 1 latency median of 1000 calls after 50 warm-up; batch 64 and 1024
    throughput median of 200 calls after 20 warm-up.
  - peak RSS: resource.getrusage(RUSAGE_SELF).ru_maxrss at the end
    (includes the Python interpreter and libtorch).

Output: key=value lines on stdout.
"""
import argparse
import gzip
import os
import re
import resource
import statistics
import struct
import time

import numpy as np
import torch
import torch.nn as nn


def read_idx(path):
    opener = gzip.open if os.path.exists(path + ".gz") else open
    with opener(path + ".gz" if opener is gzip.open else path, "rb") as f:
        raw = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", raw[:4])
    assert zero == 0 and dtype == 8, path
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_init(path):
    """Parameters written by mlp_bench --dump-init, in graph order."""
    out = []
    with open(path, "rb") as f:
        raw = f.read()
    off = 0
    while off < len(raw):
        (n,) = struct.unpack_from("<I", raw, off)
        name = raw[off + 4:off + 4 + n].decode()
        off += 4 + n
        (nd,) = struct.unpack_from("<I", raw, off)
        dims = struct.unpack_from("<%dq" % nd, raw, off + 4)
        off += 4 + 8 * nd
        cnt = int(np.prod(dims))
        out.append((name, np.frombuffer(raw, "<f4", cnt, off).reshape(dims)))
        off += 4 * cnt
    return out


def make_model(init=None, cnn=False):
    m = _make_model(cnn)
    if init is not None:
        # each PyTorch parameter takes the first unused gcc-train parameter
        # of its shape (in graph order): the layers' shapes are all distinct
        params = list(m.named_parameters())
        assert len(params) == len(init), (len(params), len(init))
        unused = list(init)
        with torch.no_grad():
            for tname, p in params:
                k = next((i for i, (_, w) in enumerate(unused) if w.shape == tuple(p.shape)), None)
                assert k is not None, f"no gcc-train parameter of shape {tuple(p.shape)} for {tname}"
                p.copy_(torch.from_numpy(unused.pop(k)[1].copy()))
    return m


def _make_model(cnn=False):
    if cnn == "cifar":
        return nn.Sequential(nn.Conv2d(3, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(),
                             nn.Linear(400, 120), nn.ReLU(),
                             nn.Linear(120, 84), nn.ReLU(),
                             nn.Linear(84, 10))
    if cnn:
        return nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(),
                             nn.Linear(256, 120), nn.ReLU(),
                             nn.Linear(120, 84), nn.ReLU(),
                             nn.Linear(84, 10))
    return nn.Sequential(nn.Flatten(),
                         nn.Linear(784, 512), nn.ReLU(),
                         nn.Linear(512, 256), nn.ReLU(),
                         nn.Linear(256, 128), nn.ReLU(),
                         nn.Linear(128, 64), nn.ReLU(),
                         nn.Linear(64, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", default="data/mnist")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--init", help="initial parameters from mlp_bench --dump-init")
    ap.add_argument("--cnn", action="store_true",
                    help="only the MNIST CNN's training step at batch 64")
    ap.add_argument("--cifar", metavar="DIR",
                    help="the CIFAR-10 tutorial's training on the binary batches in DIR")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--max-steps", type=int, default=0,
                    help="--cifar: stop after this many steps in all (0: every epoch whole)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(20261122)
    now = time.perf_counter
    wrap = torch.compile if a.compile else (lambda m: m)
    print(f"torch_version={torch.__version__}")
    print(f"threads={torch.get_num_threads()}")
    print(f"mode={'compile' if a.compile else 'eager'}")

    if a.cifar:
        recs = []
        for i in range(1, 6):
            with open(os.path.join(a.cifar, f"data_batch_{i}.bin"), "rb") as f:
                recs.append(np.frombuffer(f.read(), np.uint8).reshape(-1, 3073))
        recs = np.concatenate(recs)
        clabels = torch.from_numpy(recs[:, 0].astype(np.int64))
        cimages = torch.from_numpy(recs[:, 1:].reshape(-1, 3, 32, 32).copy())
        cnorm = (cimages.float() / 255.0 - 0.5) / 0.5
        init = load_init(a.init) if a.init else None
        model = make_model(init, cnn="cifar")
        opt = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
        cmodel = wrap(model)
        loss_fn = nn.CrossEntropyLoss()
        if a.compile:  # compile outside the timed epochs
            for _ in range(3):
                opt.zero_grad()
                loss_fn(cmodel(cnorm[:4]), clabels[:4]).backward()
            opt.zero_grad()
        cn = cnorm.shape[0]
        el, done = 0.0, 0
        for _ in range(a.epochs):
            t0 = now()
            perm = torch.randperm(cn)
            for j in range(0, cn, 4):
                if a.max_steps and done == a.max_steps:
                    break
                idx = perm[j:j + 4]
                opt.zero_grad()
                loss_fn(cmodel(cnorm.index_select(0, idx)), clabels.index_select(0, idx)).backward()
                opt.step()
                done += 1
            el += now() - t0
        print(f"cifar_steps={done}")
        print(f"cifar_train_s={el:.3f}")
        print(f"cifar_epoch_s={el / done * ((cn + 3) // 4):.3f}")
        return

    images = torch.from_numpy(read_idx(os.path.join(a.data, "train-images-idx3-ubyte")).copy())
    labels = torch.from_numpy(read_idx(os.path.join(a.data, "train-labels-idx1-ubyte"))
                              .astype(np.int64))
    n = images.shape[0]
    images = images.view(n, 1, 28, 28)
    normed = (images.float() / 255.0 - 0.1307) / 0.3081

    init = load_init(a.init) if a.init else None
    loss_fn = nn.CrossEntropyLoss()
    if a.cnn:
        model = make_model(init, cnn=True)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        model = wrap(model)
        ts = []
        perm = torch.randperm(n)
        for i in range(20 + a.steps):
            j = i % (n // 64)
            idx = perm[j * 64:(j + 1) * 64]
            x, y = normed.index_select(0, idx), labels.index_select(0, idx)
            t0 = now()
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()
            if i >= 20:
                ts.append(now() - t0)
        m = statistics.median(ts)
        print(f"model_train_step_ms_b64={1e3 * m:.4f}")
        print(f"model_train_samples_per_s_b64={64 / m:.1f}")
        return

    print(f"steps={a.steps}\nwarmup=20\nepochs={a.epochs}")
    print("init=" + ("models/mnist_mlp.pb" if init else "pytorch_default_seed_20261122"))
    # the BLAS actually mapped into this process (Debian's torch links
    # libblas.so.3, whichever alternative LD_LIBRARY_PATH / the system picks)
    # the BLAS torch was built with (PyPI: MKL inside libtorch_cpu); Debian's
    # torch links libblas.so.3, whichever alternative the process maps
    m = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    libs = []
    if m and m.group(1) != "mkl":
        with open("/proc/self/maps") as f:
            libs = sorted({l.split()[-1] for l in f if "libblas" in l and "/" in l})
    print("torch_blas=" + (",".join(libs) if libs else m.group(1) if m else "unknown"))
    print(f"torch_onednn={int(torch.backends.mkldnn.is_available())}")

    model = make_model(init)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    model = wrap(model)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for B in (64, 256, 1024):
        perm = torch.randperm(n)
        nb = n // B
        ts = []
        for i in range(20 + a.steps):
            j = i % nb
            if j == 0 and i:
                perm = torch.randperm(n)
            idx = perm[j * B:(j + 1) * B]
            x, y = normed.index_select(0, idx), labels.index_select(0, idx)
            t0 = now()
            step(x, y)
            if i >= 20:
                ts.append(now() - t0)
        m = statistics.median(ts)
        print(f"train_step_ms_b{B}={1e3 * m:.4f}")
        print(f"train_samples_per_s_b{B}={B / m:.1f}")

    # inference as a deployment runs it: logits and the predicted class, no
    # autograd (inference_mode), no loss (gcc_session_eval_batch computes
    # the loss as well, so gcc-train does slightly more work here)
    with torch.inference_mode():
        idx = torch.randperm(n)[:1024]
        x = normed.index_select(0, idx)

        def ev(xb):
            return model(xb).argmax(1)

        ts = []
        for i in range(1050):
            k = i % 1024
            t0 = now()
            ev(x[k:k + 1])
            if i >= 50:
                ts.append(now() - t0)
        print(f"infer_latency_us_b1={1e6 * statistics.median(ts):.2f}")
        for B in (64, 1024):
            ts = []
            for i in range(220):
                t0 = now()
                ev(x[:B])
                if i >= 20:
                    ts.append(now() - t0)
            print(f"infer_samples_per_s_b{B}={B / statistics.median(ts):.1f}")

    # the tutorial's training: 5 epochs at batch 64 on a fresh model
    if a.epochs == 0:
        return
    model = make_model(init)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    model = wrap(model)
    epochs, el = a.epochs, 0.0
    for _ in range(epochs):
        t0 = now()
        perm = torch.randperm(n)
        for j in range(0, n, 64):
            idx = perm[j:j + 64]
            x = (images.index_select(0, idx).float() / 255.0 - 0.1307) / 0.3081
            step(x, labels.index_select(0, idx))
        el += now() - t0
    print(f"epoch_b64_s={el / epochs:.3f}")
    print(f"epoch_b64_samples_per_s={epochs * n / el:.1f}")
    timg = torch.from_numpy(read_idx(os.path.join(a.data, "t10k-images-idx3-ubyte")).copy())
    tlab = torch.from_numpy(read_idx(os.path.join(a.data, "t10k-labels-idx1-ubyte"))
                            .astype(np.int64))
    with torch.no_grad():
        tx = (timg.view(-1, 1, 28, 28).float() / 255.0 - 0.1307) / 0.3081
        acc = (model(tx).argmax(1) == tlab).float().mean().item()
    print(f"test_accuracy={acc:.4f}")

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"peak_rss_mib={rss / 1024:.1f}")


if __name__ == "__main__":
    main()
