#!/usr/bin/env bash
# Installs gcc-train under PREFIX:
#   PREFIX/bin/gcc-train, gcc-run, gcc-import
#   PREFIX/lib/libgcc-train.so                  the C API (deploy/gcc_api.h)
#   PREFIX/include/gcc-train/{deploy,datasets,graph}/*.h
#   PREFIX/lib/pkgconfig/gcc-train.pc           pkg-config --cflags --libs gcc-train
#
#   tools/install.sh PREFIX            (builds, then runs the next line)
#   bazel run //:install -- PREFIX     (a relative PREFIX is taken from where you are)
#
# Programs outside the tree then build with
#   cc prog.c $(pkg-config --cflags --libs gcc-train)
# with PKG_CONFIG_PATH=PREFIX/lib/pkgconfig unless PREFIX is /usr or /usr/local.
# The library records its own directory as its run path (pkg-config's --libs
# carries -Wl,-rpath), so no LD_LIBRARY_PATH is needed. The system libraries
# it links (OpenBLAS, oneDNN, protobuf-c, the CUDA runtime at /usr/local/cuda)
# stay where Debian and the toolkit put them.
set -euo pipefail

die() { printf 'install: %s\n' "$*" >&2; exit 2; }

# Outside `bazel run`: build and run the //:install target.
runfiles="${RUNFILES_DIR:-${0}.runfiles}"
if [[ ! -d "$runfiles" ]]; then
  (($# == 1)) || die "usage: tools/install.sh PREFIX"
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  exec bazel run //:install -- "$1"
fi

(($# == 1)) || die "usage: bazel run //:install -- PREFIX"
prefix="$1"
[[ -n "$prefix" ]] || die "PREFIX is empty"
# bazel run starts us in the runfiles tree: a relative PREFIX is the user's
if [[ "$prefix" != /* ]]; then
  prefix="${BUILD_WORKING_DIRECTORY:-$PWD}/$prefix"
fi

root=""
for base in "$runfiles/gcc_train" "$runfiles/${TEST_WORKSPACE:-gcc_train}"; do
  if [[ -e "$base/cli/gcc-train" ]]; then root="$base"; break; fi
done
[[ -n "$root" ]] || die "cli/gcc-train is not in the runfiles ($runfiles)"

mkdir -p "$prefix/bin" "$prefix/lib/pkgconfig" "$prefix/include/gcc-train" ||
  die "cannot create the folders under $prefix"
prefix="$(cd "$prefix" && pwd)"

# put SRC DEST MODE: a copy beside DEST renamed over it, so that a running
# program or a reader never sees half a file (coreutils' install(1) is not
# used: under bazel this script is itself named "install", found first on a
# PATH that holds ".")
put() {
  mkdir -p "$(dirname "$2")"
  cp -f "$1" "$2.tmp.$$"
  chmod "$3" "$2.tmp.$$"
  mv -f "$2.tmp.$$" "$2"
}
for prog in gcc-train gcc-run gcc-import; do
  put "$root/cli/$prog" "$prefix/bin/$prog" 0755
done
put "$root/deploy/libgcc-train.so" "$prefix/lib/libgcc-train.so" 0755
for h in deploy/gcc_api.h deploy/bundle.h datasets/dataset.h graph/ir.h graph/status.h \
  graph/util.h; do
  put "$root/$h" "$prefix/include/gcc-train/$h" 0644
done
version="$("$root/cli/gcc-train" --version | sed 's/^gcc-train //')"
tmp="$prefix/lib/pkgconfig/.gcc-train.pc.tmp"
cat >"$tmp" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include/gcc-train

Name: gcc-train
Description: gcc-train's deployment C API (deploy/gcc_api.h): inference from .gccx bundles and model files
Version: $version
Cflags: -I\${includedir} -D_GNU_SOURCE
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lgcc-train
PC
mv -f "$tmp" "$prefix/lib/pkgconfig/gcc-train.pc"

echo "installed gcc-train $version under $prefix:"
echo "  $prefix/bin/gcc-train, gcc-run, gcc-import"
echo "  $prefix/lib/libgcc-train.so, $prefix/include/gcc-train/, $prefix/lib/pkgconfig/gcc-train.pc"
case ":$PATH:" in
*":$prefix/bin:"*) ;;
*) echo "add $prefix/bin to PATH to run them by name: export PATH=\"$prefix/bin:\$PATH\"" ;;
esac
