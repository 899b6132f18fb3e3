/* test_shards.c: WebDataset tar shards (data/shards.c) on a corpus written in a temporary folder.
 * tools/folder_to_shards turns a class-folder set into shards; the shards then read back, in
 * every form --data takes (a folder, a brace range, a glob, one file, the val split derived from
 * a train pattern), as the same (bytes, label) samples in the same order as the folder, and a
 * short training run on them equals the run on the folder bitwise. Tars written by GNU tar
 * (gnu and pax formats: long names, extended headers) and by the test's own ustar writer check
 * the offsets against the files; hostile tars (truncated, huge or lying sizes, path tricks,
 * links, compressed, not a tar, a FIFO, labels missing or out of range, a member that is not an
 * image) end in an error that names the shard, never a crash. */
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/dataset.h"
#include "data/loader.h"
#include "tests/data_corpus.h"
#include "tests/limited.h"
#include "tests/model_testing.h"
#include "tests/testing.h"
#include "vil/common.h"

static char *dir;
static VilErrCapture g_cap;

static const char *path(const char *fmt, ...) {
    static char bufs[16][4096]; /* a caller may hold up to 16 at once */
    static int k;
    char *b = bufs[k++ % 16];
    int n = snprintf(b, sizeof bufs[0], "%s/", dir);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b + n, sizeof bufs[0] - (size_t)n, fmt, ap);
    va_end(ap);
    return b;
}

static VilDataset *open_quiet(const char *p, const char *split) {
    vil_error_capture(&g_cap);
    VilDataset *ds = vil_dataset_open(p, split, NULL);
    vil_error_release(&g_cap);
    return ds;
}

/* Opening must fail with a message that holds every one of want[] (NULL-terminated). */
static void open_fails(const char *what, const char *p, const char *split, const char *const *want) {
    VilDataset *ds = open_quiet(p, split);
    T_CHECK(ds == NULL, "%s: opened but should fail", what);
    int all = 1;
    for (int i = 0; want[i]; i++) all &= strstr(g_cap.msg, want[i]) != NULL;
    T_CHECK(all, "%s: message '%s' lacks '%s'%s", what, g_cap.msg, want[0], want[1] ? " (or a later word)" : "");
    printf("ok   %-24s -> %s\n", what, g_cap.msg);
    vil_dataset_free(ds);
}

#ifdef VIL_ARCHIVE
static char g_tool[4096];

/* ---- the class-folder corpus and its shards ---- */

static const char *const k_classes[3] = {"cat", "dog", "emu"};
static const int k_train_count[3] = {5, 4, 6}; /* 15 samples: 4 shards of 4 */

static void write_folder(void) {
    corpus_mkdir("%s/%s", dir, "img");
    corpus_mkdir("%s/%s", dir, "img/train");
    corpus_mkdir("%s/%s", dir, "img/val");
    for (int c = 0; c < 3; c++) {
        corpus_mkdir("%s/%s", path("img/train"), k_classes[c]);
        if (c > 0) corpus_mkdir("%s/%s", path("img/val"), k_classes[c]); /* val lacks "cat" */
        for (int i = 0; i < k_train_count[c]; i++) {
            const char *p = path("img/train/%s/%s_%d.JPEG", k_classes[c], k_classes[c], i);
            if (c == 1 && i == 2) corpus_write_png(p, 21, 17, c, i);
            else corpus_write_jpeg(p, 24 + 4 * i, 20 + 3 * c, i == 3 ? 1 : 3, c, i, i == 1);
        }
        for (int i = 0; c > 0 && i < 2; i++)
            corpus_write_jpeg(path("img/val/%s/v%d.jpg", k_classes[c], i), 30, 22, 3, c, 10 + i, 0);
    }
}

/* a and b: the same samples in the same order (bytes and labels); the label of b's sample i is
 * map[a's label] when map is given */
static void same_samples(const char *what, const VilDataset *a, const VilDataset *b, const int *map) {
    T_CHECK(vil_dataset_size(a) == vil_dataset_size(b), "%s: %d samples, expected %d", what,
            vil_dataset_size(b), vil_dataset_size(a));
    if (vil_dataset_size(a) != vil_dataset_size(b)) return;
    VilBuffer ba = {0}, bb = {0};
    int bytes_ok = 1, labels_ok = 1;
    for (int i = 0; i < vil_dataset_size(a); i++) {
        int ra = vil_dataset_read_bytes(a, i, &ba), rb = vil_dataset_read_bytes(b, i, &bb);
        bytes_ok &= ra == 0 && rb == 0 && ba.size == bb.size && !memcmp(ba.data, bb.data, ba.size);
        int la = vil_dataset_label(a, i);
        labels_ok &= vil_dataset_label(b, i) == (map ? map[la] : la);
    }
    T_CHECK(bytes_ok, "%s: every sample's bytes are the folder file's", what);
    T_CHECK(labels_ok, "%s: every sample's label is the folder's", what);
    vil_buffer_free(&ba);
    vil_buffer_free(&bb);
}

