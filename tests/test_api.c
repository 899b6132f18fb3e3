/* test_api.c: libvil's public API (include/vil.h) on the CPU, every function and its error
 * paths, against vil's internal path for the same work (checkpoint_load + the model's forward,
 * the eval transform of a decoded image, the parameter table, the backend's scan op, the model's
 * states) and hand-computed softmax for top-k: the API must add nothing and lose nothing. Then
 * two contexts in two threads against the single-thread results, and vil_last_error per thread. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/vil.h"

#include "data_corpus.h"
#include "model_testing.h"
#include "testing.h"
#include "data/image.h"
#include "data/transform.h"
#include "eval/eval.h"
#include "eval/states.h"
#include "formats/checkpoint.h"

static char *dir;
static char vil_path[4096], vim_path[4096], gray_path[4096], jpg_path[4096];

static char *names3[] = {"cat", "dog", "bird"};

/* a tiny model (RGB 16 px or gray), moved off its init, saved with class names */
static void make_model(const char *arch, int chans, const char *path) {
    T_CHECK(t_write_tiny(arch, chans, 11, path, 5, names3) == 0, "%s checkpoint written", arch);
}

/* deterministic images (B, C, S, S) */
static float *images(int B, int C, int S, uint64_t seed) {
    float *x = malloc((size_t)B * C * S * S * sizeof(float));
    VilRng r;
    vil_rng_seed(&r, seed);
    for (size_t i = 0; i < (size_t)B * C * S * S; i++) x[i] = vil_rng_normal(&r);
    return x;
}

/* the internal path's logits for the same file and images */
static void ref_logits(const char *path, const float *img, int B, float *logits) {
    VilModel m;
    VilCheckpointMeta meta = {0};
    if (vil_checkpoint_load(path, &vil_backend_cpu, NULL, &m, &meta) != 0) return;
    vil_model_alloc_acts(&m, B, 0);
    vil_model_upload_inputs(&m, img, NULL);
    vil_model_forward(&m, 0);
    vil_model_logits(&m, logits);
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&m);
}

