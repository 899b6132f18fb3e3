/* test_chart.c: the SVG chart writer: XML escaping, where a data point lands (from the plot-area
 * geometry in chart.h), axis spans asked for, series styles, tick values and labels, NaN gaps,
 * thinning of a 300k-point series, flat and single-point data, empty panels, determinism,
 * locale, the written file, XML validity; marker shapes, and a run's model and EMA told apart at
 * a single evaluation (charts/curves.c). */
#include <locale.h>
#include <math.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "charts/chart.h"
#include "charts/curves.h"
#include "tests/testing.h"
#include "vil/common.h"


/* one panel, no document title: its plot area has its corner at (MARGIN_L, MARGIN_T) */
static char *render1(const VilChartPanel *p) { return vil_chart_svg(NULL, p, 1, 1); }

static void test_escape(void) {
    const char *bad = "a<b&c>\"d'e\x01\tf";
    const char *want = "a&lt;b&amp;c&gt;&quot;d&apos;ef";
    double x[2] = {0, 1}, y[2] = {0, 1};
    VilChartSeries s = {bad, 2, x, y, 0, -1, 0, 0};
    VilChartPanel p = {.title = bad, .xlabel = bad, .ylabel = "y", .series = &s, .n_series = 1};
    char *svg = vil_chart_svg(bad, &p, 1, 1);
    T_CHECK(svg && t_count(svg, want) == 4, "title, panel title, x label and legend escaped (%d)",
            svg ? t_count(svg, want) : -1);
    T_CHECK(svg && !strchr(svg, '\x01') && !strchr(svg, '\t'), "control characters dropped");
    T_CHECK(svg && !strstr(svg, "a<b"), "no raw '<' from the text");
    free(svg);
}

/* the expected pixel of data value v on an axis over [lo, hi] (in axis units), padded as
 * chart.h documents, formatted as the writer prints coordinates */
static void expect_px(char *out, double v, double lo, double hi, double origin, double len,
                      int flip) {
    double pad = (hi - lo) * VIL_CHART_PAD, f = (v - (lo - pad)) / (hi - lo + 2 * pad);
    double px = origin + len * (flip ? 1 - f : f);
    snprintf(out, 24, "%.1f", px);
    size_t n = strlen(out);
    if (n > 2 && !strcmp(out + n - 2, ".0")) out[n - 2] = 0;
}

static void test_mapping(void) {
    const double L = VIL_CHART_MARGIN_L, T = VIL_CHART_MARGIN_T;
    const double W = VIL_CHART_PLOT_W, H = VIL_CHART_PLOT_H;
    double x[3] = {0, 5, 10}, y[3] = {0, 50, 100};
    VilChartSeries s = {"s", 3, x, y, 0, -1, 0, 0};
    VilChartPanel p = {.series = &s, .n_series = 1};
    char want[256], a[24], b[24];
    want[0] = 0;
    for (int i = 0; i < 3; i++) {
        expect_px(a, x[i], 0, 10, L, W, 0);
        expect_px(b, y[i], 0, 100, T, H, 1);
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s,%s", i ? " " : "", a, b);
    }
    char *svg = render1(&p);
    T_CHECK(svg && strstr(svg, want), "polyline points at \"%s\"", want);
    /* by hand: x spans [-0.4, 10.4] over 440 px from 84; y [-4, 104] over 260 px from 40 */
    T_CHECK(!strcmp(want, "100.3,290.4 304,170 507.7,49.6"), "hand-computed pixels (%s)", want);
    free(svg);

    p.markers = 1;
    svg = render1(&p);
    T_CHECK(svg && strstr(svg, "<circle cx=\"304\" cy=\"170\""), "marker at the plot centre");
    free(svg);

    /* log x: 10 is the middle of [1, 100]; 1000 on a log y lies at 3 of [2, 4] decades */
    double lx[3] = {1, 10, 100}, ly[3] = {100, 1000, 10000};
    VilChartSeries ls = {"s", 3, lx, ly, 0, -1, 0, 0};
    VilChartPanel lp = {.series = &ls, .n_series = 1, .log_x = 1, .log_y = 1, .markers = 1};
    svg = render1(&lp);
    T_CHECK(svg && strstr(svg, "<circle cx=\"304\" cy=\"170\""), "log-log centre at (304, 170)");
    expect_px(a, 0, 0, 2, L, W, 0); /* log10(1) on [0, 2] decades */
    snprintf(want, sizeof want, "<circle cx=\"%s\"", a);
    T_CHECK(svg && strstr(svg, want), "log x of 1 at %s", a);
    free(svg);
}

