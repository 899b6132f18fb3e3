/* conv1d.cu: the depthwise causal conv1d of width K (1 to 6) along the tokens fused with SiLU,
 * both directions in one pass over x (direction 1 runs the causal filter over the reversed token
 * order, by indexing), or (causal) direction 0 alone, reading a carried context before token 0:
 * the kernels are compiled for D = 2 directions and for D = 1. One thread per (two channels
 * where E is even, sample, run of tokens) in the forward, per (two channels, sample, runs of
 * tokens) in the backward, all of a run's loads issued before its arithmetic (the width K is a
 * template argument, so the windows are registers). The backward recomputes the pre-activation;
 * dx is overwritten; dw, db accumulate through per-(sample, block) partial sums reduced in a
 * fixed order (deterministic). */
#include "cuda/cuda_common.cuh"
#include "cuda/ops_cuda.h"

#ifndef CONV_TC
#define CONV_TC 16 /* tokens per thread of the forward; all of a thread's loads are issued up front */
#endif

/* CPT channels of one token row as floats: two through one 4-byte load (bf16x2), or one */
template <int CPT> struct ConvRow;
template <> struct ConvRow<2> {
    __nv_bfloat162 v;
    __device__ __forceinline__ void load(const bf16 *p) { v = *reinterpret_cast<const __nv_bfloat162 *>(p); }
    __device__ __forceinline__ void zero() { v = __floats2bfloat162_rn(0.0f, 0.0f); }
    __device__ __forceinline__ float get(int c) const { return c ? __high2float(v) : __low2float(v); }
};
template <> struct ConvRow<1> {
    bf16 v;
    __device__ __forceinline__ void load(const bf16 *p) { v = *p; }
    __device__ __forceinline__ void zero() { v = __float2bfloat16_rn(0.0f); }
    __device__ __forceinline__ float get(int) const { return __bfloat162float(v); }
};
/* NR token rows of CPT channels from p (row t_first + k at p + k ld), zeros outside [0, L), or
 * before token 0 the carried context's rows where cz is given (row t < 0 at cz + t E: cz is
 * where the context's row 0 would be); inner: every row lies inside (no tests) */
template <int CPT, int NR>
__device__ __forceinline__ void load_rows(ConvRow<CPT> (&r)[NR], const bf16 *p, ptrdiff_t ld, int t_first, int L,
                                          bool inner, const bf16 *cz, int E) {
    if (inner) {
#pragma unroll
        for (int k = 0; k < NR; k++) r[k].load(p + k * ld);
    } else {
#pragma unroll
        for (int k = 0; k < NR; k++) {
            int t = t_first + k;
            if (t >= 0 && t < L) r[k].load(p + k * ld);
            else if (cz && t < 0) r[k].load(cz + (ptrdiff_t)t * E);
            else r[k].zero();
        }
    }
}
/* sample b's context pointer for load_rows (ctx (B, K-1, E), channel e0), or nullptr: a constant
 * one for D = 2, which reads none */
template <int K, int D>
__device__ __forceinline__ const bf16 *ctx_zero_row(const bf16 *ctx, int b, int E, int e0) {
    return D == 1 && ctx ? ctx + ((size_t)b * (K - 1) + (K - 1)) * E + e0 : nullptr;
}

#ifndef CONV_T
#define CONV_T 64 /* threads per block of the forward (CPT channels each) */
#endif
/* Both directions in one pass over x (token order): u0[t] = SiLU(b0 + sum_i w0[i] x[t-(K-1)+i]),
 * u1[t] = SiLU(b1 + sum_i w1[i] x[t+(K-1)-i]) (the reversed filter, stored by token); D = 1:
 * u0 alone, x before token 0 from ctx where given. A thread holds CPT adjacent channels (2 where
 * E is even: 4-byte loads and stores) and CONV_TC tokens, its whole x window loaded before any
 * arithmetic. Version 1 (a channel a thread, 2-byte accesses) ran 50.6 us a ViL-Tiny layer at
 * batch 256; cuda/PERF_NOTES.md. */
