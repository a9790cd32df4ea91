#!/usr/bin/env bash
# gpu_check.sh: the CUDA checks that need a GPU, in one command, for a machine
# that has one (this project's CI has none). From the repository root:
#
#   bench/gpu_check.sh [--data DIR]
#   bench/gpu_check.sh --self-test     (no GPU: the checks' logic on canned outputs)
#
#  1. builds everything and lists the devices (gcc-train --list-devices);
#  2. runs the GPU tests (tests/gpu, which skip without a GPU) and the
#     device-plan tests; then, when compute-sanitizer is installed, the GPU
#     tests under its memcheck and racecheck tools (any error fails);
#  3. trains the MNIST MLP for 100 steps on cuda and on cpu with the same seed
#     and a loss line per step, and compares the two loss curves (each step
#     within 1e-3 relative); then in bfloat16 (--precision bf16): the MNIST
#     MLP and CNN for 30 steps on cuda (cuBLASLt and cuDNN in 16 bits) and on
#     cpu (the CPU backend rounding the same values), each step within 2e-2
#     (the bound tests/precision_test derives for a few steps; measured on the
#     CPU, the MLP's bf16 and fp32 curves agree within 1.4e-4 for 30 steps and
#     drift apart to 1e-1 by step 71, so longer bf16 curves would compare
#     chaos, not arithmetic), with the run's GEMM epilogue fallbacks printed;
#  4. trains, evaluates and trains again with CUDA Graphs on (the default):
#     the MNIST MLP and the MNIST CNN at batch 256 into the second epoch
#     (300 steps; the test set evaluated at batch 1000 after epoch 1), on
#     cuda and on cpu; every loss must agree (MLP 1e-3, CNN 1e-2 relative:
#     cuDNN sums convolutions in other orders than im2col + GEMM), the
#     epoch-1 test accuracies within 0.3 points, and the losses after the
#     evaluation must not be stuck at one value;
#  5. trains one epoch on cuda and on cpu (default logging) and prints their
#     samples/s, the launches and copies per step and the CUDA Graph state;
#  6. launches per step: a --profile run on cuda (every launch timed with CUDA
#     events) must not issue more launches per training step than the plan
#     says (the run summary's "N launches"; bench/trace_launches.py counts the
#     trace's device events per step); the device time table is printed;
#  7. times one training step replayed from a CUDA Graph and issued launch by
#     launch (bench/gpu_step, batch 64 and 1024): the replay must be faster at
#     every batch size;
#  8. only when several GPUs are usable (and mpirun is installed): data-parallel
#     training, one rank per GPU with NCCL (`mpirun -np N gcc-train ... --device
#     cuda`), 200 steps of the MNIST MLP and the MNIST CNN at global batch 256
#     against one GPU at the same global batch: every parameter within 1e-4
#     (tests/compare_params), then samples/s and the all-reduce time per step
#     for N = 1 and N = all GPUs;
#  9. fp16 with dynamic loss scaling (GradScaler's rules, growth every 25
#     good steps so the scale moves): the MNIST MLP for 200 steps on cuda and
#     on cpu (whose CPU plan rounds the same values to float16): the loss
#     curves within 2e-2 and the same steps skipped, the same final scale
#     (the summary lines equal);
# 10. when PyTorch with CUDA is installed: a table of samples/s of the MNIST
#     MLP at batch 1024, gcc-train against PyTorch on the same GPU
#     (bench/torch_gpu_step.py), for fp32, tf32, bf16 and fp16 (PyTorch's
#     fp16: torch.autocast with torch.amp.GradScaler, as its AMP recipe says;
#     the gcc-train rows other than fp32 when it has --precision; n/a where a
#     run fails: the table reports, the checks above decide).
# Exits 1 when a step fails, the curves (fp32 or bf16) differ beyond
# tolerance, fp16 loss scaling skips other steps on the GPU than on the CPU, a step
# launches more than its plan says, a CUDA Graph replay is not faster than
# launch-by-launch issue, or compute-sanitizer reports an error; 4 when there
# is no usable GPU.
set -euo pipefail
cd "$(dirname "$0")/.."

# ---- the checks: functions of files, so that --self-test can feed them -------

