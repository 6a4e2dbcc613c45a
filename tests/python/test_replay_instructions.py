"""bench/tools/replay_instructions.py: per trace, the instructions ga_malloc
and ga_free execute per allocate+free under callgrind for the default,
PyTorch's policy and native, without and with the simulated device's
operations, their ratios, whether the two expandable policies made the same
device calls, and the traces that ran out of memory; on traces made here.
Needs valgrind and ga-bench (skipped without them)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import support

TOOL = os.path.join(support.REPO, "bench", "tools", "replay_instructions.py")
BENCH = support.bench_binary()
sys.path.insert(0, os.path.dirname(TOOL))
import replay_instructions  # noqa: E402


def trace(n, size_mib, keep):
    """n allocations of 1..size_mib MiB; all but the last `keep` are freed
    right after they are made."""
    rows = ["Thread,Time,Action,Pointer,Size,Stream"]
    for i in range(1, n + 1):
        size = (i % size_mib + 1) << 20
        rows.append("1,0,allocate,0x%x,%d,0" % (i, size))
        if i <= n - keep:
            rows.append("1,0,free,0x%x,%d,0" % (i, size))
    return "\n".join(rows) + "\n"


class DeviceOps(unittest.TestCase):
    def test_the_simulated_devices_operations_less_those_another_calls(self):
        ops = replay_instructions.device_ops()
        for op in ("sim_map", "sim_unmap", "sim_create", "sim_release", "sim_reserve", "sim_set_access",
                   "sim_malloc", "sim_free", "sim_share_fabric"):
            self.assertIn(op, ops)
        self.assertNotIn("sim_share", ops)  # sim_share_fabric calls it: counted in its caller

    def test_without_valgrind_it_says_so(self):
        support.assert_needs_valgrind(self, TOOL, BENCH)


@unittest.skipUnless(BENCH and shutil.which("valgrind"), "needs ga-bench (build/bench/ga-bench) and valgrind")
class ReplayInstructions(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.paths = {}
        for name, text in (("churn.csv", trace(60, 5, 0)), ("grows.csv", trace(40, 8, 40))):
            p = os.path.join(cls.dir.name, name)
            with open(p, "w") as f:
                f.write(text)
            cls.paths[name] = p

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def run_tool(self, *args, paths=None):
        r = subprocess.run([sys.executable, TOOL, "--bench", BENCH] + list(args) +
                           (paths or sorted(self.paths.values())), capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def test_each_trace_has_its_counts_and_their_ratios(self):
        rows = {r["trace"]: r for r in map(json.loads, self.run_tool("--json").splitlines())}
        self.assertEqual(sorted(rows), ["churn.csv", "grows.csv"])
        for r in rows.values():
            per, dev = r["instructions_per_alloc_free"], r["with_device"]
            self.assertEqual(sorted(per), ["default", "native", "pytorch"])
            for k in per:
                self.assertGreater(per[k], 50)  # a call is never free
                self.assertGreater(dev[k], per[k])  # each made device calls, left out of the first
            self.assertAlmostEqual(r["default_over_pytorch"], per["default"] / per["pytorch"], places=9)
            self.assertAlmostEqual(r["default_over_pytorch_with_device"], dev["default"] / dev["pytorch"],
                                   places=9)
            self.assertTrue(r["same_device_calls"])
            self.assertEqual(r["out_of_memory"], [])
            self.assertEqual(r["capacity_mb"], 49152)

    def test_counts_repeat_from_run_to_run(self):
        a = json.loads(self.run_tool("--json", paths=[self.paths["churn.csv"]]))
        b = json.loads(self.run_tool("--json", paths=[self.paths["churn.csv"]]))
        self.assertEqual(a["instructions_per_alloc_free"], b["instructions_per_alloc_free"])

    def test_a_replay_that_runs_out_of_memory_is_named(self):
        # 40 blocks of 1-8 MiB kept live need about 180 MiB: 64 MiB runs out.
        out = self.run_tool("--capacity-mb", "64", paths=[self.paths["grows.csv"]])
        self.assertIn("out of memory: default, pytorch, native", out)
        self.assertRegex(out, r"out of memory at 64 MiB .*: grows\.csv")

    def test_the_table_gives_the_geometric_mean_and_the_worst_trace(self):
        out = self.run_tool()
        ratios = {}
        for line in out.splitlines():
            parts = line.split()
            if parts and parts[0] in self.paths:
                ratios[parts[0]] = (float(parts[4]), float(parts[5]))
                self.assertEqual(parts[6], "same")
        self.assertEqual(sorted(ratios), ["churn.csv", "grows.csv"])
        for col, label in ((0, "without the device"), (1, "with the device")):
            m = re.search(r"%s: geometric mean of the ratios over 2 traces ([\d.]+), worst (\S+) ([\d.]+)\n"
                          r"  above 1.0: (\d) of 2" % label, out)
            self.assertIsNotNone(m, out)
            worst = max(ratios, key=lambda k: ratios[k][col])
            self.assertEqual(m.group(2), worst)
            self.assertEqual(int(m.group(4)), sum(1 for v in ratios.values() if v[col] > 1.0))


if __name__ == "__main__":
    unittest.main()
