/* transform_train.c: the training transform of one sample (RandomResizedCrop or the canvas,
 * flip, RandAugment, normalize, random erasing and its N(0, 1) noise), from a decoded image or
 * straight from file bytes, where a JPEG's crop is decoded alone (DCT-scaled in the fast mode)
 * and the copies of repeated augmentation share one decode. */
#include "data/transform.h"

#include "data/randaugment.h"
#include "data/recipe.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

/* The erasing noise must run as plain float operations, the same on every instruction set: a
 * fused multiply-add rounds differently (the other functions here keep the compiler's default,
 * which the training results were measured with). (VIL_NO_FMA: vil/nofma.h) */
#include "vil/nofma.h"

void vil_train_transform_default(VilTrainTransform *t, int res, int channels) {
    memset(t, 0, sizeof *t);
    t->res = res;
    t->channels = channels;
    t->scale_min = VIL_RECIPE_SCALE_MIN;
    t->scale_max = 1.0f;
    t->ratio_min = 3.0f / 4.0f;
    t->ratio_max = 4.0f / 3.0f;
    t->hflip = VIL_RECIPE_HFLIP;
    t->randaug_n = VIL_RECIPE_RANDAUG_N;
    t->randaug_m = VIL_RECIPE_RANDAUG_M;
    t->randaug_mstd = VIL_RECIPE_RANDAUG_MSTD;
    t->randaug_inc = 1;
    t->reprob = VIL_RECIPE_REPROB;
    t->randaug_interp = VIL_INTERP_BICUBIC;
    t->decode = VIL_DECODE_EXACT; /* the default everywhere; `--set decode=fast` opts in */
    if (channels == 1) {
        t->mean[0] = t->mean[1] = t->mean[2] = VIL_RECIPE_GRAY_MEAN;
        t->std[0] = t->std[1] = t->std[2] = VIL_RECIPE_GRAY_STD;
    } else {
        memcpy(t->mean, VIL_IMAGENET_MEAN, sizeof t->mean);
        memcpy(t->std, VIL_IMAGENET_STD, sizeof t->std);
    }
}

static double rng_double(VilRng *rng) { /* [0, 1) with 53 bits, as Python's random() */
    return (double)(vil_rng_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
}

static double rng_uniform2(VilRng *rng, double a, double b) { return a + (b - a) * rng_double(rng); }

/* Python's round() of a non-negative double to int: half to even */
static int py_round(double v) { return (int)nearbyint(v); }

void vil_rrc_params(int W, int H, float scale_min, float scale_max, float ratio_min, float ratio_max,
                    VilRng *rng, int *left, int *top, int *cw, int *ch) {
    double area = (double)W * H;
    double lr0 = log((double)ratio_min), lr1 = log((double)ratio_max);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * rng_uniform2(rng, scale_min, scale_max);
        double aspect = exp(rng_uniform2(rng, lr0, lr1));
        int w = py_round(sqrt(target * aspect));
        int h = py_round(sqrt(target / aspect));
        if (0 < w && w <= W && 0 < h && h <= H) {
            *top = (int)vil_rng_below(rng, (uint32_t)(H - h + 1));
            *left = (int)vil_rng_below(rng, (uint32_t)(W - w + 1));
            *cw = w;
            *ch = h;
            return;
        }
    }
    /* fallback: the whole image, or its centre cut to the nearest allowed ratio */
    double in_ratio = (double)W / (double)H;
    double rmin = ratio_min < ratio_max ? ratio_min : ratio_max;
    double rmax = ratio_min < ratio_max ? ratio_max : ratio_min;
    int w = W, h = H;
    if (in_ratio < rmin) {
        h = py_round(w / rmin);
    } else if (in_ratio > rmax) {
        w = py_round(h * rmax);
    }
    if (w < 1) w = 1;
    if (h < 1) h = 1;
    if (w > W) w = W;
    if (h > H) h = H;
    *top = (H - h) / 2;
    *left = (W - w) / 2;
    *cw = w;
    *ch = h;
}

/* ---- N(0, 1) noise for random erasing ----
 * timm fills the box with torch's normal_(), whose exact values no C code reproduces; what
 * matters is the distribution and determinism. Box-Muller over 16 lanes: uniforms from a
 * counter-based 32-bit hash (Wellons' lowbias32) keyed by one 64-bit draw from the sample's
 * rng, log via frexp + atanh series, sin/cos via octant reduction + Taylor polynomials, all
 * in float with errors near 1e-7 (tests/test_transform.c checks moments and tail mass). */
