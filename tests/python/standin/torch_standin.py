"""A recording stand-in for the parts of torch that gardenalloc.torch touches.

make() builds one as a module object (test_shim.py swaps it into sys.modules);
standin/torch/ is the same stand-in as an importable `torch` package for
programs run in other processes (put standin/ on PYTHONPATH). It records what
is done to it in `torch.calls`.
"""
import types

# The hooks PyTorch's pluggable-allocator object is given: its setter, and the
# library function whose address it should get.
HOOKS = {"set_init_fn": "ga_torch_init", "set_reset_fn": "ga_torch_reset",
         "set_memory_fraction_fn": "ga_torch_memory_fraction",
         "set_record_stream_fn": "ga_torch_record_stream", "set_base_alloc_fn": "ga_torch_base_alloc",
         "set_begin_allocate_to_pool": "ga_torch_begin_allocate_to_pool",
         "set_end_allocate_to_pool_fn": "ga_torch_end_allocate_to_pool",
         "set_release_pool": "ga_torch_release_pool"}


class Inner:
    """The object CUDAPluggableAllocator.allocator() returns: set_* record."""

    def __init__(self):
        self.hooks = {}

    def __getattr__(self, name):
        if name.startswith("set_"):
            return lambda address: self.hooks.__setitem__(name, address)
        raise AttributeError(name)


def make(version="2.6.0", cuda="12.4", pluggable=True, mempool=True, initialized=False):
    torch = types.ModuleType("torch")
    torch.__version__ = version
    torch.version = types.SimpleNamespace(cuda=cuda)
    torch.cuda = types.ModuleType("torch.cuda")
    torch.cuda.memory = types.ModuleType("torch.cuda.memory")
    torch.cuda.is_initialized = lambda: initialized
    torch.calls = []

    class Pluggable:
        def __init__(self, path, alloc_fn, free_fn):
            self.args = (path, alloc_fn, free_fn)
            self.inner = Inner()
            torch.calls.append(("pluggable", self.args))

        def allocator(self):
            return self.inner

    if pluggable:
        torch.cuda.memory.CUDAPluggableAllocator = Pluggable
    backend = ["native"]

    def change(a):
        torch.calls.append(("change", a))
        backend[0] = "pluggable"

    torch.cuda.memory.change_current_allocator = change
    torch.cuda.get_allocator_backend = torch.cuda.memory.get_allocator_backend = lambda: backend[0]
    if mempool:
        torch.cuda.MemPool = lambda inner: ("pool", inner)
    _memory_functions(torch, initialized)
    return torch


def _memory_functions(torch, initialized):
    """torch.cuda's memory functions as PyTorch behaves with a pluggable
    allocator and no GPU: the statistics are empty until CUDA is initialised,
    and memory_summary, which reads them from the module's memory_stats (as
    PyTorch's formatter does), raises KeyError. memory_summary records the
    device it was given."""
    m = torch.cuda.memory

    def memory_stats_as_nested_dict(device=None):
        return {} if not initialized else {"allocated_bytes": {"all": {"current": 0}}}

    def memory_stats(device=None):
        flat = []

        def walk(prefix, v):
            if isinstance(v, dict):
                for k, x in v.items():
                    walk(prefix + "." + k if prefix else k, x)
            else:
                flat.append((prefix, v))

        walk("", m.memory_stats_as_nested_dict(device=device))  # looked up in the module, as PyTorch does
        return dict(sorted(flat))

    def memory_summary(device=None, abbreviated=False):
        torch.calls.append(("memory_summary", device, abbreviated))
        stats = m.memory_stats(device=device)
        return "summary of device %s: %d bytes allocated, peak %d" % (
            device, stats["allocated_bytes.all.current"], stats["allocated_bytes.all.peak"])

    def unsupported(name):
        def fn(*args, **kwargs):
            raise RuntimeError("CUDAPluggableAllocator does not yet support %s" % name)
        return fn

    for name, fn in (("memory_stats_as_nested_dict", memory_stats_as_nested_dict), ("memory_stats", memory_stats),
                     ("memory_summary", memory_summary),
                     ("reset_peak_memory_stats", unsupported("resetPeakStats")),
                     ("memory_snapshot", unsupported("snapshot"))):
        setattr(m, name, fn)
        setattr(torch.cuda, name, fn)
    m._snapshot = unsupported("snapshot")
    m._record_memory_history = unsupported("recordHistory")
