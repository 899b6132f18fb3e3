/* linear.cu: the matrix products through cuBLASLt (bf16 operands, fp32 accumulation, the bias
 * fused as an epilogue, strided inputs through the leading dimension, accumulation through beta)
 * and the deterministic column sums used for bias gradients. dinp overwrites unless
 * accumulate_dinp; dw and db accumulate. Plans (descriptors + chosen algorithm) are cached per
 * shape, so the heuristic query runs once per distinct call site. Forwards with few inputs (K <=
 * 64: dt_proj's) run on the skinny-K kernel below instead. */
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda/ops_cuda.h"
#include "cuda/stage.cuh"

extern "C" {
#include "vil/backend.h"
}

/* Row-major products are run as column-major ones on the transposed views:
 * out(N, OC) = in(N, C) w(OC, C)^T  is  out^T(OC, N) = w^T... i.e. D(m, n) = op(A) op(B). */
typedef struct {
    int m, n, k, lda, ldb, ldd, ta, tb, d_f32, bias, bias_f32, beta_nz, al_a, al_b, al_d;
} LtKey;
typedef struct {
    LtKey key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    int ok; /* 0: cuBLASLt had no kernel (remembered, so the query is not repeated) */
} LtPlan;

#define MAX_PLANS 128
/* per context: a plan holds descriptors and an algorithm chosen for its cuBLASLt handle */
struct LtPlans {
    LtPlan plan[MAX_PLANS];
    int n;
};

static struct LtPlans *plans_of_ctx(void) {
    CuCtx *c = cu();
    if (!c->lt_plans) c->lt_plans = (struct LtPlans *)vil_calloc(1, sizeof(struct LtPlans));
    return c->lt_plans;
}

static void plan_destroy(LtPlan *p) {
    if (!p->ok) return;
    cublasLtMatrixLayoutDestroy(p->la);
    cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->ld);
    cublasLtMatmulDescDestroy(p->desc);
}

void cu_linear_plans_free(void) {
    struct LtPlans *ps = cu()->lt_plans;
    if (!ps) return;
    for (int i = 0; i < ps->n; i++) plan_destroy(&ps->plan[i]);
    free(ps);
    cu()->lt_plans = NULL;
}

static int align_of(const void *p, int ld, int elem) {
    size_t a = (size_t)p | (size_t)ld * elem | 16;
    return (int)(a & (~a + 1)); /* lowest set bit, at most 16 */
}

static LtPlan *plan_get(const LtKey *k) {
    struct LtPlans *ps = plans_of_ctx();
    for (int i = 0; i < ps->n; i++)
        if (memcmp(&ps->plan[i].key, k, sizeof *k) == 0) return &ps->plan[i];
    return NULL;
}

/* Builds a plan; one with ok = 0 when cuBLASLt has no kernel for it. */
static LtPlan *plan_make(const LtKey *k) {
    struct LtPlans *ps = plans_of_ctx();
    if (ps->n == MAX_PLANS) {
        /* a process that meets many shapes (vil bench's table, vil compare's resolutions) drops
         * the oldest plan; cuBLASLt reads a plan when a product is queued, so none in flight
         * needs it, and no caller holds one across this call */
        plan_destroy(&ps->plan[0]);
        memmove(ps->plan, ps->plan + 1, (MAX_PLANS - 1) * sizeof(LtPlan));
        ps->n--;
    }
    LtPlan *p = &ps->plan[ps->n];
    memset(p, 0, sizeof *p);
    p->key = *k;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (k->bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        if (k->bias_f32) {
            int32_t bt = CUDA_R_32F;
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
        }
    }
    cudaDataType dt = k->d_f32 ? CUDA_R_32F : CUDA_R_16BF;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, k->ta ? k->k : k->m, k->ta ? k->m : k->k, k->lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, k->tb ? k->n : k->k, k->tb ? k->k : k->n, k->ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->ld, dt, k->m, k->n, k->ldd));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = cu()->lt_ws_bytes;
    uint32_t aa = k->al_a, ab = k->al_b, ad = k->al_d;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ad, sizeof ad));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof ad));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(cu()->lt, p->desc, p->la, p->lb, p->ld, p->ld,
                                                       pref, 1, &res, &found);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->la));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lb));
        CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->ld));
        CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
        p->ok = 0;
        ps->n++;
        return p;
    }
    p->algo = res.algo;
    p->ok = 1;
    ps->n++;
    return p;
}

