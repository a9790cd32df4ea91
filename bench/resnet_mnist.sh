#!/usr/bin/env bash
# Issue 15's end-to-end check: a ResNet-style network exported from PyTorch
# (bench/export_resnet_mnist.py) trained by gcc-train from the ONNX file on
# MNIST written as .npy (tools/mnist_to_npy.py), then exported as a .gccx
# bundle and run by gcc-run on the 10,000 test images. Goal: >= 99.3% test
# accuracy. Figures go in bench/RESULTS.md (with the machine's load).
#
#   bench/resnet_mnist.sh [OUTDIR]        (default runs/resnet-mnist, ignored by git)
#
# Environment: WIDTH (default 16), EPOCHS (4), THREADS (2), LR (0.1),
# BATCH (128), PYTHON (python3: needs torch and numpy), NICE (10),
# GCC_TRAIN / GCC_RUN (default: bazel-bin/cli/gcc-train, gcc-run; build them
# with `bazel build //cli:gcc-train //cli:gcc-run`).
# Long: not a test. Run from the repository's root.
set -euo pipefail
OUT=${1:-runs/resnet-mnist}
WIDTH=${WIDTH:-16}
EPOCHS=${EPOCHS:-4}
THREADS=${THREADS:-2}
LR=${LR:-0.1}
BATCH=${BATCH:-128}
PYTHON=${PYTHON:-python3}
NICE=${NICE:-10}
GCC_TRAIN=${GCC_TRAIN:-bazel-bin/cli/gcc-train}
GCC_RUN=${GCC_RUN:-bazel-bin/cli/gcc-run}
mkdir -p "$OUT"

# 1. the data as .npy, 2. the model as ONNX
[ -f "$OUT/mnist-npy/y_test.npy" ] ||
  "$PYTHON" tools/mnist_to_npy.py --data data/mnist --out "$OUT/mnist-npy"
"$PYTHON" bench/export_resnet_mnist.py "$OUT/resnet_mnist.onnx" --width "$WIDTH"

# 3. train it from the ONNX file (torch.optim.SGD(lr, momentum=0.9,
#    nesterov=True, weight_decay=5e-4) + CosineAnnealingLR, batch BATCH,
#    inputs normalised as torchvision's Normalize((0.1307,), (0.3081,))),
#    write the trained model and a bundle
echo "load before: $(cat /proc/loadavg) ($(nproc) CPUs)"
nice -n "$NICE" "$GCC_TRAIN" "$OUT/resnet_mnist.onnx" --device cpu --threads "$THREADS" \
  --dataset npy --data "$OUT/mnist-npy" --loss cross-entropy --optimizer sgd --lr "$LR" \
  --momentum 0.9 --nesterov --weight-decay 5e-4 --lr-schedule cosine --batch-size "$BATCH" \
  --epochs "$EPOCHS" --mean 0.1307 --std 0.3081 --progress lines --log-every 100 \
  --output "$OUT/resnet_mnist.trained.pb" --export "$OUT/resnet_mnist.gccx"
echo "load after: $(cat /proc/loadavg)"

# 4. the bundle, run by gcc-run on the 10,000 MNIST test images (IDX, which
#    gcc-run normalises as in training): it prints the accuracy
"$GCC_RUN" "$OUT/resnet_mnist.gccx" --device cpu --threads "$THREADS" \
  --input data/mnist/t10k-images-idx3-ubyte.gz --labels data/mnist/t10k-labels-idx1-ubyte.gz \
  --output "$OUT/predictions.csv"
head -4 "$OUT/predictions.csv"
