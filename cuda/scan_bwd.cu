/* scan_bwd.cu: the scan's backward kernels (scan_common.cuh tells the whole scan): the adjoint
 * (du, ddelta and the partial sums of dk, dkappa, dD, dA_log per chunk of channels) and the
 * finalize of dk and dq, with their launcher. The recomputing pass before them is the pair
 * kernel's (scan_fwd.cu). */
#include "cuda/scan_rec.cuh"

/* ---------------- the adjoint kernel ----------------
 * A block of ADJ_T threads (one per channel) per (sample, direction, ADJ_T channels). Per CK-chunk
 * of steps, in reverse: the chunk's inputs (u dl z go rows, k|q rows, the start state) are staged
 * by cp.async, double-buffered. The history of h is kept in registers SUB steps at a time: the
 * second half of the chunk is reached by recomputing the first half from the checkpoint without
 * keeping it (in the same sub-chunk iteration, so nothing is live across the two), then each half
 * is recomputed with its history (1.25 recomputes per step: the last step of a sub-chunk is not
 * needed; no shared-memory history). SUB = 4 keeps the history at 4N registers.
 * The step (R::adj) carries m = a_{t+1} lam_{t+1} in place of lam and the gate (16 fewer
 * registers; Longhorn's step takes 7 operations per state), puts each state's dk term into the
 * warp's transpose tile as it is made (no 16-value array live), and du / ddelta go out through
 * one running offset: the steps are visited in strictly decreasing order, so the token moves by
 * -tstr a step. Registers (dev/cuda/ptxas_report.py, sm_90, N = 16): Longhorn 128 (16 warps per SM;
 * 8 bytes spilled, 0 without adj_fullsub), Mamba 168 (12 warps), none spilled.
 * Versions (cuda/PERF_NOTES.md): v14 (lam and the gate carried, 8 operations per state, the dk
 * terms summed from an array) 485 warp instructions per warp-step at 16 states, 1,261 us a Tiny
 * layer's backward; this one 443, 1,184 us, and 1,166 with whole sub-chunks compiled apart
 * (adj_fullsub: no per-step bounds tests; Mamba's spills 64 bytes that way and runs 2% slower). */
#define SUB 4
/* The adjoint's checkpoint staging when rows start 16-byte aligned (vec_ck 16): N rows of T
 * floats, each thread's pieces fixed, as in queue_rows16. CK-chunk 0's start state is h0's
 * (same rows). */
template <int N, bool ST, int D>
__device__ __forceinline__ void adj_stage_ck16(const ScanArgs &a, float *ckdst, int c, int j, int b,
                                               int c0, int tid) {
    constexpr int T = ADJ_T, PC = T / 4, RC = T / PC;
    static_assert(T % 32 == 0 && N % RC == 0, "adjoint checkpoint staging shape");
    const int E = a.E, pc = tid % PC, chc = c0 + pc * 4;
    const float *cb = !ST || c > 0 ? a.ckpt + (((size_t)b * D + j) * (a.nck - 1) + (c - 1)) * N * E
                                   : a.h0 + ((size_t)b * D + j) * N * E;
#pragma unroll
    for (int k = 0; k < N / RC; k++) {
        int n = tid / PC + k * RC;
        cp_async<16>(ckdst + n * T + pc * 4, chc < E ? cb + (size_t)n * E + chc : cb, chc < E ? 16 : 0);
    }
}

/* One sub-chunk of the adjoint: kq and st point at its first step (st at the thread's column);
 * D the directions (the gate's weight, dir_weight) */