/* a panel's x_min .. x_max and y_min .. y_max widen its axes; a series' own style flags */
static void test_spans_styles(void) {
    const double L = VIL_CHART_MARGIN_L, T = VIL_CHART_MARGIN_T;
    const double W = VIL_CHART_PLOT_W, H = VIL_CHART_PLOT_H;
    double x[3] = {0, 5, 10}, y[3] = {0, 50, 100};
    VilChartSeries s = {"s", 3, x, y, 0, -1, 0, 0};
    VilChartPanel p = {.series = &s, .n_series = 1, .x_min = 0, .x_max = 20, .y_min = -100,
                       .y_max = 0};
    char want[64], a[24], b[24];
    expect_px(a, 10, 0, 20, L, W, 0); /* x over [0, 20], y over [-100, 100] */
    expect_px(b, 100, -100, 100, T, H, 1);
    snprintf(want, sizeof want, " %s,%s\"", a, b);
    char *svg = render1(&p);
    T_CHECK(svg && strstr(svg, want) && strstr(svg, ">20<") && strstr(svg, ">-100<"),
            "x_min .. x_max and y_min .. y_max widen the axes (last point at%s)", want);
    free(svg);
    p.x_min = 30, p.x_max = 20, p.y_min = p.y_max = 0; /* not a span: the data's alone */
    expect_px(a, 10, 0, 10, L, W, 0);
    expect_px(b, 100, 0, 100, T, H, 1);
    snprintf(want, sizeof want, " %s,%s\"", a, b);
    svg = render1(&p);
    T_CHECK(svg && strstr(svg, want), "min >= max leaves the axes to the data (%s)", want);
    free(svg);

    VilChartSeries two[2] = {{NULL, 3, x, y, 0, 1, VIL_CHART_FAINT, 0},
                             {"dots", 3, x, y, 1, 1, VIL_CHART_MARKERS, 0}};
    VilChartPanel q = {.series = two, .n_series = 2};
    svg = render1(&q);
    T_CHECK(svg && t_count(svg, "stroke-opacity=\"0.3\"") == 1, "a faint series is pale");
    T_CHECK(svg && t_count(svg, "r=\"3.5\"") == 4, "a series with markers: 3 points and its legend (%d)",
            svg ? t_count(svg, "r=\"3.5\"") : -1);
    T_CHECK(svg && t_count(svg, "<text") > 0 && !strstr(svg, ">(null)<") && t_count(svg, ">dots<") == 1,
            "the unlabelled faint series has no legend entry");
    free(svg);
}

static int ticks_equal(double lo, double hi, int log_axis, const double *want, int n) {
    double t[64];
    int got = vil_chart_ticks(lo, hi, log_axis, t, 64);
    int ok = got == n;
    for (int i = 0; ok && i < n; i++) ok = fabs(t[i] - want[i]) <= 1e-12 * fabs(want[i]) + 1e-15;
    if (!ok) {
        printf("  ticks of [%g, %g]%s:", lo, hi, log_axis ? " log" : "");
        for (int i = 0; i < got; i++) printf(" %.17g", t[i]);
        printf("\n");
    }
    return ok;
}

