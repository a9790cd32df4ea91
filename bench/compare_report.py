#!/usr/bin/env python3
"""The report of bench/compare.sh: reads the raw outputs it leaves in DIR and
prints the markdown report: the machine and its load during the run, the
limit (oneDNN's sgemm peak of the run), the goals table of issue 17 with
each figure the median of the alternating runs, every run's figures, and
for each missed goal the gcc-train --profile of the run it concerns.

  bench/compare_report.py DIR
  bench/compare_report.py --splice REPORT README.md

Files in DIR (r = run number): params.txt; sgemm.txt (dnnl_ops_bench
--sgemm-peak, before and after); gcc_mlp.r.txt, gcc_cnn.r.txt (mlp_bench);
gcc_infer.r.txt (gcc_run_bench); gcc_whole.r.txt, torch_whole.r.txt (wall_s
of the whole tutorial run); gcc_cifar.r.txt (gcc-train's summary line);
torch_mlp.r.txt, torch_cnn.r.txt, torch_cifar.r.txt, compile_*.r.txt
(bench/torch_mlp.py); ort.r.txt (bench/ort_mlp.py); prof_*.txt (gcc-train
--profile); cpu_*.txt, load_*.txt, elapsed.txt, date.txt.
"""
import glob
import os
import platform
import re
import statistics
import sys


def splice(report_path, readme_path):
    """The report replaces the README's block between <!-- bench:begin -->
    and <!-- bench:end -->, atomically; the profiles stay in the full report."""
    import tempfile
    report, readme = open(report_path).read(), open(readme_path).read()
    a, b = "<!-- bench:begin -->\n", "<!-- bench:end -->"
    i, j = readme.find(a), readme.find(b)
    if i < 0 or j < i:
        sys.exit(f"compare_report: {readme_path} has no <!-- bench:begin --> ... "
                 "<!-- bench:end --> block")
    report = re.sub(r"<!-- profiles -->.*?<!-- end of profiles -->\n", "", report, flags=re.S)
    report = report.replace("\n## ", "\n### ").replace("\n### Where", "\n#### Where")
    if report.startswith("## "):
        report = "#" + report
    report = re.sub(r"\n{3,}", "\n\n", report)
    if "<!-- profiles -->" in open(report_path).read():
        report = report.rstrip("\n") + "\n\nThe profiles of the missed goals are in " \
            "bench/RESULTS.md (`bench/compare.sh --out bench/RESULTS.md`).\n"
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(readme_path)),
                               prefix=os.path.basename(readme_path) + ".tmp.")
    with os.fdopen(fd, "w") as f:
        f.write(readme[:i + len(a)] + report + readme[j:])
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, readme_path)


def kv(path):
    d = {}
    if not os.path.exists(path):
        return d
    for line in open(path):
        if "=" in line and not line.startswith(" "):
            k, v = line.strip().split("=", 1)
            if k.startswith("dnnl_sgemm_") and k in d:  # measured twice: keep the peak
                v = str(max(float(v), float(d[k])))
            d[k] = v
    return d


