/* backend_cuda.cu: the CUDA backend: the context (one stream, cuBLASLt and cuDNN handles,
 * created on first use, destroyed at exit), tracked allocations and scratch, the memory ops, and
 * the VilBackend table pointing at the _cuda twins of ops_cuda.h. */
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda/ops_cuda.h"

/* the declarations of vil_backend_cuda and vil_cuda_available sit behind VIL_CUDA */
#ifndef VIL_CUDA
#define VIL_CUDA
#endif
extern "C" {
#include "vil/backend.h"
}

/* the table below is positional: a new VilBackend member must be added there too */
static_assert(sizeof(VilBackend) == 3 * sizeof(void *) + 35 * sizeof(void (*)(void)),
              "VilBackend changed: update the table at the end of cuda/backend_cuda.cu");

CuCtx g_cu;

const char *cu_hint_cuda(cudaError_t e) {
    switch (e) {
    case cudaErrorMemoryAllocation:
        return "out of GPU memory: lower --batch or free other GPU processes";
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
        return "no usable GPU/driver: use --device cpu";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
        return "this build targets sm_90 (H100/H200): rebuild with CUDA_ARCH for your GPU";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
        return "a kernel faulted: rerun with VIL_CUDA_SYNC=1 or under compute-sanitizer";
    default:
        return "rerun with VIL_CUDA_SYNC=1 to find the failing kernel";
    }
}

/* ---- tracked allocations: a small open list of (pointer, size) ---- */
typedef struct {
    void *p;
    size_t n;
} Alloc;
static Alloc *allocs;
static size_t n_allocs, cap_allocs, cur_bytes, peak_bytes;

static void track_add(void *p, size_t n) {
    if (n_allocs == cap_allocs) {
        cap_allocs = cap_allocs ? 2 * cap_allocs : 64;
        allocs = (Alloc *)vil_realloc(allocs, cap_allocs * sizeof(Alloc));
    }
    allocs[n_allocs].p = p;
    allocs[n_allocs].n = n;
    n_allocs++;
    cur_bytes += n;
    if (cur_bytes > peak_bytes) peak_bytes = cur_bytes;
}
static void track_remove(void *p) {
    for (size_t i = 0; i < n_allocs; i++)
        if (allocs[i].p == p) {
            cur_bytes -= allocs[i].n;
            allocs[i] = allocs[--n_allocs];
            return;
        }
    VIL_FATAL("cu_free of a pointer this backend did not allocate (%p)", p);
}

void *cu_malloc(size_t bytes) {
    cu_ensure_init();
    void *p = NULL;
    if (bytes == 0) bytes = 256;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        vil_fatal(__FILE__, __LINE__,
                  "cudaMalloc of %.2f MiB failed: %s (%.2f GiB held by vil, %.2f GiB free of %.2f; "
                  "lower --batch)",
                  bytes / 1048576.0, cudaGetErrorString(e), cur_bytes / 1073741824.0,
                  fr / 1073741824.0, tot / 1073741824.0);
    }
    track_add(p, bytes);
    return p;
}

void cu_free(void *p) {
    if (!p) return;
    track_remove(p);
    CUDA_CHECK(cudaFree(p));
}

size_t cu_peak_bytes(void) { return peak_bytes; }
void cu_peak_reset(void) { peak_bytes = cur_bytes; }

static void *scratch[SCR_COUNT];
static size_t scratch_bytes[SCR_COUNT];

void *cu_scratch(int slot, size_t bytes) {
    if (bytes <= scratch_bytes[slot]) return scratch[slot];
    if (scratch[slot]) {
        /* the old buffer may still be read by queued kernels */
        CUDA_CHECK(cudaStreamSynchronize(g_cu.stream));
        cu_free(scratch[slot]);
    }
    bytes = (bytes + 4095) / 4096 * 4096;
    scratch[slot] = cu_malloc(bytes);
    scratch_bytes[slot] = bytes;
    return scratch[slot];
}

/* ---- the input feed: a copy stream and, per slot, "uploaded" and "released" events ---- */
static cudaStream_t feed_stream;
static cudaEvent_t feed_loaded[2], feed_freed[2];

