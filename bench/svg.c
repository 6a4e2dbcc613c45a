/* svg.c — one plot per workload or trace: reserved bytes over the replay for
 * each configuration, the live (requested) bytes, and the peak-live lower
 * bound no allocator can go below.
 *
 * Each configuration has its own colour, dash pattern and width, drawn widest
 * first, so a line that coincides with another still shows around it, and
 * the legend names the line it coincides with. The x axis ends at the last
 * event; the y axis has round ticks from 0, or from just below the data
 * (svg_opts.y_near_data) where the configurations differ by a few per cent.
 * The legend gives each configuration's peak reserved, in the plot's unit and
 * in MiB (the unit of ga-bench's tables), and its ratio to peak live. */
#include <math.h>
#include <stdio.h>

#include "bench.h"

/* Okabe-Ito colours (distinct for colour-blind readers), then black. */
static const char *const colours[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                      "#E69F00", "#56B4E9", "#000000"};
static const char *const dashes[] = {"", "9,4", "2,3", "12,3,2,3", "5,5", "1,2", "14,6"};
#define NSTYLE 7

static const double W = 980, H = 540, L = 92, R = 330, T = 56, B = 64;

typedef struct axis {
  double lo, hi, step; /* in display units */
  double unit;         /* bytes (or events) per display unit */
} axis;

/* Round ticks: a step of 1, 2 or 5 times a power of ten, about `want` of them. */
static double nice_step(double span, int want) {
  double raw = span / want, p = pow(10.0, floor(log10(raw))), m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

/* An axis over [lo, hi] with round ticks. `to_tick` widens the end to the next
 * tick (the y axis); without it the axis ends at the data (the x axis, whose
 * last tick is then the last round value inside). */
static axis make_axis(double lo, double hi, double unit, int want, int to_tick) {
  axis a = {lo / unit, hi / unit, 1, unit};
  if (a.hi <= a.lo) a.hi = a.lo + 1;
  a.step = nice_step(a.hi - a.lo, want);
  a.lo = floor(a.lo / a.step) * a.step;
  if (to_tick) a.hi = ceil(a.hi / a.step) * a.step;
  return a;
}

/* The first earlier series whose reserved bytes are the same at every sample:
 * its line hides this one, so the legend says so. -1 when none. */
static long same_as(const svg_series *series, size_t i) {
  const replay_samples *s = series[i].s;
  for (size_t j = 0; s && j < i; j++) {
    const replay_samples *t = series[j].s;
    if (!t || t->n != s->n) continue;
    size_t k = 0;
    while (k < s->n && t->event[k] == s->event[k] && t->reserved[k] == s->reserved[k]) k++;
    if (k == s->n) return (long)j;
  }
  return -1;
}

static double px_x(const axis *a, double v) {
  return L + (W - L - R) * (v / a->unit - a->lo) / (a->hi - a->lo);
}
static double px_y(const axis *a, double v) {
  return T + (H - T - B) * (1.0 - (v / a->unit - a->lo) / (a->hi - a->lo));
}

void svg_text_escaped(FILE *f, const char *text) {
  for (; *text; text++)
    if (*text == '<')
      fputs("&lt;", f);
    else if (*text == '>')
      fputs("&gt;", f);
    else if (*text == '&')
      fputs("&amp;", f);
    else
      fputc(*text, f);
}

static void ticks(FILE *f, const axis *x, const axis *y, const char *yunit) {
  fprintf(f, "<g stroke=\"#000\" stroke-width=\"1\">\n");
  fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", L, H - B, W - R, H - B);
  fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", L, T, L, H - B);
  fprintf(f, "</g>\n<g font-size=\"12\">\n");
  for (double v = y->lo; v <= y->hi + y->step / 2; v += y->step) {
    double py = px_y(y, v * y->unit);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", L, py, W - R,
            py);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n", L - 5, py, L, py);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.*f</text>\n", L - 8, py + 4,
            y->step < 1 ? (y->step < 0.1 ? 2 : 1) : 0, v);
  }
  for (double v = x->lo; v <= x->hi + x->step * 1e-9; v += x->step) {
    double px = px_x(x, v * x->unit);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n", px, H - B, px,
            H - B + 5);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n", px, H - B + 19, v);
  }
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"13\">events replayed</text>\n",
          (L + W - R) / 2, H - 18);
  fprintf(f,
          "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" text-anchor=\"middle\" font-size=\"13\">"
          "bytes (%s)</text>\n",
          22.0, (T + H - B) / 2, yunit);
  fprintf(f, "</g>\n");
}

static void polyline(FILE *f, const axis *x, const axis *y, const replay_samples *s, const uint64_t *v,
                     const char *style) {
  fprintf(f, "<polyline fill=\"none\" stroke-linejoin=\"round\" %s points=\"", style);
  for (size_t k = 0; k < s->n; k++)
    fprintf(f, "%.1f,%.1f ", px_x(x, (double)s->event[k]), px_y(y, (double)v[k]));
  fprintf(f, "\"/>\n");
}

