#!/usr/bin/env python3
"""frontier.py — draws the frontier of memory against driver time.

  frontier.py POINTS.json OUT.svg

POINTS.json is what `dominance.py --svg OUT.svg` writes beside the figure
(OUT.json): for each cost table, one point per setting with its summed
driver time (ms) and its memory over the summed peak live bytes, as the
smallest device it fits on ("fits") and as the peak reserved on an 80 GiB
device ("resv"). dominance.py measures; this file only draws, so the figure
can be drawn again without replaying anything.

One row per cost table. Left: every setting, driver time on a log scale,
memory above peak live in percent. The settings within 10 % of PyTorch's
expandable segments' driver time crowd there, so the framed region is drawn
again at the right on linear axes. Each setting is one colour and one name:
a filled marker for fits-on, a hollow one for peak reserved, a line between.
The values are listed in a table beside the charts.
"""
import json
import math
import sys
from html import escape

# Okabe-Ito colours; PyTorch's settings are squares, gardenalloc's circles.
COLOURS = {
    "PyTorch native": "#D55E00",
    "PyTorch expandable": "#CC79A7",
    "default (when_full)": "#0072B2",
    "settle": "#009E73",
    "always": "#E69F00",
    "hold_1000": "#56B4E9",
    "2 MiB pages": "#555555",
}
OTHER = ["#000000", "#F0E442", "#999999"]
PEER = "PyTorch expandable"
FONT = 11
CHAR_W = 6.2  # about the advance of an 11 px sans-serif character


def colour(name, i):
    return COLOURS.get(name, OTHER[i % len(OTHER)])


def pct(ratio):
    return (ratio - 1.0) * 100.0


def nice_step(span, n=5):
    raw = span / n
    p = 10 ** math.floor(math.log10(raw))
    m = raw / p
    return (1 if m < 1.5 else 2 if m < 3.5 else 5 if m < 7.5 else 10) * p


def fmt_tick(v, step):
    digits = max(0, -int(math.floor(math.log10(step) + 1e-9)))
    return "%.*f" % (digits, v)


class Boxes:
    """Rectangles already drawn on, so that labels avoid them."""

    def __init__(self):
        self.r = []

    def add(self, x0, y0, x1, y1):
        self.r.append((min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)))

    def free(self, x0, y0, x1, y1, frame):
        fx0, fy0, fx1, fy1 = frame
        if x0 < fx0 or x1 > fx1 or y0 < fy0 or y1 > fy1:
            return False
        return all(x1 <= a or x0 >= c or y1 <= b or y0 >= d for a, b, c, d in self.r)


def place_label(out, boxes, frame, x, y, text, fill, bold=False, prefer=(), span=None):
    """Writes text near (x, y): at the first of `prefer` ((x, y, anchor) with
    anchor start, middle or end) that is free, else beside (x, y) if there is
    room, else further out with a thin leader line back to the point (to the
    nearest place on the vertical segment `span`, (top, bottom), if given)."""
    w, h = len(text) * CHAR_W * (1.08 if bold else 1.0), FONT + 2
    tries = [(-1, tx, ty, anchor) for tx, ty, anchor in prefer]
    for dist in range(8, 240, 8):
        for dy in range(-16, 17):
            for side in (1, -1):
                tries.append((dist * dist + (dy * h) ** 2 * 1.5 + (side < 0) * 40, x + side * dist, y + dy * h,
                              "start" if side > 0 else "end"))
    tries.sort(key=lambda t: t[0])
    for rank, tx, ty, anchor in tries:
        x0 = tx if anchor == "start" else tx - w if anchor == "end" else tx - w / 2
        if boxes.free(x0 - 1, ty - h / 2, x0 + w + 1, ty + h / 2, frame):
            boxes.add(x0 - 1, ty - h / 2, x0 + w + 1, ty + h / 2)
            if rank >= 0 and (abs(tx - x) > 10 or abs(ty - y) > 2):
                y_from = min(max(ty, span[0]), span[1]) if span else y
                out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="0.7"/>' % (
                    x + (3 if tx > x else -3), y_from, tx - (2 if anchor == "start" else -2), ty, fill))
            out.append('<text x="%.1f" y="%.1f" font-size="%d" fill="%s" text-anchor="%s"%s>%s</text>' % (
                tx, ty + FONT * 0.35, FONT, fill, anchor, ' font-weight="bold"' if bold else "", escape(text)))
            return
    out.append('<text x="%.1f" y="%.1f" font-size="%d" fill="%s">%s</text>' % (
        x + 6, y, FONT, fill, escape(text)))


