/* scan.c: the state-space recurrences of one direction (vil/rec/list.h: Longhorn (ViL), Mamba
 * (ViM)), and the mixer core built from them: both directions gated by SiLU(z) and averaged, or
 * (causal) direction 0 alone, gated. Math per doc/scans.md. Each recurrence supplies its step
 * pieces (the per-step scalar, the decay, the output, the adjoint terms) as inline functions in
 * its header (vil/rec/<id>.h, called by VilRecurrence through vil/rec/all.h); the loops
 * (forward, backward, the channel blocks, the reductions) are written once over them and
 * instantiated per recurrence by VIL_REC_DISPATCH, which args->rec selects. Each (sample, channel) pair is an
 * independent recurrence over L tokens with an N-wide state; the backward recomputes the forward
 * states of one channel block (in a per-thread buffer) and never divides by the decay.
 * k/q gradients sum over channels and dD/dA_log over samples in a fixed order, so results do not
 * depend on the thread count. dk/dq/du/ddelta/dz overwrite; dD/dA_log accumulate. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "vecmath.h"
#include "ops_cpu.h"
#include "vil/rec/all.h"

#define MAXN 64
#define MAXDB 64
#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* token index of scan step s */
static inline int tok(int s, int L, int reverse) { return reverse ? L - 1 - s : s; }

/* every recurrence's state fits MAXN x its block */
#define REC_FITS_(U, l, P, ...) _Static_assert(VIL_REC_##U##_BLOCK <= MAXDB, #l "'s channel block is over MAXDB");
VIL_RECURRENCE_LIST(REC_FITS_)
#undef REC_FITS_

/* per-token scalars of k, once per direction: kappa[b*L + t] = |k_t|^2 where the recurrence
 * reads it; NULL: none */
static float *rec_tokens(VilRecurrence rec, const float *k, int B, int L, int N, int xdbl_ld) {
    if (!vil_rec_kappa(rec)) return NULL;
    float *kappa = vil_malloc((size_t)B * L * sizeof(float));
#pragma omp parallel for
    for (long r = 0; r < (long)B * L; r++) {
        const float *kr = k + (size_t)r * xdbl_ld;
        float s = 0.0f;
        for (int n = 0; n < N; n++) s += kr[n] * kr[n];
        kappa[r] = s;
    }
    return kappa;
}

/* ---------------- the loops, once ---------------- */

/* one direction's tensors and sizes (the shapes of ops_cpu.h) */
typedef struct {
    float *y, *du, *ddelta, *dk, *dq, *dD_part, *dA_part;
    const float *dy, *u, *delta, *k, *q, *Dskip, *A_log;
    const float *kappa; /* rec_tokens */
    float *H, *T;       /* per-thread history of the states, per-thread per-token sums */
    const float *h0;    /* VilScanState's, or NULL */
    float *hT, *hsq;    /* hT: VilScanState's; hsq: (B, nblk, L) partial sums per block, or NULL */
    size_t hld;
    int B, L, E, N, xdbl_ld, reverse;
} ScanDir;

/* the state of channels c0 .. c0 + nd of sample b before the first step, h[n][i] (DB-wide
 * rows): the given initial state, or zero */
ALWAYS_INLINE void state_start(const VilRecurrence rec, const ScanDir *p, float *h, int b, int c0, int nd) {
    const int DB = vil_rec_block(rec);
    for (int n = 0; n < p->N * DB; n++) h[n] = 0.0f;
    if (p->h0)
        for (int n = 0; n < p->N; n++)
            for (int i = 0; i < nd; i++) h[n * DB + i] = p->h0[(size_t)b * p->hld + (size_t)n * p->E + c0 + i];
}

