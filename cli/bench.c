/* bench.c: `vil bench`: training-step, forward+backward and inference throughput of a model
 * config on a backend, with random images, the peak memory and a per-op time breakdown. The
 * step timed is vil_train_step (train/step.c), the one `vil train` runs, with the cfg file's
 * training settings (clipping, EMA, AdamW). Under mpirun / srun: the scaling of the step over
 * the ranks against one rank alone, and the exposed time of the gradient all-reduce. With
 * --data: vil train's own loop (loader, feed, step) on a dataset, alone and on all ranks. */
#define _XOPEN_SOURCE 700 /* nftw */
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "data/feed.h"
#include "eval/eval.h"
#include "train/train.h"
#include "vil/backend_prof.h"
#include "vil/common.h"
#include "vil/dist.h"
#include "vil/limits.h"
#include "vil/model.h"

static void upload_batch(VilModel *m, uint64_t seed) {
    const VilConfig *c = &m->cfg;
    int B = vil_model_batch(m);
    size_t ni = (size_t)B * c->in_floats, nt = (size_t)B * c->readouts * c->num_classes;
    float *img = vil_malloc(ni * sizeof(float)), *tg = vil_calloc(nt, sizeof(float));
    VilRng r;
    vil_rng_seed(&r, seed);
    for (size_t i = 0; i < ni; i++) img[i] = vil_rng_normal(&r);
    for (int b = 0; b < B * c->readouts; b++) { /* a target per readout (a stream's: per image) */
        for (int k = 0; k < c->num_classes; k++) tg[(size_t)b * c->num_classes + k] = 0.1f / c->num_classes;
        tg[(size_t)b * c->num_classes + vil_rng_below(&r, (uint32_t)c->num_classes)] += 0.9f;
    }
    vil_model_upload_inputs(m, img, tg);
    free(img);
    free(tg);
}

static float mean_loss(VilModel *m) {
    int B = vil_model_batch(m);
    float *l = vil_malloc((size_t)B * sizeof(float));
    vil_model_losses(m, l);
    double s = 0;
    for (int b = 0; b < B; b++) s += l[b];
    free(l);
    return (float)(s / B);
}

/* n training steps: 0, or -1 (reported) at the first that fails (none does once
 * vil_model_init_training and vil_train_init_state have run: train.h) */
static int train_steps(VilModel *m, const VilStepParams *sp, int n) {
    for (int i = 0; i < n; i++)
        if (vil_train_step(m, sp) != 0) return -1;
    return 0;
}

/* forward and backward only: the step's part before the optimizer */
static void forward_backward(VilModel *m) {
    vil_model_zero_grad(m);
    vil_model_forward(m, 1);
    vil_model_backward(m);
}

/* Training steps as `vil train` runs them: each step's images and targets come from host memory
 * (host_alloc'd) through the input feed, uploaded one step ahead. Returns the seconds of `steps`
 * steps after `warmup`, or -1 (reported) when the memory for it cannot be had. */
static double feed_steps(VilModel *m, const VilStepParams *sp, int warmup, int steps) {
    const VilBackend *be = m->be;
    const VilConfig *c = &m->cfg;
    int B = vil_model_batch(m);
    size_t bytes[2] = {(size_t)B * c->in_floats * sizeof(float), (size_t)B * c->readouts * c->num_classes * sizeof(float)};
    float *h[2][2] = {{NULL}};
    double t = -1;
    VilFeed f = {0};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 2; i++)
            if (!(h[s][i] = be->host_alloc(be, bytes[i]))) {
                vil_error("bench: %zu bytes of host memory for the feed's batches cannot be had", bytes[i]);
                goto out;
            }
    /* the images and targets already on the device, as the two host batches */
    void *dev0[3], *in[2];
    vil_model_input_buffers(m, dev0);
    for (int s = 0; s < 2; s++) {
        be->to_host(be, h[s][0], dev0[0], bytes[0]);
        be->to_host(be, h[s][1], dev0[1], bytes[1]);
    }
    if (vil_feed_init(&f, be, 2, dev0, bytes) != 0) goto out;
    VilBatch dummy[2];
    double t0 = 0;
    int rc = 0;
    vil_feed_put(&f, &dummy[0], (const void *const *)h[0]);
    for (int k = 0; k < warmup + steps && rc == 0; k++) {
        if (k == warmup) {
            be->sync(be);
            t0 = vil_now();
        }
        vil_feed_take(&f, in);
        vil_model_set_inputs(m, in[0], in[1], NULL);
        rc = vil_train_step(m, sp);
        vil_feed_done(&f);
        if (rc == 0 && k + 1 < warmup + steps)
            vil_feed_put(&f, &dummy[(k + 1) % 2], (const void *const *)h[(k + 1) % 2]);
    }
    be->sync(be);
    if (rc == 0) t = vil_now() - t0;
    vil_feed_drain(&f, NULL);
    vil_model_set_inputs(m, NULL, NULL, NULL);
    vil_feed_free(&f);