static void test_ticks(void) {
    const double a[] = {0, 0.2, 0.4, 0.6, 0.8, 1};
    const double b[] = {0.4, 0.5, 0.6, 0.7, 0.8};
    const double c[] = {400, 600, 800, 1000};
    const double d[] = {1e-6, 1e-5, 1e-4, 1e-3};
    const double e[] = {200, 500, 1000, 2000};
    const double f[] = {-0.02, -0.01, 0, 0.01, 0.02};
    const double g[] = {0, 5000, 10000, 15000, 20000};
    T_CHECK(ticks_equal(0, 1, 0, a, 6), "ticks [0, 1]: 0 0.2 ... 1");
    T_CHECK(ticks_equal(0.37, 0.81, 0, b, 5), "ticks [0.37, 0.81]: 0.4 ... 0.8");
    T_CHECK(ticks_equal(224, 1024, 0, c, 4), "ticks [224, 1024]: 400 ... 1000");
    T_CHECK(ticks_equal(1e-6, 1e-3, 1, d, 4), "log ticks [1e-6, 1e-3]: decades");
    T_CHECK(ticks_equal(150, 3000, 1, e, 4), "log ticks [150, 3000]: 1-2-5");
    T_CHECK(ticks_equal(-0.023, 0.021, 0, f, 5), "ticks [-0.023, 0.021]: exact zero");
    T_CHECK(ticks_equal(-500, 20500, 0, g, 5), "ticks [-500, 20500]: step 5000");
    double t[64];
    int n = vil_chart_ticks(1e-30, 1e30, 1, t, 64);
    T_CHECK(n >= 3 && n <= 9, "60 decades thinned to %d ticks", n);
    T_CHECK(vil_chart_ticks(5, 5, 0, t, 64) == 1 && t[0] == 5, "a point span: one tick");
    T_CHECK(vil_chart_ticks(NAN, 1, 0, t, 64) == 0, "NaN span: no ticks");

    /* the labels as drawn: k suffix, exponents on a log axis, fixed ticks */
    enum { N = 101 };
    double x[N], y[N], x2[N], y2[N], fixed[3] = {224, 384, 512};
    for (int i = 0; i < N; i++) {
        x[i] = 200.0 * i, y[i] = 1e-6 * pow(1000, i / 100.0);
        x2[i] = 224 + 2.88 * i, y2[i] = 0.37 + 0.0044 * i;
    }
    VilChartSeries s = {"s", N, x, y, 0, -1, 0, 0}, s2 = {"s", N, x2, y2, 0, -1, 0, 0};
    VilChartPanel p = {.series = &s, .n_series = 1, .log_y = 1};
    char *svg = render1(&p);
    T_CHECK(svg && strstr(svg, ">5k<") && strstr(svg, ">20k<") && strstr(svg, ">0<"),
            "x labels 0, 5k ... 20k");
    T_CHECK(svg && strstr(svg, ">1e-6<") && strstr(svg, ">1e-3<"), "log y labels 1e-6 ... 1e-3");
    free(svg);
    VilChartPanel q = {.series = &s2, .n_series = 1, .xticks = fixed, .n_xticks = 3};
    svg = render1(&q);
    T_CHECK(svg && strstr(svg, ">224<") && strstr(svg, ">512<") && !strstr(svg, ">300<"),
            "fixed x ticks replace the automatic ones");
    T_CHECK(svg && strstr(svg, ">0.4<") && strstr(svg, ">0.8<"), "y labels 0.4 ... 0.8");
    free(svg);
}

static void test_gaps(void) {
    double x[7] = {0, 1, 2, 3, 4, 5, 6}, y[7] = {1, 2, NAN, 4, 5, INFINITY, 3};
    VilChartSeries s = {"s", 7, x, y, 0, -1, 0, 0};
    VilChartPanel p = {.series = &s, .n_series = 1};
    char *svg = render1(&p);
    T_CHECK(svg && t_count(svg, "<polyline") == 2, "NaN splits the line into two polylines");
    T_CHECK(svg && t_count(svg, "r=\"2\"") == 1, "a lone point between gaps is a dot");
    T_CHECK(svg && !t_has_nan_inf(svg), "no nan/inf in the output");
    free(svg);

    /* on a log axis, values <= 0 are skipped, not gaps */
    double ly[4] = {1, 0, -3, 100};
    VilChartSeries ls = {"s", 4, x, ly, 0, -1, 0, 0};
    VilChartPanel lp = {.series = &ls, .n_series = 1, .log_y = 1};
    svg = render1(&lp);
    T_CHECK(svg && t_count(svg, "<polyline") == 1 && !t_has_nan_inf(svg), "log axis skips <= 0");
    free(svg);
}

