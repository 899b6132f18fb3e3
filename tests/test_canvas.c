/* test_canvas.c: training that changes length without scale (issue 49). The placement
 * (vil_canvas_place) against a replay of its documented draws: the item's bytes exactly at the
 * drawn offset (mirrored when flipped), the rest zero or the stream's noise, every offset reached
 * about equally often, bad items refused with the rng untouched; the training transform's canvas
 * rebuilt from the same replay, from a decoded image and from PNG and JPEG bytes; the evaluation
 * transform leaving an image already at img_size as it is at crop_pct 1; the loader's train and
 * validation canvases; the config's refusals; and a tiny `vil train` with a canvas on the CPU,
 * resumed bit for bit, its checkpoint evaluated by `vil eval` on length_sets' larger canvases. */
#include <string.h>
#include <unistd.h>

#include "data/loader.h"
#include "data/transform.h"
#include "formats/safetensors.h"
#include "tests/data_corpus.h"
#include "tests/testing.h"
#include "train/train.h"
#include "train/train_config.h"
#include "vil/backend.h"
#include "vil/common.h"

static char *dir;
static const char *path(const char *name) { return t_path(dir, name); }

/* a w x h x c item whose bytes are all distinct from 0 and from their mirror image */
static unsigned char *make_item(int w, int h, int c, int id) {
    unsigned char *p = malloc((size_t)w * h * c);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++) p[((size_t)y * w + x) * c + k] = (unsigned char)(1 + (id * 37 + y * 11 + x * 3 + k * 101) % 250);
    return p;
}

/* The canvas the documented draws make, written here from the contract alone: x then y, then
 * (noise) one byte per canvas byte in memory order, then the item (mirrored when flip) pasted. */
static void replay_canvas(unsigned char *want, int side, const unsigned char *item, int w, int h, int c, int noise,
                          int flip, VilRng *r, int *px, int *py) {
    int x = (int)vil_rng_below(r, (uint32_t)(side - w + 1)), y = (int)vil_rng_below(r, (uint32_t)(side - h + 1));
    for (size_t k = 0; k < (size_t)side * side * c; k++) want[k] = noise ? (unsigned char)vil_rng_below(r, 256) : 0;
    for (int yy = 0; yy < h; yy++)
        for (int xx = 0; xx < w; xx++)
            for (int k = 0; k < c; k++)
                want[((size_t)(y + yy) * side + x + xx) * c + k] = item[((size_t)yy * w + (flip ? w - 1 - xx : xx)) * c + k];
    *px = x, *py = y;
}

/* ---- the placement ---- */

static void test_place_exact(void) {
    const int side = 11;
    for (int c = 1; c <= 3; c += 2)
        for (int noise = 0; noise < 2; noise++)
            for (int flip = 0; flip < 2; flip++) {
                const int w = 6, h = 4; /* not square: x and y draw from different ranges */
                unsigned char *item = make_item(w, h, c, noise * 2 + flip);
                unsigned char got[11 * 11 * 3], want[11 * 11 * 3];
                int ok = 1, where = 1, outside_nz = 0, follow = 1;
                for (uint64_t s = 0; s < 50; s++) {
                    VilRng r, q;
                    vil_rng_seed(&r, vil_hash_seed(7, s, 0, 0));
                    q = r;
                    int x0 = -1, y0 = -1, wx, wy;
                    if (vil_canvas_place(got, side, item, w, h, c, noise ? VIL_CANVAS_NOISE : VIL_CANVAS_ZERO, flip, &r,
                                         &x0, &y0) != 0) {
                        ok = 0;
                        continue;
                    }
                    replay_canvas(want, side, item, w, h, c, noise, flip, &q, &wx, &wy);
                    if (memcmp(got, want, (size_t)side * side * c) != 0) ok = 0;
                    if (x0 != wx || y0 != wy) where = 0;
                    /* the stream is left where the replay left it: the next draw agrees */
                    if (vil_rng_u64(&r) != vil_rng_u64(&q)) follow = 0;
                    for (int y = 0; y < side; y++)
                        for (int x = 0; x < side; x++)
                            if ((x < x0 || x >= x0 + w || y < y0 || y >= y0 + h) && got[((size_t)y * side + x) * c])
                                outside_nz++;
                }
                T_CHECK(ok, "c %d noise %d flip %d: the canvas is the item at the drawn offset on its background", c,
                        noise, flip);
                T_CHECK(where, "c %d noise %d flip %d: x0, y0 report the drawn offset", c, noise, flip);
                T_CHECK(follow, "c %d noise %d flip %d: the stream advances by exactly the documented draws", c, noise,
                        flip);
                /* zero: nothing outside the item; noise: about 1/256 of the outside is 0 */
                if (noise)
                    T_CHECK(outside_nz > 50 * (side * side - w * h) * 9 / 10, "noise: the background is not zero (%d)",
                            outside_nz);
                else T_CHECK(outside_nz == 0, "zero: %d pixels outside the item are not 0", outside_nz);
                free(item);
            }
    /* a flipped item is the mirror image: the first byte of each row lands last */
    unsigned char item[3] = {10, 20, 30}, got[9];
    VilRng r;
    vil_rng_seed(&r, 1);
    int y = -1;
    T_CHECK(vil_canvas_place(got, 3, item, 3, 1, 1, VIL_CANVAS_ZERO, 1, &r, NULL, &y) == 0 && y >= 0 && y < 3 &&
                got[3 * y] == 30 && got[3 * y + 1] == 20 && got[3 * y + 2] == 10,
            "flip mirrors the row (30 20 10): row %d", y);
}

