/* scan_common.cuh: what the scan's kernels share (the argument block, the k|q row layouts, the
 * staging of act and k|q rows, the warp sums, the step of the recurrence), and the launchers
 * each kernel file instantiates for the host side (scan.cu).
 *
 * The scan: the fused bidirectional Longhorn (ViL) / Mamba (ViM) scan, forward and backward, per
 * doc/scans.md, with the sigmoid (softplus), the eps normalization, the D skip, the
 * SiLU(z) gate and the direction average fused in; the backward direction runs by reverse
 * indexing, never on flipped copies. The causal op runs direction 0 alone, gated without the
 * average: every kernel below is compiled for D = 2 directions and for D = 1 (template D; the
 * launchers pick it from ScanArgs.dirs), each direction's work as in the two. State in fp32
 * registers; nothing of size (L, E, N) is ever stored. Kernels (scan_fwd.cu: kq, pair, quad; scan_bwd.cu: adjoint, finalize; scan_chunk.cu:
 * local, carry):
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
 * A given initial state h0 (else zero) enters where a direction's first step starts: the pair
 * and quad kernels' first chunk, scan_local_kernel's chunk 0 (its S is then the state after it)
 * and the adjoint's CK-chunk 0 (staged as a checkpoint); the forward's last chunk writes hT.
 * Each of these kernels is compiled apart with them (template ST) and without (today's code).
 * Sums over channels (dq, dk, dkappa) are fp32: within a warp by a transpose through shared
 * memory (tile_rowsum; dkappa by shuffles), then the warps of a block in order (shared memory),
 * then the blocks in order: deterministic, no atomics. The backward also sums ddelta over the
 * tokens (dt_proj's bias gradient) per (sample, direction, channel), then over the samples. */
#ifndef VIL_CUDA_SCAN_COMMON_CUH
#define VIL_CUDA_SCAN_COMMON_CUH

#include <math.h>
#include <stddef.h>

#include "cuda/cuda_common.cuh"
#include "cuda/scan_tune.cuh"
#include "cuda/stage.cuh"

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
    float *pkap; /* (B, 2, nblk2, L) 2 dkappa partials (Longhorn: dkappa = -eps^2 deps): dk += k * their sum */
    float *pd;   /* (B, 2, E) dD partials, then (B, 2, E) sum-of-ddelta partials */
    float *pa;   /* (B, 2, E, N) dA_log partials (Mamba) */
    int B, L, E, dt_ld, xdbl_ld, ldz, nck, nblk1, nblk2; /* xdbl_ld: x_dbl's row stride */
    ptrdiff_t odz; /* the backward: out (the gated output again, or NULL) - dz, in elements */
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
    const float *h0; /* (B, 2, N, E) the state each direction starts from (VilScanFwd/Bwd.h0), or
                      * NULL: zero */
    float *hT;       /* the forward: (B, 2, N, E) each direction's state after its last step, or
                      * NULL */
    int dirs;        /* the directions: 2, or 1 (causal: direction 0 alone, out = SiLU(z) y_0);
                      * the direction axis (the 2 of every shape above) has this length */
} ScanArgs;

/* a direction's weight in the gated output: the average of two, or the one alone */
template <int D>
constexpr float dir_weight() {
    return D == 2 ? 0.5f : 1.0f;
}

/* element (b, j, n, d) of h0 and hT, of D directions */
template <int D>
__device__ __forceinline__ size_t st_idx(const ScanArgs &a, int N, int b, int j, int n, int d) {
    return (((size_t)b * D + j) * N + n) * a.E + d;
}

