/* scan.c: vil_scan_forward / vil_scan_backward and vil_conv_forward / vil_conv_backward
 * (include/vil.h): the backend's bidirectional scan and conv1d ops (vil/backend.h VilScanFwd,
 * VilScanBwd, VilConvBidirFwd, VilConvBidirBwd) on a caller's tensors, after the checks that keep
 * a caller's shapes away from the kernels' invariants. */
#include "api/api.h"

#include <limits.h>
#include <string.h>

/* The shape checks shared by both directions: 0, or VIL_ERR_ARG with the message. */
static int check_shape(const vil_ctx *ctx, vil_scan_recurrence rec, int B, int L, int E, int N, int dt_ld,
                       int xdbl_ld, int ldz, const char *fn) {
    if (!ctx) return vil_api_fail(VIL_ERR_ARG, "%s: ctx is NULL", fn);
    if (rec != VIL_SCAN_LONGHORN && rec != VIL_SCAN_MAMBA)
        return vil_api_fail(VIL_ERR_ARG, "%s: recurrence %d (VIL_SCAN_LONGHORN or VIL_SCAN_MAMBA)", fn, (int)rec);
    if (B < 1 || L < 1 || E < 1 || dt_ld < 0)
        return vil_api_fail(VIL_ERR_ARG, "%s: B %d, L %d, E %d must be positive, dt_ld %d not negative", fn, B, L, E,
                            dt_ld);
    if (ctx->cpu ? (N < 1 || N > 64) : (N != 4 && N != 8 && N != 16))
        return vil_api_fail(VIL_ERR_ARG, "%s: N = %d; the %s scan takes %s", fn, N, ctx->cpu ? "CPU" : "CUDA",
                            ctx->cpu ? "1..64" : "4, 8 or 16");
    if (xdbl_ld < dt_ld + 2 * N || ldz < E)
        return vil_api_fail(VIL_ERR_ARG, "%s: xdbl_ld %d < dt_ld + 2 N = %d, or ldz %d < E %d", fn, xdbl_ld,
                            dt_ld + 2 * N, ldz, E);
    long long w = E > xdbl_ld ? E : xdbl_ld;
    if (w < ldz) w = ldz;
    if ((long long)B * L * w > INT_MAX || (long long)B * 2 * N * E > INT_MAX)
        return vil_api_fail(VIL_ERR_ARG, "%s: B L = %lld rows of %lld elements pass the kernels' 32-bit indexing", fn,
                            (long long)B * L, w);
    return VIL_OK;
}

static int missing(const char *fn, const char *what) {
    return vil_api_fail(VIL_ERR_ARG, "%s: %s is NULL", fn, what);
}

/* the internal recurrence of the public one (both lists in the same order: checked here) */
static VilRecurrence rec_of(vil_scan_recurrence r) {
    _Static_assert(VIL_REC_LONGHORN == (int)VIL_SCAN_LONGHORN && VIL_REC_MAMBA == (int)VIL_SCAN_MAMBA,
                   "include/vil.h's vil_scan_recurrence follows vil/rec/list.h");
    return (VilRecurrence)r;
}

VIL_API int vil_scan_forward(vil_ctx *ctx, const vil_scan_fwd *a, void *stream) {
    static const char fn[] = "vil_scan_forward";
    if (!a) return missing(fn, "a");
    int rc = check_shape(ctx, a->rec, a->B, a->L, a->E, a->N, a->dt_ld, a->xdbl_ld, a->ldz, fn);
    if (rc) return rc;
    int mamba = a->rec == VIL_SCAN_MAMBA;
    for (int j = 0; j < 2; j++)
        if (!a->u[j] || !a->delta[j] || !a->xdbl[j] || !a->D[j] || (mamba && !a->A_log[j]))
            return missing(fn, "u, delta, xdbl, D (or Mamba's A_log) of a direction");
    if (!a->z || !a->out) return missing(fn, "z or out");
    VilScanFwd f = {.rec = rec_of(a->rec), .out = a->out, .z = a->z, .B = a->B, .L = a->L, .E = a->E, .N = a->N,
                    .dt_ld = a->dt_ld, .xdbl_ld = a->xdbl_ld, .ldz = a->ldz, .h0 = a->h0, .hT = a->hT};
    for (int j = 0; j < 2; j++) {
        f.u[j] = a->u[j];
        f.delta[j] = a->delta[j];
        f.xdbl[j] = a->xdbl[j];
        f.D[j] = a->D[j];
        f.A_log[j] = mamba ? a->A_log[j] : NULL;
    }
    VilApiCall c;
    vil_api_begin(&c, ctx);
    const VilBackend *be = ctx->be;
    be->stream_wait(be, stream);
    be->scan_bidir_forward(be, &f);
    be->stream_signal(be, stream);
    return vil_api_end(&c, 0);
}

