/* gpu_ops.c: every CUDA op against the float32 CPU reference of ops_cpu.h, on random inputs of
 * odd sizes (L = 1, 7, 197, 730; channel counts that are not multiples of 32; strided inputs).
 * bf16 ("act") inputs are rounded to bf16 on the host first, so both backends see the same
 * numbers and the error measured is the CUDA op's own. Outputs are poisoned (all bits set: NaN)
 * before each op, so an element the op failed to write shows up as NaN; elements an op must not
 * touch (padding columns of strided outputs) are checked to still hold the poison. Each check
 * prints ||gpu - cpu|| / ||cpu|| and its tolerance: bf16 outputs 1e-2 (one bf16 rounding is
 * 2^-9 = 2e-3 per element); float32 outputs computed from the same inputs 1e-4 or tighter.
 *
 * The cases are rows of CASES (op, what the case is for, shapes by name, tolerances), run by one
 * loop; each family of FAMILIES checks some ops of VIL_OPS, and an op of VIL_OPS with no case
 * and no entry in EXEMPT fails a check.
 *   gpu_ops [quick] [OP...]
 * OP: a family name or an op of VIL_OPS (the families that check it); none: every case. quick:
 * the sizes compute-sanitizer can go through in reasonable time. An unknown OP: exit 2. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "testing.h"
#include "vil/backend.h"
#include "vil/common.h"
#include "vil/ops_cpu.h"

#define TOL_BF16 1e-2
#define TOL_F32 1e-4

/* One case: the fields its family reads are set, the others stay 0. */
typedef struct {
    const char *op;           /* a family of FAMILIES */
    const char *name;         /* what the case covers */
    int B, L, E, N, K, C, OC, D, H, P, S, M, t;
    int ld_in, ld_out;        /* linear: rows of in (and dinp), out (and dout) */
    int bias, f32_out;        /* linear: a bias; the head's f32 output (VIL_LINEAR_OUT_F32) */
    int accumulate;           /* linear: dinp += */
    int sweep;                /* linear: N = 1 .. sweep in turn, a bias on odd N */
    int add, scale;           /* add_rmsnorm: res_in + h (else the stream as it is); a drop-path scale */
    int no_pos;               /* tokens: pos and dpos NULL (a model with pos_embed = none) */
    VilRecurrence rec;        /* scan */
    int each_rec;             /* scan: once for every recurrence of the table (vil/rec/list.h), rec aside */
    int dt_ld, xdbl_ld;       /* scan: k's column in x_dbl, x_dbl's row length (>= dt_ld + 2N) */
    int chunk, split;         /* scan: as VilScanFwd's (chunk -1: the sequential kernels) */
    int keep;                 /* scan: the forward keeps its chunk-boundary states for the backward */
    int h0;                   /* scan: the initial state, H0_RANDOM or H0_ZERO, or HT_ONLY (0: none) */
    int causal;               /* conv1d, scan: direction 0 alone (the causal ops), in one call and in
                               * chunks of `chunks` tokens carrying their state (conv: its context) */
    int chunks;
    int init;                 /* state_init: INIT_SIGMA, INIT_FITTED or INIT_PASSING */
    int group, mean_only;     /* state_init (fitted), state_fit: elements per statistic; the mean alone */
    float sigma, drop, keep_f; /* state_init's sigma, drop; state_fit's keep */
    size_t n;                 /* adamw, ema, grad_clip, sgd, lamb: elements */
    float momentum;           /* sgd */
    int nesterov, trust_clip; /* sgd; lamb (lambc) */
    int l2;                   /* adamw: torch.optim.Adam's L2 decay (optimizer adam) */
    int spans;                /* lamb: 0 one tensor (spans NULL), else the tensors the n elements are cut into */
    float decay, max_norm;    /* ema; grad_clip */
    double tol, tol_f32;      /* the tolerance of act outputs; of float32 outputs */
    int only;                 /* 0: always run; FULL: not by quick; QUICK: by quick alone (a FULL case's stand-in) */
} OpCase;
enum { FULL = 1, QUICK = 2 };
/* H0_RANDOM: h0 normal (scale 1), final states checked; H0_ZERO: h0 all zeros, the GPU's outputs
 * bitwise those of h0 = NULL; HT_ONLY: no h0, final states checked */
enum { H0_RANDOM = 1, H0_ZERO, HT_ONLY };
enum { INIT_SIGMA = 1, INIT_FITTED, INIT_PASSING };

static const VilBackend *G;
static VilRng rng;

/* ---- host helpers ---- */
static uint16_t bf_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0; /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                    /* round to nearest even */
    return (uint16_t)(u >> 16);
}
static float bf_round(float f) {
    uint32_t u = (uint32_t)bf_bits(f) << 16;
    float r;
    memcpy(&r, &u, 4);
    return r;
}
static float *rnd(size_t n, float scale) {
    float *p = vil_malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) p[i] = scale * vil_rng_normal(&rng);
    return p;
}
/* random values that are exactly representable in bf16 */
static float *rnd_bf(size_t n, float scale) {
    float *p = rnd(n, scale);
    for (size_t i = 0; i < n; i++) p[i] = bf_round(p[i]);
    return p;
}
static float *copy_f(const float *a, size_t n) {
    float *p = vil_malloc(n * sizeof(float) + 4);
    memcpy(p, a, n * sizeof(float));
    return p;
}
static void *dev_act(const float *h, size_t n) {
    uint16_t *b = vil_malloc(n * 2 + 2);
    for (size_t i = 0; i < n; i++) b[i] = bf_bits(h[i]);
    void *d = G->alloc(G, n * 2);
    G->to_device(G, d, b, n * 2);
    free(b);
    return d;
}
static float *dev_f32(const float *h, size_t n) {
    float *d = G->alloc(G, n * sizeof(float));
    G->to_device(G, d, h, n * sizeof(float));
    return d;
}
static void *dev_poison(size_t bytes) {
    unsigned char *h = vil_malloc(bytes + 1);
    memset(h, 0xff, bytes);
    void *d = G->alloc(G, bytes);
    G->to_device(G, d, h, bytes);
    free(h);
    return d;
}
static float *get_act(const void *d, size_t n) {
    float *h = vil_malloc(n * sizeof(float) + 4);
    G->act_to_host_f32(G, h, d, n);
    return h;
}
static float *get_f32(const void *d, size_t n) {
    float *h = vil_malloc(n * sizeof(float) + 4);
    G->to_host(G, h, d, n * sizeof(float));
    return h;
}
static double rel(const float *a, const float *ref, size_t n) { return rel_l2(a, ref, 1, n, n); }
/* bf16 elements of a strided buffer outside [c0, c1) of each row still hold the poison */
static int untouched(const void *d, size_t rows, size_t ld, size_t c0, size_t c1) {
    uint16_t *h = vil_malloc(rows * ld * 2 + 2);
    G->to_host(G, h, d, rows * ld * 2);
    int bad = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < ld; c++)
            if ((c < c0 || c >= c1) && h[r * ld + c] != 0xffff) bad++;
    free(h);
    return bad;
}

/* ---------------- linear ---------------- */
/* out and dout rows are ldo >= OC apart (x_dbl's padded rows) */
static void linear_one(const OpCase *c) {
    int N = c->N, C = c->C, OC = c->OC, ld = c->ld_in, ldo = c->ld_out, bias = c->bias, f32out = c->f32_out;
    int acc = c->accumulate;
    char nm[128];
    float *in = rnd_bf((size_t)N * ld, 1.0f), *w = rnd_bf((size_t)OC * C, 0.3f);
    float *b = bias ? rnd(OC, 1.0f) : NULL;
    float *out_c = vil_calloc((size_t)N * ldo, sizeof(float));
    linear_forward(&(VilLinearFwd){.out = out_c, .in = in, .w = w, .b = b, .N = N, .C = C, .OC = OC, .ld_in = ld, .ld_out = ldo});
    void *d_in = dev_act(in, (size_t)N * ld), *d_w = dev_act(w, (size_t)OC * C);
    float *d_b = b ? dev_f32(b, OC) : NULL;
    void *d_out = dev_poison((size_t)N * ldo * (f32out ? 4 : 2));
    G->linear_forward(G, &(VilLinearFwd){.out = d_out, .in = d_in, .w = d_w, .b = d_b, .N = N, .C = C, .OC = OC,
                                         .ld_in = ld, .ld_out = ldo, .flags = f32out ? VIL_LINEAR_OUT_F32 : 0});
    float *out_g = f32out ? get_f32(d_out, (size_t)N * ldo) : get_act(d_out, (size_t)N * ldo);
    snprintf(nm, sizeof nm, "linear fwd N=%d C=%d OC=%d ld=%d ldo=%d%s%s", N, C, OC, ld, ldo,
             bias ? " bias" : "", f32out ? " f32" : "");
    /* f32 output from bf16 operands: only the summation order differs */
    T_CLOSE(nm, rel_l2(out_g, out_c, N, OC, ldo), f32out ? c->tol_f32 : c->tol);
    if (ldo > OC && !f32out) T_CHECK(untouched(d_out, N, ldo, 0, OC) == 0, "linear fwd wrote past OC in out");

    /* backward: dout random (f32 for the head: the CUDA op rounds it to bf16 internally) */
    float *dout = f32out ? rnd((size_t)N * ldo, 1.0f) : rnd_bf((size_t)N * ldo, 1.0f);
    for (int n = 0; n < N; n++) /* dout's padding must never be read: make a read show */
        for (int o = OC; o < ldo; o++) dout[(size_t)n * ldo + o] = 1e4f;
    float *dinp_c = acc ? rnd_bf((size_t)N * ld, 1.0f) : vil_calloc((size_t)N * ld, sizeof(float));
    float *dinp0 = copy_f(dinp_c, (size_t)N * ld);
    float *dw_c = rnd((size_t)OC * C, 1.0f), *db_c = rnd(OC, 1.0f);
    float *dw0 = copy_f(dw_c, (size_t)OC * C), *db0 = copy_f(db_c, OC);
    linear_backward(&(VilLinearBwd){.dinp = dinp_c, .dw = dw_c, .db = bias ? db_c : NULL, .dout = dout, .in = in, .w = w,
                                    .N = N, .C = C, .OC = OC, .ld_in = ld, .ld_out = ldo, .accumulate_dinp = acc});
    void *d_dout = f32out ? (void *)dev_f32(dout, (size_t)N * ldo) : dev_act(dout, (size_t)N * ldo);
    void *d_dinp = acc ? dev_act(dinp0, (size_t)N * ld) : dev_poison((size_t)N * ld * 2);
    float *d_dw = dev_f32(dw0, (size_t)OC * C), *d_db = dev_f32(db0, OC);
    G->linear_backward(G, &(VilLinearBwd){.dinp = d_dinp, .dw = d_dw, .db = bias ? d_db : NULL, .dout = d_dout,
                                          .in = d_in, .w = d_w, .N = N, .C = C, .OC = OC, .ld_in = ld,
                                          .ld_out = ldo, .accumulate_dinp = acc,
                                          .flags = f32out ? VIL_LINEAR_OUT_F32 : 0});
    float *dinp_g = get_act(d_dinp, (size_t)N * ld), *dw_g = get_f32(d_dw, (size_t)OC * C);
    float *db_g = get_f32(d_db, OC);
    double tol_g = f32out ? c->tol : c->tol_f32; /* the head's dout is rounded to bf16 */
    snprintf(nm, sizeof nm, "linear bwd dinp N=%d C=%d OC=%d ld=%d%s", N, C, OC, ld, acc ? " +=" : "");
    T_CLOSE(nm, rel_l2(dinp_g, dinp_c, N, C, ld), c->tol);
    if (!acc && ld > C) T_CHECK(untouched(d_dinp, N, ld, 0, C) == 0, "linear bwd wrote past C in dinp");
    /* dw accumulates onto random values: compare the increment */
    for (size_t i = 0; i < (size_t)OC * C; i++) dw_g[i] -= dw0[i], dw_c[i] -= dw0[i];
    snprintf(nm, sizeof nm, "linear bwd dw   N=%d C=%d OC=%d", N, C, OC);
    T_CLOSE(nm, rel(dw_g, dw_c, (size_t)OC * C), tol_g);
    if (bias) {
        for (int i = 0; i < OC; i++) db_g[i] -= db0[i], db_c[i] -= db0[i];
        snprintf(nm, sizeof nm, "linear bwd db   N=%d OC=%d", N, OC);
        T_CLOSE(nm, rel(db_g, db_c, OC), f32out ? 1e-6 : c->tol_f32); /* f32 dout: float32 sums alone */
    }
    G->free(G, d_in), G->free(G, d_w), G->free(G, d_out), G->free(G, d_dout), G->free(G, d_dinp), G->free(G, d_dw), G->free(G, d_db);
    if (d_b) G->free(G, d_b);
    free(in), free(w), free(b), free(out_c), free(out_g), free(dout), free(dinp_c), free(dinp0);
    free(dw_c), free(db_c), free(dw0), free(db0), free(dinp_g), free(dw_g), free(db_g);
}
/* a sweep: N = 1 .. sweep in turn, a bias on odd N */
static void test_linear(const OpCase *c) {
    if (!c->sweep) {
        linear_one(c);
        return;
    }
    for (int n = 1; n <= c->sweep; n++) {
        OpCase one = *c;
        one.N = n, one.bias = n & 1;
        linear_one(&one);
    }
}

/* ---------------- add + rmsnorm ---------------- */
static void test_norm(const OpCase *c) {
    int B = c->B, L = c->L, D = c->D, with_res = c->add, with_scale = c->scale;
    char nm[128];
    size_t n = (size_t)B * L * D;
    float *res_in = rnd(n, 1.0f), *h = rnd_bf(n, 1.0f), *w = rnd(D, 1.0f);
    float *scale = with_scale ? rnd(B, 1.0f) : NULL;
    float *res_c = with_res ? vil_calloc(n, sizeof(float)) : copy_f(res_in, n);
    float *normed_c = vil_malloc(n * sizeof(float)), *rstd_c = vil_malloc((size_t)B * L * sizeof(float));
    add_rmsnorm_forward(&(VilNormFwd){.res_out = res_c, .normed = normed_c, .rstd = rstd_c,
                                       .res_in = with_res ? res_in : NULL, .h = with_res ? h : NULL,
                                       .scale = scale, .w = w, .B = B, .L = L, .D = D});
    float *d_res_in = dev_f32(res_in, n), *d_w = dev_f32(w, D), *d_scale = scale ? dev_f32(scale, B) : NULL;
    void *d_h = dev_act(h, n);
    float *d_res = with_res ? dev_poison(n * 4) : dev_f32(res_in, n);
    void *d_normed = dev_poison(n * 2);
    float *d_rstd = dev_poison((size_t)B * L * 4);
    G->add_rmsnorm_forward(G, &(VilNormFwd){.res_out = d_res, .normed = d_normed, .rstd = d_rstd,
                                             .res_in = with_res ? d_res_in : NULL, .h = with_res ? d_h : NULL,
                                             .scale = d_scale, .w = d_w, .B = B, .L = L, .D = D});
    float *res_g = get_f32(d_res, n), *normed_g = get_act(d_normed, n);
    float *rstd_g = get_f32(d_rstd, (size_t)B * L);
    snprintf(nm, sizeof nm, "add_rmsnorm fwd res  B=%d L=%d D=%d%s%s", B, L, D, with_res ? "" : " (no add)",
             with_scale ? " scale" : "");
    T_CLOSE(nm, rel(res_g, res_c, n), 1e-6); /* one add per element */
    snprintf(nm, sizeof nm, "add_rmsnorm fwd normed B=%d L=%d D=%d", B, L, D);
    T_CLOSE(nm, rel(normed_g, normed_c, n), c->tol);
    snprintf(nm, sizeof nm, "add_rmsnorm fwd rstd B=%d L=%d D=%d", B, L, D);
    T_CLOSE(nm, rel(rstd_g, rstd_c, (size_t)B * L), c->tol_f32);

    float *dn = rnd_bf(n, 1.0f), *dres_c = rnd(n, 1.0f), *dw_c = rnd(D, 1.0f);
    float *dres0 = copy_f(dres_c, n), *dw0 = copy_f(dw_c, D), *dh_c = vil_malloc(n * sizeof(float));
    add_rmsnorm_backward(&(VilNormBwd){.dres = dres_c, .dh = dh_c, .dw = dw_c, .dnormed = dn, .res_out = res_c,
                                       .rstd = rstd_c, .w = w, .scale = scale, .B = B, .L = L, .D = D});
    void *d_dn = dev_act(dn, n), *d_dh = dev_poison(n * 2);
    float *d_dres = dev_f32(dres0, n), *d_dw = dev_f32(dw0, D);
    G->add_rmsnorm_backward(G, &(VilNormBwd){.dres = d_dres, .dh = d_dh, .dw = d_dw, .dnormed = d_dn, .res_out = d_res,
                                             .rstd = d_rstd, .w = d_w, .scale = d_scale, .B = B, .L = L, .D = D});
    float *dres_g = get_f32(d_dres, n), *dh_g = get_act(d_dh, n), *dw_g = get_f32(d_dw, D);
    for (int i = 0; i < D; i++) dw_g[i] -= dw0[i], dw_c[i] -= dw0[i];
    snprintf(nm, sizeof nm, "add_rmsnorm bwd dres B=%d L=%d D=%d", B, L, D);
    T_CLOSE(nm, rel(dres_g, dres_c, n), c->tol_f32);
    snprintf(nm, sizeof nm, "add_rmsnorm bwd dh   B=%d L=%d D=%d", B, L, D);
    T_CLOSE(nm, rel(dh_g, dh_c, n), c->tol);
    snprintf(nm, sizeof nm, "add_rmsnorm bwd dw   B=%d L=%d D=%d", B, L, D);
    T_CLOSE(nm, rel(dw_g, dw_c, D), c->tol_f32);
    G->free(G, d_res_in), G->free(G, d_w), G->free(G, d_h), G->free(G, d_res), G->free(G, d_normed), G->free(G, d_rstd);
    G->free(G, d_dn), G->free(G, d_dh), G->free(G, d_dres), G->free(G, d_dw);
    if (d_scale) G->free(G, d_scale);
    free(res_in), free(h), free(w), free(scale), free(res_c), free(normed_c), free(rstd_c);
    free(res_g), free(normed_g), free(rstd_g), free(dn), free(dres_c), free(dw_c), free(dres0);
    free(dw0), free(dh_c), free(dres_g), free(dh_g), free(dw_g);
}

