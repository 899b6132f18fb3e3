/* conv1d.c: the depthwise causal conv1d of width K along the tokens, fused with SiLU.
 * Direction 0 reads x_{t-K+1..t}; direction 1 (reverse) is the same causal filter run on the
 * reversed sequence, so it reads x_{t..t+K-1} with the taps mirrored. The pre-activation is
 * recomputed in the backward pass instead of being stored. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "ops_cpu.h"

/* tap j of the filter (j = K-1 is the current token) reads token t - (K-1-j) forward,
 * t + (K-1-j) reversed */
static inline int tap_pos(int t, int j, int K, int reverse) {
    return reverse ? t + (K - 1 - j) : t - (K - 1 - j);
}

static inline float silu(float v) { return v / (1.0f + expf(-v)); }

void conv1d_silu_forward(float *u, const float *x, const float *w, const float *b, int B, int L,
                         int E, int K, int ldx, int reverse) {
#pragma omp parallel for collapse(2)
    for (int bi = 0; bi < B; bi++)
        for (int t = 0; t < L; t++) {
            float *ur = u + ((size_t)bi * L + t) * E;
            for (int e = 0; e < E; e++) ur[e] = b[e];
            for (int j = 0; j < K; j++) {
                int s = tap_pos(t, j, K, reverse);
                if (s < 0 || s >= L) continue;
                const float *xr = x + ((size_t)bi * L + s) * ldx;
                for (int e = 0; e < E; e++) ur[e] += w[(size_t)e * K + j] * xr[e];
            }
            for (int e = 0; e < E; e++) ur[e] = silu(ur[e]);
        }
}

void conv1d_silu_backward(float *dx, float *dw, float *db, const float *du, const float *x,
                          const float *w, const float *b, int B, int L, int E, int K, int ldx,
                          int reverse, int accumulate_dx) {
    size_t BL = (size_t)B * L;
    /* dpre = du * SiLU'(pre), with pre recomputed */
    float *dpre = vil_malloc(BL * E * sizeof(float));
#pragma omp parallel for collapse(2)
    for (int bi = 0; bi < B; bi++)
        for (int t = 0; t < L; t++) {
            size_t r = (size_t)bi * L + t;
            for (int e = 0; e < E; e++) {
                float p = b[e];
                for (int j = 0; j < K; j++) {
                    int s = tap_pos(t, j, K, reverse);
                    if (s >= 0 && s < L) p += w[(size_t)e * K + j] * x[((size_t)bi * L + s) * ldx + e];
                }
                float sg = 1.0f / (1.0f + expf(-p));
                dpre[r * E + e] = du[r * E + e] * sg * (1.0f + p * (1.0f - sg));
            }
        }
    /* dx[s] = sum over the outputs t that read s; gathered per s so no two threads write one */
#pragma omp parallel for collapse(2)
    for (int bi = 0; bi < B; bi++)
        for (int s = 0; s < L; s++) {
            float *dxr = dx + ((size_t)bi * L + s) * ldx;
            if (!accumulate_dx) memset(dxr, 0, (size_t)E * sizeof(float));
            for (int j = 0; j < K; j++) {
                /* output t whose tap j reads s */
                int t = reverse ? s - (K - 1 - j) : s + (K - 1 - j);
                if (t < 0 || t >= L) continue;
                const float *g = dpre + ((size_t)bi * L + t) * E;
                for (int e = 0; e < E; e++) dxr[e] += w[(size_t)e * K + j] * g[e];
            }
        }
    /* dw, db: sums over (b, t), parallel over channels */
#pragma omp parallel for
    for (int e = 0; e < E; e++) {
        float accb = 0.0f;
        float accw[8] = {0};
        for (int bi = 0; bi < B; bi++)
            for (int t = 0; t < L; t++) {
                float g = dpre[((size_t)bi * L + t) * E + e];
                accb += g;
                for (int j = 0; j < K; j++) {
                    int s = tap_pos(t, j, K, reverse);
                    if (s >= 0 && s < L) accw[j] += g * x[((size_t)bi * L + s) * ldx + e];
                }
            }
        db[e] += accb;
        for (int j = 0; j < K; j++) dw[(size_t)e * K + j] += accw[j];
    }
    free(dpre);
}
