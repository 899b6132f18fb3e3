/* train.h: the training run of doc/recipe.md (AdamW, warmup + cosine lr per step, drop path, EMA,
 * Mixup/CutMix via the loader, optional gradient clipping), its checkpoints and exact resume,
 * and the pieces the tests check on their own: the lr schedule and the EMA update. */
#ifndef VIL_TRAIN_H
#define VIL_TRAIN_H

#include <signal.h>
#include <stdio.h>

#include "vil/backend.h"
#include "vil/console.h"
#include "vil/dist.h"
#include "vil/model.h"
#include "train/train_config.h"

/* The lr of step `step` (0-based) of a run of total_steps: linear from warmup_lr to peak over
 * warmup_steps, then cosine from peak to min_lr reaching min_lr at total_steps. */
double vil_lr_at(long step, long total_steps, long warmup_steps, double peak, double warmup_lr,
                 double min_lr);
/* base_lr * global_batch / 512 (the linear scaling rule of the recipe). */
double vil_peak_lr(double base_lr, long global_batch);
/* The lr of step `step` (0-based) under t's sched: the warmup of vil_lr_at, then cosine
 * (vil_lr_at); step: peak * decay_rate^(e // decay_epochs); multistep: peak * decay_rate^(the
 * milestones <= e), e the step's whole epoch counted from 0 (timm's StepLRScheduler and
 * MultiStepLRScheduler, per epoch, warmup_prefix off); const_cosine: peak until
 * sched_const_epochs (at least the warmup), then cosine from peak to min_lr at total_steps. */
double vil_sched_lr(const VilTrainConfig *t, long step, long total_steps, long warmup_steps,
                    long steps_per_epoch, double peak);
/* "30,60,90" into out (at most max; out may be NULL): the count, or -1 unless increasing
 * integers >= 0 (an empty string is none). */
int vil_milestones_parse(const char *s, long *out, int max);
/* For the run's header: what follows the warmup ("cosine to 1e-05", ...), and the optimizer
 * with its settings ("AdamW wd 0.05", ...: its entry's describe); into buf (cut to n), returned.
 * t finalized. */
const char *vil_sched_describe(const VilTrainConfig *t, char *buf, size_t n);
const char *vil_optim_describe(const VilTrainConfig *t, char *buf, size_t n);
/* The EMA decay of update number `update` (1-based): decay; with warmup, timm's ModelEmaV3
 * (gamma 1, power 2/3): 0 at the first update, then min(decay, 1 - (1 + s)^(-2/3)), s = update - 1. */
double vil_ema_decay_at(double decay, int warmup, long update);

/* The model's initial-state intervention from t's init_state keys (t finalized), after
 * vil_model_init_training; its states for a micro-batch of t->batch are allocated here. 0, or -1
 * (reported). */
int vil_train_init_state(VilModel *m, const VilTrainConfig *t);

/* The hyperparameters of one training step. */
typedef struct {
    const VilOptim *optim; /* the optimizer (vil_model_init_training) */
    VilOptimHyper hyper;   /* its hyperparameters, lr the step's (vil_train_config_hyper) */
    float clip_grad; /* > 0: clip the global gradient norm to this (vil_model_grad_norm reads it) */
    float ema_decay; /* > 0: update the model's EMA (vil_model_init_training with ema) */
    int ema_warmup;  /* 1: the decay of each update is vil_ema_decay_at's warmup */
    const VilDist *dist; /* the group whose gradients are summed (NULL or no MPI: none) */
    int overlap;         /* 1: summed in buckets during the last micro-batch's backward */
    size_t bucket_bytes; /* the buckets' size */
    /* the initial states of the micro-batch (vil_model_sample_init_state): its seed and the
     * global index of its first sample */
    uint64_t init_seed;
    long init_first;
} VilStepParams;
/* The optimizer a run's config trains with (its `optimizer` key, resolved by finalize). */
const VilOptim *vil_train_optim(const VilTrainConfig *t);
/* A run's step hyperparameters at learning rate lr. */
VilStepParams vil_step_params(const VilTrainConfig *t, float lr);
/* The training step, the same for `vil train` and `vil bench` (step.c): forward with the loss
 * on the model's inputs, backward, the gradients summed over the ranks (overlapping the last
 * backward, or after it), gradient clipping, AdamW and the EMA, all queued on the backend
 * without a host read. With several micro-batches per step (accum_steps): vil_train_micro for
 * each (first = 1 zeroes the gradients, last = 1 on the last one; the loss is the mean over
 * m->loss_denom samples, so the sums make the global batch's mean), then vil_train_update.
 * vil_train_step is the two for one micro-batch. Each returns 0, or -1 / VIL_EUSAGE (reported)
 * from the model's calls: after vil_model_init_training, and vil_train_init_state for the
 * activations' batch, nothing they do allocates, and they return 0. */
