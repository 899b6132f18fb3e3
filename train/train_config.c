/* train_config.c: the training configuration of doc/recipe.md: its key table (vil/cfgfile.h
 * does the parsing, printing and JSON), the defaults and the checks. A cfg file may hold model
 * and training keys; `vil train` and `vil bench` read both. */
#include "train/train_config.h"

#include <string.h>

#include "data/image.h"
#include "data/recipe.h"
#include "vil/common.h"
#include "vil/dist.h"
#include "vil/model.h"
#include "vil/optim.h"
#include "vil/limits.h"

#define TI(f, lo, hi, h) VIL_KEY_I(VilTrainConfig, f, lo, hi, h)
#define TF(f, lo, hi, h) VIL_KEY_F(VilTrainConfig, f, lo, hi, h)
#define TS(f, h) VIL_KEY_S(VilTrainConfig, f, h)
#define BIG 1e9
static const VilKey TKEYS[] = {
    TI(epochs, 1, 1000000, "training epochs"),
    TI(batch, 1, VIL_MAX_BATCH, "batch size per rank and micro-batch (global batch = batch * "
                                "ranks * accum_steps)"),
    TI(accum_steps, 1, 4096, "micro-batches whose gradients are summed before each AdamW step"),
    TF(base_lr, 0, 100, "peak lr = base_lr * global_batch / 512"),
    TF(warmup_lr, 0, 100, "lr at step 0 of the linear warmup"),
    TF(warmup_epochs, 0, 1000000, "warmup length in epochs (fractions allowed)"),
    TF(min_lr, 0, 100, "end of the cosine decay"),
    TF(weight_decay, 0, 100, "AdamW weight decay (not on 1-D tensors, pos_embed, cls_token)"),
    TF(beta1, 0, 0.999999, "AdamW beta1"),
    TF(beta2, 0, 0.999999, "AdamW beta2"),
    TF(adam_eps, 1e-30, 1, "AdamW epsilon"),
    TS(optimizer, "the optimizer: adamw (torch.optim.AdamW; vil/optim.c lists them)"),
    TF(clip_grad, 0, BIG, "clip the global gradient norm to this (0: off)"),
    TF(ema_decay, 0, 0.99999999, "EMA of the weights, updated every step (0: off)"),
    TF(label_smoothing, 0, 0.999, "label smoothing of the targets"),
    TF(mixup, 0, 1000, "Mixup Beta alpha (0: off)"),
    TF(cutmix, 0, 1000, "CutMix Beta alpha (0: off)"),
    TF(mixup_prob, 0, 1, "probability that a batch is mixed"),
    TF(mixup_switch_prob, 0, 1, "with Mixup and CutMix both on: probability of CutMix"),
    TI(repeats, 1, 64, "repeated augmentation: each image this many times per epoch (1: off)"),
    TI(randaug_n, 0, 16, "RandAugment ops per image (0: off)"),
    TF(randaug_m, 0, 30, "RandAugment magnitude (of 10)"),
    TF(randaug_mstd, 0, 100, "RandAugment magnitude noise std"),
    TF(reprob, 0, 1, "random erasing probability"),
    TF(scale_min, 1e-6, 1, "RandomResizedCrop minimum area fraction"),
    TF(hflip, 0, 1, "horizontal flip probability"),
    TS(decode, "training JPEG decode: exact (PIL's pixels, the default) or fast (DCT-scaled crop, "
               "merged chroma upsampling: ~4% faster); evaluation always decodes exactly"),
    TF(crop_pct, VIL_MIN_CROP_PCT, 1, "evaluation: resize to img_size / crop_pct, center crop"),
    TI(seed, 0, 2147483647, "seed of the initialization, data order, augmentation and drop path"),
    TI(workers, 1, 256, "data loader threads"),
    TI(max_pixels, 1, VIL_IMAGE_MAX_PIXELS, "decoded pixels an image may have: a larger one is refused "
                                           "on its header (training replaces it, evaluation leaves it out)"),
    TS(allreduce, "with several ranks: overlap (the gradients summed in buckets while the backward "
                  "runs, the default) or end (one all-reduce after the backward)"),
    TF(bucket_mb, 0.001, 65536, "allreduce = overlap: MiB of gradients per all-reduce bucket"),
    TF(dist_timeout, 0, BIG, "with several ranks: seconds a collective may wait for the other ranks "
                             "before this rank reports them dead or hung and ends the run (0: wait forever)"),
    TI(recompute, 0, 1, "1: keep the conv1d outputs and delta of one layer and recompute them in the "
                        "backward: 46% less activation memory, ~3% more time (same gradients)"),
    TI(log_every, 1, BIG, "progress line every N steps"),
    TI(eval_every_epochs, 0, 1000000, "validation pass every N epochs and after the last (0: never)"),
    TI(holdout, 0, 2147483647, "validate on this many training images (a fixed random choice, the "
                               "same for every seed) instead of the val/test split, and train on the "
                               "rest: for choosing a recipe without the test set (0: off)"),
    TI(eval_batch, 0, VIL_MAX_BATCH, "evaluation batch (0: the training batch)"),
    TI(max_steps, 0, 2147483647, "stop after this many steps, the schedule ending there (0: no limit)"),
    TI(save_every_steps, 0, 2147483647, "also save every N steps (the state, last, ema and a "
                                       "step_N.safetensors; 0: at epoch ends only)"),
    TI(keep_last, 1, 1000000, "step_N.safetensors checkpoints kept (the newest)"),
    TS(init_state, "the state each training scan starts from (doc/recipe.md, Initial states): zero "
                   "(the default), noise (N(0, init_state_sigma^2)), fitted (N(mean, var) fitted to "
                   "the final states) or passing (the previous batch's final states); evaluation "
                   "starts from zero"),
    TF(init_state_sigma, 0, 1e6, "init_state = noise: the standard deviation of the initial states"),
    TF(init_state_drop, 0, 1, "init_state = passing: the probability that a sample starts from zero"),
};
#undef BIG
#undef TI
#undef TF
#undef TS
const VilKeyTable vil_train_keys = {TKEYS, (int)(sizeof TKEYS / sizeof TKEYS[0])};


