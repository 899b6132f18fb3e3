/* bench.c: `vil bench`: training-step, forward+backward and inference throughput of a model
 * config on a backend, with random images, the peak memory and a per-op time breakdown. The
 * step timed is vil_train_step (train/step.c), the one `vil train` runs, with the cfg file's
 * training settings (clipping, EMA, AdamW). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "data/feed.h"
#include "eval/eval.h"
#include "train/train.h"
#include "vil/backend_prof.h"
#include "vil/common.h"
#include "vil/limits.h"
#include "vil/model.h"

static void upload_batch(VilModel *m, uint64_t seed) {
    const VilConfig *c = &m->cfg;
    int B = m->acts.B;
    size_t ni = (size_t)B * c->in_chans * c->img_size * c->img_size, nt = (size_t)B * c->num_classes;
    float *img = vil_malloc(ni * sizeof(float)), *tg = vil_calloc(nt, sizeof(float));
    VilRng r;
    vil_rng_seed(&r, seed);
    for (size_t i = 0; i < ni; i++) img[i] = vil_rng_normal(&r);
    for (int b = 0; b < B; b++) {
        for (int k = 0; k < c->num_classes; k++) tg[(size_t)b * c->num_classes + k] = 0.1f / c->num_classes;
        tg[(size_t)b * c->num_classes + vil_rng_below(&r, (uint32_t)c->num_classes)] += 0.9f;
    }
    m->be->to_device(m->be, m->acts.img, img, ni * sizeof(float));
    m->be->to_device(m->be, m->acts.targets, tg, nt * sizeof(float));
    free(img);
    free(tg);
}

static float mean_loss(VilModel *m) {
    int B = m->acts.B;
    float *l = vil_malloc((size_t)B * sizeof(float));
    m->be->to_host(m->be, l, m->acts.losses, (size_t)B * sizeof(float));
    double s = 0;
    for (int b = 0; b < B; b++) s += l[b];
    free(l);
    return (float)(s / B);
}

/* forward and backward only: the step's part before the optimizer */
static void forward_backward(VilModel *m) {
    vil_model_zero_grad(m);
    vil_model_forward(m, 1);
    vil_model_backward(m);
}

/* Training steps as `vil train` runs them: each step's images and targets come from host memory
 * (host_alloc'd) through the input feed, uploaded one step ahead. Returns the seconds of `steps`
 * steps after `warmup`. */
static double feed_steps(VilModel *m, const VilStepParams *sp, int warmup, int steps) {
    const VilBackend *be = m->be;
    const VilConfig *c = &m->cfg;
    int B = m->acts.B;
    size_t bytes[2] = {(size_t)B * c->in_chans * c->img_size * c->img_size * sizeof(float),
                       (size_t)B * c->num_classes * sizeof(float)};
    float *h[2][2];
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 2; i++) {
            h[s][i] = be->host_alloc(be, bytes[i]);
            if (!h[s][i]) VIL_FATAL("host_alloc of %zu bytes failed", bytes[i]);
        }
    /* the images and targets already on the device, as the two host batches */
    for (int s = 0; s < 2; s++) {
        be->to_host(be, h[s][0], m->acts.img, bytes[0]);
        be->to_host(be, h[s][1], m->acts.targets, bytes[1]);
    }
    void *dev0[2] = {m->acts.img, m->acts.targets}, *in[2];
    VilFeed f;
    vil_feed_init(&f, be, 2, dev0, bytes);
    VilBatch dummy[2];
    double t0 = 0;
    vil_feed_put(&f, &dummy[0], (const void *const *)h[0]);
    for (int k = 0; k < warmup + steps; k++) {
        if (k == warmup) {
            be->sync(be);
            t0 = vil_now();
        }
        vil_feed_take(&f, in);
        vil_model_set_inputs(m, in[0], in[1], NULL);
        vil_train_step(m, sp);
        vil_feed_done(&f);
        if (k + 1 < warmup + steps) vil_feed_put(&f, &dummy[(k + 1) % 2], (const void *const *)h[(k + 1) % 2]);
    }
    be->sync(be);
    double t = vil_now() - t0;
    vil_feed_drain(&f, NULL);
    vil_model_set_inputs(m, NULL, NULL, NULL);
    vil_feed_free(&f);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 2; i++) be->host_free(be, h[s][i]);
    return t;
}

