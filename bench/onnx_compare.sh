#!/usr/bin/env bash
# gcc-train against ONNX Runtime on the ONNX models of tests/onnx (the
# PyTorch-exported ResNet-18-style and MobileNetV2-style networks, or the
# files given), CPU, the same thread count on both sides: batch-1 latency
# and batch-256 throughput. The two runtimes alternate, round by round (the
# first to run switches every round); each round is one process per
# runtime and figure (bench/onnx_bench.c through the C API that gcc-run
# uses, bench/ort_bench.py), reporting the median of its timed runs; the
# table gives the median over the rounds. Prints a markdown table and the
# machine's load before and after.
#
#   bench/onnx_compare.sh [--threads N] [--rounds R] [--python PY] [--out FILE]
#                         [MODEL.onnx ...]
#
#   --threads N  intra-op threads of ONNX Runtime and OpenBLAS threads of
#                gcc-train (default 2)
#   --rounds R   alternating rounds (default 5)
#   --python PY  a python3 with onnxruntime and numpy (default python3)
#   --out FILE   also write the report to FILE
#
# Per round: batch 1, 50 timed runs after 5 warm-up; batch 256, 5 timed runs
# after 1 warm-up.
set -euo pipefail
cd "$(dirname "$0")/.."

THREADS=2
ROUNDS=5
PY=python3
OUT=
MODELS=()
usage() {
  echo "usage: $0 [--threads N] [--rounds R] [--python PY] [--out FILE] [MODEL.onnx ...]" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) THREADS=${2:-}; shift 2 || usage ;;
    --rounds) ROUNDS=${2:-}; shift 2 || usage ;;
    --python) PY=${2:-}; shift 2 || usage ;;
    --out) OUT=${2:-}; shift 2 || usage ;;
    -*) usage ;;
    *) MODELS+=("$1"); shift ;;
  esac
done
for v in "$THREADS" "$ROUNDS"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "onnx_compare.sh: '$v' is not a positive integer" >&2; exit 2; }
done
[ ${#MODELS[@]} -gt 0 ] || MODELS=(tests/onnx/resnet18_small.onnx tests/onnx/mobilenet_small.onnx)
"$PY" -c "import onnxruntime, numpy" 2>/dev/null || {
  echo "onnx_compare.sh: $PY cannot import onnxruntime and numpy (use --python)" >&2; exit 2; }

bazel build -c opt //bench:onnx_bench >/dev/null 2>&1 || bazel build -c opt //bench:onnx_bench
GCC_BENCH=$(bazel info -c opt bazel-bin 2>/dev/null)/bench/onnx_bench
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
ORT_VERSION=$("$PY" -c "import onnxruntime; print(onnxruntime.__version__)")
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)

# value KEY FILE
value() { sed -n "s/^$1=//p" "$2"; }
median() { sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

run_one() {  # runtime model batch out
  local runs=50 warm=5
  if [ "$3" -gt 1 ]; then runs=5; warm=1; fi
  if [ "$1" = gcc ]; then
    "$GCC_BENCH" "$2" --threads "$THREADS" --batch "$3" --runs $runs --warmup $warm >"$4"
  else
    "$PY" bench/ort_bench.py "$2" --threads "$THREADS" --batch "$3" --runs $runs --warmup $warm >"$4"
  fi
}

REPORT="$TMP/report.md"
{
  echo "gcc-train (C API, as gcc-run) against ONNX Runtime $ORT_VERSION, CPU, $THREADS threads each,"
  echo "median of $ROUNDS alternating rounds (each round: the median of 50 batch-1 runs, or of 5"
  echo "batch-256 runs). $(nproc) CPUs; load average before: $LOAD_BEFORE."
  echo
  echo "| model | batch-1 latency gcc-train | batch-1 latency ONNX Runtime | gcc / ORT | batch-256 throughput gcc-train | batch-256 throughput ONNX Runtime | gcc / ORT |"
  echo "|---|---|---|---|---|---|---|"
} >"$REPORT"
for m in "${MODELS[@]}"; do
  name=$(basename "$m" .onnx)
  for batch in 1 256; do
    : >"$TMP/gcc.$batch"
    : >"$TMP/ort.$batch"
    for r in $(seq 1 "$ROUNDS"); do
      order="gcc ort"
      [ $((r % 2)) -eq 0 ] && order="ort gcc"
      for rt in $order; do
        run_one "$rt" "$m" "$batch" "$TMP/one"
        value median_ms "$TMP/one" >>"$TMP/$rt.$batch"
      done
    done
  done
  g1=$(median <"$TMP/gcc.1"); o1=$(median <"$TMP/ort.1")
  g256=$(median <"$TMP/gcc.256"); o256=$(median <"$TMP/ort.256")
  awk -v n="$name" -v g1="$g1" -v o1="$o1" -v g="$g256" -v o="$o256" 'BEGIN {
    printf "| %s | %.3f ms | %.3f ms | %.2f | %.0f images/s | %.0f images/s | %.2f |\n",
           n, g1, o1, g1 / o1, 256000 / g, 256000 / o, o / g }' >>"$REPORT"
done
echo >>"$REPORT"
echo "Load average after: $(cut -d' ' -f1-3 /proc/loadavg). Latency ratio: < 1 means gcc-train is faster; throughput ratio: > 1 means gcc-train is faster." >>"$REPORT"
cat "$REPORT"
if [ -n "$OUT" ]; then
  cp "$REPORT" "$OUT.tmp.$$" && mv "$OUT.tmp.$$" "$OUT"
fi
