/* gpu_ops.c: every CUDA op against the float32 CPU reference of ops_cpu.h, on random inputs of
 * odd sizes (L = 1, 7, 197, 730; channel counts that are not multiples of 32; strided inputs).
 * bf16 ("act") inputs are rounded to bf16 on the host first, so both backends see the same
 * numbers and the error measured is the CUDA op's own. Outputs are poisoned (all bits set: NaN)
 * before each op, so an element the op failed to write shows up as NaN; elements an op must not
 * touch (padding columns of strided outputs) are checked to still hold the poison. Each check
 * prints ||gpu - cpu|| / ||cpu|| and its tolerance: bf16 outputs 1e-2 (one bf16 rounding is
 * 2^-9 = 2e-3 per element); float32 outputs computed from the same inputs 1e-4 or tighter. */
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
static void test_linear(int N, int C, int OC, int ld, int ldo, int bias, int f32out, int acc) {
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
    T_CLOSE(nm, rel_l2(out_g, out_c, N, OC, ldo), f32out ? TOL_F32 : TOL_BF16);
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
    double tol_g = f32out ? TOL_BF16 : TOL_F32; /* the head's dout is rounded to bf16 */
    snprintf(nm, sizeof nm, "linear bwd dinp N=%d C=%d OC=%d ld=%d%s", N, C, OC, ld, acc ? " +=" : "");
    T_CLOSE(nm, rel_l2(dinp_g, dinp_c, N, C, ld), TOL_BF16);
    if (!acc && ld > C) T_CHECK(untouched(d_dinp, N, ld, 0, C) == 0, "linear bwd wrote past C in dinp");
    /* dw accumulates onto random values: compare the increment */
    for (size_t i = 0; i < (size_t)OC * C; i++) dw_g[i] -= dw0[i], dw_c[i] -= dw0[i];
    snprintf(nm, sizeof nm, "linear bwd dw   N=%d C=%d OC=%d", N, C, OC);
    T_CLOSE(nm, rel(dw_g, dw_c, (size_t)OC * C), tol_g);
    if (bias) {
        for (int i = 0; i < OC; i++) db_g[i] -= db0[i], db_c[i] -= db0[i];
        snprintf(nm, sizeof nm, "linear bwd db   N=%d OC=%d", N, OC);
        T_CLOSE(nm, rel(db_g, db_c, OC), f32out ? 1e-6 : TOL_F32);
    }
    G->free(G, d_in), G->free(G, d_w), G->free(G, d_out), G->free(G, d_dout), G->free(G, d_dinp), G->free(G, d_dw), G->free(G, d_db);
    if (d_b) G->free(G, d_b);
    free(in), free(w), free(b), free(out_c), free(out_g), free(dout), free(dinp_c), free(dinp0);
    free(dw_c), free(db_c), free(dw0), free(db0), free(dinp_g), free(dw_g), free(db_g);
}

