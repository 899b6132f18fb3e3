/* length_sets.c: test sets that change one factor at a time against the training length (issue
 * 49), made from any gray dataset vil reads (IDX, class folders, ...) whose items are S0 x S0:
 *   build/tools/length_sets --data DIR [--split val] [--seed 0] [--limit N] --out OUT
 * OUT/<set>/t10k-{images-idx3,labels-idx1}-ubyte for each set below, the labels unchanged and in
 * the dataset's order, so `vil eval --data OUT/<set>` (split val or test) reads one; OUT/sets.json
 * lists them. Sides are multiples of S0 (56 / 84 / 112 for Fashion-MNIST's 28):
 *   canvas<2,3,4 S0>_zero / _noise: the item at its scale at a uniform random position; zero
 *     background, or per-pixel uniform 0..255 noise;
 *   tile2 / tile3 / tile4: the item tiled k x k;
 *   shrink: the item resized to S0/2 (vil's Pillow-exact bicubic) at a random position on an S0
 *     zero canvas; zoom2: the centre S0/2 box resized to S0 (the same resampler).
 * Each image draws from its own stream vil_hash_seed(seed, set, index, 0): the same seed gives
 * byte-identical files, and --limit keeps the first images' draws. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/dataset.h"
#include "data/transform.h"
#include "vil/common.h"
#include "vil/files.h"

#define USAGE "usage: length_sets --data DIR [--split val] [--seed S] [--limit N] --out OUT\n"
#define PATH_LEN 4096
#define OUT_PREFIX "t10k" /* what vil's IDX reader opens for --split val and test */

typedef enum { SET_CANVAS, SET_TILE, SET_SHRINK, SET_ZOOM } SetKind;

/* The sets in a fixed order: a set's index is part of its images' seeds, so rows are only ever
 * appended. mult: the canvas side in units of S0 (canvas, tile), 1 for shrink and zoom2. */
typedef struct {
    SetKind kind;
    int mult, noise;
    const char *changes; /* for sets.json */
} SetDef;

static const SetDef k_sets[] = {
    {SET_CANVAS, 2, 0, "canvas: the item at its trained scale at a random position, zero background"},
    {SET_CANVAS, 3, 0, "canvas: the item at its trained scale at a random position, zero background"},
    {SET_CANVAS, 4, 0, "canvas: the item at its trained scale at a random position, zero background"},
    {SET_CANVAS, 2, 1, "canvas: the item at its trained scale at a random position, uniform 0..255 noise background"},
    {SET_CANVAS, 3, 1, "canvas: the item at its trained scale at a random position, uniform 0..255 noise background"},
    {SET_CANVAS, 4, 1, "canvas: the item at its trained scale at a random position, uniform 0..255 noise background"},
    {SET_TILE, 2, 0, "repetition: the item tiled 2x2"},
    {SET_TILE, 3, 0, "repetition: the item tiled 3x3"},
    {SET_TILE, 4, 0, "repetition: the item tiled 4x4"},
    {SET_SHRINK, 1, 0, "scale at the training length: the item resized to half (bicubic) at a random position, zero background"},
    {SET_ZOOM, 1, 0, "scale at the training length: the centre half box resized 2x (bicubic)"},
};
#define NUM_SETS ((int)(sizeof k_sets / sizeof k_sets[0]))

static void set_name(char *dst, size_t cap, const SetDef *d, int s0) {
    switch (d->kind) {
    case SET_CANVAS: snprintf(dst, cap, "canvas%d_%s", d->mult * s0, d->noise ? "noise" : "zero"); break;
    case SET_TILE: snprintf(dst, cap, "tile%d", d->mult); break;
    case SET_SHRINK: snprintf(dst, cap, "shrink"); break;
    case SET_ZOOM: snprintf(dst, cap, "zoom2"); break;
    }
}

typedef struct {
    const char *data, *split, *out;
    uint64_t seed;
    long limit; /* 0: every item */
} Opts;

/* ---- command line ---- */

