#!/usr/bin/env python3
"""layers.py — checks that the allocator's layers call only downward.

    scripts/layers.py [BUILD_DIR]      (default: build)

Reads the object files of the library (BUILD_DIR/CMakeFiles/ga_objects.dir)
with nm: a file that references a symbol another file defines calls into
it. Every call must go to a lower layer, or stay within one layer without a
circle. The files of ga-bench (BUILD_DIR/bench/CMakeFiles/ga-bench.dir),
when built, may call each other but never in a circle. It also reads the
sources: a file includes only the headers of its own layer and below. (The
compiler holds segment/ to that too: its sources are built with
GA_LAYER_SEGMENT, under which internal.h and policy/state.h do not compile,
and device/ with GA_LAYER_DEVICE, under which segment/space.h does not.)
Prints the layers and what crosses them; exits 1 on any upward call,
forbidden include or circle.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALLOC = os.path.join(ROOT, "allocator")

# Layers, top first. A file's layer is the first pattern that matches it.
LAYERS = [
    ("api", ["api.c", "torch_abi.c", "torch_abi_throw.cpp", "env.c"]),  # env.c: a client of the public API
    ("inspect", ["check.c", "snapshot.c", "stats_json.c"]),
    ("policy", ["policy/"]),
    ("segment", ["segment/"]),
    ("device", ["device/"]),
    ("leaf", ["config.c", "text.c", "host.c", "report.c", "history.c", "frames.c", "blockmap.c", "stats.c"]),
]
RANK = {name: len(LAYERS) - i for i, (name, _) in enumerate(LAYERS)}
ALLOWED_CIRCLES = []  # none: the device layer's words (device_text.c) lie below the factory and the backends

# The headers each layer may include (besides the system's and gardenalloc.h).
HEADER_LAYER = {
    "policy/policy.h": "policy", "policy/keep.h": "policy", "policy/rounding.h": "policy", "inspect.h": "inspect", "segment/segment.h": "segment",
    "policy/state.h": "policy",  # the policy's state and the allocator's record: policy/ and up
    "segment/space.h": "segment",
    "internal.h": "api",  # fork, PyTorch's entry points past the API, test hooks
    "device/device.h": "device", "device/sim.h": "device", "device/rtree.h": "device",
    "config.h": "leaf", "errors.h": "leaf", "text.h": "leaf", "host.h": "leaf", "report.h": "leaf", "history.h": "leaf", "frames.h": "leaf",
    "stats.h": "leaf", "blockmap.h": "leaf", "debug.h": "leaf", "lock.h": "leaf",
}


def layer_of(rel):
    for name, pats in LAYERS:
        for p in pats:
            if rel == p or (p.endswith("/") and rel.startswith(p)):
                return name
    return None


def objects(build):
    base = os.path.join(build, "CMakeFiles", "ga_objects.dir", "allocator")
    out = {}
    for d, _, files in os.walk(base):
        for f in files:
            if f.endswith(".o"):
                path = os.path.join(d, f)
                rel = os.path.relpath(path, base)[: -len(".o")]
                out[rel] = path
    return out


def nm(path, flag):
    res = subprocess.run(["nm", flag, path], capture_output=True, text=True, check=True)
    syms = set()
    for line in res.stdout.splitlines():
        parts = line.split()
        if flag == "-u" and parts:
            syms.add(parts[-1])
        elif len(parts) == 3 and parts[1] in "TDBRVW":
            syms.add(parts[2])
    return syms


def bench_objects(build):
    base = os.path.join(build, "bench", "CMakeFiles", "ga-bench.dir")
    out = {}
    if os.path.isdir(base):
        for f in os.listdir(base):
            if f.endswith(".o"):
                out[f[: -len(".o")]] = os.path.join(base, f)
    return out


def call_edges(objs):
    defined, edges = {}, {}
    for rel, path in objs.items():
        for s in nm(path, "--defined-only"):
            defined[s] = rel
    for rel, path in objs.items():
        for s in nm(path, "-u"):
            to = defined.get(s)
            if to and to != rel:
                edges.setdefault(rel, set()).add(to)
    return edges


def circles(nodes, edges):
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    objs = objects(build)
    if not objs:
        sys.exit(f"layers.py: no object files under {build}/CMakeFiles/ga_objects.dir (build the library first)")
    defined, used = {}, {}
    for rel, path in objs.items():
        for s in nm(path, "--defined-only"):
            defined[s] = rel
        used[rel] = nm(path, "-u")
    edges, names = {}, {}
    for rel, syms in used.items():
        for s in syms:
            to = defined.get(s)
            if to and to != rel:
                edges.setdefault(rel, set()).add(to)
                names.setdefault((rel, to), set()).add(s)
    bad = []
    for rel in sorted(objs):
        if layer_of(rel) is None:
            bad.append(f"{rel}: in no layer (add it to LAYERS in scripts/layers.py)")
    for (src, dst), syms in sorted(names.items()):
        ls, ld = layer_of(src), layer_of(dst)
        if ls and ld and RANK[ld] > RANK[ls]:
            bad.append(f"upward call: {src} ({ls}) -> {dst} ({ld}): {', '.join(sorted(syms))}")
    for comp in circles(objs, edges):
        if comp not in ALLOWED_CIRCLES:
            bad.append("circle of calls: " + ", ".join(sorted(comp)))
    bench = bench_objects(build)
    bench_edges = call_edges(bench)
    for comp in circles(bench, bench_edges):
        bad.append("circle of calls in ga-bench: " + ", ".join(sorted(comp)))
    # Includes and state, from the sources.
    for rel in sorted(objs):
        src = os.path.join(ALLOC, rel)
        if not os.path.exists(src):
            continue
        text = open(src, encoding="utf-8").read()
        here = layer_of(rel)
        for inc in re.findall(r'^#include "([^"]+)"', text, re.M):
            target = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
            hl = HEADER_LAYER.get(target)
            if hl and here and RANK[hl] > RANK[here]:
                bad.append(f"upward include: {rel} ({here}) includes {target} ({hl})")
    # The picture.
    print("layers, top first (a file calls only its own layer or those below):")
    for name, _ in LAYERS:
        files = sorted(r for r in objs if layer_of(r) == name)
        print(f"  {name:8} {' '.join(files)}")
    down = sum(1 for (s, d) in names if layer_of(s) != layer_of(d))
    print(f"{len(names)} file-to-file call edges, {down} of them between layers")
    if bad:
        sys.stdout.flush()
        print("\n".join(bad), file=sys.stderr)
        sys.exit(1)
    print(f"no upward call, no upward include, no circle (library and the {len(bench)} files of ga-bench)")


if __name__ == "__main__":
    main()
