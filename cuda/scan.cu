/* scan.cu: the scan's host side (scan_common.cuh tells the whole scan): the argument block from
 * the op's struct, the choice of chunks and of kernels by shape, the scratch they share, and the
 * entry points of the backend table. The kernels are in scan_fwd.cu, scan_bwd.cu and
 * scan_chunk.cu. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "cuda/ops_cuda.h"
#include "cuda/scan_rec.cuh"

/* largest copy size (16, 8, 4 bytes; 2 = plain loads) dividing every row start */
static int vec_bytes(const void *const *ptrs, int np, const size_t *strides_bytes, int ns) {
    size_t acc = 16;
    for (int i = 0; i < np; i++) acc |= (size_t)ptrs[i];
    for (int i = 0; i < ns; i++) acc |= strides_bytes[i];
    size_t low = acc & (~acc + 1);
    return low >= 16 ? 16 : low >= 8 ? 8 : low >= 4 ? 4 : 2;
}

static void fill_common(ScanArgs *a, const void *const u[2], const void *const delta[2],
                        const void *const xdbl[2], const void *z, const void *dout,
                        const float *const D[2], const float *const A_log[2], const float *h0, int B,
                        int L, int E, int N, int dt_ld, int xdbl_ld, int ldz, int causal) {
    memset(a, 0, sizeof *a);
    a->dirs = causal ? 1 : 2;
    for (int j = 0; j < a->dirs; j++) {
        a->u[j] = (const bf16 *)u[j];
        a->delta[j] = (const bf16 *)delta[j];
        a->xdbl[j] = (const bf16 *)xdbl[j];
        a->Dsk[j] = D[j];
        a->A_log[j] = A_log ? A_log[j] : NULL;
    }
    a->z = (const bf16 *)z;
    a->dout = (const bf16 *)dout;
    a->h0 = h0;
    a->B = B, a->L = L, a->E = E, a->dt_ld = dt_ld, a->xdbl_ld = xdbl_ld, a->ldz = ldz;
    a->nck = (L + CK - 1) / CK;
    /* act rows start at (row * ld + block * tpb) elements */
    const void *pa[6] = {u[0], u[a->dirs - 1], delta[0], delta[a->dirs - 1], z, dout ? dout : z};
    size_t sa[3] = {(size_t)E * 2, (size_t)ldz * 2, (size_t)32 * 2};
    a->vec_act = vec_bytes(pa, 6, sa, 3);
    /* checkpoint rows (and h0's, staged as CK-chunk 0's) start at (row * E + block * 32) floats */
    size_t sc[1] = {(size_t)E * 4};
    const void *pc[1] = {h0};
    a->vec_ck = vec_bytes(pc, 1, sc, 1) >= 16 ? 16 : 4;
}

/* bytes of the k|q table of the directions */
template <int N>
static size_t kq_bytes(const ScanArgs *a) {
    return (size_t)a->dirs * a->B * a->L * KQ<N>::W * sizeof(float);
}

/* The context's scan settings, when it opens: the tuning row of its GPU's architecture
 * (scan_tune.cuh) and the measurement knobs of the environment, VIL_SCAN_CHUNK (the chunks, in
 * place of a request of 0: -1 the sequential kernels) and VIL_SCAN_SPLIT (the forward's threads
 * per channel), announced on stderr at their first use when set */
void cu_scan_open(CuCtx *c, int cc_major, int cc_minor) {
    c->scan_tune = &scan_tunes[scan_tune_index(cc_major * 100 + cc_minor * 10)];
    const char *e = getenv("VIL_SCAN_CHUNK");
    c->scan_chunk = e && *e ? atoi(e) : 0;
    e = getenv("VIL_SCAN_SPLIT");
    c->scan_split = e && *e ? atoi(e) : 0;
    c->scan_told = 0;
}
/* a knob of the context (0: unset), announced the first time it is read */
static int scan_knob(int value, int bit, const char *name, const char *what) {
    if (value && !(cu()->scan_told & bit)) {
        cu()->scan_told |= bit;
        fprintf(stderr, "vil: %s=%d: the scan's %s set, not chosen by shape\n", name, value, what);
    }
    return value;
}

