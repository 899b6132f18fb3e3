/* scan_rec.cuh: the recurrences of the scan (doc/scans.md), each a policy type whose static
 * members are the pieces of its step: the per-step scalars, the state update, the forget gate
 * and its product over a chunk, the adjoint step with its per-state gradient terms, and whether
 * it has per-(channel, state) parameters (A_log) or reads kappa = |k|^2. Every scan kernel is a
 * template <int N, class R> over these; the host picks R from VilRecurrence once (scan.cu).
 * A recurrence: its struct here, its line in SCAN_RECURRENCES, its columns of the per-recurrence
 * fields in scan_tune.cuh. */
#ifndef VIL_CUDA_SCAN_REC_CUH
#define VIL_CUDA_SCAN_REC_CUH

#include "cuda/ops_cuda.h" /* VilRecurrence */
#include "cuda/scan_common.cuh"

/* The step pieces both share, with the step's scalars p0, p1 (pre; a masked-out step gets 0, 0
 * and the state passes through unchanged):
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

/* Longhorn (ViL): h <- (1 - eps k k^T) h + eps u k, eps = beta / (1 + beta kappa), beta =
 * sigmoid(dl) */
struct Longhorn {
    static constexpr int REC = VIL_REC_LONGHORN;
    static constexpr bool HAS_A = false; /* no A_log */
    static constexpr bool KAPPA = true;  /* eps reads kappa: dk has a 2 k dkappa term */
    /* p0 = eps = beta / (1 + beta kappa) = 1 / (1 + e^-dl + kappa): one reciprocal; p1 = u */
    static __device__ __forceinline__ void pre(float &p0, float &p1, float kap, float u, float dl) {
        p0 = rcp_fast(1.0f + __expf(-dl) + kap);
        p1 = u;
    }
    /* h + eps k (u - k h) = (1 - eps k^2) h + eps u k: three operations per state, without the
     * k^2 row (4 fewer shared loads of 16 bytes per step at N = 16) */
    static __device__ __forceinline__ float upd(float h, float k, float p0, float p1, float A) {
        return fmaf(p0 * k, fmaf(-k, h, p1), h);
    }
    static __device__ __forceinline__ float gate(float p0, float kk, float A) { return fmaf(-p0, kk, 1.0f); }
    static __device__ __forceinline__ float drive(float p0, float p1) { return p0 * p1; } /* eps u */
    static __device__ __forceinline__ void prod_state(float &P, float a) { P *= a; }
    static __device__ __forceinline__ void prod_step(float &sdt, float p0) {}
    static __device__ __forceinline__ float prod_end(float P, float A, float sdt) { return P; }
    /* The adjoint step (7 operations per state; 8 before issue 35): carries m = a_{t+1} lam_{t+1}
     * instead of lam and the gate a_{t+1} (16 fewer registers), lam_t = m + gy q in one FMA, and
     * the dk term scaled by eps before the sum over n: with el = eps lam, dkv = el (u - 2 k h_{t-1})
     * and m_t = lam - k^2 el; S2' = sum_n dkv k = eps S2, so ddelta and 2 dkappa take
     * X = eps (u s1 + s2) = u eps s1 + S2' without a division: ddl = X rden (1 - beta) / 2,
     * dkap2 = -X eps. put(n, v) hands each state's dkv to the caller's channel sum as it is made. */
    template <int N, class Put>
    static __device__ __forceinline__ void adj(float (&m)[N], float (&dAacc)[N], float &du, float &ddl,
                                               float &dkap2, const float (&hp)[N], const float *row,
                                               float u, float dl, float gy, float Dsk, const float (&A)[N],
                                               Put put) {
        constexpr int N4 = N / 4;
        const float4 *r4 = reinterpret_cast<const float4 *>(row);
        float S1[2] = {0.0f, 0.0f}, S2[2] = {0.0f, 0.0f};
        const float kap = row[KQ<N>::KAP];
        const float beta = sigmoidf_fast(dl);
        const float rden = rcp_fast(fmaf(beta, kap, 1.0f)), eps = beta * rden;
#pragma unroll
        for (int g = 0; g < N4; g++) {
            const float4 k4 = r4[g], q4 = r4[N4 + g], kk4 = r4[2 * N4 + g], m4 = r4[3 * N4 + g];
            const float k[4] = {k4.x, k4.y, k4.z, k4.w}, q[4] = {q4.x, q4.y, q4.z, q4.w};
            const float kk[4] = {kk4.x, kk4.y, kk4.z, kk4.w}, m2k[4] = {m4.x, m4.y, m4.z, m4.w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int n = 4 * g + e;
                const float l = fmaf(gy, q[e], m[n]);          /* lam_t */
                const float el = eps * l;
                const float dk = el * fmaf(m2k[e], hp[n], u);   /* eps lam (u - 2 k h_{t-1}) */
                put(n, dk);
                S1[e & 1] = fmaf(l, k[e], S1[e & 1]);            /* sum_n lam k */
                S2[e & 1] = fmaf(dk, k[e], S2[e & 1]);           /* eps sum_n lam k (u - 2 k h_{t-1}) */
                m[n] = fmaf(-kk[e], el, l);                      /* a_t lam_t */
            }
        }
        const float s1 = S1[0] + S1[1], s2e = S2[0] + S2[1];
        du = fmaf(gy, Dsk, eps * s1);
        const float X = fmaf(u * eps, s1, s2e); /* eps (u s1 + s2) */
        ddl = 0.5f * X * rden * (1.0f - beta);
        dkap2 = -X * eps;
    }
};

