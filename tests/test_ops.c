/* test_ops.c: every CPU op alone. Forward passes against independent double-precision
 * references written from the formulas of doc/models.md and doc/scans.md; backward passes
 * against central finite differences (float32, h = 1e-2 unless stated; tolerance 5e-3
 * relative: the forward is float32, so rounding in the loss divided by 2h sets the floor,
 * measured at 1e-6..1e-3). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "testing.h"
#include "vil/common.h"
#include "vil/ops_cpu.h"
#include "vil/rec/all.h"

#define TOL 5e-3
#define COORDS 40
static VilRng rng;

static float *rnd(size_t n, float s) {
    float *p = vil_malloc(n * sizeof(float));
    gc_fill(p, n, s, &rng);
    return p;
}
static float *zeros(size_t n) { return vil_calloc(n, sizeof(float)); }
static double rel_err(const float *a, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (a[i] - ref[i]) * (a[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return sqrt(num) / (sqrt(den) + 1e-30);
}

/* ---------------- linear ---------------- */
typedef struct {
    int N, C, OC, ld, ldo;
    float *in, *w, *b, *out, *R;
} LinCtx;
static double lin_loss(void *p) {
    LinCtx *c = p;
    linear_forward(&(VilLinearFwd){.out = c->out, .in = c->in, .w = c->w, .b = c->b, .N = c->N, .C = c->C,
                                   .OC = c->OC, .ld_in = c->ld, .ld_out = c->ldo});
    return gc_dot(c->out, c->R, (size_t)c->N * c->ldo);
}
/* out and dout rows are ldo = OC + 3 apart: out's padding must stay 0 (the loss would see it),
 * and dout's padding holds 1e6, which would wreck the gradients if the backward read it */
static void test_linear(void) {
    LinCtx c = {.N = 13, .C = 7, .OC = 5, .ld = 9, .ldo = 8};
    c.in = rnd((size_t)c.N * c.ld, 1), c.w = rnd((size_t)c.OC * c.C, 1), c.b = rnd(c.OC, 1);
    c.out = zeros((size_t)c.N * c.ldo), c.R = rnd((size_t)c.N * c.ldo, 1);
    for (int n = 0; n < c.N; n++)
        for (int o = c.OC; o < c.ldo; o++) c.R[n * c.ldo + o] = 1e6f;
    /* forward against a double loop */
    lin_loss(&c);
    double *ref = vil_malloc(sizeof(double) * c.N * c.ldo);
    for (int n = 0; n < c.N; n++)
        for (int o = 0; o < c.ldo; o++) {
            double s = o < c.OC ? c.b[o] : 0.0;
            for (int k = 0; k < c.C && o < c.OC; k++) s += (double)c.in[n * c.ld + k] * c.w[o * c.C + k];
            ref[n * c.ldo + o] = s;
        }
    T_CLOSE("linear forward (strided out, padding untouched)", rel_err(c.out, ref, (size_t)c.N * c.ldo), 1e-6);
    float *din = zeros((size_t)c.N * c.ld), *dw = zeros((size_t)c.OC * c.C), *db = zeros(c.OC);
    /* the padding columns of din must stay untouched: fill them with a sentinel */
    for (size_t i = 0; i < (size_t)c.N * c.ld; i++) din[i] = 7.0f;
    linear_backward(&(VilLinearBwd){.dinp = din, .dw = dw, .db = db, .dout = c.R, .in = c.in, .w = c.w, .N = c.N,
                                    .C = c.C, .OC = c.OC, .ld_in = c.ld, .ld_out = c.ldo});
    int pad_ok = 1;
    for (int n = 0; n < c.N; n++)
        for (int k = c.C; k < c.ld; k++) pad_ok &= din[n * c.ld + k] == 7.0f;
    T_CHECK(pad_ok, "linear_backward wrote outside the C columns of a strided dinp");
    for (int n = 0; n < c.N; n++)
        for (int k = c.C; k < c.ld; k++) din[n * c.ld + k] = 0.0f; /* true gradient there: 0 */
    /* gather the strided input gradient into a dense view for the check */
    gc_check("linear in", lin_loss, &c, c.in, din, (size_t)c.N * c.ld, COORDS * 4, 1e-2f, TOL, &rng);
    gc_check("linear w", lin_loss, &c, c.w, dw, (size_t)c.OC * c.C, COORDS, 1e-2f, TOL, &rng);
    gc_check("linear b", lin_loss, &c, c.b, db, c.OC, COORDS, 1e-2f, TOL, &rng);
    /* accumulate_dinp adds */
    float *din2 = zeros((size_t)c.N * c.ld);
    for (size_t i = 0; i < (size_t)c.N * c.ld; i++) din2[i] = 1.0f;
    float *dw2 = zeros((size_t)c.OC * c.C);
    linear_backward(&(VilLinearBwd){.dinp = din2, .dw = dw2, .dout = c.R, .in = c.in, .w = c.w, .N = c.N,
                                    .C = c.C, .OC = c.OC, .ld_in = c.ld, .ld_out = c.ldo, .accumulate_dinp = 1});
    double e = 0;
    for (int n = 0; n < c.N; n++)
        for (int k = 0; k < c.C; k++) e = fmax(e, fabs(din2[n * c.ld + k] - 1.0f - din[n * c.ld + k]));
    T_CLOSE("linear accumulate_dinp", e, 1e-5);
    free(ref), free(din), free(dw), free(db), free(din2), free(dw2);
    free(c.in), free(c.w), free(c.b), free(c.out), free(c.R);
}

/* ---------------- patch embedding ---------------- */
typedef struct {
    int B, C, H, W, P, S, D, M;
    float *img, *w, *b, *out, *R;
} PeCtx;
static double pe_loss(void *p) {
    PeCtx *c = p;
    patch_embed_forward(&(VilPatchEmbedFwd){.out = c->out, .img = c->img, .w = c->w, .b = c->b, .B = c->B,
                                            .C = c->C, .H = c->H, .W = c->W, .P = c->P, .S = c->S, .D = c->D});
    return gc_dot(c->out, c->R, (size_t)c->B * c->M * c->D);
}
static void test_patch_embed(int S) {
    PeCtx c = {.B = 2, .C = 3, .H = 10, .W = 10, .P = 4, .S = S, .D = 5};
    int G = (c.H - c.P) / c.S + 1;
    c.M = G * G;
    size_t ni = (size_t)c.B * c.C * c.H * c.W, nw = (size_t)c.D * c.C * c.P * c.P;
    c.img = rnd(ni, 1), c.w = rnd(nw, 1), c.b = rnd(c.D, 1);
    c.out = zeros((size_t)c.B * c.M * c.D), c.R = rnd((size_t)c.B * c.M * c.D, 1);
    pe_loss(&c);
    /* forward: direct convolution in double */
    size_t no = (size_t)c.B * c.M * c.D;
    double *ref = vil_malloc(no * sizeof(double));
    for (int b = 0; b < c.B; b++)
        for (int gy = 0; gy < G; gy++)
            for (int gx = 0; gx < G; gx++)
                for (int d = 0; d < c.D; d++) {
                    double s = c.b[d];
                    for (int ch = 0; ch < c.C; ch++)
                        for (int i = 0; i < c.P; i++)
                            for (int j = 0; j < c.P; j++)
                                s += (double)c.w[((d * c.C + ch) * c.P + i) * c.P + j] *
                                     c.img[((b * c.C + ch) * c.H + gy * c.S + i) * c.W + gx * c.S + j];
                    ref[((size_t)b * c.M + gy * G + gx) * c.D + d] = s;
                }
    char name[64];
    snprintf(name, sizeof name, "patch_embed forward (S=%d)", S);
    T_CLOSE(name, rel_err(c.out, ref, no), 1e-6);
    float *dimg = zeros(ni), *dw = zeros(nw), *db = zeros(c.D);
    patch_embed_backward(&(VilPatchEmbedBwd){.dimg = dimg, .dw = dw, .db = db, .dout = c.R, .w = c.w,
                                             .img = c.img, .B = c.B, .C = c.C, .H = c.H, .W = c.W,
                                             .P = c.P, .S = c.S, .D = c.D});
    snprintf(name, sizeof name, "patch_embed img (S=%d)", S);
    gc_check(name, pe_loss, &c, c.img, dimg, ni, COORDS, 1e-2f, TOL, &rng);
    snprintf(name, sizeof name, "patch_embed w (S=%d)", S);
    gc_check(name, pe_loss, &c, c.w, dw, nw, COORDS, 1e-2f, TOL, &rng);
    snprintf(name, sizeof name, "patch_embed b (S=%d)", S);
    gc_check(name, pe_loss, &c, c.b, db, c.D, COORDS, 1e-2f, TOL, &rng);
    free(ref), free(dimg), free(dw), free(db), free(c.img), free(c.w), free(c.b), free(c.out), free(c.R);
}

