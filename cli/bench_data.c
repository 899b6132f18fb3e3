/* bench_data.c: `vil bench-data`: runs the loader as training does (RA sampler, decode,
 * RandomResizedCrop, flip, RandAugment, normalize, erasing, Mixup/CutMix) with a consumer
 * that only hands batches back, and reports images/s, per worker thread and per CPU second. */
#include "cli/commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "data/dataset.h"
#include "data/image.h"
#include "data/loader.h"
#include "data/randaugment.h"
#include "data/transform.h"
#include "cli/args.h"
#include "vil/common.h"

/* user and system CPU seconds and minor page faults of the process so far */
typedef struct {
    double user, sys;
    long minflt;
} Usage;
static Usage usage_now(void) {
    struct rusage ru;
    Usage u = {0.0, 0.0, 0};
    if (getrusage(RUSAGE_SELF, &ru) != 0) return u;
    u.user = (double)ru.ru_utime.tv_sec + 1e-6 * ru.ru_utime.tv_usec;
    u.sys = (double)ru.ru_stime.tv_sec + 1e-6 * ru.ru_stime.tv_usec;
    u.minflt = ru.ru_minflt;
    return u;
}

static double thread_cpu_seconds(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0.0;
    return (double)ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* --stages: one thread, CPU time per stage of the training transform on up to `limit` JPEG
 * files of the dataset, each stage timed alone: region decode (at the crop the transform
 * would draw), the bicubic resize of that crop, each RandAugment op at magnitude 9 on the
 * resized images, normalize, erasing (p = 1), and the whole vil_transform_train_file. The
 * expected RandAugment cost per image is the mean over the 15 ops (2 draws x p 0.5). */
static int bench_stages(const VilDataset *ds, const VilTrainTransform *t, int limit, int reps) {
    const int res = t->res, c = t->channels;
    const size_t npx = (size_t)res * res * c;
    /* a file that cannot be read or decoded is skipped, here and in the timings: its message is
     * not the benchmark's output */
    VilErrCapture skipped;
    vil_error_capture(&skipped);
    VilBuffer *files = vil_calloc((size_t)limit, sizeof(VilBuffer));
    int nf = 0, n = vil_dataset_size(ds);
    for (int i = 0; i < n && nf < limit; i++) {
        int k = (int)((long long)i * 7919 % n); /* spread over the classes */
        if (vil_dataset_read_bytes(ds, k, &files[nf]) != 0) continue;
        int w, h;
        VilFormat f;
        if (vil_image_info(files[nf].data, files[nf].size, &w, &h, &f) == 0 &&
            f == VIL_FORMAT_JPEG && (long long)w * h <= 4000000LL)
            nf++;
        else
            vil_buffer_free(&files[nf]);
    }
    if (nf == 0) {
        vil_error_release(&skipped);
        vil_error("--stages times the JPEG path: the dataset holds no JPEG file of at most 4 megapixels "
                  "(use an ImageNet-style folder, e.g. one made by tools/make_corpus.py)");
        free(files);
        return 1;
    }
    const int keep_max = 64;
    unsigned char *keep = vil_malloc(npx * keep_max), *img = vil_malloc(2 * npx);
    float *out = vil_malloc(sizeof(float) * npx);
    memset(out, 0, sizeof(float) * npx); /* written once: no page faults in the timings */
    int nkeep = 0, cnt = 0;
    double t_dec = 0, t_rs = 0, m_sum = 0;
    VilRng rng;
    vil_rng_seed(&rng, 1);
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < nf; i++) {
            int W, H, l, tp, cw, ch, rx, ry;
            vil_image_info(files[i].data, files[i].size, &W, &H, NULL);
            vil_rrc_params(W, H, t->scale_min, t->scale_max, t->ratio_min, t->ratio_max, &rng, &l, &tp, &cw, &ch);
            VilImage reg;
            double a = thread_cpu_seconds();
            if (t->decode == VIL_DECODE_FAST) {
                /* the fast mode's decode (DCT scale M/8, merged upsampling) and the resize of
                 * its sub-pixel box */
                VilTrainCrop cr;
                if (vil_train_decode_crop(files[i].data, files[i].size, t, l, tp, cw, ch, 0,
                                          &cr) != 0)
                    continue;
                double b = thread_cpu_seconds();
                size_t st = (size_t)cr.reg.w * c;
                int rrc = vil_resize_bicubic_box(img, cr.reg.px + (size_t)cr.vy * st + (size_t)cr.vx * c, cr.vw, cr.vh,
                                                 st, c, res, res, cr.has_box ? cr.box : NULL);
                if (rrc != 0) { /* reported: no memory; the image is left out, as a failed decode */
                    vil_image_free(&cr.reg);
                    continue;
                }
                t_rs += thread_cpu_seconds() - b;
                t_dec += b - a;
                m_sum += cr.scale_num;
                cnt++;
                if (nkeep < keep_max) memcpy(keep + npx * nkeep++, img, npx);
                vil_image_free(&cr.reg);
                continue;
            }
            /* exact: the crop at full scale, as the PERF_NOTES.md history measured it */
            if (vil_jpeg_decode_region(files[i].data, files[i].size, c, l, tp, cw, ch, 1, &reg, &rx,
                                       &ry) != 0)
                continue;
            double b = thread_cpu_seconds();
            size_t st = (size_t)reg.w * c;
            if (vil_resize_bicubic(img, res, res, 0, 0, reg.px + (size_t)(tp - ry) * st + (size_t)(l - rx) * c, cw, ch,
                                   st, c, res, res) != 0) {
                vil_image_free(&reg); /* reported: no memory; left out, as a failed decode */
                continue;
            }
            t_rs += thread_cpu_seconds() - b;
            t_dec += b - a;
            cnt++;
            if (nkeep < keep_max) memcpy(keep + npx * nkeep++, img, npx);
            vil_image_free(&reg);
        }
    printf("stages:    %d JPEG files x %d, one thread, CPU microseconds per image\n", nf, reps);
    if (t->decode == VIL_DECODE_FAST)
        printf("  decode (crop region, fast) %7.1f   (DCT scale M/8, mean M %.2f; merged upsampling)\n", 1e6 * t_dec / cnt,
               m_sum / cnt);
    else
        printf("  decode (crop region)      %8.1f   (exact, the crop at full scale)\n", 1e6 * t_dec / cnt);
    printf("  resize to %d (bicubic)   %8.1f\n", res, 1e6 * t_rs / cnt);
    VilRandAugment ra;
    vil_randaugment_default(&ra, t->mean);
    double ra_sum = 0;
    for (int op = 0; op < VIL_RA_NUM_OPS; op++) {
        double tt = 0;
        int k = 0;
        for (int r = 0; r < reps; r++)
            for (int j = 0; j < nkeep; j++, k++) {
                memcpy(img, keep + npx * j, npx);
                VilImage im = {res, res, c, img};
                double a = thread_cpu_seconds();
                vil_randaugment_op(&im, img + npx, &ra, (VilRaOp)op, 9.0, (k & 1) ? 1 : -1, t->randaug_interp);
                tt += thread_cpu_seconds() - a;
            }
        printf("  %-25s %8.1f\n", VIL_RA_OP_NAMES[op], 1e6 * tt / k);
        ra_sum += tt / k;
    }
    printf("  RandAugment, expected     %8.1f   (mean of the ops: 2 draws x p 0.5)\n", 1e6 * ra_sum / VIL_RA_NUM_OPS);
    double a = thread_cpu_seconds();
    for (int r = 0; r < reps * 16; r++) vil_normalize_chw(out, keep + npx * (r % nkeep), res, res, c, t->mean, t->std);
    printf("  normalize                 %8.1f\n", 1e6 * (thread_cpu_seconds() - a) / (reps * 16));
    a = thread_cpu_seconds();
    for (int r = 0; r < reps * 64; r++) vil_random_erase(out, c, res, res, 1.0f, &rng);
    printf("  random erasing (p = 1)    %8.1f   (the recipe's p = 0.25: a quarter of it)\n",
           1e6 * (thread_cpu_seconds() - a) / (reps * 64));
    cnt = 0;
    a = thread_cpu_seconds();
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < nf; i++, cnt++)
            vil_transform_train_file(files[i].data, files[i].size, t, &rng, out);
    double full = (thread_cpu_seconds() - a) / cnt;
    printf("  whole train transform     %8.1f   = %.0f images per CPU second (no loader, no Mixup)\n", 1e6 * full,
           1.0 / full);
    for (int i = 0; i < nf; i++) vil_buffer_free(&files[i]);
    free(files);
    free(keep);
    free(img);
    free(out);
    vil_error_release(&skipped);
    return 0;
}

