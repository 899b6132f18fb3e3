/* norm.cu: the residual add fused with RMSNorm (eps 1e-5, weight, no bias) on the float32
 * residual stream; normed is written in bf16. One warp per row, the row held in registers.
 * Backward: dres updated in place, dh overwritten, dw accumulated through per-warp partial sums
 * over fixed row ranges reduced in a fixed order (deterministic). */
#include "cuda/cuda_common.cuh"
#include "cuda/ops_cuda.h"

#define RMS_EPS 1e-5f

template <int VPL>
__global__ void add_rmsnorm_fwd_kernel(float *__restrict__ res_out, bf16 *__restrict__ normed,
                                       float *__restrict__ rstd, const float *__restrict__ res_in,
                                       const bf16 *__restrict__ h, const float *__restrict__ scale,
                                       const float *__restrict__ w, int rows, int L, int D) {
    int row = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (row >= rows) return;
    size_t base = (size_t)row * D;
    float s = scale ? scale[row / L] : 1.0f;
    float x[VPL], ss = 0.0f;
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        int d = i * 32 + lane;
        float v = 0.0f;
        if (d < D) {
            if (res_in) {
                v = res_in[base + d] + s * bf2f(h[base + d]);
                res_out[base + d] = v;
            } else {
                v = res_out[base + d];
            }
        }
        x[i] = v;
        ss += v * v;
    }
    ss = warp_sum(ss);
    float rs = 1.0f / sqrtf(ss / (float)D + RMS_EPS);
    if (lane == 0) rstd[row] = rs;
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        int d = i * 32 + lane;
        if (d < D) normed[base + d] = f2bf(x[i] * rs * w[d]);
    }
}

/* Each warp owns RPW consecutive rows; the block's 8 warps add their dw partials in shared
 * memory in warp order and leave one partial row per block in part. */
#define NORM_RPW 4
template <int VPL>
__global__ void __launch_bounds__(256) add_rmsnorm_bwd_kernel(
    float *__restrict__ dres, bf16 *__restrict__ dh, float *__restrict__ part,
    const bf16 *__restrict__ dnormed, const float *__restrict__ res_out,
    const float *__restrict__ rstd, const float *__restrict__ w, const float *__restrict__ scale,
    int rows, int L, int D) {
    __shared__ float sdw[8][VPL * 32];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r0 = (blockIdx.x * 8 + warp) * NORM_RPW;
    float wv[VPL], acc[VPL];
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        int d = i * 32 + lane;
        wv[i] = d < D ? w[d] : 0.0f;
        acc[i] = 0.0f;
    }
    for (int r = r0; r < min(rows, r0 + NORM_RPW); r++) {
        size_t base = (size_t)r * D;
        float g[VPL], x[VPL], dr0[VPL], dot = 0.0f;
        float rs = rstd[r];
#pragma unroll
        for (int i = 0; i < VPL; i++) {
            int d = i * 32 + lane;
            bool ok = d < D;
            g[i] = ok ? bf2f(dnormed[base + d]) : 0.0f;
            x[i] = ok ? res_out[base + d] : 0.0f;
            dr0[i] = ok ? dres[base + d] : 0.0f;
            dot += g[i] * wv[i] * x[i];
        }
        dot = warp_sum(dot);
        float c = dot / (float)D * rs * rs * rs;
        float s = scale ? scale[r / L] : 1.0f;
#pragma unroll
        for (int i = 0; i < VPL; i++) {
            int d = i * 32 + lane;
            if (d < D) {
                acc[i] += g[i] * x[i] * rs;
                float dr = dr0[i] + g[i] * wv[i] * rs - x[i] * c;
                dres[base + d] = dr;
                if (dh) dh[base + d] = f2bf(s * dr);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < VPL; i++) sdw[warp][i * 32 + lane] = acc[i];
    __syncthreads();
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float t = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) t += sdw[k][d];
        part[(size_t)blockIdx.x * D + d] = t;
    }
}

#define DISPATCH_VPL(D, CALL)                                                            \
    do {                                                                                 \
        if ((D) <= 64) { constexpr int VPL = 2; CALL; }                                  \
        else if ((D) <= 128) { constexpr int VPL = 4; CALL; }                            \
        else if ((D) <= 256) { constexpr int VPL = 8; CALL; }                            \
        else if ((D) <= 512) { constexpr int VPL = 16; CALL; }                           \
        else if ((D) <= 1024) { constexpr int VPL = 32; CALL; }                          \
        else VIL_FATAL("add_rmsnorm: D = %d is over the 1024 this kernel holds in registers", (D)); \
    } while (0)

extern "C" void add_rmsnorm_forward_cuda(const VilNormFwd *a) {
    float *res_out = a->res_out, *rstd = a->rstd;
    void *normed = a->normed;
    const float *res_in = a->res_in, *scale = a->scale, *w = a->w;
    const void *h = a->h;
    int L = a->L, D = a->D, rows = a->B * a->L;
    int blocks = cu_blocks((size_t)rows * 32, 256);
    DISPATCH_VPL(D, (add_rmsnorm_fwd_kernel<VPL><<<blocks, 256, 0, cu()->stream>>>(
                        res_out, (bf16 *)normed, rstd, res_in, (const bf16 *)h, scale, w, rows, L, D)));
    CU_LAUNCH_CHECK();
}

extern "C" void add_rmsnorm_backward_cuda(const VilNormBwd *a) {
    float *dres = a->dres, *dw = a->dw;
    void *dh = a->dh;
    const void *dnormed = a->dnormed;
    const float *res_out = a->res_out, *rstd = a->rstd, *w = a->w, *scale = a->scale;
    int L = a->L, D = a->D;
    int rows = a->B * L, nblk = (rows + 8 * NORM_RPW - 1) / (8 * NORM_RPW);
    float *part = (float *)cu_scratch(SCR_NORM_PART, (size_t)nblk * D * sizeof(float));
    DISPATCH_VPL(D, (add_rmsnorm_bwd_kernel<VPL><<<nblk, 256, 0, cu()->stream>>>(
                        dres, (bf16 *)dh, part, (const bf16 *)dnormed, res_out, rstd, w, scale,
                        rows, L, D)));
    CU_LAUNCH_CHECK();
    colsum_rows_accumulate_cuda(dw, part, nblk, D, D);
}
