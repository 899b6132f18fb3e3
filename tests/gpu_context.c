/* gpu_context.c: two CUDA device contexts in one process (vil_backend_open), each with its own
 * stream, handles, scratch, feed slots and allocation count. The same model on both, stepped
 * interleaved from one thread and then concurrently from two threads (one context each: what a
 * process per GPU does with its own device), must give the same bits as a model on the default
 * backend stepped alone; each context's peak counts only its own allocations; a device index
 * that does not exist is refused with an error. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "model_testing.h"
#include "testing.h"
#include "train/train.h"
#include "vil/dist.h"
#include "vil/backend.h"
#include "vil/common.h"
#include "vil/model.h"

/* the CUDA backend: vil_backend_get("cuda") (the module, loaded by main) */
static const VilBackend *gpu;

enum { B = 3, STEPS = 3 };

static VilConfig cfg;
static float *p0;   /* (buf_len) the starting weights */
static float *img, *tg;

static void make_model(VilModel *m, const VilBackend *be) {
    T_CHECK(vil_model_init(m, &cfg, be) == 0, "model on %s", be->name);
    vil_model_set_params(m, p0);
    T_CHECK(vil_model_init_training(m, &vil_optim_adamw, 1) == 0, "vil_model_init_training(m, &vil_optim_adamw, 1)");
    T_CHECK(vil_model_alloc_acts(m, B, 1) == 0, "vil_model_alloc_acts(m, B, 1)");
    size_t ni = (size_t)B * cfg.in_chans * cfg.img_size * cfg.img_size;
    be->to_device(be, m->acts.img, img, ni * sizeof(float));
    be->to_device(be, m->acts.targets, tg, (size_t)B * cfg.num_classes * sizeof(float));
}

static const VilStepParams SP = {.hyper = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .wd = 0.05f},
                                 .clip_grad = 1.0f, .ema_decay = 0.9f};

/* the weights and the EMA after the steps, on the host */
static void weights(VilModel *m, float *w, float *ema) {
    vil_model_get_params(m, w);
    m->be->to_host(m->be, ema, m->ema, m->buf_len * sizeof(float));
}

static void *run_steps(void *arg) {
    VilModel *m = arg;
    for (int s = 0; s < STEPS; s++) vil_train_step(m, &SP);
    m->be->sync(m->be);
    return NULL;
}

