#!/usr/bin/env python3
"""replay_cpu.py — the allocator's CPU time per allocate+free on every trace,
the default against PyTorch's expandable segments (expandable_policy:pytorch).

  replay_cpu.py [--bench PATH] [--rounds R] [--traces DIR] [--no-x64] [--json]
                [TRACE.csv|DIR|workload:NAME...]

Replays every trace (default: traces/pytorch_snapshots, traces/minimalloc,
traces/allocatorsim_alexnet, and the MiniMalloc problems again with sizes x64,
as bench/run.sh does) with `ga-bench replay ... --json` under three
configurations: the default (expandable_segments:True, the default policy),
PyTorch's policy (expandable_segments:True,expandable_policy:pytorch) and
native (""). Each round is one `ga-bench replay` per set of traces with the
three configurations, so they alternate trace by trace. Round k takes the k-th
of the 6 orders of the three (itertools.permutations, cycling), so over any 6
rounds in a row each configuration is first, second and third twice each and
runs directly after each of the other two twice. Before them, every trace is replayed
once more under the round's first configuration (named "warmup") and that
replay is thrown away, so no measured replay is the first of its process or of
its trace (those run cold). R rounds (default 5; a multiple of 6 balances the
orders exactly). The figure is cpu_ns_per_alloc_free, the
replaying thread's CPU time (CLOCK_THREAD_CPUTIME_ID) over the allocations,
the simulated device's own bookkeeping included.

Prints per trace the median over the rounds of each configuration, the ratio
default / PyTorch's policy (of the medians) with the spread of the per-round
ratios, then the geometric mean of the ratios and the worst trace, and names
every trace above 1.0. --traces DIR takes the traces from DIR (a folder
holding pytorch_snapshots/, minimalloc/, allocatorsim_alexnet/; default
GA_SHARED_DIR/traces when it exists, else the repository's traces/).
--json prints one JSON line per trace instead.
"""
import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFS = [
    ("default", "expandable_segments:True"),
    ("pytorch", "expandable_segments:True,expandable_policy:pytorch"),
    ("native", ""),
]
ORDERS = list(itertools.permutations(CONFS))
WARMUP = "warmup"


def round_confs(k):
    """The --conf list of round k (from 0): the discarded warm-up, then the
    k-th order of the three configurations."""
    order = list(ORDERS[k % len(ORDERS)])
    return [(WARMUP, order[0][1])] + order


def trace_root(arg):
    if arg:
        return arg
    shared = os.environ.get("GA_SHARED_DIR")
    if shared and os.path.isdir(os.path.join(shared, "traces")):
        return os.path.join(shared, "traces")
    return os.path.join(ROOT, "traces")


def replay(bench, paths, size_scale, confs):
    """{trace: {config: cpu_ns_per_alloc_free}} from one ga-bench replay."""
    cmd = [bench, "replay"] + paths + ["--json", "--size-scale", str(size_scale)]
    for name, conf in confs:
        cmd += ["--conf", "%s=%s" % (name, conf)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("replay_cpu.py: %s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr.strip()[-400:]))
    out = {}
    for line in r.stdout.splitlines():
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if o["config"] == WARMUP:
            continue
        name = os.path.basename(o["trace"]) + (" x%d" % size_scale if size_scale != 1 else "")
        out.setdefault(name, {})[o["config"]] = o["cpu_ns_per_alloc_free"]
    return out


def main(argv):
    ap = argparse.ArgumentParser(prog="replay_cpu.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "ga-bench"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--traces", help="folder holding pytorch_snapshots/, minimalloc/, allocatorsim_alexnet/")
    ap.add_argument("--no-x64", action="store_true", help="leave out the MiniMalloc problems with sizes x64")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("paths", nargs="*")
    a = ap.parse_args(argv)
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    if a.paths:
        sets = [([p], 1) for p in a.paths]
    else:
        root = trace_root(a.traces)
        sets = [([os.path.join(root, d)], 1) for d in ("pytorch_snapshots", "minimalloc", "allocatorsim_alexnet")]
        if not a.no_x64:
            sets.append(([os.path.join(root, "minimalloc")], 64))
        for paths, _ in sets:
            if not os.path.isdir(paths[0]):
                sys.exit("replay_cpu.py: no traces at %s (--traces DIR)" % paths[0])
    samples = {}  # trace -> config -> [ns per round]
    order = []
    for k in range(a.rounds):
        confs = round_confs(k)
        for paths, scale in sets:
            for trace, by_conf in replay(a.bench, paths, scale, confs).items():
                if trace not in samples:
                    order.append(trace)
                for name, ns in by_conf.items():
                    samples.setdefault(trace, {}).setdefault(name, []).append(ns)
        print("replay_cpu.py: round %d of %d done" % (k + 1, a.rounds), file=sys.stderr)
    rows = []
    for trace in order:
        s = samples[trace]
        if any(len(s.get(n, [])) != a.rounds for n, _ in CONFS):
            sys.exit("replay_cpu.py: %s: a configuration is missing from some round" % trace)
        med = {n: statistics.median(s[n]) for n, _ in CONFS}
        per_round = [d / p for d, p in zip(s["default"], s["pytorch"]) if p > 0]
        ratio = med["default"] / med["pytorch"] if med["pytorch"] > 0 else float("nan")
        rows.append((trace, med, ratio, min(per_round), max(per_round)))
    if a.json:
        for trace, med, ratio, lo, hi in rows:
            print(json.dumps({"trace": trace, "rounds": a.rounds, "cpu_ns_per_alloc_free": med,
                              "default_over_pytorch": ratio, "ratio_min": lo, "ratio_max": hi}))
        return 0
    print("replay CPU per allocate+free (cpu_ns_per_alloc_free, thread CPU time), median of %d rounds;"
          % a.rounds)
    print("ratio: default / PyTorch's policy (medians), and the range of the per-round ratios")
    print("%-36s %8s %8s %8s %7s %13s" % ("trace", "default", "pytorch", "native", "ratio", "round range"))
    for trace, med, ratio, lo, hi in rows:
        print("%-36s %8.0f %8.0f %8.0f %7.3f %6.3f-%6.3f" % (
            trace[:36], med["default"], med["pytorch"], med["native"], ratio, lo, hi))
    ratios = [r[2] for r in rows if r[2] > 0]
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    worst = max(rows, key=lambda r: r[2])
    above = [r for r in rows if r[2] > 1.0]
    print("geometric mean of the ratios over %d traces: %.3f" % (len(ratios), geo))
    print("worst: %s %.3f (per-round %.3f-%.3f)" % (worst[0], worst[2], worst[3], worst[4]))
    print("above 1.0: %d of %d%s" % (len(above), len(rows), ": " if above else ""))
    for trace, _, ratio, lo, hi in sorted(above, key=lambda r: -r[2]):
        print("  %-36s %.3f (per-round %.3f-%.3f)" % (trace[:36], ratio, lo, hi))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
