/* plot.c: `vil plot RUN [RUN ...] [--out FILE.svg] [--label NAME ...] [--agree PCT [--window
 * STEPS]]`: the training curves of run folders (their metrics.jsonl) as one SVG chart: loss,
 * top-1 (and its EMA), learning rate and throughput against the step, one colour per run. One
 * run's chart goes where the trainer keeps it, RUN/curves.svg (so this redraws it, e.g. after the
 * run was killed); several runs' to curves.svg in the current folder, not inside any one of them.
 * --agree checks that every run's training loss follows the first run's (1 GPU against N, one
 * batch against micro-batches): windowed means within PCT percent, else exit 1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "charts/curves.h"
#include "vil/common.h"

#define MAX_RUNS 32
#define MAX_ROWS 30 /* windows listed in full; past that, the first, the worst and the last */

/* run r's loss against the first run's: the windows, then the verdict. 1 when it agrees. */
static int agreement(const VilRunMetrics *m0, const VilRunMetrics *m, const char *l0, const char *l,
                     long window, double pct) {
    double worst;
    int at, n = vil_loss_agreement(m0, m, window, NULL, 0, &worst, &at);
    if (n == 0) {
        printf("%s: no step that %s also logged: nothing to compare\n", l, l0);
        return 0;
    }
    VilLossWindow *w = vil_calloc((size_t)n, sizeof *w);
    vil_loss_agreement(m0, m, window, w, n, &worst, &at);
    printf("training loss of %s against %s, mean over windows of %ld steps (the steps both logged):\n",
           l, l0, window);
    printf("  %-15s %6s %10s %10s %8s\n", "steps", "points", "first", "this", "diff");
    for (int k = 0; k < n; k++) {
        if (n > MAX_ROWS && k != 0 && k != at && k != n - 1) continue;
        char r[48];
        snprintf(r, sizeof r, "%ld-%ld", w[k].first, w[k].last);
        printf("  %-15s %6d %10.4f %10.4f %7.2f%%%s\n", r, w[k].points, w[k].a, w[k].b, 100 * w[k].rel,
               n > MAX_ROWS && k == at ? "  (the worst)" : "");
    }
    free(w);
    int ok = worst <= pct / 100;
    printf("%s: worst window %.2f%% over %d windows, tolerance %g%%: %s\n", l, 100 * worst, n, pct,
           ok ? "agrees" : "DIFFERS");
    return ok;
}

/* the flags' values: their defaults set by vil_cmd_plot, then filled by vil_args_parse */
typedef struct {
    const char *out, *agree_s;
    int window;
    VilArgList labels;
} Flags;
static Flags o;

static const VilArg ARGS[] = {
    {"--out", VIL_ARG_STR, &o.out, "the SVG to write (default: RUN/curves.svg for one run, ./curves.svg for several)", .meta = "FILE.svg"},
    {"--label", VIL_ARG_LIST, &o.labels, "legend name of a run, once per run in their order (default: the folder's name)", .meta = "NAME"},
    {"--agree", VIL_ARG_STR, &o.agree_s, "check each run's training loss against the first's: windowed means within PCT percent, else exit 1", .meta = "PCT"},
    {"--window", VIL_ARG_INT, &o.window, "--agree's window in optimizer steps", .meta = "STEPS", .needs = "--agree"},
};

const VilArgSpec vil_cmd_plot_spec = {
    "plot", "RUN [RUN ...] [--out FILE.svg] [--label NAME ...] [--agree PCT [--window STEPS]]",
    "Charts the training curves of run folders from their metrics.jsonl: loss\n"
    "(training, and validation dashed), top-1 accuracy (the model with dots, its\n"
    "EMA dashed with hollow squares), learning rate and training images/s, against\n"
    "the optimizer step. Several runs are overlaid, one colour each. A line cut\n"
    "short by a crash is skipped. With\n"
    "--agree, also compares every run's training loss with the first run's (the\n"
    "same recipe on 1 and N GPUs, or as micro-batches): the mean over each window\n"
    "of steps that both logged, and exits 1 when a window differs by more.",
    ARGS, (int)(sizeof ARGS / sizeof ARGS[0]), 1, MAX_RUNS, .timm = NULL};

