/* norm.cu: the residual add fused with RMSNorm (the per-sample drop-path scale on the add), forward
 * and backward, as a ViL-Tiny block runs it: each version is validated against vil/norm.c's
 * add_rmsnorm_forward/backward, then timed.
 *   build/dev/cuda/norm [version] [B] [iters] [--cpu]
 * Version 1 is the readable starting point (a thread per token row); version 2 is the backend's
 * op (cuda/norm.cu). */
#include "dev/cuda/harness.h"

#define NORM_EPS 1e-5f /* vil/norm.c's RMS_EPS */

/* ---------------- version 1: naive ---------------- */

/* forward, thread r (one token row of D): res_out = res_in + scale h, then its RMSNorm times w */
__host__ __device__ inline void naive_fwd_one(const VilNormFwd &a, size_t r) {
    int D = a.D;
    float *x = a.res_out + r * D;
    float s = a.scale ? a.scale[r / a.L] : 1.0f, ss = 0.0f;
    for (int d = 0; d < D; d++) {
        if (a.res_in) x[d] = a.res_in[r * D + d] + s * h_bf2f(((const bf16 *)a.h)[r * D + d]);
        ss += x[d] * x[d];
    }
    float rs = 1.0f / sqrtf(ss / D + NORM_EPS);
    a.rstd[r] = rs;
    for (int d = 0; d < D; d++) ((bf16 *)a.normed)[r * D + d] = h_f2bf(x[d] * rs * a.w[d]);
}
__global__ void naive_fwd(VilNormFwd a) {
    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r < (size_t)a.B * a.L) naive_fwd_one(a, r);
}

/* backward, thread r: dres += the norm's input gradient, dh = scale dres, dw += g x rstd (with
 * atomics: every row adds to all of dw) */
__host__ __device__ inline void naive_bwd_one(const VilNormBwd &a, size_t r) {
    int D = a.D;
    const float *x = a.res_out + r * D, *w = a.w;
    const bf16 *g = (const bf16 *)a.dnormed + r * D;
    float rs = a.rstd[r], dot = 0.0f, s = a.scale ? a.scale[r / a.L] : 1.0f;
    for (int d = 0; d < D; d++) dot += h_bf2f(g[d]) * w[d] * x[d];
    float c = dot / D * rs * rs * rs;
    for (int d = 0; d < D; d++) {
        float dr = a.dres[r * D + d] + h_bf2f(g[d]) * w[d] * rs - x[d] * c;
        a.dres[r * D + d] = dr;
        if (a.dh) ((bf16 *)a.dh)[r * D + d] = h_f2bf(s * dr);
        h_add(&a.dw[d], h_bf2f(g[d]) * x[d] * rs);
    }
}
__global__ void naive_bwd(VilNormBwd a) {
    size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r < (size_t)a.B * a.L) naive_bwd_one(a, r);
}

static void fwd_v1(Harness *h, const void *args) {
    const VilNormFwd *a = (const VilNormFwd *)args;
    naive_fwd<<<cu_blocks((size_t)a->B * a->L, 128), 128, 0, h_stream(h)>>>(*a);
    CUDA_CHECK(cudaGetLastError());
}
static void bwd_v1(Harness *h, const void *args) {
    const VilNormBwd *a = (const VilNormBwd *)args;
    naive_bwd<<<cu_blocks((size_t)a->B * a->L, 128), 128, 0, h_stream(h)>>>(*a);
    CUDA_CHECK(cudaGetLastError());
}

/* ---------------- version 2: the backend's op ---------------- */
static void fwd_v2(Harness *h, const void *a) {
    h->be->add_rmsnorm_forward(h->be, (const VilNormFwd *)a);
}
static void bwd_v2(Harness *h, const void *a) {
    h->be->add_rmsnorm_backward(h->be, (const VilNormBwd *)a);
}

/* ---------------- the versions: version 3 is a row here and a line in the usage ---------------- */
static const HVersion versions[] = {
    {fwd_v1, bwd_v1},
    {fwd_v2, bwd_v2},
};
static const HSpec SPEC = {
    "norm",
    "usage: norm [version] [B] [iters] [--cpu]\n"
    "add + RMSNorm with the drop-path scale, forward then backward, at ViL-Tiny's shapes: D=192,\n"
    "L=197 (a block after the first: the add is on).\n"
    "  version 1  naive: a thread per token row walks its D channels; dw added with atomics\n"
    "  version 2  the backend's add_rmsnorm_forward/backward (cuda/norm.cu), what the model\n"
    "             runs (the default)\n",
    "", versions, (int)(sizeof versions / sizeof versions[0]), 64, 50};

