/* train_config.c: the training configuration of doc/recipe.md: its key table (vil/cfgfile.h
 * does the parsing, printing and JSON), the defaults and the checks, timm's flags as its keys
 * and the key listing. A cfg file may hold model and training keys; `vil train` and `vil bench`
 * read both. */
#include "train/train_config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "data/image.h"
#include "data/recipe.h"
#include "vil/common.h"
#include "vil/dist.h"
#include "vil/model.h"
#include "vil/optim.h"
#include "vil/limits.h"
#include "train/train.h"

#define TI(f, lo, hi, h) VIL_KEY_I(VilTrainConfig, f, lo, hi, h)
#define TF(f, lo, hi, h) VIL_KEY_F(VilTrainConfig, f, lo, hi, h)
#define TS(f, h) VIL_KEY_S(VilTrainConfig, f, h)
#define TC(f, r, choice, h) VIL_KEY_C(VilTrainConfig, f, r, choice, h)
#define BIG 1e9

/* the choice keys' names (cfgfile.h VilChoice), numbered as their enums */
#define NAME_AT(names)                                                                          \
    static const char *names##_name(int i) {                                                    \
        return i >= 0 && i < (int)(sizeof names / sizeof names[0]) ? names[i] : NULL;          \
    }
static const char *const SCHEDS[] = {[VIL_SCHED_COSINE] = "cosine", [VIL_SCHED_STEP] = "step",
                                     [VIL_SCHED_MULTISTEP] = "multistep", [VIL_SCHED_CONST_COSINE] = "const_cosine"};
static const char *const DECODES[] = {[VIL_DECODE_EXACT] = "exact", [VIL_DECODE_FAST] = "fast"};
static const char *const ALLREDUCES[] = {[VIL_ALLREDUCE_OVERLAP] = "overlap", [VIL_ALLREDUCE_END] = "end"};
static const char *const CANVAS_BGS[] = {[VIL_CANVAS_ZERO] = "zero", [VIL_CANVAS_NOISE] = "noise"};
NAME_AT(SCHEDS)
NAME_AT(DECODES)
NAME_AT(ALLREDUCES)
NAME_AT(CANVAS_BGS)
#undef NAME_AT
static const char *init_state_name(int i) { return i >= 0 && i < VIL_INIT_COUNT ? vil_init_mode_names[i] : NULL; }
static const char *init_fit_name(int i) { return i >= 0 && i < VIL_INIT_FIT_COUNT ? vil_init_fit_names[i] : NULL; }
/* the optimizer: its entry of the table (NULL: none) */
static const char *optim_name(int i) {
    const VilOptim *o = vil_optim_at(i);
    return o ? o->name : NULL;
}
static void optim_store(void *field, int i) { *(const VilOptim **)field = vil_optim_at(i); }
_Static_assert(sizeof(VilSched) == sizeof(int) && sizeof(VilDecodeMode) == sizeof(int) &&
                   sizeof(VilAllreduce) == sizeof(int) && sizeof(VilInitMode) == sizeof(int) &&
                   sizeof(VilCanvasBg) == sizeof(int) && sizeof(VilInitFit) == sizeof(int),
               "vil_choice_store_enum writes an int");
static const VilChoice OPTIMIZER = {optim_name, optim_store};
static const VilChoice SCHED = {SCHEDS_name, vil_choice_store_enum};
static const VilChoice DECODE = {DECODES_name, vil_choice_store_enum};
static const VilChoice ALLREDUCE = {ALLREDUCES_name, vil_choice_store_enum};
static const VilChoice CANVAS_BG = {CANVAS_BGS_name, vil_choice_store_enum};
static const VilChoice INIT_STATE = {init_state_name, vil_choice_store_enum};
static const VilChoice INIT_FIT = {init_fit_name, vil_choice_store_enum};