static void feed_init(void) {
    cu_ensure_init();
    if (feed_stream) return;
    CUDA_CHECK(cudaStreamCreateWithFlags(&feed_stream, cudaStreamNonBlocking));
    for (int i = 0; i < 2; i++) {
        CUDA_CHECK(cudaEventCreateWithFlags(&feed_loaded[i], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&feed_freed[i], cudaEventDisableTiming));
    }
}

static void cu_cleanup(void) {
    if (!g_cu.init) return;
    cudaStreamSynchronize(g_cu.stream);
    if (feed_stream) {
        cudaStreamSynchronize(feed_stream);
        for (int i = 0; i < 2; i++) {
            cudaEventDestroy(feed_loaded[i]);
            cudaEventDestroy(feed_freed[i]);
        }
        cudaStreamDestroy(feed_stream);
        feed_stream = NULL;
    }
    for (int i = 0; i < SCR_COUNT; i++)
        if (scratch[i]) {
            cu_free(scratch[i]);
            scratch[i] = NULL;
            scratch_bytes[i] = 0;
        }
    if (g_cu.lt_ws) cu_free(g_cu.lt_ws);
    cublasLtDestroy(g_cu.lt);
    cudnnDestroy(g_cu.dnn);
    cudaStreamDestroy(g_cu.stream);
    g_cu.init = 0;
}

void cu_ensure_init(void) {
    if (g_cu.init) return;
    int dev = 0;
    CUDA_CHECK(cudaSetDevice(dev));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    g_cu.num_sms = prop.multiProcessorCount;
    g_cu.smem_optin = prop.sharedMemPerBlockOptin;
    const char *s = getenv("VIL_CUDA_SYNC");
    g_cu.debug_sync = s && s[0] && s[0] != '0';
    CUDA_CHECK(cudaStreamCreate(&g_cu.stream));
    CUBLAS_CHECK(cublasLtCreate(&g_cu.lt));
    CUDNN_CHECK(cudnnCreate(&g_cu.dnn));
    CUDNN_CHECK(cudnnSetStream(g_cu.dnn, g_cu.stream));
    g_cu.init = 1;
    g_cu.lt_ws_bytes = (size_t)32 << 20;
    g_cu.lt_ws = cu_malloc(g_cu.lt_ws_bytes);
    atexit(cu_cleanup);
}

extern "C" int vil_cuda_available(char *why, size_t n) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(why, n, "no CUDA device (%s); use --device cpu",
                 e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return 0;
    }
    cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, 0);
    if (e != cudaSuccess) {
        snprintf(why, n, "cannot query the CUDA device: %s", cudaGetErrorString(e));
        return 0;
    }
    if (prop.major != 9) {
        snprintf(why, n,
                 "GPU %s has compute capability %d.%d but this vil was built for sm_90; rebuild "
                 "with CUDA_ARCH='-gencode arch=compute_%d%d,code=sm_%d%d'",
                 prop.name, prop.major, prop.minor, prop.major, prop.minor, prop.major, prop.minor);
        return 0;
    }
    return 1;
}

/* ---- memory ops ---- */
static void *b_alloc(size_t bytes) { return cu_malloc(bytes); }
static void b_free(void *p) { cu_free(p); }
static void b_zero(void *p, size_t bytes) {
    cu_ensure_init();
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, g_cu.stream));
}
static void b_to_device(void *dst, const void *src, size_t bytes) {
    cu_ensure_init();
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_cu.stream));
    /* the caller may reuse or free src as soon as we return */
    CUDA_CHECK(cudaStreamSynchronize(g_cu.stream));
}
static void b_to_host(void *dst, const void *src, size_t bytes) {
    cu_ensure_init();
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_cu.stream));
    CUDA_CHECK(cudaStreamSynchronize(g_cu.stream));
}
static void b_sync(void) {
    cu_ensure_init();
    CUDA_CHECK(cudaStreamSynchronize(g_cu.stream));
}
static size_t b_peak(void) { return cu_peak_bytes(); }
static void b_peak_reset(void) { cu_peak_reset(); }
static size_t b_mem_free(void) {
    cu_ensure_init();
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return fr;
}

