/* states.c: `vil states --model CKPT --data DIR --img-size S --out DIR`: how the scan's state
 * grows along the sequence, per layer and direction, for a checkpoint on a dataset at a given
 * image size (does it drift past the training length?). The norms: eval/states.c; written as
 * states.csv, states.json and states.svg. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "charts/chart.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_arg.h"
#include "data/image.h"
#include "eval/eval.h"
#include "eval/states.h"
#include "formats/checkpoint.h"
#include "vil/common.h"
#include "vil/limits.h"
#include "vil/recurrence.h"

#define MAX_DRAWN 8 /* layers drawn per panel (the CSV and JSON hold all) */

static const char *const DIRS[2] = {"forward", "backward"};

/* what a run measured, for the writers */
typedef struct {
    const char *model, *data, *split, *device;
    const VilConfig *c;
    const VilStates *s;
    char weights[16];
    int train_img, train_tokens; /* the training size and its tokens (pos_embed's grid) */
    long bad;
    float crop_pct;
    const char *ref;   /* --readout-ref, or NULL */
    char ref_note[96]; /* its size and images */
} Report;

static int write_csv(const char *path, const Report *r) {
    const VilStates *s = r->s;
    size_t cap = 128 + (size_t)s->depth * 2 * s->L * 80, k = 0;
    char *b = vil_malloc(cap);
    k += (size_t)snprintf(b + k, cap - k, "layer,direction,step,token,mean_norm,sd_norm\n");
    for (int i = 0; i < s->depth; i++)
        for (int j = 0; j < 2; j++)
            for (int st = 1; st <= s->L; st++) {
                double mu, sd;
                int t = vil_states_token(j, st, s->L);
                vil_states_get(s, i, j, t, &mu, &sd);
                k += (size_t)snprintf(b + k, cap - k, "%d,%s,%d,%d,%.7g,%.7g\n", i, DIRS[j], st, t, mu, sd);
            }
    int rc = vil_write_file_atomic(path, b, k);
    free(b);
    return rc;
}

