/* scan.cu: the fused bidirectional Longhorn (ViL) / Mamba (ViM) scan, forward and backward, per
 * doc/scans.md, with the sigmoid (softplus), the eps normalization, the D skip, the
 * SiLU(z) gate and the direction average fused in; the backward direction runs by reverse
 * indexing, never on flipped copies. State in fp32 registers; nothing of size (L, E, N) is ever
 * stored. Kernels:
 *   scan_kq_kernel       the k|q rows of every token and direction as float, with k^2, -2k and
 *                        kappa = sum k^2 precomputed, so the scan kernels stage them as they are.
 *   scan_pair_kernel     one thread per (sample, channel) runs both directions, one after the
 *                        other: first the backward one (token L-1-s at step s), leaving its
 *                        pre-gate output in the output buffer itself (out, or dz in the
 *                        backward prep), then the forward one, which combines the two. Forward:
 *                        writes the gated average. Backward prep: recomputes the states, writes
 *                        dz, the state checkpoint every CK steps and the dq partial sums.
 *   scan_quad_kernel     the forward with a channel's N states split over 4 lanes (N / 4 each),
 *                        from compact bf16 k|q rows: chosen where the pair kernel's passes would
 *                        leave the GPU idle (224 px at batch 1 to 32, 512 px at batch 32; ViM
 *                        also at 1024 px batch 32).
 *   scan_adjoint_kernel  a block of ADJ_T threads (one per channel) per (sample, direction,
 *                        ADJ_T channels): per chunk of CK steps, in reverse, recomputes the
 *                        states from the chunk's checkpoint (a 4-step history in registers),
 *                        then runs the reverse adjoint scan, taking h_{t-1} from the recomputed
 *                        states (never dividing by the forget gate); writes du, ddelta and the
 *                        block's partial sums of dk (dB) and dkappa.
 *   finalize kernels     sum the partials over channel blocks (dk, dq, dkappa) and samples (dD,
 *                        dA_log) in a fixed order.
 *   the token-parallel form (nch > 1, chosen when batch x channels leave the GPU idle): each
 *   direction's steps are cut into chunks of C; scan_local_kernel summarizes every chunk from a
 *   zero state (its end state S and the product P of its forget gates: h_end = P h_start + S;
 *   in the backward also the adjoint carried past its start), scan_carry_kernel chains the
 *   summaries chunk by chunk, and the pair and adjoint kernels run every chunk at once from its
 *   carried state (the pair kernel then runs one direction per launch: the forward direction's
 *   pass reads the backward direction's stash at the same token, written by another chunk). In
 *   training the forward's chained states are kept (VilScanFwd.states) where the backward cuts
 *   the same chunks; its summaries then run only the adjoint's reverse pass (LOC_KEPT).
 * Sums over channels (dq, dk, dkappa) are fp32: within a warp by a transpose through shared
 * memory (warp_colsum; dkappa by shuffles), then the warps of a block in order (shared memory),
 * then the blocks in order: deterministic, no atomics. The backward also sums ddelta over the
 * tokens (dt_proj's bias gradient) per (sample, direction, channel), then over the samples. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda/ops_cuda.h"

#define CK 8   /* checkpoint spacing; the adjoint kernel's chunk of steps */
#define CKS 8  /* the pair kernel's staging chunk (CK is a multiple of it) */
#define FULL 0xffffffffu

typedef struct {
    const bf16 *u[2], *delta[2], *xdbl[2], *z, *dout;
    const float *Dsk[2], *A_log[2];
    const float *kqt; /* (2, B, L, KQ<N>::W) the k|q rows in float with k^2, -2k, kappa */
    const char *kqh;  /* (2, B, L) rows of KQH<N>::BYTES: the quad kernel's compact k|q rows */
    bf16 *out, *dz, *du[2], *ddelta[2], *dxdbl[2];
    float *dD[2], *dA[2], *dbs[2]; /* dbs: dt_proj's bias gradient (sum of ddelta), or NULL */
    float *ckpt; /* (B, 2, nck-1, N, E) state at the start of CK-chunks 1.. */
    float *pq;   /* (B, nblk1, 2, L, N) dq partials of the pair kernel's blocks */
    float *pk;   /* (B, 2, nblk2, L, N) dk partials of the adjoint kernel's blocks */
    float *pkap; /* (B, 2, nblk2, L) -2 dkappa partials (Longhorn): dk += k * their sum */
    float *pd;   /* (B, 2, E) dD partials, then (B, 2, E) sum-of-ddelta partials */
    float *pa;   /* (B, 2, E, N) dA_log partials (Mamba) */
    int B, L, E, dt_ld, W, ldz, nck, nblk1, nblk2;
    int vec_act, vec_ck; /* bytes per async copy: 16, 8, 4, or 2 (plain loads) */
    /* the token-parallel form: steps [k C, (k + 1) C) of each direction are chunk k of nch (nch
     * = 1, C = L: one thread walks them all); the pair kernel runs passes [pass_lo, pass_hi) */
    int C, nch, pass_lo, pass_hi;
    int split; /* the forward: threads per channel, 1 (the pair kernel) or 4 (the quad kernel) */
    float *chs; /* (B, 2, nch, N, E) chunk k's end state from zero, then the state after it */
    float *chp; /* (B, 2, nch, N, E) the product of chunk k's forget gates */
    float *chg; /* (B, 2, nch, N, E) the adjoint carried into chunk k - 1 (a_s0 lam_s0), from
                 * zero past chunk k's end, then with the later chunks' */
    float *keep; /* the forward: chs in the caller's buffer (VilScanFwd.states), kept for the
                  * backward; or NULL */
    int kept;    /* the backward: chs holds the forward's kept states (no S pass, no S chain) */
} ScanArgs;

/* element (b, j, chunk k, n, d) of the chunk summaries */
__device__ __forceinline__ size_t ch_idx(const ScanArgs &a, int N, int b, int j, int k, int n, int d) {
    return ((((size_t)b * 2 + j) * a.nch + k) * N + n) * a.E + d;
}

/* k/q row (written once per layer by scan_kq_kernel, staged into shared memory as is):
 * k[N] | q[N] | k^2[N] | -2k[N] | kappa, padded to float4 */
template <int N>
struct KQ {
    static constexpr int W = 4 * N + 4, KK = 2 * N, M2K = 3 * N, KAP = 4 * N;
};
/* the quad kernel's compact row: kappa (float, in a 16-byte head), then per group of N / 4
 * states its N / 4 k then N / 4 q as bf16 (exact: x_proj's output is bf16), so a lane's k and
 * q of a step are one 16-byte load at N = 16 */
