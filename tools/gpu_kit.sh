#!/usr/bin/env bash
# gpu_kit.sh: packs what bench/gpu_check.sh --prebuilt needs on a GPU machine
# that has no Bazel and none of our build's Debian libraries (see the
# developers' guide, "The GPU machine"), as one xz archive:
#
#   tools/gpu_kit.sh [--no-build] [--with-data] [OUTDIR]   (default OUTDIR: gpu-kit, ignored by git)
#
# writes OUTDIR/gcc-train-gpu-kit.tar.xz holding one folder, gpu-kit/:
#   bin/      the binaries in bazel-bin's layout (cli/, bench/, tests/, tests/gpu/,
#             models/make_models: the gpt check writes its GPT models with it)
#             with _solib_k8/ beside them: test binaries find their shared
#             libraries through the rpath $ORIGIN/../_solib_k8 (tests/gpu:
#             $ORIGIN/../../_solib_k8), so the relative layout is kept;
#   lib/      the Debian libraries they link (ldd), less glibc, libstdc++,
#             libgcc_s (the machine's own) and CUDA / cuDNN / NCCL (the
#             machine has its own: /usr/local/cuda/lib64, /usr/lib/x86_64-linux-gnu);
#   repo/     models/, the bench scripts (bench/*.sh, *.py), tools/*.py and, with
#             --with-data, data/mnist (12 MB that xz cannot shrink: the checkout
#             that travels with the kit has it already);
#   env.sh    `. gpu-kit/env.sh` sets LD_LIBRARY_PATH (lib/, then the CUDA folders);
#   MANIFEST  the commit, the build's date, every file with its size.
# Then: unpack it on the machine into a folder DIR (tar -xJf ... -C DIR) and run
#   bench/gpu_check.sh --prebuilt DIR/gpu-kit
# from the repository checkout (or DIR/gpu-kit/repo/bench/gpu_check.sh
# --prebuilt DIR/gpu-kit --data CHECKOUT/data/mnist).
#
# --no-build packs the current bazel-bin as it is (else `bazel build` first).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=1
WITH_DATA=0
OUTDIR=gpu-kit
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) BUILD=0; shift ;;
    --with-data) WITH_DATA=1; shift ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    -*) echo "gpu_kit.sh: unknown option $1" >&2; exit 2 ;;
    *) OUTDIR=$1; shift ;;
  esac
done

# the targets whose binaries travel (bench/gpu_check.sh --prebuilt runs them;
# not the host-emulation tests such as device_plan_test: they need no GPU,
# CI runs them, and they compile kernels with the host compiler from runfiles)
TARGETS=(//cli:gcc-train //cli:gcc-run //bench:gpu_step //bench:nvrtc_compile //bench:conv_algos
         //bench:bundle_graph_bench //tests/gpu:gpu_test //tests:cuda_runtime_test
         //tests:compare_params //models:make_models)
BINS=(cli/gcc-train cli/gcc-run bench/gpu_step bench/nvrtc_compile bench/conv_algos
      bench/bundle_graph_bench tests/gpu/gpu_test tests/cuda_runtime_test tests/compare_params
      models/make_models)

if [ "$BUILD" = 1 ]; then
  bazel build "${TARGETS[@]}" >&2
fi
BB=$(bazel info bazel-bin 2>/dev/null || readlink -f bazel-bin)
[ -d "$BB" ] || { echo "gpu_kit.sh: no bazel-bin ($BB): build first" >&2; exit 1; }

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
K=$STAGE/gpu-kit
mkdir -p "$K/bin" "$K/lib" "$K/repo"

for b in "${BINS[@]}"; do
  [ -x "$BB/$b" ] || { echo "gpu_kit.sh: $BB/$b is missing: build ${TARGETS[*]}" >&2; exit 1; }
  mkdir -p "$K/bin/$(dirname "$b")"
  cp -L "$BB/$b" "$K/bin/$b"
done
# the shared libraries Bazel built for the tests go to bin/_solib_k8 under
# the names the binaries' rpaths give (see ldd below)
mkdir -p "$K/bin/_solib_k8"

# keep_lib PATH: 0 when a library must travel (a Debian library of our build
# the GPU machine lacks), 1 when the machine has it (glibc, the C++ runtime,
# CUDA's and cuDNN's libraries) or it is not a file.
keep_lib() {
  local base
  base=$(basename "$1")
  case "$base" in
    linux-vdso*|ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libresolv.so*|\
    libutil.so*|libstdc++.so*|libgcc_s.so*|libmvec.so*) return 1 ;;
    libcuda.so*|libcudart*|libnvrtc*|libcublas*|libcudnn*|libnccl*|libnvJitLink*|libcufft*|\
    libcurand*|libcusparse*|libcusolver*) return 1 ;;
  esac
  case "$1" in
    /usr/local/cuda*) return 1 ;;
  esac
  [ -f "$1" ]
}