out:
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 2; i++)
            if (h[s][i]) be->host_free(be, h[s][i]);
    return t;
}

/* ---------------- several ranks, and the real loader ---------------- */

/* this rank's seconds for `steps` steps after `warmup`, the ranks of d starting together; -1
 * (reported) when a step failed (train_steps) */
static double timed_steps(VilModel *m, const VilStepParams *sp, int warmup, int steps, const VilDist *d) {
    int rc = train_steps(m, sp, warmup);
    m->be->sync(m->be);
    vil_dist_barrier(d);
    double t0 = vil_now();
    if (rc == 0) rc = train_steps(m, sp, steps);
    m->be->sync(m->be);
    return rc == 0 ? vil_now() - t0 : -1;
}

/* One row of the scaling table from every rank's seconds per step t: the slowest and fastest
 * rank's images/s, the group's (all images over the slowest rank's time) and, with t_base, the
 * slowest time over it. Returns the slowest rank's t. */
static double scaling_row(const char *what, double t, int batch, const VilDist *d, double t_base) {
    double *all = vil_calloc((size_t)d->world, sizeof(double));
    all[d->rank] = t;
    vil_dist_sum_double(d, all, d->world);
    double lo = all[0], hi = all[0];
    for (int r = 1; r < d->world; r++) lo = all[r] < lo ? all[r] : lo, hi = all[r] > hi ? all[r] : hi;
    free(all);
    if (d->rank == 0) {
        printf("  %-40s %9.1f - %-9.1f %11.1f   %8.2f", what, batch / hi, batch / lo,
               (double)batch * d->world / hi, 1e3 * hi);
        if (t_base > 0) printf("   %+8.2f", 1e3 * (hi - t_base));
        printf("\n");
        fflush(stdout);
    }
    return hi;
}

/* The step over the ranks (random images, no loader): rank 0 alone, then all ranks without an
 * all-reduce (the compute's own scaling), with one after the backward, and overlapped. The
 * exposed communication is a step's time over the no-all-reduce one. */
