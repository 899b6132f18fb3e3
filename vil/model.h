/* model.h: a network that runs on any backend, as the commands, the trainer and the tools see
 * it. The core (model.c) knows no family: it owns the parameter buffers and their table (names
 * and shapes of doc/models.md, in the official state_dict order), the training state (the
 * optimizer's buffers, the EMA and the named state a family registers), the inputs, logits and
 * losses, and the inference forward's replay as a CUDA graph. The family (vil/net.h; ViL and
 * ViM: vil/vim.c) builds the table and runs the forward and backward against VilBackend. */
#ifndef VIL_MODEL_H
#define VIL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "config.h"
#include "optim.h"

#define VIL_MAX_NDIM 4

typedef struct {
    char name[64];  /* checkpoint key, e.g. layers.3.mixer.x_proj_b.weight */
    int ndim;
    int64_t shape[VIL_MAX_NDIM];
    size_t numel;
    size_t offset;  /* in elements, into the parameter buffers */
    /* The stored layout, which may hold zeros that the tensor does not (padding for the matrix
     * products, model.c): the shape[0] rows are `ld` elements apart (ld >= the row length:
     * dt_proj's input width), `gap` zero rows follow the first `gap_at` rows (x_proj: between
     * the dt rows and the B rows), and `pad` zero elements follow the whole. The padding is
     * never saved (vil_param_load/store convert), gets zero gradients and stays 0;
     * vil_model_set_params zeroes it. */
    size_t ld, gap_at, gap, pad;
    int decay;      /* 1: AdamW weight decay applies */
} VilParamInfo;

/* elements the tensor occupies in the parameter buffers, padding included */
size_t vil_param_extent(const VilParamInfo *p);
/* stored (the parameter buffer's layout, at buf + p->offset) <-> dense (the tensor as in a
 * checkpoint, numel elements); store writes the padding's zeros. Either works in place when
 * dense sits at or before stored in one buffer. */
void vil_param_load(const VilParamInfo *p, float *dense, const float *stored);
void vil_param_store(const VilParamInfo *p, float *stored, const float *dense);

/* VilModel.recompute: the training activations every layer keeps, against what the backward
 * computes again from the layer's own inputs (the gradients are the same bits):
 * NONE keeps both SiLU(conv1d(x)) (u) and dt_proj's output (delta) of every layer;
 * ALL keeps one layer's of each (a conv1d and a dt_proj forward per layer in the backward, ~3%
 * of a ViL-Tiny step, 46% less activation memory); DELTA keeps every u and one delta (the
 * dt_proj forward again, ~2%, ~23% less). */
enum { VIL_RECOMPUTE_NONE = 0, VIL_RECOMPUTE_ALL = 1, VIL_RECOMPUTE_DELTA = 2 };

/* The activations' inputs and outputs, which the core reads and writes; the family's own
 * activations (vil/net.h) live in the same allocation. Pointers into backend memory. */
typedef struct {
    int B, training, recompute; /* VilModel.recompute as allocated (0 in inference) */
    /* the inputs the next pass reads: the allocation's own buffers below, or those given to
     * vil_model_set_inputs */
    float *img;         /* (B, in_floats) f32: (B, C, H, W), a stream's (B, chunk, C, H, W) */
    float *targets;     /* (B, readouts, classes) f32 soft targets */
    float *dp_scale;    /* drop-path scales (the family's rows; vil_model_drop_path_bytes) */
    float *logits;      /* (B, readouts, classes) f32 (VilConfig.readouts: 1, a stream's chunk) */
    float *probs;       /* (B, readouts, classes) f32 */
    float *losses;      /* (B, readouts) f32 */
    float *dimg;        /* (B, in_floats) f32 input gradient, only with VilModel.input_grad */
    float *own_img, *own_targets, *own_dp_scale; /* the input buffers of this allocation */
    void *base;
    size_t bytes;
} VilActs;

/* A named activation of the last forward (vil_model_act): for tests and tools that look inside
 * a pass ("layers.3.mixer.u", "layers.3.mixer.u_b", ...; the family's names). */
