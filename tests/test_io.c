/* test_io.c: folders and result files in and out (bin/vil). `vil classify` on a folder: the images
 * below it in path order, other files skipped and counted; its --csv parsed and checked against
 * its JSON Lines and against a softmax and top-k computed here from the logits. `vil eval
 * --predictions-file`: a row per evaluated image, the label of each, top-1 agreeing with the
 * accuracy eval prints and with classify's logits (the summary file and --limit:
 * test_results.c). `--model RUN`: the run folder's best, last or EMA file. Messages that name a
 * path once and the one constraint that broke. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "csv_testing.h"
#include "data_corpus.h"
#include "model_testing.h"
#include "testing.h"
#include "formats/checkpoint.h"
#include "vil/common.h"

static char *dir;

static char *read_text(const char *fmt, const char *a) {
    char p[2048];
    snprintf(p, sizeof p, fmt, a);
    size_t n;
    return (char *)vil_read_file(p, &n);
}

/* the first line of s, for checks of one message */
static void first_line(const char *s, char *line, size_t cap) {
    snprintf(line, cap, "%.*s", (int)strcspn(s, "\n"), s);
}

static void save_model(const char *path, int seed, long step) {
    VilModel m;
    t_tiny_model(&m);
    vil_model_init_weights(&m, seed);
    char *names[3] = {"cat", "dog, big", "say \"hi\""};
    if (vil_checkpoint_save(&m, path, step, names, 3, NULL) != 0) {
        fprintf(stderr, "cannot save %s\n", path);
        exit(1);
    }
    vil_model_free(&m);
}

/* The top-k order of a row of logits, computed here: larger first, ties to the lower index. */
static void ref_topk(const double *l, int C, int k, int *idx) {
    int used[64] = {0};
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int c = 0; c < C; c++)
            if (!used[c] && (best < 0 || l[c] > l[best])) best = c;
        used[best] = 1, idx[j] = best;
    }
}

