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

/* Queue the copy of nrows rows of `width` elements (esz bytes each) starting at channel c0
 * (valid below E; zero-filled past it). Row r = q * per_q + i comes from src_row(r) and lands
 * at dst row q * stride + i, so each quantity q owns a fixed block of `stride` rows. */
template <typename RowFn>
__device__ __forceinline__ void queue_rows(void *dst, int nrows, int width, int esz, int c0, int E,
                                           int vb, RowFn src_row, int tid, int nthreads,
                                           int per_q, int stride = 0) {
    int pieces = width * esz / vb, per = vb / esz;
    if (stride == 0) stride = per_q;
    for (int job = tid; job < nrows * pieces; job += nthreads) {
        int r = job / pieces, p = job - r * pieces;
        int q = r / per_q, i = r - q * per_q;
        int c = c0 + p * per;
        int valid = min(max(E - c, 0), per) * esz;
        const char *row = (const char *)src_row(r);
        char *dd = (char *)dst + ((size_t)(q * stride + i) * width + p * per) * esz;
        copy_piece(dd, valid > 0 ? row + (size_t)p * vb : row, vb, valid);
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

/* raw staged k, q (bf16 rows (jj * stride + i, 2N)) -> float rows k | q | k^2 | kappa at the
 * same row index, for nd directions of cs steps; ends synchronized */
template <int N, bool WARP_ONLY>
__device__ __forceinline__ void convert_kq(float *kq, const bf16 *raw, int nd, int cs, int stride,
                                           int tid, int nthreads) {
    constexpr int KQW = KQ<N>::W;
    for (int idx = tid; idx < nd * cs * 2 * N; idx += nthreads) {
        int r = idx / (2 * N), c = idx - r * 2 * N;
        int jj = r / cs, i = r - jj * cs, row = jj * stride + i;
        float v = bf2f(raw[row * 2 * N + c]);
        kq[row * KQW + c] = v;
        if (c < N) kq[row * KQW + 2 * N + c] = v * v;
    }
    if (WARP_ONLY) __syncwarp(); else __syncthreads();
    for (int r = tid; r < nd * cs; r += nthreads) {
        int jj = r / cs, i = r - jj * cs, row = jj * stride + i;
        float s = 0.0f;
#pragma unroll
        for (int n = 0; n < N; n++) s += kq[row * KQW + 2 * N + n];
        kq[row * KQW + 3 * N] = s;
    }
    if (WARP_ONLY) __syncwarp(); else __syncthreads();
}

__device__ __forceinline__ float softplusf_(float x) { return x > 20.0f ? x : log1pf(__expf(x)); }

/* The per-step scalars of one direction, which do not depend on the state (so a chunk's worth
 * can be computed ahead of the state updates): Longhorn eps and eps*u (kappa from the k row),
 * Mamba dt and dt*u. A masked-out step gets 0, 0: the state passes through unchanged. */
template <int N, bool MAMBA>
__device__ __forceinline__ void step_pre(float &p0, float &p1, const float *row, float u, float dl) {
    if (!MAMBA) {
        float kap = row[3 * N];
        float beta = sigmoidf_fast(dl);
        p0 = beta * __frcp_rn(fmaf(beta, kap, 1.0f));
        p1 = p0 * u;
    } else {
        p0 = softplusf_(dl);
        p1 = p0 * u;
    }
}

/* h <- a h + b with the step's scalars; returns q.h (the D skip is added by the caller) */
template <int N, bool MAMBA>
__device__ __forceinline__ float step_upd(float (&h)[N], const float *row, float p0, float p1,
                                          const float (&A)[N]) {
    const float4 *r4 = reinterpret_cast<const float4 *>(row);
    float y[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* partial sums: a short dependency chain */
#pragma unroll
    for (int g = 0; g < N / 4; g++) {
        float4 k4 = r4[g], q4 = r4[N / 4 + g];
        float k[4] = {k4.x, k4.y, k4.z, k4.w}, q[4] = {q4.x, q4.y, q4.z, q4.w};
        float kk[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (!MAMBA) {
            float4 kk4 = r4[N / 2 + g];
            kk[0] = kk4.x, kk[1] = kk4.y, kk[2] = kk4.z, kk[3] = kk4.w;
        }
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int n = 4 * g + e;
            float a = MAMBA ? __expf(p0 * A[n]) : fmaf(-p0, kk[e], 1.0f);
            h[n] = fmaf(a, h[n], p1 * k[e]);
            y[e] = fmaf(q[e], h[n], y[e]);
        }
    }
    return (y[0] + y[1]) + (y[2] + y[3]);
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
    /* rows past a short last chunk are read (masked): keep them finite */
    for (int i = tid; i < 2 * CKS * KQW; i += TPB) kq[i] = 0.0f;
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
        /* rows packed (q, i) with stride CKS; then the k|q rows (direction, i) */
        queue_rows(dst, NQ * cs, TPB, 2, c0, E, a.vec_act, [&](int r) -> const void * {
            int q = r / cs, i = r - q * cs, s = s0 + i;
            int t = (q == 0 || q == 1 || q == 4 || q == 6) ? s : L - 1 - s;
            const bf16 *base = q == 0 ? a.u[0] : q == 1 ? a.delta[0] : q == 2 ? a.u[1]
                             : q == 3 ? a.delta[1] : (q == 4 || q == 5) ? a.z : a.dout;
            size_t ld = (q == 4 || q == 5) ? (size_t)a.ldz : (size_t)E;
            return base + ((size_t)b * L + t) * ld + c0;
        }, tid, TPB, cs, CKS);
        queue_rows(dst + act_elems, 2 * cs, 2 * N, 2, 0, 2 * N, a.vec_x, [&](int r) -> const void * {
            int jj = r / cs, i = r - jj * cs, s = s0 + i, t = jj ? L - 1 - s : s;
            return a.xdbl[jj] + ((size_t)b * L + t) * a.W + a.R;
        }, tid, TPB, cs, CKS);
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
        convert_kq<N, false>(kq, st + act_elems, 2, cs, CKS, tid, TPB);
        auto in = [&](int q, int i) { return bf2f(st[(size_t)(q * CKS + i) * TPB + tid]); };
        /* phase 1: the state-independent scalars of every step of the chunk */
        float uu[2][CKS], p0[2][CKS], p1[2][CKS];
#pragma unroll
        for (int i = 0; i < CKS; i++) {
            bool on = i < cs;
#pragma unroll
            for (int j = 0; j < 2; j++) {
                uu[j][i] = on ? in(2 * j, i) : 0.0f;
                float dl = on ? in(2 * j + 1, i) : 0.0f;
                step_pre<N, MAMBA>(p0[j][i], p1[j][i], kq + (j * CKS + i) * KQW, uu[j][i], dl);
                if (!on) p0[j][i] = 0.0f, p1[j][i] = 0.0f;
            }
        }
        /* phase 2: the recurrences (only h -> h is serial) */
        float y[2][CKS];
#pragma unroll
        for (int i = 0; i < CKS; i++) {
#pragma unroll
            for (int j = 0; j < 2; j++)
                y[j][i] = fmaf(Dsk[j], uu[j][i], step_upd<N, MAMBA>(h[j], kq + (j * CKS + i) * KQW, p0[j][i], p1[j][i], A[j]));
            if (BWD) {
                /* dq_t[n] = sum_d gy_t[d] h_t[d, n]: both directions' 2N values in one pass */
                float v[2 * N];
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    float zz = i < cs ? in(4 + j, i) : 0.0f, go = i < cs ? 0.5f * in(6 + j, i) : 0.0f;
                    float gy = go * zz * sigmoidf_fast(zz);
#pragma unroll
                    for (int n = 0; n < N; n++) v[j * N + n] = gy * h[j][n];
                }
                float r = reduce_scatter<2 * N>(v, lane);
                if (lane < 2 * N) red[(warp * CKS + i) * 2 * N + lane] = r;
            }
        }
        /* phase 3: pair the two directions' outputs of each token */
#pragma unroll
        for (int i = 0; i < CKS; i++) {
            if (i >= cs) break;
            int s = s0 + i, t0 = s, t1 = L - 1 - s;
            if (s < t1) {
                stash[(size_t)t0 * TPB + tid] = y[0][i];
                stash[(size_t)t1 * TPB + tid] = y[1][i];
            } else if (act) {
                float tot[2];
                int nt = s == t1 ? 1 : 2; /* the middle token (odd L) is visited once by both */
                if (nt == 1) tot[0] = y[0][i] + y[1][i];
                else tot[0] = y[0][i] + stash[(size_t)t0 * TPB + tid], tot[1] = y[1][i] + stash[(size_t)t1 * TPB + tid];
#pragma unroll
                for (int k = 0; k < 2; k++) {
                    if (k >= nt) break;
                    size_t r = (size_t)b * L + (k ? t1 : t0);
                    float zz = in(4 + k, i), sg = sigmoidf_fast(zz);
                    if (!BWD) {
                        a.out[r * E + d] = f2bf(0.5f * zz * sg * tot[k]);
                    } else {
                        float dsilu = sg * (1.0f + zz * (1.0f - sg));
                        a.dz[r * a.ldz + d] = f2bf(0.5f * in(6 + k, i) * dsilu * tot[k]);
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
        __syncthreads(); /* this buffer, kq and red are free for the next chunk */
    }
}

/* ---------------- the adjoint kernel: one warp, one direction, 32 channels ---------------- */
/* One reverse step's arithmetic (no memory traffic): updates lam and anext, returns du, ddelta
 * and the per-channel dk (dB) contributions in dkv, with dkappa folded in. */
template <int N, bool MAMBA>
__device__ __forceinline__ void adj_step(float (&lam)[N], float (&anext)[N], float (&dAacc)[N],
                                         float (&dkv)[N], float &du, float &ddl,
                                         const float (&hp)[N], const float *row, float u, float dl,
                                         float gy, float Dsk, const float (&A)[N]) {
    constexpr int N4 = N / 4;
    const float4 *r4 = reinterpret_cast<const float4 *>(row);
    float S1[4] = {0.0f, 0.0f, 0.0f, 0.0f}, S2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
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
                S1[e] = fmaf(l, k[e], S1[e]);            /* sum_n lam k */
                S2[e] = fmaf(l * hp[n], kk[e], S2[e]);   /* sum_n lam k^2 h_{t-1} */
                dkv[n] = l * eps * fmaf(-2.0f * k[e], hp[n], u);
                anext[n] = fmaf(-eps, kk[e], 1.0f);      /* a_t, used at step t-1 */
            }
        }
        float s1 = (S1[0] + S1[1]) + (S1[2] + S1[3]), s2 = (S2[0] + S2[1]) + (S2[2] + S2[3]);
        du = fmaf(gy, Dsk, eps * s1);
        float deps = fmaf(u, s1, -s2); /* sum_n lam (u k - k^2 h_{t-1}) */
        float rden2 = rden * rden;
        ddl = deps * rden2 * beta * (1.0f - beta);
        float dkap2 = -2.0f * deps * beta * beta * rden2;
        /* dk += 2 k dkappa, folded in per channel before the sum over channels */
#pragma unroll
        for (int g = 0; g < N4; g++) {
            float4 k4 = r4[g];
            float k[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
            for (int e = 0; e < 4; e++) dkv[4 * g + e] = fmaf(k[e], dkap2, dkv[4 * g + e]);
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
                S1[e] = fmaf(l, k[e], S1[e]);               /* sum_n lam B */
                S2[e] = fmaf(A[n] * acur, X, S2[e]);        /* sum_n lam A a h_{t-1} */
                dAacc[n] = fmaf(dt * acur, X, dAacc[n]);
                dkv[n] = l * dtu;                           /* dB */
                anext[n] = acur;
            }
        }
        float s1 = (S1[0] + S1[1]) + (S1[2] + S1[3]), s2 = (S2[0] + S2[1]) + (S2[2] + S2[3]);
        du = fmaf(gy, Dsk, dt * s1);
        ddl = fmaf(u, s1, s2) * sigmoidf_fast(dl);
    }
}

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
    for (int i = lane; i < CK * KQW; i += T) kq[i] = 0.0f;
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
        }, lane, T, cs, CK);
        queue_rows(dst + act_elems, cs, 2 * N, 2, 0, 2 * N, a.vec_x, [&](int r) -> const void * {
            int s = s0 + r, t = j ? L - 1 - s : s;
            return a.xdbl[j] + ((size_t)b * L + t) * a.W + a.R;
        }, lane, T, cs, CK);
        if (c > 0)
            queue_rows(ckb + slot * N * T, N, T, 4, c0, E, a.vec_ck, [&](int n) -> const void * {
                return a.ckpt + ((((size_t)b * 2 + j) * (a.nck - 1) + (c - 1)) * N + n) * E + c0;
            }, lane, T, N);
    };
    float *pk = a.pk + (((size_t)b * 2 + j) * a.nblk2 + blockIdx.x) * L * N;
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
        convert_kq<N, true>(kq, st + act_elems, 1, cs, CK, lane, T);
        auto in = [&](int q, int i) { return bf2f(st[(size_t)(q * CK + i) * T + lane]); };
        float h0[N], h[N];