/* ---------------- conv1d + SiLU ---------------- */
/* both directions' forward and backward in one pass each (the mixer's path): dx overwritten with the sum, each
 * direction's dw, db accumulated, the z half of xz untouched */
static void test_conv_bidir(const OpCase *c) {
    int B = c->B, L = c->L, E = c->E, K = c->K;
    char nm[128];
    int ldx = 2 * E;
    size_t nx = (size_t)B * L * ldx, nu = (size_t)B * L * E;
    float *x = rnd_bf(nx, 1.0f), *w[2], *b[2], *du[2], *dw_c[2], *db_c[2], *dw0[2], *db0[2];
    float *d_w[2], *d_b[2], *d_dw[2], *d_db[2];
    void *d_du[2];
    for (int j = 0; j < 2; j++) {
        w[j] = rnd((size_t)E * K, 0.5f), b[j] = rnd(E, 0.5f), du[j] = rnd_bf(nu, 1.0f);
        dw_c[j] = rnd((size_t)E * K, 1.0f), db_c[j] = rnd(E, 1.0f);
        dw0[j] = copy_f(dw_c[j], (size_t)E * K), db0[j] = copy_f(db_c[j], E);
        d_w[j] = dev_f32(w[j], (size_t)E * K), d_b[j] = dev_f32(b[j], E), d_du[j] = dev_act(du[j], nu);
        d_dw[j] = dev_f32(dw0[j], (size_t)E * K), d_db[j] = dev_f32(db0[j], E);
    }
    float *dx_c = vil_calloc(nx, sizeof(float));
    const float *cdu[2] = {du[0], du[1]}, *cw[2] = {w[0], w[1]}, *cb[2] = {b[0], b[1]};
    /* forward, both directions in one pass */
    {
        float *uc[2] = {vil_malloc(nu * sizeof(float)), vil_malloc(nu * sizeof(float))};
        conv1d_silu_bidir_forward(&(VilConvBidirFwd){.u = {uc[0], uc[1]}, .x = x, .w = {cw[0], cw[1]}, .b = {cb[0], cb[1]},
                                                 .B = B, .L = L, .E = E, .K = K, .ldx = ldx});
        void *dxx = dev_act(x, nx), *du_g[2] = {dev_poison(nu * 2), dev_poison(nu * 2)};
        const float *gw[2] = {d_w[0], d_w[1]}, *gb[2] = {d_b[0], d_b[1]};
        G->conv1d_silu_bidir_forward(G, &(VilConvBidirFwd){.u = {du_g[0], du_g[1]}, .x = dxx, .w = {gw[0], gw[1]},
                                                       .b = {gb[0], gb[1]}, .B = B, .L = L, .E = E, .K = K, .ldx = ldx});
        for (int j = 0; j < 2; j++) {
            float *ug = get_act(du_g[j], nu);
            snprintf(nm, sizeof nm, "conv1d+silu bidir fwd u[%d] B=%d L=%d E=%d K=%d", j, B, L, E, K);
            T_CLOSE(nm, rel(ug, uc[j], nu), c->tol);
            free(ug), free(uc[j]), G->free(G, du_g[j]);
        }
        G->free(G, dxx);
    }
    conv1d_silu_bidir_backward(&(VilConvBidirBwd){.dx = dx_c, .dw = {dw_c[0], dw_c[1]}, .db = {db_c[0], db_c[1]},
                                                  .du = {cdu[0], cdu[1]}, .x = x, .w = {cw[0], cw[1]}, .b = {cb[0], cb[1]},
                                                  .B = B, .L = L, .E = E, .K = K, .ldx = ldx});
    void *d_x = dev_act(x, nx), *d_dx = dev_poison(nx * 2);
    const void *gdu[2] = {d_du[0], d_du[1]};
    const float *gw[2] = {d_w[0], d_w[1]}, *gb[2] = {d_b[0], d_b[1]};
    G->conv1d_silu_bidir_backward(G, &(VilConvBidirBwd){.dx = d_dx, .dw = {d_dw[0], d_dw[1]}, .db = {d_db[0], d_db[1]},
                                                        .du = {gdu[0], gdu[1]}, .x = d_x, .w = {gw[0], gw[1]},
                                                        .b = {gb[0], gb[1]}, .B = B, .L = L, .E = E, .K = K, .ldx = ldx});
    float *dx_g = get_act(d_dx, nx);
    snprintf(nm, sizeof nm, "conv1d+silu bidir bwd dx B=%d L=%d E=%d K=%d", B, L, E, K);
    T_CLOSE(nm, rel_l2(dx_g, dx_c, (size_t)B * L, E, ldx), c->tol);
    T_CHECK(untouched(d_dx, (size_t)B * L, ldx, 0, E) == 0, "conv1d bidir bwd wrote outside x's columns");
    for (int j = 0; j < 2; j++) {
        float *dw_g = get_f32(d_dw[j], (size_t)E * K), *db_g = get_f32(d_db[j], E);
        for (int i = 0; i < E * K; i++) dw_g[i] -= dw0[j][i], dw_c[j][i] -= dw0[j][i];
        for (int i = 0; i < E; i++) db_g[i] -= db0[j][i], db_c[j][i] -= db0[j][i];
        snprintf(nm, sizeof nm, "conv1d+silu bidir bwd dw[%d] B=%d L=%d E=%d K=%d", j, B, L, E, K);
        T_CLOSE(nm, rel(dw_g, dw_c[j], (size_t)E * K), c->tol_f32);
        snprintf(nm, sizeof nm, "conv1d+silu bidir bwd db[%d] B=%d L=%d E=%d", j, B, L, E);
        T_CLOSE(nm, rel(db_g, db_c[j], E), c->tol_f32);
        free(dw_g), free(db_g);
        G->free(G, d_w[j]), G->free(G, d_b[j]), G->free(G, d_du[j]), G->free(G, d_dw[j]), G->free(G, d_db[j]);
        free(w[j]), free(b[j]), free(du[j]), free(dw_c[j]), free(db_c[j]), free(dw0[j]), free(db0[j]);
    }
    G->free(G, d_x), G->free(G, d_dx);
    free(x), free(dx_c), free(dx_g);
}

/* ---------------- conv1d + SiLU, one direction (causal) ---------------- */
/* rows [t0, t0 + n) of each sample of a (B, L, ld) host tensor, as a (B, n, ld) copy */
static float *take_rows(const float *a, int B, int L, size_t ld, int t0, int n) {
    float *p = vil_malloc((size_t)B * n * ld * sizeof(float) + 4);
    for (int b = 0; b < B; b++) memcpy(p + (size_t)b * n * ld, a + ((size_t)b * L + t0) * ld, (size_t)n * ld * sizeof(float));
    return p;
}
/* The causal conv of a chunk with a carried context (B, K-1, E) against the CPU op: u, ctx_out
 * (bit for bit: a copy of bf16 inputs), dx (x's columns alone), dw, db; then the stream in chunks
 * of c->chunks tokens (the last one shorter), each from the context the chunk before handed out
 * (in place: ctx_out = ctx), gives the one call's u bit for bit (the same bf16 inputs, the same
 * arithmetic). */
static void test_conv_causal(const OpCase *c) {
    int B = c->B, L = c->L, E = c->E, K = c->K, C = K - 1, ldx = 2 * E;
    char nm[160];
    /* the context's device buffers hold a row even at K = 1, where none is read */
    size_t nx = (size_t)B * L * ldx, nu = (size_t)B * L * E, nc = (size_t)B * C * E, ncb = nc ? nc : (size_t)E;
    float *x = rnd_bf(nx, 1.0f), *ctx = rnd_bf(ncb, 1.0f), *w = rnd((size_t)E * K, 0.5f), *b = rnd(E, 0.5f);
    float *du = rnd_bf(nu, 1.0f), *dw_c = rnd((size_t)E * K, 1.0f), *db_c = rnd(E, 1.0f);
    float *dw0 = copy_f(dw_c, (size_t)E * K), *db0 = copy_f(db_c, E);
    float *u_c = vil_malloc(nu * sizeof(float)), *co_c = vil_malloc(nc * sizeof(float) + 4);
    conv1d_silu_bidir_forward(&(VilConvBidirFwd){.u = {u_c}, .x = x, .w = {w}, .b = {b}, .B = B, .L = L, .E = E,
                                                 .K = K, .ldx = ldx, .causal = 1, .ctx = ctx, .ctx_out = co_c});
    void *d_x = dev_act(x, nx), *d_ctx = dev_act(ctx, ncb), *d_u = dev_poison(nu * 2), *d_co = dev_poison(ncb * 2);
    float *d_w = dev_f32(w, (size_t)E * K), *d_b = dev_f32(b, E);
    G->conv1d_silu_bidir_forward(G, &(VilConvBidirFwd){.u = {d_u}, .x = d_x, .w = {d_w}, .b = {d_b}, .B = B, .L = L,
                                                       .E = E, .K = K, .ldx = ldx, .causal = 1, .ctx = d_ctx,
                                                       .ctx_out = d_co});
    float *u_g = get_act(d_u, nu), *co_g = get_act(d_co, nc);
    snprintf(nm, sizeof nm, "conv1d+silu causal fwd u (ctx) B=%d L=%d E=%d K=%d", B, L, E, K);
    T_CLOSE(nm, rel(u_g, u_c, nu), c->tol);
    T_CHECK(!memcmp(co_g, co_c, nc * sizeof(float)), "conv1d causal L=%d K=%d: ctx_out is not the last K-1 inputs", L, K);
    /* backward */
    float *dx_c = vil_calloc(nx, sizeof(float));
    conv1d_silu_bidir_backward(&(VilConvBidirBwd){.dx = dx_c, .dw = {dw_c}, .db = {db_c}, .du = {du}, .x = x,
                                                  .w = {w}, .b = {b}, .B = B, .L = L, .E = E, .K = K, .ldx = ldx,
                                                  .causal = 1, .ctx = ctx});
    void *d_du = dev_act(du, nu), *d_dx = dev_poison(nx * 2);
    float *d_dw = dev_f32(dw0, (size_t)E * K), *d_db = dev_f32(db0, E);
    G->conv1d_silu_bidir_backward(G, &(VilConvBidirBwd){.dx = d_dx, .dw = {d_dw}, .db = {d_db}, .du = {d_du},
                                                        .x = d_x, .w = {d_w}, .b = {d_b}, .B = B, .L = L, .E = E,
                                                        .K = K, .ldx = ldx, .causal = 1, .ctx = d_ctx});
    float *dx_g = get_act(d_dx, nx), *dw_g = get_f32(d_dw, (size_t)E * K), *db_g = get_f32(d_db, E);
    snprintf(nm, sizeof nm, "conv1d+silu causal bwd dx B=%d L=%d E=%d K=%d", B, L, E, K);
    T_CLOSE(nm, rel_l2(dx_g, dx_c, (size_t)B * L, E, ldx), c->tol);
    T_CHECK(untouched(d_dx, (size_t)B * L, ldx, 0, E) == 0, "conv1d causal bwd wrote outside x's columns");
    for (int i = 0; i < E * K; i++) dw_g[i] -= dw0[i], dw_c[i] -= dw0[i];
    for (int i = 0; i < E; i++) db_g[i] -= db0[i], db_c[i] -= db0[i];
    snprintf(nm, sizeof nm, "conv1d+silu causal bwd dw (ctx) B=%d L=%d E=%d K=%d", B, L, E, K);
    T_CLOSE(nm, rel(dw_g, dw_c, (size_t)E * K), c->tol_f32);
    snprintf(nm, sizeof nm, "conv1d+silu causal bwd db B=%d L=%d E=%d K=%d", B, L, E, K);
    T_CLOSE(nm, rel(db_g, db_c, E), c->tol_f32);
    /* the stream in chunks, the context carried in place on the device */
    int same = 1;
    void *d_carry = dev_act(ctx, ncb);
    for (int t0 = 0; t0 < L; t0 += c->chunks) {
        int n = L - t0 < c->chunks ? L - t0 : c->chunks;
        float *xk = take_rows(x, B, L, ldx, t0, n);
        void *d_xk = dev_act(xk, (size_t)B * n * ldx), *d_uk = dev_poison((size_t)B * n * E * 2);
        G->conv1d_silu_bidir_forward(G, &(VilConvBidirFwd){.u = {d_uk}, .x = d_xk, .w = {d_w}, .b = {d_b}, .B = B,
                                                           .L = n, .E = E, .K = K, .ldx = ldx, .causal = 1,
                                                           .ctx = d_carry, .ctx_out = d_carry});
        float *uk = get_act(d_uk, (size_t)B * n * E);
        for (int bb = 0; bb < B; bb++)
            same &= !memcmp(uk + (size_t)bb * n * E, u_g + ((size_t)bb * L + t0) * E, (size_t)n * E * sizeof(float));
        G->free(G, d_xk), G->free(G, d_uk);
        free(xk), free(uk);
    }
    T_CHECK(same, "conv1d causal L=%d K=%d: chunks of %d tokens, the context carried, differ from one call", L, K,
            c->chunks);
    G->free(G, d_carry), G->free(G, d_x), G->free(G, d_ctx), G->free(G, d_u), G->free(G, d_co), G->free(G, d_w);
    G->free(G, d_b), G->free(G, d_du), G->free(G, d_dx), G->free(G, d_dw), G->free(G, d_db);
    free(x), free(ctx), free(w), free(b), free(du), free(dw_c), free(db_c), free(dw0), free(db0), free(u_c), free(co_c);
    free(u_g), free(co_g), free(dx_c), free(dx_g), free(dw_g), free(db_g);
}
static void test_conv_cases(const OpCase *c) {
    if (c->causal) test_conv_causal(c);
    else test_conv_bidir(c);
}

/* ---------------- the bidirectional scan ---------------- */
/* x_dbl rows are xdbl_ld >= dt_ld + 2N apart (k at column dt_ld) (the model pads them to 8); chunk:
 * the GPU scan's chunks of tokens (-1 the sequential kernels, 0 chosen by shape); split: the
 * forward's threads per channel (0 chosen by shape, 1 the pair kernel, 4 the quad kernel); keep:
 * the forward keeps its chunk-boundary states for the backward (VilScanFwd.states), as the model
 * does in training (the shape must be one where the backend keeps them); h0: both passes start
 * from a given state (VilScanFwd/Bwd.h0), the forward also gives the final states (hT) */
