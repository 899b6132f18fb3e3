/* eval.c: `vil eval --model CKPT --data DIR`: top-1 / top-5 and the loss of a checkpoint on a
 * whole split (or --limit's images spread over its classes) with the evaluation transform it was
 * trained with (the pass itself: eval/eval.c); --results-file writes the summary as timm's
 * validate.py does, --predictions-file each image's top-k classes and label. A stream model reads
 * streams of --stream-len images, and --positions-file writes its accuracy by position. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_arg.h"
#include "eval/eval.h"
#include "eval/results.h"
#include "formats/checkpoint.h"
#include "vil/common.h"
#include "vil/limits.h"
#include "data/image.h"

/* --predictions-file: each batch's rows, named by the dataset's paths */
typedef struct {
    VilResults *res;
    const VilDataset *ds;
} Rows;

static void add_rows(void *ctx, const float *logits, const int *indices, const int *labels, int n, int C) {
    Rows *r = ctx;
    char path[4096];
    for (int i = 0; i < n; i++) {
        vil_dataset_path(r->ds, indices[i], path, sizeof path);
        vil_results_add(r->res, path, logits + (size_t)i * C, labels[i]);
    }
}

/* a and b name one file: the same string, or the same existing file */
static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return strcmp(a, b) == 0 ||
           (stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino);
}

/* the flags' values: their defaults set by vil_cmd_eval, then filled by vil_args_parse */
typedef struct {
    const char *model, *data, *split, *labels, *device, *results, *predictions, *progress, *pos, *positions;
    int batch, img_size, workers, limit, ema, skip_bad, threads, topk, max_pixels, stream_len, streams;
    float crop_pct;
} Flags;
static Flags o;

static const VilArg ARGS[] = {
    VIL_ARG_MODEL_ROWS(o),
    {"--data", VIL_ARG_STR, &o.data, VIL_DATA_HELP, .required = 1},
    {"--split", VIL_ARG_STR, &o.split, "split to evaluate: val, test or train"},
    {"--labels", VIL_ARG_STR, &o.labels, "labels file for a flat folder (\"filename label\" lines)"},
    {"--batch", VIL_ARG_INT, &o.batch, "batch size", 1, VIL_MAX_BATCH},
    {"--device", VIL_ARG_STR, &o.device, "cpu, cuda or auto"},
    {"--crop-pct", VIL_ARG_FLOAT, &o.crop_pct, "resize the shorter side to size / crop_pct, then center crop (0: the checkpoint's, else 0.875)", .meta = "F"},
    {"--img-size", VIL_ARG_INT, &o.img_size, "evaluation resolution (0: the checkpoint's); another size moves pos_embed (--pos)", 0, VIL_MAX_IMG_SIZE},
    {"--pos", VIL_ARG_STR, &o.pos, VIL_POS_HELP, .meta = "interp|keep|center", .needs = "--img-size"},
    {"--workers", VIL_ARG_INT, &o.workers, "data loader threads", 1, 256},
    {"--threads", VIL_ARG_INT, &o.threads, VIL_THREADS_HELP},
    {"--limit", VIL_ARG_INT, &o.limit, "evaluate N images spread over the classes: round robin in class order, each class's first ones (0: all)", 0, 2147483647},
    {"--results-file", VIL_ARG_STR, &o.results, "write the summary (model, top1, top1_err, top5, top5_err, param_count, img_size, crop_pct, interpolation, loss, count), as timm's validate.py: F.csv or F.json", .meta = "F.csv|F.json"},
    {"--predictions-file", VIL_ARG_STR, &o.predictions, "write each image's top-k classes and label: F.csv (timm's inference columns) or F.jsonl", .meta = "F.csv|F.jsonl"},
    {"--topk", VIL_ARG_INT, &o.topk, "classes per row of --predictions-file", 1, VIL_MAX_CLASSES, "K"},
    {"--max-pixels", VIL_ARG_INT, &o.max_pixels, VIL_MAX_PIXELS_HELP},
    {"--skip-bad", VIL_ARG_FLAG, &o.skip_bad, "images that cannot be read are named and left out, and the exit code stays 0"},
    {"--progress", VIL_ARG_STR, &o.progress, VIL_PROGRESS_HELP},
    {"--stream-len", VIL_ARG_INT, &o.stream_len, "a stream model: images per evaluation stream (0: its stream_len; a multiple of its stream_chunk)", 0, VIL_MAX_STREAM, "K"},
    {"--streams", VIL_ARG_INT, &o.streams, "a stream model: evaluation streams (0: as many as the split has images, so that every position shows every image once)", 0, 2147483647},
    {"--positions-file", VIL_ARG_STR, &o.positions, "a stream model: top-1 and loss by position in the stream, and in the trained length against beyond it: F.csv or F.json", .meta = "F.csv|F.json"},
};

