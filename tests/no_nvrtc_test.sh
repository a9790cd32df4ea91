#!/usr/bin/env bash
# A deployed program carries no compiler: gcc-run and examples/classify_one
# must neither link NVRTC (libnvrtc) nor contain the wrapper that loads it on
# first use (codegen/nvrtc.c: the NVRTC function names it resolves with dlsym,
# such as "nvrtcCompileProgram"), while gcc-train contains that wrapper (so the
# check cannot pass vacuously) and, since NVRTC is loaded on first use, does
# not link it either.
set -euo pipefail

runfile() {
  for base in "${TEST_SRCDIR:-}/gcc_train" "${TEST_SRCDIR:-}/${TEST_WORKSPACE:-gcc_train}" .; do
    if [[ -e "$base/$1" ]]; then echo "$base/$1"; return; fi
  done
  echo "no_nvrtc_test: $1 not in the runfiles" >&2
  exit 1
}

# has_wrapper FILE: 0 when FILE holds the NVRTC wrapper's dlsym names
# (grep's whole-file scan, no pipe: `strings | grep -q` under pipefail could
# SIGPIPE)
has_wrapper() { grep -q -a nvrtcCompileProgram "$1"; }

fail=0
for bin in cli/gcc-run examples/classify_one cli/gcc-train; do
  path=$(runfile "$bin")
  # ldd's whole output first: `ldd | grep -q` under pipefail fails when grep
  # exits at the match and ldd gets SIGPIPE (it does with the asan build's
  # longer list)
  libs=$(ldd "$path")
  if grep -q 'libnvrtc\.so' <<<"$libs"; then
    echo "FAIL: $bin links NVRTC (it is loaded on first use, never linked):" >&2
    grep 'libnvrtc\.so' <<<"$libs" >&2
    fail=1
  else
    echo "ok: $bin links no NVRTC ($(wc -l <<<"$libs") libraries)"
  fi
done
for bin in cli/gcc-run examples/classify_one; do
  if has_wrapper "$(runfile "$bin")"; then
    echo "FAIL: $bin contains the NVRTC wrapper (codegen:nvrtc): a deployed program compiles nothing" >&2
    fail=1
  else
    echo "ok: $bin contains no NVRTC wrapper"
  fi
done
if ! has_wrapper "$(runfile cli/gcc-train)"; then
  echo "FAIL: gcc-train does not contain the NVRTC wrapper: is the check working?" >&2
  fail=1
fi
exit "$fail"
