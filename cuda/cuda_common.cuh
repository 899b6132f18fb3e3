/* cuda_common.cuh: what every CUDA op file shares: the CHECK macro family (CUDA, cuBLAS, cuDNN,
 * NCCL: file, line, expression, a hint), the device context a backend instance owns (its GPU,
 * stream, cuBLASLt and cuDNN handles, tracked allocations, scratch, feed events, plan caches)
 * and how ops reach it, and bf16 helpers. */
#ifndef VIL_CUDA_COMMON_CUH
#define VIL_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#ifdef VIL_NCCL /* the Makefile defines it when nccl.h is found (NCCL=0: never) */
#include <nccl.h>
#endif
#include <stddef.h>

#include "vil/common.h"

typedef __nv_bfloat16 bf16;

/* ---- the CHECK family: every library call goes through one of these ---- */
const char *cu_hint_cuda(cudaError_t e);
#define CUDA_CHECK(expr)                                                                    \
    do {                                                                                    \
        cudaError_t e_ = (expr);                                                            \
        if (e_ != cudaSuccess)                                                              \
            vil_fatal(__FILE__, __LINE__, "%s failed: %s (%s)", #expr, cudaGetErrorString(e_), \
                      cu_hint_cuda(e_));                                                    \
    } while (0)
#define CUBLAS_CHECK(expr)                                                                  \
    do {                                                                                    \
        cublasStatus_t s_ = (expr);                                                         \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                    \
            vil_fatal(__FILE__, __LINE__, "%s failed: %s (%s)", #expr, cublasGetStatusString(s_), \
                      s_ == CUBLAS_STATUS_NOT_SUPPORTED                                     \
                          ? "no cuBLASLt kernel for this shape/type/alignment"              \
                          : "check the matrix shapes and leading dimensions");              \
    } while (0)
#define CUDNN_CHECK(expr)                                                                   \
    do {                                                                                    \
        cudnnStatus_t s_ = (expr);                                                          \
        if (s_ != CUDNN_STATUS_SUCCESS)                                                     \
            vil_fatal(__FILE__, __LINE__, "%s failed: %s (%s)", #expr, cudnnGetErrorString(s_), \
                      "is cuDNN 9 installed and matching this CUDA? check the descriptors"); \
    } while (0)
#ifdef VIL_NCCL
#define NCCL_CHECK(expr)                                                                    \
    do {                                                                                    \
        ncclResult_t r_ = (expr);                                                           \
        if (r_ != ncclSuccess)                                                              \
            vil_fatal(__FILE__, __LINE__, "%s failed: %s (%s)", #expr, ncclGetErrorString(r_), \
                      "check that every rank runs the same collective sequence");           \
    } while (0)
#endif
/* after every kernel launch: catches bad launch configurations at once; with VIL_CUDA_SYNC=1
 * in the environment it also synchronizes, so an asynchronous fault names its kernel */
#define CU_LAUNCH_CHECK()                                                                   \
    do {                                                                                    \
        CUDA_CHECK(cudaGetLastError());                                                     \
        if (cu()->debug_sync) CUDA_CHECK(cudaStreamSynchronize(cu()->stream));              \
    } while (0)

/* Grow-only scratch, one buffer per slot, reused by every call of the op that owns the slot.
 * Ops run in order on the context's one stream, so a slot is never read by two ops at once;
 * growing synchronizes first (it happens in the first step only). */
enum {
    SCR_LT_BF16,     /* linear: f32 -> bf16 copy of the head's dlogits */
    SCR_COLSUM,      /* column-sum partials (bias gradients) */
    SCR_NORM_PART,   /* rmsnorm dw partials */
    /* the large op-local buffers share one slot: the scan (checkpoints, partial sums, k|q table),
     * conv1d (dw/db partials) and the patch embedding (its f32 NCHW output / gradient) never run
     * at once, and each takes the slot once per call and carves it (saves ~64 MB at ViL-Tiny
     * batch 256 against one slot each) */
    SCR_OP,
    SCR_PATCH_W,     /* patch embedding f32 weight */
    SCR_DNN_WS,      /* cuDNN workspace */
    SCR_BIAS_BF16,   /* linear: bf16 copy of a bias when cuBLASLt takes no f32 bias */
    SCR_SUM_MID,     /* colsum_rows_accumulate: the first of its two levels */
    SCR_GNORM,       /* grad_clip: per-block sums of squares */
    SCR_COUNT
};

