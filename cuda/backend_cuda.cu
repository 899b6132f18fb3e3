/* backend_cuda.cu: the CUDA backend: the device context (cuda_common.cuh's CuCtx: one per
 * backend instance, for a chosen GPU, its stream, handles, allocations, scratch and feed events,
 * created when the instance is opened), the memory ops, the VilBackend table, filled by name from
 * VIL_OPS, whose every entry binds its backend's context before it runs the _cuda twin of
 * ops_cuda.h, and the module's table (vil/backend_module.h) through which the core reaches all
 * of it: libvil-cuda.so's entry point (core_shim.c) returns it.
 *
 * Failures: opening an instance (no such GPU, no code for it, a stream or cuBLASLt / cuDNN handle
 * that cannot be created) and the backend's alloc (out of GPU memory) report with vil_error and
 * return NULL. A CHECK failing inside an op still ends the process (vil_fatal): an op returns
 * nothing, and what fails there is a broken invariant (a bad launch, a shape no kernel takes) or
 * a sticky device error (a faulting kernel) after which the context cannot be used. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda/ops_cuda.h"

extern "C" {
#include "vil/backend.h"
#include "vil/backend_module.h"
#include "vil/dist.h"
}

thread_local CuCtx *cu_cur;
/* the context of the shared instance: device 0, for a process with one GPU */
static CuCtx default_ctx;
static pthread_mutex_t default_mu = PTHREAD_MUTEX_INITIALIZER;

/* what the binary carries (the Makefile passes it: "sm_80 sm_86 ... + PTX compute_120") and the
 * toolkit it was compiled with */
#ifndef VIL_CUDA_ARCHS
#define VIL_CUDA_ARCHS "unknown architectures (compiled without the Makefile's VIL_CUDA_ARCHS)"
#endif
#define CU_STR_(x) #x
#define CU_STR(x) CU_STR_(x)
#define CU_TOOLKIT "CUDA " CU_STR(__CUDACC_VER_MAJOR__) "." CU_STR(__CUDACC_VER_MINOR__)

const char *cu_hint_cuda(cudaError_t e) {
    switch (e) {
    case cudaErrorMemoryAllocation:
        return "out of GPU memory: lower --batch or free other GPU processes";
    case cudaErrorNoDevice:
        return "no usable GPU: use --device cpu";
    case cudaErrorInsufficientDriver:
        return "the GPU driver is older than the " CU_TOOLKIT " runtime of this vil: update the "
               "driver, or use --device cpu";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorInvalidDeviceFunction:
        return "this vil carries no code for this GPU (built for " VIL_CUDA_ARCHS "): rebuild "
               "with make CUDA_ARCH=\"-gencode arch=compute_XY,code=sm_XY\" for its compute "
               "capability X.Y";
    case cudaErrorUnsupportedPtxVersion:
        return "the GPU driver is older than the " CU_TOOLKIT " that compiled this vil's PTX: "
               "update the driver";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
        return "a kernel faulted: rerun with VIL_CUDA_SYNC=1 or under compute-sanitizer";
    default:
        return "rerun with VIL_CUDA_SYNC=1 to find the failing kernel";
    }
}

/* ---- binding and creating a context ---- */

static void ctx_cleanup(CuCtx *c);
static void default_cleanup(void) { ctx_cleanup(&default_ctx); }

CuCtx *cu_bind(const VilBackend *be) {
    CuCtx *c = (CuCtx *)be->ctx;
    if (cu_cur != c) {
        /* another context of this thread may be on another GPU */
        if (!cu_cur || cu_cur->device != c->device) CUDA_CHECK(cudaSetDevice(c->device));
        cu_cur = c;
    }
    cu_ensure_init();
    return c;
}

/* the allocation failure's text: what was asked, what is held and what is free */
static void malloc_failed_text(char *buf, size_t n, const CuCtx *c, size_t bytes, cudaError_t e) {
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) fr = tot = 0;
    snprintf(buf, n,
             "cudaMalloc of %zu bytes (%.2f MiB) failed on GPU %d: %s (%.2f GiB held by this "
             "context; %zu bytes (%.2f GiB) free of %.2f GiB; lower --batch)",
             bytes, bytes / 1048576.0, c->device, cudaGetErrorString(e),
             c->cur_bytes / 1073741824.0, fr, fr / 1073741824.0, tot / 1073741824.0);
}

