"""The Python package and the PyTorch entry points, driven through ctypes on
the simulated device (no GPU, no torch needed). Run by tests/run.sh."""
import collections
import ctypes
import json
import os
import pickle
import random
import subprocess
import sys
import tempfile
import threading
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python_shim"))
os.environ.setdefault("GARDENALLOC_CONF", "backend:sim,sim_capacity_mb:4096")

import gardenalloc  # noqa: E402
import gardenalloc.trace  # noqa: E402

lib = gardenalloc.library()
SHARED = os.environ.get("GA_SHARED_DIR", REPO)  # the folder holding traces/


def pattern(n, seed):
    r = random.Random(seed)
    return bytes(r.getrandbits(8) for _ in range(min(n, 64))) * (min(n, 4096) // 64 + 1)


def fill(ptr, n, seed):
    data = pattern(n, seed)[: min(n, 4096)]
    ctypes.memmove(ptr, data, len(data))
    return data


def check(ptr, data):
    return ctypes.string_at(ptr, len(data)) == data


class EntryPoints(unittest.TestCase):
    def test_exact_signatures_from_several_threads(self):
        errors = []

        def work(tid):
            stream = ctypes.c_void_p(0x100 + tid)
            r = random.Random(tid)
            live = []
            for step in range(1500):
                if live and r.random() < 0.5:
                    p, n, data = live.pop(r.randrange(len(live)))
                    if not check(p, data):
                        errors.append("thread %d: block %#x changed" % (tid, p))
                    lib.ga_torch_free(p, n, 0, stream)
                else:
                    n = r.choice([1, 512, 4000, 1 << 20, 3 << 20, 12 << 20]) + r.randrange(512)
                    p = lib.ga_torch_alloc(n, 0, stream)
                    if not p:
                        errors.append("alloc %d failed: %s" % (n, gardenalloc.last_error()))
                        continue
                    live.append((p, n, fill(p, n, p)))
            for p, n, data in live:
                lib.ga_torch_free(p, n, 0, stream)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(gardenalloc.check(), 0)
        self.assertEqual(gardenalloc.memory_stats()["allocation.all.current"], 0)

    def test_size_zero_is_null(self):
        self.assertIsNone(lib.ga_torch_alloc(0, 0, None))
        lib.ga_torch_free(None, 0, 0, None)  # a no-op

    def test_oom_returns_the_report(self):
        before = gardenalloc.memory_stats()["num_ooms"]
        self.assertIsNone(lib.ga_torch_alloc_nothrow(1 << 40, 0, None))
        self.assertIn("CUDA out of memory. Tried to allocate", gardenalloc.last_error())
        self.assertEqual(gardenalloc.memory_stats()["num_ooms"], before + 1)
        p = lib.ga_torch_alloc(1 << 20, 0, None)  # still usable
        self.assertTrue(p)
        lib.ga_torch_free(p, 1 << 20, 0, None)

    def test_hooks(self):
        p = lib.ga_torch_alloc(5 << 20, 0, None)
        size = ctypes.c_size_t()
        self.assertEqual(lib.ga_torch_base_alloc(p + 4096, ctypes.byref(size)), p)
        self.assertEqual(size.value, 5 << 20)
        lib.ga_torch_record_stream(p, ctypes.c_void_p(0x999))
        lib.ga_torch_free(p, 5 << 20, 0, None)
        lib.ga_torch_memory_fraction(1.0, 0)
        lib.ga_torch_init(1)
        lib.ga_torch_reset()
        self.assertEqual(gardenalloc.memory_stats()["reserved_bytes.all.current"], 0)

    def test_a_mismatched_free_is_reported_not_trusted(self):
        code = ("import sys; sys.path.insert(0, %r); import gardenalloc, ctypes; lib = gardenalloc.library(); "
                "p = lib.ga_torch_alloc(1000, 0, None); lib.ga_torch_free(p, 999, 0, ctypes.c_void_p(7)); "
                "print(gardenalloc.memory_stats()['allocation.all.current'])") % os.path.join(REPO, "python_shim")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("PyTorch said 999 bytes, the allocation asked for 1000", r.stderr)
        self.assertIn("PyTorch said stream 0x7, the allocation is on stream 0x0", r.stderr)
        self.assertEqual(r.stdout.strip(), "0", "freed as recorded")


class Fuzz(unittest.TestCase):
    def test_ten_thousand_seeded_steps_with_content_checks(self):
        r = random.Random(1234)
        live = {}
        for step in range(10000):
            x = r.random()
            if live and x < 0.45:
                p = r.choice(list(live))
                n, data = live.pop(p)
                self.assertTrue(check(p, data), "step %d: contents of %#x" % (step, p))
                lib.ga_torch_free(p, n, 0, None)
            elif x < 0.995:
                n = int(r.paretovariate(0.9) * 2048) % (64 << 20) + 1
                p = lib.ga_torch_alloc(n, 0, None)
                self.assertTrue(p, gardenalloc.last_error())
                live[p] = (n, fill(p, n, step))
            else:
                gardenalloc.empty_cache()
            if step % 1000 == 0:
                self.assertEqual(gardenalloc.check(), 0)
                s = gardenalloc.memory_stats()
                self.assertEqual(s["allocation.all.current"], len(live))
                self.assertEqual(s["requested_bytes.all.current"], sum(n for n, _ in live.values()))
        for p, (n, data) in live.items():
            self.assertTrue(check(p, data))
            lib.ga_torch_free(p, n, 0, None)


class Stats(unittest.TestCase):
    def test_stats_match_recomputed_totals(self):
        a = lib.ga_torch_allocator(0)
        sizes = [100, 5000, 1 << 20, (3 << 20) + 1, 25 << 20]
        ptrs = [lib.ga_torch_alloc(n, 0, None) for n in sizes]
        s = gardenalloc.memory_stats()
        blocks = 0
        for p in ptrs:
            blk = ctypes.c_size_t()
            self.assertEqual(lib.ga_allocation_size(a, p, None, ctypes.byref(blk)), 0)
            blocks += blk.value
        self.assertEqual(s["allocated_bytes.all.current"], blocks)
        self.assertEqual(s["allocated_bytes.all.current"],
                         s["allocated_bytes.small_pool.current"] + s["allocated_bytes.large_pool.current"])
        self.assertLessEqual(s["requested_bytes.all.current"], s["allocated_bytes.all.current"])
        self.assertLessEqual(s["allocated_bytes.all.current"], s["reserved_bytes.all.current"])
        self.assertEqual(list(s), sorted(s), "sorted by key, as torch.cuda.memory_stats")
        for key in ("num_alloc_retries", "num_ooms", "max_split_size", "num_sync_all_streams", "num_device_alloc",
                    "num_device_free", "oversize_allocations.current", "inactive_split_bytes.large_pool.peak"):
            self.assertIn(key, s)
        summary = gardenalloc.memory_summary()
        self.assertIn("Allocated memory", summary)
        self.assertIn("from small pool", summary)
        for p, n in zip(ptrs, sizes):
            lib.ga_torch_free(p, n, 0, None)
        gardenalloc.reset_peak_memory_stats()
        s = gardenalloc.memory_stats()
        self.assertEqual(s["allocated_bytes.all.peak"], s["allocated_bytes.all.current"])


class Snapshot(unittest.TestCase):
    def test_pickle_loads_back_in_the_snapshot_schema(self):
        gardenalloc.record_memory_history(True)
        try:
            keep = lib.ga_torch_alloc(7 << 20, 0, None)
            p = lib.ga_torch_alloc(1000, 0, None)
            lib.ga_torch_free(p, 1000, 0, None)
            self.assertIsNone(lib.ga_torch_alloc_nothrow(1 << 40, 0, None))
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "snap.pickle")
                gardenalloc.dump_snapshot(path)
                with open(path, "rb") as f:
                    raw = f.read()
                self.assertLessEqual(raw[1], 4, "pickle protocol <= 4 for the memory viewer")
                snap = pickle.loads(raw)
        finally:
            gardenalloc.record_memory_history(None)
        self.assertEqual(set(snap), {"segments", "device_traces", "allocator_settings", "external_annotations"})
        addrs = [s["address"] for s in snap["segments"]]
        self.assertEqual(addrs, sorted(addrs))
        for seg in snap["segments"]:
            for k, t in (("device", int), ("address", int), ("total_size", int), ("allocated_size", int),
                         ("active_size", int), ("requested_size", int), ("stream", int), ("segment_type", str),
                         ("segment_pool_id", tuple), ("is_expandable", bool), ("frames", list), ("blocks", list)):
                self.assertIsInstance(seg[k], t, k)
            self.assertIn(seg["segment_type"], ("large", "small"))
            self.assertEqual(sum(b["size"] for b in seg["blocks"]), seg["total_size"])
            for b in seg["blocks"]:
                self.assertIn(b["state"], ("active_allocated", "active_pending_free", "inactive"))
                self.assertEqual(set(b), {"address", "size", "requested_size", "state", "frames"})
        trace = snap["device_traces"][0]
        actions = [e["action"] for e in trace]
        for a in ("alloc", "free_requested", "free_completed", "oom"):
            self.assertIn(a, actions)
        for e in trace:
            self.assertIn("addr" if e["action"] != "oom" else "device_free", e)
            self.assertIsInstance(e["time_us"], int)
            self.assertIsInstance(e["stream"], int)
        self.assertIn("expandable_segments", snap["allocator_settings"])
        self.assertEqual(len(snap["allocator_settings"]["roundup_power2_divisions"]), 16)
        lib.ga_torch_free(keep, 7 << 20, 0, None)


