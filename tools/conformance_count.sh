#!/usr/bin/env bash
# Prints the ONNX conformance count of the last `bazel test` that ran
# //tests:onnx_conformance_test (issue 30: the count belongs in CI's output,
# which bazel's summary reduces to PASSED): reads the test logs under DIR
# (default bazel-testlogs), every shard's per-suite lines
#   node (part 1 of 6, 156 of 932 cases): ran 98, passed 98, failed 0, skipped 39 (op not supported)
# and prints them and the sums by suite and in all:
#   ONNX conformance: node ran 557, passed 557, failed 0, skipped 255 (op not supported)
#   ONNX conformance: all suites ran 655, passed 655, failed 0
# Exit status 0; 2 when there is no log to read.
set -euo pipefail

dir="${1:-bazel-testlogs}/tests/onnx_conformance_test"
logs=()
while IFS= read -r -d '' f; do logs+=("$f"); done < <(find "$dir" -name test.log -print0 2>/dev/null)
if ((${#logs[@]} == 0)); then
  echo "conformance_count: no test.log under $dir (run bazel test //tests:onnx_conformance_test)" >&2
  exit 2
fi
grep -h -E '^[a-z-]+ \(part [0-9]+ of [0-9]+, [0-9]+ of [0-9]+ cases\): ran ' "${logs[@]}" | sort |
  awk '
    { print "  " $0
      suite = $1
      match($0, /ran [0-9]+/);     ran[suite] += substr($0, RSTART + 4, RLENGTH - 4)
      match($0, /passed [0-9]+/);  pass[suite] += substr($0, RSTART + 7, RLENGTH - 7)
      match($0, /failed [0-9]+/);  fail[suite] += substr($0, RSTART + 7, RLENGTH - 7)
      match($0, /skipped [0-9]+/); skip[suite] += substr($0, RSTART + 8, RLENGTH - 8)
    }
    END {
      for (s in ran) {
        printf "ONNX conformance: %s ran %d, passed %d, failed %d, skipped %d (op not supported)\n",
               s, ran[s], pass[s], fail[s], skip[s]
        R += ran[s]; P += pass[s]; F += fail[s]
      }
      printf "ONNX conformance: all suites ran %d, passed %d, failed %d\n", R, P, F
    }'
