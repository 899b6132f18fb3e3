/* test_compare.c: `vil compare` and what it reports. The GFLOPs count against the ViM paper's
 * published figures; then the command on the torch.save checkpoints of tests/data/pth over a
 * small class-folder dataset made of their reference images: its top-1 at the checkpoints' own
 * size must be what the float64 PyTorch logits give, its rows cover every model and resolution,
 * and the CSV, JSON and SVG agree with the table; the CSV's text fields are safe in a spreadsheet;
 * --limit takes images spread over the classes. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model_testing.h"
#include "testing.h"
#include "formats/checkpoint.h"
#include "vil/common.h"
#include "vil/config.h"
#include "vil/model.h"

#define DATA "tests/data/pth/"
static char dir[] = "/tmp/vil_test_compare_XXXXXX";

static void test_macs(void) {
    /* ViM-Tiny at 224 counted by hand from the shapes (L 197 tokens, M 196 patches, D 192,
     * E 384, R 12, N 16, conv 4, 24 layers, 1000 classes):
     *   in_proj 197*192*768 = 29,048,832; out_proj 197*384*192 = 14,524,416;
     *   per direction: conv 197*384*4 = 302,592, x_proj 197*384*44 = 3,328,512,
     *   dt_proj 197*12*384 = 907,776, scan 3*197*384*16 = 3,631,104 -> 8,169,984 (x2);
     *   layer 59,913,216 x 24 = 1,437,917,184; patch embedding 196*192*3*16*16 = 28,901,376;
     *   head 192*1000 = 192,000; total 1,467,010,560 */
    VilConfig v;
    vil_config_default(&v);
    strcpy(v.arch, "vim");
    vil_config_finalize(&v);
    double g = vil_model_macs(&v);
    T_CHECK(g == 1467010560.0, "ViM-Tiny multiply-adds: %.0f, by hand 1,467,010,560", g);
    /* the count grows with the tokens: 384 px has (384/16)^2 + 1 = 577 against 197 */
    VilConfig a, b;
    vil_config_default(&a);
    vil_config_finalize(&a);
    b = a;
    b.img_size = 384;
    vil_config_finalize(&b);
    double r = vil_model_macs(&b) / vil_model_macs(&a);
    T_CHECK(r > 2.8 && r < 3.0, "384 px costs about 577/197 = 2.93x of 224 (%.3f)", r);
}

static int copy_file(const char *from, const char *to) {
    size_t n;
    unsigned char *b = vil_read_file(from, &n);
    if (!b) return -1;
    int rc = vil_write_file_atomic(to, b, n);
    free(b);
    return rc;
}

/* val/cK/imgI.png: image i in class i % 5 (two classes stay empty of the three images... each
 * class folder needs one image, so classes 3 and 4 get copies of images 0 and 1) */
static int labels[5] = {0, 1, 2, 3, 4};
static const int src_img[5] = {0, 1, 2, 0, 1};

static void make_data(void) {
    char p[1200], q[1200];
    snprintf(p, sizeof p, "%s/val", dir);
    mkdir(p, 0755);
    for (int c = 0; c < 5; c++) {
        snprintf(p, sizeof p, "%s/val/c%d", dir, c);
        mkdir(p, 0755);
        snprintf(p, sizeof p, "%s/val/c%d/x.png", dir, c);
        snprintf(q, sizeof q, DATA "img%d.png", src_img[c]);
        if (copy_file(q, p) != 0) fprintf(stderr, "cannot copy %s\n", q);
    }
}

/* top-1 (%) that the float64 reference logits give on make_data's five images */
static double ref_top1(const char *name) {
    char f[256];
    snprintf(f, sizeof f, DATA "%s.ema.f64", name);
    size_t n;
    double *lg = (double *)vil_read_file(f, &n);
    if (!lg || n != 15 * sizeof(double)) {
        free(lg);
        return -1;
    }
    int right = 0;
    for (int c = 0; c < 5; c++) {
        const double *l = lg + 5 * src_img[c];
        int best = 0;
        for (int k = 1; k < 5; k++)
            if (l[k] > l[best]) best = k;
        right += best == labels[c];
    }
    free(lg);
    return 100.0 * right / 5;
}