/* a two-vector shuffle with constant indices, in GCC's and clang's spellings */
#if defined(__clang__)
#define SHUFFLE2(T, a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUFFLE2(T, a, b, ...) __builtin_shuffle(a, b, (T){__VA_ARGS__})
#endif
#if defined(__AVX512F__)
#define NL 16 /* float lanes of the widest register: wider generic vectors lower poorly */
#elif defined(__AVX__)
#define NL 8
#else
#define NL 4
#endif
typedef float vf16 __attribute__((vector_size(4 * NL)));
typedef uint32_t vu16 __attribute__((vector_size(4 * NL)));
typedef int32_t vs16 __attribute__((vector_size(4 * NL)));

VIL_NO_FMA static inline vu16 lowbias32(vu16 x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

static inline vf16 vsqrtf(vf16 x) {
#if defined(__AVX512F__)
    return (vf16)_mm512_sqrt_ps((__m512)x);
#elif defined(__AVX__)
    return (vf16)_mm256_sqrt_ps((__m256)x);
#elif defined(__SSE2__)
    return (vf16)_mm_sqrt_ps((__m128)x);
#else
    for (int k = 0; k < NL; k++) x[k] = sqrtf(x[k]);
    return x;
#endif
}

/* natural log of x in (0, 1] */
VIL_NO_FMA static inline vf16 vlogf(vf16 x) {
    vs16 b = (vs16)x;
    vs16 e = ((b >> 23) & 0xff) - 127;
    vf16 m = (vf16)((b & 0x007fffff) | 0x3f800000); /* [1, 2) */
    vs16 big = (vs16)(m > 1.41421356f);              /* -1 where m > sqrt 2: use m / 2 */
    m = (vf16)((vs16)m - (big & 0x00800000));         /* halve by exponent - 1 */
    e -= big;                                         /* e + 1 there */
    vf16 s = (m - 1.0f) / (m + 1.0f), s2 = s * s;    /* |s| < 0.172 */
    vf16 poly = 1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9))));
    return __builtin_convertvector(e, vf16) * 0.69314718f + 2.0f * s * poly;
}

/* n values N(0, 1) into dst: value j is component j % 2 of the Box-Muller pair number
 * ctr + j / 2, so the values do not depend on the vector width (nor, with no contraction
 * into fused multiply-adds, on the instruction set). */
VIL_NO_FMA void vil_normal_fill(float *dst, size_t n, uint64_t key, uint32_t ctr) {
    const uint32_t k1 = (uint32_t)key, k2 = (uint32_t)(key >> 32);
#if NL == 16
    const vu16 lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
#define LO_IDX 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23
#define HI_IDX 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31
#elif NL == 8
    const vu16 lane = {0, 1, 2, 3, 4, 5, 6, 7};
#define LO_IDX 0, 8, 1, 9, 2, 10, 3, 11
#define HI_IDX 4, 12, 5, 13, 6, 14, 7, 15
#else
    const vu16 lane = {0, 1, 2, 3};
#define LO_IDX 0, 4, 1, 5
#define HI_IDX 2, 6, 3, 7
#endif
    const float two24 = 1.0f / 16777216.0f;
    for (size_t i = 0; i < n; i += 2 * NL, ctr += NL) {
        vu16 ctrv = lane + ctr;
        vu16 a = lowbias32(ctrv * 0x9e3779b9u + k1);
        vu16 b = lowbias32(a ^ k2);
        vu16 c = lowbias32(b + 0x632be5abu);
        /* u1 in (0, 1): 24 bits and a half step; the largest |z| is then 5.9 */
        vf16 u1 = (__builtin_convertvector((vs16)(b >> 8), vf16) + 0.5f) * two24;
        vf16 r = vsqrtf(-2.0f * vlogf(u1));
        /* angle: quadrant q from the top 2 bits of c, y in [-pi/4, pi/4) from the next 22 */
        vu16 q = c >> 30;
        vf16 f = __builtin_convertvector((vs16)((c >> 8) & 0x3fffff), vf16) * (1.0f / 4194304.0f) - 0.5f;
        vf16 y = f * 1.57079633f, y2 = y * y;
        vf16 sy = y * (1.0f + y2 * (-1.0f / 6 + y2 * (1.0f / 120 + y2 * (-1.0f / 5040 + y2 * (1.0f / 362880)))));
        vf16 cy = 1.0f + y2 * (-0.5f + y2 * (1.0f / 24 + y2 * (-1.0f / 720 + y2 * (1.0f / 40320 + y2 * (-1.0f / 3628800)))));
        /* turn by q quarter turns: (cos, sin) -> (-sin, cos) per quarter */
        vs16 q1 = (vs16)((q & 1) != 0), q2 = (vs16)((q & 2) != 0);
        vf16 cs = (vf16)(((vs16)cy & ~q1) | ((vs16)sy & q1)); /* cos or sin */
        vf16 sn = (vf16)(((vs16)sy & ~q1) | ((vs16)cy & q1));
        vs16 negc = q1 ^ q2, negs = q2;                       /* signs of the turned pair */
        cs = (vf16)((vs16)cs ^ (negc & INT32_MIN));
        sn = (vf16)((vs16)sn ^ (negs & INT32_MIN));
        vf16 z0 = r * cs, z1 = r * sn;
        vf16 lo = SHUFFLE2(vs16, z0, z1, LO_IDX), hi = SHUFFLE2(vs16, z0, z1, HI_IDX);
        size_t m = n - i < 2 * NL ? n - i : 2 * NL;
        if (m == 2 * NL) {
            memcpy(dst + i, &lo, sizeof lo);
            memcpy(dst + i + NL, &hi, sizeof hi);
        } else {
            float tmp[2 * NL];
            memcpy(tmp, &lo, sizeof lo);
            memcpy(tmp + NL, &hi, sizeof hi);
            memcpy(dst + i, tmp, m * sizeof(float));
        }
    }
}