/* classify on a folder tree: the images in path order, after the file given before it */
static void test_classify_folder(void) {
    char p[2048], cmd[8192], out[65536], line[1024];
    const char *sub[] = {"imgs", "imgs/b", "imgs/a", "imgs/a/sub", "imgs/.hid"};
    for (int i = 0; i < 5; i++) corpus_mkdir("%s/%s", dir, sub[i]);
    const char *pngs[] = {"imgs/b/2.png", "imgs/a/1.png", "imgs/a/sub/3.JPEG", "imgs/noext",
                          "imgs/.hidden.png", "imgs/.hid/4.png", "one.png"};
    for (int i = 0; i < 7; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, pngs[i]);
        corpus_write_png(p, 20, 18, i % 3, i);
    }
    snprintf(p, sizeof p, "%s/imgs/notes.txt", dir);
    corpus_write(p, "not an image\n", 13);
    snprintf(p, sizeof p, "%s/imgs/b/README", dir);
    corpus_write(p, "neither\n", 8);
    snprintf(p, sizeof p, "%s/imgs/a", dir);
    char l[2048];
    snprintf(l, sizeof l, "%s/imgs/link", dir);
    T_CHECK(symlink(p, l) == 0, "a link to a folder made");
    snprintf(cmd, sizeof cmd, "bin/vil classify --device cpu --model %1$s/m.safetensors --topk 2 --json "
             "--csv %1$s/out.csv %1$s/one.png %1$s/imgs 2>%1$s/err.txt", dir);
    int rc = t_run(cmd, out, sizeof out);
    char *err = read_text("%s/err.txt", dir);
    T_CHECK(rc == 0, "classify on a folder: exit 0 (%d): %s", rc, err ? err : "");
    T_CHECK(err && strstr(err, "/imgs: 4 images; 2 other files skipped\n"),
            "the folder's count said, the hidden entries and the link to a folder left out: %s", err ? err : "");
    const char *want[5] = {"one.png", "imgs/a/1.png", "imgs/a/sub/3.JPEG", "imgs/b/2.png", "imgs/noext"};
    /* JSON Lines on stdout */
    cJSON *js[8] = {0};
    int nj = 0;
    for (char *s = out; *s && nj < 8; nj++) {
        char *e = strchr(s, '\n');
        if (!e) break;
        *e = 0;
        js[nj] = cJSON_Parse(s);
        s = e + 1;
    }
    T_CHECK(nj == 5, "5 JSON lines (%d)", nj);
    char *csv_text = read_text("%s/out.csv", dir);
    Csv c;
    int parsed = csv_text && csv_parse(csv_text, &c) == 0;
    T_CHECK(parsed && c.rows == 6 && c.cols == 7, "CSV: a header and 5 rows of 7 columns (%d x %d)",
            parsed ? c.rows : -1, parsed ? c.cols : -1);
    T_CHECK(parsed && strncmp(csv_text, "filename,label_0,label_1,prob_0,prob_1,name_0,name_1\n", 53) == 0,
            "CSV header: timm's columns: %.60s", csv_text ? csv_text : "");
    for (int i = 0; parsed && i < 5 && i < nj && c.rows == 6; i++) {
        const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(js[i], "file"));
        snprintf(p, sizeof p, "%s/%s", dir, want[i]);
        T_CHECK(file && strcmp(file, p) == 0 && strcmp(csv_at(&c, i + 1, "filename"), p) == 0,
                "row %d is %s (json %s, csv %s)", i, want[i], file ? file : "?", csv_at(&c, i + 1, "filename"));
        cJSON *lg = cJSON_GetObjectItem(js[i], "logits"), *tk = cJSON_GetObjectItem(js[i], "topk");
        double l3[3], mx = -INFINITY, z = 0;
        for (int k = 0; k < 3; k++) l3[k] = cJSON_GetNumberValue(cJSON_GetArrayItem(lg, k));
        for (int k = 0; k < 3; k++) mx = fmax(mx, l3[k]);
        for (int k = 0; k < 3; k++) z += exp(l3[k] - mx);
        int idx[2];
        ref_topk(l3, 3, 2, idx);
        const char *names[3] = {"cat", "dog, big", "say \"hi\""};
        for (int j = 0; j < 2; j++) {
            char col[3][16];
            snprintf(col[0], 16, "label_%d", j), snprintf(col[1], 16, "prob_%d", j), snprintf(col[2], 16, "name_%d", j);
            int ci = atoi(csv_at(&c, i + 1, col[0]));
            double cp = atof(csv_at(&c, i + 1, col[1])), want_p = exp(l3[idx[j]] - mx) / z;
            cJSON *e = cJSON_GetArrayItem(tk, j);
            int ji = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(e, "index"));
            double jp = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "prob"));
            T_CHECK(ci == idx[j] && ji == idx[j] && fabs(cp - want_p) < 1e-7 && fabs(jp - want_p) < 1e-7 &&
                        strcmp(csv_at(&c, i + 1, col[2]), names[idx[j]]) == 0,
                    "row %d rank %d: class %d p %.6f here; csv %d %.6f '%s', json %d %.6f", i, j, idx[j], want_p,
                    ci, cp, csv_at(&c, i + 1, col[2]), ji, jp);
        }
    }
    if (parsed) csv_free(&c);
    for (int i = 0; i < nj; i++) cJSON_Delete(js[i]);
    free(csv_text);
    free(err);

    /* a bad image in a folder is named, the others still classified and written, exit 1 */
    snprintf(p, sizeof p, "%s/imgs/b/bad.png", dir);
    corpus_write(p, "not a png", 9);
    snprintf(cmd, sizeof cmd, "bin/vil classify --device cpu --model %1$s/m.safetensors --csv %1$s/out2.csv %1$s/imgs 2>&1", dir);
    rc = t_run(cmd, out, sizeof out);
    csv_text = read_text("%s/out2.csv", dir);
    parsed = csv_text && csv_parse(csv_text, &c) == 0;
    T_CHECK(rc == 1 && strstr(out, "cannot classify '") && strstr(out, "imgs/b/bad.png': unknown image format") &&
                strstr(out, "1 of 5 images could not be classified") && parsed && c.rows == 5,
            "a bad image: named, exit 1 (%d), the 4 others in the CSV: %s", rc, out);
    if (parsed) csv_free(&c);
    free(csv_text);
    unlink(p);
    /* a folder without images */
    corpus_mkdir("%s/%s", dir, "empty");
    snprintf(cmd, sizeof cmd, "bin/vil classify --device cpu --model %1$s/m.safetensors %1$s/empty 2>&1", dir);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "empty: 0 images") && strstr(out, "no images to classify"),
            "a folder without images: exit 1 (%d): %s", rc, out);
    /* a missing image named once, the reason readable */
    snprintf(cmd, sizeof cmd, "bin/vil classify --device cpu --model %1$s/m.safetensors %1$s/nope.png 2>&1", dir);
    rc = t_run(cmd, out, sizeof out);
    snprintf(p, sizeof p, "%s/nope.png", dir);
    T_CHECK(rc == 1 && t_count(out, p) == 1 && strstr(out, "': cannot open: No such file or directory"),
            "a missing image: its path once (%d), 'cannot open: reason': %s", t_count(out, p), out);
    (void)line;
}

