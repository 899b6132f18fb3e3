/* compare.c: `vil compare --models A B ... --data DIR`: checkpoints side by side (ViL against ViM,
 * a run against the published files) on the same data, device and kernels. Per model and
 * resolution: family, parameters, GFLOPs per image, top-1 / top-5, inference images/s and peak
 * memory; printed as a table and written as CSV, JSON and an SVG chart (accuracy and throughput
 * against resolution, one line per model). Other resolutions than a checkpoint's own move its
 * pos_embed as --pos says, as `vil eval --img-size` does. */
#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/commands.h"
#include "cli/model_arg.h"
#include "data/dataset.h"
#include "charts/chart.h"
#include "eval/eval.h"
#include "eval/results.h"
#include "cli/args.h"
#include "formats/checkpoint.h"
#include "vil/common.h"
#include "vil/limits.h"

#define MAX_MODELS 32
#define MAX_RES 16

typedef struct {
    const char *file;    /* as given: a checkpoint or a run folder */
    const char *path;    /* the checkpoint read (a run folder's best or EMA file) */
    int ema;             /* --ema applies: a .pth's model_ema (a run folder's is its path) */
    char label[96];
    char family[4];      /* "ViL" or "ViM" */
    char weights[16];    /* a .pth's state dict ("model", "model_ema"); "" for safetensors */
    int res;             /* image size evaluated */
    int ok;              /* measured; else why says what went wrong */
    char why[160];
    size_t params;
    double gflops;       /* multiply-adds per image / 1e9 (the papers' "FLOPs") */
    double top1, top5;   /* % */
    long images;
    double images_per_s; /* forward passes at the batch size, on the device */
    size_t peak_bytes;
    float crop_pct;      /* the evaluation crop used (the checkpoint's unless --crop-pct) */
    long bad;            /* images that could not be read (not counted) */
} Row;

/* r->file's last part (a run folder's name, a file's without its extension) */
static void base_name(const char *f, const char **b, int *len) {
    int n = (int)strlen(f);
    while (n > 1 && f[n - 1] == '/') n--;
    int s = n;
    while (s > 0 && f[s - 1] != '/') s--;
    *b = f + s, *len = n - s;
}

/* --label's names, else the file name without folders and extension (the whole path when two
 * models share it); " (EMA)" where --ema took a model's EMA */
static void make_labels(Row *rows, int nm, const char *const *names) {
    for (int i = 0; i < nm; i++) {
        Row *r = &rows[i];
        int ema = r->ema || (r->path != r->file && strstr(r->path, "/ema.") != NULL);
        if (names) {
            snprintf(r->label, sizeof r->label, "%.90s", names[i]);
            continue;
        }
        const char *b;
        int len;
        base_name(r->file, &b, &len);
        int dup = 0;
        for (int j = 0; j < nm; j++) {
            const char *c;
            int lc;
            base_name(rows[j].file, &c, &lc);
            dup |= strcmp(r->file, rows[j].file) != 0 && lc == len && strncmp(b, c, (size_t)len) == 0;
        }
        const char *name = dup ? r->file : b;
        int nl = dup ? (int)strlen(r->file) : len;
        int dot = nl - 1;
        while (dot > 0 && name[dot] != '.' && name[dot] != '/') dot--;
        if (dot > 0 && name[dot] == '.' && r->path == r->file) nl = dot;
        snprintf(r->label, sizeof r->label, "%.*s%s", nl > 80 ? 80 : nl, name, ema ? " (EMA)" : "");
    }
}

/* 1 for a PyTorch checkpoint (a zip archive): the one kind whose EMA --ema picks inside it */
static int is_pth(const char *path) {
    unsigned char head[4] = {0};
    return vil_read_head(path, head, 4) == 4 && memcmp(head, "PK\3\4", 4) == 0;
}

