"""PYTORCH_CUDA_ALLOC_CONF honoured by the allocators behind PyTorch's entry
points when GARDENALLOC_CONF is not set, seen from Python in fresh processes:
what is applied, what is named on stderr (once), and where the effective
configuration shows (configuration(), memory_summary(), the snapshot)."""
import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

PROGRAM = r"""
import json, gardenalloc
lib = gardenalloc.library()
for n in (1000, 5 << 20, 300 << 20):
    p = lib.ga_torch_alloc_nothrow(n, 0, None)
    assert p, gardenalloc.last_error()
    lib.ga_torch_free(p, n, 0, None)
gardenalloc.memory_stats(); gardenalloc.memory_stats()
print(json.dumps({"configuration": gardenalloc.configuration(), "summary": gardenalloc.memory_summary(),
                  "settings": gardenalloc.snapshot()["allocator_settings"],
                  "max_split_size": gardenalloc.memory_stats()["max_split_size"]}))
"""


def run(program=PROGRAM, **env_vars):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GARDENALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "GARDENALLOC_IGNORE_KEYS")}
    env.update(env_vars)
    env["PYTHONPATH"] = os.path.join(REPO, "python_shim")
    r = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env)
    return r


class PyTorchVariable(unittest.TestCase):
    def test_pytorch_keys_apply_and_the_rest_is_named_once(self):
        r = run(PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:128, release_lock_on_cudamalloc:True,"
                                        "throw_on_cudamalloc_oom:True,backend:native")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        conf = "max_split_size_mb:128,release_lock_on_cudamalloc:True"
        self.assertEqual(out["configuration"], [conf, "PYTORCH_CUDA_ALLOC_CONF"])
        self.assertEqual(out["max_split_size"], 128 << 20)
        self.assertIn('configuration: "%s" (from PYTORCH_CUDA_ALLOC_CONF)' % conf, out["summary"])
        self.assertEqual(out["settings"]["PYTORCH_CUDA_ALLOC_CONF"], conf)
        self.assertEqual(out["settings"]["max_split_size"], 128 << 20)
        self.assertIs(out["settings"]["release_lock_on_cudamalloc"], True)
        for line in ("gardenalloc: PYTORCH_CUDA_ALLOC_CONF: release_lock_on_cudamalloc has no effect in gardenalloc",
                     "gardenalloc: PYTORCH_CUDA_ALLOC_CONF: throw_on_cudamalloc_oom has no effect in gardenalloc: a "
                     "key of PyTorch that gardenalloc does not apply"):
            self.assertEqual(r.stderr.count(line), 1, r.stderr)
        self.assertNotIn("backend:native", r.stderr)

    def test_what_pytorch_refuses_is_refused(self):
        """A typo, a key of gardenalloc's own, a bad value: torch 2.15 raises
        ValueError for each when it reads its variable, and so does
        gardenalloc, and no allocator is made with settings nobody asked for."""
        program = ("import gardenalloc\ntry:\n    gardenalloc.configuration()\nexcept ValueError as e:\n"
                   "    print(e)\nlib = gardenalloc.library()\nassert not lib.ga_torch_alloc_nothrow(1000, 0, None)\n"
                   "print(gardenalloc.last_error())\n")
        for conf, words in (("expandable_segment:True", "unrecognized key 'expandable_segment' (did you mean "
                                                        "'expandable_segments'?), which PyTorch refuses too"),
                            ("expandable_segments:True,sim_capacity_mb:64", "'sim_capacity_mb' is a key of "
                                                                            "gardenalloc's own"),
                            ("max_split_size_mb:lots", "max_split_size_mb: 'lots' is not a whole number of MiB"),
                            ("expandable_segments=True", "the separator between a key and its value is ':'")):
            r = run(PYTORCH_CUDA_ALLOC_CONF=conf, program=program)
            self.assertEqual(r.returncode, 0, r.stderr)
            said, failed = r.stdout.splitlines()
            self.assertEqual(said, "gardenalloc: PYTORCH_CUDA_ALLOC_CONF: " + said.split(": ", 2)[2])
            self.assertIn(words, said)
            self.assertEqual(failed, said, "every allocation fails with the reason")
        r = run(PYTORCH_CUDA_ALLOC_CONF="expandable_segment:True", GARDENALLOC_IGNORE_KEYS="expandable_segment")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["configuration"], ["", "PYTORCH_CUDA_ALLOC_CONF"])
        self.assertIn("ignoring 'expandable_segment' (named in GARDENALLOC_IGNORE_KEYS)", r.stderr)

    def test_the_generic_name(self):
        r = run(PYTORCH_ALLOC_CONF="expandable_segments:True")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual(out["configuration"], ["expandable_segments:True", "PYTORCH_ALLOC_CONF"])
        self.assertIs(out["settings"]["expandable_segments"], True)

    def test_gardenalloc_conf_wins(self):
        r = run(GARDENALLOC_CONF="backend:sim,sim_capacity_mb:4096,max_split_size_mb:64",
                PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:128")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual(out["configuration"], ["backend:sim,sim_capacity_mb:4096,max_split_size_mb:64",
                                                "GARDENALLOC_CONF"])
        self.assertEqual(out["max_split_size"], 64 << 20)
        self.assertEqual(r.stderr.count("GARDENALLOC_CONF is set, so PYTORCH_CUDA_ALLOC_CONF "
                                        "(\"max_split_size_mb:128\") is not used"), 1, r.stderr)

    def test_gardenalloc_conf_stays_strict(self):
        r = run(GARDENALLOC_CONF="backend:sim,max_split_size_mb:lots")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("max_split_size_mb: 'lots' is not a whole number", r.stderr)

    def test_nothing_set_means_the_defaults(self):
        r = run()
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual(out["configuration"], ["", "defaults"])
        self.assertIn('configuration: "" (from defaults)', out["summary"])


if __name__ == "__main__":
    unittest.main()
