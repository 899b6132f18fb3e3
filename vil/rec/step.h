/* step.h: what a recurrence's header (vil/rec/<id>.h) is written with: the qualifier of its CPU
 * step pieces, the CPU's sigmoid and softplus, and the adjoint terms of one state. The pieces
 * are plain C, inlined into vil/scan.c's loops (and host/device functions where nvcc compiles
 * them: dev/cuda/scan.cu's plain version 1 runs them); vil/rec/all.h calls them by
 * VilRecurrence and documents each. */
#ifndef VIL_REC_STEP_H
#define VIL_REC_STEP_H

#include <math.h>
#include <stddef.h>

#ifdef __CUDACC__
#define VIL_REC_FN static __host__ __device__ __forceinline__
#else
#define VIL_REC_FN static inline __attribute__((always_inline))
#endif

VIL_REC_FN float vil_rec_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
VIL_REC_FN float vil_rec_softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* One state's adjoint terms at a step (the piece <id>_adjoint): ds, the step scalar's gradient;
 * dk, k_t[n]'s (beyond a kappa path); dA, the parameter's (Mamba: per unit of A, times A once
 * at the end). */
typedef struct {
    float ds, dk, dA;
} VilRecAdj;

#endif
