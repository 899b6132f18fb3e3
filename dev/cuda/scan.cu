/* scan.cu: the bidirectional scan of the mixer (doc/scans.md), forward and backward, of any
 * recurrence of vil/rec/list.h (Longhorn unless --rec names another; --mamba is --rec mamba), at
 * ViL-Tiny's shapes: each version is validated against vil/scan.c's
 * scan_bidir_forward/backward, then timed.
 *   build/dev/cuda/scan [version] [B] [iters] [--rec ID] [--cpu]
 * Version 1 is the readable starting point: one thread per (sample, channel) walks the tokens
 * with its N-wide state in fp32 registers, both directions in turn, with the CPU's step pieces
 * of the recurrence (vil/rec/all.h, host/device functions under nvcc). Version 2 is the
 * backend's op (cuda/scan.cu), what the model runs. */
#include "dev/cuda/harness.h"
#include "vil/rec/all.h"

#define NAIVE_MAXN 16   /* the state width version 1 holds (ViL's d_state) */
#define NAIVE_THREADS 128

/* ---------------- version 1: naive ---------------- */

__host__ __device__ inline int tok(int s, int L, int reverse) { return reverse ? L - 1 - s : s; }

/* channel e's parameter values A[n] (vil_rec_params: Mamba's -exp(A_log)), 0 where the
 * recurrence has none */
__host__ __device__ inline void naive_params(float *A, VilRecurrence rec, const float *A_log, int e, int N) {
    for (int n = 0; n < N; n++) A[n] = 0.0f;
    if (vil_rec_param(rec)) vil_rec_params(rec, A, A_log, e, 1, N, 1);
}
/* kappa = |k|^2 where the recurrence reads it */
__host__ __device__ inline float naive_kappa(VilRecurrence rec, const bf16 *k, int N) {
    float kap = 0.0f;
    if (vil_rec_kappa(rec))
        for (int n = 0; n < N; n++) kap += h_bf2f(k[n]) * h_bf2f(k[n]);
    return kap;
}

/* One step of channel e's recurrence over a token: the state h advanced in place (u the input,
 * dl the raw delta, k and q the token's N-wide rows, A channel e's parameter values); returns
 * y = h . q + Dskip u. */
__host__ __device__ inline float naive_step(float *h, VilRecurrence rec, float u, float dl, const bf16 *k,
                                            const bf16 *q, const float *A, float Dskip, int N) {
    float aux0, aux1, s = vil_rec_step(rec, dl, naive_kappa(rec, k, N), &aux0, &aux1);
    float y = vil_rec_out_init(rec, Dskip, u);
    for (int n = 0; n < N; n++) {
        float kn = h_bf2f(k[n]);
        h[n] = vil_rec_decay(rec, s, kn * kn, A[n]) * h[n] + s * u * kn;
        y += h[n] * h_bf2f(q[n]);
    }
    return vil_rec_out_final(rec, y, Dskip, u);
}

/* float32 scratch of version 1 */
typedef struct {
    float *ysum;   /* (B, L, E): direction 0's gated output, until direction 1 adds its own */
    float *hist;   /* (B, E, L, N): each thread's states after every step */
    float *dzf;    /* (B, L, E): direction 0's dz, until direction 1 adds its own */
    float *dkq[2]; /* (B, L, 2N): dk | dq summed over the channels */
    float *dkap[2];/* (B, L): the gradient of kappa = |k|^2 (Longhorn), summed over the channels */
} NaiveScratch;

/* forward, thread (b, e): out = (y_0 + y_1) / 2 * SiLU(z) */
__host__ __device__ inline void naive_fwd_one(const VilScanFwd &a, const NaiveScratch &w, int b, int e) {
    int L = a.L, E = a.E, N = a.N;
    const bf16 *z = (const bf16 *)a.z;
    for (int j = 0; j < 2; j++) {
        const bf16 *u = (const bf16 *)a.u[j], *dl = (const bf16 *)a.delta[j], *x = (const bf16 *)a.xdbl[j];
        float h[NAIVE_MAXN] = {0}, A[NAIVE_MAXN];
        naive_params(A, a.rec, a.A_log[j], e, N);
        for (int s = 0; s < L; s++) {
            size_t r = (size_t)b * L + tok(s, L, j), i = r * E + e;
            const bf16 *k = x + r * a.xdbl_ld + a.dt_ld;
            float y = naive_step(h, a.rec, h_bf2f(u[i]), h_bf2f(dl[i]), k, k + N, A, a.D[j][e], N);
            float zz = h_bf2f(z[r * a.ldz + e]), g = 0.5f * y * zz * h_sigmoid(zz);
            if (j == 0) w.ysum[i] = g;
            else ((bf16 *)a.out)[i] = h_f2bf(w.ysum[i] + g);
        }
    }
}
__global__ void naive_fwd(VilScanFwd a, NaiveScratch w) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e < a.E) naive_fwd_one(a, w, blockIdx.y, e);
}