static void measure(Row *r, const VilBackend *be, VilDataset *ds, int batch, int workers,
                    float crop_pct, int skip_bad, int steps, VilPosMode pos) {
    VilModel m;
    VilCheckpointMeta meta;
    VilCheckpointOpts o = {.img_size = r->res, .ema = r->ema, .pos = pos};
    be->sync(be);
    if (be->peak_reset) be->peak_reset(be);
    if (vil_checkpoint_load(r->path, be, &o, &m, &meta) != 0) {
        if (r->res) snprintf(r->why, sizeof r->why, "does not load at %d px (see above)", r->res);
        else snprintf(r->why, sizeof r->why, "does not load (see above)");
        return;
    }
    const VilConfig *c = &m.cfg;
    r->res = c->img_size; /* the model's own when none was asked for */
    snprintf(r->family, sizeof r->family, "%s", vil_recurrences[c->rec].family);
    snprintf(r->weights, sizeof r->weights, "%s", meta.weights);
    r->params = m.param_count;
    r->gflops = vil_model_macs(c) / 1e9;
    char prefix[160];
    snprintf(prefix, sizeof prefix, "  %s @ %d: ", r->label, c->img_size);
    VilEvalSpec ev;
    vil_eval_spec_resolve(&ev, &meta, crop_pct, c->in_chans, NULL, 0);
    r->crop_pct = ev.crop_pct;
    VilEvalResult er;
    VilProgress lines = {.f = stdout, .mode = VIL_PROGRESS_PLAIN};
    if (vil_eval_dataset(&m, ds, &ev, batch, workers, NULL, &lines, prefix, NULL, &er) != 0) {
        snprintf(r->why, sizeof r->why, "evaluation failed (see above)");
    } else if (er.images == 0) {
        snprintf(r->why, sizeof r->why, "no images were evaluated");
    } else if (er.bad && !skip_bad) {
        snprintf(r->why, sizeof r->why, "%ld images could not be read (named above; --skip-bad leaves them out)", er.bad);
    } else if (vil_model_alloc_acts(&m, batch, 0) != 0) {
        snprintf(r->why, sizeof r->why, "no memory to time a batch of %d (see above)", batch);
    } else {
        r->bad = er.bad;
        r->top1 = 100.0 * er.top1 / er.images;
        r->top5 = 100.0 * er.top5 / er.images;
        r->images = er.images;
        /* the model's own speed at this batch: the loader and the host are out of it */
        void *in[3];
        vil_model_input_buffers(&m, in);
        be->zero(be, in[0], (size_t)batch * c->in_floats * sizeof(float));
        r->images_per_s = (double)batch * c->readouts / vil_time_forward(&m, 2, steps); /* a stream's rows: readouts images */
        r->peak_bytes = be->peak_bytes ? be->peak_bytes(be) : 0;
        r->ok = 1;
    }
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&m);
}

static void print_table(FILE *f, const Row *rows, int n, const char *device) {
    int w = 5;
    for (int i = 0; i < n; i++) w = (int)strlen(rows[i].label) > w ? (int)strlen(rows[i].label) : w;
    fprintf(f, "%-*s  %-6s %5s %11s %7s %7s %7s %10s %10s\n", w, "model", "family", "px", "params",
            "GFLOPs", "top-1", "top-5", "images/s", strcmp(device, "cpu") ? "peak MiB" : "peak RSS");
    for (int i = 0; i < n; i++) {
        const Row *r = &rows[i];
        if (!r->ok) {
            fprintf(f, "%-*s  %-6s %5d  %s\n", w, r->label, r->family[0] ? r->family : "-", r->res, r->why);
            continue;
        }
        fprintf(f, "%-*s  %-6s %5d %11zu %7.*f %7.2f %7.2f %10.1f %10.1f\n", w, r->label, r->family,
                r->res, r->params, r->gflops < 0.1 ? 4 : 2, r->gflops, r->top1, r->top5,
                r->images_per_s, r->peak_bytes / 1048576.0);
    }
    fprintf(f, "GFLOPs: multiply-adds per image (as the ViM, DeiT and Longhorn tables count them); "
               "images/s: forward passes on %s, data loading excluded\n", device);
}

