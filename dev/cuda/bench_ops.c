/* bench_ops.c: times every CUDA op of one ViL block at the model's shapes (random bf16 data),
 * with the bytes each op must move at least and the bandwidth that gives, so each kernel can be
 * held against the 3.35 TB/s HBM3 figure (3.0 TB/s measured copy). Not a test: no checks.
 *   build/dev/cuda/bench_ops [D=192] [B=256] [iters=20] [only-op-substring]
 * Timing: the backend's sync around `iters` back-to-back calls after 2 warm-up calls (launch
 * overhead is amortized; the numbers are per call). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vil/backend.h"
#include "vil/common.h"

static const VilBackend *G;
static VilRng rng;
static int iters = 20;
static const char *only = NULL;

static uint16_t bf_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static void *act(size_t n, float scale) {
    uint16_t *h = vil_malloc(n * 2);
    for (size_t i = 0; i < n; i++) h[i] = bf_bits(scale * vil_rng_normal(&rng));
    void *d = G->alloc(n * 2);
    G->to_device(d, h, n * 2);
    free(h);
    return d;
}
static float *f32(size_t n, float scale) {
    float *h = vil_malloc(n * 4);
    for (size_t i = 0; i < n; i++) h[i] = scale * vil_rng_normal(&rng);
    float *d = G->alloc(n * 4);
    G->to_device(d, h, n * 4);
    free(h);
    return d;
}

#define BENCH(name, bytes, call)                                                              \
    do {                                                                                      \
        if (!only || strstr(name, only)) {                                                    \
            for (int w_ = 0; w_ < 2; w_++) { call; }                                          \
            G->sync();                                                                        \
            double t0_ = vil_now();                                                           \
            for (int i_ = 0; i_ < iters; i_++) { call; }                                      \
            G->sync();                                                                        \
            double us_ = (vil_now() - t0_) / iters * 1e6;                                     \
            printf("%-34s %9.1f us %8.1f MB %7.0f GB/s %5.1f%%\n", name, us_, (bytes) / 1e6,   \
                   (bytes) / us_ / 1e3, 100.0 * (bytes) / us_ / 1e3 / 3350.0);                 \
            if (!strstr(name, "one direction") && !strstr(name, "probe")) total_us += us_;                             \
        }                                                                                     \
    } while (0)

int main(int argc, char **argv) {
    int D = argc > 1 ? atoi(argv[1]) : 192, B = argc > 2 ? atoi(argv[2]) : 256;
    if (argc > 3) iters = atoi(argv[3]);
    if (argc > 4) only = argv[4];
    char why[256];
    if (!vil_cuda_available(why, sizeof why)) {
        fprintf(stderr, "bench_ops: %s\n", why);
        return 1;
    }
    G = &vil_backend_cuda;
    vil_rng_seed(&rng, 1);
    int L = 197, E = 2 * D, N = 16, R = (D + 15) / 16, W = R + 2 * N, K = 4;
    /* the model's x_dbl layout (vil/model.c): dt_low padded to Rp columns (dt_proj's K), rows
     * Wp wide (x_proj's output count) */
    int Rp = (R + 7) / 8 * 8, Wp = (Rp + 2 * N + 7) / 8 * 8;
    size_t T = (size_t)B * L;
    printf("one ViL block: D=%d E=%d N=%d R=%d B=%d L=%d (T=%zu tokens), %d calls each\n", D, E, N,
           R, B, L, T, iters);
    double total_us = 0;
    /* activations */
    float *res = f32(T * D, 1), *res2 = f32(T * D, 1), *rstd = f32(T, 1), *dres = f32(T * D, 1);
    float *nw = f32(D, 1);
    void *h = act(T * D, 1), *normed = act(T * D, 1), *xz = act(T * 2 * E, 1), *dxz = act(T * 2 * E, 1);
    void *u[2] = {act(T * E, 1), act(T * E, 1)}, *dl[2] = {act(T * E, 1), act(T * E, 1)};
    void *xd[2] = {act(T * Wp, 0.5f), act(T * Wp, 0.5f)};
    void *du[2] = {act(T * E, 1), act(T * E, 1)}, *ddl[2] = {act(T * E, 1), act(T * E, 1)};
    void *dxd[2] = {act(T * Wp, 1), act(T * Wp, 1)};
    void *ysum = act(T * E, 1), *dysum = act(T * E, 1), *dh = act(T * D, 1), *dnormed = act(T * D, 1);
    /* weights (bf16 working copies) and f32 parameters / gradients */
    void *w_in = act((size_t)2 * E * D, 0.05f), *w_x = act((size_t)Wp * E, 0.05f);
    void *w_dt = act((size_t)E * Rp, 0.2f), *w_out = act((size_t)D * E, 0.05f);
    float *b_dt = f32(E, 0.1f), *cw = f32((size_t)E * K, 0.5f), *cb = f32(E, 0.1f);
    float *Dk[2] = {f32(E, 1), f32(E, 1)}, *g_dbs[2] = {f32(E, 0), f32(E, 0)};
    float *g_in = f32((size_t)2 * E * D, 0), *g_x = f32((size_t)Wp * E, 0), *g_dt = f32((size_t)E * Rp, 0);
    float *g_dtb = f32(E, 0), *g_out = f32((size_t)D * E, 0), *g_cw = f32((size_t)E * K, 0);
    float *g_cb = f32(E, 0), *g_D[2] = {f32(E, 0), f32(E, 0)}, *g_nw = f32(D, 0);
    const void *cu_[2] = {u[0], u[1]}, *cdl[2] = {dl[0], dl[1]}, *cxd[2] = {xd[0], xd[1]};
    const float *cD[2] = {Dk[0], Dk[1]};
    void *z = (char *)xz + (size_t)E * 2, *dz = (char *)dxz + (size_t)E * 2;

    printf("-- forward\n");
    BENCH("add_rmsnorm fwd", T * D * (4.0 + 2 + 4 + 2) + T * 4,
          G->add_rmsnorm_forward(res2, normed, rstd, res, h, NULL, nw, B, L, D));
    BENCH("linear in_proj fwd", T * D * 2.0 + T * 2 * E * 2,
          G->linear_forward(xz, normed, w_in, NULL, (int)T, D, 2 * E, D, 2 * E, 0));
    BENCH("conv1d+silu fwd, one direction", T * E * 4.0,
          G->conv1d_silu_forward(u[1], xz, cw, cb, B, L, E, K, 2 * E, 1));
    {
        void *uu2[2] = {u[0], u[1]};
        const float *cwf[2] = {cw, cw}, *cbf[2] = {cb, cb};
        BENCH("conv1d+silu fwd (both dirs)", T * E * 6.0,
              G->conv1d_silu_bidir_forward(uu2, xz, cwf, cbf, B, L, E, K, 2 * E));
    }
    BENCH("linear x_proj fwd (x1)", T * E * 2.0 + T * W * 2,
          G->linear_forward(xd[0], u[0], w_x, NULL, (int)T, E, Wp, E, Wp, 0));
    BENCH("linear dt_proj fwd (x1)", T * R * 2.0 + T * E * 2,
          G->linear_forward(dl[0], xd[0], w_dt, b_dt, (int)T, Rp, E, Wp, E, 0));
    BENCH("scan fwd (both dirs)", T * E * 2.0 * 6 + 2.0 * T * 2 * N * 2,
          G->scan_bidir_forward(ysum, cu_, cdl, cxd, z, cD, NULL, B, L, E, N, Rp, Wp, 2 * E));
    BENCH("linear out_proj fwd", T * E * 2.0 + T * D * 2,
          G->linear_forward(h, ysum, w_out, NULL, (int)T, E, D, E, D, 0));
    printf("-- backward\n");
    BENCH("linear out_proj bwd dinp", T * D * 2.0 + T * E * 2,
          G->linear_backward(dysum, NULL, NULL, dh, ysum, w_out, (int)T, E, D, E, D, 0, 0));
    BENCH("linear out_proj bwd dW", T * D * 2.0 + T * E * 2,
          G->linear_backward(NULL, g_out, NULL, dh, ysum, w_out, (int)T, E, D, E, D, 0, 0));
    BENCH("scan bwd (both dirs)", T * E * 2.0 * 11 + 4.0 * T * 2 * N * 2,
          G->scan_bidir_backward(du, ddl, dxd, dz, g_D, NULL, g_dbs, dysum, cu_, cdl, cxd, z, cD, NULL, B,
                                 L, E, N, Rp, Wp, 2 * E));
    BENCH("linear dt_proj bwd dinp (x1)", T * E * 2.0 + T * R * 2,
          G->linear_backward(dxd[0], NULL, NULL, ddl[0], xd[0], w_dt, (int)T, Rp, E, Wp, E, 0, 0));
    BENCH("linear dt_proj bwd dW (x1; db comes from the scan)", T * E * 2.0 + T * R * 2,
          G->linear_backward(NULL, g_dt, NULL, ddl[0], xd[0], w_dt, (int)T, Rp, E, Wp, E, 0, 0));
    BENCH("linear x_proj bwd dinp+= (x1)", T * W * 2.0 + T * E * 4,
          G->linear_backward(du[0], NULL, NULL, dxd[0], u[0], w_x, (int)T, E, Wp, E, Wp, 1, 0));
    BENCH("linear x_proj bwd dW (x1)", T * W * 2.0 + T * E * 2,
          G->linear_backward(NULL, g_x, NULL, dxd[0], u[0], w_x, (int)T, E, Wp, E, Wp, 0, 0));
    {
        /* probes (not in the sum): the x_dbl products on unpadded rows (R + 2N = 44 wide for
         * ViL-Tiny, 88-byte rows: what the model ran before session 4), and dt_proj's dW and db
         * parts apart */
        void *xdu = act(T * W, 0.5f), *dxdu = act(T * W, 1);
        BENCH("probe x_proj fwd, unpadded rows", T * E * 2.0 + T * W * 2,
              G->linear_forward(xdu, u[0], w_x, NULL, (int)T, E, W, E, W, 0));
        BENCH("probe dt_proj fwd, unpadded rows", T * R * 2.0 + T * E * 2,
              G->linear_forward(dl[0], xdu, w_dt, b_dt, (int)T, R, E, W, E, 0));
        BENCH("probe dt_proj bwd dinp, unpadded rows", T * E * 2.0 + T * R * 2,
              G->linear_backward(dxdu, NULL, NULL, ddl[0], xdu, w_dt, (int)T, R, E, W, E, 0, 0));
        /* dt_proj with its K = R unpadded (what the model ran before session 5; ViL-Tiny 12) */
        if (Rp != R) {
            BENCH("probe dt_proj fwd, K = R unpadded", T * R * 2.0 + T * E * 2,
                  G->linear_forward(dl[0], xd[0], w_dt, b_dt, (int)T, R, E, Wp, E, 0));
            BENCH("probe dt_proj bwd dinp, K = R unpadded", T * E * 2.0 + T * R * 2,
                  G->linear_backward(dxd[0], NULL, NULL, ddl[0], xd[0], w_dt, (int)T, R, E, Wp, E, 0, 0));
            BENCH("probe dt_proj bwd dW, K = R unpadded", T * E * 2.0 + T * R * 2,
                  G->linear_backward(NULL, g_dt, NULL, ddl[0], xd[0], w_dt, (int)T, R, E, Wp, E, 0, 0));
        }
        BENCH("probe dt_proj bwd db", T * E * 2.0,
              G->linear_backward(NULL, NULL, g_dtb, ddl[0], xd[0], w_dt, (int)T, R, E, Wp, E, 0, 0));
        BENCH("probe x_proj bwd dinp+=, unpadded rows", T * W * 2.0 + T * E * 4,
              G->linear_backward(du[0], NULL, NULL, dxdu, u[0], w_x, (int)T, E, W, E, W, 1, 0));
        BENCH("probe x_proj bwd dW, unpadded rows", T * W * 2.0 + T * E * 2,
              G->linear_backward(NULL, g_x, NULL, dxdu, u[0], w_x, (int)T, E, W, E, W, 0, 0));
    }
    BENCH("conv1d+silu bwd, one direction +=", T * E * 2.0 * 4,
          G->conv1d_silu_backward(dxz, g_cw, g_cb, du[1], xz, cw, cb, B, L, E, K, 2 * E, 1, 1));
    float *g_cw2[2] = {g_cw, g_cw}, *g_cb2[2] = {g_cb, g_cb};
    const float *cw2[2] = {cw, cw}, *cb2[2] = {cb, cb};
    const void *du2[2] = {du[0], du[1]};
    BENCH("conv1d+silu bwd (both dirs)", T * E * 2.0 * 4,
          G->conv1d_silu_bidir_backward(dxz, g_cw2, g_cb2, du2, xz, cw2, cb2, B, L, E, K, 2 * E));
    BENCH("linear in_proj bwd dinp", T * 2 * E * 2.0 + T * D * 2,
          G->linear_backward(dnormed, NULL, NULL, dxz, normed, w_in, (int)T, D, 2 * E, D, 2 * E, 0, 0));
    BENCH("linear in_proj bwd dW", T * 2 * E * 2.0 + T * D * 2,
          G->linear_backward(NULL, g_in, NULL, dxz, normed, w_in, (int)T, D, 2 * E, D, 2 * E, 0, 0));
    BENCH("add_rmsnorm bwd", T * D * (4.0 * 3 + 2 * 2) + T * 4,
          G->add_rmsnorm_backward(dres, dh, g_nw, dnormed, res2, rstd, nw, NULL, B, L, D));
    printf("%-34s %9.1f us (one block's ops as listed, without the one-direction conv1d rows; x1 ops "
           "run twice per block)\n", "sum", total_us);
    {
        /* once per step, not in the block sum: the patch embedding at 224 x 224, patch 16 */
        int C = 3, H = 224, P = 16, M = (H / P) * (H / P), KP = C * P * P;
        size_t ni = (size_t)B * C * H * H;
        float *img = f32(ni, 1), *g_pw = f32((size_t)D * KP, 0), *g_pb = f32(D, 0), *pb = f32(D, 0.1f);
        void *pw = act((size_t)D * KP, 0.02f), *pt = act((size_t)B * M * D, 1), *dpt = act((size_t)B * M * D, 1);
        printf("-- once per step (224 x 224, patch 16)\n");
        BENCH("patch_embed fwd", ni * 4.0 + (double)B * M * D * 2,
              G->patch_embed_forward(pt, img, pw, pb, B, C, H, H, P, P, D));
        BENCH("patch_embed bwd (dw, db)", ni * 4.0 + (double)B * M * D * 2,
              G->patch_embed_backward(NULL, g_pw, g_pb, dpt, pw, img, B, C, H, H, P, P, D));
    }
    return 0;
}