static void test_convert(void) {
    char out[16384];
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s %s --shard-size 4 2>&1", g_tool, path("img"), path("shards"));
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0, "folder_to_shards exits 0 (rc %d): %s", rc, out);
    T_CHECK(strstr(out, "train 15 samples in 4 shards") && strstr(out, "val 4 samples in 1 shards"),
            "folder_to_shards reports the counts: %s", out);
    struct stat st;
    T_CHECK(stat(path("shards/train/train-0003.tar"), &st) == 0 && stat(path("shards/val/val-0000.tar"), &st) == 0,
            "shards named train-0000.tar .. train-0003.tar and val-0000.tar");
    size_t n = 0;
    unsigned char *cl = vil_read_file(path("shards/classes.txt"), &n);
    T_CHECK(cl && n == 12 && !memcmp(cl, "cat\ndog\nemu\n", 12), "classes.txt lists the class folders in order");
    free(cl);
    /* a second run into the same folder is refused */
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "already exists"), "a used OUTDIR is refused (rc %d): %s", rc, out);
    snprintf(cmd, sizeof cmd, "%s %s %s --shard-size 0 2>&1", g_tool, path("img"), path("x"));
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 2 && strstr(out, "--shard-size"), "--shard-size 0 exits 2 (rc %d)", rc);

    /* the train split in every form --data takes */
    VilDataset *folder = vil_dataset_open(path("img"), "train", NULL);
    T_CHECK(folder != NULL, "the folder opens");
    if (!folder) return;
    struct {
        const char *what, *p, *split;
    } forms[] = {
        {"folder ROOT (train)", path("shards"), "train"},
        {"brace range", path("shards/train/train-{0000..0003}.tar"), "train"},
        {"brace range, no split", path("shards/train/train-{0000..0003}.tar"), NULL},
        {"glob", path("shards/train/*.tar"), "train"},
        {"the shard folder", path("shards/train"), NULL},
    };
    for (size_t f = 0; f < sizeof forms / sizeof *forms; f++) {
        VilDataset *ds = open_quiet(forms[f].p, forms[f].split);
        T_CHECK(ds != NULL, "%s opens: %s", forms[f].what, g_cap.msg);
        if (!ds) continue;
        T_CHECK(vil_dataset_kind(ds) == VIL_DATA_SHARDS, "%s: the shards layout", forms[f].what);
        T_CHECK(vil_dataset_num_classes(ds) == 3, "%s: 3 classes (classes.txt)", forms[f].what);
        int ids = 1;
        for (int c = 0; c < 3; c++) ids &= !strcmp(vil_dataset_class_id(ds, c), k_classes[c]);
        T_CHECK(ids, "%s: the class ids are the folder names", forms[f].what);
        same_samples(forms[f].what, folder, ds, NULL);
        char p[4096];
        vil_dataset_path(ds, 9, p, sizeof p);
        T_CHECK(strstr(p, "train-0002.tar:00000009.") != NULL, "%s: sample 9's path names its shard "
                "and member: %s", forms[f].what, p);
        vil_dataset_free(ds);
    }
    /* a names file with ids names classes.txt's classes by id, not by line */
    const char *names = "0\tdog\tDog\n1\tcat\tCat\n2\temu\tEmu\n";
    corpus_write(path("names.tsv"), names, strlen(names));
    VilDataset *named = open_quiet(path("shards"), "train");
    vil_error_capture(&g_cap);
    int nrc = named ? vil_dataset_load_names(named, path("names.tsv")) : -1;
    vil_error_release(&g_cap);
    T_CHECK(nrc == 0 && !strcmp(vil_dataset_class_name(named, 0), "Cat") &&
            !strcmp(vil_dataset_class_name(named, 1), "Dog"), "names by id: class 0 (cat) is named Cat (%s)", g_cap.msg);
    vil_dataset_free(named);
    /* one shard file: its 4 samples */
    VilDataset *one = open_quiet(path("shards/train/train-0001.tar"), NULL);
    T_CHECK(one && vil_dataset_size(one) == 4 && vil_dataset_label(one, 0) == vil_dataset_label(folder, 4),
            "one shard file: its 4 samples (%s)", g_cap.msg);
    vil_dataset_free(one);

    /* the val split: class folders numbered as the train split's (val lacks "cat") */
    VilDataset *fval = vil_dataset_open(path("img"), "val", NULL);
    int map[2] = {1, 2};
    const char *vforms[2] = {path("shards"), path("shards/train/train-{0000..0003}.tar")};
    for (int f = 0; f < 2; f++) {
        VilDataset *ds = open_quiet(vforms[f], "val");
        T_CHECK(ds != NULL, "val split of %s opens: %s", f ? "a train pattern" : "ROOT", g_cap.msg);
        if (ds && fval) same_samples(f ? "val from the train pattern" : "val of ROOT", fval, ds, map);
        vil_dataset_free(ds);
    }
    /* a val pattern is taken as given; "train" in a folder's name is not the split's word */
    VilDataset *vp = open_quiet(path("shards/val/val-{0000..0000}.tar"), "val");
    T_CHECK(vp && vil_dataset_size(vp) == 4, "a val pattern with split val: its 4 samples (%s)", g_cap.msg);
    vil_dataset_free(vp);
    corpus_mkdir("%s/%s", dir, "xtraining");
    int linked = symlink(path("shards/val/val-0000.tar"), path("xtraining/val-0000.tar")) == 0;
    for (int k = 0; k < 4; k++) {
        char name[32];
        snprintf(name, sizeof name, "train-%04d.tar", k);
        linked &= symlink(path("shards/train/%s", name), path("xtraining/%s", name)) == 0;
    }
    vp = open_quiet(path("xtraining/train-{0000..0003}.tar"), "val");
    T_CHECK(linked && vp && vil_dataset_size(vp) == 4 && fval &&
            !strcmp(strrchr(vil_dataset_source(vp), '/'), "/train-{0000..0003}.tar"),
            "the val split of xtraining/train-{0000..0003}.tar is xtraining/val-0000.tar (%s)", g_cap.msg);
    if (vp && fval) same_samples("val beside the train shards", fval, vp, map);
    vil_dataset_free(vp);
    vil_dataset_free(fval);

    /* a held-out part of shards reads the same samples as the whole */
    VilDataset *tr = open_quiet(path("shards"), "train"), *va = NULL;
    if (tr && vil_dataset_holdout(&tr, &va, 5, 3) == 0) {
        VilBuffer a = {0}, b = {0};
        int ok = vil_dataset_size(va) == 5;
        char p[4096];
        for (int i = 0; ok && i < 5; i++) {
            vil_dataset_path(va, i, p, sizeof p);
            const char *m = strstr(p, ".tar:");
            int idx = m ? atoi(m + 5) : -1;
            ok = idx >= 0 && vil_dataset_read_bytes(va, i, &a) == 0 && vil_dataset_read_bytes(folder, idx, &b) == 0 &&
                 a.size == b.size && !memcmp(a.data, b.data, a.size) && vil_dataset_label(va, i) == vil_dataset_label(folder, idx);
        }
        T_CHECK(ok, "a holdout of shards: each held-out sample is its folder sample");
        vil_buffer_free(&a);
        vil_buffer_free(&b);
    } else {
        T_CHECK(0, "holdout of shards");
    }
    vil_dataset_free(tr);
    vil_dataset_free(va);
    vil_dataset_free(folder);
}