int vil_cmd_bench(int argc, char **argv) {
    const char *device = "cpu", *model = "configs/vil_tiny.cfg";
    int batch = 8, steps = 0, warmup = 2, profile = 1, no_profile = 0;
    VilArgList sets = {0};
    VilArg args[] = {
        {"--device", VIL_ARG_STR, &device, "cpu or cuda"},
        {"--model", VIL_ARG_STR, &model, "cfg file (model and training keys)"},
        {"--batch", VIL_ARG_INT, &batch, "batch size"},
        {"--steps", VIL_ARG_INT, &steps, "timed steps per measurement (0: 5 on cpu, 30 on cuda)"},
        {"--warmup", VIL_ARG_INT, &warmup, "untimed steps first"},
        {"--no-profile", VIL_ARG_FLAG, &no_profile, "skip the per-op breakdown"},
        {"--set", VIL_ARG_LIST, &sets, "override a config key (repeatable)"},
    };
    VilArgSpec spec = {"bench", "[--device cpu|cuda] [--model CFG] [--batch B] [options]",
                       "Times the training step `vil train` runs (forward, backward, clipping and\n"
                       "EMA as the cfg file sets them, AdamW), forward+backward and inference on\n"
                       "random images, and prints images/s, the peak memory and a per-op\n"
                       "breakdown (a separate, synchronized pass).",
                       args, (int)(sizeof args / sizeof args[0]), 0, 0};
    int rc = vil_args_parse_flags(&spec, argc, argv);
    if (rc >= 0) return rc;
    profile = !no_profile;
    if (batch < 1 || batch > VIL_MAX_BATCH || steps < 0 || warmup < 0 || !vil_device_name_ok(device)) {
        fprintf(stderr, "vil bench: --batch must be in 1..%d, --steps and --warmup >= 0, --device "
                        "cpu, cuda or auto\n", VIL_MAX_BATCH);
        return 2;
    }
    VilConfig cfg;
    VilTrainConfig tc;
    vil_config_default(&cfg);
    vil_train_config_default(&tc);
    int r = vil_train_config_load(&cfg, &tc, model);
    for (int i = 0; r == 0 && i < sets.n; i++) r = vil_train_config_set_kv(&cfg, &tc, sets.v[i]);
    if (r == 0) r = vil_config_finalize(&cfg);
    if (r == 0) r = vil_train_config_finalize(&tc);
    if (r != 0) return vil_exit_code(r);
    /* the step at the peak learning rate of this batch */
    VilStepParams sp = vil_step_params(&tc, (float)vil_peak_lr(tc.base_lr, batch));
    const VilBackend *be = vil_backend_get(device);
    if (!be) return 1;
    if (steps == 0) steps = strcmp(be->name, "cpu") == 0 ? 5 : 30;
    VilModel m;
    if (vil_model_init(&m, &cfg, be) != 0) return 1;
    if (vil_model_check_acts(&m, batch, 1) != 0) {
        vil_model_free(&m);
        return 1;
    }
    vil_model_init_weights(&m, 0);
    printf("bench: %s (%s) on %s, %zu parameters, %dx%d, batch %d, %d tokens\n", cfg.name,
           cfg.arch, be->name, m.param_count, cfg.img_size, cfg.img_size, batch, cfg.seq_len);
    printf("step:  forward, backward, %s AdamW (lr %.3g, wd %g), %s\n",
           sp.clip_grad > 0 ? "clip_grad," : "no clipping,", sp.lr, sp.weight_decay,
           sp.ema_decay > 0 ? "EMA" : "no EMA");
    fflush(stdout);

    vil_model_init_training(&m, sp.ema_decay > 0.0f);
    vil_model_alloc_acts(&m, batch, 1);
    upload_batch(&m, 1);
    for (int i = 0; i < warmup; i++) vil_train_step(&m, &sp);
    be->sync(be);
    float loss0 = mean_loss(&m);
    double t0 = vil_now();
    for (int i = 0; i < steps; i++) vil_train_step(&m, &sp);
    be->sync(be);
    double t_train = vil_now() - t0;
    float loss1 = mean_loss(&m);
    t0 = vil_now();
    for (int i = 0; i < steps; i++) forward_backward(&m);
    be->sync(be);
    double t_fb = vil_now() - t0;
    size_t peak_train = be->peak_bytes ? be->peak_bytes(be) : 0;
    if (!isfinite(loss1)) {
        vil_error("the loss is not finite after %d steps (%g): the backend is broken", steps, loss1);
        vil_model_free(&m);
        return 1;
    }
    printf("train step (as vil train):  %10.1f images/s  (%.2f ms/step; loss %.4f -> %.4f)\n",
           batch * steps / t_train, 1e3 * t_train / steps, loss0, loss1);
    printf("forward+backward:           %10.1f images/s  (%.2f ms/step)\n", batch * steps / t_fb,
           1e3 * t_fb / steps);
    double t_feed = feed_steps(&m, &sp, warmup, steps);
    printf("train step + upload (feed): %10.1f images/s  (%.2f ms/step; each batch from host memory, as vil train)\n",
           batch * steps / t_feed, 1e3 * t_feed / steps);
    fflush(stdout);

    vil_model_alloc_acts(&m, batch, 0);
    upload_batch(&m, 2);
    double t_inf = steps * vil_time_forward(&m, warmup, steps);
    printf("inference (forward):        %10.1f images/s  (%.2f ms/step)\n", batch * steps / t_inf,
           1e3 * t_inf / steps);
    printf("peak memory (training):     %10.2f GiB (%.1f MiB)%s\n", peak_train / 1073741824.0,
           peak_train / 1048576.0, strcmp(be->name, "cpu") == 0 ? " (process RSS)" : "");
    fflush(stdout);

    if (profile) {
        int iters = steps < 5 ? steps : 5;
        vil_model_alloc_acts(&m, batch, 1);
        upload_batch(&m, 3);
        m.be = vil_backend_profiled(be);
        vil_train_step(&m, &sp); /* warm */
        vil_prof_reset();
        for (int i = 0; i < iters; i++) vil_train_step(&m, &sp);
        printf("\nper-op breakdown of a training step (synchronized after every op, %d steps):\n", iters);
        vil_prof_report(stdout, iters);
        m.be = be;
    }
    vil_model_free(&m);
    return 0;
}
