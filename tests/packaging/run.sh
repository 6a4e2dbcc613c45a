#!/usr/bin/env bash
# The Python package as users get it, outside the repository:
#  1. `pip wheel ./python_shim` (scikit-build-core builds the library with
#     CMake) and what the wheel holds;
#  2. `pip install ./python_shim` into a fresh venv, then the installed
#     package from another directory (test_installed.py): the library inside
#     the package, memory_stats() on the simulated device, the console script,
#     `gardenalloc run` against the stand-in torch;
#  3. with real torch from PyPI (a CUDA build) in a venv kept outside the
#     repository ($GA_TORCH_VENV, default ~/.cache/gardenalloc/torch-venv),
#     the checks that need no stand-in (test_real_torch.py). The venv is made
#     when GA_TORCH_INSTALL=1 (as .ci/run sets) and reused when present.
# Without PyPI the steps that need it say so and are skipped (exit 0).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
py=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
say() { echo "packaging: $*"; }
export GA_REPO="$repo"
unset GARDENALLOC_LIBRARY GARDENALLOC_CONF

# PyPI through pip's own settings (index, proxy, certificates).
if ! "$py" -m pip download -q --no-deps --dest "$work/probe" scikit-build-core >/dev/null 2>&1; then
  say "SKIPPED: PyPI cannot be reached, so the wheel cannot be built (it needs scikit-build-core)"
  exit 0
fi

echo "== pip wheel ./python_shim"
start=$SECONDS
"$py" -m pip wheel -q --no-deps ./python_shim -w "$work/dist" -C build-dir="$work/skbuild"
wheel=$(ls "$work"/dist/gardenalloc-*.whl)
say "$(basename "$wheel"): $(stat -c %s "$wheel") bytes, built in $((SECONDS - start)) s"
"$py" - "$wheel" <<'PYEOF'
import re, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = set(z.namelist())
version = re.search(r"project\(gardenalloc VERSION ([0-9.]+)", open("CMakeLists.txt").read()).group(1)
want = {"gardenalloc/libgardenalloc.so", "gardenalloc/__init__.py", "gardenalloc/_boot/sitecustomize.py",
        "gardenalloc/_version.py", "gardenalloc/run.py", "gardenalloc/torch.py", "gardenalloc/doctor.py",
        "gardenalloc/ga-bench",
        "gardenalloc-%s.dist-info/licenses/LICENSE" % version}
missing = want - names
assert not missing, "the wheel lacks %s" % sorted(missing)
assert ('"%s"' % version) in z.read("gardenalloc/_version.py").decode(), "version"
assert "gardenalloc = gardenalloc.__main__:main" in z.read("gardenalloc-%s.dist-info/entry_points.txt" % version).decode()
so = z.getinfo("gardenalloc/libgardenalloc.so")
print("packaging: the wheel holds the package, libgardenalloc.so (%d bytes), _version.py (%s), the console script "
      "and the licence" % (so.file_size, version))
PYEOF

echo "== a fresh venv: pip install ./python_shim, used from /"
"$py" -m venv "$work/v"
"$work/v/bin/pip" install -q ./python_shim -C build-dir="$work/skbuild"
(cd / && "$work/v/bin/python" -m unittest discover -s "$repo/tests/packaging" -p test_installed.py)

echo "== real torch (no stand-in)"
tv=${GA_TORCH_VENV:-$HOME/.cache/gardenalloc/torch-venv}
spec=${GA_TORCH_SPEC:-torch}
if ! "$tv/bin/python" -c "import torch" >/dev/null 2>&1; then
  if [ "${GA_TORCH_INSTALL:-0}" != 1 ]; then
    say "real torch: SKIPPED (no torch venv at $tv; GA_TORCH_INSTALL=1 makes one: 5.3 GB on disk, from PyPI)"
    exit 0
  fi
  start=$SECONDS
  rm -rf "$tv"
  "$py" -m venv "$tv"
  if ! "$tv/bin/pip" install -q "$spec"; then
    rm -rf "$tv"
    say "real torch: SKIPPED: '$spec' could not be installed from PyPI"
    exit 0
  fi
  say "installed $("$tv/bin/python" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null) into $tv in $((SECONDS - start)) s ($(du -sh "$tv" | cut -f1))"
fi
"$tv/bin/pip" install -q --force-reinstall --no-deps "$wheel"
(cd / && "$tv/bin/python" -W ignore -m unittest discover -s "$repo/tests/packaging" -p test_real_torch.py)
