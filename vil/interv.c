/* interv.c: the initial-state interventions of the recurrent families (interv.h; doc/recipe.md
 * "Initial states"): their buffers, the draws and the fit queued on the backend's state ops, and
 * their named training state. Nothing here knows which family or backend runs it. */
#include "interv.h"

#include <string.h>

#include "common.h"
#include "dist.h"

void vil_interv_init(VilInterv *s, int dirs, VilIntervNoun noun) {
    memset(s, 0, sizeof *s);
    s->dirs = dirs, s->noun = noun;
}

void vil_interv_free(VilModel *m, VilInterv *s) {
    float *ib[5] = {s->h0, s->hT, s->mean, s->var, s->mom};
    for (int i = 0; i < 5; i++)
        if (ib[i]) m->be->free(m->be, ib[i]);
}

/* h0 and hT for a batch of B (a new batch forgets the passed states); 0, or -1 (reported)
 * with none held */
static int init_batch(VilModel *m, VilInterv *s, int B) {
    if (s->mode == VIL_INIT_ZERO || s->B == B) return 0;
    if (s->h0) m->be->free(m->be, s->h0), m->be->free(m->be, s->hT);
    size_t n = (size_t)m->cfg.depth * B * s->S;
    s->h0 = vil_net_zeros(m, n);
    s->hT = s->h0 ? vil_net_zeros(m, n) : NULL;
    s->B = B, s->has_prev = 0, s->h0_set = 0;
    if (s->hT) return 0;
    if (s->h0) m->be->free(m->be, s->h0);
    s->h0 = NULL, s->B = 0;
    vil_error("the initial states of a batch of %d (%.2f GiB) cannot be allocated on the %s device", B,
              2.0 * n * sizeof(float) / 1073741824.0, m->be->name);
    return -1;
}

/* floats of one sample's states in every layer (depth x dirs N E): the moments, a passed batch's sample */
static size_t fit_floats(const VilModel *m, const VilInterv *s) {
    return (size_t)m->cfg.depth * s->dirs * m->cfg.d_state * m->cfg.d_inner;
}
/* state elements sharing one mean and var of fit: 1, or a direction's N E */
static int fit_group(const VilModel *m, VilInitFit fit) {
    return fit == VIL_INIT_FIT_SCALAR ? m->cfg.d_state * m->cfg.d_inner : 1;
}
/* floats of the fit's mean (and of its var) */
static size_t stat_floats(const VilModel *m, const VilInterv *s, VilInitFit fit) {
    return fit_floats(m, s) / (size_t)fit_group(m, fit);
}

/* fitted's running fit for fit (kept when it has that size already); 0, or -1 (reported)
 * with s as it was */
static int alloc_fit(VilModel *m, VilInterv *s, VilInitFit fit) {
    size_t n = fit_floats(m, s), k = stat_floats(m, s, fit);
    if (s->mean && s->stats == k) return 0;
    float *mean = vil_net_zeros(m, k), *var = mean ? vil_net_zeros(m, k) : NULL;
    float *mom = var && !s->mom ? vil_net_zeros(m, 2 * n) : s->mom;
    if (!var || !mom) {
        if (mean) m->be->free(m->be, mean);
        if (var) m->be->free(m->be, var);
        vil_error("init_state = fitted: its running fit (%.2f GiB) cannot be allocated on the %s device",
                  (2.0 * k + 2.0 * n) * sizeof(float) / 1073741824.0, m->be->name);
        return -1;
    }
    if (s->mean) m->be->free(m->be, s->mean), m->be->free(m->be, s->var);
    s->mean = mean, s->var = var, s->mom = mom, s->stats = k;
    s->fits = 0;
    return 0;
}

int vil_interv_set(VilModel *m, VilInterv *s, const VilInitSpec *spec, int B) {
    if (spec->mode == VIL_INIT_FITTED && alloc_fit(m, s, spec->fit) != 0) return -1;
    s->mode = spec->mode, s->sigma = spec->sigma, s->drop = spec->drop, s->batch = B;
    s->fit = spec->fit, s->mean_only = spec->fit_mean_only, s->keep = spec->fit_momentum;
    s->fit_drop = spec->fit_drop;
    s->S = s->dirs * m->cfg.d_state * m->cfg.d_inner;
    /* the states of the training batch now, where a failure is the setup's: the training
     * forwards of that batch then allocate nothing */
    if (init_batch(m, s, B) != 0) {
        s->mode = VIL_INIT_ZERO;
        return -1;
    }
    return 0;
}