static int bench_ranks(VilModel *m, const VilStepParams *sp0, int batch, int warmup, int steps,
                       const VilDist *d) {
    VilStepParams none = *sp0, end = *sp0, ovl = *sp0;
    none.dist = NULL;
    end.dist = ovl.dist = d;
    end.overlap = 0;
    ovl.overlap = 1;
    if (d->rank == 0) {
        printf("\nthe training step over %d rank%s (random images; ms per step, the slowest rank's; "
               "exposed: over 'no all-reduce'):\n", d->world, d->world == 1 ? "" : "s");
        printf("  %-40s %-21s %11s   %8s   %s\n", "", "img/s per rank", "img/s total", "ms", "exposed ms");
    }
    /* rank 0 alone while the others wait (no all-reduce: nobody waits on another rank) */
    double alone = 0;
    if (d->rank == 0) alone = timed_steps(m, &none, warmup, steps, NULL) / steps;
    vil_dist_barrier(d);
    vil_dist_bcast(d, &alone, sizeof alone, 0);
    if (alone < 0) return -1; /* every rank has rank 0's time */
    if (d->rank == 0)
        printf("  %-40s %9.1f %-11s %11.1f   %8.2f\n", "rank 0 alone, no all-reduce", batch / alone, "",
               batch / alone, 1e3 * alone);
    /* a failed step (none fails after the setup: train_steps) ends the table on every rank */
    double t = timed_steps(m, &none, warmup, steps, d);
    if (vil_dist_any(d, t < 0)) return -1;
    double base = scaling_row("all ranks, no all-reduce", t / steps, batch, d, 0);
    if (vil_dist_any(d, (t = timed_steps(m, &end, warmup, steps, d)) < 0)) return -1;
    scaling_row("all ranks, all-reduce after the backward", t / steps, batch, d, base);
    char what[64];
    snprintf(what, sizeof what, "all ranks, overlapped (%.3g MiB buckets)", sp0->bucket_bytes / 1048576.0);
    if (vil_dist_any(d, (t = timed_steps(m, &ovl, warmup, steps, d)) < 0)) return -1;
    t = scaling_row(what, t / steps, batch, d, base);
    if (d->rank == 0) {
        printf("scaling efficiency (overlapped, against %d x rank 0 alone): %.1f%%\n", d->world,
               100.0 * alone / t);
        fflush(stdout);
    }
    return 0;
}

/* vil train's loop on the dataset: the progress callbacks after the first interval (warm-up)
 * add up the images and seconds */
typedef struct {
    long prev_step, global_batch;
    int intervals;
    double images, seconds, wait_s;
} LoopTally;

static void tally_log(void *ctx, const VilTrainProgress *p) {
    LoopTally *t = ctx;
    long n = p->step - t->prev_step;
    t->prev_step = p->step;
    if (t->intervals++ == 0 || p->images_per_s <= 0) return;
    double sec = (double)n * t->global_batch / p->images_per_s;
    t->images += (double)n * t->global_batch;
    t->seconds += sec;
    t->wait_s += p->data_wait * sec;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *f) {
    (void)st, (void)flag, (void)f;
    return remove(path);
}

/* 2 x steps steps of vil train (eval off) into a scratch folder that is removed after; the
 * tally of the second half. 0, or -1 (reported). */
static int train_loop_run(const VilConfig *mc, const VilTrainConfig *tc, const char *data,
                          const VilBackend *be, const VilDist *d, int steps, LoopTally *tally) {
    char dir[64] = "/tmp/vil-bench-XXXXXX";
    int ok = d->rank != 0 || mkdtemp(dir) != NULL;
    if (vil_dist_any(d, !ok)) {
        vil_error("cannot make a scratch folder in /tmp for the training loop");
        return -1;
    }
    vil_dist_bcast(d, dir, sizeof dir, 0);
    VilTrainRun run = {0};
    run.model = *mc;
    run.train = *tc;
    run.train.eval_every_epochs = 0;
    run.train.log_every = steps;
    run.train.max_steps = 2 * steps;
    run.data = data;
    run.out_dir = dir;
    run.be = be;
    run.dist = d;
    run.quiet = 1;
    run.on_log = tally_log;
    memset(tally, 0, sizeof *tally);
    tally->global_batch = (long)tc->batch * tc->accum_steps * d->world;
    run.ctx = tally;
    VilTrainResult res;
    VilTrainStatus st = vil_train(&run, &res);
    vil_dist_barrier(d);
    if (d->rank == 0) nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (st != VIL_TRAIN_DONE) return -1;
    if (tally->seconds <= 0) {
        vil_error("the training loop logged no timed interval (a dataset shorter than %d steps?)", steps);
        return -1;
    }
    return 0;
}

static void print_loop(const char *what, const LoopTally *t) {
    printf("  %-36s %11.1f img/s   data wait %4.1f%%\n", what, t->images / t->seconds,
           100.0 * t->wait_s / t->seconds);
    fflush(stdout);
}

