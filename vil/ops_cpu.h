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

/* scan.c: one direction's initial and final states, element (b, n, e) at b * ld + n * E + e
 * (the bidirectional op's (B, 2, N, E) with the direction's offset): h0 NULL starts from zero,
 * hT NULL is not wanted; hsq (B, L), when not NULL, gets each sample's squared state norm
 * sum_{e, n} h_t[e, n]^2 at each token t (the forward only: `vil states`). NULL as a whole:
 * all three NULL. */
typedef struct {
    const float *h0;
    float *hT, *hsq;
    size_t ld;
} VilScanState;

/* scan.c: one direction of a recurrence (Longhorn: A_log NULL; Mamba), y = scan + Dskip * u,
 * per doc/scans.md. k and q (Mamba: B and C) are rows of x_dbl, xdbl_ld floats apart.
 * Backward recomputes the forward states (from st->h0, a constant); dk, dq overwrite; dD,
 * dA_log accumulate. */
void scan_dir_forward(VilRecurrence rec, float *y /* (B, L, E) */, const float *u /* (B, L, E) */,
                      const float *delta /* (B, L, E) */, const float *k /* (B, L, xdbl_ld) */,
                      const float *q /* (B, L, xdbl_ld) */, const float *Dskip /* (E) */,
                      const float *A_log /* (E, N) */, int B, int L, int E, int N, int xdbl_ld,
                      int reverse, const VilScanState *st);
void scan_dir_backward(VilRecurrence rec, float *du /* (B, L, E) */, float *ddelta /* (B, L, E) */,
                       float *dk /* (B, L, xdbl_ld) */, float *dq /* (B, L, xdbl_ld) */,
                       float *dD /* (E) */, float *dA_log /* (E, N) */,
                       const float *dy /* (B, L, E) */, const float *u, const float *delta,
                       const float *k, const float *q, const float *Dskip, const float *A_log, int B,
                       int L, int E, int N, int xdbl_ld, int reverse, const VilScanState *st);

#endif