const VilArgSpec vil_cmd_eval_spec = {
    "eval", "--model CKPT|RUN --data DIR [--split val] [--batch B] [--limit N] [--results-file F.csv|F.json] [--predictions-file F.csv|F.jsonl] [options]",
    "Top-1 and top-5 accuracy and the loss (the mean cross-entropy, no label\n"
    "smoothing) of a checkpoint on a whole split with the evaluation transform it\n"
    "was trained with (resize to size / crop_pct, bicubic, center crop,\n"
    "normalize). The last line holds the result. An image that cannot be read is\n"
    "named and not counted, and the exit code is then 1 unless --skip-bad. A stream\n"
    "model (family = stream) reads streams of --stream-len images and counts each\n"
    "image's readout; --positions-file gives them by position in the stream.",
    ARGS, (int)(sizeof ARGS / sizeof ARGS[0]), 0, 0};

/* --results-file's and --predictions-file's names: their formats, and no input among them (the
 * model, the labels and the images are inputs, which no output may name: vil/files.h), checked
 * before any image is read. 0, or 2 after the message. */
static int check_outputs(void) {
    if (o.results && !vil_summary_format(o.results)) {
        vil_cli_bad_choice("eval", "--results-file", "a name ending in .csv or .json", o.results);
        if (vil_results_format(o.results) == VIL_RESULTS_JSONL)
            fprintf(stderr, "vil eval: --results-file is the summary; each image's rows go to --predictions-file\n");
        return 2;
    }
    if (o.predictions && !vil_results_format(o.predictions))
        return vil_cli_bad_choice("eval", "--predictions-file", "a name ending in .csv or .jsonl", o.predictions);
    if (o.positions && !vil_summary_format(o.positions))
        return vil_cli_bad_choice("eval", "--positions-file", "a name ending in .csv or .json", o.positions);
    if (vil_cli_progress_mode("eval", o.progress) < 0) return 2;
    vil_inputs_track(1);
    if (o.labels) vil_input_add(o.labels);
    if ((o.results && vil_output_check(o.results, ".csv .json", "--results-file") != 0) ||
        (o.predictions && vil_output_check(o.predictions, ".csv .jsonl", "--predictions-file") != 0) ||
        (o.positions && vil_output_check(o.positions, ".csv .json", "--positions-file") != 0))
        return 2;
    if (o.results && o.predictions && same_file(o.results, o.predictions)) {
        fprintf(stderr, "vil eval: --results-file and --predictions-file name the same file: give "
                        "them two names\n");
        return 2;
    }
    return 0;
}

/* The lines before the pass: the model, the data and the transform, --limit's pick and the
 * batch (*ds becomes --limit's subset). */
static void print_header(const VilModel *m, const VilCheckpointMeta *meta, const VilEvalSpec *ev, const char *note,
                        const char *model, VilDataset **ds, const VilBackend *be) {
    const VilConfig *c = &m->cfg;
    char name[96];
    printf("eval: %s%s%s (%s, %zu parameters, %d x %d) on %s\n", model, meta->weights[0] ? ":" : "",
           meta->weights, vil_printable(name, sizeof name, c->name), m->param_count, c->img_size,
           c->img_size, be->name);
    char moved[128];
    if (meta->trained_grid) printf("note: %s\n", vil_cli_pos_note(c, meta, moved, sizeof moved));
    if (c->family_kind == VIL_FAMILY_STREAM)
        printf("data: %s: %d images, %d classes, as they are (%d x %d)\n", vil_dataset_source(*ds),
               vil_dataset_size(*ds), vil_dataset_num_classes(*ds), c->img_size, c->img_size);
    else
        printf("data: %s: %d images, %d classes; resize %d, center crop %d (%s)\n",
               vil_dataset_source(*ds), vil_dataset_size(*ds), vil_dataset_num_classes(*ds),
               vil_eval_scale_size(c->img_size, ev->crop_pct), c->img_size, note);
    char took[256];
    int limited = o.limit > 0 && o.limit < vil_dataset_size(*ds);
    vil_eval_limit(ds, o.limit, took, sizeof took);
    if (took[0]) printf("%s\n", took);
    if (c->family_kind == VIL_FAMILY_STREAM)
        printf("streams: %d of %d images, %d per forward, the state carried (trained on streams of %d)\n",
               o.streams ? o.streams : vil_dataset_size(*ds), o.stream_len ? o.stream_len : c->stream_len,
               c->stream_chunk, c->stream_len);
    int eb = vil_eval_batch(*ds, o.batch, 0);
    if (eb != o.batch) /* said once: the loader and the model are sized for eb */
        printf("note: batch %d (--batch %d capped at %s %d images)\n", eb, o.batch, limited ? "--limit's" : "the split's", eb);
    if (strcmp(be->name, "cpu") == 0) vil_cli_print_threads(stdout, o.workers);
    fflush(stdout);
}

