/* scan.c: the state-space recurrences of one direction, Longhorn (ViL) and Mamba (ViM), and
 * the bidirectional mixer core built from them (gate by SiLU(z), average of the directions).
 * Math per doc/scans.md. Each (sample, channel) pair is an independent recurrence
 * over L tokens with an N-wide state kept in registers; the backward pass recomputes the forward
 * states of one channel (L x N floats, in a per-thread buffer) and never divides by the forget gate.
 * k/q (Mamba B/C) gradients sum over channels and dD/dA_log over samples: partial sums in
 * fixed blocks, reduced in a fixed order, so results do not depend on the thread count. dk/dq/du/ddelta/dz overwrite; dD/dA_log accumulate. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "vecmath.h"
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

/* Channels are processed in blocks of DB with the state laid out h[n][channel], so the inner
 * loops run over contiguous channels and vectorize; k_t, q_t are scalars there. */
#define DB 64

void longhorn_scan_forward(float *y, const float *u, const float *delta, const float *k,
                           const float *q, const float *Dskip, int B, int L, int E, int N,
                           int ldkq, int reverse) {
    float *kappa = compute_kappa(k, B, L, N, ldkq);
    int nblk = (E + DB - 1) / DB;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int cb = 0; cb < nblk; cb++) {
            int c0 = cb * DB, nd = E - c0 < DB ? E - c0 : DB;
            float h[MAXN][DB];
            memset(h, 0, sizeof h);
            float eps[DB], ut[DB], acc[DB];
            for (int s = 0; s < L; s++) {
                size_t r = (size_t)b * L + tok(s, L, reverse);
                const float *kt = k + r * ldkq, *qt = q + r * ldkq;
                const float *ur = u + r * E + c0, *dr = delta + r * E + c0;
                float kap = kappa[r];
                for (int i = 0; i < nd; i++) {
                    float beta = sigmoidf_(dr[i]);
                    eps[i] = beta / (1.0f + beta * kap);
                    ut[i] = ur[i];
                    acc[i] = Dskip[c0 + i] * ut[i];
                }
                for (int n = 0; n < N; n++) {
                    float kn = kt[n], qn = qt[n], kk = kn * kn;
                    float *hn = h[n];
#pragma omp simd
                    for (int i = 0; i < nd; i++) {
                        hn[i] = (1.0f - eps[i] * kk) * hn[i] + eps[i] * ut[i] * kn;
                        acc[i] += hn[i] * qn;
                    }
                }
                memcpy(y + r * E + c0, acc, (size_t)nd * sizeof(float));
            }
        }
    free(kappa);
}