/* ---------------- add + rmsnorm ---------------- */
static void test_norm(int B, int L, int D, int with_res, int with_scale) {
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
    T_CLOSE(nm, rel(res_g, res_c, n), 1e-6);
    snprintf(nm, sizeof nm, "add_rmsnorm fwd normed B=%d L=%d D=%d", B, L, D);
    T_CLOSE(nm, rel(normed_g, normed_c, n), TOL_BF16);
    snprintf(nm, sizeof nm, "add_rmsnorm fwd rstd B=%d L=%d D=%d", B, L, D);
    T_CLOSE(nm, rel(rstd_g, rstd_c, (size_t)B * L), 1e-5);

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
    T_CLOSE(nm, rel(dres_g, dres_c, n), 1e-5);
    snprintf(nm, sizeof nm, "add_rmsnorm bwd dh   B=%d L=%d D=%d", B, L, D);
    T_CLOSE(nm, rel(dh_g, dh_c, n), TOL_BF16);
    snprintf(nm, sizeof nm, "add_rmsnorm bwd dw   B=%d L=%d D=%d", B, L, D);
    T_CLOSE(nm, rel(dw_g, dw_c, D), 1e-5);
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
static void test_conv_bidir(int B, int L, int E, int K) {
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
            T_CLOSE(nm, rel(ug, uc[j], nu), TOL_BF16);
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
    T_CLOSE(nm, rel_l2(dx_g, dx_c, (size_t)B * L, E, ldx), TOL_BF16);
    T_CHECK(untouched(d_dx, (size_t)B * L, ldx, 0, E) == 0, "conv1d bidir bwd wrote outside x's columns");
    for (int j = 0; j < 2; j++) {
        float *dw_g = get_f32(d_dw[j], (size_t)E * K), *db_g = get_f32(d_db[j], E);
        for (int i = 0; i < E * K; i++) dw_g[i] -= dw0[j][i], dw_c[j][i] -= dw0[j][i];
        for (int i = 0; i < E; i++) db_g[i] -= db0[j][i], db_c[j][i] -= db0[j][i];
        snprintf(nm, sizeof nm, "conv1d+silu bidir bwd dw[%d] B=%d L=%d E=%d K=%d", j, B, L, E, K);
        T_CLOSE(nm, rel(dw_g, dw_c[j], (size_t)E * K), TOL_F32);
        snprintf(nm, sizeof nm, "conv1d+silu bidir bwd db[%d] B=%d L=%d E=%d", j, B, L, E);
        T_CLOSE(nm, rel(db_g, db_c[j], E), TOL_F32);
        free(dw_g), free(db_g);
        G->free(G, d_w[j]), G->free(G, d_b[j]), G->free(G, d_du[j]), G->free(G, d_dw[j]), G->free(G, d_db[j]);
        free(w[j]), free(b[j]), free(du[j]), free(dw_c[j]), free(db_c[j]), free(dw0[j]), free(db0[j]);
    }
    G->free(G, d_x), G->free(G, d_dx);
    free(x), free(dx_c), free(dx_g);
}

/* ---------------- the bidirectional scan ---------------- */
/* x_dbl rows are ldx >= dt_ld + 2N apart (k at column dt_ld) (the model pads them to 8); chunk:
 * the GPU scan's chunks of tokens (-1 the sequential kernels, 0 chosen by shape); split: the
 * forward's threads per channel (0 chosen by shape, 1 the pair kernel, 4 the quad kernel); keep:
 * the forward keeps its chunk-boundary states for the backward (VilScanFwd.states), as the model
 * does in training (the shape must be one where the backend keeps them) */
static void test_scan_full(int B, int L, int E, int N, int dt_ld, int ldx, int mamba, int chunk, int split,
                           int keep) {
    char nm[160];
    const char *kind = mamba ? "mamba" : "longhorn";
    VilRecurrence rec = mamba ? VIL_REC_MAMBA : VIL_REC_LONGHORN;
    int W = ldx, ldz = 2 * E;
    size_t ne = (size_t)B * L * E, nw = (size_t)B * L * W, nz = (size_t)B * L * ldz;
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
    float *out_c = vil_malloc(ne * sizeof(float));
    scan_bidir_forward(&(VilScanFwd){.rec = rec, .out = out_c, .u = {cu[0], cu[1]}, .delta = {cdl[0], cdl[1]},
                                     .xdbl = {cxd[0], cxd[1]}, .z = xz + E, .D = {cD[0], cD[1]},
                                     .A_log = {mamba ? cA[0] : NULL, mamba ? cA[1] : NULL}, .B = B, .L = L, .E = E,
                                     .N = N, .dt_ld = dt_ld, .ldx = ldx, .ldz = ldz});
    void *d_out = dev_poison(ne * 2);
    VilScanFwd gfwd = {.rec = rec, .out = d_out, .u = {gu[0], gu[1]}, .delta = {gdl[0], gdl[1]},
                       .xdbl = {gxd[0], gxd[1]}, .z = (char *)d_xz + (size_t)E * 2,
                       .D = {gD[0], gD[1]}, .A_log = {mamba ? gA[0] : NULL, mamba ? gA[1] : NULL},
                       .B = B, .L = L, .E = E, .N = N, .dt_ld = dt_ld, .ldx = ldx, .ldz = ldz,
                       .chunk = chunk, .split = split};
    size_t sbytes = keep && G->scan_states_bytes ? G->scan_states_bytes(G, &gfwd) : 0;
    if (keep) T_CHECK(sbytes > 0, "scan %s B=%d L=%d E=%d chunk %d: the backend keeps no states here", kind, B, L, E, chunk);
    gfwd.states = sbytes ? dev_poison(sbytes) : NULL;
    G->scan_bidir_forward(G, &gfwd);
    float *out_g = get_act(d_out, ne);
    snprintf(nm, sizeof nm, "scan %s fwd B=%d L=%d E=%d N=%d chunk %d split %d%s", kind, B, L, E, N, chunk, split,
             keep ? " keeping states" : "");
    T_CLOSE(nm, rel(out_g, out_c, ne), TOL_BF16);

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
                                       .dA_log = {mamba ? dA_c[0] : NULL, mamba ? dA_c[1] : NULL},
                                       .ddelta_sum = {db_c[0], db_c[1]}, .dout = dout, .u = {cu[0], cu[1]},
                                       .delta = {cdl[0], cdl[1]}, .xdbl = {cxd[0], cxd[1]}, .z = xz + E,
                                       .D = {cD[0], cD[1]}, .A_log = {mamba ? cA[0] : NULL, mamba ? cA[1] : NULL},
                                       .B = B, .L = L, .E = E, .N = N, .dt_ld = dt_ld, .ldx = ldx, .ldz = ldz});
    void *d_dout = dev_act(dout, ne), *d_dz = dev_poison(nz * 2);
    VilScanBwd gbwd = {.rec = rec, .du = {g_du[0], g_du[1]}, .ddelta = {g_ddl[0], g_ddl[1]},
                       .dxdbl = {g_dxd[0], g_dxd[1]}, .dz = (char *)d_dz + (size_t)E * 2,
                       .dD = {g_dD[0], g_dD[1]}, .dA_log = {mamba ? g_dA[0] : NULL, mamba ? g_dA[1] : NULL},
                       .ddelta_sum = {g_db[0], g_db[1]}, .dout = d_dout, .u = {gu[0], gu[1]},
                       .delta = {gdl[0], gdl[1]}, .xdbl = {gxd[0], gxd[1]}, .z = (char *)d_xz + (size_t)E * 2,
                       .D = {gD[0], gD[1]}, .A_log = {mamba ? gA[0] : NULL, mamba ? gA[1] : NULL},
                       .B = B, .L = L, .E = E, .N = N, .dt_ld = dt_ld, .ldx = ldx, .ldz = ldz, .chunk = chunk,
                       .states = gfwd.states};
    G->scan_bidir_backward(G, &gbwd);
    for (int j = 0; j < 2; j++) {
        float *du_g = get_act(g_du[j], ne), *ddl_g = get_act(g_ddl[j], ne), *dxd_g = get_act(g_dxd[j], nw);
        float *dD_g = get_f32(g_dD[j], E), *dA_g = get_f32(g_dA[j], (size_t)E * N);
        snprintf(nm, sizeof nm, "scan %s bwd du[%d] B=%d L=%d E=%d N=%d chunk %d%s", kind, j, B, L, E, N, chunk,
                 keep ? " from kept states" : "");
        T_CLOSE(nm, rel(du_g, du_c[j], ne), TOL_BF16);
        snprintf(nm, sizeof nm, "scan %s bwd ddelta[%d] B=%d L=%d E=%d", kind, j, B, L, E);
        T_CLOSE(nm, rel(ddl_g, ddl_c[j], ne), TOL_BF16);
        snprintf(nm, sizeof nm, "scan %s bwd d%s[%d] B=%d L=%d E=%d", kind, mamba ? "B" : "k", j, B, L, E);
        T_CLOSE(nm, rel_l2(dxd_g + dt_ld, dxd_c[j] + dt_ld, (size_t)B * L, N, W), TOL_BF16);
        snprintf(nm, sizeof nm, "scan %s bwd d%s[%d] B=%d L=%d E=%d", kind, mamba ? "C" : "q", j, B, L, E);
        T_CLOSE(nm, rel_l2(dxd_g + dt_ld + N, dxd_c[j] + dt_ld + N, (size_t)B * L, N, W), TOL_BF16);
        T_CHECK(untouched(g_dxd[j], (size_t)B * L, W, dt_ld, dt_ld + 2 * N) == 0, "scan bwd wrote into the dt_low or padding columns");
        for (int e = 0; e < E; e++) dD_g[e] -= dD0[j][e], dD_c[j][e] -= dD0[j][e];
        snprintf(nm, sizeof nm, "scan %s bwd dD[%d] B=%d L=%d E=%d", kind, j, B, L, E);
        T_CLOSE(nm, rel(dD_g, dD_c[j], E), TOL_F32);
        /* dt_proj's bias gradient, summed by the scan (the GPU sums its fp32 ddelta before the
         * bf16 rounding of the stored one) */
        float *db_g = get_f32(g_db[j], E);
        for (int e = 0; e < E; e++) db_g[e] -= db0[j][e], db_c[j][e] -= db0[j][e];
        snprintf(nm, sizeof nm, "scan %s bwd sum ddelta[%d] B=%d L=%d E=%d", kind, j, B, L, E);
        T_CLOSE(nm, rel(db_g, db_c[j], E), TOL_BF16);
        free(db_g);
        if (mamba) {
            for (size_t i = 0; i < (size_t)E * N; i++) dA_g[i] -= dA0[j][i], dA_c[j][i] -= dA0[j][i];
            snprintf(nm, sizeof nm, "scan %s bwd dA_log[%d] B=%d L=%d E=%d", kind, j, B, L, E);
            T_CLOSE(nm, rel(dA_g, dA_c[j], (size_t)E * N), 1e-3);
        }
        free(du_g), free(ddl_g), free(dxd_g), free(dD_g), free(dA_g);
    }
    float *dz_g = get_act(d_dz, nz);
    snprintf(nm, sizeof nm, "scan %s bwd dz B=%d L=%d E=%d", kind, B, L, E);
    T_CLOSE(nm, rel_l2(dz_g + E, dz_c + E, (size_t)B * L, E, ldz), TOL_BF16);
    T_CHECK(untouched(d_dz, (size_t)B * L, ldz, E, ldz) == 0, "scan bwd wrote outside dz's columns");

    /* determinism: a second backward gives the same bits */
    uint16_t *h1 = vil_malloc(nw * 2), *h2 = vil_malloc(nw * 2);
    G->to_host(G, h1, g_dxd[0], nw * 2);
    G->scan_bidir_backward(G, &gbwd);
    G->to_host(G, h2, g_dxd[0], nw * 2);
    T_CHECK(memcmp(h1, h2, nw * 2) == 0, "scan %s bwd: dk/dq differ between two identical runs", kind);
    free(h1), free(h2);

    for (int j = 0; j < 2; j++) {
        G->free(G, d_u[j]), G->free(G, d_dl[j]), G->free(G, d_xd[j]), G->free(G, d_Dk[j]), G->free(G, d_Al[j]);
        G->free(G, g_du[j]), G->free(G, g_ddl[j]), G->free(G, g_dxd[j]), G->free(G, g_dD[j]), G->free(G, g_dA[j]);
        free(u[j]), free(dl[j]), free(xd[j]), free(Dk[j]), free(Al[j]), free(du_c[j]), free(ddl_c[j]);
        free(dxd_c[j]), free(dD_c[j]), free(dA_c[j]), free(dD0[j]), free(dA0[j]);
        G->free(G, g_db[j]), free(db_c[j]), free(db0[j]);
    }
    G->free(G, d_xz), G->free(G, d_out), G->free(G, d_dout), G->free(G, d_dz);
    if (gfwd.states) G->free(G, gfwd.states);
    free(xz), free(out_c), free(out_g), free(dout), free(dz_c), free(dz_g);
}
static void test_scan_split(int B, int L, int E, int N, int dt_ld, int ldx, int mamba, int chunk, int split) {
    test_scan_full(B, L, E, N, dt_ld, ldx, mamba, chunk, split, 0);
}
static void test_scan(int B, int L, int E, int N, int dt_ld, int ldx, int mamba, int chunk) {
    test_scan_full(B, L, E, N, dt_ld, ldx, mamba, chunk, 0, 0);
}

