/* test_avg.c: `vil avg`: checkpoints of one network averaged equal the mean the test computes
 * (in double, rounded once to float32) tensor by tensor; a run folder's step_N snapshots taken
 * in step order; the first file's metadata kept with the sources listed; a checkpoint of
 * another shape refused naming the tensor; usage errors exit 2. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data_corpus.h"
#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "testing.h"
#include "vil/common.h"
#include "vil/model.h"

static char *dir;

static const char *path(const char *name) { return t_path(dir, name); }

/* a tiny model of width D (image size img, stride S) with seed's weights saved at file, step
 * `step`; nan: one weight NaN */
static int save_model_as(const char *file, int D, uint64_t seed, long step, int img, int S, int nan) {
    VilConfig c;
    vil_config_default(&c);
    c.img_size = img, c.patch_size = 4, c.stride = S, c.embed_dim = D, c.depth = 2, c.d_state = 4, c.num_classes = 3;
    vil_config_finalize(&c);
    VilModel m;
    if (vil_model_init(&m, &c, &vil_backend_cpu) != 0) return -1;
    vil_model_init_weights(&m, seed);
    if (nan) {
        float *p = malloc(m.buf_len * sizeof(float));
        vil_model_get_params(&m, p);
        p[m.buf_len / 2] = NAN;
        vil_model_set_params(&m, p);
        free(p);
    }
    char *names[3] = {"cat", "dog", "emu"};
    int rc = vil_checkpoint_save(&m, file, step, names, 3, NULL);
    vil_model_free(&m);
    return rc;
}

static int save_model(const char *file, int D, uint64_t seed, long step) {
    return save_model_as(file, D, seed, step, 16, 4, 0);
}

/* the bytes of a file, to tell whether a command changed it; NULL when it cannot be read */
static unsigned char *slurp(const char *p, size_t *n) {
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    unsigned char *b = malloc(*n + 1);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

static int same_bytes(const char *p, const unsigned char *want, size_t n) {
    size_t k;
    unsigned char *b = slurp(p, &k);
    int same = b && k == n && memcmp(b, want, n) == 0;
    free(b);
    return same;
}

/* out's tensors against the mean of files[0..n) in double, rounded to float: the worst
 * difference in float32 ulps (0: bit for bit); -1 when a tensor is missing */
static double worst_vs_mean(const char *out, const char *const *files, int n) {
    VilSafetensors o, in[4];
    if (vil_st_read(out, &o) != 0) return -1;
    for (int k = 0; k < n; k++)
        if (vil_st_read(files[k], &in[k]) != 0) return -1;
    double worst = 0;
    int missing = o.n_tensors != in[0].n_tensors;
    for (int i = 0; i < in[0].n_tensors && !missing; i++) {
        const VilStTensor *t = vil_st_find(&o, in[0].tensors[i].name);
        if (!t || t->dtype != VIL_ST_F32 || t->nbytes != in[0].tensors[i].nbytes) {
            missing = 1;
            break;
        }
        size_t ne = (size_t)vil_st_numel(t);
        for (size_t j = 0; j < ne; j++) {
            double s = 0;
            for (int k = 0; k < n; k++) s += ((const float *)vil_st_find(&in[k], t->name)->data)[j];
            float want = (float)(s / n), got = ((const float *)t->data)[j];
            worst = fmax(worst, fabs((double)got - want) / fmax(1e-30, nextafterf(fabsf(want), INFINITY) - fabsf(want)));
        }
    }
    vil_st_free(&o);
    for (int k = 0; k < n; k++) vil_st_free(&in[k]);
    return missing ? -1 : worst;
}

static void test_mean(void) {
    const char *f[3] = {path("a.safetensors"), path("b.safetensors"), path("c.safetensors")};
    T_CHECK(save_model(f[0], 8, 1, 100) == 0 && save_model(f[1], 8, 2, 200) == 0 && save_model(f[2], 8, 3, 300) == 0,
            "three checkpoints of one network written");
    char cmd[8192], out[4096];
    snprintf(cmd, sizeof cmd, "bin/vil avg %s %s --out %s 2>&1", f[0], f[1], path("ab.safetensors"));
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "averaged 2 checkpoints"), "vil avg of two: rc %d: %s", rc, out);
    double w = worst_vs_mean(path("ab.safetensors"), f, 2);
    T_CHECK(w == 0, "two averaged: the mean in double rounded to float32, bit for bit (worst %g ulp)", w);
    snprintf(cmd, sizeof cmd, "bin/vil avg %s %s %s --out %s 2>&1", f[0], f[1], f[2], path("abc.safetensors"));
    rc = t_run(cmd, out, sizeof out);
    w = worst_vs_mean(path("abc.safetensors"), f, 3);
    T_CHECK(rc == 0 && w == 0, "three averaged: the mean bit for bit (rc %d, worst %g ulp)", rc, w);
    /* the first file's metadata and the sources */
    VilSafetensors st;
    if (vil_st_read(path("ab.safetensors"), &st) == 0) {
        const char *step = vil_st_meta(&st, "vil.step"), *cls = vil_st_meta(&st, "vil.class_names"),
                   *src = vil_st_meta(&st, "vil.avg_sources"), *cfg = vil_st_meta(&st, "vil.config");
        T_CHECK(step && strcmp(step, "100") == 0, "the first file's step kept: %s", step ? step : "(none)");
        T_CHECK(cls && strstr(cls, "\"emu\"") && cfg, "the first file's class names and config kept");
        T_CHECK(src && strstr(src, "a.safetensors") && strstr(src, "b.safetensors") && src[0] == '[',
                "vil.avg_sources lists the files: %s", src ? src : "(none)");
        vil_st_free(&st);
    } else {
        T_CHECK(0, "the averaged file reads back");
    }
    snprintf(cmd, sizeof cmd, "bin/vil info --model %s 2>&1", path("ab.safetensors"));
    T_CHECK(t_run(cmd, out, sizeof out) == 0 && strstr(out, "classes:     3"), "vil info reads the average");
}

