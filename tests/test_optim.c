/* test_optim.c: the model's optimizers and training-state API on the CPU: the optimizer table,
 * AdamW, Adam (L2 decay), SGD (momentum, Nesterov) and Lamb / LambC steps through
 * vil_model_optim_step against their formulas in double (torch.optim.AdamW, torch.optim.Adam,
 * torch.optim.SGD, timm's Lamb) on tensors with and
 * without weight decay, the training state saved through the API and loaded into a fresh model
 * (the next step then the same bits) for each optimizer, the state's defaults, the gradient norm
 * and the input and loss functions. `test_optim --dump DIR` also writes each optimizer case to
 * DIR/CASE.safetensors for tools/optim_reference.py (PyTorch; tests/test_torch_reference.sh). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model_testing.h"
#include "testing.h"
#include "vil/common.h"
#include "vil/model.h"
#include "vil/optim.h"
#include "formats/safetensors.h"

static const VilOptimHyper H = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .wd = 0.05f};

static VilRng rng;

/* gradients as a backward leaves them: zero on the buffer's padding */
static void random_grads(VilModel *m) {
    for (size_t i = 0; i < m->buf_len; i++) m->grads[i] = vil_rng_normal(&rng);
    vil_model_pack(m, m->grads, m->grads);
    vil_model_unpack(m, m->grads, m->grads);
}

static void test_table(void) {
    const VilOptim *a = vil_optim_find("adamw");
    T_CHECK(a == &vil_optim_adamw, "vil_optim_find(\"adamw\")");
    const VilOptim *s = vil_optim_find("sgd"), *l = vil_optim_find("lamb"), *lc = vil_optim_find("lambc");
    T_CHECK(s == &vil_optim_sgd && s->n_state == 1 && strcmp(s->state[0].name, "momentum_buffer") == 0 &&
                !s->state[0].nonneg,
            "sgd: one state tensor, momentum_buffer");
    T_CHECK(l == &vil_optim_lamb && lc == &vil_optim_lambc && l->n_state == 2 && lc->n_state == 2 &&
                strcmp(l->state[0].name, "lamb_exp_avg") == 0 && strcmp(l->state[1].name, "lamb_exp_avg_sq") == 0 &&
                strcmp(lc->state[1].name, "lamb_exp_avg_sq") == 0 && !l->state[0].nonneg && l->state[1].nonneg,
            "lamb, lambc: lamb_exp_avg, lamb_exp_avg_sq (>= 0)");
    const VilOptim *ad = vil_optim_find("adam");
    T_CHECK(ad == &vil_optim_adam && ad->n_state == 2 && strcmp(ad->state[0].name, "adam_m") == 0 &&
                strcmp(ad->state[1].name, "adam_v") == 0 && ad->state[1].nonneg && ad->update != a->update,
            "adam: its own update, AdamW's moments adam_m, adam_v (>= 0)");
    char names[128];
    T_CHECK(strcmp(vil_optim_names(names, sizeof names), "adamw, adam, sgd, lamb, lambc") == 0, "the names: %s", names);
    T_CHECK(vil_optim_find("lion") == NULL && vil_optim_find("") == NULL, "unknown names: NULL");
    T_CHECK(a->n_state == 2 && strcmp(a->state[0].name, "adam_m") == 0 &&
                strcmp(a->state[1].name, "adam_v") == 0 && !a->state[0].nonneg && a->state[1].nonneg,
            "AdamW's state: adam_m, adam_v (>= 0), the names of the state file");
}