size_t vil_interv_extra_bytes(const VilModel *m, const VilInterv *s, int B) {
    /* held already (vil_interv_set makes them for its batch): the device's free memory says so */
    return s->mode != VIL_INIT_ZERO && s->B != B ? 2 * (size_t)m->cfg.depth * B * s->S * sizeof(float) : 0;
}

int vil_interv_sample(VilModel *m, VilInterv *s, uint64_t seed, long first) {
    s->h0_set = 0;
    if (s->mode == VIL_INIT_ZERO || !m->acts.training) return 0;
    if (init_batch(m, s, m->acts.B) != 0) return -1;
    int passing = s->mode == VIL_INIT_PASSING, fitted = s->mode == VIL_INIT_FITTED;
    /* nothing passed yet, nothing fitted yet: a zero start */
    if ((passing && !s->has_prev) || (fitted && s->fits == 0)) return 0;
    size_t ls = (size_t)s->B * s->S;
    int g = fit_group(m, s->fit);
    size_t lk = (size_t)(s->S / g); /* a layer's means */
    for (int i = 0; i < m->cfg.depth; i++)
        m->be->state_init(m->be, &(VilStateInit){
            .h0 = s->h0 + i * ls, .prev = passing ? s->hT + i * ls : NULL,
            .mean = fitted ? s->mean + i * lk : NULL, .var = fitted ? s->var + i * lk : NULL,
            .sigma = s->sigma, .drop = passing ? s->drop : fitted ? s->fit_drop : 0.0f,
            .group = fitted ? g : 1, .mean_only = fitted && s->mean_only,
            .seed = vil_hash_seed(seed, (uint64_t)i, 0, 0), .first = first, .B = s->B, .S = s->S});
    s->h0_set = 1;
    return 0;
}

void vil_interv_fit(VilModel *m, VilInterv *s, const VilDist *dist) {
    if (!m->acts.training || s->B != m->acts.B) return;
    if (s->mode == VIL_INIT_PASSING) s->has_prev = 1;
    if (s->mode != VIL_INIT_FITTED) return;
    size_t n = fit_floats(m, s), ls = (size_t)s->B * s->S;
    for (int i = 0; i < m->cfg.depth; i++)
        m->be->state_moments(m->be, &(VilStateMoments){.sum = s->mom + (size_t)i * s->S,
                                                       .sq = s->mom + n + (size_t)i * s->S,
                                                       .hT = s->hT + i * ls, .B = s->B, .S = s->S});
    float count = (float)s->B;
    if (dist && dist->mpi) {
        m->be->grad_allreduce(m->be, &(VilAllReduce){.buf = s->mom, .n = 2 * n, .dist = dist});
        count *= (float)dist->world;
    }
    m->be->state_fit(m->be, &(VilStateFit){.mean = s->mean, .var = s->var, .sum = s->mom, .sq = s->mom + n,
                                           .n = n, .group = (size_t)fit_group(m, s->fit), .count = count,
                                           .keep = s->fits ? s->keep : 0.0f});
    s->fits++;
}

const float *vil_interv_h0(const VilModel *m, const VilInterv *s, int i) {
    return m->acts.training && s->h0_set ? s->h0 + (size_t)i * s->B * s->S : NULL;
}

float *vil_interv_hT(const VilModel *m, const VilInterv *s, int i) {
    int wants = s->mode == VIL_INIT_FITTED || s->mode == VIL_INIT_PASSING;
    return m->acts.training && wants && s->B == m->acts.B ? s->hT + (size_t)i * s->B * s->S : NULL;
}

/* ---------------- the training state ---------------- */

/* After the optimizer's and the EMA's: fitted's running mean and var (depth, dirs, N, E), or
 * (depth, dirs) for the scalar fit, with the count of their updates; passing's final states of
 * the last micro-batch of this rank (depth, B, dirs, N, E), zero where nothing is passed yet. A
 * layer of one direction has no direction axis but in the scalar fit's shape. */
