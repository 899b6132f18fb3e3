/* test_stream.c: the stream family (vil/stream.c) on the CPU: the gradient of the mean readout
 * loss with respect to every parameter tensor and the input rows against central finite
 * differences (gradcheck.h; a stream's start, an intervention's initial state, and a later chunk
 * whose carried state and conv context are held constant: truncated BPTT), causality (a later
 * token never changes an earlier readout), the chunking identity of the forward (one call over K
 * images = K / c calls of c images with the state and the context carried), and the
 * stream batches of data/stream.c (determinism by seed, each stream's chunks in order, labels
 * per image, evaluation streams per position), state passing at a stream's start (a stream
 * then goes on where the one before it ended), and the fit's ablations there (the scalar fit
 * against the element fit's pooled statistics, the momentum, the mean alone against passing from
 * it, zero starts with probability 1 against the zero start). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/loader.h"
#include "data_corpus.h"
#include "gradcheck.h"
#include "model_testing.h"
#include "testing.h"
#include "train/train_config.h"
#include "vil/common.h"
#include "vil/model.h"

static VilRng rng;

/* a small stream model: 6 x 6 images (tokens of 6 pixels), K images per stream, c per forward */
static void stream_config(VilConfig *c, const char *arch, int K, int chunk) {
    vil_config_default(c);
    strcpy(c->arch, arch);
    strcpy(c->family, "stream");
    c->img_size = 6;
    c->in_chans = 1;
    c->embed_dim = 8;
    c->depth = 2;
    c->d_state = 4;
    c->d_conv = 3;
    c->num_classes = 5;
    c->stream_len = K;
    c->stream_chunk = chunk;
}

/* a model of c with weights off their init (model_testing.h), seed s */
static void stream_model(VilModel *m, VilConfig *c, uint64_t s) {
    T_CHECK(vil_config_finalize(c) == 0, "finalize the stream config");
    T_CHECK(vil_model_init(m, c, &vil_backend_cpu) == 0, "init the stream model");
    vil_model_init_weights(m, s);
    float *p = vil_malloc(m->buf_len * sizeof(float));
    VilRng r;
    vil_rng_seed(&r, s);
    t_perturbed_params(m, &r, p);
    vil_model_set_params(m, p);
    free(p);
}

/* images (B, K, H, W) and one-hot targets with smoothing (B, K, classes) of a whole stream */
typedef struct {
    int B, K;
    float *img, *targets;
} Streams;

static Streams make_streams(const VilConfig *c, int B, int K) {
    Streams s = {B, K, vil_malloc((size_t)B * K * c->img_size * c->img_size * sizeof(float)),
                 vil_calloc((size_t)B * K * c->num_classes, sizeof(float))};
    gc_fill(s.img, (size_t)B * K * c->img_size * c->img_size, 1.0f, &rng);
    for (int i = 0; i < B * K; i++) {
        float *t = s.targets + (size_t)i * c->num_classes;
        for (int k = 0; k < c->num_classes; k++) t[k] = 0.1f / c->num_classes;
        t[vil_rng_below(&rng, (uint32_t)c->num_classes)] += 0.9f;
    }
    return s;
}

/* chunk j (of the model's stream_chunk images) of every stream into the model's inputs */
static void upload_chunk(VilModel *m, const Streams *s, int j) {
    const VilConfig *c = &m->cfg;
    size_t img = (size_t)c->img_size * c->img_size, R = c->readouts;
    for (int b = 0; b < s->B; b++) {
        memcpy(m->acts.img + b * R * img, s->img + ((size_t)b * s->K + j * R) * img, R * img * sizeof(float));
        memcpy(m->acts.targets + b * R * c->num_classes, s->targets + ((size_t)b * s->K + j * R) * c->num_classes,
               R * c->num_classes * sizeof(float));
    }
}

/* ---------------- gradients ---------------- */

/* The loss of chunk `k` (the model's inputs), with the chunks before it run on the parameters
 * `before` and the inputs `before_img` (chunk k-1's): the state they carry in stays what the
 * backward took as a constant while the finite differences move the parameters or the inputs
 * of chunk k alone. */
typedef struct {
    VilModel *m;
    int k;
    const float *before;      /* (buf_len) parameters of the chunks before, or NULL */
    const float *before_img;  /* chunk k-1's inputs */
    float *now, *now_img;     /* scratch */
} Ctx;

