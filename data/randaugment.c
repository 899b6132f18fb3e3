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

#if defined(__SSE2__)
#include <immintrin.h>
#endif

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

/* Table lookups are exact whatever the order, so they run 64 bytes at a time where
 * AVX-512 VBMI gives a byte permute over two 64-byte tables (bit 7 picks the pair). */
#if defined(__AVX512VBMI__) && defined(__AVX512BW__)
#define VIL_LUT_VBMI 1
typedef struct {
    __m512i t[4];
} Lut512;

static inline void lut512_init(Lut512 *l, const unsigned char lut[256]) {
    for (int k = 0; k < 4; k++) l->t[k] = _mm512_loadu_si512((const void *)(lut + 64 * k));
}

static inline __m512i lut512(const Lut512 *l, __m512i v) {
    __m512i lo = _mm512_permutex2var_epi8(l->t[0], v, l->t[1]);
    __m512i hi = _mm512_permutex2var_epi8(l->t[2], v, l->t[3]);
    return _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi);
}
#endif

/* px[i] = lut[px[i]] */
static void lut_bytes(unsigned char *restrict px, size_t n, const unsigned char lut[256]) {
    size_t i = 0;
#ifdef VIL_LUT_VBMI
    Lut512 l;
    lut512_init(&l, lut);
    for (; i + 64 <= n; i += 64)
        _mm512_storeu_si512((void *)(px + i), lut512(&l, _mm512_loadu_si512((const void *)(px + i))));
    if (i < n) {
        __mmask64 m = _cvtu64_mask64(~0ULL >> (64 - (n - i)));
        _mm512_mask_storeu_epi8(px + i, m, lut512(&l, _mm512_maskz_loadu_epi8(m, px + i)));
        i = n;
    }
#endif
    for (; i < n; i++) px[i] = lut[px[i]];
}

/* RGB with a table per channel: with VBMI, 192 bytes (64 pixels) at a time, each 64-byte
 * part with its fixed channel pattern blended from the three lookups. */
static void lut_rgb(unsigned char *restrict px, size_t npx, const unsigned char lut[3][256]) {
    size_t i = 0;
#ifdef VIL_LUT_VBMI
    Lut512 l[3];
    for (int k = 0; k < 3; k++) lut512_init(&l[k], lut[k]);
    __mmask64 is[3][3]; /* is[part][ch]: bytes of part (0..2) that belong to channel ch */
    for (int part = 0; part < 3; part++)
        for (int ch = 0; ch < 3; ch++) {
            uint64_t m = 0;
            for (int b = 0; b < 64; b++)
                if ((64 * part + b) % 3 == ch) m |= 1ULL << b;
            is[part][ch] = _cvtu64_mask64(m);
        }
    for (; i + 64 <= npx; i += 64) {
        unsigned char *p = px + 3 * i;
        for (int part = 0; part < 3; part++) {
            __m512i v = _mm512_loadu_si512((const void *)(p + 64 * part));
            __m512i r = lut512(&l[0], v);
            r = _mm512_mask_blend_epi8(is[part][1], r, lut512(&l[1], v));
            r = _mm512_mask_blend_epi8(is[part][2], r, lut512(&l[2], v));
            _mm512_storeu_si512((void *)(p + 64 * part), r);
        }
    }
#endif
    for (unsigned char *p = px + 3 * i; i < npx; i++, p += 3) {
        p[0] = lut[0][p[0]];
        p[1] = lut[1][p[1]];
        p[2] = lut[2][p[2]];
    }
}

static void apply_lut(VilImage *im, const unsigned char lut[][256]) {
    size_t n = (size_t)im->w * im->h;
    if (im->c == 3) lut_rgb(im->px, n, lut);
    else lut_bytes(im->px, n, lut[0]);
}

static void apply_same_lut(VilImage *im, const unsigned char lut[256]) {
    lut_bytes(im->px, (size_t)im->w * im->h * im->c, lut);
}

/* Per-channel histograms. Four partial tables per channel, so that runs of equal values
 * (flat regions) do not serialise on one counter. */
static void histograms(const VilImage *im, uint32_t h[][256]) {
    const int c = im->c;
    const size_t n = (size_t)im->w * im->h * c;
    const unsigned char *restrict p = im->px;
    uint32_t(*part)[256] = vil_calloc((size_t)4 * c, sizeof *part); /* [4 * c][256] */
    size_t i = 0;
    if (c == 3) {
        for (; i + 12 <= n; i += 12)
            for (int k = 0; k < 12; k++) part[k][p[i + k]]++; /* part k: channel k % 3 */
    } else {
        for (; i + 4 <= n; i += 4)
            for (int k = 0; k < 4; k++) part[k][p[i + k]]++;
    }
    for (; i < n; i++) part[i % (size_t)c][p[i]]++;
    for (int ch = 0; ch < c; ch++)
        for (int v = 0; v < 256; v++)
            h[ch][v] = part[ch][v] + part[c + ch][v] + part[2 * c + ch][v] + part[3 * c + ch][v];
    free(part);
}

