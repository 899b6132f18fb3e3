/* checkpoint.c: saving and loading models as safetensors or .pth (see checkpoint.h). Loading checks
 * every expected tensor's presence, shape and dtype and reports all problems, not just the
 * first; an unknown tensor is an error, so a file of another architecture never half-loads. */
#include "formats/checkpoint.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "vil/common.h"
#include "vil/imagenet_names.h"
#include "vil/limits.h"
#include "formats/pth.h"
#include "formats/safetensors.h"

#define META_CONFIG "vil.config"
#define META_IMG "vil.img_size"
#define META_STEP "vil.step"
#define META_CLASSES "vil.class_names"

#define META_SOURCE "vil.source"

#define META_EVAL "vil.eval"

/* a float as the short decimal it was written as (0.485, not 0.48500001430511475) */
static double clean(float f) {
    char b[32];
    snprintf(b, sizeof b, "%.7g", f);
    return strtod(b, NULL);
}

static char *eval_to_json(const VilEvalSpec *ev, int chans) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "crop_pct", clean(ev->crop_pct));
    cJSON_AddStringToObject(o, "resize", "bicubic");
    if (ev->has_norm) {
        cJSON *mean = cJSON_AddArrayToObject(o, "mean"), *std = cJSON_AddArrayToObject(o, "std");
        for (int c = 0; c < chans; c++) {
            cJSON_AddItemToArray(mean, cJSON_CreateNumber(clean(ev->mean[c])));
            cJSON_AddItemToArray(std, cJSON_CreateNumber(clean(ev->std[c])));
        }
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    char *r = vil_strdup(s);
    cJSON_free(s);
    return r;
}

/* 0, or -1 (reported) when the metadata is not a valid evaluation transform */
static int eval_from_json(const char *json, const char *path, int chans, VilEvalSpec *ev) {
    cJSON *o = cJSON_Parse(json);
    cJSON *crop = cJSON_GetObjectItemCaseSensitive(o, "crop_pct");
    cJSON *mean = cJSON_GetObjectItemCaseSensitive(o, "mean"), *std = cJSON_GetObjectItemCaseSensitive(o, "std");
    int ok = cJSON_IsObject(o) && cJSON_IsNumber(crop) && crop->valuedouble > 0 && crop->valuedouble <= 1;
    memset(ev, 0, sizeof *ev);
    if (ok) ev->crop_pct = (float)crop->valuedouble;
    if (ok && (mean || std)) {
        ok = cJSON_GetArraySize(mean) == chans && cJSON_GetArraySize(std) == chans;
        for (int c = 0; ok && c < chans; c++) {
            cJSON *a = cJSON_GetArrayItem(mean, c), *b = cJSON_GetArrayItem(std, c);
            ok = cJSON_IsNumber(a) && cJSON_IsNumber(b) && isfinite(a->valuedouble) &&
                 fabs(a->valuedouble) < 1e6 && b->valuedouble > 1e-6 && b->valuedouble < 1e6;
            if (ok) ev->mean[c] = (float)a->valuedouble, ev->std[c] = (float)b->valuedouble;
        }
        ev->has_norm = ok;
    }
    cJSON_Delete(o);
    if (!ok) vil_error("'%s': metadata %s is not {crop_pct in (0, 1], mean and std of %d channels}", path, META_EVAL, chans);
    return ok ? 0 : -1;
}

int vil_checkpoint_format_of(const char *path) {
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (dot && (!slash || dot > slash)) {
        if (strcasecmp(dot, ".safetensors") == 0) return VIL_CKPT_SAFETENSORS;
        if (strcasecmp(dot, ".pth") == 0) return VIL_CKPT_PTH;
    }
    char shown[256];
    vil_error("'%s': vil writes checkpoints as NAME.safetensors (safetensors with vil's metadata) "
              "or NAME.pth (torch.save's zip format, which torch.load(..., weights_only=True) "
              "reads); name the output with one of those extensions",
              vil_printable(shown, sizeof shown, path));
    return VIL_EUSAGE;
}

/* vil's metadata (doc/formats.md) as key/value strings, in the order written; the caller frees
 * the values */
enum { MAX_META = 8 };
static int make_meta(const VilModel *m, long step, char *const *class_names, int n_classes,
                     const VilEvalSpec *ev, const char *source, const char **keys, char **vals) {
    int n = 0;
    keys[n] = META_CONFIG;
    vals[n++] = vil_config_to_json(&m->cfg);
    char buf[64];
    snprintf(buf, sizeof buf, "%d", m->cfg.img_size);
    keys[n] = META_IMG;
    vals[n++] = vil_strdup(buf);
    snprintf(buf, sizeof buf, "%ld", step);
    keys[n] = META_STEP;
    vals[n++] = vil_strdup(buf);
    if (class_names && n_classes > 0) {
        cJSON *arr = cJSON_CreateArray();
        for (int i = 0; i < n_classes; i++)
            cJSON_AddItemToArray(arr, cJSON_CreateString(class_names[i] ? class_names[i] : ""));
        char *s = cJSON_PrintUnformatted(arr);
        keys[n] = META_CLASSES;
        vals[n++] = vil_strdup(s);
        cJSON_free(s);
        cJSON_Delete(arr);
    }
    if (source) {
        keys[n] = META_SOURCE;
        vals[n++] = vil_strdup(source);
    }
    if (ev && ev->crop_pct > 0) {
        keys[n] = META_EVAL;
        vals[n++] = eval_to_json(ev, m->cfg.in_chans);
    }
    return n;
}