static double chunk_loss(void *p) {
    Ctx *x = p;
    VilModel *m = x->m;
    size_t ni = (size_t)m->acts.B * m->cfg.in_floats;
    if (x->k > 0) {
        memcpy(x->now, m->params, m->buf_len * sizeof(float));
        memcpy(x->now_img, m->acts.img, ni * sizeof(float));
        memcpy(m->params, x->before, m->buf_len * sizeof(float));
        memcpy(m->acts.img, x->before_img, ni * sizeof(float));
        vil_model_stream_chunk(m, x->k - 1);
        vil_model_forward(m, 0);
        memcpy(m->params, x->now, m->buf_len * sizeof(float));
        memcpy(m->acts.img, x->now_img, ni * sizeof(float));
    }
    vil_model_stream_chunk(m, x->k);
    vil_model_forward(m, 1);
    double s = 0;
    for (int i = 0; i < m->acts.B * m->cfg.readouts; i++) s += m->acts.losses[i];
    return s / (m->acts.B * m->cfg.readouts);
}

/* The finite differences (gradcheck.h) at test_model's step; a tensor whose directional
 * derivatives are ~1e-5 (a second layer's dt_proj of ViL here: 2.5e-5 to 8e-5 over seeds) is
 * measured against FLOOR, since at the largest step (20 x 3e-3) the loss's float32 rounding
 * leaves them ~5e-6 of noise (20% of such a gradient, measured): a gradient wrongly 0 there
 * still measures 0.25 and fails. */
#define STEP 3e-3f
#define FLOOR 1e-4

/* every parameter tensor and the input rows; `k`: the chunk checked (0: a stream's start, with
 * the intervention `mode`'s initial state) */
static void test_gradients(const char *arch, int k, VilInitMode mode) {
    VilConfig c;
    stream_config(&c, arch, 4, 2);
    VilModel m;
    stream_model(&m, &c, 7);
    m.input_grad = 1;
    int B = 8; /* more readouts: the mean loss's rounding noise falls, its derivatives do not */
    if (mode != VIL_INIT_ZERO) T_CHECK(vil_model_set_init_state(&m, &(VilInitSpec){.mode = mode, .sigma = 0.5f, .fit_momentum = 0.99f}, B) == 0, "set_init_state");
    T_CHECK(vil_model_alloc_acts(&m, B, 1) == 0, "training activations");
    Streams s = make_streams(&m.cfg, B, 4);
    size_t ni = (size_t)B * m.cfg.in_floats;
    float *before = vil_malloc(m.buf_len * sizeof(float)), *before_img = vil_malloc(ni * sizeof(float));
    Ctx ctx = {&m, k, before, before_img, vil_malloc(m.buf_len * sizeof(float)), vil_malloc(ni * sizeof(float))};
    memcpy(before, m.params, m.buf_len * sizeof(float));
    upload_chunk(&m, &s, 0);
    memcpy(before_img, m.acts.img, ni * sizeof(float));
    upload_chunk(&m, &s, k);
    vil_model_stream_chunk(&m, k);
    vil_model_sample_init_state(&m, 99, 0); /* fixed draws: the same in every evaluation */
    vil_model_zero_grad(&m);
    chunk_loss(&ctx);
    vil_model_backward(&m);
    float *g = vil_malloc(m.buf_len * sizeof(float));
    memcpy(g, m.grads, m.buf_len * sizeof(float));
    char name[160];
    const char *what = k > 0 ? "chunk 1, carried" : mode == VIL_INIT_NOISE ? "noise h0" : "start";
    for (int i = 0; i < m.n_tensors; i++) {
        const VilParamInfo *pi = &m.info[i];
        snprintf(name, sizeof name, "stream %s [%s] %s", arch, what, pi->name);
        gc_check_dir_floor(name, chunk_loss, &ctx, m.params + pi->offset, g + pi->offset, vil_param_extent(pi), 3,
                           STEP, 1e-1, FLOOR, &rng);
    }
    float *dimg = vil_malloc(ni * sizeof(float));
    memcpy(dimg, m.acts.dimg, ni * sizeof(float));
    snprintf(name, sizeof name, "stream %s [%s] input rows", arch, what);
    gc_check_dir_floor(name, chunk_loss, &ctx, m.acts.img, dimg, ni, 3, STEP, 1e-1, FLOOR, &rng);
    free(dimg), free(g), free(before), free(before_img), free(ctx.now), free(ctx.now_img);
    free(s.img), free(s.targets);
    vil_model_free(&m);
}

/* ---------------- causality and chunking ---------------- */

