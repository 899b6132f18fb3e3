/* scan_rec.cuh: the recurrences of the scan (doc/scans.md) as the kernels see them: each a
 * policy type whose static members are the pieces of its step: the per-step scalars, the state
 * update, the forget gate and its product over a chunk, the adjoint step with its per-state
 * gradient terms, whether it has per-(channel, state) parameters (A_log) or reads kappa =
 * |k|^2, and its tuning row. Each policy is written in its recurrence's header (vil/rec/<id>.h,
 * beside the recurrence's table row and CPU step pieces); the list (vil/rec/list.h) makes the
 * instantiations below and the host's dispatch (scan.cu). Every scan kernel is a
 * template <int N, class R> over these; the host picks R from VilRecurrence once.
 *
 * The members, with the step's scalars p0, p1 (pre; a masked-out step gets 0, 0 and the state
 * must pass through unchanged: upd gives h, gate 1, drive 0, prod_step adds nothing, which
 * each policy's choice of p0 has to make true; the chunked kernels' padded steps rely on it):
 *   HAS_A, KAPPA              a parameter A_log per (channel, state), the A the kernels load as
 *                             -exp(A_log) (the table row's param); s reads kappa (dk then has a
 *                             2 k dkappa term)
 *   tune()                    its ScanRecTune (scan_tune.cuh), measured where it says
 *   pre(p0, p1, kap, u, dl)   the scalars of a step, which do not depend on the state (so a
 *                             chunk's worth can be computed ahead of the state updates)
 *   upd(h, k, p0, p1, A)      one state's h <- a h + b (k: the state's k)
 *   gate(p0, kk, A)           the forget gate a of a state (kk: its k^2)
 *   drive(p0, p1)             b / k: h <- a h + drive k, as the chunk summaries write it
 *   prod_state(P, a), prod_step(sdt, p0), prod_end(P, A, sdt): the product of a chunk's forget
 *                             gates, per state or through the sum of a scalar
 *   adj<N>(...)               one reverse step of the adjoint (no memory traffic): updates the
 *                             carried m = a_{t+1} lam_{t+1}, returns du, ddelta, hands each
 *                             state's per-channel dk (dB) contribution to put(n, v), adds
 *                             dA_log's into dAacc (HAS_A) and returns 2 dkappa's per-channel
 *                             term in dkap2 (KAPPA), which the caller sums over channels once:
 *                             dk[n] += k[n] * sum_d dkap2 (one scalar sum per step instead of N
 *                             products per channel). */
#ifndef VIL_CUDA_SCAN_REC_CUH
#define VIL_CUDA_SCAN_REC_CUH

#include "cuda/ops_cuda.h" /* VilRecurrence */
#include "cuda/scan_common.cuh"
#include "vil/rec/all.h"

/* What a policy says of itself agrees with its CPU pieces (the same header's constants) and its
 * tuning row fits the adjoint kernel (ADJ_T threads a block, 64 warps an SM at most). */
#define SCAN_REC_CHECK_(U, l, P, ...)                                                            \
    static_assert(P::HAS_A == (VIL_REC_##U##_PARAM != 0) && P::KAPPA == (VIL_REC_##U##_KAPPA != 0), \
                  #P ": HAS_A and KAPPA as the CPU pieces' PARAM and KAPPA");                   \
    static_assert(P::tune().adj_warps >= ADJ_T / 32 && P::tune().adj_warps <= 64,                 \
                  #P ": adj_warps from a block's warps to an SM's");
VIL_RECURRENCE_LIST(SCAN_REC_CHECK_)
#undef SCAN_REC_CHECK_

/* F(N, R) for every recurrence R at the state width N; SCAN_INSTANTIATE: for every state width
 * the CUDA scan is built for. The kernel files instantiate their launchers with it. */
#define SCAN_REC_INST_(U, l, P, F, N) F(N, P)
#define SCAN_RECURRENCES(F, N) VIL_RECURRENCE_LIST(SCAN_REC_INST_, F, N)
#define SCAN_INSTANTIATE(F) SCAN_RECURRENCES(F, 4) SCAN_RECURRENCES(F, 8) SCAN_RECURRENCES(F, 16)

#endif
