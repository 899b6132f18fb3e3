/* vim.c: the family of Vision Mamba's network (vil/net.h), with Longhorn's recurrence (ViL) or
 * Mamba's (ViM): the parameter table in the official checkpoint order, initialization, the
 * activation layout, the forward and backward sequences written once against the VilBackend op
 * table, drop path, the initial-state interventions of the scans and the states along the
 * sequence. The network of doc/models.md; nothing here knows which backend runs it. */
#include "interv.h"
#include "net.h"
#include "vim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* ---------------- the family's records ---------------- */

/* element offsets of each named parameter; [j] is direction j (0 forward, 1 backward) */
typedef struct {
    size_t A_log[2], D[2], in_proj, conv_w[2], conv_b[2], x_proj[2], dt_w[2], dt_b[2], out_proj, norm;
    size_t begin; /* the layer's tensors are [begin, the next layer's begin) */
} LayerOffsets;
typedef struct {
    size_t cls, pos, patch_w, patch_b, head_w, head_b, norm_f; /* pos: only with has_pos */
    LayerOffsets *layer; /* (depth) */
} Offsets;

/* activations; pointers into the model's one allocation. "act" tensors use the backend's type. */
typedef struct {
    float *res;     /* (B, L, D) f32: residual stream entering norm i */
    float *rstd;    /* (B, L) f32 */
    void *normed;   /* (B, L, D) act */
    void *xz;       /* (B, L, 2E) act: x | z */
    void *u[2];     /* (B, L, E) act: SiLU(conv1d(x)) per direction */
    void *xdbl[2];  /* (B, L, xdbl_ld) act: dt_low | 0 | k | q | 0 (below) */
    void *delta[2]; /* (B, L, E) act: dt_proj(dt_low) */
    void *ysum;     /* (B, L, E) act: gated, averaged scan output; in training every layer's is
                     * dysum (not kept: the scan backward makes it again, VilScanBwd.out) */
    float *scan_states; /* training: the scan's states at its chunk boundaries, kept from the
                         * forward for the backward (VilBackend.scan_states_bytes); or NULL */
} LayerActs;

typedef struct {
    void *patches;      /* (B, M, D) act */
    LayerActs *layer;   /* (depth); all alias one set when not training */
    void *h;            /* (B, L, D) act: mixer output, consumed by the next add */
    float *res_f, *rstd_f;
    void *normed_f;     /* (B, L, D) act */
    /* backward scratch, reused by every layer */
    float *dres;        /* (B, L, D) f32 */
    /* act. The backward shares buffers whose lives do not meet (layout): dnormed lies in dysum,
     * dh in normed_f, dpatches in du[1], the forward's ysum in dysum, the scan backward's ysum in
     * dxz's x half; each layer's ddelta is written over its own delta (VilScanBwd.ddelta) */
    void *dnormed, *dh, *dxz, *du[2], *dxdbl[2], *dysum, *dpatches;
    float *dlogits;     /* (B, classes) f32 */
} Acts;

typedef struct {
    Offsets off;
    Acts a;
    VilInterv init; /* the initial-state interventions (interv.h): two directions a layer */
} Vim;

static Vim *V(const VilModel *m) { return (Vim *)m->fam; }