static const VilKey TKEYS[] = {
    TI(epochs, 1, 1000000, "training epochs"),
    TI(batch, 1, VIL_MAX_BATCH, "batch size per rank and micro-batch (global batch = batch * "
                                "ranks * accum_steps)"),
    TI(accum_steps, 1, 4096, "micro-batches whose gradients are summed before each AdamW step"),
    TF(base_lr, 0, 100, "peak lr = base_lr * global_batch / 512"),
    TF(warmup_lr, 0, 100, "lr at step 0 of the linear warmup"),
    TF(warmup_epochs, 0, 1000000, "warmup length in epochs (fractions allowed)"),
    TF(min_lr, 0, 100, "end of the cosine decay"),
    TF(weight_decay, 0, 100, "weight decay, not on 1-D tensors, pos_embed, cls_token (adamw: decoupled; "
                             "adam, sgd: L2 on the gradient; lamb: added to the update)"),
    TF(beta1, 0, 0.999999, "AdamW, Adam and Lamb beta1"),
    TF(beta2, 0, 0.999999, "AdamW, Adam and Lamb beta2"),
    TF(adam_eps, 1e-30, 1, "AdamW, Adam and Lamb epsilon (timm's Lamb defaults to 1e-6)"),
    TC(optimizer, optim, OPTIMIZER,
       "the optimizer: adamw (torch.optim.AdamW), adam (torch.optim.Adam, L2 weight decay), "
       "sgd (torch.optim.SGD, L2 weight decay; Nesterov with nesterov = 1), lamb (timm's "
       "Lamb) or lambc (Lamb, trust ratio clipped at 1)"),
    TF(momentum, 0, 0.999999, "sgd: momentum"),
    TI(nesterov, 0, 1, "sgd: 1 for Nesterov momentum (timm's --opt sgd sets it; --set optimizer=sgd "
                       "does not)"),
    TC(sched, sched_kind, SCHED,
       "lr schedule after the warmup: cosine (per step, to min_lr), step (x decay_rate every "
       "decay_epochs epochs), multistep (x decay_rate at each of decay_milestones) or "
       "const_cosine (the peak lr until sched_const_epochs, then cosine to min_lr)"),
    TF(decay_epochs, 1e-6, 1000000, "sched = step: epochs between decays (timm's decay_epochs)"),
    TF(decay_rate, 0, 1, "sched = step, multistep: the lr factor of each decay"),
    TS(decay_milestones, "sched = multistep: the epochs at which the lr decays, comma-separated (e.g. 30,60,90)"),
    TF(sched_const_epochs, 0, 1000000, "sched = const_cosine: epochs at the peak lr (warmup included; "
                                       "fractions allowed) before the cosine"),
    TI(model_ema_warmup, 0, 1, "1: EMA decay min(ema_decay, 1 - (1 + s)^(-2/3)) at update s + 1, as timm's "
                               "ModelEmaV3 warmup"),
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
    TC(decode, decode_kind, DECODE,
       "training JPEG decode: exact (PIL's pixels, the default) or fast (DCT-scaled crop, "
       "merged chroma upsampling: ~4% faster); evaluation always decodes exactly"),
    TI(canvas, 0, VIL_MAX_IMG_SIZE, "> 0: each training item unscaled at a uniform random position on a canvas of "
                                    "this side (= img_size) in place of RandomResizedCrop (needs scale_min = 1 "
                                    "and crop_pct = 1); validation places its items alike (0: off)"),
    TC(canvas_bg, canvas_bg_kind, CANVAS_BG, "canvas > 0: the background around the item, zero or noise "
                                             "(uniform 0..255 per pixel and channel)"),
    TF(crop_pct, VIL_MIN_CROP_PCT, 1, "evaluation: resize to img_size / crop_pct, center crop"),
    TI(seed, 0, 2147483647, "seed of the initialization, data order, augmentation and drop path"),
    TI(workers, 1, 256, "data loader threads"),
    TI(max_pixels, 1, VIL_IMAGE_MAX_PIXELS, "decoded pixels an image may have: a larger one is refused "
                                           "on its header (training replaces it, evaluation leaves it out)"),
    TC(allreduce, allreduce_kind, ALLREDUCE,
       "with several ranks: overlap (the gradients summed in buckets while the backward "
       "runs, the default) or end (one all-reduce after the backward)"),
    TF(bucket_mb, 0.001, 65536, "allreduce = overlap: MiB of gradients per all-reduce bucket"),
    TF(dist_timeout, 0, BIG, "with several ranks: seconds a collective may wait for the other ranks "
                             "before this rank reports them dead or hung and ends the run (0: wait forever)"),
    TI(recompute, 0, 2, "what the backward computes again instead of keeping it for every layer "
                        "(the same gradients): 0 nothing; 1 the conv1d outputs and delta (46% less "
                        "activation memory, ~3% more time); 2 delta only (23% less, ~2% more time)"),
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
    TC(init_state, init_state_kind, INIT_STATE,
       "the state each training scan starts from (doc/recipe.md, Initial states): zero "
       "(the default), noise (N(0, init_state_sigma^2)), fitted (N(mean, var) fitted to "
       "the final states) or passing (the previous batch's final states); evaluation "
       "starts from zero"),
    TF(init_state_sigma, 0, 1e6, "init_state = noise: the standard deviation of the initial states"),
    TF(init_state_drop, 0, 1, "init_state = passing: the probability that a sample starts from zero"),
    TC(init_state_fit, init_state_fit_kind, INIT_FIT,
       "init_state = fitted: element (a mean and variance per layer, direction, state and channel, "
       "the default) or scalar (one mean and variance per layer and direction)"),
    TI(init_state_fit_noise, 0, 1, "init_state = fitted: 1 draws from N(mean, var); 0 starts every "
                                   "sample from the fitted mean (no noise)"),
    TF(init_state_fit_momentum, 0, 0.999999, "init_state = fitted: the running fit's weight at each "
                                             "update (the batch's is 1 - it)"),
    TF(init_state_fit_drop, 0, 1, "init_state = fitted: the probability that a sample starts from zero"),
};
#undef BIG
#undef TI
#undef TF
#undef TS
#undef TC
const VilKeyTable vil_train_keys = {TKEYS, (int)(sizeof TKEYS / sizeof TKEYS[0])};