/* --agree's percentage (-1: not given), --window and --label against the n runs: 0, or 2 after
 * the message */
static int check_flags(int n, double *agree) {
    *agree = -1;
    if (o.agree_s) {
        char *end;
        *agree = strtod(o.agree_s, &end);
        if (end == o.agree_s || *end || !(*agree >= 0) || !isfinite(*agree)) *agree = -2;
    }
    const char *bad = *agree == -2 ? "--agree wants a percentage, 0 or more (e.g. 2)"
                      : *agree >= 0 && n < 2 ? "--agree compares runs with the first: give two or more"
                      : o.window < 1 ? "--window must be at least 1 step" : NULL;
    if (bad) {
        fprintf(stderr, "vil plot: %s\n", bad);
        return 2;
    }
    if (o.labels.n && o.labels.n != n) {
        fprintf(stderr, "vil plot: %d --label for %d run%s: give one per run, in their order\n",
                o.labels.n, n, n == 1 ? "" : "s");
        return 2;
    }
    return 0;
}

/* Each run's metrics read here (also done by vil_curves_write) to say what was skipped: cheap
 * next to the chart, and a run with nothing to draw deserves a word; with --agree (agree >= 0)
 * each run's loss against the first's. 1 when all agree, 0 when one does not, -1 when a run
 * cannot be read (reported). */
static int check_runs(char **pos, int n, double agree) {
    VilRunMetrics first = {0};
    char first_shown[256] = "";
    int agree_all = 1;
    for (int r = 0; r < n; r++) {
        VilRunMetrics m;
        if (vil_run_metrics_read(pos[r], &m) != 0) {
            vil_run_metrics_free(&first);
            return -1;
        }
        char shown[256], name[256];
        vil_printable(shown, sizeof shown, pos[r]);
        vil_printable(name, sizeof name, o.labels.n ? o.labels.v[r] : pos[r]);
        if (m.bad_lines)
            fprintf(stderr, "vil plot: %s: skipped %d line%s that did not parse (a crash mid-write "
                            "leaves one)\n", shown, m.bad_lines, m.bad_lines == 1 ? "" : "s");
        if (!m.n_train && !m.n_eval)
            fprintf(stderr, "vil plot: %s: no train or eval lines yet\n", shown);
        if (agree >= 0 && r == 0) {
            first = m, snprintf(first_shown, sizeof first_shown, "%s", name);
            continue;
        }
        if (agree >= 0) agree_all &= agreement(&first, &m, first_shown, name, o.window, agree);
        vil_run_metrics_free(&m);
    }
    vil_run_metrics_free(&first);
    return agree_all;
}

int vil_cmd_plot(int argc, char **argv) {
    o = (Flags){.window = 50};
    char **pos;
    int n;
    vil_inputs_track(1); /* what is read may not be written over (vil/files.h) */
    int rc = vil_args_parse_all(&vil_cmd_plot_spec, argc, argv, &pos, &n);
    if (rc >= 0) return rc;
    double agree;
    if (check_flags(n, &agree) != 0) {
        free(pos);
        return 2;
    }
    int agreed = check_runs(pos, n, agree);
    if (agreed < 0) {
        free(pos);
        return 1;
    }
    char def[4200];
    const char *out = o.out;
    if (!out) {
        if (n == 1) snprintf(def, sizeof def, "%s/curves.svg", pos[0]);
        else snprintf(def, sizeof def, "curves.svg");
        out = def;
    }
    /* the runs' metrics.jsonl files were read as inputs, which --out may not name */
    if (vil_output_check(out, ".svg", "--out") != 0) {
        free(pos);
        return 2;
    }
    rc = vil_curves_write(out, (const char *const *)pos, o.labels.n ? o.labels.v : NULL, n);
    if (rc == 0) printf("wrote %s\n", out);
    free(pos);
    return rc || !agreed ? 1 : 0;
}
