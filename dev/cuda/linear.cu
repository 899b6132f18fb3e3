/* linear.cu: the matrix products of the mixer as a ViL-Tiny block calls them: in_proj (D -> 2E),
 * and the skinny x_proj (E -> x_dbl's padded row) and dt_proj (x_dbl's dt_low columns -> E, with
 * the bias), forward and backward (dinp and dW in one call, as the model makes it): each version
 * is validated against vil/linear.c's linear_forward/backward, then timed.
 *   build/dev/cuda/linear [version] [B] [iters] [--cpu]
 * Version 1 is the readable starting point (a thread per output element, fp32 sums); version 2 is
 * the backend's op (cuda/linear.cu: cuBLASLt and its own skinny kernels). */
#include "dev/cuda/harness.h"

/* ---------------- version 1: naive ---------------- */

/* out[n, o] = in[n, :] . w[o, :] + b[o], thread i = n * OC + o */
__host__ __device__ inline void naive_fwd_one(const VilLinearFwd &a, size_t i) {
    size_t n = i / a.OC;
    int o = (int)(i % a.OC);
    const bf16 *in = (const bf16 *)a.in + n * a.ld_in, *w = (const bf16 *)a.w + (size_t)o * a.C;
    float acc = a.b ? a.b[o] : 0.0f;
    for (int c = 0; c < a.C; c++) acc += h_bf2f(in[c]) * h_bf2f(w[c]);
    ((bf16 *)a.out)[n * a.ld_out + o] = h_f2bf(acc);
}
__global__ void naive_fwd(VilLinearFwd a) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)a.N * a.OC) naive_fwd_one(a, i);
}

/* dinp[n, c] (+)= dout[n, :] . w[:, c], thread i = n * C + c */
__host__ __device__ inline void naive_dinp_one(const VilLinearBwd &a, size_t i) {
    size_t n = i / a.C;
    int c = (int)(i % a.C);
    const bf16 *dout = (const bf16 *)a.dout + n * a.ld_out, *w = (const bf16 *)a.w;
    bf16 *dinp = (bf16 *)a.dinp + n * a.ld_in;
    float acc = a.accumulate_dinp ? h_bf2f(dinp[c]) : 0.0f;
    for (int o = 0; o < a.OC; o++) acc += h_bf2f(dout[o]) * h_bf2f(w[(size_t)o * a.C + c]);
    dinp[c] = h_f2bf(acc);
}
__global__ void naive_dinp(VilLinearBwd a) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)a.N * a.C) naive_dinp_one(a, i);
}

/* dw[o, c] += dout[:, o] . in[:, c] over all N rows, thread i = o * C + c */
__host__ __device__ inline void naive_dw_one(const VilLinearBwd &a, size_t i) {
    int o = (int)(i / a.C), c = (int)(i % a.C);
    const bf16 *dout = (const bf16 *)a.dout, *in = (const bf16 *)a.in;
    float acc = 0.0f;
    for (size_t n = 0; n < (size_t)a.N; n++) acc += h_bf2f(dout[n * a.ld_out + o]) * h_bf2f(in[n * a.ld_in + c]);
    a.dw[i] += acc;
}
__global__ void naive_dw(VilLinearBwd a) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)a.OC * a.C) naive_dw_one(a, i);
}

/* db[o] += the column sum of dout, thread o */
__global__ void naive_db(VilLinearBwd a) {
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= a.OC) return;
    float acc = 0.0f;
    for (size_t n = 0; n < (size_t)a.N; n++) acc += h_bf2f(((const bf16 *)a.dout)[n * a.ld_out + o]);
    a.db[o] += acc;
}

/* the head's float32 output is not among the products studied here */
static void naive_flags(int flags) {
    if (flags) VIL_FATAL("version 1 takes bf16 outputs only (flags %d)", flags);
}
static void fwd_v1(Harness *h, const void *args) {
    const VilLinearFwd *a = (const VilLinearFwd *)args;
    naive_flags(a->flags);
    naive_fwd<<<cu_blocks((size_t)a->N * a->OC, 256), 256, 0, h_stream(h)>>>(*a);
    CUDA_CHECK(cudaGetLastError());
}
static void bwd_v1(Harness *h, const void *args) {
    const VilLinearBwd *a = (const VilLinearBwd *)args;
    naive_flags(a->flags);
    cudaStream_t st = h_stream(h);
    if (a->dinp) naive_dinp<<<cu_blocks((size_t)a->N * a->C, 256), 256, 0, st>>>(*a);
    if (a->dw) naive_dw<<<cu_blocks((size_t)a->OC * a->C, 256), 256, 0, st>>>(*a);
    if (a->db) naive_db<<<cu_blocks(a->OC, 256), 256, 0, st>>>(*a);
    CUDA_CHECK(cudaGetLastError());
}

/* ---------------- version 2: the backend's op ---------------- */
static void fwd_v2(Harness *h, const void *a) {
    h->be->linear_forward(h->be, (const VilLinearFwd *)a);
}
static void bwd_v2(Harness *h, const void *a) {
    h->be->linear_backward(h->be, (const VilLinearBwd *)a);
}

