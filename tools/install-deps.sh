#!/usr/bin/env bash
# Installs the Debian 12 packages gcc-train needs to build and test, and checks
# for the CUDA toolkit: without it, selects the CPU-only build (see below). Idempotent: silent (but for one line) when everything is
# already there; runs apt-get only when something is missing.
#
# Do NOT add bazel-rules-cc: it is too new for Debian's Bazel 4.2.3 and breaks
# the build (WORKSPACE uses in-tree stand-ins under third_party/bazel/).
set -euo pipefail

PACKAGES=(
  bazel-bootstrap
  libgtest-dev
  protobuf-c-compiler
  libprotobuf-c-dev
  libopenblas-dev
  zlib1g-dev
  libzip-dev
  libjansson-dev
  libssl-dev
  libonnx-dev       # onnx.proto, the ONNX schema the importer's reader is generated from
  libonnx-testdata  # ONNX's backend conformance cases (tests/onnx_conformance_test)
  libdnnl-dev
  clang
  libclang-rt-14-dev
  libomp-14-dev     # clang's -fopenmp for tools/fuzz.sh's train harness (the CPU backend's oneDNN code)
  clang-format      # tools/check_format.sh (CI fails on unformatted sources)
  libopenmpi-dev    # MPI_* for data-parallel ranks (runtime/comm); also NCCL's unique-id broadcast
  openmpi-bin       # mpirun, for the multi-rank tests (tests/mpi_*)
  libisal-dev       # CRC32C (crc32_iscsi) of TensorBoard event files (--log-dir)
  pkg-config        # tests/install_test builds a program against an installed copy
)
# GCC_CUDA_HOME_FOR_TEST: look elsewhere (.ci/run checks the no-toolkit path with it)
CUDA_HOME_EXPECTED="${GCC_CUDA_HOME_FOR_TEST:-/usr/local/cuda}"

log() { printf 'install-deps: %s\n' "$*"; }
die() { printf 'install-deps: ERROR: %s\n' "$*" >&2; exit 1; }

is_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'
}

command -v dpkg-query >/dev/null 2>&1 || die "dpkg-query not found: this script expects Debian 12."

missing=()
for pkg in "${PACKAGES[@]}"; do
  is_installed "$pkg" || missing+=("$pkg")
done

if ((${#missing[@]} > 0)); then
  log "installing missing packages: ${missing[*]}"
  SUDO=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "not root and sudo is not available; install as root: apt-get install -y --no-install-recommends ${missing[*]}"
    # Never prompt when there is no terminal (CI): fail instead of hanging.
    if [[ -t 0 ]]; then SUDO=(sudo); else SUDO=(sudo -n); fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
  for pkg in "${missing[@]}"; do
    is_installed "$pkg" || die "package $pkg is still not installed"
  done
fi

command -v bazel >/dev/null 2>&1 || die "bazel not on PATH after installing bazel-bootstrap"

# CUDA 13 toolkit: not a Debian package; WORKSPACE's @cuda repository points at
# /usr/local/cuda (headers, cudart, NVRTC, cuBLASLt, cuDNN). No GPU is needed.
# cudart, NVRTC and cuDNN are linked; cuBLASLt is loaded by its soname when a
# CUDA backend is created (runtime/cuda/cublaslt_api.c), which a test does.
cuda_problems=()
if [[ ! -d $CUDA_HOME_EXPECTED ]]; then
  cuda_problems+=("$CUDA_HOME_EXPECTED does not exist")
fi
for f in include/cuda_runtime.h include/nvrtc.h include/cublasLt.h include/cudnn.h \
         lib64/libcudart.so lib64/libnvrtc.so lib64/libcudnn.so lib64/libcublasLt.so.13; do
  if [[ -d $CUDA_HOME_EXPECTED && ! -e $CUDA_HOME_EXPECTED/$f ]]; then
    cuda_problems+=("missing $CUDA_HOME_EXPECTED/$f")
  fi
done
# Without the toolkit, the build is the CPU-only configuration
# (--config=cpu_only: no CUDA backend, "built without CUDA" for --device
# cuda), selected for every bazel command of this checkout through
# .bazelrc.local (try-imported by .bazelrc, ignored by git).
rc_local="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.bazelrc.local"
cpu_only_note="# written by tools/install-deps.sh: no CUDA toolkit, so the CPU-only build"
cpu_only_line="build --config=cpu_only"
if ((${#cuda_problems[@]} > 0)); then
  printf 'install-deps: no usable CUDA toolkit at %s:\n' "$CUDA_HOME_EXPECTED" >&2
  printf '  - %s\n' "${cuda_problems[@]}" >&2
  printf 'install-deps: building the CPU-only configuration (bazel --config=cpu_only; ' >&2
  printf 'selected in %s).\n' "$rc_local" >&2
  printf 'install-deps: for the GPU backend, install the CUDA 13 toolkit with cuDNN 9 at %s\n' \
    "$CUDA_HOME_EXPECTED" >&2
  printf 'install-deps: (not a Debian package) and run this script again.\n' >&2
  if ! grep -qxF "$cpu_only_note" "$rc_local" 2>/dev/null; then
    printf '%s\n%s\n' "$cpu_only_note" "$cpu_only_line" >>"$rc_local"
  fi
  exit 0
fi
# the toolkit is (back): drop a CPU-only selection this script made
if [[ -f "$rc_local" ]] && grep -qxF "$cpu_only_note" "$rc_local"; then
  # the note and the line after it
  awk -v note="$cpu_only_note" '$0 == note { skip = 1; next } skip { skip = 0; next } { print }' \
    "$rc_local" >"$rc_local.tmp"
  if [[ -s "$rc_local.tmp" ]]; then mv -f "$rc_local.tmp" "$rc_local"; else rm -f "$rc_local.tmp" "$rc_local"; fi
  log "CUDA toolkit found: the CPU-only selection in $rc_local is removed."
fi

if ((${#missing[@]} > 0)); then
  log "done."
else
  log "all packages present; CUDA toolkit found at $CUDA_HOME_EXPECTED."
fi
