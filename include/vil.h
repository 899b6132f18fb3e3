/* vil.h: libvil, the public C API of vil (Vision Longhorn and Vision Mamba in C and CUDA).
 *
 * What a C or C++ program, or a binding in another language, needs from vil's four jobs: a
 * context on a device, a model loaded from any file vil reads, the model's evaluation transform,
 * the forward pass (host or device memory), the parameters by name, top-k, the states along the
 * sequence, and the bidirectional scans themselves. Training, compare, avg and convert stay
 * behind vil's internal headers for now (bin/vil).
 *
 *   cc app.c $(pkg-config --cflags --libs vil)            (examples/classify.c: a whole program)
 *
 * Errors. Every function that can fail returns an int: VIL_OK (0), VIL_ERR_ARG (-2: the caller's
 * misuse: a NULL handle, a bad size, a name that does not exist) or VIL_ERR (-1: the
 * environment: a file that cannot be read or is not a model, a device that is absent, memory that
 * cannot be had), and leaves a message for the calling thread that vil_last_error() returns
 * until that thread's next failing call. Functions returning a pointer return NULL on failure,
 * with the same message. No input a caller can pass ends the process. What still aborts: a
 * broken internal invariant (vil has a bug); a CUDA error inside an op that already started on
 * the device (an illegal address, a lost device: the CUDA context is unusable afterwards and
 * cannot be recovered); host memory exhausted by small fixed-size bookkeeping (structs, names,
 * tables); and on a CPU context, a few ops' per-call scratch (the patch embedding's im2col, the
 * scan's, conv1d's and the norm's), sized by the batch inside ops that cannot return an error,
 * when the machine runs out of memory mid-forward although the batch's activations were had.
 * DEVELOPERS.md "What still aborts" lists each site. vil never writes to stdout; on stderr it prints
 * only warnings, as "vil: warning: ..." lines (a checkpoint that lacks something it should hold).
 *
 * Threads. Handles are not locked: a context and the models on it are used by one thread at a
 * time (one context per thread, or your own lock). Different contexts may run at the same time
 * in different threads, on the CPU or on the GPU, and give the results each gives alone
 * (tests/test_api.c runs two). The CPU thread count is per context: each call on a CPU context
 * sets OpenMP's count for the calling thread (an OpenMP per-thread setting) to the context's
 * `threads`; vil runs OpenBLAS single-threaded inside those threads, so OpenBLAS's own
 * (process-wide) count does not matter. vil_last_error is per thread.
 *
 * Devices. "cpu", "cuda" (with a device index) or "auto" (cuda when a GPU is there, else cpu). The
 * CUDA backend is a module, libvil-cuda.so, opened the first time a context asks for CUDA: from
 * $VIL_BACKEND_PATH (the file or its folder), else beside libvil.so. A program that never asks
 * for CUDA loads no CUDA library; "auto" looks for the NVIDIA driver before it loads anything.
 *
 * Memory. "host" pointers are ordinary memory; "device" pointers are CUDA device memory of the
 * context's GPU (cudaMalloc, or a tensor's data_ptr). Device variants enqueue their work on the
 * caller's CUDA stream (a cudaStream_t passed as void *; NULL: the legacy default stream): vil's
 * own stream waits for the work queued on it before, and it waits for vil's work, through events,
 * with no device-wide synchronisation; the call returns before the work is done, and the
 * caller's buffers must stay alive until the stream has reached that point. On a CPU context the
 * device variants take host pointers and ignore the stream. */
#ifndef VIL_H
#define VIL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define VIL_API
#elif defined(VIL_BUILDING_LIBRARY)
#define VIL_API __attribute__((visibility("default")))
#else
#define VIL_API
#endif

#define VIL_VERSION_MAJOR 0
#define VIL_VERSION_MINOR 9
#define VIL_VERSION_PATCH 0
/* MAJOR * 10000 + MINOR * 100 + PATCH, for #if */
#define VIL_VERSION_NUMBER (VIL_VERSION_MAJOR * 10000 + VIL_VERSION_MINOR * 100 + VIL_VERSION_PATCH)

