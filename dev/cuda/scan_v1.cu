/* scan.cu: the fused bidirectional Longhorn (ViL) / Mamba (ViM) scan, forward and backward, per
 * ../shared/spec/scans.md, with the sigmoid (softplus), the eps normalization, the D skip, the
 * SiLU(z) gate and the direction average fused in; the backward direction runs by reverse
 * indexing, never on flipped copies. State in fp32 registers; nothing of size (L, E, N) is ever
 * stored. Kernels:
 *   scan_pair_kernel     one thread per (sample, channel) runs BOTH directions in one pass, the
 *                        forward one on token s and the backward one on token L-1-s at step s;
 *                        a per-thread stash in shared memory holds each token's first-visit
 *                        output until the other direction reaches it. Forward: writes the gated
 *                        average. Backward prep: recomputes the states, writes dz, the state
 *                        checkpoint every CK steps and the dq partial sums.
 *   scan_adjoint_kernel  one thread per (sample, direction, channel): per chunk of CK steps, in
 *                        reverse, recomputes the states from the chunk's checkpoint into shared
 *                        memory, then runs the reverse adjoint scan, taking h_{t-1} from the
 *                        recomputed states (never dividing by the forget gate); writes du, ddelta
 *                        and the dk (dB) partial sums.
 *   finalize kernels     sum the partials over channel blocks (dk, dq) and samples (dD, dA_log)
 *                        in a fixed order.
 * Sums over channels (dq, dk, dkappa folded into dk) are fp32: a warp reduce-scatter, then the
 * warps of a block in order, then the blocks in order: deterministic, no atomics. */
#include <math.h>
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda/ops_cuda.h"

#define CK 16 /* chunk of scan steps: staging of k/q and checkpoint spacing */
#define FULL 0xffffffffu

typedef struct {
    const bf16 *u[2], *delta[2], *xdbl[2], *z, *dout;
    const float *Dsk[2], *A_log[2];
    bf16 *out, *dz, *du[2], *ddelta[2], *dxdbl[2];
    float *dD[2], *dA[2];
    float *ckpt; /* (B, 2, nck-1, N, E) state at the start of chunks 1.. */
    float *pq;   /* (B, nblk1, 2, L, N) dq partials of the pair kernel's blocks */
    float *pk;   /* (B, 2, nblk2, L, N) dk partials of the adjoint kernel's blocks */
    float *pd;   /* (B, 2, E) dD partials */
    float *pa;   /* (B, 2, E, N) dA_log partials (Mamba) */
    int B, L, E, R, W, ldz, nck, nblk1, nblk2;
} ScanArgs;

/* k/q staging row: k[N] | q[N] | k^2[N] | kappa, padded to float4 */
template <int N>
struct KQ {
    static constexpr int W = 3 * N + 4;
};

/* one level of the butterfly: lanes that differ in bit HALF swap halves of what they hold */
template <int NV, int HALF>
__device__ __forceinline__ void rs_level(float (&v)[NV], int lane) {
    if constexpr (HALF >= 1) {
        bool up = (lane & HALF) != 0;
#pragma unroll
        for (int i = 0; i < HALF; i++) {
            float send = up ? v[i] : v[i + HALF];
            float keep = up ? v[i + HALF] : v[i];
            v[i] = keep + __shfl_xor_sync(FULL, send, HALF);
        }
        rs_level<NV, HALF / 2>(v, lane);
    }
}

/* Sum over the warp of v[lane % NV] for each lane: a butterfly reduce-scatter (each level halves
 * the values a lane holds), then plain xor-sums over the lanes that hold the same index. */
template <int NV>
__device__ __forceinline__ float reduce_scatter(float (&v)[NV], int lane) {
    rs_level<NV, NV / 2>(v, lane);
    float r = v[0];
#pragma unroll
    for (int m = NV; m < 32; m <<= 1) r += __shfl_xor_sync(FULL, r, m);
    return r;
}