typedef struct {
    void *data;    /* backend memory */
    int act;       /* 1: the backend's activation type (bf16 on CUDA), 0: float32 */
    size_t numel;  /* elements from data */
    size_t ld;     /* elements between rows (a row of a (B, L, X) tensor: X or more) */
} VilActView;

/* The initial-state interventions of doc/recipe.md ("Initial states"): what a training forward's
 * scans start from. Evaluation forwards always start from zero. */
typedef enum { VIL_INIT_ZERO, VIL_INIT_NOISE, VIL_INIT_FITTED, VIL_INIT_PASSING, VIL_INIT_COUNT } VilInitMode;
extern const char *const vil_init_mode_names[VIL_INIT_COUNT]; /* "zero", "noise", "fitted", "passing" */
/* fitted's statistics: a mean and variance per element of a layer's states (layer, direction,
 * state, channel), or one pair per layer and direction (the paper's scalars per layer and head) */
typedef enum { VIL_INIT_FIT_ELEMENT, VIL_INIT_FIT_SCALAR, VIL_INIT_FIT_COUNT } VilInitFit;
extern const char *const vil_init_fit_names[VIL_INIT_FIT_COUNT]; /* "element", "scalar" */
/* The initial-state intervention of the training forwards (vil_model_set_init_state; the config
 * keys init_state*, doc/recipe.md "Initial states") */
typedef struct {
    VilInitMode mode;
    float sigma;        /* noise: the standard deviation */
    float drop;         /* passing: the probability that a sample starts from zero */
    VilInitFit fit;     /* fitted: what one mean and variance describe */
    int fit_mean_only;  /* fitted: every start is the fitted mean (no noise) */
    float fit_momentum; /* fitted: the old fit's weight at each update (the batch's: 1 - it) */
    float fit_drop;     /* fitted: the probability that a sample starts from zero */
} VilInitSpec;

/* The training state the model owns besides its weights, as a training state file holds it
 * (train/state.c saves, gathers, restores and checks it without knowing what it is): the
 * optimizer's buffers in its order under their names (AdamW: "adam_m", "adam_v"), then the EMA
 * ("ema") when the model keeps one, then the family's, at most 4 (the initial states' fit,
 * "init_state_mean" and "init_state_var", or passing's "init_state_prev"; a stream's carried
 * state and conv context, "stream_state" and "stream_context"). */
#define VIL_TRAIN_STATE_MAX (VIL_OPTIM_MAX_STATE + 1 + 4)
enum { VIL_STATE_F32 = 0 };
typedef struct {
    const char *name;
    int nonneg;          /* every value >= 0 */
    int optional;        /* a state file without it: it starts afresh (absent says why) */
    const char *absent;  /* the warning then ("the state has no EMA (it was off): ...") */
    int dtype;           /* VIL_STATE_F32 (every training-state tensor so far) */
    int params_shaped;   /* a parameter-shaped buffer, saved packed: param_count floats */
    int ndim;            /* the saved shape (params_shaped: 1, {param_count}) */
    int64_t shape[6];
    const char *dims;    /* the dimensions' names for messages, ", "-separated: "layers, directions,
                          * d_state, d_inner"; NULL: the shape's numbers alone */
    size_t numel;        /* floats of the saved tensor (one rank's) */
    size_t room;         /* floats of host room train_state_get needs (>= numel) */
    /* Each rank holds its own (passing's final states): a state file holds every rank's, a
     * leading dimension of the ranks, gathered by a sum over them; a resume takes its rank's,
     * and one saved by another number of ranks or with another shape starts it afresh, saying
     * `mismatch`. Otherwise every rank holds the same values and rank 0's are saved. */
    int per_rank;
    const char *mismatch;
    /* A group of tensors restored together (the fit's mean and var): all of them or none of
     * them in a state file (0: alone). */
    int group;
    /* A count saved beside it as metadata (the fit's updates: "vil.init_state_fits"), or NULL. */
    const char *count_key;
} VilTrainStateInfo;

typedef struct VilNet VilNet;