/* every text field through vil_csv_field: quoted where needed, a formula neutralized */
static int write_csv(const char *path, const Row *rows, int n, const char *device) {
    size_t cap = 4096, k = 0;
    char *s = vil_malloc(cap);
    k += (size_t)snprintf(s + k, cap - k, "model,file,weights,family,img_size,crop_pct,params,gflops,"
                                          "top1,top5,images,images_per_s,peak_bytes,device,error\n");
    char *dev = vil_csv_field(device);
    for (int i = 0; i < n; i++) {
        const Row *r = &rows[i];
        char *t[5] = {vil_csv_field(r->label), vil_csv_field(r->path), vil_csv_field(r->weights),
                      vil_csv_field(r->family), vil_csv_field(r->ok ? "" : r->why)};
        size_t need = 1024 + strlen(dev); /* the numbers, the commas */
        for (int j = 0; j < 5; j++) need += strlen(t[j]);
        if (k + need > cap) {
            while (k + need > cap) cap *= 2;
            s = vil_realloc(s, cap);
        }
        if (r->ok)
            k += (size_t)snprintf(s + k, cap - k, "%s,%s,%s,%s,%d,%g,%zu,%.4f,%.4f,%.4f,%ld,%.2f,%zu,%s,\n",
                                  t[0], t[1], t[2], t[3], r->res, r->crop_pct, r->params, r->gflops, r->top1,
                                  r->top5, r->images, r->images_per_s, r->peak_bytes, dev);
        else
            k += (size_t)snprintf(s + k, cap - k, "%s,%s,,%s,%d,,,,,,,,,%s,%s\n", t[0], t[1], t[3], r->res,
                                  dev, t[4]);
        for (int j = 0; j < 5; j++) free(t[j]);
    }
    free(dev);
    int rc = vil_write_file_atomic(path, s, k);
    free(s);
    return rc;
}

static int write_json(const char *path, const Row *rows, int n, const char *device,
                      const char *data, const char *split, int batch, const char *pos) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "device", device);
    cJSON_AddStringToObject(o, "data", data);
    cJSON_AddStringToObject(o, "split", split);
    cJSON_AddNumberToObject(o, "batch", batch);
    cJSON_AddStringToObject(o, "pos", pos);
    cJSON_AddStringToObject(o, "gflops", "multiply-adds per image / 1e9");
    cJSON *a = cJSON_AddArrayToObject(o, "rows");
    for (int i = 0; i < n; i++) {
        const Row *r = &rows[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "model", r->label);
        cJSON_AddStringToObject(e, "file", r->path);
        cJSON_AddStringToObject(e, "weights", r->weights);
        cJSON_AddStringToObject(e, "family", r->family);
        cJSON_AddNumberToObject(e, "img_size", r->res);
        if (r->ok) {
            cJSON_AddNumberToObject(e, "crop_pct", r->crop_pct);
            cJSON_AddNumberToObject(e, "params", (double)r->params);
            cJSON_AddNumberToObject(e, "gflops", r->gflops);
            cJSON_AddNumberToObject(e, "top1", r->top1);
            cJSON_AddNumberToObject(e, "top5", r->top5);
            cJSON_AddNumberToObject(e, "images", (double)r->images);
            cJSON_AddNumberToObject(e, "unreadable", (double)r->bad);
            cJSON_AddNumberToObject(e, "images_per_s", r->images_per_s);
            cJSON_AddNumberToObject(e, "peak_bytes", (double)r->peak_bytes);
        } else {
            cJSON_AddStringToObject(e, "error", r->why);
        }
        cJSON_AddItemToArray(a, e);
    }
    char *s = cJSON_Print(o);
    int rc = vil_write_file_atomic(path, s, strlen(s));
    cJSON_free(s);
    cJSON_Delete(o);
    return rc;
}

