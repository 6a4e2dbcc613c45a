"""Using gardenalloc as PyTorch's CUDA allocator.

    import gardenalloc.torch
    gardenalloc.torch.install("expandable_segments:True")   # before any CUDA use

or, keeping PyTorch's allocator on top and taking segments from gardenalloc:

    pool = gardenalloc.torch.mempool()
    with torch.cuda.use_mem_pool(pool): ...
"""
import ctypes
import os

from . import library

_installed = None

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


def _pluggable(conf):
    torch = _torch()
    if getattr(torch.version, "cuda", None) is None:
        raise RuntimeError("gardenalloc.torch needs a PyTorch built with CUDA (torch %s has no CUDA)"
                           % getattr(torch, "__version__", "?"))
    if not hasattr(torch.cuda.memory, "CUDAPluggableAllocator"):
        raise RuntimeError("gardenalloc.torch needs torch.cuda.memory.CUDAPluggableAllocator (PyTorch 2.0 or "
                           "later; this is %s)" % getattr(torch, "__version__", "?"))
    if conf is not None:
        os.environ["GARDENALLOC_CONF"] = conf
    lib = library()
    alloc = torch.cuda.memory.CUDAPluggableAllocator(lib.path, ALLOC_FN, FREE_FN)
    inner = alloc.allocator()
    for setter, fn in HOOKS:
        if hasattr(inner, setter) and hasattr(lib, fn):
            getattr(inner, setter)(_address(fn))
    return alloc


def install(conf=None):
    """Makes gardenalloc PyTorch's CUDA allocator (replace mode), with every
    hook installed. Must run before anything initialises CUDA."""
    global _installed
    if _installed is not None:
        return _installed
    torch = _torch()
    if torch.cuda.is_initialized():
        raise RuntimeError(
            "gardenalloc.torch.install() must run before CUDA is initialised (creating a CUDA tensor, "
            "torch.cuda.current_device(), set_per_process_memory_fraction ... initialise it); PyTorch "
            "cannot swap an initialised allocator")
    alloc = _pluggable(conf)
    torch.cuda.memory.change_current_allocator(alloc)
    _installed = alloc
    return alloc


def mempool(conf=None):
    """A torch.cuda.MemPool whose segments come from gardenalloc (backend mode)."""
    torch = _torch()
    if not hasattr(torch.cuda, "MemPool"):
        raise RuntimeError("gardenalloc.torch.mempool() needs torch.cuda.MemPool, which PyTorch %s does not have"
                           % getattr(torch, "__version__", "?"))
    return torch.cuda.MemPool(_pluggable(conf).allocator())
