/* train_config.h: the training configuration (doc/recipe.md; read by `vil train` and `vil
 * bench`), its keys, timm's flags for them and the cfg files that hold model and training keys
 * together. */
#ifndef VIL_TRAIN_CONFIG_H
#define VIL_TRAIN_CONFIG_H

#include <stdio.h>

#include "data/transform.h"
#include "vil/config.h"
#include "vil/model.h"
#include "vil/optim.h"

/* sched: the lr schedule after the warmup (train/schedule.c vil_sched_lr) */
typedef enum { VIL_SCHED_COSINE, VIL_SCHED_STEP, VIL_SCHED_MULTISTEP, VIL_SCHED_CONST_COSINE } VilSched;
/* allreduce: when the ranks' gradients are summed */
typedef enum { VIL_ALLREDUCE_OVERLAP, VIL_ALLREDUCE_END } VilAllreduce;

typedef struct {
    int epochs;              /* 300 */
    int batch;               /* per rank and micro-batch; global = batch * ranks * accum_steps */
    int accum_steps;         /* micro-batches per optimizer step */
    float base_lr;           /* lr = base_lr * global_batch / 512 */
    float warmup_lr;         /* linear warmup from this ... */
    float warmup_epochs;     /* ... over this many epochs (fractions allowed) */
    float min_lr;            /* cosine floor */
    float weight_decay;      /* only on tensors with VilParamInfo.decay (adamw: decoupled; adam, sgd: L2) */
    float beta1, beta2, adam_eps;
    float momentum;          /* sgd: torch.optim.SGD's momentum */
    int nesterov;            /* sgd: 1 for Nesterov momentum (0 by default; timm's --opt sgd: 1) */
    char sched[16];          /* lr schedule after the warmup: cosine, step, multistep, const_cosine */
    float decay_epochs;      /* step: decay every this many epochs */
    float decay_rate;        /* step, multistep: the factor of each decay */
    char decay_milestones[64]; /* multistep: the epochs of the decays, comma-separated */
    float sched_const_epochs; /* const_cosine: the peak lr until this epoch, then the cosine */
    int model_ema_warmup;    /* 1: the EMA decay warms up as timm's ModelEmaV3 */
    float clip_grad;         /* global gradient-norm clip; 0: off */
    float ema_decay;         /* EMA of the weights per step; 0: off */
    float label_smoothing;
    float mixup, cutmix;     /* Beta alphas; 0 disables each */
    float mixup_prob;        /* probability that a batch is mixed */
    float mixup_switch_prob; /* with both on: probability of CutMix */
    int repeats;             /* repeated augmentation (DeiT RASampler); 1: off */
    int randaug_n;           /* RandAugment ops per image; 0: off */
    float randaug_m, randaug_mstd;
    float reprob;            /* random erasing probability */
    float scale_min;         /* RandomResizedCrop area range (scale_min, 1) */
    float hflip;             /* horizontal flip probability */
    char decode[8];          /* JPEG decode of the train transform: "fast" or "exact" */
    int canvas;              /* > 0: items unscaled at random on a canvas of this side (= img_size),
                              * in place of RandomResizedCrop; 0: off */
    char canvas_bg[8];       /* the canvas background: "zero" or "noise" */
    float crop_pct;          /* evaluation: resize to img_size / crop_pct, center crop */
    int seed;
    int workers;             /* data loader threads */
    int max_pixels;          /* decoded pixels an image may have (vil_image_set_max_pixels) */
    char optimizer[16];      /* vil/optim.c's name of the optimizer: "adamw" */
    char allreduce[8];       /* "overlap": bucketed during the backward; "end": after it */
    float bucket_mb;         /* gradient MiB per bucket of allreduce = overlap */
    float dist_timeout;      /* seconds a wait on the other ranks may last (dist.h's watchdog); 0: off */
    int recompute;           /* VilModel.recompute: VIL_RECOMPUTE_NONE, _ALL (1) or _DELTA (2) */
    int log_every;           /* progress line every N steps (the only per-step host read) */
    int eval_every_epochs;   /* validation pass every N epochs (and after the last); 0: never */
    int holdout;             /* > 0: validate on this many held-out training images, not val/test */
    int eval_batch;          /* 0: the training batch */
    int max_steps;           /* 0: epochs * steps per epoch; else stop (and end the schedule) here */
    int save_every_steps;    /* > 0: save every N steps too, with a step_N.safetensors snapshot */
    int keep_last;           /* step snapshots kept */
    char init_state[16];     /* the training forwards' initial states (vil/model.h VilInitMode):
                              * zero, noise, fitted or passing */
    float init_state_sigma;  /* noise: the standard deviation */
    float init_state_drop;   /* passing: the probability of a zero start */
    char init_state_fit[16]; /* fitted: element or scalar (vil/model.h VilInitFit) */
    int init_state_fit_noise;      /* fitted: 1 N(mean, var); 0 the mean alone */
    float init_state_fit_momentum; /* fitted: the old fit's weight at each update */
    float init_state_fit_drop;     /* fitted: the probability of a zero start */
    /* the choices the text keys name (cfgfile.h VilChoice: resolved where a key is set, and by
     * vil_train_config_finalize): what the code reads; the texts are for printing and JSON */
    const VilOptim *optim;       /* optimizer's entry of vil/optim.c */
    VilSched sched_kind;         /* sched */
    VilDecodeMode decode_kind;   /* decode */
    VilCanvasBg canvas_bg_kind;  /* canvas_bg */
    VilAllreduce allreduce_kind; /* allreduce */
    VilInitMode init_state_kind; /* init_state */
    VilInitFit init_state_fit_kind; /* init_state_fit */
} VilTrainConfig;

