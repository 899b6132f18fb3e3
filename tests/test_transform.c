/* test_transform.c: the transforms. Bicubic resize, the evaluation transform and every
 * RandAugment op against PIL/torchvision outputs stored in tests/data
 * (tools/make_test_images.py), pixel-exact; crop/resize/flip of the training transform
 * against a plain double-precision reference; RandomResizedCrop's fallback and statistics;
 * random erasing statistics; determinism; the cropped / DCT-scaled JPEG path against the
 * full decode; and an informational throughput line. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jpeglib.h>

#include "data/image.h"
#include "data/randaugment.h"
#include "data/transform.h"
#include "tests/testing.h"
#include "vil/common.h"

#define DATA "tests/data/"
/* DCT-scaled decoding against the full-resolution path, in levels of 255, measured on the
 * photo-like test image: 1/2 scale 0.7 mean (worst crop 1.2), worst pixel 9; 1/4 scale 1.0
 * mean (worst crop 1.5), worst pixel 14. The bounds leave some headroom. */
#define DCT_TOL_MEAN 2.0
#define DCT_TOL_MAX 24.0

static unsigned char *read_data(const char *name, size_t *n) {
    char path[256];
    snprintf(path, sizeof path, DATA "%s", name);
    unsigned char *b = vil_read_file(path, n);
    T_CHECK(b != NULL, "missing test file %s (run tools/make_test_images.py)", path);
    return b;
}

static int max_abs_diff_u8(const unsigned char *a, const unsigned char *b, size_t n) {
    int m = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        if (d > m) m = d;
    }
    return m;
}

static double max_abs_diff_f(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* NaN propagates */
    }
    return m;
}

/* ---- bicubic resize against PIL ---- */

static void test_resize_pil(void) {
    const int sizes[][2] = {{16, 10}, {50, 31}, {37, 23}, {5, 3}, {20, 40}, {37, 11}, {74, 23}};
    for (int ci = 0; ci < 2; ci++) {
        int c = ci == 0 ? 3 : 1;
        size_t n;
        unsigned char *src = read_data(c == 3 ? "src_37x23_rgb.raw" : "src_37x23_l.raw", &n);
        if (!src) continue;
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            int dw = sizes[i][0], dh = sizes[i][1];
            char fn[64], label[80];
            snprintf(fn, sizeof fn, "rs_%s_%dx%d.raw", c == 3 ? "rgb" : "l", dw, dh);
            size_t nr;
            unsigned char *ref = read_data(fn, &nr);
            if (!ref) continue;
            unsigned char *out = vil_malloc((size_t)dw * dh * c);
            vil_resize_bicubic(out, dw, dh, 0, 0, src, 37, 23, 37 * (size_t)c, c, dw, dh);
            snprintf(label, sizeof label, "resize %s 37x23 -> %dx%d vs PIL", c == 3 ? "RGB" : "L", dw, dh);
            T_CHECK(nr == (size_t)dw * dh * c, "%s: reference size", label);
            T_CLOSE(label, max_abs_diff_u8(out, ref, nr), 0);
            /* any window of the resize equals the same window of the full result */
            int ox = dw / 3, oy = dh / 4, ww = dw - ox - dw / 5, wh = dh - oy - dh / 6;
            if (ww > 0 && wh > 0) {
                unsigned char *win = vil_malloc((size_t)ww * wh * c);
                vil_resize_bicubic(win, ww, wh, ox, oy, src, 37, 23, 37 * (size_t)c, c, dw, dh);
                int md = 0;
                for (int y = 0; y < wh; y++)
                    md |= memcmp(win + (size_t)y * ww * c, ref + ((size_t)(y + oy) * dw + ox) * c, (size_t)ww * c);
                T_CHECK(md == 0, "%s: window %d,%d %dx%d differs from the full resize", label, ox, oy, ww, wh);
                free(win);
            }
            free(out);
            free(ref);
        }
        /* a sub-view with a row stride: the crop (5, 3, 20x15) resized, against resizing a
         * copied-out crop */
        unsigned char *crop = vil_malloc(20 * 15 * (size_t)c), *a = vil_malloc(12 * 9 * (size_t)c),
                      *b = vil_malloc(12 * 9 * (size_t)c);
        for (int y = 0; y < 15; y++) memcpy(crop + (size_t)y * 20 * c, src + ((size_t)(y + 3) * 37 + 5) * c, 20 * (size_t)c);
        vil_resize_bicubic(a, 12, 9, 0, 0, crop, 20, 15, 20 * (size_t)c, c, 12, 9);
        vil_resize_bicubic(b, 12, 9, 0, 0, src + (3 * 37 + 5) * (size_t)c, 20, 15, 37 * (size_t)c, c, 12, 9);
        T_CHECK(memcmp(a, b, 12 * 9 * (size_t)c) == 0, "strided view resize differs from a copied crop (c=%d)", c);
        free(crop);
        free(a);
        free(b);
        free(src);
    }
}

/* ---- evaluation transform against timm/torchvision with PIL ---- */

static void test_eval_pil(void) {
    size_t n;
    char *cases = (char *)read_data("eval_cases.txt", &n);
    if (!cases) return;
    cases = vil_realloc(cases, n + 1);
    cases[n] = 0;
    char *line = cases;
    for (int i = 0; line && *line; i++) {
        int w, h, c, size, rw, rh;
        float crop_pct;
        if (sscanf(line, "%d %d %d %d %f %d %d", &w, &h, &c, &size, &crop_pct, &rw, &rh) != 7) break;
        line = strchr(line, '\n');
        if (line) line++;
        char fn[64], label[96];
        size_t ns, nc, no;
        snprintf(fn, sizeof fn, "ev%d_src.raw", i);
        unsigned char *src = read_data(fn, &ns);
        snprintf(fn, sizeof fn, "ev%d_crop.raw", i);
        unsigned char *crop = read_data(fn, &nc);
        if (!src || !crop) continue;
        /* the resized size rule */
        int nw, nh;
        vil_resize_shorter_size(w, h, vil_eval_scale_size(size, crop_pct), &nw, &nh);
        T_CHECK(nw == rw && nh == rh, "eval %d: resized to %dx%d, torchvision %dx%d", i, nw, nh, rw, rh);
        VilImage im = {w, h, c, src};
        float *out = vil_malloc(sizeof(float) * c * size * size);
        float *want = vil_malloc(sizeof(float) * c * size * size);
        int rc = vil_transform_eval(&im, size, crop_pct, VIL_IMAGENET_MEAN, VIL_IMAGENET_STD, out);
        T_CHECK(rc == 0, "eval %d failed", i);
        /* the crop, normalized with torchvision's float32 steps written out plainly */
        for (int ch = 0; ch < c; ch++)
            for (int p = 0; p < size * size; p++) {
                float x = (float)crop[(size_t)p * c + ch] / 255.0f;
                want[(size_t)ch * size * size + p] = (x - VIL_IMAGENET_MEAN[ch]) / VIL_IMAGENET_STD[ch];
            }
        snprintf(label, sizeof label, "eval %dx%dx%d size %d crop_pct %.3g vs torchvision", w, h, c, size, crop_pct);
        T_CLOSE(label, max_abs_diff_f(out, want, (size_t)c * size * size), 0);
        snprintf(fn, sizeof fn, "ev%d_out.f32", i);
        char path[128];
        snprintf(path, sizeof path, DATA "%s", fn);
        FILE *f = fopen(path, "rb");
        if (f) { /* stored float32 tensors for the first cases: numpy's own float32 math */
            fclose(f);
            float *ref = (float *)read_data(fn, &no);
            if (ref && no == sizeof(float) * c * size * size) {
                snprintf(label, sizeof label, "eval %d float32 tensor vs numpy", i);
                T_CLOSE(label, max_abs_diff_f(out, ref, (size_t)c * size * size), 0);
            }
            free(ref);
        }
        free(out);
        free(want);
        free(src);
        free(crop);
    }
    free(cases);
}

static void test_eval_misc(void) {
    /* scale sizes as timm computes them in double precision */
    T_CHECK(vil_eval_scale_size(224, 0.875f) == 256, "224 / 0.875 -> %d", vil_eval_scale_size(224, 0.875f));
    T_CHECK(vil_eval_scale_size(224, 0.9f) == 248, "224 / 0.9 -> %d", vil_eval_scale_size(224, 0.9f));
    T_CHECK(vil_eval_scale_size(384, 1.0f) == 384, "384 / 1.0");
    T_CHECK(vil_eval_scale_size(224, 0.95f) == 235, "224 / 0.95 -> %d", vil_eval_scale_size(224, 0.95f));
    T_CHECK(vil_eval_scale_size(288, 0.96f) == 300, "288 / 0.96 -> %d", vil_eval_scale_size(288, 0.96f));
    int nw, nh;
    vil_resize_shorter_size(500, 375, 256, &nw, &nh);
    T_CHECK(nw == 341 && nh == 256, "500x375 -> %dx%d", nw, nh);
    vil_resize_shorter_size(375, 500, 256, &nw, &nh);
    T_CHECK(nw == 256 && nh == 341, "375x500 -> %dx%d", nw, nh);

    /* identity: a size x size image with crop_pct 1 is only normalized; constant images stay
     * constant through any resize (the coefficients sum to one in fixed point) */
    const int s = 24;
    VilImage im;
    vil_image_alloc(&im, s, s, 3);
    for (int i = 0; i < s * s * 3; i++) im.px[i] = (unsigned char)(i * 37 + (i >> 3));
    float *out = vil_malloc(sizeof(float) * 3 * s * s), *want = vil_malloc(sizeof(float) * 3 * s * s);
    vil_transform_eval(&im, s, 1.0f, VIL_IMAGENET_MEAN, VIL_IMAGENET_STD, out);
    vil_normalize_chw(want, im.px, s, s, 3, VIL_IMAGENET_MEAN, VIL_IMAGENET_STD);
    T_CLOSE("eval identity (size x size, crop_pct 1)", max_abs_diff_f(out, want, 3 * s * s), 0);
    unsigned char *same = vil_malloc((size_t)s * s * 3);
    vil_resize_bicubic(same, s, s, 0, 0, im.px, s, s, (size_t)s * 3, 3, s, s);
    T_CHECK(memcmp(same, im.px, (size_t)s * s * 3) == 0, "resize to the same size is not the identity");
    free(same);
    memset(im.px, 77, (size_t)s * s * 3);
    unsigned char *big = vil_malloc(61 * 43 * 3);
    vil_resize_bicubic(big, 61, 43, 0, 0, im.px, s, s, (size_t)s * 3, 3, 61, 43);
    int cons = 1;
    for (int i = 0; i < 61 * 43 * 3; i++) cons &= big[i] == 77;
    vil_resize_bicubic(big, 7, 5, 0, 0, im.px, s, s, (size_t)s * 3, 3, 7, 5);
    for (int i = 0; i < 7 * 5 * 3; i++) cons &= big[i] == 77;
    T_CHECK(cons, "a constant image does not stay constant through resize");
    free(big);

    /* normalization: exact values */
    unsigned char px[3] = {0, 128, 255};
    float o[3];
    vil_normalize_chw(o, px, 1, 1, 3, VIL_IMAGENET_MEAN, VIL_IMAGENET_STD);
    T_CLOSE("normalize R=0", fabs(o[0] - (0.0 - 0.485) / 0.229), 1e-6);
    T_CLOSE("normalize G=128", fabs(o[1] - (128 / 255.0 - 0.456) / 0.224), 1e-6);
    T_CLOSE("normalize B=255", fabs(o[2] - (1.0 - 0.406) / 0.225), 1e-6);

    /* center-crop offsets: a 41x25 image whose column index is its red value, no resize
     * (size 25, crop_pct 1 keeps the short side): left = round(16 / 2) = 8 */
    VilImage ramp;
    vil_image_alloc(&ramp, 41, 25, 3);
    for (int y = 0; y < 25; y++)
        for (int x = 0; x < 41; x++) {
            unsigned char *p = ramp.px + ((size_t)y * 41 + x) * 3;
            p[0] = (unsigned char)x;
            p[1] = (unsigned char)y;
            p[2] = 0;
        }
    const float zero_mean[3] = {0, 0, 0}, unit_std[3] = {1, 1, 1};
    float *ro = vil_malloc(sizeof(float) * 3 * 25 * 25);
    vil_transform_eval(&ramp, 25, 1.0f, zero_mean, unit_std, ro);
    T_CHECK(fabsf(ro[0] * 255 - 8) < 1e-3 && fabsf(ro[25 * 25] * 255) < 1e-3,
            "crop of 41 wide to 25: left %g top %g, want 8, 0", ro[0] * 255, ro[25 * 25] * 255);
    /* 42 wide: (42 - 25) / 2 = 8.5 rounds half to even -> 8 */
    VilImage ramp2;
    vil_image_alloc(&ramp2, 42, 25, 3);
    for (int y = 0; y < 25; y++)
        for (int x = 0; x < 42; x++) {
            unsigned char *p = ramp2.px + ((size_t)y * 42 + x) * 3;
            p[0] = (unsigned char)x;
            p[1] = (unsigned char)y;
            p[2] = 0;
        }
    vil_transform_eval(&ramp2, 25, 1.0f, zero_mean, unit_std, ro);
    T_CHECK(fabsf(ro[0] * 255 - 8) < 1e-3, "crop of 42 wide to 25: left %g, want 8 (half to even)", ro[0] * 255);
    /* 1-channel input through eval */
    VilImage g;
    vil_image_alloc(&g, 30, 20, 1);
    memset(g.px, 200, 600);
    float go[16 * 16];
    T_CHECK(vil_transform_eval(&g, 16, 0.875f, VIL_IMAGENET_MEAN, VIL_IMAGENET_STD, go) == 0, "gray eval");
    T_CLOSE("gray eval constant", fabs(go[100] - (200 / 255.0 - 0.485) / 0.229), 1e-6);
    T_CHECK(vil_transform_eval(&g, 0, 0.875f, VIL_IMAGENET_MEAN, VIL_IMAGENET_STD, go) != 0, "size 0 refused");
    vil_image_free(&g);
    vil_image_free(&ramp);
    vil_image_free(&ramp2);
    free(ro);
    vil_image_free(&im);
    free(out);
    free(want);
}