/* model keys into c, training keys into t */
static int targets(VilKeyTarget t[2], VilConfig *c, VilTrainConfig *tc) {
    t[0].table = &vil_model_keys, t[0].base = c;
    t[1].table = &vil_train_keys, t[1].base = tc;
    return 2;
}

/* string values (the model's name; the others are checked against their choices in finalize)
 * not empty and UTF-8 where they come in: vil/config.c says why */
static int text_ok(const char *key, const char *value, const char *origin) {
    int rc = vil_key_text_ok(&vil_model_keys, key, value, origin);
    return rc ? rc : vil_key_text_ok(&vil_train_keys, key, value, origin);
}

int vil_train_config_set(VilConfig *c, VilTrainConfig *t, const char *key, const char *value) {
    VilKeyTarget k[2];
    int rc = text_ok(key, value, "--set");
    return rc ? rc : vil_keys_set(k, targets(k, c, t), key, value);
}

int vil_train_config_set_kv(VilConfig *c, VilTrainConfig *t, const char *kv) {
    VilKeyTarget k[2];
    char key[128];
    const char *v = vil_kv_split(kv, key, sizeof key);
    int rc = v ? text_ok(key, v, "--set") : 0;
    return rc ? rc : vil_keys_set_kv(k, targets(k, c, t), kv);
}

int vil_train_config_load(VilConfig *c, VilTrainConfig *t, const char *path) {
    VilKeyTarget k[2];
    int rc = vil_keys_load(k, targets(k, c, t), path);
    if (rc == 0) rc = vil_keys_text_ok(&vil_model_keys, c, path);
    if (rc == 0) rc = vil_keys_text_ok(&vil_train_keys, t, path);
    return rc;
}

void vil_train_config_print(const VilTrainConfig *t, FILE *f) { vil_keys_print(&vil_train_keys, t, 17, f); }

char *vil_train_config_to_json(const VilTrainConfig *t) { return vil_keys_to_json(&vil_train_keys, t); }

int vil_train_config_from_json(VilTrainConfig *t, const char *json) {
    VilKeyTarget k = {&vil_train_keys, t};
    return vil_keys_from_json(&k, json, "training config");
}

void vil_train_config_default(VilTrainConfig *t) {
    memset(t, 0, sizeof *t);
    /* doc/recipe.md, ViL-Tiny (the model defaults): global batch 1024 = 8 ranks x 128 */
    t->epochs = 300;
    t->batch = 128;
    t->accum_steps = 1;
    t->base_lr = 5e-4f;
    t->warmup_lr = 1e-6f;
    t->warmup_epochs = 5.0f;
    t->min_lr = 1e-5f;
    t->weight_decay = 0.1f;
    t->beta1 = 0.9f;
    t->beta2 = 0.999f;
    t->adam_eps = 1e-8f;
    strcpy(t->optimizer, "adamw");
    t->clip_grad = 0.0f;
    t->ema_decay = 0.99996f;
    t->label_smoothing = VIL_RECIPE_SMOOTHING;
    t->mixup = VIL_RECIPE_MIXUP;
    t->cutmix = VIL_RECIPE_CUTMIX;
    t->mixup_prob = VIL_RECIPE_MIXUP_PROB;
    t->mixup_switch_prob = VIL_RECIPE_MIXUP_SWITCH_PROB;
    t->repeats = VIL_RECIPE_REPEATS;
    t->randaug_n = VIL_RECIPE_RANDAUG_N;
    t->randaug_m = VIL_RECIPE_RANDAUG_M;
    t->randaug_mstd = VIL_RECIPE_RANDAUG_MSTD;
    t->reprob = VIL_RECIPE_REPROB;
    t->scale_min = VIL_RECIPE_SCALE_MIN;
    t->hflip = VIL_RECIPE_HFLIP;
    strcpy(t->decode, "exact");
    t->crop_pct = VIL_RECIPE_CROP_PCT;
    t->seed = 0;
    t->workers = VIL_RECIPE_WORKERS;
    t->max_pixels = VIL_IMAGE_DEFAULT_MAX_PIXELS;
    strcpy(t->allreduce, "overlap");
    t->bucket_mb = 4.0f;
    t->dist_timeout = (float)VIL_DIST_TIMEOUT_DEFAULT;
    t->log_every = 50;
    t->eval_every_epochs = 1;
    t->holdout = 0;
    t->eval_batch = 0;
    t->max_steps = 0;
    t->save_every_steps = 0;
    t->keep_last = 3;
    strcpy(t->init_state, "zero");
    t->init_state_sigma = 0.1f;
    t->init_state_drop = 0.1f;
}