/* two steps (the second has bias corrections below 1 and moments that are not zero) */
static void test_adamw_step(void) {
    VilModel m;
    t_tiny_model(&m);
    T_CHECK(vil_model_init_training(&m, &vil_optim_adamw, 0) == 0, "vil_model_init_training(&m, &vil_optim_adamw, 0)");
    size_t n = m.buf_len;
    float *p0 = vil_malloc(n * sizeof(float)), *g[2], *p = vil_malloc(n * sizeof(float));
    vil_model_get_params(&m, p0);
    /* elements of a decayed tensor (the head's weight) and of an exempt one (its bias) */
    const VilParamInfo *w = vil_model_find_param(&m, "head.weight"),
                       *b = vil_model_find_param(&m, "head.bias");
    T_CHECK(w && b && w->decay && !b->decay, "head.weight decays, head.bias does not");
    size_t idx[4] = {w->offset, w->offset + 5, b->offset, b->offset + 1};
    for (int s = 0; s < 2; s++) {
        random_grads(&m);
        g[s] = vil_malloc(n * sizeof(float));
        memcpy(g[s], m.grads, n * sizeof(float));
        vil_model_optim_step(&m, &H);
    }
    T_CHECK(vil_model_optim_steps(&m) == 2, "2 steps counted, got %d", vil_model_optim_steps(&m));
    vil_model_get_params(&m, p);
    float *mm = vil_malloc(n * sizeof(float)), *vv = vil_malloc(n * sizeof(float));
    vil_model_train_state_get(&m, 0, mm);
    vil_model_train_state_get(&m, 1, vv);
    /* the packed state holds the tensors in table order: the element's place there */
    float *pk = vil_malloc(n * sizeof(float));
    double err = 0, merr = 0, verr = 0;
    for (int k = 0; k < 4; k++) {
        size_t i = idx[k];
        double pi = p0[i], mi = 0, vi = 0, wd = k < 2 ? H.wd : 0.0;
        for (int s = 0; s < 2; s++) {
            double gi = g[s][i];
            mi = H.beta1 * mi + (1.0 - H.beta1) * gi;
            vi = H.beta2 * vi + (1.0 - H.beta2) * gi * gi;
            double bc1 = 1.0 - pow(H.beta1, s + 1), bc2 = 1.0 - pow(H.beta2, s + 1);
            pi -= H.lr * (wd * pi + (mi / bc1) / (sqrt(vi / bc2) + H.eps));
        }
        err = fmax(err, fabs(p[i] - pi) / fmax(1.0, fabs(pi)));
        /* the moments at i: unpacked back to the buffer layout */
        memcpy(pk, mm, m.param_count * sizeof(float));
        vil_model_unpack(&m, pk, pk);
        merr = fmax(merr, fabs(pk[i] - mi) / fmax(1e-3, fabs(mi)));
        memcpy(pk, vv, m.param_count * sizeof(float));
        vil_model_unpack(&m, pk, pk);
        verr = fmax(verr, fabs(pk[i] - vi) / fmax(1e-6, fabs(vi)));
    }
    T_CLOSE("adamw 2 steps p vs formula (decay and not)", err, 1e-6);
    T_CLOSE("adamw 2 steps adam_m vs formula", merr, 1e-5);
    T_CLOSE("adamw 2 steps adam_v vs formula", verr, 1e-5);
    free(p0), free(p), free(g[0]), free(g[1]), free(mm), free(vv), free(pk);
    vil_model_free(&m);
}

/* a model with moments, EMA and a step count of its own, saved through the API and loaded into
 * a fresh model: the next step and EMA update give both the same bits */
