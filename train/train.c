/* train.c: the training run (train.h) behind `vil train` (cli/train.c): the loop of
 * doc/recipe.md written once against VilModel / VilBackend in pieces (setup, step, log, end of
 * epoch, stop) and the validation pass after epochs. The run's files, state and resume are
 * state.c's; what it prints is progress.c's. */
#define _GNU_SOURCE
#include "train/trainer.h"

#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data/image.h"
#include "formats/checkpoint.h"
#include "vil/common.h"

/* keeps the drop-path stream apart from the loader's streams keyed by the same seed */
#define TAG_DROP_PATH 0x64726f7070617468ULL
#define TAG_INIT_STATE 0x696e697473746174ULL

/* ---------------- a test hook ---------------- */

/* VIL_TEST_FAULT=kill|stop|int:train|grad|val:N, for tests/test_dist_watchdog.c,
 * tests/gpu_dist_watchdog.sh and tests/test_train.c: the last of several ranks sends itself
 * SIGKILL (a crash) or SIGSTOP (a hang), or the last rank (one process too) SIGINT once (a
 * Ctrl-C), as step N begins (train: the others wait in the step's first collective),
 * after step N's first decision of all ranks (grad: the others wait in the gradient all-reduce),
 * or as the first validation pass at step N or later begins (val). */
enum { FAULT_TRAIN, FAULT_GRAD, FAULT_VAL };
static const char *const FAULT_PLACES[] = {"train", "grad", "val"};
static struct {
    int sig, place;
    long step;
} g_fault;

static void fault_parse(void) {
    const char *e = getenv("VIL_TEST_FAULT");
    char how[8], where[8];
    memset(&g_fault, 0, sizeof g_fault);
    if (!e || !*e) return;
    g_fault.place = -1;
    if (sscanf(e, "%7[a-z]:%7[a-z]:%ld", how, where, &g_fault.step) == 3)
        for (int i = 0; i < 3; i++)
            if (strcmp(where, FAULT_PLACES[i]) == 0) g_fault.place = i;
    if (g_fault.place >= 0)
        g_fault.sig = strcmp(how, "kill") == 0 ? SIGKILL : strcmp(how, "stop") == 0 ? SIGSTOP
                    : strcmp(how, "int") == 0 ? SIGINT : 0;
    if (!g_fault.sig) vil_warn("VIL_TEST_FAULT='%s' ignored: expected kill|stop|int:train|grad|val:STEP", e);
}

static void test_fault(const Trainer *T, int place, long step) {
    /* int (a Ctrl-C at a known place, for tests/test_train.c) fires once, on one process too */
    int one = g_fault.sig == SIGINT;
    if (!g_fault.sig || g_fault.place != place || step < g_fault.step || (T->world < 2 && !one) ||
        T->rank != T->world - 1)
        return;
    vil_warn("VIL_TEST_FAULT: rank %d sends itself %s at step %ld (%s)", T->rank,
             g_fault.sig == SIGKILL ? "SIGKILL" : g_fault.sig == SIGSTOP ? "SIGSTOP" : "SIGINT", step,
             FAULT_PLACES[place]);
    int sig = g_fault.sig;
    if (one) g_fault.sig = 0;
    raise(sig);
}

/* ---------------- the steps ---------------- */

/* the sum of the per-sample losses of the micro-batch just run (a host read: log steps only) */
static double batch_loss_sum(Trainer *T) {
    int B = vil_model_losses(&T->m, T->host_losses);
    double s = 0;
    for (int b = 0; b < B; b++) s += T->host_losses[b];
    return s;
}

/* the mean loss of the step just run: its micro-batches' (the earlier ones summed by step()) over
 * all ranks, the same value on every rank, so the divergence check decides alike everywhere */
static float read_loss(Trainer *T) {
    double s = T->loss_sum + batch_loss_sum(T);
    vil_dist_sum_double(T->dist, &s, 1);
    return (float)(s / (double)T->global_batch);
}

/* The counts of a validation pass summed over the ranks (each read its shard). */
static void sum_eval(const Trainer *T, VilEvalResult *r) {
    double v[5] = {(double)r->top1, (double)r->top5, (double)r->images, (double)r->bad, r->loss_sum};
    vil_dist_sum_double(T->dist, v, 5);
    r->top1 = (long)v[0], r->top5 = (long)v[1], r->images = (long)v[2], r->bad = (long)v[3];
    r->loss_sum = v[4];
}

static int killed_soon(const Trainer *T, int sig);

/* Asked by the validation passes after each batch: a stop request is acknowledged (the run
 * finishes both passes, then saves); a second one ends the pass (every rank then abandons the
 * validation together, in evaluate). */
static int eval_cancel(void *ctx) {
    Trainer *T = ctx;
    VilStop *s = T->run->stop;
    if (!s || s->level == 0) return 0;
    if (s->said < 1 && killed_soon(T, s->sig)) {
        print_stopping(T, s->sig, "under mpirun, which kills the ranks soon after it passes a SIGTERM "
                                  "on: the rest of the validation is skipped; saving now (SIGUSR1 to "
                                  "the ranks themselves stops after the validation)", NULL);
        s->said = 2;
        return 1;
    }
    if (s->said < 1) {
        print_stopping(T, s->sig, vil_model_has_ema(&T->m)
                                      ? "finishing the validation (the model's pass and the EMA's), "
                                        "then saving and stopping"
                                      : "finishing the validation, then saving and stopping",
                       "skips the rest of it and saves now");
        s->said = 1;
    }
    if (s->level < 2) return 0;
    if (s->said < 2) {
        print_stopping(T, s->sig, "the rest of the validation is skipped; saving now",
                       "ends vil at once, without saving");
        s->said = 2;
    }
    return 1;
}