static int same(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

static void test_version_ctx(void) {
    T_CHECK(vil_version_number() == VIL_VERSION_NUMBER, "version %d", vil_version_number());
    T_CHECK(strncmp(vil_version_text(), "vil 0.9.0", 9) == 0, "version text %s", vil_version_text());
    vil_ctx *c = NULL;
    T_CHECK(vil_ctx_new("cpu", 0, 1, &c) == VIL_OK && c, "cpu context");
    T_CHECK(c && strcmp(vil_ctx_device(c), "cpu") == 0 && vil_ctx_device_name(c)[0], "device %s",
            c ? vil_ctx_device_name(c) : "");
    T_CHECK(vil_ctx_sync(c) == VIL_OK && vil_ctx_sync(NULL) == VIL_ERR_ARG, "sync");
    T_CHECK(vil_ctx_free(c) == VIL_OK && vil_ctx_free(NULL) == VIL_OK, "free");
    c = (vil_ctx *)1;
    T_CHECK(vil_ctx_new("tpu", 0, 0, &c) == VIL_ERR_ARG && c == NULL && strstr(vil_last_error(), "tpu"),
            "unknown device: %s", vil_last_error());
    T_CHECK(vil_ctx_new("cpu", 0, -1, &c) == VIL_ERR_ARG && strstr(vil_last_error(), "threads"), "threads -1: %s",
            vil_last_error());
    T_CHECK(vil_ctx_new("cpu", 0, 0, NULL) == VIL_ERR_ARG, "out NULL");
    /* a module path that holds no module: cuda cannot be had, and says so */
    char *old = getenv("VIL_BACKEND_PATH") ? strdup(getenv("VIL_BACKEND_PATH")) : NULL;
    setenv("VIL_BACKEND_PATH", "/nonexistent/libvil-cuda.so", 1);
    int rc = vil_ctx_new("cuda", 0, 0, &c);
    T_CHECK(rc == VIL_ERR && c == NULL && strlen(vil_last_error()) > 10, "cuda without a module: %d %s", rc,
            vil_last_error());
    if (old) setenv("VIL_BACKEND_PATH", old, 1), free(old);
    else unsetenv("VIL_BACKEND_PATH");
    T_CHECK(vil_ctx_new("auto", 0, 2, &c) == VIL_OK && c, "auto: %s", c ? vil_ctx_device(c) : vil_last_error());
    vil_ctx_free(c);
}

static void test_load_info(vil_ctx *ctx) {
    vil_classifier *m = NULL;
    T_CHECK(vil_classifier_load(ctx, vil_path, NULL, &m) == VIL_OK && m, "load: %s", vil_last_error());
    if (!m) return;
    vil_classifier_info in;
    T_CHECK(vil_classifier_get_info(m, &in) == VIL_OK, "info");
    T_CHECK(strcmp(in.family, "vil") == 0 && strcmp(in.recurrence, "longhorn") == 0 && in.n_classes == 3 &&
                in.img_size == 16 && in.trained_img_size == 16 && in.in_chans == 3 && in.depth == 2 &&
                in.d_state == 4 && in.d_inner == 16 && in.seq_len == 50 && in.cls_pos == 24 && in.step == 5 &&
                in.has_class_names == 1,
            "facts: %s %s classes %d size %d seq %d cls %d step %lld", in.family, in.recurrence, in.n_classes,
            in.img_size, in.seq_len, in.cls_pos, in.step);
    VilModel ref;
    VilCheckpointMeta meta = {0};
    vil_checkpoint_load(vil_path, &vil_backend_cpu, NULL, &ref, &meta);
    T_CHECK(in.n_params == (long long)ref.param_count, "parameters %lld = %zu", in.n_params, ref.param_count);
    T_CHECK(in.crop_pct == 0.875f && in.mean[0] == VIL_IMAGENET_MEAN[0] && in.std[2] == VIL_IMAGENET_STD[2],
            "transform defaults: crop %g", in.crop_pct);
    T_CHECK(strcmp(vil_classifier_class_name(m, 1), "dog") == 0 && !vil_classifier_class_name(m, 3) &&
                !vil_classifier_class_name(m, -1),
            "class names");
    T_CHECK(vil_classifier_input_size(m) == 3 * 16 * 16, "input size");
    T_CHECK(vil_classifier_get_info(NULL, &in) == VIL_ERR_ARG, "info of NULL");
    /* the parameter table */
    int n = vil_classifier_param_count(m), ok = n == ref.n_tensors;
    for (int i = 0; ok && i < n; i++) {
        vil_param_info pi;
        ok = vil_classifier_param_get_info(m, i, &pi) == VIL_OK && strcmp(pi.name, ref.info[i].name) == 0 &&
             pi.ndim == ref.info[i].ndim && pi.numel == ref.info[i].numel && pi.shape[0] == ref.info[i].shape[0];
    }
    T_CHECK(ok, "param table: %d tensors as the model's %d", n, ref.n_tensors);
    vil_param_info pi;
    T_CHECK(vil_classifier_param_get_info(m, n, &pi) == VIL_ERR_ARG, "param info out of range");
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&ref);
    /* a second size interpolates; a bad size is the caller's */
    vil_classifier *m2 = NULL;
    vil_load_opts o = {.img_size = 24};
    T_CHECK(vil_classifier_load(ctx, vil_path, &o, &m2) == VIL_OK && vil_classifier_get_info(m2, &in) == 0 &&
                in.img_size == 24 && in.trained_img_size == 16 && in.seq_len == 11 * 11 + 1,
            "at 24 px: %d tokens, trained at %d", in.seq_len, in.trained_img_size);
    vil_classifier_free(m2);
    o.img_size = -3;
    T_CHECK(vil_classifier_load(ctx, vil_path, &o, &m2) == VIL_ERR_ARG && !m2, "size -3: %s", vil_last_error());
    T_CHECK(vil_ctx_free(ctx) == VIL_ERR_ARG && strstr(vil_last_error(), "model"), "ctx_free with a model: %s",
            vil_last_error());
    vil_classifier_free(m);
    /* files that are not models */
    char p[4200];
    snprintf(p, sizeof p, "%s/none.safetensors", dir);
    T_CHECK(vil_classifier_load(ctx, p, NULL, &m) == VIL_ERR && !m && strstr(vil_last_error(), "none.safetensors"),
            "missing file: %s", vil_last_error());
    T_CHECK(vil_classifier_load(ctx, jpg_path, NULL, &m) == VIL_ERR && !m, "a JPEG: %s", vil_last_error());
    T_CHECK(vil_classifier_load(NULL, vil_path, NULL, &m) == VIL_ERR_ARG, "ctx NULL");
    /* a run folder: its last.safetensors; --ema without one */
    snprintf(p, sizeof p, "%s/run", dir);
    corpus_mkdir("%s/%s", dir, "run");
    char q[4300];
    snprintf(q, sizeof q, "%s/last.safetensors", p);
    T_CHECK(vil_classifier_load(ctx, p, NULL, &m) == VIL_ERR && strstr(vil_last_error(), "last.safetensors"),
            "empty run folder: %s", vil_last_error());
    size_t len;
    unsigned char *bytes = vil_read_file(vil_path, &len);
    corpus_write(q, bytes, len);
    free(bytes);
    T_CHECK(vil_classifier_load(ctx, p, NULL, &m) == VIL_OK, "run folder: %s", vil_last_error());
    vil_classifier_free(m);
    o = (vil_load_opts){.ema = 1};
    T_CHECK(vil_classifier_load(ctx, p, &o, &m) == VIL_ERR && strstr(vil_last_error(), "ema"), "no EMA: %s",
            vil_last_error());
}

