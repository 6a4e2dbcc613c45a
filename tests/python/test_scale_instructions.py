"""bench/tools/scale_instructions.py: the instructions per call of each
operation `ga-bench scale` times, at each N, under callgrind, without and with
the simulated device's operations; the tables, the largest-over-smallest ratio
lines, and a series that stops early named as such. Runs at N = 10^3 and
3*10^3 on a few series. Needs valgrind and ga-bench (skipped without them)."""
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # support.py, however the test is started
import support  # noqa: E402

TOOL = os.path.join(support.REPO, "bench", "tools", "scale_instructions.py")
BENCH = support.bench_binary()
sys.path.insert(0, os.path.dirname(TOOL))
import scale_instructions  # noqa: E402

METRICS = [m for m, _, _ in scale_instructions.METRICS]


class Parts(unittest.TestCase):
    def test_a_count_fits_its_column(self):
        self.assertEqual(scale_instructions.count(96), "96")
        self.assertEqual(scale_instructions.count(26405.05), "26405")
        self.assertEqual(scale_instructions.count(123456), "123k")
        self.assertEqual(scale_instructions.count(4410000), "4.41M")
        self.assertEqual(scale_instructions.count(4.5), "4.5")

    def test_a_device_call_is_charged_to_the_nearest_timed_function(self):
        m = scale_instructions.CONTEXT.match(
            "  18,920 ( 0.53%)  ???:sim_malloc.lto_priv.0'alloc_block.lto_priv.0'ga_malloc'scale_op_reuse'round_reuse"
            "'main'(below main)'0x1ab70 [/x/ga-bench]")
        self.assertIsNotNone(m)
        self.assertEqual((m.group(1), m.group(2)), ("18,920", "sim_malloc.lto_priv.0"))
        chain = [scale_instructions.base_name(c) for c in m.group(3).split("'")]
        self.assertEqual(next(c for c in chain if c in scale_instructions.WRAPPERS), "scale_op_reuse")

    def test_without_valgrind_it_says_so(self):
        support.assert_needs_valgrind(self, TOOL, BENCH)


