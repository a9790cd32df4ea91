#!/usr/bin/env bash
# gpu_check.sh: the CUDA checks that need a GPU, in one command, for a machine
# that has one (this project's CI has none). From the repository root:
#
#   bench/gpu_check.sh [--data DIR]
#
#  1. builds everything and lists the devices (gcc-train --list-devices);
#  2. runs the GPU tests (tests/gpu, which skip without a GPU) and the
#     device-plan tests;
#  3. trains the MNIST MLP for 100 steps on cuda and on cpu with the same seed
#     and a loss line per step, and compares the two loss curves (each step
#     within 1e-3 relative);
#  4. trains one epoch on cuda and on cpu (default logging) and prints their
#     samples/s, the launches and copies per step and the CUDA Graph state;
#  5. times one training step replayed from a CUDA Graph and issued launch by
#     launch (bench/gpu_step, batch 64 and 1024).
# Exits non-zero when a step fails or the curves differ.
set -euo pipefail
cd "$(dirname "$0")/.."

DATA=data/mnist
while [ $# -gt 0 ]; do
  case "$1" in
    --data) DATA=$2; shift 2 ;;
    *) echo "usage: $0 [--data DIR]" >&2; exit 2 ;;
  esac
done

section() { printf '\n== %s ==\n' "$*"; }

section "build"
bazel build //:gcc-train //bench:gpu_step //tests/gpu:gpu_test //tests:device_plan_test >&2
BB=$(bazel info bazel-bin 2>/dev/null)
GT=$BB/gcc-train
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

section "devices"
"$GT" --list-devices
if ! "$GT" models/mnist_mlp.pb --device cuda --epochs 0 --no-output --quiet >/dev/null 2>"$TMP/why"; then
  echo "gpu_check: no usable GPU: $(cat "$TMP/why")" >&2
  exit 4
fi

section "GPU tests"
bazel test //tests/gpu:gpu_test //tests:device_plan_test //tests:cuda_runtime_test \
  --test_output=errors

section "loss curves, 100 steps, seed 1: cuda vs cpu"
for dev in cuda cpu; do
  "$GT" models/mnist_mlp.pb --device "$dev" --data "$DATA" --seed 1 --max-steps 100 \
    --log-every 1 --no-output --epochs 1 >"$TMP/$dev.log"
  grep -E '^\[1, +[0-9]+\] loss' "$TMP/$dev.log" | awk '{print $NF}' >"$TMP/$dev.loss"
done
paste "$TMP/cuda.loss" "$TMP/cpu.loss" | awk '
  { n++; d = $1 - $2; if (d < 0) d = -d; m = ($2 < 0 ? -$2 : $2); if (m < 1) m = 1;
    r = d / m; if (r > worst) { worst = r; at = n } }
  END {
    if (n < 100) { printf "only %d loss lines (want 100)\n", n; exit 1 }
    printf "steps compared: %d, largest relative difference %.3g at step %d (limit 1e-3)\n", n, worst, at
    exit worst <= 1e-3 ? 0 : 1 }'

section "one epoch, default logging (losses read back every 100 steps)"
for dev in cuda cpu; do
  "$GT" models/mnist_mlp.pb --device "$dev" --data "$DATA" --seed 1 --epochs 1 --no-output \
    --quiet | tee "$TMP/$dev.epoch"
done
"$GT" models/mnist_mlp.pb --device cuda --data "$DATA" --epochs 1 --no-output --log-every 0 \
  | grep -E 'launches and .* copies per training step' || true

section "one training step: CUDA Graph replay vs launch by launch"
"$BB/bench/gpu_step"
echo
echo "gpu_check: all checks passed"
