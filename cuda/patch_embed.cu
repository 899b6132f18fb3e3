/* patch_embed.cu: the patch embedding and the token assembly (middle class token, position
 * embedding).
 *
 * Non-overlapping patches (stride == patch size, every ViL / ViM model): the convolution is one
 * matrix product. patchify_kernel rearranges the float32 image into bf16 rows of C*P*P values,
 * one row per patch in the (c, py, px) order of the weight's (D, C, P, P) layout, and cuBLASLt
 * does the rest (linear_forward/backward_cuda: bias in the epilogue, fp32 accumulation, the
 * filter gradient added into the float32 gradient). The (B, M, D) output is the token layout
 * itself, so no transpose. The patch rows are rebuilt in the backward rather than kept (77 MB at
 * batch 256, one pass over the image). Measured 1,225 -> ~0.1 ms forward on the lent H100
 * (cuda/PERF_NOTES.md): cuDNN ran the float32 NCHW convolution at ~12 TFLOP/s.
 *
 * Overlapping patches (stride < patch, e.g. ViM's stride-8 fine-tuned models): cuDNN
 * (convolution forward, backward filter and, when dimg is wanted, backward data), float32 NCHW
 * with TF32 tensor ops on the image as given, the filter gradient accumulated straight into the
 * float32 gradient (beta = 1); the (B, D, G, G) output is transposed to the (B, M, D) bf16
 * token layout with the bias added. Deterministic algorithms only.
 *
 * dw, db, dcls, dpos accumulate; dpatches, dimg overwrite. */
#include <stdint.h>
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda/ops_cuda.h"

/* the legacy convolution API is deprecated in cuDNN 9 but present in every 9.x */
#pragma nv_diag_suppress 1444
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

typedef struct {
    int B, C, H, W, P, S, D;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdFilterAlgo_t bwf;
    cudnnConvolutionBwdDataAlgo_t bwd;
    size_t ws_fwd, ws_bwf, ws_bwd;
    int has_bwd; /* bwf and bwd chosen (conv_plan_backward: at the first backward) */
} ConvPlan;

#define MAX_CONV_PLANS 8
/* per context: descriptors and algorithms chosen for its cuDNN handle */
struct ConvPlans {
    ConvPlan plan[MAX_CONV_PLANS];
    int n;
};
static const size_t WS_LIMIT = (size_t)512 << 20;

static void conv_plan_destroy(ConvPlan *o) {
    CUDNN_CHECK(cudnnDestroyTensorDescriptor(o->x));
    CUDNN_CHECK(cudnnDestroyTensorDescriptor(o->y));
    CUDNN_CHECK(cudnnDestroyFilterDescriptor(o->w));
    CUDNN_CHECK(cudnnDestroyConvolutionDescriptor(o->conv));
}

void cu_conv_plans_free(void) {
    struct ConvPlans *ps = cu()->conv_plans;
    if (!ps) return;
    for (int i = 0; i < ps->n; i++) conv_plan_destroy(&ps->plan[i]);
    free(ps);
    cu()->conv_plans = NULL;
}

static ConvPlan *conv_plan(int B, int C, int H, int W, int P, int S, int D) {
    if (!cu()->conv_plans) cu()->conv_plans = (struct ConvPlans *)vil_calloc(1, sizeof(struct ConvPlans));
    struct ConvPlans *ps = cu()->conv_plans;
    ConvPlan *cplans = ps->plan;
    int n_cplans = ps->n;
    for (int i = 0; i < n_cplans; i++) {
        ConvPlan *p = &cplans[i];
        if (p->B == B && p->C == C && p->H == H && p->W == W && p->P == P && p->S == S && p->D == D)
            return p;
    }
    if (n_cplans == MAX_CONV_PLANS) {
        /* shapes change only between runs (batch size, config): drop the oldest */
        conv_plan_destroy(&cplans[0]);
        memmove(cplans, cplans + 1, (MAX_CONV_PLANS - 1) * sizeof(ConvPlan));
        n_cplans = --ps->n;
    }
    ConvPlan *p = &cplans[n_cplans];
    memset(p, 0, sizeof *p);
    p->B = B, p->C = C, p->H = H, p->W = W, p->P = P, p->S = S, p->D = D;
    int G = (H - P) / S + 1, GW = (W - P) / S + 1;
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, B, C, H, W));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, B, D, G, GW));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, D, C, P, P));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv, 0, 0, S, S, 1, 1, CUDNN_CROSS_CORRELATION,
                                                CUDNN_DATA_FLOAT));
    /* the default math allows TF32 tensor ops on float data (10 mantissa bits, more than the
     * bf16 the rest of the net uses); ALLOW_CONVERSION would also permit fp16 */
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, CUDNN_DEFAULT_MATH));
    int n = 0;
    cudnnConvolutionFwdAlgoPerf_t fp[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(cu()->dnn, p->x, p->w, p->conv, p->y,
                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, fp));
    int ok = 0;
    for (int i = 0; i < n && !ok; i++)
        if (fp[i].status == CUDNN_STATUS_SUCCESS && fp[i].memory <= WS_LIMIT &&
            fp[i].determinism == CUDNN_DETERMINISTIC)
            p->fwd = fp[i].algo, p->ws_fwd = fp[i].memory, ok = 1;
    if (!ok) VIL_FATAL("cuDNN offers no deterministic forward algorithm for the patch embedding");
    ps->n++;
    return p;
}

