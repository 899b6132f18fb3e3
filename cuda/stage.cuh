/* stage.cuh: asynchronous global -> shared copies (cp.async, sm_80 on) of rows of a tensor into
 * shared-memory staging slots, zero-filling what lies past the tensor: the generic queue (any
 * piece size, run-time shapes) and the compile-time one for 16-byte pieces. Every scan kernel
 * stages its rows through these. */
#ifndef VIL_CUDA_STAGE_CUH
#define VIL_CUDA_STAGE_CUH

#include "cuda/cuda_common.cuh"

/* ---- asynchronous global -> shared copies (cp.async), zero-filling past `valid` bytes ---- */
template <int BYTES>
__device__ __forceinline__ void cp_async(void *dst, const void *src, int valid) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    if (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(d), "l"(src), "n"(BYTES), "r"(valid));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int PENDING>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING)); }

/* copy `vb` bytes (a piece of a row) of which the first `valid` come from src */
__device__ __forceinline__ void copy_piece(void *dst, const void *src, int vb, int valid) {
    if (vb == 16) cp_async<16>(dst, src, valid);
    else if (vb == 8) cp_async<8>(dst, src, valid);
    else if (vb == 4) cp_async<4>(dst, src, valid);
    else if (vb == 2) *(bf16 *)dst = valid > 0 ? *(const bf16 *)src : f2bf(0.0f);
}

/* Queue the copy of nrows rows of `width` elements (esz bytes each) starting at channel c0
 * (valid below E; zero-filled past it). Row r = q * per_q + i comes from src_row(r) and lands
 * at dst row q * stride + i, so each quantity q owns a fixed block of `stride` rows. */
template <typename RowFn>
__device__ __forceinline__ void queue_rows(void *dst, int nrows, int width, int esz, int c0, int E,
                                           int vb, RowFn src_row, int tid, int nthreads,
                                           int per_q, int stride = 0) {
    int pieces = width * esz / vb, per = vb / esz;
    if (stride == 0) stride = per_q;
    for (int job = tid; job < nrows * pieces; job += nthreads) {
        int r = job / pieces, p = job - r * pieces;
        int q = r / per_q, i = r - q * per_q;
        int c = c0 + p * per;
        int valid = min(max(E - c, 0), per) * esz;
        const char *row = (const char *)src_row(r);
        char *dd = (char *)dst + ((size_t)(q * stride + i) * width + p * per) * esz;
        copy_piece(dd, valid > 0 ? row + (size_t)p * vb : row, vb, valid);
    }
}

/* The common case of queue_rows, with every shape known at compile time: 16-byte pieces of rows
 * of T bf16 channels, nq <= NQ quantities of ROWS steps each (row q * ROWS + i of dst); steps at
 * or past cs are zero-filled. Each thread's pieces are fixed (piece tid % P of rows tid / P +
 * k * T / P) and the quantity loop is unrolled, so nothing is divided by a run-time shape (the
 * generic loop's divisions are ~20% of the forward kernel's instructions, and the adjoint's
 * staging through it ~85 instructions per piece). src_row(q, i) must return a readable row even for i >= cs
 * (the caller clamps). */
template <int T, int ROWS, int NQ, typename RowFn>
__device__ __forceinline__ void queue_rows16(bf16 *dst, int nq, int cs, int c0, int E,
                                             RowFn src_row, int tid) {
    constexpr int P = T * 2 / 16, RA = T / P; /* pieces per row, rows per pass */
    static_assert(T % P == 0 && ROWS % RA == 0, "queue_rows16 shape");
    const int p = tid % P, c = c0 + p * 8, cvalid = min(max(E - c, 0), 8) * 2;
#pragma unroll
    for (int k = 0; k < ROWS / RA; k++) {
        const int i = tid / P + k * RA, valid = i < cs ? cvalid : 0;
#pragma unroll
        for (int q = 0; q < NQ; q++) {
            if (q >= nq) break;
            const bf16 *row = src_row(q, i);
            cp_async<16>(dst + (q * ROWS + i) * T + p * 8, valid > 0 ? row + p * 8 : row, valid);
        }
    }
}

#endif
