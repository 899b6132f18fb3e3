/* eval.c: `vil eval --model CKPT --data DIR`: top-1 / top-5 of a checkpoint on a whole split
 * with the evaluation transform it was trained with (the pass itself: eval/eval.c), and with
 * --results-file each image's top-k classes and label. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_arg.h"
#include "eval/eval.h"
#include "eval/results.h"
#include "formats/checkpoint.h"
#include "vil/common.h"
#include "vil/limits.h"
#include "data/image.h"

/* --results-file: each batch's rows, named by the dataset's paths */
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

int vil_cmd_eval(int argc, char **argv) {
    const char *model = NULL, *data = NULL, *split = "val", *labels = NULL, *device = "auto",
               *results = NULL, *progress = "auto";
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
        {"--limit", VIL_ARG_INT, &limit, "evaluate only the first N images (0: all)", 0, 2147483647},
        {"--results-file", VIL_ARG_STR, &results, "write each image's top-k classes and label: F.csv (timm's columns) or F.jsonl", .meta = "F.csv|F.jsonl"},
        {"--topk", VIL_ARG_INT, &topk, "classes per row of --results-file", 1, VIL_MAX_CLASSES, "K"},
        {"--max-pixels", VIL_ARG_INT, &max_pixels, VIL_MAX_PIXELS_HELP},
        {"--skip-bad", VIL_ARG_FLAG, &skip_bad, "images that cannot be read are named and left out, and the exit code stays 0"},
        {"--progress", VIL_ARG_STR, &progress, VIL_PROGRESS_HELP},
    };
    VilArgSpec spec = {"eval", "--model CKPT|RUN --data DIR [--split val] [--batch B] [--results-file F.csv|F.jsonl] [options]",
                       "Top-1 and top-5 accuracy of a checkpoint on a whole split with the\n"
                       "evaluation transform it was trained with (resize to size / crop_pct,\n"
                       "bicubic, center crop, normalize). The last line holds the result. An image\n"
                       "that cannot be read is named and not counted, and the exit code is then 1\n"
                       "unless --skip-bad.",
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
    if (results && !vil_results_format(results))
        return vil_cli_bad_choice("eval", "--results-file", "a name ending in .csv or .jsonl", results);
    int pmode = vil_cli_progress_mode("eval", progress);
    if (pmode < 0) return 2;
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
    int eb = vil_eval_batch(ds, batch, limit);
    if (eb != batch) /* said once: the loader and the model are sized for eb */
        printf("note: batch %d (--batch %d capped at %s %d images)\n", eb, batch,
               limit > 0 && limit < vil_dataset_size(ds) ? "--limit's" : "the split's", eb);
    if (strcmp(be->name, "cpu") == 0) vil_cli_print_threads(stdout, workers);
    fflush(stdout);
    /* the names of the model's classes (the checkpoint's, else the data's) for the results */
    int NC = c->num_classes;
    char **names = NULL;
    Rows rows = {NULL, ds};
    VilEvalSink sink = {add_rows, &rows};
    if (results) {
        if (!meta.class_names && vil_dataset_num_classes(ds) == NC) {
            names = vil_calloc((size_t)NC, sizeof *names);
            for (int k = 0; k < NC; k++) names[k] = vil_strdup(vil_dataset_class_name(ds, k));
        }
        rows.res = vil_results_open(results, (VilResultsFormat)vil_results_format(results), topk, NC,
                                    meta.class_names ? meta.class_names : names, 1);
        if (!rows.res) goto done;
    }
    VilEvalResult r;
    VilProgress prog;
    vil_progress_init(&prog, stdout, (VilProgressMode)pmode);
    int failed = vil_eval_dataset(&m, ds, &ev, batch, workers, limit, &prog, "  ", results ? &sink : NULL, &r) != 0;
    vil_progress_line(&prog); /* the redrawn line off */
    if (failed) goto done;
    if (r.images == 0) {
        vil_error("no images were evaluated%s", r.bad ? ": none could be read" : "");
        goto done;
    }
    printf("top-1 %.2f%%  top-5 %.2f%%  (%ld images; %ld unreadable, left out; %.1f s)\n",
           100.0 * r.top1 / r.images, 100.0 * r.top5 / r.images, r.images, r.bad, r.seconds);
    if (rows.res) {
        long nrows = vil_results_rows(rows.res);
        VilResults *res = rows.res;
        rows.res = NULL;
        char shown[1024];
        if (vil_results_close(res) != 0) goto done;
        printf("wrote %s (%ld rows)\n", vil_printable(shown, sizeof shown, results), nrows);
    }
    if (r.bad && !skip_bad) {
        vil_error("%ld images could not be read (named above) and are not in the result: fix "
                  "the data, or pass --skip-bad to accept a result without them", r.bad);
        goto done;
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
