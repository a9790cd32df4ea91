#!/usr/bin/env bash
# resnet50_gpu.sh: issue 29's benchmark, torchvision's ResNet-50 (random
# weights) on one GPU, gcc-train against PyTorch in one run. From the
# repository root, on a machine with a GPU, PyTorch (CUDA) and torchvision:
#
#   bench/resnet50_gpu.sh          (bench/gpu_check.sh runs it as its check `resnet50`)
#
# 1. exports the model here (bench/export_resnet50.py, seed 0): TRAINING mode
#    for training (BatchNormalization trained as nn.BatchNorm2d), EVAL mode
#    for inference (BatchNorm folded into the Conv);
# 2. training, for each batch in BATCHES and precision in PRECISIONS
#    (fp32: PyTorch with TF32 off; tf32: TF32 on, gcc-train --precision tf32;
#    bf16: autocast / --precision bf16), SGD lr 0.1 momentum 0.9, cross-entropy
#    on synthetic uint8 images (bench/resnet50_gpu.py data; gcc-train keeps
#    them on the GPU, --dataset-on-device on). gcc-train's images/s is the
#    marginal rate of two runs, SHORT and LONG steps (the difference cancels
#    start-up, ONNX import, plan build and kernel compile); its peak memory is
#    the plan's device bytes per step ("bytes of device memory per step").
#    PyTorch (bench/resnet50_gpu.py torch): eager NCHW, eager channels_last
#    and (TORCH_COMPILE=1) torch.compile, on a batch already on the GPU, its
#    peak torch.cuda.max_memory_allocated. The ratio is gcc-train over the
#    faster eager PyTorch of that precision;
# 3. inference, for each batch: a .gccx bundle (--export-batch-sizes B;
#    bf16: --export-precision bf16; tf32 has no inference form: fp32 and
#    bf16 rows) run by gcc-run on float32 .npy inputs of B and INFER_K * B
#    rows: marginal images/s; PyTorch under torch.inference_mode();
# 4. compile time: gcc-train's training run of the first batch size and
#    precision with an empty kernel cache (cold) and again (warm, cache hit),
#    both SHORT steps (wall seconds, start-up included), and NVRTC alone on
#    that plan's kernels (bench/nvrtc_compile: cold compile and cache hit as
#    one program, then split into programs on 1 thread and on every core);
# 5. gcc-train --profile on that training plan: the device time per step and
#    the profile's top-10 table of nodes.
# Every run is bounded by RUN_TIMEOUT seconds (a run past it reads as
# "timeout" in the table: it is not retried). Output: $OUT/resnet50 (OUT
# unset: runs/resnet50-gpu), a summary table on stdout and in table.md.
#
# Environment: BATCHES ("64 256"), PRECISIONS ("fp32 tf32 bf16"), SHORT (3),
# LONG (13), TORCH_STEPS (30), INFER_K (5), RUN_TIMEOUT (180), TORCH_COMPILE
# (0: skipped; 1: also torch.compile), PYTHON (python3), GCC_TRAIN, GCC_RUN,
# NVRTC_COMPILE (default: bazel-bin/cli/gcc-train, bazel-bin/cli/gcc-run,
# bazel-bin/bench/nvrtc_compile, or gpu_check's prebuilt ones).
set -euo pipefail
cd "$(dirname "$0")/.."

BATCHES=${BATCHES:-64 256}
PRECISIONS=${PRECISIONS:-fp32 tf32 bf16}
SHORT=${SHORT:-3}
LONG=${LONG:-13}
TORCH_STEPS=${TORCH_STEPS:-30}
INFER_K=${INFER_K:-5}
RUN_TIMEOUT=${RUN_TIMEOUT:-180}
TORCH_COMPILE=${TORCH_COMPILE:-0}
PYTHON=${PYTHON:-python3}
GCC_TRAIN=${GCC_TRAIN:-bazel-bin/cli/gcc-train}
GCC_RUN=${GCC_RUN:-bazel-bin/cli/gcc-run}
NVRTC_COMPILE=${NVRTC_COMPILE:-$(dirname "$GCC_TRAIN")/../bench/nvrtc_compile}
# Python (PyTorch) with the library path it had before a GPU kit's env.sh
py() { LD_LIBRARY_PATH=${PY_LD_LIBRARY_PATH-${LD_LIBRARY_PATH:-}} "$PYTHON" "$@"; }
O=${OUT:+$OUT/resnet50}
O=${O:-runs/resnet50-gpu}
mkdir -p "$O"
O=$(cd "$O" && pwd)
TABLE=$O/table.md
: >"$TABLE"
say() { echo "$*" | tee -a "$TABLE"; }

