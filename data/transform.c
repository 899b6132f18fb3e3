/* transform.c: PIL-exact bicubic resampling and the evaluation / training transforms built on
 * it. The resampler reproduces Pillow's Resample.c arithmetic (double-precision coefficients
 * rounded to 22-bit fixed point, two separable passes with uint8 clamping in between), so a
 * model trained on PIL-preprocessed images sees the same pixels here. */
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

/* Pillow's coefficient arithmetic must run as plain double operations: a fused multiply-add
 * rounds differently and can move a fixed-point coefficient by one. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#define VIL_NO_FMA
#else
#define VIL_NO_FMA __attribute__((optimize("fp-contract=off")))
#endif

const float VIL_IMAGENET_MEAN[3] = VIL_RECIPE_MEAN;
const float VIL_IMAGENET_STD[3] = VIL_RECIPE_STD;

/* ------------------------------------------------------------------------------------------ */
/* PIL bicubic resampling                                                                      */

#define RS_PRECISION_BITS 22 /* Pillow: 32 - 8 bits of result - 2 bits of headroom */

typedef struct {
    int ksize;      /* coefficients per output sample (row stride of k) */
    int *bounds;    /* (n, 2): first input index, number of taps */
    int32_t *k;     /* (n, ksize) fixed point */
} ResampleCoeffs;

/* Coefficients of output samples [o0, o0 + n) of a resize of the box [in0, in1) of in_size
 * samples to out_size samples, as Pillow's precompute_coeffs + normalize_coeffs_8bpc: taps
 * are clamped to [0, in_size). The taps are computed for all output samples at once, tap
 * index outermost, so that the double arithmetic runs across outputs in SIMD lanes: per output
 * it is the same IEEE operations in the same order as Pillow's loop (each weight, the running
 * sum in tap order, the division, the rounding). Taps at or past an output's xmax get weight
 * 0.0, which leaves the sum unchanged and rounds to coefficient 0, as the loop's zero fill.
 * (Checked against the per-output loop on 300,000 random sizes and boxes, gcc and clang,
 * -march=native, x86-64-v3, x86-64: identical.) */
VIL_NO_FMA static void coeffs_init(ResampleCoeffs *rc, int in_size, double in0, double in1,
                                   int out_size, int o0, int n) {
    /* Pillow's box is floats; our boxes are either integers (exact) or the DCT-scaled
     * training crop, where bit-exactness with PIL is moot */
    double scale = (in1 - in0) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 2.0 * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    rc->ksize = ksize;
    rc->bounds = vil_malloc(sizeof(int) * 2 * (size_t)n);
    rc->k = vil_malloc(sizeof(int32_t) * (size_t)ksize * n);
    double *center = vil_malloc(sizeof(double) * 2 * (size_t)n), *ww = center + n;
    double *w = vil_malloc(sizeof(double) * (size_t)ksize * n); /* (ksize, n) */
    int *xmin = vil_malloc(sizeof(int) * 2 * (size_t)n), *xmax = xmin + n;
    int32_t *kt = vil_malloc(sizeof(int32_t) * (size_t)ksize * n); /* (ksize, n) */
    const double ss = 1.0 / filterscale;
    for (int i = 0; i < n; i++) {
        int xx = o0 + i;
        double c = in0 + (xx + 0.5) * scale;
        int lo = (int)(c - support + 0.5); /* truncation, as Pillow's (int) cast */
        if (lo < 0) lo = 0;
        int hi = (int)(c + support + 0.5);
        if (hi > in_size) hi = in_size;
        center[i] = c;
        xmin[i] = lo;
        xmax[i] = hi - lo;
        ww[i] = 0.0;
    }
    /* cubic() with both branches computed and one selected: the same values, no branches */
    const double a = -0.5;
    for (int x = 0; x < ksize; x++) {
        double *wx = w + (size_t)x * n;
        for (int i = 0; i < n; i++) {
            double t = fabs((x + xmin[i] - center[i] + 0.5) * ss);
            double near = ((a + 2.0) * t - (a + 3.0)) * t * t + 1;
            double far = (((t - 5) * t + 8) * t - 4) * a;
            double v = t < 1.0 ? near : t < 2.0 ? far : 0.0;
            v = x < xmax[i] ? v : 0.0;
            wx[i] = v;
            ww[i] += v;
        }
    }
    for (int i = 0; i < n; i++) ww[i] = ww[i] != 0.0 ? ww[i] : 1.0; /* w / 1.0 is w exactly */
    for (int x = 0; x < ksize; x++) {
        const double *wx = w + (size_t)x * n;
        int32_t *kx = kt + (size_t)x * n;
        for (int i = 0; i < n; i++) {
            double v = wx[i] / ww[i];
            double h = v < 0 ? -0.5 : 0.5;
            kx[i] = (int32_t)(h + v * (1 << RS_PRECISION_BITS));
        }
    }
    for (int i = 0; i < n; i++) {
        int32_t *k = rc->k + (size_t)i * ksize;
        for (int x = 0; x < ksize; x++) k[x] = kt[(size_t)x * n + i];
        rc->bounds[2 * i] = xmin[i];
        rc->bounds[2 * i + 1] = xmax[i];
    }
    free(kt);
    free(xmin);
    free(w);
    free(center);
}

