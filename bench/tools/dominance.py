#!/usr/bin/env python3
"""dominance.py — does a configuration of expandable segments dominate
PyTorch's own (expandable_policy:pytorch) on every trace, at every lag, under
both cost tables of the simulated device?

  dominance.py [--bench PATH] [--conf NAME=CONF] [--lag-us L]... [--cost-table T]...
               [--size-scale N] [--check] [--check-fits] [--svg PATH] TRACE.csv|DIR|workload:NAME...

For each cost table (default: blackwell and a100) and lag (default: 0 and
5000 us) it replays every trace (a built-in workload is workload:NAME, all
of them workload:all; --size-scale multiplies every size) under the configuration (default: the
default, expandable_segments:True) and PyTorch's policy, twice in a row
(`ga-bench replay --iterations 2`), and finds the smallest device each fits
on (`ga-bench fit`). It prints one line per trace with the configuration's
figures over PyTorch's: peak reserved, driver time, stalls, memory calls in
the second pass that PyTorch's policy does not also make, and fits-on; a
miss is marked with '!' and the totals count them. The four conditions of
dominance: peak reserved <= PyTorch's, driver time <= PyTorch's, no stall,
no more memory calls after the first pass; and fits-on <= PyTorch's.

--check exits 1 when any trace misses any of the five at any lag and table,
or a replay or fit is missing; --check-fits only when the configuration
needs a larger device than PyTorch's policy (the fits-on property).
--svg writes the frontier: for the policies and knobs, fits-on and peak
reserved (summed over the traces, over summed peak live) against summed
driver time, PyTorch native and expandable as points, per cost table, at the
first lag given. Its points go to the same name with .json, from which
frontier.py draws it again; they are printed too.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PYTORCH = "expandable_segments:True,expandable_policy:pytorch"
FRONTIER = [
    ("PyTorch native", ""),
    ("PyTorch expandable", PYTORCH),
    ("default (when_full)", "expandable_segments:True"),
    ("settle", "expandable_segments:True,expandable_move_pages:settle"),
    ("always", "expandable_segments:True,expandable_move_pages:always"),
    ("hold_1000", "expandable_segments:True,expandable_move_pages:always,expandable_move_hold:1000"),
    ("2 MiB pages", "expandable_segments:True,expandable_page_size_mb:2"),
]


def with_table(conf, table):
    return (conf + "," if conf else "") + "sim_cost_table:" + table


def lines(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    out = []
    for line in r.stdout.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def measure(bench, paths, confs, table, lag, iterations=2, size_scale=1):
    """{(trace, name): replay JSON with fits_on_bytes added}."""
    args = ["--lag-us", str(lag), "--size-scale", str(size_scale)]
    for name, conf in confs:
        args += ["--conf", "%s=%s" % (name, with_table(conf, table))]
    res = {}
    for o in lines([bench, "replay"] + paths + ["--json", "--iterations", str(iterations)] + args):
        res[(os.path.basename(o["trace"]), o["config"])] = o
    for o in lines([bench, "fit"] + paths + ["--json"] + args):
        key = (os.path.basename(o["trace"]), o["config"])
        if key in res:
            res[key]["fits_on_bytes"] = o["fits_on_bytes"]
    return res


def main(argv):
    ap = argparse.ArgumentParser(prog="dominance.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "..", "build", "bench", "ga-bench"))
    ap.add_argument("--conf", default="default=expandable_segments:True", help="NAME=CONF")
    ap.add_argument("--lag-us", type=float, action="append")
    ap.add_argument("--cost-table", action="append", choices=("blackwell", "a100"))
    ap.add_argument("--size-scale", type=int, default=1)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--check-fits", action="store_true")
    ap.add_argument("--svg")
    a = ap.parse_args(argv)
    name, _, conf = a.conf.partition("=")
    if not name or not _:
        sys.exit("dominance.py: --conf takes NAME=CONF")
    lags = a.lag_us or [0.0, 5000.0]
    tables = a.cost_table or ["blackwell", "a100"]
    fit_misses = misses = 0
    for table in tables:
        for lag in lags:
            res = measure(a.bench, a.paths, [(name, conf), ("pytorch", PYTORCH)], table, lag,
                          size_scale=a.size_scale)
            traces = sorted({t for t, _ in res})
            print("\n%s against PyTorch's expandable segments: %s table, lag %g ms (ratios; ! = above)" % (
                name, table, lag / 1000.0))
            print("%-36s %10s %10s %7s %7s %10s" % ("trace", "reserved", "driver", "stalls", "steady", "fits on"))
            miss = [0] * 5
            for t in traces:
                g, p = res.get((t, name)), res.get((t, "pytorch"))
                if not g or not p or "fits_on_bytes" not in g or "fits_on_bytes" not in p:
                    print("%-36.36s a replay or fit is missing" % t)
                    misses += 1
                    continue
                r = g["peak_reserved_bytes"] / p["peak_reserved_bytes"]
                d = g["driver_us"] / p["driver_us"] if p["driver_us"] else 1.0
                s = g["num_stalls"]
                st = g["steady_memory_calls"] - p["steady_memory_calls"]
                f = (g.get("fits_on_bytes") or 0) / (p.get("fits_on_bytes") or 1)
                flags = [r > 1, d > 1, s > 0, st > 0, f > 1]
                miss = [m + x for m, x in zip(miss, flags)]
                print("%-36.36s %9.4f%s %9.4f%s %6d%s %6d%s %9.4f%s" % (
                    t, r, "!" if flags[0] else " ", d, "!" if flags[1] else " ", s, "!" if flags[2] else " ",
                    st, "!" if flags[3] else " ", f, "!" if flags[4] else " "))
            print("%-36s %10d %10d %7d %7d %10d" % ("misses", *miss))
            fit_misses += miss[4]
            misses += sum(miss)
    if a.svg:
        points_by_table = []
        for table in tables:
            res = measure(a.bench, a.paths, FRONTIER, table, lags[0], iterations=1, size_scale=a.size_scale)
            points = []
            for label, _ in FRONTIER:
                rows = [o for (t, n), o in res.items() if n == label]
                live = sum(o["trace_peak_live_bytes"] for o in rows)
                points.append({"name": label, "driver": sum(o["driver_us"] for o in rows) / 1000.0,
                               "resv": sum(o["peak_reserved_bytes"] for o in rows) / live,
                               "fits": sum(o.get("fits_on_bytes") or 0 for o in rows) / live})
            points_by_table.append((table, points))
        import frontier
        traces = "the %d traces of %s" % (len({t for t, _ in res}), ", ".join(os.path.normpath(p) for p in a.paths))
        points_json = os.path.splitext(a.svg)[0] + ".json"
        with open(points_json, "w") as f:
            json.dump({"traces": traces, "lag_us": lags[0], "size_scale": a.size_scale,
                       "tables": [{"table": t, "points": p} for t, p in points_by_table]}, f, indent=1)
            f.write("\n")
        frontier.draw(points_by_table, a.svg, traces)
        print("\nfrontier: %s (its points: %s)" % (a.svg, points_json))
        for table, points in points_by_table:
            print("%s cost table, lag %g ms, over peak live:" % (table, lags[0] / 1000.0))
            print("  %-21s %8s %9s %10s" % ("setting", "fits on", "reserved", "driver ms"))
            for p in points:
                print("  %-21s %8.4f %9.4f %10.1f" % (p["name"], p["fits"], p["resv"], p["driver"]))
    if a.check and misses:
        print("%s misses a condition of dominance %d time(s)" % (name, misses))
        return 1
    if a.check_fits and fit_misses:
        print("%s needs a larger device than PyTorch's policy in %d case(s)" % (name, fit_misses))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
