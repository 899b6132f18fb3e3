/* test_train.c: the training run on the CPU backend: lr schedule values against the formula and
 * timm's (step, multistep, const_cosine), the EMA update and its warmup, top-1 / top-5 counting,
 * the config tables, a tiny synthetic IDX dataset trained for a few steps (the loss falls), resume
 * equal to an uninterrupted run bit for bit (AdamW, SGD, Lamb; a stream model stopped inside its
 * streams, with each initial-state intervention, and its evaluation by position), the
 * checkpoint files (atomic, readable by `vil info` and `vil eval`), divergence and CLI errors,
 * and the run folder's consistency: checkpoints behind the state after a kill brought up to it
 * on resume, failed saves reported, stale temporaries removed, used or unwritable folders
 * refused before any work. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cJSON.h>

#include "data_corpus.h"
#include "eval/eval.h"
#include "model_testing.h"
#include "testing.h"
#include "train/train.h"
#include "vil/backend.h"
#include "formats/checkpoint.h"
#include "vil/common.h"
#include "vil/model.h"
#include "formats/safetensors.h"

static char *dir;

static const char *path(const char *name) { return t_path(dir, name); }


/* ---------------- pieces ---------------- */

static void test_schedule(void) {
    double peak = 1e-3, w0 = 1e-6, lo = 1e-5;
    long total = 1000, warm = 100;
    double e = 0;
    e = fmax(e, fabs(vil_lr_at(0, total, warm, peak, w0, lo) - w0));
    e = fmax(e, fabs(vil_lr_at(50, total, warm, peak, w0, lo) - (w0 + (peak - w0) * 0.5)));
    e = fmax(e, fabs(vil_lr_at(100, total, warm, peak, w0, lo) - peak));
    e = fmax(e, fabs(vil_lr_at(550, total, warm, peak, w0, lo) - (peak + lo) / 2));
    e = fmax(e, fabs(vil_lr_at(325, total, warm, peak, w0, lo) -
                     (lo + 0.5 * (peak - lo) * (1 + cos(M_PI * 0.25)))));
    e = fmax(e, fabs(vil_lr_at(1000, total, warm, peak, w0, lo) - lo));
    e = fmax(e, fabs(vil_lr_at(0, total, 0, peak, w0, lo) - peak));
    T_CLOSE("lr schedule at key steps", e, 1e-15);
    T_CLOSE("linear scaling: 5e-4 at 1024 -> 1e-3", fabs(vil_peak_lr(5e-4, 1024) - 1e-3), 1e-15);
    T_CLOSE("linear scaling: 1e-3 at 512 -> 1e-3", fabs(vil_peak_lr(1e-3, 512) - 1e-3), 1e-15);
    int mono = 1;
    for (long s = 1; s < total; s++) {
        double a = vil_lr_at(s - 1, total, warm, peak, w0, lo), b = vil_lr_at(s, total, warm, peak, w0, lo);
        if (s <= warm ? b < a : b > a) mono = 0;
    }
    T_CHECK(mono, "lr rises through the warmup and falls after it");
}

/* the other schedules at the steps where they change, against timm's formulas evaluated in
 * Python (StepLRScheduler: peak * rate ** (epoch // decay_t); MultiStepLRScheduler: peak * rate **
 * bisect_right(milestones, epoch); warmup_prefix off) and the cosine's closed form; 10 steps per
 * epoch, a warmup of 15 steps */
static void test_schedules(void) {
    VilTrainConfig t;
    vil_train_config_default(&t);
    t.epochs = 10, t.warmup_lr = 0.01f, t.min_lr = 0.001f;
    long total = 100, warm = 15, spe = 10;
    double peak = 2.0, e = 0;
    struct {
        const char *sched;
        float decay_epochs, decay_rate;
        const char *milestones;
        float hold;
        long step;
        double want;
    } C[] = {
        /* the warmup comes first in each */
        {"step", 0.1f, 0.5f, "", 0, 5, 0.01 + (2.0 - 0.01) * 5 / 15},
        {"multistep", 1, 0.5f, "3,6", 0, 14, 0.01 + (2.0 - 0.01) * 14 / 15},
        {"const_cosine", 1, 0.5f, "", 4, 0, 0.01},
        /* Python: 1 // 0.1 == 9.0 (not 10), 3 // 0.1 == 29.0, 7 // 2.4 == 2.0 */
        {"step", 0.1f, 0.5f, "", 0, 15, 2.0 * 0.001953125},
        {"step", 0.1f, 0.5f, "", 0, 39, 2.0 * 1.862645149230957e-09},
        {"step", 2.4f, 0.97f, "", 0, 79, 2.0 * 0.97 * 0.97},
        {"step", 2.4f, 0.97f, "", 0, 47, 2.0 * 0.97},
        {"step", 2.4f, 0.97f, "", 0, 19, 2.0},
        {"multistep", 1, 0.5f, "3,6", 0, 15, 2.0},
        {"multistep", 1, 0.5f, "3,6", 0, 29, 2.0},
        {"multistep", 1, 0.5f, "3,6", 0, 30, 1.0},
        {"multistep", 1, 0.5f, "3,6", 0, 60, 0.5},
        {"multistep", 1, 0.5f, "3,6", 0, 99, 0.5},
        {"multistep", 1, 0.5f, "0,1", 0, 15, 0.5},
        /* held to step 40, then cosine over 60 steps */
        {"const_cosine", 1, 0.5f, "", 4, 15, 2.0},
        {"const_cosine", 1, 0.5f, "", 4, 40, 2.0},
        {"const_cosine", 1, 0.5f, "", 4, 70, (2.0 + 0.001) / 2},
        {"const_cosine", 1, 0.5f, "", 4, 55, 0.001 + 0.5 * (2.0 - 0.001) * (1 + cos(M_PI * 0.25))},
        {"const_cosine", 1, 0.5f, "", 4, 100, 0.001},
        /* held less than the warmup: the cosine starts after the warmup, as cosine does */
        {"const_cosine", 1, 0.5f, "", 0.5f, 57, 0.001 + 0.5 * (2.0 - 0.001) * (1 + cos(M_PI * 42 / 85))},
        {"cosine", 1, 0.5f, "", 0, 57, 0.001 + 0.5 * (2.0 - 0.001) * (1 + cos(M_PI * 42 / 85))},
    };
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        strcpy(t.sched, C[i].sched);
        t.decay_epochs = C[i].decay_epochs, t.decay_rate = C[i].decay_rate, t.sched_const_epochs = C[i].hold;
        strcpy(t.decay_milestones, C[i].milestones);
        T_CHECK(vil_train_config_finalize(&t) == 0, "%s: a valid config", C[i].sched);
        double got = vil_sched_lr(&t, C[i].step, total, warm, spe, peak), d = fabs(got - C[i].want) / C[i].want;
        if (d > 1e-6) printf("  %s step %ld: %.17g, want %.17g\n", C[i].sched, C[i].step, got, C[i].want);
        e = fmax(e, d);
    }
    T_CLOSE("step, multistep, const_cosine vs timm's formulas", e, 1e-6);
    long ms[4];
    T_CHECK(vil_milestones_parse("30,60,90", ms, 4) == 3 && ms[0] == 30 && ms[2] == 90, "milestones 30,60,90");
    const char *bad[] = {"30,20", "30,,60", "30,", "-1", " 3", "3 ", "1e3", "x", "30,30"};
    int refused = 1;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) refused &= vil_milestones_parse(bad[i], NULL, 0) < 0;
    T_CHECK(refused, "milestones not increasing integers refused");
    strcpy(t.sched, "plateau");
    T_CHECK(vil_train_config_finalize(&t) == VIL_EUSAGE, "an unknown sched refused");
    strcpy(t.sched, "multistep"), strcpy(t.decay_milestones, "5,3");
    T_CHECK(vil_train_config_finalize(&t) == VIL_EUSAGE, "decreasing milestones refused");
    strcpy(t.decay_milestones, "3"), t.nesterov = 1, t.momentum = 0;
    T_CHECK(vil_train_config_finalize(&t) == VIL_EUSAGE, "nesterov without momentum refused");
}

/* timm's ModelEmaV3.get_decay(step) with use_warmup (gamma 1, power 2/3; evaluated in Python):
 * 0 at step 1, then 1 - (1 + (step - 1)) ** -(2/3) up to the decay */
static void test_ema_warmup(void) {
    struct {
        long step;
        double decay, want;
    } C[] = {{1, 0.9999, 0.0}, {2, 0.9999, 0.3700394750525634}, {10, 0.9999, 0.7845565309968117},
             {1000, 0.9999, 0.99}, {1000, 0.98, 0.98}, {100000, 0.9999, 0.9995358411166387}};
    double e = 0;
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++)
        e = fmax(e, fabs(vil_ema_decay_at(C[i].decay, 1, C[i].step) - C[i].want));
    T_CLOSE("EMA warmup vs timm's ModelEmaV3", e, 1e-12);
    T_CHECK(vil_ema_decay_at(0.9999, 0, 1) == 0.9999 && vil_ema_decay_at(0.9999, 0, 50) == 0.9999,
            "without the warmup: the decay at every step");
}

/* the training step's EMA with the warmup on: the first update copies the weights (decay 0),
 * the second uses vil_ema_decay_at's 0.37 */
static void test_step_ema_warmup(void) {
    VilTrainConfig t;
    vil_train_config_default(&t);
    t.ema_decay = 0.9f, t.model_ema_warmup = 1;
    VilModel m;
    t_tiny_model(&m);
    VilStepParams sp = vil_step_params(&t, 1e-2f);
    T_CHECK(vil_model_init_training(&m, sp.optim, 1) == 0, "vil_model_init_training(&m, sp.optim, 1)");
    size_t n = m.buf_len;
    float *p = malloc(n * sizeof(float)), *e = malloc(n * sizeof(float)), *e1 = malloc(n * sizeof(float));
    VilRng r;
    vil_rng_seed(&r, 9);
    int same = 1;
    double err = 0;
    for (int s = 1; s <= 2; s++) {
        for (size_t i = 0; i < n; i++) m.grads[i] = vil_rng_normal(&r);
        vil_model_pack(&m, m.grads, m.grads);
        vil_model_unpack(&m, m.grads, m.grads);
        vil_train_update(&m, &sp);
        vil_model_get_params(&m, p);
        vil_model_use_ema(&m, 1);
        vil_model_get_params(&m, e);
        vil_model_use_ema(&m, 0);
        if (s == 1) {
            same = memcmp(p, e, n * sizeof(float)) == 0;
            memcpy(e1, e, n * sizeof(float));
            continue;
        }
        float d = (float)vil_ema_decay_at(0.9, 1, 2);
        for (size_t i = 0; i < n; i++) err = fmax(err, fabs(e[i] - (d * e1[i] + (1.0f - d) * p[i])));
    }
    T_CHECK(same, "EMA warmup: the first update copies the weights");
    T_CLOSE("EMA warmup: the second update at decay 0.37", err, 1e-6);
    free(p), free(e), free(e1);
    vil_model_free(&m);
}

static void test_ema(void) {
    const VilBackend *be = &vil_backend_cpu;
    size_t n = 1003;
    float *ema = be->alloc(be, n * 4), *p = be->alloc(be, n * 4);
    double *want = malloc(n * sizeof(double));
    VilRng r;
    vil_rng_seed(&r, 5);
    for (size_t i = 0; i < n; i++) want[i] = ema[i] = vil_rng_normal(&r);
    float decay = 0.99f;
    double err = 0;
    for (int it = 0; it < 3; it++) {
        for (size_t i = 0; i < n; i++) p[i] = 3.0f * vil_rng_normal(&r);
        be->ema_update(be, &(VilEma){.ema = ema, .p = p, .n = n, .decay = decay});
        for (size_t i = 0; i < n; i++) {
            want[i] = (double)decay * want[i] + (1.0 - (double)decay) * p[i];
            err = fmax(err, fabs(ema[i] - want[i]) / (1e-3 + fabs(want[i])));
        }
    }
    T_CLOSE("EMA: ema = d * ema + (1 - d) * params", err, 1e-5);
    be->free(be, ema);
    be->free(be, p);
    free(want);
}

static void test_topk(void) {
    enum { C = 7 };
    float l[6][C] = {
        {0.1f, 0.2f, 9.0f, 0.3f, 0.0f, -1.0f, 0.5f}, /* label 2: first */
        {5.0f, 4.0f, 3.0f, 1.0f, 0.0f, 0.0f, 0.0f},  /* label 2: third -> top-5 only */
        {6.0f, 5.0f, 4.0f, 3.0f, 2.0f, 1.0f, 0.0f},  /* label 6: seventh -> neither */
        {1.0f, 3.0f, 0.0f, 3.0f, 0.0f, 0.0f, 0.0f},  /* label 3 ties with class 1 -> second */
        {1.0f, NAN, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f},   /* label 1 not finite -> neither */
        {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f},  /* label -1 (padding) -> not counted */
    };
    int labels[6] = {2, 2, 6, 3, 1, -1};
    long t1 = 0, t5 = 0;
    vil_topk_count(&l[0][0], labels, 6, C, &t1, &t5);
    T_CHECK(t1 == 1 && t5 == 3, "top-k by hand: top-1 %ld (want 1), top-5 %ld (want 3)", t1, t5);
    /* fewer than five classes: top-5 is every finite row */
    float l2[2][3] = {{0, 1, 2}, {2, 1, 0}};
    int lab2[2] = {0, 0};
    t1 = t5 = 0;
    vil_topk_count(&l2[0][0], lab2, 2, 3, &t1, &t5);
    T_CHECK(t1 == 1 && t5 == 2, "top-k with 3 classes: %ld / %ld", t1, t5);
    /* the validation loss: -log softmax at the label, by hand: row {0,1,2} label 0 is
     * log(1 + e + e^2) - 0, row {2,1,0} label 0 is log(e^2 + e + 1) - 2; a row of 1000 and 0
     * stays finite (the max is taken out first); label -1 is not counted */
    double z = log(1 + exp(1.0) + exp(2.0));
    T_CLOSE("validation loss of two rows", fabs(vil_xent_sum(&l2[0][0], lab2, 2, 3) - (2 * z - 2)), 1e-6);
    float l3[2][2] = {{1000, 0}, {0, 0}};
    int lab3[2] = {1, -1};
    T_CLOSE("validation loss with a logit of 1000", fabs(vil_xent_sum(&l3[0][0], lab3, 2, 2) - 1000.0), 1e-9);
}

