"""gardenalloc's snapshots read by PyTorch's own tools.

* One truth, both views: the snapshot's segments add up to memory_stats()
  (reserved bytes with the page cache, per pool; the segment count; allocated
  and requested bytes), natively and with expandable segments.
* PyTorch's viewer (MemoryViz.js, "Allocator State History") replays every
  event of an expandable snapshot: memviz_replay.py follows its rules (the
  real viewer in a browser is the reference, tests/viz/README.md).
* torch/cuda/_memory_viz.py, read out of the torch wheel on PyPI (cached in
  ~/.cache/gardenalloc, never in the repository), runs stats, trace,
  segments, memory, trace_plot and segment_plot on those snapshots as a plain
  script, and its totals equal memory_stats(). Without PyPI these tests say
  so and skip; the others still run.
"""
import glob
import json
import os
import pickle
import random
import subprocess
import sys
import tempfile
import unittest
import zipfile

import support
import memviz_replay

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_VERSION = os.environ.get("GA_TORCH_VERSION", "2.15.0")
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "gardenalloc")
TRAINING = support.trace_file("pytorch_snapshots", "cs336_medium_ctx128_training.csv")
CONFS = {
    "native": "backend:sim,sim_capacity_mb:16384",
    "expandable": "backend:sim,sim_capacity_mb:16384,expandable_segments:True",
    "expandable_settle": "backend:sim,sim_capacity_mb:16384,expandable_segments:True,"
                         "expandable_move_pages:settle",
    "expandable_2m_pressed": "backend:sim,sim_capacity_mb:2048,expandable_segments:True,expandable_page_size_mb:2",
}


def mix_trace(path):
    """A seeded mix on three streams, small and large sizes."""
    r = random.Random(7)
    live, rows, nid = [], ["Thread,Time,Action,Pointer,Size,Stream"], 0
    for _ in range(4000):
        if live and r.random() < 0.47:
            i, n, s = live.pop(r.randrange(len(live)))
            rows.append("1,0,free,%#x,%d,%d" % (i, n, s))
        else:
            nid += 1
            n, s = r.choice([r.randrange(1, 1 << 20), r.randrange(1 << 20, 48 << 20)]), r.choice([0, 16, 32])
            live.append((nid, n, s))
            rows.append("1,0,allocate,%#x,%d,%d" % (nid, n, s))
    with open(path, "w") as f:
        f.write("\n".join(rows) + "\n")


SNAPS = {}
TMP = None