template <int N>
struct KQH {
    static constexpr int NS = N / 4, BYTES = 16 + 4 * N, GB = 4 * NS; /* GB: bytes per group */
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

/* The common case of queue_rows, with every shape known at compile time: 16-byte pieces of rows
 * of T bf16 channels, nq <= NQ quantities of ROWS steps each (row q * ROWS + i of dst); steps at
 * or past cs are zero-filled. Each thread's pieces are fixed (piece tid % P of rows tid / P +
 * k * T / P) and the quantity loop is unrolled, so nothing is divided by a run-time shape (the
 * generic loop's divisions were ~20% of the forward kernel's instructions, and the adjoint's
 * staging ~85 instructions per piece). src_row(q, i) must return a readable row even for i >= cs
 * (the caller clamps). */
template <int T, int ROWS, int NQ, typename RowFn>
__device__ __forceinline__ void queue_rows16(bf16 *dst, int nq, int cs, int c0, int E,
                                             RowFn src_row, int tid) {
    constexpr int P = T * 2 / 16, RA = T / P; /* pieces per row, rows per pass */
    static_assert(T % P == 0 && ROWS % RA == 0, "queue_rows16 shape");
    const int p = tid % P, c = c0 + p * 8, cvalid = min(max(E - c, 0), 8) * 2;
#pragma unroll
    for (int k = 0; k < ROWS / RA; k++) {
        const int i = tid / P + k * RA, valid = i < cs ? cvalid : 0;
#pragma unroll
        for (int q = 0; q < NQ; q++) {
            if (q >= nq) break;
            const bf16 *row = src_row(q, i);
            cp_async<16>(dst + (q * ROWS + i) * T + p * 8, valid > 0 ? row + p * 8 : row, valid);
        }
    }
}

/* The act row of quantity q (0 u, 1 delta, 2 z, 3 `q3`: go, or the forward's stash) at step s
 * of direction j (token L-1-s for the backward one) and sample b, from channel c0 */
__device__ __forceinline__ const bf16 *act_row(const ScanArgs &a, const bf16 *q3, int q, int j, int b,
                                               int s, int c0) {
    const int t = j ? a.L - 1 - s : s;
    const bf16 *base = q == 0 ? a.u[j] : q == 1 ? a.delta[j] : q == 2 ? a.z : q3;
    const size_t ld = q == 2 ? (size_t)a.ldz : (size_t)a.E;
    return base + ((size_t)b * a.L + t) * ld + c0;
}

/* The act rows of one staging round: nq <= NQ quantities of cs <= ROWS steps, row_of(q, i) the
 * source of quantity q at step i, into dst (quantity q at rows q * ROWS ..): the compile-time
 * 16-byte pieces where every row allows them (vb = 16), the generic queue otherwise. */
template <int T, int ROWS, int NQ, typename RowFn>
__device__ __forceinline__ void queue_act(bf16 *dst, int nq, int cs, int c0, int E, int vb,
                                          RowFn row_of, int tid) {
    if (vb == 16)
        queue_rows16<T, ROWS, NQ>(dst, nq, cs, c0, E, [&](int q, int i) { return row_of(q, min(i, cs - 1)); }, tid);
    else
        queue_rows(dst, nq * cs, T, 2, c0, E, vb, [&](int r) -> const void * {
            int q = r / cs;
            return row_of(q, r - q * cs);
        }, tid, T, cs, ROWS);
}

/* Sum over the warp's 32 lanes of v[n] for each n < NV (a power of two, 4..16), by a transpose
 * through the warp's own shared tile tp (NV rows of TP_LD floats, 16-byte aligned): each lane
 * writes its column, then P = 32 / NV lanes read a row each (32 / P channels apiece, float4
 * loads) and xor-sum their parts. Lane l returns the sum of v[l / P]; the order is fixed. The
 * row padding (TP_LD = 36) keeps both the column writes and the row reads free of bank
 * conflicts. About 40 instructions for NV = 16, where the shuffle reduce-scatter of v9 took ~80
 * (two selects, a shuffle and an add per exchanged pair). */
#define TP_LD 36
template <int NV>
__device__ __forceinline__ float warp_colsum(const float (&v)[NV], float *tp, int lane) {
    constexpr int P = 32 / NV, CW = 32 / P; /* lanes per row, channels per lane */
    __syncwarp(); /* the previous call's reads are done */
#pragma unroll
    for (int n = 0; n < NV; n++) tp[n * TP_LD + lane] = v[n];
    __syncwarp();
    const float4 *row = reinterpret_cast<const float4 *>(tp + (lane / P) * TP_LD + (lane % P) * CW);
    float4 acc = row[0];
#pragma unroll
    for (int k = 1; k < CW / 4; k++) {
        float4 x = row[k];
        acc.x += x.x, acc.y += x.y, acc.z += x.z, acc.w += x.w;
    }
    float s = (acc.x + acc.y) + (acc.z + acc.w);
#pragma unroll
    for (int m = 1; m < P; m <<= 1) s += __shfl_xor_sync(FULL, s, m);
    return s;
}

/* Queue the copy of `rows` k|q rows of one (direction, sample) for steps s0.. (token t = s, or
 * L-1-s for the backward direction) into dst; rows at or past cs are zero-filled. */
template <int N>
__device__ __forceinline__ void queue_kq(float *dst, const float *base, int s0, int cs, int rows,
                                         int j, int L, int tid, int nthreads) {
    constexpr int KQW = KQ<N>::W, P = KQW / 4;
    for (int job = tid; job < rows * P; job += nthreads) {
        int r = job / P, p = job - r * P, s = s0 + r, t = j ? L - 1 - s : s;
        bool on = r < cs;
        cp_async<16>(dst + r * KQW + p * 4, base + (on ? (size_t)t * KQW + p * 4 : 0), on ? 16 : 0);
    }
}

/* The k|q table: one row per (direction, sample, token) from the x_proj output's B and C columns
 * (bf16) as float, with k^2, -2k and kappa = sum k^2, so the scan kernels stage it as is; with
 * COMPACT the quad kernel's rows (KQH) instead. One thread per (row, n); the N threads of a row
 * are consecutive lanes (N divides 32). */
template <int N, bool COMPACT>
__global__ void scan_kq_kernel(float *kqt, const bf16 *x0, const bf16 *x1, int BL, int W, int dt_ld) {
    constexpr int KQW = KQ<N>::W;
    size_t tot = (size_t)2 * BL * N;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx - threadIdx.x < tot;
         idx += (size_t)gridDim.x * blockDim.x) {
        bool on = idx < tot;
        size_t row = on ? idx / N : 0;
        int n = (int)(idx % N), j = row >= (size_t)BL;
        size_t r = row - (j ? (size_t)BL : 0);
        const bf16 *src = (j ? x1 : x0) + r * W + dt_ld;
        float k = on ? bf2f(src[n]) : 0.0f, q = on ? bf2f(src[N + n]) : 0.0f, kk = k * k;
        float kap = kk;
#pragma unroll
        for (int m = 1; m < N; m <<= 1) kap += __shfl_xor_sync(FULL, kap, m);
        if (on && COMPACT) {
            char *dst = (char *)kqt + row * KQH<N>::BYTES;
            constexpr int NS = KQH<N>::NS;
            bf16 *g = (bf16 *)(dst + 16 + (n / NS) * KQH<N>::GB);
            g[n % NS] = src[n];
            g[NS + n % NS] = src[N + n];
            if (n < 4) ((float *)dst)[n] = n == 0 ? kap : 0.0f;
        } else if (on) {
            float *dst = kqt + row * KQW;
            dst[n] = k;
            dst[N + n] = q;
            dst[2 * N + n] = kk;
            dst[3 * N + n] = -2.0f * k;
            if (n < 4) dst[4 * N + n] = n == 0 ? kap : 0.0f;
        }
    }
}

__device__ __forceinline__ float softplusf_(float x) { return x > 20.0f ? x : log1pf(__expf(x)); }

/* The per-step scalars of one direction, which do not depend on the state (so a chunk's worth
 * can be computed ahead of the state updates): Longhorn eps and u (kappa from the k row), Mamba
 * dt and dt*u. A masked-out step gets 0, 0: the state passes through unchanged. */
template <bool MAMBA>
__device__ __forceinline__ void pre_scalars(float &p0, float &p1, float kap, float u, float dl) {
    if (!MAMBA) {
        /* eps = beta / (1 + beta kappa) = 1 / (1 + e^-dl + kappa): one reciprocal */
        p0 = rcp_fast(1.0f + __expf(-dl) + kap);
        p1 = u;
    } else {
        p0 = softplusf_(dl);
        p1 = p0 * u;
    }
}
template <int N, bool MAMBA>
__device__ __forceinline__ void step_pre(float &p0, float &p1, const float *row, float u, float dl) {
    pre_scalars<MAMBA>(p0, p1, MAMBA ? 0.0f : row[KQ<N>::KAP], u, dl);
}

/* one state's h <- a h + b with the step's scalars (k: the state's k) */
template <bool MAMBA>
__device__ __forceinline__ float state_upd(float h, float k, float p0, float p1, float A) {
    return MAMBA ? fmaf(__expf(p0 * A), h, p1 * k) : fmaf(p0 * k, fmaf(-k, h, p1), h);
}

/* h <- a h + b with the step's scalars; returns q.h (the D skip is added by the caller).
 * Longhorn in the form h + eps k (u - k h) = (1 - eps k^2) h + eps u k: three operations per
 * state as before, without the k^2 row (4 fewer shared loads of 16 bytes per step at N = 16). */
