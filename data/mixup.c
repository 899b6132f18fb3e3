/* mixup.c: timm's batch-mode Mixup / CutMix (timm/data/mixup.py: _params_per_batch,
 * rand_bbox, cutmix_bbox_and_lam, mixup_target), with the draws made in timm's order from our
 * RNG so a batch's mixing is a pure function of its seed. */
#include "data/mixup.h"

#include <math.h>
#include <string.h>

#include "data/recipe.h"

void vil_mixup_config_default(VilMixupConfig *c, int num_classes) {
    c->mixup_alpha = VIL_RECIPE_MIXUP;
    c->cutmix_alpha = VIL_RECIPE_CUTMIX;
    c->prob = VIL_RECIPE_MIXUP_PROB;
    c->switch_prob = VIL_RECIPE_MIXUP_SWITCH_PROB;
    c->smoothing = VIL_RECIPE_SMOOTHING;
    c->correct_lam = 1;
    c->num_classes = num_classes;
}

void vil_mixup_config_none(VilMixupConfig *c, int num_classes, float smoothing) {
    vil_mixup_config_default(c, num_classes);
    c->mixup_alpha = c->cutmix_alpha = 0.0f;
    c->prob = 0.0f;
    c->smoothing = smoothing;
}

/* (0, 1): never exactly 0, so logs and powers stay finite */
static double uniform_open(VilRng *rng) {
    return ((double)(vil_rng_u64(rng) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* log of a Gamma(shape, 1) draw: Marsaglia & Tsang (2000); shape < 1 through
 * Gamma(shape + 1) * U^(1/shape), taken in logs: U^(1/shape) underflows to 0 for a small shape
 * (U = 0.5, shape 0.001: 2^-1000), and 0 / (0 + 0) made Beta NaN. */
static double rng_log_gamma(VilRng *rng, double shape) {
    if (shape < 1.0) {
        double lg = rng_log_gamma(rng, shape + 1.0);
        return lg + log(uniform_open(rng)) / shape;
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x, v;
        do {
            x = vil_rng_normal(rng);
            v = 1.0 + c * x;
        } while (v <= 0.0);
        v = v * v * v;
        double u = uniform_open(rng);
        if (u < 1.0 - 0.0331 * x * x * x * x) return log(d * v);
        if (log(u) < 0.5 * x * x + d * (1.0 - v + log(v))) return log(d * v);
    }
}

/* X / (X + Y) = 1 / (1 + Y/X) from the logs: finite in [0, 1] for any finite logs (exp of a
 * large difference is inf, and 1 / inf is 0) */
double vil_rng_beta(VilRng *rng, double a, double b) {
    double lx = rng_log_gamma(rng, a), ly = rng_log_gamma(rng, b);
    return 1.0 / (1.0 + exp(ly - lx));
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

void vil_mixup_draw(const VilMixupConfig *c, VilRng *rng, int h, int w, VilMixupParams *p) {
    memset(p, 0, sizeof *p);
    p->lam = 1.0f;
    int mix = c->mixup_alpha > 0.0f, cut = c->cutmix_alpha > 0.0f;
    if (!(mix || cut) || !(vil_rng_uniform(rng) < c->prob)) return;
    if (mix && cut) {
        p->cutmix = vil_rng_uniform(rng) < c->switch_prob;
        p->lam = (float)(p->cutmix ? vil_rng_beta(rng, c->cutmix_alpha, c->cutmix_alpha)
                                   : vil_rng_beta(rng, c->mixup_alpha, c->mixup_alpha));
    } else if (mix) {
        p->lam = (float)vil_rng_beta(rng, c->mixup_alpha, c->mixup_alpha);
    } else {
        p->cutmix = 1;
        p->lam = (float)vil_rng_beta(rng, c->cutmix_alpha, c->cutmix_alpha);
    }
    if (!p->cutmix || p->lam == 1.0f) return;
    /* rand_bbox: a box of side ratio sqrt(1 - lam) centred anywhere in the image, clipped;
     * timm draws cy before cx */
    double ratio = sqrt(1.0 - (double)p->lam);
    int cut_h = (int)(h * ratio), cut_w = (int)(w * ratio);
    int cy = (int)vil_rng_below(rng, (uint32_t)h), cx = (int)vil_rng_below(rng, (uint32_t)w);
    p->yl = clampi(cy - cut_h / 2, 0, h);
    p->yh = clampi(cy + cut_h / 2, 0, h);
    p->xl = clampi(cx - cut_w / 2, 0, w);
    p->xh = clampi(cx + cut_w / 2, 0, w);
    if (c->correct_lam)
        p->lam = (float)(1.0 - (double)((p->yh - p->yl) * (p->xh - p->xl)) / ((double)h * w));
}

void vil_mixup_pair(const VilMixupParams *p, float *a, float *b, int ch, int h, int w) {
    if (a == b || p->lam == 1.0f) return;
    if (p->cutmix) {
        int bw = p->xh - p->xl;
        for (int c = 0; c < ch; c++)
            for (int y = p->yl; y < p->yh; y++) {
                float *ra = a + ((size_t)c * h + y) * w + p->xl;
                float *rb = b + ((size_t)c * h + y) * w + p->xl;
                for (int x = 0; x < bw; x++) {
                    float t = ra[x];
                    ra[x] = rb[x];
                    rb[x] = t;
                }
            }
        return;
    }
    const float lam = p->lam, mlam = 1.0f - p->lam;
    size_t n = (size_t)ch * h * w;
    for (size_t k = 0; k < n; k++) {
        float va = a[k], vb = b[k];
        a[k] = va * lam + vb * mlam;
        b[k] = vb * lam + va * mlam;
    }
}

void vil_mixup_target_row(float *row, int y, int y2, float lam, float smoothing, int num_classes) {
    const float off = smoothing / (float)num_classes, on = 1.0f - smoothing + off;
    for (int k = 0; k < num_classes; k++) row[k] = off;
    /* the same arithmetic as y1 * lam + y2 * (1 - lam) on the two touched entries */
    if (y >= 0 && y < num_classes) row[y] = on * lam + off * (1.0f - lam);
    if (y2 >= 0 && y2 < num_classes) {
        if (y2 == y) row[y2] = on * lam + on * (1.0f - lam);
        else row[y2] = off * lam + on * (1.0f - lam);
    }
}

void vil_mixup_batch(const VilMixupConfig *c, VilRng *rng, float *x, const int *labels,
                     float *targets, int n, int ch, int h, int w, VilMixupParams *out) {
    VilMixupParams p;
    vil_mixup_draw(c, rng, h, w, &p);
    size_t img = (size_t)ch * h * w;
    for (int i = 0; i < (n + 1) / 2; i++) {
        int j = n - 1 - i;
        vil_mixup_pair(&p, x + (size_t)i * img, x + (size_t)j * img, ch, h, w);
        vil_mixup_target_row(targets + (size_t)i * c->num_classes, labels[i], labels[j], p.lam,
                             c->smoothing, c->num_classes);
        if (j != i)
            vil_mixup_target_row(targets + (size_t)j * c->num_classes, labels[j], labels[i],
                                 p.lam, c->smoothing, c->num_classes);
    }
    if (out) *out = p;
}
