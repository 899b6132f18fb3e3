/* model.c: the ViL / ViM network written once against the VilBackend op table: the parameter
 * table in the official checkpoint order, initialization, the activation layout, and the
 * forward, backward and optimizer sequences. Nothing here knows which backend runs it. */
#include "model.h"
#include "limits.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "dist.h"

/* ---------------- parameter table ---------------- */

/* The x_dbl layout: [dt_low | 0 | k | q | 0]. cuBLASLt runs a product 1.2-2.5x faster when its
 * inner size and row strides are multiples of 8 elements (cuda/PERF_NOTES.md), so
 *  - dt_low is padded with zero columns to dt_ld = R rounded up to 8, which is dt_proj's inner
 *    size (ViL-Tiny 12 -> 16): x_proj's weight carries zero rows between its dt rows and its B
 *    rows (VilParamInfo.gap), and dt_proj's weight rows are dt_ld apart with zero columns
 *    (VilParamInfo.ld);
 *  - the rows are xdbl_ld = dt_ld + 2N rounded up to 8 wide, x_proj's output count: its weight
 *    carries zero rows after the C rows (VilParamInfo.pad).
 * The zero rows of x_proj's weight make x_dbl's padding columns exactly 0, so dt_proj's padded
 * weight columns (0) meet 0 and its weight gradient there is 0; dt_proj's input gradient writes
 * 0 into dx_dbl's gap columns and the trailing ones are zeroed at allocation, so x_proj's weight
 * gradient is 0 on its padding rows and its input gradient gets nothing from them. The scan
 * finds k at column dt_ld. */
static int dt_ld(const VilConfig *c) { return (c->dt_rank + 7) / 8 * 8; }
static int xdbl_ld_of(const VilConfig *c) { return (dt_ld(c) + 2 * c->d_state + 7) / 8 * 8; }
void vil_model_xdbl_layout(const VilConfig *c, int *dl, int *xdbl_ld) {
    *dl = dt_ld(c);
    *xdbl_ld = xdbl_ld_of(c);
}

static size_t p_rows(const VilParamInfo *p) { return p->ndim ? (size_t)p->shape[0] : 1; }
static size_t p_srow(const VilParamInfo *p, size_t r) { return r < p->gap_at ? r : r + p->gap; }

size_t vil_param_extent(const VilParamInfo *p) { return (p_rows(p) + p->gap) * p->ld + p->pad; }

void vil_param_load(const VilParamInfo *p, float *dense, const float *stored) {
    size_t rows = p_rows(p), cols = p->numel / rows;
    for (size_t r = 0; r < rows; r++) /* forward: dense row r never passes stored row r */
        memmove(dense + r * cols, stored + p_srow(p, r) * p->ld, cols * sizeof(float));
}

void vil_param_store(const VilParamInfo *p, float *stored, const float *dense) {
    size_t rows = p_rows(p), cols = p->numel / rows;
    memset(stored + vil_param_extent(p) - p->pad, 0, p->pad * sizeof(float));
    for (size_t r = rows; r-- > 0;) { /* backward, so that in place the sources are read first */
        float *row = stored + p_srow(p, r) * p->ld;
        memmove(row, dense + r * cols, cols * sizeof(float));
        memset(row + cols, 0, (p->ld - cols) * sizeof(float));
    }
    memset(stored + p->gap_at * p->ld, 0, p->gap * p->ld * sizeof(float));
}


#define PARAM_ALIGN 64 /* elements: 256 bytes of the f32 master, 128 of the bf16 working copy */

typedef struct {
    VilParamInfo *info;
    int n, cap;
    size_t total, count; /* elements with padding; parameters */
} Table;