static void test_config(void) {
    VilConfig c;
    VilTrainConfig t;
    vil_config_default(&c);
    vil_train_config_default(&t);
    T_CHECK(vil_train_config_load(&c, &t, "configs/vil_tiny_in1k.cfg") == 0 && vil_config_finalize(&c) == 0 &&
                vil_model_count_params(&c) == 6853096,
            "a cfg with model and training keys (ViL-Tiny parameters)");
    vil_config_default(&c);
    fprintf(stderr, "(an expected error follows)\n");
    T_CHECK(vil_config_load(&c, "configs/vil_tiny_in1k.cfg") == VIL_EUSAGE,
            "a model-only reader refuses the training keys");
    vil_config_default(&c);
    vil_train_config_default(&t);
    int ok = vil_train_config_load(&c, &t, "configs/vil_small_in1k.cfg") == 0 &&
             vil_config_finalize(&c) == 0 && vil_train_config_finalize(&t) == 0;
    T_CHECK(ok && vil_model_count_params(&c) == 25206760 && t.base_lr == 1e-3f && t.batch == 64 &&
                t.weight_decay == 0.05f && c.drop_path == 0.05f && t.epochs == 300 &&
                t.ema_decay == 0.99996f && t.min_lr == 1e-5f && t.warmup_lr == 1e-6f,
            "vil_small_in1k.cfg: the recipe's values");
    vil_config_default(&c);
    vil_train_config_default(&t);
    T_CHECK(vil_train_config_load(&c, &t, "configs/vil_fashion.cfg") == 0 &&
                vil_config_finalize(&c) == 0 && vil_train_config_finalize(&t) == 0,
            "vil_fashion.cfg loads");
    fprintf(stderr, "(expected errors follow)\n");
    T_CHECK(vil_config_set(&c, "epochs", "3") != 0, "model-only set rejects a training key");
    T_CHECK(vil_train_config_set(&c, &t, "epoch", "3") != 0, "unknown key rejected");
    T_CHECK(vil_train_config_set_kv(&c, &t, "epochs=3") == 0 && t.epochs == 3, "training key set");
    T_CHECK(vil_train_config_set_kv(&c, &t, "base_lr=abc") != 0, "strict number parsing");
    char *j = vil_train_config_to_json(&t);
    VilTrainConfig u;
    vil_train_config_default(&u);
    T_CHECK(vil_train_config_from_json(&u, j) == 0 && memcmp(&u, &t, sizeof t) == 0,
            "training config JSON round trip");
    free(j);
    t.ema_decay = 1.0f;
    T_CHECK(vil_train_config_finalize(&t) != 0, "ema_decay 1 rejected");
}

/* ---------------- a tiny dataset and runs ---------------- */

/* 16 x 16 gray images of 4 classes: a bright 6 x 6 block in quadrant (label) on noise */
static void write_split(const char *prefix, int n, uint64_t seed) {
    int H = 16, W = 16;
    unsigned char *img = malloc((size_t)n * H * W), *lab = malloc((size_t)n);
    VilRng r;
    vil_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        int y = i % 4;
        lab[i] = (unsigned char)y;
        int oy = (y / 2) * 8 + 1 + (int)vil_rng_below(&r, 2), ox = (y % 2) * 8 + 1 + (int)vil_rng_below(&r, 2);
        for (int p = 0; p < H * W; p++) img[(size_t)i * H * W + p] = (unsigned char)(vil_rng_below(&r, 90));
        for (int a = 0; a < 6; a++)
            for (int b = 0; b < 6; b++) img[(size_t)i * H * W + (oy + a) * W + ox + b] = 230;
    }
    char p[4096];
    unsigned dims[3] = {(unsigned)n, (unsigned)H, (unsigned)W};
    snprintf(p, sizeof p, "%s/%s-images-idx3-ubyte", dir, prefix);
    corpus_write_idx(p, 3, dims, img, (size_t)n * H * W, 0);
    snprintf(p, sizeof p, "%s/%s-labels-idx1-ubyte", dir, prefix);
    corpus_write_idx(p, 1, dims, lab, (size_t)n, 0);
    free(img);
    free(lab);
}

static const char *CFG =
    "name = tiny_test\narch = vil\nimg_size = 16\npatch_size = 4\nstride = 4\nin_chans = 1\n"
    "embed_dim = 32\ndepth = 2\nnum_classes = 4\ndrop_path = 0.1\n"
    "epochs = 2\nbatch = 16\nbase_lr = 0.05\nwarmup_epochs = 0.5\nmin_lr = 1e-5\n"
    "weight_decay = 0.05\nema_decay = 0.9\nclip_grad = 5\nlabel_smoothing = 0.1\n"
    "mixup = 0.8\ncutmix = 1.0\nmixup_prob = 0.5\nrepeats = 1\nrandaug_n = 1\nreprob = 0.25\n"
    "scale_min = 0.5\ncrop_pct = 1\nworkers = 2\nlog_every = 1\neval_every_epochs = 1\n";

typedef struct {
    float loss[256];
    int n;
} Trace;

static void on_log(void *ctx, const VilTrainProgress *p) {
    Trace *t = ctx;
    if (t->n < 256) t->loss[t->n++] = p->loss;
}

/* on_log that also makes the folder g_block_at (once), to fail a later save */
static const char *g_block_at;
static void on_log_block(void *ctx, const VilTrainProgress *p) {
    on_log(ctx, p);
    if (g_block_at) mkdir(g_block_at, 0755);
    g_block_at = NULL;
}

static void setup(VilTrainRun *r, const char *out, Trace *trace) {
    memset(r, 0, sizeof *r);
    vil_config_default(&r->model);
    vil_train_config_default(&r->train);
    if (vil_train_config_load(&r->model, &r->train, path("tiny.cfg")) != 0 ||
        vil_config_finalize(&r->model) != 0 || vil_train_config_finalize(&r->train) != 0) {
        printf("FAIL: the test config does not load\n");
        exit(1);
    }
    r->data = dir;
    r->out_dir = out;
    r->be = &vil_backend_cpu;
    r->quiet = 1;
    r->on_log = on_log;
    r->ctx = trace;
}

/* vil_st_read with its message dropped: the callers probe files that may be missing or
 * unreadable and report with their own checks */
static int st_read_quiet(const char *path, VilSafetensors *st) {
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_st_read(path, st);
    vil_error_release(&cap);
    return rc;
}

/* 1 when every tensor of a and b is present in both with identical bytes */
static int same_tensors(const char *a, const char *b, const char *const *names, int n) {
    VilSafetensors sa, sb;
    if (st_read_quiet(a, &sa) != 0) return 0;
    if (st_read_quiet(b, &sb) != 0) {
        vil_st_free(&sa);
        return 0;
    }
    int same = 1;
    for (int i = 0; i < n; i++) {
        const VilStTensor *x = vil_st_find(&sa, names[i]), *y = vil_st_find(&sb, names[i]);
        if (!x || !y || x->nbytes != y->nbytes || memcmp(x->data, y->data, x->nbytes) != 0) {
            printf("     tensor '%s' differs between %s and %s\n", names[i], a, b);
            same = 0;
        }
    }
    vil_st_free(&sa);
    vil_st_free(&sb);
    return same;
}

static int no_temp_files(const char *d) {
    char cmd[4200], out[4096];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -c '\\.tmp\\.'", d);
    t_run(cmd, out, sizeof out);
    return atoi(out) == 0;
}

static void test_train_resume(void) {
    write_split("train", 192, 1);
    write_split("t10k", 64, 2);
    corpus_write(path("tiny.cfg"), CFG, strlen(CFG));

    /* A: uninterrupted, 2 epochs of 12 steps */
    VilTrainRun ra;
    Trace ta = {0};
    char outa[4096], outb[4096];
    snprintf(outa, sizeof outa, "%s", path("runA"));
    snprintf(outb, sizeof outb, "%s", path("runB"));
    setup(&ra, outa, &ta);
    VilTrainResult res_a;
    double t0 = vil_now();
    VilTrainStatus st = vil_train(&ra, &res_a);
    T_CHECK(st == VIL_TRAIN_DONE && res_a.step == 24 && res_a.epoch == 2,
            "uninterrupted run: status %d, %ld steps, %d epochs", st, res_a.step, res_a.epoch);
    printf("     run A: %.1f s, losses", vil_now() - t0);
    for (int i = 0; i < ta.n; i++) printf(" %.3f", ta.loss[i]);
    printf("\n     val top-1 %.1f%%  EMA %.1f%%\n", res_a.top1, res_a.ema_top1);
    T_CHECK(ta.n == 24, "a loss at every step with log_every = 1 (%d)", ta.n);
    T_CHECK(res_a.top1 >= 0 && res_a.ema_top1 >= 0 && res_a.top5 == 100.0f,
            "model and EMA evaluated (top-5 of 4 classes is 100%%)");

    /* without augmentation the task is easy: the loss must fall clearly */
    VilTrainRun rp;
    Trace tp = {0};
    VilTrainResult res_p;
    setup(&rp, path("runP"), &tp);
    rp.train.mixup = rp.train.cutmix = 0;
    rp.train.randaug_n = 0;
    rp.train.reprob = 0;
    rp.train.label_smoothing = 0;
    rp.train.eval_every_epochs = 0;
    rp.train.epochs = 3;
    st = vil_train(&rp, &res_p);
    double first = 0, last = 0;
    for (int i = 0; i < 6 && tp.n >= 36; i++) first += tp.loss[i] / 6, last += tp.loss[tp.n - 6 + i] / 6;
    T_CHECK(st == VIL_TRAIN_DONE && last < 0.8 * first,
            "the loss falls without augmentation: first 6 steps %.3f, last 6 %.3f", first, last);

    /* B: stopped inside epoch 1, resumed, stopped inside epoch 2, resumed to the end */
    VilTrainRun rb;
    Trace tb = {0};
    VilTrainResult res_b;
    setup(&rb, outb, &tb);
    rb.stop_after = 7;
    st = vil_train(&rb, &res_b);
    T_CHECK(st == VIL_TRAIN_STOPPED && res_b.step == 7, "stop after 7 steps: status %d, step %ld", st, res_b.step);
    long stops[2] = {12, 17}; /* at the end of epoch 1 (after its evaluation), inside epoch 2 */
    for (int k = 0; k < 2; k++) {
        setup(&rb, outb, &tb);
        rb.resume = path("runB/last.safetensors");
        rb.stop_after = stops[k];
        st = vil_train(&rb, &res_b);
        T_CHECK(st == VIL_TRAIN_STOPPED && res_b.step == stops[k], "resume, stop after %ld: status %d, step %ld",
                stops[k], st, res_b.step);
    }
    /* what a crash after step 17 leaves in metrics.jsonl: a later line and a torn one; the
     * resume drops both (test_run_files compares the files) */
    {
        char mp[4200];
        snprintf(mp, sizeof mp, "%s/metrics.jsonl", outb);
        FILE *f = fopen(mp, "a");
        if (f) {
            fputs("{\"type\":\"train\",\"step\":18,\"loss\":123}\n{\"type\":\"tra", f);
            fclose(f);
        }
    }
    setup(&rb, outb, &tb);
    rb.resume = outb; /* the run folder works too */
    st = vil_train(&rb, &res_b);
    T_CHECK(st == VIL_TRAIN_DONE && res_b.step == 24, "resume to the end: status %d, step %ld", st, res_b.step);
    int same_loss = tb.n == ta.n;
    for (int i = 0; same_loss && i < ta.n; i++) same_loss = memcmp(&ta.loss[i], &tb.loss[i], sizeof(float)) == 0;
    T_CHECK(same_loss, "resumed run: the same loss at every step, bit for bit (%d vs %d logged)", tb.n, ta.n);
    const char *st_names[4] = {"params", "adam_m", "adam_v", "ema"};
    char sa[4200], sb[4200];
    snprintf(sa, sizeof sa, "%s/last.state.safetensors", outa);
    snprintf(sb, sizeof sb, "%s/last.state.safetensors", outb);
    T_CHECK(same_tensors(sa, sb, st_names, 4), "resumed run: weights, moments and EMA bitwise equal");
    {
        /* the state holds the tensors packed (no parameter-buffer padding: this config's x_proj
         * has 6 padding rows), in table order: "params" starts with cls_token, then pos_embed */
        VilSafetensors st;
        VilConfig c;
        VilTrainConfig tc;
        vil_config_default(&c);
        vil_train_config_default(&tc);
        int ok = vil_train_config_load(&c, &tc, path("tiny.cfg")) == 0 && vil_config_finalize(&c) == 0 &&
                 st_read_quiet(sa, &st) == 0;
        const VilStTensor *t = ok ? vil_st_find(&st, "params") : NULL;
        T_CHECK(t && (size_t)vil_st_numel(t) == vil_model_count_params(&c) && c.dt_rank + 2 * c.d_state == 34,
                "the state file's params are the %zu model parameters, packed", ok ? vil_model_count_params(&c) : 0);
        if (ok) vil_st_free(&st);
    }
    const char *ck_names[2] = {"pos_embed", "layers.1.mixer.out_proj.weight"};
    snprintf(sa, sizeof sa, "%s/last.safetensors", outa);
    snprintf(sb, sizeof sb, "%s/last.safetensors", outb);
    T_CHECK(same_tensors(sa, sb, ck_names, 2), "resumed run: last.safetensors equal");
    T_CHECK(res_a.top1 == res_b.top1 && res_a.ema_top1 == res_b.ema_top1, "same val accuracy");
    snprintf(sa, sizeof sa, "%s/ema.safetensors", outa);
    snprintf(sb, sizeof sb, "%s/last.safetensors", outa);
    T_CHECK(!same_tensors(sa, sb, ck_names, 1), "the EMA weights differ from the model's");

    /* the files: complete, no temporaries left, readable by `vil info` and `vil eval` */
    T_CHECK(no_temp_files(outa) && no_temp_files(outb), "no temporary files left behind");
    char cmd[8400], out[1 << 16];
    snprintf(cmd, sizeof cmd, "bin/vil info --model %s/last.safetensors 2>&1", outa);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "step:        24") && strstr(out, "classes:     4 (0, 1, 2, 3)"),
            "vil info reads last.safetensors: %s", out);
    snprintf(cmd, sizeof cmd, "bin/vil info --model %s/best.safetensors 2>&1", outa);
    T_CHECK(t_run(cmd, out, sizeof out) == 0, "vil info reads best.safetensors");
    snprintf(cmd, sizeof cmd, "bin/vil eval --model %s/last.safetensors --data %s --crop-pct 1 --device cpu --batch 10 2>&1", outa, dir);
    rc = t_run(cmd, out, sizeof out);
    char want[64];
    snprintf(want, sizeof want, "top-1 %.2f%%", res_a.top1);
    T_CHECK(rc == 0 && strstr(out, want) && strstr(out, "(64 images; 0 unreadable"),
            "vil eval on the IDX test split agrees with the training run's pass (%s): %s", want, out);
}

