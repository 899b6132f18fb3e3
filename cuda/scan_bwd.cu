/* scan_bwd.cu: the scan's backward kernels (scan_common.cuh tells the whole scan): the adjoint
 * (du, ddelta and the partial sums of dk, dkappa, dD, dA_log per chunk of channels) and the
 * finalize of dk and dq, with their launcher. The recomputing pass before them is the pair
 * kernel's (scan_fwd.cu). */
#include "cuda/scan_rec.cuh"

/* ---------------- the adjoint kernel: one warp, one direction, 32 channels ---------------- */
/* The adjoint kernel: one warp per block, one direction, 32 channels. Per CK-chunk of steps, in
 * reverse: the chunk's inputs (u dl z go rows, k|q rows, the start state) are staged by cp.async,
 * double-buffered. The history of h is kept in registers SUB steps at a time: the second half of
 * the chunk is reached by recomputing the first half without keeping it, then the first half is
 * recomputed with its history (1.5 recomputes per step, 1.25 once the unused last step of each
 * sub-chunk is left out; no shared-memory history). SUB = 4 keeps the history at 4N registers:
 * the Longhorn kernel fits in 128 registers (16 warps per SM; 40 bytes spilled outside the step
 * loop; 12 warps at 168 registers measured 2.5% slower), Mamba's in 168 (12 warps); SUB = 8
 * takes 244 registers, 8 warps and spills to local memory. */
#define SUB 4
/* One sub-chunk of the adjoint: kq and st point at the sub-chunk's first step (st also at the
 * thread's column), du / dd at its first token's du and ddelta for the thread's channel, the next
 * step's `tstr` elements on (every address below is a compile-time offset from these) */
template <int N, class R>
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
        step_pre<N, R>(p0, p1, kq + i * KQW, u, dl);
        if (!on) p0 = 0.0f, p1 = 0.0f;
        step_upd<N, R>(h, kq + i * KQW, p0, p1, A);
#pragma unroll
        for (int k = 0; k < N; k++) H[i][k] = h[k];
    }
#pragma unroll
    for (int i = SUB - 1; i >= 0; i--) {
        if (i >= n) continue;
        float u = in(0, i), dl = in(1, i), zv = in(2, i);
        float gy = 0.5f * in(3, i) * zv * sigmoidf_fast(zv);
        float dkv[N], du, ddl, dkap2;
        if (i > 0) R::template adj_step<N>(lam, anext, dAacc, dkv, du, ddl, dkap2, H[i > 0 ? i - 1 : 0], kq + i * KQW, u, dl, gy, Dsk, A);
        else R::template adj_step<N>(lam, anext, dAacc, dkv, du, ddl, dkap2, hs, kq + i * KQW, u, dl, gy, Dsk, A);
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
        float ks = R::KAPPA ? warp_sum(dkap2) : 0.0f;
        if (lane == N) rr[N] = ks;
    }
}

/* The adjoint's checkpoint staging when rows start 16-byte aligned (vec_ck 16): N rows of T
 * floats, each thread's pieces fixed, as in queue_rows16. CK-chunk 0's start state is h0's
 * (same rows). */
template <int N, bool ST>
__device__ __forceinline__ void adj_stage_ck16(const ScanArgs &a, float *ckdst, int c, int j, int b,
                                               int c0, int tid) {
    constexpr int T = ADJ_T, PC = T / 4, RC = T / PC;
    static_assert(T % 32 == 0 && N % RC == 0, "adjoint checkpoint staging shape");
    const int E = a.E, pc = tid % PC, chc = c0 + pc * 4;
    const float *cb = !ST || c > 0 ? a.ckpt + (((size_t)b * 2 + j) * (a.nck - 1) + (c - 1)) * N * E
                                   : a.h0 + ((size_t)b * 2 + j) * N * E;
#pragma unroll
    for (int k = 0; k < N / RC; k++) {
        int n = tid / PC + k * RC;
        cp_async<16>(ckdst + n * T + pc * 4, chc < E ? cb + (size_t)n * E + chc : cb, chc < E ? 16 : 0);
    }
}

