/* transform.h: the image transforms between a decoded file and the network's input tensor:
 * PIL-exact bicubic resampling (data/resample.c), the timm/torchvision evaluation transform
 * (resize, center crop, normalize: data/transform_eval.c), the training transform
 * (RandomResizedCrop, flip, RandAugment, normalize, random erasing: data/transform_train.c),
 * each also straight from file bytes, and the canvas placement that replaces the crop where
 * length must change without scale (data/canvas.c). */
#ifndef VIL_TRANSFORM_H
#define VIL_TRANSFORM_H

#include <stddef.h>

#include "data/image.h"
#include "vil/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ImageNet statistics, as timm's IMAGENET_DEFAULT_MEAN / _STD */
extern const float VIL_IMAGENET_MEAN[3];
extern const float VIL_IMAGENET_STD[3];

/* Pillow's Image.resize(size, BICUBIC) of a w x h view with `c` interleaved channels and a
 * row stride of `stride` bytes, to a full size of dw x dh, of which only the window
 * [ox, ox + cw) x [oy, oy + ch) is computed and written to dst (ch, cw, c). Bit-identical to
 * Pillow 9-11 (a = -0.5 cubic, antialiased support, 22-bit fixed-point coefficients,
 * horizontal pass then vertical, uint8 rounding and clamping between passes); a window is
 * bit-identical to the same window of the full resize. The window must lie inside dw x dh.
 * 0, or -1 (reported, dst not written) when its buffers (the coefficients, the horizontal pass)
 * cannot be allocated; so for the two below. */
int vil_resize_bicubic(unsigned char *dst, int cw, int ch, int ox, int oy,
                       const unsigned char *src, int w, int h, size_t stride, int c, int dw, int dh);

/* The same resize of the source box {x0, y0, x1, y1} (fractional, inside w x h; NULL: the
 * whole view), as Pillow's resize(size, BICUBIC, box): the whole dw x dh output. */
int vil_resize_bicubic_box(unsigned char *dst, const unsigned char *src, int w, int h, size_t stride, int c,
                           int dw, int dh, const double box[4]);

/* vil_resize_bicubic_box, mirrored left-right when flip: the horizontal pass computes its output
 * columns in reverse order, each with its own coefficients, so the bytes are those of the resize
 * then a flip (the training transform's resize and flip in one). */
int vil_resize_bicubic_box_flip(unsigned char *dst, const unsigned char *src, int w, int h, size_t stride, int c,
                                int dw, int dh, const double box[4], int flip);

/* torchvision.transforms.Resize(int) output size: the shorter side becomes `size`, the
 * longer int(size * long / short). */
void vil_resize_shorter_size(int w, int h, int size, int *nw, int *nh);

/* floor(size / crop_pct), as timm's transforms_imagenet_eval. */
int vil_eval_scale_size(int size, float crop_pct);

/* Evaluation transform exactly as timm/torchvision with PIL: resize the shorter side to
 * floor(size / crop_pct) (bicubic), center crop size x size (top = round-half-even of
 * (h - size) / 2; zero padding where the image is smaller, as CenterCrop pads), then
 * (x / 255 - mean) / std in float32 as ToTensor + Normalize compute it.
 * out: (img->c, size, size). mean/std: img->c values. 0 on success, -1 on bad arguments (not
 * reported: the caller words it) or without the memory for it (reported). */
int vil_transform_eval(const VilImage *img, int size, float crop_pct, const float *mean,
                       const float *std, float *out);

/* Write the normalized CHW tensor of an HWC uint8 image: (x / 255 - mean[c]) / std[c].
 * out: (c, h, w); px: (h, w, c). */
void vil_normalize_chw(float *out, const unsigned char *px, int w, int h, int c, const float *mean,
                       const float *std);

/* ---- training transform ---- */

/* How vil_transform_train_file decodes a JPEG's crop.
 * EXACT: PIL's decoder settings (ISLOW IDCT, fancy upsampling); DCT scaling 1/2 or 1/4 only
 *   when the crop is >= 2x (4x) the output on both sides (vil_jpeg_dct_denom), else
 *   bit-identical to vil_image_decode + vil_transform_train.
 * FAST: the smallest DCT scale M/8 (M = 2, 4, 8) at which the crop still covers the
 *   output (vil_jpeg_fast_scale), merged chroma upsampling (do_fancy_upsampling = FALSE),
 *   no margin columns; the bicubic resize then takes the scaled crop with a sub-pixel box.
 *   Pixels differ from EXACT slightly (tests/test_transform.c bounds it).
 * vil_train_transform_default and the training configuration (`decode` key of vil/config.c)
 * default to EXACT. Evaluation never uses either: it always decodes exactly. */
