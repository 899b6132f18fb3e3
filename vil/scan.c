/* scan.c: the state-space recurrences of one direction, Longhorn (ViL) and Mamba (ViM), and
 * the bidirectional mixer core built from them (gate by SiLU(z), average of the directions).
 * Math per ../shared/spec/scans.md. Each (sample, channel) pair is an independent recurrence
 * over L tokens with an N-wide state kept in registers; the backward pass recomputes the forward
 * states of one channel (L x N floats, kept on the stack) and never divides by the forget gate.
 * k/q (Mamba B/C) gradients sum over channels: accumulated per sample in a fixed order, so the
 * result is deterministic. dk/dq/du/ddelta/dz overwrite; dD/dA_log accumulate. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "ops_cpu.h"

#define MAXN 64

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float softplusf_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* token index of scan step s */
static inline int tok(int s, int L, int reverse) { return reverse ? L - 1 - s : s; }

/* ---------------- Longhorn ---------------- */

/* kappa[b*L + t] = sum_n k_t[n]^2 */
static float *compute_kappa(const float *k, int B, int L, int N, int ldkq) {
    float *kappa = vil_malloc((size_t)B * L * sizeof(float));
#pragma omp parallel for
    for (long r = 0; r < (long)B * L; r++) {
        const float *kr = k + (size_t)r * ldkq;
        float s = 0.0f;
        for (int n = 0; n < N; n++) s += kr[n] * kr[n];
        kappa[r] = s;
    }
    return kappa;
}

void longhorn_scan_forward(float *y, const float *u, const float *delta, const float *k,
                           const float *q, const float *Dskip, int B, int L, int E, int N,
                           int ldkq, int reverse) {
    float *kappa = compute_kappa(k, B, L, N, ldkq);
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int d = 0; d < E; d++) {
            float h[MAXN] = {0};
            for (int s = 0; s < L; s++) {
                size_t r = (size_t)b * L + tok(s, L, reverse);
                const float *kt = k + r * ldkq, *qt = q + r * ldkq;
                float ut = u[r * E + d];
                float beta = sigmoidf_(delta[r * E + d]);
                float eps = beta / (1.0f + beta * kappa[r]);
                float acc = 0.0f;
                for (int n = 0; n < N; n++) {
                    h[n] = (1.0f - eps * kt[n] * kt[n]) * h[n] + eps * ut * kt[n];
                    acc += h[n] * qt[n];
                }
                y[r * E + d] = acc + Dskip[d] * ut;
            }
        }
    free(kappa);
}

void longhorn_scan_backward(float *du, float *ddelta, float *dk, float *dq, float *dD,
                            const float *dy, const float *u, const float *delta, const float *k,
                            const float *q, const float *Dskip, int B, int L, int E, int N,
                            int ldkq, int reverse) {
    float *kappa = compute_kappa(k, B, L, N, ldkq);
    int nt = omp_get_max_threads();
    float *dD_part = vil_calloc((size_t)nt * E, sizeof(float));
    float *dkappa = vil_calloc((size_t)B * L, sizeof(float));
    float *H = vil_malloc((size_t)nt * L * N * sizeof(float)); /* per-thread state history */
#pragma omp parallel for
    for (int b = 0; b < B; b++) {
        float *Hs = H + (size_t)omp_get_thread_num() * L * N;
        float *dDp = dD_part + (size_t)omp_get_thread_num() * E;
        for (int t = 0; t < L; t++) {
            size_t r = (size_t)b * L + t;
            for (int n = 0; n < N; n++) dk[r * ldkq + n] = dq[r * ldkq + n] = 0.0f;
        }
        for (int d = 0; d < E; d++) {
            /* recompute the forward states h_s (after step s) of this channel */
            float h[MAXN] = {0};
            for (int s = 0; s < L; s++) {
                size_t r = (size_t)b * L + tok(s, L, reverse);
                const float *kt = k + r * ldkq;
                float ut = u[r * E + d];
                float beta = sigmoidf_(delta[r * E + d]);
                float eps = beta / (1.0f + beta * kappa[r]);
                for (int n = 0; n < N; n++) {
                    h[n] = (1.0f - eps * kt[n] * kt[n]) * h[n] + eps * ut * kt[n];
                    Hs[(size_t)s * N + n] = h[n];
                }
            }
            /* reverse adjoint scan */
            float lam[MAXN] = {0}, anext[MAXN] = {0};
            float dDacc = 0.0f;
            for (int s = L - 1; s >= 0; s--) {
                size_t r = (size_t)b * L + tok(s, L, reverse);
                const float *kt = k + r * ldkq, *qt = q + r * ldkq;
                const float *hprev = s > 0 ? Hs + (size_t)(s - 1) * N : NULL;
                const float *hcur = Hs + (size_t)s * N;
                float ut = u[r * E + d], gy = dy[r * E + d];
                float beta = sigmoidf_(delta[r * E + d]);
                float den = 1.0f + beta * kappa[r];
                float eps = beta / den;
                float dut = gy * Dskip[d], deps = 0.0f;
                float *dkt = dk + r * ldkq, *dqt = dq + r * ldkq;
                for (int n = 0; n < N; n++) {
                    float hp = hprev ? hprev[n] : 0.0f;
                    lam[n] = gy * qt[n] + anext[n] * lam[n];
                    dqt[n] += gy * hcur[n];
                    dut += lam[n] * eps * kt[n];
                    deps += lam[n] * (ut * kt[n] - kt[n] * kt[n] * hp);
                    dkt[n] += lam[n] * eps * (ut - 2.0f * kt[n] * hp);
                    anext[n] = 1.0f - eps * kt[n] * kt[n];
                }
                float dbeta = deps / (den * den);
                dkappa[r] -= deps * beta * beta / (den * den);
                du[r * E + d] = dut;
                ddelta[r * E + d] = dbeta * beta * (1.0f - beta);
                dDacc += gy * ut;
            }
            dDp[d] += dDacc;
        }
        for (int t = 0; t < L; t++) {
            size_t r = (size_t)b * L + t;
            for (int n = 0; n < N; n++) dk[r * ldkq + n] += 2.0f * k[r * ldkq + n] * dkappa[r];
        }
    }
    for (int t = 0; t < nt; t++)
        for (int d = 0; d < E; d++) dD[d] += dD_part[(size_t)t * E + d];
    free(H);
    free(dkappa);
    free(dD_part);
    free(kappa);
}

