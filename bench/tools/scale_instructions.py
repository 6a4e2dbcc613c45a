#!/usr/bin/env python3
"""scale_instructions.py — the instructions each operation of `ga-bench scale`
executes with N blocks live, counted under callgrind: how the allocator's work
grows with N, apart from the memory latency that its CPU times also carry.

  scale_instructions.py [--bench PATH] [--max-n N] [--modes LIST] [--patterns LIST]
                        [--budget-s S] [--capacity-mb N] [--json]

ga-bench scale calls each timed operation through a function of its own
(bench/scale.c): scale_op_alloc (a fresh block), scale_op_free (a random live
block), scale_op_reuse (the allocation after those frees), scale_op_empty
(ga_empty_cache), scale_op_refused (a 1 GiB request refused after the retry
ladder), scale_op_would_fit (ga_would_fit of 16 requests),
scale_op_largest (ga_largest_free of the cache) and scale_op_would_grow
(ga_would_fit of 16 requests past every free block). This runs

  valgrind --tool=callgrind --trace-children=yes --collect-atstart=no
    --toggle-collect=scale_op_alloc ... (each of them)
    ga-bench scale --rounds 1 --capacity-mb C --max-n N ...

so that callgrind collects exactly what those calls execute. Every series runs
in a child of its own, and each child dumps one profile per N, its trigger
naming the series, N and the calls of each metric; a metric's count is the
inclusive instructions of its function (callgrind_annotate --inclusive=yes)
over its calls. The first figure leaves out the simulated device's operations
(the functions of sim_ops in allocator/device/sim.c, as replay_instructions.py
does), whose work on a GPU is the driver's; the second, in parentheses where it
differs, keeps them. To tell which operation a device call was made under,
callgrind keeps each sim_* function apart by its chain of callers
(--separate-callers), and the call is charged to the scale_op_* function
nearest it in the chain.

The glibc series (the C library's malloc and free, the floor) have alloc, free
and reuse only. The device is the simulated one, of --capacity-mb (default
49152, 48 GiB, as replay_instructions.py): under valgrind a process has about
126 GiB of address space, not the 4 TiB ga-bench scale's default device needs,
and the expandable modes reserve 1.125 times the capacity for each pool they
use (both, with mixed sizes). With valgrind 3.19, 55296 (54 GiB) was the
largest capacity at which every series started (at 57344 the expandable mixed
ones stop at their first block of the other pool). Mixed sizes average about 0.48 MB a block: their series run
out of device memory a little above 10^5 live blocks at 48 GiB (before the
10^5 point) and at 54 GiB (after it), and the glibc one runs out of address
space near 3*10^5. A series that stops, for that or for --budget-s (CPU
seconds per series, valgrind's included), is named with ga-bench's reason and
the points it made; its ratios end at the largest N it reached.

Prints a table per metric (rows N, a column per series), then for each metric
and series the count at the largest N over the count at the smallest, flagged
where it is over 2.0 (not flat within 2x), with the largest over the smallest
count at any N beside it. --json prints one JSON line per series and point
instead (and one per series that made no point).
"""
import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replay_cpu import ROOT  # noqa: E402
from replay_instructions import annotate, device_ops, inclusive  # noqa: E402

# Metric, its function in bench/scale.c, the title of its table.
METRICS = [
    ("alloc", "scale_op_alloc", "allocation of a fresh block (growth included)"),
    ("free", "scale_op_free", "free of a random live block"),
    ("reuse", "scale_op_reuse", "allocation right after those frees (holes reused)"),
    ("empty_cache", "scale_op_empty", "ga_empty_cache right after 16 random frees"),
    ("refused", "scale_op_refused", "a request refused after the whole retry ladder (memory fraction = reserved)"),
    ("would_fit", "scale_op_would_fit", "ga_would_fit of 16 requests of the pattern's sizes"),
    ("largest_free", "scale_op_largest", "ga_largest_free (the cache alone, no device call)"),
    ("would_grow", "scale_op_would_grow", "ga_would_fit of 16 requests of 32-64 MiB, past every free block"),
]
WRAPPERS = {fn: m for m, fn, _ in METRICS}
MODES = ["native", "expandable", "pytorch", "glibc"]
PATTERNS = ["4k", "mixed"]
GLIBC_METRICS = ("alloc", "free", "reuse")
# How many callers callgrind keeps apart for the simulated device's functions:
# enough to reach the scale_op_* function above any of them.
CALLER_DEPTH = 40

LABEL = re.compile(r"scale (\S+) (\S+) n=(\d+) rounds=(\d+)((?: \w+=\d+)+)\s*$")
TRIGGER = re.compile(r"^desc: Trigger: Client Request: (.*)$", re.M)
# A line of callgrind_annotate --inclusive=yes for a function kept apart by its
# callers: "  1,234 (0.5%)  file:sim_map.lto_priv.0'caller'caller2... [object]".
CONTEXT = re.compile(r"^\s*([\d,]+)\s+\([^)]*\)\s+(?:[^\s:']*:)?([\w.]+)'(.*?)(?:\s+\[[^\]]*\])?\s*$")