template <int K, int CPT, int D>
__global__ void __launch_bounds__(CONV_T) conv1d_silu_fwd_kernel(
    bf16 *__restrict__ u0, bf16 *__restrict__ u1, const bf16 *__restrict__ x, const bf16 *__restrict__ ctx,
    const float *__restrict__ w0, const float *__restrict__ w1, const float *__restrict__ b0,
    const float *__restrict__ b1, int L, int E, int ldx) {
    constexpr int TC = CONV_TC, NX = TC + D * (K - 1);
    const int e0 = (blockIdx.x * CONV_T + threadIdx.x) * CPT;
    if (e0 >= E) return;
    const int b = blockIdx.z, t0 = blockIdx.y * TC;
    const size_t r0 = (size_t)b * L;
    ConvRow<CPT> xr[NX]; /* xr[k]: token t0 - (K-1) + k */
    const bool inner = t0 - (K - 1) >= 0 && t0 + TC + (D - 1) * (K - 1) <= L;
    load_rows(xr, x + (r0 + t0 - (K - 1)) * ldx + e0, ldx, t0 - (K - 1), L, inner, ctx_zero_row<K, D>(ctx, b, E, e0), E);
    float wa[CPT][K], wb[CPT][K], ba[CPT], bb[CPT];
#pragma unroll
    for (int c = 0; c < CPT; c++) {
#pragma unroll
        for (int i = 0; i < K; i++) wa[c][i] = w0[(size_t)(e0 + c) * K + i], wb[c][i] = D == 2 ? w1[(size_t)(e0 + c) * K + i] : 0.0f;
        ba[c] = b0[e0 + c], bb[c] = D == 2 ? b1[e0 + c] : 0.0f;
    }
    bf16 *pa = u0 + (r0 + t0) * E + e0, *pb = D == 2 ? u1 + (r0 + t0) * E + e0 : nullptr;
#pragma unroll
    for (int k = 0; k < TC; k++) {
        if (!inner && t0 + k >= L) break;
        float fa[CPT], fb[CPT];
#pragma unroll
        for (int c = 0; c < CPT; c++) {
            fa[c] = ba[c], fb[c] = bb[c];
#pragma unroll
            for (int i = 0; i < K; i++) {
                fa[c] = fmaf(wa[c][i], xr[k + i].get(c), fa[c]);
                if constexpr (D == 2) fb[c] = fmaf(wb[c][i], xr[k + 2 * (K - 1) - i].get(c), fb[c]);
            }
        }
        if constexpr (CPT == 2) {
            *reinterpret_cast<__nv_bfloat162 *>(pa + (ptrdiff_t)k * E) = __floats2bfloat162_rn(siluf(fa[0]), siluf(fa[1]));
            if constexpr (D == 2)
                *reinterpret_cast<__nv_bfloat162 *>(pb + (ptrdiff_t)k * E) = __floats2bfloat162_rn(siluf(fb[0]), siluf(fb[1]));
        } else {
            pa[(ptrdiff_t)k * E] = f2bf(siluf(fa[0]));
            if constexpr (D == 2) pb[(ptrdiff_t)k * E] = f2bf(siluf(fb[0]));
        }
    }
}

#ifndef CONV_BI_TC
#define CONV_BI_TC 8 /* tokens per run of the two-direction backward */
#endif
#ifndef CONV_BI_RPB
#define CONV_BI_RPB 32 /* runs per block: the dw / db partial rows (written, then summed) shrink by
                        * this factor (at L 197: one block per sample and 128 channels) */
#endif
#ifndef CONV_BI_T
#define CONV_BI_T 64 /* threads per block of the backward */
#endif
#ifndef CONV_BI_MINB
#define CONV_BI_MINB 5 /* its blocks per SM for the register allocation (168 registers at 64 threads,
                        * two runs' rows in flight; at L 197 a sample's 25 runs are one block and
                        * the grid gives ~6 blocks an SM anyway) */
#endif
/* Both directions' backward in one pass over x (token order): dx[t] = the forward filter's
 * input gradient sum_i wf0[i] dpre0[t + i] plus the reversed one's sum_i wf1[i] dpre1[t - i],
 * written once (a pass per direction would read x twice and dx three times). A thread holds CPT
 * adjacent channels (2 where E is even: 4-byte loads and stores) and walks CONV_BI_RPB runs of
 * CONV_BI_TC tokens; it issues every load of a run (the x window of its tokens plus K-1 on each
 * side, and both directions' du over the tokens their filters reach) before the previous run's
 * arithmetic, which runs one direction after the other. part: (D, B * ngrp, K + 1, E)
 * per-direction partial sums over a block's runs of dpre x[tap], dpre. D = 1: direction 0 alone,
 * x before token 0 from ctx where given (its dpre x products go to dw; nothing flows into ctx).
 * Version 1 (a thread per channel, 16-token runs, 2-byte loads, x loaded before du) ran 144 us a
 * ViL-Tiny layer at batch 256, this one 103 us (TC 8 / RPB 32; 112 without the next run's loads
 * in flight; 4, 8, 16 runs per block or 4, 16 tokens per run: 120-130 us); cuda/PERF_NOTES.md. */