/* 0, 1 after --help (exit 0), or 2 after a message and the usage line on stderr (exit 2) */
static int parse_args(int argc, char **argv, Opts *o) {
    *o = (Opts){.split = "val"};
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            printf(USAGE "Writes OUT/<set>/" OUT_PREFIX "-images-idx3-ubyte and its labels for each length set\n"
                         "(canvas<side>_zero/_noise, tile2..4, shrink, zoom2) of the gray S0 x S0 items of\n"
                         "DIR's split, and OUT/sets.json. --seed: the placements and noise (default 0).\n"
                         "--limit N: the first N items. Read one back with vil eval --data OUT/<set>.\n");
            return 1;
        }
        char flag[32];
        const char *eq = strchr(s, '='), *val = eq ? eq + 1 : (i + 1 < argc ? argv[i + 1] : NULL);
        size_t fl = eq ? (size_t)(eq - s) : strlen(s);
        snprintf(flag, sizeof flag, "%.*s", (int)fl, s);
        if (strncmp(s, "--", 2) != 0) {
            fprintf(stderr, "length_sets: unexpected argument '%s'\n", s);
            goto usage;
        }
        if (!val) {
            fprintf(stderr, "length_sets: %s needs a value\n", flag);
            goto usage;
        }
        long v = 0;
        if (strcmp(flag, "--data") == 0) o->data = val;
        else if (strcmp(flag, "--split") == 0) o->split = val;
        else if (strcmp(flag, "--out") == 0) o->out = val;
        else if (strcmp(flag, "--seed") == 0 || strcmp(flag, "--limit") == 0) {
            int is_seed = flag[2] == 's';
            if (vil_parse_int(val, &v) != 0 || v < (is_seed ? 0 : 1)) {
                fprintf(stderr, "length_sets: %s wants an integer >= %d, got '%s'\n", flag, is_seed ? 0 : 1, val);
                goto usage;
            }
            if (is_seed) o->seed = (uint64_t)v;
            else o->limit = v;
        } else {
            fprintf(stderr, "length_sets: unknown option '%s'\n", flag);
            goto usage;
        }
        if (!eq) i++;
    }
    if (o->data && o->out) return 0;
    fprintf(stderr, "length_sets: --data and --out are required\n");
usage:
    fprintf(stderr, USAGE);
    return 2;
}

/* ---- the items ---- */

/* The first n items of ds as gray s0 x s0 pictures, (n, s0, s0) in *px. Items of another size
 * are refused: every set is defined relative to the one trained side. 0, or -1 (vil_error). */
static int read_items(const VilDataset *ds, int n, int *s0, unsigned char **px) {
    VilBuffer scratch = {0};
    *px = NULL;
    *s0 = 0;
    for (int i = 0; i < n; i++) {
        VilImage im = {0};
        if (vil_dataset_read_image(ds, i, 1, &im, &scratch) != 0) {
            char p[PATH_LEN];
            vil_dataset_path(ds, i, p, sizeof p);
            vil_error("cannot read item %d ('%s') of '%s'", i, p, vil_dataset_source(ds));
            goto fail;
        }
        if (i == 0) {
            if (im.w != im.h) {
                vil_error("item 0 of '%s' is %dx%d: length_sets wants square items of one side (the "
                          "trained side, e.g. 28 for Fashion-MNIST)", vil_dataset_source(ds), im.w, im.h);
                vil_image_free(&im);
                goto fail;
            }
            *s0 = im.w;
            *px = vil_malloc((size_t)n * im.w * im.h);
        } else if (im.w != *s0 || im.h != *s0) {
            char p[PATH_LEN];
            vil_dataset_path(ds, i, p, sizeof p);
            vil_error("item %d ('%s') is %dx%d but item 0 is %dx%d: length_sets wants every item at one "
                      "side (resize the set first)", i, p, im.w, im.h, *s0, *s0);
            vil_image_free(&im);
            goto fail;
        }
        memcpy(*px + (size_t)i * *s0 * *s0, im.px, (size_t)*s0 * *s0);
        vil_image_free(&im);
    }
    vil_buffer_free(&scratch);
    return 0;
fail:
    vil_buffer_free(&scratch);
    free(*px);
    *px = NULL;
    return -1;
}

