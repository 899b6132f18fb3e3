/* gpu_api.c: libvil's GPU entry points (include/vil.h) as a CUDA program uses them: device
 * pointers on the program's own non-blocking stream. The forward on device memory against the
 * host forward of the same CUDA context (the same kernels: equal) and against a CPU context
 * (bf16: 2e-2); the stream joins tested by racing them (the images arrive on the stream behind
 * a 256 MB copy; the logits are read on the stream with no synchronisation of vil's); the
 * parameters through device pointers; the states against the CPU's; the scans on bf16 device
 * tensors against the CPU context's on the same (bf16-representable) values, forward and
 * backward, with the accumulating outputs accumulated. Links cudart as a user's program does. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "include/vil.h"

#include "model_testing.h"
#include "testing.h"
#include "formats/checkpoint.h"

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            printf("FAIL %s: %s\n", #x, cudaGetErrorString(e_));                               \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

static uint16_t bf(float f) { /* round to nearest even */
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
static float fb(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void make_model(const char *arch, const char *path) {
    VilConfig c;
    vil_config_default(&c);
    snprintf(c.arch, sizeof c.arch, "%s", arch);
    c.img_size = 32, c.patch_size = 4, c.stride = 4, c.in_chans = 3, c.embed_dim = 32, c.depth = 2,
    c.d_state = 16, c.num_classes = 10;
    T_CHECK(t_write_model(&c, 5, path, 0, NULL) == 0, "%s written", arch);
}

static double rel(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += (double)(a[i] - ref[i]) * (a[i] - ref[i]), den += (double)ref[i] * ref[i];
    return sqrt(num / (den > 0 ? den : 1));
}

static void test_model(vil_ctx *gpu, vil_ctx *cpu, const char *path, const char *what) {
    vil_classifier *g = NULL, *c = NULL;
    if (vil_classifier_load(gpu, path, NULL, &g) || vil_classifier_load(cpu, path, NULL, &c)) {
        T_CHECK(0, "%s: load: %s", what, vil_last_error());
        return;
    }
    enum { B = 8, NC = 10 };
    size_t per = vil_classifier_input_size(g), n = B * per;
    float *x = malloc(n * sizeof(float)), host[B * NC], ref[B * NC], dev_out[B * NC];
    VilRng r;
    vil_rng_seed(&r, 2);
    for (size_t i = 0; i < n; i++) x[i] = vil_rng_normal(&r);
    T_CHECK(vil_classifier_forward(g, x, B, host) == VIL_OK && vil_classifier_forward(c, x, B, ref) == VIL_OK,
            "%s: host forwards", what);
    char name[96];
    snprintf(name, sizeof name, "%s: CUDA against CPU logits", what);
    T_CLOSE(name, rel(host, ref, B * NC), 2e-2);
    /* device pointers on a non-blocking stream, racing a 256 MB copy queued before the images */
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float *d_x, *d_l, *pinned;
    char *d_big, *h_big;
    size_t big = 256u << 20;
    CK(cudaMalloc((void **)&d_x, n * sizeof(float)));
    CK(cudaMalloc((void **)&d_l, sizeof host));
    CK(cudaMalloc((void **)&d_big, big));
    CK(cudaMallocHost((void **)&h_big, big));
    CK(cudaMallocHost((void **)&pinned, n * sizeof(float)));
    memcpy(pinned, x, n * sizeof(float));
    CK(cudaMemset(d_x, 0, n * sizeof(float)));
    CK(cudaMemset(d_l, 0, sizeof host));
    CK(cudaDeviceSynchronize());
    int ok = 1;
    for (int round = 0; round < 3; round++) {
        CK(cudaMemcpyAsync(d_big, h_big, big, cudaMemcpyHostToDevice, s));
        CK(cudaMemcpyAsync(d_x, pinned, n * sizeof(float), cudaMemcpyHostToDevice, s));
        ok &= vil_classifier_forward_device(g, d_x, B, d_l, s) == VIL_OK;
        CK(cudaMemcpyAsync(dev_out, d_l, sizeof host, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        ok &= memcmp(dev_out, host, sizeof host) == 0;
        CK(cudaMemsetAsync(d_x, 0, n * sizeof(float), s)); /* the next round must wait for its copy again */
        CK(cudaMemsetAsync(d_l, 0, sizeof host, s));
    }
    T_CHECK(ok, "%s: forward_device on the caller's stream = the host forward (3 rounds behind a 256 MB copy)", what);
    /* parameters through device pointers */
    const char *key = "head.weight";
    vil_param_info pi;
    int ti = -1;
    for (int i = 0; i < vil_classifier_param_count(g); i++)
        if (vil_classifier_param_get_info(g, i, &pi) == 0 && strcmp(pi.name, key) == 0) ti = i;
    vil_classifier_param_get_info(g, ti, &pi);
    float *w = malloc(pi.numel * sizeof(float)), *w2 = malloc(pi.numel * sizeof(float)), *d_w;
    CK(cudaMalloc((void **)&d_w, pi.numel * sizeof(float)));
    T_CHECK(vil_classifier_param_read(c, key, w, pi.numel, 1) == 0 && vil_classifier_param_read(g, key, d_w, pi.numel, 0) == 0,
            "%s: read into device memory", what);
    CK(cudaMemcpy(w2, d_w, pi.numel * sizeof(float), cudaMemcpyDeviceToHost));
    T_CHECK(memcmp(w, w2, pi.numel * sizeof(float)) == 0, "%s: the device read = the CPU's master", what);
    for (size_t i = 0; i < pi.numel; i++) w[i] *= -1.0f;
    CK(cudaMemcpy(d_w, w, pi.numel * sizeof(float), cudaMemcpyHostToDevice));
    /* a pageable cudaMemcpy may return before its data arrive, and vil reads d_w on its own
     * stream: the caller's copy completes first (include/vil.h; a GPU busy with other work made
     * the write read the old values here) */
    CK(cudaDeviceSynchronize());
    T_CHECK(vil_classifier_param_write(g, key, d_w, pi.numel, 0) == 0 && vil_classifier_param_write(c, key, w, pi.numel, 1) == 0 &&
                vil_classifier_forward(g, x, B, host) == 0 && vil_classifier_forward(c, x, B, ref) == 0,
            "%s: written from device memory", what);
    snprintf(name, sizeof name, "%s: logits after the write, CUDA against CPU", what);
    T_CLOSE(name, rel(host, ref, B * NC), 2e-2);
    /* the states along the sequence */
    int L, S, ns = vil_classifier_stream_count(g, &L, &S);
    float *hg = malloc((size_t)B * L * 4), *hc = malloc((size_t)B * L * 4), *tg = malloc((size_t)B * S * 4),
          *tc = malloc((size_t)B * S * 4);
    double worst = 0, worst_t = 0;
    ok = vil_classifier_states_run(g, x, B) == 0 && vil_classifier_states_run(c, x, B) == 0;
    for (int k = 0; ok && k < ns; k++) {
        ok = vil_classifier_states_get(g, k, hg, tg) == 0 && vil_classifier_states_get(c, k, hc, tc) == 0;
        worst = fmax(worst, rel(hg, hc, (size_t)B * L));
        worst_t = fmax(worst_t, rel(tg, tc, (size_t)B * S));
    }
    T_CHECK(ok && ns == 4, "%s: states of %d streams", what, ns);
    snprintf(name, sizeof name, "%s: state norms, CUDA against CPU", what);
    T_CLOSE(name, worst, 3e-2);
    snprintf(name, sizeof name, "%s: final states, CUDA against CPU", what);
    T_CLOSE(name, worst_t, 3e-2);
    free(hg), free(hc), free(tg), free(tc), free(w), free(w2), free(x);
    cudaFree(d_w), cudaFree(d_x), cudaFree(d_l), cudaFree(d_big), cudaFreeHost(h_big), cudaFreeHost(pinned);
    cudaStreamDestroy(s);
    vil_classifier_free(g);
    vil_classifier_free(c);
}

/* the scans: bf16 device tensors against the CPU's float32 on the same values */
static void test_scan(vil_ctx *gpu, vil_ctx *cpu, vil_scan_recurrence rec) {
    const char *nm = rec ? "mamba" : "longhorn";
    enum { B = 2, L = 197, E = 64, N = 16, DT = 4, LD = DT + 2 * N + 4 };
    size_t n = (size_t)B * L * E, nx = (size_t)B * L * LD;
    VilRng r;
    vil_rng_seed(&r, 9 + rec);
    /* host: f32 values that bf16 holds exactly */
    float *h[12];
    size_t sz[12] = {n, n, n, n, nx, nx, n, n}; /* u0 u1 dl0 dl1 x0 x1 z dout */
    for (int i = 0; i < 8; i++) {
        h[i] = malloc(sz[i] * 4);
        for (size_t k = 0; k < sz[i]; k++) {
            float v = i == 2 || i == 3 ? 0.02f + 0.3f * vil_rng_uniform(&r) : 2 * vil_rng_uniform(&r) - 1;
            h[i][k] = fb(bf(v));
        }
    }
    float D[2][E], A[2][E * N], h0[B * 2 * N * E];
    for (int j = 0; j < 2; j++) {
        for (int e = 0; e < E; e++) D[j][e] = 1 + 0.01f * e;
        for (int e = 0; e < E * N; e++) A[j][e] = logf(1.0f + (e % N));
    }
    for (int i = 0; i < B * 2 * N * E; i++) h0[i] = 0.1f * vil_rng_normal(&r);
    /* device: bf16 copies and f32 params */
    void *d[8];
    for (int i = 0; i < 8; i++) {
        uint16_t *b16 = malloc(sz[i] * 2);
        for (size_t k = 0; k < sz[i]; k++) b16[k] = bf(h[i][k]);
        CK(cudaMalloc(&d[i], sz[i] * 2));
        CK(cudaMemcpy(d[i], b16, sz[i] * 2, cudaMemcpyHostToDevice));
        free(b16);
    }
    float *dD_, *dA_, *dh0, *dhT, *dout_, *dg[2], *ddD[2], *ddA[2], *dds[2];
    CK(cudaMalloc((void **)&dD_, sizeof D));
    CK(cudaMalloc((void **)&dA_, sizeof A));
    CK(cudaMalloc((void **)&dh0, sizeof h0));
    CK(cudaMalloc((void **)&dhT, sizeof h0));
    CK(cudaMemcpy(dD_, D, sizeof D, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dA_, A, sizeof A, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dh0, h0, sizeof h0, cudaMemcpyHostToDevice));
    CK(cudaMalloc((void **)&dout_, n * 2));
    for (int j = 0; j < 2; j++) {
        CK(cudaMalloc((void **)&ddD[j], E * 4));
        CK(cudaMalloc((void **)&ddA[j], E * N * 4));
        CK(cudaMalloc((void **)&dds[j], E * 4));
        CK(cudaMemset(ddD[j], 0, E * 4));
        CK(cudaMemset(ddA[j], 0, E * N * 4));
        CK(cudaMemset(dds[j], 0, E * 4));
        CK(cudaMalloc((void **)&dg[j], (n * 2 + nx) * 2)); /* du, ddelta, dxdbl */
    }
    void *ddz;
    CK(cudaMalloc(&ddz, n * 2));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    vil_scan_fwd fg = {.rec = rec, .B = B, .L = L, .E = E, .N = N, .dt_ld = DT, .xdbl_ld = LD, .ldz = E, .z = d[6],
                       .out = dout_, .h0 = dh0, .hT = dhT};
    float *cout = malloc(n * 4), chT[B * 2 * N * E];
    vil_scan_fwd fc = {.rec = rec, .B = B, .L = L, .E = E, .N = N, .dt_ld = DT, .xdbl_ld = LD, .ldz = E, .z = h[6],
                       .out = cout, .h0 = h0, .hT = chT};
    for (int j = 0; j < 2; j++) {
        fg.u[j] = d[j], fg.delta[j] = d[2 + j], fg.xdbl[j] = d[4 + j], fg.D[j] = dD_ + j * E, fg.A_log[j] = dA_ + j * E * N;
        fc.u[j] = h[j], fc.delta[j] = h[2 + j], fc.xdbl[j] = h[4 + j], fc.D[j] = D[j], fc.A_log[j] = A[j];
    }
    T_CHECK(vil_scan_forward(gpu, &fg, s) == 0 && vil_scan_forward(cpu, &fc, NULL) == 0, "%s: forwards", nm);
    uint16_t *o16 = malloc(n * 2);
    float *og = malloc(n * 4), ghT[B * 2 * N * E];
    CK(cudaMemcpyAsync(o16, dout_, n * 2, cudaMemcpyDeviceToHost, s));
    CK(cudaMemcpyAsync(ghT, dhT, sizeof ghT, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    for (size_t k = 0; k < n; k++) og[k] = fb(o16[k]);
    char name[96];
    snprintf(name, sizeof name, "%s scan out (bf16)", nm);
    T_CLOSE(name, rel(og, cout, n), 1e-2);
    snprintf(name, sizeof name, "%s scan hT (f32)", nm);
    T_CLOSE(name, rel(ghT, chT, B * 2 * N * E), 1e-4);
    /* backward, twice on the GPU: overwritten outputs the same, accumulated ones doubled */
    vil_scan_bwd bg = {.rec = rec, .B = B, .L = L, .E = E, .N = N, .dt_ld = DT, .xdbl_ld = LD, .ldz = E, .z = d[6],
                       .h0 = dh0, .dout = d[7], .dz = ddz};
    float *cg[2][3], cdD[2][E], cdA[2][E * N], cds[2][E], *cdz = malloc(n * 4);
    memset(cdD, 0, sizeof cdD), memset(cdA, 0, sizeof cdA), memset(cds, 0, sizeof cds);
    vil_scan_bwd bc = {.rec = rec, .B = B, .L = L, .E = E, .N = N, .dt_ld = DT, .xdbl_ld = LD, .ldz = E, .z = h[6],
                       .h0 = h0, .dout = h[7], .dz = cdz};
    for (int j = 0; j < 2; j++) {
        bg.u[j] = d[j], bg.delta[j] = d[2 + j], bg.xdbl[j] = d[4 + j], bg.D[j] = dD_ + j * E, bg.A_log[j] = dA_ + j * E * N;
        bg.du[j] = dg[j], bg.ddelta[j] = (uint16_t *)dg[j] + n, bg.dxdbl[j] = (uint16_t *)dg[j] + 2 * n;
        bg.dD[j] = ddD[j], bg.dA_log[j] = ddA[j], bg.ddelta_sum[j] = dds[j];
        CK(cudaMemset(dg[j], 0, (n * 2 + nx) * 2));
        bc.u[j] = h[j], bc.delta[j] = h[2 + j], bc.xdbl[j] = h[4 + j], bc.D[j] = D[j], bc.A_log[j] = A[j];
        for (int k = 0; k < 3; k++) cg[j][k] = calloc(k == 2 ? nx : n, 4);
        bc.du[j] = cg[j][0], bc.ddelta[j] = cg[j][1], bc.dxdbl[j] = cg[j][2];
        bc.dD[j] = cdD[j], bc.dA_log[j] = cdA[j], bc.ddelta_sum[j] = cds[j];
    }
    T_CHECK(vil_scan_backward(gpu, &bg, s) == 0 && vil_scan_backward(gpu, &bg, s) == 0 &&
                vil_scan_backward(cpu, &bc, NULL) == 0 && vil_scan_backward(cpu, &bc, NULL) == 0,
            "%s: backwards", nm);
    CK(cudaStreamSynchronize(s));
    uint16_t *g16 = malloc((n * 2 + nx) * 2);
    float *gf = malloc((n * 2 + nx) * 4), gdD[E], gdA[E * N], gds[E];
    double wd = 0, wx = 0, wp = 0;
    for (int j = 0; j < 2; j++) {
        CK(cudaMemcpy(g16, dg[j], (n * 2 + nx) * 2, cudaMemcpyDeviceToHost));
        for (size_t k = 0; k < n * 2 + nx; k++) gf[k] = fb(g16[k]);
        wd = fmax(wd, fmax(rel(gf, cg[j][0], n), rel(gf + n, cg[j][1], n)));
        /* the k and q columns (the others stay 0 on both) */
        wx = fmax(wx, rel(gf + 2 * n, cg[j][2], nx));
        CK(cudaMemcpy(gdD, ddD[j], sizeof gdD, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gdA, ddA[j], sizeof gdA, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gds, dds[j], sizeof gds, cudaMemcpyDeviceToHost));
        wp = fmax(wp, fmax(rel(gdD, cdD[j], E), rel(gds, cds[j], E)));
        if (rec == VIL_SCAN_MAMBA) wp = fmax(wp, rel(gdA, cdA[j], E * N));
    }
    snprintf(name, sizeof name, "%s scan du, ddelta (bf16)", nm);
    T_CLOSE(name, wd, 2e-2);
    snprintf(name, sizeof name, "%s scan dxdbl (bf16)", nm);
    T_CLOSE(name, wx, 2e-2);
    snprintf(name, sizeof name, "%s scan dD, dA_log, ddelta_sum accumulated twice", nm);
    T_CLOSE(name, wp, 2e-2);
    for (int i = 0; i < 8; i++) free(h[i]), cudaFree(d[i]);
    for (int j = 0; j < 2; j++) {
        for (int k = 0; k < 3; k++) free(cg[j][k]);
        cudaFree(dg[j]), cudaFree(ddD[j]), cudaFree(ddA[j]), cudaFree(dds[j]);
    }
    free(g16), free(gf), free(o16), free(og), free(cout), free(cdz);
    cudaFree(dD_), cudaFree(dA_), cudaFree(dh0), cudaFree(dhT), cudaFree(dout_), cudaFree(ddz);
    cudaStreamDestroy(s);
}

int main(void) {
    char dir[] = "/tmp/vil_gpu_api_XXXXXX", vil[64], vim[64];
    if (!mkdtemp(dir)) return 1;
    snprintf(vil, sizeof vil, "%s/vil.safetensors", dir);
    snprintf(vim, sizeof vim, "%s/vim.safetensors", dir);
    make_model("vil", vil);
    make_model("vim", vim);
    vil_ctx *gpu = NULL, *cpu = NULL;
    if (vil_ctx_new("cuda", 0, 0, &gpu) != VIL_OK) {
        T_CHECK(0, "a CUDA context: %s", vil_last_error());
        return t_finish();
    }
    vil_ctx_new("cpu", 0, 0, &cpu);
    T_CHECK(strcmp(vil_ctx_device(gpu), "cuda") == 0, "device %s (%s)", vil_ctx_device(gpu), vil_ctx_device_name(gpu));
    vil_ctx *bad = NULL;
    T_CHECK(vil_ctx_new("cuda", 99, 0, &bad) == VIL_ERR && !bad, "GPU 99: %s", vil_last_error());
    test_model(gpu, cpu, vil, "vil");
    test_model(gpu, cpu, vim, "vim");
    test_scan(gpu, cpu, VIL_SCAN_LONGHORN);
    test_scan(gpu, cpu, VIL_SCAN_MAMBA);
    vil_scan_fwd f = {.rec = VIL_SCAN_LONGHORN, .B = 1, .L = 4, .E = 8, .N = 32, .xdbl_ld = 64, .ldz = 8};
    T_CHECK(vil_scan_forward(gpu, &f, NULL) == VIL_ERR_ARG && strstr(vil_last_error(), "4, 8 or 16"), "N 32 on CUDA: %s",
            vil_last_error());
    vil_ctx_free(gpu);
    vil_ctx_free(cpu);
    unlink(vil), unlink(vim), rmdir(dir);
    return t_finish();
}
