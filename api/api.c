/* api.c: libvil's public API (include/vil.h) over vil's internals: the library, contexts,
 * models, the evaluation transform, forward, parameters, top-k and the states. The scans are in
 * api/scan.c. Every entry point runs between call_begin and call_end: the internals' vil_error
 * messages are captured for vil_last_error instead of printed, and a CPU context's thread count
 * is set for the calling thread. */
#define _GNU_SOURCE
#include "api/api.h"

#include <math.h>
#include <omp.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/image.h"
#include "data/transform.h"
#include "eval/eval.h"
#include "eval/results.h"
#include "eval/states.h"
#include "formats/runfolder.h"
#include "vil/limits.h"
#include "vil/version.h"

/* ---- errors ---- */

static _Thread_local char g_last[1024];

VIL_API const char *vil_last_error(void) { return g_last; }

int vil_api_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_last, sizeof g_last, fmt, ap);
    va_end(ap);
    return code;
}

void vil_api_begin(VilApiCall *c, const vil_ctx *ctx) {
    vil_error_capture(&c->cap);
    if (ctx && ctx->cpu) omp_set_num_threads(ctx->threads);
}

int vil_api_end(VilApiCall *c, int rc) {
    vil_error_release(&c->cap);
    if (rc == 0) return VIL_OK;
    snprintf(g_last, sizeof g_last, "%s", c->cap.count ? c->cap.msg : "failed (no message: a vil bug)");
    return rc == VIL_EUSAGE ? VIL_ERR_ARG : VIL_ERR;
}

/* ---- the library ---- */

VIL_API int vil_version_number(void) { return VIL_VERSION_NUMBER; }
VIL_API const char *vil_version_text(void) { return vil_version_string(); }

/* ---- contexts ---- */