static void test_transform(vil_ctx *ctx) {
    vil_classifier *m = NULL, *g = NULL;
    vil_classifier_load(ctx, vil_path, NULL, &m);
    vil_classifier_load(ctx, gray_path, NULL, &g);
    if (!m || !g) { T_CHECK(0, "models for the transform"); return; }
    VilImage im, rgb;
    vil_image_load(jpg_path, 3, &im);
    vil_image_load(jpg_path, 3, &rgb);
    size_t n = vil_classifier_input_size(m);
    float *a = calloc(n, sizeof(float)), *b = calloc(n, sizeof(float));
    vil_transform_eval(&im, 16, 0.875f, VIL_IMAGENET_MEAN, VIL_IMAGENET_STD, b);
    T_CHECK(vil_classifier_transform_file(m, jpg_path, 0, a) == VIL_OK && same(a, b, n), "file = internal");
    T_CHECK(vil_classifier_transform_pixels(m, rgb.px, rgb.w, rgb.h, 3, 0, 0, a) == VIL_OK && same(a, b, n),
            "pixels = file");
    /* rows with a stride */
    size_t st = (size_t)rgb.w * 3 + 5;
    unsigned char *wide = calloc((size_t)rgb.h * st, 1);
    for (int y = 0; y < rgb.h; y++) memcpy(wide + y * st, rgb.px + (size_t)y * rgb.w * 3, (size_t)rgb.w * 3);
    memset(a, 0, n * sizeof(float));
    T_CHECK(vil_classifier_transform_pixels(m, wide, rgb.w, rgb.h, 3, st, 0, a) == VIL_OK && same(a, b, n),
            "pixels with a row stride");
    vil_transform_eval(&im, 16, 0.5f, VIL_IMAGENET_MEAN, VIL_IMAGENET_STD, b);
    T_CHECK(vil_classifier_transform_file(m, jpg_path, 0.5f, a) == VIL_OK && same(a, b, n), "crop 0.5");
    /* a gray model: RGB pixels converted as PIL's L; gray pixels repeated for an RGB model */
    VilImage gi;
    vil_image_alloc(&gi, rgb.w, rgb.h, 1);
    vil_rgb_to_gray(gi.px, rgb.px, (size_t)rgb.w * rgb.h);
    size_t ng = vil_classifier_input_size(g);
    float mean1 = 0.449f, std1 = 0.226f;
    vil_classifier_info gin;
    vil_classifier_get_info(g, &gin);
    vil_transform_eval(&gi, 16, 0.875f, gin.mean, gin.std, b);
    T_CHECK(ng == 256 && vil_classifier_transform_pixels(g, rgb.px, rgb.w, rgb.h, 3, 0, 0, a) == VIL_OK &&
                same(a, b, ng) && fabsf(gin.mean[0] - mean1) < 1e-6f && fabsf(gin.std[0] - std1) < 1e-6f,
            "gray model from RGB pixels (mean %g)", gin.mean[0]);
    VilImage g3;
    vil_image_alloc(&g3, rgb.w, rgb.h, 3);
    for (size_t i = 0; i < (size_t)rgb.w * rgb.h; i++) g3.px[3 * i] = g3.px[3 * i + 1] = g3.px[3 * i + 2] = gi.px[i];
    vil_transform_eval(&g3, 16, 0.875f, VIL_IMAGENET_MEAN, VIL_IMAGENET_STD, b);
    T_CHECK(vil_classifier_transform_pixels(m, gi.px, gi.w, gi.h, 1, 0, 0, a) == VIL_OK && same(a, b, n),
            "RGB model from gray pixels");
    /* the same without a model: the model's transform, and its checks */
    vil_transform t;
    T_CHECK(vil_classifier_get_transform(m, &t) == VIL_OK && t.img_size == 16 && t.channels == 3 && t.crop_pct == 0.875f,
            "the model's transform");
    t.crop_pct = 0.5f;
    vil_transform_eval(&im, 16, 0.5f, VIL_IMAGENET_MEAN, VIL_IMAGENET_STD, b);
    memset(a, 0, n * sizeof(float));
    T_CHECK(vil_transform_file(&t, jpg_path, a) == VIL_OK && same(a, b, n), "model-less file transform");
    memset(a, 0, n * sizeof(float));
    T_CHECK(vil_transform_pixels(&t, rgb.px, rgb.w, rgb.h, 3, 0, a) == VIL_OK && same(a, b, n),
            "model-less pixels transform");
    vil_transform bad = t;
    bad.channels = 2;
    T_CHECK(vil_transform_file(&bad, jpg_path, a) == VIL_ERR_ARG, "transform of 2 channels");
    bad = t, bad.crop_pct = 0;
    T_CHECK(vil_transform_file(&bad, jpg_path, a) == VIL_ERR_ARG, "transform crop 0");
    bad = t, bad.std[1] = 0;
    T_CHECK(vil_transform_pixels(&bad, rgb.px, rgb.w, rgb.h, 3, 0, a) == VIL_ERR_ARG && strstr(vil_last_error(), "std"),
            "transform std 0: %s", vil_last_error());
    bad = t, bad.img_size = 0;
    T_CHECK(vil_transform_file(&bad, jpg_path, a) == VIL_ERR_ARG && vil_transform_file(NULL, jpg_path, a) == VIL_ERR_ARG,
            "transform size 0, NULL");
    T_CHECK(vil_classifier_get_transform(NULL, &t) == VIL_ERR_ARG, "get_transform of NULL");
    /* misuse and bad files */
    T_CHECK(vil_classifier_transform_file(m, jpg_path, 1.5f, a) == VIL_ERR_ARG && strstr(vil_last_error(), "crop"),
            "crop 1.5: %s", vil_last_error());
    T_CHECK(vil_classifier_transform_pixels(m, rgb.px, rgb.w, rgb.h, 2, 0, 0, a) == VIL_ERR_ARG, "2 channels");
    T_CHECK(vil_classifier_transform_pixels(m, rgb.px, rgb.w, rgb.h, 3, 4, 0, a) == VIL_ERR_ARG, "stride 4");
    T_CHECK(vil_classifier_transform_pixels(m, rgb.px, 0, rgb.h, 3, 0, 0, a) == VIL_ERR_ARG, "width 0");
    T_CHECK(vil_classifier_transform_pixels(m, rgb.px, 1 << 30, 1 << 30, 3, 0, 0, a) == VIL_ERR,
            "2^60 pixels: %s", vil_last_error());
    char p[4200];
    snprintf(p, sizeof p, "%s/none.jpg", dir);
    T_CHECK(vil_classifier_transform_file(m, p, 0, a) == VIL_ERR && strstr(vil_last_error(), "none.jpg"),
            "missing image: %s", vil_last_error());
    T_CHECK(vil_classifier_transform_file(m, vil_path, 0, a) == VIL_ERR, "a checkpoint as an image: %s",
            vil_last_error());
    T_CHECK(vil_classifier_transform_file(m, NULL, 0, a) == VIL_ERR_ARG, "path NULL");
    free(wide);
    vil_image_free(&gi);
    vil_image_free(&g3);
    vil_image_free(&im);
    vil_image_free(&rgb);
    free(a);
    free(b);
    vil_classifier_free(m);
    vil_classifier_free(g);
}

