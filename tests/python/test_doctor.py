"""gardenalloc doctor: a snapshot whose recorded run hit an OOM (made by
make_oom_snapshot.py, which runs a trace on native mode, PyTorch's policy, and
dumps at the first failure), a real snapshot that fits, a CSV that cannot fit,
and bad input.

The OOM that gardenalloc must avoid is built, not found: where a real trace
first fails at the edge of a device depends on the addresses the device hands
out (PyTorch's best fit breaks ties between equal sizes by address), so a test
that hung on one real trace's edge broke whenever the simulated device placed
memory differently. The built trace fails on every PyTorch setting for reasons
that do not depend on addresses (native: 20 MiB segments each keep an 8 MiB
hole; PyTorch's expandable segments: a grow maps whole 20 MiB pages), with
16 MiB between the device where gardenalloc's expandable modes fit (82 MiB) and
the smallest where a PyTorch setting does (98 MiB). On a real trace the doctor
must reproduce the recorded failure at its event, and its verdict must follow
its own table."""
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import support
from gardenalloc import doctor

HERE = os.path.dirname(os.path.abspath(__file__))
TRAINING = support.trace_file("pytorch_snapshots", "cs336_medium_ctx128_training.csv")
INFERENCE_PICKLE = support.trace_file("pytorch_snapshots", "pickles", "cs336_medium_ctx128_inference.pickle")
MIB = 1 << 20
FRAGMENTED_CAPACITY_MIB = 90  # gardenalloc's expandable modes fit from 82 MiB, PyTorch's settings from 98


def write_fragmented_trace(path):
    """Eight 8 MiB tensors, every other one freed, then 18 MiB: 64 MiB live at
    the peak, 50 at the end. Native mode holds them two to a 20 MiB segment,
    each segment keeping an 8 MiB hole and a 4 MiB tail, and needs a new
    segment for the 18 MiB (98 MiB); PyTorch's expandable segments map the
    18 MiB as two more 20 MiB pages (100 MiB); gardenalloc's map only its
    granules (82 MiB)."""
    rows = ["Thread,Time,Action,Pointer,Size,Stream"]
    events = [("allocate", i + 1, 8 * MIB) for i in range(8)] + \
             [("free", i + 1, 8 * MIB) for i in range(0, 8, 2)] + [("allocate", 100, 18 * MIB)]
    for t, (action, ptr, size) in enumerate(events):
        rows.append("1,00:00:00.%06d,%s,0x%x,%d,0" % (t, action, ptr, size))
    with open(path, "w") as f:
        f.write("\n".join(rows) + "\n")


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = doctor.main(argv)
        except SystemExit as e:
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