/* --predictions-file's rows open, named by the checkpoint's classes, else the data's (*names:
 * their malloc'd copy, NC of them, or NULL). 0, or -1 (reported). */
static int open_predictions(Rows *rows, const VilCheckpointMeta *meta, int NC, char ***names) {
    *names = NULL;
    if (!meta->class_names && vil_dataset_num_classes(rows->ds) == NC) {
        *names = vil_calloc((size_t)NC, sizeof **names);
        for (int k = 0; k < NC; k++) (*names)[k] = vil_strdup(vil_dataset_class_name(rows->ds, k));
    }
    rows->res = vil_results_open(o.predictions, (VilResultsFormat)vil_results_format(o.predictions), o.topk, NC,
                                 meta->class_names ? meta->class_names : *names, 1);
    return rows->res ? 0 : -1;
}

/* A stream model's flags: only for one, and a length of whole chunks. 0, or 2 after the message. */
static int check_streams(const VilModel *m, const char *model) {
    const VilConfig *c = &m->cfg;
    char shown[1024];
    if (c->family_kind != VIL_FAMILY_STREAM && (o.stream_len || o.streams || o.positions)) {
        fprintf(stderr, "vil eval: --stream-len, --streams and --positions-file are for a stream model "
                        "(family = stream); %s is a %s model\n", vil_printable(shown, sizeof shown, model),
                c->family);
        return 2;
    }
    if (o.stream_len && o.stream_len % c->stream_chunk) {
        fprintf(stderr, "vil eval: --stream-len %d is not whole chunks of the model's stream_chunk %d: give a "
                        "multiple of it\n", o.stream_len, c->stream_chunk);
        return 2;
    }
    return 0;
}

/* A stream model's accuracy in its trained length against beyond it, and --positions-file.
 * 0, or -1 (reported). */
static int report_positions(const VilEvalPositions *p, const VilModel *m, const char *model) {
    int K = m->cfg.stream_len;
    long n;
    double t, l;
    vil_positions_span(p, 1, K, &n, &t, &l);
    printf("in length (positions 1-%d): top-1 %.2f%%  loss %.4f  (%ld images)\n", K, t, l, n);
    if (p->n > K) {
        vil_positions_span(p, K + 1, p->n, &n, &t, &l);
        printf("beyond (positions %d-%d): top-1 %.2f%%  loss %.4f  (%ld images)\n", K + 1, p->n, t, l, n);
        vil_positions_span(p, p->n - K + 1, p->n, &n, &t, &l);
        printf("the last %d (positions %d-%d): top-1 %.2f%%  loss %.4f\n", K, p->n - K + 1, p->n, t, l);
    }
    if (!o.positions) return 0;
    if (vil_positions_write(o.positions, model, p, K) != 0) return -1;
    char shown[1024];
    printf("wrote %s (%d positions)\n", vil_printable(shown, sizeof shown, o.positions), p->n);
    return 0;
}

/* After the pass: the result line, the predictions file closed, the unreadable images' verdict,
 * and the summary file (only a result that stands). 0, or -1 (reported). */