static void test_command(void) {
    make_data();
    char cmd[4096], out[16384];
    snprintf(cmd, sizeof cmd,
             "bin/vil compare --device cpu --models " DATA "vim_p4s4.pth " DATA "vil_p4s4.pth --ema "
             "--data %s --crop-pct 1 --img-size 16,24 --batch 4 --steps 1 --workers 1 --out %s/cmp",
             dir, dir);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0, "vil compare exits 0 (%d): %s", rc, out);
    T_CHECK(strstr(out, "\nvim_p4s4 (EMA)") && strstr(out, "\nvil_p4s4 (EMA)") && strstr(out, "ViM") &&
                strstr(out, "ViL") && strstr(out, "GFLOPs"), "the table names both models and families");
    char p[1200];
    snprintf(p, sizeof p, "%s/cmp/compare.json", dir);
    size_t n;
    char *js = (char *)vil_read_file(p, &n);
    cJSON *o = js ? cJSON_ParseWithLength(js, n) : NULL;
    cJSON *rows = cJSON_GetObjectItem(o, "rows");
    T_CHECK(cJSON_GetArraySize(rows) == 4, "4 rows: 2 models x 2 resolutions");
    const char *names[2] = {"vim_p4s4", "vil_p4s4"};
    for (int i = 0; i < cJSON_GetArraySize(rows) && i < 4; i++) {
        cJSON *r = cJSON_GetArrayItem(rows, i);
        const char *fam = cJSON_GetStringValue(cJSON_GetObjectItem(r, "family"));
        const char *w = cJSON_GetStringValue(cJSON_GetObjectItem(r, "weights"));
        double res = cJSON_GetNumberValue(cJSON_GetObjectItem(r, "img_size"));
        double top1 = cJSON_GetNumberValue(cJSON_GetObjectItem(r, "top1"));
        double params = cJSON_GetNumberValue(cJSON_GetObjectItem(r, "params"));
        double gf = cJSON_GetNumberValue(cJSON_GetObjectItem(r, "gflops"));
        double ips = cJSON_GetNumberValue(cJSON_GetObjectItem(r, "images_per_s"));
        double peak = cJSON_GetNumberValue(cJSON_GetObjectItem(r, "peak_bytes"));
        double images = cJSON_GetNumberValue(cJSON_GetObjectItem(r, "images"));
        T_CHECK(fam && strcmp(fam, i < 2 ? "ViM" : "ViL") == 0 && w && strcmp(w, "model_ema") == 0 &&
                    res == (i % 2 ? 24 : 16) && images == 5,
                "row %d: %s %s at %g px over %g images", i, fam ? fam : "?", w ? w : "?", res, images);
        /* the model's own numbers, loaded here */
        VilModel m;
        VilCheckpointMeta meta;
        char f[256];
        snprintf(f, sizeof f, DATA "%s.pth", names[i / 2]);
        if (vil_checkpoint_load(f, &vil_backend_cpu, &(VilCheckpointOpts){.img_size = (int)res, .ema = 1}, &m, &meta) == 0) {
            T_CHECK(params == (double)m.param_count && fabs(gf - vil_model_macs(&m.cfg) / 1e9) < 1e-9,
                    "row %d: params %g and GFLOPs %g are the model's", i, params, gf);
            vil_checkpoint_meta_free(&meta);
            vil_model_free(&m);
        }
        T_CHECK(ips > 0 && peak > 0, "row %d: images/s %g and peak %g measured", i, ips, peak);
        if (res == 16) {
            double want = ref_top1(names[i / 2]);
            T_CHECK(want >= 0 && fabs(top1 - want) < 1e-9, "row %d: top-1 %.1f%% is what float64 torch's logits give (%.1f%%)", i, top1, want);
        }
    }
    cJSON_Delete(o);
    free(js);
    snprintf(p, sizeof p, "%s/cmp/compare.csv", dir);
    char *csv = (char *)vil_read_file(p, &n);
    int lines = 0;
    for (size_t k = 0; csv && k < n; k++) lines += csv[k] == '\n';
    T_CHECK(csv && lines == 5 && strncmp(csv, "model,file,weights,family,img_size", 34) == 0, "CSV: a header and 4 rows");
    free(csv);
    snprintf(p, sizeof p, "%s/cmp/compare.svg", dir);
    char *svg = (char *)vil_read_file(p, &n);
    T_CHECK(svg && strstr(svg, "<svg") && strstr(svg, "Throughput") && strstr(svg, "vil_p4s4 (EMA)"), "SVG chart with both models");
    free(svg);

    /* a size the patches do not fit: that row fails, the others are measured, exit 1 */
    snprintf(cmd, sizeof cmd,
             "bin/vil compare --device cpu --models " DATA "vil_p4s4.pth --data %s --crop-pct 1 "
             "--img-size 16,18 --batch 4 --steps 1 --workers 1 --out %s/cmp2 2>&1", dir, dir);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "does not load at 18 px") && strstr(out, "1 of 2 measurements failed"),
            "a resolution that does not fit: exit 1 (%d), %s", rc, out);
    /* each model at its own size (no --img-size): one row each, the chart still drawn */
    snprintf(cmd, sizeof cmd,
             "bin/vil compare --device cpu --models " DATA "vil_p4s4.pth " DATA "vim_p4s2.pth --data %s "
             "--crop-pct 1 --batch 4 --steps 1 --workers 1 --out %s/cmp3 2>&1", dir, dir);
    rc = t_run(cmd, out, sizeof out);
    snprintf(p, sizeof p, "%s/cmp3/compare.svg", dir);
    struct stat sb;
    T_CHECK(rc == 0 && stat(p, &sb) == 0 && strstr(out, "vim_p4s2  ViM       16"),
            "each model at its own size: exit %d, chart written: %s", rc, out);
    /* --label names the models, as A,B or once per model: the table, the CSV, the JSON and the
     * chart's legends; the throughput axis says it is logarithmic */
    const char *label_forms[2] = {"--label 'ViL p4,ViM p2'", "--label 'ViL p4' --label 'ViM p2'"};
    for (int f = 0; f < 2; f++) {
        snprintf(cmd, sizeof cmd,
                 "bin/vil compare --device cpu --models " DATA "vil_p4s4.pth " DATA "vim_p4s2.pth --data %s "
                 "--crop-pct 1 --batch 4 --steps 1 --workers 1 %s --out %s/cmp_label 2>&1", dir, label_forms[f], dir);
        rc = t_run(cmd, out, sizeof out);
        snprintf(p, sizeof p, "%s/cmp_label/compare.svg", dir);
        char *lsvg = (char *)vil_read_file(p, &n);
        snprintf(p, sizeof p, "%s/cmp_label/compare.csv", dir);
        char *lcsv = (char *)vil_read_file(p, &n);
        snprintf(p, sizeof p, "%s/cmp_label/compare.json", dir);
        char *ljs = (char *)vil_read_file(p, &n);
        T_CHECK(rc == 0 && strstr(out, "\nViL p4  ") && strstr(out, "\nViM p2  ") && lsvg &&
                    t_count(lsvg, ">ViL p4<") == 2 && t_count(lsvg, ">ViM p2<") == 2 && !strstr(lsvg, ">vil_p4s4<") &&
                    lcsv && strstr(lcsv, "\nViL p4," DATA "vil_p4s4.pth,") && strstr(lcsv, "\nViM p2,") &&
                    ljs && strstr(ljs, "\"model\":\t\"ViM p2\""),
                "%s: the names in the table, both legends, the CSV and the JSON (exit %d): %s", label_forms[f], rc, out);
        T_CHECK(lsvg && strstr(lsvg, ">images/s (log scale)<") && strstr(lsvg, ">top-1 (%)<"),
                "compare.svg: the throughput axis is labelled as a log scale");
        free(lsvg);
        free(lcsv);
        free(ljs);
    }
    snprintf(cmd, sizeof cmd, "bin/vil compare --device cpu --models " DATA "vil_p4s4.pth " DATA "vim_p4s2.pth "
             "--data %s --label A,B,C --out %s/cmp_bad 2>&1", dir, dir);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 2 && strstr(out, "vil compare: 3 --label names for 2 models: give one per model, in their order"),
            "3 labels for 2 models: exit 2 (%d): %s", rc, out);
    /* --ema takes a safetensors file as it is (it holds one set of weights) */
    snprintf(cmd, sizeof cmd, "bin/vil convert " DATA "vil_p4s4.pth %s/vil_ema.safetensors --ema >/dev/null 2>&1", dir);
    rc = t_run(cmd, NULL, 0);
    snprintf(cmd, sizeof cmd, "bin/vil compare --device cpu --models " DATA "vil_p4s4.pth %s/vil_ema.safetensors --ema "
             "--data %s --crop-pct 1 --batch 4 --steps 1 --workers 1 --out %s/cmp_ema 2>&1", dir, dir, dir);
    int rc2 = t_run(cmd, out, sizeof out);
    snprintf(p, sizeof p, "%s/cmp_ema/compare.json", dir);
    js = (char *)vil_read_file(p, &n);
    o = js ? cJSON_ParseWithLength(js, n) : NULL;
    rows = cJSON_GetObjectItem(o, "rows");
    double t0 = cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(rows, 0), "top1"));
    double t1 = cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(rows, 1), "top1"));
    T_CHECK(rc == 0 && rc2 == 0 && cJSON_GetArraySize(rows) == 2 && t0 == t1 && t0 == ref_top1("vil_p4s4"),
            "--ema: the .pth's model_ema and the converted EMA file measure alike (%.1f%%, %.1f%%; exit %d, %d): %s",
            t0, t1, rc, rc2, out);
    cJSON_Delete(o);
    free(js);
    /* --pos keep: the other sizes keep the trained grid, the model's own is as it was; the JSON
     * says which */
    snprintf(cmd, sizeof cmd, "bin/vil compare --device cpu --models " DATA "vil_p4s4.pth --ema --data %s --crop-pct 1 "
             "--img-size 16,24 --pos keep --batch 4 --steps 1 --workers 1 --out %s/cmp_keep 2>&1", dir, dir);
    rc = t_run(cmd, out, sizeof out);
    snprintf(p, sizeof p, "%s/cmp_keep/compare.json", dir);
    js = (char *)vil_read_file(p, &n);
    o = js ? cJSON_ParseWithLength(js, n) : NULL;
    rows = cJSON_GetObjectItem(o, "rows");
    const char *posw = cJSON_GetStringValue(cJSON_GetObjectItem(o, "pos"));
    t0 = cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(rows, 0), "top1"));
    T_CHECK(rc == 0 && strstr(out, "pos_embed at other sizes: keep") && posw && strcmp(posw, "keep") == 0 &&
                cJSON_GetArraySize(rows) == 2 && t0 == ref_top1("vil_p4s4"),
            "--pos keep: exit %d, said in the header and the JSON, the own size as before (%.1f%%): %s", rc, t0, out);
    cJSON_Delete(o);
    free(js);
    snprintf(cmd, sizeof cmd, "bin/vil compare --models " DATA "vil_p4s4.pth --data %s --pos keep 2>&1", dir);
    T_CHECK(t_run(cmd, out, sizeof out) == 2 && strstr(out, "--pos goes with --img-size"), "--pos without --img-size: exit 2");
    /* usage errors */
    snprintf(cmd, sizeof cmd, "bin/vil compare --data %s 2>/dev/null", dir);
    T_CHECK(t_run(cmd, NULL, 0) == 2, "no models: exit 2");
    snprintf(cmd, sizeof cmd, "bin/vil compare --models " DATA "vil_p4s4.pth --data %s --img-size 16,x 2>/dev/null", dir);
    T_CHECK(t_run(cmd, NULL, 0) == 2, "a bad --img-size list: exit 2");
}

