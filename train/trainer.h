/* trainer.h: the state of one training run (Trainer), private to train/: the loop and setup
 * (train.c), the run's files, state and resume (state.c) and the console progress (progress.c)
 * share it. */
#ifndef VIL_TRAINER_H
#define VIL_TRAINER_H

#include <stdio.h>

#include "data/dataset.h"
#include "data/feed.h"
#include "data/loader.h"
#include "eval/eval.h"
#include "train/runlog.h"
#include "train/train.h"
#include "vil/model.h"

typedef struct {
    const VilTrainRun *run;
    const VilDist *dist;  /* NULL: one process */
    int rank, world;      /* rank 0 alone prints and writes files */
    int accum;            /* micro-batches per step */
    int quiet;            /* run->quiet, or a rank other than 0 */
    const VilConfig *mc;
    const VilTrainConfig *tc;
    const VilBackend *be;
    FILE *log;
    VilDataset *ds, *val_ds;
    VilLoader *loader, *val_loader;
    VilModel m;           /* owns its AdamW moments and its EMA (m.ema, NULL when off) */
    int model_ready;
    char **class_names;
    int n_classes;
    /* position: the next batch to train on is batch `epoch_batch` of epoch `epoch` */
    long step;
    int epoch, epoch_batch;
    long spe, total_steps, warmup_steps, global_batch;
    /* T->step counts the updates; the schedule's position (lr, epochs) is step - sched_offset,
     * which differs once a run resumed at another global batch (--force): total_steps is the
     * step at which the schedule ends */
    long sched_offset;
    long from_global_batch; /* a resume at another global batch: the saved one; 0: none */
    double peak_lr;
    float best_top1, last_loss;
    long best_step; /* the step best.safetensors holds; -1: none yet, or a state too old to say */
    int stale_removed; /* temporaries of killed saves removed from the output folder */
    char *path_last, *path_state, *path_best, *path_ema;
    int lock_fd;       /* OUT/train.lock, flock'ed by rank 0 for the run; -1: none */
    int stop_sig;      /* the signal that stops the run (every rank's the same); 0: none */
    /* the inputs go to the device one step ahead (data/feed.h): images, targets and, with drop
     * path, the step's drop-path scales, staged per feed slot in dp_host */
    VilFeed feed;
    float *dp_host[2];
    /* progress: the current log interval (since t_int: int_steps steps, wait_int seconds waiting
     * for the loader) and this process's steps (train_time seconds for steps_here steps) */
    double t_start, t_int, wait_int, train_time;
    double eval_secs, eval_total; /* the last validation pass (model and EMA); all of them, in train_time */
    long steps_here, int_steps;
    float lr;             /* of the last step */
    float *host_losses;   /* (batch) */
    double loss_sum;      /* a log step's losses of the micro-batches before its last */
    VilRunLog *runlog;    /* metrics.jsonl and the run's record (rank 0; NULL after a failed write) */
    /* the progress display (run->progress resolved): a bar redrawn on a watched terminal's
     * last line, plain lines into a file or a launcher's pty, or none; line_at: when the last
     * whole line was printed, line_step: the step of the last progress line (plain mode's pace
     * lines follow both) */
    VilProgress con;
    double line_at;
    long line_step;
    VilTrainStatus status; /* what vil_train returns, set when a piece ends the run (RUN_END) */
    float *gathered[VIL_TRAIN_STATE_MAX]; /* the per-rank training state of every rank for the next
                                           * save (gather_per_rank), NULL where not per rank */
} Trainer;

/* What each piece of the run tells the loop: go on, or end the run with T->status. */
typedef enum { RUN_GO_ON, RUN_END } RunNext;

static inline RunNext run_end(Trainer *T, VilTrainStatus status) {
    T->status = status;
    return RUN_END;
}

/* ---- state.c: the run's files ---- */
/* The output folder at setup: the paths of the run's files; on rank 0 the folder made and
 * locked, refused when a fresh run (resume 0) finds another run's files, and proved writable.
 * 0, or -1 (reported). */
int out_dir_open(Trainer *T, int resume);
/* The training state of the file at path into the run: position, best, weights, moments, EMA,
 * every number checked first. 0, or -1 (reported). */
int state_restore(Trainer *T, const char *path);
/* After state_restore: the checkpoints brought up to the state's step. 0, or -1 (reported). */
int sync_run_files(Trainer *T);
/* The state and the checkpoints saved (best.safetensors too when new_best is given), on
 * every rank alike: RUN_GO_ON, or RUN_END diverged (weights not finite) or failed. */
RunNext save_run(Trainer *T, const float *new_best);
/* After a failure between saves: the weights of the last completed step saved. */
void save_after_failure(Trainer *T);
/* save_every_steps: whether this step makes a step checkpoint, and making it (rank 0). */
int snapshot_due(const Trainer *T);
void snapshot_step(Trainer *T);

/* ---- progress.c: what the run prints (nothing when T->quiet) ---- */
/* T->log with the terminal's bar cleared: every line goes through it. */
FILE *out_log(Trainer *T);
/* Seconds left (steps and validation passes); elapsed: the seconds of T->steps_here steps. */
double eta_seconds(const Trainer *T, double elapsed);
/* After a step: the bar redrawn (bar), or a pace line when due (plain). */
void show_progress(Trainer *T);
void print_header(Trainer *T, const char *init_note, const char *state_in);
void print_resplit(Trainer *T, long saved_world);
/* A resume at another global batch (--force): where in the epoch it goes on. */
void print_rebatch(Trainer *T, long saved_global, long epoch, long images, long batch);
void print_nothing_to_do(Trainer *T);
void print_skipping(Trainer *T);
void print_progress(Trainer *T, const VilTrainProgress *p);
void print_eval(Trainer *T, const VilEvalRecord *pt, long bad, double secs);
void print_saved_step(Trainer *T);
void print_epoch_end(Trainer *T, int epoch_done, int ep);
void print_stop(Trainer *T, VilTrainStatus why, int ep);
/* A stop request acknowledged (rank 0, --quiet too): "stop requested (SIGINT): WHAT; Ctrl-C or
 * SIGINT again AGAIN" (again NULL: no second part). */
void print_stopping(Trainer *T, int sig, const char *what, const char *again);
/* metrics.jsonl, config.cfg and run.jsonl (rank 0); a failed write said once, the run goes on. */
int open_runlog(Trainer *T);
void runlog_failed(Trainer *T);

#endif