/* the model has a pos_embed tensor (config key pos_embed = learned) */
static int has_pos(const VilConfig *c) { return c->pos_embed_kind == VIL_POS_EMBED_LEARNED; }

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
void vil_vim_xdbl_layout(const VilConfig *c, int *dl, int *xdbl_ld) {
    *dl = dt_ld(c);
    *xdbl_ld = xdbl_ld_of(c);
}

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define NDIM(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define ADD(decay, shape_args, ...) vil_param_table_add(&t, decay, NDIM shape_args, SHAPE shape_args, __VA_ARGS__)

static void build(const VilConfig *c, VilParamTable *tab, void **fam) {
    VilParamTable t = {0};
    int64_t D = c->embed_dim, E = c->d_inner, N = c->d_state, R = c->dt_rank, K = c->d_conv;
    const VilRecParam *rp = &vil_recurrences[c->rec].param;
    Offsets o = {0};
    /* no weight decay: 1-D tensors, pos_embed, cls_token */
    o.cls = ADD(0, (1, 1, D), "cls_token");
    if (has_pos(c)) o.pos = ADD(0, (1, c->seq_len, D), "pos_embed");
    o.patch_w = ADD(1, (D, c->in_chans, c->patch_size, c->patch_size), "patch_embed.proj.weight");
    o.patch_b = ADD(0, (D), "patch_embed.proj.bias");
    o.head_w = ADD(1, (c->num_classes, D), "head.weight");
    o.head_b = ADD(0, (c->num_classes), "head.bias");
    if (fam) o.layer = vil_calloc((size_t)c->depth, sizeof(LayerOffsets));
    for (int i = 0; i < c->depth; i++) {
        LayerOffsets l = {0};
        int first = t.n;
        const char *sfx[2] = {"", "_b"};
        for (int j = 0; j < 2; j++) {
            if (rp->key) { /* the recurrence's own parameter */
                int64_t shape[4];
                int nd = (int)strlen(rp->dims);
                for (int d = 0; d < nd; d++) shape[d] = rp->dims[d] == 'N' ? N : E;
                l.A_log[j] = vil_param_table_add(&t, 1, nd, shape, rp->key, i, sfx[j]);
            }
            l.D[j] = ADD(0, (E), "layers.%d.mixer.D%s", i, sfx[j]);
        }
        l.in_proj = ADD(1, (2 * E, D), "layers.%d.mixer.in_proj.weight", i);
        for (int j = 0; j < 2; j++) {
            l.conv_w[j] = ADD(1, (E, 1, K), "layers.%d.mixer.conv1d%s.weight", i, sfx[j]);
            l.conv_b[j] = ADD(0, (E), "layers.%d.mixer.conv1d%s.bias", i, sfx[j]);
            /* padded to x_dbl's layout (dt_ld, xdbl_ld) */
            l.x_proj[j] = ADD(1, (R + 2 * N, E), "layers.%d.mixer.x_proj%s.weight", i, sfx[j]);
            vil_param_table_relayout_last(&t, E, R, dt_ld(c) - R, (size_t)(xdbl_ld_of(c) - dt_ld(c) - 2 * N) * E);
            l.dt_w[j] = ADD(1, (E, R), "layers.%d.mixer.dt_proj%s.weight", i, sfx[j]);
            vil_param_table_relayout_last(&t, dt_ld(c), E, 0, 0);
            l.dt_b[j] = ADD(0, (E), "layers.%d.mixer.dt_proj%s.bias", i, sfx[j]);
        }
        l.out_proj = ADD(1, (D, E), "layers.%d.mixer.out_proj.weight", i);
        l.norm = ADD(0, (D), "layers.%d.norm.weight", i);
        l.begin = t.info[first].offset;
        if (fam) o.layer[i] = l;
    }
    o.norm_f = ADD(0, (D), "norm_f.weight");
    *tab = t;
    if (fam) {
        Vim *v = vil_calloc(1, sizeof *v);
        v->off = o;
        vil_interv_init(&v->init, 2, VIL_INTERV_NOUN("batch"));
        *fam = v;
    }
}

static double macs(const VilConfig *c) {
    double L = c->seq_len, M = c->n_patches, D = c->embed_dim, E = c->d_inner, N = c->d_state;
    double R = c->dt_rank, K = c->d_conv, P = c->patch_size;
    double dir = L * E * K               /* causal depthwise conv1d */
                 + L * E * (R + 2 * N)   /* x_proj */
                 + L * R * E             /* dt_proj */
                 + 3 * L * E * N;        /* the scan: state update (2) and readout (1) per element */
    double layer = L * D * 2 * E + 2 * dir + L * E * D; /* in_proj, both directions, out_proj */
    return M * D * c->in_chans * P * P + c->depth * layer + D * c->num_classes;
}

/* ---------------- initialization (doc/models.md) ---------------- */

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
    int D = c->embed_dim, E = c->d_inner, N = c->d_state, R = c->dt_rank, K = c->d_conv;
    /* cls_token, pos_embed: trunc normal std .02 (timm's bounds are +-2 absolute: no effect) */
    for (int i = 0; i < D; i++) h[o->cls + i] = 0.02f * vil_net_trunc_normal(&r, -100.f, 100.f);
    if (has_pos(c))
        for (size_t i = 0; i < (size_t)c->seq_len * D; i++)
            h[o->pos + i] = 0.02f * vil_net_trunc_normal(&r, -100.f, 100.f);
    /* patch_embed: lecun normal as timm: N(0,1) truncated to +-2, scaled so std = 1/sqrt(fan_in) */
    int fan = c->in_chans * c->patch_size * c->patch_size;
    float std = sqrtf(1.0f / fan) / 0.87962566103423978f;
    for (size_t i = 0; i < (size_t)D * fan; i++) h[o->patch_w + i] = std * vil_net_trunc_normal(&r, -2, 2);
    /* head: trunc normal std .02, bias 0 */
    for (size_t i = 0; i < (size_t)c->num_classes * D; i++)
        h[o->head_w + i] = 0.02f * vil_net_trunc_normal(&r, -100.f, 100.f);
    for (int l = 0; l < c->depth; l++) {
        const LayerOffsets *lo = &o->layer[l];
        /* Linear weights: kaiming uniform a = sqrt(5), i.e. U(+-1/sqrt(fan_in)) */
        vil_net_fill_uniform(h + lo->in_proj, (size_t)2 * E * D, 1.0f / sqrtf((float)D), &r);
        vil_net_fill_uniform(h + lo->out_proj, (size_t)D * E, 1.0f / sqrtf((float)E) / sqrtf((float)c->depth), &r);
        for (int j = 0; j < 2; j++) {
            for (int e = 0; e < E; e++) h[lo->D[j] + e] = 1.0f;
            const VilRecurrenceInfo *ri = &vil_recurrences[c->rec];
            if (ri->param.key) {
                int nd = ri->param.dims[1] ? N : 1;
                for (int e = 0; e < E; e++)
                    for (int n = 0; n < nd; n++) h[lo->A_log[j] + (size_t)e * nd + n] = ri->param.init(n);
            }
            /* conv1d: PyTorch default, fan_in = K (depthwise) */
            vil_net_fill_uniform(h + lo->conv_w[j], (size_t)E * K, 1.0f / sqrtf((float)K), &r);
            vil_net_fill_uniform(h + lo->conv_b[j], (size_t)E, 1.0f / sqrtf((float)K), &r);
            /* drawn as the dense tensors, then laid out with their padding */
            vil_net_fill_uniform(h + lo->x_proj[j], (size_t)(R + 2 * N) * E, 1.0f / sqrtf((float)E), &r);
            vil_param_store(vil_net_param_at(m, lo->x_proj[j]), h + lo->x_proj[j], h + lo->x_proj[j]);
            vil_net_fill_uniform(h + lo->dt_w[j], (size_t)E * R, 1.0f / sqrtf((float)R), &r);
            vil_param_store(vil_net_param_at(m, lo->dt_w[j]), h + lo->dt_w[j], h + lo->dt_w[j]);
            /* dt_proj bias: ViL "zero" (official Longhorn) leaves 0, beta starts at 0.5;
             * ViM's forward direction and ViL's "vim" option draw dt0 ~ logUniform[1e-3, 1e-1]
             * (>= 1e-4) and invert the activation (softplus for ViM, sigmoid for ViL). */
            int draw = ri->dt_draw_forward ? j == 0 : c->dt_init_kind == VIL_DT_INIT_VIM;
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
    int rc = vil_model_set_params(m, h);
    free(h);
    return rc;
}

/* ---------------- activations ---------------- */

/* The whole allocation in one order: the core's io and the family's x (the device buffers keep
 * this order and their 256-byte alignment). */
static void carve_all(const VilModel *m, VilArena *a, int B, int training, VilActs *io, Acts *x) {
    const VilConfig *c = &m->cfg;
    size_t ab = m->be->act_bytes, f = sizeof(float);
    size_t BL = (size_t)B * c->seq_len, D = c->embed_dim, E = c->d_inner;
    size_t xdbl_ld = (size_t)xdbl_ld_of(c), NC = c->num_classes;
    io->img = vil_arena_carve(a, (size_t)B * c->in_chans * c->img_size * c->img_size, f);
    x->patches = vil_arena_carve(a, (size_t)B * c->n_patches * D, ab);
    int nsets = training ? c->depth : 1;
    /* the scan's kept states: training only, where the backend keeps them at this shape */
    const VilScanFwd shape = {.rec = c->rec,
                              .B = B, .L = c->seq_len, .E = c->d_inner, .N = c->d_state};
    size_t states = training && m->be->scan_states_bytes ? m->be->scan_states_bytes(m->be, &shape) : 0;
    for (int i = 0; i < nsets; i++) {
        LayerActs *l = &x->layer[i];
        l->res = vil_arena_carve(a, BL * D, f);
        l->rstd = vil_arena_carve(a, BL, f);
        l->normed = vil_arena_carve(a, BL * D, ab);
        l->xz = vil_arena_carve(a, BL * 2 * E, ab);
        /* recomputed in the backward: layer 0's serve all */
        int rc = training ? m->recompute : VIL_RECOMPUTE_NONE;
        int own_u = i == 0 || rc != VIL_RECOMPUTE_ALL, own_delta = i == 0 || rc == VIL_RECOMPUTE_NONE;
        for (int j = 0; j < 2; j++) {
            l->u[j] = own_u ? vil_arena_carve(a, BL * E, ab) : x->layer[0].u[j];
            l->xdbl[j] = vil_arena_carve(a, BL * xdbl_ld, ab);
            l->delta[j] = own_delta ? vil_arena_carve(a, BL * E, ab) : x->layer[0].delta[j];
        }
        /* training: the scan backward makes ysum again for out_proj's weight gradient, so every
         * layer's forward writes it into dysum (set below), which the forward does not use */
        l->ysum = training ? NULL : vil_arena_carve(a, BL * E, ab);
        l->scan_states = states ? vil_arena_carve(a, states, 1) : NULL;
    }
    for (int i = nsets; i < c->depth; i++) x->layer[i] = x->layer[0];
    x->h = vil_arena_carve(a, BL * D, ab);
    x->res_f = vil_arena_carve(a, BL * D, f);
    x->rstd_f = vil_arena_carve(a, BL, f);
    x->normed_f = vil_arena_carve(a, BL * D, ab);
    io->logits = vil_arena_carve(a, (size_t)B * NC, f);
    io->probs = vil_arena_carve(a, (size_t)B * NC, f);
    io->losses = vil_arena_carve(a, (size_t)B, f);
    io->targets = vil_arena_carve(a, (size_t)B * NC, f);
    io->dp_scale = vil_arena_carve(a, (size_t)(c->depth + 1) * B, f);
    io->own_img = io->img, io->own_targets = io->targets, io->own_dp_scale = io->dp_scale;
    if (training) {
        x->dres = vil_arena_carve(a, BL * D, f);
        x->dxz = vil_arena_carve(a, BL * 2 * E, ab);
        for (int j = 0; j < 2; j++) {
            x->du[j] = vil_arena_carve(a, BL * E, ab);
            x->dxdbl[j] = vil_arena_carve(a, BL * xdbl_ld, ab);
        }
        x->dysum = vil_arena_carve(a, BL * E, ab);
        for (int i = 0; i < c->depth; i++) x->layer[i].ysum = x->dysum;
        /* buffers whose lives do not meet (E >= D): dnormed is written by in_proj's backward and
         * read by the norm's, between the scan backward that reads dysum and the next
         * out_proj backward that writes it; dh (written by the norm's backward, read by the
         * next out_proj's two products, on both sides of the scan backward) lies in normed_f,
         * which only the head's backward reads, before the first dh; dpatches after every layer */
        int share = E >= D;
        x->dnormed = share ? x->dysum : vil_arena_carve(a, BL * D, ab);
        x->dh = x->normed_f;
        x->dpatches = share ? x->du[1] : vil_arena_carve(a, (size_t)B * c->n_patches * D, ab);
        x->dlogits = vil_arena_carve(a, (size_t)B * NC, f);
        if (m->input_grad) io->dimg = vil_arena_carve(a, (size_t)B * c->in_chans * c->img_size * c->img_size, f);
    }
}

static size_t layout(VilModel *m, void *base, int B, int training) {
    VilArena a = {base, 0};
    if (!base) { /* sizes only: the model's pointers stay as they are */
        VilActs io = {0};
        Acts x = {0};
        x.layer = vil_calloc((size_t)m->cfg.depth, sizeof(LayerActs));
        carve_all(m, &a, B, training, &io, &x);
        free(x.layer);
        return a.off;
    }
    Acts *x = &V(m)->a;
    free(x->layer);
    memset(x, 0, sizeof *x);
    x->layer = vil_calloc((size_t)m->cfg.depth, sizeof(LayerActs));
    carve_all(m, &a, B, training, &m->acts, x);
    if (training) /* dx_dbl's padding columns must be 0 (xdbl_ld); nothing writes them later */
        for (int j = 0; j < 2; j++)
            m->be->zero(m->be, x->dxdbl[j], (size_t)B * m->cfg.seq_len * xdbl_ld_of(&m->cfg) * m->be->act_bytes);
    return a.off;
}

static void drop_acts(VilModel *m) {
    free(V(m)->a.layer);
    memset(&V(m)->a, 0, sizeof V(m)->a);
}

static size_t extra_bytes(const VilModel *m, int B) { return vil_interv_extra_bytes(m, &V(m)->init, B); }

static int check_batch(const VilModel *m, int B, const char *what) {
    const VilConfig *c = &m->cfg;
    /* the ops index a (B * L, 2E) tensor with 32-bit integers */
    if ((double)B * c->seq_len * 2 * c->d_inner >= 2147483648.0) {
        vil_error("%s: %d x %d tokens x %d channels is past what the ops index (2^31 elements): "
                  "lower the batch or the image size", what, B, c->seq_len, 2 * c->d_inner);
        return -1;
    }
    return 0;
}

static const char *memory_hint(const VilModel *m, int training) {
    return training && m->recompute != VIL_RECOMPUTE_ALL
               ? "lower the batch or the image size, or set recompute = 1 (46% less) or 2 (23% less)"
               : "lower the batch or the image size";
}

static int act(const VilModel *m, const char *name, VilActView *v) {
    const VilConfig *c = &m->cfg;
    const Acts *x = &V(m)->a;
    if (!m->acts.base || !x->layer) return -1;
    size_t BL = (size_t)m->acts.B * c->seq_len, E = c->d_inner;
    int i, n;
    char what[32];
    if (sscanf(name, "layers.%d.mixer.%31[a-z_]%n", &i, what, &n) != 2 || name[n] || i < 0 || i >= c->depth)
        return -1;
    const LayerActs *l = &x->layer[i];
    int j = strlen(what) > 2 && !strcmp(what + strlen(what) - 2, "_b");
    if (j) what[strlen(what) - 2] = 0;
    memset(v, 0, sizeof *v);
    v->act = 1;
    if (!strcmp(what, "u")) v->data = l->u[j], v->numel = BL * E, v->ld = E;
    else if (!strcmp(what, "delta")) v->data = l->delta[j], v->numel = BL * E, v->ld = E;
    else if (!strcmp(what, "x_dbl")) v->data = l->xdbl[j], v->ld = (size_t)xdbl_ld_of(c), v->numel = BL * v->ld;
    else if (!strcmp(what, "scan_states") && !j) v->data = l->scan_states, v->act = 0, v->numel = 0;
    else return -1;
    return v->data ? 0 : -1;
}

/* ---------------- forward / backward ---------------- */

#define Wt vil_net_weight
#define Pm vil_net_param
#define Gr vil_net_grad
#define Ao vil_net_act_at

/* drop-path scale row i (the add in front of norm i, i = depth for norm_f), or NULL */
static const float *dp_row(const VilModel *m, int i) {
    if (!m->acts.training || m->cfg.drop_path <= 0.0f) return NULL;
    return m->acts.dp_scale + (size_t)i * m->acts.B;
}

static size_t drop_path_bytes(const VilModel *m) {
    if (!m->acts.training || m->cfg.drop_path <= 0.0f) return 0;
    return (size_t)(m->cfg.depth + 1) * m->acts.B * sizeof(float);
}

static void drop_path_rows(const VilModel *m, uint64_t seed, long first, float *h) {
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

/* u = SiLU(conv1d(x)) of both directions in one pass over x */
static void conv_forward(VilModel *m, const LayerOffsets *o, LayerActs *l) {
    const VilConfig *c = &m->cfg;
    m->be->conv1d_silu_bidir_forward(m->be, &(VilConvBidirFwd){
        .u = {l->u[0], l->u[1]}, .x = l->xz,
        .w = {Pm(m, o->conv_w[0]), Pm(m, o->conv_w[1])}, .b = {Pm(m, o->conv_b[0]), Pm(m, o->conv_b[1])},
        .B = m->acts.B, .L = c->seq_len, .E = c->d_inner, .K = c->d_conv, .ldx = 2 * c->d_inner});
}
/* delta = dt_proj(dt_low) of direction j */
static void delta_forward(VilModel *m, const LayerOffsets *o, LayerActs *l, int j) {
    const VilConfig *c = &m->cfg;
    m->be->linear_forward(m->be, &(VilLinearFwd){.out = l->delta[j], .in = l->xdbl[j], .w = Wt(m, o->dt_w[j]),
                                                 .b = Pm(m, o->dt_b[j]), .N = m->acts.B * c->seq_len,
                                                 .C = dt_ld(c), .OC = c->d_inner, .ld_in = xdbl_ld_of(c),
                                                 .ld_out = c->d_inner});
}

static void mixer_forward(VilModel *m, const LayerOffsets *o, LayerActs *l, void *out, int i) {
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
        .states = m->acts.training ? l->scan_states : NULL, .h0 = vil_interv_h0(m, &V(m)->init, i),
        .hT = vil_interv_hT(m, &V(m)->init, i)});
    be->linear_forward(be, &(VilLinearFwd){.out = out, .in = l->ysum, .w = Wt(m, o->out_proj),
                                           .N = BL, .C = E, .OC = D, .ld_in = E, .ld_out = D});
}

static void forward(VilModel *m, int with_loss) {
    const VilBackend *be = m->be;
    const VilConfig *c = &m->cfg;
    VilActs *io = &m->acts;
    Acts *a = &V(m)->a;
    const Offsets *o = &V(m)->off;
    int B = io->B, L = c->seq_len, D = c->embed_dim;
    be->patch_embed_forward(be, &(VilPatchEmbedFwd){
        .out = a->patches, .img = io->img, .w = Wt(m, o->patch_w), .b = Pm(m, o->patch_b), .B = B,
        .C = c->in_chans, .H = c->img_size, .W = c->img_size, .P = c->patch_size, .S = c->stride, .D = D});
    be->tokens_forward(be, &(VilTokensFwd){.x = a->layer[0].res, .patches = a->patches, .cls = Pm(m, o->cls),
                                           .pos = has_pos(c) ? Pm(m, o->pos) : NULL, .B = B,
                                           .M = c->n_patches, .D = D, .t = c->cls_pos});
    for (int i = 0; i < c->depth; i++) {
        LayerActs *l = &a->layer[i];
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
    be->linear_forward(be, &(VilLinearFwd){.out = io->logits, .in = Ao(m, a->normed_f, (size_t)c->cls_pos * D),
                                           .w = Wt(m, o->head_w), .b = Pm(m, o->head_b), .N = B, .C = D,
                                           .OC = c->num_classes, .ld_in = L * D, .ld_out = c->num_classes,
                                           .flags = VIL_LINEAR_OUT_F32});
    if (with_loss)
        be->softmax_xent_forward(be, &(VilXentFwd){.loss = io->losses, .probs = io->probs, .logits = io->logits,
                                                   .targets = io->targets, .B = B, .C = c->num_classes});
}

static void mixer_backward(VilModel *m, const LayerOffsets *o, LayerActs *l, int i) {
    const VilBackend *be = m->be;
    const VilConfig *c = &m->cfg;
    Acts *a = &V(m)->a;
    int B = m->acts.B, L = c->seq_len, D = c->embed_dim, E = c->d_inner, N = c->d_state;
    int dl = dt_ld(c), xdbl_ld = xdbl_ld_of(c), BL = B * L;
    int has_A = vil_recurrences[c->rec].param.key != NULL;
    be->linear_backward(be, &(VilLinearBwd){.dinp = a->dysum, .dout = a->dh, .w = Wt(m, o->out_proj),
                                            .N = BL, .C = E, .OC = D, .ld_in = E, .ld_out = D});
    /* what this layer did not keep, again by the forward's own ops */
    if (m->acts.recompute == VIL_RECOMPUTE_ALL) conv_forward(m, o, l);
    if (m->acts.recompute != VIL_RECOMPUTE_NONE)
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
        .h0 = vil_interv_h0(m, &V(m)->init, i), .out = a->dxz});
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

static void backward(VilModel *m) {
    const VilBackend *be = m->be;
    const VilConfig *c = &m->cfg;
    VilActs *io = &m->acts;
    Acts *a = &V(m)->a;
    const Offsets *o = &V(m)->off;
    int B = io->B, L = c->seq_len, D = c->embed_dim, NC = c->num_classes;
    be->softmax_xent_backward(be, &(VilXentBwd){.dlogits = a->dlogits, .probs = io->probs,
                                                .targets = io->targets, .B = B, .C = NC,
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
        LayerActs *l = &a->layer[i];
        mixer_backward(m, &o->layer[i], l, i);
        be->add_rmsnorm_backward(be, &(VilNormBwd){.dres = a->dres, .dh = i > 0 ? a->dh : NULL,
                                                   .dw = Gr(m, o->layer[i].norm), .dnormed = a->dnormed,
                                                   .res_out = l->res, .rstd = l->rstd,
                                                   .w = Pm(m, o->layer[i].norm),
                                                   .scale = i > 0 ? dp_row(m, i) : NULL, .B = B, .L = L, .D = D});
        vil_net_grads_ready(m, o->layer[i].begin, i == 0);
    }
    be->tokens_backward(be, &(VilTokensBwd){.dpatches = a->dpatches, .dcls = Gr(m, o->cls),
                                            .dpos = has_pos(c) ? Gr(m, o->pos) : NULL, .dx = a->dres, .B = B,
                                            .M = c->n_patches, .D = D, .t = c->cls_pos});
    be->patch_embed_backward(be, &(VilPatchEmbedBwd){
        .dimg = io->dimg, .dw = Gr(m, o->patch_w), .db = Gr(m, o->patch_b), .dout = a->dpatches,
        .w = Wt(m, o->patch_w), .img = io->img, .B = B, .C = c->in_chans, .H = c->img_size,
        .W = c->img_size, .P = c->patch_size, .S = c->stride, .D = D});
    vil_net_grads_ready(m, 0, 1);
}

/* ---------------- the initial-state interventions ---------------- */

/* interv.h's, at every training forward: sampled before it, fitted after it */
static int set_init_state(VilModel *m, const VilInitSpec *spec, int B) {
    return vil_interv_set(m, &V(m)->init, spec, B);
}
static int sample_init_state(VilModel *m, uint64_t seed, long first) {
    return vil_interv_sample(m, &V(m)->init, seed, first);
}
static void fit_init_state(VilModel *m, const struct VilDist *dist) { vil_interv_fit(m, &V(m)->init, dist); }

/* the training state: the interventions' alone */
static int state_count(const VilModel *m) { return vil_interv_state_count(&V(m)->init); }
static VilTrainStateInfo state_info(const VilModel *m, int i) { return vil_interv_state_info(m, &V(m)->init, i); }
static void state_get(const VilModel *m, int i, float *host) { vil_interv_state_get(m, &V(m)->init, i, host); }
static int state_set(VilModel *m, int i, const float *host) { return vil_interv_state_set(m, &V(m)->init, i, host); }
static long state_counter(const VilModel *m, int i) { return vil_interv_state_counter(&V(m)->init, i); }
static void state_set_counter(VilModel *m, int i, long count) { vil_interv_state_set_counter(&V(m)->init, i, count); }

/* ---------------- the states along the sequence ---------------- */

static int seq_streams(const VilModel *m, int *L, int *state) {
    *L = m->cfg.seq_len;
    *state = m->cfg.d_state * m->cfg.d_inner;
    return 2 * m->cfg.depth;
}

/* the forward's kept scan inputs of stream (layer i, direction j), checked: 0, or -1 (reported) */
static int seq_layer(VilModel *m, int stream, const char *what) {
    const VilConfig *c = &m->cfg;
    if (!m->acts.training || m->acts.recompute != VIL_RECOMPUTE_NONE || !V(m)->a.layer || stream < 0 ||
        stream >= 2 * c->depth) {
        vil_error("the %s need a forward on training activations of every layer (recompute 0) of this model "
                  "(stream %d of %d)", what, stream, 2 * c->depth);
        return -1;
    }
    return 0;
}

/* One replay of stream (i, j) from a zero state over tokens t0 .. t0 + L - 1 of samples b0 ..
 * b0 + B - 1 (the whole sequence: t0 0, L seq_len; a part of it needs B 1: the activations are
 * (B, seq_len, ...) rows), into the device buffers dsq (B, L) and dT (B, N, E). */
static void seq_replay(VilModel *m, int stream, int b0, int B, int t0, int L, float *dsq, float *dT) {
    const VilConfig *c = &m->cfg;
    const Acts *a = &V(m)->a;
    const VilBackend *be = m->be;
    int i = stream / 2, j = stream % 2, E = c->d_inner;
    const LayerOffsets *o = &V(m)->off.layer[i];
    size_t row = ((size_t)b0 * c->seq_len + t0) * be->act_bytes, xld = (size_t)xdbl_ld_of(c);
    be->scan_dir_states(be, &(VilScanStates){
        .rec = c->rec, .hsq = dsq, .hT = dT, .u = (const char *)a->layer[i].u[j] + row * E,
        .delta = (const char *)a->layer[i].delta[j] + row * E, .xdbl = (const char *)a->layer[i].xdbl[j] + row * xld,
        .D = Pm(m, o->D[j]), .A_log = vil_recurrences[c->rec].param.key ? Pm(m, o->A_log[j]) : NULL,
        .B = B, .L = L, .E = E, .N = c->d_state, .dt_ld = dt_ld(c), .xdbl_ld = (int)xld, .reverse = j});
}

/* device buffers of nsq and nT bytes, or -1 (reported) */
static int seq_alloc(const VilBackend *be, size_t nsq, size_t nT, float **dsq, float **dT, int stream) {
    *dsq = be->alloc(be, nsq), *dT = *dsq ? be->alloc(be, nT) : NULL;
    if (*dT) return 0;
    if (*dsq) be->free(be, *dsq);
    vil_error("the states along stream %d cannot be allocated on the %s device", stream, be->name);
    return -1;
}

static int seq_states(VilModel *m, int stream, float *hsq, float *hT) {
    const VilBackend *be = m->be;
    int B = m->acts.B, L = m->cfg.seq_len;
    if (seq_layer(m, stream, "states along the sequence") != 0) return -1;
    size_t nsq = (size_t)B * L * sizeof(float), nT = (size_t)B * m->cfg.d_state * m->cfg.d_inner * sizeof(float);
    float *dsq, *dT;
    if (seq_alloc(be, nsq, nT, &dsq, &dT, stream) != 0) return -1;
    seq_replay(m, stream, 0, B, 0, L, dsq, dT);
    be->to_host(be, hsq, dsq, nsq);
    be->to_host(be, hT, dT, nT);
    be->free(be, dsq);
    be->free(be, dT);
    return 0;
}

/* the state after the step that reads token t: the forward direction's replay of tokens 0..t,
 * the backward's of t..L-1 (read from L-1 down), a sample at a time */
static int seq_state_at(VilModel *m, int stream, int t, float *h) {
    const VilBackend *be = m->be;
    int B = m->acts.B, L = m->cfg.seq_len, j = stream % 2;
    if (seq_layer(m, stream, "states at a token") != 0) return -1;
    if (t < 0 || t >= L) {
        vil_error("the state at token %d: the sequence has tokens 0..%d", t, L - 1);
        return -1;
    }
    int t0 = j ? t : 0, n = j ? L - t : t + 1;
    size_t S = (size_t)m->cfg.d_state * m->cfg.d_inner, nT = S * sizeof(float);
    float *dsq, *dT;
    if (seq_alloc(be, (size_t)n * sizeof(float), nT, &dsq, &dT, stream) != 0) return -1;
    for (int b = 0; b < B; b++) {
        seq_replay(m, stream, b, 1, t0, n, dsq, dT);
        be->to_host(be, h + (size_t)b * S, dT, nT);
    }
    be->free(be, dsq);
    be->free(be, dT);
    return 0;
}

/* ---------------- the family ---------------- */

static void release(VilModel *m) {
    Vim *v = V(m);
    if (!v) return;
    vil_interv_free(m, &v->init);
    free(v->a.layer);
    free(v->off.layer);
    free(v);
    m->fam = NULL;
}

const VilNet vil_net_vim = {
    .name = "vim",
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
    .act = act,
    .seq_streams = seq_streams,
    .seq_states = seq_states,
    .seq_state_at = seq_state_at,
};