/* top-1 (%) of the float64 reference logits on the images of classes 0..n-1 of make_data */
static double ref_top1_first(const char *name, int n) {
    char f[256];
    snprintf(f, sizeof f, DATA "%s.ema.f64", name);
    size_t len;
    double *lg = (double *)vil_read_file(f, &len);
    if (!lg || len != 15 * sizeof(double)) {
        free(lg);
        return -1;
    }
    int right = 0;
    for (int c = 0; c < n; c++) {
        const double *l = lg + 5 * src_img[c];
        int best = 0;
        for (int k = 1; k < 5; k++)
            if (l[k] > l[best]) best = k;
        right += best == labels[c];
    }
    free(lg);
    return 100.0 * right / n;
}

/* compare.csv's text fields are neutralized as spreadsheet formulas (a leading ' inside quotes,
 * OWASP's advice); compare.json keeps them as they are. --limit takes images spread over the
 * classes and says so; the top-1 is the float64 reference's on exactly those images. */
static void test_csv_and_limit(void) {
    char cmd[4096], out[16384], p[1200];
    snprintf(cmd, sizeof cmd,
             "bin/vil compare --device cpu --models " DATA "vil_p4s4.pth " DATA "vim_p4s4.pth --ema --label '=1+2' "
             "--label '@SUM(A1)' --data %s --crop-pct 1 --batch 4 --steps 1 --workers 1 --limit 3 --out %s/cmp_inj 2>&1",
             dir, dir);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "\n--limit 3: 3 of 5 images, 1 from each of the first 3 of 5 classes\n"),
            "compare --limit 3 says what it took (exit %d): %s", rc, out);
    size_t n;
    snprintf(p, sizeof p, "%s/cmp_inj/compare.csv", dir);
    char *csv = (char *)vil_read_file(p, &n);
    T_CHECK(csv && strstr(csv, "\n\"'=1+2\"," DATA "vil_p4s4.pth,") && strstr(csv, "\n\"'@SUM(A1)\",") &&
                !strstr(csv, "\n=") && !strstr(csv, "\n@"),
            "compare.csv: the labels as \"'=1+2\" and \"'@SUM(A1)\": %s", csv ? csv : "(none)");
    free(csv);
    snprintf(p, sizeof p, "%s/cmp_inj/compare.json", dir);
    char *js = (char *)vil_read_file(p, &n);
    cJSON *o = js ? cJSON_ParseWithLength(js, n) : NULL;
    cJSON *rows = cJSON_GetObjectItem(o, "rows");
    const char *want[2] = {"=1+2", "@SUM(A1)"}, *names[2] = {"vil_p4s4", "vim_p4s4"};
    for (int i = 0; i < 2; i++) {
        cJSON *r = cJSON_GetArrayItem(rows, i);
        const char *model = cJSON_GetStringValue(cJSON_GetObjectItem(r, "model"));
        double top1 = cJSON_GetNumberValue(cJSON_GetObjectItem(r, "top1"));
        double images = cJSON_GetNumberValue(cJSON_GetObjectItem(r, "images"));
        double ref = ref_top1_first(names[i], 3);
        T_CHECK(model && strcmp(model, want[i]) == 0, "compare.json: the label '%s' as it is (%s)", want[i], model ? model : "?");
        T_CHECK(images == 3 && ref >= 0 && fabs(top1 - ref) < 1e-9,
                "%s --limit 3: %g images, top-1 %.2f%% is float64 torch's on those 3 (%.2f%%)", names[i], images, top1, ref);
    }
    cJSON_Delete(o);
    free(js);
}