void vil_random_erase(float *x, int c, int h, int w, float p, VilRng *rng) {
    if (rng_double(rng) > p) return; /* timm: random.random() > probability skips */
    double area = (double)h * w;
    double la0 = log(0.3), la1 = log(1.0 / 0.3);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = rng_uniform2(rng, 0.02, 1.0 / 3.0) * area / 1;
        double aspect = exp(rng_uniform2(rng, la0, la1));
        int eh = py_round(sqrt(target * aspect));
        int ew = py_round(sqrt(target / aspect));
        if (ew < w && eh < h) {
            int top = (int)vil_rng_below(rng, (uint32_t)(h - eh + 1));
            int left = (int)vil_rng_below(rng, (uint32_t)(w - ew + 1));
            uint64_t key = vil_rng_u64(rng);
            uint32_t ctr = 0; /* Box-Muller pairs used so far */
            for (int ch = 0; ch < c; ch++)
                for (int y = top; y < top + eh; y++, ctr += (uint32_t)(ew + 1) / 2)
                    vil_normal_fill(x + ((size_t)ch * h + y) * w + left, (size_t)ew, key, ctr);
            return;
        }
    }
}

/* What follows the crop or the canvas on the res x res picture in buf: RandAugment (buf + npx
 * is its scratch), normalize, erase. */
static void train_finish(unsigned char *buf, const VilTrainTransform *t, VilRng *rng, float *out) {
    const int res = t->res, c = t->channels;
    const size_t npx = (size_t)res * res * c;
    if (t->randaug_n > 0) {
        VilRandAugment ra;
        vil_randaugment_default(&ra, t->mean);
        ra.n = t->randaug_n;
        ra.m = t->randaug_m;
        ra.mstd = t->randaug_mstd;
        ra.inc = t->randaug_inc;
        ra.interp = t->randaug_interp;
        VilImage im = {res, res, c, buf};
        vil_randaugment_apply(&im, buf + npx, &ra, rng);
    }
    vil_normalize_chw(out, buf, res, res, c, t->mean, t->std);
    if (t->reprob > 0) vil_random_erase(out, c, res, res, t->reprob, rng);
}

/* Everything after the crop was chosen: resize the crop view (with a sub-pixel box when it
 * comes DCT-scaled), flip, then train_finish. 0, or -1 (reported) without the memory for it. */
static int train_from_view(const unsigned char *view, int vw, int vh, size_t stride, const double *box,
                           const VilTrainTransform *t, VilRng *rng, float *out) {
    const int res = t->res, c = t->channels;
    const size_t npx = (size_t)res * res * c;
    unsigned char *buf = vil_try_malloc(2 * npx); /* the image and RandAugment's scratch */
    if (!buf) return -1;
    /* the flip is drawn after the crop as before (the resize draws nothing) and done by
     * the resize itself */
    const int flip = rng_double(rng) < t->hflip;
    if (vil_resize_bicubic_box_flip(buf, view, vw, vh, stride, c, res, res, box, flip) != 0) {
        free(buf);
        return -1;
    }
    train_finish(buf, t, rng, out);
    free(buf);
    return 0;
}

