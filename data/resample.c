/* resample.c: Pillow-exact bicubic resampling (vil_resize_bicubic and its box and mirrored
 * forms, data/transform.h), under both transforms. It reproduces Pillow's Resample.c arithmetic
 * (double-precision coefficients rounded to 22-bit fixed point, two separable passes with uint8
 * clamping in between), so a model trained on PIL-preprocessed images sees the same pixels here. */
#include "data/transform.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

/* Pillow's coefficient arithmetic must run as plain double operations: a fused multiply-add
 * rounds differently and can move a fixed-point coefficient by one. (VIL_NO_FMA: vil/nofma.h) */
#include "vil/nofma.h"

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
VIL_NO_FMA static int coeffs_init(ResampleCoeffs *rc, int in_size, double in0, double in1,
                                  int out_size, int o0, int n) {
    /* Pillow's box is floats; our boxes are either integers (exact) or the DCT-scaled
     * training crop, where bit-exactness with PIL is moot */
    double scale = (in1 - in0) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 2.0 * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    rc->ksize = ksize;
    /* sizes the image and the output set: NULL (reported) gives everything back */
    rc->bounds = vil_try_malloc(sizeof(int) * 2 * (size_t)n);
    rc->k = vil_try_malloc(sizeof(int32_t) * (size_t)ksize * n);
    double *center = vil_try_malloc(sizeof(double) * 2 * (size_t)n);
    double *w = vil_try_malloc(sizeof(double) * (size_t)ksize * n); /* (ksize, n) */
    int *xmin = vil_try_malloc(sizeof(int) * 2 * (size_t)n);
    int32_t *kt = vil_try_malloc(sizeof(int32_t) * (size_t)ksize * n); /* (ksize, n) */
    if (!rc->bounds || !rc->k || !center || !w || !xmin || !kt) {
        free(kt), free(xmin), free(w), free(center), free(rc->k), free(rc->bounds);
        rc->bounds = NULL, rc->k = NULL;
        return -1;
    }
    double *ww = center + n;
    int *xmax = xmin + n;
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
    return 0;
}

/* Reverse the order of the n output samples' coefficients. */
static int coeffs_reverse(ResampleCoeffs *rc, int n) {
    int32_t *tk = vil_try_malloc(sizeof(int32_t) * (size_t)rc->ksize);
    if (!tk) return -1;
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
    return 0;
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

static int resample_h(unsigned char *dst, const unsigned char *src, size_t stride, int rows, int c,
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
        unsigned char *T = vil_try_malloc_aligned((size_t)wn * 32);
        if (!T) return -1;
        resample_h_rgb(dst, src, stride, rows, rc, n, x_lo, wn, T);
        free(T);
        return 0;
    }
#endif
    unsigned char *T = vil_try_malloc((size_t)wn * HB * c);
    if (!T) return -1;
    if (c == 3) resample_h_block(dst, src, stride, rows, 3, rc, n, T, x_lo, wn);
    else resample_h_block(dst, src, stride, rows, 1, rc, n, T, x_lo, wn);
    free(T);
    return 0;
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

/* The box resize behind vil_resize_bicubic: box = {x0, y0, x1, y1} in source pixels. With
 * flip (full windows only: ox = 0, cw = dw), the result is mirrored left-right: the
 * horizontal pass computes its output columns in reverse order, each with its own
 * coefficients, so the bytes are those of resize-then-flip. 0, or -1 (reported) when its
 * buffers, which the image's and the output's sizes set, cannot be allocated. */
static int resize_box(unsigned char *dst, int cw, int ch, int ox, int oy, const unsigned char *src,
                      int w, int h, size_t stride, int c, int dw, int dh, const double box[4], int flip) {
    if (cw <= 0 || ch <= 0) return 0;
    /* Pillow skips a pass whose size and box are the identity */
    int need_h = dw != w || box[0] != 0.0 || box[2] != (double)w;
    int need_v = dh != h || box[1] != 0.0 || box[3] != (double)h;
    ResampleCoeffs rv = {0}, rh = {0};
    unsigned char *tmp = NULL;
    int32_t *acc = NULL;
    int rc = -1;
    /* input rows the vertical pass will read */
    int r0 = oy, r1 = oy + ch;
    if (need_v) {
        if (coeffs_init(&rv, h, box[1], box[3], dh, oy, ch) != 0) goto out;
        r0 = rv.bounds[0];
        r1 = 0;
        for (int i = 0; i < ch; i++) {
            if (rv.bounds[2 * i] < r0) r0 = rv.bounds[2 * i];
            if (rv.bounds[2 * i] + rv.bounds[2 * i + 1] > r1) r1 = rv.bounds[2 * i] + rv.bounds[2 * i + 1];
        }
    }
    const unsigned char *mid;
    size_t mid_stride;
    if (need_h) {
        if (coeffs_init(&rh, w, box[0], box[2], dw, ox, cw) != 0) goto out;
        if (flip && coeffs_reverse(&rh, cw) != 0) goto out;
        if (!(tmp = vil_try_malloc((size_t)(r1 - r0) * cw * c + 1))) goto out;
        if (resample_h(tmp, src + (size_t)r0 * stride, stride, r1 - r0, c, &rh, cw) != 0) goto out;
        mid = tmp;
        mid_stride = (size_t)cw * c;
    } else {
        mid = src + (size_t)r0 * stride + (size_t)ox * c;
        mid_stride = stride;
    }
    if (need_v) {
        if (!(acc = vil_try_malloc(sizeof(int32_t) * (size_t)cw * c))) goto out;
        resample_v(dst, mid, mid_stride, r0, cw * c, &rv, ch, acc);
    } else {
        for (int y = 0; y < ch; y++)
            memcpy(dst + (size_t)y * cw * c, mid + (size_t)y * mid_stride, (size_t)cw * c);
    }
    if (flip && !need_h) hflip_inplace(dst, cw, ch, c);
    rc = 0;
out:
    if (rc != 0) vil_error("bicubic resize of %dx%d to %dx%d: no memory for its buffers", w, h, dw, dh);
    free(acc);
    free(tmp);
    coeffs_free(&rh);
    coeffs_free(&rv);
    return rc;
}

int vil_resize_bicubic(unsigned char *dst, int cw, int ch, int ox, int oy,
                       const unsigned char *src, int w, int h, size_t stride, int c, int dw, int dh) {
    const double box[4] = {0.0, 0.0, (double)w, (double)h};
    return resize_box(dst, cw, ch, ox, oy, src, w, h, stride, c, dw, dh, box, 0);
}

int vil_resize_bicubic_box(unsigned char *dst, const unsigned char *src, int w, int h, size_t stride, int c,
                           int dw, int dh, const double box[4]) {
    return vil_resize_bicubic_box_flip(dst, src, w, h, stride, c, dw, dh, box, 0);
}

int vil_resize_bicubic_box_flip(unsigned char *dst, const unsigned char *src, int w, int h, size_t stride, int c,
                                int dw, int dh, const double box[4], int flip) {
    const double full[4] = {0.0, 0.0, (double)w, (double)h};
    return resize_box(dst, dw, dh, 0, 0, src, w, h, stride, c, dw, dh, box ? box : full, flip);
}