static size_t add(Table *t, int decay, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
#include <stdarg.h>
static size_t add(Table *t, int decay, int ndim, const int64_t *shape, const char *fmt, ...) {
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->info = vil_realloc(t->info, (size_t)t->cap * sizeof(VilParamInfo));
    }
    VilParamInfo *p = &t->info[t->n++];
    memset(p, 0, sizeof *p);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->name, sizeof p->name, fmt, ap);
    va_end(ap);
    p->ndim = ndim;
    p->numel = 1;
    for (int i = 0; i < ndim; i++) {
        p->shape[i] = shape[i];
        p->numel *= (size_t)shape[i];
    }
    /* every tensor starts at a multiple of PARAM_ALIGN elements: with tensors packed end to end,
     * a head of 10 or 1001 classes (added early) left every layer's bf16 weights only 4- or
     * 2-byte aligned, and cuBLASLt's products ran 1.5-2.6x slower (ViL-Tiny at batch 256:
     * 57.1 ms per step with 1000 classes, 65.1 with 10, 75.9 with 1001). The gaps hold zeros. */
    t->total = (t->total + PARAM_ALIGN - 1) / PARAM_ALIGN * PARAM_ALIGN;
    p->offset = t->total;
    p->decay = decay;
    p->ld = p->numel / p_rows(p), p->gap_at = p_rows(p);
    t->total += p->numel;
    t->count += p->numel;
    return p->offset;
}
/* the stored layout of the last tensor added (see VilParamInfo) */
static void relayout_last(Table *t, size_t ld, size_t gap_at, size_t gap, size_t pad) {
    VilParamInfo *p = &t->info[t->n - 1];
    p->ld = ld, p->gap_at = gap_at, p->gap = gap, p->pad = pad;
    t->total = p->offset + vil_param_extent(p);
}

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define NDIM(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define ADD(decay, shape_args, ...) add(&t, decay, NDIM shape_args, SHAPE shape_args, __VA_ARGS__)

/* Builds the table; off may be NULL (counting only). */
static void build_table(const VilConfig *c, Table *tab, VilParamOffsets *off) {
    Table t = {0};
    int64_t D = c->embed_dim, E = c->d_inner, N = c->d_state, R = c->dt_rank, K = c->d_conv;
    const VilRecParam *rp = &vil_recurrences[c->rec].param;
    VilParamOffsets o = {0};
    /* no weight decay: 1-D tensors, pos_embed, cls_token */
    o.cls = ADD(0, (1, 1, D), "cls_token");
    o.pos = ADD(0, (1, c->seq_len, D), "pos_embed");
    o.patch_w = ADD(1, (D, c->in_chans, c->patch_size, c->patch_size), "patch_embed.proj.weight");
    o.patch_b = ADD(0, (D), "patch_embed.proj.bias");
    o.head_w = ADD(1, (c->num_classes, D), "head.weight");
    o.head_b = ADD(0, (c->num_classes), "head.bias");
    if (off) o.layer = vil_calloc((size_t)c->depth, sizeof(VilLayerOffsets));
    for (int i = 0; i < c->depth; i++) {
        VilLayerOffsets l = {0};
        int first = t.n;
        const char *sfx[2] = {"", "_b"};
        for (int j = 0; j < 2; j++) {
            if (rp->key) { /* the recurrence's own parameter */
                int64_t shape[4];
                int nd = (int)strlen(rp->dims);
                for (int d = 0; d < nd; d++) shape[d] = rp->dims[d] == 'N' ? N : E;
                l.A_log[j] = add(&t, 1, nd, shape, rp->key, i, sfx[j]);
            }
            l.D[j] = ADD(0, (E), "layers.%d.mixer.D%s", i, sfx[j]);
        }
        l.in_proj = ADD(1, (2 * E, D), "layers.%d.mixer.in_proj.weight", i);
        for (int j = 0; j < 2; j++) {
            l.conv_w[j] = ADD(1, (E, 1, K), "layers.%d.mixer.conv1d%s.weight", i, sfx[j]);
            l.conv_b[j] = ADD(0, (E), "layers.%d.mixer.conv1d%s.bias", i, sfx[j]);
            /* padded to x_dbl's layout (dt_ld, xdbl_ld) */
            l.x_proj[j] = ADD(1, (R + 2 * N, E), "layers.%d.mixer.x_proj%s.weight", i, sfx[j]);
            relayout_last(&t, E, R, dt_ld(c) - R, (size_t)(xdbl_ld_of(c) - dt_ld(c) - 2 * N) * E);
            l.dt_w[j] = ADD(1, (E, R), "layers.%d.mixer.dt_proj%s.weight", i, sfx[j]);
            relayout_last(&t, dt_ld(c), E, 0, 0);
            l.dt_b[j] = ADD(0, (E), "layers.%d.mixer.dt_proj%s.bias", i, sfx[j]);
        }
        l.out_proj = ADD(1, (D, E), "layers.%d.mixer.out_proj.weight", i);
        l.norm = ADD(0, (D), "layers.%d.norm.weight", i);
        l.begin = t.info[first].offset;
        if (off) o.layer[i] = l;
    }
    o.norm_f = ADD(0, (D), "norm_f.weight");
    *tab = t;
    if (off) *off = o;
}

size_t vil_model_count_params(const VilConfig *cfg) {
    Table t;
    build_table(cfg, &t, NULL);
    free(t.info);
    return t.count;
}

VilParamInfo *vil_model_param_table(const VilConfig *cfg, int *n) {
    Table t;
    build_table(cfg, &t, NULL);
    *n = t.n;
    return t.info;
}

/* with more bytes than a device reports free, an allocation would fail deep inside a run: say
 * so up front with the numbers (mem_free 0: the backend cannot tell) */
static int fits(const VilBackend *be, size_t bytes, const char *what, const char *hint) {
    size_t avail = be->mem_free ? be->mem_free(be) : 0;
    if (!avail || bytes <= avail) return 0;
    vil_error("%s need %.2f GiB, and the %s device has %.2f GiB free: %s", what,
              bytes / 1073741824.0, be->name, avail / 1073741824.0, hint);
    return -1;
}

double vil_model_macs(const VilConfig *c) {
    double L = c->seq_len, M = c->n_patches, D = c->embed_dim, E = c->d_inner, N = c->d_state;
    double R = c->dt_rank, K = c->d_conv, P = c->patch_size;
    double dir = L * E * K               /* causal depthwise conv1d */
                 + L * E * (R + 2 * N)   /* x_proj */
                 + L * R * E             /* dt_proj */
                 + 3 * L * E * N;        /* the scan: state update (2) and readout (1) per element */
    double layer = L * D * 2 * E + 2 * dir + L * E * D; /* in_proj, both directions, out_proj */
    return M * D * c->in_chans * P * P + c->depth * layer + D * c->num_classes;
}

int vil_model_init(VilModel *m, const VilConfig *cfg, const VilBackend *be) {
    memset(m, 0, sizeof *m);
    size_t count = vil_model_count_params(cfg);
    if (count > (size_t)VIL_MAX_PARAMS) {
        vil_error("%s: %zu parameters, more than vil takes (%lld)", cfg->name, count, (long long)VIL_MAX_PARAMS);
        return -1;
    }
    /* master, gradients and the working copy */
    size_t bytes = count * (2 * sizeof(float) + be->work_bytes);
    char what[128];
    snprintf(what, sizeof what, "the parameters of %s (%zu)", cfg->name, count);
    if (fits(be, bytes, what, "a smaller model, or another device") != 0) return -1;
    m->cfg = *cfg;
    m->be = be;
    m->use_graph = 1;
    Table t;
    build_table(cfg, &t, &m->off);
    m->info = t.info;
    m->n_tensors = t.n;
    m->buf_len = t.total;
    m->param_count = t.count;
    m->params = be->alloc(be, m->buf_len * sizeof(float));
    m->grads = be->alloc(be, m->buf_len * sizeof(float));
    be->zero(be, m->grads, m->buf_len * sizeof(float));
    m->work = be->work_bytes ? be->alloc(be, m->buf_len * be->work_bytes) : m->params;
    return 0;
}

/* the recorded forwards, which name the activations' buffers, given back */
static void drop_graphs(VilModel *m) {
    for (int i = 0; i < 2; i++) {
        if (m->graphs[i].g) m->be->graph_free(m->be, m->graphs[i].g);
        memset(&m->graphs[i], 0, sizeof m->graphs[i]);
    }
}

void vil_model_free_acts(VilModel *m) {
    drop_graphs(m);
    if (m->acts.base) m->be->free(m->be, m->acts.base);
    free(m->acts.layer);
    memset(&m->acts, 0, sizeof m->acts);
}

void vil_model_free(VilModel *m) {
    if (!m->be) return;
    vil_model_free_acts(m);
    if (m->work && m->work != m->params) m->be->free(m->be, m->work);
    m->be->free(m->be, m->params);
    m->be->free(m->be, m->grads);
    for (int i = 0; i < VIL_OPTIM_MAX_STATE; i++)
        if (m->optim_state[i]) m->be->free(m->be, m->optim_state[i]);
    if (m->ema) m->be->free(m->be, m->ema);
    if (m->grad_norm) m->be->free(m->be, m->grad_norm);
    if (m->decay_mask) m->be->free(m->be, m->decay_mask);
    if (m->spans) m->be->free(m->be, m->spans);
    float *ib[5] = {m->init.h0, m->init.hT, m->init.mean, m->init.var, m->init.mom};
    for (int i = 0; i < 5; i++)
        if (ib[i]) m->be->free(m->be, ib[i]);
    free(m->info);
    free(m->off.layer);
    memset(m, 0, sizeof *m);
}

const VilParamInfo *vil_model_find_param(const VilModel *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->info[i].name, name) == 0) return &m->info[i];
    return NULL;
}

void vil_model_pack(const VilModel *m, float *packed, const float *buf) {
    size_t at = 0; /* packed offsets never pass buffer offsets: forward is safe in place */
    for (int i = 0; i < m->n_tensors; i++) {
        vil_param_load(&m->info[i], packed + at, buf + m->info[i].offset);
        at += m->info[i].numel;
    }
}

/* zeros between the tensors' extents (PARAM_ALIGN gaps) and after the last */
static void zero_gaps(const VilModel *m, float *buf) {
    size_t end = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const VilParamInfo *p = &m->info[i];
        memset(buf + end, 0, (p->offset - end) * sizeof(float));
        end = p->offset + vil_param_extent(p);
    }
    memset(buf + end, 0, (m->buf_len - end) * sizeof(float));
}

void vil_model_unpack(const VilModel *m, float *buf, const float *packed) {
    size_t at = m->param_count; /* backwards, so that in place the sources are read first */
    for (int i = m->n_tensors - 1; i >= 0; i--) {
        const VilParamInfo *p = &m->info[i];
        at -= p->numel;
        vil_param_store(p, buf + p->offset, packed + at);
    }
    zero_gaps(m, buf);
}

void vil_model_get_params(const VilModel *m, float *host) {
    m->be->to_host(m->be, host, m->params, m->buf_len * sizeof(float));
}

void vil_model_set_params(VilModel *m, const float *host) {
    /* the padding (inside tensors, and the gaps between them) is zeroed whatever the host buffer
     * held there: packing drops it and unpacking writes zeros there */
    float *tmp = vil_malloc(m->buf_len * sizeof(float));
    memcpy(tmp, host, m->buf_len * sizeof(float));
    vil_model_pack(m, tmp, tmp);
    vil_model_unpack(m, tmp, tmp);
    m->be->to_device(m->be, m->params, tmp, m->buf_len * sizeof(float));
    free(tmp);
    if (m->be->params_to_work) m->be->params_to_work(m->be, m->work, m->params, m->buf_len);
}