/* top-1 and images/s against resolution, one line per model */
static int write_chart(const char *path, const Row *rows, int nm, int nr, int fixed_ticks,
                       const char *title) {
    VilChartSeries acc[MAX_MODELS], ips[MAX_MODELS];
    double x[MAX_MODELS][MAX_RES], y1[MAX_MODELS][MAX_RES], y2[MAX_MODELS][MAX_RES], ticks[MAX_RES];
    for (int i = 0; i < nm; i++) {
        for (int j = 0; j < nr; j++) {
            const Row *r = &rows[i * nr + j];
            x[i][j] = r->res;
            y1[i][j] = r->ok ? r->top1 : NAN;
            y2[i][j] = r->ok ? r->images_per_s : NAN;
        }
        acc[i] = (VilChartSeries){rows[i * nr].label, nr, x[i], y1[i], 0, -1, 0};
        ips[i] = (VilChartSeries){rows[i * nr].label, nr, x[i], y2[i], 0, -1, 0};
    }
    for (int j = 0; j < nr; j++) ticks[j] = rows[j].res;
    VilChartPanel p[2] = {
        {"Accuracy", "image size (px)", "top-1 (%)", 0, 0, 1, acc, nm, fixed_ticks ? ticks : NULL, fixed_ticks ? nr : 0, 0, 0, 0, 0},
        {"Throughput", "image size (px)", "images/s (log scale)", 0, 1, 1, ips, nm, fixed_ticks ? ticks : NULL, fixed_ticks ? nr : 0, 0, 0, 0, 0},
    };
    return vil_chart_write(path, title, p, 2, 2);
}

/* the flags' values: their defaults set by vil_cmd_compare, then filled by vil_args_parse */
typedef struct {
    const char *data, *split, *labels, *device, *sizes, *out, *pos;
    int batch, ema, workers, limit, steps, skip_bad, threads;
    float crop_pct;
    VilArgList models, names;
} Flags;
static Flags o;

static const VilArg ARGS[] = {
    {"--models", VIL_ARG_LIST, &o.models, "checkpoints (.safetensors or .pth) or run folders (their best.safetensors); the files after it count too", .meta = "CKPT|RUN", .required = 1},
    {"--label", VIL_ARG_LIST, &o.names, "legend names, one per model in their order: A,B,... or --label once per model (default: the file or folder name)", .meta = "A,B,..."},
    {"--data", VIL_ARG_STR, &o.data, VIL_DATA_HELP, .meta = "DIR", .required = 1},
    {"--split", VIL_ARG_STR, &o.split, "split to evaluate: val (test for IDX), train"},
    {"--labels", VIL_ARG_STR, &o.labels, "labels file for a flat folder (\"filename label\" lines)", .meta = "FILE"},
    {"--img-size", VIL_ARG_STR, &o.sizes, "resolutions, e.g. 224,384,512 (default: each model's own)", .meta = "S,S,..."},
    {"--pos", VIL_ARG_STR, &o.pos, VIL_POS_HELP, .meta = "interp|keep|center", .needs = "--img-size"},
    {"--batch", VIL_ARG_INT, &o.batch, "batch size of the evaluation and of the timed forward passes", 1, VIL_MAX_BATCH},
    {"--ema", VIL_ARG_FLAG, &o.ema, "the model_ema of every .pth training checkpoint, the ema.safetensors of every run folder (safetensors files are taken as they are)"},
    {"--crop-pct", VIL_ARG_FLOAT, &o.crop_pct, "resize the shorter side to size / crop_pct, then center crop (0: each checkpoint's, else 0.875)", .meta = "F"},
    {"--skip-bad", VIL_ARG_FLAG, &o.skip_bad, "leave out images that cannot be read (else such a row fails)"},
    {"--limit", VIL_ARG_INT, &o.limit, "evaluate N images spread over the classes: round robin in class order, each class's first ones (0: all)", 0, 2147483647},
    {"--steps", VIL_ARG_INT, &o.steps, "timed forward passes per row (0: 3 on cpu, 20 on cuda)", 0, 1000000},
    {"--device", VIL_ARG_STR, &o.device, "cpu, cuda or auto"},
    {"--workers", VIL_ARG_INT, &o.workers, "data loader threads", 1, 256},
    {"--threads", VIL_ARG_INT, &o.threads, VIL_THREADS_HELP},
    {"--out", VIL_ARG_STR, &o.out, "folder for compare.csv, compare.json and compare.svg", .meta = "DIR"},
};