/* The deterministic algorithm of the list (cuDNN's heuristic order) that works within WS_LIMIT,
 * else the one that needs the least workspace; -1: none. */
template <class Perf>
static int pick_deterministic(const Perf *pf, int n) {
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (pf[i].status != CUDNN_STATUS_SUCCESS || pf[i].determinism != CUDNN_DETERMINISTIC) continue;
        if (pf[i].memory <= WS_LIMIT) return i;
        if (best < 0 || pf[i].memory < pf[best].memory) best = i;
    }
    return best;
}

/* The backward's algorithms of plan p, chosen at its first backward: an inference-only shape
 * never asks for them (cuDNN may have no deterministic filter-gradient algorithm within
 * WS_LIMIT for a shape whose forward is fine: batch 500 of 112 x 112 at stride 2) */
static void conv_plan_backward(ConvPlan *p) {
    if (p->has_bwd) return;
    int n = 0, i;
    cudnnConvolutionBwdFilterAlgoPerf_t bf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        cu()->dnn, p->x, p->y, p->conv, p->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, bf));
    if ((i = pick_deterministic(bf, n)) < 0)
        VIL_FATAL("cuDNN offers no deterministic filter-gradient algorithm for the patch embedding "
                  "(batch %d, %d x %d, patch %d, stride %d)", p->B, p->H, p->W, p->P, p->S);
    p->bwf = bf[i].algo, p->ws_bwf = bf[i].memory;
    cudnnConvolutionBwdDataAlgoPerf_t bd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        cu()->dnn, p->w, p->y, p->conv, p->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, bd));
    if ((i = pick_deterministic(bd, n)) < 0)
        VIL_FATAL("cuDNN offers no deterministic data-gradient algorithm for the patch embedding "
                  "(batch %d, %d x %d, patch %d, stride %d)", p->B, p->H, p->W, p->P, p->S);
    p->bwd = bd[i].algo, p->ws_bwd = bd[i].memory;
    p->has_bwd = 1;
}

static __global__ void bf16_to_f32_kernel(float *out, const bf16 *in, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = bf2f(in[i]);
}

/* y (B, D, M) f32 -> out (B, M, D) bf16 with bias; 32x32 tiles through shared memory */
__global__ void nchw_to_tokens_kernel(bf16 *out, const float *y, const float *bias, int D, int M) {
    __shared__ float tile[32][33];
    int b = blockIdx.z, d0 = blockIdx.y * 32, m0 = blockIdx.x * 32;
    for (int r = threadIdx.y; r < 32; r += 8) {
        int d = d0 + r, m = m0 + threadIdx.x;
        tile[r][threadIdx.x] = (d < D && m < M) ? y[((size_t)b * D + d) * M + m] : 0.0f;
    }
    __syncthreads();
    for (int r = threadIdx.y; r < 32; r += 8) {
        int m = m0 + r, d = d0 + threadIdx.x;
        if (d < D && m < M) out[((size_t)b * M + m) * D + d] = f2bf(tile[threadIdx.x][r] + bias[d]);
    }
}

