#!/usr/bin/env bash
# resnet50_cpu.sh: issue 29's CPU rows, torchvision's ResNet-50 (random
# weights) at batch 16, 224x224, on the CPU: gcc-train against PyTorch eager
# (NCHW and channels_last) and, for inference, ONNX Runtime, in one run,
# THREADS threads on every side (oneDNN inside gcc-train and PyTorch). From
# the repository root (bench/compare.sh runs it unless --no-resnet50):
#
#   bench/resnet50_cpu.sh
#
# 1. exports the model here (bench/export_resnet50.py, seed 0): TRAINING mode
#    for training (every BatchNormalization trained as nn.BatchNorm2d), EVAL
#    mode for inference (BatchNorm folded into the Conv), and synthetic data
#    (bench/resnet50_gpu.py data: uint8 images, labels in [0, 256));
# 2. training: gcc-train --device cpu, SGD lr 0.1 momentum 0.9, cross-entropy,
#    batch 16. Its images/s is the marginal rate of two runs of SHORT and LONG
#    steps: (LONG - SHORT) * 16 images over the difference of their wall
#    times, which cancels start-up, ONNX import, plan build and the
#    evaluation at the end; what the difference cancels is reported as
#    "start-up": the SHORT run's wall time less SHORT steps at the marginal
#    rate. PyTorch (bench/resnet50_gpu.py torch --device cpu): the same model
#    built in PyTorch from the same seed, eager, NCHW and channels_last,
#    TORCH_WARMUP steps then TORCH_STEPS timed (its own start-up is outside);
# 3. inference: a .gccx bundle of the EVAL export (gcc-train --epochs 0
#    --export, batch 16) run by gcc-run on float32 .npy inputs of 16 and
#    INFER_K * 16 images: the marginal rate; PyTorch under
#    torch.inference_mode() (NCHW, channels_last); ONNX Runtime on the EVAL
#    export (bench/resnet50_gpu.py ort);
# 4. every figure is the median of RUNS alternating runs (gcc-train first in
#    odd runs, last in even ones); peak RSS of each process (gcc-train,
#    gcc-run: /usr/bin/time's maximum resident set of the LONG run; the
#    Python peers: getrusage's ru_maxrss, the interpreter and its libraries
#    included);
# 5. gcc-train --profile of a SHORT training run: the profile's per-op and
#    slowest-node tables (the top-10 a missed goal is reported with).
# Every peer runs at its defaults except the thread count (issue 28):
# OMP_NUM_THREADS and torch.set_num_threads / ONNX Runtime's
# intra_op_num_threads; gcc-train and gcc-run choose their own OpenMP wait
# policy. Output: $OUT/resnet50 (OUT unset: runs/resnet50-cpu), the table on
# stdout and in table.md.
#
# Environment: THREADS (2), RUNS (3), SHORT (2), LONG (5), TORCH_WARMUP (2),
# TORCH_STEPS (4), INFER_K (4), RUN_TIMEOUT (900), PYTHON (python3),
# GCC_TRAIN, GCC_RUN (default bazel-bin/cli/gcc-train, bazel-bin/cli/gcc-run).
set -euo pipefail
cd "$(dirname "$0")/.."

THREADS=${THREADS:-2}
RUNS=${RUNS:-3}
SHORT=${SHORT:-2}
LONG=${LONG:-5}
TORCH_WARMUP=${TORCH_WARMUP:-2}
TORCH_STEPS=${TORCH_STEPS:-4}
INFER_K=${INFER_K:-4}
RUN_TIMEOUT=${RUN_TIMEOUT:-900}
PYTHON=${PYTHON:-python3}
GCC_TRAIN=${GCC_TRAIN:-bazel-bin/cli/gcc-train}
GCC_RUN=${GCC_RUN:-bazel-bin/cli/gcc-run}
B=16
for v in "$THREADS" "$RUNS" "$SHORT" "$LONG" "$TORCH_STEPS" "$INFER_K"; do
  [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "resnet50_cpu: '$v' is not a positive integer" >&2; exit 2; }
