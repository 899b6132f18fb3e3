/* backend.h: the op set a backend provides. The model (model.c) is written once against this
 * table; backend_cpu.c fills it with the float32 reference ops of ops_cpu.h and cuda/ fills it
 * with the CUDA twins. Tensors are `void *` here because their element type is the backend's:
 * "act" tensors are float32 on the CPU and bf16 on CUDA; tensors marked f32 are float32 on every
 * backend (the residual stream, norm statistics, logits, gradients of parameters, optimizer
 * state). Matrix-product weights arrive as the backend's working copy (`const void *w`); every
 * other parameter (biases, norm weights, conv taps, D, A_log, cls/pos) as the float32 master.
 * Argument order and semantics are those of the same-named functions in ops_cpu.h. */
#ifndef VIL_BACKEND_H
#define VIL_BACKEND_H

#include <stddef.h>

/* linear flags */
#define VIL_LINEAR_OUT_F32 1 /* out (and dout) are f32 instead of act (the classifier head) */

typedef struct VilBackend {
    const char *name;
    size_t act_bytes;  /* bytes per act element */
    size_t work_bytes; /* bytes per element of the working parameter copy the ops read */

    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
    void (*zero)(void *p, size_t bytes);
    void (*to_device)(void *dst, const void *src, size_t bytes);
    void (*to_host)(void *dst, const void *src, size_t bytes);
    void (*sync)(void);
    /* peak bytes of device memory held since the start or the last peak_reset (the CPU
     * backend: the process's peak RSS) */
    size_t (*peak_bytes)(void);
    /* start a new peak from what is held now */
    void (*peak_reset)(void);
    /* bytes the device could still allocate (the CPU: the system's MemAvailable); 0: unknown */
    size_t (*mem_free)(void);
    /* act buffer <-> host float32 (for tests and for reading logits) */
    void (*act_to_host_f32)(float *dst, const void *src, size_t n);
    /* working parameter copy from the float32 master (NULL work: the ops read the master) */
    void (*params_to_work)(void *work, const float *master, size_t n);
    /* Host memory the device copies from without the host waiting (CUDA: pinned; CPU: 64-byte
     * aligned malloc). NULL when it cannot be had. */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
    /* The input feed's copies (data/feed.h): two slots of input buffers, filled on a copy stream
     * while the compute stream works on the other slot.
     *   feed_upload(slot, dst, src, n): copy n bytes from host_alloc'd src to dst once the compute
     *     queued before the last feed_release(slot) is done; returns at once.
     *   feed_acquire(slot): compute queued from now on waits for slot's uploads.
     *   feed_release(slot): compute queued so far is the last to read slot's buffers.
     *   feed_wait(slot): the host waits for slot's uploads (their src may then be reused).
     * The CPU backend copies in feed_upload; the other three do nothing there. */
    void (*feed_upload)(int slot, void *dst, const void *src, size_t bytes);
    void (*feed_acquire)(int slot);
    void (*feed_release)(int slot);
    void (*feed_wait)(int slot);

    void (*patch_embed_forward)(void *out, const float *img, const void *w, const float *b, int B,
                                int C, int H, int W, int P, int S, int D);
    void (*patch_embed_backward)(float *dimg, float *dw, float *db, const void *dout,
                                 const void *w, const float *img, int B, int C, int H, int W,
                                 int P, int S, int D);
    void (*tokens_forward)(float *x, const void *patches, const float *cls, const float *pos, int B,
                           int M, int D, int t);
    void (*tokens_backward)(void *dpatches, float *dcls, float *dpos, const float *dx, int B,
                            int M, int D, int t);
    void (*add_rmsnorm_forward)(float *res_out, void *normed, float *rstd, const float *res_in,
                                const void *h, const float *scale, const float *w, int B, int L,
                                int D);
    void (*add_rmsnorm_backward)(float *dres, void *dh, float *dw, const void *dnormed,
                                 const float *res_out, const float *rstd, const float *w,
                                 const float *scale, int B, int L, int D);
    void (*linear_forward)(void *out, const void *in, const void *w, const float *b, int N, int C,
                           int OC, int ld_in, int ld_out, int flags);
    void (*linear_backward)(void *dinp, float *dw, float *db, const void *dout, const void *in,
                            const void *w, int N, int C, int OC, int ld_in, int ld_out,
                            int accumulate_dinp, int flags);
    void (*conv1d_silu_forward)(void *u, const void *x, const float *w, const float *b, int B,
                                int L, int E, int K, int ldx, int reverse);
    void (*conv1d_silu_backward)(void *dx, float *dw, float *db, const void *du, const void *x,
                                 const float *w, const float *b, int B, int L, int E, int K,
                                 int ldx, int reverse, int accumulate_dx);
    void (*conv1d_silu_bidir_forward)(void *const u[2], const void *x, const float *const w[2],
                                      const float *const b[2], int B, int L, int E, int K, int ldx);
    void (*conv1d_silu_bidir_backward)(void *dx, float *const dw[2], float *const db[2],
                                       const void *const du[2], const void *x,
                                       const float *const w[2], const float *const b[2], int B,
                                       int L, int E, int K, int ldx);
    void (*scan_bidir_forward)(void *out, const void *const u[2], const void *const delta[2],
                               const void *const xdbl[2], const void *z, const float *const D[2],
                               const float *const A_log[2], int B, int L, int E, int N, int R,
                               int ldx, int ldz);
    void (*scan_bidir_backward)(void *const du[2], void *const ddelta[2], void *const dxdbl[2],
                                void *dz, float *const dD[2], float *const dA_log[2],
                                float *const ddelta_sum[2],
                                const void *dout, const void *const u[2],
                                const void *const delta[2], const void *const xdbl[2],
                                const void *z, const float *const D[2], const float *const A_log[2],
                                int B, int L, int E, int N, int R, int ldx, int ldz);
    void (*softmax_xent_forward)(float *loss, float *probs, const float *logits,
                                 const float *targets, int B, int C);
    void (*softmax_xent_backward)(float *dlogits, const float *probs, const float *targets, int B,
                                  int C);
    /* AdamW on the f32 master; also refreshes the working copy (work == NULL: none). decay: a
     * backend buffer of n bytes, 0 where weight decay does not apply (NULL: it applies to all) */
    void (*adamw_update)(float *p, void *work, const float *g, float *m, float *v,
                         const unsigned char *decay, size_t n, float lr, float beta1, float beta2,
                         float eps, float wd, int step);
    /* clip_grad_norm_ on the device: norm is a backend float (f32) that receives ||g||_2, read
     * by the caller when it likes (nothing is read back here) */
    void (*grad_clip)(float *g, size_t n, float max_norm, float *norm);
} VilBackend;

extern const VilBackend vil_backend_cpu;
#ifdef VIL_CUDA
extern const VilBackend vil_backend_cuda;
/* 1 when a CUDA device can be used, 0 otherwise (with the reason in why) */
int vil_cuda_available(char *why, size_t n);
#endif

/* 1 for the device names a command line may give: cpu, cuda, auto */
int vil_device_name_ok(const char *name);
/* "cpu" or "cuda" (or "auto": cuda when available) -> backend; NULL with an error reported */
const VilBackend *vil_backend_get(const char *name);

#endif