def marker(out, name, x, y, c, filled):
    fill = c if filled else "#fff"
    if name.startswith("PyTorch"):
        out.append('<rect x="%.1f" y="%.1f" width="9" height="9" fill="%s" stroke="%s" stroke-width="1.6"/>' % (
            x - 4.5, y - 4.5, fill, c))
    else:
        out.append('<circle cx="%.1f" cy="%.1f" r="5" fill="%s" stroke="%s" stroke-width="1.6"/>' % (x, y, fill, c))


def panel(out, points, x0, y0, w, h, xlog, xr, yr, title, label_all=True, frame_box=None):
    """One chart at (x0, y0) of w x h with its plot area inset for the axes.
    xr, yr: the (low, high) of driver ms and percent above live."""
    l, r, t, b = 52, 10, 22, 38
    px0, px1, py0, py1 = x0 + l, x0 + w - r, y0 + t, y0 + h - b
    fx = (lambda v: math.log10(v)) if xlog else (lambda v: v)
    ax0, ax1 = fx(xr[0]), fx(xr[1])

    def X(v):
        return px0 + (fx(v) - ax0) / (ax1 - ax0) * (px1 - px0)

    def Y(v):
        return py1 - (v - yr[0]) / (yr[1] - yr[0]) * (py1 - py0)

    out.append('<text x="%d" y="%d" font-size="12" font-weight="bold">%s</text>' % (px0, y0 + 13, escape(title)))
    # Grid and ticks: round values inside the axes only.
    ys = nice_step(yr[1] - yr[0])
    v = math.ceil(yr[0] / ys - 1e-9) * ys
    while v <= yr[1] + 1e-9:
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e6e6e6"/>' % (px0, px1, Y(v), Y(v)))
        out.append('<text x="%d" y="%.1f" font-size="10" text-anchor="end">%s %%</text>' % (
            px0 - 4, Y(v) + 3.5, fmt_tick(v, ys)))
        v += ys
    if xlog:
        ticks = []
        for e in range(int(math.floor(ax0)) - 1, int(math.ceil(ax1)) + 1):
            for m in (1, 2, 5):
                t_ = m * 10 ** e
                if xr[0] <= t_ <= xr[1]:
                    ticks.append(t_)
        xfmt = lambda t_: "%g" % t_  # noqa: E731
    else:
        xs = nice_step(xr[1] - xr[0])
        ticks = []
        t_ = math.ceil(xr[0] / xs - 1e-9) * xs
        while t_ <= xr[1] + 1e-9:
            ticks.append(t_)
            t_ += xs
        xfmt = lambda t_: fmt_tick(t_, xs)  # noqa: E731
    for t_ in ticks:
        out.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#e6e6e6"/>' % (X(t_), X(t_), py0, py1))
        out.append('<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%s</text>' % (
            X(t_), py1 + 13, xfmt(t_)))
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#000"/>' % (
        px0, py0, px1 - px0, py1 - py0))
    out.append('<text x="%.1f" y="%d" font-size="10.5" text-anchor="middle">driver time, ms%s</text>' % (
        (px0 + px1) / 2, py1 + 28, ", log scale" if xlog else ""))
    boxes = Boxes()
    frame = (px0 + 2, py0 + 2, px1 - 2, py1 - 2)
    if frame_box:
        (bx0, bx1), (by0, by1) = frame_box
        out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#888" '
                   'stroke-dasharray="4,3"/>' % (X(bx0), Y(by1), X(bx1) - X(bx0), Y(by0) - Y(by1)))
        boxes.add(X(bx0), Y(by1), X(bx1), Y(by0))
    # Points with the same driver time are drawn a few pixels apart.
    xpix = {}
    for i, p in enumerate(points):
        xpix[i] = X(p["driver"])
    order = sorted(range(len(points)), key=lambda i: xpix[i])
    for a, bb in zip(order, order[1:]):
        if abs(xpix[bb] - xpix[a]) < 8 and not (frame_box and in_box(points[a], frame_box)):
            xpix[a] -= 4
            xpix[bb] += 4
    shown = []
    for i, p in enumerate(points):
        if not (xr[0] <= p["driver"] <= xr[1]):
            continue
        if frame_box and in_box(p, frame_box):
            continue
        c = colour(p["name"], i)
        x, yf, yr_ = xpix[i], Y(pct(p["fits"])), Y(pct(p["resv"]))
        out.append('<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>' % (
            x, x, yf, yr_, c))
        marker(out, p["name"], x, yr_, c, False)
        marker(out, p["name"], x, yf, c, True)
        boxes.add(x - 6, min(yf, yr_) - 6, x + 6, max(yf, yr_) + 6)
        shown.append((i, p, c, x, yf, yr_))
    if label_all:
        # The default and PyTorch's first: they get the places nearest their markers.
        def rank(s):
            return (0 if s[1]["name"].startswith("default") else 1 if s[1]["name"] == PEER else 2, -s[4])
        for i, p, c, x, yf, yr_ in sorted(shown, key=rank):
            lo, hi = max(yf, yr_), min(yf, yr_)
            prefer = [(x + 9, lo, "start"), (x - 9, lo, "end"), (x + 9, hi, "start"), (x - 9, hi, "end"),
                      (x, lo + 14, "middle"), (x, hi - 14, "middle")]
            place_label(out, boxes, frame, x, (yf + yr_) / 2, p["name"], c, bold=p["name"].startswith("default"),
                        prefer=prefer, span=(hi, lo))
    if frame_box:
        (bx0, bx1), (by0, by1) = frame_box
        n = sum(1 for p in points if in_box(p, frame_box))
        place_label(out, boxes, frame, X(bx1), Y(by1), "%d settings: drawn again at the right" % n, "#555")


