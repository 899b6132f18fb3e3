/* init_state.c: the ops of the initial-state interventions (backend.h: VilStateInit,
 * VilStateMoments, VilStateFit; doc/recipe.md "Initial states"), the CPU reference of
 * cuda/init_state.cu. */
#include <math.h>
#include <string.h>

#include "init_state.h"
#include "ops_cpu.h"

void state_init(const VilStateInit *a) {
    const int S = a->S;
#pragma omp parallel for
    for (int b = 0; b < a->B; b++) {
        uint64_t key = vil_state_key(a->seed, (uint64_t)(a->first + b));
        float *h = a->h0 + (size_t)b * S;
        if (a->prev) {
            if (vil_state_uniform(key, VIL_STATE_DROP_DRAW) < a->drop) memset(h, 0, (size_t)S * sizeof(float));
            else memcpy(h, a->prev + (size_t)b * S, (size_t)S * sizeof(float));
            continue;
        }
        for (int i = 0; i < S; i++) {
            float sd = a->var ? sqrtf(a->var[i]) : a->sigma;
            h[i] = (a->mean ? a->mean[i] : 0.0f) + sd * vil_state_normal(key, (uint64_t)i);
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

void state_fit(const VilStateFit *a) {
    const float keep = a->keep, inv = 1.0f / a->count;
#pragma omp parallel for
    for (size_t i = 0; i < a->n; i++) {
        float bm = a->sum[i] * inv, bv = fmaxf(a->sq[i] * inv - bm * bm, 0.0f);
        a->mean[i] = keep * a->mean[i] + (1.0f - keep) * bm;
        a->var[i] = keep * a->var[i] + (1.0f - keep) * bv;
    }
}