static void test_forward(vil_ctx *ctx, const char *path, const char *what) {
    vil_classifier *m = NULL;
    if (vil_classifier_load(ctx, path, NULL, &m) != VIL_OK) { T_CHECK(0, "%s: load", what); return; }
    int B = 3;
    float *x = images(B, 3, 16, 5), got[9], want[9], one[3];
    ref_logits(path, x, B, want);
    T_CHECK(vil_classifier_forward(m, x, B, got) == VIL_OK && same(got, want, 9), "%s: forward = internal", what);
    T_CHECK(vil_classifier_forward(m, x, B, got) == VIL_OK && same(got, want, 9), "%s: again, same acts", what);
    T_CHECK(vil_classifier_forward_device(m, x, B, got, NULL) == VIL_OK && same(got, want, 9),
            "%s: forward_device on the CPU", what);
    double err = 0;
    for (int b = 0; b < B; b++) {
        vil_classifier_forward(m, x + (size_t)b * 768, 1, one);
        err = fmax(err, rel_l2(one, want + 3 * b, 1, 3, 3));
    }
    T_CLOSE("batch of 1 against batch of 3", err, 1e-5);
    T_CHECK(vil_classifier_forward(m, x, 0, got) == VIL_ERR_ARG && vil_classifier_forward(m, NULL, 1, got) ==
                VIL_ERR_ARG && vil_classifier_forward(NULL, x, 1, got) == VIL_ERR_ARG &&
                vil_classifier_forward(m, x, 5000, got) == VIL_ERR_ARG,
            "%s: forward misuse", what);
    /* a batch past the machine's memory is an error, and the model still runs */
    vil_classifier *big = NULL;
    vil_load_opts bo = {.img_size = 2048};
    float *bx = calloc((size_t)3 * 2048 * 2048, sizeof(float)), bl[3];
    T_CHECK(vil_classifier_load(ctx, path, &bo, &big) == VIL_OK, "%s at 2048 px: %s", what, vil_last_error());
    T_CHECK(big && vil_classifier_forward(big, bx, 4096, bl) == VIL_ERR && strlen(vil_last_error()) > 20,
            "%s: 4096 images of 2048 px: %s", what, vil_last_error());
    vil_classifier_free(big);
    free(bx);
    T_CHECK(vil_classifier_forward(m, x, B, got) == VIL_OK && same(got, want, 9), "%s: the other model unharmed", what);
    /* states: the API's against the model's own for the same images */
    int L, S, ns = vil_classifier_stream_count(m, &L, &S);
    T_CHECK(ns == 4 && L == 50 && S == 4 * 16, "%s: %d streams of %d steps, state %d", what, ns, L, S);
    float *hsq = malloc((size_t)B * L * sizeof(float)), *hT = malloc((size_t)B * S * sizeof(float));
    float *rhsq = malloc((size_t)B * L * sizeof(float)), *rhT = malloc((size_t)B * S * sizeof(float));
    T_CHECK(vil_classifier_states_get(m, 0, hsq, hT) == VIL_ERR_ARG && strstr(vil_last_error(), "states_run"),
            "%s: states before a run: %s", what, vil_last_error());
    T_CHECK(vil_classifier_states_run(m, x, B) == VIL_OK, "%s: states run: %s", what, vil_last_error());
    VilModel r;
    VilCheckpointMeta meta = {0};
    vil_checkpoint_load(path, &vil_backend_cpu, NULL, &r, &meta);
    vil_states_prepare(&r, B);
    vil_model_upload_inputs(&r, x, NULL);
    vil_model_forward(&r, 0);
    int ok = 1;
    for (int s = 0; s < ns; s++) {
        ok &= vil_classifier_states_get(m, s, hsq, hT) == VIL_OK && vil_model_seq_states(&r, s, rhsq, rhT) == 0 &&
              same(hsq, rhsq, (size_t)B * L) && same(hT, rhT, (size_t)B * S);
    }
    T_CHECK(ok, "%s: every stream's states = the model's", what);
    T_CHECK(vil_classifier_states_get(m, ns, hsq, NULL) == VIL_ERR_ARG, "%s: stream out of range", what);
    T_CHECK(vil_classifier_forward(m, x, B, got) == VIL_OK && same(got, want, 9) &&
                vil_classifier_states_get(m, 0, hsq, NULL) == VIL_ERR_ARG,
            "%s: a forward after the states: the same logits, the states gone", what);
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&r);
    free(hsq), free(hT), free(rhsq), free(rhT), free(x);
    vil_classifier_free(m);
}