# check_curves A B TOL MIN [E2]: two files of "TAG LOSS" lines (cuda, cpu),
# step by step; fails when they differ in length, have fewer than MIN lines,
# any relative difference (by max(1, |cpu|)) exceeds TOL, or (E2 = 1) the
# epoch-2 losses ("[2," tags) on cuda are stuck at one value.
check_curves() {
  paste "$1" "$2" | awk -v tol="$3" -v min="$4" -v e2min="${5:-0}" '
    { n++; if (NF != 4) bad = 1
      d = $2 - $4; if (d < 0) d = -d; m = ($4 < 0 ? -$4 : $4); if (m < 1) m = 1;
      r = d / m; if (r > worst) { worst = r; at = n }
      if ($1 == "[2,") { if (!($2 in seen2)) { seen2[$2] = 1; distinct++ } e2++ } }
    END {
      if (bad) { printf "loss files of different lengths or forms\n"; exit 1 }
      if (n < min) { printf "only %d loss lines (want %d)\n", n, min; exit 1 }
      printf "steps compared: %d, largest relative difference %.3g at step %d (limit %s)\n",
        n, worst, at, tol
      if (e2min > 0 && (e2 < 2 || distinct < 2)) {
        printf "epoch 2: %d steps, %d distinct losses on cuda: stuck\n", e2, distinct; exit 1 }
      exit worst <= tol + 0 ? 0 : 1 }'
}

# check_launches PLAN COUNTS: the launches per step of a profiled run
# (key=value lines of bench/trace_launches.py) must not exceed the plan's.
check_launches() {
  local plan=$1 max steps
  max=$(sed -n 's/^max_per_step=//p' "$2")
  steps=$(sed -n 's/^steps=//p' "$2")
  if [ -z "$plan" ] || [ -z "$max" ] || [ -z "$steps" ] || [ "$steps" -lt 1 ]; then
    echo "launch count: no plan count ('$plan') or no timed steps in the trace" >&2
    return 1
  fi
  echo "launches per training step: plan $plan, measured at most $max over $steps steps"
  if [ "$max" -gt "$plan" ]; then
    echo "a step launched $max times, more than the $plan its plan says" >&2
    return 1
  fi
}

# check_graph_speed GPU_STEP_OUTPUT: at every batch size the step replayed
# from a CUDA Graph (cuda_graph=on) must replay and take less time than the
# step issued launch by launch (cuda_graph=off).
check_graph_speed() {
  awk '
    /^batch=/ {
      b = ""; g = ""; us = ""; rep = ""
      for (i = 1; i <= NF; i++) {
        split($i, kv, "=")
        if (kv[1] == "batch") b = kv[2]
        else if (kv[1] == "cuda_graph") g = kv[2]
        else if (kv[1] == "step_us") us = kv[2]
        else if (kv[1] == "replays") rep = kv[2]
      }
      if (b == "" || g == "" || us == "") { print "unreadable line: " $0; bad = 1; next }
      t[b, g] = us; r[b, g] = rep; seen[b] = 1
    }
    END {
      n = 0
      for (b in seen) {
        n++
        if (!((b, "on") in t) || !((b, "off") in t)) { printf "batch %s: a mode is missing\n", b; bad = 1; continue }
        printf "batch %s: CUDA Graph replay %.1f us per step, launch by launch %.1f us (%.2fx)\n",
          b, t[b, "on"], t[b, "off"], t[b, "off"] / t[b, "on"]
        if (r[b, "on"] + 0 < 1) { printf "batch %s: the graph run replayed no step\n", b; bad = 1 }
        if (t[b, "on"] + 0 >= t[b, "off"] + 0) { printf "batch %s: the replay is not faster\n", b; bad = 1 }
      }
      if (n == 0) { print "no step timings"; bad = 1 }
      exit bad ? 1 : 0 }' "$1"
}

# check_sanitizer LOG: compute-sanitizer's summary must say 0 errors.
check_sanitizer() {
  if grep -qE 'ERROR SUMMARY: [1-9][0-9]* error' "$1"; then
    grep -E 'ERROR SUMMARY' "$1" >&2
    return 1
  fi
  if ! grep -qE 'ERROR SUMMARY: 0 errors' "$1"; then
    echo "compute-sanitizer printed no summary" >&2
    return 1
  fi
}

# extract_losses LOG: gcc-train's per-step loss lines ("[1,    10] loss: 2.3010")
# as "TAG LOSS" lines ("[1, 2.3010"), the input of check_curves.
extract_losses() {
  grep -E '^\[[0-9]+, +[0-9]+\] loss' "$1" | awk '{print $1, $NF}'
}