def main(tmp):
    P = lambda name: os.path.join(tmp, name)
    threads, runs, steps, mlp_epochs, cifar_epochs, quick = \
        (int(x) for x in open(P("params.txt")).read().split())
    sg = kv(P("sgemm.txt"))
    peak = float(sg.get(f"dnnl_sgemm_2048_gflops_{threads}t", "nan"))

    def per_run(prefix, key, parse=None):
        """[value of key in prefix.r.txt for each run] (None where missing)"""
        vals = []
        for r in range(1, runs + 1):
            path = P(f"{prefix}.{r}.txt")
            if parse:
                v = parse(path)
            else:
                d = kv(path)
                v = float(d[key]) if key in d else None
            vals.append(v)
        return vals

    def gcc_infer(key):
        def parse(path):
            if not os.path.exists(path):
                return None
            for line in open(path):
                m = re.match(r"\| " + key + r" \| ([0-9.]+) ", line)
                if m:
                    return float(m.group(1))
            return None
        return parse

    def gcc_cifar(path):
        """seconds per CIFAR epoch (12,500 steps of batch 4) from gcc-train's summary"""
        if not os.path.exists(path):
            return None
        m = re.search(r"trained \d+ epochs \((\d+) steps\) in ([0-9.]+) s", open(path).read())
        return float(m.group(2)) / int(m.group(1)) * 12500 if m else None

    def torch_cifar(path):
        d = kv(path)
        if "cifar_train_s" not in d:
            return None
        return float(d["cifar_train_s"]) / int(d["cifar_steps"]) * 12500

    med = lambda v: statistics.median([x for x in v if x is not None]) \
        if any(x is not None for x in v) else None

    # FLOP per MLP training sample: forward, dW of every layer, dX of all but
    # the first; 2 per multiply-add; biases, ReLU, loss, SGD ignored
    widths = [784, 512, 256, 128, 64, 10]
    macs = sum(a * b for a, b in zip(widths, widths[1:]))
    flop = 2 * (3 * macs - widths[0] * widths[1])  # 2,641,664

    F = {}  # figure -> {side: [per run]}
    F["b64"] = {"gcc": per_run("gcc_mlp", "train_samples_per_s_b64"),
                "eager": per_run("torch_mlp", "train_samples_per_s_b64"),
                "compile": per_run("compile_mlp", "train_samples_per_s_b64")}
    F["b1024"] = {"gcc": per_run("gcc_mlp", "train_samples_per_s_b1024"),
                  "eager": per_run("torch_mlp", "train_samples_per_s_b1024"),
                  "compile": per_run("compile_mlp", "train_samples_per_s_b1024")}
    F["whole"] = {"gcc": per_run("gcc_whole", "wall_s"), "eager": per_run("torch_whole", "wall_s")}
    F["cnn"] = {"gcc": per_run("gcc_cnn", "model_train_samples_per_s_b64"),
                "eager": per_run("torch_cnn", "model_train_samples_per_s_b64"),
                "compile": per_run("compile_cnn", "model_train_samples_per_s_b64")}
    F["cifar"] = {"gcc": per_run("gcc_cifar", None, gcc_cifar),
                  "eager": per_run("torch_cifar", None, torch_cifar)}
    F["i1024"] = {"gcc": per_run("gcc_infer", None, gcc_infer("batch-1024 throughput")),
                  "eager": per_run("torch_mlp", "infer_samples_per_s_b1024"),
                  "compile": per_run("compile_mlp", "infer_samples_per_s_b1024"),
                  "ort": per_run("ort", "infer_samples_per_s_b1024")}
    F["b1"] = {"gcc": per_run("gcc_infer", None, gcc_infer("batch-1 latency, median")),
               "eager": per_run("torch_mlp", "infer_latency_us_b1"),
               "compile": per_run("compile_mlp", "infer_latency_us_b1"),
               "ort": per_run("ort", "infer_latency_us_b1")}
    M = {k: {s: med(v) for s, v in sides.items()} for k, sides in F.items()}

    def ratio(a, b):
        return a / b if a is not None and b not in (None, 0) else None

    # (figure, what, unit, gcc/peer ratio, goal text, met, profile)
    goals = []
    r = ratio(M["b64"]["gcc"], M["b64"]["eager"])
    goals.append(("b64", "MLP training step, batch 64", "samples/s", r, ">= 2.0x PyTorch eager",
                  r is not None and r >= 2.0, "prof_b64.txt"))
    r = ratio(M["b1024"]["gcc"], M["b1024"]["eager"])
    pk = M["b1024"]["gcc"] * flop / 1e9 / peak if M["b1024"]["gcc"] else None
    goals.append(("b1024", "MLP training step, batch 1024", "samples/s", r,
                  ">= 1.5x PyTorch eager and >= 80% of the run's oneDNN sgemm peak"
                  + (f" (is {100 * pk:.0f}%)" if pk else ""),
                  r is not None and r >= 1.5 and pk is not None and pk >= 0.8, "prof_b1024.txt"))
    r = ratio(M["whole"]["eager"], M["whole"]["gcc"])
    goals.append(("whole", f"MLP, the tutorial's {mlp_epochs} epochs at batch 64, whole run "
                  "(wall time)", "s", r, ">= 2.0x PyTorch eager", r is not None and r >= 2.0,
                  "prof_b64.txt"))
    r = ratio(M["cnn"]["gcc"], M["cnn"]["eager"])
    goals.append(("cnn", "MNIST CNN training step, batch 64", "samples/s", r,
                  ">= 1.5x PyTorch eager", r is not None and r >= 1.5, "prof_cnn.txt"))
    r = ratio(M["cifar"]["eager"], M["cifar"]["gcc"])
    goals.append(("cifar", "CIFAR tutorial CNN, batch 4, time per epoch", "s", r,
                  ">= 2.0x PyTorch eager", r is not None and r >= 2.0, "prof_cifar.txt"))
    r = ratio(M["i1024"]["gcc"], M["i1024"]["ort"])
    goals.append(("i1024", "MLP inference, batch 1024", "samples/s", r,
                  ">= 1.0x ONNX Runtime", r is not None and r >= 1.0, "prof_i1024.txt"))
    r = ratio(M["b1"]["gcc"], M["b1"]["ort"])
    goals.append(("b1", "MLP inference latency, batch 1", "us", r, "<= 0.5x ONNX Runtime",
                  r is not None and r <= 0.5, "prof_b1.txt"))

    # machine and load
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "unknown")
    mem = next((int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal")), 0)
    load = [open(P(n)).read().split("load average:")[-1].strip()
            for n in ("load_before.txt", "load_after.txt")]

    def cpu_snap(name):
        f = open(P(name)).read().split()
        v = [int(x) for x in f[1:11]]
        busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
        i = f.index("self")
        return busy, sum(v[:8]), sum(int(x) for x in f[i + 1:i + 5])

    b0, t0, s0 = cpu_snap("cpu_before.txt")
    b1, t1, s1 = cpu_snap("cpu_after.txt")
    others = max(0.0, ((b1 - b0) - (s1 - s0)) / max(t1 - t0, 1))
    tv = kv(P("torch_mlp.1.txt"))
    ov = kv(P("ort.1.txt"))

    out = []
    w = out.append
    w("## gcc-train's CPU backend (oneDNN) vs PyTorch and ONNX Runtime")
    w("")
    if quick:
        w("**Quick run (`--quick`: 1 run, 50 steps, 1 MLP epoch, a tenth of a CIFAR epoch): a "
          "smoke test of the script, not a measurement; do not quote these figures.**")
        w("")
    if others > 0.10:
        w(f"**Busy machine: other processes used {100 * others:.0f}% of the CPUs during the "
          "run; these figures are not representative.**")
        w("")
    w(f"- date: {open(P('date.txt')).read().strip()}; `bench/compare.sh` took "
      f"{open(P('elapsed.txt')).read().strip()} s")
    w(f"- machine: {cpu}, {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable), "
      f"{mem / 2**20:.0f} GiB, {platform.system()} {platform.release()}")
    w(f"- load: other processes used {100 * others:.1f}% of the CPUs during the run; load "
      f"average (1, 5, 15 min) before: {load[0]}, after: {load[1]}")
    w(f"- peers: PyTorch {tv.get('torch_version', '?')} from PyPI (BLAS: "
      f"{tv.get('torch_blas', '?')}; eager, and torch.compile with Inductor's C++ CPU backend), "
      f"ONNX Runtime {ov.get('ort_version', '?')} from PyPI (CPU execution provider); "
      f"gcc-train on oneDNN {sg.get('dnnl_version', '?')} (JIT for {sg.get('dnnl_isa', '?')})")
    policy = (open(P('omp_wait_policy.txt')).read().strip()
              if os.path.exists(P('omp_wait_policy.txt')) else 'unset')
    w(f"- threads: {threads} on every side (gcc-train --threads; torch.set_num_threads and "
      "OMP_NUM_THREADS; ONNX Runtime intra_op_num_threads, inter_op 1)")
    if policy == 'unset':
        w("- environment: each side as its users run it. Nothing but the thread count is set on a "
          "peer's process: PyTorch and ONNX Runtime keep their own OpenMP / thread-pool wait "
          "behaviour (PyTorch's libgomp spins). gcc-train, gcc-run and the harnesses standing in "
          "for them (mlp_bench, gcc_run_bench) set GOMP_SPINCOUNT=10000 (a short spin) for "
          "themselves when neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set, as they do for "
          "every user (cli/flags.h)")
    else:
        w(f"- environment: OMP_WAIT_POLICY={policy} was set by the caller for every side; "
          "otherwise as each side's users run it (nothing but the thread count set on a peer)")
    w(f"- the limit: oneDNN's dnnl_sgemm 2048^3, best of the run (before and after): "
      f"{float(sg.get('dnnl_sgemm_2048_gflops_1t', 'nan')):.1f} GFLOP/s on 1 thread, "
      f"{peak:.1f} on {threads}")
    w(f"- every figure: the median of {runs} alternating runs (gcc-train, PyTorch, ONNX "
      f"Runtime, then the reverse order); training steps and inference calls: the median of "
      f"{steps} timed calls after 20 warm-up (batch 1: 2000 after 100), same initial weights "
      "on every side (the models' .pb files), same data and batch sizes")
    w("- what is timed: training step = forward, loss, backward, SGD update of a prepared "
      "batch; inference = gcc-run's C API (normalisation, the inference graph, logits and "
      "softmax probabilities fetched) against ONNX Runtime's session.run of the same graph "
      "(Gemm + Relu, Softmax) on normalised inputs; whole run = the process's wall time, "
      "start to exit, of `gcc-train models/mnist_mlp.pb` (load MNIST, compile, "
      f"{mlp_epochs} epochs with a test evaluation after each) against "
      "bench/torch_tutorial.py doing the same (import torch included); CIFAR: time per "
      "epoch of 12,500 steps of batch 4 on a CIFAR-10-shaped set of random bytes "
      "(bench/make_cifar_like.py; CIFAR-10 itself is not on the machine)")
    w("")
    fmt = lambda v, unit: "-" if v is None else (f"{v:,.0f}" if unit == "samples/s" else
                                                 f"{v:,.1f}" if unit == "us" else f"{v:.2f}")
    w("| figure | unit | gcc-train | PyTorch eager | torch.compile | ONNX Runtime | ratio | "
      "goal | result |")
    w("|---|---|---:|---:|---:|---:|---:|---|---|")
    for key, what, unit, r, goal, met, _ in goals:
        m = M[key]
        w(f"| {what} | {unit} | {fmt(m.get('gcc'), unit)} | {fmt(m.get('eager'), unit)} | "
          f"{fmt(m.get('compile'), unit)} | {fmt(m.get('ort'), unit)} | "
          f"{'-' if r is None else f'{r:.2f}x'} | {goal} | {'met' if met else '**missed**'} |")
    w("")
    w("Ratios: gcc-train's throughput over the peer's, or the peer's time over gcc-train's "
      "(higher is better), except batch-1 latency: gcc-train's over ONNX Runtime's (lower is "
      "better). MLP training at batch 1024 runs at "
      + (f"{100 * pk:.0f}%" if pk else "-") + f" of the sgemm peak ({flop:,} FLOP per sample).")
    w("")
    w("Every run (the table above takes the median):")
    w("")
    w("| figure | side | " + " | ".join(f"run {i}" for i in range(1, runs + 1)) + " |")
    w("|---|---|" + "---:|" * runs)
    names = {"gcc": "gcc-train", "eager": "PyTorch eager", "compile": "torch.compile",
             "ort": "ONNX Runtime"}
    for key, what, unit, *_ in goals:
        for side, vals in F[key].items():
            w(f"| {what} | {names[side]} | " + " | ".join(fmt(v, unit) for v in vals) + " |")
    errs = [p for p in sorted(glob.glob(P("compile_err.*.txt"))) if os.path.getsize(p)]
    if any(v is None for v in F["b64"]["compile"]) and errs:
        last = open(errs[-1]).read().strip().splitlines()[-3:]
        w("")
        w("torch.compile failed in some runs; its last lines: `" + " / ".join(last) + "`")
    missed = [g for g in goals if not g[5]]
    if missed:
        w("")
        w("### Where the time goes in the runs that missed a goal")
        w("")
        w("<!-- profiles -->")
        done = set()
        for key, what, unit, r, goal, met, prof in missed:
            w("")
            w(f"**{what}** ({goal}): `gcc-train --profile` of the same workload in this run "
              + ("(the profile printed above)" if prof in done else "") + ":")
            if prof in done:
                continue
            done.add(prof)
            w("")
            text = open(P(prof)).read() if os.path.exists(P(prof)) else "(no profile)"
            # the traces' paths as `--keep DIR` names them, not this machine's temp folder
            w(text.strip().replace(os.path.join(tmp, ""), "DIR/"))
        w("<!-- end of profiles -->")
    print("\n".join(out))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--splice":
        splice(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 2:
        main(sys.argv[1])
    else:
        sys.exit("usage: compare_report.py DIR | --splice REPORT README.md")
