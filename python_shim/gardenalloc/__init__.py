"""gardenalloc: a caching GPU allocator, from Python.

Everything here works without torch: statistics, snapshots and the allocation
history of the allocators that serve PyTorch through gardenalloc's pluggable
entry points (one per device, made on first use from GARDENALLOC_CONF).
`gardenalloc.torch` swaps PyTorch's allocator.
"""
import collections
import ctypes
import json
import os
import pickle
import sys
import textwrap

from . import _lib

__all__ = [
    "library", "memory_stats", "memory_summary", "empty_cache", "reset_peak_memory_stats",
    "reset_accumulated_memory_stats", "record_memory_history", "snapshot", "dump_snapshot", "check",
    "last_error", "configuration", "validate", "pytorch_allocator",
]

_library = None


def _find_version():
    """The version of CMakeLists.txt's project(): written into the wheel as
    _version.py when it is built, read from the source tree otherwise."""
    try:
        from ._version import __version__ as v
        return v
    except ImportError:
        pass
    import os
    import re
    top = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "CMakeLists.txt")
    try:
        with open(top) as f:
            m = re.search(r"project\(gardenalloc VERSION ([0-9][0-9.]*)", f.read())
    except OSError:
        m = None
    return m.group(1) if m else "unknown"


__version__ = _find_version()


def library():
    """The loaded libgardenalloc (ctypes.CDLL); its .path says which file."""
    global _library
    if _library is None:
        _library = _lib.load()
    return _library


def last_error():
    """The text of this thread's last gardenalloc failure."""
    return library().ga_last_error().decode("utf-8", "backslashreplace")


def configuration():
    """(string, source): the configuration the allocators serving PyTorch use,
    and where it came from: "GARDENALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF" or "defaults". Read from the environment once per
    process; keys of PyTorch's variables that gardenalloc does not apply are
    named on stderr then. ValueError when PyTorch's variable holds what
    PyTorch refuses (an unrecognized key, a bad value): the message says what,
    and how to let a key of a newer PyTorch through (GARDENALLOC_IGNORE_KEYS).
    GARDENALLOC_CONF itself is returned as it is (validate() checks it)."""
    source = ctypes.c_char_p()
    conf = library().ga_torch_config(ctypes.byref(source))
    if conf is None:
        raise ValueError(last_error())
    return conf.decode("utf-8", "backslashreplace"), source.value.decode()


def not_utf8(conf):
    """Why a configuration string cannot be used when it holds bytes that are
    not UTF-8 (a shell gave them; Python keeps them as surrogates), or None."""
    if conf is None:
        return None
    try:
        conf.encode("utf-8")
        return None
    except UnicodeEncodeError:
        return ("%r holds bytes that are not UTF-8 text: a configuration is key:value text (`ga-bench keys` "
                "lists the keys)" % os.fsencode(conf))


def validate(conf):
    """Raises ValueError naming what is wrong in the configuration string
    `conf` (the GARDENALLOC_CONF grammar), with the whole message."""
    if not_utf8(conf):
        raise ValueError(not_utf8(conf))
    if library().ga_config_validate(conf.encode("utf-8")) != 0:
        raise ValueError(last_error())


def _allocator(device):
    a = library().ga_torch_allocator(int(device))
    if not a:
        raise RuntimeError(last_error())
    return a


def _json(fn, a):
    """The JSON text `fn` (ga_stats_json or ga_snapshot_json) writes for `a`.
    The size is asked first; when the text grew before the second call (another
    thread allocated in between), the buffer is made larger and the call made
    again, so the text is never cut short."""
    m = n = fn(a, None, 0)
    while m:
        buf = ctypes.create_string_buffer(n + 1)
        m = fn(a, buf, n + 1)
        if m <= n:
            break
        n = m + m // 4
    if not m:
        raise RuntimeError(last_error() or "gardenalloc wrote no JSON")
    return json.loads(buf.raw[:m].decode("utf-8", "replace"))


def memory_stats(device=0):
    """torch.cuda.memory_stats() for gardenalloc: PyTorch's keys and meanings
    (allocated_bytes.all.current, ...) plus gardenalloc's, sorted by key."""
    stats = _json(library().ga_stats_json, _allocator(device))
    return collections.OrderedDict(sorted(stats.items()))


