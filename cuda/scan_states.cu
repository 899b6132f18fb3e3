/* scan_states.cu: one direction's states along the sequence for `vil states` (VilScanStates),
 * off the training and inference paths: a thread per (sample, channel) walks the tokens in the
 * direction's order with the recurrence's own step (scan_rec.cuh's pre and upd), sums h^2 over
 * its states, and the warp's sum goes into each token's hsq with one atomic add (so the sum over
 * channels is in no fixed order: within float rounding of the CPU's). Simple, not fast. */
#include "cuda/cuda_common.cuh"
#include "cuda/ops_cuda.h"
#include "cuda/scan_rec.cuh"

#define STATES_MAX_N 64 /* the CPU scan's bound (vil/scan.c MAXN) */

template <class R>
__global__ void scan_states_kernel(VilScanStates a) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y, N = a.N, E = a.E, L = a.L;
    const bool act = e < E;
    const bf16 *u = (const bf16 *)a.u, *dl = (const bf16 *)a.delta, *x = (const bf16 *)a.xdbl;
    float h[STATES_MAX_N], A[STATES_MAX_N];
    for (int n = 0; n < N; n++) {
        h[n] = 0.0f;
        A[n] = R::HAS_A && act ? -expf(a.A_log[(size_t)e * N + n]) : 0.0f;
    }
    for (int s = 0; s < L; s++) {
        const int t = a.reverse ? L - 1 - s : s;
        const size_t row = (size_t)b * L + t;
        const bf16 *k = x + row * a.xdbl_ld + a.dt_ld;
        float hsq = 0.0f;
        if (act) {
            float kap = 0.0f;
            for (int n = 0; n < N; n++) kap = fmaf(bf2f(k[n]), bf2f(k[n]), kap);
            float p0, p1;
            R::pre(p0, p1, kap, bf2f(u[row * E + e]), bf2f(dl[row * E + e]));
            for (int n = 0; n < N; n++) {
                h[n] = R::upd(h[n], bf2f(k[n]), p0, p1, A[n]);
                hsq = fmaf(h[n], h[n], hsq);
            }
        }
        for (int o = 16; o > 0; o >>= 1) hsq += __shfl_xor_sync(0xffffffffu, hsq, o);
        if ((threadIdx.x & 31) == 0) atomicAdd(&a.hsq[row], hsq);
    }
    if (act && a.hT)
        for (int n = 0; n < N; n++) a.hT[((size_t)b * N + n) * E + e] = h[n];
}

template <class R>
static void states_launch(const VilScanStates *p) {
    const int threads = 128;
    CUDA_CHECK(cudaMemsetAsync(p->hsq, 0, (size_t)p->B * p->L * sizeof(float), cu()->stream));
    dim3 grid((p->E + threads - 1) / threads, p->B);
    scan_states_kernel<R><<<grid, threads, 0, cu()->stream>>>(*p);
    CU_LAUNCH_CHECK();
}

extern "C" void scan_dir_states_cuda(const VilScanStates *p) {
    if (p->N < 1 || p->N > STATES_MAX_N) VIL_FATAL("scan states: d_state %d outside 1..%d", p->N, STATES_MAX_N);
#define STATES_CASE(U, l, P, ...) \
    case VIL_REC_##U: states_launch<P>(p); return;
    switch (p->rec) { VIL_RECURRENCE_LIST(STATES_CASE) }
#undef STATES_CASE
    VIL_FATAL("scan states: recurrence %d", (int)p->rec);
}