static int write_json(const char *path, const Report *r) {
    const VilStates *s = r->s;
    const VilConfig *c = r->c;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", r->model);
    cJSON_AddStringToObject(o, "weights", r->weights);
    cJSON_AddStringToObject(o, "family", vil_recurrences[c->rec].family);
    cJSON_AddStringToObject(o, "recurrence", vil_recurrences[c->rec].name);
    cJSON_AddNumberToObject(o, "img_size", c->img_size);
    cJSON_AddNumberToObject(o, "tokens", s->L);
    cJSON_AddNumberToObject(o, "cls_token", c->cls_pos);
    cJSON_AddNumberToObject(o, "train_img_size", r->train_img);
    cJSON_AddNumberToObject(o, "train_tokens", r->train_tokens);
    cJSON_AddNumberToObject(o, "depth", s->depth);
    cJSON_AddNumberToObject(o, "d_state", c->d_state);
    cJSON_AddNumberToObject(o, "d_inner", c->d_inner);
    cJSON_AddStringToObject(o, "data", r->data);
    cJSON_AddStringToObject(o, "split", r->split);
    cJSON_AddNumberToObject(o, "crop_pct", r->crop_pct);
    cJSON_AddNumberToObject(o, "images", (double)s->images);
    cJSON_AddNumberToObject(o, "unreadable", (double)r->bad);
    cJSON_AddStringToObject(o, "device", r->device);
    cJSON_AddStringToObject(o, "norm", "||h||: the square root of the sum of the squares of the "
                                       "state's d_state x d_inner values; mean and sd (divided by "
                                       "the count) over the images");
    cJSON_AddStringToObject(o, "step", "mean_norm[s - 1], sd_norm[s - 1]: after scan step s, the "
                                       "tokens the direction has read (forward: token s - 1; "
                                       "backward: token tokens - s)");
    cJSON *a = cJSON_AddArrayToObject(o, "layers");
    double *v[2] = {vil_malloc((size_t)s->L * sizeof(double)), vil_malloc((size_t)s->L * sizeof(double))};
    for (int i = 0; i < s->depth; i++)
        for (int j = 0; j < 2; j++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "layer", i);
            cJSON_AddStringToObject(e, "direction", DIRS[j]);
            double fm, fs;
            vil_states_get(s, i, j, -1, &fm, &fs);
            cJSON_AddNumberToObject(e, "final_mean", fm);
            cJSON_AddNumberToObject(e, "final_sd", fs);
            for (int st = 1; st <= s->L; st++) vil_states_get(s, i, j, vil_states_token(j, st, s->L), &v[0][st - 1], &v[1][st - 1]);
            cJSON_AddItemToObject(e, "mean_norm", cJSON_CreateDoubleArray(v[0], s->L));
            cJSON_AddItemToObject(e, "sd_norm", cJSON_CreateDoubleArray(v[1], s->L));
            cJSON_AddItemToArray(a, e);
        }
    free(v[0]);
    free(v[1]);
    if (s->readout >= 0) {
        cJSON *ro = cJSON_AddObjectToObject(o, "readout");
        cJSON_AddNumberToObject(ro, "token", s->readout);
        cJSON_AddStringToObject(ro, "states", "readout.safetensors: mean and var (layer, direction, d_state x d_inner)");
        if (r->ref) {
            double dm, ds;
            cJSON_AddStringToObject(ro, "reference", r->ref);
            cJSON_AddStringToObject(ro, "reference_run", r->ref_note);
            cJSON_AddStringToObject(ro, "distance", "d = ||h - ref_mean||^2 / sum(ref_var) per image; mean and sd "
                                                    "(divided by the count) over the images");
            vil_states_distance(s, -1, 0, &dm, &ds);
            cJSON_AddNumberToObject(ro, "distance_mean", dm);
            cJSON_AddNumberToObject(ro, "distance_sd", ds);
        }
        cJSON *rl = cJSON_AddArrayToObject(ro, "layers");
        for (int i = 0; i < s->depth; i++)
            for (int j = 0; j < 2; j++) {
                cJSON *e = cJSON_CreateObject();
                double nm, ns;
                vil_states_get(s, i, j, s->readout, &nm, &ns);
                cJSON_AddNumberToObject(e, "layer", i);
                cJSON_AddStringToObject(e, "direction", DIRS[j]);
                cJSON_AddNumberToObject(e, "norm_mean", nm);
                cJSON_AddNumberToObject(e, "norm_sd", ns);
                if (r->ref) {
                    vil_states_distance(s, i, j, &nm, &ns);
                    cJSON_AddNumberToObject(e, "distance_mean", nm);
                    cJSON_AddNumberToObject(e, "distance_sd", ns);
                }
                cJSON_AddItemToArray(rl, e);
            }
    }
    char *text = cJSON_PrintUnformatted(o);
    int rc = text ? vil_write_file_atomic(path, text, strlen(text)) : -1;
    if (!text) vil_error("states.json: out of memory");
    cJSON_free(text);
    cJSON_Delete(o);
    return rc;
}

/* mean (top row) and sd (bottom row) against the scan step, forward and backward side by side,
 * one line per drawn layer, and a dashed vertical line at the training length */