/* Next batch, moving on to the next epoch at the end of one. NULL on a loader failure. */
static const VilBatch *next_any(VilLoader *l, int *epoch) {
    const VilBatch *b = vil_loader_next_batch(l);
    if (b || vil_loader_error(l)) return b;
    vil_loader_start_epoch(l, ++*epoch);
    return vil_loader_next_batch(l);
}

/* the flags' values: their defaults set by vil_cmd_bench_data, then filled by vil_args_parse */
typedef struct {
    const char *data, *split, *labels, *decode;
    int threads, batches, warmup, res, batch, prefetch, channels, eval, no_mixup, seed, randaug_n;
    int stages, no_share, max_pixels;
    float reprob;
} Flags;
static Flags o;

static const VilArg ARGS[] = {
    {"--data", VIL_ARG_STR, &o.data, VIL_DATA_HELP, .required = 1},
    {"--split", VIL_ARG_STR, &o.split, "train or val"},
    {"--labels", VIL_ARG_STR, &o.labels, "labels file for a flat folder (\"filename label\")"},
    {"--threads", VIL_ARG_INT, &o.threads, "loader worker threads"},
    {"--batches", VIL_ARG_INT, &o.batches, "batches timed"},
    {"--warmup", VIL_ARG_INT, &o.warmup, "batches run before timing"},
    {"--res", VIL_ARG_INT, &o.res, "output resolution"},
    {"--batch", VIL_ARG_INT, &o.batch, "batch size"},
    {"--prefetch", VIL_ARG_INT, &o.prefetch, "batches prepared ahead (0: threads + 1)"},
    {"--channels", VIL_ARG_INT, &o.channels, "1 or 3 (0: the dataset's own)"},
    {"--seed", VIL_ARG_INT, &o.seed, "sampler and augmentation seed"},
    {"--eval", VIL_ARG_FLAG, &o.eval, "time the eval transform (resize, center crop) instead"},
    {"--no-mixup", VIL_ARG_FLAG, &o.no_mixup, "train transform without Mixup/CutMix"},
    {"--randaug-n", VIL_ARG_INT, &o.randaug_n, "RandAugment ops per image (-1: the recipe's 2)"},
    {"--reprob", VIL_ARG_FLOAT, &o.reprob, "random erasing probability (-1: the recipe's 0.25)"},
    {"--decode", VIL_ARG_STR, &o.decode, "JPEG decode of the train transform: exact (PIL's pixels, the "
                                         "training default) or fast (DCT-scaled, merged chroma)"},
    {"--no-share-decode", VIL_ARG_FLAG, &o.no_share, "decode every sample on its own, also the copies of "
                                                     "repeated augmentation (same output, for comparison)"},
    {"--stages", VIL_ARG_FLAG, &o.stages, "also time each stage of the train transform alone (one thread)"},
    {"--max-pixels", VIL_ARG_INT, &o.max_pixels, VIL_MAX_PIXELS_HELP},
};