/* the logits (B, K, classes) of whole streams, run chunk by chunk with the state carried */
static float *stream_logits(VilModel *m, const Streams *s, int training) {
    const VilConfig *c = &m->cfg;
    int R = c->readouts;
    vil_model_alloc_acts(m, s->B, training);
    float *out = vil_malloc((size_t)s->B * s->K * c->num_classes * sizeof(float));
    float *part = vil_malloc((size_t)s->B * R * c->num_classes * sizeof(float));
    for (int j = 0; j < s->K / R; j++) {
        upload_chunk(m, s, j);
        vil_model_stream_chunk(m, j);
        vil_model_forward(m, training);
        vil_model_logits(m, part);
        for (int b = 0; b < s->B; b++)
            memcpy(out + ((size_t)b * s->K + j * R) * c->num_classes, part + (size_t)b * R * c->num_classes,
                   (size_t)R * c->num_classes * sizeof(float));
    }
    free(part);
    return out;
}

/* changing image t's row r changes no readout before image t, and image t's own */
static void test_causality(const char *arch) {
    VilConfig c;
    stream_config(&c, arch, 6, 6);
    VilModel m;
    stream_model(&m, &c, 3);
    Streams s = make_streams(&m.cfg, 2, 6);
    float *a = stream_logits(&m, &s, 0);
    int H = c.img_size, NC = c.num_classes;
    int t = 3, r = 2; /* image 3's row 2: tokens 20 */
    for (int x = 0; x < H; x++) s.img[((size_t)1 * 6 + t) * H * H + (size_t)r * H + x] += 1.0f;
    float *b = stream_logits(&m, &s, 0);
    int same_before = 1, changed_after = 1;
    for (int k = 0; k < 6; k++) {
        int differ = memcmp(a + ((size_t)1 * 6 + k) * NC, b + ((size_t)1 * 6 + k) * NC, NC * sizeof(float)) != 0;
        if (k < t) same_before &= !differ;
        else changed_after &= differ;
    }
    T_CHECK(same_before, "%s: a readout before image %d changed when its row %d did", arch, t, r);
    T_CHECK(changed_after, "%s: a readout from image %d on did not see its row %d change", arch, t, r);
    T_CHECK(memcmp(a, b, (size_t)6 * NC * sizeof(float)) == 0, "%s: the other stream's readouts changed", arch);
    free(a), free(b), free(s.img), free(s.targets);
    vil_model_free(&m);
}

/* max |a - b| / max |a| over n */
static double rel_diff(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs(a[i] - b[i])), m = fmax(m, fabs(a[i]));
    return d / (m > 0 ? m : 1);
}

/* one forward over K images = K / c forwards of c images with the state and context carried, in
 * inference and in training. The causal ops are exact in chunks (test_ops); the matrix products
 * round a row by where it falls in BLAS's tiles, which depends on the rows per call, so the
 * logits agree to float rounding. Without the carry (every chunk a stream's start) they do not. */
static void test_chunking(const char *arch) {
    VilConfig whole, cut;
    stream_config(&whole, arch, 6, 6);
    whole.img_size = 3; /* a readout 2 rows past a chunk's start: inside the conv's carried context */
    VilModel mw, mc;
    stream_model(&mw, &whole, 5);
    float *p = vil_malloc(mw.buf_len * sizeof(float));
    vil_model_get_params(&mw, p);
    int chunks[3] = {1, 2, 3};
    Streams s = make_streams(&mw.cfg, 3, 6);
    size_t n = (size_t)3 * 6 * whole.num_classes;
    char name[128];
    for (int training = 0; training < 2; training++) {
        float *a = stream_logits(&mw, &s, training);
        for (int i = 0; i < 3; i++) {
            stream_config(&cut, arch, 6, chunks[i]);
            cut.img_size = 3;
            T_CHECK(vil_config_finalize(&cut) == 0 && vil_model_init(&mc, &cut, &vil_backend_cpu) == 0, "init");
            vil_model_set_params(&mc, p);
            float *b = stream_logits(&mc, &s, training);
            snprintf(name, sizeof name, "%s %s: 6 images = %d chunks of %d", arch, training ? "training" : "inference",
                     6 / chunks[i], chunks[i]);
            T_CLOSE(name, rel_diff(a, b, n), 1e-5);
            free(b);
            vil_model_free(&mc);
        }
        free(a);
    }
    /* the control: chunks of 2 with nothing carried differ from the image after the first chunk on,
     * 100 times the tolerance at least (measured 3.2e-3 for Mamba, whose state decays fast here) */
    stream_config(&cut, arch, 6, 2);
    cut.img_size = 3;
    vil_config_finalize(&cut);
    vil_model_init(&mc, &cut, &vil_backend_cpu);
    vil_model_set_params(&mc, p);
    float *a = stream_logits(&mw, &s, 0), *b = vil_malloc(n * sizeof(float));
    vil_model_alloc_acts(&mc, 3, 0);
    for (int j = 0; j < 3; j++) {
        upload_chunk(&mc, &s, j);
        vil_model_stream_chunk(&mc, 0);
        vil_model_forward(&mc, 0);
        for (int bb = 0; bb < 3; bb++)
            memcpy(b + ((size_t)bb * 6 + 2 * j) * whole.num_classes, mc.acts.logits + (size_t)bb * 2 * whole.num_classes,
                   (size_t)2 * whole.num_classes * sizeof(float));
    }
    T_CHECK(rel_diff(a, b, n) > 100 * 1e-5, "%s: chunks that carry nothing agree with one forward (%g): the test cannot fail",
            arch, rel_diff(a, b, n));
    free(a), free(b);
    vil_model_free(&mc);
    free(p), free(s.img), free(s.targets);
    vil_model_free(&mw);
}

