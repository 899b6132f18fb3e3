/* schedule.c: the learning-rate schedule of recipe.md (linear scaling, linear warmup, cosine
 * decay, evaluated per step) and the weight EMA, both backend-neutral. */
#include <math.h>

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

/* The backend table has no axpby, so the EMA borrows adamw_update, whose first moment is
 * exactly an EMA: m = beta1 * m + (1 - beta1) * g. With m = ema, g = params, beta1 = decay it
 * computes the EMA in float32 on whatever backend holds the weights, with no host copy. The
 * other outputs go to scratch: beta2 = 0 keeps v = g^2 finite, lr = 0 and wd = 0 leave the
 * "parameter" (scratch) unchanged, eps = 1 keeps the discarded quotient small. A dedicated
 * ema_update op in VilBackend would save the scratch buffer and its traffic. */
void vil_ema_update(const VilBackend *be, float *ema, const float *params, float *scratch,
                    size_t n, float decay) {
    be->adamw_update(scratch, NULL, params, ema, scratch, NULL, n, 0.0f, decay, 0.0f, 1.0f, 0.0f, 1);
}
