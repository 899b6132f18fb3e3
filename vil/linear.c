/* linear.c: the CPU matrix products, out = in @ w^T + b and its backward, through CBLAS when
 * the build found a BLAS (VIL_BLAS) and through plain OpenMP loops otherwise. Parameter
 * gradients accumulate; dinp overwrites unless accumulate_dinp. */
#include <string.h>

#include "ops_cpu.h"
#ifdef VIL_BLAS
#include <cblas.h>
#endif

void linear_forward(float *out, const float *in, const float *w, const float *b, int N, int C,
                    int OC, int ld_in) {
#ifdef VIL_BLAS
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, in, ld_in, w, C, 0.0f,
                out, OC);
    if (b) {
#pragma omp parallel for
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] += b[o];
    }
#else
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *x = in + (size_t)n * ld_in;
        for (int o = 0; o < OC; o++) {
            const float *wr = w + (size_t)o * C;
            float acc = b ? b[o] : 0.0f;
            for (int c = 0; c < C; c++) acc += x[c] * wr[c];
            out[(size_t)n * OC + o] = acc;
        }
    }
#endif
}

void linear_backward(float *dinp, float *dw, float *db, const float *dout, const float *in,
                     const float *w, int N, int C, int OC, int ld_in, int accumulate_dinp) {
#ifdef VIL_BLAS
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C,
                    accumulate_dinp ? 1.0f : 0.0f, dinp, ld_in);
    if (dw)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, in, ld_in,
                    1.0f, dw, C);
#else
    if (dinp) {
#pragma omp parallel for
        for (int n = 0; n < N; n++) {
            float *dx = dinp + (size_t)n * ld_in;
            const float *g = dout + (size_t)n * OC;
            if (!accumulate_dinp) memset(dx, 0, (size_t)C * sizeof(float));
            for (int o = 0; o < OC; o++) {
                const float *wr = w + (size_t)o * C;
                float go = g[o];
                for (int c = 0; c < C; c++) dx[c] += go * wr[c];
            }
        }
    }
#pragma omp parallel for if (dw)
    for (int o = 0; o < (dw ? OC : 0); o++) {
        float *dwr = dw + (size_t)o * C;
        for (int n = 0; n < N; n++) {
            float go = dout[(size_t)n * OC + o];
            const float *x = in + (size_t)n * ld_in;
            for (int c = 0; c < C; c++) dwr[c] += go * x[c];
        }
    }
#endif
    if (db) {
#pragma omp parallel for
        for (int o = 0; o < OC; o++) {
            float acc = 0.0f;
            for (int n = 0; n < N; n++) acc += dout[(size_t)n * OC + o];
            db[o] += acc;
        }
    }
}
