"""bench/tools/replay_cpu.py: per trace, the median CPU time per
allocate+free of the default, PyTorch's policy and native over the rounds,
the ratio default / PyTorch's policy, the geometric mean and the worst
trace, on traces made here (no real trace needed); and, through a stand-in
for ga-bench, that the rounds cycle through all six orders of the three
configurations and that each call's cold first replay is thrown away."""
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


# A stand-in for ga-bench: it logs each call's configurations (name and
# string, in order) and answers every replay with a fixed time per
# configuration, except that the first replay of each trace in a call, the
# cold one, takes far longer.
STANDIN = r'''#!/usr/bin/env python3
import json, sys
args, paths, confs, scale = sys.argv[2:], [], [], 1
i = 0
while i < len(args):
    if args[i] == "--conf":
        confs.append(args[i + 1].split("=", 1)); i += 2
    elif args[i] == "--size-scale":
        scale = int(args[i + 1]); i += 2
    elif args[i].startswith("--"):
        i += 1
    else:
        paths.append(args[i]); i += 1
with open(%r, "a") as f:
    f.write(json.dumps(confs) + "\n")
warm = {"default": 200.0, "pytorch": 250.0, "native": 100.0}
for p in paths:
    for c, (name, conf) in enumerate(confs):
        ns = 1e6 if c == 0 else warm.get(name, 1.0)
        print(json.dumps({"trace": p, "config": name, "cpu_ns_per_alloc_free": ns}))
'''


class ReplayCpuOrder(unittest.TestCase):
    """The order of the configurations and the discarded warm-up, seen
    through a stand-in for ga-bench."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.log = os.path.join(self.dir.name, "calls.log")
        self.bench = os.path.join(self.dir.name, "ga-bench")
        with open(self.bench, "w") as f:
            f.write(STANDIN % self.log)
        os.chmod(self.bench, 0o755)
        self.paths = []
        for name in ("one.csv", "two.csv"):
            p = os.path.join(self.dir.name, name)
            with open(p, "w") as f:
                f.write(trace(10))
            self.paths.append(p)

    def tearDown(self):
        self.dir.cleanup()

    def run_tool(self, rounds):
        r = subprocess.run([sys.executable, TOOL, "--bench", self.bench, "--rounds", str(rounds), "--json"] +
                           self.paths, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.log) as f:
            calls = [json.loads(line) for line in f]
        return [json.loads(line) for line in r.stdout.splitlines()], calls

    def test_six_rounds_put_each_configuration_in_each_position_twice(self):
        _, calls = self.run_tool(6)
        self.assertEqual(len(calls), 12)  # one call per trace given, per round
        for k in range(6):
            self.assertEqual(calls[2 * k], calls[2 * k + 1])  # every call of a round has its order
        rounds = calls[::2]
        orders = [tuple(name for name, _ in c if name != "warmup") for c in rounds]
        self.assertEqual(len(set(orders)), 6, orders)  # all six orders, none twice
        for name in ("default", "pytorch", "native"):
            self.assertEqual([sum(o[pos] == name for o in orders) for pos in range(3)], [2, 2, 2], orders)
        after = sum(1 for o in orders for i in range(2) if o[i] == "default" and o[i + 1] == "pytorch")
        self.assertEqual(after, 2, orders)  # PyTorch's policy directly after the default in 2 rounds of 6
        for c in rounds:  # first, a warm-up under the round's first configuration
            self.assertEqual(len(c), 4, c)
            self.assertEqual(c[0][0], "warmup")
            self.assertEqual(c[0][1], c[1][1])

    def test_the_cold_warm_up_replay_is_not_counted(self):
        rows, _ = self.run_tool(7)
        self.assertEqual(sorted(r["trace"] for r in rows), ["one.csv", "two.csv"])
        for r in rows:
            self.assertEqual(r["cpu_ns_per_alloc_free"], {"default": 200.0, "pytorch": 250.0, "native": 100.0})
            # no round measured a configuration cold: every per-round ratio is 200 / 250
            self.assertAlmostEqual(r["ratio_min"], 0.8, places=12)
            self.assertAlmostEqual(r["ratio_max"], 0.8, places=12)


if __name__ == "__main__":
    unittest.main()