enum { ST_MEAN, ST_VAR, ST_PREV };
static int state_kind(const VilInterv *s, int i) {
    if (s->mode == VIL_INIT_FITTED) return i == 0 ? ST_MEAN : ST_VAR;
    return ST_PREV;
}

int vil_interv_state_count(const VilInterv *s) {
    return s->mode == VIL_INIT_FITTED ? 2 : s->mode == VIL_INIT_PASSING ? 1 : 0;
}

/* t's shape: the leading dimensions lead[0..nl), the directions when there are several, N, E */
static void state_shape(const VilModel *m, const VilInterv *s, VilTrainStateInfo *t, const int64_t *lead, int nl) {
    t->ndim = 0;
    for (int d = 0; d < nl; d++) t->shape[t->ndim++] = lead[d];
    if (s->dirs > 1) t->shape[t->ndim++] = s->dirs;
    t->shape[t->ndim++] = m->cfg.d_state;
    t->shape[t->ndim++] = m->cfg.d_inner;
}

VilTrainStateInfo vil_interv_state_info(const VilModel *m, const VilInterv *s, int i) {
    const VilConfig *c = &m->cfg;
    VilTrainStateInfo t = {.optional = 1};
    int k = state_kind(s, i), dirs = s->dirs > 1;
    if (k == ST_PREV) {
        t.name = "init_state_prev";
        t.per_rank = 1;
        state_shape(m, s, &t, (const int64_t[]){c->depth, s->batch}, 2);
        t.dims = dirs ? "layers, batch, directions, d_state, d_inner" : "layers, batch, d_state, d_inner";
        t.numel = (size_t)s->batch * fit_floats(m, s);
        t.absent = s->noun.prev_absent;
        t.mismatch = s->noun.prev_mismatch;
    } else {
        t.name = k == ST_MEAN ? "init_state_mean" : "init_state_var";
        t.absent = "the state has no fitted initial states (init_state was not fitted): the fit starts now";
        t.nonneg = k == ST_VAR;
        t.group = 1;
        t.count_key = k == ST_MEAN ? "vil.init_state_fits" : NULL;
        if (s->fit == VIL_INIT_FIT_SCALAR) {
            t.ndim = 2, t.shape[0] = c->depth, t.shape[1] = s->dirs;
            t.dims = "layers, directions";
        } else {
            state_shape(m, s, &t, (const int64_t[]){c->depth}, 1);
            t.dims = dirs ? "layers, directions, d_state, d_inner" : "layers, d_state, d_inner";
        }
        t.numel = stat_floats(m, s, s->fit);
    }
    t.room = t.numel;
    return t;
}

void vil_interv_state_get(const VilModel *m, const VilInterv *s, int i, float *host) {
    size_t n = fit_floats(m, s) * sizeof(float);
    int k = state_kind(s, i);
    if (k == ST_MEAN) m->be->to_host(m->be, host, s->mean, s->stats * sizeof(float));
    else if (k == ST_VAR) m->be->to_host(m->be, host, s->var, s->stats * sizeof(float));
    else if (s->B == s->batch && s->has_prev) m->be->to_host(m->be, host, s->hT, n * s->batch);
    else memset(host, 0, n * s->batch);
}

int vil_interv_state_set(VilModel *m, VilInterv *s, int i, const float *host) {
    size_t n = fit_floats(m, s) * sizeof(float);
    int k = state_kind(s, i);
    if (k == ST_PREV) {
        if (host) {
            if (init_batch(m, s, s->batch) != 0) return -1;
            m->be->to_device(m->be, s->hT, host, n * (size_t)s->batch);
        }
        s->has_prev = host != NULL;
        return 0;
    }
    float *dst = k == ST_MEAN ? s->mean : s->var;
    if (host) m->be->to_device(m->be, dst, host, s->stats * sizeof(float));
    else m->be->zero(m->be, dst, s->stats * sizeof(float));
    if (k == ST_MEAN && !host) s->fits = 0; /* no fit yet */
    return 0;
}

/* the fit's updates, saved beside its mean */
long vil_interv_state_counter(const VilInterv *s, int i) { return state_kind(s, i) == ST_MEAN ? s->fits : 0; }
void vil_interv_state_set_counter(VilInterv *s, int i, long count) {
    if (state_kind(s, i) == ST_MEAN) s->fits = count;
}
