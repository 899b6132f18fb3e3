/* test_results.c: what `vil eval` writes and which images its --limit takes (issue 45).
 * - vil_csv_field against the rule written out here (RFC 4180 quoting; a field that starts with
 *   =, +, -, @, tab or CR gets a single quote inside its quotes), then the CSVs of `vil classify
 *   --csv`, `vil eval --predictions-file` and the summary, read back with a CSV reader of the
 *   tests, on files, folders and class names made to look like formulas; their JSON forms keep
 *   the text as it is.
 * - `vil eval --results-file`: timm validate.py's summary (CSV and JSON), its fields against the
 *   numbers eval prints and against top-1, top-5 and the mean cross-entropy computed here from
 *   `vil classify --json`'s logits of the same images.
 * - --limit of eval, compare and states on classes stored in blocks: N images spread over the
 *   classes (each class's first ones), said in one line, the same on every run, and giving what
 *   a folder holding exactly those images gives without --limit. */
#include <cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "csv_testing.h"
#include "data_corpus.h"
#include "model_testing.h"
#include "testing.h"
#include "eval/results.h"
#include "formats/checkpoint.h"
#include "vil/common.h"

static char *dir;
static char bin[PATH_MAX]; /* bin/vil (or $VIL_BIN) as an absolute path: some commands run in dir */

/* the blocked dataset: class k holds SIZES[k] images k/0.png .. in folder order */
#define NC 7
static const int SIZES[NC] = {5, 3, 4, 1, 6, 2, 3};

static char *read_text(const char *fmt, const char *a) {
    char p[4096];
    snprintf(p, sizeof p, fmt, a);
    size_t n;
    return (char *)vil_read_file(p, &n);
}

static cJSON *read_json(const char *fmt, const char *a) {
    char *s = read_text(fmt, a);
    cJSON *o = s ? cJSON_Parse(s) : NULL;
    free(s);
    return o;
}

/* A tiny ViL of `classes` classes with a unit-scale head (logits far from uniform, so the loss
 * says something), names (may be NULL) in its metadata. */
static void save_model(const char *path, int classes, char **names) {
    VilConfig c;
    vil_config_default(&c);
    c.img_size = 16, c.patch_size = 4, c.stride = 4, c.embed_dim = 8, c.depth = 2, c.d_state = 4,
    c.num_classes = classes;
    vil_config_finalize(&c);
    VilModel m;
    vil_model_init(&m, &c, &vil_backend_cpu);
    vil_model_init_weights(&m, 3);
    VilRng rng;
    vil_rng_seed(&rng, 7);
    float *p = vil_malloc(m.buf_len * sizeof(float));
    t_perturbed_params(&m, &rng, p);
    vil_model_set_params(&m, p);
    free(p);
    if (vil_checkpoint_save(&m, path, 0, names, names ? classes : 0, NULL) != 0) {
        fprintf(stderr, "cannot save %s\n", path);
        exit(1);
    }
    vil_model_free(&m);
}

/* root/val/c<k>/<i>.png for the blocked dataset, the images i < take[k] of each class (take NULL:
 * all); image (k, i) is the same picture wherever it is written */
static void make_blocks(const char *root, const int *take) {
    char p[4096];
    corpus_mkdir("%s/%s", dir, root);
    corpus_mkdir("%s/%s/val", dir, root);
    for (int k = 0; k < NC; k++) {
        snprintf(p, sizeof p, "%s/%s/val/c%d", dir, root, k);
        mkdir(p, 0755);
        for (int i = 0; i < (take ? take[k] : SIZES[k]); i++) {
            snprintf(p, sizeof p, "%s/%s/val/c%d/%d.png", dir, root, k, i);
            corpus_write_png(p, 20 + i, 18 + k, k, 5 * i + k);
        }
    }
}

/* the number after `key` in s (the last occurrence), or NAN */
static double num_after(const char *s, const char *key) {
    const char *at = NULL;
    for (const char *p = s; (p = strstr(p, key)); p++) at = p;
    return at ? atof(at + strlen(key)) : NAN;
}

