/* test_mixup.c: batch Mixup / CutMix against timm's rules: Beta draws, the CutMix box and its
 * lambda correction, flip pairing (i with n-1-i), smoothed soft targets that sum to one,
 * odd batches, gray images, and determinism from the RNG state. */
#include <math.h>
#include <string.h>

#include "data/mixup.h"
#include "tests/testing.h"

/* Beta(a, a) against its moments: mean 1/2, variance 1/(4(2a+1)), kurtosis 3(2a+1)/(2a+3)
 * (the last sets the variance estimate's standard error). a = 0.001 made NaN in 23% of the
 * draws when U^(1/a) underflowed. */
static void test_beta(void) {
    VilRng rng;
    vil_rng_seed(&rng, 1);
    const double as[] = {0.001, 0.005, 0.1, 0.4, 0.8, 1.0, 2.0, 2.5};
    for (size_t t = 0; t < sizeof as / sizeof as[0]; t++) {
        double a = as[t], s = 0, s2 = 0;
        int N = 100000, out = 0;
        for (int i = 0; i < N; i++) {
            double x = vil_rng_beta(&rng, a, a);
            out += !(x >= 0.0 && x <= 1.0); /* NaN included */
            s += x;
            s2 += (x - 0.5) * (x - 0.5);
        }
        double mean = s / N, var = s2 / N - (mean - 0.5) * (mean - 0.5);
        double want_var = 1.0 / (4.0 * (2.0 * a + 1.0));
        double kurt = 3.0 * (2.0 * a + 1.0) / (2.0 * a + 3.0);
        double se_mean = sqrt(want_var / N), se_var = want_var * sqrt((kurt - 1.0) / N);
        T_CHECK(out == 0, "Beta(%g,%g): %d of %d samples NaN or outside [0, 1]", a, a, out, N);
        T_CHECK(fabs(mean - 0.5) < 5 * se_mean, "Beta(%g,%g) mean %.5f (0.5 +- %.5f)", a, a,
                mean, 5 * se_mean);
        T_CHECK(fabs(var - want_var) < 5 * se_var, "Beta(%g,%g) variance %.6f (%.6f +- %.6f)", a,
                a, var, want_var, 5 * se_var);
    }
    /* a skewed pair: mean a / (a + b) */
    double s = 0;
    int N = 100000, out = 0;
    for (int i = 0; i < N; i++) {
        double x = vil_rng_beta(&rng, 0.002, 0.006);
        out += !(x >= 0.0 && x <= 1.0);
        s += x;
    }
    double want = 0.25, se = sqrt(want * 0.75 / (0.008 + 1.0) / N);
    T_CHECK(out == 0 && fabs(s / N - want) < 5 * se, "Beta(0.002,0.006) mean %.4f (0.25 +- %.4f), %d bad",
            s / N, 5 * se, out);

    /* the mixup lambda of a tiny alpha is finite, Mixup and CutMix alike */
    VilMixupConfig c;
    vil_mixup_config_default(&c, 10);
    c.mixup_alpha = c.cutmix_alpha = 0.001f;
    int bad = 0;
    for (int i = 0; i < 10000; i++) {
        VilMixupParams p;
        vil_mixup_draw(&c, &rng, 32, 32, &p);
        bad += !(p.lam >= 0.0f && p.lam <= 1.0f);
    }
    T_CHECK(bad == 0, "mixup/cutmix alpha 0.001: %d of 10000 lambdas NaN or outside [0, 1]", bad);
}

