/* optimizer.cu: AdamW (and Adam), SGD and Lamb on the float32 master weights and state (the formulas of
 * vil/optimizer.c), refreshing the bf16 working copy in the same pass; and the f32 -> bf16
 * conversion of the whole parameter buffer. The bias corrections are computed on the host from
 * the step count, which the host knows: nothing is read back from the device. The model updates
 * all its parameter tensors in one launch (they are contiguous), with a byte mask for the ones
 * exempt from weight decay. Gradient clipping (clip_grad_norm_) runs here too, with the norm left
 * in device memory for the caller to read when it logs. */
#include <math.h>

#include "cuda/cuda_common.cuh"
#include "cuda/ops_cuda.h"

/* l2: torch.optim.Adam's decay, in the gradient before the moments; else AdamW's, in the update */
__global__ void adamw_kernel(float *p, bf16 *work, const float *g, float *m, float *v,
                             const unsigned char *decay, size_t n, float lr, float beta1,
                             float beta2, float eps, float wd, float bc1, float bc2, int l2) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float pi = p[i], wdi = (!decay || decay[i]) ? wd : 0.0f;
        float gi = l2 ? g[i] + wdi * pi : g[i], wdu = l2 ? 0.0f : wdi;
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        pi -= lr * (wdu * pi + (mi / bc1) / (sqrtf(vi / bc2) + eps));
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
    const VilOptimHyper *h = a->h;
    float bc1 = 1.0f - powf(h->beta1, (float)a->step), bc2 = 1.0f - powf(h->beta2, (float)a->step);
    adamw_kernel<<<grid_for(a->n), 256, 0, cu()->stream>>>(a->p, (bf16 *)a->work, a->g, a->m, a->v,
                                                          a->decay, a->n, h->lr, h->beta1,
                                                          h->beta2, h->eps, h->wd, bc1, bc2, h->l2);
    CU_LAUNCH_CHECK();
}

/* torch.optim.SGD, as vil/optimizer.c */
__global__ void sgd_kernel(float *p, bf16 *work, const float *g, float *buf, const unsigned char *decay,
                           size_t n, float lr, float mom, float wd, int nesterov) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float pi = p[i], wdi = (!decay || decay[i]) ? wd : 0.0f;
        float d = g[i] + wdi * pi;
        float b = mom * buf[i] + d;
        buf[i] = b;
        pi = pi - lr * (nesterov ? d + mom * b : b);
        p[i] = pi;
        if (work) work[i] = f2bf(pi);
    }
}

extern "C" void sgd_update_cuda(const VilSgd *a) {
    const VilOptimHyper *h = a->h;
    sgd_kernel<<<grid_for(a->n), 256, 0, cu()->stream>>>(a->p, (bf16 *)a->work, a->g, a->buf, a->decay, a->n,
                                                        h->lr, h->momentum, h->wd, h->nesterov);
    CU_LAUNCH_CHECK();
}

/* timm's Lamb, as vil/optimizer.c. Each tensor (span) gets LAMB_BLOCKS blocks along x (blockIdx.y
 * picks the tensor): the first kernel updates the moments and writes each block's sums of p^2
 * and u^2, the second sums a tensor's blocks in order into its trust ratio (the same bits on
 * every run), the third applies the update. The partial sums take grad_clip's scratch slot: the
 * two ops run one after the other on the stream. */