/* a folder: its step_N.safetensors in step order (step_900 before step_1000), nothing else */
static void test_folder(void) {
    mkdir(path("run"), 0755);
    const char *f[3] = {path("run/step_900.safetensors"), path("run/step_1000.safetensors"), path("run/step_80.safetensors")};
    save_model(f[0], 8, 4, 900), save_model(f[1], 8, 5, 1000), save_model(f[2], 8, 6, 80);
    save_model(path("run/last.safetensors"), 8, 7, 1000);
    char cmd[8192], out[4096];
    snprintf(cmd, sizeof cmd, "bin/vil avg %s --out %s 2>&1", path("run"), path("run_avg.safetensors"));
    int rc = t_run(cmd, out, sizeof out);
    const char *want[3] = {f[2], f[0], f[1]};
    double w = worst_vs_mean(path("run_avg.safetensors"), want, 3);
    T_CHECK(rc == 0 && strstr(out, "averaged 3 checkpoints") && w == 0,
            "a run folder: its 3 step_N snapshots averaged (rc %d, worst %g ulp): %s", rc, w, out);
    VilSafetensors st;
    if (vil_st_read(path("run_avg.safetensors"), &st) == 0) {
        const char *src = vil_st_meta(&st, "vil.avg_sources"), *step = vil_st_meta(&st, "vil.step");
        const char *a = src ? strstr(src, "step_80.") : NULL, *b = src ? strstr(src, "step_900.") : NULL,
                   *c = src ? strstr(src, "step_1000.") : NULL;
        T_CHECK(a && b && c && a < b && b < c && !strstr(src, "last.") && step && strcmp(step, "80") == 0,
                "in step order, without last.safetensors, the first's step: %s", src ? src : "(none)");
        vil_st_free(&st);
    }
    mkdir(path("empty"), 0755);
    snprintf(cmd, sizeof cmd, "bin/vil avg %s %s --out %s 2>&1", path("empty"), f[0], path("x.safetensors"));
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "no step_N.safetensors"), "a folder without snapshots: rc %d: %s", rc, out);
}

