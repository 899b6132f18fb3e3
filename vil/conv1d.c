/* conv1d.c: the depthwise causal conv1d of width K along the tokens, fused with SiLU, both
 * directions or (causal) direction 0 alone (the ops of backend.h), each direction by a
 * one-direction pass below. Direction 0 reads x_{t-K+1..t}, the carried context (ctx) before
 * token 0 where one is given, else zeros; direction 1 (reverse) is the same causal filter run on
 * the reversed sequence, so it reads x_{t..t+K-1} with the taps mirrored. The pre-activation is
 * recomputed in the backward pass instead of being stored. The taps are transposed to (K, E)
 * first so every inner loop runs over contiguous channels. dx is overwritten (direction 1 adds
 * onto direction 0's); dw, db accumulate. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "vecmath.h"
#include "ops_cpu.h"

/* tap j of the filter (j = K-1 is the current token) reads token t - (K-1-j) forward,
 * t + (K-1-j) reversed */
static inline int tap_pos(int t, int j, int K, int reverse) {
    return reverse ? t + (K - 1 - j) : t - (K - 1 - j);
}

static float *transpose_taps(const float *w, int E, int K) {
    float *wt = vil_malloc((size_t)K * E * sizeof(float));
    for (int e = 0; e < E; e++)
        for (int j = 0; j < K; j++) wt[(size_t)j * E + e] = w[(size_t)e * K + j];
    return wt;
}

/* The input row of token s of sample bi: x's inside [0, L), the carried context's before token 0
 * (ctx: (B, K-1, E), rows -(K-1) .. -1), NULL (zeros) elsewhere */
static inline const float *in_row(const float *x, const float *ctx, int bi, int s, int L, int E, int K,
                                  int ldx) {
    if (s >= 0 && s < L) return x + ((size_t)bi * L + s) * ldx;
    if (s < 0 && ctx) return ctx + ((size_t)bi * (K - 1) + (K - 1) + s) * E;
    return NULL;
}

/* pre (E) = b + sum_j w_j x_{tap j} for token t of sample bi */
static inline void conv_pre(float *pre, const float *x, const float *ctx, const float *wt, const float *b,
                            int bi, int t, int L, int E, int K, int ldx, int reverse) {
    memcpy(pre, b, (size_t)E * sizeof(float));
    for (int j = 0; j < K; j++) {
        const float *xr = in_row(x, ctx, bi, tap_pos(t, j, K, reverse), L, E, K, ldx), *wj = wt + (size_t)j * E;
        if (!xr) continue;
        for (int e = 0; e < E; e++) pre[e] += wj[e] * xr[e];
    }
}

/* one direction's forward (ctx: the carried context or NULL) */
static void conv_dir_forward(float *u /* (B, L, E) */, const float *x /* (B, L, ldx) */,
                             const float *ctx /* (B, K-1, E) */, const float *w /* (E, K) */,
                             const float *b /* (E) */, int B, int L, int E, int K, int ldx, int reverse) {
    float *wt = transpose_taps(w, E, K);
#pragma omp parallel for collapse(2)
    for (int bi = 0; bi < B; bi++)
        for (int t = 0; t < L; t++) {
            float *ur = u + ((size_t)bi * L + t) * E;
            conv_pre(ur, x, ctx, wt, b, bi, t, L, E, K, ldx, reverse);
            for (int e = 0; e < E; e++) ur[e] = ur[e] / (1.0f + expf(-ur[e]));
        }
    free(wt);
}

/* one direction's backward: dx overwritten, or added to with accumulate_dx; ctx (or NULL) a
 * constant: dw sees it, nothing flows into it */