/* the loss on eval's result line ("top-1 ...  loss 1.2345  (..."), or NAN */
static double eval_loss(const char *out) {
    const char *p = strstr(out, "  loss ");
    return p ? atof(p + 7) : NAN;
}

/* Position embedding at another length: `vil eval --img-size --pos` on run A's model (grid 4 at
 * 16 px); then a model trained without one (pos_embed = none), saved and read back */
static void test_pos_embed_modes(void) {
    char cmd[8400], out[1 << 16];
    const char *base = "bin/vil eval --model %s/runA/last.safetensors --data %s --crop-pct 1 --device cpu --batch 16 %s 2>&1";
    double loss[4];
    const char *modes[4] = {"--img-size 24", "--img-size 24 --pos keep", "--img-size 24 --pos center",
                            "--img-size 16 --pos keep"};
    const char *says[4] = {"pos_embed interpolated from the trained 4 x 4 grid",
                           "pos_embed kept (top-left, edges extended) from the trained 4 x 4 grid",
                           "pos_embed kept (centred, edges extended) from the trained 4 x 4 grid", "top-1"};
    for (int i = 0; i < 4; i++) {
        snprintf(cmd, sizeof cmd, base, dir, dir, modes[i]);
        int rc = t_run(cmd, out, sizeof out);
        loss[i] = eval_loss(out);
        T_CHECK(rc == 0 && strstr(out, says[i]) && isfinite(loss[i]), "vil eval %s: exit %d, says '%s': %s", modes[i], rc,
                says[i], out);
    }
    T_CHECK(loss[1] != loss[0] && loss[2] != loss[0] && loss[1] != loss[2],
            "at 24 px the kept grids give other losses than the interpolated one (%.4f, %.4f against %.4f)", loss[1],
            loss[2], loss[0]);
    snprintf(cmd, sizeof cmd, base, dir, dir, "");
    t_run(cmd, out, sizeof out);
    T_CHECK(loss[3] == eval_loss(out), "--pos keep at the trained size changes nothing (%.4f, %.4f)", loss[3], eval_loss(out));
    snprintf(cmd, sizeof cmd, base, dir, dir, "--img-size 24 --pos nearest");
    T_CHECK(t_run(cmd, out, sizeof out) == 2 && strstr(out, "--pos takes interp, keep or center"), "--pos nearest: exit 2: %s", out);
    snprintf(cmd, sizeof cmd, base, dir, dir, "--pos keep");
    T_CHECK(t_run(cmd, out, sizeof out) == 2 && strstr(out, "--pos goes with --img-size"), "--pos without --img-size: exit 2: %s", out);

    /* trained without a position embedding: one epoch, saved, read back by eval at its size and
     * another (nothing to move) */
    snprintf(cmd, sizeof cmd, "bin/vil train --config %s --data %s --out %s/runNoPos --device cpu --quiet "
             "--set epochs=1 --set pos_embed=none 2>&1", path("tiny.cfg"), dir, dir);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0, "vil train --set pos_embed=none: exit %d: %s", rc, out);
    char f[4200];
    snprintf(f, sizeof f, "%s/runNoPos/last.safetensors", dir);
    VilSafetensors st;
    int ok = st_read_quiet(f, &st) == 0;
    const char *cj = ok ? vil_st_meta(&st, "vil.config") : NULL;
    T_CHECK(ok && !vil_st_find(&st, "pos_embed") && cj && strstr(cj, "\"pos_embed\":\"none\""),
            "its checkpoint holds no pos_embed and says pos_embed none");
    if (ok) vil_st_free(&st);
    snprintf(cmd, sizeof cmd, "bin/vil info --model %s 2>&1", f);
    T_CHECK(t_run(cmd, out, sizeof out) == 0 && strstr(out, "no pos_embed: position from the scan order alone"),
            "vil info says it has no pos_embed: %s", out);
    snprintf(cmd, sizeof cmd, "bin/vil eval --model %s --data %s --crop-pct 1 --device cpu --batch 16 2>&1", f, dir);
    T_CHECK(t_run(cmd, out, sizeof out) == 0 && isfinite(eval_loss(out)) && strstr(out, "(64 images"),
            "vil eval reads it: %s", out);
    snprintf(cmd, sizeof cmd, "bin/vil eval --model %s --data %s --crop-pct 1 --device cpu --batch 16 --img-size 24 2>&1", f, dir);
    T_CHECK(t_run(cmd, out, sizeof out) == 0 && isfinite(eval_loss(out)) && strstr(out, "no pos_embed to move from the trained 4 x 4 grid"),
            "vil eval at 24 px: %s", out);
}

/* A stream model (family = stream): streams of 4 images in chunks of 2 (truncated BPTT), trained
 * with each initial-state intervention and the fit's ablations (the scalar fit with momentum 0.9,
 * the mean alone with zero starts); a run stopped inside a stream (its carried state and
 * context in the state file) and resumed equals the uninterrupted one bit for bit; vil eval reads
 * it by position, past the trained length, and agrees with the run's own validation there. */
static const char *STREAM_CFG =
    "name = tiny_stream\nfamily = stream\narch = vil\nimg_size = 16\nin_chans = 1\nembed_dim = 16\n"
    "depth = 2\nd_state = 4\nnum_classes = 4\nstream_len = 4\nstream_chunk = 2\n"
    "epochs = 2\nbatch = 4\nbase_lr = 0.2\nwarmup_epochs = 0.5\nmin_lr = 1e-5\nweight_decay = 0.05\n"
    "clip_grad = 5\nlabel_smoothing = 0.1\nmixup = 0\ncutmix = 0\nrepeats = 1\nrandaug_n = 0\nreprob = 0\n"
    "hflip = 0\nscale_min = 1\ncrop_pct = 1\nworkers = 1\nlog_every = 1\neval_every_epochs = 1\n"
    "init_state_sigma = 0.3\ninit_state_drop = 0.2\n";

/* the stream config with init_state = init and the pairs of keys and values in more (NULL-ended) */
static void stream_setup(VilTrainRun *r, const char *out, Trace *trace, const char *init, const char *const *more) {
    memset(r, 0, sizeof *r);
    vil_config_default(&r->model);
    vil_train_config_default(&r->train);
    int bad = vil_train_config_load(&r->model, &r->train, path("stream.cfg")) != 0 ||
              vil_train_config_set(&r->model, &r->train, "init_state", init) != 0;
    for (int i = 0; !bad && more[i]; i += 2) bad = vil_train_config_set(&r->model, &r->train, more[i], more[i + 1]) != 0;
    if (bad || vil_config_finalize(&r->model) != 0 || vil_train_config_finalize(&r->train) != 0) {
        printf("FAIL: the stream test config does not load\n");
        exit(1);
    }
    r->data = dir;
    r->out_dir = out;
    r->be = &vil_backend_cpu;
    r->quiet = 1;
    r->on_log = on_log;
    r->ctx = trace;
}

/* the largest |value| of tensor name in a safetensors file (float32), -1 when it is not there */
static double max_abs(const char *file, const char *name) {
    VilSafetensors st;
    if (st_read_quiet(file, &st) != 0) return -1;
    const VilStTensor *t = vil_st_find(&st, name);
    double m = t ? 0 : -1;
    for (size_t i = 0; t && i < t->nbytes / 4; i++) {
        float v;
        memcpy(&v, t->data + 4 * i, 4);
        m = fmax(m, fabs(v));
    }
    vil_st_free(&st);
    return m;
}

static void test_stream_train(void) {
    corpus_write(path("stream.cfg"), STREAM_CFG, strlen(STREAM_CFG));
    /* each intervention, and the fit's ablations: the scalar fit with the paper's momentum, the
     * mean alone with zero starts */
    const struct {
        const char *tag, *init, *more[5]; /* more: keys and values */
    } runs[] = {{"zero", "zero", {NULL}}, {"noise", "noise", {NULL}}, {"fitted", "fitted", {NULL}},
                {"fitted_scalar", "fitted", {"init_state_fit", "scalar", "init_state_fit_momentum", "0.9"}},
                {"fitted_mean_drop", "fitted", {"init_state_fit_noise", "0", "init_state_fit_drop", "0.3"}},
                {"passing", "passing", {NULL}}};
    int nruns = sizeof runs / sizeof runs[0];
    char outa[4096], outb[4096], sa[4200], sb[4200];
    float val_top1 = -1;
    for (int k = 0; k < nruns; k++) {
        const char *tag = runs[k].tag, *const *more = runs[k].more;
        int fitted = !strcmp(runs[k].init, "fitted"), passing = !strcmp(runs[k].init, "passing");
        snprintf(outa, sizeof outa, "%s_%s", path("streamA"), tag);
        snprintf(outb, sizeof outb, "%s_%s", path("streamB"), tag);
        VilTrainRun ra, rb;
        Trace ta = {0}, tb = {0};
        VilTrainResult res_a, res_b;
        stream_setup(&ra, outa, &ta, runs[k].init, more);
        VilTrainStatus st = vil_train(&ra, &res_a);
        /* 192 images: 48 streams of 4, 12 groups of 4 streams, each 2 chunks: 24 steps an epoch */
        T_CHECK(st == VIL_TRAIN_DONE && res_a.step == 48 && ta.n == 48 && res_a.top1 >= 0,
                "stream run (%s): status %d, %ld steps, %d losses", tag, st, res_a.step, ta.n);
        /* stopped after a stream's first chunk (step 5: chunk 0 of group 2), again inside epoch 2 */
        stream_setup(&rb, outb, &tb, runs[k].init, more);
        rb.stop_after = 5;
        st = vil_train(&rb, &res_b);
        snprintf(sb, sizeof sb, "%s/last.state.safetensors", outb);
        T_CHECK(st == VIL_TRAIN_STOPPED && max_abs(sb, "stream_state") > 0 && max_abs(sb, "stream_context") > 0,
                "stream run (%s) stopped inside a stream: its carried state saved (|h| %g)", tag,
                max_abs(sb, "stream_state"));
        stream_setup(&rb, outb, &tb, runs[k].init, more);
        rb.resume = outb;
        rb.stop_after = 31;
        st = vil_train(&rb, &res_b);
        stream_setup(&rb, outb, &tb, runs[k].init, more);
        rb.resume = outb;
        st = vil_train(&rb, &res_b);
        int same = st == VIL_TRAIN_DONE && tb.n == ta.n;
        for (int i = 0; same && i < ta.n; i++) same = memcmp(&ta.loss[i], &tb.loss[i], sizeof(float)) == 0;
        T_CHECK(same, "stream run (%s) resumed twice inside streams: the same loss at every step, bit for bit",
                tag);
        const char *names[4] = {"params", "adam_m", "adam_v", "init_state_prev"};
        snprintf(sa, sizeof sa, "%s/last.state.safetensors", outa);
        T_CHECK(same_tensors(sa, sb, names, passing ? 4 : 3), "stream run (%s): weights and moments bitwise equal",
                tag);
        T_CHECK(res_a.top1 == res_b.top1, "stream run (%s): the same validation top-1", tag);
        val_top1 = res_a.top1;
        if (fitted) {
            const char *fit[2] = {"init_state_mean", "init_state_var"};
            T_CHECK(same_tensors(sa, sb, fit, 2) && max_abs(sa, "init_state_var") > 0,
                    "stream run (%s): the fit bitwise equal, and fitted", tag);
            /* a fit per stream's end: 48 steps of 2 chunks; the scalar fit one pair per layer */
            VilSafetensors st;
            if (st_read_quiet(sa, &st) == 0) {
                const char *fits = vil_st_meta(&st, "vil.init_state_fits");
                const VilStTensor *t = vil_st_find(&st, "init_state_mean");
                int scalar = more[0] && !strcmp(more[1], "scalar");
                T_CHECK(fits && !strcmp(fits, "24") && t && t->shape[0] == 2 &&
                            (scalar ? t->ndim == 2 && t->shape[1] == 1 : t->ndim == 3 && t->shape[1] == 4),
                        "stream run (%s): 24 fits (%s), the mean (depth 2, %s)", tag, fits ? fits : "none",
                        scalar ? "1 direction" : "d_state 4, d_inner 32");
                vil_st_free(&st);
            } else {
                T_CHECK(0, "stream run (%s): the state file reads", tag);
            }
        }
    }
    /* vil eval by position: at the trained length the run's own validation (run A with passing:
     * as many streams of 4 as the split has images), then 8 positions */
    char cmd[9000], out[1 << 16], want[64];
    snprintf(cmd, sizeof cmd, "bin/vil eval --model %s/last.safetensors --data %s --device cpu --batch 7 2>&1", outa, dir);
    int rc = t_run(cmd, out, sizeof out);
    snprintf(want, sizeof want, "top-1 %.2f%%", val_top1);
    T_CHECK(rc == 0 && strstr(out, want) && strstr(out, "(256 images; 0 unreadable") &&
                strstr(out, "in length (positions 1-4)") && !strstr(out, "beyond"),
            "vil eval of a stream model at its trained length agrees with the run's validation (%s): %s", want, out);
    snprintf(sa, sizeof sa, "%s", path("positions.csv"));
    snprintf(cmd, sizeof cmd, "bin/vil eval --model %s/last.safetensors --data %s --device cpu --stream-len 8 "
             "--positions-file %s 2>&1", outa, dir, sa);
    rc = t_run(cmd, out, sizeof out);
    char csv[1 << 14] = "";
    FILE *f = fopen(sa, "r");
    size_t got = f ? fread(csv, 1, sizeof csv - 1, f) : 0;
    if (f) fclose(f);
    csv[got] = 0;
    T_CHECK(rc == 0 && strstr(out, "beyond (positions 5-8)") && strstr(out, "(512 images; 0 unreadable"),
            "vil eval --stream-len 8: in length and beyond: %s", out);
    T_CHECK(strncmp(csv, "position,images,top1,loss,in_length\n1,64,", 41) == 0 && t_count(csv, "\n") == 9 &&
                strstr(csv, "\n4,64,") && strstr(csv, ",1\n5,64,") && strstr(csv, "\n8,64,") &&
                t_count(csv, ",0\n") == 4,
            "--positions-file: 8 positions, each every test image once, 4 in the trained length: %s", csv);
    /* refusals: a length of half chunks, the stream flags on an image model */
    snprintf(cmd, sizeof cmd, "bin/vil eval --model %s/last.safetensors --data %s --device cpu --stream-len 5 2>&1",
             outa, dir);
    T_CHECK(t_run(cmd, out, sizeof out) == 2 && strstr(out, "not whole chunks"), "--stream-len 5 refused: %s", out);
    snprintf(cmd, sizeof cmd, "bin/vil eval --model %s/last.safetensors --data %s --device cpu --streams 9 2>&1",
             path("runA"), dir);
    T_CHECK(t_run(cmd, out, sizeof out) == 2 && strstr(out, "are for a stream model"),
            "--streams on an image model refused: %s", out);
}