template <int N, bool MAMBA>
__device__ __forceinline__ float step_upd(float (&h)[N], const float *row, float p0, float p1,
                                          const float (&A)[N]) {
    const float4 *r4 = reinterpret_cast<const float4 *>(row);
    float y[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* partial sums: a short dependency chain */
#pragma unroll
    for (int g = 0; g < N / 4; g++) {
        float4 k4 = r4[g], q4 = r4[N / 4 + g];
        float k[4] = {k4.x, k4.y, k4.z, k4.w}, q[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int n = 4 * g + e;
            h[n] = state_upd<MAMBA>(h[n], k[e], p0, p1, A[n]);
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
#ifndef PAIR_MINB
#define PAIR_MINB 6 /* blocks per SM the register allocation aims at (80 registers); measured
                      * forward 278 / 289 / 289 us per Tiny layer at 6 / 7 / 8 */
#endif
#ifndef PAIR_MINB_CHF
#define PAIR_MINB_CHF 5 /* the chunked forward's (up to 102 registers): against 6 / 7, harness
                         * fwd us, E = 384: L 4097 B 32 962 / 987 / 995, L 16385 B 8 1,004 / 1,034 /
                         * 1,041; the same 5 for every pair kernel made the sequential forward
                         * (L 197 B 256: 237 / 231) and the backward prep (bwd 1,360 / 1,269)
                         * slower */
#endif
#define PAIR_NQ 5 /* staged rows: u dl z go ys in the backward prep; the forward has no go */
#ifndef PAIR_STAGES
#define PAIR_STAGES 2 /* the forward's staging slots (rounds in flight + 1); measured 3 against 2
                       * (fwd us, E = 384): L = 4097 B = 1 70.3 / 68.6, B = 32 chunked 1,053 /
                       * 1,076; L = 16385 B = 8 1,099 / 1,083: no gain. The backward prep keeps
                       * 2 (its shared memory is near a static allocation's 48 KB) */
#endif
#ifndef PAIR_SEQ_UNROLL
#define PAIR_SEQ_UNROLL 1 /* the sequential pair kernel's two passes: rolled (1) or unrolled (2) */
#endif
static constexpr int pair_seq_unroll = PAIR_SEQ_UNROLL; /* #pragma unroll expands no macro */

/* CH: the token-parallel form (blockIdx.z is the chunk); without it the kernel is compiled as
 * before it, without the chunk bounds and carried states (which cost spills) */
template <int N, bool MAMBA, bool BWD, bool CH>
__global__ void __launch_bounds__(PAIR_T, CH && !BWD ? PAIR_MINB_CHF : PAIR_MINB) scan_pair_kernel(ScanArgs a) {
    constexpr int KQW = KQ<N>::W, NW = PAIR_T / 32, T = PAIR_T;
    constexpr int NQ = BWD ? PAIR_NQ : PAIR_NQ - 1, NSTG = BWD ? 2 : PAIR_STAGES; /* rows, slots */
    constexpr int buf_elems = NQ * CKS * T;
    __shared__ __align__(16) bf16 stage[NSTG * buf_elems];
    __shared__ __align__(16) float kqs[NSTG * CKS * KQW];
    __shared__ float red[BWD ? NW * CKS * N : 1];
    __shared__ __align__(16) float tp[BWD ? NW * N * TP_LD : 4]; /* warp_colsum tiles */
    const int L = a.L, E = a.E;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int b = blockIdx.y, c0 = blockIdx.x * T, d = c0 + tid, k = CH ? blockIdx.z : 0;
    bool act = d < E;
    /* the stash: out (forward) or dz (backward prep) */
    bf16 *ys = BWD ? a.dz : a.out;
    size_t ldy = BWD ? (size_t)a.ldz : (size_t)E;
    const int sb = CH ? k * a.C : 0, se = CH ? min(L, sb + a.C) : L; /* this block's steps */
    int nsc = (se - sb + CKS - 1) / CKS;
    /* constant bounds: with a loop over [pass_lo, pass_hi) the sequential kernel ran 1.3x
     * slower (L = 4097, B = 1: 1997 against 1527 us). The chunked form unrolls the two passes
     * (each compiled with its own j); the sequential one keeps them rolled, as it always had
     * (unrolled, it spills 16 bytes where it spilled 4) */
#pragma unroll(CH ? 2 : pair_seq_unroll)
    for (int pass = 0; pass < 2; pass++) {
        if (CH && (pass < a.pass_lo || pass >= a.pass_hi)) continue;
        const int j = 1 - pass; /* the backward direction first */
        /* which staged rows this pass reads: u, dl always; z, go when the gate is needed */
        const bool need_z = BWD || j == 0, need_go = BWD, need_ys = j == 0;
        float h[N], A[N];
        float Dsk = act ? a.Dsk[j][d] : 0.0f;
#pragma unroll
        for (int n = 0; n < N; n++) {
            h[n] = (CH && k > 0 && act) ? a.chs[ch_idx(a, N, b, j, k - 1, n, d)] : 0.0f;
            A[n] = (MAMBA && act) ? -expf(a.A_log[j][(size_t)d * N + n]) : 0.0f;
        }
        auto issue = [&](int s0, int cs, bf16 *dst) {
            int nq = 2 + (need_z ? 1 : 0) + (need_go ? 1 : 0) + (need_ys ? 1 : 0);
            /* q counts the rows present: u, dl, [z], [go], [ys] */
            auto row_of = [&](int q, int i) -> const bf16 * {
                int s = s0 + i, t = j ? L - 1 - s : s;
                int kind = q < 2 ? q : q == 2 ? (need_z ? 2 : need_go ? 3 : 4) : q == 3 ? (need_go ? 3 : 4) : 4;
                const bf16 *base = kind == 0 ? a.u[j] : kind == 1 ? a.delta[j] : kind == 2 ? a.z
                                 : kind == 3 ? a.dout : ys;
                size_t ld = kind == 2 ? (size_t)a.ldz : kind == 4 ? ldy : (size_t)E;
                return base + ((size_t)b * L + t) * ld + c0;
            };
            /* inline rather than queue_act: through the helper this kernel compiled 1.6% slower
             * (L = 197, B = 256 forward 232.8 against 229.0 us, three runs each) */
            if (a.vec_act == 16)
                queue_rows16<T, CKS, NQ>(dst, nq, cs, c0, E, [&](int q, int i) { return row_of(q, min(i, cs - 1)); }, tid);
            else
                queue_rows(dst, nq * cs, T, 2, c0, E, a.vec_act, [&](int r) -> const void * {
                    int q = r / cs;
                    return row_of(q, r - q * cs);
                }, tid, T, cs, CKS);
            queue_kq<N>(kqs + (dst - stage) / buf_elems * CKS * KQW, a.kqt + ((size_t)j * a.B + b) * L * KQW,
                        s0, cs, CKS, j, L, tid, T);
        };
        /* staged row index of each kind (see issue) */
        const int rz = 2, rg = need_z ? 3 : 2, ry = 2 + (need_z ? 1 : 0) + (need_go ? 1 : 0);
        /* round r of the block's steps into slot r % NSTG; NSTG - 1 rounds in flight */
        auto issue_round = [&](int r) {
            if (r >= nsc) return;
            const int s0 = sb + r * CKS;
            issue(s0, min(CKS, se - s0), stage + (r % NSTG) * buf_elems);
        };
#pragma unroll
        for (int r = 0; r < NSTG - 1; r++) {
            issue_round(r);
            cp_commit(); /* one group per round, empty past the end */
        }
        for (int ch = 0; ch < nsc; ch++) {
            int s0 = sb + ch * CKS, cs = min(CKS, se - s0);
            issue_round(ch + NSTG - 1); /* into the slot the previous round has freed */
            cp_commit();
            cp_wait<NSTG - 1>();
            __syncthreads();
            const bf16 *st = stage + (ch % NSTG) * buf_elems;
            const float *kq = kqs + (ch % NSTG) * CKS * KQW;
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
                    float r = warp_colsum<N>(v, tp + warp * N * TP_LD, lane);
                    if (lane % (32 / N) == 0) red[(warp * CKS + i) * N + lane / (32 / N)] = r;
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
        cp_wait<0>(); /* the empty groups */
        /* the stash written by pass 1 is read (through L2) by pass 0: __syncthreads above
         * orders the block's global writes before the next pass's copies */
        __threadfence_block();
        __syncthreads();
    }
}

/* ---------------- the quad kernel: four threads per channel (the forward) ----------------
 * The pair kernel's forward with a channel's N states split over QUAD_Q = 4 consecutive lanes
 * (N / 4 each): 4x the threads where batch x channels leave the GPU idle. Shared-memory
 * traffic is what limits a kernel with 4 states a thread (a warp's k and q loads serve 4 states
 * where the pair kernel's serve 16), so: the k|q rows are the compact bf16 ones (a lane's k and
 * q of a step in one 16-byte load); per round of QCK = 8 steps, lane s computes the scalars of
 * steps 2s and 2s + 1 only and the channel's lanes read them back two steps per 16-byte load;
 * the y partials are reduce-scattered back (6 shuffles), so lane s ends with the y of the same
 * two steps and writes their outputs. Inputs are staged QS_STAGES rounds deep, with shapes
 * known at compile time where rows are 16-byte aligned. Both directions as in the pair kernel:
 * the backward one first, into the output buffer, then the forward one, which combines; in the
 * token-parallel form one direction per launch (pass_lo, pass_hi), from the carried states. */
#define QUAD_T 128
#define QUAD_Q 4
#define QCK 8 /* steps per staging round: 2 per lane */
#ifndef QS_STAGES
#define QS_STAGES 4
#endif
/* a lane's k and q (NS each, bf16 in the compact row's group) as float */
__device__ __forceinline__ float bf_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
template <int NS>
__device__ __forceinline__ void load_group(float (&k)[NS], float (&q)[NS], const char *p) {
    if (NS == 4) {
        uint4 w = *reinterpret_cast<const uint4 *>(p);
        k[0] = bf_lo(w.x), k[1 % NS] = bf_hi(w.x), k[2 % NS] = bf_lo(w.y), k[3 % NS] = bf_hi(w.y);
        q[0] = bf_lo(w.z), q[1 % NS] = bf_hi(w.z), q[2 % NS] = bf_lo(w.w), q[3 % NS] = bf_hi(w.w);
    } else if (NS == 2) {
        uint2 w = *reinterpret_cast<const uint2 *>(p);
        k[0] = bf_lo(w.x), k[1 % NS] = bf_hi(w.x), q[0] = bf_lo(w.y), q[1 % NS] = bf_hi(w.y);
    } else {
        unsigned w = *reinterpret_cast<const unsigned *>(p);
        k[0] = bf_lo(w), q[0] = bf_hi(w);
    }
}

template <int N, bool MAMBA, bool CH>
__global__ void __launch_bounds__(QUAD_T) scan_quad_kernel(ScanArgs a) {
    constexpr int T = QUAD_T, NS = N / QUAD_Q, TC = T / QUAD_Q, NQ = 4;
    constexpr int RB = KQH<N>::BYTES, PK = RB / 16; /* compact row bytes, 16-byte pieces */
    static_assert(QUAD_Q == 4 && QCK == 8 && N % QUAD_Q == 0 && NQ * QCK * TC / 8 == T && QCK * PK <= T,
                  "quad kernel shape");
    constexpr int buf_elems = NQ * QCK * TC;
    __shared__ __align__(16) bf16 stage[QS_STAGES * buf_elems];
    __shared__ __align__(16) char kqs[QS_STAGES * QCK * RB];
    __shared__ __align__(16) float4 pre[T]; /* lane s of channel c: the scalars of steps 2s, 2s + 1 */
    const int L = a.L, E = a.E, tid = threadIdx.x, s = tid & (QUAD_Q - 1), cl = tid / QUAD_Q;
    const int b = blockIdx.y, c0 = blockIdx.x * TC, d = c0 + cl, k = CH ? blockIdx.z : 0;
    const bool act = d < E, hi = s & 2, odd = s & 1;
    const int sb = CH ? k * a.C : 0, se = CH ? min(L, sb + a.C) : L; /* this block's steps */
    const int nsc = (se - sb + QCK - 1) / QCK;
    /* the compile-time staging: this thread's piece of the act rows (8 channels of row r) and,
     * for the first QCK x PK threads, its piece of the compact k|q rows */
    const int ap = tid & 3, ar = tid >> 2, aq = ar / QCK, ai = ar % QCK;
    const int acv = min(max(E - (c0 + ap * 8), 0), 8) * 2; /* valid bytes of the piece */
    const int kr = tid / PK, kp = tid % PK;
#pragma unroll 1
    for (int pass = 0; pass < 2; pass++) {
        if (CH && (pass < a.pass_lo || pass >= a.pass_hi)) continue;
        const int j = 1 - pass; /* the backward direction first */
        const int nq = j ? 2 : 4; /* staged rows: u, dl [, z, the stash] */
        float h[NS], A[NS];
        const float Dsk = act ? a.Dsk[j][d] : 0.0f;
#pragma unroll
        for (int n = 0; n < NS; n++) {
            int nn = s * NS + n;
            h[n] = (CH && k > 0 && act) ? a.chs[ch_idx(a, N, b, j, k - 1, nn, d)] : 0.0f;
            A[n] = (MAMBA && act) ? -expf(a.A_log[j][(size_t)d * N + nn]) : 0.0f;
        }
        const char *kqb = a.kqh + ((size_t)j * a.B + b) * L * RB;
        auto row_of = [&](int q, int i, int s0) { return act_row(a, a.out, q, j, b, s0 + i, c0); };
        /* round ch's inputs into slot ch % QS_STAGES (nothing past the block's steps) */
        auto issue = [&](int ch) {
            const int s0 = sb + ch * QCK, cs = min(QCK, se - s0), slot = ch % QS_STAGES;
            if (cs <= 0) return;
            bf16 *dst = stage + slot * buf_elems;
            if (a.vec_act == 16) {
                if (aq < nq) {
                    const int valid = ai < cs ? acv : 0;
                    const bf16 *row = row_of(aq, min(ai, cs - 1), s0);
                    cp_async<16>(dst + ar * TC + ap * 8, valid > 0 ? row + ap * 8 : row, valid);
                }
            } else {
                queue_rows(dst, nq * cs, TC, 2, c0, E, a.vec_act, [&](int r) -> const void * {
                    int q = r / cs;
                    return row_of(q, r - q * cs, s0);
                }, tid, T, cs, QCK);
            }
            if (kr < QCK) {
                const bool on = kr < cs;
                const int st = s0 + (on ? kr : 0), t = j ? L - 1 - st : st;
                cp_async<16>(kqs + (slot * QCK + kr) * RB + kp * 16, kqb + (size_t)t * RB + kp * 16, on ? 16 : 0);
            }
        };
#pragma unroll
        for (int ch = 0; ch < QS_STAGES - 1; ch++) {
            issue(ch);
            cp_commit(); /* one group per round, empty past the end: the count stays simple */
        }
        for (int ch = 0; ch < nsc; ch++) {
            const int s0 = sb + ch * QCK, cs = min(QCK, se - s0), slot = ch % QS_STAGES;
            issue(ch + QS_STAGES - 1); /* into the slot the previous round has freed */
            cp_commit();
            cp_wait<QS_STAGES - 1>(); /* round ch's group is complete */
            __syncthreads();
            const bf16 *st = stage + slot * buf_elems;
            const char *kq = kqs + slot * QCK * RB;
            auto in = [&](int q, int i) { return bf2f(st[(q * QCK + i) * TC + cl]); };
            /* the scalars of this lane's two steps (rows past cs are stale: the state passes
             * through unchanged there), then every step's, two per load */
            float m[4];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int i = 2 * s + e;
                const bool on = i < cs;
                pre_scalars<MAMBA>(m[2 * e], m[2 * e + 1], *reinterpret_cast<const float *>(kq + i * RB),
                                   on ? in(0, i) : 0.0f, on ? in(1, i) : 0.0f);
                if (!on) m[2 * e] = 0.0f, m[2 * e + 1] = 0.0f;
            }
            pre[tid] = make_float4(m[0], m[1], m[2], m[3]);
            __syncwarp();
            float y[QCK];
#pragma unroll
            for (int g = 0; g < QCK / 2; g++) {
                const float4 pp = pre[cl * QUAD_Q + g];
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int i = 2 * g + e;
                    const float p0 = e ? pp.z : pp.x, p1 = e ? pp.w : pp.y;
                    float kk[NS], qq[NS], ya = 0.0f, yb = 0.0f;
                    load_group<NS>(kk, qq, kq + i * RB + 16 + s * KQH<N>::GB);
#pragma unroll
                    for (int n = 0; n < NS; n++) {
                        h[n] = state_upd<MAMBA>(h[n], kk[n], p0, p1, A[n]);
                        if (n & 1) yb = fmaf(qq[n], h[n], yb);
                        else ya = fmaf(qq[n], h[n], ya);
                    }
                    y[i] = ya + yb;
                }
            }
            /* reduce-scatter over the channel's 4 lanes: steps 4 hi .. 4 hi + 3, then 2s, 2s + 1 */
            float r4[4], r2[2];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float mine = hi ? y[4 + e] : y[e], give = hi ? y[e] : y[4 + e];
                r4[e] = mine + __shfl_xor_sync(FULL, give, 2);
            }
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float mine = odd ? r4[2 + e] : r4[e], give = odd ? r4[e] : r4[2 + e];
                r2[e] = mine + __shfl_xor_sync(FULL, give, 1);
            }
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int i = 2 * s + e, stp = s0 + i, t = j ? L - 1 - stp : stp;
                if (!act || i >= cs) continue;
                const size_t r = (size_t)b * L + t;
                const float yt = fmaf(Dsk, in(0, i), r2[e]);
                if (j == 1) {
                    a.out[r * E + d] = f2bf(yt);
                } else {
                    float zz = in(2, i), sg = sigmoidf_fast(zz);
                    a.out[r * E + d] = f2bf(0.5f * zz * sg * (yt + in(3, i)));
                }
            }
            __syncthreads(); /* this slot and pre are free for the next rounds */
        }
        cp_wait<0>(); /* the empty groups */
        /* the stash written by pass 1 is read (through L2) by pass 0 */
        __threadfence_block();
        __syncthreads();
    }
}

/* ---------------- the adjoint kernel: one warp, one direction, 32 channels ---------------- */
/* One reverse step's arithmetic (no memory traffic): updates lam and anext, returns du, ddelta,
 * the per-channel dk (dB) contributions in dkv and (Longhorn) -2 dkappa's per-channel term in
 * dkap2, which the caller sums over channels once: dk[n] += k[n] * sum_d dkap2 (one scalar sum
 * per step instead of N products per channel). */
template <int N, bool MAMBA>
__device__ __forceinline__ void adj_step(float (&lam)[N], float (&anext)[N], float (&dAacc)[N],
                                         float (&dkv)[N], float &du, float &ddl, float &dkap2,
                                         const float (&hp)[N], const float *row, float u, float dl,
                                         float gy, float Dsk, const float (&A)[N]) {
    constexpr int N4 = N / 4;
    const float4 *r4 = reinterpret_cast<const float4 *>(row);
    float S1[4] = {0.0f, 0.0f, 0.0f, 0.0f}, S2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (!MAMBA) {
        float kap = row[KQ<N>::KAP];
        float beta = sigmoidf_fast(dl);
        float rden = rcp_fast(fmaf(beta, kap, 1.0f)), eps = beta * rden;
#pragma unroll
        for (int g = 0; g < N4; g++) {
            float4 k4 = r4[g], q4 = r4[N4 + g], kk4 = r4[2 * N4 + g], m4 = r4[3 * N4 + g];
            float k[4] = {k4.x, k4.y, k4.z, k4.w}, q[4] = {q4.x, q4.y, q4.z, q4.w};
            float kk[4] = {kk4.x, kk4.y, kk4.z, kk4.w}, m2k[4] = {m4.x, m4.y, m4.z, m4.w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int n = 4 * g + e;
                float l = fmaf(anext[n], lam[n], gy * q[e]);
                lam[n] = l;
                float lw = l * fmaf(m2k[e], hp[n], u);    /* lam (u - 2 k h_{t-1}) */
                S1[e] = fmaf(l, k[e], S1[e]);             /* sum_n lam k */
                S2[e] = fmaf(lw, k[e], S2[e]);            /* sum_n lam k (u - 2 k h_{t-1}) */
                dkv[n] = eps * lw;
                anext[n] = fmaf(-eps, kk[e], 1.0f);       /* a_t, used at step t-1 */
            }
        }
        float s1 = (S1[0] + S1[1]) + (S1[2] + S1[3]), s2 = (S2[0] + S2[1]) + (S2[2] + S2[3]);
        du = fmaf(gy, Dsk, eps * s1);
        /* deps = sum_n lam (u k - k^2 h_{t-1}) = u s1 - (u s1 - s2) / 2, s2 = u s1 - 2 sum_n lam
         * k^2 h_{t-1}: 8 operations per state (the product lam h_{t-1} is not needed) */
        float deps = 0.5f * fmaf(u, s1, s2);
        float rden2 = rden * rden;
        ddl = deps * rden2 * beta * (1.0f - beta);
        dkap2 = -2.0f * deps * beta * beta * rden2;
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
        dkap2 = 0.0f;
    }
}

/* The adjoint kernel: one warp per block, one direction, 32 channels. Per CK-chunk of steps, in
 * reverse: the chunk's inputs (u dl z go rows, k|q rows, the start state) are staged by cp.async,
 * double-buffered. The history of h is kept in registers SUB steps at a time: the second half of
 * the chunk is reached by recomputing the first half without keeping it, then the first half is
 * recomputed with its history (1.5 recomputes per step, 1.25 once the unused last step of each
 * sub-chunk is left out; no shared-memory history). SUB = 4 keeps the history at 4N registers:
 * the Longhorn kernel fits in 128 registers (16 warps per SM; 40 bytes spilled outside the step
 * loop; 12 warps at 168 registers measured 2.5% slower), Mamba's in 168 (12 warps); v5 had SUB =
 * 8, 244 registers, 8 warps and local-memory spills. */
#define SUB 4
#ifndef ADJ_T
#define ADJ_T 128 /* threads (channels) per adjoint block: its warps share the staged inputs */
#endif
#ifndef ADJ_WARPS_LH
#define ADJ_WARPS_LH 16 /* Longhorn adjoint: warps per SM the register allocation aims at */
#endif
/* One sub-chunk of the adjoint: kq and st point at the sub-chunk's first step (st also at the
 * thread's column), du / dd at its first token's du and ddelta for the thread's channel, the next
 * step's `tstr` elements on (every address below is a compile-time offset from these) */
template <int N, bool MAMBA>
__device__ __forceinline__ void adjoint_sub(float (&lam)[N], float (&anext)[N], float (&dAacc)[N],
                                            float &dDacc, float &dbacc, const float (&hs)[N],
                                            const float *kq, const bf16 *st, int n, bf16 *du_p,
                                            bf16 *dd_p, ptrdiff_t tstr, bool act, int col,
                                            float Dsk, const float (&A)[N], float *red, float *tp) {
    constexpr int KQW = KQ<N>::W, T = ADJ_T;
    const int lane = col & 31, warp = col >> 5;
    auto in = [&](int q, int i) { return bf2f(st[(q * CK + i) * T]); };
    float H[SUB][N], h[N];
#pragma unroll
    for (int k = 0; k < N; k++) h[k] = hs[k];
#pragma unroll
    for (int i = 0; i < SUB; i++) {
        bool on = i < n;
        float u = on ? in(0, i) : 0.0f, dl = on ? in(1, i) : 0.0f, p0, p1;
        step_pre<N, MAMBA>(p0, p1, kq + i * KQW, u, dl);
        if (!on) p0 = 0.0f, p1 = 0.0f;
        step_upd<N, MAMBA>(h, kq + i * KQW, p0, p1, A);
#pragma unroll
        for (int k = 0; k < N; k++) H[i][k] = h[k];
    }
#pragma unroll
    for (int i = SUB - 1; i >= 0; i--) {
        if (i >= n) continue;
        float u = in(0, i), dl = in(1, i), zv = in(2, i);
        float gy = 0.5f * in(3, i) * zv * sigmoidf_fast(zv);
        float dkv[N], du, ddl, dkap2;
        if (i > 0) adj_step<N, MAMBA>(lam, anext, dAacc, dkv, du, ddl, dkap2, H[i > 0 ? i - 1 : 0], kq + i * KQW, u, dl, gy, Dsk, A);
        else adj_step<N, MAMBA>(lam, anext, dAacc, dkv, du, ddl, dkap2, hs, kq + i * KQW, u, dl, gy, Dsk, A);
        if (act) {
            du_p[i * tstr] = f2bf(du);
            dd_p[i * tstr] = f2bf(ddl);
        }
        dDacc = fmaf(gy, u, dDacc);
        dbacc += ddl;
        /* this warp's sums over its channels, into red[warp][i][0..N] (N: -2 dkappa) */
        float sum = warp_colsum<N>(dkv, tp + warp * N * TP_LD, lane);
        float *rr = red + (warp * SUB + i) * (N + 1);
        if (lane % (32 / N) == 0) rr[lane / (32 / N)] = sum;
        float ks = MAMBA ? 0.0f : warp_sum(dkap2);
        if (lane == N) rr[N] = ks;
    }
}

/* The adjoint's checkpoint staging when rows start 16-byte aligned (vec_ck 16): N rows of T
 * floats, each thread's pieces fixed, as in queue_rows16. */
template <int N>
__device__ __forceinline__ void adj_stage_ck16(const ScanArgs &a, float *ckdst, int c, int j, int b,
                                               int c0, int tid) {
    constexpr int T = ADJ_T, PC = T / 4, RC = T / PC;
    static_assert(T % 32 == 0 && N % RC == 0, "adjoint checkpoint staging shape");
    const int E = a.E, pc = tid % PC, chc = c0 + pc * 4;
    const float *cb = a.ckpt + (((size_t)b * 2 + j) * (a.nck - 1) + (c - 1)) * N * E;
#pragma unroll
    for (int k = 0; k < N / RC; k++) {
        int n = tid / PC + k * RC;
        cp_async<16>(ckdst + n * T + pc * 4, chc < E ? cb + (size_t)n * E + chc : cb, chc < E ? 16 : 0);
    }
}

template <int N, bool MAMBA>
__global__ void __launch_bounds__(ADJ_T, (MAMBA ? 12 : ADJ_WARPS_LH) * 32 / ADJ_T) scan_adjoint_kernel(ScanArgs a) {
    constexpr int KQW = KQ<N>::W, T = ADJ_T, NWB = ADJ_T / 32;
    constexpr int act_elems = 4 * CK * T;
    __shared__ __align__(16) bf16 stage[2 * act_elems];
    __shared__ __align__(16) float kqs[2 * CK * KQW];
    __shared__ __align__(16) float ckb[2 * N * T];
    __shared__ float red[2][NWB * SUB * (N + 1)]; /* per-warp dk | dkappa sums, by sub-chunk parity */
    __shared__ __align__(16) float tp[NWB * N * TP_LD];  /* warp_colsum tiles */
    const int L = a.L, E = a.E;
    int tid = threadIdx.x;
    /* blockIdx.z: sample b, chunk k of the token-parallel form; CK-chunks c_lo..c_hi */
    int j = blockIdx.y, bz = blockIdx.z, b = bz / a.nch, k = bz - b * a.nch, c0 = blockIdx.x * T, d = c0 + tid;
    const int c_lo = k * a.C / CK, c_hi = (min(L, (k + 1) * a.C) - 1) / CK;
    const bool carried = k + 1 < a.nch; /* the later chunks' adjoint comes in */
    bool act = d < E;
    float Dsk = act ? a.Dsk[j][d] : 0.0f;
    float A[N], lam[N], anext[N], dAacc[N], dDacc = 0.0f, dbacc = 0.0f;
#pragma unroll
    for (int n = 0; n < N; n++) {
        A[n] = (MAMBA && act) ? -expf(a.A_log[j][(size_t)d * N + n]) : 0.0f;
        /* lam_s = a_{s+1} lam_{s+1} + ...: the carry holds a_{s+1} lam_{s+1} already */
        lam[n] = (carried && act) ? a.chg[ch_idx(a, N, b, j, k + 1, n, d)] : 0.0f;
        anext[n] = carried ? 1.0f : 0.0f;
        dAacc[n] = 0.0f;
    }
    const float *kqb = a.kqt + ((size_t)j * a.B + b) * L * KQW;
    const bool fast = a.vec_act == 16 && a.vec_ck == 16;
    auto issue = [&](int c, int slot) {
        int s0 = c * CK, cs = min(CK, L - s0);
        bf16 *dst = stage + slot * act_elems;
        auto row_of = [&](int q, int i) { return act_row(a, a.dout, q, j, b, s0 + i, c0); };
        queue_kq<N>(kqs + slot * CK * KQW, kqb, s0, cs, CK, j, L, tid, T);
        /* inline rather than queue_act: through the helper Mamba's adjoint spilled 20 bytes
         * where it spilled 8, and the backward ran 1.7% slower (L = 197, B = 256) */
        if (fast) {
            queue_rows16<T, CK, 4>(dst, 4, cs, c0, E, [&](int q, int i) { return row_of(q, min(i, cs - 1)); }, tid);
            if (c > 0) adj_stage_ck16<N>(a, ckb + slot * N * T, c, j, b, c0, tid);
            return;
        }
        queue_rows(dst, 4 * cs, T, 2, c0, E, a.vec_act, [&](int r) -> const void * {
            int q = r / cs;
            return row_of(q, r - q * cs);
        }, tid, T, cs, CK);
        if (c > 0)
            queue_rows(ckb + slot * N * T, N, T, 4, c0, E, a.vec_ck, [&](int n) -> const void * {
                return a.ckpt + ((((size_t)b * 2 + j) * (a.nck - 1) + (c - 1)) * N + n) * E + c0;
            }, tid, T, N);
    };
    /* du and ddelta of token 0 for this thread's channel (a valid address when inactive too);
     * the direction's next step is tstr elements on */
    bf16 *du_b = a.du[j] + (size_t)b * L * E + (act ? d : 0), *dd_b = a.ddelta[j] + (size_t)b * L * E + (act ? d : 0);
    const ptrdiff_t tstr = j ? -(ptrdiff_t)E : (ptrdiff_t)E;
    size_t pbase = ((size_t)b * 2 + j) * a.nblk2 + blockIdx.x;
    float *pk = a.pk + pbase * L * N, *pkap = a.pkap + pbase * L;
    int par = 0;
    issue(c_hi, 0);
    cp_commit();
    for (int c = c_hi, it = 0; c >= c_lo; c--, it++) {
        int s0 = c * CK, cs = min(CK, L - s0), slot = it & 1;
        if (c > c_lo) {
            issue(c - 1, slot ^ 1);
            cp_commit();
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        const bf16 *st = stage + slot * act_elems;
        const float *kq = kqs + slot * CK * KQW;
        const float *h0 = ckb + slot * N * T + tid; /* the start state, stride T */
        /* the second half first: its start state is reached through the first half */
        float hm[N];
#pragma unroll
        for (int n = 0; n < N; n++) hm[n] = c > 0 ? h0[n * T] : 0.0f;
        if (cs > SUB) {
#pragma unroll 1
            for (int i = 0; i < SUB; i++) {
                float p0, p1;
                step_pre<N, MAMBA>(p0, p1, kq + i * KQW, bf2f(st[i * T + tid]),
                                   bf2f(st[(CK + i) * T + tid]));
                step_upd<N, MAMBA>(hm, kq + i * KQW, p0, p1, A);
            }
        }
#pragma unroll 1
        for (int sub = (cs - 1) / SUB; sub >= 0; sub--, par ^= 1) {
            float hs[N];
            int nsub = min(SUB, cs - sub * SUB);
#pragma unroll
            for (int n = 0; n < N; n++) hs[n] = sub ? hm[n] : (c > 0 ? h0[n * T] : 0.0f);
            const int sf = s0 + sub * SUB, tf = j ? L - 1 - sf : sf; /* the sub-chunk's first step, token */
            adjoint_sub<N, MAMBA>(lam, anext, dAacc, dDacc, dbacc, hs, kq + sub * SUB * KQW, st + sub * SUB * T + tid,
                                  nsub, du_b + (ptrdiff_t)tf * E, dd_b + (ptrdiff_t)tf * E, tstr, act, tid, Dsk, A,
                                  red[par], tp);
            /* the block's sums over its warps in warp order; red[par] is written again two
             * sub-chunks later, after the next barrier */
            __syncthreads();
            for (int idx = tid; idx < nsub * (N + 1); idx += T) {
                int i = idx / (N + 1), n = idx - i * (N + 1);
                float v = 0.0f;
#pragma unroll
                for (int w = 0; w < NWB; w++) v += red[par][(w * SUB + i) * (N + 1) + n];
                int s = s0 + sub * SUB + i, t = j ? L - 1 - s : s;
                if (n < N) pk[(size_t)t * N + n] = v;
                else pkap[t] = v;
            }
        }
        __syncthreads(); /* this buffer is free for the next chunk */
    }
    if (act) { /* per (sample, chunk) row bz */
        a.pd[((size_t)bz * 2 + j) * E + d] = dDacc;
        a.pd[((size_t)a.B * a.nch * 2 + bz * 2 + j) * E + d] = dbacc;
        if (MAMBA)
#pragma unroll
            for (int n = 0; n < N; n++) a.pa[(((size_t)bz * 2 + j) * E + d) * N + n] = dAacc[n] * A[n];
    }
}

/* ---------------- the token-parallel form: chunk summaries and their chain ----------------
 * Thread (channel d; direction j; sample b, chunk k) runs chunk k's recurrence from a zero state:
 * its end state S and the product P of its forget gates (h_end = P h_start + S). With ADJ also
 * the reverse adjoint from zero past the chunk's end, lam_s = a_{s+1} lam_{s+1} + gy_s q_s, whose
 * carry into the chunk before is a_s0 lam_s0 (with the later chunks': G = G_local + P G_next).
 * Only what the chain reads is made: S and P of chunks 0 .. nch - 2, G of chunks 1 .. nch - 1.
 * The inputs are staged as in the pair kernel (cp.async, LOC_STAGES rounds of CKS steps in
 * flight; the k|q rows in shared memory, read by every thread of the block): v1 read them with
 * plain global loads a step at a time and was latency-bound (1024 px b1: 62 us for 64 steps;
 * 2048 px b8: 1.15 ms, twice the pair kernel's time for the same steps). */
#define LOC_T 128
#define LOC_STAGES 3
/* MODE: LOC_FWD S and P; LOC_BWD S and P, then G; LOC_KEPT (the forward's states kept) G, with P
 * made in the same reverse pass */
enum { LOC_FWD, LOC_BWD, LOC_KEPT };
template <int N, bool MAMBA, int MODE>
__global__ void __launch_bounds__(LOC_T) scan_local_kernel(ScanArgs a) {
    constexpr bool ADJ = MODE != LOC_FWD;
    constexpr int KQW = KQ<N>::W, T = LOC_T, NQ = ADJ ? 4 : 2;
    constexpr int buf_elems = NQ * CKS * T;
    __shared__ __align__(16) bf16 stage[LOC_STAGES * buf_elems];
    __shared__ __align__(16) float kqs[LOC_STAGES * CKS * KQW];
    const int L = a.L, E = a.E, j = blockIdx.y, b = blockIdx.z / a.nch, k = blockIdx.z - b * a.nch;
    const int tid = threadIdx.x, c0 = blockIdx.x * T, d = c0 + tid;
    const bool act = d < E;
    const int sb = k * a.C, se = min(L, sb + a.C), nsc = (se - sb + CKS - 1) / CKS;
    const float *kqb = a.kqt + ((size_t)j * a.B + b) * L * KQW;
    float A[N];
#pragma unroll
    for (int n = 0; n < N; n++) A[n] = (MAMBA && act) ? -expf(a.A_log[j][(size_t)d * N + n]) : 0.0f;
    /* round r (steps sb + r CKS ..) into slot `slot`: u, dl [, z, go] and the k|q rows */
    auto issue = [&](int r, int nq, int slot) {
        if (r < 0 || r >= nsc) return;
        const int s0 = sb + r * CKS, cs = min(CKS, se - s0);
        bf16 *dst = stage + slot * buf_elems;
        auto row_of = [&](int q, int i) { return act_row(a, a.dout, q, j, b, s0 + i, c0); };
        queue_act<T, CKS, NQ>(dst, nq, cs, c0, E, a.vec_act, row_of, tid);
        queue_kq<N>(kqs + slot * CKS * KQW, kqb, s0, cs, CKS, j, L, tid, T);
    };
    /* the pipeline over rounds r(0), r(1), ... (forward or reverse order); body(st, kq, cs, s0) */
    auto pipeline = [&](bool rev, int nq, auto body) {
        auto rnd = [&](int it) { return rev ? nsc - 1 - it : it; };
#pragma unroll
        for (int it = 0; it < LOC_STAGES - 1; it++) {
            issue(rnd(it), nq, it);
            cp_commit();
        }
        for (int it = 0; it < nsc; it++) {
            const int r = rnd(it), s0 = sb + r * CKS, cs = min(CKS, se - s0), slot = it % LOC_STAGES;
            issue(rnd(it + LOC_STAGES - 1), nq, (it + LOC_STAGES - 1) % LOC_STAGES);
            cp_commit();
            cp_wait<LOC_STAGES - 1>();
            __syncthreads();
            body(stage + slot * buf_elems, kqs + slot * CKS * KQW, cs, s0);
            __syncthreads(); /* the slot is free for the next rounds */
        }
        cp_wait<0>();
    };
    if (MODE != LOC_KEPT && k + 1 < a.nch) { /* S, P: the last chunk's start nothing */
        float h[N], P[N], sdt = 0.0f;
#pragma unroll
        for (int n = 0; n < N; n++) h[n] = 0.0f, P[n] = 1.0f;
        pipeline(false, 2, [&](const bf16 *st, const float *kq, int cs, int s0) {
            float p0[CKS], p1[CKS], pu[CKS];
#pragma unroll
            for (int i = 0; i < CKS; i++) {
                step_pre<N, MAMBA>(p0[i], p1[i], kq + i * KQW, bf2f(st[i * T + tid]), bf2f(st[(CKS + i) * T + tid]));
                if (i >= cs) p0[i] = 0.0f, p1[i] = 0.0f; /* past the chunk: nothing changes */
                pu[i] = p0[i] * p1[i]; /* Longhorn: eps u */
            }
#pragma unroll
            for (int i = 0; i < CKS; i++) {
                const float4 *r4 = reinterpret_cast<const float4 *>(kq + i * KQW);
#pragma unroll
                for (int g = 0; g < N / 4; g++) {
                    float4 k4 = r4[g], kk4 = r4[KQ<N>::KK / 4 + g];
                    float kv[4] = {k4.x, k4.y, k4.z, k4.w}, kk[4] = {kk4.x, kk4.y, kk4.z, kk4.w};
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int n = 4 * g + e;
                        if (MAMBA) {
                            h[n] = state_upd<MAMBA>(h[n], kv[e], p0[i], p1[i], A[n]);
                        } else { /* a = 1 - eps k^2 serves both: 4 operations per state, not 5 */
                            const float at = fmaf(-p0[i], kk[e], 1.0f);
                            h[n] = fmaf(at, h[n], pu[i] * kv[e]);
                            P[n] *= at;
                        }
                    }
                }
                if (MAMBA) sdt += p0[i];
            }
        });
        if (act)
#pragma unroll
            for (int n = 0; n < N; n++) {
                a.chs[ch_idx(a, N, b, j, k, n, d)] = h[n];
                a.chp[ch_idx(a, N, b, j, k, n, d)] = MAMBA ? __expf(A[n] * sdt) : P[n];
            }
    }
    if (!ADJ || k == 0) return; /* G: nothing comes before chunk 0 */
    float lam[N], an[N], P[N], sdt = 0.0f; /* P, sdt: LOC_KEPT's product of the forget gates */
#pragma unroll
    for (int n = 0; n < N; n++) lam[n] = 0.0f, an[n] = 0.0f, P[n] = 1.0f;
    pipeline(true, NQ, [&](const bf16 *st, const float *kq, int cs, int s0) {
        auto in = [&](int q, int i) { return bf2f(st[(q * CKS + i) * T + tid]); };
#pragma unroll
        for (int i = CKS - 1; i >= 0; i--) {
            if (i >= cs) continue;
            const float *row = kq + i * KQW;
            float p0, p1, zz = in(2, i), gy = 0.5f * in(3, i) * zz * sigmoidf_fast(zz);
            step_pre<N, MAMBA>(p0, p1, row, in(0, i), in(1, i));
            const float4 *r4 = reinterpret_cast<const float4 *>(row);
#pragma unroll
            for (int g = 0; g < N / 4; g++) {
                float4 q4 = r4[N / 4 + g], kk4 = r4[KQ<N>::KK / 4 + g];
                float qv[4] = {q4.x, q4.y, q4.z, q4.w}, kk[4] = {kk4.x, kk4.y, kk4.z, kk4.w};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int n = 4 * g + e;
                    lam[n] = fmaf(an[n], lam[n], gy * qv[e]);
                    an[n] = MAMBA ? __expf(p0 * A[n]) : fmaf(-p0, kk[e], 1.0f);
                    if (MODE == LOC_KEPT && !MAMBA) P[n] *= an[n];
                }
            }
            if (MODE == LOC_KEPT && MAMBA) sdt += p0;
        }
    });
    if (act)
#pragma unroll
        for (int n = 0; n < N; n++) {
            a.chg[ch_idx(a, N, b, j, k, n, d)] = an[n] * lam[n];
            if (MODE == LOC_KEPT && k + 1 < a.nch) /* the chain reads P of chunks 1 .. nch - 2 */
                a.chp[ch_idx(a, N, b, j, k, n, d)] = MAMBA ? __expf(A[n] * sdt) : P[n];
        }
}

