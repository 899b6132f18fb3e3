/* conv1d.cu: the mixer's depthwise causal conv1d fused with SiLU, both directions at once
 * (direction 1 runs the filter over the reversed tokens), forward and backward, at ViL-Tiny's
 * shapes: each version is validated against vil/conv1d.c's conv1d_silu_bidir_forward/backward,
 * then timed.
 *   build/dev/cuda/conv1d [version] [B] [iters] [--cpu]
 * Version 1 is the readable starting point (a thread per output element, the pre-activation
 * recomputed wherever it is needed); version 2 is the backend's op (cuda/conv1d.cu). */
#include "dev/cuda/harness.h"

#define NAIVE_MAXK 8 /* the widest filter version 1 takes */

/* ---------------- version 1: naive ---------------- */

/* the pre-activation of direction `reverse` at token t, channel e: tap i reads token
 * t - (K-1-i) forward, t + (K-1-i) reversed (vil/conv1d.c) */
__host__ __device__ inline float naive_pre(const bf16 *x, const float *w, const float *bias, int b, int t,
                                           int e, int L, int K, int ldx, int reverse) {
    float pre = bias[e];
    for (int i = 0; i < K; i++) {
        int s = reverse ? t + (K - 1 - i) : t - (K - 1 - i);
        if (s >= 0 && s < L) pre += w[(size_t)e * K + i] * h_bf2f(x[((size_t)b * L + s) * ldx + e]);
    }
    return pre;
}
/* d SiLU(pre) / d pre times du */
__host__ __device__ inline float naive_dpre(float pre, float du) {
    float sg = h_sigmoid(pre);
    return du * sg * (1.0f + pre * (1.0f - sg));
}

/* forward, thread (row r = b*L + t, channel e): both directions' u */
__host__ __device__ inline void naive_fwd_one(const VilConvBidirFwd &a, size_t r, int e) {
    int b = (int)(r / a.L), t = (int)(r % a.L);
    for (int j = 0; j < 2; j++) {
        float pre = naive_pre((const bf16 *)a.x, a.w[j], a.b[j], b, t, e, a.L, a.K, a.ldx, j);
        ((bf16 *)a.u[j])[r * a.E + e] = h_f2bf(pre * h_sigmoid(pre));
    }
}
__global__ void naive_fwd(VilConvBidirFwd a) {
    int e = blockIdx.y * blockDim.x + threadIdx.x;
    if (e < a.E) naive_fwd_one(a, blockIdx.x, e);
}

/* backward dx, thread (row r = b*L + s, channel e): the sum over both directions of every
 * output t whose tap i reads token s */
__host__ __device__ inline void naive_dx_one(const VilConvBidirBwd &a, size_t r, int e) {
    int b = (int)(r / a.L), s = (int)(r % a.L), L = a.L, K = a.K;
    float acc = 0.0f;
    for (int j = 0; j < 2; j++)
        for (int i = 0; i < K; i++) {
            int t = j ? s - (K - 1 - i) : s + (K - 1 - i);
            if (t < 0 || t >= L) continue;
            float pre = naive_pre((const bf16 *)a.x, a.w[j], a.b[j], b, t, e, L, K, a.ldx, j);
            float du = h_bf2f(((const bf16 *)a.du[j])[((size_t)b * L + t) * a.E + e]);
            acc += a.w[j][(size_t)e * K + i] * naive_dpre(pre, du);
        }
    ((bf16 *)a.dx)[r * a.ldx + e] = h_f2bf(acc);
}
__global__ void naive_dx(VilConvBidirBwd a) {
    int e = blockIdx.y * blockDim.x + threadIdx.x;
    if (e < a.E) naive_dx_one(a, blockIdx.x, e);
}

