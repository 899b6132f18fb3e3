/* randaugment.c: timm's RandAugment on 8-bit HWC images. Every op reproduces the arithmetic
 * of the Pillow code timm calls (lookup tables from ImageOps, float blends from Blend.c,
 * the float SMOOTH kernel of Filter.c, the double-precision affine samplers of Geometry.c),
 * so that, given the same draws, the output matches PIL's pixel for pixel.
 *
 * Interpolation: timm's transforms_imagenet_train passes the training interpolation to
 * RandAugment (aa_params['interpolation']), and DeiT/ViM train with 'bicubic', so the
 * geometric ops default to Pillow's BICUBIC affine sampler (a = -1 cubic, no antialias). */
/* Pillow's float/double sequences, no fused multiply-adds (which round differently) */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#else
#pragma GCC optimize("fp-contract=off")
#endif
/* 4 x double vectors only pass between static inline helpers here, never across an ABI
 * boundary, so the "ABI changes without AVX" note is moot for builds without -mavx */
#pragma GCC diagnostic ignored "-Wpsabi"

#include "data/randaugment.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const VIL_RA_OP_NAMES[VIL_RA_NUM_OPS] = {
    "AutoContrast",         "Equalize",           "Invert",          "Rotate",
    "PosterizeIncreasing",  "SolarizeIncreasing", "SolarizeAdd",     "ColorIncreasing",
    "ContrastIncreasing",   "BrightnessIncreasing", "SharpnessIncreasing", "ShearX",
    "ShearY",               "TranslateXRel",      "TranslateYRel",
};