typedef enum { VIL_DECODE_EXACT = 0, VIL_DECODE_FAST = 1 } VilDecodeMode;

typedef struct {
    int res, channels;            /* output res x res, 1 or 3 channels */
    float scale_min, scale_max;   /* RandomResizedCrop scale (0.08, 1) */
    float ratio_min, ratio_max;   /* (3/4, 4/3), sampled log-uniform */
    float hflip;                  /* 0.5 */
    int randaug_n;                /* RandAugment "rand-m9-mstd0.5-inc1": 2, 9, 0.5, 1; n = 0 disables */
    float randaug_m, randaug_mstd;
    int randaug_inc;
    float reprob;                 /* random erasing p = 0.25, mode pixel, count 1 */
    float mean[3], std[3];
    int randaug_interp;           /* VilInterp of the geometric RandAugment ops: bicubic, as
                                     timm passes DeiT's train_interpolation to RandAugment */
    int decode;                   /* VilDecodeMode of JPEGs in vil_transform_train_file */
    int canvas;                   /* 0: RandomResizedCrop; > 0 (must equal res): the item
                                     unscaled at a random place on a canvas of this side
                                     (vil_canvas_place), in place of the crop and its resize */
    int canvas_bg;                /* VilCanvasBg of the canvas */
} VilTrainTransform;

/* ImageNet defaults of the recipe. channels = 1 uses mean 0.449 and std 0.226 (the means
 * of ImageNet's three); set mean[0] / std[0] for a gray dataset's own statistics. */
void vil_train_transform_default(VilTrainTransform *t, int res, int channels);

/* RandomResizedCrop.get_params (torchvision / timm): 10 attempts of a log-uniform aspect and
 * a uniform area fraction, then the centre-crop fallback with the ratio clamped. Draws from
 * rng only. Returns the crop (left, top, cw, ch) inside W x H. */
void vil_rrc_params(int W, int H, float scale_min, float scale_max, float ratio_min, float ratio_max,
                    VilRng *rng, int *left, int *top, int *cw, int *ch);

/* The whole training transform of one sample: RandomResizedCrop (bicubic, PIL-exact), flip,
 * RandAugment, normalize, random erasing. The output is a pure function of (img, t, rng
 * state). An image whose channel count differs from t->channels is converted first (gray is
 * replicated, RGB -> L with PIL's weights). out: (t->channels, t->res, t->res).
 * With t->canvas > 0 the crop and its resize are replaced: the flip is drawn first, then
 * vil_canvas_place puts the item (mirrored when flipped) unscaled on the res x res canvas;
 * RandAugment, normalize and erasing follow on the canvas as on a crop.
 * 0 on success, -1 on bad arguments (an item larger than the canvas: reported). */
int vil_transform_train(const VilImage *img, const VilTrainTransform *t, VilRng *rng, float *out);

/* Decode + training transform from file bytes. For JPEGs the crop is drawn from the header's
 * size before decoding (the same draws as vil_transform_train makes) and only the crop's iMCU
 * rows and columns are decoded. t->decode = VIL_DECODE_EXACT: when the crop is at least 2x
 * (4x) the output size on both sides, libjpeg-turbo's DCT scaling decodes it at 1/2 (1/4);
 * without DCT scaling the result is bit-identical to vil_image_decode + vil_transform_train
 * with the same rng; with it, pixels differ slightly (tests/test_transform.c measures it:
 * see the tolerance there). VIL_DECODE_FAST: see VilDecodeMode. Both modes draw the same
 * random numbers. Other formats: full decode + vil_transform_train. 0, or -1 (vil_error). */
int vil_transform_train_file(const unsigned char *buf, size_t n, const VilTrainTransform *t, VilRng *rng,
                             float *out);

/* vil_transform_train_file for `count` samples of the same file, sample i with its own stream
 * rngs[i] into outs[i] (DeiT's repeated augmentation puts the copies of an image next to each
 * other): the JPEG is decoded once per distinct DCT scale among the samples' crops, to the
 * bounding box of those crops, instead of once per sample. Every output is bit-identical to
 * vil_transform_train_file of that sample alone (a region decode's pixels do not depend on how
 * far the region reaches). *decodes (may be NULL): decodes done. 0, or -1 (vil_error; then the
 * outputs are undefined). */
int vil_transform_train_file_group(const unsigned char *buf, size_t n, const VilTrainTransform *t, int count,
                                   VilRng *rngs, float *const *outs, int *decodes);

/* The DCT scale 1/d vil_transform_train_file decodes a cw x ch crop at, for output res
 * (VIL_DECODE_EXACT). */
int vil_jpeg_dct_denom(int cw, int ch, int res);