static void test_scan(const OpCase *c) {
    int B = c->B, L = c->L, E = c->E, N = c->N, dt_ld = c->dt_ld, xdbl_ld = c->xdbl_ld, chunk = c->chunk;
    int split = c->split, keep = c->keep;
    VilRecurrence rec = c->rec;
    int own = vil_recurrences[rec].param.key != NULL; /* A_log */
    char nm[160];
    const char *kind = vil_recurrences[rec].id, *const *kq = vil_recurrences[rec].kq;
    int ldz = 2 * E;
    size_t ne = (size_t)B * L * E, nw = (size_t)B * L * xdbl_ld, nz = (size_t)B * L * ldz;
    float *u[2], *dl[2], *xd[2], *Dk[2], *Al[2];
    void *d_u[2], *d_dl[2], *d_xd[2];
    float *d_Dk[2], *d_Al[2];
    for (int j = 0; j < 2; j++) {
        u[j] = rnd_bf(ne, 1.0f);
        dl[j] = rnd_bf(ne, 1.0f);
        xd[j] = rnd_bf(nw, 0.5f);
        Dk[j] = rnd(E, 1.0f);
        Al[j] = vil_malloc((size_t)E * N * sizeof(float));
        for (int e = 0; e < E; e++)
            for (int n = 0; n < N; n++) Al[j][(size_t)e * N + n] = logf((float)(n + 1)) + 0.1f * vil_rng_normal(&rng);
        d_u[j] = dev_act(u[j], ne), d_dl[j] = dev_act(dl[j], ne), d_xd[j] = dev_act(xd[j], nw);
        d_Dk[j] = dev_f32(Dk[j], E), d_Al[j] = dev_f32(Al[j], (size_t)E * N);
    }
    float *xz = rnd_bf(nz, 1.0f); /* z is the second half of xz */
    void *d_xz = dev_act(xz, nz);
    const float *cu[2] = {u[0], u[1]}, *cdl[2] = {dl[0], dl[1]}, *cxd[2] = {xd[0], xd[1]};
    const float *cD[2] = {Dk[0], Dk[1]}, *cA[2] = {Al[0], Al[1]};
    const void *gu[2] = {d_u[0], d_u[1]}, *gdl[2] = {d_dl[0], d_dl[1]}, *gxd[2] = {d_xd[0], d_xd[1]};
    const float *gD[2] = {d_Dk[0], d_Dk[1]}, *gA[2] = {d_Al[0], d_Al[1]};
    /* the initial state (B, 2, N, E) and the final states */
    size_t nst = (size_t)B * 2 * N * E;
    float *h0 = c->h0 == H0_RANDOM ? rnd(nst, 1.0f) : c->h0 == H0_ZERO ? vil_calloc(nst, sizeof(float)) : NULL;
    float *hT_c = c->h0 == H0_RANDOM || c->h0 == HT_ONLY ? vil_malloc(nst * sizeof(float)) : NULL;
    float *d_h0 = h0 ? dev_f32(h0, nst) : NULL, *d_hT = hT_c ? dev_poison(nst * sizeof(float)) : NULL;
    const char *with_h0 = c->h0 == H0_RANDOM ? " from h0" : c->h0 == H0_ZERO ? " from h0 = 0" : "";
    float *out_c = vil_malloc(ne * sizeof(float));
    scan_bidir_forward(&(VilScanFwd){.rec = rec, .out = out_c, .u = {cu[0], cu[1]}, .delta = {cdl[0], cdl[1]},
                                     .xdbl = {cxd[0], cxd[1]}, .z = xz + E, .D = {cD[0], cD[1]},
                                     .A_log = {own ? cA[0] : NULL, own ? cA[1] : NULL}, .B = B, .L = L, .E = E,
                                     .N = N, .dt_ld = dt_ld, .xdbl_ld = xdbl_ld, .ldz = ldz, .h0 = h0, .hT = hT_c});
    void *d_out = dev_poison(ne * 2);
    VilScanFwd gfwd = {.rec = rec, .out = d_out, .u = {gu[0], gu[1]}, .delta = {gdl[0], gdl[1]},
                       .xdbl = {gxd[0], gxd[1]}, .z = (char *)d_xz + (size_t)E * 2,
                       .D = {gD[0], gD[1]}, .A_log = {own ? gA[0] : NULL, own ? gA[1] : NULL},
                       .B = B, .L = L, .E = E, .N = N, .dt_ld = dt_ld, .xdbl_ld = xdbl_ld, .ldz = ldz,
                       .chunk = chunk, .split = split, .h0 = d_h0, .hT = d_hT};
    size_t sbytes = keep && G->scan_states_bytes ? G->scan_states_bytes(G, &gfwd) : 0;
    if (keep) T_CHECK(sbytes > 0, "scan %s B=%d L=%d E=%d chunk %d: the backend keeps no states here", kind, B, L, E, chunk);
    gfwd.states = sbytes ? dev_poison(sbytes) : NULL;
    G->scan_bidir_forward(G, &gfwd);
    float *out_g = get_act(d_out, ne);
    snprintf(nm, sizeof nm, "scan %s fwd B=%d L=%d E=%d N=%d chunk %d split %d%s%s", kind, B, L, E, N, chunk, split,
             keep ? " keeping states" : "", with_h0);
    T_CLOSE(nm, rel(out_g, out_c, ne), c->tol);
    if (hT_c) { /* float32 states from the same inputs: the order of float operations alone */
        float *hT_g = get_f32(d_hT, nst);
        snprintf(nm, sizeof nm, "scan %s fwd final states B=%d L=%d E=%d N=%d chunk %d split %d", kind, B, L, E, N,
                 chunk, split);
        T_CLOSE(nm, rel(hT_g, hT_c, nst), c->tol_f32);
        free(hT_g);
    }
    if (c->h0 == H0_ZERO) { /* h0 = 0 given: bitwise the zero start */
        uint16_t *o1 = vil_malloc(ne * 2), *o2 = vil_malloc(ne * 2);
        G->to_host(G, o1, d_out, ne * 2);
        VilScanFwd g0 = gfwd;
        g0.h0 = NULL;
        G->scan_bidir_forward(G, &g0);
        G->to_host(G, o2, d_out, ne * 2);
        T_CHECK(memcmp(o1, o2, ne * 2) == 0, "scan %s fwd chunk %d split %d: h0 = 0 differs from h0 = NULL", kind,
                chunk, split);
        free(o1), free(o2);
    }

    /* backward */
    float *dout = rnd_bf(ne, 1.0f);
    float *du_c[2], *ddl_c[2], *dxd_c[2], *dD_c[2], *dA_c[2], *dD0[2], *dA0[2], *db_c[2], *db0[2];
    void *g_du[2], *g_ddl[2], *g_dxd[2];
    float *g_dD[2], *g_dA[2], *g_db[2];
    for (int j = 0; j < 2; j++) {
        du_c[j] = vil_malloc(ne * sizeof(float));
        ddl_c[j] = vil_malloc(ne * sizeof(float));
        dxd_c[j] = vil_calloc(nw, sizeof(float));
        dD_c[j] = rnd(E, 1.0f), dA_c[j] = rnd((size_t)E * N, 1.0f);
        dD0[j] = copy_f(dD_c[j], E), dA0[j] = copy_f(dA_c[j], (size_t)E * N);
        db_c[j] = rnd(E, 1.0f), db0[j] = copy_f(db_c[j], E);
        g_db[j] = dev_f32(db0[j], E);
        g_du[j] = dev_poison(ne * 2), g_ddl[j] = dev_poison(ne * 2), g_dxd[j] = dev_poison(nw * 2);
        g_dD[j] = dev_f32(dD0[j], E), g_dA[j] = dev_f32(dA0[j], (size_t)E * N);
    }
    float *dz_c = vil_calloc(nz, sizeof(float));
    scan_bidir_backward(&(VilScanBwd){.rec = rec, .du = {du_c[0], du_c[1]}, .ddelta = {ddl_c[0], ddl_c[1]},
                                       .dxdbl = {dxd_c[0], dxd_c[1]}, .dz = dz_c + E, .dD = {dD_c[0], dD_c[1]},
                                       .dA_log = {own ? dA_c[0] : NULL, own ? dA_c[1] : NULL},
                                       .ddelta_sum = {db_c[0], db_c[1]}, .dout = dout, .u = {cu[0], cu[1]},
                                       .delta = {cdl[0], cdl[1]}, .xdbl = {cxd[0], cxd[1]}, .z = xz + E,
                                       .D = {cD[0], cD[1]}, .A_log = {own ? cA[0] : NULL, own ? cA[1] : NULL},
                                       .B = B, .L = L, .E = E, .N = N, .dt_ld = dt_ld, .xdbl_ld = xdbl_ld, .ldz = ldz,
                                       .h0 = h0});
    /* the gated output made again (VilScanBwd.out), into rows as dz's (ldz apart) */
    const size_t ldo = ldz;
    void *d_dout = dev_act(dout, ne), *d_dz = dev_poison(nz * 2), *d_oa = dev_poison(nz * 2);
    VilScanBwd gbwd = {.rec = rec, .du = {g_du[0], g_du[1]}, .ddelta = {g_ddl[0], g_ddl[1]},
                       .dxdbl = {g_dxd[0], g_dxd[1]}, .dz = (char *)d_dz + (size_t)E * 2,
                       .dD = {g_dD[0], g_dD[1]}, .dA_log = {own ? g_dA[0] : NULL, own ? g_dA[1] : NULL},
                       .ddelta_sum = {g_db[0], g_db[1]}, .dout = d_dout, .u = {gu[0], gu[1]},
                       .delta = {gdl[0], gdl[1]}, .xdbl = {gxd[0], gxd[1]}, .z = (char *)d_xz + (size_t)E * 2,
                       .D = {gD[0], gD[1]}, .A_log = {own ? gA[0] : NULL, own ? gA[1] : NULL},
                       .B = B, .L = L, .E = E, .N = N, .dt_ld = dt_ld, .xdbl_ld = xdbl_ld, .ldz = ldz, .chunk = chunk,
                       .states = gfwd.states, .h0 = d_h0, .out = d_oa};
    G->scan_bidir_backward(G, &gbwd);
    for (int j = 0; j < 2; j++) {
        float *du_g = get_act(g_du[j], ne), *ddl_g = get_act(g_ddl[j], ne), *dxd_g = get_act(g_dxd[j], nw);
        float *dD_g = get_f32(g_dD[j], E), *dA_g = get_f32(g_dA[j], (size_t)E * N);
        snprintf(nm, sizeof nm, "scan %s bwd du[%d] B=%d L=%d E=%d N=%d chunk %d%s%s", kind, j, B, L, E, N, chunk,
                 keep ? " from kept states" : "", with_h0);
        T_CLOSE(nm, rel(du_g, du_c[j], ne), c->tol);
        snprintf(nm, sizeof nm, "scan %s bwd ddelta[%d] B=%d L=%d E=%d", kind, j, B, L, E);
        T_CLOSE(nm, rel(ddl_g, ddl_c[j], ne), c->tol);
        snprintf(nm, sizeof nm, "scan %s bwd d%s[%d] B=%d L=%d E=%d", kind, kq[0], j, B, L, E);
        T_CLOSE(nm, rel_l2(dxd_g + dt_ld, dxd_c[j] + dt_ld, (size_t)B * L, N, xdbl_ld), c->tol);
        snprintf(nm, sizeof nm, "scan %s bwd d%s[%d] B=%d L=%d E=%d", kind, kq[1], j, B, L, E);
        T_CLOSE(nm, rel_l2(dxd_g + dt_ld + N, dxd_c[j] + dt_ld + N, (size_t)B * L, N, xdbl_ld), c->tol);
        T_CHECK(untouched(g_dxd[j], (size_t)B * L, xdbl_ld, dt_ld, dt_ld + 2 * N) == 0, "scan bwd wrote into the dt_low or padding columns");
        for (int e = 0; e < E; e++) dD_g[e] -= dD0[j][e], dD_c[j][e] -= dD0[j][e];
        snprintf(nm, sizeof nm, "scan %s bwd dD[%d] B=%d L=%d E=%d", kind, j, B, L, E);
        T_CLOSE(nm, rel(dD_g, dD_c[j], E), c->tol_f32);
        /* dt_proj's bias gradient, summed by the scan (the GPU sums its fp32 ddelta before the
         * bf16 rounding of the stored one) */
        float *db_g = get_f32(g_db[j], E);
        for (int e = 0; e < E; e++) db_g[e] -= db0[j][e], db_c[j][e] -= db0[j][e];
        snprintf(nm, sizeof nm, "scan %s bwd sum ddelta[%d] B=%d L=%d E=%d", kind, j, B, L, E);
        T_CLOSE(nm, rel(db_g, db_c[j], E), c->tol);
        free(db_g);
        if (own) {
            for (size_t i = 0; i < (size_t)E * N; i++) dA_g[i] -= dA0[j][i], dA_c[j][i] -= dA0[j][i];
            snprintf(nm, sizeof nm, "scan %s bwd dA_log[%d] B=%d L=%d E=%d", kind, j, B, L, E);
            T_CLOSE(nm, rel(dA_g, dA_c[j], (size_t)E * N), 1e-3); /* sums over every (token, state) */
        }
        free(du_g), free(ddl_g), free(dxd_g), free(dD_g), free(dA_g);
    }
    float *dz_g = get_act(d_dz, nz);
    snprintf(nm, sizeof nm, "scan %s bwd dz B=%d L=%d E=%d", kind, B, L, E);
    T_CLOSE(nm, rel_l2(dz_g + E, dz_c + E, (size_t)B * L, E, ldz), c->tol);
    T_CHECK(untouched(d_dz, (size_t)B * L, ldz, E, ldz) == 0, "scan bwd wrote outside dz's columns");
    float *oa_g = get_act(d_oa, (size_t)B * L * ldo);
    snprintf(nm, sizeof nm, "scan %s bwd: the forward's out again B=%d L=%d E=%d%s", kind, B, L, E, with_h0);
    for (size_t r = 0; r < (size_t)B * L; r++) /* the GPU's rows packed to E apart */
        memmove(oa_g + r * E, oa_g + r * ldo, (size_t)E * sizeof(float));
    T_CLOSE(nm, rel(oa_g, out_c, ne), c->tol);
    T_CHECK(untouched(d_oa, (size_t)B * L, ldo, 0, E) == 0, "scan bwd wrote past the E columns of out's rows");
    free(oa_g);

    /* determinism: a second backward gives the same bits */
    uint16_t *h1 = vil_malloc(nw * 2), *h2 = vil_malloc(nw * 2);
    G->to_host(G, h1, g_dxd[0], nw * 2);
    G->scan_bidir_backward(G, &gbwd);
    G->to_host(G, h2, g_dxd[0], nw * 2);
    T_CHECK(memcmp(h1, h2, nw * 2) == 0, "scan %s bwd: dk/dq differ between two identical runs", kind);
    if (c->h0 == H0_ZERO) { /* h0 = 0 given: bitwise the zero start (du, dk|dq; dD accumulates) */
        uint16_t *u1 = vil_malloc(ne * 2), *u2 = vil_malloc(ne * 2);
        G->to_host(G, u1, g_du[1], ne * 2);
        VilScanBwd g0 = gbwd;
        g0.h0 = NULL;
        G->scan_bidir_backward(G, &g0);
        G->to_host(G, u2, g_du[1], ne * 2);
        G->to_host(G, h2, g_dxd[0], nw * 2);
        T_CHECK(memcmp(u1, u2, ne * 2) == 0 && memcmp(h1, h2, nw * 2) == 0,
                "scan %s bwd chunk %d: h0 = 0 differs from h0 = NULL", kind, chunk);
        free(u1), free(u2);
    }
    free(h1), free(h2);

    for (int j = 0; j < 2; j++) {
        G->free(G, d_u[j]), G->free(G, d_dl[j]), G->free(G, d_xd[j]), G->free(G, d_Dk[j]), G->free(G, d_Al[j]);
        G->free(G, g_du[j]), G->free(G, g_ddl[j]), G->free(G, g_dxd[j]), G->free(G, g_dD[j]), G->free(G, g_dA[j]);
        free(u[j]), free(dl[j]), free(xd[j]), free(Dk[j]), free(Al[j]), free(du_c[j]), free(ddl_c[j]);
        free(dxd_c[j]), free(dD_c[j]), free(dA_c[j]), free(dD0[j]), free(dA0[j]);
        G->free(G, g_db[j]), free(db_c[j]), free(db0[j]);
    }
    G->free(G, d_xz), G->free(G, d_out), G->free(G, d_dout), G->free(G, d_dz), G->free(G, d_oa);
    if (gfwd.states) G->free(G, gfwd.states);
    if (d_h0) G->free(G, d_h0);
    if (d_hT) G->free(G, d_hT);
    free(xz), free(out_c), free(out_g), free(dout), free(dz_c), free(dz_g), free(h0), free(hT_c);
}

/* ---------------- the scan, one direction (causal) ---------------- */
/* One call of the causal scan on the device (direction 0's tensors; the [1] members NULL) */
typedef struct {
    void *u, *dl, *xd, *xz;  /* (B, L, E), (B, L, E), (B, L, xdbl_ld), (B, L, 2E) act */
    float *D, *A;            /* (E), (E, N) or NULL */
} DevDir;
static VilScanFwd causal_fwd(const OpCase *c, const DevDir *d, int L, void *out, const float *h0, float *hT) {
    int E = c->E, own = vil_recurrences[c->rec].param.key != NULL;
    return (VilScanFwd){.rec = c->rec, .out = out, .u = {d->u}, .delta = {d->dl}, .xdbl = {d->xd},
                        .z = (char *)d->xz + (size_t)E * 2, .D = {d->D}, .A_log = {own ? d->A : NULL}, .B = c->B,
                        .L = L, .E = E, .N = c->N, .dt_ld = c->dt_ld, .xdbl_ld = c->xdbl_ld, .ldz = 2 * E,
                        .chunk = c->chunk, .split = c->split, .h0 = h0, .hT = hT, .causal = 1};
}
/* its backward into g[0..3] (du, ddelta, dx_dbl, dxz: dz in its z half) and dD, dA */
static VilScanBwd causal_bwd(const OpCase *c, const DevDir *d, int L, void *const g[4], float *dD, float *dA,
                             const void *dout, const float *h0) {
    int E = c->E, own = vil_recurrences[c->rec].param.key != NULL;
    return (VilScanBwd){.rec = c->rec, .du = {g[0]}, .ddelta = {g[1]}, .dxdbl = {g[2]},
                        .dz = (char *)g[3] + (size_t)E * 2, .dD = {dD}, .dA_log = {own ? dA : NULL}, .dout = dout,
                        .u = {d->u}, .delta = {d->dl}, .xdbl = {d->xd}, .z = (char *)d->xz + (size_t)E * 2,
                        .D = {d->D}, .A_log = {own ? d->A : NULL}, .B = c->B, .L = L, .E = E, .N = c->N,
                        .dt_ld = c->dt_ld, .xdbl_ld = c->xdbl_ld, .ldz = 2 * E, .chunk = c->chunk, .h0 = h0,
                        .causal = 1};
}
static void free_dir(DevDir *d) {
    G->free(G, d->u), G->free(G, d->dl), G->free(G, d->xd), G->free(G, d->xz);
}

/* The causal scan (direction 0 alone: out = SiLU(z) y_0, h0 and hT (B, N, E)) against the CPU op
 * on test_scan's paths (chunk, split, keep, h0); then the stream in chunks of c->chunks tokens,
 * each from the state the chunk before handed out (its hT the next one's h0): the chunks'
 * outputs and the last final state are the one call's, bit for bit where both run sequentially
 * (chunk -1: the same steps in the same order), else within 1e-3 (out: the states' float
 * rounding differs by path, and an output can land on the other side of a bf16 rounding) and
 * tol_f32 (hT); and each chunk's backward from its h0 is the one-call backward of a loss that
 * reads that chunk's outputs alone (dout zero elsewhere), on the chunk's tokens, within the
 * bf16 tolerance. */