void longhorn_scan_backward(float *du, float *ddelta, float *dk, float *dq, float *dD,
                            const float *dy, const float *u, const float *delta, const float *k,
                            const float *q, const float *Dskip, int B, int L, int E, int N,
                            int ldkq, int reverse) {
    float *kappa = compute_kappa(k, B, L, N, ldkq);
    int nblk = (E + DB - 1) / DB, nt = omp_get_max_threads();
    /* per (sample, channel block) partial sums over the block's channels, reduced afterwards
     * in a fixed order: deterministic whatever the thread count */
    size_t pw = (size_t)L * (2 * N + 1); /* per token: dk[N], dq[N], dkappa */
    float *part = vil_malloc((size_t)B * nblk * pw * sizeof(float));
    float *dD_part = vil_calloc((size_t)B * E, sizeof(float));
    float *H = vil_malloc((size_t)nt * L * N * DB * sizeof(float)); /* per-thread history */
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int cb = 0; cb < nblk; cb++) {
            int c0 = cb * DB, nd = E - c0 < DB ? E - c0 : DB;
            float *Hs = H + (size_t)omp_get_thread_num() * L * N * DB;
            float *pp = part + ((size_t)b * nblk + cb) * pw;
            float eps[DB], ut[DB], beta[DB], den[DB], gy[DB], dut[DB], deps[DB];
            /* recompute the forward states of this block: Hs[s][n][i] = h after step s */
            float h[MAXN][DB];
            memset(h, 0, sizeof h);
            for (int s = 0; s < L; s++) {
                size_t r = (size_t)b * L + tok(s, L, reverse);
                const float *kt = k + r * ldkq;
                float kap = kappa[r];
                for (int i = 0; i < nd; i++) {
                    float be = sigmoidf_(delta[r * E + c0 + i]);
                    eps[i] = be / (1.0f + be * kap);
                    ut[i] = u[r * E + c0 + i];
                }
                for (int n = 0; n < N; n++) {
                    float kn = kt[n], kk = kn * kn;
                    float *hn = h[n], *hs = Hs + ((size_t)s * N + n) * DB;
#pragma omp simd
                    for (int i = 0; i < nd; i++) {
                        hn[i] = (1.0f - eps[i] * kk) * hn[i] + eps[i] * ut[i] * kn;
                        hs[i] = hn[i];
                    }
                }
            }
            /* reverse adjoint scan */
            float lam[MAXN][DB], anext[MAXN][DB];
            memset(lam, 0, sizeof lam);
            memset(anext, 0, sizeof anext);
            static const float zero[DB] = {0};
            for (int s = L - 1; s >= 0; s--) {
                int t = tok(s, L, reverse);
                size_t r = (size_t)b * L + t;
                const float *kt = k + r * ldkq, *qt = q + r * ldkq;
                float kap = kappa[r];
                for (int i = 0; i < nd; i++) {
                    float be = sigmoidf_(delta[r * E + c0 + i]);
                    beta[i] = be;
                    den[i] = 1.0f + be * kap;
                    eps[i] = be / den[i];
                    ut[i] = u[r * E + c0 + i];
                    gy[i] = dy[r * E + c0 + i];
                    dut[i] = gy[i] * Dskip[c0 + i];
                    deps[i] = 0.0f;
                }
                float *pk = pp + (size_t)t * (2 * N + 1), *pq = pk + N;
                for (int n = 0; n < N; n++) {
                    float kn = kt[n], qn = qt[n], kk = kn * kn;
                    const float *hcur = Hs + ((size_t)s * N + n) * DB;
                    const float *hp = s > 0 ? Hs + ((size_t)(s - 1) * N + n) * DB : zero;
                    float *ln = lam[n], *an = anext[n];
                    float dqa = 0.0f, dka = 0.0f;
#pragma omp simd reduction(+ : dqa, dka)
                    for (int i = 0; i < nd; i++) {
                        float l = gy[i] * qn + an[i] * ln[i];
                        ln[i] = l;
                        dqa += gy[i] * hcur[i];
                        dut[i] += l * eps[i] * kn;
                        deps[i] += l * (ut[i] * kn - kk * hp[i]);
                        dka += l * eps[i] * (ut[i] - 2.0f * kn * hp[i]);
                        an[i] = 1.0f - eps[i] * kk;
                    }
                    pk[n] = dka;
                    pq[n] = dqa;
                }
                float dkap = 0.0f;
                for (int i = 0; i < nd; i++) {
                    float d2 = den[i] * den[i];
                    dkap -= deps[i] * beta[i] * beta[i] / d2;
                    du[r * E + c0 + i] = dut[i];
                    ddelta[r * E + c0 + i] = deps[i] / d2 * beta[i] * (1.0f - beta[i]);
                    dD_part[(size_t)b * E + c0 + i] += gy[i] * ut[i];
                }
                pk[2 * N] = dkap;
            }
        }
    /* dk, dq = sums of the block partials in block order; dk += 2 k dkappa */
#pragma omp parallel for
    for (long r = 0; r < (long)B * L; r++) {
        int b = (int)(r / L), t = (int)(r % L);
        float *dkt = dk + (size_t)r * ldkq, *dqt = dq + (size_t)r * ldkq;
        const float *kt = k + (size_t)r * ldkq;
        float dkap = 0.0f;
        for (int n = 0; n < N; n++) dkt[n] = dqt[n] = 0.0f;
        for (int cb = 0; cb < nblk; cb++) {
            const float *pk = part + ((size_t)b * nblk + cb) * pw + (size_t)t * (2 * N + 1);
            for (int n = 0; n < N; n++) {
                dkt[n] += pk[n];
                dqt[n] += pk[N + n];
            }
            dkap += pk[2 * N];
        }
        for (int n = 0; n < N; n++) dkt[n] += 2.0f * kt[n] * dkap;
    }
    for (int b = 0; b < B; b++)
        for (int d = 0; d < E; d++) dD[d] += dD_part[(size_t)b * E + d];
    free(H);
    free(dD_part);
    free(part);
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
    /* per-sample partials, reduced in sample order: independent of the thread count */
    float *dD_part = vil_calloc((size_t)B * E, sizeof(float));
    float *dA_part = vil_calloc((size_t)B * E * N, sizeof(float));
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
            dD_part[(size_t)b * E + d] += dDacc;
            for (int n = 0; n < N; n++) dA_part[((size_t)b * E + d) * N + n] += dA[n] * A[n];
        }
    }
    for (int bb = 0; bb < B; bb++) {
        for (int d = 0; d < E; d++) dD[d] += dD_part[(size_t)bb * E + d];
        for (size_t i = 0; i < (size_t)E * N; i++) dA_log[i] += dA_part[(size_t)bb * E * N + i];
    }
    free(H);
    free(dA_part);
    free(dD_part);
}