/* vil train's loop with the real loader: alone (rank 0), and on all ranks when there are several */
static int bench_loop(const VilConfig *mc, const VilTrainConfig *tc, const char *data,
                      const VilBackend *be, const VilDist *d, int steps) {
    VilDist solo;
    vil_dist_single(&solo);
    LoopTally one = {0}, all = {0};
    if (d->rank == 0) {
        printf("\nvil train's loop on %s (loader with %d worker%s, the feed, the step; %d steps "
               "timed after %d):\n", data, tc->workers, tc->workers == 1 ? "" : "s", steps, steps);
        fflush(stdout);
    }
    int bad = d->rank == 0 && train_loop_run(mc, tc, data, be, &solo, steps, &one) != 0;
    if (vil_dist_any(d, bad)) return -1;
    if (d->rank == 0) print_loop(d->world > 1 ? "rank 0 alone" : "one process", &one);
    if (d->world == 1) return 0;
    if (train_loop_run(mc, tc, data, be, d, steps, &all) != 0) return -1;
    if (d->rank == 0) {
        char what[64];
        snprintf(what, sizeof what, "all %d ranks (total)", d->world);
        print_loop(what, &all);
        printf("scaling efficiency with the loader (against %d x rank 0 alone): %.1f%%\n", d->world,
               100.0 * (all.images / all.seconds) / (d->world * one.images / one.seconds));
        fflush(stdout);
    }
    return 0;
}

/* One process: the step, forward+backward, the step with uploads, inference, the peak memory
 * and (profile) the per-op breakdown; m has training activations of the batch. 0, or 1 when the
 * loss is not finite. */
static int bench_one(VilModel *m, const VilStepParams *sp, int warmup, int steps, int profile) {
    const VilBackend *be = m->be;
    int batch = vil_model_batch(m);
    if (train_steps(m, sp, warmup) != 0) return 1;
    be->sync(be);
    float loss0 = mean_loss(m);
    double t0 = vil_now();
    if (train_steps(m, sp, steps) != 0) return 1;
    be->sync(be);
    double t_train = vil_now() - t0;
    float loss1 = mean_loss(m);
    t0 = vil_now();
    for (int i = 0; i < steps; i++) forward_backward(m);
    be->sync(be);
    double t_fb = vil_now() - t0;
    size_t peak_train = be->peak_bytes ? be->peak_bytes(be) : 0;
    if (!isfinite(loss1)) {
        vil_error("the loss is not finite after %d steps (%g): the backend is broken", steps, loss1);
        return 1;
    }
    printf("train step (as vil train):  %10.1f images/s  (%.2f ms/step; loss %.4f -> %.4f)\n",
           batch * steps / t_train, 1e3 * t_train / steps, loss0, loss1);
    printf("forward+backward:           %10.1f images/s  (%.2f ms/step)\n", batch * steps / t_fb,
           1e3 * t_fb / steps);
    double t_feed = feed_steps(m, sp, warmup, steps);
    if (t_feed < 0) return 1;
    printf("train step + upload (feed): %10.1f images/s  (%.2f ms/step; each batch from host memory, as vil train)\n",
           batch * steps / t_feed, 1e3 * t_feed / steps);
    fflush(stdout);

    if (vil_model_alloc_acts(m, batch, 0) != 0) return 1;
    upload_batch(m, 2);
    double t_inf = steps * vil_time_forward(m, warmup, steps);
    printf("inference (forward):        %10.1f images/s  (%.2f ms/step)\n", batch * steps / t_inf,
           1e3 * t_inf / steps);
    printf("peak memory (training):     %10.2f GiB (%.1f MiB)%s\n", peak_train / 1073741824.0,
           peak_train / 1048576.0, strcmp(be->name, "cpu") == 0 ? " (process RSS)" : "");
    fflush(stdout);

    if (profile) {
        int iters = steps < 5 ? steps : 5;
        if (vil_model_alloc_acts(m, batch, 1) != 0) return 1;
        upload_batch(m, 3);
        m->be = vil_backend_profiled(be);
        int rc = train_steps(m, sp, 1); /* warm */
        vil_prof_reset();
        if (rc == 0) rc = train_steps(m, sp, iters);
        if (rc != 0) {
            m->be = be;
            return 1;
        }
        const char *how = be->mark_record ? "device time between events around every op" : "synchronized after every op";
        printf("\nper-op breakdown of a training step (%s, %d steps):\n", how, iters);
        vil_prof_report(stdout, iters);
        /* and of the inference forward (not replayed from a graph: every op is timed alone) */
        if (vil_model_alloc_acts(m, batch, 0) != 0) {
            m->be = be;
            return 1;
        }
        upload_batch(m, 3);
        vil_model_forward(m, 0); /* warm */
        vil_prof_reset();
        for (int i = 0; i < iters; i++) vil_model_forward(m, 0);
        printf("\nper-op breakdown of the inference forward (%s, %d passes):\n", how, iters);
        vil_prof_report(stdout, iters);
        m->be = be;
    }
    return 0;
}

