#!/usr/bin/env bash
# gcc-train's CPU backend beside the peers a user would pick instead, on the
# same machine, in one run, 2 threads on each side (issue 17's goals):
#   - current PyTorch from PyPI, eager and torch.compile (Inductor, C++ on
#     the CPU), for training;
#   - ONNX Runtime from PyPI for inference;
# both installed into a virtual environment this script makes (or --venv).
# Every figure is the median of --runs (>= 3) alternating runs of the sides;
# the report records the machine's load during the run and oneDNN's sgemm
# peak (2048^3, the run's best) as the limit, states every goal met or
# missed, and for each missed goal shows the gcc-train --profile of the run
# it concerns.
#
#   bench/compare.sh [--threads N] [--runs N] [--steps N] [--venv DIR]
#                    [--data DIR] [--out FILE] [--readme] [--keep DIR] [--quick]
#                    [--no-resnet50]
#
#   --threads N  threads on every side (default 2): gcc-train --threads;
#                torch.set_num_threads and OMP_NUM_THREADS; ONNX Runtime's
#                intra_op_num_threads
#   --runs N     alternating runs per figure (default 3; the median is kept)
#   --steps N    timed training steps / inference calls per figure after 20
#                warm-up (default 200)
#   --venv DIR   use this virtual environment (it must import torch,
#                onnxruntime, onnx and numpy) instead of making one; default:
#                $GCC_BENCH_VENV, else ~/.cache/gcc-train/bench-venv, made
#                with `python3 -m venv` and `pip install torch onnxruntime
#                onnx numpy` from PyPI when it is missing (about 6 GB, a few
#                minutes, once)
#   --data DIR   MNIST (default data/mnist). CIFAR-10 is not in the
#                repository: the CIFAR figure uses a CIFAR-10-shaped set of
#                random bytes (bench/make_cifar_like.py) on both sides; the
#                time per epoch does not depend on the pixel values
#   --out FILE   also write the report to FILE (atomically)
#   --readme     replace the block between <!-- bench:begin --> and
#                <!-- bench:end --> in README.md with the report
#   --keep DIR   keep the raw outputs in DIR (key=value files, the profiles,
#                their Chrome traces); the report is
#                bench/compare_report.py DIR over them
#   --quick      a smoke run (1 run, 50 steps, 1 MLP epoch, a tenth of a
#                CIFAR epoch); the report says it is no measurement
#   --no-resnet50  leave out issue 29's ResNet-50 rows (bench/resnet50_cpu.sh:
#                torchvision's ResNet-50 at batch 16, training and inference,
#                against PyTorch eager and ONNX Runtime; tens of minutes on
#                2 cores), which otherwise follow the report's table
set -euo pipefail
cd "$(dirname "$0")/.."

THREADS=2
RUNS=3
STEPS=200
VENV=${GCC_BENCH_VENV:-$HOME/.cache/gcc-train/bench-venv}
DATA=data/mnist
OUT=
KEEP=
README=
QUICK=
RESNET50=1
usage() {
  echo "usage: $0 [--threads N] [--runs N] [--steps N] [--venv DIR] [--data DIR] [--out FILE]" \
       "[--readme] [--keep DIR] [--quick] [--no-resnet50]" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) THREADS=${2:-}; shift 2 || usage ;;
    --runs) RUNS=${2:-}; shift 2 || usage ;;
    --steps) STEPS=${2:-}; shift 2 || usage ;;
    --venv) VENV=${2:-}; shift 2 || usage ;;
    --data) DATA=${2:-}; shift 2 || usage ;;
    --out) OUT=${2:-}; shift 2 || usage ;;
    --keep) KEEP=${2:-}; shift 2 || usage ;;
    --readme) README=1; shift ;;
    --quick) QUICK=1; shift ;;
    --no-resnet50) RESNET50=; shift ;;
    *) usage ;;
  esac
done
for v in "$THREADS" "$RUNS" "$STEPS"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: '$v' is not a positive integer" >&2; exit 2; }
done
[ -d "$DATA" ] || { echo "compare.sh: --data $DATA: no such directory" >&2; exit 1; }
MLP_EPOCHS=5
CIFAR_EPOCHS=2
CIFAR_STEPS=  # all of them
if [ -n "$QUICK" ]; then
  RUNS=1 STEPS=50 MLP_EPOCHS=1 CIFAR_EPOCHS=1 CIFAR_STEPS=1250
fi

# ---- the peers' virtual environment ---------------------------------------------
PY=$VENV/bin/python
if ! "$PY" -c 'import torch, onnxruntime, onnx, numpy' 2>/dev/null; then
  if [ -e "$PY" ]; then
    echo "compare.sh: $VENV lacks torch, onnxruntime, onnx or numpy; installing them" >&2
  else
    echo "compare.sh: making the virtual environment $VENV (PyTorch, ONNX Runtime from PyPI)" >&2
    python3 -m venv "$VENV" || {
      echo "compare.sh: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2
      exit 1
    }
  fi
  "$VENV/bin/pip" install --quiet --upgrade pip >&2
  "$VENV/bin/pip" install --quiet torch onnxruntime onnx numpy >&2
  "$PY" -c 'import torch, onnxruntime, onnx, numpy' ||
    { echo "compare.sh: the packages do not import in $VENV" >&2; exit 1; }