/* ---------------- initialization (doc/models.md) ---------------- */

static const VilParamInfo *param_at(const VilModel *m, size_t offset) {
    for (int i = 0; i < m->n_tensors; i++)
        if (m->info[i].offset == offset) return &m->info[i];
    VIL_FATAL("no parameter at offset %zu", offset);
}

/* standard normal truncated to [lo, hi] by rejection */
static float trunc_normal(VilRng *r, float lo, float hi) {
    for (;;) {
        float x = vil_rng_normal(r);
        if (x >= lo && x <= hi) return x;
    }
}

static void fill_uniform(float *p, size_t n, float bound, VilRng *r) {
    for (size_t i = 0; i < n; i++) p[i] = (2.0f * vil_rng_uniform(r) - 1.0f) * bound;
}

void vil_model_init_weights(VilModel *m, uint64_t seed) {
    const VilConfig *c = &m->cfg;
    float *h = vil_calloc(m->buf_len, sizeof(float));
    VilRng r;
    vil_rng_seed(&r, seed);
    const VilParamOffsets *o = &m->off;
    int D = c->embed_dim, E = c->d_inner, N = c->d_state, R = c->dt_rank, K = c->d_conv;
    /* cls_token, pos_embed: trunc normal std .02 (timm's bounds are +-2 absolute: no effect) */
    for (int i = 0; i < D; i++) h[o->cls + i] = 0.02f * trunc_normal(&r, -100.f, 100.f);
    for (size_t i = 0; i < (size_t)c->seq_len * D; i++)
        h[o->pos + i] = 0.02f * trunc_normal(&r, -100.f, 100.f);
    /* patch_embed: lecun normal as timm: N(0,1) truncated to +-2, scaled so std = 1/sqrt(fan_in) */
    int fan = c->in_chans * c->patch_size * c->patch_size;
    float std = sqrtf(1.0f / fan) / 0.87962566103423978f;
    for (size_t i = 0; i < (size_t)D * fan; i++) h[o->patch_w + i] = std * trunc_normal(&r, -2, 2);
    /* head: trunc normal std .02, bias 0 */
    for (size_t i = 0; i < (size_t)c->num_classes * D; i++)
        h[o->head_w + i] = 0.02f * trunc_normal(&r, -100.f, 100.f);
    for (int l = 0; l < c->depth; l++) {
        const VilLayerOffsets *lo = &o->layer[l];
        /* Linear weights: kaiming uniform a = sqrt(5), i.e. U(+-1/sqrt(fan_in)) */
        fill_uniform(h + lo->in_proj, (size_t)2 * E * D, 1.0f / sqrtf((float)D), &r);
        fill_uniform(h + lo->out_proj, (size_t)D * E, 1.0f / sqrtf((float)E) / sqrtf((float)c->depth), &r);
        for (int j = 0; j < 2; j++) {
            for (int e = 0; e < E; e++) h[lo->D[j] + e] = 1.0f;
            const VilRecurrenceInfo *ri = &vil_recurrences[c->rec];
            if (ri->param.key) {
                int nd = ri->param.dims[1] ? N : 1;
                for (int e = 0; e < E; e++)
                    for (int n = 0; n < nd; n++) h[lo->A_log[j] + (size_t)e * nd + n] = ri->param.init(n);
            }
            /* conv1d: PyTorch default, fan_in = K (depthwise) */
            fill_uniform(h + lo->conv_w[j], (size_t)E * K, 1.0f / sqrtf((float)K), &r);
            fill_uniform(h + lo->conv_b[j], (size_t)E, 1.0f / sqrtf((float)K), &r);
            /* drawn as the dense tensors, then laid out with their padding */
            fill_uniform(h + lo->x_proj[j], (size_t)(R + 2 * N) * E, 1.0f / sqrtf((float)E), &r);
            vil_param_store(param_at(m, lo->x_proj[j]), h + lo->x_proj[j], h + lo->x_proj[j]);
            fill_uniform(h + lo->dt_w[j], (size_t)E * R, 1.0f / sqrtf((float)R), &r);
            vil_param_store(param_at(m, lo->dt_w[j]), h + lo->dt_w[j], h + lo->dt_w[j]);
            /* dt_proj bias: ViL "zero" (official Longhorn) leaves 0, beta starts at 0.5;
             * ViM's forward direction and ViL's "vim" option draw dt0 ~ logUniform[1e-3, 1e-1]
             * (>= 1e-4) and invert the activation (softplus for ViM, sigmoid for ViL). */
            int draw = ri->dt_draw_forward ? j == 0 : strcmp(c->dt_init, "vim") == 0;
            for (int e = 0; e < E; e++) {
                float b = 0.0f;
                if (draw) {
                    float dt = expf(vil_rng_uniform(&r) * (logf(0.1f) - logf(1e-3f)) + logf(1e-3f));
                    if (dt < 1e-4f) dt = 1e-4f;
                    b = ri->delta_of_dt(dt);
                }
                h[lo->dt_b[j] + e] = b;
            }
        }
        for (int d = 0; d < D; d++) h[lo->norm + d] = 1.0f;
    }
    for (int d = 0; d < D; d++) h[o->norm_f + d] = 1.0f;
    vil_model_set_params(m, h);
    free(h);
}

/* ---------------- activations ---------------- */

typedef struct {
    char *base;
    size_t off;
} Arena;

static void *carve(Arena *a, size_t n, size_t elem) {
    size_t bytes = (n * elem + 255) / 256 * 256;
    void *p = a->base ? a->base + a->off : NULL;
    a->off += bytes;
    return p;
}

