/* chart.h: a small SVG line-chart writer for `vil compare` (a few points per model) and for
 * training curves (hundreds of thousands of points per run): panels in a grid, each with
 * axes, ticks, grid lines, a legend beside the plot, and series as polylines or markers. */
#ifndef VIL_CHART_H
#define VIL_CHART_H

typedef struct {
    const char *label;   /* legend text (XML-escaped; cut at 40 characters); NULL: no entry */
    int n;               /* number of points */
    const double *x, *y; /* (n) each; a non-finite x or y breaks the line there (a gap) */
    int dashed;          /* 1: dashed stroke (e.g. the EMA of a run) */
    int color;           /* index into the 10-colour palette; -1: by series order */
    int style;           /* 0, or VIL_CHART_* flags of this series alone: */
    int marker;          /* where markers are drawn: VIL_MARK_CIRCLE (0) or VIL_MARK_SQUARE */
} VilChartSeries;
/* marker shapes: a filled circle; a hollow square, which a circle at the same point stays
 * visible inside (a run's model and its EMA at one evaluation) */
enum { VIL_MARK_CIRCLE = 0, VIL_MARK_SQUARE = 1 };
/* a marker at every point even where the panel has none (a few evaluations beside a dense
 * training curve) */
#define VIL_CHART_MARKERS 1
/* thin and pale: the raw points of a noisy curve, under a smoothed copy in the same colour */
#define VIL_CHART_FAINT 2

typedef struct {
    const char *title;           /* panel title; NULL: none */
    const char *xlabel, *ylabel; /* axis labels with units, e.g. "image size (px)" */
    int log_x, log_y;            /* logarithmic axes: points with a value <= 0 there are skipped */
    int markers;                 /* 1: a marker at every point (few points); 0: lines only */
    const VilChartSeries *series;
    int n_series;
    const double *xticks; /* (n_xticks) fixed x ticks, increasing, e.g. 224, 384, 512; NULL: auto */
    int n_xticks;
    /* Where min < max, the axis spans at least [min, max] besides the data: panels that share
     * an x range line up (0 .. the last step of a run), a y axis can include 0. */
    double x_min, x_max, y_min, y_max;
} VilChartPanel;

/* Layout in SVG pixels. Every panel's cell has the same size; the document title, when given,
 * takes VIL_CHART_TITLE_H at the top. The plot area of the panel in (row, col) has its top-left
 * corner at (col * cell_w + VIL_CHART_MARGIN_L, title_h + row * cell_h + VIL_CHART_MARGIN_T)
 * and measures VIL_CHART_PLOT_W x VIL_CHART_PLOT_H; the legend sits to its right. An axis spans
 * the valid points (and fixed ticks, and the panel's x_min .. x_max or y_min .. y_max when
 * given) widened by VIL_CHART_PAD of that span on each side, in
 * log10 units on a log axis; a flat span around v first becomes v -/+ 5% of |v| (1 when v is 0;
 * 0.1 decade on a log axis). Within a series, points that fall into the same pixel column are
 * thinned to the first, lowest, highest and last of them, so x should mostly increase. */
#define VIL_CHART_PLOT_W 440
#define VIL_CHART_PLOT_H 260
#define VIL_CHART_MARGIN_L 84
#define VIL_CHART_MARGIN_T 40
#define VIL_CHART_TITLE_H 40
#define VIL_CHART_PAD 0.04

/* Render the panels in a grid of `cols` columns (clamped to 1..n_panels) as one standalone SVG
 * document: malloc'd and NUL-terminated, or NULL with a vil_error message on bad arguments.
 * The same input gives the same bytes, in any locale. title may be NULL. */
char *vil_chart_svg(const char *title, const VilChartPanel *panels, int n_panels, int cols);

/* The same, written atomically to path. 0, or -1 with a vil_error message. */
int vil_chart_write(const char *path, const char *title, const VilChartPanel *panels,
                    int n_panels, int cols);

/* The tick values the writer puts on an axis spanning [lo, hi] (at most max of them, written
 * to ticks); returns how many. Linear: multiples of a 1-2-5 step, about five of them. Log:
 * powers of ten (every k-th one past eight decades); 1, 2 and 5 times them when fewer than three
 * decades fit; linear ticks when even that gives fewer than two. */
int vil_chart_ticks(double lo, double hi, int log_axis, double *ticks, int max);

#endif