/* The chunks of the token-parallel form. req > 0: chunks of req steps (rounded up to a multiple
 * of CK); req < 0: none. req = 0, by shape: none while the sample x channel threads of a pass
 * (B x E, in blocks of 128) reach `seq` (seq_fwd, seq_bwd), where the sequential kernels are as
 * fast; else chunks that bring a pass to about par_threads threads, none shorter than min_c
 * (scan_tune.cuh). VIL_SCAN_CHUNK takes the place of a request of 0. */
static void choose_chunks(ScanArgs *a, int req, long seq) {
    const ScanTune &t = *cu()->scan_tune;
    if (req == 0) req = scan_knob(cu()->scan_chunk, 1, "VIL_SCAN_CHUNK", "chunks are");
    long L = a->L, th = (long)a->B * ((a->E + 127) / 128 * 128), C = L;
    if (req > 0) {
        C = (req + CK - 1) / CK * CK;
    } else if (req == 0 && th < seq) {
        long want = (t.par_threads + th - 1) / th; /* chunks */
        C = (L + want - 1) / want;
        C = (C + CK - 1) / CK * CK;
        if (C < t.min_c) C = t.min_c;
    }
    /* blockIdx.z holds sample x chunk */
    long most = 65535 / a->B;
    if ((L + C - 1) / C > most) C = ((L + most - 1) / most + CK - 1) / CK * CK;
    if (C >= L) C = L;
    a->C = (int)C, a->nch = (int)((L + C - 1) / C);
}

/* bytes of one chunk-summary array */
template <int N>
static size_t ch_bytes(const ScanArgs *a) {
    return (size_t)a->B * a->dirs * a->nch * N * a->E * sizeof(float);
}

/* carve sizes[i] bytes from one SCR_OP scratch region in 4 KB aligned pieces */
static void carve(void **out, const size_t *sizes, int n) {
    size_t off = 0, offs[16];
    for (int i = 0; i < n; i++) offs[i] = off, off += (sizes[i] + 4095) / 4096 * 4096;
    char *base = (char *)cu_scratch(SCR_OP, off);
    for (int i = 0; i < n; i++) out[i] = base + offs[i];
}

template <int N, class R>
static void forward_impl(ScanArgs a) {
    /* the float k|q rows for the pair kernel and the chunk summaries, the compact ones for the
     * quad kernel */
    const bool quad = a.split == QUAD_Q, flt = !quad || a.nch > 1;
    size_t chb = a.nch > 1 ? ch_bytes<N>(&a) : 0;
    size_t sz[4] = {flt ? kq_bytes<N>(&a) : 0, quad ? (size_t)a.dirs * a.B * a.L * KQH<N>::BYTES : 0, a.keep ? 0 : chb, chb};
    void *p[4];
    carve(p, sz, 4);
    if (flt) scan_kq_launch<N>(&a, (float *)p[0], false);
    if (quad) scan_kq_launch<N>(&a, (float *)p[1], true);
    a.chs = a.keep ? a.keep : (float *)p[2], a.chp = (float *)p[3];
    if (a.nch > 1) scan_chunk_chain<N, R>(a, false);
    scan_pair_launch<N, R, false>(a);
}