int vil_train_step(VilModel *m, const VilStepParams *s);
int vil_train_micro(VilModel *m, const VilStepParams *s, int first, int last);
int vil_train_update(VilModel *m, const VilStepParams *s);

/* Progress at a log step (the only per-step host read: the batch's losses). */
typedef struct {
    int epoch, epochs;
    long step, total_steps;     /* global step after this update, 1-based */
    int epoch_step, epoch_steps;
    float loss, lr, grad_norm;  /* grad_norm < 0: not computed (clipping off) */
    double images_per_s, data_wait, eta_s;
} VilTrainProgress;

/* A request to stop, as signals make it. The command's handler passes each SIGINT / SIGTERM /
 * SIGUSR1 to vil_stop_signal; the run polls `level` and says what it is finishing (`said`):
 *   level 1: finish the step (or the validation pass under way, model and EMA), save, stop;
 *   level 2: a later signal, after the run said what it is finishing: abandon the validation,
 *            save now;
 *   a signal after level 2 was said: the signal's default action (the process ends unsaved).
 * Signals that arrive together are one request: `timeout` signals the process and then its
 * process group, a terminal's Ctrl-C reaches every process of the group, mpirun forwards what it
 * gets. A signal counts as a new request only once the run has said what it finishes for the
 * last one (or 10 s passed without a word: a run stuck in I/O stays stoppable), and 1 s after
 * the last one counted. */
typedef struct {
    volatile sig_atomic_t sig;   /* the first signal's number; 0: none */
    volatile sig_atomic_t level; /* 0, 1 or 2, above */
    volatile sig_atomic_t said;  /* the level the run has acknowledged (printed) */
    _Atomic long t_ms;           /* CLOCK_MONOTONIC ms of the last counted signal */
} VilStop;
/* Note a signal in s (async-signal-safe: for the handler itself). */
void vil_stop_signal(VilStop *s, int sig);
/* "SIGINT", "SIGTERM", "SIGUSR1" or "signal N" */
const char *vil_signal_name(int sig);

typedef struct {
    VilConfig model;          /* finalized */
    VilTrainConfig train;     /* finalized */
    const char *data;         /* dataset root (doc/recipe.md layouts) */
    const char *command;      /* the command line, for the run's record (run.jsonl); may be NULL */
    const char *commit;       /* the git commit vil was built from (vil/version.h), or NULL */
    const char *names;        /* class names file, or NULL */
    const char *val_labels;   /* labels file of a flat validation folder, or NULL */
    const char *out_dir;      /* created when missing */
    const char *resume;       /* NULL, or a checkpoint, its .state file, or a run folder */
    const char *init;         /* NULL, or a checkpoint (.safetensors or .pth) to start from
                               * (fine-tuning; vil_checkpoint_init): a fresh run only */
    int init_ema;             /* take init's model_ema (a .pth training checkpoint) */
    const VilBackend *be;
    long stop_after;          /* > 0: save and stop after this global step, the schedule unchanged */
    VilStop *stop;            /* requests to stop from a signal handler (vil_stop_signal), or
                               * NULL; on any rank, every rank stops at the same step */
    const VilDist *dist;      /* the process group (NULL: one process); be must have joined it */
    int quiet;                /* no progress lines (errors are still reported) */
    int dry_run;              /* set up and print the header, then stop: no folder, no file written */
    int force;                /* resume even with another global batch than the state's */
    FILE *log;                /* progress and epoch summaries; NULL: stdout */
    VilProgressMode progress; /* the bar, plain lines or none (vil/console.h); 0: auto for log */
    void (*on_log)(void *ctx, const VilTrainProgress *p); /* optional, at each log step */
    void *ctx;
} VilTrainRun;

