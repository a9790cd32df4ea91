#!/usr/bin/env python3
"""The conditioning of a bias gradient in a torchvision_zoo_test training row
(issue 30): a layer's bias gradient is the sum of its output gradient dY
over every position of the batch; where those terms cancel, float32 cannot
compute the sum to better than u * kappa relative (u = 2^-24, kappa =
||sum |dY| || / ||sum dY||, normwise over the bias), whatever the order,
and a summation order of n terms can reach log2(n) or sqrt(n) times that.
PyTorch's three float32 runs in the fixture share one reduction kernel for
a Linear's bias gradient, so their spread (the test's P) can be far below
that level while another library's order lands anywhere within it.

This script recomputes PyTorch's first step in float64 on the row's batch,
takes dY of module --module at step 1 and prints kappa and u * kappa: a
tensor over the test's tolerance whose error (E, from the test's message)
is below u * kappa is rounding the sum itself forces.

Usage (the bench venv; the zoo cache the test read):
  python bench/zoo_bias_conditioning.py --dir ZOO --model maxvit_t --exporter torchscript \\
      --module blocks.0.layers.1.layers.grid_attention.mlp_layer.3
"""
import argparse
import copy
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures"))
import export_torchvision_zoo as zoo  # noqa: E402
from make_fixtures import read_fixture  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--exporter", choices=("torchscript", "dynamo"), required=True)
    ap.add_argument("--module", required=True, help="the Linear or Conv whose bias failed")
    a = ap.parse_args()
    torch.manual_seed(0)
    net = zoo.build(a.model)
    if a.exporter == "dynamo" and not os.path.exists(
            os.path.join(a.dir, a.model + ".dynamo.train.onnx")):
        net, _, _ = zoo.folded_model(net, os.path.join(a.dir, a.model + ".dynamo.onnx"))
    fx = read_fixture(os.path.join(a.dir, "%s.%s.train.fix" % (a.model, a.exporter)))
    m = copy.deepcopy(net).train().double()
    mods = dict(m.named_modules())
    if a.module not in mods:
        sys.exit("%s has no module %s" % (a.model, a.module))
    seen = {}
    mods[a.module].register_full_backward_hook(
        lambda mo, gi, go: seen.__setitem__("dy", go[0].detach().clone()))
    loss = torch.nn.CrossEntropyLoss()(m(torch.from_numpy(fx["x"]).double()),
                                       torch.from_numpy(fx["labels"]))
    loss.backward()
    dy = seen["dy"]
    # the bias's axis: the last for a Linear, 1 for a Conv
    axis = -1 if isinstance(mods[a.module], torch.nn.Linear) else 1
    dy = dy.movedim(axis, -1).reshape(-1, dy.shape[axis])
    s, absum = dy.sum(0), dy.abs().sum(0)
    kappa = float(absum.norm() / s.norm())
    u = 2.0 ** -24
    print("%s.bias: gradient = sum of %d rows; kappa %.4g; u * kappa %.3g relative "
          "(x log2(n): %.3g)" % (a.module, dy.shape[0], kappa, u * kappa,
                                  u * kappa * torch.log2(torch.tensor(float(dy.shape[0]))).item()))


if __name__ == "__main__":
    main()