/* stage k, q, k^2, kappa of steps [s0, s0 + cs) for nd directions starting at j0 */
template <int N>
__device__ void stage_kq(float *kq /* (nd, CK, KQW) */, const ScanArgs &a, int b, int s0, int cs,
                         int j0, int nd) {
    constexpr int KQW = KQ<N>::W;
    int tot = nd * cs * 2 * N;
    for (int idx = threadIdx.x; idx < tot; idx += blockDim.x) {
        int jj = idx / (cs * 2 * N), rem = idx - jj * cs * 2 * N;
        int i = rem / (2 * N), c = rem - i * 2 * N;
        int j = j0 + jj, s = s0 + i, t = j ? a.L - 1 - s : s;
        float v = bf2f(a.xdbl[j][((size_t)b * a.L + t) * a.W + a.R + c]);
        float *row = kq + (jj * CK + i) * KQW;
        row[c] = v;
        if (c < N) row[2 * N + c] = v * v;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < nd * cs; idx += blockDim.x) {
        int jj = idx / cs, i = idx - jj * cs;
        float *row = kq + (jj * CK + i) * KQW;
        float s = 0.0f;
#pragma unroll
        for (int n = 0; n < N; n++) s += row[2 * N + n];
        row[3 * N] = s;
    }
    __syncthreads();
}

__device__ __forceinline__ float softplusf_(float x) { return x > 20.0f ? x : log1pf(__expf(x)); }

/* One recurrence step of one direction: h <- a h + b; returns y = q.h + D u. */
template <int N, bool MAMBA>
__device__ __forceinline__ float step_fwd(float (&h)[N], const float *row, float u, float dl,
                                          const float (&A)[N], float Dsk) {
    const float4 *r4 = reinterpret_cast<const float4 *>(row);
    float y = 0.0f;
    if (!MAMBA) {
        float kap = row[3 * N];
        float beta = sigmoidf_fast(dl);
        float eps = beta * __frcp_rn(fmaf(beta, kap, 1.0f)), eu = eps * u;
#pragma unroll
        for (int g = 0; g < N / 4; g++) {
            float4 k4 = r4[g], q4 = r4[N / 4 + g], kk4 = r4[N / 2 + g];
            float k[4] = {k4.x, k4.y, k4.z, k4.w}, q[4] = {q4.x, q4.y, q4.z, q4.w};
            float kk[4] = {kk4.x, kk4.y, kk4.z, kk4.w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int n = 4 * g + e;
                h[n] = fmaf(fmaf(-eps, kk[e], 1.0f), h[n], eu * k[e]);
                y = fmaf(q[e], h[n], y);
            }
        }
    } else {
        float dt = softplusf_(dl), dtu = dt * u;
#pragma unroll
        for (int g = 0; g < N / 4; g++) {
            float4 k4 = r4[g], q4 = r4[N / 4 + g];
            float k[4] = {k4.x, k4.y, k4.z, k4.w}, q[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int n = 4 * g + e;
                h[n] = fmaf(__expf(dt * A[n]), h[n], dtu * k[e]);
                y = fmaf(q[e], h[n], y);
            }
        }
    }
    return fmaf(Dsk, u, y);
}

