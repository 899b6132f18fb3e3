/* chart.c: the SVG line-chart writer of chart.h. The document grows in one buffer; numbers are
 * printed from integers (tenths of a pixel, scaled tick values), never with %f or %g, so the
 * bytes depend on the input alone and not on LC_NUMERIC. */
#include "charts/chart.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vil/common.h"

#define MARGIN_B 58
#define MARGIN_R 20
#define LEGEND_GAP 18
#define LEGEND_ROW 20
#define LEGEND_TEXT 34 /* from the legend's left edge to its text: the line sample and a gap */
#define LABEL_MAX 40
#define CHAR_W 7.0 /* about a 12 px DejaVu Sans character's width: sizes legends, spaces labels */
#define MAX_TICKS 64
#define DASH " stroke-dasharray=\"6 4\""

static const char *const PALETTE[10] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                        "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

typedef struct {
    char *p;
    size_t n, cap;
} Buf;

static void put_bytes(Buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        while (b->n + n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 1 << 14;
        b->p = vil_realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

/* printf for integers and strings only (%f would follow the locale); pieces under 512 bytes */
__attribute__((format(printf, 2, 3))) static void put(Buf *b, const char *fmt, ...) {
    char s[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(s, sizeof s, fmt, ap);
    va_end(ap);
    put_bytes(b, s, n < 0 ? 0 : (size_t)n < sizeof s ? (size_t)n : sizeof s - 1);
}

/* A pixel coordinate to one decimal, a trailing ".0" dropped. s: 24 bytes. */
static const char *px(char *s, double v) {
    long long t = llround(v * 10), a = t < 0 ? -t : t;
    int n = snprintf(s, 24, "%s%lld", t < 0 ? "-" : "", a / 10);
    if (a % 10) snprintf(s + n, 24 - (size_t)n, ".%lld", a % 10);
    return s;
}

/* s as XML character data: markup escaped, control characters dropped, bytes that do not
 * form UTF-8 replaced by '?', cut after max characters with an ellipsis (max < 0: never). */
static void put_text(Buf *b, const char *s, int max) {
    int chars = 0;
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p;) {
        unsigned c = *p;
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        for (int k = 1; k < len; k++)
            if ((p[k] & 0xC0) != 0x80) len = 0; /* also stops at the NUL */
        if (c < 0x20 || c == 0x7f) {
            p++;
            continue;
        }
        if (max >= 0 && chars++ == max) {
            put(b, "\xe2\x80\xa6");
            return;
        }
        const char *e = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;"
                      : c == '"' ? "&quot;" : c == '\'' ? "&apos;" : len == 0 ? "?" : NULL;
        put_bytes(b, e ? e : (const char *)p, e ? strlen(e) : (size_t)len);
        p += len ? len : 1;
    }
}

/* characters of s as put_text writes them, for sizing */
static int text_chars(const char *s) {
    int n = 0;
    for (; s && *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80 && (unsigned char)*s >= 0x20;
    return n;
}

/* <text x y attrs>text</text> */
static void put_label(Buf *b, double x, double y, const char *attrs, const char *text, int max) {
    char s1[24], s2[24];
    put(b, "<text x=\"%s\" y=\"%s\"%s>", px(s1, x), px(s2, y), attrs);
    put_text(b, text, max);
    put(b, "</text>\n");
}

/* ---- tick values and labels ---- */

/* v with d decimals, trailing zeros dropped */
static void fmt_fixed(char *s, size_t n, double v, int d) {
    long long p = 1;
    for (int i = 0; i < d && i < 12; i++) p *= 10;
    long long t = llround(fabs(v) * (double)p);
    char frac[16] = ".";
    int k = 1;
    for (long long q = p / 10, f = t % p; q > 0; q /= 10) frac[k++] = (char)('0' + f / q % 10);
    while (k > 1 && frac[k - 1] == '0') k--;
    frac[k > 1 ? k : 0] = 0;
    snprintf(s, n, "%s%lld%s", t && v < 0 ? "-" : "", t / p, frac);
}

/* three significant digits and an exponent: 1e-5, 2.5e-4, 1.2e12 */
static void fmt_exp(char *s, size_t n, double v) {
    int e = (int)floor(log10(fabs(v)));
    long long m = llround(fabs(v) / pow(10, e - 2));
    if (m >= 1000) m = llround(fabs(v) / pow(10, ++e - 2));
    char mant[32];
    fmt_fixed(mant, sizeof mant, (double)m / 100, 2);
    snprintf(s, n, "%s%se%d", v < 0 ? "-" : "", mant, e);
}

/* A tick label: up to four significant digits, k from 10^4 and M from 10^6; evenly spaced
 * ticks take their decimals from the step and share the suffix of the largest (top), so a row
 * reads 0, 5k, 10k, 15k. expo: the whole axis in exponent form (1e-6 ... 1e-3). */
static void fmt_tick(char *s, size_t n, double v, double step, double top, int expo) {
    double ref = step > 0 ? top : fabs(v), scale = ref >= 1e6 ? 1e6 : ref >= 1e4 ? 1e3 : 1;
    if (v == 0) {
        snprintf(s, n, "0");
    } else if (expo) {
        fmt_exp(s, n, v);
    } else {
        int d = -(int)floor(log10((step > 0 ? step : fabs(v) / 1000) / scale) + 1e-9);
        fmt_fixed(s, n - 1, v / scale, d < 0 ? 0 : d);
        strcat(s, scale == 1e6 ? "M" : scale == 1e3 ? "k" : "");
    }
}

/* Linear ticks on a 1-2-5 step, or lo and hi alone where the step would lose precision.
 * *step: the step, 0 when the ticks are not evenly spaced. */
static int ticks_linear(double lo, double hi, double *t, int max, double *step) {
    double span = hi - lo;
    int e = span > 0 ? (int)floor(log10(span / 5)) : 0;
    double mag = pow(10, e), inv = pow(10, -e), r = span / 5 / mag;
    long long m = r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10;
    *step = e < 0 ? (double)m / inv : (double)m * mag;
    if (!(span > 0) || fmax(fabs(lo), fabs(hi)) / *step > 1e12) {
        *step = 0;
        t[0] = lo;
        if (max > 1 && hi > lo) t[1] = hi;
        return max > 1 && hi > lo ? 2 : 1;
    }
    long long k0 = (long long)ceil(lo / *step - 1e-9), k1 = (long long)floor(hi / *step + 1e-9);
    int n = 0;
    /* k*m / 10^-e rounds like the decimal it stands for; k * step can land beside it */
    for (long long k = k0; k <= k1 && n < max; k++)
        t[n++] = e < 0 ? (double)(k * m) / inv : (double)(k * m) * mag;
    return n;
}

static int ticks(double lo, double hi, int log_axis, double *t, int max, double *step) {
    *step = 0;
    if (max < 1 || !isfinite(lo) || !isfinite(hi) || lo > hi) return 0;
    if (log_axis && lo > 0) {
        int e0 = (int)ceil(log10(lo) - 1e-9), e1 = (int)floor(log10(hi) + 1e-9), n = 0;
        if (e1 - e0 + 1 >= 3) {
            for (int e = e0; e <= e1 && n < max; e += (e1 - e0 + 8) / 8) t[n++] = pow(10, e);
            return n;
        }
        for (int e = e0 - 1; e <= e1; e++)
            for (int m = 1; m <= 5 && n < max; m += m == 1 ? 1 : 3) { /* 1, 2, 5 */
                double v = m * pow(10, e);
                if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) t[n++] = v;
            }
        if (n >= 2) return n;
    }
    return ticks_linear(lo, hi, t, max, step);
}

int vil_chart_ticks(double lo, double hi, int log_axis, double *t, int max) {
    double step;
    return ticks(lo, hi, log_axis, t, max, &step);
}

/* ---- one panel ---- */

typedef struct {
    double lo, hi; /* the span, in log10 units on a log axis */
    int log;
} Axis;

typedef struct {
    Buf *b;
    Axis x, y;
    double L, T, W, H; /* the plot area */
} Plot;

static int axis_ok(const Axis *a, double v) { return isfinite(v) && (!a->log || v > 0); }
static double axis_t(const Axis *a, double v) { return a->log ? log10(v) : v; }
static double axis_frac(const Axis *a, double v) {
    return (axis_t(a, v) - a->lo) / (a->hi - a->lo);
}
static double to_x(const Plot *p, double x) { return p->L + p->W * axis_frac(&p->x, x); }
static double to_y(const Plot *p, double y) { return p->T + p->H * (1 - axis_frac(&p->y, y)); }

/* mn, mx: the data's extent in axis units. 0 when the span does not fit in a double. */
static int axis_fit(Axis *a, double mn, double mx) {
    if (mx == mn) {
        double d = a->log ? 0.1 : mn != 0 ? fabs(mn) * 0.05 : 1;
        mn -= d, mx += d;
    }
    double pad = (mx - mn) * VIL_CHART_PAD;
    a->lo = mn - pad, a->hi = mx + pad;
    return isfinite(a->hi - a->lo) && a->hi > a->lo;
}

/* Grid lines, tick marks and labels of one axis; returns the widest label's width. A label
 * that would run into the one before it is left out (fixed ticks can sit close together). */
static double draw_axis(const Plot *p, int vertical, const double *fixed, int n_fixed) {
    const Axis *a = vertical ? &p->y : &p->x;
    double t[MAX_TICKS], step = 0, top = 0, bottom = INFINITY, last = -INFINITY, widest = 0;
    int n = 0;
    if (fixed) {
        for (int i = 0; i < n_fixed && n < MAX_TICKS; i++)
            if (axis_ok(a, fixed[i])) t[n++] = fixed[i];
    } else {
        n = ticks(a->log ? pow(10, a->lo) : a->lo, a->log ? pow(10, a->hi) : a->hi, a->log, t,
                  MAX_TICKS, &step);
    }
    for (int i = 0; i < n; i++) {
        if (axis_frac(a, t[i]) < -1e-9 || axis_frac(a, t[i]) > 1 + 1e-9) t[i] = NAN;
        top = fmax(top, fabs(t[i]));
        bottom = t[i] != 0 ? fmin(bottom, fabs(t[i])) : bottom;
    }
    char s1[24], s2[24], s3[24], lab[64];
    const double L = p->L, T = p->T, R = p->L + p->W, B = p->T + p->H;
    for (int pass = 0; pass < 2; pass++) { /* light grid lines, then dark tick marks */
        put(p->b, "<path fill=\"none\" stroke=\"%s\" d=\"", pass ? "#444" : "#e4e4e4");
        for (int i = 0; i < n; i++) {
            if (isnan(t[i])) continue;
            if (vertical)
                put(p->b, "M%s %sH%s", px(s1, L), px(s2, to_y(p, t[i])), px(s3, pass ? L - 5 : R));
            else
                put(p->b, "M%s %sV%s", px(s1, to_x(p, t[i])), px(s2, pass ? B : T),
                    px(s3, B + 5 * pass));
        }
        put(p->b, "\"/>\n");
    }
    put(p->b, "<g fill=\"#333\" text-anchor=\"%s\">\n", vertical ? "end" : "middle");
    int expo = top >= 1e10 || (step > 0 ? step < 1e-4 : bottom < 1e-3);
    for (int i = 0; i < n; i++) {
        if (isnan(t[i])) continue;
        fmt_tick(lab, sizeof lab, t[i], step, top, expo);
        double w = text_chars(lab) * CHAR_W, half = vertical ? 8 : w / 2 + 3;
        double at = vertical ? -to_y(p, t[i]) : to_x(p, t[i]); /* in the order of drawing */
        if (at - half < last) continue;
        last = at + half, widest = fmax(widest, w);
        if (vertical) put_label(p->b, L - 8, to_y(p, t[i]) + 4, "", lab, -1);
        else put_label(p->b, to_x(p, t[i]), B + 19, "", lab, -1);
    }
    put(p->b, "</g>\n");
    return widest;
}

/* One series' polyline in progress: the open segment and the pixel column being thinned. */
typedef struct {
    double x, y;
    int i;
} Pt;
typedef struct {
    Buf *b;
    size_t seg_start; /* where the open segment's text begins */
    int seg_n, col, have;
    long long tx, ty; /* the last point written, in tenths of a pixel */
    Pt first, top, bottom, last, written;
} Line;

/* Append a point; one that prints like the last (the same point as first, top or bottom of
 * its column, or a neighbour within a tenth of a pixel) adds nothing. */
static void line_emit(Line *l, const Pt *p) {
    long long tx = llround(p->x * 10), ty = llround(p->y * 10);
    if (l->seg_n && tx == l->tx && ty == l->ty) return;
    char s1[24], s2[24];
    if (!l->seg_n) l->seg_start = l->b->n;
    put(l->b, "%s%s,%s", l->seg_n++ ? " " : "<polyline points=\"", px(s1, p->x), px(s2, p->y));
    l->tx = tx, l->ty = ty, l->written = *p;
}

/* A column keeps its first, highest, lowest and last point, in their order: the thinned
 * polyline covers the same pixels as the full one. */
static void line_flush(Line *l) {
    if (!l->have) return;
    int top_first = l->top.i < l->bottom.i;
    line_emit(l, &l->first);
    line_emit(l, top_first ? &l->top : &l->bottom);
    line_emit(l, top_first ? &l->bottom : &l->top);
    line_emit(l, &l->last);
    l->have = 0;
}

/* A marker of the shape at (x, y): a filled circle of radius r, or a hollow square around it
 * (side 2.6 r, stroke 1.5) */
static void put_marker(Buf *b, int shape, double x, double y, double r, const char *color) {
    char s1[24], s2[24], s3[24];
    if (shape == VIL_MARK_SQUARE)
        put(b, "<rect x=\"%1$s\" y=\"%2$s\" width=\"%3$s\" height=\"%3$s\" fill=\"none\" stroke=\"%4$s\" "
               "stroke-width=\"1.5\" stroke-dasharray=\"none\"/>\n", px(s1, x - 1.3 * r), px(s2, y - 1.3 * r),
            px(s3, 2.6 * r), color);
    else
        put(b, "<circle cx=\"%s\" cy=\"%s\" r=\"%s\" fill=\"%s\" stroke=\"%s\"/>\n", px(s1, x),
            px(s2, y), px(s3, r), color, r > 2 ? "#fff" : "none");
}

/* End the segment: a polyline, or where it holds one point (a lone evaluation) a small marker
 * unless the series has markers anyway. */
static void line_end(Line *l, const char *color, int shape, int markers) {
    line_flush(l);
    if (l->seg_n == 1) {
        l->b->n = l->seg_start;
        if (!markers) put_marker(l->b, shape, l->written.x, l->written.y, 2, color);
    } else if (l->seg_n > 1) {
        put(l->b, "\"/>\n");
    }
    l->seg_n = 0;
}

static void draw_series(const Plot *p, const VilChartSeries *s, const char *color, int markers) {
    Line l = {.b = p->b};
    /* thinner and a little transparent where a noisy curve fills a band that hides the next */
    put(p->b, "<g fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" stroke-linejoin=\"round\"%s>\n",
        color, s->style & VIL_CHART_FAINT ? "1\" stroke-opacity=\"0.3"
               : s->n > 2 * VIL_CHART_PLOT_W ? "1.2\" stroke-opacity=\"0.85" : "1.6",
        s->dashed ? DASH : "");
    for (int i = 0; i < s->n; i++) {
        if (!isfinite(s->x[i]) || !isfinite(s->y[i])) line_end(&l, color, s->marker, markers);
        if (!axis_ok(&p->x, s->x[i]) || !axis_ok(&p->y, s->y[i])) continue;
        Pt q = {to_x(p, s->x[i]), to_y(p, s->y[i]), i};
        if (l.have && (int)floor(q.x) != l.col) line_flush(&l);
        if (!l.have) l.first = l.top = l.bottom = q, l.col = (int)floor(q.x), l.have = 1;
        if (q.y < l.top.y) l.top = q;
        if (q.y > l.bottom.y) l.bottom = q;
        l.last = q;
    }
    line_end(&l, color, s->marker, markers);
    put(p->b, "</g>\n");
    if (!markers) return;
    double lx = -1e9, ly = -1e9;
    for (int i = 0; i < s->n; i++) {
        if (!axis_ok(&p->x, s->x[i]) || !axis_ok(&p->y, s->y[i])) continue;
        double x = to_x(p, s->x[i]), y = to_y(p, s->y[i]);
        if (fabs(x - lx) < 2 && fabs(y - ly) < 2) continue; /* hidden under the one before */
        lx = x, ly = y;
        put_marker(p->b, s->marker, x, y, 3.5, color);
    }
}

static const char *series_color(const VilChartPanel *p, int i) {
    return PALETTE[(p->series[i].color >= 0 ? p->series[i].color : i) % 10];
}

/* One row per labelled series: a line sample in its colour and dash, then the text. */
static void draw_legend(Buf *b, const VilChartPanel *p, double x, double y) {
    char s1[24], s2[24];
    for (int i = 0, row = 0; i < p->n_series; i++) {
        if (!p->series[i].label) continue;
        double yy = y + 8 + LEGEND_ROW * row++;
        put(b, "<path fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s d=\"M%s %sh26\"/>\n",
            series_color(p, i), p->series[i].dashed ? DASH : "", px(s1, x), px(s2, yy));
        if (p->markers || (p->series[i].style & VIL_CHART_MARKERS))
            put_marker(b, p->series[i].marker, x + 13, yy, 3.5, series_color(p, i));
        put_label(b, x + LEGEND_TEXT, yy + 4, "", p->series[i].label, LABEL_MAX);
    }
}

/* The panel whose cell has its corner at (cx, cy). */
static void draw_panel(Buf *b, const VilChartPanel *p, double cx, double cy) {
    Plot pl = {b, {0, 1, p->log_x}, {0, 1, p->log_y}, cx + VIL_CHART_MARGIN_L,
               cy + VIL_CHART_MARGIN_T, VIL_CHART_PLOT_W, VIL_CHART_PLOT_H};
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY, ylab_w = 0;
    for (int k = 0; k < p->n_series; k++)
        for (int i = 0; i < p->series[k].n; i++) {
            double x = p->series[k].x[i], y = p->series[k].y[i];
            if (!axis_ok(&pl.x, x) || !axis_ok(&pl.y, y)) continue;
            x0 = fmin(x0, axis_t(&pl.x, x)), x1 = fmax(x1, axis_t(&pl.x, x));
            y0 = fmin(y0, axis_t(&pl.y, y)), y1 = fmax(y1, axis_t(&pl.y, y));
        }
    int have = x0 <= x1;
    for (int i = 0; have && i < p->n_xticks; i++)
        if (axis_ok(&pl.x, p->xticks[i]))
            x0 = fmin(x0, axis_t(&pl.x, p->xticks[i])), x1 = fmax(x1, axis_t(&pl.x, p->xticks[i]));
    /* the spans asked for widen the data's (no data still reads "no data", not empty axes) */
    if (have && p->x_min < p->x_max && axis_ok(&pl.x, p->x_min) && axis_ok(&pl.x, p->x_max))
        x0 = fmin(x0, axis_t(&pl.x, p->x_min)), x1 = fmax(x1, axis_t(&pl.x, p->x_max));
    if (have && p->y_min < p->y_max && axis_ok(&pl.y, p->y_min) && axis_ok(&pl.y, p->y_max))
        y0 = fmin(y0, axis_t(&pl.y, p->y_min)), y1 = fmax(y1, axis_t(&pl.y, p->y_max));
    have = have && axis_fit(&pl.x, x0, x1) && axis_fit(&pl.y, y0, y1);
    if (have) {
        draw_axis(&pl, 0, p->xticks, p->n_xticks);
        ylab_w = draw_axis(&pl, 1, NULL, 0);
    }
    char s1[24], s2[24], s3[24], s4[24], rot[96];
    double mx = pl.L + pl.W / 2, my = pl.T + pl.H / 2;
    put(b, "<rect x=\"%s\" y=\"%s\" width=\"%s\" height=\"%s\" fill=\"none\" stroke=\"#888\"/>\n",
        px(s1, pl.L), px(s2, pl.T), px(s3, pl.W), px(s4, pl.H));
    for (int k = 0; have && k < p->n_series; k++)
        draw_series(&pl, &p->series[k], series_color(p, k),
                    p->markers || (p->series[k].style & VIL_CHART_MARKERS));
    if (!have) put_label(b, mx, my + 5, " fill=\"#888\" font-size=\"14\"", "no data", -1);
    put_label(b, mx, cy + 26, " font-size=\"14\" font-weight=\"bold\"", p->title, -1);
    put_label(b, mx, pl.T + pl.H + 42, " font-size=\"13\"", p->xlabel, -1);
    /* the y label sits just left of the widest tick label */
    double yx = fmax(cx + 12, pl.L - ylab_w - 16);
    snprintf(rot, sizeof rot, " font-size=\"13\" transform=\"rotate(-90 %s %s)\"", px(s1, yx),
             px(s2, my));
    put_label(b, yx, my, rot, p->ylabel, -1);
    put(b, "<g text-anchor=\"start\">\n");
    draw_legend(b, p, pl.L + pl.W + LEGEND_GAP, pl.T);
    put(b, "</g>\n");
}

static int check_panels(const VilChartPanel *panels, int n_panels) {
    if (!panels || n_panels < 1) {
        vil_error("chart: no panels to draw");
        return -1;
    }
    for (int k = 0; k < n_panels; k++) {
        const VilChartPanel *p = &panels[k];
        int bad = p->n_series < 0 || (p->n_series && !p->series) || p->n_xticks < 0 ||
                  (p->n_xticks && !p->xticks);
        for (int i = 0; !bad && i < p->n_series; i++)
            bad = p->series[i].n < 0 || (p->series[i].n && (!p->series[i].x || !p->series[i].y));
        if (bad) {
            vil_error("chart panel %d: a negative count, or points or ticks without arrays", k);
            return -1;
        }
    }
    return 0;
}

char *vil_chart_svg(const char *title, const VilChartPanel *panels, int n_panels, int cols) {
    if (check_panels(panels, n_panels)) return NULL;
    cols = cols < 1 ? 1 : cols > n_panels ? n_panels : cols;
    int rows = (n_panels + cols - 1) / cols, chars = 0, entries = 0;
    for (int k = 0; k < n_panels; k++) {
        int e = 0;
        for (int i = 0; i < panels[k].n_series; i++) {
            int c = text_chars(panels[k].series[i].label);
            chars = c > chars ? (c > LABEL_MAX ? LABEL_MAX + 1 : c) : chars;
            e += panels[k].series[i].label != NULL;
        }
        entries = e > entries ? e : entries;
    }
    /* every cell as wide as the widest legend and as tall as the longest, so columns align */
    int legend_w = entries ? (int)ceil(LEGEND_GAP + LEGEND_TEXT + CHAR_W * chars) : 0;
    int plot_h = entries * LEGEND_ROW > VIL_CHART_PLOT_H ? entries * LEGEND_ROW : VIL_CHART_PLOT_H;
    int cell_w = VIL_CHART_MARGIN_L + VIL_CHART_PLOT_W + legend_w + MARGIN_R;
    int cell_h = VIL_CHART_MARGIN_T + plot_h + MARGIN_B;
    int title_h = title && *title ? VIL_CHART_TITLE_H : 0;
    int w = cols * cell_w, h = title_h + rows * cell_h;

    Buf b = {0};
    put(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans,Helvetica,Arial,sans-serif\" "
            "font-size=\"12\" fill=\"#222\" text-anchor=\"middle\">\n"
            "<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n", w, h, w, h, w, h);
    if (title_h) put_label(&b, w / 2.0, 27, " font-size=\"17\" font-weight=\"bold\"", title, -1);
    for (int k = 0; k < n_panels; k++)
        draw_panel(&b, &panels[k], (double)(k % cols) * cell_w,
                   title_h + (double)(k / cols) * cell_h);
    put(&b, "</svg>\n");
    return b.p;
}

int vil_chart_write(const char *path, const char *title, const VilChartPanel *panels,
                    int n_panels, int cols) {
    char *svg = vil_chart_svg(title, panels, n_panels, cols);
    if (!svg) return -1;
    int rc = vil_write_file_atomic(path, svg, strlen(svg));
    free(svg);
    return rc ? -1 : 0;
}
