/* bench_data.c: `vil bench-data`: runs the loader as training does (RA sampler, decode,
 * RandomResizedCrop, flip, RandAugment, normalize, erasing, Mixup/CutMix) with a consumer
 * that only hands batches back, and reports images/s, per worker thread and per CPU second. */
#include "data/bench_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "data/dataset.h"
#include "data/loader.h"
#include "vil/args.h"
#include "vil/common.h"

static double cpu_seconds(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0.0;
    return (double)ru.ru_utime.tv_sec + 1e-6 * ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * ru.ru_stime.tv_usec;
}

/* Next batch, moving on to the next epoch at the end of one. NULL on a loader failure. */
static const VilBatch *next_any(VilLoader *l, int *epoch) {
    const VilBatch *b = vil_loader_next_batch(l);
    if (b || vil_loader_error(l)) return b;
    vil_loader_start_epoch(l, ++*epoch);
    return vil_loader_next_batch(l);
}

int vil_cmd_bench_data(int argc, char **argv) {
    const char *data = NULL, *split = "train", *labels = NULL;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = ncpu > 0 ? (int)ncpu : 1, batches = 20, warmup = 3, res = 224, batch = 64;
    int prefetch = 0, channels = 0, eval = 0, no_mixup = 0, seed = 0, randaug_n = -1;
    float reprob = -1.0f;
    VilArg args[] = {
        {"--data", VIL_ARG_STR, &data, "dataset: ImageNet-style root, IDX folder, or flat folder"},
        {"--split", VIL_ARG_STR, &split, "train or val"},
        {"--labels", VIL_ARG_STR, &labels, "labels file for a flat folder (\"filename label\")"},
        {"--threads", VIL_ARG_INT, &threads, "loader worker threads"},
        {"--batches", VIL_ARG_INT, &batches, "batches timed"},
        {"--warmup", VIL_ARG_INT, &warmup, "batches run before timing"},
        {"--res", VIL_ARG_INT, &res, "output resolution"},
        {"--batch", VIL_ARG_INT, &batch, "batch size"},
        {"--prefetch", VIL_ARG_INT, &prefetch, "batches prepared ahead (0: threads + 1)"},
        {"--channels", VIL_ARG_INT, &channels, "1 or 3 (0: the dataset's own)"},
        {"--seed", VIL_ARG_INT, &seed, "sampler and augmentation seed"},
        {"--eval", VIL_ARG_FLAG, &eval, "time the eval transform (resize, center crop) instead"},
        {"--no-mixup", VIL_ARG_FLAG, &no_mixup, "train transform without Mixup/CutMix"},
        {"--randaug-n", VIL_ARG_INT, &randaug_n, "RandAugment ops per image (-1: the recipe's 2)"},
        {"--reprob", VIL_ARG_FLOAT, &reprob, "random erasing probability (-1: the recipe's 0.25)"},
    };
    VilArgSpec spec = {
        "bench-data", "--data DIR [--split train|val] [--threads N] [--batches K] [--res R] [--batch B]",
        "Measures the input pipeline: decoding and the full training transform (RandomResizedCrop,\n"
        "flip, RandAugment rand-m9-mstd0.5-inc1, normalize, random erasing 0.25, Mixup 0.8 /\n"
        "CutMix 1.0 with smoothing 0.1) through the threaded loader, after a warm-up. Prints\n"
        "images/s, images/s per worker thread, and images per CPU second of the process.",
        args, (int)(sizeof args / sizeof args[0]), 0, 0};
    char **pos;
    int npos;
    int rc = vil_args_parse(&spec, argc, argv, &pos, &npos);
    if (rc == VIL_ARGS_HELP) return 0;
    if (rc != VIL_ARGS_OK) return 2;
    free(pos);
    if (!data) {
        fprintf(stderr, "vil bench-data: --data is required\n");
        vil_args_usage(&spec, 1);
        return 2;
    }
    const char *bad = NULL;
    if (threads < 1 || threads > 1024) bad = "--threads must be in [1, 1024]";
    else if (batches < 1) bad = "--batches must be >= 1";
    else if (warmup < 0) bad = "--warmup must be >= 0";
    else if (res < 8 || res > 4096) bad = "--res must be in [8, 4096]";
    else if (batch < 1) bad = "--batch must be >= 1";
    else if (prefetch < 0) bad = "--prefetch must be >= 0";
    else if (channels != 0 && channels != 1 && channels != 3) bad = "--channels must be 0, 1 or 3";
    if (bad) {
        fprintf(stderr, "vil bench-data: %s\n", bad);
        vil_args_usage(&spec, 1);
        return 2;
    }

    char err[2048];
    VilDataset *ds = vil_dataset_open(data, split, labels, err, sizeof err);
    if (!ds) {
        vil_error("%s", err);
        return 1;
    }
    if (!channels) channels = vil_dataset_channels(ds);
    int K = vil_dataset_num_classes(ds);
    VilLoaderConfig cfg;
    vil_loader_config_default(&cfg, eval ? VIL_LOADER_EVAL : VIL_LOADER_TRAIN, res, channels,
                              batch, K);
    cfg.threads = threads;
    cfg.prefetch = prefetch ? prefetch : threads + 1;
    cfg.seed = (uint64_t)seed;
    if (no_mixup && !eval) vil_mixup_config_none(&cfg.mixup, K, cfg.mixup.smoothing);
    if (randaug_n >= 0) cfg.train.randaug_n = randaug_n;
    if (reprob >= 0.0f) cfg.train.reprob = reprob;
    VilLoader *l = vil_loader_create(ds, &cfg, err, sizeof err);
    if (!l) {
        vil_error("%s", err);
        vil_dataset_free(ds);
        return 1;
    }
    printf("dataset:   %s: %d images, %d classes\n", vil_dataset_source(ds), vil_dataset_size(ds), K);
    if (eval)
        printf("pipeline:  eval (resize, center crop %.3f, normalize)", cfg.crop_pct);
    else
        printf("pipeline:  train (RRC, flip, RandAugment n%d m%g, erasing %g%s)", cfg.train.randaug_n,
               cfg.train.randaug_m, cfg.train.reprob, no_mixup ? "" : ", Mixup/CutMix");
    printf(", %d x %d x %d, batch %d, %d threads, prefetch %d\n", channels, res, res, batch,
           threads, cfg.prefetch);
    int epoch = 0;
    if (vil_loader_start_epoch(l, epoch) == 0) {
        vil_error("an epoch of '%s' holds %d samples per rank, fewer than one batch of %d: lower "
                  "--batch", data, vil_loader_epoch_length(l), batch);
        vil_loader_free(l);
        vil_dataset_free(ds);
        return 1;
    }
    int ret = 0;
    for (int i = 0; i < warmup; i++) {
        const VilBatch *b = next_any(l, &epoch);
        if (!b) goto fail;
        vil_loader_release_batch(l, b);
    }
    double t0 = vil_now(), c0 = cpu_seconds();
    long images = 0;
    for (int i = 0; i < batches; i++) {
        const VilBatch *b = next_any(l, &epoch);
        if (!b) goto fail;
        images += b->n;
        vil_loader_release_batch(l, b);
    }
    double dt = vil_now() - t0, dc = cpu_seconds() - c0;
    VilLoaderStats st;
    vil_loader_stats(l, &st);
    printf("timed:     %ld images in %.3f s (%d batches after %d warm-up)\n", images, dt, batches,
           warmup);
    printf("images/s:  %.1f\n", images / dt);
    printf("per thread: %.1f images/s (%d threads)\n", images / dt / threads, threads);
    printf("per CPU s: %.1f images per CPU second (process CPU time %.2f s)\n",
           dc > 0 ? images / dc : 0.0, dc);
    if (st.total_bad) printf("bad files: %ld distinct, %ld reads replaced\n", st.distinct_bad, st.total_bad);
    goto done;
fail:
    vil_error("the loader stopped: %s", vil_loader_error(l) ? vil_loader_error(l) : "unknown error");
    ret = 1;
done:
    vil_loader_free(l);
    vil_dataset_free(ds);
    return ret;
}
