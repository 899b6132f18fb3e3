/* bench_ops.c: times every CUDA op of one ViL block at the model's shapes (random bf16 data),
 * with the bytes each op must move at least and the bandwidth that gives, so each kernel can be
 * held against the 3.35 TB/s HBM3 figure (3.0 TB/s measured copy). Not a test: no checks.
 *   build/dev/cuda/bench_ops [D=192] [B=256] [iters=20] [only-op-substring]
 * Timing: the backend's sync around `iters` back-to-back calls after 2 warm-up calls (launch
 * overhead is amortized; the numbers are per call). */
#include "dev/cuda/harness.h"

static Harness H;
static const VilBackend *G;
static int iters = 20;
static const char *only = NULL;

static void *act(size_t n, float scale) { return h_dev_rand(&H, n, scale, 1); }
static float *f32(size_t n, float scale) { return (float *)h_dev_rand(&H, n, scale, 0); }

#define BENCH(name, bytes, call)                                                              \
    do {                                                                                      \
        if (!only || strstr(name, only)) {                                                    \
            for (int w_ = 0; w_ < 2; w_++) { call; }                                          \
            G->sync(G);                                                                        \
            double t0_ = vil_now();                                                           \
            for (int i_ = 0; i_ < iters; i_++) { call; }                                      \
            G->sync(G);                                                                        \
            double us_ = (vil_now() - t0_) / iters * 1e6;                                     \
            printf("%-34s %9.1f us %8.1f MB %7.0f GB/s %5.1f%%\n", name, us_, (bytes) / 1e6,   \
                   (bytes) / us_ / 1e3, 100.0 * (bytes) / us_ / 1e3 / 3350.0);                 \
            if (!strstr(name, "probe")) total_us += us_;                                      \
        }                                                                                     \
    } while (0)

static const char USAGE[] = "usage: bench_ops [D=192] [B=256] [iters=20] [only-op-substring]\n";

