/* test_length_sets.c: tools/length_sets run as a command on a tiny IDX set the test writes. Each
 * set must read back through vil's dataset API (what vil eval opens) with the source's labels, and
 * its pixels must be what the set says: the item unchanged at some position (canvas, tiles), the
 * rest zero or noise, shrink and zoom2 against vil_resize_bicubic's window path called here;
 * the same seed byte-identical, another seed different, --limit keeping the first images. */
#include <stdarg.h>
#include <string.h>

#include "data/dataset.h"
#include "data/transform.h"
#include "tests/data_corpus.h"
#include "tests/testing.h"
#include "vil/common.h"

#define N 7
#define S0 28
#define CLASSES 3

static char g_tool[4096];

/* the tool with arguments (printf-style), stderr joined to stdout into out: the exit status */
#define run_tool(out, n, ...) t_run_tool(g_tool, out, n, __VA_ARGS__)

static const struct {
    const char *name;
    int side;
} k_sets[] = {{"canvas56_zero", 56}, {"canvas84_zero", 84}, {"canvas112_zero", 112}, {"canvas56_noise", 56},
              {"canvas84_noise", 84}, {"canvas112_noise", 112}, {"tile2", 56}, {"tile3", 84}, {"tile4", 112},
              {"shrink", S0}, {"zoom2", S0}};
#define NUM_SETS ((int)(sizeof k_sets / sizeof k_sets[0]))

/* the whole file at path (NULL when missing); *n its size */
static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(len > 0 ? (size_t)len : 1);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

/* 1 when item (s, s) sits at (x0, y0) in canvas (side, side) */
static int item_at(const unsigned char *canvas, int side, const unsigned char *item, int s, int x0, int y0) {
    for (int y = 0; y < s; y++)
        if (memcmp(canvas + (size_t)(y0 + y) * side + x0, item + (size_t)y * s, (size_t)s) != 0) return 0;
    return 1;
}

/* pixels of canvas outside the s x s box at (x0, y0) that are not zero */
static long nonzero_outside(const unsigned char *canvas, int side, int s, int x0, int y0) {
    long nz = 0;
    for (int y = 0; y < side; y++)
        for (int x = 0; x < side; x++)
            if (!(x >= x0 && x < x0 + s && y >= y0 && y < y0 + s) && canvas[(size_t)y * side + x]) nz++;
    return nz;
}

/* Find item in canvas: for zero_rest, a position whose outside is all zero. 1 found (*px, *py) */
static int find_item(const unsigned char *canvas, int side, const unsigned char *item, int s, int zero_rest,
                     int *px, int *py) {
    for (int y = 0; y + s <= side; y++)
        for (int x = 0; x + s <= side; x++)
            if (item_at(canvas, side, item, s, x, y) && (!zero_rest || nonzero_outside(canvas, side, s, x, y) == 0)) {
                *px = x, *py = y;
                return 1;
            }
    return 0;
}

/* Every set of out against src: reading back, labels, pixels. pos: (set, image) -> x, y of the
 * canvas and shrink sets, for the --limit check */