/* One validation pass (the model's or the EMA's) on every rank: 0, 1 when a rank abandoned it
 * (a second stop request: every rank then leaves the validation), -1 when it failed on any. */
static int eval_pass(Trainer *T, VilProgress *prog, const char *prefix, VilEvalResult *r) {
    VilEvalSink sink = {.cancel = eval_cancel, .ctx = T};
    int rc = vil_eval_run_sink(&T->m, T->val_loader, 0, prog, prefix, &sink, r);
    /* a failure on any rank stops all: none may wait in the sums below */
    if (vil_dist_any(T->dist, rc != 0)) return -1;
    if (vil_dist_any(T->dist, r->cancelled)) return 1;
    sum_eval(T, r);
    return 0;
}

/* The validation pass of the model and of the EMA: 0, 1 abandoned (nothing recorded), -1
 * failed. */
static int evaluate(Trainer *T, int epoch, VilTrainResult *res) {
    VilEvalResult r;
    /* with the bar the pass shows its progress in place (rank 0's shard); plain lines get the
     * summary line, with the pass's time, only (20 lines a pass would swamp 300 epochs of it) */
    VilProgress *prog = T->con.mode == VIL_PROGRESS_BAR ? &T->con : NULL;
    vil_dist_progress("validation", T->step);
    test_fault(T, FAULT_VAL, T->step);
    int rc = eval_pass(T, prog, "val   ", &r);
    if (rc) return rc;
    res->top1 = r.images ? (float)(100.0 * r.top1 / r.images) : 0.0f;
    res->top5 = r.images ? (float)(100.0 * r.top5 / r.images) : 0.0f;
    long bad = r.bad, images = r.images;
    double secs = r.seconds;
    VilEvalRecord pt = {.step = T->step, .epoch = epoch + 1, .images = images, .top1 = res->top1,
                       .top5 = res->top5, .loss = r.images ? (float)(r.loss_sum / r.images) : 0.0f};
    if (vil_model_has_ema(&T->m)) {
        vil_model_use_ema(&T->m, 1);
        rc = eval_pass(T, prog, "val   EMA ", &r);
        vil_model_use_ema(&T->m, 0);
        if (rc) return rc;
        res->ema_top1 = r.images ? (float)(100.0 * r.top1 / r.images) : 0.0f;
        res->ema_top5 = r.images ? (float)(100.0 * r.top5 / r.images) : 0.0f;
        secs += r.seconds;
        pt.has_ema = 1;
        pt.ema_top1 = res->ema_top1, pt.ema_top5 = res->ema_top5;
        pt.ema_loss = r.images ? (float)(r.loss_sum / r.images) : 0.0f;
    }
    if (T->runlog && vil_runlog_eval(T->runlog, &pt) != 0) runlog_failed(T);
    print_eval(T, &pt, bad, secs);
    return 0;
}

/* ---------------- setup ---------------- */

/* the permutation that picks the holdout images: fixed, so that every seed (and every machine)
 * holds out the same ones */
#define VIL_HOLDOUT_SEED 20261124u

/* The class names go into every checkpoint's metadata, which is UTF-8 JSON: a folder or a
 * names-file entry that is not UTF-8 failed the first save, after the training time was spent.
 * Refused here, before any step, naming the entry (escaped) and where it came from. */
static int check_class_names(const Trainer *T) {
    for (int c = 0; c < T->n_classes; c++) {
        const char *name = T->class_names[c], *id = vil_dataset_class_id(T->ds, c);
        size_t n = strlen(name);
        if (vil_utf8_invalid_at((const unsigned char *)name, n) == n) continue;
        char shown[160];
        vil_printable(shown, sizeof shown, name);
        if (T->run->names && strcmp(name, id) != 0)
            vil_error("the class-names file '%s' names class %d '%s', which is not valid UTF-8; the "
                      "names go into the checkpoints' metadata: write the file in UTF-8",
                      T->run->names, c, shown);
        else
            vil_error("class %d of the training data (%s) is named '%s', which is not valid UTF-8; "
                      "the names go into the checkpoints' metadata: rename the folder, or give "
                      "the classes UTF-8 names with --names FILE", c, vil_dataset_source(T->ds), shown);
        return -1;
    }
    return 0;
}

