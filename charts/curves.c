/* curves.c: the metrics.jsonl reader and the training-curve chart of curves.h. The reader is
 * lenient because the file is written by a run that can die mid-line and be resumed: a line
 * that does not parse is counted and skipped, and a step that goes back replaces the points
 * logged after it. The chart is drawn by chart.c; numbers in the title are printed from
 * integers so the document does not depend on LC_NUMERIC (as chart.c promises). */
#include "charts/curves.h"

#include <cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "charts/chart.h"
#include "vil/common.h"

#define LABEL_CHARS 30 /* a run's name in a legend, before " (EMA)" / " (val)" */
#define MARKERS_MAX 40 /* evaluations of a run up to which each one gets a marker */
#define TITLE_MAX 100  /* characters of run names listed in the title of several runs */
/* A training curve of n points is also drawn as a running mean over 2 * (n / SMOOTH_DIV) + 1 of
 * them (about 1% of the run), the raw points pale beneath, once that window is 5 points wide */
#define SMOOTH_DIV 200

/* ---- reading ---- */

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) ? v->valuedouble : NAN;
}

/* The JSON object of line [p, e), or NULL. A line torn by a crash and then continued by the
 * resumed run holds the start of one object followed by a whole one: that last one is read. */
static cJSON *parse_line(const char *p, const char *e) {
    cJSON *o = cJSON_ParseWithLength(p, (size_t)(e - p));
    if (o) return o;
    static const char START[] = "{\"type\"";
    for (const char *q = e - (sizeof START - 1); q > p; q--)
        if (!memcmp(q, START, sizeof START - 1)) return cJSON_ParseWithLength(q, (size_t)(e - q));
    return NULL;
}

/* the step of o, or -1 when it has none (or not a count) */
static long step_of(const cJSON *o) {
    double s = num(o, "step");
    return s >= 0 && s < (double)LONG_MAX && s == floor(s) ? (long)s : -1;
}

/* *a (n used of *cap, each size bytes) with room for one more */
static void grow(void **a, int n, int *cap, size_t size) {
    if (n < *cap) return;
    *cap = *cap ? 2 * *cap : 256;
    *a = vil_realloc(*a, (size_t)*cap * size);
}

static void add_line(VilRunMetrics *m, const cJSON *o, int *cap_t, int *cap_e, int *cap_r) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
    long step = step_of(o);
    if (!cJSON_IsObject(o) || !cJSON_IsString(type) || step < 0) {
        m->bad_lines++;
        return;
    }
    /* a run resumed from a checkpoint older than its log logs those steps again: the points
     * from this step on are history that was thrown away */
    if (!strcmp(type->valuestring, "train")) {
        while (m->n_train && m->train[m->n_train - 1].step >= step) m->n_train--, m->replaced++;
        grow((void **)&m->train, m->n_train, cap_t, sizeof *m->train);
        m->train[m->n_train++] = (VilTrainPoint){
            step, num(o, "epoch"), num(o, "loss"), num(o, "lr"), num(o, "images_per_s"),
            num(o, "data_wait"), num(o, "grad_norm"), num(o, "time")};
    } else if (!strcmp(type->valuestring, "eval")) {
        while (m->n_eval && m->eval[m->n_eval - 1].step >= step) m->n_eval--, m->replaced++;
        grow((void **)&m->eval, m->n_eval, cap_e, sizeof *m->eval);
        m->eval[m->n_eval++] = (VilEvalPoint){
            step, num(o, "epoch"), num(o, "top1"), num(o, "top5"), num(o, "loss"),
            num(o, "ema_top1"), num(o, "ema_top5"), num(o, "ema_loss"), num(o, "images"),
            num(o, "time")};
    } else if (!strcmp(type->valuestring, "resume")) {
        while (m->n_rebatch && m->rebatch[m->n_rebatch - 1].step >= step) m->n_rebatch--, m->replaced++;
        grow((void **)&m->rebatch, m->n_rebatch, cap_r, sizeof *m->rebatch);
        m->rebatch[m->n_rebatch++] = (VilRebatch){step, num(o, "global_batch"), num(o, "from_global_batch")};
    } else {
        m->other_lines++;
    }
}

