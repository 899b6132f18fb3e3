/* norm.cu: the residual add fused with RMSNorm (eps 1e-5, weight, no bias) on the float32
 * residual stream; normed is written in bf16. One warp per row, the row held in registers.
 * Backward: dres updated in place, dh overwritten, dw accumulated through per-warp partial sums
 * over fixed row ranges reduced in a fixed order (deterministic). */
#include "cuda/cuda_common.cuh"
#include "cuda/ops_cuda.h"

#define RMS_EPS 1e-5f

/* W adjacent elements of a row through one load or store: W = 4 (16-byte float4, 8-byte bf16 x 4),
 * 2 (float2, bf16x2) or 1 */
template <int W> struct NormVec;
template <> struct NormVec<1> {
    static __device__ __forceinline__ void ldf(float (&v)[1], const float *p) { v[0] = *p; }
    static __device__ __forceinline__ void stf(float *p, const float (&v)[1]) { *p = v[0]; }
    static __device__ __forceinline__ void ldb(float (&v)[1], const bf16 *p) { v[0] = bf2f(*p); }
    static __device__ __forceinline__ void stb(bf16 *p, const float (&v)[1]) { *p = f2bf(v[0]); }
};
template <> struct NormVec<2> {
    static __device__ __forceinline__ void ldf(float (&v)[2], const float *p) {
        float2 t = *reinterpret_cast<const float2 *>(p);
        v[0] = t.x, v[1] = t.y;
    }
    static __device__ __forceinline__ void stf(float *p, const float (&v)[2]) {
        *reinterpret_cast<float2 *>(p) = make_float2(v[0], v[1]);
    }
    static __device__ __forceinline__ void ldb(float (&v)[2], const bf16 *p) {
        __nv_bfloat162 t = *reinterpret_cast<const __nv_bfloat162 *>(p);
        v[0] = __low2float(t), v[1] = __high2float(t);
    }
    static __device__ __forceinline__ void stb(bf16 *p, const float (&v)[2]) {
        *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(v[0], v[1]);
    }
};
template <> struct NormVec<4> {
    static __device__ __forceinline__ void ldf(float (&v)[4], const float *p) {
        float4 t = *reinterpret_cast<const float4 *>(p);
        v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
    }
    static __device__ __forceinline__ void stf(float *p, const float (&v)[4]) {
        *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
    }
    static __device__ __forceinline__ void ldb(float (&v)[4], const bf16 *p) {
        uint2 t = *reinterpret_cast<const uint2 *>(p);
        __nv_bfloat162 a = *reinterpret_cast<__nv_bfloat162 *>(&t.x), b = *reinterpret_cast<__nv_bfloat162 *>(&t.y);
        v[0] = __low2float(a), v[1] = __high2float(a), v[2] = __low2float(b), v[3] = __high2float(b);
    }
    static __device__ __forceinline__ void stb(bf16 *p, const float (&v)[4]) {
        __nv_bfloat162 a = __floats2bfloat162_rn(v[0], v[1]), b = __floats2bfloat162_rn(v[2], v[3]);
        uint2 t;
        t.x = *reinterpret_cast<unsigned *>(&a), t.y = *reinterpret_cast<unsigned *>(&b);
        *reinterpret_cast<uint2 *>(p) = t;
    }
};

/* One warp per row; lane holds VPL pieces of W adjacent elements, piece i at (i * 32 + lane) * W
 * (the host picks W so that every piece is whole and aligned) */
template <int VPL, int W>
__global__ void add_rmsnorm_fwd_kernel(float *__restrict__ res_out, bf16 *__restrict__ normed,
                                       float *__restrict__ rstd, const float *__restrict__ res_in,
                                       const bf16 *__restrict__ h, const float *__restrict__ scale,
                                       const float *__restrict__ w, int rows, int L, int D) {
    using V = NormVec<W>;
    int row = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (row >= rows) return;
    size_t base = (size_t)row * D;
    float s = scale ? scale[row / L] : 1.0f;
    float x[VPL][W], ss = 0.0f;
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        int d = (i * 32 + lane) * W;
#pragma unroll
        for (int c = 0; c < W; c++) x[i][c] = 0.0f;
        if (d < D) {
            if (res_in) {
                float hv[W];
                V::ldf(x[i], res_in + base + d);
                V::ldb(hv, h + base + d);
#pragma unroll
                for (int c = 0; c < W; c++) x[i][c] += s * hv[c];
                V::stf(res_out + base + d, x[i]);
            } else {
                V::ldf(x[i], res_out + base + d);
            }
        }
#pragma unroll
        for (int c = 0; c < W; c++) ss += x[i][c] * x[i][c];
    }
    ss = warp_sum(ss);
    float rs = 1.0f / sqrtf(ss / (float)D + RMS_EPS);
    if (lane == 0) rstd[row] = rs;
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        int d = (i * 32 + lane) * W;
        if (d < D) {
            float wv[W], o[W];
            V::ldf(wv, w + d);
#pragma unroll
            for (int c = 0; c < W; c++) o[c] = x[i][c] * rs * wv[c];
            V::stb(normed + base + d, o);
        }
    }
}

