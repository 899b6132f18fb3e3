/* canvas.c: an item placed unscaled at a random position on a larger canvas (zero or noise
 * background), the one placement that the training transform's canvas, the loader's canvas
 * validation and tools/length_sets.c's canvas sets all call; and its evaluation transform. */
#include "data/transform.h"

#include <stdlib.h>
#include <string.h>

int vil_canvas_place(unsigned char *dst, int side, const unsigned char *item, int w, int h, int c, VilCanvasBg bg,
                     int flip, VilRng *rng, int *x0, int *y0) {
    if (!dst || !item || !rng || side <= 0 || w <= 0 || h <= 0 || c <= 0 ||
        (bg != VIL_CANVAS_ZERO && bg != VIL_CANVAS_NOISE)) {
        vil_error("canvas placement: bad arguments");
        return -1;
    }
    if (w > side || h > side) {
        vil_error("an item of %dx%d does not fit a canvas of %d px: the canvas keeps the item's scale, so "
                  "it must be at least the item's size", w, h, side);
        return -1;
    }
    /* the order length_sets' files were made with: x, y, then the background */
    int x = (int)vil_rng_below(rng, (uint32_t)(side - w + 1));
    int y = (int)vil_rng_below(rng, (uint32_t)(side - h + 1));
    const size_t row = (size_t)side * c, n = row * side, iw = (size_t)w * c;
    if (bg == VIL_CANVAS_NOISE)
        for (size_t k = 0; k < n; k++) dst[k] = (unsigned char)vil_rng_below(rng, 256);
    else memset(dst, 0, n);
    for (int r = 0; r < h; r++) {
        unsigned char *d = dst + (size_t)(y + r) * row + (size_t)x * c;
        const unsigned char *s = item + (size_t)r * iw;
        if (!flip) {
            memcpy(d, s, iw);
            continue;
        }
        for (int px = 0; px < w; px++) memcpy(d + (size_t)px * c, s + (size_t)(w - 1 - px) * c, (size_t)c);
    }
    if (x0) *x0 = x;
    if (y0) *y0 = y;
    return 0;
}

int vil_transform_canvas_eval(const VilImage *img, int side, VilCanvasBg bg, const float *mean, const float *std,
                              VilRng *rng, float *out) {
    if (!img || !img->px || (img->c != 1 && img->c != 3) || side <= 0 || !mean || !std || !out) {
        vil_error("canvas evaluation transform: bad arguments");
        return -1;
    }
    unsigned char *buf = vil_try_malloc((size_t)side * side * img->c); /* the caller's side */
    if (!buf) return -1;
    int rc = vil_canvas_place(buf, side, img->px, img->w, img->h, img->c, bg, 0, rng, NULL, NULL);
    if (rc == 0) vil_normalize_chw(out, buf, side, side, img->c, mean, std);
    free(buf);
    return rc;
}
