/* init_state.c: the ops of the initial-state interventions (backend.h: VilStateInit,
 * VilStateMoments, VilStateFit; doc/recipe.md "Initial states"), the CPU reference of
 * cuda/init_state.cu. */
#include <math.h>
#include <string.h>

#include "init_state.h"
#include "ops_cpu.h"

void state_init(const VilStateInit *a) {
    const int S = a->S, g = a->group > 1 ? a->group : 1;
#pragma omp parallel for
    for (int b = 0; b < a->B; b++) {
        uint64_t key = vil_state_key(a->seed, (uint64_t)(a->first + b));
        float *h = a->h0 + (size_t)b * S;
        if (a->drop > 0.0f && vil_state_uniform(key, VIL_STATE_DROP_DRAW) < a->drop) {
            memset(h, 0, (size_t)S * sizeof(float));
            continue;
        }
        if (a->prev) {
            memcpy(h, a->prev + (size_t)b * S, (size_t)S * sizeof(float));
            continue;
        }
        for (int i = 0; i < S; i++) {
            int k = i / g;
            if (a->mean_only && a->mean) {
                h[i] = a->mean[k];
                continue;
            }
            float sd = a->var ? sqrtf(a->var[k]) : a->sigma;
            h[i] = (a->mean ? a->mean[k] : 0.0f) + sd * vil_state_normal(key, (uint64_t)i);
        }
    }
}

void state_moments(const VilStateMoments *a) {
    const int S = a->S;
#pragma omp parallel for
    for (int i = 0; i < S; i++) {
        float s = 0.0f, q = 0.0f;
        for (int b = 0; b < a->B; b++) {
            float x = a->hT[(size_t)b * S + i];
            s += x, q += x * x;
        }
        a->sum[i] = s, a->sq[i] = q;
    }
}

/* one statistic's update from the batch's mean bm and variance bv */
static void fit_one(float *mean, float *var, float bm, float bv, float keep) {
    *mean = keep * *mean + (1.0f - keep) * bm;
    *var = keep * *var + (1.0f - keep) * bv;
}

void state_fit(const VilStateFit *a) {
    const float keep = a->keep;
    if (a->group > 1) { /* a statistic per group: its count x group values, summed in double */
        const size_t g = a->group, k_n = a->n / g;
        const double inv = 1.0 / ((double)a->count * (double)g);
#pragma omp parallel for
        for (size_t k = 0; k < k_n; k++) {
            double s = 0.0, q = 0.0;
            for (size_t t = 0; t < g; t++) s += a->sum[k * g + t], q += a->sq[k * g + t];
            double bm = s * inv, bv = fmax(q * inv - bm * bm, 0.0);
            fit_one(&a->mean[k], &a->var[k], (float)bm, (float)bv, keep);
        }
        return;
    }
    const float inv = 1.0f / a->count;
#pragma omp parallel for
    for (size_t i = 0; i < a->n; i++) {
        float bm = a->sum[i] * inv, bv = fmaxf(a->sq[i] * inv - bm * bm, 0.0f);
        fit_one(&a->mean[i], &a->var[i], bm, bv, keep);
    }
}