static void test_params_save(vil_ctx *ctx) {
    vil_classifier *m = NULL;
    if (vil_classifier_load(ctx, vil_path, NULL, &m) != VIL_OK) { T_CHECK(0, "load"); return; }
    VilModel r;
    VilCheckpointMeta meta = {0};
    vil_checkpoint_load(vil_path, &vil_backend_cpu, NULL, &r, &meta);
    float *host = malloc(r.buf_len * sizeof(float));
    vil_model_get_params(&r, host);
    /* every tensor read = the model's, padding left out (x_proj has a gap, dt_proj a row stride) */
    int ok = 1;
    for (int i = 0; i < r.n_tensors; i++) {
        const VilParamInfo *p = &r.info[i];
        float *a = malloc(p->numel * sizeof(float)), *b = malloc(p->numel * sizeof(float));
        vil_param_load(p, b, host + p->offset);
        ok &= vil_classifier_param_read(m, p->name, a, p->numel, 1) == VIL_OK && same(a, b, p->numel);
        ok &= vil_classifier_param_read(m, p->name, a, p->numel, 0) == VIL_OK && same(a, b, p->numel);
        free(a), free(b);
    }
    T_CHECK(ok, "every tensor read as the model holds it");
    /* a write: what the next forward reads, the same as the model given the same values */
    const char *key = "layers.1.mixer.x_proj_b.weight";
    const VilParamInfo *p = vil_model_find_param(&r, key);
    float *w = malloc(p->numel * sizeof(float)), *back = malloc(p->numel * sizeof(float));
    for (size_t i = 0; i < p->numel; i++) w[i] = 0.01f * (float)((i * 7) % 13) - 0.05f;
    T_CHECK(vil_classifier_param_write(m, key, w, p->numel, 1) == VIL_OK &&
                vil_classifier_param_read(m, key, back, p->numel, 1) == VIL_OK && same(w, back, p->numel),
            "write then read %s", key);
    vil_param_store(p, host + p->offset, w);
    vil_model_set_params(&r, host);
    float *x = images(2, 3, 16, 9), got[6], want[6];
    vil_model_alloc_acts(&r, 2, 0);
    vil_model_upload_inputs(&r, x, NULL);
    vil_model_forward(&r, 0);
    vil_model_logits(&r, want);
    T_CHECK(vil_classifier_forward(m, x, 2, got) == VIL_OK && same(got, want, 6), "forward after the write");
    T_CHECK(vil_classifier_param_write(m, "no.such", w, 1, 1) == VIL_ERR_ARG && strstr(vil_last_error(), "no.such"),
            "unknown tensor: %s", vil_last_error());
    T_CHECK(vil_classifier_param_read(m, key, back, p->numel - 1, 1) == VIL_ERR_ARG &&
                strstr(vil_last_error(), "elements"),
            "wrong count: %s", vil_last_error());
    T_CHECK(vil_classifier_param_read(m, key, NULL, p->numel, 1) == VIL_ERR_ARG, "dst NULL");
    /* saved in both formats, read back: the same logits and facts */
    const char *ext[] = {"safetensors", "pth"};
    for (int k = 0; k < 2; k++) {
        char out[4200];
        snprintf(out, sizeof out, "%s/saved.%s", dir, ext[k]);
        vil_classifier *s = NULL;
        float again[6];
        vil_classifier_info in;
        T_CHECK(vil_classifier_save(m, out) == VIL_OK && vil_classifier_load(ctx, out, NULL, &s) == VIL_OK &&
                    vil_classifier_forward(s, x, 2, again) == VIL_OK && same(again, want, 6) &&
                    vil_classifier_get_info(s, &in) == VIL_OK && in.has_class_names &&
                    strcmp(vil_classifier_class_name(s, 2), "bird") == 0,
                "saved as .%s and read back: %s", ext[k], vil_last_error());
        vil_classifier_free(s);
    }
    char out[4200];
    snprintf(out, sizeof out, "%s/saved.bin", dir);
    T_CHECK(vil_classifier_save(m, out) == VIL_ERR_ARG && access(out, F_OK) != 0, "save as .bin: %s",
            vil_last_error());
    snprintf(out, sizeof out, "%s/no/such/dir/m.safetensors", dir);
    T_CHECK(vil_classifier_save(m, out) == VIL_ERR, "save into a missing folder: %s", vil_last_error());
    free(x), free(w), free(back), free(host);
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&r);
    vil_classifier_free(m);
}

static void test_topk(void) {
    float l[4] = {1.0f, 3.0f, 2.0f, 3.0f};
    int idx[4];
    double p[4], z = exp(1.0) + 2 * exp(3.0) + exp(2.0);
    T_CHECK(vil_topk(l, 4, 3, idx, p) == VIL_OK && idx[0] == 1 && idx[1] == 3 && idx[2] == 2, "order, ties low");
    T_CLOSE("top-1 probability", fabs(p[0] - exp(3.0) / z), 1e-12);
    T_CLOSE("top-3 probability", fabs(p[2] - exp(2.0) / z), 1e-12);
    T_CHECK(vil_topk(l, 4, 9, idx, p) == VIL_OK && idx[3] == 0, "k past C is clamped");
    T_CHECK(vil_topk(l, 0, 1, idx, p) == VIL_ERR_ARG && vil_topk(NULL, 4, 1, idx, p) == VIL_ERR_ARG, "misuse");
}

/* random scan inputs in the model's layout (dt_ld columns before k, a column after q) */
typedef struct {
    int B, L, E, N, dt_ld, ld;
    float *u[2], *dl[2], *xd[2], *z, D[2][16], A[2][64], *out, *dout, *du[2], *dd[2], *dx[2], *dz, dD[2][16],
        dA[2][64], dsum[2][16];
} Scan;

static float *rnd(size_t n, VilRng *r, float scale, float shift) {
    float *v = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = shift + scale * vil_rng_uniform(r);
    return v;
}

static void scan_make(Scan *s, int dt_ld) {
    VilRng r;
    vil_rng_seed(&r, 3);
    s->B = 2, s->L = 7, s->E = 16, s->N = 4, s->dt_ld = dt_ld, s->ld = dt_ld + 2 * s->N + 1;
    size_t n = (size_t)s->B * s->L * s->E, nx = (size_t)s->B * s->L * s->ld;
    for (int j = 0; j < 2; j++) {
        s->u[j] = rnd(n, &r, 2, -1), s->dl[j] = rnd(n, &r, 0.5f, 0.05f), s->xd[j] = rnd(nx, &r, 2, -1);
        s->du[j] = calloc(n, 4), s->dd[j] = calloc(n, 4), s->dx[j] = calloc(nx, 4);
        for (int e = 0; e < 16; e++) s->D[j][e] = 0.5f + 0.01f * e, s->dD[j][e] = 0, s->dsum[j][e] = 0;
        for (int e = 0; e < 64; e++) s->A[j][e] = 0.1f * (e % 4), s->dA[j][e] = 0;
    }
    s->z = rnd(n, &r, 2, -1), s->dout = rnd(n, &r, 2, -1), s->out = calloc(n, 4), s->dz = calloc(n, 4);
}

static void scan_free(Scan *s) {
    for (int j = 0; j < 2; j++) free(s->u[j]), free(s->dl[j]), free(s->xd[j]), free(s->du[j]), free(s->dd[j]), free(s->dx[j]);
    free(s->z), free(s->dout), free(s->out), free(s->dz);
}