/* ---- a plain reference for PIL's bicubic resize: double arithmetic straight from the
 * definition (a = -0.5 cubic, support scaled by the downscale factor, weights normalized,
 * horizontal pass then vertical, rounding to 8 bits in between). It differs from the fixed
 * point arithmetic by at most one level where a value falls within 2^-22 of a half. ---- */

static double ref_cubic(double x) {
    x = fabs(x);
    if (x < 1) return (1.5 * x - 2.5) * x * x + 1;
    if (x < 2) return ((-0.5 * x + 2.5) * x - 4) * x + 2;
    return 0;
}

static unsigned char ref_round(double v) {
    v = floor(v + 0.5);
    return (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* one separable pass along a line of n samples with step `step` */
static void ref_pass(unsigned char *out, int on, size_t ostep, const unsigned char *in, int n, size_t step) {
    double scale = (double)n / on, fs = scale > 1 ? scale : 1, support = 2 * fs;
    for (int o = 0; o < on; o++) {
        double center = (o + 0.5) * scale, sum = 0, wsum = 0;
        int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > n) hi = n;
        for (int i = lo; i < hi; i++) {
            double w = ref_cubic((i - center + 0.5) / fs);
            sum += w * in[i * step];
            wsum += w;
        }
        out[o * ostep] = ref_round(sum / wsum);
    }
}

static void ref_resize(unsigned char *dst, int dw, int dh, const unsigned char *src, int w, int h, size_t stride, int c) {
    unsigned char *tmp = vil_malloc((size_t)dw * h * c);
    for (int y = 0; y < h; y++)
        for (int ch = 0; ch < c; ch++) {
            if (dw == w) {
                for (int x = 0; x < w; x++) tmp[((size_t)y * dw + x) * c + ch] = src[y * stride + (size_t)x * c + ch];
            } else {
                ref_pass(tmp + (size_t)y * dw * c + ch, dw, c, src + y * stride + ch, w, c);
            }
        }
    for (int x = 0; x < dw; x++)
        for (int ch = 0; ch < c; ch++) {
            if (dh == h) {
                for (int y = 0; y < h; y++) dst[((size_t)y * dw + x) * c + ch] = tmp[((size_t)y * dw + x) * c + ch];
            } else {
                ref_pass(dst + (size_t)x * c + ch, dh, (size_t)dw * c, tmp + (size_t)x * c + ch, h, (size_t)dw * c);
            }
        }
    free(tmp);
}

static unsigned char *noise_image(int w, int h, int c, uint64_t seed) {
    VilRng r;
    vil_rng_seed(&r, seed);
    unsigned char *px = vil_malloc((size_t)w * h * c);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int ch = 0; ch < c; ch++) {
                int v = (x * 255 / w + y * 97 / h + 70 * ch) % 256 + (int)vil_rng_below(&r, 81) - 40;
                px[((size_t)y * w + x) * c + ch] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return px;
}

static void test_resize_reference(void) {
    const int cases[][4] = {{37, 23, 16, 10}, {120, 90, 32, 32}, {31, 45, 64, 64}, {300, 17, 24, 24}, {9, 7, 40, 33}};
    for (int i = 0; i < 5; i++) {
        int w = cases[i][0], h = cases[i][1], dw = cases[i][2], dh = cases[i][3];
        unsigned char *src = noise_image(w, h, 3, 100 + i);
        unsigned char *a = vil_malloc((size_t)dw * dh * 3), *b = vil_malloc((size_t)dw * dh * 3);
        vil_resize_bicubic(a, dw, dh, 0, 0, src, w, h, (size_t)w * 3, 3, dw, dh);
        ref_resize(b, dw, dh, src, w, h, (size_t)w * 3, 3);
        int md = max_abs_diff_u8(a, b, (size_t)dw * dh * 3), neq = 0;
        for (int k = 0; k < dw * dh * 3; k++) neq += a[k] != b[k];
        char label[96];
        snprintf(label, sizeof label, "resize %dx%d -> %dx%d vs double reference (%d of %d off)", w, h, dw, dh, neq, dw * dh * 3);
        T_CLOSE(label, md, 1);
        T_CHECK(neq * 100 <= dw * dh * 3, "%s: more than 1%% of values differ", label);
        free(src);
        free(a);
        free(b);
    }
}

/* ---- RandomResizedCrop ---- */

static void test_rrc(void) {
    VilRng r;
    vil_rng_seed(&r, 5);
    int l, t, cw, ch;
    /* fallback: an impossible scale range makes every attempt fail */
    vil_rrc_params(300, 100, 2.0f, 3.0f, 0.75f, 4.0f / 3.0f, &r, &l, &t, &cw, &ch);
    T_CHECK(l == 83 && t == 0 && cw == 133 && ch == 100, "wide fallback: %d,%d %dx%d, want 83,0 133x100", l, t, cw, ch);
    vil_rrc_params(100, 300, 2.0f, 3.0f, 0.75f, 4.0f / 3.0f, &r, &l, &t, &cw, &ch);
    T_CHECK(l == 0 && t == 83 && cw == 100 && ch == 133, "tall fallback: %d,%d %dx%d, want 0,83 100x133", l, t, cw, ch);
    vil_rrc_params(120, 100, 2.0f, 3.0f, 0.75f, 4.0f / 3.0f, &r, &l, &t, &cw, &ch);
    T_CHECK(l == 0 && t == 0 && cw == 120 && ch == 100, "in-range fallback: whole image, got %d,%d %dx%d", l, t, cw, ch);
    /* statistics of the ordinary path */
    int inside = 1, ratio_ok = 1, n = 20000;
    double area_sum = 0, lr_sum = 0;
    for (int i = 0; i < n; i++) {
        vil_rrc_params(500, 375, 0.08f, 1.0f, 0.75f, 4.0f / 3.0f, &r, &l, &t, &cw, &ch);
        inside &= l >= 0 && t >= 0 && cw > 0 && ch > 0 && l + cw <= 500 && t + ch <= 375;
        double ar = (double)cw / ch;
        ratio_ok &= ar > 0.75 * 0.95 && ar < 4.0 / 3.0 * 1.05; /* rounding to whole pixels */
        area_sum += (double)cw * ch / (500.0 * 375.0);
        lr_sum += log(ar);
    }
    T_CHECK(inside, "a crop fell outside the image");
    T_CHECK(ratio_ok, "a crop's aspect ratio is outside [3/4, 4/3]");
    /* the accepted area is uniform on [0.08, 1] truncated by the image; its mean is about 0.5 */
    printf("info RRC on 500x375: mean area fraction %.3f, mean log aspect %.3f\n", area_sum / n, lr_sum / n);
    T_CHECK(area_sum / n > 0.40 && area_sum / n < 0.56, "RRC mean area fraction %.3f", area_sum / n);
    T_CHECK(fabs(lr_sum / n) < 0.05, "RRC mean log aspect %.3f", lr_sum / n);
}

/* ---- the training transform's crop + resize + flip, against the references ---- */

static void test_train_geometry(void) {
    const int W = 123, H = 97, res = 48;
    unsigned char *src = noise_image(W, H, 3, 77);
    VilImage im = {W, H, 3, src};
    VilTrainTransform t;
    vil_train_transform_default(&t, res, 3);
    t.randaug_n = 0;
    t.reprob = 0;
    float *out = vil_malloc(sizeof(float) * 3 * res * res), *want = vil_malloc(sizeof(float) * 3 * res * res);
    unsigned char *crop = vil_malloc((size_t)W * H * 3), *rs = vil_malloc((size_t)res * res * 3),
                  *ref = vil_malloc((size_t)res * res * 3), *fl = vil_malloc((size_t)res * res * 3);
    int exact_all = 1, worst_ref = 0;
    for (int k = 0; k < 40; k++) {
        t.hflip = k % 2 ? 1.0f : 0.0f; /* always / never, so the expected flip is known */
        VilRng r, r2;
        vil_rng_seed(&r, 1000 + k);
        r2 = r;
        int l, tp, cw, ch;
        vil_rrc_params(W, H, t.scale_min, t.scale_max, t.ratio_min, t.ratio_max, &r2, &l, &tp, &cw, &ch);
        T_CHECK(vil_transform_train(&im, &t, &r, out) == 0, "train transform failed");
        for (int y = 0; y < ch; y++) memcpy(crop + (size_t)y * cw * 3, src + ((size_t)(y + tp) * W + l) * 3, (size_t)cw * 3);
        vil_resize_bicubic(rs, res, res, 0, 0, crop, cw, ch, (size_t)cw * 3, 3, res, res);
        ref_resize(ref, res, res, crop, cw, ch, (size_t)cw * 3, 3);
        int md = max_abs_diff_u8(rs, ref, (size_t)res * res * 3);
        if (md > worst_ref) worst_ref = md;
        for (int y = 0; y < res; y++)
            for (int x = 0; x < res; x++) {
                int sx = k % 2 ? res - 1 - x : x;
                memcpy(fl + ((size_t)y * res + x) * 3, rs + ((size_t)y * res + sx) * 3, 3);
            }
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < res * res; p++)
                want[c * res * res + p] = ((float)fl[p * 3 + c] / 255.0f - t.mean[c]) / t.std[c];
        exact_all &= memcmp(out, want, sizeof(float) * 3 * res * res) == 0;
    }
    T_CHECK(exact_all, "train transform (no RandAugment, no erasing) differs from crop + PIL resize + flip + normalize");
    T_CLOSE("train crops: PIL resize vs double reference (levels)", worst_ref, 1);
    /* the crop also matches when the same image arrives as 1 channel and is replicated */
    free(src);
    free(out);
    free(want);
    free(crop);
    free(rs);
    free(ref);
    free(fl);
}

