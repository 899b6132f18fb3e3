/* harness.h: the host side every dev/cuda harness shares (llm.c's dev/cuda/common.h is the
 * model): the command line `[version] [B] [iters]`, seeded random inputs (rounded to bf16 where
 * they feed "act" tensors, so the GPU and the CPU reference see the same numbers), uploads as act
 * or f32 and downloads through the backend, ||a - ref|| / ||ref|| over strided rows, the report
 * `name: rel err X (tol Y) OK|FAIL`, the timing loop and a closing `summary:` line. Every device
 * and host buffer made here is tracked and freed by h_finish. Valid C and C++: the .cu harnesses
 * and bench_ops.c use it. */
#ifndef VIL_DEV_CUDA_HARNESS_H
#define VIL_DEV_CUDA_HARNESS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vil/backend.h"
#include "vil/backend_module.h"
#include "vil/common.h"
#include "tests/rel_err.h"
#ifdef __cplusplus
extern "C" {
#endif
#include "vil/ops_cpu.h"
#ifdef __cplusplus
}
#endif

/* tests/gpu_ops.c's tolerances: a bf16 output carries one rounding (2^-9 = 2e-3 per element);
 * a float32 output computed from the same inputs differs only by summation order */
#define H_TOL_BF16 1e-2
#define H_TOL_F32 1e-4
/* the version that runs the live op through the backend table (what the model runs) */
#define H_V_BACKEND 2
#define H_WARMUP 2

typedef struct Harness Harness;
/* a version's forward or backward: args is the op's argument struct of vil/backend.h (device
 * pointers); kernels go on h_stream(h) */
typedef void (*HCall)(Harness *h, const void *args);
typedef struct {
    HCall fwd, bwd;
} HVersion;

struct Harness {
    const VilBackend *be;
    VilRng rng;
    const char *name;       /* the harness, for the summary line */
    char tag[64];           /* what this run studies (e.g. "longhorn"), may stay "" */
    const HVersion *v;      /* the version chosen */
    int version, B, iters;
    int checks, failed;
    char times[256];        /* "fwd 12.3 us, bwd 45.6 us" for the summary */
    void **dev, **host;     /* tracked buffers */
    int n_dev, n_host, cap_dev, cap_host;
};

/* ---- bf16 on the host: round to nearest even, NaN kept ---- */
static inline uint16_t h_bf_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float h_bf_round(float f) {
    uint32_t u = (uint32_t)h_bf_bits(f) << 16;
    float r;
    memcpy(&r, &u, 4);
    return r;
}

/* ---- tracked buffers ---- */
static inline void h_track(void ***list, int *n, int *cap, void *p) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        *list = (void **)vil_realloc(*list, (size_t)*cap * sizeof(void *));
    }
    (*list)[(*n)++] = p;
}
/* n floats on the host, zeroed */
static inline float *h_host(Harness *h, size_t n) {
    float *p = (float *)vil_calloc(n + 1, sizeof(float));
    h_track(&h->host, &h->n_host, &h->cap_host, p);
    return p;
}
static inline void *h_alloc(Harness *h, size_t bytes) {
    void *p = h->be->alloc(h->be, bytes ? bytes : 1);
    if (!p) VIL_FATAL("harness: %zu bytes of device memory (the size asked of the harness)", bytes);
    h_track(&h->dev, &h->n_dev, &h->cap_dev, p);
    return p;
}

/* ---- inputs ---- */
/* n normal floats times scale; h_rand_bf: rounded to bf16 (the inputs of act tensors) */
static inline void h_fill_rand(Harness *h, float *p, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) p[i] = scale * vil_rng_normal(&h->rng);
}
static inline float *h_rand(Harness *h, size_t n, float scale) {
    float *p = h_host(h, n);
    h_fill_rand(h, p, n, scale);
    return p;
}
static inline float *h_rand_bf(Harness *h, size_t n, float scale) {
    float *p = h_rand(h, n, scale);
    for (size_t i = 0; i < n; i++) p[i] = h_bf_round(p[i]);
    return p;
}
static inline float *h_copy(Harness *h, const float *src, size_t n) {
    float *p = h_host(h, n);
    memcpy(p, src, n * sizeof(float));
    return p;
}