static void test_diverge_and_errors(void) {
    /* one good epoch, then a resume with an absurd lr: stops on the non-finite loss and keeps
     * the last good checkpoint */
    char outc[4096];
    snprintf(outc, sizeof outc, "%s", path("runC"));
    VilTrainRun r;
    Trace t = {0};
    VilTrainResult res;
    setup(&r, outc, &t);
    r.train.epochs = 1;
    r.train.clip_grad = 0;
    T_CHECK(vil_train(&r, &res) == VIL_TRAIN_DONE && res.step == 12, "one epoch");
    setup(&r, outc, &t);
    r.train.base_lr = 1e30f;
    r.train.clip_grad = 0;
    r.resume = outc;
    fprintf(stderr, "(expected errors follow)\n");
    VilTrainStatus st = vil_train(&r, &res);
    T_CHECK(st == VIL_TRAIN_DIVERGED, "lr 1e30: diverged (status %d)", st);
    VilModel m;
    VilCheckpointMeta meta;
    char p[4200];
    snprintf(p, sizeof p, "%s/last.safetensors", outc);
    int ok = vil_checkpoint_load(p, &vil_backend_cpu, NULL, &m, &meta) == 0;
    T_CHECK(ok && meta.step == 12, "the last good checkpoint is kept (step %ld)", ok ? meta.step : -1L);
    if (ok) {
        vil_checkpoint_meta_free(&meta);
        vil_model_free(&m);
    }

    /* CLI: errors before any work, usage errors exit 2 */
    char cmd[8400], out[1 << 14];
    snprintf(cmd, sizeof cmd, "bin/vil train --config %s --data %s/nope --out %s/runD --device cpu 2>&1",
             path("tiny.cfg"), dir, dir);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "nope"), "missing data folder: exit 1 naming it (%d): %s", rc, out);
    snprintf(cmd, sizeof cmd, "test -e %s/runD", dir);
    T_CHECK(t_run(cmd, NULL, 0) != 0, "nothing created for a run that cannot start");
    snprintf(cmd, sizeof cmd, "bin/vil train --config %s --data %s --set epoch=3 2>&1", path("tiny.cfg"), dir);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 2 && strstr(out, "did you mean 'epochs'"), "unknown key: exit 2 with a hint: %s", out);
    T_CHECK(t_run("bin/vil train --data x 2>/dev/null", NULL, 0) == 2, "no --config: exit 2");
    /* holdout: validation on held-out training images, the rest trained on */
    snprintf(cmd, sizeof cmd, "bin/vil train --config %s --data %s --out %s/runHold --device cpu --set epochs=1 "
             "--set holdout=40 --set mixup=0 --set cutmix=0 2>&1", path("tiny.cfg"), dir, dir);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "val: 40 more training images, held out") && strstr(out, "(40 images"),
            "holdout = 40: validates on 40 held-out images (%d): %s", rc, out);
    snprintf(cmd, sizeof cmd, "bin/vil train --config %s --data %s --out %s/runHold2 --device cpu "
             "--set holdout=40 --set eval_every_epochs=0 2>&1", path("tiny.cfg"), dir, dir);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "never validates"), "holdout without validation is refused: %s", out);
    snprintf(cmd, sizeof cmd, "bin/vil train --config %s --data %s --out %s --device cpu 2>&1", path("tiny.cfg"), dir, outc);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "--resume"), "a fresh run over an existing one is refused: %s", out);
    T_CHECK(t_run("bin/vil eval --data x 2>/dev/null", NULL, 0) == 2, "eval without --model: exit 2");
    snprintf(cmd, sizeof cmd, "bin/vil train --data %s --resume %s/nothing.safetensors 2>&1", dir, dir);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "nothing.state.safetensors"), "resume from a missing state: exit 1: %s", out);

    /* SIGINT: the step finishes, the run is saved, exit 130 (128 + SIGINT) with the resume command */
    snprintf(cmd, sizeof cmd,
             "bin/vil train --config %s --data %s --out %s/runE --device cpu --set epochs=1000 "
             "--set eval_every_epochs=0 > %s/e.log 2>&1 & pid=$!; "
             "i=0; while ! grep -q 'step ' %s/e.log && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; "
             "kill -INT $pid; wait $pid; echo $?",
             path("tiny.cfg"), dir, dir, dir, dir);
    rc = t_run(cmd, out, sizeof out);
    size_t n;
    snprintf(p, sizeof p, "%s/e.log", dir);
    char *log = (char *)vil_read_file(p, &n);
    T_CHECK(atoi(out) == 130 && log && strstr(log, "interrupted") && strstr(log, "--resume") &&
                strstr(log, "stopped by SIGINT") && !strstr(log, "vil: error"),
            "SIGINT: saved, exit 130, not an error (%s): %s", out, log ? log + (n > 600 ? n - 600 : 0) : "");
    free(log);
    snprintf(p, sizeof p, "%s/runE/last.state.safetensors", dir);
    VilSafetensors s;
    long step = -1;
    T_CHECK(st_read_quiet(p, &s) == 0 && vil_st_meta(&s, "vil.step") &&
                vil_parse_int(vil_st_meta(&s, "vil.step"), &step) == 0 && step > 0,
            "SIGINT: the state is readable");
    vil_st_free(&s);
    /* the CLI resume: the config comes from the state, the output goes to the same folder */
    snprintf(cmd, sizeof cmd, "bin/vil train --resume %s/runE/last.safetensors --data %s --device cpu --stop-after %ld 2>&1",
             dir, dir, step + 3);
    rc = t_run(cmd, out, sizeof out);
    long step2 = -1;
    if (st_read_quiet(p, &s) == 0) {
        vil_parse_int(vil_st_meta(&s, "vil.step"), &step2);
        vil_st_free(&s);
    }
    T_CHECK(rc == 0 && step2 == step + 3, "CLI --resume continues in the run's folder (step %ld -> %ld): %s",
            step, step2, out);
}

/* ---------------- the run folder: kills, failed saves, temporaries, refusals ---------------- */

static int exists(const char *p) {
    struct stat sb;
    return lstat(p, &sb) == 0;
}

static void copy_file(const char *src, const char *dst) {
    size_t n;
    unsigned char *b = vil_read_file(src, &n);
    if (!b) {
        printf("FAIL: cannot read %s\n", src);
        exit(1);
    }
    corpus_write(dst, b, n);
    free(b);
}

/* Everything the library writes to stderr between begin and end, echoed after capture so the
 * test log keeps it. */
static int cap_saved = -1;