int vil_run_metrics_read(const char *run_dir, VilRunMetrics *m) {
    memset(m, 0, sizeof *m);
    size_t len = strlen(run_dir) + sizeof "/metrics.jsonl", n;
    char *path = vil_malloc(len);
    snprintf(path, len, "%s/metrics.jsonl", run_dir);
    char *buf = (char *)vil_read_file(path, &n);
    free(path);
    if (!buf) return -1;
    int cap_t = 0, cap_e = 0, cap_r = 0;
    for (const char *p = buf, *end = buf + n; p < end;) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        if (!e) e = end;
        /* a crash can also leave NUL bytes where the file was extended but not yet written */
        while (p < e && (*p == 0 || *p == ' ' || *p == '\t' || *p == '\r')) p++;
        if (p < e) {
            cJSON *o = parse_line(p, e);
            if (o) add_line(m, o, &cap_t, &cap_e, &cap_r);
            else m->bad_lines++;
            cJSON_Delete(o);
        }
        p = e + 1;
    }
    free(buf);
    return 0;
}

void vil_run_metrics_free(VilRunMetrics *m) {
    free(m->train);
    free(m->eval);
    free(m->rebatch);
    memset(m, 0, sizeof *m);
}

int vil_loss_agreement(const VilRunMetrics *a, const VilRunMetrics *b, long window, VilLossWindow *out,
                       int cap, double *worst, int *worst_at) {
    if (window < 1) window = 1;
    *worst = 0, *worst_at = -1;
    int n = 0, i = 0, j = 0;
    VilLossWindow w = {0};
    long cur = -1; /* the open window's index */
    double sa = 0, sb = 0;
    for (;;) {
        /* the next step both runs logged (the reader keeps each run's steps increasing) */
        while (i < a->n_train && j < b->n_train && a->train[i].step != b->train[j].step) {
            if (a->train[i].step < b->train[j].step) i++;
            else j++;
        }
        int done = i >= a->n_train || j >= b->n_train;
        long step = done ? 0 : a->train[i].step, k = done ? -1 : (step - 1) / window;
        if (cur >= 0 && (done || k != cur)) { /* close the open window */
            w.a = sa / w.points, w.b = sb / w.points;
            w.rel = isfinite(w.a) && isfinite(w.b) ? fabs(w.b - w.a) / fabs(w.a) : INFINITY;
            if (w.rel != w.rel) w.rel = INFINITY; /* 0 / 0 */
            if (w.rel > *worst || *worst_at < 0) *worst = w.rel, *worst_at = n;
            if (n < cap) out[n] = w;
            n++;
        }
        if (done) break;
        if (k != cur) cur = k, w = (VilLossWindow){.first = step}, sa = sb = 0;
        sa += a->train[i].loss, sb += b->train[j].loss;
        w.last = step, w.points++;
        i++, j++;
    }
    return n;
}

char *vil_run_label(char *dst, size_t cap, const char *run_dir) {
    size_t n = strlen(run_dir);
    while (n > 1 && run_dir[n - 1] == '/') n--;
    const char *b = run_dir + n;
    while (b > run_dir && b[-1] != '/') b--;
    size_t bn = (size_t)(run_dir + n - b);
    /* ".", ".." and "" name no folder: the real path's last part does */
    char *real = NULL;
    if (bn == 0 || (b[0] == '.' && (bn == 1 || (bn == 2 && b[1] == '.')))) {
        real = realpath(n ? run_dir : ".", NULL);
        if (real && strcmp(real, "/")) {
            b = strrchr(real, '/') + 1;
            bn = strlen(b);
        }
    }
    snprintf(dst, cap, "%.*s", (int)(bn ? bn : n), bn ? b : run_dir);
    free(real);
    return dst;
}