enum { VIL_OK = 0, VIL_ERR = -1, VIL_ERR_ARG = -2 };

/* ---- the library ---- */

/* VIL_VERSION_NUMBER of the library that runs (a program may run against a newer libvil.so) */
VIL_API int vil_version_number(void);
/* "vil 0.9.0 (git <commit>)" */
VIL_API const char *vil_version_text(void);
/* The calling thread's last error message ("" when none). The text stays valid until this
 * thread's next failing call into vil. */
VIL_API const char *vil_last_error(void);
/* ---- contexts ---- */

typedef struct vil_ctx vil_ctx;

/* A context on `device`: "cpu", "cuda" or "auto"; `index` the GPU (0 for the first; ignored on
 * the CPU); `threads` the CPU threads of this context's work (0: $OMP_NUM_THREADS when set, else
 * the CPUs this process may use). A CUDA context has its own stream, cuBLASLt and cuDNN handles
 * and scratch memory. VIL_ERR when CUDA is asked for and cannot be had (the message says why:
 * no driver, no GPU of that index, the module missing or its libraries), VIL_ERR_ARG for a
 * device name vil does not know or a negative count. */
VIL_API int vil_ctx_new(const char *device, int index, int threads, vil_ctx **out);
/* Frees the context; every model on it must be freed first (VIL_ERR_ARG otherwise, and nothing
 * is freed). NULL: nothing. */
VIL_API int vil_ctx_free(vil_ctx *ctx);
/* "cpu" or "cuda" */
VIL_API const char *vil_ctx_device(const vil_ctx *ctx);
/* What the device is: the GPU's name ("NVIDIA H200") or the CPU's model name. */
VIL_API const char *vil_ctx_device_name(const vil_ctx *ctx);
/* Waits until the context's queued work is done (its own stream). */
VIL_API int vil_ctx_sync(vil_ctx *ctx);

/* ---- models ---- */

typedef struct vil_classifier vil_classifier;

typedef struct {
    int img_size; /* the resolution to run at; 0: the file's own (224 for a file that does not
                   * say). Another size than the file's interpolates the position embedding. */
    int ema;      /* 1: a .pth training checkpoint's model_ema, or a run folder's
                   * ema.safetensors, instead of its weights */
} vil_load_opts;

/* Loads a model: a vil checkpoint (.safetensors), a safetensors file or PyTorch .pth holding
 * only a state dict (the architecture inferred from the shapes), a published ViM .pth, or a run
 * folder of `vil train` (its best.safetensors, else last.safetensors). opts may be NULL. The
 * weights go to the context's device. VIL_ERR for a file that cannot be read or is not such a
 * model, or when the model does not fit the device's memory; VIL_ERR_ARG for a size out of
 * range. */
VIL_API int vil_classifier_load(vil_ctx *ctx, const char *path, const vil_load_opts *opts,
                                vil_classifier **out);
/* NULL: nothing. */
VIL_API void vil_classifier_free(vil_classifier *m);

typedef struct {
    const char *family;     /* "vil" (Longhorn recurrence) or "vim" (Mamba-1) */
    const char *recurrence; /* "longhorn" or "mamba" */
    const char *name;       /* the config's name ("vil_tiny"), or "" */
    long long n_params;     /* parameters (6,850,000-odd for ViL-Tiny) */
    int n_classes;
    int img_size;           /* the resolution it runs at (vil_load_opts.img_size or the file's) */
    int trained_img_size;   /* the resolution of the file's position embedding (its training) */
    int in_chans;           /* 3 (RGB) or 1 (gray) */
    int patch_size, stride, embed_dim, depth, d_state, d_inner;
    int seq_len;            /* tokens: patches + the class token */
    int cls_pos;            /* the class token's position */
    float crop_pct;         /* the evaluation transform: shorter side to img_size / crop_pct */
    const char *crop_from;  /* where crop_pct comes from: "the checkpoint", "the .pth's args", or
                             * "the default: the file does not say" */
    float mean[3], std[3];  /* then (x / 255 - mean) / std per channel (in_chans of them) */
    long long step;         /* the training step of the file (0: unknown) */
    int has_class_names;    /* 1 when vil_classifier_class_name gives the file's names */
} vil_classifier_info;