static int default_threads(void) {
    const char *env = getenv("OMP_NUM_THREADS");
    if (env && env[strspn(env, " \t")]) return omp_get_max_threads();
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

VIL_API int vil_ctx_new(const char *device, int index, int threads, vil_ctx **out) {
    if (!out) return vil_api_fail(VIL_ERR_ARG, "vil_ctx_new: out is NULL");
    *out = NULL;
    if (!device || !vil_device_name_ok(device))
        return vil_api_fail(VIL_ERR_ARG, "vil_ctx_new: unknown device '%s' (expected cpu, cuda or auto)",
                            device ? device : "(null)");
    if (index < 0 || threads < 0 || threads > VIL_MAX_THREADS)
        return vil_api_fail(VIL_ERR_ARG, "vil_ctx_new: index %d and threads %d (0..%d) must not be negative",
                            index, threads, VIL_MAX_THREADS);
    VilApiCall c;
    vil_api_begin(&c, NULL);
    const VilBackend *be = vil_backend_open(device, index); /* a CUDA instance of its own */
    if (!be) return vil_api_end(&c, -1);
    vil_ctx *x = calloc(1, sizeof *x);
    if (!x) {
        vil_backend_close(be);
        vil_error("vil_ctx_new: out of memory");
        return vil_api_end(&c, -1);
    }
    x->be = be;
    x->cpu = strcmp(be->name, "cpu") == 0;
    x->threads = threads ? threads : default_threads();
    be->device_name(be, x->device_name, sizeof x->device_name);
    *out = x;
    return vil_api_end(&c, 0);
}

VIL_API int vil_ctx_free(vil_ctx *ctx) {
    if (!ctx) return VIL_OK;
    if (ctx->n_models)
        return vil_api_fail(VIL_ERR_ARG, "vil_ctx_free: %d model%s still on the context: free them first",
                            ctx->n_models, ctx->n_models == 1 ? " is" : "s are");
    vil_backend_close(ctx->be);
    free(ctx);
    return VIL_OK;
}

VIL_API const char *vil_ctx_device(const vil_ctx *ctx) { return !ctx ? NULL : ctx->cpu ? "cpu" : "cuda"; }
VIL_API const char *vil_ctx_device_name(const vil_ctx *ctx) { return ctx ? ctx->device_name : NULL; }

VIL_API int vil_ctx_sync(vil_ctx *ctx) {
    if (!ctx) return vil_api_fail(VIL_ERR_ARG, "vil_ctx_sync: ctx is NULL");
    ctx->be->sync(ctx->be);
    return VIL_OK;
}

/* ---- models ---- */

VIL_API int vil_classifier_load(vil_ctx *ctx, const char *path, const vil_load_opts *opts, vil_classifier **out) {
    if (!out) return vil_api_fail(VIL_ERR_ARG, "vil_classifier_load: out is NULL");
    *out = NULL;
    if (!ctx || !path) return vil_api_fail(VIL_ERR_ARG, "vil_classifier_load: ctx or path is NULL");
    vil_load_opts o = opts ? *opts : (vil_load_opts){0};
    if (o.img_size < 0 || o.img_size > VIL_MAX_IMG_SIZE)
        return vil_api_fail(VIL_ERR_ARG, "vil_classifier_load: img_size %d outside 0..%d", o.img_size,
                            VIL_MAX_IMG_SIZE);
    VilApiCall c;
    vil_api_begin(&c, ctx);
    vil_classifier *m = calloc(1, sizeof *m);
    if (!m) {
        vil_error("vil_classifier_load: out of memory");
        return vil_api_end(&c, -1);
    }
    int ema = o.ema != 0;
    char *owned = NULL;
    const char *file = vil_run_model_file(path, &ema, &owned, NULL, NULL);
    VilCheckpointOpts lo = {.img_size = o.img_size, .ema = ema};
    if (!file || vil_checkpoint_load(file, ctx->be, &lo, &m->m, &m->meta) != 0) {
        free(owned);
        free(m);
        return vil_api_end(&c, -1);
    }
    if (m->m.cfg.family_kind == VIL_FAMILY_STREAM) {
        /* its input is a chunk of a stream, its output a readout per image of it */
        vil_error("vil_classifier_load: '%s' is a stream model (family = stream), which reads streams of images, "
                  "not an image: evaluate it with vil eval", file);
        vil_model_free(&m->m);
        vil_checkpoint_meta_free(&m->meta);
        free(owned);
        free(m);
        return vil_api_end(&c, VIL_EUSAGE);
    }
    m->source = owned ? owned : strdup(file);
    vil_eval_spec_resolve(&m->ev, &m->meta, 0.0f, m->m.cfg.in_chans, NULL, 0);
    m->ctx = ctx;
    ctx->n_models++;
    *out = m;
    return vil_api_end(&c, 0);
}

VIL_API void vil_classifier_free(vil_classifier *m) {
    if (!m) return;
    vil_model_free(&m->m);
    vil_checkpoint_meta_free(&m->meta);
    m->ctx->n_models--;
    free(m->source);
    free(m);
}

VIL_API int vil_classifier_get_info(const vil_classifier *m, vil_classifier_info *info) {
    if (!m || !info) return vil_api_fail(VIL_ERR_ARG, "vil_classifier_get_info: m or info is NULL");
    const VilConfig *c = &m->m.cfg;
    const VilRecurrenceInfo *r = &vil_recurrences[c->rec];
    int g = m->meta.trained_grid; /* the file's grid when it was another */
    int trained = g > 0 ? (g - 1) * c->stride + c->patch_size : c->img_size;
    *info = (vil_classifier_info){
        .family = c->arch, .recurrence = r->id, .name = c->name, .n_params = (long long)m->m.param_count,
        .n_classes = c->num_classes, .img_size = c->img_size, .trained_img_size = trained,
        .in_chans = c->in_chans, .patch_size = c->patch_size, .stride = c->stride, .embed_dim = c->embed_dim,
        .depth = c->depth, .d_state = c->d_state, .d_inner = c->d_inner, .seq_len = c->seq_len,
        .cls_pos = c->cls_pos, .crop_pct = m->ev.crop_pct,
        .crop_from = m->meta.eval.crop_pct > 0 ? m->meta.eval_from : "the default: the file does not say", .step = m->meta.step,
        .has_class_names = m->meta.class_names != NULL};
    for (int i = 0; i < 3; i++) {
        info->mean[i] = i < c->in_chans ? m->ev.mean[i] : 0.0f;
        info->std[i] = i < c->in_chans ? m->ev.std[i] : 0.0f;
    }
    return VIL_OK;
}

VIL_API const char *vil_classifier_class_name(const vil_classifier *m, int i) {
    if (!m || i < 0 || i >= m->m.cfg.num_classes) {
        vil_api_fail(VIL_ERR_ARG, "vil_classifier_class_name: class %d of %d", i, m ? m->m.cfg.num_classes : 0);
        return NULL;
    }
    return m->meta.class_names ? m->meta.class_names[i] : "";
}

/* ---- the evaluation transform ---- */

VIL_API size_t vil_classifier_input_size(const vil_classifier *m) {
    if (!m) return 0;
    const VilConfig *c = &m->m.cfg;
    return (size_t)c->in_chans * c->img_size * c->img_size;
}

/* t's fields a caller set: 0, or VIL_ERR_ARG with the message */
static int check_transform(const vil_transform *t, const char *fn) {
    if (!t) return vil_api_fail(VIL_ERR_ARG, "%s: the transform is NULL", fn);
    if (t->img_size < 1 || t->img_size > VIL_MAX_IMG_SIZE || (t->channels != 1 && t->channels != 3) ||
        !(t->crop_pct >= VIL_MIN_CROP_PCT && t->crop_pct <= 1.0f))
        return vil_api_fail(VIL_ERR_ARG, "%s: img_size %d (1..%d), channels %d (1 or 3), crop_pct %g (0.001..1)", fn,
                            t->img_size, VIL_MAX_IMG_SIZE, t->channels, t->crop_pct);
    for (int c = 0; c < t->channels; c++)
        if (!(t->std[c] > 0) || !isfinite(t->mean[c]))
            return vil_api_fail(VIL_ERR_ARG, "%s: channel %d's std %g (> 0) or mean %g", fn, c, t->std[c], t->mean[c]);
    return VIL_OK;
}

static int transform(const vil_transform *t, const VilImage *im, float *out) {
    if (vil_transform_eval(im, t->img_size, t->crop_pct, t->mean, t->std, out) != 0) {
        vil_error("the evaluation transform failed (%d x %d x %d image)", im->w, im->h, im->c);
        return -1;
    }
    return 0;
}

VIL_API int vil_transform_file(const vil_transform *t, const char *path, float *out) {
    int rc = check_transform(t, "vil_transform_file");
    if (rc) return rc;
    if (!path || !out) return vil_api_fail(VIL_ERR_ARG, "vil_transform_file: path or out is NULL");
    VilApiCall c;
    vil_api_begin(&c, NULL);
    VilImage im;
    rc = vil_image_load(path, t->channels, &im);
    if (rc == 0) {
        rc = transform(t, &im, out);
        vil_image_free(&im);
    }
    return vil_api_end(&c, rc);
}

VIL_API int vil_transform_pixels(const vil_transform *t, const unsigned char *pixels, int w, int h, int channels,
                                 size_t stride, float *out) {
    static const char fn[] = "vil_transform_pixels";
    int rc = check_transform(t, fn);
    if (rc) return rc;
    if (!pixels || !out) return vil_api_fail(VIL_ERR_ARG, "%s: NULL argument", fn);
    if (channels != 1 && channels != 3)
        return vil_api_fail(VIL_ERR_ARG, "%s: %d channels (1: gray, 3: RGB)", fn, channels);
    if (w < 1 || h < 1 || (stride && stride < (size_t)w * channels))
        return vil_api_fail(VIL_ERR_ARG, "%s: %d x %d pixels with rows %zu bytes apart", fn, w, h, stride);
    VilApiCall c;
    vil_api_begin(&c, NULL);
    if (stride == 0) stride = (size_t)w * channels;
    int C = t->channels;
    VilImage im;
    rc = vil_image_check_size(fn, w, h);
    if (rc == 0) rc = vil_image_alloc(&im, w, h, C);
    if (rc != 0) return vil_api_end(&c, -1);
    for (int y = 0; y < h; y++) { /* rows packed, channels as the transform's (image.c's rules) */
        const unsigned char *src = pixels + (size_t)y * stride;
        unsigned char *dst = im.px + (size_t)y * w * C;
        if (channels == C) memcpy(dst, src, (size_t)w * C);
        else if (C == 1) vil_rgb_to_gray(dst, src, (size_t)w);
        else
            for (int x = 0; x < w; x++) dst[3 * x] = dst[3 * x + 1] = dst[3 * x + 2] = src[x];
    }
    rc = transform(t, &im, out);
    vil_image_free(&im);
    return vil_api_end(&c, rc);
}

VIL_API int vil_classifier_get_transform(const vil_classifier *m, vil_transform *t) {
    if (!m || !t) return vil_api_fail(VIL_ERR_ARG, "vil_classifier_get_transform: m or t is NULL");
    const VilConfig *c = &m->m.cfg;
    *t = (vil_transform){.img_size = c->img_size, .channels = c->in_chans, .crop_pct = m->ev.crop_pct};
    for (int i = 0; i < c->in_chans && i < 3; i++) t->mean[i] = m->ev.mean[i], t->std[i] = m->ev.std[i];
    return VIL_OK;
}

/* m's transform with crop_pct (0: the model's), or VIL_ERR_ARG */
static int model_transform(const vil_classifier *m, float crop_pct, const char *fn, vil_transform *t) {
    if (!m) return vil_api_fail(VIL_ERR_ARG, "%s: m is NULL", fn);
    vil_classifier_get_transform(m, t);
    if (crop_pct == 0.0f) return VIL_OK;
    if (!(crop_pct >= VIL_MIN_CROP_PCT && crop_pct <= 1.0f))
        return vil_api_fail(VIL_ERR_ARG, "%s: crop_pct %g outside 0.001..1 (0: the model's)", fn, crop_pct);
    t->crop_pct = crop_pct;
    return VIL_OK;
}

VIL_API int vil_classifier_transform_file(const vil_classifier *m, const char *path, float crop_pct, float *out) {
    vil_transform t;
    int rc = model_transform(m, crop_pct, "vil_classifier_transform_file", &t);
    if (rc) return rc;
    if (!path || !out) return vil_api_fail(VIL_ERR_ARG, "vil_classifier_transform_file: path or out is NULL");
    omp_set_num_threads(m->ctx->threads);
    return vil_transform_file(&t, path, out);
}

VIL_API int vil_classifier_transform_pixels(const vil_classifier *m, const unsigned char *pixels, int w, int h,
                                            int channels, size_t stride, float crop_pct, float *out) {
    vil_transform t;
    int rc = model_transform(m, crop_pct, "vil_classifier_transform_pixels", &t);
    if (rc) return rc;
    return vil_transform_pixels(&t, pixels, w, h, channels, stride, out);
}

/* ---- forward ---- */

/* m's activations for a batch of B, inference (training 0) or the states' (1): 0, or -1
 * (reported) */
static int ensure_acts(vil_classifier *m, int B, int training) {
    if (m->m.acts.base && m->m.acts.B == B && m->m.acts.training == training) return 0;
    vil_model_free_acts(&m->m);
    m->states_ready = 0;
    if (training) return vil_states_prepare(&m->m, B);
    if (vil_model_check_acts(&m->m, B, 0) != 0) return -1;
    return vil_model_alloc_acts(&m->m, B, 0);
}

static int check_batch(const vil_classifier *m, const void *images, int B, const void *logits, const char *fn) {
    if (!m || !images || !logits) return vil_api_fail(VIL_ERR_ARG, "%s: NULL argument", fn);
    if (B < 1 || B > VIL_API_MAX_BATCH) return vil_api_fail(VIL_ERR_ARG, "%s: batch %d outside 1..%d", fn, B, VIL_API_MAX_BATCH);
    return VIL_OK;
}

VIL_API int vil_classifier_forward(vil_classifier *m, const float *images, int B, float *logits) {
    int rc = check_batch(m, images, B, logits, "vil_classifier_forward");
    if (rc) return rc;
    VilApiCall c;
    vil_api_begin(&c, m->ctx);
    rc = ensure_acts(m, B, 0);
    if (rc == 0) {
        vil_model_set_inputs(&m->m, NULL, NULL, NULL);
        vil_model_upload_inputs(&m->m, images, NULL);
        vil_model_forward(&m->m, 0);
        vil_model_logits(&m->m, logits);
    }
    return vil_api_end(&c, rc);
}

VIL_API int vil_classifier_forward_device(vil_classifier *m, const float *images, int B, float *logits,
                                          void *stream) {
    int rc = check_batch(m, images, B, logits, "vil_classifier_forward_device");
    if (rc) return rc;
    if (m->ctx->cpu) return vil_classifier_forward(m, images, B, logits);
    VilApiCall c;
    vil_api_begin(&c, m->ctx);
    rc = ensure_acts(m, B, 0);
    if (rc == 0) {
        const VilBackend *be = m->ctx->be;
        /* the images into the model's own input buffer (device to device, on vil's stream): the
         * forward's recorded CUDA graph then replays whatever buffer a caller passes, where reading
         * the caller's would record a graph anew for each new buffer */
        be->stream_wait(be, stream);
        vil_model_set_inputs(&m->m, NULL, NULL, NULL);
        be->copy(be, m->m.acts.img, images, (size_t)B * vil_classifier_input_size(m) * sizeof(float));
        vil_model_forward(&m->m, 0);
        be->copy(be, logits, m->m.acts.logits, (size_t)B * m->m.cfg.num_classes * sizeof(float));
        be->stream_signal(be, stream);
    }
    return vil_api_end(&c, rc);
}

/* ---- parameters ---- */

VIL_API int vil_classifier_param_count(const vil_classifier *m) { return m ? m->m.n_tensors : 0; }

VIL_API int vil_classifier_param_get_info(const vil_classifier *m, int i, vil_param_info *info) {
    if (!m || !info || i < 0 || i >= m->m.n_tensors)
        return vil_api_fail(VIL_ERR_ARG, "vil_classifier_param_get_info: tensor %d of %d", i, m ? m->m.n_tensors : 0);
    const VilParamInfo *p = &m->m.info[i];
    *info = (vil_param_info){.name = p->name, .ndim = p->ndim, .numel = p->numel};
    for (int d = 0; d < 4; d++) info->shape[d] = d < p->ndim ? p->shape[d] : 0;
    return VIL_OK;
}

/* The tensor `name` of n floats, or NULL after the message (VIL_ERR_ARG) */
static const VilParamInfo *find_param(const vil_classifier *m, const char *name, size_t n, const char *fn) {
    if (!m || !name) {
        vil_api_fail(VIL_ERR_ARG, "%s: m or name is NULL", fn);
        return NULL;
    }
    const VilParamInfo *p = vil_model_find_param(&m->m, name);
    if (!p) vil_api_fail(VIL_ERR_ARG, "%s: the model has no tensor '%.200s'", fn, name);
    else if (n != p->numel) vil_api_fail(VIL_ERR_ARG, "%s: '%s' has %zu elements, not %zu", fn, name, p->numel, n);
    return p && n == p->numel ? p : NULL;
}

VIL_API int vil_classifier_param_read(const vil_classifier *m, const char *name, float *dst, size_t n, int host) {
    const VilParamInfo *p = find_param(m, name, n, "vil_classifier_param_read");
    if (!p) return VIL_ERR_ARG;
    if (!dst) return vil_api_fail(VIL_ERR_ARG, "vil_classifier_param_read: dst is NULL");
    const VilBackend *be = m->ctx->be;
    size_t ext = vil_param_extent(p);
    float *tmp = malloc(ext * sizeof(float));
    if (!tmp) return vil_api_fail(VIL_ERR, "vil_classifier_param_read: out of memory (%zu floats)", ext);
    be->to_host(be, tmp, m->m.params + p->offset, ext * sizeof(float));
    be->sync(be);
    vil_param_load(p, tmp, tmp); /* dense at the start: in place */
    if (host || m->ctx->cpu) memcpy(dst, tmp, n * sizeof(float));
    else {
        be->to_device(be, dst, tmp, n * sizeof(float));
        be->sync(be);
    }
    free(tmp);
    return VIL_OK;
}

VIL_API int vil_classifier_param_write(vil_classifier *m, const char *name, const float *src, size_t n, int host) {
    const VilParamInfo *p = find_param(m, name, n, "vil_classifier_param_write");
    if (!p) return VIL_ERR_ARG;
    if (!src) return vil_api_fail(VIL_ERR_ARG, "vil_classifier_param_write: src is NULL");
    const VilBackend *be = m->ctx->be;
    size_t ext = vil_param_extent(p);
    float *tmp = malloc(ext * sizeof(float));
    if (!tmp) return vil_api_fail(VIL_ERR, "vil_classifier_param_write: out of memory (%zu floats)", ext);
    if (host || m->ctx->cpu) memcpy(tmp, src, n * sizeof(float));
    else {
        be->to_host(be, tmp, src, n * sizeof(float));
        be->sync(be);
    }
    vil_param_store(p, tmp, tmp); /* in place: the dense rows spread to their stored places */
    be->to_device(be, m->m.params + p->offset, tmp, ext * sizeof(float));
    if (m->m.work != (void *)m->m.params)
        be->params_to_work(be, (char *)m->m.work + p->offset * be->work_bytes, m->m.params + p->offset, ext);
    be->sync(be);
    free(tmp);
    return VIL_OK;
}

VIL_API int vil_classifier_save(const vil_classifier *m, const char *path) {
    if (!m || !path) return vil_api_fail(VIL_ERR_ARG, "vil_classifier_save: m or path is NULL");
    VilApiCall c;
    vil_api_begin(&c, m->ctx);
    int rc = vil_checkpoint_format_of(path);
    if (rc >= 0)
        rc = vil_checkpoint_save_from(&m->m, path, m->meta.class_names, m->m.cfg.num_classes, &m->ev, m->source);
    return vil_api_end(&c, rc);
}

/* ---- results ---- */

VIL_API int vil_topk(const float *logits, int C, int k, int *idx, double *prob) {
    if (!logits || !idx || !prob || C < 1 || k < 1)
        return vil_api_fail(VIL_ERR_ARG, "vil_topk: NULL pointer, or C %d / k %d below 1", C, k);
    vil_topk_probs(logits, C, k < C ? k : C, idx, prob);
    return VIL_OK;
}

/* ---- the states ---- */

VIL_API int vil_classifier_stream_count(const vil_classifier *m, int *L, int *state) {
    int l = 0, s = 0;
    int n = m ? vil_model_seq_streams(&m->m, &l, &s) : 0;
    if (L) *L = l;
    if (state) *state = s;
    return n;
}

VIL_API int vil_classifier_states_run(vil_classifier *m, const float *images, int B) {
    float one;
    int rc = check_batch(m, images, B, &one, "vil_classifier_states_run");
    if (rc) return rc;
    VilApiCall c;
    vil_api_begin(&c, m->ctx);
    rc = ensure_acts(m, B, 1);
    if (rc == 0) {
        vil_model_set_inputs(&m->m, NULL, NULL, NULL);
        vil_model_upload_inputs(&m->m, images, NULL);
        vil_model_forward(&m->m, 0);
        m->states_ready = 1;
    }
    return vil_api_end(&c, rc);
}

VIL_API int vil_classifier_states_get(vil_classifier *m, int stream, float *hsq, float *hT) {
    if (!m || !hsq) return vil_api_fail(VIL_ERR_ARG, "vil_classifier_states_get: m or hsq is NULL");
    int n = vil_classifier_stream_count(m, NULL, NULL);
    if (stream < 0 || stream >= n) return vil_api_fail(VIL_ERR_ARG, "vil_classifier_states_get: stream %d of %d", stream, n);
    if (!m->states_ready || !m->m.acts.training)
        return vil_api_fail(VIL_ERR_ARG, "vil_classifier_states_get: no vil_classifier_states_run since the last forward");
    VilApiCall c;
    vil_api_begin(&c, m->ctx);
    int rc = vil_model_seq_states(&m->m, stream, hsq, hT);
    return vil_api_end(&c, rc);
}