/* The chain over the chunks, one thread per (sample, direction, n, channel): the state after
 * chunk k, h_k = P_k h_{k-1} + S_k (k = 1 .. nch - 2: the last one starts nothing), in place of
 * S_k; with adj also the adjoint carried into chunk k - 1, G_k = G_local,k + P_k G_{k+1}
 * (k = nch - 2 .. 1), in place of G_local,k. The loads of CAR_U chunks are issued before any of
 * their results is stored (v1 loaded one chunk at a time behind the previous store: 29 us for
 * the 65 chunks of 1024 px b1, a global-memory latency per chunk). */
#define CAR_U 8
template <int N>
__global__ void scan_carry_kernel(ScanArgs a, int adj) { /* adj: also G; a.kept: only G */
    const size_t tot = (size_t)a.B * 2 * N * a.E, st = (size_t)N * a.E;
    const int nch = a.nch;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < tot; idx += (size_t)gridDim.x * blockDim.x) {
        size_t d = idx % a.E, r = idx / a.E, n = r % N, bj = r / N;
        size_t base = bj * nch * st + n * a.E + d; /* chunk k at base + k st */
        float hc = a.chs[base];
        for (int k0 = 1; k0 + 1 < nch && !a.kept; k0 += CAR_U) {
            float pv[CAR_U], sv[CAR_U];
#pragma unroll
            for (int i = 0; i < CAR_U; i++) {
                const bool on = k0 + i + 1 < nch;
                pv[i] = on ? a.chp[base + (k0 + i) * st] : 0.0f;
                sv[i] = on ? a.chs[base + (k0 + i) * st] : 0.0f;
            }
#pragma unroll
            for (int i = 0; i < CAR_U; i++) {
                if (k0 + i + 1 >= nch) break;
                hc = fmaf(pv[i], hc, sv[i]);
                a.chs[base + (k0 + i) * st] = hc;
            }
        }
        if (!adj) continue;
        float g = a.chg[base + (nch - 1) * st];
        for (int k0 = nch - 2; k0 >= 1; k0 -= CAR_U) {
            float pv[CAR_U], gv[CAR_U];
#pragma unroll
            for (int i = 0; i < CAR_U; i++) {
                const bool on = k0 - i >= 1;
                pv[i] = on ? a.chp[base + (k0 - i) * st] : 0.0f;
                gv[i] = on ? a.chg[base + (k0 - i) * st] : 0.0f;
            }
#pragma unroll
            for (int i = 0; i < CAR_U; i++) {
                if (k0 - i < 1) break;
                g = fmaf(pv[i], g, gv[i]);
                a.chg[base + (k0 - i) * st] = g;
            }
        }
    }
}

