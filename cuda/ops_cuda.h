/* ops_cuda.h: the CUDA op set, twin of vil/ops_cpu.h: same names plus _cuda, the same argument
 * structs and semantics (parameter gradients accumulate, activation gradients overwrite unless
 * an accumulate field says otherwise). "act" tensors are bf16 here, f32 tensors stay float32;
 * matrix-product weights are the bf16 working copy, other parameters the f32 master. Every op is
 * asynchronous on its context's stream and never waits for the device. */
#ifndef VIL_OPS_CUDA_H
#define VIL_OPS_CUDA_H

#include <stddef.h>

#include "vil/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* the ops of VIL_OPS: each takes its argument struct of vil/backend.h and runs on the current
 * context (cuda_common.cuh: the backend table binds it before calling) */
#define VIL_CUDA_OP_DECL(op, Args, label) void op##_cuda(const Args *args);
VIL_OPS(VIL_CUDA_OP_DECL)
#undef VIL_CUDA_OP_DECL

void params_to_work_cuda(void *work /* (n) bf16 */, const float *master /* (n) */, size_t n);
/* the backend's scan_states_bytes: the states the scan's forward keeps for its backward */
size_t scan_states_bytes_cuda(const VilScanFwd *a);

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