const VilArgSpec vil_cmd_compare_spec = {
    "compare", "--models A.pth B.safetensors RUN ... --data DIR [--label A,B,...] [--img-size 224,384,512 [--pos keep]] [--batch B] [--ema] [--out DIR]",
    "Evaluates each model at each resolution on the same data and device and\n"
    "prints one table: family (ViL / ViM), parameters, GFLOPs per image, top-1,\n"
    "top-5, inference images/s and peak memory. Writes it as OUT/compare.csv and\n"
    "OUT/compare.json, and OUT/compare.svg charts accuracy and throughput against\n"
    "resolution. Resolutions other than a model's own interpolate its pos_embed\n"
    "(--pos keep or center: keep its trained grid).",
    ARGS, (int)(sizeof ARGS / sizeof ARGS[0]), 0, -1, .positional_of = "--models"};

/* --label A,B or --label A --label B into name_buf (malloc'd): one name per model of nm. Their
 * count, or -1 after the message (nothing left to free). */
static int split_labels(char **name_buf, int nm) {
    int nn = 0, too_many = 0;
    for (int i = 0; i < o.names.n; i++)
        for (const char *p = o.names.v[i];; p += strcspn(p, ",") + 1) {
            if (nn == MAX_MODELS) {
                too_many = 1;
                break;
            }
            size_t len = strcspn(p, ",");
            name_buf[nn] = vil_malloc(len + 1);
            memcpy(name_buf[nn], p, len);
            name_buf[nn++][len] = 0;
            if (!p[strcspn(p, ",")]) break;
        }
    if (o.names.n && (too_many || nn != nm)) {
        fprintf(stderr, "vil compare: %s%d --label name%s for %d model%s: give one per model, in their order\n",
                too_many ? "more than " : "", nn, nn == 1 ? "" : "s", nm, nm == 1 ? "" : "s");
        for (int i = 0; i < nn; i++) free(name_buf[i]);
        return -1;
    }
    return nn;
}

/* Every model at every resolution of res into rows (nm x nr, labelled by names or the files),
 * measured on ds and be. Returns the rows that failed. */
static int measure_all(Row *rows, int nm, const int *res, int nr, const char *const *files, const char *const *paths,
                       const int *uses_ema, const char *const *names, const VilBackend *be, VilDataset *ds) {
    Row *first = vil_calloc((size_t)nm, sizeof(Row)); /* one label per model */
    for (int i = 0; i < nm; i++) first[i].file = files[i], first[i].path = paths[i], first[i].ema = uses_ema[i];
    make_labels(first, nm, names);
    int failed = 0;
    for (int i = 0; i < nm; i++)
        for (int j = 0; j < nr; j++) {
            Row *r = &rows[i * nr + j];
            *r = first[i];
            r->res = res[j];
            measure(r, be, ds, o.batch, o.workers, o.crop_pct, o.skip_bad, o.steps,
                    (VilPosMode)vil_pos_mode_parse(o.pos));
            if (!r->ok) failed++;
        }
    free(first);
    return failed;
}

/* OUT/compare.csv, .json and .svg of the rows: 0, or -1 (reported) */
static int write_outputs(const Row *rows, int nm, int nr, const VilDataset *ds, const char *device, long n_img) {
    if (vil_mkdir_p(o.out) != 0) return -1;
    char p[3][4200], title[512];
    snprintf(p[0], sizeof p[0], "%s/compare.csv", o.out);
    snprintf(p[1], sizeof p[1], "%s/compare.json", o.out);
    snprintf(p[2], sizeof p[2], "%s/compare.svg", o.out);
    snprintf(title, sizeof title, "vil compare: %s (%ld images) on %s", vil_dataset_source(ds), n_img, device);
    int w = write_csv(p[0], rows, nm * nr, device) | write_json(p[1], rows, nm * nr, device, o.data, o.split, o.batch, o.pos) |
            write_chart(p[2], rows, nm, nr, o.sizes != NULL, title);
    if (w) return -1;
    printf("wrote %s, %s, %s\n", p[0], p[1], p[2]);
    return 0;
}

/* The checkpoints of files (paths, uses_ema: a run folder's file, or the file; --ema inside a
 * .pth only; owned: what to free), then the data and the device, the rows measured, printed and
 * written. The exit code. */
