/* test_dataset.c: layout detection and its errors (class folders, flat folder + labels file,
 * IDX plain and gzip), reading bytes and pixels, class names; on a corpus the test writes in
 * a temporary folder; hostile files (a FIFO as a sample or a labels file, IDX headers claiming
 * gigabytes). Fashion-MNIST from Debian's package is opened too when installed. */
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/dataset.h"
#include "tests/data_corpus.h"
#include "tests/testing.h"
#include "vil/common.h"

/* the messages of the calls expected to fail */
static VilErrCapture g_cap;

static VilDataset *open_ok(const char *path, const char *split, const char *labels) {
    VilDataset *ds = vil_dataset_open(path, split, labels);
    T_CHECK(ds != NULL, "open %s (%s)", path, split ? split : "-");
    return ds;
}

/* Opening must fail with a message that holds `want`. */
static void open_fails(const char *what, const char *path, const char *split, const char *labels,
                       const char *want) {
    vil_error_capture(&g_cap);
    VilDataset *ds = vil_dataset_open(path, split, labels);
    vil_error_release(&g_cap);
    T_CHECK(ds == NULL, "%s: opened but should fail", what);
    T_CHECK(strstr(g_cap.msg, want) != NULL, "%s: message '%s' lacks '%s'", what, g_cap.msg, want);
    printf("ok   %-20s -> %s\n", what, g_cap.msg);
    vil_dataset_free(ds);
}