/* ---------------- tokens ---------------- */
typedef struct {
    int B, M, D, t;
    float *patches, *cls, *pos, *x, *R;
} TokCtx;
static double tok_loss(void *p) {
    TokCtx *c = p;
    tokens_forward(&(VilTokensFwd){.x = c->x, .patches = c->patches, .cls = c->cls, .pos = c->pos,
                                   .B = c->B, .M = c->M, .D = c->D, .t = c->t});
    return gc_dot(c->x, c->R, (size_t)c->B * (c->M + 1) * c->D);
}
static void test_tokens(void) {
    TokCtx c = {.B = 2, .M = 9, .D = 3, .t = 4};
    int L = c.M + 1;
    c.patches = rnd((size_t)c.B * c.M * c.D, 1), c.cls = rnd(c.D, 1), c.pos = rnd((size_t)L * c.D, 1);
    c.x = zeros((size_t)c.B * L * c.D), c.R = rnd((size_t)c.B * L * c.D, 1);
    tok_loss(&c);
    /* the class token sits at t; patch t sits at t + 1 */
    double e = fabs(c.x[(size_t)c.t * c.D] - (c.cls[0] + c.pos[(size_t)c.t * c.D])) +
               fabs(c.x[(size_t)(c.t + 1) * c.D] - (c.patches[(size_t)c.t * c.D] + c.pos[(size_t)(c.t + 1) * c.D])) +
               fabs(c.x[0] - (c.patches[0] + c.pos[0]));
    T_CLOSE("tokens forward (middle class token)", e, 1e-6);
    float *dp = zeros((size_t)c.B * c.M * c.D), *dc = zeros(c.D), *dpos = zeros((size_t)L * c.D);
    tokens_backward(&(VilTokensBwd){.dpatches = dp, .dcls = dc, .dpos = dpos, .dx = c.R, .B = c.B, .M = c.M,
                                    .D = c.D, .t = c.t});
    gc_check("tokens patches", tok_loss, &c, c.patches, dp, (size_t)c.B * c.M * c.D, COORDS, 1e-2f, TOL, &rng);
    gc_check("tokens cls", tok_loss, &c, c.cls, dc, c.D, COORDS, 1e-2f, TOL, &rng);
    gc_check("tokens pos", tok_loss, &c, c.pos, dpos, (size_t)L * c.D, COORDS, 1e-2f, TOL, &rng);
    free(dp), free(dc), free(dpos), free(c.pos);
    /* no position embedding (pos_embed = none): pos and dpos NULL, x the patches and the class
     * token as they are; the class token's gradient alone is summed */
    c.pos = NULL;
    tok_loss(&c);
    double en = 0;
    for (int b = 0; b < c.B; b++)
        for (int l = 0; l < L; l++)
            for (int d = 0; d < c.D; d++) {
                float want = l == c.t ? c.cls[d] : c.patches[((size_t)b * c.M + (l < c.t ? l : l - 1)) * c.D + d];
                en = fmax(en, fabs(c.x[((size_t)b * L + l) * c.D + d] - want));
            }
    T_CLOSE("tokens forward without pos_embed", en, 0);
    dp = zeros((size_t)c.B * c.M * c.D), dc = zeros(c.D);
    tokens_backward(&(VilTokensBwd){.dpatches = dp, .dcls = dc, .dx = c.R, .B = c.B, .M = c.M, .D = c.D, .t = c.t});
    gc_check("tokens patches (no pos)", tok_loss, &c, c.patches, dp, (size_t)c.B * c.M * c.D, COORDS, 1e-2f, TOL, &rng);
    gc_check("tokens cls (no pos)", tok_loss, &c, c.cls, dc, c.D, COORDS, 1e-2f, TOL, &rng);
    free(dp), free(dc), free(c.patches), free(c.cls), free(c.x), free(c.R);
}

/* ---------------- add + rmsnorm ---------------- */
typedef struct {
    int B, L, D, with_add;
    float *res_in, *h, *scale, *w, *res_out, *normed, *rstd, *R, *R2;
} NormCtx;
static double norm_loss(void *p) {
    NormCtx *c = p;
    size_t n = (size_t)c->B * c->L * c->D;
    if (!c->with_add) {
        memcpy(c->res_out, c->res_in, n * sizeof(float));
        add_rmsnorm_forward(&(VilNormFwd){.res_out = c->res_out, .normed = c->normed, .rstd = c->rstd,
                                          .w = c->w, .B = c->B, .L = c->L, .D = c->D});
    } else {
        add_rmsnorm_forward(&(VilNormFwd){.res_out = c->res_out, .normed = c->normed, .rstd = c->rstd,
                                          .res_in = c->res_in, .h = c->h, .scale = c->scale, .w = c->w,
                                          .B = c->B, .L = c->L, .D = c->D});
    }
    /* the loss reads both outputs: the normed tensor and the residual stream going on */
    return gc_dot(c->normed, c->R, n) + gc_dot(c->res_out, c->R2, n);
}
static void test_norm(int with_add) {
    NormCtx c = {.B = 2, .L = 5, .D = 7, .with_add = with_add};
    size_t n = (size_t)c.B * c.L * c.D;
    c.res_in = rnd(n, 1), c.h = rnd(n, 1), c.w = rnd(c.D, 1), c.R = rnd(n, 1), c.R2 = rnd(n, 1);
    c.scale = zeros(c.B);
    c.scale[0] = 0.0f, c.scale[1] = 1.25f; /* one dropped sample, one kept at 1/(1-p) */
    c.res_out = zeros(n), c.normed = zeros(n), c.rstd = zeros((size_t)c.B * c.L);
    norm_loss(&c);
    double *ref = vil_malloc(n * sizeof(double));
    for (int r = 0; r < c.B * c.L; r++) {
        double x[16], ss = 0;
        for (int d = 0; d < c.D; d++) {
            x[d] = c.res_in[r * c.D + d] + (with_add ? (double)c.scale[r / c.L] * c.h[r * c.D + d] : 0.0);
            ss += x[d] * x[d];
        }
        double rs = 1.0 / sqrt(ss / c.D + 1e-5);
        for (int d = 0; d < c.D; d++) ref[r * c.D + d] = x[d] * rs * c.w[d];
    }
    T_CLOSE(with_add ? "add_rmsnorm forward" : "rmsnorm forward", rel_err(c.normed, ref, n), 1e-6);
    float *dres = zeros(n), *dh = zeros(n), *dw = zeros(c.D);
    memcpy(dres, c.R2, n * sizeof(float)); /* gradient arriving along the residual stream */
    add_rmsnorm_backward(&(VilNormBwd){.dres = dres, .dh = with_add ? dh : NULL, .dw = dw, .dnormed = c.R,
                                       .res_out = c.res_out, .rstd = c.rstd, .w = c.w,
                                       .scale = with_add ? c.scale : NULL, .B = c.B, .L = c.L, .D = c.D});
    gc_check(with_add ? "add_rmsnorm res_in" : "rmsnorm x", norm_loss, &c, c.res_in, dres, n, COORDS, 1e-2f, TOL, &rng);
    if (with_add) gc_check("add_rmsnorm h (drop-path scaled)", norm_loss, &c, c.h, dh, n, COORDS, 1e-2f, TOL, &rng);
    gc_check(with_add ? "add_rmsnorm w" : "rmsnorm w", norm_loss, &c, c.w, dw, c.D, COORDS, 1e-2f, TOL, &rng);
    free(ref), free(dres), free(dh), free(dw);
    free(c.res_in), free(c.h), free(c.w), free(c.R), free(c.R2), free(c.scale), free(c.res_out), free(c.normed), free(c.rstd);
}

/* ---------------- conv1d + SiLU ---------------- */
/* one direction at a time through the two-direction op: the loss reads direction rev's u, so
 * the other direction (its own filter, du = 0) must add nothing to dx */