class Racing(unittest.TestCase):
    """snapshot() and memory_stats() size their text with one call and fill
    it with a second: text that grows in between (another thread allocated)
    must not come back cut short (issue 21)."""

    def grow_between(self, name):
        """Runs gardenalloc's call with `name` wrapped so that 60 blocks are
        allocated right after the sizing call; returns their pointers."""
        real = getattr(lib, name)
        held = []

        def racing(a, buf, cap):
            n = real(a, buf, cap)
            if buf is None and not held:
                held.extend(lib.ga_torch_alloc_nothrow(4096 + 512 * i, 0, None) for i in range(60))
            return n

        setattr(lib, name, racing)
        return real, held

    def test_a_snapshot_that_grows_while_it_is_written(self):
        real, held = self.grow_between("ga_snapshot_json")
        try:
            snap = gardenalloc.snapshot()
        finally:
            lib.ga_snapshot_json = real
        try:
            live = {b["address"] for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"}
            self.assertTrue(set(held) <= live, "every block allocated between the two calls is in the snapshot")
        finally:
            for i, p in enumerate(held):
                lib.ga_torch_free(p, 4096 + 512 * i, 0, None)

    def test_stats_that_grow_while_they_are_written(self):
        before = gardenalloc.memory_stats()["allocation.all.allocated"]
        real, held = self.grow_between("ga_stats_json")
        try:
            s = gardenalloc.memory_stats()
        finally:
            lib.ga_stats_json = real
        for i, p in enumerate(held):
            lib.ga_torch_free(p, 4096 + 512 * i, 0, None)
        self.assertEqual(s["allocation.all.allocated"], before + 60)

    def test_snapshots_while_other_threads_allocate(self):
        stop = threading.Event()
        errors = []

        def work(seed):
            r = random.Random(seed)
            live = []
            while not stop.is_set():
                if len(live) > 100 or (live and r.random() < 0.45):
                    p, n = live.pop(r.randrange(len(live)))
                    lib.ga_torch_free(p, n, 0, None)
                else:
                    n = r.choice([100, 3000, 70000, 1 << 20])
                    p = lib.ga_torch_alloc_nothrow(n, 0, None)
                    if p:
                        live.append((p, n))
                    else:
                        errors.append(gardenalloc.last_error())
            for p, n in live:
                lib.ga_torch_free(p, n, 0, None)

        threads = [threading.Thread(target=work, args=(s,)) for s in range(2)]
        for t in threads:
            t.start()
        try:
            for _ in range(60):
                try:
                    gardenalloc.snapshot()
                    gardenalloc.memory_stats()
                except ValueError as e:
                    errors.append(str(e))
        finally:
            stop.set()
            for t in threads:
                t.join()
        self.assertEqual(errors, [])


class Converter(unittest.TestCase):
    def test_a_real_trace_survives_snapshot_and_conversion(self):
        src = os.path.join(SHARED, "traces", "pytorch_snapshots", "cs336_medium_ctx128_inference.csv")
        self.assertTrue(os.path.exists(src), "%s is missing (the repository carries it under traces/)" % src)
        with open(src) as f:
            rows = [line.rstrip("\n").split(",") for line in f][1:]
        gardenalloc.empty_cache()
        gardenalloc.record_memory_history(True, max_entries=100000)
        live = {}
        try:
            for _, _, action, ptr, size, stream in rows:
                if action == "allocate":
                    live[ptr] = (lib.ga_torch_alloc(int(size), 0, ctypes.c_void_p(int(stream))), int(size))
                else:
                    p, n = live.pop(ptr)
                    lib.ga_torch_free(p, n, 0, ctypes.c_void_p(int(stream)))
            with tempfile.TemporaryDirectory() as d:
                snap_path, csv_path = os.path.join(d, "s.pickle"), os.path.join(d, "out.csv")
                gardenalloc.dump_snapshot(snap_path)
                r = subprocess.run([sys.executable, "-m", "gardenalloc.trace", snap_path, csv_path], capture_output=True,
                                   text=True, cwd=os.path.join(REPO, "python_shim"))
                self.assertEqual(r.returncode, 0, r.stderr)
                with open(csv_path) as f:
                    out = [line.rstrip("\n").split(",") for line in f]
        finally:
            gardenalloc.record_memory_history(None)
            for p, n in live.values():
                lib.ga_torch_free(p, n, 0, None)
        self.assertEqual(out[0], ["Thread", "Time", "Action", "Pointer", "Size", "Stream"])
        self.assertEqual([(a, s, st) for _, _, a, _, s, st in out[1:]], [(a, s, st) for _, _, a, _, s, st in rows])

    def test_bad_input_is_refused_clearly(self):
        with tempfile.TemporaryDirectory() as d:
            bad = os.path.join(d, "bad.pickle")
            with open(bad, "wb") as f:
                pickle.dump({"stats": []}, f)
            r = subprocess.run([sys.executable, "-m", "gardenalloc.trace", bad, os.path.join(d, "o.csv")],
                               capture_output=True, text=True, cwd=os.path.join(REPO, "python_shim"))
            self.assertEqual(r.returncode, 2)
            self.assertIn("not a memory snapshot", r.stderr)


class Package(unittest.TestCase):
    def test_the_library_is_found_without_settings(self):
        env = {k: v for k, v in os.environ.items() if k != "GARDENALLOC_LIBRARY"}
        code = "import gardenalloc; print(gardenalloc.library().path)"
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                           cwd=os.path.join(REPO, "python_shim"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.strip().endswith("libgardenalloc.so"), r.stdout)

    def test_every_hook_install_uses_is_exported(self):
        for fn in ("ga_torch_alloc", "ga_torch_free", "ga_torch_init", "ga_torch_reset", "ga_torch_memory_fraction",
                   "ga_torch_record_stream", "ga_torch_base_alloc", "ga_torch_begin_allocate_to_pool",
                   "ga_torch_end_allocate_to_pool", "ga_torch_release_pool"):
            self.assertTrue(hasattr(lib, fn), fn)

    def test_torch_module_says_what_it_needs(self):
        try:
            import torch  # noqa: F401
            self.skipTest("torch is installed here")
        except ImportError:
            pass
        import gardenalloc.torch as gt
        with self.assertRaises(ImportError) as cm:
            gt.install()
        self.assertIn("needs PyTorch", str(cm.exception))


def fake_torch(**kw):
    """The recording stand-in for torch (standin/torch_standin.py)."""
    sys.path.insert(0, os.path.join(HERE, "standin"))
    try:
        import torch_standin
    finally:
        sys.path.pop(0)
    return torch_standin.make(**kw)


class TorchWiring(unittest.TestCase):
    """install() and mempool() against a recording stand-in for torch: the
    names, hook addresses and order PyTorch's pluggable-allocator API expects."""

    def run_with(self, torch, fn):
        import importlib
        saved = {k: sys.modules.get(k) for k in ("torch", "torch.cuda", "torch.cuda.memory")}
        saved_conf = os.environ.get("GARDENALLOC_CONF")
        sys.modules.update({"torch": torch, "torch.cuda": torch.cuda, "torch.cuda.memory": torch.cuda.memory})
        try:
            import gardenalloc.torch as gt
            gt = importlib.reload(gt)  # a fresh _installed
            return fn(gt)
        finally:
            for k, v in saved.items():
                if v is None:
                    sys.modules.pop(k, None)
                else:
                    sys.modules[k] = v
            os.environ["GARDENALLOC_CONF"] = saved_conf

    @staticmethod
    def address(name):
        return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value

    def test_install_wires_every_hook_to_the_exported_function(self):
        torch = fake_torch()

        conf = os.environ["GARDENALLOC_CONF"]  # what this process's allocators read first

        def go(gt):
            a = gt.install(conf)
            self.assertIs(gt.install(), a, "a second install() returns the first")
            self.assertIs(gt.install(conf), a, "so does one with the same settings")
            self.assertEqual(gt.installed(), (conf, "GARDENALLOC_CONF"))
            return a

        a = self.run_with(torch, go)
        self.assertEqual([c for c in torch.calls if c[0] == "change"], [("change", a)],
                         "change_current_allocator once, with the allocator")
        self.assertEqual(a.args, (lib.path, "ga_torch_alloc", "ga_torch_free"))
        want = sys.modules["torch_standin"].HOOKS
        self.assertEqual(a.inner.hooks, {k: self.address(v) for k, v in want.items()})
        # The addresses are callable with PyTorch's signatures.
        alloc_t = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
        free_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
        base_t = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t))
        p = alloc_t(self.address("ga_torch_alloc"))(3 << 20, 0, None)
        self.assertTrue(p)
        size = ctypes.c_size_t()
        self.assertEqual(base_t(a.inner.hooks["set_base_alloc_fn"])(p + 100, ctypes.byref(size)), p)
        free_t(self.address("ga_torch_free"))(p, 3 << 20, 0, None)

    def test_bad_settings_fail_at_install_and_change_nothing(self):
        torch = fake_torch()
        for conf, words in (("expandable_segments:yes", "expandable_segments: 'yes' is not a boolean"),
                            ("expandable_segment:True", "did you mean 'expandable_segments'?"),
                            ("max_split_size_mb=128", "the separator between a key and its value is ':'")):
            with self.assertRaises(ValueError) as cm:
                self.run_with(torch, lambda gt: gt.install(conf))
            self.assertIn("gardenalloc.torch.install(%r): " % conf, str(cm.exception))
            self.assertIn("invalid option expandable_segments: " if "yes" in conf else "unrecognized key",
                          str(cm.exception))
            self.assertNotIn("GARDENALLOC_CONF", str(cm.exception), "the string came from install()")
            self.assertIn(words, str(cm.exception))
        self.assertEqual(torch.calls, [], "nothing was changed")
        self.assertEqual(os.environ["GARDENALLOC_CONF"], "backend:sim,sim_capacity_mb:4096")

    def test_a_second_install_with_other_settings_says_what_is_active(self):
        torch = fake_torch()
        conf = os.environ["GARDENALLOC_CONF"]

        def go(gt):
            gt.install(conf)
            with self.assertRaises(RuntimeError) as cm:
                gt.install("expandable_segments:True")
            return str(cm.exception)

        msg = self.run_with(torch, go)
        self.assertEqual(msg, "gardenalloc is PyTorch's allocator in this process already, with \"%s\" (from "
                              "GARDENALLOC_CONF): install('expandable_segments:True') cannot change it, since "
                              "PyTorch swaps its allocator once per process. Set the configuration before the "
                              "first install() (or in GARDENALLOC_CONF)" % conf)
        self.assertEqual(len([c for c in torch.calls if c[0] == "change"]), 1)

    def test_settings_given_after_the_allocators_read_theirs_are_refused(self):
        gardenalloc.memory_stats()  # this process's allocators exist, with GARDENALLOC_CONF's settings
        torch = fake_torch()
        with self.assertRaises(RuntimeError) as cm:
            self.run_with(torch, lambda gt: gt.install("backend:sim,sim_capacity_mb:1024"))
        self.assertIn("gardenalloc's allocators already use \"backend:sim,sim_capacity_mb:4096\" (from "
                      "GARDENALLOC_CONF) in this process", str(cm.exception))
        self.assertEqual([c for c in torch.calls if c[0] == "change"], [])

    def test_install_applies_its_settings_in_a_fresh_process(self):
        code = ("import sys, json; sys.path[:0] = [%r, %r]; import torch_standin, gardenalloc\n"
                "t = torch_standin.make(); sys.modules.update({'torch': t, 'torch.cuda': t.cuda, "
                "'torch.cuda.memory': t.cuda.memory})\n"
                "import gardenalloc.torch as gt\n"
                "gt.install('backend:sim,sim_capacity_mb:1024,max_split_size_mb:64')\n"
                "print(json.dumps([gardenalloc.configuration(), gardenalloc.memory_stats()['max_split_size']]))"
                % (os.path.join(REPO, "python_shim"), os.path.join(HERE, "standin")))
        env = {k: v for k, v in os.environ.items() if k != "GARDENALLOC_CONF"}
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout), [["backend:sim,sim_capacity_mb:1024,max_split_size_mb:64",
                                                 "GARDENALLOC_CONF"], 64 << 20])
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segment:True"
        r = subprocess.run([sys.executable, "-c", code.replace("'backend:sim,sim_capacity_mb:1024,"
                                                               "max_split_size_mb:64'", "")],
                           capture_output=True, text=True, env=env)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("ValueError: gardenalloc: PYTORCH_CUDA_ALLOC_CONF: unrecognized key "
                      "'expandable_segment'", r.stderr)

    def test_install_refuses_an_initialised_cuda(self):
        torch = fake_torch(initialized=True)
        with self.assertRaises(RuntimeError) as cm:
            self.run_with(torch, lambda gt: gt.install())
        self.assertIn("before CUDA is initialised", str(cm.exception))
        self.assertEqual(torch.calls, [], "nothing was changed")

    def test_a_torch_that_cannot_host_it_is_named(self):
        for kw, text in (({"cuda": None}, "built with CUDA"), ({"pluggable": False}, "PyTorch 2.0 or later"),
                         ({"mempool": False}, "needs torch.cuda.MemPool")):
            torch = fake_torch(version="1.13.1", **kw)
            with self.assertRaises(RuntimeError) as cm:
                self.run_with(torch, lambda gt: gt.mempool() if "mempool" in kw else gt.install())
            self.assertIn(text, str(cm.exception))
            self.assertIn("1.13.1", str(cm.exception))

    def test_mempool_hands_the_allocator_to_a_mempool(self):
        torch = fake_torch()
        pool = self.run_with(torch, lambda gt: gt.mempool())
        self.assertEqual(pool[0], "pool")
        self.assertEqual(pool[1].hooks["set_base_alloc_fn"], self.address("ga_torch_base_alloc"))
        self.assertEqual([c for c in torch.calls if c[0] == "change"], [],
                         "backend mode leaves the current allocator alone")


