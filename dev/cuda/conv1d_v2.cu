/* conv1d.cu: the depthwise causal conv1d of width K (up to 8) along the tokens fused with SiLU,
 * both directions by indexing (reverse = 1 runs the causal filter over the reversed token order).
 * One thread per (channel, sample, run of TC scan steps) with a sliding register window; taps are
 * right-aligned in a fixed-size window so every register index is a compile-time constant. The
 * backward recomputes the pre-activation; dx overwrites unless accumulate_dx; dw, db accumulate
 * through per-(sample, run) partial sums reduced in a fixed order (deterministic). */
#include "cuda/cuda_common.cuh"
#include "cuda/ops_cuda.h"

#define CONV_TC 64 /* scan steps per thread */
#define CONV_PF 8  /* steps whose loads are issued together */

__device__ __forceinline__ size_t conv_row(int b, int L, int s, int reverse) {
    return (size_t)b * L + (reverse ? L - 1 - s : s);
}

template <int KM>
__global__ void conv1d_silu_fwd_kernel(bf16 *__restrict__ u, const bf16 *__restrict__ x,
                                       const float *__restrict__ w, const float *__restrict__ bias,
                                       int L, int E, int K, int ldx, int reverse) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= E) return;
    int b = blockIdx.z, s0 = blockIdx.y * CONV_TC;
    /* wr[KM-1-m] is the tap applied to the token m scan steps back */
    float wr[KM], win[KM];
#pragma unroll
    for (int i = 0; i < KM; i++) {
        int m = KM - 1 - i;
        wr[i] = m < K ? w[(size_t)e * K + (K - 1 - m)] : 0.0f;
        int sp = s0 - m; /* win[KM-1] is filled by the loop below */
        win[i] = (i < KM - 1 && m < K && sp >= 0) ? bf2f(x[conv_row(b, L, sp, reverse) * ldx + e]) : 0.0f;
    }
    float bb = bias[e];
    int s1 = min(L, s0 + CONV_TC);
    for (int sb = s0; sb < s1; sb += CONV_PF) {
        float xv[CONV_PF];
#pragma unroll
        for (int k = 0; k < CONV_PF; k++)
            xv[k] = sb + k < s1 ? bf2f(x[conv_row(b, L, sb + k, reverse) * ldx + e]) : 0.0f;
#pragma unroll
        for (int k = 0; k < CONV_PF; k++) {
            if (sb + k >= s1) break;
            win[KM - 1] = xv[k];
            float pre = bb;
#pragma unroll
            for (int i = 0; i < KM; i++) pre = fmaf(wr[i], win[i], pre);
            u[conv_row(b, L, sb + k, reverse) * E + e] = f2bf(siluf(pre));
#pragma unroll
            for (int i = 0; i < KM - 1; i++) win[i] = win[i + 1];
        }
    }
}

/* part: (B * nrun, K + 1, E): per (sample, run) sums of dpre * x[tap] and of dpre */
template <int KM>
__global__ void conv1d_silu_bwd_kernel(bf16 *__restrict__ dx, float *__restrict__ part,
                                       const bf16 *__restrict__ du, const bf16 *__restrict__ x,
                                       const float *__restrict__ w, const float *__restrict__ bias,
                                       int L, int E, int K, int ldx, int reverse, int accumulate_dx) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= E) return;
    int b = blockIdx.z, run = blockIdx.y, s0 = run * CONV_TC;
    int s1 = min(L, s0 + CONV_TC);
    /* wr as in the forward; wf[i] = w_{KM-1-i} pairs with dwin[i] = dpre[sx + K-KM+i] in the
     * input gradient dx[sx] = sum_j w_j dpre[sx + K-1-j] */
    float wr[KM], wf[KM], win[KM], dwin[KM], acc[KM];
#pragma unroll
    for (int i = 0; i < KM; i++) {
        int m = KM - 1 - i;
        wr[i] = m < K ? w[(size_t)e * K + (K - 1 - m)] : 0.0f;
        wf[i] = m < K ? w[(size_t)e * K + m] : 0.0f;
        int sp = s0 - m;
        win[i] = (i < KM - 1 && m < K && sp >= 0) ? bf2f(x[conv_row(b, L, sp, reverse) * ldx + e]) : 0.0f;
        dwin[i] = 0.0f;
        acc[i] = 0.0f;
    }
    float bb = bias[e], accb = 0.0f;
    /* dpre is needed K-1 steps past the run: dx[s'] = sum_j w_j dpre[s' + K-1-j] */
    int s_end = min(L, s1 + K - 1), s_last = s1 + K - 1;
    for (int sb = s0; sb < s_last; sb += CONV_PF) {
        float xv[CONV_PF], gv[CONV_PF], ov[CONV_PF];
#pragma unroll
        for (int k = 0; k < CONV_PF; k++) {
            int s = sb + k, sx = s - (K - 1);
            bool in = s < s_end;
            size_t r = conv_row(b, L, in ? s : 0, reverse);
            xv[k] = in ? bf2f(x[r * ldx + e]) : 0.0f;
            gv[k] = in ? bf2f(du[r * E + e]) : 0.0f;
            ov[k] = (accumulate_dx && sx >= s0 && sx < s1) ? bf2f(dx[conv_row(b, L, sx, reverse) * ldx + e]) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < CONV_PF; k++) {
            int s = sb + k;
            if (s >= s_last) break;
            float dp = 0.0f;
            win[KM - 1] = xv[k];
            if (s < s_end) {
                float pre = bb;
#pragma unroll
                for (int i = 0; i < KM; i++) pre = fmaf(wr[i], win[i], pre);
                float sg = sigmoidf_fast(pre);
                dp = gv[k] * sg * (1.0f + pre * (1.0f - sg));
                if (s < s1) {
                    accb += dp;
#pragma unroll
                    for (int i = 0; i < KM; i++) acc[i] = fmaf(dp, win[i], acc[i]);
                }
            }
            dwin[KM - 1] = dp;
            /* dx at step s - (K-1) is complete: it reads dpre[s-(K-1) .. s] */
            int sx = s - (K - 1);
            if (sx >= s0 && sx < s1) {
                float g = ov[k];
#pragma unroll
                for (int i = 0; i < KM; i++) g = fmaf(wf[i], dwin[i], g);
                dx[conv_row(b, L, sx, reverse) * ldx + e] = f2bf(g);
            }
#pragma unroll
            for (int i = 0; i < KM - 1; i++) {
                win[i] = win[i + 1];
                dwin[i] = dwin[i + 1];
            }
        }
    }
    size_t prow = ((size_t)b * gridDim.y + run) * (K + 1);