typedef struct {
    int B, L, E, K, ldx, rev;
    float *x, *w, *b, *u, *R;  /* w, b, u: direction rev's */
    float *wo, *bo, *uo;       /* the other direction's */
} ConvCtx;
static double conv_loss(void *p) {
    ConvCtx *c = p;
    int r = c->rev;
    conv1d_silu_bidir_forward(&(VilConvBidirFwd){.u = {r ? c->uo : c->u, r ? c->u : c->uo}, .x = c->x,
                                                 .w = {r ? c->wo : c->w, r ? c->w : c->wo},
                                                 .b = {r ? c->bo : c->b, r ? c->b : c->bo}, .B = c->B, .L = c->L,
                                                 .E = c->E, .K = c->K, .ldx = c->ldx});
    return gc_dot(c->u, c->R, (size_t)c->B * c->L * c->E);
}
static void test_conv(int rev) {
    ConvCtx c = {.B = 2, .L = 9, .E = 5, .K = 4, .ldx = 11, .rev = rev};
    size_t nx = (size_t)c.B * c.L * c.ldx, nu = (size_t)c.B * c.L * c.E;
    c.x = rnd(nx, 1), c.w = rnd((size_t)c.E * c.K, 1), c.b = rnd(c.E, 1), c.u = zeros(nu), c.R = rnd(nu, 1);
    c.wo = rnd((size_t)c.E * c.K, 1), c.bo = rnd(c.E, 1), c.uo = zeros(nu);
    conv_loss(&c);
    double *ref = vil_malloc(nu * sizeof(double));
    /* reverse = causal conv on the flipped sequence, flipped back */
    for (int b = 0; b < c.B; b++)
        for (int t = 0; t < c.L; t++)
            for (int e = 0; e < c.E; e++) {
                int tt = rev ? c.L - 1 - t : t; /* position in the scanned order */
                double s = c.b[e];
                for (int j = 0; j < c.K; j++) {
                    int src = tt - 3 + j;
                    if (src < 0) continue;
                    int orig = rev ? c.L - 1 - src : src;
                    s += (double)c.w[e * c.K + j] * c.x[((size_t)b * c.L + orig) * c.ldx + e];
                }
                ref[((size_t)b * c.L + t) * c.E + e] = s / (1.0 + exp(-s));
            }
    T_CLOSE(rev ? "conv1d_silu forward (reversed)" : "conv1d_silu forward", rel_err(c.u, ref, nu), 1e-6);
    float *dx = zeros(nx), *dw = zeros((size_t)c.E * c.K), *db = zeros(c.E);
    float *dwo = zeros((size_t)c.E * c.K), *dbo = zeros(c.E), *duo = zeros(nu);
    conv1d_silu_bidir_backward(&(VilConvBidirBwd){.dx = dx, .dw = {rev ? dwo : dw, rev ? dw : dwo},
                                                  .db = {rev ? dbo : db, rev ? db : dbo},
                                                  .du = {rev ? duo : c.R, rev ? c.R : duo}, .x = c.x,
                                                  .w = {rev ? c.wo : c.w, rev ? c.w : c.wo},
                                                  .b = {rev ? c.bo : c.b, rev ? c.b : c.bo}, .B = c.B, .L = c.L,
                                                  .E = c.E, .K = c.K, .ldx = c.ldx});
    gc_check(rev ? "conv1d x (rev)" : "conv1d x", conv_loss, &c, c.x, dx, nx, COORDS * 2, 1e-2f, TOL, &rng);
    gc_check(rev ? "conv1d w (rev)" : "conv1d w", conv_loss, &c, c.w, dw, (size_t)c.E * c.K, COORDS, 1e-2f, TOL, &rng);
    gc_check(rev ? "conv1d b (rev)" : "conv1d b", conv_loss, &c, c.b, db, c.E, COORDS, 1e-2f, TOL, &rng);
    free(ref), free(dx), free(dw), free(db), free(dwo), free(dbo), free(duo);
    free(c.x), free(c.w), free(c.b), free(c.u), free(c.R), free(c.wo), free(c.bo), free(c.uo);
}

/* rows [t0, t0 + n) of each sample of a (B, L, ld) tensor, as a (B, n, ld) copy: a chunk of a
 * stream */
static float *take_rows(const float *a, int B, int L, size_t ld, int t0, int n) {
    float *p = vil_malloc((size_t)B * n * ld * sizeof(float) + sizeof(float));
    for (int b = 0; b < B; b++) memcpy(p + (size_t)b * n * ld, a + ((size_t)b * L + t0) * ld, (size_t)n * ld * sizeof(float));
    return p;
}
/* columns [c0, c0 + w) of the chunk's rows (B, n, ld) are those of rows [t0, t0 + n) of the
 * whole (B, L, ld), bit for bit */
static int same_rows(const float *whole, const float *chunk, int B, int L, size_t ld, int t0, int n, int c0, int w) {
    int same = 1;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < n; t++)
            same &= !memcmp(whole + ((size_t)b * L + t0 + t) * ld + c0, chunk + ((size_t)b * n + t) * ld + c0,
                            (size_t)w * sizeof(float));
    return same;
}

/* ---------------- conv1d + SiLU, one direction (causal) with a carried context ---------------- */
typedef struct {
    int B, L, E, K, ldx;
    float *x, *ctx, *w, *b, *u, *R; /* ctx (B, K-1, E) or NULL */
} CausalConvCtx;
static double causal_conv_loss(void *p) {
    CausalConvCtx *c = p;
    conv1d_silu_bidir_forward(&(VilConvBidirFwd){.u = {c->u}, .x = c->x, .w = {c->w}, .b = {c->b}, .B = c->B,
                                                 .L = c->L, .E = c->E, .K = c->K, .ldx = c->ldx, .causal = 1,
                                                 .ctx = c->ctx});
    return gc_dot(c->u, c->R, (size_t)c->B * c->L * c->E);
}
/* The causal conv of a chunk of a stream: the forward against a direct double loop that reads
 * the context before token 0 (and, without one, the bidirectional op's direction 0 bit for bit),
 * the gradients of x, w and b against finite differences (ctx a constant), ctx_out the chunk's
 * last K-1 inputs; then truncated BPTT's identities over chunks of 4, 2 (shorter than K-1: its
 * ctx_out reaches into its ctx) and 3 tokens: the chunks' outputs, each from the ctx_out of the
 * one before (in place: ctx_out = ctx), are those of one call over all 9 tokens, and a chunk's
 * backward is the one-call backward of a loss that reads that chunk's outputs alone, on the
 * chunk's tokens (dx) and in dw, db; bit for bit. */
static void test_conv_causal(void) {
    CausalConvCtx c = {.B = 2, .L = 9, .E = 5, .K = 4, .ldx = 11};
    int B = c.B, L = c.L, E = c.E, K = c.K, ldx = c.ldx, C = K - 1;
    size_t nx = (size_t)B * L * ldx, nu = (size_t)B * L * E, nc = (size_t)B * C * E;
    c.x = rnd(nx, 1), c.ctx = rnd(nc, 1), c.w = rnd((size_t)E * K, 1), c.b = rnd(E, 1), c.u = zeros(nu);
    c.R = rnd(nu, 1);
    causal_conv_loss(&c);
    double *ref = vil_malloc(nu * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < L; t++)
            for (int e = 0; e < E; e++) {
                double s = c.b[e];
                for (int j = 0; j < K; j++) {
                    int src = t - (K - 1) + j;
                    double xv = src >= 0 ? c.x[((size_t)b * L + src) * ldx + e] : c.ctx[((size_t)b * C + C + src) * E + e];
                    s += (double)c.w[e * K + j] * xv;
                }
                ref[((size_t)b * L + t) * E + e] = s / (1.0 + exp(-s));
            }
    T_CLOSE("conv1d_silu causal forward (a carried context)", rel_err(c.u, ref, nu), 1e-6);
    /* without a context: zeros before token 0, the bidirectional op's direction 0 */
    float *u0 = zeros(nu), *u1 = zeros(nu), *uz = zeros(nu);
    conv1d_silu_bidir_forward(&(VilConvBidirFwd){.u = {u0, u1}, .x = c.x, .w = {c.w, c.w}, .b = {c.b, c.b},
                                                 .B = B, .L = L, .E = E, .K = K, .ldx = ldx});
    conv1d_silu_bidir_forward(&(VilConvBidirFwd){.u = {uz}, .x = c.x, .w = {c.w}, .b = {c.b}, .B = B, .L = L,
                                                 .E = E, .K = K, .ldx = ldx, .causal = 1});
    T_CHECK(!memcmp(uz, u0, nu * sizeof(float)), "conv1d causal without ctx is the bidirectional op's direction 0");
    free(u0), free(u1), free(uz);
    float *dx = zeros(nx), *dw = zeros((size_t)E * K), *db = zeros(E);
    conv1d_silu_bidir_backward(&(VilConvBidirBwd){.dx = dx, .dw = {dw}, .db = {db}, .du = {c.R}, .x = c.x,
                                                  .w = {c.w}, .b = {c.b}, .B = B, .L = L, .E = E, .K = K,
                                                  .ldx = ldx, .causal = 1, .ctx = c.ctx});
    gc_check("conv1d causal x (ctx)", causal_conv_loss, &c, c.x, dx, nx, COORDS * 2, 1e-2f, TOL, &rng);
    gc_check("conv1d causal w (ctx)", causal_conv_loss, &c, c.w, dw, (size_t)E * K, COORDS, 1e-2f, TOL, &rng);
    gc_check("conv1d causal b (ctx)", causal_conv_loss, &c, c.b, db, E, COORDS, 1e-2f, TOL, &rng);
    /* the chunks: each from the context the one before handed out, written over it */
    const int cl[3] = {4, 2, 3};
    float *u = zeros(nu), *carry = take_rows(c.ctx, B, C, E, 0, C); /* the stream's start: c.ctx */
    conv1d_silu_bidir_forward(&(VilConvBidirFwd){.u = {u}, .x = c.x, .w = {c.w}, .b = {c.b}, .B = B, .L = L,
                                                 .E = E, .K = K, .ldx = ldx, .causal = 1, .ctx = carry});
    int fwd_same = 1, out_ok = 1, bwd_same = 1;
    for (int k = 0, t0 = 0; k < 3; t0 += cl[k], k++) {
        int n = cl[k];
        float *xk = take_rows(c.x, B, L, ldx, t0, n), *uk = zeros((size_t)B * n * E);
        float *ctx_k = take_rows(carry, B, C, E, 0, C); /* this chunk's context, for its backward */
        conv1d_silu_bidir_forward(&(VilConvBidirFwd){.u = {uk}, .x = xk, .w = {c.w}, .b = {c.b}, .B = B, .L = n,
                                                     .E = E, .K = K, .ldx = ldx, .causal = 1, .ctx = carry,
                                                     .ctx_out = carry});
        fwd_same &= same_rows(u, uk, B, L, E, t0, n, 0, E);
        for (int b = 0; b < B; b++) /* the inputs before token t0 + n */
            for (int i = 0; i < C; i++) {
                int s = t0 + n - C + i;
                const float *want = s >= 0 ? c.x + ((size_t)b * L + s) * ldx : c.ctx + ((size_t)b * C + C + s) * E;
                out_ok &= !memcmp(carry + ((size_t)b * C + i) * E, want, (size_t)E * sizeof(float));
            }
        /* the backward of the chunk's loss: one call over all tokens, du zero outside the chunk */
        float *dum = zeros(nu), *dxw = zeros(nx), *dww = zeros((size_t)E * K), *dbw = zeros(E);
        for (int b = 0; b < B; b++)
            memcpy(dum + ((size_t)b * L + t0) * E, c.R + ((size_t)b * L + t0) * E, (size_t)n * E * sizeof(float));
        conv1d_silu_bidir_backward(&(VilConvBidirBwd){.dx = dxw, .dw = {dww}, .db = {dbw}, .du = {dum}, .x = c.x,
                                                      .w = {c.w}, .b = {c.b}, .B = B, .L = L, .E = E, .K = K,
                                                      .ldx = ldx, .causal = 1, .ctx = c.ctx});
        float *duk = take_rows(dum, B, L, E, t0, n), *dxk = zeros((size_t)B * n * ldx);
        float *dwk = zeros((size_t)E * K), *dbk = zeros(E);
        conv1d_silu_bidir_backward(&(VilConvBidirBwd){.dx = dxk, .dw = {dwk}, .db = {dbk}, .du = {duk}, .x = xk,
                                                      .w = {c.w}, .b = {c.b}, .B = B, .L = n, .E = E, .K = K,
                                                      .ldx = ldx, .causal = 1, .ctx = ctx_k});
        bwd_same &= same_rows(dxw, dxk, B, L, ldx, t0, n, 0, E) && !memcmp(dww, dwk, (size_t)E * K * sizeof(float)) &&
                    !memcmp(dbw, dbk, (size_t)E * sizeof(float));
        free(xk), free(uk), free(ctx_k), free(dum), free(dxw), free(dww), free(dbw);
        free(duk), free(dxk), free(dwk), free(dbk);
    }
    T_CHECK(fwd_same, "conv1d causal: chunks of 4, 2, 3 tokens with the context carried give one call's outputs");
    T_CHECK(out_ok, "conv1d causal: ctx_out holds each chunk's last K-1 inputs (from its ctx where it is short)");
    T_CHECK(bwd_same, "conv1d causal: a chunk's backward is the one-call backward of the chunk's loss (dx, dw, db)");
    free(u), free(carry), free(ref), free(dx), free(dw), free(db);
    free(c.x), free(c.ctx), free(c.w), free(c.b), free(c.u), free(c.R);
}

