/* test_linear_loops.c: the plain-loop matrix products (what a build without a BLAS runs)
 * against the CBLAS ones of the library, on strided inputs, with and without bias and
 * accumulation. In a build without a BLAS both sides are the loops and the test still checks
 * them against a double-precision reference. */
#undef VIL_BLAS
#define linear_forward linear_forward_loops
#define linear_backward linear_backward_loops
#include "../vil/linear.c"
#undef linear_forward
#undef linear_backward

#include <math.h>
#include <stdlib.h>

#include "testing.h"
#include "vil/common.h"

void linear_forward(const VilLinearFwd *args);
void linear_backward(const VilLinearBwd *args);

static double maxdiff(const float *a, const float *b, size_t n) {
    double e = 0;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs((double)a[i] - b[i]));
    return e;
}

int main(void) {
    VilRng r;
    vil_rng_seed(&r, 5);
    int N = 37, C = 19, OC = 23, ld = 21, ldo = 28; /* out / dout rows padded past OC */
    float *in = vil_malloc(sizeof(float) * N * ld), *w = vil_malloc(sizeof(float) * OC * C);
    float *b = vil_malloc(sizeof(float) * OC), *g = vil_malloc(sizeof(float) * N * ldo);
    for (int i = 0; i < N * ld; i++) in[i] = vil_rng_normal(&r);
    for (int i = 0; i < OC * C; i++) w[i] = vil_rng_normal(&r);
    for (int i = 0; i < OC; i++) b[i] = vil_rng_normal(&r);
    for (int i = 0; i < N * ldo; i++) g[i] = i % ldo < OC ? vil_rng_normal(&r) : 1e6f; /* never read */
    float *o1 = vil_calloc((size_t)N * ldo, 4), *o2 = vil_calloc((size_t)N * ldo, 4);
    double *ref = vil_malloc(sizeof(double) * N * ldo);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < ldo; o++) {
            double s = o < OC ? b[o] : 0.0; /* the padding stays 0 */
            for (int c = 0; c < C && o < OC; c++) s += (double)in[n * ld + c] * w[o * C + c];
            ref[n * ldo + o] = s;
        }
    VilLinearFwd f = {.out = o1, .in = in, .w = w, .b = b, .N = N, .C = C, .OC = OC, .ld_in = ld, .ld_out = ldo};
    linear_forward_loops(&f);
    f.out = o2;
    linear_forward(&f);
    double e = 0;
    for (int i = 0; i < N * ldo; i++) e = fmax(e, fabs(o1[i] - ref[i]));
    T_CLOSE("loops forward vs double reference", e, 1e-4);
    T_CLOSE("loops forward vs library forward", maxdiff(o1, o2, (size_t)N * ldo), 1e-4);
    for (int acc = 0; acc < 2; acc++) {
        float *dx1 = vil_malloc(sizeof(float) * N * ld), *dx2 = vil_malloc(sizeof(float) * N * ld);
        float *dw1 = vil_calloc((size_t)OC * C, 4), *dw2 = vil_calloc((size_t)OC * C, 4);
        float *db1 = vil_calloc(OC, 4), *db2 = vil_calloc(OC, 4);
        for (int i = 0; i < N * ld; i++) dx1[i] = dx2[i] = 0.5f; /* pad columns must survive */
        VilLinearBwd lb = {.dinp = dx1, .dw = dw1, .db = db1, .dout = g, .in = in, .w = w, .N = N,
                           .C = C, .OC = OC, .ld_in = ld, .ld_out = ldo, .accumulate_dinp = acc};
        linear_backward_loops(&lb);
        lb.dinp = dx2, lb.dw = dw2, lb.db = db2;
        linear_backward(&lb);
        T_CLOSE(acc ? "loops backward dinp (accumulate)" : "loops backward dinp", maxdiff(dx1, dx2, (size_t)N * ld), 1e-4);
        T_CLOSE("loops backward dw", maxdiff(dw1, dw2, (size_t)OC * C), 1e-4);
        T_CLOSE("loops backward db", maxdiff(db1, db2, OC), 1e-4);
        free(dx1), free(dx2), free(dw1), free(dw2), free(db1), free(db2);
    }
    free(in), free(w), free(b), free(g), free(o1), free(o2), free(ref);
    return t_finish();
}