static void test_place_coverage(void) {
    /* Fashion-MNIST's 28 on 56: 29 x 29 offsets, each drawn about N / 841 times */
    const int side = 56, s = 28, k = side - s + 1, per = 60, n = k * k * per;
    unsigned char *item = make_item(s, s, 1, 0), *canvas = malloc((size_t)side * side);
    int *count = calloc((size_t)k * k, sizeof(int));
    VilRng r;
    vil_rng_seed(&r, 99);
    for (int i = 0; i < n; i++) {
        int x, y;
        if (vil_canvas_place(canvas, side, item, s, s, 1, VIL_CANVAS_ZERO, 0, &r, &x, &y) != 0) break;
        if (x >= 0 && x < k && y >= 0 && y < k) count[y * k + x]++;
    }
    int reached = 0;
    double chi2 = 0;
    for (int j = 0; j < k * k; j++) {
        reached += count[j] > 0;
        chi2 += (count[j] - per) * (double)(count[j] - per) / per;
    }
    T_CHECK(reached == k * k, "every offset of the 56 canvas reached: %d of %d", reached, k * k);
    /* chi-square with 840 degrees of freedom: mean 840, sd 41; 6 sd either way */
    T_CHECK(chi2 > 840 - 6 * 41 && chi2 < 840 + 6 * 41, "offsets uniform: chi-square %.0f (840 +- 246)", chi2);
    /* the item as large as the canvas: the one offset */
    VilRng q;
    vil_rng_seed(&q, 5);
    int x = -1, y = -1;
    T_CHECK(vil_canvas_place(canvas, s, item, s, s, 1, VIL_CANVAS_ZERO, 0, &q, &x, &y) == 0 && x == 0 && y == 0 &&
                memcmp(canvas, item, (size_t)s * s) == 0,
            "an item the canvas's size sits at (0, 0) unchanged");
    free(count);
    free(item);
    free(canvas);
}

static void test_place_refusals(void) {
    unsigned char item[30 * 30] = {0}, canvas[28 * 28];
    VilRng r, q;
    vil_rng_seed(&r, 3);
    q = r;
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_canvas_place(canvas, 28, item, 30, 20, 1, VIL_CANVAS_ZERO, 0, &r, NULL, NULL);
    vil_error_release(&cap);
    T_CHECK(rc == -1 && strstr(cap.msg, "30x20 does not fit a canvas of 28 px"), "an item wider than the canvas: %s",
            cap.msg);
    T_CHECK(vil_rng_u64(&r) == vil_rng_u64(&q), "a refused placement draws nothing");
    vil_error_capture(&cap);
    rc = vil_canvas_place(canvas, 28, item, 20, 29, 1, VIL_CANVAS_NOISE, 0, &r, NULL, NULL);
    int rc2 = vil_canvas_place(canvas, 28, item, 20, 20, 1, (VilCanvasBg)7, 0, &r, NULL, NULL);
    vil_error_release(&cap);
    T_CHECK(rc == -1 && rc2 == -1 && cap.count == 2, "an item taller than the canvas, an unknown background: refused");
}

/* ---- the training transform ---- */

/* the training transform of a gray 56-px canvas model, every other augmentation off */
static void canvas_transform(VilTrainTransform *t, int res, int channels, int bg, float hflip) {
    vil_train_transform_default(t, res, channels);
    t->scale_min = 1.0f;
    t->randaug_n = 0;
    t->reprob = 0.0f;
    t->hflip = hflip;
    t->canvas = res;
    t->canvas_bg = bg;
}

/* the training transform's output rebuilt from its contract: the flip (one 64-bit draw below
 * hflip), then the placement's draws, then (x / 255 - mean) / std per channel */