static void layout_acts(VilModel *m, Arena *a, int B, int training) {
    const VilConfig *c = &m->cfg;
    VilActs *x = &m->acts;
    size_t ab = m->be->act_bytes, f = sizeof(float);
    size_t BL = (size_t)B * c->seq_len, D = c->embed_dim, E = c->d_inner;
    size_t xdbl_ld = (size_t)xdbl_ld_of(c), NC = c->num_classes;
    x->img = carve(a, (size_t)B * c->in_chans * c->img_size * c->img_size, f);
    x->patches = carve(a, (size_t)B * c->n_patches * D, ab);
    int nsets = training ? c->depth : 1;
    /* the scan's kept states: training only, where the backend keeps them at this shape */
    const VilScanFwd shape = {.rec = c->rec,
                              .B = B, .L = c->seq_len, .E = c->d_inner, .N = c->d_state};
    size_t states = training && m->be->scan_states_bytes ? m->be->scan_states_bytes(m->be, &shape) : 0;
    for (int i = 0; i < nsets; i++) {
        VilLayerActs *l = &x->layer[i];
        l->res = carve(a, BL * D, f);
        l->rstd = carve(a, BL, f);
        l->normed = carve(a, BL * D, ab);
        l->xz = carve(a, BL * 2 * E, ab);
        /* recomputed in the backward: layer 0's serve all */
        int rc = training ? m->recompute : VIL_RECOMPUTE_NONE;
        int own_u = i == 0 || rc != VIL_RECOMPUTE_ALL, own_delta = i == 0 || rc == VIL_RECOMPUTE_NONE;
        for (int j = 0; j < 2; j++) {
            l->u[j] = own_u ? carve(a, BL * E, ab) : x->layer[0].u[j];
            l->xdbl[j] = carve(a, BL * xdbl_ld, ab);
            l->delta[j] = own_delta ? carve(a, BL * E, ab) : x->layer[0].delta[j];
        }
        /* training: the scan backward makes ysum again for out_proj's weight gradient, so every
         * layer's forward writes it into dysum (set below), which the forward does not use */
        l->ysum = training ? NULL : carve(a, BL * E, ab);
        l->scan_states = states ? carve(a, states, 1) : NULL;
    }
    for (int i = nsets; i < c->depth; i++) x->layer[i] = x->layer[0];
    x->h = carve(a, BL * D, ab);
    x->res_f = carve(a, BL * D, f);
    x->rstd_f = carve(a, BL, f);
    x->normed_f = carve(a, BL * D, ab);
    x->logits = carve(a, (size_t)B * NC, f);
    x->probs = carve(a, (size_t)B * NC, f);
    x->losses = carve(a, (size_t)B, f);
    x->targets = carve(a, (size_t)B * NC, f);
    x->dp_scale = carve(a, (size_t)(c->depth + 1) * B, f);
    x->own_img = x->img, x->own_targets = x->targets, x->own_dp_scale = x->dp_scale;
    if (training) {
        x->dres = carve(a, BL * D, f);
        x->dxz = carve(a, BL * 2 * E, ab);
        for (int j = 0; j < 2; j++) {
            x->du[j] = carve(a, BL * E, ab);
            x->dxdbl[j] = carve(a, BL * xdbl_ld, ab);
        }
        x->dysum = carve(a, BL * E, ab);
        for (int i = 0; i < c->depth; i++) x->layer[i].ysum = x->dysum;
        /* buffers whose lives do not meet (E >= D): dnormed is written by in_proj's backward and
         * read by the norm's, between the scan backward that reads dysum and the next
         * out_proj backward that writes it; dh (written by the norm's backward, read by the
         * next out_proj's two products, on both sides of the scan backward) lies in normed_f,
         * which only the head's backward reads, before the first dh; dpatches after every layer */
        int share = E >= D;
        x->dnormed = share ? x->dysum : carve(a, BL * D, ab);
        x->dh = x->normed_f;
        x->dpatches = share ? x->du[1] : carve(a, (size_t)B * c->n_patches * D, ab);
        x->dlogits = carve(a, (size_t)B * NC, f);
        if (m->input_grad) x->dimg = carve(a, (size_t)B * c->in_chans * c->img_size * c->img_size, f);
    }
}

size_t vil_model_acts_bytes(const VilModel *m, int B, int training) {
    VilModel t = *m;
    memset(&t.acts, 0, sizeof t.acts);
    t.acts.layer = vil_calloc((size_t)m->cfg.depth, sizeof(VilLayerActs));
    Arena a = {0};
    layout_acts(&t, &a, B, training);
    free(t.acts.layer);
    /* an initial-state intervention's h0 and hT (vil_model_set_init_state) */
    if (training && m->init.mode != VIL_INIT_ZERO) a.off += 2 * (size_t)m->cfg.depth * B * m->init.S * sizeof(float);
    return a.off;
}

int vil_model_check_acts(const VilModel *m, int B, int training) {
    const VilConfig *c = &m->cfg;
    char what[160];
    snprintf(what, sizeof what, "%s activations of a batch of %d at %d px",
             training ? "The training" : "The", B, c->img_size);
    /* the ops index a (B * L, 2E) tensor with 32-bit integers */
    if (B < 1 || (double)B * c->seq_len * 2 * c->d_inner >= 2147483648.0) {
        vil_error("%s: %d x %d tokens x %d channels is past what the ops index (2^31 elements): "
                  "lower the batch or the image size", what, B, c->seq_len, 2 * c->d_inner);
        return -1;
    }
    return fits(m->be, vil_model_acts_bytes(m, B, training), what,
                training && m->recompute != VIL_RECOMPUTE_ALL
                    ? "lower the batch or the image size, or set recompute = 1 (46% less) or 2 (23% less)"
                                          : "lower the batch or the image size");
}

void vil_model_alloc_acts(VilModel *m, int B, int training) {
    if (m->acts.base && m->acts.B == B && m->acts.training == training &&
        m->acts.recompute == (training ? m->recompute : VIL_RECOMPUTE_NONE) &&
        (m->acts.dimg != NULL) == (training && m->input_grad))
        return;
    vil_model_free_acts(m);
    m->acts.layer = vil_calloc((size_t)m->cfg.depth, sizeof(VilLayerActs));
    Arena a = {0};
    layout_acts(m, &a, B, training);
    a.base = m->be->alloc(m->be, a.off);
    m->acts.bytes = a.off;
    a.off = 0;
    layout_acts(m, &a, B, training);
    m->acts.base = a.base;
    m->acts.B = B;
    m->acts.training = training;
    m->acts.recompute = training ? m->recompute : VIL_RECOMPUTE_NONE;
    if (training) /* dx_dbl's padding columns must be 0 (xdbl_ld); nothing writes them later */
        for (int j = 0; j < 2; j++)
            m->be->zero(m->be, m->acts.dxdbl[j], (size_t)B * m->cfg.seq_len * xdbl_ld_of(&m->cfg) * m->be->act_bytes);
}

/* ---------------- forward / backward ---------------- */

/* working copy of a matrix weight; f32 master of any other parameter */
static const void *Wt(const VilModel *m, size_t off) {
    size_t eb = m->be->work_bytes ? m->be->work_bytes : sizeof(float);
    return (const char *)m->work + off * eb;
}
static const float *Pm(const VilModel *m, size_t off) { return m->params + off; }
static float *Gr(const VilModel *m, size_t off) { return m->grads + off; }
/* act pointer plus an element offset */
static void *Ao(const VilModel *m, void *p, size_t elems) {
    return (char *)p + elems * m->be->act_bytes;
}

/* drop-path scale row i (the add in front of norm i, i = depth for norm_f), or NULL */
static const float *dp_row(const VilModel *m, int i) {
    if (!m->acts.training || m->cfg.drop_path <= 0.0f) return NULL;
    return m->acts.dp_scale + (size_t)i * m->acts.B;
}

size_t vil_model_drop_path_bytes(const VilModel *m) {
    if (!m->acts.training || m->cfg.drop_path <= 0.0f) return 0;
    return (size_t)(m->cfg.depth + 1) * m->acts.B * sizeof(float);
}

void vil_model_drop_path_rows(const VilModel *m, uint64_t seed, long first, float *h) {
    const VilConfig *c = &m->cfg;
    int B = m->acts.B;
    for (int b = 0; b < B; b++) {
        VilRng r;
        vil_rng_seed(&r, vil_hash_seed(seed, (uint64_t)(first + b), 0, 0));
        for (int i = 0; i <= c->depth; i++) {
            /* rates: block i (1..depth-1) uses linspace(0, rate, depth)[i - 1]; the final add
             * the full rate; block 0 has no add */
            float p = i == c->depth ? c->drop_path
                      : i == 0      ? 0.0f
                                    : (c->depth > 1 ? c->drop_path * (float)(i - 1) / (float)(c->depth - 1) : 0.0f);
            h[(size_t)i * B + b] = p > 0.0f ? (vil_rng_uniform(&r) < p ? 0.0f : 1.0f / (1.0f - p)) : 1.0f;
        }
    }
}

void vil_model_sample_drop_path(VilModel *m, uint64_t seed) {
    size_t bytes = vil_model_drop_path_bytes(m);
    if (!bytes) return;
    float *h = vil_malloc(bytes);
    vil_model_drop_path_rows(m, seed, 0, h);
    m->be->to_device(m->be, m->acts.dp_scale, h, bytes);
    free(h);
}