#pragma unroll
    for (int i = 0; i < KM; i++) {
        int m = KM - 1 - i; /* acc[i] = sum dpre[s] x[s - m]: tap j = K-1-m */
        if (m < K) part[(prow + (K - 1 - m)) * E + e] = acc[i];
    }
    part[(prow + K) * E + e] = accb;
}

/* dw[e, j] (j < K) and db[e] (j = K) += the sum of the partial rows, 8 row lanes per channel,
 * the lanes added in order */
__global__ void conv1d_dw_final_kernel(float *__restrict__ dw, float *__restrict__ db,
                                       const float *__restrict__ part, int rows, int E, int K) {
    __shared__ float sacc[8][33];
    int e = blockIdx.x * 32 + threadIdx.x, j = blockIdx.y;
    float s0 = 0.0f, s1 = 0.0f;
    if (e < E) {
        int r = threadIdx.y;
        for (; r + 8 < rows; r += 16) {
            s0 += part[((size_t)r * (K + 1) + j) * E + e];
            s1 += part[((size_t)(r + 8) * (K + 1) + j) * E + e];
        }
        if (r < rows) s0 += part[((size_t)r * (K + 1) + j) * E + e];
    }
    sacc[threadIdx.y][threadIdx.x] = s0 + s1;
    __syncthreads();
    if (threadIdx.y == 0 && e < E) {
        float t = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) t += sacc[i][threadIdx.x];
        if (j < K) dw[(size_t)e * K + j] += t;
        else db[e] += t;
    }
}

extern "C" void conv1d_silu_forward_cuda(void *u, const void *x, const float *w, const float *b,
                                         int B, int L, int E, int K, int ldx, int reverse) {
    cu_ensure_init();
    dim3 grid((E + 127) / 128, (L + CONV_TC - 1) / CONV_TC, B);
    if (K <= 4)
        conv1d_silu_fwd_kernel<4><<<grid, 128, 0, g_cu.stream>>>((bf16 *)u, (const bf16 *)x, w, b, L, E, K, ldx, reverse);
    else if (K <= 8)
        conv1d_silu_fwd_kernel<8><<<grid, 128, 0, g_cu.stream>>>((bf16 *)u, (const bf16 *)x, w, b, L, E, K, ldx, reverse);
    else
        VIL_FATAL("conv1d: width %d is over the 8 the CUDA kernel supports", K);
    CU_LAUNCH_CHECK();
}

extern "C" void conv1d_silu_backward_cuda(void *dx, float *dw, float *db, const void *du,
                                          const void *x, const float *w, const float *b, int B,
                                          int L, int E, int K, int ldx, int reverse,
                                          int accumulate_dx) {
    cu_ensure_init();
    int nrun = (L + CONV_TC - 1) / CONV_TC;
    float *part = (float *)cu_scratch(SCR_CONV_PART, (size_t)B * nrun * (K + 1) * E * sizeof(float));
    dim3 grid((E + 127) / 128, nrun, B);
    if (K <= 4)
        conv1d_silu_bwd_kernel<4><<<grid, 128, 0, g_cu.stream>>>((bf16 *)dx, part, (const bf16 *)du, (const bf16 *)x, w, b, L, E, K, ldx, reverse, accumulate_dx);
    else if (K <= 8)
        conv1d_silu_bwd_kernel<8><<<grid, 128, 0, g_cu.stream>>>((bf16 *)dx, part, (const bf16 *)du, (const bf16 *)x, w, b, L, E, K, ldx, reverse, accumulate_dx);
    else
        VIL_FATAL("conv1d: width %d is over the 8 the CUDA kernel supports", K);
    CU_LAUNCH_CHECK();
    conv1d_dw_final_kernel<<<dim3((E + 31) / 32, K + 1), dim3(32, 8), 0, g_cu.stream>>>(dw, db, part, B * nrun, E, K);
    CU_LAUNCH_CHECK();
}