/* ---- RandAugment ops against PIL ---- */

static void run_ra_case(VilImage *im, unsigned char *scratch, const char *name, double p) {
    /* timm's fill for ImageNet, (124, 116, 104); the gray reference used 124 */
    const unsigned char f3[3] = {124, 116, 104};
    if (!strcmp(name, "autocontrast")) vil_ra_autocontrast(im);
    else if (!strcmp(name, "equalize")) vil_ra_equalize(im);
    else if (!strcmp(name, "invert")) vil_ra_invert(im);
    else if (!strcmp(name, "posterize")) vil_ra_posterize(im, (int)p);
    else if (!strcmp(name, "solarize")) vil_ra_solarize(im, (int)p);
    else if (!strcmp(name, "solarize_add")) vil_ra_solarize_add(im, (int)p, 128);
    else if (!strcmp(name, "color")) vil_ra_color(im, scratch, p);
    else if (!strcmp(name, "contrast")) vil_ra_contrast(im, p);
    else if (!strcmp(name, "brightness")) vil_ra_brightness(im, p);
    else if (!strcmp(name, "sharpness")) vil_ra_sharpness(im, scratch, p);
    else if (!strncmp(name, "shear_x", 7) || !strncmp(name, "shear_y", 7) || !strncmp(name, "translate", 9)) {
        int interp = strstr(name, "bicubic") ? VIL_INTERP_BICUBIC : VIL_INTERP_BILINEAR;
        double m[6] = {1, 0, 0, 0, 1, 0};
        if (!strncmp(name, "shear_x", 7)) m[1] = p;
        else if (!strncmp(name, "shear_y", 7)) m[3] = p;
        else if (!strncmp(name, "translate_x", 11)) m[2] = p * im->w;
        else m[5] = p * im->h;
        vil_ra_affine(scratch, im, m, interp, f3);
        memcpy(im->px, scratch, (size_t)im->w * im->h * im->c);
    } else if (!strncmp(name, "rotate", 6)) {
        vil_ra_rotate(im, scratch, p, strstr(name, "bicubic") ? VIL_INTERP_BICUBIC : VIL_INTERP_BILINEAR, f3);
    } else {
        T_CHECK(0, "unknown RandAugment case %s", name);
    }
}

static void test_randaugment_pil(void) {
    size_t n;
    char *cases = (char *)read_data("ra_cases.txt", &n);
    if (!cases) return;
    cases = vil_realloc(cases, n + 1);
    cases[n] = 0;
    size_t nrgb, nl;
    unsigned char *src_rgb = read_data("ra_src_rgb.raw", &nrgb), *src_l = read_data("ra_src_l.raw", &nl);
    if (!src_rgb || !src_l) return;
    const int w = 20, h = 16;
    unsigned char *work = vil_malloc((size_t)w * h * 3), *scratch = vil_malloc((size_t)w * h * 3);
    char *line = cases;
    for (int i = 0; line && *line; i++) {
        char name[64];
        double p;
        if (sscanf(line, "%63s %lf", name, &p) != 2) break;
        line = strchr(line, '\n');
        if (line) line++;
        for (int c = 3; c >= 1; c -= 2) {
            char fn[64], label[160];
            snprintf(fn, sizeof fn, "ra_%d_%s.raw", i, c == 3 ? "rgb" : "l");
            size_t nr;
            unsigned char *ref = read_data(fn, &nr);
            if (!ref) continue;
            memcpy(work, c == 3 ? src_rgb : src_l, (size_t)w * h * c);
            VilImage im = {w, h, c, work};
            run_ra_case(&im, scratch, name, p);
            snprintf(label, sizeof label, "RandAugment %s(%g) %s vs PIL", name, p, c == 3 ? "RGB" : "L");
            T_CLOSE(label, nr == (size_t)w * h * c ? max_abs_diff_u8(work, ref, nr) : 999, 0);
            free(ref);
        }
    }
    free(work);
    free(scratch);
    free(src_rgb);
    free(src_l);
    free(cases);
}

static void test_randaugment_props(void) {
    const int w = 24, h = 24;
    unsigned char *src = noise_image(w, h, 3, 9), *work = vil_malloc(w * h * 3), *scratch = vil_malloc(w * h * 3);
    VilImage im = {w, h, 3, work};
    const unsigned char fill[3] = {124, 116, 104};
#define RESET() memcpy(work, src, (size_t)w * h * 3)
#define SAME(what) T_CHECK(memcmp(work, src, (size_t)w * h * 3) == 0, "%s is not the identity", what)
    RESET(); vil_ra_rotate(&im, scratch, 0.0, VIL_INTERP_BICUBIC, fill); SAME("Rotate 0");
    RESET(); vil_ra_rotate(&im, scratch, 360.0, VIL_INTERP_BILINEAR, fill); SAME("Rotate 360");
    RESET(); vil_ra_rotate(&im, scratch, 180.0, VIL_INTERP_BICUBIC, fill);
    vil_ra_rotate(&im, scratch, -180.0, VIL_INTERP_BICUBIC, fill); SAME("Rotate 180 twice");
    RESET(); vil_ra_rotate(&im, scratch, 90.0, VIL_INTERP_BICUBIC, fill);
    vil_ra_rotate(&im, scratch, 270.0, VIL_INTERP_BICUBIC, fill); SAME("Rotate 90 then 270");
    for (int interp = VIL_INTERP_BILINEAR; interp <= VIL_INTERP_BICUBIC; interp++) {
        double m[6] = {1, 0, 0, 0, 1, 0};
        RESET(); vil_ra_affine(scratch, &im, m, interp, fill); memcpy(work, scratch, (size_t)w * h * 3);
        SAME(interp == VIL_INTERP_BICUBIC ? "identity affine (bicubic)" : "identity affine (bilinear)");
        /* a whole-pixel translation moves pixels exactly and fills the rest */
        double t3[6] = {1, 0, 3, 0, 1, 0};
        RESET(); vil_ra_affine(scratch, &im, t3, interp, fill);
        int ok = 1;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                for (int c = 0; c < 3; c++)
                    ok &= scratch[(y * w + x) * 3 + c] == (x + 3 < w ? src[(y * w + x + 3) * 3 + c] : fill[c]);
        T_CHECK(ok, "translate by 3 pixels (%s) is not an exact shift with fill", interp == VIL_INTERP_BICUBIC ? "bicubic" : "bilinear");
    }
    RESET(); vil_ra_invert(&im); vil_ra_invert(&im); SAME("Invert twice");
    RESET(); vil_ra_invert(&im);
    T_CHECK(work[0] == 255 - src[0] && work[100] == 255 - src[100], "Invert values");
    RESET(); vil_ra_posterize(&im, 8); SAME("Posterize 8 bits");
    RESET(); vil_ra_posterize(&im, 4);
    T_CHECK(work[5] == (src[5] & 0xF0) && work[77] == (src[77] & 0xF0), "Posterize 4 bits keeps the high nibble");
    RESET(); vil_ra_posterize(&im, 0);
    int zero = 1;
    for (int i = 0; i < w * h * 3; i++) zero &= work[i] == 0;
    T_CHECK(zero, "Posterize 0 bits is black");
    RESET(); vil_ra_solarize(&im, 256); SAME("Solarize 256");
    RESET(); vil_ra_solarize(&im, 0);
    T_CHECK(work[3] == 255 - src[3], "Solarize 0 inverts");
    RESET(); vil_ra_solarize(&im, 128);
    T_CHECK(work[7] == (src[7] < 128 ? src[7] : 255 - src[7]), "Solarize 128 value");
    RESET(); vil_ra_solarize_add(&im, 0, 128); SAME("SolarizeAdd 0");
    RESET(); vil_ra_brightness(&im, 1.0); SAME("Brightness 1");
    RESET(); vil_ra_contrast(&im, 1.0); SAME("Contrast 1");
    RESET(); vil_ra_color(&im, scratch, 1.0); SAME("Color 1");
    RESET(); vil_ra_sharpness(&im, scratch, 1.0); SAME("Sharpness 1");
    RESET(); vil_ra_brightness(&im, 0.0);
    T_CHECK(work[0] == 0 && work[w * h * 3 - 1] == 0, "Brightness 0 is black");
    /* RandAugment as a whole: determinism, n = 0, and every op reachable */
    VilRandAugment ra;
    vil_randaugment_default(&ra, VIL_IMAGENET_MEAN);
    T_CHECK(ra.fill[0] == 124 && ra.fill[1] == 116 && ra.fill[2] == 104, "fill (%d,%d,%d), want timm's (124,116,104)",
            ra.fill[0], ra.fill[1], ra.fill[2]);
    unsigned char *a = vil_malloc(w * h * 3);
    int same = 1, changed = 0;
    for (int s = 0; s < 50; s++) {
        VilRng r1, r2;
        vil_rng_seed(&r1, s);
        r2 = r1;
        RESET(); vil_randaugment_apply(&im, scratch, &ra, &r1);
        memcpy(a, work, (size_t)w * h * 3);
        RESET(); vil_randaugment_apply(&im, scratch, &ra, &r2);
        same &= memcmp(a, work, (size_t)w * h * 3) == 0 && memcmp(&r1, &r2, sizeof r1) == 0;
        changed += memcmp(a, src, (size_t)w * h * 3) != 0;
    }
    T_CHECK(same, "RandAugment is not a pure function of the rng state");
    /* each op fires with p = 0.5, two ops: about 3/4 of images change (fewer: some ops can be no-ops) */
    T_CHECK(changed > 25 && changed < 50, "RandAugment changed %d of 50 images", changed);
    ra.n = 0;
    VilRng r;
    vil_rng_seed(&r, 3);
    VilRng r0 = r;
    RESET(); vil_randaugment_apply(&im, scratch, &ra, &r);
    SAME("RandAugment n=0");
    T_CHECK(memcmp(&r, &r0, sizeof r) == 0, "RandAugment n=0 consumed random numbers");
    /* timm's level -> argument mappings at magnitude 9 (inc variants), through
     * vil_randaugment_op, against the ops called with the arguments worked out by hand */
    {
        vil_randaugment_default(&ra, VIL_IMAGENET_MEAN);
        unsigned char *b = vil_malloc(w * h * 3);
        VilImage bi = {w, h, 3, b};
        struct { VilRaOp op; int sign; const char *what; } m9[] = {
            {VIL_RA_POSTERIZE, 1, "PosterizeIncreasing m9 = posterize(4 - int(0.9 * 4) = 1)"},
            {VIL_RA_SOLARIZE, 1, "SolarizeIncreasing m9 = solarize(256 - int(0.9 * 256) = 26)"},
            {VIL_RA_SOLARIZE_ADD, 1, "SolarizeAdd m9 = solarize_add(int(0.9 * 110) = 99, 128)"},
            {VIL_RA_ROTATE, -1, "Rotate m9 negated = rotate(-27 degrees)"},
            {VIL_RA_BRIGHTNESS, -1, "BrightnessIncreasing m9 negated = brightness(1 - 0.81)"},
            {VIL_RA_CONTRAST, 1, "ContrastIncreasing m9 = contrast(1 + 0.81)"},
            {VIL_RA_SHEAR_X, 1, "ShearX m9 = affine(1, 0.27, 0, 0, 1, 0)"},
            {VIL_RA_TRANSLATE_Y_REL, -1, "TranslateYRel m9 negated = affine(..., -0.405 * h)"},
        };
        for (size_t i = 0; i < sizeof m9 / sizeof m9[0]; i++) {
            RESET();
            vil_randaugment_op(&im, scratch, &ra, m9[i].op, 9.0, m9[i].sign, VIL_INTERP_BICUBIC);
            memcpy(b, src, (size_t)w * h * 3);
            switch (m9[i].op) {
            case VIL_RA_POSTERIZE: vil_ra_posterize(&bi, 1); break;
            case VIL_RA_SOLARIZE: vil_ra_solarize(&bi, 26); break;
            case VIL_RA_SOLARIZE_ADD: vil_ra_solarize_add(&bi, 99, 128); break;
            case VIL_RA_ROTATE: vil_ra_rotate(&bi, scratch, -(9.0 / 10.0 * 30.0), VIL_INTERP_BICUBIC, fill); break;
            case VIL_RA_BRIGHTNESS: vil_ra_brightness(&bi, 1.0 + -(9.0 / 10.0 * 0.9)); break;
            case VIL_RA_CONTRAST: vil_ra_contrast(&bi, 1.0 + 9.0 / 10.0 * 0.9); break;
            case VIL_RA_SHEAR_X: {
                double m[6] = {1, 9.0 / 10.0 * 0.3, 0, 0, 1, 0};
                vil_ra_affine(scratch, &bi, m, VIL_INTERP_BICUBIC, fill);
                memcpy(b, scratch, (size_t)w * h * 3);
                break;
            }
            case VIL_RA_TRANSLATE_Y_REL: {
                double m[6] = {1, 0, 0, 0, 1, -(9.0 / 10.0 * 0.45) * h};
                vil_ra_affine(scratch, &bi, m, VIL_INTERP_BICUBIC, fill);
                memcpy(b, scratch, (size_t)w * h * 3);
                break;
            }
            default: break;
            }
            T_CHECK(memcmp(work, b, (size_t)w * h * 3) == 0, "%s", m9[i].what);
        }
        free(b);
    }
    /* every op on a gray image: runs, and geometric ones fill with the gray fill */
    unsigned char *g = vil_malloc(w * h);
    vil_rgb_to_gray(g, src, (size_t)w * h);
    VilImage gi = {w, h, 1, g};
    vil_randaugment_default(&ra, VIL_IMAGENET_MEAN);
    for (int op = 0; op < VIL_RA_NUM_OPS; op++) vil_randaugment_op(&gi, scratch, &ra, (VilRaOp)op, 9.0, op % 2 ? -1 : 1, VIL_INTERP_BICUBIC);
    T_CHECK(1, "all ops on gray");
    free(g);
    free(a);
    free(src);
    free(work);
    free(scratch);
#undef RESET
#undef SAME
}