fi

START=$(date +%s)
bazel build -c opt //bench:mlp_bench //bench:gcc_run_bench //bench:dnnl_ops_bench //:gcc-train \
  //cli:gcc-run >&2
BB=$(bazel info -c opt bazel-bin 2>/dev/null)
MB=$BB/bench/mlp_bench
GT=$BB/cli/gcc-train

if [ -n "$KEEP" ]; then
  mkdir -p "$KEEP"
  TMP=$(cd "$KEEP" && pwd)
else
  TMP=$(mktemp -d)
  trap 'rm -rf "$TMP"' EXIT
fi
echo "$THREADS $RUNS $STEPS $MLP_EPOCHS $CIFAR_EPOCHS ${QUICK:-0}" >"$TMP/params.txt"

# CPU time of the whole machine (/proc/stat) and of this script's children:
# the report says how much of the machine other processes used meanwhile
snap() { echo "$(head -1 /proc/stat) self $(cut -d' ' -f14-17 /proc/$$/stat)"; }
snap >"$TMP/cpu_before.txt"
uptime >"$TMP/load_before.txt"
echo "compare.sh: load before the run: $(cat "$TMP/load_before.txt")" >&2

"$BB/bench/dnnl_ops_bench" --sgemm-peak --threads "$THREADS" >"$TMP/sgemm.txt"
"$MB" --dump-init "$TMP/mlp.init"
"$MB" --model models/mnist_cnn.pb --dump-init "$TMP/cnn.init"
"$MB" --model models/cifar_cnn.pb --dump-init "$TMP/cifar.init"
CIFAR=$TMP/cifar-like
"$PY" bench/make_cifar_like.py "$CIFAR"

export OMP_NUM_THREADS=$THREADS
# Every side runs as its users run it: nothing but the thread count is set on
# a peer's process (PyTorch keeps its OpenMP wait behaviour: libgomp's
# spinning, which made it 1.5x faster here than passive waiting). gcc-train,
# gcc-run and the harnesses standing in for them (mlp_bench, gcc_run_bench)
# choose a short spin (GOMP_SPINCOUNT=10000) for themselves (cli/flags.h), as
# users get them. An
# OMP_WAIT_POLICY set by the caller of this script reaches every side, and the
# report says so.
echo "${OMP_WAIT_POLICY:-unset}" >"$TMP/omp_wait_policy.txt"
TORCH=("$PY" bench/torch_mlp.py --threads "$THREADS" --steps "$STEPS" --data "$DATA")
GP=(--device cpu --threads "$THREADS" --no-output --quiet --log-every 0)
CIFAR_ARGS=(--epochs "$CIFAR_EPOCHS" --batch-size 4)
[ -n "$CIFAR_STEPS" ] && CIFAR_ARGS+=(--max-steps "$CIFAR_STEPS")

# wall seconds of a command (its stdout to $1)
wall() {
  local out=$1
  shift
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >"$out"
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "wall_s=%.3f\n", b - a }' >>"$out"
}

side_gcc() {
  local r=$1
  echo "compare.sh: run $r: gcc-train ..." >&2
  "$MB" --threads "$THREADS" --steps "$STEPS" --epochs 0 --data "$DATA" >"$TMP/gcc_mlp.$r.txt"
  "$MB" --model models/mnist_cnn.pb --threads "$THREADS" --steps "$STEPS" --data "$DATA" \
    >"$TMP/gcc_cnn.$r.txt"
  "$BB/bench/gcc_run_bench" --threads "$THREADS" --data "$DATA" >"$TMP/gcc_infer.$r.txt"
  wall "$TMP/gcc_whole.$r.txt" "$GT" models/mnist_mlp.pb "${GP[@]}" --epochs "$MLP_EPOCHS" \
    --data "$DATA"
  "$GT" models/cifar_cnn.pb "${GP[@]}" --data "$CIFAR" "${CIFAR_ARGS[@]}" \
    >"$TMP/gcc_cifar.$r.txt"
}

