#!/usr/bin/env bash
# Issue 31's CPU goal row: the training step of a 4-layer, 4-head, 128-wide
# character-level GPT (block 64, batch 32) in gcc-train against PyTorch
# eager and torch.compile, 2 threads on every side, alternating runs, the
# median of --runs.
#
#   bench/gpt_cpu_bench.sh [--threads N] [--runs N] [--steps N] [--warmup N]
#                          [--venv DIR] [--gcc-train BIN]... [--no-compile]
#                          [--keep DIR] [--dropout P]
#
#   --threads N     threads on every side (default 2): gcc-train --threads;
#                   torch.set_num_threads and OMP_NUM_THREADS
#   --runs N        alternating runs of every side (default 3; medians kept)
#   --steps N       timed steps per run (default 30) after --warmup N
#                   (default 10) untimed ones
#   --venv DIR      the PyTorch virtual environment (default $GCC_BENCH_VENV,
#                   else ~/.cache/gcc-train/bench-venv; bench/compare.sh
#                   makes it)
#   --gcc-train BIN time this gcc-train binary instead of building //:gcc-train
#                   (-c opt); given twice or more, every binary is a side of
#                   its own (before/after comparisons of a change)
#   --no-compile    leave torch.compile out (its compilation takes minutes on a
#                   loaded 2-core machine)
#   --keep DIR      keep the raw outputs (key=value files, traces) in DIR
#   --dropout P     the network's dropout on both sides (default 0, the goal
#                   row's; nanoGPT's baby GPT trains with 0.2): the
#                   embeddings', the residuals' and the attention
#                   probabilities' (gcc-train's fused attention, PyTorch's
#                   scaled_dot_product_attention dropout_p)
#
# Both sides train the same network on data/shakespeare/input.txt with
# nanoGPT's shakespeare_char recipe: gcc-train the model written by
# `make_models --char-gpt 4,4,128,64,0` (models/char_gpt.c: nanoGPT's GPT,
# bias=True, tied lm_head), PyTorch bench/torch_gpt.py (the same model.py
# network and initialisation scheme); AdamW lr 1e-3 betas 0.9,0.99 weight
# decay 0.1 on matrices, clip 1.0, warmup-cosine 100/5000/1e-4, batch 32,
# block 64, dropout --dropout on both sides (0: the two networks compute the
# same function; above 0 each side draws its own masks).
# Step time: the median over the timed steps of a run (gcc-train: the
# `train step` spans of its --profile trace, which include the profiler's
# timer calls, a cost PyTorch's side does not pay; PyTorch: perf_counter
# around get_batch, forward, backward, clip, step, zero_grad and loss.item());
# then the median over the runs. Peak memory: the process's maximum RSS
# (/usr/bin/time %M) on each side, the interpreter and libtorch included on
# PyTorch's. The report gives the load average before and after: the
# machine may be shared.
set -euo pipefail
cd "$(dirname "$0")/.."

THREADS=2
RUNS=3
STEPS=30
WARMUP=10
VENV=${GCC_BENCH_VENV:-$HOME/.cache/gcc-train/bench-venv}
BINS=()
COMPILE=1
KEEP=
DROPOUT=0
usage() {
  echo "usage: $0 [--threads N] [--runs N] [--steps N] [--warmup N] [--venv DIR]" \
       "[--gcc-train BIN]... [--no-compile] [--keep DIR] [--dropout P]" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) THREADS=${2:-}; shift 2 || usage ;;
    --runs) RUNS=${2:-}; shift 2 || usage ;;
    --steps) STEPS=${2:-}; shift 2 || usage ;;
    --warmup) WARMUP=${2:-}; shift 2 || usage ;;
    --venv) VENV=${2:-}; shift 2 || usage ;;
    --gcc-train) BINS+=("${2:-}"); shift 2 || usage ;;
    --no-compile) COMPILE=; shift ;;
    --keep) KEEP=${2:-}; shift 2 || usage ;;
    --dropout) DROPOUT=${2:-}; shift 2 || usage ;;
    *) usage ;;
  esac
done
for v in "$THREADS" "$RUNS" "$STEPS" "$WARMUP"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "gpt_cpu_bench.sh: '$v' is not a positive integer" >&2; exit 2; }
done
[[ "$DROPOUT" =~ ^(0|0?\.[0-9]+)$ ]] ||
  { echo "gpt_cpu_bench.sh: --dropout '$DROPOUT' is not in [0, 1)" >&2; exit 2; }