@unittest.skipUnless(BENCH and shutil.which("valgrind"), "needs ga-bench (build/bench/ga-bench) and valgrind")
class ScaleInstructions(unittest.TestCase):
    ARGS = ["--max-n", "3000", "--budget-s", "600", "--modes", "native,expandable,glibc", "--patterns", "4k"]

    @classmethod
    def setUpClass(cls):
        cls.table = cls.run_tool()
        cls.rows = [json.loads(x) for x in cls.run_tool("--json").splitlines()]

    @classmethod
    def run_tool(cls, *args, extra=None):
        r = subprocess.run([sys.executable, TOOL, "--bench", BENCH] + (extra or cls.ARGS) + list(args),
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise AssertionError("scale_instructions.py failed (%d): %s" % (r.returncode, r.stderr))
        return r.stdout

    def test_every_series_has_every_point_and_metric(self):
        got = sorted((r["series"], r["n"]) for r in self.rows)
        self.assertEqual(got, [(s, n) for s in ("expandable 4k", "glibc 4k", "native 4k") for n in (1000, 3000)])
        for r in self.rows:
            self.assertIsNone(r["stopped"])
            self.assertEqual(r["rounds"], 1)
            self.assertEqual(r["capacity_mb"], 49152)
            want = METRICS if r["mode"] != "glibc" else ["alloc", "free", "reuse"]
            self.assertEqual(sorted(r["instructions"]), sorted(want), r)
            self.assertEqual(sorted(r["with_device"]), sorted(want), r)
            # At least 2000 timed allocations, frees and reuses a point; 20 releases and 5 fits.
            for m in ("alloc", "free", "reuse"):
                self.assertGreaterEqual(r["calls"][m], 2000)
            for m, k in (("empty_cache", 20), ("refused", 20), ("would_fit", 5), ("largest_free", 5),
                         ("would_grow", 5)):
                self.assertEqual(r["calls"][m], k if r["mode"] != "glibc" else 0)

    def test_counts_are_plausible_and_the_device_only_adds(self):
        for r in self.rows:
            per, dev = r["instructions"], r["with_device"]
            for m in per:
                self.assertGreater(per[m], 50 if m != "largest_free" else 20, r)  # a call is never free
                self.assertLessEqual(per[m], dev[m], r)
            self.assertLess(per["free"], 100000, r)
            self.assertLess(per["alloc"], 100000, r)
            if r["mode"] == "glibc":
                self.assertEqual(per, dev)  # no allocator, no device
            else:
                # The retry ladder and its out-of-memory report are far more than a free.
                self.assertGreater(per["refused"], 5 * per["free"], r)
                self.assertGreater(dev["refused"], per["refused"], r)  # the report asks the device for its memory
                # Past every free block the dry run takes the ladder's first step, which asks the device's
                # free memory once (the answer from the cache alone asks nothing).
                self.assertGreater(dev["would_grow"], per["would_grow"], r)
                self.assertEqual(dev["would_fit"], per["would_fit"], r)
        # Native 4 KiB blocks: the first allocations reserve segments, a device call.
        native = [r for r in self.rows if r["series"] == "native 4k" and r["n"] == 1000][0]
        self.assertGreater(native["with_device"]["alloc"], native["instructions"]["alloc"])

    def test_the_tables_hold_the_json_counts(self):
        for m, _, title in scale_instructions.METRICS:
            self.assertIn("\n%s:\n" % title, self.table)
        block = self.table.split("free of a random live block:\n", 1)[1].split("\n\n", 1)[0].splitlines()
        self.assertEqual(block[0].split(), ["N", "live", "native", "expandable", "glibc"])
        for line in block[2:]:
            n, *cells = line.split()
            for series, c in zip(("native 4k", "expandable 4k", "glibc 4k"), cells):
                r = [x for x in self.rows if x["series"] == series and x["n"] == int(n)][0]
                self.assertEqual(c, "%.0f" % r["instructions"]["free"])

    def test_a_ratio_line_per_metric_and_series(self):
        lines = [x for x in self.table.splitlines() if re.match(r"^\w+ +\w+ 4k +1000 -> 3000 ", x)]
        want = {(m, s) for m in METRICS for s in ("native", "expandable")}
        want |= {(m, "glibc") for m in ("alloc", "free", "reuse")}
        self.assertEqual({tuple(x.split()[:2]) for x in lines}, want)
        for x in lines:
            m = re.search(r" ([\d.]+)x \(([\d.]+)x\), spread ([\d.]+)x", x)
            self.assertIsNotNone(m, x)
            ratio = float(m.group(1))
            self.assertEqual("NOT FLAT" in x, ratio > 2.0 or float(m.group(2)) > 2.0, x)
            metric, mode = x.split()[:2]
            rows = {r["n"]: r for r in self.rows if r["series"] == mode + " 4k"}
            self.assertAlmostEqual(ratio, rows[3000]["instructions"][metric] / rows[1000]["instructions"][metric],
                                   delta=0.006)
        self.assertNotIn("stopped early", self.table)

    def test_a_series_that_stops_is_named(self):
        # A budget far too small for the 3000-block point: the series stops there and says so.
        args = ["--max-n", "3000", "--budget-s", "0.001", "--modes", "native", "--patterns", "4k"]
        out = self.run_tool(extra=args)
        self.assertRegex(out, r"stopped early.*\n  native 4k: time budget reached")
        rows = [json.loads(x) for x in self.run_tool("--json", extra=args).splitlines()]
        self.assertTrue(rows)
        for r in rows:
            self.assertEqual(r["series"], "native 4k")
            self.assertIn("time budget reached", r["stopped"])


if __name__ == "__main__":
    unittest.main()
