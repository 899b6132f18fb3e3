/* ops_cpu.h: the CPU op set, float32, the reference every CUDA op is checked against. The ops
 * of the backend table are declared from its list (backend.h holds their argument structs,
 * shapes and semantics); below them, the one-direction scans the bidirectional op is made of.
 * Parameter gradients accumulate (+=); activation gradients overwrite (=) unless an
 * `accumulate` argument says otherwise. A shape comment sits on every pointer. */
#ifndef VIL_OPS_CPU_H
#define VIL_OPS_CPU_H

#include <stddef.h>

#include "backend.h"

/* The ops of VIL_OPS, each taking its argument struct of backend.h (where the shapes and the
 * semantics are written): patch_embed.c, norm.c, linear.c, conv1d.c, scan.c, loss.c,
 * optimizer.c. Act tensors are float32 here. */
#define VIL_CPU_OP_DECL(op, Args, label) void op(const Args *args);
VIL_OPS(VIL_CPU_OP_DECL)
#undef VIL_CPU_OP_DECL

/* scan.c: one direction of the Longhorn (ViL) or Mamba (ViM) recurrence, y = scan + Dskip * u,
 * per doc/scans.md. k and q (Mamba: B and C) are rows of x_dbl, ldkq floats apart.
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

#endif
