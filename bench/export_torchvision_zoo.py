#!/usr/bin/env python3
"""Exports torchvision classifiers with both of PyTorch's ONNX exporters into a
cache directory, for tests/torchvision_zoo_test (issue 30).

For each model (random weights, eval mode, seeded) and each exporter:
  DIR/<model>.<exporter>.onnx   (+ .onnx.data where the exporter writes one)
where <exporter> is `dynamo` (torch.onnx.export's default since PyTorch 2.9:
the torch.export-based exporter, a dynamic batch through dynamic_shapes) or
`torchscript` (dynamo=False, dynamic_axes on the batch). Beside them:
  DIR/<model>.input.npy    float32 [2, 3, H, W], a fixed pseudo-random input
  DIR/<model>.logits.npy   float32 [2, classes], PyTorch's eval() logits
  DIR/<model>.<exporter>.error.txt  when the export itself failed

Weights that make the logits depend on the input: the classifier head (ViT
zero-initialises it) is re-drawn from N(0, 0.02), every BatchNorm's affine
parameters are randomised and its running statistics calibrated on 4
random batches (a fresh MobileNetV3's signal otherwise fades through its
blocks: its logits are the same for every input to 1e-8).

Usage (the venv with torch/torchvision from PyPI; nothing is downloaded):
  python bench/export_torchvision_zoo.py [--dir DIR] [--models a,b,...]
DIR defaults to $GCC_TRAIN_ZOO_DIR, else ~/.cache/gcc-train/torchvision-zoo.
Then: bazel test //tests:torchvision_zoo_test --test_env=GCC_TRAIN_ZOO_DIR=DIR
"""
import argparse
import os
import traceback

import numpy as np
import torch
import torchvision

DEFAULT_MODELS = [
    "alexnet", "vgg11_bn", "resnet18", "resnet50", "resnext50_32x4d", "wide_resnet50_2",
    "densenet121", "squeezenet1_1", "shufflenet_v2_x1_0", "mobilenet_v2", "mobilenet_v3_small",
    "mobilenet_v3_large", "mnasnet1_0", "efficientnet_b0", "efficientnet_v2_s",
    "regnet_y_400mf", "googlenet", "inception_v3", "convnext_tiny", "vit_b_16", "swin_t",
    "maxvit_t",
]


def build(name):
    kw = {"weights": None}
    if name in ("googlenet", "inception_v3"):
        kw["aux_logits"] = False
        kw["init_weights"] = True
    m = torchvision.models.get_model(name, **kw)
    # the classifier head re-drawn so that the logits depend on the input
    last = [mod for mod in m.modules() if isinstance(mod, torch.nn.Linear)]
    if last:
        torch.nn.init.normal_(last[-1].weight, 0.0, 0.02)
        torch.nn.init.normal_(last[-1].bias, 0.0, 0.02)
    gen = torch.Generator().manual_seed(2)
    for mod in m.modules():
        if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
            c = mod.num_features
            mod.weight.data = torch.rand(c, generator=gen) + 0.5
            mod.bias.data = torch.rand(c, generator=gen) * 0.4 - 0.2
            mod.reset_running_stats()
            mod.momentum = None  # a cumulative average over the calibration batches
    m.train()
    size = 299 if name == "inception_v3" else 224
    with torch.no_grad():
        for _ in range(4):
            m(torch.rand(8, 3, size, size, generator=gen) * 2 - 1)
    return m.eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=os.environ.get(
        "GCC_TRAIN_ZOO_DIR", os.path.expanduser("~/.cache/gcc-train/torchvision-zoo")))
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    for name in a.models.split(","):
        torch.manual_seed(0)
        model = build(name)
        size = 299 if name == "inception_v3" else 224
        gen = torch.Generator().manual_seed(1)
        x = torch.rand(2, 3, size, size, generator=gen) * 2 - 1
        with torch.no_grad():
            logits = model(x)
        np.save(os.path.join(a.dir, name + ".input.npy"), x.numpy().astype(np.float32))
        np.save(os.path.join(a.dir, name + ".logits.npy"), logits.numpy().astype(np.float32))
        for exporter in ("torchscript", "dynamo"):
            path = os.path.join(a.dir, "%s.%s.onnx" % (name, exporter))
            err = path[:-5] + ".error.txt"
            if os.path.exists(err):
                os.remove(err)
            try:
                if exporter == "dynamo":
                    batch = torch.export.Dim("batch", min=1, max=1024)
                    torch.onnx.export(model, (x,), path, dynamo=True, input_names=["input"],
                                      output_names=["logits"],
                                      dynamic_shapes={"x": {0: batch}})
                else:
                    torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17,
                                      input_names=["input"], output_names=["logits"],
                                      dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}})
                print("exported", path, flush=True)
            except Exception:  # recorded for the test's table
                with open(err, "w") as f:
                    f.write(traceback.format_exc())
                print("FAILED", path, flush=True)


if __name__ == "__main__":
    main()
