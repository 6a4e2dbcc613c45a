"""bench/tools/replay_cpu.py: per trace, the median CPU time per
allocate+free of the default, PyTorch's policy and native over the rounds,
the ratio default / PyTorch's policy, the geometric mean and the worst
trace, on traces made here (no real trace needed)."""
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import unittest

import support

TOOL = os.path.join(support.REPO, "bench", "tools", "replay_cpu.py")


def trace(n):
    rows = ["Thread,Time,Action,Pointer,Size,Stream"]
    for i in range(1, n):
        size = (i % 5 + 1) << 20
        rows += ["1,0,allocate,0x%x,%d,0" % (i, size), "1,0,free,0x%x,%d,0" % (i, size)]
    return "\n".join(rows) + "\n"


class ReplayCpu(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        cls.paths = []
        for name, n in (("small.csv", 50), ("larger.csv", 400)):
            p = os.path.join(cls.dir.name, name)
            with open(p, "w") as f:
                f.write(trace(n))
            cls.paths.append(p)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def run_tool(self, *args):
        r = subprocess.run([sys.executable, TOOL, "--bench", support.bench_binary(), "--rounds", "3"] +
                           list(args) + self.paths, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def test_each_trace_has_the_medians_and_their_ratio(self):
        rows = [json.loads(line) for line in self.run_tool("--json").splitlines()]
        self.assertEqual(sorted(r["trace"] for r in rows), ["larger.csv", "small.csv"])
        for r in rows:
            self.assertEqual(r["rounds"], 3)
            ns = r["cpu_ns_per_alloc_free"]
            self.assertEqual(sorted(ns), ["default", "native", "pytorch"])
            for v in ns.values():
                self.assertGreater(v, 0)
            self.assertAlmostEqual(r["default_over_pytorch"], ns["default"] / ns["pytorch"], places=9)
            self.assertLessEqual(r["ratio_min"], r["ratio_max"])

    def test_the_table_gives_the_geometric_mean_and_the_worst_trace(self):
        out = self.run_tool()
        lines = out.splitlines()
        ratios = {}
        for line in lines:
            parts = line.split()
            if not line.startswith(" ") and parts and parts[0] in ("small.csv", "larger.csv"):
                ratios[parts[0]] = float(parts[4])
        self.assertEqual(sorted(ratios), ["larger.csv", "small.csv"])
        geo = math.exp(sum(math.log(v) for v in ratios.values()) / 2)
        m = re.search(r"geometric mean of the ratios over 2 traces: ([\d.]+)", out)
        self.assertIsNotNone(m, out)
        self.assertAlmostEqual(float(m.group(1)), geo, delta=0.002)  # from the ratios as printed
        worst = max(ratios, key=ratios.get)
        self.assertIn("worst: %s %.3f" % (worst, ratios[worst]), out)
        above = sum(1 for v in ratios.values() if v > 1.0)
        self.assertIn("above 1.0: %d of 2" % above, out)


if __name__ == "__main__":
    unittest.main()