static void capture_begin(void) {
    fflush(stderr);
    cap_saved = dup(2);
    int fd = open(path("stderr.log"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
}

static char *capture_end(void) {
    fflush(stderr);
    dup2(cap_saved, 2);
    close(cap_saved);
    size_t n;
    char *s = (char *)vil_read_file(path("stderr.log"), &n);
    if (!s) return vil_strdup("");
    fputs(s, stderr);
    return s;
}

/* vil_train with its stderr captured into *err (malloc'd) */
static VilTrainStatus train_captured(VilTrainRun *r, VilTrainResult *res, char **err) {
    capture_begin();
    VilTrainStatus s = vil_train(r, res);
    *err = capture_end();
    return s;
}

/* A metadata value of a safetensors file as a number; -1 when the file or the key is missing. */
static long meta_num(const char *file, const char *key) {
    VilSafetensors st;
    if (st_read_quiet(file, &st) != 0) return -1;
    long v = -1;
    const char *s = vil_st_meta(&st, key);
    if (!s || vil_parse_int(s, &v) != 0) v = -1;
    vil_st_free(&st);
    return v;
}

/* 1 when the checkpoint's tensors, taken in file order, are the state's tensor `name` bit for
 * bit: both hold the parameters packed in table order. */
static int ckpt_is_state(const char *ckpt, const char *state, const char *name) {
    VilSafetensors c, s;
    if (st_read_quiet(ckpt, &c) != 0) return 0;
    if (st_read_quiet(state, &s) != 0) {
        vil_st_free(&c);
        return 0;
    }
    const VilStTensor *t = vil_st_find(&s, name);
    int same = t != NULL;
    size_t at = 0;
    for (int i = 0; same && i < c.n_tensors; i++) {
        const VilStTensor *x = &c.tensors[i];
        same = at + x->nbytes <= t->nbytes &&
               memcmp(x->data, (const unsigned char *)t->data + at, x->nbytes) == 0;
        at += x->nbytes;
    }
    same = same && at == t->nbytes;
    vil_st_free(&c);
    vil_st_free(&s);
    return same;
}

/* Rewrites a state file without one metadata key: a state as an older vil wrote it. */
static int drop_meta(const char *file, const char *key) {
    VilSafetensors st;
    if (st_read_quiet(file, &st) != 0) return -1;
    VilStWriter *w = vil_st_writer_new();
    for (int i = 0; i < st.n_tensors; i++) {
        const VilStTensor *t = &st.tensors[i];
        vil_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
    }
    for (int i = 0; i < st.n_meta; i++)
        if (strcmp(st.meta_keys[i], key) != 0) vil_st_writer_meta(w, st.meta_keys[i], st.meta_vals[i]);
    int rc = vil_st_writer_save(w, file);
    vil_st_writer_free(w);
    vil_st_free(&st);
    return rc;
}

/* What the run folder holds when the resumed run logs its first step, before any save. */
typedef struct {
    const char *out;
    int calls;
    long state_step, last_step, ema_step;
    int last_same, ema_same;
} FileProbe;

static void on_log_files(void *ctx, const VilTrainProgress *p) {
    FileProbe *f = ctx;
    (void)p;
    if (f->calls++) return;
    char st[4200], last[4200], ema[4200];
    snprintf(st, sizeof st, "%s/last.state.safetensors", f->out);
    snprintf(last, sizeof last, "%s/last.safetensors", f->out);
    snprintf(ema, sizeof ema, "%s/ema.safetensors", f->out);
    f->state_step = meta_num(st, "vil.step");
    f->last_step = meta_num(last, "vil.step");
    f->ema_step = meta_num(ema, "vil.step");
    f->last_same = ckpt_is_state(last, st, "params");
    f->ema_same = ckpt_is_state(ema, st, "ema");
}

/* A kill between the state and the checkpoints of a save (or a full disk there) leaves
 * last / ema (/ best) behind the state or missing: a resume brings each to the state's step
 * from the restored buffers, whether it goes on training or finds nothing to do. */
static void test_resume_repairs(void) {
    char out[4096], st[4200], last[4200], ema[4200], best[4200], old_last[4200], old_ema[4200];
    snprintf(out, sizeof out, "%s", path("runF"));
    snprintf(st, sizeof st, "%s/last.state.safetensors", out);
    snprintf(last, sizeof last, "%s/last.safetensors", out);
    snprintf(ema, sizeof ema, "%s/ema.safetensors", out);
    snprintf(best, sizeof best, "%s/best.safetensors", out);
    snprintf(old_last, sizeof old_last, "%s", path("old_last.safetensors"));
    snprintf(old_ema, sizeof old_ema, "%s", path("old_ema.safetensors"));
    VilTrainRun r;
    Trace t = {0};
    VilTrainResult res;
    setup(&r, out, &t);
    r.train.epochs = 1;
    r.stop_after = 4;
    VilTrainStatus s = vil_train(&r, &res);
    T_CHECK(s == VIL_TRAIN_STOPPED && res.step == 4, "repairs: a run stopped at step 4 (status %d)", s);
    copy_file(last, old_last);
    copy_file(ema, old_ema);
    setup(&r, out, &t);
    r.train.epochs = 1;
    r.resume = out;
    r.stop_after = 8;
    s = vil_train(&r, &res);
    T_CHECK(s == VIL_TRAIN_STOPPED && res.step == 8 && meta_num(st, "vil.best_step") == -1,
            "repairs: resumed and stopped at step 8, no best yet (status %d, best_step %ld)", s,
            meta_num(st, "vil.best_step"));

    /* killed after the state of step 8: last.safetensors still at step 4, ema.safetensors not
     * yet renamed into place; the resume goes on training */
    copy_file(old_last, last);
    unlink(ema);
    setup(&r, out, &t);
    r.train.epochs = 1;
    r.resume = out;
    FileProbe fp = {out, 0, -1, -1, -1, 0, 0};
    r.on_log = on_log_files;
    r.ctx = &fp;
    char *err;
    s = train_captured(&r, &res, &err);
    T_CHECK(s == VIL_TRAIN_DONE && res.step == 12, "repairs: the resume trains to the end (status %d, step %ld)",
            s, res.step);
    T_CHECK(fp.calls > 0 && fp.state_step == 8 && fp.last_step == 8 && fp.ema_step == 8,
            "repairs: at the first step after the resume, before any save, last and ema hold the "
            "state's step (state %ld, last %ld, ema %ld)", fp.state_step, fp.last_step, fp.ema_step);
    T_CHECK(fp.last_same && fp.ema_same,
            "repairs: ... and the state's parameters and EMA, bit for bit (last %d, ema %d)",
            fp.last_same, fp.ema_same);
    T_CHECK(strstr(err, "last.safetensors' was at step 4, the state is at step 8") &&
                strstr(err, "ema.safetensors' was missing, the state is at step 8"),
            "repairs: one line per file says from which step to which: %s", err);
    free(err);
    /* the evaluation at the end improved the best: the state says at which step it was written */
    T_CHECK(meta_num(st, "vil.best_step") == 12 && meta_num(best, "vil.step") == 12 &&
                ckpt_is_state(best, st, "params"),
            "repairs: best.safetensors at step 12, recorded in the state (vil.best_step %ld)",
            meta_num(st, "vil.best_step"));

    /* killed inside the last save: a torn last.safetensors, ema at step 4, best not written; the
     * resume finds nothing to train and must not call the run done with its files behind */
    corpus_write(last, "torn", 4);
    copy_file(old_ema, ema);
    unlink(best);
    t.n = 0;
    setup(&r, out, &t);
    r.train.epochs = 1;
    r.resume = out;
    s = train_captured(&r, &res, &err);
    T_CHECK(s == VIL_TRAIN_DONE && res.step == 12 && t.n == 0,
            "repairs: nothing to do at step 12 (status %d, %d steps logged)", s, t.n);
    T_CHECK(meta_num(last, "vil.step") == 12 && meta_num(ema, "vil.step") == 12 &&
                meta_num(best, "vil.step") == 12,
            "repairs: last, ema and best rewritten at the state's step 12 (%ld, %ld, %ld)",
            meta_num(last, "vil.step"), meta_num(ema, "vil.step"), meta_num(best, "vil.step"));
    T_CHECK(ckpt_is_state(last, st, "params") && ckpt_is_state(ema, st, "ema") &&
                ckpt_is_state(best, st, "params"),
            "repairs: their tensors are the state's parameters / EMA, bit for bit");
    T_CHECK(strstr(err, "last.safetensors' was unreadable") && strstr(err, "ema.safetensors' was at step 4") &&
                strstr(err, "best.safetensors' was missing"),
            "repairs: the torn, the old and the missing file each named: %s", err);
    free(err);
    T_CHECK(no_temp_files(out), "repairs: no temporary files left");

    /* a state from before vil.best_step: which step best.safetensors should hold is unknown,
     * so it is left alone (not rewritten from weights that may not be the best) */
    T_CHECK(drop_meta(st, "vil.best_step") == 0 && meta_num(st, "vil.best_step") == -1,
            "repairs: an older state without vil.best_step");
    unlink(best);
    t.n = 0;
    setup(&r, out, &t);
    r.train.epochs = 1;
    r.resume = out;
    s = train_captured(&r, &res, &err);
    T_CHECK(s == VIL_TRAIN_DONE && !exists(best) && !strstr(err, "best.safetensors"),
            "repairs: an older state resumes and leaves best.safetensors alone (status %d)", s);
    free(err);
}

/* A save that cannot write last.safetensors fails the run (after the state, which a resume
 * then uses to bring the files up to date); a resume that cannot bring a file up refuses. */
static void test_failed_saves(void) {
    char out[4096], blocker[4200], st[4200], last[4200], ema[4200];
    snprintf(out, sizeof out, "%s", path("runG"));
    snprintf(st, sizeof st, "%s/last.state.safetensors", out);
    snprintf(last, sizeof last, "%s/last.safetensors", out);
    snprintf(ema, sizeof ema, "%s/ema.safetensors", out);
    /* a folder put where last.safetensors goes once the run is under way (at its first log
     * step): the writer refuses to replace it, even for root, and the save fails as a full disk
     * would make it fail */
    snprintf(blocker, sizeof blocker, "%s", last);
    corpus_mkdir("%s%s", out, "");
    VilTrainRun r;
    Trace t = {0};
    VilTrainResult res;
    setup(&r, out, &t);
    g_block_at = blocker;
    r.on_log = on_log_block;
    r.train.epochs = 1;
    r.stop_after = 2;
    char *err;
    VilTrainStatus s = train_captured(&r, &res, &err);
    T_CHECK(s == VIL_TRAIN_FAILED && strstr(err, "error") && strstr(err, "last.safetensors"),
            "failed save of last.safetensors: VIL_TRAIN_FAILED with an error (status %d): %s", s, err);
    free(err);
    rmdir(blocker);
    T_CHECK(meta_num(st, "vil.step") == 2 && !exists(last) && !exists(ema),
            "failed save: the state (written first) at step 2, no checkpoint (state %ld)",
            meta_num(st, "vil.step"));
    setup(&r, out, &t);
    r.train.epochs = 1;
    r.resume = out;
    r.stop_after = 3;
    s = train_captured(&r, &res, &err);
    T_CHECK(s == VIL_TRAIN_STOPPED && res.step == 3 && meta_num(last, "vil.step") == 3 &&
                strstr(err, "last.safetensors' was missing, the state is at step 2"),
            "failed save: the next resume writes the missing checkpoints, then goes on (status %d): %s", s, err);
    free(err);

    /* a folder where ema.safetensors must go: the resume cannot bring it up, so it refuses */
    unlink(ema);
    corpus_mkdir("%s%s", ema, "");
    t.n = 0;
    setup(&r, out, &t);
    r.train.epochs = 1;
    r.resume = out;
    s = train_captured(&r, &res, &err);
    T_CHECK(s == VIL_TRAIN_FAILED && t.n == 0 && strstr(err, "cannot resume") && strstr(err, "ema.safetensors"),
            "a resume that cannot rewrite ema.safetensors refuses before training (status %d): %s", s, err);
    free(err);
    rmdir(ema);
}

/* NAME.tmp.PID of dead writers go; live writers' temporaries and other files stay. */
static void test_stale_temps(void) {
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0);
    long dead = (long)child;
    T_CHECK(kill(child, 0) != 0 && errno == ESRCH, "stale temps: pid %ld is gone", dead);
    char d[4096], p[4400];
    snprintf(d, sizeof d, "%s", path("temps"));
    corpus_mkdir("%s%s", d, "");
    const char *keep[4] = {"x.tmp.%ld", "notes.txt", "a.tmp.12ab", ".tmp.%ld"};
    long keep_pid[4] = {(long)getpid(), 0, 0, dead};
    snprintf(p, sizeof p, "%s/last.safetensors.tmp.%ld", d, dead);
    corpus_write(p, "x", 1);
    char name[256];
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, keep[i], keep_pid[i]);
        snprintf(p, sizeof p, "%s/%s", d, name);
        corpus_write(p, "x", 1);
    }
    snprintf(p, sizeof p, "%s/sub.tmp.%ld", d, dead); /* not a regular file */
    corpus_mkdir("%s%s", p, "");
    int n = vil_remove_stale_temps(d);
    snprintf(p, sizeof p, "%s/last.safetensors.tmp.%ld", d, dead);
    int gone = !exists(p);
    int kept = 1;
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, keep[i], keep_pid[i]);
        snprintf(p, sizeof p, "%s/%s", d, name);
        kept &= exists(p);
    }
    snprintf(p, sizeof p, "%s/sub.tmp.%ld", d, dead);
    kept &= exists(p);
    T_CHECK(n == 1 && gone && kept,
            "stale temps: the dead writer's file removed (%d), own-pid temp, unrelated names and a "
            "folder kept (%d)", n, kept);
    fprintf(stderr, "(an expected error follows)\n");
    T_CHECK(vil_remove_stale_temps(path("no-such-folder")) == -1, "stale temps: a missing folder is reported");

    /* a run removes them when it starts, and says so */
    char out[4096], logp[4200];
    snprintf(out, sizeof out, "%s", path("runH"));
    corpus_mkdir("%s%s", out, "");
    snprintf(p, sizeof p, "%s/ema.safetensors.tmp.%ld", out, dead);
    corpus_write(p, "x", 1);
    snprintf(logp, sizeof logp, "%s", path("h.log"));
    VilTrainRun r;
    Trace t = {0};
    VilTrainResult res;
    setup(&r, out, &t);
    r.train.epochs = 1;
    r.stop_after = 1;
    r.quiet = 0;
    r.log = fopen(logp, "w");
    VilTrainStatus s = vil_train(&r, &res);
    fclose(r.log);
    size_t ln;
    char *log = (char *)vil_read_file(logp, &ln);
    T_CHECK(s == VIL_TRAIN_STOPPED && !exists(p) && log && strstr(log, "removed 1 temporary file of interrupted saves"),
            "stale temps: a run start removes them and prints one line (status %d)", s);
    free(log);
}

/* A fresh run refuses a folder that holds any one of a run's files, naming it. */
static void test_used_folder(void) {
    const char *files[4] = {"last.safetensors", "last.state.safetensors", "best.safetensors", "ema.safetensors"};
    for (int i = 0; i < 4; i++) {
        char out[4096], f[4300], dirname[64];
        snprintf(dirname, sizeof dirname, "used%d", i);
        snprintf(out, sizeof out, "%s", path(dirname));
        corpus_mkdir("%s%s", out, "");
        snprintf(f, sizeof f, "%s/%s", out, files[i]);
        corpus_write(f, "someone's weights", 17);
        VilTrainRun r;
        Trace t = {0};
        VilTrainResult res;
        setup(&r, out, &t);
        char *err;
        VilTrainStatus s = train_captured(&r, &res, &err);
        size_t n;
        unsigned char *b = vil_read_file(f, &n);
        int untouched = b && n == 17 && memcmp(b, "someone's weights", 17) == 0;
        free(b);
        const char *hint = i == 1 ? "--resume" : "another --out";
        T_CHECK(s == VIL_TRAIN_FAILED && t.n == 0 && untouched && strstr(err, files[i]) && strstr(err, hint),
                "a fresh run refuses a folder holding only %s, naming it and saying '%s' (status %d): %s",
                files[i], hint, s, err);
        free(err);
    }
    /* other files do not make a folder a run's */
    char out[4096], f[4300];
    snprintf(out, sizeof out, "%s", path("used_other"));
    corpus_mkdir("%s%s", out, "");
    snprintf(f, sizeof f, "%s/notes.txt", out);
    corpus_write(f, "x", 1);
    VilTrainRun r;
    Trace t = {0};
    VilTrainResult res;
    setup(&r, out, &t);
    r.stop_after = 1;
    T_CHECK(vil_train(&r, &res) == VIL_TRAIN_STOPPED, "a folder holding other files only is used");
}

/* An output folder that cannot be written fails the run before its first step. */
static void test_unwritable_out(void) {
    char afile[4096], inside[4200];
    snprintf(afile, sizeof afile, "%s", path("a_file"));
    corpus_write(afile, "x", 1);
    snprintf(inside, sizeof inside, "%s/out", afile);
    /* /proc exists as a folder and takes no new files, not even from root */
    const char *outs[2] = {"/proc", inside};
    const char *want[2] = {"'/proc' cannot be written", "a_file"};
    for (int i = 0; i < 2; i++) {
        VilTrainRun r;
        Trace t = {0};
        VilTrainResult res;
        setup(&r, outs[i], &t);
        double t0 = vil_now();
        char *err;
        VilTrainStatus s = train_captured(&r, &res, &err);
        double secs = vil_now() - t0;
        T_CHECK(s == VIL_TRAIN_FAILED && t.n == 0 && res.step == 0 && secs < 5 && strstr(err, want[i]),
                "unwritable --out %s: fails before the first step (status %d, %.2f s): %s", outs[i], s,
                secs, err);
        free(err);
    }
}

/* the lines of a metrics.jsonl without the fields that depend on the clock, one string each */
static int metric_lines(const char *file, char lines[][512], int max) {
    FILE *f = fopen(file, "r");
    if (!f) return -1;
    char buf[4096];
    int n = 0;
    while (n < max && fgets(buf, sizeof buf, f)) {
        cJSON *o = cJSON_Parse(buf);
        if (!o) {
            fclose(f);
            return -2;
        }
        cJSON_DeleteItemFromObject(o, "time");
        cJSON_DeleteItemFromObject(o, "images_per_s");
        cJSON_DeleteItemFromObject(o, "data_wait");
        char *t = cJSON_PrintUnformatted(o);
        snprintf(lines[n++], 512, "%s", t);
        cJSON_free(t);
        cJSON_Delete(o);
    }
    fclose(f);
    return n;
}