def base_name(fn):
    """A function's name without the suffix the compiler gives a local one."""
    return fn.split(".", 1)[0]


def device_by_wrapper(out_file, ops):
    """{scale_op_* function: inclusive instructions of the simulated device's
    operations called under it}. Each operation's callers are in its name;
    a chain without a scale_op_* function in it is an error (collection is
    on only inside them)."""
    seen = {}
    for line in annotate(out_file, "scale_instructions.py").splitlines():
        m = CONTEXT.match(line)
        if not m or base_name(m.group(2)) not in ops:
            continue
        key = (m.group(2), m.group(3))
        seen[key] = max(seen.get(key, 0), int(m.group(1).replace(",", "")))
    out = {}
    for (fn, chain), cost in seen.items():
        owner = next((base_name(c) for c in chain.split("'") if base_name(c) in WRAPPERS), None)
        if owner is None:
            sys.exit("scale_instructions.py: %s: %s's callers %r name no scale_op_* function (raise CALLER_DEPTH)"
                     % (out_file, fn, chain[:300]))
        out[owner] = out.get(owner, 0) + cost
    return out


def read_dumps(tmp, ops):
    """{(mode, pattern): {n: point}} from every profile ga-bench scale's
    children dumped, a point being {"rounds", "calls": {metric: calls},
    "instructions": {metric: per call, the device left out},
    "with_device": {metric: per call}}."""
    found = {}
    for name in sorted(os.listdir(tmp)):
        if not name.startswith("cg."):
            continue
        path = os.path.join(tmp, name)
        with open(path, errors="replace") as f:
            head = f.read(4096)
        t = TRIGGER.search(head)
        if not t or not t.group(1).startswith("scale "):
            continue  # a process's final profile, with nothing collected after its last dump
        m = LABEL.match(t.group(1))
        if not m:
            sys.exit("scale_instructions.py: %s: a trigger this tool cannot read: %r" % (path, t.group(1)))
        mode, pattern, n, rounds = m.group(1), m.group(2), int(m.group(3)), int(m.group(4))
        calls = {k: int(v) for k, v in (kv.split("=") for kv in m.group(5).split())}
        if rounds == 0:
            continue  # no round finished at this N: ga-bench reports no point either
        dev = device_by_wrapper(path, ops)
        per, wdev = {}, {}
        for metric, fn, _ in METRICS:
            k = calls.get(metric, 0)
            if k == 0:
                continue  # does not apply (the C library's series)
            total = inclusive(path, {fn})
            if total <= 0:
                sys.exit("scale_instructions.py: %s: %d calls of %s but no instructions collected in %s: is it in "
                         "the binary under that name (nm %s)?" % (path, k, metric, fn, os.path.basename(path)))
            per[metric] = (total - dev.get(fn, 0)) / k
            wdev[metric] = total / k
        found.setdefault((mode, pattern), {})[n] = {"rounds": rounds, "calls": calls, "instructions": per,
                                                    "with_device": wdev}
    return found


def read_status(out_dir):
    """{(mode, pattern): status} from ga-bench scale's CSV ("done", or why
    the series stopped)."""
    status = {}
    path = os.path.join(out_dir, "scale.csv")
    if not os.path.exists(path):
        return status
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            status[(row["mode"], row["pattern"])] = row["status"]
    return status