static void replay_train(float *want, const VilTrainTransform *t, const unsigned char *item, int w, int h, VilRng *r,
                         int *flip, int *x, int *y) {
    const int res = t->res, c = t->channels;
    double u = (double)(vil_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    *flip = u < t->hflip;
    unsigned char *bytes = malloc((size_t)res * res * c);
    replay_canvas(bytes, res, item, w, h, c, t->canvas_bg == VIL_CANVAS_NOISE, *flip, r, x, y);
    for (int k = 0; k < c; k++)
        for (int p = 0; p < res * res; p++)
            want[(size_t)k * res * res + p] = ((float)bytes[(size_t)p * c + k] / 255.0f - t->mean[k]) / t->std[k];
    free(bytes);
}

static void test_train_transform(void) {
    const int res = 56, s = 28;
    unsigned char *item = make_item(s, s, 1, 4);
    VilImage im = {s, s, 1, item};
    float *out = malloc(sizeof(float) * 3 * res * res), *want = malloc(sizeof(float) * 3 * res * res);
    for (int bg = 0; bg < 2; bg++)
        for (int channels = 1; channels <= 3; channels += 2) {
            VilTrainTransform t;
            canvas_transform(&t, res, channels, bg, 0.5f);
            /* a gray item into a 3-channel model is replicated first: the replay's item is too */
            unsigned char *it = malloc((size_t)s * s * channels);
            for (int p = 0; p < s * s; p++)
                for (int k = 0; k < channels; k++) it[(size_t)p * channels + k] = item[p];
            int same = 1, flips = 0, xs = 0, draws = 400;
            unsigned char seen_x[29] = {0};
            for (int i = 0; i < draws; i++) {
                VilRng r, q;
                vil_rng_seed(&r, vil_hash_seed(11, 0, (uint64_t)i, 0)); /* the loader's per-sample key */
                q = r;
                int flip, x, y;
                if (vil_transform_train(&im, &t, &r, out) != 0) {
                    same = 0;
                    break;
                }
                replay_train(want, &t, it, s, s, &q, &flip, &x, &y);
                if (memcmp(out, want, sizeof(float) * channels * res * res) != 0) same = 0;
                flips += flip;
                if (!seen_x[x]) xs++;
                seen_x[x] = 1;
            }
            T_CHECK(same, "bg %d, %d channel(s): the training canvas is the flip and placement of its stream, "
                          "normalized", bg, channels);
            T_CHECK(flips > draws / 4 && flips < draws * 3 / 4, "hflip 0.5: %d of %d flipped", flips, draws);
            T_CHECK(xs == 29, "the per-sample keys reach every column offset: %d of 29", xs);
            free(it);
        }
    /* the same key gives the same bits with every augmentation on; another key another picture */
    VilTrainTransform t;
    canvas_transform(&t, res, 1, VIL_CANVAS_NOISE, 0.5f);
    t.randaug_n = 2;
    t.reprob = 0.25f;
    float *o2 = malloc(sizeof(float) * res * res);
    int same = 1, differs = 0;
    for (int i = 0; i < 20; i++) {
        VilRng a, b, c;
        vil_rng_seed(&a, vil_hash_seed(3, 1, (uint64_t)i, 0));
        b = a;
        vil_rng_seed(&c, vil_hash_seed(4, 1, (uint64_t)i, 0));
        if (vil_transform_train(&im, &t, &a, out) != 0 || vil_transform_train(&im, &t, &b, o2) != 0) same = 0;
        else if (memcmp(out, o2, sizeof(float) * res * res) != 0) same = 0;
        if (vil_transform_train(&im, &t, &c, o2) == 0 && memcmp(out, o2, sizeof(float) * res * res) != 0) differs++;
    }
    T_CHECK(same, "with RandAugment and erasing: the same key, the same bits");
    T_CHECK(differs == 20, "another seed, another canvas: %d of 20", differs);
    /* refused: a canvas other than the output side, an item larger than the canvas */
    VilRng r;
    vil_rng_seed(&r, 1);
    t.canvas = 48;
    T_CHECK(vil_transform_train(&im, &t, &r, out) == -1, "canvas 48 with res 56: bad arguments");
    canvas_transform(&t, 24, 1, VIL_CANVAS_ZERO, 0.5f);
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_transform_train(&im, &t, &r, out);
    vil_error_release(&cap);
    T_CHECK(rc == -1 && strstr(cap.msg, "28x28 does not fit a canvas of 24 px"), "an item larger than the canvas: %s",
            cap.msg);
    free(o2);
    free(out);
    free(want);
    free(item);
}

/* From file bytes: a JPEG is not cropped in the decoder (the canvas takes the whole item), so
 * the output is vil_transform_train of the decoded image, bit for bit; the group call too. */
static void test_train_transform_file(void) {
    const int res = 48, s = 40;
    unsigned char *px = corpus_picture(s, s, 3, 1, 2);
    size_t nj = 0;
    unsigned char *jpg = corpus_jpeg(px, s, s, 3, 90, 0, &nj);
    corpus_write_png(path("item.png"), s, s, 1, 2);
    size_t np = 0;
    unsigned char *png = NULL;
    {
        FILE *f = fopen(path("item.png"), "rb");
        if (f) {
            png = malloc(1 << 16);
            np = fread(png, 1, 1 << 16, f);
            fclose(f);
        }
    }
    const unsigned char *files[2] = {jpg, png};
    const size_t sizes[2] = {nj, np};
    const char *names[2] = {"JPEG", "PNG"};
    VilTrainTransform t;
    canvas_transform(&t, res, 3, VIL_CANVAS_NOISE, 0.5f);
    t.decode = VIL_DECODE_FAST; /* the decoder's fast path must not be taken either */
    float *a = malloc(sizeof(float) * 3 * res * res), *b = malloc(sizeof(float) * 3 * res * res);
    float *g[3] = {malloc(sizeof(float) * 3 * res * res), malloc(sizeof(float) * 3 * res * res),
                   malloc(sizeof(float) * 3 * res * res)};
    for (int f = 0; f < 2; f++) {
        VilImage im;
        if (!files[f] || vil_image_decode(files[f], sizes[f], 3, &im) != 0) {
            T_CHECK(0, "%s: decodes", names[f]);
            continue;
        }
        int same = 1, group = 1;
        for (int i = 0; i < 8; i++) {
            VilRng r1, r2, rg[3];
            vil_rng_seed(&r1, vil_hash_seed(5, 0, (uint64_t)i, 0));
            r2 = r1;
            if (vil_transform_train_file(files[f], sizes[f], &t, &r1, a) != 0 || vil_transform_train(&im, &t, &r2, b) != 0 ||
                memcmp(a, b, sizeof(float) * 3 * res * res) != 0)
                same = 0;
            for (int k = 0; k < 3; k++) vil_rng_seed(&rg[k], vil_hash_seed(5, 0, (uint64_t)(i + k), 0));
            if (vil_transform_train_file_group(files[f], sizes[f], &t, 3, rg, g, NULL) != 0) group = 0;
            for (int k = 0; k < 3 && group; k++) {
                VilRng rk;
                vil_rng_seed(&rk, vil_hash_seed(5, 0, (uint64_t)(i + k), 0));
                if (vil_transform_train(&im, &t, &rk, b) != 0 || memcmp(g[k], b, sizeof(float) * 3 * res * res) != 0)
                    group = 0;
            }
        }
        T_CHECK(same, "%s bytes: the same canvas as the decoded image's", names[f]);
        T_CHECK(group, "%s bytes: the group call gives each sample's own canvas", names[f]);
        vil_image_free(&im);
    }
    for (int k = 0; k < 3; k++) free(g[k]);
    free(a);
    free(b);
    free(jpg);
    free(png);
    free(px);
}

/* ---- evaluation ---- */

static void test_eval_keeps_scale(void) {
    /* a length_sets canvas (84 px) through the evaluation transform at img_size 84 */
    const int side = 84;
    unsigned char *canvas = make_item(side, side, 1, 9);
    VilImage im = {side, side, 1, canvas};
    const float mean[3] = {0.449f, 0.449f, 0.449f}, std[3] = {0.226f, 0.226f, 0.226f};
    float *out = malloc(sizeof(float) * side * side), *want = malloc(sizeof(float) * side * side);
    for (int p = 0; p < side * side; p++) want[p] = ((float)canvas[p] / 255.0f - mean[0]) / std[0];
    T_CHECK(vil_transform_eval(&im, side, 1.0f, mean, std, out) == 0 &&
                memcmp(out, want, sizeof(float) * side * side) == 0,
            "crop_pct 1 at img_size: the canvas is fed as it is (no resize, no crop)");
    T_CHECK(vil_transform_eval(&im, side, 0.875f, mean, std, out) == 0 &&
                memcmp(out, want, sizeof(float) * side * side) != 0,
            "crop_pct 0.875 would resize to 96 and crop: another scale (why a canvas run needs crop_pct 1)");
    /* the validation's canvas: the placement of its stream, normalized */
    unsigned char *item = make_item(28, 28, 1, 1), bytes[56 * 56];
    VilImage it = {28, 28, 1, item};
    VilRng r, q;
    vil_rng_seed(&r, 17);
    q = r;
    int x, y;
    replay_canvas(bytes, 56, item, 28, 28, 1, 1, 0, &q, &x, &y);
    for (int p = 0; p < 56 * 56; p++) want[p] = ((float)bytes[p] / 255.0f - mean[0]) / std[0];
    T_CHECK(vil_transform_canvas_eval(&it, 56, VIL_CANVAS_NOISE, mean, std, &r, out) == 0 &&
                memcmp(out, want, sizeof(float) * 56 * 56) == 0,
            "vil_transform_canvas_eval: the unflipped placement, normalized");
    free(item);
    free(canvas);
    free(out);
    free(want);
}

/* ---- the loader ---- */

/* n gray s x s items, item i's bytes from make_item(i): IDX files <prefix>-* in dir */
static void write_items(const char *prefix, int n, int s, int classes) {
    unsigned char *img = malloc((size_t)n * s * s), *lab = malloc((size_t)n);
    for (int i = 0; i < n; i++) {
        unsigned char *it = make_item(s, s, 1, i);
        memcpy(img + (size_t)i * s * s, it, (size_t)s * s);
        free(it);
        lab[i] = (unsigned char)(i % classes);
    }
    unsigned dims[3] = {(unsigned)n, (unsigned)s, (unsigned)s};
    char p[4096];
    snprintf(p, sizeof p, "%s/%s-images-idx3-ubyte", dir, prefix);
    corpus_write_idx(p, 3, dims, img, (size_t)n * s * s, 0);
    snprintf(p, sizeof p, "%s/%s-labels-idx1-ubyte", dir, prefix);
    corpus_write_idx(p, 1, dims, lab, (size_t)n, 0);
    free(img);
    free(lab);
}

static VilLoader *canvas_loader(const VilDataset *ds, VilLoaderMode mode, int res, int threads, uint64_t seed) {
    VilLoaderConfig c;
    vil_loader_config_default(&c, mode, res, 1, 8, vil_dataset_num_classes(ds));
    c.threads = threads;
    c.seed = seed;
    c.repeats = 1;
    c.quiet = 1;
    c.crop_pct = 1.0f;
    if (mode == VIL_LOADER_TRAIN) {
        vil_mixup_config_none(&c.mixup, vil_dataset_num_classes(ds), 0.0f);
        c.train.scale_min = 1.0f;
        c.train.randaug_n = 0;
        c.train.reprob = 0.0f;
        c.train.hflip = 0.0f;
        c.train.canvas = res;
        c.train.canvas_bg = VIL_CANVAS_ZERO;
    } else {
        c.canvas = res;
        c.canvas_bg = VIL_CANVAS_NOISE;
    }
    return vil_loader_create(ds, &c);
}

/* an epoch's images (caller frees) and, in idx, each row's dataset index */
static float *epoch_images(VilLoader *l, int epoch, int *idx, int *rows) {
    int nb = vil_loader_start_epoch(l, epoch);
    size_t per = 0;
    float *all = NULL;
    *rows = 0;
    for (int b = 0; b < nb; b++) {
        const VilBatch *bt = vil_loader_next_batch(l);
        if (!bt) break;
        per = (size_t)bt->channels * bt->res * bt->res;
        all = realloc(all, (*rows + bt->n) * per * sizeof(float));
        memcpy(all + *rows * per, bt->images, bt->n * per * sizeof(float));
        for (int j = 0; j < bt->n; j++) idx[*rows + j] = bt->indices[j];
        *rows += bt->n;
        vil_loader_release_batch(l, bt);
    }
    return all;
}

static void test_loader(void) {
    const int n = 48, s = 12, res = 24;
    write_items("train", n, s, 4);
    write_items("t10k", n, s, 4);
    VilDataset *ds = vil_dataset_open(dir, "train", NULL), *dv = vil_dataset_open(dir, "val", NULL);
    T_CHECK(ds && dv, "the IDX items open");
    if (!ds || !dv) return;
    const float m = 0.449f, sd = 0.226f;
    int idx[64], idx2[64], rows = 0, rows2 = 0;
    /* training: each row is its own item at some offset on zero; 1 and 3 threads agree */
    VilLoader *l1 = canvas_loader(ds, VIL_LOADER_TRAIN, res, 1, 21), *l3 = canvas_loader(ds, VIL_LOADER_TRAIN, res, 3, 21),
              *lo = canvas_loader(ds, VIL_LOADER_TRAIN, res, 1, 22);
    T_CHECK(l1 && l3 && lo, "train loaders with a canvas");
    if (l1 && l3 && lo) {
        float *a = epoch_images(l1, 2, idx, &rows), *b = epoch_images(l3, 2, idx2, &rows2);
        T_CHECK(rows == n && rows2 == n && memcmp(a, b, sizeof(float) * n * res * res) == 0 &&
                    memcmp(idx, idx2, sizeof(int) * n) == 0,
                "1 and 3 threads: the same canvases, bit for bit");
        int placed = 0;
        for (int r = 0; r < rows; r++) {
            unsigned char *it = make_item(s, s, 1, idx[r]);
            int found = 0;
            for (int y = 0; y + s <= res && !found; y++)
                for (int x = 0; x + s <= res && !found; x++) {
                    int ok = 1;
                    for (int p = 0; p < res * res && ok; p++) {
                        int px = p % res, py = p / res, in = px >= x && px < x + s && py >= y && py < y + s;
                        unsigned char v = in ? it[(py - y) * s + px - x] : 0;
                        ok = a[(size_t)r * res * res + p] == ((float)v / 255.0f - m) / sd;
                    }
                    found = ok;
                }
            placed += found;
            free(it);
        }
        T_CHECK(placed == n, "every training row is its item, unscaled, on zero: %d of %d", placed, n);
        float *c = epoch_images(lo, 2, idx2, &rows2), *d = epoch_images(l1, 3, idx2, &rows2);
        T_CHECK(memcmp(a, c, sizeof(float) * n * res * res) != 0 && memcmp(a, d, sizeof(float) * n * res * res) != 0,
                "another seed or another epoch: other canvases");
        free(a);
        free(b);
        free(c);
        free(d);
    }
    vil_loader_free(l1);
    vil_loader_free(l3);
    vil_loader_free(lo);
    /* validation: item i placed by stream (seed, 0, i, 0), the same in every pass */
    VilLoader *ev = canvas_loader(dv, VIL_LOADER_EVAL, res, 2, 0);
    T_CHECK(ev != NULL, "an eval loader with a canvas");
    if (ev) {
        float *a = epoch_images(ev, 0, idx, &rows), *b = epoch_images(ev, 0, idx2, &rows2);
        T_CHECK(rows == n && rows2 == n && memcmp(a, b, sizeof(float) * n * res * res) == 0,
                "two validation passes: the same canvases");
        int ok = 1;
        float want[24 * 24];
        for (int r = 0; r < rows; r++) {
            unsigned char *it = make_item(s, s, 1, idx[r]), bytes[24 * 24];
            VilRng q;
            vil_rng_seed(&q, vil_hash_seed(0, 0, (uint64_t)idx[r], 0));
            int x, y;
            replay_canvas(bytes, res, it, s, s, 1, 1, 0, &q, &x, &y);
            for (int p = 0; p < res * res; p++) want[p] = ((float)bytes[p] / 255.0f - m) / sd;
            if (idx[r] != r || memcmp(a + (size_t)r * res * res, want, sizeof want) != 0) ok = 0;
            free(it);
        }
        T_CHECK(ok, "validation item i is placed by its stream (seed, 0, i), on noise");
        free(a);
        free(b);
    }
    vil_loader_free(ev);
    /* a loader canvas other than res */
    VilLoaderConfig c;
    vil_loader_config_default(&c, VIL_LOADER_EVAL, res, 1, 8, vil_dataset_num_classes(dv));
    c.canvas = 2 * res;
    VilErrCapture cap;
    vil_error_capture(&cap);
    VilLoader *bad = vil_loader_create(dv, &c);
    vil_error_release(&cap);
    T_CHECK(!bad && strstr(cap.msg, "canvas must be 0 (off) or res"), "a loader canvas other than res: %s", cap.msg);
    vil_loader_free(bad);
    vil_dataset_free(ds);
    vil_dataset_free(dv);
}

/* ---- the configuration ---- */

/* vil_train_config_finalize's message after setting key=value pairs on the defaults ("" when
 * it passes) */
static const char *finalize_msg(const char *const *kv, int n) {
    static char msg[1024];
    VilConfig c;
    VilTrainConfig t;
    vil_config_default(&c);
    vil_train_config_default(&t);
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) rc = vil_train_config_set_kv(&c, &t, kv[i]);
    if (rc == 0) rc = vil_train_config_finalize(&t);
    vil_error_release(&cap);
    snprintf(msg, sizeof msg, "%s", rc ? (cap.msg[0] ? cap.msg : "(failed, no message)") : "");
    return msg;
}