static int compare(const char *const *files, int nm, const int *res, int nr, const char *const *names) {
    char *owned[MAX_MODELS] = {0};
    const char *paths[MAX_MODELS];
    int uses_ema[MAX_MODELS], rc = 1;
    Row *rows = NULL;
    VilDataset *ds = NULL;
    const VilBackend *be;
    for (int i = 0; i < nm; i++) {
        uses_ema[i] = o.ema;
        if (!(paths[i] = vil_cli_model_path("compare", files[i], &uses_ema[i], &owned[i]))) goto done;
        uses_ema[i] = uses_ema[i] && is_pth(paths[i]);
    }
    if (vil_cli_open_data_device(o.data, o.split, o.labels, o.device, &ds, &be) != 0) goto done;
    if (o.steps == 0) o.steps = strcmp(be->name, "cpu") == 0 ? 3 : 20;
    char took[256];
    vil_eval_limit(&ds, o.limit, took, sizeof took);
    long n_img = vil_dataset_size(ds);
    char crop[64] = "each checkpoint's crop_pct";
    if (o.crop_pct > 0) snprintf(crop, sizeof crop, "crop_pct %g", o.crop_pct);
    printf("compare: %d model%s x %d resolution%s on %s; %s: %ld images, batch %d, %s%s%s\n", nm,
           nm == 1 ? "" : "s", nr, nr == 1 ? "" : "s", be->name, vil_dataset_source(ds), n_img,
           o.batch, crop, strcmp(o.pos, "interp") ? "; pos_embed at other sizes: " : "",
           strcmp(o.pos, "interp") ? o.pos : "");
    if (took[0]) printf("%s\n", took);
    if (strcmp(be->name, "cpu") == 0) vil_cli_print_threads(stdout, o.workers);
    fflush(stdout);
    rows = vil_calloc((size_t)nm * nr, sizeof(Row));
    int failed = measure_all(rows, nm, res, nr, files, paths, uses_ema, names, be, ds);
    printf("\n");
    print_table(stdout, rows, nm * nr, be->name);
    rc = write_outputs(rows, nm, nr, ds, be->name, n_img) != 0 || failed ? 1 : 0;
    if (failed) vil_error("%d of %d measurements failed (see the table)", failed, nm * nr);
done:
    free(rows);
    if (ds) vil_dataset_free(ds);
    for (int i = 0; i < nm; i++) free(owned[i]);
    return rc;
}

int vil_cmd_compare(int argc, char **argv) {
    o = (Flags){.split = "val", .device = "auto", .out = "out/compare", .pos = "interp", .batch = 64, .workers = 4};
    char **pos;
    int npos;
    int rc = vil_args_parse_all(&vil_cmd_compare_spec, argc, argv, &pos, &npos);
    if (rc >= 0) return rc;
    vil_inputs_track(1); /* the models and images are inputs: the files in --out may not be them */
    const char *files[MAX_MODELS];
    int nm = 0;
    for (int i = 0; i < o.models.n + npos; i++) {
        if (nm == MAX_MODELS) {
            fprintf(stderr, "vil compare: at most %d models\n", MAX_MODELS);
            free(pos);
            return 2;
        }
        files[nm++] = i < o.models.n ? o.models.v[i] : pos[i - o.models.n];
    }
    free(pos);
    int res[MAX_RES], nr = 1;
    res[0] = 0; /* each model's own */
    if (o.sizes && !(nr = vil_cli_int_list(o.sizes, res, MAX_RES, 1, 8192))) {
        fprintf(stderr, "vil compare: --img-size wants sizes like 224,384,512 (at most %d, each 1..8192)\n", MAX_RES);
        return 2;
    }
    /* the numbers' ranges are checked as they are parsed */
    if (!vil_cli_crop_pct_ok("compare", o.crop_pct) || vil_cli_pos_mode("compare", o.pos) < 0) return 2;
    char *name_buf[MAX_MODELS];
    int nn = split_labels(name_buf, nm);
    if (nn < 0) return 2;
    rc = 2;
    if (vil_cli_check_device_split("compare", o.device, o.split) == 0 && vil_cli_set_threads("compare", o.threads) >= 0)
        rc = compare(files, nm, res, nr, nn ? (const char *const *)name_buf : NULL);
    for (int i = 0; i < nn; i++) free(name_buf[i]);
    return rc;
}