# check_loss_scale A B: the fp16 loss scaling summaries of two runs (cuda,
# cpu: "fp16 loss scaling: N of M steps skipped (inf/nan gradients), scale
# S") must be present and equal: the same steps skipped, the same scale.
check_loss_scale() {
  local a b
  a=$(grep -E '^fp16 loss scaling: ' "$1" || true)
  b=$(grep -E '^fp16 loss scaling: ' "$2" || true)
  echo "cuda: ${a:-no summary}"
  echo "cpu:  ${b:-no summary}"
  if [ -z "$a" ] || [ "$a" != "$b" ]; then
    echo "fp16 loss scaling: the GPU and the CPU disagree on the skipped steps or the scale" >&2
    return 1
  fi
}

# samples_per_s LOG: the rate of gcc-train's summary line ("...: N samples/s").
samples_per_s() {
  sed -nE 's/.*: ([0-9.]+) samples\/s.*/\1/p' "$1" | tail -1
}

# --self-test: every check against canned outputs, good ones must pass and
# bad ones fail; needs no GPU, no build (bench:gpu_check_self_test runs it).
self_test() {
  local T fails=0 got
  T=$(mktemp -d)
  expect() { # expect pass|fail NAME COMMAND...
    local want=$1 name=$2
    shift 2
    if "$@" >"$T/out" 2>&1; then got=pass; else got=fail; fi
    if [ "$got" = "$want" ]; then
      echo "ok   $name ($got)"
    else
      echo "FAIL $name: expected $want, got $got"
      sed 's/^/     /' "$T/out"
      fails=$((fails + 1))
    fi
  }
  for i in 1 2 3 4 5; do printf '[1, %5d] loss: 2.30%d\n' "$i" "$i"; done >"$T/log1"
  extract_losses "$T/log1" >"$T/a"
  expect pass "loss lines extracted" grep -qx '\[1, 2.305' "$T/a"
  cp "$T/a" "$T/b"
  expect pass "identical curves" check_curves "$T/a" "$T/b" 1e-3 5
  sed 's/2.303$/2.310/' "$T/a" >"$T/c"
  expect fail "a step off by 3e-3" check_curves "$T/c" "$T/b" 1e-3 5
  expect fail "too few steps" check_curves "$T/a" "$T/b" 1e-3 6
  head -3 "$T/a" >"$T/short"
  expect fail "curves of different lengths" check_curves "$T/short" "$T/b" 1e-3 3
  for i in 1 2 3; do printf '[2, %5d] loss: 1.5000\n' "$i"; done >"$T/log2"
  extract_losses "$T/log2" >"$T/stuck"
  expect fail "epoch 2 stuck" check_curves "$T/stuck" "$T/stuck" 1e-3 3 1
  printf '[2,     1] loss: 1.5000\n[2,     2] loss: 1.4000\n' >"$T/log3"
  extract_losses "$T/log3" >"$T/moving"
  expect pass "epoch 2 moving" check_curves "$T/moving" "$T/moving" 1e-3 2 1
  # the bf16 curves' tolerance: a step 1e-2 off passes at 2e-2, 5e-2 off fails
  for i in 1 2 3; do printf '[1, %5d] loss: 2.%d000\n' "$i" "$i"; done >"$T/log16"
  extract_losses "$T/log16" >"$T/b16"
  sed 's/2.2000$/2.2220/' "$T/b16" >"$T/b16a"
  expect pass "bf16: a step 1e-2 off within 2e-2" check_curves "$T/b16a" "$T/b16" 2e-2 3
  sed 's/2.2000$/2.3100/' "$T/b16" >"$T/b16b"
  expect fail "bf16: a step 5e-2 off" check_curves "$T/b16b" "$T/b16" 2e-2 3
  printf 'steps=20\nmin_per_step=16\nmax_per_step=16\n' >"$T/tl"
  expect pass "launches as planned" check_launches 16 "$T/tl"
  printf 'steps=20\nmin_per_step=16\nmax_per_step=17\n' >"$T/tl2"
  expect fail "one launch too many" check_launches 16 "$T/tl2"
  expect fail "no plan count" check_launches "" "$T/tl"
  printf 'steps=0\n' >"$T/tl3"
  expect fail "no timed steps" check_launches 16 "$T/tl3"
  {
    echo 'device="NVIDIA H100 80GB HBM3" cc=9.0 sms=132'
    echo 'batch=64 cuda_graph=on step_us=41.0 samples_per_s=1560975 launches=16 copies=3 replays=1100'
    echo 'batch=64 cuda_graph=off step_us=95.5 samples_per_s=670157 launches=16 copies=3 replays=0 note=disabled (--no-cuda-graph)'
    echo 'batch=1024 cuda_graph=on step_us=120.0 samples_per_s=8533333 launches=16 copies=3 replays=1100'
    echo 'batch=1024 cuda_graph=off step_us=150.0 samples_per_s=6826666 launches=16 copies=3 replays=0 note=disabled (--no-cuda-graph)'
  } >"$T/gs"
  expect pass "replay faster" check_graph_speed "$T/gs"
  sed 's/step_us=120.0/step_us=151.0/' "$T/gs" >"$T/gs2"
  expect fail "replay slower at batch 1024" check_graph_speed "$T/gs2"
  sed 's/replays=1100/replays=0/' "$T/gs" >"$T/gs3"
  expect fail "graph run without replays" check_graph_speed "$T/gs3"
  grep -v 'cuda_graph=off' "$T/gs" >"$T/gs4"
  expect fail "eager timing missing" check_graph_speed "$T/gs4"
  : >"$T/gs5"
  expect fail "no timings at all" check_graph_speed "$T/gs5"
  printf '========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n' >"$T/san"
  expect pass "sanitizer clean" check_sanitizer "$T/san"
  printf '========= Invalid __global__ read of size 4\n========= ERROR SUMMARY: 3 errors\n' \
    >"$T/san2"
  expect fail "sanitizer errors" check_sanitizer "$T/san2"
  printf 'gpu_test crashed\n' >"$T/san3"
  expect fail "sanitizer without a summary" check_sanitizer "$T/san3"
  echo 'fp16 loss scaling: 3 of 200 steps skipped (inf/nan gradients), scale 131072' >"$T/ls1"
  cp "$T/ls1" "$T/ls2"
  expect pass "loss scaling agrees" check_loss_scale "$T/ls1" "$T/ls2"
  echo 'fp16 loss scaling: 4 of 200 steps skipped (inf/nan gradients), scale 65536' >"$T/ls3"
  expect fail "loss scaling skips differ" check_loss_scale "$T/ls1" "$T/ls3"
  : >"$T/ls4"
  expect fail "no loss scaling summary" check_loss_scale "$T/ls4" "$T/ls4"
  echo "trained 1 epochs (300 steps) in 1.20 s: 256000 samples/s; test accuracy 96.10%" >"$T/log"
  expect pass "samples/s parsed" test "$(samples_per_s "$T/log")" = 256000
  if command -v python3 >/dev/null; then
    {
      echo '{"traceEvents":['
      echo '{"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"main"}},'
      echo '{"name":"thread_name","ph":"M","pid":1,"tid":2,"args":{"name":"cuda:0 compute (train b256)"}},'
      echo '{"name":"thread_name","ph":"M","pid":1,"tid":3,"args":{"name":"cuda:0 compute (train b96)"}},'
      echo '{"name":"a","cat":"op","ph":"X","pid":1,"tid":2,"ts":1,"dur":1,"args":{"step":0,"kind":"kernel"}},'
      echo '{"name":"b","cat":"op","ph":"X","pid":1,"tid":2,"ts":2,"dur":1,"args":{"step":0,"kind":"cublasLtMatmul"}},'
      echo '{"name":"m","cat":"op","ph":"X","pid":1,"tid":2,"ts":3,"dur":1,"args":{"step":0,"kind":"memset"}},'
      echo '{"name":"a","cat":"op","ph":"X","pid":1,"tid":2,"ts":4,"dur":1,"args":{"step":1,"kind":"kernel"}},'
      echo '{"name":"b","cat":"op","ph":"X","pid":1,"tid":2,"ts":5,"dur":1,"args":{"step":1,"kind":"cublasLtMatmul"}},'
      echo '{"name":"c","cat":"op","ph":"X","pid":1,"tid":2,"ts":6,"dur":1,"args":{"step":1,"kind":"kernel"}},'
      echo '{"name":"x","cat":"copy","ph":"X","pid":1,"tid":2,"ts":7,"dur":1,"args":{"step":1,"kind":"D2D"}},'
      echo '{"name":"a","cat":"op","ph":"X","pid":1,"tid":3,"ts":8,"dur":1,"args":{"step":2,"kind":"kernel"}}'
      echo ']}'
    } >"$T/trace.json"
    python3 bench/trace_launches.py "$T/trace.json" >"$T/counts"
    expect pass "trace: the b256 plan's 2 steps" grep -qx 'steps=2' "$T/counts"
    expect pass "trace: memset and copies are not launches" grep -qx 'min_per_step=2' "$T/counts"
    expect fail "trace: 3 launches against a plan of 2" check_launches 2 "$T/counts"
    echo '{"traceEvents":[]}' >"$T/empty.json"
    expect fail "trace without a device track" python3 bench/trace_launches.py "$T/empty.json"
    expect pass "torch_gpu_step.py compiles" python3 -c \
      'import ast, sys; ast.parse(open(sys.argv[1]).read())' bench/torch_gpu_step.py
  else
    echo "skip trace_launches.py (no python3)"
  fi
  expect pass "bash -n" bash -n "$0"
  rm -rf "$T"
  if [ "$fails" -gt 0 ]; then
    echo "gpu_check --self-test: $fails expectation(s) failed"
    return 1
  fi
  echo "gpu_check --self-test: all expectations met"
}

