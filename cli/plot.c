/* plot.c: `vil plot RUN [RUN ...] [--out FILE.svg] [--label NAME ...]`: the training curves of
 * run folders (their metrics.jsonl) as one SVG chart: loss, top-1 (and its EMA), learning rate
 * and throughput against the step, one colour per run. One run's chart goes where the trainer
 * keeps it, RUN/curves.svg (so this redraws it, e.g. after the run was killed); several runs'
 * to curves.svg in the current folder, not inside any one of them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "eval/curves.h"
#include "vil/common.h"

#define MAX_RUNS 32

int vil_cmd_plot(int argc, char **argv) {
    const char *out = NULL;
    VilArgList labels = {0};
    VilArg args[] = {
        {"--out", VIL_ARG_STR, &out, "the SVG to write (default: RUN/curves.svg for one run, ./curves.svg for several)"},
        {"--label", VIL_ARG_LIST, &labels, "legend name of a run, once per run in their order (default: the folder's name)"},
    };
    VilArgSpec spec = {"plot", "RUN [RUN ...] [--out FILE.svg] [--label NAME ...]",
                       "Charts the training curves of run folders from their metrics.jsonl: loss\n"
                       "(training, and validation dashed), top-1 accuracy (the EMA dashed), learning\n"
                       "rate and training images/s, against the optimizer step. Several runs are\n"
                       "overlaid, one colour each. A line cut short by a crash is skipped.",
                       args, (int)(sizeof args / sizeof args[0]), 1, MAX_RUNS};
    char **pos;
    int n;
    int rc = vil_args_parse(&spec, argc, argv, &pos, &n);
    if (rc == VIL_ARGS_HELP) return 0;
    if (rc != VIL_ARGS_OK) return 2;
    if (labels.n && labels.n != n) {
        fprintf(stderr, "vil plot: %d --label for %d run%s: give one per run, in their order\n",
                labels.n, n, n == 1 ? "" : "s");
        free(pos);
        return 2;
    }
    /* read here (also done by vil_curves_write) to say what was skipped: cheap next to the
     * chart, and a run with nothing to draw deserves a word */
    for (int r = 0; r < n; r++) {
        VilRunMetrics m;
        if (vil_run_metrics_read(pos[r], &m) != 0) {
            free(pos);
            return 1;
        }
        char shown[256];
        vil_printable(shown, sizeof shown, pos[r]);
        if (m.bad_lines)
            fprintf(stderr, "vil plot: %s: skipped %d line%s that did not parse (a crash mid-write "
                            "leaves one)\n", shown, m.bad_lines, m.bad_lines == 1 ? "" : "s");
        if (!m.n_train && !m.n_eval)
            fprintf(stderr, "vil plot: %s: no train or eval lines yet\n", shown);
        vil_run_metrics_free(&m);
    }
    char def[4200];
    if (!out) {
        if (n == 1) snprintf(def, sizeof def, "%s/curves.svg", pos[0]);
        else snprintf(def, sizeof def, "curves.svg");
        out = def;
    }
    rc = vil_curves_write(out, (const char *const *)pos, labels.n ? labels.v : NULL, n);
    if (rc == 0) printf("wrote %s\n", out);
    free(pos);
    return rc ? 1 : 0;
}