static __global__ void f32_to_bf16_kernel(bf16 *out, const float *in, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = f2bf(in[i]);
}
static void f32_to_bf16(bf16 *out, const float *in, size_t n) {
    f32_to_bf16_kernel<<<cu_blocks(n, 256) < 4096 ? cu_blocks(n, 256) : 4096, 256, 0, cu()->stream>>>(out, in, n);
    CU_LAUNCH_CHECK();
}

/* D(m, n) (ldd) = op(A)(m, k) op(B)(k, n) [+ bias(m)] + beta D */
static void matmul(void *D, int d_f32, int ldd, const bf16 *A, int lda, int ta, const bf16 *B,
                   int ldb, int tb, int m, int n, int k, float beta, const float *bias) {
    LtKey key;
    memset(&key, 0, sizeof key);
    key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldd = ldd;
    key.ta = ta, key.tb = tb, key.d_f32 = d_f32, key.bias = bias != NULL, key.beta_nz = beta != 0.0f;
    key.al_a = align_of(A, lda, 2), key.al_b = align_of(B, ldb, 2);
    key.al_d = align_of(D, ldd, d_f32 ? 4 : 2);
    const void *bias_ptr = bias;
    LtPlan *p = NULL;
    if (bias && !d_f32) {
        /* an f32 bias on a bf16 output is tried first; some cuBLASLt versions only take a bias
         * of the output type, then the bias goes through a bf16 copy */
        key.bias_f32 = 1;
        p = plan_get(&key);
        if (!p) p = plan_make(&key);
        if (!p->ok) {
            p = NULL;
            key.bias_f32 = 0;
            bf16 *bb = (bf16 *)cu_scratch(SCR_BIAS_BF16, (size_t)m * sizeof(bf16));
            f32_to_bf16(bb, bias, (size_t)m);
            bias_ptr = bb;
        }
    } else if (bias) {
        key.bias_f32 = 1; /* f32 output: the bias is f32 by default */
    }
    if (!p) p = plan_get(&key);
    if (!p) p = plan_make(&key);
    if (!p->ok)
        VIL_FATAL("cuBLASLt found no kernel for a %dx%dx%d product (lda %d ldb %d ldd %d, %s output%s)",
                  m, n, k, lda, ldb, ldd, d_f32 ? "f32" : "bf16", bias ? ", bias" : "");
    if (bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &bias_ptr, sizeof bias_ptr));
    float alpha = 1.0f;
    CUBLAS_CHECK(cublasLtMatmul(cu()->lt, p->desc, &alpha, A, p->la, B, p->lb, &beta, D, p->ld, D,
                                p->ld, &p->algo, cu()->lt_ws, cu()->lt_ws_bytes, cu()->stream));
    if (cu()->debug_sync) CUDA_CHECK(cudaStreamSynchronize(cu()->stream));
}

/* ---- column sums: partials over fixed chunks of rows, then the chunks in order ---- */
#define CS_ROWS 256
template <typename T>
__global__ void colsum_partial_kernel(float *part /* (nchunk, OC) */, const T *x, int N, int OC, int ld) {
    __shared__ float acc[8][33];
    int o = blockIdx.x * 32 + threadIdx.x, r0 = blockIdx.y * CS_ROWS;
    int r1 = min(N, r0 + CS_ROWS);
    float s = 0.0f;
    if (o < OC)
        for (int rb = r0 + threadIdx.y; rb < r1; rb += 64) {
            float v[8]; /* all loads issued before the adds */
#pragma unroll
            for (int k = 0; k < 8; k++) {
                int r = rb + 8 * k;
                if constexpr (sizeof(T) == 2) v[k] = r < r1 ? bf2f(x[(size_t)r * ld + o]) : 0.0f;
                else v[k] = r < r1 ? x[(size_t)r * ld + o] : 0.0f;
            }
#pragma unroll
            for (int k = 0; k < 8; k++) s += v[k];
        }
    acc[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && o < OC) {
        float t = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) t += acc[i][threadIdx.x];
        part[(size_t)blockIdx.y * OC + o] = t;
    }
}
/* out[c] (+)= sum over rows [ra, rb) of split blockIdx.y: 8 row lanes per column, each lane
 * issuing 8 loads before it adds (an add waits for its load, and in-order issue would otherwise
 * serialize every load's latency), then the 8 lane sums in order. accumulate = 0 writes the
 * split's sum to out + split * ldo (the first of two levels). */