static void test_folder(const char *root) {
    char p[4096];
    corpus_mkdir("%s/%s", root, "train");
    corpus_mkdir("%s/%s", root, "val");
    const char *classes[3] = {"n02", "n01", "n10"}; /* sorted: n01 n02 n10 */
    for (int c = 0; c < 3; c++) {
        snprintf(p, sizeof p, "%s/train", root);
        corpus_mkdir("%s/%s", p, classes[c]);
        snprintf(p, sizeof p, "%s/val", root);
        corpus_mkdir("%s/%s", p, classes[c]);
        for (int i = 0; i < 4; i++) {
            snprintf(p, sizeof p, "%s/train/%s/img_%d.JPEG", root, classes[c], i);
            corpus_write_jpeg(p, 40, 30, 3, c, i, 0);
        }
        snprintf(p, sizeof p, "%s/val/%s/v.JPEG", root, classes[c]);
        corpus_write_jpeg(p, 40, 30, 3, c, 9, 0);
    }
    /* hidden files are skipped; any extension (or none) is a sample; the format is the bytes' */
    snprintf(p, sizeof p, "%s/train/n01/.hidden.JPEG", root);
    corpus_write_jpeg(p, 8, 8, 3, 0, 0, 0);
    snprintf(p, sizeof p, "%s/train/n01/.DS_Store", root);
    corpus_write(p, "x", 1);
    corpus_mkdir("%s/%s", root, "train/.git");
    snprintf(p, sizeof p, "%s/train/n01/png_named.JPEG", root);
    corpus_write_png(p, 20, 10, 0, 1);
    snprintf(p, sizeof p, "%s/train/n01/noext", root);
    corpus_write_jpeg(p, 12, 12, 1, 0, 2, 1);
    snprintf(p, sizeof p, "%s/train/n02/empty.JPEG", root);
    corpus_write(p, "", 0);

    VilDataset *ds = open_ok(root, "train", NULL);
    if (!ds) return;
    T_CHECK(vil_dataset_kind(ds) == VIL_DATA_FOLDER, "kind");
    T_CHECK(vil_dataset_num_classes(ds) == 3, "classes %d", vil_dataset_num_classes(ds));
    T_CHECK(vil_dataset_size(ds) == 15, "size %d (12 + png + noext + empty)", vil_dataset_size(ds));
    T_CHECK(strcmp(vil_dataset_class_id(ds, 0), "n01") == 0 &&
                strcmp(vil_dataset_class_id(ds, 1), "n02") == 0 &&
                strcmp(vil_dataset_class_id(ds, 2), "n10") == 0,
            "classes in sorted order");
    T_CHECK(vil_dataset_channels(ds) == 3, "channels");
    int counts[3] = {0};
    for (int i = 0; i < vil_dataset_size(ds); i++) counts[vil_dataset_label(ds, i)]++;
    T_CHECK(counts[0] == 6 && counts[1] == 5 && counts[2] == 4, "per-class counts %d %d %d",
            counts[0], counts[1], counts[2]);
    const int *mem;
    int cnt;
    vil_dataset_class_members(ds, 1, &mem, &cnt);
    T_CHECK(cnt == 5, "members of class 1: %d", cnt);
    int members_ok = 1;
    for (int k = 0; k < cnt; k++) members_ok &= vil_dataset_label(ds, mem[k]) == 1;
    T_CHECK(members_ok, "members carry their class");
    /* paths are sorted inside a class folder and start at the split folder */
    char path[4096];
    vil_dataset_path(ds, 0, path, sizeof path);
    T_CHECK(strstr(path, "/train/n01/img_0.JPEG") != NULL, "path 0: %s", path);

    /* reading: the PNG named .JPEG decodes by its bytes; the empty file is an error */
    VilBuffer buf = {0};
    VilImage im;
    int png = -1, empty = -1, noext = -1;
    for (int i = 0; i < vil_dataset_size(ds); i++) {
        vil_dataset_path(ds, i, path, sizeof path);
        if (strstr(path, "png_named")) png = i;
        if (strstr(path, "empty.JPEG")) empty = i;
        if (strstr(path, "noext")) noext = i;
    }
    T_CHECK(png >= 0 && empty >= 0 && noext >= 0, "found the odd files");
    if (png >= 0 && vil_dataset_read_image(ds, png, 3, &im, &buf) == 0) {
        T_CHECK(im.w == 20 && im.h == 10 && im.c == 3, "png size %dx%dx%d", im.w, im.h, im.c);
        vil_image_free(&im);
    } else {
        T_CHECK(0, "png named .JPEG");
    }
    if (noext >= 0 && vil_dataset_read_image(ds, noext, 3, &im, &buf) == 0) {
        T_CHECK(im.w == 12 && im.h == 12 && im.c == 3, "gray progressive jpeg as rgb");
        vil_image_free(&im);
    } else {
        T_CHECK(0, "gray progressive jpeg");
    }
    if (empty >= 0) {
        vil_error_capture(&g_cap);
        int rc = vil_dataset_read_bytes(ds, empty, &buf);
        vil_error_release(&g_cap);
        T_CHECK(rc != 0 && strstr(g_cap.msg, "0 bytes"), "empty file is an error: %s", g_cap.msg);
    }
    T_CHECK(vil_dataset_read_bytes(ds, 0, &buf) == 0 && buf.size > 100,
            "read bytes of a jpeg");
    T_CHECK(buf.data[0] == 0xFF && buf.data[1] == 0xD8, "jpeg magic");
    vil_buffer_free(&buf);

    /* class names: ImageNet-style tsv matched by wnid */
    char names[4096];
    snprintf(names, sizeof names, "%s/names.tsv", root);
    const char *tsv = "# index\twnid\tnames\n0\tn01\tfirst, one\n1\tn02\tsecond\n2\tn10\tthird\n";
    corpus_write(names, tsv, strlen(tsv));
    T_CHECK(vil_dataset_load_names(ds, names) == 0, "names");
    T_CHECK(strcmp(vil_dataset_class_name(ds, 0), "first, one") == 0 &&
                strcmp(vil_dataset_class_name(ds, 2), "third") == 0,
            "names by wnid: %s / %s", vil_dataset_class_name(ds, 0), vil_dataset_class_name(ds, 2));
    vil_dataset_free(ds);

    ds = open_ok(root, "val", NULL);
    if (ds) {
        T_CHECK(vil_dataset_size(ds) == 3 && vil_dataset_num_classes(ds) == 3, "val split");
        vil_dataset_free(ds);
    }
    snprintf(p, sizeof p, "%s/train", root);
    ds = open_ok(p, NULL, NULL);
    if (ds) {
        T_CHECK(vil_dataset_size(ds) == 15, "split folder given directly");
        vil_dataset_free(ds);
    }

    /* errors, each before any work */
    snprintf(p, sizeof p, "%s/nope", root);
    open_fails("missing path", p, "train", NULL, "does not exist");
    open_fails("missing split", root, "test", NULL, "has no 'test' folder");
    open_fails("root without split", root, NULL, NULL, "say which split");
    snprintf(p, sizeof p, "%s/emptydir", root);
    corpus_mkdir("%s/%s", root, "emptydir");
    open_fails("empty folder", p, NULL, NULL, "is empty");
    snprintf(p, sizeof p, "%s/flatonly", root);
    corpus_mkdir("%s/%s", root, "flatonly");
    char f[4200];
    snprintf(f, sizeof f, "%s/a.JPEG", p);
    corpus_write_jpeg(f, 8, 8, 3, 0, 0, 0);
    open_fails("no class folders", p, NULL, NULL, "no class folders");
    snprintf(p, sizeof p, "%s/emptyclasses", root);
    corpus_mkdir("%s/%s", root, "emptyclasses");
    corpus_mkdir("%s/%s", p, "c1");
    corpus_mkdir("%s/%s", p, "c2");
    open_fails("empty class folders", p, NULL, NULL, "no images");
    snprintf(f, sizeof f, "%s/a.JPEG", root);
    corpus_write(f, "x", 1);
    open_fails("a file as path", f, NULL, NULL, "is a file");
}