static int write_chart(const char *path, const Report *r) {
    const VilStates *s = r->s;
    int L = s->L, nd = s->depth <= MAX_DRAWN ? s->depth : MAX_DRAWN;
    int layers[MAX_DRAWN];
    for (int k = 0; k < nd; k++) layers[k] = nd == s->depth ? k : (int)lround((double)k * (s->depth - 1) / (nd - 1));
    double *x = vil_malloc((size_t)L * sizeof(double));
    double *y = vil_malloc((size_t)4 * nd * L * sizeof(double));
    for (int st = 1; st <= L; st++) x[st - 1] = st;
    VilChartSeries ser[4][MAX_DRAWN + 1];
    char labels[MAX_DRAWN][32], mark[64];
    double top[4] = {0}, mx[2] = {0, 0}, my[4][2];
    snprintf(mark, sizeof mark, "training length (%d tokens)", r->train_tokens);
    int marker = r->train_tokens >= 1 && r->train_tokens <= L;
    for (int p = 0; p < 4; p++) { /* panel p: row p / 2 (0 mean, 1 sd), direction p % 2 */
        int j = p % 2;
        for (int k = 0; k < nd; k++) {
            double *yy = y + ((size_t)p * nd + k) * L;
            for (int st = 1; st <= L; st++) {
                double mu, sd;
                vil_states_get(s, layers[k], j, vil_states_token(j, st, L), &mu, &sd);
                yy[st - 1] = p / 2 ? sd : mu;
                if (isfinite(yy[st - 1]) && yy[st - 1] > top[p]) top[p] = yy[st - 1];
            }
            snprintf(labels[k], sizeof labels[k], "layer %d", layers[k]);
            ser[p][k] = (VilChartSeries){labels[k], L, x, yy, 0, k, 0};
        }
        if (marker) {
            mx[0] = mx[1] = r->train_tokens;
            my[p][0] = 0, my[p][1] = top[p] > 0 ? top[p] : 1;
            ser[p][nd] = (VilChartSeries){mark, 2, mx, my[p], 1, 7, 0};
        }
    }
    char t[4][64];
    VilChartPanel pan[4];
    for (int p = 0; p < 4; p++) {
        snprintf(t[p], sizeof t[p], "%s of the %s scan", p / 2 ? "Spread" : "State norm", DIRS[p % 2]);
        pan[p] = (VilChartPanel){t[p], "scan step (tokens read)", p / 2 ? "sd of ||h|| over images" : "mean ||h|| over images",
                                 0, 0, 0, ser[p], nd + marker, NULL, 0, 1, L, 0, top[p] > 0 ? top[p] : 1};
    }
    char title[512], name[96];
    const char *base = strrchr(r->model, '/');
    base = base ? base + 1 : r->model;
    snprintf(title, sizeof title, "vil states: %s (%s) at %d px, %d tokens (trained: %d tokens); %ld images",
             vil_printable(name, sizeof name, base), vil_recurrences[r->c->rec].family, r->c->img_size,
             L, r->train_tokens, s->images);
    int rc = vil_chart_write(path, title, pan, 4, 2);
    free(y);
    free(x);
    return rc;
}

/* the norm at a few steps, per layer and direction: the first, the training length, the last */
static void print_table(const Report *r) {
    const VilStates *s = r->s;
    int L = s->L, lt = r->train_tokens >= 1 && r->train_tokens <= L ? r->train_tokens : 0;
    printf("\nmean state norm ||h|| (sd over images) after scan step s:\n%-6s %-9s %20s", "layer",
           "direction", "s = 1");
    char h[48];
    if (lt) {
        snprintf(h, sizeof h, "s = %d (trained)", lt);
        printf(" %20s", h);
    }
    snprintf(h, sizeof h, "s = %d (last)", L);
    printf(" %20s\n", h);
    for (int i = 0; i < s->depth; i++)
        for (int j = 0; j < 2; j++) {
            int steps[3] = {1, lt, L};
            printf("%-6d %-9s", i, DIRS[j]);
            for (int k = 0; k < 3; k++) {
                if (!steps[k]) continue;
                double mu, sd;
                char c[48];
                vil_states_get(s, i, j, vil_states_token(j, steps[k], L), &mu, &sd);
                snprintf(c, sizeof c, "%.4g (%.3g)", mu, sd);
                printf(" %20s", c);
            }
            printf("\n");
        }
    if (!r->ref) return;
    double dm, ds;
    vil_states_distance(s, -1, 0, &dm, &ds);
    printf("\nreadout distance d = ||h - ref_mean||^2 / sum(ref_var) at token %d against %s (%s): mean %.4g "
           "(sd %.3g over the images) averaged over layers and directions\n%-6s %-9s %20s\n",
           s->readout, r->ref, r->ref_note, dm, ds, "layer", "direction", "d (sd)");
    for (int i = 0; i < s->depth; i++)
        for (int j = 0; j < 2; j++) {
            char c[48];
            vil_states_distance(s, i, j, &dm, &ds);
            snprintf(c, sizeof c, "%.4g (%.3g)", dm, ds);
            printf("%-6d %-9s %20s\n", i, DIRS[j], c);
        }
}

