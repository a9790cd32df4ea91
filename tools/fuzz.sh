#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz with clang
# (-fsanitize=fuzzer,address,undefined) and runs each for SECONDS (default
# 60) from its seed corpus: tests/fuzz/corpus/NAME plus the repository's own
# models and MNIST files. Fails on any finding (a crash, a sanitizer report,
# a leak, an input that takes over 10 s or 2 GB); the finding is left in
# $FUZZ_OUT/NAME/ with the libFuzzer log.
#
#   tools/fuzz.sh [SECONDS] [NAME ...]    NAME: model bundle idx cifar npy onnx train
#                                                       checkpoint
#
# FUZZ_JOBS harnesses (default: one per core) build and run at a time, each
# on one core; their reports are printed in NAME order at the end.
#
# Needs clang (with compiler-rt's libFuzzer and LLVM's OpenMP runtime for the
# CPU backend's oneDNN code), protoc-c and the libraries the harnesses link
# (protobuf-c, jansson, OpenSSL, zlib; for train also OpenBLAS and oneDNN):
# tools/install-deps.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$(pwd)
secs=${1:-60}
shift || true
names=("$@")
((${#names[@]})) || names=(model bundle idx cifar npy onnx train checkpoint)
out=${FUZZ_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/gcc_fuzz_XXXXXX")}
mkdir -p "$out/gen/graph" "$out/gen/deploy" "$out/gen/onnx"
protoc-c --proto_path=graph --c_out="$out/gen/graph" graph/graph.proto
protoc-c --proto_path=deploy --c_out="$out/gen/deploy" deploy/bundle.proto
protoc-c --proto_path=/usr/include/onnx --c_out="$out/gen/onnx" /usr/include/onnx/onnx.proto

cc=${CLANG:-clang}
flags=(-std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -O1 -g -fno-omit-frame-pointer
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
       -I"$root" -I"$out/gen")
graph=(graph/*.c "$out/gen/graph/graph.pb-c.c")
# load + compile + train: the passes, the CPU backend and the session (no
# CUDA: codegen's emitters only, for the shared lowering tables)
train=(passes/*.c codegen/emit*.c codegen/fusion.c codegen/gemm_map.c codegen/kernel_image.c codegen/program_split.c
       codegen/lowering.c codegen/manifest.c runtime/compile.c runtime/placement_report.c
       runtime/plan.c runtime/plan_run.c runtime/plan_info.c runtime/session.c runtime/device.c runtime/profile.c runtime/comm.c
       runtime/cpu/*.c)
declare -A srcs=(
  [model]="tests/fuzz/fuzz_model.c ${graph[*]}"
  [bundle]="tests/fuzz/fuzz_bundle.c deploy/bundle.c $out/gen/deploy/bundle.pb-c.c ${graph[*]}"
  [idx]="tests/fuzz/fuzz_idx.c datasets/dataset.c graph/status.c graph/outfile.c graph/util.c"
  [cifar]="tests/fuzz/fuzz_cifar.c datasets/dataset.c graph/status.c graph/outfile.c graph/util.c"
  [npy]="tests/fuzz/fuzz_npy.c datasets/npy.c datasets/dataset.c ${graph[*]}"
  [onnx]="tests/fuzz/fuzz_onnx.c onnx/import*.c $out/gen/onnx/onnx.pb-c.c ${graph[*]}"
  [train]="tests/fuzz/fuzz_train.c ${train[*]} ${graph[*]}"
  [checkpoint]="tests/fuzz/fuzz_checkpoint.c runtime/checkpoint.c ${train[*]} ${graph[*]}"
)
libs=(-lprotobuf-c -ljansson -lcrypto -lz -lm)
declare -A extra=([train]="-fopenmp -lopenblas -ldnnl -lpthread" [npy]="-lzip"
                  [checkpoint]="-fopenmp -lopenblas -ldnnl -lpthread")

# seeds from the repository, next to the committed corpus
seeds() {
  case $1 in
    model) ls models/linear.pb models/mnist_cnn.pb ;;
    train) ls models/linear.pb ;;
    idx) ls data/mnist/t10k-labels-idx1-ubyte.gz ;;
    onnx) ls tests/onnx/*.onnx tests/onnx/light/*.onnx 2>/dev/null | head -4 ;;
    *) ;;
  esac
}

# one harness: build, seed, run; its report goes to $out/NAME/job.out
fuzz_one() {
  local name=$1 dir="$out/$1"
  mkdir -p "$dir/corpus"
  # shellcheck disable=SC2086
  "$cc" "${flags[@]}" ${srcs[$name]} "${libs[@]}" ${extra[$name]:-} -o "$dir/fuzz_$name" || return 1
  cp tests/fuzz/corpus/"$name"/* "$dir/corpus/" 2>/dev/null || true
  for s in $(seeds "$name"); do cp "$s" "$dir/corpus/"; done
  echo "== fuzz_$name: ${secs}s from $(ls "$dir/corpus" | wc -l) seeds"
  if (cd "$dir" && ASAN_OPTIONS=detect_leaks=1 TMPDIR="$dir" ./"fuzz_$name" \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        corpus > log 2>&1); then
    grep -E "stat::number_of_executed_units|cov:" "$dir/log" | tail -2
  else
    echo "fuzz_$name FAILED: see $dir/log and the crash-* / leak-* / timeout-* file there"
    tail -40 "$dir/log"
    return 1
  fi
}

for name in "${names[@]}"; do
  [[ -n ${srcs[$name]:-} ]] || { echo "fuzz.sh: unknown harness '$name'" >&2; exit 2; }
done
# FUZZ_JOBS harnesses at a time (default: one per core), each fuzzing
# SECONDS on one core; reports printed in the order of NAME
jobs_max=${FUZZ_JOBS:-$(nproc)}
declare -A pid_of=()
running=0
for name in "${names[@]}"; do
  if ((running >= jobs_max)); then
    wait -n || true
    running=$((running - 1))
  fi
  mkdir -p "$out/$name"
  fuzz_one "$name" > "$out/$name/job.out" 2>&1 &
  pid_of[$name]=$!
  running=$((running + 1))
done
failed=0
for name in "${names[@]}"; do
  if wait "${pid_of[$name]}"; then
    cat "$out/$name/job.out"
  else
    cat "$out/$name/job.out" >&2
    failed=1
  fi
done
# a clean run leaves nothing behind (unless FUZZ_OUT asked to keep it)
if ((failed == 0)) && [[ -z ${FUZZ_OUT:-} ]]; then rm -rf "$out"; fi
exit "$failed"
