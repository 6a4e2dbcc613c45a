"""gardenalloc doctor: would another allocator, or other settings, have
avoided this CUDA out-of-memory?

    gardenalloc doctor SNAPSHOT.pickle [--capacity-gib G] [--device N] [--html PAGE] [--json]
    python -m gardenalloc doctor TRACE.csv --capacity-gib G

Converts the PyTorch memory snapshot (torch.cuda.memory._dump_snapshot with
the history recorded; an RMM CSV trace works too) and replays it, on a
simulated GPU of the given capacity, under PyTorch's own policy (gardenalloc's
native mode, which reproduces it exactly) with default settings, with the
snapshot's own settings, with max_split_size_mb variants and with PyTorch's
expandable segments (expandable_policy:pytorch, their policy exactly), and
under gardenalloc's expandable segments. Then it says, in a few lines: the peak of live bytes (the floor no allocator goes
below), what each setting reserves, whether the OOM goes away, how much was
lost to fragmentation, the smallest GPU each setting runs on (`ga-bench fit`)
and the smallest the job needs with the best setting, and which
configuration line to use, or that the job does not fit at all.

Every replay goes through `ga-bench replay --json` (found in GARDENALLOC_BENCH,
next to this package, in the repository's build/bench/, or on PATH), the one
replay engine of the project.
"""
import argparse
import html
import json
import os
import shutil
import subprocess
import sys
import tempfile

from . import trace as _trace

GIB = float(1 << 30)
MIB = float(1 << 20)