/* A tracked allocation of the current context; NULL with a vil_error message when the GPU has
 * not the memory (the backend's alloc: the caller decides). The failed call's error is cleared,
 * or the next launch check would report it. */
static void track_add(CuCtx *c, void *p, size_t n);
static void *cu_malloc_try(size_t bytes) {
    CuCtx *c = cu();
    void *p = NULL;
    if (bytes == 0) bytes = 256;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        char msg[512];
        malloc_failed_text(msg, sizeof msg, c, bytes, e);
        vil_error("%s", msg);
        return NULL;
    }
    track_add(c, p, bytes);
    return p;
}

/* The context's stream, handles and cuBLASLt workspace; it becomes the thread's current one.
 * 0, or -1 with a vil_error message and nothing left half made (and no current context: the
 * device may have changed under the one that was, so the next cu_bind sets it again). */
static int ctx_init(CuCtx *c) {
    if (c->init) return 0;
    const char *what = "cudaSetDevice";
    char detail[256] = "";
    cudaDeviceProp prop;
    cu_cur = NULL;
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess) what = "cudaGetDeviceProperties", e = cudaGetDeviceProperties(&prop, c->device);
    /* non-blocking: no implicit order with the legacy default stream, which vil never uses, so
     * a caller's CUDA graph capture that joins this stream (stream_wait) is not broken by work
     * others queue on the legacy stream meanwhile (torch's autograd did) */
    if (e == cudaSuccess)
        what = "cudaStreamCreateWithFlags", e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        cudaGetLastError();
        vil_error("GPU %d: %s failed: %s (%s)", c->device, what, cudaGetErrorString(e), cu_hint_cuda(e));
        c->stream = NULL;
        return -1;
    }
    cu_cur = c;
    c->num_sms = prop.multiProcessorCount;
    const char *s = getenv("VIL_CUDA_SYNC");
    c->debug_sync = s && s[0] && s[0] != '0';
    cu_scan_open(c, prop.major, prop.minor);
    cublasStatus_t bs = cublasLtCreate(&c->lt);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        snprintf(detail, sizeof detail, "cublasLtCreate failed: %s", cublasGetStatusString(bs));
        c->lt = NULL;
        goto fail;
    }
    {
        cudnnStatus_t ds = cudnnCreate(&c->dnn);
        if (ds != CUDNN_STATUS_SUCCESS) c->dnn = NULL;
        else ds = cudnnSetStream(c->dnn, c->stream);
        if (ds != CUDNN_STATUS_SUCCESS) {
            snprintf(detail, sizeof detail, "%s failed: %s (is cuDNN 9 installed and matching "
                     "this CUDA?)", c->dnn ? "cudnnSetStream" : "cudnnCreate", cudnnGetErrorString(ds));
            goto fail;
        }
    }
    c->lt_ws_bytes = (size_t)32 << 20;
    if (!(c->lt_ws = cu_malloc_try(c->lt_ws_bytes))) {
        snprintf(detail, sizeof detail, "no memory for cuBLASLt's workspace");
        goto fail;
    }
    c->init = 1;
    if (c == &default_ctx) atexit(default_cleanup);
    return 0;
fail:
    vil_error("GPU %d: %s", c->device, detail);
    if (c->dnn) cudnnDestroy(c->dnn);
    if (c->lt) cublasLtDestroy(c->lt);
    cudaStreamDestroy(c->stream);
    cudaGetLastError();
    c->dnn = NULL, c->lt = NULL, c->stream = NULL;
    cu_cur = NULL;
    return -1;
}

/* every instance is initialized when it is opened (cu_shared, cu_open): this is a guard */
void cu_ensure_init(void) {
    CuCtx *c = cu();
    if (!c->init && ctx_init(c) != 0) VIL_FATAL("the CUDA context of GPU %d cannot be created (above)", c->device);
}

/* Everything the context holds; the tracked allocations of the caller (the model's buffers)
 * must be freed first, and anything left is reported. */
