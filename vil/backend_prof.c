/* backend_prof.c: the profiling wrapper of backend_prof.h. Each wrapped op syncs, runs the
 * inner op, syncs again and adds the elapsed time to its slot. */
#include "backend_prof.h"

#include <string.h>

#include "common.h"

enum {
    P_PATCH_F, P_PATCH_B, P_TOK_F, P_TOK_B, P_NORM_F, P_NORM_B, P_LIN_F, P_LIN_B, P_CONV_F,
    P_CONV_B, P_SCAN_F, P_SCAN_B, P_XENT_F, P_XENT_B, P_ADAMW, P_ZERO, P_COUNT
};
static const char *const NAMES[P_COUNT] = {
    "patch_embed fwd", "patch_embed bwd", "tokens fwd", "tokens bwd", "add+rmsnorm fwd",
    "add+rmsnorm bwd", "linear fwd", "linear bwd", "conv1d+silu fwd", "conv1d+silu bwd",
    "scan (bidir) fwd", "scan (bidir) bwd", "loss fwd", "loss bwd", "adamw", "memset"};
static double secs[P_COUNT];
static long calls[P_COUNT];
static const VilBackend *in;
static VilBackend wrapped;

#define T0 \
    in->sync(); \
    double t0_ = vil_now()
#define T1(slot) \
    in->sync(); \
    secs[slot] += vil_now() - t0_; \
    calls[slot]++

static void w_zero(void *p, size_t bytes) { T0; in->zero(p, bytes); T1(P_ZERO); }
static void w_patch_f(void *out, const float *img, const void *w, const float *b, int B, int C,
                      int H, int W, int P, int S, int D) {
    T0; in->patch_embed_forward(out, img, w, b, B, C, H, W, P, S, D); T1(P_PATCH_F);
}
static void w_patch_b(float *dimg, float *dw, float *db, const void *dout, const void *w,
                      const float *img, int B, int C, int H, int W, int P, int S, int D) {
    T0; in->patch_embed_backward(dimg, dw, db, dout, w, img, B, C, H, W, P, S, D); T1(P_PATCH_B);
}
static void w_tok_f(float *x, const void *p, const float *cls, const float *pos, int B, int M,
                    int D, int t) {
    T0; in->tokens_forward(x, p, cls, pos, B, M, D, t); T1(P_TOK_F);
}
static void w_tok_b(void *dp, float *dcls, float *dpos, const float *dx, int B, int M, int D,
                    int t) {
    T0; in->tokens_backward(dp, dcls, dpos, dx, B, M, D, t); T1(P_TOK_B);
}
static void w_norm_f(float *ro, void *nm, float *rs, const float *ri, const void *h,
                     const float *sc, const float *w, int B, int L, int D) {
    T0; in->add_rmsnorm_forward(ro, nm, rs, ri, h, sc, w, B, L, D); T1(P_NORM_F);
}
static void w_norm_b(float *dres, void *dh, float *dw, const void *dn, const float *ro,
                     const float *rs, const float *w, const float *sc, int B, int L, int D) {
    T0; in->add_rmsnorm_backward(dres, dh, dw, dn, ro, rs, w, sc, B, L, D); T1(P_NORM_B);
}
static void w_lin_f(void *out, const void *x, const void *w, const float *b, int N, int C, int OC,
                    int ld, int ldo, int flags) {
    T0; in->linear_forward(out, x, w, b, N, C, OC, ld, ldo, flags); T1(P_LIN_F);
}
static void w_lin_b(void *dx, float *dw, float *db, const void *dout, const void *x, const void *w,
                    int N, int C, int OC, int ld, int ldo, int acc, int flags) {
    T0; in->linear_backward(dx, dw, db, dout, x, w, N, C, OC, ld, ldo, acc, flags); T1(P_LIN_B);
}
static void w_conv_f(void *u, const void *x, const float *w, const float *b, int B, int L, int E,
                     int K, int ldx, int rev) {
    T0; in->conv1d_silu_forward(u, x, w, b, B, L, E, K, ldx, rev); T1(P_CONV_F);
}
static void w_conv_b(void *dx, float *dw, float *db, const void *du, const void *x, const float *w,
                     const float *b, int B, int L, int E, int K, int ldx, int rev, int acc) {
    T0; in->conv1d_silu_backward(dx, dw, db, du, x, w, b, B, L, E, K, ldx, rev, acc); T1(P_CONV_B);
}
static void w_conv_bf(void *const u[2], const void *x, const float *const w[2],
                      const float *const b[2], int B, int L, int E, int K, int ldx) {
    T0; in->conv1d_silu_bidir_forward(u, x, w, b, B, L, E, K, ldx); T1(P_CONV_F);
}
static void w_conv_bb(void *dx, float *const dw[2], float *const db[2], const void *const du[2],
                      const void *x, const float *const w[2], const float *const b[2], int B, int L,
                      int E, int K, int ldx) {
    T0; in->conv1d_silu_bidir_backward(dx, dw, db, du, x, w, b, B, L, E, K, ldx); T1(P_CONV_B);
}
static void w_scan_f(void *out, const void *const u[2], const void *const dl[2],
                     const void *const xd[2], const void *z, const float *const D[2],
                     const float *const A[2], int B, int L, int E, int N, int R, int ldx, int ldz) {
    T0; in->scan_bidir_forward(out, u, dl, xd, z, D, A, B, L, E, N, R, ldx, ldz); T1(P_SCAN_F);
}
static void w_scan_b(void *const du[2], void *const ddl[2], void *const dxd[2], void *dz,
                     float *const dD[2], float *const dA[2], float *const dbs[2], const void *dout,
                     const void *const u[2], const void *const dl[2], const void *const xd[2],
                     const void *z, const float *const D[2], const float *const A[2], int B, int L,
                     int E, int N, int R, int ldx, int ldz) {
    T0; in->scan_bidir_backward(du, ddl, dxd, dz, dD, dA, dbs, dout, u, dl, xd, z, D, A, B, L, E, N, R, ldx, ldz);
    T1(P_SCAN_B);
}
static void w_xent_f(float *loss, float *probs, const float *logits, const float *t, int B, int C) {
    T0; in->softmax_xent_forward(loss, probs, logits, t, B, C); T1(P_XENT_F);
}
static void w_xent_b(float *dl, const float *probs, const float *t, int B, int C) {
    T0; in->softmax_xent_backward(dl, probs, t, B, C); T1(P_XENT_B);
}
static void w_adamw(float *p, void *work, const float *g, float *m, float *v,
                    const unsigned char *decay, size_t n, float lr, float b1, float b2, float eps,
                    float wd, int step) {
    T0; in->adamw_update(p, work, g, m, v, decay, n, lr, b1, b2, eps, wd, step); T1(P_ADAMW);
}

