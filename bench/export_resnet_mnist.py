#!/usr/bin/env python3
"""Exports a ResNet-style network for MNIST from PyTorch to ONNX, for
issue 15's check that gcc-train trains an imported model to PyTorch-like
accuracy (bench/resnet_mnist.sh runs it; figures in bench/RESULTS.md).

  python3 bench/export_resnet_mnist.py OUT.onnx [--width W] [--seed S]

The network (PyTorch's default initialisation, torch.manual_seed(S)):
  stem        Conv(1, W, 3, padding 1, no bias), BatchNorm2d, ReLU   28x28
  block 1     BasicBlock(W -> 2W, stride 2)                          14x14
  block 2     BasicBlock(2W -> 4W, stride 2)                           7x7
  head        AdaptiveAvgPool2d(1), flatten, Linear(4W, 10)
where BasicBlock is Conv3x3 BN ReLU Conv3x3 BN plus a projection shortcut
Conv1x1(stride 2) BN, added, then ReLU (torchvision's ResNet BasicBlock).

The export is torch.onnx.export(model.train(),
training=TrainingMode.TRAINING, opset 14, do_constant_folding=False,
dynamic batch): every BatchNorm2d stays a BatchNormalization node
(training_mode = 1) with its running mean and var as initializers, which
`gcc-train model.onnx --loss ...` trains as nn.BatchNorm2d. An export in
evaluation mode (model.eval(), TrainingMode.EVAL) lets PyTorch fold each
BatchNorm into the Conv before it, leaving no BatchNorm to train: use it
for inference only. (The export traces one training-mode forward, on
zeros, which leaves the running variances at 0.9 in the file; training
replaces them within a few dozen steps.)

Input "image" float32 (N, 1, 28, 28), output "logits" (N, 10). Needs torch
(written with Debian's python3-torch 1.13).
"""
import argparse
import os
import warnings

import torch
import torch.nn as nn

# the exporter explains at length that it drops the num_batches_tracked
# update (unused with a fixed momentum): not news for this script
warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.onnx")


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + self.shortcut(x))


class ResNetMnist(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, width, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU())
        self.block1 = BasicBlock(width, 2 * width, 2)
        self.block2 = BasicBlock(2 * width, 4 * width, 2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4 * width, 10)

    def forward(self, x):
        y = self.block2(self.block1(self.stem(x)))
        return self.fc(torch.flatten(self.pool(y), 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    model = ResNetMnist(a.width)
    x = torch.zeros(2, 1, 28, 28)
    tmp = a.out + ".tmp"
    torch.onnx.export(model.train(), (x,), tmp, opset_version=14, input_names=["image"],
                      output_names=["logits"], training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False,
                      dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}})
    os.replace(tmp, a.out)
    n_params = sum(p.numel() for p in model.parameters())
    print("wrote %s: ResNet-style, width %d, %d parameters, %d BatchNorm2d"
          % (a.out, a.width, n_params, sum(isinstance(m, nn.BatchNorm2d) for m in model.modules())))


if __name__ == "__main__":
    main()