/* the forward of one channel block of one sample */
ALWAYS_INLINE void forward_block(const VilRecurrence rec, const ScanDir *p, int b, int cb) {
    const int DB = vil_rec_block(rec);
    float *y = p->y;
    const float *u = p->u, *delta = p->delta, *k = p->k, *q = p->q, *Dskip = p->Dskip, *tk = p->kappa;
    int L = p->L, E = p->E, N = p->N, xdbl_ld = p->xdbl_ld, reverse = p->reverse;
    int c0 = cb * DB, nd = DB == 1 ? 1 : E - c0 < DB ? E - c0 : DB;
    float h[MAXN * MAXDB], A[MAXN * MAXDB];
    float sc[MAXDB], ut[MAXDB], acc[MAXDB], aux0[MAXDB], aux1[MAXDB];
    state_start(rec, p, h, b, c0, nd);
    vil_rec_params(rec, A, p->A_log, c0, nd, N, DB);
    float *hsq = p->hsq ? p->hsq + ((size_t)b * ((E + DB - 1) / DB) + cb) * L : NULL;
    for (int s = 0; s < L; s++) {
        size_t r = (size_t)b * L + tok(s, L, reverse);
        const float *kt = k + r * xdbl_ld, *qt = q + r * xdbl_ld;
        const float *ur = u + r * E + c0, *dr = delta + r * E + c0;
        float kap = tk ? tk[r] : 0.0f;
        for (int i = 0; i < nd; i++) {
            sc[i] = vil_rec_step(rec, dr[i], kap, &aux0[i], &aux1[i]);
            ut[i] = ur[i];
            acc[i] = vil_rec_out_init(rec, Dskip[c0 + i], ut[i]);
        }
        if (DB == 1) { /* one channel: the state loop innermost */
            float s0 = sc[0], u0 = ut[0], a0 = acc[0];
            for (int n = 0; n < N; n++) {
                h[n] = vil_rec_decay(rec, s0, kt[n] * kt[n], A[n]) * h[n] + s0 * u0 * kt[n];
                a0 += h[n] * qt[n];
            }
            acc[0] = a0;
        } else {
            for (int n = 0; n < N; n++) {
                float kn = kt[n], qn = qt[n], kk = kn * kn;
                float *hn = h + n * DB;
                const float *An = A + n * DB;
#pragma omp simd
                for (int i = 0; i < nd; i++) {
                    hn[i] = vil_rec_decay(rec, sc[i], kk, An[i]) * hn[i] + sc[i] * ut[i] * kn;
                    acc[i] += hn[i] * qn;
                }
            }
        }
        for (int i = 0; i < nd; i++) y[r * E + c0 + i] = vil_rec_out_final(rec, acc[i], Dskip[c0 + i], ut[i]);
        if (hsq) {
            float s2 = 0.0f;
            for (int n = 0; n < N; n++)
                for (int i = 0; i < nd; i++) s2 += h[n * DB + i] * h[n * DB + i];
            hsq[tok(s, L, reverse)] = s2;
        }
    }
    if (p->hT)
        for (int n = 0; n < N; n++)
            for (int i = 0; i < nd; i++) p->hT[(size_t)b * p->hld + (size_t)n * E + c0 + i] = h[n * DB + i];
}

/* The backward of one sample: its channel blocks in order, each adding into dk, dq (and the
 * per-token kappa gradient) in that order; a one-channel block adds each channel straight into
 * the sums, a wider block sums its channels (simd) first. dD and the parameter's gradient go to
 * the sample's partials. */