/* ---------------- scans ---------------- */
/* The recurrences' table (vil/recurrence.h, made from vil/rec/list.h): a complete row for every
 * recurrence, the ids distinct and found again, the archs found again; the models' recurrences
 * are told apart in a checkpoint by their own parameter, so at most one model recurrence has
 * none (formats/checkpoint.c). */
static void test_recurrence_table(void) {
    int bare = 0;
    for (int r = 0; r < VIL_REC_COUNT; r++) {
        const VilRecurrenceInfo *ri = &vil_recurrences[r];
        VilRecurrence got = (VilRecurrence)-1;
        T_CHECK(ri->id && ri->name && ri->kq[0] && ri->kq[1], "recurrence %d: a row with its id and names", r);
        if (ri->arch) /* what a model of it reads */
            T_CHECK(ri->family && ri->delta_of_dt, "recurrence %d: a model's family and dt init", r);
        if (!ri->id) continue;
        T_CHECK(vil_recurrence_from_id(ri->id, &got) == 0 && got == (VilRecurrence)r, "recurrence '%s' by its id", ri->id);
        if (ri->arch)
            T_CHECK(vil_recurrence_from_arch(ri->arch, &got) == 0 && got == (VilRecurrence)r,
                    "recurrence '%s' by its arch '%s'", ri->id, ri->arch);
        T_CHECK((ri->param.key != NULL) == vil_rec_param((VilRecurrence)r),
                "recurrence '%s': its row's parameter and its step pieces' agree", ri->id);
        bare += ri->arch && !ri->param.key;
    }
    VilRecurrence none;
    T_CHECK(vil_recurrence_from_id("no such recurrence", &none) == -1 && vil_recurrence_from_arch("no", &none) == -1,
            "an unknown id or arch is no recurrence");
    T_CHECK(bare <= 1, "%d model recurrences without a parameter of their own: a checkpoint cannot tell them apart", bare);
}

/* whether the recurrence has a parameter of its own (A_log) */
static int rec_own(VilRecurrence rec) { return vil_recurrences[rec].param.key != NULL; }

typedef struct {
    int B, L, E, N, xdbl_ld, rev;
    VilRecurrence rec;
    float *u, *delta, *kq, *D, *A, *y, *R;
    float *h0, *hT, *hsq; /* (B, N, E) initial (NULL: zero) and final states, (B, L) norms */
} ScanCtx;
static double scan_loss(void *p) {
    ScanCtx *c = p;
    VilScanState st = {.h0 = c->h0, .hT = c->hT, .hsq = c->hsq, .ld = (size_t)c->N * c->E};
    scan_dir_forward(c->rec, c->y, c->u, c->delta, c->kq + 1, c->kq + 1 + c->N, c->D,
                     rec_own(c->rec) ? c->A : NULL, c->B, c->L, c->E, c->N, c->xdbl_ld, c->rev, &st);
    return gc_dot(c->y, c->R, (size_t)c->B * c->L * c->E);
}
/* The recurrence written plainly from doc/scans.md, in double, on an explicitly reversed copy,
 * from the initial state h0 (NULL: zero); hT (B, N, E) and hsq (B, L) when not NULL. A
 * recurrence needs its case here (-Wswitch names one that has none; its y is then D u alone,
 * which its forward check fails). */
static void scan_reference(ScanCtx *c, double *y, double *hT, double *hsq) {
    if (hsq)
        for (size_t i = 0; i < (size_t)c->B * c->L; i++) hsq[i] = 0;
    for (int b = 0; b < c->B; b++)
        for (int d = 0; d < c->E; d++) {
            double h[64] = {0};
            for (int n = 0; n < c->N && c->h0; n++) h[n] = c->h0[((size_t)b * c->N + n) * c->E + d];
            for (int s = 0; s < c->L; s++) {
                int t = c->rev ? c->L - 1 - s : s;
                size_t r = (size_t)b * c->L + t;
                const float *k = c->kq + r * c->xdbl_ld + 1, *q = k + c->N;
                double u = c->u[r * c->E + d], dl = c->delta[r * c->E + d], acc = 0;
                switch (c->rec) {
                case VIL_REC_MAMBA: {
                    double dt = log1p(exp(dl));
                    for (int n = 0; n < c->N; n++) {
                        double A = -exp((double)c->A[d * c->N + n]);
                        h[n] = exp(dt * A) * h[n] + dt * u * k[n];
                        acc += h[n] * q[n];
                    }
                    break;
                }
                case VIL_REC_LONGHORN: {
                    double beta = 1.0 / (1.0 + exp(-dl)), kappa = 0;
                    for (int n = 0; n < c->N; n++) kappa += (double)k[n] * k[n];
                    double eps = beta / (1.0 + beta * kappa);
                    for (int n = 0; n < c->N; n++) {
                        h[n] = (1.0 - eps * k[n] * k[n]) * h[n] + eps * u * k[n];
                        acc += h[n] * q[n];
                    }
                    break;
                }
                }
                y[r * c->E + d] = acc + (double)c->D[d] * u;
                for (int n = 0; n < c->N && hsq; n++) hsq[r] += h[n] * h[n];
            }
            for (int n = 0; n < c->N && hT; n++) hT[((size_t)b * c->N + n) * c->E + d] = h[n];
        }
}
/* with_h0: from a non-zero initial state (a constant: the gradients below hold it fixed), with
 * the final states and the per-token state norms checked too */
