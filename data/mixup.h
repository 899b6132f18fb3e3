/* mixup.h: batch-level Mixup / CutMix with label smoothing, producing soft targets, as timm's
 * Mixup(mode='batch'): one lambda per batch, sample i mixed with sample n-1-i ("flip"), the
 * CutMix box from rand_bbox with lambda corrected to the box's true area. */
#ifndef VIL_MIXUP_H
#define VIL_MIXUP_H

#include "vil/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float mixup_alpha;  /* Beta(a, a) for Mixup; 0 disables Mixup */
    float cutmix_alpha; /* Beta(a, a) for CutMix; 0 disables CutMix */
    float prob;         /* probability that a batch is mixed at all */
    float switch_prob;  /* with both enabled: probability of CutMix rather than Mixup */
    float smoothing;    /* label smoothing of the targets */
    int correct_lam;    /* lambda = 1 - box area / image area after clipping (timm default) */
    int num_classes;
} VilMixupConfig;

/* One batch's draw. lam = 1: the images are left as they are (targets still smoothed). */
typedef struct {
    float lam;
    int cutmix;         /* 1: paste the box [yl, yh) x [xl, xh) from the partner */
    int yl, yh, xl, xh;
} VilMixupParams;

/* The DeiT recipe: mixup 0.8, cutmix 1.0, prob 1.0, switch 0.5, smoothing 0.1. */
void vil_mixup_config_default(VilMixupConfig *c, int num_classes);
/* Plain label smoothing, no mixing (smoothing as given). */
void vil_mixup_config_none(VilMixupConfig *c, int num_classes, float smoothing);

/* Draw a batch's parameters for h x w images (timm's _params_per_batch, then
 * cutmix_bbox_and_lam). Same rng state -> same parameters. */
void vil_mixup_draw(const VilMixupConfig *c, VilRng *rng, int h, int w, VilMixupParams *p);

/* Mix the pair (i, j = n-1-i) in place: a becomes lam*a + (1-lam)*b and b becomes
 * lam*b + (1-lam)*a, both from the originals (or the box is swapped for CutMix). a == b is
 * the middle of an odd batch and stays as it is. a, b: (ch, h, w). */
void vil_mixup_pair(const VilMixupParams *p, float *a, float *b, int ch, int h, int w);

/* Soft target row of a sample with label y mixed with a partner of label y2:
 * lam * onehot(y) + (1 - lam) * onehot(y2), each one-hot smoothed to
 * off = smoothing / classes, on = 1 - smoothing + off. row: (num_classes). */
void vil_mixup_target_row(float *row, int y, int y2, float lam, float smoothing, int num_classes);

/* The whole batch at once (the loader mixes pair by pair instead, as samples complete):
 * x (n, ch, h, w) mixed in place, targets (n, num_classes) written from labels (n).
 * Returns the parameters used in *p (may be NULL). */
void vil_mixup_batch(const VilMixupConfig *c, VilRng *rng, float *x, const int *labels,
                     float *targets, int n, int ch, int h, int w, VilMixupParams *p);

/* Beta(a, b) sample (from two gamma draws; a, b > 0). */
double vil_rng_beta(VilRng *rng, double a, double b);

#ifdef __cplusplus
}
#endif
#endif