/* the flags' values: their defaults set by vil_cmd_states, then filled by vil_args_parse */
typedef struct {
    const char *model, *data, *split, *labels, *device, *out, *pos, *ref;
    int batch, img_size, limit, workers, ema, threads, max_pixels;
    float crop_pct;
} Flags;
static Flags o;

static const VilArg ARGS[] = {
    VIL_ARG_MODEL_ROWS(o),
    {"--data", VIL_ARG_STR, &o.data, VIL_DATA_HELP, .required = 1},
    {"--split", VIL_ARG_STR, &o.split, "split to read: val (test for IDX), test or train"},
    {"--labels", VIL_ARG_STR, &o.labels, "labels file for a flat folder (\"filename label\" lines)"},
    {"--img-size", VIL_ARG_INT, &o.img_size, "image size, 1..8192 (not given: the checkpoint's own); another size moves pos_embed (--pos)", 1, VIL_MAX_IMG_SIZE},
    {"--pos", VIL_ARG_STR, &o.pos, VIL_POS_HELP, .meta = "interp|keep|center", .needs = "--img-size"},
    {"--readout-ref", VIL_ARG_STR, &o.ref, "the readout states of a run at the training size (its OUT/readout.safetensors): each image's distance to them", .meta = "F"},
    {"--limit", VIL_ARG_INT, &o.limit, "images measured: N spread over the classes, round robin in class order, each class's first ones (0: all); unreadable ones are left out", 0, 2147483647},
    {"--batch", VIL_ARG_INT, &o.batch, "images per forward (training activations: every layer's are kept)", 1, VIL_MAX_BATCH},
    {"--crop-pct", VIL_ARG_FLOAT, &o.crop_pct, "resize the shorter side to size / crop_pct, then center crop (0: the checkpoint's, else 0.875)"},
    {"--device", VIL_ARG_STR, &o.device, "where the forward and the norms' scans run: cpu, cuda or auto"},
    {"--workers", VIL_ARG_INT, &o.workers, "data loader threads", 1, 256},
    {"--threads", VIL_ARG_INT, &o.threads, VIL_THREADS_HELP},
    {"--max-pixels", VIL_ARG_INT, &o.max_pixels, VIL_MAX_PIXELS_HELP},
    {"--out", VIL_ARG_STR, &o.out, "folder for states.csv, states.json, states.svg and readout.safetensors"},
};

const VilArgSpec vil_cmd_states_spec = {
    "states", "--model CKPT|RUN --data DIR [--img-size S] [--limit N] [--out DIR] [options]",
    "How the scan's state grows along the sequence: for each layer and direction,\n"
    "the norm of the state after each token (||h||: the square root of the sum of\n"
    "squares of its d_state x d_inner values), its mean and sd over --limit's\n"
    "images of the split (256 by default, spread over the classes as `vil eval\n"
    "--limit` takes them), made with the evaluation transform (as `vil eval\n"
    "--img-size S`), the scans starting from zero. Past the training length (the\n"
    "tokens of the checkpoint's own pos_embed grid) a model meets states it never\n"
    "saw.\n"
    "The forward runs on --device, and each layer's scans are replayed there from\n"
    "its kept inputs, summing the squared state after each token (on CUDA one\n"
    "simple kernel; float32 sums on both backends, over the forward's own\n"
    "activations). Writes OUT/states.csv (layer, direction, step,\n"
    "token, mean_norm, sd_norm; step s = the tokens the direction has read, 1..L:\n"
    "forward token s - 1, backward token L - s), OUT/states.json (the same by\n"
    "step, the final states' norms, the model, size, images and training\n"
    "length) and OUT/states.svg (mean and sd against the step, one line per\n"
    "layer, at most 8 spread over the depth, a dashed line at the training\n"
    "length).\n"
    "The readout: each direction's state where the head reads the sequence (after\n"
    "the step that reads the class token), its per-element mean and variance over\n"
    "the images in OUT/readout.safetensors. Given a run's file at the training size\n"
    "(--readout-ref), each image's squared distance to those states,\n"
    "d = ||h - mean||^2 / sum(var) (1 on average over the reference's own images),\n"
    "per layer and direction and averaged over them, goes into the table and\n"
    "states.json: how far from what training saw the states at the readout lie.",
    ARGS, (int)(sizeof ARGS / sizeof ARGS[0]), 0, 0};

