/* test_nomem.c: no size a caller can pass ends the process (issue 47): when memory cannot be
 * had, the library reports and returns. A test backend, the CPU's with an alloc that fails from
 * a chosen call on or above a byte count, makes each of the model's backend allocations fail in
 * turn: vil_model_init, vil_model_alloc_acts, vil_model_init_training, the optimizer step, the
 * initial states, the states along the sequence and the input feed each return an error with a
 * message and leave the model usable (and nothing leaks: make test-asan); a checkpoint loaded
 * onto it fails naming the file. Under an address-space limit (tests/limited.h), a sparse
 * safetensors file whose header claims a 2 TiB tensor and an evaluation transform to 20000 px
 * return errors instead of exiting. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/feed.h"
#include "data/transform.h"
#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "tests/limited.h"
#include "testing.h"
#include "vil/common.h"
#include "vil/model.h"
#include "vil/optim.h"

static char dir[64];

/* ---- the test backend ---- */

/* the CPU backend, whose alloc fails (NULL and a message, as the contract says) on call fail_at
 * (counted from the last set_failing) and every later one, and for more than fail_above bytes */
static long fail_at = -1, calls;
static size_t fail_above = SIZE_MAX;
static VilBackend failing;

static void *failing_alloc(const VilBackend *be, size_t bytes) {
    long k = calls++;
    if ((fail_at >= 0 && k >= fail_at) || bytes > fail_above) {
        vil_error("test backend: no memory for %zu bytes (allocation %ld)", bytes, k);
        return NULL;
    }
    return vil_backend_cpu.alloc(be, bytes);
}

static void set_failing(long at, size_t above) {
    fail_at = at;
    fail_above = above;
    calls = 0;
}

/* 16 px, patch 4, dim 8, depth 2: the tiny ViL of the command-line tests */
static void tiny_config(VilConfig *c) {
    vil_config_default(c);
    c->img_size = 16, c->patch_size = 4, c->stride = 4, c->embed_dim = 8, c->depth = 2, c->d_state = 4;
    c->num_classes = 3;
    c->drop_path = 0.0f; /* the forwards here draw no drop-path scales */
    vil_config_finalize(c);
}

/* a model on the test backend with nothing failing */
static int tiny_model(VilModel *m) {
    VilConfig c;
    tiny_config(&c);
    set_failing(-1, SIZE_MAX);
    return vil_model_init(m, &c, &failing) == 0 && vil_model_init_weights(m, 1) == 0 ? 0 : -1;
}

/* images of zeros and uniform targets; the forward with the loss: 1 when the losses are finite */
static int forward_ok(VilModel *m) {
    const VilConfig *c = &m->cfg;
    int B = vil_model_batch(m);
    memset(m->acts.img, 0, (size_t)B * c->in_chans * c->img_size * c->img_size * sizeof(float));
    for (size_t i = 0; i < (size_t)B * c->num_classes; i++) m->acts.targets[i] = 1.0f / c->num_classes;
    vil_model_forward(m, 1);
    float loss[64];
    vil_model_losses(m, loss);
    int ok = 1;
    for (int b = 0; b < B; b++) ok &= isfinite(loss[b]);
    return ok;
}

/* ---- the model ---- */

/* every allocation of vil_model_init failing in turn: -1, the message, nothing kept */
static void test_init(void) {
    VilConfig c;
    tiny_config(&c);
    int failures = 0, bad = 0;
    for (long at = 0; at < 8; at++) {
        VilModel m;
        set_failing(at, SIZE_MAX);
        VilErrCapture cap;
        vil_error_capture(&cap);
        int rc = vil_model_init(&m, &c, &failing);
        vil_error_release(&cap);
        if (rc == 0) {
            T_CHECK(at >= 2, "vil_model_init makes its parameters and gradients (%ld allocations)", at);
            vil_model_free(&m);
            break;
        }
        failures++;
        int ok = rc == -1 && !m.be && !m.params && strstr(cap.msg, "test backend: no memory") &&
                 strstr(cap.msg, "parameters") && strstr(cap.msg, "cannot be allocated");
        if (!ok) printf("     allocation %ld: rc %d: %s\n", at, rc, cap.msg);
        bad += !ok;
        vil_model_free(&m); /* a no-op on what a failed init leaves */
    }
    T_CHECK(failures >= 2 && bad == 0, "vil_model_init with allocation 0..%d failing: -1 with the message, "
            "nothing kept (%d bad)", failures - 1, bad);
}