static void test_scan_causal(const OpCase *c) {
    int B = c->B, L = c->L, E = c->E, N = c->N, dt_ld = c->dt_ld, xdbl_ld = c->xdbl_ld, ldz = 2 * E;
    VilRecurrence rec = c->rec;
    int own = vil_recurrences[rec].param.key != NULL;
    const char *kind = vil_recurrences[rec].id, *const *kq = vil_recurrences[rec].kq;
    char nm[200], sfx[96];
    snprintf(sfx, sizeof sfx, "B=%d L=%d E=%d N=%d chunk %d split %d%s%s", B, L, E, N, c->chunk, c->split,
             c->keep ? " kept" : "", c->h0 == H0_RANDOM ? " h0" : c->h0 == H0_ZERO ? " h0 = 0" : "");
    size_t ne = (size_t)B * L * E, nw = (size_t)B * L * xdbl_ld, nz = (size_t)B * L * ldz, nst = (size_t)B * N * E;
    float *u = rnd_bf(ne, 1.0f), *dl = rnd_bf(ne, 1.0f), *xd = rnd_bf(nw, 0.5f), *xz = rnd_bf(nz, 1.0f);
    float *Dk = rnd(E, 1.0f), *Al = vil_malloc((size_t)E * N * sizeof(float)), *dout = rnd_bf(ne, 1.0f);
    for (int e = 0; e < E; e++)
        for (int n = 0; n < N; n++) Al[(size_t)e * N + n] = logf((float)(n + 1)) + 0.1f * vil_rng_normal(&rng);
    float *h0 = c->h0 == H0_RANDOM ? rnd(nst, 1.0f) : c->h0 == H0_ZERO ? vil_calloc(nst, sizeof(float)) : NULL;
    DevDir d = {.u = dev_act(u, ne), .dl = dev_act(dl, ne), .xd = dev_act(xd, nw), .xz = dev_act(xz, nz),
                .D = dev_f32(Dk, E), .A = dev_f32(Al, (size_t)E * N)};
    float *d_h0 = h0 ? dev_f32(h0, nst) : NULL, *d_hT = dev_poison(nst * sizeof(float));
    /* forward */
    float *out_c = vil_malloc(ne * sizeof(float)), *hT_c = vil_malloc(nst * sizeof(float));
    scan_bidir_forward(&(VilScanFwd){.rec = rec, .out = out_c, .u = {u}, .delta = {dl}, .xdbl = {xd}, .z = xz + E,
                                     .D = {Dk}, .A_log = {own ? Al : NULL}, .B = B, .L = L, .E = E, .N = N,
                                     .dt_ld = dt_ld, .xdbl_ld = xdbl_ld, .ldz = ldz, .h0 = h0, .hT = hT_c, .causal = 1});
    void *d_out = dev_poison(ne * 2);
    VilScanFwd gf = causal_fwd(c, &d, L, d_out, d_h0, d_hT);
    size_t sbytes = c->keep && G->scan_states_bytes ? G->scan_states_bytes(G, &gf) : 0;
    if (c->keep) T_CHECK(sbytes > 0, "causal scan %s %s: the backend keeps no states here", kind, sfx);
    gf.states = sbytes ? dev_poison(sbytes) : NULL;
    G->scan_bidir_forward(G, &gf);
    float *out_g = get_act(d_out, ne), *hT_g = get_f32(d_hT, nst);
    snprintf(nm, sizeof nm, "causal scan %s fwd %s", kind, sfx);
    T_CLOSE(nm, rel(out_g, out_c, ne), c->tol);
    snprintf(nm, sizeof nm, "causal scan %s fwd final states (B, N, E) %s", kind, sfx);
    T_CLOSE(nm, rel(hT_g, hT_c, nst), c->tol_f32);
    if (c->h0 == H0_ZERO) { /* h0 = 0 given: bitwise the zero start */
        void *d_o2 = dev_poison(ne * 2);
        VilScanFwd f0 = causal_fwd(c, &d, L, d_o2, NULL, NULL);
        G->scan_bidir_forward(G, &f0);
        float *o2 = get_act(d_o2, ne);
        T_CHECK(!memcmp(o2, out_g, ne * sizeof(float)), "causal scan %s %s: h0 = 0 differs from h0 = NULL", kind, sfx);
        G->free(G, d_o2), free(o2);
    }
    /* backward, into dxz's z half; its x half gets the forward's out again */
    float *du_c = vil_malloc(ne * sizeof(float)), *ddl_c = vil_malloc(ne * sizeof(float));
    float *dxd_c = vil_calloc(nw, sizeof(float)), *dz_c = vil_calloc(nz, sizeof(float));
    float *dD_c = rnd(E, 1.0f), *dA_c = rnd((size_t)E * N, 1.0f), *db_c = rnd(E, 1.0f);
    float *dD0 = copy_f(dD_c, E), *dA0 = copy_f(dA_c, (size_t)E * N), *db0 = copy_f(db_c, E);
    scan_bidir_backward(&(VilScanBwd){.rec = rec, .du = {du_c}, .ddelta = {ddl_c}, .dxdbl = {dxd_c}, .dz = dz_c + E,
                                      .dD = {dD_c}, .dA_log = {own ? dA_c : NULL}, .ddelta_sum = {db_c},
                                      .dout = dout, .u = {u}, .delta = {dl}, .xdbl = {xd}, .z = xz + E, .D = {Dk},
                                      .A_log = {own ? Al : NULL}, .B = B, .L = L, .E = E, .N = N, .dt_ld = dt_ld,
                                      .xdbl_ld = xdbl_ld, .ldz = ldz, .h0 = h0, .causal = 1});
    void *d_dout = dev_act(dout, ne);
    void *g[4] = {dev_poison(ne * 2), dev_poison(ne * 2), dev_poison(nw * 2), dev_poison(nz * 2)};
    float *g_dD = dev_f32(dD0, E), *g_dA = dev_f32(dA0, (size_t)E * N), *g_db = dev_f32(db0, E);
    VilScanBwd gb = causal_bwd(c, &d, L, g, g_dD, g_dA, d_dout, d_h0);
    gb.ddelta_sum[0] = g_db, gb.states = gf.states, gb.out = g[3];
    G->scan_bidir_backward(G, &gb);
    float *du_g = get_act(g[0], ne), *ddl_g = get_act(g[1], ne), *dxd_g = get_act(g[2], nw), *dxz_g = get_act(g[3], nz);
    float *dD_g = get_f32(g_dD, E), *dA_g = get_f32(g_dA, (size_t)E * N), *db_g = get_f32(g_db, E);
    snprintf(nm, sizeof nm, "causal scan %s bwd du %s", kind, sfx);
    T_CLOSE(nm, rel(du_g, du_c, ne), c->tol);
    snprintf(nm, sizeof nm, "causal scan %s bwd ddelta %s", kind, sfx);
    T_CLOSE(nm, rel(ddl_g, ddl_c, ne), c->tol);
    snprintf(nm, sizeof nm, "causal scan %s bwd d%s, d%s %s", kind, kq[0], kq[1], sfx);
    T_CLOSE(nm, rel_l2(dxd_g + dt_ld, dxd_c + dt_ld, (size_t)B * L, 2 * N, xdbl_ld), c->tol);
    T_CHECK(untouched(g[2], (size_t)B * L, xdbl_ld, dt_ld, dt_ld + 2 * N) == 0,
            "causal scan bwd wrote into the dt_low or padding columns");
    snprintf(nm, sizeof nm, "causal scan %s bwd dz %s", kind, sfx);
    T_CLOSE(nm, rel_l2(dxz_g + E, dz_c + E, (size_t)B * L, E, ldz), c->tol);
    for (size_t r = 0; r < (size_t)B * L; r++) /* the x half's rows packed to E apart */
        memmove(dxz_g + r * E, dxz_g + r * ldz, (size_t)E * sizeof(float));
    snprintf(nm, sizeof nm, "causal scan %s bwd: the forward's out again %s", kind, sfx);
    T_CLOSE(nm, rel(dxz_g, out_c, ne), c->tol);
    for (int e = 0; e < E; e++) dD_g[e] -= dD0[e], dD_c[e] -= dD0[e], db_g[e] -= db0[e], db_c[e] -= db0[e];
    snprintf(nm, sizeof nm, "causal scan %s bwd dD %s", kind, sfx);
    T_CLOSE(nm, rel(dD_g, dD_c, E), c->tol_f32);
    snprintf(nm, sizeof nm, "causal scan %s bwd sum ddelta %s", kind, sfx);
    T_CLOSE(nm, rel(db_g, db_c, E), c->tol);
    if (own) {
        for (size_t i = 0; i < (size_t)E * N; i++) dA_g[i] -= dA0[i], dA_c[i] -= dA0[i];
        snprintf(nm, sizeof nm, "causal scan %s bwd dA_log %s", kind, sfx);
        T_CLOSE(nm, rel(dA_g, dA_c, (size_t)E * N), 1e-3);
    }
    free(du_g), free(ddl_g), free(dxd_g), free(dxz_g), free(dD_g), free(dA_g), free(db_g);
    for (int i = 0; i < 4; i++) G->free(G, g[i]);
    G->free(G, g_dD), G->free(G, g_dA), G->free(G, g_db);
    free(du_c), free(ddl_c), free(dxd_c), free(dz_c), free(dD_c), free(dA_c), free(db_c), free(db0);

    /* the stream in chunks: h0 -> chunk -> hT, ping-pong (hT must not overlap h0) */
    float *st[2] = {dev_poison(nst * sizeof(float)), dev_poison(nst * sizeof(float))};
    const float *h_in = d_h0;
    int fwd_same = 1, k = 0;
    double out_err = 0, bwd_err = 0;
    for (int t0 = 0; t0 < L; t0 += c->chunks, k++) {
        int m = L - t0 < c->chunks ? L - t0 : c->chunks;
        size_t me = (size_t)B * m * E, mw = (size_t)B * m * xdbl_ld, mz = (size_t)B * m * ldz;
        float *uk = take_rows(u, B, L, E, t0, m), *dlk = take_rows(dl, B, L, E, t0, m);
        float *xdk = take_rows(xd, B, L, xdbl_ld, t0, m), *xzk = take_rows(xz, B, L, ldz, t0, m);
        DevDir dk = {.u = dev_act(uk, me), .dl = dev_act(dlk, me), .xd = dev_act(xdk, mw), .xz = dev_act(xzk, mz),
                     .D = d.D, .A = d.A};
        void *d_ok = dev_poison(me * 2);
        float *h_out = st[k & 1];
        VilScanFwd fk = causal_fwd(c, &dk, m, d_ok, h_in, h_out);
        G->scan_bidir_forward(G, &fk);
        float *ok = get_act(d_ok, me), *ref = take_rows(out_g, B, L, E, t0, m);
        fwd_same &= !memcmp(ok, ref, me * sizeof(float));
        double e = rel(ok, ref, me);
        out_err = e > out_err ? e : out_err;
        /* this chunk's loss: the one call with dout zero outside the chunk, and the chunk alone
         * from its h0 (no kept states: each call makes its own) */
        float *doutm = vil_calloc(ne, sizeof(float));
        for (int bb = 0; bb < B; bb++)
            memcpy(doutm + ((size_t)bb * L + t0) * E, dout + ((size_t)bb * L + t0) * E, (size_t)m * E * sizeof(float));
        float *doutk = take_rows(doutm, B, L, E, t0, m);
        void *d_dm = dev_act(doutm, ne), *d_dk = dev_act(doutk, me);
        void *g1[4] = {dev_poison(ne * 2), dev_poison(ne * 2), dev_poison(nw * 2), dev_poison(nz * 2)};
        void *gk[4] = {dev_poison(me * 2), dev_poison(me * 2), dev_poison(mw * 2), dev_poison(mz * 2)};
        float *sD[2] = {dev_f32(dD0, E), dev_f32(dD0, E)};
        float *sA[2] = {dev_f32(dA0, (size_t)E * N), dev_f32(dA0, (size_t)E * N)};
        VilScanBwd b1 = causal_bwd(c, &d, L, g1, sD[0], sA[0], d_dm, d_h0);
        VilScanBwd bk = causal_bwd(c, &dk, m, gk, sD[1], sA[1], d_dk, h_in);
        G->scan_bidir_backward(G, &b1);
        G->scan_bidir_backward(G, &bk);
        const size_t cols[4] = {E, E, xdbl_ld, ldz}, rows1[4] = {ne, ne, nw, nz};
        for (int i = 0; i < 4; i++) {
            float *w1 = get_act(g1[i], rows1[i]), *wk = get_act(gk[i], (size_t)B * m * cols[i]);
            float *w1k = take_rows(w1, B, L, cols[i], t0, m);
            /* du, ddelta; the k, q columns of dx_dbl; dz, the z half of dxz */
            size_t c0 = i == 2 ? (size_t)dt_ld : i == 3 ? (size_t)E : 0, w = i == 2 ? (size_t)2 * N : (size_t)E;
            double be = rel_l2(wk + c0, w1k + c0, (size_t)B * m, w, cols[i]);
            bwd_err = be > bwd_err ? be : bwd_err;
            free(w1), free(wk), free(w1k);
        }
        for (int i = 0; i < 4; i++) G->free(G, g1[i]), G->free(G, gk[i]);
        for (int i = 0; i < 2; i++) G->free(G, sD[i]), G->free(G, sA[i]);
        G->free(G, d_dm), G->free(G, d_dk), G->free(G, d_ok);
        free_dir(&dk);
        free(uk), free(dlk), free(xdk), free(xzk), free(ok), free(ref), free(doutm), free(doutk);
        h_in = h_out;
    }
    snprintf(nm, sizeof nm, "causal scan %s, chunks of %d carrying the state: out %s", kind, c->chunks, sfx);
    if (c->chunk < 0) T_CHECK(fwd_same, "%s: not the one call's bit for bit (rel %.3g)", nm, out_err);
    else T_CLOSE(nm, out_err, 1e-3);
    float *hc = get_f32(h_in, nst);
    snprintf(nm, sizeof nm, "causal scan %s, chunks of %d: the last final state %s", kind, c->chunks, sfx);
    if (c->chunk < 0) T_CHECK(!memcmp(hc, hT_g, nst * sizeof(float)), "%s: not the one call's bit for bit", nm);
    else T_CLOSE(nm, rel(hc, hT_g, nst), c->tol_f32);
    snprintf(nm, sizeof nm, "causal scan %s, a chunk's backward from its h0 %s", kind, sfx);
    T_CLOSE(nm, bwd_err, c->tol);
    free(hc);
    G->free(G, st[0]), G->free(G, st[1]);

    free_dir(&d);
    G->free(G, d.D), G->free(G, d.A), G->free(G, d_out), G->free(G, d_hT), G->free(G, d_dout);
    if (d_h0) G->free(G, d_h0);
    if (gf.states) G->free(G, gf.states);
    free(u), free(dl), free(xd), free(xz), free(Dk), free(Al), free(dout), free(h0), free(out_c), free(hT_c);
    free(out_g), free(hT_g), free(dD0), free(dA0);
}
/* A case of every recurrence (each_rec) runs once per recurrence of the table: each kernel
 * family checks a new recurrence without case rows of its own. */
static void test_scan_cases(const OpCase *c) {
    void (*run)(const OpCase *) = c->causal ? test_scan_causal : test_scan;
    if (!c->each_rec) {
        run(c);
        return;
    }
    for (int r = 0; r < VIL_REC_COUNT; r++) {
        OpCase one = *c;
        one.rec = (VilRecurrence)r;
        printf("-- scan: %s: %s\n", c->name, vil_recurrences[r].name);
        run(&one);
    }
}
/* ---------------- loss ---------------- */
static void test_loss(const OpCase *c) {
    int B = c->B, C = c->C;
    char nm[96];
    float *logits = rnd((size_t)B * C, 3.0f), *tg = vil_calloc((size_t)B * C, sizeof(float));
    for (int b = 0; b < B; b++) {
        for (int c = 0; c < C; c++) tg[(size_t)b * C + c] = 0.1f / C;
        tg[(size_t)b * C + b % C] += 0.9f;
    }
    float *loss_c = vil_malloc(B * sizeof(float)), *probs_c = vil_malloc((size_t)B * C * sizeof(float));
    softmax_xent_forward(&(VilXentFwd){.loss = loss_c, .probs = probs_c, .logits = logits, .targets = tg, .B = B, .C = C});
    float *d_logits = dev_f32(logits, (size_t)B * C), *d_tg = dev_f32(tg, (size_t)B * C);
    float *d_loss = dev_poison(B * 4), *d_probs = dev_poison((size_t)B * C * 4);
    G->softmax_xent_forward(G, &(VilXentFwd){.loss = d_loss, .probs = d_probs, .logits = d_logits, .targets = d_tg,
                                             .B = B, .C = C});
    float *loss_g = get_f32(d_loss, B), *probs_g = get_f32(d_probs, (size_t)B * C);
    snprintf(nm, sizeof nm, "softmax xent fwd loss B=%d C=%d", B, C);
    T_CLOSE(nm, rel(loss_g, loss_c, B), c->tol_f32);
    snprintf(nm, sizeof nm, "softmax xent fwd probs B=%d C=%d", B, C);
    T_CLOSE(nm, rel(probs_g, probs_c, (size_t)B * C), c->tol_f32);
    float *dl_c = vil_malloc((size_t)B * C * sizeof(float)), *d_dl = dev_poison((size_t)B * C * 4);
    softmax_xent_backward(&(VilXentBwd){.dlogits = dl_c, .probs = probs_c, .targets = tg, .B = B, .C = C, .denom = 3L * B});
    G->softmax_xent_backward(G, &(VilXentBwd){.dlogits = d_dl, .probs = d_probs, .targets = d_tg, .B = B, .C = C, .denom = 3L * B});
    float *dl_g = get_f32(d_dl, (size_t)B * C);
    snprintf(nm, sizeof nm, "softmax xent bwd B=%d C=%d", B, C);
    T_CLOSE(nm, rel(dl_g, dl_c, (size_t)B * C), c->tol_f32);
    G->free(G, d_logits), G->free(G, d_tg), G->free(G, d_loss), G->free(G, d_probs), G->free(G, d_dl);
    free(logits), free(tg), free(loss_c), free(probs_c), free(loss_g), free(probs_g), free(dl_c), free(dl_g);
}