/* ---------------- the bidirectional core ---------------- */

static void scan_dir_forward(float *y, const float *u, const float *delta, const float *xdbl,
                             const float *Dskip, const float *A_log, int B, int L, int E, int N,
                             int dt_ld, int ld, int reverse) {
    if (A_log) /* Mamba */
        mamba_scan_forward(y, u, delta, xdbl + dt_ld, xdbl + dt_ld + N, A_log, Dskip, B, L, E, N, ld,
                           reverse);
    else
        longhorn_scan_forward(y, u, delta, xdbl + dt_ld, xdbl + dt_ld + N, Dskip, B, L, E, N, ld,
                              reverse);
}

void scan_bidir_forward(const VilScanFwd *args) {
    float *out = args->out;
    const float *z = args->z;
    int B = args->B, L = args->L, E = args->E, N = args->N, dt_ld = args->dt_ld, ldx = args->ldx,
        ldz = args->ldz, mamba = args->rec == VIL_REC_MAMBA;
    size_t BL = (size_t)B * L;
    float *y = vil_malloc(BL * E * sizeof(float));
    for (int j = 0; j < 2; j++) {
        scan_dir_forward(y, args->u[j], args->delta[j], args->xdbl[j], args->D[j],
                         mamba ? args->A_log[j] : NULL, B, L, E, N, dt_ld, ldx, j);
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

void scan_bidir_backward(const VilScanBwd *args) {
    float *const *du = (float *const *)args->du, *const *ddelta = (float *const *)args->ddelta;
    float *const *dxdbl = (float *const *)args->dxdbl, *dz = args->dz;
    float *const *dD = args->dD, *const *dA_log = args->dA_log;
    const float *const *u = (const float *const *)args->u;
    const float *const *delta = (const float *const *)args->delta;
    const float *const *xdbl = (const float *const *)args->xdbl;
    const float *const *Dskip = args->D, *dout = args->dout, *z = args->z;
    int B = args->B, L = args->L, E = args->E, N = args->N, dt_ld = args->dt_ld, ldx = args->ldx,
        ldz = args->ldz, mamba = args->rec == VIL_REC_MAMBA;
    size_t BL = (size_t)B * L;
    const int ld = ldx;
    float *y = vil_malloc(BL * E * sizeof(float));
    float *gy = vil_malloc(BL * E * sizeof(float));
    for (int j = 0; j < 2; j++) {
        const float *Al = mamba ? args->A_log[j] : NULL;
        scan_dir_forward(y, u[j], delta[j], xdbl[j], Dskip[j], Al, B, L, E, N, dt_ld, ldx, j);
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
            mamba_scan_backward(du[j], ddelta[j], dxdbl[j] + dt_ld, dxdbl[j] + dt_ld + N, dA_log[j], dD[j],
                                gy, u[j], delta[j], xdbl[j] + dt_ld, xdbl[j] + dt_ld + N, Al, Dskip[j], B,
                                L, E, N, ld, j);
        else
            longhorn_scan_backward(du[j], ddelta[j], dxdbl[j] + dt_ld, dxdbl[j] + dt_ld + N, dD[j], gy,
                                   u[j], delta[j], xdbl[j] + dt_ld, xdbl[j] + dt_ld + N, Dskip[j], B, L,
                                   E, N, ld, j);
        if (args->ddelta_sum[j]) {
            float *sum = args->ddelta_sum[j];
#pragma omp parallel for
            for (int e = 0; e < E; e++) {
                float s = 0.0f;
                for (size_t r = 0; r < BL; r++) s += ddelta[j][r * E + e];
                sum[e] += s;
            }
        }
    }
    free(gy);
    free(y);
}