/* ---- the device context: everything a backend instance owns on its GPU ---- */
typedef struct {
    void *p;
    size_t n;
} CuAlloc;
typedef struct CuCtx {
    int device;               /* the GPU index (cudaSetDevice) */
    int init;                 /* the stream and handles exist */
    int debug_sync;           /* VIL_CUDA_SYNC=1: synchronize after every launch */
    int num_sms;
    cudaStream_t stream;      /* every op of this context runs on it, in order */
    cublasLtHandle_t lt;
    cudnnHandle_t dnn;
    void *lt_ws;              /* cuBLASLt workspace */
    size_t lt_ws_bytes;
    /* tracked allocations: the peak-memory figure, and a check that only ours are freed */
    CuAlloc *allocs;
    size_t n_allocs, cap_allocs, cur_bytes, peak_bytes;
    void *scratch[SCR_COUNT];
    size_t scratch_bytes[SCR_COUNT];
    /* a caller's stream joined to ours (libvil's device entry points: backend stream_wait and
     * stream_signal): "the caller's work so far" and "ours so far"; made on first use */
    cudaEvent_t join_in, join_out;
    /* the input feed (data/feed.h): a copy stream and, per slot, "uploaded" / "released" */
    cudaStream_t feed_stream;
    cudaEvent_t feed_loaded[2], feed_freed[2];
    /* per-handle plan caches of linear.cu and patch_embed.cu (opaque here) */
    struct LtPlans *lt_plans;
    struct ConvPlans *conv_plans;
    void *nccl;               /* ncclComm_t of dist_join (NULL: none) */
    /* the async all-reduces (grad_allreduce): their stream, "the gradients before are ready",
     * "the all-reduces so far are done", and whether one is queued since the last wait */
    cudaStream_t comm_stream;
    cudaEvent_t comm_ready, comm_done;
    int comm_pending;
    /* the watchdog's view of the all-reduces (dist.h VilDistDeviceWatch): an event recorded after
     * the last one, the vil_now() time it was queued, and a count that is odd while the two
     * change (__atomic: the watchdog's thread reads them) */
    cudaEvent_t watch_ev;
    double watch_t;
    unsigned watch_seq;
    /* CUDA graph capture (backend graph_*): capturing; a scratch region had to grow while
     * capturing (the graph is dropped); the regions replaced then, freed at the capture's end;
     * scratch_gen counts scratch reallocations, so a graph knows when its buffers moved */
    int capturing, capture_failed;
    void **capture_old;
    int n_capture_old;
    unsigned long scratch_gen;
    /* the scan (scan.cu's cu_scan_open, when the context opens): the tuning row of this GPU's
     * architecture (scan_tune.cuh); VIL_SCAN_CHUNK and VIL_SCAN_SPLIT (0: unset), and which of
     * them are announced */
    const struct ScanTune *scan_tune;
    int scan_chunk, scan_split, scan_told;
} CuCtx;

/* The context the calling thread works on: every entry point of the backend table binds its
 * backend's context first (cu_bind), and everything below it reads cu(). */
extern thread_local CuCtx *cu_cur;
static inline CuCtx *cu(void) { return cu_cur; }
CuCtx *cu_bind(const struct VilBackend *be);
/* Every instance has its stream and handles from when it is opened; this ends the process
 * where one has not and cannot get them (a guard). */
void cu_ensure_init(void);
/* scan.cu: the scan's settings of context c, for a GPU of compute capability major.minor */
void cu_scan_open(CuCtx *c, int cc_major, int cc_minor);

/* tracked device allocations of the current context; cu_malloc, for the ops' own buffers, ends
 * the process when the GPU has not the memory (the backend's alloc returns NULL instead) */
void *cu_malloc(size_t bytes);
void cu_free(void *p);
void *cu_scratch(int slot, size_t bytes);
/* release what linear.cu / patch_embed.cu cached for the current context */
void cu_linear_plans_free(void);
void cu_conv_plans_free(void);

static inline int cu_blocks(size_t n, int threads) {
    size_t b = (n + threads - 1) / threads;
    return (int)(b < 1 ? 1 : (b > 2147483647u ? 2147483647u : b));
}
/* blocks for a grid-stride loop over n elements: at most per_sm blocks per SM */
static inline int cu_blocks_capped(size_t n, int threads, int per_sm) {
    int b = cu_blocks(n, threads), cap = cu()->num_sms * per_sm;
    return b < cap ? b : cap;
}

/* ---- bf16 helpers ---- */
__device__ __forceinline__ float bf2f(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ bf16 f2bf(float x) { return __float2bfloat16_rn(x); }
/* MUFU reciprocal (about 1 ulp): the IEEE __frcp_rn expands to a long sequence, and these
 * feed bf16 outputs; rcp(inf) = 0 keeps sigmoid(-inf) = 0 */
__device__ __forceinline__ float rcp_fast(float x) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ float sigmoidf_fast(float x) { return rcp_fast(1.0f + __expf(-x)); }
__device__ __forceinline__ float siluf(float x) { return x * sigmoidf_fast(x); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    return v;
}
/* s summed over the block (blockDim.x a power of two, sh that many doubles) in a fixed tree
 * order: the same bits on every run; every thread gets the sum */
__device__ __forceinline__ double block_sum_d(double s, double *sh) {
    int t = threadIdx.x;
    sh[t] = s;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if (t < k) sh[t] += sh[t + k];
        __syncthreads();
    }
    return sh[0];
}

#endif
