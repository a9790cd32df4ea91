#!/usr/bin/env bash
# Says which tests skipped cases, which bazel's summary hides behind a bare
# PASSED (a GoogleTest case that calls GTEST_SKIP passes): reads every
# test.xml under DIR (default bazel-testlogs, the last `bazel test`'s),
# prints one line per target that skipped cases, with the first reason, and
# a final count:
#   SKIPPED //tests/gpu:gpu_test: 8 of 8 cases (every case): no usable CUDA device: ...
#   skipped cases: 8 in 1 target (1 skipped every case)
# Exit status 0 (skips are reported, not failures).
set -euo pipefail

dir="${1:-bazel-testlogs}"
if [[ ! -d "$dir" ]]; then
  echo "report_skips: $dir: no test logs (run bazel test first)" >&2
  exit 2
fi

total=0 targets=0 whole=0
while IFS= read -r -d '' xml; do
  # the <testsuite> elements carry tests="N" ... skipped="K"
  read -r n k < <(awk '
    /<testsuite / {
      if (match($0, / tests="[0-9]+"/)) n += substr($0, RSTART + 8, RLENGTH - 9)
      if (match($0, / skipped="[0-9]+"/)) k += substr($0, RSTART + 10, RLENGTH - 11)
    }
    END { print n + 0, k + 0 }' "$xml")
  ((k > 0)) || continue
  rel="${xml#"$dir"/}"
  rel="${rel%/test.xml}"
  rel="${rel%/shard_*}"
  target="//${rel%/*}:${rel##*/}"
  why=$(sed -n 's/.*<skipped message="\([^"]*\)".*/\1/p' "$xml" | head -n 1 |
    sed 's/&#x0A;/ /g; s/^[^ ]*:[0-9]* //; s/&quot;/"/g; s/&apos;/'"'"'/g; s/&lt;/</g; s/&gt;/>/g; s/&amp;/\&/g')
  every=""
  if ((k == n)); then
    every=" (every case)"
    whole=$((whole + 1))
  fi
  echo "SKIPPED $target: $k of $n cases$every${why:+: $why}"
  total=$((total + k))
  targets=$((targets + 1))
done < <(find -L "$dir" -name test.xml -print0 | sort -z)

plural() { (($1 == 1)) && echo "$1 $2" || echo "$1 ${2}s"; }
echo "skipped cases: $total in $(plural "$targets" target) ($whole skipped every case)"