int svg_write(FILE *f, const svg_opts *o, const svg_series *series, size_t n) {
  uint64_t xmax = 1, ymax = o->peak_live, lo = o->peak_live ? o->peak_live : UINT64_MAX;
  for (size_t i = 0; i < n; i++) {
    const replay_samples *s = series[i].s;
    for (size_t k = 0; s && k < s->n; k++) {
      if (s->event[k] > xmax) xmax = s->event[k];
      if (s->reserved[k] > ymax) ymax = s->reserved[k];
      if (s->live[k] > ymax) ymax = s->live[k];
      if (k >= s->n / 20 && s->reserved[k] && s->reserved[k] < lo) lo = s->reserved[k];
    }
  }
  double gib = (double)(1ull << 30), mib = (double)(1ull << 20);
  double unit = (double)ymax >= 2 * gib ? gib : mib;
  double ylo = 0;
  if (o->y_near_data && lo != UINT64_MAX && lo < ymax) ylo = (double)lo - 0.08 * (double)(ymax - lo);
  if (ylo < 0) ylo = 0;
  axis y = make_axis(ylo, (double)ymax * 1.02, unit, 6, 1), x = make_axis(0, (double)xmax, 1, 8, 0);
  fprintf(
      f,
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
      "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n",
      W, H, W, H);
  if (o->command) {
    fprintf(f, "<desc>");
    svg_text_escaped(f, o->command);
    fprintf(f, "</desc>\n");
  }
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f, "<text x=\"%.0f\" y=\"24\" font-size=\"16\">", L);
  svg_text_escaped(f, o->title);
  fprintf(f, ": reserved memory per configuration</text>\n");
  fprintf(f,
          "<text x=\"%.0f\" y=\"42\" font-size=\"12\" fill=\"#444\">live bytes in thin black; the grey "
          "dashed line "
          "is peak live, the floor for any allocator%s</text>\n",
          L, ylo > 0 ? "; y axis starts near the data" : "");
  ticks(f, &x, &y, unit == gib ? "GiB" : "MiB");
  fprintf(f,
          "<clipPath id=\"plot\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/></clipPath>\n",
          L, T, W - L - R, H - T - B);
  fprintf(f, "<g clip-path=\"url(#plot)\">\n");
  char style[160];
  if (n && series[0].s) { /* the program's live bytes (the same in every configuration without OOM) */
    polyline(f, &x, &y, series[0].s, series[0].s->live, "stroke=\"#000\" stroke-width=\"1\"");
  }
  for (size_t i = 0; i < n; i++) { /* widest first */
    if (!series[i].s) continue;    /* that configuration failed */
    double width = 5.0 - 3.5 * (double)i / (double)(n > 1 ? n - 1 : 1);
    snprintf(style, sizeof style, "stroke=\"%s\" stroke-width=\"%.2f\"%s%s%s stroke-opacity=\"0.9\"",
             colours[i % NSTYLE], width, dashes[i % NSTYLE][0] ? " stroke-dasharray=\"" : "",
             dashes[i % NSTYLE], dashes[i % NSTYLE][0] ? "\"" : "");
    polyline(f, &x, &y, series[i].s, series[i].s->reserved, style);
  }
  if (o->peak_live) {
    double py = px_y(&y, (double)o->peak_live);
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#777\" stroke-width=\"1.5\" "
            "stroke-dasharray=\"6,4\"/>\n",
            L, py, W - R, py);
  }
  fprintf(f, "</g>\n");
  /* Legend: each entry's peak in the plot's unit and in MiB (the tables' unit);
   * a line hidden under an earlier one names it. */
  double lx = W - R + 16, yy = T + 6;
  fprintf(f, "<g font-size=\"12\">\n");
  for (size_t i = 0; i < n; i++) {
    double width = 5.0 - 3.5 * (double)i / (double)(n > 1 ? n - 1 : 1);
    fprintf(
        f,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%.2f\"%s%s%s/>\n",
        lx, yy + 6, lx + 44, yy + 6, colours[i % NSTYLE], width,
        dashes[i % NSTYLE][0] ? " stroke-dasharray=\"" : "", dashes[i % NSTYLE],
        dashes[i % NSTYLE][0] ? "\"" : "");
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", lx + 52, yy + 10);
    svg_text_escaped(f, series[i].label);
    fprintf(f, "</text>\n");
    if (series[i].s && o->peak_live) {
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#444\">peak ", lx + 52, yy + 25);
      if (unit == gib) fprintf(f, "%.2f GiB = ", (double)series[i].peak_reserved / gib);
      fprintf(f, "%.0f MiB, %.3f\xc3\x97 live</text>\n", (double)series[i].peak_reserved / mib,
              (double)series[i].peak_reserved / (double)o->peak_live);
    } else if (!series[i].s)
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#a00\">failed</text>\n", lx + 52, yy + 25);
    long j = same_as(series, i);
    if (j >= 0) {
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#444\">the same line as ", lx + 52, yy + 40);
      svg_text_escaped(f, series[j].label);
      fprintf(f, "</text>\n");
      yy += 15;
    }
    yy += 34;
  }
  fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" stroke-width=\"1\"/>\n",
          lx, yy + 6, lx + 44, yy + 6);
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">live bytes</text>\n", lx + 52, yy + 10);
  if (o->peak_live) {
    yy += 24;
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#777\" stroke-width=\"1.5\" "
            "stroke-dasharray=\"6,4\"/>\n",
            lx, yy + 6, lx + 44, yy + 6);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">peak live (the lower bound)</text>\n", lx + 52, yy + 10);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#444\">", lx + 52, yy + 25);
    if (unit == gib) fprintf(f, "%.2f GiB = ", (double)o->peak_live / gib);
    fprintf(f, "%.0f MiB</text>\n", (double)o->peak_live / mib);
  }
  fprintf(f, "</g>\n</svg>\n");
  return ferror(f) ? -1 : 0;
}
