#!/usr/bin/env python3
"""Explains a torchvision_zoo_test training tensor over its tolerance by
ReLU kinks (issue 30).

A ReLU (or ReLU6) input that float64 puts within float32's own error of the
kink can land on either side in a float32 run: the gradient then passes
where it should not (or the reverse), and every tensor upstream of it
receives a different gradient, by up to 1/(values per channel) of that
channel's. Three PyTorch float32 runs (tests/torchvision_zoo_test's P) may
all land on float64's side while gcc-train lands on the other. This script
says whether that is what happened: it rebuilds the row's reference network
exactly as bench/export_torchvision_zoo.py does, finds the ReLU inputs
closest to a kink in units of PyTorch float32's error at that element
(|x64 - kink| / |x32 - x64|), and for each of the closest candidates runs
PyTorch's first SGD step in float64 with that one element's gradient mask
flipped, measuring the tensor's distance to gcc-train's values (written by
the test with GCC_TRAIN_ZOO_DUMP=DIR). A flip that takes the distance from
the failing one down to the other tensors' float32 level explains the
mismatch.

Usage (the bench venv):
  GCC_TRAIN_ZOO_DUMP=DUMP bazel-bin/tests/torchvision_zoo_test ... (the failing row)
  python bench/zoo_relu_flip.py --dir ZOO --model shufflenet_v2_x1_0 --exporter torchscript \\
      --tensor stage4.3.branch2.5.weight --gcc DUMP/shufflenet_v2_x1_0.torchscript.stage4.3.branch2.5.weight.step1.npy
"""
import argparse
import copy
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures"))
import export_torchvision_zoo as zoo  # noqa: E402
from make_fixtures import read_fixture  # noqa: E402


def reference_network(a):
    """The network the row's reference trains (state as the export script's
    reference starts it), and the map to the file's tensor names."""
    torch.manual_seed(0)
    model = zoo.build(a.model)
    if a.exporter == "torchscript" or os.path.exists(
            os.path.join(a.dir, a.model + ".dynamo.train.onnx")):
        return model, {}
    fused, names, _ = zoo.folded_model(model, os.path.join(a.dir, a.model + ".dynamo.onnx"))
    return fused, names


def kinks(m):
    """(name, module, kink points) of every ReLU and ReLU6 in m."""
    out = []
    for name, mod in m.named_modules():
        if isinstance(mod, torch.nn.ReLU6):
            out.append((name, mod, (0.0, 6.0)))
        elif isinstance(mod, torch.nn.ReLU):
            out.append((name, mod, (0.0,)))
    return out


def inputs_at_kinks(m, x):
    """The input of every ReLU/ReLU6 module of one forward of m.train()."""
    seen, hooks = {}, []
    for name, mod, _ in kinks(m):
        mod.inplace = False
        hooks.append(mod.register_forward_pre_hook(
            lambda mo, i, name=name: seen.__setitem__(name, i[0].detach().clone())))
    with torch.no_grad():
        m(x)
    for h in hooks:
        h.remove()
    return seen


def step1(net, x, labels, tensor, flip=None):
    """tensor's value after PyTorch's first SGD step in float64, with the
    gradient mask of flip = (module name, flat index) toggled."""
    m = copy.deepcopy(net).train().double()
    hooks = []
    for name, mod, pts in kinks(m):
        mod.inplace = False
        if flip is None or name != flip[0]:
            continue

        def fwd(mo, inp, out, pts=pts, idx=flip[1]):
            xin = inp[0]
            mask = (xin > pts[0]).double()
            if len(pts) > 1:
                mask = mask * (xin < pts[1]).double()
            flat = mask.view(-1)
            flat[idx] = 1.0 - flat[idx]
            # the value unchanged, the gradient mask toggled at idx
            return xin * mask + (out - xin * mask).detach()
        hooks.append(mod.register_forward_hook(fwd))
    params = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=zoo.LR, momentum=zoo.MOMENTUM, weight_decay=zoo.WD)
    loss = torch.nn.CrossEntropyLoss()(m(x.double()), labels)
    loss.backward()
    opt.step()
    return dict(m.state_dict())[tensor].detach().numpy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True, help="the zoo cache the test read")
    ap.add_argument("--model", required=True)
    ap.add_argument("--exporter", choices=("torchscript", "dynamo"), required=True)
    ap.add_argument("--tensor", required=True, help="the file's name of the failing tensor")
    ap.add_argument("--gcc", required=True, help="gcc-train's values after step 1 (.npy)")
    ap.add_argument("--candidates", type=int, default=12)
    a = ap.parse_args()
    net, names = reference_network(a)
    inverse = {v: k for k, v in names.items()}
    tensor = inverse.get(a.tensor, a.tensor)
    stem = os.path.join(a.dir, "%s.%s.train.fix" % (a.model, a.exporter))
    fx = read_fixture(stem)
    x = torch.from_numpy(fx["x"])
    labels = torch.from_numpy(fx["labels"])
    gcc = np.load(a.gcc).astype(np.float64)
    ref = fx["step1.f64." + a.tensor]
    base = step1(net, x, labels, tensor)
    print("%s: float64 step 1 recomputed here vs the fixture's: %.3g (must be ~0)" %
          (a.tensor, np.linalg.norm(base - ref)))
    d0 = np.linalg.norm(gcc - base)
    pt = max(np.linalg.norm(fx["step1.%s%s" % (r, a.tensor)] - ref) for r in ("f32.", "alt.",
                                                                               "pert."))
    print("distance to gcc-train: %.3g (PyTorch's float32 runs: up to %.3g)" % (d0, pt))
    x64 = inputs_at_kinks(copy.deepcopy(net).train().double(), x.double())
    x32 = inputs_at_kinks(copy.deepcopy(net).train().float(), x.float())
    cands = []
    for name, _, pts in kinks(net):
        if name not in x64:
            continue
        v64, v32 = x64[name].reshape(-1), x32[name].double().reshape(-1)
        err = (v32 - v64).abs().clamp_min(1e-12)
        dist = torch.stack([(v64 - p).abs() for p in pts]).min(0).values
        ratio = dist / err
        k = min(a.candidates, ratio.numel())
        vals, idx = torch.topk(ratio, k, largest=False)
        for r, i in zip(vals.tolist(), idx.tolist()):
            cands.append((r, name, i, v64[i].item(), v32[i].item()))
    cands.sort()
    best = None
    print("candidate kinks (distance to the kink / PyTorch float32's error there), closest first:")
    for r, name, i, v64, v32 in cands[:a.candidates]:
        d = np.linalg.norm(gcc - step1(net, x, labels, tensor, (name, i)))
        print("  %-40s element %-7d float64 %+.4g float32 %+.4g (%.3g errors from the kink): "
              "distance to gcc-train with it flipped %.3g" % (name, i, v64, v32, r, d))
        if best is None or d < best[0]:
            best = (d, name, i)
    print("best single flip: %s element %d: distance %.3g (from %.3g; PyTorch float32 %.3g)" %
          (best[1], best[2], best[0], d0, pt))


if __name__ == "__main__":
    main()
