/* classify.c: `vil classify --model CKPT IMAGE|DIR...`: the evaluation transform of each image
 * (shorter side to size / crop_pct, bicubic, center crop, normalize), the model's forward
 * pass, and the top-k classes as text or as one JSON object per image, and as CSV with --csv.
 * A folder stands for the images below it, sorted by path. An image that cannot be read is
 * reported by name; the others are still classified and the exit code is 1. */
#include <cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_arg.h"
#include "data/image.h"
#include "data/transform.h"
#include "eval/eval.h"
#include "eval/results.h"
#include "formats/checkpoint.h"
#include "vil/common.h"
#include "vil/limits.h"

#define CHUNK 16
#define MAX_DEPTH 64 /* folder levels walked below an argument */

typedef struct {
    const char *file;
    int ok;
} Item;

typedef struct {
    char **v;
    int n, cap;
} Files;

static void files_push(Files *f, char *s) {
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 64;
        f->v = vil_realloc(f->v, (size_t)f->cap * sizeof *f->v);
    }
    f->v[f->n++] = s;
}

static int cmp_path(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* the decoders' formats by name (image.h); a file named otherwise counts when its first
 * bytes are an image's */
static int is_image(const char *path, const char *name) {
    static const char *const EXT[] = {".jpg", ".jpeg", ".png", ".gif", ".bmp", ".ppm",
                                      ".pgm", ".pnm", ".psd", ".hdr"};
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot && i < sizeof EXT / sizeof EXT[0]; i++)
        if (strcasecmp(dot, EXT[i]) == 0) return 1;
    unsigned char head[16];
    long n = vil_read_head(path, head, sizeof head);
    return n > 0 && vil_image_format(head, (size_t)n) != VIL_FORMAT_UNKNOWN;
}

/* The images below dir (hidden entries and links to folders left out, as os.walk does) into
 * out; *other counts the files that are not images. 0, or -1 (reported). */
static int walk(const char *dir, int depth, Files *out, long *other) {
    char shown[1024];
    if (depth > MAX_DEPTH) {
        vil_error("'%s': folders nested more than %d deep", vil_printable(shown, sizeof shown, dir), MAX_DEPTH);
        return -1;
    }
    DIR *d = opendir(dir);
    if (!d) {
        vil_error("cannot open folder '%s': %s", vil_printable(shown, sizeof shown, dir), vil_errno_str());
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char *p = vil_path_join(dir, e->d_name);
        struct stat st, lst;
        int have = stat(p, &st) == 0, link = lstat(p, &lst) == 0 && S_ISLNK(lst.st_mode);
        if (have && S_ISDIR(st.st_mode)) {
            if (!link) rc = walk(p, depth + 1, out, other);
            free(p);
        } else if (!have || (S_ISREG(st.st_mode) && is_image(p, e->d_name))) {
            files_push(out, p); /* a dangling link: named as unreadable when it is read */
        } else {
            (*other)++;
            free(p);
        }
    }
    closedir(d);
    return rc;
}

/* The arguments as the list of images to classify: a file as it is, a folder as the images
 * below it sorted by path. The folders' counts are said on stderr. 0, or -1 (reported). */
static int gather(char **pos, int npos, Files *out) {
    for (int i = 0; i < npos; i++) {
        struct stat st;
        if (stat(pos[i], &st) != 0 || !S_ISDIR(st.st_mode)) {
            files_push(out, vil_strdup(pos[i]));
            continue;
        }
        int from = out->n;
        long other = 0;
        if (walk(pos[i], 0, out, &other) != 0) return -1;
        if (out->n > from) qsort(out->v + from, (size_t)(out->n - from), sizeof *out->v, cmp_path);
        char shown[1024];
        fprintf(stderr, "vil classify: %s: %d image%s", vil_printable(shown, sizeof shown, pos[i]),
                out->n - from, out->n - from == 1 ? "" : "s");
        if (other) fprintf(stderr, "; %ld other file%s skipped", other, other == 1 ? "" : "s");
        fprintf(stderr, "\n");
    }
    return 0;
}

static void print_result(const char *file, const float *logits, int C, int topk, int json,
                         char *const *names) {
    int K = topk < C ? topk : C;
    int *idx = vil_malloc((size_t)K * sizeof(int));
    double *p = vil_malloc((size_t)K * sizeof(double));
    vil_topk_probs(logits, C, K, idx, p);
    if (json) {
        cJSON *o = cJSON_CreateObject();
        char *f8 = vil_utf8_lossy(file);
        cJSON_AddStringToObject(o, "file", f8);
        free(f8);
        cJSON *l = cJSON_AddArrayToObject(o, "logits");
        for (int k = 0; k < C; k++) cJSON_AddItemToArray(l, cJSON_CreateNumber(logits[k]));
        cJSON *t = cJSON_AddArrayToObject(o, "topk");
        for (int j = 0; j < K; j++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "index", idx[j]);
            if (names) {
                char *n8 = vil_utf8_lossy(names[idx[j]]);
                cJSON_AddStringToObject(e, "name", n8);
                free(n8);
            } else {
                cJSON_AddNullToObject(e, "name");
            }
            cJSON_AddNumberToObject(e, "prob", p[j]);
            cJSON_AddItemToArray(t, e);
        }
        char *s = cJSON_PrintUnformatted(o);
        printf("%s\n", s);
        cJSON_free(s);
        cJSON_Delete(o);
    } else {
        char shown[1024];
        printf("%s\n", vil_printable(shown, sizeof shown, file));
        for (int j = 0; j < K; j++) { /* names come from the file: nothing raw to the terminal */
            printf("  %6.2f%%  %4d  %s\n", 100.0 * p[j], idx[j],
                   names ? vil_printable(shown, sizeof shown, names[idx[j]]) : "");
        }
    }
    fflush(stdout);
    free(idx);
    free(p);
}