const VilBackend *vil_backend_profiled(const VilBackend *inner) {
    in = inner;
    wrapped = *inner;
    wrapped.zero = w_zero;
    wrapped.patch_embed_forward = w_patch_f;
    wrapped.patch_embed_backward = w_patch_b;
    wrapped.tokens_forward = w_tok_f;
    wrapped.tokens_backward = w_tok_b;
    wrapped.add_rmsnorm_forward = w_norm_f;
    wrapped.add_rmsnorm_backward = w_norm_b;
    wrapped.linear_forward = w_lin_f;
    wrapped.linear_backward = w_lin_b;
    wrapped.conv1d_silu_forward = w_conv_f;
    wrapped.conv1d_silu_backward = w_conv_b;
    wrapped.conv1d_silu_bidir_forward = w_conv_bf;
    wrapped.conv1d_silu_bidir_backward = w_conv_bb;
    wrapped.scan_bidir_forward = w_scan_f;
    wrapped.scan_bidir_backward = w_scan_b;
    wrapped.softmax_xent_forward = w_xent_f;
    wrapped.softmax_xent_backward = w_xent_b;
    wrapped.adamw_update = w_adamw;
    vil_prof_reset();
    return &wrapped;
}

void vil_prof_reset(void) {
    memset(secs, 0, sizeof secs);
    memset(calls, 0, sizeof calls);
}

void vil_prof_report(FILE *f, int iters) {
    double total = 0;
    for (int i = 0; i < P_COUNT; i++) total += secs[i];
    if (iters < 1) iters = 1;
    fprintf(f, "%-20s %10s %8s %7s\n", "op", "ms/step", "calls", "share");
    int order[P_COUNT];
    for (int i = 0; i < P_COUNT; i++) order[i] = i;
    for (int i = 0; i < P_COUNT; i++) /* largest first */
        for (int j = i + 1; j < P_COUNT; j++)
            if (secs[order[j]] > secs[order[i]]) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    for (int k = 0; k < P_COUNT; k++) {
        int i = order[k];
        if (!calls[i]) continue;
        fprintf(f, "%-20s %10.3f %8ld %6.1f%%\n", NAMES[i], 1e3 * secs[i] / iters, calls[i] / iters,
                total > 0 ? 100.0 * secs[i] / total : 0.0);
    }
    fprintf(f, "%-20s %10.3f\n", "total (serialized)", 1e3 * total / iters);
}
