/* scan.cu: the fused bidirectional Longhorn (ViL) / Mamba (ViM) scan, forward and backward, per
 * ../shared/spec/scans.md, with the sigmoid (softplus), the eps normalization, the D skip, the
 * SiLU(z) gate and the direction average fused in; the backward direction runs by reverse
 * indexing, never on flipped copies. State in fp32 registers; nothing of size (L, E, N) is ever
 * stored. Kernels:
 *   scan_pair_kernel     one thread per (sample, channel) runs BOTH directions in one pass, the
 *                        forward one on token s and the backward one on token L-1-s at step s;
 *                        a per-thread stash in shared memory holds each token's first-visit
 *                        output until the other direction reaches it. Forward: writes the gated
 *                        average. Backward prep: recomputes the states, writes dz, the state
 *                        checkpoint every CK steps and the dq partial sums.
 *   scan_adjoint_kernel  one thread per (sample, direction, channel): per chunk of CK steps, in
 *                        reverse, recomputes the states from the chunk's checkpoint into shared
 *                        memory, then runs the reverse adjoint scan, taking h_{t-1} from the
 *                        recomputed states (never dividing by the forget gate); writes du, ddelta
 *                        and the dk (dB) partial sums.
 *   finalize kernels     sum the partials over channel blocks (dk, dq) and samples (dD, dA_log)
 *                        in a fixed order.
 * Sums over channels (dq, dk, dkappa folded into dk) are fp32: a warp reduce-scatter, then the
 * warps of a block in order, then the blocks in order: deterministic, no atomics. */
#include <math.h>
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda/ops_cuda.h"

#define CK 16  /* checkpoint spacing; the adjoint kernel's chunk of steps */
#define CKS 8  /* the pair kernel's staging chunk (CK is a multiple of it) */
#define FULL 0xffffffffu

typedef struct {
    const bf16 *u[2], *delta[2], *xdbl[2], *z, *dout;
    const float *Dsk[2], *A_log[2];
    bf16 *out, *dz, *du[2], *ddelta[2], *dxdbl[2];
    float *dD[2], *dA[2];
    float *ckpt; /* (B, 2, nck-1, N, E) state at the start of CK-chunks 1.. */
    float *pq;   /* (B, nblk1, 2, L, N) dq partials of the pair kernel's blocks */
    float *pk;   /* (B, 2, nblk2, L, N) dk partials of the adjoint kernel's blocks */
    float *pd;   /* (B, 2, E) dD partials */
    float *pa;   /* (B, 2, E, N) dA_log partials (Mamba) */
    int B, L, E, R, W, ldz, nck, nblk1, nblk2;
    int vec_act, vec_x, vec_ck; /* bytes per async copy: 16, 8, 4, or 2 (plain loads) */
} ScanArgs;

/* k/q row in shared memory: k[N] | q[N] | k^2[N] | kappa, padded to float4 */
template <int N>
struct KQ {
    static constexpr int W = 3 * N + 4;
};

/* ---- asynchronous global -> shared copies (cp.async), zero-filling past `valid` bytes ---- */
template <int BYTES>
__device__ __forceinline__ void cp_async(void *dst, const void *src, int valid) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    if (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(d), "l"(src), "n"(BYTES), "r"(valid));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int PENDING>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING)); }

/* copy `vb` bytes (a piece of a row) of which the first `valid` come from src */
__device__ __forceinline__ void copy_piece(void *dst, const void *src, int vb, int valid) {
    if (vb == 16) cp_async<16>(dst, src, valid);
    else if (vb == 8) cp_async<8>(dst, src, valid);
    else if (vb == 4) cp_async<4>(dst, src, valid);
    else if (vb == 2) *(bf16 *)dst = valid > 0 ? *(const bf16 *)src : f2bf(0.0f);
}

/* queue the copy of nrows rows of `width` bf16 (or f32 with esz 4) channels starting at channel
 * c0 (valid up to E) into dst rows of `width`; row r's source is src_row(r) */
template <typename RowFn>
__device__ __forceinline__ void queue_rows(void *dst, int nrows, int width, int esz, int c0, int E,
                                           int vb, RowFn src_row, int tid, int nthreads) {
    int pieces = width * esz / vb, per = vb / esz;
    for (int job = tid; job < nrows * pieces; job += nthreads) {
        int r = job / pieces, p = job - r * pieces;
        int c = c0 + p * per;
        int valid = min(max(E - c, 0), per) * esz;
        const char *src = (const char *)src_row(r) + (size_t)p * vb;
        char *d = (char *)dst + ((size_t)r * width + p * per) * esz;
        copy_piece(d, valid > 0 ? src : (const char *)src_row(r), vb, valid);
    }
}