done
[ "$LONG" -gt "$SHORT" ] || { echo "resnet50_cpu: LONG must exceed SHORT" >&2; exit 2; }
[ "$INFER_K" -gt 1 ] || { echo "resnet50_cpu: INFER_K must be >= 2" >&2; exit 2; }
command -v /usr/bin/time >/dev/null ||
  { echo "resnet50_cpu: needs /usr/bin/time (GNU time) for the peak RSS" >&2; exit 1; }
O=${OUT:+$OUT/resnet50}
O=${O:-runs/resnet50-cpu}
mkdir -p "$O"
O=$(cd "$O" && pwd)
TABLE=$O/table.md
: >"$TABLE"
say() { echo "$*" | tee -a "$TABLE"; }
export OMP_NUM_THREADS=$THREADS

# wall seconds of a command (stdout+stderr to LOG, GNU time's maximum RSS in
# KiB to LOG.rss); "timeout" / "fail" on failure
timed() { # timed LOG COMMAND...
  local log=$1 t0 t1 rc
  shift
  t0=$(date +%s.%N)
  set +e
  timeout "$RUN_TIMEOUT" /usr/bin/time -f "%M" -o "$log.rss" "$@" >"$log" 2>&1
  rc=$?
  set -e
  t1=$(date +%s.%N)
  if [ $rc -eq 124 ]; then echo timeout
  elif [ $rc -ne 0 ]; then echo fail
  else awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
  fi
}
num() { [[ "$1" =~ ^[0-9.]+$ ]]; }
# marginal rate: images between two runs over the seconds between them
marginal() { # marginal T_SHORT T_LONG IMAGES
  awk -v a="$1" -v b="$2" -v n="$3" 'BEGIN {
    if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/) { print (b ~ /^[0-9.]+$/ ? a : b); exit }
    if (b - a <= 0) { print "n/a"; exit } printf "%.2f", n / (b - a) }'
}
# the start-up a marginal rate cancels: T_SHORT less STEPS steps at RATE
startup() { # startup T_SHORT RATE IMAGES_SHORT
  awk -v t="$1" -v r="$2" -v n="$3" 'BEGIN {
    if (t !~ /^[0-9.]+$/ || r !~ /^[0-9.]+$/ || r <= 0) { print "-"; exit }
    printf "%.1f", t - n / r }'
}
kv() { sed -nE "s/.*(^| )$1=([^ ]+).*/\\2/p" "$2" | tail -1; }
rss_mib() { awk '/^[0-9]+$/ { v = $1 } END { if (v) printf "%.0f", v / 1024; else print "-" }' "$1" 2>/dev/null || echo -; }
median() { # median of the numeric words; "-" when none
  printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -g | awk '{ v[++n] = $1 } END {
    if (!n) { print "-"; exit } print (n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2) }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else print "-" }'; }
best() { awk -v a="$1" -v b="$2" 'BEGIN { a = (a ~ /^[0-9.]+$/) ? a : 0; b = (b ~ /^[0-9.]+$/) ? b : 0; print (a > b ? a : b) }'; }

echo "resnet50_cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs," \
  "$THREADS threads; torch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null)," \
  "onnxruntime $("$PYTHON" -c 'import onnxruntime; print(onnxruntime.__version__)' 2>/dev/null);" \
  "$("$GCC_TRAIN" --version 2>/dev/null | head -1); logs in $O" >&2
uptime >"$O/load_before.txt"

# ---- 1. the models and the data ------------------------------------------------
"$PYTHON" bench/export_resnet50.py "$O/r50_train.onnx" --mode train >&2
"$PYTHON" bench/export_resnet50.py "$O/r50_eval.onnx" --mode eval >&2
"$PYTHON" bench/resnet50_gpu.py data "$O/data" --n $((B * LONG)) --test $B >&2
"$PYTHON" bench/resnet50_gpu.py images "$O/x.1.npy" --n $B >&2
"$PYTHON" bench/resnet50_gpu.py images "$O/x.k.npy" --n $((INFER_K * B)) >&2
export XDG_CACHE_HOME=$O/cache

