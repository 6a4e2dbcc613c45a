"""ga-bench as a researcher uses it: results that survive a failed run, --out
from any folder, plain CSV and JSON with the command beside them (pasted back,
it makes the same results), several configurations side by side in replay,
--json and --help on every command, the first OOM's report."""
import csv
import json
import os
import re
import shlex
import subprocess
import tempfile
import unittest

import support

BENCH = support.bench_binary()
TRACE = "Thread,Time,Action,Pointer,Size,Stream\n" + "".join(
    "1,0,allocate,0x%x,%d,0\n1,0,free,0x%x,%d,0\n" % (i, (i % 7 + 1) << 20, i, (i % 7 + 1) << 20)
    for i in range(1, 40)) + "1,0,allocate,0x100,%d,0\n" % (30 << 20)


def read(path):
    with open(path) as f:
        return f.read()


def run(args, cwd, check=True):
    r = subprocess.run([BENCH] + args, cwd=cwd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError("ga-bench %s: %d\n%s" % (" ".join(args), r.returncode, r.stderr))
    return r


@unittest.skipUnless(BENCH, "ga-bench is not built (build/bench/ga-bench)")
class Results(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name
        self.trace = os.path.join(self.d, "t 1.csv")  # a space: the command must quote it
        with open(self.trace, "w") as f:
            f.write(TRACE)

    def tearDown(self):
        self.tmp.cleanup()

    def test_out_from_another_folder_plain_files_and_a_command_that_pastes_back(self):
        out = os.path.join(self.d, "deep", "er", "res")
        run(["run", "--trace", self.trace, "--config", "n=", "--config", "e=expandable_segments:True",
             "--out", "deep/er/res"], cwd=self.d)
        with open(os.path.join(out, "run.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual([r["config"] for r in rows], ["n", "e"])
        self.assertTrue(all(int(r["peak_reserved_bytes"]) > 0 for r in rows))
        with open(os.path.join(out, "run.cmd")) as f:
            cmd = f.read().strip()
        with open(os.path.join(out, "t 1.svg")) as f:
            self.assertIn("<desc>", f.read())
        first = read(os.path.join(out, "run.csv"))
        os.remove(os.path.join(out, "run.csv"))
        subprocess.run(cmd, shell=True, check=True, capture_output=True, cwd="/")
        again = read(os.path.join(out, "run.csv"))
        strip = lambda t: [",".join(l.split(",")[:-2]) for l in t.splitlines()]  # noqa: E731 (timings differ)
        self.assertEqual(strip(again), strip(first))

    def test_plots_name_coinciding_lines_their_timing_and_end_at_the_last_event(self):
        out = os.path.join(self.d, "res")
        run(["run", "--trace", self.trace, "--conf", "n=", "--conf", "again=", "--conf",
             "e=expandable_segments:True", "--out", out], cwd=self.d)
        with open(os.path.join(out, "t 1.svg")) as f:
            svg = f.read()
        self.assertIn(">the same line as n</text>", svg)  # "again" hides under "n"
        self.assertEqual(svg.count("the same line as"), 1)  # "e" differs from both
        self.assertRegex(svg, r">t 1: reserved memory")  # no timing named at the defaults
        ticks = [int(t) for t in re.findall(r'text-anchor="middle">(\d+)</text>', svg)]
        with open(self.trace) as f:
            events = sum(1 for line in f) - 1
        self.assertTrue(ticks and max(ticks) <= events, (ticks, events))
        run(["run", "--trace", self.trace, "--lag-us", "5000", "--iterations", "3", "--out", out], cwd=self.d)
        with open(os.path.join(out, "t 1.svg")) as f:
            self.assertIn(">t 1 (GPU 5 ms behind, 3 iterations): reserved memory", f.read())

    def test_a_failed_run_keeps_the_old_results(self):
        out = os.path.join(self.d, "res")
        run(["run", "--trace", self.trace, "--out", out], cwd=self.d)
        before = {n: read(os.path.join(out, n)) for n in os.listdir(out)}
        bad = os.path.join(self.d, "bad.csv")
        with open(bad, "w") as f:
            f.write("Thread,Time,Action,Pointer,Size,Stream\n1,0,free,0x9,100,0\n")
        r = run(["run", "--trace", self.trace, "--trace", bad, "--out", out], cwd=self.d, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("the results in %s are unchanged" % out, r.stderr)
        after = {n: read(os.path.join(out, n)) for n in os.listdir(out)}
        self.assertEqual(after, before)

    def test_replay_side_by_side_with_json_and_the_first_oom(self):
        args = ["replay", self.trace, "--conf", "native=", "--conf", "exp=expandable_segments:True",
                "--capacity-mb", "24"]
        table = run(args, cwd=self.d).stdout
        self.assertIn("native", table)
        self.assertIn("exp", table)
        self.assertIn("out-of-memory errors; the first, at event 79 (31457280 bytes asked):", table)
        self.assertIn("CUDA out of memory. Tried to allocate", table)
        lines = run(args + ["--json", "--samples", "8", "--size-scale", "1"], cwd=self.d).stdout.splitlines()
        objs = [json.loads(l) for l in lines]
        self.assertEqual([o["config"] for o in objs], ["native", "exp"])
        for o in objs:
            for k in ("num_granules_moved", "num_unmap_syncs", "size_scale", "num_device_alloc", "trace_peak_live_bytes",
                      "peak_reserved_bytes", "first_oom", "curve", "command", "device_calls"):
                self.assertIn(k, o)
            self.assertEqual(o["num_ooms"], 1)
            self.assertEqual(o["first_oom"]["event"], 79)
            self.assertEqual(len(o["curve"]["reserved"]), len(o["curve"]["event"]))
            self.assertEqual(max(o["curve"]["reserved"]), o["peak_reserved_bytes"], "the curve keeps the peak")
            self.assertEqual(shlex.split(o["command"])[4:], ["replay"] + args[1:] + ["--json", "--samples", "8",
                                                                                   "--size-scale", "1"])

    def test_json_and_help_everywhere(self):
        for sub in ("run", "replay", "hotpath", "drivercost", "keys"):
            r = run([sub, "--help"], cwd=self.d)
            self.assertTrue(r.stdout.startswith("usage: ga-bench " + sub), sub)
        keys = [json.loads(l) for l in run(["keys", "--json"], cwd=self.d).stdout.splitlines()]
        self.assertIn("expandable_segments", [k["key"] for k in keys])
        dc = json.loads(run(["drivercost", "--backend", "sim", "--reps", "2", "--json"], cwd=self.d).stdout)
        self.assertIn("map", dc["us_median"])
        hp = [json.loads(l) for l in run(["hotpath", "--pairs", "1000", "--sizes", "4k,8m", "--modes",
                                          "native,expandable", "--json"], cwd=self.d).stdout.splitlines()]
        self.assertEqual([(h["mode"], h["bytes"]) for h in hp],
                         [("native", 4096), ("native", 8 << 20), ("expandable", 4096), ("expandable", 8 << 20)])
        self.assertGreater(hp[0]["worker"]["ga_ns_per_pair"], 0)
        th = [json.loads(l) for l in run(["hotpath", "--pairs", "1000", "--sizes", "4k", "--threads", "1,2",
                                          "--json"], cwd=self.d).stdout.splitlines()]
        self.assertEqual([t["threads"] for t in th if t["allocator"] == "C library"], [1, 2])
        out = os.path.join(self.d, "j")
        lines = run(["run", "--workload", "pytorch_cases", "--scale", "0.1", "--json", "--out", out],
                    cwd=self.d).stdout.splitlines()
        self.assertEqual([json.loads(l)["config"] for l in lines],
                         ["native", "native_split128", "pytorch_expandable", "expandable", "expandable_2m",
                          "expandable_settle"])

    def test_built_in_workloads_replay_and_fit_by_name(self):
        rows = [json.loads(l) for l in run(["replay", "workload:all", "--json"], cwd=self.d).stdout.splitlines()
                if l.startswith("{")]
        self.assertEqual([o["trace"] for o in rows],
                         ["workload:" + n for n in ("llm_serving", "training", "diffusion_unet", "growing_workspace",
                                                    "heavy_tailed_mix", "pytorch_cases")])
        fit = [json.loads(l) for l in run(["fit", "workload:pytorch_cases", "--json"], cwd=self.d).stdout.splitlines()
               if l.startswith("{")]
        self.assertEqual(len(fit), 1)
        self.assertEqual(fit[0]["peak_live_bytes"], rows[-1]["trace_peak_live_bytes"])
        self.assertGreaterEqual(fit[0]["fits_on_bytes"], fit[0]["peak_live_bytes"])
        self.assertLessEqual(fit[0]["fits_on_bytes"], fit[0]["peak_reserved_80g_bytes"])
        for cmd in ("replay", "fit"):
            r = run([cmd, "workload:no_such"], cwd=self.d, check=False)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("workload:no_such: no such built-in workload", r.stderr)

    def test_bad_options_are_named(self):
        for args, msg in ((["replay", self.trace, "--size-scale", "0"], "--size-scale '0' must be"),
                          (["replay", self.trace, "--conf", "x=max_split_size_mb:1"], "configuration x:"),
                          (["run", "--size-scale", "-3"], "--size-scale '-3'"),
                          (["replay", self.trace, "--samples", "1"], "--samples '1'")):
            r = run(args, cwd=self.d, check=False)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(msg, r.stderr)

@unittest.skipUnless(BENCH, "ga-bench is not built (build/bench/ga-bench)")
class Settings(unittest.TestCase):
    """Configuration on ga-bench's command line (issue 22): one option name,
    KEY=VALUE where it can only mean KEY:VALUE, messages never cut short, a
    version, and nothing on stdout for a replay that failed."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name
        self.trace = os.path.join(self.d, "t.csv")
        with open(self.trace, "w") as f:
            f.write(TRACE)

    def tearDown(self):
        self.tmp.cleanup()

    def test_key_equals_value_is_key_colon_value_where_nothing_else_is_meant(self):
        r = run(["replay", self.trace, "--conf", "expandable_segments=True"], cwd=self.d)
        self.assertIn('configuration: "expandable_segments:True"', r.stdout)
        for conf in ("expandable_segments=True,max_split_size_mb=128", "max_split_size_mb=expandable_segments:True"):
            r = run(["replay", self.trace, "--conf", conf], cwd=self.d, check=False)
            self.assertEqual(r.returncode, 2, conf)
            self.assertIn("the separator between a key and its value is ':'", r.stderr)
        r = run(["replay", self.trace, "--conf", "exp=expandable_segments:True"], cwd=self.d)
        self.assertIn('configuration: "expandable_segments:True"', r.stdout, "NAME=STR names a configuration")

    def test_an_unknown_key_is_named_in_full_or_with_the_closest(self):
        r = run(["replay", self.trace, "--conf", "pinned_use_cuda_host_registe:True"], cwd=self.d, check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("unrecognized GARDENALLOC_CONF key 'pinned_use_cuda_host_registe': did you mean "
                      "'pinned_use_cuda_host_register'? (`ga-bench keys` lists every key)\n", r.stderr)
        r = run(["replay", self.trace, "--conf", "qq:1"], cwd=self.d, check=False)
        keys = [json.loads(l)["key"] for l in run(["keys", "--json"], cwd=self.d).stdout.splitlines()]
        self.assertTrue(r.stderr.endswith(" %s)\n" % keys[-1]), r.stderr)
        for k in keys:
            self.assertIn(k, r.stderr)

    def test_one_option_name_and_a_version(self):
        top = run(["--help"], cwd=self.d).stdout
        self.assertNotIn("--config", top)
        self.assertIn("ga-bench run [--workload NAME]... [--conf [NAME=]STR]...", top)
        self.assertIn("[--conf [NAME=]STR]...", run(["run", "--help"], cwd=self.d).stdout)
        with open(os.path.join(support.REPO, "CMakeLists.txt")) as f:
            version = re.search(r"project\(gardenalloc VERSION ([0-9.]+)", f.read()).group(1)
        self.assertEqual(run(["--version"], cwd=self.d).stdout, "ga-bench %s\n" % version)

    def test_nothing_is_printed_for_a_replay_that_failed(self):
        r = run(["replay", os.path.join(self.d, "missing.csv")], cwd=self.d, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(r.stdout, "")
        self.assertIn("missing.csv", r.stderr)


@unittest.skipUnless(BENCH, "ga-bench is not built (build/bench/ga-bench)")
class Versus(unittest.TestCase):
    def test_versus_compares_with_pytorch_s_policy_on_every_axis(self):
        real = support.trace_file("pytorch_snapshots", "cs336_medium_ctx128_inference.csv")
        if not real:
            self.skipTest("the real traces are absent")
        tool = os.path.join(support.REPO, "bench", "tools", "versus.py")
        r = subprocess.run(["python3", tool, "--bench", BENCH, real, "--iterations", "2", "--lag-us", "0",
                            "--conf", "full=expandable_segments:True",
                            "--conf", "always=expandable_segments:True,expandable_move_pages:always", "--per-trace"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = {l.split()[0]: l.split() for l in r.stdout.splitlines() if l.split() and l.split()[0] in
                ("full", "always", "pytorch")}
        self.assertEqual(rows["full"][2:], rows["pytorch"][2:], "the default moves only when full: PyTorch's policy")
        self.assertEqual(rows["pytorch"][4], "0", "PyTorch's policy is never above itself")
        self.assertGreater(int(rows["always"][-1]), 0, "always: pages move in the second pass too")
        self.assertIn("cs336_medium_ctx128_inference.csv", r.stdout)
        bad = subprocess.run(["python3", tool, "--bench", BENCH, real, "--conf", "nameless"], capture_output=True,
                             text=True)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("--conf takes NAME=CONF", bad.stderr)



if __name__ == "__main__":
    unittest.main()