/* ---------------- the versions: version 3 is a row here and a line in the usage ---------------- */
static const HVersion versions[] = {
    {fwd_v1, bwd_v1},
    {fwd_v2, bwd_v2},
};
static const HSpec SPEC = {
    "linear",
    "usage: linear [version] [B] [iters] [--cpu]\n"
    "The mixer's products at ViL-Tiny's shapes (N = B*197 rows): in_proj 192 -> 768; x_proj\n"
    "384 -> 48 (x_dbl's padded row), its input gradient added to the scan's; dt_proj 16 (dt_low's\n"
    "padded columns, read from x_dbl's rows) -> 384 with the bias. Backward: dinp and dW in one\n"
    "call, as the model makes it.\n"
    "  version 1  naive: a thread per output element (out, dinp, dW) sums in fp32\n"
    "  version 2  the backend's linear_forward/backward (cuda/linear.cu), what the model runs\n"
    "             (the default)\n",
    "", versions, (int)(sizeof versions / sizeof versions[0]), 64, 50};

/* one product: C inputs -> OC outputs, rows ld_in and ld_out apart */
typedef struct {
    const char *name;
    int C, OC, ld_in, ld_out, bias, accumulate_dinp;
} Product;

/* validates one product's forward and backward; their arguments (device side) in *gf, *gb */
static void product_check(Harness *h, const Product *p, int N, VilLinearFwd *gf, VilLinearBwd *gb) {
    size_t ni = (size_t)N * p->ld_in, no = (size_t)N * p->ld_out, nw = (size_t)p->OC * p->C;
    float *in = h_rand_bf(h, ni, 1.0f), *w = h_rand_bf(h, nw, 1.0f / sqrtf((float)p->C));
    float *b = p->bias ? h_rand(h, p->OC, 1.0f) : NULL;
    VilLinearFwd cf = {.out = h_host(h, no), .in = in, .w = w, .b = b, .N = N, .C = p->C, .OC = p->OC,
                       .ld_in = p->ld_in, .ld_out = p->ld_out};
    linear_forward(&cf);
    *gf = cf;
    gf->out = h_poison_act(h, no), gf->in = h_act(h, in, ni), gf->w = h_act(h, w, nw);
    gf->b = b ? h_f32(h, b, p->OC) : NULL;
    h->v->fwd(h, gf);
    char nm[64];
    snprintf(nm, sizeof nm, "%s fwd out", p->name);
    h_check(h, nm, rel_l2(h_get_act(h, gf->out, no), (const float *)cf.out, N, p->OC, p->ld_out), H_TOL_BF16);

    /* dinp starts from random values when it accumulates (x_proj's adds to the scan's du);
     * dw from random values on both sides, compared by its increment */
    float *dout = h_rand_bf(h, no, 1.0f), *dw0 = h_rand(h, nw, 1.0f);
    float *dinp0 = p->accumulate_dinp ? h_rand_bf(h, ni, 1.0f) : h_host(h, ni);
    VilLinearBwd cb = {.dinp = h_copy(h, dinp0, ni), .dw = h_copy(h, dw0, nw), .dout = dout, .in = in, .w = w,
                       .N = N, .C = p->C, .OC = p->OC, .ld_in = p->ld_in, .ld_out = p->ld_out,
                       .accumulate_dinp = p->accumulate_dinp};
    linear_backward(&cb);
    *gb = cb;
    gb->dinp = p->accumulate_dinp ? h_act(h, dinp0, ni) : h_poison_act(h, ni);
    gb->dw = h_f32(h, dw0, nw), gb->dout = h_act(h, dout, no), gb->in = gf->in, gb->w = gf->w;
    h->v->bwd(h, gb);
    snprintf(nm, sizeof nm, "%s bwd dinp%s", p->name, p->accumulate_dinp ? " +=" : "");
    h_check(h, nm, rel_l2(h_get_act(h, gb->dinp, ni), (const float *)cb.dinp, N, p->C, p->ld_in), H_TOL_BF16);
    float *dw_g = h_get_f32(h, gb->dw, nw);
    h_sub(dw_g, dw0, nw), h_sub(cb.dw, dw0, nw);
    snprintf(nm, sizeof nm, "%s bwd dw", p->name);
    h_check(h, nm, rel_l2(dw_g, cb.dw, 1, nw, nw), H_TOL_F32);
}

int main(int argc, char **argv) {
    Harness h;
    h_init(&h, argc, argv, &SPEC);
    HShapes S = h_shapes(h.B, 192);
    int N = S.B * S.L, D = S.D, E = S.E;
    const Product prods[] = {
        {"in_proj", D, 2 * E, D, 2 * E, 0, 0},
        {"x_proj", E, S.xdbl_ld, E, S.xdbl_ld, 0, 1},
        {"dt_proj", S.dt_ld, E, S.xdbl_ld, E, 1, 0},
    };
    enum { NP = sizeof prods / sizeof prods[0] };
    printf("mixer products, version %d: B=%d, N=%d rows\n", h.version, S.B, N);
    VilLinearFwd gf[NP];
    VilLinearBwd gb[NP];
    for (int i = 0; i < NP; i++) product_check(&h, &prods[i], N, &gf[i], &gb[i]);
    if (!h_valid(&h)) return h_finish(&h);

    char nm[64];
    for (int i = 0; i < NP; i++) {
        const Product *p = &prods[i];
        double in = (double)N * p->C * 2, out = (double)N * p->OC * 2;
        snprintf(nm, sizeof nm, "%s fwd", p->name);
        h_time(&h, nm, h.v->fwd, &gf[i], in + out);
        /* dout and in read, dinp written (and read when it accumulates) */
        snprintf(nm, sizeof nm, "%s bwd", p->name);
        h_time(&h, nm, h.v->bwd, &gb[i], out + in + in * (p->accumulate_dinp ? 2 : 1));
    }
    return h_finish(&h);
}
