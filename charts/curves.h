/* curves.h: training curves of runs. Reads a run folder's metrics.jsonl (the log the trainer
 * appends to: one JSON object a line, "type" "train" or "eval") and charts one or more runs as
 * SVG with the writer of chart.h: loss (training and validation), top-1 accuracy (the model and
 * its EMA), learning rate and throughput, all against the optimizer step, one colour per run. */
#ifndef VIL_CURVES_H
#define VIL_CURVES_H

#include <stddef.h>

/* A value a line did not hold (an optional key, or null) is NaN. */
typedef struct {
    long step;            /* global optimizer step */
    double epoch;         /* epochs done, fractional */
    double loss, lr, images_per_s, data_wait, grad_norm, time;
} VilTrainPoint;

typedef struct {
    long step;
    double epoch;
    double top1, top5, loss;             /* %, %, validation cross-entropy */
    double ema_top1, ema_top5, ema_loss; /* NaN without an EMA */
    double images, time;
} VilEvalPoint;

/* a resume at another global batch ("resume" lines): from that step on, a step is another
 * number of images */
typedef struct {
    long step;
    double global_batch, from_global_batch;
} VilRebatch;

typedef struct {
    VilTrainPoint *train;
    VilEvalPoint *eval;
    int n_train, n_eval;
    int bad_lines;   /* lines that are not a JSON object with a "step" (a torn last line) */
    int other_lines; /* lines of a "type" other than train and eval */
    int replaced;    /* points dropped for a later line at the same or an earlier step */
    VilRebatch *rebatch; /* the "resume" lines at another global batch */
    int n_rebatch;
} VilRunMetrics;

/* Reads RUN/metrics.jsonl. Lines that do not parse (a crash mid-write tears the last one) are
 * skipped and counted, as are unknown types; unknown keys are ignored. Steps should increase;
 * a line at a step not above the last one of its type (a run resumed from a checkpoint older
 * than its log) first drops the points from that step on, so the newest history wins. An empty
 * file gives no points. 0, or -1 with a vil_error message (the file cannot be read); *m is then
 * empty and needs no free. */
int vil_run_metrics_read(const char *run_dir, VilRunMetrics *m);
void vil_run_metrics_free(VilRunMetrics *m);

/* How closely run b's training loss follows run a's (the same recipe on other hardware, another
 * number of ranks, another split into micro-batches): the steps both runs logged, in windows of
 * `window` steps, (k - 1) window < step <= k window; per window the mean loss of each run over
 * those common steps and their relative difference |b - a| / |a|. Windows without a common step
 * are skipped. A loss that is not finite makes its window's difference infinite. */
typedef struct {
    long first, last; /* the window's first and last common step */
    int points;       /* common steps in it */
    double a, b, rel;
} VilLossWindow;
/* The windows into out[0 .. min(count, cap)) (out may be NULL with cap 0: count them), *worst the
 * largest difference (0 without windows) and *worst_at its index. Returns the number of windows
 * (0: no common step). */
int vil_loss_agreement(const VilRunMetrics *a, const VilRunMetrics *b, long window, VilLossWindow *out,
                       int cap, double *worst, int *worst_at);

/* The legend name of a run folder: its base name ("runs/tiny/" -> "tiny", "." -> the current
 * folder's name). dst: cap bytes. Returns dst. */
char *vil_run_label(char *dst, size_t cap, const char *run_dir);

/* The chart of n runs as a standalone SVG document (malloc'd), or NULL with a vil_error
 * message. labels[i]: legend names (not NULL; cut in the middle past 30 characters). 2 x 2
 * panels, x = step from 0 to the last step of any run, one colour per run: loss (training
 * solid, validation dashed), top-1 % (the model solid, its EMA dashed), learning rate,
 * training images/s (its axis from 0). Training loss and images/s of 400 points or more are
 * drawn as a running mean over about 1% of the run, the raw points pale beneath; evaluations
 * get markers while a run has at most 40 (the EMA's hollow squares, the others' dots). A panel without points says "no data"; the title
 * names the one run's latest step, epoch and top-1 (with the best), or the runs. Same input,
 * same bytes, in any locale. */
char *vil_curves_svg(const VilRunMetrics *runs, const char *const *labels, int n);

/* Reads run_dirs[0..n) and writes their chart to out_path (atomically). labels NULL, or a
 * NULL entry: vil_run_label's name (the folder's path where two runs share a name). Cheap
 * enough to call at every evaluation of a run. 0, or -1 with a vil_error message (a run's
 * metrics cannot be read, the file cannot be written). */
int vil_curves_write(const char *out_path, const char *const *run_dirs, const char *const *labels,
                     int n);

#endif