int main(int argc, char **argv) {
    long D = 192, B = 256, it = iters;
    long *num[3] = {&D, &B, &it};
    if (argc > 5 || (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0))) {
        fprintf(argc > 5 ? stderr : stdout, "%s", USAGE);
        return argc > 5 ? 2 : 0;
    }
    for (int i = 1; i < argc && i < 4; i++)
        if (vil_parse_int(argv[i], num[i - 1]) != 0 || *num[i - 1] < 1 || *num[i - 1] > 100000) {
            fprintf(stderr, "bench_ops: '%s' is not a whole number from 1 to 100000\n%s", argv[i], USAGE);
            return 2;
        }
    iters = (int)it;
    if (argc > 4) only = argv[4];
    h_open(&H, 0);
    G = H.be;
    int L = 197, E = 2 * (int)D, N = 16, R = ((int)D + 15) / 16, W = R + 2 * N, K = 4;
    /* the model's x_dbl layout (vil/model.c): dt_low padded to Rp columns (dt_proj's K), rows
     * Wp wide (x_proj's output count) */
    int Rp = (R + 7) / 8 * 8, Wp = (Rp + 2 * N + 7) / 8 * 8;
    size_t T = (size_t)B * L;
    int Ti = (int)T;
    printf("one ViL block: D=%ld E=%d N=%d R=%d B=%ld L=%d (T=%zu tokens), %d calls each\n", D, E, N,
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
    void *z = (char *)xz + (size_t)E * 2, *dz = (char *)dxz + (size_t)E * 2;
    const int d = (int)D, b = (int)B;

    printf("-- forward\n");
    BENCH("add_rmsnorm fwd", T * D * (4.0 + 2 + 4 + 2) + T * 4,
          G->add_rmsnorm_forward(G, &(VilNormFwd){.res_out = res2, .normed = normed, .rstd = rstd, .res_in = res,
                                                  .h = h, .w = nw, .B = b, .L = L, .D = d}));
    BENCH("linear in_proj fwd", T * D * 2.0 + T * 2 * E * 2,
          G->linear_forward(G, &(VilLinearFwd){.out = xz, .in = normed, .w = w_in, .N = Ti, .C = d, .OC = 2 * E,
                                               .ld_in = d, .ld_out = 2 * E}));
    BENCH("conv1d+silu fwd (both dirs)", T * E * 6.0,
          G->conv1d_silu_bidir_forward(G, &(VilConvBidirFwd){.u = {u[0], u[1]}, .x = xz, .w = {cw, cw}, .b = {cb, cb},
                                                             .B = b, .L = L, .E = E, .K = K, .ldx = 2 * E}));
    BENCH("linear x_proj fwd (x1)", T * E * 2.0 + T * W * 2,
          G->linear_forward(G, &(VilLinearFwd){.out = xd[0], .in = u[0], .w = w_x, .N = Ti, .C = E, .OC = Wp,
                                               .ld_in = E, .ld_out = Wp}));
    BENCH("linear dt_proj fwd (x1)", T * R * 2.0 + T * E * 2,
          G->linear_forward(G, &(VilLinearFwd){.out = dl[0], .in = xd[0], .w = w_dt, .b = b_dt, .N = Ti, .C = Rp,
                                               .OC = E, .ld_in = Wp, .ld_out = E}));
    BENCH("scan fwd (both dirs)", T * E * 2.0 * 6 + 2.0 * T * 2 * N * 2,
          G->scan_bidir_forward(G, &(VilScanFwd){.rec = VIL_REC_LONGHORN, .out = ysum, .u = {u[0], u[1]},
                                                 .delta = {dl[0], dl[1]}, .xdbl = {xd[0], xd[1]}, .z = z,
                                                 .D = {Dk[0], Dk[1]}, .B = b, .L = L, .E = E, .N = N,
                                                 .dt_ld = Rp, .xdbl_ld = Wp, .ldz = 2 * E}));
    BENCH("linear out_proj fwd", T * E * 2.0 + T * D * 2,
          G->linear_forward(G, &(VilLinearFwd){.out = h, .in = ysum, .w = w_out, .N = Ti, .C = E, .OC = d,
                                               .ld_in = E, .ld_out = d}));
    printf("-- backward\n");
    BENCH("linear out_proj bwd dinp", T * D * 2.0 + T * E * 2,
          G->linear_backward(G, &(VilLinearBwd){.dinp = dysum, .dout = dh, .in = ysum, .w = w_out, .N = Ti, .C = E,
                                                .OC = d, .ld_in = E, .ld_out = d}));
    /* the scan backward makes the forward's gated output again (into dxz's x half, as the model
     * does: the training forward keeps no ysum), for out_proj's dW after it */
    BENCH("scan bwd (both dirs)", T * E * 2.0 * 12 + 4.0 * T * 2 * N * 2,
          G->scan_bidir_backward(G, &(VilScanBwd){.rec = VIL_REC_LONGHORN, .du = {du[0], du[1]},
                                                  .ddelta = {ddl[0], ddl[1]}, .dxdbl = {dxd[0], dxd[1]}, .dz = dz,
                                                  .dD = {g_D[0], g_D[1]}, .ddelta_sum = {g_dbs[0], g_dbs[1]},
                                                  .dout = dysum, .u = {u[0], u[1]}, .delta = {dl[0], dl[1]},
                                                  .xdbl = {xd[0], xd[1]}, .z = z, .D = {Dk[0], Dk[1]}, .B = b,
                                                  .L = L, .E = E, .N = N, .dt_ld = Rp, .xdbl_ld = Wp, .ldz = 2 * E,
                                                  .out = dxz}));
    BENCH("linear out_proj bwd dW", T * D * 2.0 + T * E * 2,
          G->linear_backward(G, &(VilLinearBwd){.dw = g_out, .dout = dh, .in = dxz, .w = w_out, .N = Ti, .C = E,
                                                .OC = d, .ld_in = 2 * E, .ld_out = d}));
    BENCH("linear dt_proj bwd dinp (x1)", T * E * 2.0 + T * R * 2,
          G->linear_backward(G, &(VilLinearBwd){.dinp = dxd[0], .dout = ddl[0], .in = xd[0], .w = w_dt, .N = Ti,
                                                .C = Rp, .OC = E, .ld_in = Wp, .ld_out = E}));
    BENCH("linear dt_proj bwd dW (x1; db comes from the scan)", T * E * 2.0 + T * R * 2,
          G->linear_backward(G, &(VilLinearBwd){.dw = g_dt, .dout = ddl[0], .in = xd[0], .w = w_dt, .N = Ti,
                                                .C = Rp, .OC = E, .ld_in = Wp, .ld_out = E}));
    BENCH("linear x_proj bwd dinp+= (x1)", T * W * 2.0 + T * E * 4,
          G->linear_backward(G, &(VilLinearBwd){.dinp = du[0], .dout = dxd[0], .in = u[0], .w = w_x, .N = Ti,
                                                .C = E, .OC = Wp, .ld_in = E, .ld_out = Wp, .accumulate_dinp = 1}));
    BENCH("linear x_proj bwd dW (x1)", T * W * 2.0 + T * E * 2,
          G->linear_backward(G, &(VilLinearBwd){.dw = g_x, .dout = dxd[0], .in = u[0], .w = w_x, .N = Ti,
                                                .C = E, .OC = Wp, .ld_in = E, .ld_out = Wp}));
    {
        /* probes (not in the sum): the x_dbl products on unpadded rows (R + 2N = 44 wide for
         * ViL-Tiny, 88-byte rows: what the model ran before session 4), and dt_proj's dW and db
         * parts apart */
        void *xdu = act(T * W, 0.5f), *dxdu = act(T * W, 1);
        BENCH("probe x_proj fwd, unpadded rows", T * E * 2.0 + T * W * 2,
              G->linear_forward(G, &(VilLinearFwd){.out = xdu, .in = u[0], .w = w_x, .N = Ti, .C = E, .OC = W,
                                                   .ld_in = E, .ld_out = W}));
        BENCH("probe dt_proj fwd, unpadded rows", T * R * 2.0 + T * E * 2,
              G->linear_forward(G, &(VilLinearFwd){.out = dl[0], .in = xdu, .w = w_dt, .b = b_dt, .N = Ti, .C = R,
                                                   .OC = E, .ld_in = W, .ld_out = E}));
        BENCH("probe dt_proj bwd dinp, unpadded rows", T * E * 2.0 + T * R * 2,
              G->linear_backward(G, &(VilLinearBwd){.dinp = dxdu, .dout = ddl[0], .in = xdu, .w = w_dt, .N = Ti,
                                                    .C = R, .OC = E, .ld_in = W, .ld_out = E}));
        /* dt_proj with its K = R unpadded (what the model ran before session 5; ViL-Tiny 12) */
        if (Rp != R) {
            BENCH("probe dt_proj fwd, K = R unpadded", T * R * 2.0 + T * E * 2,
                  G->linear_forward(G, &(VilLinearFwd){.out = dl[0], .in = xd[0], .w = w_dt, .b = b_dt, .N = Ti,
                                                       .C = R, .OC = E, .ld_in = Wp, .ld_out = E}));
            BENCH("probe dt_proj bwd dinp, K = R unpadded", T * E * 2.0 + T * R * 2,
                  G->linear_backward(G, &(VilLinearBwd){.dinp = dxd[0], .dout = ddl[0], .in = xd[0], .w = w_dt,
                                                        .N = Ti, .C = R, .OC = E, .ld_in = Wp, .ld_out = E}));
            BENCH("probe dt_proj bwd dW, K = R unpadded", T * E * 2.0 + T * R * 2,
                  G->linear_backward(G, &(VilLinearBwd){.dw = g_dt, .dout = ddl[0], .in = xd[0], .w = w_dt,
                                                        .N = Ti, .C = R, .OC = E, .ld_in = Wp, .ld_out = E}));
        }
        BENCH("probe dt_proj bwd db", T * E * 2.0,
              G->linear_backward(G, &(VilLinearBwd){.db = g_dtb, .dout = ddl[0], .in = xd[0], .w = w_dt, .N = Ti,
                                                    .C = R, .OC = E, .ld_in = Wp, .ld_out = E}));
        BENCH("probe x_proj bwd dinp+=, unpadded rows", T * W * 2.0 + T * E * 4,
              G->linear_backward(G, &(VilLinearBwd){.dinp = du[0], .dout = dxdu, .in = u[0], .w = w_x, .N = Ti,
                                                    .C = E, .OC = W, .ld_in = E, .ld_out = W, .accumulate_dinp = 1}));
        BENCH("probe x_proj bwd dW, unpadded rows", T * W * 2.0 + T * E * 2,
              G->linear_backward(G, &(VilLinearBwd){.dw = g_x, .dout = dxdu, .in = u[0], .w = w_x, .N = Ti,
                                                    .C = E, .OC = W, .ld_in = E, .ld_out = W}));
    }
    BENCH("conv1d+silu bwd (both dirs)", T * E * 2.0 * 4,
          G->conv1d_silu_bidir_backward(G, &(VilConvBidirBwd){.dx = dxz, .dw = {g_cw, g_cw}, .db = {g_cb, g_cb},
                                                              .du = {du[0], du[1]}, .x = xz, .w = {cw, cw},
                                                              .b = {cb, cb}, .B = b, .L = L, .E = E, .K = K,
                                                              .ldx = 2 * E}));
    BENCH("linear in_proj bwd dinp", T * 2 * E * 2.0 + T * D * 2,
          G->linear_backward(G, &(VilLinearBwd){.dinp = dnormed, .dout = dxz, .in = normed, .w = w_in, .N = Ti,
                                                .C = d, .OC = 2 * E, .ld_in = d, .ld_out = 2 * E}));
    BENCH("linear in_proj bwd dW", T * 2 * E * 2.0 + T * D * 2,
          G->linear_backward(G, &(VilLinearBwd){.dw = g_in, .dout = dxz, .in = normed, .w = w_in, .N = Ti,
                                                .C = d, .OC = 2 * E, .ld_in = d, .ld_out = 2 * E}));
    BENCH("add_rmsnorm bwd", T * D * (4.0 * 3 + 2 * 2) + T * 4,
          G->add_rmsnorm_backward(G, &(VilNormBwd){.dres = dres, .dh = dh, .dw = g_nw, .dnormed = dnormed,
                                                   .res_out = res2, .rstd = rstd, .w = nw, .B = b, .L = L, .D = d}));
    printf("%-34s %9.1f us (one block's ops as listed, without the probes; x1 ops "
           "run twice per block)\n", "sum", total_us);
    {
        /* once per step, not in the block sum: the patch embedding at 224 x 224, patch 16 */
        int C = 3, Hh = 224, P = 16, M = (Hh / P) * (Hh / P), KP = C * P * P;
        size_t ni = (size_t)B * C * Hh * Hh;
        float *img = f32(ni, 1), *g_pw = f32((size_t)D * KP, 0), *g_pb = f32(D, 0), *pb = f32(D, 0.1f);
        void *pw = act((size_t)D * KP, 0.02f), *pt = act((size_t)B * M * D, 1), *dpt = act((size_t)B * M * D, 1);
        printf("-- once per step (224 x 224, patch 16)\n");
        BENCH("patch_embed fwd", ni * 4.0 + (double)B * M * D * 2,
              G->patch_embed_forward(G, &(VilPatchEmbedFwd){.out = pt, .img = img, .w = pw, .b = pb, .B = b, .C = C,
                                                            .H = Hh, .W = Hh, .P = P, .S = P, .D = d}));
        BENCH("patch_embed bwd (dw, db)", ni * 4.0 + (double)B * M * D * 2,
              G->patch_embed_backward(G, &(VilPatchEmbedBwd){.dw = g_pw, .db = g_pb, .dout = dpt, .w = pw, .img = img,
                                                             .B = b, .C = C, .H = Hh, .W = Hh, .P = P, .S = P,
                                                             .D = d}));
    }
    return h_finish(&H);
}