static void test_flat(const char *root) {
    char dir[4096], p[4200], lab[4200];
    snprintf(dir, sizeof dir, "%s/flat", root);
    corpus_mkdir("%s/%s", root, "flat");
    for (int i = 0; i < 6; i++) {
        snprintf(p, sizeof p, "%s/ILSVRC_%02d.JPEG", dir, i);
        corpus_write_jpeg(p, 16, 16, 3, i % 3, i, 0);
    }
    snprintf(p, sizeof p, "%s/with space.JPEG", dir);
    corpus_write_jpeg(p, 16, 16, 3, 1, 1, 0);
    snprintf(lab, sizeof lab, "%s/labels.txt", root);
    const char *good = "# flat validation set\nILSVRC_00.JPEG 0\nILSVRC_01.JPEG 1\n\n"
                       "ILSVRC_02.JPEG 2\nILSVRC_03.JPEG 4\nwith space.JPEG 1\n";
    corpus_write(lab, good, strlen(good));
    VilDataset *ds = open_ok(dir, NULL, lab);
    if (ds) {
        T_CHECK(vil_dataset_kind(ds) == VIL_DATA_FLAT, "flat kind");
        T_CHECK(vil_dataset_size(ds) == 5, "flat size %d", vil_dataset_size(ds));
        T_CHECK(vil_dataset_num_classes(ds) == 5, "classes = max label + 1: %d",
                vil_dataset_num_classes(ds));
        T_CHECK(vil_dataset_label(ds, 3) == 4 && vil_dataset_label(ds, 4) == 1, "labels in order");
        VilImage im;
        T_CHECK(vil_dataset_read_image(ds, 4, 3, &im, NULL) == 0, "file name with a space");
        vil_image_free(&im);
        /* a names file can raise the class count (a val split lacking the last classes) */
        snprintf(p, sizeof p, "%s/names.txt", root);
        const char *nm = "zero\none\ntwo\nthree\nfour\nfive\nsix\n";
        corpus_write(p, nm, strlen(nm));
        T_CHECK(vil_dataset_load_names(ds, p) == 0, "plain names");
        T_CHECK(vil_dataset_num_classes(ds) == 7 && strcmp(vil_dataset_class_name(ds, 6), "six") == 0,
                "names raise classes to 7: %d", vil_dataset_num_classes(ds));
        vil_dataset_free(ds);
    }
    /* --data ROOT --split flat --labels: the split folder is used when it exists */
    ds = open_ok(root, "flat", lab);
    if (ds) {
        T_CHECK(vil_dataset_size(ds) == 5, "flat through split");
        vil_dataset_free(ds);
    }
    const char *missing = "ILSVRC_00.JPEG 0\nnot_there.JPEG 1\nalso_not.JPEG 1\n";
    corpus_write(lab, missing, strlen(missing));
    open_fails("labels: missing files", dir, NULL, lab, "names 2 files that are missing from");
    const char *badlab = "ILSVRC_00.JPEG 0\nILSVRC_01.JPEG cat\n";
    corpus_write(lab, badlab, strlen(badlab));
    open_fails("labels: bad label", dir, NULL, lab, ":2: bad label 'cat'");
    const char *neg = "ILSVRC_00.JPEG -3\n";
    corpus_write(lab, neg, strlen(neg));
    open_fails("labels: negative", dir, NULL, lab, "bad label '-3'");
    const char *nolab = "ILSVRC_00.JPEG\n";
    corpus_write(lab, nolab, strlen(nolab));
    open_fails("labels: no label", dir, NULL, lab, "expected \"filename label\"");
    corpus_write(lab, "", 0);
    open_fails("labels: empty", dir, NULL, lab, "lists no images");
    snprintf(p, sizeof p, "%s/none.txt", root);
    open_fails("labels: no file", dir, NULL, p, "labels file: cannot open");
}