/* ---------------- AdamW ---------------- */
static void test_adamw(const OpCase *c) {
    size_t n = c->n;
    char nm[96];
    float *p = rnd(n, 1.0f), *m = vil_calloc(n, 4), *v = vil_calloc(n, 4);
    float *d_p = dev_f32(p, n), *d_m = dev_f32(m, n), *d_v = dev_f32(v, n);
    void *d_work = dev_poison(n * 2);
    unsigned char *decay = vil_malloc(n), *d_decay = G->alloc(G, n);
    for (size_t i = 0; i < n; i++) decay[i] = (unsigned char)(i % 5 != 2); /* a fifth exempt */
    G->to_device(G, d_decay, decay, n);
    for (int step = 1; step <= 3; step++) {
        float *g = rnd(n, 1.0f);
        VilOptimHyper h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .wd = 0.05f, .l2 = c->l2};
        VilAdamW hp = {.n = n, .h = &h, .step = step};
        VilAdamW hc = hp;
        hc.p = p, hc.g = g, hc.m = m, hc.v = v, hc.decay = decay;
        adamw_update(&hc);
        float *d_g = dev_f32(g, n);
        VilAdamW hg = hp;
        hg.p = d_p, hg.work = d_work, hg.g = d_g, hg.m = d_m, hg.v = d_v, hg.decay = d_decay;
        G->adamw_update(G, &hg);
        G->free(G, d_g);
        free(g);
    }
    float *p_g = get_f32(d_p, n), *m_g = get_f32(d_m, n), *v_g = get_f32(d_v, n), *w_g = get_act(d_work, n);
    const char *op = c->l2 ? "adam (L2)" : "adamw";
    snprintf(nm, sizeof nm, "%s 3 steps p n=%zu", op, n);
    T_CLOSE(nm, rel(p_g, p, n), c->tol_f32);
    snprintf(nm, sizeof nm, "%s 3 steps m, v n=%zu", op, n);
    T_CLOSE(nm, fmax(rel(m_g, m, n), rel(v_g, v, n)), c->tol_f32);
    snprintf(nm, sizeof nm, "%s bf16 working copy n=%zu", op, n);
    T_CLOSE(nm, rel(w_g, p, n), c->tol);
    G->free(G, d_p), G->free(G, d_m), G->free(G, d_v), G->free(G, d_work), G->free(G, d_decay);
    free(decay), free(p), free(m), free(v), free(p_g), free(m_g), free(v_g), free(w_g);
}

/* SGD: three steps against the CPU op, with a fifth of the elements exempt from weight decay */
static void test_sgd(const OpCase *c) {
    size_t n = c->n;
    char nm[96];
    float *p = rnd(n, 1.0f), *buf = vil_calloc(n, 4);
    float *d_p = dev_f32(p, n), *d_buf = dev_f32(buf, n);
    void *d_work = dev_poison(n * 2);
    unsigned char *decay = vil_malloc(n), *d_decay = G->alloc(G, n);
    for (size_t i = 0; i < n; i++) decay[i] = (unsigned char)(i % 5 != 2);
    G->to_device(G, d_decay, decay, n);
    for (int step = 1; step <= 3; step++) {
        float *g = rnd(n, 1.0f), *d_g = dev_f32(g, n);
        VilOptimHyper h = {.lr = 0.1f, .momentum = c->momentum, .wd = 1e-2f, .nesterov = c->nesterov};
        VilSgd hp = {.n = n, .h = &h};
        VilSgd hc = hp, hg = hp;
        hc.p = p, hc.g = g, hc.buf = buf, hc.decay = decay;
        sgd_update(&hc);
        hg.p = d_p, hg.work = d_work, hg.g = d_g, hg.buf = d_buf, hg.decay = d_decay;
        G->sgd_update(G, &hg);
        G->free(G, d_g);
        free(g);
    }
    float *p_g = get_f32(d_p, n), *b_g = get_f32(d_buf, n), *w_g = get_act(d_work, n);
    snprintf(nm, sizeof nm, "sgd 3 steps p, momentum_buffer n=%zu", n);
    T_CLOSE(nm, fmax(rel(p_g, p, n), rel(b_g, buf, n)), c->tol_f32);
    snprintf(nm, sizeof nm, "sgd bf16 working copy n=%zu", n);
    T_CLOSE(nm, rel(w_g, p, n), c->tol);
    G->free(G, d_p), G->free(G, d_buf), G->free(G, d_work), G->free(G, d_decay);
    free(decay), free(p), free(buf), free(p_g), free(b_g), free(w_g);
}

/* Lamb: three steps against the CPU op on c->spans tensors of uneven sizes (one of them more
 * than the CUDA op's blocks cover in one pass, some of one element), every third exempt from
 * weight decay, with gaps between them that no tensor owns (the padding of the model's buffers:
 * left as they are); the weights' change is compared, not the weights */
static void test_lamb(const OpCase *c) {
    size_t n = c->n;
    char nm[96];
    int ns = c->spans;
    VilSpan *sp = ns ? vil_malloc((size_t)ns * sizeof *sp) : NULL, *d_sp = NULL;
    unsigned char *decay = vil_malloc(n), *d_decay = G->alloc(G, n);
    memset(decay, 1, n);
    if (ns) {
        static const size_t SIZE[] = {7, 20000, 1, 300, 1, 4096, 70001, 3};
        size_t at = 0;
        for (int t = 0; t < ns; t++) {
            size_t len = SIZE[t % 8], gap = (size_t)(t % 3);
            if (at + gap + len > n) len = at + gap < n ? n - at - gap : 0;
            sp[t] = (VilSpan){at + gap, len};
            memset(decay + at + gap, t % 3 != 1, len);
            at += gap + len;
        }
        d_sp = G->alloc(G, (size_t)ns * sizeof *sp);
        G->to_device(G, d_sp, sp, (size_t)ns * sizeof *sp);
    }
    G->to_device(G, d_decay, decay, n);
    float *p = rnd(n, 0.5f), *p0 = copy_f(p, n), *m = vil_calloc(n, 4), *v = vil_calloc(n, 4);
    float *d_p = dev_f32(p, n), *d_m = dev_f32(m, n), *d_v = dev_f32(v, n);
    void *d_work = dev_poison(n * 2);
    for (int step = 1; step <= 3; step++) {
        float *g = rnd(n, 1.0f), *d_g = dev_f32(g, n);
        VilOptimHyper h = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f, .wd = 0.05f,
                           .trust_clip = c->trust_clip};
        VilLamb hp = {.n = n, .n_spans = ns, .h = &h, .step = step};
        VilLamb hc = hp, hg = hp;
        hc.p = p, hc.g = g, hc.m = m, hc.v = v, hc.decay = decay, hc.spans = sp;
        lamb_update(&hc);
        hg.p = d_p, hg.work = d_work, hg.g = d_g, hg.m = d_m, hg.v = d_v, hg.decay = d_decay, hg.spans = d_sp;
        G->lamb_update(G, &hg);
        G->free(G, d_g);
        free(g);
    }
    float *p_g = get_f32(d_p, n), *m_g = get_f32(d_m, n), *v_g = get_f32(d_v, n);
    for (size_t i = 0; i < n; i++) p_g[i] -= p0[i], p0[i] = p[i] - p0[i];
    snprintf(nm, sizeof nm, "lamb%s 3 steps: p's change, %d tensors n=%zu", c->trust_clip ? "c" : "", ns, n);
    T_CLOSE(nm, rel(p_g, p0, n), c->tol_f32);
    snprintf(nm, sizeof nm, "lamb%s 3 steps: exp_avg, exp_avg_sq n=%zu", c->trust_clip ? "c" : "", n);
    T_CLOSE(nm, fmax(rel(m_g, m, n), rel(v_g, v, n)), c->tol_f32);
    if (ns) {
        /* the work copy of the tensors' elements; a gap's still holds the poison */
        float *w_g = get_act(d_work, n), *wt = vil_malloc(n * sizeof(float)), *pt = vil_malloc(n * sizeof(float));
        size_t k = 0, gaps = 0, poisoned = 0;
        unsigned char *own = vil_calloc(n, 1);
        for (int t = 0; t < ns; t++) memset(own + sp[t].offset, 1, sp[t].n);
        for (size_t i = 0; i < n; i++) {
            if (own[i]) wt[k] = w_g[i], pt[k++] = p[i];
            else gaps++, poisoned += isnan(w_g[i]);
        }
        snprintf(nm, sizeof nm, "lamb bf16 working copy of the tensors n=%zu", n);
        T_CLOSE(nm, rel(wt, pt, k), c->tol);
        T_CHECK(gaps > 0 && poisoned == gaps, "lamb: the %zu elements between the tensors untouched (%zu)", gaps,
                poisoned);
        free(w_g), free(wt), free(pt), free(own);
        G->free(G, d_sp);
    }
    G->free(G, d_p), G->free(G, d_m), G->free(G, d_v), G->free(G, d_work), G->free(G, d_decay);
    free(sp), free(decay), free(p), free(p0), free(m), free(v), free(p_g), free(m_g), free(v_g);
}

/* the weight EMA: three updates against the CPU op */
static void test_ema(const OpCase *c) {
    size_t n = c->n;
    float decay = c->decay;
    char nm[96];
    float *e = rnd(n, 1.0f), *d_e = dev_f32(e, n);
    for (int it = 0; it < 3; it++) {
        float *p = rnd(n, 3.0f), *d_p = dev_f32(p, n);
        ema_update(&(VilEma){.ema = e, .p = p, .n = n, .decay = decay});
        G->ema_update(G, &(VilEma){.ema = d_e, .p = d_p, .n = n, .decay = decay});
        G->free(G, d_p);
        free(p);
    }
    float *e_g = get_f32(d_e, n);
    snprintf(nm, sizeof nm, "ema 3 updates n=%zu decay %g", n, decay);
    T_CLOSE(nm, rel(e_g, e, n), c->tol_f32);
    G->free(G, d_e);
    free(e), free(e_g);
}

/* ---------------- the initial-state interventions ---------------- */
/* state_init: noise with sigma, fitted noise (mean, var), state passing with drop; the draws are
 * the CPU's up to the rounding of logf / cosf / sqrtf (and an fma), passing bitwise */
static void test_state_init(const OpCase *c) {
    int B = c->B, S = c->S;
    size_t n = (size_t)B * S;
    char nm[128];
    float *mean = NULL, *var = NULL, *prev = NULL, *d_mean = NULL, *d_var = NULL, *d_prev = NULL;
    if (c->init == INIT_FITTED) {
        int K = S / (c->group > 1 ? c->group : 1);
        mean = rnd(K, 1.0f), var = rnd(K, 1.0f);
        for (int i = 0; i < K; i++) var[i] *= var[i];
        d_mean = dev_f32(mean, K), d_var = dev_f32(var, K);
    }
    if (c->init == INIT_PASSING) prev = rnd(n, 1.0f), d_prev = dev_f32(prev, n);
    VilStateInit a = {.prev = prev, .mean = mean, .var = var, .sigma = c->sigma, .drop = c->drop,
                      .group = c->group, .mean_only = c->mean_only,
                      .seed = 0x5eed0000u + (uint64_t)c->B, .first = 1000, .B = B, .S = S};
    float *h_c = vil_malloc(n * sizeof(float));
    a.h0 = h_c;
    state_init(&a);
    float *d_h = dev_poison(n * sizeof(float));
    a.h0 = d_h, a.prev = d_prev, a.mean = d_mean, a.var = d_var;
    G->state_init(G, &a);
    float *h_g = get_f32(d_h, n);
    if (c->init == INIT_PASSING || c->mean_only) { /* copies and zeros: no arithmetic */
        int kept = 0, dropped = 0;
        for (int b = 0; b < B; b++) {
            int zero = 1;
            for (int i = 0; i < S; i++) zero &= h_c[(size_t)b * S + i] == 0.0f;
            dropped += zero, kept += !zero;
        }
        snprintf(nm, sizeof nm, "state_init %s B=%d S=%d drop %g: bitwise the CPU's (%d kept, %d dropped)",
                 c->mean_only ? "fitted mean alone" : "passing", B, S, c->drop, kept, dropped);
        T_CHECK(memcmp(h_g, h_c, n * sizeof(float)) == 0 && kept > 0 && dropped > 0, "%s", nm);
        printf("  %s\n", nm);
    } else if (c->init == INIT_SIGMA && c->sigma == 0.0f) { /* zeros, as the zero start's */
        int zero = 1;
        for (size_t i = 0; i < n; i++) zero &= h_g[i] == 0.0f && !signbit(h_g[i]);
        snprintf(nm, sizeof nm, "state_init noise sigma 0 B=%d S=%d: every value +0", B, S);
        T_CHECK(zero && memcmp(h_g, h_c, n * sizeof(float)) == 0, "%s", nm);
        printf("  %s\n", nm);
    } else {
        snprintf(nm, sizeof nm, "state_init %s B=%d S=%d group %d drop %g",
                 c->init == INIT_FITTED ? "fitted noise" : "noise", B, S, c->group, c->drop);
        T_CLOSE(nm, rel(h_g, h_c, n), c->tol_f32);
    }
    G->free(G, d_h);
    if (d_mean) G->free(G, d_mean), G->free(G, d_var);
    if (d_prev) G->free(G, d_prev);
    free(mean), free(var), free(prev), free(h_c), free(h_g);
}

/* state_moments: the batch's sums and sums of squares per element */
static void test_state_moments(const OpCase *c) {
    int B = c->B, S = c->S;
    size_t n = (size_t)B * S;
    char nm[96];
    float *hT = rnd(n, 2.0f), *sum_c = vil_malloc(S * sizeof(float)), *sq_c = vil_malloc(S * sizeof(float));
    state_moments(&(VilStateMoments){.sum = sum_c, .sq = sq_c, .hT = hT, .B = B, .S = S});
    float *d_hT = dev_f32(hT, n), *d_sum = dev_poison(S * sizeof(float)), *d_sq = dev_poison(S * sizeof(float));
    G->state_moments(G, &(VilStateMoments){.sum = d_sum, .sq = d_sq, .hT = d_hT, .B = B, .S = S});
    float *sum_g = get_f32(d_sum, S), *sq_g = get_f32(d_sq, S);
    snprintf(nm, sizeof nm, "state_moments sum B=%d S=%d", B, S);
    T_CLOSE(nm, rel(sum_g, sum_c, S), c->tol_f32);
    snprintf(nm, sizeof nm, "state_moments sq B=%d S=%d", B, S);
    T_CLOSE(nm, rel(sq_g, sq_c, S), c->tol_f32);
    G->free(G, d_hT), G->free(G, d_sum), G->free(G, d_sq);
    free(hT), free(sum_c), free(sq_c), free(sum_g), free(sq_g);
}

/* state_fit: three running updates of mean and var from a batch's moments (group > 1: one pair
 * per group of elements, the CUDA sums in another order) */
static void test_state_fit(const OpCase *c) {
    size_t n = c->n, g = c->group > 1 ? (size_t)c->group : 1, k = n / g;
    int B = c->B;
    char nm[96];
    float *mean = rnd(k, 1.0f), *var = rnd(k, 1.0f);
    for (size_t i = 0; i < k; i++) var[i] *= var[i];
    float *d_mean = dev_f32(mean, k), *d_var = dev_f32(var, k);
    for (int it = 0; it < 3; it++) {
        float *hT = rnd((size_t)B * n, 1.5f), *sum = vil_malloc(n * sizeof(float)), *sq = vil_malloc(n * sizeof(float));
        state_moments(&(VilStateMoments){.sum = sum, .sq = sq, .hT = hT, .B = B, .S = (int)n});
        float *d_sum = dev_f32(sum, n), *d_sq = dev_f32(sq, n);
        state_fit(&(VilStateFit){.mean = mean, .var = var, .sum = sum, .sq = sq, .n = n, .group = g,
                                 .count = (float)B, .keep = c->keep_f});
        G->state_fit(G, &(VilStateFit){.mean = d_mean, .var = d_var, .sum = d_sum, .sq = d_sq, .n = n, .group = g,
                                       .count = (float)B, .keep = c->keep_f});
        G->free(G, d_sum), G->free(G, d_sq);
        free(hT), free(sum), free(sq);
    }
    float *mean_g = get_f32(d_mean, k), *var_g = get_f32(d_var, k);
    snprintf(nm, sizeof nm, "state_fit mean n=%zu group %zu keep %g", n, g, c->keep_f);
    T_CLOSE(nm, rel(mean_g, mean, k), c->tol_f32);
    snprintf(nm, sizeof nm, "state_fit var n=%zu group %zu keep %g", n, g, c->keep_f);
    T_CLOSE(nm, rel(var_g, var, k), c->tol_f32);
    G->free(G, d_mean), G->free(G, d_var);
    free(mean), free(var), free(mean_g), free(var_g);
}

/* clip_grad_norm_: the norm (double sums in another order) and the scaled gradient */
static void test_grad_clip(const OpCase *c) {
    size_t n = c->n;
    float max_norm = c->max_norm;
    char nm[96];
    float *g = rnd(n, 1.0f), norm_c = 0, norm_g = 0;
    float *d_g = dev_f32(g, n), *d_norm = G->alloc(G, sizeof(float));
    grad_clip(&(VilGradClip){.g = g, .n = n, .max_norm = max_norm, .norm = &norm_c});
    G->grad_clip(G, &(VilGradClip){.g = d_g, .n = n, .max_norm = max_norm, .norm = d_norm});
    G->to_host(G, &norm_g, d_norm, sizeof(float));
    float *g_g = get_f32(d_g, n);
    snprintf(nm, sizeof nm, "grad_clip norm n=%zu max %g", n, max_norm);
    T_CLOSE(nm, fabs((double)norm_g - norm_c) / norm_c, c->tol_f32);
    snprintf(nm, sizeof nm, "grad_clip g n=%zu max %g", n, max_norm);
    T_CLOSE(nm, rel(g_g, g, n), c->tol_f32);
    G->free(G, d_g), G->free(G, d_norm);
    free(g), free(g_g);
}