template <int N, class R, int NF, int D> /* NF > 0: n == NF known at compile time (a whole sub-chunk) */
__device__ __forceinline__ void adjoint_sub(float (&m)[N], float (&dAacc)[N], float &dDacc, float &dbacc,
                                            const float (&hs)[N], const float *kq, const bf16 *st, int n,
                                            bf16 *du_b, bf16 *dd_b, ptrdiff_t &off, ptrdiff_t tstr, bool act,
                                            int lane, float Dsk, const float (&A)[N], float *redw, float *tpw,
                                            const float4 *tprow) {
    constexpr int KQW = KQ<N>::W, T = ADJ_T, P = 32 / N;
    if (NF) n = NF;
    auto in = [&](int q, int i) { return bf2f(st[(q * CK + i) * T]); };
    float H[SUB][N];
#pragma unroll
    for (int k = 0; k < N; k++) H[0][k] = hs[k];
#pragma unroll
    for (int i = 0; i + 1 < SUB; i++) {
        bool on = i + 1 < n; /* H[i + 1] is read only when step i + 1 runs */
        float u = on ? in(0, i) : 0.0f, dl = on ? in(1, i) : 0.0f, p0, p1;
        step_pre<N, R>(p0, p1, kq + i * KQW, u, dl);
        if (!on) p0 = 0.0f, p1 = 0.0f;
#pragma unroll
        for (int k = 0; k < N; k++) H[i + 1][k] = H[i][k];
        step_upd<N, R>(H[i + 1], kq + i * KQW, p0, p1, A);
    }
#pragma unroll
    for (int i = SUB - 1; i >= 0; i--) {
        if (i >= n) continue;
        float u = in(0, i), dl = in(1, i), zv = in(2, i);
        float gy = dir_weight<D>() * in(3, i) * zv * sigmoidf_fast(zv);
        float du, ddl, dkap2;
        __syncwarp(); /* the tile's previous reads are done */
        R::template adj<N>(m, dAacc, du, ddl, dkap2, H[i], kq + i * KQW, u, dl, gy, Dsk, A,
                           [&](int k, float v) { tpw[k * TP_LD] = v; });
        if (act) {
            du_b[off] = f2bf(du);
            dd_b[off] = f2bf(ddl);
        }
        off -= tstr;
        dDacc = fmaf(gy, u, dDacc);
        dbacc += ddl;
        /* this warp's sums over its channels (tile_rowsum), into redw[i][0..N] (N: 2
         * dkappa) */
        float sum = tile_rowsum<N>(tprow);
        float *rr = redw + i * (N + 1);
        if (lane % P == 0) rr[lane / P] = sum;
        float ks = R::KAPPA ? warp_sum(dkap2) : 0.0f;
        if (lane == N) rr[N] = ks;
    }
}

/* ST: CK-chunk 0 starts from a.h0 (compiled apart: it costs spills) */
/* WARPS: the warps per SM for the register allocation (the tuning row's, or the A/B's); FULLSUB:
 * whole sub-chunks compiled apart from the partial one (no per-step bounds tests); D: the
 * directions (blockIdx.y is the direction) */