static void ctx_cleanup(CuCtx *c) {
    if (!c->init) return;
    CuCtx *prev = cu_cur;
    cu_cur = c;
    cudaSetDevice(c->device);
    cudaStreamSynchronize(c->stream);
    if (c->feed_stream) {
        cudaStreamSynchronize(c->feed_stream);
        for (int i = 0; i < 2; i++) {
            cudaEventDestroy(c->feed_loaded[i]);
            cudaEventDestroy(c->feed_freed[i]);
        }
        cudaStreamDestroy(c->feed_stream);
        c->feed_stream = NULL;
    }
    for (int i = 0; i < SCR_COUNT; i++)
        if (c->scratch[i]) {
            cu_free(c->scratch[i]);
            c->scratch[i] = NULL;
            c->scratch_bytes[i] = 0;
        }
    cu_linear_plans_free();
    cu_conv_plans_free();
    if (c->lt_ws) cu_free(c->lt_ws);
    c->lt_ws = NULL;
#ifdef VIL_NCCL
    if (c->nccl) {
        vil_dist_watch_device(NULL); /* before the event goes */
        cudaEventDestroy(c->watch_ev);
        vil_dist_wait_begin("closing NCCL");
        ncclCommDestroy((ncclComm_t)c->nccl);
        vil_dist_wait_end();
    }
#endif
    c->nccl = NULL;
    if (c->comm_stream) {
        cudaEventDestroy(c->comm_ready);
        cudaEventDestroy(c->comm_done);
        cudaStreamDestroy(c->comm_stream);
        c->comm_stream = NULL;
    }
    if (c->join_in) cudaEventDestroy(c->join_in);
    if (c->join_out) cudaEventDestroy(c->join_out);
    c->join_in = c->join_out = NULL;
    cublasLtDestroy(c->lt);
    cudnnDestroy(c->dnn);
    cudaStreamDestroy(c->stream);
    free(c->allocs);
    c->allocs = NULL;
    c->n_allocs = c->cap_allocs = c->cur_bytes = 0;
    c->init = 0;
    cu_cur = prev == c ? NULL : prev;
}

/* ---- tracked allocations: a small open list of (pointer, size) per context ---- */
static void track_add(CuCtx *c, void *p, size_t n) {
    if (c->n_allocs == c->cap_allocs) {
        c->cap_allocs = c->cap_allocs ? 2 * c->cap_allocs : 64;
        c->allocs = (CuAlloc *)vil_realloc(c->allocs, c->cap_allocs * sizeof(CuAlloc));
    }
    c->allocs[c->n_allocs].p = p;
    c->allocs[c->n_allocs].n = n;
    c->n_allocs++;
    c->cur_bytes += n;
    if (c->cur_bytes > c->peak_bytes) c->peak_bytes = c->cur_bytes;
}
static void track_remove(CuCtx *c, void *p) {
    for (size_t i = 0; i < c->n_allocs; i++)
        if (c->allocs[i].p == p) {
            c->cur_bytes -= c->allocs[i].n;
            c->allocs[i] = c->allocs[--c->n_allocs];
            return;
        }
    VIL_FATAL("cu_free of a pointer this context did not allocate (%p)", p);
}

/* inside an op (scratch, workspaces): nothing to hand a failure to, so it ends the process */
void *cu_malloc(size_t bytes) {
    CuCtx *c = cu();
    void *p = NULL;
    if (bytes == 0) bytes = 256;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        char msg[512];
        malloc_failed_text(msg, sizeof msg, c, bytes, e);
        VIL_FATAL("%s", msg);
    }
    track_add(c, p, bytes);
    return p;
}

void cu_free(void *p) {
    if (!p) return;
    track_remove(cu(), p);
    CUDA_CHECK(cudaFree(p));
}

void *cu_scratch(int slot, size_t bytes) {
    CuCtx *c = cu();
    if (bytes <= c->scratch_bytes[slot]) return c->scratch[slot];
    if (c->capturing) {
        /* no synchronizing inside a capture: the old region is freed at its end, and the graph,
         * which recorded the old region, is dropped there */
        c->capture_failed = 1;
        if (c->scratch[slot]) {
            c->capture_old = (void **)vil_realloc(c->capture_old, (c->n_capture_old + 1) * sizeof(void *));
            c->capture_old[c->n_capture_old++] = c->scratch[slot];
        }
    } else if (c->scratch[slot]) {
        /* the old buffer may still be read by queued kernels */
        CUDA_CHECK(cudaStreamSynchronize(c->stream));
        cu_free(c->scratch[slot]);
    }
    c->scratch_gen++;
    bytes = (bytes + 4095) / 4096 * 4096;
    c->scratch[slot] = cu_malloc(bytes);
    c->scratch_bytes[slot] = bytes;
    return c->scratch[slot];
}