static void test_idx(const char *root) {
    char dir[4096], p[4200];
    for (int gz = 0; gz < 2; gz++) {
        snprintf(dir, sizeof dir, "%s/fashion_%s", root, gz ? "gz" : "plain");
        corpus_mkdir("%s/%s", root, gz ? "fashion_gz" : "fashion_plain");
        corpus_write_idx_set(dir, "train", 50, 6, 5, 10, gz);
        corpus_write_idx_set(dir, "t10k", 20, 6, 5, 10, gz);
        VilDataset *ds = open_ok(dir, "train", NULL);
        if (!ds) continue;
        T_CHECK(vil_dataset_kind(ds) == VIL_DATA_IDX, "idx kind (gz %d)", gz);
        T_CHECK(vil_dataset_size(ds) == 50 && vil_dataset_num_classes(ds) == 10,
                "idx train n %d classes %d", vil_dataset_size(ds), vil_dataset_num_classes(ds));
        T_CHECK(vil_dataset_channels(ds) == 1, "idx is gray");
        T_CHECK(strcmp(vil_dataset_class_name(ds, 0), "T-shirt/top") == 0 &&
                    strcmp(vil_dataset_class_name(ds, 9), "Ankle boot") == 0,
                "fashion names from the path");
        VilImage v;
        T_CHECK(vil_dataset_raw_image(ds, 13, &v) == 0 && v.w == 5 && v.h == 6 && v.c == 1,
                "raw view");
        int px_ok = 1;
        for (int k = 0; k < 30; k++) px_ok &= v.px[k] == (unsigned char)((13 * 7 + k * 3) % 256);
        T_CHECK(px_ok, "idx pixels (gz %d)", gz);
        T_CHECK(vil_dataset_label(ds, 13) == 3, "idx label");
        VilImage rgb;
        T_CHECK(vil_dataset_read_image(ds, 13, 3, &rgb, NULL) == 0 &&
                    rgb.c == 3 && rgb.px[3 * 7 + 2] == v.px[7],
                "idx as rgb");
        vil_image_free(&rgb);
        VilBuffer b = {0};
        vil_error_capture(&g_cap);
        T_CHECK(vil_dataset_read_bytes(ds, 0, &b) != 0, "no bytes for idx");
        vil_error_release(&g_cap);
        vil_buffer_free(&b);
        vil_dataset_free(ds);
        ds = open_ok(dir, "val", NULL);
        if (ds) {
            T_CHECK(vil_dataset_size(ds) == 20, "idx val = t10k");
            vil_dataset_free(ds);
        }
        /* the images file itself */
        snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte%s", dir, gz ? ".gz" : "");
        ds = open_ok(p, NULL, NULL);
        if (ds) {
            T_CHECK(vil_dataset_size(ds) == 20, "idx file path");
            vil_dataset_free(ds);
        }
    }
    /* digits (not fashion): names are the digits */
    snprintf(dir, sizeof dir, "%s/mnist", root);
    corpus_mkdir("%s/%s", root, "mnist");
    corpus_write_idx_set(dir, "train", 30, 4, 4, 10, 1);
    VilDataset *ds = open_ok(dir, NULL, NULL);
    if (ds) {
        T_CHECK(strcmp(vil_dataset_class_name(ds, 7), "7") == 0, "digit names");
        vil_dataset_free(ds);
    }
    /* broken IDX files */
    snprintf(dir, sizeof dir, "%s/idxbad", root);
    corpus_mkdir("%s/%s", root, "idxbad");
    corpus_write_idx_set(dir, "train", 10, 4, 4, 10, 0);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", dir);
    unsigned char *img = malloc(16 + 160);
    FILE *fp = fopen(p, "rb");
    size_t got = fread(img, 1, 176, fp);
    fclose(fp);
    T_CHECK(got == 176, "read back idx");
    corpus_write(p, img, 100); /* cut short */
    open_fails("idx truncated", dir, "train", NULL, "is truncated");
    corpus_write(p, img, 176);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte", dir);
    unsigned dims[1] = {9};
    unsigned char lab[9] = {0};
    corpus_write_idx(p, 1, dims, lab, 9, 0);
    open_fails("idx count mismatch", dir, "train", NULL, "holds 10 images but");
    unlink(p);
    open_fails("idx no labels", dir, "train", NULL, "no labels file");
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", dir);
    img[2] = 0x0D; /* float elements */
    corpus_write(p, img, 176);
    unsigned char l10[10] = {0};
    unsigned d10[1] = {10};
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte", dir);
    corpus_write_idx(p, 1, d10, l10, 10, 0);
    open_fails("idx float type", dir, "train", NULL, "not supported");
    free(img);
    /* a corrupt gzip stream */
    snprintf(dir, sizeof dir, "%s/idxgzbad", root);
    corpus_mkdir("%s/%s", root, "idxgzbad");
    corpus_write_idx_set(dir, "train", 200, 8, 8, 10, 1);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", dir);
    fp = fopen(p, "rb");
    unsigned char gzb[8192];
    size_t gn = fread(gzb, 1, sizeof gzb, fp);
    fclose(fp);
    corpus_write(p, gzb, gn / 2);
    vil_error_capture(&g_cap);
    ds = vil_dataset_open(dir, "train", NULL);
    vil_error_release(&g_cap);
    T_CHECK(ds == NULL && (strstr(g_cap.msg, "truncated") || strstr(g_cap.msg, "corrupt")),
            "cut gzip: %s", g_cap.msg);
    printf("ok   %-20s -> %s\n", "idx gzip cut", g_cap.msg);
    vil_dataset_free(ds);
}

