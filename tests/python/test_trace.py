"""The snapshot converter (python -m gardenalloc.trace) on real, crafted and
malformed snapshots: it runs nothing from the pickle, converts only the chosen
device, and refuses what it cannot convert with one clear line."""
import contextlib
import copy
import io
import json
import os
import pickle
import random
import subprocess
import sys
import tempfile
import unittest

import support  # noqa: F401  (puts python_shim on sys.path)
from gardenalloc import trace

PICKLES = ("pytorch_snapshots", "pickles")


def run_main(argv):
    """main() in this process: (exit code, stdout, stderr); an exception
    escaping main() fails the calling test with its traceback."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = trace.main(argv)
        except SystemExit as e:  # argparse
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


def real_snapshot(name="cs336_medium_ctx128_inference"):
    p = support.trace_file(*PICKLES, name + ".pickle")
    if not p:
        raise unittest.SkipTest("the real snapshot pickles are absent")
    with open(p, "rb") as f:
        return pickle.load(f)  # a trusted file shipped with the traces


def small_snapshot():
    """A hand-made snapshot of one device: a live weight, an alloc/free pair,
    an OOM."""
    return {
        "segments": [{"device": 0, "address": 1 << 30, "total_size": 20 << 20, "stream": 0, "segment_type": "large",
                      "blocks": [{"address": 1 << 30, "size": 8 << 20, "requested_size": 8000000,
                                  "state": "active_allocated", "frames": []},
                                 {"address": (1 << 30) + (8 << 20), "size": 12 << 20, "requested_size": 0,
                                  "state": "inactive", "frames": []}]}],
        "device_traces": [[
            {"action": "alloc", "addr": 5 << 30, "size": 1000, "stream": 0, "time_us": 1000000},
            {"action": "free_requested", "addr": 5 << 30, "size": 1000, "stream": 0, "time_us": 1000001},
            {"action": "free_completed", "addr": 5 << 30, "size": 1000, "stream": 0, "time_us": 1000001},
            {"action": "oom", "device_free": 1 << 20, "size": 64 << 20, "stream": 0, "time_us": 1000002},
        ]],
        "allocator_settings": {}, "external_annotations": [],
    }


def write(d, name, obj, protocol=4):
    p = os.path.join(d, name)
    with open(p, "wb") as f:
        if isinstance(obj, bytes):
            f.write(obj)
        else:
            pickle.dump(obj, f, protocol=protocol)
    return p


def rows_of(path):
    with open(path) as f:
        return [line.rstrip("\n").split(",") for line in f]


class Unpickler(unittest.TestCase):
    def test_a_pickle_that_calls_a_function_runs_nothing(self):
        with tempfile.TemporaryDirectory() as d:
            marker = os.path.join(d, "ran")

            class Boom:
                def __reduce__(self):
                    return (os.system, ("touch %s" % marker,))

            class Loud:
                def __reduce__(self):
                    return (print, ("code ran during conversion",))

            for i, payload in enumerate([{"device_traces": [[Boom()]]}, {"segments": [Loud()], "device_traces": []},
                                         Boom()]):
                for proto in (0, 2, 4, 5):
                    p = write(d, "evil%d.pickle" % i, payload, protocol=proto)
                    rc, out, err = run_main([p, os.path.join(d, "o.csv")])
                    self.assertEqual(rc, 2, err)
                    self.assertIn("refuses to load the global", err)
                    self.assertNotIn("code ran", out + err)
                    self.assertFalse(os.path.exists(marker), "os.system ran")
                    self.assertFalse(os.path.exists(os.path.join(d, "o.csv")))

    def test_extension_codes_and_persistent_ids_are_refused(self):
        import copyreg
        copyreg.add_extension("os", "system", 0x7ffff0)
        try:
            data = pickle.dumps(os.system, protocol=2)
        finally:
            copyreg.remove_extension("os", "system", 0x7ffff0)
        with self.assertRaises(trace.SnapshotError) as e:
            trace.loads(data)
        self.assertIn("refuses", str(e.exception))
        with self.assertRaises(trace.SnapshotError):
            trace.loads(b"\x80\x02P0\n.")  # PERSID

    def test_the_real_pickles_load_with_it(self):
        for name in ("cs336_medium_ctx128_inference", "cs336_medium_ctx128_training"):
            p = support.trace_file(*PICKLES, name + ".pickle")
            if not p:
                self.skipTest("the real snapshot pickles are absent")
            with open(p, "rb") as f:
                self.assertEqual(trace.load(p), pickle.load(f))


class Devices(unittest.TestCase):
    def two_devices(self):
        """Device 1 holds the same job as device 0, at other addresses."""
        snap = real_snapshot()
        shift = 1 << 44
        segs1 = copy.deepcopy(snap["segments"])
        for s in segs1:
            s["device"] = 1
            s["address"] += shift
            for b in s["blocks"]:
                b["address"] += shift
        t1 = copy.deepcopy(snap["device_traces"][0])
        for e in t1:
            if "addr" in e:
                e["addr"] += shift
        snap["segments"] = snap["segments"] + segs1
        snap["device_traces"] = [snap["device_traces"][0], t1, [], []]
        return snap

    def test_each_device_gets_only_its_own_segments(self):
        snap = self.two_devices()
        one = real_snapshot()
        want = [r[2:] for r in trace.convert(one, 0)]
        for dev in (0, 1):
            self.assertEqual([r[2:] for r in trace.convert(snap, dev)], want, "device %d" % dev)

    def test_several_traces_need_a_choice(self):
        snap = self.two_devices()
        with self.assertRaises(trace.SnapshotError) as e:
            trace.choose_device(snap, None)
        self.assertIn("devices 0, 1 have a trace: choose one with --device N", str(e.exception))

    def test_a_device_without_a_trace_or_absent_is_an_error(self):
        snap = self.two_devices()
        with tempfile.TemporaryDirectory() as d:
            p = write(d, "s.pickle", snap)
            for dev, msg in (("2", "device 2 has no trace; devices with a trace: 0, 1"),
                             ("7", "there is no device 7 in this snapshot; devices with a trace: 0, 1"),
                             ("-1", "--device -1: a device is a number from 0")):
                rc, _, err = run_main([p, os.path.join(d, "o.csv"), "--device", dev])
                self.assertEqual(rc, 2)
                self.assertIn(msg, err)
            snap["segments"][0]["device"] = 3
            p = write(d, "s.pickle", snap)
            rc, _, err = run_main([p, os.path.join(d, "o.csv"), "--device", "3"])
            self.assertIn("device 3 has 1 segments but no trace", err)

    def test_segments_without_history_are_a_packing_problem(self):
        snap = real_snapshot()
        snap["device_traces"] = [[]]
        with self.assertRaises(trace.SnapshotError) as e:
            trace.convert(snap, None)
        self.assertIn("segments but the snapshot has no trace history", str(e.exception))
        self.assertIn("a packing problem", str(e.exception))


class Conversion(unittest.TestCase):
    def test_the_real_pickles_give_the_shared_csvs(self):
        for name in ("cs336_medium_ctx128_inference", "cs336_medium_ctx128_training"):
            csv = support.trace_file("pytorch_snapshots", name + ".csv")
            got = [r[2:] for r in trace.convert(real_snapshot(name), None)]
            self.assertEqual(got, [r[2:] for r in rows_of(csv)])

    def test_an_oom_becomes_a_probe_and_live_blocks_come_first(self):
        rows = trace.convert(small_snapshot(), None)
        self.assertEqual([r[2:] for r in rows[1:]], [
            ["allocate", "0x1", "8000000", "0"],  # live before recording
            ["allocate", "0x2", "1000", "0"], ["free", "0x2", "1000", "0"],
            ["allocate", "0x3", str(64 << 20), "0"], ["free", "0x3", str(64 << 20), "0"],  # the failed request
        ])

    def test_a_csv_is_named_as_one(self):
        with tempfile.TemporaryDirectory() as d:
            p = write(d, "t.csv", b"Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x1,5,0\n")
            rc, _, err = run_main([p, os.path.join(d, "o.csv")])
            self.assertEqual(rc, 2)
            self.assertIn("is an RMM CSV trace already, not a snapshot", err)

    def test_json_snapshots_convert(self):
        with tempfile.TemporaryDirectory() as d:
            p = write(d, "s.json", json.dumps(small_snapshot()).encode())
            rc, out, err = run_main([p, os.path.join(d, "o.csv")])
            self.assertEqual(rc, 0, err)
            self.assertIn("5 events from device 0", out)
            self.assertIn("1 failed requests replayed as probes", out)

    def test_a_failed_write_leaves_nothing_behind(self):
        with tempfile.TemporaryDirectory() as d:
            p = write(d, "s.pickle", small_snapshot())
            out = os.path.join(d, "o.csv")
            with open(out, "w") as f:
                f.write("old\n")
            os.chmod(d, 0o500)
            try:
                if os.access(d, os.W_OK):
                    self.skipTest("running as a user who may write anywhere")
                rc, _, err = run_main([p, out])
            finally:
                os.chmod(d, 0o700)
            self.assertEqual(rc, 2)
            with open(out) as f:
                self.assertEqual(f.read(), "old\n")


class Malformed(unittest.TestCase):
    """Seeded random damage to a valid snapshot: every outcome is a
    conversion or one 'gardenalloc.trace: ...' line, never a traceback."""

    JUNK = [None, "abc", "", -1, 2 ** 70, 1.5, True, [], {}, [[]], {"a": 1}, b"\x00", (1, 2)]

    def paths(self, obj, prefix=()):
        yield prefix
        if isinstance(obj, dict):
            for k, v in obj.items():
                yield from self.paths(v, prefix + (k,))
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                yield from self.paths(v, prefix + (i,))

    def damage(self, snap, r):
        snap = copy.deepcopy(snap)
        for _ in range(r.randint(1, 3)):
            paths = [p for p in self.paths(snap) if p]
            if not paths:
                break
            path = r.choice(paths)
            parent = snap
            for k in path[:-1]:
                parent = parent[k]
            how = r.random()
            if how < 0.35 and isinstance(parent, dict):
                del parent[path[-1]]
            elif how < 0.45 and isinstance(parent, list):
                parent.append(r.choice(self.JUNK))
            else:
                parent[path[-1]] = copy.deepcopy(r.choice(self.JUNK))
        return snap

    def check(self, argv, what):
        rc, out, err = run_main(argv)
        self.assertIn(rc, (0, 2), what)
        if rc == 2:
            self.assertTrue(err.startswith("gardenalloc.trace: "), (what, err))
            self.assertEqual(err.count("\n"), 1, (what, err))
            self.assertNotIn("Traceback", err)
        return rc

    def test_random_damage_gives_a_clear_message(self):
        r = random.Random(16)
        base = small_snapshot()
        seen = {0: 0, 2: 0}
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "o.csv")
            for i in range(600):
                snap = self.damage(base, r)
                p = write(d, "s.pickle", snap)
                dev = r.choice([None, None, "0", "1", "-1"])
                seen[self.check([p, out] + (["--device", dev] if dev else []), (i, snap, dev))] += 1
        self.assertGreater(seen[2], 100)
        self.assertGreater(seen[0], 10)

    def test_named_shapes(self):
        cases = [
            ({"device_traces": "abc"}, "device_traces: expected a list, got 'abc' (str)"),
            ({"device_traces": ["x"]}, "device_traces[0]: expected a list"),
            ({"device_traces": [[{"action": "alloc", "addr": 1, "size": "9"}]]},
             "device_traces[0][0]['size']: expected a whole number, got '9' (str)"),
            ({"device_traces": [[{"action": "alloc", "size": 9}]]}, "device_traces[0][0]: no 'addr' key"),
            ({"device_traces": [[{"action": 3}]]}, "device_traces[0][0]['action']: expected a string"),
            ({"device_traces": [[7]]}, "device_traces[0][0]: expected a dict"),
            ({"segments": 5, "device_traces": [[{"action": "alloc", "addr": 1, "size": 9}]]},
             "segments: expected a list"),
            ([1, 2], "expected a dict with 'segments' and 'device_traces'"),
            ({"x": 1}, "not a memory snapshot"),
        ]
        with tempfile.TemporaryDirectory() as d:
            for snap, msg in cases:
                p = write(d, "s.pickle", snap)
                rc, _, err = run_main([p, os.path.join(d, "o.csv")])
                self.assertEqual(rc, 2, snap)
                self.assertIn(msg, err)
            for data, msg in ((b"", "is empty"), (b"\x80\x04\x95", "is not a readable pickle"),
                              (b"hello", "is neither a pickle nor JSON"), (b"{bad", "looks like JSON")):
                p = write(d, "s.bin", data)
                rc, _, err = run_main([p, os.path.join(d, "o.csv")])
                self.assertEqual(rc, 2)
                self.assertIn(msg, err)
            rc, _, err = run_main([os.path.join(d, "missing.pickle"), os.path.join(d, "o.csv")])
            self.assertIn("cannot read", err)

    def check_bytes(self, argv, what):
        """As check, except that the last line is the message: CPython's C
        unpickler may itself print a line ("SystemError: deallocated bytearray
        object has exported buffers") while it frees the buffer of a damaged
        BYTEARRAY8 opcode."""
        rc, out, err = run_main(argv)
        self.assertIn(rc, (0, 2), what)
        self.assertNotIn("Traceback", err, what)
        if rc == 2:
            self.assertTrue(err.splitlines()[-1].startswith("gardenalloc.trace: "), (what, err))
        return rc

    def test_damaged_bytes_give_a_clear_message(self):
        """The file itself damaged: cut at random lengths, bytes overwritten at
        random (pickle protocols 2 and 4, and JSON), and odd --device values."""
        r = random.Random(15)
        snap = small_snapshot()
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "o.csv")
            originals = [pickle.dumps(snap, protocol=2), pickle.dumps(snap, protocol=4),
                         json.dumps(snap).encode()]
            n = 0
            for data in originals:
                for cut in sorted(set(r.randrange(len(data)) for _ in range(60))):
                    self.check_bytes([write(d, "s.bin", data[:cut]), out], ("cut", cut))
                    n += 1
                for _ in range(120):
                    b = bytearray(data)
                    for _ in range(r.randint(1, 4)):
                        b[r.randrange(len(b))] = r.randrange(256)
                    self.check_bytes([write(d, "s.bin", bytes(b)), out], ("bytes", bytes(b)))
                    n += 1
            p = write(d, "s.pickle", snap)
            for dev in ("abc", "1.5", "99999999999999999999", "", "0x1", "-3"):
                rc, _, err = run_main([p, out, "--device", dev])
                self.assertEqual(rc, 2, "--device %r accepted" % dev)
                self.assertNotIn("Traceback", err)
                self.assertIn("device", err.splitlines()[-1], err)
            self.assertGreater(n, 400)

    def test_as_a_command_no_traceback_either(self):
        with tempfile.TemporaryDirectory() as d:
            p = write(d, "s.pickle", {"device_traces": "abc"})
            r = subprocess.run([sys.executable, "-m", "gardenalloc.trace", p, os.path.join(d, "o.csv"), "--device",
                                "-1"], capture_output=True, text=True, cwd=support.SHIM)
            self.assertEqual(r.returncode, 2)
            self.assertNotIn("Traceback", r.stderr)
            self.assertTrue(r.stderr.startswith("gardenalloc.trace: "), r.stderr)


def deep_tuple_pickle(depth):
    """A pickle of small_snapshot() whose first event is a tuple nested
    `depth` deep (opcodes written out: pickle.dumps itself recurses)."""
    snap = small_snapshot()
    snap["device_traces"][0][0] = "PLACEHOLDER"
    data = pickle.dumps(snap, protocol=2)
    text = b"X\x0b\x00\x00\x00PLACEHOLDER"  # BINUNICODE of the string
    assert data.count(text) == 1
    return data.replace(text, b"(" * depth + b"K\x01" + b"t" * depth)


class HostileInput(unittest.TestCase):
    """Snapshots made to cost time or memory, or to break the error message:
    each is refused in one line (issue 21: memo sharing, huge numbers, deep
    nesting)."""

    def refused(self, data, text):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "o.csv")
            rc, _, err = run_main([write(d, "s.bin", data), out])
            self.assertEqual(rc, 2, err)
            self.assertEqual(err.count("\n"), 1, err)
            self.assertTrue(err.startswith("gardenalloc.trace: "), err)
            self.assertIn(text, err)
            self.assertFalse(os.path.exists(out))
        return err

    def test_segments_sharing_one_blocks_list_through_the_memo(self):
        blocks = [{"address": i << 21, "size": 2 << 20, "requested_size": 1, "state": "active_allocated"}
                  for i in range(400)]
        snap = small_snapshot()
        snap["segments"] = [{"device": 0, "address": 0, "total_size": 2000 << 20, "stream": 0, "blocks": blocks}
                            for _ in range(400)]
        data = pickle.dumps(snap, protocol=4)
        self.assertLess(len(data), 40000, "the memo makes 160,000 blocks out of a small file")
        self.refused(data, "segments[0] and segments[1] share one list of blocks")
        # The same dict repeated (blocks and all) is the same list again.
        snap["segments"] = [snap["segments"][0]] * 400
        self.refused(pickle.dumps(snap, protocol=4), "share one list of blocks")

    def test_a_shared_empty_blocks_list_is_harmless(self):
        snap = small_snapshot()
        empty = []
        snap["segments"] += [{"device": 0, "address": i << 30, "stream": 0, "blocks": empty} for i in range(2, 5)]
        with tempfile.TemporaryDirectory() as d:
            rc, _, err = run_main([write(d, "s.pickle", snap), os.path.join(d, "o.csv")])
            self.assertEqual(rc, 0, err)

    def test_a_five_thousand_digit_number(self):
        for key in ("size", "addr", "stream", "time_us"):
            snap = small_snapshot()
            snap["device_traces"][0][0][key] = 10 ** 5000
            err = self.refused(pickle.dumps(snap, protocol=4), "device_traces[0][0]['%s']: a number of about 5001 "
                               "digits is larger than any size" % key)
            self.assertLess(len(err), 300)
        snap = small_snapshot()
        snap["segments"][0]["blocks"][0]["size"] = -10 ** 5000
        self.refused(pickle.dumps(snap, protocol=4), "a negative number of about 5001 digits is negative")
        snap = small_snapshot()
        snap["device_traces"][0][0]["size"] = "9" * 5000
        err = self.refused(pickle.dumps(snap, protocol=4), "expected a whole number, got '9999")
        self.assertIn("(str of 5000)", err)
        self.assertLess(len(err), 300)

    def test_a_deeply_nested_tuple_where_an_event_belongs(self):
        err = self.refused(deep_tuple_pickle(100000), "device_traces[0][0]: expected a dict, got a tuple of 1 items")
        self.assertLess(len(err), 200)

    def test_json_nested_two_hundred_thousand_deep(self):
        self.refused(b"[" * 200000 + b"]" * 200000, "nests deeper than any snapshot does")
        self.refused(b'{"device_traces": ' + b"[" * 200000 + b"]" * 200000 + b"}", "nests deeper")

    def test_settings_and_oom_facts_keep_only_plain_values(self):
        snap = small_snapshot()
        deep = []
        for _ in range(30):  # 2^30 leaves through shared lists: never walked
            deep = [deep, deep]
        snap["allocator_settings"] = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128", "deep": deep,
                                      "big": 10 ** 5000, "roundup_power2_divisions": [1, 2], 7: "x"}
        snap["device_traces"][0][3]["device_free"] = 10 ** 5000
        facts = trace.summary(snap, 0)
        self.assertTrue(facts["settings"].get("deep", 0) is None, "the shared lists are dropped")  # no repr of them
        self.assertEqual(facts["settings"], {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128", "deep": None,
                                             "big": None, "roundup_power2_divisions": [1, 2]})
        self.assertEqual(facts["oom_device_free"], [None])
        json.dumps(facts)


class Output(unittest.TestCase):
    """OUT is written only where it is new or a regular file (issue 21): a
    device, a pipe or a folder is never replaced by the converted file."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name
        self.snap = write(self.d, "s.pickle", small_snapshot())

    def tearDown(self):
        self.tmp.cleanup()

    def test_a_pipe_a_folder_or_a_link_to_one_is_left_alone(self):
        import stat
        fifo = os.path.join(self.d, "fifo")
        os.mkfifo(fifo)
        folder = os.path.join(self.d, "folder")
        os.mkdir(folder)
        link = os.path.join(self.d, "link")
        os.symlink(fifo, link)
        dangling = os.path.join(self.d, "dangling")
        os.symlink(os.path.join(self.d, "nothing"), dangling)
        for out, what in ((fifo, "it is a pipe; only a new file or a regular file is written"),
                          (folder, "it is a folder"), (link, "it is a link to %s, a pipe" % fifo),
                          (dangling, "it is a link to %s, which does not exist" % os.path.join(self.d, "nothing")), ("/dev/null", "it is a device")):
            rc, _, err = run_main([self.snap, out])
            self.assertEqual(rc, 2, (out, err))
            self.assertEqual(err.count("\n"), 1, err)
            self.assertIn("cannot write %s: %s" % (out, what), err)
        self.assertTrue(stat.S_ISFIFO(os.stat(fifo).st_mode), "the pipe is still a pipe")
        self.assertTrue(stat.S_ISLNK(os.lstat(link).st_mode))
        self.assertTrue(stat.S_ISCHR(os.stat("/dev/null").st_mode))
        self.assertEqual(os.listdir(folder), [])
        self.assertEqual(sorted(os.listdir(self.d)), ["dangling", "fifo", "folder", "link", "s.pickle"],
                         "no temporary file is left")

    def test_a_regular_file_keeps_its_mode_a_new_one_gets_the_umask(self):
        old = os.path.join(self.d, "old.csv")
        with open(old, "w") as f:
            f.write("x\n")
        os.chmod(old, 0o640)
        target = os.path.join(self.d, "target.csv")
        with open(target, "w") as f:
            f.write("y\n")
        link = os.path.join(self.d, "link.csv")
        os.symlink(target, link)
        new = os.path.join(self.d, "new.csv")
        umask = os.umask(0o022)
        try:
            for out in (old, link, new):
                rc, _, err = run_main([self.snap, out])
                self.assertEqual(rc, 0, err)
        finally:
            os.umask(umask)
        self.assertEqual(os.stat(old).st_mode & 0o777, 0o640)
        self.assertEqual(os.stat(new).st_mode & 0o777, 0o644)
        self.assertTrue(os.path.islink(link), "the link stays a link; its target is written")
        self.assertEqual(rows_of(target)[0], trace.HEADER)
        self.assertEqual(rows_of(old), rows_of(new))


if __name__ == "__main__":
    unittest.main()