const VilArgSpec vil_cmd_bench_data_spec = {
    "bench-data", "--data DIR [--split train|val] [--threads N] [--batches K] [--res R] [--batch B]",
    "Measures the input pipeline: decoding and the full training transform (RandomResizedCrop,\n"
    "flip, RandAugment rand-m9-mstd0.5-inc1, normalize, random erasing 0.25, Mixup 0.8 /\n"
    "CutMix 1.0 with smoothing 0.1) through the threaded loader, after a warm-up. Prints\n"
    "images/s, images/s per worker thread, and images per CPU second of the process.",
    ARGS, (int)(sizeof ARGS / sizeof ARGS[0]), 0, 0};

/* the first flag out of its range, as a message; NULL: all in range */
static const char *bad_flag(void) {
    if (o.threads < 1 || o.threads > 1024) return "--threads must be in [1, 1024]";
    if (o.batches < 1) return "--batches must be >= 1";
    if (o.warmup < 0) return "--warmup must be >= 0";
    if (o.res < 8 || o.res > 4096) return "--res must be in [8, 4096]";
    if (o.batch < 1 || o.batch > 65536) return "--batch must be in [1, 65536]";
    if (!(o.reprob == -1.0f || (o.reprob >= 0.0f && o.reprob <= 1.0f))) return "--reprob must be in [0, 1] (-1: the recipe's)";
    if (o.randaug_n < -1 || o.randaug_n > 16) return "--randaug-n must be in [0, 16] (-1: the recipe's)";
    if (!vil_dataset_split_ok(o.split)) return "--split must be train, val or test";
    if (o.prefetch < 0) return "--prefetch must be >= 0";
    if (o.channels != 0 && o.channels != 1 && o.channels != 3) return "--channels must be 0, 1 or 3";
    if (strcmp(o.decode, "fast") != 0 && strcmp(o.decode, "exact") != 0) return "--decode must be fast or exact";
    return NULL;
}