/* The canvas in place of the crop: the flip drawn first (as the crop path draws it before any
 * pixel is made), then the unscaled item placed, mirrored when flipped, then train_finish.
 * 0, or -1 (reported): no memory, or an item larger than the canvas. */
static int train_from_canvas(const VilImage *im, const VilTrainTransform *t, VilRng *rng, float *out) {
    const size_t npx = (size_t)t->res * t->res * t->channels;
    unsigned char *buf = vil_try_malloc(2 * npx); /* the canvas and RandAugment's scratch */
    if (!buf) return -1;
    const int flip = rng_double(rng) < t->hflip;
    if (vil_canvas_place(buf, t->res, im->px, im->w, im->h, im->c, (VilCanvasBg)t->canvas_bg, flip, rng, NULL,
                         NULL) != 0) {
        free(buf);
        return -1;
    }
    train_finish(buf, t, rng, out);
    free(buf);
    return 0;
}

static int train_args_ok(const VilTrainTransform *t) {
    return t && t->res > 0 && (t->channels == 1 || t->channels == 3) && t->scale_min > 0 &&
           t->scale_max >= t->scale_min && t->ratio_min > 0 && t->ratio_max > 0 &&
           (t->canvas == 0 || t->canvas == t->res) &&
           (t->canvas_bg == VIL_CANVAS_ZERO || t->canvas_bg == VIL_CANVAS_NOISE);
}

/* Convert an image to c channels as PIL's convert('RGB') / convert('L') would. 0, or -1
 * (reported) without the memory for it. */
static int convert_channels(VilImage *dst, const VilImage *src, int c) {
    if (vil_image_alloc(dst, src->w, src->h, c) != 0) return -1;
    size_t n = (size_t)src->w * src->h;
    if (c == 1) {
        vil_rgb_to_gray(dst->px, src->px, n);
    } else {
        for (size_t i = 0; i < n; i++) dst->px[3 * i] = dst->px[3 * i + 1] = dst->px[3 * i + 2] = src->px[i];
    }
    return 0;
}

int vil_transform_train(const VilImage *img, const VilTrainTransform *t, VilRng *rng, float *out) {
    if (!img || !img->px || img->w <= 0 || img->h <= 0 || (img->c != 1 && img->c != 3) || !train_args_ok(t))
        return -1;
    VilImage conv = {0};
    const VilImage *im = img;
    if (img->c != t->channels) {
        if (convert_channels(&conv, img, t->channels) != 0) return -1;
        im = &conv;
    }
    int rc;
    if (t->canvas > 0) {
        rc = train_from_canvas(im, t, rng, out);
    } else {
        int left, top, cw, ch;
        vil_rrc_params(im->w, im->h, t->scale_min, t->scale_max, t->ratio_min, t->ratio_max, rng, &left, &top, &cw,
                       &ch);
        const int c = im->c;
        const size_t stride = (size_t)im->w * c;
        rc = train_from_view(im->px + (size_t)top * stride + (size_t)left * c, cw, ch, stride, NULL, t, rng, out);
    }
    vil_image_free(&conv);
    return rc;
}

int vil_jpeg_dct_denom(int cw, int ch, int res) {
    /* 1/2 once the crop is twice the output on both sides, 1/4 at four times. Not 1/8:
     * there libjpeg-turbo keeps only each block's DC term (a plain 8x8 box average), which
     * measured 2.5 levels mean difference from the full-resolution path against about 1 at
     * 1/4 (tests/test_transform.c), for little further saving: entropy decoding, which no
     * scale avoids, dominates by then. */
    int d = 1;
    while (d < 4 && cw >= 2 * d * res && ch >= 2 * d * res) d *= 2;
    return d;
}

int vil_jpeg_fast_scale(int cw, int ch, int res) {
    /* Powers of two only: libjpeg-turbo 2.1's 3x3, 5x5, 6x6 and 7x7 IDCTs (and the 10x10,
     * 12x12, 14x14 ones it then uses for 4:2:0 chroma) are plain C, so 5/8 .. 7/8 decode
     * measured 10-50% SLOWER than 8/8 (PERF_NOTES.md), and 3/8 slower than 4/8. Not 1/8: the
     * DC-only block average saved ~2% over 2/8 for about twice the error. */
    int m = 2;
    while (m < 8 && ((long long)cw * m < 8LL * res || (long long)ch * m < 8LL * res)) m *= 2;
    return m;
}