/* ---- the chart ---- */

/* v with d decimals (d <= 6), from integers: "76.1" in every locale */
static char *fmt_dec(char *s, size_t cap, double v, int d) {
    long long p = 1;
    for (int i = 0; i < d; i++) p *= 10;
    long long t = llround(fabs(v) * (double)p);
    if (d) snprintf(s, cap, "%s%lld.%0*lld", v < 0 && t ? "-" : "", t / p, d, t % p);
    else snprintf(s, cap, "%s%lld", v < 0 && t ? "-" : "", t);
    return s;
}

/* the byte offset of character k of s (its length when k is past the end) */
static size_t char_at(const char *s, int k) {
    size_t i = 0;
    for (int c = 0; s[i]; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80 && c++ == k) return i;
    return i;
}

/* name, cut to LABEL_CHARS characters by an ellipsis in the middle where longer (runs often
 * differ at the end: a path's last folder, "_lr2e-3"), then suffix */
static void legend_name(char *dst, size_t cap, const char *name, const char *suffix) {
    int chars = 0;
    for (const char *p = name; *p; p++) chars += ((unsigned char)*p & 0xC0) != 0x80;
    if (chars <= LABEL_CHARS) {
        snprintf(dst, cap, "%s%s", name, suffix);
        return;
    }
    const int head = LABEL_CHARS / 3, tail = LABEL_CHARS - head - 1;
    snprintf(dst, cap, "%.*s\xe2\x80\xa6%s%s", (int)char_at(name, head), name,
             name + char_at(name, chars - tail), suffix);
}

/* one run's columns for the chart */
typedef struct {
    double *rs, *rloss, *rlr;             /* the resumes at another global batch (n_rebatch) */
    double *ts, *loss, *lr, *ips;         /* (n_train) */
    double *loss_s, *ips_s;               /* smoothed (n_train), or NULL: too few points */
    double *es, *top1, *ema_top1, *vloss; /* (n_eval) */
    char name[5][160];                    /* plain, " (train)", " (val)", " (EMA)", the resumes */
} Cols;

static int any_finite(const double *v, int n) {
    for (int i = 0; i < n; i++)
        if (isfinite(v[i])) return 1;
    return 0;
}

/* series for one run's column y (against x) in its colour; left out when it has no point */
static void add_series(VilChartSeries *s, int *ns, const char *label, int n, const double *x,
                       const double *y, int dashed, int color, int style, int marker) {
    if (n < 1 || !y || !any_finite(y, n)) return;
    s[(*ns)++] = (VilChartSeries){label, n, x, y, dashed, color % 10, style, marker};
}

/* The running mean of y (n points) over 2h+1 of them, centred. Near the start the window
 * narrows alike on both sides, so the line starts on the data (a loss falls fastest there);
 * near the end it keeps its h points behind, so the end of a run in progress is a mean too,
 * not the last point's noise. Non-finite values are left out of the sums and stay gaps. */
static void smooth(const double *y, double *out, int n, int h) {
    double *sum = vil_malloc(((size_t)n + 1) * sizeof *sum);
    int *cnt = vil_malloc(((size_t)n + 1) * sizeof *cnt);
    sum[0] = 0, cnt[0] = 0;
    for (int i = 0; i < n; i++) {
        int ok = isfinite(y[i]) != 0;
        sum[i + 1] = sum[i] + (ok ? y[i] : 0), cnt[i + 1] = cnt[i] + ok;
    }
    for (int i = 0; i < n; i++) {
        int lo = h < i ? h : i, hi = h < n - 1 - i ? h : n - 1 - i;
        if (lo < h && hi > lo) hi = lo;
        int c = cnt[i + hi + 1] - cnt[i - lo];
        out[i] = isfinite(y[i]) && c ? (sum[i + hi + 1] - sum[i - lo]) / c : NAN;
    }
    free(sum);
    free(cnt);
}