DATA=data/mnist
while [ $# -gt 0 ]; do
  case "$1" in
    --data) DATA=$2; shift 2 ;;
    --self-test) self_test; exit $? ;;
    *) echo "usage: $0 [--data DIR] | --self-test" >&2; exit 2 ;;
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

SAN=$(command -v compute-sanitizer || true)
[ -z "$SAN" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] && SAN=/usr/local/cuda/bin/compute-sanitizer
if [ -n "$SAN" ]; then
  for tool in memcheck racecheck; do
    section "GPU tests under compute-sanitizer --tool $tool"
    # the gtest binary directly (bazel test would run it in a sandbox without the tool)
    "$SAN" --tool "$tool" --error-exitcode 1 "$BB/tests/gpu/gpu_test" >"$TMP/san.$tool" 2>&1 ||
      { tail -40 "$TMP/san.$tool" >&2; echo "compute-sanitizer $tool failed" >&2; exit 1; }
    check_sanitizer "$TMP/san.$tool" && grep -E 'ERROR SUMMARY' "$TMP/san.$tool"
  done
  section "a short training under compute-sanitizer memcheck (CUDA Graphs, cuBLASLt, cuDNN)"
  "$SAN" --tool memcheck --error-exitcode 1 "$GT" models/mnist_cnn.pb --device cuda \
    --data "$DATA" --max-steps 20 --epochs 1 --log-every 10 --no-output >"$TMP/san.train" 2>&1 ||
    { tail -40 "$TMP/san.train" >&2; echo "compute-sanitizer memcheck of a training failed" >&2; exit 1; }
  check_sanitizer "$TMP/san.train" && grep -E 'ERROR SUMMARY' "$TMP/san.train"