/* ---------------- patch embedding and tokens ---------------- */
static void test_patch(const OpCase *c) {
    int B = c->B, C = c->C, H = c->H, P = c->P, S = c->S, D = c->D;
    char nm[128];
    int G_ = (H - P) / S + 1, M = G_ * G_;
    size_t ni = (size_t)B * C * H * H, nw = (size_t)D * C * P * P, no = (size_t)B * M * D;
    float *img = rnd(ni, 1.0f), *w = rnd_bf(nw, 1.0f / sqrtf((float)C * P * P)), *b = rnd(D, 0.5f);
    float *out_c = vil_malloc(no * sizeof(float));
    patch_embed_forward(&(VilPatchEmbedFwd){.out = out_c, .img = img, .w = w, .b = b, .B = B, .C = C, .H = H, .W = H,
                                            .P = P, .S = S, .D = D});
    float *d_img = dev_f32(img, ni), *d_b = dev_f32(b, D);
    void *d_w = dev_act(w, nw), *d_out = dev_poison(no * 2);
    G->patch_embed_forward(G, &(VilPatchEmbedFwd){.out = d_out, .img = d_img, .w = d_w, .b = d_b, .B = B, .C = C, .H = H,
                                                  .W = H, .P = P, .S = S, .D = D});
    float *out_g = get_act(d_out, no);
    /* stride == patch: a bf16 matrix product on the patch rows; overlapping patches: cuDNN's
     * float32 convolution, possibly with TF32 tensor ops (~1e-3 relative): bf16 tolerance */
    snprintf(nm, sizeof nm, "patch_embed fwd B=%d C=%d H=%d P=%d S=%d D=%d", B, C, H, P, S, D);
    T_CLOSE(nm, rel(out_g, out_c, no), c->tol);
    float *dout = rnd_bf(no, 1.0f), *dw_c = rnd(nw, 1.0f), *db_c = rnd(D, 1.0f);
    float *dw0 = copy_f(dw_c, nw), *db0 = copy_f(db_c, D), *dimg_c = vil_malloc(ni * sizeof(float));
    patch_embed_backward(&(VilPatchEmbedBwd){.dimg = dimg_c, .dw = dw_c, .db = db_c, .dout = dout, .w = w, .img = img,
                                             .B = B, .C = C, .H = H, .W = H, .P = P, .S = S, .D = D});
    void *d_dout = dev_act(dout, no);
    float *d_dw = dev_f32(dw0, nw), *d_db = dev_f32(db0, D), *d_dimg = dev_poison(ni * 4);
    G->patch_embed_backward(G, &(VilPatchEmbedBwd){.dimg = d_dimg, .dw = d_dw, .db = d_db, .dout = d_dout, .w = d_w,
                                                   .img = d_img, .B = B, .C = C, .H = H, .W = H, .P = P, .S = S, .D = D});
    float *dw_g = get_f32(d_dw, nw), *db_g = get_f32(d_db, D), *dimg_g = get_f32(d_dimg, ni);
    for (size_t i = 0; i < nw; i++) dw_g[i] -= dw0[i], dw_c[i] -= dw0[i];
    for (int i = 0; i < D; i++) db_g[i] -= db0[i], db_c[i] -= db0[i];
    snprintf(nm, sizeof nm, "patch_embed bwd dw B=%d P=%d S=%d D=%d", B, P, S, D);
    T_CLOSE(nm, rel(dw_g, dw_c, nw), c->tol);
    snprintf(nm, sizeof nm, "patch_embed bwd db B=%d P=%d S=%d D=%d", B, P, S, D);
    T_CLOSE(nm, rel(db_g, db_c, D), c->tol_f32);
    snprintf(nm, sizeof nm, "patch_embed bwd dimg B=%d P=%d S=%d D=%d", B, P, S, D);
    T_CLOSE(nm, rel(dimg_g, dimg_c, ni), c->tol);
    G->free(G, d_img), G->free(G, d_b), G->free(G, d_w), G->free(G, d_out), G->free(G, d_dout), G->free(G, d_dw);
    G->free(G, d_db), G->free(G, d_dimg);
    free(img), free(w), free(b), free(out_c), free(out_g), free(dout), free(dw_c), free(db_c);
    free(dw0), free(db0), free(dimg_c), free(dw_g), free(db_g), free(dimg_g);
}

static void test_tokens(const OpCase *c) {
    int B = c->B, M = c->M, D = c->D, t = c->t;
    char nm[96];
    int L = M + 1;
    size_t np = (size_t)B * M * D, nx = (size_t)B * L * D;
    float *pt = rnd_bf(np, 1.0f), *cls = rnd(D, 1.0f), *pos = rnd((size_t)L * D, 1.0f);
    float *x_c = vil_malloc(nx * sizeof(float));
    tokens_forward(&(VilTokensFwd){.x = x_c, .patches = pt, .cls = cls, .pos = c->no_pos ? NULL : pos, .B = B, .M = M,
                                   .D = D, .t = t});
    void *d_pt = dev_act(pt, np);
    float *d_cls = dev_f32(cls, D), *d_pos = dev_f32(pos, (size_t)L * D), *d_x = dev_poison(nx * 4);
    G->tokens_forward(G, &(VilTokensFwd){.x = d_x, .patches = d_pt, .cls = d_cls, .pos = c->no_pos ? NULL : d_pos, .B = B,
                                         .M = M, .D = D, .t = t});
    float *x_g = get_f32(d_x, nx);
    snprintf(nm, sizeof nm, "tokens fwd B=%d M=%d D=%d t=%d%s", B, M, D, t, c->no_pos ? " no pos" : "");
    T_CLOSE(nm, rel(x_g, x_c, nx), 1e-7); /* one add per element */
    float *dx = rnd(nx, 1.0f), *dp_c = vil_malloc(np * sizeof(float));
    float *dcls_c = rnd(D, 1.0f), *dpos_c = rnd((size_t)L * D, 1.0f);
    float *dcls0 = copy_f(dcls_c, D), *dpos0 = copy_f(dpos_c, (size_t)L * D);
    tokens_backward(&(VilTokensBwd){.dpatches = dp_c, .dcls = dcls_c, .dpos = c->no_pos ? NULL : dpos_c, .dx = dx, .B = B,
                                    .M = M, .D = D, .t = t});
    float *d_dx = dev_f32(dx, nx), *d_dcls = dev_f32(dcls0, D), *d_dpos = dev_f32(dpos0, (size_t)L * D);
    void *d_dp = dev_poison(np * 2);
    G->tokens_backward(G, &(VilTokensBwd){.dpatches = d_dp, .dcls = d_dcls, .dpos = c->no_pos ? NULL : d_dpos, .dx = d_dx,
                                          .B = B, .M = M, .D = D, .t = t});
    float *dp_g = get_act(d_dp, np), *dcls_g = get_f32(d_dcls, D), *dpos_g = get_f32(d_dpos, (size_t)L * D);
    snprintf(nm, sizeof nm, "tokens bwd dpatches B=%d M=%d D=%d%s", B, M, D, c->no_pos ? " no pos" : "");
    T_CLOSE(nm, rel(dp_g, dp_c, np), c->tol);
    snprintf(nm, sizeof nm, "tokens bwd dcls, dpos B=%d M=%d D=%d%s", B, M, D, c->no_pos ? " no pos (dpos untouched)" : "");
    T_CLOSE(nm, fmax(rel(dcls_g, dcls_c, D), rel(dpos_g, dpos_c, (size_t)L * D)), c->tol_f32);
    G->free(G, d_pt), G->free(G, d_cls), G->free(G, d_pos), G->free(G, d_x), G->free(G, d_dx), G->free(G, d_dcls);
    G->free(G, d_dpos), G->free(G, d_dp);
    free(pt), free(cls), free(pos), free(x_c), free(x_g), free(dx), free(dp_c), free(dcls_c);
    free(dpos_c), free(dcls0), free(dpos0), free(dp_g), free(dcls_g), free(dpos_g);
}

/* ---------------- the table ---------------- */
/* ---------------- the states along the sequence (vil states) ---------------- */
/* one direction (reverse for the backward one) from zero, for every recurrence of the table:
 * each token's squared state norm and the final state against the CPU op on the same bf16-exact
 * inputs (float32 arithmetic on both sides; the GPU sums the channels in no fixed order) */
static void test_scan_states_one(const OpCase *c, VilRecurrence rec) {
    int B = c->B, L = c->L, E = c->E, N = c->N, dt_ld = c->dt_ld, xdbl_ld = c->xdbl_ld;
    const VilRecurrenceInfo *ri = &vil_recurrences[rec];
    int has_a = ri->param.key != NULL; /* the recurrence's own parameter (Mamba's A_log) */
    size_t ne = (size_t)B * L * E, nw = (size_t)B * L * xdbl_ld, nT = (size_t)B * N * E;
    float *u = rnd_bf(ne, 1.0f), *dl = rnd_bf(ne, 1.0f), *xd = rnd_bf(nw, 0.5f), *Dk = rnd(E, 1.0f);
    float *Al = vil_malloc((size_t)E * N * sizeof(float));
    for (int e = 0; e < E; e++)
        for (int n = 0; n < N; n++) Al[(size_t)e * N + n] = logf((float)(n + 1)) + 0.1f * vil_rng_normal(&rng);
    void *d_u = dev_act(u, ne), *d_dl = dev_act(dl, ne), *d_xd = dev_act(xd, nw);
    float *d_D = dev_f32(Dk, E), *d_A = dev_f32(Al, (size_t)E * N);
    for (int rev = 0; rev < 2; rev++) {
        float *hsq_c = vil_malloc((size_t)B * L * sizeof(float)), *hT_c = vil_malloc(nT * sizeof(float));
        scan_dir_states(&(VilScanStates){.rec = rec, .hsq = hsq_c, .hT = hT_c, .u = u, .delta = dl, .xdbl = xd,
                                         .D = Dk, .A_log = has_a ? Al : NULL, .B = B, .L = L, .E = E, .N = N,
                                         .dt_ld = dt_ld, .xdbl_ld = xdbl_ld, .reverse = rev});
        float *d_hsq = dev_poison((size_t)B * L * sizeof(float)), *d_hT = dev_poison(nT * sizeof(float));
        G->scan_dir_states(G, &(VilScanStates){.rec = rec, .hsq = d_hsq, .hT = d_hT, .u = d_u, .delta = d_dl,
                                               .xdbl = d_xd, .D = d_D, .A_log = has_a ? d_A : NULL, .B = B,
                                               .L = L, .E = E, .N = N, .dt_ld = dt_ld, .xdbl_ld = xdbl_ld,
                                               .reverse = rev});
        float *hsq_g = get_f32(d_hsq, (size_t)B * L), *hT_g = get_f32(d_hT, nT);
        char nm[160];
        snprintf(nm, sizeof nm, "scan states %s%s B=%d L=%d E=%d N=%d: hsq", ri->id, rev ? " reversed" : "", B, L,
                 E, N);
        T_CLOSE(nm, rel(hsq_g, hsq_c, (size_t)B * L), c->tol_f32);
        snprintf(nm, sizeof nm, "scan states %s%s B=%d L=%d E=%d N=%d: final state", ri->id, rev ? " reversed" : "",
                 B, L, E, N);
        T_CLOSE(nm, rel(hT_g, hT_c, nT), c->tol_f32);
        G->free(G, d_hsq), G->free(G, d_hT);
        free(hsq_c), free(hT_c), free(hsq_g), free(hT_g);
    }
    G->free(G, d_u), G->free(G, d_dl), G->free(G, d_xd), G->free(G, d_D), G->free(G, d_A);
    free(u), free(dl), free(xd), free(Dk), free(Al);
}
static void test_scan_states(const OpCase *c) {
    for (int r = 0; r < VIL_REC_COUNT; r++) test_scan_states_one(c, (VilRecurrence)r);
}

/* a family: the function that runs its cases and the ops of VIL_OPS they check */
typedef struct {
    const char *name;
    void (*run)(const OpCase *c);
    const char *ops[2];
} OpFamily;
static const OpFamily FAMILIES[] = {
    {"linear", test_linear, {"linear_forward", "linear_backward"}},
    {"add_rmsnorm", test_norm, {"add_rmsnorm_forward", "add_rmsnorm_backward"}},
    {"conv1d", test_conv_cases, {"conv1d_silu_bidir_forward", "conv1d_silu_bidir_backward"}},
    {"scan", test_scan_cases, {"scan_bidir_forward", "scan_bidir_backward"}},
    {"scan_states", test_scan_states, {"scan_dir_states"}},
    {"softmax_xent", test_loss, {"softmax_xent_forward", "softmax_xent_backward"}},
    {"adamw", test_adamw, {"adamw_update"}},
    {"sgd", test_sgd, {"sgd_update"}},
    {"lamb", test_lamb, {"lamb_update"}},
    {"ema", test_ema, {"ema_update"}},
    {"state_init", test_state_init, {"state_init"}},
    {"state_moments", test_state_moments, {"state_moments"}},
    {"state_fit", test_state_fit, {"state_fit"}},
    {"grad_clip", test_grad_clip, {"grad_clip"}},
    {"patch_embed", test_patch, {"patch_embed_forward", "patch_embed_backward"}},
    {"tokens", test_tokens, {"tokens_forward", "tokens_backward"}},
};
#define N_FAMILIES (int)(sizeof FAMILIES / sizeof FAMILIES[0])

/* the ops of VIL_OPS that have no case here, and why */
static const struct {
    const char *op, *why;
} EXEMPT[] = {
    {"grad_allreduce", "a collective over the ranks of several processes: test_dist runs it on the CPU (MPI), "
                       "dev/cuda/gpu_check.sh's multi-GPU steps on NCCL"},
    {"grad_allreduce_wait", "as grad_allreduce"},
};
#define N_EXEMPT (int)(sizeof EXEMPT / sizeof EXEMPT[0])