/* ---------------- finalize: partial sums in a fixed order ---------------- */
template <int N, bool MAMBA>
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
        if (!MAMBA) { /* dk += 2 k dkappa */
            float kap = 0.0f;
#pragma unroll 8
            for (int k = 0; k < a.nblk2; k++) kap += a.pkap[(((size_t)b * 2 + j) * a.nblk2 + k) * a.L + t];
            dk = fmaf(a.kqt[(((size_t)j * a.B + b) * a.L + t) * KQ<N>::W + n], kap, dk);
        }
        bf16 *row = a.dxdbl[j] + ((size_t)b * a.L + t) * a.W + a.dt_ld;
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

static void fill_common(ScanArgs *a, const void *const u[2], const void *const delta[2],
                        const void *const xdbl[2], const void *z, const void *dout,
                        const float *const D[2], const float *const A_log[2], int B, int L, int E,
                        int N, int dt_ld, int ldx, int ldz) {
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
    a->B = B, a->L = L, a->E = E, a->dt_ld = dt_ld, a->W = ldx, a->ldz = ldz;
    a->nck = (L + CK - 1) / CK;
    /* act rows start at (row * ld + block * tpb) elements */
    const void *pa[6] = {u[0], u[1], delta[0], delta[1], z, dout ? dout : z};
    size_t sa[3] = {(size_t)E * 2, (size_t)ldz * 2, (size_t)32 * 2};
    a->vec_act = vec_bytes(pa, 6, sa, 3);
    size_t sc[1] = {(size_t)E * 4};
    const void *pc[1] = {NULL};
    a->vec_ck = vec_bytes(pc, 1, sc, 1) >= 16 ? 16 : 4;
}

