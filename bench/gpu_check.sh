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
#  4. trains, evaluates and trains again with CUDA Graphs on (the default):
#     the MNIST MLP and the MNIST CNN at batch 256 into the second epoch
#     (300 steps; the test set evaluated at batch 1000 after epoch 1), on
#     cuda and on cpu; every loss must agree (MLP 1e-3, CNN 1e-2 relative:
#     cuDNN sums convolutions in other orders than im2col + GEMM), the
#     epoch-1 test accuracies within 0.3 points, and the losses after the
#     evaluation must not be stuck at one value;
#  5. trains one epoch on cuda and on cpu (default logging) and prints their
#     samples/s, the launches and copies per step and the CUDA Graph state;
#  6. times one training step replayed from a CUDA Graph and issued launch by
#     launch (bench/gpu_step, batch 64 and 1024);
#  7. only when several GPUs are usable (and mpirun is installed): data-parallel
#     training, one rank per GPU with NCCL (`mpirun -np N gcc-train ... --device
#     cuda`), 200 steps of the MNIST MLP and the MNIST CNN at global batch 256
#     against one GPU at the same global batch: every parameter within 1e-4
#     (tests/compare_params), then samples/s and the all-reduce time per step
#     for N = 1 and N = all GPUs.
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
bazel build //:gcc-train //bench:gpu_step //tests/gpu:gpu_test //tests:device_plan_test \
  //tests:compare_params >&2
BB=$(bazel info bazel-bin 2>/dev/null)
GT=$BB/cli/gcc-train
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

# train -> evaluate -> train: a session holds several plans on one backend
# (training at 256, the epoch's last batch of 96, evaluation at 1000), each
# with its own CUDA Graphs and cuDNN workspace.
for model in mnist_mlp mnist_cnn; do
  section "train -> evaluate -> train with CUDA Graphs, $model: cuda vs cpu"
  tol=1e-3
  [ "$model" = mnist_cnn ] && tol=1e-2
  for dev in cuda cpu; do
    "$GT" models/$model.pb --device "$dev" --data "$DATA" --seed 2 --batch-size 256 \
      --eval-batch-size 1000 --epochs 2 --max-steps 300 --log-every 1 --no-output \
      >"$TMP/$model.$dev.log"
    grep -E '^\[[12], +[0-9]+\] loss' "$TMP/$model.$dev.log" | awk '{print $1, $NF}' \
      >"$TMP/$model.$dev.loss"
    grep -E '^epoch 1: test accuracy' "$TMP/$model.$dev.log" | sed -E 's/.*\(([0-9]+)\/.*/\1/' \
      >"$TMP/$model.$dev.correct"
  done
  paste "$TMP/$model.cuda.loss" "$TMP/$model.cpu.loss" | awk -v tol="$tol" '
    { n++; d = $2 - $4; if (d < 0) d = -d; m = ($4 < 0 ? -$4 : $4); if (m < 1) m = 1;
      r = d / m; if (r > worst) { worst = r; at = n }
      if ($1 == "[2,") { if (!($2 in seen2)) { seen2[$2] = 1; distinct++ } e2++ } }
    END {
      if (n < 300) { printf "only %d loss lines (want 300)\n", n; exit 1 }
      printf "steps compared: %d, largest relative difference %.3g at step %d (limit %s)\n",
        n, worst, at, tol
      if (e2 < 2 || distinct < 2) { printf "epoch 2: %d steps, %d distinct losses on cuda: stuck\n", e2, distinct; exit 1 }
      exit worst <= tol + 0 ? 0 : 1 }'
  c1=$(cat "$TMP/$model.cuda.correct") c2=$(cat "$TMP/$model.cpu.correct")
  if [ -z "$c1" ] || [ -z "$c2" ] || [ $(( c1 > c2 ? c1 - c2 : c2 - c1 )) -gt 30 ]; then
    echo "epoch-1 test accuracy: cuda ${c1:-?}/10000, cpu ${c2:-?}/10000: they disagree" >&2
    exit 1
  fi
  echo "epoch-1 test accuracy: cuda $c1/10000, cpu $c2/10000"
done

section "one epoch, default logging (losses read back every 100 steps)"
for dev in cuda cpu; do
  "$GT" models/mnist_mlp.pb --device "$dev" --data "$DATA" --seed 1 --epochs 1 --no-output \
    --quiet | tee "$TMP/$dev.epoch"
done
"$GT" models/mnist_mlp.pb --device cuda --data "$DATA" --epochs 1 --no-output --log-every 0 \
  | grep -E 'launches and .* copies per training step' || true

section "one training step: CUDA Graph replay vs launch by launch"
"$BB/bench/gpu_step"

NGPU=$("$GT" --list-devices 2>/dev/null | grep -c '^ *cuda:' || true)
if [ "${NGPU:-0}" -ge 2 ] && command -v mpirun >/dev/null; then
  section "several GPUs: $NGPU ranks with NCCL against one GPU, same global batch"
  MPIRUN=(mpirun --allow-run-as-root -np "$NGPU" --bind-to none)
  for model in mnist_mlp mnist_cnn; do
    common=(models/$model.pb --device cuda --data "$DATA" --seed 3 --batch-size 256 --epochs 1
            --max-steps 200 --log-every 0)
    "$GT" "${common[@]}" --output "$TMP/$model.1gpu.pb" | tee "$TMP/$model.1gpu.log" | tail -1
    "${MPIRUN[@]}" "$GT" "${common[@]}" --output "$TMP/$model.ngpu.pb" | tee "$TMP/$model.ngpu.log" |
      grep -E 'data-parallel|trained|all-reduce'
    "$BB/tests/compare_params" "$TMP/$model.1gpu.pb" "$TMP/$model.ngpu.pb" 1e-4 | tail -1
  done
else
  section "several GPUs: skipped ($NGPU usable GPU(s)${NGPU:+, }$(command -v mpirun >/dev/null || echo 'no mpirun'))"
fi
echo
echo "gpu_check: all checks passed"