static int report(const VilEvalResult *r, Rows *rows, const VilModel *m, const VilCheckpointMeta *meta,
                  const VilEvalSpec *ev, const char *model) {
    if (r->images == 0) {
        vil_error("no images were evaluated%s", r->bad ? ": none could be read" : "");
        return -1;
    }
    double top1 = 100.0 * r->top1 / r->images, top5 = 100.0 * r->top5 / r->images, loss = r->loss_sum / r->images;
    printf("top-1 %.2f%%  top-5 %.2f%%  loss %.4f  (%ld images; %ld unreadable, left out; %.1f s)\n",
           top1, top5, loss, r->images, r->bad, r->seconds);
    char shown[1024];
    if (rows->res) {
        long nrows = vil_results_rows(rows->res);
        VilResults *res = rows->res;
        rows->res = NULL;
        if (vil_results_close(res) != 0) return -1;
        printf("wrote %s (%ld rows)\n", vil_printable(shown, sizeof shown, o.predictions), nrows);
    }
    if (r->bad && !o.skip_bad) {
        vil_error("%ld images could not be read (named above) and are not in the result: fix "
                  "the data, or pass --skip-bad to accept a result without them", r->bad);
        return -1;
    }
    if (!o.results) return 0;
    char mname[4200];
    snprintf(mname, sizeof mname, "%s%s%s", model, meta->weights[0] ? ":" : "", meta->weights);
    VilEvalSummary sum = {.model = mname, .top1 = top1, .top5 = top5, .loss = loss, .count = r->images,
                          .params = m->param_count, .img_size = m->cfg.img_size, .crop_pct = ev->crop_pct,
                          .interpolation = "bicubic"};
    if (vil_summary_write(o.results, &sum) != 0) return -1;
    printf("wrote %s\n", vil_printable(shown, sizeof shown, o.results));
    return 0;
}

int vil_cmd_eval(int argc, char **argv) {
    o = (Flags){.split = "val", .device = "auto", .progress = "auto", .pos = "interp", .batch = 64, .workers = 4, .topk = 5,
                .max_pixels = (int)vil_image_max_pixels()};
    int rc = vil_args_parse_flags(&vil_cmd_eval_spec, argc, argv);
    if (rc >= 0) return rc;
    /* the numbers' ranges are checked as they are parsed */
    int pos = vil_cli_pos_mode("eval", o.pos);
    if (pos < 0 || !vil_cli_crop_pct_ok("eval", o.crop_pct) || check_outputs() != 0) return 2;
    VilDataset *ds;
    const VilBackend *be;
    VilModel m;
    VilCheckpointMeta meta;
    char *model_file;
    const char *model = vil_cli_model_path("eval", o.model, &o.ema, &model_file);
    if (!model) return 1;
    VilCheckpointOpts lo = {.img_size = o.img_size, .ema = o.ema, .pos = (VilPosMode)pos};
    if ((rc = vil_cli_open_eval("eval", model, o.data, o.split, o.labels, o.device, o.max_pixels, o.threads, &lo, &ds,
                                &be, &m, &meta)) != 0) {
        free(model_file);
        return rc;
    }
    VilEvalSpec ev;
    char note[128];
    if ((rc = check_streams(&m, model)) != 0) {
        vil_checkpoint_meta_free(&meta);
        vil_model_free(&m);
        vil_dataset_free(ds);
        free(model_file);
        return rc;
    }
    vil_eval_spec_resolve(&ev, &meta, o.crop_pct, m.cfg.in_chans, note, sizeof note);
    print_header(&m, &meta, &ev, note, model, &ds, be);
    /* the names of the model's classes (the checkpoint's, else the data's) for the results */
    int NC = m.cfg.num_classes;
    char **names = NULL;
    Rows rows = {NULL, ds};
    /* a stream model's counts by position: one per image of its evaluation streams */
    int stream = m.cfg.family_kind == VIL_FAMILY_STREAM, npos = o.stream_len ? o.stream_len : m.cfg.stream_len;
    VilStreamSpec spec = {.len = npos, .streams = o.streams};
    VilEvalPositions bypos = {stream ? npos : 0, vil_calloc(stream ? npos : 1, sizeof(long)),
                            vil_calloc(stream ? npos : 1, sizeof(long)), vil_calloc(stream ? npos : 1, sizeof(double))};
    VilEvalSink sink = {o.predictions ? add_rows : NULL, &rows, NULL, stream ? &bypos : NULL};
    rc = 1;
    if (!o.predictions || open_predictions(&rows, &meta, NC, &names) == 0) {
        VilEvalResult r;
        VilProgress prog;
        vil_progress_init(&prog, stdout, (VilProgressMode)vil_progress_parse(o.progress));
        int failed = vil_eval_dataset(&m, ds, &ev, o.batch, o.workers, &spec, &prog, "  ",
                                      o.predictions || stream ? &sink : NULL, &r) != 0;
        vil_progress_line(&prog); /* the redrawn line off */
        if (!failed && report(&r, &rows, &m, &meta, &ev, model) == 0 &&
            (!stream || report_positions(&bypos, &m, model) == 0))
            rc = 0;
    }
    free(bypos.count), free(bypos.top1), free(bypos.loss);
    vil_results_free(rows.res);
    if (names)
        for (int k = 0; k < NC; k++) free(names[k]);
    free(names);
    free(model_file);
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&m);
    vil_dataset_free(ds);
    return rc;
}