/* ---------------- the pair kernel: both directions per thread ---------------- */
template <int N, bool MAMBA, bool BWD>
__global__ void __launch_bounds__(64) scan_pair_kernel(ScanArgs a) {
    constexpr int KQW = KQ<N>::W;
    extern __shared__ float4 smem4[];
    float *smem = reinterpret_cast<float *>(smem4);
    const int TPB = blockDim.x, L = a.L, E = a.E;
    float *stash = smem;                   /* (L, TPB): first-visit outputs */
    float *kq = stash + (size_t)L * TPB;   /* (2, CK, KQW) */
    float *red = kq + 2 * CK * KQW;        /* (TPB/32, CK, 2N): per-warp dq sums (BWD) */
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int b = blockIdx.y, d = blockIdx.x * TPB + tid;
    bool act = d < E;
    float h[2][N], A[2][N], Dsk[2];
#pragma unroll
    for (int j = 0; j < 2; j++) {
        Dsk[j] = act ? a.Dsk[j][d] : 0.0f;
#pragma unroll
        for (int n = 0; n < N; n++) {
            h[j][n] = 0.0f;
            A[j][n] = (MAMBA && act) ? -expf(a.A_log[j][(size_t)d * N + n]) : 0.0f;
        }
    }
    for (int s0 = 0; s0 < L; s0 += CK) {
        int cs = min(CK, L - s0);
        __syncthreads(); /* the previous chunk's readers of kq and red are done */
        stage_kq<N>(kq, a, b, s0, cs, 0, 2);
        for (int i = 0; i < cs; i++) {
            int s = s0 + i, tt[2] = {s, L - 1 - s};
            float y[2], gy[2] = {0.0f, 0.0f}, sg[2] = {0.0f, 0.0f}, zz[2] = {0.0f, 0.0f};
            float go[2] = {0.0f, 0.0f};
#pragma unroll
            for (int j = 0; j < 2; j++) {
                size_t r = (size_t)b * L + tt[j];
                float uj = act ? bf2f(a.u[j][r * E + d]) : 0.0f;
                float dl = act ? bf2f(a.delta[j][r * E + d]) : 0.0f;
                y[j] = step_fwd<N, MAMBA>(h[j], kq + (j * CK + i) * KQW, uj, dl, A[j], Dsk[j]);
                if (BWD && act) {
                    zz[j] = bf2f(a.z[r * a.ldz + d]);
                    go[j] = 0.5f * bf2f(a.dout[r * E + d]);
                    sg[j] = sigmoidf_fast(zz[j]);
                    gy[j] = go[j] * zz[j] * sg[j];
                }
            }
            if (BWD) {
                /* dq_t[n] = sum_d gy_t[d] h_t[d, n]: both directions' 2N values in one pass */
                float v[2 * N];
#pragma unroll
                for (int j = 0; j < 2; j++)
#pragma unroll
                    for (int n = 0; n < N; n++) v[j * N + n] = gy[j] * h[j][n];
                float r = reduce_scatter<2 * N>(v, lane);
                if (lane < 2 * N) red[(warp * CK + i) * 2 * N + lane] = r;
            }
            /* pair the two directions' outputs of each token */
            int t0 = tt[0], t1 = tt[1];
            if (s < t1) {
                stash[(size_t)t0 * TPB + tid] = y[0];
                stash[(size_t)t1 * TPB + tid] = y[1];
            } else if (act) {
                float tot[2];
                int nt = s == t1 ? 1 : 2; /* the middle token (odd L) is visited once by both */
                if (nt == 1) tot[0] = y[0] + y[1];
                else tot[0] = y[0] + stash[(size_t)t0 * TPB + tid], tot[1] = y[1] + stash[(size_t)t1 * TPB + tid];
#pragma unroll
                for (int k = 0; k < 2; k++) {
                    if (k >= nt) break;
                    size_t r = (size_t)b * L + tt[k];
                    if (!BWD) {
                        float zv = bf2f(a.z[r * a.ldz + d]);
                        a.out[r * E + d] = f2bf(0.5f * zv * sigmoidf_fast(zv) * tot[k]);
                    } else {
                        float dsilu = sg[k] * (1.0f + zz[k] * (1.0f - sg[k]));
                        a.dz[r * a.ldz + d] = f2bf(go[k] * dsilu * tot[k]);
                    }
                }
            }
        }
        if (BWD) {
            if (s0 + CK < L && act) {
                int c = s0 / CK + 1;
#pragma unroll
                for (int j = 0; j < 2; j++)
#pragma unroll
                    for (int n = 0; n < N; n++)
                        a.ckpt[((((size_t)b * 2 + j) * (a.nck - 1) + (c - 1)) * N + n) * E + d] = h[j][n];
            }
            __syncthreads();
            int nw = TPB / 32;
            for (int idx = tid; idx < cs * 2 * N; idx += TPB) {
                int i = idx / (2 * N), c = idx - i * 2 * N, j = c / N, n = c - j * N;
                float sum = 0.0f;
                for (int w = 0; w < nw; w++) sum += red[(w * CK + i) * 2 * N + c];
                int t = j ? L - 1 - (s0 + i) : s0 + i;
                a.pq[((((size_t)b * a.nblk1 + blockIdx.x) * 2 + j) * L + t) * N + n] = sum;
            }
        }
    }
}