static int open_data(Trainer *T) {
    const VilTrainRun *run = T->run;
    /* in range: the key's bounds are the setter's */
    if (vil_image_set_max_pixels(run->train.max_pixels) != 0) return -1;
    T->ds = vil_dataset_open(run->data, "train", NULL);
    if (!T->ds) return -1;
    int K0 = vil_dataset_num_classes(T->ds);
    if (run->names && vil_dataset_load_names(T->ds, run->names) != 0) return -1;
    int K = vil_dataset_num_classes(T->ds);
    if (K != K0) {
        vil_error("the class-names file '%s' names %d classes, the training data (%s) has %d: is "
                  "it the names file of this dataset?", run->names, K, vil_dataset_source(T->ds), K0);
        return -1;
    }
    if (K != T->mc->num_classes && run->resume) {
        /* the run's model is the state's: its weights go on in a new run with a fresh head */
        char *was = vil_train_out_dir(NULL, run->resume, "");
        vil_error("the training data (%s) has %d classes, the model num_classes = %d: a resumed run "
                  "keeps its model; train the run's weights on these %d classes in a new run: vil "
                  "train --config %s/config.cfg --init %s/last.safetensors --set num_classes=%d --data "
                  "%s --out NEW_DIR", vil_dataset_source(T->ds), K, T->mc->num_classes, K, was, was, K,
                  run->data);
        free(was);
        return -1;
    }
    if (K != T->mc->num_classes) {
        vil_error("the training data (%s) has %d classes but the model config says num_classes = "
                  "%d: set --set num_classes=%d", vil_dataset_source(T->ds), K,
                  T->mc->num_classes, K);
        return -1;
    }
    if (T->tc->holdout > 0) {
        if (T->tc->eval_every_epochs <= 0) {
            vil_error("holdout = %d holds images out for validation, but eval_every_epochs = 0 "
                      "never validates: set eval_every_epochs, or holdout = 0", T->tc->holdout);
            return -1;
        }
        /* a fixed choice, not the run's seed: every seed of a recipe sees the same split */
        if (vil_dataset_holdout(&T->ds, &T->val_ds, T->tc->holdout, VIL_HOLDOUT_SEED) != 0) return -1;
    } else if (T->tc->eval_every_epochs > 0) {
        T->val_ds = vil_dataset_open(run->data, "val", run->val_labels);
        if (!T->val_ds) {
            vil_error("no validation split in '%s': add one, or set eval_every_epochs=0 to train "
                      "without evaluation", run->data);
            return -1;
        }
        if (vil_dataset_num_classes(T->val_ds) > K) {
            vil_error("the validation split has %d classes, the training split %d",
                      vil_dataset_num_classes(T->val_ds), K);
            return -1;
        }
        vil_dataset_set_num_classes(T->val_ds, K);
    }
    T->n_classes = K;
    T->class_names = vil_calloc((size_t)K, sizeof(char *));
    for (int c = 0; c < K; c++) T->class_names[c] = (char *)vil_dataset_class_name(T->ds, c);
    return check_class_names(T);
}

/* canvas > 0: the model reads the canvas as it is, so img_size must be its side, and an item
 * must fit on it unscaled. Item 0 of each split is checked here, before any work; an item found
 * larger later is a bad file (replaced in training, left out of the validation, with the
 * placement's message). */
static int check_canvas(const Trainer *T) {
    const int canvas = T->tc->canvas;
    if (canvas <= 0) return 0;
    if (canvas != T->mc->img_size) {
        vil_error("canvas = %d but the model's img_size = %d: the model reads the canvas as it is; set "
                  "img_size = %d", canvas, T->mc->img_size, canvas);
        return -1;
    }
    const VilDataset *sets[2] = {T->ds, T->val_ds};
    for (int k = 0; k < 2; k++) {
        if (!sets[k] || vil_dataset_size(sets[k]) < 1) continue;
        VilImage im;
        if (vil_dataset_read_image(sets[k], 0, T->mc->in_chans, &im, NULL) != 0) return -1;
        int w = im.w, h = im.h;
        vil_image_free(&im);
        if (w > canvas || h > canvas) {
            vil_error("the %s data's item 0 (%s) is %dx%d, larger than the canvas of %d px: the canvas keeps "
                      "the item's scale, so it must be at least the items' side (set canvas and img_size "
                      "together)", k ? "validation" : "training", vil_dataset_source(sets[k]), w, h, canvas);
            return -1;
        }
    }
    return 0;
}

/* mpirun binds each rank to one core when it starts two or fewer, a trap on a 2-GPU machine;
 * srun binds a task to its --cpus-per-task where Slurm's task/affinity plugin runs. Once per
 * process: vil bench warns above its numbers and then runs vil_train. */
void vil_train_check_affinity(const VilDist *d, int workers) {
    static int warned;
    cpu_set_t set;
    if (warned || !d || !d->mpi || d->rank != 0 || sched_getaffinity(0, sizeof set, &set) != 0) return;
    int n = CPU_COUNT(&set);
    if (workers <= n) return;
    warned = 1;
    int srun = strcmp(d->launcher, "srun") == 0;
    vil_warn("this rank may run on %d CPU%s, and the loader has %d workers: they will share %s (%s)",
             n, n == 1 ? "" : "s", workers, n == 1 ? "it" : "them",
             srun ? "srun binds each task to its --cpus-per-task CPUs: raise --cpus-per-task"
                  : "mpirun binds each rank to a core when it starts 2 or fewer: add --bind-to none, "
                    "or --map-by slot:PE=N");
}