static int save(const VilModel *m, const char *path, VilCkptFormat fmt, long step,
                char *const *class_names, int n_classes, const VilEvalSpec *ev, const char *source) {
    float *host = vil_try_malloc(m->buf_len * sizeof(float));
    VilStTensor *ts = host ? vil_try_calloc((size_t)m->n_tensors, sizeof *ts) : NULL;
    if (!ts) {
        vil_error("'%s': no host memory for a copy of the %zu parameters to save", path, m->param_count);
        free(host);
        return -1;
    }
    vil_model_get_params(m, host);
    vil_model_pack(m, host, host); /* the tensors without the buffer's padding */
    size_t at = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const VilParamInfo *p = &m->info[i];
        ts[i] = (VilStTensor){.name = (char *)p->name, .dtype = VIL_ST_F32, .ndim = p->ndim,
                              .data = host + at};
        memcpy(ts[i].shape, p->shape, (size_t)p->ndim * sizeof p->shape[0]);
        at += p->numel;
    }
    const char *keys[MAX_META];
    char *vals[MAX_META];
    int nm = make_meta(m, step, class_names, n_classes, ev, source, keys, vals), rc;
    if (fmt == VIL_CKPT_PTH) {
        rc = vil_pth_write(path, ts, m->n_tensors, (char *const *)keys, vals, nm);
    } else {
        VilStWriter *w = vil_st_writer_new();
        for (int i = 0; i < m->n_tensors; i++)
            vil_st_writer_add(w, ts[i].name, ts[i].dtype, ts[i].ndim, ts[i].shape, ts[i].data);
        /* "format": "pt" is what safetensors.torch writes; it lets the Python loaders accept it */
        vil_st_writer_meta(w, "format", "pt");
        for (int i = 0; i < nm; i++) vil_st_writer_meta(w, keys[i], vals[i]);
        rc = vil_st_writer_save(w, path);
        vil_st_writer_free(w);
    }
    for (int i = 0; i < nm; i++) free(vals[i]);
    free(ts);
    free(host);
    return rc;
}

int vil_checkpoint_save(const VilModel *m, const char *path, long step,
                        char *const *class_names, int n_classes, const VilEvalSpec *ev) {
    return save(m, path, VIL_CKPT_SAFETENSORS, step, class_names, n_classes, ev, NULL);
}

int vil_checkpoint_save_from(const VilModel *m, const char *path, char *const *class_names,
                             int n_classes, const VilEvalSpec *ev, const char *source) {
    int fmt = vil_checkpoint_format_of(path);
    if (fmt < 0) return fmt;
    return save(m, path, (VilCkptFormat)fmt, 0, class_names, n_classes, ev, source);
}

/* torch.nn.functional.interpolate(mode='bicubic', align_corners=False) of one axis:
 * cubic convolution with A = -0.75, source index (i + 0.5) * in / out - 0.5, taps clamped to
 * the border. Weights (out, 4) and first tap index (out). */
static void cubic_weights(int in, int out, float *wt, int *i0) {
    const double A = -0.75;
    double scale = (double)in / out;
    for (int i = 0; i < out; i++) {
        double src = (i + 0.5) * scale - 0.5;
        int f = (int)floor(src);
        double t = src - f;
        double x;
        x = t + 1;
        wt[4 * i + 0] = (float)(((A * x - 5 * A) * x + 8 * A) * x - 4 * A);
        x = t;
        wt[4 * i + 1] = (float)(((A + 2) * x - (A + 3)) * x * x + 1);
        x = 1 - t;
        wt[4 * i + 2] = (float)(((A + 2) * x - (A + 3)) * x * x + 1);
        x = 2 - t;
        wt[4 * i + 3] = (float)(((A * x - 5 * A) * x + 8 * A) * x - 4 * A);
        i0[i] = f - 1;
    }
}