/* backward, thread (b, e): per direction the forward again (states kept, dz), then the adjoint
 * from the last step back (vil/scan.c has the same loops over a block of channels) */
__host__ __device__ inline void naive_bwd_one(const VilScanBwd &a, const NaiveScratch &w, int b, int e) {
    int L = a.L, E = a.E, N = a.N;
    const VilRecurrence rec = a.rec;
    const bf16 *z = (const bf16 *)a.z, *dout = (const bf16 *)a.dout;
    float *hist = w.hist + ((size_t)b * E + e) * L * N;
    for (int j = 0; j < 2; j++) {
        const bf16 *u = (const bf16 *)a.u[j], *dl = (const bf16 *)a.delta[j], *x = (const bf16 *)a.xdbl[j];
        float Dskip = a.D[j][e];
        float h[NAIVE_MAXN] = {0}, A[NAIVE_MAXN];
        naive_params(A, rec, a.A_log[j], e, N);
        for (int s = 0; s < L; s++) {
            size_t r = (size_t)b * L + tok(s, L, j), i = r * E + e;
            const bf16 *k = x + r * a.xdbl_ld + a.dt_ld;
            float y = naive_step(h, rec, h_bf2f(u[i]), h_bf2f(dl[i]), k, k + N, A, Dskip, N);
            for (int n = 0; n < N; n++) hist[(size_t)s * N + n] = h[n];
            float zz = h_bf2f(z[r * a.ldz + e]), sg = h_sigmoid(zz), g = 0.5f * h_bf2f(dout[i]);
            float dzv = g * y * sg * (1.0f + zz * (1.0f - sg));
            if (j == 0) w.dzf[i] = dzv;
            else ((bf16 *)a.dz)[r * a.ldz + e] = h_f2bf(w.dzf[i] + dzv);
        }
        /* lam: the adjoint of the state; anext: d h_{s+1} / d h_s of the step after */
        float lam[NAIVE_MAXN] = {0}, anext[NAIVE_MAXN] = {0}, dA[NAIVE_MAXN] = {0};
        float dD = 0.0f, dsum = 0.0f;
        for (int s = L - 1; s >= 0; s--) {
            size_t r = (size_t)b * L + tok(s, L, j), i = r * E + e;
            const bf16 *k = x + r * a.xdbl_ld + a.dt_ld, *q = k + N;
            float *dk = w.dkq[j] + r * 2 * N, *dq = dk + N;
            const float *hc = hist + (size_t)s * N, *hp = s > 0 ? hist + (size_t)(s - 1) * N : NULL;
            float ut = h_bf2f(u[i]), dlt = h_bf2f(dl[i]), zz = h_bf2f(z[r * a.ldz + e]);
            float gy = 0.5f * h_bf2f(dout[i]) * zz * h_sigmoid(zz);
            float aux0, aux1, s_t = vil_rec_step(rec, dlt, naive_kappa(rec, k, N), &aux0, &aux1);
            float du = gy * Dskip, ds = 0.0f, dkap = 0.0f;
            for (int n = 0; n < N; n++) {
                float kn = h_bf2f(k[n]), hpn = hp ? hp[n] : 0.0f, an = vil_rec_decay(rec, s_t, kn * kn, A[n]);
                lam[n] = gy * h_bf2f(q[n]) + anext[n] * lam[n];
                VilRecAdj g = vil_rec_adjoint(rec, lam[n], s_t, an, ut, kn, kn * kn, hpn, A[n]);
                h_add(&dq[n], gy * hc[n]);
                h_add(&dk[n], g.dk);
                du += lam[n] * s_t * kn;
                ds += g.ds;
                dA[n] += g.dA;
                anext[n] = an;
            }
            float ddelta = vil_rec_ddelta(rec, ds, dlt, aux0, aux1, &dkap);
            if (vil_rec_kappa(rec)) h_add(&w.dkap[j][r], dkap);
            ((bf16 *)a.du[j])[i] = h_f2bf(du);
            ((bf16 *)a.ddelta[j])[i] = h_f2bf(ddelta);
            dD += gy * ut;
            dsum += ddelta;
        }
        h_add(&a.dD[j][e], dD);
        if (a.ddelta_sum[j]) h_add(&a.ddelta_sum[j][e], dsum);
        if (vil_rec_param(rec)) /* dA_log = dA * A: A = -exp(A_log) */
            for (int n = 0; n < N; n++) h_add(&a.dA_log[j][(size_t)e * N + n], dA[n] * A[n]);
    }
}
__global__ void naive_bwd(VilScanBwd a, NaiveScratch w) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e < a.E) naive_bwd_one(a, w, blockIdx.y, e);
}