/* Reverse the order of the n output samples' coefficients. */
static void coeffs_reverse(ResampleCoeffs *rc, int n) {
    int32_t *tk = vil_malloc(sizeof(int32_t) * (size_t)rc->ksize);
    for (int a = 0, b = n - 1; a < b; a++, b--) {
        int32_t *ka = rc->k + (size_t)a * rc->ksize, *kb = rc->k + (size_t)b * rc->ksize;
        memcpy(tk, ka, sizeof(int32_t) * (size_t)rc->ksize);
        memcpy(ka, kb, sizeof(int32_t) * (size_t)rc->ksize);
        memcpy(kb, tk, sizeof(int32_t) * (size_t)rc->ksize);
        for (int j = 0; j < 2; j++) {
            int t = rc->bounds[2 * a + j];
            rc->bounds[2 * a + j] = rc->bounds[2 * b + j];
            rc->bounds[2 * b + j] = t;
        }
    }
    free(tk);
}

static void coeffs_free(ResampleCoeffs *rc) {
    free(rc->bounds);
    free(rc->k);
}

static inline unsigned char clip8(int32_t v) {
    v >>= RS_PRECISION_BITS; /* arithmetic shift: floor, as Pillow's lookup index */
    return (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Horizontal pass over `rows` rows: dst (rows, n, c), src rows with a byte stride.
 * Along a row the taps of neighbouring outputs overlap irregularly, which defeats SIMD; so
 * blocks of HB rows are first transposed into T (x, HB * c), after which each output column
 * of the block is one contiguous multiply-add over HB * c lanes per tap, like the vertical
 * pass. Integer arithmetic: the result is the same in any order. */
#define HB 16
static inline __attribute__((always_inline)) void
resample_h_block(unsigned char *dst, const unsigned char *src, size_t stride, int rows, const int c,
                 const ResampleCoeffs *rc, int n, unsigned char *T, int x_lo, int wn) {
    const int L = HB * c;
    const int32_t half = 1 << (RS_PRECISION_BITS - 1);
    int32_t acc[HB * 3];
    for (int y0 = 0; y0 < rows; y0 += HB) {
        int nr = rows - y0 < HB ? rows - y0 : HB;
        if (nr < HB) memset(T, 0, (size_t)wn * L);
        for (int r = 0; r < nr; r++) {
            const unsigned char *in = src + (size_t)(y0 + r) * stride + (size_t)x_lo * c;
            unsigned char *t = T + r * c;
            if (c == 3) {
                for (int x = 0; x < wn; x++) {
                    t[(size_t)x * L] = in[3 * x];
                    t[(size_t)x * L + 1] = in[3 * x + 1];
                    t[(size_t)x * L + 2] = in[3 * x + 2];
                }
            } else {
                for (int x = 0; x < wn; x++) t[(size_t)x * L] = in[x];
            }
        }
        unsigned char *out = dst + (size_t)y0 * n * c;
        for (int xx = 0; xx < n; xx++) {
            const int32_t *k = rc->k + (size_t)xx * rc->ksize;
            const unsigned char *p = T + (size_t)(rc->bounds[2 * xx] - x_lo) * L;
            int taps = rc->bounds[2 * xx + 1];
            for (int i = 0; i < L; i++) acc[i] = half;
            for (int t = 0; t < taps; t++, p += L) {
                int32_t kt = k[t];
                for (int i = 0; i < L; i++) acc[i] += p[i] * kt;
            }
            unsigned char ob[HB * 3];
            for (int i = 0; i < L; i++) {
                int32_t v = acc[i] >> RS_PRECISION_BITS;
                ob[i] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
            for (int r = 0; r < nr; r++)
                for (int ch = 0; ch < c; ch++) out[(size_t)r * n * c + (size_t)xx * c + ch] = ob[r * c + ch];
        }
    }
}

#if defined(__AVX2__)
/* RGB rows on AVX2 / AVX-512: blocks of 8 rows are transposed 8 x 8 pixels at a time with
 * shuffles (each pixel widened to a 4-byte RGBx word), the taps multiply-add 32 lanes
 * (8 rows x 4 bytes) per input column, and 8 output columns are transposed back and
 * narrowed to RGB. The same integer sums as resample_h_block, so the same bytes. */

/* 8 pixels = 24 bytes of RGB -> 8 words RGB0; reads exactly 24 bytes */
static inline __m256i rgb_to_words(const unsigned char *p) {
    __m128i lo = _mm_loadu_si128((const __m128i *)(const void *)p);
    __m128i hi = _mm_loadl_epi64((const __m128i *)(const void *)(p + 16));
    __m256i v = _mm256_set_m128i(_mm_alignr_epi8(hi, lo, 12), lo); /* pixels 0-3 | 4-7 */
    const __m256i sh = _mm256_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1,
                                        0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1);
    return _mm256_shuffle_epi8(v, sh);
}

/* 8 words RGBx -> 24 bytes of RGB; writes exactly 24 bytes */
static inline void words_to_rgb(unsigned char *p, __m256i v) {
    const __m256i sh = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1,
                                        0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
    v = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(v, sh), _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7));
    _mm_storeu_si128((__m128i *)(void *)p, _mm256_castsi256_si128(v));
    _mm_storel_epi64((__m128i *)(void *)(p + 16), _mm256_extracti128_si256(v, 1));
}