/* ---- tars written by GNU tar: long names, extended headers, "./" prefixes ---- */
static void test_gnu_tar(void) {
    const char *fmts[2] = {"gnu", "pax"};
    const char *longdir = "a_folder_name_long_enough_that_the_path_needs_more_than_the_hundred_bytes_of_a_ustar_name_field";
    for (int f = 0; f < 2; f++) {
        corpus_mkdir("%s/%s", dir, fmts[f]);
        const char *src = path("%s/src", fmts[f]);
        corpus_mkdir("%s/%s", path("%s", fmts[f]), "src");
        corpus_mkdir("%s/%s", src, longdir);
        corpus_mkdir("%s/%s", path("%s", fmts[f]), "out");
        /* samples: short keys, a long key, .json and upper-case fields */
        corpus_write_jpeg(path("%s/src/k1.jpg", fmts[f]), 33, 19, 3, 0, 1, 0);
        corpus_write(path("%s/src/k1.cls", fmts[f]), "2\n", 2);
        corpus_write_png(path("%s/src/%s/k2.PNG", fmts[f], longdir), 13, 9, 1, 2);
        corpus_write(path("%s/src/%s/k2.json", fmts[f], longdir), "{\"label\": 1, \"x\": [1]}", 22);
        corpus_write_jpeg(path("%s/src/%s/k3.jpeg", fmts[f], longdir), 40, 40, 1, 1, 3, 1);
        corpus_write(path("%s/src/%s/k3.cls", fmts[f], longdir), " 0 ", 3);
        corpus_write(path("%s/src/%s/k3.txt", fmts[f], longdir), "a caption", 9);
        char cmd[8192], out[4096];
        snprintf(cmd, sizeof cmd, "tar --format=%s --sort=name -cf %s -C %s . 2>&1", fmts[f],
                 path("%s/out/s.tar", fmts[f]), src);
        int rc = t_run(cmd, out, sizeof out);
        T_CHECK(rc == 0, "GNU tar --format=%s: %s", fmts[f], out);
        VilDataset *ds = open_quiet(path("%s/out", fmts[f]), NULL);
        T_CHECK(ds != NULL, "%s tar opens: %s", fmts[f], g_cap.msg);
        if (!ds) continue;
        T_CHECK(vil_dataset_size(ds) == 3 && vil_dataset_num_classes(ds) == 3, "%s tar: 3 samples, 3 classes "
                "(largest label + 1), got %d, %d", fmts[f], vil_dataset_size(ds), vil_dataset_num_classes(ds));
        /* the members in name order: the long folder's k2, k3, then k1 */
        const char *files[3] = {"%s/src/%s/k2.PNG", "%s/src/%s/k3.jpeg", "%s/src/k1.jpg"};
        const int labels[3] = {1, 0, 2};
        int ok = vil_dataset_size(ds) == 3;
        VilBuffer b = {0};
        for (int i = 0; ok && i < 3; i++) {
            size_t n;
            unsigned char *want = vil_read_file(i < 2 ? path(files[i], fmts[f], longdir) : path(files[i], fmts[f]), &n);
            ok = want && vil_dataset_read_bytes(ds, i, &b) == 0 && b.size == n && !memcmp(b.data, want, n) &&
                 vil_dataset_label(ds, i) == labels[i];
            free(want);
        }
        T_CHECK(ok, "%s tar: each sample's bytes are its file's, labels from .cls and .json", fmts[f]);
        VilImage im;
        T_CHECK(vil_dataset_read_image(ds, 0, 3, &im, &b) == 0 && im.w == 13 && im.h == 9, "%s tar: the PNG decodes", fmts[f]);
        vil_image_free(&im);
        vil_buffer_free(&b);
        vil_dataset_free(ds);
    }
}

/* ---- hostile tars: each in its own folder, opened as a folder of shards ---- */
static const char *hostile_dir(const char *name) {
    corpus_mkdir("%s/%s", dir, "h");
    corpus_mkdir("%s/%s", path("h"), name);
    return path("h/%s", name);
}

static void write_tar(const char *name, const CorpusTar *t, size_t keep) {
    corpus_write(path("h/%s/x.tar", name), t->b, keep < t->n ? keep : t->n);
}

static unsigned char *small_jpeg(size_t *n) {
    unsigned char *px = corpus_picture(16, 12, 3, 1, 2);
    unsigned char *j = corpus_jpeg(px, 16, 12, 3, 90, 0, n);
    free(px);
    return j;
}

/* one tar of the given members: (name, text data or NULL for the JPEG, type, claimed size) */
typedef struct {
    const char *name, *data;
    char type;       /* 0: a regular file */
    long long claim; /* 0: the data's length */
} Member;

#define F(name, data) {name, data, 0, 0} /* a regular file of that data (NULL: a JPEG) */

static CorpusTar make_tar(const Member *m, int n, int end) {
    CorpusTar t = {0};
    size_t jn;
    unsigned char *jpg = small_jpeg(&jn);
    for (int i = 0; i < n; i++) {
        const void *d = m[i].data ? (const void *)m[i].data : jpg;
        size_t len = m[i].data ? strlen(m[i].data) : jn;
        corpus_tar_member(&t, m[i].name, d, len, m[i].type ? m[i].type : '0', m[i].claim ? m[i].claim : -1);
    }
    if (end) corpus_tar_end(&t);
    free(jpg);
    return t;
}