def setUpModule():
    global TMP
    TMP = tempfile.TemporaryDirectory()
    mix = os.path.join(TMP.name, "mix.csv")
    mix_trace(mix)
    env = dict(os.environ)
    env.setdefault("GARDENALLOC_LIBRARY", os.path.join(support.REPO, "build", "libgardenalloc.so"))
    jobs = [(name, conf, trace_name, trace, ["--stacks", "all"] if trace_name == "mix" else [])
            for name, conf in CONFS.items() for trace_name, trace in (("training", TRAINING), ("mix", mix)) if trace]
    if TRAINING:  # the cache kept: the state the viewer broke on
        jobs.append(("expandable", CONFS["expandable"], "training_cached", TRAINING, ["--no-empty-cache"]))
    for name, conf, trace_name, trace, extra in jobs:
        out = os.path.join(TMP.name, "%s_%s" % (name, trace_name))
        r = subprocess.run([sys.executable, os.path.join(HERE, "make_snapshot.py"), conf, trace, out + ".pickle",
                            out + ".json"] + extra, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise AssertionError("%s: %s" % (out, r.stderr))
        with open(out + ".pickle", "rb") as f:
            snap = pickle.load(f)  # written by this test
        with open(out + ".json") as f:
            SNAPS[(name, trace_name)] = (out + ".pickle", snap, json.load(f))


def tearDownModule():
    TMP.cleanup()


class OneTruth(unittest.TestCase):
    def test_segments_add_up_to_memory_stats(self):
        for key, (_, snap, stats) in SNAPS.items():
            segs = snap["segments"]
            with self.subTest(key):
                self.assertEqual(sum(s["total_size"] for s in segs), stats["reserved_bytes.all.current"])
                cache = sum(s["total_size"] for s in segs if s.get("page_cache"))
                self.assertEqual(cache, stats["page_cache_bytes.current"])
                mapped = [s for s in segs if not s.get("page_cache")]
                self.assertEqual(len(mapped), stats["segment.all.current"])
                for pool in ("small", "large"):
                    self.assertEqual(sum(s["total_size"] for s in segs if s["segment_type"] == pool),
                                     stats["reserved_bytes.%s_pool.current" % pool], pool)
                    self.assertEqual(sum(1 for s in mapped if s["segment_type"] == pool),
                                     stats["segment.%s_pool.current" % pool], pool)
                blocks = [b for s in segs for b in s["blocks"]]
                self.assertEqual(sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
                                 stats["allocated_bytes.all.current"])
                self.assertEqual(sum(b["requested_size"] for b in blocks if b["state"] != "inactive"),
                                 stats["requested_bytes.all.current"])
        self.assertTrue(any(st["page_cache_bytes.current"] for _, _, st in SNAPS.values()),
                        "some snapshot holds a page cache")
        self.assertTrue(any(st["num_granules_moved"] for _, _, st in SNAPS.values()), "some snapshot moved pages")


class Viewer(unittest.TestCase):
    def test_every_event_of_every_snapshot_replays(self):
        for key, (_, snap, _) in SNAPS.items():
            with self.subTest(key):
                n = memviz_replay.check_every_event(snap)
                self.assertGreater(n, 1000)
                segs, blocks = memviz_replay.state_at(snap, 0, -1)  # before the first event: nothing mapped
                self.assertEqual([s for s in segs if s["addr"] >= 1 << 40], [])

    def test_a_range_mapped_at_once_and_unmapped_in_part_breaks_the_viewer(self):
        """Why one event per granule: the same snapshot with the map events of
        adjacent granules merged into one range (as a map of several granules
        would record) throws where the viewer did."""
        _, snap, _ = SNAPS[("expandable", "training")]
        events, merged = snap["device_traces"][0], []
        for e in events:
            last = merged[-1] if merged else None
            if last and e["action"] == last["action"] == "segment_map" and last["addr"] + last["size"] == e["addr"]:
                last["size"] += e["size"]
                continue
            merged.append(dict(e))
        broken = dict(snap, device_traces=[merged])
        with self.assertRaises(memviz_replay.ViewerError) as e:
            memviz_replay.check_every_event(broken)
        self.assertIn("unmap_segment finds no segment", str(e.exception))

    def test_the_real_pytorch_snapshots_replay_too(self):
        for name in ("cs336_medium_ctx128_inference", "cs336_medium_ctx128_training"):
            p = support.trace_file("pytorch_snapshots", "pickles", name + ".pickle")
            if not p:
                self.skipTest("the real snapshot pickles are absent")
            with open(p, "rb") as f:
                self.assertGreater(memviz_replay.check_every_event(pickle.load(f)), 1000)


def memory_viz():
    """_memory_viz.py of torch TORCH_VERSION, from the cache or the wheel on
    PyPI. (path, None) or (None, why)."""
    d = os.path.join(CACHE, "torch-" + TORCH_VERSION)
    path = os.path.join(d, "_memory_viz.py")
    if os.path.exists(path):
        return path, None
    wheels = os.path.join(CACHE, "wheels")
    os.makedirs(wheels, exist_ok=True)
    found = glob.glob(os.path.join(wheels, "torch-%s-*.whl" % TORCH_VERSION))
    if not found:
        # The file is pure Python, the same in every wheel of a version: take the smallest (aarch64, no CUDA).
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                            "--platform", "manylinux_2_28_aarch64", "--python-version", "3.11", "-d", wheels,
                            "torch==" + TORCH_VERSION], capture_output=True, text=True)
        found = glob.glob(os.path.join(wheels, "torch-%s-*.whl" % TORCH_VERSION))
        if r.returncode != 0 or not found:
            tail = (r.stderr.strip().splitlines() or ["pip failed"])[-1]
            return None, "the torch %s wheel cannot be fetched from PyPI (%s)" % (TORCH_VERSION, tail)
    os.makedirs(d, exist_ok=True)
    with zipfile.ZipFile(found[0]) as z:
        data = z.read("torch/cuda/_memory_viz.py")
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)
    for w in found:  # keep the one file, not 500 MB
        os.remove(w)
    return path, None


