/* sampler.c: per-epoch index lists, following torch.utils.data.DistributedSampler and DeiT's
 * samplers.py RASampler rule for rule. Only the permutation differs: torch.randperm's stream
 * cannot be reproduced, so ours is a Fisher-Yates shuffle from vil_hash_seed(seed, epoch). */
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
}

static int valid(const VilSampler *s) {
    return s->n > 0 && s->world >= 1 && s->rank >= 0 && s->rank < s->world && s->repeats >= 1 &&
           s->selected_round >= 0;
}

/* Per-rank length before RASampler's truncation: ceil(repeats * n / world). */
static long padded_length(const VilSampler *s) {
    long total = (long)s->n * s->repeats;
    return (total + s->world - 1) / s->world;
}

int vil_sampler_epoch_length(const VilSampler *s) {
    if (!valid(s)) return 0;
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
        long g = (long)s->rank + (long)p * s->world;
        out[p] = perm[(g % rn) / s->repeats];
    }
    free(perm);
    return 0;
}