static int make_loaders(Trainer *T) {
    const VilTrainConfig *t = T->tc;
    vil_train_check_affinity(T->dist, t->workers);
    const VilConfig *c = T->mc;
    VilLoaderConfig lc;
    vil_loader_config_default(&lc, VIL_LOADER_TRAIN, c->img_size, c->in_chans, t->batch,
                              T->n_classes);
    lc.threads = t->workers;
    lc.prefetch = t->workers + 1;
    lc.seed = (uint64_t)t->seed;
    lc.repeats = t->repeats;
    lc.world = T->world;
    lc.rank = T->rank;
    lc.accum = T->accum;
    lc.quiet = T->quiet;
    lc.train.scale_min = t->scale_min;
    lc.train.hflip = t->hflip;
    lc.train.randaug_n = t->randaug_n;
    lc.train.randaug_m = t->randaug_m;
    lc.train.randaug_mstd = t->randaug_mstd;
    lc.train.reprob = t->reprob;
    lc.train.decode = t->decode_kind;
    lc.train.canvas = t->canvas;
    lc.train.canvas_bg = t->canvas_bg_kind;
    lc.mixup.mixup_alpha = t->mixup;
    lc.mixup.cutmix_alpha = t->cutmix;
    lc.mixup.prob = t->mixup_prob;
    lc.mixup.switch_prob = t->mixup_switch_prob;
    lc.mixup.smoothing = t->label_smoothing;
    lc.alloc = vil_feed_allocator(T->be);
    /* the stream family reads streams of images, their chunks in order (data/loader.h) */
    VilStreamSpec streams = {0};
    if (c->family_kind == VIL_FAMILY_STREAM) streams = (VilStreamSpec){.len = c->stream_len, .chunk = c->stream_chunk};
    lc.stream = streams;
    T->loader = vil_loader_create(T->ds, &lc);
    if (!T->loader) return -1;
    if (T->val_ds) {
        VilLoaderConfig ec;
        /* no larger than the split (vil_eval_batch), as `vil eval` */
        int eb = vil_eval_batch(T->val_ds, t->eval_batch ? t->eval_batch : t->batch, 0);
        vil_loader_config_default(&ec, VIL_LOADER_EVAL, c->img_size, c->in_chans, eb, T->n_classes);
        ec.threads = t->workers;
        ec.prefetch = t->workers + 1;
        ec.crop_pct = t->crop_pct;
        ec.canvas = t->canvas; /* a canvas model validates on canvases of its own side */
        ec.canvas_bg = t->canvas_bg_kind;
        ec.world = T->world; /* a shard each, every image exactly once: the counts are summed */
        ec.rank = T->rank;
        ec.quiet = T->quiet;
        ec.alloc = vil_feed_allocator(T->be);
        ec.stream = streams; /* as many streams of stream_len as the split has images */
        T->val_loader = vil_loader_create(T->val_ds, &ec);
        if (!T->val_loader) return -1;
    }
    return 0;
}

static void trainer_free(Trainer *T) {
    for (int i = 0; i < 2; i++)
        if (T->dp_host[i]) T->be->host_free(T->be, T->dp_host[i]);
    if (T->model_ready) vil_model_free(&T->m);
    free(T->host_losses);
    for (int i = 0; i < VIL_TRAIN_STATE_MAX; i++) free(T->gathered[i]);
    vil_runlog_close(T->runlog);
    vil_loader_free(T->loader);
    vil_loader_free(T->val_loader);
    free(T->class_names);
    if (T->ds) vil_dataset_free(T->ds);
    if (T->val_ds) vil_dataset_free(T->val_ds);
    free(T->path_last);
    free(T->path_state);
    free(T->path_best);
    free(T->path_ema);
    if (T->lock_fd >= 0) close(T->lock_fd); /* releases the lock */
}

/* ---------------- the input feed ---------------- */

/* Waits for the device, gives queued batches back and points the model at its own buffers. */
static void feed_stop(Trainer *T) {
    VilFeed *f = &T->feed;
    if (!f->be) return;
    vil_feed_drain(f, T->loader);
    vil_model_set_inputs(&T->m, NULL, NULL, NULL);
    vil_feed_free(f);
}

/* Queues micro-batch `micro` of global step `step` (its upload overlaps the work in flight); -1
 * when the loader has none (vil_loader_error says why, or the epoch ended early). The wait for
 * the loader counts in the interval's data wait. */
static int feed_next(Trainer *T, long step, int micro) {
    double t0 = vil_now();
    const VilBatch *b = vil_loader_next_batch(T->loader);
    T->wait_int += vil_now() - t0;
    if (!b) return -1;
    const void *src[3] = {b->images, b->targets, NULL};
    if (T->feed.n > 2) {
        float *h = T->dp_host[vil_feed_next_slot(&T->feed)];
        /* keyed by the samples' places in the global batch (the loader's slice order) */
        long first = ((long)micro * T->world + T->rank) * T->tc->batch;
        vil_model_drop_path_rows(&T->m, vil_hash_seed((uint64_t)T->tc->seed, TAG_DROP_PATH,
                                                      (uint64_t)step, 0), first, h);
        src[2] = h;
    }
    vil_feed_put(&T->feed, b, src);
    return 0;
}

/* ---------------- the run's setup ---------------- */

/* Everything before the first step: the data and the output folder checked before any work,
 * the loaders, the model (initialized, or from --init, or restored from the state), its
 * training state and the header. RUN_GO_ON, or RUN_END (done, nothing to do; failed). */
