"""Paths shared by the Python tests: the repository, and the real traces
(GA_SHARED_DIR, else a traces/ folder in the repository, else ../shared)."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SHIM = os.path.join(REPO, "python_shim")
if SHIM not in sys.path:
    sys.path.insert(0, SHIM)


def traces_dir():
    """The folder holding pytorch_snapshots/ and minimalloc/, or None."""
    cands = []
    if os.environ.get("GA_SHARED_DIR"):
        cands.append(os.path.join(os.environ["GA_SHARED_DIR"], "traces"))
    cands += [os.path.join(REPO, "traces"), os.path.join(REPO, "bench", "traces"),
              os.path.join(os.path.dirname(REPO), "shared", "traces")]
    for c in cands:
        if os.path.isdir(os.path.join(c, "pytorch_snapshots")):
            return c
    return None


def trace_file(*parts):
    """A file under the traces folder, or None when it is absent."""
    d = traces_dir()
    p = os.path.join(d, *parts) if d else None
    return p if p and os.path.exists(p) else None


def bench_binary():
    p = os.path.join(REPO, "build", "bench", "ga-bench")
    return p if os.path.exists(p) else None


def assert_needs_valgrind(case, tool, bench):
    """Runs the Python tool `tool` (a path) with a PATH that holds python3
    alone, as on a machine without valgrind: it must fail and say so."""
    with tempfile.TemporaryDirectory() as bare:
        os.symlink(sys.executable, os.path.join(bare, "python3"))
        r = subprocess.run([os.path.join(bare, "python3"), tool, "--bench", bench or "ga-bench"],
                           capture_output=True, text=True, env={"PATH": bare})
    case.assertEqual(r.returncode, 1)
    case.assertIn("valgrind is needed", r.stderr)