/* backward dw, db, thread (b, e): sums over the tokens of sample b, added with atomics */
__host__ __device__ inline void naive_dw_one(const VilConvBidirBwd &a, int b, int e) {
    int L = a.L, K = a.K;
    for (int j = 0; j < 2; j++) {
        float dw[NAIVE_MAXK] = {0}, db = 0.0f;
        for (int t = 0; t < L; t++) {
            float pre = naive_pre((const bf16 *)a.x, a.w[j], a.b[j], b, t, e, L, K, a.ldx, j);
            float g = naive_dpre(pre, h_bf2f(((const bf16 *)a.du[j])[((size_t)b * L + t) * a.E + e]));
            db += g;
            for (int i = 0; i < K; i++) {
                int s = j ? t + (K - 1 - i) : t - (K - 1 - i);
                if (s >= 0 && s < L) dw[i] += g * h_bf2f(((const bf16 *)a.x)[((size_t)b * L + s) * a.ldx + e]);
            }
        }
        for (int i = 0; i < K; i++) h_add(&a.dw[j][(size_t)e * K + i], dw[i]);
        h_add(&a.db[j][e], db);
    }
}
__global__ void naive_dw(VilConvBidirBwd a) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e < a.E) naive_dw_one(a, blockIdx.y, e);
}

/* rows on grid.x (up to 2^31 - 1), channels in blocks of 128 on grid.y */
static void fwd_v1(Harness *h, const void *args) {
    const VilConvBidirFwd *a = (const VilConvBidirFwd *)args;
    naive_fwd<<<dim3((unsigned)((size_t)a->B * a->L), (a->E + 127) / 128), 128, 0, h_stream(h)>>>(*a);
    CUDA_CHECK(cudaGetLastError());
}
static void bwd_v1(Harness *h, const void *args) {
    const VilConvBidirBwd *a = (const VilConvBidirBwd *)args;
    if (a->K > NAIVE_MAXK) VIL_FATAL("version 1 takes filters up to %d wide, not %d", NAIVE_MAXK, a->K);
    cudaStream_t st = h_stream(h);
    naive_dx<<<dim3((unsigned)((size_t)a->B * a->L), (a->E + 127) / 128), 128, 0, st>>>(*a);
    CUDA_CHECK(cudaGetLastError());
    naive_dw<<<dim3((a->E + 127) / 128, a->B), 128, 0, st>>>(*a);
    CUDA_CHECK(cudaGetLastError());
}

/* ---------------- version 2: the backend's op ---------------- */
static void fwd_v2(Harness *h, const void *a) {
    h->be->conv1d_silu_bidir_forward(h->be, (const VilConvBidirFwd *)a);
}
static void bwd_v2(Harness *h, const void *a) {
    h->be->conv1d_silu_bidir_backward(h->be, (const VilConvBidirBwd *)a);
}

/* ---------------- the versions: version 3 is a row here and a line in the usage ---------------- */
static const HVersion versions[] = {
    {fwd_v1, bwd_v1},
    {fwd_v2, bwd_v2},
};
static const HSpec SPEC = {
    "conv1d",
    "usage: conv1d [version] [B] [iters] [--cpu]\n"
    "conv1d + SiLU of the mixer, both directions at once, forward then backward, at ViL-Tiny's\n"
    "shapes: E=384, K=4, L=197, x the first half of the (B, L, 2E) in_proj output.\n"
    "  version 1  naive: a thread per output element recomputes the pre-activations it needs;\n"
    "             dw, db summed per (sample, channel) and added with atomics\n"
    "  version 2  the backend's conv1d_silu_bidir_forward/backward (cuda/conv1d.cu), what the\n"
    "             model runs (the default)\n",
    "", versions, (int)(sizeof versions / sizeof versions[0]), 64, 50};

