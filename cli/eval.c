/* eval.c: `vil eval --model CKPT --data DIR`: top-1 / top-5 and the loss of a checkpoint on a
 * whole split (or --limit's images spread over its classes) with the evaluation transform it was
 * trained with (the pass itself: eval/eval.c); --results-file writes the summary as timm's
 * validate.py does, --predictions-file each image's top-k classes and label. */
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

int vil_cmd_eval(int argc, char **argv) {
    const char *model = NULL, *data = NULL, *split = "val", *labels = NULL, *device = "auto",
               *results = NULL, *predictions = NULL, *progress = "auto";
    int batch = 64, img_size = 0, workers = 4, limit = 0, ema = 0, skip_bad = 0, threads = 0, topk = 5;
    int max_pixels = (int)vil_image_max_pixels();
    float crop_pct = 0;
    VilArg args[] = {
        {"--model", VIL_ARG_STR, &model, "checkpoint (.safetensors, or a PyTorch .pth), or a run folder: its best.safetensors", .meta = "CKPT|RUN"},
        {"--ema", VIL_ARG_FLAG, &ema, "a .pth training checkpoint's model_ema, or a run folder's ema.safetensors"},
        {"--data", VIL_ARG_STR, &data, VIL_DATA_HELP},
        {"--split", VIL_ARG_STR, &split, "split to evaluate: val, test or train"},
        {"--labels", VIL_ARG_STR, &labels, "labels file for a flat folder (\"filename label\" lines)"},
        {"--batch", VIL_ARG_INT, &batch, "batch size", 1, VIL_MAX_BATCH},
        {"--device", VIL_ARG_STR, &device, "cpu, cuda or auto"},
        {"--crop-pct", VIL_ARG_FLOAT, &crop_pct, "resize the shorter side to size / crop_pct, then center crop (0: the checkpoint's, else 0.875)", .meta = "F"},
        {"--img-size", VIL_ARG_INT, &img_size, "evaluation resolution (0: the checkpoint's); another size interpolates pos_embed", 0, VIL_MAX_IMG_SIZE},
        {"--workers", VIL_ARG_INT, &workers, "data loader threads", 1, 256},
        {"--threads", VIL_ARG_INT, &threads, VIL_THREADS_HELP},
        {"--limit", VIL_ARG_INT, &limit, "evaluate N images spread over the classes: round robin in class order, each class's first ones (0: all)", 0, 2147483647},
        {"--results-file", VIL_ARG_STR, &results, "write the summary (model, top1, top1_err, top5, top5_err, param_count, img_size, crop_pct, interpolation, loss, count), as timm's validate.py: F.csv or F.json", .meta = "F.csv|F.json"},
        {"--predictions-file", VIL_ARG_STR, &predictions, "write each image's top-k classes and label: F.csv (timm's inference columns) or F.jsonl", .meta = "F.csv|F.jsonl"},
        {"--topk", VIL_ARG_INT, &topk, "classes per row of --predictions-file", 1, VIL_MAX_CLASSES, "K"},
        {"--max-pixels", VIL_ARG_INT, &max_pixels, VIL_MAX_PIXELS_HELP},
        {"--skip-bad", VIL_ARG_FLAG, &skip_bad, "images that cannot be read are named and left out, and the exit code stays 0"},
        {"--progress", VIL_ARG_STR, &progress, VIL_PROGRESS_HELP},
    };
    VilArgSpec spec = {"eval", "--model CKPT|RUN --data DIR [--split val] [--batch B] [--limit N] [--results-file F.csv|F.json] [--predictions-file F.csv|F.jsonl] [options]",
                       "Top-1 and top-5 accuracy and the loss (the mean cross-entropy, no label\n"
                       "smoothing) of a checkpoint on a whole split with the evaluation transform it\n"
                       "was trained with (resize to size / crop_pct, bicubic, center crop,\n"
                       "normalize). The last line holds the result. An image that cannot be read is\n"
                       "named and not counted, and the exit code is then 1 unless --skip-bad.",
                       args, (int)(sizeof args / sizeof args[0]), 0, 0};
    int rc = vil_args_parse_flags(&spec, argc, argv);
    if (rc >= 0) return rc;
    if (!model || !data) {
        fprintf(stderr, "vil eval: --model and --data are required\n");
        vil_args_usage_hint(&spec);
        return 2;
    }
    /* the numbers' ranges are checked as they are parsed */
    if (!vil_cli_crop_pct_ok("eval", crop_pct)) return 2;
    if (results && !vil_summary_format(results)) {
        vil_cli_bad_choice("eval", "--results-file", "a name ending in .csv or .json", results);
        if (vil_results_format(results) == VIL_RESULTS_JSONL)
            fprintf(stderr, "vil eval: --results-file is the summary; each image's rows go to --predictions-file\n");
        return 2;
    }
    if (predictions && !vil_results_format(predictions))
        return vil_cli_bad_choice("eval", "--predictions-file", "a name ending in .csv or .jsonl", predictions);
    int pmode = vil_cli_progress_mode("eval", progress);
    if (pmode < 0) return 2;
    /* the model, the labels and the images are inputs, which no output may name; the outputs
     * checked before any image is read (vil/files.h) */
    vil_inputs_track(1);
    if (labels) vil_input_add(labels);
    if ((results && vil_output_check(results, ".csv .json", "--results-file") != 0) ||
        (predictions && vil_output_check(predictions, ".csv .jsonl", "--predictions-file") != 0))
        return 2;
    if (results && predictions && same_file(results, predictions)) {
        fprintf(stderr, "vil eval: --results-file and --predictions-file name the same file: give "
                        "them two names\n");
        return 2;
    }
    VilDataset *ds;
    const VilBackend *be;
    VilModel m;
    VilCheckpointMeta meta;
    char *model_file;
    if (!(model = vil_cli_model_path("eval", model, &ema, &model_file))) return 1;
    VilCheckpointOpts lo = {.img_size = img_size, .ema = ema};
    if ((rc = vil_cli_open_eval("eval", model, data, split, labels, device, max_pixels, threads, &lo, &ds, &be, &m,
                                &meta)) != 0) {
        free(model_file);
        return rc;
    }
    const VilConfig *c = &m.cfg;
    VilEvalSpec ev;
    char note[128];
    vil_eval_spec_resolve(&ev, &meta, crop_pct, c->in_chans, note, sizeof note);
    rc = 1;
    char name[96];
    printf("eval: %s%s%s (%s, %zu parameters, %d x %d) on %s\n", model, meta.weights[0] ? ":" : "",
           meta.weights, vil_printable(name, sizeof name, c->name), m.param_count, c->img_size,
           c->img_size, be->name);
    printf("data: %s: %d images, %d classes; resize %d, center crop %d (%s)\n",
           vil_dataset_source(ds), vil_dataset_size(ds), vil_dataset_num_classes(ds),
           vil_eval_scale_size(c->img_size, ev.crop_pct), c->img_size, note);
    char took[256];
    int limited = limit > 0 && limit < vil_dataset_size(ds);
    vil_eval_limit(&ds, limit, took, sizeof took);
    if (took[0]) printf("%s\n", took);
    int eb = vil_eval_batch(ds, batch, 0);
    if (eb != batch) /* said once: the loader and the model are sized for eb */
        printf("note: batch %d (--batch %d capped at %s %d images)\n", eb, batch, limited ? "--limit's" : "the split's", eb);
    if (strcmp(be->name, "cpu") == 0) vil_cli_print_threads(stdout, workers);
    fflush(stdout);
    /* the names of the model's classes (the checkpoint's, else the data's) for the results */
    int NC = c->num_classes;
    char **names = NULL;
    Rows rows = {NULL, ds};
    VilEvalSink sink = {add_rows, &rows};
    if (predictions) {
        if (!meta.class_names && vil_dataset_num_classes(ds) == NC) {
            names = vil_calloc((size_t)NC, sizeof *names);
            for (int k = 0; k < NC; k++) names[k] = vil_strdup(vil_dataset_class_name(ds, k));
        }
        rows.res = vil_results_open(predictions, (VilResultsFormat)vil_results_format(predictions), topk, NC,
                                    meta.class_names ? meta.class_names : names, 1);
        if (!rows.res) goto done;
    }
    VilEvalResult r;
    VilProgress prog;
    vil_progress_init(&prog, stdout, (VilProgressMode)pmode);
    int failed = vil_eval_dataset(&m, ds, &ev, batch, workers, &prog, "  ", predictions ? &sink : NULL, &r) != 0;
    vil_progress_line(&prog); /* the redrawn line off */
    if (failed) goto done;
    if (r.images == 0) {
        vil_error("no images were evaluated%s", r.bad ? ": none could be read" : "");
        goto done;
    }
    double top1 = 100.0 * r.top1 / r.images, top5 = 100.0 * r.top5 / r.images, loss = r.loss_sum / r.images;
    printf("top-1 %.2f%%  top-5 %.2f%%  loss %.4f  (%ld images; %ld unreadable, left out; %.1f s)\n",
           top1, top5, loss, r.images, r.bad, r.seconds);
    if (rows.res) {
        long nrows = vil_results_rows(rows.res);
        VilResults *res = rows.res;
        rows.res = NULL;
        char shown[1024];
        if (vil_results_close(res) != 0) goto done;
        printf("wrote %s (%ld rows)\n", vil_printable(shown, sizeof shown, predictions), nrows);
    }
    if (r.bad && !skip_bad) {
        vil_error("%ld images could not be read (named above) and are not in the result: fix "
                  "the data, or pass --skip-bad to accept a result without them", r.bad);
        goto done;
    }
    if (results) { /* only a result that stands: after the check of unreadable images */
        char mname[4200];
        snprintf(mname, sizeof mname, "%s%s%s", model, meta.weights[0] ? ":" : "", meta.weights);
        VilEvalSummary sum = {.model = mname, .top1 = top1, .top5 = top5, .loss = loss, .count = r.images,
                              .params = m.param_count, .img_size = c->img_size, .crop_pct = ev.crop_pct,
                              .interpolation = "bicubic"};
        char shown[1024];
        if (vil_summary_write(results, &sum) != 0) goto done;
        printf("wrote %s\n", vil_printable(shown, sizeof shown, results));
    }
    rc = 0;
done:
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
