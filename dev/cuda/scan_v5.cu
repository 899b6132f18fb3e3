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
        p0 = beta * rcp_fast(fmaf(beta, kap, 1.0f));
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

/* ---------------- the pair kernel: both directions per thread, one after the other ------------
 * Pass 1 runs the backward direction (token L-1-s at step s) and leaves its pre-gate output in
 * the output buffer itself (out, or dz in the backward prep), where it is hot in L2; pass 0 runs
 * the forward direction and combines: out = SiLU(z) (y_f + y_b) / 2. No shared-memory stash, one
 * direction's state live at a time: occupancy is set by registers, not by L. The stash holds
 * y_b in bf16, one more rounding (2^-9 relative to y_b) than an fp32 stash would give.
 * Staged rows per step: u dl z go ystash (those a pass needs), then the k|q row. */
#define PAIR_T 128
#define PAIR_NQ 5

template <int N, bool MAMBA, bool BWD>
__global__ void __launch_bounds__(PAIR_T) scan_pair_kernel(ScanArgs a) {
    constexpr int KQW = KQ<N>::W, NW = PAIR_T / 32, T = PAIR_T;
    constexpr int act_elems = PAIR_NQ * CKS * T, x_elems = CKS * 2 * N, buf_elems = act_elems + x_elems;
    __shared__ __align__(16) bf16 stage[2 * buf_elems];
    __shared__ __align__(16) float kq[CKS * KQW];
    __shared__ float red[BWD ? NW * CKS * N : 1];
    const int L = a.L, E = a.E;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int b = blockIdx.y, c0 = blockIdx.x * T, d = c0 + tid;
    bool act = d < E;
    for (int i = tid; i < CKS * KQW; i += T) kq[i] = 0.0f; /* rows past a short chunk stay finite */
    /* the stash: out (forward) or dz (backward prep) */
    bf16 *ys = BWD ? a.dz : a.out;
    size_t ldy = BWD ? (size_t)a.ldz : (size_t)E;
    int nch = (L + CKS - 1) / CKS;
    for (int pass = 0; pass < 2; pass++) {
        const int j = 1 - pass; /* the backward direction first */
        /* which staged rows this pass reads: u, dl always; z, go when the gate is needed */
        const bool need_z = BWD || j == 0, need_go = BWD, need_ys = j == 0;
        float h[N], A[N];
        float Dsk = act ? a.Dsk[j][d] : 0.0f;
#pragma unroll
        for (int n = 0; n < N; n++) {
            h[n] = 0.0f;
            A[n] = (MAMBA && act) ? -expf(a.A_log[j][(size_t)d * N + n]) : 0.0f;
        }
        auto issue = [&](int s0, int cs, bf16 *dst) {
            int nq = 2 + (need_z ? 1 : 0) + (need_go ? 1 : 0) + (need_ys ? 1 : 0);
            queue_rows(dst, nq * cs, T, 2, c0, E, a.vec_act, [&](int r) -> const void * {
                int q = r / cs, i = r - q * cs, s = s0 + i, t = j ? L - 1 - s : s;
                /* q counts the rows present: u, dl, [z], [go], [ys] */
                int kind = q < 2 ? q : q == 2 ? (need_z ? 2 : need_go ? 3 : 4) : q == 3 ? (need_go ? 3 : 4) : 4;
                const bf16 *base = kind == 0 ? a.u[j] : kind == 1 ? a.delta[j] : kind == 2 ? a.z
                                 : kind == 3 ? a.dout : ys;
                size_t ld = kind == 2 ? (size_t)a.ldz : kind == 4 ? ldy : (size_t)E;
                return base + ((size_t)b * L + t) * ld + c0;
            }, tid, T, cs, CKS);
            queue_rows(dst + act_elems, cs, 2 * N, 2, 0, 2 * N, a.vec_x, [&](int r) -> const void * {
                int s = s0 + r, t = j ? L - 1 - s : s;
                return a.xdbl[j] + ((size_t)b * L + t) * a.W + a.R;
            }, tid, T, cs, CKS);
        };
        /* staged row index of each kind (see issue) */
        const int rz = 2, rg = need_z ? 3 : 2, ry = 2 + (need_z ? 1 : 0) + (need_go ? 1 : 0);
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
            convert_kq<N, false>(kq, st + act_elems, 1, cs, CKS, tid, T);
            auto in = [&](int q, int i) { return bf2f(st[(size_t)(q * CKS + i) * T + tid]); };
            /* phase 1: the state-independent scalars of every step of the chunk */
            float uu[CKS], p0[CKS], p1[CKS];
#pragma unroll
            for (int i = 0; i < CKS; i++) {
                bool on = i < cs;
                uu[i] = on ? in(0, i) : 0.0f;
                float dl = on ? in(1, i) : 0.0f;
                step_pre<N, MAMBA>(p0[i], p1[i], kq + i * KQW, uu[i], dl);
                if (!on) p0[i] = 0.0f, p1[i] = 0.0f;
            }
            /* phase 2: the recurrence (only h -> h is serial) */
            float y[CKS];
#pragma unroll
            for (int i = 0; i < CKS; i++) {
                y[i] = fmaf(Dsk, uu[i], step_upd<N, MAMBA>(h, kq + i * KQW, p0[i], p1[i], A));
                if (BWD) {
                    /* dq_t[n] = sum_d gy_t[d] h_t[d, n] over the warp's channels */
                    float zz = i < cs ? in(rz, i) : 0.0f, go = i < cs ? 0.5f * in(rg, i) : 0.0f;
                    float gy = go * zz * sigmoidf_fast(zz), v[N];
#pragma unroll
                    for (int n = 0; n < N; n++) v[n] = gy * h[n];
                    float r = reduce_scatter<N>(v, lane);
                    if (lane < N) red[(warp * CKS + i) * N + lane] = r;
                }
            }
            /* phase 3: outputs */
            if (act) {
#pragma unroll
                for (int i = 0; i < CKS; i++) {
                    if (i >= cs) break;
                    int s = s0 + i, t = j ? L - 1 - s : s;
                    size_t r = (size_t)b * L + t;
                    if (j == 1) {
                        ys[r * ldy + d] = f2bf(y[i]);
                    } else {
                        float tot = y[i] + in(ry, i), zz = in(rz, i), sg = sigmoidf_fast(zz);
                        if (!BWD) a.out[r * E + d] = f2bf(0.5f * zz * sg * tot);
                        else a.dz[r * a.ldz + d] = f2bf(0.5f * in(rg, i) * sg * (1.0f + zz * (1.0f - sg)) * tot);
                    }
                }
            }
            if (BWD) {
                int e = s0 + cs; /* the state after this chunk starts CK-chunk e / CK */
                if (e % CK == 0 && e < L && act) {
                    int c = e / CK;
#pragma unroll
                    for (int n = 0; n < N; n++)
                        a.ckpt[((((size_t)b * 2 + j) * (a.nck - 1) + (c - 1)) * N + n) * E + d] = h[n];
                }
                __syncthreads();
                for (int idx = tid; idx < cs * N; idx += T) {
                    int i = idx / N, n = idx - i * N;
                    float sum = 0.0f;
#pragma unroll
                    for (int w = 0; w < NW; w++) sum += red[(w * CKS + i) * N + n];
                    int t = j ? L - 1 - (s0 + i) : s0 + i;
                    a.pq[((((size_t)b * a.nblk1 + blockIdx.x) * 2 + j) * L + t) * N + n] = sum;
                }
            }
            __syncthreads(); /* this buffer, kq and red are free for the next chunk */
        }
        /* the stash written by pass 1 is read (through L2) by pass 0: __syncthreads above
         * orders the block's global writes before the next pass's copies */
        __threadfence_block();
        __syncthreads();
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
        float rden = rcp_fast(fmaf(beta, kap, 1.0f)), eps = beta * rden;
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

/* The adjoint kernel: one warp per block, one direction, 32 channels. Per CK-chunk of steps, in
 * reverse: the chunk's inputs are staged (cp.async, double-buffered) and its start state comes
 * from the checkpoint; the history of h is kept in registers, 8 steps (SUB) at a time: the
 * second half of the chunk is reached by recomputing the first half without keeping it, then
 * the first half is recomputed with its history (1.5 recomputes per step; no shared-memory
 * history, so occupancy is set by registers). */
#define SUB 8
template <int N, bool MAMBA>
__device__ __forceinline__ void adjoint_sub(const ScanArgs &a, float (&lam)[N], float (&anext)[N],
                                            float (&dAacc)[N], float &dDacc, const float (&hs)[N],
                                            const float *kq, const bf16 *st, int base, int n,
                                            int s0, int j, int b, int d, bool act, int lane,
                                            float Dsk, const float (&A)[N], float *pk) {
    constexpr int KQW = KQ<N>::W, T = 32;
    const int L = a.L, E = a.E;
    auto in = [&](int q, int i) { return bf2f(st[(size_t)(q * CK + i) * T + lane]); };
    float H[SUB][N], h[N];
#pragma unroll
    for (int k = 0; k < N; k++) h[k] = hs[k];
#pragma unroll
    for (int i = 0; i < SUB; i++) {
        bool on = i < n;
        float u = on ? in(0, base + i) : 0.0f, dl = on ? in(1, base + i) : 0.0f, p0, p1;
        step_pre<N, MAMBA>(p0, p1, kq + (base + i) * KQW, u, dl);
        if (!on) p0 = 0.0f, p1 = 0.0f;
        step_upd<N, MAMBA>(h, kq + (base + i) * KQW, p0, p1, A);
#pragma unroll
        for (int k = 0; k < N; k++) H[i][k] = h[k];
    }
#pragma unroll
    for (int i = SUB - 1; i >= 0; i--) {
        if (i >= n) continue;
        int ii = base + i, s = s0 + ii, t = j ? L - 1 - s : s;
        float u = in(0, ii), dl = in(1, ii), zv = in(2, ii);
        float gy = 0.5f * in(3, ii) * zv * sigmoidf_fast(zv);
        float dkv[N], du, ddl;
        if (i > 0) adj_step<N, MAMBA>(lam, anext, dAacc, dkv, du, ddl, H[i > 0 ? i - 1 : 0], kq + ii * KQW, u, dl, gy, Dsk, A);
        else adj_step<N, MAMBA>(lam, anext, dAacc, dkv, du, ddl, hs, kq + ii * KQW, u, dl, gy, Dsk, A);
        size_t r = (size_t)b * L + t;
        if (act) {
            a.du[j][r * E + d] = f2bf(du);
            a.ddelta[j][r * E + d] = f2bf(ddl);
        }
        dDacc = fmaf(gy, u, dDacc);
        float sum = reduce_scatter<N>(dkv, lane);
        if (lane < N) pk[(size_t)t * N + lane] = sum;
    }
}

/* staged per-step inputs: u dl z go rows of 32 channels, k|q rows, checkpoint rows (N, 32) */
template <int N, bool MAMBA>
__global__ void __launch_bounds__(32) scan_adjoint_kernel(ScanArgs a) {
    constexpr int KQW = KQ<N>::W, T = 32;
    constexpr int act_elems = 4 * CK * T, x_elems = CK * 2 * N, buf_elems = act_elems + x_elems;
    __shared__ __align__(16) bf16 stage[2 * buf_elems];
    __shared__ __align__(16) float kq[CK * KQW];
    __shared__ __align__(16) float ckb[2 * N * T];
    const int L = a.L, E = a.E;
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
        float h0[N];
#pragma unroll
        for (int n = 0; n < N; n++) h0[n] = (c > 0) ? ckb[(slot * N + n) * T + lane] : 0.0f;
        /* the second half first: its start state is reached through the first half. One
         * inlined copy of the sub-chunk code (the instruction cache is the limit here) */
        float hm[N];
#pragma unroll
        for (int n = 0; n < N; n++) hm[n] = h0[n];
        if (cs > SUB) {
#pragma unroll 1
            for (int i = 0; i < SUB; i++) {
                float p0, p1;
                step_pre<N, MAMBA>(p0, p1, kq + i * KQW, bf2f(st[(size_t)i * T + lane]),
                                   bf2f(st[(size_t)(CK + i) * T + lane]));
                step_upd<N, MAMBA>(hm, kq + i * KQW, p0, p1, A);
            }
        }
#pragma unroll 1
        for (int sub = (cs - 1) / SUB; sub >= 0; sub--) {
            float hs[N];
#pragma unroll
            for (int n = 0; n < N; n++) hs[n] = sub ? hm[n] : h0[n];
            adjoint_sub<N, MAMBA>(a, lam, anext, dAacc, dDacc, hs, kq, st, sub * SUB,
                                  min(SUB, cs - sub * SUB), s0, j, b, d, act, lane, Dsk, A, pk);
        }
        __syncwarp(); /* this buffer and kq are free for the next chunk */
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
#pragma unroll 8
        for (int k = 0; k < a.nblk1; k++) dq += a.pq[((((size_t)b * a.nblk1 + k) * 2 + j) * a.L + t) * N + n];
#pragma unroll 8
        for (int k = 0; k < a.nblk2; k++) dk += a.pk[((((size_t)b * 2 + j) * a.nblk2 + k) * a.L + t) * N + n];
        bf16 *row = a.dxdbl[j] + ((size_t)b * a.L + t) * a.W + a.R;
        row[n] = f2bf(dk);
        row[N + n] = f2bf(dq);
    }
}