static void test_scan(VilRecurrence rec, int rev, int L, int E, int with_h0) {
    ScanCtx c = {.B = 2, .L = L, .E = E, .N = 4, .rev = rev, .rec = rec};
    int own = rec_own(rec);
    c.xdbl_ld = 1 + 2 * c.N + 2; /* dt_low column, k, q, two spare columns */
    size_t n = (size_t)c.B * c.L * c.E, nk = (size_t)c.B * c.L * c.xdbl_ld, ns = (size_t)c.B * c.N * c.E;
    c.u = rnd(n, 1), c.delta = rnd(n, 1), c.kq = rnd(nk, 0.7f), c.D = rnd(c.E, 1), c.y = zeros(n), c.R = rnd(n, 1);
    c.A = rnd((size_t)c.E * c.N, 0.5f);
    if (with_h0) c.h0 = rnd(ns, 2), c.hT = zeros(ns), c.hsq = zeros((size_t)c.B * c.L);
    scan_loss(&c);
    double *ref = vil_malloc(n * sizeof(double)), *rT = vil_malloc(ns * sizeof(double));
    double *rsq = vil_malloc((size_t)c.B * c.L * sizeof(double));
    scan_reference(&c, ref, rT, rsq);
    char name[96];
    const char *nm = vil_recurrences[rec].id, *h0s = with_h0 ? " h0" : "";
    snprintf(name, sizeof name, "%s forward L=%d E=%d%s%s", nm, L, E, rev ? " rev" : "", h0s);
    T_CLOSE(name, rel_err(c.y, ref, n), 1e-5);
    if (with_h0) {
        snprintf(name, sizeof name, "%s final state L=%d E=%d%s h0", nm, L, E, rev ? " rev" : "");
        T_CLOSE(name, rel_err(c.hT, rT, ns), 1e-5);
        snprintf(name, sizeof name, "%s state norms L=%d E=%d%s h0", nm, L, E, rev ? " rev" : "");
        T_CLOSE(name, rel_err(c.hsq, rsq, (size_t)c.B * c.L), 1e-5);
    } else { /* a given zero state is the zero start, bit for bit */
        float *y0 = vil_malloc(n * sizeof(float));
        memcpy(y0, c.y, n * sizeof(float));
        c.h0 = zeros(ns);
        scan_loss(&c);
        snprintf(name, sizeof name, "%s L=%d E=%d%s: h0 = 0 is the zero start bitwise", nm, L, E, rev ? " rev" : "");
        T_CHECK(!memcmp(y0, c.y, n * sizeof(float)), "%s", name);
        free(c.h0), free(y0);
        c.h0 = NULL;
    }
    float *du = zeros(n), *ddelta = zeros(n), *dkq = zeros(nk), *dD = zeros(c.E), *dA = zeros((size_t)c.E * c.N);
    /* sentinel in the columns the scan must not touch (dt_low and spares) */
    for (size_t i = 0; i < nk; i++) dkq[i] = 5.0f;
    VilScanState st = {.h0 = c.h0, .ld = (size_t)c.N * c.E};
    scan_dir_backward(rec, du, ddelta, dkq + 1, dkq + 1 + c.N, dD, own ? dA : NULL, c.R,
                      c.u, c.delta, c.kq + 1, c.kq + 1 + c.N, c.D, own ? c.A : NULL, c.B, c.L, c.E, c.N, c.xdbl_ld, rev, &st);
    int untouched = 1;
    for (size_t r = 0; r < (size_t)c.B * c.L; r++) {
        untouched &= dkq[r * c.xdbl_ld] == 5.0f;
        for (int j = 1 + 2 * c.N; j < c.xdbl_ld; j++) untouched &= dkq[r * c.xdbl_ld + j] == 5.0f;
    }
    T_CHECK(untouched, "%s backward wrote outside the k/q columns", nm);
    /* zero the sentinels so the full-tensor gradient check sees the true (zero) gradient */
    for (size_t r = 0; r < (size_t)c.B * c.L; r++) {
        dkq[r * c.xdbl_ld] = 0;
        for (int j = 1 + 2 * c.N; j < c.xdbl_ld; j++) dkq[r * c.xdbl_ld + j] = 0;
    }
    char sfx[16];
    snprintf(sfx, sizeof sfx, "%s%s", rev ? " rev" : "", h0s);
    snprintf(name, sizeof name, "%s u L=%d%s", nm, L, sfx);
    gc_check(name, scan_loss, &c, c.u, du, n, COORDS, 1e-2f, TOL, &rng);
    snprintf(name, sizeof name, "%s delta L=%d%s", nm, L, sfx);
    gc_check(name, scan_loss, &c, c.delta, ddelta, n, COORDS, 1e-2f, TOL, &rng);
    snprintf(name, sizeof name, "%s k,q L=%d%s", nm, L, sfx);
    gc_check(name, scan_loss, &c, c.kq, dkq, nk, COORDS * 2, 1e-2f, TOL, &rng);
    snprintf(name, sizeof name, "%s D L=%d%s", nm, L, sfx);
    gc_check(name, scan_loss, &c, c.D, dD, c.E, COORDS, 1e-2f, TOL, &rng);
    if (own) {
        snprintf(name, sizeof name, "%s A_log L=%d%s", nm, L, sfx);
        gc_check(name, scan_loss, &c, c.A, dA, (size_t)c.E * c.N, COORDS, 1e-2f, TOL, &rng);
    }
    free(ref), free(rT), free(rsq), free(du), free(ddelta), free(dkq), free(dD), free(dA);
    free(c.u), free(c.delta), free(c.kq), free(c.D), free(c.A), free(c.y), free(c.R);
    free(c.h0), free(c.hT), free(c.hsq);
}

/* Longhorn's forget gate near zero: large k and beta near 1 make a_t tiny; the backward must
 * stay exact there (no division by a_t). */
static void test_scan_small_gate(void) {
    ScanCtx c = {.B = 1, .L = 12, .E = 3, .N = 4, .rev = 0, .rec = VIL_REC_LONGHORN};
    c.xdbl_ld = 1 + 2 * c.N;
    size_t n = (size_t)c.B * c.L * c.E, nk = (size_t)c.B * c.L * c.xdbl_ld;
    c.u = rnd(n, 1), c.delta = rnd(n, 1), c.kq = rnd(nk, 1), c.D = rnd(c.E, 1), c.y = zeros(n), c.R = rnd(n, 1);
    c.A = NULL;
    for (size_t i = 0; i < n; i++) c.delta[i] = 8.0f + c.delta[i]; /* beta ~ 1 */
    for (size_t r = 0; r < (size_t)c.L; r++) c.kq[r * c.xdbl_ld + 1] = 6.0f; /* k0^2 = 36 dominates kappa */
    float *du = zeros(n), *ddelta = zeros(n), *dkq = zeros(nk), *dD = zeros(c.E);
    scan_dir_backward(VIL_REC_LONGHORN, du, ddelta, dkq + 1, dkq + 1 + c.N, dD, NULL, c.R, c.u, c.delta, c.kq + 1,
                      c.kq + 1 + c.N, c.D, NULL, c.B, c.L, c.E, c.N, c.xdbl_ld, 0, NULL);
    gc_check("longhorn u, gate a_t ~ 1e-3", scan_loss, &c, c.u, du, n, COORDS, 1e-3f, TOL, &rng);
    gc_check("longhorn k,q, gate a_t ~ 1e-3", scan_loss, &c, c.kq, dkq, nk, COORDS, 1e-3f, TOL, &rng);
    free(du), free(ddelta), free(dkq), free(dD), free(c.u), free(c.delta), free(c.kq), free(c.D), free(c.y), free(c.R);
}

