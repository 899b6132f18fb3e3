/* loss.cu: softmax cross-entropy against soft targets, on the device (no host round trip):
 * one block per sample; the per-sample loss and the probabilities are written, the batch mean
 * is taken by whoever reads the losses. dlogits = (probs - targets) / B. */
#include "cuda/cuda_common.cuh"
#include "cuda/ops_cuda.h"

/* block-wide reduction of a double (sum or max) through shared memory */
template <bool MAX>
__device__ double block_reduce(double v, double *sh) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) {
        double o = __shfl_xor_sync(0xffffffffu, v, m);
        v = MAX ? fmax(v, o) : v + o;
    }
    __syncthreads(); /* sh may still be read from the previous reduction */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = sh[0];
    for (int i = 1; i < nw; i++) v = MAX ? fmax(v, sh[i]) : v + sh[i];
    return v;
}

__global__ void xent_fwd_kernel(float *loss, float *probs, const float *logits,
                                const float *targets, int C) {
    __shared__ double sh[32];
    int b = blockIdx.x;
    const float *x = logits + (size_t)b * C, *tg = targets + (size_t)b * C;
    double mx = -INFINITY;
    for (int c = threadIdx.x; c < C; c += blockDim.x) mx = fmax(mx, (double)x[c]);
    mx = block_reduce<true>(mx, sh);
    double s = 0.0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += exp((double)x[c] - mx);
    s = block_reduce<false>(s, sh);
    double lse = mx + log(s), l = 0.0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        probs[(size_t)b * C + c] = (float)exp((double)x[c] - lse);
        l -= (double)tg[c] * ((double)x[c] - lse);
    }
    l = block_reduce<false>(l, sh);
    if (threadIdx.x == 0) loss[b] = (float)l;
}

__global__ void xent_bwd_kernel(float *dlogits, const float *probs, const float *targets,
                                size_t n, float inv) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dlogits[i] = (probs[i] - targets[i]) * inv;
}

extern "C" void softmax_xent_forward_cuda(const VilXentFwd *a) {
    xent_fwd_kernel<<<a->B, 256, 0, cu()->stream>>>(a->loss, a->probs, a->logits, a->targets, a->C);
    CU_LAUNCH_CHECK();
}

extern "C" void softmax_xent_backward_cuda(const VilXentBwd *a) {
    size_t n = (size_t)a->B * a->C;
    xent_bwd_kernel<<<cu_blocks(n, 256), 256, 0, cu()->stream>>>(a->dlogits, a->probs, a->targets, n,
                                                                 1.0f / (float)a->denom);
    CU_LAUNCH_CHECK();
}