/* --img-size / --batch lists: a row per (resolution, batch) with the training step's and the
 * inference forward's images/s and peak memory, and per resolution the forward's latency at
 * batch 1. A batch that does not fit (the ops' indexing, the device's memory) gets "-" and its
 * reason below the table. 0, or 1 when a configuration is invalid or the loss not finite. */
#define MAX_LIST 16
static int bench_table(const VilConfig *base, const VilTrainConfig *tc, const VilBackend *be,
                       const int *res, int nr, const int *batches, int nb, int warmup, int steps,
                       int use_graph) {
    int cpu = strcmp(be->name, "cpu") == 0;
    printf("%6s %7s %6s %12s %12s %10s %10s %11s\n", "size", "tokens", "batch", "train img/s",
           "infer img/s", "train GiB", "infer GiB", "batch-1 ms");
    char notes[4096] = "";
    size_t nl = 0;
    for (int i = 0; i < nr; i++) {
        VilConfig c = *base;
        c.img_size = res[i];
        VilModel m;
        VilErrCapture cap;
        vil_error_capture(&cap);
        int ok = vil_config_finalize(&c) == 0 && vil_model_init(&m, &c, be) == 0;
        VilStepParams sp = vil_step_params(tc, (float)vil_peak_lr(tc->base_lr, batches[0]));
        if (ok) {
            m.use_graph = use_graph;
            m.recompute = tc->recompute;
            ok = vil_model_init_weights(&m, 0) == 0 && vil_model_init_training(&m, sp.optim, sp.ema_decay > 0.0f) == 0 &&
                 vil_train_init_state(&m, tc) == 0;
            if (!ok) vil_model_free(&m);
        }
        if (!ok) {
            nl += (size_t)snprintf(notes + nl, nl < sizeof notes ? sizeof notes - nl : 0, "  %d px: %s\n", res[i], cap.msg);
            if (nl >= sizeof notes) nl = sizeof notes - 1;
            vil_error_release(&cap);
            printf("%6d %7s %6s %12s\n", res[i], "-", "-", "-");
            continue;
        }
        vil_error_release(&cap);
        /* the latency of one image: the forward at batch 1 */
        double lat = -1;
        vil_error_capture(&cap);
        if (vil_model_check_acts(&m, 1, 0) == 0 && vil_model_alloc_acts(&m, 1, 0) == 0) {
            upload_batch(&m, 1);
            lat = 1e3 * vil_time_forward(&m, warmup, steps);
        }
        vil_error_release(&cap);
        for (int j = 0; j < nb; j++) {
            int B = batches[j];
            double tr = -1, inf = -1;
            size_t ptr = 0, pinf = 0;
            for (int training = 1; training >= 0; training--) {
                vil_error_capture(&cap);
                int fits = vil_model_check_acts(&m, B, training) == 0;
                if (fits) {
                    /* the peak of this measurement alone: the last one's activations given back first */
                    vil_model_free_acts(&m);
                    if (be->peak_reset) be->peak_reset(be);
                    fits = vil_model_alloc_acts(&m, B, training) == 0;
                }
                if (!fits)
                    nl += (size_t)snprintf(notes + nl, nl < sizeof notes ? sizeof notes - nl : 0,
                                           "  %d px, batch %d, %s: %s\n", res[i], B,
                                           training ? "training" : "inference", cap.msg);
                if (nl >= sizeof notes) nl = sizeof notes - 1;
                vil_error_release(&cap);
                if (!fits) continue;
                upload_batch(&m, 1);
                if (training) {
                    double t = timed_steps(&m, &sp, warmup, steps, NULL);
                    if (t < 0) {
                        vil_model_free(&m);
                        return 1;
                    }
                    tr = (double)B * steps / t;
                    if (!isfinite(mean_loss(&m))) {
                        vil_error("%d px, batch %d: the loss is not finite: the backend is broken", res[i], B);
                        vil_model_free(&m);
                        return 1;
                    }
                    ptr = be->peak_bytes ? be->peak_bytes(be) : 0;
                } else {
                    inf = B / vil_time_forward(&m, warmup, steps);
                    pinf = be->peak_bytes ? be->peak_bytes(be) : 0;
                }
            }
            char a[32] = "-", b[32] = "-", ga[32] = "-", gb[32] = "-", l[32] = "";
            if (tr >= 0) snprintf(a, sizeof a, "%.1f", tr), snprintf(ga, sizeof ga, "%.2f", ptr / 1073741824.0);
            if (inf >= 0) snprintf(b, sizeof b, "%.1f", inf), snprintf(gb, sizeof gb, "%.2f", pinf / 1073741824.0);
            if (j == 0) snprintf(l, sizeof l, lat >= 0 ? "%.2f" : "-", lat);
            printf("%6d %7d %6d %12s %12s %10s %10s %11s\n", res[i], c.seq_len, B, a, b, ga, gb, l);
            fflush(stdout);
        }
        vil_model_free(&m);
    }
    if (nl) printf("not measured:\n%s", notes);
    if (cpu) printf("(memory on the CPU: the process's peak RSS)\n");
    return 0;
}