/* Sum over the warp of v[lane % NV] for each lane: a butterfly reduce-scatter (each level halves
 * the values a lane holds), then plain xor-sums over the lanes that hold the same index. */
template <int NV, int HALF>
__device__ __forceinline__ void rs_level(float (&v)[NV], int lane) {
    if constexpr (HALF >= 1) {
        bool up = (lane & HALF) != 0;
#pragma unroll
        for (int i = 0; i < HALF; i++) {
            float send = up ? v[i] : v[i + HALF];
            float keep = up ? v[i + HALF] : v[i];
            v[i] = keep + __shfl_xor_sync(FULL, send, HALF);
        }
        rs_level<NV, HALF / 2>(v, lane);
    }
}
template <int NV>
__device__ __forceinline__ float reduce_scatter(float (&v)[NV], int lane) {
    rs_level<NV, NV / 2>(v, lane);
    float r = v[0];
#pragma unroll
    for (int m = NV; m < 32; m <<= 1) r += __shfl_xor_sync(FULL, r, m);
    return r;
}

/* raw staged k, q (bf16, (rows, 2N)) -> float rows k | q | k^2 | kappa; ends synchronized */
template <int N, bool WARP_ONLY>
__device__ __forceinline__ void convert_kq(float *kq, const bf16 *raw, int rows, int tid, int nthreads) {
    constexpr int KQW = KQ<N>::W;
    for (int idx = tid; idx < rows * 2 * N; idx += nthreads) {
        int r = idx / (2 * N), c = idx - r * 2 * N;
        float v = bf2f(raw[idx]);
        kq[r * KQW + c] = v;
        if (c < N) kq[r * KQW + 2 * N + c] = v * v;
    }
    if (WARP_ONLY) __syncwarp(); else __syncthreads();
    for (int r = tid; r < rows; r += nthreads) {
        float s = 0.0f;
#pragma unroll
        for (int n = 0; n < N; n++) s += kq[r * KQW + 2 * N + n];
        kq[r * KQW + 3 * N] = s;
    }
    if (WARP_ONLY) __syncwarp(); else __syncthreads();
}

__device__ __forceinline__ float softplusf_(float x) { return x > 20.0f ? x : log1pf(__expf(x)); }

/* One recurrence step of one direction: h <- a h + b; returns y = q.h + D u. */
template <int N, bool MAMBA>
__device__ __forceinline__ float step_fwd(float (&h)[N], const float *row, float u, float dl,
                                          const float (&A)[N], float Dsk) {
    const float4 *r4 = reinterpret_cast<const float4 *>(row);
    float y0 = 0.0f, y1 = 0.0f; /* two partial sums: a shorter dependency chain */
    if (!MAMBA) {
        float kap = row[3 * N];
        float beta = sigmoidf_fast(dl);
        float eps = beta * __frcp_rn(fmaf(beta, kap, 1.0f)), eu = eps * u;
#pragma unroll
        for (int g = 0; g < N / 4; g++) {
            float4 k4 = r4[g], q4 = r4[N / 4 + g], kk4 = r4[N / 2 + g];
            float k[4] = {k4.x, k4.y, k4.z, k4.w}, q[4] = {q4.x, q4.y, q4.z, q4.w};
            float kk[4] = {kk4.x, kk4.y, kk4.z, kk4.w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int n = 4 * g + e;
                h[n] = fmaf(fmaf(-eps, kk[e], 1.0f), h[n], eu * k[e]);
                if (e & 1) y1 = fmaf(q[e], h[n], y1);
                else y0 = fmaf(q[e], h[n], y0);
            }
        }
    } else {
        float dt = softplusf_(dl), dtu = dt * u;
#pragma unroll
        for (int g = 0; g < N / 4; g++) {
            float4 k4 = r4[g], q4 = r4[N / 4 + g];
            float k[4] = {k4.x, k4.y, k4.z, k4.w}, q[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int n = 4 * g + e;
                h[n] = fmaf(__expf(dt * A[n]), h[n], dtu * k[e]);
                if (e & 1) y1 = fmaf(q[e], h[n], y1);
                else y0 = fmaf(q[e], h[n], y0);
            }
        }
    }
    return fmaf(Dsk, u, y0 + y1);
}