/* timm's train.py flags whose meaning vil has. timm's -b is per process, as vil's batch is per
 * rank; its --lr is the absolute peak lr, vil's base_lr the lr of a global batch of 512. */
const VilTimmFlag vil_timm_flags[] = {
    {"--epochs", NULL, "epochs", VIL_TIMM_KEY, NULL},
    {"--batch-size", "-b", "batch", VIL_TIMM_KEY, "per process, as timm's"},
    {"--grad-accum-steps", NULL, "accum_steps", VIL_TIMM_KEY, NULL},
    {"--lr", NULL, "base_lr", VIL_TIMM_LR, "the absolute peak lr, as timm's: base_lr = lr * 512 / global batch"},
    {"--warmup-lr", NULL, "warmup_lr", VIL_TIMM_KEY, NULL},
    {"--min-lr", NULL, "min_lr", VIL_TIMM_KEY, NULL},
    {"--warmup-epochs", NULL, "warmup_epochs", VIL_TIMM_KEY, NULL},
    {"--weight-decay", NULL, "weight_decay", VIL_TIMM_KEY, NULL},
    {"--opt", NULL, "optimizer", VIL_TIMM_OPT, "timm's names: sgd or nesterov (SGD, nesterov = 1), momentum "
                                               "(SGD, nesterov = 0), adam (torch.optim.Adam), adamw, lamb, lambc"},
    {"--opt-eps", NULL, "adam_eps", VIL_TIMM_KEY, NULL},
    {"--clip-grad", NULL, "clip_grad", VIL_TIMM_KEY, "the global norm (timm's --clip-mode norm)"},
    {"--momentum", NULL, "momentum", VIL_TIMM_KEY, "sgd's"},
    {"--sched", NULL, "sched", VIL_TIMM_KEY, "cosine, step, multistep (timm's names) or const_cosine"},
    {"--decay-epochs", NULL, "decay_epochs", VIL_TIMM_KEY, NULL},
    {"--decay-rate", NULL, "decay_rate", VIL_TIMM_KEY, NULL},
    {"--decay-milestones", NULL, "decay_milestones", VIL_TIMM_KEY, "comma-separated: 30,60,90"},
    {"--model-ema-decay", NULL, "ema_decay", VIL_TIMM_KEY, NULL},
    {"--model-ema-warmup", NULL, "model_ema_warmup", VIL_TIMM_SWITCH, "set to 1: a switch without a value, as timm's"},
    {"--smoothing", NULL, "label_smoothing", VIL_TIMM_KEY, NULL},
    {"--drop-path", NULL, "drop_path", VIL_TIMM_KEY, NULL},
    {"--drop-path-rate", NULL, "drop_path", VIL_TIMM_KEY, "timm's create_model argument"},
    {"--mixup", NULL, "mixup", VIL_TIMM_KEY, NULL},
    {"--cutmix", NULL, "cutmix", VIL_TIMM_KEY, NULL},
    {"--mixup-prob", NULL, "mixup_prob", VIL_TIMM_KEY, NULL},
    {"--mixup-switch-prob", NULL, "mixup_switch_prob", VIL_TIMM_KEY, NULL},
    {"--aa", NULL, "randaug_n", VIL_TIMM_AA, "rand-m9-mstd0.5-inc1 (parts n, m, mstd, inc 0 or 1, each once; "
                                            "timm's defaults n2 m10 mstd0) sets randaug_n, randaug_m, "
                                            "randaug_mstd; none: off"},
    {"--reprob", NULL, "reprob", VIL_TIMM_KEY, NULL},
    {"--hflip", NULL, "hflip", VIL_TIMM_KEY, NULL},
    {"--crop-pct", NULL, "crop_pct", VIL_TIMM_KEY, NULL},
    {"--seed", NULL, "seed", VIL_TIMM_KEY, NULL},
    {"--workers", "-j", "workers", VIL_TIMM_KEY, NULL},
    {"--log-interval", NULL, "log_every", VIL_TIMM_KEY, NULL},
    {"--img-size", NULL, "img_size", VIL_TIMM_KEY, NULL},
    {"--num-classes", NULL, "num_classes", VIL_TIMM_KEY, NULL},
    {"--model", NULL, NULL, VIL_TIMM_HINT, "vil's model and recipe come from --config CFG (configs/*.cfg); "
                                           "--model names a checkpoint in vil eval and classify"},
    {"--initial-checkpoint", NULL, NULL, VIL_TIMM_HINT, "--init CKPT starts from a checkpoint's weights"},
    {"--output", NULL, NULL, VIL_TIMM_HINT, "--out DIR is the run's folder itself (timm's --output is its parent)"},
    {"--model-ema", NULL, NULL, VIL_TIMM_HINT, "the EMA is on while ema_decay > 0 (--model-ema-decay X; 0: off)"},
    {"--amp", NULL, NULL, VIL_TIMM_HINT, "vil computes in bf16 on CUDA and float32 on the CPU, always"},
    {"--scale", NULL, NULL, VIL_TIMM_HINT, "RandomResizedCrop's area range is (scale_min, 1): --set "
                                           "scale_min=0.08 is timm's --scale 0.08 1.0"},
    {"--ratio", NULL, NULL, VIL_TIMM_HINT, "RandomResizedCrop's aspect range is timm's default (3/4, 4/3), fixed"},
    {"--remode", NULL, NULL, VIL_TIMM_HINT, "random erasing fills its box with per-pixel normal noise, timm's "
                                            "default (pixel); reprob sets its probability"},
    {"--drop", NULL, NULL, VIL_TIMM_HINT, "vil's models have no dropout; --drop-path X sets stochastic depth (drop_path)"},
    {"--grad-checkpointing", NULL, NULL, VIL_TIMM_HINT, "--set recompute=1 (or 2) computes activations again in "
                                                        "the backward instead of keeping them (vil train --list-keys)"},
};
const int vil_timm_flag_count = (int)(sizeof vil_timm_flags / sizeof vil_timm_flags[0]);


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