/* ---------------- loss ---------------- */
static void test_loss(int B, int C) {
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
    T_CLOSE(nm, rel(loss_g, loss_c, B), 1e-6);
    snprintf(nm, sizeof nm, "softmax xent fwd probs B=%d C=%d", B, C);
    T_CLOSE(nm, rel(probs_g, probs_c, (size_t)B * C), 1e-6);
    float *dl_c = vil_malloc((size_t)B * C * sizeof(float)), *d_dl = dev_poison((size_t)B * C * 4);
    softmax_xent_backward(&(VilXentBwd){.dlogits = dl_c, .probs = probs_c, .targets = tg, .B = B, .C = C, .denom = 3L * B});
    G->softmax_xent_backward(G, &(VilXentBwd){.dlogits = d_dl, .probs = d_probs, .targets = d_tg, .B = B, .C = C, .denom = 3L * B});
    float *dl_g = get_f32(d_dl, (size_t)B * C);
    snprintf(nm, sizeof nm, "softmax xent bwd B=%d C=%d", B, C);
    T_CLOSE(nm, rel(dl_g, dl_c, (size_t)B * C), 1e-6);
    G->free(G, d_logits), G->free(G, d_tg), G->free(G, d_loss), G->free(G, d_probs), G->free(G, d_dl);
    free(logits), free(tg), free(loss_c), free(probs_c), free(loss_g), free(probs_g), free(dl_c), free(dl_g);
}

