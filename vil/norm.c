/* norm.c: the residual add fused with RMSNorm (eps 1e-5, weight, no bias), on the float32
 * residual stream. The add carries the per-sample drop-path scale. dres is updated in place
 * (see ops_cpu.h); dw accumulates; dh overwrites. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "ops_cpu.h"

#define RMS_EPS 1e-5f

void add_rmsnorm_forward(const VilNormFwd *args) {
    float *res_out = args->res_out, *normed = args->normed, *rstd = args->rstd;
    const float *res_in = args->res_in, *h = args->h, *scale = args->scale, *w = args->w;
    int B = args->B, L = args->L, D = args->D;
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

void add_rmsnorm_backward(const VilNormBwd *args) {
    float *dres = args->dres, *dh = args->dh, *dw = args->dw;
    const float *dnormed = args->dnormed, *res_out = args->res_out, *rstd = args->rstd;
    const float *w = args->w, *scale = args->scale;
    int B = args->B, L = args->L, D = args->D;
    /* dw sums over rows: partial sums per fixed block of rows, reduced in block order, so the
     * result does not depend on the thread count */
    enum { ROWS = 64 };
    long nrows = (long)B * L, nblk = (nrows + ROWS - 1) / ROWS;
    float *dw_part = vil_calloc((size_t)nblk * D, sizeof(float));
#pragma omp parallel for
    for (long blk = 0; blk < nblk; blk++) {
        float *dwp = dw_part + (size_t)blk * D;
        long r1 = (blk + 1) * ROWS < nrows ? (blk + 1) * ROWS : nrows;
        for (long r = blk * ROWS; r < r1; r++) {
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
    for (long blk = 0; blk < nblk; blk++)
        for (int d = 0; d < D; d++) dw[d] += dw_part[(size_t)blk * D + d];
    free(dw_part);
}
