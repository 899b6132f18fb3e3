/* test_tools.c: the programs in tools/, run as commands on data the test writes in a temporary
 * folder. idx_to_folder: the class folders of JPEGs it makes from an IDX set must read back
 * through vil's folder layout with the IDX labels, and the pixels must be the bicubic resize of
 * the IDX pictures (up to JPEG's loss). */
#include <stdarg.h>
#include <string.h>

#include "data/dataset.h"
#include "data/transform.h"
#include "tests/data_corpus.h"
#include "tests/testing.h"
#include "vil/common.h"

static char g_tool[4096];

/* the tool with arguments (printf-style), stderr joined to stdout into out: the exit status */
#define run_tool(out, n, ...) t_run_tool(g_tool, out, n, __VA_ARGS__)

/* The split of the written folder against the IDX split it came from: the size, the class
 * folder names (given by the test, in label order), and per sample the index in its file name
 * (name_width digits + ".JPEG"; each index once, all below `want`) and its label. */
static void check_split(const char *out, const char *split, const VilDataset *idx, int want, int name_width,
                        const char *const *class_dirs, int num_classes) {
    VilDataset *ds = vil_dataset_open(out, split, NULL);
    T_CHECK(ds != NULL, "%s/%s does not open", out, split);
    if (!ds) return;
    T_CHECK(vil_dataset_kind(ds) == VIL_DATA_FOLDER, "%s: a folder layout", split);
    T_CHECK(vil_dataset_size(ds) == want, "%s: %d images, want %d", split, vil_dataset_size(ds), want);
    T_CHECK(vil_dataset_num_classes(ds) == num_classes, "%s: %d classes, want %d", split,
            vil_dataset_num_classes(ds), num_classes);
    int names_ok = vil_dataset_num_classes(ds) == num_classes;
    for (int c = 0; names_ok && c < num_classes; c++) {
        names_ok = strcmp(vil_dataset_class_id(ds, c), class_dirs[c]) == 0;
        T_CHECK(names_ok, "%s: class %d is '%s', want '%s'", split, c, vil_dataset_class_id(ds, c), class_dirs[c]);
    }
    int *seen = calloc((size_t)want, sizeof(int));
    int bad_name = 0, bad_label = 0;
    for (int j = 0; j < vil_dataset_size(ds); j++) {
        char path[8192];
        vil_dataset_path(ds, j, path, sizeof path);
        const char *file = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        char *end;
        long i = strtol(file, &end, 10);
        if ((int)(end - file) != name_width || strcmp(end, ".JPEG") != 0 || i < 0 || i >= want || seen[i]++) {
            if (!bad_name++) printf("FAIL %s: file '%s' (want %d digits + .JPEG, a new index below %d)\n", split,
                                    path, name_width, want);
            continue;
        }
        if (vil_dataset_label(ds, j) != vil_dataset_label(idx, (int)i) && !bad_label++)
            printf("FAIL %s: '%s' has label %d, the IDX sample %ld %d\n", split, path, vil_dataset_label(ds, j), i,
                   vil_dataset_label(idx, (int)i));
    }
    T_CHECK(bad_name == 0, "%s: %d bad file names", split, bad_name);
    T_CHECK(bad_label == 0, "%s: %d labels differ from the IDX labels", split, bad_label);
    if (!bad_name && !bad_label && names_ok && vil_dataset_size(ds) == want)
        printf("ok   idx_to_folder %-5s %d images, %d classes, labels = IDX labels by file index\n", split, want,
               num_classes);
    free(seen);
    vil_dataset_free(ds);
}

/* Every image of the split decoded (vil_dataset_read_image, RGB) against the bicubic resize of
 * its IDX picture to size x size: the worst image's mean |R - reference| and the largest
 * difference between two channels of a pixel. */