/* a batch whose activations the device lacks: -1 with what to lower; the model keeps its
 * weights, a smaller batch then runs, and the given-back activations leave it with none */
static void test_acts(void) {
    VilModel m;
    if (tiny_model(&m) != 0) {
        T_CHECK(0, "tiny model");
        return;
    }
    size_t b2 = vil_model_acts_bytes(&m, 2, 1), b4 = vil_model_acts_bytes(&m, 4, 1);
    set_failing(-1, (b2 + b4) / 2);
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_model_alloc_acts(&m, 4, 1);
    vil_error_release(&cap);
    T_CHECK(rc == -1 && vil_model_batch(&m) == 0 && strstr(cap.msg, "batch of 4") &&
                strstr(cap.msg, "cannot be allocated") && strstr(cap.msg, "lower"),
            "training activations of a batch of 4 that do not fit: -1, no activations, what to lower: %s", cap.msg);
    T_CHECK(vil_model_alloc_acts(&m, 2, 1) == 0 && vil_model_batch(&m) == 2 && forward_ok(&m),
            "then a batch of 2 allocates and runs");
    vil_error_capture(&cap);
    rc = vil_model_alloc_acts(&m, 4, 1);
    vil_error_release(&cap);
    T_CHECK(rc == -1 && vil_model_batch(&m) == 0 && vil_model_act(&m, "layers.0.mixer.u", &(VilActView){0}) != 0,
            "a batch of 4 again: -1, and the batch of 2's activations are given back (none left): rc %d", rc);
    vil_error_capture(&cap);
    rc = vil_model_alloc_acts(&m, 0, 0);
    vil_error_release(&cap);
    T_CHECK(rc == VIL_EUSAGE && strstr(cap.msg, "at least one image"), "a batch of 0: VIL_EUSAGE: %s", cap.msg);
    vil_model_free(&m);
}

/* the training state: each of its allocations failing leaves the model without any of it;
 * then it is made; another optimizer afterwards is the caller's misuse */