template <int K, int CPT, int D> /* widths 5 and 6 take 4 blocks an SM's registers (5 spill) */
__global__ void __launch_bounds__(CONV_BI_T, K >= 5 ? 4 : CONV_BI_MINB) conv1d_silu_bwd_kernel(
    bf16 *__restrict__ dx, float *__restrict__ part, const bf16 *__restrict__ du0,
    const bf16 *__restrict__ du1, const bf16 *__restrict__ x, const bf16 *__restrict__ ctx,
    const float *__restrict__ w0, const float *__restrict__ w1, const float *__restrict__ b0,
    const float *__restrict__ b1, int L, int E, int ldx) {
    constexpr int TC = CONV_BI_TC, NP = TC + K - 1, NX = TC + 2 * (K - 1);
    const int e0 = (blockIdx.x * CONV_BI_T + threadIdx.x) * CPT;
    if (e0 >= E) return;
    const int b = blockIdx.z, nrun = (L + TC - 1) / TC;
    const size_t r0 = (size_t)b * L;
    const bf16 *cz = ctx_zero_row<K, D>(ctx, b, E, e0);
    /* wr[j][c][i]: direction j's taps of channel e0 + c; bias */
    float wr[D][CPT][K], bb[D][CPT];
#pragma unroll
    for (int j = 0; j < D; j++)
#pragma unroll
        for (int c = 0; c < CPT; c++) {
#pragma unroll
            for (int i = 0; i < K; i++) wr[j][c][i] = (j ? w1 : w0)[(size_t)(e0 + c) * K + i];
            bb[j][c] = (j ? b1 : b0)[e0 + c];
        }
    /* the dw / db sums of the directions over the block's runs */
    float acc[D][CPT][K + 1];
#pragma unroll
    for (int j = 0; j < D; j++)
#pragma unroll
        for (int c = 0; c < CPT; c++)
#pragma unroll
            for (int i = 0; i <= K; i++) acc[j][c][i] = 0.0f;
    /* the run's rows: xr[k] token t0 - (K-1) + k; g[0][k] du0 at token t0 + k (the forward
     * filter's dpre reaches t0 .. t0 + TC + K - 2); g[1][k] du1 at token t0 - (K-1) + k */
    struct Rows {
        ConvRow<CPT> xr[NX], g[D][NP];
    };
    auto load = [&](Rows &rw, int t0) {
        const bool inner = t0 - (K - 1) >= 0 && t0 + TC + K - 1 <= L;
        load_rows(rw.xr, x + (r0 + t0 - (K - 1)) * ldx + e0, ldx, t0 - (K - 1), L, inner, cz, E);
        load_rows(rw.g[0], du0 + (r0 + t0) * E + e0, E, t0, L, inner, nullptr, E);
        if constexpr (D == 2)
            load_rows(rw.g[D - 1], du1 + (r0 + t0 - (K - 1)) * E + e0, E, t0 - (K - 1), L, inner, nullptr, E);
    };
    auto run_one = [&](const Rows &rw, int t0) {
        const bool inner = t0 - (K - 1) >= 0 && t0 + TC + K - 1 <= L;
        const ConvRow<CPT>(&xr)[NX] = rw.xr;
        const ConvRow<CPT>(&g)[D][NP] = rw.g;
        float ov[CPT][TC];
#pragma unroll
        for (int c = 0; c < CPT; c++) {
            float xv[NX];
#pragma unroll
            for (int k = 0; k < NX; k++) xv[k] = xr[k].get(c);
#pragma unroll
            for (int k = 0; k < TC; k++) ov[c][k] = 0.0f;
#pragma unroll
            for (int j = 0; j < D; j++) {
                float dp[NP];
#pragma unroll
                for (int k = 0; k < NP; k++) {
                    /* token t = (j ? t0 - (K-1) : t0) + k; xv[m] is token t0 - (K-1) + m: forward
                     * taps x[t - (K-1) + i] = xv[k + i]; reversed taps x[t + (K-1) - i] =
                     * xv[k + 2(K-1) - i] - (K-1) = xv[k + K - 1 - i] */
                    float pre = bb[j][c];
#pragma unroll
                    for (int i = 0; i < K; i++) pre = fmaf(wr[j][c][i], j ? xv[k + K - 1 - i] : xv[k + i], pre);
                    float sg = sigmoidf_fast(pre);
                    dp[k] = g[j][k].get(c) * sg * (1.0f + pre * (1.0f - sg));
                    /* the run's own tokens feed dw, db: forward k < TC; reversed k >= K-1 */
                    if (j ? k >= K - 1 : k < TC) {
                        acc[j][c][K] += dp[k];
#pragma unroll
                        for (int i = 0; i < K; i++)
                            acc[j][c][i] = fmaf(dp[k], j ? xv[k + K - 1 - i] : xv[k + i], acc[j][c][i]);
                    }
                }
                /* forward: dx[t0+k] += sum_i w[K-1-i] dpre[t0+k+i] = dp[k + i]; reversed: dpre at
                 * token t0+k-i = dp[k + (K-1) - i] */
#pragma unroll
                for (int k = 0; k < TC; k++)
#pragma unroll
                    for (int i = 0; i < K; i++)
                        ov[c][k] = fmaf(wr[j][c][K - 1 - i], j ? dp[k + K - 1 - i] : dp[k + i], ov[c][k]);
            }
        }
        bf16 *op = dx + (r0 + t0) * ldx + e0;
#pragma unroll
        for (int k = 0; k < TC; k++) {
            if (!inner && t0 + k >= L) break;
            if constexpr (CPT == 2)
                *reinterpret_cast<__nv_bfloat162 *>(op + (ptrdiff_t)k * ldx) = __floats2bfloat162_rn(ov[0][k], ov[CPT - 1][k]);
            else
                op[(ptrdiff_t)k * ldx] = f2bf(ov[0][k]);
        }
    };
    /* the next run's loads are issued before this run's arithmetic: two row sets, in turn */
    const int ra = blockIdx.y * CONV_BI_RPB, rb = min(nrun, ra + CONV_BI_RPB);
    Rows s0, s1;
    if (ra < rb) load(s0, ra * TC);
    for (int run = ra; run < rb; run += 2) {
        if (run + 1 < rb) load(s1, (run + 1) * TC);
        run_one(s0, run * TC);
        if (run + 2 < rb) load(s0, (run + 2) * TC);
        if (run + 1 < rb) run_one(s1, (run + 1) * TC);
    }
    const size_t nrows = (size_t)gridDim.z * gridDim.y;
#pragma unroll
    for (int j = 0; j < D; j++) {
        size_t prow = ((size_t)j * nrows + (size_t)b * gridDim.y + blockIdx.y) * (K + 1);
#pragma unroll
        for (int i = 0; i <= K; i++) {
            if constexpr (CPT == 2)
                *reinterpret_cast<float2 *>(part + (prow + i) * E + e0) = make_float2(acc[j][0][i], acc[j][CPT - 1][i]);
            else
                part[(prow + i) * E + e0] = acc[j][0][i];
        }
    }
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

/* two channels a thread where every row starts 4-byte aligned (E even: ldx = 2E is too; c: the
 * other direction's tensor, or the carried context) */
static int conv_pairs(int E, int ldx, const void *a, const void *b, const void *c) {
    return E % 2 == 0 && ldx % 2 == 0 && ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 4 == 0;
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

/* ctx_out (B, K-1, E) = inputs L-(K-1) .. L-1 of each sample (ctx's, or zeros, before token 0):
 * one thread per (sample, channel), its rows in order, so that ctx_out may be ctx (row i reads
 * ctx's row i + L >= i before it is written) */
__global__ void conv1d_ctx_out_kernel(bf16 *ctx_out, const bf16 *x, const bf16 *ctx, int B, int L, int E, int K,
                                      int ldx) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * E) return;
    const int b = idx / E, e = idx - b * E, C = K - 1;
    for (int i = 0; i < C; i++) {
        const int s = L - C + i;
        const bf16 v = s >= 0 ? x[((size_t)b * L + s) * ldx + e]
                     : ctx ? ctx[((size_t)b * C + C + s) * E + e] : __float2bfloat16_rn(0.0f);
        ctx_out[((size_t)b * C + i) * E + e] = v;
    }
}