/* The loader's configuration of the flags for a dataset of K classes (o.channels resolved) */
static void loader_config(VilLoaderConfig *cfg, int K) {
    vil_loader_config_default(cfg, o.eval ? VIL_LOADER_EVAL : VIL_LOADER_TRAIN, o.res, o.channels, o.batch, K);
    cfg->threads = o.threads;
    cfg->prefetch = o.prefetch ? o.prefetch : o.threads + 1;
    cfg->seed = (uint64_t)o.seed;
    if (o.no_mixup && !o.eval) vil_mixup_config_none(&cfg->mixup, K, cfg->mixup.smoothing);
    if (o.randaug_n >= 0) cfg->train.randaug_n = o.randaug_n;
    if (o.reprob >= 0.0f) cfg->train.reprob = o.reprob;
    cfg->train.decode = strcmp(o.decode, "exact") == 0 ? VIL_DECODE_EXACT : VIL_DECODE_FAST;
    cfg->share_decode = !o.no_share;
}

static void print_pipeline(const VilDataset *ds, const VilLoaderConfig *cfg) {
    printf("dataset:   %s: %d images, %d classes\n", vil_dataset_source(ds), vil_dataset_size(ds),
           vil_dataset_num_classes(ds));
    if (o.eval)
        printf("pipeline:  eval (resize, center crop %.3f, normalize)", cfg->crop_pct);
    else
        printf("pipeline:  train (%s JPEG decode, RRC, flip, RandAugment n%d m%g, erasing %g%s)",
               cfg->train.decode == VIL_DECODE_FAST ? "fast" : "exact", cfg->train.randaug_n, cfg->train.randaug_m,
               cfg->train.reprob, o.no_mixup ? "" : ", Mixup/CutMix");
    printf(", %d x %d x %d, batch %d, %d threads, prefetch %d\n", o.channels, o.res, o.res, o.batch,
           o.threads, cfg->prefetch);
}

/* --warmup batches, then --batches timed, and the report. 0, or 1 when the loader stopped
 * (reported). */
