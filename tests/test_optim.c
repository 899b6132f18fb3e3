/* test_optim.c: the model's optimizer and training-state API on the CPU: the optimizer table,
 * one AdamW step through vil_model_optim_step against torch.optim.AdamW's formula in double on
 * elements with and without weight decay, the training state saved through the API and loaded
 * into a fresh model (the next step then the same bits), the state's defaults, the gradient norm
 * and the input and loss functions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model_testing.h"
#include "testing.h"
#include "vil/common.h"
#include "vil/model.h"
#include "vil/optim.h"

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
    T_CHECK(vil_optim_find("lion") == NULL && vil_optim_find("") == NULL, "unknown names: NULL");
    T_CHECK(a->n_state == 2 && strcmp(a->state[0].name, "adam_m") == 0 &&
                strcmp(a->state[1].name, "adam_v") == 0 && !a->state[0].nonneg && a->state[1].nonneg,
            "AdamW's state: adam_m, adam_v (>= 0), the names of the state file");
}

/* two steps (the second has bias corrections below 1 and moments that are not zero) */
static void test_adamw_step(void) {
    VilModel m;
    t_tiny_model(&m);
    vil_model_init_training(&m, &vil_optim_adamw, 0);
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
    vil_model_init_training(&a, &vil_optim_adamw, 1);
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
    vil_model_init_training(&b, &vil_optim_adamw, 1);
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
    vil_model_init_training(&a, &vil_optim_adamw, 0);
    T_CHECK(vil_model_train_state_count(&a) == 2, "AdamW without an EMA: 2 state tensors");
    vil_model_free(&a);
}

static void test_grad_norm(void) {
    VilModel m;
    t_tiny_model(&m);
    vil_model_init_training(&m, &vil_optim_adamw, 0);
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
    vil_model_alloc_acts(&m, B, 1);
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

int main(void) {
    vil_rng_seed(&rng, 31);
    test_table();
    test_adamw_step();
    test_state_roundtrip();
    test_grad_norm();
    test_inputs();
    return t_finish();
}