class TorchCudaMemory(unittest.TestCase):
    """torch.cuda's memory functions once install() made gardenalloc PyTorch's
    allocator, against the recording stand-in (which, like PyTorch with a
    pluggable allocator and no GPU, has empty statistics, a memory_summary
    that raises KeyError on them, and refuses resets and snapshots): they
    answer from gardenalloc with PyTorch's names, types and meanings."""

    KEYS = 122  # torch.cuda.memory_stats() has 9 x 3 x 4 + 2 x 4 + 6 keys
    run_with = TorchWiring.run_with

    def installed(self, fn):
        torch = fake_torch()
        conf = os.environ["GARDENALLOC_CONF"]
        return torch, self.run_with(torch, lambda gt: (gt.install(conf), fn(torch))[1])

    def test_the_call_that_crashes_without_it(self):
        torch = fake_torch()
        with self.assertRaises(KeyError):
            torch.cuda.memory_summary()  # the stand-in as PyTorch is without gardenalloc's answers

        def go(torch):
            p = lib.ga_torch_alloc_nothrow(5 << 20, 0, None)
            try:
                return torch.cuda.memory_summary(), gardenalloc.memory_stats()
            finally:
                lib.ga_torch_free(p, 5 << 20, 0, None)

        torch, (text, s) = self.installed(go)
        self.assertEqual(text, "summary of device 0: %d bytes allocated, peak %d" % (
            s["allocated_bytes.all.current"], s["allocated_bytes.all.peak"]))
        self.assertIn(("memory_summary", 0, False), torch.calls, "PyTorch's formatter, given the device index")
        self.assertIs(torch.cuda.memory_summary.__wrapped__.__name__, "memory_summary")

    def test_statistics_have_pytorch_s_names_types_and_meanings(self):
        def go(torch):
            sizes = [1000, 3 << 20, 25 << 20]
            ptrs = [lib.ga_torch_alloc_nothrow(n, 0, None) for n in sizes]
            try:
                flat, nested = torch.cuda.memory_stats(), torch.cuda.memory_stats_as_nested_dict()
                mine = gardenalloc.memory_stats()
                one = (torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated(),
                       torch.cuda.memory_reserved(), torch.cuda.max_memory_reserved())
                by_name = [torch.cuda.memory_stats(d)["allocation.all.current"]
                           for d in (0, "cuda", "cuda:0", types.SimpleNamespace(type="cuda", index=0))]
                for bad in ("cpu", "cuda:x", types.SimpleNamespace(type="cpu", index=None)):
                    with self.assertRaises(ValueError):
                        torch.cuda.memory_stats(bad)
            finally:
                for p, n in zip(ptrs, sizes):
                    lib.ga_torch_free(p, n, 0, None)
            return flat, nested, mine, one, by_name, torch.cuda.memory_stats() is not None

        torch, (flat, nested, mine, one, by_name, _) = self.installed(go)
        self.assertIsInstance(flat, collections.OrderedDict)
        self.assertEqual(list(flat), sorted(flat))
        self.assertEqual(len(flat), self.KEYS)
        for k, v in flat.items():
            self.assertIs(type(v), int, k)
            self.assertEqual(v, mine[k], k)
        for fam in ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
                    "active_bytes", "inactive_split_bytes", "requested_bytes"):
            self.assertEqual(sorted(nested[fam]), ["all", "large_pool", "small_pool"])
            self.assertEqual(sorted(nested[fam]["all"]), ["allocated", "current", "freed", "peak"])
        self.assertEqual(nested["num_ooms"], flat["num_ooms"])
        self.assertEqual(nested["oversize_segments"]["peak"], flat["oversize_segments.peak"])
        self.assertEqual(flat["max_split_size"], -1, "unlimited reads -1, as in PyTorch")
        self.assertEqual(one, (mine["allocated_bytes.all.current"], mine["allocated_bytes.all.peak"],
                               mine["reserved_bytes.all.current"], mine["reserved_bytes.all.peak"]))
        self.assertGreaterEqual(flat["allocation.all.current"], 3)
        self.assertEqual(len(set(by_name)), 1, "None, 0, 'cuda', 'cuda:0' and a torch.device name one device")
        self.assertIs(torch.cuda.memory_stats, torch.cuda.memory.memory_stats)

    def test_resets_empty_cache_fraction_and_free_memory(self):
        def go(torch):
            out = {}
            p = lib.ga_torch_alloc_nothrow(30 << 20, 0, None)
            lib.ga_torch_free(p, 30 << 20, 0, None)
            torch.cuda.reset_peak_memory_stats()
            s = torch.cuda.memory_stats()
            out["peaks"] = [(k, s[k], s[k.replace(".peak", ".current")]) for k in s if k.endswith(".peak")]
            self.assertIsNone(lib.ga_torch_alloc_nothrow(1 << 40, 0, None))  # an OOM to count
            torch.cuda.reset_accumulated_memory_stats()
            s = torch.cuda.memory_stats()
            out["accumulated"] = {k: s[k] for k in s if k.endswith((".allocated", ".freed")) or k in (
                "num_ooms", "num_alloc_retries", "num_sync_all_streams", "num_device_alloc", "num_device_free")}
            torch.cuda.empty_cache()
            out["reserved_after_empty"] = torch.cuda.memory_reserved()
            free, total = torch.cuda.mem_get_info()
            out["info"] = (free, total)
            for bad, exc in ((1, TypeError), (1.5, ValueError), (-0.1, ValueError)):
                with self.assertRaises(exc):
                    torch.cuda.set_per_process_memory_fraction(bad)
            torch.cuda.set_per_process_memory_fraction(0.001)
            out["fraction"] = torch.cuda.memory.get_per_process_memory_fraction()
            out["over_fraction"] = lib.ga_torch_alloc_nothrow(8 << 20, 0, None)
            out["why"] = gardenalloc.last_error()
            torch.cuda.set_per_process_memory_fraction(1.0)
            return out

        _, out = self.installed(go)
        self.assertEqual([k for k, peak, cur in out["peaks"] if peak != cur], [])
        self.assertEqual({k: v for k, v in out["accumulated"].items() if v}, {})
        self.assertEqual(out["reserved_after_empty"], 0)
        self.assertEqual(out["info"], (4096 << 20, 4096 << 20))
        self.assertEqual(out["fraction"], 0.001)
        self.assertIsNone(out["over_fraction"], "more than 0.001 of 4 GiB is refused")
        self.assertIn("CUDA out of memory", out["why"])

    def test_history_and_snapshots(self):
        def go(torch):
            out = {}
            torch.cuda.memory._record_memory_history(max_entries=1000)
            p = lib.ga_torch_alloc_nothrow(7 << 20, 0, None)
            lib.ga_torch_free(p, 7 << 20, 0, None)
            keep = lib.ga_torch_alloc_nothrow(3 << 20, 0, None)
            snap = torch.cuda.memory._snapshot()
            out["keys"] = sorted(snap)
            out["actions"] = [e["action"] for e in snap["device_traces"][0] if not e["action"].startswith("segment")]
            out["live"] = [b["address"] for s in snap["segments"] for b in s["blocks"]
                           if b["state"] == "active_allocated"]
            out["keep"] = keep
            with tempfile.TemporaryDirectory() as d:
                torch.cuda.memory._record_memory_history("state")
                q = lib.ga_torch_alloc_nothrow(1000, 0, None)
                out["state_traces"] = torch.cuda.memory._snapshot()["device_traces"]
                lib.ga_torch_free(q, 1000, 0, None)
                torch.cuda.memory._record_memory_history(True, trace_alloc_max_entries=50)  # the older form
                q = lib.ga_torch_alloc_nothrow(1000, 0, None)
                lib.ga_torch_free(q, 1000, 0, None)
                out["legacy"] = [e["action"] for e in torch.cuda.memory._snapshot()["device_traces"][0]
                                 if not e["action"].startswith("segment")]
                torch.cuda.memory._record_memory_history(None)
                out["off"] = torch.cuda.memory._snapshot()["device_traces"]
            out["segments"] = torch.cuda.memory_snapshot()
            out["pool"] = torch.cuda.memory_snapshot(mempool_id=(7, 0))
            with self.assertRaises(ValueError):
                torch.cuda.memory._record_memory_history("sometimes")
            lib.ga_torch_free(keep, 3 << 20, 0, None)
            return out

        _, out = self.installed(go)
        self.assertEqual(out["keys"], ["allocator_settings", "device_traces", "external_annotations", "segments"])
        self.assertEqual(out["actions"][:2], ["alloc", "free_requested"])
        self.assertIn(out["keep"], out["live"])
        self.assertEqual(out["state_traces"], [[]], "enabled='state' keeps no trace, as PyTorch")
        self.assertEqual(out["legacy"][-3:], ["alloc", "free_requested", "free_completed"])
        self.assertEqual(out["off"], [[]])
        self.assertEqual(sorted(s["address"] for s in out["segments"]),
                         sorted(s["address"] for s in gardenalloc.snapshot()["segments"]))
        self.assertEqual(out["pool"], [], "no segment of a graph pool (7, 0)")

    def test_backend_mode_leaves_pytorch_s_functions_alone(self):
        torch = fake_torch()
        own = torch.cuda.memory_stats
        self.run_with(torch, lambda gt: gt.mempool())
        self.assertIs(torch.cuda.memory_stats, own, "PyTorch's allocator keeps its statistics with a MemPool")

    def test_gardenalloc_s_summary_says_which_allocator_pytorch_uses(self):
        code = ("import sys; sys.path[:0] = [%r, %r]; import gardenalloc\n"
                "print(gardenalloc.pytorch_allocator())\n"
                "import torch_standin; t = torch_standin.make()\n"
                "sys.modules.update({'torch': t, 'torch.cuda': t.cuda, 'torch.cuda.memory': t.cuda.memory})\n"
                "print(gardenalloc.pytorch_allocator())\n"
                "import gardenalloc.torch as gt; gt.mempool()\n"
                "print(gardenalloc.pytorch_allocator())\n"
                "gt.install(); print(' '.join(gardenalloc.memory_summary().splitlines()[2:4]))\n"
                % (os.path.join(REPO, "python_shim"), os.path.join(HERE, "standin")))
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ)
        self.assertEqual(r.returncode, 0, r.stderr)
        alone, native, pool, installed = r.stdout.splitlines()
        self.assertTrue(alone.startswith("PyTorch is not loaded in this process"), alone)
        self.assertTrue(native.startswith("PyTorch's CUDA allocator in this process is its own caching allocator "
                                          "(native), not gardenalloc"), native)
        self.assertIn("gardenalloc serves the segments of 1 torch.cuda.MemPool, counted here", pool)
        self.assertEqual(installed, " gardenalloc is PyTorch's CUDA allocator in this process: the statistics "
                                    " below are those of PyTorch's tensors.")


if __name__ == "__main__":
    unittest.main()
