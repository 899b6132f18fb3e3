/* stream.c: the stream family (vil/net.h): a causal network reading a stream of gray images one
 * row per token, with a class readout at each image's last row (doc/models.md "The stream
 * family"). A token is an image row of img_size pixels through a linear embedding; blocks of
 * RMSNorm and a one-direction mixer (in_proj, causal conv1d + SiLU, x_proj, dt_proj, the causal
 * scan gated by SiLU(z), out_proj; Longhorn's or Mamba's recurrence); norm_f and the head read at
 * rows img_size - 1, 2 img_size - 1, ... A forward reads one chunk of stream_chunk images of each
 * sample's stream; chunk k > 0 goes on from the scan's state and the conv's context the forward
 * of chunk k - 1 handed out (vil_model_stream_chunk), which is truncated backpropagation through
 * time in training: the carried state is a constant of the chunk's backward (doc/scans.md "One
 * direction"). The ops are the backend's own, written once here as vim.c writes its network. */
#include "interv.h"
#include "net.h"
#include "vim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* ---------------- the family's records ---------------- */

typedef struct {
    size_t A_log, D, in_proj, conv_w, conv_b, x_proj, dt_w, dt_b, out_proj, norm;
    size_t begin; /* the layer's tensors are [begin, the next layer's begin) */
} LayerOffsets;
typedef struct {
    size_t embed_w, embed_b, head_w, head_b, norm_f;
    LayerOffsets *layer; /* (depth) */
} Offsets;

/* activations; pointers into the model's one allocation. "act" tensors use the backend's type. */
typedef struct {
    float *res;         /* (B, L, D) f32: residual stream entering norm i */
    float *rstd;        /* (B, L) f32 */
    void *normed;       /* (B, L, D) act */
    void *xz;           /* (B, L, 2E) act: x | z */
    void *u;            /* (B, L, E) act: SiLU(conv1d(x)) */
    void *xdbl;         /* (B, L, xdbl_ld) act: dt_low | 0 | k | q | 0 (vim.h's layout) */
    void *delta;        /* (B, L, E) act: dt_proj(dt_low); the backward's ddelta over it */
    void *y;            /* (B, L, E) act: the gated scan output; in training dy, which the scan
                         * backward makes again (VilScanBwd.out) */
    float *scan_states; /* training: the scan's kept chunk-boundary states, or NULL */
} LayerActs;

typedef struct {
    void *tokens;       /* (B, L, D) act: the rows' embedding */
    float *zeros;       /* (B, L, D) f32 zeros: the stream the first block adds the tokens to */
    LayerActs *layer;   /* (depth); all alias one set when not training */
    void *h;            /* (B, L, D) act: mixer output, consumed by the next add */
    float *res_f, *rstd_f;
    void *normed_f;     /* (B, L, D) act */
    /* The carried state, two slots alternating (a chunk's backward reads the slot its forward
     * read, after that forward handed the next chunk's into the other): h (depth, B, N, E) f32
     * and the conv's context ctx (depth, B, K-1, E) act per slot. */
    float *carry_h[2];
    void *carry_ctx[2];
    /* backward scratch, reused by every layer; dh lies in normed_f, which only the head's
     * backward reads, before the first dh */
    float *dres;        /* (B, L, D) f32 */
    void *dnormed, *dh, *dxz, *du, *dxdbl, *dy, *dtokens;
    float *dlogits;     /* (B, R, classes) f32 */
} Acts;

/* Where the stream stands: the chunk the next forward reads and the slots it reads and writes. */
typedef struct {
    long k;              /* vil_model_stream_chunk's chunk */
    int cur;             /* the slot the last forward wrote */
    int valid;           /* the slots hold a training stream's hand-out (not its last chunk's) */
    int fwd_in;          /* the slot the last forward read (-1: none, a stream's start) */
    long fwd_k;          /* the chunk of the last forward */
    float *stash_h, *stash_ctx; /* a resumed run's carried state (host), until a forward takes it */
} Position;

typedef struct {
    Offsets off;
    Acts a;
    VilInterv init; /* the initial-state interventions (interv.h) at a stream's start: one direction */
    Position pos;
} Stream;

static Stream *V(const VilModel *m) { return (Stream *)m->fam; }


static int chunks_per_stream(const VilConfig *c) { return c->stream_len / c->stream_chunk; }
static int ctx_rows(const VilConfig *c) { return c->d_conv - 1; }