/* bytes of the k|q table of both directions */
template <int N>
static size_t kq_bytes(const ScanArgs *a) {
    return (size_t)2 * a->B * a->L * KQ<N>::W * sizeof(float);
}
/* the k|q table of both directions into kqt; compact: the quad kernel's rows into kqh */
template <int N>
static void make_kq(ScanArgs *a, float *kqt, bool compact = false) {
    size_t BL = (size_t)a->B * a->L;
    int blocks = cu_blocks_capped(2 * BL * N, 256, 16);
    if (compact) scan_kq_kernel<N, true><<<blocks, 256, 0, cu()->stream>>>(kqt, a->xdbl[0], a->xdbl[1], (int)BL, a->W, a->dt_ld);
    else scan_kq_kernel<N, false><<<blocks, 256, 0, cu()->stream>>>(kqt, a->xdbl[0], a->xdbl[1], (int)BL, a->W, a->dt_ld);
    CU_LAUNCH_CHECK();
    if (compact) a->kqh = (const char *)kqt;
    else a->kqt = kqt;
}

/* The chunks of the token-parallel form. req > 0: chunks of req steps (rounded up to a multiple
 * of CK); req < 0: none. req = 0, by shape: none while the sample x channel threads of a pass
 * (B x E, in blocks of 128) reach `seq` (SCAN_SEQ_FWD, SCAN_SEQ_BWD), where the sequential
 * kernels are as fast; else chunks that bring a pass to about SCAN_PAR_THREADS threads, none
 * shorter than SCAN_MIN_C. The forward's threshold is lower: its sequential kernel does half
 * the work of the chunked form, its backward the same work in a kernel that fills the GPU less.
 * Measured on the H100 (dev/cuda/scan, ViL-Tiny's E = 384, fwd / bwd us): L = 4097, B = 1:
 * C = 16 140 / 435, 32 106 / 308, 64 104 / 295, 128 150 / 435; B = 32: C = 64 1897 / 5609,
 * 128 1835 / 5556, 256 1836 / 5618, 512 2039 / 5662; L = 16385, B = 8: C = 64 1935 / 5709,
 * 256 1852 / 5641; L = 197, B = 256: sequential 271 / 1349 (cuda/PERF_NOTES.md). Once the
 * sequential pair kernel was compiled per direction again: L = 4097, B = 32: sequential 1579 /
 * 7289, chunked (C = 256) 1785 / 5560; B = 1: 1527 / 6215 against 97 / 286. The
 * environment's VIL_SCAN_CHUNK, when set, takes the place of a request of 0 (for measuring the
 * model with other chunks: -1 the sequential kernels). */