/* element i of (2 directions, B*L rows, N): dk (+ 2 k dkappa where the recurrence reads kappa)
 * and dq into their columns of dx_dbl */
__host__ __device__ inline void naive_bwd_kq_one(const VilScanBwd &a, const NaiveScratch &w, size_t i) {
    int N = a.N;
    size_t BL = (size_t)a.B * a.L, r = i / N % BL;
    int n = (int)(i % N), j = (int)(i / N / BL);
    const bf16 *k = (const bf16 *)a.xdbl[j] + r * a.xdbl_ld + a.dt_ld;
    float dk = w.dkq[j][r * 2 * N + n], dq = w.dkq[j][r * 2 * N + N + n];
    if (vil_rec_kappa(a.rec)) dk += 2.0f * h_bf2f(k[n]) * w.dkap[j][r];
    bf16 *dx = (bf16 *)a.dxdbl[j] + r * a.xdbl_ld + a.dt_ld;
    dx[n] = h_f2bf(dk);
    dx[N + n] = h_f2bf(dq);
}
__global__ void naive_bwd_kq(VilScanBwd a, NaiveScratch w) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)2 * a.B * a.L * a.N) naive_bwd_kq_one(a, w, i);
}

/* the scratch, made on the first call (a run has one shape) */
static NaiveScratch naive_scratch(Harness *h, int B, int L, int E, int N) {
    static NaiveScratch w;
    if (N > NAIVE_MAXN) VIL_FATAL("version 1 holds states of up to %d, not %d", NAIVE_MAXN, N);
    if (!w.ysum) {
        size_t BL = (size_t)B * L;
        w.ysum = (float *)h_alloc(h, BL * E * sizeof(float));
        w.hist = (float *)h_alloc(h, (size_t)B * E * L * N * sizeof(float));
        w.dzf = (float *)h_alloc(h, BL * E * sizeof(float));
        for (int j = 0; j < 2; j++) {
            w.dkq[j] = (float *)h_alloc(h, BL * 2 * N * sizeof(float));
            w.dkap[j] = (float *)h_alloc(h, BL * sizeof(float));
        }
    }
    return w;
}

static void fwd_v1(Harness *h, const void *args) {
    const VilScanFwd *a = (const VilScanFwd *)args;
    NaiveScratch w = naive_scratch(h, a->B, a->L, a->E, a->N);
    dim3 grid((a->E + NAIVE_THREADS - 1) / NAIVE_THREADS, a->B);
    naive_fwd<<<grid, NAIVE_THREADS, 0, h_stream(h)>>>(*a, w);
    CUDA_CHECK(cudaGetLastError());
}
static void bwd_v1(Harness *h, const void *args) {
    const VilScanBwd *a = (const VilScanBwd *)args;
    NaiveScratch w = naive_scratch(h, a->B, a->L, a->E, a->N);
    cudaStream_t st = h_stream(h);
    size_t BL = (size_t)a->B * a->L;
    for (int j = 0; j < 2; j++) {
        CUDA_CHECK(cudaMemsetAsync(w.dkq[j], 0, BL * 2 * a->N * sizeof(float), st));
        CUDA_CHECK(cudaMemsetAsync(w.dkap[j], 0, BL * sizeof(float), st));
    }
    dim3 grid((a->E + NAIVE_THREADS - 1) / NAIVE_THREADS, a->B);
    naive_bwd<<<grid, NAIVE_THREADS, 0, st>>>(*a, w);
    CUDA_CHECK(cudaGetLastError());
    naive_bwd_kq<<<cu_blocks(2 * BL * a->N, 256), 256, 0, st>>>(*a, w);
    CUDA_CHECK(cudaGetLastError());
}