/* ---------------- the adjoint kernel: one direction per thread ---------------- */
template <int N, bool MAMBA>
__global__ void __launch_bounds__(64) scan_adjoint_kernel(ScanArgs a) {
    constexpr int KQW = KQ<N>::W, N4 = N / 4;
    extern __shared__ float4 smem4[];
    const int TPB = blockDim.x, L = a.L, E = a.E;
    float4 *hist = smem4;                                                 /* (CK, N/4, TPB) */
    float *kq = reinterpret_cast<float *>(smem4 + (size_t)CK * N4 * TPB); /* (CK, KQW) */
    float *red = kq + CK * KQW;                                           /* (TPB/32, CK, N) */
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int j = blockIdx.y, b = blockIdx.z, d = blockIdx.x * TPB + tid;
    bool act = d < E;
    float Dsk = act ? a.Dsk[j][d] : 0.0f;
    float A[N], lam[N], anext[N], dAacc[N], dDacc = 0.0f;
#pragma unroll
    for (int n = 0; n < N; n++) {
        A[n] = (MAMBA && act) ? -expf(a.A_log[j][(size_t)d * N + n]) : 0.0f;
        lam[n] = anext[n] = dAacc[n] = 0.0f;
    }
    for (int c = a.nck - 1; c >= 0; c--) {
        int s0 = c * CK, cs = min(CK, L - s0);
        __syncthreads(); /* the previous chunk's readers of kq and red are done */
        stage_kq<N>(kq, a, b, s0, cs, j, 1);
        float h0[N], h[N];
#pragma unroll
        for (int n = 0; n < N; n++) {
            h0[n] = (c > 0 && act) ? a.ckpt[((((size_t)b * 2 + j) * (a.nck - 1) + (c - 1)) * N + n) * E + d] : 0.0f;
            h[n] = h0[n];
        }
        /* recompute the chunk's states: hist[i] = h after step s0 + i */
        for (int i = 0; i < cs; i++) {
            int s = s0 + i, t = j ? L - 1 - s : s;
            size_t r = (size_t)b * L + t;
            float uj = act ? bf2f(a.u[j][r * E + d]) : 0.0f;
            float dl = act ? bf2f(a.delta[j][r * E + d]) : 0.0f;
            step_fwd<N, MAMBA>(h, kq + i * KQW, uj, dl, A, Dsk);
#pragma unroll
            for (int g = 0; g < N4; g++)
                hist[((size_t)i * N4 + g) * TPB + tid] = make_float4(h[4 * g], h[4 * g + 1], h[4 * g + 2], h[4 * g + 3]);
        }
        /* reverse adjoint scan over the chunk */
        for (int i = cs - 1; i >= 0; i--) {
            int s = s0 + i, t = j ? L - 1 - s : s;
            size_t r = (size_t)b * L + t;
            float u = 0.0f, dl = 0.0f, gy = 0.0f;
            if (act) {
                u = bf2f(a.u[j][r * E + d]);
                dl = bf2f(a.delta[j][r * E + d]);
                float zv = bf2f(a.z[r * a.ldz + d]);
                gy = 0.5f * bf2f(a.dout[r * E + d]) * zv * sigmoidf_fast(zv);
            }
            float hp[N];
            if (i > 0) {
#pragma unroll
                for (int g = 0; g < N4; g++) {
                    float4 v = hist[((size_t)(i - 1) * N4 + g) * TPB + tid];
                    hp[4 * g] = v.x, hp[4 * g + 1] = v.y, hp[4 * g + 2] = v.z, hp[4 * g + 3] = v.w;
                }
            } else {
#pragma unroll
                for (int n = 0; n < N; n++) hp[n] = h0[n];
            }
            const float *row = kq + i * KQW;
            const float4 *r4 = reinterpret_cast<const float4 *>(row);
            float dkv[N], du, ddl;
            float S1 = 0.0f, S2 = 0.0f;
            if (!MAMBA) {
                float kap = row[3 * N];
                float beta = sigmoidf_fast(dl);
                float rden = __frcp_rn(fmaf(beta, kap, 1.0f)), eps = beta * rden;
#pragma unroll
                for (int g = 0; g < N4; g++) {
                    float4 k4 = r4[g], q4 = r4[N4 + g], kk4 = r4[2 * N4 + g];
                    float k[4] = {k4.x, k4.y, k4.z, k4.w}, q[4] = {q4.x, q4.y, q4.z, q4.w};
                    float kk[4] = {kk4.x, kk4.y, kk4.z, kk4.w};
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int n = 4 * g + e;
                        float l = fmaf(anext[n], lam[n], gy * q[e]);
                        lam[n] = l;
                        S1 = fmaf(l, k[e], S1);              /* sum_n lam k */
                        S2 = fmaf(l * hp[n], kk[e], S2);     /* sum_n lam k^2 h_{t-1} */
                        dkv[n] = l * eps * fmaf(-2.0f * k[e], hp[n], u);
                        anext[n] = fmaf(-eps, kk[e], 1.0f);  /* a_t, used at step t-1 */
                    }
                }
                du = fmaf(gy, Dsk, eps * S1);
                float deps = fmaf(u, S1, -S2); /* sum_n lam (u k - k^2 h_{t-1}) */
                float rden2 = rden * rden;
                ddl = deps * rden2 * beta * (1.0f - beta);
                float dkap = -deps * beta * beta * rden2;
                /* dk += 2 k dkappa, folded in per channel before the sum over channels */
#pragma unroll
                for (int g = 0; g < N4; g++) {
                    float4 k4 = r4[g];
                    float k[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
                    for (int e = 0; e < 4; e++) dkv[4 * g + e] = fmaf(2.0f * k[e], dkap, dkv[4 * g + e]);
                }
            } else {
                float dt = softplusf_(dl), dtu = dt * u;
#pragma unroll
                for (int g = 0; g < N4; g++) {
                    float4 k4 = r4[g], q4 = r4[N4 + g];
                    float k[4] = {k4.x, k4.y, k4.z, k4.w}, q[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int n = 4 * g + e;
                        float acur = __expf(dt * A[n]);
                        float l = fmaf(anext[n], lam[n], gy * q[e]);
                        lam[n] = l;
                        float X = l * hp[n];
                        S1 = fmaf(l, k[e], S1);                     /* sum_n lam B */
                        S2 = fmaf(A[n] * acur, X, S2);              /* sum_n lam A a h_{t-1} */
                        dAacc[n] = fmaf(dt * acur, X, dAacc[n]);
                        dkv[n] = l * dtu;                           /* dB */
                        anext[n] = acur;
                    }
                }
                du = fmaf(gy, Dsk, dt * S1);
                ddl = fmaf(u, S1, S2) * sigmoidf_fast(dl);
            }
            if (act) {
                a.du[j][r * E + d] = f2bf(du);
                a.ddelta[j][r * E + d] = f2bf(ddl);
            }
            dDacc = fmaf(gy, u, dDacc);
            float sum = reduce_scatter<N>(dkv, lane);
            if (lane < N) red[(warp * CK + i) * N + lane] = sum;
        }
        __syncthreads();
        int nw = TPB / 32;
        for (int idx = tid; idx < cs * N; idx += TPB) {
            int i = idx / N, n = idx - i * N;
            float sum = 0.0f;
            for (int w = 0; w < nw; w++) sum += red[(w * CK + i) * N + n];
            int t = j ? L - 1 - (s0 + i) : s0 + i;
            a.pk[((((size_t)b * 2 + j) * a.nblk2 + blockIdx.x) * L + t) * N + n] = sum;
        }
    }
    if (act) {
        a.pd[((size_t)b * 2 + j) * E + d] = dDacc;
        if (MAMBA)
#pragma unroll
            for (int n = 0; n < N; n++) a.pa[(((size_t)b * 2 + j) * E + d) * N + n] = dAacc[n] * A[n];
    }
}

