#!/usr/bin/env python3
"""replay_instructions.py — the instructions the allocator executes per
allocate+free on every trace, the default against PyTorch's expandable
segments (expandable_policy:pytorch), counted under callgrind.

  replay_instructions.py [--bench PATH] [--traces DIR] [--no-x64] [--capacity-mb N]
                         [--json] [TRACE.csv|DIR...]

The same traces and configurations as replay_cpu.py (the default,
expandable_segments:True; PyTorch's policy,
expandable_segments:True,expandable_policy:pytorch; native, ""), but where
replay_cpu.py times the replaying thread, this counts instructions: each trace
under each configuration is one `ga-bench replay TRACE --json` run under
`valgrind --tool=callgrind --toggle-collect=ga_malloc --toggle-collect=ga_free`,
so the count is everything ga_malloc and ga_free execute (the replay's own
loop, the trace's reading and ga_create left out), divided by the trace's
allocations. The first figure leaves out the simulated device too: the
inclusive cost of each of its operations (the functions of sim_ops in
allocator/device/sim.c, whose time on a GPU is the driver's and is charged by
the cost tables instead) is taken away, as callgrind_annotate --inclusive=yes
gives it; "with device" keeps it, as replay_cpu.py's figure does.
Instruction counts do not depend on the machine's load: one run is the
figure. They do depend on the host heap's state, which the length of a path
or of a configuration string changes: single traces move by up to about one
instruction per allocate+free between checkouts at different paths.

The device is always the simulated one (backend:sim), even where a GPU
answers: callgrind counts the host's instructions, and the driver's are not
the allocator's. It is --capacity-mb (default 49152, 48 GiB) instead of
ga-bench's 80 GiB: under valgrind the address space of an 80 GiB device cannot
be reserved. Every trace of the repository peaks below it; a replay that runs
out of memory there is named, since its count would be an out-of-memory path's.

Prints per trace the instructions per allocate+free under each configuration,
the ratio default / PyTorch's policy without and with the simulated device, and
whether the two made the same device calls; then the geometric mean of the ratios, the worst trace and every trace
above 1.0. --json prints one JSON line per trace instead.
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replay_cpu import CONFS, ROOT, trace_root  # noqa: E402

COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")
SIM_C = os.path.join(ROOT, "allocator", "device", "sim.c")


def device_ops():
    """The simulated device's operations: the functions named in sim.c's
    sim_ops table, less those that the body of another of them calls (their
    cost is already in their caller's inclusive cost)."""
    with open(SIM_C) as f:
        src = f.read()
    table = re.search(r"static const ga_device_ops sim_ops = \{(.*?)\n\};", src, re.S)
    if not table:
        sys.exit("replay_instructions.py: no sim_ops table in %s" % SIM_C)
    ops = set(re.findall(r"=\s*(sim_\w+)", table.group(1)))
    called = set()
    for op in ops:
        body = re.search(r"^static [^;{]*\b%s\([^;{]*\{(.*?)^\}" % op, src, re.S | re.M)
        if not body:
            sys.exit("replay_instructions.py: no definition of %s in %s" % (op, SIM_C))
        called |= {o for o in ops if o != op and re.search(r"\b%s\(" % o, body.group(1))}
    return ops - called


def annotate(out_file, tool):
    """callgrind_annotate --inclusive=yes's listing of a profile; `tool`
    names the caller in the error that ends the program when it fails."""
    cmd = ["callgrind_annotate", "--inclusive=yes", "--threshold=100", out_file]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("%s: %s failed (%d): %s" % (tool, " ".join(cmd), r.returncode, r.stderr.strip()[-400:]))
    return r.stdout


def inclusive(out_file, names):
    """The summed inclusive instructions of the functions `names` (with any
    suffix the compiler gives a local function: sim_map.lto_priv.0). A
    function callgrind_annotate lists more than once (under two spellings of
    its file) counts once."""
    seen = {}
    for line in annotate(out_file, "replay_instructions.py").splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+\S*?:(\w+)(?:\.[\w.]+)?(?:\s|$)", line)
        if m and m.group(2) in names:
            seen[m.group(2)] = max(seen.get(m.group(2), 0), int(m.group(1).replace(",", "")))
    return sum(seen.values())


def traces_of(path):
    if os.path.isdir(path):
        return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".csv"))
    return [path]