/* ---------------- bidirectional core (gate + average) ---------------- */
typedef struct {
    int B, L, E, N, R, xdbl_ld, ldz;
    VilRecurrence rec;
    float *u[2], *delta[2], *xdbl[2], *z, *D[2], *A[2], *out, *Rw;
    float *h0, *hT; /* (B, 2, N, E), causal (B, N, E); or NULL */
    int causal;     /* direction 0 alone: the [1] members NULL */
} BiCtx;
static double bi_loss(void *p) {
    BiCtx *c = p;
    scan_bidir_forward(&(VilScanFwd){.rec = c->rec, .out = c->out,
                                     .u = {c->u[0], c->u[1]}, .delta = {c->delta[0], c->delta[1]},
                                     .xdbl = {c->xdbl[0], c->xdbl[1]}, .z = c->z, .D = {c->D[0], c->D[1]},
                                     .A_log = {c->A[0], c->A[1]}, .B = c->B, .L = c->L, .E = c->E,
                                     .N = c->N, .dt_ld = c->R, .xdbl_ld = c->xdbl_ld, .ldz = c->ldz,
                                     .h0 = c->h0, .hT = c->hT, .causal = c->causal});
    return gc_dot(c->out, c->Rw, (size_t)c->B * c->L * c->E);
}
/* with_h0: both directions from non-zero initial states (B, 2, N, E), their final states out */
static void test_bidir(VilRecurrence rec, int with_h0) {
    BiCtx c = {.B = 2, .L = 7, .E = 5, .N = 4, .R = 2, .ldz = 9, .rec = rec};
    const char *id = vil_recurrences[rec].id;
    int own = rec_own(rec);
    char name[96];
    size_t ns = (size_t)c.B * 2 * c.N * c.E;
    if (with_h0) c.h0 = rnd(ns, 2), c.hT = zeros(ns);
    int xdbl_ld = c.R + 2 * c.N + 3; /* x_dbl rows padded past R + 2N: the padding is never touched */
    c.xdbl_ld = xdbl_ld;
    size_t n = (size_t)c.B * c.L * c.E, nx = (size_t)c.B * c.L * xdbl_ld, nz = (size_t)c.B * c.L * c.ldz;
    for (int j = 0; j < 2; j++) {
        c.u[j] = rnd(n, 1), c.delta[j] = rnd(n, 1), c.xdbl[j] = rnd(nx, 0.7f), c.D[j] = rnd(c.E, 1);
        c.A[j] = rnd((size_t)c.E * c.N, 0.5f);
    }
    c.z = rnd(nz, 1), c.out = zeros(n), c.Rw = rnd(n, 1);
    bi_loss(&c);
    /* reference from the single-direction scans (checked above) and the gate formula */
    float *y0 = zeros(n), *y1 = zeros(n), *hT = zeros(ns);
    for (int j = 0; j < 2; j++) {
        float *y = j ? y1 : y0;
        size_t off = (size_t)j * c.N * c.E;
        VilScanState st = {.h0 = c.h0 ? c.h0 + off : NULL, .hT = hT + off, .ld = (size_t)2 * c.N * c.E};
        scan_dir_forward(rec, y, c.u[j], c.delta[j], c.xdbl[j] + c.R,
                         c.xdbl[j] + c.R + c.N, c.D[j], own ? c.A[j] : NULL, c.B, c.L, c.E, c.N, c.xdbl_ld, j, &st);
    }
    if (with_h0)
        T_CHECK(!memcmp(hT, c.hT, ns * sizeof(float)), "bidir %s: the final states (B, 2, N, E) are the directions'",
                id);
    free(hT);
    double *ref = vil_malloc(n * sizeof(double));
    for (size_t r = 0; r < (size_t)c.B * c.L; r++)
        for (int e = 0; e < c.E; e++) {
            double z = c.z[r * c.ldz + e], g = z / (1 + exp(-z));
            ref[r * c.E + e] = 0.5 * (y0[r * c.E + e] * g + y1[r * c.E + e] * g);
        }
    snprintf(name, sizeof name, "bidir %s forward (gate, average)", id);
    T_CLOSE(name, rel_err(c.out, ref, n), 1e-6);
    float *du[2], *ddl[2], *dxd[2], *dD[2], *dA[2], *dz = zeros(nz);
    for (int j = 0; j < 2; j++) du[j] = zeros(n), ddl[j] = zeros(n), dxd[j] = zeros(nx), dD[j] = zeros(c.E), dA[j] = zeros((size_t)c.E * c.N);
    for (int j = 0; j < 2; j++)
        for (size_t r = 0; r < (size_t)c.B * c.L; r++)
            for (int k = c.R + 2 * c.N; k < xdbl_ld; k++) dxd[j][r * xdbl_ld + k] = 5.0f;
    float *dbs[2] = {rnd(c.E, 1), rnd(c.E, 1)}, *dbs0[2] = {vil_malloc(c.E * sizeof(float)), vil_malloc(c.E * sizeof(float))};
    for (int j = 0; j < 2; j++) memcpy(dbs0[j], dbs[j], c.E * sizeof(float));
    /* the gated output made again, into rows as dz's (ldz apart; the padding left alone) */
    const int ldo = c.ldz;
    float *oagain = vil_malloc((size_t)c.B * c.L * ldo * sizeof(float));
    for (size_t i = 0; i < (size_t)c.B * c.L * ldo; i++) oagain[i] = 7.0f;
    scan_bidir_backward(&(VilScanBwd){.rec = rec, .out = oagain,
                                      .du = {du[0], du[1]},
                                      .ddelta = {ddl[0], ddl[1]}, .dxdbl = {dxd[0], dxd[1]}, .dz = dz,
                                      .dD = {dD[0], dD[1]}, .dA_log = {dA[0], dA[1]}, .ddelta_sum = {dbs[0], dbs[1]},
                                      .dout = c.Rw, .u = {c.u[0], c.u[1]}, .delta = {c.delta[0], c.delta[1]},
                                      .xdbl = {c.xdbl[0], c.xdbl[1]}, .z = c.z, .D = {c.D[0], c.D[1]},
                                      .A_log = {c.A[0], c.A[1]}, .B = c.B, .L = c.L, .E = c.E, .N = c.N,
                                      .dt_ld = c.R, .xdbl_ld = c.xdbl_ld, .ldz = c.ldz, .h0 = c.h0});
    /* ddelta_sum adds the column sums of ddelta (dt_proj's bias gradient; ddelta itself is checked
     * against finite differences below) */
    double dbs_err = 0;
    for (int j = 0; j < 2; j++)
        for (int e = 0; e < c.E; e++) {
            double s = dbs0[j][e];
            for (size_t r = 0; r < (size_t)c.B * c.L; r++) s += ddl[j][r * c.E + e];
            dbs_err = fmax(dbs_err, fabs(dbs[j][e] - s));
        }
    snprintf(name, sizeof name, "bidir %s ddelta_sum", id);
    T_CLOSE(name, dbs_err, 1e-5);
    int again_ok = 1;
    for (size_t r = 0; r < (size_t)c.B * c.L; r++)
        for (int e = 0; e < ldo; e++)
            again_ok &= e < c.E ? oagain[r * ldo + e] == c.out[r * c.E + e] : oagain[r * ldo + e] == 7.0f;
    T_CHECK(again_ok, "bidir %s backward: its out is the forward's, bit for bit, and the row padding is untouched",
            id);
    free(oagain);
    for (int j = 0; j < 2; j++) free(dbs[j]), free(dbs0[j]);
    int xpad_ok = 1;
    for (int j = 0; j < 2; j++)
        for (size_t r = 0; r < (size_t)c.B * c.L; r++)
            for (int k = c.R + 2 * c.N; k < xdbl_ld; k++) xpad_ok &= dxd[j][r * xdbl_ld + k] == 5.0f;
    T_CHECK(xpad_ok, "scan_bidir_backward wrote into the padding of dx_dbl's rows");
    /* dt_low columns belong to dt_proj's backward, the padding to no one: zero them for the check
     * of the k, q columns */
    for (int j = 0; j < 2; j++)
        for (size_t r = 0; r < (size_t)c.B * c.L; r++)
            for (int k = 0; k < xdbl_ld; k++)
                if (k < c.R || k >= c.R + 2 * c.N) dxd[j][r * xdbl_ld + k] = 0;
    /* z's gradient only for the E columns the gate reads; the others must be left alone */
    for (size_t r = 0; r < (size_t)c.B * c.L; r++)
        for (int k = c.E; k < c.ldz; k++) dz[r * c.ldz + k] = 0;
    char nm[48];
    snprintf(nm, sizeof nm, "bidir(%s)%s", id, with_h0 ? " h0" : "");
    for (int j = 0; j < 2; j++) {
        snprintf(name, sizeof name, "%s u[%d]", nm, j);
        gc_check(name, bi_loss, &c, c.u[j], du[j], n, COORDS, 1e-2f, TOL, &rng);
        snprintf(name, sizeof name, "%s delta[%d]", nm, j);
        gc_check(name, bi_loss, &c, c.delta[j], ddl[j], n, COORDS, 1e-2f, TOL, &rng);
        snprintf(name, sizeof name, "%s x_dbl[%d] (k, q)", nm, j);
        /* restrict to k, q columns by checking against a gradient whose dt columns are 0:
         * perturbing dt_low columns changes nothing in this op, so fd is 0 there too */
        gc_check(name, bi_loss, &c, c.xdbl[j], dxd[j], nx, COORDS * 2, 1e-2f, TOL, &rng);
        snprintf(name, sizeof name, "%s D[%d]", nm, j);
        gc_check(name, bi_loss, &c, c.D[j], dD[j], c.E, COORDS, 1e-2f, TOL, &rng);
        if (own) {
            snprintf(name, sizeof name, "%s A_log[%d]", nm, j);
            gc_check(name, bi_loss, &c, c.A[j], dA[j], (size_t)c.E * c.N, COORDS, 1e-2f, TOL, &rng);
        }
    }
    snprintf(name, sizeof name, "%s z", nm);
    gc_check(name, bi_loss, &c, c.z, dz, nz, COORDS * 2, 1e-2f, TOL, &rng);
    for (int j = 0; j < 2; j++) {
        free(du[j]), free(ddl[j]), free(dxd[j]), free(dD[j]), free(dA[j]);
        free(c.u[j]), free(c.delta[j]), free(c.xdbl[j]), free(c.D[j]), free(c.A[j]);
    }
    free(dz), free(y0), free(y1), free(ref), free(c.z), free(c.out), free(c.Rw), free(c.h0), free(c.hT);
}

/* ---------------- one direction (causal): gate, no average ---------------- */
/* Direction 0 alone (the [1] members NULL: never read) from h0 (B, N, E) or zero: out against
 * scan_reference's double recurrence gated by SiLU(z) in double, hT against its final state,
 * every gradient (u, delta, k, q, D, A_log, z) against finite differences, ddelta_sum, and the
 * backward's out again bit for bit the forward's. E = 70: a partial channel block of the CPU
 * scan (64). */
