/* schedule.c: the learning-rate schedules of doc/recipe.md (linear scaling, a linear warmup per
 * step, then cosine decay per step, timm's step and multistep decays per epoch, or the peak held
 * then cosine) and the EMA decay's warmup (timm's ModelEmaV3). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "train/train.h"

double vil_peak_lr(double base_lr, long global_batch) { return base_lr * (double)global_batch / 512.0; }

double vil_lr_at(long step, long total_steps, long warmup_steps, double peak, double warmup_lr,
                 double min_lr) {
    if (step < 0) step = 0;
    if (step < warmup_steps) return warmup_lr + (peak - warmup_lr) * (double)step / (double)warmup_steps;
    long span = total_steps - warmup_steps;
    if (span <= 0) return peak;
    double t = (double)(step - warmup_steps) / (double)span;
    if (t > 1.0) t = 1.0;
    return min_lr + 0.5 * (peak - min_lr) * (1.0 + cos(M_PI * t));
}

int vil_milestones_parse(const char *s, long *out, int max) {
    int n = 0;
    long prev = -1;
    const char *p = s;
    if (!*p) return 0;
    for (;;) {
        if (*p < '0' || *p > '9') return -1; /* no sign, no space, no empty item */
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || v <= prev || v > 1000000) return -1;
        if (out && n < max) out[n] = v;
        n++;
        prev = v;
        if (*end == 0) return n;
        if (*end != ',') return -1;
        p = end + 1;
    }
}

/* Python's a // b for a >= 0, b > 0 (timm's StepLRScheduler: t // decay_t), which is not
 * floor(a / b) when the division rounds up to an integer: 3 // 0.3 is 9 */
static double py_floordiv(double a, double b) { return round((a - fmod(a, b)) / b); }

/* the decimal a float key was typed as (0.1f is 0.100000001: Python's 0.1 is what timm divides
 * by) */
static double typed(float x) {
    char b[32];
    snprintf(b, sizeof b, "%.7g", (double)x);
    return strtod(b, NULL);
}

double vil_sched_lr(const VilTrainConfig *t, long step, long total_steps, long warmup_steps,
                    long steps_per_epoch, double peak) {
    if (step < 0) step = 0;
    VilSched kind = t->sched_kind;
    if (kind == VIL_SCHED_COSINE || step < warmup_steps)
        return vil_lr_at(step, total_steps, warmup_steps, peak, t->warmup_lr, t->min_lr);
    /* timm counts the decays from epoch 0 (its warmup_prefix off): the warmup covers the first
     * ones; the epoch of a step is whole, as timm's per-epoch update */
    long epoch = step / (steps_per_epoch > 0 ? steps_per_epoch : 1);
    if (kind == VIL_SCHED_STEP) return peak * pow(typed(t->decay_rate), py_floordiv((double)epoch, typed(t->decay_epochs)));
    if (kind == VIL_SCHED_MULTISTEP) {
        long ms[64];
        int n = vil_milestones_parse(t->decay_milestones, ms, 64), k = 0;
        while (k < n && k < 64 && ms[k] <= epoch) k++;
        return peak * pow(typed(t->decay_rate), k);
    }
    long hold = lround((double)t->sched_const_epochs * (double)steps_per_epoch);
    if (hold < warmup_steps) hold = warmup_steps;
    if (step < hold) return peak;
    return vil_lr_at(step - hold, total_steps - hold, 0, peak, peak, t->min_lr);
}

double vil_ema_decay_at(double decay, int warmup, long update) {
    if (!warmup) return decay;
    long s = update - 1;
    if (s <= 0) return 0.0;
    double d = 1.0 - pow(1.0 + (double)s, -2.0 / 3.0);
    return d < decay ? d : decay;
}

const char *vil_sched_describe(const VilTrainConfig *t, char *buf, size_t n) {
    switch (t->sched_kind) {
    case VIL_SCHED_STEP:
        snprintf(buf, n, "then x %g every %g epochs (step)", t->decay_rate, t->decay_epochs);
        break;
    case VIL_SCHED_MULTISTEP:
        snprintf(buf, n, "then x %g at epochs %s (multistep)", t->decay_rate,
                 t->decay_milestones[0] ? t->decay_milestones : "(none)");
        break;
    case VIL_SCHED_CONST_COSINE:
        snprintf(buf, n, "the peak until epoch %g, then cosine to %g", t->sched_const_epochs, t->min_lr);
        break;
    default:
        snprintf(buf, n, "cosine to %g", t->min_lr);
    }
    return buf;
}

const char *vil_optim_describe(const VilTrainConfig *t, char *buf, size_t n) {
    VilOptimHyper h = vil_train_config_hyper(t, 0.0f);
    t->optim->describe(&h, buf, n);
    return buf;
}