static void test_config(void) {
    const char *ok[] = {"canvas=56", "scale_min=1", "crop_pct=1", "canvas_bg=noise"};
    T_CHECK(!*finalize_msg(ok, 4), "canvas 56, noise, scale_min 1, crop_pct 1: accepted (%s)", finalize_msg(ok, 4));
    const char *crop[] = {"canvas=56", "crop_pct=1"};
    const char *m = finalize_msg(crop, 2);
    T_CHECK(strstr(m, "canvas = 56 places the whole item in place of RandomResizedCrop: set scale_min = 1"),
            "the canvas with RandomResizedCrop's default scale_min: %s", m);
    const char *pct[] = {"canvas=56", "scale_min=1"};
    m = finalize_msg(pct, 2);
    T_CHECK(strstr(m, "canvas = 56 needs crop_pct = 1 (got 0.875)"), "the canvas with crop_pct 0.875: %s", m);
    const char *blue[] = {"canvas=56", "scale_min=1", "crop_pct=1", "canvas_bg=blue"};
    m = finalize_msg(blue, 4);
    T_CHECK(strstr(m, "canvas_bg") && strstr(m, "zero") && strstr(m, "noise"), "canvas_bg = blue: %s", m);
    /* the keys travel in the run's JSON */
    VilTrainConfig t, u;
    vil_train_config_default(&t);
    vil_train_config_default(&u);
    VilConfig c;
    vil_config_default(&c);
    vil_train_config_set_kv(&c, &t, "canvas=56");
    vil_train_config_set_kv(&c, &t, "canvas_bg=noise");
    char *j = vil_train_config_to_json(&t);
    T_CHECK(j && vil_train_config_from_json(&u, j) == 0 && u.canvas == 56 && u.canvas_bg_kind == VIL_CANVAS_NOISE,
            "canvas and canvas_bg round-trip through the config JSON");
    free(j);
    /* the experiment's file loads and finalizes */
    vil_config_default(&c);
    vil_train_config_default(&t);
    T_CHECK(vil_train_config_load(&c, &t, "configs/vil_fashion_canvas.cfg") == 0 && vil_config_finalize(&c) == 0 &&
                vil_train_config_finalize(&t) == 0 && t.canvas == 56 && c.img_size == 56 && t.crop_pct == 1.0f,
            "configs/vil_fashion_canvas.cfg: canvas 56 = img_size, crop_pct 1");
}

