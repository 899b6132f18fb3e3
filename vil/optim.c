/* optim.c: the optimizer table of optim.h. An entry names the optimizer, says what the run's
 * header prints for it, names its state buffers and queues its backend op; the op itself
 * (vil/optimizer.c, cuda/optimizer.cu) holds the arithmetic. */
#include "optim.h"

#include <stdio.h>
#include <string.h>

static void adam_op(const VilBackend *be, const VilOptimBufs *b, const VilOptimHyper *h) {
    be->adamw_update(be, &(VilAdamW){.p = b->p, .work = b->work, .g = b->g, .m = b->state[0], .v = b->state[1],
                                     .decay = b->decay, .n = b->n, .h = h, .step = b->step});
}
static void adamw(const VilBackend *be, const VilOptimBufs *b, const VilOptimHyper *h) {
    VilOptimHyper v = *h;
    v.l2 = 0;
    adam_op(be, b, &v);
}
/* torch.optim.Adam: AdamW's op with the decay in the gradient */
static void adam(const VilBackend *be, const VilOptimBufs *b, const VilOptimHyper *h) {
    VilOptimHyper v = *h;
    v.l2 = 1;
    adam_op(be, b, &v);
}
static void adamw_describe(const VilOptimHyper *h, char *buf, size_t n) { snprintf(buf, n, "AdamW wd %g", h->wd); }
static void adam_describe(const VilOptimHyper *h, char *buf, size_t n) { snprintf(buf, n, "Adam, L2 wd %g", h->wd); }

const VilOptim vil_optim_adamw = {.name = "adamw", .describe = adamw_describe, .n_state = 2,
                                  .state = {{"adam_m", 0}, {"adam_v", 1}}, .update = adamw};
/* the same moments under the same names: a state file's optimizer is checked by name (train/state.c) */
const VilOptim vil_optim_adam = {.name = "adam", .describe = adam_describe, .n_state = 2,
                                 .state = {{"adam_m", 0}, {"adam_v", 1}}, .update = adam};

static void sgd(const VilBackend *be, const VilOptimBufs *b, const VilOptimHyper *h) {
    be->sgd_update(be, &(VilSgd){.p = b->p, .work = b->work, .g = b->g, .buf = b->state[0], .decay = b->decay,
                                 .n = b->n, .h = h});
}
static void sgd_describe(const VilOptimHyper *h, char *buf, size_t n) {
    snprintf(buf, n, "SGD momentum %g%s, L2 wd %g", h->momentum, h->nesterov ? " (Nesterov)" : "", h->wd);
}

const VilOptim vil_optim_sgd = {.name = "sgd", .describe = sgd_describe, .n_state = 1,
                                .state = {{"momentum_buffer", 0}}, .update = sgd};

static void lamb_op(const VilBackend *be, const VilOptimBufs *b, const VilOptimHyper *h) {
    be->lamb_update(be, &(VilLamb){.p = b->p, .work = b->work, .g = b->g, .m = b->state[0], .v = b->state[1],
                                   .decay = b->decay, .spans = b->spans, .n_spans = b->n_spans, .n = b->n,
                                   .h = h, .step = b->step});
}
static void lamb(const VilBackend *be, const VilOptimBufs *b, const VilOptimHyper *h) {
    VilOptimHyper v = *h;
    v.trust_clip = 0;
    lamb_op(be, b, &v);
}
/* timm's lambc: the trust ratio clipped at 1 */
static void lambc(const VilBackend *be, const VilOptimBufs *b, const VilOptimHyper *h) {
    VilOptimHyper v = *h;
    v.trust_clip = 1;
    lamb_op(be, b, &v);
}
static void lamb_describe(const VilOptimHyper *h, char *buf, size_t n) { snprintf(buf, n, "Lamb wd %g", h->wd); }
static void lambc_describe(const VilOptimHyper *h, char *buf, size_t n) {
    snprintf(buf, n, "Lamb (trust ratio clipped at 1) wd %g", h->wd);
}

const VilOptim vil_optim_lamb = {.name = "lamb", .describe = lamb_describe, .n_state = 2,
                                 .state = {{"lamb_exp_avg", 0}, {"lamb_exp_avg_sq", 1}}, .update = lamb};
const VilOptim vil_optim_lambc = {.name = "lambc", .describe = lambc_describe, .n_state = 2,
                                  .state = {{"lamb_exp_avg", 0}, {"lamb_exp_avg_sq", 1}}, .update = lambc};

static const VilOptim *const OPTIMS[] = {&vil_optim_adamw, &vil_optim_adam, &vil_optim_sgd, &vil_optim_lamb,
                                         &vil_optim_lambc};
#define N_OPTIMS (int)(sizeof OPTIMS / sizeof OPTIMS[0])

const VilOptim *vil_optim_at(int i) { return i >= 0 && i < N_OPTIMS ? OPTIMS[i] : NULL; }

const VilOptim *vil_optim_find(const char *name) {
    for (int i = 0; i < N_OPTIMS; i++)
        if (strcmp(OPTIMS[i]->name, name) == 0) return OPTIMS[i];
    return NULL;
}

const char *vil_optim_names(char *buf, size_t n) {
    size_t len = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < N_OPTIMS && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? ", " : "", OPTIMS[i]->name);
    return buf;
}