#ifndef FAST_JPEG_FLAGS
/* Fast-mode decode options: merged upsampling (decode -4% in `--stages`). JDCT_IFAST measured
 * no faster within the noise (PERF_NOTES.md): the IDCT stays ISLOW. */
#define FAST_JPEG_FLAGS VIL_JPEG_MERGED
#endif

/* The scale m / 8 a cw x ch crop is decoded at in t->decode's mode (exact mode's 1/d is
 * (8/d) / 8), and the decoder flags. */
static int crop_scale(const VilTrainTransform *t, int cw, int ch, int scale_bias, int *flags) {
    if (t->decode != VIL_DECODE_FAST) {
        *flags = 0;
        return 8 / vil_jpeg_dct_denom(cw, ch, t->res);
    }
    int m = vil_jpeg_fast_scale(cw, ch, t->res);
    for (int b = scale_bias; b < 0 && m > 1; b++) m /= 2;
    for (int b = scale_bias; b > 0 && m < 8; b--) m *= 2;
    *flags = FAST_JPEG_FLAGS;
    return m;
}

/* The resize input of the crop (left, top, cw, ch) inside a region decoded at scale m / 8
 * whose top-left scaled pixel is (rx, ry): cr's view and box (cr->reg is left alone). The
 * view depends only on the crop and the scale, never on how far the region reaches past it,
 * so one region can serve several crops. */
static void crop_view(const VilImage *reg, int rx, int ry, int m, int left, int top, int cw, int ch,
                      VilTrainCrop *cr) {
    cr->scale_num = m;
    cr->has_box = 0;
    if (m == 8) {
        cr->vx = left - rx;
        cr->vy = top - ry;
        cr->vw = cw;
        cr->vh = ch;
        return;
    }
    /* the crop in the scaled image's coordinates (scaled pixel i covers full-resolution
     * [8 i / m, 8 (i + 1) / m)), relative to the decoded region: a sub-pixel box for the
     * resize, whose filter taps are clamped to the whole scaled pixels that cover it */
    double bx0 = (double)left * m / 8 - rx, bx1 = (double)(left + cw) * m / 8 - rx;
    double by0 = (double)top * m / 8 - ry, by1 = (double)(top + ch) * m / 8 - ry;
    int ix0 = (int)floor(bx0), iy0 = (int)floor(by0);
    int ix1 = (int)ceil(bx1), iy1 = (int)ceil(by1);
    if (ix0 < 0) ix0 = 0;
    if (iy0 < 0) iy0 = 0;
    if (ix1 > reg->w) ix1 = reg->w;
    if (iy1 > reg->h) iy1 = reg->h;
    cr->vx = ix0;
    cr->vy = iy0;
    cr->vw = ix1 - ix0;
    cr->vh = iy1 - iy0;
    cr->has_box = 1;
    cr->box[0] = bx0 - ix0;
    cr->box[1] = by0 - iy0;
    cr->box[2] = bx1 - ix0 > cr->vw ? cr->vw : bx1 - ix0;
    cr->box[3] = by1 - iy0 > cr->vh ? cr->vh : by1 - iy0;
}

int vil_train_decode_crop(const unsigned char *buf, size_t n, const VilTrainTransform *t, int left, int top,
                          int cw, int ch, int scale_bias, VilTrainCrop *cr) {
    memset(cr, 0, sizeof *cr);
    int flags, m = crop_scale(t, cw, ch, scale_bias, &flags), rx, ry;
    if (vil_jpeg_decode_region_scaled(buf, n, t->channels, left, top, cw, ch, m, flags, &cr->reg, &rx,
                                      &ry) != 0)
        return -1;
    crop_view(&cr->reg, rx, ry, m, left, top, cw, ch, cr);
    return 0;
}

static int train_from_crop(const VilTrainCrop *cr, const VilTrainTransform *t, VilRng *rng, float *out) {
    const size_t stride = (size_t)cr->reg.w * cr->reg.c;
    return train_from_view(cr->reg.px + (size_t)cr->vy * stride + (size_t)cr->vx * cr->reg.c, cr->vw, cr->vh, stride,
                    cr->has_box ? cr->box : NULL, t, rng, out);
}