/* ---- one image of a set ---- */

static void paste(unsigned char *canvas, int side, const unsigned char *item, int s, int x0, int y0) {
    for (int y = 0; y < s; y++) memcpy(canvas + (size_t)(y0 + y) * side + x0, item + (size_t)y * s, (size_t)s);
}

/* dst (side, side): item i of set d. Draw order per image: x, y, then the noise row by row
 * (vil_canvas_place's; shrink draws x, y the same way). */
static int make_image(unsigned char *dst, int side, const SetDef *d, int set, int i, const unsigned char *item,
                      int s0, uint64_t seed) {
    VilRng r;
    vil_rng_seed(&r, vil_hash_seed(seed, (uint64_t)set, (uint64_t)i, 0));
    switch (d->kind) {
    case SET_CANVAS: /* the training transform's canvas places items with the same function */
        return vil_canvas_place(dst, side, item, s0, s0, 1, d->noise ? VIL_CANVAS_NOISE : VIL_CANVAS_ZERO, 0, &r,
                                NULL, NULL);
    case SET_TILE:
        for (int ty = 0; ty < d->mult; ty++)
            for (int tx = 0; tx < d->mult; tx++) paste(dst, side, item, s0, tx * s0, ty * s0);
        return 0;
    case SET_SHRINK: {
        int h = s0 / 2 > 0 ? s0 / 2 : 1;
        unsigned char *sm = vil_malloc((size_t)h * h);
        if (vil_resize_bicubic_box(sm, item, s0, s0, (size_t)s0, 1, h, h, NULL) != 0) {
            free(sm);
            return -1;
        }
        int x0 = (int)vil_rng_below(&r, (uint32_t)(s0 - h + 1));
        int y0 = (int)vil_rng_below(&r, (uint32_t)(s0 - h + 1));
        memset(dst, 0, (size_t)s0 * s0);
        paste(dst, s0, sm, h, x0, y0);
        free(sm);
        return 0;
    }
    case SET_ZOOM: {
        /* the centre box of half the side, fractional when s0 is not a multiple of 4 (Pillow's box) */
        const double box[4] = {s0 / 4.0, s0 / 4.0, s0 * 3.0 / 4.0, s0 * 3.0 / 4.0};
        return vil_resize_bicubic_box(dst, item, s0, s0, (size_t)s0, 1, s0, s0, box);
    }
    }
    return -1;
}

/* ---- files ---- */

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

/* One set into OUT/<name>/: the images file and the labels file. 0, or -1 (vil_error). */
static int write_set(const Opts *o, const char *name, int set, const SetDef *d, const unsigned char *items,
                     const unsigned char *labels, int n, int s0) {
    int side = d->kind == SET_SHRINK || d->kind == SET_ZOOM ? s0 : d->mult * s0;
    size_t per = (size_t)side * side;
    char dir[PATH_LEN], path[PATH_LEN + 64];
    if (snprintf(dir, sizeof dir, "%s/%s", o->out, name) >= (int)sizeof dir) {
        vil_error("--out '%s' is too long", o->out);
        return -1;
    }
    if (vil_mkdir_p(dir) != 0) return -1;
    unsigned char *img = vil_malloc(16 + (size_t)n * per);
    put_be32(img, 0x00000803u);
    put_be32(img + 4, (uint32_t)n);
    put_be32(img + 8, (uint32_t)side);
    put_be32(img + 12, (uint32_t)side);
    for (int i = 0; i < n; i++)
        if (make_image(img + 16 + (size_t)i * per, side, d, set, i, items + (size_t)i * s0 * s0, s0, o->seed) != 0) {
            free(img);
            return -1;
        }
    snprintf(path, sizeof path, "%s/" OUT_PREFIX "-images-idx3-ubyte", dir);
    int rc = vil_write_file_atomic(path, img, 16 + (size_t)n * per);
    free(img);
    if (rc != 0) return -1;
    unsigned char *lab = vil_malloc(8 + (size_t)n);
    put_be32(lab, 0x00000801u);
    put_be32(lab + 4, (uint32_t)n);
    memcpy(lab + 8, labels, (size_t)n);
    snprintf(path, sizeof path, "%s/" OUT_PREFIX "-labels-idx1-ubyte", dir);
    rc = vil_write_file_atomic(path, lab, 8 + (size_t)n);
    free(lab);
    return rc != 0 ? -1 : 0;
}