#define SUM_SPLIT_ROWS 128
__global__ void sum_rows_kernel(float *__restrict__ out, const float *__restrict__ part, int rows,
                                int cols, int ld, int per, int ldo, int accumulate) {
    __shared__ float acc[8][33];
    int c = blockIdx.x * 32 + threadIdx.x, sp = blockIdx.y;
    int ra = sp * per, rb = min(rows, ra + per);
    float s = 0.0f;
    if (c < cols) {
        for (int r0 = ra + threadIdx.y; r0 < rb; r0 += 64) {
            float v[8];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                int r = r0 + 8 * k;
                v[k] = r < rb ? part[(size_t)r * ld + c] : 0.0f;
            }
#pragma unroll
            for (int k = 0; k < 8; k++) s += v[k];
        }
    }
    acc[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float t = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) t += acc[i][threadIdx.x];
        if (accumulate) out[c] += t;
        else out[(size_t)sp * ldo + c] = t;
    }
}

extern "C" void colsum_rows_accumulate_cuda(float *out, const float *part, int rows, int cols, int ld) {
    dim3 block(32, 8);
    if (rows <= 2 * SUM_SPLIT_ROWS) {
        sum_rows_kernel<<<dim3((cols + 31) / 32, 1), block, 0, cu()->stream>>>(out, part, rows, cols, ld, rows, 0, 1);
        CU_LAUNCH_CHECK();
        return;
    }
    /* two fixed-order levels, so that enough blocks run */
    int nsp = (rows + SUM_SPLIT_ROWS - 1) / SUM_SPLIT_ROWS;
    float *mid = (float *)cu_scratch(SCR_SUM_MID, (size_t)nsp * cols * sizeof(float));
    sum_rows_kernel<<<dim3((cols + 31) / 32, nsp), block, 0, cu()->stream>>>(mid, part, rows, cols, ld, SUM_SPLIT_ROWS, cols, 0);
    CU_LAUNCH_CHECK();
    sum_rows_kernel<<<dim3((cols + 31) / 32, 1), block, 0, cu()->stream>>>(out, mid, nsp, cols, cols, nsp, 0, 1);
    CU_LAUNCH_CHECK();
}

extern "C" void colsum_accumulate_cuda(float *db, const void *x, int x_is_f32, int N, int OC, int ld) {
    int nchunk = (N + CS_ROWS - 1) / CS_ROWS;
    float *part = (float *)cu_scratch(SCR_COLSUM, (size_t)nchunk * OC * sizeof(float));
    dim3 grid((OC + 31) / 32, nchunk), block(32, 8);
    if (x_is_f32) colsum_partial_kernel<float><<<grid, block, 0, cu()->stream>>>(part, (const float *)x, N, OC, ld);
    else colsum_partial_kernel<bf16><<<grid, block, 0, cu()->stream>>>(part, (const bf16 *)x, N, OC, ld);
    CU_LAUNCH_CHECK();
    colsum_rows_accumulate_cuda(db, part, nchunk, OC, OC);
}

/* ---- the skinny-K forward: out(N, OC) = in(N, C) w(OC, C)^T + b for C <= 64 (dt_proj: 16 ->
 * 384 at ViL-Tiny), where cuBLASLt reached 47% of the HBM rate (25 us a direction, its output
 * 38.7 MB). A block makes a 64-token x 128-column tile on tensor cores (mma m16n8k16, bf16 in,
 * fp32 sums): the input rows staged by cp.async (K zero-padded to a multiple of 16), the weight
 * fragments read once per block, the tile written through shared memory as 16-byte row pieces
 * (session 3's version stored straight from the fragments, 8 rows of 16 bytes a warp
 * instruction, and lost to cuBLASLt). ---- */
