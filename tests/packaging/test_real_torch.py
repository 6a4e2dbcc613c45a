"""gardenalloc with the real torch from PyPI (a CUDA build), no stand-in: run
with the python of a venv holding torch and the installed gardenalloc wheel,
from outside the repository (tests/packaging/run.sh does). Every case runs in
a fresh process, since PyTorch swaps its allocator once per process.

On a machine without a GPU, CUDA can never be initialised (torch.cuda.init()
raises "Found no NVIDIA driver"), so "refuses after CUDA init" is checked
where it can be: a failed init leaves CUDA uninitialised and the swap still
allowed; an allocator already swapped in counts as initialised, so PyTorch
refuses a second swap. With a GPU the refusal after a real init is checked."""
import json
import os
import subprocess
import sys
import unittest

import torch

REPO = os.environ["GA_REPO"]
GPU = torch.cuda.is_available()


def run(code, args=(), **env_extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("GARDENALLOC_LIBRARY", "PYTHONPATH", "PYTORCH_CUDA_ALLOC_CONF")}
    env.update(env_extra)
    r = subprocess.run([sys.executable, "-W", "ignore", "-c", code] + list(args), capture_output=True, text=True,
                       env=env, cwd="/", timeout=300)
    return r


def last_json(test, r):
    test.assertEqual(r.returncode, 0, r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


class RealTorch(unittest.TestCase):
    def test_this_is_a_cuda_build_and_the_package_is_installed(self):
        self.assertIsNotNone(torch.version.cuda, "torch %s is not a CUDA build" % torch.__version__)
        import gardenalloc
        self.assertFalse(gardenalloc.__file__.startswith(REPO), gardenalloc.__file__)
        print("\n    torch %s (CUDA %s), GPU available: %s" % (torch.__version__, torch.version.cuda, GPU),
              file=sys.stderr)

    def test_install_loads_the_library_by_name_and_sets_every_hook(self):
        out = last_json(self, run(r"""
import ctypes, json, torch, gardenalloc, gardenalloc.torch as gt
assert not torch.cuda.is_initialized()
before = torch.cuda.get_allocator_backend()
a = gt.install()
inner = a.allocator()
lib = gardenalloc.library()
missing = [s for s, f in gt.HOOKS if not hasattr(inner, s)]
# Each setter takes the address again (the call install() made), and refuses a non-address.
for s, f in gt.HOOKS:
    getattr(inner, s)(ctypes.cast(getattr(lib, f), ctypes.c_void_p).value)
refused = []
for s, f in gt.HOOKS:
    try:
        getattr(inner, s)("not an address")
    except TypeError:
        refused.append(s)
print(json.dumps({"before": before, "after": torch.cuda.get_allocator_backend(), "type": type(inner).__name__,
                  "missing": missing, "refused": refused, "hooks": [s for s, f in gt.HOOKS],
                  "initialized": torch.cuda.is_initialized()}))
"""))
        self.assertEqual(out["before"], "native")
        self.assertEqual(out["after"], "pluggable")
        self.assertEqual(out["type"], "_CUDAPluggableAllocator")
        self.assertEqual(out["missing"], [], "every setter the package calls exists")
        self.assertEqual(out["refused"], out["hooks"], "the setters check their argument")
        self.assertFalse(out["initialized"], "installing does not initialise CUDA")

    def test_the_names_are_resolved_in_the_library(self):
        out = last_json(self, run(r"""
import json, torch, gardenalloc, gardenalloc.torch as gt
lib = gardenalloc.library().path
errors = []
for names in ((gt.ALLOC_FN, gt.FREE_FN), ("ga_torch_alloc_missing", gt.FREE_FN)):
    try:
        torch.cuda.memory.CUDAPluggableAllocator(lib, *names)
        errors.append(None)
    except AttributeError as e:
        errors.append(str(e))
print(json.dumps(errors))
"""))
        self.assertIsNone(out[0], "the package's names load")
        self.assertIn("undefined symbol: ga_torch_alloc_missing", out[1], "a wrong name is refused, so names are checked")

    def test_swap_before_cuda_init_and_refusal_after(self):
        out = last_json(self, run(r"""
import json, torch, gardenalloc.torch as gt
res = {"gpu": torch.cuda.is_available()}
try:
    torch.cuda.init()
    res["init"] = "ok"
except RuntimeError as e:
    res["init"] = str(e)
res["initialized"] = torch.cuda.is_initialized()
try:
    a = gt.install()
    res["install"] = torch.cuda.get_allocator_backend()
    res["again_same"] = gt.install() is a
    try:
        torch.cuda.memory.change_current_allocator(
            torch.cuda.memory.CUDAPluggableAllocator(gardenalloc_path, gt.ALLOC_FN, gt.FREE_FN))
        res["second_swap"] = "allowed"
    except RuntimeError as e:
        res["second_swap"] = str(e)
except RuntimeError as e:
    res["install"] = str(e)
    try:
        torch.cuda.memory.change_current_allocator(
            torch.cuda.memory.CUDAPluggableAllocator(gardenalloc_path, gt.ALLOC_FN, gt.FREE_FN))
        res["torch_swap"] = "allowed"
    except RuntimeError as e2:
        res["torch_swap"] = str(e2)
print(json.dumps(res))
""".replace("gardenalloc_path", "__import__('gardenalloc').library().path")))
        if out["gpu"]:
            self.assertEqual(out["init"], "ok")
            self.assertIn("must run before CUDA is initialised", out["install"])
            self.assertIn("Can't swap an already initialized allocator", out["torch_swap"])
        else:
            self.assertIn("Found no NVIDIA driver", out["init"])
            self.assertFalse(out["initialized"], "a failed init leaves CUDA uninitialised")
            self.assertEqual(out["install"], "pluggable", "so the swap is still allowed")
            self.assertTrue(out["again_same"], "install() again returns the first, swapping nothing")
            self.assertIn("Can't swap an already initialized allocator", out["second_swap"])

    def test_run_installs_it_in_the_program_and_its_spawned_workers(self):
        gardenalloc_bin = os.path.join(os.path.dirname(sys.executable), "gardenalloc")
        prog = r"""
import json, sys, torch
from torch.utils.data import DataLoader, Dataset

def first(batch):
    return batch[0]


class Backends(Dataset):
    def __len__(self):
        return 4
    def __getitem__(self, i):
        import os
        return "%s %d" % (torch.cuda.get_allocator_backend(), os.getpid())

if __name__ == "__main__":
    main = torch.cuda.get_allocator_backend()
    workers = sorted(list(DataLoader(Backends(), batch_size=1, num_workers=2, multiprocessing_context="spawn",
                                    collate_fn=first)))
    print(json.dumps({"main": main, "workers": workers, "argv": sys.argv[1:]}))
    sys.exit(3)
"""
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "ga_real_torch_prog_%d.py" % os.getpid())
        with open(path, "w") as f:
            f.write(prog)
        try:
            r = subprocess.run([gardenalloc_bin, "run", "--", sys.executable, "-W", "ignore", path, "x y"],
                               capture_output=True, text=True, cwd="/", timeout=300,
                               env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        finally:
            os.remove(path)
        self.assertEqual(r.returncode, 3, r.stderr)
        out = json.loads(r.stdout.strip().splitlines()[-1])
        self.assertEqual(out["main"], "pluggable")
        self.assertEqual(out["argv"], ["x y"])
        self.assertEqual(len(out["workers"]), 4)
        self.assertEqual({w.split()[0] for w in out["workers"]}, {"pluggable"}, out["workers"])
        self.assertEqual(len({w.split()[1] for w in out["workers"]}), 2, "two spawned workers")


MEMORY_PROGRAM = r"""
import collections, json, os, pickle, sys, tempfile, torch, gardenalloc
out = {"backend": torch.cuda.get_allocator_backend(), "initialized": torch.cuda.is_initialized()}
lib = gardenalloc.library()
torch.cuda.memory._record_memory_history(max_entries=1000)
sizes = [1000, 3 << 20, 25 << 20]
ptrs = [lib.ga_torch_alloc_nothrow(n, 0, None) for n in sizes]
s = torch.cuda.memory_stats()
out["stats"] = {"type": type(s).__name__, "n": len(s), "sorted": list(s) == sorted(s),
                "ints": all(type(v) is int for v in s.values()), "same": s == {k: gardenalloc.memory_stats()[k] for k in s}}
out["nested"] = sorted(torch.cuda.memory_stats_as_nested_dict())
out["one"] = [torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved(),
              torch.cuda.max_memory_reserved(), s["allocated_bytes.all.current"], s["allocated_bytes.all.peak"],
              s["reserved_bytes.all.current"], s["reserved_bytes.all.peak"]]
out["summary"] = torch.cuda.memory_summary()
out["short"] = torch.cuda.memory_summary(device="cuda:0", abbreviated=True)
snap = torch.cuda.memory._snapshot()
out["snapshot"] = [sorted(snap), len(snap["segments"]), [e["action"] for e in snap["device_traces"][0]][:3]]
d = tempfile.mkdtemp()
torch.cuda.memory._dump_snapshot(os.path.join(d, "s.pickle"))
with open(os.path.join(d, "s.pickle"), "rb") as f:
    out["dumped"] = len(pickle.load(f)["segments"])
out["segments"] = len(torch.cuda.memory_snapshot())
for p, n in zip(ptrs, sizes):
    lib.ga_torch_free(p, n, 0, None)
torch.cuda.reset_peak_memory_stats()
s = torch.cuda.memory_stats()
out["peaks_reset"] = all(s[k] == s[k[:-4] + "current"] for k in s if k.endswith(".peak"))
torch.cuda.reset_accumulated_memory_stats()
s = torch.cuda.memory_stats()
out["accumulated_reset"] = all(s[k] == 0 for k in s if k.endswith((".allocated", ".freed")))
torch.cuda.empty_cache()
out["reserved_after_empty"] = torch.cuda.memory_reserved()
out["mem_get_info"] = list(torch.cuda.mem_get_info())
torch.cuda.set_per_process_memory_fraction(0.25)
out["fraction"] = torch.cuda.memory.get_per_process_memory_fraction()
out["refused"] = lib.ga_torch_alloc_nothrow(30 << 30, 0, None) is None
torch.cuda.memory._record_memory_history(None)
out["initialized_after"] = torch.cuda.is_initialized()
out["whose"] = gardenalloc.pytorch_allocator()
print(json.dumps(out))
"""


def pytorch_size(sz, pref):
    """The cell PyTorch's memory_summary writes for a size (its rule: the unit
    steps up while the row's first value is at least 768 of the next)."""
    units = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"]
    unit = units[0]
    for nxt in units[1:]:
        if pref < 768 * 1024:
            break
        unit, sz, pref = nxt, sz // 1024, pref / 1024
    return "%6d %s" % (sz, unit)


class TorchCudaMemory(unittest.TestCase):
    """torch.cuda's memory functions with gardenalloc as PyTorch's allocator,
    under `gardenalloc run`, with no GPU: the calls that crash or come back
    empty with a plain pluggable allocator answer from gardenalloc (its
    simulated device here), in PyTorch's shapes, without initialising CUDA."""

    def test_every_function_answers_in_pytorch_s_shapes(self):
        gardenalloc_bin = os.path.join(os.path.dirname(sys.executable), "gardenalloc")
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "ga_real_torch_memory_%d.py" % os.getpid())
        with open(path, "w") as f:
            f.write(MEMORY_PROGRAM)
        try:
            r = subprocess.run([gardenalloc_bin, "run", "--", sys.executable, "-W", "ignore", path],
                               capture_output=True, text=True, cwd="/", timeout=300,
                               env={k: v for k, v in os.environ.items()
                                    if k not in ("PYTHONPATH", "PYTORCH_CUDA_ALLOC_CONF")})
        finally:
            os.remove(path)
        out = last_json(self, r)
        self.assertEqual(out["backend"], "pluggable")
        self.assertEqual(out["stats"], {"type": "OrderedDict", "n": 122, "sorted": True, "ints": True, "same": True})
        self.assertIn("allocated_bytes", out["nested"])
        self.assertIn("num_ooms", out["nested"])
        one = out["one"]
        self.assertEqual(one[:4], one[4:])
        self.assertGreater(one[0], 28 << 20)
        lines = out["summary"].splitlines()
        self.assertIn("PyTorch CUDA memory summary, device ID 0", lines[1])
        row = [l for l in lines if l.startswith("| Allocated memory")][0]
        self.assertEqual(row.split("|")[2].strip(), pytorch_size(one[0], one[0]).strip(),
                         "PyTorch's own formatter over gardenalloc's numbers")
        self.assertEqual(len(lines), 47)
        self.assertEqual(len(out["short"].splitlines()), 29)
        self.assertEqual(out["snapshot"][0], ["allocator_settings", "device_traces", "external_annotations", "segments"])
        self.assertGreaterEqual(out["snapshot"][1], 2)
        self.assertIn("alloc", out["snapshot"][2])
        self.assertEqual(out["dumped"], out["snapshot"][1])
        self.assertEqual(out["segments"], out["snapshot"][1])
        self.assertTrue(out["peaks_reset"])
        self.assertTrue(out["accumulated_reset"])
        self.assertEqual(out["reserved_after_empty"], 0)
        free, total = out["mem_get_info"]
        self.assertEqual(total, 80 << 30, "the simulated device's 80 GiB")
        self.assertEqual(out["fraction"], 0.25)
        self.assertTrue(out["refused"], "30 GiB is over a quarter of 80 GiB")
        self.assertFalse(out["initialized_after"], "nothing initialised CUDA")
        self.assertTrue(out["whose"].startswith("gardenalloc is PyTorch's CUDA allocator in this process"))

    def test_the_summary_says_when_pytorch_uses_its_own_allocator(self):
        r = run("import torch, gardenalloc; print(gardenalloc.memory_summary().splitlines()[2])",
                PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "PyTorch's CUDA allocator in this process is its own caching allocator")

    def test_pytorch_s_variable_is_read_as_pytorch_reads_it(self):
        r = run("import gardenalloc.torch as gt\ntry:\n    gt.install()\nexcept ValueError as e:\n    print(e)",
                PYTORCH_CUDA_ALLOC_CONF="expandable_segment:True")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("unrecognized key 'expandable_segment' (did you mean 'expandable_segments'?)", r.stdout)
        err = run("import torch\ntry:\n    torch._C._accelerator_setAllocatorSettings('expandable_segment:True')\n"
                  "except ValueError as e:\n    print(e)")
        self.assertIn("Unrecognized key 'expandable_segment'", err.stdout, "torch refuses it too")


if __name__ == "__main__":
    unittest.main(verbosity=2)
