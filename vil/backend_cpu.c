/* backend_cpu.c: the CPU backend: the float32 reference ops of ops_cpu.h behind the VilBackend
 * table. Each entry is a one-line adapter from the table's untyped pointers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "backend.h"
#include "common.h"
#include "ops_cpu.h"

static void *cpu_alloc(size_t bytes) { return vil_malloc_aligned(bytes); }
static void cpu_free(void *p) { free(p); }
static void cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_sync(void) {}
/* Linux's VmHWM, which writing 5 to clear_refs resets; getrusage's maxrss where /proc is not */
static size_t cpu_peak_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && kib < 0 && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kib) != 1) kib = -1;
    if (f) fclose(f);
    if (kib >= 0) return (size_t)kib * 1024;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}
static size_t cpu_mem_free(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long kib = -1;
    while (f && kib < 0 && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %ld kB", &kib) != 1) kib = -1;
    if (f) fclose(f);
    return kib > 0 ? (size_t)kib * 1024 : 0;
}
static void cpu_peak_reset(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return; /* the peak then runs from the start, as getrusage's does */
    fputs("5", f);
    fclose(f);
}
static void cpu_act_to_host(float *dst, const void *src, size_t n) {
    memcpy(dst, src, n * sizeof(float));
}
static void *cpu_host_alloc(size_t bytes) {
    void *p = NULL;
    size_t rounded = (bytes + 63) / 64 * 64;
    return posix_memalign(&p, 64, rounded ? rounded : 64) == 0 ? p : NULL;
}
/* the feed's slots live in host memory: an upload is a copy, and there is nothing to wait for */
static void cpu_feed_upload(int slot, void *dst, const void *src, size_t bytes) {
    (void)slot;
    memcpy(dst, src, bytes);
}
static void cpu_feed_nop(int slot) { (void)slot; }

static void cpu_patch_embed_forward(void *out, const float *img, const void *w, const float *b,
                                    int B, int C, int H, int W, int P, int S, int D) {
    patch_embed_forward(out, img, w, b, B, C, H, W, P, S, D);
}
static void cpu_patch_embed_backward(float *dimg, float *dw, float *db, const void *dout,
                                     const void *w, const float *img, int B, int C, int H, int W,
                                     int P, int S, int D) {
    patch_embed_backward(dimg, dw, db, dout, w, img, B, C, H, W, P, S, D);
}
static void cpu_tokens_forward(float *x, const void *patches, const float *cls, const float *pos,
                               int B, int M, int D, int t) {
    tokens_forward(x, patches, cls, pos, B, M, D, t);
}
static void cpu_tokens_backward(void *dpatches, float *dcls, float *dpos, const float *dx, int B,
                                int M, int D, int t) {
    tokens_backward(dpatches, dcls, dpos, dx, B, M, D, t);
}
static void cpu_add_rmsnorm_forward(float *res_out, void *normed, float *rstd,
                                    const float *res_in, const void *h, const float *scale,
                                    const float *w, int B, int L, int D) {
    add_rmsnorm_forward(res_out, normed, rstd, res_in, h, scale, w, B, L, D);
}
static void cpu_add_rmsnorm_backward(float *dres, void *dh, float *dw, const void *dnormed,
                                     const float *res_out, const float *rstd, const float *w,
                                     const float *scale, int B, int L, int D) {
    add_rmsnorm_backward(dres, dh, dw, dnormed, res_out, rstd, w, scale, B, L, D);
}
static void cpu_linear_forward(void *out, const void *in, const void *w, const float *b, int N,
                               int C, int OC, int ld_in, int ld_out, int flags) {
    linear_forward(out, in, w, b, N, C, OC, ld_in, ld_out);
}
static void cpu_linear_backward(void *dinp, float *dw, float *db, const void *dout,
                                const void *in, const void *w, int N, int C, int OC, int ld_in,
                                int ld_out, int accumulate_dinp, int flags) {
    linear_backward(dinp, dw, db, dout, in, w, N, C, OC, ld_in, ld_out, accumulate_dinp);
}
static void cpu_conv1d_silu_forward(void *u, const void *x, const float *w, const float *b, int B,
                                    int L, int E, int K, int ldx, int reverse) {
    conv1d_silu_forward(u, x, w, b, B, L, E, K, ldx, reverse);
}
static void cpu_conv1d_silu_backward(void *dx, float *dw, float *db, const void *du,
                                     const void *x, const float *w, const float *b, int B, int L,
                                     int E, int K, int ldx, int reverse, int accumulate_dx) {
    conv1d_silu_backward(dx, dw, db, du, x, w, b, B, L, E, K, ldx, reverse, accumulate_dx);
}
static void cpu_conv1d_silu_bidir_forward(void *const u[2], const void *x, const float *const w[2],
                                          const float *const b[2], int B, int L, int E, int K,
                                          int ldx) {
    conv1d_silu_bidir_forward((float *const *)u, x, w, b, B, L, E, K, ldx);
}
static void cpu_conv1d_silu_bidir_backward(void *dx, float *const dw[2], float *const db[2],
                                           const void *const du[2], const void *x,
                                           const float *const w[2], const float *const b[2], int B,
                                           int L, int E, int K, int ldx) {
    conv1d_silu_bidir_backward(dx, dw, db, (const float *const *)du, x, w, b, B, L, E, K, ldx);
}
static void cpu_scan_bidir_forward(void *out, const void *const u[2], const void *const delta[2],
                                   const void *const xdbl[2], const void *z,
                                   const float *const D[2], const float *const A_log[2], int B,
                                   int L, int E, int N, int R, int ldx, int ldz) {
    scan_bidir_forward(out, (const float *const *)u, (const float *const *)delta,
                       (const float *const *)xdbl, z, D, A_log, B, L, E, N, R, ldx, ldz);
}
static void cpu_scan_bidir_backward(void *const du[2], void *const ddelta[2],
                                    void *const dxdbl[2], void *dz, float *const dD[2],
                                    float *const dA_log[2], float *const ddelta_sum[2],
                                    const void *dout,
                                    const void *const u[2], const void *const delta[2],
                                    const void *const xdbl[2], const void *z,
                                    const float *const D[2], const float *const A_log[2], int B,
                                    int L, int E, int N, int R, int ldx, int ldz) {
    scan_bidir_backward((float *const *)du, (float *const *)ddelta, (float *const *)dxdbl, dz, dD,
                        dA_log, ddelta_sum, dout, (const float *const *)u, (const float *const *)delta,
                        (const float *const *)xdbl, z, D, A_log, B, L, E, N, R, ldx, ldz);
}
static void cpu_adamw_update(float *p, void *work, const float *g, float *m, float *v,
                             const unsigned char *decay, size_t n, float lr, float beta1,
                             float beta2, float eps, float wd, int step) {
    (void)work;
    adamw_update(p, g, m, v, decay, n, lr, beta1, beta2, eps, wd, step);
}

const VilBackend vil_backend_cpu = {
    .name = "cpu",
    .act_bytes = sizeof(float),
    .work_bytes = 0, /* the ops read the float32 master directly */
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .to_device = cpu_copy,
    .to_host = cpu_copy,
    .sync = cpu_sync,
    .peak_bytes = cpu_peak_bytes,
    .peak_reset = cpu_peak_reset,
    .mem_free = cpu_mem_free,
    .act_to_host_f32 = cpu_act_to_host,
    .params_to_work = NULL,
    .host_alloc = cpu_host_alloc,
    .host_free = free,
    .feed_upload = cpu_feed_upload,
    .feed_acquire = cpu_feed_nop,
    .feed_release = cpu_feed_nop,
    .feed_wait = cpu_feed_nop,
    .patch_embed_forward = cpu_patch_embed_forward,
    .patch_embed_backward = cpu_patch_embed_backward,
    .tokens_forward = cpu_tokens_forward,
    .tokens_backward = cpu_tokens_backward,
    .add_rmsnorm_forward = cpu_add_rmsnorm_forward,
    .add_rmsnorm_backward = cpu_add_rmsnorm_backward,
    .linear_forward = cpu_linear_forward,
    .linear_backward = cpu_linear_backward,
    .conv1d_silu_forward = cpu_conv1d_silu_forward,
    .conv1d_silu_backward = cpu_conv1d_silu_backward,
    .conv1d_silu_bidir_forward = cpu_conv1d_silu_bidir_forward,
    .conv1d_silu_bidir_backward = cpu_conv1d_silu_bidir_backward,
    .scan_bidir_forward = cpu_scan_bidir_forward,
    .scan_bidir_backward = cpu_scan_bidir_backward,
    .softmax_xent_forward = softmax_xent_forward,
    .softmax_xent_backward = softmax_xent_backward,
    .adamw_update = cpu_adamw_update,
    .grad_clip = grad_clip,
};

int vil_device_name_ok(const char *name) {
    return strcmp(name, "cpu") == 0 || strcmp(name, "cuda") == 0 || strcmp(name, "auto") == 0;
}

const VilBackend *vil_backend_get(const char *name) {
    if (strcmp(name, "cpu") == 0) return &vil_backend_cpu;
    if (strcmp(name, "cuda") == 0 || strcmp(name, "auto") == 0) {
#ifdef VIL_CUDA
        char why[256];
        if (vil_cuda_available(why, sizeof why)) return &vil_backend_cuda;
        if (strcmp(name, "auto") == 0) return &vil_backend_cpu;
        vil_error("--device cuda: %s", why);
        return NULL;
#else
        if (strcmp(name, "auto") == 0) return &vil_backend_cpu;
        vil_error("--device cuda: this vil was built without CUDA (nvcc was not found at build "
                  "time); rebuild on a machine with the CUDA toolkit or use --device cpu");
        return NULL;
#endif
    }
    vil_error("unknown device '%s' (expected cpu, cuda or auto)", name);
    return NULL;
}