/* ---------------- Mamba ---------------- */

void mamba_scan_forward(float *y, const float *u, const float *delta, const float *Bm,
                        const float *Cm, const float *A_log, const float *Dskip, int B, int L,
                        int E, int N, int ldkq, int reverse) {
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int d = 0; d < E; d++) {
            float h[MAXN] = {0}, A[MAXN];
            for (int n = 0; n < N; n++) A[n] = -expf(A_log[(size_t)d * N + n]);
            for (int s = 0; s < L; s++) {
                size_t r = (size_t)b * L + tok(s, L, reverse);
                const float *bt = Bm + r * ldkq, *ct = Cm + r * ldkq;
                float ut = u[r * E + d], dt = softplusf_(delta[r * E + d]);
                float acc = 0.0f;
                for (int n = 0; n < N; n++) {
                    h[n] = expf(dt * A[n]) * h[n] + dt * ut * bt[n];
                    acc += h[n] * ct[n];
                }
                y[r * E + d] = acc + Dskip[d] * ut;
            }
        }
}

void mamba_scan_backward(float *du, float *ddelta, float *dB, float *dC, float *dA_log, float *dD,
                         const float *dy, const float *u, const float *delta, const float *Bm,
                         const float *Cm, const float *A_log, const float *Dskip, int B, int L,
                         int E, int N, int ldkq, int reverse) {
    int nt = omp_get_max_threads();
    float *dD_part = vil_calloc((size_t)nt * E, sizeof(float));
    float *dA_part = vil_calloc((size_t)nt * E * N, sizeof(float));
    float *H = vil_malloc((size_t)nt * L * N * sizeof(float));
#pragma omp parallel for
    for (int b = 0; b < B; b++) {
        int th = omp_get_thread_num();
        float *Hs = H + (size_t)th * L * N;
        for (int t = 0; t < L; t++) {
            size_t r = (size_t)b * L + t;
            for (int n = 0; n < N; n++) dB[r * ldkq + n] = dC[r * ldkq + n] = 0.0f;
        }
        for (int d = 0; d < E; d++) {
            float h[MAXN] = {0}, A[MAXN];
            for (int n = 0; n < N; n++) A[n] = -expf(A_log[(size_t)d * N + n]);
            for (int s = 0; s < L; s++) {
                size_t r = (size_t)b * L + tok(s, L, reverse);
                const float *bt = Bm + r * ldkq;
                float ut = u[r * E + d], dt = softplusf_(delta[r * E + d]);
                for (int n = 0; n < N; n++) {
                    h[n] = expf(dt * A[n]) * h[n] + dt * ut * bt[n];
                    Hs[(size_t)s * N + n] = h[n];
                }
            }
            float lam[MAXN] = {0}, anext[MAXN] = {0}, dA[MAXN] = {0};
            float dDacc = 0.0f;
            for (int s = L - 1; s >= 0; s--) {
                size_t r = (size_t)b * L + tok(s, L, reverse);
                const float *bt = Bm + r * ldkq, *ct = Cm + r * ldkq;
                const float *hprev = s > 0 ? Hs + (size_t)(s - 1) * N : NULL;
                const float *hcur = Hs + (size_t)s * N;
                float ut = u[r * E + d], gy = dy[r * E + d];
                float dt = softplusf_(delta[r * E + d]);
                float dut = gy * Dskip[d], ddt = 0.0f;
                float *dbt = dB + r * ldkq, *dct = dC + r * ldkq;
                for (int n = 0; n < N; n++) {
                    float hp = hprev ? hprev[n] : 0.0f;
                    float a = expf(dt * A[n]);
                    lam[n] = gy * ct[n] + anext[n] * lam[n];
                    dct[n] += gy * hcur[n];
                    dbt[n] += lam[n] * dt * ut;
                    dut += lam[n] * dt * bt[n];
                    ddt += lam[n] * (A[n] * a * hp + ut * bt[n]);
                    dA[n] += lam[n] * dt * a * hp;
                    anext[n] = a;
                }
                du[r * E + d] = dut;
                ddelta[r * E + d] = ddt * sigmoidf_(delta[r * E + d]);
                dDacc += gy * ut;
            }
            dD_part[(size_t)th * E + d] += dDacc;
            for (int n = 0; n < N; n++) dA_part[((size_t)th * E + d) * N + n] += dA[n] * A[n];
        }
    }
    for (int t = 0; t < nt; t++) {
        for (int d = 0; d < E; d++) dD[d] += dD_part[(size_t)t * E + d];
        for (size_t i = 0; i < (size_t)E * N; i++) dA_log[i] += dA_part[(size_t)t * E * N + i];
    }
    free(H);
    free(dA_part);
    free(dD_part);
}

