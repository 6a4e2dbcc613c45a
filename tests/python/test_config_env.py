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


def run(**env_vars):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GARDENALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")}
    env.update(env_vars)
    env["PYTHONPATH"] = os.path.join(REPO, "python_shim")
    r = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env)
    return r


class PyTorchVariable(unittest.TestCase):
    def test_pytorch_keys_apply_and_the_rest_is_named_once(self):
        r = run(PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:128, release_lock_on_cudamalloc:True,"
                                        "throw_on_cudamalloc_oom:True,sim_capacity_mb:64,backend:native")
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
                     "gardenalloc: PYTORCH_CUDA_ALLOC_CONF: ignoring unknown key 'throw_on_cudamalloc_oom'",
                     "gardenalloc: PYTORCH_CUDA_ALLOC_CONF: ignoring 'sim_capacity_mb', a key of gardenalloc's own"):
            self.assertEqual(r.stderr.count(line), 1, r.stderr)
        self.assertNotIn("backend:native", r.stderr)

    def test_a_value_pytorch_would_refuse_does_not_stop_the_job(self):
        r = run(PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:lots,expandable_segments:True")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["configuration"], ["expandable_segments:True", "PYTORCH_CUDA_ALLOC_CONF"])
        self.assertIn("ignoring 'max_split_size_mb:lots' (max_split_size_mb: 'lots' is not a whole number", r.stderr)

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