int vil_pos_embed_resize(float *dst, const float *src, int G, int G2, int D) {
    int t = G * G / 2, t2 = G2 * G2 / 2;
    float *wt = vil_try_malloc((size_t)4 * G2 * sizeof(float));
    int *i0 = vil_try_malloc((size_t)G2 * sizeof(int));
    /* the patch rows of the source, without the class-token row */
    float *tmp = vil_try_malloc((size_t)G * G2 * D * sizeof(float)); /* (G rows, G2 cols, D) */
    if (!wt || !i0 || !tmp) {
        free(tmp), free(i0), free(wt);
        return -1;
    }
    cubic_weights(G, G2, wt, i0);
#define SRC(y, x) (src + (size_t)(((y) * G + (x)) < t ? ((y) * G + (x)) : ((y) * G + (x)) + 1) * D)
    for (int y = 0; y < G; y++)
        for (int x = 0; x < G2; x++) {
            float *o = tmp + ((size_t)y * G2 + x) * D;
            memset(o, 0, (size_t)D * sizeof(float));
            for (int k = 0; k < 4; k++) {
                int sx = i0[x] + k;
                sx = sx < 0 ? 0 : sx >= G ? G - 1 : sx;
                const float *sp = SRC(y, sx);
                for (int d = 0; d < D; d++) o[d] += wt[4 * x + k] * sp[d];
            }
        }
#undef SRC
    for (int y = 0; y < G2; y++)
        for (int x = 0; x < G2; x++) {
            int p = y * G2 + x;
            float *o = dst + (size_t)(p < t2 ? p : p + 1) * D;
            memset(o, 0, (size_t)D * sizeof(float));
            for (int k = 0; k < 4; k++) {
                int sy = i0[y] + k;
                sy = sy < 0 ? 0 : sy >= G ? G - 1 : sy;
                const float *sp = tmp + ((size_t)sy * G2 + x) * D;
                for (int d = 0; d < D; d++) o[d] += wt[4 * y + k] * sp[d];
            }
        }
    memcpy(dst + (size_t)t2 * D, src + (size_t)t * D, (size_t)D * sizeof(float));
    free(tmp);
    free(i0);
    free(wt);
    return 0;
}

void vil_pos_embed_keep(float *dst, const float *src, int G, int G2, int D, VilPosMode mode) {
    int t = G * G / 2, t2 = G2 * G2 / 2, o = mode == VIL_POS_CENTER ? (G2 - G) / 2 : 0;
    for (int i = 0; i < G2; i++)
        for (int j = 0; j < G2; j++) {
            int si = i - o < 0 ? 0 : i - o >= G ? G - 1 : i - o;
            int sj = j - o < 0 ? 0 : j - o >= G ? G - 1 : j - o;
            int p = i * G2 + j, q = si * G + sj; /* grid positions; the class row sits at t, t2 */
            memcpy(dst + (size_t)(p < t2 ? p : p + 1) * D, src + (size_t)(q < t ? q : q + 1) * D,
                   (size_t)D * sizeof(float));
        }
    memcpy(dst + (size_t)t2 * D, src + (size_t)t * D, (size_t)D * sizeof(float));
}

static const char *const POS_MODES[VIL_POS_MODE_COUNT] = {[VIL_POS_INTERP] = "interp", [VIL_POS_KEEP] = "keep",
                                                           [VIL_POS_CENTER] = "center"};

const char *vil_pos_mode_name(int mode) {
    return mode >= 0 && mode < VIL_POS_MODE_COUNT ? POS_MODES[mode] : NULL;
}

int vil_pos_mode_parse(const char *name) {
    for (int i = 0; i < VIL_POS_MODE_COUNT; i++)
        if (strcmp(name, POS_MODES[i]) == 0) return i;
    return -1;
}

/* pos_embed from a G x G grid onto G2 x G2 as mode says; 0, or -1 (reported by the caller)
 * without the memory to interpolate */
static int pos_embed_move(float *dst, const float *src, int G, int G2, int D, VilPosMode mode) {
    if (mode == VIL_POS_INTERP) return vil_pos_embed_resize(dst, src, G, G2, D);
    vil_pos_embed_keep(dst, src, G, G2, D, mode);
    return 0;
}

void vil_checkpoint_meta_free(VilCheckpointMeta *meta) {
    if (meta->class_names)
        for (int i = 0; i < meta->n_classes; i++) free(meta->class_names[i]);
    free(meta->class_names);
    memset(meta, 0, sizeof *meta);
}

static int read_class_names(const char *json, const char *path, int n, VilCheckpointMeta *meta) {
    cJSON *a = cJSON_Parse(json);
    if (!a || !cJSON_IsArray(a)) {
        vil_error("'%s': metadata %s is not a JSON array", path, META_CLASSES);
        cJSON_Delete(a);
        return -1;
    }
    int k = cJSON_GetArraySize(a);
    if (k != n) {
        vil_error("'%s': %d class names for a head of %d classes", path, k, n);
        cJSON_Delete(a);
        return -1;
    }
    meta->class_names = vil_try_calloc((size_t)n, sizeof(char *));
    meta->n_classes = n;
    int ok = meta->class_names != NULL;
    /* the array's items in order, without cJSON_GetArrayItem's walk from the start for each */
    const cJSON *s = a->child;
    for (int i = 0; ok && i < n; i++, s = s->next)
        ok = (meta->class_names[i] = vil_try_strdup(cJSON_IsString(s) ? s->valuestring : "")) != NULL;
    cJSON_Delete(a);
    if (!ok) {
        vil_error("'%s': no memory for its %d class names", path, n);
        for (int i = 0; meta->class_names && i < n; i++) free(meta->class_names[i]);
        free(meta->class_names);
        meta->class_names = NULL;
        meta->n_classes = 0;
        return -1;
    }
    return 0;
}