/* ---------------- state passing ---------------- */

/* init_state = passing with drop 0 and no conv context (d_conv 1, so nothing else is carried):
 * a training stream starts from the final state of the stream before it in its row, so its
 * readouts are those of the two streams read as one, by inference chunk by chunk */
static void test_passing(const char *arch) {
    VilConfig c, c2;
    stream_config(&c, arch, 4, 2);
    c.d_conv = 1;
    VilModel m;
    stream_model(&m, &c, 11);
    stream_config(&c2, arch, 8, 2);
    c2.d_conv = 1;
    VilModel whole;
    vil_config_finalize(&c2);
    vil_model_init(&whole, &c2, &vil_backend_cpu);
    float *p = vil_malloc(m.buf_len * sizeof(float));
    vil_model_get_params(&m, p);
    vil_model_set_params(&whole, p);
    Streams s = make_streams(&m.cfg, 2, 8);
    float *a = stream_logits(&whole, &s, 0);
    T_CHECK(vil_model_set_init_state(&m, &(VilInitSpec){.mode = VIL_INIT_PASSING, .fit_momentum = 0.99f}, 2) == 0, "passing");
    vil_model_alloc_acts(&m, 2, 1);
    size_t NC = c.num_classes;
    float *b = vil_malloc((size_t)2 * 8 * NC * sizeof(float));
    for (int j = 0; j < 4; j++) { /* chunks 0, 1 of the first stream, then of the second */
        upload_chunk(&m, &s, j);
        vil_model_stream_chunk(&m, j % 2);
        T_CHECK(vil_model_sample_init_state(&m, 5, 0) == 0, "sample");
        vil_model_forward(&m, 1);
        vil_model_fit_init_state(&m, NULL);
        for (int r = 0; r < 2; r++)
            memcpy(b + ((size_t)r * 8 + 2 * j) * NC, m.acts.logits + (size_t)r * 2 * NC, 2 * NC * sizeof(float));
    }
    char name[96];
    snprintf(name, sizeof name, "%s: passing drop 0 = one stream of 8", arch);
    T_CLOSE(name, rel_diff(a, b, (size_t)2 * 8 * NC), 1e-5);
    free(a), free(b), free(p), free(s.img), free(s.targets);
    vil_model_free(&m);
    vil_model_free(&whole);
}

/* ---------------- the fit's ablations at a stream's start ---------------- */

/* one training stream per row, stream `which` of each row of s (its chunks 2 which and 2 which + 1
 * as chunks 0 and 1), each forward's intervention sampled before it and fitted after it, as vil
 * train does; its logits (B, 2 R, classes) */
static void train_stream(VilModel *m, const Streams *s, int which, float *logits) {
    size_t RC = (size_t)m->cfg.readouts * m->cfg.num_classes;
    for (int k = 0; k < 2; k++) {
        upload_chunk(m, s, 2 * which + k);
        vil_model_stream_chunk(m, k);
        vil_model_sample_init_state(m, 5, 0);
        vil_model_forward(m, 1);
        vil_model_fit_init_state(m, NULL);
        for (int b = 0; b < s->B; b++)
            memcpy(logits + ((size_t)b * 2 + k) * RC, m->acts.logits + b * RC, RC * sizeof(float));
    }
}

/* the model's training-state tensor `name` (host floats), its info in *t and its index in *at;
 * NULL when it has none */
