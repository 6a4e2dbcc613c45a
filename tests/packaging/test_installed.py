"""The installed wheel, used from outside the repository: run with the
python of a fresh venv that has only gardenalloc installed, from another
directory (tests/packaging/run.sh does). GA_REPO names the checkout, to check
that nothing comes from it, and where the stand-in torch lives."""
import json
import os
import re
import subprocess
import sys
import unittest

REPO = os.environ["GA_REPO"]
STANDIN = os.path.join(REPO, "tests", "python", "standin")
BIN = os.path.dirname(sys.executable)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GARDENALLOC_LIBRARY", "GARDENALLOC_CONF", "PYTHONPATH", "PYTORCH_CUDA_ALLOC_CONF")}
    env.update(extra)
    return env


def python(code, **extra):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(**extra),
                          cwd="/")


class Installed(unittest.TestCase):
    def test_imports_from_the_venv_with_the_library_inside(self):
        r = python("import gardenalloc, json; print(json.dumps([gardenalloc.__file__, gardenalloc.library().path, "
                   "gardenalloc.__version__]))")
        self.assertEqual(r.returncode, 0, r.stderr)
        pkg, lib, version = json.loads(r.stdout)
        site = os.path.dirname(os.path.dirname(pkg))
        self.assertTrue(pkg.startswith(sys.prefix), pkg)
        self.assertFalse(pkg.startswith(REPO), pkg)
        self.assertEqual(lib, os.path.join(os.path.dirname(pkg), "libgardenalloc.so"))
        with open(os.path.join(REPO, "CMakeLists.txt")) as f:
            want = re.search(r"project\(gardenalloc VERSION ([0-9.]+)", f.read()).group(1)
        self.assertEqual(version, want, "the version is CMakeLists.txt's")
        self.assertTrue(os.path.isdir(site))

    def test_only_places_that_can_hold_the_library_are_searched(self):
        r = python("import gardenalloc._lib as l, json; print(json.dumps([l.source_tree(), list(l.candidates())]))")
        self.assertEqual(r.returncode, 0, r.stderr)
        tree, cands = json.loads(r.stdout)
        self.assertIsNone(tree, "an installed package is not a checkout")
        self.assertFalse([c for c in cands if c.startswith(sys.prefix) and "/build/" in c], cands)

    def test_memory_stats_on_the_simulated_device(self):
        r = python("import gardenalloc; print(gardenalloc.memory_stats()['reserved_bytes.all.current'])")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "0\n")
        r = python("import gardenalloc; lib = gardenalloc.library(); p = lib.ga_torch_alloc_nothrow(5 << 20, 0, None);"
                   " print(gardenalloc.memory_stats()['allocated_bytes.all.current']); lib.ga_torch_free(p, 5 << 20,"
                   " 0, None); print(gardenalloc.check())", GARDENALLOC_CONF="backend:sim,sim_capacity_mb:1024")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), [str(5 << 20), "0"])

    def test_a_wrong_library_setting_is_named(self):
        r = python("import gardenalloc; gardenalloc.library()", GARDENALLOC_LIBRARY="/nonexistent/libgardenalloc.so")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("GARDENALLOC_LIBRARY does not name a usable libgardenalloc.so: /nonexistent/libgardenalloc.so "
                      "(absent)", r.stderr)

    def test_console_script(self):
        r = subprocess.run([os.path.join(BIN, "gardenalloc"), "--version"], capture_output=True, text=True, cwd="/")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"^gardenalloc [0-9.]+\n$")

    def test_doctor_with_the_console_script_and_the_ga_bench_inside(self):
        trace = os.path.join(os.environ["GA_REPO"], "traces", "pytorch_snapshots",
                             "cs336_medium_ctx128_inference.csv")
        r = subprocess.run([os.path.join(BIN, "gardenalloc"), "doctor", trace, "--capacity-gib", "1.63"],
                           capture_output=True, text=True, cwd="/", env=clean_env())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Fragmentation, not size.", r.stdout)
        self.assertIn("GARDENALLOC_CONF=expandable_segments:True", r.stdout)

    def test_run_with_the_console_script_and_another_interpreter(self):
        """The program's interpreter need not have gardenalloc installed: the
        runner's package and library are the ones it gets."""
        prog = ("import torch, gardenalloc, json; c = [x for x in torch.calls if x[0] == 'change']; "
                "print(json.dumps([len(c), c[0][1].args[0], gardenalloc.__file__]))")
        others = [p for p in (os.environ.get("GA_OTHER_PYTHON"), "/usr/bin/python3") if p and os.path.exists(p)]
        for interpreter in [sys.executable] + others[:1]:
            r = subprocess.run([os.path.join(BIN, "gardenalloc"), "run", "--", interpreter, "-c", prog],
                               capture_output=True, text=True, env=clean_env(PYTHONPATH=STANDIN), cwd="/")
            self.assertEqual(r.returncode, 0, r.stderr)
            n, lib, pkg = json.loads(r.stdout)
            self.assertEqual(n, 1, interpreter)
            self.assertTrue(lib.startswith(sys.prefix) and pkg.startswith(sys.prefix), (lib, pkg))


if __name__ == "__main__":
    unittest.main()