/* ---------------- version 2: the backend's op ---------------- */
static void fwd_v2(Harness *h, const void *a) {
    h->be->scan_bidir_forward(h->be, (const VilScanFwd *)a);
}
static void bwd_v2(Harness *h, const void *a) {
    h->be->scan_bidir_backward(h->be, (const VilScanBwd *)a);
}

/* ---------------- the versions: version 3 is a row here and a line in the usage ---------------- */
static const HVersion versions[] = {
    {fwd_v1, bwd_v1},
    {fwd_v2, bwd_v2},
};
static const HSpec SPEC = {
    "scan",
    "usage: scan [version] [B] [iters] [--rec ID] [--L N] [--chunk C] [--split S] [--no-states] [--cpu]\n"
    "The bidirectional scan, forward then backward, at ViL-Tiny's shapes: E=384, N=16, L=197,\n"
    "x_dbl rows 48 wide with k at column 16.\n"
    "  version 1  naive: one thread per (sample, channel) walks the tokens in fp32, both\n"
    "             directions in turn; the backward keeps every state in global memory and\n"
    "             sums dk, dq, dD, dA_log with atomics (not deterministic)\n"
    "  version 2  the backend's scan_bidir_forward/backward (cuda/scan.cu), what the model\n"
    "             runs (the default)\n",
    "  --rec ID   the recurrence, by its id in vil/rec/list.h (longhorn, the default; mamba; ...)\n"
    "  --mamba    --rec mamba\n"
    "  --L N      N tokens instead of 197 (4097: 1024 px; 16385: 2048 px)\n"
    "  --chunk C  version 2's token-parallel form: chunks of C tokens (0 chosen by shape, the\n"
    "             default; -1 none: one thread walks all tokens)\n"
    "  --no-states  version 2: the backward makes the chunk-boundary states again rather than\n"
    "             reading those the forward kept (what the model does in training)\n"
    "  --split S  version 2's forward: threads per channel (0 chosen by shape, the default; 1 the\n"
    "             pair kernel, 4 the quad kernel)\n",
    versions, (int)(sizeof versions / sizeof versions[0]), 64, 50};

/* `--rec ID` among argv[1..] (both then left out): the recurrence of that id; Longhorn when the
 * flag is absent (--mamba: Mamba); exit 2 for an id of none */
static VilRecurrence take_rec(int *argc, char **argv) {
    VilRecurrence rec = h_take_flag(argc, argv, "--mamba") ? VIL_REC_MAMBA : VIL_REC_LONGHORN;
    for (int i = 1; i < *argc; i++)
        if (strcmp(argv[i], "--rec") == 0) {
            if (i + 1 >= *argc || vil_recurrence_from_id(argv[i + 1], &rec) != 0) {
                fprintf(stderr, "--rec takes a recurrence's id:");
                for (int r = 0; r < VIL_REC_COUNT; r++) fprintf(stderr, " %s", vil_recurrences[r].id);
                fprintf(stderr, "\n");
                exit(2);
            }
            memmove(argv + i, argv + i + 2, (size_t)(*argc - i - 1) * sizeof(char *));
            *argc -= 2;
            break;
        }
    return rec;
}