/* ---- reading: a file of either format as tensors plus the architecture it holds ---- */

typedef struct {
    VilSafetensors st;
    VilConfig cfg;  /* the file's network at the size it was trained at (not finalized) */
    int imagenet;   /* a .pth whose args say ImageNet-1k (data_set IMNET) */
    float pth_crop; /* a .pth's args.eval_crop_ratio; 0: none */
} Source;

static const VilStTensor *need(const VilSafetensors *st, const char *path, const char *name,
                               int ndim) {
    const VilStTensor *t = vil_st_find(st, name);
    if (!t) {
        vil_error("'%s': tensor '%s' is missing, so the architecture cannot be inferred", path,
                  name);
        return NULL;
    }
    if (t->ndim != ndim) {
        vil_error("'%s': tensor '%s' has %d dimensions, expected %d", path, name, t->ndim, ndim);
        return NULL;
    }
    for (int d = 0; d < ndim; d++)
        if (t->shape[d] < 1 || t->shape[d] > (1 << 20)) {
            vil_error("'%s': tensor '%s' has size %lld in dimension %d", path, name,
                      (long long)t->shape[d], d);
            return NULL;
        }
    return t;
}

/* vim_tiny, vil_small_stride8, vim_d96: the names the ViM and ViL papers use */
static void name_config(VilConfig *c) {
    const char *size = c->embed_dim == 192 ? "tiny" : c->embed_dim == 384 ? "small"
                       : c->embed_dim == 768 ? "base" : NULL;
    char d[16], s[16] = "";
    snprintf(d, sizeof d, "d%d", c->embed_dim);
    if (c->stride != c->patch_size) snprintf(s, sizeof s, "_stride%d", c->stride);
    snprintf(c->name, sizeof c->name, "%s_%s%s", c->arch, size ? size : d, s);
}

/* The grid of a file without pos_embed: nothing in it says the stride, so the patches are taken
 * as not overlapping (S = P), at img, which the model then simply runs at (it has no position
 * embedding to move). 0, or -1 (reported) when img does not fit. */
static int infer_grid_none(const char *path, int img, VilConfig *c) {
    strcpy(c->pos_embed, "none");
    c->img_size = img;
    c->stride = c->patch_size;
    if (img < c->patch_size || img % c->patch_size != 0) {
        vil_error("'%s' has no pos_embed, so its patches are taken as not overlapping (stride = patch "
                  "%d), which image size %d does not fit: give a multiple of %d with --img-size",
                  path, c->patch_size, img, c->patch_size);
        return -1;
    }
    name_config(c);
    return 0;
}

/* doc/models.md, "Architecture from a checkpoint alone". img: the image size the file says it
 * was trained at, or (asked) only a size asked for: where that size does not fit the pos_embed
 * grid with a stride of at most the patch, the training size is taken as grid x patch (stride =
 * patch), and the load resizes the model to the size asked for. */
