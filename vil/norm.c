/* norm.c: the residual add fused with RMSNorm (eps 1e-5, weight, no bias), on the float32
 * residual stream. The add carries the per-sample drop-path scale. dres is updated in place
 * (see ops_cpu.h); dw accumulates; dh overwrites. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "ops_cpu.h"

#define RMS_EPS 1e-5f

void add_rmsnorm_forward(float *res_out, float *normed, float *rstd, const float *res_in,
                         const float *h, const float *scale, const float *w, int B, int L, int D) {
#pragma omp parallel for
    for (long r = 0; r < (long)B * L; r++) {
        float *x = res_out + (size_t)r * D;
        if (res_in) {
            const float *a = res_in + (size_t)r * D, *hh = h + (size_t)r * D;
            float s = scale ? scale[r / L] : 1.0f;
            for (int d = 0; d < D; d++) x[d] = a[d] + s * hh[d];
        }
        double ss = 0.0;
        for (int d = 0; d < D; d++) ss += (double)x[d] * x[d];
        float rs = 1.0f / sqrtf((float)(ss / D) + RMS_EPS);
        rstd[r] = rs;
        float *y = normed + (size_t)r * D;
        for (int d = 0; d < D; d++) y[d] = x[d] * rs * w[d];
    }
}

void add_rmsnorm_backward(float *dres, float *dh, float *dw, const float *dnormed,
                          const float *res_out, const float *rstd, const float *w,
                          const float *scale, int B, int L, int D) {
    int nt = omp_get_max_threads();
    float *dw_part = vil_calloc((size_t)nt * D, sizeof(float));
#pragma omp parallel
    {
        float *dwp = dw_part + (size_t)omp_get_thread_num() * D;
#pragma omp for
        for (long r = 0; r < (long)B * L; r++) {
            const float *x = res_out + (size_t)r * D, *g = dnormed + (size_t)r * D;
            float rs = rstd[r];
            double dot = 0.0; /* sum_d g w x */
            for (int d = 0; d < D; d++) {
                dot += (double)g[d] * w[d] * x[d];
                dwp[d] += g[d] * x[d] * rs;
            }
            float c = (float)(dot / D) * rs * rs * rs;
            float *dr = dres + (size_t)r * D;
            for (int d = 0; d < D; d++) dr[d] += g[d] * w[d] * rs - x[d] * c;
            if (dh) {
                float s = scale ? scale[r / L] : 1.0f;
                float *o = dh + (size_t)r * D;
                for (int d = 0; d < D; d++) o[d] = s * dr[d];
            }
        }
    }
    /* fixed reduction order over thread slots: the same result for the same thread count */
    for (int t = 0; t < nt; t++)
        for (int d = 0; d < D; d++) dw[d] += dw_part[(size_t)t * D + d];
    free(dw_part);
}