/* u = SiLU(conv1d(x)) of both directions in one pass over x */
static void conv_forward(VilModel *m, const VilLayerOffsets *o, VilLayerActs *l) {
    const VilConfig *c = &m->cfg;
    m->be->conv1d_silu_bidir_forward(m->be, &(VilConvBidirFwd){
        .u = {l->u[0], l->u[1]}, .x = l->xz,
        .w = {Pm(m, o->conv_w[0]), Pm(m, o->conv_w[1])}, .b = {Pm(m, o->conv_b[0]), Pm(m, o->conv_b[1])},
        .B = m->acts.B, .L = c->seq_len, .E = c->d_inner, .K = c->d_conv, .ldx = 2 * c->d_inner});
}
/* delta = dt_proj(dt_low) of direction j */
static void delta_forward(VilModel *m, const VilLayerOffsets *o, VilLayerActs *l, int j) {
    const VilConfig *c = &m->cfg;
    m->be->linear_forward(m->be, &(VilLinearFwd){.out = l->delta[j], .in = l->xdbl[j], .w = Wt(m, o->dt_w[j]),
                                                 .b = Pm(m, o->dt_b[j]), .N = m->acts.B * c->seq_len,
                                                 .C = dt_ld(c), .OC = c->d_inner, .ld_in = xdbl_ld_of(c),
                                                 .ld_out = c->d_inner});
}

/* layer i's initial states (NULL: zero) and where its final states go (NULL: nowhere), in
 * training forwards with an intervention (vil_model_set_init_state) */
static const float *layer_h0(const VilModel *m, int i) {
    const VilInitState *s = &m->init;
    return m->acts.training && s->h0_set ? s->h0 + (size_t)i * s->B * s->S : NULL;
}
static float *layer_hT(const VilModel *m, int i) {
    const VilInitState *s = &m->init;
    int wants = s->mode == VIL_INIT_FITTED || s->mode == VIL_INIT_PASSING;
    return m->acts.training && wants && s->B == m->acts.B ? s->hT + (size_t)i * s->B * s->S : NULL;
}

static void mixer_forward(VilModel *m, const VilLayerOffsets *o, VilLayerActs *l, void *out, int i) {
    const VilBackend *be = m->be;
    const VilConfig *c = &m->cfg;
    int B = m->acts.B, L = c->seq_len, D = c->embed_dim, E = c->d_inner, N = c->d_state;
    int dl = dt_ld(c), xdbl_ld = xdbl_ld_of(c), BL = B * L;
    int has_A = vil_recurrences[c->rec].param.key != NULL;
    be->linear_forward(be, &(VilLinearFwd){.out = l->xz, .in = l->normed, .w = Wt(m, o->in_proj),
                                           .N = BL, .C = D, .OC = 2 * E, .ld_in = D, .ld_out = 2 * E});
    /* both directions' conv1d in one pass over x */
    conv_forward(m, o, l);
    for (int j = 0; j < 2; j++) {
        be->linear_forward(be, &(VilLinearFwd){.out = l->xdbl[j], .in = l->u[j], .w = Wt(m, o->x_proj[j]),
                                               .N = BL, .C = E, .OC = xdbl_ld, .ld_in = E, .ld_out = xdbl_ld});
        delta_forward(m, o, l, j);
    }
    be->scan_bidir_forward(be, &(VilScanFwd){
        .rec = c->rec, .out = l->ysum,
        .u = {l->u[0], l->u[1]}, .delta = {l->delta[0], l->delta[1]}, .xdbl = {l->xdbl[0], l->xdbl[1]},
        .z = Ao(m, l->xz, E), .D = {Pm(m, o->D[0]), Pm(m, o->D[1])},
        .A_log = {has_A ? Pm(m, o->A_log[0]) : NULL, has_A ? Pm(m, o->A_log[1]) : NULL},
        .B = B, .L = L, .E = E, .N = N, .dt_ld = dl, .xdbl_ld = xdbl_ld, .ldz = 2 * E,
        .states = m->acts.training ? l->scan_states : NULL, .h0 = layer_h0(m, i), .hT = layer_hT(m, i)});
    be->linear_forward(be, &(VilLinearFwd){.out = out, .in = l->ysum, .w = Wt(m, o->out_proj),
                                           .N = BL, .C = E, .OC = D, .ld_in = E, .ld_out = D});
}

static void forward_ops(VilModel *m, int with_loss);

void vil_model_forward(VilModel *m, int with_loss) {
    const VilBackend *be = m->be;
    if (with_loss || m->acts.training || !m->use_graph || !be->graph_begin) {
        forward_ops(m, with_loss);
        return;
    }
    /* the inference forward: replay its recording for these inputs and weights, or record it
     * the second time they come (the first sizes every scratch buffer and plan), or run it */
    struct VilGraphSlot *s = NULL;
    for (int i = 0; i < 2; i++)
        if (m->graphs[i].img == m->acts.img && m->graphs[i].params == m->params) s = &m->graphs[i];
    if (s && s->g) {
        if (be->graph_launch(be, s->g) == 0) return;
        be->graph_free(be, s->g); /* a scratch buffer moved: record it again */
        s->g = NULL;
    }
    if (!s) {
        s = &m->graphs[m->graph_next];
        m->graph_next ^= 1;
        if (s->g) be->graph_free(be, s->g);
        *s = (struct VilGraphSlot){.img = m->acts.img, .params = m->params};
        forward_ops(m, 0);
        return;
    }
    if (be->graph_begin(be) == 0) {
        forward_ops(m, 0);
        s->g = be->graph_end(be);
        if (s->g && be->graph_launch(be, s->g) == 0) return;
    }
    forward_ops(m, 0); /* not recorded: it needed new scratch memory (or capture is off) */
}

static void forward_ops(VilModel *m, int with_loss) {
    const VilBackend *be = m->be;
    const VilConfig *c = &m->cfg;
    VilActs *a = &m->acts;
    const VilParamOffsets *o = &m->off;
    int B = a->B, L = c->seq_len, D = c->embed_dim;
    be->patch_embed_forward(be, &(VilPatchEmbedFwd){
        .out = a->patches, .img = a->img, .w = Wt(m, o->patch_w), .b = Pm(m, o->patch_b), .B = B,
        .C = c->in_chans, .H = c->img_size, .W = c->img_size, .P = c->patch_size, .S = c->stride, .D = D});
    be->tokens_forward(be, &(VilTokensFwd){.x = a->layer[0].res, .patches = a->patches, .cls = Pm(m, o->cls),
                                           .pos = Pm(m, o->pos), .B = B, .M = c->n_patches, .D = D,
                                           .t = c->cls_pos});
    for (int i = 0; i < c->depth; i++) {
        VilLayerActs *l = &a->layer[i];
        VilNormFwd nf = {.res_out = l->res, .normed = l->normed, .rstd = l->rstd,
                         .w = Pm(m, o->layer[i].norm), .B = B, .L = L, .D = D};
        if (i > 0) nf.res_in = a->layer[i - 1].res, nf.h = a->h, nf.scale = dp_row(m, i);
        be->add_rmsnorm_forward(be, &nf);
        mixer_forward(m, &o->layer[i], l, a->h, i);
    }
    be->add_rmsnorm_forward(be, &(VilNormFwd){.res_out = a->res_f, .normed = a->normed_f, .rstd = a->rstd_f,
                                              .res_in = a->layer[c->depth - 1].res, .h = a->h,
                                              .scale = dp_row(m, c->depth), .w = Pm(m, o->norm_f),
                                              .B = B, .L = L, .D = D});
    /* the head reads only the class token's row of each sample: stride L*D, offset t*D */
    be->linear_forward(be, &(VilLinearFwd){.out = a->logits, .in = Ao(m, a->normed_f, (size_t)c->cls_pos * D),
                                           .w = Wt(m, o->head_w), .b = Pm(m, o->head_b), .N = B, .C = D,
                                           .OC = c->num_classes, .ld_in = L * D, .ld_out = c->num_classes,
                                           .flags = VIL_LINEAR_OUT_F32});
    if (with_loss)
        be->softmax_xent_forward(be, &(VilXentFwd){.loss = a->losses, .probs = a->probs, .logits = a->logits,
                                                   .targets = a->targets, .B = B, .C = c->num_classes});
}