/* ---------------- AdamW ---------------- */
static void test_adamw(size_t n) {
    char nm[96];
    float *p = rnd(n, 1.0f), *m = vil_calloc(n, 4), *v = vil_calloc(n, 4);
    float *d_p = dev_f32(p, n), *d_m = dev_f32(m, n), *d_v = dev_f32(v, n);
    void *d_work = dev_poison(n * 2);
    unsigned char *decay = vil_malloc(n), *d_decay = G->alloc(G, n);
    for (size_t i = 0; i < n; i++) decay[i] = (unsigned char)(i % 5 != 2); /* a fifth exempt */
    G->to_device(G, d_decay, decay, n);
    for (int step = 1; step <= 3; step++) {
        float *g = rnd(n, 1.0f);
        VilAdamW hp = {.n = n, .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .wd = 0.05f, .step = step};
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
    snprintf(nm, sizeof nm, "adamw 3 steps p n=%zu", n);
    T_CLOSE(nm, rel(p_g, p, n), 1e-6);
    snprintf(nm, sizeof nm, "adamw 3 steps m, v n=%zu", n);
    T_CLOSE(nm, fmax(rel(m_g, m, n), rel(v_g, v, n)), 1e-6);
    snprintf(nm, sizeof nm, "adamw bf16 working copy n=%zu", n);
    T_CLOSE(nm, rel(w_g, p, n), TOL_BF16);
    G->free(G, d_p), G->free(G, d_m), G->free(G, d_v), G->free(G, d_work), G->free(G, d_decay);
    free(decay), free(p), free(m), free(v), free(p_g), free(m_g), free(v_g), free(w_g);
}

/* the weight EMA: three updates against the CPU op */
static void test_ema(size_t n, float decay) {
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
    T_CLOSE(nm, rel(e_g, e, n), 1e-6);
    G->free(G, d_e);
    free(e), free(e_g);
}

/* clip_grad_norm_: the norm (double sums in another order) and the scaled gradient */
static void test_grad_clip(size_t n, float max_norm) {
    char nm[96];
    float *g = rnd(n, 1.0f), norm_c = 0, norm_g = 0;
    float *d_g = dev_f32(g, n), *d_norm = G->alloc(G, sizeof(float));
    grad_clip(&(VilGradClip){.g = g, .n = n, .max_norm = max_norm, .norm = &norm_c});
    G->grad_clip(G, &(VilGradClip){.g = d_g, .n = n, .max_norm = max_norm, .norm = d_norm});
    G->to_host(G, &norm_g, d_norm, sizeof(float));
    float *g_g = get_f32(d_g, n);
    snprintf(nm, sizeof nm, "grad_clip norm n=%zu max %g", n, max_norm);
    T_CLOSE(nm, fabs((double)norm_g - norm_c) / norm_c, 1e-6);
    snprintf(nm, sizeof nm, "grad_clip g n=%zu max %g", n, max_norm);
    T_CLOSE(nm, rel(g_g, g, n), 1e-6);
    G->free(G, d_g), G->free(G, d_norm);
    free(g), free(g_g);
}

/* ---------------- patch embedding and tokens ---------------- */
static void test_patch(int B, int C, int H, int P, int S, int D) {
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
    T_CLOSE(nm, rel(out_g, out_c, no), TOL_BF16);
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
    T_CLOSE(nm, rel(dw_g, dw_c, nw), TOL_BF16);
    snprintf(nm, sizeof nm, "patch_embed bwd db B=%d P=%d S=%d D=%d", B, P, S, D);
    T_CLOSE(nm, rel(db_g, db_c, D), TOL_F32);
    snprintf(nm, sizeof nm, "patch_embed bwd dimg B=%d P=%d S=%d D=%d", B, P, S, D);
    T_CLOSE(nm, rel(dimg_g, dimg_c, ni), TOL_BF16);
    G->free(G, d_img), G->free(G, d_b), G->free(G, d_w), G->free(G, d_out), G->free(G, d_dout), G->free(G, d_dw);
    G->free(G, d_db), G->free(G, d_dimg);
    free(img), free(w), free(b), free(out_c), free(out_g), free(dout), free(dw_c), free(db_c);
    free(dw0), free(db0), free(dimg_c), free(dw_g), free(db_g), free(dimg_g);
}

static void test_tokens(int B, int M, int D, int t) {
    char nm[96];
    int L = M + 1;
    size_t np = (size_t)B * M * D, nx = (size_t)B * L * D;
    float *pt = rnd_bf(np, 1.0f), *cls = rnd(D, 1.0f), *pos = rnd((size_t)L * D, 1.0f);
    float *x_c = vil_malloc(nx * sizeof(float));
    tokens_forward(&(VilTokensFwd){.x = x_c, .patches = pt, .cls = cls, .pos = pos, .B = B, .M = M, .D = D, .t = t});
    void *d_pt = dev_act(pt, np);
    float *d_cls = dev_f32(cls, D), *d_pos = dev_f32(pos, (size_t)L * D), *d_x = dev_poison(nx * 4);
    G->tokens_forward(G, &(VilTokensFwd){.x = d_x, .patches = d_pt, .cls = d_cls, .pos = d_pos, .B = B, .M = M, .D = D, .t = t});
    float *x_g = get_f32(d_x, nx);
    snprintf(nm, sizeof nm, "tokens fwd B=%d M=%d D=%d t=%d", B, M, D, t);
    T_CLOSE(nm, rel(x_g, x_c, nx), 1e-7);
    float *dx = rnd(nx, 1.0f), *dp_c = vil_malloc(np * sizeof(float));
    float *dcls_c = rnd(D, 1.0f), *dpos_c = rnd((size_t)L * D, 1.0f);
    float *dcls0 = copy_f(dcls_c, D), *dpos0 = copy_f(dpos_c, (size_t)L * D);
    tokens_backward(&(VilTokensBwd){.dpatches = dp_c, .dcls = dcls_c, .dpos = dpos_c, .dx = dx, .B = B, .M = M, .D = D, .t = t});
    float *d_dx = dev_f32(dx, nx), *d_dcls = dev_f32(dcls0, D), *d_dpos = dev_f32(dpos0, (size_t)L * D);
    void *d_dp = dev_poison(np * 2);
    G->tokens_backward(G, &(VilTokensBwd){.dpatches = d_dp, .dcls = d_dcls, .dpos = d_dpos, .dx = d_dx, .B = B, .M = M,
                                          .D = D, .t = t});
    float *dp_g = get_act(d_dp, np), *dcls_g = get_f32(d_dcls, D), *dpos_g = get_f32(d_dpos, (size_t)L * D);
    snprintf(nm, sizeof nm, "tokens bwd dpatches B=%d M=%d D=%d", B, M, D);
    T_CLOSE(nm, rel(dp_g, dp_c, np), TOL_BF16);
    snprintf(nm, sizeof nm, "tokens bwd dcls, dpos B=%d M=%d D=%d", B, M, D);
    T_CLOSE(nm, fmax(rel(dcls_g, dcls_c, D), rel(dpos_g, dpos_c, (size_t)L * D)), 1e-6);
    G->free(G, d_pt), G->free(G, d_cls), G->free(G, d_pos), G->free(G, d_x), G->free(G, d_dx), G->free(G, d_dcls);
    G->free(G, d_dpos), G->free(G, d_dp);
    free(pt), free(cls), free(pos), free(x_c), free(x_g), free(dx), free(dp_c), free(dcls_c);
    free(dpos_c), free(dcls0), free(dpos0), free(dp_g), free(dcls_g), free(dpos_g);
}

int main(int argc, char **argv) {
    char why[256];
    if (!vil_cuda_available(why, sizeof why)) {
        printf("no usable GPU: %s\n", why);
        T_CHECK(0, "gpu_ops needs a CUDA device");
        return t_finish();
    }
    G = &vil_backend_cuda;
    /* "quick": the sizes compute-sanitizer can go through in reasonable time */
    int quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    vil_rng_seed(&rng, 20261122);

    test_linear(394, 40, 80, 40, 80, 0, 0, 0);   /* in_proj-like, L = 197 */
    test_linear(14, 6, 40, 48, 40, 1, 0, 0);     /* dt_proj-like: a strided slice, bias */
    test_linear(1460, 40, 44, 40, 48, 0, 0, 1);  /* x_proj-like, L = 730, dinp accumulates */
    test_linear(3, 24, 5, 24 * 26, 5, 1, 1, 0); /* the head: class-token rows, f32 out */
    /* output counts not a multiple of 8: a 1001-class head, and a bf16 output of 12 with a bias
     * and an accumulated input gradient */
    test_linear(37, 24, 1001, 24 * 3, 1001, 1, 1, 0);
    test_linear(30, 16, 12, 16, 12, 1, 0, 1);
    test_linear(2, 40, 24, 40, 24, 0, 0, 0);     /* L = 1 */
    /* more product shapes than cuda/linear.cu's plan cache holds (128; vil bench's table across
     * resolutions met that limit): the oldest plans are dropped and made again when needed */
    if (!quick) {
        for (int n = 1; n <= 50; n++) test_linear(n, 8, 16, 8, 16, n & 1, 0, 0);
        test_linear(394, 40, 80, 40, 80, 0, 0, 0); /* the first shape again, planned anew */
    }

    test_norm(2, 197, 40, 1, 1);
    test_norm(3, 7, 20, 1, 0);
    test_norm(2, 1, 72, 0, 0);
    test_norm(2, quick ? 26 : 730, 192, 1, 1);

    int Ls[4] = {1, 7, 197, 730};
    for (int i = 0; i < 4; i++)
        if (!quick || Ls[i] != 730) test_conv_bidir(2, Ls[i], 40, 4);
    test_conv_bidir(3, 33, 72, 3);
    test_conv_bidir(2, 20, 5, 1);
    test_conv_bidir(1, 31, 100, 6);

    for (int i = 0; i < 4; i++) {
        if (quick && Ls[i] == 730) continue;
        test_scan(2, Ls[i], 40, 16, 3, 35, 0, -1);
    }
    /* the sequential kernels (one thread walks all tokens) */
    test_scan(2, 26, 48, 4, 2, 10, 0, -1);
    test_scan(2, 33, 72, 8, 5, 21, 0, -1);
    test_scan(2, 197, 40, 16, 3, 35, 1, -1);
    test_scan(2, 7, 20, 8, 2, 18, 1, -1);
    test_scan(2, 197, 264, 16, 9, 48, 0, -1); /* several channel blocks, the last one partial */
    test_scan(1, 33, 136, 16, 4, 40, 1, -1);
    test_scan(2, 197, 72, 16, 12, 48, 0, -1); /* ViL-Tiny's R + 2N = 44, padded to 48 */
    if (!quick) test_scan(1, 730, 72, 16, 5, 37, 1, -1);
    /* the token-parallel form: chunks as chosen by shape (these small B x E all take it) at the
     * lengths of 224, 512 (odd), 1024 and 2048 px; forced chunk sizes that leave a short last
     * chunk, one or two chunks, and several channel blocks */
    int Lc[6] = {1, 7, 197, 730, 4097, 16385};
    for (int i = 0; i < 6; i++) {
        if (quick && Lc[i] > 730) continue;
        test_scan(1, Lc[i], 40, 16, 3, 35, 0, 0);
        test_scan(2, Lc[i], 72, 16, 5, 37, 1, 0);
    }
    test_scan(2, 197, 264, 16, 9, 48, 0, 24);
    test_scan(2, 197, 264, 16, 9, 48, 1, 64);
    test_scan(1, 200, 40, 16, 3, 35, 0, 100); /* rounded up to 104: two chunks */
    test_scan(2, 33, 72, 8, 5, 21, 0, 8);
    test_scan(2, 26, 48, 4, 2, 10, 1, 16);
    test_scan(3, 730, 136, 16, 4, 40, 0, 32);
    test_scan(1, 64, 40, 16, 3, 35, 1, 64); /* one chunk exactly */
    /* the chunk summaries' generic staging: rows that take 8-byte copies (E = 36) and plain
     * loads (E = 37), Longhorn and Mamba, N = 16 and 8 */
    test_scan(2, 197, 36, 16, 4, 40, 0, 32);
    test_scan(2, 130, 37, 8, 4, 24, 0, 24);
    test_scan(1, 99, 37, 16, 4, 40, 1, 16);
    /* the forward's two kernels forced where the other one is chosen: the pair kernel (one
     * thread per channel) sequential and chunked at small B x E, the quad kernel (four) with a
     * partial last block (264 = 8 x 32 + 8), N = 4 and 8 (1 and 2 states a thread), rows that
     * take 8-byte copies (E = 36) and plain loads (E = 37), both forms */
    test_scan_split(1, 4097, 40, 16, 3, 35, 0, 0, 1);
    test_scan_split(2, 730, 72, 16, 5, 37, 1, 0, 1);
    test_scan_split(2, 197, 40, 16, 3, 35, 0, -1, 1);
    test_scan_split(2, 197, 264, 16, 9, 48, 0, -1, 4);
    test_scan_split(2, 197, 264, 16, 9, 48, 1, 40, 4);
    test_scan_split(2, 33, 72, 8, 5, 21, 0, -1, 4);
    test_scan_split(2, 26, 48, 4, 2, 10, 1, 16, 4);
    test_scan_split(2, 26, 48, 4, 2, 10, 0, -1, 4);
    test_scan_split(3, 101, 36, 16, 4, 40, 0, -1, 4);
    test_scan_split(2, 99, 37, 16, 4, 40, 1, 24, 4);
    test_scan_split(1, 1, 37, 16, 4, 40, 0, -1, 4);
    /* the backward from the chunk-boundary states the forward kept (training at long sequences):
     * chunks by shape and forced, Longhorn and Mamba, N = 16, 8 and 4, a partial channel block,
     * rows that take plain loads (E = 37), two chunks and many */
    test_scan_full(1, 4097, 40, 16, 3, 35, 0, 0, 0, 1);
    test_scan_full(2, 730, 72, 16, 5, 37, 1, 0, 0, 1);
    test_scan_full(2, 197, 264, 16, 9, 48, 0, 24, 0, 1);
    test_scan_full(2, 197, 264, 16, 9, 48, 1, 64, 0, 1);
    test_scan_full(1, 200, 40, 16, 3, 35, 0, 100, 0, 1);
    test_scan_full(2, 33, 72, 8, 5, 21, 0, 8, 0, 1);
    test_scan_full(2, 26, 48, 4, 2, 10, 1, 16, 0, 1);
    test_scan_full(2, 130, 37, 8, 4, 24, 0, 24, 0, 1);
    test_scan_full(1, 99, 37, 16, 4, 40, 1, 16, 0, 1);
    if (!quick) test_scan_full(1, 16385, 40, 16, 3, 35, 0, 0, 0, 1);
    /* a long sequence whose B x E the forward alone would run sequentially: kept, it cuts the
     * backward's chunks (ViM-Tiny at 1024 px b32 has B x E = 12,288) */
    if (!quick) test_scan_full(1, 2048, 12289, 16, 3, 35, 1, 0, 0, 1);

    test_loss(3, 5);
    test_loss(7, 1000);
    test_adamw(1001);
    test_adamw(7);
    test_ema(1001, 0.99f);
    test_ema(7, 0.99996f);
    test_grad_clip(7, 0.5f);
    test_grad_clip(1000003, 10.0f);
    test_grad_clip(1000003, 1e4f); /* under the limit */

    test_patch(2, 3, 16, 4, 3, 20);
    test_patch(2, 3, 32, 16, 16, 40);
    test_patch(1, 1, 28, 4, 4, 24);
    /* image sides not a multiple of the patch: the last pixels belong to no patch (dimg 0 there);
     * P = 8 takes the 16-byte patch-row path, P = 7 the one-pixel path */
    test_patch(2, 3, 36, 8, 8, 24);
    test_patch(1, 2, 30, 7, 7, 16);
    test_tokens(2, 196, 40, 98);
    test_tokens(2, 25, 20, 12);
    test_tokens(3, 1, 8, 0);
    return t_finish();
}