void vil_randaugment_default(VilRandAugment *ra, const float *mean) {
    memset(ra, 0, sizeof *ra);
    ra->n = 2;
    ra->m = 9.0f;
    ra->mstd = 0.5f;
    ra->mmax = 10.0f;
    ra->inc = 1;
    ra->prob = 0.5f;
    ra->translate_pct = 0.45f;
    ra->interp = VIL_INTERP_BICUBIC;
    for (int c = 0; c < 3; c++) {
        /* timm: min(255, round(255 * x)), Python's round-half-even on a double */
        double v = nearbyint(255.0 * (double)mean[c]);
        ra->fill[c] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* lookup-table ops (ImageOps)                                                                 */

static void apply_lut(VilImage *im, const unsigned char lut[][256]) {
    size_t n = (size_t)im->w * im->h;
    int c = im->c;
    unsigned char *p = im->px;
    if (c == 3) {
        for (size_t i = 0; i < n; i++, p += 3) {
            p[0] = lut[0][p[0]];
            p[1] = lut[1][p[1]];
            p[2] = lut[2][p[2]];
        }
    } else {
        for (size_t i = 0; i < n; i++) p[i] = lut[0][p[i]];
    }
}

static void apply_same_lut(VilImage *im, const unsigned char lut[256]) {
    size_t n = (size_t)im->w * im->h * im->c;
    for (size_t i = 0; i < n; i++) im->px[i] = lut[im->px[i]];
}

static void histograms(const VilImage *im, uint32_t h[][256]) {
    memset(h, 0, sizeof(uint32_t) * 256 * im->c);
    size_t n = (size_t)im->w * im->h;
    for (size_t i = 0; i < n; i++)
        for (int ch = 0; ch < im->c; ch++) h[ch][im->px[i * im->c + ch]]++;
}

void vil_ra_autocontrast(VilImage *im) {
    uint32_t h[3][256];
    unsigned char lut[3][256];
    histograms(im, h);
    for (int ch = 0; ch < im->c; ch++) {
        int lo = 0, hi = 255;
        while (lo < 256 && !h[ch][lo]) lo++;
        while (hi >= 0 && !h[ch][hi]) hi--;
        if (hi <= lo) {
            for (int i = 0; i < 256; i++) lut[ch][i] = (unsigned char)i;
            continue;
        }
        double scale = 255.0 / (hi - lo);
        double offset = -lo * scale;
        for (int i = 0; i < 256; i++) {
            int v = (int)(i * scale + offset); /* Python int(): toward zero */
            lut[ch][i] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
    apply_lut(im, (const unsigned char(*)[256])lut);
}

void vil_ra_equalize(VilImage *im) {
    uint32_t h[3][256];
    unsigned char lut[3][256];
    histograms(im, h);
    for (int ch = 0; ch < im->c; ch++) {
        int64_t total = 0, last = 0;
        int nonzero = 0;
        for (int i = 0; i < 256; i++)
            if (h[ch][i]) {
                nonzero++;
                total += h[ch][i];
                last = h[ch][i];
            }
        int64_t step = nonzero <= 1 ? 0 : (total - last) / 255;
        if (!step) {
            for (int i = 0; i < 256; i++) lut[ch][i] = (unsigned char)i;
            continue;
        }
        int64_t n = step / 2;
        for (int i = 0; i < 256; i++) {
            int64_t v = n / step; /* can reach 256; Pillow's point() clips the table to 8 bits */
            lut[ch][i] = (unsigned char)(v > 255 ? 255 : v);
            n += h[ch][i];
        }
    }
    apply_lut(im, (const unsigned char(*)[256])lut);
}

void vil_ra_invert(VilImage *im) {
    size_t n = (size_t)im->w * im->h * im->c;
    for (size_t i = 0; i < n; i++) im->px[i] = (unsigned char)(255 - im->px[i]);
}

void vil_ra_posterize(VilImage *im, int bits) {
    if (bits >= 8) return; /* timm returns the image as is */
    if (bits < 0) bits = 0;
    unsigned char lut[256];
    int mask = ~((1 << (8 - bits)) - 1);
    for (int i = 0; i < 256; i++) lut[i] = (unsigned char)(i & mask);
    apply_same_lut(im, lut);
}

void vil_ra_solarize(VilImage *im, int thresh) {
    unsigned char lut[256];
    for (int i = 0; i < 256; i++) lut[i] = (unsigned char)(i < thresh ? i : 255 - i);
    apply_same_lut(im, lut);
}

void vil_ra_solarize_add(VilImage *im, int add, int thresh) {
    unsigned char lut[256];
    for (int i = 0; i < 256; i++) {
        int v = i < thresh ? i + add : i;
        lut[i] = (unsigned char)(v > 255 ? 255 : v < 0 ? 0 : v);
    }
    apply_same_lut(im, lut);
}

/* ------------------------------------------------------------------------------------------ */
/* enhance ops: Image.blend(degenerate, image, factor)                                         */

/* Blend.c: alpha arrives as a C float; inside [0, 1] the float result is truncated, outside
 * it is clamped first. Shortcuts at exactly 0 and 1. out may alias img. */
static void blend(unsigned char *out, const unsigned char *deg, const unsigned char *img, size_t n,
                  float alpha) {
    if (alpha == 0.0f) {
        memmove(out, deg, n);
        return;
    }
    if (alpha == 1.0f) {
        if (out != img) memmove(out, img, n);
        return;
    }
    if (alpha >= 0 && alpha <= 1.0) {
        for (size_t i = 0; i < n; i++)
            out[i] = (unsigned char)((int)deg[i] + alpha * ((int)img[i] - (int)deg[i]));
    } else {
        for (size_t i = 0; i < n; i++) {
            float t = (float)((int)deg[i] + alpha * ((int)img[i] - (int)deg[i]));
            out[i] = t <= 0.0f ? 0 : t >= 255.0f ? 255 : (unsigned char)t;
        }
    }
}

/* blend against a constant degenerate value */
static void blend_const(unsigned char *px, size_t n, int deg, float alpha) {
    if (alpha == 1.0f) return;
    if (alpha == 0.0f) {
        memset(px, deg, n);
        return;
    }
    unsigned char lut[256]; /* the result depends on the pixel value only */
    for (int v = 0; v < 256; v++) {
        if (alpha >= 0 && alpha <= 1.0) {
            lut[v] = (unsigned char)(deg + alpha * (v - deg));
        } else {
            float t = (float)(deg + alpha * (v - deg));
            lut[v] = t <= 0.0f ? 0 : t >= 255.0f ? 255 : (unsigned char)t;
        }
    }
    for (size_t i = 0; i < n; i++) px[i] = lut[px[i]];
}

void vil_ra_color(VilImage *im, unsigned char *scratch, double factor) {
    if (im->c == 1) return; /* convert("L").convert("L") is the image itself: blend = identity */
    size_t n = (size_t)im->w * im->h;
    vil_rgb_to_gray(scratch, im->px, n);
    for (size_t i = n; i-- > 0;) /* expand gray to RGB in place, back to front */
        scratch[3 * i] = scratch[3 * i + 1] = scratch[3 * i + 2] = scratch[i];
    blend(im->px, scratch, im->px, n * 3, (float)factor);
}

void vil_ra_contrast(VilImage *im, double factor) {
    size_t n = (size_t)im->w * im->h;
    uint64_t sum = 0;
    if (im->c == 3) {
        for (size_t i = 0; i < n; i++) {
            const unsigned char *p = im->px + 3 * i;
            sum += (p[0] * 19595u + p[1] * 38470u + p[2] * 7471u + 0x8000u) >> 16;
        }
    } else {
        for (size_t i = 0; i < n; i++) sum += im->px[i];
    }
    /* ImageStat's mean is a double; Contrast takes int(mean + 0.5) */
    double mean = (double)sum / (double)n;
    int m = (int)(mean + 0.5);
    blend_const(im->px, n * im->c, m, (float)factor);
}

void vil_ra_brightness(VilImage *im, double factor) {
    blend_const(im->px, (size_t)im->w * im->h * im->c, 0, (float)factor);
}

/* ImageFilter.SMOOTH: 3x3 kernel (1 1 1 / 1 5 1 / 1 1 1) / 13 in float, +0.5 rounding,
 * border pixels copied. dst (h, w, c). */
static void smooth3x3(unsigned char *dst, const unsigned char *src, int w, int h, int c) {
    const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
    size_t row = (size_t)w * c;
    memcpy(dst, src, (size_t)h * row);
    if (w < 3 || h < 3) return;
    for (int y = 1; y < h - 1; y++) {
        const unsigned char *a = src + (size_t)(y + 1) * row; /* Pillow: kernel[0..2] on y+1 */
        const unsigned char *b = src + (size_t)y * row;
        const unsigned char *d = src + (size_t)(y - 1) * row;
        unsigned char *o = dst + (size_t)y * row;
        for (int x = c; x < (w - 1) * c; x++) {
            float ss = 0.5f;
            ss += (float)a[x - c] * k1 + (float)a[x] * k1 + (float)a[x + c] * k1;
            ss += (float)b[x - c] * k1 + (float)b[x] * k5 + (float)b[x + c] * k1;
            ss += (float)d[x - c] * k1 + (float)d[x] * k1 + (float)d[x + c] * k1;
            o[x] = ss <= 0.0f ? 0 : ss >= 255.0f ? 255 : (unsigned char)ss;
        }
    }
}

void vil_ra_sharpness(VilImage *im, unsigned char *scratch, double factor) {
    smooth3x3(scratch, im->px, im->w, im->h, im->c);
    blend(im->px, scratch, im->px, (size_t)im->w * im->h * im->c, (float)factor);
}

/* ------------------------------------------------------------------------------------------ */
/* geometric ops (Image.transform AFFINE)                                                      */

static inline int iclamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Geometry.c's FLOOR, i.e. floor for the doubles that occur here */
static inline int pil_floor(double v) { return v < 0.0 ? (int)floor(v) : (int)v; }

static inline double cubic4(double v1, double v2, double v3, double v4, double d) {
    /* Geometry.c's BICUBIC macro: the a = -1 cubic convolution */
    double p1 = v2;
    double p2 = -v1 + v3;
    double p3 = 2 * (v1 - v2) + v3 - v4;
    double p4 = -v1 + v2 - v3 + v4;
    return p1 + d * (p2 + d * (p3 + d * p4));
}

typedef double v4d __attribute__((vector_size(32)));

/* cubic4 on all channels at once: lane-wise the same double operations, so bit-identical */
static inline v4d cubic4v(v4d v1, v4d v2, v4d v3, v4d v4, double d) {
    v4d p1 = v2;
    v4d p2 = -v1 + v3;
    v4d p3 = 2 * (v1 - v2) + v3 - v4;
    v4d p4 = -v1 + v2 - v3 + v4;
    return p1 + d * (p2 + d * (p3 + d * p4));
}

typedef unsigned char v4qi __attribute__((vector_size(4)));
typedef int v4si __attribute__((vector_size(16)));

/* One pixel's channels as doubles. Where 4 bytes are readable, one 32-bit load and two
 * conversions (the 4th lane, the next pixel's red, is computed and ignored). */
static inline v4d load_px(const unsigned char *p, int c, const unsigned char *end) {
    if (c == 3 && p + 4 <= end) {
        v4qi b;
        memcpy(&b, p, 4);
        return __builtin_convertvector(__builtin_convertvector(b, v4si), v4d);
    }
    v4d v = {p[0], c == 3 ? p[1] : 0, c == 3 ? p[2] : 0, 0};
    return v;
}

void vil_ra_affine(unsigned char *dst, const VilImage *src, const double m[6], int interp,
                   const unsigned char *fill) {
    const int w = src->w, h = src->h, c = src->c;
    const unsigned char *in = src->px, *end = src->px + (size_t)w * h * c;
    const size_t row = (size_t)w * c;
    for (int y = 0; y < h; y++) {
        unsigned char *o = dst + (size_t)y * row;
        for (int x = 0; x < w; x++, o += c) {
            double xi = x + 0.5, yi = y + 0.5;
            double xin = m[0] * xi + m[1] * yi + m[2];
            double yin = m[3] * xi + m[4] * yi + m[5];
            if (interp == VIL_INTERP_NEAREST) {
                /* Pillow routes NEAREST through other fixed-point paths; not used by timm */
                int xx = pil_floor(xin), yy = pil_floor(yin);
                if (xx < 0 || xx >= w || yy < 0 || yy >= h) {
                    memcpy(o, fill, (size_t)c);
                } else {
                    memcpy(o, in + (size_t)yy * row + (size_t)xx * c, (size_t)c);
                }
                continue;
            }
            if (xin < 0.0 || xin >= w || yin < 0.0 || yin >= h) {
                memcpy(o, fill, (size_t)c);
                continue;
            }
            xin -= 0.5;
            yin -= 0.5;
            int x0 = pil_floor(xin), y0 = pil_floor(yin);
            double dx = xin - x0, dy = yin - y0;
            if (interp == VIL_INTERP_BILINEAR) {
                int xa = iclamp(x0, 0, w - 1) * c, xb = iclamp(x0 + 1, 0, w - 1) * c;
                const unsigned char *r1 = in + (size_t)iclamp(y0, 0, h - 1) * row;
                int has2 = y0 + 1 >= 0 && y0 + 1 < h;
                const unsigned char *r2 = in + (size_t)(has2 ? y0 + 1 : 0) * row;
                for (int ch = 0; ch < c; ch++) {
                    double v1 = r1[xa + ch] + (r1[xb + ch] - r1[xa + ch]) * dx;
                    double v2 = has2 ? r2[xa + ch] + (r2[xb + ch] - r2[xa + ch]) * dx : v1;
                    double v = v1 + (v2 - v1) * dy;
                    o[ch] = (unsigned char)v; /* Pillow truncates */
                }
                continue;
            }
            x0--;
            y0--;
            const unsigned char *rp[4];
            int xs[4];
            for (int k = 0; k < 4; k++) xs[k] = iclamp(x0 + k, 0, w - 1) * c;
            /* Rows of the 4x4 neighbourhood: the first is clamped, a later one outside the
             * image repeats the previous row's value, as Geometry.c does: the same as
             * repeating the previous row. */
            rp[0] = in + (size_t)iclamp(y0, 0, h - 1) * row;
            for (int k = 1; k < 4; k++) rp[k] = (y0 + k >= 0 && y0 + k < h) ? in + (size_t)(y0 + k) * row : rp[k - 1];
            /* With d == 0 the cubic returns its second sample exactly (p1 + 0 * (...) == p1),
             * so shears and translations, where dx or dy is 0 everywhere, skip dead work. */
            v4d res;
#define HROW(r) (dx == 0.0 ? load_px((r) + xs[1], c, end)                                           \
                           : cubic4v(load_px((r) + xs[0], c, end), load_px((r) + xs[1], c, end),         \
                                     load_px((r) + xs[2], c, end), load_px((r) + xs[3], c, end), dx))
            if (dy == 0.0) res = HROW(rp[1]);
            else res = cubic4v(HROW(rp[0]), HROW(rp[1]), HROW(rp[2]), HROW(rp[3]), dy);
#undef HROW
            for (int ch = 0; ch < c; ch++) {
                double r = res[ch];
                o[ch] = r <= 0.0 ? 0 : r >= 255.0 ? 255 : (unsigned char)r;
            }
        }
    }
}

/* Python's float modulo: the result takes the divisor's sign */
static double py_mod(double a, double b) {
    double r = fmod(a, b);
    if (r != 0.0) {
        if ((b < 0) != (r < 0)) r += b;
    } else {
        r = copysign(0.0, b);
    }
    return r;
}

/* Python's round(v, 15): correctly rounded through a decimal string, as CPython does */
static double py_round15(double v) {
    char s[64];
    snprintf(s, sizeof s, "%.15f", v);
    return strtod(s, NULL);
}

void vil_ra_rotate(VilImage *im, unsigned char *scratch, double degrees, int interp,
                   const unsigned char *fill) {
    const int w = im->w, h = im->h, c = im->c;
    double angle = py_mod(degrees, 360.0);
    if (angle == 0.0) return;
    if (angle == 180.0 || ((angle == 90.0 || angle == 270.0) && w == h)) {
        /* Pillow transposes exactly instead of resampling */
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                int sx, sy;
                if (angle == 180.0) { sx = w - 1 - x; sy = h - 1 - y; }
                else if (angle == 90.0) { sx = w - 1 - y; sy = x; }   /* counter-clockwise */
                else { sx = y; sy = h - 1 - x; }
                memcpy(scratch + ((size_t)y * w + x) * c, im->px + ((size_t)sy * w + sx) * c, (size_t)c);
            }
        memcpy(im->px, scratch, (size_t)w * h * c);
        return;
    }
    double cx = w / 2.0, cy = h / 2.0;
    double a = -(angle * (M_PI / 180.0)); /* -math.radians(angle) */
    double m[6] = {py_round15(cos(a)), py_round15(sin(a)), 0.0, py_round15(-sin(a)), py_round15(cos(a)), 0.0};
    double tx = -cx - 0.0, ty = -cy - 0.0;
    m[2] = m[0] * tx + m[1] * ty + 0.0;
    m[5] = m[3] * tx + m[4] * ty + 0.0;
    m[2] += cx;
    m[5] += cy;
    vil_ra_affine(scratch, im, m, interp, fill);
    memcpy(im->px, scratch, (size_t)w * h * c);
}

static void affine_inplace(VilImage *im, unsigned char *scratch, const double m[6], int interp,
                           const unsigned char *fill) {
    vil_ra_affine(scratch, im, m, interp, fill);
    memcpy(im->px, scratch, (size_t)im->w * im->h * im->c);
}

/* ------------------------------------------------------------------------------------------ */
/* RandAugment                                                                                 */

static int op_is_signed(VilRaOp op, int inc) {
    switch (op) {
    case VIL_RA_ROTATE:
    case VIL_RA_SHEAR_X:
    case VIL_RA_SHEAR_Y:
    case VIL_RA_TRANSLATE_X_REL:
    case VIL_RA_TRANSLATE_Y_REL: return 1;
    case VIL_RA_COLOR:
    case VIL_RA_CONTRAST:
    case VIL_RA_BRIGHTNESS:
    case VIL_RA_SHARPNESS: return inc; /* _enhance_increasing_level_to_arg negates */
    default: return 0;
    }
}

static int op_is_geometric(VilRaOp op) {
    return op == VIL_RA_ROTATE || op == VIL_RA_SHEAR_X || op == VIL_RA_SHEAR_Y ||
           op == VIL_RA_TRANSLATE_X_REL || op == VIL_RA_TRANSLATE_Y_REL;
}

/* Python floats from our float fields: 0.45f is 0.449999988..., timm's 0.45 a double */
static double py_float(float v) {
    for (int prec = 1; prec <= 9; prec++) {
        char s[32];
        snprintf(s, sizeof s, "%.*g", prec, (double)v);
        if (strtof(s, NULL) == v) return strtod(s, NULL);
    }
    return v;
}

void vil_randaugment_op(VilImage *im, unsigned char *scratch, const VilRandAugment *ra, VilRaOp op,
                        double magnitude, int sign, int interp) {
    const double level = magnitude / 10.0; /* timm's (level / _LEVEL_DENOM) */
    const double s = sign < 0 ? -1.0 : 1.0;
    unsigned char fill[3] = {ra->fill[0], ra->fill[1], ra->fill[2]};
    switch (op) {
    case VIL_RA_AUTOCONTRAST: vil_ra_autocontrast(im); break;
    case VIL_RA_EQUALIZE: vil_ra_equalize(im); break;
    case VIL_RA_INVERT: vil_ra_invert(im); break;
    case VIL_RA_ROTATE: vil_ra_rotate(im, scratch, s * (level * 30.0), interp, fill); break;
    case VIL_RA_POSTERIZE: {
        int bits = (int)(level * 4);
        vil_ra_posterize(im, ra->inc ? 4 - bits : bits);
        break;
    }
    case VIL_RA_SOLARIZE: {
        int t = (int)(level * 256);
        vil_ra_solarize(im, ra->inc ? 256 - t : t);
        break;
    }
    case VIL_RA_SOLARIZE_ADD: vil_ra_solarize_add(im, (int)(level * 110), 128); break;
    case VIL_RA_COLOR:
    case VIL_RA_CONTRAST:
    case VIL_RA_BRIGHTNESS:
    case VIL_RA_SHARPNESS: {
        double f;
        if (ra->inc) {
            f = 1.0 + s * (level * .9);
            if (f < 0.1) f = 0.1;
        } else {
            f = level * 1.8 + 0.1;
        }
        if (op == VIL_RA_COLOR) vil_ra_color(im, scratch, f);
        else if (op == VIL_RA_CONTRAST) vil_ra_contrast(im, f);
        else if (op == VIL_RA_BRIGHTNESS) vil_ra_brightness(im, f);
        else vil_ra_sharpness(im, scratch, f);
        break;
    }
    case VIL_RA_SHEAR_X: {
        double m[6] = {1, s * (level * 0.3), 0, 0, 1, 0};
        affine_inplace(im, scratch, m, interp, fill);
        break;
    }
    case VIL_RA_SHEAR_Y: {
        double m[6] = {1, 0, 0, s * (level * 0.3), 1, 0};
        affine_inplace(im, scratch, m, interp, fill);
        break;
    }
    case VIL_RA_TRANSLATE_X_REL:
    case VIL_RA_TRANSLATE_Y_REL: {
        double pct = s * (level * py_float(ra->translate_pct));
        double m[6] = {1, 0, 0, 0, 1, 0};
        if (op == VIL_RA_TRANSLATE_X_REL) m[2] = pct * im->w;
        else m[5] = pct * im->h;
        affine_inplace(im, scratch, m, interp, fill);
        break;
    }
    default: break;
    }
}

static double rng_double(VilRng *rng) { /* [0, 1) with 53 bits, as Python's random() */
    return (double)(vil_rng_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
}

void vil_randaugment_apply(VilImage *im, unsigned char *scratch, const VilRandAugment *ra, VilRng *rng) {
    if (ra->n <= 0) return;
    int ops[16];
    int n = ra->n > 16 ? 16 : ra->n;
    /* np.random.choice(ops, n, replace=True): all picks first, then the ops in order */
    for (int k = 0; k < n; k++) ops[k] = (int)vil_rng_below(rng, VIL_RA_NUM_OPS);
    for (int k = 0; k < n; k++) {
        VilRaOp op = (VilRaOp)ops[k];
        if (ra->prob < 1.0f && rng_double(rng) > ra->prob) continue;
        double mag = ra->m;
        if (ra->mstd > 100.0f) mag = rng_double(rng) * ra->m; /* timm: mstd > 100 is uniform */
        else if (ra->mstd > 0.0f) mag = ra->m + (double)ra->mstd * vil_rng_normal(rng);
        double upper = ra->mmax > 0 ? ra->mmax : 10.0;
        mag = mag < 0.0 ? 0.0 : mag > upper ? upper : mag;
        int sign = 1;
        if (op_is_signed(op, ra->inc) && rng_double(rng) > 0.5) sign = -1;
        int interp = ra->interp;
        if (op_is_geometric(op) && interp == VIL_INTERP_RANDOM)
            interp = vil_rng_below(rng, 2) ? VIL_INTERP_BICUBIC : VIL_INTERP_BILINEAR;
        vil_randaugment_op(im, scratch, ra, op, mag, sign, interp);
    }
}