static void check_pixels(const char *out, const char *split, const VilDataset *idx, int size) {
    VilDataset *ds = vil_dataset_open(out, split, NULL);
    if (!ds) return; /* check_split reported it */
    unsigned char *ref = malloc((size_t)size * size);
    double worst = 0.0;
    int spread = 0, bad = 0;
    for (int j = 0; j < vil_dataset_size(ds); j++) {
        char path[8192];
        vil_dataset_path(ds, j, path, sizeof path);
        int i = atoi(strrchr(path, '/') + 1);
        VilImage im, raw;
        if (vil_dataset_read_image(ds, j, 3, &im, NULL) != 0 || vil_dataset_raw_image(idx, i, &raw) != 0) {
            bad++;
            continue;
        }
        if (im.w != size || im.h != size || im.c != 3) {
            if (!bad++) printf("FAIL %s: '%s' is %dx%dx%d, want %dx%dx3\n", split, path, im.w, im.h, im.c, size, size);
            vil_image_free(&im);
            continue;
        }
        vil_resize_bicubic_box(ref, raw.px, raw.w, raw.h, (size_t)raw.w, 1, size, size, NULL);
        double sum = 0.0;
        for (int p = 0; p < size * size; p++) {
            const unsigned char *px = im.px + 3 * p;
            sum += abs((int)px[0] - (int)ref[p]);
            int d1 = abs((int)px[0] - (int)px[1]), d2 = abs((int)px[0] - (int)px[2]);
            if (d1 > spread) spread = d1;
            if (d2 > spread) spread = d2;
        }
        if (sum / (size * size) > worst) worst = sum / (size * size);
        vil_image_free(&im);
    }
    T_CHECK(bad == 0, "%s: %d images unreadable or of the wrong size", split, bad);
    char name[128];
    snprintf(name, sizeof name, "idx_to_folder %s: JPEG vs bicubic, worst mean |diff|", split);
    T_CLOSE(name, worst, 3.0);
    snprintf(name, sizeof name, "idx_to_folder %s: R, G, B spread (levels)", split);
    T_CLOSE(name, (double)spread, 1.0);
    free(ref);
    vil_dataset_free(ds);
}

/* An IDX corpus in tmp/sub (ntr train, nte test pictures of h x w, `classes` classes; one split
 * gzipped, the other plain), opened: 0, or -1 after a failed check. */
static int make_idx(const char *tmp, const char *sub, int ntr, int nte, int h, int w, int classes,
                    int gz_train, char *idxdir, size_t len, VilDataset **train, VilDataset **test) {
    snprintf(idxdir, len, "%s/%s", tmp, sub);
    corpus_mkdir("%s/%s", tmp, sub);
    corpus_write_idx_set(idxdir, "train", ntr, h, w, classes, gz_train);
    corpus_write_idx_set(idxdir, "t10k", nte, h, w, classes, !gz_train);
    *train = vil_dataset_open(idxdir, "train", NULL);
    *test = vil_dataset_open(idxdir, "test", NULL);
    T_CHECK(*train && *test, "the IDX corpus does not open");
    if (*train && *test) return 0;
    vil_dataset_free(*train);
    vil_dataset_free(*test);
    return -1;
}