/* ---- vil_csv_field: the rule, case by case ---- */
static void test_csv_field(void) {
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"plain.png", "plain.png"},
        {"", ""},
        {"a,b.png", "\"a,b.png\""},
        {"say \"hi\"", "\"say \"\"hi\"\"\""},
        {"two\nlines", "\"two\nlines\""},
        {"=cmd.png", "\"'=cmd.png\""},
        {"+a.png", "\"'+a.png\""},
        {"-1.png", "\"'-1.png\""},
        {"@x.png", "\"'@x.png\""},
        {"\tx.png", "\"'\tx.png\""},
        {"\rx.png", "\"'\rx.png\""},
        {"=HYPERLINK(\"http://x\",\"y\")", "\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\""},
        {"a=b+c-d@e", "a=b+c-d@e"}, /* only the first character makes a formula */
        {"'=quoted", "'=quoted"},
        {"/abs/=x.png", "/abs/=x.png"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = vil_csv_field(cases[i].in);
        T_CHECK(strcmp(got, cases[i].want) == 0, "vil_csv_field(%s) = [%s], want [%s]", cases[i].in, got, cases[i].want);
        free(got);
    }
    char *n = vil_csv_field(NULL);
    T_CHECK(strcmp(n, "") == 0, "vil_csv_field(NULL) is an empty field");
    free(n);
}

/* ---- classify --csv and eval --predictions-file on names that look like formulas ---- */
static const char *const INJ_FILES[] = {"=cmd.png", "-1.png", "@x.png", "+a.png", "plain.png"};
#define N_INJ 5
/* class folders of the formula dataset, in their sorted (class) order, and the two files of
 * class k (folder order): the even classes "-1.png", "=cmd.png", the odd "+a.png", "@x.png" */
static const char *const INJ_CLASSES[] = {"+c", "-c", "=c", "@c"};
static const char *inj_file(int k, int i) { return INJ_FILES[k % 2 ? 3 - i : 1 - i]; }

/* the field as a spreadsheet-safe reader shows it: the text, a ' before a formula's first char */
static void shown_as(const char *text, char *out, size_t cap) {
    int w = snprintf(out, cap, "%s%s", text[0] && strchr("=+-@\t\r", text[0]) ? "'" : "", text);
    if (w < 0 || (size_t)w >= cap) out[0] = 0; /* too long: matches nothing */
}

static void test_classify_csv(void) {
    char p[4096], cmd[16384], out[65536];
    corpus_mkdir("%s/%s", dir, "inj");
    for (int i = 0; i < N_INJ; i++) {
        snprintf(p, sizeof p, "%s/inj/%s", dir, INJ_FILES[i]);
        corpus_write_png(p, 20, 18, i % 4, i);
    }
    char *names[4] = {"=HYPERLINK(\"http://x\")", "-neg", "cat", "@at"};
    snprintf(p, sizeof p, "%s/m4n.safetensors", dir);
    save_model(p, 4, names);
    /* run from the folder, so each file's field starts with the name's first character */
    snprintf(cmd, sizeof cmd, "cd '%s/inj' && '%s' classify --device cpu --model ../m4n.safetensors --topk 4 --json "
             "--csv out.csv -- =cmd.png -1.png @x.png +a.png plain.png 2>err.txt", dir, bin);
    int rc = t_run(cmd, out, sizeof out);
    char *csv = read_text("%s/inj/out.csv", dir);
    Csv c;
    int parsed = csv && csv_parse(csv, &c) == 0;
    T_CHECK(rc == 0 && parsed && c.rows == 1 + N_INJ, "classify --csv on 5 files: exit %d, %d rows", rc, parsed ? c.rows : -1);
    for (int i = 0; parsed && c.rows == 1 + N_INJ && i < N_INJ; i++) {
        char want[256];
        shown_as(INJ_FILES[i], want, sizeof want);
        const char *f = csv_at(&c, i + 1, "filename");
        T_CHECK(f && strcmp(f, want) == 0, "classify CSV row %d: filename '%s' (want '%s')", i, f ? f : "?", want);
        for (int j = 0; j < 4; j++) {
            char col[16], lab[16];
            snprintf(col, sizeof col, "name_%d", j);
            snprintf(lab, sizeof lab, "label_%d", j);
            const char *nm = csv_at(&c, i + 1, col);
            int k = atoi(csv_at(&c, i + 1, lab));
            shown_as(names[k], want, sizeof want);
            T_CHECK(nm && strcmp(nm, want) == 0, "classify CSV row %d rank %d: name '%s' (want '%s')", i, j, nm ? nm : "?", want);
        }
    }
    if (parsed) csv_free(&c);
    /* in the raw text no line starts with a formula character, and each such field is quoted */
    int bare = 0;
    for (const char *s = csv; s && *s; s = strchr(s, '\n') ? strchr(s, '\n') + 1 : "")
        bare += *s && strchr("=+-@\t\r", *s) != NULL;
    T_CHECK(csv && !bare && strstr(csv, "\n\"'=cmd.png\",") && strstr(csv, "\n\"'-1.png\",") && strstr(csv, "\"'@at\""),
            "classify CSV: \"'=cmd.png\", \"'-1.png\", \"'@at\" as they are written");
    free(csv);
    /* the JSON on stdout keeps the names as they are */
    int ok = 0, nl = 0;
    for (char *s = out; *s && nl < N_INJ; nl++) {
        char *e = strchr(s, '\n');
        if (!e) break;
        *e = 0;
        cJSON *o = cJSON_Parse(s);
        const char *f = cJSON_GetStringValue(cJSON_GetObjectItem(o, "file"));
        cJSON *t0 = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "topk"), 0);
        const char *nm = cJSON_GetStringValue(cJSON_GetObjectItem(t0, "name"));
        int k = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(t0, "index"));
        ok += f && strcmp(f, INJ_FILES[nl]) == 0 && nm && k >= 0 && k < 4 && strcmp(nm, names[k]) == 0;
        cJSON_Delete(o);
        s = e + 1;
    }
    T_CHECK(ok == N_INJ, "classify --json: file and class names as they are (%d of %d)", ok, N_INJ);
}