typedef enum {
    VIL_TRAIN_DONE = 0,        /* the schedule ran to its end */
    VIL_TRAIN_FAILED = -1,     /* an error, reported; nothing half-written */
    VIL_TRAIN_STOPPED = 1,     /* stop_after reached: saved */
    VIL_TRAIN_INTERRUPTED = 2, /* a signal asked to stop (VilStop): saved */
    VIL_TRAIN_DIVERGED = 3,    /* a non-finite loss or gradient: not saved, the last good kept */
} VilTrainStatus;

typedef struct {
    long step;                 /* global steps done */
    int epoch;                 /* epochs completed */
    double epochs_done;        /* steps / steps per epoch */
    float top1, top5;          /* last evaluation of the model (-1: none) */
    float ema_top1, ema_top5;  /* and of the EMA (-1: none) */
    float best_top1;           /* best model top-1 so far (best.safetensors) */
    float last_loss;           /* loss of the last logged step */
    double seconds;
    int signal;                /* VIL_TRAIN_INTERRUPTED: the signal (SIGINT, SIGTERM, SIGUSR1) that
                                * stopped the run, on this rank or another; 0: none */
} VilTrainResult;

/* Train as run describes. Data problems are reported before any work; progress goes to
 * run->log. Writes OUT/last.safetensors (model), OUT/last.state.safetensors (everything a
 * bitwise-exact resume needs), OUT/ema.safetensors (EMA weights, when on) at every epoch end
 * and on stop, and OUT/best.safetensors when the model's val top-1 improves. */
VilTrainStatus vil_train(const VilTrainRun *run, VilTrainResult *res);

/* The run's last line, rank 0 only: on stdout when done or stopped (--stop-after, with the
 * command that continues it); on stderr when interrupted (which signal, what was saved, the
 * command that continues it: a clean stop, not an error) or, as an error, diverged. */
void vil_train_report(const VilTrainRun *run, VilTrainStatus status, const VilTrainResult *res);

/* Under mpirun / srun, rank 0 warns (once per process) when the loader's workers outnumber
 * the CPUs this rank may run on: they would share them with the step. */
void vil_train_check_affinity(const VilDist *d, int workers);

/* The state file that belongs to `resume` (see VilTrainRun.resume), malloc'd. */
char *vil_train_state_path(const char *resume);
/* Read the model and training configuration stored in the state file of `resume` (see
 * VilTrainRun.resume): a resumed run without a cfg file takes them. 0, or -1 (reported). */
int vil_train_state_read_config(const char *resume, VilConfig *model, VilTrainConfig *train);
/* The run folder, malloc'd: out when given; else, resuming, the folder of resume's state (the
 * run goes on writing there); else out/MODEL_NAME. */
char *vil_train_out_dir(const char *out, const char *resume, const char *model_name);
/* --resume auto: out_dir when it holds a run's state (the run goes on), else NULL (a fresh run
 * starts there), so one command serves the first launch and every requeue. */
const char *vil_train_resume_auto(const char *out_dir);
/* The pid of the vil train that holds out_dir (its OUT/train.lock), -1 when one holds it but its
 * pid is not written, 0 when none does. */
long vil_train_out_holder(const char *out_dir);

#endif