static RunNext trainer_setup(Trainer *T) {
    const VilTrainRun *run = T->run;
    const VilTrainConfig *t = T->tc;
    char *state_in = run->resume ? vil_train_state_path(run->resume) : NULL;
    RunNext next = run_end(T, VIL_TRAIN_FAILED);

    /* everything that can be wrong with the inputs is found before any work */
    if (open_data(T) != 0 || check_canvas(T) != 0) goto out;
    if (state_in) {
        struct stat st;
        if (stat(state_in, &st) != 0) {
            vil_error("cannot resume: no training state '%s' (%s)", state_in, vil_errno_str());
            goto out;
        }
    }
    if (out_dir_open(T, state_in != NULL) != 0) goto out;
    if (make_loaders(T) != 0) goto out;

    /* the loader's batches are micro-batches: accum of them make a step */
    T->spe = vil_loader_batches_per_epoch(T->loader) / T->accum;
    T->global_batch = (long)t->batch * T->world * T->accum;
    if (T->spe < 1 && T->mc->family_kind == VIL_FAMILY_STREAM) {
        vil_error("an epoch of %d images makes %d streams of %d, no full global batch of %ld streams (batch %d x "
                  "%d ranks x %d accum_steps): lower batch or accum_steps", vil_dataset_size(T->ds),
                  vil_dataset_size(T->ds) / T->mc->stream_len, T->mc->stream_len, T->global_batch, t->batch,
                  T->world, T->accum);
        goto out;
    }
    if (T->spe < 1) {
        vil_error("an epoch of %d samples holds no full global batch of %ld (batch %d x %d ranks x "
                  "%d accum_steps): lower batch or accum_steps", vil_dataset_size(T->ds),
                  T->global_batch, t->batch, T->world, T->accum);
        goto out;
    }
    T->total_steps = (long)t->epochs * T->spe;
    if (t->max_steps > 0 && t->max_steps < T->total_steps) T->total_steps = t->max_steps;
    T->warmup_steps = lround((double)t->warmup_epochs * (double)T->spe);
    T->peak_lr = vil_peak_lr(t->base_lr, T->global_batch);

    VilModel *m = &T->m;
    if (vil_model_init(m, T->mc, T->be) != 0) goto out;
    T->model_ready = 1;
    m->recompute = t->recompute;
    if (vil_model_init_weights(m, (uint64_t)t->seed) != 0) goto out;
    char init_note[1024] = "";
    if (run->init && !state_in) {
        VilCheckpointMeta im;
        if (vil_checkpoint_init(m, run->init, run->init_ema, &im) != 0) goto out;
        snprintf(init_note, sizeof init_note, "init:  %s%s%s%s%s\n", run->init,
                 im.weights[0] ? ":" : "", im.weights,
                 im.trained_grid && m->cfg.pos_embed_kind == VIL_POS_EMBED_LEARNED
                     ? "; pos_embed interpolated onto the run's grid" : "",
                 im.head_kept ? "; its head (other classes) not taken: the head starts fresh" : "");
        vil_checkpoint_meta_free(&im);
    }
    /* the moments (and the EMA, from the weights) exist from the start so that a save before
     * the first update is complete */
    if (vil_model_init_training(m, vil_train_optim(t), t->ema_decay > 0.0f) != 0) goto out;
    if (vil_train_init_state(m, t) != 0) goto out;
    /* the loss of a micro-batch is its share of the global batch's mean (0: the batch's own) */
    m->loss_denom = T->global_batch == t->batch ? 0 : T->global_batch;
    if (state_in && state_restore(T, state_in) != 0) goto out;
    if (!T->quiet) print_header(T, init_note, state_in);
    if (run->dry_run) {
        next = run_end(T, VIL_TRAIN_DONE);
        goto out;
    }
    /* before "nothing to do" too: a finished run whose last save was cut short is not done */
    if (state_in && T->rank == 0 && sync_run_files(T) != 0) goto out;
    if (T->step >= T->total_steps) {
        print_nothing_to_do(T);
        next = run_end(T, VIL_TRAIN_DONE);
        goto out;
    }
    if (T->rank == 0 && open_runlog(T) != 0) goto out;
    T->host_losses = vil_malloc((size_t)t->batch * sizeof(float));
    T->t_int = vil_now();
    next = RUN_GO_ON;
out:
    free(state_in);
    return next;
}

/* ---------------- the loop's pieces ---------------- */

/* The start of an epoch (or of the rest of one, on resume): training activations, the
 * loader's epoch, the batches a resumed run has done skipped, the feed and its first batch. */
static RunNext start_epoch(Trainer *T) {
    /* together: a rank without its activations would leave the others waiting in the sums */
    int no_acts = vil_model_alloc_acts(&T->m, T->tc->batch, 1) != 0;
    if (vil_dist_any(T->dist, no_acts)) {
        if (!no_acts) vil_error("rank %d: another rank cannot allocate its training activations (its message is above)",
                                T->rank);
        return run_end(T, VIL_TRAIN_FAILED);
    }
    vil_loader_start_epoch(T->loader, T->epoch);
    if (T->epoch_batch > 0) {
        /* the loader has no seek: decode and drop the batches done before the save, which keeps
         * every later batch exactly as an uninterrupted run sees it */
        print_skipping(T);
        for (int k = 0; k < T->epoch_batch * T->accum; k++) {
            const VilBatch *b = vil_loader_next_batch(T->loader);
            if (!b) {
                const char *e = vil_loader_error(T->loader);
                vil_error("cannot resume: the data loader stopped at batch %d of epoch %d: %s", k,
                          T->epoch + 1, e ? e : "the epoch is shorter than when saved");
                return run_end(T, VIL_TRAIN_FAILED);
            }
            vil_loader_release_batch(T->loader, b);
        }
        T->t_int = vil_now();
    }
    /* the feed over the model's own input buffers */
    VilModel *m = &T->m;
    const VilConfig *c = T->mc;
    size_t B = (size_t)T->tc->batch;
    size_t bytes[3] = {B * c->in_floats * sizeof(float), B * c->readouts * c->num_classes * sizeof(float),
                       vil_model_drop_path_bytes(m)};
    void *dev0[3];
    vil_model_input_buffers(m, dev0);
    int n = bytes[2] ? 3 : 2, bad = 0;
    for (int i = 0; i < 2 && n == 3 && !bad; i++)
        if (!T->dp_host[i] && !(T->dp_host[i] = T->be->host_alloc(T->be, bytes[2]))) {
            vil_error("cannot allocate %zu bytes of host memory for the drop-path scales", bytes[2]);
            bad = 1;
        }
    bad = bad || vil_feed_init(&T->feed, T->be, n, dev0, bytes) != 0;
    if (vil_dist_any(T->dist, bad)) return run_end(T, VIL_TRAIN_FAILED);
    feed_next(T, T->step, 0); /* a failure shows as no batch at the first take */
    return RUN_GO_ON;
}