/* ---- random erasing ---- */

static void test_erasing(void) {
    const int c = 3, h = 32, w = 40, n = 4000;
    float *x = vil_malloc(sizeof(float) * c * h * w);
    VilRng r;
    vil_rng_seed(&r, 11);
    int erased = 0, bad_area = 0;
    double s1 = 0, s2 = 0, cnt = 0, area_sum = 0;
    for (int k = 0; k < n; k++) {
        for (int i = 0; i < c * h * w; i++) x[i] = 1000.0f;
        vil_random_erase(x, c, h, w, 0.25f, &r);
        int e = 0;
        for (int i = 0; i < c * h * w; i++)
            if (x[i] != 1000.0f) {
                e++;
                s1 += x[i];
                s2 += (double)x[i] * x[i];
                cnt++;
            }
        if (e) {
            erased++;
            double frac = (double)e / c / (h * w);
            area_sum += frac;
            /* timm draws 2%..1/3 of the area; rounding the sides to pixels moves it a little */
            if (frac < 0.02 * 0.5 || frac > 1.0 / 3.0 * 1.4) bad_area++;
        }
    }
    double pe = (double)erased / n, mean = s1 / cnt, var = s2 / cnt - mean * mean;
    printf("info erasing: p %.3f, mean area %.3f, values mean %.4f var %.4f\n", pe, area_sum / erased, mean, var);
    T_CLOSE("erasing probability vs 0.25", fabs(pe - 0.25), 0.025);
    T_CLOSE("erasing mean area fraction vs ~0.17", fabs(area_sum / erased - (0.02 + 1.0 / 3.0) / 2), 0.03);
    T_CHECK(bad_area == 0, "%d erased boxes outside the area range", bad_area);
    T_CLOSE("erased values mean vs 0", fabs(mean), 0.01);
    T_CLOSE("erased values variance vs 1", fabs(var - 1), 0.02);
    free(x);
}

/* ---- decode + transform from file bytes ---- */

/* samp: luma sampling factors hv as 22 (4:2:0), 21 (4:2:2), 12 (4:4:0), 11 (4:4:4) */
static unsigned char *jpeg_of_samp(const unsigned char *px, int w, int h, int c, int quality, int progressive,
                                   int samp, unsigned long *size) {
    struct jpeg_compress_struct cj;
    struct jpeg_error_mgr jerr;
    unsigned char *out = NULL;
    *size = 0;
    cj.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&cj);
    jpeg_mem_dest(&cj, &out, size);
    cj.image_width = (JDIMENSION)w;
    cj.image_height = (JDIMENSION)h;
    cj.input_components = c;
    cj.in_color_space = c == 3 ? JCS_RGB : JCS_GRAYSCALE;
    jpeg_set_defaults(&cj);
    jpeg_set_quality(&cj, quality, TRUE);
    if (c == 3) {
        cj.comp_info[0].h_samp_factor = samp / 10;
        cj.comp_info[0].v_samp_factor = samp % 10;
    }
    if (progressive) jpeg_simple_progression(&cj);
    jpeg_start_compress(&cj, TRUE);
    while (cj.next_scanline < cj.image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)cj.next_scanline * w * c);
        jpeg_write_scanlines(&cj, &row, 1);
    }
    jpeg_finish_compress(&cj);
    jpeg_destroy_compress(&cj);
    return out;
}

static unsigned char *jpeg_of(const unsigned char *px, int w, int h, int c, int quality, int progressive, unsigned long *size) {
    return jpeg_of_samp(px, w, h, c, quality, progressive, 22, size);
}

/* Region decodes of one file against its full decode, at random regions. */
static int region_matches(const unsigned char *buf, unsigned long bn, int channels, VilRng *r, int tries) {
    VilImage full;
    if (vil_image_decode(buf, bn, channels, &full) != 0) return 0;
    int ok = 1, W = full.w, H = full.h, c = channels;
    for (int k = 0; k < tries && ok; k++) {
        int cw = 1 + (int)vil_rng_below(r, W), ch = 1 + (int)vil_rng_below(r, H);
        int x0 = (int)vil_rng_below(r, (uint32_t)(W - cw + 1)), y0 = (int)vil_rng_below(r, (uint32_t)(H - ch + 1));
        VilImage reg;
        int rx, ry;
        if (vil_jpeg_decode_region(buf, bn, c, x0, y0, cw, ch, 1, &reg, &rx, &ry) != 0) {
            ok = 0;
            break;
        }
        for (int y = 0; y < ch && ok; y++)
            ok &= rx <= x0 && ry <= y0 && x0 + cw - rx <= reg.w && y0 + ch - ry <= reg.h &&
                  memcmp(reg.px + ((size_t)(y + y0 - ry) * reg.w + (x0 - rx)) * c,
                         full.px + ((size_t)(y + y0) * W + x0) * c, (size_t)cw * c) == 0;
        vil_image_free(&reg);
    }
    vil_image_free(&full);
    return ok;
}

/* Region decodes at scale m/8 with `flags` against the same settings' whole-image decode, at
 * random regions: the region's scaled pixels must be bit-identical (the fast mode decodes no
 * margin columns). */
static int region_matches_scaled(const unsigned char *buf, unsigned long bn, int channels, int m, int flags,
                                 VilRng *r, int tries) {
    VilImage full;
    int W, H, fx, fy;
    if (vil_image_info(buf, bn, &W, &H, NULL) != 0) return 0;
    if (vil_jpeg_decode_region_scaled(buf, bn, channels, 0, 0, W, H, m, flags, &full, &fx, &fy) != 0)
        return 0;
    int ok = fx == 0 && fy == 0 && full.w == (W * m + 7) / 8 && full.h == (H * m + 7) / 8, c = channels;
    for (int k = 0; k < tries && ok; k++) {
        int cw = 1 + (int)vil_rng_below(r, W), ch = 1 + (int)vil_rng_below(r, H);
        int x0 = (int)vil_rng_below(r, (uint32_t)(W - cw + 1)), y0 = (int)vil_rng_below(r, (uint32_t)(H - ch + 1));
        VilImage reg;
        int rx, ry;
        if (vil_jpeg_decode_region_scaled(buf, bn, c, x0, y0, cw, ch, m, flags, &reg, &rx, &ry) != 0) {
            ok = 0;
            break;
        }
        /* the scaled pixels touching the region */
        int sx0 = x0 * m / 8, sy0 = y0 * m / 8, sx1 = ((x0 + cw) * m + 7) / 8, sy1 = ((y0 + ch) * m + 7) / 8;
        if (sx1 > full.w) sx1 = full.w;
        if (sy1 > full.h) sy1 = full.h;
        ok &= rx <= sx0 && ry <= sy0 && sx1 - rx <= reg.w && sy1 - ry <= reg.h;
        for (int y = sy0; y < sy1 && ok; y++)
            ok &= memcmp(reg.px + ((size_t)(y - ry) * reg.w + (sx0 - rx)) * c,
                         full.px + ((size_t)y * full.w + sx0) * c, (size_t)(sx1 - sx0) * c) == 0;
        vil_image_free(&reg);
    }
    vil_image_free(&full);
    return ok;
}

/* A photo-like 500x375 image: smooth waves, edges and mild noise. */
static unsigned char *photo_like(int w, int h) {
    unsigned char *px = vil_malloc((size_t)w * h * 3);
    VilRng r;
    vil_rng_seed(&r, 21);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                double v = 128 + 60 * sin(x * 0.05 * (c + 1) + y * 0.03) + 40 * cos(y * 0.07 * (c + 1)) +
                           ((x / 40 + y / 30) % 2 ? 20 : -20) + (int)vil_rng_below(&r, 21) - 10;
                px[((size_t)y * w + x) * 3 + c] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return px;
}

