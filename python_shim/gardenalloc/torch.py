"""Using gardenalloc as PyTorch's CUDA allocator.

    import gardenalloc.torch
    gardenalloc.torch.install("expandable_segments:True")   # before any CUDA use

or, keeping PyTorch's allocator on top and taking segments from gardenalloc:

    pool = gardenalloc.torch.mempool()
    with torch.cuda.use_mem_pool(pool): ...
"""
import ctypes
import os

from . import _torch_cuda, configuration, library, validate

_installed = None
_installed_with = None  # (configuration, source) of the installed allocator
_pools = 0  # MemPools made by mempool()

# The names CUDAPluggableAllocator is given, and each hook: the setter PyTorch's
# allocator object has, and the library function whose address it gets. The
# graph-capture pool hooks exist when the library was built with C++.
ALLOC_FN, FREE_FN = "ga_torch_alloc", "ga_torch_free"
HOOKS = (("set_init_fn", "ga_torch_init"), ("set_reset_fn", "ga_torch_reset"),
         ("set_memory_fraction_fn", "ga_torch_memory_fraction"),
         ("set_record_stream_fn", "ga_torch_record_stream"), ("set_base_alloc_fn", "ga_torch_base_alloc"),
         ("set_begin_allocate_to_pool", "ga_torch_begin_allocate_to_pool"),
         ("set_end_allocate_to_pool_fn", "ga_torch_end_allocate_to_pool"),
         ("set_release_pool", "ga_torch_release_pool"))


def _torch():
    try:
        import torch  # noqa: F401
        import torch.cuda.memory  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ImportError("gardenalloc.torch needs PyTorch (import torch failed: %s)" % e) from e
    return torch


def _address(name):
    return ctypes.cast(getattr(library(), name), ctypes.c_void_p).value


def _check_torch(torch):
    if getattr(torch.version, "cuda", None) is None:
        raise RuntimeError("gardenalloc.torch needs a PyTorch built with CUDA (torch %s has no CUDA)"
                           % getattr(torch, "__version__", "?"))
    if not hasattr(torch.cuda.memory, "CUDAPluggableAllocator"):
        raise RuntimeError("gardenalloc.torch needs torch.cuda.memory.CUDAPluggableAllocator (PyTorch 2.0 or "
                           "later; this is %s)" % getattr(torch, "__version__", "?"))


def _pluggable(conf, caller):
    """(CUDAPluggableAllocator with every hook, the settings it uses);
    `caller` (install, mempool) is named in a refusal of `conf`."""
    torch = _torch()
    _check_torch(torch)
    settings = _settings(conf, caller)
    lib = library()
    alloc = torch.cuda.memory.CUDAPluggableAllocator(lib.path, ALLOC_FN, FREE_FN)
    inner = alloc.allocator()
    for setter, fn in HOOKS:
        if hasattr(inner, setter) and hasattr(lib, fn):
            getattr(inner, setter)(_address(fn))
    return alloc, settings


def _settings(conf, caller):
    """The configuration the allocators will use once `conf` (None: the
    environment's) is set, as (string, source); ValueError for a bad one,
    naming where it was given (gardenalloc.torch.`caller`(conf), or the
    variable), RuntimeError when gardenalloc's allocators already read another
    one in this process (they read it once). Sets GARDENALLOC_CONF to `conf`."""
    if conf is not None:
        try:
            validate(conf)
        except ValueError as e:
            # The library names the variable it reads; here the string came as an argument.
            why = str(e).replace("GARDENALLOC_CONF ", "", 1)
            raise ValueError("gardenalloc.torch.%s(%r): %s" % (caller, conf, why)) from None
        os.environ["GARDENALLOC_CONF"] = conf
    active, source = configuration()  # ValueError: PyTorch's variable is refused
    if conf is not None and (source, active) != ("GARDENALLOC_CONF", conf):
        raise RuntimeError(
            "gardenalloc.torch: gardenalloc's allocators already use %s (from %s) in this process: they read "
            "their configuration once, before %r was given. Give it before anything uses gardenalloc "
            "(gardenalloc.memory_stats(), snapshot(), ...), or in GARDENALLOC_CONF"
            % (_shown(active), source, conf))
    if source == "GARDENALLOC_CONF":
        try:
            validate(active)
        except ValueError as e:
            raise ValueError("gardenalloc.torch: GARDENALLOC_CONF: %s" % e) from None
    return active, source


def _shown(conf):
    return '"%s"' % conf if conf else "the defaults"


def install(conf=None):
    """Makes gardenalloc PyTorch's CUDA allocator (replace mode), with every
    hook installed. Must run before anything initialises CUDA. torch.cuda's
    memory functions (memory_stats, memory_summary, memory_allocated, the
    resets, empty_cache, memory_snapshot, _record_memory_history,
    _dump_snapshot, mem_get_info, set_per_process_memory_fraction, ...) then
    answer from gardenalloc, with PyTorch's names, types and meanings (see
    gardenalloc/_torch_cuda.py).

    `conf` is a GARDENALLOC_CONF string (None: GARDENALLOC_CONF, else
    PyTorch's PYTORCH_CUDA_ALLOC_CONF). A bad configuration is a ValueError
    here, with the whole message. PyTorch swaps its allocator once per
    process: install() again with no settings or the same ones returns the
    allocator installed first; with other settings it is a RuntimeError that
    says what is active."""
    global _installed, _installed_with
    if _installed is not None:
        if conf is None or conf == _installed_with[0]:
            return _installed
        raise RuntimeError(
            "gardenalloc is PyTorch's allocator in this process already, with %s (from %s): install(%r) cannot "
            "change it, since PyTorch swaps its allocator once per process. Set the configuration before the "
            "first install() (or in GARDENALLOC_CONF)" % (_shown(_installed_with[0]), _installed_with[1], conf))
    torch = _torch()
    if torch.cuda.is_initialized():
        raise RuntimeError(
            "gardenalloc.torch.install() must run before CUDA is initialised (creating a CUDA tensor, "
            "torch.cuda.current_device(), set_per_process_memory_fraction ... initialise it); PyTorch "
            "cannot swap an initialised allocator")
    alloc, settings = _pluggable(conf, "install")
    torch.cuda.memory.change_current_allocator(alloc)
    _installed, _installed_with = alloc, settings
    _torch_cuda.patch(torch)
    return alloc


def installed():
    """(configuration, source) of gardenalloc as PyTorch's allocator in this
    process (install(), `gardenalloc run`), or None when it is not."""
    return _installed_with if _installed is not None else None


def mempool(conf=None):
    """A torch.cuda.MemPool whose segments come from gardenalloc (backend
    mode). PyTorch's own allocator stays in charge: it takes the pool's
    segments from gardenalloc and keeps its statistics and snapshots itself,
    so torch.cuda.memory_stats(), memory_snapshot(mempool_id=pool.id) and
    pool.snapshot() answer as for any MemPool. `conf` as for install()."""
    global _pools
    torch = _torch()
    if not hasattr(torch.cuda, "MemPool"):
        raise RuntimeError("gardenalloc.torch.mempool() needs torch.cuda.MemPool, which PyTorch %s does not have"
                           % getattr(torch, "__version__", "?"))
    pool = torch.cuda.MemPool(_pluggable(conf, "mempool")[0].allocator())
    _pools += 1
    return pool