template <int K, int CPT, int D>
static void conv_backward(const VilConvBidirBwd *a, float *part, dim3 grid) {
    const bf16 *du1 = D == 2 ? (const bf16 *)a->du[1] : nullptr, *ctx = D == 1 ? (const bf16 *)a->ctx : nullptr;
    conv1d_silu_bwd_kernel<K, CPT, D><<<grid, CONV_BI_T, 0, cu()->stream>>>(
        (bf16 *)a->dx, part, (const bf16 *)a->du[0], du1, (const bf16 *)a->x, ctx, a->w[0], a->w[D - 1], a->b[0],
        a->b[D - 1], a->L, a->E, a->ldx);
}

extern "C" void conv1d_silu_bidir_backward_cuda(const VilConvBidirBwd *a) {
    void *dx = a->dx;
    float *const *dw = a->dw, *const *db = a->db;
    const void *const *du = a->du;
    const void *x = a->x;
    int B = a->B, L = a->L, E = a->E, K = a->K, ldx = a->ldx, dirs = a->causal ? 1 : 2;
    int nrun = (L + CONV_BI_TC - 1) / CONV_BI_TC, ngrp = (nrun + CONV_BI_RPB - 1) / CONV_BI_RPB;
    size_t np = (size_t)B * ngrp * (K + 1) * E;
    float *part = (float *)cu_scratch(SCR_OP, (dirs * np + (size_t)CONV_SPLITS * (K + 1) * E) * sizeof(float));
    float *part2 = part + dirs * np;
    const int pair = conv_pairs(E, ldx, x, du[0], dirs == 2 ? du[1] : a->ctx) && (uintptr_t)dx % 4 == 0, cpt = pair ? 2 : 1;
    dim3 grid((E + CONV_BI_T * cpt - 1) / (CONV_BI_T * cpt), ngrp, B);
#define CONV_BWD(CPT, D) CONV_DISPATCH(K, (conv_backward<KK, CPT, D>(a, part, grid)))
    if (pair && dirs == 2) CONV_BWD(2, 2);
    else if (dirs == 2) CONV_BWD(1, 2);
    else if (pair) CONV_BWD(2, 1);
    else CONV_BWD(1, 1);
#undef CONV_BWD
    CU_LAUNCH_CHECK();
    for (int j = 0; j < dirs; j++) {
        conv1d_dw_split_kernel<<<dim3((E + 31) / 32, K + 1, CONV_SPLITS), dim3(32, 8), 0, cu()->stream>>>(
            part2, part + j * np, B * ngrp, E, K);
        CU_LAUNCH_CHECK();
        conv1d_dw_final_kernel<<<cu_blocks((size_t)E * (K + 1), 128), 128, 0, cu()->stream>>>(dw[j], db[j], part2, E, K);
        CU_LAUNCH_CHECK();
    }
}