/* Mamba (ViM): h <- exp(dt A) h + dt u k, dt = softplus(dl), A = -exp(A_log) per (channel, state) */
struct Mamba {
    static constexpr int REC = VIL_REC_MAMBA;
    static constexpr bool HAS_A = true;
    static constexpr bool KAPPA = false;
    /* p0 = dt, p1 = dt u */
    static __device__ __forceinline__ void pre(float &p0, float &p1, float kap, float u, float dl) {
        p0 = softplusf_(dl);
        p1 = p0 * u;
    }
    static __device__ __forceinline__ float upd(float h, float k, float p0, float p1, float A) {
        return fmaf(__expf(p0 * A), h, p1 * k);
    }
    static __device__ __forceinline__ float gate(float p0, float kk, float A) { return __expf(p0 * A); }
    static __device__ __forceinline__ float drive(float p0, float p1) { return p1; } /* dt u */
    /* the product of exp(dt A) over a chunk is exp(A sum dt) */
    static __device__ __forceinline__ void prod_state(float &P, float a) {}
    static __device__ __forceinline__ void prod_step(float &sdt, float p0) { sdt += p0; }
    static __device__ __forceinline__ float prod_end(float P, float A, float sdt) { return __expf(A * sdt); }
    /* the adjoint step: m = a_{t+1} lam_{t+1} carried (as Longhorn's), and the product
     * a lam h_{t-1} shared by the ddelta and dA_log terms */
    template <int N, class Put>
    static __device__ __forceinline__ void adj(float (&m)[N], float (&dAacc)[N], float &du, float &ddl,
                                               float &dkap2, const float (&hp)[N], const float *row,
                                               float u, float dl, float gy, float Dsk, const float (&A)[N],
                                               Put put) {
        constexpr int N4 = N / 4;
        const float4 *r4 = reinterpret_cast<const float4 *>(row);
        float S1[2] = {0.0f, 0.0f}, S2[2] = {0.0f, 0.0f};
        const float dt = softplusf_(dl), dtu = dt * u;
#pragma unroll
        for (int g = 0; g < N4; g++) {
            const float4 k4 = r4[g], q4 = r4[N4 + g];
            const float k[4] = {k4.x, k4.y, k4.z, k4.w}, q[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int n = 4 * g + e;
                const float acur = __expf(dt * A[n]);
                const float l = fmaf(gy, q[e], m[n]);
                const float Y = acur * (l * hp[n]);              /* a lam h_{t-1} */
                S1[e & 1] = fmaf(l, k[e], S1[e & 1]);            /* sum_n lam B */
                S2[e & 1] = fmaf(A[n], Y, S2[e & 1]);            /* sum_n lam A a h_{t-1} */
                dAacc[n] = fmaf(dt, Y, dAacc[n]);
                put(n, l * dtu);                                 /* dB */
                m[n] = acur * l;
            }
        }
        const float s1 = S1[0] + S1[1], s2 = S2[0] + S2[1];
        du = fmaf(gy, Dsk, dt * s1);
        ddl = fmaf(u, s1, s2) * sigmoidf_fast(dl);
        dkap2 = 0.0f;
    }
};

/* F(N, R) for every state width the CUDA scan is built for and every recurrence: the kernel
 * files instantiate their launchers with it */
#define SCAN_RECURRENCES(F, N) F(N, Longhorn) F(N, Mamba)
#define SCAN_INSTANTIATE(F) SCAN_RECURRENCES(F, 4) SCAN_RECURRENCES(F, 8) SCAN_RECURRENCES(F, 16)

#endif
