/* longhorn.h: the Longhorn recurrence (ViL), doc/scans.md "Longhorn": its table row, its CPU step
 * pieces (vil/scan.c runs them; vil/rec/all.h says what each piece does) and, where nvcc
 * compiles it, its CUDA policy with its tuning row (cuda/scan_rec.cuh says what each member
 * does). Per channel, with kappa = |k_t|^2:
 *   h <- (1 - eps k k^T) h + eps u k,  eps = beta / (1 + beta kappa),  beta = sigmoid(delta) */
#ifndef VIL_REC_LONGHORN_H
#define VIL_REC_LONGHORN_H

#include "vil/rec/step.h"

/* ---- the table row (vil/recurrence.h's VilRecurrenceInfo) ---- */
/* the step scalar is sigmoid(delta): the delta of a step dt is its logit */
static inline float longhorn_delta_of_dt(float dt) { return logf(dt / (1.0f - dt)); }
#define VIL_REC_ROW_LONGHORN \
    .name = "Longhorn", .family = "ViL", .arch = "vil", .kq = {"k", "q"}, .delta_of_dt = longhorn_delta_of_dt

/* ---- the CPU step pieces ----
 * Channels per block, the state laid out h[n][channel]: 64 make the inner loops run over
 * contiguous channels and vectorize (k_t, q_t scalars there). kappa: a per-token scalar of k,
 * whose gradient sums over channels into dk. No parameter of its own. */
enum { VIL_REC_LONGHORN_BLOCK = 64, VIL_REC_LONGHORN_KAPPA = 1, VIL_REC_LONGHORN_PARAM = 0 };

VIL_REC_FN void longhorn_params(float *A, const float *A_log, int c0, int nd, int N, int DB) {}

/* eps; aux keeps beta and 1 + beta kappa for the adjoint. The exact quotient, as written. */
VIL_REC_FN float longhorn_step(float delta, float kappa, float *aux0, float *aux1) {
    float beta = vil_rec_sigmoidf(delta), den = 1.0f + beta * kappa;
    *aux0 = beta, *aux1 = den;
    return beta / den;
}

VIL_REC_FN float longhorn_decay(float s, float kk, float A) { return 1.0f - s * kk; }

/* y: the state sum starts at D u */
VIL_REC_FN float longhorn_out_init(float Dskip, float ut) { return Dskip * ut; }
VIL_REC_FN float longhorn_out_final(float acc, float Dskip, float ut) { return acc; }

VIL_REC_FN VilRecAdj longhorn_adjoint(float l, float s, float a, float ut, float kn, float kk, float hp,
                                      float A) {
    VilRecAdj g = {0};
    g.ds = l * (ut * kn - kk * hp);
    g.dk = l * s * (ut - 2.0f * kn * hp);
    return g;
}

/* ddelta from deps; the kappa gradient -deps beta^2 / (1 + beta kappa)^2 into *dkappa */
VIL_REC_FN float longhorn_ddelta(float ds, float delta, float aux0, float aux1, float *dkappa) {
    float beta = aux0, d2 = aux1 * aux1;
    *dkappa -= ds * beta * beta / d2;
    return ds / d2 * beta * (1.0f - beta);
}

/* ---- the CUDA policy ---- */
#ifdef __CUDACC__
#include "cuda/scan_common.cuh"

struct Longhorn {
    static constexpr bool HAS_A = VIL_REC_LONGHORN_PARAM; /* no A_log */
    static constexpr bool KAPPA = VIL_REC_LONGHORN_KAPPA; /* eps reads kappa: dk has a 2 k dkappa term */
    /* The tuning row, measured on the H100 (dev/cuda/scan and vil bench; cuda/PERF_NOTES.md):
     * - adj_warps 16 (128 registers): 12 warps at 168 registers ran 2.5% slower, and 6.5% slower
     *   after issue 35's step: 1,244 against 1,167 us;
     * - adj_fullsub 1: 1,166 against 1,184 us a Tiny layer's backward;
     * - long_chunks 1 (its staged chunk summaries): E 384 B 32 fwd us, sequential (quad) /
     *   chunked: L 4097 1,142 / 1,053, L 1025 295 / 317, L 197 63 / 97;
     * - quad_fwd 16384, pair / quad fwd us: L 4097 B 32 sequential 1368 / 1150; L 197 B 64 97.6
     *   / 104.6, B 256 234 / 362; chunked (C 64) L 4097 B 1 97 / 97, B 8 510 / 692; vil bench
     *   224 px b1 latency 2.21 / 1.90 ms, b32 inference 11,702 / 12,794 img/s.
     * Knobs: ADJ_WARPS_LH, ADJ_FULLSUB_LH, SCAN_QUAD_FWD. */
    static constexpr ScanRecTune tune() {
        ScanRecTune t = {/* adj_warps */ 16, /* adj_fullsub */ 1, /* long_chunks */ 1, /* quad_fwd */ 16384};
#ifdef ADJ_WARPS_LH
        t.adj_warps = ADJ_WARPS_LH;
#endif
#ifdef ADJ_FULLSUB_LH
        t.adj_fullsub = ADJ_FULLSUB_LH;
#endif
#ifdef SCAN_QUAD_FWD
        t.quad_fwd = SCAN_QUAD_FWD;
#endif
        return t;
    }
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
#endif

#endif
