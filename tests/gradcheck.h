/* gradcheck.h: finite-difference gradient checks for the CPU ops and the whole model.
 * A check perturbs sampled coordinates of one float32 tensor by +-h, re-evaluates a scalar
 * loss (accumulated in double) and compares the central differences with the analytic
 * gradient: err = ||fd - an|| / max(||an||, ||fd||, 1e-12) over the sampled coordinates. */
#ifndef VIL_GRADCHECK_H
#define VIL_GRADCHECK_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testing.h"
#include "vil/common.h"

typedef double (*gc_loss_fn)(void *ctx);

/* Compare dx (analytic) with central differences on up to max_coords coordinates of x. */
static inline double gc_check(const char *name, gc_loss_fn f, void *ctx, float *x, const float *dx,
                       size_t n, int max_coords, float h, double tol, VilRng *rng) {
    double num = 0.0, den_a = 0.0, den_f = 0.0;
    int cnt = (size_t)max_coords < n ? max_coords : (int)n;
    for (int s = 0; s < cnt; s++) {
        size_t i = cnt == (int)n ? (size_t)s : (size_t)vil_rng_below(rng, (uint32_t)n);
        float orig = x[i];
        x[i] = orig + h;
        double lp = f(ctx);
        x[i] = orig - h;
        double lm = f(ctx);
        x[i] = orig;
        double fd = (lp - lm) / (2.0 * h);
        double an = dx[i];
        num += (fd - an) * (fd - an);
        den_a += an * an;
        den_f += fd * fd;
    }
    double den = sqrt(den_a > den_f ? den_a : den_f);
    double err = sqrt(num) / (den > 1e-12 ? den : 1e-12);
    char label[256];
    snprintf(label, sizeof label, "grad %s", name);
    T_CLOSE(label, err, tol);
    if (getenv("VIL_GC_VERBOSE")) printf("     |an| %.3e |fd| %.3e\n", sqrt(den_a), sqrt(den_f));
    return err;
}

/* Directional check: for k random directions w (N(0,1) entries, so every coordinate moves by
 * about h), compare (L(x + h w) - L(x - h w)) / 2h with <dx, w>. Summing over all coordinates
 * gives a signal about sqrt(n) times larger than one coordinate's, which matters for the
 * float32 forward of a whole network, whose rounding noise in L is ~1e-7 |L|. The central
 * differences at h and h/2 are combined by Richardson extrapolation (truncation O(h^4)). */
/* The same with the error measured against at least abs_floor (||fd - an|| / max(||an||, ||fd||,
 * abs_floor)): for a tensor whose derivatives are below what the loss's float32 rounding resolves at
 * the largest step (20 h), where a right gradient would measure as noise. */
static inline double gc_check_dir_floor(const char *name, gc_loss_fn f, void *ctx, float *x,
                                        const float *dx, size_t n, int k, float h, double tol,
                                        double abs_floor, VilRng *rng);
static inline double gc_check_dir(const char *name, gc_loss_fn f, void *ctx, float *x,
                                  const float *dx, size_t n, int k, float h, double tol,
                                  VilRng *rng) {
    return gc_check_dir_floor(name, f, ctx, x, dx, n, k, h, tol, 1e-12, rng);
}
static inline double gc_check_dir_floor(const char *name, gc_loss_fn f, void *ctx, float *x,
                                        const float *dx, size_t n, int k, float h, double tol,
                                        double abs_floor, VilRng *rng) {
    float *orig = vil_malloc(n * sizeof(float)), *w = vil_malloc(n * sizeof(float));
    memcpy(orig, x, n * sizeof(float));
    double num = 0.0, den_a = 0.0, den_f = 0.0;
    for (int d = 0; d < k; d++) {
        double an = 0.0;
        for (size_t i = 0; i < n; i++) {
            w[i] = vil_rng_normal(rng);
            an += (double)w[i] * dx[i];
        }
        /* The step is chosen so the first-order change of L is about h * 1 (bounded to
         * [h/10, 20h]): large enough to stand above the rounding noise, small where the
         * gradient is large. Richardson extrapolation of the central differences at hd and
         * hd/2 removes the h^2 truncation term. */
        double hd = h / (fabs(an) > 1e-30 ? fabs(an) : 1e-30);
        if (hd < h / 10) hd = h / 10;
        if (hd > 20 * h) hd = 20 * h;
        double c[2];
        for (int r = 0; r < 2; r++) {
            float hh = (float)(r ? hd / 2 : hd);
            for (size_t i = 0; i < n; i++) x[i] = orig[i] + hh * w[i];
            double lp = f(ctx);
            for (size_t i = 0; i < n; i++) x[i] = orig[i] - hh * w[i];
            double lm = f(ctx);
            c[r] = (lp - lm) / (2.0 * hh);
        }
        memcpy(x, orig, n * sizeof(float));
        double fd = (4.0 * c[1] - c[0]) / 3.0;
        num += (fd - an) * (fd - an);
        den_a += an * an;
        den_f += fd * fd;
    }
    free(orig);
    free(w);
    double den = sqrt(den_a > den_f ? den_a : den_f);
    double err = sqrt(num) / (den > abs_floor ? den : abs_floor);
    char label[256];
    snprintf(label, sizeof label, "grad %s", name);
    T_CLOSE(label, err, tol);
    if (getenv("VIL_GC_VERBOSE")) printf("     |an| %.3e |fd| %.3e\n", sqrt(den_a), sqrt(den_f));
    return err;
}

static inline void gc_fill(float *x, size_t n, float scale, VilRng *r) {
    for (size_t i = 0; i < n; i++) x[i] = scale * vil_rng_normal(r);
}

static inline double gc_dot(const float *a, const float *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

#endif
