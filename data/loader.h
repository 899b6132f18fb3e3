/* loader.h: the input pipeline: a persistent pool of worker threads decoding and augmenting
 * samples into a ring of ready batches (images, labels, soft targets), in an order and with
 * augmentations that depend only on (seed, epoch, rank, world), never on the thread count. A
 * sample's augmentation is keyed by its position in the epoch's global list, so it is the same
 * however many ranks and micro-batches share a global batch; Mixup / CutMix mix within each
 * rank's batch (as timm under DDP). */
#ifndef VIL_LOADER_H
#define VIL_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "data/dataset.h"
#include "data/mixup.h"
#include "data/transform.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where batch memory comes from: `vil train` and `vil eval` pass the backend's host_alloc
 * (vil_feed_allocator in data/feed.h; pinned memory on CUDA) so that batches copy to the device
 * while the host goes on. alloc NULL: 64-byte aligned malloc. alloc returns NULL on failure. */
typedef struct {
    void *(*alloc)(size_t bytes, void *ctx);
    void (*free)(void *p, void *ctx);
    void *ctx;
} VilAllocator;

typedef enum { VIL_LOADER_TRAIN = 0, VIL_LOADER_EVAL = 1 } VilLoaderMode;

/* Streams of images instead of one image per row (the stream family, data/stream.c): each row
 * of a batch is one chunk of `chunk` consecutive images of one stream at the data's own size
 * (res x res, gray; no resize, no augmentation), with a label per image, and a stream's chunks
 * come in order in consecutive batches (the model carries its state from one to the next).
 *   train: each epoch's images in an order of (seed, epoch), cut into streams of `len`; a global
 *     group of world x accum x batch streams gives len / chunk steps, chunk 0 first; the
 *     recipe's augmentation and Mixup are not applied (vil_loader_create refuses them).
 *   eval: `streams` streams of `len` images (0: as many as the split has images); position p
 *     of stream s shows image P[(s + o_p) mod n], P a permutation of the split and o_p an
 *     offset, both of `seed`: with n streams every position shows every image once. Rank r
 *     reads streams r, r + world, ...; a last group of fewer streams fills its batch with
 *     empty rows (label -1). */
typedef struct {
    int len;      /* images per stream; 0: one image per row (not a stream) */
    int chunk;    /* images per row (the model's stream_chunk), dividing len */
    int streams;  /* eval: streams per pass (0: the split's size) */
} VilStreamSpec;

typedef struct {
    VilLoaderMode mode;
    int batch;            /* per-rank batch size */
    int res, channels;    /* output images (channels, res, res) */
    int threads;          /* worker threads (>= 1) */
    int prefetch;         /* batches prepared ahead of the one the caller holds */
    int world, rank;      /* train: each global batch (world x accum x batch samples) is cut into
                             slices, micro-batch a of this rank reads slice a x world + rank;
                             eval: rank r reads r, r + world, ... */
    int accum;            /* train: micro-batches per optimizer step (>= 1) */
    uint64_t seed;
    int repeats;          /* train: repeated augmentation (DeiT: 3); eval: ignored */
    int drop_last;        /* drop the last partial batch (train default 1, eval 0) */
    VilTrainTransform train; /* train: per-sample transform (RandAugment, erasing, ...) */
    float crop_pct;       /* eval: resize to res / crop_pct, center crop res */
    int canvas, canvas_bg;/* eval: canvas = res places each item unscaled on a res x res canvas
                             (vil_transform_canvas_eval, background VilCanvasBg canvas_bg) at a
                             position drawn from its stream (seed, 0, index: the same in every
                             pass) in place of the resize and crop; 0: off. Train: train.canvas */
    float mean[3], std[3];/* eval normalisation (train uses train.mean / train.std) */
    VilMixupConfig mixup; /* soft targets: train = Mixup/CutMix + smoothing, eval = one-hot */
    VilAllocator alloc;
    int quiet;            /* 1: no per-file or per-epoch warnings on stderr (tests) */
    int share_decode;     /* train (default 1): consecutive samples of the same file (the copies
                             of repeated augmentation: all 3 with world 1) are decoded once, to
                             the box of their crops; the outputs are bit-identical either way */
    VilStreamSpec stream; /* streams of images (len > 0), or not (len 0, the default) */
} VilLoaderConfig;

/* The recipe's defaults for the mode: train = DeiT (RA x3, RandAugment m9, erasing 0.25,
 * Mixup 0.8 / CutMix 1.0, smoothing 0.1, drop_last); eval = crop_pct 0.875, no shuffle,
 * one-hot targets, last partial batch kept. threads = 4, prefetch = 3, world 1, seed 0,
 * share_decode 1. */
void vil_loader_config_default(VilLoaderConfig *c, VilLoaderMode mode, int res, int channels,
                               int batch, int num_classes);

typedef struct {
    float *images;   /* (batch, readouts, channels, res, res); rows past n are zero */
    float *targets;  /* (batch, readouts, num_classes) soft targets; rows past n are zero */
    int *labels;     /* (batch, readouts) hard label of the sample used; -1 past n, and in eval
                      * mode for a file that could not be read (its row is zeros: not replaced) */
    int *indices;    /* (batch, readouts) dataset index actually used (after a bad-file
                      * replacement) */
    int n;           /* valid samples: batch, or fewer in eval's last batch */
    int batch, channels, res, num_classes;
    int readouts;    /* images per row: 1, or a stream's chunk (VilStreamSpec) */
    int chunk;       /* streams: the chunk of its streams the batch holds (image p of row b is the
                      * stream's image chunk x readouts + p); 0 for images */
    int epoch, step; /* step = position of this batch within its epoch */
    VilMixupParams mix; /* what the mixing did to this batch (lam = 1: nothing) */
} VilBatch;

typedef struct {
    long epoch_bad;      /* failed sample reads in the current epoch (each one replaced in
                          * train mode; left out, label -1, in eval mode) */
    long total_bad;      /* since the loader was created */
    long distinct_bad;   /* distinct files found bad since the loader was created */
    long decodes;        /* image decodes since the loader was created (IDX samples: none) */
    long samples;        /* samples made since the loader was created */
} VilLoaderStats;

typedef struct VilLoader VilLoader;

/* Starts the worker threads (they idle until an epoch starts). The dataset must outlive the
 * loader. NULL (vil_error) on a bad configuration or allocation failure. */
VilLoader *vil_loader_create(const VilDataset *ds, const VilLoaderConfig *cfg);
/* Joins the threads and frees every batch; batches still held become invalid. */
void vil_loader_free(VilLoader *l);

/* Begin producing `epoch` (any integer; the shuffle and augmentations are keyed by it). An
 * epoch still in progress is abandoned. Returns the number of batches in the epoch. */
int vil_loader_start_epoch(VilLoader *l, int epoch);
int vil_loader_batches_per_epoch(const VilLoader *l);
/* Samples this rank reads per epoch (before batching). */
int vil_loader_epoch_length(const VilLoader *l);

/* The next batch of the epoch, in order, blocking until it is ready. NULL at the end of the
 * epoch (then the epoch's bad-file count is reported), or on a failure that vil_loader_error
 * describes (a sample that no replacement could stand in for, or every slot held). The batch
 * stays valid until vil_loader_release_batch; the caller may hold up to `prefetch` at once. */
const VilBatch *vil_loader_next_batch(VilLoader *l);
void vil_loader_release_batch(VilLoader *l, const VilBatch *b);

/* NULL when all is well. */
const char *vil_loader_error(const VilLoader *l);
void vil_loader_stats(const VilLoader *l, VilLoaderStats *out);

#ifdef __cplusplus
}
#endif
#endif
