"""Converts a PyTorch memory snapshot into the RMM CSV that ga-bench replays.

    python -m gardenalloc.trace SNAPSHOT.pickle OUT.csv [--device N]

The snapshot is untrusted input: it is read with an unpickler that refuses
every global (a snapshot holds only dicts, lists, tuples, strings, numbers,
bools and None), so nothing in it can run. JSON snapshots (gardenalloc's
ga_snapshot_json, or a json.dump of torch.cuda.memory._snapshot()) work too.

alloc events become `allocate` rows and free_requested events `free` rows,
keeping sizes (the requested bytes) and streams; an oom event becomes an
allocate of the request that failed, freed at once (a probe: could another
allocator have served it at that moment?); other events are dropped.
Allocations already live when recording started come first, as allocate rows
at the first event's time: those freed in the window without being allocated
in it, and the active blocks of the device's segments that the window never
allocated. Pointers become ids, one per allocation.

Only the chosen device's trace and segments are used. Without --device, the
one device that has a trace is taken (several: choose one).
"""
import argparse
import datetime
import errno
import io
import json
import os
import pickle
import stat
import sys

HEADER = ["Thread", "Time", "Action", "Pointer", "Size", "Stream"]


class SnapshotError(Exception):
    """A snapshot that cannot be converted; the message says why."""


# ---- Reading ----


class _Refusing(pickle.Unpickler):
    """Builds only the plain types; any global (a class, a function) is refused."""

    def find_class(self, module, name):
        raise SnapshotError(
            "refuses to load the global %s.%s: a memory snapshot holds only dicts, lists, strings and "
            "numbers, so this pickle is not one (or was made to run code when loaded)" % (module, name))

    def persistent_load(self, pid):
        raise SnapshotError("refuses a persistent id: a memory snapshot has none")


def loads(data, name="snapshot"):
    """The snapshot in `data` (pickle or JSON bytes), or SnapshotError."""
    head = data[:64].lstrip()
    if head.startswith(b"Thread,"):
        raise SnapshotError("%s is an RMM CSV trace already, not a snapshot: replay it with "
                            "`ga-bench replay %s` (or give it to `gardenalloc doctor`)" % (name, name))
    if head[:1] in (b"{", b"["):
        try:
            return json.loads(data.decode("utf-8"))
        except RecursionError:
            raise SnapshotError("%s nests deeper than any snapshot does" % name)
        except (ValueError, UnicodeDecodeError) as e:
            raise SnapshotError("%s looks like JSON but does not parse: %s" % (name, e))
    if not data:
        raise SnapshotError("%s is empty" % name)
    try:
        return _Refusing(io.BytesIO(data)).load()
    except SnapshotError as e:
        raise SnapshotError("%s: %s" % (name, e))
    except RecursionError:
        raise SnapshotError("%s nests deeper than any snapshot does" % name)
    except Exception as e:  # a truncated or corrupt pickle raises many kinds
        if data[:1] != b"\x80":
            raise SnapshotError("%s is neither a pickle nor JSON (it starts with %r): save the snapshot with "
                                "torch.cuda.memory._dump_snapshot(path)" % (name, data[:16]))
        raise SnapshotError("%s is not a readable pickle (%s: %s)" % (name, type(e).__name__, e))