static int infer_config(const VilSafetensors *st, const char *path, int img, int asked, VilConfig *c) {
    vil_config_default(c);
    const VilStTensor *pw = need(st, path, "patch_embed.proj.weight", 4);
    const VilStTensor *head = need(st, path, "head.weight", 2);
    const VilStTensor *inp = need(st, path, "layers.0.mixer.in_proj.weight", 2);
    const VilStTensor *dtw = need(st, path, "layers.0.mixer.dt_proj.weight", 2);
    const VilStTensor *xp = need(st, path, "layers.0.mixer.x_proj.weight", 2);
    const VilStTensor *cw = need(st, path, "layers.0.mixer.conv1d.weight", 3);
    if (!pw || !head || !inp || !dtw || !xp || !cw) return -1;
    /* none: a model trained without one (pos_embed = none), whose grid the file cannot tell */
    const VilStTensor *pos = NULL;
    if (vil_st_find(st, "pos_embed") && !(pos = need(st, path, "pos_embed", 3))) return -1;
    int depth = 0;
    for (int i = 0; i < st->n_tensors; i++) {
        int l;
        if (sscanf(st->tensors[i].name, "layers.%d.", &l) == 1 && l >= 0 && l < 4096 && l + 1 > depth) depth = l + 1;
    }
    int D = (int)pw->shape[0], E = (int)inp->shape[0] / 2, R = (int)dtw->shape[1];
    c->embed_dim = D;
    c->in_chans = (int)pw->shape[1];
    c->patch_size = (int)pw->shape[2];
    c->depth = depth;
    c->dt_rank = R;
    c->d_state = ((int)xp->shape[0] - R) / 2;
    c->d_conv = (int)cw->shape[2];
    c->num_classes = (int)head->shape[0];
    if (E % D != 0 || E == 0) {
        vil_error("'%s': in_proj has %d rows, not a multiple of 2 * embed_dim %d", path, 2 * E, D);
        return -1;
    }
    c->expand = E / D;
    /* the recurrence, among those a model runs (an arch in the table): the one whose own
     * parameter block 0 holds, else the one that has no parameter of its own */
    int rec = -1, bare = -1, nbare = 0;
    for (int r = 0; r < VIL_REC_COUNT && rec < 0; r++) {
        const VilRecurrenceInfo *ri = &vil_recurrences[r];
        char key[128];
        if (!ri->arch) continue;
        if (!ri->param.key) {
            bare = r, nbare++;
            continue;
        }
        snprintf(key, sizeof key, ri->param.key, 0, "");
        if (vil_st_find(st, key)) rec = r;
    }
    if (rec < 0 && nbare != 1) {
        vil_error("'%s': no tensor names the recurrence (%d have no parameter of their own), so the "
                  "architecture cannot be inferred", path, nbare);
        return -1;
    }
    strcpy(c->arch, vil_recurrences[rec < 0 ? bare : rec].arch);
    if (!pos) return infer_grid_none(path, img, c);
    long rows = (long)pos->shape[1] - 1;
    int G = (int)lround(sqrt((double)rows));
    if (rows < 1 || (long)G * G != rows) {
        vil_error("'%s': pos_embed has %ld patch rows, not a square grid", path, rows);
        return -1;
    }
    c->img_size = img;
    /* the stride that fits img: one of at least 1, and (a size only asked for) at most the
     * patch, since patches with gaps between them are no model's training setup */
    int stride = G == 1 ? c->patch_size : img >= c->patch_size && (img - c->patch_size) % (G - 1) == 0
                                              ? (img - c->patch_size) / (G - 1) : 0;
    if (G == 1 ? !asked || img == c->patch_size : stride >= 1 && (!asked || stride <= c->patch_size)) {
        c->stride = stride;
    } else if (asked && (long)G * c->patch_size <= VIL_MAX_IMG_SIZE) {
        c->stride = c->patch_size; /* non-overlapping patches: trained at G x patch */
        c->img_size = G * c->patch_size;
    } else {
        vil_error("'%s': a %dx%d patch grid with patch %d does not fit image size %d; pass the "
                  "size the model was trained at with --img-size",
                  path, G, G, c->patch_size, img);
        return -1;
    }
    name_config(c);
    return 0;
}

/* The first bytes tell the format: a zip archive is a .pth, anything else must be safetensors.
 * Only the descriptors (names, dtypes, shapes, metadata) are read here: the tensors' data comes
 * with load_data once check_tensors has matched every tensor to the model, so a storage for a
 * tensor the model has no place for, or of the wrong shape, is never read or inflated. */
static int source_open(const char *path, const VilCheckpointOpts *o, Source *s,
                       VilCheckpointMeta *meta) {
    memset(s, 0, sizeof *s);
    unsigned char head[8] = {0};
    /* the readers' messages, said as failures to load the checkpoint */
    VilErrCapture cap;
    vil_error_capture(&cap);
    FILE *f = vil_fopen_regular(path, "rb"); /* a FIFO or a device: refused, not waited on */
    vil_error_release(&cap);
    if (!f) {
        vil_error("cannot load checkpoint: %s", cap.msg);
        return -1;
    }
    size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    int kind = vil_pth_sniff(head, got), img = 0;
    if (kind == 2) {
        vil_error("'%s' is in torch.save's legacy format (PyTorch before 1.6), which vil does not "
                  "read: re-save it with a newer torch (torch.save(torch.load(f), f2))", path);
        return -1;
    }
    if (kind == 1) {
        VilPthInfo info;
        vil_error_capture(&cap);
        int rc = vil_pth_open(path, o->ema, &s->st, &info);
        vil_error_release(&cap);
        if (rc != 0) {
            vil_error("cannot load checkpoint %s", cap.msg);
            return -1;
        }
        snprintf(meta->format, sizeof meta->format, "pth");
        snprintf(meta->weights, sizeof meta->weights, "%s", info.weights);
        snprintf(meta->file_keys, sizeof meta->file_keys, "%s", info.keys);
        snprintf(meta->source_model, sizeof meta->source_model, "%s", info.model);
        meta->has_ema = info.has_ema;
        meta->epoch = info.epoch;
        img = info.img_size;
        s->imagenet = strcmp(info.data_set, "IMNET") == 0;
        s->pth_crop = info.crop_pct;
    } else {
        if (o->ema) {
            vil_error("--ema: '%s' is a safetensors file, which holds one set of weights (a vil "
                      "run keeps its EMA in OUT/ema.safetensors); --ema picks model_ema out of a "
                      "PyTorch training checkpoint (.pth)", path);
            return -1;
        }
        vil_error_capture(&cap);
        int rc = vil_st_open(path, &s->st);
        vil_error_release(&cap);
        if (rc != 0) {
            vil_error("cannot load checkpoint: %s", cap.msg);
            return -1;
        }
        snprintf(meta->format, sizeof meta->format, "safetensors");
        meta->epoch = -1;
    }
    /* the metadata of either format (a .pth's vil_metadata) */
    const char *fmt = vil_st_meta(&s->st, "vil.format");
    if (fmt && strcmp(fmt, "vil-train-state") == 0) {
        vil_error("'%s' is a training state (what `vil train --resume` reads), not a model "
                  "checkpoint: give the run's last.safetensors, ema.safetensors or "
                  "best.safetensors beside it", path);
        goto fail;
    }
    const char *cj = vil_st_meta(&s->st, META_CONFIG);
    if (cj) {
        vil_config_default(&s->cfg);
        if (vil_config_from_json(&s->cfg, cj) != 0) {
            vil_error("'%s': bad %s metadata", path, META_CONFIG);
            goto fail;
        }
    } else {
        meta->config_inferred = 1;
        /* a bare state dict says no size: the size asked for (224 by default) where it fits the
         * grid, else grid x patch, which the load resizes to the size asked for */
        int asked = img == 0;
        if (!img) img = o->img_size > 0 ? o->img_size : 224;
        if (infer_config(&s->st, path, img, asked, &s->cfg) != 0) goto fail;
    }
    return 0;
fail:
    vil_st_free(&s->st);
    return -1;
}

