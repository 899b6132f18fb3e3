/* scan_chunk.cu: the scan's token-parallel form (scan_common.cuh tells the whole scan): the
 * summary of every chunk of steps from a zero state (scan_local_kernel) and their chain over the
 * chunks (scan_carry_kernel), with their launcher. */
#include "cuda/scan_rec.cuh"

/* ---------------- the token-parallel form: chunk summaries and their chain ----------------
 * Thread (channel d; direction j; sample b, chunk k) runs chunk k's recurrence from a zero state
 * (chunk 0 from h0 where given): its end state S and the product P of its forget gates (h_end =
 * P h_start + S). With ADJ also
 * the reverse adjoint from zero past the chunk's end, lam_s = a_{s+1} lam_{s+1} + gy_s q_s, whose
 * carry into the chunk before is a_s0 lam_s0 (with the later chunks': G = G_local + P G_next).
 * Only what the chain reads is made: S and P of chunks 0 .. nch - 2, G of chunks 1 .. nch - 1.
 * The inputs are staged as in the pair kernel (cp.async, LOC_STAGES rounds of CKS steps in
 * flight; the k|q rows in shared memory, read by every thread of the block): plain global
 * loads a step at a time are latency-bound (1024 px b1: 62 us for 64 steps; 2048 px b8: 1.15 ms,
 * twice the pair kernel's time for the same steps). */
#define LOC_STAGES 3
/* MODE: LOC_FWD, LOC_BWD or LOC_KEPT (scan_common.cuh); ST: chunk 0 from a.h0 (compiled apart:
 * the registers it takes cost occupancy); D: the directions (blockIdx.y is the direction) */
template <int N, class R, int MODE, bool ST, int D>
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
    for (int n = 0; n < N; n++) A[n] = (R::HAS_A && act) ? -expf(a.A_log[j][(size_t)d * N + n]) : 0.0f;
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
        /* chunk 0 from h0: its S is the state after it (the chain's h_0 = S_0) */
        if constexpr (ST) {
#pragma unroll
            for (int n = 0; n < N; n++) h[n] = (k == 0 && act && a.h0) ? a.h0[st_idx<D>(a, N, b, j, n, d)] : 0.0f, P[n] = 1.0f;
        } else {
#pragma unroll
            for (int n = 0; n < N; n++) h[n] = 0.0f, P[n] = 1.0f;
        }
        pipeline(false, 2, [&](const bf16 *st, const float *kq, int cs, int s0) {
            float p0[CKS], p1[CKS], pu[CKS];
#pragma unroll
            for (int i = 0; i < CKS; i++) {
                step_pre<N, R>(p0[i], p1[i], kq + i * KQW, bf2f(st[i * T + tid]), bf2f(st[(CKS + i) * T + tid]));
                if (i >= cs) p0[i] = 0.0f, p1[i] = 0.0f; /* past the chunk: nothing changes */
                pu[i] = R::drive(p0[i], p1[i]);
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
                        /* the gate serves both the state and the product: Longhorn's update in
                         * 4 operations per state, not 5 */
                        const float at = R::gate(p0[i], kk[e], A[n]);
                        h[n] = fmaf(at, h[n], pu[i] * kv[e]);
                        R::prod_state(P[n], at);
                    }
                }
                R::prod_step(sdt, p0[i]);
            }
        });
        if (act)