static void test_draw(void) {
    VilMixupConfig c;
    vil_mixup_config_default(&c, 10);
    T_CHECK(c.mixup_alpha == 0.8f && c.cutmix_alpha == 1.0f && c.prob == 1.0f &&
                c.switch_prob == 0.5f && c.smoothing == 0.1f,
            "DeiT defaults");
    VilRng rng;
    vil_rng_seed(&rng, 7);
    int N = 4000, cut = 0, box_ok = 1, lam_ok = 1;
    const int H = 32, W = 24;
    for (int i = 0; i < N; i++) {
        VilMixupParams p;
        vil_mixup_draw(&c, &rng, H, W, &p);
        cut += p.cutmix;
        if (p.cutmix) {
            box_ok &= p.yl >= 0 && p.yl <= p.yh && p.yh <= H && p.xl >= 0 && p.xl <= p.xh && p.xh <= W;
            double area = (double)(p.yh - p.yl) * (p.xh - p.xl) / (H * W);
            lam_ok &= fabsf(p.lam - (float)(1.0 - area)) < 1e-6f;
        } else {
            lam_ok &= p.lam > 0.0f && p.lam < 1.0f;
        }
    }
    T_CLOSE("cutmix chosen half the time", fabs((double)cut / N - 0.5), 0.03);
    T_CHECK(box_ok, "boxes inside the image");
    T_CHECK(lam_ok, "cutmix lambda = 1 - box area / image area");

    /* the box is timm's rand_bbox: side int(H * sqrt(1 - lam)) around a centre, clipped;
     * an unclipped box has exactly (cut // 2) * 2 rows */
    VilMixupConfig cm = c;
    cm.mixup_alpha = 0.0f;
    cm.correct_lam = 0;
    int shape_ok = 1, seen = 0, all_cut = 1;
    for (int i = 0; i < 2000; i++) {
        VilMixupParams p;
        vil_mixup_draw(&cm, &rng, H, W, &p);
        all_cut &= p.cutmix;
        int cut_h = (int)(H * sqrt(1.0 - (double)p.lam)), cut_w = (int)(W * sqrt(1.0 - (double)p.lam));
        if (p.yl > 0 && p.yh < H && p.xl > 0 && p.xh < W) {
            seen++;
            shape_ok &= p.yh - p.yl == cut_h / 2 * 2 && p.xh - p.xl == cut_w / 2 * 2;
        } else {
            shape_ok &= p.yh - p.yl <= cut_h && p.xh - p.xl <= cut_w;
        }
    }
    T_CHECK(shape_ok && seen > 100, "rand_bbox sizes (%d unclipped)", seen);
    T_CHECK(all_cut, "cutmix only when mixup alpha is 0");

    /* prob 0: nothing mixed, lam 1 */
    VilMixupConfig off;
    vil_mixup_config_none(&off, 10, 0.1f);
    VilMixupParams p;
    vil_mixup_draw(&off, &rng, H, W, &p);
    T_CHECK(p.lam == 1.0f && !p.cutmix, "no mixing when disabled");

    /* same state, same draw */
    VilRng r1, r2;
    vil_rng_seed(&r1, 99);
    vil_rng_seed(&r2, 99);
    int same = 1;
    for (int i = 0; i < 100; i++) {
        VilMixupParams a, b;
        vil_mixup_draw(&c, &r1, H, W, &a);
        vil_mixup_draw(&c, &r2, H, W, &b);
        same &= memcmp(&a, &b, sizeof a) == 0;
    }
    T_CHECK(same, "draws are a function of the rng state");
}

static void test_targets(void) {
    const int K = 10;
    float row[10];
    vil_mixup_target_row(row, 3, 7, 0.7f, 0.1f, K);
    double s = 0;
    for (int k = 0; k < K; k++) s += row[k];
    T_CLOSE("target row sums to 1", fabs(s - 1.0), 1e-6);
    float off = 0.1f / K, on = 1.0f - 0.1f + off;
    T_CLOSE("target[y] = lam*on + (1-lam)*off", fabs(row[3] - (0.7f * on + 0.3f * off)), 1e-7);
    T_CLOSE("target[y2] = lam*off + (1-lam)*on", fabs(row[7] - (0.7f * off + 0.3f * on)), 1e-7);
    T_CLOSE("other entries = off", fabs(row[0] - off), 1e-9);
    vil_mixup_target_row(row, 4, 4, 0.3f, 0.1f, K);
    T_CLOSE("same label: on", fabs(row[4] - on), 1e-6);
    vil_mixup_target_row(row, 2, 5, 1.0f, 0.0f, K);
    T_CHECK(row[2] == 1.0f && row[5] == 0.0f && row[0] == 0.0f, "lam 1, no smoothing: one-hot");
}