: >"$STAGE/libs"
for b in "${BINS[@]}"; do
  # ldd's whole output first (a pipe into grep could SIGPIPE it)
  ldd "$BB/$b" >"$STAGE/ldd.out" 2>&1 || { cat "$STAGE/ldd.out" >&2; exit 1; }
  if grep -q 'not found' "$STAGE/ldd.out"; then
    echo "gpu_kit.sh: $b: a library is not found here:" >&2
    grep 'not found' "$STAGE/ldd.out" >&2
    exit 1
  fi
  awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' "$STAGE/ldd.out" \
    >>"$STAGE/libs"
done
sort -u "$STAGE/libs" | while read -r lib; do
  case "$lib" in
    */_solib_k8/*)
      # one of ours: keep its name under bin/_solib_k8 (the rpath's folder)
      rel=${lib#*_solib_k8/}
      mkdir -p "$K/bin/_solib_k8/$(dirname "$rel")"
      cp -L "$lib" "$K/bin/_solib_k8/$rel"
      ;;
    *)
      if keep_lib "$lib"; then cp -L "$lib" "$K/lib/$(basename "$lib")"; fi
      ;;
  esac
done
# the repository files the checks read
mkdir -p "$K/repo/bench" "$K/repo/tools"
cp -r models "$K/repo/models"
rm -f "$K/repo/models/"*.trained.pb
if [ "$WITH_DATA" = 1 ]; then
  mkdir -p "$K/repo/data"
  cp -r data/mnist "$K/repo/data/mnist"
fi
cp bench/*.sh bench/*.py "$K/repo/bench/"
cp tools/*.py "$K/repo/tools/" 2>/dev/null || true

cat >"$K/env.sh" <<'EOF'
# . gpu-kit/env.sh: the kit's libraries first, then the GPU machine's CUDA
# 13 libraries (/usr/local/cuda/lib64) and cuDNN / NCCL (/usr/lib/x86_64-linux-gnu).
# PY_LD_LIBRARY_PATH keeps the value before: Python (PyTorch) runs with it, not
# with the kit's Debian libraries (libz, libcrypto, libgomp ... of another distribution).
GPU_KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export GPU_KIT
export PY_LD_LIBRARY_PATH=${PY_LD_LIBRARY_PATH-${LD_LIBRARY_PATH:-}}
export LD_LIBRARY_PATH="$GPU_KIT/lib:/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
EOF

{
  echo "gcc-train GPU kit"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m)"
  echo "files:"
  (cd "$STAGE" && find gpu-kit -type f -printf '%s %p\n' | sort -k2)
} >"$K/MANIFEST"

mkdir -p "$OUTDIR"
ARCHIVE=$OUTDIR/gcc-train-gpu-kit.tar.xz
tar -C "$STAGE" -cf - gpu-kit | xz -T0 -6 >"$ARCHIVE.tmp"
mv "$ARCHIVE.tmp" "$ARCHIVE"
echo "gpu_kit.sh: $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1)): $(find "$K/bin" -type f | wc -l) files" \
  "under bin/, $(find "$K/lib" -type f | wc -l) libraries under lib/ ($(du -sh "$K/lib" | cut -f1))"
