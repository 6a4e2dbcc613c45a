"""bench/tools/frontier.py: the frontier figure names every setting where it
is drawn, its labels do not overlap, and its axes end near the data on round
ticks. Drawn from points made here (crowded as the real ones are), so no
replay is needed."""
import os
import re
import sys
import tempfile
import unittest

import support

sys.path.insert(0, os.path.join(support.REPO, "bench", "tools"))
import frontier  # noqa: E402

POINTS = [
    {"name": "PyTorch native", "driver": 2001.8, "fits": 1.0264, "resv": 1.0332},
    {"name": "PyTorch expandable", "driver": 773.0, "fits": 1.0036, "resv": 1.0066},
    {"name": "default (when_full)", "driver": 773.0, "fits": 1.0029, "resv": 1.0066},
    {"name": "settle", "driver": 777.9, "fits": 1.0032, "resv": 1.0061},
    {"name": "always", "driver": 809.6, "fits": 1.0036, "resv": 1.0042},
    {"name": "hold_1000", "driver": 788.4, "fits": 1.0035, "resv": 1.0064},
    {"name": "2 MiB pages", "driver": 7617.0, "fits": 1.0012, "resv": 1.0056},
]
TEXT = re.compile(r'<text x="([-\d.]+)" y="([-\d.]+)" font-size="([\d.]+)"[^>]*?'
                  r'(?: text-anchor="(\w+)")?[^>]*>([^<]*)</text>')


class Frontier(unittest.TestCase):
    def draw(self, tables):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "f.svg")
            frontier.draw(tables, path, "test points")
            with open(path) as f:
                return f.read()

    def test_each_setting_is_named_once_per_table_where_its_markers_are(self):
        svg = self.draw([("blackwell", POINTS), ("a100", POINTS)])
        labels = [m.group(5) for m in TEXT.finditer(svg)]
        for p in POINTS:
            self.assertEqual(labels.count(p["name"]), 2, p["name"])
        self.assertEqual(labels.count("5 settings: drawn again at the right"), 2,
                         "the crowded settings are framed and drawn again")

    def test_labels_do_not_overlap_and_stay_inside_the_figure(self):
        svg = self.draw([("blackwell", POINTS)])
        width = int(re.search(r'<svg [^>]*width="(\d+)"', svg).group(1))
        names = {p["name"] for p in POINTS}
        boxes = []
        for m in TEXT.finditer(svg):
            x, y, size, anchor, text = float(m.group(1)), float(m.group(2)), m.group(3), m.group(4), m.group(5)
            w = len(text) * frontier.CHAR_W
            x0 = x if anchor in (None, "start") else x - w if anchor == "end" else x - w / 2
            self.assertGreaterEqual(x0, 0, text)
            self.assertLessEqual(x0 + w, width + 1, text)
            if text in names:
                boxes.append((x0, y - 9, x0 + w, y + 2, text))
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                apart = a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]
                self.assertTrue(apart, "%s overlaps %s" % (a[4], b[4]))

    def test_ticks_are_round_and_the_zoom_ends_near_its_points(self):
        svg = self.draw([("blackwell", POINTS)])
        ticks = [float(t) for t in re.findall(r">([\d.]+) %</text>", svg)]
        self.assertGreaterEqual(len(ticks), 6)
        for t in ticks:
            self.assertAlmostEqual(t * 10, round(t * 10), places=6, msg="a tick at %g" % t)
        # The zoom's x ticks (linear, ms) lie within a few ms of its points.
        xticks = [float(t) for t in re.findall(r'text-anchor="middle">(\d+)</text>', svg)]
        zoom = [t for t in xticks if 700 < t < 900]
        self.assertGreaterEqual(len(zoom), 3, xticks)
        self.assertGreaterEqual(min(zoom), 765)
        self.assertLessEqual(max(zoom), 815)


if __name__ == "__main__":
    unittest.main()