static vil_scan_fwd scan_fwd(Scan *s, vil_scan_recurrence rec) {
    vil_scan_fwd f = {.rec = rec, .B = s->B, .L = s->L, .E = s->E, .N = s->N, .dt_ld = s->dt_ld, .xdbl_ld = s->ld,
                      .ldz = s->E, .z = s->z, .out = s->out};
    for (int j = 0; j < 2; j++) f.u[j] = s->u[j], f.delta[j] = s->dl[j], f.xdbl[j] = s->xd[j], f.D[j] = s->D[j],
                                f.A_log[j] = s->A[j];
    return f;
}

static vil_scan_bwd scan_bwd(Scan *s, vil_scan_recurrence rec) {
    vil_scan_bwd b = {.rec = rec, .B = s->B, .L = s->L, .E = s->E, .N = s->N, .dt_ld = s->dt_ld, .xdbl_ld = s->ld,
                      .ldz = s->E, .z = s->z, .dout = s->dout, .dz = s->dz};
    for (int j = 0; j < 2; j++) {
        b.u[j] = s->u[j], b.delta[j] = s->dl[j], b.xdbl[j] = s->xd[j], b.D[j] = s->D[j], b.A_log[j] = s->A[j];
        b.du[j] = s->du[j], b.ddelta[j] = s->dd[j], b.dxdbl[j] = s->dx[j], b.dD[j] = s->dD[j], b.dA_log[j] = s->dA[j];
        b.ddelta_sum[j] = s->dsum[j];
    }
    return b;
}

static void test_scans(vil_ctx *ctx) {
    for (int rec = 0; rec < 2; rec++) {
        const char *nm = rec ? "mamba" : "longhorn";
        Scan s, t;
        scan_make(&s, 3);
        scan_make(&t, 3);
        vil_scan_fwd f = scan_fwd(&s, rec);
        T_CHECK(vil_scan_forward(ctx, &f, NULL) == VIL_OK, "%s forward", nm);
        /* the backend op itself on the same tensors */
        VilScanFwd o = {.rec = rec, .out = t.out, .z = t.z, .B = t.B, .L = t.L, .E = t.E, .N = t.N, .dt_ld = 3,
                        .xdbl_ld = t.ld, .ldz = t.E};
        for (int j = 0; j < 2; j++) o.u[j] = t.u[j], o.delta[j] = t.dl[j], o.xdbl[j] = t.xd[j], o.D[j] = t.D[j],
                                    o.A_log[j] = rec ? t.A[j] : NULL;
        vil_backend_cpu.scan_bidir_forward(&vil_backend_cpu, &o);
        size_t n = (size_t)s.B * s.L * s.E;
        T_CHECK(same(s.out, t.out, n), "%s forward = the backend's op", nm);
        /* k and q packed alone (dt_ld 0, xdbl_ld 2N): the same output */
        Scan k;
        scan_make(&k, 0);
        for (int j = 0; j < 2; j++) memcpy(k.u[j], s.u[j], n * 4), memcpy(k.dl[j], s.dl[j], n * 4);
        memcpy(k.z, s.z, n * 4);
        for (int j = 0; j < 2; j++)
            for (size_t r = 0; r < (size_t)s.B * s.L; r++)
                memcpy(k.xd[j] + r * k.ld, s.xd[j] + r * s.ld + 3, 2 * s.N * sizeof(float));
        vil_scan_fwd fk = scan_fwd(&k, rec);
        fk.xdbl_ld = 2 * s.N;
        float *packed[2];
        for (int j = 0; j < 2; j++) {
            packed[j] = malloc((size_t)s.B * s.L * 2 * s.N * sizeof(float));
            for (size_t r = 0; r < (size_t)s.B * s.L; r++)
                memcpy(packed[j] + r * 2 * s.N, s.xd[j] + r * s.ld + 3, 2 * s.N * sizeof(float));
            fk.xdbl[j] = packed[j];
        }
        T_CHECK(vil_scan_forward(ctx, &fk, NULL) == VIL_OK && same(k.out, s.out, n), "%s: k and q packed alone", nm);
        for (int j = 0; j < 2; j++) free(packed[j]);
        scan_free(&k);
        /* the backward twice: overwritten outputs the same, accumulated ones doubled */
        vil_scan_bwd b = scan_bwd(&s, rec);
        T_CHECK(vil_scan_backward(ctx, &b, NULL) == VIL_OK, "%s backward", nm);
        float dD1[16], dsum1[16], *du1 = malloc(n * sizeof(float));
        memcpy(dD1, s.dD[0], sizeof dD1), memcpy(dsum1, s.dsum[1], sizeof dsum1), memcpy(du1, s.du[0], n * 4);
        vil_scan_backward(ctx, &b, NULL);
        double acc = 0; /* the second call adds its sums to the first's, in its own order */
        for (int e = 0; e < 16; e++)
            acc = fmax(acc, fmax(fabs(s.dD[0][e] - 2 * dD1[e]), fabs(s.dsum[1][e] - 2 * dsum1[e])) /
                                (fabs(2 * dD1[e]) + fabs(2 * dsum1[e]) + 1e-6));
        T_CHECK(same(du1, s.du[0], n) && dD1[3] != 0, "%s backward: du overwritten", nm);
        T_CLOSE("backward twice: dD and ddelta_sum doubled", acc, 1e-6);
        free(du1);
        /* misuse: shapes the scans do not take, tensors missing */
        vil_scan_fwd bad = f;
        bad.N = 65;
        T_CHECK(vil_scan_forward(ctx, &bad, NULL) == VIL_ERR_ARG && strstr(vil_last_error(), "N = 65"), "%s N 65: %s",
                nm, vil_last_error());
        bad = f, bad.xdbl_ld = 3 + 2 * s.N - 1;
        T_CHECK(vil_scan_forward(ctx, &bad, NULL) == VIL_ERR_ARG, "%s xdbl_ld short", nm);
        bad = f, bad.u[1] = NULL;
        T_CHECK(vil_scan_forward(ctx, &bad, NULL) == VIL_ERR_ARG, "%s u NULL", nm);
        bad = f, bad.B = 1 << 20, bad.L = 1 << 12;
        T_CHECK(vil_scan_forward(ctx, &bad, NULL) == VIL_ERR_ARG && strstr(vil_last_error(), "32-bit"), "%s 2^32 rows",
                nm);
        vil_scan_bwd bb = b;
        bb.dD[0] = NULL;
        T_CHECK(vil_scan_backward(ctx, &bb, NULL) == VIL_ERR_ARG, "%s dD NULL", nm);
        if (rec) {
            bb = b, bb.dA_log[1] = NULL;
            T_CHECK(vil_scan_backward(ctx, &bb, NULL) == VIL_ERR_ARG, "mamba dA_log NULL");
        }
        T_CHECK(vil_scan_forward(NULL, &f, NULL) == VIL_ERR_ARG && vil_scan_forward(ctx, NULL, NULL) == VIL_ERR_ARG,
                "%s NULL", nm);
        bad = f, bad.rec = 7;
        T_CHECK(vil_scan_forward(ctx, &bad, NULL) == VIL_ERR_ARG, "%s recurrence 7", nm);
        scan_free(&s);
        scan_free(&t);
    }
}