static void test_refusals(void) {
    char cmd[8192], out[4096];
    save_model(path("wide.safetensors"), 16, 1, 5);
    snprintf(cmd, sizeof cmd, "bin/vil avg %s %s --out %s 2>&1", path("a.safetensors"), path("wide.safetensors"),
             path("bad.safetensors"));
    int rc = t_run(cmd, out, sizeof out);
    struct stat sb;
    T_CHECK(rc == 1 && strstr(out, "tensor '") && strstr(out, "wide.safetensors") && strstr(out, "not the same network") &&
                t_count(out, "\n") == 1 && stat(path("bad.safetensors"), &sb) != 0,
            "another width: refused in one line naming the tensor, nothing written (rc %d): %s", rc, out);
    snprintf(cmd, sizeof cmd, "bin/vil avg %s --out %s 2>&1", path("a.safetensors"), path("bad.safetensors"));
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 2 && strstr(out, "at least two"), "one checkpoint: usage, rc %d: %s", rc, out);
    snprintf(cmd, sizeof cmd, "bin/vil avg %s %s 2>&1", path("a.safetensors"), path("b.safetensors"));
    T_CHECK(t_run(cmd, out, sizeof out) == 2 && strstr(out, "--out is required"), "no --out: usage, rc 2");
    snprintf(cmd, sizeof cmd, "bin/vil avg --ema %s %s --out %s 2>&1", path("a.safetensors"), path("b.safetensors"),
             path("bad.safetensors"));
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "ema.safetensors"), "--ema on vil files: pointed at RUN/ema.safetensors, rc %d: %s",
            rc, out);
    snprintf(cmd, sizeof cmd, "bin/vil avg %s %s --out %s 2>&1", path("a.safetensors"), path("missing.safetensors"),
             path("bad.safetensors"));
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && t_count(out, "missing.safetensors") == 1, "a missing file named once, rc %d: %s", rc, out);
}

/* Issue 45 items 3, 4: every input checked before anything is written; the output never one
 * of the inputs; a FIFO among the inputs refused, not waited on. */