/* ---------------- finalize: partial sums in a fixed order ---------------- */
template <int N>
__global__ void scan_dkdq_kernel(ScanArgs a) {
    size_t tot = (size_t)a.B * 2 * a.L * N;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < tot; idx += (size_t)gridDim.x * blockDim.x) {
        int n = (int)(idx % N);
        size_t r = idx / N;
        int t = (int)(r % a.L);
        r /= a.L;
        int j = (int)(r % 2), b = (int)(r / 2);
        float dq = 0.0f, dk = 0.0f;
        for (int k = 0; k < a.nblk1; k++) dq += a.pq[((((size_t)b * a.nblk1 + k) * 2 + j) * a.L + t) * N + n];
        for (int k = 0; k < a.nblk2; k++) dk += a.pk[((((size_t)b * 2 + j) * a.nblk2 + k) * a.L + t) * N + n];
        bf16 *row = a.dxdbl[j] + ((size_t)b * a.L + t) * a.W + a.R;
        row[n] = f2bf(dk);
        row[N + n] = f2bf(dq);
    }
}

__global__ void scan_param_grad_kernel(ScanArgs a, int N, int mamba) {
    int per = mamba ? a.E * (N + 1) : a.E; /* per direction: dD[E] then dA_log[E*N] */
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= 2 * per) return;
    int j = idx / per, k = idx - j * per;
    float s = 0.0f;
    if (k < a.E) {
        for (int b = 0; b < a.B; b++) s += a.pd[((size_t)b * 2 + j) * a.E + k];
        a.dD[j][k] += s;
    } else {
        k -= a.E;
        for (int b = 0; b < a.B; b++) s += a.pa[((size_t)b * 2 + j) * a.E * N + k];
        a.dA[j][k] += s;
    }
}