static void test_training(void) {
    VilModel m;
    if (tiny_model(&m) != 0) {
        T_CHECK(0, "tiny model");
        return;
    }
    set_failing(-1, SIZE_MAX);
    T_CHECK(vil_model_init_training(&m, &vil_optim_adamw, 1) == 0, "init_training on a working backend");
    long need = calls; /* AdamW's two moments, the EMA, the norm, the decay mask, the spans */
    vil_model_free(&m);
    int bad = 0;
    for (long at = 0; at < need; at++) {
        if (tiny_model(&m) != 0) break;
        set_failing(at, SIZE_MAX);
        VilErrCapture cap;
        vil_error_capture(&cap);
        int rc = vil_model_init_training(&m, &vil_optim_adamw, 1);
        vil_error_release(&cap);
        int ok = rc == -1 && !m.optim && !m.ema && !m.grad_norm && !m.decay_mask && !m.spans &&
                 !m.optim_state[0] && vil_model_train_state_count(&m) == 0 && strstr(cap.msg, "training state") &&
                 strstr(cap.msg, "cannot be allocated");
        if (!ok) printf("     allocation %ld of %ld: rc %d: %s\n", at, need, rc, cap.msg);
        bad += !ok;
        /* the same call works once memory is there again */
        set_failing(-1, SIZE_MAX);
        bad += vil_model_init_training(&m, &vil_optim_adamw, 1) != 0 || vil_model_train_state_count(&m) != 3;
        vil_model_free(&m);
    }
    T_CHECK(need >= 5 && bad == 0, "vil_model_init_training with each of its %ld allocations failing: -1, the "
            "model as it was, and the call works afterwards (%d bad)", need, bad);

    /* the optimizer step makes AdamW's buffers when nobody did: -1 when it cannot, no step */
    if (tiny_model(&m) != 0) return;
    T_CHECK(vil_model_alloc_acts(&m, 1, 1) == 0 && forward_ok(&m), "training activations");
    vil_model_zero_grad(&m);
    vil_model_backward(&m);
    VilOptimHyper h = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .wd = 0.05f};
    set_failing(0, SIZE_MAX);
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_model_optim_step(&m, &h), rc2 = vil_model_clip_grad(&m, 1.0f);
    vil_error_release(&cap);
    T_CHECK(rc == -1 && rc2 == -1 && vil_model_optim_steps(&m) == 0 && !m.optim && vil_model_grad_norm(&m) < 0,
            "an optimizer step and a clip that cannot make their buffers: -1, no step taken: %s", cap.msg);
    set_failing(-1, SIZE_MAX);
    T_CHECK(vil_model_optim_step(&m, &h) == 0 && vil_model_optim_steps(&m) == 1, "then the step runs");
    vil_error_capture(&cap);
    rc = vil_model_init_training(&m, &vil_optim_sgd, 0);
    vil_error_release(&cap);
    T_CHECK(rc == VIL_EUSAGE && strstr(cap.msg, "sgd") && m.optim == &vil_optim_adamw,
            "another optimizer after the first: VIL_EUSAGE, the first kept: %s", cap.msg);
    T_CHECK(vil_model_init_training(&m, &vil_optim_adamw, 1) == 0, "the EMA added");
    vil_model_use_ema(&m, 1);
    vil_error_capture(&cap);
    rc = vil_model_optim_step(&m, &h);
    vil_error_release(&cap);
    vil_model_use_ema(&m, 0);
    T_CHECK(rc == VIL_EUSAGE && vil_model_optim_steps(&m) == 1 && strstr(cap.msg, "EMA"),
            "a step with the EMA weights in use: VIL_EUSAGE, no step: %s", cap.msg);
    vil_model_free(&m);
}

/* an intervention for a batch of B (sigma 0.5, no drop) */
static int set_init(VilModel *m, VilInitMode mode, VilInitFit fit, int B) {
    return vil_model_set_init_state(m, &(VilInitSpec){.mode = mode, .sigma = 0.5f, .fit = fit, .fit_momentum = 0.99f}, B);
}