static void shape_text(char *s, size_t cap, int ndim, const int64_t *shape) {
    s[0] = 0;
    for (int d = 0; d < ndim; d++)
        snprintf(s + strlen(s), cap - strlen(s), "%s%lld", d ? ", " : "", (long long)shape[d]);
}

static int is_head(const char *name) {
    return strcmp(name, "head.weight") == 0 || strcmp(name, "head.bias") == 0;
}

/* Before anything is allocated: the file's tensors against the parameter table of cfg, every
 * expected tensor with its shape and dtype, then nothing unexpected, so a config (from the
 * metadata, or inferred from one tensor) that the file's own tensors do not back up never sizes
 * an allocation. src_grid > 0: pos_embed is read from a src_grid x src_grid grid (another
 * resolution). keep_head: head.* are not taken (fine-tuning on other classes). Reports up to 10
 * problems, naming the file and the tensor; -1 when there are any. */
static int check_tensors(const Source *s, const char *path, const VilConfig *cfg, int src_grid,
                         int keep_head) {
    int n, bad = 0;
    VilParamInfo *info = vil_model_param_table(cfg, &n);
    for (int i = 0; i < n; i++) {
        const VilParamInfo *p = &info[i];
        if (keep_head && is_head(p->name)) continue;
        const VilStTensor *t = vil_st_find(&s->st, p->name);
        if (!t) {
            if (bad++ < 10) vil_error("'%s': tensor '%s' is missing", path, p->name);
            continue;
        }
        int64_t want[VIL_MAX_NDIM];
        memcpy(want, p->shape, sizeof want);
        if (src_grid && strcmp(p->name, "pos_embed") == 0) want[1] = (int64_t)src_grid * src_grid + 1;
        int same = t->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == want[d];
        if (!same) {
            char w[96], got[96];
            shape_text(w, sizeof w, p->ndim, want);
            shape_text(got, sizeof got, t->ndim, t->shape);
            if (bad++ < 10)
                vil_error("'%s': tensor '%s' has shape [%s], the model needs [%s]", path, p->name, got, w);
        } else if (t->dtype != VIL_ST_F32 && t->dtype != VIL_ST_F16 && t->dtype != VIL_ST_BF16 &&
                   t->dtype != VIL_ST_F64) {
            if (bad++ < 10)
                vil_error("'%s': tensor '%s' has dtype %s, which vil cannot read", path, p->name,
                          vil_st_dtype_name(t->dtype));
        }
    }
    for (int i = 0; i < s->st.n_tensors; i++) {
        const char *nm = s->st.tensors[i].name;
        int found = 0;
        for (int k = 0; k < n && !found; k++) found = strcmp(info[k].name, nm) == 0;
        if (!found && bad++ < 10) {
            char shown[160];
            vil_error("'%s': unexpected tensor '%s' for a %s model of depth %d", path,
                      vil_printable(shown, sizeof shown, nm), cfg->arch, cfg->depth);
        }
    }
    free(info);
    if (bad > 10) vil_error("'%s': ... %d problems in all", path, bad);
    return bad ? -1 : 0;
}

/* The data of the tensors fill_params takes (all but head.* with keep_head), read once
 * check_tensors has passed them. */
