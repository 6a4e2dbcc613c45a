"""Finding and loading libgardenalloc.so, and the C signatures used here."""
import ctypes
import ctypes.util
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def source_tree():
    """The repository when this package is python_shim/gardenalloc of a
    checkout (a developer's tree), else None."""
    shim = os.path.dirname(os.path.realpath(_HERE))
    repo = os.path.dirname(shim)
    if os.path.basename(shim) == "python_shim" and os.path.isfile(os.path.join(repo, "include", "gardenalloc.h")):
        return repo
    return None


def candidates():
    """Where the library is looked for, in order: GARDENALLOC_LIBRARY alone
    when it is set; else the package folder (where the wheel puts it), the
    checkout's build/ when running from a source tree, the usual library
    folders."""
    env = os.environ.get("GARDENALLOC_LIBRARY")
    if env:
        yield env
        return
    yield os.path.join(_HERE, "libgardenalloc.so")
    repo = source_tree()
    if repo:
        yield os.path.join(repo, "build", "libgardenalloc.so")
    for prefix in ("/usr/local/lib", "/usr/local/lib64", "/usr/lib", "/usr/lib/x86_64-linux-gnu"):
        yield os.path.join(prefix, "libgardenalloc.so")
    found = ctypes.util.find_library("gardenalloc")
    if found:
        yield found


def load():
    tried = []
    for path in candidates():
        if any(path == t[0] for t in tried):
            continue
        if os.path.sep in path and not os.path.exists(path):
            tried.append((path, "absent"))
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append((path, str(e)))
            continue
        try:
            _declare(lib)
        except AttributeError as e:
            tried.append((path, "not this version of gardenalloc (%s)" % e))
            continue
        lib.path = path
        return lib
    where = "; ".join("%s (%s)" % t for t in tried)
    if os.environ.get("GARDENALLOC_LIBRARY"):
        raise OSError("gardenalloc: GARDENALLOC_LIBRARY does not name a usable libgardenalloc.so: " + where)
    raise OSError("gardenalloc: libgardenalloc.so not found. `pip install ./python_shim` builds it into the "
                  "package; in a checkout, tests/run.sh builds build/libgardenalloc.so; or set GARDENALLOC_LIBRARY "
                  "to its path. Tried: " + where)


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
        "ga_torch_allocator_try": (vp, [ctypes.c_int]),
        "ga_torch_record_history": (ctypes.c_int, [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]),
        "ga_mem_get_info": (ctypes.c_int, [vp, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]),
        "ga_set_memory_fraction": (ctypes.c_int, [vp, ctypes.c_double]),
        "ga_get_memory_fraction": (ctypes.c_double, [vp]),
        "ga_torch_config": (ctypes.c_char_p, [ctypes.POINTER(ctypes.c_char_p)]),
        "ga_config_validate": (ctypes.c_int, [ctypes.c_char_p]),
        "ga_stats_json": (ctypes.c_size_t, [vp, ctypes.c_char_p, ctypes.c_size_t]),
        "ga_snapshot_json": (ctypes.c_size_t, [vp, ctypes.c_char_p, ctypes.c_size_t]),
        "ga_record_history": (ctypes.c_int, [vp, ctypes.c_int, ctypes.c_size_t]),
        "ga_record_history_stacks": (ctypes.c_int, [vp, ctypes.c_int, ctypes.c_size_t, ctypes.c_int]),
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