void vil_train_config_default(VilTrainConfig *t);
/* Read a cfg file holding model and training keys into *c and *t. 0, or -1 (reported). */
int vil_train_config_load(VilConfig *c, VilTrainConfig *t, const char *path);
/* Set one model or training key; "key=value" form. 0, or -1 (reported). */
int vil_train_config_set(VilConfig *c, VilTrainConfig *t, const char *key, const char *value);
int vil_train_config_set_kv(VilConfig *c, VilTrainConfig *t, const char *kv);
/* Resolve the choice keys (optim, sched_kind, ...) and validate the training keys. 0, or
 * VIL_EUSAGE (reported). */
int vil_train_config_finalize(VilTrainConfig *t);
/* The optimizer's hyperparameters of a step at learning rate lr, from t's keys (beta1, beta2,
 * adam_eps, weight_decay, momentum, nesterov): the one struct the step hands to the optimizer's op. */
VilOptimHyper vil_train_config_hyper(const VilTrainConfig *t, float lr);
void vil_train_config_print(const VilTrainConfig *t, FILE *f);
char *vil_train_config_to_json(const VilTrainConfig *t);
int vil_train_config_from_json(VilTrainConfig *t, const char *json);

/* The training keys (the table the functions above use). */
extern const VilKeyTable vil_train_keys;

/* timm's train.py flags as vil keys: `vil train --lr 0.1 -b 64 --smoothing 0.1` and the "did you
 * mean" of `--set smoothing=0.1`. A row's timm name is its long flag's argparse name
 * (--drop-path: drop_path). */
typedef enum {
    VIL_TIMM_KEY,   /* the value is the key's */
    VIL_TIMM_LR,    /* the absolute peak lr: base_lr = lr * 512 / global batch, once it is known */
    VIL_TIMM_AA,    /* timm's RandAugment string: randaug_n, randaug_m, randaug_mstd */
    VIL_TIMM_OPT,   /* timm's optimizer name: optimizer, and nesterov where the name implies it */
    VIL_TIMM_SWITCH, /* a flag without a value, as timm's store_true: the key set to 1 */
    VIL_TIMM_HINT,  /* no vil key: the note says what vil has instead */
} VilTimmConv;
typedef struct VilTimmFlag {
    const char *flag;  /* "--batch-size" */
    const char *alt;   /* another spelling ("-b"), or NULL */
    const char *key;   /* the vil key it sets (the first one for VIL_TIMM_AA; NULL for a hint) */
    VilTimmConv conv;
    const char *note;  /* the conversion or the hint, or NULL */
} VilTimmFlag;
extern const VilTimmFlag vil_timm_flags[];
extern const int vil_timm_flag_count;
/* The row of a flag ("--lr", "-b") or of timm's name ("lr", "batch_size"), or NULL. */
const VilTimmFlag *vil_timm_find(const char *name);
/* The keys a timm flag sets with this value (at most 3, into keys): its key (--lr: base_lr);
 * --aa the keys of the parts given (rand-m9: randaug_m; none: randaug_n). The keys it only
 * implies are not among them (--opt sgd: nesterov; --aa rand-m9: randaug_n, randaug_mstd at
 * timm's defaults), so a --set of one refines the flag. How many. */
int vil_timm_keys(const VilTimmFlag *f, const char *value, const char *keys[3]);
/* Apply one timm flag's value (VIL_TIMM_SWITCH: value ignored), the keys it implies included.
 * VIL_TIMM_LR keeps the lr in *lr for vil_train_config_set_lr. 0, or VIL_EUSAGE (reported,
 * naming the flag). */
int vil_train_config_set_timm(VilConfig *c, VilTrainConfig *t, const VilTimmFlag *f, const char *value,
                              double *lr);
/* base_lr from an absolute peak lr at this global batch. 0, or VIL_EUSAGE (reported). */
int vil_train_config_set_lr(VilTrainConfig *t, double lr, long global_batch);
/* Every model and training key: its type and range, default, timm flag and help (vil train
 * --list-keys). */
void vil_train_config_list_keys(FILE *f);

#endif