else
  section "compute-sanitizer: not installed, memcheck and racecheck skipped"
fi

section "loss curves, 100 steps, seed 1: cuda vs cpu"
for dev in cuda cpu; do
  "$GT" models/mnist_mlp.pb --device "$dev" --data "$DATA" --seed 1 --max-steps 100 \
    --log-every 1 --no-output --epochs 1 >"$TMP/$dev.log"
  extract_losses "$TMP/$dev.log" >"$TMP/$dev.loss"
done
check_curves "$TMP/cuda.loss" "$TMP/cpu.loss" 1e-3 100

# bfloat16: the GPU's 16-bit GEMMs (cuBLASLt epilogues), convolutions and
# kernels against the CPU backend rounding the same values
if "$GT" --help 2>&1 | grep -q -- '--precision'; then
  for model in mnist_mlp mnist_cnn; do
    section "bf16 loss curves, 30 steps, seed 1, $model: cuda vs the cpu's bf16 emulation"
    for dev in cuda cpu; do
      "$GT" models/$model.pb --device "$dev" --precision bf16 --data "$DATA" --seed 1 \
        --max-steps 30 --log-every 1 --no-output --epochs 1 >"$TMP/$model.bf16.$dev.log"
      extract_losses "$TMP/$model.bf16.$dev.log" >"$TMP/$model.bf16.$dev.loss"
    done
    grep -E 'not offered|GEMM epilogue' "$TMP/$model.bf16.cuda.log" || true
    check_curves "$TMP/$model.bf16.cuda.loss" "$TMP/$model.bf16.cpu.loss" 2e-2 30
  done