/* VIL_DECODE_FAST's DCT scale M/8 for a cw x ch crop and output res: the smallest M of 2, 4, 8
 * with cw * M / 8 >= res and ch * M / 8 >= res (8 when none), so that the bicubic resize
 * only downsamples. Only powers of two: the other scales decode slower than 8/8 with
 * libjpeg-turbo (data/PERF_NOTES.md); not 1/8, whose DC-only blocks double the error. */
int vil_jpeg_fast_scale(int cw, int ch, int res);

/* vil_transform_train_file with the fast decode's M moved by scale_bias steps of 2x (-1: half
 * the scale; clamped to 1/8 .. 8/8; ignored in EXACT mode). Production passes 0; the tests
 * use -1 to show that their quality bound catches a scale one step too small. */
int vil_transform_train_file_bias(const unsigned char *buf, size_t n, const VilTrainTransform *t, VilRng *rng,
                                  int scale_bias, float *out);

/* The JPEG decode step of vil_transform_train_file for the crop (left, top, cw, ch), in
 * t->decode's mode: reg is the decoded region (scale scale_num / 8); the resize input is
 * the view [vx, vx + vw) x [vy, vy + vh) of reg, with the sub-pixel box `box` inside that
 * view when has_box (else the whole view). scale_bias: as vil_transform_train_file_bias.
 * 0, or -1 (vil_error). */
typedef struct {
    VilImage reg;
    int scale_num, vx, vy, vw, vh, has_box;
    double box[4];
} VilTrainCrop;
int vil_train_decode_crop(const unsigned char *buf, size_t n, const VilTrainTransform *t, int left, int top,
                          int cw, int ch, int scale_bias, VilTrainCrop *cr);

/* ---- canvas placement ----
 * Length without scale (issue 49): the item at its own scale at a random place on a larger
 * canvas, so the sequence grows and every patch still sees what it saw in training. One function
 * places it for the training transform (t->canvas), the loader's validation (VilLoaderConfig
 * canvas) and tools/length_sets.c's canvas sets, so the three cannot drift. */
typedef enum { VIL_CANVAS_ZERO = 0, VIL_CANVAS_NOISE = 1 } VilCanvasBg;

/* dst (side, side, c): the w x h item (h, w, c), unscaled, mirrored left-right when flip, at
 * (x0, y0) on a background. Draws from rng, in this order: x0 = vil_rng_below(side - w + 1),
 * y0 = vil_rng_below(side - h + 1), then for VIL_CANVAS_NOISE one vil_rng_below(256) per byte
 * of dst in memory order (rows, then pixels, then channels); VIL_CANVAS_ZERO draws nothing
 * more and fills with 0. x0, y0 (may be NULL): where the item's top-left corner went.
 * 0, or -1 (reported, rng and dst untouched) when the item does not fit the canvas or an
 * argument is bad. */
int vil_canvas_place(unsigned char *dst, int side, const unsigned char *item, int w, int h, int c, VilCanvasBg bg,
                     int flip, VilRng *rng, int *x0, int *y0);

/* The evaluation counterpart: vil_canvas_place (no flip) of img onto a side x side canvas,
 * then the normalization of training. No resize, no crop: the item keeps its scale.
 * out: (img->c, side, side). 0, or -1 (reported). */
int vil_transform_canvas_eval(const VilImage *img, int side, VilCanvasBg bg, const float *mean, const float *std,
                              VilRng *rng, float *out);

/* Decode + vil_transform_eval, exact (no DCT scaling). out: (channels, size, size). */
int vil_transform_eval_file(const unsigned char *buf, size_t n, int size, float crop_pct, int channels,
                            const float *mean, const float *std, float *out);

/* Random erasing as timm's RandomErasing(mode='pixel', count=1) on a normalized (c, h, w)
 * tensor: with probability p, one box of 2%..1/3 of the area, log-uniform aspect in
 * (0.3, 1/0.3), 10 attempts, filled with N(0, 1) per pixel and channel (vil_normal_fill,
 * keyed by one draw from rng: torch's normal_() values cannot be reproduced in C anyway). */
void vil_random_erase(float *x, int c, int h, int w, float p, VilRng *rng);

/* The erasing noise: n values N(0, 1), value j from Box-Muller pair number ctr + j / 2 of the
 * stream `key` (a counter-based hash), so a box's rows can be filled independently. The
 * values are the same on every machine, compiler and SIMD width (float arithmetic without
 * fused multiply-adds; tests/test_transform.c pins them). |z| < 5.9. */
void vil_normal_fill(float *dst, size_t n, uint64_t key, uint32_t ctr);

#ifdef __cplusplus
}
#endif
#endif