template <int N, class R>
static void backward_impl(ScanArgs a) {
    a.nblk1 = (a.E + PAIR_T - 1) / PAIR_T;
    a.nblk2 = (a.E + ADJ_T - 1) / ADJ_T;
    size_t B = a.B, L = a.L, E = a.E, Bc = B * a.nch; /* Bc: the (sample, chunk) rows of pd, pa */
    size_t J = a.dirs;
    /* one scratch region, carved in 4 KB aligned pieces (checkpoint rows are copied in 16-byte
     * pieces from (row * E + block * 32) floats) */
    size_t chb = a.nch > 1 ? ch_bytes<N>(&a) : 0;
    size_t sz[8] = {B * J * (a.nck > 1 ? a.nck - 1 : 1) * N * E * sizeof(float), /* ckpt */
                    B * a.nblk1 * J * L * N * sizeof(float),                      /* pq */
                    B * J * a.nblk2 * L * (N + 1) * sizeof(float),                /* pk, pkap */
                    Bc * J * E * (R::HAS_A ? N + 2 : 2) * sizeof(float),          /* pd, pb, pa */
                    kq_bytes<N>(&a), a.kept ? 0 : chb, chb, chb};                 /* chs chp chg */
    void *p[8];
    carve(p, sz, 8);
    a.ckpt = (float *)p[0];
    a.pq = (float *)p[1];
    a.pk = (float *)p[2];
    a.pkap = a.pk + B * J * a.nblk2 * L * N;
    a.pd = (float *)p[3];
    a.pa = a.pd + 2 * Bc * J * E;
    scan_kq_launch<N>(&a, (float *)p[4], false);
    if (!a.kept) a.chs = (float *)p[5];
    a.chp = (float *)p[6], a.chg = (float *)p[7];
    if (a.nch > 1) scan_chunk_chain<N, R>(a, true);
    scan_pair_launch<N, R, true>(a);
    scan_adjoint_launch<N, R>(a);
    /* dD[j] (+ dA_log[j]) += the per-(sample, chunk) partials, summed in a fixed order */
    for (int j = 0; j < a.dirs; j++) {
        colsum_rows_accumulate_cuda(a.dD[j], a.pd + (size_t)j * E, (int)Bc, (int)E, (int)(J * E));
        if (a.dbs[j])
            colsum_rows_accumulate_cuda(a.dbs[j], a.pd + (Bc * J + j) * E, (int)Bc, (int)E, (int)(J * E));
        if (R::HAS_A)
            colsum_rows_accumulate_cuda(a.dA[j], a.pa + (size_t)j * E * N, (int)Bc, (int)(E * N), (int)(J * E * N));
    }
}

/* f(R()) for the recurrence rec: the one place the runtime VilRecurrence becomes a policy type
 * (scan_rec.cuh), a case per recurrence of vil/rec/list.h */
#define SCAN_REC_CASE(U, l, P, ...) \
    case VIL_REC_##U: return f(P());
template <class F>
static void rec_dispatch(VilRecurrence rec, F f) {
    switch (rec) { VIL_RECURRENCE_LIST(SCAN_REC_CASE) }
    VIL_FATAL("scan: recurrence %d; the CUDA scan has %d (vil/rec/list.h)", (int)rec, (int)VIL_REC_COUNT);
}
/* f(integral_constant<int, N>()) for the state widths the kernels are built for */
template <class F>
static void n_dispatch(int N, F f) {
    if (N == 16) f(std::integral_constant<int, 16>());
    else if (N == 8) f(std::integral_constant<int, 8>());
    else if (N == 4) f(std::integral_constant<int, 4>());
    else VIL_FATAL("scan: d_state = %d; the CUDA scan is built for 4, 8 and 16", N);
}

/* the forward's and the backward's chunks of a shape (req: VilScanFwd/Bwd.chunk; keep: the
 * forward is asked to keep its states). In training at L >= long_l (keep_long) the forward cuts
 * the backward's chunks wherever the backward chunks, so that its states serve the backward. */
static void bwd_chunks(ScanArgs *a, int req) { choose_chunks(a, req, cu()->scan_tune->seq_bwd); }
template <class R>
static void fwd_chunks(ScanArgs *a, int req, bool keep) {
    const ScanTune &t = *cu()->scan_tune;
    if (t.keep_long && keep && a->L >= t.long_l) bwd_chunks(a, req);
    else choose_chunks(a, req, R::tune().long_chunks && a->L >= t.long_l ? t.seq_fwd_long : t.seq_fwd);
}
/* 1 when the backward cuts f's shape into f's chunks (more than one): states kept at them are
 * then what the backward's chain would make */
static bool same_as_bwd(const ScanArgs &f, int req) {
    ScanArgs g = f;
    bwd_chunks(&g, req);
    return f.nch > 1 && f.C == g.C && f.nch == g.nch;
}
/* f cut as a forward that keeps its states; 1 when those states serve the backward */
template <class R>
static bool states_shared(ScanArgs *f, int req) {
    fwd_chunks<R>(f, req, true);
    return same_as_bwd(*f, req);
}