def _fmt(n):
    for unit in ("B  ", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if unit == "B  " else ("%.2f %s" % (n, unit))
        n /= 1024.0
    return str(n)


def pytorch_allocator():
    """A sentence saying which allocator PyTorch uses in this process, and so
    what gardenalloc's statistics describe."""
    torch = sys.modules.get("torch")
    gt = sys.modules.get("gardenalloc.torch")
    if torch is None or not hasattr(torch, "cuda"):
        return ("PyTorch is not loaded in this process: these are the allocators behind gardenalloc's PyTorch "
                "entry points, used here only by code that calls them directly.")
    if gt is not None and gt.installed():
        return ("gardenalloc is PyTorch's CUDA allocator in this process: the statistics below are those of "
                "PyTorch's tensors.")
    try:
        backend = torch.cuda.get_allocator_backend()
    except Exception:  # an old or partial torch
        backend = None
    what = {"native": "its own caching allocator (native)", "cudaMallocAsync": "CUDA's cudaMallocAsync",
            "pluggable": "a pluggable allocator that gardenalloc did not install"}.get(
                backend, "its own allocator" + (" (%s)" % backend if backend else ""))
    pools = getattr(gt, "_pools", 0) if gt is not None else 0
    if pools:
        return ("PyTorch's CUDA allocator in this process is %s, not gardenalloc (torch.cuda.memory_summary() "
                "describes it); gardenalloc serves the segments of %d torch.cuda.MemPool%s, counted here as its "
                "allocations." % (what, pools, "" if pools == 1 else "s"))
    return ("PyTorch's CUDA allocator in this process is %s, not gardenalloc (torch.cuda.memory_summary() "
            "describes it): these are the allocators behind gardenalloc's entry points, which PyTorch does not "
            "call." % what)


def memory_summary(device=0):
    """A readable table of gardenalloc's statistics for the device, headed by
    which allocator PyTorch uses in this process (pytorch_allocator())."""
    s = memory_stats(device)
    rows = [
        ("Allocated memory", "allocated_bytes", True), ("Active memory", "active_bytes", True),
        ("Requested memory", "requested_bytes", True), ("GPU reserved memory", "reserved_bytes", True),
        ("Non-releasable memory", "inactive_split_bytes", True), ("Allocations", "allocation", False),
        ("Active allocs", "active", False), ("GPU reserved segments", "segment", False),
        ("Non-releasable allocs", "inactive_split", False),
    ]
    w = 78
    out = ["=" * w, " gardenalloc memory summary, device %d (%s)" % (device, library().ga_backend_name(_allocator(device)).decode())]
    out += textwrap.wrap(pytorch_allocator(), w - 1, initial_indent=" ", subsequent_indent=" ")
    out += [" configuration: %s (from %s)" % ((json.dumps(configuration()[0]),) + configuration()[1:]),
           "-" * w, "%-28s|%12s|%12s|%12s|%12s" % ("Metric", "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed"), "-" * w]
    for title, key, is_bytes in rows:
        for pool, label in (("all", title), ("large_pool", "      from large pool"), ("small_pool", "      from small pool")):
            vals = [s["%s.%s.%s" % (key, pool, m)] for m in ("current", "peak", "allocated", "freed")]
            cells = [_fmt(v) if is_bytes else str(v) for v in vals]
            out.append("%-28s|%12s|%12s|%12s|%12s" % ((label,) + tuple(cells)))
        out.append("-" * w)
    for key in ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free",
                "mapped_granules", "cached_granules", "num_granules_moved"):
        out.append("%-28s| %d" % (key, s[key]))
    out.append("=" * w)
    return "\n".join(out)


def _use(device):
    return _allocator(device)


def empty_cache():
    """torch.cuda.empty_cache(): give every cached segment/page back, on every device."""
    library().ga_torch_reset()


def reset_peak_memory_stats(device=0):
    library().ga_reset_peak_stats(_use(device))


def reset_accumulated_memory_stats(device=0):
    library().ga_reset_accumulated_stats(_use(device))


_STACKS = {"all": 3, "python": 2, None: 0}  # GA_STACKS_C | GA_STACKS_PYTHON


def record_memory_history(enabled="all", max_entries=100000, device=0, stacks="all"):
    """Start (enabled truthy) or stop (None/False) recording the allocation
    history that snapshot() reports in device_traces, as
    torch.cuda.memory._record_memory_history. stacks= as PyTorch's: "all"
    records the C frames (the caller's return addresses, named from exported
    symbols when the snapshot is written) and the Python frames of every
    entry, "python" the Python frames alone, None none. Python frames are those
    of the calling thread when it holds the GIL, as PyTorch's calls do (a
    ctypes.CDLL call releases it: use a PyDLL handle to allocate from Python)."""
    if stacks not in _STACKS:
        raise ValueError("stacks must be 'all', 'python' or None, not %r" % (stacks,))
    on = bool(enabled)
    rc = library().ga_record_history_stacks(_use(device), 1 if on else 0, int(max_entries) if on else 0,
                                            _STACKS[stacks] if on else 0)
    if rc != 0:
        raise RuntimeError(last_error())


def check(device=0):
    """Number of broken invariants in the allocator (0 when consistent)."""
    return library().ga_check(_use(device))


def snapshot(device=0):
    """A dict in the schema of torch.cuda.memory._snapshot(): segments (with
    blocks), device_traces (indexed by device), allocator_settings,
    external_annotations. Only plain dicts, lists, tuples, str, int, float and
    bool, so pickles of it open in PyTorch's memory viewer."""
    _use(device)
    snap = _json(library().ga_snapshot_json, _allocator(device))
    for seg in snap["segments"]:
        seg["segment_pool_id"] = tuple(seg["segment_pool_id"])
    return snap


def dump_snapshot(path, device=0):
    """Writes snapshot() as a pickle (protocol 4), like torch.cuda.memory._dump_snapshot."""
    with open(path, "wb") as f:
        pickle.dump(snapshot(device), f, protocol=4)