static void mixer_backward(VilModel *m, const VilLayerOffsets *o, VilLayerActs *l, int i) {
    const VilBackend *be = m->be;
    const VilConfig *c = &m->cfg;
    VilActs *a = &m->acts;
    int B = a->B, L = c->seq_len, D = c->embed_dim, E = c->d_inner, N = c->d_state;
    int dl = dt_ld(c), xdbl_ld = xdbl_ld_of(c), BL = B * L;
    int has_A = vil_recurrences[c->rec].param.key != NULL;
    be->linear_backward(be, &(VilLinearBwd){.dinp = a->dysum, .dout = a->dh, .w = Wt(m, o->out_proj),
                                            .N = BL, .C = E, .OC = D, .ld_in = E, .ld_out = D});
    /* what this layer did not keep, again by the forward's own ops */
    if (a->recompute == VIL_RECOMPUTE_ALL) conv_forward(m, o, l);
    if (a->recompute != VIL_RECOMPUTE_NONE)
        for (int j = 0; j < 2; j++) delta_forward(m, o, l, j);
    /* the scan also sums ddelta over the tokens: dt_proj's bias gradient. ddelta is written
     * over delta, which nothing reads after the scan */
    be->scan_bidir_backward(be, &(VilScanBwd){
        .rec = c->rec,
        .du = {a->du[0], a->du[1]}, .ddelta = {l->delta[0], l->delta[1]},
        .dxdbl = {a->dxdbl[0], a->dxdbl[1]}, .dz = Ao(m, a->dxz, E),
        .dD = {Gr(m, o->D[0]), Gr(m, o->D[1])},
        .dA_log = {has_A ? Gr(m, o->A_log[0]) : NULL, has_A ? Gr(m, o->A_log[1]) : NULL},
        .ddelta_sum = {Gr(m, o->dt_b[0]), Gr(m, o->dt_b[1])}, .dout = a->dysum,
        .u = {l->u[0], l->u[1]}, .delta = {l->delta[0], l->delta[1]}, .xdbl = {l->xdbl[0], l->xdbl[1]},
        .z = Ao(m, l->xz, E), .D = {Pm(m, o->D[0]), Pm(m, o->D[1])},
        .A_log = {has_A ? Pm(m, o->A_log[0]) : NULL, has_A ? Pm(m, o->A_log[1]) : NULL},
        .B = B, .L = L, .E = E, .N = N, .dt_ld = dl, .xdbl_ld = xdbl_ld, .ldz = 2 * E, .states = l->scan_states,
        .h0 = layer_h0(m, i), .out = a->dxz});
    /* out_proj's weight gradient from the gated output the scan made again (in dxz's x half,
     * rows as dz's in the z half; the conv1d backward writes the x half next) */
    be->linear_backward(be, &(VilLinearBwd){.dw = Gr(m, o->out_proj), .dout = a->dh, .in = a->dxz,
                                            .w = Wt(m, o->out_proj), .N = BL, .C = E, .OC = D,
                                            .ld_in = 2 * E, .ld_out = D});
    for (int j = 0; j < 2; j++) {
        /* dt_proj: its input gradient fills the dt_low columns of dx_dbl (k, q came from the
         * scan); its bias gradient came from the scan too */
        be->linear_backward(be, &(VilLinearBwd){.dinp = a->dxdbl[j], .dw = Gr(m, o->dt_w[j]),
                                                .dout = l->delta[j], .in = l->xdbl[j], .w = Wt(m, o->dt_w[j]),
                                                .N = BL, .C = dl, .OC = E, .ld_in = xdbl_ld, .ld_out = E});
        /* x_proj: adds to the scan's du; xdbl_ld outputs with the weight's zero padding rows (dx_dbl's
         * padding columns are 0) */
        be->linear_backward(be, &(VilLinearBwd){.dinp = a->du[j], .dw = Gr(m, o->x_proj[j]),
                                                .dout = a->dxdbl[j], .in = l->u[j], .w = Wt(m, o->x_proj[j]),
                                                .N = BL, .C = E, .OC = xdbl_ld, .ld_in = E, .ld_out = xdbl_ld,
                                                .accumulate_dinp = 1});
    }
    /* both directions read x: one pass writes the sum of their input gradients */
    be->conv1d_silu_bidir_backward(be, &(VilConvBidirBwd){
        .dx = a->dxz, .dw = {Gr(m, o->conv_w[0]), Gr(m, o->conv_w[1])},
        .db = {Gr(m, o->conv_b[0]), Gr(m, o->conv_b[1])}, .du = {a->du[0], a->du[1]}, .x = l->xz,
        .w = {Pm(m, o->conv_w[0]), Pm(m, o->conv_w[1])}, .b = {Pm(m, o->conv_b[0]), Pm(m, o->conv_b[1])},
        .B = B, .L = L, .E = E, .K = c->d_conv, .ldx = 2 * E});
    be->linear_backward(be, &(VilLinearBwd){.dinp = a->dnormed, .dw = Gr(m, o->in_proj), .dout = a->dxz,
                                            .in = l->normed, .w = Wt(m, o->in_proj), .N = BL, .C = D,
                                            .OC = 2 * E, .ld_in = D, .ld_out = 2 * E});
}

/* The backward's gradient buckets (m->sync): the gradients at [lo, buf_len) are final; those
 * not yet sent go to the all-reduce once they come to bucket_bytes, or when `last`: after layer 0
 * (so only the embeddings' and the head's wait for the end of the backward) and at the end. The
 * buffer is filled from its end: norm_f, the layers from the last, then the embeddings and the
 * head (whose gradients, made first, sit at its start). */
static void grads_ready(VilModel *m, size_t lo, int last) {
    if (!m->sync.dist || m->sync.hi == lo) return;
    if (!last && (m->sync.hi - lo) * sizeof(float) < m->sync.bucket_bytes) return;
    m->be->grad_allreduce(m->be, &(VilAllReduce){.buf = m->grads + lo, .n = m->sync.hi - lo,
                                                 .async = 1, .dist = m->sync.dist});
    m->sync.hi = lo;
}