/* "LABEL: step S, epoch E; top-1 T% (best B%), EMA T% (best B%)" from the latest lines */
static void run_title(char *t, size_t cap, const VilRunMetrics *m, const char *label) {
    char a[32], b[32];
    const VilTrainPoint *lt = m->n_train ? &m->train[m->n_train - 1] : NULL;
    const VilEvalPoint *le = m->n_eval ? &m->eval[m->n_eval - 1] : NULL;
    size_t k = (size_t)snprintf(t, cap, "%.200s: ", label); /* what follows fits in 200 more */
    if (!lt && !le) {
        snprintf(t + k, cap - k, "no metrics yet");
        return;
    }
    int from_eval = le && (!lt || le->step >= lt->step);
    double ep = from_eval ? le->epoch : lt->epoch;
    k += (size_t)snprintf(t + k, cap - k, "step %ld", from_eval ? le->step : lt->step);
    if (isfinite(ep))
        k += (size_t)snprintf(t + k, cap - k, ", epoch %s",
                              fmt_dec(a, sizeof a, ep, ep == floor(ep) ? 0 : 2));
    double best = NAN, best_ema = NAN;
    for (int i = 0; i < m->n_eval; i++) {
        if (isfinite(m->eval[i].top1) && !(m->eval[i].top1 <= best)) best = m->eval[i].top1;
        if (isfinite(m->eval[i].ema_top1) && !(m->eval[i].ema_top1 <= best_ema))
            best_ema = m->eval[i].ema_top1;
    }
    if (!le) {
        snprintf(t + k, cap - k, "; no evaluation yet");
        return;
    }
    if (isfinite(le->top1))
        k += (size_t)snprintf(t + k, cap - k, "; top-1 %s%% (best %s%%)",
                              fmt_dec(a, sizeof a, le->top1, 1), fmt_dec(b, sizeof b, best, 1));
    if (isfinite(le->ema_top1))
        snprintf(t + k, cap - k, "%s EMA %s%% (best %s%%)", isfinite(le->top1) ? "," : ";",
                 fmt_dec(a, sizeof a, le->ema_top1, 1), fmt_dec(b, sizeof b, best_ema, 1));
}