/* timm's argparse name of a row: its long flag without the dashes, '-' as '_' */
static const char *timm_name(const VilTimmFlag *f, char *buf, size_t n) {
    snprintf(buf, n, "%s", f->flag + 2);
    for (char *p = buf; *p; p++)
        if (*p == '-') *p = '_';
    return buf;
}

const VilTimmFlag *vil_timm_find(const char *name) {
    for (int i = 0; i < vil_timm_flag_count; i++) {
        const VilTimmFlag *f = &vil_timm_flags[i];
        char tn[64];
        if (strcmp(name, f->flag) == 0 || (f->alt && strcmp(name, f->alt) == 0) ||
            strcmp(name, timm_name(f, tn, sizeof tn)) == 0)
            return f;
    }
    return NULL;
}

/* A key of neither table that is timm's name: the vil key (or what vil has instead) said. 1 when
 * reported. */
static int timm_unknown(const char *key) {
    if (vil_keys_find(&vil_model_keys, key) || vil_keys_find(&vil_train_keys, key)) return 0;
    const VilTimmFlag *f = vil_timm_find(key);
    if (!f) return 0;
    if (f->conv == VIL_TIMM_KEY)
        vil_error("unknown config key '%s': timm's %s is vil's key '%s' (--set %s=..., or the flag %s)",
                  key, f->flag, f->key, f->key, f->flag);
    else if (f->conv == VIL_TIMM_LR)
        vil_error("unknown config key '%s': vil's key is 'base_lr' (peak lr = base_lr * global_batch "
                  "/ 512); the flag %s X takes timm's absolute lr and sets base_lr from it", key, f->flag);
    else if (f->conv == VIL_TIMM_AA)
        vil_error("unknown config key '%s': vil's keys are randaug_n, randaug_m and randaug_mstd; the "
                  "flag %s takes timm's string: %s", key, f->flag, f->note);
    else if (f->conv == VIL_TIMM_OPT)
        vil_error("unknown config key '%s': vil's key is 'optimizer' (adamw, adam, sgd, lamb or lambc; "
                  "nesterov = 1 for Nesterov momentum); the flag %s takes %s", key, f->flag, f->note);
    else
        vil_error("unknown config key '%s' (timm's %s): %s", key, f->flag, f->note);
    return 1;
}

int vil_train_config_set(VilConfig *c, VilTrainConfig *t, const char *key, const char *value) {
    VilKeyTarget k[2];
    if (timm_unknown(key)) return VIL_EUSAGE;
    int rc = text_ok(key, value, "--set");
    return rc ? rc : vil_keys_set(k, targets(k, c, t), key, value);
}