static void check_sets(const char *out, const VilDataset *src, int n, uint64_t seed, int pos[NUM_SETS][N][2]) {
    for (int s = 0; s < NUM_SETS; s++) {
        const char *name = k_sets[s].name;
        int side = k_sets[s].side;
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", out, name);
        VilDataset *ds = vil_dataset_open(dir, "val", NULL);
        T_CHECK(ds != NULL, "%s does not open as split val", dir);
        if (!ds) continue;
        VilDataset *dt = vil_dataset_open(dir, "test", NULL);
        T_CHECK(dt != NULL && vil_dataset_size(dt) == n, "%s: split test reads the same %d images", name, n);
        vil_dataset_free(dt);
        T_CHECK(vil_dataset_kind(ds) == VIL_DATA_IDX, "%s: an IDX set", name);
        T_CHECK(vil_dataset_size(ds) == n, "%s: %d images, want %d", name, vil_dataset_size(ds), n);
        int labels_ok = 1, size_ok = 1, px_ok = 1, rest_ok = 1, stream_ok = 1;
        for (int i = 0; i < vil_dataset_size(ds) && i < n; i++) {
            if (vil_dataset_label(ds, i) != vil_dataset_label(src, i)) labels_ok = 0;
            VilImage im, it;
            if (vil_dataset_raw_image(ds, i, &im) != 0 || vil_dataset_raw_image(src, i, &it) != 0 || im.w != side ||
                im.h != side || im.c != 1) {
                size_ok = 0;
                continue;
            }
            int x = -1, y = -1;
            if (strncmp(name, "canvas", 6) == 0) {
                int zero = strstr(name, "_zero") != NULL;
                if (!find_item(im.px, side, it.px, S0, zero, &x, &y)) px_ok = 0;
                else if (!zero && nonzero_outside(im.px, side, S0, x, y) < (long)side * side / 2) rest_ok = 0;
            } else if (strncmp(name, "tile", 4) == 0) {
                for (int ty = 0; ty < side / S0; ty++)
                    for (int tx = 0; tx < side / S0; tx++)
                        if (!item_at(im.px, side, it.px, S0, tx * S0, ty * S0)) px_ok = 0;
            } else if (strcmp(name, "shrink") == 0) {
                unsigned char sm[(S0 / 2) * (S0 / 2)];
                if (vil_resize_bicubic(sm, S0 / 2, S0 / 2, 0, 0, it.px, S0, S0, S0, 1, S0 / 2, S0 / 2) != 0 ||
                    !find_item(im.px, side, sm, S0 / 2, 1, &x, &y))
                    px_ok = 0;
            } else { /* zoom2: the window at S0/2 of the whole picture resized 2x is the centre box resized */
                unsigned char z[S0 * S0];
                if (vil_resize_bicubic(z, S0, S0, S0 / 2, S0 / 2, it.px, S0, S0, S0, 1, 2 * S0, 2 * S0) != 0 ||
                    memcmp(z, im.px, sizeof z) != 0)
                    px_ok = 0;
            }
            pos[s][i][0] = x, pos[s][i][1] = y;
            if (strncmp(name, "canvas", 6) == 0 || strcmp(name, "shrink") == 0) {
                /* the documented stream: vil_hash_seed(seed, set, index, 0), x drawn first, then y */
                int free_side = strcmp(name, "shrink") == 0 ? S0 - S0 / 2 + 1 : side - S0 + 1;
                VilRng r;
                vil_rng_seed(&r, vil_hash_seed(seed, (uint64_t)s, (uint64_t)i, 0));
                int wx = (int)vil_rng_below(&r, (uint32_t)free_side), wy = (int)vil_rng_below(&r, (uint32_t)free_side);
                if (wx != x || wy != y) stream_ok = 0;
            }
        }
        T_CHECK(labels_ok, "%s: the source's labels in its order", name);
        T_CHECK(size_ok, "%s: gray %dx%d images", name, side, side);
        T_CHECK(px_ok, "%s: the pixels are not the item as the set says", name);
        T_CHECK(rest_ok, "%s: the background is not noise", name);
        T_CHECK(stream_ok, "%s: a position is not the draw of its own stream", name);
        vil_dataset_free(ds);
    }
}