def load(path):
    """Reads a snapshot file (pickle or JSON). SnapshotError on any problem."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise SnapshotError("cannot read %s: %s" % (path, e.strerror or e))
    return loads(data, path)


# ---- Checking the shape ----


# The largest size, address, stream or time a snapshot holds (PyTorch writes
# them from 64-bit integers).
MAX_NUMBER = (1 << 64) - 1


def _kind(v):
    """What `v` is, for a message, in a few words whatever it holds: a value
    is shown cut short, a container by its length, never written out (a
    deeply nested or huge one could not be)."""
    if isinstance(v, (dict, list)):
        return type(v).__name__
    if isinstance(v, (tuple, set, frozenset)):
        return "a %s of %d items" % (type(v).__name__, len(v))
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 64:
        return "a %snumber of about %d digits (int)" % ("negative " if v < 0 else "", v.bit_length() * 0.30103 + 1)
    if isinstance(v, (str, bytes, bytearray)) and len(v) > 40:
        return "%r... (%s of %d)" % (v[:40], type(v).__name__, len(v))
    if isinstance(v, (str, bytes, bytearray, int, float, bool, complex)) or v is None:
        return "%r (%s)" % (v, type(v).__name__)
    return type(v).__name__


def _int(v, where, minimum=0):
    if isinstance(v, bool) or not isinstance(v, int):
        raise SnapshotError("%s: expected a whole number, got %s" % (where, _kind(v)))
    if v < minimum:
        raise SnapshotError("%s: %s is negative" % (where, _kind(v).replace(" (int)", "")))
    if v > MAX_NUMBER:
        raise SnapshotError("%s: %s is larger than any size, address or time (2^64)"
                            % (where, _kind(v).replace(" (int)", "")))
    return v


def _get(d, key, where, default=KeyError):
    if not isinstance(d, dict):
        raise SnapshotError("%s: expected a dict, got %s" % (where, _kind(d)))
    if key not in d:
        if default is KeyError:
            raise SnapshotError("%s: no '%s' key" % (where, key))
        return default
    return d[key]


def _list(v, where):
    if not isinstance(v, (list, tuple)):
        raise SnapshotError("%s: expected a list, got %s" % (where, _kind(v)))
    return v


def traces_of(snap):
    """device_traces, checked to be a list of lists."""
    if not isinstance(snap, dict):
        raise SnapshotError("expected a dict with 'segments' and 'device_traces' (a memory snapshot), got %s"
                            % _kind(snap))
    if "device_traces" not in snap and "segments" not in snap:
        raise SnapshotError("not a memory snapshot (no 'device_traces' and no 'segments'); record one with "
                            "torch.cuda.memory._record_memory_history() and _dump_snapshot()")
    traces = _list(snap.get("device_traces", []), "device_traces")
    for d, t in enumerate(traces):
        _list(t, "device_traces[%d]" % d)
    return traces


def segments_of(snap, device):
    """The segments of `device` (a segment without 'device' counts as device 0)."""
    out = []
    for i, seg in enumerate(_list(snap.get("segments", []), "segments")):
        where = "segments[%d]" % i
        if _int(_get(seg, "device", where, 0), where + "['device']") == device:
            out.append((where, seg))
    return out


def choose_device(snap, device=None):
    """The device to convert: `device` if it has a trace, else the only one
    that has one. SnapshotError naming what is there otherwise."""
    traces = traces_of(snap)
    with_trace = [d for d, t in enumerate(traces) if len(t)]
    if device is not None:
        if isinstance(device, bool) or not isinstance(device, int) or device < 0:
            raise SnapshotError("--device %s: a device is a number from 0" % (device,))
        if device in with_trace:
            return device
    elif len(with_trace) == 1:
        return with_trace[0]
    elif len(with_trace) > 1:
        raise SnapshotError("devices %s have a trace: choose one with --device N"
                            % ", ".join(str(d) for d in with_trace))
    d = 0 if device is None else device
    nsegs = len(segments_of(snap, d))
    if not with_trace and nsegs:
        raise SnapshotError(
            "device %d has %d segments but the snapshot has no trace history: it shows the memory at one moment "
            "(a packing problem), not a sequence of allocations to replay. Record the history with "
            "torch.cuda.memory._record_memory_history(max_entries=1000000) before the work, then "
            "_dump_snapshot()" % (d, nsegs))
    if not with_trace:
        raise SnapshotError("the snapshot has no trace history on any device (and no segments)")
    if nsegs:
        what = "device %d has %d segments but no trace" % (d, nsegs)
    elif d >= len(traces):
        what = "there is no device %d in this snapshot" % d
    else:
        what = "device %d has no trace" % d
    raise SnapshotError("%s; devices with a trace: %s" % (what, ", ".join(str(x) for x in with_trace)))


# ---- Converting ----


def _time(us):
    try:
        t = datetime.datetime.fromtimestamp(us / 1e6, datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return "00:00:00.000000"
    return t.strftime("%H:%M:%S.%f")


def _events(snap, device):
    """(action, addr, size, stream, time_us) of the device's trace, checked."""
    out = []
    for i, e in enumerate(traces_of(snap)[device]):
        where = "device_traces[%d][%d]" % (device, i)
        action = _get(e, "action", where)
        if not isinstance(action, str):
            raise SnapshotError("%s['action']: expected a string, got %s" % (where, _kind(action)))
        if action not in ("alloc", "free_requested", "oom"):
            continue
        size = _int(_get(e, "size", where), where + "['size']")
        stream = _int(_get(e, "stream", where, 0), where + "['stream']")
        tm = e.get("time_us")
        tm = _int(tm, where + "['time_us']") if tm is not None else None
        addr = None if action == "oom" else _int(_get(e, "addr", where), where + "['addr']")
        out.append((action, addr, size, stream, tm))
    return out


