/* optimizer.c: the optimizers' updates (their formulas in backend.h): AdamW with bias
 * correction and decoupled weight decay, as torch.optim.AdamW: p -= lr * (wd * p + m_hat /
 * (sqrt(v_hat) + eps)), or Adam's L2 decay (torch.optim.Adam: g + wd * p into the moments); SGD
 * with momentum, as torch.optim.SGD; timm's Lamb. One call updates
 * every parameter tensor of the model (they are contiguous); decay[i] = 0 exempts element i from
 * weight decay (1-D tensors: biases, norms, D; pos_embed, cls_token: doc/models.md#weight-decay),
 * decay = NULL decays all. */
#include <math.h>

#include "ops_cpu.h"

void adamw_update(const VilAdamW *args) {
    float *p = args->p, *m = args->m, *v = args->v;
    const float *g = args->g;
    const unsigned char *decay = args->decay;
    size_t n = args->n;
    const VilOptimHyper *h = args->h;
    float lr = h->lr, beta1 = h->beta1, beta2 = h->beta2, eps = h->eps, wd = h->wd;
    int step = args->step, l2 = h->l2;
    float bc1 = 1.0f - powf(beta1, (float)step), bc2 = 1.0f - powf(beta2, (float)step);
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float wdi = (!decay || decay[i]) ? wd : 0.0f;
        /* Adam: the decay in the gradient; AdamW: in the update (gi, wdu) */
        float gi = l2 ? g[i] + wdi * p[i] : g[i], wdu = l2 ? 0.0f : wdi;
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * (wdu * p[i] + (mi / bc1) / (sqrtf(vi / bc2) + eps));
    }
}

void sgd_update(const VilSgd *args) {
    float *p = args->p, *buf = args->buf;
    const float *g = args->g;
    const unsigned char *decay = args->decay;
    size_t n = args->n;
    const VilOptimHyper *h = args->h;
    float lr = h->lr, mom = h->momentum, wd = h->wd;
    int nesterov = h->nesterov;
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float pi = p[i], wdi = (!decay || decay[i]) ? wd : 0.0f;
        float d = g[i] + wdi * pi;
        float b = mom * buf[i] + d;
        buf[i] = b;
        p[i] = pi - lr * (nesterov ? d + mom * b : b);
    }
}

/* Lamb's update of one element before the trust ratio: the same expression in both passes */
static inline float lamb_u(float m, float v, float p, float bc1, float sbc2, float eps, float wd) {
    return (m / bc1) / (sqrtf(v) / sbc2 + eps) + wd * p;
}

/* per tensor: the moments and the two norms in one pass, the update in a second; the tensors in
 * parallel, each summed in order (the same bits for any thread count) */
void lamb_update(const VilLamb *args) {
    float *p = args->p, *m = args->m, *v = args->v;
    const float *g = args->g;
    const unsigned char *decay = args->decay;
    VilSpan whole = {0, args->n};
    const VilSpan *spans = args->spans ? args->spans : &whole;
    const VilOptimHyper *h = args->h;
    int n_spans = args->spans ? args->n_spans : 1, clip = h->trust_clip;
    float lr = h->lr, beta1 = h->beta1, beta2 = h->beta2, eps = h->eps, wd_all = h->wd;
    float bc1 = (float)(1.0 - pow(beta1, args->step)), sbc2 = (float)sqrt(1.0 - pow(beta2, args->step));
#pragma omp parallel for schedule(dynamic)
    for (int t = 0; t < n_spans; t++) {
        size_t a = spans[t].offset, e = a + spans[t].n;
        int decays = e > a && (!decay || decay[a]) && wd_all > 0.0f;
        float wd = decays ? wd_all : 0.0f;
        double sp = 0.0, su = 0.0;
        for (size_t i = a; i < e; i++) {
            float gi = g[i];
            float mi = beta1 * m[i] + (1.0f - beta1) * gi;
            float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
            m[i] = mi;
            v[i] = vi;
            float u = lamb_u(mi, vi, p[i], bc1, sbc2, eps, wd);
            sp += (double)p[i] * p[i];
            su += (double)u * u;
        }
        float r = 1.0f;
        if (decays && sp > 0.0 && su > 0.0) r = (float)(sqrt(sp) / sqrt(su));
        if (clip && r > 1.0f) r = 1.0f;
        for (size_t i = a; i < e; i++) p[i] -= lr * (r * lamb_u(m[i], v[i], p[i], bc1, sbc2, eps, wd));
    }
}

void grad_clip(const VilGradClip *args) {
    float *g = args->g, *norm = args->norm, max_norm = args->max_norm;
    size_t n = args->n;
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    *norm = (float)sqrt(s);
    /* from the float norm, as the CUDA twin (which reads it back from memory) */
    float c = (float)((double)max_norm / ((double)*norm + 1e-6));
    if (c >= 1.0f) return;
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) g[i] *= c;
}

/* the same arithmetic as AdamW's first moment (m = beta1 * m + (1 - beta1) * g), which the EMA
 * borrowed before it had an op of its own: checkpoints stay bit for bit what they were */
void ema_update(const VilEma *args) {
    float *ema = args->ema, decay = args->decay;
    const float *p = args->p;
    size_t n = args->n;
#pragma omp parallel for
    for (size_t i = 0; i < n; i++) {
        float gi = p[i];
        float mi = decay * ema[i] + (1.0f - decay) * gi;
        ema[i] = mi;
    }
}