static void test_file_path(void) {
    const int W = 500, H = 375;
    unsigned char *px = photo_like(W, H);
    unsigned long n, np;
    unsigned char *j = jpeg_of(px, W, H, 3, 90, 0, &n), *jp = jpeg_of(px, W, H, 3, 90, 1, &np);
    VilImage full;
    T_CHECK(vil_image_decode(j, n, 3, &full) == 0, "decode");
    /* region decode is bit-identical to the same pixels of the full decode: baseline and
     * progressive 4:2:0, 4:2:2, 4:4:0, 4:4:4, gray, and PIL's CMYK file (Adobe-inverted) */
    VilRng r;
    vil_rng_seed(&r, 4);
    T_CHECK(region_matches(j, n, 3, &r, 40), "cropped decode of baseline 4:2:0 differs from the full decode");
    T_CHECK(region_matches(jp, np, 3, &r, 40), "cropped decode of progressive 4:2:0 differs from the full decode");
    T_CHECK(region_matches(j, n, 1, &r, 20), "cropped decode of 4:2:0 to gray differs from the full decode");
    const int samps[3] = {21, 12, 11};
    for (int i = 0; i < 3; i++) {
        unsigned long sn;
        unsigned char *sj = jpeg_of_samp(px, W, H, 3, 85, i == 1, samps[i], &sn);
        T_CHECK(region_matches(sj, sn, 3, &r, 30), "cropped decode of sampling %d differs from the full decode", samps[i]);
        free(sj);
    }
    size_t cn;
    unsigned char *cj = read_data("pil_cmyk.jpg", &cn), *gj0 = NULL;
    if (cj) T_CHECK(region_matches(cj, cn, 3, &r, 30), "cropped decode of a CMYK JPEG differs from the full decode");
    gj0 = read_data("pil_gray.jpg", &cn);
    if (gj0) T_CHECK(region_matches(gj0, cn, 3, &r, 30), "cropped decode of a gray JPEG differs from the full decode");
    free(cj);
    free(gj0);

    /* the train transform from bytes against decode + train transform, same rng; output
     * sizes 40 and 160, so that full-scale and 2x, 4x DCT-scaled crops all occur */
    VilTrainTransform t;
    float *a = vil_malloc(sizeof(float) * 3 * 160 * 160), *b = vil_malloc(sizeof(float) * 3 * 160 * 160);
    int exact1 = 1, n_d[9] = {0};
    double worst_mean[9] = {0}, worst_max[9] = {0}, sum_mean[9] = {0};
    for (int k = 0; k < 400; k++) {
        int res = k % 2 ? 40 : 160;
        vil_train_transform_default(&t, res, 3);
        t.randaug_n = k % 4 < 2 ? 2 : 0; /* half with RandAugment and erasing on */
        t.reprob = k % 4 < 2 ? 0.25f : 0.0f;
        VilRng r1, r2, r3;
        vil_rng_seed(&r1, 5000 + k);
        r2 = r3 = r1;
        int l, tp, cw, ch;
        vil_rrc_params(W, H, t.scale_min, t.scale_max, t.ratio_min, t.ratio_max, &r3, &l, &tp, &cw, &ch);
        int d = vil_jpeg_dct_denom(cw, ch, res);
        T_CHECK(vil_transform_train_file(j, n, &t, &r1, a) == 0, "train_file");
        T_CHECK(vil_transform_train(&full, &t, &r2, b) == 0, "train");
        T_CHECK(memcmp(&r1, &r2, sizeof r1) == 0, "train_file and train consumed different random numbers");
        if (d == 1) {
            exact1 &= memcmp(a, b, sizeof(float) * 3 * res * res) == 0;
        } else if (t.randaug_n == 0) {
            double sm = 0, m = 0;
            for (int c = 0; c < 3; c++)
                for (int i = 0; i < res * res; i++) {
                    double dv = fabs((double)a[c * res * res + i] - b[c * res * res + i]) * t.std[c] * 255.0;
                    sm += dv;
                    if (dv > m) m = dv;
                }
            sm /= 3 * res * res;
            sum_mean[d] += sm;
            if (sm > worst_mean[d]) worst_mean[d] = sm;
            if (m > worst_max[d]) worst_max[d] = m;
        }
        n_d[d]++;
    }
    printf("info train_file crops: %d full-scale, %d at 1/2, %d at 1/4\n", n_d[1], n_d[2], n_d[4]);
    T_CHECK(exact1, "train_file without DCT scaling is not bit-identical to decode + train");
    T_CHECK(n_d[1] > 0 && n_d[2] > 0 && n_d[4] > 0 && n_d[8] == 0, "the test did not reach every DCT scale");
    /* DCT scaling replaces part of the bicubic antialiasing by the decoder's own block
     * scaling; see DCT_TOL_* for the bounds, in levels of 255 */
    for (int d = 2; d <= 4; d *= 2) {
        char label[96];
        printf("info train_file 1/%d DCT scale: mean |diff| %.2f levels on average, worst crop %.2f, worst pixel %.1f\n",
               d, sum_mean[d] / (n_d[d] / 2.0), worst_mean[d], worst_max[d]);
        snprintf(label, sizeof label, "train_file 1/%d DCT scale: worst crop's mean |diff| (levels)", d);
        T_CLOSE(label, worst_mean[d], DCT_TOL_MEAN);
        snprintf(label, sizeof label, "train_file 1/%d DCT scale: worst pixel |diff| (levels)", d);
        T_CLOSE(label, worst_max[d], DCT_TOL_MAX);
    }
    vil_train_transform_default(&t, 40, 3);
    /* determinism from bytes, and eval from bytes */
    VilRng s1, s2;
    vil_rng_seed(&s1, 99);
    s2 = s1;
    t.randaug_n = 2;
    t.reprob = 0.25f;
    vil_transform_train_file(jp, np, &t, &s1, a);
    vil_transform_train_file(jp, np, &t, &s2, b);
    T_CHECK(memcmp(a, b, sizeof(float) * 3 * 40 * 40) == 0, "train_file is not deterministic");
    float *e1 = vil_malloc(sizeof(float) * 3 * 64 * 64), *e2 = vil_malloc(sizeof(float) * 3 * 64 * 64);
    T_CHECK(vil_transform_eval_file(j, n, 64, 0.875f, 3, VIL_IMAGENET_MEAN, VIL_IMAGENET_STD, e1) == 0,
            "eval_file");
    vil_transform_eval(&full, 64, 0.875f, VIL_IMAGENET_MEAN, VIL_IMAGENET_STD, e2);
    T_CHECK(memcmp(e1, e2, sizeof(float) * 3 * 64 * 64) == 0, "eval_file differs from decode + eval");
    /* refusals, captured: they are expected */
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_transform_train_file(j, n / 2, &t, &s1, a);
    vil_error_release(&cap);
    T_CHECK(rc != 0 && cap.count > 0, "truncated file accepted by train_file");
    vil_error_capture(&cap);
    rc = vil_transform_train_file((const unsigned char *)"garbage", 7, &t, &s1, a);
    vil_error_release(&cap);
    T_CHECK(rc != 0 && cap.count > 0, "garbage accepted by train_file");

    /* gray: a Fashion-MNIST-sized image through the 1-channel training transform, and a
     * gray JPEG to 3 channels */
    unsigned char g28[28 * 28];
    for (int i = 0; i < 28 * 28; i++) g28[i] = (unsigned char)((i * 7) % 256);
    VilImage gi = {28, 28, 1, g28};
    VilTrainTransform tg;
    vil_train_transform_default(&tg, 28, 1);
    float go[28 * 28];
    int finite = 1;
    for (int k = 0; k < 50; k++) {
        VilRng gr;
        vil_rng_seed(&gr, k);
        T_CHECK(vil_transform_train(&gi, &tg, &gr, go) == 0, "gray train");
        for (int i = 0; i < 28 * 28; i++) finite &= isfinite(go[i]);
    }
    T_CHECK(finite, "gray training output not finite");
    unsigned char *gray = vil_malloc((size_t)W * H);
    vil_rgb_to_gray(gray, px, (size_t)W * H);
    unsigned long gn;
    unsigned char *gj = jpeg_of(gray, W, H, 1, 90, 0, &gn);
    VilRng gr;
    vil_rng_seed(&gr, 3);
    T_CHECK(vil_transform_train_file(gj, gn, &t, &gr, a) == 0, "gray JPEG -> 3 channels");

    /* throughput, single thread, informational: decode + RRC + flip (+ RandAugment) to 224 */
    VilTrainTransform tb;
    vil_train_transform_default(&tb, 224, 3);
    float *ob = vil_malloc(sizeof(float) * 3 * 224 * 224);
    for (int mode = 0; mode < 2; mode++) {
        tb.randaug_n = mode == 1 ? 2 : 0;
        tb.reprob = mode == 1 ? 0.25f : 0.0f;
        VilRng br;
        vil_rng_seed(&br, 1);
        int iters = 150;
        double t0 = (double)clock() / CLOCKS_PER_SEC; /* CPU time: the machine may be shared */
        for (int k = 0; k < iters; k++) vil_transform_train_file(j, n, &tb, &br, ob);
        double dt = (double)clock() / CLOCKS_PER_SEC - t0;
        printf("info throughput 500x375 q90 4:2:0 -> 224, train_file, %s: %.0f images/s (one thread)\n",
               mode == 0 ? "RRC + flip" : "RRC + flip + RandAugment + erasing", iters / dt);
    }
    free(ob);
    free(gray);
    free(gj);
    free(e1);
    free(e2);
    free(a);
    free(b);
    vil_image_free(&full);
    free(j);
    free(jp);
    free(px);
}

/* ---- the fast training decode (VIL_DECODE_FAST) ---- */

/* Per fast scale M (index M), over random crops of one file: how far the fast mode's output
 * is from the exact mode's (RandAugment and erasing off, so both are resize + flip +
 * normalize of the same crop), in levels of 255. */
typedef struct {
    int n[9];
    double sum_mean[9], worst_mean[9], worst_max[9];
} FastStats;

static void fast_vs_exact(const unsigned char *buf, size_t n, int channels, int res, int crops, uint64_t seed,
                          int bias, FastStats *st) {
    int W, H;
    if (vil_image_info(buf, n, &W, &H, NULL) != 0) {
        T_CHECK(0, "fast_vs_exact: no image size");
        return;
    }
    const size_t np = (size_t)channels * res * res;
    float *a = vil_malloc(sizeof(float) * np), *b = vil_malloc(sizeof(float) * np);
    int ok = 1;
    for (int k = 0; k < crops; k++) {
        VilTrainTransform t;
        vil_train_transform_default(&t, res, channels);
        t.randaug_n = 0;
        t.reprob = 0.0f;
        VilRng r1, r2, r3;
        vil_rng_seed(&r1, seed + (uint64_t)k);
        r2 = r3 = r1;
        int l, tp, cw, ch;
        vil_rrc_params(W, H, t.scale_min, t.scale_max, t.ratio_min, t.ratio_max, &r3, &l, &tp, &cw, &ch);
        int m = vil_jpeg_fast_scale(cw, ch, res);
        ok &= vil_transform_train_file(buf, n, &t, &r1, b) == 0;
        t.decode = VIL_DECODE_FAST;
        ok &= vil_transform_train_file_bias(buf, n, &t, &r2, bias, a) == 0;
        ok &= memcmp(&r1, &r2, sizeof r1) == 0;
        double sm = 0, mx = 0;
        for (int c = 0; c < channels; c++)
            for (int i = 0; i < res * res; i++) {
                double dv = fabs((double)a[c * res * res + i] - b[c * res * res + i]) * t.std[c] * 255.0;
                sm += dv;
                if (!(dv <= mx)) mx = dv;
            }
        sm /= (double)np;
        st->n[m]++;
        st->sum_mean[m] += sm;
        if (!(sm <= st->worst_mean[m])) st->worst_mean[m] = sm;
        if (!(mx <= st->worst_max[m])) st->worst_max[m] = mx;
    }
    T_CHECK(ok, "fast / exact train_file failed or drew different random numbers");
    free(a);
    free(b);
}

