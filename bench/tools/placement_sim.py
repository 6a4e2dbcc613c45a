#!/usr/bin/env python3
"""placement_sim.py — how close can an online allocator with 2 MiB pages get
to the peak live bytes of a trace? A model, not the allocator: it replays RMM
CSV traces (sizes scaled, 512-byte rounding) under three idealised placement
models and prints peak physical pages / peak live bytes for each.

  contiguous  every block lies in one virtual range (one per pool: small
              blocks <= 1 MiB apart from large ones), as in gardenalloc's
              expandable segments; a 2 MiB page costs memory while any live
              block touches it, fully free pages are free (they move).
              Placement: the free gap and position (either end of the gap, or
              granule-aligned) needing the fewest new pages, lowest address.
  aliased     a block may span the free tail of one page, whole new pages and
              the free head of another page, mapped side by side at a new
              virtual address (a physical page mapped at two addresses);
              blocks of less than a page fit into any free range of a page.
              Fewest new pages, then the least free space left in the pages
              used. Safe on a GPU, but one mapping per block.
  meshed      as aliased, and before new pages are made, two pages whose used
              ranges do not overlap are merged into one (the live data of one
              is copied into the other and every address mapping it is moved):
              needs the device idle for those blocks, so not safe in general.

Usage: placement_sim.py [--size-scale N] TRACE.csv|DIR...
"""
import bisect
import csv
import glob
import os
import sys

PAGE = 2 << 20
SMALL = 1 << 20