#ifndef SCAN_SEQ_FWD
#define SCAN_SEQ_FWD 12288
#endif
/* Longhorn's forward also chunks up to this many threads when the sequence is long (at least
 * SCAN_LONG_L tokens), since the staged chunk summaries: E = 384, B = 32, fwd us, sequential
 * (quad kernel) / chunked: L = 4097 1,142 / 1,053; L = 1025 295 / 317; L = 197 63 / 97. Mamba's
 * quad kernel stays ahead there (L = 4097 1,465 / 1,736). */
#ifndef SCAN_SEQ_FWD_LONG
#define SCAN_SEQ_FWD_LONG 16384
#endif
#ifndef SCAN_LONG_L
#define SCAN_LONG_L 2048
#endif
#ifndef SCAN_SEQ_BWD
#define SCAN_SEQ_BWD 32768
#endif
/* The forward's quad kernel (4 threads per channel) where the pair kernel's passes would have
 * fewer threads than this (B x E x chunks, E in blocks of 128). Measured on the H100 (dev/cuda/scan,
 * E = 384, fwd us, pair / quad): L = 4097, B = 32 sequential 1368 / 1150; L = 197, B = 64
 * 97.6 / 104.6, B = 256 234 / 362; chunked (C = 64) L = 4097, B = 1 97 / 97, B = 8 510 / 692 with
 * the quad's then 4x longer chunks; vil bench, 224 px b1 latency 2.21 / 1.90 ms, b32 inference
 * 11,702 / 12,794 img/s (cuda/PERF_NOTES.md session 12). Mamba's step costs an exp per state,
 * so its quad kernel pays off further: L = 197, B = 64 217 / 133, B = 256 420 / 466; L = 1025,
 * B = 32 1005 / 377 (B = 65 .. 255 not measured: the threshold sits between) */
#ifndef SCAN_QUAD_FWD
#define SCAN_QUAD_FWD 16384
#endif
#ifndef SCAN_QUAD_FWD_MAMBA
#define SCAN_QUAD_FWD_MAMBA 32768
#endif
#ifndef SCAN_PAR_THREADS
#define SCAN_PAR_THREADS 196608
#endif
#ifndef SCAN_MIN_C
#define SCAN_MIN_C 64
#endif
/* a measurement knob from the environment (VIL_SCAN_CHUNK, VIL_SCAN_SPLIT), read once and
 * announced on stderr when set; 0 when not */
static int env_knob(int *cache, const char *name, const char *what) {
    if (*cache == -2) {
        const char *e = getenv(name);
        *cache = e && *e ? atoi(e) : 0;
        if (*cache) fprintf(stderr, "vil: %s=%d: the scan's %s set, not chosen by shape\n", name, *cache, what);
    }
    return *cache;
}
static int env_chunk = -2, env_split = -2;
static void choose_chunks(ScanArgs *a, int req, long seq) {
    if (req == 0) req = env_knob(&env_chunk, "VIL_SCAN_CHUNK", "chunks are");
    long L = a->L, th = (long)a->B * ((a->E + 127) / 128 * 128), C = L;
    if (req > 0) {
        C = (req + CK - 1) / CK * CK;
    } else if (req == 0 && th < seq) {
        long want = (SCAN_PAR_THREADS + th - 1) / th; /* chunks */
        C = (L + want - 1) / want;
        C = (C + CK - 1) / CK * CK;
        if (C < SCAN_MIN_C) C = SCAN_MIN_C;
    }
    /* blockIdx.z holds sample x chunk */
    long most = 65535 / a->B;
    if ((L + C - 1) / C > most) C = ((L + most - 1) / most + CK - 1) / CK * CK;
    if (C >= L) C = L;
    a->C = (int)C, a->nch = (int)((L + C - 1) / C);
}

/* bytes of one chunk-summary array */
template <int N>
static size_t ch_bytes(const ScanArgs *a) {
    return (size_t)a->B * 2 * a->nch * N * a->E * sizeof(float);
}

/* the chunk summaries and their chain (nch > 1): the start state of every chunk, and with adj
 * the adjoint carried into it */
template <int N, bool MAMBA>
static void chunk_chain(const ScanArgs &a, bool adj) {
    dim3 grid((a.E + LOC_T - 1) / LOC_T, 2, a.B * a.nch);
    if (adj && a.kept) scan_local_kernel<N, MAMBA, LOC_KEPT><<<grid, LOC_T, 0, cu()->stream>>>(a);
    else if (adj) scan_local_kernel<N, MAMBA, LOC_BWD><<<grid, LOC_T, 0, cu()->stream>>>(a);
    else scan_local_kernel<N, MAMBA, LOC_FWD><<<grid, LOC_T, 0, cu()->stream>>>(a);
    CU_LAUNCH_CHECK();
    if (a.nch > 2) {
        scan_carry_kernel<N><<<cu_blocks_capped((size_t)a.B * 2 * N * a.E, 256, 16), 256, 0, cu()->stream>>>(a, adj);
        CU_LAUNCH_CHECK();
    }
}

/* the pair (quad) kernel over all chunks: both directions in one launch when there is one
 * chunk, else the backward direction (the stash) in one launch and the forward one after it */
template <int N, bool MAMBA, bool BWD>
static void pair_launch(ScanArgs a) {
    const bool quad = !BWD && a.split == QUAD_Q;
    const int tc = quad ? QUAD_T / QUAD_Q : PAIR_T; /* channels per block */
    dim3 grid((a.E + tc - 1) / tc, a.B, a.nch);
    for (int p = 0; p < 2; p++) {
        a.pass_lo = a.nch > 1 ? p : 0, a.pass_hi = a.nch > 1 ? p + 1 : 2;
        if (quad && a.nch > 1) scan_quad_kernel<N, MAMBA, true><<<grid, QUAD_T, 0, cu()->stream>>>(a);
        else if (quad) scan_quad_kernel<N, MAMBA, false><<<grid, QUAD_T, 0, cu()->stream>>>(a);
        else if (a.nch > 1) scan_pair_kernel<N, MAMBA, BWD, true><<<grid, PAIR_T, 0, cu()->stream>>>(a);
        else scan_pair_kernel<N, MAMBA, BWD, false><<<grid, PAIR_T, 0, cu()->stream>>>(a);
        CU_LAUNCH_CHECK();
        if (a.nch == 1) break;
    }
}

