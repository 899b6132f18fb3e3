/* scan_tune.cuh: the scan's tuning, one row per GPU architecture: the register targets and
 * staging depths the kernels are compiled with (per __CUDA_ARCH__: the row of the code being
 * compiled) and the host's chunk and path thresholds (the row the context picked when it opened,
 * cu_scan_open). The sm_90 row is measured on the H100 (cuda/PERF_NOTES.md); the others hold the
 * same values, unmeasured. What differs by recurrence is a row in the recurrence's header
 * (ScanRecTune below; vil/rec/<id>.h). A -D of a field's knob name on the compiler's command
 * line replaces that field in every row, for sweeps: make NVCC="/usr/local/cuda/bin/nvcc
 * -DPAIR_MINB=7" (dev/cuda/README.md). */
#ifndef VIL_CUDA_SCAN_TUNE_CUH
#define VIL_CUDA_SCAN_TUNE_CUH

/* A recurrence's own tuning: the row its policy's tune() returns (vil/rec/<id>.h, which says
 * what it measured and names the knobs that replace its fields). One row for every architecture:
 * adj_warps and adj_fullsub are template arguments of the adjoint kernel, which the host pass
 * and every device pass must agree on. */
struct ScanRecTune {
    int adj_warps;   /* the adjoint kernel's warps per SM for the register allocation */
    int adj_fullsub; /* the adjoint's whole sub-chunks compiled apart from the partial one (1) or
                      * not (0) */
    int long_chunks; /* the forward chunks long sequences (L >= long_l) up to seq_fwd_long
                      * threads (1), or up to seq_fwd as at other lengths (0) */
    int quad_fwd;    /* the forward's quad kernel below this many pair-kernel threads (x chunks) */
};

struct ScanTune {
    int arch;     /* 100 x compute capability: 900 = sm_90; a GPU takes the last row at or below its */
    int measured; /* 1: measured on such a GPU; 0: the sm_90 values, unmeasured */
    /* ---- compile-time: per architecture's code ---- */
    int pair_minb;       /* PAIR_MINB: the pair kernel's blocks per SM for the register allocation */
    int pair_minb_chf;   /* PAIR_MINB_CHF: the same for the chunked forward pair kernel */
    int pair_stages;     /* PAIR_STAGES: the forward pair kernel's staging slots (rounds in flight + 1) */
    int pair_seq_unroll; /* PAIR_SEQ_UNROLL: the sequential pair kernel's two passes rolled (1) or
                          * unrolled (2) */
    int qs_stages;       /* QS_STAGES: the quad kernel's staging slots */
    /* ---- host-side thresholds (threads: sample x channel threads of a pass, E in blocks of 128) */
    int seq_fwd;      /* SCAN_SEQ_FWD: the forward runs sequentially from this many threads */
    int seq_fwd_long; /* SCAN_SEQ_FWD_LONG: the same at L >= long_l, for a recurrence whose
                       * ScanRecTune says long_chunks */
    int long_l;       /* SCAN_LONG_L: tokens from which a sequence is long */
    int seq_bwd;      /* SCAN_SEQ_BWD: the backward runs sequentially from this many threads */
    int par_threads;  /* SCAN_PAR_THREADS: the chunked form brings a pass to about this many threads */
    int min_c;        /* SCAN_MIN_C: no chunk shorter than this (tokens) */
    int keep_long;    /* SCAN_KEEP_LONG: in training at L >= long_l, the forward cuts the backward's
                       * chunks so its kept states serve the backward (0: it chooses alone) */
};

/* sm_90, measured on the H100 80GB (dev/cuda/scan and vil bench; cuda/PERF_NOTES.md):
 * - pair_minb 6 (80 registers): forward 278 / 289 / 289 us per Tiny layer at 6 / 7 / 8;
 * - pair_minb_chf 5 (up to 102 registers), against 6 / 7, fwd us, E = 384: L 4097 B 32 962 / 987
 *   / 995, L 16385 B 8 1,004 / 1,034 / 1,041; 5 for every pair kernel made the sequential
 *   forward (L 197 B 256: 237 / 231) and the backward prep (1,360 / 1,269) slower;
 * - pair_stages 2: 3 gave L 4097 B 1 70.3 / 68.6, B 32 chunked 1,053 / 1,076, L 16385 B 8 1,099
 *   / 1,083: no gain (the backward prep keeps 2: its shared memory is near a static
 *   allocation's 48 KB);
 * - pair_seq_unroll 1: unrolled, the sequential pair kernel spills 16 bytes where it spills 4;
 * - seq_fwd 12288, seq_bwd 32768, par_threads 196608, min_c 64: at E = 384, fwd / bwd us, L 4097
 *   B 1: C 16 140 / 435, 32 106 / 308, 64 104 / 295, 128 150 / 435; B 32: C 64 1897 / 5609, 128
 *   1835 / 5556, 256 1836 / 5618, 512 2039 / 5662; L 16385 B 8: C 64 1935 / 5709, 256 1852 /
 *   5641; L 197 B 256 sequential 271 / 1349; sequential L 4097 B 32 1579 / 7289 against chunked
 *   (C 256) 1785 / 5560, B 1 1527 / 6215 against 97 / 286. The forward's threshold is lower:
 *   its sequential kernel does half the chunked form's work, the backward's the same work in a
 *   kernel that fills the GPU less;
 * - seq_fwd_long 16384 at long_l 2048, for the recurrences whose long_chunks is 1 (Longhorn:
 *   its staged chunk summaries; vil/rec/longhorn.h has the measurements);
 * - keep_long 1: the chunked forward costs more than the sequential one there (ViL-Small, ViM at
 *   1024 px b32) but the backward's chunk summaries then skip their forward pass. */