int vil_train_config_set_kv(VilConfig *c, VilTrainConfig *t, const char *kv) {
    VilKeyTarget k[2];
    char key[128];
    const char *v = vil_kv_split(kv, key, sizeof key);
    if (v && timm_unknown(key)) return VIL_EUSAGE;
    int rc = v ? text_ok(key, v, "--set") : 0;
    return rc ? rc : vil_keys_set_kv(k, targets(k, c, t), kv);
}

/* timm's RandAugment string's parts (rand_augment_transform: "-" between parts, each a name and
 * its value, m9) and the keys they set: the index of the part named p[0, nl), or -1 for one vil
 * lacks (timm's w, mmax, p) */
static const char *const AA_PARTS[] = {"n", "m", "mstd", "inc"};
static const char *const AA_KEYS[] = {"randaug_n", "randaug_m", "randaug_mstd", NULL};
static int aa_part(const char *p, size_t nl) {
    for (int i = 0; i < 4; i++)
        if (strlen(AA_PARTS[i]) == nl && strncmp(p, AA_PARTS[i], nl) == 0) return i;
    return -1;
}
/* the length of the part's name: its leading lowercase letters */
static size_t aa_name_len(const char *p, size_t len) {
    size_t nl = 0;
    while (nl < len && p[nl] >= 'a' && p[nl] <= 'z') nl++;
    return nl;
}

int vil_timm_keys(const VilTimmFlag *f, const char *value, const char *keys[3]) {
    if (f->conv == VIL_TIMM_HINT) return 0;
    if (f->conv != VIL_TIMM_AA) {
        keys[0] = f->conv == VIL_TIMM_LR ? "base_lr" : f->key;
        return 1;
    }
    int n = 0;
    if (!*value || strcmp(value, "none") == 0 || strncmp(value, "rand-", 5) != 0) {
        keys[n++] = "randaug_n";
        return n;
    }
    for (const char *p = value + 4; *p == '-' && n < 3;) {
        p++;
        size_t len = strcspn(p, "-");
        int i = aa_part(p, aa_name_len(p, len));
        int seen = 0;
        for (int j = 0; i >= 0 && AA_KEYS[i] && j < n; j++) seen |= keys[j] == AA_KEYS[i];
        if (i >= 0 && AA_KEYS[i] && !seen) keys[n++] = AA_KEYS[i];
        p += len;
    }
    return n;
}

/* timm's RandAugment string: rand, then -PARTVALUE parts (n, m, mstd, inc), each at most once,
 * timm's defaults for the parts not given (n2 m10 mstd0). inc takes 0 or 1 (timm's "integer
 * (bool)"), and either gives the increasing ops, the only ones vil has: timm's parser turns them on
 * for any value (bool of a non-empty string), inc0 too. All three keys set, or none. */
static int set_aa(VilConfig *c, VilTrainConfig *t, const char *value) {
    if (!*value || strcmp(value, "none") == 0) return vil_train_config_set(c, t, "randaug_n", "0");
    if (strncmp(value, "rand", 4) != 0 || (value[4] && value[4] != '-')) {
        vil_error("vil has RandAugment only, given as timm's rand-m9-mstd0.5-inc1 (parts n, m, mstd, "
                  "inc), or none: no AutoAugment or AugMix");
        return VIL_EUSAGE;
    }
    char vals[4][32] = {"2", "10", "0", "1"};
    int given[4] = {0};
    for (const char *p = value + 4; *p == '-';) {
        p++;
        size_t len = strcspn(p, "-"), nl = aa_name_len(p, len);
        int i = aa_part(p, nl);
        if (i < 0) {
            vil_error("the part '%.*s' is not one vil's RandAugment has (n, m, mstd, inc)", (int)len, p);
            return VIL_EUSAGE;
        }
        if (given[i]) {
            vil_error("the part %s is given twice: give it once", AA_PARTS[i]);
            return VIL_EUSAGE;
        }
        given[i] = 1;
        if (len == nl || len - nl >= sizeof vals[i]) {
            vil_error("the part '%.*s' wants a value, e.g. m9", (int)len, p);
            return VIL_EUSAGE;
        }
        snprintf(vals[i], sizeof vals[i], "%.*s", (int)(len - nl), p + nl);
        if (AA_KEYS[i] == NULL && strcmp(vals[i], "0") != 0 && strcmp(vals[i], "1") != 0) {
            vil_error("the part '%.*s': inc takes 0 or 1 (either gives timm's increasing ops, which vil "
                      "has)", (int)len, p);
            return VIL_EUSAGE;
        }
        p += len;
    }
    const char *n = vals[0], *m = vals[1], *mstd = vals[2];
    VilTrainConfig keep = *t;
    int rc = vil_train_config_set(c, t, "randaug_n", n);
    if (rc == 0) rc = vil_train_config_set(c, t, "randaug_m", m);
    if (rc == 0) rc = vil_train_config_set(c, t, "randaug_mstd", mstd);
    if (rc != 0) *t = keep;
    return rc;
}

