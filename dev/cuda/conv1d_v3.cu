/* conv1d.cu: the depthwise causal conv1d of width K (1 to 6) along the tokens fused with SiLU,
 * both directions by indexing (reverse = 1 runs the causal filter over the reversed token order).
 * One thread per (channel, sample, run of TC scan steps), all of its loads issued before any
 * arithmetic (the width K is a template argument, so the windows are registers). The
 * backward recomputes the pre-activation; dx overwrites unless accumulate_dx; dw, db accumulate
 * through per-(sample, run) partial sums reduced in a fixed order (deterministic). */
#include "cuda/cuda_common.cuh"
#include "cuda/ops_cuda.h"

#define CONV_TC 32 /* scan steps per thread; all of a thread's loads are issued up front */

__device__ __forceinline__ size_t conv_row(int b, int L, int s, int reverse) {
    return (size_t)b * L + (reverse ? L - 1 - s : s);
}

/* K is a template argument: every register index is a compile-time constant */
template <int K>
__global__ void __launch_bounds__(128) conv1d_silu_fwd_kernel(
    bf16 *__restrict__ u, const bf16 *__restrict__ x, const float *__restrict__ w,
    const float *__restrict__ bias, int L, int E, int ldx, int reverse) {
    constexpr int KM = K;
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= E) return;
    int b = blockIdx.z, s0 = blockIdx.y * CONV_TC;
    /* wr[KM-1-m] is the tap applied to the token m scan steps back */
    float wr[KM];
#pragma unroll
    for (int i = 0; i < KM; i++) {
        int m = KM - 1 - i;
        wr[i] = m < K ? w[(size_t)e * K + (K - 1 - m)] : 0.0f;
    }
    /* xv[k] = x at scan step s0 - (KM-1) + k */
    float xv[CONV_TC + KM - 1];
#pragma unroll
    for (int k = 0; k < CONV_TC + KM - 1; k++) {
        int s = s0 - (KM - 1) + k;
        xv[k] = (s >= 0 && s < L) ? bf2f(x[conv_row(b, L, s, reverse) * ldx + e]) : 0.0f;
    }
    float bb = bias[e];
#pragma unroll
    for (int k = 0; k < CONV_TC; k++) {
        if (s0 + k >= L) break;
        float pre = bb;
#pragma unroll
        for (int i = 0; i < KM; i++) pre = fmaf(wr[i], xv[k + i], pre);
        u[conv_row(b, L, s0 + k, reverse) * E + e] = f2bf(siluf(pre));
    }
}

/* part: (B * nrun, K + 1, E): per (sample, run) sums of dpre * x[tap] and of dpre */
template <int K>
__global__ void __launch_bounds__(128) conv1d_silu_bwd_kernel(
    bf16 *__restrict__ dx, float *__restrict__ part, const bf16 *__restrict__ du,
    const bf16 *__restrict__ x, const float *__restrict__ w, const float *__restrict__ bias, int L,
    int E, int ldx, int reverse, int accumulate_dx) {
    constexpr int KM = K;
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= E) return;
    int b = blockIdx.z, run = blockIdx.y, s0 = run * CONV_TC;
    /* wr as in the forward (wr[i] taps x at step s - (K-1-i)); wf[i] = w_{K-1-i}: the input
     * gradient dx[s] = sum_j w_j dpre[s + K-1-j] = sum_i wf[i] dpre[s + i] */
    float wr[KM], wf[KM];
#pragma unroll
    for (int i = 0; i < KM; i++) {
        int m = KM - 1 - i;
        wr[i] = m < K ? w[(size_t)e * K + (K - 1 - m)] : 0.0f;
        wf[i] = m < K ? w[(size_t)e * K + m] : 0.0f;
    }
    /* xv[k] = x at step s0 - (KM-1) + k, for the pre-activations of steps s0 .. s0+TC+KM-2;
     * gv[k] = du at step s0 + k */
    constexpr int NP = CONV_TC + KM - 1; /* pre-activations needed */
    float xv[NP + KM - 1], gv[NP], ov[CONV_TC];
#pragma unroll
    for (int k = 0; k < NP + KM - 1; k++) {
        int s = s0 - (KM - 1) + k;
        xv[k] = (s >= 0 && s < L) ? bf2f(x[conv_row(b, L, s, reverse) * ldx + e]) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < NP; k++) {
        int s = s0 + k;
        gv[k] = s < L ? bf2f(du[conv_row(b, L, s, reverse) * E + e]) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < CONV_TC; k++) {
        int s = s0 + k;
        ov[k] = (accumulate_dx && s < L) ? bf2f(dx[conv_row(b, L, s, reverse) * ldx + e]) : 0.0f;
    }
    float bb = bias[e], acc[KM], accb = 0.0f;
#pragma unroll
    for (int i = 0; i < KM; i++) acc[i] = 0.0f;
    /* dpre at steps s0 .. s0+NP-1 (zero past L: gv is zero there) */
    float dp[NP];
#pragma unroll
    for (int k = 0; k < NP; k++) {
        float pre = bb;
#pragma unroll
        for (int i = 0; i < KM; i++) pre = fmaf(wr[i], xv[k + i], pre);
        float sg = sigmoidf_fast(pre);
        dp[k] = gv[k] * sg * (1.0f + pre * (1.0f - sg));
        if (k < CONV_TC) { /* the run's own steps feed dw, db */
            accb += dp[k];
#pragma unroll
            for (int i = 0; i < KM; i++) acc[i] = fmaf(dp[k], xv[k + i], acc[i]);
        }
    }