/* ---- the input feed: a copy stream and, per slot, "uploaded" and "released" events ---- */
static CuCtx *feed_init(const VilBackend *be) {
    CuCtx *c = cu_bind(be);
    if (c->feed_stream) return c;
    CUDA_CHECK(cudaStreamCreateWithFlags(&c->feed_stream, cudaStreamNonBlocking));
    for (int i = 0; i < 2; i++) {
        CUDA_CHECK(cudaEventCreateWithFlags(&c->feed_loaded[i], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&c->feed_freed[i], cudaEventDisableTiming));
    }
    return c;
}

/* Compiled with the same flags as every kernel of cuda/: whether the binary carries code a GPU
 * can run (SASS of its architecture family, or PTX the driver compiles for it) is whether the
 * runtime finds this kernel's. */
static __global__ void cu_probe_kernel(int *p) {
    if (p) *p = 1;
}

/* 1 when GPU dev can run this build: compute capability 8.0 or newer (the kernels use cp.async
 * and bf16) and code for it in the binary; else 0, the reason in why */
static int cu_device_usable(int dev, char *why, size_t n) {
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, dev);
    if (e != cudaSuccess) {
        snprintf(why, n, "cannot query CUDA device %d: %s (%s)", dev, cudaGetErrorString(e),
                 cu_hint_cuda(e));
        return 0;
    }
    if (prop.major < 8) {
        snprintf(why, n,
                 "GPU %d (%s) has compute capability %d.%d; vil's CUDA kernels need 8.0 or newer "
                 "(Ampere: cp.async, bf16): use --device cpu",
                 dev, prop.name, prop.major, prop.minor);
        return 0;
    }
    int prev = 0;
    if (cudaGetDevice(&prev) != cudaSuccess) prev = dev;
    cudaFuncAttributes fa;
    e = cudaSetDevice(dev);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, cu_probe_kernel);
    cudaGetLastError(); /* not sticky: clear it */
    if (prev != dev) cudaSetDevice(prev);
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction) {
        snprintf(why, n,
                 "GPU %d (%s, compute capability %d.%d): this vil carries no code for it (built "
                 "for %s); rebuild with make CUDA_ARCH=\"-gencode arch=compute_%d%d,code=sm_%d%d\"",
                 dev, prop.name, prop.major, prop.minor, VIL_CUDA_ARCHS, prop.major, prop.minor,
                 prop.major, prop.minor);
        return 0;
    }
    if (e != cudaSuccess) {
        snprintf(why, n, "GPU %d (%s, compute capability %d.%d): cannot load vil's kernels: %s (%s)",
                 dev, prop.name, prop.major, prop.minor, cudaGetErrorString(e), cu_hint_cuda(e));
        return 0;
    }
    return 1;
}

static int cu_available(char *why, size_t n) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(why, n, "no CUDA device (%s); use --device cpu",
                 e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return 0;
    }
    return cu_device_usable(0, why, n);
}

static int cu_nccl_available(char *why, size_t n) {
#ifdef VIL_NCCL
    if (why && n) why[0] = '\0';
    return 1;
#else
    if (why && n)
        snprintf(why, n, "this vil was built without NCCL (install libnccl-dev / nccl.h and "
                         "rebuild): multi-GPU training needs it");
    return 0;
#endif
}

static const char *cu_build_info(void) {
    return CU_TOOLKIT ", archs " VIL_CUDA_ARCHS ", NCCL "
#ifdef VIL_NCCL
           "yes (" CU_STR(NCCL_MAJOR) "." CU_STR(NCCL_MINOR) "." CU_STR(NCCL_PATCH) ")";
#else
           "no";
#endif
}