static void test_state_roundtrip(void) {
    VilModel a, b;
    t_tiny_model(&a);
    T_CHECK(vil_model_init_training(&a, &vil_optim_adamw, 1) == 0, "vil_model_init_training(&a, &vil_optim_adamw, 1)");
    for (int s = 0; s < 3; s++) {
        random_grads(&a);
        vil_model_optim_step(&a, &H);
        vil_model_ema_update(&a, 0.9f);
    }
    int ns = vil_model_train_state_count(&a);
    T_CHECK(ns == 3, "AdamW with an EMA: 3 state tensors, got %d", ns);
    const char *want[3] = {"adam_m", "adam_v", "ema"};
    for (int i = 0; i < 3 && i < ns; i++) {
        VilTrainStateInfo si = vil_model_train_state_info(&a, i);
        T_CHECK(strcmp(si.name, want[i]) == 0 && si.optional == (i == 2) && si.nonneg == (i == 1),
                "state tensor %d: %s (optional %d, nonneg %d)", i, si.name, si.optional, si.nonneg);
    }
    size_t n = a.buf_len;
    float *p = vil_malloc(n * sizeof(float)), *st[3];
    vil_model_get_params(&a, p);
    for (int i = 0; i < 3; i++) {
        st[i] = vil_malloc(n * sizeof(float));
        vil_model_train_state_get(&a, i, st[i]);
    }
    t_tiny_model(&b);
    vil_model_set_params(&b, p);
    T_CHECK(vil_model_init_training(&b, &vil_optim_adamw, 1) == 0, "vil_model_init_training(&b, &vil_optim_adamw, 1)");
    for (int i = 0; i < 3; i++) vil_model_train_state_set(&b, i, st[i]);
    vil_model_optim_set_steps(&b, vil_model_optim_steps(&a));
    /* the EMA read while it is in use is the same tensor */
    float *e = vil_malloc(n * sizeof(float));
    vil_model_use_ema(&b, 1);
    vil_model_train_state_get(&b, 2, e);
    vil_model_use_ema(&b, 0);
    T_CHECK(memcmp(e, st[2], b.param_count * sizeof(float)) == 0, "the EMA read with it in use");
    random_grads(&a);
    memcpy(b.grads, a.grads, n * sizeof(float));
    vil_model_optim_step(&a, &H);
    vil_model_optim_step(&b, &H);
    vil_model_ema_update(&a, 0.9f);
    vil_model_ema_update(&b, 0.9f);
    float *q = vil_malloc(n * sizeof(float));
    vil_model_get_params(&a, p);
    vil_model_get_params(&b, q);
    T_CHECK(memcmp(p, q, n * sizeof(float)) == 0, "the step after a reload: the same weights, bit for bit");
    for (int i = 0; i < 3; i++) {
        vil_model_train_state_get(&a, i, p);
        vil_model_train_state_get(&b, i, q);
        T_CHECK(memcmp(p, q, a.param_count * sizeof(float)) == 0, "the step after a reload: the same %s",
                want[i]);
    }
    /* the starts: zero moments, the EMA a copy of the weights */
    vil_model_train_state_set(&b, 0, NULL);
    vil_model_train_state_set(&b, 2, NULL);
    vil_model_train_state_get(&b, 0, p);
    int zero = 1;
    for (size_t i = 0; i < b.param_count; i++) zero &= p[i] == 0.0f;
    T_CHECK(zero, "adam_m set from NULL: zero");
    vil_model_get_params(&b, q);
    vil_model_pack(&b, q, q);
    vil_model_train_state_get(&b, 2, p);
    T_CHECK(memcmp(p, q, b.param_count * sizeof(float)) == 0, "ema set from NULL: the weights");
    for (int i = 0; i < 3; i++) free(st[i]);
    free(p), free(q), free(e);
    vil_model_free(&a);
    vil_model_free(&b);
    /* without an EMA: the optimizer's tensors only */
    t_tiny_model(&a);
    T_CHECK(vil_model_init_training(&a, &vil_optim_adamw, 0) == 0, "vil_model_init_training(&a, &vil_optim_adamw, 0)");
    T_CHECK(vil_model_train_state_count(&a) == 2, "AdamW without an EMA: 2 state tensors");
    vil_model_free(&a);
}

/* The new optimizers' cases: each runs NSTEPS steps on a tiny model from the same weights and
 * gradients, checked here against the formula in double and dumped for the PyTorch reference. */
#define NSTEPS 3
typedef struct {
    const char *name;
    const VilOptim *opt;
    VilOptimHyper h;
    float scale; /* the weights multiplied by this first (lambc: trust ratios above 1 to clip) */
} OptCase;

static const OptCase CASES[] = {
    {"adamw", &vil_optim_adamw, {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .wd = 0.05f}, 1},
    /* a large decay: its L2 form (in the moments) and the decoupled one (AdamW's) differ clearly */
    {"adam", &vil_optim_adam, {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .wd = 0.5f}, 1},
    {"sgd", &vil_optim_sgd, {.lr = 0.1f, .wd = 1e-2f, .momentum = 0.9f}, 1},
    {"sgd_nesterov", &vil_optim_sgd, {.lr = 0.1f, .wd = 1e-2f, .momentum = 0.8f, .nesterov = 1}, 1},
    {"sgd_plain", &vil_optim_sgd, {.lr = 0.05f, .wd = 0.0f, .momentum = 0.0f}, 1},
    {"lamb", &vil_optim_lamb, {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f, .wd = 0.05f}, 1},
    {"lambc", &vil_optim_lambc, {.lr = 1e-2f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f, .wd = 0.02f}, 2},
};
#define NCASES (int)(sizeof CASES / sizeof CASES[0])