template <int N, class R, bool ST, int WARPS, bool FULLSUB, int D>
__global__ void __launch_bounds__(ADJ_T, WARPS * 32 / ADJ_T) scan_adjoint_kernel(ScanArgs a) {
    constexpr int KQW = KQ<N>::W, T = ADJ_T, NWB = ADJ_T / 32, P = 32 / N;
    constexpr int act_elems = 4 * CK * T;
    __shared__ __align__(16) bf16 stage[2 * act_elems];
    __shared__ __align__(16) float kqs[2 * CK * KQW];
    __shared__ __align__(16) float ckb[2 * N * T];
    __shared__ float red[2][NWB * SUB * (N + 1)]; /* per-warp dk | dkappa sums, by sub-chunk parity */
    __shared__ __align__(16) float tp[NWB * N * TP_LD];  /* the warps' transpose tiles */
    const int L = a.L, E = a.E;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    /* blockIdx.z: sample b, chunk k of the token-parallel form; CK-chunks c_lo..c_hi */
    const int j = blockIdx.y, bz = blockIdx.z, b = bz / a.nch, k = bz - b * a.nch, c0 = blockIdx.x * T, d = c0 + tid;
    const int c_lo = k * a.C / CK, s_hi = min(L, (k + 1) * a.C) - 1, c_hi = s_hi / CK;
    const bool carried = k + 1 < a.nch; /* the later chunks' adjoint comes in */
    const bool act = d < E;
    const float Dsk = act ? a.Dsk[j][d] : 0.0f;
    float A[N], m[N], dAacc[N], dDacc = 0.0f, dbacc = 0.0f;
#pragma unroll
    for (int n = 0; n < N; n++) {
        A[n] = (R::HAS_A && act) ? -expf(a.A_log[j][(size_t)d * N + n]) : 0.0f;
        /* m = a_{s+1} lam_{s+1}: what the carry holds */
        m[n] = (carried && act) ? a.chg[ch_idx<D>(a, N, b, j, k + 1, n, d)] : 0.0f;
        dAacc[n] = 0.0f;
    }
    float *tpw = tp + warp * N * TP_LD + lane;
    const float4 *tprow = reinterpret_cast<const float4 *>(tp + warp * N * TP_LD + (lane / P) * TP_LD + (lane % P) * (32 / P));
    const float *kqb = a.kqt + ((size_t)j * a.B + b) * L * KQW;
    const bool fast = a.vec_act == 16 && a.vec_ck == 16;
    auto issue = [&](int c, int slot) {
        int s0 = c * CK, cs = min(CK, L - s0);
        bf16 *dst = stage + slot * act_elems;
        auto row_of = [&](int q, int i) { return act_row(a, a.dout, q, j, b, s0 + i, c0); };
        queue_kq<N>(kqs + slot * CK * KQW, kqb, s0, cs, CK, j, L, tid, T);
        if (fast) {
            queue_rows16<T, CK, 4>(dst, 4, cs, c0, E, [&](int q, int i) { return row_of(q, min(i, cs - 1)); }, tid);
            if (c > 0 || (ST && a.h0)) adj_stage_ck16<N, ST, D>(a, ckb + slot * N * T, c, j, b, c0, tid);
            return;
        }
        queue_rows(dst, 4 * cs, T, 2, c0, E, a.vec_act, [&](int r) -> const void * {
            int q = r / cs;
            return row_of(q, r - q * cs);
        }, tid, T, cs, CK);
        if (c > 0 || (ST && a.h0))
            queue_rows(ckb + slot * N * T, N, T, 4, c0, E, a.vec_ck, [&](int n) -> const void * {
                return !ST || c > 0 ? a.ckpt + ((((size_t)b * D + j) * (a.nck - 1) + (c - 1)) * N + n) * E + c0
                                    : a.h0 + (((size_t)b * D + j) * N + n) * E + c0;
            }, tid, T, N);
    };
    /* du and ddelta for this thread's channel (a valid address when inactive too), at the running
     * offset of the step being visited: the last one first, then -tstr per step */
    bf16 *du_b = a.du[j] + (size_t)b * L * E + (act ? d : 0), *dd_b = a.ddelta[j] + (size_t)b * L * E + (act ? d : 0);
    const ptrdiff_t tstr = j ? -(ptrdiff_t)E : (ptrdiff_t)E;
    ptrdiff_t off = (ptrdiff_t)(j ? L - 1 - s_hi : s_hi) * E;
    size_t pbase = ((size_t)b * D + j) * a.nblk2 + blockIdx.x;
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
        const bf16 *st = stage + slot * act_elems + tid;
        const float *kq = kqs + slot * CK * KQW;
        const float *h0 = ckb + slot * N * T + tid; /* the start state, stride T */
        const bool staged = c > 0 || (ST && a.h0);   /* else zero */
        /* the second half first: its start state is reached through the first half, recomputed
         * from the checkpoint in the same iteration (nothing live across the sub-chunks) */
        static_assert(CK == 2 * SUB, "the adjoint's chunk is two sub-chunks");
#pragma unroll 1
        for (int sub = (cs - 1) / SUB; sub >= 0; sub--, par ^= 1) {
            float hs[N];
            int nsub = min(SUB, cs - sub * SUB);
#pragma unroll
            for (int n = 0; n < N; n++) hs[n] = staged ? h0[n * T] : 0.0f;
            if (sub) {
#pragma unroll
                for (int i = 0; i < SUB; i++) {
                    float p0, p1;
                    step_pre<N, R>(p0, p1, kq + i * KQW, bf2f(st[i * T]), bf2f(st[(CK + i) * T]));
                    step_upd<N, R>(hs, kq + i * KQW, p0, p1, A);
                }
            }
            if (FULLSUB && nsub == SUB)
                adjoint_sub<N, R, SUB, D>(m, dAacc, dDacc, dbacc, hs, kq + sub * SUB * KQW, st + sub * SUB * T, nsub, du_b,
                                       dd_b, off, tstr, act, lane, Dsk, A, red[par] + warp * SUB * (N + 1), tpw, tprow);
            else
                adjoint_sub<N, R, 0, D>(m, dAacc, dDacc, dbacc, hs, kq + sub * SUB * KQW, st + sub * SUB * T, nsub, du_b,
                                     dd_b, off, tstr, act, lane, Dsk, A, red[par] + warp * SUB * (N + 1), tpw, tprow);
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
        a.pd[((size_t)bz * D + j) * E + d] = dDacc;
        a.pd[((size_t)a.B * a.nch * D + bz * D + j) * E + d] = dbacc;
        if (R::HAS_A)
#pragma unroll
            for (int n = 0; n < N; n++) a.pa[(((size_t)bz * D + j) * E + d) * N + n] = dAacc[n] * A[n];
    }
}

