"""A recording stand-in for the parts of torch that gardenalloc.torch uses,
importable as `torch` by a program (put standin/ on PYTHONPATH). It records
what is done to it in `torch.calls`. GA_STANDIN_CUDA=none makes it a torch
without CUDA; GA_STANDIN_INITIALIZED=1 one whose CUDA is already initialised.
"""
import os
import sys
import types

__version__ = "2.6.0+standin"
version = types.SimpleNamespace(cuda=None if os.environ.get("GA_STANDIN_CUDA") == "none" else "12.4")
calls = []

cuda = types.ModuleType("torch.cuda")
cuda.memory = types.ModuleType("torch.cuda.memory")
cuda.is_initialized = lambda: os.environ.get("GA_STANDIN_INITIALIZED") == "1"


class _Inner:
    def __init__(self):
        self.hooks = {}

    def __getattr__(self, name):
        if name.startswith("set_"):
            return lambda address: self.hooks.__setitem__(name, address)
        raise AttributeError(name)


class CUDAPluggableAllocator:
    def __init__(self, path, alloc_fn, free_fn):
        self.args = (path, alloc_fn, free_fn)
        self.inner = _Inner()
        calls.append(("pluggable", self.args))

    def allocator(self):
        return self.inner


def _change(allocator):
    calls.append(("change", allocator))


cuda.memory.CUDAPluggableAllocator = CUDAPluggableAllocator
cuda.memory.change_current_allocator = _change
cuda.MemPool = lambda inner: ("pool", inner)
sys.modules["torch.cuda"] = cuda
sys.modules["torch.cuda.memory"] = cuda.memory