typedef struct {
    VilConfig cfg;
    const VilBackend *be;
    int n_tensors;
    VilParamInfo *info;  /* (n_tensors) in checkpoint order */
    size_t buf_len;      /* elements of each parameter-shaped buffer (params, grads, optimizer
                          * state, ema):
                          * the tensors and the padding between them */
    size_t param_count;  /* parameters of the model (the tensors' elements) */
    const VilNet *net;   /* the family that builds and runs it (vil/net.h) */
    void *fam;           /* the family's own: where its tensors are, its activations, its state */
    float *params;       /* (buf_len) f32 master, backend memory */
    void *work;          /* working copy the ops read (== params when work_bytes == 0) */
    float *grads;        /* (buf_len) f32 */
    /* The training state, read and written through the functions below (vil_model_train_state_*,
     * vil_model_grad_norm), not by callers. */
    const VilOptim *optim;                    /* set by vil_model_init_training */
    float *optim_state[VIL_OPTIM_MAX_STATE];  /* (buf_len) f32 each: optim's buffers */
    float *ema;          /* (buf_len) f32 EMA of the weights (vil_model_init_training), or NULL */
    int ema_active;      /* params and ema are swapped: the EMA weights are in use */
    float *grad_norm;    /* backend float: the norm of the last vil_model_clip_grad */
    unsigned char *decay_mask; /* (buf_len) 1 where weight decay applies, backend memory */
    VilSpan *spans;      /* (n_tensors) each tensor's elements in the buffers, backend memory */
    int step;            /* optimizer steps taken */
    int input_grad;      /* set before vil_model_alloc_acts to get dL/dimage in acts.dimg */
    long loss_denom;     /* the samples the minimized loss is the mean over: 0 = the batch;
                          * the global batch when gradients sum over micro-batches and ranks */
    /* Set (train/step.c) for the last micro-batch of a step: the backward hands the gradients
     * of finished layers to the all-reduce over dist in buckets of about bucket_bytes while it
     * goes on, and vil_model_allreduce_wait ends it. dist NULL: no all-reduce in the backward. */
    struct {
        const struct VilDist *dist;
        size_t bucket_bytes;
        size_t hi; /* gradients at [hi, buf_len) are on their way */
    } sync;
    VilActs acts;
    /* The inference forward as a CUDA graph (backends with graph_begin): with use_graph (on from
     * vil_model_init), vil_model_forward(m, 0) on inference activations runs its ops plainly
     * the first time it sees an input buffer with the weights in use, records them the second
     * time, and replays the recording from then on: one launch instead of ~20 per layer. Two
     * recordings are kept (an input feed's two slots). */
    int use_graph;
    /* Set before vil_model_alloc_acts (VIL_RECOMPUTE_*): what training activations keep of
     * every layer and what the backward computes again, the same bits either way. */
    int recompute;
    struct VilGraphSlot {
        void *g; /* the backend's graph; NULL: only seen once */
        const void *img, *params;
    } graphs[2];
    int graph_next;
} VilModel;

/* Lay out and allocate the parameters for cfg (finalized) on backend be. Contents undefined
 * until vil_model_init_weights or vil_model_set_params. Returns 0, or -1 (reported) when the
 * model is past VIL_MAX_PARAMS, its parameters would not fit the device's free memory, or the
 * backend cannot allocate them; after -1, m holds nothing (vil_model_free is a no-op on it). */
int vil_model_init(VilModel *m, const VilConfig *cfg, const VilBackend *be);
void vil_model_free(VilModel *m);
/* Parameter count of a configuration (the tensors' elements) without allocating anything. 0
 * for a configuration no family builds. */
size_t vil_model_count_params(const VilConfig *cfg);
/* The parameter table of cfg (finalized), as vil_model_init lays it out, without allocating
 * the model: *n tensors, malloc'd (free()). For checking a file against a config before the
 * memory is taken. */
VilParamInfo *vil_model_param_table(const VilConfig *cfg, int *n);
/* Bytes of the activations of a batch of B (what vil_model_alloc_acts takes). */
size_t vil_model_acts_bytes(const VilModel *m, int B, int training);
/* 0 when a batch of B fits: within the ops' 32-bit indexing and the device's free memory;
 * else -1 with a message giving the numbers and what to lower. Commands call it before
 * vil_model_alloc_acts, to say so before anything is allocated. */