/* ---------------- finalize: partial sums in a fixed order ----------------
 * One thread per (sample, direction, token, n): DKQ_T / N rows of a block, 32-bit indices, the
 * partial rows walked by a fixed stride (the first form divided a 64-bit index four times per
 * thread: 35 us a Tiny layer, IMAD a quarter of its instructions) */
#define DKQ_T 256
template <int N, class R, int D>
__global__ void __launch_bounds__(DKQ_T) scan_dkdq_kernel(ScanArgs a) {
    constexpr int RPB = DKQ_T / N; /* rows per block */
    const int L = a.L, rows = a.B * D * L;
    const int row = blockIdx.x * RPB + threadIdx.x / N, n = threadIdx.x % N;
    if (row >= rows) return;
    const int t = row % L, bj = row / L, j = D == 2 ? bj & 1 : 0, b = D == 2 ? bj >> 1 : bj;
    const size_t LN = (size_t)L * N;
    const float *pq = a.pq + (((size_t)b * a.nblk1 * D + j) * L + t) * N + n; /* block k: + D k L N */
    const float *pk = a.pk + ((size_t)bj * a.nblk2 * L + t) * N + n;          /* block k: + k L N */
    float dq = 0.0f, dk = 0.0f;
#pragma unroll 4
    for (int k = 0; k < a.nblk1; k++) dq += pq[D * k * LN];
#pragma unroll 4
    for (int k = 0; k < a.nblk2; k++) dk += pk[k * LN];
    if (R::KAPPA) { /* dk += 2 k dkappa */
        const float *pkap = a.pkap + (size_t)bj * a.nblk2 * L + t;
        float kap = 0.0f;
#pragma unroll 4
        for (int k = 0; k < a.nblk2; k++) kap += pkap[(size_t)k * L];
        dk = fmaf(a.kqt[(((size_t)j * a.B + b) * L + t) * KQ<N>::W + n], kap, dk);
    }
    bf16 *out = a.dxdbl[j] + ((size_t)b * L + t) * a.xdbl_ld + a.dt_ld;
    out[n] = f2bf(dk);
    out[N + n] = f2bf(dq);
}

/* ---------------- launcher ---------------- */
template <int N, class R, int D>
static void adjoint_launch(const ScanArgs &a) {
    const dim3 grid(a.nblk2, D, (unsigned)a.B * a.nch);
    constexpr int W = R::tune().adj_warps;
    constexpr bool FS = R::tune().adj_fullsub;
    if (a.h0) scan_adjoint_kernel<N, R, true, W, false, D><<<grid, ADJ_T, 0, cu()->stream>>>(a);
    else scan_adjoint_kernel<N, R, false, W, FS, D><<<grid, ADJ_T, 0, cu()->stream>>>(a);
    CU_LAUNCH_CHECK();
    const size_t rows = (size_t)a.B * D * a.L;
    scan_dkdq_kernel<N, R, D><<<(unsigned)((rows + DKQ_T / N - 1) / (DKQ_T / N)), DKQ_T, 0, cu()->stream>>>(a);
    CU_LAUNCH_CHECK();
}
template <int N, class R>
void scan_adjoint_launch(const ScanArgs &a) {
    if (a.dirs == 1) adjoint_launch<N, R, 1>(a);
    else adjoint_launch<N, R, 2>(a);
}

#define SCAN_BWD_INST(N, R) template void scan_adjoint_launch<N, R>(const ScanArgs &);
SCAN_INSTANTIATE(SCAN_BWD_INST)