static void test_eval_csv(void) {
    char p[4096], cmd[16384], out[65536];
    /* "=d": every path of the dataset starts with '='; classes named like formulas */
    corpus_mkdir("%s/%s", dir, "=d");
    corpus_mkdir("%s/%s", dir, "=d/val");
    for (int k = 0; k < 4; k++) {
        snprintf(p, sizeof p, "%s/=d/val/%s", dir, INJ_CLASSES[k]);
        mkdir(p, 0755);
        for (int i = 0; i < 2; i++) {
            snprintf(p, sizeof p, "%s/=d/val/%s/%s", dir, INJ_CLASSES[k], inj_file(k, i));
            corpus_write_png(p, 20, 18, k, 2 * k + i);
        }
    }
    snprintf(p, sizeof p, "%s/=m4.safetensors", dir);
    save_model(p, 4, NULL); /* no names: the folders' */
    for (int f = 0; f < 2; f++) {
        const char *ext = f ? "jsonl" : "csv";
        snprintf(cmd, sizeof cmd, "cd '%s' && '%s' eval --device cpu --model =m4.safetensors --data =d --batch 3 "
                 "--workers 1 --predictions-file p.%s --results-file s.%s 2>&1", dir, bin, ext, f ? "json" : "csv");
        int rc = t_run(cmd, out, sizeof out);
        char fmt[64];
        snprintf(fmt, sizeof fmt, "%%s/p.%s", ext);
        char *txt = read_text(fmt, dir);
        T_CHECK(rc == 0 && txt, "eval --predictions-file p.%s on =d: exit %d: %s", ext, rc, out);
        int good = 0, rows = 0;
        if (txt && !f) {
            Csv c;
            if (csv_parse(txt, &c) == 0) {
                for (int i = 1; i < c.rows; i++, rows++) {
                    int k = (i - 1) / 2;
                    char path[256], want_f[256], want_t[64];
                    snprintf(path, sizeof path, "=d/val/%s/%s", INJ_CLASSES[k], inj_file(k, (i - 1) % 2));
                    shown_as(path, want_f, sizeof want_f);
                    shown_as(INJ_CLASSES[k], want_t, sizeof want_t);
                    good += strcmp(csv_at(&c, i, "filename"), want_f) == 0 && strcmp(csv_at(&c, i, "target_name"), want_t) == 0;
                }
                csv_free(&c);
            }
            T_CHECK(!strstr(txt, "\n=") && !strstr(txt, ",=") && !strstr(txt, ",+") && !strstr(txt, ",-") && !strstr(txt, ",@"),
                    "eval CSV: no field starts with a formula character");
        } else if (txt) {
            char *s = txt;
            for (int i = 0; *s; i++, rows++) {
                char *e = strchr(s, '\n');
                if (!e) break;
                *e = 0;
                cJSON *o = cJSON_Parse(s);
                int k = i / 2;
                char path[256];
                snprintf(path, sizeof path, "=d/val/%s/%s", INJ_CLASSES[k], inj_file(k, i % 2));
                const char *file = cJSON_GetStringValue(cJSON_GetObjectItem(o, "file"));
                const char *tn = cJSON_GetStringValue(cJSON_GetObjectItem(o, "target_name"));
                good += file && strcmp(file, path) == 0 && tn && strcmp(tn, INJ_CLASSES[k]) == 0;
                cJSON_Delete(o);
                s = e + 1;
            }
        }
        T_CHECK(rows == 8 && good == 8, "eval %s: 8 rows, files and class names %s (%d of 8)", ext,
                f ? "as they are" : "with a ' before the formula", good);
        free(txt);
    }
    /* the summary's model field: neutralized in the CSV, as it is in the JSON */
    char *s = read_text("%s/s.csv", dir);
    Csv c;
    int parsed = s && csv_parse(s, &c) == 0;
    T_CHECK(parsed && c.rows == 2 && strcmp(csv_at(&c, 1, "model"), "'=m4.safetensors") == 0,
            "summary CSV: model '=m4.safetensors shown as '%s'", parsed ? csv_at(&c, 1, "model") : "?");
    if (parsed) csv_free(&c);
    free(s);
    cJSON *o = read_json("%s/s.json", dir);
    const char *mj = cJSON_GetStringValue(cJSON_GetObjectItem(o, "model"));
    T_CHECK(mj && strcmp(mj, "=m4.safetensors") == 0, "summary JSON: model as it is (%s)", mj ? mj : "?");
    cJSON_Delete(o);
}

