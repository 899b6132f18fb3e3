/* sampler.h: which dataset indices a rank reads in an epoch, in which order. A pure function
 * of (seed, epoch, rank, world): torch's DistributedSampler (repeats = 1) and DeiT's RASampler
 * (repeats = 3, "repeated augmentation"), with our own shuffle in place of torch.randperm. */
#ifndef VIL_SAMPLER_H
#define VIL_SAMPLER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n;              /* dataset size */
    int world, rank;    /* number of ranks and this one's index */
    int repeats;        /* 1: DistributedSampler; >1: RASampler with that many repeats */
    int shuffle;        /* permute per epoch (train); identity order (eval) */
    int pad;            /* 1: pad to a multiple of world as torch does, every rank the same
                         * length (train); 0: rank r takes r, r + world, ... < n, so ranks
                         * differ by at most one and no sample is counted twice (eval) */
    int selected_round; /* RASampler only: the per-rank epoch length is DeiT's
                         * floor((n // round) * round / world) with round 256, so all ranks
                         * together still read about n samples (not 3n) per epoch; ImageNet,
                         * 8 ranks: 160128 each. Below `round` samples, and with round 0,
                         * ceil(n / world) (DeiT would give an empty epoch). */
    uint64_t seed;
    int batch;          /* train, > 0: the per-rank batch; the epoch's global list is cut into
                         * global batches of world x batch and rank r reads slice r of each,
                         * so the samples of a global step, and their global positions, do
                         * not depend on world (vil_sampler_global_position). 0: rank r reads
                         * every world-th entry (torch's DistributedSampler order) */
    int accum;          /* with batch > 0: micro-batches per step (>= 1); a global batch is
                         * world x accum x batch, and micro-batch a of rank r reads its slice
                         * a x world + r */
    int drop_last;      /* with batch > 0: only whole global batches (train); 0: the last one
                         * is filled by wrapping around to the list's head */
} VilSampler;

/* Defaults: train = repeats as given, shuffle, pad, DeiT's round of 256, batch 0;
 * eval = no shuffle, no repeats, no padding. */
void vil_sampler_init_train(VilSampler *s, int n, int world, int rank, int repeats, uint64_t seed);
void vil_sampler_init_eval(VilSampler *s, int n, int world, int rank);

/* Number of indices this rank gets per epoch. */
int vil_sampler_epoch_length(const VilSampler *s);

/* This rank's indices for `epoch`: out (vil_sampler_epoch_length). 0, or -1 on a bad config. */
int vil_sampler_epoch(const VilSampler *s, int epoch, int *out);

/* The position in the epoch's global list (the same for every world) of this rank's entry pos:
 * what augmentation is keyed by, so a sample is augmented alike however many ranks read it. */
long vil_sampler_global_position(const VilSampler *s, long pos);

/* The epoch's permutation shared by all ranks: perm (n). */
void vil_sampler_permutation(const VilSampler *s, int epoch, int *perm);

#ifdef __cplusplus
}
#endif
#endif