/* The model's facts. The strings live as long as the model. */
VIL_API int vil_classifier_get_info(const vil_classifier *m, vil_classifier_info *info);
/* Class i's name from the file ("" when the file has none), or NULL for i out of range. */
VIL_API const char *vil_classifier_class_name(const vil_classifier *m, int i);

/* ---- the evaluation transform (vil classify's and vil eval's: timm's, PIL-exact) ---- */

/* Floats of one transformed image: in_chans * img_size * img_size */
VIL_API size_t vil_classifier_input_size(const vil_classifier *m);
/* The image file at path (JPEG, PNG, BMP, GIF, PNM, ...: the format is read from the bytes)
 * through the model's evaluation transform into out (vil_classifier_input_size floats, host,
 * (C, H, W)): the shorter side resized to img_size / crop_pct (bicubic), a centre crop,
 * normalisation. crop_pct 0: the model's (the checkpoint's, else 0.875); else in 0.001..1. A
 * colour image for a gray model is converted as PIL's L, a gray one for an RGB model repeated. */
VIL_API int vil_classifier_transform_file(const vil_classifier *m, const char *path, float crop_pct,
                                          float *out);
/* The same for pixels in memory: h rows of w pixels of `channels` (1: gray, 3: RGB) interleaved
 * bytes, rows `stride` bytes apart (0: w * channels). */
VIL_API int vil_classifier_transform_pixels(const vil_classifier *m, const unsigned char *pixels, int w,
                                            int h, int channels, size_t stride, float crop_pct, float *out);

/* The same transform without a model (a binding whose model lives elsewhere): img_size,
 * channels (1 or 3), crop_pct (0.001..1), mean and std (channels values) say it all; out holds
 * channels * img_size * img_size floats. vil_classifier_get_transform gives a model's. */
typedef struct {
    int img_size, channels;
    float crop_pct;
    float mean[3], std[3];
} vil_transform;
VIL_API int vil_classifier_get_transform(const vil_classifier *m, vil_transform *t);
VIL_API int vil_transform_file(const vil_transform *t, const char *path, float *out);
VIL_API int vil_transform_pixels(const vil_transform *t, const unsigned char *pixels, int w, int h, int channels,
                                 size_t stride, float *out);

/* ---- forward ---- */

/* Logits (B, n_classes) of B transformed images (B, C, H, W), host float32 in and out. The first
 * call with a batch size allocates its activations (later calls with that size reuse them); B is
 * 1..4096, bounded by the device's memory (VIL_ERR with the numbers when it does not fit). */
VIL_API int vil_classifier_forward(vil_classifier *m, const float *images, int B, float *logits);
/* The same with device pointers on a CUDA context (float32, contiguous), enqueued on stream
 * (see Memory above). images is read on the stream; logits written on it. On a CPU context:
 * vil_classifier_forward. */
VIL_API int vil_classifier_forward_device(vil_classifier *m, const float *images, int B, float *logits,
                                          void *stream);

/* ---- parameters ---- */

typedef struct {
    const char *name;   /* checkpoint key: "layers.3.mixer.x_proj.weight" (doc/models.md) */
    int ndim;
    int64_t shape[4];
    size_t numel;
} vil_param_info;