void vil_model_backward(VilModel *m) {
    const VilBackend *be = m->be;
    const VilConfig *c = &m->cfg;
    VilActs *a = &m->acts;
    const VilParamOffsets *o = &m->off;
    if (!a->training) VIL_FATAL("vil_model_backward needs activations allocated for training");
    int B = a->B, L = c->seq_len, D = c->embed_dim, NC = c->num_classes;
    m->sync.hi = m->buf_len;
    be->softmax_xent_backward(be, &(VilXentBwd){.dlogits = a->dlogits, .probs = a->probs,
                                                .targets = a->targets, .B = B, .C = NC,
                                                .denom = m->loss_denom > 0 ? m->loss_denom : B});
    be->zero(be, a->dnormed, (size_t)B * L * D * be->act_bytes);
    be->linear_backward(be, &(VilLinearBwd){
        .dinp = Ao(m, a->dnormed, (size_t)c->cls_pos * D), .dw = Gr(m, o->head_w), .db = Gr(m, o->head_b),
        .dout = a->dlogits, .in = Ao(m, a->normed_f, (size_t)c->cls_pos * D), .w = Wt(m, o->head_w),
        .N = B, .C = D, .OC = NC, .ld_in = L * D, .ld_out = NC, .flags = VIL_LINEAR_OUT_F32});
    be->zero(be, a->dres, (size_t)B * L * D * sizeof(float));
    be->add_rmsnorm_backward(be, &(VilNormBwd){.dres = a->dres, .dh = a->dh, .dw = Gr(m, o->norm_f),
                                               .dnormed = a->dnormed, .res_out = a->res_f, .rstd = a->rstd_f,
                                               .w = Pm(m, o->norm_f), .scale = dp_row(m, c->depth),
                                               .B = B, .L = L, .D = D});
    for (int i = c->depth - 1; i >= 0; i--) {
        VilLayerActs *l = &a->layer[i];
        mixer_backward(m, &o->layer[i], l, i);
        be->add_rmsnorm_backward(be, &(VilNormBwd){.dres = a->dres, .dh = i > 0 ? a->dh : NULL,
                                                   .dw = Gr(m, o->layer[i].norm), .dnormed = a->dnormed,
                                                   .res_out = l->res, .rstd = l->rstd,
                                                   .w = Pm(m, o->layer[i].norm),
                                                   .scale = i > 0 ? dp_row(m, i) : NULL, .B = B, .L = L, .D = D});
        grads_ready(m, o->layer[i].begin, i == 0);
    }
    be->tokens_backward(be, &(VilTokensBwd){.dpatches = a->dpatches, .dcls = Gr(m, o->cls), .dpos = Gr(m, o->pos),
                                            .dx = a->dres, .B = B, .M = c->n_patches, .D = D, .t = c->cls_pos});
    be->patch_embed_backward(be, &(VilPatchEmbedBwd){
        .dimg = a->dimg, .dw = Gr(m, o->patch_w), .db = Gr(m, o->patch_b), .dout = a->dpatches,
        .w = Wt(m, o->patch_w), .img = a->img, .B = B, .C = c->in_chans, .H = c->img_size,
        .W = c->img_size, .P = c->patch_size, .S = c->stride, .D = D});
    grads_ready(m, 0, 1);
}

void vil_model_zero_grad(VilModel *m) { m->be->zero(m->be, m->grads, m->buf_len * sizeof(float)); }

void vil_model_init_training(VilModel *m, const VilOptim *opt, int ema) {
    const VilBackend *be = m->be;
    size_t bytes = m->buf_len * sizeof(float);
    if (!m->optim) {
        m->optim = opt;
        for (int i = 0; i < opt->n_state; i++) m->optim_state[i] = be->alloc(be, bytes);
        for (int i = 0; i < opt->n_state; i++) be->zero(be, m->optim_state[i], bytes);
    } else if (opt != m->optim) {
        VIL_FATAL("vil_model_init_training with optimizer %s after %s", opt->name, m->optim->name);
    }
    if (ema && !m->ema) {
        float *host = vil_malloc(bytes);
        vil_model_get_params(m, host);
        m->ema = be->alloc(be, bytes);
        be->to_device(be, m->ema, host, bytes);
        free(host);
    }
    if (!m->grad_norm) m->grad_norm = be->alloc(be, sizeof(float));
    if (!m->decay_mask) {
        /* the tensors are contiguous in the parameter buffer: one update over all of them, with
         * a byte per element saying whether weight decay applies */
        unsigned char *h = vil_calloc(m->buf_len, 1);
        for (int i = 0; i < m->n_tensors; i++)
            memset(h + m->info[i].offset, m->info[i].decay ? 1 : 0, vil_param_extent(&m->info[i]));
        m->decay_mask = be->alloc(be, m->buf_len);
        be->to_device(be, m->decay_mask, h, m->buf_len);
        free(h);
    }
    if (!m->spans) {
        /* per-tensor optimizers (Lamb) find the tensors here */
        VilSpan *h = vil_malloc((size_t)m->n_tensors * sizeof *h);
        for (int i = 0; i < m->n_tensors; i++) h[i] = (VilSpan){m->info[i].offset, vil_param_extent(&m->info[i])};
        m->spans = be->alloc(be, (size_t)m->n_tensors * sizeof *h);
        be->to_device(be, m->spans, h, (size_t)m->n_tensors * sizeof *h);
        free(h);
    }
}

int vil_model_train_state_count(const VilModel *m) {
    return (m->optim ? m->optim->n_state : 0) + (m->ema ? 1 : 0);
}

VilTrainStateInfo vil_model_train_state_info(const VilModel *m, int i) {
    int n = vil_model_train_state_count(m);
    if (i < 0 || i >= n) VIL_FATAL("training state tensor %d of %d", i, n);
    if (m->optim && i < m->optim->n_state)
        return (VilTrainStateInfo){.name = m->optim->state[i].name, .nonneg = m->optim->state[i].nonneg};
    return (VilTrainStateInfo){.name = "ema", .optional = 1};
}

/* the backend buffer of training state tensor i */
static float *train_state_buf(const VilModel *m, int i) {
    vil_model_train_state_info(m, i); /* range check */
    if (m->optim && i < m->optim->n_state) return m->optim_state[i];
    return m->ema_active ? m->params : m->ema; /* the EMA, wherever vil_model_use_ema put it */
}

void vil_model_train_state_get(const VilModel *m, int i, float *host) {
    m->be->to_host(m->be, host, train_state_buf(m, i), m->buf_len * sizeof(float));
    vil_model_pack(m, host, host);
}

void vil_model_train_state_set(VilModel *m, int i, const float *packed) {
    float *dst = train_state_buf(m, i), *host = vil_malloc(m->buf_len * sizeof(float));
    if (packed) {
        memcpy(host, packed, m->param_count * sizeof(float));
        vil_model_unpack(m, host, host);
    } else if (m->optim && i < m->optim->n_state) {
        memset(host, 0, m->buf_len * sizeof(float));
    } else {
        vil_model_get_params(m, host);
    }
    m->be->to_device(m->be, dst, host, m->buf_len * sizeof(float));
    free(host);
}

int vil_model_optim_steps(const VilModel *m) { return m->step; }

void vil_model_optim_set_steps(VilModel *m, int steps) { m->step = steps; }

void vil_model_clip_grad(VilModel *m, float max_norm) {
    if (!m->grad_norm) m->grad_norm = m->be->alloc(m->be, sizeof(float));
    m->be->grad_clip(m->be, &(VilGradClip){.g = m->grads, .n = m->buf_len, .max_norm = max_norm,
                                           .norm = m->grad_norm});
}

float vil_model_grad_norm(const VilModel *m) {
    float norm = -1.0f;
    if (m->grad_norm) m->be->to_host(m->be, &norm, m->grad_norm, sizeof norm);
    return norm;
}

void vil_model_optim_step(VilModel *m, const VilOptimHyper *h) {
    const VilBackend *be = m->be;
    if (m->ema_active) VIL_FATAL("an optimizer step with the EMA weights in use (vil_model_use_ema)");
    vil_model_init_training(m, m->optim ? m->optim : &vil_optim_adamw, 0);
    m->step++;
    VilOptimBufs b = {.p = m->params, .work = be->work_bytes ? m->work : NULL, .g = m->grads,
                      .decay = m->decay_mask, .spans = m->spans, .n_spans = m->n_tensors,
                      .n = m->buf_len, .step = m->step};
    for (int i = 0; i < m->optim->n_state; i++) b.state[i] = m->optim_state[i];
    m->optim->update(be, &b, h);
}

void vil_model_allreduce_grads(VilModel *m, const struct VilDist *dist) {
    m->be->grad_allreduce(m->be, &(VilAllReduce){.buf = m->grads, .n = m->buf_len, .dist = dist});
}

void vil_model_allreduce_wait(VilModel *m) {
    m->be->grad_allreduce_wait(m->be, &(VilAllReduceWait){.dist = m->sync.dist});
}