/* ---------------- parameter table ---------------- */

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define NDIM(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define ADD(decay, shape_args, ...) vil_param_table_add(&t, decay, NDIM shape_args, SHAPE shape_args, __VA_ARGS__)

static void build(const VilConfig *c, VilParamTable *tab, void **fam) {
    VilParamTable t = {0};
    int64_t D = c->embed_dim, E = c->d_inner, N = c->d_state, R = c->dt_rank, K = c->d_conv;
    int dl, xdbl_ld;
    vil_vim_xdbl_layout(c, &dl, &xdbl_ld);
    const VilRecParam *rp = &vil_recurrences[c->rec].param;
    Offsets o = {0};
    /* the buffer is completed from its end by the backward (norm_f, the last layer first), so
     * the embedding and the head come first, as in vim.c */
    o.embed_w = ADD(1, (D, c->img_size), "embed.weight");
    o.embed_b = ADD(0, (D), "embed.bias");
    o.head_w = ADD(1, (c->num_classes, D), "head.weight");
    o.head_b = ADD(0, (c->num_classes), "head.bias");
    if (fam) o.layer = vil_calloc((size_t)c->depth, sizeof(LayerOffsets));
    for (int i = 0; i < c->depth; i++) {
        LayerOffsets l = {0};
        int first = t.n;
        if (rp->key) { /* the recurrence's own parameter, direction 0's name */
            int64_t shape[4];
            int nd = (int)strlen(rp->dims);
            for (int d = 0; d < nd; d++) shape[d] = rp->dims[d] == 'N' ? N : E;
            l.A_log = vil_param_table_add(&t, 1, nd, shape, rp->key, i, "");
        }
        l.D = ADD(0, (E), "layers.%d.mixer.D", i);
        l.in_proj = ADD(1, (2 * E, D), "layers.%d.mixer.in_proj.weight", i);
        l.conv_w = ADD(1, (E, 1, K), "layers.%d.mixer.conv1d.weight", i);
        l.conv_b = ADD(0, (E), "layers.%d.mixer.conv1d.bias", i);
        l.x_proj = ADD(1, (R + 2 * N, E), "layers.%d.mixer.x_proj.weight", i);
        vil_param_table_relayout_last(&t, E, R, dl - R, (size_t)(xdbl_ld - dl - 2 * N) * E);
        l.dt_w = ADD(1, (E, R), "layers.%d.mixer.dt_proj.weight", i);
        vil_param_table_relayout_last(&t, dl, E, 0, 0);
        l.dt_b = ADD(0, (E), "layers.%d.mixer.dt_proj.bias", i);
        l.out_proj = ADD(1, (D, E), "layers.%d.mixer.out_proj.weight", i);
        l.norm = ADD(0, (D), "layers.%d.norm.weight", i);
        l.begin = t.info[first].offset;
        if (fam) o.layer[i] = l;
    }
    o.norm_f = ADD(0, (D), "norm_f.weight");
    *tab = t;
    if (fam) {
        Stream *v = vil_calloc(1, sizeof *v);
        v->off = o;
        v->pos.fwd_in = -1;
        vil_interv_init(&v->init, 1, VIL_INTERV_NOUN("stream"));
        *fam = v;
    }
}

/* one image's: its img_size rows (a forward reads readouts images) */
static double macs(const VilConfig *c) {
    double L = c->img_size, D = c->embed_dim, E = c->d_inner, N = c->d_state, R = c->dt_rank, K = c->d_conv;
    double layer = L * D * 2 * E + L * E * K + L * E * (R + 2 * N) + L * R * E + 3 * L * E * N + L * E * D;
    return L * D * c->img_size + c->depth * layer + D * c->num_classes;
}

/* ---------------- initialization (doc/models.md) ---------------- */

/* vim.c's rules: the embedding as the patch embedding (LeCun normal, fan_in = a row's pixels),
 * the head trunc normal .02, each layer as ViL/ViM's forward direction */
static int init_weights(VilModel *m, uint64_t seed) {
    const VilConfig *c = &m->cfg;
    float *h = vil_try_calloc(m->buf_len, sizeof(float));
    if (!h) {
        vil_error("%s: no host memory to draw its initial weights", c->name);
        return -1;
    }
    VilRng r;
    vil_rng_seed(&r, seed);
    const Offsets *o = &V(m)->off;
    const VilRecurrenceInfo *ri = &vil_recurrences[c->rec];
    int D = c->embed_dim, E = c->d_inner, N = c->d_state, R = c->dt_rank, K = c->d_conv, W = c->img_size;
    float std = sqrtf(1.0f / W) / 0.87962566103423978f;
    for (size_t i = 0; i < (size_t)D * W; i++) h[o->embed_w + i] = std * vil_net_trunc_normal(&r, -2, 2);
    for (size_t i = 0; i < (size_t)c->num_classes * D; i++) h[o->head_w + i] = 0.02f * vil_net_trunc_normal(&r, -100.f, 100.f);
    for (int l = 0; l < c->depth; l++) {
        const LayerOffsets *lo = &o->layer[l];
        vil_net_fill_uniform(h + lo->in_proj, (size_t)2 * E * D, 1.0f / sqrtf((float)D), &r);
        vil_net_fill_uniform(h + lo->out_proj, (size_t)D * E, 1.0f / sqrtf((float)E) / sqrtf((float)c->depth), &r);
        for (int e = 0; e < E; e++) h[lo->D + e] = 1.0f;
        if (ri->param.key) {
            int nd = ri->param.dims[1] ? N : 1;
            for (int e = 0; e < E; e++)
                for (int n = 0; n < nd; n++) h[lo->A_log + (size_t)e * nd + n] = ri->param.init(n);
        }
        vil_net_fill_uniform(h + lo->conv_w, (size_t)E * K, 1.0f / sqrtf((float)K), &r);
        vil_net_fill_uniform(h + lo->conv_b, (size_t)E, 1.0f / sqrtf((float)K), &r);
        vil_net_fill_uniform(h + lo->x_proj, (size_t)(R + 2 * N) * E, 1.0f / sqrtf((float)E), &r);
        vil_param_store(vil_net_param_at(m, lo->x_proj), h + lo->x_proj, h + lo->x_proj);
        vil_net_fill_uniform(h + lo->dt_w, (size_t)E * R, 1.0f / sqrtf((float)R), &r);
        vil_param_store(vil_net_param_at(m, lo->dt_w), h + lo->dt_w, h + lo->dt_w);
        /* dt bias as vim.c's direction 0: drawn for Mamba (and ViL's dt_init = vim), else 0 */
        int draw = ri->dt_draw_forward || c->dt_init_kind == VIL_DT_INIT_VIM;
        for (int e = 0; e < E; e++) {
            float b = 0.0f;
            if (draw) {
                float dt = expf(vil_rng_uniform(&r) * (logf(0.1f) - logf(1e-3f)) + logf(1e-3f));
                b = ri->delta_of_dt(dt < 1e-4f ? 1e-4f : dt);
            }
            h[lo->dt_b + e] = b;
        }
        for (int d = 0; d < D; d++) h[lo->norm + d] = 1.0f;
    }
    for (int d = 0; d < D; d++) h[o->norm_f + d] = 1.0f;
    int rc = vil_model_set_params(m, h);
    free(h);
    return rc;
}

/* ---------------- activations ---------------- */

static void carve_all(const VilModel *m, VilArena *a, int B, int training, VilActs *io, Acts *x) {
    const VilConfig *c = &m->cfg;
    size_t ab = m->be->act_bytes, f = sizeof(float);
    size_t BL = (size_t)B * c->seq_len, D = c->embed_dim, E = c->d_inner, BR = (size_t)B * c->readouts;
    size_t NC = c->num_classes, carry = (size_t)c->depth * B * c->d_state * E;
    int dl, xdbl_ld;
    vil_vim_xdbl_layout(c, &dl, &xdbl_ld);
    io->img = vil_arena_carve(a, (size_t)B * c->in_floats, f);
    x->tokens = vil_arena_carve(a, BL * D, ab);
    x->zeros = vil_arena_carve(a, BL * D, f);
    const VilScanFwd shape = {.rec = c->rec, .B = B, .L = c->seq_len, .E = c->d_inner, .N = c->d_state, .causal = 1};
    size_t states = training && m->be->scan_states_bytes ? m->be->scan_states_bytes(m->be, &shape) : 0;
    int nsets = training ? c->depth : 1;
    for (int i = 0; i < nsets; i++) {
        LayerActs *l = &x->layer[i];
        l->res = vil_arena_carve(a, BL * D, f);
        l->rstd = vil_arena_carve(a, BL, f);
        l->normed = vil_arena_carve(a, BL * D, ab);
        l->xz = vil_arena_carve(a, BL * 2 * E, ab);
        l->u = vil_arena_carve(a, BL * E, ab);
        l->xdbl = vil_arena_carve(a, BL * xdbl_ld, ab);
        l->delta = vil_arena_carve(a, BL * E, ab);
        l->y = training ? NULL : vil_arena_carve(a, BL * E, ab);
        l->scan_states = states ? vil_arena_carve(a, states, 1) : NULL;
    }
    for (int i = nsets; i < c->depth; i++) x->layer[i] = x->layer[0];
    x->h = vil_arena_carve(a, BL * D, ab);
    x->res_f = vil_arena_carve(a, BL * D, f);
    x->rstd_f = vil_arena_carve(a, BL, f);
    x->normed_f = vil_arena_carve(a, BL * D, ab);
    for (int s = 0; s < 2; s++) {
        x->carry_h[s] = vil_arena_carve(a, carry, f);
        x->carry_ctx[s] = ctx_rows(c) ? vil_arena_carve(a, (size_t)c->depth * B * ctx_rows(c) * E, ab) : NULL;
    }
    io->logits = vil_arena_carve(a, BR * NC, f);
    io->probs = vil_arena_carve(a, BR * NC, f);
    io->losses = vil_arena_carve(a, BR, f);
    io->targets = vil_arena_carve(a, BR * NC, f);
    io->dp_scale = vil_arena_carve(a, 1, f); /* no drop path: a buffer nothing reads */
    io->own_img = io->img, io->own_targets = io->targets, io->own_dp_scale = io->dp_scale;
    if (training) {
        x->dres = vil_arena_carve(a, BL * D, f);
        x->dxz = vil_arena_carve(a, BL * 2 * E, ab);
        x->du = vil_arena_carve(a, BL * E, ab);
        x->dxdbl = vil_arena_carve(a, BL * xdbl_ld, ab);
        x->dy = vil_arena_carve(a, BL * E, ab);
        x->dnormed = vil_arena_carve(a, BL * D, ab);
        x->dtokens = vil_arena_carve(a, BL * D, ab);
        x->dh = x->normed_f;
        for (int i = 0; i < c->depth; i++) x->layer[i].y = x->dy;
        x->dlogits = vil_arena_carve(a, BR * NC, f);
        if (m->input_grad) io->dimg = vil_arena_carve(a, (size_t)B * c->in_floats, f);
    }
}

static size_t layout(VilModel *m, void *base, int B, int training) {
    const VilConfig *c = &m->cfg;
    VilArena a = {base, 0};
    if (!base) {
        VilActs io = {0};
        Acts x = {0};
        x.layer = vil_calloc((size_t)c->depth, sizeof(LayerActs));
        carve_all(m, &a, B, training, &io, &x);
        free(x.layer);
        return a.off;
    }
    Acts *x = &V(m)->a;
    free(x->layer);
    memset(x, 0, sizeof *x);
    x->layer = vil_calloc((size_t)c->depth, sizeof(LayerActs));
    carve_all(m, &a, B, training, &m->acts, x);
    const VilBackend *be = m->be;
    size_t BL = (size_t)B * c->seq_len, E = c->d_inner;
    int dl, xdbl_ld;
    vil_vim_xdbl_layout(c, &dl, &xdbl_ld);
    be->zero(be, x->zeros, BL * c->embed_dim * sizeof(float));
    /* a chunk k > 0 with nothing carried into these buffers reads zeros: a stream's start */
    for (int s = 0; s < 2; s++) {
        be->zero(be, x->carry_h[s], (size_t)c->depth * B * c->d_state * E * sizeof(float));
        if (x->carry_ctx[s]) be->zero(be, x->carry_ctx[s], (size_t)c->depth * B * ctx_rows(c) * E * be->act_bytes);
    }
    if (training) /* dx_dbl's padding columns must be 0 (vim.c says why); nothing writes them later */
        be->zero(be, x->dxdbl, BL * xdbl_ld * be->act_bytes);
    Position *p = &V(m)->pos;
    p->valid = 0, p->cur = 0, p->fwd_in = -1;
    return a.off;
}

static void drop_acts(VilModel *m) {
    free(V(m)->a.layer);
    memset(&V(m)->a, 0, sizeof V(m)->a);
    V(m)->pos.valid = 0;
}

static size_t extra_bytes(const VilModel *m, int B) { return vil_interv_extra_bytes(m, &V(m)->init, B); }

static int check_batch(const VilModel *m, int B, const char *what) {
    const VilConfig *c = &m->cfg;
    /* the ops index a (B * L, 2E) tensor with 32-bit integers */
    if ((double)B * c->seq_len * 2 * c->d_inner >= 2147483648.0) {
        vil_error("%s: %d x %d tokens x %d channels is past what the ops index (2^31 elements): "
                  "lower the batch or stream_chunk", what, B, c->seq_len, 2 * c->d_inner);
        return -1;
    }
    return 0;
}

static const char *memory_hint(const VilModel *m, int training) {
    (void)m, (void)training;
    return "lower the batch, or stream_chunk (images per forward)";
}

/* ---------------- forward / backward ---------------- */

#define Wt vil_net_weight
#define Pm vil_net_param
#define Gr vil_net_grad
#define Ao vil_net_act_at

static size_t drop_path_bytes(const VilModel *m) {
    (void)m;
    return 0;
}
static void drop_path_rows(const VilModel *m, uint64_t seed, long first, float *h) { (void)m, (void)seed, (void)first, (void)h; }

static void stream_chunk(VilModel *m, long k) { V(m)->pos.k = k; }

/* A training forward of the stream's last chunk hands its final states to the intervention
 * (fitted's fit, passing's next start), not to a next chunk */
static int last_chunk(const VilModel *m, long k) {
    return m->acts.training && k % chunks_per_stream(&m->cfg) == chunks_per_stream(&m->cfg) - 1;
}

/* the intervention's initial states of layer i at a stream's start (NULL: zero) */
static const float *init_h0(const VilModel *m, int i) { return vil_interv_h0(m, &V(m)->init, i); }

/* slot s's state and context of layer i */
static float *slot_h(const VilModel *m, int s, int i) {
    const VilConfig *c = &m->cfg;
    return V(m)->a.carry_h[s] + (size_t)i * m->acts.B * c->d_state * c->d_inner;
}
static void *slot_ctx(const VilModel *m, int s, int i) {
    const VilConfig *c = &m->cfg;
    void *p = V(m)->a.carry_ctx[s];
    return p ? Ao(m, p, (size_t)i * m->acts.B * ctx_rows(c) * c->d_inner) : NULL;
}

/* The carried state of a resumed run (the state file's, stashed by state_set) into slot `cur`:
 * host floats to the backend's types (act: float32 on the CPU, bf16 on CUDA, where the saved
 * values are bf16 values, so that rounding to nearest gives them back exactly). */
static void take_stash(VilModel *m) {
    const VilConfig *c = &m->cfg;
    Position *p = &V(m)->pos;
    const VilBackend *be = m->be;
    size_t nh = (size_t)c->depth * m->acts.B * c->d_state * c->d_inner;
    size_t nc = (size_t)c->depth * m->acts.B * ctx_rows(c) * c->d_inner;
    be->to_device(be, V(m)->a.carry_h[p->cur], p->stash_h, nh * sizeof(float));
    if (p->stash_ctx && be->act_bytes == 2) {
        /* in place, through bytes: each 2-byte result lands behind the float it came from */
        unsigned char *dst = (unsigned char *)p->stash_ctx;
        for (size_t i = 0; i < nc; i++) {
            uint32_t u;
            memcpy(&u, &p->stash_ctx[i], sizeof u);
            uint16_t b = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
            memcpy(dst + 2 * i, &b, sizeof b);
        }
    }
    if (p->stash_ctx) be->to_device(be, V(m)->a.carry_ctx[p->cur], p->stash_ctx, nc * be->act_bytes);
    free(p->stash_h), free(p->stash_ctx);
    p->stash_h = p->stash_ctx = NULL;
    p->valid = 1;
}

static void mixer_forward(VilModel *m, const LayerOffsets *o, LayerActs *l, int i, int in, int out, float *hT) {
    const VilBackend *be = m->be;
    const VilConfig *c = &m->cfg;
    int B = m->acts.B, L = c->seq_len, D = c->embed_dim, E = c->d_inner, N = c->d_state, BL = B * L;
    int dl, xdbl_ld;
    vil_vim_xdbl_layout(c, &dl, &xdbl_ld);
    int has_A = vil_recurrences[c->rec].param.key != NULL;
    be->linear_forward(be, &(VilLinearFwd){.out = l->xz, .in = l->normed, .w = Wt(m, o->in_proj),
                                           .N = BL, .C = D, .OC = 2 * E, .ld_in = D, .ld_out = 2 * E});
    be->conv1d_silu_bidir_forward(be, &(VilConvBidirFwd){
        .u = {l->u}, .x = l->xz, .w = {Pm(m, o->conv_w)}, .b = {Pm(m, o->conv_b)}, .B = B, .L = L, .E = E,
        .K = c->d_conv, .ldx = 2 * E, .causal = 1, .ctx = in >= 0 ? slot_ctx(m, in, i) : NULL,
        .ctx_out = slot_ctx(m, out, i)});
    be->linear_forward(be, &(VilLinearFwd){.out = l->xdbl, .in = l->u, .w = Wt(m, o->x_proj),
                                           .N = BL, .C = E, .OC = xdbl_ld, .ld_in = E, .ld_out = xdbl_ld});
    be->linear_forward(be, &(VilLinearFwd){.out = l->delta, .in = l->xdbl, .w = Wt(m, o->dt_w), .b = Pm(m, o->dt_b),
                                           .N = BL, .C = dl, .OC = E, .ld_in = xdbl_ld, .ld_out = E});
    be->scan_bidir_forward(be, &(VilScanFwd){
        .rec = c->rec, .out = l->y, .u = {l->u}, .delta = {l->delta}, .xdbl = {l->xdbl}, .z = Ao(m, l->xz, E),
        .D = {Pm(m, o->D)}, .A_log = {has_A ? Pm(m, o->A_log) : NULL}, .B = B, .L = L, .E = E, .N = N,
        .dt_ld = dl, .xdbl_ld = xdbl_ld, .ldz = 2 * E, .states = m->acts.training ? l->scan_states : NULL,
        .h0 = in >= 0 ? slot_h(m, in, i) : init_h0(m, i), .hT = hT, .causal = 1});
    be->linear_forward(be, &(VilLinearFwd){.out = V(m)->a.h, .in = l->y, .w = Wt(m, o->out_proj),
                                           .N = BL, .C = E, .OC = D, .ld_in = E, .ld_out = D});
}

static void forward(VilModel *m, int with_loss) {
    const VilBackend *be = m->be;
    const VilConfig *c = &m->cfg;
    VilActs *io = &m->acts;
    Acts *a = &V(m)->a;
    Position *p = &V(m)->pos;
    const Offsets *o = &V(m)->off;
    int B = io->B, L = c->seq_len, D = c->embed_dim, H = c->img_size, R = c->readouts;
    /* chunk k > 0 reads the slot the last forward wrote (a resumed run's state first) */
    if (p->k > 0 && p->stash_h && m->acts.training && m->acts.B == V(m)->init.batch) take_stash(m);
    else if (p->k == 0) free(p->stash_h), free(p->stash_ctx), p->stash_h = p->stash_ctx = NULL;
    int in = p->k > 0 ? p->cur : -1, out = 1 - p->cur;
    int to_init = last_chunk(m, p->k);
    /* each row a 1 x 1 image of img_size channels: the patch embedding with P = 1 is a linear map
     * of the row (its weight (D, W, 1, 1) is embed.weight's (D, W)) */
    be->patch_embed_forward(be, &(VilPatchEmbedFwd){.out = a->tokens, .img = io->img, .w = Wt(m, o->embed_w),
                                                    .b = Pm(m, o->embed_b), .B = B * L, .C = H, .H = 1, .W = 1,
                                                    .P = 1, .S = 1, .D = D});
    for (int i = 0; i < c->depth; i++) {
        LayerActs *l = &a->layer[i];
        VilNormFwd nf = {.res_out = l->res, .normed = l->normed, .rstd = l->rstd, .w = Pm(m, o->layer[i].norm),
                         .B = B, .L = L, .D = D};
        if (i > 0) nf.res_in = a->layer[i - 1].res, nf.h = a->h;
        else nf.res_in = a->zeros, nf.h = a->tokens;
        be->add_rmsnorm_forward(be, &nf);
        float *hT = to_init ? vil_interv_hT(m, &V(m)->init, i) : slot_h(m, out, i);
        mixer_forward(m, &o->layer[i], l, i, in, out, hT);
    }
    p->fwd_in = in, p->fwd_k = p->k, p->cur = out;
    p->valid = !to_init;
    be->add_rmsnorm_forward(be, &(VilNormFwd){.res_out = a->res_f, .normed = a->normed_f, .rstd = a->rstd_f,
                                              .res_in = a->layer[c->depth - 1].res, .h = a->h,
                                              .w = Pm(m, o->norm_f), .B = B, .L = L, .D = D});
    /* the readouts: each image's last row, H rows apart in every sample alike (L = R H) */
    be->linear_forward(be, &(VilLinearFwd){.out = io->logits, .in = Ao(m, a->normed_f, (size_t)(H - 1) * D),
                                           .w = Wt(m, o->head_w), .b = Pm(m, o->head_b), .N = B * R, .C = D,
                                           .OC = c->num_classes, .ld_in = H * D, .ld_out = c->num_classes,
                                           .flags = VIL_LINEAR_OUT_F32});
    if (with_loss)
        be->softmax_xent_forward(be, &(VilXentFwd){.loss = io->losses, .probs = io->probs, .logits = io->logits,
                                                   .targets = io->targets, .B = B * R, .C = c->num_classes});
}

static void mixer_backward(VilModel *m, const LayerOffsets *o, LayerActs *l, int i) {
    const VilBackend *be = m->be;
    const VilConfig *c = &m->cfg;
    Acts *a = &V(m)->a;
    const Position *p = &V(m)->pos;
    int B = m->acts.B, L = c->seq_len, D = c->embed_dim, E = c->d_inner, N = c->d_state, BL = B * L;
    int dl, xdbl_ld;
    vil_vim_xdbl_layout(c, &dl, &xdbl_ld);
    int has_A = vil_recurrences[c->rec].param.key != NULL, in = p->fwd_in;
    be->linear_backward(be, &(VilLinearBwd){.dinp = a->dy, .dout = a->dh, .w = Wt(m, o->out_proj),
                                            .N = BL, .C = E, .OC = D, .ld_in = E, .ld_out = D});
    /* from the state the forward started from, a constant (truncated BPTT) */
    be->scan_bidir_backward(be, &(VilScanBwd){
        .rec = c->rec, .du = {a->du}, .ddelta = {l->delta}, .dxdbl = {a->dxdbl}, .dz = Ao(m, a->dxz, E),
        .dD = {Gr(m, o->D)}, .dA_log = {has_A ? Gr(m, o->A_log) : NULL}, .ddelta_sum = {Gr(m, o->dt_b)},
        .dout = a->dy, .u = {l->u}, .delta = {l->delta}, .xdbl = {l->xdbl}, .z = Ao(m, l->xz, E),
        .D = {Pm(m, o->D)}, .A_log = {has_A ? Pm(m, o->A_log) : NULL}, .B = B, .L = L, .E = E, .N = N,
        .dt_ld = dl, .xdbl_ld = xdbl_ld, .ldz = 2 * E, .states = l->scan_states,
        .h0 = in >= 0 ? slot_h(m, in, i) : init_h0(m, i), .out = a->dxz, .causal = 1});
    /* out_proj's weight gradient from the gated output the scan made again in dxz's x half */
    be->linear_backward(be, &(VilLinearBwd){.dw = Gr(m, o->out_proj), .dout = a->dh, .in = a->dxz,
                                            .w = Wt(m, o->out_proj), .N = BL, .C = E, .OC = D,
                                            .ld_in = 2 * E, .ld_out = D});
    be->linear_backward(be, &(VilLinearBwd){.dinp = a->dxdbl, .dw = Gr(m, o->dt_w), .dout = l->delta,
                                            .in = l->xdbl, .w = Wt(m, o->dt_w), .N = BL, .C = dl, .OC = E,
                                            .ld_in = xdbl_ld, .ld_out = E});
    be->linear_backward(be, &(VilLinearBwd){.dinp = a->du, .dw = Gr(m, o->x_proj), .dout = a->dxdbl,
                                            .in = l->u, .w = Wt(m, o->x_proj), .N = BL, .C = E, .OC = xdbl_ld,
                                            .ld_in = E, .ld_out = xdbl_ld, .accumulate_dinp = 1});
    be->conv1d_silu_bidir_backward(be, &(VilConvBidirBwd){
        .dx = a->dxz, .dw = {Gr(m, o->conv_w)}, .db = {Gr(m, o->conv_b)}, .du = {a->du}, .x = l->xz,
        .w = {Pm(m, o->conv_w)}, .b = {Pm(m, o->conv_b)}, .B = B, .L = L, .E = E, .K = c->d_conv, .ldx = 2 * E,
        .causal = 1, .ctx = in >= 0 ? slot_ctx(m, in, i) : NULL});
    be->linear_backward(be, &(VilLinearBwd){.dinp = a->dnormed, .dw = Gr(m, o->in_proj), .dout = a->dxz,
                                            .in = l->normed, .w = Wt(m, o->in_proj), .N = BL, .C = D,
                                            .OC = 2 * E, .ld_in = D, .ld_out = 2 * E});
}

static void backward(VilModel *m) {
    const VilBackend *be = m->be;
    const VilConfig *c = &m->cfg;
    VilActs *io = &m->acts;
    Acts *a = &V(m)->a;
    const Offsets *o = &V(m)->off;
    int B = io->B, L = c->seq_len, D = c->embed_dim, H = c->img_size, R = c->readouts, NC = c->num_classes;
    /* the loss is the mean over the batch's readouts: R of them per sample */
    be->softmax_xent_backward(be, &(VilXentBwd){.dlogits = a->dlogits, .probs = io->probs, .targets = io->targets,
                                                .B = B * R, .C = NC,
                                                .denom = (m->loss_denom > 0 ? m->loss_denom : B) * (long)R});
    be->zero(be, a->dnormed, (size_t)B * L * D * be->act_bytes);
    be->linear_backward(be, &(VilLinearBwd){
        .dinp = Ao(m, a->dnormed, (size_t)(H - 1) * D), .dw = Gr(m, o->head_w), .db = Gr(m, o->head_b),
        .dout = a->dlogits, .in = Ao(m, a->normed_f, (size_t)(H - 1) * D), .w = Wt(m, o->head_w),
        .N = B * R, .C = D, .OC = NC, .ld_in = H * D, .ld_out = NC, .flags = VIL_LINEAR_OUT_F32});
    be->zero(be, a->dres, (size_t)B * L * D * sizeof(float));
    be->add_rmsnorm_backward(be, &(VilNormBwd){.dres = a->dres, .dh = a->dh, .dw = Gr(m, o->norm_f),
                                               .dnormed = a->dnormed, .res_out = a->res_f, .rstd = a->rstd_f,
                                               .w = Pm(m, o->norm_f), .B = B, .L = L, .D = D});
    for (int i = c->depth - 1; i >= 0; i--) {
        LayerActs *l = &a->layer[i];
        mixer_backward(m, &o->layer[i], l, i);
        /* block 0 added the tokens to zeros: its dh is the tokens' gradient */
        be->add_rmsnorm_backward(be, &(VilNormBwd){.dres = a->dres, .dh = i > 0 ? a->dh : a->dtokens,
                                                   .dw = Gr(m, o->layer[i].norm), .dnormed = a->dnormed,
                                                   .res_out = l->res, .rstd = l->rstd, .w = Pm(m, o->layer[i].norm),
                                                   .B = B, .L = L, .D = D});
        vil_net_grads_ready(m, o->layer[i].begin, i == 0);
    }
    be->patch_embed_backward(be, &(VilPatchEmbedBwd){.dimg = io->dimg, .dw = Gr(m, o->embed_w), .db = Gr(m, o->embed_b),
                                                     .dout = a->dtokens, .w = Wt(m, o->embed_w), .img = io->img,
                                                     .B = B * L, .C = H, .H = 1, .W = 1, .P = 1, .S = 1, .D = D});
    vil_net_grads_ready(m, 0, 1);
}

/* ---------------- the initial-state interventions ---------------- */

/* interv.h's, at a stream's start only: a later chunk starts from the carried state */
static int set_init_state(VilModel *m, const VilInitSpec *spec, int B) {
    return vil_interv_set(m, &V(m)->init, spec, B);
}
static int sample_init_state(VilModel *m, uint64_t seed, long first) {
    if (V(m)->pos.k == 0) return vil_interv_sample(m, &V(m)->init, seed, first);
    V(m)->init.h0_set = 0;
    return 0;
}

/* after a training forward: the fit, or passing's states, from a stream's last chunk only */
static void fit_init_state(VilModel *m, const struct VilDist *dist) {
    if (last_chunk(m, V(m)->pos.fwd_k)) vil_interv_fit(m, &V(m)->init, dist);
}

/* ---------------- the training state ---------------- */

/* After the optimizer's and the EMA's: the interventions' (interv.h), then, where a training
 * stream is several chunks, the state and context carried into the next chunk (a run saved
 * inside a stream resumes bit for bit). */
enum { CARRY_H, CARRY_CTX };

/* the carried state's entries: none, the state, or the state and the conv context */
static int carry_count(const VilModel *m) {
    if (V(m)->init.batch <= 0 || chunks_per_stream(&m->cfg) <= 1) return 0;
    return ctx_rows(&m->cfg) ? 2 : 1;
}

static int state_count(const VilModel *m) { return vil_interv_state_count(&V(m)->init) + carry_count(m); }

/* entry i's carried tensor (CARRY_H, CARRY_CTX), or -1: one of the interventions' */
static int carry_of(const VilModel *m, int i) {
    int k = i - vil_interv_state_count(&V(m)->init);
    return k >= 0 ? k : -1;
}

static size_t carry_floats(const VilModel *m, int k) {
    const VilConfig *c = &m->cfg;
    return (size_t)c->depth * V(m)->init.batch * (k == CARRY_H ? c->d_state : ctx_rows(c)) * c->d_inner;
}

static VilTrainStateInfo state_info(const VilModel *m, int i) {
    const VilConfig *c = &m->cfg;
    int k = carry_of(m, i), h = k == CARRY_H;
    if (k < 0) return vil_interv_state_info(m, &V(m)->init, i);
    VilTrainStateInfo t = {.optional = 1};
    t.name = h ? "stream_state" : "stream_context";
    t.absent = "the state has no carried stream state (saved by a run without truncated BPTT): the "
               "streams in progress go on from zero";
    t.per_rank = 1;
    t.mismatch = "the state's carried stream state is for another batch or number of ranks: the streams "
                 "in progress go on from zero";
    t.group = 2;
    t.ndim = 4;
    int64_t sh[4] = {c->depth, V(m)->init.batch, h ? c->d_state : ctx_rows(c), c->d_inner};
    memcpy(t.shape, sh, sizeof sh);
    t.dims = h ? "layers, batch, d_state, d_inner" : "layers, batch, d_conv - 1, d_inner";
    t.numel = carry_floats(m, k);
    t.room = t.numel;
    return t;
}

/* the carried state of a training stream in progress, or zeros (a stream's end, no training
 * activations of the run's batch) */
static void carry_get(const VilModel *m, int k, float *host) {
    const Position *p = &V(m)->pos;
    size_t n = carry_floats(m, k);
    int have = p->valid && m->acts.training && m->acts.B == V(m)->init.batch;
    const float *stash = k == CARRY_H ? p->stash_h : p->stash_ctx;
    if (stash) memcpy(host, stash, n * sizeof(float)); /* restored, not yet taken by a forward */
    else if (!have) memset(host, 0, n * sizeof(float));
    else if (k == CARRY_H) m->be->to_host(m->be, host, V(m)->a.carry_h[p->cur], n * sizeof(float));
    else m->be->act_to_host_f32(m->be, host, V(m)->a.carry_ctx[p->cur], n);
}

/* the carried state of a resumed run: the activations are not there yet, so the next chunk's
 * forward takes it (take_stash) */
static int carry_set(VilModel *m, int k, const float *host) {
    Position *p = &V(m)->pos;
    float **dst = k == CARRY_H ? &p->stash_h : &p->stash_ctx;
    size_t bytes = carry_floats(m, k) * sizeof(float);
    free(*dst);
    *dst = NULL;
    if (!host) return 0;
    if (!(*dst = vil_try_malloc(bytes))) {
        vil_error("no host memory for the carried stream state (%zu bytes)", bytes);
        return -1;
    }
    memcpy(*dst, host, bytes);
    return 0;
}

static void state_get(const VilModel *m, int i, float *host) {
    int k = carry_of(m, i);
    if (k < 0) vil_interv_state_get(m, &V(m)->init, i, host);
    else carry_get(m, k, host);
}

static int state_set(VilModel *m, int i, const float *host) {
    int k = carry_of(m, i);
    return k < 0 ? vil_interv_state_set(m, &V(m)->init, i, host) : carry_set(m, k, host);
}

/* the fit's updates (the carried state has no count) */
static long state_counter(const VilModel *m, int i) {
    return carry_of(m, i) < 0 ? vil_interv_state_counter(&V(m)->init, i) : 0;
}
static void state_set_counter(VilModel *m, int i, long count) {
    if (carry_of(m, i) < 0) vil_interv_state_set_counter(&V(m)->init, i, count);
}

/* ---------------- the family ---------------- */

static void release(VilModel *m) {
    Stream *v = V(m);
    if (!v) return;
    vil_interv_free(m, &v->init);
    free(v->pos.stash_h);
    free(v->pos.stash_ctx);
    free(v->a.layer);
    free(v->off.layer);
    free(v);
    m->fam = NULL;
}

const VilNet vil_net_stream = {
    .name = "stream",
    .build = build,
    .release = release,
    .init_weights = init_weights,
    .macs = macs,
    .layout = layout,
    .drop_acts = drop_acts,
    .extra_bytes = extra_bytes,
    .check_batch = check_batch,
    .memory_hint = memory_hint,
    .forward = forward,
    .backward = backward,
    .drop_path_bytes = drop_path_bytes,
    .drop_path_rows = drop_path_rows,
    .set_init_state = set_init_state,
    .sample_init_state = sample_init_state,
    .fit_init_state = fit_init_state,
    .state_count = state_count,
    .state_info = state_info,
    .state_get = state_get,
    .state_set = state_set,
    .state_counter = state_counter,
    .state_set_counter = state_set_counter,
    .stream_chunk = stream_chunk,
};