/* The lines before the measurement: the model and its training length (into r), the data
 * (*ds becomes --limit's subset) and the transform */
static void print_header(Report *r, const VilModel *m, const VilCheckpointMeta *meta, const VilEvalSpec *ev,
                         const char *note, VilDataset **ds, const VilBackend *be) {
    const VilConfig *c = &m->cfg;
    char name[96];
    /* the training length: the tokens of the file's own pos_embed grid */
    int g = meta->trained_grid;
    r->train_img = g > 0 ? c->patch_size + (g - 1) * c->stride : c->img_size;
    r->train_tokens = g > 0 ? g * g + 1 : c->seq_len;
    printf("states: %s%s%s (%s, %s, depth %d, d_state %d) at %d px: %d tokens (trained at %d px: "
           "%d tokens) on %s\n", r->model, meta->weights[0] ? ":" : "", meta->weights,
           vil_printable(name, sizeof name, c->name), vil_recurrences[c->rec].family, c->depth,
           c->d_state, c->img_size, c->seq_len, r->train_img, r->train_tokens, be->name);
    char took[256];
    int n_all = vil_dataset_size(*ds);
    vil_eval_limit(ds, o.limit, took, sizeof took);
    printf("data: %s: %d of %d images, batch %d; resize %d, center crop %d (%s)\n",
           vil_dataset_source(*ds), vil_dataset_size(*ds), n_all, vil_eval_batch(*ds, o.batch, 0),
           vil_eval_scale_size(c->img_size, ev->crop_pct), c->img_size, note);
    if (took[0]) printf("%s\n", took);
    char moved[160];
    if (meta->trained_grid && c->img_size != r->train_img) printf("note: %s\n", vil_cli_pos_note(c, meta, moved, sizeof moved));
    if (c->cls_pos >= 0) printf("readout: the states after the class token, token %d%s%s%s\n", c->cls_pos,
                                r->ref ? "; distance to the reference " : "", r->ref ? r->ref : "",
                                r->ref ? "" : " (no --readout-ref: no distance)");
    if (strcmp(be->name, "cpu") == 0) vil_cli_print_threads(stdout, o.workers);
    fflush(stdout);
}

/* The norms measured on ds (into *s, r pointing at them), the table printed, OUT's three files
 * written: 0, or -1 (reported) */
static int measure(Report *r, VilModel *m, VilDataset *ds, const VilEvalSpec *ev, const float *ref_mean,
                   const float *ref_var, VilStates *s) {
    double t0 = vil_now();
    if (vil_states_dataset(m, ds, ev, o.batch, o.workers, ref_mean, ref_var, stderr, s, &r->bad) != 0) return -1;
    r->s = s;
    if (s->images == 0) {
        vil_error("no images were measured%s", r->bad ? ": none could be read" : "");
        return -1;
    }
    printf("%ld images in %.1f s%s", s->images, vil_now() - t0, r->bad ? "" : "\n");
    if (r->bad) printf(" (%ld unreadable, left out)\n", r->bad);
    print_table(r);
    if (vil_mkdir_p(o.out) != 0) return -1;
    char p[4][4200];
    snprintf(p[0], sizeof p[0], "%s/states.csv", o.out);
    snprintf(p[1], sizeof p[1], "%s/states.json", o.out);
    snprintf(p[2], sizeof p[2], "%s/states.svg", o.out);
    snprintf(p[3], sizeof p[3], "%s/readout.safetensors", o.out);
    if (write_csv(p[0], r) != 0 || write_json(p[1], r) != 0 || write_chart(p[2], r) != 0) return -1;
    if (s->readout >= 0 && vil_states_ref_save(s, p[3], r->model, r->c->img_size) != 0) return -1;
    printf("wrote %s, %s, %s%s%s\n", p[0], p[1], p[2], s->readout >= 0 ? ", " : "", s->readout >= 0 ? p[3] : "");
    return 0;
}