/* the flags' values: their defaults set by vil_cmd_classify, then filled by vil_args_parse */
typedef struct {
    const char *model, *device, *csv;
    int img_size, topk, json, ema, threads, max_pixels;
    float crop_pct;
} Flags;
static Flags o;

static const VilArg ARGS[] = {
    VIL_ARG_MODEL_ROWS(o),
    {"--img-size", VIL_ARG_INT, &o.img_size, "image size (0: the file's, or 224 without a config); another size interpolates pos_embed", 0, VIL_MAX_IMG_SIZE},
    {"--crop-pct", VIL_ARG_FLOAT, &o.crop_pct, "center-crop fraction: resize the shorter side to size / crop_pct (0: the checkpoint's, else 0.875)", .meta = "F"},
    {"--topk", VIL_ARG_INT, &o.topk, "classes to print per image", 1, VIL_MAX_CLASSES, "K"},
    {"--json", VIL_ARG_FLAG, &o.json, "one JSON object per image: file, logits, topk"},
    {"--csv", VIL_ARG_STR, &o.csv, "also write the results as CSV: filename, label_0.., prob_0.., name_0..", .meta = "FILE"},
    {"--device", VIL_ARG_STR, &o.device, "cpu, cuda or auto"},
    {"--threads", VIL_ARG_INT, &o.threads, VIL_THREADS_HELP},
    {"--max-pixels", VIL_ARG_INT, &o.max_pixels, VIL_MAX_PIXELS_HELP},
};

const VilArgSpec vil_cmd_classify_spec = {
    "classify", "--model CKPT|RUN [--ema] [--img-size N] [--crop-pct F] [--topk K] [--json] [--csv FILE] IMAGE|DIR...",
    "Classifies images (JPEG, PNG, BMP, GIF, PNM, ...; the format is read from the\n"
    "bytes) and prints the top-k classes with their probabilities. A folder\n"
    "stands for the images below it (every level, sorted by path; hidden entries\n"
    "and links to folders left out): a file counts when its name or its first\n"
    "bytes say it is an image, and the others are skipped and counted.",
    ARGS, (int)(sizeof ARGS / sizeof ARGS[0]), 1, -1};

/* --crop-pct, --device, --max-pixels and --threads (no loader: the images are read between the
 * batches): the compute threads, or -1 after a usage message */
static int check_flags(void) {
    /* --img-size and --topk are checked as they are parsed */
    if (!vil_cli_crop_pct_ok("classify", o.crop_pct)) return -1;
    if (vil_cli_check_device_split("classify", o.device, "val") != 0 ||
        vil_cli_set_max_pixels("classify", o.max_pixels) != 0)
        return -1;
    return vil_cli_set_threads("classify", o.threads);
}

/* The checkpoint (*ckpt: --model, or its run folder's file in *model_file) and the images the
 * arguments name (files), all inputs, which --csv may not name (vil/files.h). 0, or the exit
 * code after the message. */
static int gather_inputs(char **pos, int npos, const char **ckpt, char **model_file, Files *files) {
    vil_inputs_track(1);
    *ckpt = vil_cli_model_path("classify", o.model, &o.ema, model_file);
    if (!*ckpt || gather(pos, npos, files) != 0) return 1;
    vil_input_add(*ckpt);
    for (int i = 0; i < files->n; i++) vil_input_add(files->v[i]);
    return o.csv && vil_output_check(o.csv, ".csv", "--csv") != 0 ? 2 : 0;
}

/* Files [start, start + n) through the evaluation transform into batch (the readable ones, in
 * order; items[i].ok says which). Returns how many; each failure named and counted in *failed. */
static int load_chunk(const Files *files, int start, int n, int S, int C, const VilEvalSpec *ev, float *batch,
                      Item *items, int *failed) {
    size_t per = (size_t)C * S * S;
    int good = 0;
    for (int i = 0; i < n; i++) {
        items[i].file = files->v[start + i];
        items[i].ok = 0;
        VilImage im;
        VilErrCapture cap;
        vil_error_capture(&cap);
        int lrc = vil_image_load(items[i].file, C, &im);
        vil_error_release(&cap);
        if (lrc != 0) { /* cap.msg: "'FILE': reason", the name printable */
            vil_error("cannot classify %s", cap.msg);
            (*failed)++;
            continue;
        }
        if (vil_transform_eval(&im, S, ev->crop_pct, ev->mean, ev->std, batch + (size_t)good * per) != 0) {
            char shown[1024];
            vil_error("cannot classify '%s': the evaluation transform failed",
                      vil_printable(shown, sizeof shown, items[i].file));
            (*failed)++;
            vil_image_free(&im);
            continue;
        }
        vil_image_free(&im);
        items[i].ok = 1;
        good++;
    }
    return good;
}

