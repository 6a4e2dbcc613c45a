"""torch.cuda's memory functions, answered by gardenalloc when it is PyTorch's
CUDA allocator (gardenalloc.torch.install(), `gardenalloc run`).

PyTorch's pluggable-allocator interface has no hook for statistics or
snapshots: with a pluggable allocator torch.cuda.memory_stats() is empty (it
answers only once CUDA is initialised, and then the pluggable allocator
refuses), memory_summary() raises KeyError, and the reset, snapshot and
history functions raise "CUDAPluggableAllocator does not yet support ...".
install() therefore replaces these functions in torch.cuda and
torch.cuda.memory with ones that answer from gardenalloc's allocator for the
device, with PyTorch's names, types and meanings; memory_summary() is
PyTorch's own formatter over those statistics. Nothing here needs a GPU or
initialises CUDA: on a machine without one they answer for gardenalloc's
simulated device.
"""
import collections
import ctypes
import sys

from . import _allocator, last_error, library, snapshot

# The statistics torch.cuda.memory_stats() has (PyTorch's key families).
FAMILIES = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
            "active_bytes", "inactive_split_bytes", "requested_bytes")
POOLS = ("all", "large_pool", "small_pool")
METRICS = ("current", "peak", "allocated", "freed")
OVERSIZE = ("oversize_allocations", "oversize_segments")
SCALARS = ("num_alloc_retries", "num_ooms", "max_split_size", "num_sync_all_streams", "num_device_alloc",
           "num_device_free")

# The history kept when PyTorch's caller asks for more (its default is
# sys.maxsize): gardenalloc's ring is allocated when recording starts.
MAX_HISTORY = 1000000

_record = {"enabled": None}  # the last _record_memory_history() mode: None, "state" or "all"


# ---- Devices ----

def _current(torch):
    cuda = torch.cuda
    if cuda.is_initialized() and hasattr(cuda, "current_device"):
        return cuda.current_device()
    return 0  # before CUDA starts, PyTorch's current device is 0


def index(device):
    """The device ordinal `device` names, as PyTorch reads it (None, an int, a
    "cuda:N" string, a torch.device), without initialising CUDA."""
    torch = sys.modules["torch"]
    if device is None:
        return _current(torch)
    if isinstance(device, bool):
        raise ValueError("Expected a cuda device, but got: %r" % (device,))
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        kind, _, num = device.partition(":")
        if kind != "cuda" or (num and not num.isdigit()):
            raise ValueError("Expected a cuda device, but got: %s" % device)
        return int(num) if num else _current(torch)
    kind, num = getattr(device, "type", None), getattr(device, "index", None)
    if kind != "cuda":
        raise ValueError("Expected a cuda device, but got: %s" % (device,))
    return _current(torch) if num is None else num


def _allocators():
    """(device, allocator) of every device gardenalloc has an allocator for."""
    lib = library()
    return [(d, a) for d, a in ((d, lib.ga_torch_allocator_try(d)) for d in range(64)) if a]


def _check(rc):
    if rc != 0:
        raise RuntimeError(last_error())


# ---- Statistics ----

def memory_stats_as_nested_dict(device=None):
    """torch.cuda.memory_stats_as_nested_dict() from gardenalloc: PyTorch's
    122 statistics, nested as PyTorch nests them, all ints."""
    from . import memory_stats as flat_stats
    flat = flat_stats(index(device))
    out = {}
    for fam in FAMILIES:
        out[fam] = {pool: {m: int(flat["%s.%s.%s" % (fam, pool, m)]) for m in METRICS} for pool in POOLS}
    for fam in OVERSIZE:
        out[fam] = {m: int(flat["%s.%s" % (fam, m)]) for m in METRICS}
    for key in SCALARS:
        out[key] = int(flat[key])
    return out


def memory_stats(device=None):
    """torch.cuda.memory_stats() from gardenalloc: the nested statistics
    flattened with '.' into an OrderedDict sorted by key, as PyTorch's."""
    items = []

    def walk(prefix, obj):
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(prefix + "." + k if prefix else k, v)
        else:
            items.append((prefix, obj))

    walk("", memory_stats_as_nested_dict(device))
    return collections.OrderedDict(sorted(items))


def memory_allocated(device=None):
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device=None):
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device=None):
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device=None):
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device=None):
    """Every peak becomes the current value, for the device."""
    _check(library().ga_reset_peak_stats(_allocator(index(device))))


def reset_accumulated_memory_stats(device=None):
    """The allocated/freed totals and the counters (retries, OOMs, syncs,
    device allocations and frees) go to 0, for the device."""
    _check(library().ga_reset_accumulated_stats(_allocator(index(device))))


def empty_cache():
    """Every cached segment and page goes back to the device, on every device."""
    library().ga_torch_reset()


def mem_get_info(device=None):
    """(free, total) bytes of the device, as the driver (or gardenalloc's
    simulated device) reports them."""
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    _check(library().ga_mem_get_info(_allocator(index(device)), ctypes.byref(free), ctypes.byref(total)))
    return free.value, total.value