/* Constant images: sample i holds the value i everywhere, so every output pixel says which
 * sample it came from. */
static void test_batch(int n, int ch, int H, int W, int cutmix) {
    const int K = 5;
    VilMixupConfig c;
    vil_mixup_config_default(&c, K);
    c.switch_prob = cutmix ? 1.0f : 0.0f;
    size_t img = (size_t)ch * H * W;
    float *x = malloc((size_t)n * img * sizeof(float));
    float *tg = malloc((size_t)n * K * sizeof(float));
    int *lab = malloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) {
        lab[i] = (i * 3) % K;
        for (size_t k = 0; k < img; k++) x[(size_t)i * img + k] = (float)i;
    }
    VilRng rng;
    vil_rng_seed(&rng, (uint64_t)(n * 100 + cutmix));
    VilMixupParams p;
    vil_mixup_batch(&c, &rng, x, lab, tg, n, ch, H, W, &p);
    char name[96];
    T_CHECK(p.cutmix == cutmix, "mode");
    double worst_sum = 0, worst_frac = 0, worst_val = 0;
    for (int i = 0; i < n; i++) {
        int j = n - 1 - i;
        double s = 0;
        for (int k = 0; k < K; k++) s += tg[(size_t)i * K + k];
        worst_sum = fmax(worst_sum, fabs(s - 1.0));
        const float *xi = x + (size_t)i * img;
        if (cutmix) {
            /* the share of the partner's pixels is exactly 1 - lam (lam corrected) */
            size_t from_j = 0;
            for (size_t k = 0; k < img; k++) from_j += xi[k] == (float)j && i != j;
            if (i != j) worst_frac = fmax(worst_frac, fabs((double)from_j / img - (1.0 - p.lam)));
        } else {
            float want = (float)i * p.lam + (float)j * (1.0f - p.lam);
            for (size_t k = 0; k < img; k++) worst_val = fmax(worst_val, fabs(xi[k] - want));
        }
        /* the target matches lam * y_i + (1 - lam) * y_j */
        float ref[5];
        vil_mixup_target_row(ref, lab[i], lab[j], p.lam, c.smoothing, K);
        for (int k = 0; k < K; k++) worst_val = fmax(worst_val, fabs(tg[(size_t)i * K + k] - ref[k]));
    }
    snprintf(name, sizeof name, "%s n=%d c=%d %dx%d: rows sum to 1", cutmix ? "cutmix" : "mixup",
             n, ch, H, W);
    T_CLOSE(name, worst_sum, 1e-6);
    if (cutmix) {
        snprintf(name, sizeof name, "cutmix n=%d c=%d: pasted share = 1 - lam", n, ch);
        T_CLOSE(name, worst_frac, 1e-7); /* lam is a float */
    }
    snprintf(name, sizeof name, "%s n=%d c=%d: pixels and targets", cutmix ? "cutmix" : "mixup", n, ch);
    T_CLOSE(name, worst_val, 1e-5);
    if (n % 2 == 1) {
        const float *mid = x + (size_t)(n / 2) * img;
        int same = 1;
        for (size_t k = 0; k < img; k++) same &= mid[k] == (float)(n / 2);
        T_CHECK(same, "odd batch: the middle sample mixes with itself (unchanged)");
    }
    free(x);
    free(tg);
    free(lab);
}

int main(void) {
    test_beta();
    test_draw();
    test_targets();
    test_batch(8, 3, 16, 16, 0);
    test_batch(8, 3, 16, 16, 1);
    test_batch(6, 1, 28, 28, 0); /* gray */
    test_batch(6, 1, 28, 28, 1);
    test_batch(7, 3, 9, 13, 1); /* odd batch, odd sizes */
    test_batch(7, 3, 9, 13, 0);
    return t_finish();
}
