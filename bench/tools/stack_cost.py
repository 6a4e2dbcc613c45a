"""What recording the history costs per allocate+free pair, from Python,
with stacks=None, "python" and "all" (record_memory_history's stacks=), on
the simulated device. The calls go through a PyDLL handle, which keeps the
GIL as PyTorch's calls into the allocator do, so Python frames are recorded.

    python3 bench/tools/stack_cost.py [--pairs N] [--depth D]

--depth nests the allocating call D Python frames deep (default 10).
Prints nanoseconds per pair for each setting and the difference to no
history; the same ctypes overhead is in every row.
"""
import argparse
import ctypes
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python_shim"))
os.environ.setdefault("GARDENALLOC_CONF", "backend:sim,sim_capacity_mb:4096")
import gardenalloc  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=200000)
    p.add_argument("--depth", type=int, default=10)
    args = p.parse_args()
    lib = gardenalloc.library()
    py = ctypes.PyDLL(lib.path)
    alloc, free = py.ga_torch_alloc_nothrow, py.ga_torch_free
    alloc.restype, alloc.argtypes = ctypes.c_void_p, [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    free.restype, free.argtypes = None, [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]

    def loop(n, depth):
        if depth:
            return loop(n, depth - 1)
        t0 = time.perf_counter()
        for _ in range(n):
            free(alloc(4096, 0, None), 4096, 0, None)
        return time.perf_counter() - t0

    rows = [("no history", False, None), ("history, stacks=None", True, None),
            ("history, stacks='python'", True, "python"), ("history, stacks='all'", True, "all")]
    base = None
    print("allocate+free pairs of 4096 B from Python (PyDLL), %d pairs, %d frames deep" % (args.pairs, args.depth))
    print("  %-28s %12s %14s" % ("setting", "ns/pair", "over none"))
    for label, on, stacks in rows:
        gardenalloc.record_memory_history(True if on else None, max_entries=100000, stacks=stacks)
        loop(args.pairs // 10, args.depth)  # warm up
        ns = min(loop(args.pairs, args.depth) for _ in range(3)) * 1e9 / args.pairs
        base = ns if base is None else base
        print("  %-28s %12.0f %14s" % (label, ns, "-" if ns == base else "%+.0f" % (ns - base)))
    gardenalloc.record_memory_history(None)


if __name__ == "__main__":
    main()