/* carve sizes[i] bytes from one SCR_OP scratch region in 4 KB aligned pieces */
static void carve(void **out, const size_t *sizes, int n) {
    size_t off = 0, offs[16];
    for (int i = 0; i < n; i++) offs[i] = off, off += (sizes[i] + 4095) / 4096 * 4096;
    char *base = (char *)cu_scratch(SCR_OP, off);
    for (int i = 0; i < n; i++) out[i] = base + offs[i];
}

template <int N, bool MAMBA>
static void forward_impl(ScanArgs a) {
    /* the float k|q rows for the pair kernel and the chunk summaries, the compact ones for the
     * quad kernel */
    const bool quad = a.split == QUAD_Q, flt = !quad || a.nch > 1;
    size_t chb = a.nch > 1 ? ch_bytes<N>(&a) : 0;
    size_t sz[4] = {flt ? kq_bytes<N>(&a) : 0, quad ? (size_t)2 * a.B * a.L * KQH<N>::BYTES : 0, a.keep ? 0 : chb, chb};
    void *p[4];
    carve(p, sz, 4);
    if (flt) make_kq<N>(&a, (float *)p[0]);
    if (quad) make_kq<N>(&a, (float *)p[1], true);
    a.chs = a.keep ? a.keep : (float *)p[2], a.chp = (float *)p[3];
    if (a.nch > 1) chunk_chain<N, MAMBA>(a, false);
    pair_launch<N, MAMBA, false>(a);
}

template <int N, bool MAMBA>
static void backward_impl(ScanArgs a) {
    a.nblk1 = (a.E + PAIR_T - 1) / PAIR_T;
    a.nblk2 = (a.E + ADJ_T - 1) / ADJ_T;
    size_t B = a.B, L = a.L, E = a.E, Bc = B * a.nch; /* Bc: the (sample, chunk) rows of pd, pa */
    /* one scratch region, carved in 4 KB aligned pieces (checkpoint rows are copied in 16-byte
     * pieces from (row * E + block * 32) floats) */
    size_t chb = a.nch > 1 ? ch_bytes<N>(&a) : 0;
    size_t sz[8] = {B * 2 * (a.nck > 1 ? a.nck - 1 : 1) * N * E * sizeof(float), /* ckpt */
                    B * a.nblk1 * 2 * L * N * sizeof(float),                      /* pq */
                    B * 2 * a.nblk2 * L * (N + 1) * sizeof(float),                /* pk, pkap */
                    Bc * 2 * E * (MAMBA ? N + 2 : 2) * sizeof(float),             /* pd, pb, pa */
                    kq_bytes<N>(&a), a.kept ? 0 : chb, chb, chb};                 /* chs chp chg */
    void *p[8];
    carve(p, sz, 8);
    a.ckpt = (float *)p[0];
    a.pq = (float *)p[1];
    a.pk = (float *)p[2];
    a.pkap = a.pk + B * 2 * a.nblk2 * L * N;
    a.pd = (float *)p[3];
    a.pa = a.pd + 2 * Bc * 2 * E;
    make_kq<N>(&a, (float *)p[4]);
    if (!a.kept) a.chs = (float *)p[5];
    a.chp = (float *)p[6], a.chg = (float *)p[7];
    if (a.nch > 1) chunk_chain<N, MAMBA>(a, true);
    pair_launch<N, MAMBA, true>(a);
    scan_adjoint_kernel<N, MAMBA><<<dim3(a.nblk2, 2, Bc), ADJ_T, 0, cu()->stream>>>(a);
    CU_LAUNCH_CHECK();
    size_t tot = B * 2 * L * N;
    int blocks = cu_blocks_capped(tot, 256, 16);
    scan_dkdq_kernel<N, MAMBA><<<blocks, 256, 0, cu()->stream>>>(a);
    CU_LAUNCH_CHECK();
    /* dD[j] (+ dA_log[j]) += the per-(sample, chunk) partials, summed in a fixed order */
    for (int j = 0; j < 2; j++) {
        colsum_rows_accumulate_cuda(a.dD[j], a.pd + (size_t)j * E, (int)Bc, (int)E, (int)(2 * E));
        if (a.dbs[j])
            colsum_rows_accumulate_cuda(a.dbs[j], a.pd + (Bc * 2 + j) * E, (int)Bc, (int)E, (int)(2 * E));
        if (MAMBA)
            colsum_rows_accumulate_cuda(a.dA[j], a.pa + (size_t)j * E * N, (int)Bc, (int)(E * N), (int)(2 * E * N));
    }
}

#define DISPATCH_N(N_, MAMBA_, FN, ARG)                                                        \
    do {                                                                                       \
        if ((N_) == 16) { if (MAMBA_) FN<16, true>(ARG); else FN<16, false>(ARG); }            \
        else if ((N_) == 8) { if (MAMBA_) FN<8, true>(ARG); else FN<8, false>(ARG); }          \
        else if ((N_) == 4) { if (MAMBA_) FN<4, true>(ARG); else FN<4, false>(ARG); }          \
        else VIL_FATAL("scan: d_state = %d; the CUDA scan is built for 4, 8 and 16", (N_));     \
    } while (0)

/* In training (the forward asked to keep its states) at L >= SCAN_LONG_L the forward cuts the
 * backward's chunks wherever the backward chunks, so that its states serve the backward: the
 * chunked forward costs more than the sequential one there (ViL-Small, ViM at 1024 px b32) but
 * the backward's summaries then skip their forward pass. 0: the forward chooses alone. */
#ifndef SCAN_KEEP_LONG
#define SCAN_KEEP_LONG 1
#endif
/* the forward's and the backward's chunks of a shape (req: VilScanFwd/Bwd.chunk; keep: the
 * forward is asked to keep its states) */
static void bwd_chunks(ScanArgs *a, int req) { choose_chunks(a, req, SCAN_SEQ_BWD); }
static void fwd_chunks(ScanArgs *a, int req, int mamba, bool keep) {
    if (SCAN_KEEP_LONG && keep && a->L >= SCAN_LONG_L) bwd_chunks(a, req);
    else choose_chunks(a, req, !mamba && a->L >= SCAN_LONG_L ? SCAN_SEQ_FWD_LONG : SCAN_SEQ_FWD);
}
/* 1 when the backward cuts f's shape into f's chunks (more than one): states kept at them are
 * then what the backward's chain would make */
static bool same_as_bwd(const ScanArgs &f, int req) {
    ScanArgs g = f;
    bwd_chunks(&g, req);
    return f.nch > 1 && f.C == g.C && f.nch == g.nch;
}
/* f cut as a forward that keeps its states; 1 when those states serve the backward */
static bool states_shared(ScanArgs *f, int req, int mamba) {
    fwd_chunks(f, req, mamba, true);
    return same_as_bwd(*f, req);
}

extern "C" size_t scan_states_bytes_cuda(const VilScanFwd *p) {
    ScanArgs a;
    memset(&a, 0, sizeof a);
    a.B = p->B, a.L = p->L, a.E = p->E;
    if (!states_shared(&a, p->chunk, p->rec == VIL_REC_MAMBA)) return 0;
    return (size_t)a.B * 2 * a.nch * p->N * a.E * sizeof(float);
}

extern "C" void scan_bidir_forward_cuda(const VilScanFwd *p) {
    int mamba = p->rec == VIL_REC_MAMBA;
    ScanArgs a;
    fill_common(&a, p->u, p->delta, p->xdbl, p->z, NULL, p->D, mamba ? p->A_log : NULL, p->B, p->L,
                p->E, p->N, p->dt_ld, p->ldx, p->ldz);
    a.out = (bf16 *)p->out;
    /* the chunks are the pair kernel's (the chunk summaries run a thread per channel whichever
     * kernel runs the passes); the quad kernel runs the passes where the pair kernel's would
     * have fewer than SCAN_QUAD_FWD threads */
    fwd_chunks(&a, p->chunk, mamba, p->states != NULL);
    /* the states at the chunk boundaries into the caller's buffer, for the backward */
    if (p->states && same_as_bwd(a, p->chunk)) a.keep = p->states;
    int split = p->split ? p->split : env_knob(&env_split, "VIL_SCAN_SPLIT", "threads per channel are");
    if (split == 0)
        split = (long)p->B * ((p->E + 127) / 128 * 128) * a.nch < (mamba ? SCAN_QUAD_FWD_MAMBA : SCAN_QUAD_FWD) ? QUAD_Q : 1;
    if (split != 1 && split != QUAD_Q) VIL_FATAL("scan: split = %d; the CUDA forward has 1 and %d threads per channel", split, QUAD_Q);
    a.split = split;
    DISPATCH_N(p->N, mamba, forward_impl, a);
}

extern "C" void scan_bidir_backward_cuda(const VilScanBwd *p) {
    int mamba = p->rec == VIL_REC_MAMBA;
    ScanArgs a;
    fill_common(&a, p->u, p->delta, p->xdbl, p->z, p->dout, p->D, mamba ? p->A_log : NULL, p->B,
                p->L, p->E, p->N, p->dt_ld, p->ldx, p->ldz);
    a.dz = (bf16 *)p->dz;
    for (int j = 0; j < 2; j++) {
        a.du[j] = (bf16 *)p->du[j];
        a.ddelta[j] = (bf16 *)p->ddelta[j];
        a.dxdbl[j] = (bf16 *)p->dxdbl[j];
        a.dD[j] = p->dD[j];
        a.dA[j] = mamba ? p->dA_log[j] : NULL;
        a.dbs[j] = p->ddelta_sum[j];
    }
    a.split = 1;
    bwd_chunks(&a, p->chunk);
    /* the forward's states at the chunk boundaries (kept where the chunks are the same) */
    ScanArgs f = a;
    if (p->states && states_shared(&f, p->chunk, mamba)) a.chs = (float *)p->states, a.kept = 1;
    DISPATCH_N(p->N, mamba, backward_impl, a);
}
