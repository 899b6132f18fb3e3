/* linear.cu: the matrix products through cuBLASLt (bf16 operands, fp32 accumulation, the bias
 * fused as an epilogue, strided inputs through the leading dimension, accumulation through beta)
 * and the deterministic column sums used for bias gradients. dinp overwrites unless
 * accumulate_dinp; dw and db accumulate. Plans (descriptors + chosen algorithm) are cached per
 * shape, so the heuristic query runs once per distinct call site. */
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda/ops_cuda.h"

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

extern "C" void linear_forward_cuda(const VilLinearFwd *a) {
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