/* two contexts in two threads, each its own model, several forwards: the single-thread logits */
typedef struct {
    const char *path;
    const float *x;
    float logits[10][9];
    int rc;
} Job;

static void *job_run(void *arg) {
    Job *j = arg;
    vil_ctx *c = NULL;
    vil_classifier *m = NULL;
    j->rc = vil_ctx_new("cpu", 0, 1, &c);
    if (!j->rc) j->rc = vil_classifier_load(c, j->path, NULL, &m);
    for (int k = 0; !j->rc && k < 10; k++) j->rc = vil_classifier_forward(m, j->x, 3, j->logits[k]);
    vil_classifier_free(m);
    vil_ctx_free(c);
    return NULL;
}

static void *err_thread(void *arg) {
    vil_ctx *c;
    vil_ctx_new("gpu9", 0, 0, &c);
    snprintf(arg, 256, "%s", vil_last_error());
    return NULL;
}

/* vil_conv_forward / vil_conv_backward on the CPU against the definition in include/vil.h,
 * written out here as a loop over the taps (float64), x inside a wider row (ldx = 2 E); the
 * backward's dx against central differences of that loop's sum(du * u), dw and db accumulated */
static double conv_ref(const float *x, const float *w, const float *b, int B, int L, int E, int K, int ldx, int j,
                       int bi, int t, int e) {
    double pre = b[e];
    for (int k = 0; k < K; k++) {
        int s = j ? t + K - 1 - k : t - K + 1 + k;
        if (s >= 0 && s < L) pre += (double)w[e * K + k] * x[((size_t)bi * L + s) * ldx + e];
    }
    (void)B;
    return pre / (1.0 + exp(-pre));
}

static double conv_loss(const float *x, float *const *w, float *const *b, float *const *du, int B, int L, int E,
                        int K, int ldx) {
    double acc = 0;
    for (int j = 0; j < 2; j++)
        for (int bi = 0; bi < B; bi++)
            for (int t = 0; t < L; t++)
                for (int e = 0; e < E; e++)
                    acc += du[j][((size_t)bi * L + t) * E + e] * conv_ref(x, w[j], b[j], B, L, E, K, ldx, j, bi, t, e);
    return acc;
}