static int load_data(Source *s, const char *path, int keep_head) {
    unsigned char *want = vil_try_malloc((size_t)(s->st.n_tensors ? s->st.n_tensors : 1));
    if (!want) {
        vil_error("'%s': no memory to list its %d tensors", path, s->st.n_tensors);
        return -1;
    }
    for (int i = 0; i < s->st.n_tensors; i++) want[i] = !(keep_head && is_head(s->st.tensors[i].name));
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_st_load(&s->st, want);
    vil_error_release(&cap);
    free(want);
    if (rc != 0) vil_error("'%s': %s", path, cap.msg);
    return rc;
}

/* m's parameters (host, in the parameter buffers' layout) from the file's tensors, which
 * check_tensors has passed for m's config; pos_embed moved from src_grid as pos says. -1
 * (reported) when a value is not finite, or without the memory to interpolate pos_embed. */
static int fill_params(const Source *s, const char *path, const VilModel *m, int src_grid, VilPosMode pos,
                       int keep_head, float *host) {
    const VilConfig *cfg = &m->cfg;
    for (int i = 0; i < m->n_tensors; i++) {
        const VilParamInfo *p = &m->info[i];
        if (keep_head && is_head(p->name)) continue;
        const VilStTensor *t = vil_st_find(&s->st, p->name);
        if (src_grid && strcmp(p->name, "pos_embed") == 0) {
            int G = src_grid, D = cfg->embed_dim;
            float *src = vil_try_malloc(((size_t)G * G + 1) * D * sizeof(float));
            int rc = src ? vil_st_to_f32(t, src) : -1;
            if (rc == 0) rc = pos_embed_move(host + p->offset, src, G, cfg->grid, D, pos);
            free(src);
            if (rc != 0) {
                vil_error("'%s': no memory to move pos_embed from %dx%d onto %dx%d", path, G, G,
                          cfg->grid, cfg->grid);
                return -1;
            }
            continue;
        }
        vil_st_to_f32(t, host + p->offset);
        vil_param_store(p, host + p->offset, host + p->offset); /* the buffer's layout */
    }
    for (size_t i = 0; i < m->buf_len; i++)
        if (!isfinite(host[i])) {
            vil_error("'%s': parameters contain NaN or Inf (a diverged run?)", path);
            return -1;
        }
    return 0;
}

static int set_class_names(const Source *s, const char *path, int n, VilCheckpointMeta *meta) {
    meta->n_classes = n;
    const char *names = vil_st_meta(&s->st, META_CLASSES);
    if (names) return read_class_names(names, path, n, meta);
    if (s->imagenet && n == 1000) { /* the published ViM checkpoints: ImageNet-1k's classes */
        meta->class_names = vil_calloc((size_t)n, sizeof(char *));
        for (int i = 0; i < n; i++) meta->class_names[i] = vil_strdup(vil_imagenet_class_names[i]);
    }
    return 0;
}

