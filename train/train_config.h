/* train_config.h: the training configuration (doc/recipe.md; read by `vil train` and `vil
 * bench`), its keys and the cfg files that hold model and training keys together. */
#ifndef VIL_TRAIN_CONFIG_H
#define VIL_TRAIN_CONFIG_H

#include <stdio.h>

#include "vil/config.h"

typedef struct {
    int epochs;              /* 300 */
    int batch;               /* per rank and micro-batch; global = batch * ranks * accum_steps */
    int accum_steps;         /* micro-batches per optimizer step */
    float base_lr;           /* lr = base_lr * global_batch / 512 */
    float warmup_lr;         /* linear warmup from this ... */
    float warmup_epochs;     /* ... over this many epochs (fractions allowed) */
    float min_lr;            /* cosine floor */
    float weight_decay;      /* AdamW, only on tensors with VilParamInfo.decay */
    float beta1, beta2, adam_eps;
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
    float crop_pct;          /* evaluation: resize to img_size / crop_pct, center crop */
    int seed;
    int workers;             /* data loader threads */
    int max_pixels;          /* decoded pixels an image may have (vil_image_set_max_pixels) */
    char optimizer[16];      /* vil/optim.c's name of the optimizer: "adamw" */
    char allreduce[8];       /* "overlap": bucketed during the backward; "end": after it */
    float bucket_mb;         /* gradient MiB per bucket of allreduce = overlap */
    float dist_timeout;      /* seconds a wait on the other ranks may last (dist.h's watchdog); 0: off */
    int recompute;           /* 1: the backward recomputes u and delta (VilModel.recompute) */
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
} VilTrainConfig;

void vil_train_config_default(VilTrainConfig *t);
/* Read a cfg file holding model and training keys into *c and *t. 0, or -1 (reported). */
int vil_train_config_load(VilConfig *c, VilTrainConfig *t, const char *path);
/* Set one model or training key; "key=value" form. 0, or -1 (reported). */
int vil_train_config_set(VilConfig *c, VilTrainConfig *t, const char *key, const char *value);
int vil_train_config_set_kv(VilConfig *c, VilTrainConfig *t, const char *kv);
/* Validate the training keys. 0, or -1 (reported). */
int vil_train_config_finalize(const VilTrainConfig *t);
void vil_train_config_print(const VilTrainConfig *t, FILE *f);
char *vil_train_config_to_json(const VilTrainConfig *t);
int vil_train_config_from_json(VilTrainConfig *t, const char *json);

/* The training keys (the table the functions above use). */
extern const VilKeyTable vil_train_keys;

#endif
