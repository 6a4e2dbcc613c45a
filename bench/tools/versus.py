#!/usr/bin/env python3
"""versus.py — configurations of expandable segments against PyTorch's own,
trace by trace, on the three axes at once: memory, driver time, stalls (and
memory calls after the first iteration when --iterations > 1).

  versus.py [--bench PATH] [--lag-us L]... [--iterations N] [--conf NAME=CONF]... [--per-trace]
            [--cost-table blackwell|a100] TRACE.csv|DIR...

Every configuration is replayed with `ga-bench replay --json` beside
`pytorch=expandable_segments:True,expandable_policy:pytorch` (PyTorch's
expandable segments, their policy to the byte) at each lag. For each
configuration and lag it prints: the sum over the traces of peak reserved
over the sum of peak live bytes, the worst trace's reserved/live, on how
many traces it reserves more than PyTorch's policy, the summed driver time
and on how many traces it takes longer, stalls and their time, and (with
--iterations) the memory calls made after the first iteration.
Without --conf: the default configuration (expandable_move_pages:when_full),
expandable_move_pages:settle, expandable_move_pages:always, and always with
expandable_move_hold at 1000 and 10000 frees. --per-trace also
prints, for each trace, peak reserved over peak live and driver time of every
configuration. --cost-table replays every configuration, PyTorch's included,
under that table of the simulated device's driver costs (sim_cost_table;
default: the device's, blackwell).
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PYTORCH = "expandable_segments:True,expandable_policy:pytorch"
DEFAULT = [
    ("default", "expandable_segments:True"),
    ("settle", "expandable_segments:True,expandable_move_pages:settle"),
    ("always", "expandable_segments:True,expandable_move_pages:always"),
    ("hold_1000", "expandable_segments:True,expandable_move_pages:always,expandable_move_hold:1000"),
    ("hold_10000", "expandable_segments:True,expandable_move_pages:always,expandable_move_hold:10000"),
]


def replay(bench, paths, confs, lag, iterations):
    cmd = [bench, "replay"] + paths + ["--json", "--lag-us", str(lag), "--iterations", str(iterations)]
    for name, conf in confs:
        cmd += ["--conf", "%s=%s" % (name, conf)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("versus.py: %s" % (r.stderr.strip().splitlines() or ["ga-bench exited %d" % r.returncode])[-1])
    rows = {}
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            o = json.loads(line)
            rows.setdefault(o["trace"], {})[o["config"]] = o
    return rows


def main(argv):
    ap = argparse.ArgumentParser(prog="versus.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "..", "build", "bench", "ga-bench"))
    ap.add_argument("--lag-us", type=float, action="append")
    ap.add_argument("--iterations", type=int, default=1)
    ap.add_argument("--conf", action="append", help="NAME=CONF")
    ap.add_argument("--per-trace", action="store_true")
    ap.add_argument("--cost-table", choices=("blackwell", "a100"))
    a = ap.parse_args(argv)
    confs = [tuple(c.split("=", 1)) for c in a.conf] if a.conf else DEFAULT
    if any(len(c) != 2 or not c[0] for c in confs):
        sys.exit("versus.py: --conf takes NAME=CONF")
    pytorch = PYTORCH
    if a.cost_table:
        confs = [(n, (c + "," if c else "") + "sim_cost_table:" + a.cost_table) for n, c in confs]
        pytorch += ",sim_cost_table:" + a.cost_table
        print("driver costs: the simulated device's %s table" % a.cost_table)
    lags = a.lag_us or [0.0, 5000.0]
    print("%d iteration%s per replay; 'more' counts traces where the configuration is above\n"
          "PyTorch's expandable segments" % (a.iterations, "" if a.iterations == 1 else "s"))
    head = "%-12s %8s %10s %9s %6s %10s %6s %6s %9s" % ("config", "lag (ms)", "resv/live", "worst", "more",
                                                       "driver ms", "more", "stalls", "stall ms")
    if a.iterations > 1:
        head += " %7s" % "steady"
    print(head)
    tables = []
    for lag in lags:
        rows = replay(a.bench, a.paths, confs + [("pytorch", pytorch)], lag, a.iterations)
        tables.append((lag, rows))
        for name, _ in confs + [("pytorch", pytorch)]:
            rs = [(d[name], d["pytorch"]) for d in rows.values()]
            live = sum(r["peak_requested_bytes"] for r, _ in rs)
            resv = sum(r["peak_reserved_bytes"] for r, _ in rs)
            worst = max(r["peak_reserved_bytes"] / r["peak_requested_bytes"] for r, _ in rs)
            more_mem = sum(r["peak_reserved_bytes"] > p["peak_reserved_bytes"] for r, p in rs)
            drv = sum(r["driver_us"] for r, _ in rs) / 1000.0
            more_drv = sum(r["driver_us"] > p["driver_us"] for r, p in rs)
            line = "%-12s %8g %10.4f %9.4f %6d %10.1f %6d %6d %9.1f" % (
                name, lag / 1000.0, resv / live, worst, more_mem, drv, more_drv, sum(r["num_stalls"] for r, _ in rs),
                sum(r["stall_us"] for r, _ in rs) / 1000.0)
            if a.iterations > 1:
                line += " %7d" % sum(r["steady_memory_calls"] for r, _ in rs)
            print(line)
    for lag, rows in tables if a.per_trace else []:
        names = [n for n, _ in confs] + ["pytorch"]
        print("\nlag %g ms: peak reserved / peak live, and driver ms" % (lag / 1000.0))
        print("%-34s" % "trace" + "".join(" %10.10s" % n for n in names) + "".join(" %10.10s" % n for n in names))
        for trace in sorted(rows):
            d = rows[trace]
            print("%-34.34s" % os.path.basename(trace) +
                  "".join(" %10.4f" % (d[n]["peak_reserved_bytes"] / d[n]["peak_requested_bytes"]) for n in names) +
                  "".join(" %10.1f" % (d[n]["driver_us"] / 1000.0) for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
