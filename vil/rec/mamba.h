/* mamba.h: the Mamba selective scan (ViM), doc/scans.md "Mamba selective scan": its table row,
 * its CPU step pieces (vil/scan.c runs them; vil/rec/all.h says what each piece does) and, where
 * nvcc compiles it, its CUDA policy with its tuning row (cuda/scan_rec.cuh says what each member
 * does). Per channel, with A = -exp(A_log) per (channel, state):
 *   h <- exp(dt A) h + dt u k,  dt = softplus(delta) */
#ifndef VIL_REC_MAMBA_H
#define VIL_REC_MAMBA_H

#include "vil/rec/step.h"

/* ---- the table row (vil/recurrence.h's VilRecurrenceInfo) ---- */
/* the step scalar is softplus(delta): the delta of a step dt is its inverse */
static inline float mamba_delta_of_dt(float dt) { return dt + logf(-expm1f(-dt)); }
/* A = -(1..N) per channel (S4D-real) */
static inline float mamba_A_log_init(int n) { return logf((float)(n + 1)); }
#define VIL_REC_ROW_MAMBA                                                                          \
    .name = "Mamba", .family = "ViM", .arch = "vim", .kq = {"B", "C"},                             \
    .param = {.key = "layers.%d.mixer.A%s_log", .dims = "EN", .init = mamba_A_log_init},           \
    .dt_draw_forward = 1, .delta_of_dt = mamba_delta_of_dt

/* ---- the CPU step pieces ----
 * The decay differs per (channel, state): one channel a block, its state loop scalar. No kappa;
 * a parameter of its own per (channel, state), A_log. */
enum { VIL_REC_MAMBA_BLOCK = 1, VIL_REC_MAMBA_KAPPA = 0, VIL_REC_MAMBA_PARAM = 1 };

VIL_REC_FN void mamba_params(float *A, const float *A_log, int c0, int nd, int N, int DB) {
    for (int i = 0; i < nd; i++)
        for (int n = 0; n < N; n++) A[n * DB + i] = -expf(A_log[(size_t)(c0 + i) * N + n]);
}

VIL_REC_FN float mamba_step(float delta, float kappa, float *aux0, float *aux1) { return vil_rec_softplusf(delta); }

VIL_REC_FN float mamba_decay(float s, float kk, float A) { return expf(s * A); }

/* y: D u added to the state sum last */
VIL_REC_FN float mamba_out_init(float Dskip, float ut) { return 0.0f; }
VIL_REC_FN float mamba_out_final(float acc, float Dskip, float ut) { return acc + Dskip * ut; }

VIL_REC_FN VilRecAdj mamba_adjoint(float l, float s, float a, float ut, float kn, float kk, float hp, float A) {
    VilRecAdj g = {0};
    g.ds = l * (A * a * hp + ut * kn);
    g.dk = l * s * ut;
    g.dA = l * s * a * hp;
    return g;
}

/* softplus' = sigmoid */
VIL_REC_FN float mamba_ddelta(float ds, float delta, float aux0, float aux1, float *dkappa) {
    return ds * vil_rec_sigmoidf(delta);
}

/* ---- the CUDA policy ---- */
#ifdef __CUDACC__
#include "cuda/scan_common.cuh"

struct Mamba {
    static constexpr bool HAS_A = VIL_REC_MAMBA_PARAM;
    static constexpr bool KAPPA = VIL_REC_MAMBA_KAPPA;
    /* The tuning row, measured on the H100 (dev/cuda/scan and vil bench; cuda/PERF_NOTES.md):
     * - adj_warps 12 (168 registers): 16 warps at 128 registers spill 84 bytes, 1,939 against
     *   1,828 us;
     * - adj_fullsub 0: its whole-sub-chunk copy spills 64 bytes at 168 registers, 1,867 against
     *   1,828 us;
     * - long_chunks 0: its quad kernel stays ahead of the chunked form at long sequences (E 384
     *   B 32 fwd us, L 4097 1,465 / 1,736);
     * - quad_fwd 32768: its step costs an exp per state, so its quad kernel pays off further,
     *   pair / quad fwd us: L 197 B 64 217 / 133, B 256 420 / 466; L 1025 B 32 1005 / 377 (B 65
     *   .. 255 not measured).
     * Knobs: ADJ_WARPS_MAMBA, ADJ_FULLSUB_MAMBA, SCAN_QUAD_FWD_MAMBA. */
    static constexpr ScanRecTune tune() {
        ScanRecTune t = {/* adj_warps */ 12, /* adj_fullsub */ 0, /* long_chunks */ 0, /* quad_fwd */ 32768};
#ifdef ADJ_WARPS_MAMBA
        t.adj_warps = ADJ_WARPS_MAMBA;
#endif
#ifdef ADJ_FULLSUB_MAMBA
        t.adj_fullsub = ADJ_FULLSUB_MAMBA;
#endif
#ifdef SCAN_QUAD_FWD_MAMBA
        t.quad_fwd = SCAN_QUAD_FWD_MAMBA;
#endif
        return t;
    }
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
#endif

#endif
