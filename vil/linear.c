/* linear.c: the CPU matrix products, out = in @ w^T + b and its backward, through CBLAS when
 * the build found a BLAS (VIL_BLAS) and through plain OpenMP loops otherwise. Parameter
 * gradients accumulate; dinp overwrites unless accumulate_dinp. */
#include <omp.h>
#include <string.h>

#include "ops_cpu.h"
#ifdef VIL_BLAS
#include <cblas.h>

/* The rows (or output channels) are cut into fixed-size chunks spread over the OpenMP threads,
 * each chunk one single-threaded BLAS call: a multithreaded OpenBLAS inside an OpenMP program
 * fights the spinning OpenMP workers for the cores (measured: 2-3x slower on 2 cores), and
 * chunks that do not depend on the thread count keep the results bitwise the same for any
 * thread count. */
#define ROW_CHUNK 256
#define OC_CHUNK 32
static void blas_single_thread(void) {
#ifdef OPENBLAS_VERSION
    static int done = 0;
    if (!done) {
        openblas_set_num_threads(1);
        done = 1;
    }
#endif
}

static inline void chunk(int n, int k, int size, int *a, int *b) {
    *a = k * size;
    *b = (k + 1) * size < n ? (k + 1) * size : n;
}
#endif

void linear_forward(const VilLinearFwd *args) {
    float *out = args->out;
    const float *in = args->in, *w = args->w, *b = args->b;
    int N = args->N, C = args->C, OC = args->OC, ld_in = args->ld_in, ld_out = args->ld_out;
#ifdef VIL_BLAS
    blas_single_thread();
    int parts = (N + ROW_CHUNK - 1) / ROW_CHUNK;
#pragma omp parallel for schedule(dynamic)
    for (int k = 0; k < parts; k++) {
        int r0, r1;
        chunk(N, k, ROW_CHUNK, &r0, &r1);
        if (r1 > r0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, OC, C, 1.0f,
                        in + (size_t)r0 * ld_in, ld_in, w, C, 0.0f, out + (size_t)r0 * ld_out, ld_out);
    }
    if (b) {
#pragma omp parallel for
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) out[(size_t)n * ld_out + o] += b[o];
    }
#else
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *x = in + (size_t)n * ld_in;
        for (int o = 0; o < OC; o++) {
            const float *wr = w + (size_t)o * C;
            float acc = b ? b[o] : 0.0f;
            for (int c = 0; c < C; c++) acc += x[c] * wr[c];
            out[(size_t)n * ld_out + o] = acc;
        }
    }
#endif
}

void linear_backward(const VilLinearBwd *args) {
    float *dinp = args->dinp, *dw = args->dw, *db = args->db;
    const float *dout = args->dout, *in = args->in, *w = args->w;
    int N = args->N, C = args->C, OC = args->OC, ld_in = args->ld_in, ld_out = args->ld_out;
    int accumulate_dinp = args->accumulate_dinp;
#ifdef VIL_BLAS
    blas_single_thread();
    int rparts = dinp ? (N + ROW_CHUNK - 1) / ROW_CHUNK : 0;
    int oparts = dw ? (OC + OC_CHUNK - 1) / OC_CHUNK : 0;
#pragma omp parallel for schedule(dynamic)
    for (int k = 0; k < rparts + oparts; k++) {
        int r0 = 0, r1 = 0, o0 = 0, o1 = 0;
        if (k < rparts) chunk(N, k, ROW_CHUNK, &r0, &r1);
        else chunk(OC, k - rparts, OC_CHUNK, &o0, &o1);
        if (dinp && r1 > r0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, C, OC, 1.0f,
                        dout + (size_t)r0 * ld_out, ld_out, w, C, accumulate_dinp ? 1.0f : 0.0f,
                        dinp + (size_t)r0 * ld_in, ld_in);
        /* dw rows [o0, o1) = dout[:, o0:o1]^T @ in: the sum over N stays inside one call */
        if (dw && o1 > o0)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o1 - o0, C, N, 1.0f, dout + o0,
                        ld_out, in, ld_in, 1.0f, dw + (size_t)o0 * C, C);
    }
#else
    if (dinp) {
#pragma omp parallel for
        for (int n = 0; n < N; n++) {
            float *dx = dinp + (size_t)n * ld_in;
            const float *g = dout + (size_t)n * ld_out;
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
            float go = dout[(size_t)n * ld_out + o];
            const float *x = in + (size_t)n * ld_in;
            for (int c = 0; c < C; c++) dwr[c] += go * x[c];
        }
    }
#endif
    if (db) {
#pragma omp parallel for
        for (int o = 0; o < OC; o++) {
            float acc = 0.0f;
            for (int n = 0; n < N; n++) acc += dout[(size_t)n * ld_out + o];
            db[o] += acc;
        }
    }
}