ALWAYS_INLINE void backward_sample(const VilRecurrence rec, const ScanDir *p, int b) {
    const int DB = vil_rec_block(rec);
    float *du = p->du, *ddelta = p->ddelta, *dk = p->dk, *dq = p->dq;
    const float *dy = p->dy, *u = p->u, *delta = p->delta, *k = p->k, *q = p->q, *Dskip = p->Dskip,
                *tk = p->kappa;
    int L = p->L, E = p->E, N = p->N, xdbl_ld = p->xdbl_ld, reverse = p->reverse;
    int nblk = (E + DB - 1) / DB, th = omp_get_thread_num();
    float *Hs = p->H + (size_t)th * L * N * DB, *dkap = p->T + (size_t)th * L;
    for (int t = 0; t < L; t++) {
        size_t r = (size_t)b * L + t;
        for (int n = 0; n < N; n++) dk[r * xdbl_ld + n] = dq[r * xdbl_ld + n] = 0.0f;
        dkap[t] = 0.0f;
    }
    for (int cb = 0; cb < nblk; cb++) {
        int c0 = cb * DB, nd = DB == 1 ? 1 : E - c0 < DB ? E - c0 : DB;
        float h[MAXN * MAXDB], A[MAXN * MAXDB], lam[MAXN * MAXDB], anext[MAXN * MAXDB], dA[MAXN * MAXDB];
        float sc[MAXDB], ut[MAXDB], aux0[MAXDB], aux1[MAXDB], gy[MAXDB], dut[MAXDB], ds[MAXDB],
            dDacc[MAXDB], hinit[MAXN * MAXDB];
        for (int n = 0; n < N * DB; n++) lam[n] = anext[n] = dA[n] = 0.0f;
        state_start(rec, p, h, b, c0, nd);
        memcpy(hinit, h, sizeof(float) * N * DB); /* h before the first step: a constant */
        vil_rec_params(rec, A, p->A_log, c0, nd, N, DB);
        /* recompute the forward states of this block: Hs[s][n][i] = h after step s */
        for (int s = 0; s < L; s++) {
            size_t r = (size_t)b * L + tok(s, L, reverse);
            const float *kt = k + r * xdbl_ld;
            float kap = tk ? tk[r] : 0.0f;
            for (int i = 0; i < nd; i++) {
                sc[i] = vil_rec_step(rec, delta[r * E + c0 + i], kap, &aux0[i], &aux1[i]);
                ut[i] = u[r * E + c0 + i];
            }
            if (DB == 1) {
                float s0 = sc[0], u0 = ut[0], *hs = Hs + (size_t)s * N;
                for (int n = 0; n < N; n++) {
                    h[n] = vil_rec_decay(rec, s0, kt[n] * kt[n], A[n]) * h[n] + s0 * u0 * kt[n];
                    hs[n] = h[n];
                }
                continue;
            }
            for (int n = 0; n < N; n++) {
                float kn = kt[n], kk = kn * kn;
                float *hn = h + n * DB, *hs = Hs + ((size_t)s * N + n) * DB;
                const float *An = A + n * DB;
#pragma omp simd
                for (int i = 0; i < nd; i++) {
                    hn[i] = vil_rec_decay(rec, sc[i], kk, An[i]) * hn[i] + sc[i] * ut[i] * kn;
                    hs[i] = hn[i];
                }
            }
        }
        /* reverse adjoint scan */
        for (int i = 0; i < nd; i++) dDacc[i] = 0.0f;
        for (int s = L - 1; s >= 0; s--) {
            int t = tok(s, L, reverse);
            size_t r = (size_t)b * L + t;
            const float *kt = k + r * xdbl_ld, *qt = q + r * xdbl_ld;
            float *dkt = dk + r * xdbl_ld, *dqt = dq + r * xdbl_ld;
            float kap = tk ? tk[r] : 0.0f;
            for (int i = 0; i < nd; i++) {
                sc[i] = vil_rec_step(rec, delta[r * E + c0 + i], kap, &aux0[i], &aux1[i]);
                ut[i] = u[r * E + c0 + i];
                gy[i] = dy[r * E + c0 + i];
                dut[i] = gy[i] * Dskip[c0 + i];
                ds[i] = 0.0f;
            }
            if (DB == 1) { /* one channel: the state loop innermost, straight into the sums */
                const float *hcur = Hs + (size_t)s * N, *hp = s > 0 ? Hs + (size_t)(s - 1) * N : hinit;
                float s0 = sc[0], u0 = ut[0], g0 = gy[0], du0 = dut[0], ds0 = ds[0];
                for (int n = 0; n < N; n++) {
                    float kn = kt[n], a = vil_rec_decay(rec, s0, kn * kn, A[n]);
                    float l = g0 * qt[n] + anext[n] * lam[n];
                    lam[n] = l;
                    dqt[n] += g0 * hcur[n];
                    VilRecAdj g = vil_rec_adjoint(rec, l, s0, a, u0, kn, kn * kn, hp[n], A[n]);
                    dkt[n] += g.dk;
                    du0 += l * s0 * kn;
                    ds0 += g.ds;
                    if (vil_rec_param(rec)) dA[n] += g.dA;
                    anext[n] = a;
                }
                dut[0] = du0, ds[0] = ds0;
            } else {
                for (int n = 0; n < N; n++) {
                    float kn = kt[n], qn = qt[n], kk = kn * kn;
                    const float *hcur = Hs + ((size_t)s * N + n) * DB;
                    const float *hp = s > 0 ? Hs + ((size_t)(s - 1) * N + n) * DB : hinit + n * DB;
                    float *ln = lam + n * DB, *an = anext + n * DB, *dAn = dA + n * DB;
                    const float *An = A + n * DB;
                    float dqa = 0.0f, dka = 0.0f;
#pragma omp simd reduction(+ : dqa, dka)
                    for (int i = 0; i < nd; i++) {
                        float l = gy[i] * qn + an[i] * ln[i];
                        ln[i] = l;
                        dqa += gy[i] * hcur[i];
                        dut[i] += l * sc[i] * kn;
                        float a = vil_rec_decay(rec, sc[i], kk, An[i]);
                        VilRecAdj g = vil_rec_adjoint(rec, l, sc[i], a, ut[i], kn, kk, hp[i], An[i]);
                        ds[i] += g.ds;
                        dka += g.dk;
                        if (vil_rec_param(rec)) dAn[i] += g.dA;
                        an[i] = a;
                    }
                    dkt[n] += dka;
                    dqt[n] += dqa;
                }
            }
            float dkp = 0.0f;
            for (int i = 0; i < nd; i++) {
                du[r * E + c0 + i] = dut[i];
                ddelta[r * E + c0 + i] = vil_rec_ddelta(rec, ds[i], delta[r * E + c0 + i], aux0[i], aux1[i], &dkp);
                dDacc[i] += gy[i] * ut[i];
            }
            if (vil_rec_kappa(rec)) dkap[t] += dkp;
        }
        for (int i = 0; i < nd; i++) p->dD_part[(size_t)b * E + c0 + i] += dDacc[i];
        if (vil_rec_param(rec))
            for (int i = 0; i < nd; i++)
                for (int n = 0; n < N; n++)
                    p->dA_part[((size_t)b * E + c0 + i) * N + n] += dA[n * DB + i] * A[n * DB + i];
    }
    if (vil_rec_kappa(rec)) /* k's gradient through kappa: dk += 2 k dkappa */
        for (int t = 0; t < L; t++) {
            size_t r = (size_t)b * L + t;
            float *dkt = dk + r * xdbl_ld;
            const float *kt = k + r * xdbl_ld;
            for (int n = 0; n < N; n++) dkt[n] += 2.0f * kt[n] * dkap[t];
        }
}

