#!/usr/bin/env python3
"""Launches per training step in a `gcc-train --profile` trace of a GPU run.

  python3 bench/trace_launches.py TRACE.json

On a device, --profile brackets every launch the plan issues (generated
kernel, cuBLASLt matmul, cuDNN call) with CUDA events and records it on the
track "<device> compute (train bN)" (runtime/plan.h, gcc_plan_set_profiler).
This counts those "op" events per step (args.step), leaving out the memset of
the loss kernels' flag (args.kind "memset"), and prints key=value lines:
  steps=S  min_per_step=A  max_per_step=B  track=NAME
for the training plan with the most steps (the full batch; the epoch's last
batch has its own plan). bench/gpu_check.sh compares max_per_step with the
launches the run summary says the plan has. Exit 1 when the trace has no
device track (profiled on the CPU, or not a gcc-train trace).
"""
import json
import sys
from collections import Counter


def count(trace):
    names = {}
    for e in trace.get("traceEvents", []):
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[e.get("tid")] = e.get("args", {}).get("name", "")
    best = None
    for tid, name in names.items():
        if not (name.startswith("cuda") and " compute (train" in name):
            continue
        per_step = Counter()
        for e in trace["traceEvents"]:
            if e.get("ph") != "X" or e.get("tid") != tid or e.get("cat") != "op":
                continue
            args = e.get("args", {})
            if args.get("kind") == "memset":
                continue
            per_step[args.get("step")] += 1
        if per_step and (best is None or len(per_step) > best[1]):
            best = (name, len(per_step), min(per_step.values()), max(per_step.values()))
    return best


def main():
    if len(sys.argv) != 2:
        print("usage: trace_launches.py TRACE.json", file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        best = count(json.load(f))
    if best is None:
        print("trace_launches: no device compute track of a training plan in the trace",
              file=sys.stderr)
        return 1
    name, steps, lo, hi = best
    print(f"steps={steps}")
    print(f"min_per_step={lo}")
    print(f"max_per_step={hi}")
    print(f"track={name.replace(' ', '_')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