static float *state_of(const VilModel *m, const char *name, VilTrainStateInfo *t, int *at) {
    for (int i = 0; i < vil_model_train_state_count(m); i++) {
        *t = vil_model_train_state_info(m, i);
        if (strcmp(t->name, name)) continue;
        float *h = vil_malloc(t->room * sizeof(float));
        vil_model_train_state_get(m, i, h);
        *at = i;
        return h;
    }
    return NULL;
}

/* The fit's ablations of the image models (doc/recipe.md "Initial states") at a stream's start,
 * each model on the same weights and streams (two streams of 4 images a row, chunks of 2): the
 * fit happens after a stream's last chunk alone; the scalar fit (depth, 1) is the element fit's
 * pooled statistics; the momentum weighs the two streams' fits; the mean alone starts where
 * passing does from that mean; the fit's zero starts with probability 1 train as the zero start. */
static void test_fit_ablations(const char *arch) {
    enum { B = 4 };
    enum { E0, EK, S0, SK, MEAN, PASS, DROP, ZERO, NM }; /* the models; K: momentum 0.75 */
    const VilInitSpec specs[NM] = {
        [E0] = {.mode = VIL_INIT_FITTED, .fit_momentum = 0.0f},
        [EK] = {.mode = VIL_INIT_FITTED, .fit_momentum = 0.75f},
        [S0] = {.mode = VIL_INIT_FITTED, .fit = VIL_INIT_FIT_SCALAR, .fit_momentum = 0.0f},
        [SK] = {.mode = VIL_INIT_FITTED, .fit = VIL_INIT_FIT_SCALAR, .fit_momentum = 0.75f},
        [MEAN] = {.mode = VIL_INIT_FITTED, .fit_mean_only = 1, .fit_momentum = 0.99f},
        [PASS] = {.mode = VIL_INIT_PASSING},
        [DROP] = {.mode = VIL_INIT_FITTED, .fit_drop = 1.0f, .fit_momentum = 0.99f},
        [ZERO] = {.mode = VIL_INIT_ZERO},
    };
    VilModel m[NM];
    for (int i = 0; i < NM; i++) {
        VilConfig c;
        stream_config(&c, arch, 4, 2);
        stream_model(&m[i], &c, 13);
        T_CHECK(vil_model_set_init_state(&m[i], &specs[i], B) == 0 && vil_model_alloc_acts(&m[i], B, 1) == 0,
                "%s: model %d's intervention", arch, i);
    }
    const VilConfig *c = &m[E0].cfg;
    int depth = c->depth;
    size_t NE = (size_t)c->d_state * c->d_inner, nl = (size_t)B * 2 * c->readouts * c->num_classes;
    Streams s = make_streams(c, B, 8);
    float *lg[NM][2];
    for (int i = 0; i < NM; i++) {
        lg[i][0] = vil_malloc(nl * sizeof(float)), lg[i][1] = vil_malloc(nl * sizeof(float));
        train_stream(&m[i], &s, 0, lg[i][0]);
    }
    /* after the first stream: one fit (its first chunk fitted nothing), from zero starts */
    VilTrainStateInfo te, ts, t;
    int at, mean_at;
    float *m1 = state_of(&m[E0], "init_state_mean", &te, &mean_at), *v1 = state_of(&m[E0], "init_state_var", &t, &at);
    float *sm1 = state_of(&m[S0], "init_state_mean", &ts, &at), *sv1 = state_of(&m[S0], "init_state_var", &t, &at);
    float *mean = state_of(&m[MEAN], "init_state_mean", &t, &at);
    T_CHECK(m1 && v1 && sm1 && sv1 && mean && te.ndim == 3 && te.shape[0] == depth && te.shape[1] == c->d_state &&
                te.shape[2] == c->d_inner && ts.ndim == 2 && ts.shape[0] == depth && ts.shape[1] == 1 &&
                !strcmp(ts.dims, "layers, directions") && vil_model_train_state_counter(&m[E0], mean_at) == 1,
            "%s: the fit after a stream's last chunk only (%ld fits after its 2 chunks); element (depth, N, E), "
            "scalar (depth, 1)", arch, vil_model_train_state_counter(&m[E0], mean_at));
    if (!m1 || !v1 || !sm1 || !sv1 || !mean) return;
    double err = 0;
    for (int l = 0; l < depth; l++) {
        double a = 0, q = 0;
        for (size_t x = l * NE; x < (l + 1) * NE; x++) a += m1[x], q += (double)v1[x] + (double)m1[x] * m1[x];
        a /= NE, q /= NE;
        double pv = q - a * a;
        err = fmax(err, fmax(fabs(sm1[l] - a) / (fabs(a) + sqrt(pv)), fabs(sv1[l] - pv) / pv));
    }
    char name[128];
    snprintf(name, sizeof name, "%s: the scalar fit = the element fit's statistics pooled over a layer's N E", arch);
    T_CLOSE(name, err, 1e-4);
    /* passing from the fitted mean, in every row */
    float *prev = state_of(&m[PASS], "init_state_prev", &t, &at);
    for (int l = 0; prev && l < depth; l++)
        for (int b = 0; b < B; b++) memcpy(prev + ((size_t)l * B + b) * NE, mean + l * NE, NE * sizeof(float));
    T_CHECK(prev && vil_model_train_state_set(&m[PASS], at, prev) == 0, "%s: passing's states set", arch);
    for (int i = 0; i < NM; i++) train_stream(&m[i], &s, 1, lg[i][1]);
    /* the second stream's fit: the momentum's k m1 + (1 - k) b2, b2 the momentum 0's fit (the
     * first fit is the batch's alone whatever k, so their second streams start alike) */
    float *f[4][2] = {{state_of(&m[E0], "init_state_mean", &t, &at), state_of(&m[E0], "init_state_var", &t, &at)},
                      {state_of(&m[EK], "init_state_mean", &t, &at), state_of(&m[EK], "init_state_var", &t, &at)},
                      {state_of(&m[S0], "init_state_mean", &t, &at), state_of(&m[S0], "init_state_var", &t, &at)},
                      {state_of(&m[SK], "init_state_mean", &t, &at), state_of(&m[SK], "init_state_var", &t, &at)}};
    const float *first[2][2] = {{m1, v1}, {sm1, sv1}};
    for (int g = 0; g < 2; g++) { /* element, scalar */
        size_t n = g ? (size_t)depth : depth * NE;
        for (int w = 0; w < 2; w++) { /* mean, var */
            float *want = vil_malloc(n * sizeof(float));
            for (size_t x = 0; x < n; x++) want[x] = (float)(0.75 * first[g][w][x] + 0.25 * f[2 * g][w][x]);
            snprintf(name, sizeof name, "%s: momentum 0.75, %s fit's %s = 0.75 m1 + 0.25 b2 after two streams", arch,
                     g ? "scalar" : "element", w ? "var" : "mean");
            T_CLOSE(name, rel_diff(want, f[2 * g + 1][w], n), 1e-6);
            free(want);
        }
    }
    T_CHECK(rel_diff(f[0][0], m1, depth * NE) > 1e-3, "%s: the second stream's fit moved (the test can fail)", arch);
    T_CHECK(!memcmp(lg[MEAN][1], lg[PASS][1], nl * sizeof(float)),
            "%s: init_state_fit_noise 0: a stream starts at the fitted mean, as passing from it does (bitwise)", arch);
    T_CHECK(memcmp(lg[MEAN][1], lg[E0][1], nl * sizeof(float)) && memcmp(lg[S0][1], lg[E0][1], nl * sizeof(float)),
            "%s: the noise around the mean, and the scalar fit's, change the second stream", arch);
    T_CHECK(!memcmp(lg[DROP][0], lg[ZERO][0], nl * sizeof(float)) && !memcmp(lg[DROP][1], lg[ZERO][1], nl * sizeof(float)),
            "%s: init_state_fit_drop 1 trains as the zero start (bitwise)", arch);
    for (int g = 0; g < 4; g++) free(f[g][0]), free(f[g][1]);
    free(m1), free(v1), free(sm1), free(sv1), free(mean), free(prev), free(s.img), free(s.targets);
    for (int i = 0; i < NM; i++) free(lg[i][0]), free(lg[i][1]), vil_model_free(&m[i]);
}