side_torch() {
  local r=$1
  echo "compare.sh: run $r: PyTorch eager ..." >&2
  "${TORCH[@]}" --epochs 0 --init "$TMP/mlp.init" >"$TMP/torch_mlp.$r.txt"
  "${TORCH[@]}" --cnn --init "$TMP/cnn.init" >"$TMP/torch_cnn.$r.txt"
  wall "$TMP/torch_whole.$r.txt" "$PY" bench/torch_tutorial.py --init "$TMP/mlp.init" \
    --threads "$THREADS" --epochs "$MLP_EPOCHS" --data "$DATA"
  "${TORCH[@]}" --cifar "$CIFAR" --epochs "$CIFAR_EPOCHS" ${CIFAR_STEPS:+--max-steps $CIFAR_STEPS} \
    --init "$TMP/cifar.init" >"$TMP/torch_cifar.$r.txt"
  echo "compare.sh: run $r: PyTorch torch.compile ..." >&2
  # a failure of torch.compile is reported in the table; the rest still runs
  { "${TORCH[@]}" --compile --epochs 0 --init "$TMP/mlp.init" >"$TMP/compile_mlp.$r.txt" &&
    "${TORCH[@]}" --compile --cnn --init "$TMP/cnn.init" >"$TMP/compile_cnn.$r.txt"; } \
    2>"$TMP/compile_err.$r.txt" || echo "compare.sh: torch.compile failed (see the report)" >&2
}

side_ort() {
  local r=$1
  echo "compare.sh: run $r: ONNX Runtime ..." >&2
  "$PY" bench/ort_mlp.py --init "$TMP/mlp.init" --threads "$THREADS" --data "$DATA" \
    >"$TMP/ort.$r.txt"
}

for r in $(seq 1 "$RUNS"); do
  if [ $((r % 2)) -eq 1 ]; then
    side_gcc "$r"; side_torch "$r"; side_ort "$r"
  else
    side_ort "$r"; side_torch "$r"; side_gcc "$r"
  fi
done

# where the time goes: gcc-train --profile of the runs the goals are about
echo "compare.sh: gcc-train --profile runs ..." >&2
"$GT" models/mnist_mlp.pb "${GP[@]}" --epochs 1 --batch-size 64 --max-steps 400 \
  --data "$DATA" --profile "$TMP/prof_b64.json" >"$TMP/prof_b64.txt"
"$GT" models/mnist_mlp.pb "${GP[@]}" --epochs 2 --batch-size 1024 --max-steps 100 \
  --data "$DATA" --profile "$TMP/prof_b1024.json" >"$TMP/prof_b1024.txt"
"$GT" models/mnist_mlp.pb "${GP[@]}" --epochs 0 --eval-batch-size 1 \
  --data "$DATA" --profile "$TMP/prof_b1.json" >"$TMP/prof_b1.txt"
"$GT" models/mnist_mlp.pb "${GP[@]}" --epochs 0 --eval-batch-size 1024 \
  --data "$DATA" --profile "$TMP/prof_i1024.json" >"$TMP/prof_i1024.txt"
"$GT" models/mnist_cnn.pb "${GP[@]}" --epochs 1 --batch-size 64 --max-steps 300 \
  --data "$DATA" --profile "$TMP/prof_cnn.json" >"$TMP/prof_cnn.txt"
"$GT" models/cifar_cnn.pb "${GP[@]}" --epochs 1 --batch-size 4 --max-steps 2000 \
  --data "$CIFAR" --profile "$TMP/prof_cifar.json" >"$TMP/prof_cifar.txt"

# issue 29: ResNet-50 at batch 16 (its own alternating runs; --quick: 1 run
# of the fewest steps)
if [ -n "$RESNET50" ]; then
  echo "compare.sh: ResNet-50 (bench/resnet50_cpu.sh) ..." >&2
  R50_ENV=(OUT="$TMP" THREADS="$THREADS" RUNS="$RUNS" PYTHON="$PY" GCC_TRAIN="$GT"
           GCC_RUN="$BB/cli/gcc-run")
  [ -n "$QUICK" ] && R50_ENV+=(SHORT=1 LONG=2 TORCH_WARMUP=1 TORCH_STEPS=1 INFER_K=2)
  env "${R50_ENV[@]}" bench/resnet50_cpu.sh >/dev/null ||
    echo "compare.sh: bench/resnet50_cpu.sh failed (see $TMP/resnet50)" >&2
fi

"$BB/bench/dnnl_ops_bench" --sgemm-peak --threads "$THREADS" >>"$TMP/sgemm.txt"
uptime >"$TMP/load_after.txt"
snap >"$TMP/cpu_after.txt"
echo "compare.sh: load after the run: $(cat "$TMP/load_after.txt")" >&2
echo $(($(date +%s) - START)) >"$TMP/elapsed.txt"
date -Iseconds >"$TMP/date.txt"

"$PY" bench/compare_report.py "$TMP" >"$TMP/report.md"
[ -s "$TMP/resnet50/table.md" ] && cat "$TMP/resnet50/table.md" >>"$TMP/report.md"
cat "$TMP/report.md"
if [ -n "$README" ]; then
  "$PY" bench/compare_report.py --splice "$TMP/report.md" README.md
  echo "compare.sh: updated the benchmark block of README.md" >&2
fi
if [ -n "$OUT" ]; then
  tmp_out=$(mktemp "$OUT.tmp.XXXXXX")
  cp "$TMP/report.md" "$tmp_out"
  chmod 644 "$tmp_out"
  sync "$tmp_out" 2>/dev/null || true
  mv -f "$tmp_out" "$OUT"
  echo "compare.sh: wrote $OUT" >&2
fi