static int count_in(const char *file, const char *what) {
    char cmd[4400], out[64];
    snprintf(cmd, sizeof cmd, "grep -c -e '%s' '%s'", what, file);
    t_run(cmd, out, sizeof out);
    return atoi(out);
}

/* What the run folders of test_train_resume hold besides checkpoints: metrics.jsonl (the
 * resumed run's equals the uninterrupted one's, the lines a crash left dropped), config.cfg
 * (reads back as the run's configuration, numbers written short), run.jsonl (a line per start) */
/* sgd (Nesterov, multistep) and lamb (const_cosine, the EMA warmup): a run stopped and resumed
 * equals the uninterrupted one bit for bit (their state tensors saved and restored by name) */
/* the choice keys through the config's setter, which resolves them (the run reads the choice,
 * not the text) */
static void set_optim(VilTrainRun *r, int k) {
    VilConfig *c = &r->model;
    VilTrainConfig *t = &r->train;
    t->eval_every_epochs = 0;
    if (k == 0) {
        vil_train_config_set(c, t, "optimizer", "sgd"), vil_train_config_set(c, t, "sched", "multistep");
        strcpy(t->decay_milestones, "1"), t->decay_rate = 0.3f;
        t->momentum = 0.9f, t->nesterov = 1, t->weight_decay = 1e-4f;
    } else {
        vil_train_config_set(c, t, "optimizer", "lamb"), vil_train_config_set(c, t, "sched", "const_cosine");
        t->sched_const_epochs = 1.5f, t->model_ema_warmup = 1;
    }
}

static void test_resume_optims(void) {
    const char *opt[2] = {"sgd", "lamb"};
    const char *names[2][4] = {{"params", "momentum_buffer", "ema", "ema"},
                               {"params", "lamb_exp_avg", "lamb_exp_avg_sq", "ema"}};
    for (int k = 0; k < 2; k++) {
        char oa[64], ob[64];
        snprintf(oa, sizeof oa, "opt%dA", k), snprintf(ob, sizeof ob, "opt%dB", k);
        VilTrainRun r;
        Trace ta = {0}, tb = {0};
        VilTrainResult ra, rb;
        setup(&r, path(oa), &ta);
        set_optim(&r, k);
        T_CHECK(vil_train_config_finalize(&r.train) == 0, "%s: the config is valid", opt[k]);
        VilTrainStatus st = vil_train(&r, &ra);
        setup(&r, path(ob), &tb);
        set_optim(&r, k);
        r.stop_after = 7;
        VilTrainStatus s1 = vil_train(&r, &rb);
        if (k == 0) { /* another optimizer than the run's: refused, naming both and --init */
            char cmd[8400], out[8192];
            snprintf(cmd, sizeof cmd, "bin/vil train --resume %s --data %s --set optimizer=lamb --quiet 2>&1",
                     path(ob), dir);
            int rc = t_run(cmd, out, sizeof out);
            T_CHECK(rc != 0 && strstr(out, "was trained with optimizer sgd, not lamb") && strstr(out, "--init"),
                    "resume with optimizer=lamb of an sgd run: refused naming both and --init (rc %d): %.400s",
                    rc, out);
        }
        setup(&r, path(ob), &tb);
        set_optim(&r, k);
        r.resume = path(ob);
        VilTrainStatus s2 = vil_train(&r, &rb);
        T_CHECK(st == VIL_TRAIN_DONE && s1 == VIL_TRAIN_STOPPED && s2 == VIL_TRAIN_DONE && ra.step == 24 &&
                    rb.step == 24,
                "%s: run, stop at 7, resume: %d %d %d, %ld and %ld steps", opt[k], st, s1, s2, ra.step, rb.step);
        int same = ta.n == 24 && tb.n == 24;
        for (int i = 0; same && i < ta.n; i++) same = memcmp(&ta.loss[i], &tb.loss[i], sizeof(float)) == 0;
        T_CHECK(same, "%s: the resumed run's losses bit for bit (%d vs %d logged)", opt[k], tb.n, ta.n);
        T_CHECK(ta.loss[23] < ta.loss[0] && isfinite(ta.loss[23]), "%s: the loss falls (%.3f -> %.3f)", opt[k],
                ta.loss[0], ta.loss[23]);
        char sa[4200], sb[4200];
        snprintf(sa, sizeof sa, "%s/last.state.safetensors", path(oa));
        snprintf(sb, sizeof sb, "%s/last.state.safetensors", path(ob));
        T_CHECK(same_tensors(sa, sb, names[k], 4), "%s: the resumed state bitwise equal (%s, %s, ema)", opt[k],
                names[k][1], names[k][2]);
    }
}

static void test_run_files(void) {
    static char la[64][512], lb[64][512];
    char fa[4200], fb[4200];
    snprintf(fa, sizeof fa, "%s/metrics.jsonl", path("runA"));
    snprintf(fb, sizeof fb, "%s/metrics.jsonl", path("runB"));
    int na = metric_lines(fa, la, 64), nb = metric_lines(fb, lb, 64);
    int same = na == nb;
    for (int i = 0; same && i < na; i++) same = strcmp(la[i], lb[i]) == 0;
    T_CHECK(na == 26 && same, "metrics.jsonl: 24 train + 2 eval lines (%d), the resumed run's the "
            "same but for the clock (%d lines)", na, nb);
    T_CHECK(na > 0 && strstr(la[0], "\"type\":\"train\",\"step\":1,") && strstr(la[0], "\"grad_norm\":") &&
                strstr(la[12], "\"type\":\"eval\",\"step\":12,\"epoch\":1,\"top1\":") &&
                strstr(la[12], "\"ema_top1\":") && strstr(la[12], "\"images\":64"),
            "metrics.jsonl lines: '%s' ... '%s'", na > 0 ? la[0] : "", na > 12 ? la[12] : "");
    /* the eval line's loss is the validation cross-entropy: finite and near ln 4 or below */
    cJSON *e = na > 12 ? cJSON_Parse(la[12]) : NULL;
    const cJSON *vl = e ? cJSON_GetObjectItemCaseSensitive(e, "loss") : NULL;
    T_CHECK(cJSON_IsNumber(vl) && vl->valuedouble > 0 && vl->valuedouble < 3, "validation loss %g",
            cJSON_IsNumber(vl) ? vl->valuedouble : -1);
    cJSON_Delete(e);

    /* config.cfg: the configuration the run had, read back by --config's loader */
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/config.cfg", path("runA"));
    VilTrainRun r0;
    Trace t0 = {0};
    setup(&r0, path("runA"), &t0);
    VilConfig c;
    VilTrainConfig t;
    vil_config_default(&c);
    vil_train_config_default(&t);
    int ok = vil_train_config_load(&c, &t, cfg) == 0 && vil_config_finalize(&c) == 0 &&
             vil_train_config_finalize(&t) == 0;
    char *j1 = vil_config_to_json(&c), *j2 = vil_config_to_json(&r0.model);
    char *k1 = vil_train_config_to_json(&t), *k2 = vil_train_config_to_json(&r0.train);
    T_CHECK(ok && strcmp(j1, j2) == 0 && strcmp(k1, k2) == 0, "config.cfg reads back as the run's "
            "configuration:\n%s\n%s", k1, k2);
    T_CHECK(count_in(cfg, "= 0.05$") == 2 && count_in(cfg, "0000") == 0 && count_in(cfg, "= 1e-05$") == 1,
            "config.cfg writes numbers short (base_lr = 0.05, weight_decay = 0.05, min_lr = 1e-05)");
    T_CHECK(strstr(j1, "0.0500000") == NULL && strstr(k1, "0.0500000") == NULL,
            "the JSON of the configuration writes numbers short too: %s", k1);
    free(j1), free(j2), free(k1), free(k2);

    char runs[4200];
    snprintf(runs, sizeof runs, "%s/run.jsonl", path("runB"));
    T_CHECK(count_in(runs, "\"start\":\"fresh\",\"step\":0,") == 1 && count_in(runs, "\"start\":\"resume\"") == 3 &&
                count_in(runs, "\"version\":\"") == 4 && count_in(runs, "\"commit\":\"") == 4 &&
                count_in(runs, "\"train_images\":192") == 4 && count_in(runs, "\"device\":\"cpu:0 ") == 4,
            "run.jsonl: a line per start (1 fresh, 3 resumed) with version, commit, device and data");
}

/* --resume auto starts a run, then continues it; save_every_steps keeps keep_last snapshots */
static void test_resume_auto(void) {
    char base[8400], cmd[8600], out[1 << 16];
    const char *o = path("runAuto");
    snprintf(base, sizeof base, "bin/vil train --config %s --data %s --out %s --resume auto --device cpu "
             "--set epochs=1 --set eval_every_epochs=0 --set log_every=4 --set save_every_steps=2 "
             "--set keep_last=2", path("tiny.cfg"), dir, o);
    snprintf(cmd, sizeof cmd, "%s --stop-after 3 2>&1", base);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && !strstr(out, "resume:") && strstr(out, "saved at step 2:") &&
                strstr(out, "stopped at step 3"), "--resume auto with no run: a fresh one (rc %d):\n%s", rc, out);
    /* the run in --out continued without --config: the state holds its configuration */
    snprintf(cmd, sizeof cmd, "bin/vil train --data %s --out %s --resume auto --device cpu 2>&1", dir, o);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "resume: ") && strstr(out, "at step 3") && strstr(out, "done: 12 steps"),
            "--resume auto --out RUN without --config: continued to the end (rc %d):\n%s", rc, out);
    snprintf(cmd, sizeof cmd, "ls %s | grep '^step_' | tr '\\n' ' '", o);
    t_run(cmd, out, sizeof out);
    T_CHECK(strcmp(out, "step_00000010.safetensors step_00000012.safetensors ") == 0,
            "save_every_steps = 2, keep_last = 2: the last two step checkpoints are left: '%s'", out);
    char a[4200], b[4200];
    snprintf(a, sizeof a, "%s/step_00000012.safetensors", o);
    snprintf(b, sizeof b, "%s/last.safetensors", o);
    const char *names[1] = {"layers.1.mixer.out_proj.weight"};
    T_CHECK(same_tensors(a, b, names, 1), "step_00000012.safetensors is the last model");
    snprintf(a, sizeof a, "%s/run.jsonl", o);
    T_CHECK(count_in(a, "\"command\":\"vil train --config ") == 1 && count_in(a, "\"command\":\"vil train --data ") == 1 &&
                count_in(a, "--resume auto") == 2,
            "run.jsonl holds the command lines");
    snprintf(cmd, sizeof cmd, "bin/vil train --data %s --resume auto 2>&1", dir);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 2 && strstr(out, "give --out (and --config)"),
            "--resume auto without --out or --config: exit 2 (%d): %s", rc, out);
    snprintf(cmd, sizeof cmd, "bin/vil train --data %s --out %s --resume auto 2>&1", dir, path("noRunHere"));
    rc = t_run(cmd, out, sizeof out);
    struct stat sb;
    T_CHECK(rc == 2 && strstr(out, "holds no run to continue, and a fresh run there needs --config") &&
                stat(path("noRunHere"), &sb) != 0,
            "--resume auto --out EMPTY without --config: exit 2, nothing made (%d): %s", rc, out);
}

/* The labels of the IDX split `prefix` in folder d rewritten to i % k: k classes */
static void relabel(const char *d, const char *prefix, int n, int k) {
    unsigned char *lab = malloc((size_t)n);
    for (int i = 0; i < n; i++) lab[i] = (unsigned char)(i % k);
    char p[4200];
    unsigned dims[1] = {(unsigned)n};
    snprintf(p, sizeof p, "%s/%s-labels-idx1-ubyte", d, prefix);
    corpus_write_idx(p, 1, dims, lab, (size_t)n, 0);
    free(lab);
}

/* What a resume refuses and what it names instead: another global batch (with the commands that
 * keep it, each of which then resumes, and --force), other classes (with the --init command, which
 * then trains); --dry-run sets up, prints and writes nothing, on a fresh run and on a resume. */