/* ST: CK-chunk 0 starts from a.h0 (compiled apart: it costs spills) */
template <int N, class R, bool ST>
__global__ void __launch_bounds__(ADJ_T, SCAN_KT.adj_warps[R::REC] * 32 / ADJ_T) scan_adjoint_kernel(ScanArgs a) {
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
        A[n] = (R::HAS_A && act) ? -expf(a.A_log[j][(size_t)d * N + n]) : 0.0f;
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
        /* inline rather than queue_act: through the helper Mamba's adjoint spills 20 bytes
         * rather than 8, and the backward runs 1.7% slower (L = 197, B = 256) */
        if (fast) {
            queue_rows16<T, CK, 4>(dst, 4, cs, c0, E, [&](int q, int i) { return row_of(q, min(i, cs - 1)); }, tid);
            if (c > 0 || (ST && a.h0)) adj_stage_ck16<N, ST>(a, ckb + slot * N * T, c, j, b, c0, tid);
            return;
        }
        queue_rows(dst, 4 * cs, T, 2, c0, E, a.vec_act, [&](int r) -> const void * {
            int q = r / cs;
            return row_of(q, r - q * cs);
        }, tid, T, cs, CK);
        if (c > 0 || (ST && a.h0))
            queue_rows(ckb + slot * N * T, N, T, 4, c0, E, a.vec_ck, [&](int n) -> const void * {
                return !ST || c > 0 ? a.ckpt + ((((size_t)b * 2 + j) * (a.nck - 1) + (c - 1)) * N + n) * E + c0
                                    : a.h0 + (((size_t)b * 2 + j) * N + n) * E + c0;
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
        const bool staged = c > 0 || (ST && a.h0);   /* else zero */
        /* the second half first: its start state is reached through the first half */
        float hm[N];
#pragma unroll
        for (int n = 0; n < N; n++) hm[n] = staged ? h0[n * T] : 0.0f;
        if (cs > SUB) {
#pragma unroll 1
            for (int i = 0; i < SUB; i++) {
                float p0, p1;
                step_pre<N, R>(p0, p1, kq + i * KQW, bf2f(st[i * T + tid]),
                                   bf2f(st[(CK + i) * T + tid]));
                step_upd<N, R>(hm, kq + i * KQW, p0, p1, A);
            }
        }
#pragma unroll 1
        for (int sub = (cs - 1) / SUB; sub >= 0; sub--, par ^= 1) {
            float hs[N];
            int nsub = min(SUB, cs - sub * SUB);
#pragma unroll
            for (int n = 0; n < N; n++) hs[n] = sub ? hm[n] : (staged ? h0[n * T] : 0.0f);
            const int sf = s0 + sub * SUB, tf = j ? L - 1 - sf : sf; /* the sub-chunk's first step, token */
            adjoint_sub<N, R>(lam, anext, dAacc, dDacc, dbacc, hs, kq + sub * SUB * KQW, st + sub * SUB * T + tid,
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
        if (R::HAS_A)
#pragma unroll
            for (int n = 0; n < N; n++) a.pa[(((size_t)bz * 2 + j) * E + d) * N + n] = dAacc[n] * A[n];
    }
}

/* ---------------- finalize: partial sums in a fixed order ---------------- */
template <int N, class R>
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
        if (R::KAPPA) { /* dk += 2 k dkappa */
            float kap = 0.0f;
#pragma unroll 8
            for (int k = 0; k < a.nblk2; k++) kap += a.pkap[(((size_t)b * 2 + j) * a.nblk2 + k) * a.L + t];
            dk = fmaf(a.kqt[(((size_t)j * a.B + b) * a.L + t) * KQ<N>::W + n], kap, dk);
        }
        bf16 *row = a.dxdbl[j] + ((size_t)b * a.L + t) * a.xdbl_ld + a.dt_ld;
        row[n] = f2bf(dk);
        row[N + n] = f2bf(dq);
    }
}

/* ---------------- launcher ---------------- */
template <int N, class R>
void scan_adjoint_launch(const ScanArgs &a) {
    const dim3 grid(a.nblk2, 2, (unsigned)a.B * a.nch);
    if (a.h0) scan_adjoint_kernel<N, R, true><<<grid, ADJ_T, 0, cu()->stream>>>(a);
    else scan_adjoint_kernel<N, R, false><<<grid, ADJ_T, 0, cu()->stream>>>(a);
    CU_LAUNCH_CHECK();
    size_t tot = (size_t)a.B * 2 * a.L * N;
    int blocks = cu_blocks_capped(tot, 256, 16);
    scan_dkdq_kernel<N, R><<<blocks, 256, 0, cu()->stream>>>(a);
    CU_LAUNCH_CHECK();
}

#define SCAN_BWD_INST(N, R) template void scan_adjoint_launch<N, R>(const ScanArgs &);
SCAN_INSTANTIATE(SCAN_BWD_INST)