/* Fashion-MNIST's names (the data folder's path says "fashion"), 28x28 pictures upsampled. */
static void test_fashion(const char *tmp) {
    char idxdir[4096], out[4096], log[8192];
    snprintf(out, sizeof out, "%s/out", tmp);
    VilDataset *train, *test;
    if (make_idx(tmp, "idx", 30, 12, 28, 28, 10, 0, idxdir, sizeof idxdir, &train, &test) != 0) return;

    int rc = run_tool(log, sizeof log, "'%s' '%s' --size 32 --quality 95 --threads 2", idxdir, out);
    T_CHECK(rc == 0, "idx_to_folder exited %d:\n%s", rc, log);
    T_CHECK(strstr(log, "train 30 images, val 12 images") != NULL, "summary line missing:\n%s", log);
    T_CHECK(strstr(log, "train 100% (30 / 30)") && strstr(log, "val 100% (12 / 12)"), "progress lines:\n%s", log);
    if (rc == 0) printf("ok   idx_to_folder 30 + 12 images, exit 0\n");
    static const char *const fashion_dirs[10] = {"0_T-shirt-top", "1_Trouser", "2_Pullover", "3_Dress",
                                                 "4_Coat",        "5_Sandal",  "6_Shirt",    "7_Sneaker",
                                                 "8_Bag",         "9_Ankle-boot"};
    check_split(out, "train", train, 30, 2, fashion_dirs, 10);
    check_split(out, "val", test, 12, 2, fashion_dirs, 10);
    check_pixels(out, "train", train, 32);
    check_pixels(out, "val", test, 32);

    /* no temporary file is left behind (vil would skip them, being hidden, so look) */
    char found[4096];
    snprintf(log, sizeof log, "find '%s' -name '.*' -o -name '*.tmp*'", out);
    T_CHECK(t_run(log, found, sizeof found) == 0 && found[0] == 0, "leftover files: %s", found);

    /* a second run into the same OUTDIR is refused and changes nothing */
    rc = run_tool(log, sizeof log, "'%s' '%s' --size 32", idxdir, out);
    T_CHECK(rc == 1 && strstr(log, "already exists"), "second run: exit %d (want 1), '%s'", rc, log);
    if (rc == 1) printf("ok   idx_to_folder into an existing OUTDIR: exit 1\n");
    VilDataset *again = vil_dataset_open(out, "train", NULL);
    T_CHECK(again && vil_dataset_size(again) == 30, "the refused run changed OUTDIR/train");
    vil_dataset_free(again);

    /* usage errors exit 2 before anything is written */
    const char *bad[] = {"--size 0", "--size abc", "--quality 101", "--limit 0", "--threads x", "--bogus 3"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        rc = run_tool(log, sizeof log, "'%s' '%s/new' %s", idxdir, tmp, bad[k]);
        T_CHECK(rc == 2 && strstr(log, "usage: idx_to_folder"), "%s: exit %d (want 2), '%s'", bad[k], rc, log);
        if (rc == 2) printf("ok   idx_to_folder %-14s exit 2\n", bad[k]);
    }
    rc = run_tool(log, sizeof log, "'%s'", idxdir);
    T_CHECK(rc == 2, "no OUTDIR: exit %d (want 2)", rc);
    char newdir[4200];
    snprintf(newdir, sizeof newdir, "%s/new", tmp);
    T_CHECK(access(newdir, F_OK) != 0, "a refused command created '%s'", newdir);
    vil_dataset_free(train);
    vil_dataset_free(test);
}

/* 12 classes (two-digit folder prefixes, names without a names table), non-square 10x12
 * pictures downsampled, --limit on train and a limit above the size of the test split. */
static void test_limit(const char *tmp) {
    char idxdir[4096], out[4096], log[8192];
    snprintf(out, sizeof out, "%s/out12", tmp);
    VilDataset *train, *test;
    if (make_idx(tmp, "idx12", 24, 12, 10, 12, 12, 1, idxdir, sizeof idxdir, &train, &test) != 0) return;
    int rc = run_tool(log, sizeof log, "'%s' '%s' --size 8 --quality 95 --limit 20 --threads 1", idxdir, out);
    T_CHECK(rc == 0, "idx_to_folder --limit exited %d:\n%s", rc, log);
    T_CHECK(strstr(log, "train 20 images, val 12 images") != NULL, "summary line missing:\n%s", log);
    static const char *const dirs[12] = {"00_0", "01_1", "02_2", "03_3", "04_4",  "05_5",
                                         "06_6", "07_7", "08_8", "09_9", "10_10", "11_11"};
    check_split(out, "train", train, 20, 2, dirs, 12);
    check_split(out, "val", test, 12, 2, dirs, 12);
    check_pixels(out, "train", train, 8);
    vil_dataset_free(train);
    vil_dataset_free(test);
}

int main(void) {
    const char *build = getenv("VIL_BUILD"); /* make test-asan: build/asan */
    snprintf(g_tool, sizeof g_tool, "%s/tools/idx_to_folder", build && *build ? build : "build");
    if (access(g_tool, X_OK) != 0) {
        printf("FAIL %s is missing: run make (test-run builds it)\n", g_tool);
        t_failed++;
        return t_finish();
    }
    /* "fashion" in the path: vil names the IDX classes as Fashion-MNIST's */
    char *tmp = corpus_mkdtemp("fashion_tools");
    test_fashion(tmp);
    test_limit(tmp);
    corpus_rmtree(tmp);
    return t_finish();
}