/* timm's --opt names (its optimizer factory's registry) that vil has: sgd is torch.optim.SGD
 * with nesterov=True (nesterov its alias), momentum the same with nesterov=False, adam
 * torch.optim.Adam; vil's own key keeps its default nesterov = 0 (-1: the name implies none) */
static const struct {
    const char *timm, *optimizer;
    int nesterov;
} TIMM_OPTS[] = {{"sgd", "sgd", 1}, {"nesterov", "sgd", 1}, {"momentum", "sgd", 0}, {"adam", "adam", -1},
                 {"adamw", "adamw", -1}, {"lamb", "lamb", -1}, {"lambc", "lambc", -1}};

static int set_opt(VilConfig *c, VilTrainConfig *t, const char *value) {
    for (size_t i = 0; i < sizeof TIMM_OPTS / sizeof TIMM_OPTS[0]; i++) {
        if (strcasecmp(value, TIMM_OPTS[i].timm) != 0) continue;
        VilTrainConfig keep = *t;
        int rc = vil_train_config_set(c, t, "optimizer", TIMM_OPTS[i].optimizer);
        if (rc == 0 && TIMM_OPTS[i].nesterov >= 0)
            rc = vil_train_config_set(c, t, "nesterov", TIMM_OPTS[i].nesterov ? "1" : "0");
        if (rc != 0) *t = keep;
        return rc;
    }
    vil_error("not one of timm's optimizers vil has: sgd or nesterov (SGD with Nesterov momentum), "
              "momentum (SGD, classical momentum), adam, adamw, lamb, lambc");
    return VIL_EUSAGE;
}

int vil_train_config_set_timm(VilConfig *c, VilTrainConfig *t, const VilTimmFlag *f, const char *value,
                              double *lr) {
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = 0;
    if (f->conv == VIL_TIMM_KEY) {
        rc = vil_train_config_set(c, t, f->key, value);
    } else if (f->conv == VIL_TIMM_SWITCH) {
        rc = vil_train_config_set(c, t, f->key, "1");
    } else if (f->conv == VIL_TIMM_OPT) {
        rc = set_opt(c, t, value);
    } else if (f->conv == VIL_TIMM_AA) {
        rc = set_aa(c, t, value);
    } else if (f->conv == VIL_TIMM_LR) {
        double v;
        if (vil_parse_float(value, &v) != 0 || !(v > 0.0) || v > 100.0) rc = VIL_EUSAGE;
        else *lr = v;
    } else {
        rc = VIL_EUSAGE;
    }
    vil_error_release(&cap);
    if (rc == 0) return 0;
    char shown[80];
    vil_printable(shown, sizeof shown, value ? value : "");
    if (f->conv == VIL_TIMM_LR) vil_error("%s wants a number in (0, 100], the absolute peak lr (got '%s')", f->flag, shown);
    else vil_error("%s '%s': %s", f->flag, shown, cap.msg);
    return rc;
}

int vil_train_config_set_lr(VilTrainConfig *t, double lr, long global_batch) {
    double global = (double)global_batch;
    double base = lr * 512.0 / global;
    if (!((float)base > 0.0f) || base > 100.0) {
        vil_error("--lr %g at a global batch of %.0f makes base_lr %g, outside (0, 100]", lr, global, base);
        return VIL_EUSAGE;
    }
    t->base_lr = (float)base;
    return 0;
}

