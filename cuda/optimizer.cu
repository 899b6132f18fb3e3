/* optimizer.cu: AdamW on the float32 master weights and moments (torch.optim.AdamW's formula,
 * as vil/optimizer.c), refreshing the bf16 working copy in the same pass; and the f32 -> bf16
 * conversion of the whole parameter buffer. The bias corrections are computed on the host from
 * the step count, which the host knows: nothing is read back from the device. The model updates
 * all its parameter tensors in one launch (they are contiguous), with a byte mask for the ones
 * exempt from weight decay. */
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

extern "C" void adamw_update_cuda(float *p, void *work, const float *g, float *m, float *v,
                                  const unsigned char *decay, size_t n, float lr, float beta1,
                                  float beta2, float eps, float wd, int step) {
    cu_ensure_init();
    float bc1 = 1.0f - powf(beta1, (float)step), bc2 = 1.0f - powf(beta2, (float)step);
    adamw_kernel<<<grid_for(n), 256, 0, g_cu.stream>>>(p, (bf16 *)work, g, m, v, decay, n, lr, beta1,
                                                       beta2, eps, wd, bc1, bc2);
    CU_LAUNCH_CHECK();
}

extern "C" void params_to_work_cuda(void *work, const float *master, size_t n) {
    cu_ensure_init();
    to_bf16_kernel<<<grid_for(n), 256, 0, g_cu.stream>>>((bf16 *)work, master, n);
    CU_LAUNCH_CHECK();
}
