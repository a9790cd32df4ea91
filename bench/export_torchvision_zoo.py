#!/usr/bin/env python3
"""Exports torchvision classifiers with both of PyTorch's ONNX exporters into a
cache directory, for tests/torchvision_zoo_test (issue 30).

For each model (random weights, seeded) and each exporter:
  DIR/<model>.<exporter>.onnx   (+ .onnx.data where the exporter writes one)
where <exporter> is `dynamo` (torch.onnx.export's default since PyTorch 2.9:
the torch.export-based exporter, a dynamic batch through dynamic_shapes) or
`torchscript` (dynamo=False, dynamic_axes on the batch), both of model.eval().
Beside them:
  DIR/<model>.input.npy    float32 [2, 3, S, S], a fixed pseudo-random input
  DIR/<model>.logits.npy   float32 [2, classes], PyTorch's eval() logits
  DIR/<model>.<exporter>.error.txt  when the export itself failed
and for training:
  DIR/<model>.torchscript.train.onnx  the TorchScript exporter's
      TrainingMode.TRAINING export of model.train() (BatchNormalization with
      batch statistics, not folded); the dynamo exporter has no training
      form (torch.export of a training BatchNorm writes no running-statistic
      updates), so its eval export is what gcc-train trains for that row
      (the importer keeps BatchNormalization as nn.BatchNorm2d when it
      imports for training). That export has each Conv -> BatchNormalization
      folded into the Conv (onnxscript's optimizer: weights `<conv>.weight`,
      biases `<conv>.weight_bias`), so its reference is PyTorch training the
      folded network: torch.fx.experimental.optimization.fuse of the model,
      loaded with the file's own folded values, trained in train() mode
      (BatchNorms not after a Conv stay and train on batch statistics; an
      all-zero Conv bias the exporter dropped stays zero)
  DIR/<model>.dynamo.train.onnx  only where that export's optimizer folded
      parameters into new initializers (ConvNeXt-Tiny, Swin-T, MaxViT-T:
      transposed Linear weights, gathered position biases): the same
      exporter with optimize=False, whose initializers are the state_dict's;
      its reference is the model itself trained in train() mode
  DIR/<model>.<exporter>.train.fix  (tests/fixture.h format) PyTorch's
      reference: the batch x [B, 3, S, S] and labels (B = --train-batch,
      default 2: the eval input; a larger B draws its own batch, and labels
      i * 7 mod classes), the recipe (SGD lr,
      momentum, weight decay), the CrossEntropyLoss of each of 3 SGD steps
      of model.train() on that batch, and every parameter and running
      statistic after the first step and after the third ("final.<state_dict
      name>", the ONNX initializer names), from four runs: float32 NCHW,
      float32 channels_last, float32 with ulp-perturbed inputs and float64
      (see train_reference). Two files because the TRAINING export itself runs one forward
      in training mode: its file holds the running statistics as that
      forward left them, the eval export's the ones before it.

Input size: the smallest square input each model accepts with a spatial map
of at least 2x2 before its global pool (so that a training BatchNorm at the
last stage averages over 8 values of a batch of 2, not 2), batch 2.
AlexNet and VGG keep 224: their adaptive pools (6x6, 7x7) export only when
the feature map is a multiple of the output. `transformer_encoder` (the
issue's nn.TransformerEncoder, see build_encoder) takes (2, 16, 64) and
outputs the same shape: its "logits" file holds that output, and it has no
training reference.

Weights that make the logits depend on the input: the classifier head (ViT
zero-initialises it) is re-drawn from N(0, 0.02), every BatchNorm's affine
parameters are randomised and its running statistics calibrated on 4
random batches (a fresh MobileNetV3's signal otherwise fades through its
blocks: its logits are the same for every input to 1e-8). Dropout and
stochastic depth are set to p = 0 for the training reference (gcc-train's
Philox masks are tested in tests/train_import_test; these rows test the
networks' layers).

Usage (the venv with torch/torchvision from PyPI; nothing is downloaded):
  python bench/export_torchvision_zoo.py [--dir DIR] [--models a,b,...] [--no-train]
      [--train-batch B]
--train-batch B: the training references' batch (default 2). With 2, a
training BatchNorm at the last stage of a 64x64 input averages 8 values;
networks whose float32 runs disagree with each other by more than the
tolerance at 2 (see bench/RESULTS.md) are better conditioned at 8 or 16.
DIR defaults to $GCC_TRAIN_ZOO_DIR, else ~/.cache/gcc-train/torchvision-zoo.
Then: bazel test //tests:torchvision_zoo_test --test_env=GCC_TRAIN_ZOO_DIR=DIR
"""
import argparse
import copy
import os
import sys
import traceback