VIL_API int vil_scan_backward(vil_ctx *ctx, const vil_scan_bwd *a, void *stream) {
    static const char fn[] = "vil_scan_backward";
    if (!a) return missing(fn, "a");
    int rc = check_shape(ctx, a->rec, a->B, a->L, a->E, a->N, a->dt_ld, a->xdbl_ld, a->ldz, fn);
    if (rc) return rc;
    int mamba = a->rec == VIL_SCAN_MAMBA;
    for (int j = 0; j < 2; j++)
        if (!a->u[j] || !a->delta[j] || !a->xdbl[j] || !a->D[j] || !a->du[j] || !a->ddelta[j] || !a->dxdbl[j] ||
            !a->dD[j] || (mamba && (!a->A_log[j] || !a->dA_log[j])))
            return missing(fn, "an input or gradient of a direction (u, delta, xdbl, D, du, ddelta, dxdbl, dD; "
                               "Mamba's A_log and dA_log)");
    if (!a->z || !a->dout || !a->dz) return missing(fn, "z, dout or dz");
    VilScanBwd b = {.rec = rec_of(a->rec), .dz = a->dz, .dout = a->dout, .z = a->z, .B = a->B, .L = a->L, .E = a->E,
                    .N = a->N, .dt_ld = a->dt_ld, .xdbl_ld = a->xdbl_ld, .ldz = a->ldz, .h0 = a->h0};
    for (int j = 0; j < 2; j++) {
        b.u[j] = a->u[j];
        b.delta[j] = a->delta[j];
        b.xdbl[j] = a->xdbl[j];
        b.D[j] = a->D[j];
        b.A_log[j] = mamba ? a->A_log[j] : NULL;
        b.du[j] = a->du[j];
        b.ddelta[j] = a->ddelta[j];
        b.dxdbl[j] = a->dxdbl[j];
        b.dD[j] = a->dD[j];
        b.dA_log[j] = mamba ? a->dA_log[j] : NULL;
        b.ddelta_sum[j] = a->ddelta_sum[j];
    }
    VilApiCall c;
    vil_api_begin(&c, ctx);
    const VilBackend *be = ctx->be;
    be->stream_wait(be, stream);
    be->scan_bidir_backward(be, &b);
    be->stream_signal(be, stream);
    return vil_api_end(&c, 0);
}

/* the conv's shape checks: 0, or VIL_ERR_ARG with the message */
static int check_conv(const vil_ctx *ctx, int B, int L, int E, int K, int ldx, const char *fn) {
    if (!ctx) return vil_api_fail(VIL_ERR_ARG, "%s: ctx is NULL", fn);
    if (B < 1 || L < 1 || E < 1 || K < 1 || ldx < E)
        return vil_api_fail(VIL_ERR_ARG, "%s: B %d, L %d, E %d, K %d must be positive and ldx %d >= E", fn, B, L, E,
                            K, ldx);
    if (!ctx->cpu && K > 6) return vil_api_fail(VIL_ERR_ARG, "%s: K = %d; the CUDA conv1d takes 1..6", fn, K);
    if ((long long)B * L * ldx > INT_MAX)
        return vil_api_fail(VIL_ERR_ARG, "%s: B L = %lld rows of %d elements pass the kernels' 32-bit indexing", fn,
                            (long long)B * L, ldx);
    return VIL_OK;
}

VIL_API int vil_conv_forward(vil_ctx *ctx, const vil_conv_fwd *a, void *stream) {
    static const char fn[] = "vil_conv_forward";
    if (!a) return missing(fn, "a");
    int rc = check_conv(ctx, a->B, a->L, a->E, a->K, a->ldx, fn);
    if (rc != VIL_OK) return rc;
    if (!a->x || !a->u[0] || !a->u[1] || !a->w[0] || !a->w[1] || !a->b[0] || !a->b[1])
        return missing(fn, "one of x, u, w, b");
    VilApiCall c;
    vil_api_begin(&c, ctx);
    const VilBackend *be = ctx->be;
    be->stream_wait(be, stream);
    be->conv1d_silu_bidir_forward(be, &(VilConvBidirFwd){.u = {a->u[0], a->u[1]}, .x = a->x,
                                                         .w = {a->w[0], a->w[1]}, .b = {a->b[0], a->b[1]},
                                                         .B = a->B, .L = a->L, .E = a->E, .K = a->K,
                                                         .ldx = a->ldx});
    be->stream_signal(be, stream);
    return vil_api_end(&c, 0);
}

VIL_API int vil_conv_backward(vil_ctx *ctx, const vil_conv_bwd *a, void *stream) {
    static const char fn[] = "vil_conv_backward";
    if (!a) return missing(fn, "a");
    int rc = check_conv(ctx, a->B, a->L, a->E, a->K, a->ldx, fn);
    if (rc != VIL_OK) return rc;
    if (!a->x || !a->du[0] || !a->du[1] || !a->dx || !a->w[0] || !a->w[1] || !a->b[0] || !a->b[1] || !a->dw[0] ||
        !a->dw[1] || !a->db[0] || !a->db[1])
        return missing(fn, "one of x, du, dx, w, b, dw, db");
    VilApiCall c;
    vil_api_begin(&c, ctx);
    const VilBackend *be = ctx->be;
    be->stream_wait(be, stream);
    be->conv1d_silu_bidir_backward(be, &(VilConvBidirBwd){.dx = a->dx, .dw = {a->dw[0], a->dw[1]},
                                                          .db = {a->db[0], a->db[1]}, .du = {a->du[0], a->du[1]},
                                                          .x = a->x, .w = {a->w[0], a->w[1]},
                                                          .b = {a->b[0], a->b[1]}, .B = a->B, .L = a->L,
                                                          .E = a->E, .K = a->K, .ldx = a->ldx});
    be->stream_signal(be, stream);
    return vil_api_end(&c, 0);
}