/* dout (B, M, D) bf16 -> dy (B, D, M) f32 */
__global__ void tokens_to_nchw_kernel(float *dy, const bf16 *dout, int D, int M) {
    __shared__ float tile[32][33];
    int b = blockIdx.z, d0 = blockIdx.y * 32, m0 = blockIdx.x * 32;
    for (int r = threadIdx.y; r < 32; r += 8) {
        int m = m0 + r, d = d0 + threadIdx.x;
        tile[r][threadIdx.x] = (d < D && m < M) ? bf2f(dout[((size_t)b * M + m) * D + d]) : 0.0f;
    }
    __syncthreads();
    for (int r = threadIdx.y; r < 32; r += 8) {
        int d = d0 + r, m = m0 + threadIdx.x;
        if (d < D && m < M) dy[((size_t)b * D + d) * M + m] = tile[threadIdx.x][r];
    }
}

/* ---- non-overlapping patches: the patch rows of a matrix product ---- */
/* img (B, C, H, W) f32 <-> xp (B * G * GW, C * P * P) bf16, for stride == P. One thread per run
 * of V pixels of one image row inside one patch (V = 8 when P % 8 == 0 and W % 4 == 0: two
 * 16-byte loads, one 16-byte store; else V = 1). Consecutive threads walk an image row, so the
 * reads are coalesced; a patch row's 2P bytes are written by P / V consecutive threads.
 * TO_IMG: the reverse (unpatchify: dimg from the patch rows' gradient). */
template <int V, bool TO_IMG>
__global__ void patchify_kernel(bf16 *xp, float *img_out, const float *img, const bf16 *dxp, int B,
                                int C, int H, int W, int P, int G, int GW) {
    const int runs = P / V, K = C * P * P;
    const size_t n = (size_t)B * C * G * P * GW * runs;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i;
        int run = (int)(r % runs); r /= runs;
        int gx = (int)(r % GW); r /= GW;
        int y = (int)(r % ((size_t)G * P)); r /= (size_t)G * P;
        int c = (int)(r % C), b = (int)(r / C);
        int gy = y / P, py = y - gy * P, x0 = gx * P + run * V;
        size_t pix = (((size_t)b * C + c) * H + y) * W + x0;
        size_t e = ((size_t)b * G * GW + (size_t)gy * GW + gx) * K + (size_t)c * P * P + py * P + run * V;
        if (TO_IMG) {
#pragma unroll
            for (int v = 0; v < V; v++) img_out[pix + v] = bf2f(dxp[e + v]);
        } else if (V == 8) {
            float4 a = *reinterpret_cast<const float4 *>(img + pix);
            float4 bb = *reinterpret_cast<const float4 *>(img + pix + 4);
            __nv_bfloat162 o[4] = {__floats2bfloat162_rn(a.x, a.y), __floats2bfloat162_rn(a.z, a.w),
                                   __floats2bfloat162_rn(bb.x, bb.y), __floats2bfloat162_rn(bb.z, bb.w)};
            *reinterpret_cast<uint4 *>(xp + e) = *reinterpret_cast<const uint4 *>(o);
        } else {
#pragma unroll
            for (int v = 0; v < V; v++) xp[e + v] = f2bf(img[pix + v]);
        }
    }
}

/* threads of patchify_kernel: one per run of `run` pixels */
static int patch_blocks(int B, int C, int H, int W, int P, int run) {
    int G = (H - P) / P + 1, GW = (W - P) / P + 1;
    return cu_blocks((size_t)B * C * G * P * GW * (P / run), 256);
}

/* img -> the patch rows xp */
static void patchify(bf16 *xp, const float *img, int B, int C, int H, int W, int P) {
    int G = (H - P) / P + 1, GW = (W - P) / P + 1;
    /* the 16-byte path: rows of W floats and runs of 8 start 16-byte aligned (cudaMalloc'd) */
    if (P % 8 == 0 && W % 4 == 0 && ((uintptr_t)img % 16) == 0)
        patchify_kernel<8, false><<<patch_blocks(B, C, H, W, P, 8), 256, 0, cu()->stream>>>(
            xp, NULL, img, NULL, B, C, H, W, P, G, GW);
    else
        patchify_kernel<1, false><<<patch_blocks(B, C, H, W, P, 1), 256, 0, cu()->stream>>>(
            xp, NULL, img, NULL, B, C, H, W, P, G, GW);
    CU_LAUNCH_CHECK();
}