#define SK_TM 64  /* tokens of a tile */
#define SK_TN 128 /* output columns of a tile: 4 warps of 32 */
#define SK_KMAX 64
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <int KP> /* K padded to a multiple of 16 */
__global__ void __launch_bounds__(128) linear_skinny_k_kernel(bf16 *__restrict__ out, const bf16 *__restrict__ in,
                                                              const bf16 *__restrict__ w, const float *__restrict__ bias,
                                                              int N, int C, int OC, int ld_in, int ld_out) {
    constexpr int LDA = KP + 8;       /* bf16: rows of the staged input, 4 banks apart mod 32 */
    constexpr int LDO = SK_TN + 8;    /* bf16: rows of the output tile */
    __shared__ __align__(16) bf16 As[SK_TM * LDA];
    __shared__ __align__(16) bf16 Os[SK_TM * LDO];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tg = lane & 3;
    const int r0 = blockIdx.x * SK_TM, c0 = blockIdx.y * SK_TN;
    /* stage the tile's input rows: C / 8 pieces of 16 bytes a row, zeros past N and past C */
    const int pr = C / 8;
    for (int i = tid; i < SK_TM * (KP / 8); i += 128) {
        int r = i / (KP / 8), q = i - r * (KP / 8);
        bf16 *dst = As + r * LDA + q * 8;
        bool on = q < pr && r0 + r < N;
        cp_async<16>(dst, on ? in + (size_t)(r0 + r) * ld_in + q * 8 : in, on ? 16 : 0);
    }
    cp_commit();
    /* this warp's 32 columns: 4 n-tiles of 8; its weight fragments b[nt][ks] (k = 2tg.., n = g) */
    const int wc = c0 + warp * 32;
    const bool wact = wc < OC;
    unsigned bf[4][KP / 16][2];
    float bv[4][2];
#pragma unroll
    for (int nt = 0; nt < 4; nt++) {
        const int o = wc + nt * 8 + g;
        const bf16 *wr = w + (size_t)(wact ? o : 0) * C;
#pragma unroll
        for (int ks = 0; ks < KP / 16; ks++) {
            int k0 = ks * 16 + 2 * tg;
            bf[nt][ks][0] = wact && k0 < C ? *reinterpret_cast<const unsigned *>(wr + k0) : 0u;
            bf[nt][ks][1] = wact && k0 + 8 < C ? *reinterpret_cast<const unsigned *>(wr + k0 + 8) : 0u;
        }
        const int oc = wc + nt * 8 + 2 * tg;
        bv[nt][0] = bias && wact ? bias[oc] : 0.0f;
        bv[nt][1] = bias && wact ? bias[oc + 1] : 0.0f;
    }
    cp_wait<0>();
    __syncthreads();
    if (wact) {
#pragma unroll
        for (int mt = 0; mt < SK_TM / 16; mt++) {
            float acc[4][4];
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
                acc[nt][0] = bv[nt][0], acc[nt][1] = bv[nt][1], acc[nt][2] = bv[nt][0], acc[nt][3] = bv[nt][1];
#pragma unroll
            for (int ks = 0; ks < KP / 16; ks++) {
                const bf16 *ar = As + (mt * 16 + g) * LDA + ks * 16 + 2 * tg;
                unsigned af[4] = {*reinterpret_cast<const unsigned *>(ar), *reinterpret_cast<const unsigned *>(ar + 8 * LDA),
                                  *reinterpret_cast<const unsigned *>(ar + 8), *reinterpret_cast<const unsigned *>(ar + 8 * LDA + 8)};
#pragma unroll
                for (int nt = 0; nt < 4; nt++) mma_bf16_16816(acc[nt], af, bf[nt][ks][0], bf[nt][ks][1]);
            }
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                bf16 *o = Os + (mt * 16 + g) * LDO + warp * 32 + nt * 8 + 2 * tg;
                *reinterpret_cast<__nv_bfloat162 *>(o) = __floats2bfloat162_rn(acc[nt][0], acc[nt][1]);
                *reinterpret_cast<__nv_bfloat162 *>(o + 8 * LDO) = __floats2bfloat162_rn(acc[nt][2], acc[nt][3]);
            }
        }
    }
    __syncthreads();
    /* the tile out in 16-byte row pieces: SK_TN / 8 a row, the columns this block has */
    const int ncols = min(SK_TN, OC - c0), pieces = ncols / 8;
    for (int i = tid; i < SK_TM * (SK_TN / 8); i += 128) {
        int r = i / (SK_TN / 8), q = i - r * (SK_TN / 8);
        if (q < pieces && r0 + r < N)
            *reinterpret_cast<uint4 *>(out + (size_t)(r0 + r) * ld_out + c0 + q * 8) =
                *reinterpret_cast<const uint4 *>(Os + r * LDO + q * 8);
    }
}