/* ---------------- the pair kernel: both directions per thread ---------------- */
/* staged per-step inputs of the pair kernel, rows of TPB channels: u0 dl0 u1 dl1 z0 z1 [go0 go1]
 * where 0 is token s (forward direction) and 1 token L-1-s (backward direction) */
template <bool BWD>
struct PairQ {
    static constexpr int NQ = BWD ? 8 : 6;
};

template <int N, bool MAMBA, bool BWD>
__global__ void __launch_bounds__(64) scan_pair_kernel(ScanArgs a) {
    constexpr int KQW = KQ<N>::W, NQ = PairQ<BWD>::NQ;
    extern __shared__ float4 smem4[];
    const int TPB = blockDim.x, L = a.L, E = a.E;
    float *stash = reinterpret_cast<float *>(smem4);          /* (L, TPB) first-visit outputs */
    float *kq = stash + (size_t)L * TPB;                       /* (2, CKS, KQW) */
    float *red = kq + 2 * CKS * KQW;                           /* (TPB/32, CKS, 2N) dq sums */
    bf16 *stage = reinterpret_cast<bf16 *>(red + (BWD ? (TPB / 32) * CKS * 2 * N : 0));
    const int act_elems = NQ * CKS * TPB, x_elems = 2 * CKS * 2 * N;
    const int buf_elems = act_elems + x_elems;                /* act rows, then k|q rows */
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int b = blockIdx.y, c0 = blockIdx.x * TPB, d = c0 + tid;
    bool act = d < E;
    float h[2][N], A[2][N], Dsk[2];
#pragma unroll
    for (int j = 0; j < 2; j++) {
        Dsk[j] = act ? a.Dsk[j][d] : 0.0f;
#pragma unroll
        for (int n = 0; n < N; n++) {
            h[j][n] = 0.0f;
            A[j][n] = (MAMBA && act) ? -expf(a.A_log[j][(size_t)d * N + n]) : 0.0f;
        }
    }
    auto issue = [&](int s0, int cs, bf16 *dst) {
        queue_rows(dst, NQ * cs, TPB, 2, c0, E, a.vec_act, [&](int r) -> const void * {
            int q = r / cs, i = r - q * cs, s = s0 + i;
            int t = (q == 0 || q == 1 || q == 4 || q == 6) ? s : L - 1 - s;
            const bf16 *base = q == 0 ? a.u[0] : q == 1 ? a.delta[0] : q == 2 ? a.u[1]
                             : q == 3 ? a.delta[1] : (q == 4 || q == 5) ? a.z : a.dout;
            size_t ld = (q == 4 || q == 5) ? (size_t)a.ldz : (size_t)E;
            return base + ((size_t)b * L + t) * ld + c0;
        }, tid, TPB);
        /* rows packed (q, i) with stride cs; then the k|q rows (direction, i) */
        queue_rows(dst + act_elems, 2 * cs, 2 * N, 2, 0, 2 * N, a.vec_x, [&](int r) -> const void * {
            int jj = r / cs, i = r - jj * cs, s = s0 + i, t = jj ? L - 1 - s : s;
            return a.xdbl[jj] + ((size_t)b * L + t) * a.W + a.R;
        }, tid, TPB);
    };
    int nch = (L + CKS - 1) / CKS;
    issue(0, min(CKS, L), stage);
    cp_commit();
    for (int ch = 0; ch < nch; ch++) {
        int s0 = ch * CKS, cs = min(CKS, L - s0);
        if (ch + 1 < nch) {
            issue(s0 + CKS, min(CKS, L - s0 - CKS), stage + ((ch + 1) & 1) * buf_elems);
            cp_commit();
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        const bf16 *st = stage + (ch & 1) * buf_elems;
        convert_kq<N, false>(kq, st + act_elems, 2 * cs, tid, TPB);
        for (int i = 0; i < cs; i++) {
            int s = s0 + i, t0 = s, t1 = L - 1 - s;
            /* rows are packed (q, i) with stride cs */
            auto in = [&](int q) { return bf2f(st[(size_t)(q * cs + i) * TPB + tid]); };
            float y[2];
            y[0] = step_fwd<N, MAMBA>(h[0], kq + i * KQW, in(0), in(1), A[0], Dsk[0]);
            y[1] = step_fwd<N, MAMBA>(h[1], kq + (cs + i) * KQW, in(2), in(3), A[1], Dsk[1]);
            float zz[2] = {in(4), in(5)}, sg[2], go[2] = {0.0f, 0.0f};
            sg[0] = sigmoidf_fast(zz[0]), sg[1] = sigmoidf_fast(zz[1]);
            if (BWD) {
                go[0] = 0.5f * in(6), go[1] = 0.5f * in(7);
                /* dq_t[n] = sum_d gy_t[d] h_t[d, n]: both directions' 2N values in one pass */
                float v[2 * N];
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    float gy = go[j] * zz[j] * sg[j];
#pragma unroll
                    for (int n = 0; n < N; n++) v[j * N + n] = gy * h[j][n];
                }
                float r = reduce_scatter<2 * N>(v, lane);
                if (lane < 2 * N) red[(warp * CKS + i) * 2 * N + lane] = r;
            }
            /* pair the two directions' outputs of each token */
            if (s < t1) {
                stash[(size_t)t0 * TPB + tid] = y[0];
                stash[(size_t)t1 * TPB + tid] = y[1];
            } else if (act) {
                float tot[2];
                int nt = s == t1 ? 1 : 2; /* the middle token (odd L) is visited once by both */
                if (nt == 1) tot[0] = y[0] + y[1];
                else tot[0] = y[0] + stash[(size_t)t0 * TPB + tid], tot[1] = y[1] + stash[(size_t)t1 * TPB + tid];
#pragma unroll
                for (int k = 0; k < 2; k++) {
                    if (k >= nt) break;
                    size_t r = (size_t)b * L + (k ? t1 : t0);
                    if (!BWD) {
                        a.out[r * E + d] = f2bf(0.5f * zz[k] * sg[k] * tot[k]);
                    } else {
                        float dsilu = sg[k] * (1.0f + zz[k] * (1.0f - sg[k]));
                        a.dz[r * a.ldz + d] = f2bf(go[k] * dsilu * tot[k]);
                    }
                }
            }
        }
        if (BWD) {
            int e = s0 + cs; /* the state after this chunk starts CK-chunk e / CK */
            if (e % CK == 0 && e < L && act) {
                int c = e / CK;
#pragma unroll
                for (int j = 0; j < 2; j++)
#pragma unroll
                    for (int n = 0; n < N; n++)
                        a.ckpt[((((size_t)b * 2 + j) * (a.nck - 1) + (c - 1)) * N + n) * E + d] = h[j][n];
            }
            __syncthreads();
            int nw = TPB / 32;
            for (int idx = tid; idx < cs * 2 * N; idx += TPB) {
                int i = idx / (2 * N), c = idx - i * 2 * N, j = c / N, n = c - j * N;
                float sum = 0.0f;
                for (int w = 0; w < nw; w++) sum += red[(w * CKS + i) * 2 * N + c];
                int t = j ? L - 1 - (s0 + i) : s0 + i;
                a.pq[((((size_t)b * a.nblk1 + blockIdx.x) * 2 + j) * L + t) * N + n] = sum;
            }
        }
        __syncthreads(); /* buf[ch & 1], kq and red are free for the next chunk */
    }
}