static inline void transpose8x8(__m256i r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(_mm256_castsi256_ps(r[2 * i]), _mm256_castsi256_ps(r[2 * i + 1]));
        t[2 * i + 1] = _mm256_unpackhi_ps(_mm256_castsi256_ps(r[2 * i]), _mm256_castsi256_ps(r[2 * i + 1]));
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_castps_si256(_mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
        r[i + 4] = _mm256_castps_si256(_mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
    }
}

/* One output column of an 8-row block: 8 RGBx words, clamped to bytes. T holds 32 bytes
 * per input column. */
static inline __m256i mac_column(const unsigned char *p, const int32_t *k, int taps) {
    const int32_t half = 1 << (RS_PRECISION_BITS - 1);
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    __m512i a0 = _mm512_set1_epi32(half), a1 = a0;
    for (int t = 0; t < taps; t++, p += 32) {
        __m512i kv = _mm512_set1_epi32(k[t]);
        a0 = _mm512_add_epi32(a0, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(const void *)p)), kv));
        a1 = _mm512_add_epi32(a1, _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(const void *)(p + 16))), kv));
    }
    /* arithmetic shift, then clip to 0..255 as clip8 does */
    const __m512i z = _mm512_setzero_si512(), top = _mm512_set1_epi32(255);
    a0 = _mm512_min_epi32(_mm512_max_epi32(_mm512_srai_epi32(a0, RS_PRECISION_BITS), z), top);
    a1 = _mm512_min_epi32(_mm512_max_epi32(_mm512_srai_epi32(a1, RS_PRECISION_BITS), z), top);
    return _mm256_set_m128i(_mm512_cvtepi32_epi8(a1), _mm512_cvtepi32_epi8(a0));