int main(int argc, char **argv) {
    Harness h;
    h_init(&h, argc, argv, &SPEC);
    HShapes S = h_shapes(h.B, 192);
    int B = S.B, L = S.L, E = S.E, K = S.K, ldx = 2 * E;
    size_t BL = (size_t)B * L, nu = BL * E, nx = BL * ldx;
    printf("conv1d+silu (both directions), version %d: B=%d L=%d E=%d K=%d, x rows %d wide\n",
           h.version, B, L, E, K, ldx);

    float *x = h_rand_bf(&h, nx, 1.0f), *w[2], *b[2], *du[2];
    const float *gw[2], *gbias[2];
    const void *gdu[2];
    for (int j = 0; j < 2; j++) {
        w[j] = h_rand(&h, (size_t)E * K, 0.5f), b[j] = h_rand(&h, E, 0.5f), du[j] = h_rand_bf(&h, nu, 1.0f);
        gw[j] = h_f32(&h, w[j], (size_t)E * K), gbias[j] = h_f32(&h, b[j], E), gdu[j] = h_act(&h, du[j], nu);
    }
    void *gx = h_act(&h, x, nx);

    /* forward */
    VilConvBidirFwd cf = {.u = {h_host(&h, nu), h_host(&h, nu)}, .x = x, .w = {w[0], w[1]},
                          .b = {b[0], b[1]}, .B = B, .L = L, .E = E, .K = K, .ldx = ldx};
    conv1d_silu_bidir_forward(&cf);
    VilConvBidirFwd gf = {.u = {h_poison_act(&h, nu), h_poison_act(&h, nu)}, .x = gx, .w = {gw[0], gw[1]},
                          .b = {gbias[0], gbias[1]}, .B = B, .L = L, .E = E, .K = K, .ldx = ldx};
    h.v->fwd(&h, &gf);
    char nm[64];
    for (int j = 0; j < 2; j++) {
        snprintf(nm, sizeof nm, "fwd u[%d]", j);
        h_check(&h, nm, rel_l2(h_get_act(&h, gf.u[j], nu), (const float *)cf.u[j], 1, nu, nu), H_TOL_BF16);
    }

    /* backward: dx overwritten with both directions' sum (x's columns only); dw, db start from
     * random values on both sides and are compared by their increments */
    float *dw0[2], *db0[2];
    VilConvBidirBwd cb = {.dx = h_host(&h, nx), .du = {du[0], du[1]}, .x = x, .w = {w[0], w[1]},
                          .b = {b[0], b[1]}, .B = B, .L = L, .E = E, .K = K, .ldx = ldx};
    VilConvBidirBwd gb = {.dx = h_poison_act(&h, nx), .du = {gdu[0], gdu[1]}, .x = gx, .w = {gw[0], gw[1]},
                          .b = {gbias[0], gbias[1]}, .B = B, .L = L, .E = E, .K = K, .ldx = ldx};
    for (int j = 0; j < 2; j++) {
        dw0[j] = h_rand(&h, (size_t)E * K, 1.0f), db0[j] = h_rand(&h, E, 1.0f);
        cb.dw[j] = h_copy(&h, dw0[j], (size_t)E * K), cb.db[j] = h_copy(&h, db0[j], E);
        gb.dw[j] = h_f32(&h, dw0[j], (size_t)E * K), gb.db[j] = h_f32(&h, db0[j], E);
    }
    conv1d_silu_bidir_backward(&cb);
    h.v->bwd(&h, &gb);
    h_check(&h, "bwd dx", rel_l2(h_get_act(&h, gb.dx, nx), (const float *)cb.dx, BL, E, ldx), H_TOL_BF16);
    for (int j = 0; j < 2; j++) {
        float *dw_g = h_get_f32(&h, gb.dw[j], (size_t)E * K), *db_g = h_get_f32(&h, gb.db[j], E);
        h_sub(dw_g, dw0[j], (size_t)E * K), h_sub(cb.dw[j], dw0[j], (size_t)E * K);
        h_sub(db_g, db0[j], E), h_sub(cb.db[j], db0[j], E);
        snprintf(nm, sizeof nm, "bwd dw[%d]", j);
        h_check(&h, nm, rel_l2(dw_g, cb.dw[j], 1, (size_t)E * K, (size_t)E * K), H_TOL_F32);
        snprintf(nm, sizeof nm, "bwd db[%d]", j);
        h_check(&h, nm, rel_l2(db_g, cb.db[j], 1, E, E), H_TOL_F32);
    }
    if (!h_valid(&h)) return h_finish(&h);

    double T = (double)BL;
    h_time(&h, "fwd", h.v->fwd, &gf, T * E * 2 * 3);  /* x; u of both directions */
    h_time(&h, "bwd", h.v->bwd, &gb, T * E * 2 * 4); /* x, du of both directions; dx */
    return h_finish(&h);
}
