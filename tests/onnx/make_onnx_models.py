#!/usr/bin/env python3
"""Export the two PyTorch reference networks of gcc-train's ONNX tests and
record ONNX Runtime's outputs for them.

Usage (from anywhere; needs torch, onnx, onnxruntime and numpy from PyPI):
    python3 tests/onnx/make_onnx_models.py [--out DIR]

--out defaults to this script's folder (tests/onnx). It writes:

  resnet18_small.onnx    ResNet-18 topology (BasicBlocks [2, 2, 2, 2], stem
                         7x7/2 conv + 3x3/2 max-pool, global average pool,
                         fully connected) at a quarter of the widths
                         (16, 32, 64, 128), 100 classes. Exported with
                         do_constant_folding=False, so its BatchNormalization
                         nodes stay in the file (gcc-train folds them).
  mobilenet_small.onnx   MobileNetV2 topology (inverted residuals with
                         depthwise 3x3 convolutions, ReLU6, linear
                         bottlenecks, the (t, c, n, s) table of the paper) at
                         width 0.35, a last 1x1 conv of 512 channels, dropout
                         and a 100-class classifier. Exported with PyTorch's
                         default constant folding (BatchNorm folded into the
                         convolutions by the exporter, ReLU6 as Clip).
  <model>.ort_logits.npy ONNX Runtime's logits (float32, [4, 100]) for the
                         input below.

Both have random weights (torch.manual_seed), random BatchNorm running
statistics and affine parameters (so that no BatchNorm is an identity), are in
eval mode, and are exported with opset 17, input "input" of shape
[batch, 3, 224, 224] with a symbolic batch (dynamic_axes) and output "logits".

The input is not stored: it is a formula both sides compute exactly,
    x.flat[i] = ((i * 2654435761) mod 2^32) / 2^32 - 0.5    (float32),
for i in [0, 4 * 3 * 224 * 224), in C order.

The export uses PyTorch's TorchScript-based exporter (dynamo=False), which
needs no onnxscript.
"""
import argparse
import os

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn as nn

SCRIPT_DIR = os.path.dirname(os.path.abspath(__file__))
BATCH = 4
CLASSES = 100


def formula_input(n, c, h, w):
    i = np.arange(n * c * h * w, dtype=np.uint64)
    x = ((i * np.uint64(2654435761)) % np.uint64(1 << 32)).astype(np.float64) / float(1 << 32)
    return (x - 0.5).astype(np.float32).reshape(n, c, h, w)


# ---- ResNet-18 topology at reduced widths ----------------------------------

class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + (self.down(x) if self.down is not None else x))


class ResNet18Small(nn.Module):
    def __init__(self, widths=(16, 32, 64, 128), classes=CLASSES):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], widths[0]
        for i, w in enumerate(widths):
            layers.append(nn.Sequential(BasicBlock(cin, w, 1 if i == 0 else 2), BasicBlock(w, w, 1)))
            cin = w
        self.layers = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layers(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ---- MobileNetV2 topology at reduced width ---------------------------------

def make_divisible(v, divisor=8):
    n = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return n + divisor if n < 0.9 * v else n


def conv_bn(cin, cout, k, stride, groups=1, act=True):
    layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout)]
    if act:
        layers.append(nn.ReLU6(inplace=True))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        layers = []
        if expand != 1:
            layers.append(conv_bn(cin, hidden, 1, 1))
        layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden), conv_bn(hidden, cout, 1, 1, act=False)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetSmall(nn.Module):
    def __init__(self, width=0.35, last=512, classes=CLASSES):
        super().__init__()
        table = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                 (6, 160, 3, 2), (6, 320, 1, 1)]
        cin = make_divisible(32 * width)
        feats = [conv_bn(3, cin, 3, 2)]
        for t, c, n, s in table:
            cout = make_divisible(c * width)
            for i in range(n):
                feats.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        feats.append(conv_bn(cin, last, 1, 1))
        self.features = nn.Sequential(*feats)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


def randomize_bn(model, gen):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            m.weight.data = torch.rand(c, generator=gen) * 1.5 + 0.25
            m.bias.data = torch.randn(c, generator=gen) * 0.1
            m.running_mean = torch.randn(c, generator=gen) * 0.1
            m.running_var = torch.rand(c, generator=gen) * 1.5 + 0.25


def export(model, path, fold):
    x = torch.from_numpy(formula_input(2, 3, 224, 224))
    torch.onnx.export(model, (x,), path, opset_version=17, input_names=["input"],
                      output_names=["logits"], dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                      do_constant_folding=fold, dynamo=False)
    onnx.checker.check_model(onnx.load(path))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=SCRIPT_DIR)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    x = formula_input(BATCH, 3, 224, 224)
    for name, seed, cls, fold in [("resnet18_small", 18, ResNet18Small, False),
                                  ("mobilenet_small", 2, MobileNetSmall, True)]:
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        model = cls()
        randomize_bn(model, gen)
        model.eval()
        path = os.path.join(args.out, name + ".onnx")
        export(model, path, fold)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        (logits,) = sess.run(["logits"], {"input": x})
        with torch.no_grad():
            ref = model(torch.from_numpy(x)).numpy()
        np.save(os.path.join(args.out, name + ".ort_logits.npy"), logits.astype(np.float32))
        ops = sorted({n.op_type for n in onnx.load(path).graph.node})
        print("%s: %d bytes, ops %s; ORT vs PyTorch max abs diff %.3g, max |logit| %.3g"
              % (path, os.path.getsize(path), ", ".join(ops), np.abs(logits - ref).max(), np.abs(ref).max()))


if __name__ == "__main__":
    main()
