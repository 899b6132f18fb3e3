/* model.c: the core of a network (model.h), knowing no family: the parameter table's layout and
 * buffers, their packing for files, the activations' allocation, the inference forward's replay
 * as a CUDA graph, the training state (the optimizer's buffers, the EMA and the state a family
 * registers), the optimizer step, the EMA, clipping, the gradient all-reduce, the inputs and
 * outputs. What the network is and how it runs is its family's (vil/net.h; vil/vim.c). */
#include "net.h"
#include "limits.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "dist.h"

/* ---------------- the families ---------------- */

static const VilNet *const vil_nets[] = {[VIL_FAMILY_VIM] = &vil_net_vim, [VIL_FAMILY_STREAM] = &vil_net_stream};

const VilNet *vil_net_of(const VilConfig *cfg) {
    /* ViL and ViM (every recurrence) are Vision Mamba's network; the stream family reads a
     * stream of images (either recurrence) */
    return vil_nets[cfg->family_kind == VIL_FAMILY_STREAM ? VIL_FAMILY_STREAM : VIL_FAMILY_VIM];
}

/* ---------------- parameter table ---------------- */

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

size_t vil_param_table_add(VilParamTable *t, int decay, int ndim, const int64_t *shape, const char *fmt, ...) {
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
    /* every tensor starts at a multiple of VIL_PARAM_ALIGN elements: with tensors packed end to end,
     * a head of 10 or 1001 classes (added early) left every layer's bf16 weights only 4- or
     * 2-byte aligned, and cuBLASLt's products ran 1.5-2.6x slower (ViL-Tiny at batch 256:
     * 57.1 ms per step with 1000 classes, 65.1 with 10, 75.9 with 1001). The gaps hold zeros. */
    t->total = (t->total + VIL_PARAM_ALIGN - 1) / VIL_PARAM_ALIGN * VIL_PARAM_ALIGN;
    p->offset = t->total;
    p->decay = decay;
    p->ld = p->numel / p_rows(p), p->gap_at = p_rows(p);
    t->total += p->numel;
    t->count += p->numel;
    return p->offset;
}

/* the stored layout of the last tensor added (see VilParamInfo) */
void vil_param_table_relayout_last(VilParamTable *t, size_t ld, size_t gap_at, size_t gap, size_t pad) {
    VilParamInfo *p = &t->info[t->n - 1];
    p->ld = ld, p->gap_at = gap_at, p->gap = gap, p->pad = pad;
    t->total = p->offset + vil_param_extent(p);
}

size_t vil_model_count_params(const VilConfig *cfg) {
    VilParamTable t = {0};
    vil_net_of(cfg)->build(cfg, &t, NULL);
    free(t.info);
    return t.count;
}

VilParamInfo *vil_model_param_table(const VilConfig *cfg, int *n) {
    VilParamTable t = {0};
    vil_net_of(cfg)->build(cfg, &t, NULL);
    *n = t.n;
    return t.info;
}

double vil_model_macs(const VilConfig *cfg) { return vil_net_of(cfg)->macs(cfg); }

/* with more bytes than a device reports free, an allocation would fail deep inside a run: say
 * so up front with the numbers (mem_free 0: the backend cannot tell) */
static int fits(const VilBackend *be, size_t bytes, const char *what, const char *hint) {
    size_t avail = be->mem_free ? be->mem_free(be) : 0;
    if (!avail || bytes <= avail) return 0;
    vil_error("%s need %.2f GiB, and the %s device has %.2f GiB free: %s", what,
              bytes / 1073741824.0, be->name, avail / 1073741824.0, hint);
    return -1;
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
    m->net = vil_net_of(cfg);
    m->use_graph = 1;
    VilParamTable t = {0};
    m->net->build(cfg, &t, &m->fam);
    m->info = t.info;
    m->n_tensors = t.n;
    m->buf_len = t.total;
    m->param_count = t.count;
    m->params = be->alloc(be, m->buf_len * sizeof(float));
    m->grads = m->params ? be->alloc(be, m->buf_len * sizeof(float)) : NULL;
    m->work = !m->grads ? NULL : be->work_bytes ? be->alloc(be, m->buf_len * be->work_bytes) : m->params;
    if (!m->work) {
        vil_error("%s: its %zu parameters (%.2f GiB with their gradients%s) cannot be allocated on "
                  "the %s device: a smaller model, or another device", cfg->name, count,
                  bytes / 1073741824.0, be->work_bytes ? " and working copy" : "", be->name);
        vil_model_free(m); /* what was taken, and the family's record */
        return -1;
    }
    be->zero(be, m->grads, m->buf_len * sizeof(float));
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
    if (m->net) m->net->drop_acts(m);
    memset(&m->acts, 0, sizeof m->acts);
}