static void test_big(void) {
    enum { N = 300000 };
    double *x = vil_malloc(N * sizeof *x), *y = vil_malloc(N * sizeof *y);
    VilRng rng;
    vil_rng_seed(&rng, 5);
    for (int i = 0; i < N; i++) x[i] = i, y[i] = exp(-i / 5e4) + 0.1 * vil_rng_normal(&rng);
    y[N / 2] = NAN;
    VilChartSeries s[2] = {{"loss", N, x, y, 0, 0, 0, 0}, {"loss (EMA)", N, x, y, 1, 0, 0, 0}};
    VilChartPanel p = {.series = s, .n_series = 2, .log_x = 0};
    double t0 = vil_now();
    char *svg = render1(&p);
    double dt = vil_now() - t0;
    size_t n = svg ? strlen(svg) : 0;
    T_CHECK(svg && n < 200000, "two 300k-point series: %zu bytes (< 200 KB)", n);
    T_CHECK(svg && t_count(svg, "<polyline") == 4, "the NaN splits each of them");
    printf("     300k-point chart: %zu bytes in %.3f s\n", n, dt);
    free(svg);
    free(x);
    free(y);
}

static void test_degenerate(void) {
    double x[4] = {1, 2, 3, 4}, flat[4] = {3, 3, 3, 3}, zero[4] = {0, 0, 0, 0}, nan4[4];
    for (int i = 0; i < 4; i++) nan4[i] = NAN;
    double one_x = 7, one_y = 0.5;
    VilChartSeries s[5] = {{"flat", 4, x, flat, 0, -1, 0, 0}, {"zero", 4, x, zero, 0, -1, 0, 0},
                           {"one", 1, &one_x, &one_y, 0, -1, 0, 0},
                           {"missing", 4, x, nan4, 0, -1, 0, 0}, {"empty", 0, NULL, NULL, 0, -1, 0, 0}};
    const char *what[5] = {"flat series", "flat zero series", "single point", "", ""};
    for (int k = 0; k < 3; k++)
        for (int lg = 0; lg < 2; lg++) {
            VilChartPanel p = {.series = &s[k], .n_series = 1, .log_x = lg, .log_y = lg,
                               .markers = 1};
            char *svg = render1(&p);
            int dot = svg && strstr(svg, "<circle");
            T_CHECK(svg && !t_has_nan_inf(svg) && (dot || (lg && k == 1)),
                    "%s%s renders without nan/inf", what[k], lg ? " (log)" : "");
            free(svg);
        }
    VilChartPanel e[3] = {{.title = "all missing", .series = &s[3], .n_series = 1},
                          {.title = "empty series", .series = &s[4], .n_series = 1},
                          {.title = "no series"}};
    char *svg = vil_chart_svg("empty", e, 3, 2);
    T_CHECK(svg && t_count(svg, ">no data<") == 3 && !t_has_nan_inf(svg), "empty panels say no data");
    free(svg);

    VilChartSeries bad = {"bad", 3, NULL, flat, 0, -1, 0, 0};
    VilChartPanel bp = {.series = &bad, .n_series = 1};
    printf("     (two expected errors follow)\n");
    T_CHECK(!vil_chart_svg(NULL, &bp, 1, 1), "points without an x array are refused");
    T_CHECK(!vil_chart_svg(NULL, NULL, 0, 1), "no panels are refused");
}