/* Fast against exact, in levels of 255, measured over the files below (photo-like 500x375 at
 * 4:2:0 baseline and progressive, 4:2:2, 4:4:0, 4:4:4, gray to 3 and 1 channels, PIL's CMYK
 * and 4:2:0 files; outputs 40, 100, 160, 224; 1080 crops): mean |diff| 0.35 over all crops
 * (4:2:0 0.4, 4:2:2 0.9, 4:4:0 1.1; 4:4:4, gray and CMYK 0: no chroma upsampling there, and
 * the scale choice is exact mode's), worst crop 3.8 (4:4:0 at 2/8), worst pixel 19: merged
 * upsampling replicates chroma samples, so the differences sit on the test image's hard colour
 * edges. The scale one step too small (bias -1) measured mean 6.0, worst crop 22, worst pixel
 * 184: every bound catches it (checked below). */
#define FAST_TOL_AVG 1.0
#define FAST_TOL_MEAN 5.0
#define FAST_TOL_MAX 32.0

static void test_fast_decode(void) {
    /* the scale: smallest of 2/8, 4/8, 8/8 with the scaled crop >= res on both sides */
    static const int cases[][4] = {
        {224, 224, 224, 8}, {447, 500, 224, 8}, {500, 447, 224, 8}, {448, 448, 224, 4}, {895, 2000, 224, 4},
        {896, 896, 224, 2}, {10000, 9000, 224, 2}, {100, 100, 224, 8}, {1, 1, 224, 8}, {500, 375, 160, 4},
        {319, 320, 160, 8}, {320, 320, 160, 4}, {640, 640, 160, 2}, {639, 640, 160, 4}, {28, 28, 28, 8},
        {56, 56, 28, 4}, {112, 112, 28, 2}, {60000, 60000, 224, 2},
    };
    int scale_ok = 1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int m = vil_jpeg_fast_scale(cases[i][0], cases[i][1], cases[i][2]);
        if (m != cases[i][3]) {
            scale_ok = 0;
            printf("  fast scale of %dx%d -> %d: %d/8, expected %d/8\n", cases[i][0], cases[i][1], cases[i][2], m,
                   cases[i][3]);
        }
    }
    T_CHECK(scale_ok, "vil_jpeg_fast_scale picks the wrong scale");

    const int W = 500, H = 375;
    unsigned char *px = photo_like(W, H);
    unsigned char *gray = vil_malloc((size_t)W * H);
    vil_rgb_to_gray(gray, px, (size_t)W * H);
    struct {
        const char *name;
        unsigned char *buf;
        size_t n;
        int channels;
    } f[10];
    int nf = 0;
    const int samps[4] = {22, 21, 12, 11};
    for (int i = 0; i < 4; i++) {
        unsigned long sn;
        f[nf].buf = jpeg_of_samp(px, W, H, 3, 90, 0, samps[i], &sn);
        f[nf].n = sn;
        f[nf].channels = 3;
        f[nf++].name = i == 0 ? "4:2:0" : i == 1 ? "4:2:2" : i == 2 ? "4:4:0" : "4:4:4";
    }
    unsigned long pn, gn;
    f[nf].buf = jpeg_of(px, W, H, 3, 90, 1, &pn);
    f[nf].n = pn;
    f[nf].channels = 3;
    f[nf++].name = "progressive 4:2:0";
    f[nf].buf = jpeg_of(gray, W, H, 1, 90, 0, &gn);
    f[nf].n = gn;
    f[nf].channels = 3;
    f[nf++].name = "gray -> RGB";
    f[nf] = f[nf - 1];
    f[nf].buf = vil_malloc(gn);
    memcpy(f[nf].buf, f[nf - 1].buf, gn);
    f[nf].channels = 1;
    f[nf++].name = "gray -> L";
    f[nf].buf = read_data("pil_cmyk.jpg", &f[nf].n);
    f[nf].channels = 3;
    f[nf].name = "CMYK";
    if (f[nf].buf) nf++;
    f[nf].buf = read_data("pil_rgb420.jpg", &f[nf].n);
    f[nf].channels = 1;
    f[nf].name = "PIL 4:2:0 -> L";
    if (f[nf].buf) nf++;

    /* cropped fast decodes are exactly the same pixels as the fast decode of the whole image */
    VilRng rr;
    vil_rng_seed(&rr, 77);
    for (int i = 0; i < nf; i++)
        for (int m = 2; m <= 8; m *= 2)
            T_CHECK(region_matches_scaled(f[i].buf, f[i].n, f[i].channels, m, VIL_JPEG_MERGED, &rr, 25),
                    "%s: cropped fast decode at %d/8 differs from the whole-image fast decode", f[i].name, m);
    /* and with PIL's settings at 3/8 .. 7/8 too (the scaled-region mapping for every M) */
    for (int m = 1; m <= 8; m++)
        T_CHECK(region_matches_scaled(f[0].buf, f[0].n, 3, m, 0, &rr, 15) &&
                    region_matches_scaled(f[1].buf, f[1].n, 3, m, VIL_JPEG_MERGED, &rr, 15),
                "cropped decode at %d/8 differs from the whole-image decode", m);

    const int res[4] = {40, 100, 160, 224};
    FastStats all, small;
    memset(&all, 0, sizeof all);
    memset(&small, 0, sizeof small);
    for (int i = 0; i < nf; i++) {
        FastStats st;
        memset(&st, 0, sizeof st);
        for (int r = 0; r < 4; r++) fast_vs_exact(f[i].buf, f[i].n, f[i].channels, res[r], 30, 7000 + 100 * i + 10 * r, 0, &st);
        int cnt = 0;
        double sum = 0, wm = 0, wx = 0;
        for (int m = 1; m <= 8; m++) {
            all.n[m] += st.n[m];
            all.sum_mean[m] += st.sum_mean[m];
            all.worst_mean[m] = fmax(all.worst_mean[m], st.worst_mean[m]);
            all.worst_max[m] = fmax(all.worst_max[m], st.worst_max[m]);
            cnt += st.n[m];
            sum += st.sum_mean[m];
            wm = fmax(wm, st.worst_mean[m]);
            wx = fmax(wx, st.worst_max[m]);
        }
        printf("info fast vs exact, %-18s: %3d crops (%d at 2/8, %d at 4/8, %d at 8/8): mean |diff| %.2f, worst crop %.2f, worst pixel %.1f\n",
               f[i].name, cnt, st.n[2], st.n[4], st.n[8], sum / cnt, wm, wx);
        /* the same crops one scale step too small */
        for (int r = 0; r < 4; r++) fast_vs_exact(f[i].buf, f[i].n, f[i].channels, res[r], 30, 7000 + 100 * i + 10 * r, -1, &small);
    }
    int cnt = 0;
    double sum = 0, wm = 0, wx = 0;
    for (int m = 1; m <= 8; m++) {
        if (all.n[m])
            printf("info fast vs exact at %d/8: %d crops, mean |diff| %.2f, worst crop %.2f, worst pixel %.1f\n", m,
                   all.n[m], all.sum_mean[m] / all.n[m], all.worst_mean[m], all.worst_max[m]);
        cnt += all.n[m];
        sum += all.sum_mean[m];
        wm = fmax(wm, all.worst_mean[m]);
        wx = fmax(wx, all.worst_max[m]);
    }
    T_CHECK(all.n[2] > 0 && all.n[4] > 0 && all.n[8] > 0, "the fast test did not reach every scale");
    T_CLOSE("fast vs exact: mean |diff| over all crops (levels)", sum / cnt, FAST_TOL_AVG);
    T_CLOSE("fast vs exact: worst crop's mean |diff| (levels)", wm, FAST_TOL_MEAN);
    T_CLOSE("fast vs exact: worst pixel |diff| (levels)", wx, FAST_TOL_MAX);
    /* the bounds can fail: the scale one step too small breaks at least one of them */
    int scnt = 0;
    double ssum = 0, swm = 0, swx = 0;
    for (int m = 1; m <= 8; m++) {
        scnt += small.n[m];
        ssum += small.sum_mean[m];
        swm = fmax(swm, small.worst_mean[m]);
        swx = fmax(swx, small.worst_max[m]);
    }
    printf("info fast one scale step too small: mean |diff| %.2f, worst crop %.2f, worst pixel %.1f\n", ssum / scnt, swm,
           swx);
    T_CHECK(ssum / scnt > FAST_TOL_AVG || swm > FAST_TOL_MEAN || swx > FAST_TOL_MAX,
            "the fast-decode bounds do not catch a scale one step too small");

    /* non-JPEG input in fast mode: the full decode + train transform, bit for bit */
    size_t pngn;
    unsigned char *png = read_data("png_named.JPEG", &pngn);
    if (png) {
        VilTrainTransform t;
        vil_train_transform_default(&t, 24, 3);
        t.decode = VIL_DECODE_FAST;
        float oa[3 * 24 * 24], ob[3 * 24 * 24];
        VilImage im;
        int same = vil_image_decode(png, pngn, 3, &im) == 0;
        for (int k = 0; k < 20 && same; k++) {
            VilRng r1, r2;
            vil_rng_seed(&r1, 300 + k);
            r2 = r1;
            same &= vil_transform_train_file(png, pngn, &t, &r1, oa) == 0 &&
                    vil_transform_train(&im, &t, &r2, ob) == 0 && memcmp(oa, ob, sizeof oa) == 0;
        }
        T_CHECK(same, "a PNG in fast mode differs from decode + train transform");
        if (im.px) vil_image_free(&im);
        free(png);
    }
    /* fast mode is deterministic from bytes */
    {
        VilTrainTransform t;
        vil_train_transform_default(&t, 64, 3);
        t.decode = VIL_DECODE_FAST;
        float *oa = vil_malloc(sizeof(float) * 3 * 64 * 64), *ob = vil_malloc(sizeof(float) * 3 * 64 * 64);
        int same = 1;
        for (int k = 0; k < 20; k++) {
            VilRng r1, r2;
            vil_rng_seed(&r1, 900 + k);
            r2 = r1;
            vil_transform_train_file(f[4].buf, f[4].n, &t, &r1, oa);
            vil_transform_train_file(f[4].buf, f[4].n, &t, &r2, ob);
            same &= memcmp(oa, ob, sizeof(float) * 3 * 64 * 64) == 0;
        }
        T_CHECK(same, "fast train_file is not deterministic");
        free(oa);
        free(ob);
    }
    for (int i = 0; i < nf; i++) free(f[i].buf);
    free(gray);
    free(px);
}

/* ---- the SIMD paths against plain per-pixel references ----
 * The RandAugment ops and the resize run vectorized code with fast paths chosen per block;
 * these references are the straightforward per-pixel forms of the same Pillow arithmetic
 * (the code the PIL cases above were first matched with), and must agree bit for bit on
 * every path: fill, copy, one row, one column, general, image borders, ragged widths. */

/* the references, like the library, must not fuse a * b + c into one rounding */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#define REF_NO_FMA
#else
#define REF_NO_FMA __attribute__((optimize("fp-contract=off")))
#endif

static inline int ref_clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }
static inline int ref_floor(double v) { return v < 0.0 ? (int)floor(v) : (int)v; }