def _live_blocks(snap, device):
    """(address, requested bytes, stream) of the active blocks of the device.
    Each segment has blocks of its own: a blocks list that several segments
    share (a pickle can repeat one list through its memo at the cost of a few
    bytes, so a small file would make N segments x M blocks of work) is
    refused, which keeps the work linear in the file's size."""
    out = []
    owner = {}
    for where, seg in segments_of(snap, device):
        addr = _int(_get(seg, "address", where), where + "['address']")
        stream = _int(_get(seg, "stream", where, 0), where + "['stream']")
        blocks = _list(_get(seg, "blocks", where, []), where + "['blocks']")
        if blocks:
            first = owner.setdefault(id(blocks), (where, blocks))[0]
            if first != where:
                raise SnapshotError("%s and %s share one list of blocks: each segment of a snapshot has its own "
                                    "(this pickle repeats one list through its memo)" % (first, where))
        for j, b in enumerate(blocks):
            bw = "%s['blocks'][%d]" % (where, j)
            size = _int(_get(b, "size", bw), bw + "['size']")
            state = _get(b, "state", bw)
            baddr = _int(_get(b, "address", bw, addr), bw + "['address']")  # older snapshots: implied
            if state in ("active_allocated", "active_pending_free"):
                req = _get(b, "requested_size", bw, size)
                out.append((baddr, _int(req, bw + "['requested_size']"), stream))
            addr = baddr + size
    return out


def convert(snap, device=0):
    """Returns the CSV rows (lists of strings, header first). SnapshotError
    for a snapshot of the wrong shape."""
    device = choose_device(snap, device)
    events = _events(snap, device)
    times = [e[4] for e in events if e[4] is not None]
    t0 = _time(times[0]) if times else "00:00:00.000000"
    ids = {}
    next_id = [0]

    def new_id(addr):
        next_id[0] += 1
        if addr is not None:
            ids[addr] = next_id[0]
        return next_id[0]

    pre = []
    seen = set()
    for action, addr, size, stream, _ in events:  # freed in the window without an alloc in it
        if action == "alloc":
            seen.add(addr)
        elif action == "free_requested" and addr not in seen:
            pre.append((addr, size, stream))
            seen.add(addr)
    in_window = {e[1] for e in events if e[0] != "oom"}
    for addr, size, stream in _live_blocks(snap, device):  # live at the end, never seen in the window
        if addr not in in_window:
            pre.append((addr, size, stream))
    rows = [list(HEADER)]
    for addr, size, stream in pre:
        rows.append(["1", t0, "allocate", hex(new_id(addr)), str(size), str(stream)])
    for action, addr, size, stream, tm in events:
        tm = _time(tm) if tm is not None else t0
        if action == "alloc":
            rows.append(["1", tm, "allocate", hex(new_id(addr)), str(size), str(stream)])
        elif action == "oom":
            probe = hex(new_id(None))
            rows.append(["1", tm, "allocate", probe, str(size), str(stream)])
            rows.append(["1", tm, "free", probe, str(size), str(stream)])
        else:
            ident = ids.pop(addr, None)
            if ident is not None:
                rows.append(["1", tm, "free", hex(ident), str(size), str(stream)])
    return rows


def _number_or_none(v):
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_NUMBER else None


def _plain(v):
    """A setting's value when it is plain (a string, number, bool or None, or
    a short list of those), else None: what a report may print or dump."""
    if isinstance(v, (str, float, bool)) or v is None:
        return v[:1000] if isinstance(v, str) else v
    if isinstance(v, int):
        return _number_or_none(v)
    if isinstance(v, (list, tuple)) and len(v) <= 64 and all(
            isinstance(x, (str, float, bool)) or _number_or_none(x) is not None for x in v):
        return [x[:1000] if isinstance(x, str) else x for x in v]
    return None