/* ---------------- the adjoint kernel: one warp, one direction, 32 channels ---------------- */
/* staged per-step inputs: u dl z go rows of 32 channels, k|q rows, checkpoint rows (N, 32) */
template <int N, bool MAMBA>
__global__ void __launch_bounds__(32) scan_adjoint_kernel(ScanArgs a) {
    constexpr int KQW = KQ<N>::W, N4 = N / 4, T = 32;
    extern __shared__ float4 smem4[];
    const int L = a.L, E = a.E;
    float4 *hist = smem4;                                          /* (CK, N/4, 32) */
    float *kq = reinterpret_cast<float *>(smem4 + CK * N4 * T);    /* (CK, KQW) */
    float *ckb = kq + CK * KQW;                                    /* (2, N, 32) */
    bf16 *stage = reinterpret_cast<bf16 *>(ckb + 2 * N * T);
    const int act_elems = 4 * CK * T, x_elems = CK * 2 * N, buf_elems = act_elems + x_elems;
    int lane = threadIdx.x;
    int j = blockIdx.y, b = blockIdx.z, c0 = blockIdx.x * T, d = c0 + lane;
    bool act = d < E;
    float Dsk = act ? a.Dsk[j][d] : 0.0f;
    float A[N], lam[N], anext[N], dAacc[N], dDacc = 0.0f;
#pragma unroll
    for (int n = 0; n < N; n++) {
        A[n] = (MAMBA && act) ? -expf(a.A_log[j][(size_t)d * N + n]) : 0.0f;
        lam[n] = anext[n] = dAacc[n] = 0.0f;
    }
    auto issue = [&](int c, int slot) {
        int s0 = c * CK, cs = min(CK, L - s0);
        bf16 *dst = stage + slot * buf_elems;
        queue_rows(dst, 4 * cs, T, 2, c0, E, a.vec_act, [&](int r) -> const void * {
            int q = r / cs, i = r - q * cs, s = s0 + i, t = j ? L - 1 - s : s;
            const bf16 *base = q == 0 ? a.u[j] : q == 1 ? a.delta[j] : q == 2 ? a.z : a.dout;
            size_t ld = q == 2 ? (size_t)a.ldz : (size_t)E;
            return base + ((size_t)b * L + t) * ld + c0;
        }, lane, T);
        queue_rows(dst + act_elems, cs, 2 * N, 2, 0, 2 * N, a.vec_x, [&](int r) -> const void * {
            int s = s0 + r, t = j ? L - 1 - s : s;
            return a.xdbl[j] + ((size_t)b * L + t) * a.W + a.R;
        }, lane, T);
        if (c > 0)
            queue_rows(ckb + slot * N * T, N, T, 4, c0, E, a.vec_ck, [&](int n) -> const void * {
                return a.ckpt + ((((size_t)b * 2 + j) * (a.nck - 1) + (c - 1)) * N + n) * E + c0;
            }, lane, T);
    };
    issue(a.nck - 1, 0);
    cp_commit();
    for (int c = a.nck - 1, it = 0; c >= 0; c--, it++) {
        int s0 = c * CK, cs = min(CK, L - s0), slot = it & 1;
        if (c > 0) {
            issue(c - 1, slot ^ 1);
            cp_commit();
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncwarp();
        const bf16 *st = stage + slot * buf_elems;
        convert_kq<N, true>(kq, st + act_elems, cs, lane, T);
        auto in = [&](int q, int i) { return bf2f(st[(size_t)(q * cs + i) * T + lane]); };
        float h0[N], h[N];
#pragma unroll
        for (int n = 0; n < N; n++) {
            h0[n] = (c > 0) ? ckb[(slot * N + n) * T + lane] : 0.0f;
            h[n] = h0[n];
        }
        /* recompute the chunk's states: hist[i] = h after step s0 + i */
        for (int i = 0; i < cs; i++) {
            step_fwd<N, MAMBA>(h, kq + i * KQW, in(0, i), in(1, i), A, Dsk);
#pragma unroll
            for (int g = 0; g < N4; g++)
                hist[(i * N4 + g) * T + lane] = make_float4(h[4 * g], h[4 * g + 1], h[4 * g + 2], h[4 * g + 3]);
        }
        __syncwarp();
        /* reverse adjoint scan over the chunk */
        for (int i = cs - 1; i >= 0; i--) {
            int s = s0 + i, t = j ? L - 1 - s : s;
            size_t r = (size_t)b * L + t;
            float u = in(0, i), dl = in(1, i), zv = in(2, i);
            float gy = 0.5f * in(3, i) * zv * sigmoidf_fast(zv);
            float hp[N];
            if (i > 0) {
#pragma unroll
                for (int g = 0; g < N4; g++) {
                    float4 v = hist[((i - 1) * N4 + g) * T + lane];
                    hp[4 * g] = v.x, hp[4 * g + 1] = v.y, hp[4 * g + 2] = v.z, hp[4 * g + 3] = v.w;
                }
            } else {
#pragma unroll
                for (int n = 0; n < N; n++) hp[n] = h0[n];
            }
            const float *row = kq + i * KQW;
            const float4 *r4 = reinterpret_cast<const float4 *>(row);
            float dkv[N], du, ddl;
            float S1 = 0.0f, S2 = 0.0f;
            if (!MAMBA) {
                float kap = row[3 * N];
                float beta = sigmoidf_fast(dl);
                float rden = __frcp_rn(fmaf(beta, kap, 1.0f)), eps = beta * rden;
#pragma unroll
                for (int g = 0; g < N4; g++) {
                    float4 k4 = r4[g], q4 = r4[N4 + g], kk4 = r4[2 * N4 + g];
                    float k[4] = {k4.x, k4.y, k4.z, k4.w}, q[4] = {q4.x, q4.y, q4.z, q4.w};
                    float kk[4] = {kk4.x, kk4.y, kk4.z, kk4.w};
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int n = 4 * g + e;
                        float l = fmaf(anext[n], lam[n], gy * q[e]);
                        lam[n] = l;
                        S1 = fmaf(l, k[e], S1);              /* sum_n lam k */
                        S2 = fmaf(l * hp[n], kk[e], S2);     /* sum_n lam k^2 h_{t-1} */
                        dkv[n] = l * eps * fmaf(-2.0f * k[e], hp[n], u);
                        anext[n] = fmaf(-eps, kk[e], 1.0f);  /* a_t, used at step t-1 */
                    }
                }
                du = fmaf(gy, Dsk, eps * S1);
                float deps = fmaf(u, S1, -S2); /* sum_n lam (u k - k^2 h_{t-1}) */
                float rden2 = rden * rden;
                ddl = deps * rden2 * beta * (1.0f - beta);
                float dkap = -deps * beta * beta * rden2;
                /* dk += 2 k dkappa, folded in per channel before the sum over channels */
#pragma unroll
                for (int g = 0; g < N4; g++) {
                    float4 k4 = r4[g];
                    float k[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
                    for (int e = 0; e < 4; e++) dkv[4 * g + e] = fmaf(2.0f * k[e], dkap, dkv[4 * g + e]);
                }
            } else {
                float dt = softplusf_(dl), dtu = dt * u;
#pragma unroll
                for (int g = 0; g < N4; g++) {
                    float4 k4 = r4[g], q4 = r4[N4 + g];
                    float k[4] = {k4.x, k4.y, k4.z, k4.w}, q[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int n = 4 * g + e;
                        float acur = __expf(dt * A[n]);
                        float l = fmaf(anext[n], lam[n], gy * q[e]);
                        lam[n] = l;
                        float X = l * hp[n];
                        S1 = fmaf(l, k[e], S1);                     /* sum_n lam B */
                        S2 = fmaf(A[n] * acur, X, S2);              /* sum_n lam A a h_{t-1} */
                        dAacc[n] = fmaf(dt * acur, X, dAacc[n]);
                        dkv[n] = l * dtu;                           /* dB */
                        anext[n] = acur;
                    }
                }
                du = fmaf(gy, Dsk, dt * S1);
                ddl = fmaf(u, S1, S2) * sigmoidf_fast(dl);
            }
            if (act) {
                a.du[j][r * E + d] = f2bf(du);
                a.ddelta[j][r * E + d] = f2bf(ddl);
            }
            dDacc = fmaf(gy, u, dDacc);
            float sum = reduce_scatter<N>(dkv, lane);
            if (lane < N) a.pk[((((size_t)b * 2 + j) * a.nblk2 + blockIdx.x) * L + t) * N + lane] = sum;
        }
        __syncwarp(); /* buf[slot], hist and kq are free for the next chunk */
    }
    if (act) {
        a.pd[((size_t)b * 2 + j) * E + d] = dDacc;
        if (MAMBA)
#pragma unroll
            for (int n = 0; n < N; n++) a.pa[(((size_t)b * 2 + j) * E + d) * N + n] = dAacc[n] * A[n];
    }
}

/* ---------------- finalize: partial sums in a fixed order ---------------- */
template <int N>
__global__ void scan_dkdq_kernel(ScanArgs a) {
    size_t tot = (size_t)a.B * 2 * a.L * N;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < tot; idx += (size_t)gridDim.x * blockDim.x) {
        int n = (int)(idx % N);
        size_t r = idx / N;
        int t = (int)(r % a.L);
        r /= a.L;
        int j = (int)(r % 2), b = (int)(r / 2);
        float dq = 0.0f, dk = 0.0f;
        for (int k = 0; k < a.nblk1; k++) dq += a.pq[((((size_t)b * a.nblk1 + k) * 2 + j) * a.L + t) * N + n];
        for (int k = 0; k < a.nblk2; k++) dk += a.pk[((((size_t)b * 2 + j) * a.nblk2 + k) * a.L + t) * N + n];
        bf16 *row = a.dxdbl[j] + ((size_t)b * a.L + t) * a.W + a.R;
        row[n] = f2bf(dk);
        row[N + n] = f2bf(dq);
    }
}