#else
    __m256i a[4];
    for (int i = 0; i < 4; i++) a[i] = _mm256_set1_epi32(half);
    for (int t = 0; t < taps; t++, p += 32) {
        __m256i kv = _mm256_set1_epi32(k[t]);
        for (int i = 0; i < 4; i++)
            a[i] = _mm256_add_epi32(a[i], _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p + 8 * i))), kv));
    }
    for (int i = 0; i < 4; i++) a[i] = _mm256_srai_epi32(a[i], RS_PRECISION_BITS);
    /* packs saturate to 0..65535 then 0..255: the clip; then undo their lane interleave */
    __m256i w01 = _mm256_packus_epi32(a[0], a[1]), w23 = _mm256_packus_epi32(a[2], a[3]);
    __m256i b = _mm256_packus_epi16(w01, w23);
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
#endif
}

static void resample_h_rgb(unsigned char *dst, const unsigned char *src, size_t stride, int rows,
                           const ResampleCoeffs *rc, int n, int x_lo, int wn, unsigned char *T) {
    const size_t orow = (size_t)n * 3;
    for (int y0 = 0; y0 < rows; y0 += 8) {
        const int nr = rows - y0 < 8 ? rows - y0 : 8;
        const unsigned char *rp[8];
        for (int r = 0; r < 8; r++) /* a short block repeats its last row; those results are dropped */
            rp[r] = src + (size_t)(y0 + (r < nr ? r : nr - 1)) * stride + (size_t)x_lo * 3;
        int x = 0;
        for (; x + 8 <= wn; x += 8) {
            __m256i v[8];
            for (int r = 0; r < 8; r++) v[r] = rgb_to_words(rp[r] + (size_t)x * 3);
            transpose8x8(v);
            for (int k = 0; k < 8; k++) _mm256_store_si256((__m256i *)(void *)(T + (size_t)(x + k) * 32), v[k]);
        }
        for (; x < wn; x++)
            for (int r = 0; r < 8; r++) {
                unsigned char *t = T + (size_t)x * 32 + r * 4;
                memcpy(t, rp[r] + (size_t)x * 3, 3);
                t[3] = 0;
            }
        for (int xx0 = 0; xx0 < n; xx0 += 8) {
            const int m = n - xx0 < 8 ? n - xx0 : 8;
            __m256i col[8];
            for (int j = 0; j < 8; j++) {
                int xx = xx0 + (j < m ? j : m - 1);
                col[j] = mac_column(T + (size_t)(rc->bounds[2 * xx] - x_lo) * 32, rc->k + (size_t)xx * rc->ksize,
                                    rc->bounds[2 * xx + 1]);
            }
            transpose8x8(col); /* col[r]: row r's 8 output pixels */
            for (int r = 0; r < nr; r++) {
                unsigned char *o = dst + (size_t)(y0 + r) * orow + (size_t)xx0 * 3;
                if (m == 8) {
                    words_to_rgb(o, col[r]);
                } else {
                    unsigned char tmp[24];
                    words_to_rgb(tmp, col[r]);
                    memcpy(o, tmp, (size_t)m * 3);
                }
            }
        }
    }
}
#endif

static void resample_h(unsigned char *dst, const unsigned char *src, size_t stride, int rows, int c,
                       const ResampleCoeffs *rc, int n) {
    int x_lo = rc->bounds[0], x_hi = 0;
    for (int xx = 0; xx < n; xx++) {
        if (rc->bounds[2 * xx] < x_lo) x_lo = rc->bounds[2 * xx];
        if (rc->bounds[2 * xx] + rc->bounds[2 * xx + 1] > x_hi) x_hi = rc->bounds[2 * xx] + rc->bounds[2 * xx + 1];
    }
    int wn = x_hi - x_lo;
    if (wn <= 0) wn = 1;
#if defined(__AVX2__)
    if (c == 3) {
        unsigned char *T = vil_malloc_aligned((size_t)wn * 32);
        resample_h_rgb(dst, src, stride, rows, rc, n, x_lo, wn, T);
        free(T);
        return;
    }
#endif
    unsigned char *T = vil_malloc((size_t)wn * HB * c);
    if (c == 3) resample_h_block(dst, src, stride, rows, 3, rc, n, T, x_lo, wn);
    else resample_h_block(dst, src, stride, rows, 1, rc, n, T, x_lo, wn);
    free(T);
}