/* ---- host <-> device ---- */
/* an act tensor: bf16 on CUDA, float32 on the CPU backend (--cpu) */
static inline void *h_act(Harness *h, const float *src, size_t n) {
    void *d = h_alloc(h, n * h->be->act_bytes);
    if (h->be->act_bytes == 2) {
        uint16_t *b = (uint16_t *)vil_malloc(n * 2 + 2);
        for (size_t i = 0; i < n; i++) b[i] = h_bf_bits(src[i]);
        h->be->to_device(h->be, d, b, n * 2);
        free(b);
    } else {
        h->be->to_device(h->be, d, src, n * sizeof(float));
    }
    return d;
}
static inline float *h_f32(Harness *h, const float *src, size_t n) {
    float *d = (float *)h_alloc(h, n * sizeof(float));
    h->be->to_device(h->be, d, src, n * sizeof(float));
    return d;
}
/* a device tensor of n random values, act or f32, whose host copy is not kept (timing only) */
static inline void *h_dev_rand(Harness *h, size_t n, float scale, int act) {
    float *p = (float *)vil_malloc(n * sizeof(float) + 4);
    h_fill_rand(h, p, n, scale);
    void *d = act ? h_act(h, p, n) : (void *)h_f32(h, p, n);
    free(p);
    return d;
}
/* all bits set (NaN in bf16 and float32): an element an op fails to write shows up */
static inline void *h_poison(Harness *h, size_t bytes) {
    unsigned char *b = (unsigned char *)vil_malloc(bytes + 1);
    memset(b, 0xff, bytes);
    void *d = h_alloc(h, bytes);
    h->be->to_device(h->be, d, b, bytes);
    free(b);
    return d;
}
static inline void *h_poison_act(Harness *h, size_t n) { return h_poison(h, n * h->be->act_bytes); }
/* the element `off` act elements into p (a column slice: z inside xz) */
static inline void *h_act_at(const Harness *h, const void *p, size_t off) {
    return (char *)p + off * h->be->act_bytes;
}
static inline float *h_get_act(Harness *h, const void *d, size_t n) {
    float *p = h_host(h, n);
    h->be->act_to_host_f32(h->be, p, d, n);
    return p;
}
static inline float *h_get_f32(Harness *h, const void *d, size_t n) {
    float *p = h_host(h, n);
    h->be->to_host(h->be, p, d, n * sizeof(float));
    return p;
}

/* ---- validation ---- */
/* a -= base: an accumulated output compared by its increment */
static inline void h_sub(float *a, const float *base, size_t n) {
    for (size_t i = 0; i < n; i++) a[i] -= base[i];
}
static inline int h_check(Harness *h, const char *name, double err, double tol) {
    int ok = err <= tol; /* NaN fails */
    h->checks++;
    h->failed += !ok;
    printf("%s: rel err %.3e (tol %.0e) %s\n", name, err, tol, ok ? "OK" : "FAIL");
    return ok;
}

/* ---- timing ---- */
/* us per call of `iters` back-to-back calls after H_WARMUP, the backend's sync on both sides
 * (every harness kernel runs on the backend's stream); GB/s from the bytes the call must move
 * at least */
static inline double h_time(Harness *h, const char *name, HCall call, const void *args, double bytes) {
    for (int i = 0; i < H_WARMUP; i++) call(h, args);
    h->be->sync(h->be);
    double t0 = vil_now();
    for (int i = 0; i < h->iters; i++) call(h, args);
    h->be->sync(h->be);
    double us = (vil_now() - t0) / h->iters * 1e6;
    printf("%s: %.1f us/call, %.0f GB/s (%.1f MB at least)\n", name, us, bytes / us / 1e3, bytes / 1e6);
    size_t n = strlen(h->times);
    snprintf(h->times + n, sizeof h->times - n, "%s%s %.1f us", n ? ", " : "", name, us);
    return us;
}