/* ---------------- host side ---------------- */
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
    dim3 grid((a.E + PAIR_T - 1) / PAIR_T, a.B);
    scan_pair_kernel<N, MAMBA, false><<<grid, PAIR_T, 0, g_cu.stream>>>(a);
    CU_LAUNCH_CHECK();
}

template <int N, bool MAMBA>
static void backward_impl(ScanArgs a) {
    a.nblk1 = (a.E + PAIR_T - 1) / PAIR_T;
    a.nblk2 = (a.E + 31) / 32;
    size_t B = a.B, L = a.L, E = a.E;
    a.ckpt = (float *)cu_scratch(SCR_SCAN_CKPT, B * 2 * (a.nck > 1 ? a.nck - 1 : 1) * N * E * sizeof(float));
    a.pq = (float *)cu_scratch(SCR_SCAN_PQ, B * a.nblk1 * 2 * L * N * sizeof(float));
    a.pk = (float *)cu_scratch(SCR_SCAN_PK, B * 2 * a.nblk2 * L * N * sizeof(float));
    float *pd = (float *)cu_scratch(SCR_SCAN_PD, B * 2 * E * (MAMBA ? N + 1 : 1) * sizeof(float));
    a.pd = pd;
    a.pa = pd + B * 2 * E;
    /* checkpoint rows: (row * E + block * 32) floats; the scratch base is 4 KB aligned */
    scan_pair_kernel<N, MAMBA, true><<<dim3(a.nblk1, a.B), PAIR_T, 0, g_cu.stream>>>(a);
    CU_LAUNCH_CHECK();
    scan_adjoint_kernel<N, MAMBA><<<dim3(a.nblk2, 2, a.B), 32, 0, g_cu.stream>>>(a);
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