/* Vertical pass: dst (n, width) bytes; src rows (row r = input row r + row0) with a stride.
 * Strips of 64 (AVX-512) or 32 (AVX2) values keep their sums in registers over all taps; the
 * rest goes through one int32 accumulator row, a contiguous, vectorizable multiply-add.
 * Integer sums: the same bytes in any order. */
static void resample_v(unsigned char *dst, const unsigned char *src, size_t stride, int row0,
                       int width, const ResampleCoeffs *rc, int n, int32_t *acc) {
    const int32_t half = 1 << (RS_PRECISION_BITS - 1);
    for (int yy = 0; yy < n; yy++) {
        const int32_t *k = rc->k + (size_t)yy * rc->ksize;
        int ymin = rc->bounds[2 * yy] - row0, taps = rc->bounds[2 * yy + 1];
        const unsigned char *base = src + (size_t)ymin * stride;
        unsigned char *out = dst + (size_t)yy * width;
        int x0 = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
        for (; x0 + 64 <= width; x0 += 64) {
            __m512i a[4];
            for (int i = 0; i < 4; i++) a[i] = _mm512_set1_epi32(half);
            const unsigned char *p = base + x0;
            for (int y = 0; y < taps; y++, p += stride) {
                __m512i kv = _mm512_set1_epi32(k[y]);
                for (int i = 0; i < 4; i++)
                    a[i] = _mm512_add_epi32(a[i], _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p + 16 * i))), kv));
            }
            for (int i = 0; i < 4; i++) {
                __m512i v = _mm512_srai_epi32(a[i], RS_PRECISION_BITS);
                v = _mm512_min_epi32(_mm512_max_epi32(v, _mm512_setzero_si512()), _mm512_set1_epi32(255));
                _mm_storeu_si128((__m128i *)(void *)(out + x0 + 16 * i), _mm512_cvtepi32_epi8(v));
            }
        }
#elif defined(__AVX2__)
        for (; x0 + 32 <= width; x0 += 32) {
            __m256i a[4];
            for (int i = 0; i < 4; i++) a[i] = _mm256_set1_epi32(half);
            const unsigned char *p = base + x0;
            for (int y = 0; y < taps; y++, p += stride) {
                __m256i kv = _mm256_set1_epi32(k[y]);
                for (int i = 0; i < 4; i++)
                    a[i] = _mm256_add_epi32(a[i], _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p + 8 * i))), kv));
            }
            for (int i = 0; i < 4; i++) a[i] = _mm256_srai_epi32(a[i], RS_PRECISION_BITS);
            /* packs saturate to 0..65535 then 0..255: the clip; then undo their lane interleave */
            __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(a[0], a[1]), _mm256_packus_epi32(a[2], a[3]));
            b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(void *)(out + x0), b);
        }
#endif
        if (x0 == width) continue;
        for (int x = x0; x < width; x++) acc[x] = half;
        for (int y = 0; y < taps; y++) {
            const unsigned char *in = base + (size_t)y * stride;
            int32_t ky = k[y];
            for (int x = x0; x < width; x++) acc[x] += in[x] * ky;
        }
        for (int x = x0; x < width; x++) out[x] = clip8(acc[x]);
    }
}

static void hflip_inplace(unsigned char *px, int w, int h, int c);

/* The box resize behind vil_resize_bicubic: box = {x0, y0, x1, y1} in source pixels. With
 * flip (full windows only: ox = 0, cw = dw), the result is mirrored left-right: the
 * horizontal pass computes its output columns in reverse order, each with its own
 * coefficients, so the bytes are those of resize-then-flip. */
