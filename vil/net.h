/* net.h: what a model family implements for the core of model.c (vil/model.h). The core owns
 * what every network has: the parameter buffers and their table, the training state (the
 * optimizer's buffers, the EMA and whatever named state the family registers), the inputs,
 * logits and losses, and the replay of the inference forward as a CUDA graph. A family owns its
 * parameter table's contents, its initialization, its activations and the forward and backward
 * sequences written against the op table (VilBackend). ViL and ViM are one family (vil/vim.c);
 * another network (a plain ViT, say) is a family file and a row of vil_nets[] (model.c).
 * Internal to the model: commands, the trainer and tools use vil/model.h only. */
#ifndef VIL_NET_H
#define VIL_NET_H

#include "common.h"
#include "model.h"

/* The parameter table a family builds: tensors in checkpoint order, each starting at a multiple
 * of VIL_PARAM_ALIGN elements of the buffers (see VilParamInfo). */
#define VIL_PARAM_ALIGN 64
typedef struct {
    VilParamInfo *info;
    int n, cap;
    size_t total, count; /* elements with padding; parameters */
} VilParamTable;
/* a tensor appended (its format names it, printf-style); its offset */
size_t vil_param_table_add(VilParamTable *t, int decay, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* the stored layout of the last tensor added (VilParamInfo's ld, gap_at, gap, pad) */
void vil_param_table_relayout_last(VilParamTable *t, size_t ld, size_t gap_at, size_t gap, size_t pad);

/* Activations are carved from one allocation: first sized (base NULL: pointers NULL), then laid
 * out again over the allocation. Each piece is a multiple of 256 bytes. */
typedef struct {
    char *base;
    size_t off;
} VilArena;
void *vil_arena_carve(VilArena *a, size_t n, size_t elem);

/* A named training-state tensor a family registers beyond the optimizer's and the EMA
 * (VilTrainStateInfo describes it to callers): where it lives and how it starts. */
struct VilNet {
    const char *name; /* "vim": Vision Mamba's network, with Longhorn's (ViL) or Mamba's (ViM) scan */
    /* The parameter table of cfg (finalized) into *t; with fam, the family's own record of it
     * (malloc'd: where its tensors are), NULL when only counting. */
    void (*build)(const VilConfig *cfg, VilParamTable *t, void **fam);
    /* Everything the family allocated (fam and its device buffers), at vil_model_free. */
    void (*release)(VilModel *m);
    int (*init_weights)(VilModel *m, uint64_t seed); /* 0, or -1 (reported) */
    double (*macs)(const VilConfig *cfg);
    /* The activations of a batch of B: their bytes. With base (an allocation of that many), also
     * laid out over it: the core's inputs and outputs in m->acts (img, targets, dp_scale, logits,
     * probs, losses, dimg) and the family's own, carved in one order (the device buffers keep
     * their layout), and what must start at zero is zeroed; base NULL touches nothing. */
    size_t (*layout)(VilModel *m, void *base, int B, int training);
    /* the family's hold on the activations given back (vil_model_free_acts) */
    void (*drop_acts)(VilModel *m);
    /* Bytes a training batch of B needs beyond its activations (the initial states' h0, hT) and
     * the family does not hold yet. */
    size_t (*extra_bytes)(const VilModel *m, int B);
    /* 0 when a batch of B is within the ops' indexing; else -1 after a message starting with what. */
    int (*check_batch)(const VilModel *m, int B, const char *what);
    /* What to lower when a batch does not fit the device's memory. */
    const char *(*memory_hint)(const VilModel *m, int training);
    void (*forward)(VilModel *m, int with_loss);
    void (*backward)(VilModel *m);
    /* Drop path: the bytes of acts.dp_scale a training step draws (0: off), and the rows of a
     * batch whose first sample is `first` of the global batch. */
    size_t (*drop_path_bytes)(const VilModel *m);
    void (*drop_path_rows)(const VilModel *m, uint64_t seed, long first, float *h);
    /* The initial states of the recurrent layers (doc/recipe.md "Initial states"); NULL: the
     * family has none. set registers its training state (train_state_*). */
    int (*set_init_state)(VilModel *m, const VilInitSpec *spec, int B);
    int (*sample_init_state)(VilModel *m, uint64_t seed, long first); /* 0, or -1 (reported) */
    void (*fit_init_state)(VilModel *m, const struct VilDist *dist);
    /* The family's training-state tensors (after the optimizer's and the EMA's): their count,
     * description, and host copies in and out (get: room for info.room floats; set NULL: its
     * start), and the count saved beside one (VilTrainStateInfo.count_key). */
    int (*state_count)(const VilModel *m);
    VilTrainStateInfo (*state_info)(const VilModel *m, int i);
    void (*state_get)(const VilModel *m, int i, float *host);
    int (*state_set)(VilModel *m, int i, const float *host); /* 0, or -1 (reported) */
    long (*state_counter)(const VilModel *m, int i);
    void (*state_set_counter)(VilModel *m, int i, long count);
    /* A named activation of the last forward (vil_model_act). 0, or -1 when there is none. */
    int (*act)(const VilModel *m, const char *name, VilActView *v);
    /* The recurrent state along the sequence (vil_model_seq_states): streams and their use. */
    int (*seq_streams)(const VilModel *m, int *L, int *state);
    int (*seq_states)(VilModel *m, int stream, float *hsq, float *hT);
    int (*seq_state_at)(VilModel *m, int stream, int t, float *h);
    /* A family that reads streams in chunks (vil_model_stream_chunk): the next forwards read chunk
     * k of their streams. NULL: the family's samples are whole; a family with it also has no
     * inference forward the core may record and replay, since each forward reads state the last
     * one left. */
    void (*stream_chunk)(VilModel *m, long k);
};

/* The families, and the one that builds cfg's network. */
extern const VilNet vil_net_vim, vil_net_stream;
const VilNet *vil_net_of(const VilConfig *cfg);

/* For families: the working copy of a matrix weight, the f32 master of any other parameter, its
 * gradient, an act pointer plus an element offset, and the backward's gradient buckets for the
 * all-reduce (m->sync: the gradients at [lo, buf_len) are final; `last` sends what is left). */
const void *vil_net_weight(const VilModel *m, size_t off);
const float *vil_net_param(const VilModel *m, size_t off);
float *vil_net_grad(const VilModel *m, size_t off);
void *vil_net_act_at(const VilModel *m, void *p, size_t elems);
void vil_net_grads_ready(VilModel *m, size_t lo, int last);
/* A backend buffer of n floats, zeroed; NULL (reported by the backend) when it cannot be had. */
float *vil_net_zeros(const VilModel *m, size_t n);
/* for a family's init_weights: the tensor of its table at offset (an offset build() recorded);
 * a standard normal truncated to [lo, hi] by rejection; n uniform draws in [-bound, bound) */
const VilParamInfo *vil_net_param_at(const VilModel *m, size_t offset);
float vil_net_trunc_normal(VilRng *r, float lo, float hi);
void vil_net_fill_uniform(float *p, size_t n, float bound, VilRng *r);

#endif