import numpy as np
import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "fixtures"))
from make_fixtures import MAGIC  # noqa: E402

DEFAULT_MODELS = [
    "alexnet", "vgg11_bn", "resnet18", "resnet50", "resnext50_32x4d", "wide_resnet50_2",
    "densenet121", "squeezenet1_1", "shufflenet_v2_x1_0", "mobilenet_v2", "mobilenet_v3_small",
    "mobilenet_v3_large", "mnasnet1_0", "efficientnet_b0", "efficientnet_v2_s",
    "regnet_y_400mf", "googlenet", "inception_v3", "convnext_tiny", "vit_b_16", "swin_t",
    "maxvit_t", "transformer_encoder",
]

# not a torchvision model: the 23rd, nn.TransformerEncoder (2 post-norm
# layers, d_model 64, 4 heads, feed-forward 128, GELU, batch_first), input
# (batch, ENCODER_T, 64) and output of the same shape (no classifier, so no
# training reference: the Transformer ops' training is tests/gpt_*_test's)
ENCODER_T, ENCODER_C = 16, 64

# input side per model (see the docstring); 64 = a 2x2 map after 32x downsampling
SIZES = {"alexnet": 224, "vgg11_bn": 224, "inception_v3": 107, "vit_b_16": 224,
         "swin_t": 224, "maxvit_t": 224}
LR, MOMENTUM, WD = 0.001, 0.9, 1e-4
LABELS = [1, 5]


def size_of(name):
    return SIZES.get(name, 64)


def build_encoder():
    layer = torch.nn.TransformerEncoderLayer(d_model=ENCODER_C, nhead=4, dim_feedforward=128,
                                             dropout=0.0, activation="gelu", batch_first=True)
    m = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():  # LayerNorm affine parameters away from their 1/0 init
        for mod in m.modules():
            if isinstance(mod, torch.nn.LayerNorm):
                mod.weight.copy_(torch.rand(ENCODER_C, generator=gen) + 0.5)
                mod.bias.copy_(torch.rand(ENCODER_C, generator=gen) * 0.4 - 0.2)
    return m.eval()


def example_input(name, gen):
    if name == "transformer_encoder":
        return torch.rand(2, ENCODER_T, ENCODER_C, generator=gen) * 2 - 1
    size = size_of(name)
    return torch.rand(2, 3, size, size, generator=gen) * 2 - 1


def build(name):
    if name == "transformer_encoder":
        return build_encoder()
    kw = {"weights": None}
    if name in ("googlenet", "inception_v3"):
        kw["aux_logits"] = False
        kw["init_weights"] = True
    m = torchvision.models.get_model(name, **kw)
    # the classifier head re-drawn so that the logits depend on the input
    last = [mod for mod in m.modules() if isinstance(mod, torch.nn.Linear)]
    if last:
        torch.nn.init.normal_(last[-1].weight, 0.0, 0.02)
        if last[-1].bias is not None:  # MaxViT's head has none
            torch.nn.init.normal_(last[-1].bias, 0.0, 0.02)
    gen = torch.Generator().manual_seed(2)
    bns = []
    for mod in m.modules():
        if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
            c = mod.num_features
            mod.weight.data = torch.rand(c, generator=gen) + 0.5
            mod.bias.data = torch.rand(c, generator=gen) * 0.4 - 0.2
            mod.reset_running_stats()
            mod.momentum = None  # a cumulative average over the calibration batches
            bns.append(mod)
        # no randomness in training: gcc-train's dropout masks are tested elsewhere
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
        if type(mod).__name__ == "StochasticDepth":
            mod.p = 0.0
    m.train()
    size = size_of(name)
    with torch.no_grad():
        for _ in range(4):
            m(torch.rand(8, 3, size, size, generator=gen) * 2 - 1)
    for mod in bns:
        mod.momentum = 0.1  # PyTorch's default again, for the training reference
    return m.eval()


