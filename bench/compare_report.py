#!/usr/bin/python3
"""The report of bench/compare.sh: reads the raw outputs it leaves in DIR
(sgemm.txt, gcc.txt, torch.txt, cnn_*.txt: key=value lines of mlp_bench and
torch_mlp.py; plan.json / cnn_plan.json: --dump-placement=json; nvrtc.txt;
prof_*.txt and *.json: gcc-train --profile tables and traces; load_*.txt,
elapsed.txt) and prints the markdown report: the table, the goals of issue 8
met or missed, and for each missed goal where the time goes, from the
profile of the run it concerns.

  bench/compare_report.py DIR THREADS [CNN_MODEL]
"""
import json, os, platform, re, sys

def splice(report_path, readme_path):
    """--splice REPORT README.md: the report replaces the README's block
    between <!-- bench:begin --> and <!-- bench:end -->, atomically."""
    import tempfile
    report, readme = open(report_path).read(), open(readme_path).read()
    a, b = "<!-- bench:begin -->\n", "<!-- bench:end -->"
    i, j = readme.find(a), readme.find(b)
    if i < 0 or j < i:
        sys.exit(f"compare_report: {readme_path} has no <!-- bench:begin --> ... "
                 "<!-- bench:end --> block")
    # the README keeps the tables, the goals and the digests; the per-op
    # tables stay in the full report (--out)
    report = re.sub(r"<!-- profile tables -->.*?<!-- end of profile tables -->\n",
                    "", report, flags=re.S)
    report = report.replace("## gcc-train vs", "### gcc-train vs", 1) \
        .replace("\n### Where", "\n#### Where")
    report = re.sub(r"\n{3,}", "\n\n", report)
    if "#### Where" in report:
        report = report.rstrip("\n") + "\n\nThe per-op tables of these profiles are in the " \
            "full report (`bench/compare.sh --out bench/RESULTS.md`).\n"
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(readme_path)),
                               prefix=os.path.basename(readme_path) + ".tmp.")
    with os.fdopen(fd, "w") as f:
        f.write(readme[:i + len(a)] + report + readme[j:])
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, readme_path)
    sys.exit(0)


if sys.argv[1] == "--splice":
    splice(sys.argv[2], sys.argv[3])
tmp, threads = sys.argv[1], int(sys.argv[2])
cnn = sys.argv[3] if len(sys.argv) > 3 else ""
P = lambda name: os.path.join(tmp, name)

def kv(path):
    d = {}
    for line in open(path):
        if "=" in line:
            k, v = line.strip().split("=", 1)
            if k.startswith("sgemm_") and k in d:  # measured twice: keep the peak
                v = str(max(float(v), float(d[k])))
            d[k] = v
    return d

sg, g, t = kv(P("sgemm.txt")), kv(P("gcc.txt")), kv(P("torch.txt"))
cg, ct = kv(P("cnn_gcc.txt")), kv(P("cnn_torch.txt"))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
            if l.startswith("model name")), "unknown")