#define LAMB_BLOCKS 64
#define LAMB_T 256
__device__ __forceinline__ float lamb_u(float m, float v, float p, float bc1, float sbc2, float eps, float wd) {
    return (m / bc1) / (sqrtf(v) / sbc2 + eps) + wd * p;
}
__device__ __forceinline__ VilSpan lamb_span(const VilSpan *spans, int t, size_t n) {
    VilSpan whole = {0, n};
    return spans ? spans[t] : whole;
}
/* the tensor's weight decay: its first element's flag (a tensor decays whole) */
__device__ __forceinline__ float lamb_wd(const unsigned char *decay, VilSpan s, float wd) {
    return s.n > 0 && (!decay || decay[s.offset]) && wd > 0.0f ? wd : 0.0f;
}
__global__ void lamb_moments_kernel(double *part, const float *p, const float *g, float *m, float *v,
                                    const unsigned char *decay, const VilSpan *spans, int n_spans, size_t n,
                                    float beta1, float beta2, float eps, float wd, float bc1, float sbc2) {
    __shared__ double sh[LAMB_T];
    for (int t = blockIdx.y; t < n_spans; t += gridDim.y) {
        VilSpan s = lamb_span(spans, t, n);
        float wdt = lamb_wd(decay, s, wd);
        double sp = 0.0, su = 0.0;
        for (size_t j = blockIdx.x * (size_t)LAMB_T + threadIdx.x; j < s.n; j += (size_t)LAMB_BLOCKS * LAMB_T) {
            size_t i = s.offset + j;
            float gi = g[i];
            float mi = beta1 * m[i] + (1.0f - beta1) * gi;
            float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
            m[i] = mi;
            v[i] = vi;
            float pi = p[i], u = lamb_u(mi, vi, pi, bc1, sbc2, eps, wdt);
            sp = fma((double)pi, (double)pi, sp);
            su = fma((double)u, (double)u, su);
        }
        sp = block_sum_d(sp, sh);
        __syncthreads(); /* sh reused */
        su = block_sum_d(su, sh);
        __syncthreads();
        if (threadIdx.x == 0) {
            part[((size_t)t * LAMB_BLOCKS + blockIdx.x) * 2] = sp;
            part[((size_t)t * LAMB_BLOCKS + blockIdx.x) * 2 + 1] = su;
        }
    }
}
__global__ void lamb_ratio_kernel(float *ratio, const double *part, const unsigned char *decay,
                                  const VilSpan *spans, int n_spans, size_t n, float wd, int clip) {
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < n_spans; t += gridDim.x * blockDim.x) {
        double sp = 0.0, su = 0.0;
        for (int b = 0; b < LAMB_BLOCKS; b++) {
            sp += part[((size_t)t * LAMB_BLOCKS + b) * 2];
            su += part[((size_t)t * LAMB_BLOCKS + b) * 2 + 1];
        }
        float r = 1.0f;
        if (lamb_wd(decay, lamb_span(spans, t, n), wd) > 0.0f && sp > 0.0 && su > 0.0) r = (float)(sqrt(sp) / sqrt(su));
        if (clip && r > 1.0f) r = 1.0f;
        ratio[t] = r;
    }
}
__global__ void lamb_apply_kernel(float *p, bf16 *work, const float *m, const float *v, const float *ratio,
                                  const unsigned char *decay, const VilSpan *spans, int n_spans, size_t n,
                                  float lr, float eps, float wd, float bc1, float sbc2) {
    for (int t = blockIdx.y; t < n_spans; t += gridDim.y) {
        VilSpan s = lamb_span(spans, t, n);
        float wdt = lamb_wd(decay, s, wd), r = ratio[t];
        for (size_t j = blockIdx.x * (size_t)LAMB_T + threadIdx.x; j < s.n; j += (size_t)LAMB_BLOCKS * LAMB_T) {
            size_t i = s.offset + j;
            float pi = p[i];
            pi -= lr * (r * lamb_u(m[i], v[i], pi, bc1, sbc2, eps, wdt));
            p[i] = pi;
            if (work) work[i] = f2bf(pi);
        }
    }
}

extern "C" void lamb_update_cuda(const VilLamb *a) {
    const VilOptimHyper *h = a->h;
    int n_spans = a->spans ? a->n_spans : 1;
    if (n_spans <= 0) return;
    float bc1 = (float)(1.0 - pow(h->beta1, a->step)), sbc2 = (float)sqrt(1.0 - pow(h->beta2, a->step));
    size_t part_bytes = (size_t)n_spans * LAMB_BLOCKS * 2 * sizeof(double);
    char *scr = (char *)cu_scratch(SCR_GNORM, part_bytes + (size_t)n_spans * sizeof(float));
    double *part = (double *)scr;
    float *ratio = (float *)(scr + part_bytes);
    dim3 grid(LAMB_BLOCKS, n_spans < 65535 ? n_spans : 65535);
    lamb_moments_kernel<<<grid, LAMB_T, 0, cu()->stream>>>(part, a->p, a->g, a->m, a->v, a->decay, a->spans,
                                                           n_spans, a->n, h->beta1, h->beta2, h->eps, h->wd,
                                                           bc1, sbc2);
    CU_LAUNCH_CHECK();
    lamb_ratio_kernel<<<(n_spans + 127) / 128, 128, 0, cu()->stream>>>(ratio, part, a->decay, a->spans, n_spans,
                                                                      a->n, h->wd, h->trust_clip);
    CU_LAUNCH_CHECK();
    lamb_apply_kernel<<<grid, LAMB_T, 0, cu()->stream>>>(a->p, (bf16 *)a->work, a->m, a->v, ratio, a->decay,
                                                         a->spans, n_spans, a->n, h->lr, h->eps, h->wd, bc1, sbc2);
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