char *vil_curves_svg(const VilRunMetrics *runs, const char *const *labels, int n) {
    if (!runs || !labels || n < 1) {
        vil_error("curves: no runs to chart");
        return NULL;
    }
    for (int r = 0; r < n; r++)
        if (!labels[r]) {
            vil_error("curves: run %d has no label", r);
            return NULL;
        }
    Cols *c = vil_calloc((size_t)n, sizeof *c);
    double last = 0, ips_max = 0;
    int any_eval = 0;
    for (int r = 0; r < n; r++) {
        const VilRunMetrics *m = &runs[r];
        Cols *k = &c[r];
        int nt = m->n_train, ne = m->n_eval, h = nt / SMOOTH_DIV;
        double *buf = vil_malloc(((size_t)nt * 6 + (size_t)ne * 4 + 1) * sizeof(double));
        k->ts = buf, k->loss = buf + nt, k->lr = buf + 2 * nt, k->ips = buf + 3 * nt;
        k->es = buf + 6 * nt, k->top1 = k->es + ne, k->ema_top1 = k->es + 2 * ne;
        k->vloss = k->es + 3 * ne;
        for (int i = 0; i < nt; i++) {
            const VilTrainPoint *p = &m->train[i];
            k->ts[i] = (double)p->step, k->loss[i] = p->loss, k->lr[i] = p->lr;
            k->ips[i] = p->images_per_s;
            if (isfinite(p->images_per_s)) ips_max = fmax(ips_max, p->images_per_s);
        }
        if (h >= 2) { /* enough points that the noise would fill a band */
            k->loss_s = buf + 4 * nt, k->ips_s = buf + 5 * nt;
            smooth(k->loss, k->loss_s, nt, h);
            smooth(k->ips, k->ips_s, nt, h);
        }
        for (int i = 0; i < ne; i++) {
            const VilEvalPoint *p = &m->eval[i];
            k->es[i] = (double)p->step, k->top1[i] = p->top1, k->ema_top1[i] = p->ema_top1;
            k->vloss[i] = p->loss;
        }
        /* a resume at another global batch: marked on the loss and the lr at its step (the first
         * logged point after it), where the curves' steps change their size */
        int nr = m->n_rebatch;
        k->rs = vil_malloc(((size_t)nr * 3 + 1) * sizeof(double)), k->rloss = k->rs + nr, k->rlr = k->rs + 2 * nr;
        for (int i = 0, j = 0; i < nr; i++) {
            while (j < nt && m->train[j].step <= m->rebatch[i].step) j++;
            k->rs[i] = (double)m->rebatch[i].step;
            k->rloss[i] = j < nt ? m->train[j].loss : NAN, k->rlr[i] = j < nt ? m->train[j].lr : NAN;
        }
        if (nt) last = fmax(last, k->ts[nt - 1]);
        if (ne) last = fmax(last, k->es[ne - 1]);
        any_eval |= any_finite(k->top1, ne) || any_finite(k->ema_top1, ne);
        static const char *const SUFFIX[4] = {"", " (train)", " (val)", " (EMA)"};
        for (int j = 0; j < 4; j++) legend_name(k->name[j], sizeof k->name[j], labels[r], SUFFIX[j]);
        if (nr) {
            char what[64];
            const VilRebatch *b = &m->rebatch[nr - 1];
            if (nr == 1 && isfinite(b->from_global_batch) && isfinite(b->global_batch))
                snprintf(what, sizeof what, " (batch %.0f\xe2\x86\x92%.0f)", b->from_global_batch, b->global_batch);
            else snprintf(what, sizeof what, " (%d batch changes)", nr);
            legend_name(k->name[4], sizeof k->name[4], labels[r], what);
        }
    }
    /* at most 4 series a run in a panel; every run's pale raw points first, so that no run's
     * band covers another's line */
    VilChartSeries *s = vil_calloc((size_t)n * 16, sizeof *s), *loss = s, *top1 = s + 4 * n,
                   *lr = s + 8 * n, *ips = s + 12 * n;
    int n_loss = 0, n_top1 = 0, n_lr = 0, n_ips = 0;
    for (int r = 0; r < n; r++) {
        const Cols *k = &c[r];
        int nt = runs[r].n_train;
        if (k->loss_s) add_series(loss, &n_loss, NULL, nt, k->ts, k->loss, 0, r, VIL_CHART_FAINT, VIL_MARK_CIRCLE);
        if (k->ips_s) add_series(ips, &n_ips, NULL, nt, k->ts, k->ips, 0, r, VIL_CHART_FAINT, VIL_MARK_CIRCLE);
    }
    for (int r = 0; r < n; r++) {
        const Cols *k = &c[r];
        int nt = runs[r].n_train, ne = runs[r].n_eval, mk = ne <= MARKERS_MAX ? VIL_CHART_MARKERS : 0;
        /* the EMA's hollow squares around the model's dots: apart even at one evaluation */
        add_series(loss, &n_loss, k->name[1], nt, k->ts, k->loss_s ? k->loss_s : k->loss, 0, r, 0, VIL_MARK_CIRCLE);
        add_series(loss, &n_loss, k->name[2], ne, k->es, k->vloss, 1, r, mk, VIL_MARK_CIRCLE);
        add_series(top1, &n_top1, k->name[0], ne, k->es, k->top1, 0, r, mk, VIL_MARK_CIRCLE);
        add_series(top1, &n_top1, k->name[3], ne, k->es, k->ema_top1, 1, r, mk, VIL_MARK_SQUARE);
        add_series(lr, &n_lr, k->name[0], nt, k->ts, k->lr, 0, r, 0, VIL_MARK_CIRCLE);
        add_series(ips, &n_ips, k->name[0], nt, k->ts, k->ips_s ? k->ips_s : k->ips, 0, r, 0, VIL_MARK_CIRCLE);
        int nr = runs[r].n_rebatch;
        add_series(loss, &n_loss, k->name[4], nr, k->rs, k->rloss, 0, r, VIL_CHART_MARKERS, VIL_MARK_SQUARE);
        add_series(lr, &n_lr, k->name[4], nr, k->rs, k->rlr, 0, r, VIL_CHART_MARKERS, VIL_MARK_SQUARE);
    }
    /* one x range for all four, from step 0, so the panels line up and a short run overlaid
     * on a long one shows where it stopped; throughput from 0 so a 2% dip looks like one */
    VilChartPanel p[4] = {
        {.title = "loss", .xlabel = "step", .ylabel = "cross-entropy", .series = loss,
         .n_series = n_loss},
        {.title = any_eval ? "top-1 accuracy" : "top-1 accuracy (no evaluation yet)",
         .xlabel = "step", .ylabel = "top-1 (%)", .series = top1, .n_series = n_top1},
        {.title = "learning rate", .xlabel = "step", .ylabel = "learning rate", .series = lr,
         .n_series = n_lr},
        {.title = "training throughput", .xlabel = "step", .ylabel = "images/s", .series = ips,
         .n_series = n_ips, .y_min = 0, .y_max = ips_max},
    };
    for (int i = 0; i < 4; i++) p[i].x_min = 0, p[i].x_max = last;

    char title[512]; /* run_title writes at most 200 + 200 bytes, the list TITLE_MAX + 60 */
    if (n == 1) {
        run_title(title, sizeof title, &runs[0], labels[0]);
    } else {
        size_t k = (size_t)snprintf(title, sizeof title, "training curves: ");
        for (int r = 0; r < n && k < sizeof title; r++) {
            if (k + strlen(labels[r]) > TITLE_MAX) {
                snprintf(title, sizeof title, "training curves of %d runs", n);
                break;
            }
            k += (size_t)snprintf(title + k, sizeof title - k, "%s%s", r ? ", " : "", labels[r]);
        }
    }
    char *svg = vil_chart_svg(title, p, 4, 2);
    for (int r = 0; r < n; r++) free(c[r].ts), free(c[r].rs);
    free(c);
    free(s);
    return svg;
}