/* the flags' values: their defaults set by vil_cmd_bench, then filled by vil_args_parse */
typedef struct {
    const char *device, *model, *data, *batch_s, *sizes_s;
    int steps, warmup, no_profile, threads, no_graph;
    VilArgList sets;
} Flags;
static Flags o;

static const VilArg ARGS[] = {
    {"--device", VIL_ARG_STR, &o.device, "cpu or cuda"},
    {"--model", VIL_ARG_STR, &o.model, "cfg file (model and training keys)"},
    {"--batch", VIL_ARG_STR, &o.batch_s, "batch size (per rank), or a list: 1,32,256 (a table)", .key = "batch"},
    {"--img-size", VIL_ARG_STR, &o.sizes_s, "image sizes, e.g. 224,512,1024,2048: a table of train and inference "
                                            "images/s, peak memory and batch-1 latency per size and batch",
     .key = "img_size"},
    {"--steps", VIL_ARG_INT, &o.steps, "timed steps per measurement (0: 5 on cpu, 30 on cuda)"},
    {"--warmup", VIL_ARG_INT, &o.warmup, "untimed steps first"},
    {"--data", VIL_ARG_STR, &o.data, "also time vil train's loop (loader, feed, step) on this dataset"},
    {"--no-profile", VIL_ARG_FLAG, &o.no_profile, "skip the per-op breakdown"},
    {"--no-graph", VIL_ARG_FLAG, &o.no_graph, "run the inference forward op by op, not replayed as a CUDA graph "
                                              "(what the graph gains)"},
    {"--set", VIL_ARG_LIST, &o.sets, "override a config key (repeatable)"},
    {"--threads", VIL_ARG_INT, &o.threads, VIL_THREADS_HELP},
};

const VilArgSpec vil_cmd_bench_spec = {
    "bench", "[--device cpu|cuda] [--model CFG] [--batch B[,B...]] [--img-size S[,S...]] [--data DIR] [options]",
    "Times the training step `vil train` runs (forward, backward, clipping and\n"
    "EMA as the cfg file sets them, its optimizer), forward+backward and inference on\n"
    "random images, and prints images/s, the peak memory and a per-op\n"
    "breakdown (a separate, synchronized pass). Under mpirun / srun (one\n"
    "process per GPU): the step on rank 0 alone and on all ranks without an\n"
    "all-reduce, with one after the backward and overlapped, the exposed\n"
    "communication and the scaling efficiency. --data adds vil train's own\n"
    "loop on a dataset (alone, and on all ranks).",
    ARGS, (int)(sizeof ARGS / sizeof ARGS[0]), 0, 0, &o.sets, .mpirun = 1};