#pragma unroll
    for (int k = 0; k < CONV_TC; k++) {
        int s = s0 + k;
        if (s >= L) break;
        float g = ov[k];
#pragma unroll
        for (int i = 0; i < KM; i++) g = fmaf(wf[i], dp[k + i], g);
        dx[conv_row(b, L, s, reverse) * ldx + e] = f2bf(g);
    }
    size_t prow = ((size_t)b * gridDim.y + run) * (K + 1);
#pragma unroll
    for (int i = 0; i < KM; i++) {
        int m = KM - 1 - i; /* acc[i] = sum dpre[s] x[s - m]: tap j = K-1-m */
        if (m < K) part[(prow + (K - 1 - m)) * E + e] = acc[i];
    }
    part[(prow + K) * E + e] = accb;
}

/* The dw/db partial rows are summed in two fixed-order levels, so that enough blocks run:
 * level 1: split `sp` of the rows, 8 row lanes per channel (8 loads in flight per lane), into
 * part2 (nsplit, K + 1, E); level 2: the splits in order, += into dw[e, j] (j < K) / db[e]. */
#define CONV_SPLITS 32
__global__ void conv1d_dw_split_kernel(float *__restrict__ part2, const float *__restrict__ part,
                                       int rows, int E, int K) {
    __shared__ float sacc[8][33];
    int e = blockIdx.x * 32 + threadIdx.x, j = blockIdx.y, sp = blockIdx.z;
    int per = (rows + CONV_SPLITS - 1) / CONV_SPLITS, ra = sp * per, rb = min(rows, ra + per);
    float s0 = 0.0f;
    if (e < E) {
        for (int r0 = ra + threadIdx.y; r0 < rb; r0 += 64) {
            float v[8];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                int r = r0 + 8 * k;
                v[k] = r < rb ? part[((size_t)r * (K + 1) + j) * E + e] : 0.0f;
            }
#pragma unroll
            for (int k = 0; k < 8; k++) s0 += v[k];
        }
    }
    sacc[threadIdx.y][threadIdx.x] = s0;
    __syncthreads();
    if (threadIdx.y == 0 && e < E) {
        float t = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) t += sacc[i][threadIdx.x];
        part2[((size_t)sp * (K + 1) + j) * E + e] = t;
    }
}

__global__ void conv1d_dw_final_kernel(float *__restrict__ dw, float *__restrict__ db,
                                       const float *__restrict__ part2, int E, int K) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= E * (K + 1)) return;
    int j = idx / E, e = idx - j * E;
    float v[CONV_SPLITS];
#pragma unroll
    for (int sp = 0; sp < CONV_SPLITS; sp++) v[sp] = part2[((size_t)sp * (K + 1) + j) * E + e];
    float t = 0.0f;
#pragma unroll
    for (int sp = 0; sp < CONV_SPLITS; sp++) t += v[sp];
    if (j < K) dw[(size_t)e * K + j] += t;
    else db[e] += t;
}

#define CONV_DISPATCH(K, CALL)                                                            \
    do {                                                                                  \
        switch (K) {                                                                      \
        case 1: { constexpr int KK = 1; CALL; } break;                                    \
        case 2: { constexpr int KK = 2; CALL; } break;                                    \
        case 3: { constexpr int KK = 3; CALL; } break;                                    \
        case 4: { constexpr int KK = 4; CALL; } break;                                    \
        case 5: { constexpr int KK = 5; CALL; } break;                                    \
        case 6: { constexpr int KK = 6; CALL; } break;                                    \
        default: VIL_FATAL("conv1d: width %d; the CUDA kernel is built for 1..6", (K));   \
        }                                                                                 \
    } while (0)

extern "C" void conv1d_silu_forward_cuda(void *u, const void *x, const float *w, const float *b,
                                         int B, int L, int E, int K, int ldx, int reverse) {
    cu_ensure_init();
    dim3 grid((E + 127) / 128, (L + CONV_TC - 1) / CONV_TC, B);
    CONV_DISPATCH(K, (conv1d_silu_fwd_kernel<KK><<<grid, 128, 0, g_cu.stream>>>(
                         (bf16 *)u, (const bf16 *)x, w, b, L, E, ldx, reverse)));
    CU_LAUNCH_CHECK();
}

extern "C" void conv1d_silu_backward_cuda(void *dx, float *dw, float *db, const void *du,
                                          const void *x, const float *w, const float *b, int B,
                                          int L, int E, int K, int ldx, int reverse,
                                          int accumulate_dx) {
    cu_ensure_init();
    int nrun = (L + CONV_TC - 1) / CONV_TC;
    size_t np = (size_t)B * nrun * (K + 1) * E;
    float *part = (float *)cu_scratch(SCR_CONV_PART, (np + (size_t)CONV_SPLITS * (K + 1) * E) * sizeof(float));
    float *part2 = part + np;
    dim3 grid((E + 127) / 128, nrun, B);
    CONV_DISPATCH(K, (conv1d_silu_bwd_kernel<KK><<<grid, 128, 0, g_cu.stream>>>(
                         (bf16 *)dx, part, (const bf16 *)du, (const bf16 *)x, w, b, L, E, ldx,
                         reverse, accumulate_dx)));
    CU_LAUNCH_CHECK();
    conv1d_dw_split_kernel<<<dim3((E + 31) / 32, K + 1, CONV_SPLITS), dim3(32, 8), 0, g_cu.stream>>>(part2, part, B * nrun, E, K);
    CU_LAUNCH_CHECK();
    conv1d_dw_final_kernel<<<cu_blocks((size_t)E * (K + 1), 128), 128, 0, g_cu.stream>>>(dw, db, part2, E, K);
    CU_LAUNCH_CHECK();
}