# wall SECONDS of a command (its output to LOG); "timeout" / "fail" on failure
timed() { # timed LOG COMMAND...
  local log=$1 t0 t1 rc
  shift
  t0=$(date +%s.%N)
  set +e
  timeout "$RUN_TIMEOUT" "$@" >"$log" 2>&1
  rc=$?
  set -e
  t1=$(date +%s.%N)
  if [ $rc -eq 124 ]; then echo timeout
  elif [ $rc -ne 0 ]; then echo fail
  else awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }'
  fi
}
# marginal rate: images between two runs over the seconds between them
marginal() { # marginal T_SHORT T_LONG IMAGES
  awk -v a="$1" -v b="$2" -v n="$3" 'BEGIN {
    if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/) { print (b ~ /^[0-9.]+$/ ? a : b); exit }
    if (b - a <= 0) { print "n/a"; exit } printf "%.1f", n / (b - a) }'
}
kv() { sed -nE "s/.*(^| )$1=([^ ]+).*/\\2/p" "$2" | tail -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else print "-" }'; }
mib() { awk -v b="$1" 'BEGIN { if (b ~ /^[0-9]+$/) printf "%.0f", b / 1048576; else print "-" }'; }

echo "resnet50_gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)" \
  "torch $(py -c 'import torch; print(torch.__version__)' 2>/dev/null)," \
  "gcc-train $("$GCC_TRAIN" --version 2>/dev/null | head -1); logs in $O"

# ---- 1. the models and the data ------------------------------------------------
py bench/export_resnet50.py "$O/r50_train.onnx" --mode train
py bench/export_resnet50.py "$O/r50_eval.onnx" --mode eval
MAXB=0
for b in $BATCHES; do [ "$b" -gt "$MAXB" ] && MAXB=$b; done
py bench/resnet50_gpu.py data "$O/data" --n $((MAXB * LONG)) --test 64
export XDG_CACHE_HOME=$O/cache

# the gcc-train training command for BATCH, PRECISION, STEPS, into the array TRAIN
train_args() {
  TRAIN=("$GCC_TRAIN" "$O/r50_train.onnx" --device cuda --loss cross-entropy --optimizer sgd
         --lr 0.1 --momentum 0.9 --dataset npy --data "$O/data" --dataset-on-device on
         --batch-size "$1" --eval-batch-size 64 --epochs 1 --max-steps "$3" --log-every 0
         --no-output --precision "$2")
}

# ---- 4 (first: its cold run must see an empty cache). compile time -------------
FB=${BATCHES%% *}
FP=${PRECISIONS%% *}
rm -rf "$XDG_CACHE_HOME"
train_args "$FB" "$FP" "$SHORT"
COLD=$(timed "$O/compile.cold.log" "${TRAIN[@]}")
WARM=$(timed "$O/compile.warm.log" "${TRAIN[@]}")
NV=""
if [ -x "$NVRTC_COMPILE" ] &&
   timeout "$RUN_TIMEOUT" "$GCC_TRAIN" "$O/r50_train.onnx" --device cuda --loss cross-entropy \
     --optimizer sgd --lr 0.1 --momentum 0.9 --batch-size "$FB" --precision "$FP" \
     --dump-kernels "$O/kernels" >"$O/dump_kernels.log" 2>&1; then
  timeout "$RUN_TIMEOUT" "$NVRTC_COMPILE" "$O/kernels/kernels.cu" --runs 1 --threads "1,$(nproc)" \
    >"$O/nvrtc.log" 2>&1 ||
    echo "(nvrtc_compile failed: $O/nvrtc.log)"
  NV=$(grep -E '^\|' "$O/nvrtc.log" || true)
fi