def in_box(p, box):
    (x0, x1), (y0, y1) = box
    return x0 <= p["driver"] <= x1 and y0 <= pct(p["fits"]) <= y1 and y0 <= pct(p["resv"]) <= y1


def pad_range(lo, hi, frac, floor=None):
    span = (hi - lo) or abs(hi) or 1.0
    lo, hi = lo - span * frac, hi + span * frac
    if floor is not None:
        lo = max(lo, floor)
    return lo, hi


def draw(points_by_table, path, traces="the traces"):
    W, ROW, TOP, TABLE_W = 1200, 330, 78, 340
    chart_w = (W - TABLE_W) // 2
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (
        W, TOP + ROW * len(points_by_table) + 10),
        '<rect width="100%" height="100%" fill="#fff"/>',
        '<text x="12" y="22" font-size="15" font-weight="bold">Memory against driver time: '
        'where each setting sits (summed over %s)</text>' % escape(traces),
        '<text x="12" y="41" font-size="11.5" fill="#333">memory above the peak live bytes: filled marker = the '
        'smallest GPU the job fits on, hollow = peak reserved on an 80 GiB GPU; lower and further left is '
        'better</text>',
        '<text x="12" y="57" font-size="11.5" fill="#333">squares: PyTorch\'s allocator (native, '
        'expandable_segments:True); circles: gardenalloc\'s expandable settings; points with the same '
        'driver time are drawn 8 px apart</text>']
    for row, (table, points) in enumerate(points_by_table):
        y0 = TOP + row * ROW
        xs = [p["driver"] for p in points]
        ys = [pct(p[k]) for p in points for k in ("fits", "resv")]
        xr = (10 ** (math.log10(min(xs)) - 0.08), 10 ** (math.log10(max(xs)) + 0.12))
        yr = (0.0, max(ys) * 1.12)
        peer = [p for p in points if p["name"] == PEER]
        ref = peer[0]["driver"] if peer else min(xs)
        near = [p for p in points if ref / 1.1 <= p["driver"] <= ref * 1.1]
        nx = pad_range(min(p["driver"] for p in near), max(p["driver"] for p in near), 0.12)
        ny_vals = [pct(p[k]) for p in near for k in ("fits", "resv")]
        ny = pad_range(min(ny_vals), max(ny_vals), 0.2, floor=0.0)
        box = (nx, ny) if len(near) > 1 else None
        panel(out, points, 0, y0, chart_w, ROW - 10, True, xr, yr,
              "%s cost table: every setting" % table, frame_box=box)
        if box:
            panel(out, near, chart_w, y0, chart_w, ROW - 10, False, nx, ny,
                  "%s cost table: the framed region, linear axes" % table)
        # The values.
        tx = 2 * chart_w + 14
        out.append('<text x="%d" y="%d" font-size="11" font-family="monospace" font-weight="bold">%s</text>' % (
            tx, y0 + 34, ("%-19s %8s %9s %9s" % ("setting", "fits on", "reserved", "driver ms")).replace(
                " ", "\u00a0")))
        for i, p in enumerate(points):
            line = "%-19.19s %7.4f× %8.4f× %9.0f" % (p["name"], p["fits"], p["resv"], p["driver"])
            out.append('<text x="%d" y="%d" font-size="11" font-family="monospace" fill="%s"%s>%s</text>' % (
                tx, y0 + 54 + 17 * i, colour(p["name"], i),
                ' font-weight="bold"' if p["name"].startswith("default") else "",
                escape(line).replace(" ", "\u00a0")))
        out.append('<text x="%d" y="%d" font-size="10.5" fill="#444">× peak live bytes; driver time '
                   'summed,</text>' % (tx, y0 + 66 + 17 * len(points)))
        out.append('<text x="%d" y="%d" font-size="10.5" fill="#444">no lag, %s cost table</text>' % (
            tx, y0 + 80 + 17 * len(points), escape(table)))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: frontier.py POINTS.json OUT.svg")
    with open(argv[0]) as f:
        data = json.load(f)
    draw([(t["table"], t["points"]) for t in data["tables"]], argv[1], data.get("traces", "the traces"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