/* The parameter tensors, in checkpoint order */
VIL_API int vil_classifier_param_count(const vil_classifier *m);
VIL_API int vil_classifier_param_get_info(const vil_classifier *m, int i, vil_param_info *info);
/* Tensor `name` (numel floats, row-major as its shape) into dst / from src. host 1: ordinary
 * memory; host 0: device memory of a CUDA context (copied through the host, synchronously, on
 * vil's own stream, which is ordered with no stream of the caller's: the caller's work writing
 * src, or still reading dst, must be complete before the call, e.g. cudaStreamSynchronize; a
 * cudaMemcpy from pageable memory returns before its data have arrived). A write is what the
 * next forward reads (the GPU's bf16 working copy is made from it). VIL_ERR_ARG for a name the
 * model does not have or n != numel. */
VIL_API int vil_classifier_param_read(const vil_classifier *m, const char *name, float *dst, size_t n,
                                      int host);
VIL_API int vil_classifier_param_write(vil_classifier *m, const char *name, const float *src, size_t n,
                                       int host);
/* Writes the model as a checkpoint vil reads (vil eval, vil classify, vil_classifier_load): the
 * format by the extension, .safetensors (vil's, with the config, image size, class names and the
 * evaluation transform in its metadata) or .pth ({'model': state dict, 'vil_metadata': ...}).
 * Written atomically (a temporary renamed into place); VIL_ERR_ARG for another extension. */
VIL_API int vil_classifier_save(const vil_classifier *m, const char *path);

/* ---- results ---- */

/* The k largest of C logits: idx[j] their classes and prob[j] their softmax probabilities
 * (over all C, in double), largest first; ties to the lower class. k is clamped to C. */
VIL_API int vil_topk(const float *logits, int C, int k, int *idx, double *prob);

/* ---- the states along the sequence (vil states) ---- */

/* The model's streams of recurrent state: one per layer and direction (stream 2 i + j: layer i,
 * direction j, 0 forward and 1 backward), each of *L steps over a state of *state floats per
 * image (d_state x d_inner). Returns the number of streams. */
VIL_API int vil_classifier_stream_count(const vil_classifier *m, int *L, int *state);
/* Runs the forward of B transformed host images (as vil_classifier_forward, zero initial states)
 * keeping what the states need; then vil_classifier_states_get reads them. Its activations are
 * those of training (about 3x an inference forward's memory). */
VIL_API int vil_classifier_states_run(vil_classifier *m, const float *images, int B);
/* After vil_classifier_states_run: stream s's squared state norm after each step, hsq (B, L)
 * host floats in the stream's own order (step t reads token t forward, L - 1 - t backward), and
 * its final state hT (B, state) host floats (NULL: not wanted). */
VIL_API int vil_classifier_states_get(vil_classifier *m, int stream, float *hsq, float *hT);

/* ---- the scans ----
 * The bidirectional core of a ViL / ViM mixer (doc/scans.md), as the model runs it: for each
 * direction j (0 forward over the tokens, 1 over them reversed; direction 1's tensors are indexed
 * in token order, not reversed), the recurrence on (u[j], delta[j], x_dbl[j]) plus the D skip,
 * gated by SiLU(z) at the same token, then out = (y_0 + y_1) / 2.
 * Layouts (row-major, contiguous rows as given):
 *   u[j], delta[j]: (B, L, E);  out: (B, L, E)
 *   xdbl[j]: (B, L, xdbl_ld): k (Longhorn's key, Mamba's B) at columns [dt_ld, dt_ld + N), q
 *     (query, Mamba's C) at [dt_ld + N, dt_ld + 2 N); other columns are not read. The model's
 *     x_proj output, with dt_ld its padded dt width; a caller with separate k and q tensors
 *     packs them with dt_ld = 0, xdbl_ld = 2 N.
 *   z: (B, L, ldz), the gate's first E columns read;  D[j]: (E);  A_log[j]: (E, N), Mamba only
 *   h0: (B, 2, N, E) the states the directions start from (NULL: zero); hT: (B, 2, N, E) their
 *     states after the last step (NULL: not wanted)
 * dtypes: on a CPU context every tensor is float32. On a CUDA context u, delta, xdbl, z, out and
 * their gradients are bfloat16 (the model's activation type) and D, A_log, h0, hT, dD, dA_log,
 * ddelta_sum float32.
 * The backward overwrites du, ddelta, the k and q columns of dxdbl (the other columns are left
 * as they are) and dz (its first E columns), and ACCUMULATES (+=) into dD, dA_log and
 * ddelta_sum (sum over B and L of ddelta: dt_proj's bias gradient; NULL: not wanted). It makes
 * the forward's states again; no gradient flows into h0. ddelta[j] may be delta[j] (written over).
 * E and N: N is 4, 8 or 16 on CUDA (1..64 on the CPU); L >= 1; B * L * E below 2^31. */