/* ---------------- one direction ---------------- */

void scan_dir_forward(VilRecurrence rec, float *y, const float *u, const float *delta,
                      const float *k, const float *q, const float *Dskip, const float *A_log, int B,
                      int L, int E, int N, int xdbl_ld, int reverse, const VilScanState *st) {
    int nblk = (E + vil_rec_block(rec) - 1) / vil_rec_block(rec);
    ScanDir p = {.y = y, .u = u, .delta = delta, .k = k, .q = q, .Dskip = Dskip, .A_log = A_log,
                 .kappa = rec_tokens(rec, k, B, L, N, xdbl_ld), .h0 = st ? st->h0 : NULL,
                 .hT = st ? st->hT : NULL,
                 .hsq = st && st->hsq ? vil_malloc((size_t)B * nblk * L * sizeof(float)) : NULL,
                 .hld = st ? st->ld : 0, .B = B, .L = L, .E = E, .N = N, .xdbl_ld = xdbl_ld,
                 .reverse = reverse};
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int cb = 0; cb < nblk; cb++) VIL_REC_DISPATCH(rec, forward_block, &p, b, cb)
    if (p.hsq) { /* the blocks' sums in block order */
#pragma omp parallel for
        for (long r = 0; r < (long)B * L; r++) {
            long b = r / L, t = r % L;
            float s2 = 0.0f;
            for (int cb = 0; cb < nblk; cb++) s2 += p.hsq[((size_t)b * nblk + cb) * L + t];
            st->hsq[r] = s2;
        }
        free(p.hsq);
    }
    free((float *)p.kappa);
}