/* the initial states of a batch, the states along the sequence */
static void test_states(void) {
    VilModel m;
    if (tiny_model(&m) != 0) return;
    const VilInitMode modes[3] = {VIL_INIT_PASSING, VIL_INIT_FITTED, VIL_INIT_FITTED};
    const VilInitFit fits[3] = {VIL_INIT_FIT_ELEMENT, VIL_INIT_FIT_ELEMENT, VIL_INIT_FIT_SCALAR};
    for (int k = 0; k < 3; k++) {
        int bad = 0;
        for (long at = 0; at < 5; at++) {
            set_failing(at, SIZE_MAX);
            VilErrCapture cap;
            vil_error_capture(&cap);
            int rc = set_init(&m, modes[k], fits[k], 2);
            vil_error_release(&cap);
            if (rc == 0) break;
            bad += !(rc == -1 && vil_model_train_state_count(&m) == 0 && strstr(cap.msg, "cannot be allocated"));
        }
        set_failing(-1, SIZE_MAX);
        T_CHECK(bad == 0 && set_init(&m, modes[k], fits[k], 2) == 0 && vil_model_train_state_count(&m) > 0,
                "init_state %s (fit %s): the states that cannot be allocated: -1, the intervention off (%d bad); "
                "then it is set", vil_init_mode_names[modes[k]], vil_init_fit_names[fits[k]], bad);
        set_init(&m, VIL_INIT_ZERO, VIL_INIT_FIT_ELEMENT, 2);
    }
    /* passing's states of another batch than the one set: made at the forward, and refused there */
    T_CHECK(set_init(&m, VIL_INIT_PASSING, VIL_INIT_FIT_ELEMENT, 2) == 0 && vil_model_alloc_acts(&m, 1, 1) == 0,
            "passing set for a batch of 2, activations of 1");
    set_failing(0, SIZE_MAX);
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_model_sample_init_state(&m, 1, 0);
    vil_error_release(&cap);
    T_CHECK(rc == -1 && strstr(cap.msg, "batch of 1"), "the states of a new batch size that cannot be "
            "allocated: -1: %s", cap.msg);
    set_failing(-1, SIZE_MAX);
    T_CHECK(vil_model_sample_init_state(&m, 1, 0) == 0 && forward_ok(&m), "then they are made and the forward runs");
    /* the states along the sequence need two buffers of their own */
    set_init(&m, VIL_INIT_ZERO, VIL_INIT_FIT_ELEMENT, 1);
    int L, S;
    vil_model_seq_streams(&m, &L, &S);
    float *hsq = vil_malloc((size_t)L * sizeof(float)), *hT = vil_malloc((size_t)S * sizeof(float));
    T_CHECK(forward_ok(&m), "a forward on training activations");
    for (long at = 0; at < 2; at++) {
        set_failing(at, SIZE_MAX);
        vil_error_capture(&cap);
        rc = vil_model_seq_states(&m, 1, hsq, hT);
        vil_error_release(&cap);
        T_CHECK(rc == -1 && strstr(cap.msg, "cannot be allocated"), "the states along a stream with allocation %ld "
                "failing: -1: %s", at, cap.msg);
    }
    set_failing(-1, SIZE_MAX);
    T_CHECK(vil_model_seq_states(&m, 1, hsq, hT) == 0, "then they are measured");
    free(hsq);
    free(hT);
    vil_model_free(&m);
}

/* the input feed's second slot */
static void test_feed(void) {
    VilModel m;
    if (tiny_model(&m) != 0 || vil_model_alloc_acts(&m, 2, 1) != 0) {
        T_CHECK(0, "tiny model");
        return;
    }
    void *dev0[3];
    vil_model_input_buffers(&m, dev0);
    size_t bytes[2] = {2 * 16 * 16 * 3 * sizeof(float), 2 * 3 * sizeof(float)};
    for (long at = 0; at < 2; at++) {
        VilFeed f;
        set_failing(at, SIZE_MAX);
        VilErrCapture cap;
        vil_error_capture(&cap);
        int rc = vil_feed_init(&f, &failing, 2, dev0, bytes);
        vil_error_release(&cap);
        T_CHECK(rc == -1 && !f.be && strstr(cap.msg, "feed"), "the feed's input %ld failing: -1, nothing held: %s",
                at, cap.msg);
        vil_feed_free(&f);
    }
    VilFeed f;
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_feed_init(&f, &failing, 0, dev0, bytes);
    vil_error_release(&cap);
    T_CHECK(rc == VIL_EUSAGE, "a feed of 0 inputs: VIL_EUSAGE (was fatal): %s", cap.msg);
    vil_model_free(&m);
}

/* a checkpoint onto a device without the memory: the error names the file */
static void test_checkpoint(void) {
    VilModel m;
    if (tiny_model(&m) != 0) return;
    char path[128];
    snprintf(path, sizeof path, "%s/tiny.safetensors", dir);
    T_CHECK(vil_checkpoint_save(&m, path, 0, NULL, 0, NULL) == 0, "tiny model saved");
    vil_model_free(&m);
    VilCheckpointMeta meta;
    set_failing(0, SIZE_MAX);
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_checkpoint_load(path, &failing, NULL, &m, &meta);
    vil_error_release(&cap);
    T_CHECK(rc == -1 && strstr(cap.msg, path) && strstr(cap.msg, "cannot be allocated"),
            "a checkpoint whose parameters the device cannot hold: -1, the file named: %s", cap.msg);
    set_failing(-1, SIZE_MAX);
    T_CHECK(vil_checkpoint_load(path, &failing, NULL, &m, &meta) == 0, "and with the memory it loads");
    vil_model_free(&m);
    vil_checkpoint_meta_free(&meta);
    unlink(path);
}