template <int K, int CPT, int D>
static void conv_forward(const VilConvBidirFwd *a, dim3 grid) {
    bf16 *u1 = D == 2 ? (bf16 *)a->u[1] : nullptr;
    const bf16 *ctx = D == 1 ? (const bf16 *)a->ctx : nullptr;
    conv1d_silu_fwd_kernel<K, CPT, D><<<grid, CONV_T, 0, cu()->stream>>>(
        (bf16 *)a->u[0], u1, (const bf16 *)a->x, ctx, a->w[0], a->w[D - 1], a->b[0], a->b[D - 1], a->L, a->E, a->ldx);
}

extern "C" void conv1d_silu_bidir_forward_cuda(const VilConvBidirFwd *a) {
    void *const *u = a->u;
    const void *x = a->x;
    int B = a->B, L = a->L, E = a->E, K = a->K, ldx = a->ldx, dirs = a->causal ? 1 : 2;
    const int pair = conv_pairs(E, ldx, x, u[0], dirs == 2 ? u[1] : a->ctx), cpt = pair ? 2 : 1;
    dim3 grid((E + CONV_T * cpt - 1) / (CONV_T * cpt), (L + CONV_TC - 1) / CONV_TC, B);
#define CONV_FWD(CPT, D) CONV_DISPATCH(K, (conv_forward<KK, CPT, D>(a, grid)))
    if (pair && dirs == 2) CONV_FWD(2, 2);
    else if (dirs == 2) CONV_FWD(1, 2);
    else if (pair) CONV_FWD(2, 1);
    else CONV_FWD(1, 1);
#undef CONV_FWD
    CU_LAUNCH_CHECK();
    /* the next chunk's context, after the conv has read ctx (the same stream) */
    if (a->causal && a->ctx_out && K > 1) {
        conv1d_ctx_out_kernel<<<cu_blocks((size_t)B * E, 128), 128, 0, cu()->stream>>>(
            (bf16 *)a->ctx_out, (const bf16 *)x, (const bf16 *)a->ctx, B, L, E, K, ldx);
        CU_LAUNCH_CHECK();
    }
}