static void test_scan_causal(VilRecurrence rec, int with_h0) {
    BiCtx c = {.B = 2, .L = 9, .E = 70, .N = 4, .R = 2, .ldz = 73, .rec = rec, .causal = 1};
    const char *id = vil_recurrences[rec].id;
    int own = rec_own(rec), B = c.B, L = c.L, E = c.E, N = c.N;
    char name[96], nm[48];
    snprintf(nm, sizeof nm, "causal(%s)%s", id, with_h0 ? " h0" : "");
    size_t ns = (size_t)B * N * E;
    if (with_h0) c.h0 = rnd(ns, 2);
    c.hT = zeros(ns);
    c.xdbl_ld = c.R + 2 * N + 3;
    size_t n = (size_t)B * L * E, nx = (size_t)B * L * c.xdbl_ld, nz = (size_t)B * L * c.ldz;
    c.u[0] = rnd(n, 1), c.delta[0] = rnd(n, 1), c.xdbl[0] = rnd(nx, 0.7f), c.D[0] = rnd(E, 1);
    c.A[0] = own ? rnd((size_t)E * N, 0.5f) : NULL;
    c.z = rnd(nz, 1), c.out = zeros(n), c.Rw = rnd(n, 1);
    bi_loss(&c);
    /* scan_reference reads k at column 1 of its rows: x_dbl from column R - 1 */
    ScanCtx sc = {.B = B, .L = L, .E = E, .N = N, .xdbl_ld = c.xdbl_ld, .rec = rec, .u = c.u[0],
                  .delta = c.delta[0], .kq = c.xdbl[0] + c.R - 1, .D = c.D[0], .A = c.A[0], .h0 = c.h0};
    double *y = vil_malloc(n * sizeof(double)), *rT = vil_malloc(ns * sizeof(double));
    scan_reference(&sc, y, rT, NULL);
    for (size_t r = 0; r < (size_t)B * L; r++)
        for (int e = 0; e < E; e++) {
            double z = c.z[r * c.ldz + e];
            y[r * E + e] *= z / (1 + exp(-z));
        }
    snprintf(name, sizeof name, "%s forward (gate, no average)", nm);
    T_CLOSE(name, rel_err(c.out, y, n), 1e-5);
    snprintf(name, sizeof name, "%s final state (B, N, E)", nm);
    T_CLOSE(name, rel_err(c.hT, rT, ns), 1e-5);
    free(y), free(rT), free(c.hT);
    c.hT = NULL;
    float *du = zeros(n), *ddl = zeros(n), *dxd = zeros(nx), *dD = zeros(E), *dA = zeros((size_t)E * N);
    float *dz = zeros(nz), *dbs = zeros(E), *oagain = vil_malloc(nz * sizeof(float));
    for (size_t i = 0; i < nz; i++) oagain[i] = 7.0f;
    scan_bidir_backward(&(VilScanBwd){.rec = rec, .out = oagain, .du = {du}, .ddelta = {ddl}, .dxdbl = {dxd},
                                      .dz = dz, .dD = {dD}, .dA_log = {own ? dA : NULL}, .ddelta_sum = {dbs},
                                      .dout = c.Rw, .u = {c.u[0]}, .delta = {c.delta[0]}, .xdbl = {c.xdbl[0]},
                                      .z = c.z, .D = {c.D[0]}, .A_log = {c.A[0]}, .B = B, .L = L, .E = E, .N = N,
                                      .dt_ld = c.R, .xdbl_ld = c.xdbl_ld, .ldz = c.ldz, .h0 = c.h0, .causal = 1});
    int again_ok = 1;
    for (size_t r = 0; r < (size_t)B * L; r++)
        for (int e = 0; e < c.ldz; e++)
            again_ok &= e < E ? oagain[r * c.ldz + e] == c.out[r * E + e] : oagain[r * c.ldz + e] == 7.0f;
    T_CHECK(again_ok, "%s backward: its out is the forward's, bit for bit, the row padding untouched", nm);
    double dbs_err = 0;
    for (int e = 0; e < E; e++) {
        double sum = 0;
        for (size_t r = 0; r < (size_t)B * L; r++) sum += ddl[r * E + e];
        dbs_err = fmax(dbs_err, fabs(dbs[e] - sum));
    }
    snprintf(name, sizeof name, "%s ddelta_sum", nm);
    T_CLOSE(name, dbs_err, 1e-5);
    for (size_t r = 0; r < (size_t)B * L; r++) {
        for (int k = 0; k < c.xdbl_ld; k++)
            if (k < c.R || k >= c.R + 2 * N) dxd[r * c.xdbl_ld + k] = 0; /* dt_proj's columns and padding */
        for (int k = E; k < c.ldz; k++) dz[r * c.ldz + k] = 0;
    }
    snprintf(name, sizeof name, "%s u", nm);
    gc_check(name, bi_loss, &c, c.u[0], du, n, COORDS, 1e-2f, TOL, &rng);
    snprintf(name, sizeof name, "%s delta", nm);
    gc_check(name, bi_loss, &c, c.delta[0], ddl, n, COORDS, 1e-2f, TOL, &rng);
    snprintf(name, sizeof name, "%s x_dbl (k, q)", nm);
    gc_check(name, bi_loss, &c, c.xdbl[0], dxd, nx, COORDS * 2, 1e-2f, TOL, &rng);
    snprintf(name, sizeof name, "%s D", nm);
    gc_check(name, bi_loss, &c, c.D[0], dD, E, COORDS, 1e-2f, TOL, &rng);
    if (own) {
        snprintf(name, sizeof name, "%s A_log", nm);
        gc_check(name, bi_loss, &c, c.A[0], dA, (size_t)E * N, COORDS, 1e-2f, TOL, &rng);
    }
    snprintf(name, sizeof name, "%s z", nm);
    gc_check(name, bi_loss, &c, c.z, dz, nz, COORDS * 2, 1e-2f, TOL, &rng);
    free(du), free(ddl), free(dxd), free(dD), free(dA), free(dz), free(dbs), free(oagain);
    free(c.u[0]), free(c.delta[0]), free(c.xdbl[0]), free(c.D[0]), free(c.A[0]), free(c.z), free(c.out), free(c.Rw);
    free(c.h0);
}

/* Truncated BPTT's identities, causal: L = 20 tokens in one call (from h0), and the same tokens
 * in chunks of 7, 1 and 12, each from the state the chunk before handed out (its hT as the next
 * h0): the chunks' outputs and the last final state are the one call's, bit for bit; and a
 * chunk's backward from its h0 is the one-call backward of a loss that reads that chunk's
 * outputs alone (dout zero elsewhere), on the chunk's tokens (du, ddelta, dk, dq, dz) and in dD,
 * bit for bit (dA_log and the ddelta sum of the one call also hold the earlier chunks' part,
 * through the state, which truncation drops). */
static void test_scan_tbtt(VilRecurrence rec) {
    int B = 2, L = 20, E = 70, N = 4, R = 2, ldz = 2 * E, xld = R + 2 * N + 1;
    const char *id = vil_recurrences[rec].id;
    int own = rec_own(rec);
    size_t n = (size_t)B * L * E, nx = (size_t)B * L * xld, nz = (size_t)B * L * ldz, ns = (size_t)B * N * E;
    float *u = rnd(n, 1), *dl = rnd(n, 1), *xd = rnd(nx, 0.7f), *xz = rnd(nz, 1), *D = rnd(E, 1);
    float *A = own ? rnd((size_t)E * N, 0.5f) : NULL, *h0 = rnd(ns, 1), *dout = rnd(n, 1);
    float *out = zeros(n), *hT = zeros(ns), *state = vil_malloc(ns * sizeof(float));
    VilScanFwd one = {.rec = rec, .out = out, .u = {u}, .delta = {dl}, .xdbl = {xd}, .z = xz + E, .D = {D},
                      .A_log = {A}, .B = B, .L = L, .E = E, .N = N, .dt_ld = R, .xdbl_ld = xld, .ldz = ldz,
                      .h0 = h0, .hT = hT, .causal = 1};
    scan_bidir_forward(&one);
    memcpy(state, h0, ns * sizeof(float));
    const int cl[3] = {7, 1, 12};
    int fwd_same = 1, bwd_same = 1;
    for (int k = 0, t0 = 0; k < 3; t0 += cl[k], k++) {
        int m = cl[k];
        size_t mn = (size_t)B * m * E, mx = (size_t)B * m * xld, mz = (size_t)B * m * ldz;
        float *uk = take_rows(u, B, L, E, t0, m), *dlk = take_rows(dl, B, L, E, t0, m);
        float *xdk = take_rows(xd, B, L, xld, t0, m), *xzk = take_rows(xz, B, L, ldz, t0, m);
        float *outk = zeros(mn), *h0k = vil_malloc(ns * sizeof(float));
        memcpy(h0k, state, ns * sizeof(float));
        VilScanFwd f = one;
        f.out = outk, f.u[0] = uk, f.delta[0] = dlk, f.xdbl[0] = xdk, f.z = xzk + E, f.L = m, f.h0 = h0k, f.hT = state;
        scan_bidir_forward(&f);
        fwd_same &= same_rows(out, outk, B, L, E, t0, m, 0, E);
        /* the chunk's loss: the one call with dout zero outside the chunk, and the chunk alone */
        float *doutm = zeros(n);
        for (int b = 0; b < B; b++)
            memcpy(doutm + ((size_t)b * L + t0) * E, dout + ((size_t)b * L + t0) * E, (size_t)m * E * sizeof(float));
        float *g[2][6]; /* du, ddelta, dxdbl, dz, dD, dA of the one call [0] and of the chunk [1] */
        for (int w = 0; w < 2; w++) {
            size_t sz = w ? mn : n;
            g[w][0] = zeros(sz), g[w][1] = zeros(sz), g[w][2] = zeros(w ? mx : nx), g[w][3] = zeros(w ? mz : nz);
            g[w][4] = zeros(E), g[w][5] = zeros((size_t)E * N);
        }
        float *doutk = take_rows(doutm, B, L, E, t0, m);
        VilScanBwd bw = {.rec = rec, .du = {g[0][0]}, .ddelta = {g[0][1]}, .dxdbl = {g[0][2]}, .dz = g[0][3] + E,
                         .dD = {g[0][4]}, .dA_log = {own ? g[0][5] : NULL}, .dout = doutm, .u = {u}, .delta = {dl},
                         .xdbl = {xd}, .z = xz + E, .D = {D}, .A_log = {A}, .B = B, .L = L, .E = E, .N = N,
                         .dt_ld = R, .xdbl_ld = xld, .ldz = ldz, .h0 = h0, .causal = 1};
        scan_bidir_backward(&bw);
        bw.du[0] = g[1][0], bw.ddelta[0] = g[1][1], bw.dxdbl[0] = g[1][2], bw.dz = g[1][3] + E, bw.dD[0] = g[1][4];
        bw.dA_log[0] = own ? g[1][5] : NULL, bw.dout = doutk, bw.u[0] = uk, bw.delta[0] = dlk, bw.xdbl[0] = xdk;
        bw.z = xzk + E, bw.L = m, bw.h0 = h0k;
        scan_bidir_backward(&bw);
        bwd_same &= same_rows(g[0][0], g[1][0], B, L, E, t0, m, 0, E) && same_rows(g[0][1], g[1][1], B, L, E, t0, m, 0, E) &&
                    same_rows(g[0][2], g[1][2], B, L, xld, t0, m, R, 2 * N) &&
                    same_rows(g[0][3], g[1][3], B, L, ldz, t0, m, E, E) && !memcmp(g[0][4], g[1][4], E * sizeof(float));
        for (int w = 0; w < 2; w++)
            for (int i = 0; i < 6; i++) free(g[w][i]);
        free(uk), free(dlk), free(xdk), free(xzk), free(outk), free(h0k), free(doutm), free(doutk);
    }
    T_CHECK(fwd_same, "causal %s: chunks of 7, 1, 12 tokens from the carried state give one call's outputs", id);
    T_CHECK(!memcmp(hT, state, ns * sizeof(float)), "causal %s: the last chunk's final state is one call's", id);
    T_CHECK(bwd_same, "causal %s: a chunk's backward from its h0 is the one-call backward of the chunk's loss", id);
    free(u), free(dl), free(xd), free(xz), free(D), free(A), free(h0), free(dout), free(out), free(hT), free(state);
}