/* Per-channel minimum and maximum (all autocontrast needs of the histogram). */
static void channel_range(const VilImage *im, int lo[3], int hi[3]) {
    const int c = im->c;
    const size_t n = (size_t)im->w * im->h * c;
    const unsigned char *p = im->px;
    unsigned char mn[48], mx[48]; /* by position in a 48-byte block: channel = pos % c */
    memset(mn, 255, sizeof mn);
    memset(mx, 0, sizeof mx);
    size_t i = 0;
#if defined(__SSE2__)
    __m128i a[3], b[3];
    for (int k = 0; k < 3; k++) a[k] = _mm_set1_epi8((char)255), b[k] = _mm_setzero_si128();
    for (; i + 48 <= n; i += 48)
        for (int k = 0; k < 3; k++) {
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + i + 16 * k));
            a[k] = _mm_min_epu8(a[k], v);
            b[k] = _mm_max_epu8(b[k], v);
        }
    for (int k = 0; k < 3; k++) {
        _mm_storeu_si128((__m128i *)(void *)(mn + 16 * k), a[k]);
        _mm_storeu_si128((__m128i *)(void *)(mx + 16 * k), b[k]);
    }
#endif
    for (int ch = 0; ch < c; ch++) lo[ch] = 255, hi[ch] = 0;
    for (int k = 0; k < 48; k++) { /* 48 is a multiple of 1 and 3: position k is channel k % c */
        if (mn[k] < lo[k % c]) lo[k % c] = mn[k];
        if (mx[k] > hi[k % c]) hi[k % c] = mx[k];
    }
    for (; i < n; i++) {
        int ch = (int)(i % (size_t)c);
        if (p[i] < lo[ch]) lo[ch] = p[i];
        if (p[i] > hi[ch]) hi[ch] = p[i];
    }
}