PY=$VENV/bin/python
"$PY" -c 'import torch' 2>/dev/null ||
  { echo "gpt_cpu_bench.sh: $PY cannot import torch (make the venv with bench/compare.sh)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "gpt_cpu_bench.sh: /usr/bin/time is missing (apt-get install time)" >&2; exit 1; }
DATA=data/shakespeare/input.txt
[ -f "$DATA" ] || { echo "gpt_cpu_bench.sh: $DATA: no such file" >&2; exit 1; }

bazel build -c opt //models:make_models >&2
if [ ${#BINS[@]} -eq 0 ]; then
  bazel build -c opt //:gcc-train >&2
  BINS=("$(bazel info -c opt bazel-bin 2>/dev/null)/cli/gcc-train")
fi
for b in "${BINS[@]}"; do
  [ -x "$b" ] || { echo "gpt_cpu_bench.sh: --gcc-train $b: not an executable" >&2; exit 1; }
done
MM=$(bazel info -c opt bazel-bin 2>/dev/null)/models/make_models

if [ -n "$KEEP" ]; then
  TMP=$KEEP
  mkdir -p "$TMP"
else
  TMP=$(mktemp -d)
  trap 'rm -rf "$TMP"' EXIT
fi
"$MM" --char-gpt "4,4,128,64,$DROPOUT" "$TMP/gpt.pb" >&2
uptime >"$TMP/load_before.txt"
echo "gpt_cpu_bench.sh: load before: $(cat "$TMP/load_before.txt")" >&2
export OMP_NUM_THREADS=$THREADS
TOTAL=$((WARMUP + STEPS))

side_gcc() { # run index, binary index
  local r=$1 i=$2 out=$TMP/gcc$2.$1
  echo "gpt_cpu_bench.sh: run $r: gcc-train ${BINS[$i]} ..." >&2
  /usr/bin/time -f "peak_rss_kb=%M" -o "$out.time" \
    "${BINS[$i]}" "$TMP/gpt.pb" --device cpu --threads "$THREADS" --batch-size 32 \
    --max-steps "$TOTAL" --eval-batches 1 --lr-schedule warmup-cosine:100:5000:1e-4 \
    --no-output --quiet --log-every 0 --profile "$out.json" >"$out.log" 2>&1
}
side_torch() { # run index, name, extra flags
  local r=$1 name=$2 out=$TMP/$2.$1
  shift 2
  echo "gpt_cpu_bench.sh: run $r: PyTorch $name ..." >&2
  /usr/bin/time -f "peak_rss_kb=%M" -o "$out.time" \
    "$PY" bench/torch_gpt.py --threads "$THREADS" --steps "$STEPS" --warmup-steps "$WARMUP" \
    --dropout "$DROPOUT" --data "$DATA" "$@" >"$out.txt"
}

for r in $(seq 1 "$RUNS"); do
  for i in "${!BINS[@]}"; do side_gcc "$r" "$i"; done
  side_torch "$r" eager
  [ -n "$COMPILE" ] && side_torch "$r" compile --compile
done
uptime >"$TMP/load_after.txt"

python3 - "$TMP" "$RUNS" "$WARMUP" "$THREADS" "${#BINS[@]}" "${BINS[@]}" <<'EOF'
import json, os, statistics, sys
tmp, runs, warmup, threads, nb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
bins = sys.argv[6:6 + nb]
tokens = 32 * 64

def rss(path):
    for line in open(path):
        if line.startswith("peak_rss_kb="):
            return int(line.split("=")[1]) / 1024
    return float("nan")

def gcc_run(i, r):
    t = json.load(open(f"{tmp}/gcc{i}.{r}.json"))
    ev = t["traceEvents"] if isinstance(t, dict) else t
    steps = sorted((e for e in ev if e.get("name") == "train step"), key=lambda e: e["ts"])
    durs = [e["dur"] / 1000 for e in steps[warmup:]]
    return statistics.median(durs), rss(f"{tmp}/gcc{i}.{r}.time"), None

def torch_run(name, r):
    kv = dict(l.strip().split("=", 1) for l in open(f"{tmp}/{name}.{r}.txt") if "=" in l)
    c = float(kv["compile_s"]) if "compile_s" in kv else None
    return float(kv["step_ms"]), rss(f"{tmp}/{name}.{r}.time"), c

sides = [(f"gcc-train" + (f" ({b})" if nb > 1 else ""), lambda r, i=i: gcc_run(i, r)) for i, b in enumerate(bins)]
sides.append(("PyTorch eager", lambda r: torch_run("eager", r)))
if os.path.exists(f"{tmp}/compile.1.txt"):
    sides.append(("PyTorch torch.compile", lambda r: torch_run("compile", r)))
rows = []
for name, f in sides:
    res = [f(r) for r in range(1, runs + 1)]
    ms = statistics.median(x[0] for x in res)
    mem = max(x[1] for x in res)
    comp = [x[2] for x in res if x[2] is not None]
    rows.append((name, ms, [x[0] for x in res], mem, statistics.median(comp) if comp else None))
g = rows[nb - 1][1]  # the last gcc-train binary is the reference
print(f"| side ({threads} threads) | ms/step (median of {runs}) | runs | tokens/s | gcc-train's speed-up over it | peak RSS MB | compile s |")
print("|---|---:|---|---:|---:|---:|---:|")
for name, ms, all_ms, mem, comp in rows:
    print(f"| {name} | {ms:.1f} | {', '.join(f'{x:.1f}' for x in all_ms)} | {tokens / ms * 1000:.0f} | "
          f"{ms / g:.2f}x | {mem:.0f} | {'' if comp is None else f'{comp:.0f}'} |")
print()
print("load before:", open(f"{tmp}/load_before.txt").read().strip())
print("load after: ", open(f"{tmp}/load_after.txt").read().strip())
EOF
