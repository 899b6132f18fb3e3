/* sampler.c: per-epoch index lists. The global list (the permutation, each entry repeated for
 * repeated augmentation) and the epoch length follow torch.utils.data.DistributedSampler and
 * DeiT's samplers.py RASampler; training cuts that list into global batches with a slice per
 * rank (batch > 0), so a global step reads the same samples for any number of ranks. The
 * permutation differs from torch's: torch.randperm's stream cannot be reproduced, so ours is a
 * Fisher-Yates shuffle from vil_hash_seed(seed, epoch). */
#include "data/sampler.h"

#include <stdlib.h>

#include "vil/common.h"

/* Domain tag so the shuffle stream never coincides with the augmentation streams, which are
 * seeded from the same (seed, epoch, ...) keys. */
#define SHUFFLE_TAG 0x7368756666ULL

void vil_sampler_init_train(VilSampler *s, int n, int world, int rank, int repeats, uint64_t seed) {
    s->n = n;
    s->world = world;
    s->rank = rank;
    s->repeats = repeats;
    s->shuffle = 1;
    s->pad = 1;
    s->selected_round = 256;
    s->seed = seed;
    s->batch = 0;
    s->accum = 1;
    s->drop_last = 0;
}

void vil_sampler_init_eval(VilSampler *s, int n, int world, int rank) {
    s->n = n;
    s->world = world;
    s->rank = rank;
    s->repeats = 1;
    s->shuffle = 0;
    s->pad = 0;
    s->selected_round = 0;
    s->seed = 0;
    s->batch = 0;
    s->accum = 1;
    s->drop_last = 0;
}

static int valid(const VilSampler *s) {
    return s->n > 0 && s->world >= 1 && s->rank >= 0 && s->rank < s->world && s->repeats >= 1 &&
           s->selected_round >= 0 && s->batch >= 0 && s->accum >= 1;
}

/* Per-rank length before RASampler's truncation: ceil(repeats * n / world). */
static long padded_length(const VilSampler *s) {
    long total = (long)s->n * s->repeats;
    return (total + s->world - 1) / s->world;
}

/* The global list's length before padding, the same for every world: repeats x n, or with
 * repeated augmentation DeiT's (n // round) * round (n below round or with round 0). */
static long global_length(const VilSampler *s) {
    if (s->repeats == 1) return s->n;
    long sel = s->selected_round > 0 ? (long)s->n / s->selected_round * s->selected_round : 0;
    return sel > 0 ? sel : s->n;
}

int vil_sampler_epoch_length(const VilSampler *s) {
    if (!valid(s)) return 0;
    if (s->batch > 0 && s->pad) {
        long gb = (long)s->world * s->accum * s->batch, g = global_length(s);
        long nb = s->drop_last ? g / gb : (g + gb - 1) / gb;
        return (int)(nb * s->accum * s->batch);
    }
    if (!s->pad) return (s->n - s->rank + s->world - 1) / s->world;
    long len = padded_length(s);
    if (s->repeats > 1) {
        /* DeiT: num_selected_samples = int(math.floor(len(dataset) // 256 * 256 / world)),
         * so an epoch of repeated augmentation still visits about n samples per epoch over
         * all ranks, not 3n. Below `round` samples DeiT's rule gives an empty epoch; we fall
         * back to ceil(n / world) there (timm's RepeatAugSampler does with round = 0). */
        long sel = s->selected_round > 0
                       ? (long)((long)s->n / s->selected_round * s->selected_round) / s->world
                       : ((long)s->n + s->world - 1) / s->world;
        if (sel == 0) sel = ((long)s->n + s->world - 1) / s->world;
        if (sel < len) len = sel;
    }
    return (int)len;
}

long vil_sampler_global_position(const VilSampler *s, long pos) {
    if (s->batch > 0 && s->pad) {
        long micro = pos / s->batch, k = micro / s->accum, a = micro % s->accum;
        return (k * s->accum + a) * s->world * s->batch + (long)s->rank * s->batch + pos % s->batch;
    }
    return (long)s->rank + pos * s->world;
}

void vil_sampler_permutation(const VilSampler *s, int epoch, int *perm) {
    for (int i = 0; i < s->n; i++) perm[i] = i;
    if (!s->shuffle) return;
    VilRng rng;
    vil_rng_seed(&rng, vil_hash_seed(s->seed, (uint64_t)(int64_t)epoch, SHUFFLE_TAG, 0));
    for (int i = s->n - 1; i > 0; i--) {
        int j = (int)vil_rng_below(&rng, (uint32_t)i + 1);
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

int vil_sampler_epoch(const VilSampler *s, int epoch, int *out) {
    if (!valid(s)) return -1;
    int len = vil_sampler_epoch_length(s);
    int *perm = vil_malloc((size_t)s->n * sizeof(int));
    vil_sampler_permutation(s, epoch, perm);
    /* The global list is perm with each entry repeated `repeats` times (R*n long), padded at
     * the end with its own head to world * ceil(R*n / world); rank r takes every world-th
     * entry from r. Entry g of the padded list is entry g mod R*n of the unpadded one, which
     * is torch's wrap-around padding, so the list itself is never built. */
    long rn = (long)s->n * s->repeats;
    for (int p = 0; p < len; p++) {
        long g = vil_sampler_global_position(s, p);
        out[p] = perm[(g % rn) / s->repeats];
    }
    free(perm);
    return 0;
}