static void resize_box(unsigned char *dst, int cw, int ch, int ox, int oy, const unsigned char *src,
                       int w, int h, size_t stride, int c, int dw, int dh, const double box[4], int flip) {
    if (cw <= 0 || ch <= 0) return;
    /* Pillow skips a pass whose size and box are the identity */
    int need_h = dw != w || box[0] != 0.0 || box[2] != (double)w;
    int need_v = dh != h || box[1] != 0.0 || box[3] != (double)h;
    ResampleCoeffs rv = {0}, rh = {0};
    /* input rows the vertical pass will read */
    int r0 = oy, r1 = oy + ch;
    if (need_v) {
        coeffs_init(&rv, h, box[1], box[3], dh, oy, ch);
        r0 = rv.bounds[0];
        r1 = 0;
        for (int i = 0; i < ch; i++) {
            if (rv.bounds[2 * i] < r0) r0 = rv.bounds[2 * i];
            if (rv.bounds[2 * i] + rv.bounds[2 * i + 1] > r1) r1 = rv.bounds[2 * i] + rv.bounds[2 * i + 1];
        }
    }
    const unsigned char *mid;
    size_t mid_stride;
    unsigned char *tmp = NULL;
    if (need_h) {
        coeffs_init(&rh, w, box[0], box[2], dw, ox, cw);
        if (flip) coeffs_reverse(&rh, cw);
        tmp = vil_malloc((size_t)(r1 - r0) * cw * c + 1);
        resample_h(tmp, src + (size_t)r0 * stride, stride, r1 - r0, c, &rh, cw);
        mid = tmp;
        mid_stride = (size_t)cw * c;
    } else {
        mid = src + (size_t)r0 * stride + (size_t)ox * c;
        mid_stride = stride;
    }
    if (need_v) {
        int32_t *acc = vil_malloc(sizeof(int32_t) * (size_t)cw * c);
        resample_v(dst, mid, mid_stride, r0, cw * c, &rv, ch, acc);
        free(acc);
    } else {
        for (int y = 0; y < ch; y++)
            memcpy(dst + (size_t)y * cw * c, mid + (size_t)y * mid_stride, (size_t)cw * c);
    }
    if (flip && !need_h) hflip_inplace(dst, cw, ch, c);
    free(tmp);
    coeffs_free(&rh);
    coeffs_free(&rv);
}

void vil_resize_bicubic(unsigned char *dst, int cw, int ch, int ox, int oy,
                        const unsigned char *src, int w, int h, size_t stride, int c, int dw, int dh) {
    const double box[4] = {0.0, 0.0, (double)w, (double)h};
    resize_box(dst, cw, ch, ox, oy, src, w, h, stride, c, dw, dh, box, 0);
}