typedef enum { VIL_SCAN_LONGHORN = 0, VIL_SCAN_MAMBA = 1 } vil_scan_recurrence;

typedef struct {
    vil_scan_recurrence rec;
    int B, L, E, N, dt_ld, xdbl_ld, ldz;
    const void *u[2], *delta[2], *xdbl[2], *z;
    const float *D[2], *A_log[2];
    const float *h0;  /* or NULL */
    void *out;
    float *hT;        /* or NULL */
} vil_scan_fwd;

typedef struct {
    vil_scan_recurrence rec;
    int B, L, E, N, dt_ld, xdbl_ld, ldz;
    const void *u[2], *delta[2], *xdbl[2], *z;
    const float *D[2], *A_log[2];
    const float *h0;  /* the forward's, or NULL */
    const void *dout; /* (B, L, E) */
    void *du[2], *ddelta[2], *dxdbl[2], *dz;
    float *dD[2], *dA_log[2]; /* accumulate; dA_log NULL for Longhorn */
    float *ddelta_sum[2];     /* accumulate, or NULL */
} vil_scan_bwd;

/* On a CPU context: host pointers, stream ignored, done on return. On a CUDA context: device
 * pointers, enqueued on stream. VIL_ERR_ARG for shapes the scan does not take. */
VIL_API int vil_scan_forward(vil_ctx *ctx, const vil_scan_fwd *a, void *stream);
VIL_API int vil_scan_backward(vil_ctx *ctx, const vil_scan_bwd *a, void *stream);

/* ---- the convolution before the scans ----
 * The mixer's causal depthwise conv1d of width K and SiLU for both directions (doc/models.md "The
 * mixer"): u[j][b, t, e] = SiLU(b_j[e] + sum_k w_j[e, k] x[b, t - K + 1 + k, e]) for direction 0
 * and the same filter over the reversed tokens for direction 1, u[1][b, t, e] = SiLU(b_1[e] +
 * sum_k w_1[e, k] x[b, t + K - 1 - k, e]); tokens outside 0..L-1 are zero.
 * Layouts: x (B, L, ldx) with its first E columns read (the model's x | z in_proj output passes
 * as it is, ldx = 2 E); u[j]: (B, L, E); w[j]: (E, K); b[j]: (E).
 * dtypes: as the scans: float32 on a CPU context; on a CUDA context x, u and their gradients are
 * bfloat16, w, b, dw, db float32, and K is 1..6.
 * The backward overwrites dx (B, L, ldx: its first E columns, the sum of both directions' input
 * gradients) and ACCUMULATES (+=) into dw and db. */
typedef struct {
    int B, L, E, K, ldx;
    const void *x;
    const float *w[2], *b[2];
    void *u[2];
} vil_conv_fwd;

typedef struct {
    int B, L, E, K, ldx;
    const void *x;
    const float *w[2], *b[2];
    const void *du[2];
    void *dx;
    float *dw[2], *db[2]; /* accumulate */
} vil_conv_bwd;

/* Pointers and streams as the scans'. VIL_ERR_ARG for shapes the convolution does not take. */
VIL_API int vil_conv_forward(vil_ctx *ctx, const vil_conv_fwd *a, void *stream);
VIL_API int vil_conv_backward(vil_ctx *ctx, const vil_conv_bwd *a, void *stream);

#ifdef __cplusplus
}
#endif
#endif