/* ---------------- the stream batches ---------------- */

static char *dir;

/* a training loader of streams of 4 images in chunks of 2 over 40 6 x 6 images of 5 classes */
static VilLoader *stream_loader(const VilDataset *ds, VilLoaderMode mode, int batch, int world, int rank,
                                uint64_t seed, int streams) {
    VilLoaderConfig lc;
    vil_loader_config_default(&lc, mode, 6, 1, batch, 5);
    lc.train.hflip = 0, lc.train.reprob = 0, lc.train.randaug_n = 0, lc.train.scale_min = 1;
    lc.repeats = 1, lc.mixup.prob = 0, lc.mixup.smoothing = 0.1f;
    lc.world = world, lc.rank = rank, lc.seed = seed, lc.quiet = 1;
    lc.stream = (VilStreamSpec){.len = 4, .chunk = 2, .streams = streams};
    return vil_loader_create(ds, &lc);
}

/* an epoch's image indices, (batches, batch, 2) in order, and each batch's chunk; -1 on failure */
static int read_epoch(VilLoader *l, int epoch, int *idx, int *chunks, const VilDataset *ds, int *pix_ok) {
    int nb = vil_loader_start_epoch(l, epoch), n = 0;
    for (int k = 0; k < nb; k++) {
        const VilBatch *b = vil_loader_next_batch(l);
        if (!b) return -1;
        chunks[k] = b->chunk;
        for (int i = 0; i < b->batch * 2; i++) {
            idx[n++] = b->indices[i];
            if (b->indices[i] < 0) continue;
            /* its pixels and label: corpus_write_idx_set's (i * 7 + k * 3) % 256, normalized */
            int id = b->indices[i];
            *pix_ok &= b->labels[i] == id % 5 && b->targets[(size_t)i * 5 + id % 5] > 0.9f;
            for (int q = 0; q < 36; q++)
                *pix_ok &= fabsf(b->images[(size_t)i * 36 + q] * 0.226f + 0.449f - ((id * 7 + q * 3) % 256) / 255.0f) < 1e-4f;
        }
        vil_loader_release_batch(l, b);
    }
    return nb;
}