/* ---- memory ops ---- */
/* NULL with a message when the GPU has not the memory: the caller reports what it was for */
static void *b_alloc(const VilBackend *be, size_t bytes) {
    cu_bind(be);
    return cu_malloc_try(bytes);
}
static void b_free(const VilBackend *be, void *p) {
    cu_bind(be);
    cu_free(p);
}
static void b_zero(const VilBackend *be, void *p, size_t bytes) {
    CuCtx *c = cu_bind(be);
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, c->stream));
}
static void b_to_device(const VilBackend *be, void *dst, const void *src, size_t bytes) {
    CuCtx *c = cu_bind(be);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
    /* the caller may reuse or free src as soon as we return */
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
}
static void b_to_host(const VilBackend *be, void *dst, const void *src, size_t bytes) {
    CuCtx *c = cu_bind(be);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
}
/* backend memory to backend memory on our stream (libvil's device forward copies its logits out) */
static void b_copy(const VilBackend *be, void *dst, const void *src, size_t bytes) {
    CuCtx *c = cu_bind(be);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
}
/* A caller's stream (NULL: the legacy default stream) joined to ours by an event each way (made
 * on first use), with no synchronisation of the host or the device; under a CUDA graph capture of
 * the caller's stream the event makes our stream join the capture, and stream_signal joins it
 * back. */
static void b_stream_wait(const VilBackend *be, void *stream) {
    CuCtx *c = cu_bind(be);
    if ((cudaStream_t)stream == c->stream) return;
    if (!c->join_in) CUDA_CHECK(cudaEventCreateWithFlags(&c->join_in, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(c->join_in, (cudaStream_t)stream));
    CUDA_CHECK(cudaStreamWaitEvent(c->stream, c->join_in, 0));
}
static void b_stream_signal(const VilBackend *be, void *stream) {
    CuCtx *c = cu_bind(be);
    if ((cudaStream_t)stream == c->stream) return;
    if (!c->join_out) CUDA_CHECK(cudaEventCreateWithFlags(&c->join_out, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(c->join_out, c->stream));
    CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)stream, c->join_out, 0));
}
static void b_sync(const VilBackend *be) {
    CuCtx *c = cu_bind(be);
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
}
/* the profile's marks: CUDA events (never freed: a profiled run makes a few thousand, once) */
static void *b_mark_new(const VilBackend *be) {
    cu_bind(be);
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreate(&e));
    return (void *)e;
}
static void b_mark_record(const VilBackend *be, void *mark) {
    CuCtx *c = cu_bind(be);
    CUDA_CHECK(cudaEventRecord((cudaEvent_t)mark, c->stream));
}
static double b_mark_elapsed(const VilBackend *be, void *a, void *b) {
    cu_bind(be);
    float ms = 0.0f;
    CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)b));
    CUDA_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)a, (cudaEvent_t)b));
    return 1e-3 * ms;
}
static size_t b_peak(const VilBackend *be) { return cu_bind(be)->peak_bytes; }
static void b_peak_reset(const VilBackend *be) {
    CuCtx *c = cu_bind(be);
    c->peak_bytes = c->cur_bytes;
}
static size_t b_mem_free(const VilBackend *be) {
    cu_bind(be);
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return fr;
}

/* pinned host memory: copies from it are DMA transfers that run while the host goes on */
static void *b_host_alloc(const VilBackend *be, size_t bytes) {
    cu_bind(be);
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes ? bytes : 64, cudaHostAllocDefault) != cudaSuccess) {
        cudaGetLastError(); /* clear it: the caller reports the failure */
        return NULL;
    }
    return p;
}
static void b_host_free(const VilBackend *be, void *p) {
    cu_bind(be);
    if (p) CUDA_CHECK(cudaFreeHost(p));
}
/* An event never recorded counts as complete, so the first upload into a slot waits for nothing. */
static void b_feed_upload(const VilBackend *be, int slot, void *dst, const void *src, size_t bytes) {
    CuCtx *c = feed_init(be);
    CUDA_CHECK(cudaStreamWaitEvent(c->feed_stream, c->feed_freed[slot], 0));
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->feed_stream));
    CUDA_CHECK(cudaEventRecord(c->feed_loaded[slot], c->feed_stream));
}
static void b_feed_acquire(const VilBackend *be, int slot) {
    CuCtx *c = feed_init(be);
    CUDA_CHECK(cudaStreamWaitEvent(c->stream, c->feed_loaded[slot], 0));
}
static void b_feed_release(const VilBackend *be, int slot) {
    CuCtx *c = feed_init(be);
    CUDA_CHECK(cudaEventRecord(c->feed_freed[slot], c->stream));
}
static void b_feed_wait(const VilBackend *be, int slot) {
    CuCtx *c = feed_init(be);
    CUDA_CHECK(cudaEventSynchronize(c->feed_loaded[slot]));
}