/* A progress line after global step `step`, batch `batch` of its epoch (both counted from 1):
 * every log_every steps and at the last step of an epoch or of the run. */
static int is_log_step(const Trainer *T, long step, int batch) {
    return step % T->tc->log_every == 0 || batch == T->spe || step == T->total_steps;
}

/* One step: per micro-batch, the batch the feed holds, forward and backward on it, the next
 * batch's upload queued behind it; then the update (train.h). RUN_GO_ON, or RUN_END failed when
 * the loader ran dry on any rank (reported, saved). */
static RunNext step(Trainer *T) {
    const VilTrainConfig *t = T->tc;
    T->lr = (float)vil_sched_lr(t, T->step - T->sched_offset, T->total_steps - T->sched_offset,
                                T->warmup_steps, T->spe, T->peak_lr);
    VilStepParams sp = vil_step_params(t, T->lr);
    sp.dist = T->dist;
    vil_dist_progress("training", T->step + 1);
    test_fault(T, FAULT_TRAIN, T->step + 1);
    /* a step that logs reads each micro-batch's losses: the logged loss is the step's mean */
    int logs = is_log_step(T, T->step + 1, T->epoch_batch + 1);
    T->loss_sum = 0;
    for (int a = 0; a < T->accum; a++) {
        void *in[3];
        const VilBatch *b = vil_feed_take(&T->feed, in);
        /* together: a rank without its batch would leave the others waiting in the sums */
        if (vil_dist_any(T->dist, b == NULL)) {
            const char *e = b ? "another rank's loader stopped" : vil_loader_error(T->loader);
            vil_error("the data loader stopped at epoch %d, batch %d: %s", T->epoch + 1,
                      T->epoch_batch, e ? e : "the epoch ended early");
            if (b) vil_loader_release_batch(T->loader, b);
            save_after_failure(T);
            return run_end(T, VIL_TRAIN_FAILED);
        }
        if (a == 0) test_fault(T, FAULT_GRAD, T->step + 1);
        vil_model_set_inputs(&T->m, in[0], in[1], T->feed.n > 2 ? in[2] : NULL);
        vil_model_stream_chunk(&T->m, b->chunk); /* a stream's chunk: 0 where it starts */
        /* the initial states keyed as drop path is: (seed, step) and the global sample index */
        sp.init_seed = vil_hash_seed((uint64_t)t->seed, TAG_INIT_STATE, (uint64_t)T->step, 0);
        sp.init_first = ((long)a * T->world + T->rank) * t->batch;
        /* nothing in it allocates after the setup (train.h), so this never fails on one rank
         * alone: it needs no collective */
        if (vil_train_micro(&T->m, &sp, a == 0, a + 1 == T->accum) != 0) {
            vil_loader_release_batch(T->loader, b);
            return run_end(T, VIL_TRAIN_FAILED);
        }
        vil_feed_done(&T->feed);
        /* the next micro-batch (this step's, or the next step's first while this epoch has
         * one): its upload runs while the device works on this one */
        if (a + 1 < T->accum) feed_next(T, T->step, a + 1);
        else if (T->epoch_batch + 1 < T->spe && T->step + 1 < T->total_steps) feed_next(T, T->step + 1, 0);
        /* the feed has finished copying the batch (vil_feed_take waited for it) */
        vil_loader_release_batch(T->loader, b);
        if (logs && a + 1 < T->accum) T->loss_sum += batch_loss_sum(T);
    }
    if (vil_train_update(&T->m, &sp) != 0) return run_end(T, VIL_TRAIN_FAILED); /* as above */
    T->step++;
    T->epoch_batch++;
    T->steps_here++;
    T->int_steps++;
    return RUN_GO_ON;
}

/* A log step: the loss (and gradient norm) read back, the divergence check, the progress line
 * and the on_log callback; the next interval starts. RUN_GO_ON, or RUN_END diverged. */