static void test_stream_batches(void) {
    dir = corpus_mkdtemp("stream");
    corpus_write_idx_set(dir, "train", 40, 6, 6, 5, 0);
    VilDataset *ds = vil_dataset_open(dir, "train", NULL);
    T_CHECK(ds != NULL, "the IDX set opens");
    int idx[4][80], ch[4][16], ok = 1;
    VilLoader *l = stream_loader(ds, VIL_LOADER_TRAIN, 2, 1, 0, 3, 0);
    /* 10 streams of 4: 5 groups of 2 streams, 2 chunks each */
    int nb = read_epoch(l, 0, idx[0], ch[0], ds, &ok);
    T_CHECK(nb == 10 && ok, "an epoch of 10 batches (%d), the images' pixels, labels and targets", nb);
    int order = 1, seen[40] = {0}, once = 1;
    for (int k = 0; k < 10; k++) order &= ch[0][k] == k % 2;
    for (int i = 0; i < 40; i++) seen[idx[0][i]]++;
    for (int i = 0; i < 40; i++) once &= seen[i] == 1;
    T_CHECK(order, "chunk 0 then chunk 1 of each group of streams");
    T_CHECK(once, "every image once an epoch");
    read_epoch(l, 1, idx[1], ch[1], ds, &ok);
    vil_loader_free(l);
    l = stream_loader(ds, VIL_LOADER_TRAIN, 2, 1, 0, 3, 0);
    read_epoch(l, 0, idx[2], ch[2], ds, &ok);
    vil_loader_free(l);
    T_CHECK(memcmp(idx[0], idx[2], sizeof idx[0]) == 0, "the same seed, the same streams");
    T_CHECK(memcmp(idx[0], idx[1], sizeof idx[0]) != 0, "another epoch, other streams");
    l = stream_loader(ds, VIL_LOADER_TRAIN, 2, 1, 0, 4, 0);
    read_epoch(l, 0, idx[3], ch[3], ds, &ok);
    vil_loader_free(l);
    T_CHECK(memcmp(idx[0], idx[3], sizeof idx[0]) != 0, "another seed, other streams");
    /* two ranks of batch 1 read the rows of one rank's batch of 2, each its own */
    int r0[40], r1[40], c0[16], c1[16];
    VilLoader *l0 = stream_loader(ds, VIL_LOADER_TRAIN, 1, 2, 0, 3, 0), *l1 = stream_loader(ds, VIL_LOADER_TRAIN, 1, 2, 1, 3, 0);
    read_epoch(l0, 0, r0, c0, ds, &ok);
    read_epoch(l1, 0, r1, c1, ds, &ok);
    int split = 1;
    for (int k = 0; k < 10; k++)
        split &= memcmp(r0 + 2 * k, idx[0] + 4 * k, 2 * sizeof(int)) == 0 && memcmp(r1 + 2 * k, idx[0] + 4 * k + 2, 2 * sizeof(int)) == 0;
    T_CHECK(split, "ranks: rank r reads row r of the global batch, in the same order");
    vil_loader_free(l0), vil_loader_free(l1);
    /* evaluation: as many streams as images, every position shows every image once */
    l = stream_loader(ds, VIL_LOADER_EVAL, 16, 1, 0, 0, 0);
    nb = vil_loader_start_epoch(l, 0);
    int count[4][40] = {{0}}, rows = 0, positions = 1;
    for (int k = 0; k < nb; k++) {
        const VilBatch *b = vil_loader_next_batch(l);
        if (!b) break;
        positions &= b->chunk == k % 2;
        for (int i = 0; i < b->batch * 2; i++)
            if (b->labels[i] >= 0) count[b->chunk * 2 + i % 2][b->indices[i]]++, rows++;
            else positions &= i / 2 >= b->n;
        vil_loader_release_batch(l, b);
    }
    int each = 1;
    for (int p = 0; p < 4; p++)
        for (int i = 0; i < 40; i++) each &= count[p][i] == 1;
    T_CHECK(nb == 6 && rows == 160 && positions, "eval: 40 streams of 4 in 3 groups of 16 (%d batches, %d images)", nb, rows);
    T_CHECK(each, "eval: every position shows every image once");
    vil_loader_free(l);
    /* what streams refuse: mixing, accum with truncated BPTT */
    VilLoaderConfig lc;
    vil_loader_config_default(&lc, VIL_LOADER_TRAIN, 6, 1, 2, 5);
    lc.stream = (VilStreamSpec){.len = 4, .chunk = 2};
    VilErrCapture cap;
    vil_error_capture(&cap);
    VilLoader *bad = vil_loader_create(ds, &lc);
    vil_error_release(&cap);
    T_CHECK(!bad && strstr(cap.msg, "without"), "the recipe's augmentation refused for streams: %s", cap.msg);
    lc.train.hflip = 0, lc.train.reprob = 0, lc.train.randaug_n = 0, lc.train.scale_min = 1;
    lc.repeats = 1, lc.mixup.prob = 0, lc.accum = 2;
    vil_error_capture(&cap);
    bad = vil_loader_create(ds, &lc);
    vil_error_release(&cap);
    T_CHECK(!bad && strstr(cap.msg, "accum_steps must be 1"), "accum with truncated BPTT refused: %s", cap.msg);
    vil_dataset_free(ds);
    corpus_rmtree(dir);
}