/* The real thing, when Debian's dataset-fashion-mnist is installed. */
static void test_fashion_mnist(void) {
    const char *dir = "/usr/share/datasets/fashion-mnist";
    struct stat st;
    if (stat(dir, &st) != 0) {
        printf("skip Fashion-MNIST (%s not installed: apt-get install dataset-fashion-mnist)\n", dir);
        return;
    }
    VilDataset *ds = open_ok(dir, "train", NULL);
    if (ds) {
        T_CHECK(vil_dataset_size(ds) == 60000 && vil_dataset_num_classes(ds) == 10,
                "fashion-mnist train %d", vil_dataset_size(ds));
        T_CHECK(strcmp(vil_dataset_class_name(ds, 9), "Ankle boot") == 0, "fashion names");
        int counts[10] = {0};
        for (int i = 0; i < vil_dataset_size(ds); i++) counts[vil_dataset_label(ds, i)]++;
        T_CHECK(counts[0] == 6000 && counts[9] == 6000, "balanced classes");
        VilImage v;
        T_CHECK(vil_dataset_raw_image(ds, 0, &v) == 0 && v.w == 28 && v.h == 28, "28x28");
        vil_dataset_free(ds);
    }
    ds = open_ok(dir, "val", NULL);
    if (ds) {
        T_CHECK(vil_dataset_size(ds) == 10000, "fashion-mnist test %d", vil_dataset_size(ds));
        vil_dataset_free(ds);
    }
}

/* holdout: the two parts are disjoint, cover the dataset, keep every sample's pixels, label and
 * path, do not depend on the call (a fixed permutation), and differ between seeds */