static const OpCase CASES[] = {
    /* every recurrence of the table, each */
    {.op = "scan_states", .name = "L = 197, several warps of channels", .tol_f32 = 1e-4,
     .B = 2, .L = 197, .E = 136, .N = 16, .dt_ld = 8, .xdbl_ld = 40},
    {.op = "scan_states", .name = "L = 50, N = 8, a partial warp", .tol_f32 = 1e-4,
     .B = 3, .L = 50, .E = 40, .N = 8, .dt_ld = 8, .xdbl_ld = 24},
    {.op = "linear", .name = "in_proj-like, L = 197", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .N = 394, .C = 40, .OC = 80, .ld_in = 40, .ld_out = 80},
    {.op = "linear", .name = "dt_proj-like: a strided slice, bias", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .N = 14, .C = 6, .OC = 40, .ld_in = 48, .ld_out = 40, .bias = 1},
    {.op = "linear", .name = "x_proj-like, L = 730, dinp accumulates", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .N = 1460, .C = 40, .OC = 44, .ld_in = 40, .ld_out = 48, .accumulate = 1},
    {.op = "linear", .name = "the head: class-token rows, f32 out", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .N = 3, .C = 24, .OC = 5, .ld_in = 24 * 26, .ld_out = 5, .bias = 1, .f32_out = 1},
    /* output counts not a multiple of 8: a 1001-class head, and a bf16 output of 12 with a bias
     * and an accumulated input gradient */
    {.op = "linear", .name = "a 1001-class head", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .N = 37, .C = 24, .OC = 1001, .ld_in = 24 * 3, .ld_out = 1001, .bias = 1, .f32_out = 1},
    {.op = "linear", .name = "a bf16 output of 12", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .N = 30, .C = 16, .OC = 12, .ld_in = 16, .ld_out = 12, .bias = 1, .accumulate = 1},
    {.op = "linear", .name = "L = 1", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .N = 2, .C = 40, .OC = 24, .ld_in = 40, .ld_out = 24},
    /* the skinny-K forward of cuda/linear.cu (K <= 64, whole warps of 32 columns): dt_proj at
     * ViL-Tiny's shape (16 of x_dbl's 48 columns); K 24 padded to 32 in a partial row tile with
     * wider output rows; K 48 (ViL-Small's) with a partial column tile */
    {.op = "linear", .name = "skinny K: dt_proj at ViL-Tiny's shape", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .N = 1000, .C = 16, .OC = 384, .ld_in = 48, .ld_out = 384, .bias = 1},
    {.op = "linear", .name = "skinny K: 24 padded, a partial row tile", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .N = 77, .C = 24, .OC = 96, .ld_in = 24, .ld_out = 104},
    {.op = "linear", .name = "skinny K: 48, a partial column tile", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .N = 130, .C = 48, .OC = 160, .ld_in = 80, .ld_out = 160, .bias = 1},
    /* few outputs from many inputs: x_proj at ViL-Tiny's shape (384 -> x_dbl's 48, L = 197);
     * 24 outputs from 200 with a bias into wider rows; 64 from 768 (ViL-Small's E) */
    {.op = "linear", .name = "x_proj at ViL-Tiny's shape", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .N = 394, .C = 384, .OC = 48, .ld_in = 384, .ld_out = 48, .accumulate = 1},
    {.op = "linear", .name = "24 outputs from 200, a bias", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .N = 131, .C = 200, .OC = 24, .ld_in = 208, .ld_out = 40, .bias = 1},
    {.op = "linear", .name = "64 outputs from 768", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .N = 260, .C = 768, .OC = 64, .ld_in = 768, .ld_out = 64},
    /* more product shapes than cuda/linear.cu's plan cache holds (128; vil bench's table across
     * resolutions met that limit): the oldest plans are dropped and made again when needed */
    {.op = "linear", .name = "50 shapes through the plan cache", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .N = 1, .C = 8, .OC = 16, .ld_in = 8, .ld_out = 16, .sweep = 50},
    {.op = "linear", .name = "the first shape again, planned anew", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .N = 394, .C = 40, .OC = 80, .ld_in = 40, .ld_out = 80},
    {.op = "add_rmsnorm", .name = "L = 197, drop-path scale", .tol = TOL_BF16, .tol_f32 = 1e-5,
     .B = 2, .L = 197, .D = 40, .add = 1, .scale = 1},
    {.op = "add_rmsnorm", .name = "L = 7", .tol = TOL_BF16, .tol_f32 = 1e-5,
     .B = 3, .L = 7, .D = 20, .add = 1},
    {.op = "add_rmsnorm", .name = "L = 1, no add", .tol = TOL_BF16, .tol_f32 = 1e-5,
     .B = 2, .L = 1, .D = 72},
    /* the row width picks the pieces a lane loads: D % 4 == 0 four, D = 42 two, odd D one */
    {.op = "add_rmsnorm", .name = "L = 9, D = 42 (pairs)", .tol = TOL_BF16, .tol_f32 = 1e-5,
     .B = 3, .L = 9, .D = 42, .add = 1, .scale = 1},
    {.op = "add_rmsnorm", .name = "L = 9, D = 23 (single elements)", .tol = TOL_BF16, .tol_f32 = 1e-5,
     .B = 3, .L = 9, .D = 23, .add = 1, .scale = 1},
    {.op = "add_rmsnorm", .name = "L = 730, D = 192", .tol = TOL_BF16, .tol_f32 = 1e-5, .only = FULL,
     .B = 2, .L = 730, .D = 192, .add = 1, .scale = 1},
    {.op = "add_rmsnorm", .name = "L = 26, D = 192 (quick)", .tol = TOL_BF16, .tol_f32 = 1e-5, .only = QUICK,
     .B = 2, .L = 26, .D = 192, .add = 1, .scale = 1},
    {.op = "conv1d", .name = "L = 1", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 1, .E = 40, .K = 4},
    {.op = "conv1d", .name = "L = 7", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 7, .E = 40, .K = 4},
    {.op = "conv1d", .name = "L = 197", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 40, .K = 4},
    {.op = "conv1d", .name = "L = 730", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 2, .L = 730, .E = 40, .K = 4},
    {.op = "conv1d", .name = "K = 3", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 3, .L = 33, .E = 72, .K = 3},
    {.op = "conv1d", .name = "K = 1, E = 5", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 20, .E = 5, .K = 1},
    {.op = "conv1d", .name = "K = 6, E = 100", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 1, .L = 31, .E = 100, .K = 6},
    /* the causal conv (direction 0 alone) with a carried context, in one call and in chunks
     * carrying it: chunks shorter than K-1 (their context reaches into the one before), E odd
     * (one channel a thread), K = 1 (no context) */
    {.op = "conv1d", .name = "causal, L = 1", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 1, .E = 40, .K = 4, .causal = 1, .chunks = 1},
    {.op = "conv1d", .name = "causal, L = 7, chunks of 2", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 7, .E = 40, .K = 4, .causal = 1, .chunks = 2},
    {.op = "conv1d", .name = "causal, L = 197, chunks of 64", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 40, .K = 4, .causal = 1, .chunks = 64},
    {.op = "conv1d", .name = "causal, L = 730, chunks of 224", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 2, .L = 730, .E = 40, .K = 4, .causal = 1, .chunks = 224},
    {.op = "conv1d", .name = "causal, K = 3", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 3, .L = 33, .E = 72, .K = 3, .causal = 1, .chunks = 5},
    {.op = "conv1d", .name = "causal, K = 1, E = 5", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 20, .E = 5, .K = 1, .causal = 1, .chunks = 7},
    {.op = "conv1d", .name = "causal, K = 6, E = 101", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 1, .L = 31, .E = 101, .K = 6, .causal = 1, .chunks = 3},
    /* the sequential kernels (one thread walks all tokens) */
    {.op = "scan", .name = "sequential, L = 1", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 1, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .chunk = -1},
    {.op = "scan", .name = "sequential, L = 7", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 7, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .chunk = -1},
    {.op = "scan", .name = "sequential, L = 197", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .chunk = -1},
    {.op = "scan", .name = "sequential, L = 730", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 2, .L = 730, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .chunk = -1},
    {.op = "scan", .name = "sequential, N = 4", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 26, .E = 48, .N = 4, .dt_ld = 2, .xdbl_ld = 10, .chunk = -1},
    {.op = "scan", .name = "sequential, N = 8", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 33, .E = 72, .N = 8, .dt_ld = 5, .xdbl_ld = 21, .chunk = -1},
    {.op = "scan", .name = "sequential, L = 197", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .rec = VIL_REC_MAMBA, .chunk = -1},
    {.op = "scan", .name = "sequential, N = 8", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 7, .E = 20, .N = 8, .dt_ld = 2, .xdbl_ld = 18, .rec = VIL_REC_MAMBA, .chunk = -1},
    {.op = "scan", .name = "sequential, several channel blocks, the last partial", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 264, .N = 16, .dt_ld = 9, .xdbl_ld = 48, .chunk = -1},
    {.op = "scan", .name = "sequential, E = 136", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 1, .L = 33, .E = 136, .N = 16, .dt_ld = 4, .xdbl_ld = 40, .rec = VIL_REC_MAMBA, .chunk = -1},
    {.op = "scan", .name = "sequential, ViL-Tiny's R + 2N = 44 padded to 48", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 72, .N = 16, .dt_ld = 12, .xdbl_ld = 48, .chunk = -1},
    {.op = "scan", .name = "sequential, L = 730", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 1, .L = 730, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .rec = VIL_REC_MAMBA, .chunk = -1},
    /* the token-parallel form: chunks as chosen by shape (these small B x E all take it) at the
     * lengths of 224, 512 (odd), 1024 and 2048 px; forced chunk sizes that leave a short last
     * chunk, one or two chunks, and several channel blocks */
    {.op = "scan", .name = "chunks by shape, L = 1", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 1, .L = 1, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35},
    {.op = "scan", .name = "chunks by shape, L = 1", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 1, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .rec = VIL_REC_MAMBA},
    {.op = "scan", .name = "chunks by shape, L = 7", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 1, .L = 7, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35},
    {.op = "scan", .name = "chunks by shape, L = 7", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 7, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .rec = VIL_REC_MAMBA},
    {.op = "scan", .name = "chunks by shape, L = 197", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 1, .L = 197, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35},
    {.op = "scan", .name = "chunks by shape, L = 197", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .rec = VIL_REC_MAMBA},
    {.op = "scan", .name = "chunks by shape, L = 730", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 1, .L = 730, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35},
    {.op = "scan", .name = "chunks by shape, L = 730", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 730, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .rec = VIL_REC_MAMBA},
    {.op = "scan", .name = "chunks by shape, L = 4097", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 1, .L = 4097, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35},
    {.op = "scan", .name = "chunks by shape, L = 4097", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 2, .L = 4097, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .rec = VIL_REC_MAMBA},
    {.op = "scan", .name = "chunks by shape, L = 16385", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 1, .L = 16385, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35},
    {.op = "scan", .name = "chunks by shape, L = 16385", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 2, .L = 16385, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .rec = VIL_REC_MAMBA},
    {.op = "scan", .name = "chunk 24, several channel blocks", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 264, .N = 16, .dt_ld = 9, .xdbl_ld = 48, .chunk = 24},
    {.op = "scan", .name = "chunk 64, several channel blocks", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 264, .N = 16, .dt_ld = 9, .xdbl_ld = 48, .rec = VIL_REC_MAMBA, .chunk = 64},
    {.op = "scan", .name = "chunk 100, rounded up to 104: two chunks", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 1, .L = 200, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .chunk = 100},
    {.op = "scan", .name = "chunk 8, N = 8", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 33, .E = 72, .N = 8, .dt_ld = 5, .xdbl_ld = 21, .chunk = 8},
    {.op = "scan", .name = "chunk 16, N = 4", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 26, .E = 48, .N = 4, .dt_ld = 2, .xdbl_ld = 10, .rec = VIL_REC_MAMBA, .chunk = 16},
    {.op = "scan", .name = "chunk 32, L = 730, B = 3", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 3, .L = 730, .E = 136, .N = 16, .dt_ld = 4, .xdbl_ld = 40, .chunk = 32},
    {.op = "scan", .name = "one chunk exactly", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 1, .L = 64, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .rec = VIL_REC_MAMBA, .chunk = 64},
    /* the chunk summaries' generic staging: rows that take 8-byte copies (E = 36) and plain
     * loads (E = 37), Longhorn and Mamba, N = 16 and 8 */
    {.op = "scan", .name = "staging, 8-byte copies (E = 36)", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 36, .N = 16, .dt_ld = 4, .xdbl_ld = 40, .chunk = 32},
    {.op = "scan", .name = "staging, plain loads (E = 37), N = 8", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 130, .E = 37, .N = 8, .dt_ld = 4, .xdbl_ld = 24, .chunk = 24},
    {.op = "scan", .name = "staging, plain loads (E = 37)", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 1, .L = 99, .E = 37, .N = 16, .dt_ld = 4, .xdbl_ld = 40, .rec = VIL_REC_MAMBA, .chunk = 16},
    /* the forward's two kernels forced where the other one is chosen: the pair kernel (one
     * thread per channel) sequential and chunked at small B x E, the quad kernel (four) with a
     * partial last block (264 = 8 x 32 + 8), N = 4 and 8 (1 and 2 states a thread), rows that
     * take 8-byte copies (E = 36) and plain loads (E = 37), both forms */
    {.op = "scan", .name = "pair kernel, chunked, L = 4097", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 1, .L = 4097, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .split = 1},
    {.op = "scan", .name = "pair kernel, chunked, L = 730", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 730, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .rec = VIL_REC_MAMBA, .split = 1},
    {.op = "scan", .name = "pair kernel, sequential", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .chunk = -1, .split = 1},
    {.op = "scan", .name = "quad kernel, sequential, partial last block", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 264, .N = 16, .dt_ld = 9, .xdbl_ld = 48, .chunk = -1, .split = 4},
    {.op = "scan", .name = "quad kernel, chunked, partial last block", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 264, .N = 16, .dt_ld = 9, .xdbl_ld = 48, .rec = VIL_REC_MAMBA, .chunk = 40, .split = 4},
    {.op = "scan", .name = "quad kernel, N = 8", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 33, .E = 72, .N = 8, .dt_ld = 5, .xdbl_ld = 21, .chunk = -1, .split = 4},
    {.op = "scan", .name = "quad kernel, chunked, N = 4", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 26, .E = 48, .N = 4, .dt_ld = 2, .xdbl_ld = 10, .rec = VIL_REC_MAMBA, .chunk = 16, .split = 4},
    {.op = "scan", .name = "quad kernel, N = 4", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 26, .E = 48, .N = 4, .dt_ld = 2, .xdbl_ld = 10, .chunk = -1, .split = 4},
    {.op = "scan", .name = "quad kernel, 8-byte copies (E = 36)", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 3, .L = 101, .E = 36, .N = 16, .dt_ld = 4, .xdbl_ld = 40, .chunk = -1, .split = 4},
    {.op = "scan", .name = "quad kernel, chunked, plain loads (E = 37)", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 99, .E = 37, .N = 16, .dt_ld = 4, .xdbl_ld = 40, .rec = VIL_REC_MAMBA, .chunk = 24, .split = 4},
    {.op = "scan", .name = "quad kernel, L = 1", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 1, .L = 1, .E = 37, .N = 16, .dt_ld = 4, .xdbl_ld = 40, .chunk = -1, .split = 4},
    /* the backward from the chunk-boundary states the forward kept (training at long sequences):
     * chunks by shape and forced, Longhorn and Mamba, N = 16, 8 and 4, a partial channel block,
     * rows that take plain loads (E = 37), two chunks and many */
    {.op = "scan", .name = "kept states, chunks by shape, L = 4097", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 1, .L = 4097, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .keep = 1},
    {.op = "scan", .name = "kept states, chunks by shape, L = 730", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 730, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .rec = VIL_REC_MAMBA, .keep = 1},
    {.op = "scan", .name = "kept states, chunk 24, partial channel block", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 264, .N = 16, .dt_ld = 9, .xdbl_ld = 48, .chunk = 24, .keep = 1},
    {.op = "scan", .name = "kept states, chunk 64, partial channel block", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 264, .N = 16, .dt_ld = 9, .xdbl_ld = 48, .rec = VIL_REC_MAMBA, .chunk = 64, .keep = 1},
    {.op = "scan", .name = "kept states, two chunks", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 1, .L = 200, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .chunk = 100, .keep = 1},
    {.op = "scan", .name = "kept states, chunk 8, N = 8", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 33, .E = 72, .N = 8, .dt_ld = 5, .xdbl_ld = 21, .chunk = 8, .keep = 1},
    {.op = "scan", .name = "kept states, chunk 16, N = 4", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 26, .E = 48, .N = 4, .dt_ld = 2, .xdbl_ld = 10, .rec = VIL_REC_MAMBA, .chunk = 16, .keep = 1},
    {.op = "scan", .name = "kept states, plain loads (E = 37), N = 8", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 130, .E = 37, .N = 8, .dt_ld = 4, .xdbl_ld = 24, .chunk = 24, .keep = 1},
    {.op = "scan", .name = "kept states, plain loads (E = 37)", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 1, .L = 99, .E = 37, .N = 16, .dt_ld = 4, .xdbl_ld = 40, .rec = VIL_REC_MAMBA, .chunk = 16, .keep = 1},
    {.op = "scan", .name = "kept states, L = 16385", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 1, .L = 16385, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .keep = 1},
    /* a long sequence whose B x E the forward alone would run sequentially: kept, it cuts the
     * backward's chunks (ViM-Tiny at 1024 px b32 has B x E = 12,288) */
    {.op = "scan", .name = "kept states, where the forward alone is sequential", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 1, .L = 2048, .E = 12289, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .rec = VIL_REC_MAMBA, .keep = 1},
    /* a given initial state (h0 random, scale 1) on every path, Longhorn and Mamba, at L = 197,
     * 730 and 4097: the pair kernel sequential and chunked, the quad kernel sequential and chunked,
     * chunks by shape, the backward from kept states; outputs, final states and gradients against
     * the CPU op with the same h0 */
    {.op = "scan", .name = "h0, pair kernel, sequential, L = 197", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .chunk = -1, .split = 1, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, quad kernel, sequential, partial last block", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 264, .N = 16, .dt_ld = 9, .xdbl_ld = 48, .chunk = -1, .split = 4, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, pair kernel, chunk 64, L = 730", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 2, .L = 730, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .chunk = 64, .split = 1, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, quad kernel, chunk 64, L = 730", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 2, .L = 730, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .chunk = 64, .split = 4, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, chunks by shape, L = 197", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, kept states, chunk 64, partial channel block", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 264, .N = 16, .dt_ld = 9, .xdbl_ld = 48, .chunk = 64, .keep = 1, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, pair kernel, sequential, L = 4097", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 1, .L = 4097, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .chunk = -1, .split = 1, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, quad kernel, sequential, L = 4097", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 1, .L = 4097, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .chunk = -1, .split = 4, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, chunks by shape, L = 4097", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 1, .L = 4097, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, kept states, chunks by shape, L = 4097", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 1, .L = 4097, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .keep = 1, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, staging, plain loads (E = 37), N = 8", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 130, .E = 37, .N = 8, .dt_ld = 4, .xdbl_ld = 24, .chunk = 24, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, quad kernel, chunked, plain loads (E = 37)", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 99, .E = 37, .N = 16, .dt_ld = 4, .xdbl_ld = 40, .chunk = 24, .split = 4, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, pair kernel, sequential, L = 197", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .chunk = -1, .split = 1, .rec = VIL_REC_MAMBA, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, quad kernel, sequential, L = 730", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 2, .L = 730, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .chunk = -1, .split = 4, .rec = VIL_REC_MAMBA, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, pair kernel, chunk 64, partial channel block", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 264, .N = 16, .dt_ld = 9, .xdbl_ld = 48, .chunk = 64, .split = 1, .rec = VIL_REC_MAMBA, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, quad kernel, chunk 40, partial last block", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 264, .N = 16, .dt_ld = 9, .xdbl_ld = 48, .chunk = 40, .split = 4, .rec = VIL_REC_MAMBA, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, chunks by shape, L = 730", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 2, .L = 730, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .rec = VIL_REC_MAMBA, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, kept states, chunks by shape, L = 730", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 2, .L = 730, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .keep = 1, .rec = VIL_REC_MAMBA, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, pair kernel, sequential, L = 4097", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 1, .L = 4097, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .chunk = -1, .split = 1, .rec = VIL_REC_MAMBA, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, chunks by shape, L = 4097", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 2, .L = 4097, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .rec = VIL_REC_MAMBA, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, kept states, chunk 64, L = 4097", .tol = TOL_BF16, .tol_f32 = TOL_F32, .only = FULL,
     .B = 1, .L = 4097, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .chunk = 64, .keep = 1, .rec = VIL_REC_MAMBA, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, kept states, chunk 16, N = 4", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 26, .E = 48, .N = 4, .dt_ld = 2, .xdbl_ld = 10, .chunk = 16, .keep = 1, .rec = VIL_REC_MAMBA, .h0 = H0_RANDOM},
    {.op = "scan", .name = "h0, quad kernel, N = 8", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 33, .E = 72, .N = 8, .dt_ld = 5, .xdbl_ld = 21, .chunk = -1, .split = 4, .rec = VIL_REC_MAMBA, .h0 = H0_RANDOM},
    /* the final states of a zero start */
    {.op = "scan", .name = "final states alone, pair kernel, sequential", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .chunk = -1, .split = 1, .h0 = HT_ONLY},
    {.op = "scan", .name = "final states alone, quad kernel, chunk 64", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 730, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .rec = VIL_REC_MAMBA, .chunk = 64, .split = 4,
     .h0 = HT_ONLY},
    /* h0 given as zeros: bitwise the outputs of h0 = NULL (the kernels compiled with the initial
     * state against those without), each kernel family */
    {.op = "scan", .name = "h0 = 0, pair kernel, sequential", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .chunk = -1, .split = 1, .h0 = H0_ZERO},
    {.op = "scan", .name = "h0 = 0, quad kernel, sequential", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 264, .N = 16, .dt_ld = 9, .xdbl_ld = 48, .rec = VIL_REC_MAMBA, .chunk = -1, .split = 4, .h0 = H0_ZERO},
    {.op = "scan", .name = "h0 = 0, quad kernel, chunk 64", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .chunk = 64, .split = 4, .h0 = H0_ZERO},
    {.op = "scan", .name = "h0 = 0, pair kernel, chunk 64", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .rec = VIL_REC_MAMBA, .chunk = 64, .split = 1, .h0 = H0_ZERO},
    {.op = "scan", .name = "h0 = 0, kept states, chunk 24", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 264, .N = 16, .dt_ld = 9, .xdbl_ld = 48, .chunk = 24, .keep = 1, .h0 = H0_ZERO},
    /* every recurrence of the table on each kernel family: the pair and quad kernels sequential
     * and chunked, N = 16, 8 and 4, partial channel blocks, rows that take plain loads (E = 37),
     * the backward from kept states, h0 and h0 = 0 (Longhorn's and Mamba's own rows are above) */
    {.op = "scan", .name = "every recurrence, pair kernel, sequential, partial channel block", .tol = TOL_BF16,
     .tol_f32 = TOL_F32, .each_rec = 1,
     .B = 2, .L = 197, .E = 264, .N = 16, .dt_ld = 9, .xdbl_ld = 48, .chunk = -1, .split = 1},
    {.op = "scan", .name = "every recurrence, quad kernel, sequential, N = 8", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .each_rec = 1,
     .B = 2, .L = 33, .E = 72, .N = 8, .dt_ld = 5, .xdbl_ld = 21, .chunk = -1, .split = 4},
    {.op = "scan", .name = "every recurrence, pair kernel, chunk 16, N = 4", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .each_rec = 1,
     .B = 2, .L = 26, .E = 48, .N = 4, .dt_ld = 2, .xdbl_ld = 10, .chunk = 16, .split = 1},
    {.op = "scan", .name = "every recurrence, quad kernel, chunk 40, partial last block", .tol = TOL_BF16,
     .tol_f32 = TOL_F32, .each_rec = 1,
     .B = 2, .L = 197, .E = 264, .N = 16, .dt_ld = 9, .xdbl_ld = 48, .chunk = 40, .split = 4},
    {.op = "scan", .name = "every recurrence, kept states, chunk 24, plain loads (E = 37)", .tol = TOL_BF16,
     .tol_f32 = TOL_F32, .each_rec = 1,
     .B = 2, .L = 197, .E = 37, .N = 16, .dt_ld = 4, .xdbl_ld = 40, .chunk = 24, .keep = 1},
    {.op = "scan", .name = "every recurrence, h0, chunks by shape, L = 730", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .each_rec = 1,
     .B = 2, .L = 730, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .h0 = H0_RANDOM},
    {.op = "scan", .name = "every recurrence, h0 = 0, quad kernel, chunk 64", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .each_rec = 1,
     .B = 2, .L = 197, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .chunk = 64, .split = 4, .h0 = H0_ZERO},
    {.op = "scan", .name = "every recurrence, chunks by shape, L = 4097", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .each_rec = 1, .only = FULL,
     .B = 1, .L = 4097, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35},
    /* the causal scan (direction 0 alone) on each kernel family: the pair and quad kernels
     * sequential and chunked, chunks by shape, kept states, N = 16, 8 and 4, partial channel
     * blocks, plain loads (E = 37), h0, h0 = 0 and none; each in one call and in chunks of
     * `chunks` tokens carrying the state */
    {.op = "scan", .name = "causal, pair kernel, sequential, h0", .tol = TOL_BF16, .tol_f32 = TOL_F32, .each_rec = 1,
     .B = 2, .L = 197, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .chunk = -1, .split = 1, .h0 = H0_RANDOM,
     .causal = 1, .chunks = 64},
    {.op = "scan", .name = "causal, quad kernel, sequential, partial last block", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .each_rec = 1, .B = 2, .L = 197, .E = 264, .N = 16, .dt_ld = 9, .xdbl_ld = 48, .chunk = -1, .split = 4,
     .h0 = H0_RANDOM, .causal = 1, .chunks = 50},
    {.op = "scan", .name = "causal, chunks by shape, L = 730", .tol = TOL_BF16, .tol_f32 = TOL_F32, .each_rec = 1,
     .B = 2, .L = 730, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .h0 = H0_RANDOM, .causal = 1, .chunks = 224},
    {.op = "scan", .name = "causal, pair kernel, chunk 24, partial channel block", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 264, .N = 16, .dt_ld = 9, .xdbl_ld = 48, .chunk = 24, .split = 1, .rec = VIL_REC_MAMBA,
     .causal = 1, .chunks = 100},
    {.op = "scan", .name = "causal, quad kernel, chunk 40, partial last block", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 264, .N = 16, .dt_ld = 9, .xdbl_ld = 48, .chunk = 40, .split = 4, .h0 = H0_RANDOM,
     .causal = 1, .chunks = 80},
    {.op = "scan", .name = "causal, kept states, chunk 24, plain loads (E = 37)", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .each_rec = 1, .B = 2, .L = 197, .E = 37, .N = 16, .dt_ld = 4, .xdbl_ld = 40, .chunk = 24, .keep = 1,
     .h0 = H0_RANDOM, .causal = 1, .chunks = 64},
    {.op = "scan", .name = "causal, quad kernel, sequential, N = 8", .tol = TOL_BF16, .tol_f32 = TOL_F32, .each_rec = 1,
     .B = 2, .L = 33, .E = 72, .N = 8, .dt_ld = 5, .xdbl_ld = 21, .chunk = -1, .split = 4, .causal = 1, .chunks = 8},
    {.op = "scan", .name = "causal, pair kernel, chunk 16, N = 4", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 26, .E = 48, .N = 4, .dt_ld = 2, .xdbl_ld = 10, .chunk = 16, .split = 1, .rec = VIL_REC_MAMBA,
     .h0 = H0_RANDOM, .causal = 1, .chunks = 13},
    {.op = "scan", .name = "causal, h0 = 0, pair kernel, chunk 64", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 72, .N = 16, .dt_ld = 5, .xdbl_ld = 37, .chunk = 64, .split = 1, .h0 = H0_ZERO,
     .causal = 1, .chunks = 100},
    {.op = "scan", .name = "causal, h0 = 0, quad kernel, sequential", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .L = 197, .E = 264, .N = 16, .dt_ld = 9, .xdbl_ld = 48, .chunk = -1, .split = 4, .rec = VIL_REC_MAMBA,
     .h0 = H0_ZERO, .causal = 1, .chunks = 100},
    {.op = "scan", .name = "causal, L = 1", .tol = TOL_BF16, .tol_f32 = TOL_F32, .each_rec = 1,
     .B = 2, .L = 1, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .chunk = -1, .h0 = H0_RANDOM, .causal = 1, .chunks = 1},
    {.op = "scan", .name = "causal, kept states, chunks by shape, L = 4097", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .each_rec = 1, .only = FULL, .B = 1, .L = 4097, .E = 40, .N = 16, .dt_ld = 3, .xdbl_ld = 35, .keep = 1,
     .h0 = H0_RANDOM, .causal = 1, .chunks = 1000},
    {.op = "softmax_xent", .name = "B = 3, C = 5", .tol_f32 = 1e-6,
     .B = 3, .C = 5},
    {.op = "softmax_xent", .name = "C = 1000", .tol_f32 = 1e-6,
     .B = 7, .C = 1000},
    {.op = "adamw", .name = "n = 1001", .tol = TOL_BF16, .tol_f32 = 1e-6,
     .n = 1001},
    {.op = "adamw", .name = "n = 7", .tol = TOL_BF16, .tol_f32 = 1e-6,
     .n = 7},
    {.op = "adamw", .name = "adam: L2 weight decay, n = 1001", .tol = TOL_BF16, .tol_f32 = 1e-6,
     .n = 1001, .l2 = 1},
    {.op = "sgd", .name = "momentum 0.9, n = 1001", .tol = TOL_BF16, .tol_f32 = 1e-6,
     .n = 1001, .momentum = 0.9f},
    {.op = "sgd", .name = "Nesterov, n = 7", .tol = TOL_BF16, .tol_f32 = 1e-6,
     .n = 7, .momentum = 0.8f, .nesterov = 1},
    {.op = "lamb", .name = "one tensor, n = 1001", .tol = TOL_BF16, .tol_f32 = 1e-5,
     .n = 1001},
    {.op = "lamb", .name = "19 tensors with gaps, n = 200000", .tol = TOL_BF16, .tol_f32 = 1e-5,
     .n = 200000, .spans = 19},
    {.op = "lamb", .name = "lambc: the trust ratio clipped, 8 tensors", .tol = TOL_BF16, .tol_f32 = 1e-5,
     .n = 120000, .spans = 8, .trust_clip = 1},
    {.op = "ema", .name = "decay 0.99", .tol_f32 = 1e-6,
     .n = 1001, .decay = 0.99f},
    {.op = "ema", .name = "decay 0.99996", .tol_f32 = 1e-6,
     .n = 7, .decay = 0.99996f},
    /* the initial-state interventions: S = 2 N E of a layer (ViL-Tiny: 2 x 16 x 192) */
    {.op = "state_init", .name = "noise, sigma 0.5", .tol_f32 = 1e-5,
     .B = 5, .S = 6144, .init = INIT_SIGMA, .sigma = 0.5f},
    {.op = "state_init", .name = "fitted noise: mean and var per element", .tol_f32 = 1e-5,
     .B = 3, .S = 6144, .init = INIT_FITTED},
    {.op = "state_init", .name = "noise, sigma 0: zeros", .tol_f32 = 1e-5,
     .B = 2, .S = 1000, .init = INIT_SIGMA, .sigma = 0.0f},
    {.op = "state_init", .name = "passing, drop 0.3", .tol_f32 = 0,
     .B = 64, .S = 520, .init = INIT_PASSING, .drop = 0.3f},
    {.op = "state_init", .name = "fitted noise: one mean and var per direction (group N E), drop 0.1", .tol_f32 = 1e-5,
     .B = 64, .S = 6144, .init = INIT_FITTED, .group = 3072, .drop = 0.1f},
    {.op = "state_init", .name = "fitted mean alone, drop 0.3", .tol_f32 = 0,
     .B = 64, .S = 520, .init = INIT_FITTED, .mean_only = 1, .drop = 0.3f},
    {.op = "state_moments", .name = "B = 32, S = 6144", .tol_f32 = 1e-6,
     .B = 32, .S = 6144},
    {.op = "state_moments", .name = "B = 1, S = 7", .tol_f32 = 1e-6,
     .B = 1, .S = 7},
    {.op = "state_fit", .name = "keep 0.9", .tol_f32 = 1e-6,
     .n = 6144, .B = 32, .keep_f = 0.9f},
    {.op = "state_fit", .name = "keep 0: the batch's moments", .tol_f32 = 1e-6,
     .n = 1001, .B = 3, .keep_f = 0.0f},
    {.op = "state_fit", .name = "scalar: one pair per group of N E = 3072, keep 0.9", .tol_f32 = 1e-6,
     .n = 4 * 6144, .B = 16, .keep_f = 0.9f, .group = 3072},
    {.op = "grad_clip", .name = "n = 7", .tol_f32 = 1e-6,
     .n = 7, .max_norm = 0.5f},
    {.op = "grad_clip", .name = "n = 1000003", .tol_f32 = 1e-6,
     .n = 1000003, .max_norm = 10.0f},
    {.op = "grad_clip", .name = "under the limit", .tol_f32 = 1e-6,
     .n = 1000003, .max_norm = 1e4f},
    {.op = "patch_embed", .name = "overlapping patches (stride < patch)", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .C = 3, .H = 16, .P = 4, .S = 3, .D = 20},
    {.op = "patch_embed", .name = "patch 16", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .C = 3, .H = 32, .P = 16, .S = 16, .D = 40},
    {.op = "patch_embed", .name = "one channel, patch 4", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 1, .C = 1, .H = 28, .P = 4, .S = 4, .D = 24},
    /* image sides not a multiple of the patch: the last pixels belong to no patch (dimg 0 there);
     * P = 8 takes the 16-byte patch-row path, P = 7 the one-pixel path */
    {.op = "patch_embed", .name = "side not a multiple of the patch, P = 8", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 2, .C = 3, .H = 36, .P = 8, .S = 8, .D = 24},
    {.op = "patch_embed", .name = "side not a multiple of the patch, P = 7", .tol = TOL_BF16, .tol_f32 = TOL_F32,
     .B = 1, .C = 2, .H = 30, .P = 7, .S = 7, .D = 16},
    {.op = "tokens", .name = "class token in the middle", .tol = TOL_BF16, .tol_f32 = 1e-6,
     .B = 2, .M = 196, .D = 40, .t = 98},
    {.op = "tokens", .name = "class token at 12", .tol = TOL_BF16, .tol_f32 = 1e-6,
     .B = 2, .M = 25, .D = 20, .t = 12},
    {.op = "tokens", .name = "one patch, class token first", .tol = TOL_BF16, .tol_f32 = 1e-6,
     .B = 3, .M = 1, .D = 8, .t = 0},
    {.op = "tokens", .name = "no position embedding (pos, dpos NULL)", .tol = TOL_BF16, .tol_f32 = 1e-6,
     .B = 2, .M = 49, .D = 24, .t = 24, .no_pos = 1},

};
#define N_CASES (int)(sizeof CASES / sizeof CASES[0])

#define OP_NAME(op, Args, label) #op,
static const char *const VIL_OP_NAMES[] = {VIL_OPS(OP_NAME)};
#undef OP_NAME
#define N_VIL_OPS (int)(sizeof VIL_OP_NAMES / sizeof VIL_OP_NAMES[0])

static int vil_op_index(const char *name) {
    for (int i = 0; i < N_VIL_OPS; i++)
        if (strcmp(VIL_OP_NAMES[i], name) == 0) return i;
    return -1;
}
static int family_index(const char *name) {
    for (int f = 0; f < N_FAMILIES; f++)
        if (strcmp(FAMILIES[f].name, name) == 0) return f;
    return -1;
}
static int family_checks(int f, const char *op) {
    for (int j = 0; j < 2; j++)
        if (FAMILIES[f].ops[j] && strcmp(FAMILIES[f].ops[j], op) == 0) return 1;
    return 0;
}
static const char *exempt_why(const char *op) {
    for (int i = 0; i < N_EXEMPT; i++)
        if (strcmp(EXEMPT[i].op, op) == 0) return EXEMPT[i].why;
    return NULL;
}

/* Every op of VIL_OPS has a case or an exemption (one check per op), and every name the tables
 * give is one of VIL_OPS or of FAMILIES (one check). Needs no GPU. */
static void check_coverage(void) {
    char unknown[512] = "";
    size_t len = 0;
#define UNKNOWN(nm) len += (size_t)snprintf(unknown + len, len < sizeof unknown ? sizeof unknown - len : 0, " %s", nm)
    for (int f = 0; f < N_FAMILIES; f++)
        for (int j = 0; j < 2; j++)
            if (FAMILIES[f].ops[j] && vil_op_index(FAMILIES[f].ops[j]) < 0) UNKNOWN(FAMILIES[f].ops[j]);
    for (int i = 0; i < N_EXEMPT; i++)
        if (vil_op_index(EXEMPT[i].op) < 0) UNKNOWN(EXEMPT[i].op);
    for (int k = 0; k < N_CASES; k++)
        if (family_index(CASES[k].op) < 0) UNKNOWN(CASES[k].op);
#undef UNKNOWN
    T_CHECK(len == 0, "gpu_ops.c's tables name ops that are neither in VIL_OPS nor in FAMILIES:%s", unknown);
    int covered = 0;
    for (int i = 0; i < N_VIL_OPS; i++) {
        const char *op = VIL_OP_NAMES[i];
        int cases = 0;
        for (int k = 0; k < N_CASES; k++) {
            int f = family_index(CASES[k].op);
            if (f >= 0 && family_checks(f, op)) cases++;
        }
        covered += cases > 0;
        T_CHECK(cases > 0 || exempt_why(op), "%s (VIL_OPS) has no case in gpu_ops.c's CASES and no EXEMPT entry", op);
    }
    printf("coverage: %d of the %d ops of VIL_OPS have cases, %d exempt\n", covered, N_VIL_OPS, N_EXEMPT);
}

static void usage(FILE *out) {
    fprintf(out, "usage: gpu_ops [quick] [OP...]\nOP, a family (the ops of VIL_OPS it checks):\n");
    for (int f = 0; f < N_FAMILIES; f++)
        fprintf(out, "  %-13s %s%s%s\n", FAMILIES[f].name, FAMILIES[f].ops[0], FAMILIES[f].ops[1] ? " " : "",
                FAMILIES[f].ops[1] ? FAMILIES[f].ops[1] : "");
    fprintf(out, "or an op of VIL_OPS. Without a case:\n");
    for (int i = 0; i < N_EXEMPT; i++) fprintf(out, "  %s: %s\n", EXEMPT[i].op, EXEMPT[i].why);
}

/* the seed of the k-th case of family op: the same inputs whichever cases run */
static uint64_t case_seed(const char *op, int k) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = op; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return 20261122u + h + (uint64_t)k;
}