/* ---- a run ---- */

static const char *CFG =
    "name = canvas_test\narch = vil\nimg_size = 24\npatch_size = 4\nstride = 4\nin_chans = 1\n"
    "embed_dim = 16\ndepth = 1\nnum_classes = 4\n"
    "epochs = 2\nbatch = 8\nbase_lr = 0.05\nwarmup_epochs = 0\nema_decay = 0\n"
    "mixup = 0\ncutmix = 0\nrepeats = 1\nrandaug_n = 0\nreprob = 0.25\nhflip = 0.5\n"
    "canvas = 24\ncanvas_bg = noise\nscale_min = 1\ncrop_pct = 1\n"
    "workers = 1\nlog_every = 1\neval_every_epochs = 1\n";

static VilTrainStatus run_api(const char *out, const char *resume, long stop_after, VilTrainResult *res) {
    VilTrainRun r;
    memset(&r, 0, sizeof r);
    vil_config_default(&r.model);
    vil_train_config_default(&r.train);
    if (vil_train_config_load(&r.model, &r.train, path("canvas.cfg")) != 0 || vil_config_finalize(&r.model) != 0 ||
        vil_train_config_finalize(&r.train) != 0)
        return VIL_TRAIN_FAILED;
    r.data = dir;
    r.out_dir = out;
    r.resume = resume;
    r.stop_after = stop_after;
    r.be = &vil_backend_cpu;
    r.quiet = 1;
    return vil_train(&r, res);
}