constexpr ScanTune SCAN_TUNE_SM90 = {
    900, 1,
    /* pair_minb, pair_minb_chf, pair_stages, pair_seq_unroll, qs_stages */ 6, 5, 2, 1, 4,
    /* seq_fwd, seq_fwd_long, long_l */ 12288, 16384, 2048,
    /* seq_bwd */ 32768,
    /* par_threads, min_c, keep_long */ 196608, 64, 1,
};

/* a row not measured on its architecture: the sm_90 values */
constexpr ScanTune scan_tune_unmeasured(int arch) {
    ScanTune t = SCAN_TUNE_SM90;
    t.arch = arch, t.measured = 0;
    return t;
}

/* the knobs given with -D on the compiler's command line, over every row */
constexpr ScanTune scan_tune_knobs(ScanTune t) {
#ifdef PAIR_MINB
    t.pair_minb = PAIR_MINB;
#endif
#ifdef PAIR_MINB_CHF
    t.pair_minb_chf = PAIR_MINB_CHF;
#endif
#ifdef PAIR_STAGES
    t.pair_stages = PAIR_STAGES;
#endif
#ifdef PAIR_SEQ_UNROLL
    t.pair_seq_unroll = PAIR_SEQ_UNROLL;
#endif
#ifdef QS_STAGES
    t.qs_stages = QS_STAGES;
#endif
#ifdef SCAN_SEQ_FWD
    t.seq_fwd = SCAN_SEQ_FWD;
#endif
#ifdef SCAN_SEQ_FWD_LONG
    t.seq_fwd_long = SCAN_SEQ_FWD_LONG;
#endif
#ifdef SCAN_LONG_L
    t.long_l = SCAN_LONG_L;
#endif
#ifdef SCAN_SEQ_BWD
    t.seq_bwd = SCAN_SEQ_BWD;
#endif
#ifdef SCAN_PAR_THREADS
    t.par_threads = SCAN_PAR_THREADS;
#endif
#ifdef SCAN_MIN_C
    t.min_c = SCAN_MIN_C;
#endif
#ifdef SCAN_KEEP_LONG
    t.keep_long = SCAN_KEEP_LONG;
#endif
    return t;
}

/* the table, by architecture (ascending) */
constexpr ScanTune scan_tunes[] = {
    scan_tune_knobs(scan_tune_unmeasured(800)),  /* A100 */
    scan_tune_knobs(scan_tune_unmeasured(860)),  /* A40, RTX 30x0 (sm_87 takes this row) */
    scan_tune_knobs(scan_tune_unmeasured(890)),  /* L40S, RTX 40x0 */
    scan_tune_knobs(SCAN_TUNE_SM90),             /* H100, H200 */
    scan_tune_knobs(scan_tune_unmeasured(1000)), /* B200 (sm_103 takes this row) */
    scan_tune_knobs(scan_tune_unmeasured(1200)), /* RTX 50x0, RTX PRO 6000 */
};
constexpr int SCAN_NTUNES = sizeof scan_tunes / sizeof scan_tunes[0];

/* the row of arch (100 x compute capability): the last at or below it, else the first */
constexpr int scan_tune_index(int arch) {
    int r = 0;
    for (int i = 0; i < SCAN_NTUNES; i++)
        if (scan_tunes[i].arch <= arch) r = i;
    return r;
}

/* the row the kernels of this compilation pass are built with (the host pass takes the first
 * row: launch bounds and staging depths are the device pass's) */
#ifdef __CUDA_ARCH__
#define SCAN_ARCH __CUDA_ARCH__
#else
#define SCAN_ARCH 0
#endif
constexpr ScanTune SCAN_KT = scan_tunes[scan_tune_index(SCAN_ARCH)];

#endif