static RunNext log_progress(Trainer *T) {
    const VilTrainConfig *t = T->tc;
    const VilTrainRun *run = T->run;
    float grad_norm = -1.0f;
    T->last_loss = read_loss(T);
    if (t->clip_grad > 0.0f) grad_norm = vil_model_grad_norm(&T->m);
    double now = vil_now(), dt = now - T->t_int;
    T->train_time += dt;
    if (t->clip_grad > 0.0f && !isfinite(grad_norm)) {
        vil_error("the gradient norm is %g at step %ld (epoch %d): training diverged. The last "
                  "good checkpoint %s is kept; lower base_lr or clip_grad.", grad_norm, T->step,
                  T->epoch + 1, T->path_last);
        return run_end(T, VIL_TRAIN_DIVERGED);
    }
    if (!isfinite(T->last_loss)) {
        vil_error("the loss is %g at step %ld (epoch %d): training diverged. The last good "
                  "checkpoint %s is kept; lower base_lr or set clip_grad.", T->last_loss, T->step,
                  T->epoch + 1, T->path_last);
        return run_end(T, VIL_TRAIN_DIVERGED);
    }
    VilTrainProgress p = {0};
    p.epoch = T->epoch;
    p.epochs = t->epochs;
    p.step = T->step;
    p.total_steps = T->total_steps;
    p.epoch_step = T->epoch_batch;
    p.epoch_steps = (int)T->spe;
    p.loss = T->last_loss;
    p.lr = T->lr;
    p.grad_norm = grad_norm;
    /* all ranks; a stream model's rows hold readouts images each */
    p.images_per_s = dt > 0 ? (double)T->int_steps * T->global_batch * T->mc->readouts / dt : 0;
    p.data_wait = dt > 0 ? T->wait_int / dt : 0;
    p.eta_s = eta_seconds(T, T->train_time);
    print_progress(T, &p);
    double epochs = (double)(T->step - T->sched_offset) / (double)T->spe;
    if (T->runlog && vil_runlog_train(T->runlog, &p, epochs) != 0) runlog_failed(T);
    if (run->on_log) run->on_log(run->ctx, &p);
    T->t_int = vil_now();
    T->wait_int = 0;
    T->int_steps = 0;
    return RUN_GO_ON;
}

/* ---------------- stopping on a signal ---------------- */

static long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* async-signal-safe */
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void vil_stop_signal(VilStop *s, int sig) {
    long now = now_ms();
    if (s->level == 0) {
        s->sig = sig;
        s->t_ms = now;
        s->level = 1;
        return;
    }
    long since = now - s->t_ms;
    /* the same request: it arrived with the last one, or before the run said what it does */
    if (since < 1000 || (s->said < s->level && since < 10000)) return;
    if (s->level == 1) {
        s->level = 2;
        s->t_ms = now;
        return;
    }
    /* asked a third time: the signal's own action, which ends the process unsaved */
    signal(sig, SIG_DFL);
    raise(sig);
}

const char *vil_signal_name(int sig) {
    static _Thread_local char buf[24];
    if (sig == SIGINT) return "SIGINT";
    if (sig == SIGTERM) return "SIGTERM";
    if (sig == SIGUSR1) return "SIGUSR1";
    snprintf(buf, sizeof buf, "signal %d", sig);
    return buf;
}

static int stop_level(const Trainer *T) { return T->run->stop ? T->run->stop->level : 0; }

/* the signal that stops the run, the same on every rank: this rank's, else another's (SIGTERM
 * before SIGINT before SIGUSR1 when ranks got different ones) */
static int stop_signal_of_all(const Trainer *T) {
    int own = T->run->stop ? T->run->stop->sig : 0;
    double v[3] = {own == SIGTERM, own == SIGINT, own == SIGUSR1};
    vil_dist_sum_double(T->dist, v, 3);
    return v[0] > 0 ? SIGTERM : v[1] > 0 ? SIGINT : v[2] > 0 ? SIGUSR1 : own;
}

/* Open MPI's mpirun turns a SIGTERM or Ctrl-C it gets into the job's end: after
 * odls_base_sigkill_timeout seconds (default 1) it sends the ranks SIGTERM and as long again
 * later SIGKILL. A rank that gets SIGTERM under it saves at once (nothing waits for a
 * validation); SIGINT or SIGUSR1, which a user sends the ranks themselves (pkill), stops as on
 * one process. */
static int killed_soon(const Trainer *T, int sig) {
    return T->dist && T->dist->mpi && strcmp(T->dist->launcher, "mpirun") == 0 &&
           getenv("OMPI_COMM_WORLD_SIZE") && sig == SIGTERM;
}

/* --stop-after reached or a signal caught (on any rank: every rank stops at this step): 1 with
 * the status to stop with in *why, or 0. A signal is acknowledged here: the run says it saves. */
static int stop_requested(Trainer *T, VilTrainStatus *why) {
    if (vil_dist_any(T->dist, stop_level(T) > 0)) {
        *why = VIL_TRAIN_INTERRUPTED;
        T->stop_sig = stop_signal_of_all(T);
        VilStop *s = T->run->stop;
        if (s && s->said < s->level) {
            char what[96];
            snprintf(what, sizeof what, "saving at step %ld and stopping", T->step);
            print_stopping(T, T->stop_sig, what, s->level < 2 ? NULL : "ends vil at once, without saving");
            s->said = s->level;
        }
    } else if (T->run->stop_after > 0 && T->step >= T->run->stop_after) *why = VIL_TRAIN_STOPPED;
    else return 0;
    return 1;
}

/* save_every_steps inside an epoch: the run saved, and a step checkpoint. */
static RunNext save_step(Trainer *T) {
    double t0 = vil_now();
    vil_dist_progress("saving", T->step);
    if (save_run(T, NULL) != RUN_GO_ON) return RUN_END;
    if (T->rank == 0) snapshot_step(T);
    print_saved_step(T);
    /* the save counts in the ETA, not in the interval's images/s */
    T->train_time += vil_now() - t0;
    T->t_int += vil_now() - t0;
    return RUN_GO_ON;
}

/* A stop inside an epoch: save and say where. */
static RunNext stop_mid_epoch(Trainer *T, VilTrainStatus why) {
    if (save_run(T, NULL) != RUN_GO_ON) return RUN_END;
    print_stop(T, why, -1);
    return run_end(T, why);
}