/* OUT/sets.json: one entry per set. The names and texts are plain ASCII: no escaping needed. */
static int write_manifest(const Opts *o, int s0, int n) {
    size_t cap = 8192, len = 0;
    char *b = vil_malloc(cap);
    len += (size_t)snprintf(b + len, cap - len, "{\n  \"tool\": \"length_sets\",\n  \"item_side\": %d,\n  \"seed\": %llu,\n"
                            "  \"count\": %d,\n  \"split\": \"" OUT_PREFIX "\",\n  \"sets\": [\n",
                            s0, (unsigned long long)o->seed, n);
    for (int s = 0; s < NUM_SETS; s++) {
        const SetDef *d = &k_sets[s];
        char name[64];
        set_name(name, sizeof name, d, s0);
        int side = d->kind == SET_SHRINK || d->kind == SET_ZOOM ? s0 : d->mult * s0;
        len += (size_t)snprintf(b + len, cap - len,
                                "    {\"name\": \"%s\", \"canvas\": %d, \"changes\": \"%s\", \"seed\": %llu, \"count\": %d}%s\n",
                                name, side, d->changes, (unsigned long long)o->seed, n, s + 1 < NUM_SETS ? "," : "");
    }
    len += (size_t)snprintf(b + len, cap - len, "  ]\n}\n");
    char path[PATH_LEN + 16];
    snprintf(path, sizeof path, "%s/sets.json", o->out);
    int rc = len < cap ? vil_write_file_atomic(path, b, len) : -1;
    free(b);
    return rc != 0 ? -1 : 0;
}

int main(int argc, char **argv) {
    Opts o;
    int prc = parse_args(argc, argv, &o);
    if (prc) return prc == 1 ? 0 : 2;
    VilDataset *ds = vil_dataset_open(o.data, o.split, NULL);
    if (!ds) return 1;
    int rc = 1, n = vil_dataset_size(ds), s0 = 0;
    if (o.limit > 0 && o.limit < n) n = (int)o.limit;
    unsigned char *items = NULL, *labels = NULL;
    if (n < 1) {
        vil_error("'%s' has no items", vil_dataset_source(ds));
        goto done;
    }
    if (vil_dataset_num_classes(ds) > 256) {
        vil_error("'%s' has %d classes: IDX labels hold at most 256", vil_dataset_source(ds), vil_dataset_num_classes(ds));
        goto done;
    }
    if (read_items(ds, n, &s0, &items) != 0) goto done;
    if (s0 * 4 > 65535) {
        vil_error("items of side %d are too large for a 4x canvas", s0);
        goto done;
    }
    labels = vil_malloc((size_t)n);
    for (int i = 0; i < n; i++) labels[i] = (unsigned char)vil_dataset_label(ds, i);
    if (vil_mkdir_p(o.out) != 0) goto done;
    for (int s = 0; s < NUM_SETS; s++) {
        char name[64];
        set_name(name, sizeof name, &k_sets[s], s0);
        if (write_set(&o, name, s, &k_sets[s], items, labels, n, s0) != 0) goto done;
        printf("length_sets: %s/%s: %d images\n", o.out, name, n);
    }
    if (write_manifest(&o, s0, n) != 0) goto done;
    rc = 0;
done:
    free(items);
    free(labels);
    vil_dataset_free(ds);
    return rc;
}
