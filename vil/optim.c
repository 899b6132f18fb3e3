/* optim.c: the optimizer table of optim.h. An entry names the optimizer and its state buffers
 * and queues its backend op; the op itself (vil/optimizer.c, cuda/optimizer.cu) holds the
 * arithmetic. */
#include "optim.h"

#include <stdio.h>
#include <string.h>

static void adamw(const VilBackend *be, const VilOptimBufs *b, const VilOptimHyper *h) {
    be->adamw_update(be, &(VilAdamW){.p = b->p, .work = b->work, .g = b->g, .m = b->state[0],
                                     .v = b->state[1], .decay = b->decay, .n = b->n, .lr = h->lr,
                                     .beta1 = h->beta1, .beta2 = h->beta2, .eps = h->eps,
                                     .wd = h->wd, .step = b->step});
}

const VilOptim vil_optim_adamw = {
    .name = "adamw", .n_state = 2, .state = {{"adam_m", 0}, {"adam_v", 1}}, .update = adamw};

static const VilOptim *const OPTIMS[] = {&vil_optim_adamw};

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
