/* randaugment.h: timm's RandAugment ("rand-m9-mstd0.5-inc1") on 8-bit images, each op with
 * Pillow's arithmetic (ImageOps, ImageEnhance, Image.blend, Image.transform's bilinear and
 * bicubic affine samplers, the SMOOTH filter), for 1- and 3-channel images. */
#ifndef VIL_RANDAUGMENT_H
#define VIL_RANDAUGMENT_H

#include "data/image.h"
#include "vil/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Pillow's resampling filter numbers; RANDOM draws one of the two per op, as timm does when
 * no interpolation is configured. */
typedef enum {
    VIL_INTERP_NEAREST = 0,
    VIL_INTERP_BILINEAR = 2,
    VIL_INTERP_BICUBIC = 3,
    VIL_INTERP_RANDOM = -1
} VilInterp;

/* timm's op lists: _RAND_TRANSFORMS (inc = 0) and _RAND_INCREASING_TRANSFORMS (inc = 1) */
typedef enum {
    VIL_RA_AUTOCONTRAST = 0,
    VIL_RA_EQUALIZE,
    VIL_RA_INVERT,
    VIL_RA_ROTATE,
    VIL_RA_POSTERIZE,   /* PosterizeIncreasing when inc */
    VIL_RA_SOLARIZE,    /* SolarizeIncreasing when inc */
    VIL_RA_SOLARIZE_ADD,
    VIL_RA_COLOR,       /* ColorIncreasing when inc */
    VIL_RA_CONTRAST,    /* ContrastIncreasing when inc */
    VIL_RA_BRIGHTNESS,  /* BrightnessIncreasing when inc */
    VIL_RA_SHARPNESS,   /* SharpnessIncreasing when inc */
    VIL_RA_SHEAR_X,
    VIL_RA_SHEAR_Y,
    VIL_RA_TRANSLATE_X_REL,
    VIL_RA_TRANSLATE_Y_REL,
    VIL_RA_NUM_OPS
} VilRaOp;

extern const char *const VIL_RA_OP_NAMES[VIL_RA_NUM_OPS]; /* timm's names, for inc = 1 */

typedef struct {
    int n;               /* ops per image (2); 0 disables */
    float m;             /* magnitude, 0..10 (9) */
    float mstd;          /* magnitude noise std (0.5); > 100 means uniform(0, m), as timm */
    float mmax;          /* magnitude clip (10) */
    int inc;             /* the "increasing" op variants (1) */
    float prob;          /* per-op probability (0.5) */
    float translate_pct; /* TranslateXRel / YRel range (0.45) */
    int interp;          /* VilInterp for rotate, shear, translate (bicubic: see randaugment.c) */
    unsigned char fill[3]; /* geometric-op fill: round(255 * mean) = (124, 116, 104) */
} VilRandAugment;

/* "rand-m9-mstd0.5-inc1" with the fill from mean (3 values; mean[0] serves gray images). */
void vil_randaugment_default(VilRandAugment *ra, const float *mean);

/* Apply RandAugment to im in place. scratch: an image buffer of at least im's size (w*h*c
 * bytes) the geometric and filter ops write through. All randomness comes from rng. */
void vil_randaugment_apply(VilImage *im, unsigned char *scratch, const VilRandAugment *ra, VilRng *rng);

/* Apply one op with its magnitude already drawn (0..10), the sign (+1 / -1) of signed ops,
 * and a resolved interpolation: what vil_randaugment_apply does after its draws. */
void vil_randaugment_op(VilImage *im, unsigned char *scratch, const VilRandAugment *ra, VilRaOp op,
                        double magnitude, int sign, int interp);

/* ---- the ops, Pillow semantics; im (h, w, c) in place, c = 1 or 3 ---- */
void vil_ra_autocontrast(VilImage *im);            /* ImageOps.autocontrast(cutoff=0) */
void vil_ra_equalize(VilImage *im);                /* ImageOps.equalize */
void vil_ra_invert(VilImage *im);                  /* ImageOps.invert */
void vil_ra_posterize(VilImage *im, int bits);     /* ImageOps.posterize; bits >= 8: no-op */
void vil_ra_solarize(VilImage *im, int thresh);    /* ImageOps.solarize */
void vil_ra_solarize_add(VilImage *im, int add, int thresh); /* timm solarize_add */
/* ImageEnhance.{Color,Contrast,Brightness,Sharpness}(im).enhance(factor); factor is
 * rounded to float as Pillow's C blend receives it. scratch: w*h*c bytes. */
void vil_ra_color(VilImage *im, unsigned char *scratch, double factor);
void vil_ra_contrast(VilImage *im, double factor);
void vil_ra_brightness(VilImage *im, double factor);
void vil_ra_sharpness(VilImage *im, unsigned char *scratch, double factor);
/* Image.transform(size, AFFINE, m, resample=interp, fillcolor=fill): output pixel (x, y)
 * samples the input at (m0 x' + m1 y' + m2, m3 x' + m4 y' + m5) with x' = x + 0.5.
 * dst and src must not overlap. interp: VIL_INTERP_NEAREST, _BILINEAR or _BICUBIC. */
void vil_ra_affine(unsigned char *dst, const VilImage *src, const double m[6], int interp,
                   const unsigned char *fill);
/* Image.rotate(degrees, resample=interp, fillcolor=fill) (counter-clockwise, about the
 * centre, same size); in place through scratch. */
void vil_ra_rotate(VilImage *im, unsigned char *scratch, double degrees, int interp,
                   const unsigned char *fill);

#ifdef __cplusplus
}
#endif
#endif