typedef struct {
    size_t n; /* packed elements */
    float *p0, *g[NSTEPS], *p, *st[VIL_OPTIM_MAX_STATE];
} OptRun;

static float *packed(const VilModel *m, const float *buf) {
    float *out = vil_malloc(m->buf_len * sizeof(float));
    memcpy(out, buf, m->buf_len * sizeof(float));
    vil_model_pack(m, out, out);
    return out;
}

static void run_case(VilModel *m, const OptCase *c, OptRun *r) {
    t_tiny_model(m);
    size_t n = m->buf_len;
    float *host = vil_malloc(n * sizeof(float));
    vil_model_get_params(m, host);
    for (size_t i = 0; i < n; i++) host[i] *= c->scale;
    vil_model_set_params(m, host);
    T_CHECK(vil_model_init_training(m, c->opt, 0) == 0, "vil_model_init_training(m, c->opt, 0)");
    r->n = m->param_count;
    r->p0 = packed(m, host);
    for (int s = 0; s < NSTEPS; s++) {
        random_grads(m);
        r->g[s] = packed(m, m->grads);
        vil_model_optim_step(m, &c->h);
    }
    vil_model_get_params(m, host);
    r->p = packed(m, host);
    for (int k = 0; k < c->opt->n_state; k++) {
        r->st[k] = vil_malloc(n * sizeof(float));
        vil_model_train_state_get(m, k, r->st[k]);
    }
    free(host);
}

static void free_run(OptRun *r) {
    free(r->p0), free(r->p);
    for (int s = 0; s < NSTEPS; s++) free(r->g[s]);
    for (int k = 0; k < VIL_OPTIM_MAX_STATE; k++) free(r->st[k]);
    memset(r, 0, sizeof *r);
}

/* the formulas in double over the packed tensors: p and the state (st[k], packed) at the end;
 * *max_ratio: Lamb's largest trust ratio before clipping */
static void reference(const VilModel *m, const OptCase *c, const OptRun *r, double *p, double *st[2],
                      double *max_ratio) {
    const VilOptimHyper *h = &c->h;
    int lamb = c->opt == &vil_optim_lamb || c->opt == &vil_optim_lambc;
    *max_ratio = 0;
    size_t off = 0;
    for (int t = 0; t < m->n_tensors; off += m->info[t].numel, t++) {
        size_t nt = m->info[t].numel;
        double wd = m->info[t].decay ? h->wd : 0.0;
        double *a = st[0] + off, *b = st[1] + off, *pt = p + off;
        for (size_t i = 0; i < nt; i++) pt[i] = r->p0[off + i], a[i] = 0, b[i] = 0;
        for (int s = 0; s < NSTEPS; s++) {
            const float *g = r->g[s] + off;
            if (c->opt == &vil_optim_sgd) {
                for (size_t i = 0; i < nt; i++) {
                    double d = g[i] + wd * pt[i];
                    a[i] = h->momentum * a[i] + d;
                    pt[i] -= h->lr * (h->nesterov ? d + h->momentum * a[i] : a[i]);
                }
                continue;
            }
            double bc1 = 1.0 - pow(h->beta1, s + 1), bc2 = 1.0 - pow(h->beta2, s + 1), sp = 0, su = 0;
            if (c->opt == &vil_optim_adam) { /* torch.optim.Adam: the decay in the gradient */
                for (size_t i = 0; i < nt; i++) {
                    double gi = g[i] + wd * pt[i];
                    a[i] = h->beta1 * a[i] + (1.0 - h->beta1) * gi;
                    b[i] = h->beta2 * b[i] + (1.0 - h->beta2) * gi * gi;
                    pt[i] -= h->lr * (a[i] / bc1) / (sqrt(b[i] / bc2) + h->eps);
                }
                continue;
            }
            for (size_t i = 0; i < nt; i++) {
                a[i] = h->beta1 * a[i] + (1.0 - h->beta1) * g[i];
                b[i] = h->beta2 * b[i] + (1.0 - h->beta2) * g[i] * g[i];
                if (!lamb) { /* torch.optim.AdamW */
                    pt[i] -= h->lr * (wd * pt[i] + (a[i] / bc1) / (sqrt(b[i] / bc2) + h->eps));
                    continue;
                }
                double u = (a[i] / bc1) / (sqrt(b[i]) / sqrt(bc2) + h->eps) + wd * pt[i];
                sp += pt[i] * pt[i], su += u * u;
            }
            if (!lamb) continue;
            double ratio = wd > 0 && sp > 0 && su > 0 ? sqrt(sp) / sqrt(su) : 1.0;
            if (wd > 0) *max_ratio = fmax(*max_ratio, ratio);
            if (c->opt == &vil_optim_lambc && ratio > 1.0) ratio = 1.0;
            for (size_t i = 0; i < nt; i++)
                pt[i] -= h->lr * ratio * ((a[i] / bc1) / (sqrt(b[i]) / sqrt(bc2) + h->eps) + wd * pt[i]);
        }
    }
}