/* a bare state dict (tensors only, as exported from PyTorch) compares at every size: its training
 * size follows from its pos_embed grid and patch (issue 32), so its rows are the .pth's rows */
static void test_bare(void) {
    VilModel m;
    VilCheckpointMeta meta;
    char bare[600], cmd[4096], out[16384], p[1200];
    snprintf(bare, sizeof bare, "%s/vil_bare.safetensors", dir);
    int ok = vil_checkpoint_load(DATA "vil_p4s4.pth", &vil_backend_cpu, NULL, &m, &meta) == 0;
    T_CHECK(ok, "vil_p4s4.pth loads");
    if (!ok) return;
    T_CHECK(t_save_bare(&m, bare) == 0, "bare state dict written");
    int own = m.cfg.img_size;
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&m);
    snprintf(cmd, sizeof cmd,
             "bin/vil compare --device cpu --models " DATA "vil_p4s4.pth %s --data %s --crop-pct 1 "
             "--img-size %d,%d,%d --batch 4 --steps 1 --workers 1 --out %s/cmp_bare 2>&1",
             bare, dir, own, 2 * own, 3 * own, dir);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0, "compare with a bare state dict at %d, %d, %d px exits 0 (%d): %s", own, 2 * own, 3 * own, rc, out);
    snprintf(p, sizeof p, "%s/cmp_bare/compare.json", dir);
    size_t n;
    char *js = (char *)vil_read_file(p, &n);
    cJSON *o = js ? cJSON_ParseWithLength(js, n) : NULL;
    cJSON *rows = cJSON_GetObjectItem(o, "rows");
    T_CHECK(cJSON_GetArraySize(rows) == 6, "6 rows: 2 files x 3 resolutions");
    for (int i = 0; i < 3 && cJSON_GetArraySize(rows) == 6; i++) {
        cJSON *a = cJSON_GetArrayItem(rows, i), *b = cJSON_GetArrayItem(rows, 3 + i);
        double ra = cJSON_GetNumberValue(cJSON_GetObjectItem(a, "img_size"));
        double ta = cJSON_GetNumberValue(cJSON_GetObjectItem(a, "top1"));
        double tb = cJSON_GetNumberValue(cJSON_GetObjectItem(b, "top1"));
        double pa = cJSON_GetNumberValue(cJSON_GetObjectItem(a, "params"));
        double pb = cJSON_GetNumberValue(cJSON_GetObjectItem(b, "params"));
        T_CHECK(!cJSON_GetObjectItem(b, "error") && ra == (i + 1) * own && ta == tb && pa == pb,
                "%g px: the bare file's top-1 %.1f%% and params %g are the .pth's (%.1f%%, %g)", ra, tb, pb, ta, pa);
    }
    cJSON_Delete(o);
    free(js);
}

int main(void) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_macs();
    test_command();
    test_csv_and_limit();
    test_bare();
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return t_finish();
}