/* ImageNet layout: val/c0..c2, two images each and a broken one in c1 */
static void make_data(void) {
    char p[2048];
    corpus_mkdir("%s/%s", dir, "d");
    corpus_mkdir("%s/%s", dir, "d/val");
    for (int k = 0; k < 3; k++) {
        snprintf(p, sizeof p, "%s/d/val/c%d", dir, k);
        mkdir(p, 0755);
        for (int i = 0; i < 2; i++) {
            snprintf(p, sizeof p, "%s/d/val/c%d/%d.png", dir, k, i);
            corpus_write_png(p, 20, 18, k, 3 * i + k);
        }
    }
    snprintf(p, sizeof p, "%s/d/val/c1/broken.png", dir);
    corpus_write(p, "not a png", 9);
}

/* the "top-1 X%" of eval's last result line */
static double eval_top1(const char *out) {
    const char *at = NULL;
    for (const char *p = out; (p = strstr(p, "\ntop-1 ")); p++) at = p;
    return at ? atof(at + 7) : -1;
}

static void test_results_file(void) {
    make_data();
    char cmd[8192], out[65536], line[1024];
    /* classify's logits of the readable images: the reference for the labels */
    snprintf(cmd, sizeof cmd, "bin/vil classify --device cpu --model %1$s/m.safetensors --json --crop-pct 0.875 "
             "%1$s/d/val/c0/0.png %1$s/d/val/c0/1.png %1$s/d/val/c1/0.png %1$s/d/val/c1/1.png "
             "%1$s/d/val/c2/0.png %1$s/d/val/c2/1.png 2>/dev/null", dir);
    int rc = t_run(cmd, out, sizeof out);
    int ref_top[6], nref = 0;
    for (char *s = out; rc == 0 && *s && nref < 6;) {
        char *e = strchr(s, '\n');
        if (!e) break;
        *e = 0;
        cJSON *o = cJSON_Parse(s);
        cJSON *lg = cJSON_GetObjectItem(o, "logits");
        double l3[3];
        for (int k = 0; k < 3; k++) l3[k] = cJSON_GetNumberValue(cJSON_GetArrayItem(lg, k));
        ref_topk(l3, 3, 1, &ref_top[nref++]);
        cJSON_Delete(o);
        s = e + 1;
    }
    T_CHECK(nref == 6, "classify gives the 6 readable images' logits (%d)", nref);
    for (int f = 0; f < 2; f++) {
        const char *ext = f ? "jsonl" : "csv";
        snprintf(cmd, sizeof cmd, "bin/vil eval --device cpu --model %1$s/m.safetensors --data %1$s/d --skip-bad "
                 "--batch 4 --workers 2 --crop-pct 0.875 --topk 2 --predictions-file %1$s/res.%2$s 2>/dev/null", dir, ext);
        rc = t_run(cmd, out, sizeof out);
        double top1 = eval_top1(out);
        char fmt[64];
        snprintf(fmt, sizeof fmt, "%%s/res.%s", ext);
        char *txt = read_text(fmt, dir);
        T_CHECK(rc == 0 && txt && strstr(out, "wrote ") && strstr(out, " (6 rows)"),
                "eval --predictions-file res.%s: exit 0 (%d), 6 rows said: %s", ext, rc, out);
        int rows = 0, right = 0, agree = 0, paths_ok = 0;
        if (txt && !f) {
            Csv c;
            if (csv_parse(txt, &c) == 0) {
                rows = c.rows - 1;
                T_CHECK(c.cols == 9 && csv_at(&c, 0, "target") && csv_at(&c, 0, "target_name"),
                        "CSV columns: filename, 2 labels, 2 probs, 2 names, target, target_name (%d)", c.cols);
                for (int i = 1; i < c.rows && csv_at(&c, 0, "target"); i++) {
                    int l0 = atoi(csv_at(&c, i, "label_0")), y = atoi(csv_at(&c, i, "target"));
                    right += l0 == y;
                    agree += i - 1 < nref && l0 == ref_top[i - 1];
                    char want[2048];
                    snprintf(want, sizeof want, "%s/d/val/c%d/%d.png", dir, (i - 1) / 2, (i - 1) % 2);
                    paths_ok += strcmp(csv_at(&c, i, "filename"), want) == 0 && y == (i - 1) / 2 &&
                                strcmp(csv_at(&c, i, "target_name"), y == 1 ? "dog, big" : y ? "say \"hi\"" : "cat") == 0;
                }
                csv_free(&c);
            }
        } else if (txt) {
            char *s = txt;
            for (int i = 0; *s; i++) {
                char *e = strchr(s, '\n');
                if (!e) break;
                *e = 0;
                cJSON *o = cJSON_Parse(s);
                int l0 = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "topk"), 0), "index"));
                int y = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "target"));
                const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(o, "file"));
                char want[2048];
                snprintf(want, sizeof want, "%s/d/val/c%d/%d.png", dir, i / 2, i % 2);
                rows++, right += l0 == y, agree += i < nref && l0 == ref_top[i];
                paths_ok += file && strcmp(file, want) == 0 && y == i / 2 &&
                            cJSON_GetArraySize(cJSON_GetObjectItem(o, "topk")) == 2;
                cJSON_Delete(o);
                s = e + 1;
            }
        }
        T_CHECK(rows == 6 && paths_ok == 6, "%s: a row per evaluated image (%d of 6), each its file and label (%d)",
                ext, rows, paths_ok);
        T_CHECK(rows == 6 && fabs(100.0 * right / rows - top1) < 0.006,
                "%s: top-1 from the rows %.2f%% is eval's %.2f%%", ext, rows ? 100.0 * right / rows : -1, top1);
        T_CHECK(agree == 6, "%s: each row's first class is the largest of classify's logits (%d of 6)", ext, agree);
        free(txt);
    }
    /* --limit: the rows of the images evaluated */
    snprintf(cmd, sizeof cmd, "bin/vil eval --device cpu --model %1$s/m.safetensors --data %1$s/d --skip-bad "
             "--batch 2 --limit 3 --predictions-file %1$s/lim.jsonl 2>/dev/null", dir);
    rc = t_run(cmd, out, sizeof out);
    char *txt = read_text("%s/lim.jsonl", dir);
    T_CHECK(rc == 0 && txt && t_count(txt, "\n") == 3, "--limit 3: 3 rows (%d)", txt ? t_count(txt, "\n") : -1);
    free(txt);
    /* another extension: usage, exit 2, nothing run */
    snprintf(cmd, sizeof cmd, "bin/vil eval --device cpu --model %1$s/m.safetensors --data %1$s/d "
             "--predictions-file %1$s/res.txt 2>&1", dir);
    rc = t_run(cmd, out, sizeof out);
    first_line(out, line, sizeof line);
    T_CHECK(rc == 2 && strstr(line, "--predictions-file takes a name ending in .csv or .jsonl"),
            "--predictions-file res.txt: exit 2 (%d): %s", rc, line);
}