static float bf16_bits_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static void b_act_to_host_f32(const VilBackend *be, float *dst, const void *src, size_t n) {
    uint16_t *tmp = (uint16_t *)vil_malloc(n * sizeof(uint16_t) + 1);
    b_to_host(be, tmp, src, n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) dst[i] = bf16_bits_to_float(tmp[i]);
    free(tmp);
}
static void b_params_to_work(const VilBackend *be, void *work, const float *master, size_t n) {
    cu_bind(be);
    params_to_work_cuda(work, master, n);
}

static const char *b_device_name(const VilBackend *be, char *buf, size_t n) {
    CuCtx *c = cu_bind(be);
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, c->device));
    snprintf(buf, n, "%s (compute capability %d.%d, %.0f GiB)", prop.name, prop.major, prop.minor,
             prop.totalGlobalMem / 1073741824.0);
    return buf;
}

/* ---- CUDA graphs: the ops between graph_begin and graph_end, replayed by one launch ---- */
typedef struct {
    cudaGraphExec_t exec;
    unsigned long gen; /* the scratch generation it recorded */
} CuGraph;
static int b_graph_begin(const VilBackend *be) {
    CuCtx *c = cu_bind(be);
    if (c->debug_sync || c->capturing) return -1;
    c->capturing = 1, c->capture_failed = 0;
    CUDA_CHECK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed));
    return 0;
}
static void *b_graph_end(const VilBackend *be) {
    CuCtx *c = cu_bind(be);
    cudaGraph_t g = NULL;
    CUDA_CHECK(cudaStreamEndCapture(c->stream, &g));
    c->capturing = 0;
    for (int i = 0; i < c->n_capture_old; i++) cu_free(c->capture_old[i]);
    c->n_capture_old = 0;
    CuGraph *h = NULL;
    if (!c->capture_failed) {
        h = (CuGraph *)vil_calloc(1, sizeof *h);
        CUDA_CHECK(cudaGraphInstantiate(&h->exec, g, 0));
        h->gen = c->scratch_gen;
    }
    CUDA_CHECK(cudaGraphDestroy(g));
    return h;
}
static int b_graph_launch(const VilBackend *be, void *graph) {
    CuCtx *c = cu_bind(be);
    CuGraph *h = (CuGraph *)graph;
    if (h->gen != c->scratch_gen) return -1;
    CUDA_CHECK(cudaGraphLaunch(h->exec, c->stream));
    return 0;
}
static void b_graph_free(const VilBackend *be, void *graph) {
    cu_bind(be);
    CuGraph *h = (CuGraph *)graph;
    if (!h) return;
    CUDA_CHECK(cudaGraphExecDestroy(h->exec));
    free(h);
}

/* the ops: bind the backend's context, then the _cuda twin */
/* ---- the group's gradients: NCCL on this context's stream ---- */
#ifdef VIL_NCCL
/* The watchdog's callbacks (dist.h), on its own thread: the all-reduces run on the GPU, where a
 * rank that died or hung leaves them spinning while the host waits on the stream. */
static double nccl_pending_since(void *ctx) {
    CuCtx *c = (CuCtx *)ctx;
    cudaSetDevice(c->device); /* this thread's current device, for the query */
    unsigned s1 = __atomic_load_n(&c->watch_seq, __ATOMIC_ACQUIRE);
    if (s1 & 1) return 0;
    double t;
    __atomic_load(&c->watch_t, &t, __ATOMIC_RELAXED);
    cudaError_t q = cudaEventQuery(c->watch_ev);
    unsigned s2 = __atomic_load_n(&c->watch_seq, __ATOMIC_ACQUIRE);
    /* another all-reduce queued meanwhile: the next round looks again */
    return s1 == s2 && q == cudaErrorNotReady ? t : 0;
}

static int nccl_async_error(void *ctx, char *msg, size_t n) {
    CuCtx *c = (CuCtx *)ctx;
    ncclResult_t r = ncclSuccess;
    if (ncclCommGetAsyncError((ncclComm_t)c->nccl, &r) != ncclSuccess || r == ncclSuccess) return 0;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
    if (r == ncclInProgress) return 0;
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
    snprintf(msg, n, "NCCL: %s (%s)", ncclGetErrorString(r), ncclGetLastError((ncclComm_t)c->nccl));
#else
    snprintf(msg, n, "NCCL: %s", ncclGetErrorString(r));
#endif
    return 1;
}
#endif