static void hostile_case(const char *name, const Member *m, int n, const char *classes, const char *w1,
                         const char *w2) {
    const char *d = hostile_dir(name);
    CorpusTar t = make_tar(m, n, 1);
    write_tar(name, &t, t.n);
    free(t.b);
    if (classes) corpus_write(path("h/%s/classes.txt", name), classes, strlen(classes));
    const char *want[4] = {"x.tar", w1, w2, NULL};
    open_fails(name, d, NULL, want);
}

static void test_hostile(void) {
    /* the good tar first: the cases below differ from it in one thing */
    const Member good[] = {F("a.jpg", NULL), F("a.cls", "0"), F("b.jpg", NULL), F("b.cls", "1")};
    const char *d = hostile_dir("good");
    CorpusTar t = make_tar(good, 4, 1);
    write_tar("good", &t, t.n);
    VilDataset *ds = open_quiet(d, NULL);
    T_CHECK(ds && vil_dataset_size(ds) == 2, "the hand-written ustar tar opens with 2 samples: %s", g_cap.msg);
    VilImage im;
    VilBuffer b = {0};
    T_CHECK(ds && vil_dataset_read_image(ds, 1, 3, &im, &b) == 0 && im.w == 16 && im.h == 12, "its JPEG decodes");
    if (ds) vil_image_free(&im);
    vil_dataset_free(ds);

    /* truncated: inside the first image's data, inside a header, just before the end blocks */
    size_t cuts[3] = {512 + 100, 512 + 512 * ((t.n - 1024) / 512 / 2) + 200, t.n - 1024};
    const char *cut_names[3] = {"trunc_data", "trunc_header", "no_end_blocks"};
    for (int k = 0; k < 3; k++) {
        const char *dd = hostile_dir(cut_names[k]);
        write_tar(cut_names[k], &t, cuts[k]);
        VilDataset *x = open_quiet(dd, NULL);
        if (k < 2) {
            const char *want[] = {"x.tar", "truncated", NULL};
            T_CHECK(x == NULL, "%s: opened but should fail", cut_names[k]);
            int ok = strstr(g_cap.msg, want[0]) && strstr(g_cap.msg, want[1]);
            T_CHECK(ok, "%s: message '%s' names the shard and says truncated", cut_names[k], g_cap.msg);
            printf("ok   %-24s -> %s\n", cut_names[k], g_cap.msg);
        } else {
            /* libarchive's verdict on a tar without its two zero blocks: refused, or every
             * sample inside the file; never a read past its end */
            int ok = x == NULL ? strstr(g_cap.msg, "x.tar") != NULL : vil_dataset_size(x) == 2;
            VilBuffer bb = {0};
            for (int i = 0; x && ok && i < 2; i++) ok = vil_dataset_read_bytes(x, i, &bb) == 0;
            vil_buffer_free(&bb);
            T_CHECK(ok, "a tar without end blocks: refused by name or read whole (%s)", g_cap.msg);
        }
        vil_dataset_free(x);
    }
    /* compressed: the good tar through gzip */
    {
        const char *dd = hostile_dir("gzip");
        gzFile g = gzopen(path("h/gzip/x.tar"), "wb");
        gzwrite(g, t.b, (unsigned)t.n);
        gzclose(g);
        const char *want[] = {"x.tar", "compressed (gzip)", NULL};
        open_fails("gzip", dd, NULL, want);
    }
    free(t.b);
    {
        const char *dd = hostile_dir("not_tar");
        char junk[3000];
        for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)('a' + i % 26);
        corpus_write(path("h/not_tar/x.tar"), junk, sizeof junk);
        const char *want[] = {"x.tar", "not a tar", NULL};
        open_fails("not a tar", dd, NULL, want);
    }
    {
        const char *dd = hostile_dir("fifo");
        T_CHECK(mkfifo(path("h/fifo/x.tar"), 0644) == 0, "mkfifo");
        const char *want[] = {"x.tar", "FIFO", NULL};
        open_fails("a FIFO as a shard", dd, NULL, want);
    }
    {
        const char *dd = hostile_dir("empty");
        CorpusTar e = {0};
        corpus_tar_end(&e);
        write_tar("empty", &e, e.n);
        free(e.b);
        const char *want[] = {"x.tar", "no samples", NULL};
        open_fails("a tar with no members", dd, NULL, want);
    }
    const Member huge[] = {{"a.jpg", NULL, '0', 300LL << 20}, F("a.cls", "0")};
    hostile_case("huge_member", huge, 2, NULL, "over the limit", "a.jpg");
    const Member lying[] = {{"a.jpg", NULL, '0', 100LL << 20}, F("a.cls", "0")};
    hostile_case("lying_size", lying, 2, NULL, "truncated", NULL);
    const Member up[] = {F("../up.jpg", NULL), F("../up.cls", "0")};
    hostile_case("dotdot", up, 2, NULL, "\"..\"", "../up.jpg");
    const Member abs[] = {F("/etc/abs.jpg", NULL), F("/etc/abs.cls", "0")};
    hostile_case("absolute", abs, 2, NULL, "absolute", NULL);
    const Member mid[] = {F("a/../../b.jpg", NULL), F("a/../../b.cls", "0")};
    hostile_case("dotdot_inside", mid, 2, NULL, "\"..\"", NULL);
    const Member ctl[] = {F("a\033[2J.jpg", NULL), F("a\033[2J.cls", "0")};
    hostile_case("escape_codes", ctl, 2, NULL, "control characters", "\\x1b");
    const Member link[] = {{"a.jpg", "/etc/passwd", '2', 0}, F("a.cls", "0")};
    hostile_case("symlink", link, 2, NULL, "link or a special file", NULL);
    const Member nolabel[] = {F("a.jpg", NULL), F("a.cls", "0"), F("b.jpg", NULL), F("b.txt", "no label")};
    hostile_case("no_label", nolabel, 4, NULL, "sample 'b' has no label", NULL);
    const Member noimg[] = {F("a.webp", "RIFF"), F("a.cls", "0")};
    hostile_case("no_image", noimg, 2, NULL, "sample 'a' has no image", NULL);
    const Member two[] = {F("a.jpg", NULL), F("a.png", NULL), F("a.cls", "0")};
    hostile_case("two_images", two, 3, NULL, "two images", "'a.png'");
    const Member apart[] = {F("a.jpg", NULL), F("a.cls", "0"), F("b.jpg", NULL), F("b.cls", "1"), F("a.txt", "x")};
    hostile_case("key_apart", apart, 5, NULL, "key 'a' appears twice", NULL);
    const Member neg[] = {F("a.jpg", NULL), F("a.cls", "-1")};
    hostile_case("label_negative", neg, 2, NULL, "label -1", NULL);
    const Member text[] = {F("a.jpg", NULL), F("a.cls", "cat")};
    hostile_case("label_text", text, 2, NULL, "not a class index", NULL);
    const Member big[] = {F("a.jpg", NULL), F("a.cls", "99999999999999999999")};
    hostile_case("label_huge", big, 2, NULL, "not a class index", NULL);
    const Member over[] = {F("a.jpg", NULL), F("a.cls", "1000000")};
    hostile_case("label_over_max", over, 2, NULL, "label 1000000", NULL);
    const Member three[] = {F("a.jpg", NULL), F("a.cls", "0"), F("b.jpg", NULL), F("b.cls", "2")};
    hostile_case("label_over_classes", three, 4, "x\ny\n", "outside the 2 classes", NULL);
    const Member jstr[] = {F("a.jpg", NULL), F("a.json", "{\"label\": \"one\"}")};
    hostile_case("json_label_text", jstr, 2, NULL, "a.json", "\"label\" is not a number");
    const Member jfrac[] = {F("a.jpg", NULL), F("a.json", "{\"cls\": 1.5}")};
    hostile_case("json_label_fraction", jfrac, 2, NULL, "1.5", NULL);
    const Member jbad[] = {F("a.jpg", NULL), F("a.json", "{\"label\": ")};
    hostile_case("json_broken", jbad, 2, NULL, "not a JSON object", NULL);

    /* a member that is not an image: the index accepts it; reading it fails and its path names
     * shard and member, which the loader's message repeats */
    {
        const char *dd = hostile_dir("not_image");
        const Member m[] = {F("a.jpg", NULL), F("a.cls", "0"), F("bad.jpg", "this is no JPEG at all"), F("bad.cls", "0")};
        CorpusTar x = make_tar(m, 4, 1);
        write_tar("not_image", &x, x.n);
        free(x.b);
        VilDataset *s = open_quiet(dd, NULL);
        T_CHECK(s && vil_dataset_size(s) == 2, "a member that is not an image: the shard opens (%s)", g_cap.msg);
        if (s) {
            char p[4096];
            vil_dataset_path(s, 1, p, sizeof p);
            vil_error_capture(&g_cap);
            int rc = vil_dataset_read_image(s, 1, 3, &im, &b);
            vil_error_release(&g_cap);
            T_CHECK(rc != 0 && g_cap.msg[0], "decoding it fails with a reason: %s", g_cap.msg);
            T_CHECK(strstr(p, "x.tar:bad.jpg") != NULL, "its path names shard and member: %s", p);
            /* the loader: evaluation leaves it out (label -1), training replaces it */
            for (int mode = 0; mode < 2; mode++) {
                VilLoaderConfig c;
                vil_loader_config_default(&c, mode ? VIL_LOADER_EVAL : VIL_LOADER_TRAIN, 16, 3, 2,
                                          vil_dataset_num_classes(s));
                c.threads = 1, c.quiet = 1, c.repeats = 1;
                VilLoader *l = vil_loader_create(s, &c);
                int ok = l != NULL;
                if (l) {
                    vil_loader_start_epoch(l, 0);
                    const VilBatch *bt = vil_loader_next_batch(l);
                    VilLoaderStats st;
                    vil_loader_stats(l, &st);
                    ok = bt && st.epoch_bad == 1;
                    for (int i = 0; ok && i < bt->n; i++)
                        ok = mode ? bt->labels[i] == (bt->indices[i] == 1 ? -1 : 0) : bt->indices[i] == 0;
                    if (bt) vil_loader_release_batch(l, bt);
                    vil_loader_free(l);
                }
                T_CHECK(ok, "the loader (%s) counts the member that is not an image and %s it", mode ? "eval" : "train",
                        mode ? "leaves out" : "replaces");
            }
        }
        vil_dataset_free(s);
    }
    vil_buffer_free(&b);

    /* patterns */
    const char *missing[] = {"do not exist", "train-0004.tar", NULL};
    open_fails("range past the shards", path("shards/train/train-{0000..0009}.tar"), "train", missing);
    const char *malformed[] = {"expected a range", NULL};
    open_fails("malformed range", path("shards/train/train-{00..}.tar"), "train", malformed);
    const char *backwards[] = {"runs backwards", NULL};
    open_fails("backwards range", path("shards/train/train-{0003..0000}.tar"), "train", backwards);
    const char *many[] = {"too many", NULL};
    open_fails("a range of 10^10 shards", path("shards/train/train-{0..9999999999}.tar"), "train", many);
    const char *noval[] = {"no val shards match", NULL};
    open_fails("no val shards", path("h/good/train-{0..3}.tar"), "val", noval);
    const char *gone[] = {"shard '", "none.tar' does not exist", NULL};
    open_fails("a missing shard file", path("h/none.tar"), NULL, gone);
    const char *nosplit[] = {"names no split", NULL};
    open_fails("val of a pattern without train", path("h/good/x.tar"), "val", nosplit);
    const char *nomatch[] = {"no shard matches", NULL};
    open_fails("a glob that matches nothing", path("h/good/*-none.tar"), "train", nomatch);
}