/* the "params" tensors of two state files, byte for byte */
static int same_params(const char *a, const char *b) {
    VilSafetensors sa, sb;
    VilErrCapture cap;
    vil_error_capture(&cap);
    int ra = vil_st_read(a, &sa), rb = ra == 0 ? vil_st_read(b, &sb) : -1;
    vil_error_release(&cap);
    if (ra != 0 || rb != 0) {
        if (ra == 0) vil_st_free(&sa);
        return 0;
    }
    const VilStTensor *x = vil_st_find(&sa, "params"), *y = vil_st_find(&sb, "params");
    int same = x && y && x->nbytes == y->nbytes && memcmp(x->data, y->data, x->nbytes) == 0;
    vil_st_free(&sa);
    vil_st_free(&sb);
    return same;
}

static void test_run(void) {
    /* the loader test's items: 48 training and 48 test items of 12 px, 4 classes */
    corpus_write(path("canvas.cfg"), CFG, strlen(CFG));
    char out[1 << 15], outa[4096], outb[4096];
    snprintf(outa, sizeof outa, "%s", path("runA"));
    snprintf(outb, sizeof outb, "%s", path("runB"));
    VilTrainResult ra, rb;
    T_CHECK(run_api(outa, NULL, 0, &ra) == VIL_TRAIN_DONE && ra.step == 12, "a canvas run: 2 epochs of 6 steps (%ld)",
            ra.step);
    /* stopped after 4 steps, resumed: the same weights bit for bit (the placements are keyed by
     * seed, epoch and position, so the resume redraws them) */
    T_CHECK(run_api(outb, NULL, 4, &rb) == VIL_TRAIN_STOPPED && rb.step == 4, "stopped after 4 steps");
    char state[4200];
    snprintf(state, sizeof state, "%s/last.safetensors", outb);
    T_CHECK(run_api(outb, state, 0, &rb) == VIL_TRAIN_DONE && rb.step == 12, "resumed to the end");
    char sa[4200], sb[4200];
    snprintf(sa, sizeof sa, "%s/last.state.safetensors", outa);
    snprintf(sb, sizeof sb, "%s/last.state.safetensors", outb);
    T_CHECK(same_params(sa, sb) && ra.top1 == rb.top1, "the resumed canvas run: the same weights and validation");

    /* the CLI: the header says the canvas; the checkpoint records crop_pct 1 */
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "bin/vil train --config %s --data %s --out %s/runC --device cpu --set epochs=1 2>&1",
             path("canvas.cfg"), dir, dir);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "aug:   canvas 24 (the item unscaled at a random place, noise background"),
            "vil train with a canvas runs and says so: %s", out);
    snprintf(cmd, sizeof cmd, "bin/vil info --model %s/last.safetensors 2>&1", outa);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "evaluation:  crop_pct 1 "), "the checkpoint records crop_pct 1: %s", out);

    /* length_sets' larger canvases of the test split, evaluated at their own side with the
     * checkpoint's crop_pct 1: fed as they are, the item at the trained scale */
    const char *build = getenv("VIL_BUILD");
    char tool[4096];
    snprintf(tool, sizeof tool, "%s/tools/length_sets", build && *build ? build : "build");
    if (access(tool, X_OK) != 0) {
        T_CHECK(0, "%s is missing: run make (test-run builds it)", tool);
        return;
    }
    rc = t_run_tool(tool, out, sizeof out, "--data %s --split val --out %s/sets", dir, dir);
    T_CHECK(rc == 0, "length_sets on the test split: %s", out);
    const int sides[3] = {24, 36, 48};
    for (int k = 0; k < 3; k++) {
        snprintf(cmd, sizeof cmd,
                 "bin/vil eval --model %s/last.safetensors --data %s/sets/canvas%d_noise --img-size %d --device cpu "
                 "--batch 16 2>&1",
                 outa, dir, sides[k], sides[k]);
        rc = t_run(cmd, out, sizeof out);
        char want[96];
        snprintf(want, sizeof want, "resize %d, center crop %d", sides[k], sides[k]);
        T_CHECK(rc == 0 && strstr(out, want) && strstr(out, "(48 images; 0 unreadable"),
                "vil eval on canvas%d_noise feeds it unscaled (%s): %s", sides[k], want, out);
    }

    /* refused before any work: a model img_size other than the canvas, items larger than it */
    snprintf(cmd, sizeof cmd,
             "bin/vil train --config %s --data %s --out %s/runD --device cpu --set img_size=28 2>&1",
             path("canvas.cfg"), dir, dir);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc != 0 && strstr(out, "canvas = 24 but the model's img_size = 28"), "img_size 28, canvas 24: %s", out);
    snprintf(cmd, sizeof cmd,
             "bin/vil train --config %s --data %s --out %s/runE --device cpu --set img_size=8 --set canvas=8 2>&1",
             path("canvas.cfg"), dir, dir);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc != 0 && strstr(out, "item 0") && strstr(out, "is 12x12, larger than the canvas of 8 px"),
            "12-px items on an 8-px canvas: %s", out);
}

int main(void) {
    dir = corpus_mkdtemp("canvas");
    test_place_exact();
    test_place_coverage();
    test_place_refusals();
    test_train_transform();
    test_train_transform_file();
    test_eval_keeps_scale();
    test_loader();
    test_config();
    test_run();
    corpus_rmtree(dir);
    return t_finish();
}