/* ---------------- host side ---------------- */
static size_t pair_smem(int N, int L, int tpb, int bwd) {
    return ((size_t)L * tpb + 2 * CK * (3 * N + 4) + (bwd ? (size_t)(tpb / 32) * CK * 2 * N : 0)) * sizeof(float);
}
static size_t adjoint_smem(int N, int tpb) {
    return ((size_t)CK * N * tpb + CK * (3 * N + 4) + (size_t)(tpb / 32) * CK * N) * sizeof(float);
}

/* the stash grows with L: 64 threads a block while it stays small, 32 for long sequences */
static int pair_tpb(int N, int L, int bwd) {
    if (pair_smem(N, L, 64, bwd) <= (size_t)110 << 10) return 64;
    if (pair_smem(N, L, 32, bwd) <= g_cu.smem_optin) return 32;
    VIL_FATAL("scan: L = %d tokens is over what the scan kernel's shared-memory stash holds", L);
}

template <typename K>
static void set_smem(K kernel, size_t bytes) {
    if (bytes > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

static void fill_common(ScanArgs *a, const void *const u[2], const void *const delta[2],
                        const void *const xdbl[2], const void *z, const float *const D[2],
                        const float *const A_log[2], int B, int L, int E, int N, int R, int ldz) {
    memset(a, 0, sizeof *a);
    for (int j = 0; j < 2; j++) {
        a->u[j] = (const bf16 *)u[j];
        a->delta[j] = (const bf16 *)delta[j];
        a->xdbl[j] = (const bf16 *)xdbl[j];
        a->Dsk[j] = D[j];
        a->A_log[j] = A_log ? A_log[j] : NULL;
    }
    a->z = (const bf16 *)z;
    a->B = B, a->L = L, a->E = E, a->R = R, a->W = R + 2 * N, a->ldz = ldz;
    a->nck = (L + CK - 1) / CK;
}

template <int N, bool MAMBA>
static void forward_impl(ScanArgs a) {
    int tpb = pair_tpb(N, a.L, 0);
    size_t sm = pair_smem(N, a.L, tpb, 0);
    set_smem(scan_pair_kernel<N, MAMBA, false>, sm);
    dim3 grid((a.E + tpb - 1) / tpb, a.B);
    scan_pair_kernel<N, MAMBA, false><<<grid, tpb, sm, g_cu.stream>>>(a);
    CU_LAUNCH_CHECK();
}

template <int N, bool MAMBA>
static void backward_impl(ScanArgs a) {
    int tpb1 = pair_tpb(N, a.L, 1), tpb2 = 64;
    a.nblk1 = (a.E + tpb1 - 1) / tpb1;
    a.nblk2 = (a.E + tpb2 - 1) / tpb2;
    size_t B = a.B, L = a.L, E = a.E;
    a.ckpt = (float *)cu_scratch(SCR_SCAN_CKPT, B * 2 * (a.nck > 1 ? a.nck - 1 : 1) * N * E * sizeof(float));
    a.pq = (float *)cu_scratch(SCR_SCAN_PQ, B * a.nblk1 * 2 * L * N * sizeof(float));
    a.pk = (float *)cu_scratch(SCR_SCAN_PK, B * 2 * a.nblk2 * L * N * sizeof(float));
    float *pd = (float *)cu_scratch(SCR_SCAN_PD, B * 2 * E * (MAMBA ? N + 1 : 1) * sizeof(float));
    a.pd = pd;
    a.pa = pd + B * 2 * E;
    size_t sm1 = pair_smem(N, a.L, tpb1, 1), sm2 = adjoint_smem(N, tpb2);
    set_smem(scan_pair_kernel<N, MAMBA, true>, sm1);
    set_smem(scan_adjoint_kernel<N, MAMBA>, sm2);
    scan_pair_kernel<N, MAMBA, true><<<dim3(a.nblk1, a.B), tpb1, sm1, g_cu.stream>>>(a);
    CU_LAUNCH_CHECK();
    scan_adjoint_kernel<N, MAMBA><<<dim3(a.nblk2, 2, a.B), tpb2, sm2, g_cu.stream>>>(a);
    CU_LAUNCH_CHECK();
    size_t tot = B * 2 * L * N;
    int blocks = cu_blocks(tot, 256);
    if (blocks > g_cu.num_sms * 16) blocks = g_cu.num_sms * 16;
    scan_dkdq_kernel<N><<<blocks, 256, 0, g_cu.stream>>>(a);
    CU_LAUNCH_CHECK();
    int np = 2 * (int)E * (MAMBA ? N + 1 : 1);
    scan_param_grad_kernel<<<cu_blocks(np, 128), 128, 0, g_cu.stream>>>(a, N, MAMBA);
    CU_LAUNCH_CHECK();
}

#define DISPATCH_N(N_, MAMBA_, FN, ARG)                                                        \
    do {                                                                                       \
        if ((N_) == 16) { if (MAMBA_) FN<16, true>(ARG); else FN<16, false>(ARG); }            \
        else if ((N_) == 8) { if (MAMBA_) FN<8, true>(ARG); else FN<8, false>(ARG); }          \
        else if ((N_) == 4) { if (MAMBA_) FN<4, true>(ARG); else FN<4, false>(ARG); }          \
        else VIL_FATAL("scan: d_state = %d; the CUDA scan is built for 4, 8 and 16", (N_));     \
    } while (0)

extern "C" void scan_bidir_forward_cuda(void *out, const void *const u[2],
                                        const void *const delta[2], const void *const xdbl[2],
                                        const void *z, const float *const D[2],
                                        const float *const A_log[2], int B, int L, int E, int N,
                                        int R, int ldz) {
    cu_ensure_init();
    ScanArgs a;
    fill_common(&a, u, delta, xdbl, z, D, A_log, B, L, E, N, R, ldz);
    a.out = (bf16 *)out;
    DISPATCH_N(N, A_log != NULL, forward_impl, a);
}

extern "C" void scan_bidir_backward_cuda(void *const du[2], void *const ddelta[2],
                                         void *const dxdbl[2], void *dz, float *const dD[2],
                                         float *const dA_log[2], const void *dout,
                                         const void *const u[2], const void *const delta[2],
                                         const void *const xdbl[2], const void *z,
                                         const float *const D[2], const float *const A_log[2],
                                         int B, int L, int E, int N, int R, int ldz) {
    cu_ensure_init();
    ScanArgs a;
    fill_common(&a, u, delta, xdbl, z, D, A_log, B, L, E, N, R, ldz);
    a.dout = (const bf16 *)dout;
    a.dz = (bf16 *)dz;
    for (int j = 0; j < 2; j++) {
        a.du[j] = (bf16 *)du[j];
        a.ddelta[j] = (bf16 *)ddelta[j];
        a.dxdbl[j] = (bf16 *)dxdbl[j];
        a.dD[j] = dD[j];
        a.dA[j] = dA_log ? dA_log[j] : NULL;
    }
    DISPATCH_N(N, A_log != NULL, backward_impl, a);
}