/* ---- issue 45: data after an end-of-archive marker, label members, patterns ---- */

/* the bytes of n tars (each with its end blocks) one after the other, then pad zero bytes */
static CorpusTar concat_tars(const CorpusTar *parts, int n, size_t pad) {
    CorpusTar t = {0};
    for (int i = 0; i < n; i++) {
        corpus_tar_grow(&t, parts[i].n);
        memcpy(t.b + t.n, parts[i].b, parts[i].n);
        t.n += parts[i].n;
    }
    corpus_tar_grow(&t, pad + 1);
    memset(t.b + t.n, 0, pad);
    t.n += pad;
    return t;
}

/* a sample's image bytes that differ per sample and cross the 512-byte blocks unevenly */
static char *image_text(int k, size_t n) {
    char *s = malloc(n + 1);
    for (size_t i = 0; i < n; i++) s[i] = (char)('A' + (k * 7 + (int)i) % 26);
    s[n] = 0;
    return s;
}

/* samples `name` of folder d: count, then each sample's bytes and label against want[] */
static void check_samples(const char *what, const char *d, int n, const char *const *bytes, const int *labels) {
    VilDataset *ds = open_quiet(d, NULL);
    T_CHECK(ds != NULL, "%s opens: %s", what, g_cap.msg);
    if (!ds) return;
    T_CHECK(vil_dataset_size(ds) == n, "%s: %d samples, expected %d (the sum of its parts)", what,
            vil_dataset_size(ds), n);
    VilBuffer b = {0};
    int ok = vil_dataset_size(ds) == n;
    for (int i = 0; ok && i < n; i++)
        ok = vil_dataset_read_bytes(ds, i, &b) == 0 && b.size == strlen(bytes[i]) &&
             !memcmp(b.data, bytes[i], b.size) && vil_dataset_label(ds, i) == labels[i];
    T_CHECK(ok, "%s: every sample's bytes (read at its offset) and label are the member's", what);
    vil_buffer_free(&b);
    vil_dataset_free(ds);
}