int main(int argc, char **argv) {
    Harness h;
    h_init(&h, argc, argv, &SPEC);
    HShapes S = h_shapes(h.B, 192);
    int B = S.B, L = S.L, D = S.D;
    size_t BL = (size_t)B * L, n = BL * D;
    printf("add+rmsnorm, version %d: B=%d L=%d D=%d\n", h.version, B, L, D);

    /* forward */
    float *res_in = h_rand(&h, n, 1.0f), *hh = h_rand_bf(&h, n, 1.0f), *w = h_rand(&h, D, 1.0f);
    float *scale = h_rand(&h, B, 1.0f);
    VilNormFwd cf = {.res_out = h_host(&h, n), .normed = h_host(&h, n), .rstd = h_host(&h, BL), .res_in = res_in,
                     .h = hh, .scale = scale, .w = w, .B = B, .L = L, .D = D};
    add_rmsnorm_forward(&cf);
    VilNormFwd gf = {.res_out = (float *)h_poison(&h, n * 4), .normed = h_poison_act(&h, n),
                     .rstd = (float *)h_poison(&h, BL * 4), .res_in = h_f32(&h, res_in, n), .h = h_act(&h, hh, n),
                     .scale = h_f32(&h, scale, B), .w = h_f32(&h, w, D), .B = B, .L = L, .D = D};
    h.v->fwd(&h, &gf);
    h_check(&h, "fwd res_out", rel_l2(h_get_f32(&h, gf.res_out, n), cf.res_out, 1, n, n), 1e-6);
    h_check(&h, "fwd normed", rel_l2(h_get_act(&h, gf.normed, n), (const float *)cf.normed, 1, n, n), H_TOL_BF16);
    h_check(&h, "fwd rstd", rel_l2(h_get_f32(&h, gf.rstd, BL), cf.rstd, 1, BL, BL), 1e-5);

    /* backward, from the reference's forward outputs; dres (in/out) and dw (accumulated) start
     * from the same random values on both sides, dw compared by its increment */
    float *dn = h_rand_bf(&h, n, 1.0f), *dres0 = h_rand(&h, n, 1.0f), *dw0 = h_rand(&h, D, 1.0f);
    VilNormBwd cb = {.dres = h_copy(&h, dres0, n), .dh = h_host(&h, n), .dw = h_copy(&h, dw0, D), .dnormed = dn,
                     .res_out = cf.res_out, .rstd = cf.rstd, .w = w, .scale = scale, .B = B, .L = L, .D = D};
    add_rmsnorm_backward(&cb);
    VilNormBwd gb = {.dres = h_f32(&h, dres0, n), .dh = h_poison_act(&h, n), .dw = h_f32(&h, dw0, D),
                     .dnormed = h_act(&h, dn, n), .res_out = h_f32(&h, cf.res_out, n), .rstd = h_f32(&h, cf.rstd, BL),
                     .w = gf.w, .scale = gf.scale, .B = B, .L = L, .D = D};
    h.v->bwd(&h, &gb);
    float *dw_g = h_get_f32(&h, gb.dw, D);
    h_sub(dw_g, dw0, D), h_sub(cb.dw, dw0, D);
    h_check(&h, "bwd dres", rel_l2(h_get_f32(&h, gb.dres, n), cb.dres, 1, n, n), 1e-5);
    h_check(&h, "bwd dh", rel_l2(h_get_act(&h, gb.dh, n), (const float *)cb.dh, 1, n, n), H_TOL_BF16);
    h_check(&h, "bwd dw", rel_l2(dw_g, cb.dw, 1, D, D), 1e-5);
    if (!h_valid(&h)) return h_finish(&h);

    double T = (double)BL; /* res_in, h, res_out, normed; rstd */
    h_time(&h, "fwd", h.v->fwd, &gf, T * D * (4.0 + 2 + 4 + 2) + T * 4);
    /* dres read and written, res_out; dnormed, dh; rstd */
    h_time(&h, "bwd", h.v->bwd, &gb, T * D * (4.0 * 3 + 2 * 2) + T * 4);
    return h_finish(&h);
}