static int b_dist_join(const VilBackend *be, const VilDist *d) {
    CuCtx *c = cu_bind(be);
#ifdef VIL_NCCL
    if (c->nccl) return 0;
    /* rank 0 makes the id, MPI carries it to the others */
    ncclUniqueId id;
    if (d->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    vil_dist_bcast(d, &id, sizeof id, 0);
    ncclComm_t comm;
    vil_dist_wait_begin("joining NCCL");
    NCCL_CHECK(ncclCommInitRank(&comm, d->world, id, d->rank));
    vil_dist_wait_end();
    c->nccl = comm;
    CUDA_CHECK(cudaEventCreateWithFlags(&c->watch_ev, cudaEventDisableTiming));
    VilDistDeviceWatch w = {nccl_pending_since, nccl_async_error, c};
    vil_dist_watch_device(&w);
    /* the all-reduces that overlap the backward run here; priority above the compute stream's,
     * so a bucket's transfer starts as soon as its gradients are ready */
    int lo, hi;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    CUDA_CHECK(cudaStreamCreateWithPriority(&c->comm_stream, cudaStreamNonBlocking, hi));
    CUDA_CHECK(cudaEventCreateWithFlags(&c->comm_ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&c->comm_done, cudaEventDisableTiming));
    return 0;
#else
    (void)c, (void)d;
    char why[256];
    cu_nccl_available(why, sizeof why);
    vil_error("--device cuda with %d processes: %s", d->world, why);
    return -1;
#endif
}

extern "C" void grad_allreduce_cuda(const VilAllReduce *a) {
#ifdef VIL_NCCL
    CuCtx *c = cu();
    if (!c->nccl) VIL_FATAL("grad_allreduce before dist_join");
    cudaStream_t s = c->stream;
    if (a->async) {
        /* on the side stream, after what the compute stream has queued so far */
        CUDA_CHECK(cudaEventRecord(c->comm_ready, c->stream));
        CUDA_CHECK(cudaStreamWaitEvent(c->comm_stream, c->comm_ready, 0));
        s = c->comm_stream;
        c->comm_pending = 1;
    }
    NCCL_CHECK(ncclAllReduce(a->buf, a->buf, a->n, ncclFloat, ncclSum, (ncclComm_t)c->nccl, s));
    /* for the watchdog: "done" of the last all-reduce, and when it was queued */
    __atomic_add_fetch(&c->watch_seq, 1, __ATOMIC_ACQ_REL);
    CUDA_CHECK(cudaEventRecord(c->watch_ev, s));
    double now = vil_now();
    __atomic_store(&c->watch_t, &now, __ATOMIC_RELAXED);
    __atomic_add_fetch(&c->watch_seq, 1, __ATOMIC_ACQ_REL);
#else
    (void)a;
    VIL_FATAL("grad_allreduce in a build without NCCL (dist_join refuses it)");
#endif
}

extern "C" void grad_allreduce_wait_cuda(const VilAllReduceWait *a) {
    (void)a;
    CuCtx *c = cu();
    if (!c->comm_pending) return;
    CUDA_CHECK(cudaEventRecord(c->comm_done, c->comm_stream));
    CUDA_CHECK(cudaStreamWaitEvent(c->stream, c->comm_done, 0));
    c->comm_pending = 0;
}

static size_t b_scan_states_bytes(const VilBackend *be, const VilScanFwd *a) {
    cu_bind(be);
    return scan_states_bytes_cuda(a);
}

#define VIL_CUDA_ENTRY(op, Args, label)                          \
    static void b_##op(const VilBackend *be, const Args *args) { \
        cu_bind(be);                                             \
        op##_cuda(args);                                         \
    }
VIL_OPS(VIL_CUDA_ENTRY)
#undef VIL_CUDA_ENTRY