int vil_train_config_load(VilConfig *c, VilTrainConfig *t, const char *path) {
    VilKeyTarget k[2];
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_keys_load(k, targets(k, c, t), path);
    vil_error_release(&cap);
    if (rc != 0) {
        /* a key of timm's answered with vil's, as --set does: "unknown config key 'lr' ..." */
        const char *q = strstr(cap.msg, "unknown config key '"), *at = strstr(cap.msg, "... in ");
        char key[64] = "";
        if (q) {
            q += strlen("unknown config key '");
            size_t n = strcspn(q, "'");
            if (n < sizeof key) snprintf(key, sizeof key, "%.*s", (int)n, q);
        }
        if (*key && at && timm_unknown(key)) vil_error("%s", at);
        else if (at && at - cap.msg >= 2 && at[-2] == ';') /* the two messages as they were */
            vil_error("%.*s", (int)(at - 2 - cap.msg), cap.msg), vil_error("%s", at);
        else vil_error("%s", cap.msg);
        return rc;
    }
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
    t->momentum = 0.9f;
    t->nesterov = 0;
    strcpy(t->sched, "cosine");
    t->decay_epochs = 90.0f;
    t->decay_rate = 0.1f;
    strcpy(t->decay_milestones, "90,180,270");
    t->sched_const_epochs = 0.0f;
    t->model_ema_warmup = 0;
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
    t->canvas = 0;
    strcpy(t->canvas_bg, "zero");
    t->crop_pct = VIL_RECIPE_CROP_PCT;
    t->seed = 0;
    t->workers = VIL_RECIPE_WORKERS;
    t->max_pixels = VIL_IMAGE_DEFAULT_MAX_PIXELS;
    strcpy(t->allreduce, "overlap");
    t->bucket_mb = 1.0f;
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
    strcpy(t->init_state_fit, "element");
    t->init_state_fit_noise = 1;
    t->init_state_fit_momentum = 0.99f;
    t->init_state_fit_drop = 0.0f;
    vil_keys_resolve(&vil_train_keys, t);
}

VilOptimHyper vil_train_config_hyper(const VilTrainConfig *t, float lr) {
    return (VilOptimHyper){.lr = lr, .beta1 = t->beta1, .beta2 = t->beta2, .eps = t->adam_eps,
                           .wd = t->weight_decay, .momentum = t->momentum, .nesterov = t->nesterov};
}

int vil_train_config_finalize(VilTrainConfig *t) {
#define NEED(cond, ...)                                                                   \
    if (!(cond)) {                                                                        \
        vil_error("config: " __VA_ARGS__);                                                \
        return VIL_EUSAGE;                                                                \
    }
#define PROB(f) NEED(t->f >= 0.0f && t->f <= 1.0f, #f " must be in [0, 1] (got %g)", t->f)
    /* the choice keys, from their text (which a caller may have written directly) */
    const VilKey *unresolved = vil_keys_resolve(&vil_train_keys, t);
    NEED(t->epochs >= 1, "epochs must be >= 1");
    char optims[256];
    NEED(t->optim != NULL, "optimizer must be one of: %s (got '%s')",
         vil_optim_names(optims, sizeof optims), t->optimizer);
    NEED(t->nesterov == 0 || t->momentum > 0.0f, "nesterov = 1 needs momentum > 0 (torch.optim.SGD)");
    NEED((int)t->sched_kind >= 0, "sched must be cosine, step, multistep or const_cosine (got '%s')",
         t->sched);
    NEED(vil_milestones_parse(t->decay_milestones, NULL, 0) >= 0,
         "decay_milestones must be increasing epochs >= 0, comma-separated (got '%s')", t->decay_milestones);
    NEED(t->sched_const_epochs <= t->epochs, "sched_const_epochs must be in [0, epochs = %d] (got %g)",
         t->epochs, t->sched_const_epochs);
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
    NEED((int)t->decode_kind >= 0, "decode must be 'fast' or 'exact' (got '%s')", t->decode);
    NEED((int)t->canvas_bg_kind >= 0, "canvas_bg must be 'zero' or 'noise' (got '%s')", t->canvas_bg);
    /* the canvas keeps the item's scale: a crop before it, or an evaluation resize after it,
     * would change the scale the run is meant to hold fixed */
    NEED(t->canvas == 0 || t->scale_min == 1.0f,
         "canvas = %d places the whole item in place of RandomResizedCrop: set scale_min = 1 (got %g)",
         t->canvas, t->scale_min);
    NEED(t->canvas == 0 || t->crop_pct == 1.0f,
         "canvas = %d needs crop_pct = 1 (got %g): the evaluation of a canvas model must feed canvases as "
         "they are, without the resize to img_size / crop_pct that would change the item's scale",
         t->canvas, t->crop_pct);
    NEED((int)t->allreduce_kind >= 0, "allreduce must be 'overlap' or 'end' (got '%s')", t->allreduce);
    NEED(t->workers >= 1 && t->workers <= 256, "workers must be in 1..256");
    NEED(t->log_every >= 1, "log_every must be >= 1");
    NEED((int)t->init_state_kind >= 0, "init_state must be zero, noise, fitted or passing (got '%s')",
         t->init_state);
    NEED(t->init_state_sigma >= 0.0f, "init_state_sigma must be >= 0 (got %g)", t->init_state_sigma);
    PROB(init_state_drop);
    NEED((int)t->init_state_fit_kind >= 0, "init_state_fit must be element or scalar (got '%s')", t->init_state_fit);
    NEED(t->init_state_fit_noise == 0 || t->init_state_fit_noise == 1, "init_state_fit_noise must be 0 or 1 (got %d)",
         t->init_state_fit_noise);
    NEED(t->init_state_fit_momentum >= 0.0f && t->init_state_fit_momentum < 1.0f,
         "init_state_fit_momentum must be in [0, 1) (got %g)", t->init_state_fit_momentum);
    PROB(init_state_fit_drop);
    /* the fit's keys say nothing to another intervention: set there, they are a mistake */
    NEED(t->init_state_kind == VIL_INIT_FITTED ||
             (t->init_state_fit_kind == VIL_INIT_FIT_ELEMENT && t->init_state_fit_noise == 1 &&
              t->init_state_fit_momentum == 0.99f && t->init_state_fit_drop == 0.0f),
         "init_state_fit, init_state_fit_noise, init_state_fit_momentum and init_state_fit_drop apply to "
         "init_state = fitted (got init_state = %s): leave them at their defaults", t->init_state);
    NEED(t->batch <= VIL_MAX_BATCH && t->eval_batch <= VIL_MAX_BATCH, "batch and eval_batch must be at most %d", VIL_MAX_BATCH);
    char names[256];
    /* a choice key without its own message above */
    NEED(!unresolved, "%s must be %s (got '%s')", unresolved->name,
         vil_choice_names(unresolved->choice, names, sizeof names), (const char *)t + unresolved->offset);
#undef PROB
#undef NEED
    return 0;
}