/* the worst |x - ref| over the largest |ref| */
static double worst(const float *x, const double *ref, size_t n) {
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs(x[i] - ref[i])), s = fmax(s, fabs(ref[i]));
    return e / s;
}

static void test_optim_formulas(void) {
    for (int k = 0; k < NCASES; k++) {
        const OptCase *c = &CASES[k];
        VilModel m;
        OptRun r = {0};
        run_case(&m, c, &r);
        double *p = vil_malloc(r.n * sizeof(double)), *st[2], ratio;
        for (int j = 0; j < 2; j++) st[j] = vil_malloc(r.n * sizeof(double));
        reference(&m, c, &r, p, st, &ratio);
        /* the weights' change against the reference's change */
        double e = 0, scale = 0;
        for (size_t i = 0; i < r.n; i++) {
            e = fmax(e, fabs((double)r.p[i] - p[i]));
            scale = fmax(scale, fabs(p[i] - r.p0[i]));
        }
        char what[96];
        snprintf(what, sizeof what, "%s %d steps: p vs formula (of max change)", c->name, NSTEPS);
        T_CLOSE(what, e / scale, 2e-5);
        for (int j = 0; j < c->opt->n_state; j++) {
            snprintf(what, sizeof what, "%s %d steps: %s vs formula", c->name, NSTEPS, c->opt->state[j].name);
            T_CLOSE(what, worst(r.st[j], st[j], r.n), 1e-5);
        }
        if (c->opt == &vil_optim_lamb) T_CHECK(ratio > 0 && ratio != 1, "lamb: trust ratios not 1 (max %g)", ratio);
        if (c->opt == &vil_optim_lambc) T_CHECK(ratio > 1, "lambc: a trust ratio above 1 to clip (max %g)", ratio);
        free(p), free(st[0]), free(st[1]);
        free_run(&r);
        vil_model_free(&m);
    }
}

/* one optimizer's state saved and loaded into a fresh model: the next step the same bits */
static void test_roundtrip_of(const VilOptim *o, const VilOptimHyper *h) {
    VilModel a, b;
    t_tiny_model(&a);
    T_CHECK(vil_model_init_training(&a, o, 0) == 0, "vil_model_init_training(&a, o, 0)");
    for (int s = 0; s < 3; s++) {
        random_grads(&a);
        vil_model_optim_step(&a, h);
    }
    size_t n = a.buf_len;
    float *p = vil_malloc(n * sizeof(float)), *q = vil_malloc(n * sizeof(float)), *st[VIL_OPTIM_MAX_STATE];
    vil_model_get_params(&a, p);
    t_tiny_model(&b);
    vil_model_set_params(&b, p);
    T_CHECK(vil_model_init_training(&b, o, 0) == 0, "vil_model_init_training(&b, o, 0)");
    T_CHECK(vil_model_train_state_count(&b) == o->n_state, "%s: %d state tensors", o->name, o->n_state);
    for (int i = 0; i < o->n_state; i++) {
        st[i] = vil_malloc(n * sizeof(float));
        vil_model_train_state_get(&a, i, st[i]);
        vil_model_train_state_set(&b, i, st[i]);
    }
    vil_model_optim_set_steps(&b, vil_model_optim_steps(&a));
    random_grads(&a);
    memcpy(b.grads, a.grads, n * sizeof(float));
    vil_model_optim_step(&a, h);
    vil_model_optim_step(&b, h);
    vil_model_get_params(&a, p);
    vil_model_get_params(&b, q);
    T_CHECK(memcmp(p, q, n * sizeof(float)) == 0, "%s: the step after a reload, the same weights", o->name);
    for (int i = 0; i < o->n_state; i++) {
        vil_model_train_state_get(&a, i, p);
        vil_model_train_state_get(&b, i, q);
        T_CHECK(memcmp(p, q, a.param_count * sizeof(float)) == 0, "%s: the step after a reload, the same %s",
                o->name, o->state[i].name);
        free(st[i]);
    }
    free(p), free(q);
    vil_model_free(&a);
    vil_model_free(&b);
}