/* Each warp owns RPW consecutive rows; the block's 8 warps add their dw partials in shared
 * memory in warp order and leave one partial row per block in part. */
#define NORM_RPW 4
template <int VPL, int W, int NORM_RB> /* NORM_RB: rows a warp loads before reducing */
__global__ void __launch_bounds__(256) add_rmsnorm_bwd_kernel(
    float *__restrict__ dres, bf16 *__restrict__ dh, float *__restrict__ part,
    const bf16 *__restrict__ dnormed, const float *__restrict__ res_out,
    const float *__restrict__ rstd, const float *__restrict__ w, const float *__restrict__ scale,
    int rows, int L, int D) {
    using V = NormVec<W>;
    __shared__ __align__(16) float sdw[8][VPL * 32 * W];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r0 = (blockIdx.x * 8 + warp) * NORM_RPW;
    float wv[VPL][W], acc[VPL][W];
#pragma unroll
    for (int i = 0; i < VPL; i++) {
        int d = (i * 32 + lane) * W;
#pragma unroll
        for (int c = 0; c < W; c++) wv[i][c] = 0.0f, acc[i][c] = 0.0f;
        if (d < D) V::ldf(wv[i], w + d);
    }
    /* NORM_RB rows at a time: every load of the rows issued before their reductions */
    const int rend = min(rows, r0 + NORM_RPW);
    for (int rb = r0; rb < rend; rb += NORM_RB) {
        float g[NORM_RB][VPL][W], x[NORM_RB][VPL][W], dr[NORM_RB][VPL][W], dot[NORM_RB], rs[NORM_RB];
#pragma unroll
        for (int q = 0; q < NORM_RB; q++) {
            const int r = rb + q;
            const bool on = r < rend;
            const size_t base = (size_t)r * D;
            rs[q] = on ? rstd[r] : 0.0f;
            dot[q] = 0.0f;
#pragma unroll
            for (int i = 0; i < VPL; i++) {
                int d = (i * 32 + lane) * W;
#pragma unroll
                for (int c = 0; c < W; c++) g[q][i][c] = 0.0f, x[q][i][c] = 0.0f, dr[q][i][c] = 0.0f;
                if (on && d < D) {
                    V::ldb(g[q][i], dnormed + base + d);
                    V::ldf(x[q][i], res_out + base + d);
                    V::ldf(dr[q][i], dres + base + d);
                }
            }
        }
#pragma unroll
        for (int q = 0; q < NORM_RB; q++) {
#pragma unroll
            for (int i = 0; i < VPL; i++)
#pragma unroll
                for (int c = 0; c < W; c++) dot[q] += g[q][i][c] * wv[i][c] * x[q][i][c];
            dot[q] = warp_sum(dot[q]);
        }
#pragma unroll
        for (int q = 0; q < NORM_RB; q++) {
            const int r = rb + q;
            if (r >= rend) break;
            const size_t base = (size_t)r * D;
            const float cc = dot[q] / (float)D * rs[q] * rs[q] * rs[q];
            const float s = scale ? scale[r / L] : 1.0f;
#pragma unroll
            for (int i = 0; i < VPL; i++) {
                int d = (i * 32 + lane) * W;
                if (d < D) {
                    float sh[W];
#pragma unroll
                    for (int c = 0; c < W; c++) {
                        acc[i][c] += g[q][i][c] * x[q][i][c] * rs[q];
                        dr[q][i][c] = dr[q][i][c] + g[q][i][c] * wv[i][c] * rs[q] - x[q][i][c] * cc;
                        sh[c] = s * dr[q][i][c];
                    }
                    V::stf(dres + base + d, dr[q][i]);
                    if (dh) V::stb(dh + base + d, sh);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < VPL; i++)
#pragma unroll
        for (int c = 0; c < W; c++) sdw[warp][(i * 32 + lane) * W + c] = acc[i][c];
    __syncthreads();
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float t = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) t += sdw[k][d];
        part[(size_t)blockIdx.x * D + d] = t;
    }
}

/* The widest W whose pieces are whole and aligned in every row of every pointer (4: 16-byte f32
 * pieces, 2, else 1), and VPL = the pieces a lane holds for D <= 1024 */
static int norm_width(int D, const void *p0, const void *p1, const void *p2, uintptr_t b) {
    uintptr_t f = (uintptr_t)p0 | (uintptr_t)p1 | (uintptr_t)p2;
    const char *env = getenv("VIL_NORM_W"); /* A/B knob (experiment) */
    int wmax = env ? atoi(env) : 4;
    if (wmax >= 4 && D % 4 == 0 && f % 16 == 0 && b % 8 == 0) return 4;
    if (wmax >= 2 && D % 2 == 0 && f % 8 == 0 && b % 4 == 0) return 2;
    return 1;
}

/* VPL: the pieces a lane holds, the smallest listed >= per (a predicated piece costs little) */
#define NORM_VPL_CASE(V, per, CALL) else if ((per) <= (V)) { constexpr int VPL = (V); CALL; }
#define DISPATCH_VW(D, W, CALL)                                                                     \
    do {                                                                                            \
        if ((D) > 1024) VIL_FATAL("add_rmsnorm: D = %d is over the 1024 this kernel holds in registers", (D)); \
        const int per_ = ((D) + 32 * (W) - 1) / (32 * (W));                                         \
        if ((W) == 4) {                                                                             \
            constexpr int W_ = 4;                                                                   \
            if (0) {}                                                                               \
            NORM_VPL_CASE(1, per_, CALL) NORM_VPL_CASE(2, per_, CALL) NORM_VPL_CASE(3, per_, CALL)  \
            NORM_VPL_CASE(4, per_, CALL) NORM_VPL_CASE(6, per_, CALL) NORM_VPL_CASE(8, per_, CALL)  \
        } else if ((W) == 2) {                                                                      \
            constexpr int W_ = 2;                                                                   \
            if (0) {}                                                                               \
            NORM_VPL_CASE(1, per_, CALL) NORM_VPL_CASE(2, per_, CALL) NORM_VPL_CASE(3, per_, CALL)  \
            NORM_VPL_CASE(4, per_, CALL) NORM_VPL_CASE(8, per_, CALL) NORM_VPL_CASE(16, per_, CALL) \
        } else {                                                                                    \
            constexpr int W_ = 1;                                                                   \
            if (0) {}                                                                               \
            NORM_VPL_CASE(2, per_, CALL) NORM_VPL_CASE(4, per_, CALL) NORM_VPL_CASE(8, per_, CALL)  \
            NORM_VPL_CASE(16, per_, CALL) NORM_VPL_CASE(32, per_, CALL)                             \
        }                                                                                           \
    } while (0)

extern "C" void add_rmsnorm_forward_cuda(const VilNormFwd *a) {
    float *res_out = a->res_out, *rstd = a->rstd;
    void *normed = a->normed;
    const float *res_in = a->res_in, *scale = a->scale, *w = a->w;
    const void *h = a->h;
    int L = a->L, D = a->D, rows = a->B * a->L;
    int blocks = cu_blocks((size_t)rows * 32, 256);
    const int W = norm_width(D, res_out, res_in, w, (uintptr_t)normed | (uintptr_t)h);
    DISPATCH_VW(D, W, (add_rmsnorm_fwd_kernel<VPL, W_><<<blocks, 256, 0, cu()->stream>>>(
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
    const int W = norm_width(D, dres, res_out, w, (uintptr_t)dnormed | (uintptr_t)dh);
    const char *rbe = getenv("VIL_NORM_RB"); /* A/B knob (experiment) */
    if (rbe && atoi(rbe) == 1)
        DISPATCH_VW(D, W, (add_rmsnorm_bwd_kernel<VPL, W_, 1><<<nblk, 256, 0, cu()->stream>>>(
                              dres, (bf16 *)dh, part, (const bf16 *)dnormed, res_out, rstd, w, scale,
                              rows, L, D)));
    else
        DISPATCH_VW(D, W, (add_rmsnorm_bwd_kernel<VPL, W_, 2><<<nblk, 256, 0, cu()->stream>>>(
                              dres, (bf16 *)dh, part, (const bf16 *)dnormed, res_out, rstd, w, scale,
                              rows, L, D)));
    CU_LAUNCH_CHECK();
    colsum_rows_accumulate_cuda(dw, part, nblk, D, D);
}
