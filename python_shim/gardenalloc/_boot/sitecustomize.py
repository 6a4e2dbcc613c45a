"""Run first by every Python interpreter in a program started with
`gardenalloc run` (this folder leads PYTHONPATH there; see gardenalloc/run.py).

It takes this folder off sys.path, so the program sees the path it would see
without gardenalloc; makes `import gardenalloc` give the package that started
the program; and installs gardenalloc as PyTorch's CUDA allocator as soon as
`import torch` has finished, before anything can initialise CUDA. Then it runs
the sitecustomize the interpreter would otherwise have run, if there is one.
Without GARDENALLOC_RUN in the environment it only does the first and last.
"""
import os
import sys


def _boot():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    package = os.environ.get("GARDENALLOC_RUN_PACKAGE")
    if os.environ.get("GARDENALLOC_RUN") and package:
        sys.meta_path.insert(0, _Finder(package))


class _Finder:
    """A meta-path finder for two top-level names: gardenalloc (from the
    package that started the program) and torch (found as usual, with
    gardenalloc.torch.install() run right after its module has executed)."""

    def __init__(self, package):
        self.package = package
        self.torch_done = False

    def find_spec(self, name, path=None, target=None):
        if path is not None:
            return None
        if name == "gardenalloc":
            import importlib.util
            return importlib.util.spec_from_file_location(
                name, os.path.join(self.package, "__init__.py"), submodule_search_locations=[self.package])
        if name != "torch" or self.torch_done:
            return None
        self.torch_done = True
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run_module = loader.exec_module

        def exec_module(module):
            run_module(module)
            if module.__name__ == "torch":
                _install()

        loader.exec_module = exec_module
        return spec


def _install():
    try:
        import gardenalloc.torch
        gardenalloc.torch.install()
    except Exception as e:
        sys.stderr.write("gardenalloc run: could not install gardenalloc as PyTorch's allocator in %s (pid %d): "
                         "%s\n" % (sys.argv[0] or sys.executable, os.getpid(), e))
        raise


def _chain():
    """Runs the next sitecustomize on sys.path (this folder is off it now)."""
    me = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401
    except ImportError as e:
        if e.name != "sitecustomize":
            raise
        if me is not None:
            sys.modules["sitecustomize"] = me


_boot()
_chain()