/* Every file through the model loaded in m, CHUNK at a time: the results printed, and added to
 * res when it is open. Returns the files that could not be classified. */
static int classify_files(VilModel *m, const VilCheckpointMeta *meta, const VilEvalSpec *ev, const Files *files,
                          VilResults *res) {
    const VilConfig *c = &m->cfg;
    int S = c->img_size, C = c->in_chans, NC = c->num_classes, failed = 0;
    size_t per = (size_t)C * S * S;
    float *batch = vil_malloc(CHUNK * per * sizeof(float));
    float *logits = vil_malloc((size_t)CHUNK * NC * sizeof(float));
    Item items[CHUNK];
    if (vil_model_alloc_acts(m, CHUNK, 0) != 0) {
        free(batch);
        free(logits);
        return files->n; /* reported: none could be classified */
    }
    for (int start = 0; start < files->n; start += CHUNK) {
        int n = files->n - start < CHUNK ? files->n - start : CHUNK;
        int good = load_chunk(files, start, n, S, C, ev, batch, items, &failed);
        if (!good) continue;
        /* unused slots of the last chunk: zeros, results ignored */
        memset(batch + (size_t)good * per, 0, (CHUNK - good) * per * sizeof(float));
        vil_model_upload_inputs(m, batch, NULL);
        vil_model_forward(m, 0);
        vil_model_logits(m, logits);
        for (int i = 0, k = 0; i < n; i++) {
            if (!items[i].ok) continue;
            const float *row = logits + (size_t)(k++) * NC;
            print_result(items[i].file, row, NC, o.topk, o.json, meta->class_names);
            if (res) vil_results_add(res, items[i].file, row, -1);
        }
    }
    free(batch);
    free(logits);
    return failed;
}

/* The checkpoint ckpt on --device, then classify_files with --csv's file: 0, or 1 (reported) */
static int classify(const char *ckpt, const Files *files, int nthreads) {
    int rc = 1;
    VilModel m = {0};
    VilCheckpointMeta meta = {0};
    VilResults *res = NULL;
    const VilBackend *be = vil_backend_get(o.device);
    if (!be) return 1;
    if (strcmp(o.device, "auto") == 0) fprintf(stderr, "vil classify: running on %s\n", be->name);
    VilCheckpointOpts lo = {.img_size = o.img_size, .ema = o.ema};
    if (vil_checkpoint_load(ckpt, be, &lo, &m, &meta) != 0) return 1;
    VilEvalSpec ev;
    char note[128], shown[1024];
    vil_eval_spec_resolve(&ev, &meta, o.crop_pct, m.cfg.in_chans, note, sizeof note);
    fprintf(stderr, "vil classify: %d x %d, %s", m.cfg.img_size, m.cfg.img_size, note);
    if (strcmp(be->name, "cpu") == 0)
        fprintf(stderr, "; %d compute thread%s (OpenMP)", nthreads, nthreads == 1 ? "" : "s");
    fprintf(stderr, "\n");
    if (vil_model_check_acts(&m, CHUNK, 0) != 0) goto done;
    if (o.csv && !(res = vil_results_open(o.csv, VIL_RESULTS_CSV, o.topk, m.cfg.num_classes, meta.class_names, 0)))
        goto done;
    int failed = classify_files(&m, &meta, &ev, files, res);
    if (res) {
        long rows = vil_results_rows(res);
        VilResults *r = res;
        res = NULL;
        if (vil_results_close(r) != 0) goto done;
        fprintf(stderr, "vil classify: wrote %s (%ld row%s)\n", vil_printable(shown, sizeof shown, o.csv), rows,
                rows == 1 ? "" : "s");
    }
    if (files->n == 0) vil_error("no images to classify: the folders hold none");
    else if (failed) vil_error("%d of %d images could not be classified", failed, files->n);
    else rc = 0;
done:
    vil_results_free(res);
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&m);
    return rc;
}

int vil_cmd_classify(int argc, char **argv) {
    o = (Flags){.device = "auto", .topk = 5, .max_pixels = (int)vil_image_max_pixels()};
    char **pos;
    int npos;
    int rc = vil_args_parse_all(&vil_cmd_classify_spec, argc, argv, &pos, &npos);
    if (rc >= 0) return rc;
    int nthreads = check_flags();
    if (nthreads < 0) {
        free(pos);
        return 2;
    }
    const char *ckpt = NULL;
    char *model_file = NULL;
    Files files = {0};
    rc = gather_inputs(pos, npos, &ckpt, &model_file, &files);
    free(pos);
    if (rc == 0) rc = classify(ckpt, &files, nthreads);
    for (int i = 0; i < files.n; i++) free(files.v[i]);
    free(files.v);
    free(model_file);
    return rc;
}