/* Geometry.c's ImagingGenericTransform + affine_transform + bilinear/bicubic_filter8/32RGB */
REF_NO_FMA static void ref_affine(unsigned char *dst, const VilImage *src, const double m[6], int interp, const unsigned char *fill) {
    const int w = src->w, h = src->h, c = src->c;
    const size_t row = (size_t)w * c;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            unsigned char *o = dst + (size_t)y * row + (size_t)x * c;
            double xi = x + 0.5, yi = y + 0.5;
            double xin = m[0] * xi + m[1] * yi + m[2];
            double yin = m[3] * xi + m[4] * yi + m[5];
            if (xin < 0.0 || xin >= w || yin < 0.0 || yin >= h) {
                memcpy(o, fill, (size_t)c);
                continue;
            }
            xin -= 0.5;
            yin -= 0.5;
            int x0 = ref_floor(xin), y0 = ref_floor(yin);
            double dx = xin - x0, dy = yin - y0;
            for (int ch = 0; ch < c; ch++) {
#define PX(yy, xx) ((int)src->px[(size_t)(yy) * row + (size_t)(xx) * c + ch])
                if (interp == VIL_INTERP_BILINEAR) {
                    int xa = ref_clampi(x0, 0, w - 1), xb = ref_clampi(x0 + 1, 0, w - 1);
                    int ya = ref_clampi(y0, 0, h - 1);
                    double v1 = PX(ya, xa) + (PX(ya, xb) - PX(ya, xa)) * dx, v2 = v1;
                    if (y0 + 1 >= 0 && y0 + 1 < h) v2 = PX(y0 + 1, xa) + (PX(y0 + 1, xb) - PX(y0 + 1, xa)) * dx;
                    o[ch] = (unsigned char)(v1 + (v2 - v1) * dy);
                    continue;
                }
                int xs[4];
                for (int k = 0; k < 4; k++) xs[k] = ref_clampi(x0 - 1 + k, 0, w - 1);
                double hv[4];
                for (int k = 0; k < 4; k++) {
                    int yy = y0 - 1 + k;
                    if (k > 0 && (yy < 0 || yy >= h)) { /* Pillow repeats the previous row's value */
                        hv[k] = hv[k - 1];
                        continue;
                    }
                    yy = ref_clampi(yy, 0, h - 1);
                    int v1 = PX(yy, xs[0]), v2 = PX(yy, xs[1]), v3 = PX(yy, xs[2]), v4 = PX(yy, xs[3]);
                    double p1 = v2, p2 = -v1 + v3, p3 = 2 * (v1 - v2) + v3 - v4, p4 = -v1 + v2 - v3 + v4;
                    hv[k] = p1 + dx * (p2 + dx * (p3 + dx * p4));
                }
#undef PX
                double p1 = hv[1], p2 = -hv[0] + hv[2], p3 = 2 * (hv[0] - hv[1]) + hv[2] - hv[3];
                double p4 = -hv[0] + hv[1] - hv[2] + hv[3];
                double v = p1 + dy * (p2 + dy * (p3 + dy * p4));
                o[ch] = v <= 0.0 ? 0 : v >= 255.0 ? 255 : (unsigned char)v;
            }
        }
}

static void test_affine_reference(void) {
    VilRng r;
    vil_rng_seed(&r, 2024);
    const unsigned char fill[3] = {124, 116, 104};
    int cases = 0, bad = 0, kinds_bad[9] = {0};
    for (int it = 0; it < 900; it++) {
        int w = 1 + (int)vil_rng_below(&r, 61), h = 1 + (int)vil_rng_below(&r, 61), c = vil_rng_below(&r, 3) ? 3 : 1;
        if (it % 60 == 0) w = h = 224;
        size_t n = (size_t)w * h * c;
        unsigned char *src = noise_image(w, h, c, (uint64_t)it);
        if (it % 7 == 3) /* flat regions: exact-integer results */
            for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(i / (c * 9) % 3 * 100);
        double m[6] = {1, 0, 0, 0, 1, 0}, s = (vil_rng_uniform(&r) - 0.5) * 1.2;
        int kind = (int)vil_rng_below(&r, 9);
        switch (kind) {
        case 0: m[1] = s; break;                                   /* ShearX */
        case 1: m[3] = s; break;                                   /* ShearY */
        case 2: m[2] = s * w * (vil_rng_below(&r, 2) ? 1 : 0.05); break; /* TranslateX */
        case 3: m[5] = s * h * (vil_rng_below(&r, 2) ? 1 : 0.05); break; /* TranslateY */
        case 4: m[2] = (int)(s * 10), m[5] = (int)(s * 7); break;  /* whole pixels */
        case 5: { /* Rotate, as vil_ra_rotate builds it */
            double a = -(s * 300.0 * (M_PI / 180.0)), cx = w / 2.0, cy = h / 2.0;
            m[0] = cos(a), m[1] = sin(a), m[3] = -sin(a), m[4] = cos(a);
            m[2] = m[0] * -cx + m[1] * -cy + cx, m[5] = m[3] * -cx + m[4] * -cy + cy;
            break;
        }
        case 6: m[0] = 1 + s * 0.03, m[1] = s * 0.3, m[2] = s * 5; break; /* dx varies along a row */
        case 7: m[4] = 1 + s * 0.03, m[3] = s * 0.3, m[5] = s * 5; break; /* dy varies down a column */
        default:
            for (int k = 0; k < 6; k++) m[k] = (vil_rng_uniform(&r) - 0.5) * (k == 2 || k == 5 ? 40 : 2.5);
        }
        int interp = vil_rng_below(&r, 2) ? VIL_INTERP_BICUBIC : VIL_INTERP_BILINEAR;
        unsigned char *a = vil_malloc(n), *b = vil_malloc(n);
        VilImage im = {w, h, c, src};
        vil_ra_affine(a, &im, m, interp, fill);
        ref_affine(b, &im, m, interp, fill);
        cases++;
        if (memcmp(a, b, n) != 0) {
            bad++;
            kinds_bad[kind]++;
        }
        free(src);
        free(a);
        free(b);
    }
    T_CHECK(bad == 0, "vil_ra_affine differs from the per-pixel reference in %d of %d cases (by family: shear x %d, "
            "shear y %d, translate x %d, translate y %d, whole %d, rotate %d, x-scale %d, y-scale %d, general %d)",
            bad, cases, kinds_bad[0], kinds_bad[1], kinds_bad[2], kinds_bad[3], kinds_bad[4], kinds_bad[5], kinds_bad[6],
            kinds_bad[7], kinds_bad[8]);
}

/* The table-lookup forms of the per-value ops, as ImageOps and ImageEnhance build them. */
static void ref_lut(unsigned char *px, size_t n, int c, const unsigned char lut[3][256]) {
    for (size_t i = 0; i < n; i++) px[i] = lut[i % (size_t)c][px[i]];
}

REF_NO_FMA static void ref_value_op(VilImage *im, int op, double p, int q) {
    const int c = im->c;
    const size_t n = (size_t)im->w * im->h * c;
    unsigned char lut[3][256];
    uint32_t hist[3][256] = {{0}};
    for (size_t i = 0; i < n; i++) hist[i % (size_t)c][im->px[i]]++;
    for (int ch = 0; ch < c; ch++)
        for (int v = 0; v < 256; v++) {
            int o = v;
            if (op == 0) o = v & ~((1 << (8 - q)) - 1);                   /* posterize q bits */
            else if (op == 1) o = v < q ? v : 255 - v;                    /* solarize q */
            else if (op == 2) o = v < 128 ? (v + q > 255 ? 255 : v + q) : v; /* solarize_add q */
            else if (op == 3 || op == 4) {                                /* brightness / contrast */
                int deg = 0;
                if (op == 4) {
                    uint64_t sum = 0;
                    for (size_t i = 0; i < n; i += c)
                        sum += c == 3 ? (im->px[i] * 19595u + im->px[i + 1] * 38470u + im->px[i + 2] * 7471u + 0x8000u) >> 16
                                      : im->px[i];
                    deg = (int)((double)sum / (double)(n / c) + 0.5);
                }
                float alpha = (float)p;
                if (alpha >= 0 && alpha <= 1.0) o = (unsigned char)(deg + alpha * (v - deg));
                else {
                    float t = (float)(deg + alpha * (v - deg));
                    o = t <= 0.0f ? 0 : t >= 255.0f ? 255 : (unsigned char)t;
                }
            } else if (op == 5) {                                         /* autocontrast */
                int lo = 0, hi = 255;
                while (lo < 256 && !hist[ch][lo]) lo++;
                while (hi >= 0 && !hist[ch][hi]) hi--;
                if (hi > lo) {
                    double scale = 255.0 / (hi - lo), offset = -lo * scale;
                    o = (int)(v * scale + offset);
                    o = o < 0 ? 0 : o > 255 ? 255 : o;
                }
            }
            lut[ch][v] = (unsigned char)o;
        }
    ref_lut(im->px, n, c, (const unsigned char(*)[256])lut);
}

static void test_value_ops_reference(void) {
    VilRng r;
    vil_rng_seed(&r, 77);
    int bad[6] = {0}, cases = 0;
    for (int it = 0; it < 240; it++) {
        int w = 1 + (int)vil_rng_below(&r, 90), h = 1 + (int)vil_rng_below(&r, 40), c = vil_rng_below(&r, 3) ? 3 : 1;
        if (it % 40 == 0) w = h = 224;
        size_t n = (size_t)w * h * c;
        unsigned char *src = noise_image(w, h, c, 500 + (uint64_t)it), *a = vil_malloc(n), *b = vil_malloc(n);
        if (it % 5 == 1) /* a narrow range, so that autocontrast stretches */
            for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(90 + src[i] / 4);
        int op = it % 6, q = 0;
        double p = vil_rng_uniform(&r) * 2.0;
        if (op == 0) q = (int)vil_rng_below(&r, 9);
        else if (op == 1) q = (int)vil_rng_below(&r, 258);
        else if (op == 2) q = (int)vil_rng_below(&r, 111);
        memcpy(a, src, n);
        memcpy(b, src, n);
        VilImage ia = {w, h, c, a}, ib = {w, h, c, b};
        switch (op) {
        case 0: vil_ra_posterize(&ia, q); break;
        case 1: vil_ra_solarize(&ia, q); break;
        case 2: vil_ra_solarize_add(&ia, q, 128); break;
        case 3: vil_ra_brightness(&ia, p); break;
        case 4: vil_ra_contrast(&ia, p); break;
        default: vil_ra_autocontrast(&ia); break;
        }
        if (op == 0 && q >= 8) memcpy(b, src, n);
        else ref_value_op(&ib, op, p, q);
        cases++;
        bad[op] += memcmp(a, b, n) != 0;
        free(src);
        free(a);
        free(b);
    }
    T_CHECK(!bad[0] && !bad[1] && !bad[2] && !bad[3] && !bad[4] && !bad[5],
            "per-value ops differ from their tables in %d of %d cases (posterize %d, solarize %d, solarize_add %d, "
            "brightness %d, contrast %d, autocontrast %d)",
            bad[0] + bad[1] + bad[2] + bad[3] + bad[4] + bad[5], cases, bad[0], bad[1], bad[2], bad[3], bad[4], bad[5]);
}

/* RGB runs the transposed SIMD horizontal pass, one channel the row-block pass: two
 * independent implementations of the same integer sums, which must agree exactly. */