int vil_curves_write(const char *out_path, const char *const *run_dirs, const char *const *labels,
                     int n) {
    if (!out_path || !run_dirs || n < 1) {
        vil_error("curves: no runs to chart");
        return -1;
    }
    VilRunMetrics *m = vil_calloc((size_t)n, sizeof *m);
    char(*names)[256] = vil_calloc((size_t)n, sizeof *names);
    const char **lab = vil_calloc((size_t)n, sizeof *lab);
    int rc = 0;
    for (int r = 0; r < n && !rc; r++) rc = vil_run_metrics_read(run_dirs[r], &m[r]);
    for (int r = 0; r < n; r++) vil_run_label(names[r], sizeof names[r], run_dirs[r]);
    for (int r = 0; r < n; r++) {
        int dup = 0; /* runs/a and old/a: the paths tell them apart */
        for (int q = 0; q < n; q++) dup |= q != r && !strcmp(names[q], names[r]);
        lab[r] = labels && labels[r] ? labels[r] : dup ? run_dirs[r] : names[r];
    }
    char *svg = rc ? NULL : vil_curves_svg(m, lab, n);
    if (svg) rc = vil_write_file_atomic(out_path, svg, strlen(svg)) ? -1 : 0;
    else rc = -1;
    free(svg);
    for (int r = 0; r < n; r++) vil_run_metrics_free(&m[r]);
    free(m);
    free(names);
    free(lab);
    return rc;
}