/* ---- the summary file and the loss ---- */
static const char *const SUM_KEYS[] = {"model", "top1", "top1_err", "top5", "top5_err", "param_count",
                                       "img_size", "crop_pct", "interpolation", "loss", "count"};
#define N_SUM 11

static void test_summary(void) {
    char p[4096], cmd[16384], out[65536];
    make_blocks("blk", NULL);
    snprintf(p, sizeof p, "%s/m7.safetensors", dir);
    save_model(p, NC, NULL);
    int total = 0;
    for (int k = 0; k < NC; k++) total += SIZES[k];
    /* the reference: classify's logits of every image, the loss and top-k computed here */
    size_t k0 = (size_t)snprintf(cmd, sizeof cmd, "'%s' classify --device cpu --model %s/m7.safetensors --json "
                                 "--crop-pct 0.875 --topk 1", bin, dir);
    for (int k = 0; k < NC; k++)
        for (int i = 0; i < SIZES[k]; i++)
            k0 += (size_t)snprintf(cmd + k0, sizeof cmd - k0, " %s/blk/val/c%d/%d.png", dir, k, i);
    snprintf(cmd + k0, sizeof cmd - k0, " 2>/dev/null");
    int rc = t_run(cmd, out, sizeof out);
    double loss = 0;
    int n = 0, top1 = 0, top5 = 0;
    for (char *s = out; rc == 0 && *s; n++) {
        char *e = strchr(s, '\n');
        if (!e) break;
        *e = 0;
        cJSON *o = cJSON_Parse(s);
        cJSON *lg = cJSON_GetObjectItem(o, "logits");
        int y = 0;
        for (int k = 0, m = n; k < NC; m -= SIZES[k++])
            if (m < SIZES[k]) {
                y = k;
                break;
            }
        double l[NC], mx = -INFINITY, z = 0;
        for (int k = 0; k < NC; k++) l[k] = cJSON_GetNumberValue(cJSON_GetArrayItem(lg, k)), mx = fmax(mx, l[k]);
        for (int k = 0; k < NC; k++) z += exp(l[k] - mx);
        loss += mx + log(z) - l[y];
        int ahead = 0;
        for (int k = 0; k < NC; k++) ahead += l[k] > l[y] || (l[k] == l[y] && k < y);
        top1 += ahead < 1, top5 += ahead < 5;
        cJSON_Delete(o);
        s = e + 1;
    }
    T_CHECK(n == total, "classify gives the %d images' logits (%d)", total, n);
    loss /= n > 0 ? n : 1;
    double rtop1 = 100.0 * top1 / total, rtop5 = 100.0 * top5 / total;
    T_CHECK(fabs(loss - log(NC)) > 0.05, "the reference loss %.4f is not the uniform one, log 7 = %.4f: the check can fail",
            loss, log(NC));
    /* eval: both summary forms, the printed line */
    snprintf(cmd, sizeof cmd, "'%1$s' eval --device cpu --model %2$s/m7.safetensors --data %2$s/blk --batch 4 --workers 1 "
             "--crop-pct 0.875 --results-file %2$s/sum.csv 2>&1 && '%1$s' eval --device cpu --model %2$s/m7.safetensors "
             "--data %2$s/blk --batch 4 --workers 1 --crop-pct 0.875 --results-file %2$s/sum.json >/dev/null 2>&1",
             bin, dir);
    rc = t_run(cmd, out, sizeof out);
    double p1 = num_after(out, "\ntop-1 "), p5 = num_after(out, "%  top-5 "), pl = num_after(out, "%  loss ");
    T_CHECK(rc == 0 && isfinite(pl) && strstr(out, "wrote ") && strstr(out, "/sum.csv\n"),
            "eval prints top-1, top-5 and the loss, writes the summary (exit %d): %s", rc, out);
    T_CHECK(fabs(pl - loss) < 5e-5 + 1e-5, "printed loss %.4f is the mean cross-entropy of classify's logits %.6f", pl, loss);
    T_CHECK(fabs(p1 - rtop1) < 0.0051 && fabs(p5 - rtop5) < 0.0051, "printed top-1 %.2f / top-5 %.2f are the logits' %.4f / %.4f",
            p1, p5, rtop1, rtop5);
    /* the CSV: timm's columns, then loss and count */
    char *s = read_text("%s/sum.csv", dir);
    const char *header = "model,top1,top1_err,top5,top5_err,param_count,img_size,crop_pct,interpolation,loss,count\n";
    T_CHECK(s && strncmp(s, header, strlen(header)) == 0, "summary CSV header: %.120s", s ? s : "(none)");
    Csv c;
    int parsed = s && csv_parse(s, &c) == 0 && c.rows == 2;
    VilModel m;
    VilCheckpointMeta meta;
    snprintf(p, sizeof p, "%s/m7.safetensors", dir);
    size_t params = 0;
    if (vil_checkpoint_load(p, &vil_backend_cpu, NULL, &m, &meta) == 0) {
        params = m.param_count;
        vil_checkpoint_meta_free(&meta);
        vil_model_free(&m);
    }
    if (parsed) {
        double t1 = atof(csv_at(&c, 1, "top1")), e1 = atof(csv_at(&c, 1, "top1_err"));
        double t5 = atof(csv_at(&c, 1, "top5")), e5 = atof(csv_at(&c, 1, "top5_err"));
        double fl = atof(csv_at(&c, 1, "loss")), pc = atof(csv_at(&c, 1, "param_count"));
        T_CHECK(strcmp(csv_at(&c, 1, "model"), p) == 0, "summary model: the --model given (%s)", csv_at(&c, 1, "model"));
        T_CHECK(fabs(t1 - rtop1) < 5.1e-5 && fabs(t5 - rtop5) < 5.1e-5 && fabs(t1 - p1) <= 0.0051 && fabs(t5 - p5) <= 0.0051,
                "summary top1 %g, top5 %g: the logits' %.6f, %.6f and the printed %.2f, %.2f", t1, t5, rtop1, rtop5, p1, p5);
        T_CHECK(fabs(t1 + e1 - 100) < 1.1e-4 && fabs(t5 + e5 - 100) < 1.1e-4, "top1_err %g = 100 - top1, top5_err %g = 100 - top5", e1, e5);
        T_CHECK(fabs(fl - loss) < 1e-5 && fabs(fl - pl) <= 5.1e-5, "summary loss %g: the logits' %.6f, the printed %.4f", fl, loss, pl);
        T_CHECK(params > 0 && fabs(pc - round(params / 1e4) / 100) < 1e-9, "param_count %g: %zu parameters in millions, 2 decimals", pc, params);
        T_CHECK(atoi(csv_at(&c, 1, "img_size")) == 16 && atof(csv_at(&c, 1, "crop_pct")) == 0.875 &&
                    strcmp(csv_at(&c, 1, "interpolation"), "bicubic") == 0 && atoi(csv_at(&c, 1, "count")) == total,
                "img_size %s, crop_pct %s, interpolation %s, count %s (%d images)", csv_at(&c, 1, "img_size"),
                csv_at(&c, 1, "crop_pct"), csv_at(&c, 1, "interpolation"), csv_at(&c, 1, "count"), total);
    }
    /* the JSON: one object, the same keys in the same order and the same values */
    cJSON *o = read_json("%s/sum.json", dir);
    int same = 0, i = 0;
    for (cJSON *e = o ? o->child : NULL; e && parsed; e = e->next, i++) {
        const char *v = csv_at(&c, 1, SUM_KEYS[i < N_SUM ? i : 0]);
        same += i < N_SUM && strcmp(e->string, SUM_KEYS[i]) == 0 &&
                (cJSON_IsString(e) ? strcmp(e->valuestring, v) == 0 : fabs(e->valuedouble - atof(v)) < 1e-12);
    }
    T_CHECK(o && i == N_SUM && same == N_SUM, "summary JSON: the CSV's %d keys in order, the same values (%d of %d)", N_SUM,
            same, i);
    cJSON_Delete(o);
    if (parsed) csv_free(&c);
    free(s);
    /* other names: usage, exit 2; a .jsonl says where the per-image rows go */
    static const struct {
        const char *flag, *file, *says;
    } bad[] = {
        {"--results-file", "s.jsonl", "--results-file takes a name ending in .csv or .json"},
        {"--results-file", "s.txt", "--results-file takes a name ending in .csv or .json"},
        {"--predictions-file", "p.json", "--predictions-file takes a name ending in .csv or .jsonl"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        snprintf(cmd, sizeof cmd, "'%s' eval --device cpu --model %s/m7.safetensors --data %s/blk %s %s/%s 2>&1", bin, dir,
                 dir, bad[k].flag, dir, bad[k].file);
        rc = t_run(cmd, out, sizeof out);
        T_CHECK(rc == 2 && strstr(out, bad[k].says) && (k || strstr(out, "--predictions-file")),
                "%s %s: exit 2 (%d), says '%s': %.300s", bad[k].flag, bad[k].file, rc, bad[k].says, out);
    }
    /* an unreadable image without --skip-bad: exit 1 and no summary (it is not a result) */
    make_blocks("bad", (const int[NC]){1, 1, 1, 1, 1, 1, 1});
    snprintf(p, sizeof p, "%s/bad/val/c2/broken.png", dir);
    corpus_write(p, "not a png", 9);
    snprintf(cmd, sizeof cmd, "'%1$s' eval --device cpu --model %2$s/m7.safetensors --data %2$s/bad --workers 1 "
             "--results-file %2$s/bad.csv 2>&1", bin, dir);
    rc = t_run(cmd, out, sizeof out);
    snprintf(p, sizeof p, "%s/bad.csv", dir);
    struct stat st;
    int absent = stat(p, &st) != 0;
    snprintf(cmd, sizeof cmd, "'%1$s' eval --device cpu --model %2$s/m7.safetensors --data %2$s/bad --workers 1 "
             "--skip-bad --results-file %2$s/bad.csv 2>&1", bin, dir);
    int rc2 = t_run(cmd, out, sizeof out);
    s = read_text("%s/bad.csv", dir);
    parsed = s && csv_parse(s, &c) == 0 && c.rows == 2;
    T_CHECK(rc == 1 && absent && rc2 == 0 && parsed && atoi(csv_at(&c, 1, "count")) == 7,
            "an unreadable image: exit 1 and no summary; with --skip-bad exit 0 and count 7 (%d, %d)", rc, rc2);
    if (parsed) csv_free(&c);
    free(s);
}

/* ---- --limit: spread over the classes ---- */

/* the rows of a predictions CSV: *n rows (the header left out), their filename and target */
static int limit_rows(const char *path, char files[][256], int *targets, int cap) {
    size_t len;
    char *s = (char *)vil_read_file(path, &len);
    Csv c;
    int n = -1;
    if (s && csv_parse(s, &c) == 0) {
        n = 0;
        for (int i = 1; i < c.rows && n < cap; i++, n++) {
            const char *f = csv_at(&c, i, "filename"), *y = csv_at(&c, i, "target");
            snprintf(files[n], 256, "%s", f ? f : "");
            targets[n] = y ? atoi(y) : -1;
        }
        csv_free(&c);
    }
    free(s);
    return n;
}

/* csv with each line's first field left out (fields without commas or quotes), malloc'd */
static char *drop_first_field(const char *csv) {
    char *o = malloc(strlen(csv) + 1), *q = o;
    for (const char *s = csv; *s;) {
        size_t line = strcspn(s, "\n"), first = strcspn(s, ",\n");
        memcpy(q, s + first, line - first);
        q += line - first;
        s += line;
        if (*s) *q++ = *s++;
    }
    *q = 0;
    return o;
}

static void test_limit(void) {
    char cmd[16384], out[65536], p[4096];
    static const struct {
        int limit;
        int take[NC]; /* what each class gives, worked out by hand from SIZES */
        const char *line;
    } cases[] = {
        {14, {3, 2, 2, 1, 2, 2, 2}, "--limit 14: 14 of 24 images, 1 to 3 from each of 7 classes"},
        {7, {1, 1, 1, 1, 1, 1, 1}, "--limit 7: 7 of 24 images, 1 from each of 7 classes"},
        {4, {1, 1, 1, 1, 0, 0, 0}, "--limit 4: 4 of 24 images, 1 from each of the first 4 of 7 classes"},
        {22, {5, 3, 4, 1, 4, 2, 3}, "--limit 22: 22 of 24 images, 1 to 5 from each of 7 classes"},
        {100, {5, 3, 4, 1, 6, 2, 3}, "--limit 100: all 24 images"},
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        int L = cases[t].limit, want_n = 0;
        for (int k = 0; k < NC; k++) want_n += cases[t].take[k];
        char files[2][32][256];
        int targets[2][32], n[2];
        char text[2][65536];
        for (int run = 0; run < 2; run++) {
            snprintf(cmd, sizeof cmd, "'%1$s' eval --device cpu --model %2$s/m7.safetensors --data %2$s/blk --batch 4 "
                     "--workers 2 --limit %3$d --predictions-file %2$s/lim%4$d.csv --results-file %2$s/lims%4$d.csv 2>&1",
                     bin, dir, L, run);
            int rc = t_run(cmd, text[run], sizeof text[run]);
            snprintf(p, sizeof p, "%s/lim%d.csv", dir, run);
            n[run] = limit_rows(p, files[run], targets[run], 32);
            char line[256];
            snprintf(line, sizeof line, "\n%s\n", cases[t].line);
            T_CHECK(rc == 0 && strstr(text[run], line), "eval --limit %d (run %d) says '%s' (exit %d): %s", L, run,
                    cases[t].line, rc, text[run]);
        }
        /* each class's first take[k] images, in dataset order */
        int right = n[0] == want_n, at = 0;
        for (int k = 0; k < NC && right; k++)
            for (int i = 0; i < cases[t].take[k] && right; i++, at++) {
                char want[4096];
                snprintf(want, sizeof want, "%s/blk/val/c%d/%d.png", dir, k, i);
                right = strcmp(files[0][at], want) == 0 && targets[0][at] == k;
            }
        T_CHECK(right, "--limit %d: %d images (want %d), each class's first ones in dataset order", L, n[0], want_n);
        char *a = read_text("%s/lim0.csv", dir), *b = read_text("%s/lim1.csv", dir);
        char *sa = read_text("%s/lims0.csv", dir), *sb = read_text("%s/lims1.csv", dir);
        T_CHECK(a && b && sa && sb && strcmp(a, b) == 0 && strcmp(sa, sb) == 0 && n[1] == n[0],
                "--limit %d: the same images and results on a second run", L);
        /* the same as a folder of exactly those images, evaluated whole */
        char sub[64];
        snprintf(sub, sizeof sub, "sub%d", L);
        make_blocks(sub, cases[t].take);
        snprintf(cmd, sizeof cmd, "'%1$s' eval --device cpu --model %2$s/m7.safetensors --data %2$s/%3$s --batch 4 "
                 "--workers 2 --predictions-file %2$s/%3$s.csv --results-file %2$s/%3$s_s.csv 2>&1", bin, dir, sub);
        int rc = t_run(cmd, out, sizeof out);
        char fmt[128];
        snprintf(fmt, sizeof fmt, "%%s/%s_s.csv", sub);
        char *ss = read_text(fmt, dir);
        snprintf(fmt, sizeof fmt, "%%s/%s.csv", sub);
        char *ps = read_text(fmt, dir);
        /* the rows without their file names (the folders differ) */
        char *ra = a ? drop_first_field(a) : NULL, *rs = ps ? drop_first_field(ps) : NULL;
        int rows_same = ra && rs && strcmp(ra, rs) == 0 && t_count(ra, "\n") == want_n + 1;
        free(ra), free(rs);
        T_CHECK(rc == 0 && ss && sa && strcmp(ss, sa) == 0, "--limit %d: the summary is the one of a folder of those %d images",
                L, want_n);
        T_CHECK(rows_same, "--limit %d: each image's classes and probabilities are the folder's", L);
        free(a), free(b), free(sa), free(sb), free(ss), free(ps);
    }
    /* compare --limit: the same line, the same images: eval's top-1 on the folder of those images */
    snprintf(cmd, sizeof cmd, "'%1$s' compare --device cpu --models %2$s/m7.safetensors --data %2$s/blk --batch 4 "
             "--workers 1 --steps 1 --limit 14 --out %2$s/cmp 2>&1", bin, dir);
    int rc = t_run(cmd, out, sizeof out);
    cJSON *o = read_json("%s/cmp/compare.json", dir);
    cJSON *r0 = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "rows"), 0);
    double ctop1 = cJSON_GetNumberValue(cJSON_GetObjectItem(r0, "top1"));
    double cimg = cJSON_GetNumberValue(cJSON_GetObjectItem(r0, "images"));
    char *ss = read_text("%s/sub14_s.csv", dir);
    Csv c;
    double want = ss && csv_parse(ss, &c) == 0 ? atof(csv_at(&c, 1, "top1")) : -1;
    if (want >= 0) csv_free(&c);
    T_CHECK(rc == 0 && strstr(out, "\n--limit 14: 14 of 24 images, 1 to 3 from each of 7 classes\n") && cimg == 14 &&
                fabs(ctop1 - want) < 1e-4,
            "compare --limit 14: says what it took, 14 images, top-1 %.4f = the folder's %.4f (exit %d): %s", ctop1, want, rc, out);
    cJSON_Delete(o);
    free(ss);
    /* states --limit (its default 256 too): the states of exactly those images */
    const char *sl[2] = {"--limit 7", ""};
    const char *sd[2] = {"blk", "sub7"};
    char *csv[2];
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "'%1$s' states --device cpu --model %2$s/m7.safetensors --data %2$s/%3$s %4$s --batch 4 "
                 "--workers 1 --out %2$s/st%5$d 2>&1", bin, dir, sd[k], sl[k], k);
        rc = t_run(cmd, out, sizeof out);
        const char *say = k ? "\n--limit 256: all 7 images\n" : "\n--limit 7: 7 of 24 images, 1 from each of 7 classes\n";
        T_CHECK(rc == 0 && strstr(out, say), "states %s on %s: exit %d, says '%.40s': %s", sl[k], sd[k], rc, say + 1, out);
        snprintf(p, sizeof p, "%%s/st%d/states.csv", k);
        csv[k] = read_text(p, dir);
    }
    T_CHECK(csv[0] && csv[1] && strcmp(csv[0], csv[1]) == 0, "states --limit 7: states.csv is the folder of those 7 images'");
    free(csv[0]);
    free(csv[1]);
}

int main(void) {
    const char *env = getenv("VIL_BIN");
    if (!realpath(env && *env ? env : "bin/vil", bin)) {
        fprintf(stderr, "no bin/vil: build it first\n");
        return 1;
    }
    dir = corpus_mkdtemp("results");
    test_csv_field();
    test_classify_csv();
    test_eval_csv();
    test_summary();
    test_limit();
    corpus_rmtree(dir);
    free(dir);
    return t_finish();
}