static void test_checked_first(void) {
    char cmd[8192], out[4096];
    const char *good = path("good.safetensors"), *nan = path("nan.safetensors");
    save_model(good, 8, 11, 10);
    save_model_as(nan, 8, 12, 20, 16, 4, 1);
    size_t n;
    unsigned char *orig = slurp(good, &n);
    /* the output is an input: refused before anything is read (the issue: good.safetensors
     * became a NaN checkpoint) */
    snprintf(cmd, sizeof cmd, "bin/vil avg %s %s --out %s 2>&1", nan, good, good);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 2 && strstr(out, "inputs") && same_bytes(good, orig, n),
            "--out naming an input: usage error, the input unchanged (rc %d): %s", rc, out);
    /* the same file by another name: ./x spelling and a hard link */
    char dotted[4200], linked[4200];
    snprintf(dotted, sizeof dotted, "%s/./good.safetensors", dir);
    snprintf(linked, sizeof linked, "%s", path("good_link.safetensors"));
    T_CHECK(link(good, linked) == 0, "a hard link to an input made");
    snprintf(cmd, sizeof cmd, "bin/vil avg %s %s --out %s 2>&1", good, path("a.safetensors"), dotted);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 2 && same_bytes(good, orig, n), "--out DIR/./input: refused (rc %d): %s", rc, out);
    snprintf(cmd, sizeof cmd, "bin/vil avg %s %s --out %s 2>&1", good, path("a.safetensors"), linked);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 2 && strstr(out, "same file as the input") && same_bytes(good, orig, n),
            "--out a hard link of an input: refused, naming the input (rc %d): %s", rc, out);
    /* a NaN input anywhere: named with its tensor, nothing written */
    const char *res = path("res.safetensors");
    snprintf(cmd, sizeof cmd, "bin/vil avg %s %s --out %s 2>&1", good, nan, res);
    rc = t_run(cmd, out, sizeof out);
    struct stat sb;
    T_CHECK(rc == 1 && strstr(out, "nan.safetensors") && strstr(out, "NaN") && stat(res, &sb) != 0,
            "a NaN input: refused naming it, nothing written (rc %d): %s", rc, out);
    /* and first: its metadata is not written either */
    snprintf(cmd, sizeof cmd, "bin/vil avg %s %s --out %s 2>&1", nan, good, res);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "nan.safetensors") && stat(res, &sb) != 0,
            "a NaN first input: refused naming it, nothing written (rc %d): %s", rc, out);
    /* a first input whose metadata disagrees with its tensors: its metadata is what would be
     * written, so it is checked as a checkpoint before anything */
    const char *badmeta = path("badmeta.safetensors");
    VilSafetensors st;
    if (vil_st_read(good, &st) == 0) {
        VilStWriter *w = vil_st_writer_new();
        for (int i = 0; i < st.n_tensors; i++)
            vil_st_writer_add(w, st.tensors[i].name, st.tensors[i].dtype, st.tensors[i].ndim, st.tensors[i].shape,
                              st.tensors[i].data);
        for (int i = 0; i < st.n_meta; i++)
            vil_st_writer_meta(w, st.meta_keys[i], strcmp(st.meta_keys[i], "vil.class_names") == 0
                                                       ? "[\"cat\", \"dog\"]" : st.meta_vals[i]);
        vil_st_writer_save(w, badmeta);
        vil_st_writer_free(w);
        vil_st_free(&st);
    }
    snprintf(cmd, sizeof cmd, "bin/vil avg %s %s --out %s 2>&1", badmeta, good, res);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "badmeta.safetensors") && stat(res, &sb) != 0,
            "a first input with 2 class names for 3 classes: refused naming it, nothing written (rc %d): %s", rc, out);
    /* another network with tensors of the same shapes (16 px stride 4 and 19 px stride 5: a
     * 4 x 4 grid both) */
    const char *other = path("other_grid.safetensors");
    save_model_as(other, 8, 13, 30, 19, 5, 0);
    snprintf(cmd, sizeof cmd, "bin/vil avg %s %s --out %s 2>&1", good, other, res);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "other_grid.safetensors") && strstr(out, "not the same network") && stat(res, &sb) != 0,
            "same shapes, another image size and stride: refused naming the input (rc %d): %s", rc, out);
    /* a FIFO among the inputs: refused at once (the issue: blocked forever) */
    const char *fifo = path("fifo.safetensors");
    T_CHECK(mkfifo(fifo, 0644) == 0, "a FIFO made");
    snprintf(cmd, sizeof cmd, "timeout 20 bin/vil avg %s %s --out %s 2>&1", good, fifo, res);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "FIFO") && stat(res, &sb) != 0, "a FIFO input: refused, not waited on (rc %d): %s",
            rc, out);
    free(orig);
}

/* Issue 45 item 10: a folder of 50,000 snapshots is sorted in n log n, not by insertion (17-26
 * s before a file was read): the first file read is the smallest step, within seconds */
static void test_many_snapshots(void) {
    mkdir(path("many"), 0755);
    for (int i = 0; i < 50000; i++) {
        char name[64];
        snprintf(name, sizeof name, "many/step_%d.safetensors", (i * 7919) % 50000 + 1);
        corpus_write(path(name), "", 0);
    }
    char cmd[8192], out[4096];
    snprintf(cmd, sizeof cmd, "bin/vil avg %s --out %s 2>&1", path("many"), path("many.safetensors"));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = t_run(cmd, out, sizeof out);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    /* the empty step_1 is refused first: read in step order */
    T_CHECK(rc == 1 && strstr(out, "step_1.safetensors") && !strstr(out, "step_10"),
            "50,000 snapshots: the smallest step is read first (rc %d): %.300s", rc, out);
    printf("ok   50,000 snapshots gathered, sorted and the first refused in %.2f s\n", s);
    T_CHECK(s < 8.0, "50,000 snapshots sorted in well under the 17 s an insertion sort took: %.2f s", s);
}

int main(void) {
    dir = corpus_mkdtemp("avg");
    test_mean();
    test_folder();
    test_refusals();
    test_checked_first();
    test_many_snapshots();
    corpus_rmtree(dir);
    return t_finish();
}
