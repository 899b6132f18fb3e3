/* optim.c: the optimizer table of optim.h. An entry names the optimizer and its state buffers
 * and queues its backend op; the op itself (vil/optimizer.c, cuda/optimizer.cu) holds the
 * arithmetic. */
#include "optim.h"

#include <stdio.h>
#include <string.h>

static void adam_step(const VilBackend *be, const VilOptimBufs *b, const VilOptimHyper *h, int l2) {
    be->adamw_update(be, &(VilAdamW){.p = b->p, .work = b->work, .g = b->g, .m = b->state[0],
                                     .v = b->state[1], .decay = b->decay, .n = b->n, .lr = h->lr,
                                     .beta1 = h->beta1, .beta2 = h->beta2, .eps = h->eps,
                                     .wd = h->wd, .step = b->step, .l2 = l2});
}
static void adamw(const VilBackend *be, const VilOptimBufs *b, const VilOptimHyper *h) { adam_step(be, b, h, 0); }
static void adam(const VilBackend *be, const VilOptimBufs *b, const VilOptimHyper *h) { adam_step(be, b, h, 1); }

const VilOptim vil_optim_adamw = {
    .name = "adamw", .n_state = 2, .state = {{"adam_m", 0}, {"adam_v", 1}}, .update = adamw};
/* the same moments under the same names: a state file's optimizer is checked by name (train/state.c) */
const VilOptim vil_optim_adam = {
    .name = "adam", .n_state = 2, .state = {{"adam_m", 0}, {"adam_v", 1}}, .update = adam};

static void sgd(const VilBackend *be, const VilOptimBufs *b, const VilOptimHyper *h) {
    be->sgd_update(be, &(VilSgd){.p = b->p, .work = b->work, .g = b->g, .buf = b->state[0],
                                 .decay = b->decay, .n = b->n, .lr = h->lr,
                                 .momentum = h->momentum, .wd = h->wd, .nesterov = h->nesterov});
}

const VilOptim vil_optim_sgd = {
    .name = "sgd", .n_state = 1, .state = {{"momentum_buffer", 0}}, .update = sgd};

static void lamb_step(const VilBackend *be, const VilOptimBufs *b, const VilOptimHyper *h, int clip) {
    be->lamb_update(be, &(VilLamb){.p = b->p, .work = b->work, .g = b->g, .m = b->state[0],
                                   .v = b->state[1], .decay = b->decay, .spans = b->spans,
                                   .n_spans = b->n_spans, .n = b->n, .lr = h->lr, .beta1 = h->beta1,
                                   .beta2 = h->beta2, .eps = h->eps, .wd = h->wd, .step = b->step,
                                   .trust_clip = clip});
}
static void lamb(const VilBackend *be, const VilOptimBufs *b, const VilOptimHyper *h) { lamb_step(be, b, h, 0); }
static void lambc(const VilBackend *be, const VilOptimBufs *b, const VilOptimHyper *h) { lamb_step(be, b, h, 1); }

const VilOptim vil_optim_lamb = {.name = "lamb", .n_state = 2,
                                 .state = {{"lamb_exp_avg", 0}, {"lamb_exp_avg_sq", 1}}, .update = lamb};
const VilOptim vil_optim_lambc = {.name = "lambc", .n_state = 2,
                                  .state = {{"lamb_exp_avg", 0}, {"lamb_exp_avg_sq", 1}}, .update = lambc};

static const VilOptim *const OPTIMS[] = {&vil_optim_adamw, &vil_optim_adam, &vil_optim_sgd, &vil_optim_lamb,
                                         &vil_optim_lambc};

const VilOptim *vil_optim_find(const char *name) {
    for (size_t i = 0; i < sizeof OPTIMS / sizeof OPTIMS[0]; i++)
        if (strcmp(OPTIMS[i]->name, name) == 0) return OPTIMS[i];
    return NULL;
}

const char *vil_optim_names(char *buf, size_t n) {
    size_t len = 0;
    if (n) buf[0] = 0;
    for (size_t i = 0; i < sizeof OPTIMS / sizeof OPTIMS[0] && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? ", " : "", OPTIMS[i]->name);
    return buf;
}