/* 1 when the set's two files are byte-identical in a and b */
static int same_files(const char *a, const char *b, const char *set) {
    const char *files[2] = {"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
    int same = 1;
    for (int f = 0; f < 2; f++) {
        char pa[4096], pb[4096];
        snprintf(pa, sizeof pa, "%s/%s/%s", a, set, files[f]);
        snprintf(pb, sizeof pb, "%s/%s/%s", b, set, files[f]);
        size_t na = 0, nb = 0;
        unsigned char *da = slurp(pa, &na), *db = slurp(pb, &nb);
        if (!da || !db || na != nb || memcmp(da, db, na) != 0) same = 0;
        free(da);
        free(db);
    }
    return same;
}

/* A class-folder set of gray JPEGs: read through the same API (the pixels vil decodes, labels by
 * sorted folder name); then one item of another size, which the tool refuses by name. */
static void test_folder(const char *tmp) {
    char root[4096], out[4096], p[8192], log[16384];
    snprintf(root, sizeof root, "%s/folders", tmp);
    snprintf(out, sizeof out, "%s/folders_out", tmp);
    corpus_mkdir("%s%s", root, "");
    corpus_mkdir("%s%s", root, "/val");
    const char *classes[2] = {"a_shirt", "b_shoe"};
    for (int c = 0; c < 2; c++) {
        snprintf(p, sizeof p, "%s/val/%s", root, classes[c]);
        corpus_mkdir("%s%s", p, "");
        for (int k = 0; k < 2; k++) {
            snprintf(p, sizeof p, "%s/val/%s/%d.JPEG", root, classes[c], k);
            corpus_write_jpeg(p, S0, S0, 1, c, 2 * c + k, 0);
        }
    }
    int rc = run_tool(log, sizeof log, "--data %s --split val --out %s", root, out);
    T_CHECK(rc == 0, "folders: length_sets failed (%d): %s", rc, log);
    VilDataset *src = vil_dataset_open(root, "val", NULL), *t2 = NULL;
    snprintf(p, sizeof p, "%s/tile2", out);
    if (rc == 0) t2 = vil_dataset_open(p, "val", NULL);
    T_CHECK(src && t2 && vil_dataset_size(t2) == 4, "folders: tile2 reads back with 4 images");
    int ok = src && t2 && vil_dataset_size(t2) == 4;
    for (int i = 0; ok && i < 4; i++) {
        VilImage it = {0}, im;
        if (vil_dataset_read_image(src, i, 1, &it, NULL) != 0 || vil_dataset_raw_image(t2, i, &im) != 0 ||
            im.w != 2 * S0 || vil_dataset_label(t2, i) != vil_dataset_label(src, i)) {
            ok = 0;
        } else {
            for (int ty = 0; ty < 2; ty++)
                for (int tx = 0; tx < 2; tx++)
                    if (!item_at(im.px, 2 * S0, it.px, S0, tx * S0, ty * S0)) ok = 0;
        }
        vil_image_free(&it);
    }
    T_CHECK(ok, "folders: tile2 holds each decoded gray item 2x2 with its folder's label");
    vil_dataset_free(t2);
    vil_dataset_free(src);
    snprintf(p, sizeof p, "%s/val/b_shoe/9.JPEG", root);
    corpus_write_jpeg(p, S0 + 4, S0, 1, 1, 9, 0);
    snprintf(out, sizeof out, "%s/folders_out2", tmp);
    rc = run_tool(log, sizeof log, "--data %s --split val --out %s", root, out);
    T_CHECK(rc == 1 && strstr(log, "9.JPEG") && strstr(log, "32x28"), "folders: an item of another size is refused by name (%d): %s", rc, log);
}

int main(void) {
    const char *build = getenv("VIL_BUILD");
    snprintf(g_tool, sizeof g_tool, "%s/tools/length_sets", build && *build ? build : "build");
    if (access(g_tool, X_OK) != 0) {
        printf("FAIL %s is missing: run make (test-run builds it)\n", g_tool);
        t_failed++;
        return t_finish();
    }
    char *tmp = corpus_mkdtemp("length_sets");
    char data[4096], out1[4096], out2[4096], out3[4096], out4[4096], log[16384];
    snprintf(data, sizeof data, "%s/data", tmp);
    snprintf(out1, sizeof out1, "%s/out1", tmp);
    snprintf(out2, sizeof out2, "%s/out2", tmp);
    snprintf(out3, sizeof out3, "%s/out3", tmp);
    snprintf(out4, sizeof out4, "%s/out4", tmp);
    corpus_mkdir("%s%s", data, "");
    corpus_write_idx_set(data, "t10k", N, S0, S0, CLASSES, 0);
    VilDataset *src = vil_dataset_open(data, "val", NULL);
    T_CHECK(src != NULL, "the source set does not open");
    if (!src) goto done;

    int rc = run_tool(log, sizeof log, "--data %s --seed 5 --out %s", data, out1);
    T_CHECK(rc == 0, "length_sets failed (%d): %s", rc, log);
    static int pos[NUM_SETS][N][2];
    check_sets(out1, src, N, 5, pos);
    size_t mn = 0;
    char mpath[4200];
    snprintf(mpath, sizeof mpath, "%s/sets.json", out1);
    char *manifest = (char *)slurp(mpath, &mn);
    T_CHECK(manifest != NULL, "no %s", mpath);
    if (manifest) {
        manifest = realloc(manifest, mn + 1);
        manifest[mn] = 0;
        int named = 1;
        for (int s = 0; s < NUM_SETS; s++) {
            char key[64];
            snprintf(key, sizeof key, "\"name\": \"%s\", \"canvas\": %d", k_sets[s].name, k_sets[s].side);
            if (!strstr(manifest, key)) named = 0;
        }
        T_CHECK(named, "sets.json names every set with its canvas: %s", manifest);
        T_CHECK(strstr(manifest, "\"seed\": 5,") && strstr(manifest, "\"count\": 7"), "sets.json: seed and count");
        free(manifest);
    }

    /* the same seed again: byte-identical; another seed: different placements */
    rc = run_tool(log, sizeof log, "--data %s --seed 5 --out %s", data, out2);
    T_CHECK(rc == 0, "second run failed (%d): %s", rc, log);
    rc = run_tool(log, sizeof log, "--data %s --seed 6 --out %s", data, out3);
    T_CHECK(rc == 0, "seed 6 run failed (%d): %s", rc, log);
    for (int s = 0; s < NUM_SETS; s++) {
        T_CHECK(same_files(out1, out2, k_sets[s].name), "%s: the same seed is not byte-identical", k_sets[s].name);
        int random = strncmp(k_sets[s].name, "canvas", 6) == 0 || strcmp(k_sets[s].name, "shrink") == 0;
        if (random) T_CHECK(!same_files(out1, out3, k_sets[s].name), "%s: seeds 5 and 6 give the same files", k_sets[s].name);
        else T_CHECK(same_files(out1, out3, k_sets[s].name), "%s: no draws, yet the seed changed it", k_sets[s].name);
    }

    /* --limit 3: the first three images, each placed as in the full run */
    rc = run_tool(log, sizeof log, "--data %s --seed 5 --limit 3 --out %s", data, out4);
    T_CHECK(rc == 0, "--limit run failed (%d): %s", rc, log);
    static int pos4[NUM_SETS][N][2];
    check_sets(out4, src, 3, 5, pos4);
    int kept = 1;
    for (int s = 0; s < NUM_SETS; s++)
        for (int i = 0; i < 3; i++)
            if (pos4[s][i][0] != pos[s][i][0] || pos4[s][i][1] != pos[s][i][1]) kept = 0;
    T_CHECK(kept, "--limit 3 moved an image of the first three");
    /* the noise too: the first three images of the noise sets byte for byte */
    for (int s = 3; s < 6; s++) {
        char pa[4200], pb[4200];
        snprintf(pa, sizeof pa, "%s/%s/t10k-images-idx3-ubyte", out1, k_sets[s].name);
        snprintf(pb, sizeof pb, "%s/%s/t10k-images-idx3-ubyte", out4, k_sets[s].name);
        size_t na = 0, nb = 0;
        unsigned char *da = slurp(pa, &na), *db = slurp(pb, &nb);
        size_t per = (size_t)k_sets[s].side * k_sets[s].side;
        T_CHECK(da && db && nb == 16 + 3 * per && na >= nb && memcmp(da + 16, db + 16, 3 * per) == 0,
                "%s: --limit 3 changed the first images", k_sets[s].name);
        free(da);
        free(db);
    }

    /* the usage and a missing dataset */
    rc = run_tool(log, sizeof log, "--data %s", data);
    T_CHECK(rc == 2 && strstr(log, "--out"), "no --out: exit 2 naming it (%d): %s", rc, log);
    rc = run_tool(log, sizeof log, "--data %s/none --out %s/x", tmp, tmp);
    T_CHECK(rc == 1 && strstr(log, "does not exist"), "missing data: exit 1 (%d): %s", rc, log);
    vil_dataset_free(src);
    test_folder(tmp);
done:
    corpus_rmtree(tmp);
    free(tmp);
    return t_finish();
}
