/* states.c: the scan's state norms along the sequence (states.h) for `vil states`: a forward on
 * training activations keeps every layer's scan inputs, and the model replays each stream of
 * state (a layer's direction) on its own backend with its per-token squared state norms
 * (vil_model_seq_states); here they become running moments over the images. */
#include "eval/states.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval/eval.h"
#include "vil/common.h"

int vil_states_init(VilStates *s, int depth, int L) {
    memset(s, 0, sizeof *s);
    s->depth = depth, s->L = L;
    size_t n = (size_t)depth * 2 * L;
    s->mean = vil_try_calloc(n, sizeof(double));
    s->m2 = vil_try_calloc(n, sizeof(double));
    s->fmean = vil_try_calloc((size_t)depth * 2, sizeof(double));
    s->fm2 = vil_try_calloc((size_t)depth * 2, sizeof(double));
    if (s->mean && s->m2 && s->fmean && s->fm2) return 0;
    vil_states_free(s);
    return -1;
}

void vil_states_free(VilStates *s) {
    free(s->mean);
    free(s->m2);
    free(s->fmean);
    free(s->fm2);
    memset(s, 0, sizeof *s);
}

void vil_states_get(const VilStates *s, int layer, int dir, int t, double *mean, double *sd) {
    size_t i = (size_t)layer * 2 + dir;
    double mu = t < 0 ? s->fmean[i] : s->mean[i * s->L + t], m2 = t < 0 ? s->fm2[i] : s->m2[i * s->L + t];
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

int vil_states_add_batch(VilStates *s, VilModel *m, const unsigned char *keep) {
    int L, S, streams = vil_model_seq_streams(m, &L, &S), B = m->acts.B;
    if (streams != 2 * s->depth || L != s->L) {
        vil_error("vil_states_add_batch: the model has %d streams of %d steps, the moments %d x 2 of %d",
                  streams, L, s->depth, s->L);
        return -1;
    }
    float *hsq = vil_try_malloc((size_t)B * L * sizeof(float)), *hT = vil_try_malloc((size_t)B * S * sizeof(float));
    long n0 = s->images, n = n0;
    for (int b = 0; b < B; b++) n += !keep || keep[b];
    int rc = -1;
    if (!hsq || !hT) goto out;
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
    }
    s->images = n;
    rc = 0;
out:
    free(hT);
    free(hsq);
    return rc;
}

int vil_states_tokens_at(const VilConfig *cfg, int img_size) {
    if (cfg->stride < 1 || img_size < cfg->patch_size || (img_size - cfg->patch_size) % cfg->stride) return 0;
    long g = (img_size - cfg->patch_size) / cfg->stride + 1;
    return g * g + 1 > (1L << 30) ? 0 : (int)(g * g + 1);
}

int vil_states_dataset(VilModel *m, VilDataset *ds, const VilEvalSpec *ev, int batch, int workers,
                       FILE *log, VilStates *s, long *bad) {
    *bad = 0;
    if (vil_states_init(s, m->cfg.depth, m->cfg.seq_len) != 0) return -1;
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