void vil_ra_autocontrast(VilImage *im) {
    int los[3], his[3];
    unsigned char lut[3][256];
    channel_range(im, los, his); /* ImageOps takes them from the histogram: the same values */
    for (int ch = 0; ch < im->c; ch++) {
        int lo = los[ch], hi = his[ch];
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
    unsigned char *restrict p = im->px; /* a local pointer: stores cannot change it */
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(255 - p[i]);
}

/* Posterize and the solarizes are integer maps written out per byte (they vectorize on
 * any SIMD level, unlike a table lookup); the results are those of ImageOps' tables. */
void vil_ra_posterize(VilImage *im, int bits) {
    if (bits >= 8) return; /* timm returns the image as is */
    if (bits < 0) bits = 0;
    const unsigned char mask = (unsigned char)~((1 << (8 - bits)) - 1);
    unsigned char *restrict p = im->px;
    size_t n = (size_t)im->w * im->h * im->c;
    for (size_t i = 0; i < n; i++) p[i] &= mask;
}

void vil_ra_solarize(VilImage *im, int thresh) {
    unsigned char *restrict p = im->px;
    size_t n = (size_t)im->w * im->h * im->c;
    if (thresh > 255) return; /* every value is below: unchanged */
    if (thresh <= 0) {
        vil_ra_invert(im);
        return;
    }
    const unsigned char t = (unsigned char)thresh;
    for (size_t i = 0; i < n; i++) p[i] = p[i] < t ? p[i] : (unsigned char)(255 - p[i]);
}

void vil_ra_solarize_add(VilImage *im, int add, int thresh) {
    unsigned char *restrict p = im->px;
    size_t n = (size_t)im->w * im->h * im->c;
    if (add >= 0 && add <= 255 && thresh >= 0 && thresh <= 255) {
        const unsigned char t = (unsigned char)thresh, a = (unsigned char)add;
        for (size_t i = 0; i < n; i++) {
            unsigned char v = p[i], s = (unsigned char)(v + a);
            s = s < v ? 255 : s; /* saturating add */
            p[i] = v < t ? s : v;
        }
        return;
    }
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
            /* <= 0 -> 0, >= 255 -> 255, else truncated: as min/max, so that it vectorizes */
            t = t > 0.0f ? t : 0.0f;
            t = t < 255.0f ? t : 255.0f;
            out[i] = (unsigned char)(int)t;
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
#ifndef VIL_LUT_VBMI
    if (alpha >= 0 && alpha <= 1.0) {
        /* without a fast table lookup, the table's own expression per byte (it vectorizes) */
        unsigned char *restrict p = px;
        for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(deg + alpha * (p[i] - deg));
        return;
    }
#endif
    unsigned char lut[256]; /* the result depends on the pixel value only */
    for (int v = 0; v < 256; v++) {
        if (alpha >= 0 && alpha <= 1.0) {
            lut[v] = (unsigned char)(deg + alpha * (v - deg));
        } else {
            float t = (float)(deg + alpha * (v - deg));
            lut[v] = t <= 0.0f ? 0 : t >= 255.0f ? 255 : (unsigned char)t;
        }
    }
    lut_bytes(px, n, lut);
}

void vil_ra_color(VilImage *im, unsigned char *scratch, double factor) {
    if (im->c == 1) return; /* convert("L").convert("L") is the image itself: blend = identity */
    const size_t n = (size_t)im->w * im->h;
    const float alpha = (float)factor;
    if (alpha == 1.0f) return;
    if (alpha >= 0 && alpha <= 1.0) {
        /* blend against the gray image in one pass: Pillow's L24 gray, then Blend.c's
         * arithmetic per channel */
        unsigned char *restrict p = im->px;
        for (size_t i = 0; i < n; i++) {
            int r = p[3 * i], g = p[3 * i + 1], b = p[3 * i + 2];
            int y = (int)(((uint32_t)r * 19595u + (uint32_t)g * 38470u + (uint32_t)b * 7471u + 0x8000u) >> 16);
            p[3 * i] = (unsigned char)(y + alpha * (r - y));
            p[3 * i + 1] = (unsigned char)(y + alpha * (g - y));
            p[3 * i + 2] = (unsigned char)(y + alpha * (b - y));
        }
        return;
    }
    vil_rgb_to_gray(scratch, im->px, n);
    for (size_t i = n; i-- > 0;) /* expand gray to RGB in place, back to front */
        scratch[3 * i] = scratch[3 * i + 1] = scratch[3 * i + 2] = scratch[i];
    blend(im->px, scratch, im->px, n * 3, alpha);
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
    /* each source row converted to float once (a ring of three), then the sums in Pillow's
     * order */
    float *ring = vil_malloc(3 * row * sizeof(float));
    for (int r = 0; r < 2; r++)
        for (size_t x = 0; x < row; x++) ring[(size_t)r * row + x] = (float)src[(size_t)r * row + x];
    for (int y = 1; y < h - 1; y++) {
        float *nx = ring + (size_t)((y + 1) % 3) * row;
        const unsigned char *s = src + (size_t)(y + 1) * row;
        for (size_t x = 0; x < row; x++) nx[x] = (float)s[x];
        const float *restrict a = nx; /* Pillow: kernel[0..2] on y+1 */
        const float *restrict b = ring + (size_t)(y % 3) * row;
        const float *restrict d = ring + (size_t)((y - 1) % 3) * row;
        unsigned char *restrict o = dst + (size_t)y * row;
        for (int x = c; x < (w - 1) * c; x++) {
            float ss = 0.5f;
            ss += a[x - c] * k1 + a[x] * k1 + a[x + c] * k1;
            ss += b[x - c] * k1 + b[x] * k5 + b[x + c] * k1;
            ss += d[x - c] * k1 + d[x] * k1 + d[x + c] * k1;
            ss = ss > 0.0f ? ss : 0.0f; /* <= 0 -> 0, >= 255 -> 255, else truncated */
            ss = ss < 255.0f ? ss : 255.0f;
            o[x] = (unsigned char)(int)ss;
        }
    }
    free(ring);
}

void vil_ra_sharpness(VilImage *im, unsigned char *scratch, double factor) {
    smooth3x3(scratch, im->px, im->w, im->h, im->c);
    blend(im->px, scratch, im->px, (size_t)im->w * im->h * im->c, (float)factor);
}

/* ------------------------------------------------------------------------------------------ */
/* geometric ops (Image.transform AFFINE)                                                      */

/* Pillow routes BILINEAR and BICUBIC affine transforms through ImagingGenericTransform: for
 * every output pixel, affine_transform computes (xin, yin) = (a0 x' + a1 y' + a2,
 * a3 x' + a4 y' + a5) with x' = x + 0.5 in doubles, then the filter tests the bounds, floors
 * xin - 0.5 and yin - 0.5, and interpolates 2x2 or 4x4 clamped samples in doubles. No integer
 * fast path exists for these filters, whole-pixel translations included.
 *
 * Here the same double operations run in the same order on 8 (AVX-512) or 4 output pixels at
 * a time in SIMD lanes: lane-wise IEEE operations round exactly as scalar ones. Only what is
 * bit-identical is hoisted or skipped:
 * - a1 y' and a4 y' once per row (the same product of the same two doubles);
 * - Pillow's first stage of the cubic on 8-bit samples (p2..p4 are ints there too) in int32;
 * - a row of the 4x4 neighbourhood past the image repeats the previous row's value, which is
 *   the value of the clamped row: every tap is read from clamped coordinates;
 * - where dx (or dy) is 0 in every lane of a block, that interpolation is skipped: with
 *   d == 0 the cubic and the linear formula return their sample exactly (p1 + 0 * finite is
 *   p1, and p1 is never -0);
 * - a0 = 1, a1 = a2 = a3 = 0 (TranslateY) makes xin = x' and yin one value per row: each row
 *   is one vertical interpolation of whole source rows with a single dy;
 * - a3 = a5 = 0, a4 = 1 (ShearX, TranslateX) makes yin = y' (dy = 0): where a block's taps are
 *   consecutive columns inside the row, contiguous loads replace the gathers.
 * tests/test_transform.c checks all paths against the plain per-pixel code and against PIL. */

static inline int iclamp(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Geometry.c's FLOOR, i.e. floor for the doubles that occur here */
static inline int pil_floor(double v) { return v < 0.0 ? (int)floor(v) : (int)v; }

/* The per-pixel sampler for NEAREST (Pillow routes it through other paths; timm never uses
 * it) and for images too small for 4-byte gathers. */
static void affine_scalar(unsigned char *dst, const VilImage *src, const double m[6], int interp,
                          const unsigned char *fill) {
    const int w = src->w, h = src->h, c = src->c;
    const unsigned char *in = src->px;
    const size_t row = (size_t)w * c;
    for (int y = 0; y < h; y++) {
        unsigned char *o = dst + (size_t)y * row;
        for (int x = 0; x < w; x++, o += c) {
            double xi = x + 0.5, yi = y + 0.5;
            double xin = m[0] * xi + m[1] * yi + m[2];
            double yin = m[3] * xi + m[4] * yi + m[5];
            if (interp == VIL_INTERP_NEAREST) {
                int xx = pil_floor(xin), yy = pil_floor(yin);
                if (xx < 0 || xx >= w || yy < 0 || yy >= h) memcpy(o, fill, (size_t)c);
                else memcpy(o, in + (size_t)yy * row + (size_t)xx * c, (size_t)c);
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
            for (int ch = 0; ch < c; ch++) {
                double v;
                if (interp == VIL_INTERP_BILINEAR) {
                    /* a row past the bottom repeats the previous one: the same as clamping */
                    const unsigned char *r1 = in + (size_t)iclamp(y0, 0, h - 1) * row + ch;
                    const unsigned char *r2 = in + (size_t)iclamp(y0 + 1, 0, h - 1) * row + ch;
                    int xa = iclamp(x0, 0, w - 1) * c, xb = iclamp(x0 + 1, 0, w - 1) * c;
                    double v1 = r1[xa] + (r1[xb] - r1[xa]) * dx;
                    double v2 = r2[xa] + (r2[xb] - r2[xa]) * dx;
                    o[ch] = (unsigned char)(v1 + (v2 - v1) * dy); /* Pillow truncates */
                    continue;
                }
                double hv[4];
                for (int k = 0; k < 4; k++) {
                    const unsigned char *r = in + (size_t)iclamp(y0 - 1 + k, 0, h - 1) * row + ch;
                    int s1 = r[iclamp(x0 - 1, 0, w - 1) * c], s2 = r[iclamp(x0, 0, w - 1) * c];
                    int s3 = r[iclamp(x0 + 1, 0, w - 1) * c], s4 = r[iclamp(x0 + 2, 0, w - 1) * c];
                    double p1 = s2, p2 = -s1 + s3, p3 = 2 * (s1 - s2) + s3 - s4, p4 = -s1 + s2 - s3 + s4;
                    hv[k] = p1 + dx * (p2 + dx * (p3 + dx * p4));
                }
                double p1 = hv[1], p2 = -hv[0] + hv[2], p3 = 2 * (hv[0] - hv[1]) + hv[2] - hv[3];
                double p4 = -hv[0] + hv[1] - hv[2] + hv[3];
                v = p1 + dy * (p2 + dy * (p3 + dy * p4));
                o[ch] = v <= 0.0 ? 0 : v >= 255.0 ? 255 : (unsigned char)v;
            }
        }
    }
}

/* Lanes per block: 8 where AVX-512 holds 8 doubles in a register, else 4 (AVX2's 4
 * doubles); a generic vector wider than the hardware's is lowered badly by GCC. */
#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#define VIL_AFFINE_AVX512 1
#define AL 8
#define LANES {0, 1, 2, 3, 4, 5, 6, 7}
#else
#define AL 4
#define LANES {0, 1, 2, 3}
#endif
#define AI __attribute__((always_inline)) static inline
#define ALL_LANES ((1u << AL) - 1)
typedef int32_t vi __attribute__((vector_size(4 * AL)));
typedef uint32_t vu __attribute__((vector_size(4 * AL)));
typedef int64_t vl __attribute__((vector_size(8 * AL)));
typedef double vd __attribute__((vector_size(8 * AL)));
typedef unsigned char vb __attribute__((vector_size(4 * AL)));

/* The conversions and selects GCC's generic-vector lowering handles poorly are spelled
 * out per instruction set; the arithmetic is the same IEEE operations either way. */
AI vd vd_sel(vl m, vd a, vd b) {
#if defined(VIL_AFFINE_AVX512)
    return (vd)_mm512_mask_blend_pd(_mm512_movepi64_mask((__m512i)m), (__m512d)b, (__m512d)a);
#elif defined(__AVX__)
    return (vd)_mm256_blendv_pd((__m256d)b, (__m256d)a, (__m256d)m);
#else
    return (vd)(((vl)a & m) | ((vl)b & ~m));
#endif
}
AI vi vi_sel(vi m, vi a, vi b) { return (a & m) | (b & ~m); }
AI vd vd_of(vi v) {
#if defined(VIL_AFFINE_AVX512)
    return (vd)_mm512_cvtepi32_pd((__m256i)v);
#elif defined(__AVX__)
    return (vd)_mm256_cvtepi32_pd((__m128i)v);
#else
    return __builtin_convertvector(v, vd);
#endif
}
AI vi vi_mask(vl m) {
#if defined(VIL_AFFINE_AVX512)
    return (vi)_mm512_cvtepi64_epi32((__m512i)m);
#elif defined(__AVX2__)
    return (vi)_mm256_castsi256_si128(_mm256_permutevar8x32_epi32((__m256i)m, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
#else
    return __builtin_convertvector(m, vi);
#endif
}
/* truncation toward zero of doubles inside int range */
AI vi vi_trunc(vd v) {
#if defined(VIL_AFFINE_AVX512)
    return (vi)_mm512_cvttpd_epi32((__m512d)v);
#elif defined(__AVX__)
    return (vi)_mm256_cvttpd_epi32((__m256d)v);
#else
    return __builtin_convertvector(v, vi);
#endif
}
AI int vi_any(vi m) {
#if defined(VIL_AFFINE_AVX512)
    return !_mm256_testz_si256((__m256i)m, (__m256i)m);
#elif defined(__SSE4_1__)
    return !_mm_testz_si128((__m128i)m, (__m128i)m);
#else
    int r = 0;
    for (int i = 0; i < AL; i++) r |= m[i];
    return r != 0;
#endif
}
AI vi vi_clamp(vi v, int hi) {
#if defined(VIL_AFFINE_AVX512)
    return (vi)_mm256_min_epi32(_mm256_max_epi32((__m256i)v, _mm256_setzero_si256()), _mm256_set1_epi32(hi));
#elif defined(__SSE4_1__)
    return (vi)_mm_min_epi32(_mm_max_epi32((__m128i)v, _mm_setzero_si128()), _mm_set1_epi32(hi));
#else
    vi z = {0}, hv = z + hi;
    v = vi_sel(v < z, z, v);
    return vi_sel(v > hv, hv, v);
#endif
}
/* v <= 0 -> 0, v >= 255 -> 255 (max/min return their second operand on ties and zeros) */
AI vd vd_clip255(vd v) {
#if defined(VIL_AFFINE_AVX512)
    return (vd)_mm512_min_pd(_mm512_max_pd((__m512d)v, _mm512_setzero_pd()), _mm512_set1_pd(255.0));
#elif defined(__AVX__)
    return (vd)_mm256_min_pd(_mm256_max_pd((__m256d)v, _mm256_setzero_pd()), _mm256_set1_pd(255.0));
#else
    vd z = {0}, top = z + 255.0;
    v = vd_sel(v > z, v, z);
    return vd_sel(v < top, v, top);
#endif
}

/* floor of doubles (Geometry.c's FLOOR), as doubles: exact */
AI vd vd_floor(vd v) {
#if defined(VIL_AFFINE_AVX512)
    return (vd)_mm512_roundscale_pd((__m512d)v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
#elif defined(__AVX__)
    return (vd)_mm256_floor_pd((__m256d)v);
#else
    vd t = vd_of(vi_trunc(v));
    return t - vd_sel(v < t, (vd){0} + 1.0, (vd){0}); /* 1 less where truncation rounded up */
#endif
}

/* one bit per lane of a 64-bit lane mask */
AI unsigned vl_bits(vl m) {
#if defined(VIL_AFFINE_AVX512)
    return (unsigned)_mm512_movepi64_mask((__m512i)m);
#elif defined(__AVX__)
    return (unsigned)_mm256_movemask_pd((__m256d)m);
#else
    unsigned b = 0;
    for (int i = 0; i < AL; i++) b |= (m[i] != 0) << i;
    return b;
#endif
}

/* 4 bytes from base + off per lane. With `safe`, a lane whose 4 bytes would pass the end
 * (base + last + 4) reads the last 4 bytes instead and shifts its bytes into place. */
AI vu taps(const unsigned char *base, vi off, int safe, int last) {
    vi lo = off;
    if (safe) lo = vi_sel(off > last, (vi){0} + last, off);
    vu v;
#if defined(VIL_AFFINE_AVX512)
    v = (vu)_mm256_i32gather_epi32((const int *)(const void *)base, (__m256i)lo, 1);
#elif defined(__AVX2__)
    v = (vu)_mm_i32gather_epi32((const int *)(const void *)base, (__m128i)lo, 1);
#else
    for (int i = 0; i < AL; i++) {
        uint32_t u;
        memcpy(&u, base + lo[i], 4);
        v[i] = u;
    }
#endif
    if (safe) v >>= (vu)((off - lo) * 8);
    return v;
}

AI vi chan(vu v, int k) { return (vi)((v >> (8 * k)) & 0xFF); }

/* Pillow's BICUBIC on 8-bit samples: p1..p4 are ints there too, then the double Horner */
AI vd cubic_u8(vi s1, vi s2, vi s3, vi s4, vd d) {
    vd p1 = vd_of(s2), p2 = vd_of(-s1 + s3), p3 = vd_of(2 * (s1 - s2) + s3 - s4);
    vd p4 = vd_of(-s1 + s2 - s3 + s4);
    return p1 + d * (p2 + d * (p3 + d * p4));
}

/* BICUBIC on the doubles of the first stage, in Pillow's order of operations */
AI vd cubic_f64(vd v1, vd v2, vd v3, vd v4, vd d) {
    vd p1 = v2;
    vd p2 = -v1 + v3;
    vd p3 = 2 * (v1 - v2) + v3 - v4;
    vd p4 = -v1 + v2 - v3 + v4;
    return p1 + d * (p2 + d * (p3 + d * p4));
}

/* bicubic_filter8 / 32RGB's final clip: <= 0 -> 0, >= 255 -> 255, else truncate */
AI vi clip_u8(vd v) { return vi_trunc(vd_clip255(v)); }

AI vi pack_px(vi r, vi g, vi b, int c) { return c == 3 ? r | g << 8 | b << 16 : r; }

/* a one-vector shuffle with constant indices, in GCC's and clang's spellings */
#if defined(__clang__)
#define SHUFFLE1(T, a, ...) __builtin_shufflevector(a, a, __VA_ARGS__)
#else
#define SHUFFLE1(T, a, ...) __builtin_shuffle(a, (T){__VA_ARGS__})
#endif

/* Write n pixels (lane i = bytes 0..c-1 of px[i]) to o. */
AI void store_px(unsigned char *o, vi px, int n, int c) {
    vb v = (vb)px, s;
#if AL == 8
    if (c == 3)
        s = SHUFFLE1(vb, v, 0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17, 18, 20, 21, 22, 24, 25, 26, 28, 29, 30,
                     0, 0, 0, 0, 0, 0, 0, 0);
    else
        s = SHUFFLE1(vb, v, 0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                     0, 0, 0, 0, 0);
#else
    if (c == 3) s = SHUFFLE1(vb, v, 0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 0, 0, 0, 0);
    else s = SHUFFLE1(vb, v, 0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
#endif
    memcpy(o, &s, (size_t)(n == AL ? AL * c : n * c));
}

/* One block's samples. kind: 0 both fractions 0 (a copy), 1 dy == 0 (one row), 2 dx == 0
 * (one column), 3 general. Lanes outside the image hold in-range indices (0) and are
 * overwritten by the caller. */
AI vi
block_bicubic(const unsigned char *in, int w, int h, int c, vi xf, vi yf, vd dx, vd dy, int kind, int last) {
    const int stride = w * c;
    if (kind == 0) {
        vi off = yf * stride + xf * c;
        int safe = vi_any(off > last);
        return (vi)taps(in, off, safe, last);
    }
    if (kind == 1) {
        vi ro = yf * stride, cx[4];
        for (int k = 0; k < 4; k++) cx[k] = vi_clamp(xf - 1 + k, w - 1) * c;
        int safe = vi_any(ro + cx[3] > last);
        vu t[4];
        for (int k = 0; k < 4; k++) t[k] = taps(in, ro + cx[k], safe, last);
        vi ch[3] = {0};
        for (int b = 0; b < c; b++)
            ch[b] = clip_u8(cubic_u8(chan(t[0], b), chan(t[1], b), chan(t[2], b), chan(t[3], b), dx));
        return pack_px(ch[0], ch[1], ch[2], c);
    }
    vi ro[4];
    for (int k = 0; k < 4; k++) ro[k] = vi_clamp(yf - 1 + k, h - 1) * stride;
    if (kind == 2) {
        vi cx = xf * c;
        int safe = vi_any(ro[3] + cx > last);
        vu t[4];
        for (int k = 0; k < 4; k++) t[k] = taps(in, ro[k] + cx, safe, last);
        vi ch[3] = {0};
        for (int b = 0; b < c; b++)
            /* the first stage with dx == 0 returned the samples, so p1..p4 are exact integers:
             * the integer form is the same arithmetic */
            ch[b] = clip_u8(cubic_u8(chan(t[0], b), chan(t[1], b), chan(t[2], b), chan(t[3], b), dy));
        return pack_px(ch[0], ch[1], ch[2], c);
    }
    vi cx[4];
    for (int k = 0; k < 4; k++) cx[k] = vi_clamp(xf - 1 + k, w - 1) * c;
    int safe = vi_any(ro[3] + cx[3] > last);
    vu t[4][4];
    for (int j = 0; j < 4; j++)
        for (int k = 0; k < 4; k++) t[j][k] = taps(in, ro[j] + cx[k], safe, last);
    vi ch[3] = {0};
    for (int b = 0; b < c; b++) {
        vd hv[4];
        for (int j = 0; j < 4; j++)
            hv[j] = cubic_u8(chan(t[j][0], b), chan(t[j][1], b), chan(t[j][2], b), chan(t[j][3], b), dx);
        ch[b] = clip_u8(cubic_f64(hv[0], hv[1], hv[2], hv[3], dy));
    }
    return pack_px(ch[0], ch[1], ch[2], c);
}

/* Pillow's BILINEAR: a + (b - a) * d, the difference an int in the first stage; the result
 * lies in [0, 255] and is truncated. */
AI vi
block_bilinear(const unsigned char *in, int w, int h, int c, vi xf, vi yf, vd dx, vd dy, int kind, int last) {
    const int stride = w * c;
    if (kind == 0) {
        vi off = yf * stride + xf * c;
        return (vi)taps(in, off, vi_any(off > last), last);
    }
    vi c0 = vi_clamp(xf, w - 1) * c, c1 = vi_clamp(xf + 1, w - 1) * c;
    vi r0 = vi_clamp(yf, h - 1) * stride, r1 = vi_clamp(yf + 1, h - 1) * stride;
    vi ch[3] = {0};
    if (kind == 1) {
        int safe = vi_any(r0 + c1 > last);
        vu a = taps(in, r0 + c0, safe, last), bb = taps(in, r0 + c1, safe, last);
        for (int b = 0; b < c; b++) {
            vi s0 = chan(a, b), s1 = chan(bb, b);
            ch[b] = vi_trunc(vd_of(s0) + vd_of(s1 - s0) * dx);
        }
    } else if (kind == 2) {
        int safe = vi_any(r1 + c0 > last);
        vu a = taps(in, r0 + c0, safe, last), bb = taps(in, r1 + c0, safe, last);
        for (int b = 0; b < c; b++) {
            vd v1 = vd_of(chan(a, b)), v2 = vd_of(chan(bb, b));
            ch[b] = vi_trunc(v1 + (v2 - v1) * dy);
        }
    } else {
        int safe = vi_any(r1 + c1 > last);
        vu a0 = taps(in, r0 + c0, safe, last), a1 = taps(in, r0 + c1, safe, last);
        vu b0 = taps(in, r1 + c0, safe, last), b1 = taps(in, r1 + c1, safe, last);
        for (int b = 0; b < c; b++) {
            vi s00 = chan(a0, b), s01 = chan(a1, b), s10 = chan(b0, b), s11 = chan(b1, b);
            vd v1 = vd_of(s00) + vd_of(s01 - s00) * dx;
            vd v2 = vd_of(s10) + vd_of(s11 - s10) * dx;
            ch[b] = vi_trunc(v1 + (v2 - v1) * dy);
        }
    }
    return pack_px(ch[0], ch[1], ch[2], c);
}

typedef unsigned char vq __attribute__((vector_size(AL)));

/* AL bytes -> AL int lanes */
AI vi load_bytes(const unsigned char *p) {
#if defined(VIL_AFFINE_AVX512)
    return (vi)_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
#elif defined(__SSE4_1__)
    int32_t u;
    memcpy(&u, p, 4);
    return (vi)_mm_cvtepu8_epi32(_mm_cvtsi32_si128(u));
#else
    vq b;
    memcpy(&b, p, AL);
    return __builtin_convertvector(b, vi);
#endif
}

/* the low bytes of n lanes holding 0..255 */
AI void store_bytes(unsigned char *p, vi v, int n) {
#if defined(VIL_AFFINE_AVX512)
    __m128i b = _mm256_cvtepi32_epi8((__m256i)v);
#elif defined(__SSE4_1__)
    __m128i w = _mm_packus_epi32((__m128i)v, (__m128i)v);
    __m128i b = _mm_packus_epi16(w, w);
#else
    vq b = __builtin_convertvector(v, vq);
#endif
    memcpy(p, &b, (size_t)n);
}

/* A row whose samples all come from the same rows at the same columns with one dy: every
 * byte of the output row is the vertical interpolation of the bytes above and below it. */
static void affine_row_vertical(unsigned char *o, const unsigned char *in, int w, int h, int c, int yf, double dyv,
                                int cubic) {
    const size_t stride = (size_t)w * c;
    const int n = w * c;
    const vd dy = (vd){0} + dyv;
    const unsigned char *r[4];
    if (cubic)
        for (int k = 0; k < 4; k++) r[k] = in + (size_t)iclamp(yf - 1 + k, 0, h - 1) * stride;
    else
        r[0] = in + (size_t)iclamp(yf, 0, h - 1) * stride, r[1] = in + (size_t)iclamp(yf + 1, 0, h - 1) * stride;
    unsigned char tail[4][AL];
    for (int x = 0; x < n; x += AL) {
        const unsigned char *p[4];
        int m = n - x < AL ? n - x : AL;
        if (m == AL) {
            for (int k = 0; k < 4; k++) p[k] = r[k < 2 || cubic ? k : 0] + x;
        } else { /* the row's last values through a padded copy: the same arithmetic */
            memset(tail, 0, sizeof tail);
            for (int k = 0; k < (cubic ? 4 : 2); k++) memcpy(tail[k], r[k] + x, (size_t)m);
            for (int k = 0; k < 4; k++) p[k] = tail[k];
        }
        vi v;
        if (cubic) {
            v = clip_u8(cubic_u8(load_bytes(p[0]), load_bytes(p[1]), load_bytes(p[2]), load_bytes(p[3]), dy));
        } else {
            vd v1 = vd_of(load_bytes(p[0])), v2 = vd_of(load_bytes(p[1]));
            v = vi_trunc(v1 + (v2 - v1) * dy);
        }
        store_bytes(o + x, v, m);
    }
}

/* A block of AL output pixels that all sample one source row at consecutive columns
 * xf0 + i (dy = 0 and no tap clamped): the taps of every output byte are the bytes 3, 6 and
 * 9 further on, so contiguous loads replace the gathers. dx per pixel is spread over its c
 * bytes. The arithmetic per byte is block_bicubic's / block_bilinear's. */
AI void block_hrow(unsigned char *o, const unsigned char *rowp, int xf0, vd dx, const int c, int cubic) {
    vd dv[3]; /* dx of the pixel each byte belongs to */
    if (c == 1) {
        dv[0] = dx;
    } else {
#if AL == 8
        dv[0] = SHUFFLE1(vl, dx, 0, 0, 0, 1, 1, 1, 2, 2);
        dv[1] = SHUFFLE1(vl, dx, 2, 3, 3, 3, 4, 4, 4, 5);
        dv[2] = SHUFFLE1(vl, dx, 5, 5, 6, 6, 6, 7, 7, 7);
#else
        dv[0] = SHUFFLE1(vl, dx, 0, 0, 0, 1);
        dv[1] = SHUFFLE1(vl, dx, 1, 1, 2, 2);
        dv[2] = SHUFFLE1(vl, dx, 2, 3, 3, 3);
#endif
    }
    const unsigned char *b = rowp + (size_t)(xf0 - (cubic ? 1 : 0)) * c;
    for (int v = 0; v < c; v++) {
        vd d = dv[v];
        const unsigned char *p = b + AL * v;
        vi r;
        if (cubic) {
            r = clip_u8(cubic_u8(load_bytes(p), load_bytes(p + c), load_bytes(p + 2 * c), load_bytes(p + 3 * c), d));
        } else {
            vi s0 = load_bytes(p), s1 = load_bytes(p + c);
            r = vi_trunc(vd_of(s0) + vd_of(s1 - s0) * d);
        }
        store_bytes(o + AL * v, r, AL);
    }
}

AI void
affine_blocks(unsigned char *dst, const unsigned char *in, int w, int h, const int c, const double m[6], int cubic,
              const unsigned char *fill) {
    const int stride = w * c, last = w * h * c - 4;
    const vi fillv = (vi){0} + (int32_t)(fill[0] | (c == 3 ? fill[1] << 8 | fill[2] << 16 : 0));
    const vd lane = LANES;
    const double W = w, H = h;
    /* x' -> xin is the identity and yin is the same along a row (TranslateY, and the rows of
     * any vertical-only scaling): a whole row is one vertical interpolation. With
     * m0 = 1, m1 = m2 = m3 = 0, Pillow's a0 x' + a1 y' + a2 is x' exactly and
     * a3 x' + a4 y' + a5 does not depend on x' (0 * x' is +0). */
    const int rows_only = m[0] == 1.0 && m[1] == 0.0 && m[2] == 0.0 && m[3] == 0.0;
    /* yin is y' exactly (0 * x' + 1 * y' + 0): every pixel of row y samples source row y
     * with dy = 0 (ShearX, TranslateX) */
    const int one_row = m[3] == 0.0 && m[4] == 1.0 && m[5] == 0.0;
    const vi lanei = LANES;
    for (int y = 0; y < h; y++) {
        const double yi = y + 0.5;
        const double a1y = m[1] * yi, a4y = m[4] * yi; /* the same product for every pixel */
        unsigned char *o = dst + (size_t)y * stride;
        if (rows_only) {
            double yin = m[3] * 0.5 + a4y + m[5];
            if (!(yin >= 0.0 && yin < H)) {
                for (int x = 0; x < w; x += AL) store_px(o + (size_t)x * c, fillv, w - x < AL ? w - x : AL, c);
                continue;
            }
            double ys = yin - 0.5;
            int yf = pil_floor(ys);
            double dy = ys - yf;
            if (dy == 0.0) memcpy(o, in + (size_t)yf * stride, (size_t)stride);
            else affine_row_vertical(o, in, w, h, c, yf, dy, cubic);
            continue;
        }
        for (int x = 0; x < w; x += AL) {
            const int n = w - x < AL ? w - x : AL;
            vd xi = (lane + (double)x) + 0.5;
            vd xin = m[0] * xi + a1y + m[2];
            vd yin = m[3] * xi + a4y + m[5];
            vl inside = (xin >= 0.0) & (xin < W) & (yin >= 0.0) & (yin < H) & (lane < (double)n);
            const unsigned inbits = vl_bits(inside);
            if (!inbits) {
                store_px(o + (size_t)x * c, fillv, n, c);
                continue;
            }
            /* outside lanes sample (0, 0) and are replaced by the fill */
            vd xs = vd_sel(inside, xin - 0.5, (vd){0}), ys = vd_sel(inside, yin - 0.5, (vd){0});
            vd xfd = vd_floor(xs), yfd = vd_floor(ys);
            vd dx = xs - xfd, dy = ys - yfd;
            vi xf = vi_trunc(xfd), yf = vi_trunc(yfd);
            const vi ini = vi_mask(inside);
            int zx = !vl_bits(dx != 0.0), zy = !vl_bits(dy != 0.0);
            if (one_row && !zx && inbits == ALL_LANES) {
                /* consecutive columns with every tap inside the row: contiguous loads */
                vi rel = xf - lanei;
                int xf0 = xf[0];
                if (!vi_any(rel != xf0) && xf0 - 1 >= 0 && xf0 + AL + 1 <= w - 1) {
                    block_hrow(o + (size_t)x * c, in + (size_t)y * stride, xf0, dx, c, cubic);
                    continue;
                }
            }
            int kind = zx ? (zy ? 0 : 2) : (zy ? 1 : 3);
            vi px;
            if (cubic) {
                switch (kind) {
                case 0: px = block_bicubic(in, w, h, c, xf, yf, dx, dy, 0, last); break;
                case 1: px = block_bicubic(in, w, h, c, xf, yf, dx, dy, 1, last); break;
                case 2: px = block_bicubic(in, w, h, c, xf, yf, dx, dy, 2, last); break;
                default: px = block_bicubic(in, w, h, c, xf, yf, dx, dy, 3, last); break;
                }
            } else {
                switch (kind) {
                case 0: px = block_bilinear(in, w, h, c, xf, yf, dx, dy, 0, last); break;
                case 1: px = block_bilinear(in, w, h, c, xf, yf, dx, dy, 1, last); break;
                case 2: px = block_bilinear(in, w, h, c, xf, yf, dx, dy, 2, last); break;
                default: px = block_bilinear(in, w, h, c, xf, yf, dx, dy, 3, last); break;
                }
            }
            store_px(o + (size_t)x * c, vi_sel(ini, px, fillv), n, c);
        }
    }
}

void vil_ra_affine(unsigned char *dst, const VilImage *src, const double m[6], int interp,
                   const unsigned char *fill) {
    const int w = src->w, h = src->h, c = src->c;
    const int little = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
    if (interp == VIL_INTERP_NEAREST || (size_t)w * h * c < 4 || (size_t)w * h * c > INT32_MAX / 2 || !little) {
        affine_scalar(dst, src, m, interp, fill);
        return;
    }
    const int cubic = interp != VIL_INTERP_BILINEAR;
    if (c == 3) affine_blocks(dst, src->px, w, h, 3, m, cubic, fill);
    else affine_blocks(dst, src->px, w, h, 1, m, cubic, fill);
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