/* --model RUN: best, else last; ema with --ema; what a folder lacks said */
static void test_model_run(void) {
    char p[2048], cmd[8192], out[65536];
    corpus_mkdir("%s/%s", dir, "run");
    snprintf(p, sizeof p, "%s/run/best.safetensors", dir);
    save_model(p, 11, 10);
    snprintf(p, sizeof p, "%s/run/last.safetensors", dir);
    save_model(p, 12, 20);
    snprintf(p, sizeof p, "%s/run/ema.safetensors", dir);
    save_model(p, 13, 30);
    struct {
        const char *args;
        int rc;
        const char *says[2];
    } cases[] = {
        {"info --model %1$s/run", 0, {"step:        10\n", "run: best.safetensors (the weights of its best evaluation)"}},
        {"info --model %1$s/run/ --ema", 0, {"step:        30\n", "ema.safetensors (the EMA of its last save)"}},
        {"eval --device cpu --model %1$s/run --data %1$s/d --skip-bad", 0, {"eval: %1$s/run/best.safetensors (", NULL}},
        {"eval --device cpu --model %1$s/run --ema --data %1$s/d --skip-bad", 0, {"eval: %1$s/run/ema.safetensors (", NULL}},
        {"classify --device cpu --model %1$s/run %1$s/one.png", 0, {"best.safetensors", NULL}},
        {"states --device cpu --model %1$s/run --data %1$s/d --limit 2 --batch 2 --workers 1 --out %1$s/st", 0,
         {"states: %1$s/run/best.safetensors (", NULL}},
        {"compare --device cpu --models %1$s/run --ema --data %1$s/d --skip-bad --steps 1 --workers 1 --out %1$s/cmp_run", 0,
         {"\nrun (EMA) ", NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[2048], s0[2048] = "", s1[2048] = "";
        snprintf(args, sizeof args, cases[i].args, dir);
        if (cases[i].says[0]) snprintf(s0, sizeof s0, cases[i].says[0], dir);
        if (cases[i].says[1]) snprintf(s1, sizeof s1, cases[i].says[1], dir);
        snprintf(cmd, sizeof cmd, "bin/vil %s 2>&1", args);
        int rc = t_run(cmd, out, sizeof out);
        T_CHECK(rc == cases[i].rc && strstr(out, s0) && strstr(out, s1), "vil %s: exit %d (want %d), says '%s' '%s': %.600s",
                args, rc, cases[i].rc, s0, s1, out);
    }
    /* the run folder's file gives what the file itself gives */
    char a[65536];
    snprintf(cmd, sizeof cmd, "bin/vil classify --device cpu --model %1$s/run --json %1$s/one.png 2>/dev/null", dir);
    int ra = t_run(cmd, a, sizeof a);
    snprintf(cmd, sizeof cmd, "bin/vil classify --device cpu --model %1$s/run/best.safetensors --json %1$s/one.png 2>/dev/null", dir);
    int rb = t_run(cmd, out, sizeof out);
    T_CHECK(ra == 0 && rb == 0 && strcmp(a, out) == 0, "classify --model RUN is classify --model RUN/best.safetensors");
    /* no best (no evaluation yet): the last save, said so */
    snprintf(p, sizeof p, "%s/run/best.safetensors", dir);
    unlink(p);
    snprintf(cmd, sizeof cmd, "bin/vil info --model %s/run 2>&1", dir);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "step:        20\n") && strstr(out, "last.safetensors (its last save: no best.safetensors"),
            "no best.safetensors: last.safetensors (%d): %s", rc, out);
    /* neither: a clear error naming the folder once; --ema without an EMA file */
    snprintf(p, sizeof p, "%s/run/last.safetensors", dir);
    unlink(p);
    snprintf(cmd, sizeof cmd, "bin/vil eval --device cpu --model %1$s/run --data %1$s/d 2>&1", dir);
    rc = t_run(cmd, out, sizeof out);
    snprintf(p, sizeof p, "%s/run", dir);
    T_CHECK(rc == 1 && t_count(out, p) == 1 && strstr(out, "is a folder without best.safetensors or last.safetensors"),
            "a folder without checkpoints: exit 1 (%d), named once: %s", rc, out);
    snprintf(p, sizeof p, "%s/run/ema.safetensors", dir);
    unlink(p);
    snprintf(cmd, sizeof cmd, "bin/vil classify --device cpu --model %1$s/run --ema %1$s/one.png 2>&1", dir);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "holds no ema.safetensors"), "--ema without ema.safetensors: exit 1 (%d): %s", rc, out);
}