extern "C" size_t scan_states_bytes_cuda(const VilScanFwd *p) {
    size_t bytes = 0;
    rec_dispatch(p->rec, [&](auto r) {
        using R = decltype(r);
        ScanArgs a;
        memset(&a, 0, sizeof a);
        a.B = p->B, a.L = p->L, a.E = p->E, a.dirs = p->causal ? 1 : 2;
        if (states_shared<R>(&a, p->chunk)) bytes = (size_t)a.B * a.dirs * a.nch * p->N * a.E * sizeof(float);
    });
    return bytes;
}

template <class R>
static void scan_forward(const VilScanFwd *p) {
    ScanArgs a;
    fill_common(&a, p->u, p->delta, p->xdbl, p->z, NULL, p->D, R::HAS_A ? p->A_log : NULL, p->h0,
                p->B, p->L, p->E, p->N, p->dt_ld, p->xdbl_ld, p->ldz, p->causal);
    a.out = (bf16 *)p->out;
    a.hT = p->hT;
    /* the chunks are the pair kernel's (the chunk summaries run a thread per channel whichever
     * kernel runs the passes); the quad kernel runs the passes where the pair kernel's would
     * have fewer than quad_fwd threads */
    fwd_chunks<R>(&a, p->chunk, p->states != NULL);
    /* the states at the chunk boundaries into the caller's buffer, for the backward */
    if (p->states && same_as_bwd(a, p->chunk)) a.keep = p->states;
    int split = p->split ? p->split : scan_knob(cu()->scan_split, 2, "VIL_SCAN_SPLIT", "threads per channel are");
    if (split == 0)
        split = (long)p->B * ((p->E + 127) / 128 * 128) * a.nch < R::tune().quad_fwd ? QUAD_Q : 1;
    if (split != 1 && split != QUAD_Q) VIL_FATAL("scan: split = %d; the CUDA forward has 1 and %d threads per channel", split, QUAD_Q);
    a.split = split;
    n_dispatch(p->N, [&](auto n) { forward_impl<decltype(n)::value, R>(a); });
}

template <class R>
static void scan_backward(const VilScanBwd *p) {
    ScanArgs a;
    fill_common(&a, p->u, p->delta, p->xdbl, p->z, p->dout, p->D, R::HAS_A ? p->A_log : NULL, p->h0,
                p->B, p->L, p->E, p->N, p->dt_ld, p->xdbl_ld, p->ldz, p->causal);
    a.dz = (bf16 *)p->dz;
    /* out: rows as dz's, at a fixed distance from dz's element (in elements) */
    a.out = (bf16 *)p->out, a.odz = p->out ? ((intptr_t)p->out - (intptr_t)p->dz) / (intptr_t)sizeof(bf16) : 0;
    for (int j = 0; j < a.dirs; j++) {
        a.du[j] = (bf16 *)p->du[j];
        a.ddelta[j] = (bf16 *)p->ddelta[j];
        a.dxdbl[j] = (bf16 *)p->dxdbl[j];
        a.dD[j] = p->dD[j];
        a.dA[j] = R::HAS_A ? p->dA_log[j] : NULL;
        a.dbs[j] = p->ddelta_sum[j];
    }
    a.split = 1;
    bwd_chunks(&a, p->chunk);
    /* the forward's states at the chunk boundaries (kept where the chunks are the same) */
    ScanArgs f = a;
    if (p->states && states_shared<R>(&f, p->chunk)) a.chs = (float *)p->states, a.kept = 1;
    n_dispatch(p->N, [&](auto n) { backward_impl<decltype(n)::value, R>(a); });
}

extern "C" void scan_bidir_forward_cuda(const VilScanFwd *p) {
    rec_dispatch(p->rec, [&](auto r) { scan_forward<decltype(r)>(p); });
}

extern "C" void scan_bidir_backward_cuda(const VilScanBwd *p) {
    rec_dispatch(p->rec, [&](auto r) { scan_backward<decltype(r)>(p); });
}