int main(void) {
    char why[256];
    if (!vil_cuda_available(why, sizeof why)) {
        printf("no usable GPU: %s\n", why);
        T_CHECK(0, "gpu_context needs a CUDA device");
        return t_finish();
    }
    if (!(gpu = vil_backend_get("cuda"))) {
        T_CHECK(0, "the CUDA backend does not open");
        return t_finish();
    }
    vil_config_default(&cfg);
    cfg.img_size = 32, cfg.patch_size = 8, cfg.stride = 8, cfg.embed_dim = 48, cfg.depth = 2;
    cfg.num_classes = 10;
    T_CHECK(vil_config_finalize(&cfg) == 0, "config");
    VilRng rng;
    vil_rng_seed(&rng, 7);
    size_t ni = (size_t)B * cfg.in_chans * cfg.img_size * cfg.img_size;
    img = vil_malloc(ni * sizeof(float));
    tg = vil_calloc((size_t)B * cfg.num_classes, sizeof(float));
    for (size_t i = 0; i < ni; i++) img[i] = vil_rng_normal(&rng);
    for (int b = 0; b < B; b++) tg[b * cfg.num_classes + b] = 1.0f;

    /* the reference: the default backend alone */
    VilModel ref;
    T_CHECK(vil_model_init(&ref, &cfg, gpu) == 0, "reference model");
    vil_model_init_weights(&ref, 3);
    size_t n = ref.buf_len, bytes = n * sizeof(float);
    p0 = vil_malloc(bytes);
    t_perturbed_params(&ref, &rng, p0);
    vil_model_free(&ref);
    make_model(&ref, gpu);
    run_steps(&ref);
    float *w_ref = vil_malloc(bytes), *e_ref = vil_malloc(bytes), *w = vil_malloc(bytes), *e = vil_malloc(bytes);
    weights(&ref, w_ref, e_ref);
    vil_model_free(&ref);

    const VilBackend *be[2] = {vil_backend_open("cuda", 0), vil_backend_open("cuda", 0)};
    T_CHECK(be[0] && be[1] && be[0] != be[1] && be[0]->ctx != be[1]->ctx, "two contexts on device 0");
    if (!be[0] || !be[1]) return t_finish();
    T_CHECK(be[0]->device == 0 && be[1]->device == 0, "their device index");

    /* interleaved from one thread: every call binds its own context */
    VilModel m[2];
    make_model(&m[0], be[0]);
    size_t peak0 = be[0]->peak_bytes(be[0]);
    make_model(&m[1], be[1]);
    T_CHECK(be[0]->peak_bytes(be[0]) == peak0, "context 0's peak does not count context 1's memory");
    T_CHECK(be[1]->peak_bytes(be[1]) > 0 && be[1]->peak_bytes(be[1]) <= peak0 + peak0 / 8,
            "context 1's peak is its own model's (%zu vs %zu)", be[1]->peak_bytes(be[1]), peak0);
    for (int s = 0; s < STEPS; s++)
        for (int k = 0; k < 2; k++) vil_train_step(&m[k], &SP);
    for (int k = 0; k < 2; k++) {
        weights(&m[k], w, e);
        T_CHECK(memcmp(w, w_ref, bytes) == 0 && memcmp(e, e_ref, bytes) == 0,
                "interleaved steps, context %d: the weights and EMA of the model stepped alone", k);
        vil_model_free(&m[k]);
    }

    /* concurrently, one host thread per context */
    pthread_t th[2];
    for (int k = 0; k < 2; k++) make_model(&m[k], be[k]);
    for (int k = 0; k < 2; k++) T_CHECK(pthread_create(&th[k], NULL, run_steps, &m[k]) == 0, "thread %d", k);
    for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < 2; k++) {
        weights(&m[k], w, e);
        T_CHECK(memcmp(w, w_ref, bytes) == 0 && memcmp(e, e_ref, bytes) == 0,
                "concurrent steps, context %d: the weights and EMA of the model stepped alone", k);
        vil_model_free(&m[k]);
    }
    /* the NCCL path with one rank (a process group of one, as `mpirun -np 1` gives): the
     * all-reduce of a single rank is the identity, so the steps equal the plain ones bitwise */
    VilDist solo;
    vil_dist_single(&solo);
    T_CHECK(be[0]->dist_join(be[0], &solo) == 0, "NCCL communicator of one rank (dist_join)");
    make_model(&m[0], be[0]);
    for (int s = 0; s < STEPS; s++) {
        vil_train_micro(&m[0], &SP, 1, 1);
        vil_model_allreduce_grads(&m[0], &solo);
        vil_train_update(&m[0], &SP);
    }
    weights(&m[0], w, e);
    T_CHECK(memcmp(w, w_ref, bytes) == 0 && memcmp(e, e_ref, bytes) == 0,
            "steps through NCCL's all-reduce (1 rank): the weights and EMA of the plain steps");
    vil_model_free(&m[0]);
    /* the same with the all-reduce in 64 KiB buckets on the side stream during the backward */
    make_model(&m[0], be[0]);
    for (int s = 0; s < STEPS; s++) {
        vil_model_zero_grad(&m[0]);
        m[0].sync.dist = &solo;
        m[0].sync.bucket_bytes = 1 << 16;
        vil_model_forward(&m[0], 1);
        vil_model_backward(&m[0]);
        vil_train_update(&m[0], &SP); /* waits for the buckets */
    }
    weights(&m[0], w, e);
    T_CHECK(memcmp(w, w_ref, bytes) == 0 && memcmp(e, e_ref, bytes) == 0,
            "steps with the bucketed all-reduce overlapping the backward (1 rank): the weights and "
            "EMA of the plain steps");
    vil_model_free(&m[0]);
    for (int k = 0; k < 2; k++) vil_backend_close(be[k]);

    fprintf(stderr, "(an expected error follows)\n");
    T_CHECK(vil_backend_open("cuda", 4096) == NULL, "a device index past the GPUs is refused");

    /* the backend's alloc past the GPU's memory: NULL and a message with the bytes asked and
     * free, no exit; the backend goes on working (the failed cudaMalloc's error is cleared, or
     * the next launch check would report it) */
    VilErrCapture cap;
    vil_error_capture(&cap);
    void *huge = gpu->alloc(gpu, (size_t)1 << 50);
    vil_error_release(&cap);
    T_CHECK(huge == NULL && strstr(cap.msg, "1125899906842624 bytes") && strstr(cap.msg, "free of"),
            "an alloc of 1 PiB returns NULL with the bytes asked and free: %s", cap.msg);
    make_model(&ref, gpu);
    run_steps(&ref);
    weights(&ref, w, e);
    T_CHECK(memcmp(w, w_ref, bytes) == 0, "after the failed alloc the backend runs the same steps");
    vil_model_free(&ref);
    free(p0), free(img), free(tg), free(w_ref), free(e_ref), free(w), free(e);
    return t_finish();
}