/* ---------------- the bidirectional core ---------------- */

static void scan_dir_forward(float *y, const float *u, const float *delta, const float *xdbl,
                             const float *Dskip, const float *A_log, int B, int L, int E, int N,
                             int R, int reverse) {
    int ld = R + 2 * N;
    if (A_log)
        mamba_scan_forward(y, u, delta, xdbl + R, xdbl + R + N, A_log, Dskip, B, L, E, N, ld,
                           reverse);
    else
        longhorn_scan_forward(y, u, delta, xdbl + R, xdbl + R + N, Dskip, B, L, E, N, ld,
                              reverse);
}

void scan_bidir_forward(float *out, const float *const u[2], const float *const delta[2],
                        const float *const xdbl[2], const float *z, const float *const Dskip[2],
                        const float *const A_log[2], int B, int L, int E, int N, int R, int ldz) {
    size_t BL = (size_t)B * L;
    float *y = vil_malloc(BL * E * sizeof(float));
    for (int j = 0; j < 2; j++) {
        scan_dir_forward(y, u[j], delta[j], xdbl[j], Dskip[j], A_log ? A_log[j] : NULL, B, L, E,
                         N, R, j);
#pragma omp parallel for
        for (long r = 0; r < (long)BL; r++)
            for (int e = 0; e < E; e++) {
                float zz = z[(size_t)r * ldz + e];
                float g = 0.5f * y[(size_t)r * E + e] * zz / (1.0f + expf(-zz));
                out[(size_t)r * E + e] = j == 0 ? g : out[(size_t)r * E + e] + g;
            }
    }
    free(y);
}

void scan_bidir_backward(float *const du[2], float *const ddelta[2], float *const dxdbl[2],
                         float *dz, float *const dD[2], float *const dA_log[2], const float *dout,
                         const float *const u[2], const float *const delta[2],
                         const float *const xdbl[2], const float *z, const float *const Dskip[2],
                         const float *const A_log[2], int B, int L, int E, int N, int R, int ldz) {
    size_t BL = (size_t)B * L;
    int ld = R + 2 * N;
    float *y = vil_malloc(BL * E * sizeof(float));
    float *gy = vil_malloc(BL * E * sizeof(float));
    for (int j = 0; j < 2; j++) {
        const float *Al = A_log ? A_log[j] : NULL;
        scan_dir_forward(y, u[j], delta[j], xdbl[j], Dskip[j], Al, B, L, E, N, R, j);
#pragma omp parallel for
        for (long r = 0; r < (long)BL; r++)
            for (int e = 0; e < E; e++) {
                size_t i = (size_t)r * E + e;
                float zz = z[(size_t)r * ldz + e], sg = 1.0f / (1.0f + expf(-zz));
                float g = 0.5f * dout[i];
                float dzv = g * y[i] * sg * (1.0f + zz * (1.0f - sg));
                dz[(size_t)r * ldz + e] = j == 0 ? dzv : dz[(size_t)r * ldz + e] + dzv;
                gy[i] = g * zz * sg;
            }
        if (Al)
            mamba_scan_backward(du[j], ddelta[j], dxdbl[j] + R, dxdbl[j] + R + N, dA_log[j], dD[j],
                                gy, u[j], delta[j], xdbl[j] + R, xdbl[j] + R + N, Al, Dskip[j], B,
                                L, E, N, ld, j);
        else
            longhorn_scan_backward(du[j], ddelta[j], dxdbl[j] + R, dxdbl[j] + R + N, dD[j], gy,
                                   u[j], delta[j], xdbl[j] + R, xdbl[j] + R + N, Dskip[j], B, L,
                                   E, N, ld, j);
    }
    free(gy);
    free(y);
}