/* the skinny-K kernel takes this product: bf16 output, K <= 64 in 16-byte row pieces, whole warps
 * of columns, 16-byte aligned rows */
static int skinny_k_takes(const VilLinearFwd *a) {
    return !(a->flags & VIL_LINEAR_OUT_F32) && a->C <= SK_KMAX && a->C % 8 == 0 && a->OC % 32 == 0 &&
           a->ld_in % 8 == 0 && a->ld_out % 8 == 0 && ((uintptr_t)a->in | (uintptr_t)a->out | (uintptr_t)a->w) % 16 == 0;
}
static void linear_skinny_k_forward(const VilLinearFwd *a) {
    if (a->N <= 0) return;
    dim3 grid((unsigned)((a->N + SK_TM - 1) / SK_TM), (unsigned)((a->OC + SK_TN - 1) / SK_TN));
    int kp = (a->C + 15) / 16 * 16;
#define SK_LAUNCH(KP)                                                                                             \
    linear_skinny_k_kernel<KP><<<grid, 128, 0, cu()->stream>>>((bf16 *)a->out, (const bf16 *)a->in,               \
                                                                (const bf16 *)a->w, a->b, a->N, a->C, a->OC,      \
                                                                a->ld_in, a->ld_out)
    switch (kp) {
    case 16: SK_LAUNCH(16); break;
    case 32: SK_LAUNCH(32); break;
    case 48: SK_LAUNCH(48); break;
    default: SK_LAUNCH(64); break;
    }
#undef SK_LAUNCH
    CU_LAUNCH_CHECK();
    if (cu()->debug_sync) CUDA_CHECK(cudaStreamSynchronize(cu()->stream));
}

extern "C" void linear_forward_cuda(const VilLinearFwd *a) {
    if (skinny_k_takes(a)) {
        linear_skinny_k_forward(a);
        return;
    }
    /* out^T(OC, N) = w^T... as column-major: A = w viewed (C, OC) transposed, B = in^T (C, N) */
    matmul(a->out, (a->flags & VIL_LINEAR_OUT_F32) != 0, a->ld_out, (const bf16 *)a->w, a->C, 1,
           (const bf16 *)a->in, a->ld_in, 0, a->OC, a->N, a->C, 0.0f, a->b);
}

extern "C" void linear_backward_cuda(const VilLinearBwd *a) {
    void *dinp = a->dinp;
    float *dw = a->dw, *db = a->db;
    const void *dout = a->dout, *in = a->in, *w = a->w;
    int N = a->N, C = a->C, OC = a->OC, ld_in = a->ld_in, ld_out = a->ld_out;
    int accumulate_dinp = a->accumulate_dinp, flags = a->flags;
    const bf16 *g = (const bf16 *)dout;
    if (flags & VIL_LINEAR_OUT_F32) {
        /* cuBLASLt wants both operands in one type: the head's f32 dlogits go through bf16 */
        bf16 *tmp = (bf16 *)cu_scratch(SCR_LT_BF16, (size_t)N * ld_out * sizeof(bf16));
        f32_to_bf16(tmp, (const float *)dout, (size_t)N * ld_out);
        g = tmp;
    }
    /* dinp^T(C, N) = w^T(C, OC) as stored, times dout^T(OC, N) */
    if (dinp)
        matmul(dinp, 0, ld_in, (const bf16 *)w, C, 0, g, ld_out, 0, C, N, OC,
               accumulate_dinp ? 1.0f : 0.0f, NULL);
    /* dw^T(C, OC) += in^T(C, N) dout(N, OC) */
    if (dw) matmul(dw, 1, C, (const bf16 *)in, ld_in, 0, g, ld_out, 1, C, OC, N, 1.0f, NULL);
    if (db) colsum_accumulate_cuda(db, dout, (flags & VIL_LINEAR_OUT_F32) != 0, N, OC, ld_out);
}