# ---- 2. training ------------------------------------------------------------------
say ""
say "## ResNet-50 training (SGD momentum, synthetic data), images/s"
say ""
say "| batch | precision | gcc-train | PyTorch NCHW | PyTorch channels_last | torch.compile | ratio | gcc-train plan MiB | PyTorch peak MiB |"
say "|---:|---|---:|---:|---:|---:|---:|---:|---:|"
for b in $BATCHES; do
  for p in $PRECISIONS; do
    L=$O/train.b$b.$p
    train_args "$b" "$p" "$SHORT"
    ts=$(timed "$L.short.log" "${TRAIN[@]}")
    train_args "$b" "$p" "$LONG"
    tl=$(timed "$L.long.log" "${TRAIN[@]}")
    ours=$(marginal "$ts" "$tl" $(((LONG - SHORT) * b)))
    plan=$(sed -nE 's/.*per training step, ([0-9]+) bytes of device memory.*/\1/p' "$L.long.log" | tail -1)
    for v in nchw channels_last compile; do
      if [ "$v" = compile ] && [ "$TORCH_COMPILE" != 1 ]; then : >"$L.torch.$v"; continue; fi
      timeout "$RUN_TIMEOUT" py bench/resnet50_gpu.py torch --mode train --batch "$b" \
        --precision "$p" --variant "$v" --steps "$TORCH_STEPS" >"$L.torch.$v" 2>&1 || true
    done
    tn=$(kv images_per_s "$L.torch.nchw")
    tc=$(kv images_per_s "$L.torch.channels_last")
    tco=$(kv images_per_s "$L.torch.compile")
    best=$(awk -v a="${tn:-0}" -v c="${tc:-0}" 'BEGIN { print (a + 0 > c + 0 ? a : c) }')
    peak=$(kv peak_bytes "$L.torch.nchw")
    say "| $b | $p | $ours | ${tn:-fail} | ${tc:-fail} | ${tco:-n/a} | $(ratio "$ours" "$best") | $(mib "${plan:-}") | $(mib "${peak:-}") |"
  done
done

# ---- 3. inference -----------------------------------------------------------------
say ""
say "## ResNet-50 inference (bundle, gcc-run), images/s"
say ""
say "| batch | precision | gcc-run | PyTorch NCHW | PyTorch channels_last | torch.compile | ratio |"
say "|---:|---|---:|---:|---:|---:|---:|"
for b in $BATCHES; do
  py bench/resnet50_gpu.py images "$O/x.$b.npy" --n "$b" >/dev/null
  py bench/resnet50_gpu.py images "$O/x.$b.k.npy" --n $((INFER_K * b)) >/dev/null
  for p in $PRECISIONS; do
    [ "$p" = tf32 ] && continue
    L=$O/infer.b$b.$p
    ours=fail
    if timeout "$RUN_TIMEOUT" "$GCC_TRAIN" "$O/r50_eval.onnx" --device cuda --epochs 0 \
         --export "$L.gccx" --export-batch-sizes "$b" --export-precision "$p" >"$L.export.log" 2>&1; then
      ts=$(timed "$L.short.log" "$GCC_RUN" "$L.gccx" --device cuda --input "$O/x.$b.npy" \
        --batch-size "$b" --output "$L.short.csv" --quiet)
      tl=$(timed "$L.long.log" "$GCC_RUN" "$L.gccx" --device cuda --input "$O/x.$b.k.npy" \
        --batch-size "$b" --output "$L.long.csv" --quiet)
      ours=$(marginal "$ts" "$tl" $(((INFER_K - 1) * b)))
    fi
    for v in nchw channels_last compile; do
      if [ "$v" = compile ] && [ "$TORCH_COMPILE" != 1 ]; then : >"$L.torch.$v"; continue; fi
      timeout "$RUN_TIMEOUT" py bench/resnet50_gpu.py torch --mode eval --batch "$b" \
        --precision "$p" --variant "$v" --steps "$TORCH_STEPS" >"$L.torch.$v" 2>&1 || true
    done
    tn=$(kv images_per_s "$L.torch.nchw")
    tc=$(kv images_per_s "$L.torch.channels_last")
    tco=$(kv images_per_s "$L.torch.compile")
    best=$(awk -v a="${tn:-0}" -v c="${tc:-0}" 'BEGIN { print (a + 0 > c + 0 ? a : c) }')
    say "| $b | $p | $ours | ${tn:-fail} | ${tc:-fail} | ${tco:-n/a} | $(ratio "$ours" "$best") |"
  done
done

say ""
say "## compile (training plan, batch $FB, $FP)"
say ""
say "gcc-train run of $SHORT steps, wall seconds with start-up and ONNX import: cold cache $COLD, warm (kernel cache hit) $WARM"
[ -n "$NV" ] && say "NVRTC alone on the plan's kernels (bench/nvrtc_compile):" && say "$NV"

# ---- 5. profile -------------------------------------------------------------------
say ""
say "## gcc-train --profile, training batch $FB, $FP ($SHORT steps)"
train_args "$FB" "$FP" "$SHORT"
if timeout "$RUN_TIMEOUT" "${TRAIN[@]}" --profile "$O/trace.json" >"$O/profile.log" 2>&1; then
  grep -E 'device time per training step|^profile:' "$O/profile.log" | tee -a "$TABLE" || true
  awk '/^slowest nodes of the training steps/ { on = 1 } on && /^\|/ { print; if (++n == 12) exit }' \
    "$O/profile.log" | tee -a "$TABLE"
else
  say "the --profile run failed or timed out: $O/profile.log"
fi
echo "resnet50_gpu: table in $TABLE"
