"""Replays an RMM CSV trace through gardenalloc's PyTorch entry points with the
history recorded, frees the first `--free` fraction of what is live at the
end (so some memory sits in the cache), and writes the snapshot pickle and
memory_stats() (JSON) taken at the same moment, after an empty_cache (which
leaves the free granules of partly used pages in the page cache).

    python3 make_snapshot.py CONF TRACE.csv OUT.pickle OUT.json [--free F] [--no-empty-cache] [--stacks all|python]

Used by test_viz.py, in a process of its own so that CONF makes its allocator.
"""
import ctypes
import json
import os
import sys


def main(conf, trace_csv, out, stats_out, free=0.5, empty=True, stacks=None):
    os.environ["GARDENALLOC_CONF"] = conf
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import support  # noqa: F401
    import gardenalloc
    lib = gardenalloc.library()
    gardenalloc.record_memory_history(True, max_entries=1000000, stacks=stacks)
    live = {}
    with open(trace_csv) as f:
        rows = [line.rstrip("\n").split(",") for line in f][1:]
    for _, _, action, ptr, size, stream in rows:
        s = ctypes.c_void_p(int(stream, 0))
        if action == "allocate":
            live[ptr] = (lib.ga_torch_alloc_nothrow(int(size), 0, s), int(size), s)
        else:
            p, n, s = live.pop(ptr)
            lib.ga_torch_free(p, n, 0, s)
    keys = sorted(live)
    for k in keys[: int(len(keys) * float(free))]:
        p, n, s = live.pop(k)
        lib.ga_torch_free(p, n, 0, s)
    # empty_cache unmaps every free granule; those of pages still partly
    # mapped elsewhere stay in the page cache.
    if empty:
        gardenalloc.empty_cache()
    gardenalloc.dump_snapshot(out)
    with open(stats_out, "w") as f:
        json.dump(gardenalloc.memory_stats(), f)
    return 0 if gardenalloc.check() == 0 else 1


if __name__ == "__main__":
    args = sys.argv[1:]
    free = 0.5
    if "--free" in args:
        i = args.index("--free")
        free = float(args[i + 1])
        del args[i:i + 2]
    stacks = None
    if "--stacks" in args:
        i = args.index("--stacks")
        stacks = args[i + 1]
        del args[i:i + 2]
    empty = "--no-empty-cache" not in args
    args = [a for a in args if a != "--no-empty-cache"]
    sys.exit(main(*args, free=free, empty=empty, stacks=stacks))