def load(path, scale):
    events = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["Action"] not in ("allocate", "free"):
                continue
            size = max(512, (int(row["Size"]) * scale + 511) // 512 * 512)
            events.append((row["Action"] == "allocate", row["Pointer"], size))
    return events


class Peaks:
    """Live bytes and pages in use, and their peaks."""

    def __init__(self):
        self.live = self.live_peak = self.pages_peak = 0

    def change(self, delta, pages):
        self.live += delta
        self.live_peak = max(self.live_peak, self.live)
        self.pages_peak = max(self.pages_peak, pages)

    def ratio(self):
        return self.pages_peak * PAGE / self.live_peak


def pages_of(lo, hi):
    return range(lo // PAGE, (hi - 1) // PAGE + 1)


def contiguous(events):
    blocks = {0: [], 1: []}  # per pool: sorted (start, end)
    base = {0: 0, 1: 1 << 50}
    touched, where, peaks = {}, {}, Peaks()
    for alloc, ptr, size in events:
        if not alloc:
            pool, x = where.pop(ptr)
            blocks[pool].remove((x, x + size))
            peaks.change(-size, 0)
            for g in pages_of(x, x + size):
                touched[g] -= 1
                if not touched[g]:
                    del touched[g]
            continue
        pool = 0 if size > SMALL else 1
        gaps, prev = [], base[pool]
        for a, b in blocks[pool]:
            if a > prev:
                gaps.append((prev, a))
            prev = b
        gaps.append((prev, None))
        best = None
        for lo, hi in gaps:
            if hi is not None and hi - lo < size:
                continue
            aligned = (lo + PAGE - 1) // PAGE * PAGE
            cands = {lo, aligned} if hi is None else {lo, hi - size}
            if hi is not None and aligned + size <= hi:
                cands.add(aligned)
            for x in cands:
                new = sum(1 for g in pages_of(x, x + size) if g not in touched)
                if best is None or (new, x) < best:
                    best = (new, x)
        x = best[1]
        bisect.insort(blocks[pool], (x, x + size))
        for g in pages_of(x, x + size):
            touched[g] = touched.get(g, 0) + 1
        where[ptr] = (pool, x)
        peaks.change(size, len(touched))
    return peaks.ratio()


def free_ranges(used):
    prev, out = 0, []
    for a, b in used:
        if a > prev:
            out.append((prev, a))
        prev = b
    if prev < PAGE:
        out.append((prev, PAGE))
    return out


def aliased(events, mesh=False):
    pages, where, sizes, peaks = {}, {}, {}, Peaks()
    next_id = [0]

    def new_page():
        next_id[0] += 1
        pages[next_id[0]] = []
        return next_id[0]

    def place(size):
        best = None
        for pid, used in pages.items():  # inside one page
            for a, b in free_ranges(used):
                if b - a >= size and (best is None or (0, b - a - size) < best[0]):
                    best = ((0, b - a - size), [(pid, a, a + size)])
        tails = [(PAGE - a, pid) for pid, u in pages.items() for a, b in free_ranges(u) if b == PAGE and a > 0]
        heads = [(b, pid) for pid, u in pages.items() for a, b in free_ranges(u) if a == 0 and b < PAGE]
        for t, p1 in tails + [(0, None)]:
            for h, p2 in heads + [(0, None), (PAGE, "new")]:
                k = max(0, -(-(size - t - h) // PAGE))
                rest = size - k * PAGE
                x = min(t, rest)
                y = rest - x
                if rest < 0 or y > h or (x == 0 and p1) or (y == 0 and p2):
                    continue
                if p1 is not None and p1 == p2 and y > PAGE - x:
                    continue
                key = (k + (p2 == "new"), (t - x) + (h - y if p2 != "new" else 0))
                if best is None or key < best[0]:
                    best = (key, ("span", p1, x, k, p2, y))
        return best

    def merge_disjoint():
        merged = False
        order = sorted(pages, key=lambda i: -sum(b - a for a, b in pages[i]))
        for i in order:
            for j in order:
                if i == j or i not in pages or j not in pages:
                    continue
                if all(not (a < d and c < b) for a, b in pages[i] for c, d in pages[j]):
                    for r in pages.pop(j):
                        bisect.insort(pages[i], r)
                    for q, pieces in where.items():
                        where[q] = [(i if pid == j else pid, a, b) for pid, a, b in pieces]
                    merged = True
        return merged

    for alloc, ptr, size in events:
        if not alloc:
            for pid, a, b in where.pop(ptr):
                pages[pid].remove((a, b))
                if not pages[pid]:
                    del pages[pid]
            peaks.change(-sizes.pop(ptr), 0)
            continue
        best = place(size)
        if mesh and best[0][0] > 0 and merge_disjoint():
            best = place(size)
        pieces = best[1]
        if pieces[0] == "span":
            _, p1, x, k, p2, y = pieces
            pieces = [(p1, PAGE - x, PAGE)] if x else []
            pieces += [(new_page(), 0, PAGE) for _ in range(k)]
            if y:
                pieces.append((new_page() if p2 == "new" else p2, 0, y))
        for pid, a, b in pieces:
            bisect.insort(pages[pid], (a, b))
        where[ptr], sizes[ptr] = pieces, size
        peaks.change(size, len(pages))
    return peaks.ratio()


def main(argv):
    scale, paths = 64, []
    i = 0
    while i < len(argv):
        if argv[i] == "--size-scale" and i + 1 < len(argv):
            scale = int(argv[i + 1])
            i += 2
            continue
        p = argv[i]
        paths += sorted(glob.glob(os.path.join(p, "*.csv"))) if os.path.isdir(p) else [p]
        i += 1
    if not paths:
        sys.exit(__doc__)
    models = [("contiguous", contiguous), ("aliased", aliased), ("meshed", lambda e: aliased(e, mesh=True))]
    print("peak pages / peak live bytes, sizes x%d, %d MiB pages" % (scale, PAGE >> 20))
    print("%-24s" % "trace" + "".join("%12s" % m for m, _ in models))
    sums = [[] for _ in models]
    for p in paths:
        ev = load(p, scale)
        row = [f(ev) for _, f in models]
        for s, v in zip(sums, row):
            s.append(v)
        print("%-24s" % os.path.basename(p) + "".join("%12.3f" % v for v in row))
    print("%-24s" % "mean" + "".join("%12.3f" % (sum(s) / len(s)) for s in sums))
    print("%-24s" % "max" + "".join("%12.3f" % max(s) for s in sums))


if __name__ == "__main__":
    main(sys.argv[1:])