/* ---------------- host side ---------------- */
static size_t pair_smem(int N, int L, int tpb, int bwd) {
    int nq = bwd ? 8 : 6;
    size_t fl = (size_t)L * tpb + 2 * CKS * (3 * N + 4) + (bwd ? (size_t)(tpb / 32) * CKS * 2 * N : 0);
    size_t st = 2 * ((size_t)nq * CKS * tpb + 2 * CKS * 2 * N); /* bf16, double-buffered */
    return fl * sizeof(float) + st * sizeof(bf16);
}
static size_t adjoint_smem(int N) {
    size_t fl = (size_t)CK * N * 32 + CK * (3 * N + 4) + 2 * (size_t)N * 32;
    size_t st = 2 * ((size_t)4 * CK * 32 + CK * 2 * N);
    return fl * sizeof(float) + st * sizeof(bf16);
}

/* the stash grows with L: 64 threads a block while three blocks fit an SM, else 32 */
static int pair_tpb(int N, int L, int bwd) {
    if (pair_smem(N, L, 64, bwd) <= (size_t)74 << 10) return 64;
    if (pair_smem(N, L, 32, bwd) <= g_cu.smem_optin) return 32;
    VIL_FATAL("scan: L = %d tokens is over what the scan kernel's shared-memory stash holds", L);
}