/* a 2-panel compare chart, as `vil compare` draws it */
static char *compare_chart(void) {
    static double res[3] = {224, 384, 512}, acc[2][3] = {{76.1, 78.3, 78.9}, {80.5, 82.0, 82.6}};
    static double ips[2][3] = {{2950, 940, 505}, {1120, 355, 190}};
    static VilChartSeries a[2] = {{"ViL-Tiny", 3, res, acc[0], 0, -1, 0, 0},
                                  {"ViL-Small", 3, res, acc[1], 0, -1, 0, 0}};
    static VilChartSeries b[2] = {{"ViL-Tiny", 3, res, ips[0], 0, -1, 0, 0},
                                  {"ViL-Small", 3, res, ips[1], 0, -1, 0, 0}};
    VilChartPanel p[2] = {
        {"accuracy", "image size (px)", "top-1 (%)", 0, 0, 1, a, 2, res, 3, 0, 0, 0, 0},
        {"speed", "image size (px)", "images/s", 0, 1, 1, b, 2, res, 3, 0, 0, 0, 0}};
    return vil_chart_svg("compare", p, 2, 2);
}

static void test_output(void) {
    char *s1 = compare_chart(), *s2 = compare_chart();
    T_CHECK(s1 && s2 && !strcmp(s1, s2), "two renders are byte-identical");
    T_CHECK(s1 && strstr(s1, "xmlns=\"http://www.w3.org/2000/svg\"") &&
                strstr(s1, "viewBox=\"0 0 ") && strstr(s1, " width=\"") && strstr(s1, "</svg>\n"),
            "standalone svg: xmlns, width, height, viewBox");

    /* a comma-decimal locale must not leak into the numbers */
    if (setlocale(LC_NUMERIC, "de_DE.UTF-8") || setlocale(LC_NUMERIC, "fr_FR.UTF-8")) {
        char *s3 = compare_chart();
        T_CHECK(s1 && s3 && !strcmp(s1, s3), "the same bytes under a comma-decimal locale");
        free(s3);
        setlocale(LC_NUMERIC, "C");
    } else {
        printf("     (no comma-decimal locale installed: locale check skipped)\n");
    }

    char path[64];
    snprintf(path, sizeof path, "/tmp/vil_test_chart_%ld.svg", (long)getpid());
    static double res[3] = {224, 384, 512}, acc[3] = {76.1, 78.3, 78.9};
    VilChartSeries s = {"ViL-Tiny", 3, res, acc, 0, -1, 0, 0};
    VilChartPanel p = {"accuracy", "image size (px)", "top-1 (%)", 0, 0, 1, &s, 1, res, 3,
                       0, 0, 0, 0};
    int rc = vil_chart_write(path, "compare", &p, 1, 1);
    size_t n = 0;
    char *back = rc ? NULL : (char *)vil_read_file(path, &n);
    char *direct = vil_chart_svg("compare", &p, 1, 1);
    T_CHECK(back && direct && n == strlen(direct) && !memcmp(back, direct, n),
            "vil_chart_write writes what vil_chart_svg returns");
    free(back);
    free(direct);

    /* a real XML parser, where python3 is installed (127: the shell found no python3) */
    char cmd[256], out[512];
    snprintf(cmd, sizeof cmd, "python3 -c 'import sys, xml.etree.ElementTree as E; "
             "E.parse(sys.argv[1])' %s 2>&1", path);
    FILE *f = fopen(path, "wb");
    if (f) fputs(s1, f), fclose(f);
    int st = t_run(cmd, out, sizeof out);
    if (st == 127) printf("     (no python3: XML parse check skipped)\n");
    else T_CHECK(st == 0, "the compare chart parses as XML: %s", out);
    unlink(path);
    free(s1);
    free(s2);
}

/* the <circle .../> and <rect .../> elements of svg within the plot area's x range [x0, x1) (the
 * markers of one panel, the legend beside it left out when x1 is the plot's right edge) */