int vil_model_check_acts(const VilModel *m, int B, int training);
/* Multiply-adds of one image's forward pass (cfg finalized), counted as fvcore counts the
 * "FLOPs" of the ViM, DeiT and Longhorn tables: the products, the patch embedding, the
 * convolutions and the scans (3 per state element and token). Norms and element-wise ops are
 * left out, as there. ViM-Tiny at 224: 1.467e9. */
double vil_model_macs(const VilConfig *cfg);
/* Initialization of doc/models.md from a seed (computed on the host, then uploaded). 0, or -1
 * (reported) without the host memory for it (the weights are then as they were). */
int vil_model_init_weights(VilModel *m, uint64_t seed);
/* A parameter-buffer-shaped host array (buf_len floats) to and from its packed form
 * (param_count floats, the tensors in table order without their padding: what files hold).
 * Both work in place (buf == packed); unpacking zeroes the padding. */
void vil_model_pack(const VilModel *m, float *packed, const float *buf);
void vil_model_unpack(const VilModel *m, float *buf, const float *packed);
/* Host float32 copies of all parameters, in table order (buf_len floats). */
void vil_model_get_params(const VilModel *m, float *host);
/* 0, or -1 (reported) without the host memory for a copy (the weights are then as they were) */
int vil_model_set_params(VilModel *m, const float *host);
const VilParamInfo *vil_model_find_param(const VilModel *m, const char *name);
/* The named activation of the last forward (VilActView): 0, or -1 when the family has none of
 * that name (or the activations are not allocated). */
int vil_model_act(const VilModel *m, const char *name, VilActView *v);

/* (Re)allocate activations for batch B; training = 1 keeps every layer's activations for the
 * backward pass. The inputs are then the allocation's own buffers (acts.img, acts.targets,
 * acts.dp_scale), which callers may fill. 0; VIL_EUSAGE (reported) for a batch the ops cannot
 * index (B < 1, or past their 32-bit sizes: vil_model_check_acts), with the model as it was;
 * -1 (reported, with what to lower) when the backend cannot allocate them: the old activations
 * are given back first (the device never holds both), so the model then has none, as after
 * vil_model_free_acts, and a smaller batch may be asked for. */
int vil_model_alloc_acts(VilModel *m, int B, int training);
/* The batch the activations hold (0: none allocated). */
int vil_model_batch(const VilModel *m);
/* 1 when the model keeps an EMA of its weights (vil_model_init_training), else 0. */
int vil_model_has_ema(const VilModel *m);
/* The allocation's own input buffers (backend memory): dev[0] the images (B, C, H, W) f32,
 * dev[1] the soft targets (B, classes) f32, dev[2] the drop-path scales (depth + 1, B) f32.
 * What an input feed's first slot copies into (data/feed.h). */
void vil_model_input_buffers(const VilModel *m, void *dev[3]);
/* Host images (B, in_floats) and soft targets (B, readouts, classes; NULL: not copied) into the
 * inputs the next pass reads. */
void vil_model_upload_inputs(VilModel *m, const float *img, const float *targets);
/* The per-sample losses (B floats: each the mean over the sample's readouts) of the last forward
 * with the loss into host memory; returns B. A host read: it waits for the queued ops. */
int vil_model_losses(const VilModel *m, float *host);
/* The logits (B, readouts, classes) of the last forward into host memory; returns B. A host read. */
int vil_model_logits(const VilModel *m, float *host);
/* A network that reads streams in chunks (family = stream): the next forwards read chunk k of
 * their streams, k = 0 where they start (from zero, or a training forward's intervention), k > 0
 * going on from the recurrent state and conv context the last forward handed out (doc/models.md
 * "The stream family"). Nothing for a network whose samples are whole. */