/* the patch rows' gradient dxp -> dimg (overwritten; pixels outside every patch get 0) */
static void unpatchify(float *dimg, const bf16 *dxp, int B, int C, int H, int W, int P) {
    int G = (H - P) / P + 1, GW = (W - P) / P + 1;
    CUDA_CHECK(cudaMemsetAsync(dimg, 0, (size_t)B * C * H * W * sizeof(float), cu()->stream));
    patchify_kernel<1, true><<<patch_blocks(B, C, H, W, P, 1), 256, 0, cu()->stream>>>(
        NULL, dimg, NULL, dxp, B, C, H, W, P, G, GW);
    CU_LAUNCH_CHECK();
}

static float *weight_f32(const void *w, size_t n) {
    float *wf = (float *)cu_scratch(SCR_PATCH_W, n * sizeof(float));
    bf16_to_f32_kernel<<<cu_blocks(n, 256), 256, 0, cu()->stream>>>(wf, (const bf16 *)w, n);
    CU_LAUNCH_CHECK();
    return wf;
}

extern "C" void patch_embed_forward_cuda(const VilPatchEmbedFwd *a) {
    void *out = a->out;
    const float *img = a->img, *b = a->b;
    const void *w = a->w;
    int B = a->B, C = a->C, H = a->H, W = a->W, P = a->P, S = a->S, D = a->D;
    int M = ((H - P) / S + 1) * ((W - P) / S + 1), K = C * P * P;
    if (S == P) {
        bf16 *xp = (bf16 *)cu_scratch(SCR_OP, (size_t)B * M * K * sizeof(bf16));
        patchify(xp, img, B, C, H, W, P);
        VilLinearFwd lf = {};
        lf.out = out, lf.in = xp, lf.w = w, lf.b = b, lf.N = B * M, lf.C = K, lf.OC = D, lf.ld_in = K, lf.ld_out = D;
        linear_forward_cuda(&lf);
        return;
    }
    ConvPlan *p = conv_plan(B, C, H, W, P, S, D);
    float *wf = weight_f32(w, (size_t)D * C * P * P);
    float *y = (float *)cu_scratch(SCR_OP, (size_t)B * D * M * sizeof(float));
    void *ws = p->ws_fwd ? cu_scratch(SCR_DNN_WS, p->ws_fwd) : NULL;
    float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnConvolutionForward(cu()->dnn, &one, p->x, img, p->w, wf, p->conv, p->fwd, ws,
                                        p->ws_fwd, &zero, p->y, y));
    dim3 grid((M + 31) / 32, (D + 31) / 32, B), block(32, 8);
    nchw_to_tokens_kernel<<<grid, block, 0, cu()->stream>>>((bf16 *)out, y, b, D, M);
    CU_LAUNCH_CHECK();
}

extern "C" void patch_embed_backward_cuda(const VilPatchEmbedBwd *a) {
    float *dimg = a->dimg, *dw = a->dw, *db = a->db;
    const void *dout = a->dout, *w = a->w;
    const float *img = a->img;
    int B = a->B, C = a->C, H = a->H, W = a->W, P = a->P, S = a->S, D = a->D;
    int M = ((H - P) / S + 1) * ((W - P) / S + 1), K = C * P * P;
    if (S == P) {
        /* the filter and bias gradients from the rebuilt patch rows, then (when wanted) the
         * patch rows' gradient into the same scratch, scattered back to the image */
        bf16 *xp = (bf16 *)cu_scratch(SCR_OP, (size_t)B * M * K * sizeof(bf16));
        patchify(xp, img, B, C, H, W, P);
        VilLinearBwd lb = {};
        lb.dw = dw, lb.db = db, lb.dout = dout, lb.in = xp, lb.w = w;
        lb.N = B * M, lb.C = K, lb.OC = D, lb.ld_in = K, lb.ld_out = D;
        linear_backward_cuda(&lb);
        if (dimg) {
            lb.dinp = xp, lb.dw = NULL, lb.db = NULL;
            linear_backward_cuda(&lb);
            unpatchify(dimg, xp, B, C, H, W, P);
        }
        if (cu()->debug_sync) CUDA_CHECK(cudaStreamSynchronize(cu()->stream));
        return;
    }
    ConvPlan *p = conv_plan(B, C, H, W, P, S, D);
    conv_plan_backward(p);
    float *dy = (float *)cu_scratch(SCR_OP, (size_t)B * D * M * sizeof(float));
    dim3 grid((M + 31) / 32, (D + 31) / 32, B), block(32, 8);
    tokens_to_nchw_kernel<<<grid, block, 0, cu()->stream>>>(dy, (const bf16 *)dout, D, M);
    CU_LAUNCH_CHECK();
    float one = 1.0f, zero = 0.0f;
    void *ws = p->ws_bwf ? cu_scratch(SCR_DNN_WS, p->ws_bwf) : NULL;
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(cu()->dnn, &one, p->x, img, p->y, dy, p->conv, p->bwf,
                                               ws, p->ws_bwf, &one, p->w, dw));
    colsum_accumulate_cuda(db, dout, 0, B * M, D, D);
    if (dimg) {
        float *wf = weight_f32(w, (size_t)D * C * P * P);
        ws = p->ws_bwd ? cu_scratch(SCR_DNN_WS, p->ws_bwd) : NULL;
        CUDNN_CHECK(cudnnConvolutionBackwardData(cu()->dnn, &one, p->w, wf, p->y, dy, p->conv,
                                                 p->bwd, ws, p->ws_bwd, &zero, p->x, dimg));
    }
    if (cu()->debug_sync) CUDA_CHECK(cudaStreamSynchronize(cu()->stream));
}