train_args() { # train_args STEPS: the gcc-train training command in TRAIN
  TRAIN=("$GCC_TRAIN" "$O/r50_train.onnx" --device cpu --threads "$THREADS" --loss cross-entropy
         --optimizer sgd --lr 0.1 --momentum 0.9 --dataset npy --data "$O/data"
         --batch-size "$B" --eval-batch-size "$B" --epochs 1 --max-steps "$1" --log-every 0
         --no-output --quiet)
}
"$GCC_TRAIN" "$O/r50_eval.onnx" --device cpu --threads "$THREADS" --epochs 0 \
  --export "$O/r50.gccx" --export-batch-sizes "$B" --no-output --quiet >"$O/export.log" 2>&1 ||
  echo "resnet50_cpu: the bundle export failed: $O/export.log" >&2

side_gcc() {
  local r=$1 L=$O/gcc.$1
  echo "resnet50_cpu: run $r: gcc-train ..." >&2
  train_args "$SHORT"
  echo "train_short_s=$(timed "$L.train_short.log" "${TRAIN[@]}")" >"$L.kv"
  train_args "$LONG"
  echo "train_long_s=$(timed "$L.train_long.log" "${TRAIN[@]}")" >>"$L.kv"
  echo "infer_short_s=$(timed "$L.infer_short.log" "$GCC_RUN" "$O/r50.gccx" --device cpu \
    --threads "$THREADS" --input "$O/x.1.npy" --batch-size $B --output "$L.1.csv" --quiet)" >>"$L.kv"
  echo "infer_long_s=$(timed "$L.infer_long.log" "$GCC_RUN" "$O/r50.gccx" --device cpu \
    --threads "$THREADS" --input "$O/x.k.npy" --batch-size $B --output "$L.k.csv" --quiet)" >>"$L.kv"
}
side_peers() {
  local r=$1 L=$O/peer.$1 v
  echo "resnet50_cpu: run $r: PyTorch eager, ONNX Runtime ..." >&2
  for v in nchw channels_last; do
    for m in train eval; do
      timeout "$RUN_TIMEOUT" "$PYTHON" bench/resnet50_gpu.py torch --device cpu --threads "$THREADS" \
        --mode $m --batch $B --precision fp32 --variant $v --warmup "$TORCH_WARMUP" \
        --steps "$TORCH_STEPS" >"$L.$m.$v" 2>&1 || true
    done
  done
  timeout "$RUN_TIMEOUT" "$PYTHON" bench/resnet50_gpu.py ort "$O/r50_eval.onnx" --batch $B \
    --threads "$THREADS" --warmup "$TORCH_WARMUP" --steps "$TORCH_STEPS" >"$L.ort" 2>&1 || true
}
for r in $(seq 1 "$RUNS"); do
  if [ $((r % 2)) -eq 1 ]; then side_gcc "$r"; side_peers "$r"; else side_peers "$r"; side_gcc "$r"; fi
done

# ---- 4. the figures -----------------------------------------------------------------
G_TRAIN=() G_INFER=() G_START=() G_RSS_T=() G_RSS_I=()
declare -A PEER PEER_RSS
for r in $(seq 1 "$RUNS"); do
  L=$O/gcc.$r
  ts=$(kv train_short_s "$L.kv") tl=$(kv train_long_s "$L.kv")
  rate=$(marginal "$ts" "$tl" $(((LONG - SHORT) * B)))
  G_TRAIN+=("$rate")
  G_START+=("$(startup "$ts" "$rate" $((SHORT * B)))")
  G_INFER+=("$(marginal "$(kv infer_short_s "$L.kv")" "$(kv infer_long_s "$L.kv")" $(((INFER_K - 1) * B)))")
  G_RSS_T+=("$(rss_mib "$L.train_long.log.rss")")
  G_RSS_I+=("$(rss_mib "$L.infer_long.log.rss")")
  for f in train.nchw train.channels_last eval.nchw eval.channels_last ort; do
    PEER[$f]="${PEER[$f]:-} $(kv images_per_s "$O/peer.$r.$f")"
    pb=$(kv peak_bytes "$O/peer.$r.$f")
    PEER_RSS[$f]="${PEER_RSS[$f]:-} $(awk -v b="${pb:-x}" 'BEGIN { if (b ~ /^[0-9]+$/) printf "%.0f", b / 1048576; else print "-" }')"
  done
