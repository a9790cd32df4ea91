#!/usr/bin/env bash
# A deployed program links no compiler: gcc-run and examples/classify_one
# must not load NVRTC (libnvrtc), while gcc-train does (the check would
# pass vacuously if ldd printed nothing).
set -euo pipefail

runfile() {
  for base in "${TEST_SRCDIR:-}/gcc_train" "${TEST_SRCDIR:-}/${TEST_WORKSPACE:-gcc_train}" .; do
    if [[ -e "$base/$1" ]]; then echo "$base/$1"; return; fi
  done
  echo "no_nvrtc_test: $1 not in the runfiles" >&2
  exit 1
}

fail=0
for bin in cli/gcc-run examples/classify_one; do
  path=$(runfile "$bin")
  libs=$(ldd "$path")
  if grep -q nvrtc <<<"$libs"; then
    echo "FAIL: $bin links NVRTC:" >&2
    grep nvrtc <<<"$libs" >&2
    fail=1
  else
    echo "ok: $bin links no NVRTC ($(wc -l <<<"$libs") libraries)"
  fi
done
train=$(runfile cli/gcc-train)
# ldd's whole output first: `ldd | grep -q` under pipefail fails when grep
# exits at the match and ldd gets SIGPIPE (it does with the asan build's
# longer list)
train_libs=$(ldd "$train")
if ! grep -q nvrtc <<<"$train_libs"; then
  echo "FAIL: gcc-train does not link NVRTC: is ldd working?" >&2
  fail=1
fi
exit "$fail"