/* ---------------- loss ---------------- */
typedef struct {
    int B, C;
    float *logits, *targets, *probs, *loss;
} XentCtx;
static double xent_loss(void *p) {
    XentCtx *c = p;
    softmax_xent_forward(&(VilXentFwd){.loss = c->loss, .probs = c->probs, .logits = c->logits,
                                       .targets = c->targets, .B = c->B, .C = c->C});
    double s = 0;
    for (int b = 0; b < c->B; b++) s += c->loss[b];
    return s / c->B;
}
static void test_xent(void) {
    XentCtx c = {.B = 3, .C = 7};
    c.logits = rnd((size_t)c.B * c.C, 3), c.targets = zeros((size_t)c.B * c.C);
    c.probs = zeros((size_t)c.B * c.C), c.loss = zeros(c.B);
    /* soft targets: smoothing 0.1 plus a 0.7/0.3 mix of two classes */
    for (int b = 0; b < c.B; b++) {
        for (int k = 0; k < c.C; k++) c.targets[b * c.C + k] = 0.1f / c.C;
        c.targets[b * c.C + b] += 0.9f * 0.7f;
        c.targets[b * c.C + (b + 2) % c.C] += 0.9f * 0.3f;
    }
    double l = xent_loss(&c);
    double ref = 0;
    for (int b = 0; b < c.B; b++) {
        double mx = -1e30, s = 0;
        for (int k = 0; k < c.C; k++) mx = fmax(mx, c.logits[b * c.C + k]);
        for (int k = 0; k < c.C; k++) s += exp(c.logits[b * c.C + k] - mx);
        for (int k = 0; k < c.C; k++) ref -= c.targets[b * c.C + k] * (c.logits[b * c.C + k] - mx - log(s));
    }
    ref /= c.B;
    T_CLOSE("softmax_xent forward", fabs(l - ref) / fabs(ref), 1e-6);
    float *dl = zeros((size_t)c.B * c.C);
    softmax_xent_backward(&(VilXentBwd){.dlogits = dl, .probs = c.probs, .targets = c.targets, .B = c.B, .C = c.C, .denom = c.B});
    gc_check("softmax_xent logits", xent_loss, &c, c.logits, dl, (size_t)c.B * c.C, COORDS, 1e-2f, TOL, &rng);
    free(dl), free(c.logits), free(c.targets), free(c.probs), free(c.loss);
}

/* ---------------- AdamW ---------------- */
static void test_adamw(void) {
    size_t n = 50;
    float *p = rnd(n, 1), *g = rnd(n, 1), *m = zeros(n), *v = zeros(n);
    double *pd = vil_malloc(n * sizeof(double)), *md = vil_calloc(n, sizeof(double)), *vd = vil_calloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++) pd[i] = p[i];
    float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.05f;
    unsigned char decay[50];
    for (size_t i = 0; i < n; i++) decay[i] = (unsigned char)(i % 3 != 0); /* a third exempt */
    for (int step = 1; step <= 3; step++) {
        adamw_update(&(VilAdamW){.p = p, .g = g, .m = m, .v = v, .decay = decay, .n = n, .step = step,
                                 .h = &(VilOptimHyper){.lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps, .wd = wd}});
        for (size_t i = 0; i < n; i++) {
            /* torch.optim.AdamW: decay first, then the Adam update */
            if (decay[i]) pd[i] *= 1.0 - (double)lr * wd;
            md[i] = b1 * md[i] + (1 - b1) * (double)g[i];
            vd[i] = b2 * vd[i] + (1 - b2) * (double)g[i] * g[i];
            double mh = md[i] / (1 - pow(b1, step)), vh = vd[i] / (1 - pow(b2, step));
            pd[i] -= lr * mh / (sqrt(vh) + eps);
        }
    }
    T_CLOSE("adamw 3 steps vs torch formula", rel_err(p, pd, n), 1e-5);
    free(p), free(g), free(m), free(v), free(pd), free(md), free(vd);
}

/* clip_grad_norm_ against torch's formula in long double: a clipping case, a case under the
 * limit (g untouched), and a NaN (the norm says so and g is scaled by NaN, as torch does) */
static void test_grad_clip(void) {
    size_t n = 1003;
    float *g = rnd(n, 1), *g0 = vil_malloc(n * sizeof(float));
    memcpy(g0, g, n * sizeof(float));
    long double s = 0;
    for (size_t i = 0; i < n; i++) s += (long double)g[i] * g[i];
    double want = sqrtl(s);
    float norm = -1;
    grad_clip(&(VilGradClip){.g = g, .n = n, .max_norm = 2.0f, .norm = &norm});
    T_CHECK(fabs(norm - want) <= 1e-6 * want, "grad_clip norm %.9g, want %.9g", norm, want);
    double c = 2.0 / ((double)norm + 1e-6), worst = 0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(g[i] - g0[i] * c));
    T_CHECK(worst <= 1e-6, "grad_clip scales by max_norm / (norm + 1e-6): worst %.3g", worst);
    memcpy(g, g0, n * sizeof(float));
    grad_clip(&(VilGradClip){.g = g, .n = n, .max_norm = 1e3f, .norm = &norm});
    T_CHECK(memcmp(g, g0, n * sizeof(float)) == 0, "grad_clip under the limit leaves g as it is");
    g[5] = NAN;
    grad_clip(&(VilGradClip){.g = g, .n = n, .max_norm = 2.0f, .norm = &norm});
    T_CHECK(isnan(norm) && isnan(g[0]), "grad_clip of a NaN gradient: norm %g, g[0] %g", norm, g[0]);
    free(g), free(g0);
}

int main(void) {
    vil_rng_seed(&rng, 1234);
    test_linear();
    test_patch_embed(4);
    test_patch_embed(3); /* overlapping patches (stride < patch) */
    test_tokens();
    test_norm(0);
    test_norm(1);
    test_conv(0);
    test_conv(1);
    test_conv_causal();
    test_recurrence_table();
    int Ls[] = {1, 7, 20};
    for (int i = 0; i < 3; i++)
        for (int rev = 0; rev < 2; rev++)
            for (int h0 = 0; h0 < 2; h0++)
                for (int r = 0; r < VIL_REC_COUNT; r++) test_scan((VilRecurrence)r, rev, Ls[i], 5, h0);
    /* more channels than one channel block of the CPU scan (Longhorn's 64, vectorized), with a
     * partial block */
    for (int h0 = 0; h0 < 2; h0++)
        for (int r = 0; r < VIL_REC_COUNT; r++)
            if (vil_rec_block((VilRecurrence)r) > 1) {
                test_scan((VilRecurrence)r, 0, 9, 70, h0);
                test_scan((VilRecurrence)r, 1, 9, 70, h0);
            }
    test_scan_small_gate();
    for (int h0 = 0; h0 < 2; h0++)
        for (int r = 0; r < VIL_REC_COUNT; r++) test_bidir((VilRecurrence)r, h0);
    for (int r = 0; r < VIL_REC_COUNT; r++) {
        for (int h0 = 0; h0 < 2; h0++) test_scan_causal((VilRecurrence)r, h0);
        test_scan_tbtt((VilRecurrence)r);
    }
    test_xent();
    test_adamw();
    test_grad_clip();
    return t_finish();
}
