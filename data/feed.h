/* feed.h: the loader's batches onto the device, one batch ahead. While the device computes on
 * the batch in one slot, the next batch's inputs (images, targets, ...) travel into the other
 * slot on a copy stream, so a training step never waits for its upload and the host never waits
 * for the device to drain before copying (see the backend's feed_* ops).
 *
 *   put(b0) take()->b0 [queue the step] done() put(b1) [release b0] take()->b1 ... drain()
 *
 * Slot 0's buffers are the caller's (the model's acts.img, ...); slot 1's are allocated here.
 * take() hands back the device buffers the step must read, and returns after the batch's upload
 * has finished, so its host memory may be released then. The host memory passed to put() must
 * come from the backend's host_alloc (the loader's batches do, with vil_feed_allocator). */
#ifndef VIL_FEED_H
#define VIL_FEED_H

#include <stddef.h>

#include "data/loader.h"
#include "vil/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VIL_FEED_INPUTS 4

typedef struct {
    const VilBackend *be;
    int n;                              /* inputs per batch */
    size_t bytes[VIL_FEED_INPUTS];      /* bytes of each input */
    void *dev[2][VIL_FEED_INPUTS];      /* the slots' device buffers */
    const VilBatch *batch[2];           /* the batch queued in or taken from each slot */
    int queue[2], nq;                   /* slots put and not yet taken, oldest first */
    int next;                           /* the slot of the next put */
    int cur;                            /* the slot last taken and not yet done (-1: none) */
} VilFeed;

/* Two slots of n inputs of bytes[i]: slot 0 uses dev0[i] (the caller's device buffers), slot 1
 * gets its own. 0; VIL_EUSAGE (reported) for n outside 1..VIL_FEED_INPUTS; -1 (reported) when
 * the backend cannot allocate slot 1 (the feed then holds nothing). */
int vil_feed_init(VilFeed *f, const VilBackend *be, int n, void *const dev0[],
                  const size_t bytes[]);
/* Queue batch b with the host memory of its inputs, src[i] (bytes[i] each); the upload starts
 * once the device is done with the slot's previous batch. At most two batches are queued or
 * taken-and-not-done at a time (more is a programming error: fatal). */
void vil_feed_put(VilFeed *f, const VilBatch *b, const void *const src[]);
/* The slot that the next put will fill (for callers that stage per-slot host inputs). */
int vil_feed_next_slot(const VilFeed *f);
/* The oldest queued batch: the compute queued from now on waits for its upload, dev[i] gets the
 * slot's buffers, and on return the upload is complete (the batch's host memory may go back to
 * the loader). NULL when nothing is queued. */
const VilBatch *vil_feed_take(VilFeed *f, void *dev[]);
/* The compute queued so far is the last to read the taken batch's buffers. */
void vil_feed_done(VilFeed *f);
/* Waits for the device, gives every batch still queued back to loader l, and leaves the feed
 * empty (it can be used again). */
void vil_feed_drain(VilFeed *f, VilLoader *l);
/* Drains nothing: call vil_feed_drain first when batches may be queued. Frees slot 1. */
void vil_feed_free(VilFeed *f);

/* A loader allocator for batches the feed can upload: the backend's host_alloc / host_free. */
VilAllocator vil_feed_allocator(const VilBackend *be);

#ifdef __cplusplus
}
#endif
#endif