/* The end of an epoch, or of the schedule inside one (max_steps): the feed stopped, the
 * validation pass when due, the save (best.safetensors when the top-1 improved), and a stop
 * when one was asked for. RUN_GO_ON, or RUN_END (done, stopped, interrupted; failed, diverged). */
static RunNext end_of_epoch(Trainer *T, VilTrainResult *res) {
    feed_stop(T);
    double t_end = vil_now();
    int finished = T->step >= T->total_steps;
    int epoch_done = T->epoch_batch >= T->spe;
    int ep = T->epoch;
    if (epoch_done) {
        T->epoch++;
        T->epoch_batch = 0;
    }
    int every = T->tc->eval_every_epochs, improved = 0, abandoned = 0;
    if (T->val_loader && (finished || (epoch_done && (ep + 1) % every == 0))) {
        double t_eval = vil_now();
        int rc = evaluate(T, ep, res);
        if (rc < 0) {
            save_after_failure(T);
            return run_end(T, VIL_TRAIN_FAILED);
        }
        abandoned = rc == 1;
        T->eval_secs = vil_now() - t_eval;
        T->eval_total += T->eval_secs; /* train_time takes it in below */
        improved = !abandoned && res->top1 > T->best_top1;
    }
    /* a stop asked for during the step or the validation: said before the save */
    VilTrainStatus why;
    int stop = stop_requested(T, &why) && (!finished || abandoned);
    /* best.safetensors goes last, after the state that records its step (save_all) */
    vil_dist_progress("saving", T->step);
    if (save_run(T, improved ? &res->top1 : NULL) != RUN_GO_ON) return RUN_END;
    if (T->rank == 0 && snapshot_due(T)) snapshot_step(T);
    print_epoch_end(T, epoch_done, ep);
    if (stop) {
        print_stop(T, why, ep);
        return run_end(T, why);
    }
    /* the evaluation and the saves count in the ETA, not in the next interval's images/s */
    T->train_time += vil_now() - t_end;
    T->t_int = vil_now();
    T->wait_int = 0;
    return finished ? run_end(T, VIL_TRAIN_DONE) : RUN_GO_ON;
}

/* ---------------- the run ---------------- */

/* The epochs until the run ends; T->status says how. */
static void train_loop(Trainer *T, VilTrainResult *res) {
    while (T->step < T->total_steps) {
        RunNext next = start_epoch(T);
        while (next == RUN_GO_ON && T->epoch_batch < T->spe && T->step < T->total_steps) {
            if ((next = step(T)) != RUN_GO_ON) break;
            int last_of_epoch = T->epoch_batch == T->spe || T->step == T->total_steps;
            if (is_log_step(T, T->step, T->epoch_batch) && (next = log_progress(T)) != RUN_GO_ON) break;
            if (!last_of_epoch && snapshot_due(T) && (next = save_step(T)) != RUN_GO_ON) break;
            /* at an epoch's last batch the end of the epoch asks (the validation may come first) */
            VilTrainStatus why;
            if (!last_of_epoch && stop_requested(T, &why)) next = stop_mid_epoch(T, why);
            else show_progress(T);
        }
        if (next == RUN_GO_ON) next = end_of_epoch(T, res);
        if (next != RUN_GO_ON) return;
    }
    T->status = VIL_TRAIN_DONE;
}

VilTrainStatus vil_train(const VilTrainRun *run, VilTrainResult *res) {
    Trainer TT = {0}, *T = &TT;
    memset(res, 0, sizeof *res);
    res->top1 = res->top5 = res->ema_top1 = res->ema_top5 = res->best_top1 = -1.0f;
    res->last_loss = NAN;
    T->run = run;
    T->lock_fd = -1;
    T->dist = run->dist;
    T->rank = run->dist ? run->dist->rank : 0;
    T->world = run->dist ? run->dist->world : 1;
    T->accum = run->train.accum_steps;
    T->quiet = run->quiet || T->rank != 0;
    T->mc = &run->model;
    T->tc = &run->train;
    T->be = run->be;
    T->log = run->log ? run->log : stdout;
    vil_progress_init(&T->con, T->log, T->quiet ? VIL_PROGRESS_NONE : run->progress);
    T->best_top1 = -1.0f;
    T->best_step = -1;
    T->last_loss = NAN;
    T->t_start = vil_now();
    fault_parse();
    /* the watchdog's limit for this run's waits on the other ranks */
    if (T->world > 1) vil_dist_set_timeout(T->tc->dist_timeout);
    vil_dist_progress("setup", -1);
    RunNext next = trainer_setup(T);
    /* together: a rank that failed its setup (rank 0 owns the folder) stops every rank */
    if (vil_dist_any(T->dist, next != RUN_GO_ON) && next == RUN_GO_ON) {
        vil_error("rank %d: another rank failed to set up the run (its message is above)", T->rank);
        next = run_end(T, VIL_TRAIN_FAILED);
    }
    if (next == RUN_GO_ON) train_loop(T, res);
    vil_dist_progress("the run's end", T->step);
    res->step = T->step;
    res->epoch = T->epoch;
    res->epochs_done = T->spe > 0 ? (double)(T->step - T->sched_offset) / (double)T->spe : 0.0;
    res->best_top1 = T->best_top1;
    res->last_loss = T->last_loss;
    res->seconds = vil_now() - T->t_start;
    res->signal = T->status == VIL_TRAIN_INTERRUPTED ? T->stop_sig : 0;
    out_log(T); /* the bar off the terminal's last line */
    feed_stop(T);
    trainer_free(T);
    return T->status;
}

