/* ops_cpu.h: the CPU op set, float32, the reference every CUDA op is checked against.
 * Conventions for every op: outputs (and saved activations) first, then inputs, then weights,
 * then sizes. Parameter gradients accumulate (+=); activation gradients overwrite (=) unless an
 * `accumulate` argument says otherwise. A shape comment sits on every pointer. */
#ifndef VIL_OPS_CPU_H
#define VIL_OPS_CPU_H

#include <stddef.h>

/* patch_embed.c: Conv2d(C -> D, kernel P, stride S) as im2col + matrix product, and the token
 * assembly (middle class token at position t, plus position embedding). */
void patch_embed_forward(float *out /* (B, M, D) */, const float *img /* (B, C, H, W) */,
                         const float *w /* (D, C, P, P) */, const float *b /* (D) */, int B,
                         int C, int H, int W, int P, int S, int D);
void patch_embed_backward(float *dimg /* (B, C, H, W) or NULL */, float *dw /* (D, C, P, P) */,
                          float *db /* (D) */, const float *dout /* (B, M, D) */,
                          const float *w /* (D, C, P, P) */, const float *img /* (B, C, H, W) */,
                          int B, int C, int H, int W, int P, int S, int D);
void tokens_forward(float *x /* (B, L, D) */, const float *patches /* (B, M, D) */,
                    const float *cls /* (D) */, const float *pos /* (L, D) */, int B, int M, int D,
                    int t);
void tokens_backward(float *dpatches /* (B, M, D) */, float *dcls /* (D) */, float *dpos /* (L, D) */,
                     const float *dx /* (B, L, D) */, int B, int M, int D, int t);

/* norm.c: res_out = res_in + scale[b] * h (skipped when res_in is NULL: res_out already holds
 * the stream), normed = RMSNorm(res_out) * w. scale is the per-sample drop-path factor or NULL.
 * Backward: dres is the running residual-stream gradient, updated in place (it enters as
 * dL/dres_out from above and leaves as dL/dres_in); dh = scale * dres (NULL: not wanted). */
void add_rmsnorm_forward(float *res_out /* (B, L, D) */, float *normed /* (B, L, D) */,
                         float *rstd /* (B, L) */, const float *res_in /* (B, L, D) or NULL */,
                         const float *h /* (B, L, D) or NULL */, const float *scale /* (B) or NULL */,
                         const float *w /* (D) */, int B, int L, int D);
void add_rmsnorm_backward(float *dres /* (B, L, D) in/out */, float *dh /* (B, L, D) or NULL */,
                          float *dw /* (D) */, const float *dnormed /* (B, L, D) */,
                          const float *res_out /* (B, L, D) */, const float *rstd /* (B, L) */,
                          const float *w /* (D) */, const float *scale /* (B) or NULL */, int B,
                          int L, int D);

/* linear.c: out = in @ w^T + b. Rows of `in` are ld_in floats apart (ld_in >= C), so a slice of
 * a wider tensor (dt_low in x_dbl, the class-token row of each sample) needs no copy; rows of
 * out (and of dout in the backward) are ld_out >= OC apart (x_dbl rows padded to 16 bytes). */
void linear_forward(float *out /* (N, ld_out) */, const float *in /* (N, ld_in) */,
                    const float *w /* (OC, C) */, const float *b /* (OC) or NULL */, int N, int C,
                    int OC, int ld_in, int ld_out);
void linear_backward(float *dinp /* (N, ld_in) or NULL */, float *dw /* (OC, C) or NULL */,
                     float *db /* (OC) or NULL */, const float *dout /* (N, ld_out) */,
                     const float *in /* (N, ld_in) */, const float *w /* (OC, C) */, int N, int C,
                     int OC, int ld_in, int ld_out, int accumulate_dinp);

/* conv1d.c: u = SiLU(causal depthwise conv1d(x)) along L, width K. reverse = 1 runs the
 * causal filter on the reversed sequence (the "backward" direction) without copying. */
void conv1d_silu_forward(float *u /* (B, L, E) */, const float *x /* (B, L, ldx) */,
                         const float *w /* (E, K) */, const float *b /* (E) */, int B, int L,
                         int E, int K, int ldx, int reverse);
void conv1d_silu_backward(float *dx /* (B, L, ldx) */, float *dw /* (E, K) */, float *db /* (E) */,
                          const float *du /* (B, L, E) */, const float *x /* (B, L, ldx) */,
                          const float *w /* (E, K) */, const float *b /* (E) */, int B, int L,
                          int E, int K, int ldx, int reverse, int accumulate_dx);
/* Both directions at once: u[j] = conv1d_silu_forward(x, w[j], b[j], reverse = j). */
void conv1d_silu_bidir_forward(float *const u[2] /* (B, L, E) */, const float *x /* (B, L, ldx) */,
                               const float *const w[2], const float *const b[2], int B, int L, int E,
                               int K, int ldx);
/* Both directions' backward at once, as the mixer needs it: dx (overwritten) = the sum of the
 * forward (j = 0) and reversed (j = 1) filters' input gradients; dw[j], db[j] accumulate. */