void vil_model_stream_chunk(VilModel *m, long k);
/* The activations given back (vil_model_alloc_acts makes them again). */
void vil_model_free_acts(VilModel *m);
/* Read the next passes' inputs from other backend buffers of the same sizes (an input feed's
 * slot: data/feed.h): images, soft targets and drop-path scales; NULL: the model's own buffer
 * for that input. */
void vil_model_set_inputs(VilModel *m, float *img, float *targets, float *dp_scale);
/* Forward on m->acts.img (backend memory, B images): fills m->acts.logits. With targets
 * (m->acts.targets filled) also the per-sample losses and probabilities. */
void vil_model_forward(VilModel *m, int with_loss);
/* Backward of the batch-mean loss; needs a forward with_loss, whose activations it uses up (the
 * scan's ddelta is written over delta): a second backward needs a forward again. Gradients
 * accumulate into m->grads: call vil_model_zero_grad first. */
void vil_model_backward(VilModel *m);
void vil_model_zero_grad(VilModel *m);
/* Draw the drop-path scales of this step (training only; no-op when drop_path is 0). 0, or -1
 * (reported) without the host memory for them. */
int vil_model_sample_drop_path(VilModel *m, uint64_t seed);
/* The same in two parts, for callers that upload the scales themselves (the trainer's feed):
 * the bytes of acts.dp_scale that a step draws (0: drop path is off), and the host rows. */
size_t vil_model_drop_path_bytes(const VilModel *m);
/* The rows for a batch whose first sample is sample `first` of the global batch: each sample's
 * draws come from its own stream (seed, its global index), so they do not depend on how the
 * global batch is cut into ranks and micro-batches. */
void vil_model_drop_path_rows(const VilModel *m, uint64_t seed, long first, float *h);
/* The training state the model owns: the buffers of optimizer opt (zero) and, with ema, the EMA
 * of the weights (starting as a copy of them), and what the step needs besides (the gradient
 * norm, the weight-decay mask, the tensors' spans): after it, the optimizer step and clipping
 * allocate nothing. Allocated once; a second call adds only what is new. 0; VIL_EUSAGE
 * (reported) when opt is not the first call's; -1 (reported) when the backend cannot allocate
 * it, with the model as it was (nothing of this call kept). */
int vil_model_init_training(VilModel *m, const VilOptim *opt, int ema);
/* The training state (VilTrainStateInfo): how many tensors there are now, and tensor i's. */
int vil_model_train_state_count(const VilModel *m);
VilTrainStateInfo vil_model_train_state_info(const VilModel *m, int i);
/* Tensor i into host memory (info.room floats of room), packed where it is parameter-shaped
 * (vil_model_pack: its first param_count floats). */
void vil_model_train_state_get(const VilModel *m, int i, float *host);
/* Tensor i from host values (info.numel floats, any alignment); NULL: its start (optimizer
 * buffers zero, the EMA a copy of the weights in use, the family's as it starts). 0, or -1
 * (reported) when the memory it takes (a host copy; passing's states) cannot be had. */
int vil_model_train_state_set(VilModel *m, int i, const float *packed);
/* The count saved beside tensor i as metadata (info.count_key; 0 without one), and set. */
long vil_model_train_state_counter(const VilModel *m, int i);
void vil_model_train_state_set_counter(VilModel *m, int i, long count);
/* The optimizer steps taken (the bias corrections' step count), and set on a resume. */
int vil_model_optim_steps(const VilModel *m);
void vil_model_optim_set_steps(VilModel *m, int steps);
/* The initial-state intervention of the training forwards (doc/recipe.md "Initial states"):
 * noise draws every initial state value from N(0, sigma^2); fitted from N(mean, var) of a running
 * fit of the final states per layer, direction, channel and state, or per layer and direction
 * (spec->fit; zero until the first fit), or starts from the fitted mean alone, and from zero with
 * probability fit_drop; passing starts each sample from the final state of the sample at its place
 * in the previous micro-batch (this rank's), or from zero with probability drop (and at the
 * first). Once, before the training forwards, with the training micro-batch B; the fit and the
 * passed states join the training state (vil_model_train_state_*); the states of a batch of B are
 * allocated here. 0, or -1 (reported) for a network without recurrent states (a mode other than
 * zero) or when the states cannot be allocated (the intervention is then off). */