int vil_train_config_finalize(const VilTrainConfig *t) {
#define NEED(cond, ...)                                                                   \
    if (!(cond)) {                                                                        \
        vil_error("config: " __VA_ARGS__);                                                \
        return VIL_EUSAGE;                                                                \
    }
#define PROB(f) NEED(t->f >= 0.0f && t->f <= 1.0f, #f " must be in [0, 1] (got %g)", t->f)
    NEED(t->epochs >= 1, "epochs must be >= 1");
    char optims[256];
    NEED(vil_optim_find(t->optimizer) != NULL, "optimizer must be one of: %s (got '%s')",
         vil_optim_names(optims, sizeof optims), t->optimizer);
    NEED(t->batch >= 1, "batch must be >= 1");
    NEED(t->base_lr > 0.0f, "base_lr must be > 0 (got %g)", t->base_lr);
    NEED(t->warmup_lr >= 0.0f && t->min_lr >= 0.0f, "warmup_lr and min_lr must be >= 0");
    NEED(t->warmup_epochs >= 0.0f && t->warmup_epochs <= t->epochs,
         "warmup_epochs must be in [0, epochs = %d] (got %g)", t->epochs, t->warmup_epochs);
    NEED(t->weight_decay >= 0.0f, "weight_decay must be >= 0");
    NEED(t->beta1 >= 0.0f && t->beta1 < 1.0f && t->beta2 >= 0.0f && t->beta2 < 1.0f,
         "beta1 and beta2 must be in [0, 1)");
    NEED(t->adam_eps > 0.0f, "adam_eps must be > 0");
    NEED(t->clip_grad >= 0.0f, "clip_grad must be >= 0 (0: off)");
    NEED(t->ema_decay >= 0.0f && t->ema_decay < 1.0f, "ema_decay must be in [0, 1) (0: off)");
    NEED(t->label_smoothing >= 0.0f && t->label_smoothing < 1.0f,
         "label_smoothing must be in [0, 1)");
    NEED(t->mixup >= 0.0f && t->cutmix >= 0.0f, "mixup and cutmix alphas must be >= 0 (0: off)");
    PROB(mixup_prob);
    PROB(mixup_switch_prob);
    PROB(reprob);
    PROB(hflip);
    NEED(t->repeats >= 1, "repeats must be >= 1 (1: no repeated augmentation)");
    NEED(t->randaug_m >= 0.0f && t->randaug_m <= 30.0f, "randaug_m must be in [0, 30]");
    NEED(t->randaug_mstd >= 0.0f, "randaug_mstd must be >= 0");
    NEED(t->scale_min > 0.0f && t->scale_min <= 1.0f, "scale_min must be in (0, 1]");
    NEED(t->crop_pct > 0.0f && t->crop_pct <= 1.0f, "crop_pct must be in (0, 1]");
    NEED(strcmp(t->decode, "fast") == 0 || strcmp(t->decode, "exact") == 0,
         "decode must be 'fast' or 'exact' (got '%s')", t->decode);
    NEED(strcmp(t->allreduce, "overlap") == 0 || strcmp(t->allreduce, "end") == 0,
         "allreduce must be 'overlap' or 'end' (got '%s')", t->allreduce);
    NEED(t->workers >= 1 && t->workers <= 256, "workers must be in 1..256");
    NEED(t->log_every >= 1, "log_every must be >= 1");
    NEED(vil_init_mode_find(t->init_state) >= 0, "init_state must be zero, noise, fitted or passing (got '%s')",
         t->init_state);
    NEED(t->init_state_sigma >= 0.0f, "init_state_sigma must be >= 0 (got %g)", t->init_state_sigma);
    PROB(init_state_drop);
    NEED(t->batch <= VIL_MAX_BATCH && t->eval_batch <= VIL_MAX_BATCH, "batch and eval_batch must be at most %d", VIL_MAX_BATCH);
#undef PROB
#undef NEED
    return 0;
}