def sgd_steps(model, x, labels, frozen, channels_last, f64=False, perturb=False):
    """3 SGD steps of model.train(); the losses, the state after the first
    step and the final state (float64 arrays with f64: the model and the
    batch in float64, a reference for the float32 runs' rounding). perturb:
    the batch and every floating parameter and buffer multiplied by
    (1 + 2^-23 u), u uniform in [-1, 1] (seeded): a float32 rounding of
    every input, which the network then amplifies as it amplifies its own
    rounding (a training BatchNorm over a nearly constant channel included,
    which the channels_last run, summing its statistics in the same
    order, does not probe)."""
    m = copy.deepcopy(model).train()
    if f64:
        m = m.double()
        x = x.double()
    if perturb:
        gen = torch.Generator().manual_seed(4)

        def ulp_noise(t):
            return t * (1 + (torch.rand(t.shape, generator=gen, dtype=torch.float64) * 2 - 1)
                        * 2.0 ** -23).to(t.dtype)
        x = ulp_noise(x)
        with torch.no_grad():
            for v in list(m.parameters()) + list(m.buffers()):
                if v.is_floating_point():
                    v.copy_(ulp_noise(v))
    for k, p in m.named_parameters():
        # fuse_conv_bn_eval's new Conv biases come frozen: trained here
        p.requires_grad_(k not in frozen)
    if channels_last:
        m = m.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=LR,
                          momentum=MOMENTUM, weight_decay=WD)
    lossf = torch.nn.CrossEntropyLoss()

    def state():
        return {k: v.detach().contiguous().numpy().astype(np.float64 if f64 else np.float32)
                for k, v in m.state_dict().items()
                if not k.endswith("num_batches_tracked") and k not in frozen
                # integer buffers (MaxViT's and Swin's relative_position_index) are no
                # parameters or running statistics
                and v.is_floating_point()}

    losses, first = [], None
    for step in range(3):
        opt.zero_grad()
        loss = lossf(m(x), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step == 0:
            first = state()
    return losses, first, state()


def train_reference(model, x, labels, path, names=None, frozen=()):
    """3 SGD steps of model.train() from its present state, written to `path`;
    `names` maps state_dict names to the ONNX file's initializer names;
    parameters named in `frozen` are not trained (nor written).

    Four times: in float32 NCHW ("loss.N", "final.NAME"), channels_last
    ("alt.loss.N", "alt.NAME"), whose convolutions sum in another order,
    and NCHW with every input and parameter perturbed by a float32 rounding
    ("pert.loss.N", "pert.NAME"), and in float64 NCHW ("f64.loss.N",
    "f64.NAME", float64 arrays); and each run's state after the first step
    ("step1.f32.NAME", "step1.alt.NAME", "step1.pert.NAME",
    "step1.f64.NAME"). The float64 run is the reference the test measures
    every float32 run against (normwise per tensor): PyTorch's three
    float32 runs' distance from it is how much this very computation
    amplifies float32 rounding, which the test allows gcc-train's float32
    steps too.
    After one step that distance is rounding in one gradient; after three
    it can be as large as the update itself (MobileNetV2: PyTorch's float32
    loss at step 3 is 1.5% from float64's), which is why the first step is
    kept too:
    with a batch of 2, a training BatchNorm over a channel that ReLU6 or
    ReLU left (nearly) constant divides rounding noise by sqrt(eps), and
    PyTorch's own float32 and float64 runs of MobileNetV2 differ by 5e4
    tolerances after 3 steps at lr 1e-3 (ResNet-18, SqueezeNet 1.1: within
    0.5). LR 1e-3: at 1e-2 even ResNet-18's float32 and float64 runs differ
    by 1e3 tolerances; at 1e-3 the parameters still move by 5e3-1e5
    tolerances (a wrong gradient cannot pass)."""
    fw = StreamingFixture(path)
    fw.add("x", x.float().numpy())
    fw.add("labels", labels.numpy())
    fw.add("lr", np.float64(LR))
    fw.add("momentum", np.float64(MOMENTUM))
    fw.add("weight_decay", np.float64(WD))
    for prefix, cl, f64, pert in (("", False, False, False), ("alt.", True, False, False),
                                  ("pert.", False, False, True), ("f64.", False, True, False)):
        losses, first, state = sgd_steps(model, x, labels, frozen, cl, f64, pert)
        for step, loss in enumerate(losses, 1):
            fw.add("%sloss.%d" % (prefix, step), np.float64(loss))
        for k, v in state.items():
            fw.add((prefix or "final.") + (names or {}).get(k, k), v)
        for k, v in first.items():
            fw.add("step1." + (prefix or "f32.") + (names or {}).get(k, k), v)
    fw.close()


class StreamingFixture:
    """tests/fixture.h's format (make_fixtures.FixtureWriter's), each record
    written as it is added: VGG-11-BN's reference (133M parameters, six
    states) does not fit in memory next to its networks. Written to
    PATH.tmp and renamed at close(), so that a killed run leaves no partial
    fixture."""

    def __init__(self, path):
        self.path, self.names = path, set()
        self.f = open(path + ".tmp", "wb")
        self.f.write(MAGIC)

    def add(self, name, value):
        arr = np.asarray(value, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
        if name in self.names or not name or any(c.isspace() for c in name):
            raise ValueError("bad or duplicate record name %r" % name)
        self.names.add(name)
        dt = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64",
              np.dtype(np.int64): "i64"}[arr.dtype]
        header = " ".join([name, dt, str(arr.ndim)] + [str(d) for d in arr.shape])
        self.f.write(header.encode("ascii") + b"\n")
        self.f.write(arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes(order="C"))

    def close(self):
        self.f.close()
        os.replace(self.path + ".tmp", self.path)


def folded_reference(model, onnx_path, x, labels, path):
    """The reference for training the dynamo export (BatchNorms folded into
    the Convs): the fx-fused model with the file's values."""
    fused, names, frozen = folded_model(model, onnx_path)
    train_reference(fused, x, labels, path, names, frozen)


def folded_model(model, onnx_path):
    """The fx-fused model loaded with the dynamo export's folded values; the
    map from its state_dict names to the file's initializer names, and the
    names it does not train."""
    import onnx
    import onnx.numpy_helper
    import torch.fx.experimental.optimization
    fused = torch.fx.experimental.optimization.fuse(copy.deepcopy(model).eval())
    file = {t.name: t for t in onnx.load(onnx_path).graph.initializer}
    names, state, frozen = {}, fused.state_dict(), set()
    for k in state:
        if k.endswith("num_batches_tracked"):
            continue
        if k.startswith("_tensor_constant"):
            # a constant torch.fx's tracing made an attribute (MaxViT's relative
            # position index): not a parameter, not in the file by that name
            frozen.add(k)
            continue
        cand = [k, k[:-len(".bias")] + ".weight_bias"] if k.endswith(".bias") else [k]
        hit = [c for c in cand if c in file]
        if not hit and k.endswith(".bias") and not state[k].any():
            # the exporter drops an all-zero Conv bias (SqueezeNet's init): the
            # file's network has none to train
            frozen.add(k)
            continue
        if not hit:
            raise RuntimeError("%s: no initializer %s in %s" % (k, " or ".join(cand), onnx_path))
        names[k] = hit[0]
        state[k] = torch.from_numpy(onnx.numpy_helper.to_array(file[hit[0]]).copy())
    fused.load_state_dict(state)
    return fused, names, frozen


def export(model, x, path, exporter, training=False, optimize=True):
    err = path[:-5] + ".error.txt"
    if os.path.exists(err):
        os.remove(err)
    try:
        if exporter == "dynamo":
            batch = torch.export.Dim("batch", min=1, max=1024)
            torch.onnx.export(model, (x,), path, dynamo=True, input_names=["input"],
                              output_names=["logits"], dynamic_shapes=({0: batch},),
                              optimize=optimize)
        else:
            mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
            torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17,
                              input_names=["input"], output_names=["logits"], training=mode,
                              do_constant_folding=not training,
                              dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}})
        print("exported", path, flush=True)
        return True
    except Exception:  # recorded for the test's table
        with open(err, "w") as f:
            f.write(traceback.format_exc())
        print("FAILED", path, flush=True)
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=os.environ.get(
        "GCC_TRAIN_ZOO_DIR", os.path.expanduser("~/.cache/gcc-train/torchvision-zoo")))
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    ap.add_argument("--no-train", action="store_true", help="only the eval exports")
    ap.add_argument("--train-batch", type=int, default=2,
                    help="the training references' batch (default 2: the eval input)")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    for name in a.models.split(","):
        torch.manual_seed(0)
        model = build(name)
        gen = torch.Generator().manual_seed(1)
        x = example_input(name, gen)
        with torch.no_grad():
            logits = model(x)
        spread = (logits[0] - logits[1]).abs().max().item() / logits.abs().max().item()
        print("%s: %s input, output row spread %.3g of the largest" %
              (name, "x".join(map(str, x.shape[1:])), spread), flush=True)
        base = os.path.join(a.dir, name)
        np.save(base + ".input.npy", x.numpy().astype(np.float32))
        np.save(base + ".logits.npy", logits.numpy().astype(np.float32))
        labels = torch.tensor(LABELS, dtype=torch.int64)
        x_eval = x
        if a.train_batch != 2:
            if a.train_batch < 1:
                sys.exit("--train-batch must be positive")
            classes = logits.shape[-1]
            x = torch.cat([example_input(name, torch.Generator().manual_seed(3 + i))
                           for i in range((a.train_batch + 1) // 2)])[:a.train_batch]
            labels = torch.tensor([(i * 7) % classes for i in range(a.train_batch)],
                                  dtype=torch.int64)
        train = not a.no_train and name != "transformer_encoder"
        for exporter in ("torchscript", "dynamo"):
            ok = export(model, x_eval, "%s.%s.onnx" % (base, exporter), exporter)
            if exporter == "dynamo" and ok and train:
                for stale in (".dynamo.train.error.txt", ".dynamo.train.onnx",
                              ".dynamo.train.onnx.data"):
                    if os.path.exists(base + stale):
                        os.remove(base + stale)
                try:
                    folded_reference(model, "%s.dynamo.onnx" % base, x, labels,
                                     base + ".dynamo.train.fix")
                except Exception:
                    # the exporter's optimizer rewrote parameters into new
                    # initializers (ConvNeXt's, Swin's, MaxViT's transposed
                    # Linear weights, gathered position biases): that file is
                    # for inference. The training row is then the same
                    # exporter without its optimizer (optimize=False: the
                    # initializers are the state_dict's), trained as the model.
                    print("%s: the default export's parameters are folded; training row from "
                          "optimize=False" % name, flush=True)
                    if export(model, x_eval, base + ".dynamo.train.onnx", "dynamo",
                              optimize=False):
                        train_reference(model, x, labels, base + ".dynamo.train.fix")
        if not train:
            continue
        # the TRAINING export runs one training forward: the reference starts
        # from the state it leaves (what the file holds)
        m = copy.deepcopy(model).train()
        if export(m, x_eval, base + ".torchscript.train.onnx", "torchscript", training=True):
            train_reference(m, x, labels, base + ".torchscript.train.fix")


if __name__ == "__main__":
    main()
