"""Makes a snapshot whose recorded run hit an out-of-memory, the way a user
gets one: a real trace runs on gardenalloc's native mode (PyTorch's policy)
on a simulated GPU too small for its fragmentation, with the history recorded,
and the snapshot is dumped at the first failed allocation (as an
`except torch.OutOfMemoryError: torch.cuda.memory._dump_snapshot(...)` would).

    python3 make_oom_snapshot.py TRACE.csv OUT.pickle CAPACITY_MIB

Prints the event at which it failed. Used by test_doctor.py.
"""
import ctypes
import os
import sys


def main(trace_csv, out, capacity_mib):
    os.environ["GARDENALLOC_CONF"] = "backend:sim,sim_capacity_mb:%d" % int(capacity_mib)
    import support  # noqa: F401
    import gardenalloc
    lib = gardenalloc.library()
    gardenalloc.record_memory_history(True, max_entries=1000000)
    live = {}
    with open(trace_csv) as f:
        rows = [line.rstrip("\n").split(",") for line in f][1:]
    for i, (_, _, action, ptr, size, stream) in enumerate(rows):
        s = ctypes.c_void_p(int(stream))
        if action == "allocate":
            p = lib.ga_torch_alloc_nothrow(int(size), 0, s)
            if not p and int(size):
                gardenalloc.dump_snapshot(out)
                print(i + 1)
                return 0
            live[ptr] = (p, int(size), s)
        else:
            p, n, s = live.pop(ptr)
            lib.ga_torch_free(p, n, 0, s)
    print("no out-of-memory at %d MiB" % int(capacity_mib), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main(*sys.argv[1:4]))