/* the stream family's config checks */
static void test_config(void) {
    VilConfig c;
    VilErrCapture cap;
    const char *what[3] = {"in_chans 3", "stream_chunk 3 of 4", "drop_path"};
    for (int i = 0; i < 3; i++) {
        stream_config(&c, "vil", 4, 2);
        if (i == 0) c.in_chans = 3;
        if (i == 1) c.stream_chunk = 3;
        if (i == 2) c.drop_path = 0.1f;
        vil_error_capture(&cap);
        int rc = vil_config_finalize(&c);
        vil_error_release(&cap);
        T_CHECK(rc == VIL_EUSAGE, "family = stream refuses %s: %s", what[i], cap.msg);
    }
    stream_config(&c, "vil", 8, 0);
    T_CHECK(vil_config_finalize(&c) == 0 && c.stream_chunk == 8 && c.seq_len == 48 && c.readouts == 8 &&
                c.in_floats == 8 * 36 && c.cls_pos == -1,
            "stream_chunk 0 is the whole stream: 48 tokens, 8 readouts");
    /* the shipped config: its parameter count as its comment says */
    VilConfig f;
    VilTrainConfig t;
    vil_config_default(&f);
    vil_train_config_default(&t);
    T_CHECK(vil_train_config_load(&f, &t, "configs/stream_fashion.cfg") == 0 && vil_config_finalize(&f) == 0 &&
                vil_train_config_finalize(&t) == 0 &&
                vil_model_count_params(&f) == 455178,
            "configs/stream_fashion.cfg: %zu parameters", vil_model_count_params(&f));
    strcpy(f.arch, "vim");
    T_CHECK(vil_config_finalize(&f) == 0 && vil_model_count_params(&f) == 471562, "as ViM: %zu parameters",
            vil_model_count_params(&f));
}

int main(void) {
    vil_rng_seed(&rng, 2468);
    test_config();
    test_stream_batches();
    test_passing("vil");
    test_passing("vim");
    test_fit_ablations("vil");
    test_fit_ablations("vim");
    test_causality("vil");
    test_causality("vim");
    test_chunking("vil");
    test_chunking("vim");
    test_gradients("vil", 0, VIL_INIT_ZERO);
    test_gradients("vim", 0, VIL_INIT_ZERO);
    test_gradients("vil", 0, VIL_INIT_NOISE);
    test_gradients("vil", 1, VIL_INIT_ZERO);
    test_gradients("vim", 1, VIL_INIT_ZERO);
    return t_finish();
}
