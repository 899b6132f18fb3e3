/* init_state.cu: the ops of the initial-state interventions (vil/backend.h: VilStateInit,
 * VilStateMoments, VilStateFit; CPU reference vil/init_state.c). The random numbers are
 * vil/init_state.h's, the same functions as the CPU's (precise logf, cosf, sqrtf: no fast-math
 * intrinsics), so a draw differs from the CPU's by float rounding alone. */
#include "cuda/cuda_common.cuh"
#include "cuda/ops_cuda.h"
#include "vil/init_state.h"

static int grid_for(size_t n) { return cu_blocks_capped(n, 256, 8); }

/* one thread per element (b, i) of h0 (B, S) */
__global__ void state_init_kernel(VilStateInit a) {
    const size_t tot = (size_t)a.B * a.S;
    const int g = a.group > 1 ? a.group : 1;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < tot; idx += (size_t)gridDim.x * blockDim.x) {
        const int b = (int)(idx / a.S), i = (int)(idx % a.S), k = i / g;
        const uint64_t key = vil_state_key(a.seed, (uint64_t)(a.first + b));
        if (a.drop > 0.0f && vil_state_uniform(key, VIL_STATE_DROP_DRAW) < a.drop) a.h0[idx] = 0.0f;
        else if (a.prev) a.h0[idx] = a.prev[idx];
        else if (a.mean_only && a.mean) a.h0[idx] = a.mean[k];
        else {
            const float sd = a.var ? sqrtf(a.var[k]) : a.sigma;
            a.h0[idx] = (a.mean ? a.mean[k] : 0.0f) + sd * vil_state_normal(key, (uint64_t)i);
        }
    }
}

extern "C" void state_init_cuda(const VilStateInit *a) {
    const size_t tot = (size_t)a->B * a->S;
    if (tot == 0) return;
    state_init_kernel<<<grid_for(tot), 256, 0, cu()->stream>>>(*a);
    CU_LAUNCH_CHECK();
}

/* one thread per element i: the samples summed in order */
__global__ void state_moments_kernel(float *sum, float *sq, const float *hT, int B, int S) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)S; i += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f, q = 0.0f;
        for (int b = 0; b < B; b++) {
            const float x = hT[(size_t)b * S + i];
            s += x, q += x * x;
        }
        sum[i] = s, sq[i] = q;
    }
}

extern "C" void state_moments_cuda(const VilStateMoments *a) {
    if (a->S <= 0) return;
    state_moments_kernel<<<grid_for((size_t)a->S), 256, 0, cu()->stream>>>(a->sum, a->sq, a->hT, a->B, a->S);
    CU_LAUNCH_CHECK();
}

__global__ void state_fit_kernel(float *mean, float *var, const float *sum, const float *sq, size_t n,
                                 float inv, float keep) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float bm = sum[i] * inv, bv = fmaxf(sq[i] * inv - bm * bm, 0.0f);
        mean[i] = keep * mean[i] + (1.0f - keep) * bm;
        var[i] = keep * var[i] + (1.0f - keep) * bv;
    }
}

/* group > 1: one block per statistic k, its group's sums in double (block_sum_d) */
#define FIT_T 256
__global__ void state_fit_group_kernel(float *mean, float *var, const float *sum, const float *sq, size_t g,
                                       double inv, float keep) {
    __shared__ double sh[FIT_T];
    const size_t k = blockIdx.x;
    double s = 0.0, q = 0.0;
    for (size_t t = threadIdx.x; t < g; t += FIT_T) s += sum[k * g + t], q += sq[k * g + t];
    s = block_sum_d(s, sh);
    __syncthreads(); /* every thread has read sh[0] before it is written again */
    q = block_sum_d(q, sh);
    if (threadIdx.x != 0) return;
    const double bm = s * inv, bv = fmax(q * inv - bm * bm, 0.0);
    mean[k] = keep * mean[k] + (1.0f - keep) * (float)bm;
    var[k] = keep * var[k] + (1.0f - keep) * (float)bv;
}

extern "C" void state_fit_cuda(const VilStateFit *a) {
    if (a->n == 0) return;
    if (a->group > 1) {
        state_fit_group_kernel<<<(unsigned)(a->n / a->group), FIT_T, 0, cu()->stream>>>(
            a->mean, a->var, a->sum, a->sq, a->group, 1.0 / ((double)a->count * (double)a->group), a->keep);
        CU_LAUNCH_CHECK();
        return;
    }
    state_fit_kernel<<<grid_for(a->n), 256, 0, cu()->stream>>>(a->mean, a->var, a->sum, a->sq, a->n,
                                                                1.0f / a->count, a->keep);
    CU_LAUNCH_CHECK();
}
