/* config.h: the model configuration (ViL or ViM, sizes), the training configuration (recipe.md)
 * and their cfg-file format. A cfg file is "key = value" lines with # comments; unknown keys are
 * errors with the nearest valid key suggested; every key can be overridden from the command line
 * (--set key=value). One file may hold both kinds: model-only readers skip the training keys. */
#ifndef VIL_CONFIG_H
#define VIL_CONFIG_H

#include <stdio.h>

typedef enum { VIL_ARCH_VIL = 0, VIL_ARCH_VIM = 1 } VilArch;

typedef struct {
    /* from the file */
    char name[64];     /* free-form model name, e.g. vil_tiny */
    char arch[8];      /* "vil" (Longhorn scan) or "vim" (Mamba scan) */
    int img_size;      /* 224 */
    int patch_size;    /* P = 16 */
    int stride;        /* S = P, or 8 for ViM's stride-8 variant */
    int in_chans;      /* 3, or 1 for grayscale */
    int embed_dim;     /* D */
    int depth;         /* 24 */
    int d_state;       /* N = 16 */
    int dt_rank;       /* R; 0 means ceil(D / 16) */
    int expand;        /* E = expand * D, 2 */
    int d_conv;        /* depthwise conv width, 4 */
    int num_classes;
    float drop_path;   /* stochastic depth rate (training only) */
    char dt_init[8];   /* ViL dt_proj bias init: "zero" (official Longhorn) or "vim" */
    /* derived by vil_config_finalize */
    VilArch arch_id;
    int d_inner;       /* E */
    int grid;          /* G = (img - P) / S + 1 */
    int n_patches;     /* M = G * G */
    int seq_len;       /* L = M + 1 */
    int cls_pos;       /* t = M / 2 */
} VilConfig;

/* Defaults: ViL-Tiny at 224, 1000 classes. */
void vil_config_default(VilConfig *c);
/* Read a cfg file over *c. Returns 0, or -1 with the error reported (file:line: what). */
int vil_config_load(VilConfig *c, const char *path);
/* Set one key from a string ("embed_dim", "192"). Returns 0, or -1 with the error reported. */
int vil_config_set(VilConfig *c, const char *key, const char *value);
/* Apply "key=value". */
int vil_config_set_kv(VilConfig *c, const char *kv);
/* Validate and compute the derived sizes. Returns 0, or -1 with the error reported. */
int vil_config_finalize(VilConfig *c);
/* Write "key = value" lines (a loadable cfg). */
void vil_config_print(const VilConfig *c, FILE *f);
/* Serialize as a JSON object string (malloc'd) and parse it back (for checkpoint metadata). */
char *vil_config_to_json(const VilConfig *c);
int vil_config_from_json(VilConfig *c, const char *json);

/* ---- training (recipe.md; read by `vil train` only) ---- */
typedef struct {
    int epochs;              /* 300 */
    int batch;               /* per rank; global batch = batch * ranks */
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
    int log_every;           /* progress line every N steps (the only per-step host read) */
    int eval_every_epochs;   /* validation pass every N epochs (and after the last); 0: never */
    int eval_batch;          /* 0: the training batch */
    int max_steps;           /* 0: epochs * steps per epoch; else stop (and end the schedule) here */
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

#endif
