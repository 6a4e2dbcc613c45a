"""Stack frames in snapshots: record_memory_history(stacks="python"|"all"|None)
as PyTorch's, in PyTorch's frame format (filename, line, name), on trace
entries and on the live blocks the viewer and _memory_viz.py show."""
import ctypes
import inspect
import os
import threading
import unittest

import support  # noqa: F401
import gardenalloc
import memviz_replay

lib = gardenalloc.library()
# A PyDLL call keeps the GIL, as PyTorch's calls into the allocator do; a CDLL call releases it.
pylib = ctypes.PyDLL(lib.path)
pylib.ga_torch_alloc_nothrow.restype = ctypes.c_void_p
pylib.ga_torch_alloc_nothrow.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
HERE = os.path.abspath(__file__)


def allocate_weights(n):
    return pylib.ga_torch_alloc_nothrow(n, 0, None), inspect.currentframe().f_lineno


def last_alloc(snap, addr):
    return [e for e in snap["device_traces"][0] if e["action"] == "alloc" and e["addr"] == addr][-1]


def block_at(snap, addr):
    return [b for s in snap["segments"] for b in s["blocks"] if b["address"] == addr and b["state"] != "inactive"][0]


class Stacks(unittest.TestCase):
    def tearDown(self):
        gardenalloc.record_memory_history(None)

    def test_python_frames_name_the_function_and_line(self):
        gardenalloc.record_memory_history(True, stacks="python")
        p, line = allocate_weights(3 << 20)
        snap = gardenalloc.snapshot()
        frames = last_alloc(snap, p)["frames"]
        self.assertEqual(frames[0], {"filename": HERE, "line": line, "name": "allocate_weights"})
        self.assertEqual(frames[1]["name"], "test_python_frames_name_the_function_and_line")
        self.assertTrue(all(f["line"] > 0 for f in frames), "only Python frames")
        self.assertEqual(block_at(snap, p)["frames"], frames, "the live block carries its allocation's stack")
        memviz_replay.check_every_event(snap)
        lib.ga_torch_free(p, 3 << 20, 0, None)

    def test_all_adds_the_c_frames_first(self):
        gardenalloc.record_memory_history(True, stacks="all")
        p, line = allocate_weights(1000)
        frames = last_alloc(gardenalloc.snapshot(), p)["frames"]
        names = [f["name"] for f in frames]
        self.assertIn("ga_torch_alloc_nothrow", names)
        c = names.index("ga_torch_alloc_nothrow")
        self.assertTrue(frames[c]["filename"].endswith("libgardenalloc.so"), frames[c])
        self.assertEqual(frames[c]["line"], 0)
        py = [f for f in frames if f["filename"] == HERE]
        self.assertEqual(py[0], {"filename": HERE, "line": line, "name": "allocate_weights"})
        self.assertLess(c, frames.index(py[0]), "innermost first: C, then Python")
        lib.ga_torch_free(p, 1000, 0, None)

    def test_none_records_no_frames(self):
        gardenalloc.record_memory_history(True, stacks=None)
        p, _ = allocate_weights(1000)
        snap = gardenalloc.snapshot()
        self.assertNotIn("frames", last_alloc(snap, p))
        self.assertEqual(block_at(snap, p)["frames"], [])
        lib.ga_torch_free(p, 1000, 0, None)

    def test_a_call_without_the_gil_gets_c_frames_only(self):
        gardenalloc.record_memory_history(True, stacks="all")
        p = lib.ga_torch_alloc_nothrow(1000, 0, None)  # CDLL: the GIL is released
        frames = last_alloc(gardenalloc.snapshot(), p)["frames"]
        self.assertTrue(frames)
        self.assertTrue(all(f["line"] == 0 for f in frames), frames)
        lib.ga_torch_free(p, 1000, 0, None)

    def test_threads_each_get_their_own_stack(self):
        gardenalloc.record_memory_history(True, stacks="python")
        got = {}

        def worker(name):
            def inner():
                return pylib.ga_torch_alloc_nothrow(4096, 0, None)
            inner.__name__ = inner.__qualname__ = name
            got[name] = inner()

        ts = [threading.Thread(target=worker, args=("worker_%d" % i,)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        snap = gardenalloc.snapshot()
        for name, p in got.items():
            self.assertEqual(last_alloc(snap, p)["frames"][0]["name"], "inner")  # co_name is the code's own
            self.assertEqual(last_alloc(snap, p)["frames"][1]["name"], "worker")
            lib.ga_torch_free(p, 4096, 0, None)

    def test_bad_stacks_are_refused(self):
        with self.assertRaises(ValueError):
            gardenalloc.record_memory_history(True, stacks="cpp")


if __name__ == "__main__":
    unittest.main()