void vil_model_free(VilModel *m) {
    if (!m->be) return;
    vil_model_free_acts(m);
    if (m->work && m->work != m->params) m->be->free(m->be, m->work);
    if (m->params) m->be->free(m->be, m->params);
    if (m->grads) m->be->free(m->be, m->grads);
    for (int i = 0; i < VIL_OPTIM_MAX_STATE; i++)
        if (m->optim_state[i]) m->be->free(m->be, m->optim_state[i]);
    if (m->ema) m->be->free(m->be, m->ema);
    if (m->grad_norm) m->be->free(m->be, m->grad_norm);
    if (m->decay_mask) m->be->free(m->be, m->decay_mask);
    if (m->spans) m->be->free(m->be, m->spans);
    m->net->release(m);
    free(m->info);
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

int vil_model_set_params(VilModel *m, const float *host) {
    /* the padding (inside tensors, and the gaps between them) is zeroed whatever the host buffer
     * held there: packing drops it and unpacking writes zeros there */
    float *tmp = vil_try_malloc(m->buf_len * sizeof(float));
    if (!tmp) {
        vil_error("%s: no host memory to upload its parameters", m->cfg.name);
        return -1;
    }
    memcpy(tmp, host, m->buf_len * sizeof(float));
    vil_model_pack(m, tmp, tmp);
    vil_model_unpack(m, tmp, tmp);
    m->be->to_device(m->be, m->params, tmp, m->buf_len * sizeof(float));
    free(tmp);
    if (m->be->params_to_work) m->be->params_to_work(m->be, m->work, m->params, m->buf_len);
    return 0;
}

int vil_model_init_weights(VilModel *m, uint64_t seed) { return m->net->init_weights(m, seed); }

/* ---------------- activations ---------------- */

void *vil_arena_carve(VilArena *a, size_t n, size_t elem) {
    size_t bytes = (n * elem + 255) / 256 * 256;
    void *p = a->base ? a->base + a->off : NULL;
    a->off += bytes;
    return p;
}

size_t vil_model_acts_bytes(const VilModel *m, int B, int training) {
    /* what an initial-state intervention adds to a training batch (its h0 and hT) */
    return m->net->layout((VilModel *)m, NULL, B, training) + (training ? m->net->extra_bytes(m, B) : 0);
}

int vil_model_check_acts(const VilModel *m, int B, int training) {
    const VilConfig *c = &m->cfg;
    char what[160];
    snprintf(what, sizeof what, "%s activations of a batch of %d at %d px",
             training ? "The training" : "The", B, c->img_size);
    if (B < 1) {
        vil_error("%s: a batch holds at least one image", what);
        return -1;
    }
    if (m->net->check_batch(m, B, what) != 0) return -1;
    return fits(m->be, vil_model_acts_bytes(m, B, training), what, m->net->memory_hint(m, training));
}

int vil_model_alloc_acts(VilModel *m, int B, int training) {
    if (m->acts.base && m->acts.B == B && m->acts.training == training &&
        m->acts.recompute == (training ? m->recompute : VIL_RECOMPUTE_NONE) &&
        (m->acts.dimg != NULL) == (training && m->input_grad))
        return 0;
    char what[160];
    snprintf(what, sizeof what, "%s activations of a batch of %d at %d px", training ? "The training" : "The",
             B, m->cfg.img_size);
    if (B < 1) {
        vil_error("%s: a batch holds at least one image", what);
        return VIL_EUSAGE;
    }
    if (m->net->check_batch(m, B, what) != 0) return VIL_EUSAGE;
    vil_model_free_acts(m); /* before the new ones: the device never holds both */
    size_t bytes = m->net->layout(m, NULL, B, training);
    void *base = m->be->alloc(m->be, bytes);
    if (!base) {
        vil_error("%s (%.2f GiB) cannot be allocated on the %s device: %s", what, bytes / 1073741824.0,
                  m->be->name, m->net->memory_hint(m, training));
        return -1;
    }
    m->acts.B = B;
    m->acts.training = training;
    m->acts.recompute = training ? m->recompute : VIL_RECOMPUTE_NONE;
    m->net->layout(m, base, B, training);
    m->acts.base = base;
    m->acts.bytes = bytes;
    return 0;
}

int vil_model_act(const VilModel *m, const char *name, VilActView *v) {
    return m->acts.base && m->net->act ? m->net->act(m, name, v) : -1;
}

/* ---------------- forward / backward ---------------- */

const void *vil_net_weight(const VilModel *m, size_t off) {
    size_t eb = m->be->work_bytes ? m->be->work_bytes : sizeof(float);
    return (const char *)m->work + off * eb;
}
const float *vil_net_param(const VilModel *m, size_t off) { return m->params + off; }
float *vil_net_grad(const VilModel *m, size_t off) { return m->grads + off; }
void *vil_net_act_at(const VilModel *m, void *p, size_t elems) { return (char *)p + elems * m->be->act_bytes; }
float *vil_net_zeros(const VilModel *m, size_t n) {
    float *p = m->be->alloc(m->be, n * sizeof(float));
    if (p) m->be->zero(m->be, p, n * sizeof(float));
    return p;
}

const VilParamInfo *vil_net_param_at(const VilModel *m, size_t offset) {
    for (int i = 0; i < m->n_tensors; i++)
        if (m->info[i].offset == offset) return &m->info[i];
    /* invariant: offset is one build() recorded for this table; no input chooses it */
    VIL_FATAL("no parameter at offset %zu", offset);
}

float vil_net_trunc_normal(VilRng *r, float lo, float hi) {
    for (;;) {
        float x = vil_rng_normal(r);
        if (x >= lo && x <= hi) return x;
    }
}

void vil_net_fill_uniform(float *p, size_t n, float bound, VilRng *r) {
    for (size_t i = 0; i < n; i++) p[i] = (2.0f * vil_rng_uniform(r) - 1.0f) * bound;
}

size_t vil_model_drop_path_bytes(const VilModel *m) { return m->net->drop_path_bytes(m); }

void vil_model_drop_path_rows(const VilModel *m, uint64_t seed, long first, float *h) {
    m->net->drop_path_rows(m, seed, first, h);
}

int vil_model_sample_drop_path(VilModel *m, uint64_t seed) {
    size_t bytes = vil_model_drop_path_bytes(m);
    if (!bytes) return 0;
    float *h = vil_try_malloc(bytes);
    if (!h) return -1;
    vil_model_drop_path_rows(m, seed, 0, h);
    m->be->to_device(m->be, m->acts.dp_scale, h, bytes);
    free(h);
    return 0;
}

void vil_model_forward(VilModel *m, int with_loss) {
    const VilBackend *be = m->be;
    /* a stream's forward reads the state the last one left, which a recording would not follow */
    if (with_loss || m->acts.training || !m->use_graph || !be->graph_begin || m->net->stream_chunk) {
        m->net->forward(m, with_loss);
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
        m->net->forward(m, 0);
        return;
    }
    if (be->graph_begin(be) == 0) {
        m->net->forward(m, 0);
        s->g = be->graph_end(be);
        if (s->g && be->graph_launch(be, s->g) == 0) return;
    }
    m->net->forward(m, 0); /* not recorded: it needed new scratch memory (or capture is off) */
}

/* The backward's gradient buckets (m->sync): the gradients at [lo, buf_len) are final; those
 * not yet sent go to the all-reduce once they come to bucket_bytes, or when `last` (the family
 * says so after its last layer and at the end). A family fills the buffer from its end (ViM:
 * norm_f, the layers from the last, then the embeddings and the head, whose gradients, made
 * first, sit at its start). */
void vil_net_grads_ready(VilModel *m, size_t lo, int last) {
    if (!m->sync.dist || m->sync.hi == lo) return;
    if (!last && (m->sync.hi - lo) * sizeof(float) < m->sync.bucket_bytes) return;
    m->be->grad_allreduce(m->be, &(VilAllReduce){.buf = m->grads + lo, .n = m->sync.hi - lo,
                                                 .async = 1, .dist = m->sync.dist});
    m->sync.hi = lo;
}

void vil_model_backward(VilModel *m) {
    /* invariant: model.h's contract (a forward with the loss on training activations first); a
     * caller that breaks it has a bug no input causes, and the backward would read memory that
     * is not there */
    if (!m->acts.training) VIL_FATAL("vil_model_backward needs activations allocated for training");
    m->sync.hi = m->buf_len;
    m->net->backward(m);
}

void vil_model_sync_grads(VilModel *m, const struct VilDist *dist, size_t bucket_bytes) {
    m->sync.dist = dist;
    m->sync.bucket_bytes = bucket_bytes;
}

int vil_model_syncing(const VilModel *m) { return m->sync.dist != NULL; }

void vil_model_zero_grad(VilModel *m) { m->be->zero(m->be, m->grads, m->buf_len * sizeof(float)); }

int vil_model_init_training(VilModel *m, const VilOptim *opt, int ema) {
    const VilBackend *be = m->be;
    size_t bytes = m->buf_len * sizeof(float), nt = (size_t)m->n_tensors;
    if (m->optim && opt != m->optim) {
        vil_error("vil_model_init_training: optimizer %s after %s (a model keeps its first one)", opt->name,
                  m->optim->name);
        return VIL_EUSAGE;
    }
    /* what this call adds, taken together: given back together when any of it cannot be had */
    float *st[VIL_OPTIM_MAX_STATE] = {0}, *e = NULL, *gn = NULL, *host = NULL;
    unsigned char *dm = NULL, *hm = NULL;
    VilSpan *sp = NULL, *hs = NULL;
    int ok = 1;
    for (int i = 0; !m->optim && ok && i < opt->n_state; i++) ok = (st[i] = be->alloc(be, bytes)) != NULL;
    if (ok && ema && !m->ema) ok = (e = be->alloc(be, bytes)) && (host = vil_try_malloc(bytes));
    if (ok && !m->grad_norm) ok = (gn = be->alloc(be, sizeof(float))) != NULL;
    if (ok && !m->decay_mask) ok = (dm = be->alloc(be, m->buf_len)) && (hm = vil_try_calloc(m->buf_len, 1));
    if (ok && !m->spans) ok = (sp = be->alloc(be, nt * sizeof *sp)) && (hs = vil_try_malloc(nt * sizeof *hs));
    if (!ok) {
        for (int i = 0; i < VIL_OPTIM_MAX_STATE; i++)
            if (st[i]) be->free(be, st[i]);
        void *dev[] = {e, gn, dm, sp};
        for (int i = 0; i < 4; i++)
            if (dev[i]) be->free(be, dev[i]);
        free(host), free(hm), free(hs);
        vil_error("%s: its training state (%s's buffers%s, %.2f GiB) cannot be allocated on the %s device",
                  m->cfg.name, opt->name, ema && !m->ema ? " and the EMA" : "",
                  (double)bytes * (opt->n_state + (ema && !m->ema)) / 1073741824.0, be->name);
        return -1;
    }
    if (!m->optim) {
        m->optim = opt;
        for (int i = 0; i < opt->n_state; i++) {
            m->optim_state[i] = st[i];
            be->zero(be, st[i], bytes);
        }
    }
    if (e) {
        vil_model_get_params(m, host);
        be->to_device(be, e, host, bytes);
        free(host);
        m->ema = e;
    }
    if (gn) m->grad_norm = gn;
    if (dm) {
        /* the tensors are contiguous in the parameter buffer: one update over all of them, with
         * a byte per element saying whether weight decay applies */
        for (int i = 0; i < m->n_tensors; i++)
            memset(hm + m->info[i].offset, m->info[i].decay ? 1 : 0, vil_param_extent(&m->info[i]));
        be->to_device(be, dm, hm, m->buf_len);
        free(hm);
        m->decay_mask = dm;
    }
    if (sp) {
        /* per-tensor optimizers (Lamb) find the tensors here */
        for (int i = 0; i < m->n_tensors; i++) hs[i] = (VilSpan){m->info[i].offset, vil_param_extent(&m->info[i])};
        be->to_device(be, sp, hs, nt * sizeof *hs);
        free(hs);
        m->spans = sp;
    }
    return 0;
}

/* ---------------- the training state ---------------- */

/* The model's own tensors first (the optimizer's buffers, then the EMA), the family's after */
static int own_states(const VilModel *m) { return (m->optim ? m->optim->n_state : 0) + (m->ema ? 1 : 0); }

int vil_model_train_state_count(const VilModel *m) {
    return own_states(m) + (m->net->state_count ? m->net->state_count(m) : 0);
}

VilTrainStateInfo vil_model_train_state_info(const VilModel *m, int i) {
    int n = vil_model_train_state_count(m), own = own_states(m);
    /* invariant: i below vil_model_train_state_count is the contract, as an array's bound is */
    if (i < 0 || i >= n) VIL_FATAL("training state tensor %d of %d", i, n);
    if (i >= own) return m->net->state_info(m, i - own);
    VilTrainStateInfo t = {.params_shaped = 1, .ndim = 1, .shape = {(int64_t)m->param_count},
                           .numel = m->param_count, .room = m->buf_len};
    if (m->optim && i < m->optim->n_state) t.name = m->optim->state[i].name, t.nonneg = m->optim->state[i].nonneg;
    else t.name = "ema", t.optional = 1, t.absent = "the state has no EMA (it was off): starting the EMA from the weights";
    return t;
}

/* the backend buffer of the model's own training state tensor i */
static float *train_state_buf(const VilModel *m, int i) {
    if (m->optim && i < m->optim->n_state) return m->optim_state[i];
    return m->ema_active ? m->params : m->ema; /* the EMA, wherever vil_model_use_ema put it */
}

void vil_model_train_state_get(const VilModel *m, int i, float *host) {
    int own = own_states(m);
    vil_model_train_state_info(m, i); /* range check */
    if (i >= own) {
        m->net->state_get(m, i - own, host);
        return;
    }
    m->be->to_host(m->be, host, train_state_buf(m, i), m->buf_len * sizeof(float));
    vil_model_pack(m, host, host);
}

int vil_model_train_state_set(VilModel *m, int i, const float *packed) {
    int own = own_states(m);
    vil_model_train_state_info(m, i); /* range check */
    if (i >= own) return m->net->state_set(m, i - own, packed);
    float *dst = train_state_buf(m, i), *host = vil_try_malloc(m->buf_len * sizeof(float));
    if (!host) return -1;
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
    return 0;
}

long vil_model_train_state_counter(const VilModel *m, int i) {
    int own = own_states(m);
    vil_model_train_state_info(m, i); /* range check */
    return i >= own ? m->net->state_counter(m, i - own) : 0;
}

void vil_model_train_state_set_counter(VilModel *m, int i, long count) {
    int own = own_states(m);
    vil_model_train_state_info(m, i); /* range check */
    if (i >= own) m->net->state_set_counter(m, i - own, count);
}

int vil_model_optim_steps(const VilModel *m) { return m->step; }

void vil_model_optim_set_steps(VilModel *m, int steps) { m->step = steps; }

int vil_model_clip_grad(VilModel *m, float max_norm) {
    if (!m->grad_norm && !(m->grad_norm = m->be->alloc(m->be, sizeof(float)))) return -1;
    m->be->grad_clip(m->be, &(VilGradClip){.g = m->grads, .n = m->buf_len, .max_norm = max_norm,
                                           .norm = m->grad_norm});
    return 0;
}

float vil_model_grad_norm(const VilModel *m) {
    float norm = -1.0f;
    if (m->grad_norm) m->be->to_host(m->be, &norm, m->grad_norm, sizeof norm);
    return norm;
}

int vil_model_optim_step(VilModel *m, const VilOptimHyper *h) {
    const VilBackend *be = m->be;
    if (m->ema_active) {
        vil_error("an optimizer step with the EMA weights in use (vil_model_use_ema(m, 0) first)");
        return VIL_EUSAGE;
    }
    int rc = vil_model_init_training(m, m->optim ? m->optim : &vil_optim_adamw, 0);
    if (rc != 0) return rc;
    m->step++;
    VilOptimBufs b = {.p = m->params, .work = be->work_bytes ? m->work : NULL, .g = m->grads,
                      .decay = m->decay_mask, .spans = m->spans, .n_spans = m->n_tensors,
                      .n = m->buf_len, .step = m->step};
    for (int i = 0; i < m->optim->n_state; i++) b.state[i] = m->optim_state[i];
    m->optim->update(be, &b, h);
    return 0;
}

void vil_model_allreduce_grads(VilModel *m, const struct VilDist *dist) {
    m->be->grad_allreduce(m->be, &(VilAllReduce){.buf = m->grads, .n = m->buf_len, .dist = dist});
}

void vil_model_allreduce_wait(VilModel *m) {
    m->be->grad_allreduce_wait(m->be, &(VilAllReduceWait){.dist = m->sync.dist});
}

void vil_model_ema_update(VilModel *m, float decay) {
    /* invariant: model.h's contract (vil_model_init_training with ema, the EMA not in use); no
     * input reaches it, a caller that breaks it has a bug */
    if (!m->ema || m->ema_active) VIL_FATAL("vil_model_ema_update without an EMA, or with it in use");
    m->be->ema_update(m->be, &(VilEma){.ema = m->ema, .p = m->params, .n = m->buf_len, .decay = decay});
}

void vil_model_use_ema(VilModel *m, int on) {
    /* invariant: model.h's contract (vil_model_init_training with ema first), as above */
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
    m->be->to_device(m->be, m->acts.img, img, B * c->in_floats * sizeof(float));
    if (targets) m->be->to_device(m->be, m->acts.targets, targets, B * c->readouts * c->num_classes * sizeof(float));
}

int vil_model_losses(const VilModel *m, float *host) {
    int B = m->acts.B, R = m->cfg.readouts;
    if (R == 1) {
        m->be->to_host(m->be, host, m->acts.losses, (size_t)B * sizeof(float));
        return B;
    }
    /* a stream's readouts: each sample's loss is the mean of its own, summed in order through a
     * fixed buffer (nothing to allocate, nothing to fail) */
    enum { PART = 1024 };
    float part[PART];
    size_t n = (size_t)B * R;
    double s = 0;
    for (size_t at = 0; at < n; at += PART) {
        size_t k = n - at < PART ? n - at : PART;
        m->be->to_host(m->be, part, m->acts.losses + at, k * sizeof(float));
        for (size_t i = 0; i < k; i++) {
            s += part[i];
            if ((at + i + 1) % R == 0) host[(at + i) / R] = (float)(s / R), s = 0;
        }
    }
    return B;
}

int vil_model_logits(const VilModel *m, float *host) {
    m->be->to_host(m->be, host, m->acts.logits,
                   (size_t)m->acts.B * m->cfg.readouts * m->cfg.num_classes * sizeof(float));
    return m->acts.B;
}

void vil_model_stream_chunk(VilModel *m, long k) {
    if (m->net->stream_chunk) m->net->stream_chunk(m, k);
}

void vil_model_set_inputs(VilModel *m, float *img, float *targets, float *dp_scale) {
    VilActs *a = &m->acts;
    a->img = img ? img : a->own_img;
    a->targets = targets ? targets : a->own_targets;
    a->dp_scale = dp_scale ? dp_scale : a->own_dp_scale;
}


/* ---------------- the initial states, the states along the sequence ---------------- */

const char *const vil_init_mode_names[VIL_INIT_COUNT] = {"zero", "noise", "fitted", "passing"};
const char *const vil_init_fit_names[VIL_INIT_FIT_COUNT] = {"element", "scalar"};

int vil_model_set_init_state(VilModel *m, const VilInitSpec *spec, int B) {
    if (spec->mode == VIL_INIT_ZERO && !m->net->set_init_state) return 0;
    if (!m->net->set_init_state) {
        vil_error("init_state = %s: the %s network has no recurrent states to start",
                  vil_init_mode_names[spec->mode], m->net->name);
        return -1;
    }
    return m->net->set_init_state(m, spec, B);
}

int vil_model_sample_init_state(VilModel *m, uint64_t seed, long first) {
    return m->net->sample_init_state ? m->net->sample_init_state(m, seed, first) : 0;
}

void vil_model_fit_init_state(VilModel *m, const VilDist *dist) {
    if (m->net->fit_init_state) m->net->fit_init_state(m, dist);
}

int vil_model_seq_streams(const VilModel *m, int *L, int *state) {
    *L = *state = 0;
    return m->net->seq_streams ? m->net->seq_streams(m, L, state) : 0;
}

int vil_model_seq_states(VilModel *m, int stream, float *hsq, float *hT) {
    if (!m->net->seq_states) {
        vil_error("the %s network has no recurrent states along its sequence", m->net->name);
        return -1;
    }
    return m->net->seq_states(m, stream, hsq, hT);
}

int vil_model_seq_state_at(VilModel *m, int stream, int t, float *h) {
    if (!m->net->seq_state_at) {
        vil_error("the %s network has no recurrent states along its sequence", m->net->name);
        return -1;
    }
    return m->net->seq_state_at(m, stream, t, h);
}
