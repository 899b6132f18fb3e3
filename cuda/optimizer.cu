/* optimizer.cu: AdamW on the float32 master weights and moments (torch.optim.AdamW's formula,
 * as vil/optimizer.c), refreshing the bf16 working copy in the same pass; and the f32 -> bf16
 * conversion of the whole parameter buffer. The bias corrections are computed on the host from
 * the step count, which the host knows: nothing is read back from the device. The model updates
 * all its parameter tensors in one launch (they are contiguous), with a byte mask for the ones
 * exempt from weight decay. Gradient clipping (clip_grad_norm_) runs here too, with the norm left
 * in device memory for the caller to read when it logs. */
#include <math.h>

#include "cuda/cuda_common.cuh"
#include "cuda/ops_cuda.h"

__global__ void adamw_kernel(float *p, bf16 *work, const float *g, float *m, float *v,
                             const unsigned char *decay, size_t n, float lr, float beta1,
                             float beta2, float eps, float wd, float bc1, float bc2) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i], wdi = (!decay || decay[i]) ? wd : 0.0f;
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float pi = p[i];
        pi -= lr * (wdi * pi + (mi / bc1) / (sqrtf(vi / bc2) + eps));
        p[i] = pi;
        if (work) work[i] = f2bf(pi);
    }
}

__global__ void to_bf16_kernel(bf16 *out, const float *in, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = f2bf(in[i]);
}

static int grid_for(size_t n) { return cu_blocks_capped(n, 256, 8); }

/* clip_grad_norm_: the squares summed in double, per block (a fixed grid: GN_BLOCKS blocks,
 * each a fixed set of elements), then the blocks in order by one block: the same bits on every
 * run. The norm goes to *norm; the scaling kernel reads it there. */
#define GN_BLOCKS 1024
#define GN_T 256
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
__global__ void sumsq_kernel(double *part, const float *g, size_t n) {
    __shared__ double sh[GN_T];
    double s = 0.0;
    for (size_t i = blockIdx.x * (size_t)GN_T + threadIdx.x; i < n; i += (size_t)GN_BLOCKS * GN_T) {
        double x = g[i];
        s = fma(x, x, s);
    }
    s = block_sum_d(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}
__global__ void norm_kernel(float *norm, const double *part) {
    __shared__ double sh[GN_T];
    double s = 0.0;
    for (int i = threadIdx.x; i < GN_BLOCKS; i += GN_T) s += part[i];
    s = block_sum_d(s, sh);
    if (threadIdx.x == 0) *norm = (float)sqrt(s);
}
__global__ void clip_kernel(float *g, size_t n, float max_norm, const float *norm) {
    float c = (float)((double)max_norm / ((double)*norm + 1e-6));
    if (c >= 1.0f) return;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        g[i] *= c;
}

extern "C" void grad_clip_cuda(const VilGradClip *a) {
    float *g = a->g, *norm = a->norm, max_norm = a->max_norm;
    size_t n = a->n;
    double *part = (double *)cu_scratch(SCR_GNORM, GN_BLOCKS * sizeof(double));
    sumsq_kernel<<<GN_BLOCKS, GN_T, 0, cu()->stream>>>(part, g, n);
    CU_LAUNCH_CHECK();
    norm_kernel<<<1, GN_T, 0, cu()->stream>>>(norm, part);
    CU_LAUNCH_CHECK();
    clip_kernel<<<grid_for(n), 256, 0, cu()->stream>>>(g, n, max_norm, norm);
    CU_LAUNCH_CHECK();
}

extern "C" void adamw_update_cuda(const VilAdamW *a) {
    float bc1 = 1.0f - powf(a->beta1, (float)a->step), bc2 = 1.0f - powf(a->beta2, (float)a->step);
    adamw_kernel<<<grid_for(a->n), 256, 0, cu()->stream>>>(a->p, (bf16 *)a->work, a->g, a->m, a->v,
                                                          a->decay, a->n, a->lr, a->beta1,
                                                          a->beta2, a->eps, a->wd, bc1, bc2);
    CU_LAUNCH_CHECK();
}

/* the same arithmetic as AdamW's first moment, which the EMA borrowed before it had an op */
__global__ void ema_kernel(float *ema, const float *p, size_t n, float decay) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float gi = p[i];
        float mi = decay * ema[i] + (1.0f - decay) * gi;
        ema[i] = mi;
    }
}

extern "C" void ema_update_cuda(const VilEma *a) {
    ema_kernel<<<grid_for(a->n), 256, 0, cu()->stream>>>(a->ema, a->p, a->n, a->decay);
    CU_LAUNCH_CHECK();
}

extern "C" void params_to_work_cuda(void *work, const float *master, size_t n) {
    to_bf16_kernel<<<grid_for(n), 256, 0, cu()->stream>>>((bf16 *)work, master, n);
    CU_LAUNCH_CHECK();
}