/* the table, by name: a slot cannot be misplaced, and a missing twin does not compile */
#define VIL_CUDA_TABLE(ctx_ptr)                                                               \
    {                                                                                         \
        .name = "cuda", .act_bytes = 2, .work_bytes = 2, .ctx = (ctx_ptr), .device = 0,       \
        .alloc = b_alloc, .free = b_free, .zero = b_zero, .to_device = b_to_device,           \
        .to_host = b_to_host, .sync = b_sync, .peak_bytes = b_peak, .peak_reset = b_peak_reset, \
        .mark_new = b_mark_new, .mark_record = b_mark_record, .mark_elapsed = b_mark_elapsed,  \
        .mem_free = b_mem_free, .act_to_host_f32 = b_act_to_host_f32,                        \
        .params_to_work = b_params_to_work, .host_alloc = b_host_alloc,                       \
        .host_free = b_host_free, .feed_upload = b_feed_upload,                               \
        .feed_acquire = b_feed_acquire, .feed_release = b_feed_release,                       \
        .feed_wait = b_feed_wait, .device_name = b_device_name, .dist_join = b_dist_join,     \
        .graph_begin = b_graph_begin, .graph_end = b_graph_end, .graph_launch = b_graph_launch, \
        .graph_free = b_graph_free, .scan_states_bytes = b_scan_states_bytes,                 \
        .copy = b_copy, .stream_wait = b_stream_wait, .stream_signal = b_stream_signal,       \
        VIL_OPS(VIL_CUDA_SLOT)                                                                \
    }
#define VIL_CUDA_SLOT(op, Args, label) .op = b_##op,
static const VilBackend shared_backend = VIL_CUDA_TABLE(&default_ctx);
static const VilBackend cuda_template = VIL_CUDA_TABLE(NULL);
#undef VIL_CUDA_SLOT
#undef VIL_CUDA_TABLE

/* device 0's instance: created once, by whichever thread comes first */
static const VilBackend *cu_shared(void) {
    pthread_mutex_lock(&default_mu);
    int ok = ctx_init(&default_ctx) == 0;
    pthread_mutex_unlock(&default_mu);
    return ok ? &shared_backend : NULL;
}

static const VilBackend *cu_open(int index) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || index < 0 || index >= count) {
        cudaGetLastError();
        vil_error("no GPU %d (%s; %d found)", index,
                  e != cudaSuccess ? cudaGetErrorString(e) : "out of range", count);
        return NULL;
    }
    char why[512];
    if (!cu_device_usable(index, why, sizeof why)) {
        vil_error("%s", why);
        return NULL;
    }
    CuCtx *c = (CuCtx *)vil_calloc(1, sizeof(CuCtx));
    c->device = index;
    if (ctx_init(c) != 0) {
        free(c);
        return NULL;
    }
    VilBackend *be = (VilBackend *)vil_malloc(sizeof(VilBackend));
    memcpy(be, &cuda_template, sizeof *be);
    be->ctx = c;
    be->device = index;
    return be;
}

static void cu_close(const VilBackend *be) {
    CuCtx *c = (CuCtx *)be->ctx;
    if (c == &default_ctx) return;
    ctx_cleanup(c);
    free(c);
    free((void *)be);
}

/* what the module runs on: the runtime it loaded, the driver's CUDA version, NCCL's */
static const char *cu_runtime_info(char *buf, size_t n) {
    int rt = 0, drv = 0;
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess) rt = 0;
    if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
    cudaGetLastError();
    char nccl[32] = "none";
#ifdef VIL_NCCL
    /* major * 10000 + minor * 100 + patch; NCCL 2.8 and older: major * 1000 + minor * 100 + patch */
    int v = 0;
    if (ncclGetVersion(&v) == ncclSuccess && v >= 10000)
        snprintf(nccl, sizeof nccl, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    else if (v > 0)
        snprintf(nccl, sizeof nccl, "%d.%d.%d", v / 1000, v / 100 % 10, v % 100);
#endif
    char drv_text[32] = "none";
    if (drv) snprintf(drv_text, sizeof drv_text, "%d.%d", drv / 1000, drv % 1000 / 10);
    snprintf(buf, n, "runtime %d.%d, driver %s, NCCL %s", rt / 1000, rt % 1000 / 10, drv_text, nccl);
    return buf;
}

static const VilBackendModule cuda_module = {
    .abi = VIL_BACKEND_MODULE_ABI,
    .size = sizeof(VilBackendModule),
    .backend_size = sizeof(VilBackend),
    .name = "cuda",
    .available = cu_available,
    .nccl_available = cu_nccl_available,
    .build_info = cu_build_info,
    .runtime_info = cu_runtime_info,
    .shared = cu_shared,
    .open = cu_open,
    .close = cu_close,
};

extern "C" const VilBackendModule *vil_cuda_module(void) { return &cuda_module; }