void conv1d_silu_bidir_backward(float *dx /* (B, L, ldx) */, float *const dw[2], float *const db[2],
                                const float *const du[2] /* (B, L, E) */,
                                const float *x /* (B, L, ldx) */, const float *const w[2],
                                const float *const b[2], int B, int L, int E, int K, int ldx);

/* scan.c: one direction of the Longhorn (ViL) or Mamba (ViM) recurrence, y = scan + Dskip * u,
 * per ../shared/spec/scans.md. k and q (Mamba: B and C) are rows of x_dbl, ldkq floats apart.
 * Backward recomputes the forward states; dk, dq overwrite; dD, dA_log accumulate. */
void longhorn_scan_forward(float *y /* (B, L, E) */, const float *u /* (B, L, E) */,
                           const float *delta /* (B, L, E) */, const float *k /* (B, L, ldkq) */,
                           const float *q /* (B, L, ldkq) */, const float *Dskip /* (E) */, int B,
                           int L, int E, int N, int ldkq, int reverse);
void longhorn_scan_backward(float *du /* (B, L, E) */, float *ddelta /* (B, L, E) */,
                            float *dk /* (B, L, ldkq) */, float *dq /* (B, L, ldkq) */,
                            float *dD /* (E) */, const float *dy /* (B, L, E) */,
                            const float *u, const float *delta, const float *k, const float *q,
                            const float *Dskip, int B, int L, int E, int N, int ldkq, int reverse);
void mamba_scan_forward(float *y /* (B, L, E) */, const float *u /* (B, L, E) */,
                        const float *delta /* (B, L, E) */, const float *Bm /* (B, L, ldkq) */,
                        const float *Cm /* (B, L, ldkq) */, const float *A_log /* (E, N) */,
                        const float *Dskip /* (E) */, int B, int L, int E, int N, int ldkq,
                        int reverse);
void mamba_scan_backward(float *du, float *ddelta, float *dB, float *dC, float *dA_log /* (E, N) */,
                         float *dD, const float *dy, const float *u, const float *delta,
                         const float *Bm, const float *Cm, const float *A_log, const float *Dskip,
                         int B, int L, int E, int N, int ldkq, int reverse);

/* The whole bidirectional core of a mixer: for each direction j (0 forward, 1 reversed) the
 * scan on (u[j], delta[j], x_dbl[j]) gated by SiLU(z) at the same token, then
 * out = (y_0 + y_1) / 2. A_log == NULL selects Longhorn, otherwise Mamba. x_dbl rows are
 * ldx >= R + 2N apart, k at column R and q at R + N (the model passes dt_low's padded width as
 * R); z rows are ldz apart. Backward writes du, ddelta, the k and q
 * columns of dx_dbl and dz (all overwritten) and accumulates dD, dA_log and, unless NULL,
 * ddelta_sum[j][e] += sum over (B, L) of ddelta[j] (dt_proj's bias gradient, which the scan has
 * at hand: this saves dt_proj's backward a pass over ddelta). */
void scan_bidir_forward(float *out /* (B, L, E) */, const float *const u[2] /* (B, L, E) */,
                        const float *const delta[2] /* (B, L, E) */,
                        const float *const xdbl[2] /* (B, L, ldx) */,
                        const float *z /* (B, L, ldz) */, const float *const Dskip[2] /* (E) */,
                        const float *const A_log[2] /* (E, N) or NULL */, int B, int L, int E,
                        int N, int R, int ldx, int ldz);
void scan_bidir_backward(float *const du[2], float *const ddelta[2], float *const dxdbl[2],
                         float *dz /* (B, L, ldz) */, float *const dD[2], float *const dA_log[2],
                         float *const ddelta_sum[2] /* (E) each, or NULL */,
                         const float *dout /* (B, L, E) */, const float *const u[2],
                         const float *const delta[2], const float *const xdbl[2], const float *z,
                         const float *const Dskip[2], const float *const A_log[2], int B, int L,
                         int E, int N, int R, int ldx, int ldz);

/* loss.c: softmax cross-entropy against soft targets (rows summing to 1: label smoothing and
 * mixup give those). loss[b] per sample; the mean over the batch is what is minimized, so
 * dlogits = (probs - targets) / B. */
void softmax_xent_forward(float *loss /* (B) */, float *probs /* (B, C) */,
                          const float *logits /* (B, C) */, const float *targets /* (B, C) */,
                          int B, int C);
void softmax_xent_backward(float *dlogits /* (B, C) */, const float *probs /* (B, C) */,
                           const float *targets /* (B, C) */, int B, int C);

/* optimizer.c: one AdamW step on n contiguous parameters (decoupled weight decay wd * lr on the
 * elements whose decay[i] is nonzero; decay = NULL: on all). */
void adamw_update(float *p, const float *g, float *m, float *v, const unsigned char *decay, size_t n,
                  float lr, float beta1, float beta2, float eps, float wd, int step);
/* optimizer.c: torch.nn.utils.clip_grad_norm_ over n contiguous gradients: *norm = ||g||_2 (the
 * squares summed in double, in index order), then g *= max_norm / (norm + 1e-6) when that is
 * below 1. A non-finite norm scales by NaN, as torch does: the caller stops on the norm. */
void grad_clip(float *g, size_t n, float max_norm, float *norm);

#endif
