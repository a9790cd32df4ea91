#!/usr/bin/env bash
# `bazel run //:install -- PREFIX` into a temporary prefix, then what a user
# does with it outside the tree: run the installed programs by name, export a
# bundle, build examples/classify_one.c with
# `cc classify_one.c $(pkg-config --cflags --libs gcc-train)` and run it.
set -euo pipefail

fail() { echo "FAIL: $*" >&2; exit 1; }
root=""
for base in "${TEST_SRCDIR:-}/gcc_train" "${TEST_SRCDIR:-}/${TEST_WORKSPACE:-gcc_train}"; do
  if [[ -e "$base/install" ]]; then root="$base"; break; fi
done
[[ -n "$root" ]] || fail "//:install not in the runfiles"
command -v pkg-config >/dev/null || fail "pkg-config is not installed (tools/install-deps.sh installs it)"

work="${TEST_TMPDIR:-$(mktemp -d)}/install_test"
rm -rf "$work"
mkdir -p "$work/src"
prefix="$work/prefix"

RUNFILES_DIR="${TEST_SRCDIR}" "$root/install" "$prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log" >&2; fail "install exited $?"; }
grep -q "installed gcc-train .* under $prefix" "$work/install.log" || fail "no summary: $(cat "$work/install.log")"
for f in bin/gcc-train bin/gcc-run bin/gcc-import lib/libgcc-train.so lib/pkgconfig/gcc-train.pc \
  include/gcc-train/deploy/gcc_api.h; do
  [[ -e "$prefix/$f" ]] || fail "$prefix/$f not installed"
done
for f in bin/gcc-train bin/gcc-run bin/gcc-import; do
  [[ -x "$prefix/$f" ]] || fail "$prefix/$f is not executable"
done

# the installed programs, by name, from outside the tree
export PATH="$prefix/bin:$PATH"
cd "$work/src"
want_version="$("$root/cli/gcc-train" --version)"
[[ "$(gcc-train --version)" == "$want_version" ]] || fail "installed gcc-train --version: $(gcc-train --version)"
gcc-run --help | grep -q "usage: gcc-run" || fail "gcc-run --help"
gcc-import --help 2>&1 | grep -q "usage: gcc-import" || fail "gcc-import --help"
# ldd's whole output first: `ldd | grep -q` under pipefail fails when grep
# exits at the match and ldd gets SIGPIPE (as tests/no_nvrtc_test.sh says)
train_libs="$(ldd "$prefix/bin/gcc-train")"
grep -q "not found" <<<"$train_libs" && fail "gcc-train: $(grep 'not found' <<<"$train_libs")"

# a bundle of the MLP as it is (--epochs 0: evaluation only, no training)
gcc-train "$root/models/mnist_mlp.pb" --data "$root/data/mnist" --device cpu --threads 1 \
  --epochs 0 --no-output --export m.gccx --export-archs sm_80 >"$work/export.log" 2>&1 ||
  { cat "$work/export.log" >&2; fail "gcc-train --export"; }
[[ -s m.gccx ]] || fail "no bundle written"

# examples/classify_one.c built against the installed copy only
cp "$root/examples/classify_one.c" .
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
[[ "$(pkg-config --modversion gcc-train)" == "${want_version#gcc-train }" ]] ||
  fail "pkg-config --modversion: $(pkg-config --modversion gcc-train)"
cflags="$(pkg-config --cflags gcc-train)"
[[ "$cflags" == *"-I$prefix/include/gcc-train"* ]] || fail "--cflags: $cflags"
# The library of a sanitizer build (bazel test --config=asan) needs its
# runtime first in the program: a user's program of that build is linked the
# same way.
san=()
if grep -q libasan <<<"$(ldd "$prefix/lib/libgcc-train.so")"; then
  san=(-fsanitize=address,undefined)
fi
# shellcheck disable=SC2046 # pkg-config's words are separate arguments
cc -std=c11 -Wall -Wextra -Werror "${san[@]}" classify_one.c $(pkg-config --cflags --libs gcc-train) \
  -o classify_one 2>"$work/cc.log" || { cat "$work/cc.log" >&2; fail "cc"; }
grep -q "libgcc-train.so => $prefix/lib/libgcc-train.so" <<<"$(ldd ./classify_one)" ||
  fail "classify_one does not load the installed library: $(ldd ./classify_one | grep gcc)"
out="$(./classify_one m.gccx "$root/data/mnist/t10k-images-idx3-ubyte.gz" 0)" || fail "classify_one exited $?"
grep -qE "^image 0: class [0-9] \(probability 0\.[0-9]+\)$" <<<"$out" || fail "classify_one printed: $out"
[[ "$(grep -cE '^  [0-9]: 0\.[0-9]{6}$' <<<"$out")" == 10 ]] || fail "ten probabilities expected: $out"
echo "PASS"