static void holdout_check(const char *path, const char *split, int n, const char *what) {
    VilDataset *all = open_ok(path, split, NULL), *tr = open_ok(path, split, NULL), *va = NULL;
    VilDataset *tr2 = open_ok(path, split, NULL), *va2 = NULL, *tr3 = open_ok(path, split, NULL), *va3 = NULL;
    if (!all || !tr || !tr2 || !tr3) return;
    int N = vil_dataset_size(all);
    T_CHECK(vil_dataset_holdout(&tr, &va, n, 7) == 0 && vil_dataset_holdout(&tr2, &va2, n, 7) == 0 &&
                vil_dataset_holdout(&tr3, &va3, n, 8) == 0, "%s: holdout", what);
    if (!va || !va2 || !va3) return;
    T_CHECK(vil_dataset_size(tr) == N - n && vil_dataset_size(va) == n, "%s: sizes %d + %d of %d", what,
            vil_dataset_size(tr), vil_dataset_size(va), N);
    T_CHECK(vil_dataset_num_classes(va) == vil_dataset_num_classes(all), "%s: classes", what);
    /* every sample of `all` lands in exactly one part, found by its path */
    char pa[4096], pb[4096];
    int found_all = 1, same = 1, differs = 0, data_ok = 1;
    for (int i = 0; i < N; i++) {
        vil_dataset_path(all, i, pa, sizeof pa);
        int hits = 0;
        for (int part = 0; part < 2; part++) {
            VilDataset *d = part ? va : tr;
            for (int k = 0; k < vil_dataset_size(d); k++) {
                vil_dataset_path(d, k, pb, sizeof pb);
                if (strcmp(pa, pb) != 0) continue;
                hits++;
                data_ok &= vil_dataset_label(d, k) == vil_dataset_label(all, i);
                VilImage x, y; /* the corpus's broken files fail in both */
                vil_error_capture(&g_cap);
                int rx = vil_dataset_read_image(all, i, 1, &x, NULL), ry = vil_dataset_read_image(d, k, 1, &y, NULL);
                vil_error_release(&g_cap);
                data_ok &= rx == ry;
                if (rx == 0 && ry == 0)
                    data_ok &= x.w == y.w && x.h == y.h && memcmp(x.px, y.px, (size_t)x.w * x.h) == 0;
                vil_image_free(&x);
                vil_image_free(&y);
            }
        }
        found_all &= hits == 1;
    }
    for (int k = 0; k < n; k++) {
        vil_dataset_path(va, k, pa, sizeof pa);
        vil_dataset_path(va2, k, pb, sizeof pb);
        same &= strcmp(pa, pb) == 0;
        vil_dataset_path(va3, k, pb, sizeof pb);
        differs |= strcmp(pa, pb) != 0;
    }
    T_CHECK(found_all, "%s: each sample in exactly one part", what);
    T_CHECK(data_ok, "%s: labels and pixels kept", what);
    T_CHECK(same, "%s: the same seed holds out the same samples", what);
    T_CHECK(differs, "%s: another seed holds out others", what);
    /* the members of a class are the part's own indices */
    const int *mem;
    int cnt, tot = 0, mem_ok = 1;
    for (int c = 0; c < vil_dataset_num_classes(va); c++) {
        vil_dataset_class_members(va, c, &mem, &cnt);
        for (int k = 0; k < cnt; k++) mem_ok &= mem[k] < n && vil_dataset_label(va, mem[k]) == c;
        tot += cnt;
    }
    T_CHECK(mem_ok && tot == n, "%s: class members of the held-out part", what);
    vil_error_capture(&g_cap);
    VilDataset *va4 = NULL;
    int rc = vil_dataset_holdout(&all, &va4, N, 7);
    vil_error_release(&g_cap);
    T_CHECK(rc != 0 && all != NULL && va4 == NULL && strstr(g_cap.msg, "hold out between 1 and"),
            "%s: holding out all is refused: %s", what, g_cap.msg);
    vil_dataset_free(all);
    vil_dataset_free(tr), vil_dataset_free(va), vil_dataset_free(tr2), vil_dataset_free(va2);
    vil_dataset_free(tr3), vil_dataset_free(va3);
    printf("ok   holdout %s: %d of %d\n", what, n, N);
}

