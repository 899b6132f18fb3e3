/* optim.h: the optimizers the model trains with, each a small description: its name (the value
 * of the training key `optimizer`), the line the run's header describes it with, the
 * parameter-shaped float32 buffers it keeps between steps (with the names a training state file
 * saves them under) and its update, written against the backend's op table. The model owns the
 * buffers (vil_model_init_training) and runs the update (vil_model_optim_step); the trainer
 * saves and restores them by the names here (vil_model_train_state_*), so an optimizer is its
 * entry in optim.c and its op (backend.h's VIL_OPS, vil/optimizer.c, cuda/optimizer.cu). */
#ifndef VIL_OPTIM_H
#define VIL_OPTIM_H

#include "backend.h"

#define VIL_OPTIM_MAX_STATE 2

/* what one update works on: backend memory, n elements each (the whole parameter buffer) */
typedef struct {
    float *p;                          /* f32 master weights */
    void *work;                        /* the backend's working copy, refreshed; or NULL */
    const float *g;                    /* gradients */
    float *state[VIL_OPTIM_MAX_STATE]; /* the optimizer's buffers, in VilOptim.state order */
    const unsigned char *decay;        /* 1 where weight decay applies */
    const VilSpan *spans;              /* (n_spans) the parameter tensors (backend memory) */
    int n_spans;
    size_t n;
    int step;                          /* 1 for the first update */
} VilOptimBufs;

typedef struct {
    const char *name;
    /* what the run's header says of it with these settings ("AdamW wd 0.05"), into buf (cut to n) */
    void (*describe)(const VilOptimHyper *h, char *buf, size_t n);
    int n_state;
    struct {
        const char *name; /* the tensor's name in a training state file */
        int nonneg;       /* every value >= 0 (a state file holding less is refused) */
    } state[VIL_OPTIM_MAX_STATE];
    /* queues the update on be (the buffers start at zero before step 1); h from the training
     * config (backend.h VilOptimHyper), the optimizer's own variant (l2, trust_clip) its own */
    void (*update)(const VilBackend *be, const VilOptimBufs *b, const VilOptimHyper *h);
} VilOptim;

/* torch.optim.AdamW (vil/optimizer.c): moments "adam_m" and "adam_v" */
extern const VilOptim vil_optim_adamw;
/* torch.optim.Adam, L2 weight decay added to the gradient (timm's --opt adam): AdamW's op in its
 * l2 mode, the same "adam_m" and "adam_v" */
extern const VilOptim vil_optim_adam;
/* torch.optim.SGD with momentum (Nesterov when VilOptimHyper.nesterov), L2 weight decay:
 * "momentum_buffer" */
extern const VilOptim vil_optim_sgd;
/* timm's Lamb (lambc: its trust ratio clipped at 1): "lamb_exp_avg", "lamb_exp_avg_sq" */
extern const VilOptim vil_optim_lamb, vil_optim_lambc;

/* The optimizer named name ("adamw", "adam", "sgd", "lamb", "lambc"), or NULL when there is none of that name. */
const VilOptim *vil_optim_find(const char *name);
/* The table's optimizer i (0, 1, ...), or NULL past the last. */
const VilOptim *vil_optim_at(int i);
/* The optimizers' names, comma-separated, into buf (cut to n); returns buf. */
const char *vil_optim_names(char *buf, size_t n);

#endif