static void count_marks(const char *svg, double x0, double x1, int *circles, int *squares) {
    *circles = *squares = 0;
    for (const char *p = svg; (p = strchr(p, '<')); p++) {
        double x, r;
        int end = 0; /* set only when the whole pattern matched */
        if (sscanf(p, "<circle cx=\"%lf\" cy=\"%*[^\"]\" r=\"%lf\"", &x, &r) == 2 && r == 3.5 && x >= x0 && x < x1)
            (*circles)++;
        if (sscanf(p, "<rect x=\"%lf\" y=\"%*[^\"]\" width=\"9.1\"%n", &x, &end) == 1 && end > 0 && x >= x0 && x < x1)
            (*squares)++;
    }
}

static void test_markers(void) {
    const double L = VIL_CHART_MARGIN_L, W = VIL_CHART_PLOT_W;
    double x[1] = {5}, y[1] = {50};
    /* two series on one point: a filled circle and a hollow square around it, in the legend too */
    VilChartSeries s[2] = {{"model", 1, x, y, 0, 0, VIL_CHART_MARKERS, VIL_MARK_CIRCLE},
                           {"EMA", 1, x, y, 1, 0, VIL_CHART_MARKERS, VIL_MARK_SQUARE}};
    VilChartPanel p = {.series = s, .n_series = 2};
    char *svg = render1(&p);
    int c_in, q_in, c_leg, q_leg;
    count_marks(svg ? svg : "", L, L + W, &c_in, &q_in);
    count_marks(svg ? svg : "", L + W, 1e9, &c_leg, &q_leg);
    T_CHECK(svg && c_in == 1 && q_in == 1 && c_leg == 1 && q_leg == 1,
            "one point of two series: a circle and a square on it (%d, %d), and in the legend (%d, %d)", c_in,
            q_in, c_leg, q_leg);
    T_CHECK(svg && t_count(svg, "fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\"") == 2 && !strstr(svg, "r=\"2\""),
            "the square is hollow, in the series' colour; no lone-point dot under the markers");
    free(svg);
    /* without markers, a lone point is a small mark of the series' shape */
    s[0].style = s[1].style = 0;
    svg = render1(&p);
    T_CHECK(svg && t_count(svg, "r=\"2\"") == 1 && t_count(svg, "width=\"5.2\"") == 1,
            "lone points without markers: a small dot and a small square");
    free(svg);

    /* a run with one evaluation: its top-1 and EMA top-1 at the same point, told apart */
    VilTrainPoint tp[2] = {{1, 0.5, 2.0, 1e-3, 100, 0, 1, 1}, {2, 1, 1.5, 1e-3, 100, 0, 1, 2}};
    VilEvalPoint ep[1] = {{2, 1, 40, 90, 1.4, 40, 90, 1.4, 10, 2}};
    VilRunMetrics m = {tp, ep, 2, 1, 0, 0, 0, NULL, 0};
    const char *label = "run";
    svg = vil_curves_svg(&m, &label, 1);
    /* the top-1 panel: the grid's second column */
    double cell_w = 0;
    const char *at = svg ? strstr(svg, "<svg xmlns") : NULL;
    int doc_w = 0;
    if (at) sscanf(strstr(at, "width=\"") + 7, "%d", &doc_w);
    cell_w = doc_w / 2.0;
    count_marks(svg ? svg : "", cell_w + L, cell_w + L + W, &c_in, &q_in);
    count_marks(svg ? svg : "", cell_w + L + W, 1e9, &c_leg, &q_leg);
    T_CHECK(svg && doc_w > 0 && c_in == 1 && q_in == 1 && c_leg >= 1 && q_leg == 1,
            "one evaluation: the model's dot and the EMA's square (%d, %d), and both in the legend (%d, %d)",
            c_in, q_in, c_leg, q_leg);
    T_CHECK(svg && strstr(svg, ">run (EMA)<"), "the EMA's legend entry");
    free(svg);
}

int main(void) {
    test_escape();
    test_markers();
    test_mapping();
    test_spans_styles();
    test_ticks();
    test_gaps();
    test_big();
    test_degenerate();
    test_output();
    return t_finish();
}
