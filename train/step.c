/* step.c: the training step of doc/recipe.md, one function for `vil train` and `vil bench`, so
 * the benchmark times exactly what training runs. */
#include "train/train.h"

const VilOptim *vil_train_optim(const VilTrainConfig *t) { return t->optim; }

VilStepParams vil_step_params(const VilTrainConfig *t, float lr) {
    return (VilStepParams){.optim = vil_train_optim(t), .hyper = vil_train_config_hyper(t, lr),
                           .clip_grad = t->clip_grad, .ema_decay = t->ema_decay,
                           .ema_warmup = t->model_ema_warmup, .overlap = t->allreduce_kind == VIL_ALLREDUCE_OVERLAP,
                           .bucket_bytes = (size_t)(t->bucket_mb * 1048576.0)};
}

int vil_train_init_state(VilModel *m, const VilTrainConfig *t) {
    VilInitSpec spec = {.mode = t->init_state_kind, .sigma = t->init_state_sigma, .drop = t->init_state_drop,
                        .fit = t->init_state_fit_kind, .fit_mean_only = !t->init_state_fit_noise,
                        .fit_momentum = t->init_state_fit_momentum, .fit_drop = t->init_state_fit_drop};
    return vil_model_set_init_state(m, &spec, t->batch);
}

static int reduces(const VilStepParams *s) { return s->dist && s->dist->mpi; }

int vil_train_micro(VilModel *m, const VilStepParams *s, int first, int last) {
    if (first) vil_model_zero_grad(m);
    /* the last backward hands finished layers' gradients to the all-reduce as it goes */
    vil_model_sync_grads(m, last && s->overlap && reduces(s) ? s->dist : NULL, s->bucket_bytes);
    /* all that may allocate here: the states of a batch size they were not made for */
    int rc = vil_model_sample_init_state(m, s->init_seed, s->init_first);
    if (rc != 0) {
        vil_model_sync_grads(m, NULL, 0);
        return rc;
    }
    vil_model_forward(m, 1);
    vil_model_fit_init_state(m, s->dist);
    vil_model_backward(m);
    return 0;
}

int vil_train_update(VilModel *m, const VilStepParams *s) {
    if (vil_model_syncing(m)) {
        vil_model_allreduce_wait(m);
        vil_model_sync_grads(m, NULL, 0);
    } else if (reduces(s)) {
        vil_model_allreduce_grads(m, s->dist);
    }
    int rc = s->clip_grad > 0.0f ? vil_model_clip_grad(m, s->clip_grad) : 0;
    if (rc == 0) rc = vil_model_optim_step(m, &s->hyper);
    if (rc != 0) return rc;
    if (s->ema_decay > 0.0f)
        vil_model_ema_update(m, (float)vil_ema_decay_at(s->ema_decay, s->ema_warmup, vil_model_optim_steps(m)));
    return 0;
}

int vil_train_step(VilModel *m, const VilStepParams *s) {
    int rc = vil_train_micro(m, s, 1, 1);
    return rc != 0 ? rc : vil_train_update(m, s);
}
