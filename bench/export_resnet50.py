#!/usr/bin/env python3
"""Exports torchvision's ResNet-50 (random weights, torch.manual_seed(S)) to
ONNX for issue 29's GPU benchmark (bench/resnet50_gpu.sh) and compile-time
figures (bench/nvrtc_compile on the plan's generated kernels).

  python3 bench/export_resnet50.py OUT.onnx --mode train|eval [--seed 0]
      [--classes 1000] [--weights-out W.pt]

--mode train: torch.onnx.export(model.train(), training=TrainingMode.TRAINING,
do_constant_folding=False): every BatchNorm2d stays a BatchNormalization
node (training_mode = 1), which `gcc-train model.onnx --loss cross-entropy`
trains as nn.BatchNorm2d (as bench/export_resnet_mnist.py explains).
--mode eval: model.eval(), TrainingMode.EVAL: PyTorch folds each BatchNorm
into the Conv before it (inference only: gcc-train --export / gcc-run).
Opset 14, dynamic batch, input "image" float32 (N, 3, 224, 224), output
"logits" (N, classes). The export traces one forward on zeros (in train
mode that moves the running statistics once; the initial weights are the
state_dict saved by --weights-out BEFORE that trace, so that PyTorch's side
of a comparison starts from the same weights as the file's trainable ones).
Needs torch and torchvision (no download: weights=None).
"""
import argparse
import os
import warnings

import torch
import torchvision

warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.onnx")
warnings.filterwarnings("ignore", category=DeprecationWarning)


def build(seed, classes):
    torch.manual_seed(seed)
    return torchvision.models.resnet50(weights=None, num_classes=classes)


def export(model, out, mode):
    x = torch.zeros(2, 3, 224, 224)
    tmp = out + ".tmp"
    training = mode == "train"
    model = model.train() if training else model.eval()
    kw = dict(opset_version=14, input_names=["image"], output_names=["logits"],
              training=(torch.onnx.TrainingMode.TRAINING if training
                        else torch.onnx.TrainingMode.EVAL),
              do_constant_folding=not training,
              dynamic_axes={"image": {0: "N"}, "logits": {0: "N"}})
    try:  # torch >= 2.5 defaults to the dynamo exporter, which has no training mode
        torch.onnx.export(model, (x,), tmp, dynamo=False, **kw)
    except TypeError:
        torch.onnx.export(model, (x,), tmp, **kw)
    os.replace(tmp, out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--mode", choices=["train", "eval"], required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--weights-out", default=None)
    a = ap.parse_args()
    model = build(a.seed, a.classes)
    if a.weights_out:
        torch.save(model.state_dict(), a.weights_out)
    with torch.no_grad() if a.mode == "eval" else torch.enable_grad():
        export(model, a.out, a.mode)
    n_params = sum(p.numel() for p in model.parameters())
    print("wrote %s: torchvision ResNet-50, %s mode, %d classes, %d parameters"
          % (a.out, a.mode, a.classes, n_params))


if __name__ == "__main__":
    main()
