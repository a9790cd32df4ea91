#!/usr/bin/env python3
"""The MNIST MLP tutorial as a PyTorch user runs it, for the whole-run wall
time in bench/compare.sh (the peer of `gcc-train models/mnist_mlp.pb`):
import torch, read MNIST, build the MLP from models/mnist_mlp.pb's initial
weights (--init, from `mlp_bench --dump-init`), train --epochs epochs at
batch 64 (SGD lr 0.1 momentum 0.5, shuffled every epoch, each batch
normalised with mean 0.1307 and std 0.3081) and evaluate the test set
(loss and accuracy, batches of 1000) after every epoch, printing one line
per epoch, as gcc-train does. compare.sh times the process from start to
exit.

  VENV/bin/python bench/torch_tutorial.py --init FILE [--threads 2] [--epochs 5]
"""
import argparse
import os

import torch
import torch.nn as nn

from torch_mlp import load_init, make_model, read_idx


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--data", default="data/mnist")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(20261122)
    images = torch.from_numpy(read_idx(os.path.join(a.data, "train-images-idx3-ubyte")).copy())
    labels = torch.from_numpy(read_idx(os.path.join(a.data, "train-labels-idx1-ubyte"))
                              .astype("int64"))
    timg = torch.from_numpy(read_idx(os.path.join(a.data, "t10k-images-idx3-ubyte")).copy())
    tlab = torch.from_numpy(read_idx(os.path.join(a.data, "t10k-labels-idx1-ubyte"))
                            .astype("int64"))
    n = images.shape[0]
    images = images.view(n, 1, 28, 28)
    timg = timg.view(-1, 1, 28, 28)
    model = make_model(load_init(a.init))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(a.epochs):
        model.train()
        perm = torch.randperm(n)
        for j in range(0, n, 64):
            idx = perm[j:j + 64]
            x = (images.index_select(0, idx).float() / 255.0 - 0.1307) / 0.3081
            opt.zero_grad()
            loss_fn(model(x), labels.index_select(0, idx)).backward()
            opt.step()
        model.eval()
        total, correct = 0.0, 0
        with torch.no_grad():
            for j in range(0, timg.shape[0], 1000):
                x = (timg[j:j + 1000].float() / 255.0 - 0.1307) / 0.3081
                out = model(x)
                total += loss_fn(out, tlab[j:j + 1000]).item() * x.shape[0]
                correct += (out.argmax(1) == tlab[j:j + 1000]).sum().item()
        print(f"epoch {epoch + 1}: test loss {total / timg.shape[0]:.4f}, "
              f"accuracy {correct / timg.shape[0]:.4f}")


if __name__ == "__main__":
    main()
