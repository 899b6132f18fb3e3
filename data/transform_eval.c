/* transform_eval.c: the evaluation transform as timm / torchvision compute it with PIL (the
 * shorter side resized to size / crop_pct, bicubic, center crop, normalize), from an image or
 * from file bytes; the normalization the training transform shares. */
#include "data/transform.h"

#include "data/recipe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* as in resample.c: no fused multiply-add where clang would otherwise contract (gcc contracts
 * nothing here: no product is added) */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

const float VIL_IMAGENET_MEAN[3] = VIL_RECIPE_MEAN;
const float VIL_IMAGENET_STD[3] = VIL_RECIPE_STD;

void vil_resize_shorter_size(int w, int h, int size, int *nw, int *nh) {
    if (w <= h) {
        *nw = size;
        *nh = (int)((double)((long long)size * h) / w);
    } else {
        *nh = size;
        *nw = (int)((double)((long long)size * w) / h);
    }
}

int vil_eval_scale_size(int size, float crop_pct) {
    /* timm computes floor(size / crop_pct) with crop_pct a Python double such as 0.875 or
     * 0.9; recover that double from our float as the shortest decimal that round-trips */
    double cp = (double)crop_pct;
    for (int prec = 1; prec <= 9; prec++) {
        char s[32];
        snprintf(s, sizeof s, "%.*g", prec, (double)crop_pct);
        if (strtof(s, NULL) == crop_pct) {
            cp = strtod(s, NULL);
            break;
        }
    }
    return (int)floor((double)size / cp);
}

/* Python's round(d / 2) for an integer d: halves go to the even neighbour. */
static int round_half_even_div2(int d) {
    int q = d >= 0 ? d / 2 : -((-d + 1) / 2); /* floor(d / 2) */
    if (d % 2 != 0 && (q & 1)) q += 1;
    return q;
}

/* The exact float32 sequence of ToTensor (x / 255) then Normalize (sub, div), computed
 * rather than looked up: the same IEEE operations, but they vectorize (two divisions per
 * value cost less than a table lookup through strided bytes). */
static void normalize_rgb(float *restrict out, const unsigned char *restrict px, size_t hw, const float *mean,
                          const float *std) {
    const float m0 = mean[0], m1 = mean[1], m2 = mean[2], s0 = std[0], s1 = std[1], s2 = std[2];
    float *restrict o0 = out, *restrict o1 = out + hw, *restrict o2 = out + 2 * hw;
    for (size_t i = 0; i < hw; i++) {
        o0[i] = ((float)px[3 * i] / 255.0f - m0) / s0;
        o1[i] = ((float)px[3 * i + 1] / 255.0f - m1) / s1;
        o2[i] = ((float)px[3 * i + 2] / 255.0f - m2) / s2;
    }
}

void vil_normalize_chw(float *out, const unsigned char *px, int w, int h, int c, const float *mean,
                       const float *std) {
    size_t hw = (size_t)w * h;
    if (c == 3) {
        normalize_rgb(out, px, hw, mean, std);
        return;
    }
    for (int ch = 0; ch < c; ch++) {
        const float m = mean[ch], sd = std[ch];
        float *restrict o = out + ch * hw;
        const unsigned char *restrict p = px + ch;
        for (size_t i = 0; i < hw; i++) o[i] = ((float)p[i * c] / 255.0f - m) / sd;
    }
}

static int eval_args_ok(const VilImage *img, int size, float crop_pct) {
    return img && img->px && img->w > 0 && img->h > 0 && (img->c == 1 || img->c == 3) && size > 0 &&
           crop_pct > 0.0f;
}

int vil_transform_eval(const VilImage *img, int size, float crop_pct, const float *mean,
                       const float *std, float *out) {
    if (!eval_args_ok(img, size, crop_pct)) return -1;
    int c = img->c;
    int scale = vil_eval_scale_size(size, crop_pct);
    if (scale <= 0) return -1;
    int nw, nh;
    vil_resize_shorter_size(img->w, img->h, scale, &nw, &nh);
    if (nw <= 0 || nh <= 0) return -1;
    /* torchvision CenterCrop: pad with zeros to at least size x size (left/top get the
     * smaller half), then crop at round((H - size) / 2) of the padded image */
    int pad_l = size > nw ? (size - nw) / 2 : 0, pad_t = size > nh ? (size - nh) / 2 : 0;
    int pw = nw > size ? nw : size, ph = nh > size ? nh : size;
    int left = round_half_even_div2(pw - size) - pad_l; /* in resized-image coordinates */
    int top = round_half_even_div2(ph - size) - pad_t;
    int x0 = left < 0 ? 0 : left, y0 = top < 0 ? 0 : top;
    int x1 = left + size > nw ? nw : left + size, y1 = top + size > nh ? nh : top + size;
    /* sizes the caller's size and the image set */
    unsigned char *crop = vil_try_calloc((size_t)size * size, c), *win = NULL;
    int rc = crop ? 0 : -1;
    if (rc == 0 && x1 > x0 && y1 > y0) {
        win = vil_try_malloc((size_t)(x1 - x0) * (y1 - y0) * c);
        rc = win ? vil_resize_bicubic(win, x1 - x0, y1 - y0, x0, y0, img->px, img->w, img->h, (size_t)img->w * c, c,
                                      nw, nh)
                 : -1;
        for (int y = y0; rc == 0 && y < y1; y++)
            memcpy(crop + ((size_t)(y - top) * size + (x0 - left)) * c,
                   win + (size_t)(y - y0) * (x1 - x0) * c, (size_t)(x1 - x0) * c);
    }
    if (rc == 0) vil_normalize_chw(out, crop, size, size, c, mean, std);
    else vil_error("evaluation transform of a %dx%d image to %d px: no memory for it", img->w, img->h, size);
    free(win);
    free(crop);
    return rc;
}

int vil_transform_eval_file(const unsigned char *buf, size_t n, int size, float crop_pct, int channels,
                            const float *mean, const float *std, float *out) {
    VilImage im;
    if (vil_image_decode(buf, n, channels, &im) != 0) return -1;
    int ok = eval_args_ok(&im, size, crop_pct);
    int rc = ok ? vil_transform_eval(&im, size, crop_pct, mean, std, out) : -1; /* reported: no memory */
    vil_image_free(&im);
    if (!ok) vil_error("evaluation transform: bad arguments");
    return rc;
}
