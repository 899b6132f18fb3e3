/* init_state.h: the counter-based random numbers of the initial-state interventions (doc/recipe.md
 * "Initial states"), one definition for the CPU ops (init_state.c) and the CUDA ones
 * (cuda/init_state.cu): number i of a sample's stream is a pure function of (seed, sample, i),
 * so the draws do not depend on the thread, the launch shape or how a batch is cut into ranks
 * and micro-batches. */
#ifndef VIL_INIT_STATE_H
#define VIL_INIT_STATE_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define VIL_HD static __host__ __device__ __forceinline__
#else
#define VIL_HD static inline
#endif

/* splitmix64's finalizer */
VIL_HD uint64_t vil_mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
/* the stream of global sample `sample` under seed */
VIL_HD uint64_t vil_state_key(uint64_t seed, uint64_t sample) { return vil_mix64(seed ^ vil_mix64(sample)); }
/* number i of a stream as 24 random bits: x >> 40 and (x >> 16) & 0xffffff of one 64-bit word */
VIL_HD uint64_t vil_state_word(uint64_t key, uint64_t i) { return vil_mix64(key ^ vil_mix64(i + 0x632be59bd9b4e019ull)); }
/* a standard normal (Box-Muller on the word's two 24-bit halves; float math, which the CPU and
 * CUDA round alike to within an ulp or two) */
VIL_HD float vil_state_normal(uint64_t key, uint64_t i) {
    uint64_t x = vil_state_word(key, i);
    float u1 = ((float)(x >> 40) + 0.5f) * (1.0f / 16777216.0f); /* (0, 1) */
    float u2 = (float)((x >> 16) & 0xffffffu) * (1.0f / 16777216.0f);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647692f * u2);
}
/* a uniform in [0, 1): a sample's drop draw is number 2^63 of its stream, off the states' */
VIL_HD float vil_state_uniform(uint64_t key, uint64_t i) {
    return (float)(vil_state_word(key, i) >> 40) * (1.0f / 16777216.0f);
}
#define VIL_STATE_DROP_DRAW 0x8000000000000000ull

#endif