static void test_roundtrips(void) {
    for (int k = 1; k < NCASES; k++) test_roundtrip_of(CASES[k].opt, &CASES[k].h);
}

/* each case into dir/NAME.safetensors: p0.T, g0.T ... (the steps' gradients), p.T and the state
 * (s0.T, s1.T) per tensor T, with the hyperparameters and the decayed tensors in the metadata */
static int dump_cases(const char *dir) {
    for (int k = 0; k < NCASES; k++) {
        const OptCase *c = &CASES[k];
        VilModel m;
        OptRun r = {0};
        run_case(&m, c, &r);
        VilStWriter *w = vil_st_writer_new();
        char name[160], meta[512], path[1024], *decay = vil_calloc((size_t)m.n_tensors * 66 + 1, 1);
        char **names = vil_calloc((size_t)m.n_tensors * (NSTEPS + 4), sizeof(char *));
        int nn = 0;
        size_t off = 0;
        for (int t = 0; t < m.n_tensors; off += m.info[t].numel, t++) {
            const VilParamInfo *in = &m.info[t];
            const float *src[NSTEPS + 4];
            char tag[NSTEPS + 4][8];
            int ns = 0;
            src[ns] = r.p0 + off, strcpy(tag[ns++], "p0");
            for (int s = 0; s < NSTEPS; s++) src[ns] = r.g[s] + off, snprintf(tag[ns++], 8, "g%d", s);
            src[ns] = r.p + off, strcpy(tag[ns++], "p");
            for (int j = 0; j < c->opt->n_state; j++) src[ns] = r.st[j] + off, snprintf(tag[ns++], 8, "s%d", j);
            for (int j = 0; j < ns; j++) {
                snprintf(name, sizeof name, "%s.%s", tag[j], in->name);
                names[nn] = strdup(name);
                vil_st_writer_add(w, names[nn++], VIL_ST_F32, in->ndim, in->shape, src[j]);
            }
            if (in->decay) strcat(strcat(decay, *decay ? "," : ""), in->name);
        }
        const VilOptimHyper *h = &c->h;
        snprintf(meta, sizeof meta,
                 "{\"optimizer\": \"%s\", \"steps\": %d, \"lr\": %.9g, \"beta1\": %.9g, \"beta2\": %.9g, "
                 "\"eps\": %.9g, \"wd\": %.9g, \"momentum\": %.9g, \"nesterov\": %d}",
                 c->opt->name, NSTEPS, h->lr, h->beta1, h->beta2, h->eps, h->wd, h->momentum, h->nesterov);
        vil_st_writer_meta(w, "hyper", meta);
        vil_st_writer_meta(w, "decay", decay);
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, c->name);
        int rc = vil_st_writer_save(w, path);
        vil_st_writer_free(w);
        for (int j = 0; j < nn; j++) free(names[j]);
        free(names), free(decay);
        free_run(&r);
        vil_model_free(&m);
        if (rc) return -1;
    }
    return 0;
}

/* An optimizer's variant (Adam's L2 decay, Lamb's clipped trust ratio) is its table entry's, not
 * the caller's: a hyperparameter struct saying otherwise changes no bit; and each entry describes
 * itself with a line of its own (the run's header) */