def set_per_process_memory_fraction(fraction, device=None):
    """At most fraction x the device's memory is reserved; beyond it an
    allocation is out of memory (after the cache is freed)."""
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError("Invalid fraction value: %s. Allowed range: 0~1" % fraction)
    _check(library().ga_set_memory_fraction(_allocator(index(device)), fraction))


def get_per_process_memory_fraction(device=None):
    return library().ga_get_memory_fraction(_allocator(index(device)))


# ---- History and snapshots ----

_LEGACY = ("record_context", "trace_alloc_max_entries", "trace_alloc_record_context", "device",
           "record_context_cpp", "clear_history")
_CURRENT = ("context", "stacks", "max_entries", "device", "clear_history")


def _record_memory_history(enabled="all", *args, **kwargs):
    """torch.cuda.memory._record_memory_history for every device gardenalloc
    serves (now and later): enabled None (off), "state" (the frames of live
    allocations, no trace) or "all"; context None records no frames; stacks
    "python" or "all" (with C frames); max_entries bounds the trace (up to
    MAX_HISTORY). The older form (a bool first) is read too. Turning it on
    starts an empty history."""
    if isinstance(enabled, bool):
        kw = dict(zip(_LEGACY, args), **kwargs)
        mode = "all" if enabled else None
        frames = bool(kw.get("record_context", True))
        stacks = "all" if kw.get("record_context_cpp") else "python"
        max_entries = kw.get("trace_alloc_max_entries", 1)
    else:
        kw = dict(zip(_CURRENT, args), **kwargs)
        if enabled not in (None, "state", "all"):
            raise ValueError("_record_memory_history: enabled must be None, 'state' or 'all', not %r" % (enabled,))
        mode = enabled
        context = kw.get("context", "all")
        if context not in (None, "state", "alloc", "all"):
            raise ValueError("_record_memory_history: context must be None, 'state', 'alloc' or 'all', not %r"
                             % (context,))
        frames = context is not None
        stacks = kw.get("stacks", "all")
        if stacks not in ("python", "all"):
            raise ValueError("_record_memory_history: stacks must be 'python' or 'all', not %r" % (stacks,))
        max_entries = kw.get("max_entries", sys.maxsize)
    flags = (3 if stacks == "all" else 2) if frames else 0  # GA_STACKS_C | GA_STACKS_PYTHON
    n = 1 if mode == "state" else max(1, min(int(max_entries), MAX_HISTORY))
    _check(library().ga_torch_record_history(1 if mode else 0, n if mode else 0, flags if mode else 0))
    _record["enabled"] = mode


def _snapshot(device=None, augment_with_fx_traces=False):
    """torch.cuda.memory._snapshot(): the segments of every device gardenalloc
    serves, device_traces indexed by device (empty when the history was
    recorded with enabled="state"), allocator_settings and
    external_annotations. `device` is ignored, as PyTorch ignores it."""
    out = {"segments": [], "device_traces": [], "allocator_settings": {}, "external_annotations": []}
    for d, _ in _allocators():
        s = snapshot(d)
        out["segments"] += s["segments"]
        while len(out["device_traces"]) <= d:
            out["device_traces"].append([])
        if _record["enabled"] != "state":
            out["device_traces"][d] = s["device_traces"][d] if d < len(s["device_traces"]) else []
        if not out["allocator_settings"]:
            out["allocator_settings"] = s["allocator_settings"]
        out["external_annotations"] += s.get("external_annotations", [])
    return out


def memory_snapshot(mempool_id=None, include_traces=True):
    """torch.cuda.memory_snapshot(): the segments of every device, or of the
    private pool `mempool_id` (a CUDA graph's)."""
    segments = _snapshot()["segments"]
    if mempool_id is not None:
        want = tuple(mempool_id)
        segments = [s for s in segments if tuple(s.get("segment_pool_id", ())) == want]
    return segments


# ---- Installing them ----

# What install() replaces: the functions of torch.cuda.memory above, and the
# public ones in torch.cuda too (which re-exports them).
REPLACED = ("memory_stats", "memory_stats_as_nested_dict", "memory_allocated", "max_memory_allocated",
            "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
            "empty_cache", "mem_get_info", "set_per_process_memory_fraction", "get_per_process_memory_fraction",
            "memory_snapshot", "_record_memory_history", "_snapshot")


def _summary(original):
    def memory_summary(device=None, abbreviated=False):
        """torch.cuda.memory_summary(): PyTorch's own formatter over gardenalloc's
        statistics for the device."""
        return original(device=index(device), abbreviated=abbreviated)
    memory_summary.__wrapped__ = original
    return memory_summary


def patch(torch):
    """Makes torch.cuda's memory functions answer from gardenalloc. Returns
    the names replaced."""
    here = sys.modules[__name__]
    memory, cuda = torch.cuda.memory, torch.cuda
    done = []
    for name in REPLACED:
        fn = getattr(here, name)
        original = getattr(memory, name, None)
        if original is not None:
            fn.__wrapped__ = original
        setattr(memory, name, fn)
        if not name.startswith("_"):
            setattr(cuda, name, fn)
        done.append(name)
    original = getattr(memory, "memory_summary", None)
    if original is not None:  # PyTorch's formatter, over the statistics above
        fn = _summary(original)
        memory.memory_summary = cuda.memory_summary = fn
        done.append("memory_summary")
    return done