static void test_concatenated(void) {
    /* three tars, each with its two end blocks: 2 + 1 + 2 samples */
    char *img[5];
    const size_t lens[5] = {700, 100, 1500, 512, 33};
    for (int k = 0; k < 5; k++) img[k] = image_text(k, lens[k]);
    const Member m1[] = {F("a.jpg", img[0]), F("a.cls", "0"), F("b.jpg", img[1]), F("b.cls", "1")};
    const Member m2[] = {F("c.jpg", img[2]), F("c.cls", "2")};
    const Member m3[] = {F("d.jpg", img[3]), F("d.cls", "1"), F("e.jpg", img[4]), F("e.json", "{\"label\": 0}")};
    CorpusTar parts[3] = {make_tar(m1, 4, 1), make_tar(m2, 2, 1), make_tar(m3, 4, 1)};
    const char *const bytes[5] = {img[0], img[1], img[2], img[3], img[4]};
    const int labels[5] = {0, 1, 2, 1, 0};
    /* the reference: each part alone holds its samples */
    int alone = 0;
    for (int p = 0; p < 3; p++) {
        char name[32];
        snprintf(name, sizeof name, "part%d", p);
        const char *d = hostile_dir(name);
        write_tar(name, &parts[p], parts[p].n);
        VilDataset *ds = open_quiet(d, NULL);
        alone += ds ? vil_dataset_size(ds) : 0;
        vil_dataset_free(ds);
    }
    T_CHECK(alone == 5, "the three tars alone hold 2 + 1 + 2 samples (%d)", alone);
    /* cat a.tar b.tar c.tar, then padded to a 10 KiB record as GNU tar pads */
    CorpusTar cat = concat_tars(parts, 3, 0);
    size_t rec = (10240 - cat.n % 10240) % 10240;
    CorpusTar catp = concat_tars(&cat, 1, rec);
    hostile_dir("concat");
    write_tar("concat", &catp, catp.n);
    check_samples("cat a.tar b.tar c.tar (padded to 10 KiB)", path("h/concat"), 5, bytes, labels);
    /* one lone zero block between members, and a short zero tail (not a whole block) */
    {
        CorpusTar one = concat_tars(&parts[0], 1, 0);
        one.n -= 512; /* keep one of a.tar's two end blocks */
        CorpusTar two[2] = {one, parts[1]};
        CorpusTar t = concat_tars(two, 2, 100);
        hostile_dir("lone_zero");
        write_tar("lone_zero", &t, t.n);
        check_samples("a lone zero block inside, 100 zero bytes after", path("h/lone_zero"), 3, bytes, labels);
        free(t.b);
        free(one.b);
    }
    /* non-zero bytes after the end blocks: refused by name, never dropped */
    {
        const char *tails[3] = {"garbage", NULL, NULL};
        char block[600];
        for (size_t i = 0; i < sizeof block; i++) block[i] = (char)(1 + i % 250);
        size_t tlen[3] = {7, sizeof block, 1};
        tails[1] = block;
        tails[2] = "\x01";
        const char *names[3] = {"tail_short", "tail_block", "tail_one_byte"};
        for (int k = 0; k < 3; k++) {
            CorpusTar t = concat_tars(&cat, 1, 1024 * (size_t)k);
            corpus_tar_grow(&t, tlen[k]);
            memcpy(t.b + t.n, tails[k], tlen[k]);
            t.n += tlen[k];
            const char *dd = hostile_dir(names[k]);
            write_tar(names[k], &t, t.n);
            const char *want[] = {"x.tar", "after", "end-of-archive", NULL};
            open_fails(names[k], dd, NULL, want);
            free(t.b);
        }
    }
    /* GNU tar's own: two archives of its default 10 KiB records, one after the other */
    {
        corpus_mkdir("%s/%s", dir, "gcat");
        corpus_mkdir("%s/%s", path("gcat"), "p1");
        corpus_mkdir("%s/%s", path("gcat"), "p2");
        corpus_mkdir("%s/%s", path("gcat"), "out");
        corpus_write(path("gcat/p1/k1.jpg"), img[2], lens[2]);
        corpus_write(path("gcat/p1/k1.cls"), "1\n", 2);
        corpus_write(path("gcat/p2/k2.jpg"), img[0], lens[0]);
        corpus_write(path("gcat/p2/k2.cls"), "0\n", 2);
        corpus_write(path("gcat/p2/k3.jpg"), img[4], lens[4]);
        corpus_write(path("gcat/p2/k3.cls"), "2\n", 2);
        char cmd[8192], out[4096];
        snprintf(cmd, sizeof cmd, "tar --format=gnu --sort=name -cf %s -C %s . && tar --format=pax --sort=name "
                 "-cf %s -C %s . && cat %s %s > %s 2>&1", path("gcat/1.tar"), path("gcat/p1"), path("gcat/2.tar"),
                 path("gcat/p2"), path("gcat/1.tar"), path("gcat/2.tar"), path("gcat/out/s.tar"));
        int rc = t_run(cmd, out, sizeof out);
        T_CHECK(rc == 0, "GNU tar, two archives concatenated: %s", out);
        const char *const gb[3] = {img[2], img[0], img[4]};
        const int gl[3] = {1, 0, 2};
        check_samples("cat gnu.tar pax.tar (GNU tar)", path("gcat/out"), 3, gb, gl);
    }
    for (int p = 0; p < 3; p++) free(parts[p].b);
    free(cat.b);
    free(catp.b);
    for (int k = 0; k < 5; k++) free(img[k]);
}