/* largest copy size (16, 8, 4 bytes; 2 = plain loads) dividing every row start */
static int vec_bytes(const void *const *ptrs, int np, const size_t *strides_bytes, int ns) {
    size_t acc = 16;
    for (int i = 0; i < np; i++) acc |= (size_t)ptrs[i];
    for (int i = 0; i < ns; i++) acc |= strides_bytes[i];
    size_t low = acc & (~acc + 1);
    return low >= 16 ? 16 : low >= 8 ? 8 : low >= 4 ? 4 : 2;
}

template <typename K>
static void set_smem(K kernel, size_t bytes) {
    if (bytes > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

static void fill_common(ScanArgs *a, const void *const u[2], const void *const delta[2],
                        const void *const xdbl[2], const void *z, const void *dout,
                        const float *const D[2], const float *const A_log[2], int B, int L, int E,
                        int N, int R, int ldz) {
    memset(a, 0, sizeof *a);
    for (int j = 0; j < 2; j++) {
        a->u[j] = (const bf16 *)u[j];
        a->delta[j] = (const bf16 *)delta[j];
        a->xdbl[j] = (const bf16 *)xdbl[j];
        a->Dsk[j] = D[j];
        a->A_log[j] = A_log ? A_log[j] : NULL;
    }
    a->z = (const bf16 *)z;
    a->dout = (const bf16 *)dout;
    a->B = B, a->L = L, a->E = E, a->R = R, a->W = R + 2 * N, a->ldz = ldz;
    a->nck = (L + CK - 1) / CK;
    /* act rows start at (row * ld + block * tpb) elements */
    const void *pa[6] = {u[0], u[1], delta[0], delta[1], z, dout ? dout : z};
    size_t sa[3] = {(size_t)E * 2, (size_t)ldz * 2, (size_t)32 * 2};
    a->vec_act = vec_bytes(pa, 6, sa, 3);
    const void *px[2] = {(const bf16 *)xdbl[0] + R, (const bf16 *)xdbl[1] + R};
    size_t sx[1] = {(size_t)a->W * 2};
    a->vec_x = vec_bytes(px, 2, sx, 1);
    size_t sc[1] = {(size_t)E * 4};
    const void *pc[1] = {NULL};
    a->vec_ck = vec_bytes(pc, 1, sc, 1) >= 16 ? 16 : 4;
}

template <int N, bool MAMBA>
static void forward_impl(ScanArgs a) {
    int tpb = pair_tpb(N, a.L, 0);
    size_t sm = pair_smem(N, a.L, tpb, 0);
    set_smem(scan_pair_kernel<N, MAMBA, false>, sm);
    dim3 grid((a.E + tpb - 1) / tpb, a.B);
    scan_pair_kernel<N, MAMBA, false><<<grid, tpb, sm, g_cu.stream>>>(a);
    CU_LAUNCH_CHECK();
}

template <int N, bool MAMBA>
static void backward_impl(ScanArgs a) {
    int tpb1 = pair_tpb(N, a.L, 1);
    a.nblk1 = (a.E + tpb1 - 1) / tpb1;
    a.nblk2 = (a.E + 31) / 32;
    size_t B = a.B, L = a.L, E = a.E;
    a.ckpt = (float *)cu_scratch(SCR_SCAN_CKPT, B * 2 * (a.nck > 1 ? a.nck - 1 : 1) * N * E * sizeof(float));
    a.pq = (float *)cu_scratch(SCR_SCAN_PQ, B * a.nblk1 * 2 * L * N * sizeof(float));
    a.pk = (float *)cu_scratch(SCR_SCAN_PK, B * 2 * a.nblk2 * L * N * sizeof(float));
    float *pd = (float *)cu_scratch(SCR_SCAN_PD, B * 2 * E * (MAMBA ? N + 1 : 1) * sizeof(float));
    a.pd = pd;
    a.pa = pd + B * 2 * E;
    /* checkpoint rows: (row * E + block * 32) floats; the scratch base is 4 KB aligned */
    size_t sm1 = pair_smem(N, a.L, tpb1, 1), sm2 = adjoint_smem(N);
    set_smem(scan_pair_kernel<N, MAMBA, true>, sm1);
    set_smem(scan_adjoint_kernel<N, MAMBA>, sm2);
    scan_pair_kernel<N, MAMBA, true><<<dim3(a.nblk1, a.B), tpb1, sm1, g_cu.stream>>>(a);
    CU_LAUNCH_CHECK();
    scan_adjoint_kernel<N, MAMBA><<<dim3(a.nblk2, 2, a.B), 32, sm2, g_cu.stream>>>(a);
    CU_LAUNCH_CHECK();
    size_t tot = B * 2 * L * N;
    int blocks = cu_blocks(tot, 256);
    if (blocks > g_cu.num_sms * 16) blocks = g_cu.num_sms * 16;
    scan_dkdq_kernel<N><<<blocks, 256, 0, g_cu.stream>>>(a);
    CU_LAUNCH_CHECK();
    /* dD[j] (+ dA_log[j]) += the per-sample partials, summed in sample order */
    for (int j = 0; j < 2; j++) {
        colsum_rows_accumulate_cuda(a.dD[j], a.pd + (size_t)j * E, (int)B, (int)E, (int)(2 * E));
        if (MAMBA)
            colsum_rows_accumulate_cuda(a.dA[j], a.pa + (size_t)j * E * N, (int)B, (int)(E * N), (int)(2 * E * N));
    }
}

#define DISPATCH_N(N_, MAMBA_, FN, ARG)                                                        \
    do {                                                                                       \
        if ((N_) == 16) { if (MAMBA_) FN<16, true>(ARG); else FN<16, false>(ARG); }            \
        else if ((N_) == 8) { if (MAMBA_) FN<8, true>(ARG); else FN<8, false>(ARG); }          \
        else if ((N_) == 4) { if (MAMBA_) FN<4, true>(ARG); else FN<4, false>(ARG); }          \
        else VIL_FATAL("scan: d_state = %d; the CUDA scan is built for 4, 8 and 16", (N_));     \
    } while (0)

extern "C" void scan_bidir_forward_cuda(void *out, const void *const u[2],
                                        const void *const delta[2], const void *const xdbl[2],
                                        const void *z, const float *const D[2],
                                        const float *const A_log[2], int B, int L, int E, int N,
                                        int R, int ldz) {
    cu_ensure_init();
    ScanArgs a;
    fill_common(&a, u, delta, xdbl, z, NULL, D, A_log, B, L, E, N, R, ldz);
    a.out = (bf16 *)out;
    DISPATCH_N(N, A_log != NULL, forward_impl, a);
}

extern "C" void scan_bidir_backward_cuda(void *const du[2], void *const ddelta[2],
                                         void *const dxdbl[2], void *dz, float *const dD[2],
                                         float *const dA_log[2], const void *dout,
                                         const void *const u[2], const void *const delta[2],
                                         const void *const xdbl[2], const void *z,
                                         const float *const D[2], const float *const A_log[2],
                                         int B, int L, int E, int N, int R, int ldz) {
    cu_ensure_init();
    ScanArgs a;
    fill_common(&a, u, delta, xdbl, z, dout, D, A_log, B, L, E, N, R, ldz);
    a.dz = (bf16 *)dz;
    for (int j = 0; j < 2; j++) {
        a.du[j] = (bf16 *)du[j];
        a.ddelta[j] = (bf16 *)ddelta[j];
        a.dxdbl[j] = (bf16 *)dxdbl[j];
        a.dD[j] = dD[j];
        a.dA[j] = dA_log ? dA_log[j] : NULL;
    }
    DISPATCH_N(N, A_log != NULL, backward_impl, a);
}
