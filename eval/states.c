/* states.c: the scan's state norms along the sequence (states.h) for `vil states`: a forward on
 * training activations keeps every layer's scan inputs, and the model replays each stream of
 * state (a layer's direction) on its own backend with its per-token squared state norms
 * (vil_model_seq_states); here they become running moments over the images. */
#include "eval/states.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval/eval.h"
#include "formats/safetensors.h"
#include "vil/common.h"

int vil_states_init(VilStates *s, int depth, int L, int readout, int S) {
    memset(s, 0, sizeof *s);
    s->depth = depth, s->L = L, s->readout = -1;
    size_t n = (size_t)depth * 2 * L;
    s->mean = vil_try_calloc(n, sizeof(double));
    s->m2 = vil_try_calloc(n, sizeof(double));
    s->fmean = vil_try_calloc((size_t)depth * 2, sizeof(double));
    s->fm2 = vil_try_calloc((size_t)depth * 2, sizeof(double));
    int ok = s->mean && s->m2 && s->fmean && s->fm2;
    if (ok && readout >= 0 && readout < L && S > 0) {
        s->readout = readout, s->S = S;
        s->rsum = vil_try_calloc((size_t)depth * 2 * S, sizeof(double));
        s->rsq = vil_try_calloc((size_t)depth * 2 * S, sizeof(double));
        s->dmean = vil_try_calloc((size_t)depth * 2, sizeof(double));
        s->dm2 = vil_try_calloc((size_t)depth * 2, sizeof(double));
        ok = s->rsum && s->rsq && s->dmean && s->dm2;
    }
    if (ok) return 0;
    vil_states_free(s);
    vil_error("the states' moments (%d layers, %d tokens) cannot be allocated", depth, L);
    return -1;
}

void vil_states_free(VilStates *s) {
    free(s->mean);
    free(s->m2);
    free(s->fmean);
    free(s->fm2);
    free(s->rsum);
    free(s->rsq);
    free(s->dmean);
    free(s->dm2);
    memset(s, 0, sizeof *s);
}

void vil_states_get(const VilStates *s, int layer, int dir, int t, double *mean, double *sd) {
    size_t i = (size_t)layer * 2 + dir;
    double mu = t < 0 ? s->fmean[i] : s->mean[i * s->L + t], m2 = t < 0 ? s->fm2[i] : s->m2[i * s->L + t];
    *mean = mu;
    *sd = s->images > 0 && m2 > 0 ? sqrt(m2 / (double)s->images) : 0.0;
}

int vil_states_readout_moments(const VilStates *s, float *mean, float *var) {
    if (!s->rsum || s->images < 1) {
        vil_error("no readout states were measured");
        return -1;
    }
    double inv = 1.0 / (double)s->images;
    for (size_t i = 0; i < (size_t)s->depth * 2 * s->S; i++) {
        double mu = s->rsum[i] * inv, v = s->rsq[i] * inv - mu * mu;
        mean[i] = (float)mu, var[i] = (float)(v > 0 ? v : 0);
    }
    return 0;
}

void vil_states_distance(const VilStates *s, int layer, int dir, double *mean, double *sd) {
    double mu = 0, m2 = 0;
    if (s->dmean && layer < 0) mu = s->amean, m2 = s->am2;
    else if (s->dmean) mu = s->dmean[(size_t)layer * 2 + dir], m2 = s->dm2[(size_t)layer * 2 + dir];
    *mean = mu;
    *sd = s->images > 0 && m2 > 0 ? sqrt(m2 / (double)s->images) : 0.0;
}

/* one image's value x into the running moments of count n (n counts this image) */
static inline void welford(double *mean, double *m2, double x, long n) {
    double d = x - *mean;
    *mean += d / (double)n;
    *m2 += d * (x - *mean);
}

int vil_states_prepare(VilModel *m, int B) {
    m->cfg.drop_path = 0.0f; /* the forward's adds read no drop-path scales (model.c dp_row) */
    m->recompute = 0;        /* every layer keeps its own u and delta */
    if (vil_model_check_acts(m, B, 1) != 0) return -1;
    return vil_model_alloc_acts(m, B, 1);
}

/* the readout state of every sample of stream k (h: B x S, scratch) into the sums, and with a
 * reference each kept sample's distance into the moments (cnt from n0) and into dsum[b] */
