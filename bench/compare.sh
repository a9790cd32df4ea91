#!/usr/bin/env bash
# gcc-train beside PyTorch on the MNIST MLP (and the MNIST CNN when the tree
# has models/mnist_cnn.pb), CPU, same initial weights, data, batch sizes and
# thread count, all measured in one run; prints a markdown table with the
# goals of issue 8, each met or missed, and for every missed goal the
# per-op profile (gcc-train --profile) of the run it concerns.
#
#   bench/compare.sh [--threads N] [--data DIR] [--steps N] [--epochs N]
#                    [--out FILE] [--readme] [--keep DIR]
#
#   --threads N  threads on both sides (default 2): gcc-train --threads N;
#                PyTorch torch.set_num_threads(N) and OMP_NUM_THREADS=N
#   --steps N    timed training steps / inference calls per figure, after 20
#                warm-up (default 200, the issue's minimum)
#   --epochs N   epochs of the whole-epoch part (default 5, the tutorial's);
#                --epochs 1 --steps 50 is a quick check (the table says so)
#   --out FILE   also write the report to FILE (atomically: temp + rename)
#   --readme     replace the block between <!-- bench:begin --> and
#                <!-- bench:end --> in README.md with the report (atomically)
#   --keep DIR   keep the raw outputs in DIR (key=value files of both sides,
#                the --profile traces, which Perfetto opens); the report is
#                bench/compare_report.py DIR THREADS [CNN_MODEL] over them
#
# Needs Bazel, Debian's python3-torch and libopenblas0-openmp (PyTorch runs
# with the OpenMP OpenBLAS via LD_LIBRARY_PATH for its process only, per
# ../shared/TOOLCHAIN.md; the pthread build makes it 5-25x slower on 2
# cores and the comparison worthless). About 3 minutes on 2 cores (183 s
# measured while other jobs used 36% of the CPUs).
set -euo pipefail
cd "$(dirname "$0")/.."

THREADS=2
DATA=data/mnist
STEPS=200
EPOCHS=5
OUT=
KEEP=
README=
usage() {
  echo "usage: $0 [--threads N] [--data DIR] [--steps N] [--epochs N] [--out FILE]" \
       "[--readme] [--keep DIR]" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) THREADS=${2:-}; shift 2 || usage ;;
    --data) DATA=${2:-}; shift 2 || usage ;;
    --steps) STEPS=${2:-}; shift 2 || usage ;;
    --epochs) EPOCHS=${2:-}; shift 2 || usage ;;
    --out) OUT=${2:-}; shift 2 || usage ;;
    --keep) KEEP=${2:-}; shift 2 || usage ;;
    --readme) README=1; shift ;;
    *) usage ;;
  esac
done
for v in "$THREADS" "$STEPS" "$EPOCHS"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: '$v' is not a positive integer" >&2; exit 2; }
done

OMP_BLAS=/usr/lib/x86_64-linux-gnu/openblas-openmp
missing=
[ -e "$OMP_BLAS/libblas.so.3" ] || missing=" libopenblas0-openmp"
/usr/bin/python3 -c 'import torch' 2>/dev/null || missing="$missing python3-torch"
if [ -n "$missing" ]; then
  echo "compare.sh: the PyTorch side needs Debian packages that are not installed:$missing" >&2
  echo "compare.sh: run: apt-get install -y python3-torch libopenblas0-openmp" >&2
  exit 1
fi
[ -d "$DATA" ] || { echo "compare.sh: --data $DATA: no such directory" >&2; exit 1; }

START=$(date +%s)
bazel build //bench:mlp_bench //bench:nvrtc_compile //:gcc-train >&2
BB=$(bazel info bazel-bin 2>/dev/null)
BIN=$BB/bench/mlp_bench
GT=$BB/cli/gcc-train

if [ -n "$KEEP" ]; then
  mkdir -p "$KEEP"
  TMP=$KEEP
else
  TMP=$(mktemp -d)
  trap 'rm -rf "$TMP"' EXIT
fi

CNN=models/mnist_cnn.pb
[ -e "$CNN" ] || CNN=