static int time_loader(VilLoader *l, const VilLoaderConfig *cfg, int *epoch) {
    for (int i = 0; i < o.warmup; i++) {
        const VilBatch *b = next_any(l, epoch);
        if (!b) return 1;
        vil_loader_release_batch(l, b);
    }
    VilLoaderStats st0, st;
    vil_loader_stats(l, &st0);
    double t0 = vil_now();
    Usage u0 = usage_now();
    long images = 0;
    for (int i = 0; i < o.batches; i++) {
        const VilBatch *b = next_any(l, epoch);
        if (!b) return 1;
        images += b->n;
        vil_loader_release_batch(l, b);
    }
    double dt = vil_now() - t0;
    Usage u1 = usage_now();
    double dc = (u1.user - u0.user) + (u1.sys - u0.sys);
    vil_loader_stats(l, &st);
    printf("timed:     %ld images in %.3f s (%d batches after %d warm-up)\n", images, dt, o.batches, o.warmup);
    printf("images/s:  %.1f\n", images / dt);
    printf("per thread: %.1f images/s (%d threads)\n", images / dt / o.threads, o.threads);
    printf("per CPU s: %.1f images per CPU second (process CPU time %.2f s)\n",
           dc > 0 ? images / dc : 0.0, dc);
    printf("CPU split: user %.2f s, system %.2f s; %.1f minor page faults per image\n",
           u1.user - u0.user, u1.sys - u0.sys, images ? (double)(u1.minflt - u0.minflt) / images : 0.0);
    if (!o.eval) {
        long ns = st.samples - st0.samples, nd = st.decodes - st0.decodes;
        printf("decodes:   %.3f per sample (%s; repeated augmentation x%d, world %d)\n",
               ns ? (double)nd / ns : 0.0,
               cfg->share_decode ? "the copies of an image made together share one decode" : "no sharing",
               cfg->repeats, cfg->world);
    }
    if (st.total_bad)
        printf("bad files: %ld distinct, %ld reads %s\n", st.distinct_bad, st.total_bad,
               o.eval ? "left out" : "replaced by other images of their class");
    return 0;
}

/* the loader on ds: --stages, the first epoch's length, then time_loader. 0, or 1 (reported) */
static int bench_loader(VilDataset *ds, VilLoader *l, const VilLoaderConfig *cfg) {
    if (o.stages && !o.eval && bench_stages(ds, &cfg->train, 200, 2) != 0) return 1;
    int epoch = 0;
    if (vil_loader_start_epoch(l, epoch) == 0) {
        vil_error("an epoch of '%s' holds %d samples per rank, fewer than one batch of %d: lower "
                  "--batch", o.data, vil_loader_epoch_length(l), o.batch);
        return 1;
    }
    int per_epoch = vil_loader_batches_per_epoch(l);
    if (per_epoch < 50 && per_epoch < o.batches)
        printf("note:      an epoch here is %d batch%s (%d samples); the loader restarts its workers at "
               "every epoch boundary, so this measures those restarts too: for the steady state use "
               "a dataset with 50+ batches per epoch\n",
               per_epoch, per_epoch == 1 ? "" : "es", vil_loader_epoch_length(l));
    if (time_loader(l, cfg, &epoch) == 0) return 0;
    vil_error("the loader stopped: %s", vil_loader_error(l) ? vil_loader_error(l) : "unknown error");
    return 1;
}

int vil_cmd_bench_data(int argc, char **argv) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    o = (Flags){.split = "train", .decode = "exact", .threads = ncpu > 0 ? (int)ncpu : 1, .batches = 20,
                .warmup = 3, .res = 224, .batch = 64, .randaug_n = -1, .reprob = -1.0f,
                .max_pixels = (int)vil_image_max_pixels()};
    int rc = vil_args_parse_flags(&vil_cmd_bench_data_spec, argc, argv);
    if (rc >= 0) return rc;
    const char *bad = bad_flag();
    if (bad) {
        fprintf(stderr, "vil bench-data: %s\n", bad);
        vil_args_usage_hint(&vil_cmd_bench_data_spec);
        return 2;
    }
    if (vil_cli_set_max_pixels("bench-data", o.max_pixels) != 0) return 2;

    VilDataset *ds = vil_dataset_open(o.data, o.split, o.labels);
    if (!ds) return 1;
    if (!o.channels) o.channels = vil_dataset_channels(ds);
    VilLoaderConfig cfg;
    loader_config(&cfg, vil_dataset_num_classes(ds));
    VilLoader *l = vil_loader_create(ds, &cfg);
    if (!l) {
        vil_dataset_free(ds);
        return 1;
    }
    print_pipeline(ds, &cfg);
    rc = bench_loader(ds, l, &cfg);
    vil_loader_free(l);
    vil_dataset_free(ds);
    return rc;
}