int main(int argc, char **argv) {
    Harness h;
    VilRecurrence rec = take_rec(&argc, argv);
    int own = vil_recurrences[rec].param.key != NULL; /* A_log */
    int Lq = h_take_int(&argc, argv, "--L", 197, 1, 1 << 20);
    int chunk = h_take_int(&argc, argv, "--chunk", 0, -1, 1 << 20);
    int split = h_take_int(&argc, argv, "--split", 0, 0, 4);
    int no_states = h_take_flag(&argc, argv, "--no-states");
    h_init(&h, argc, argv, &SPEC);
    HShapes S = h_shapes(h.B, 192);
    S.L = Lq;
    snprintf(h.tag, sizeof h.tag, "%s L=%d chunk %d split %d", vil_recurrences[rec].id, Lq, chunk, split);
    int B = S.B, L = S.L, E = S.E, N = S.N, R = S.dt_ld, xdbl_ld = S.xdbl_ld, ldz = 2 * E;
    size_t BL = (size_t)B * L, ne = BL * E, nx = BL * xdbl_ld, nz = BL * ldz;
    printf("scan %s, version %d: B=%d L=%d E=%d N=%d, x_dbl rows %d wide, k at column %d\n",
           h.tag, h.version, B, L, E, N, xdbl_ld, R);

    /* inputs: host copies (act tensors bf16-exact) and their device twins; z is the second
     * half of the (B, L, 2E) in_proj output */
    float *u[2], *dl[2], *xd[2], *Dk[2], *Al[2];
    void *gu[2], *gdl[2], *gxd[2];
    float *gD[2], *gA[2];
    for (int j = 0; j < 2; j++) {
        u[j] = h_rand_bf(&h, ne, 1.0f), dl[j] = h_rand_bf(&h, ne, 1.0f), xd[j] = h_rand_bf(&h, nx, 0.5f);
        Dk[j] = h_rand(&h, E, 1.0f), Al[j] = h_host(&h, (size_t)E * N);
        for (int e = 0; e < E; e++) /* A = -(1..N), S4D-real's initialization, perturbed */
            for (int n = 0; n < N; n++) Al[j][(size_t)e * N + n] = logf(n + 1.0f) + 0.1f * vil_rng_normal(&h.rng);
        gu[j] = h_act(&h, u[j], ne), gdl[j] = h_act(&h, dl[j], ne), gxd[j] = h_act(&h, xd[j], nx);
        gD[j] = h_f32(&h, Dk[j], E), gA[j] = h_f32(&h, Al[j], (size_t)E * N);
    }
    float *xz = h_rand_bf(&h, nz, 1.0f), *dout = h_rand_bf(&h, ne, 1.0f);
    void *gxz = h_act(&h, xz, nz), *gdout = h_act(&h, dout, ne);

    /* forward */
    float *out_c = h_host(&h, ne);
    VilScanFwd cf = {.rec = rec, .out = out_c, .u = {u[0], u[1]}, .delta = {dl[0], dl[1]},
                     .xdbl = {xd[0], xd[1]}, .z = xz + E, .D = {Dk[0], Dk[1]},
                     .A_log = {own ? Al[0] : NULL, own ? Al[1] : NULL},
                     .B = B, .L = L, .E = E, .N = N, .dt_ld = R, .xdbl_ld = xdbl_ld, .ldz = ldz};
    scan_bidir_forward(&cf);
    VilScanFwd gf = cf;
    gf.chunk = chunk, gf.split = split;
    gf.out = h_poison_act(&h, ne), gf.z = h_act_at(&h, gxz, E);
    /* version 2: the chunk-boundary states kept from the forward for the backward, as the model
     * keeps them in training (--no-states: the backward makes them again) */
    size_t sb = h.version == 2 && !no_states && h.be->scan_states_bytes ? h.be->scan_states_bytes(h.be, &gf) : 0;
    gf.states = sb ? (float *)h_alloc(&h, sb) : NULL;
    if (sb) printf("the forward keeps %.1f MB of chunk-boundary states for the backward\n", sb / 1e6);
    for (int j = 0; j < 2; j++) {
        gf.u[j] = gu[j], gf.delta[j] = gdl[j], gf.xdbl[j] = gxd[j], gf.D[j] = gD[j];
        gf.A_log[j] = own ? gA[j] : NULL;
    }
    h.v->fwd(&h, &gf);
    h_check(&h, "fwd out", rel_l2(h_get_act(&h, gf.out, ne), out_c, 1, ne, ne), H_TOL_BF16);

    /* backward: the accumulated outputs (dD, dA_log, ddelta_sum) start from random values on
     * both sides and are compared by their increments */
    float *dD0[2], *dA0[2], *ds0[2];
    VilScanBwd cb = {.rec = rec, .dz = h_host(&h, nz) + E, .dout = dout, .z = xz + E,
                     .B = B, .L = L, .E = E, .N = N, .dt_ld = R, .xdbl_ld = xdbl_ld, .ldz = ldz};
    VilScanBwd gb = cb;
    gb.chunk = chunk, gb.states = gf.states;
    gb.dz = h_act_at(&h, h_poison_act(&h, nz), E), gb.dout = gdout, gb.z = gf.z;
    for (int j = 0; j < 2; j++) {
        dD0[j] = h_rand(&h, E, 1.0f), dA0[j] = h_rand(&h, (size_t)E * N, 1.0f), ds0[j] = h_rand(&h, E, 1.0f);
        cb.du[j] = h_host(&h, ne), cb.ddelta[j] = h_host(&h, ne), cb.dxdbl[j] = h_host(&h, nx);
        cb.dD[j] = h_copy(&h, dD0[j], E), cb.dA_log[j] = own ? h_copy(&h, dA0[j], (size_t)E * N) : NULL;
        cb.ddelta_sum[j] = h_copy(&h, ds0[j], E);
        cb.u[j] = u[j], cb.delta[j] = dl[j], cb.xdbl[j] = xd[j], cb.D[j] = Dk[j], cb.A_log[j] = cf.A_log[j];
        gb.du[j] = h_poison_act(&h, ne), gb.ddelta[j] = h_poison_act(&h, ne), gb.dxdbl[j] = h_poison_act(&h, nx);
        gb.dD[j] = h_f32(&h, dD0[j], E), gb.dA_log[j] = own ? h_f32(&h, dA0[j], (size_t)E * N) : NULL;
        gb.ddelta_sum[j] = h_f32(&h, ds0[j], E);
        gb.u[j] = gu[j], gb.delta[j] = gdl[j], gb.xdbl[j] = gxd[j], gb.D[j] = gD[j], gb.A_log[j] = gf.A_log[j];
    }
    scan_bidir_backward(&cb);
    h.v->bwd(&h, &gb);
    char nm[64];
    for (int j = 0; j < 2; j++) {
        const float *dxd_c = (const float *)cb.dxdbl[j], *dxd_g = h_get_act(&h, gb.dxdbl[j], nx);
        snprintf(nm, sizeof nm, "bwd du[%d]", j);
        h_check(&h, nm, rel_l2(h_get_act(&h, gb.du[j], ne), (const float *)cb.du[j], 1, ne, ne), H_TOL_BF16);
        snprintf(nm, sizeof nm, "bwd ddelta[%d]", j);
        h_check(&h, nm, rel_l2(h_get_act(&h, gb.ddelta[j], ne), (const float *)cb.ddelta[j], 1, ne, ne), H_TOL_BF16);
        snprintf(nm, sizeof nm, "bwd d%s[%d]", vil_recurrences[rec].kq[0], j);
        h_check(&h, nm, rel_l2(dxd_g + R, dxd_c + R, BL, N, xdbl_ld), H_TOL_BF16);
        snprintf(nm, sizeof nm, "bwd d%s[%d]", vil_recurrences[rec].kq[1], j);
        h_check(&h, nm, rel_l2(dxd_g + R + N, dxd_c + R + N, BL, N, xdbl_ld), H_TOL_BF16);
        float *dD_g = h_get_f32(&h, gb.dD[j], E), *ds_g = h_get_f32(&h, gb.ddelta_sum[j], E);
        h_sub(dD_g, dD0[j], E), h_sub(cb.dD[j], dD0[j], E);
        snprintf(nm, sizeof nm, "bwd dD[%d]", j);
        h_check(&h, nm, rel_l2(dD_g, cb.dD[j], 1, E, E), H_TOL_F32);
        /* the sum of the fp32 ddelta, before its bf16 rounding */
        h_sub(ds_g, ds0[j], E), h_sub(cb.ddelta_sum[j], ds0[j], E);
        snprintf(nm, sizeof nm, "bwd ddelta_sum[%d]", j);
        h_check(&h, nm, rel_l2(ds_g, cb.ddelta_sum[j], 1, E, E), H_TOL_BF16);
        if (own) {
            float *dA_g = h_get_f32(&h, gb.dA_log[j], (size_t)E * N);
            h_sub(dA_g, dA0[j], (size_t)E * N), h_sub(cb.dA_log[j], dA0[j], (size_t)E * N);
            snprintf(nm, sizeof nm, "bwd dA_log[%d]", j);
            h_check(&h, nm, rel_l2(dA_g, cb.dA_log[j], 1, (size_t)E * N, (size_t)E * N), 1e-3);
        }
    }
    h_check(&h, "bwd dz", rel_l2(h_get_act(&h, (const char *)gb.dz - E * h.be->act_bytes, nz) + E,
                                (const float *)cb.dz, BL, E, ldz), H_TOL_BF16);
    if (!h_valid(&h)) return h_finish(&h);

    /* bytes each call must move at least: u, delta (both directions), z, out; the k|q columns */
    double T = (double)BL;
    h_time(&h, "fwd", h.v->fwd, &gf, T * E * 2 * 6 + 2 * T * 2 * N * 2);
    /* u, delta, z, dout, du, ddelta, dz; k|q read and dk|dq written */
    h_time(&h, "bwd", h.v->bwd, &gb, T * E * 2 * 11 + 4 * T * 2 * N * 2);
    return h_finish(&h);
}