void vil_model_ema_update(VilModel *m, float decay) {
    if (!m->ema || m->ema_active) VIL_FATAL("vil_model_ema_update without an EMA, or with it in use");
    m->be->ema_update(m->be, &(VilEma){.ema = m->ema, .p = m->params, .n = m->buf_len, .decay = decay});
}

void vil_model_use_ema(VilModel *m, int on) {
    if (!m->ema) VIL_FATAL("vil_model_use_ema without an EMA (vil_model_init_training)");
    if (!!on == m->ema_active) return;
    float *p = m->params;
    m->params = m->ema;
    m->ema = p;
    m->ema_active = !!on;
    if (!m->be->work_bytes) m->work = m->params;
    else m->be->params_to_work(m->be, m->work, m->params, m->buf_len);
}

int vil_model_batch(const VilModel *m) { return m->acts.B; }
int vil_model_has_ema(const VilModel *m) { return m->ema != NULL; }

void vil_model_input_buffers(const VilModel *m, void *dev[3]) {
    dev[0] = m->acts.own_img;
    dev[1] = m->acts.own_targets;
    dev[2] = m->acts.own_dp_scale;
}

void vil_model_upload_inputs(VilModel *m, const float *img, const float *targets) {
    const VilConfig *c = &m->cfg;
    size_t B = (size_t)m->acts.B;
    m->be->to_device(m->be, m->acts.img, img, B * c->in_chans * c->img_size * c->img_size * sizeof(float));
    if (targets) m->be->to_device(m->be, m->acts.targets, targets, B * c->num_classes * sizeof(float));
}

int vil_model_losses(const VilModel *m, float *host) {
    m->be->to_host(m->be, host, m->acts.losses, (size_t)m->acts.B * sizeof(float));
    return m->acts.B;
}

int vil_model_logits(const VilModel *m, float *host) {
    m->be->to_host(m->be, host, m->acts.logits, (size_t)m->acts.B * m->cfg.num_classes * sizeof(float));
    return m->acts.B;
}

void vil_model_set_inputs(VilModel *m, float *img, float *targets, float *dp_scale) {
    VilActs *a = &m->acts;
    a->img = img ? img : a->own_img;
    a->targets = targets ? targets : a->own_targets;
    a->dp_scale = dp_scale ? dp_scale : a->own_dp_scale;
}

/* ---------------- the initial-state interventions ---------------- */

const char *const vil_init_mode_names[VIL_INIT_COUNT] = {"zero", "noise", "fitted", "passing"};

int vil_init_mode_find(const char *name) {
    for (int i = 0; i < VIL_INIT_COUNT; i++)
        if (strcmp(name, vil_init_mode_names[i]) == 0) return i;
    return -1;
}

static float *init_buffer(VilModel *m, size_t n) {
    float *p = m->be->alloc(m->be, n * sizeof(float));
    m->be->zero(m->be, p, n * sizeof(float));
    return p;
}

/* h0 and hT for a batch of B (a new batch forgets the passed states) */
static void init_batch(VilModel *m, int B) {
    VilInitState *s = &m->init;
    if (s->mode == VIL_INIT_ZERO || s->B == B) return;
    if (s->h0) m->be->free(m->be, s->h0), m->be->free(m->be, s->hT);
    size_t n = (size_t)m->cfg.depth * B * s->S;
    s->h0 = init_buffer(m, n), s->hT = init_buffer(m, n);
    s->B = B, s->has_prev = 0, s->h0_set = 0;
}

void vil_model_set_init_state(VilModel *m, VilInitMode mode, float sigma, float drop) {
    VilInitState *s = &m->init;
    s->mode = mode, s->sigma = sigma, s->drop = drop;
    s->S = 2 * m->cfg.d_state * m->cfg.d_inner;
    if (mode == VIL_INIT_FITTED && !s->mean) {
        size_t n = vil_model_init_state_fit_floats(m);
        s->mean = init_buffer(m, n), s->var = init_buffer(m, n), s->mom = init_buffer(m, 2 * n);
        s->fits = 0;
    }
}

void vil_model_sample_init_state(VilModel *m, uint64_t seed, long first) {
    VilInitState *s = &m->init;
    s->h0_set = 0;
    if (s->mode == VIL_INIT_ZERO || !m->acts.training) return;
    init_batch(m, m->acts.B);
    int passing = s->mode == VIL_INIT_PASSING, fitted = s->mode == VIL_INIT_FITTED;
    /* nothing passed yet, nothing fitted yet: a zero start */
    if ((passing && !s->has_prev) || (fitted && s->fits == 0)) return;
    size_t ls = (size_t)s->B * s->S;
    for (int i = 0; i < m->cfg.depth; i++)
        m->be->state_init(m->be, &(VilStateInit){
            .h0 = s->h0 + i * ls, .prev = passing ? s->hT + i * ls : NULL,
            .mean = fitted ? s->mean + (size_t)i * s->S : NULL, .var = fitted ? s->var + (size_t)i * s->S : NULL,
            .sigma = s->sigma, .drop = s->drop, .seed = vil_hash_seed(seed, (uint64_t)i, 0, 0),
            .first = first, .B = s->B, .S = s->S});
    s->h0_set = 1;
}

void vil_model_fit_init_state(VilModel *m, const VilDist *dist) {
    VilInitState *s = &m->init;
    if (!m->acts.training || s->B != m->acts.B) return;
    if (s->mode == VIL_INIT_PASSING) s->has_prev = 1;
    if (s->mode != VIL_INIT_FITTED) return;
    size_t n = vil_model_init_state_fit_floats(m), ls = (size_t)s->B * s->S;
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
                                           .n = n, .count = count, .keep = s->fits ? VIL_INIT_FIT_MOMENTUM : 0.0f});
    s->fits++;
}

size_t vil_model_init_state_fit_floats(const VilModel *m) {
    return (size_t)m->cfg.depth * 2 * m->cfg.d_state * m->cfg.d_inner;
}
size_t vil_model_init_state_prev_floats(const VilModel *m, int B) {
    return m->init.mode == VIL_INIT_PASSING ? (size_t)B * vil_model_init_state_fit_floats(m) : 0;
}

int vil_model_init_state_get(const VilModel *m, float *mean, float *var, float *prev, int B) {
    const VilInitState *s = &m->init;
    size_t n = vil_model_init_state_fit_floats(m) * sizeof(float);
    if (mean && s->mean) m->be->to_host(m->be, mean, s->mean, n);
    if (var && s->var) m->be->to_host(m->be, var, s->var, n);
    if (!prev || s->mode != VIL_INIT_PASSING) return 0;
    if (s->B == B && s->has_prev) m->be->to_host(m->be, prev, s->hT, n * B);
    else memset(prev, 0, n * B);
    return s->B == B && s->has_prev;
}

long vil_model_init_state_fits(const VilModel *m) { return m->init.fits; }

void vil_model_init_state_set(VilModel *m, const float *mean, const float *var, long fits, const float *prev, int B) {
    VilInitState *s = &m->init;
    size_t n = vil_model_init_state_fit_floats(m) * sizeof(float);
    if (s->mean) {
        if (mean && var) m->be->to_device(m->be, s->mean, mean, n), m->be->to_device(m->be, s->var, var, n);
        else m->be->zero(m->be, s->mean, n), m->be->zero(m->be, s->var, n);
        s->fits = mean && var ? fits : 0;
    }
    if (s->mode == VIL_INIT_PASSING && B > 0) {
        init_batch(m, B);
        if (prev) m->be->to_device(m->be, s->hT, prev, n * (size_t)B);
        s->has_prev = prev != NULL;
    }
}