/* ---- the run ---- */
/* the backend (CUDA, or the CPU backend with --cpu), the RNG seeded */
static inline void h_open(Harness *h, int cpu) {
    char why[256];
    memset(h, 0, sizeof *h);
    if (cpu) {
        h->be = &vil_backend_cpu;
    } else {
        /* cuda/'s objects are linked in (the Makefile's dev-cuda rule): the loader takes their
         * table instead of loading libvil-cuda.so, so a harness kernel and the backend's ops
         * share one context */
        if (vil_backend_module_link(vil_cuda_module()) != 0) exit(1);
        if (!vil_cuda_available(why, sizeof why)) {
            fprintf(stderr, "no usable GPU: %s\n", why);
            exit(1);
        }
        if (!(h->be = vil_backend_get("cuda"))) exit(1);
    }
    vil_rng_seed(&h->rng, 20261122);
}
/* 1 when flag is among argv[1..], which it then leaves */
static inline int h_take_flag(int *argc, char **argv, const char *flag) {
    for (int i = 1; i < *argc; i++)
        if (strcmp(argv[i], flag) == 0) {
            memmove(argv + i, argv + i + 1, (size_t)(*argc - i) * sizeof(char *));
            (*argc)--;
            return 1;
        }
    return 0;
}
/* `flag N` among argv[1..] (both then left out): N, a whole number from lo to hi; def when
 * the flag is absent; exit 2 with a message for anything else */
static inline int h_take_int(int *argc, char **argv, const char *flag, int def, int lo, int hi) {
    for (int i = 1; i < *argc; i++)
        if (strcmp(argv[i], flag) == 0) {
            long v;
            if (i + 1 >= *argc || vil_parse_int(argv[i + 1], &v) != 0 || v < lo || v > hi) {
                fprintf(stderr, "%s takes a whole number from %d to %d\n", flag, lo, hi);
                exit(2);
            }
            memmove(argv + i, argv + i + 2, (size_t)(*argc - i - 1) * sizeof(char *));
            *argc -= 2;
            return (int)v;
        }
    return def;
}
/* what a harness tells h_init */
typedef struct {
    const char *name;         /* the binary, for messages and the summary */
    const char *usage;        /* the usage line, what it studies, a line per version */
    const char *flags;        /* its own flags, a line each, or "" */
    const HVersion *versions; /* version i + 1 is versions[i] */
    int n_versions, B, iters; /* B, iters: the defaults */
} HSpec;
static inline void h_usage(FILE *f, const HSpec *sp) {
    fprintf(f, "%s", sp->usage);
    fprintf(f, "  B          batch size, for the CPU reference too (default %d)\n"
               "  iters      timed calls, after %d warm-up calls (default %d)\n%s"
               "  --cpu      version %d on the CPU backend: checks the harness itself where there\n"
               "             is no GPU (the validation then compares the reference with itself)\n",
            sp->B, H_WARMUP, sp->iters, sp->flags, H_V_BACKEND);
    fprintf(f, "A version is validated against the live CPU reference first (exit 1 and no timing\n"
               "when it fails), then timed. To try an idea, add version 3: its functions beside\n"
               "version 1's, a row in the harness's `versions` table and a line above; then\n"
               "`make dev-cuda && build/dev/cuda/%s 3`. A version that wins moves into cuda/, and\n"
               "cuda/PERF_NOTES.md records what it measured with the commit (dev/cuda/README.md).\n",
            sp->name);
}
/* `name [version] [B] [iters] [--cpu]` (the harness takes its own flags out first): usage on
 * stdout for -h, on stderr with exit 2 for anything else it cannot take */
