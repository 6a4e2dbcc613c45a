"""gardenalloc run: start a program with gardenalloc installed as PyTorch's
CUDA allocator, without changing the program.

    gardenalloc run [--conf STR] [--] PROGRAM [ARGS...]
    python -m gardenalloc run --conf expandable_segments:True -- python train.py --epochs 3

PROGRAM replaces this process (exec): its arguments, exit status and signals
are its own. Every Python interpreter it starts — the program itself,
subprocesses, DataLoader workers under spawn or forkserver, a server's engine
processes — runs the sitecustomize of gardenalloc/_boot/ first (that folder
leads PYTHONPATH), which waits for `import torch` and right after it calls
gardenalloc.torch.install(): before the program can touch CUDA. That
sitecustomize takes its folder off sys.path again and then runs any other
sitecustomize the interpreter would have run. Forked children (DataLoader
workers under fork) inherit the installed allocator.

The configuration is --conf when given (set as GARDENALLOC_CONF for the whole
process tree), else GARDENALLOC_CONF, else PyTorch's PYTORCH_CUDA_ALLOC_CONF
(see gardenalloc.configuration()). A bad GARDENALLOC_CONF, or a
PYTORCH_CUDA_ALLOC_CONF that PyTorch would refuse (an unrecognized key, a bad
value), is refused here, before the program starts.

Interpreters started with -I, -E or -S skip PYTHONPATH or site, and so the
hook; a child given an environment without PYTHONPATH does too.
"""
import argparse
import os
import sys

from . import _lib, configuration, not_utf8, validate

HERE = os.path.dirname(os.path.abspath(__file__))
BOOT = os.path.join(HERE, "_boot")


def environment(conf=None, base=None):
    """The environment for a program run with gardenalloc as PyTorch's
    allocator: `base` (default os.environ) plus the hook. Finds the library
    first (OSError with the places tried if it cannot) and pins the program's
    interpreters to it and to this package."""
    env = dict(os.environ if base is None else base)
    if conf is not None:
        env["GARDENALLOC_CONF"] = conf
    lib = _lib.load()
    env["GARDENALLOC_LIBRARY"] = os.path.abspath(lib.path) if os.path.sep in lib.path else lib.path
    env["GARDENALLOC_RUN"] = "replace"
    env["GARDENALLOC_RUN_PACKAGE"] = HERE
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([BOOT] + [p for p in parts if os.path.abspath(p) != BOOT])
    return env


def main(argv=None, prog="gardenalloc run"):
    ap = argparse.ArgumentParser(
        prog=prog, usage="%(prog)s [--conf STR] [--] PROGRAM [ARGS...]",
        description="Run PROGRAM with gardenalloc as PyTorch's CUDA allocator in every Python process it starts "
                    "(installed as soon as torch is imported). PROGRAM replaces this process: its arguments, exit "
                    "status and signals are its own.")
    ap.add_argument("--conf", metavar="STR",
                    help="configuration (GARDENALLOC_CONF grammar) for the whole process tree; default: "
                         "GARDENALLOC_CONF, else PyTorch's PYTORCH_CUDA_ALLOC_CONF")
    ap.add_argument("command", nargs=argparse.REMAINDER, metavar="PROGRAM [ARGS...]")
    args = ap.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("no PROGRAM given")
    if not cmd[0]:
        ap.error("PROGRAM is empty ('')")
    what, value = ("--conf", args.conf) if args.conf is not None else \
        ("GARDENALLOC_CONF", os.environ.get("GARDENALLOC_CONF"))
    if not_utf8(value):
        print("%s: %s %s" % (prog, what, not_utf8(value)), file=sys.stderr)
        return 2
    try:
        env = environment(args.conf)
    except OSError as e:
        print("%s: %s" % (prog, e), file=sys.stderr)
        return 1
    conf = env.get("GARDENALLOC_CONF")
    try:
        if conf is not None:
            validate(conf)
        else:  # PyTorch's variable, read here as the program's allocators will read it
            configuration()
    except ValueError as e:
        print("%s: %s%s" % (prog, "GARDENALLOC_CONF=%r: " % conf if conf is not None else "", e), file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(cmd[0], cmd, env)
    except OSError as e:
        print("%s: cannot run %s: %s" % (prog, cmd[0], e.strerror or e), file=sys.stderr)
        return 127 if isinstance(e, FileNotFoundError) else 126
    except ValueError as e:  # an argument the system cannot pass (a NUL byte)
        print("%s: cannot run %r: %s" % (prog, cmd[0], e), file=sys.stderr)
        return 126


if __name__ == "__main__":
    sys.exit(main())
