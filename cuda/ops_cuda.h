/* ops_cuda.h: the CUDA op set, twin of vil/ops_cpu.h: same names plus _cuda, same argument
 * order and semantics (parameter gradients accumulate, activation gradients overwrite unless an
 * accumulate flag says otherwise). "act" tensors are bf16 here, f32 tensors stay float32;
 * matrix-product weights are the bf16 working copy, other parameters the f32 master. Every op
 * is asynchronous on the one stream of cuda_common.cuh and never waits for the device. */
#ifndef VIL_OPS_CUDA_H
#define VIL_OPS_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void patch_embed_forward_cuda(void *out /* (B, M, D) bf16 */, const float *img /* (B, C, H, W) */,
                              const void *w /* (D, C, P, P) bf16 */, const float *b /* (D) */,
                              int B, int C, int H, int W, int P, int S, int D);
void patch_embed_backward_cuda(float *dimg /* (B, C, H, W) or NULL */, float *dw /* (D, C, P, P) */,
                               float *db /* (D) */, const void *dout /* (B, M, D) bf16 */,
                               const void *w /* (D, C, P, P) bf16 */,
                               const float *img /* (B, C, H, W) */, int B, int C, int H, int W,
                               int P, int S, int D);
void tokens_forward_cuda(float *x /* (B, L, D) */, const void *patches /* (B, M, D) bf16 */,
                         const float *cls /* (D) */, const float *pos /* (L, D) */, int B, int M,
                         int D, int t);
void tokens_backward_cuda(void *dpatches /* (B, M, D) bf16 */, float *dcls /* (D) */,
                          float *dpos /* (L, D) */, const float *dx /* (B, L, D) */, int B, int M,
                          int D, int t);

void add_rmsnorm_forward_cuda(float *res_out /* (B, L, D) */, void *normed /* (B, L, D) bf16 */,
                              float *rstd /* (B, L) */, const float *res_in /* (B, L, D) or NULL */,
                              const void *h /* (B, L, D) bf16 or NULL */,
                              const float *scale /* (B) or NULL */, const float *w /* (D) */,
                              int B, int L, int D);
void add_rmsnorm_backward_cuda(float *dres /* (B, L, D) in/out */, void *dh /* (B, L, D) bf16 or NULL */,
                               float *dw /* (D) */, const void *dnormed /* (B, L, D) bf16 */,
                               const float *res_out /* (B, L, D) */, const float *rstd /* (B, L) */,
                               const float *w /* (D) */, const float *scale /* (B) or NULL */,
                               int B, int L, int D);

/* flags: VIL_LINEAR_OUT_F32 (backend.h) makes out / dout float32 */
void linear_forward_cuda(void *out /* (N, ld_out) */, const void *in /* (N, ld_in) bf16 */,
                         const void *w /* (OC, C) bf16 */, const float *b /* (OC) or NULL */,
                         int N, int C, int OC, int ld_in, int ld_out, int flags);
void linear_backward_cuda(void *dinp /* (N, ld_in) bf16 or NULL */, float *dw /* (OC, C) or NULL */,
                          float *db /* (OC) or NULL */, const void *dout /* (N, ld_out) */,
                          const void *in /* (N, ld_in) bf16 */, const void *w /* (OC, C) bf16 */,
                          int N, int C, int OC, int ld_in, int ld_out, int accumulate_dinp,
                          int flags);

void conv1d_silu_forward_cuda(void *u /* (B, L, E) bf16 */, const void *x /* (B, L, ldx) bf16 */,
                              const float *w /* (E, K) */, const float *b /* (E) */, int B, int L,
                              int E, int K, int ldx, int reverse);
void conv1d_silu_backward_cuda(void *dx /* (B, L, ldx) bf16 */, float *dw /* (E, K) */,
                               float *db /* (E) */, const void *du /* (B, L, E) bf16 */,
                               const void *x /* (B, L, ldx) bf16 */, const float *w /* (E, K) */,
                               const float *b /* (E) */, int B, int L, int E, int K, int ldx,
                               int reverse, int accumulate_dx);

void conv1d_silu_bidir_forward_cuda(void *const u[2] /* (B, L, E) bf16 */,
                                    const void *x /* (B, L, ldx) bf16 */, const float *const w[2],
                                    const float *const b[2], int B, int L, int E, int K, int ldx);
void conv1d_silu_bidir_backward_cuda(void *dx /* (B, L, ldx) bf16 */, float *const dw[2],
                                     float *const db[2], const void *const du[2] /* (B, L, E) */,
                                     const void *x /* (B, L, ldx) bf16 */, const float *const w[2],
                                     const float *const b[2], int B, int L, int E, int K, int ldx);
void scan_bidir_forward_cuda(void *out /* (B, L, E) bf16 */, const void *const u[2] /* (B, L, E) */,
                             const void *const delta[2] /* (B, L, E) */,
                             const void *const xdbl[2] /* (B, L, ldx >= R + 2N) */,
                             const void *z /* (B, L, ldz) bf16 */, const float *const D[2] /* (E) */,
                             const float *const A_log[2] /* (E, N) or NULL */, int B, int L, int E,
                             int N, int R, int ldx, int ldz);
void scan_bidir_backward_cuda(void *const du[2], void *const ddelta[2], void *const dxdbl[2],
                              void *dz /* (B, L, ldz) bf16 */, float *const dD[2],
                              float *const dA_log[2], float *const ddelta_sum[2] /* or NULL */,
                              const void *dout /* (B, L, E) bf16 */,
                              const void *const u[2], const void *const delta[2],
                              const void *const xdbl[2], const void *z, const float *const D[2],
                              const float *const A_log[2], int B, int L, int E, int N, int R,
                              int ldx, int ldz);

void softmax_xent_forward_cuda(float *loss /* (B) */, float *probs /* (B, C) */,
                               const float *logits /* (B, C) */, const float *targets /* (B, C) */,
                               int B, int C);
void softmax_xent_backward_cuda(float *dlogits /* (B, C) */, const float *probs /* (B, C) */,
                                const float *targets /* (B, C) */, int B, int C);

void adamw_update_cuda(float *p, void *work /* bf16 or NULL */, const float *g, float *m, float *v,
                       const unsigned char *decay,
                       size_t n, float lr, float beta1, float beta2, float eps, float wd, int step);
void params_to_work_cuda(void *work /* (n) bf16 */, const float *master /* (n) */, size_t n);
void grad_clip_cuda(float *g /* (n) */, size_t n, float max_norm, float *norm /* device, (1) */);

/* column sums of a row-major (N, OC) matrix with rows ld apart into db (+=), in a fixed order
 * (deterministic); shared by the linear and patch-embedding bias gradients */
void colsum_accumulate_cuda(float *db /* (OC) */, const void *x /* (N, ld) */, int x_is_f32, int N,
                            int OC, int ld);
/* out[c] += sum_r part[r * ld + c] for c < cols, rows summed in a fixed order (deterministic
 * final step of every partial-sum reduction) */
void colsum_rows_accumulate_cuda(float *out /* (cols) */, const float *part /* (rows, ld) */,
                                 int rows, int cols, int ld);

#ifdef __cplusplus
}
#endif
#endif