static void test_variants(void) {
    const VilOptim *o[2] = {&vil_optim_adamw, &vil_optim_lamb};
    for (int k = 0; k < 2; k++) {
        VilModel a, b;
        t_tiny_model(&a);
        t_tiny_model(&b);
        /* weights large enough for trust ratios above 1, which a clip would change */
        float *w = vil_malloc(a.buf_len * sizeof(float));
        vil_model_get_params(&a, w);
        for (size_t i = 0; i < a.buf_len; i++) w[i] *= 50.0f;
        vil_model_set_params(&a, w), vil_model_set_params(&b, w);
        free(w);
        T_CHECK(vil_model_init_training(&a, o[k], 0) == 0, "vil_model_init_training(&a, o[k], 0)");
        T_CHECK(vil_model_init_training(&b, o[k], 0) == 0, "vil_model_init_training(&b, o[k], 0)");
        VilOptimHyper other = H;
        other.l2 = 1, other.trust_clip = 1;
        for (int s = 0; s < 2; s++) {
            random_grads(&a);
            memcpy(b.grads, a.grads, a.buf_len * sizeof(float));
            vil_model_optim_step(&a, &H);
            vil_model_optim_step(&b, &other);
        }
        T_CHECK(memcmp(a.params, b.params, a.buf_len * sizeof(float)) == 0,
                "%s: l2 and trust_clip of the caller's struct change nothing", o[k]->name);
        vil_model_free(&a), vil_model_free(&b);
    }
    char d[8][96];
    int n = 0, distinct = 1;
    for (; vil_optim_at(n) && n < 8; n++) {
        T_CHECK(vil_optim_at(n)->describe != NULL, "%s describes itself", vil_optim_at(n)->name);
        vil_optim_at(n)->describe(&H, d[n], sizeof d[n]);
        for (int j = 0; j < n; j++) distinct &= strcmp(d[j], d[n]) != 0;
    }
    T_CHECK(n == 5 && distinct, "the %d optimizers' descriptions differ", n);
}

static void test_grad_norm(void) {
    VilModel m;
    t_tiny_model(&m);
    T_CHECK(vil_model_init_training(&m, &vil_optim_adamw, 0) == 0, "vil_model_init_training(&m, &vil_optim_adamw, 0)");
    random_grads(&m);
    double s = 0;
    for (size_t i = 0; i < m.buf_len; i++) s += (double)m.grads[i] * m.grads[i];
    vil_model_clip_grad(&m, 1e9f);
    T_CLOSE("vil_model_grad_norm vs sum of squares", fabs(vil_model_grad_norm(&m) - sqrt(s)) / sqrt(s), 1e-6);
    vil_model_free(&m);
}

static void test_inputs(void) {
    VilModel m;
    t_tiny_model(&m);
    const VilConfig *c = &m.cfg;
    int B = 2;
    T_CHECK(vil_model_alloc_acts(&m, B, 1) == 0, "vil_model_alloc_acts(&m, B, 1)");
    T_CHECK(vil_model_batch(&m) == B, "vil_model_batch");
    size_t ni = (size_t)B * c->in_chans * c->img_size * c->img_size, nt = (size_t)B * c->num_classes;
    float *img = vil_malloc(ni * sizeof(float)), *tg = vil_calloc(nt, sizeof(float));
    for (size_t i = 0; i < ni; i++) img[i] = vil_rng_normal(&rng);
    for (int b = 0; b < B; b++) tg[(size_t)b * c->num_classes + b] = 1.0f;
    vil_model_upload_inputs(&m, img, tg);
    void *dev[3];
    vil_model_input_buffers(&m, dev);
    T_CHECK(dev[0] && dev[1] && dev[2] && memcmp(dev[0], img, ni * sizeof(float)) == 0 &&
                memcmp(dev[1], tg, nt * sizeof(float)) == 0,
            "uploaded inputs in the model's own buffers");
    vil_model_forward(&m, 1);
    float l[2] = {-1, -1};
    T_CHECK(vil_model_losses(&m, l) == B && isfinite(l[0]) && l[0] > 0 && isfinite(l[1]) && l[1] > 0,
            "losses of the batch: %g %g", l[0], l[1]);
    free(img), free(tg);
    vil_model_free(&m);
}

int main(int argc, char **argv) {
    vil_rng_seed(&rng, 31);
    if (argc == 3 && strcmp(argv[1], "--dump") == 0) {
        int rc = dump_cases(argv[2]);
        T_CHECK(rc == 0, "the optimizer cases written to %s", argv[2]);
        return t_finish();
    }
    test_table();
    test_adamw_step();
    test_state_roundtrip();
    test_optim_formulas();
    test_roundtrips();
    test_variants();
    test_grad_norm();
    test_inputs();
    return t_finish();
}