/* ---- tokens ---- */
__global__ void tokens_fwd_kernel(float *x, const bf16 *patches, const float *cls, const float *pos,
                                  int B, int M, int D, int t) {
    int L = M + 1;
    size_t n = (size_t)B * L * D;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int d = (int)(i % D);
        size_t r = i / D;
        int l = (int)(r % L), b = (int)(r / L);
        float v = l == t ? cls[d] : bf2f(patches[((size_t)b * M + (l < t ? l : l - 1)) * D + d]);
        x[i] = pos ? v + pos[(size_t)l * D + d] : v;
    }
}

__global__ void tokens_gather_kernel(bf16 *dpatches, const float *dx, int B, int M, int D, int t) {
    int L = M + 1;
    size_t n = (size_t)B * M * D;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int d = (int)(i % D);
        size_t r = i / D;
        int m = (int)(r % M), b = (int)(r / M);
        int l = m < t ? m : m + 1;
        dpatches[i] = f2bf(dx[((size_t)b * L + l) * D + d]);
    }
}

/* dpos[l, d] += sum_b dx[b, l, d] (and dcls at l == t), summed in sample order, over the rows
 * from l0 on (dpos NULL: l0 = t, the class token's row alone) */
__global__ void tokens_pos_grad_kernel(float *dcls, float *dpos, const float *dx, int B, int L,
                                       int D, int t, int l0, int rows) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x + (size_t)l0 * D;
    if (i >= (size_t)(l0 + rows) * D) return;
    float s = 0.0f;
    for (int b = 0; b < B; b++) s += dx[(size_t)b * L * D + i];
    if (dpos) dpos[i] += s;
    if ((int)(i / D) == t) dcls[i % D] += s;
}

extern "C" void tokens_forward_cuda(const VilTokensFwd *a) {
    size_t n = (size_t)a->B * (a->M + 1) * a->D;
    tokens_fwd_kernel<<<cu_blocks(n, 256), 256, 0, cu()->stream>>>(a->x, (const bf16 *)a->patches, a->cls, a->pos,
                                                                   a->B, a->M, a->D, a->t);
    CU_LAUNCH_CHECK();
}

extern "C" void tokens_backward_cuda(const VilTokensBwd *a) {
    void *dpatches = a->dpatches;
    float *dcls = a->dcls, *dpos = a->dpos;
    const float *dx = a->dx;
    int B = a->B, M = a->M, D = a->D, t = a->t;
    size_t n = (size_t)B * M * D;
    tokens_gather_kernel<<<cu_blocks(n, 256), 256, 0, cu()->stream>>>((bf16 *)dpatches, dx, B, M, D, t);
    CU_LAUNCH_CHECK();
    int l0 = dpos ? 0 : t, rows = dpos ? M + 1 : 1;
    size_t np = (size_t)rows * D;
    tokens_pos_grad_kernel<<<cu_blocks(np, 128), 128, 0, cu()->stream>>>(dcls, dpos, dx, B, M + 1, D, t, l0, rows);
    CU_LAUNCH_CHECK();
}