# flamegraph.pl stands in for the real one, which _memory_viz.py would
# download from GitHub: it keeps the folded lines it is given and draws nothing.
FLAMEGRAPH = """#!%s
import os, sys
data = sys.stdin.read()
with open(os.environ["GA_FOLDED"], "w") as f:
    f.write(data)
print("<svg xmlns='http://www.w3.org/2000/svg'></svg>")
""" % sys.executable


class MemoryVizScript(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.script, why = memory_viz()
        if not cls.script:
            print("\ntest_viz: %s; PyTorch's _memory_viz.py checks skipped" % why, file=sys.stderr)
            raise unittest.SkipTest(why)
        cls.home = tempfile.TemporaryDirectory()
        os.makedirs(os.path.join(cls.home.name, ".cache"))
        fg = os.path.join(cls.home.name, ".cache", "flamegraph.pl")
        with open(fg, "w") as f:
            f.write(FLAMEGRAPH)
        os.chmod(fg, 0o755)

    @classmethod
    def tearDownClass(cls):
        cls.home.cleanup()

    def viz(self, *args):
        folded = os.path.join(self.home.name, "folded.txt")
        env = dict(os.environ, HOME=self.home.name, GA_FOLDED=folded)
        r = subprocess.run([sys.executable, self.script] + list(args), capture_output=True, text=True, env=env,
                           cwd=self.home.name)
        self.assertEqual(r.returncode, 0, "%s: %s" % (args, r.stderr[-2000:]))
        return r.stdout, folded

    def test_every_command_runs_and_the_totals_are_memory_stats(self):
        for key, (path, snap, stats) in SNAPS.items():
            with self.subTest(key):
                out, _ = self.viz("stats", path)
                self.assertIn("segments: %d" % len(snap["segments"]), out)
                self.assertIn("total_reserved: ", out)
                out, _ = self.viz("trace", path)
                self.assertIn("Device 0 ----------------", out)
                self.assertIn("TOTAL MEM:", out)
                for cmd in ("segments", "memory"):
                    _, folded = self.viz(cmd, path, "-o", os.path.join(self.home.name, cmd + ".svg"))
                    with open(folded) as f:
                        lines = [l.rsplit(" ", 1) for l in f.read().splitlines() if l]
                    self.assertEqual(sum(int(n) for _, n in lines), stats["reserved_bytes.all.current"], cmd)
                    live = sum(int(n) for name, n in lines if ";active_allocated;" in name and "<gaps>" not in name)
                    self.assertEqual(live, stats["requested_bytes.all.current"], cmd)
                    if key[1] == "mix":  # recorded with stacks="all"
                        self.assertTrue(any("libgardenalloc.so:0:ga_torch_alloc_nothrow" in name for name, _ in lines),
                                        "the live blocks' stacks reach the flame graph")
                for cmd in ("trace_plot", "segment_plot"):
                    page = os.path.join(self.home.name, cmd + ".html")
                    self.viz(cmd, path, "-o", page)
                    with open(page) as f:
                        text = f.read()
                    self.assertIn("MemoryViz.js", text)
                    self.assertIn("snapshot.pickle", text)


if __name__ == "__main__":
    unittest.main()
