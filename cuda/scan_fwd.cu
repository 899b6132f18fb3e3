/* scan_fwd.cu: the scan's forward kernels (scan_common.cuh tells the whole scan): the k|q table,
 * the pair kernel (one thread per channel, both directions; also the backward's recomputing
 * pass, which writes dz, the state checkpoints and the dq partials) and the quad kernel (four
 * threads per channel, the forward only), with their launchers. */
#include "cuda/scan_rec.cuh"

/* The k|q table: one row per (direction, sample, token) from the x_proj output's B and C columns
 * (bf16) as float, with k^2, -2k and kappa = sum k^2, so the scan kernels stage it as is; with
 * COMPACT the quad kernel's rows (KQH) instead. One thread per (row, n); the N threads of a row
 * are consecutive lanes (N divides 32). */
template <int N, bool COMPACT>
__global__ void scan_kq_kernel(float *kqt, const bf16 *x0, const bf16 *x1, int BL, int xdbl_ld, int dt_ld, int dirs) {
    constexpr int KQW = KQ<N>::W;
    size_t tot = (size_t)dirs * BL * N;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx - threadIdx.x < tot;
         idx += (size_t)gridDim.x * blockDim.x) {
        bool on = idx < tot;
        size_t row = on ? idx / N : 0;
        int n = (int)(idx % N), j = row >= (size_t)BL;
        size_t r = row - (j ? (size_t)BL : 0);
        const bf16 *src = (j ? x1 : x0) + r * xdbl_ld + dt_ld;
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

/* ---------------- the pair kernel: both directions per thread, one after the other ------------
 * Pass 1 runs the backward direction (token L-1-s at step s) and leaves its pre-gate output in
 * the output buffer itself (out, or dz in the backward prep), where it is hot in L2; pass 0 runs
 * the forward direction and combines: out = SiLU(z) (y_f + y_b) / 2. No shared-memory stash, one
 * direction's state live at a time: occupancy is set by registers, not by L. The stash holds
 * y_b in bf16, one more rounding (2^-9 relative to y_b) than an fp32 stash would give.
 * Staged rows per step: u dl z go ystash (those a pass needs), then the k|q row. */
#define PAIR_NQ 5 /* staged rows: u dl z go ys in the backward prep; the forward has no go */
/* the register targets (blocks per SM: pair_minb, pair_minb_chf for the chunked forward), the
 * forward's staging slots and the sequential form's unroll are the row of scan_tune.cuh for the
 * code being compiled. The backward prep keeps 2 slots: its shared memory is near a static
 * allocation's 48 KB. */
static constexpr int pair_seq_unroll = SCAN_KT.pair_seq_unroll; /* #pragma unroll takes a constant */

/* CH: the token-parallel form (blockIdx.z is the chunk); without it the kernel is compiled
 * without the chunk bounds and carried states (which cost spills). ST: compiled with the given
 * initial state (a.h0) and the final one out (a.hT); without it, without them (which cost
 * spills too). D: the directions; one (causal) runs pass 1 alone, gated without the stash */
template <int N, class R, bool BWD, bool CH, bool ST, int D>
__global__ void __launch_bounds__(PAIR_T, CH && !BWD ? SCAN_KT.pair_minb_chf : SCAN_KT.pair_minb) scan_pair_kernel(ScanArgs a) {
    constexpr int KQW = KQ<N>::W, NW = PAIR_T / 32, T = PAIR_T;
    constexpr int NQ = BWD ? PAIR_NQ : PAIR_NQ - 1, NSTG = BWD ? 2 : SCAN_KT.pair_stages; /* rows, slots */
    constexpr int buf_elems = NQ * CKS * T;
    /* phases 1 and 2 in groups of PH steps: the backward prep with fewer per-step scalars live
     * at once (spills 36 / 56 -> 16 / 44 bytes at its 80 registers; harness bwd -0.4% Longhorn,
     * -0.8% Mamba); the forward in one group (in two it spills 16 / 28 bytes where it spills
     * 4 / 4) */
    constexpr int PH = BWD ? 4 : CKS;
    constexpr float DW = dir_weight<D>();
    static_assert(CKS % PH == 0, "the pair kernel's phase groups");
    __shared__ __align__(16) bf16 stage[NSTG * buf_elems];
    __shared__ __align__(16) float kqs[NSTG * CKS * KQW];
    __shared__ float red[BWD ? NW * CKS * N : 1];
    __shared__ __align__(16) float tp[BWD ? NW * N * TP_LD : 4]; /* the warps' transpose tiles (tile_rowsum) */
    const int L = a.L, E = a.E;
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int b = blockIdx.y, c0 = blockIdx.x * T, d = c0 + tid, k = CH ? blockIdx.z : 0;
    bool act = d < E;
    /* the stash: out (forward) or dz (backward prep) */
    bf16 *ys = BWD ? a.dz : a.out;
    size_t ldy = BWD ? (size_t)a.ldz : (size_t)E;
    const int sb = CH ? k * a.C : 0, se = CH ? min(L, sb + a.C) : L; /* this block's steps */
    int nsc = (se - sb + CKS - 1) / CKS;
    /* constant bounds: with a loop over [pass_lo, pass_hi) the sequential kernel runs 1.3x
     * slower (L = 4097, B = 1: 1997 against 1527 us). The chunked form unrolls the two passes
     * (each compiled with its own j); the sequential one keeps them rolled (pair_seq_unroll:
     * unrolled, it spills 16 bytes rather than 4) */
#pragma unroll(CH ? 2 : pair_seq_unroll)
    for (int pass = 2 - D; pass < 2; pass++) {
        if (CH && (pass < a.pass_lo || pass >= a.pass_hi)) continue;
        const int j = 1 - pass; /* the backward direction first */
        /* which staged rows this pass reads: u, dl always; z, go when the gate is needed; the
         * stash of the other direction's output */
        const bool need_z = BWD || j == 0, need_go = BWD, need_ys = j == 0 && D == 2;
        float h[N], A[N];
        float Dsk = act ? a.Dsk[j][d] : 0.0f;
#pragma unroll
        for (int n = 0; n < N; n++) {
            h[n] = (CH && k > 0 && act) ? a.chs[ch_idx<D>(a, N, b, j, k - 1, n, d)]
                 : (ST && act && a.h0) ? a.h0[st_idx<D>(a, N, b, j, n, d)] : 0.0f;
            A[n] = (R::HAS_A && act) ? -expf(a.A_log[j][(size_t)d * N + n]) : 0.0f;
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
            /* inline rather than queue_act: through the helper this kernel runs 1.6% slower
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
        /* round r of the block's steps into slot r % NSTG; NSTG - 1 rounds in flight (each
         * kernel writes its ring loop out: a shared one cost 0.3-0.8%, cuda/PERF_NOTES.md) */
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
            float y[CKS];
#pragma unroll
            for (int g0 = 0; g0 < CKS; g0 += PH) {
                /* phase 1: the state-independent scalars of the group's steps */
                float uu[PH], p0[PH], p1[PH];
#pragma unroll
                for (int ii = 0; ii < PH; ii++) {
                    const int i = g0 + ii;
                    bool on = i < cs;
                    uu[ii] = on ? in(0, i) : 0.0f;
                    float dl = on ? in(1, i) : 0.0f;
                    step_pre<N, R>(p0[ii], p1[ii], kq + i * KQW, uu[ii], dl);
                    if (!on) p0[ii] = 0.0f, p1[ii] = 0.0f;
                }
                /* phase 2: the recurrence (only h -> h is serial) */
#pragma unroll
                for (int ii = 0; ii < PH; ii++) {
                    const int i = g0 + ii;
                    if (BWD) {
                        /* dq_t[n] = sum_d gy_t[d] h_t[d, n] over the warp's channels: each gy h put
                         * into the warp's transpose tile as the state is made */
                        float zz = i < cs ? in(rz, i) : 0.0f, go = i < cs ? DW * in(rg, i) : 0.0f;
                        float gy = go * zz * sigmoidf_fast(zz);
                        float *tpw = tp + warp * N * TP_LD + lane;
                        __syncwarp(); /* the tile's previous reads are done */
                        y[i] = fmaf(Dsk, uu[ii], step_upd<N, R>(h, kq + i * KQW, p0[ii], p1[ii], A,
                                                                 [&](int n, float hn) { tpw[n * TP_LD] = gy * hn; }));
                        constexpr int P = 32 / N;
                        float r = tile_rowsum<N>(reinterpret_cast<const float4 *>(tp + warp * N * TP_LD + (lane / P) * TP_LD + (lane % P) * (32 / P)));
                        if (lane % P == 0) red[(warp * CKS + i) * N + lane / P] = r;
                    } else {
                        y[i] = fmaf(Dsk, uu[ii], step_upd<N, R>(h, kq + i * KQW, p0[ii], p1[ii], A));
                    }
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
                        float tot = D == 2 ? y[i] + in(ry, i) : y[i], zz = in(rz, i), sg = sigmoidf_fast(zz);
                        if (!BWD) {
                            a.out[r * E + d] = f2bf(DW * zz * sg * tot);
                        } else {
                            /* the forward's out again (the forward's expression), then dz: without
                             * out, odz is 0 and dz lands over it */
                            bf16 *dzp = a.dz + r * a.ldz + d;
                            dzp[a.odz] = f2bf(DW * zz * sg * tot);
                            *dzp = f2bf(DW * in(rg, i) * sg * (1.0f + zz * (1.0f - sg)) * tot);
                        }
                    }
                }
            }
            if (BWD) {
                int e = s0 + cs; /* the state after this chunk starts CK-chunk e / CK */
                if (e % CK == 0 && e < L && act) {
                    int c = e / CK;
#pragma unroll
                    for (int n = 0; n < N; n++)
                        a.ckpt[((((size_t)b * D + j) * (a.nck - 1) + (c - 1)) * N + n) * E + d] = h[n];
                }
                __syncthreads();
                for (int idx = tid; idx < cs * N; idx += T) {
                    int i = idx / N, n = idx - i * N;
                    float sum = 0.0f;
#pragma unroll
                    for (int w = 0; w < NW; w++) sum += red[(w * CKS + i) * N + n];
                    int t = j ? L - 1 - (s0 + i) : s0 + i;
                    a.pq[((((size_t)b * a.nblk1 + blockIdx.x) * D + j) * L + t) * N + n] = sum;
                }
            }
            __syncthreads(); /* this buffer, kq and red are free for the next chunk */
        }
        cp_wait<0>(); /* the empty groups */
        if (ST && !BWD && a.hT && act && (!CH || k == a.nch - 1)) /* the direction's last step was here */
#pragma unroll
            for (int n = 0; n < N; n++) a.hT[st_idx<D>(a, N, b, j, n, d)] = h[n];
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
 * two steps and writes their outputs. Inputs are staged QSTG rounds deep, with shapes
 * known at compile time where rows are 16-byte aligned. Both directions as in the pair kernel:
 * the backward one first, into the output buffer, then the forward one, which combines; in the
 * token-parallel form one direction per launch (pass_lo, pass_hi), from the carried states. */
#define QCK 8 /* steps per staging round: 2 per lane */
constexpr int QSTG = SCAN_KT.qs_stages; /* staging slots (scan_tune.cuh) */
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

template <int N, class R, bool CH, bool ST, int D> /* CH, ST, D: as the pair kernel's */
__global__ void __launch_bounds__(QUAD_T) scan_quad_kernel(ScanArgs a) {
    constexpr int T = QUAD_T, NS = N / QUAD_Q, TC = T / QUAD_Q, NQ = 4;
    constexpr int RB = KQH<N>::BYTES, PK = RB / 16; /* compact row bytes, 16-byte pieces */
    static_assert(QUAD_Q == 4 && QCK == 8 && N % QUAD_Q == 0 && NQ * QCK * TC / 8 == T && QCK * PK <= T,
                  "quad kernel shape");
    constexpr int buf_elems = NQ * QCK * TC;
    __shared__ __align__(16) bf16 stage[QSTG * buf_elems];
    __shared__ __align__(16) char kqs[QSTG * QCK * RB];
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
    for (int pass = 2 - D; pass < 2; pass++) {
        if (CH && (pass < a.pass_lo || pass >= a.pass_hi)) continue;
        const int j = 1 - pass; /* the backward direction first */
        const int nq = j ? 2 : D == 2 ? 4 : 3; /* staged rows: u, dl [, z [, the stash]] */
        float h[NS], A[NS];
        const float Dsk = act ? a.Dsk[j][d] : 0.0f;
#pragma unroll
        for (int n = 0; n < NS; n++) {
            int nn = s * NS + n;
            h[n] = (CH && k > 0 && act) ? a.chs[ch_idx<D>(a, N, b, j, k - 1, nn, d)]
                 : (ST && act && a.h0) ? a.h0[st_idx<D>(a, N, b, j, nn, d)] : 0.0f;
            A[n] = (R::HAS_A && act) ? -expf(a.A_log[j][(size_t)d * N + nn]) : 0.0f;
        }
        const char *kqb = a.kqh + ((size_t)j * a.B + b) * L * RB;
        auto row_of = [&](int q, int i, int s0) { return act_row(a, a.out, q, j, b, s0 + i, c0); };
        /* round ch's inputs into slot ch % QSTG (nothing past the block's steps) */
        auto issue = [&](int ch) {
            const int s0 = sb + ch * QCK, cs = min(QCK, se - s0), slot = ch % QSTG;
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
        /* QSTG - 1 rounds in flight (the ring loop written out: cuda/PERF_NOTES.md) */
#pragma unroll
        for (int ch = 0; ch < QSTG - 1; ch++) {
            issue(ch);
            cp_commit(); /* one group per round, empty past the end: the count stays simple */
        }
        for (int ch = 0; ch < nsc; ch++) {
            const int s0 = sb + ch * QCK, cs = min(QCK, se - s0), slot = ch % QSTG;
            issue(ch + QSTG - 1); /* into the slot the previous round has freed */
            cp_commit();
            cp_wait<QSTG - 1>(); /* round ch's group is complete */
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
                R::pre(m[2 * e], m[2 * e + 1], *reinterpret_cast<const float *>(kq + i * RB),
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
                        h[n] = R::upd(h[n], kk[n], p0, p1, A[n]);
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
                    a.out[r * E + d] = f2bf(dir_weight<D>() * zz * sg * (D == 2 ? yt + in(3, i) : yt));
                }
            }
            __syncthreads(); /* this slot and pre are free for the next rounds */
        }
        cp_wait<0>(); /* the empty groups */
        if (ST && a.hT && act && (!CH || k == a.nch - 1)) /* the direction's last step was here */
#pragma unroll
            for (int n = 0; n < NS; n++) a.hT[st_idx<D>(a, N, b, j, s * NS + n, d)] = h[n];
        /* the stash written by pass 1 is read (through L2) by pass 0 */
        __threadfence_block();
        __syncthreads();
    }
}

/* ---------------- launchers ---------------- */
/* the k|q table of the directions into kqt; compact: the quad kernel's rows into kqh */
template <int N>
void scan_kq_launch(ScanArgs *a, float *kqt, bool compact) {
    size_t BL = (size_t)a->B * a->L;
    int blocks = cu_blocks_capped(a->dirs * BL * N, 256, 16);
    if (compact) scan_kq_kernel<N, true><<<blocks, 256, 0, cu()->stream>>>(kqt, a->xdbl[0], a->xdbl[1], (int)BL, a->xdbl_ld, a->dt_ld, a->dirs);
    else scan_kq_kernel<N, false><<<blocks, 256, 0, cu()->stream>>>(kqt, a->xdbl[0], a->xdbl[1], (int)BL, a->xdbl_ld, a->dt_ld, a->dirs);
    CU_LAUNCH_CHECK();
    if (compact) a->kqh = (const char *)kqt;
    else a->kqt = kqt;
}

/* the passes (pass 0: direction 1; pass 1: direction 0, which gates; D = 1 runs pass 1 alone):
 * in one launch sequentially, one launch a pass in the token-parallel form */
template <int N, class R, bool BWD, bool ST, int D>
static void pair_passes(ScanArgs a) {
    const bool quad = !BWD && a.split == QUAD_Q;
    const int tc = quad ? QUAD_T / QUAD_Q : PAIR_T; /* channels per block */
    dim3 grid((a.E + tc - 1) / tc, a.B, a.nch);
    for (int p = 2 - D; p < 2; p++) {
        a.pass_lo = a.nch > 1 ? p : 0, a.pass_hi = a.nch > 1 ? p + 1 : 2;
        if (quad && a.nch > 1) scan_quad_kernel<N, R, true, ST, D><<<grid, QUAD_T, 0, cu()->stream>>>(a);
        else if (quad) scan_quad_kernel<N, R, false, ST, D><<<grid, QUAD_T, 0, cu()->stream>>>(a);
        else if (a.nch > 1) scan_pair_kernel<N, R, BWD, true, ST, D><<<grid, PAIR_T, 0, cu()->stream>>>(a);
        else scan_pair_kernel<N, R, BWD, false, ST, D><<<grid, PAIR_T, 0, cu()->stream>>>(a);
        CU_LAUNCH_CHECK();
        if (a.nch == 1) break;
    }
}
template <int N, class R, bool BWD, int D>
static void pair_launch(const ScanArgs &a) {
    if (a.h0 || (!BWD && a.hT)) pair_passes<N, R, BWD, true, D>(a);
    else pair_passes<N, R, BWD, false, D>(a);
}
template <int N, class R, bool BWD>
void scan_pair_launch(ScanArgs a) {
    if (a.dirs == 1) pair_launch<N, R, BWD, 1>(a);
    else pair_launch<N, R, BWD, 2>(a);
}

template void scan_kq_launch<4>(ScanArgs *, float *, bool);
template void scan_kq_launch<8>(ScanArgs *, float *, bool);
template void scan_kq_launch<16>(ScanArgs *, float *, bool);
#define SCAN_FWD_INST(N, R)                                \
    template void scan_pair_launch<N, R, false>(ScanArgs); \
    template void scan_pair_launch<N, R, true>(ScanArgs);
SCAN_INSTANTIATE(SCAN_FWD_INST)