int vil_model_set_init_state(VilModel *m, const VilInitSpec *spec, int B);
/* Before a training forward: this micro-batch's initial states, drawn from the streams
 * (seed, first + b) of init_state.h (first: the global index of its sample 0). 0, or -1
 * (reported) when the states of a new batch size cannot be allocated. */
int vil_model_sample_init_state(VilModel *m, uint64_t seed, long first);
/* After a training forward: fitted updates its fit from the batch's final states (their moments
 * summed over the ranks of dist, NULL: this process's alone); passing keeps them for the next
 * micro-batch. Nothing for zero and noise. */
void vil_model_fit_init_state(VilModel *m, const struct VilDist *dist);

/* The recurrent state along the sequence (`vil states`): the network's streams of state (ViL
 * and ViM: each layer's two directions, stream 2 i + j), each of *L steps over a state of *state
 * floats per sample (N x E); 0 streams for a network without. */
int vil_model_seq_streams(const VilModel *m, int *L, int *state);
/* After a forward on training activations (vil_model_alloc_acts(m, B, 1), recompute 0, drop path
 * off): stream s's squared state norm after each step, hsq (B, L) host floats, in the stream's
 * own order (step t: the t-th token it reads), and its final state hT (B, state) host floats;
 * on the model's backend (a scan that keeps no outputs). 0, or -1 (reported). */
int vil_model_seq_states(VilModel *m, int stream, float *hsq, float *hT);
/* After the same forward: stream s's state after the step that reads token t (0..L-1 in the
 * sequence's order: the forward direction has then read tokens 0..t, the backward t..L-1), h
 * (B, state) host floats, (n, e) at n E + e as hT. 0, or -1 (reported). */
int vil_model_seq_state_at(VilModel *m, int stream, int t, float *h);

/* For the trainer: the last micro-batch of a step hands the gradients of finished layers to the
 * all-reduce over dist (NULL: none in the backward) in buckets of about bucket_bytes while the
 * backward goes on; vil_model_allreduce_wait ends it. */
void vil_model_sync_grads(VilModel *m, const struct VilDist *dist, size_t bucket_bytes);
/* 1 while a backward's all-reduce is on its way (vil_model_sync_grads set a dist) */
int vil_model_syncing(const VilModel *m);

/* clip_grad_norm_: the gradients scaled to max_norm when their global norm is above it; the
 * norm stays on the device (vil_model_grad_norm reads it). 0, or -1 (reported) when the norm's
 * buffer cannot be allocated (never after vil_model_init_training). */
int vil_model_clip_grad(VilModel *m, float max_norm);
/* The global gradient norm the last vil_model_clip_grad found (-1 before the norm has a
 * buffer: no clip and no vil_model_init_training yet). A host read: it waits for the queued
 * ops. */
float vil_model_grad_norm(const VilModel *m);
/* The gradients summed over the ranks of dist (backend grad_allreduce: MPI or NCCL), in one
 * call after the backward. */
struct VilDist;
void vil_model_allreduce_grads(VilModel *m, const struct VilDist *dist);
/* The end of the all-reduce the backward started bucket by bucket (m->sync): the ops queued
 * after it see the summed gradients. */
void vil_model_allreduce_wait(VilModel *m);
/* One step of the model's optimizer over all parameters (weight decay on the tensors with
 * decay = 1); without vil_model_init_training before, AdamW's buffers are made. 0; VIL_EUSAGE
 * (reported) with the EMA weights in use; -1 (reported) when the buffers it had to make cannot
 * be allocated (never after vil_model_init_training). */
int vil_model_optim_step(VilModel *m, const VilOptimHyper *h);
/* ema = decay * ema + (1 - decay) * params (needs vil_model_init_training with ema). */
void vil_model_ema_update(VilModel *m, float decay);
/* on = 1: the model runs (and vil_model_get_params, checkpoint saves read) the EMA weights; 0:
 * its own again. Between steps only: an optimizer step with the EMA in use is refused. */
void vil_model_use_ema(VilModel *m, int on);

#endif