@unittest.skipUnless(support.bench_binary(), "ga-bench is not built")
class Doctor(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not TRAINING:
            raise unittest.SkipTest("the real traces are absent")
        cls.tmp = tempfile.TemporaryDirectory()
        fragmented = os.path.join(cls.tmp.name, "fragmented.csv")
        write_fragmented_trace(fragmented)
        cls.oom = os.path.join(cls.tmp.name, "oom.pickle")
        cls.failed_at = cls.make_oom(fragmented, cls.oom, FRAGMENTED_CAPACITY_MIB)
        cls.real_oom = os.path.join(cls.tmp.name, "real_oom.pickle")
        cls.real_failed_at = cls.make_oom(TRAINING, cls.real_oom, 6740)

    @staticmethod
    def make_oom(trace, out, capacity_mib):
        env = dict(os.environ)
        env.setdefault("GARDENALLOC_LIBRARY", os.path.join(support.REPO, "build", "libgardenalloc.so"))
        r = subprocess.run([sys.executable, os.path.join(HERE, "make_oom_snapshot.py"), trace, out,
                            str(capacity_mib)], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise AssertionError(r.stderr)
        return int(r.stdout.strip())

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_the_recorded_oom_is_reproduced_and_the_fix_named(self):
        page = os.path.join(self.tmp.name, "doctor.html")
        rc, out, err = run([self.oom, "--html", page])
        self.assertEqual(rc, 0, err)
        self.assertEqual(self.failed_at, 13, "the last request fails under native mode")
        self.assertIn("The recorded run ran out of memory 1 time", out)
        self.assertIn("Replayed on a simulated GPU of 90.0 MiB (estimated from the recorded OOM", out)
        # PyTorch's policy fails at the very request that failed when it was recorded
        self.assertRegex(out, r"PyTorch, default settings +\d+\.\d MiB +\+\d+\.\d %% +1   event %d" % self.failed_at)
        self.assertIn("Fragmentation, not size.", out)
        self.assertIn("None of PyTorch's settings (max_split_size_mb:128, max_split_size_mb:512, "
                      "expandable_segments:True) avoids it.", out)
        self.assertRegex(out, r"PyTorch, expandable_segments:True +\d+\.\d MiB +\+\d+\.\d %% +1   event %d"
                         % self.failed_at, "PyTorch's expandable segments, replayed exactly, fail too")
        self.assertRegex(out, r"gardenalloc, expandable_segments:True +82\.0 MiB +\+28\.1 % +0   -")
        self.assertIn("gardenalloc avoids it", out)
        self.assertRegex(out, r"\n    GARDENALLOC_CONF=expandable_segments:True\S*\n")
        # the smallest GPU each setting runs on (ga-bench fit), and the best
        self.assertRegex(out, r"PyTorch, default settings .* event %d +98\.0 MiB\n" % self.failed_at)
        self.assertRegex(out, r"PyTorch, expandable_segments:True .* event %d +100\.0 MiB\n" % self.failed_at)
        self.assertRegex(out, r"gardenalloc, expandable_segments:True .* - +82\.0 MiB\n")
        self.assertRegex(out, r"Fits on: the job runs on a GPU of 82\.0 MiB \(1\.281 x its 64\.0 MiB peak live\) "
                              r"with GARDENALLOC_CONF=expandable_segments:True\S*; the smallest with PyTorch's own "
                              r"settings is 98\.0 MiB\.")
        with open(page) as f:
            text = f.read()
        self.assertEqual(len(re.findall("<svg", text)), 6)
        self.assertIn("Fragmentation, not size.", text)

    def test_json_carries_every_replay_and_the_verdict(self):
        rc, out, err = run([self.oom, "--json"])
        self.assertEqual(rc, 0, err)
        j = json.loads(out)
        self.assertEqual(j["capacity_bytes"], FRAGMENTED_CAPACITY_MIB << 20)
        self.assertTrue(j["use"].startswith("GARDENALLOC_CONF=expandable_segments:True"))
        names = [s["name"] for s in j["settings"]]
        self.assertEqual(names, ["pytorch", "split128", "split512", "pt_expandable", "ga_always", "gardenalloc"])
        py = j["settings"][0]["replay"]
        self.assertEqual(py["first_oom"]["event"], self.failed_at)
        self.assertIn("CUDA out of memory", py["first_oom"]["report"])
        self.assertEqual(len(py["curve"]["reserved"]), len(py["curve"]["event"]))
        self.assertEqual({s["name"]: s["replay"]["fits_on_bytes"] >> 20 for s in j["settings"]},
                         {"pytorch": 98, "split128": 98, "split512": 98, "pt_expandable": 100, "ga_always": 82,
                          "gardenalloc": 82})

    def test_a_real_recorded_oom_is_reproduced_and_the_verdict_follows_the_table(self):
        """ctx128 training dumped at its first failure on 6740 MiB: wherever
        that falls, PyTorch's policy fails there again, and the doctor names a
        setting exactly when one replays the snapshot without an OOM."""
        rc, out, err = run([self.real_oom, "--json"])
        self.assertEqual(rc, 0, err)
        j = json.loads(out)
        self.assertEqual(j["capacity_bytes"], 6740 << 20)
        rows = {s["name"]: s for s in j["settings"]}
        self.assertEqual(rows["pytorch"]["replay"]["first_oom"]["event"], self.real_failed_at)
        self.assertEqual(rows["pt_expandable"]["conf"], "expandable_segments:True,expandable_policy:pytorch")
        fits = [s for s in j["settings"] if s["replay"]["num_ooms"] == 0]
        pytorch_fits = [s for s in fits if s["name"] in doctor.PYTORCH_ROWS]
        if pytorch_fits:
            best = min(pytorch_fits, key=lambda s: s["replay"]["peak_reserved_bytes"])
        elif fits:
            best = min(fits, key=lambda s: s["replay"]["peak_reserved_bytes"])
        else:
            best = None
        self.assertEqual(j["use"], best["line"] if best else None)
        rc, out, err = run([self.real_oom])
        self.assertEqual(rc, 0, err)
        self.assertIn("Fragmentation, not size.", out)
        self.assertRegex(out, r"PyTorch, default settings +6\.\d\d GiB +\+\d\.\d %% +1   event %d"
                         % self.real_failed_at)
        if best is None:
            self.assertIn("No setting tried avoids it", out)
        else:
            self.assertIn("\n    %s\n" % best["line"], out)

    def test_a_snapshot_that_fits_says_so(self):
        if not INFERENCE_PICKLE:
            self.skipTest("the real snapshot pickles are absent")
        rc, out, err = run([INFERENCE_PICKLE, "--capacity-gib", "24"])
        self.assertEqual(rc, 0, err)
        self.assertIn("No out-of-memory at 24.00 GiB with PyTorch's allocator as it was set", out)
        self.assertNotIn("Set:", out)

    def test_a_job_larger_than_the_gpu_cannot_be_helped(self):
        rc, out, err = run([TRAINING, "--capacity-gib", "6"])
        self.assertEqual(rc, 0, err)
        self.assertIn("Does not fit. At its peak the program has 6.53 GiB live at once, more than the 6.00 GiB", out)
        self.assertIn("no allocator and no setting can run it", out)

    def test_the_capacity_just_above_peak_live_with_a_csv(self):
        rc, out, err = run([TRAINING, "--capacity-gib", "6.56"])
        self.assertEqual(rc, 0, err)
        self.assertIn("Fragmentation, not size.", out)
        self.assertIn("Replayed on a simulated GPU of 6.56 GiB (given)", out)

    def test_bad_input_is_one_line(self):
        with tempfile.TemporaryDirectory() as d:
            evil = os.path.join(d, "evil.pickle")
            with open(evil, "wb") as f:
                f.write(b"cos\nsystem\n(S'true'\ntR.")
            for argv, msg in (([evil], "refuses to load the global os.system"),
                              ([TRAINING, "--capacity-gib", "-1"], "--capacity-gib -1.0"),
                              ([TRAINING, "--device", "1"], "--device applies to a snapshot"),
                              ([os.path.join(d, "none.pickle")], "cannot read")):
                rc, out, err = run(argv)
                self.assertEqual(rc, 2, argv)
                self.assertTrue(err.startswith("gardenalloc doctor: "), err)
                self.assertIn(msg, err)

    def test_the_page_is_written_only_where_a_file_may_be(self):
        import stat
        with tempfile.TemporaryDirectory() as d:
            fifo = os.path.join(d, "fifo")
            os.mkfifo(fifo)
            rc, out, err = run([TRAINING, "--capacity-gib", "80", "--html", fifo])
            self.assertEqual(rc, 2)
            self.assertEqual(err, "gardenalloc doctor: cannot write %s: it is a pipe; only a new file or a regular "
                                  "file is written\n" % fifo)
            self.assertTrue(stat.S_ISFIFO(os.stat(fifo).st_mode))
            self.assertEqual(os.listdir(d), ["fifo"], "no temporary file is left")
            page = os.path.join(d, "page.html")
            umask = os.umask(0o022)
            try:
                rc, out, err = run([TRAINING, "--capacity-gib", "80", "--html", page])
            finally:
                os.umask(umask)
            self.assertEqual(rc, 0, err)
            self.assertEqual(os.stat(page).st_mode & 0o777, 0o644, "a new page gets the umask's mode")

    def test_each_chart_carries_its_legend_and_round_ticks_inside_its_frame(self):
        with tempfile.TemporaryDirectory() as d:
            page = os.path.join(d, "page.html")
            rc, out, err = run([TRAINING, "--capacity-gib", "7", "--html", page])
            self.assertEqual(rc, 0, err)
            with open(page) as f:
                svgs = re.findall(r"<svg .*?</svg>", f.read(), re.S)
        self.assertEqual(len(svgs), 6)
        events = int(re.search(r"(\d+) events", out).group(1)) if re.search(r"(\d+) events", out) else None
        for svg in svgs:
            width = int(re.search(r'width="(\d+)"', svg).group(1))
            labels = re.findall(r"<text [^>]*>([^<]*)</text>", svg)
            for name in ("reserved", "allocated", "live", "GPU capacity", "peak live", "first OOM"):
                self.assertIn(name, labels, "the legend is in the chart")
            # x ticks: the labels under the axis that are whole numbers, in order
            ticks = [int(t) for t in labels if t.isdigit()]
            self.assertGreaterEqual(len(ticks), 3)
            step = ticks[1] - ticks[0]
            self.assertEqual(ticks[0], 0)
            self.assertTrue(all(b - a == step for a, b in zip(ticks, ticks[1:])), ticks)
            mant = step / 10 ** (len(str(step)) - 1)
            self.assertIn(mant, (1, 2, 5), "ticks fall on round numbers: %s" % ticks)
            if events:
                self.assertLessEqual(ticks[-1], events, "no tick past the last event")
            for x in re.findall(r'<text x="([\d.]+)"[^>]*text-anchor="middle"', svg):
                self.assertLess(float(x) + 20, width, "a tick label is not cut by the frame")

    def test_as_a_command(self):
        r = subprocess.run([sys.executable, "-m", "gardenalloc", "doctor", TRAINING, "--capacity-gib", "80"],
                           capture_output=True, text=True, cwd=support.SHIM)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("No out-of-memory at 80.00 GiB", r.stdout)
        r = subprocess.run([sys.executable, "-m", "gardenalloc", "--help"], capture_output=True, text=True,
                           cwd=support.SHIM)
        self.assertIn("doctor", r.stdout)


class OwnSettings(unittest.TestCase):
    def rows(self, own):
        return {s[0]: s for s in doctor.settings_for({"settings": {"PYTORCH_CUDA_ALLOC_CONF": own}})}

    def test_the_recorded_settings_are_replayed_with_the_policy_they_name(self):
        self.assertNotIn("yours", self.rows("expandable_segments:True"), "that is the pt_expandable row")
        yours = self.rows("expandable_segments:True,max_split_size_mb:256")["yours"]
        self.assertEqual(yours[2], "expandable_segments:True,max_split_size_mb:256,expandable_policy:pytorch",
                         "PyTorch's expandable segments, not gardenalloc's")
        self.assertEqual(yours[3], "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,max_split_size_mb:256")
        self.assertEqual(self.rows("max_split_size_mb:64")["yours"][2], "max_split_size_mb:64")
        self.assertNotIn("yours", self.rows("max_split_size_mb:128"))
        self.assertEqual(self.rows("backend:sim,expandable_segments:True")["pt_expandable"][2],
                         "expandable_segments:True,expandable_policy:pytorch")


if __name__ == "__main__":
    unittest.main()
