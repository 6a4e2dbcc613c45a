"""Converts a PyTorch memory snapshot into the RMM CSV that ga-bench replays.

    python -m gardenalloc.trace SNAPSHOT.pickle OUT.csv [--device N]

alloc events become `allocate` rows and free_requested events `free` rows,
keeping sizes (the requested bytes) and streams; other events are dropped.
Allocations already live when recording started come first, as allocate rows
at the first event's time: those freed in the window without being allocated
in it, and the active blocks of the snapshot that the window never allocated.
Pointers become ids, one per allocation.
"""
import argparse
import datetime
import pickle
import sys


def _time(us):
    t = datetime.datetime.fromtimestamp(us / 1e6, datetime.timezone.utc)
    return t.strftime("%H:%M:%S.%f")


def convert(snap, device=0):
    """Returns the CSV rows (lists of strings, header first)."""
    traces = snap.get("device_traces", [])
    events = traces[device] if device < len(traces) else []
    events = [e for e in events if e.get("action") in ("alloc", "free_requested")]
    t0 = _time(events[0]["time_us"]) if events and "time_us" in events[0] else "00:00:00.000000"
    ids = {}
    next_id = [0]

    def new_id(addr):
        next_id[0] += 1
        ids[addr] = next_id[0]
        return next_id[0]

    pre = []
    seen = set()
    for e in events:  # freed in the window without an alloc in it
        if e["action"] == "alloc":
            seen.add(e["addr"])
        elif e["addr"] not in seen:
            pre.append((e["addr"], e["size"], e.get("stream", 0)))
            seen.add(e["addr"])
    allocated_in_window = {e["addr"] for e in events if e["action"] == "alloc"}
    freed_in_window = {e["addr"] for e in events if e["action"] == "free_requested"}
    for seg in snap.get("segments", []):  # live at the end, never allocated in the window
        for b in seg.get("blocks", []):
            if b.get("state") in ("active_allocated", "active_pending_free") and b["address"] not in allocated_in_window \
                    and b["address"] not in freed_in_window:
                pre.append((b["address"], b.get("requested_size", b["size"]), seg.get("stream", 0)))
    rows = [["Thread", "Time", "Action", "Pointer", "Size", "Stream"]]
    for addr, size, stream in pre:
        rows.append(["1", t0, "allocate", hex(new_id(addr)), str(size), str(stream)])
    for e in events:
        tm = _time(e["time_us"]) if "time_us" in e else t0
        if e["action"] == "alloc":
            rows.append(["1", tm, "allocate", hex(new_id(e["addr"])), str(e["size"]), str(e.get("stream", 0))])
        else:
            ident = ids.pop(e["addr"], None)
            if ident is not None:
                rows.append(["1", tm, "free", hex(ident), str(e["size"]), str(e.get("stream", 0))])
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m gardenalloc.trace", description=__doc__.splitlines()[0])
    p.add_argument("snapshot")
    p.add_argument("out")
    p.add_argument("--device", type=int, default=0)
    args = p.parse_args(argv)
    try:
        with open(args.snapshot, "rb") as f:
            snap = pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError) as e:
        print("gardenalloc.trace: cannot read %s: %s" % (args.snapshot, e), file=sys.stderr)
        return 2
    if not isinstance(snap, dict) or "device_traces" not in snap:
        print("gardenalloc.trace: %s is not a memory snapshot (no device_traces); record one with "
              "torch.cuda.memory._record_memory_history()" % args.snapshot, file=sys.stderr)
        return 2
    rows = convert(snap, args.device)
    with open(args.out, "w") as f:
        for r in rows:
            f.write(",".join(r) + "\n")
    print("%s: %d events" % (args.out, len(rows) - 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