void vil_resize_bicubic_box(unsigned char *dst, const unsigned char *src, int w, int h, size_t stride, int c,
                            int dw, int dh, const double box[4]) {
    const double full[4] = {0.0, 0.0, (double)w, (double)h};
    resize_box(dst, dw, dh, 0, 0, src, w, h, stride, c, dw, dh, box ? box : full, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* evaluation transform                                                                        */

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

int vil_transform_eval(const VilImage *img, int size, float crop_pct, const float *mean,
                       const float *std, float *out) {
    if (!img || !img->px || img->w <= 0 || img->h <= 0 || (img->c != 1 && img->c != 3) ||
        size <= 0 || !(crop_pct > 0.0f))
        return -1;
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
    unsigned char *crop = vil_calloc((size_t)size * size, c);
    if (x1 > x0 && y1 > y0) {
        unsigned char *win = vil_malloc((size_t)(x1 - x0) * (y1 - y0) * c);
        vil_resize_bicubic(win, x1 - x0, y1 - y0, x0, y0, img->px, img->w, img->h,
                           (size_t)img->w * c, c, nw, nh);
        for (int y = y0; y < y1; y++)
            memcpy(crop + ((size_t)(y - top) * size + (x0 - left)) * c,
                   win + (size_t)(y - y0) * (x1 - x0) * c, (size_t)(x1 - x0) * c);
        free(win);
    }
    vil_normalize_chw(out, crop, size, size, c, mean, std);
    free(crop);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* training transform                                                                          */

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

static void hflip_inplace(unsigned char *px, int w, int h, int c) {
    for (int y = 0; y < h; y++) {
        unsigned char *row = px + (size_t)y * w * c;
        for (int a = 0, b = w - 1; a < b; a++, b--)
            for (int ch = 0; ch < c; ch++) {
                unsigned char t = row[a * c + ch];
                row[a * c + ch] = row[b * c + ch];
                row[b * c + ch] = t;
            }
    }
}

/* Everything after the crop was chosen: resize the crop view (with a sub-pixel box when it
 * comes DCT-scaled), flip, RandAugment, normalize, erase. */
static void train_from_view(const unsigned char *view, int vw, int vh, size_t stride, const double *box,
                            const VilTrainTransform *t, VilRng *rng, float *out) {
    const int res = t->res, c = t->channels;
    const size_t npx = (size_t)res * res * c;
    unsigned char *buf = vil_malloc(2 * npx); /* the image and RandAugment's scratch */
    /* the flip is drawn after the crop as before (the resize draws nothing) and done by
     * the resize itself */
    const int flip = rng_double(rng) < t->hflip;
    const double full[4] = {0.0, 0.0, (double)vw, (double)vh};
    resize_box(buf, res, res, 0, 0, view, vw, vh, stride, c, res, res, box ? box : full, flip);
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
    free(buf);
}

static int train_args_ok(const VilTrainTransform *t) {
    return t && t->res > 0 && (t->channels == 1 || t->channels == 3) && t->scale_min > 0 &&
           t->scale_max >= t->scale_min && t->ratio_min > 0 && t->ratio_max > 0;
}

/* Convert an image to c channels as PIL's convert('RGB') / convert('L') would. */
static void convert_channels(VilImage *dst, const VilImage *src, int c) {
    vil_image_alloc(dst, src->w, src->h, c);
    size_t n = (size_t)src->w * src->h;
    if (c == 1) {
        vil_rgb_to_gray(dst->px, src->px, n);
    } else {
        for (size_t i = 0; i < n; i++) dst->px[3 * i] = dst->px[3 * i + 1] = dst->px[3 * i + 2] = src->px[i];
    }
}

int vil_transform_train(const VilImage *img, const VilTrainTransform *t, VilRng *rng, float *out) {
    if (!img || !img->px || img->w <= 0 || img->h <= 0 || (img->c != 1 && img->c != 3) || !train_args_ok(t))
        return -1;
    VilImage conv = {0};
    const VilImage *im = img;
    if (img->c != t->channels) {
        convert_channels(&conv, img, t->channels);
        im = &conv;
    }
    int left, top, cw, ch;
    vil_rrc_params(im->w, im->h, t->scale_min, t->scale_max, t->ratio_min, t->ratio_max, rng, &left, &top, &cw, &ch);
    const int c = im->c;
    const size_t stride = (size_t)im->w * c;
    train_from_view(im->px + (size_t)top * stride + (size_t)left * c, cw, ch, stride, NULL, t, rng, out);
    vil_image_free(&conv);
    return 0;
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

static void train_from_crop(const VilTrainCrop *cr, const VilTrainTransform *t, VilRng *rng, float *out) {
    const size_t stride = (size_t)cr->reg.w * cr->reg.c;
    train_from_view(cr->reg.px + (size_t)cr->vy * stride + (size_t)cr->vx * cr->reg.c, cr->vw, cr->vh, stride,
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
    if (vil_image_format(buf, n) != VIL_FORMAT_JPEG) {
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
                    train_from_crop(&cr, t, &rngs[g0 + k], outs[g0 + k]);
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

int vil_transform_eval_file(const unsigned char *buf, size_t n, int size, float crop_pct, int channels,
                            const float *mean, const float *std, float *out) {
    VilImage im;
    if (vil_image_decode(buf, n, channels, &im) != 0) return -1;
    int rc = vil_transform_eval(&im, size, crop_pct, mean, std, out);
    vil_image_free(&im);
    if (rc) vil_error("evaluation transform: bad arguments");
    return rc;
}