static void test_resize_rgb_vs_channels(void) {
    VilRng r;
    vil_rng_seed(&r, 31);
    int bad = 0, cases = 0;
    for (int it = 0; it < 120; it++) {
        int w = 1 + (int)vil_rng_below(&r, 400), h = 1 + (int)vil_rng_below(&r, 120);
        int dw = 1 + (int)vil_rng_below(&r, 240), dh = 1 + (int)vil_rng_below(&r, 100);
        if (it % 4 == 0) dw = 224, dh = 64;
        int ox = (int)vil_rng_below(&r, (uint32_t)dw), oy = (int)vil_rng_below(&r, (uint32_t)dh);
        int cw = 1 + (int)vil_rng_below(&r, (uint32_t)(dw - ox)), ch = 1 + (int)vil_rng_below(&r, (uint32_t)(dh - oy));
        if (it % 2) ox = oy = 0, cw = dw, ch = dh;
        size_t stride = (size_t)(w + (int)vil_rng_below(&r, 3)) * 3;
        unsigned char *src = vil_malloc(stride * h), *plane = vil_malloc((size_t)w * h);
        for (size_t i = 0; i < stride * h; i++) src[i] = (unsigned char)vil_rng_u64(&r);
        unsigned char *rgb = vil_malloc((size_t)cw * ch * 3), *one = vil_malloc((size_t)cw * ch);
        vil_resize_bicubic(rgb, cw, ch, ox, oy, src, w, h, stride, 3, dw, dh);
        int same = 1;
        for (int k = 0; k < 3; k++) {
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++) plane[(size_t)y * w + x] = src[(size_t)y * stride + (size_t)x * 3 + k];
            vil_resize_bicubic(one, cw, ch, ox, oy, plane, w, h, (size_t)w, 1, dw, dh);
            for (size_t i = 0; i < (size_t)cw * ch; i++) same &= one[i] == rgb[i * 3 + k];
        }
        cases++;
        bad += !same;
        free(src);
        free(plane);
        free(rgb);
        free(one);
    }
    T_CHECK(bad == 0, "RGB resize differs from its channels resized alone in %d of %d cases", bad, cases);
}

REF_NO_FMA static void test_normalize_exact(void) {
    const int w = 16, h = 16; /* every byte value in every channel */
    for (int c = 1; c <= 3; c += 2) {
        unsigned char *px = vil_malloc((size_t)w * h * c);
        for (int i = 0; i < w * h * c; i++) px[i] = (unsigned char)((i / c * 37 + 11 * (i % c)) & 255);
        float *out = vil_malloc(sizeof(float) * w * h * c);
        const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
        vil_normalize_chw(out, px, w, h, c, mean, std);
        int same = 1;
        for (int ch = 0; ch < c; ch++) {
            volatile float lut[256]; /* ToTensor then Normalize, value by value */
            for (int v = 0; v < 256; v++) lut[v] = ((float)v / 255.0f - mean[ch]) / std[ch];
            for (int i = 0; i < w * h; i++) same &= out[ch * w * h + i] == lut[px[i * c + ch]];
        }
        T_CHECK(same, "normalize (%d channels) differs from (x / 255 - mean) / std in float32", c);
        free(px);
        free(out);
    }
}

/* The erasing noise: distribution (moments, tails, a chi-square over bins) and its exact
 * values, pinned so that every machine, compiler and SIMD width makes the same batches. */
static void test_erasing_noise(void) {
    const size_t n = 1 << 21;
    float *z = vil_malloc(sizeof(float) * n);
    vil_normal_fill(z, n, 0x0123456789abcdefULL, 0);
    double s1 = 0, s2 = 0, s4 = 0, t2 = 0, t3 = 0, mx = 0;
    long bins[40] = {0};
    for (size_t i = 0; i < n; i++) {
        double v = z[i];
        s1 += v, s2 += v * v, s4 += v * v * v * v;
        t2 += fabs(v) > 2, t3 += fabs(v) > 3;
        if (fabs(v) > mx) mx = fabs(v);
        int b = (int)floor((v + 4) * 5);
        if (b >= 0 && b < 40) bins[b]++;
    }
    double mean = s1 / n, var = s2 / n - mean * mean, kurt = s4 / n / (var * var), chi = 0;
    for (int b = 0; b < 40; b++) {
        double lo = b / 5.0 - 4, e = 0.5 * (erf((lo + 0.2) / sqrt(2)) - erf(lo / sqrt(2))) * n;
        chi += (bins[b] - e) * (bins[b] - e) / e;
    }
    printf("info erasing noise: mean %.5f var %.5f kurtosis %.4f P(|z|>2) %.5f P(|z|>3) %.6f max %.2f chi2(40 bins) %.1f\n",
           mean, var, kurt, t2 / n, t3 / n, mx, chi);
    T_CLOSE("noise mean vs 0", fabs(mean), 0.003);
    T_CLOSE("noise variance vs 1", fabs(var - 1), 0.004);
    T_CLOSE("noise kurtosis vs 3", fabs(kurt - 3), 0.02);
    T_CLOSE("noise P(|z| > 2) vs 0.0455", fabs(t2 / n - 0.0455), 0.0006);
    T_CLOSE("noise P(|z| > 3) vs 0.0027", fabs(t3 / n - 0.0027), 0.00015);
    T_CLOSE("noise chi-square over 40 bins (99.9% point 73.4)", chi, 73.4);
    T_CHECK(mx < 5.9, "noise |z| reached %.3f", mx);
    /* value j is pair ctr + j / 2: a row filled from its own counter matches the long fill */
    float part[37];
    vil_normal_fill(part, 37, 0x0123456789abcdefULL, 1000);
    T_CHECK(memcmp(part, z + 2000, sizeof part) == 0, "vil_normal_fill from pair 1000 differs from the long fill");
    uint64_t hsh = 1469598103934665603ULL;
    for (size_t i = 0; i < 4096; i++) {
        uint32_t u;
        memcpy(&u, &z[i], 4);
        hsh = (hsh ^ u) * 1099511628211ULL;
    }
    const uint64_t pinned = 0xaffd339624c37f10ULL;
    T_CHECK(hsh == pinned, "erasing noise values changed (hash %016llx, pinned %016llx): batches would differ "
            "between machines", (unsigned long long)hsh, (unsigned long long)pinned);
    free(z);
}

/* vil_transform_train_file_group: several samples of one file (repeated augmentation's copies)
 * from one decode per DCT scale must give, bit for bit, what each sample gives alone; the
 * decode count must show the sharing. Baseline, progressive and 4:4:4 JPEGs, a gray JPEG to
 * RGB, RGB to gray, a large JPEG whose crops fall on several DCT scales, and a PNG. */
static void test_group_decode(void) {
    const int W = 500, H = 375, BW = 1400, BH = 1100;
    unsigned char *px = photo_like(W, H), *big = photo_like(BW, BH);
    unsigned long n[5];
    unsigned char *f[5];
    f[0] = jpeg_of(px, W, H, 3, 90, 0, &n[0]);
    f[1] = jpeg_of(px, W, H, 3, 90, 1, &n[1]);
    f[2] = jpeg_of_samp(px, W, H, 3, 85, 0, 11, &n[2]);
    unsigned char *gray = vil_malloc((size_t)W * H);
    vil_rgb_to_gray(gray, px, (size_t)W * H);
    f[3] = jpeg_of(gray, W, H, 1, 90, 0, &n[3]);
    f[4] = jpeg_of(big, BW, BH, 3, 88, 0, &n[4]);
    size_t pngn;
    unsigned char *png = read_data("png_named.JPEG", &pngn);
    const char *names[6] = {"baseline 4:2:0", "progressive", "4:4:4", "gray JPEG", "1400x1100", "PNG"};
    int bad = 0, cases = 0, shared = 0, multi_scale = 0;
    char what[400] = "";
    for (int fi = 0; fi < 6; fi++) {
        const unsigned char *buf = fi < 5 ? f[fi] : png;
        size_t bn = fi < 5 ? n[fi] : pngn;
        if (!buf) continue;
        for (int mode = 0; mode < 2; mode++)
            for (int ch = 1; ch <= 3; ch += 2)
                for (int res = 64; res <= 224; res += 160) {
                    VilTrainTransform t;
                    vil_train_transform_default(&t, res, ch);
                    t.decode = mode ? VIL_DECODE_FAST : VIL_DECODE_EXACT;
                    const int counts[4] = {1, 2, 3, 5};
                    for (int ci = 0; ci < 4; ci++) {
                        int cnt = counts[ci];
                        size_t np = (size_t)ch * res * res;
                        float *grp = vil_malloc((size_t)cnt * np * sizeof(float)), *one = vil_malloc(np * sizeof(float));
                        float *outs[5];
                        VilRng rngs[5];
                        uint64_t seed = 1000 * fi + 100 * ci + 10 * mode + ch + res;
                        for (int i = 0; i < cnt; i++) {
                            vil_rng_seed(&rngs[i], seed + 7 * i);
                            outs[i] = grp + (size_t)i * np;
                        }
                        int dec = -1;
                        int ok = vil_transform_train_file_group(buf, bn, &t, cnt, rngs, outs, &dec) == 0;
                        for (int i = 0; i < cnt && ok; i++) {
                            VilRng r1;
                            vil_rng_seed(&r1, seed + 7 * i);
                            ok = vil_transform_train_file(buf, bn, &t, &r1, one) == 0 &&
                                 memcmp(one, outs[i], np * sizeof(float)) == 0;
                            /* the streams end where a lone sample's would */
                            ok = ok && memcmp(&r1, &rngs[i], sizeof r1) == 0;
                        }
                        ok = ok && dec >= 1 && dec <= cnt;
                        if (!ok && !bad)
                            snprintf(what, sizeof what, "%s, %s, %d channels, res %d, %d samples", names[fi],
                                     mode ? "fast" : "exact", ch, res, cnt);
                        bad += !ok;
                        cases++;
                        shared += ok && dec < cnt;
                        multi_scale += ok && dec > 1;
                        free(grp);
                        free(one);
                    }
                }
    }
    T_CHECK(bad == 0, "%d of %d group transforms differ from the samples made alone; first: %s", bad, cases, what);
    T_CHECK(cases >= 80, "group transform cases run: %d", cases);
    T_CHECK(shared >= 40, "groups that shared a decode: %d of %d", shared, cases);
    T_CHECK(multi_scale > 0, "no group needed two DCT scales: the per-scale split went untested");
    /* a broken file fails as a lone sample does */
    VilTrainTransform t;
    vil_train_transform_default(&t, 64, 3);
    float *o = vil_malloc(2 * 3 * 64 * 64 * sizeof(float)), *outs[2] = {o, o + 3 * 64 * 64};
    VilRng rngs[2];
    vil_rng_seed(&rngs[0], 1);
    vil_rng_seed(&rngs[1], 2);
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_transform_train_file_group(f[0], n[0] / 2, &t, 2, rngs, outs, NULL);
    vil_error_release(&cap);
    T_CHECK(rc != 0 && cap.msg[0], "a truncated JPEG was accepted by the group transform");
    free(o);
    for (int i = 0; i < 5; i++) free(f[i]);
    free(png);
    free(gray);
    free(px);
    free(big);
}

int main(void) {
    test_resize_pil();
    test_eval_pil();
    test_eval_misc();
    test_resize_reference();
    test_rrc();
    test_train_geometry();
    test_randaugment_pil();
    test_randaugment_props();
    test_erasing();
    test_erasing_noise();
    test_affine_reference();
    test_value_ops_reference();
    test_resize_rgb_vs_channels();
    test_normalize_exact();
    test_file_path();
    test_fast_decode();
    test_group_decode();
    return t_finish();
}