int vil_cmd_states(int argc, char **argv) {
    o = (Flags){.split = "val", .device = "auto", .out = "out/states", .pos = "interp", .batch = 8, .limit = 256,
                .workers = 4, .max_pixels = (int)vil_image_max_pixels()};
    int rc = vil_args_parse_flags(&vil_cmd_states_spec, argc, argv);
    if (rc >= 0) return rc;
    vil_inputs_track(1); /* the models and images are inputs: the files in --out may not be them */
    int pos = vil_cli_pos_mode("states", o.pos);
    if (pos < 0 || !vil_cli_crop_pct_ok("states", o.crop_pct)) return 2;
    VilDataset *ds;
    const VilBackend *be;
    VilModel m;
    VilCheckpointMeta meta;
    char *model_file;
    const char *model = vil_cli_model_path("states", o.model, &o.ema, &model_file);
    if (!model) return 1;
    VilCheckpointOpts lo = {.img_size = o.img_size, .ema = o.ema, .pos = (VilPosMode)pos};
    rc = vil_cli_open_eval("states", model, o.data, o.split, o.labels, o.device, o.max_pixels, o.threads, &lo, &ds,
                           &be, &m, &meta);
    if (rc != 0) {
        free(model_file);
        return rc;
    }
    int seq_L, seq_state;
    if (vil_model_seq_streams(&m, &seq_L, &seq_state) == 0) {
        char shown[1024];
        vil_error("%s: the %s network has no states along its sequence that vil states reads (a stream model: "
                  "its accuracy by position is vil eval --positions-file)", vil_printable(shown, sizeof shown, model),
                  m.cfg.family);
        vil_checkpoint_meta_free(&meta);
        vil_model_free(&m);
        vil_dataset_free(ds);
        free(model_file);
        return 1;
    }
    VilEvalSpec ev;
    char note[128];
    vil_eval_spec_resolve(&ev, &meta, o.crop_pct, m.cfg.in_chans, note, sizeof note);
    Report r = {.model = model, .data = o.data, .split = o.split, .device = be->name, .c = &m.cfg,
                .crop_pct = ev.crop_pct};
    snprintf(r.weights, sizeof r.weights, "%s", meta.weights);
    VilStates s = {0};
    float *ref_mean = NULL, *ref_var = NULL;
    rc = 0;
    if (o.ref && m.cfg.cls_pos < 0) {
        vil_error("--readout-ref: this model has no class token to read out at");
        rc = 1;
    } else if (o.ref && vil_states_ref_load(o.ref, m.cfg.depth, seq_state, &ref_mean, &ref_var, r.ref_note,
                                            sizeof r.ref_note) != 0) {
        rc = 1;
    }
    char ro_path[4200];
    snprintf(ro_path, sizeof ro_path, "%s/readout.safetensors", o.out);
    if (rc == 0 && m.cfg.cls_pos >= 0 && vil_output_check(ro_path, ".safetensors", "--out") != 0) rc = 2;
    if (rc == 0) {
        r.ref = o.ref;
        print_header(&r, &m, &meta, &ev, note, &ds, be);
        rc = measure(&r, &m, ds, &ev, ref_mean, ref_var, &s) == 0 ? 0 : 1;
    }
    free(ref_mean);
    free(ref_var);
    free(model_file);
    vil_states_free(&s);
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&m);
    vil_dataset_free(ds);
    return rc;
}
