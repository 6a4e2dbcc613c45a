"""The gardenalloc command line: `python -m gardenalloc COMMAND ...`, or the
`gardenalloc` console script that `pip install` puts on PATH.

Each command lives in a module of this package with a main(argv, prog)
function; COMMANDS maps the command's name to that module and a line of help.
"""
import importlib
import sys

COMMANDS = {
    "doctor": ("gardenalloc.doctor", "would another allocator or setting have avoided this CUDA OOM? (a snapshot)"),
    "run": ("gardenalloc.run", "start a program with gardenalloc as PyTorch's CUDA allocator (no code change)"),
    "trace": ("gardenalloc.trace", "convert a PyTorch memory snapshot into the RMM CSV that ga-bench replays"),
}


def usage():
    lines = ["usage: gardenalloc COMMAND [ARGS...]", "", "commands:"]
    lines += ["  %-10s %s" % (name, doc) for name, (_, doc) in sorted(COMMANDS.items())]
    lines += ["", "'gardenalloc COMMAND --help' describes each one; 'gardenalloc --version' prints the version."]
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] == "--version":
        from . import __version__
        print("gardenalloc", __version__)
        return 0
    if argv[0] not in COMMANDS:
        print("gardenalloc: unknown command '%s'\n\n%s" % (argv[0], usage()), file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:], prog="gardenalloc " + argv[0])


if __name__ == "__main__":
    sys.exit(main())