static int add_readout(VilStates *s, VilModel *m, int k, const unsigned char *keep, float *h, double *dsum) {
    int B = m->acts.B;
    size_t S = (size_t)s->S;
    if (vil_model_seq_state_at(m, k, s->readout, h) != 0) return -1;
    double *sum = s->rsum + (size_t)k * S, *sq = s->rsq + (size_t)k * S, tr = 0;
    const float *rm = s->ref_mean ? s->ref_mean + (size_t)k * S : NULL, *rv = rm ? s->ref_var + (size_t)k * S : NULL;
    for (size_t e = 0; rv && e < S; e++) tr += rv[e];
    long cnt = s->images;
    for (int b = 0; b < B; b++) {
        if (keep && !keep[b]) continue;
        const float *x = h + (size_t)b * S;
        double d = 0;
        for (size_t e = 0; e < S; e++) {
            sum[e] += x[e], sq[e] += (double)x[e] * x[e];
            if (rm) d += ((double)x[e] - rm[e]) * ((double)x[e] - rm[e]);
        }
        if (!rm) continue;
        d = tr > 0 ? d / tr : d > 0 ? INFINITY : 0.0;
        welford(&s->dmean[k], &s->dm2[k], d, ++cnt);
        dsum[b] += d;
    }
    return 0;
}

int vil_states_add_batch(VilStates *s, VilModel *m, const unsigned char *keep) {
    int L, S, streams = vil_model_seq_streams(m, &L, &S), B = m->acts.B;
    if (streams != 2 * s->depth || L != s->L || (s->readout >= 0 && S != s->S)) {
        vil_error("vil_states_add_batch: the model has %d streams of %d steps over %d floats, the moments %d x 2 of %d "
                  "over %d", streams, L, S, s->depth, s->L, s->S);
        return -1;
    }
    float *hsq = vil_try_malloc((size_t)B * L * sizeof(float)), *hT = vil_try_malloc((size_t)B * S * sizeof(float));
    double *dsum = vil_try_calloc((size_t)B, sizeof(double));
    long n0 = s->images, n = n0;
    for (int b = 0; b < B; b++) n += !keep || keep[b];
    int rc = -1;
    if (!hsq || !hT || !dsum) {
        vil_error("the states of a batch of %d cannot be allocated", B);
        goto out;
    }
    for (int k = 0; k < streams; k++) {
        if (vil_model_seq_states(m, k, hsq, hT) != 0) goto out;
        long cnt = n0;
        for (int b = 0; b < B; b++) {
            if (keep && !keep[b]) continue;
            cnt++;
            for (int t = 0; t < L; t++)
                welford(&s->mean[(size_t)k * L + t], &s->m2[(size_t)k * L + t], sqrt((double)hsq[(size_t)b * L + t]), cnt);
            double f = 0;
            for (size_t e = 0; e < (size_t)S; e++) f += (double)hT[(size_t)b * S + e] * hT[(size_t)b * S + e];
            welford(&s->fmean[k], &s->fm2[k], sqrt(f), cnt);
        }
        if (s->readout >= 0 && add_readout(s, m, k, keep, hT, dsum) != 0) goto out;
    }
    if (s->ref_mean) {
        long cnt = n0;
        for (int b = 0; b < B; b++)
            if (!keep || keep[b]) welford(&s->amean, &s->am2, dsum[b] / streams, ++cnt);
    }
    s->images = n;
    rc = 0;
out:
    free(dsum);
    free(hT);
    free(hsq);
    return rc;
}

int vil_states_ref_save(const VilStates *s, const char *path, const char *model, int img_size) {
    size_t n = (size_t)s->depth * 2 * s->S;
    float *mean = vil_try_malloc(n * sizeof(float)), *var = vil_try_malloc(n * sizeof(float));
    int rc = -1;
    if (!mean || !var) {
        vil_error("%s: out of memory", path);
        goto out;
    }
    if (vil_states_readout_moments(s, mean, var) != 0) goto out;
    VilStWriter *w = vil_st_writer_new();
    int64_t shape[3] = {s->depth, 2, s->S};
    vil_st_writer_add(w, "mean", VIL_ST_F32, 3, shape, mean);
    vil_st_writer_add(w, "var", VIL_ST_F32, 3, shape, var);
    char v[64];
    vil_st_writer_meta(w, "format", "vil-readout-states");
    vil_st_writer_meta(w, "model", model);
    snprintf(v, sizeof v, "%d", img_size);
    vil_st_writer_meta(w, "img_size", v);
    snprintf(v, sizeof v, "%d", s->L);
    vil_st_writer_meta(w, "tokens", v);
    snprintf(v, sizeof v, "%d", s->readout);
    vil_st_writer_meta(w, "readout_token", v);
    snprintf(v, sizeof v, "%ld", s->images);
    vil_st_writer_meta(w, "images", v);
    rc = vil_st_writer_save(w, path);
    vil_st_writer_free(w);
out:
    free(mean);
    free(var);
    return rc;
}

