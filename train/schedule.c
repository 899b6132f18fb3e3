/* schedule.c: the learning-rate schedule of doc/recipe.md (linear scaling, linear warmup,
 * cosine decay, evaluated per step). */
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