/* pinned host memory: copies from it are DMA transfers that run while the host goes on */
static void *b_host_alloc(size_t bytes) {
    cu_ensure_init();
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes ? bytes : 64, cudaHostAllocDefault) != cudaSuccess) {
        cudaGetLastError(); /* clear it: the caller reports the failure */
        return NULL;
    }
    return p;
}
static void b_host_free(void *p) {
    if (p) CUDA_CHECK(cudaFreeHost(p));
}
/* An event never recorded counts as complete, so the first upload into a slot waits for nothing. */
static void b_feed_upload(int slot, void *dst, const void *src, size_t bytes) {
    feed_init();
    CUDA_CHECK(cudaStreamWaitEvent(feed_stream, feed_freed[slot], 0));
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, feed_stream));
    CUDA_CHECK(cudaEventRecord(feed_loaded[slot], feed_stream));
}
static void b_feed_acquire(int slot) {
    feed_init();
    CUDA_CHECK(cudaStreamWaitEvent(g_cu.stream, feed_loaded[slot], 0));
}
static void b_feed_release(int slot) {
    feed_init();
    CUDA_CHECK(cudaEventRecord(feed_freed[slot], g_cu.stream));
}
static void b_feed_wait(int slot) {
    feed_init();
    CUDA_CHECK(cudaEventSynchronize(feed_loaded[slot]));
}

static float bf16_bits_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static void b_act_to_host_f32(float *dst, const void *src, size_t n) {
    uint16_t *tmp = (uint16_t *)vil_malloc(n * sizeof(uint16_t) + 1);
    b_to_host(tmp, src, n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) dst[i] = bf16_bits_to_float(tmp[i]);
    free(tmp);
}
static void b_params_to_work(void *work, const float *master, size_t n) {
    params_to_work_cuda(work, master, n);
}

extern "C" const VilBackend vil_backend_cuda = {
    /* .name = */ "cuda",
    /* .act_bytes = */ 2,
    /* .work_bytes = */ 2,
    /* .alloc = */ b_alloc,
    /* .free = */ b_free,
    /* .zero = */ b_zero,
    /* .to_device = */ b_to_device,
    /* .to_host = */ b_to_host,
    /* .sync = */ b_sync,
    /* .peak_bytes = */ b_peak,
    /* .peak_reset = */ b_peak_reset,
    /* .mem_free = */ b_mem_free,
    /* .act_to_host_f32 = */ b_act_to_host_f32,
    /* .params_to_work = */ b_params_to_work,
    /* .host_alloc = */ b_host_alloc,
    /* .host_free = */ b_host_free,
    /* .feed_upload = */ b_feed_upload,
    /* .feed_acquire = */ b_feed_acquire,
    /* .feed_release = */ b_feed_release,
    /* .feed_wait = */ b_feed_wait,
    /* .patch_embed_forward = */ patch_embed_forward_cuda,
    /* .patch_embed_backward = */ patch_embed_backward_cuda,
    /* .tokens_forward = */ tokens_forward_cuda,
    /* .tokens_backward = */ tokens_backward_cuda,
    /* .add_rmsnorm_forward = */ add_rmsnorm_forward_cuda,
    /* .add_rmsnorm_backward = */ add_rmsnorm_backward_cuda,
    /* .linear_forward = */ linear_forward_cuda,
    /* .linear_backward = */ linear_backward_cuda,
    /* .conv1d_silu_forward = */ conv1d_silu_forward_cuda,
    /* .conv1d_silu_backward = */ conv1d_silu_backward_cuda,
    /* .conv1d_silu_bidir_forward = */ conv1d_silu_bidir_forward_cuda,
    /* .conv1d_silu_bidir_backward = */ conv1d_silu_bidir_backward_cuda,
    /* .scan_bidir_forward = */ scan_bidir_forward_cuda,
    /* .scan_bidir_backward = */ scan_bidir_backward_cuda,
    /* .softmax_xent_forward = */ softmax_xent_forward_cuda,
    /* .softmax_xent_backward = */ softmax_xent_backward_cuda,
    /* .adamw_update = */ adamw_update_cuda,
    /* .grad_clip = */ grad_clip_cuda,
};