static void test_label_members(void) {
    const Member cls2[] = {F("a.jpg", NULL), F("a.cls", "0"), F("a.cls", "1")};
    hostile_case("two_cls", cls2, 3, NULL, "two .cls members", "'a.cls'");
    const Member cls_case[] = {F("a.jpg", NULL), F("a.cls", "1"), F("a.CLS", "1")};
    hostile_case("cls_and_CLS", cls_case, 3, NULL, "two .cls members", "'a.CLS'");
    const Member json2[] = {F("a.json", "{\"label\": 1}"), F("a.jpg", NULL), F("a.json", "{\"label\": 0}")};
    hostile_case("two_json", json2, 3, NULL, "two .json members", "'a.json'");
    const Member jtrail[] = {F("a.jpg", NULL), F("a.json", "{\"label\": 1} x")};
    hostile_case("json_trailing", jtrail, 2, NULL, "'a.json'", "after its JSON object");
    const Member jtwo[] = {F("a.jpg", NULL), F("a.json", "{\"label\": 1}{\"label\": 2}")};
    hostile_case("json_two_objects", jtwo, 2, NULL, "'a.json'", "after its JSON object");
    const Member jnul[] = {F("a.jpg", NULL), F("a.json", "{\"label\": 1}\n,")};
    hostile_case("json_trailing_comma", jnul, 2, NULL, "'a.json'", "after its JSON object");
    const Member jdup[] = {F("a.jpg", NULL), F("a.json", "{\"label\": 1, \"label\": 2}")};
    hostile_case("json_label_twice", jdup, 2, NULL, "'a.json'", "\"label\" 2 times");
    const Member differ[] = {F("a.jpg", NULL), F("a.cls", "1"), F("a.json", "{\"label\": 2}")};
    hostile_case("cls_json_disagree", differ, 3, NULL, "'a.cls'", "'a.json'");
    const Member differ2[] = {F("a.json", "{\"cls\": 0}"), F("a.jpg", NULL), F("a.cls", "1")};
    hostile_case("json_cls_disagree", differ2, 3, NULL, "'a.cls'", "'a.json'");
    /* accepted: whitespace after the object, a .json of metadata beside the .cls, agreeing labels */
    const char *d = hostile_dir("labels_ok");
    const Member ok[] = {F("a.jpg", NULL), F("a.json", " {\"label\": 2}\r\n\t "),
                         F("b.jpg", NULL), F("b.cls", "1"), F("b.json", "{\"caption\": \"x\", \"label\": \"emu\"}"),
                         F("c.json", "{\"label\": 0, \"w\": 3}"), F("c.cls", "0"), F("c.jpg", NULL)};
    CorpusTar t = make_tar(ok, 8, 1);
    write_tar("labels_ok", &t, t.n);
    free(t.b);
    VilDataset *ds = open_quiet(d, NULL);
    T_CHECK(ds && vil_dataset_size(ds) == 3 && vil_dataset_label(ds, 0) == 2 && vil_dataset_label(ds, 1) == 1 &&
            vil_dataset_label(ds, 2) == 0, "json with trailing whitespace, a metadata .json beside a .cls, agreeing "
            ".cls and .json: labels 2, 1, 0 (%s)", g_cap.msg);
    vil_dataset_free(ds);
}

/* the patterns' children: each opens one pattern and says how it went */
typedef struct {
    const char *pattern, *split;
} PatternArg;

static int open_pattern(void *arg) {
    const PatternArg *p = arg;
    VilDataset *ds = vil_dataset_open(p->pattern, p->split, NULL);
    int n = ds ? vil_dataset_size(ds) : -1;
    vil_dataset_free(ds);
    return n < 0 ? 0 : 1 + n; /* 0: refused (the message says why) */
}