static void test_conv(vil_ctx *ctx) {
    enum { B = 2, L = 6, E = 5, K = 4, LDX = 2 * E };
    VilRng r;
    vil_rng_seed(&r, 11);
    float *x = rnd((size_t)B * L * LDX, &r, 2, -1), *dx = calloc((size_t)B * L * LDX, 4);
    float *w[2], *b[2], *u[2], *du[2], *dw[2], *db[2];
    for (int j = 0; j < 2; j++) {
        w[j] = rnd(E * K, &r, 1, -0.5f), b[j] = rnd(E, &r, 1, -0.5f), du[j] = rnd((size_t)B * L * E, &r, 2, -1);
        u[j] = calloc((size_t)B * L * E, 4), dw[j] = calloc(E * K, 4), db[j] = calloc(E, 4);
        dw[j][1] = 1.0f, db[j][2] = 2.0f; /* accumulated into */
    }
    vil_conv_fwd f = {.B = B, .L = L, .E = E, .K = K, .ldx = LDX, .x = x, .w = {w[0], w[1]}, .b = {b[0], b[1]},
                      .u = {u[0], u[1]}};
    T_CHECK(vil_conv_forward(ctx, &f, NULL) == VIL_OK, "conv forward: %s", vil_last_error());
    double worst = 0;
    for (int j = 0; j < 2; j++)
        for (int bi = 0; bi < B; bi++)
            for (int t = 0; t < L; t++)
                for (int e = 0; e < E; e++) {
                    double d = fabs(u[j][((size_t)bi * L + t) * E + e] - conv_ref(x, w[j], b[j], B, L, E, K, LDX, j, bi, t, e));
                    if (d > worst) worst = d;
                }
    T_CHECK(worst < 1e-5, "conv forward against the loop: worst %.2e", worst);
    vil_conv_bwd g = {.B = B, .L = L, .E = E, .K = K, .ldx = LDX, .x = x, .w = {w[0], w[1]}, .b = {b[0], b[1]},
                      .du = {du[0], du[1]}, .dx = dx, .dw = {dw[0], dw[1]}, .db = {db[0], db[1]}};
    T_CHECK(vil_conv_backward(ctx, &g, NULL) == VIL_OK, "conv backward: %s", vil_last_error());
    double wx = 0, ww = 0, wb = 0;
    const double h = 1e-3;
    for (size_t i = 0; i < (size_t)B * L * LDX; i++) {
        if ((int)(i % LDX) >= E) continue;
        float x0 = x[i];
        x[i] = x0 + (float)h;
        double lp = conv_loss(x, w, b, du, B, L, E, K, LDX);
        x[i] = x0 - (float)h;
        double lm = conv_loss(x, w, b, du, B, L, E, K, LDX);
        x[i] = x0;
        double d = fabs(dx[i] - (lp - lm) / (2 * h));
        if (d > wx) wx = d;
    }
    for (int j = 0; j < 2; j++) {
        for (int i = 0; i < E * K + E; i++) {
            float *p = i < E * K ? &w[j][i] : &b[j][i - E * K];
            float p0 = *p;
            *p = p0 + (float)h;
            double lp = conv_loss(x, w, b, du, B, L, E, K, LDX);
            *p = p0 - (float)h;
            double lm = conv_loss(x, w, b, du, B, L, E, K, LDX);
            *p = p0;
            double fd = (lp - lm) / (2 * h);
            if (i < E * K) fd += i == 1 ? 1.0 : 0.0, ww = fmax(ww, fabs(dw[j][i] - fd));
            else fd += i - E * K == 2 ? 2.0 : 0.0, wb = fmax(wb, fabs(db[j][i - E * K] - fd));
        }
    }
    T_CHECK(wx < 2e-3 && ww < 2e-3 && wb < 2e-3, "conv backward against central differences (dw, db accumulated): "
            "dx %.2e, dw %.2e, db %.2e", wx, ww, wb);
    vil_conv_fwd bad = f;
    bad.K = 0;
    T_CHECK(vil_conv_forward(ctx, &bad, NULL) == VIL_ERR_ARG && strstr(vil_last_error(), "K 0"), "conv K 0: %s",
            vil_last_error());
    bad = f, bad.ldx = E - 1;
    T_CHECK(vil_conv_forward(ctx, &bad, NULL) == VIL_ERR_ARG, "conv ldx < E");
    bad = f, bad.u[1] = NULL;
    T_CHECK(vil_conv_forward(ctx, &bad, NULL) == VIL_ERR_ARG && strstr(vil_last_error(), "NULL"), "conv u NULL");
    vil_conv_bwd badb = g;
    badb.dw[0] = NULL;
    T_CHECK(vil_conv_backward(ctx, &badb, NULL) == VIL_ERR_ARG, "conv dw NULL");
    T_CHECK(vil_conv_forward(NULL, &f, NULL) == VIL_ERR_ARG && vil_conv_backward(ctx, NULL, NULL) == VIL_ERR_ARG,
            "conv NULL ctx or args");
    for (int j = 0; j < 2; j++) free(w[j]), free(b[j]), free(u[j]), free(du[j]), free(dw[j]), free(db[j]);
    free(x), free(dx);
}

static void test_threads(void) {
    float *x = images(3, 3, 16, 21), want[2][9];
    const char *paths[2] = {vil_path, vim_path};
    for (int i = 0; i < 2; i++) ref_logits(paths[i], x, 3, want[i]);
    for (int same_model = 0; same_model < 2; same_model++) {
        Job jobs[2] = {{.path = paths[0], .x = x}, {.path = paths[same_model ? 0 : 1], .x = x}};
        pthread_t t[2];
        for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, job_run, &jobs[i]);
        for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
        int ok = jobs[0].rc == 0 && jobs[1].rc == 0;
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 10; k++) ok &= same(jobs[i].logits[k], want[same_model ? 0 : i], 9);
        T_CHECK(ok, "two threads, %s: every forward the single-thread logits",
                same_model ? "one model in two contexts" : "two models");
    }
    /* messages are per thread */
    vil_ctx *c;
    vil_ctx_new("tpu", 0, 0, &c);
    char other[256] = "";
    pthread_t t;
    pthread_create(&t, NULL, err_thread, other);
    pthread_join(t, NULL);
    T_CHECK(strstr(vil_last_error(), "tpu") && strstr(other, "gpu9") && !strstr(other, "tpu"),
            "last error per thread: '%s' / '%s'", vil_last_error(), other);
    free(x);
}

int main(void) {
    dir = corpus_mkdtemp("api");
    snprintf(vil_path, sizeof vil_path, "%s/vil.safetensors", dir);
    snprintf(vim_path, sizeof vim_path, "%s/vim.safetensors", dir);
    snprintf(gray_path, sizeof gray_path, "%s/gray.safetensors", dir);
    snprintf(jpg_path, sizeof jpg_path, "%s/img.jpg", dir);
    make_model("vil", 3, vil_path);
    make_model("vim", 3, vim_path);
    make_model("vil", 1, gray_path);
    corpus_write_jpeg(jpg_path, 37, 29, 3, 1, 4, 0);
    test_version_ctx();
    vil_ctx *ctx = NULL;
    vil_ctx_new("cpu", 0, 2, &ctx);
    test_load_info(ctx);
    test_transform(ctx);
    test_forward(ctx, vil_path, "vil");
    test_forward(ctx, vim_path, "vim");
    test_params_save(ctx);
    test_topk();
    test_scans(ctx);
    test_conv(ctx);
    test_threads();
    T_CHECK(vil_ctx_free(ctx) == VIL_OK, "the context freed after its models");
    corpus_rmtree(dir);
    free(dir);
    return t_finish();
}
