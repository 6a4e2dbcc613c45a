"""ga-bench fit: the smallest simulated device on which a trace replays with
no out-of-memory, per configuration. On a built trace whose answers follow
from the policies' rules (six 6 MiB tensors, two freed, then 16 MiB: native
mode keeps a hole in each 20 MiB segment and needs a new 16 MiB one, PyTorch's
expandable segments map whole 20 MiB pages, gardenalloc's map granules), and
on a real trace, where the answer must fit while 2 MiB less does not."""
import json
import os
import subprocess
import tempfile
import unittest

import support

BENCH = support.bench_binary()
MIB = 1 << 20
CONFS = {"native": "", "pt": "expandable_segments:True,expandable_policy:pytorch",
         "default": "expandable_segments:True"}


def built_trace(path):
    rows = ["Thread,Time,Action,Pointer,Size,Stream"]
    events = [("allocate", i + 1, 6 * MIB) for i in range(6)] + [("free", 1, 6 * MIB), ("free", 4, 6 * MIB),
                                                                   ("allocate", 100, 16 * MIB)]
    for t, (action, ptr, size) in enumerate(events):
        rows.append("1,00:00:00.%06d,%s,0x%x,%d,0" % (t, action, ptr, size))
    with open(path, "w") as f:
        f.write("\n".join(rows) + "\n")


def fit(paths, confs):
    args = [BENCH, "fit"] + paths + ["--json"]
    for name, conf in confs.items():
        args += ["--conf", "%s=%s" % (name, conf)]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode:
        raise AssertionError(r.stderr)
    return {(os.path.basename(o["trace"]), o["config"]): o for o in map(json.loads, r.stdout.splitlines())}


def ooms(path, conf, mib):
    r = subprocess.run([BENCH, "replay", path, "--json", "--conf",
                        "x=backend:sim,sim_capacity_mb:%d%s" % (mib, "," + conf if conf else "")],
                       capture_output=True, text=True)
    if r.returncode:
        raise AssertionError(r.stderr)
    return json.loads(r.stdout.splitlines()[0])["num_ooms"]


@unittest.skipUnless(BENCH, "ga-bench is not built (build/bench/ga-bench)")
class Fit(unittest.TestCase):
    def test_the_built_trace_fits_where_each_policy_says(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "built.csv")
            built_trace(path)
            got = fit([path], CONFS)
            self.assertEqual({k[1]: v["fits_on_bytes"] // MIB for k, v in got.items()},
                             {"native": 56, "pt": 60, "default": 52})
            for (_, name), o in got.items():
                self.assertEqual(o["peak_live_bytes"], 40 * MIB)
                self.assertAlmostEqual(o["fits_on_ratio"], o["fits_on_bytes"] / o["peak_live_bytes"], places=5)
                mib = o["fits_on_bytes"] // MIB
                self.assertEqual(ooms(path, CONFS[name], mib), 0, name)
                self.assertGreater(ooms(path, CONFS[name], mib - 2), 0, name)

    def test_a_real_trace_fits_on_what_it_says_and_not_2MiB_less(self):
        path = support.trace_file("pytorch_snapshots", "cs336_medium_ctx256_inference.csv")
        if not path:
            self.skipTest("the real traces are absent")
        for (_, name), o in fit([path], CONFS).items():
            mib = o["fits_on_bytes"] // MIB
            self.assertGreaterEqual(o["fits_on_bytes"], o["peak_live_bytes"])
            self.assertLessEqual(o["fits_on_bytes"], o["peak_reserved_80g_bytes"] + 2 * MIB)
            self.assertEqual(ooms(path, CONFS[name], mib), 0, name)
            self.assertGreater(ooms(path, CONFS[name], mib - 2), 0, name)

    def test_a_device_of_exactly_peak_live_can_be_the_answer(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "one.csv")
            with open(path, "w") as f:
                f.write("Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x1,%d,0\n" % (4 * MIB))
            got = fit([path], CONFS)
            self.assertEqual(got[("one.csv", "default")]["fits_on_bytes"], 4 * MIB, "four granules, mapped")
            self.assertEqual(got[("one.csv", "native")]["fits_on_bytes"], 20 * MIB, "a 20 MiB segment")

    def test_bad_input_is_named(self):
        r = subprocess.run([BENCH, "fit"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("ga-bench fit: no trace given", r.stderr)
        r = subprocess.run([BENCH, "fit", "x.csv", "--capacity-mb", "4"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown or incomplete option '--capacity-mb'", r.stderr)


if __name__ == "__main__":
    unittest.main()