void scan_dir_backward(VilRecurrence rec, float *du, float *ddelta, float *dk, float *dq, float *dD,
                       float *dA_log, const float *dy, const float *u, const float *delta,
                       const float *k, const float *q, const float *Dskip, const float *A_log, int B,
                       int L, int E, int N, int xdbl_ld, int reverse, const VilScanState *st) {
    int nt = omp_get_max_threads(), DB = vil_rec_block(rec), own = vil_rec_param(rec);
    /* per-sample partials, reduced in sample order: independent of the thread count */
    ScanDir p = {.du = du, .ddelta = ddelta, .dk = dk, .dq = dq,
                 .dD_part = vil_calloc((size_t)B * E, sizeof(float)),
                 .dA_part = own ? vil_calloc((size_t)B * E * N, sizeof(float)) : NULL,
                 .dy = dy, .u = u, .delta = delta, .k = k, .q = q, .Dskip = Dskip, .A_log = A_log,
                 .kappa = rec_tokens(rec, k, B, L, N, xdbl_ld),
                 .H = vil_malloc((size_t)nt * L * N * DB * sizeof(float)),
                 .T = vil_malloc((size_t)nt * L * sizeof(float)), .h0 = st ? st->h0 : NULL,
                 .hld = st ? st->ld : 0, .B = B, .L = L, .E = E, .N = N, .xdbl_ld = xdbl_ld,
                 .reverse = reverse};
#pragma omp parallel for
    for (int b = 0; b < B; b++) VIL_REC_DISPATCH(rec, backward_sample, &p, b)
    for (int bb = 0; bb < B; bb++) {
        for (int d = 0; d < E; d++) dD[d] += p.dD_part[(size_t)bb * E + d];
        if (own)
            for (size_t i = 0; i < (size_t)E * N; i++) dA_log[i] += p.dA_part[(size_t)bb * E * N + i];
    }
    free((float *)p.kappa);
    free(p.T);
    free(p.H);
    free(p.dA_part);
    free(p.dD_part);
}

/* ---------------- the mixer core: both directions, or direction 0 alone ---------------- */

/* out (rows ldo apart) = (first ? 0 : out) + wgt y SiLU(z): direction j's gated part of the
 * output (wgt 0.5: half of the average of two; 1: the one direction), for the forward and for
 * the backward that makes it again (the same code: the same bits, vectorized alike) */
static void gate_add(float *out, size_t ldo, const float *y, const float *z, int ldz, size_t BL, int E,
                     float wgt, int first) {
#pragma omp parallel for
    for (long r = 0; r < (long)BL; r++)
        for (int e = 0; e < E; e++) {
            float zz = z[(size_t)r * ldz + e];
            float g = wgt * y[(size_t)r * E + e] * zz / (1.0f + expf(-zz));
            out[(size_t)r * ldo + e] = first ? g : out[(size_t)r * ldo + e] + g;
        }
}

/* the directions an op runs and the weight of each in the output */
static int op_dirs(int causal) { return causal ? 1 : 2; }
static float dir_weight(int causal) { return causal ? 1.0f : 0.5f; }

/* direction j's part of the op's h0 or hT ((B, dirs, N, E)), rows dirs N E apart */
static VilScanState dir_state(const float *h0, float *hT, int j, int dirs, int N, int E) {
    size_t off = (size_t)j * N * E;
    return (VilScanState){.h0 = h0 ? h0 + off : NULL, .hT = hT ? hT + off : NULL, .ld = (size_t)dirs * N * E};
}

