/* runlog.h: what a run folder holds besides its checkpoints, written by rank 0 as the run goes
 * (doc/formats.md):
 *   metrics.jsonl   one JSON object per log step ("train") and per evaluation ("eval"), each
 *                   flushed as it is written; on resume the lines past the resumed step (those
 *                   a crash left behind) are dropped and the file goes on
 *   events.out.tfevents.*   the same scalars for TensorBoard (train/tfevents.h), a file per
 *                   start, each opened by a restart record at the step it starts from (a
 *                   resume's makes TensorBoard drop the points past the resumed step); a fresh
 *                   start removes the earlier starts' files
 *   curves.svg      loss, top-1, lr and images/s against steps, redrawn after each evaluation
 *                   (charts/curves.h; `vil plot` draws it, or several runs, on demand)
 *   config.cfg      the effective configuration, as `vil train --config` reads it
 *   run.jsonl       one line per start, fresh or resumed: the command line, vil's version and
 *                   commit, the device, the ranks, the dataset and its size */
#ifndef VIL_RUNLOG_H
#define VIL_RUNLOG_H

#include "train/train.h"

typedef struct VilRunLog VilRunLog;

/* Opens the run folder's metrics for a run at `step` (0: fresh, the files start empty and the
 * earlier starts' event files and curves.svg are removed; > 0: a resume, lines past step
 * dropped). NULL with a vil_error message. */
VilRunLog *vil_runlog_open(const char *dir, long step);
void vil_runlog_close(VilRunLog *r);
/* What a fresh start removed of earlier starts' logs, e.g. "2 TensorBoard event files,
 * metrics.jsonl, curves.svg"; "" when nothing (or a resume). */
const char *vil_runlog_cleared(const VilRunLog *r);

/* What run.jsonl records of a start. */
typedef struct {
    const char *command;      /* the command line, shell-quoted */
    const char *commit;       /* vil's git commit (NULL: "unknown") */
    const char *device;       /* e.g. "cuda:0 (NVIDIA H100 80GB HBM3)" */
    const char *data;         /* the dataset path as given */
    const char *train_source, *val_source; /* what was read (val_source NULL: none) */
    long train_images, val_images;
    int ranks, accum;
    long global_batch;
    long from_global_batch;   /* a resume at another global batch (--force): the run's before; 0:
                               * none. metrics.jsonl gets a "resume" line, which curves.svg marks */
    long step;                /* where this start begins */
} VilRunStart;
/* config.cfg and a line of run.jsonl. 0, or -1 with a vil_error message. */
int vil_runlog_start(VilRunLog *r, const VilConfig *mc, const VilTrainConfig *tc, const VilRunStart *s);

/* A log step's numbers (p->grad_norm < 0: unknown). 0, or -1 (reported). */
int vil_runlog_train(VilRunLog *r, const VilTrainProgress *p, double epochs_done);

/* An evaluation after `epoch` epochs at `step`; the ema_* fields when has_ema. */
typedef struct {
    long step;
    int epoch;
    long images;
    float top1, top5, loss;
    int has_ema;
    float ema_top1, ema_top5, ema_loss;
} VilEvalRecord;
int vil_runlog_eval(VilRunLog *r, const VilEvalRecord *e);

/* Seconds of training the metrics record so far (a resume goes on from the last kept line). */
double vil_runlog_seconds(const VilRunLog *r);

#endif
