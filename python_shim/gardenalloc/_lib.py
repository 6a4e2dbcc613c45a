"""Finding and loading libgardenalloc.so, and the C signatures used here."""
import ctypes
import ctypes.util
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def candidates():
    """Where the library is looked for, in order."""
    env = os.environ.get("GARDENALLOC_LIBRARY")
    if env:
        yield env
    yield os.path.join(_HERE, "libgardenalloc.so")  # installed next to the package
    repo = os.path.dirname(os.path.dirname(_HERE))  # python_shim/gardenalloc -> repository
    yield os.path.join(repo, "build", "libgardenalloc.so")
    for prefix in ("/usr/local/lib", "/usr/lib", "/usr/lib/x86_64-linux-gnu"):
        yield os.path.join(prefix, "libgardenalloc.so")
    found = ctypes.util.find_library("gardenalloc")
    if found:
        yield found


def load():
    tried = []
    for path in candidates():
        if path in tried:
            continue
        tried.append(path)
        if os.path.sep in path and not os.path.exists(path):
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        _declare(lib)
        lib.path = path
        return lib
    raise OSError(
        "gardenalloc: libgardenalloc.so not found; build it (tests/run.sh or bench/run.sh) "
        "or set GARDENALLOC_LIBRARY to its path. Tried: " + ", ".join(tried)
    )


def _declare(lib):
    c_ssize = ctypes.c_ssize_t
    vp = ctypes.c_void_p
    sigs = {
        "ga_torch_alloc": (vp, [c_ssize, ctypes.c_int, vp]),
        "ga_torch_alloc_nothrow": (vp, [c_ssize, ctypes.c_int, vp]),
        "ga_torch_free": (None, [vp, c_ssize, ctypes.c_int, vp]),
        "ga_torch_init": (None, [ctypes.c_int]),
        "ga_torch_reset": (None, []),
        "ga_torch_memory_fraction": (None, [ctypes.c_double, ctypes.c_int]),
        "ga_torch_record_stream": (None, [vp, vp]),
        "ga_torch_base_alloc": (vp, [vp, ctypes.POINTER(ctypes.c_size_t)]),
        "ga_torch_allocator": (vp, [ctypes.c_int]),
        "ga_torch_config": (ctypes.c_char_p, [ctypes.POINTER(ctypes.c_char_p)]),
        "ga_config_validate": (ctypes.c_int, [ctypes.c_char_p]),
        "ga_stats_json": (ctypes.c_size_t, [vp, ctypes.c_char_p, ctypes.c_size_t]),
        "ga_snapshot_json": (ctypes.c_size_t, [vp, ctypes.c_char_p, ctypes.c_size_t]),
        "ga_record_history": (ctypes.c_int, [vp, ctypes.c_int, ctypes.c_size_t]),
        "ga_reset_peak_stats": (ctypes.c_int, [vp]),
        "ga_reset_accumulated_stats": (ctypes.c_int, [vp]),
        "ga_empty_cache": (ctypes.c_int, [vp]),
        "ga_check": (ctypes.c_int, [vp]),
        "ga_last_error": (ctypes.c_char_p, []),
        "ga_backend_name": (ctypes.c_char_p, [vp]),
        "ga_allocation_size": (ctypes.c_int, [vp, vp, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