int vil_states_ref_load(const char *path, int depth, int S, float **mean, float **var, char *meta, size_t n) {
    *mean = *var = NULL;
    VilSafetensors st;
    if (vil_st_read(path, &st) != 0) return -1;
    const VilStTensor *t[2] = {vil_st_find(&st, "mean"), vil_st_find(&st, "var")};
    const char *f = vil_st_meta(&st, "format");
    int rc = -1;
    if (!f || strcmp(f, "vil-readout-states") != 0 || !t[0] || !t[1]) {
        vil_error("%s: not a readout reference (vil states writes one as OUT/readout.safetensors: tensors mean and "
                  "var, format vil-readout-states)", path);
        goto out;
    }
    for (int k = 0; k < 2; k++)
        if (t[k]->ndim != 3 || t[k]->shape[0] != depth || t[k]->shape[1] != 2 || t[k]->shape[2] != S) {
            vil_error("%s: its %s is not (%d, 2, %d), this model's layers and state: another model's reference", path,
                      k ? "var" : "mean", depth, S);
            goto out;
        }
    size_t cnt = (size_t)depth * 2 * S;
    *mean = vil_try_malloc(cnt * sizeof(float)), *var = vil_try_malloc(cnt * sizeof(float));
    if (!*mean || !*var || vil_st_to_f32(t[0], *mean) != 0 || vil_st_to_f32(t[1], *var) != 0) {
        vil_error("%s: its moments cannot be read", path);
        goto out;
    }
    const char *sz = vil_st_meta(&st, "img_size"), *im = vil_st_meta(&st, "images");
    snprintf(meta, n, "%s px, %s images", sz ? sz : "?", im ? im : "?");
    rc = 0;
out:
    if (rc != 0) {
        free(*mean), free(*var);
        *mean = *var = NULL;
    }
    vil_st_free(&st);
    return rc;
}

int vil_states_tokens_at(const VilConfig *cfg, int img_size) {
    if (cfg->stride < 1 || img_size < cfg->patch_size || (img_size - cfg->patch_size) % cfg->stride) return 0;
    long g = (img_size - cfg->patch_size) / cfg->stride + 1;
    return g * g + 1 > (1L << 30) ? 0 : (int)(g * g + 1);
}

int vil_states_dataset(VilModel *m, VilDataset *ds, const VilEvalSpec *ev, int batch, int workers,
                       const float *ref_mean, const float *ref_var, FILE *log, VilStates *s, long *bad) {
    *bad = 0;
    int L, S;
    vil_model_seq_streams(m, &L, &S);
    if (vil_states_init(s, m->cfg.depth, m->cfg.seq_len, m->cfg.cls_pos, S) != 0) return -1;
    if (ref_mean && s->readout >= 0) s->ref_mean = ref_mean, s->ref_var = ref_var;
    batch = vil_eval_batch(ds, batch, 0);
    if (vil_states_prepare(m, batch) != 0) return -1;
    VilLoader *l = vil_eval_loader(m, ds, ev, batch, workers, NULL);
    if (!l) return -1;
    vil_loader_start_epoch(l, 0);
    long total = vil_dataset_size(ds), step = total / 10 > 0 ? total / 10 : 1, next_log = step;
    unsigned char *keep = vil_try_malloc((size_t)batch);
    double t0 = vil_now();
    int rc = -1;
    const VilBatch *b;
    while (keep && (b = vil_loader_next_batch(l))) {
        for (int i = 0; i < b->batch; i++) {
            keep[i] = i < b->n && b->labels[i] >= 0; /* an unreadable file has no label */
            *bad += i < b->n && !keep[i];
        }
        vil_model_upload_inputs(m, b->images, NULL);
        vil_loader_release_batch(l, b);
        vil_model_forward(m, 0);
        if (vil_states_add_batch(s, m, keep) != 0) goto out;
        long seen = s->images + *bad;
        if (log && (seen >= next_log || seen >= total)) {
            fprintf(log, "  %6ld / %ld images  %7.1f s\n", seen, total, vil_now() - t0);
            fflush(log);
            while (next_log <= seen) next_log += step;
        }
    }
    const char *err = keep ? vil_loader_error(l) : "no memory for the batch's flags";
    if (err) {
        vil_error("states: %s", err);
        goto out;
    }
    rc = 0;
out:
    free(keep);
    vil_loader_free(l);
    return rc;
}