done
# shellcheck disable=SC2086
{
  gt=$(median "${G_TRAIN[@]}") gi=$(median "${G_INFER[@]}")
  tn=$(median ${PEER[train.nchw]}) tc=$(median ${PEER[train.channels_last]})
  en=$(median ${PEER[eval.nchw]}) ec=$(median ${PEER[eval.channels_last]}) eo=$(median ${PEER[ort]})
  tb=$(best "$tn" "$tc") eb=$(best "$en" "$ec")
  rt=$(ratio "$gt" "$tb") ri=$(ratio "$gi" "$eb")
  met() { awk -v r="$1" 'BEGIN { if (r !~ /^[0-9.]+$/) print "not measured"; else if (r >= 1.0) print "met"; else print "**missed**" }'; }
  say ""
  say "## ResNet-50 on the CPU, batch $B, 224x224, fp32, $THREADS threads (issue 29), images/s"
  say ""
  say "| figure | gcc-train | PyTorch NCHW | PyTorch channels_last | ONNX Runtime | ratio | goal | result | peak RSS MiB: gcc-train / PyTorch NCHW / channels_last / ORT |"
  say "|---|---:|---:|---:|---:|---:|---|---|---|"
  say "| training step (SGD momentum) | $gt | $tn | $tc | - | ${rt}x | >= 1.0x the faster PyTorch eager | $(met "$rt") | $(median "${G_RSS_T[@]}") / $(median ${PEER_RSS[train.nchw]}) / $(median ${PEER_RSS[train.channels_last]}) / - |"
  say "| inference (bundle, gcc-run) | $gi | $en | $ec | $eo | ${ri}x (vs ORT $(ratio "$gi" "$eo")x) | >= 1.0x the faster PyTorch eager | $(met "$ri") | $(median "${G_RSS_I[@]}") / $(median ${PEER_RSS[eval.nchw]}) / $(median ${PEER_RSS[eval.channels_last]}) / $(median ${PEER_RSS[ort]}) |"
  say ""
  say "gcc-train start-up (ONNX import, plan build, the first step's allocations, the end-of-run evaluation; cancelled by the marginal rate): median $(median "${G_START[@]}") s of a $SHORT-step run."
  say "Every run (median of $RUNS alternating runs above): gcc-train training ${G_TRAIN[*]}, inference ${G_INFER[*]};" \
    "PyTorch training NCHW${PEER[train.nchw]}, channels_last${PEER[train.channels_last]};" \
    "inference NCHW${PEER[eval.nchw]}, channels_last${PEER[eval.channels_last]}; ONNX Runtime${PEER[ort]}."
}
uptime >"$O/load_after.txt"
say "Load average (1, 5, 15 min) before: $(sed 's/.*load average: //' "$O/load_before.txt"), after: $(sed 's/.*load average: //' "$O/load_after.txt")."

# ---- 5. profile -------------------------------------------------------------------
train_args "$SHORT"
if timeout "$RUN_TIMEOUT" "${TRAIN[@]}" --profile "$O/trace.json" >"$O/profile.log" 2>&1; then
  say ""
  say "gcc-train --profile, training batch $B ($SHORT steps):"
  say ""
  grep -E '^profile:' "$O/profile.log" | tee -a "$TABLE" || true
  say ""
  awk '/^per op type/ { on = 1 } on && /^\|/ && !/\| eval \|/ { print; if (++n == 12) exit }' \
    "$O/profile.log" | tee -a "$TABLE"
  say ""
  awk '/^slowest nodes of the training steps/ { on = 1 } on && /^\|/ { print; if (++n == 12) exit }' \
    "$O/profile.log" | tee -a "$TABLE"
else
  say "the --profile run failed or timed out: $O/profile.log"
fi
echo "resnet50_cpu: table in $TABLE" >&2