static void limited_pattern(const char *what, const char *pattern, const char *split, long mb, const char *w1,
                            const char *w2) {
    static char msg[4096];
    PatternArg a = {pattern, split};
    int rc = t_limited(open_pattern, &a, mb, 30, msg, sizeof msg);
    T_CHECK(rc == 0 && strstr(msg, w1) && (!w2 || strstr(msg, w2)), "%s: refused with a reason within %ld MB "
            "(child rc %d: %d = killed by a signal): %.300s", what, mb, rc, rc, msg);
    printf("ok   %-24s -> %.200s\n", what, msg);
}

static void test_pattern_bounds(void) {
    /* 21,000 ranges {0..0}: one name of 21,000 digits; the expansion holds the pattern once and
     * its names, not a copy per range (1.38 GB before) */
    size_t reps = 21000;
    size_t cap = strlen(path("h/train-")) + reps * 6 + 16;
    char *big = malloc(cap);
    size_t o = (size_t)snprintf(big, cap, "%s", path("h/train-"));
    for (size_t i = 0; i < reps; i++) memcpy(big + o, "{0..0}", 6), o += 6;
    snprintf(big + o, cap - o, ".tar");
    limited_pattern("21000 x {0..0}", big, NULL, 16, "shard '", "h/train-00000");
    limited_pattern("21000 x {0..0}, val", big, "val", 16, "no val shards match", NULL);
    free(big);
    /* ranges that multiply past the cap: refused before a name is built */
    limited_pattern("ranges of 2^20 + 1024", path("h/s-{0..1023}{0..1024}.tar"), NULL, 16, "more than 1048576", NULL);

    /* the largest bounds: 2^64 - 1 is a shard number like another; past it is out of range */
    const char *d = hostile_dir("bounds");
    (void)d;
    const Member good[] = {F("a.jpg", NULL), F("a.cls", "0"), F("b.jpg", NULL), F("b.cls", "1")};
    CorpusTar t = make_tar(good, 4, 1);
    corpus_write(path("h/bounds/s-18446744073709551615.tar"), t.b, t.n);
    corpus_write(path("h/bounds/s-18446744073709551614.tar"), t.b, t.n);
    free(t.b);
    VilDataset *ds = open_quiet(path("h/bounds/s-{18446744073709551615..18446744073709551615}.tar"), NULL);
    T_CHECK(ds && vil_dataset_size(ds) == 2, "{2^64-1..2^64-1}: the one shard s-18446744073709551615.tar (%s)",
            g_cap.msg);
    vil_dataset_free(ds);
    ds = open_quiet(path("h/bounds/s-{18446744073709551614..18446744073709551615}.tar"), NULL);
    T_CHECK(ds && vil_dataset_size(ds) == 4, "{2^64-2..2^64-1}: two shards (%s)", g_cap.msg);
    vil_dataset_free(ds);
    const char *range[] = {"out of range", "18446744073709551615", NULL};
    open_fails("a bound of 2^64", path("h/bounds/s-{0..18446744073709551616}.tar"), NULL, range);
    open_fails("a bound of 10^22", path("h/bounds/s-{99999999999999999999999..99999999999999999999999}.tar"), NULL,
               range);
    open_fails("a start bound of 2^64", path("h/bounds/s-{18446744073709551616..18446744073709551617}.tar"), NULL,
               range);
    const char *many[] = {"too many", NULL};
    open_fails("{0..2^64-1}", path("h/bounds/s-{0..18446744073709551615}.tar"), NULL, many);
    open_fails("{1..2^64-1}", path("h/bounds/s-{1..18446744073709551615}.tar"), NULL, many);
}

/* ---- training on shards is training on the folder ---- */
static void test_train_same(void) {
    static char out[65536];
    const char *args =
        "--config configs/vil_fashion.cfg --device cpu --set img_size=16 --set patch_size=4 --set stride=4 "
        "--set in_chans=3 --set embed_dim=32 --set depth=2 --set num_classes=3 --set epochs=2 --set batch=4 "
        "--set max_steps=5 --set workers=2 --set log_every=1 --set eval_every_epochs=0 --set ema_decay=0.9";
    const char *runs[2][2] = {{"on_folder", "img"}, {"on_shards", "shards"}};
    for (int r = 0; r < 2; r++) {
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "bin/vil train --data %s --out %s %s 2>&1", path("%s", runs[r][1]),
                 path("%s", runs[r][0]), args);
        int rc = t_run(cmd, out, sizeof out);
        T_CHECK(rc == 0, "train %s: rc %d\n%s", runs[r][0], rc, out);
    }
    const char *keys[] = {"params", "adam_m", "adam_v", "ema"};
    for (int k = 0; k < 4; k++) {
        double d = t_state_diff(dir, "on_folder", "on_shards", keys[k]);
        T_CHECK(d == 0.0, "5 steps on the shards equal 5 steps on the folder bitwise: %s (diff %g)", keys[k], d);
    }
}

#endif

int main(void) {
    dir = corpus_mkdtemp("shards");
#ifndef VIL_ARCHIVE
    /* a build without libarchive says what to install */
    corpus_mkdir("%s/%s", dir, "s");
    corpus_write(path("s/a.tar"), "x", 1);
    const char *want[] = {"built without libarchive", "libarchive-dev", NULL};
    open_fails("shards without libarchive", path("s"), NULL, want);
#else
    const char *build = getenv("VIL_BUILD"); /* make test-asan: build/asan */
    snprintf(g_tool, sizeof g_tool, "%s/tools/folder_to_shards", build && *build ? build : "build");
    if (access(g_tool, X_OK) != 0) {
        printf("FAIL %s is missing: run make (test-run builds it)\n", g_tool);
        t_failed++;
        corpus_rmtree(dir);
        return t_finish();
    }
    write_folder();
    test_convert();
    test_gnu_tar();
    test_hostile();
    test_concatenated();
    test_label_members();
    test_pattern_bounds();
    test_train_same();
#endif
    corpus_rmtree(dir);
    return t_finish();
}