/* Up to this many samples share one decode in vil_transform_train_file_group; a larger group
 * is done in pieces. */
#define GROUP_MAX 16

/* vil_transform_train_file_group with scale_bias (see vil_transform_train_file_bias). */
static int train_file_group(const unsigned char *buf, size_t n, const VilTrainTransform *t, int count,
                            VilRng *rngs, float *const *outs, int scale_bias, int *decodes) {
    if (decodes) *decodes = 0;
    if (!train_args_ok(t) || count < 1) {
        vil_error("bad training transform configuration");
        return -1;
    }
    /* a canvas takes the whole item: nothing to gain from a region decode */
    if (t->canvas > 0 || vil_image_format(buf, n) != VIL_FORMAT_JPEG) {
        VilImage im;
        if (vil_image_decode(buf, n, t->channels, &im) != 0) return -1;
        if (decodes) *decodes = 1;
        int rc = 0;
        for (int i = 0; i < count && rc == 0; i++) rc = vil_transform_train(&im, t, &rngs[i], outs[i]);
        vil_image_free(&im);
        if (rc) vil_error("training transform failed");
        return rc;
    }
    int W, H;
    if (vil_image_info(buf, n, &W, &H, NULL) != 0) return -1;
    if (vil_image_check_size("JPEG", W, H) != 0) return -1;
    for (int g0 = 0; g0 < count; g0 += GROUP_MAX) {
        int cnt = count - g0 < GROUP_MAX ? count - g0 : GROUP_MAX;
        /* every crop first (each from its own stream, as a lone sample draws it) */
        int box[GROUP_MAX][4], scale[GROUP_MAX], flags[GROUP_MAX], done[GROUP_MAX] = {0};
        for (int i = 0; i < cnt; i++) {
            int *b = box[i];
            vil_rrc_params(W, H, t->scale_min, t->scale_max, t->ratio_min, t->ratio_max, &rngs[g0 + i], &b[0],
                           &b[1], &b[2], &b[3]);
            scale[i] = crop_scale(t, b[2], b[3], scale_bias, &flags[i]);
        }
        /* the crops decoded at the same scale share one region: their bounding box */
        for (int i = 0; i < cnt; i++) {
            if (done[i]) continue;
            int x0 = box[i][0], y0 = box[i][1], x1 = x0 + box[i][2], y1 = y0 + box[i][3];
            for (int k = i + 1; k < cnt; k++)
                if (!done[k] && scale[k] == scale[i] && flags[k] == flags[i]) {
                    if (box[k][0] < x0) x0 = box[k][0];
                    if (box[k][1] < y0) y0 = box[k][1];
                    if (box[k][0] + box[k][2] > x1) x1 = box[k][0] + box[k][2];
                    if (box[k][1] + box[k][3] > y1) y1 = box[k][1] + box[k][3];
                }
            VilTrainCrop cr;
            memset(&cr, 0, sizeof cr);
            int rx, ry;
            if (vil_jpeg_decode_region_scaled(buf, n, t->channels, x0, y0, x1 - x0, y1 - y0, scale[i], flags[i],
                                              &cr.reg, &rx, &ry) != 0)
                return -1;
            if (decodes) (*decodes)++;
            for (int k = i; k < cnt; k++)
                if (!done[k] && scale[k] == scale[i] && flags[k] == flags[i]) {
                    crop_view(&cr.reg, rx, ry, scale[k], box[k][0], box[k][1], box[k][2], box[k][3], &cr);
                    if (train_from_crop(&cr, t, &rngs[g0 + k], outs[g0 + k]) != 0) {
                        vil_image_free(&cr.reg);
                        return -1;
                    }
                    done[k] = 1;
                }
            vil_image_free(&cr.reg);
        }
    }
    return 0;
}

int vil_transform_train_file_group(const unsigned char *buf, size_t n, const VilTrainTransform *t, int count,
                                   VilRng *rngs, float *const *outs, int *decodes) {
    return train_file_group(buf, n, t, count, rngs, outs, 0, decodes);
}

int vil_transform_train_file_bias(const unsigned char *buf, size_t n, const VilTrainTransform *t, VilRng *rng,
                                  int scale_bias, float *out) {
    return train_file_group(buf, n, t, 1, rng, &out, scale_bias, NULL);
}

int vil_transform_train_file(const unsigned char *buf, size_t n, const VilTrainTransform *t, VilRng *rng,
                             float *out) {
    return vil_transform_train_file_bias(buf, n, t, rng, 0, out);
}