static void test_resume_traps(void) {
    static char out[1 << 16];
    char cmd[9000], st[4200];
    const char *o = path("runTraps");
    snprintf(cmd, sizeof cmd, "bin/vil train --config %s --data %s --out %s --device cpu --quiet "
             "--set eval_every_epochs=0 --set batch=16 --stop-after 2 2>&1", path("tiny.cfg"), dir, o);
    int rc = t_run(cmd, out, sizeof out);
    snprintf(st, sizeof st, "%s/last.state.safetensors", o);
    T_CHECK(rc == 0 && meta_num(st, "vil.step") == 2 && strstr(out, "continue with: vil train --resume"),
            "a 2-step run of batch 16 to resume; its hint has no launcher (rc %d):\n%s", rc, out);
    /* batch 8: half the global batch, refused before any step with what keeps it */
    const char *more[] = {"--set batch=8", "--set accum_steps=3"};
    const char *keeps[] = {"--set accum_steps=2 (or --set batch=16)", "on 1 rank, --set accum_steps=1;"};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "bin/vil train --data %s --resume %s --device cpu --quiet %s --stop-after 3 2>&1",
                 dir, o, more[i]);
        rc = t_run(cmd, out, sizeof out);
        char want[160];
        snprintf(want, sizeof want, "the run trained with a global batch of 16 (batch 16 x 1 rank x 1 accum_steps)");
        T_CHECK(rc == 1 && strstr(out, want) && strstr(out, keeps[i]) && strstr(out, "--force") &&
                    meta_num(st, "vil.step") == 2,
                "resumed with %s: refused, naming %s and --force, the state untouched (rc %d):\n%s", more[i],
                keeps[i], rc, out);
    }
    /* the command it gives keeps the batch, so it resumes without a warning */
    snprintf(cmd, sizeof cmd, "bin/vil train --data %s --resume %s --device cpu --quiet --set batch=8 "
             "--set accum_steps=2 --stop-after 3 2>&1", dir, o);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && meta_num(st, "vil.step") == 3 && !strstr(out, "warning"),
            "batch 8 x accum_steps 2 = 16: resumed to step 3 without a warning (rc %d):\n%s", rc, out);
    /* --force goes on with the new batch, and says the settings changed */
    snprintf(cmd, sizeof cmd, "bin/vil train --data %s --resume %s --device cpu --quiet --set accum_steps=1 "
             "--force --stop-after 4 2>&1", dir, o);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && meta_num(st, "vil.step") == 4 && meta_num(st, "vil.global_batch") == 8 &&
                strstr(out, "changed training settings"),
            "--force: resumed at a global batch of 8 with a warning (rc %d):\n%s", rc, out);

    /* other classes: the message names --init, and its command trains */
    char d3[4200], cp[9000];
    snprintf(d3, sizeof d3, "%s/three", dir);
    mkdir(d3, 0755);
    snprintf(cp, sizeof cp, "cp %s/train-images-idx3-ubyte %s/t10k-images-idx3-ubyte %s/", dir, dir, d3);
    T_CHECK(t_run(cp, NULL, 0) == 0, "a copy of the data");
    relabel(d3, "train", 192, 3);
    relabel(d3, "t10k", 64, 3);
    snprintf(cmd, sizeof cmd, "bin/vil train --data %s --resume %s --device cpu --quiet 2>&1", d3, o);
    rc = t_run(cmd, out, sizeof out);
    char want[9000];
    snprintf(want, sizeof want, "vil train --config %s/config.cfg --init %s/last.safetensors --set num_classes=3 "
             "--data %s --out NEW_DIR", o, o, d3);
    T_CHECK(rc == 1 && strstr(out, "has 3 classes, the model num_classes = 4") && strstr(out, want) &&
                !strstr(out, "--config that"),
            "resumed on 3 classes: refused with the --init command (rc %d):\n%s", rc, out);
    snprintf(cmd, sizeof cmd, "bin/vil train --data %s --resume %s --device cpu --quiet --set num_classes=3 2>&1", d3, o);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "num_classes") && strstr(out, "--init") && !strstr(out, "drop --config"),
            "resumed with --set num_classes=3: refused naming --init (rc %d):\n%s", rc, out);
    snprintf(cmd, sizeof cmd, "bin/vil train --config %s/config.cfg --init %s/last.safetensors --set num_classes=3 "
             "--data %s --out %s --device cpu --stop-after 1 2>&1", o, o, d3, path("runTraps3"));
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "the head starts fresh") && strstr(out, "3 classes"),
            "the --init command it names trains on 3 classes (rc %d):\n%s", rc, out);

    /* --dry-run: the configuration and the header, nothing written */
    const char *dry = path("runDry");
    snprintf(cmd, sizeof cmd, "bin/vil train --config %s --data %s --out %s --device cpu --dry-run --lr 0.004 "
             "-b 8 2>&1", path("tiny.cfg"), dir, dry);
    rc = t_run(cmd, out, sizeof out);
    struct stat sb;
    T_CHECK(rc == 0 && strstr(out, "base_lr           = 0.256") && strstr(out, "batch: 8 x 1 rank x 1 accum_steps = 8; lr = 0.256 * 8 / 512 = 0.004;") &&
                strstr(out, "dry run: nothing written") && stat(dry, &sb) != 0,
            "--dry-run --lr 0.004 -b 8: the config and header (base_lr 0.256), no folder (rc %d):\n%s", rc, out);
    struct stat before, after;
    stat(st, &before);
    snprintf(cmd, sizeof cmd, "ls %s | wc -l", o);
    char n1[64], n2[64];
    t_run(cmd, n1, sizeof n1);
    snprintf(cp, sizeof cp, "bin/vil train --data %s --resume %s --device cpu --dry-run 2>&1", dir, o);
    rc = t_run(cp, out, sizeof out);
    t_run(cmd, n2, sizeof n2);
    stat(st, &after);
    T_CHECK(rc == 0 && strstr(out, "resume: ") && strstr(out, "at step 4") && strcmp(n1, n2) == 0 &&
                before.st_mtime == after.st_mtime && before.st_size == after.st_size,
            "--dry-run --resume: the header and where it resumes, the run's files untouched (rc %d):\n%s", rc, out);
    snprintf(cmd, sizeof cmd, "bin/vil train --config %s --data %s --out %s --device cpu --dry-run 2>&1",
             path("tiny.cfg"), dir, o);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "holds a training run already"),
            "--dry-run of a fresh run into a used folder: refused as the run would be (rc %d):\n%s", rc, out);
}

/* Rewrites a state file with one metadata key set to val (added when missing). */
static int set_meta(const char *file, const char *key, const char *val) {
    VilSafetensors st;
    if (st_read_quiet(file, &st) != 0) return -1;
    VilStWriter *w = vil_st_writer_new();
    for (int i = 0; i < st.n_tensors; i++) {
        const VilStTensor *t = &st.tensors[i];
        vil_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
    }
    int seen = 0;
    for (int i = 0; i < st.n_meta; i++) {
        int it = strcmp(st.meta_keys[i], key) == 0;
        seen |= it;
        vil_st_writer_meta(w, st.meta_keys[i], it ? val : st.meta_vals[i]);
    }
    if (!seen) vil_st_writer_meta(w, key, val);
    int rc = vil_st_writer_save(w, file);
    vil_st_writer_free(w);
    vil_st_free(&st);
    return rc;
}

/* Rewrites a state file with element k of tensor `name` (float32) set to v. */
static int set_value(const char *file, const char *name, size_t k, float v) {
    VilSafetensors st;
    if (st_read_quiet(file, &st) != 0) return -1;
    VilStWriter *w = vil_st_writer_new();
    float *copy = NULL;
    for (int i = 0; i < st.n_tensors; i++) {
        const VilStTensor *t = &st.tensors[i];
        const void *data = t->data;
        if (strcmp(t->name, name) == 0) {
            copy = malloc(t->nbytes);
            memcpy(copy, t->data, t->nbytes);
            copy[k] = v;
            data = copy;
        }
        vil_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, data);
    }
    for (int i = 0; i < st.n_meta; i++) vil_st_writer_meta(w, st.meta_keys[i], st.meta_vals[i]);
    int rc = vil_st_writer_save(w, file);
    vil_st_writer_free(w);
    vil_st_free(&st);
    free(copy);
    return rc;
}

/* Every field of a real state file tampered in turn: the resume is refused before any step
 * with the field and the file named (vil.step = -5 resumed at step -5, "epoch 4/3", and wrote
 * step_-0000003.safetensors). The untampered file still resumes. */
static void test_tampered_state(void) {
    char cmd[9000], out[1 << 14], st[4200], keep[4200];
    const char *o = path("runTamper");
    snprintf(cmd, sizeof cmd, "bin/vil train --config %s --data %s --out %s --device cpu --quiet "
             "--set eval_every_epochs=0 --set save_every_steps=1 --stop-after 3 2>&1", path("tiny.cfg"), dir, o);
    int rc = t_run(cmd, out, sizeof out);
    snprintf(st, sizeof st, "%s/last.state.safetensors", o);
    snprintf(keep, sizeof keep, "%s/keep.state", dir);
    T_CHECK(rc == 0 && meta_num(st, "vil.step") == 3, "a 3-step run to tamper with (rc %d):\n%s", rc, out);
    copy_file(st, keep);
    static const struct {
        const char *key, *val;
    } metas[] = {
        {"vil.step", "-5"}, {"vil.step", "99999999999"}, {"vil.step", "2"}, {"vil.step", " 3"},
        {"vil.epoch", "-1"}, {"vil.epoch", "3"}, {"vil.epoch_batch", "-1"}, {"vil.epoch_batch", "13"},
        {"vil.steps_per_epoch", "0"}, {"vil.adam_step", "4"}, {"vil.adam_step", "-3"},
        {"vil.best_top1", "nan"}, {"vil.best_top1", "250"}, {"vil.best_top1", "x"},
        {"vil.best_step", "4"}, {"vil.best_step", "-2"}, {"vil.world", "0"},
        {"vil.accum_steps", "0"}, {"vil.global_batch", "17"}, {"vil.global_batch", "-16"},
    };
    char resume[9000];
    snprintf(resume, sizeof resume, "bin/vil train --config %s --data %s --out %s --device cpu --quiet "
             "--set eval_every_epochs=0 --set save_every_steps=1 --resume %s 2>&1", path("tiny.cfg"), dir, o, o);
    for (size_t i = 0; i < sizeof metas / sizeof metas[0]; i++) {
        copy_file(keep, st);
        set_meta(st, metas[i].key, metas[i].val);
        rc = t_run(resume, out, sizeof out);
        /* the field itself, not a longer key it begins (vil.step, vil.steps_per_epoch) */
        char has[96], has_a[96], quoted[96];
        snprintf(has, sizeof has, "has %s = ", metas[i].key);
        snprintf(has_a, sizeof has_a, "has a %s that", metas[i].key);
        snprintf(quoted, sizeof quoted, "'%s'", metas[i].key);
        T_CHECK(rc == 1 && (strstr(out, has) || strstr(out, has_a) || strstr(out, quoted)) &&
                    strstr(out, st) && !strstr(out, "step_-") &&
                    meta_num(st, "vil.step") != 4,
                "%s = '%s': resume refused with the field and the file named (rc %d): %s", metas[i].key,
                metas[i].val, rc, out);
    }
    /* the epoch of the last batch of the last epoch: "epoch 3/2" */
    copy_file(keep, st);
    set_meta(st, "vil.epoch", "2");
    rc = t_run(resume, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "cannot resume") && !strstr(out, "epoch 3/2"),
            "vil.epoch = 2 of 2 epochs, mid-epoch: refused (rc %d): %s", rc, out);
    static const struct {
        const char *name;
        float v;
    } vals[] = {{"params", NAN}, {"adam_m", INFINITY}, {"adam_v", -1.0f}, {"adam_v", NAN}, {"ema", NAN}};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        copy_file(keep, st);
        set_value(st, vals[i].name, 5, vals[i].v);
        rc = t_run(resume, out, sizeof out);
        char want[4300];
        snprintf(want, sizeof want, "'%s'", st);
        T_CHECK(rc == 1 && strstr(out, vals[i].name) && strstr(out, want),
                "tensor %s[5] = %g: resume refused with the tensor and the file named (rc %d): %s",
                vals[i].name, vals[i].v, rc, out);
    }
    copy_file(keep, st);
    rc = t_run(resume, out, sizeof out);
    T_CHECK(rc == 0 && meta_num(st, "vil.step") == 24, "the untampered state resumes to the end (rc %d): %s", rc, out);
    /* a finished run resumed with fewer epochs has nothing to do: not a damaged state */
    snprintf(cmd, sizeof cmd, "bin/vil train --config %s --data %s --out %s --device cpu --set epochs=1 "
             "--set eval_every_epochs=0 --resume %s 2>&1", path("tiny.cfg"), dir, o, o);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "nothing to do"), "a finished run, epochs lowered: nothing to do (rc %d): %s", rc, out);
}

/* One run per --out: a second vil train on the folder of a running one is refused at once
 * with the holder's pid (two runs used to both train and both report success, their files a
 * mix); the lock goes with the process, SIGKILL included, and the folder then resumes. */
static void test_out_lock(void) {
    const char *o = path("runLock"), *bin = getenv("VIL_BIN");
    if (!bin || !*bin) bin = "bin/vil";
    char first[9000], cmd[9000], out[1 << 14], st[4200];
    snprintf(st, sizeof st, "%s/last.state.safetensors", o);
    snprintf(first, sizeof first, "exec %s train --config %s --data %s --out %s --device cpu --quiet "
             "--set epochs=200 --set eval_every_epochs=0 > %s 2>&1", bin, path("tiny.cfg"), dir, o,
             path("lock_first.log"));
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", first, (char *)NULL);
        _exit(127);
    }
    /* the first run is at work once its first epoch's state is saved */
    double t0 = vil_now();
    while (meta_num(st, "vil.step") < 12 && vil_now() - t0 < 60) usleep(50000);
    int alive = waitpid(pid, NULL, WNOHANG) == 0;
    T_CHECK(alive && meta_num(st, "vil.step") >= 12, "a long run saved its first epoch and goes on");
    char want[32];
    snprintf(want, sizeof want, "pid %ld", (long)pid);
    const char *forms[2] = {"", "--resume auto "};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "timeout 20 bin/vil train --config %s --data %s --out %s --device cpu "
                 "--quiet %s--set epochs=200 --set eval_every_epochs=0 2>&1", path("tiny.cfg"), dir, o, forms[i]);
        double t1 = vil_now();
        int rc = t_run(cmd, out, sizeof out);
        T_CHECK(rc == 1 && strstr(out, want) && strstr(out, "in use") && vil_now() - t1 < 15,
                "a second run %son the folder: exit 1 at once naming the first's %s (rc %d, %.1f s): %s",
                forms[i], want, rc, vil_now() - t1, out);
    }
    T_CHECK(waitpid(pid, NULL, WNOHANG) == 0, "the first run goes on");
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    long at = meta_num(st, "vil.step");
    snprintf(cmd, sizeof cmd, "timeout 60 bin/vil train --config %s --data %s --out %s --device cpu "
             "--quiet --resume auto --set epochs=200 --set eval_every_epochs=0 --stop-after %ld 2>&1",
             path("tiny.cfg"), dir, o, at + 2);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(WIFSIGNALED(status) && rc == 0 && meta_num(st, "vil.step") == at + 2,
            "after SIGKILL of the holder the folder's run resumes (step %ld -> %ld, rc %d): %s", at,
            meta_num(st, "vil.step"), rc, out);
}