static void conv_dir_backward(float *dx /* (B, L, ldx) */, float *dw /* (E, K) */, float *db /* (E) */,
                              const float *du /* (B, L, E) */, const float *x /* (B, L, ldx) */,
                              const float *ctx /* (B, K-1, E) */, const float *w /* (E, K) */,
                              const float *b /* (E) */, int B, int L, int E, int K, int ldx, int reverse,
                              int accumulate_dx) {
    size_t BL = (size_t)B * L;
    float *wt = transpose_taps(w, E, K);
    /* dpre = du * SiLU'(pre), with pre recomputed */
    float *dpre = vil_malloc(BL * E * sizeof(float));
#pragma omp parallel for collapse(2)
    for (int bi = 0; bi < B; bi++)
        for (int t = 0; t < L; t++) {
            size_t r = (size_t)bi * L + t;
            float *g = dpre + r * E;
            conv_pre(g, x, ctx, wt, b, bi, t, L, E, K, ldx, reverse);
            for (int e = 0; e < E; e++) {
                float p = g[e], sg = 1.0f / (1.0f + expf(-p));
                g[e] = du[r * E + e] * sg * (1.0f + p * (1.0f - sg));
            }
        }
    /* dx[s] = sum over the outputs t that read s; gathered per s so no two threads write one */
#pragma omp parallel for collapse(2)
    for (int bi = 0; bi < B; bi++)
        for (int s = 0; s < L; s++) {
            float *dxr = dx + ((size_t)bi * L + s) * ldx;
            if (!accumulate_dx) memset(dxr, 0, (size_t)E * sizeof(float));
            for (int j = 0; j < K; j++) {
                int t = reverse ? s - (K - 1 - j) : s + (K - 1 - j); /* output whose tap j reads s */
                if (t < 0 || t >= L) continue;
                const float *g = dpre + ((size_t)bi * L + t) * E, *wj = wt + (size_t)j * E;
                for (int e = 0; e < E; e++) dxr[e] += wj[e] * g[e];
            }
        }
    /* dw, db: per-sample partial sums (K + 1 rows of E), reduced in sample order */
    size_t pw = (size_t)(K + 1) * E;
    float *part = vil_calloc((size_t)B * pw, sizeof(float));
#pragma omp parallel for
    for (int bi = 0; bi < B; bi++) {
        float *pb = part + (size_t)bi * pw;
        for (int t = 0; t < L; t++) {
            const float *g = dpre + ((size_t)bi * L + t) * E;
            float *acc_b = pb + (size_t)K * E;
            for (int e = 0; e < E; e++) acc_b[e] += g[e];
            for (int j = 0; j < K; j++) {
                const float *xr = in_row(x, ctx, bi, tap_pos(t, j, K, reverse), L, E, K, ldx);
                if (!xr) continue;
                float *acc = pb + (size_t)j * E;
                for (int e = 0; e < E; e++) acc[e] += g[e] * xr[e];
            }
        }
    }
    for (int bi = 0; bi < B; bi++) {
        const float *pb = part + (size_t)bi * pw;
        for (int e = 0; e < E; e++) {
            for (int j = 0; j < K; j++) dw[(size_t)e * K + j] += pb[(size_t)j * E + e];
            db[e] += pb[(size_t)K * E + e];
        }
    }
    free(part);
    free(dpre);
    free(wt);
}

/* ctx_out (B, K-1, E) = inputs L-(K-1) .. L-1 of each sample (from ctx, or zeros, before token
 * 0). Row i reads row i + L >= i of ctx when ctx_out is ctx: read before it is written. */
static void conv_ctx_out(float *ctx_out, const float *x, const float *ctx, int B, int L, int E, int K, int ldx) {
    for (int bi = 0; bi < B; bi++)
        for (int i = 0; i < K - 1; i++) {
            float *dst = ctx_out + ((size_t)bi * (K - 1) + i) * E;
            const float *src = in_row(x, ctx, bi, L - (K - 1) + i, L, E, K, ldx);
            if (src) memmove(dst, src, (size_t)E * sizeof(float));
            else memset(dst, 0, (size_t)E * sizeof(float));
        }
}

void conv1d_silu_bidir_backward(const VilConvBidirBwd *args) {
    const float *ctx = args->causal ? args->ctx : NULL;
    for (int j = 0; j < (args->causal ? 1 : 2); j++)
        conv_dir_backward(args->dx, args->dw[j], args->db[j], args->du[j], args->x, ctx, args->w[j],
                          args->b[j], args->B, args->L, args->E, args->K, args->ldx, j, j);
}

void conv1d_silu_bidir_forward(const VilConvBidirFwd *args) {
    const float *ctx = args->causal ? args->ctx : NULL;
    for (int j = 0; j < (args->causal ? 1 : 2); j++)
        conv_dir_forward(args->u[j], args->x, ctx, args->w[j], args->b[j], args->B, args->L, args->E,
                         args->K, args->ldx, j);
    if (args->causal && args->ctx_out)
        conv_ctx_out(args->ctx_out, args->x, ctx, args->B, args->L, args->E, args->K, args->ldx);
}