/* --batch's and --img-size's lists into batches (*nb) and sizes (*ns, 0 without --img-size),
 * --steps, --warmup and --device checked: 0, or 2 after the message of the constraint that
 * broke, alone */
static int check_flags(int *batches, int *nb, int *sizes, int *ns) {
    *nb = vil_cli_int_list(o.batch_s, batches, MAX_LIST, 1, VIL_MAX_BATCH);
    *ns = o.sizes_s ? vil_cli_int_list(o.sizes_s, sizes, MAX_LIST, 1, VIL_MAX_IMG_SIZE) : 0;
    char shown[80];
    if (!*nb)
        fprintf(stderr, "vil bench: --batch takes sizes in 1..%d, a list of at most %d like 64,128 "
                        "(got '%s')\n", VIL_MAX_BATCH, MAX_LIST, vil_printable(shown, sizeof shown, o.batch_s));
    else if (o.sizes_s && !*ns)
        fprintf(stderr, "vil bench: --img-size takes sizes in 1..%d, a list of at most %d like 224,384 "
                        "(got '%s')\n", VIL_MAX_IMG_SIZE, MAX_LIST, vil_printable(shown, sizeof shown, o.sizes_s));
    else if (o.steps < 0 || o.warmup < 0)
        fprintf(stderr, "vil bench: --steps and --warmup must be >= 0 (got %d and %d)\n", o.steps, o.warmup);
    else if (!vil_device_name_ok(o.device))
        vil_cli_bad_choice("bench", "--device", "cpu, cuda or auto", o.device);
    else if ((*nb > 1 || *ns > 0) && (o.data || vil_dist_launched() > 0))
        fprintf(stderr, "vil bench: the --img-size / --batch table runs one process without --data\n");
    else
        return 0;
    return 2;
}

/* The cfg file with --set and timm's flags (timm's --lr: the step's lr, at this batch over the
 * ranks), finalized: 0, or the exit code (vil_exit_code), reported */
static int load_config(VilConfig *cfg, VilTrainConfig *tc, int batch) {
    vil_config_default(cfg);
    vil_train_config_default(tc);
    int r = vil_train_config_load(cfg, tc, o.model);
    double lr = 0.0;
    if (r == 0) r = vil_cli_apply_sets(cfg, tc, &o.sets, &lr);
    int world = vil_dist_launched() > 0 ? vil_dist_launched() : 1;
    if (r == 0 && lr > 0.0) r = vil_train_config_set_lr(tc, lr, (long)batch * world);
    if (r == 0) r = vil_config_finalize(cfg);
    if (r == 0) r = vil_train_config_finalize(tc);
    return r != 0 ? vil_exit_code(r) : 0;
}

/* --img-size / --batch's table (sizes: ns of them, none: the config's own) after its header */
static int run_table(const VilConfig *cfg, const VilTrainConfig *tc, const VilBackend *be, int *sizes, int ns,
                     const int *batches, int nb, int steps) {
    if (!ns) sizes[0] = cfg->img_size, ns = 1;
    printf("bench: %s (%s) on %s; %d timed steps after %d per measurement\n", cfg->name, cfg->arch,
           be->name, steps, o.warmup);
    if (strcmp(be->name, "cpu") == 0) vil_cli_print_threads(stdout, 0);
    return bench_table(cfg, tc, be, sizes, ns, batches, nb, o.warmup, steps, !o.no_graph);
}