int main(int argc, char **argv) {
    int quick = 0, chosen = 0, want[N_FAMILIES] = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "quick") == 0) {
            quick = 1;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        int f = family_index(a), known = f >= 0 || vil_op_index(a) >= 0;
        if (!known) {
            fprintf(stderr, "gpu_ops: unknown op '%s'\n", a);
            usage(stderr);
            return 2;
        }
        chosen = 1;
        for (int g = 0; g < N_FAMILIES; g++)
            if (g == f || family_checks(g, a)) want[g] = 1;
        if (exempt_why(a)) printf("%s has no case: %s\n", a, exempt_why(a));
    }
    check_coverage();

    char why[256];
    if (!vil_cuda_available(why, sizeof why)) {
        printf("no usable GPU: %s\n", why);
        T_CHECK(0, "gpu_ops needs a CUDA device");
        return t_finish();
    }
    if (!(G = vil_backend_get("cuda"))) {
        T_CHECK(0, "gpu_ops: the CUDA backend does not open");
        return t_finish();
    }
    int nth[N_FAMILIES] = {0};
    for (int k = 0; k < N_CASES; k++) {
        const OpCase *c = &CASES[k];
        int f = family_index(c->op);
        if (f < 0) continue; /* failed check_coverage */
        int idx = nth[f]++;
        if ((chosen && !want[f]) || c->only == (quick ? FULL : QUICK)) continue;
        vil_rng_seed(&rng, case_seed(c->op, idx));
        printf("-- %s: %s\n", c->op, c->name);
        FAMILIES[f].run(c);
    }
    return t_finish();
}