static inline void h_init(Harness *h, int argc, char **argv, const HSpec *sp) {
    if (h_take_flag(&argc, argv, "-h") || h_take_flag(&argc, argv, "--help")) {
        h_usage(stdout, sp);
        exit(0);
    }
    int cpu = h_take_flag(&argc, argv, "--cpu");
    long v[3] = {H_V_BACKEND, sp->B, sp->iters}, lo[3] = {1, 1, 1}, hi[3] = {sp->n_versions, 4096, 1000000};
    const char *what[3] = {"version", "B", "iters"};
    if (argc > 4) {
        fprintf(stderr, "%s: too many arguments\n", sp->name);
        h_usage(stderr, sp);
        exit(2);
    }
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "--", 2) == 0) {
            fprintf(stderr, "%s: unknown option '%s'\n", sp->name, argv[i]);
            h_usage(stderr, sp);
            exit(2);
        } else if (vil_parse_int(argv[i], &v[i - 1]) != 0 || v[i - 1] < lo[i - 1] || v[i - 1] > hi[i - 1]) {
            fprintf(stderr, "%s: %s must be a whole number from %ld to %ld, not '%s'\n", sp->name,
                    what[i - 1], lo[i - 1], hi[i - 1], argv[i]);
            h_usage(stderr, sp);
            exit(2);
        }
    if (cpu && v[0] != H_V_BACKEND) {
        fprintf(stderr, "%s: --cpu runs version %d only (the others are CUDA kernels)\n", sp->name,
                H_V_BACKEND);
        exit(2);
    }
    h_open(h, cpu);
    h->name = sp->name;
    h->version = (int)v[0], h->B = (int)v[1], h->iters = (int)v[2];
    h->v = &sp->versions[h->version - 1];
}
/* after the validation: 1 when every check passed; otherwise says that nothing is timed */
static inline int h_valid(const Harness *h) {
    if (h->failed) printf("%d of %d checks failed: not timed\n", h->failed, h->checks);
    return !h->failed;
}
/* the summary line, every buffer freed; the exit status (1 when a check failed) */
static inline int h_finish(Harness *h) {
    if (h->checks || h->times[0])
        printf("summary: %s%s%s v%d B=%d: validation %s (%d checks)%s%s\n", h->name, h->tag[0] ? " " : "",
               h->tag, h->version, h->B, h->failed ? "FAIL" : "OK", h->checks, h->times[0] ? "; " : "",
               h->times);
    h->be->sync(h->be);
    for (int i = 0; i < h->n_dev; i++) h->be->free(h->be, h->dev[i]);
    for (int i = 0; i < h->n_host; i++) free(h->host[i]);
    free(h->dev), free(h->host);
    h->dev = h->host = NULL;
    h->n_dev = h->n_host = 0;
    return h->failed ? 1 : 0;
}

/* ---- the model's shapes (vil/config.c, vil/model.c) ---- */
typedef struct {
    int B, L, D, E, N, R, K;
    int dt_ld; /* dt_low's columns padded to 8: dt_proj's inner size, where k starts */
    int xdbl_ld; /* x_dbl's row: dt_ld + 2N padded to 8, x_proj's output count */
} HShapes;
/* ViL-Tiny at 224 x 224, patch 16 (embed_dim D; 384 is ViL-Small) */
static inline HShapes h_shapes(int B, int D) {
    HShapes s;
    s.B = B, s.L = 197, s.D = D, s.E = 2 * D, s.N = 16, s.R = (D + 15) / 16, s.K = 4;
    s.dt_ld = (s.R + 7) / 8 * 8;
    s.xdbl_ld = (s.dt_ld + 2 * s.N + 7) / 8 * 8;
    return s;
}

/* ---- CUDA side, for the .cu harnesses ---- */
#ifdef __CUDACC__
#include "cuda/cuda_common.cuh"
/* the backend's stream: a harness kernel launched on it is ordered with the backend's ops and
 * covered by its sync */
static inline cudaStream_t h_stream(const Harness *h) {
    if (strcmp(h->be->name, "cuda") != 0) VIL_FATAL("a harness kernel needs the CUDA backend");
    return cu_bind(h->be)->stream;
}
/* For the readable kernels of version 1. Their per-thread bodies are __host__ __device__, so a
 * body can be run (and debugged) on the host by looping over its threads; h_add is then a
 * plain add. */
__host__ __device__ __forceinline__ float h_bf2f(bf16 x) { return __bfloat162float(x); }
__host__ __device__ __forceinline__ bf16 h_f2bf(float x) { return __float2bfloat16_rn(x); }
__host__ __device__ __forceinline__ float h_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__host__ __device__ __forceinline__ void h_add(float *p, float v) {
#ifdef __CUDA_ARCH__
    atomicAdd(p, v);
#else
    *p += v;
#endif
}
#endif

#endif