/* ---- hostile files: FIFOs, IDX headers claiming gigabytes ---- */
static void test_hostile(const char *root) {
    char dir[4096], p[4200];
    /* a FIFO among the images is found bad at once (the open would wait for a writer) */
    snprintf(dir, sizeof dir, "%s/fifo", root);
    corpus_mkdir("%s%s", dir, "");
    corpus_mkdir("%s/%s", dir, "c0");
    snprintf(p, sizeof p, "%s/c0/a.png", dir);
    corpus_write_png(p, 8, 8, 0, 0);
    snprintf(p, sizeof p, "%s/c0/b.png", dir);
    T_CHECK(mkfifo(p, 0644) == 0, "mkfifo");
    alarm(20); /* a hang fails the test */
    VilDataset *ds = open_ok(dir, NULL, NULL);
    if (ds) {
        T_CHECK(vil_dataset_size(ds) == 2, "the FIFO is listed as a sample");
        VilBuffer b = {0};
        vil_error_capture(&g_cap);
        int rc = vil_dataset_read_bytes(ds, 1, &b);
        vil_error_release(&g_cap);
        T_CHECK(rc != 0 && strstr(g_cap.msg, "a FIFO (named pipe), not a regular file") &&
                    !strstr(g_cap.msg, "b.png"),
                "a FIFO sample is refused with the reason alone: %s", g_cap.msg);
        vil_buffer_free(&b);
        vil_dataset_free(ds);
    }
    /* a FIFO as the labels file */
    snprintf(p, sizeof p, "%s/labels", dir);
    T_CHECK(mkfifo(p, 0644) == 0, "mkfifo labels");
    snprintf(dir, sizeof dir, "%s/fifo/c0", root);
    open_fails("labels: a FIFO", dir, NULL, p, "is a FIFO (named pipe), not a regular file");
    alarm(0);

    /* an IDX header claiming 65536 x 256 x 256 (4 GiB): refused on the header */
    snprintf(dir, sizeof dir, "%s/idxbig", root);
    corpus_mkdir("%s%s", dir, "");
    unsigned dims3[3] = {65536, 256, 256}, dims1[1] = {65536};
    unsigned char zeros[4096] = {0};
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", dir);
    corpus_write_idx(p, 3, dims3, zeros, sizeof zeros, 1);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", dir);
    corpus_write_idx(p, 1, dims1, zeros, sizeof zeros, 1);
    open_fails("idx claims 4 GiB", dir, "train", NULL, "claims 65536 x 256 x 256 bytes of data, over the limit");
    /* 30000 x 256 x 256 (1.97 GB, under the bound) with 4 KB behind it: the buffer grows with
     * the data, so it is found truncated within 256 MiB of address space */
    dims3[0] = dims1[0] = 30000;
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", dir);
    corpus_write_idx(p, 3, dims3, zeros, sizeof zeros, 1);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", dir);
    corpus_write_idx(p, 1, dims1, zeros, sizeof zeros, 1);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
#if !T_ASAN
        struct rlimit rl = {256L << 20, 256L << 20};
        setrlimit(RLIMIT_AS, &rl);
#endif
        vil_error_capture(&g_cap);
        VilDataset *d = vil_dataset_open(dir, "train", NULL);
        vil_error_release(&g_cap);
        _exit(d == NULL && strstr(g_cap.msg, "is truncated: its header promises 1966080000 bytes of data, it holds 4096") ? 0 : 3);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "an IDX header claiming 1.97 GB with 4 KB of data: truncated, within 256 MiB (status %d)", st);
    printf("ok   idx claims 1.97 GB -> truncated%s\n",
           T_ASAN ? " (AddressSanitizer build: the 256 MiB limit skipped)" : ", within 256 MiB");
}

int main(void) {
    char *root = corpus_mkdtemp("dataset");
    test_hostile(root);
    test_folder(root);
    test_flat(root);
    test_idx(root);
    char p[4200];
    snprintf(p, sizeof p, "%s/fashion_gz", root);
    holdout_check(p, "train", 12, "idx");
    holdout_check(root, "train", 5, "folder");
    test_fashion_mnist();
    corpus_rmtree(root);
    free(root);
    return t_finish();
}