/* ---- sizes from a file and an image, under an address-space limit ---- */

static int do_st_read(void *a) {
    VilSafetensors st;
    if (vil_st_read((const char *)a, &st) != 0) return 0;
    vil_st_free(&st);
    return 3;
}

/* A 2 TiB sparse file whose header describes it truthfully: one F32 tensor of 2^39 elements
 * passes every size check against the file, and its read cannot allocate it (the limit here;
 * no machine's memory; AddressSanitizer's 1 TiB maximum) */
static void test_sparse_claim(void) {
    char p[128], json[256], msg[1024];
    const uint64_t n = (uint64_t)1 << 41;
    snprintf(p, sizeof p, "%s/claim.safetensors", dir);
    int jl = snprintf(json, sizeof json, "{\"big\":{\"dtype\":\"F32\",\"shape\":[%llu],\"data_offsets\":[0,%llu]}}",
                      (unsigned long long)(n / 4), (unsigned long long)n);
    int hl = (jl + 7) / 8 * 8;
    memset(json + jl, ' ', (size_t)(hl - jl));
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int made = fd >= 0 && write(fd, len8, 8) == 8 && write(fd, json, (size_t)hl) == hl &&
               ftruncate(fd, (off_t)(8 + hl + n)) == 0;
    if (fd >= 0) close(fd);
    if (!made) { /* a file system without 2 TiB files */
        printf("     (skipped: a 2 TiB sparse file cannot be made here)\n");
        unlink(p);
        return;
    }
    int rc = t_limited(do_st_read, p, 256, 20, msg, sizeof msg);
    T_CHECK(rc == 0 && strstr(msg, p) && strstr(msg, "out of memory") && strstr(msg, "2199023255552"),
            "a sparse file whose header claims a 2 TiB tensor: an error naming the file and the size, not an "
            "exit (child %d): %s", rc, msg);
    unlink(p);
}

static int do_eval_huge(void *a) {
    (void)a;
    VilImage im;
    if (vil_image_alloc(&im, 8, 8, 3) != 0) return 4;
    memset(im.px, 7, 8 * 8 * 3);
    float out[16]; /* never written: the crop's buffer is refused first */
    int rc = vil_transform_eval(&im, 20000, 0.875f, VIL_IMAGENET_MEAN, VIL_IMAGENET_STD, out);
    vil_image_free(&im);
    return rc == 0 ? 3 : 0;
}

/* the evaluation transform of an image to a size whose buffers (1.2 GB) exceed the limit */
static void test_eval_transform(void) {
    if (T_ASAN) { /* its allocator would give the 1.2 GB: nothing to refuse */
        printf("     (skipped under ASan: the evaluation transform's refusal needs the address-space limit)\n");
        return;
    }
    char msg[1024];
    int rc = t_limited(do_eval_huge, NULL, 256, 20, msg, sizeof msg);
    T_CHECK(rc == 0 && strstr(msg, "out of memory") && strstr(msg, "20000"),
            "an 8x8 image to 20000 px under 256 MB: an error, not an exit (child %d): %s", rc, msg);
}

int main(void) {
    failing = vil_backend_cpu;
    failing.alloc = failing_alloc;
    snprintf(dir, sizeof dir, "/tmp/vil_test_nomem.XXXXXX");
    if (!mkdtemp(dir)) {
        printf("FAIL cannot create a temporary directory\n");
        return 1;
    }
    test_init();
    test_acts();
    test_training();
    test_states();
    test_feed();
    test_checkpoint();
    test_sparse_claim();
    test_eval_transform();
    rmdir(dir);
    return t_finish();
}
