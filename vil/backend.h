/* backend.h: the op set a backend provides, declared once. The model (model.c) is written once
 * against this table; backend_cpu.c fills it with the float32 reference ops of ops_cpu.h and
 * cuda/ fills it with the CUDA twins. Every op takes its backend (whose ctx holds the device
 * state: stream, handles, scratch, allocations) and one argument struct declared here, so an
 * op's signature lives in one place: its struct. VIL_OPS lists the ops; the table, the CPU and
 * CUDA declarations and the profiling wrappers are generated from that list.
 *
 * Tensors are `void *` where their element type is the backend's: "act" tensors are float32 on
 * the CPU and bf16 on CUDA; tensors marked f32 are float32 on every backend (the residual
 * stream, norm statistics, logits, gradients of parameters, optimizer state). Matrix-product
 * weights arrive as the backend's working copy (`const void *w`); every other parameter (biases,
 * norm weights, conv taps, D, A_log, cls/pos) as the float32 master. Conventions: parameter
 * gradients accumulate (+=), activation gradients overwrite (=) unless an `accumulate` field says
 * otherwise; shapes are in the field comments. The math is in doc/models.md and doc/scans.md. */
#ifndef VIL_BACKEND_H
#define VIL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "recurrence.h"

#ifdef __cplusplus
extern "C" {
#endif

/* linear flags */
#define VIL_LINEAR_OUT_F32 1 /* out (and dout) are f32 instead of act (the classifier head) */


/* patch_embed.c: Conv2d(C -> D, kernel P, stride S) on the image, flattened to tokens */
typedef struct {
    void *out;         /* (B, M, D) act */
    const float *img;  /* (B, C, H, W) f32 */
    const void *w;     /* (D, C, P, P) */
    const float *b;    /* (D) */
    int B, C, H, W, P, S, D;
} VilPatchEmbedFwd;
typedef struct {
    float *dimg;       /* (B, C, H, W) f32, or NULL */
    float *dw, *db;    /* (D, C, P, P), (D): accumulate */
    const void *dout;  /* (B, M, D) act */
    const void *w;     /* (D, C, P, P) */
    const float *img;  /* (B, C, H, W) f32 */
    int B, C, H, W, P, S, D;
} VilPatchEmbedBwd;
/* the token assembly: the class token inserted at position t, plus the position embedding (pos
 * NULL: none, a model with pos_embed = none; its backward then takes dpos NULL) */
typedef struct {
    float *x;              /* (B, L, D) f32 */
    const void *patches;   /* (B, M, D) act */
    const float *cls, *pos;/* (D), (L, D) or NULL */
    int B, M, D, t;
} VilTokensFwd;
typedef struct {
    void *dpatches;        /* (B, M, D) act */
    float *dcls, *dpos;    /* (D), (L, D) or NULL: accumulate */
    const float *dx;       /* (B, L, D) f32 */
    int B, M, D, t;
} VilTokensBwd;

/* norm.c: res_out = res_in + scale[b] * h (res_in NULL: res_out already holds the stream), then
 * normed = RMSNorm(res_out) * w. scale is the per-sample drop-path factor or NULL. Backward:
 * dres is the running residual-stream gradient, updated in place; dh = scale * dres (NULL: not
 * wanted). */
typedef struct {
    float *res_out;        /* (B, L, D) f32 */
    void *normed;          /* (B, L, D) act */
    float *rstd;           /* (B, L) f32 */
    const float *res_in;   /* (B, L, D) f32, or NULL */
    const void *h;         /* (B, L, D) act, or NULL */
    const float *scale;    /* (B), or NULL */
    const float *w;        /* (D) */
    int B, L, D;
} VilNormFwd;
typedef struct {
    float *dres;           /* (B, L, D) f32, in/out */
    void *dh;              /* (B, L, D) act, or NULL */
    float *dw;             /* (D): accumulates */
    const void *dnormed;   /* (B, L, D) act */
    const float *res_out, *rstd, *w, *scale; /* (B, L, D), (B, L), (D), (B) or NULL */
    int B, L, D;
} VilNormBwd;

/* linear.c: out = in @ w^T + b. Rows of in are ld_in >= C apart (a slice of a wider tensor needs
 * no copy), rows of out (and of dout) ld_out >= OC apart. */
typedef struct {
    void *out;             /* (N, ld_out) act, f32 with VIL_LINEAR_OUT_F32 */
    const void *in;        /* (N, ld_in) act */
    const void *w;         /* (OC, C) */
    const float *b;        /* (OC), or NULL */
    int N, C, OC, ld_in, ld_out, flags;
} VilLinearFwd;
typedef struct {
    void *dinp;            /* (N, ld_in) act, or NULL */
    float *dw, *db;        /* (OC, C), (OC): accumulate; either may be NULL */
    const void *dout;      /* (N, ld_out) act, f32 with VIL_LINEAR_OUT_F32 */
    const void *in;        /* (N, ld_in) act */
    const void *w;         /* (OC, C) */
    int N, C, OC, ld_in, ld_out;
    int accumulate_dinp;   /* dinp += instead of = */
    int flags;
} VilLinearBwd;

/* conv1d.c: u[j] = SiLU(causal depthwise conv1d(x)) along L, width K, with the filter w[j], b[j]
 * of direction j; direction 1 runs its filter on the reversed sequence (by indexing). Both
 * directions at once; the backward sums both directions' input gradients into dx (overwritten).
 * With `causal`, direction 0 alone (the [1] members are not read): token t sees tokens <= t, and
 * a stream cut into chunks carries the conv's context from one chunk to the next (doc/scans.md
 * "One direction"): ctx holds the K-1 inputs before the chunk's token 0, where the bidirectional
 * op (and a stream's first chunk) pads with zeros; the forward hands the chunk's own last K-1
 * inputs out in ctx_out, the next chunk's ctx. The backward takes the forward's ctx: dw sees the
 * products with it, and no gradient flows into it (truncated backpropagation through time). */
typedef struct {
    void *u[2];            /* (B, L, E) act each */
    const void *x;         /* (B, L, ldx) act */
    const float *w[2], *b[2]; /* (E, K), (E) each */
    int B, L, E, K, ldx;
    int causal;            /* 1: direction 0 alone, with ctx and ctx_out; 0: both directions */
    const void *ctx;       /* causal: (B, K-1, E) act, inputs -(K-1) .. -1, or NULL: zeros */
    void *ctx_out;         /* causal: (B, K-1, E) act, inputs L-(K-1) .. L-1 (those before token 0
                            * from ctx where L < K-1), or NULL: not wanted. Written after ctx is
                            * read, so it may be ctx itself when no backward needs ctx again */
} VilConvBidirFwd;
typedef struct {
    void *dx;              /* (B, L, ldx) act */
    float *dw[2], *db[2];  /* (E, K), (E) each: accumulate */
    const void *du[2];     /* (B, L, E) act each */
    const void *x;         /* (B, L, ldx) act */
    const float *w[2], *b[2]; /* (E, K), (E) each */
    int B, L, E, K, ldx;
    int causal;            /* as the forward's */
    const void *ctx;       /* causal: the forward's ctx (a constant), or NULL: zeros */
} VilConvBidirBwd;

/* scan.c: the bidirectional core of a mixer (doc/scans.md): per direction j (0 forward, 1
 * reversed) the recurrence on (u[j], delta[j], x_dbl[j]) plus the D skip, gated by SiLU(z) at
 * the same token, then out = (y_0 + y_1) / 2. x_dbl rows are xdbl_ld apart with k at column dt_ld
 * (dt_low's padded width) and q at dt_ld + N; z rows are ldz apart. The backward overwrites du,
 * ddelta, the k and q columns of dx_dbl and dz, and accumulates dD, dA_log (Mamba) and, unless
 * NULL, ddelta_sum[j][e] += sum over (B, L) of ddelta[j] (dt_proj's bias gradient).
 * With `causal`, direction 0 alone (the [1] members are not read; doc/scans.md "One
 * direction"): out = SiLU(z) y_0, no average, so token t sees tokens <= t; h0 and hT are then
 * (B, N, E) (the direction axis of length 1), and a stream cut into chunks runs each chunk from
 * the state the one before it handed out in hT. */
typedef struct {
    VilRecurrence rec;
    void *out;                     /* (B, L, E) act */
    const void *u[2], *delta[2];   /* (B, L, E) act each */
    const void *xdbl[2];           /* (B, L, xdbl_ld) act each */
    const void *z;                 /* (B, L, ldz) act */
    const float *D[2];             /* (E) each */
    const float *A_log[2];         /* (E, N) each: Mamba only */
    int B, L, E, N, dt_ld, xdbl_ld, ldz;
    int chunk;                     /* CUDA: tokens per chunk of the scan that runs parallel over
                                    * tokens (a multiple of 8); 0 chosen by shape, -1 none (one
                                    * thread walks all L tokens). The CPU ignores it. */
    int split;                     /* CUDA: threads per channel, each holding N / split states: 0
                                    * chosen by shape, 1 or 4. The CPU ignores it. */
    float *states;                 /* CUDA, training: where the forward keeps the states at its
                                    * chunk boundaries for the backward (scan_states_bytes of
                                    * them), or NULL */
    const float *h0;               /* (B, 2, N, E) f32: the state each direction starts from
                                    * (doc/scans.md "Initial state"), or NULL: zero */
    float *hT;                     /* (B, 2, N, E) f32: each direction's state after its last
                                    * step, or NULL: not wanted. Not overlapping h0 (CUDA reads
                                    * h0 and writes hT from different blocks) */
    int causal;                    /* 1: direction 0 alone, h0 and hT (B, N, E); 0: both */
} VilScanFwd;
/* scan.c: one direction's states along the sequence for `vil states`, off the training and
 * inference paths: the recurrence of VilScanFwd's direction `reverse` from a zero state, each
 * token's squared state norm hsq[b][t] = sum over channels and states of h^2 after the step that
 * reads token t, and the final state hT (b, n, e) at b N E + n E + e (NULL: not wanted). Writes
 * no output. */
typedef struct {
    VilRecurrence rec;
    float *hsq;                    /* (B, L) f32 */
    float *hT;                     /* (B, N, E) f32, or NULL */
    const void *u, *delta;         /* (B, L, E) act */
    const void *xdbl;              /* (B, L, xdbl_ld) act */
    const float *D;                /* (E) */
    const float *A_log;            /* (E, N): Mamba only */
    int B, L, E, N, dt_ld, xdbl_ld, reverse;
} VilScanStates;
typedef struct {
    VilRecurrence rec;
    void *du[2], *ddelta[2];       /* (B, L, E) act each; ddelta[j] may be delta[j] (written over it) */
    void *dxdbl[2];                /* (B, L, xdbl_ld) act each: the k and q columns */
    void *dz;                      /* (B, L, ldz) act */
    float *dD[2], *dA_log[2];      /* (E), (E, N): accumulate */
    float *ddelta_sum[2];          /* (E) each, or NULL: accumulate */
    const void *dout;              /* (B, L, E) act */
    const void *u[2], *delta[2], *xdbl[2], *z;
    const float *D[2], *A_log[2];
    int B, L, E, N, dt_ld, xdbl_ld, ldz;
    int chunk;                     /* as VilScanFwd's */
    const float *states;           /* the forward's kept states (its VilScanFwd.states, same
                                    * shapes and chunk), or NULL: the backward makes them again */
    const float *h0;               /* the forward's initial state (VilScanFwd.h0), or NULL: zero.
                                    * A constant: no gradient flows into it. */
    void *out;                     /* (B, L, ldz) act (rows as dz's), or NULL: the forward's out
                                    * made again from the states the backward recomputes anyway,
                                    * so that the caller need not keep it */
    int causal;                    /* as the forward's */
} VilScanBwd;

/* loss.c: softmax cross-entropy against soft targets; dlogits = (probs - targets) / denom, where
 * denom is the number of samples the minimized loss is the mean over: B, or the global batch
 * (B x micro-batches x ranks) when gradients are summed over micro-batches and ranks */
typedef struct {
    float *loss, *probs;           /* (B), (B, C) */
    const float *logits, *targets; /* (B, C) each */
    int B, C;
} VilXentFwd;
typedef struct {
    float *dlogits;                /* (B, C) */
    const float *probs, *targets;
    int B, C;
    long denom;
} VilXentBwd;

/* One optimizer update's hyperparameters: the training config gives them (train/train_config.h
 * vil_train_config_hyper), the step passes them down by pointer, and the optimizers' ops below
 * read them where they are; each optimizer reads the ones it has. l2 and trust_clip are an
 * optimizer's own variant: its entry of vil/optim.c sets them. */
typedef struct {
    float lr;                /* this step's */
    float beta1, beta2, eps; /* AdamW, Adam, Lamb */
    float wd;                /* weight decay, on the elements whose decay flag is set */
    float momentum;          /* SGD */
    int nesterov;            /* SGD: Nesterov momentum */
    int l2;                  /* Adam: 1 for torch.optim.Adam's L2 decay; 0: AdamW's decoupled one */
    int trust_clip;          /* Lamb: 1 for the trust ratio clipped at 1 (lambc) */
} VilOptimHyper;

/* optimizer.c: one AdamW step on n parameters (f32 master p; the working copy refreshed when
 * work is not NULL); decoupled weight decay on the elements whose decay[i] is nonzero (decay
 * NULL: on all). step is 1 for the first update. With h->l2, torch.optim.Adam instead: the weight
 * decay added to the gradient before the moments (g + wd p), none in the update. */
typedef struct {
    float *p;
    void *work;                    /* the backend's working copy, or NULL */
    const float *g;
    float *m, *v;
    const unsigned char *decay;    /* (n) backend memory, or NULL */
    size_t n;
    const VilOptimHyper *h;        /* host memory: lr, beta1, beta2, eps, wd, l2 */
    int step;
} VilAdamW;
/* optimizer.c: one step of torch.optim.SGD (dampening 0) on n parameters, with L2 weight decay
 * (coupled, as timm applies it) on the elements whose decay[i] is nonzero:
 *   d = g + wd p;  buf = momentum buf + d;  p -= lr (nesterov ? d + momentum buf : buf)
 * (buf starts at zero, so the first step's buf is d, as torch's clone) */
typedef struct {
    float *p;
    void *work;                    /* the backend's working copy, or NULL */
    const float *g;
    float *buf;                    /* the momentum buffer */
    const unsigned char *decay;    /* (n) backend memory, or NULL */
    size_t n;
    const VilOptimHyper *h;        /* host memory: lr, momentum, wd, nesterov */
} VilSgd;
/* a parameter tensor's elements in the contiguous buffers: [offset, offset + n) */
typedef struct {
    size_t offset, n;
} VilSpan;
/* optimizer.c: one step of timm's Lamb (bias correction and grad averaging on, weight decay
 * added to the update, no global clipping: clip_grad does that) on the tensors of spans, each:
 *   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
 *   u = (m / bc1) / (sqrt(v) / sqrt(bc2) + eps) + wd p          (bc = 1 - beta^step)
 *   r = ||p|| / ||u|| (1 when either is 0; min(r, 1) with h->trust_clip) where the tensor decays
 *       (decay[offset] nonzero) and wd > 0, else 1
 *   p -= lr r u
 * The tensors' norms are summed in double. */
typedef struct {
    float *p;
    void *work;                    /* the backend's working copy, or NULL */
    const float *g;
    float *m, *v;
    const unsigned char *decay;    /* (n) backend memory, or NULL (all decay) */
    const VilSpan *spans;          /* (n_spans) backend memory; NULL: one tensor [0, n) */
    int n_spans;
    size_t n;
    const VilOptimHyper *h;        /* host memory: lr, beta1, beta2, eps, wd, trust_clip */
    int step;
} VilLamb;
/* clip_grad_norm_: *norm (a backend float) = ||g||_2, then g scaled to max_norm when above */
typedef struct {
    float *g;
    size_t n;
    float max_norm;
    float *norm;
} VilGradClip;
/* the exponential moving average of the weights: ema = decay * ema + (1 - decay) * p */
typedef struct {
    float *ema;
    const float *p;
    size_t n;
    float decay;
} VilEma;

/* init_state.c: the initial states of one layer's scan for the interventions of doc/recipe.md
 * ("Initial states"), h0 (B, S) f32 with S = 2 N E (VilScanFwd.h0's (B, 2, N, E) per sample;
 * N E for the causal op's (B, N, E)):
 *   sample b all 0 where its draw u < drop; else
 *   prev != NULL (state passing): h0[b] = prev[b];
 *   else (noise): h0[b][i] = mean[k] + sd(k) g with k = i / group (group 0 or 1: k = i),
 *   sd(k) = sqrt(var[k]) (var NULL: sigma; mean_only: 0, no draw), mean NULL is 0; g a standard
 *   normal.
 * The draws are number i (u: VIL_STATE_DROP_DRAW) of the stream vil_state_key(seed, first + b)
 * (init_state.h): a sample's numbers depend on its global index, not on the batch's split. */
typedef struct {
    float *h0;                     /* (B, S) */
    const float *prev;             /* (B, S), or NULL */
    const float *mean, *var;       /* (S / group) each, or NULL */
    float sigma, drop;
    int group;                     /* consecutive elements of a sample sharing one mean and var */
    int mean_only;                 /* with mean: h0 = mean, no noise */
    uint64_t seed;
    long first;
    int B, S;
} VilStateInit;
/* init_state.c: the batch's moments of the final states hT (B, S): sum[i] = sum_b hT[b][i],
 * sq[i] = sum_b hT[b][i]^2 (overwrite; summed in sample order) */
typedef struct {
    float *sum, *sq;               /* (S) each */
    const float *hT;               /* (B, S) */
    int B, S;
} VilStateMoments;
/* init_state.c: the running fit of fitted noise from moments of count samples: with bm = sum /
 * count and bv = max(sq / count - bm^2, 0), mean = keep mean + (1 - keep) bm and var = keep var
 * + (1 - keep) bv, elementwise over n (keep 0: the batch's moments replace them). group > 1:
 * each mean[k] and var[k] (n / group of them) fits the group consecutive entries k group ..
 * (k + 1) group - 1 of sum and sq as one sample of count x group values, its sums in double. */
typedef struct {
    float *mean, *var;             /* (n / group) each */
    const float *sum, *sq;         /* (n) each */
    size_t n, group;               /* group 0 or 1: elementwise; else a divisor of n */
    float count, keep;
} VilStateFit;

/* dist.c / cuda/backend_cuda.cu: buf (n floats, backend memory) summed over the ranks of dist
 * in place (MPI on the CPU, NCCL on CUDA after dist_join); every rank calls it in the same order.
 * async 0: done before the ops queued after it run. async 1: it runs beside the ops queued after
 * it (CUDA: NCCL on a side stream, once the ops queued before it are done; CPU: MPI_Iallreduce),
 * and buf may be touched again only after grad_allreduce_wait. */
struct VilDist;
typedef struct {
    float *buf;
    size_t n;
    int async;
    const struct VilDist *dist;
} VilAllReduce;
/* the ops queued after it wait for every async grad_allreduce before it */
typedef struct {
    const struct VilDist *dist;
} VilAllReduceWait;

/* Every op: name, argument struct, the line of the profiler's report it adds to. */
#define VIL_OPS(X)                                                      \
    X(patch_embed_forward, VilPatchEmbedFwd, "patch_embed fwd")         \
    X(patch_embed_backward, VilPatchEmbedBwd, "patch_embed bwd")        \
    X(tokens_forward, VilTokensFwd, "tokens fwd")                       \
    X(tokens_backward, VilTokensBwd, "tokens bwd")                      \
    X(add_rmsnorm_forward, VilNormFwd, "add+rmsnorm fwd")               \
    X(add_rmsnorm_backward, VilNormBwd, "add+rmsnorm bwd")              \
    X(linear_forward, VilLinearFwd, "linear fwd")                       \
    X(linear_backward, VilLinearBwd, "linear bwd")                      \
    X(conv1d_silu_bidir_forward, VilConvBidirFwd, "conv1d+silu fwd")    \
    X(conv1d_silu_bidir_backward, VilConvBidirBwd, "conv1d+silu bwd")   \
    X(scan_bidir_forward, VilScanFwd, "scan (bidir) fwd")               \
    X(scan_bidir_backward, VilScanBwd, "scan (bidir) bwd")              \
    X(scan_dir_states, VilScanStates, "scan states")                    \
    X(softmax_xent_forward, VilXentFwd, "loss fwd")                     \
    X(softmax_xent_backward, VilXentBwd, "loss bwd")                    \
    X(adamw_update, VilAdamW, "adamw")                                  \
    X(sgd_update, VilSgd, "sgd")                                        \
    X(lamb_update, VilLamb, "lamb")                                     \
    X(grad_clip, VilGradClip, "grad clip")                              \
    X(ema_update, VilEma, "ema")                                        \
    X(state_init, VilStateInit, "init state")                           \
    X(state_moments, VilStateMoments, "state moments")                  \
    X(state_fit, VilStateFit, "state fit")                              \
    X(grad_allreduce, VilAllReduce, "allreduce")                        \
    X(grad_allreduce_wait, VilAllReduceWait, "allreduce wait")

typedef struct VilBackend VilBackend;
struct VilBackend {
    const char *name;
    size_t act_bytes;  /* bytes per act element */
    size_t work_bytes; /* bytes per element of the working parameter copy the ops read */
    void *ctx;         /* the device's state (CUDA: cuda_common.cuh's CuCtx); NULL on the CPU */
    int device;        /* the device index this backend runs on */

    /* Device memory of bytes (0: a valid pointer to free). NULL, after a vil_error that says the
     * size (and on CUDA the device's free memory), when the device cannot give it: every caller
     * checks and turns NULL into its own error return; nothing exits. */
    void *(*alloc)(const VilBackend *be, size_t bytes);
    void (*free)(const VilBackend *be, void *p);
    void (*zero)(const VilBackend *be, void *p, size_t bytes);
    void (*to_device)(const VilBackend *be, void *dst, const void *src, size_t bytes);
    void (*to_host)(const VilBackend *be, void *dst, const void *src, size_t bytes);
    void (*sync)(const VilBackend *be);
    /* peak bytes of device memory held since the start or the last peak_reset (the CPU
     * backend: the process's peak RSS) */
    size_t (*peak_bytes)(const VilBackend *be);
    /* start a new peak from what is held now */
    void (*peak_reset)(const VilBackend *be);
    /* device-side timers for the per-op profile (backend_prof.c), NULL where ops run in order on
     * the host (the CPU): a mark queued on the ops' stream, and the seconds between two marks
     * (waiting for the second) */
    void *(*mark_new)(const VilBackend *be);
    void (*mark_record)(const VilBackend *be, void *mark);
    double (*mark_elapsed)(const VilBackend *be, void *a, void *b);
    /* bytes the device could still allocate (the CPU: the system's MemAvailable); 0: unknown */
    size_t (*mem_free)(const VilBackend *be);
    /* act buffer <-> host float32 (for tests and for reading logits) */
    void (*act_to_host_f32)(const VilBackend *be, float *dst, const void *src, size_t n);
    /* working parameter copy from the float32 master (NULL: the ops read the master) */
    void (*params_to_work)(const VilBackend *be, void *work, const float *master, size_t n);
    /* Host memory the device copies from without the host waiting (CUDA: pinned; CPU: 64-byte
     * aligned malloc). NULL when it cannot be had (the CPU says so with a vil_error; the caller
     * reports what it was for). */
    void *(*host_alloc)(const VilBackend *be, size_t bytes);
    void (*host_free)(const VilBackend *be, void *p);
    /* The input feed's copies (data/feed.h): two slots of input buffers, filled on a copy stream
     * while the compute stream works on the other slot.
     *   feed_upload(slot, dst, src, n): copy n bytes from host_alloc'd src to dst once the compute
     *     queued before the last feed_release(slot) is done; returns at once.
     *   feed_acquire(slot): compute queued from now on waits for slot's uploads.
     *   feed_release(slot): compute queued so far is the last to read slot's buffers.
     *   feed_wait(slot): the host waits for slot's uploads (their src may then be reused).
     * The CPU backend copies in feed_upload; the other three do nothing there. */
    void (*feed_upload)(const VilBackend *be, int slot, void *dst, const void *src, size_t bytes);
    void (*feed_acquire)(const VilBackend *be, int slot);
    void (*feed_release)(const VilBackend *be, int slot);
    void (*feed_wait)(const VilBackend *be, int slot);
    /* What the device is, e.g. "NVIDIA H100 80GB HBM3" or the CPU's model name (the run's
     * record); writes at most n bytes to buf and returns it. */
    const char *(*device_name)(const VilBackend *be, char *buf, size_t n);
    /* Readies grad_allreduce for the group d (every rank calls it once, together): nothing on
     * the CPU (MPI), the NCCL communicator on CUDA. 0, or -1 with a vil_error message. */
    int (*dist_join)(const VilBackend *be, const struct VilDist *d);
    /* CUDA graphs (NULL where there are none: the CPU, the profiling wrapper). The ops queued
     * between graph_begin and graph_end are recorded, not run; graph_end returns the graph (NULL
     * when the recording failed: an op needed new scratch memory, which the caller then has;
     * run the ops again, uncaptured). graph_launch replays it, one launch for all of its ops on
     * the same buffers, and returns 0; or -1 when scratch memory it recorded has moved since
     * (capture it again). graph_begin returns -1 where capture cannot be used (VIL_CUDA_SYNC). */
    int (*graph_begin)(const VilBackend *be);
    void *(*graph_end)(const VilBackend *be);
    int (*graph_launch)(const VilBackend *be, void *graph);
    void (*graph_free)(const VilBackend *be, void *graph);
    /* Bytes of the states the scan's forward keeps at its chunk boundaries for the backward at
     * a's shapes (VilScanFwd.states; the backward then skips a pass that makes them again): 0,
     * or a NULL member, where it keeps none (the CPU; shapes the CUDA scan runs sequentially,
     * or chunks differently in its forward and backward). */
    size_t (*scan_states_bytes)(const VilBackend *be, const VilScanFwd *a);
    /* bytes from src to dst, both backend memory, queued on the ops' stream (libvil's device
     * forward copies its logits out with it) */
    void (*copy)(const VilBackend *be, void *dst, const void *src, size_t bytes);
    /* A caller's stream (CUDA: a cudaStream_t; NULL the legacy default stream) joined to the ops'
     * own, without a device-wide synchronisation (libvil's device entry points, include/vil.h):
     * stream_wait: the ops queued from now on wait for the work queued on stream so far;
     * stream_signal: the work queued on stream from now on waits for the ops queued so far.
     * Nothing on the CPU, where ops run in order on the calling thread. */
    void (*stream_wait)(const VilBackend *be, void *stream);
    void (*stream_signal)(const VilBackend *be, void *stream);

#define VIL_OP_MEMBER(op, Args, label) void (*op)(const VilBackend *be, const Args *a);
    VIL_OPS(VIL_OP_MEMBER)
#undef VIL_OP_MEMBER
};

extern const VilBackend vil_backend_cpu;

/* ---- the devices (vil/backend_load.c): "cpu" is built in; "cuda" is the module libvil-cuda.so
 * (vil/backend_module.h), dlopen()ed on its first need and kept. Where the file is looked for:
 *   1. $VIL_BACKEND_PATH: the module file, or a folder holding libvil-cuda.so (only there);
 *   2. the folder D of the binary holding this code (the executable, or libvil.so), D/../lib
 *      (an installed tree: bin/ and lib/), the build's own lib folder (the Makefile compiles its
 *      absolute $(BUILD)/lib in as VIL_MODULE_DIR), then D/../build/lib (bin/vil of a moved
 *      checkout).
 * A build without CUDA (make CUDA=0) looks only at $VIL_BACKEND_PATH. "auto" loads nothing
 * where no NVIDIA driver is seen (vil_gpu_driver_present): a machine without a GPU never maps
 * the CUDA libraries. ---- */

/* 1 for the device names a command line may give: cpu, cuda, auto */
int vil_device_name_ok(const char *name);
/* "cpu" or "cuda" (or "auto": cuda when a GPU can run it, else the CPU) -> backend on device 0;
 * NULL with an error that says why cuda cannot run (no CUDA in this build, the module file not
 * found and where it was looked for, dlopen's text, no NVIDIA driver, no usable GPU) */
const VilBackend *vil_backend_get(const char *name);
/* A backend of its own for device `index` (CUDA: a new context with its own stream, handles,
 * scratch and allocation count; one per GPU of a process, or several on one GPU; "auto": that,
 * or the CPU as vil_backend_get decides). NULL with an error reported. Free with
 * vil_backend_close after everything allocated on it (the CPU's close does nothing). A process
 * of several (mpirun) opens its local_rank's GPU with it directly: vil_backend_get("cuda") would
 * also create device 0's shared context, on GPU 0, in every process. */
const VilBackend *vil_backend_open(const char *name, int index);
void vil_backend_close(const VilBackend *be);
/* 1 when a CUDA device can be used (loads the module), 0 otherwise with the reason in why */
int vil_cuda_available(char *why, size_t n);
/* 1 when the CUDA module was built with NCCL (multi-GPU training; loads the module), 0
 * otherwise with the reason in why */
int vil_nccl_available(char *why, size_t n);
/* What this build knows of CUDA without loading anything: "CUDA 13.0, archs sm_90, NCCL yes"
 * (the Makefile's facts), or "no (CPU only)" */
const char *vil_cuda_build_info(void);
/* The module's state for `vil version`, never loading it: "PATH, not loaded", "not found
 * (looked in ...)", or, once loaded, "PATH: runtime 13.0, driver 13.0, NCCL 2.28.9". */
const char *vil_cuda_module_info(char *buf, size_t n);
/* 1 once the module is mapped into this process */
int vil_cuda_module_loaded(void);
/* 1 when this machine shows an NVIDIA driver (/proc/driver/nvidia/gpus/ not empty, /dev/nvidiactl
 * or /dev/nvidia0, WSL's /dev/dxg) and $CUDA_VISIBLE_DEVICES does not hide every GPU: what
 * "auto" checks before it loads the module */
int vil_gpu_driver_present(void);

#ifdef __cplusplus
}
#endif
#endif