/* text wrapped at 96 columns, each line indented */
static void print_wrapped(FILE *f, const char *text, int indent) {
    const int width = 96 - indent;
    while (*text) {
        int n = (int)strlen(text);
        if (n > width) {
            n = width;
            while (n > 0 && text[n] != ' ') n--;
            if (n == 0) n = width;
        }
        fprintf(f, "%*s%.*s\n", indent, "", n, text);
        text += n;
        while (*text == ' ') text++;
    }
}

static void list_table(FILE *f, const VilKeyTable *t, const void *defaults) {
    for (int i = 0; i < t->n; i++) {
        const VilKey *k = &t->keys[i];
        const char *p = (const char *)defaults + k->offset;
        char def[64], range[64], timm[128] = "";
        if (k->type == VIL_KEY_INT) {
            snprintf(def, sizeof def, "%d", *(const int *)p);
            snprintf(range, sizeof range, "integer %.0f..%.0f", k->lo, k->hi);
        } else if (k->type == VIL_KEY_FLOAT) {
            vil_fmt_float(def, sizeof def, *(const float *)p);
            snprintf(range, sizeof range, "number %g..%g", k->lo, k->hi);
        } else {
            snprintf(def, sizeof def, "%s", p);
            snprintf(range, sizeof range, "text");
        }
        size_t len = 0;
        for (int j = 0; j < vil_timm_flag_count; j++) {
            const VilTimmFlag *tf = &vil_timm_flags[j];
            if (!tf->key || strcmp(tf->key, k->name) != 0) continue;
            len += (size_t)snprintf(timm + len, sizeof timm - len, "%s%s", len ? ", " : "; timm: ", tf->flag);
            if (len >= sizeof timm) break;
        }
        fprintf(f, "  %s = %s  (%s%s)\n", k->name, def, range, timm);
        print_wrapped(f, k->help, 6);
    }
}

void vil_train_config_list_keys(FILE *f) {
    VilConfig c;
    VilTrainConfig t;
    vil_config_default(&c);
    vil_train_config_default(&t);
    fprintf(f, "The keys of a cfg file (\"key = value\" lines) and of --set key=value, with their "
               "defaults.\n\nmodel keys:\n");
    list_table(f, &vil_model_keys, &c);
    fprintf(f, "\ntraining keys:\n");
    list_table(f, &vil_train_keys, &t);
    fprintf(f, "\ntimm's flags (vil train; vil bench where it has the key):\n");
    for (int i = 0; i < vil_timm_flag_count; i++) {
        const VilTimmFlag *tf = &vil_timm_flags[i];
        char flags[64], what[400];
        snprintf(flags, sizeof flags, "%s%s%s", tf->alt ? tf->alt : "", tf->alt ? ", " : "", tf->flag);
        if (tf->conv == VIL_TIMM_HINT) snprintf(what, sizeof what, "no such flag: %s", tf->note);
        else if (tf->conv == VIL_TIMM_AA) snprintf(what, sizeof what, "%s", tf->note);
        else snprintf(what, sizeof what, "%s%s%s", tf->key, tf->note ? ": " : "", tf->note ? tf->note : "");
        fprintf(f, "  %-22s %s\n", flags, what);
    }
}