/* the lr of doc/recipe.md's schedule at position pos (of total, warmup W), written out here */
static double lr_formula(long pos, long total, long W, double peak, double wl, double min_lr) {
    if (pos < W) return wl + (peak - wl) * (double)pos / (double)W;
    return min_lr + 0.5 * (peak - min_lr) * (1.0 + cos(M_PI * (double)(pos - W) / (double)(total - W)));
}

/* Issue 45 item 14: a resume at another global batch with --force keeps the position in images:
 * the epoch goes on after the images it had trained, the lr schedule goes on from that place,
 * every epoch runs to its end, and the curves mark the resume. Batch 16 (12 steps an epoch) to
 * step 5 (80 images), then batch 32 (6 steps an epoch): epoch 1 goes on at batch 2 (64 images:
 * 16 seen again), the schedule at position 2 of 12, and the run ends after 2 + 10 more updates:
 * step 15, 2 epochs. */
static void test_rebatch(void) {
    const char *o = path("runRebatch");
    char cmd[9000], out[1 << 15], st[4200], mpath[4200];
    snprintf(st, sizeof st, "%s/last.state.safetensors", o);
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", o);
    snprintf(cmd, sizeof cmd, "bin/vil train --config %s --data %s --out %s --device cpu --progress none "
             "--stop-after 5 2>&1", path("tiny.cfg"), dir, o);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && meta_num(st, "vil.step") == 5, "batch 16 to step 5 (rc %d)", rc);
    snprintf(cmd, sizeof cmd, "bin/vil train --resume %s --data %s --device cpu --progress none --set batch=32 "
             "--force 2>&1", o, dir);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "resuming a run of global batch 16 at 32 (--force): epoch 1 goes on after its 80 "
                                   "images, at batch 2 of 6") &&
                strstr(out, "done: 15 steps (2 epochs)") && meta_num(st, "vil.step") == 15 &&
                meta_num(st, "vil.sched_offset") == 3 && meta_num(st, "vil.epoch") == 2,
            "resumed at batch 32: the same place in the epoch, both epochs run to their ends, step 15 "
            "(rc %d): %s", rc, out);
    /* the schedule from the place in images: each logged lr against the formula at its position
     * (the update before step s runs at position s - 1 - offset) */
    static char lines[64][512];
    int n = metric_lines(mpath, lines, 64), resumes = 0, lr_ok = 1, evals = 0, steps = 0;
    VilTrainConfig t;
    vil_train_config_default(&t);
    double peak32 = 0.05 * 32 / 512.0, peak16 = 0.05 * 16 / 512.0;
    for (int i = 0; i < n; i++) {
        cJSON *l = cJSON_Parse(lines[i]);
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(l, "type"), *sp = cJSON_GetObjectItemCaseSensitive(l, "step");
        long step = cJSON_IsNumber(sp) ? (long)sp->valuedouble : -1;
        if (cJSON_IsString(ty) && !strcmp(ty->valuestring, "resume")) {
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(l, "from_global_batch"),
                        *g = cJSON_GetObjectItemCaseSensitive(l, "global_batch");
            resumes += step == 5 && cJSON_IsNumber(f) && f->valuedouble == 16 && cJSON_IsNumber(g) && g->valuedouble == 32;
        } else if (cJSON_IsString(ty) && !strcmp(ty->valuestring, "train")) {
            double lr = cJSON_GetObjectItemCaseSensitive(l, "lr")->valuedouble, want;
            if (step <= 5) want = lr_formula(step - 1, 24, 6, peak16, t.warmup_lr, 1e-5);
            else want = lr_formula(step - 1 - 3, 12, 3, peak32, t.warmup_lr, 1e-5);
            if (fabs(lr - want) > 1e-6 * want + 1e-9) {
                lr_ok = 0;
                printf("  step %ld: lr %.9g, want %.9g\n", step, lr, want);
            }
            steps++;
        } else if (cJSON_IsString(ty) && !strcmp(ty->valuestring, "eval")) {
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(l, "epoch");
            evals += cJSON_IsNumber(e) && ((step == 9 && e->valuedouble == 1) || (step == 15 && e->valuedouble == 2));
        }
        cJSON_Delete(l);
    }
    T_CHECK(resumes == 1 && lr_ok && steps == 15 && evals == 2,
            "metrics.jsonl: a resume line (16 -> 32) at step 5, 15 steps whose lr follows the schedule by "
            "place in images, evaluations at the ends of epochs 1 (step 9) and 2 (step 15) (%d, %d, %d, %d)",
            resumes, lr_ok, steps, evals);
    char svg[4200];
    snprintf(svg, sizeof svg, "%s/curves.svg", o);
    T_CHECK(count_in(svg, "batch 16\xe2\x86\x92" "32") >= 1, "curves.svg marks the resume at another batch");
}

/* Issue 45 item 20: --resume auto without --config on a folder a live run holds before its
 * first save names the holder (it said "holds no run to continue") */
static void test_resume_auto_holder(void) {
    const char *o = path("runHolder"), *bin = getenv("VIL_BIN");
    if (!bin || !*bin) bin = "bin/vil";
    char first[9000], cmd[9000], out[1 << 14], lock[4200];
    snprintf(lock, sizeof lock, "%s/train.lock", o);
    snprintf(first, sizeof first, "exec %s train --config %s --data %s --out %s --device cpu --quiet "
             "--set batch=1 --set epochs=200 --set eval_every_epochs=0 > %s 2>&1", bin, path("tiny.cfg"), dir, o,
             path("holder.log"));
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", first, (char *)NULL);
        _exit(127);
    }
    /* the lock holds its pid before the first step: paused there, it has saved nothing */
    double t0 = vil_now();
    size_t n = 0;
    char *held = NULL;
    while (vil_now() - t0 < 60) {
        FILE *f = fopen(lock, "r");
        char buf[32] = "";
        if (f) {
            n = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
        }
        if (n > 0) {
            kill(pid, SIGSTOP);
            held = strdup(buf);
            break;
        }
        usleep(20000);
    }
    char state[4200], want[64];
    snprintf(state, sizeof state, "%s/last.state.safetensors", o);
    snprintf(want, sizeof want, "pid %ld", (long)pid);
    snprintf(cmd, sizeof cmd, "bin/vil train --resume auto --out %s --data %s --device cpu 2>&1", o, dir);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(held && access(state, F_OK) != 0 && rc == 1 && strstr(out, "in use") && strstr(out, want) &&
                !strstr(out, "holds no run"),
            "--resume auto on a folder a run holds before its first save: names the holder (rc %d): %s", rc, out);
    kill(pid, SIGKILL);
    kill(pid, SIGCONT);
    waitpid(pid, NULL, 0);
    free(held);
    /* and once the holder is gone, the folder holds no run: said as before */
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 2 && strstr(out, "holds no run to continue"), "the holder gone: no run to continue (rc %d): %s", rc,
            out);
}

/* Issue 45 item 5: a hard link at OUT/train.lock would have the linked file truncated and
 * overwritten with the pid: refused, the file unchanged; a symlink there is refused too */
static void test_lock_links(void) {
    const char *o = path("runLockLink"), *victim = path("lock_victim.txt");
    corpus_mkdir("%s%s", o, "");
    corpus_write(victim, "precious", 8);
    char lock[4200], cmd[9000], out[1 << 14];
    snprintf(lock, sizeof lock, "%s/train.lock", o);
    T_CHECK(link(victim, lock) == 0, "a hard link at OUT/train.lock");
    snprintf(cmd, sizeof cmd, "bin/vil train --config %s --data %s --out %s --device cpu --quiet "
             "--set epochs=1 2>&1", path("tiny.cfg"), dir, o);
    int rc = t_run(cmd, out, sizeof out);
    size_t n = 0;
    char *v = (char *)vil_read_file(victim, &n);
    T_CHECK(rc == 1 && strstr(out, "hard links") && v && n == 8 && memcmp(v, "precious", 8) == 0,
            "train.lock hard-linked: refused, the linked file unchanged (rc %d): %s", rc, out);
    free(v);
    unlink(lock);
    T_CHECK(symlink(victim, lock) == 0, "a symlink at OUT/train.lock");
    rc = t_run(cmd, out, sizeof out);
    v = (char *)vil_read_file(victim, &n);
    T_CHECK(rc == 1 && strstr(out, "symbolic link") && v && n == 8 && memcmp(v, "precious", 8) == 0,
            "train.lock a symlink: refused, its target unchanged (rc %d): %s", rc, out);
    free(v);
}

/* Text that goes into a checkpoint's metadata (class names, the model's name) must be UTF-8:
 * it failed only at the first save ("metadata ... is not valid UTF-8"), after the training
 * time, and left nothing to resume. Now refused at startup, before any step, with the entry
 * escaped: a dataset folder or a names file exits 1, a flag or config value 2. */
static void test_utf8_at_startup(void) {
    char cmd[9000], out[1 << 14], d[4200], p[4300];
    snprintf(d, sizeof d, "%s/utf8data", dir);
    const char *classes[4] = {"a", "b", "\xff", "d"};
    corpus_mkdir("%s%s", d, "");
    corpus_mkdir("%s%s", d, "/train");
    for (int c = 0; c < 4; c++)
        for (int i = 0; i < 8; i++) {
            snprintf(p, sizeof p, "%s/train/%s", d, classes[c]);
            corpus_mkdir("%s%s", p, "");
            snprintf(p, sizeof p, "%s/train/%s/%d.jpg", d, classes[c], i);
            corpus_write_jpeg(p, 16, 16, 3, c, i, 0);
        }
    snprintf(cmd, sizeof cmd, "bin/vil train --config %s --data %s --out %s/runU1 --device cpu --quiet "
             "--set in_chans=3 --set eval_every_epochs=0 --set batch=8 2>&1; echo \"rc=$?\"; ls %s/runU1 2>&1",
             path("tiny.cfg"), d, dir, dir);
    t_run(cmd, out, sizeof out);
    T_CHECK(strstr(out, "rc=1") && strstr(out, "'\\xff'") && strstr(out, "rename the folder") &&
                strstr(out, "No such file"),
            "a class folder named 0xff: exit 1 at startup naming it escaped, nothing written: %s", out);
    /* the names file: by index for the IDX data */
    snprintf(p, sizeof p, "%s/names_bad.tsv", dir);
    corpus_write(p, "0\tzero\n1\tone\n2\ttw\xc3\n3\tthree\n", 26);
    snprintf(cmd, sizeof cmd, "bin/vil train --config %s --data %s --names %s --out %s/runU2 --device cpu "
             "--quiet --set eval_every_epochs=0 2>&1; echo \"rc=$?\"; ls %s/runU2 2>&1", path("tiny.cfg"),
             dir, p, dir, dir);
    t_run(cmd, out, sizeof out);
    T_CHECK(strstr(out, "rc=1") && strstr(out, "'tw\\xc3'") && strstr(out, p) && strstr(out, "in UTF-8") &&
                strstr(out, "No such file"),
            "a names-file entry that is not UTF-8: exit 1 at startup naming the file and the entry: %s", out);
    /* --set, a cfg file; and an empty value */
    static const struct {
        const char *set, *want;
    } sets[] = {{"'name=\xff'", "'\\xff'"}, {"'name=ok\xe2\x82'", "'ok\\xe2\\x82'"}, {"name=", "is empty"},
                {"'decode=\xff'", "'\\xff'"}};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        snprintf(cmd, sizeof cmd, "bin/vil train --config %s --data %s --out %s/runU3 --device cpu --quiet "
                 "--set %s 2>&1; echo \"rc=$?\"; ls %s/runU3 2>&1", path("tiny.cfg"), dir, dir, sets[i].set, dir);
        t_run(cmd, out, sizeof out);
        T_CHECK(strstr(out, "rc=2") && strstr(out, sets[i].want) && strstr(out, "No such file"),
                "--set %s: exit 2 before anything, saying %s: %s", sets[i].set, sets[i].want, out);
    }
    snprintf(p, sizeof p, "%s/bad_name.cfg", dir);
    char cfg[2048];
    int n = snprintf(cfg, sizeof cfg, "%sname = caf\xe9\n", CFG);
    corpus_write(p, cfg, (size_t)n);
    /* the cfg's own name key comes first in CFG; a second one is a repeated key, so replace it */
    snprintf(cmd, sizeof cmd, "sed -i '1s/^name = tiny_test$/# no name/' %s", p);
    t_run(cmd, NULL, 0);
    snprintf(cmd, sizeof cmd, "bin/vil train --config %s --data %s --out %s/runU4 --device cpu --quiet 2>&1; "
             "echo \"rc=$?\"; ls %s/runU4 2>&1", p, dir, dir, dir);
    t_run(cmd, out, sizeof out);
    T_CHECK(strstr(out, "rc=2") && strstr(out, "'caf\\xe9'") && strstr(out, p) && strstr(out, "No such file"),
            "a cfg file's name not UTF-8: exit 2 naming the file and the value: %s", out);
}

int main(void) {
    dir = corpus_mkdtemp("train");
    test_schedule();
    test_schedules();
    test_ema_warmup();
    test_step_ema_warmup();
    test_ema();
    test_topk();
    test_config();
    test_train_resume();
    test_pos_embed_modes();
    test_stream_train();
    test_resume_optims();
    test_run_files();
    test_resume_auto();
    test_resume_traps();
    test_diverge_and_errors();
    test_resume_repairs();
    test_failed_saves();
    test_stale_temps();
    test_used_folder();
    test_unwritable_out();
    test_tampered_state();
    test_out_lock();
    test_lock_links();
    test_rebatch();
    test_resume_auto_holder();
    test_utf8_at_startup();
    corpus_rmtree(dir);
    return t_finish();
}