# (name, label, gardenalloc configuration, the line a user would set). Native
# mode is PyTorch's policy exactly, and expandable_policy:pytorch PyTorch's
# expandable segments; the gardenalloc rows are gardenalloc.
SETTINGS = [
    ("pytorch", "PyTorch, default settings", "", "PYTORCH_CUDA_ALLOC_CONF unset"),
    ("split128", "PyTorch, max_split_size_mb:128", "max_split_size_mb:128",
     "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128"),
    ("split512", "PyTorch, max_split_size_mb:512", "max_split_size_mb:512",
     "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512"),
    ("pt_expandable", "PyTorch, expandable_segments:True", "expandable_segments:True,expandable_policy:pytorch",
     "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
    ("ga_always", "gardenalloc, expandable, always move", "expandable_segments:True,expandable_move_pages:always",
     "GARDENALLOC_CONF=expandable_segments:True,expandable_move_pages:always"),
    ("gardenalloc", "gardenalloc, expandable_segments:True", "expandable_segments:True",
     "GARDENALLOC_CONF=expandable_segments:True"),
]
PYTORCH_ROWS = ("pytorch", "split128", "split512", "pt_expandable", "yours")
GARDENALLOC_ROWS = ("ga_always", "gardenalloc")


class DoctorError(Exception):
    pass


def gib(n):
    return "%.2f GiB" % (n / GIB) if n >= GIB else "%.1f MiB" % (n / MIB)


def gib_fine(n):
    """A device size to the MiB: three decimals in GiB."""
    return "%.3f GiB" % (n / GIB) if n >= GIB else "%.1f MiB" % (n / MIB)


def gib3(n):
    """Three decimals: for sizes compared with each other in one sentence."""
    return "%.3f GiB" % (n / GIB)


def find_bench():
    env = os.environ.get("GARDENALLOC_BENCH")
    here = os.path.dirname(os.path.abspath(__file__))
    cands = ([env] if env else []) + [os.path.join(here, "ga-bench"),
                                      os.path.join(os.path.dirname(os.path.dirname(here)), "build", "bench",
                                                   "ga-bench")]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    found = shutil.which("ga-bench")
    if found:
        return found
    raise DoctorError("needs ga-bench, gardenalloc's replay tool, and found none (tried %s and PATH): build it "
                      "with bench/run.sh or `cmake --build build --target ga-bench`, or set GARDENALLOC_BENCH"
                      % ", ".join(c for c in cands if c))


# ---- Input ----


def read_input(path, device):
    """(csv path to replay, facts, a temporary folder to remove or None)."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as e:
        raise DoctorError("cannot read %s: %s" % (path, e.strerror or e))
    if head.lstrip().startswith(b"Thread,"):
        if device is not None:
            raise DoctorError("--device applies to a snapshot; %s is a CSV trace of one device already" % path)
        return path, {"kind": "csv", "ooms": 0}, None
    try:
        snap = _trace.load(path)
        device = _trace.choose_device(snap, device)
        rows = _trace.convert(snap, device)
    except _trace.SnapshotError as e:
        raise DoctorError(str(e))
    facts = _trace.summary(snap, device)
    facts["kind"] = "snapshot"
    reserved = 0
    for _, seg in _trace.segments_of(snap, device):
        reserved += _trace._number_or_none(seg.get("total_size")) or 0
    facts["reserved_at_snapshot"] = reserved
    tmp = tempfile.mkdtemp(prefix="gardenalloc-doctor-")
    csv = os.path.join(tmp, os.path.splitext(os.path.basename(path))[0] + ".csv")
    _trace.write_csv(rows, csv)
    return csv, facts, tmp


def capacity_of(args, facts):
    """(bytes, how it was found)."""
    if args.capacity_gib is not None:
        if not args.capacity_gib > 0 or args.capacity_gib > 4096:
            raise DoctorError("--capacity-gib %s: give the GPU's memory in GiB, e.g. 80" % args.capacity_gib)
        return int(args.capacity_gib * 1024) * (1 << 20), "given"
    free = [f for f in facts.get("oom_device_free", []) if isinstance(f, int) and not isinstance(f, bool)]
    if free and facts.get("reserved_at_snapshot"):
        cap = facts["reserved_at_snapshot"] + free[-1]
        return (cap >> 21) << 21, ("estimated from the recorded OOM: %s reserved at the snapshot + %s the GPU "
                                   "reported free; --capacity-gib sets it" % (gib(facts["reserved_at_snapshot"]),
                                                                              gib(free[-1])))
    return 80 << 30, "assumed (an 80 GB GPU); --capacity-gib sets your GPU's"


# ---- Replays ----


def replay(bench, csv, capacity, settings, samples):
    args = [bench, "replay", csv, "--capacity-mb", str(capacity >> 20), "--json", "--samples", str(samples)]
    for s in settings:
        args += ["--conf", "%s=%s" % (s[0], s[2])]
    r = subprocess.run(args, capture_output=True, text=True)
    results = {}
    for line in r.stdout.splitlines():
        try:
            o = json.loads(line)
        except ValueError:
            continue
        results[o["config"]] = o
    if r.returncode != 0 or len(results) != len(settings):
        err = [l for l in r.stderr.splitlines() if not l.startswith("gardenalloc: no usable")]
        raise DoctorError("the replay failed: %s" % ("; ".join(err) or "ga-bench exited %d" % r.returncode))
    return results


def fit(bench, csv, settings):
    """The smallest simulated GPU, within 2 MiB, on which each setting
    replays the trace with no OOM (`ga-bench fit`), in bytes; None where it
    found none (a setting that does not fit on 80 GiB)."""
    args = [bench, "fit", csv, "--json"]
    for s in settings:
        args += ["--conf", "%s=%s" % (s[0], s[2])]
    r = subprocess.run(args, capture_output=True, text=True)
    found = {}
    for line in r.stdout.splitlines():
        try:
            o = json.loads(line)
        except ValueError:
            continue
        found[o["config"]] = o["fits_on_bytes"]
    return {s[0]: found.get(s[0]) for s in settings}


def smallest_gpu(settings, res):
    """The line naming the smallest GPU the job needs, and with which setting."""
    fits = [s for s in settings if res[s[0]].get("fits_on_bytes")]
    if not fits:
        return None
    best = min(fits, key=lambda s: res[s[0]]["fits_on_bytes"])
    need = res[best[0]]["fits_on_bytes"]
    live = res[best[0]]["trace_peak_live_bytes"]
    return ("Fits on: the job runs on a GPU of %s (%.3f x its %s peak live) with %s; the smallest with "
            "PyTorch's own settings is %s." % (
                gib_fine(need), need / live if live else 0.0, gib_fine(live), best[3],
                gib_fine(min([res[s[0]]["fits_on_bytes"] for s in fits if s[0] in PYTORCH_ROWS] or [0])) if
                any(s[0] in PYTORCH_ROWS for s in fits) else "none tried"))


# ---- The verdict ----


def row_text(s, o):
    live = o["trace_peak_live_bytes"]
    over = (o["peak_reserved_bytes"] / live - 1) * 100 if live else 0
    first = "event %d" % o["first_oom"]["event"] if o["first_oom"] else "-"
    fits = gib_fine(o["fits_on_bytes"]) if o.get("fits_on_bytes") else "-"
    return "  %-42s %14s %9s %6d   %-11s %11s" % (s[1], gib(o["peak_reserved_bytes"]), "%+.1f %%" % over,
                                                  o["num_ooms"], first, fits)


def verdict(settings, res, capacity, facts):
    """The lines of the verdict and the configuration line to use (or None)."""
    base = res["yours"] if "yours" in res else res["pytorch"]
    live = base["trace_peak_live_bytes"]
    out = []
    fits = [s for s in settings if res[s[0]]["num_ooms"] == 0]
    if live > capacity:
        out.append("Does not fit. At its peak the program has %s live at once, more than the %s of the GPU: no "
                   "allocator and no setting can run it. It needs less memory at once (a smaller batch, activation "
                   "checkpointing, lower precision, offloading) or a larger GPU." % (gib(live), gib(capacity)))
        return out, None
    if base["num_ooms"] == 0:
        out.append("No out-of-memory at %s with PyTorch's allocator as it was set: it reserves %s at most for %s "
                   "live (%s lost to fragmentation and rounding)." % (
                       gib(capacity), gib(base["peak_reserved_bytes"]), gib(live),
                       gib(base["peak_reserved_bytes"] - live)))
        if facts.get("ooms"):
            out.append("The recorded run did run out, so something outside PyTorch's allocator held memory on the "
                       "GPU then (the CUDA context, other processes, NCCL or cuBLAS workspaces): give "
                       "--capacity-gib the memory PyTorch could really use.")
        return out, None
    oom = base["first_oom"]
    out.append("Fragmentation, not size. The program never has more than %s live, less than the %s of the GPU, "
               "but PyTorch's allocator as it was set fails at event %d: %s asked while it held %s, of which %s was "
               "cached but in pieces too small for the request (%d OOMs in all)." % (
                   gib3(live), gib3(capacity), oom["event"], gib(oom["size"]), gib(oom["reserved"]),
                   gib(oom["reserved"] - oom["allocated"]), base["num_ooms"]))
    pt = [s for s in fits if s[0] in PYTORCH_ROWS]
    if pt:
        best = min(pt, key=lambda s: res[s[0]]["peak_reserved_bytes"])
        out.append("PyTorch's own allocator avoids it with %s (peak reserved %s). Set:" % (
            best[2], gib(res[best[0]]["peak_reserved_bytes"])))
        return out, best[3]
    tried = [s[2].replace(",expandable_policy:pytorch", "") for s in settings if s[0] in PYTORCH_ROWS[1:]]
    out.append("None of PyTorch's settings (%s) avoids it." % ", ".join(tried))
    ga = [s for s in fits if s[0] in GARDENALLOC_ROWS]
    if ga:
        best = min(ga, key=lambda s: res[s[0]]["peak_reserved_bytes"])
        o = res[best[0]]
        out.append("gardenalloc avoids it: %s reserves %s at most (%s over the live bytes). Run the job with "
                   "gardenalloc as PyTorch's allocator (`gardenalloc run -- python train.py`, or "
                   "gardenalloc.torch.install() before CUDA starts) and:" % (
                       best[2], gib(o["peak_reserved_bytes"]), gib(o["peak_reserved_bytes"] - live)))
        return out, best[3]
    out.append("No setting tried avoids it: the job fits in principle (%s live on %s) but needs room to spare for "
               "the free pieces any online allocator strands; the best here still fails %d times. Free a little "
               "memory (a smaller batch) or use a larger GPU." % (
                   gib3(live), gib3(capacity), min(res[s[0]]["num_ooms"] for s in settings)))
    return out, None


GARDENALLOC_ONLY = ("backend", "sim_capacity_mb", "sim_devices")


def _own_settings(facts):
    """The snapshot's PYTORCH_CUDA_ALLOC_CONF without keys of gardenalloc's
    own simulated device (a snapshot gardenalloc wrote names them), or ''."""
    own = (facts.get("settings") or {}).get("PYTORCH_CUDA_ALLOC_CONF")
    if not isinstance(own, str):
        return ""
    items, depth, cur = [], 0, ""
    for ch in own.replace(" ", ""):
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    return ",".join(i for i in items if i and i.split(":")[0] not in GARDENALLOC_ONLY)


def settings_for(facts):
    """SETTINGS, with the user's own PYTORCH_CUDA_ALLOC_CONF first when the
    snapshot names one that native mode reproduces (and that is not one of
    the rows already)."""
    own = _own_settings(facts)
    conf = own + ",expandable_policy:pytorch" if "expandable_segments:True" in own else own
    if not own or conf in [s[2] for s in SETTINGS]:
        return list(SETTINGS)
    return [("yours", "PyTorch, your settings (%s)" % own[:20], conf, "PYTORCH_CUDA_ALLOC_CONF=" + own)] + \
        list(SETTINGS)


def report(path, facts, capacity, how, settings, res):
    base = res["pytorch"]
    lines = ["gardenalloc doctor: %s%s, %d events, peak live %s" % (
        path, " (device %d)" % facts["device"] if facts.get("kind") == "snapshot" else "", base["events"],
        gib(base["trace_peak_live_bytes"]))]
    if facts.get("ooms"):
        sizes = [s for s in facts.get("oom_sizes", []) if isinstance(s, int)]
        free = [f for f in facts.get("oom_device_free", []) if isinstance(f, int)]
        lines.append("The recorded run ran out of memory %d time%s (first: %s asked, %s free on the GPU)." % (
            facts["ooms"], "" if facts["ooms"] == 1 else "s", gib(sizes[0]) if sizes else "?",
            gib(free[0]) if free else "?"))
    if _own_settings(facts):
        lines.append("It ran with PYTORCH_CUDA_ALLOC_CONF=%s." % _own_settings(facts))
    lines.append("Replayed on a simulated GPU of %s (%s)." % (gib(capacity), how))
    lines.append("")
    lines.append("  %-42s %14s %9s %6s   %-11s %11s" % ("setting", "peak reserved", "vs live", "OOMs", "first OOM",
                                                       "fits on"))
    for s in settings:
        lines.append(row_text(s, res[s[0]]))
    lines.append("  %-42s %14s" % ("peak live bytes (the floor)", gib(base["trace_peak_live_bytes"])))
    lines.append("  %-42s %14s" % ("the GPU", gib(capacity)))
    lines.append("")
    small = smallest_gpu(settings, res)
    if small:
        lines.append(small)
    text, use = verdict(settings, res, capacity, facts)
    lines += text
    if use:
        lines.append("    " + use)
    return lines, use


# ---- The page ----

COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"]


def _nice(span):
    import math
    raw = span / 5.0
    p = 10 ** math.floor(math.log10(raw))
    m = raw / p
    return (1 if m < 1.5 else 2 if m < 3.5 else 5 if m < 7.5 else 10) * p


# What each line of a chart is, drawn under its x axis: (label, SVG style, colour from the setting).
LEGEND = (("reserved", 'stroke-width="2.5"', True), ("allocated", 'stroke-width="1.2" stroke-dasharray="5,3"', True),
          ("live", 'stroke="#000" stroke-width="1"', False), ("GPU capacity", 'stroke="#c00" stroke-width="1.5"', False),
          ("peak live", 'stroke="#777" stroke-dasharray="6,4"', False),
          ("first OOM", 'stroke="#c00" stroke-dasharray="2,2"', False))


def chart(s, o, capacity, colour, ymin, ymax):
    w, h, l, r, t, b = 460, 286, 60, 24, 26, 70
    c = o.get("curve") or {}
    ev = c.get("event") or [0]
    xmax = int(max(ev)) or 1

    def px(e):
        return l + (w - l - r) * e / xmax

    def py(v):
        return t + (h - t - b) * (1 - (max(v, ymin) - ymin) / (ymax - ymin))

    def line(vals, style):
        pts = " ".join("%.1f,%.1f" % (px(e), py(v)) for e, v in zip(ev, vals))
        return '<polyline fill="none" %s points="%s"/>' % (style, pts)

    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
             'font-size="11">' % (w, h), '<rect width="100%" height="100%" fill="white"/>',
             '<text x="%d" y="16" font-size="13">%s: %d OOM%s</text>' % (l, html.escape(s[1]), o["num_ooms"],
                                                                          "" if o["num_ooms"] == 1 else "s")]
    unit = GIB if ymax >= 2 * GIB else MIB
    step = _nice((ymax - ymin) / unit) * unit
    v = (ymin // step + 1) * step if ymin % step else ymin
    while v <= ymax:
        parts.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e4e4e4"/><text x="%d" y="%.1f" '
                     'text-anchor="end">%s</text>' % (l, w - r, py(v), py(v), l - 4, py(v) + 4, gib(v)))
        v += step
    parts.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#000"/>' % (l, w - r, h - b, h - b))
    parts.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#000"/>' % (l, l, t, h - b))
    xstep = max(1, int(_nice(xmax)))  # round event numbers, none past the last event
    for e in range(0, xmax + 1, xstep):
        parts.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#000"/><text x="%.1f" y="%d" '
                     'text-anchor="middle">%d</text>' % (px(e), px(e), h - b, h - b + 4, px(e), h - b + 15, e))
    parts.append('<text x="%d" y="%d" text-anchor="middle">events</text>' % ((l + w - r) / 2, h - b + 28))
    parts.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#c00" stroke-width="1.5"/>' % (
        l, w - r, py(capacity), py(capacity)))
    peak = o["trace_peak_live_bytes"]
    parts.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#777" stroke-dasharray="6,4"/>' % (
        l, w - r, py(peak), py(peak)))
    if c:
        parts.append(line(c["reserved"], 'stroke="%s" stroke-width="2.5"' % colour))
        parts.append(line(c["allocated"], 'stroke="%s" stroke-width="1.2" stroke-dasharray="5,3"' % colour))
        parts.append(line(c["live"], 'stroke="#000" stroke-width="1"'))
    if o["first_oom"]:
        x = px(o["first_oom"]["event"])
        parts.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#c00" stroke-dasharray="2,2"/>' % (
            x, x, t, h - b))
    for i, (label, style, coloured) in enumerate(LEGEND):
        x, y = l + (i % 3) * 130, h - b + 46 + (i // 3) * 16
        stroke = ' stroke="%s"' % colour if coloured else ""
        parts.append('<line x1="%d" x2="%d" y1="%d" y2="%d"%s %s/><text x="%d" y="%d">%s</text>' % (
            x, x + 24, y - 4, y - 4, stroke, style, x + 30, y, label))
    parts.append("</svg>")
    return "\n".join(parts)


def write_html(path, title, lines, settings, res, capacity):
    top = max([capacity] + [max(res[s[0]].get("curve", {}).get("reserved") or [0]) for s in settings])
    live = max(res[s[0]]["trace_peak_live_bytes"] for s in settings)
    ymin = max(0.0, min(live, capacity) * 0.8)
    ymax = top + 0.1 * (top - ymin)
    body = ["<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>gardenalloc doctor: %s</title>"
            "<style>body{font-family:sans-serif;max-width:1000px;margin:2em auto}pre{white-space:pre-wrap}"
            ".charts{display:flex;flex-wrap:wrap;gap:12px}</style></head><body>" % html.escape(title),
            "<h1>gardenalloc doctor</h1><pre>%s</pre>" % html.escape("\n".join(lines)),
            "<p>One chart per setting, on the same axes; the y axis starts at %s.</p>"
            "<div class=\"charts\">" % gib(ymin)]
    for i, s in enumerate(settings):
        body.append(chart(s, res[s[0]], capacity, COLOURS[i % len(COLOURS)], ymin, ymax))
    body.append("</div></body></html>")
    _trace.write_file(path, lambda f: f.write("\n".join(body)))


def main(argv=None, prog="gardenalloc doctor"):
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0].replace("\n", " "),
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[2:]))
    p.add_argument("input", help="a snapshot pickle (torch.cuda.memory._dump_snapshot), its JSON, or an RMM CSV")
    p.add_argument("--capacity-gib", type=float, default=None,
                   help="the GPU's memory (default: estimated from a recorded OOM, else 80)")
    p.add_argument("--device", type=int, default=None, help="the device whose trace to replay (a snapshot)")
    p.add_argument("--html", metavar="PAGE", help="also write a page with the curves of each setting")
    p.add_argument("--json", action="store_true", help="print the replays and the verdict as JSON")
    args = p.parse_args(argv)
    tmp = None
    try:
        bench = find_bench()
        csv, facts, tmp = read_input(args.input, args.device)
        capacity, how = capacity_of(args, facts)
        settings = settings_for(facts)
        res = replay(bench, csv, capacity, settings, 300 if args.html or args.json else 2)
        for name, fits_on in fit(bench, csv, settings).items():
            res[name]["fits_on_bytes"] = fits_on
        lines, use = report(args.input, facts, capacity, how, settings, res)
        if args.json:
            for o in res.values():
                o.pop("command", None)
            print(json.dumps({"input": args.input, "capacity_bytes": capacity, "capacity_from": how,
                              "facts": facts, "verdict": lines, "use": use,
                              "settings": [{"name": s[0], "label": s[1], "conf": s[2], "line": s[3],
                                            "replay": res[s[0]]} for s in settings]}))
        else:
            print("\n".join(lines))
        if args.html:
            try:
                write_html(args.html, args.input, lines, settings, res, capacity)
            except OSError as e:
                raise DoctorError("cannot write %s: %s" % (args.html, e.strerror or e))
            if not args.json:
                print("\ncurves: %s" % args.html)
    except DoctorError as e:
        print("%s: %s" % (prog, e), file=sys.stderr)
        return 2
    except OSError as e:
        print("%s: %s" % (prog, e), file=sys.stderr)
        return 2
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
