#!/usr/bin/env bash
# tools/report_skips.sh on made-up test logs: a target that skipped every
# case, one that skipped some, one that skipped none, and a sharded one.
set -euo pipefail

script=""
for base in "${TEST_SRCDIR:-}/gcc_train" "${TEST_SRCDIR:-}/${TEST_WORKSPACE:-gcc_train}" .; do
  if [[ -e "$base/tools/report_skips.sh" ]]; then script="$base/tools/report_skips.sh"; break; fi
done
[[ -n "$script" ]] || { echo "report_skips.sh not in the runfiles" >&2; exit 1; }

logs="${TEST_TMPDIR:-$(mktemp -d)}/testlogs"
rm -rf "$logs"
mkdir -p "$logs/tests/gpu/gpu_test" "$logs/tests/some_test" "$logs/tests/ok_test" \
  "$logs/tests/sharded_test/shard_1_of_2" "$logs/tests/sharded_test/shard_2_of_2"
suite() { # tests skipped [message]
  echo '<?xml version="1.0" encoding="UTF-8"?>'
  echo "<testsuites tests=\"$1\" failures=\"0\" disabled=\"0\" errors=\"0\" name=\"AllTests\">"
  echo "  <testsuite name=\"S\" tests=\"$1\" failures=\"0\" disabled=\"0\" skipped=\"$2\" errors=\"0\">"
  if (($2 > 0)); then
    echo "    <testcase name=\"a\" status=\"run\" result=\"skipped\" classname=\"S\">"
    echo "      <skipped message=\"x.cc:41&#x0A;$3\"><![CDATA[x.cc:41]]></skipped>"
    echo "    </testcase>"
  fi
  echo "  </testsuite>"
  echo "</testsuites>"
}
suite 8 8 "no usable CUDA device &amp; no driver" >"$logs/tests/gpu/gpu_test/test.xml"
suite 5 2 "needs ONNX test data" >"$logs/tests/some_test/test.xml"
suite 4 0 >"$logs/tests/ok_test/test.xml"
suite 3 1 "shard skip" >"$logs/tests/sharded_test/shard_1_of_2/test.xml"
suite 3 0 >"$logs/tests/sharded_test/shard_2_of_2/test.xml"

got=$("$script" "$logs")
want='SKIPPED //tests/gpu:gpu_test: 8 of 8 cases (every case): no usable CUDA device & no driver
SKIPPED //tests:sharded_test: 1 of 3 cases: shard skip
SKIPPED //tests:some_test: 2 of 5 cases: needs ONNX test data
skipped cases: 11 in 3 targets (1 skipped every case)'
if [[ "$got" != "$want" ]]; then
  echo "FAIL: got:" >&2
  echo "$got" >&2
  echo "want:" >&2
  echo "$want" >&2
  exit 1
fi
# no skips: the count says so
rm -rf "$logs/tests/gpu" "$logs/tests/some_test" "$logs/tests/sharded_test"
got=$("$script" "$logs")
[[ "$got" == "skipped cases: 0 in 0 targets (0 skipped every case)" ]] || {
  echo "FAIL: $got" >&2
  exit 1
}
# no logs at all: exit 2 with a message
if "$script" "$logs/none" 2>/dev/null; then
  echo "FAIL: a missing folder passed" >&2
  exit 1
fi
echo "PASS"