# CPU time of the whole machine (/proc/stat) and of this script's children:
# the report says how much of the machine other processes used meanwhile
snap() { echo "$(head -1 /proc/stat) self $(cut -d' ' -f14-17 /proc/$$/stat)"; }
snap >"$TMP/cpu_before.txt"
uptime >"$TMP/load_before.txt"
echo "compare.sh: load before the run: $(cat "$TMP/load_before.txt")" >&2
"$BIN" --sgemm-peak >"$TMP/sgemm.txt"   # before and after: the peak is the max
"$BIN" --dump-init "$TMP/init.bin"   # both sides start from models/mnist_mlp.pb's weights
echo "compare.sh: gcc-train (bench/mlp_bench) ..." >&2
"$BIN" --threads "$THREADS" --steps "$STEPS" --epochs "$EPOCHS" --data "$DATA" >"$TMP/gcc.txt"
echo "compare.sh: PyTorch (bench/torch_mlp.py) ..." >&2
# OMP_NUM_THREADS as well as torch.set_num_threads: the OpenMP OpenBLAS pool
OMP_NUM_THREADS=$THREADS LD_LIBRARY_PATH=$OMP_BLAS \
  /usr/bin/python3 bench/torch_mlp.py --threads "$THREADS" --steps "$STEPS" --epochs "$EPOCHS" \
  --data "$DATA" --init "$TMP/init.bin" >"$TMP/torch.txt"
: >"$TMP/cnn_gcc.txt"
: >"$TMP/cnn_torch.txt"
if [ -n "$CNN" ]; then
  echo "compare.sh: MNIST CNN ($CNN), both sides ..." >&2
  # a failure here is reported in the table, and the rest still runs
  if ! { "$BIN" --model "$CNN" --dump-init "$TMP/cnn_init.bin" &&
         "$BIN" --model "$CNN" --threads "$THREADS" --steps "$STEPS" --data "$DATA" \
           >"$TMP/cnn_gcc.txt" &&
         OMP_NUM_THREADS=$THREADS LD_LIBRARY_PATH=$OMP_BLAS \
           /usr/bin/python3 bench/torch_mlp.py --cnn --threads "$THREADS" --steps "$STEPS" \
           --data "$DATA" --init "$TMP/cnn_init.bin" >"$TMP/cnn_torch.txt" &&
         "$GT" "$CNN" --device cpu --batch-size 64 --dump-placement=json >"$TMP/cnn_plan.json"
       } 2>"$TMP/cnn_err.txt"; then
    cat "$TMP/cnn_err.txt" >&2
    : >"$TMP/cnn_gcc.txt"
    : >"$TMP/cnn_torch.txt"
  fi
fi
# the compiled CUDA plan (no GPU needed): launches and copies per training step
"$GT" models/mnist_mlp.pb --device cuda:0 --dump-placement=json >"$TMP/plan.json" 2>/dev/null
# NVRTC: the MLP plan's kernels, PTX + sm_90 cubin, cold and kernel-cache hit
"$BB/bench/nvrtc_compile" >"$TMP/nvrtc.txt" 2>/dev/null
# where the time goes: gcc-train --profile of the runs the goals are about
echo "compare.sh: gcc-train --profile runs ..." >&2
P=(--device cpu --threads "$THREADS" --data "$DATA" --no-output --quiet --log-every 0)
"$GT" models/mnist_mlp.pb "${P[@]}" --epochs 1 --batch-size 64 --max-steps 400 \
  --profile "$TMP/b64.json" >"$TMP/prof_b64.txt"
"$GT" models/mnist_mlp.pb "${P[@]}" --epochs 2 --batch-size 1024 --max-steps 100 \
  --profile "$TMP/b1024.json" >"$TMP/prof_b1024.txt"
"$GT" models/mnist_mlp.pb "${P[@]}" --epochs 0 --eval-batch-size 1 \
  --profile "$TMP/b1.json" >"$TMP/prof_b1.txt"
"$BIN" --sgemm-peak >>"$TMP/sgemm.txt"
uptime >"$TMP/load_after.txt"
snap >"$TMP/cpu_after.txt"
echo "compare.sh: load after the run: $(cat "$TMP/load_after.txt")" >&2
echo $(( $(date +%s) - START )) >"$TMP/elapsed.txt"
date -Iseconds >"$TMP/date.txt"

/usr/bin/python3 bench/compare_report.py "$TMP" "$THREADS" "$CNN" >"$TMP/report.md"
cat "$TMP/report.md"
if [ -n "$README" ]; then
  /usr/bin/python3 bench/compare_report.py --splice "$TMP/report.md" README.md
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