/* element (b, j, chunk k, n, d) of the chunk summaries, of D directions */
template <int D>
__device__ __forceinline__ size_t ch_idx(const ScanArgs &a, int N, int b, int j, int k, int n, int d) {
    return ((((size_t)b * D + j) * a.nch + k) * N + n) * a.E + d;
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

#define TP_LD 36 /* the transpose tiles' row pitch (tile_rowsum) */

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

__device__ __forceinline__ float softplusf_(float x) { return x > 20.0f ? x : log1pf(__expf(x)); }

/* The step's scalars (R::pre) from its staged k|q row, kappa where R reads it */
template <int N, class R>
__device__ __forceinline__ void step_pre(float &p0, float &p1, const float *row, float u, float dl) {
    R::pre(p0, p1, R::KAPPA ? row[KQ<N>::KAP] : 0.0f, u, dl);
}

/* h <- a h + b (R::upd) over the N states with the step's scalars; returns q.h (the D skip is
 * added by the caller) */
struct NoPut {
    __device__ __forceinline__ void operator()(int, float) const {}
};
/* put(n, h_n) sees each new state as it is made (the backward's channel sums of gy h) */
template <int N, class R, class Put = NoPut>
__device__ __forceinline__ float step_upd(float (&h)[N], const float *row, float p0, float p1,
                                          const float (&A)[N], Put put = Put()) {
    const float4 *r4 = reinterpret_cast<const float4 *>(row);
    float y[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* partial sums: a short dependency chain */
#pragma unroll
    for (int g = 0; g < N / 4; g++) {
        float4 k4 = r4[g], q4 = r4[N / 4 + g];
        float k[4] = {k4.x, k4.y, k4.z, k4.w}, q[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int n = 4 * g + e;
            h[n] = R::upd(h[n], k[e], p0, p1, A[n]);
            y[e] = fmaf(q[e], h[n], y[e]);
            put(n, h[n]);
        }
    }
    return (y[0] + y[1]) + (y[2] + y[3]);
}

/* Sum over the warp's 32 lanes (channels) of v[n] for each n < NV (a power of two, 4..16), by a
 * transpose through the warp's own shared tile tp (NV rows of TP_LD floats, 16-byte aligned):
 * each lane writes its column as its values are made (tp[n * TP_LD + lane] = v[n], after a
 * __syncwarp that orders the previous reads), then this, the read half: P = 32 / NV lanes read a
 * row each (32 / P channels apiece, float4 loads; row: this lane's piece, tp + (lane / P) * TP_LD
 * + (lane % P) * (32 / P)) and xor-sum their parts. Lane l returns the sum of v[l / P]; the order
 * is fixed. The row padding (TP_LD = 36) keeps both the column writes and the row reads free of
 * bank conflicts. About 40 instructions for NV = 16, where a shuffle reduce-scatter takes ~80
 * (two selects, a shuffle and an add per exchanged pair). */
template <int NV>
__device__ __forceinline__ float tile_rowsum(const float4 *row) {
    constexpr int P = 32 / NV, CW = 32 / P;
    __syncwarp();
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

/* block shapes (threads); the host sizes grids and partial sums by them */
#define PAIR_T 128
#define QUAD_T 128
#define QUAD_Q 4 /* the quad kernel's threads per channel */
#ifndef ADJ_T
#define ADJ_T 128 /* threads (channels) per adjoint block: its warps share the staged inputs */
#endif
#define LOC_T 128
/* the chunk-summary kernel's modes: LOC_FWD S and P; LOC_BWD S and P, then G; LOC_KEPT (the
 * forward's states kept) G, with P made in the same reverse pass */
enum { LOC_FWD, LOC_BWD, LOC_KEPT };

/* ---- the launchers, instantiated beside their kernels for N = 4, 8, 16 and every recurrence
 * (scan_rec.cuh) ---- */
/* scan_fwd.cu: the k|q table of both directions into kqt (compact: the quad kernel's rows) */
template <int N>
void scan_kq_launch(ScanArgs *a, float *kqt, bool compact);
/* scan_fwd.cu: the pair (quad) kernel over all chunks */
template <int N, class R, bool BWD>
void scan_pair_launch(ScanArgs a);
/* scan_chunk.cu: the chunk summaries and their chain (nch > 1) */
template <int N, class R>
void scan_chunk_chain(const ScanArgs &a, bool adj);
/* scan_bwd.cu: the adjoint kernel, then the dk / dq finalize */
template <int N, class R>
void scan_adjoint_launch(const ScanArgs &a);

#endif