int vil_checkpoint_load(const char *path, const VilBackend *be, const VilCheckpointOpts *opt,
                        VilModel *m, VilCheckpointMeta *meta) {
    static const VilCheckpointOpts none = {0};
    const VilCheckpointOpts *o = opt ? opt : &none;
    memset(meta, 0, sizeof *meta);
    memset(m, 0, sizeof *m);
    if (!vil_pos_mode_name((int)o->pos)) {
        vil_error("vil_checkpoint_load: pos mode %d is none of interp, keep, center", (int)o->pos);
        return VIL_EUSAGE;
    }
    Source s;
    if (source_open(path, o, &s, meta) != 0) return -1;
    VilConfig cfg = s.cfg;
    int rc = -1, train_grid = 0;
    if (o->img_size > 0 && o->img_size != cfg.img_size && cfg.family_kind == VIL_FAMILY_STREAM) {
        vil_error("'%s' is a stream model: it reads its images at their own %d x %d (a token a row), not at "
                  "another size; a longer sequence is a longer stream (vil eval --stream-len)", path, cfg.img_size,
                  cfg.img_size);
        goto out;
    }
    if (o->img_size > 0 && o->img_size != cfg.img_size) {
        /* evaluate at another resolution: same patches and stride, another grid, and the
         * position embedding moved onto it (doc/models.md) */
        if (cfg.stride < 1 || cfg.img_size < cfg.patch_size) {
            vil_error("'%s': the file's patch %d, stride %d and image size %d do not fit", path,
                      cfg.patch_size, cfg.stride, cfg.img_size);
            goto out;
        }
        train_grid = (cfg.img_size - cfg.patch_size) / cfg.stride + 1;
        cfg.img_size = o->img_size;
        if (cfg.img_size < cfg.patch_size || (cfg.img_size - cfg.patch_size) % cfg.stride != 0) {
            vil_error("'%s': --img-size %d does not fit patch %d with stride %d (it needs "
                      "img_size = patch + k * stride)", path, o->img_size, cfg.patch_size, cfg.stride);
            goto out;
        }
    }
    if (vil_config_finalize(&cfg) != 0) {
        vil_error("'%s': the model config it describes is invalid", path);
        goto out;
    }
    if (check_tensors(&s, path, &cfg, train_grid, 0) != 0) goto out;
    VilErrCapture cap;
    vil_error_capture(&cap);
    int init = vil_model_init(m, &cfg, be);
    vil_error_release(&cap);
    if (init != 0) { /* too large for the device, or no memory: said with the file's name */
        vil_error("'%s': %s", path, cap.msg);
        goto out;
    }
    if (load_data(&s, path, 0) != 0) {
        vil_model_free(m);
        goto out;
    }
    float *host = vil_try_calloc(m->buf_len, sizeof(float));
    if (!host) vil_error("'%s': no host memory for its %zu parameters", path, m->param_count);
    if (!host || fill_params(&s, path, m, train_grid, o->pos, 0, host) != 0 ||
        set_class_names(&s, path, cfg.num_classes, meta) != 0) {
        free(host);
        vil_model_free(m);
        goto out;
    }
    const char *ej = vil_st_meta(&s.st, META_EVAL);
    if (ej && eval_from_json(ej, path, cfg.in_chans, &meta->eval) != 0) {
        free(host);
        vil_model_free(m);
        goto out;
    }
    if (ej) snprintf(meta->eval_from, sizeof meta->eval_from, "the checkpoint");
    else if (s.pth_crop > 0) {
        meta->eval.crop_pct = s.pth_crop;
        snprintf(meta->eval_from, sizeof meta->eval_from, "the .pth's args");
    }
    int up = vil_model_set_params(m, host);
    free(host);
    if (up != 0) {
        vil_model_free(m);
        goto out;
    }
    meta->img_size = cfg.img_size;
    meta->trained_grid = train_grid;
    meta->pos_mode = o->pos;
    const char *st = vil_st_meta(&s.st, META_STEP);
    long v;
    meta->step = st && vil_parse_int(st, &v) == 0 ? v : 0;
    rc = 0;
out:
    vil_st_free(&s.st);
    if (rc != 0 && meta->class_names) { /* read before a later check failed */
        for (int i = 0; i < meta->n_classes; i++) free(meta->class_names[i]);
        free(meta->class_names);
        meta->class_names = NULL;
    }
    return rc;
}

int vil_checkpoint_init(VilModel *m, const char *path, int ema, VilCheckpointMeta *meta) {
    memset(meta, 0, sizeof *meta);
    VilCheckpointOpts o = {.ema = ema};
    Source s;
    if (source_open(path, &o, &s, meta) != 0) return -1;
    VilConfig fc = s.cfg;
    const VilConfig *c = &m->cfg;
    int rc = -1;
    if (vil_config_finalize(&fc) != 0) {
        vil_error("'%s': the model config it describes is invalid", path);
        goto out;
    }
    /* everything but the image grid and the classes must be the same network */
#define SAME(field)                                                                             \
    if (fc.field != c->field) {                                                                 \
        vil_error("--init '%s': the checkpoint's " #field " is %d, the config's %d: it is not "   \
                  "the same network (%s against %s)", path, fc.field, c->field, fc.name, c->name); \
        goto out;                                                                               \
    }
    if (fc.rec != c->rec) {
        vil_error("--init '%s' holds a %s model, the config asks for %s", path, fc.arch, c->arch);
        goto out;
    }
    SAME(family_kind) SAME(embed_dim) SAME(depth) SAME(d_state) SAME(dt_rank) SAME(expand) SAME(d_conv)
    SAME(patch_size) SAME(in_chans)
#undef SAME
    if (fc.pos_embed_kind != c->pos_embed_kind) {
        vil_error("--init '%s': the checkpoint's pos_embed is %s, the config's %s: it is not the same "
                  "network", path, fc.pos_embed, c->pos_embed);
        goto out;
    }
    int keep_head = fc.num_classes != c->num_classes;
    if (check_tensors(&s, path, c, fc.grid != c->grid ? fc.grid : 0, keep_head) != 0 ||
        load_data(&s, path, keep_head) != 0)
        goto out;
    float *host = vil_try_malloc(m->buf_len * sizeof(float));
    if (!host) {
        vil_error("'%s': no host memory for %zu parameters", path, m->param_count);
        goto out;
    }
    vil_model_get_params(m, host); /* the head keeps its fresh weights when the classes differ */
    int up = fill_params(&s, path, m, fc.grid != c->grid ? fc.grid : 0, VIL_POS_INTERP, keep_head, host);
    if (up == 0) up = vil_model_set_params(m, host);
    free(host);
    if (up != 0) goto out;
    meta->img_size = fc.img_size;
    meta->n_classes = fc.num_classes;
    meta->trained_grid = fc.grid != c->grid ? fc.grid : 0;
    meta->pos_mode = VIL_POS_INTERP;
    meta->head_kept = keep_head;
    rc = 0;
out:
    vil_st_free(&s.st);
    return rc;
}