def count(bench, trace, scale, conf, capacity_mb, tmp, ops):
    """(instructions in ga_malloc and ga_free, those of them in the simulated
    device's operations, the replay's JSON line)."""
    out_file = os.path.join(tmp, "callgrind.out")
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out_file,
           "--toggle-collect=ga_malloc", "--toggle-collect=ga_free",
           bench, "replay", trace, "--json", "--size-scale", str(scale), "--capacity-mb", str(capacity_mb),
           "--conf", "backend:sim" + ("," + conf if conf else "")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    found = COLLECTED.search(r.stderr)
    if r.returncode != 0 or not found:
        sys.exit("replay_instructions.py: %s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr.strip()[-600:]))
    line = next((json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")), None)
    if line is None:
        sys.exit("replay_instructions.py: %s printed no JSON line" % " ".join(cmd))
    return int(found.group(1)), inclusive(out_file, ops), line


def main(argv):
    ap = argparse.ArgumentParser(prog="replay_instructions.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "ga-bench"))
    ap.add_argument("--traces", help="folder holding pytorch_snapshots/, minimalloc/, allocatorsim_alexnet/")
    ap.add_argument("--no-x64", action="store_true", help="leave out the MiniMalloc problems with sizes x64")
    ap.add_argument("--capacity-mb", type=int, default=49152)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("paths", nargs="*")
    a = ap.parse_args(argv)
    if not shutil.which("valgrind") or not shutil.which("callgrind_annotate"):
        sys.exit("replay_instructions.py: valgrind is needed (apt-get install valgrind)")
    if a.paths:
        sets = [(t, 1) for p in a.paths for t in traces_of(p)]
    else:
        root = trace_root(a.traces)
        dirs = [os.path.join(root, d) for d in ("pytorch_snapshots", "minimalloc", "allocatorsim_alexnet")]
        for d in dirs:
            if not os.path.isdir(d):
                sys.exit("replay_instructions.py: no traces at %s (--traces DIR)" % d)
        sets = [(t, 1) for d in dirs for t in traces_of(d)]
        if not a.no_x64:
            sets += [(t, 64) for t in traces_of(dirs[1])]
    ops = device_ops()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for trace, scale in sets:
            name = os.path.basename(trace) + (" x%d" % scale if scale != 1 else "")
            per, wdev, calls, ooms = {}, {}, {}, []
            for conf_name, conf in CONFS:
                n, dev, o = count(a.bench, trace, scale, conf, a.capacity_mb, tmp, ops)
                pairs = o["allocs"] or 1
                per[conf_name], wdev[conf_name] = (n - dev) / pairs, n / pairs
                calls[conf_name] = o["device_calls"]
                if o["num_ooms"]:
                    ooms.append(conf_name)
            ratio = per["default"] / per["pytorch"] if per["pytorch"] else float("nan")
            ratio_dev = wdev["default"] / wdev["pytorch"] if wdev["pytorch"] else float("nan")
            rows.append((name, per, ratio, calls["default"] == calls["pytorch"], ooms, wdev, ratio_dev))
            print("replay_instructions.py: %s done" % name, file=sys.stderr)
    if a.json:
        for name, per, ratio, same, ooms, wdev, ratio_dev in rows:
            print(json.dumps({"trace": name, "instructions_per_alloc_free": per, "default_over_pytorch": ratio,
                              "with_device": wdev, "default_over_pytorch_with_device": ratio_dev,
                              "same_device_calls": same, "out_of_memory": ooms, "capacity_mb": a.capacity_mb}))
        return 0
    print("instructions in ga_malloc and ga_free per allocate+free (callgrind), simulated %d MiB device,"
          % a.capacity_mb)
    print("its operations left out; ratio: default / PyTorch's policy, without and with them;")
    print("calls: the same device calls under both")
    print("%-34s %8s %8s %8s %8s %8s %6s" % ("trace", "default", "pytorch", "native", "ratio", "w/ dev", "calls"))
    for name, per, ratio, same, ooms, _, ratio_dev in rows:
        print("%-34s %8.1f %8.1f %8.1f %8.4f %8.4f %6s%s" % (
            name[:34], per["default"], per["pytorch"], per["native"], ratio, ratio_dev,
            "same" if same else "DIFFER", "  out of memory: " + ", ".join(ooms) if ooms else ""))
    for col, label in ((2, "without the device"), (6, "with the device")):
        ratios = [r[col] for r in rows if r[col] > 0]
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        worst = max(rows, key=lambda r: r[col])
        above = [r[0] for r in rows if r[col] > 1.0]
        print("%s: geometric mean of the ratios over %d traces %.4f, worst %s %.4f" % (
            label, len(ratios), geo, worst[0], worst[col]))
        print(textwrap.fill("above 1.0: %d of %d%s" % (len(above), len(rows), ": " + ", ".join(above) if above else ""),
                            width=96, initial_indent="  ", subsequent_indent="    "))
    ooms = [r[0] for r in rows if r[4]]
    if ooms:
        print(textwrap.fill("out of memory at %d MiB (their counts include the out-of-memory path): %s"
                            % (a.capacity_mb, ", ".join(ooms)), width=96, subsequent_indent="  "))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
