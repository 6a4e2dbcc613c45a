/* svg.c — one plot per workload: reserved (solid) and allocated (dashed)
 * bytes over the replay, one colour per configuration, so the point where the
 * configurations part ways can be seen. */
#include <stdio.h>

#include "bench.h"

static const char *const colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};

int svg_write(const char *path, const char *title, const svg_series *series, size_t n) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  const double W = 900, H = 460, L = 80, R = 220, T = 40, B = 50;
  uint64_t xmax = 1, ymax = 1;
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; series[i].s && k < series[i].s->n; k++) {
      if (series[i].s->event[k] > xmax) xmax = series[i].s->event[k];
      if (series[i].s->reserved[k] > ymax) ymax = series[i].s->reserved[k];
    }
  double gib = (double)ymax / (double)(1ull << 30);
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "font-family=\"sans-serif\" font-size=\"12\">\n",
          W, H);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f,
          "<text x=\"%.0f\" y=\"24\" font-size=\"15\">%s: reserved (solid) and allocated (dashed) "
          "memory</text>\n",
          L, title);
  for (int g = 0; g <= 4; g++) { /* grid and y labels */
    double y = T + (H - T - B) * (1.0 - g / 4.0);
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, y, W - R, y);
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.2f GiB</text>\n", L - 6, y + 4,
            gib * g / 4.0);
  }
  fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">events replayed (0 to %llu)</text>\n",
          (L + W - R) / 2, H - 15, (unsigned long long)xmax);
  for (size_t i = 0; i < n; i++) {
    const replay_samples *s = series[i].s;
    if (!s) continue; /* that configuration failed */
    const char *c = colours[i % (sizeof colours / sizeof colours[0])];
    for (int line = 0; line < 2; line++) {
      const uint64_t *v = line ? s->allocated : s->reserved;
      fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s points=\"", c,
              line ? "1.2" : "2", line ? " stroke-dasharray=\"5,3\"" : "");
      for (size_t k = 0; k < s->n; k++)
        fprintf(f, "%.1f,%.1f ", L + (W - L - R) * (double)s->event[k] / (double)xmax,
                T + (H - T - B) * (1.0 - (double)v[k] / (double)ymax));
      fprintf(f, "\"/>\n");
    }
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" stroke-width=\"3\"/>\n",
            W - R + 15, T + 10 + 20.0 * (double)i, W - R + 40, T + 10 + 20.0 * (double)i, c);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n", W - R + 46, T + 14 + 20.0 * (double)i,
            series[i].label);
  }
  fprintf(f, "</svg>\n");
  return fclose(f) == 0 ? 0 : -1;
}