def count(fig):
    """An instruction count in at most 6 characters: 536, 26568, 123k, 4.41M."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if fig >= 99999.5 and fig >= div:
            v = fig / div
            return ("%.0f" if v >= 99.95 else "%.1f" if v >= 9.995 else "%.2f") % v + unit
    return "%.0f" % fig if fig >= 9.95 else "%.1f" % fig


def cell(point, metric):
    if not point or metric not in point["instructions"]:
        return "-"
    a, b = point["instructions"][metric], point["with_device"][metric]
    return count(a) if count(a) == count(b) else "%s (%s)" % (count(a), count(b))


def ratio_text(v):
    return "%.2f" % v if v == v else "-"


def main(argv):
    ap = argparse.ArgumentParser(prog="scale_instructions.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "ga-bench"))
    ap.add_argument("--max-n", type=int, default=1000000)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--patterns", default=",".join(PATTERNS))
    ap.add_argument("--budget-s", type=float, default=7200,
                    help="CPU seconds each series may take under valgrind (default 7200)")
    ap.add_argument("--capacity-mb", type=int, default=49152)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if not shutil.which("valgrind") or not shutil.which("callgrind_annotate"):
        sys.exit("scale_instructions.py: valgrind is needed (apt-get install valgrind)")
    modes, patterns = a.modes.split(","), a.patterns.split(",")
    for what, names, known in (("--modes", modes, MODES), ("--patterns", patterns, PATTERNS)):
        bad = [x for x in names if x not in known]
        if bad:
            sys.exit("scale_instructions.py: %s: %s not one of %s" % (what, ", ".join(bad), " ".join(known)))
    ops = device_ops()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["valgrind", "--tool=callgrind", "--trace-children=yes", "--collect-atstart=no",
               "--separate-callers%d=sim_*" % CALLER_DEPTH, "--callgrind-out-file=" + os.path.join(tmp, "cg.%p")]
        # Each name alone and with any suffix a link-time optimiser gives a local function (one function
        # that matches both toggles once).
        cmd += ["--toggle-collect=" + fn + suffix for _, fn, _ in METRICS for suffix in ("", ".*")]
        cmd += [a.bench, "scale", "--rounds", "1", "--capacity-mb", str(a.capacity_mb), "--max-n", str(a.max_n),
                "--budget-s", "%g" % a.budget_s, "--modes", a.modes, "--patterns", a.patterns, "--out", tmp]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("scale_instructions.py: %s failed (%d): %s"
                     % (" ".join(cmd), r.returncode, r.stderr.strip()[-800:]))
        found = read_dumps(tmp, ops)
        status = read_status(tmp)
    # The series in ga-bench scale's order (pattern, then mode) and the N it aims at.
    series = [(m, p) for p in PATTERNS for m in MODES if m in modes and p in patterns]
    ns = []
    d = 1000
    while d <= a.max_n:
        ns += [d] + ([3 * d] if 3 * d <= a.max_n else [])
        d *= 10
    stopped = {}
    for s in series:
        st = status.get(s, "no result (ga-bench scale wrote no row for it)")
        reached = sorted(found.get(s, {}))
        if st != "done" or reached != ns:
            stopped[s] = "%s; points at %s" % (st, ", ".join(map(str, reached)) or "no N")

    if a.json:
        for s in series:
            for n, p in sorted(found.get(s, {}).items()):
                print(json.dumps({"series": "%s %s" % s, "mode": s[0], "pattern": s[1], "n": n, "rounds": p["rounds"],
                                  "calls": p["calls"], "instructions": p["instructions"],
                                  "with_device": p["with_device"], "stopped": stopped.get(s),
                                  "capacity_mb": a.capacity_mb}))
            if not found.get(s):
                print(json.dumps({"series": "%s %s" % s, "mode": s[0], "pattern": s[1], "n": None,
                                  "stopped": stopped.get(s), "capacity_mb": a.capacity_mb}))
        return 0

    print("instructions per call with N blocks live (callgrind; ga-bench scale --rounds 1, simulated %d MiB device);"
          % a.capacity_mb)
    print("each cell without the simulated device's operations, and with them in parentheses where they differ")
    for metric, _, title in METRICS:
        cols = [s for s in series if s[0] != "glibc" or metric in GLIBC_METRICS]
        if not cols:
            continue
        print("\n%s:" % title)
        print("%-8s" % "N live" + "".join(" %14s" % m for m, _ in cols))
        print("%-8s" % "" + "".join(" %14s" % p for _, p in cols))
        for n in ns:
            print("%-8d" % n + "".join(" %14s" % cell(found.get(s, {}).get(n), metric) for s in cols))
    print("\nlargest N over smallest N, instructions per call without the device (with it); over 2.0: NOT FLAT;")
    print("spread: the largest over the smallest count at any N")
    for metric, _, _ in METRICS:
        for s in series:
            if s[0] == "glibc" and metric not in GLIBC_METRICS:
                continue
            pts = [(n, p) for n, p in sorted(found.get(s, {}).items()) if metric in p["instructions"]]
            name = "%-12s %-16s" % (metric, "%s %s" % s)
            if len(pts) < 2:
                print("%s fewer than two points%s" % (name, "  (stopped early)" if s in stopped else ""))
                continue
            (n0, p0), (n1, p1) = pts[0], pts[-1]
            a0, a1 = p0["instructions"][metric], p1["instructions"][metric]
            b0, b1 = p0["with_device"][metric], p1["with_device"][metric]
            vals = [p["instructions"][metric] for _, p in pts]
            ratio = a1 / a0 if a0 > 0 else float("nan")
            ratio_dev = b1 / b0 if b0 > 0 else float("nan")
            spread = max(vals) / min(vals) if min(vals) > 0 else float("nan")
            flag = "  NOT FLAT" if ratio > 2.0 or ratio_dev > 2.0 else ""
            print("%s %7d -> %-7d %8s -> %-8s %6sx (%sx), spread %sx%s%s" % (
                name, n0, n1, count(a0), count(a1), ratio_text(ratio), ratio_text(ratio_dev), ratio_text(spread),
                flag, "  (stopped early)" if s in stopped else ""))
    if stopped:
        print("\nstopped early (their ratios end at the largest N they reached):")
        for s in series:
            if s in stopped:
                print("  %s %s: %s" % (s[0], s[1], stopped[s]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