void scan_bidir_forward(const VilScanFwd *args) {
    float *out = args->out;
    const float *z = args->z;
    int B = args->B, L = args->L, E = args->E, N = args->N, dt_ld = args->dt_ld,
        xdbl_ld = args->xdbl_ld, ldz = args->ldz, dirs = op_dirs(args->causal);
    size_t BL = (size_t)B * L;
    float *y = vil_malloc(BL * E * sizeof(float));
    for (int j = 0; j < dirs; j++) {
        const float *xdbl = args->xdbl[j];
        VilScanState st = dir_state(args->h0, args->hT, j, dirs, N, E);
        scan_dir_forward(args->rec, y, args->u[j], args->delta[j], xdbl + dt_ld, xdbl + dt_ld + N,
                         args->D[j], args->A_log[j], B, L, E, N, xdbl_ld, j, &st);
        gate_add(out, E, y, z, ldz, BL, E, dir_weight(args->causal), j == 0);
    }
    free(y);
}

void scan_bidir_backward(const VilScanBwd *args) {
    float *const *du = (float *const *)args->du, *const *ddelta = (float *const *)args->ddelta;
    float *const *dxdbl = (float *const *)args->dxdbl, *dz = args->dz, *out = args->out;
    float *const *dD = args->dD, *const *dA_log = args->dA_log;
    const float *const *u = (const float *const *)args->u;
    const float *const *delta = (const float *const *)args->delta;
    const float *const *xdbl = (const float *const *)args->xdbl;
    const float *const *Dskip = args->D, *dout = args->dout, *z = args->z;
    int B = args->B, L = args->L, E = args->E, N = args->N, dt_ld = args->dt_ld,
        xdbl_ld = args->xdbl_ld, ldz = args->ldz, dirs = op_dirs(args->causal);
    float wgt = dir_weight(args->causal);
    size_t BL = (size_t)B * L;
    float *y = vil_malloc(BL * E * sizeof(float));
    float *gy = vil_malloc(BL * E * sizeof(float));
    for (int j = 0; j < dirs; j++) {
        const float *k = xdbl[j] + dt_ld, *q = k + N;
        VilScanState st = dir_state(args->h0, NULL, j, dirs, N, E);
        scan_dir_forward(args->rec, y, u[j], delta[j], k, q, Dskip[j], args->A_log[j], B, L, E, N, xdbl_ld, j, &st);
#pragma omp parallel for
        for (long r = 0; r < (long)BL; r++)
            for (int e = 0; e < E; e++) {
                size_t i = (size_t)r * E + e;
                float zz = z[(size_t)r * ldz + e], sg = 1.0f / (1.0f + expf(-zz));
                float g = wgt * dout[i];
                float dzv = g * y[i] * sg * (1.0f + zz * (1.0f - sg));
                dz[(size_t)r * ldz + e] = j == 0 ? dzv : dz[(size_t)r * ldz + e] + dzv;
                gy[i] = g * zz * sg;
            }
        if (out) gate_add(out, ldz, y, z, ldz, BL, E, wgt, j == 0); /* the forward's gated output again */
        scan_dir_backward(args->rec, du[j], ddelta[j], dxdbl[j] + dt_ld, dxdbl[j] + dt_ld + N, dD[j],
                          dA_log[j], gy, u[j], delta[j], k, q, Dskip[j], args->A_log[j], B, L, E, N,
                          xdbl_ld, j, &st);
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

void scan_dir_states(const VilScanStates *args) {
    int B = args->B, L = args->L, E = args->E, N = args->N;
    const float *x = args->xdbl, *k = x + args->dt_ld;
    float *y = vil_malloc((size_t)B * L * E * sizeof(float)); /* the scan's output, not wanted */
    VilScanState st = {.hT = args->hT, .hsq = args->hsq, .ld = (size_t)N * E};
    scan_dir_forward(args->rec, y, args->u, args->delta, k, k + N, args->D, args->A_log, B, L, E, N,
                     args->xdbl_ld, args->reverse, &st);
    free(y);
}