/* a usage error says the constraint that broke, not the list of all of them */
static void test_messages(void) {
    struct {
        const char *args, *line;
    } cases[] = {
        {"classify --model %1$s/m.safetensors --topk 0 x.png", "vil classify: --topk 0 is out of range: it takes 1..1000000"},
        {"classify --model %1$s/m.safetensors --device gpu x.png", "vil classify: --device takes cpu, cuda or auto (got 'gpu')"},
        {"classify --model %1$s/m.safetensors --img-size -1 x.png", "vil classify: --img-size -1 is out of range: it takes 0..8192"},
        {"classify --model %1$s/m.safetensors --crop-pct 2 x.png", "vil classify: --crop-pct takes 0 (the checkpoint's) or 0.001..1, got 2"},
        {"eval --model %1$s/m.safetensors --data %1$s/d --batch 0", "vil eval: --batch 0 is out of range: it takes 1..65536"},
        {"eval --model %1$s/m.safetensors --data %1$s/d --workers 300", "vil eval: --workers 300 is out of range: it takes 1..256"},
        {"eval --model %1$s/m.safetensors --data %1$s/d --limit -1", "vil eval: --limit -1 is out of range: it takes 0..2147483647"},
        {"eval --model %1$s/m.safetensors --data %1$s/d --device gpu", "vil eval: --device takes cpu, cuda or auto (got 'gpu')"},
        {"compare --models %1$s/m.safetensors --data %1$s/d --batch 0", "vil compare: --batch 0 is out of range: it takes 1..65536"},
        {"compare --models %1$s/m.safetensors --data %1$s/d --steps -1", "vil compare: --steps -1 is out of range: it takes 0..1000000"},
        {"states --model %1$s/m.safetensors --data %1$s/d --crop-pct 0.0001", "vil states: --crop-pct takes 0 (the checkpoint's) or 0.001..1, got 0.0001"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[2048], cmd[4096], out[16384], line[1024];
        snprintf(args, sizeof args, cases[i].args, dir);
        snprintf(cmd, sizeof cmd, "bin/vil %s 2>&1", args);
        int rc = t_run(cmd, out, sizeof out);
        first_line(out, line, sizeof line);
        T_CHECK(rc == 2 && strcmp(line, cases[i].line) == 0, "vil %s: exit %d (want 2), first line '%s' (want '%s')",
                args, rc, line, cases[i].line);
    }
    /* the help shows placeholders that say what goes there */
    char out[16384];
    int rc = t_run("bin/vil compare --help", out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "  --models CKPT|RUN ") && strstr(out, "  --label A,B,... ") && !strstr(out, "K=V"),
            "compare --help: --models CKPT|RUN, --label A,B,..., no K=V");
    rc = t_run("bin/vil plot --help", out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "  --label NAME ") && strstr(out, "  --agree PCT ") && !strstr(out, "K=V"),
            "plot --help: --label NAME, --agree PCT, no K=V");
    rc = t_run("bin/vil eval --help", out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "  --results-file F.csv|F.json ") && strstr(out, "  --predictions-file F.csv|F.jsonl ") &&
                strstr(out, "  --model CKPT|RUN "),
            "eval --help: --results-file F.csv|F.json, --predictions-file F.csv|F.jsonl, --model CKPT|RUN");
}

int main(void) {
    dir = corpus_mkdtemp("io");
    char p[2048];
    snprintf(p, sizeof p, "%s/m.safetensors", dir);
    save_model(p, 1, 0);
    test_classify_folder();
    test_results_file();
    test_model_run();
    test_messages();
    corpus_rmtree(dir);
    return t_finish();
}