#pragma unroll
            for (int n = 0; n < N; n++) {
                a.chs[ch_idx<D>(a, N, b, j, k, n, d)] = h[n];
                a.chp[ch_idx<D>(a, N, b, j, k, n, d)] = R::prod_end(P[n], A[n], sdt);
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
            float p0, p1, zz = in(2, i), gy = dir_weight<D>() * in(3, i) * zz * sigmoidf_fast(zz);
            step_pre<N, R>(p0, p1, row, in(0, i), in(1, i));
            const float4 *r4 = reinterpret_cast<const float4 *>(row);
#pragma unroll
            for (int g = 0; g < N / 4; g++) {
                float4 q4 = r4[N / 4 + g], kk4 = r4[KQ<N>::KK / 4 + g];
                float qv[4] = {q4.x, q4.y, q4.z, q4.w}, kk[4] = {kk4.x, kk4.y, kk4.z, kk4.w};
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int n = 4 * g + e;
                    lam[n] = fmaf(an[n], lam[n], gy * qv[e]);
                    an[n] = R::gate(p0, kk[e], A[n]);
                    if (MODE == LOC_KEPT) R::prod_state(P[n], an[n]);
                }
            }
            if (MODE == LOC_KEPT) R::prod_step(sdt, p0);
        }
    });
    if (act)
#pragma unroll
        for (int n = 0; n < N; n++) {
            a.chg[ch_idx<D>(a, N, b, j, k, n, d)] = an[n] * lam[n];
            if (MODE == LOC_KEPT && k + 1 < a.nch) /* the chain reads P of chunks 1 .. nch - 2 */
                a.chp[ch_idx<D>(a, N, b, j, k, n, d)] = R::prod_end(P[n], A[n], sdt);
        }
}

/* The chain over the chunks, one thread per (sample, direction, n, channel): the state after
 * chunk k, h_k = P_k h_{k-1} + S_k (k = 1 .. nch - 2: the last one starts nothing), in place of
 * S_k; with adj also the adjoint carried into chunk k - 1, G_k = G_local,k + P_k G_{k+1}
 * (k = nch - 2 .. 1), in place of G_local,k. The loads of CAR_U chunks are issued before any of
 * their results is stored (one chunk at a time behind the previous store costs a global-memory
 * latency per chunk: 29 us for the 65 chunks of 1024 px b1). */
#define CAR_U 8
template <int N, int D>
__global__ void scan_carry_kernel(ScanArgs a, int adj) { /* adj: also G; a.kept: only G */
    const size_t tot = (size_t)a.B * D * N * a.E, st = (size_t)N * a.E;
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

/* ---------------- launcher ---------------- */
template <int N, class R, int D>
static void chunk_chain(const ScanArgs &a, bool adj) {
    dim3 grid((a.E + LOC_T - 1) / LOC_T, D, a.B * a.nch);
    const bool st = a.h0 != NULL; /* LOC_KEPT: the kept states hold h0's part already */
    if (adj && a.kept) scan_local_kernel<N, R, LOC_KEPT, false, D><<<grid, LOC_T, 0, cu()->stream>>>(a);
    else if (adj && st) scan_local_kernel<N, R, LOC_BWD, true, D><<<grid, LOC_T, 0, cu()->stream>>>(a);
    else if (adj) scan_local_kernel<N, R, LOC_BWD, false, D><<<grid, LOC_T, 0, cu()->stream>>>(a);
    else if (st) scan_local_kernel<N, R, LOC_FWD, true, D><<<grid, LOC_T, 0, cu()->stream>>>(a);
    else scan_local_kernel<N, R, LOC_FWD, false, D><<<grid, LOC_T, 0, cu()->stream>>>(a);
    CU_LAUNCH_CHECK();
    if (a.nch > 2) {
        scan_carry_kernel<N, D><<<cu_blocks_capped((size_t)a.B * D * N * a.E, 256, 16), 256, 0, cu()->stream>>>(a, adj);
        CU_LAUNCH_CHECK();
    }
}
template <int N, class R>
void scan_chunk_chain(const ScanArgs &a, bool adj) {
    if (a.dirs == 1) chunk_chain<N, R, 1>(a, adj);
    else chunk_chain<N, R, 2>(a, adj);
}


#define SCAN_CHUNK_INST(N, R) template void scan_chunk_chain<N, R>(const ScanArgs &, bool);
SCAN_INSTANTIATE(SCAN_CHUNK_INST)