int vil_cmd_bench(int argc, char **argv) {
    o = (Flags){.device = "cpu", .model = "configs/vil_tiny.cfg", .batch_s = "8", .warmup = 2};
    int rc = vil_args_parse_flags(&vil_cmd_bench_spec, argc, argv);
    if (rc >= 0) return rc;
    int batches[MAX_LIST], sizes[MAX_LIST], nb, ns;
    if (check_flags(batches, &nb, sizes, &ns) != 0) return 2;
    int batch = batches[0], table = nb > 1 || ns > 0, steps = o.steps, warmup = o.warmup;
    VilConfig cfg;
    VilTrainConfig tc;
    if ((rc = load_config(&cfg, &tc, batch)) != 0) return rc;
    tc.batch = batch;
    /* the loader runs beside the step only in --data's loop, which should time vil train's own */
    int loader = o.data ? tc.workers : 0;
    if (vil_cli_set_threads("bench", o.threads) < 0) return 2;
    /* the process group (mpirun / srun), and this process's GPU: local_rank */
    VilDist dist;
    if (vil_dist_init(&dist) != 0) return 1;
    int code = 1, lead = dist.rank == 0;
    /* under a launcher, a context of its own on this process's GPU (none on GPU 0 for the others) */
    const VilBackend *be = dist.mpi ? vil_backend_open(o.device, dist.local_rank) : vil_backend_get(o.device);
    if (vil_dist_any(&dist, !be || (dist.mpi && be->dist_join(be, &dist) != 0))) goto out;
    if (steps == 0) steps = strcmp(be->name, "cpu") == 0 ? 5 : 30;
    if (table) {
        code = run_table(&cfg, &tc, be, sizes, ns, batches, nb, steps);
        goto out;
    }
    /* the step at the peak learning rate of the global batch */
    VilStepParams sp = vil_step_params(&tc, (float)vil_peak_lr(tc.base_lr, (long)batch * dist.world));
    VilModel m;
    if (vil_dist_any(&dist, vil_model_init(&m, &cfg, be) != 0)) goto out;
    m.use_graph = !o.no_graph;
    m.recompute = tc.recompute;
    /* the initial states before the check (they count) */
    if (vil_dist_any(&dist, vil_train_init_state(&m, &tc) != 0 || vil_model_check_acts(&m, batch, 1) != 0 ||
                                vil_model_init_weights(&m, 0) != 0)) {
        vil_model_free(&m);
        goto out;
    }
    if (lead) {
        printf("bench: %s (%s) on %s, %zu parameters, %dx%d, batch %d, %d tokens\n", cfg.name,
               cfg.arch, be->name, m.param_count, cfg.img_size, cfg.img_size, batch, cfg.seq_len);
        char opt[96];
        printf("step:  forward, backward, %s %s (lr %.3g), %s%s%s\n",
               sp.clip_grad > 0 ? "clip_grad," : "no clipping,", vil_optim_describe(&tc, opt, sizeof opt), sp.hyper.lr,
               sp.ema_decay > 0 ? "EMA" : "no EMA", tc.init_state_kind != VIL_INIT_ZERO ? ", initial states: " : "",
               tc.init_state_kind != VIL_INIT_ZERO ? tc.init_state : "");
        if (strcmp(be->name, "cpu") == 0) vil_cli_print_threads(stdout, loader);
        if (dist.mpi)
            printf("ranks: %d (%s), %d on this host; global batch %ld\n", dist.world, dist.launcher,
                   dist.local_world, (long)batch * dist.world);
        fflush(stdout);
    }
    /* --data's loop runs the loader beside the step: bound ranks slow it several-fold */
    if (o.data) vil_train_check_affinity(&dist, tc.workers);
    if (vil_dist_any(&dist, vil_model_init_training(&m, sp.optim, sp.ema_decay > 0.0f) != 0 ||
                                vil_model_alloc_acts(&m, batch, 1) != 0)) {
        vil_model_free(&m);
        goto out;
    }
    upload_batch(&m, 1);
    if (dist.mpi) {
        code = bench_ranks(&m, &sp, batch, warmup, steps, &dist) == 0 ? 0 : 1;
    } else {
        code = bench_one(&m, &sp, warmup, steps, !o.no_profile);
    }
    vil_model_free(&m);
    if (code == 0 && o.data && bench_loop(&cfg, &tc, o.data, be, &dist, steps) != 0) code = 1;
out:
    if (dist.mpi) vil_backend_close(be);
    vil_dist_finalize(&dist);
    return code;
}