else
  section "bf16 loss curves: gcc-train has no --precision, skipped"
fi

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
    extract_losses "$TMP/$model.$dev.log" >"$TMP/$model.$dev.loss"
    grep -E '^epoch 1: test accuracy' "$TMP/$model.$dev.log" | sed -E 's/.*\(([0-9]+)\/.*/\1/' \
      >"$TMP/$model.$dev.correct"
  done
  check_curves "$TMP/$model.cuda.loss" "$TMP/$model.cpu.loss" "$tol" 300 1
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

section "launches per step: --profile (CUDA events around every launch) against the plan"
"$GT" models/mnist_mlp.pb --device cuda --data "$DATA" --seed 1 --batch-size 256 --epochs 1 \
  --max-steps 30 --log-every 10 --no-output --profile "$TMP/trace.json" >"$TMP/prof.log"
grep -E 'device time per training step|input H2D|copies inside the step|GEMM epilogue' \
  "$TMP/prof.log" || true
PLAN_LAUNCHES=$(sed -nE 's/.*: ([0-9]+) launches and [0-9]+ copies per training step.*/\1/p' \
  "$TMP/prof.log" | tail -1)
if command -v python3 >/dev/null; then
  python3 bench/trace_launches.py "$TMP/trace.json" >"$TMP/counts"
  check_launches "$PLAN_LAUNCHES" "$TMP/counts"
else
  echo "python3 missing: the trace's launches are not counted" >&2
  exit 1
fi

section "one training step: CUDA Graph replay vs launch by launch"
"$BB/bench/gpu_step" | tee "$TMP/gpu_step"
check_graph_speed "$TMP/gpu_step"

section "fp16 with dynamic loss scaling, 200 steps, growth every 25: cuda vs cpu"
for dev in cuda cpu; do
  "$GT" models/mnist_mlp.pb --device "$dev" --data "$DATA" --seed 1 --epochs 1 --max-steps 200 \
    --log-every 1 --no-output --precision fp16 --loss-scale-growth-interval 25 \
    >"$TMP/fp16.$dev.log"
  extract_losses "$TMP/fp16.$dev.log" >"$TMP/fp16.$dev.loss"
done
check_curves "$TMP/fp16.cuda.loss" "$TMP/fp16.cpu.loss" 2e-2 200
check_loss_scale "$TMP/fp16.cuda.log" "$TMP/fp16.cpu.log"

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
if command -v python3 >/dev/null && python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  section "samples/s, MNIST MLP training at batch 1024: gcc-train vs PyTorch on this GPU"
  HAS_PRECISION=0
  "$GT" --help 2>&1 | grep -q -- '--precision' && HAS_PRECISION=1
  printf '%-10s %14s %14s %8s\n' precision gcc-train PyTorch ratio
  for prec in fp32 tf32 bf16 fp16; do
    ours="n/a"
    if [ "$prec" = fp32 ] || [ "$HAS_PRECISION" = 1 ]; then
      extra=()
      [ "$HAS_PRECISION" = 1 ] && extra=(--precision "$prec")
      "$GT" models/mnist_mlp.pb --device cuda --data "$DATA" --batch-size 1024 --epochs 1 \
        --max-steps 300 --log-every 0 --no-output --quiet "${extra[@]}" >"$TMP/ours.$prec" 2>&1 &&
        ours=$(samples_per_s "$TMP/ours.$prec")
    fi
    theirs=$(python3 bench/torch_gpu_step.py --batch 1024 --steps 300 --precision "$prec" |
      sed -n 's/^samples_per_s=//p' || true)
    ratio=$(awk -v a="${ours:-0}" -v b="${theirs:-0}" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }')
    printf '%-10s %14s %14s %8s\n' "$prec" "${ours:-n/a}" "${theirs:-n/a}" "$ratio"
  done
  echo "(gcc-train: 300 steps of a training run with the data loader, summary rate; PyTorch:"
  echo " 300 steps on a batch already on the GPU, bench/torch_gpu_step.py)"
else
  section "PyTorch with CUDA: not installed, no comparison table"
fi
echo
echo "gpu_check: all checks passed"
