/* rel_err.h: the error measure every GPU-against-CPU check uses, shared by the tests
 * (tests/testing.h) and the kernel sandbox (dev/cuda/harness.h). */
#ifndef VIL_REL_ERR_H
#define VIL_REL_ERR_H

#include <math.h>
#include <stddef.h>

/* ||a - ref|| / ||ref|| over rows x cols with rows ld apart; NaN anywhere gives NaN */
static inline double rel_l2(const float *a, const float *ref, size_t rows, size_t cols, size_t ld) {
    double num = 0, den = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            double x = a[r * ld + c], y = ref[r * ld + c];
            num += (x - y) * (x - y);
            den += y * y;
        }
    return sqrt(num) / (sqrt(den) + 1e-30);
}

#endif