mem = next((int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal")), 0)
f = lambda d, k: float(d[k])
steps, epochs = int(g["steps"]), int(g["epochs"])
quick = steps < 200 or epochs != 5

# FLOP per training sample: forward X W^T for every layer, backward dW for
# every layer, backward dX for every layer but the first (the input needs no
# gradient); 2 FLOP per multiply-add; biases/ReLU/loss/SGD ignored.
widths = [784, 512, 256, 128, 64, 10]
macs = sum(a * b for a, b in zip(widths, widths[1:]))        # 574,080
flop = 2 * (3 * macs - widths[0] * widths[1])                 # 2,641,664
iflop = 2 * macs                                              # inference, 1,148,160
peak = f(sg, f"sgemm_2048_gflops_{min(threads, 2)}t")

def frac(sps, fl):
    return sps * fl / 1e9 / peak

plan = json.load(open(P("plan.json")))["totals"]
nv = {}
for line in open(P("nvrtc.txt")):
    m = re.match(r"\| (first|cold|warm)[^|]*\| *([0-9.]+) \|", line)
    if m:
        nv[m.group(1)] = float(m.group(2))
load = [open(P(n)).read().split("load average:")[-1].strip()
        for n in ("load_before.txt", "load_after.txt")]

def cpu_snap(name):
    """(busy, total) jiffies of all CPUs, and this script's children's CPU ticks"""
    f = open(P(name)).read().split()
    v = [int(x) for x in f[1:11]]
    busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
    self_ticks = sum(int(x) for x in f[f.index("self") + 1:f.index("self") + 5])
    return busy, sum(v[:8]), self_ticks

b0, t0, s0 = cpu_snap("cpu_before.txt")
b1, t1, s1 = cpu_snap("cpu_after.txt")
others = max(0.0, ((b1 - b0) - (s1 - s0)) / max(t1 - t0, 1))  # share of all CPUs

out = []
w = out.append
w(f"## gcc-train vs PyTorch {t.get('torch_version', '?')}: MNIST MLP 784-512-256-128-64-10, CPU")
w("")
if quick:
    w(f"**Quick run ({steps} timed steps, {epochs} epoch(s)): not the issue's protocol "
      "(>= 200 steps, 5 epochs); do not quote these figures.**")
    w("")
if others > 0.10:
    w(f"**Busy machine: other processes used {100 * others:.0f}% of the CPUs during the "
      "run; these figures are not representative.**")
    w("")
w(f"- date: {open(P('date.txt')).read().strip()}; "
  f"`bench/compare.sh` took {open(P('elapsed.txt')).read().strip()} s")
w(f"- machine: {cpu}, {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable), "
  f"{mem / 2**20:.0f} GiB, {platform.system()} {platform.release()}")
w(f"- other processes used {100 * others:.1f}% of the CPUs during the run; load average "
  f"(1, 5, 15 min) before: {load[0]}, after: {load[1]}")
w(f"- threads: {threads} on both sides (gcc-train --threads; torch.set_num_threads + "
  f"OMP_NUM_THREADS)")
blas = t.get("torch_blas", "?")
w(f"- PyTorch's BLAS: {blas}" + ("" if "openblas-openmp" in blas else
  " — **not the OpenMP OpenBLAS: the PyTorch figures are not representative**"))
w(f"- the limit, OpenBLAS sgemm 2048^3 (best of before/after the runs): "
  f"{f(sg, 'sgemm_2048_gflops_1t'):.1f} GFLOP/s on 1 thread, "
  f"{f(sg, 'sgemm_2048_gflops_2t'):.1f} on 2; '% of peak' uses {peak:.1f}")
w(f"- FLOP/sample: training 2 x (3 x {macs:,} - 784 x 512) = {flop:,} "
  f"(forward, dX of layers 2-5, dW), inference 2 x {macs:,} = {iflop:,}")
w(f"- training-step and inference figures: median over {steps} timed calls after 20 warm-up; "
  f"the same initial weights on both sides ({t.get('init', '?')}), the same MNIST files, "
  f"batches of the same sizes, SGD lr 0.1 momentum 0.5")
w("- inference: gcc-train's evaluation batch (gcc_session_eval_batch) computes the logits, the "
  "loss and the count of correct argmaxes; PyTorch computes the logits and the argmax under "
  "torch.inference_mode()")
w("")

rows = [
    ("training samples/s, batch 64", "train_samples_per_s_b64", "{:,.0f}", flop),
    ("training samples/s, batch 256", "train_samples_per_s_b256", "{:,.0f}", flop),
    ("training samples/s, batch 1024", "train_samples_per_s_b1024", "{:,.0f}", flop),
    (f"{epochs} epoch(s) at batch 64: samples/s", "epoch_b64_samples_per_s", "{:,.0f}", flop),
    (f"{epochs} epoch(s) at batch 64: s per epoch", "epoch_b64_s", "{:.3f}", None),
    (f"test accuracy after {epochs} epoch(s)", "test_accuracy", "{:.4f}", None),
    ("inference latency, batch 1 (µs)", "infer_latency_us_b1", "{:.1f}", -iflop),
    ("inference samples/s, batch 64", "infer_samples_per_s_b64", "{:,.0f}", iflop),
    ("inference samples/s, batch 1024", "infer_samples_per_s_b1024", "{:,.0f}", iflop),
    ("peak resident memory of the process (MiB)", "peak_rss_mib", "{:.1f}", None),
]
w("| metric | gcc-train | PyTorch | gcc-train / PyTorch | gcc-train % of sgemm peak | "
  "PyTorch % of sgemm peak |")
w("|---|---:|---:|---:|---:|---:|")

def pct(d, k, fl):
    if not fl:
        return ""
    sps = 1e6 / f(d, k) if fl < 0 else f(d, k)   # latency: 1 / latency samples/s
    return f"{100 * frac(sps, abs(fl)):.1f}%"

for name, k, fmt, fl in rows:
    w(f"| {name} | {fmt.format(f(g, k))} | {fmt.format(f(t, k))} | {f(g, k) / f(t, k):.2f}x "
      f"| {pct(g, k, fl)} | {pct(t, k, fl)} |")
if cg and ct:
    cplan = json.load(open(P("cnn_plan.json")))
    cfl = sum(dv["flops_per_step"] for dv in cplan["devices"]) / cplan["batch_size"]
    k = "model_train_samples_per_s_b64"
    w(f"| MNIST CNN ({cnn}) training samples/s, batch 64 | {f(cg, k):,.0f} | {f(ct, k):,.0f} "
      f"| {f(cg, k) / f(ct, k):.2f}x | {100 * frac(f(cg, k), cfl):.1f}% "
      f"| {100 * frac(f(ct, k), cfl):.1f}% |")
w("")
if cg and ct:
    w(f"MNIST CNN: {cfl:,.0f} FLOP per training sample (the CPU plan's `flops_per_step` / 64, "
      "all ops counted); PyTorch runs the same layers (bench/torch_mlp.py --cnn) from the "
      "same initial weights, SGD momentum 0.9.")
elif cnn:
    err = open(P("cnn_err.txt")).read().strip().splitlines() if os.path.exists(P("cnn_err.txt")) \
        else []
    w(f"CNN: the measurement of {cnn} failed: {err[-1] if err else 'see the log'}")
else:
    w("CNN: not available in this tree (no models/mnist_cnn.pb).")
w("")
w("Compiled CUDA plan of the MLP training step (`--device cuda:0`, batch 64; no GPU needed): "
  f"{plan['launches_per_step']} kernel/library launches and {plan['copies_per_step']} copies "
  f"({plan['bytes_per_step']:,} bytes) per step. NVRTC for its kernels (PTX + sm_90 cubin): "
  f"cold {nv.get('cold', float('nan')):.1f} ms ({nv.get('first', float('nan')):.1f} ms for the "
  f"first compile in a process), warm (kernel-cache hit) {nv.get('warm', float('nan')):.3f} ms.")
w("")

ep = f(g, "epoch_b64_samples_per_s") / f(t, "epoch_b64_samples_per_s")
s64 = f(g, "train_samples_per_s_b64") / f(t, "train_samples_per_s_b64")
s1k = f(g, "train_samples_per_s_b1024") / f(t, "train_samples_per_s_b1024")
pk1k = frac(f(g, "train_samples_per_s_b1024"), flop)
lat = f(g, "infer_latency_us_b1") / f(t, "infer_latency_us_b1")
goals = [
    (f"whole-epoch throughput at batch 64 >= 1.5x PyTorch's (is {ep:.2f}x)", ep >= 1.5, "b64"),
    (f"training step at batch 64 >= 1.2x PyTorch's samples/s (is {s64:.2f}x)", s64 >= 1.2, "b64"),
    (f"training step at batch 1024 >= 1.1x PyTorch's samples/s (is {s1k:.2f}x)", s1k >= 1.1,
     "b1024"),
    (f"training step at batch 1024 >= 85% of the sgemm peak (is {100 * pk1k:.1f}%)",
     pk1k >= 0.85, "b1024"),
    (f"batch-1 inference latency <= 1/3 of PyTorch's (is {lat:.2f}x)", lat <= 1 / 3, "b1"),
]
w("| goal | result |")
w("|---|---|")
for text, ok, _ in goals:
    w(f"| {text} | {'met' if ok else '**missed**'} |")
w("")

runs = {
    "b64": ("training at batch 64", "`gcc-train models/mnist_mlp.pb --epochs 1 --batch-size 64 "
            "--max-steps 400 --profile`"),
    "b1024": ("training at batch 1024", "`gcc-train models/mnist_mlp.pb --epochs 2 "
              "--batch-size 1024 --max-steps 100 --profile`"),
    "b1": ("inference at batch 1", "`gcc-train models/mnist_mlp.pb --epochs 0 "
           "--eval-batch-size 1 --profile` (10,000 batch-1 evaluations)"),
}
missed = []
for _, ok, run in goals:
    if not ok and run not in missed:
        missed.append(run)

def digest(run):
    """One paragraph from the run's trace: GEMM share and speed against the
    measured peak, the other ops, the time between ops, the data loader."""
    trace = json.load(open(P(f"{run}.json")))["traceEvents"]
    ev = [e for e in trace if e["ph"] == "X"]
    thread = {e["tid"]: e["args"]["name"] for e in trace
              if e["ph"] == "M" and e["name"] == "thread_name"}
    mode = "eval" if run == "b1" else "train"
    outer = [e for e in ev if e["cat"] == ("eval" if mode == "eval" else "step")]
    ops = [e for e in ev if e["cat"] in ("op", "copy")
           and e["args"].get("plan", "").startswith(mode)]
    tot = sum(e["dur"] for e in outer) or 1e-9
    n = len(outer) or 1
    gemm = [e for e in ops if e["args"].get("op") == "Gemm"]
    g_us = sum(e["dur"] for e in gemm)
    g_fl = sum(e["args"].get("flops", 0) for e in gemm)
    o_us = sum(e["dur"] for e in ops) - g_us
    by_op = {}
    for e in ops:
        if e["args"].get("op") != "Gemm":
            by_op[e["args"].get("op")] = by_op.get(e["args"].get("op"), 0) + e["dur"]
    top = max(by_op.items(), key=lambda kv: kv[1]) if by_op else None
    gf = g_fl / g_us / 1e3 if g_us else 0
    what = "evaluation batch" if mode == "eval" else "training step"
    txt = (f"Per {what}: {tot / n:.1f} µs. GEMMs take {100 * g_us / tot:.1f}% of it at "
           f"{gf:.1f} GFLOP/s ({100 * gf / peak:.0f}% of the {peak:.1f} GFLOP/s sgemm peak "
           f"of this run); the other ops {100 * o_us / tot:.1f}% ({o_us / n:.1f} µs"
           + (f", the largest {top[0]} with {100 * top[1] / tot:.1f}%" if top else "") + "); "
           f"outside the ops (binding, loss check, timers) {100 * (tot - g_us - o_us) / tot:.1f}%.")
    if mode == "train":
        waits = [e for e in ev if e["cat"] == "wait" and "train" in e["name"]]
        loads = [e for e in ev
                 if e["cat"] == "loader" and thread.get(e["tid"]) == "data loader (train)"]
        if waits:
            txt += (f" Waiting for the data loader: {sum(e['dur'] for e in waits) / len(waits):.1f} "
                    f"µs per batch on the main thread; the loader thread assembles a batch in "
                    f"{sum(e['dur'] for e in loads) / max(len(loads), 1):.1f} µs.")
    return txt

for run in missed:
    w(f"### Where the time goes: {runs[run][0]}")
    w("")
    w(f"From {runs[run][1]} with --threads {threads}, in the same run:")
    w("")
    w(digest(run))
    w("")
    w("<!-- profile tables -->")
    text = open(P(f"prof_{run}.txt")).read()
    text = text[text.find("\nprofile:") + 1:] if "\nprofile:" in text else text
    text = re.sub(r"; trace \S+ \(", " (", text)
    for line in text.rstrip().splitlines():
        if not line.startswith("trace written to"):
            w(line)
    w("<!-- end of profile tables -->")
    w("")
print("\n".join(out))