#pragma unroll
        for (int n = 0; n < N; n++) {
            h0[n] = (c > 0) ? ckb[(slot * N + n) * T + lane] : 0.0f;
            h[n] = h0[n];
        }
        /* recompute the chunk's states, hist[i] = h after step s0 + i; steps past cs are
         * masked (their state stays put and is never read) */
#pragma unroll
        for (int i = 0; i < CK; i++) {
            bool on = i < cs;
            float u = on ? in(0, i) : 0.0f, dl = on ? in(1, i) : 0.0f, p0, p1;
            step_pre<N, MAMBA>(p0, p1, kq + i * KQW, u, dl);
            if (!on) p0 = 0.0f, p1 = 0.0f;
            step_upd<N, MAMBA>(h, kq + i * KQW, p0, p1, A);
#pragma unroll
            for (int g = 0; g < N4; g++)
                hist[(i * N4 + g) * T + lane] = make_float4(h[4 * g], h[4 * g + 1], h[4 * g + 2], h[4 * g + 3]);
        }
        __syncwarp();
        auto load_hp = [&](int i, float (&hp)[N]) {
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
        };
        auto gy_of = [&](int i) {
            float zv = in(2, i);
            return 0.5f * in(3, i) * zv * sigmoidf_fast(zv);
        };
        auto emit = [&](int i, float du, float ddl, float (&dkv)[N], float gy, float u) {
            int s = s0 + i, t = j ? L - 1 - s : s;
            size_t r = (size_t)b * L + t;
            if (act) {
                a.du[j][r * E + d] = f2bf(du);
                a.ddelta[j][r * E + d] = f2bf(ddl);
            }
            dDacc = fmaf(gy, u, dDacc);
            float sum = reduce_scatter<N>(dkv, lane);
            if (lane < N) pk[(size_t)t * N + lane] = sum;
        };
        /* reverse adjoint scan over the chunk, two steps at a time so that one step's
         * reduction over the warp overlaps the next step's arithmetic */
        int i = cs - 1;
        if (cs & 1) {
            float hp[N], dkv[N], du, ddl, u = in(0, i), gy = gy_of(i);
            load_hp(i, hp);
            adj_step<N, MAMBA>(lam, anext, dAacc, dkv, du, ddl, hp, kq + i * KQW, u, in(1, i), gy, Dsk, A);
            emit(i, du, ddl, dkv, gy, u);
            i--;
        }
        for (; i > 0; i -= 2) {
            float hpa[N], hpb[N], dka[N], dkb[N], dua, dla, dub, dlb;
            float ua = in(0, i), ub = in(0, i - 1), ga = gy_of(i), gb = gy_of(i - 1);
            float la = in(1, i), lb = in(1, i - 1);
            load_hp(i, hpa);
            load_hp(i - 1, hpb);
            adj_step<N, MAMBA>(lam, anext, dAacc, dka, dua, dla, hpa, kq + i * KQW, ua, la, ga, Dsk, A);
            adj_step<N, MAMBA>(lam, anext, dAacc, dkb, dub, dlb, hpb, kq + (i - 1) * KQW, ub, lb, gb, Dsk, A);
            emit(i, dua, dla, dka, ga, ua);
            emit(i - 1, dub, dlb, dkb, gb, ub);
        }
        __syncwarp(); /* this buffer, hist and kq are free for the next chunk */
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