def summary(snap, device):
    """A few facts of the device's trace: events, OOMs, devices with traces,
    and the snapshot's allocator settings (their plain values only). Numbers
    that are not sizes (negative, past 2^64, not integers) read as None."""
    traces = traces_of(snap)
    ooms = [e for e in traces[device] if isinstance(e, dict) and e.get("action") == "oom"]
    raw = snap.get("allocator_settings")
    settings = {}
    if isinstance(raw, dict):
        for k, v in list(raw.items())[:256]:
            if isinstance(k, str) and len(k) <= 200:
                settings[k] = _plain(v)
    return {
        "device": device,
        "devices_with_trace": [d for d, t in enumerate(traces) if len(t)],
        "ooms": len(ooms),
        "oom_device_free": [_number_or_none(e.get("device_free")) for e in ooms],
        "oom_sizes": [_number_or_none(e.get("size")) for e in ooms],
        "settings": settings,
    }


def _target(path):
    """The file that writing `path` replaces, and the mode to give it (None:
    a new file, created with the umask's). Only a new file or an existing
    regular file is written, through a symbolic link when `path` is one;
    anything else (a device such as /dev/null, a folder, a pipe, a link to
    nothing) is an OSError, since the file renamed over it would destroy it."""
    real = os.path.realpath(path)
    link = "" if real == os.path.abspath(path) else "a link to %s, " % real
    try:
        st = os.stat(real)
    except FileNotFoundError:
        if os.path.islink(path):
            raise OSError(errno.ENOENT, "it is %swhich does not exist" % link)
        return real, None
    if not stat.S_ISREG(st.st_mode):
        m = st.st_mode
        what = ("a folder" if stat.S_ISDIR(m) else "a device" if stat.S_ISCHR(m) or stat.S_ISBLK(m) else
                "a pipe" if stat.S_ISFIFO(m) else "a socket" if stat.S_ISSOCK(m) else "not a file")
        raise OSError(errno.EEXIST, "it is %s%s; only a new file or a regular file is written" % (link, what))
    return real, stat.S_IMODE(st.st_mode)


def write_file(path, write):
    """Writes a file whole or not at all: write(f) fills a temporary file
    beside the target, which is then renamed over it, so a failure never
    leaves half a file. The target must be new or a regular file (_target);
    an existing one keeps its mode, a new one gets the umask's. OSError says
    what went wrong."""
    real, mode = _target(path)
    d, base = os.path.split(real)
    for _ in range(100):
        tmp = os.path.join(d, ".%s.%s.tmp" % (base, os.urandom(4).hex()))
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:
            continue
    else:
        raise OSError(errno.EEXIST, "no free temporary name in %s" % d)
    try:
        with os.fdopen(fd, "w") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            write(f)
        _target(path)  # still new or a regular file when it is replaced
        os.replace(tmp, real)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_csv(rows, path):
    """Writes the rows to `path` whole or not at all (write_file)."""
    def put(f):
        for r in rows:
            f.write(",".join(r) + "\n")
    write_file(path, put)


def main(argv=None, prog="python -m gardenalloc.trace"):
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                epilog="See the module's documentation for the conversion rules.")
    p.add_argument("snapshot", help="a pickle from torch.cuda.memory._dump_snapshot (or its JSON)")
    p.add_argument("out", help="the RMM CSV to write")
    p.add_argument("--device", type=int, default=None, help="the device whose trace to convert")
    args = p.parse_args(argv)
    try:
        snap = load(args.snapshot)
        device = choose_device(snap, args.device)
        rows = convert(snap, device)
        write_csv(rows, args.out)
    except SnapshotError as e:
        print("gardenalloc.trace: %s" % e, file=sys.stderr)
        return 2
    except OSError as e:
        print("gardenalloc.trace: cannot write %s: %s" % (args.out, e.strerror or e), file=sys.stderr)
        return 2
    n_alloc = sum(1 for r in rows[1:] if r[2] == "allocate")
    facts = summary(snap, device)
    print("%s: %d events from device %d (%d allocations, %d frees%s)" % (
        args.out, len(rows) - 1, device, n_alloc, len(rows) - 1 - n_alloc,
        ", %d failed requests replayed as probes" % facts["ooms"] if facts["ooms"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
