/* feed.c: see feed.h. */
#include "data/feed.h"

#include <string.h>

#include "vil/common.h"

enum { FREE = 0, QUEUED = 1, TAKEN = 2 };

int vil_feed_init(VilFeed *f, const VilBackend *be, int n, void *const dev0[],
                  const size_t bytes[]) {
    memset(f, 0, sizeof *f);
    if (n < 1 || n > VIL_FEED_INPUTS) {
        vil_error("feed: %d inputs (1..%d)", n, VIL_FEED_INPUTS);
        return VIL_EUSAGE;
    }
    f->be = be;
    f->n = n;
    f->cur = -1;
    for (int i = 0; i < n; i++) {
        f->bytes[i] = bytes[i];
        f->dev[0][i] = dev0[i];
        if (!(f->dev[1][i] = be->alloc(be, bytes[i]))) {
            vil_error("feed: the second slot's input %d (%zu bytes) cannot be allocated on the %s device", i,
                      bytes[i], be->name);
            f->n = i; /* what vil_feed_free gives back */
            vil_feed_free(f);
            return -1;
        }
    }
    return 0;
}

static int state_of(const VilFeed *f, int s) {
    if (f->cur == s) return TAKEN;
    for (int k = 0; k < f->nq; k++)
        if (f->queue[k] == s) return QUEUED;
    return FREE;
}

void vil_feed_put(VilFeed *f, const VilBatch *b, const void *const src[]) {
    int s = f->next;
    /* invariant: feed.h's contract (two batches at most in flight); the trainer and eval keep it
     * whatever their inputs, and a caller that breaks it has a bug (test_feed checks it is fatal) */
    if (state_of(f, s) != FREE)
        VIL_FATAL("feed: put into slot %d, which is still %s", s,
                  state_of(f, s) == QUEUED ? "queued" : "read by the step in flight");
    for (int i = 0; i < f->n; i++)
        if (f->bytes[i]) f->be->feed_upload(f->be, s, f->dev[s][i], src[i], f->bytes[i]);
    f->batch[s] = b;
    f->queue[f->nq++] = s;
    f->next = s ^ 1;
}

int vil_feed_next_slot(const VilFeed *f) { return f->next; }

const VilBatch *vil_feed_take(VilFeed *f, void *dev[]) {
    if (f->nq == 0) return NULL;
    if (f->cur >= 0) VIL_FATAL("feed: take before the previous batch was done"); /* invariant: as put's */
    int s = f->queue[0];
    f->queue[0] = f->queue[1];
    f->nq--;
    f->be->feed_acquire(f->be, s);
    f->be->feed_wait(f->be, s);
    for (int i = 0; i < f->n; i++) dev[i] = f->dev[s][i];
    f->cur = s;
    const VilBatch *b = f->batch[s];
    f->batch[s] = NULL;
    return b;
}

void vil_feed_done(VilFeed *f) {
    if (f->cur < 0) return;
    f->be->feed_release(f->be, f->cur);
    f->cur = -1;
}

void vil_feed_drain(VilFeed *f, VilLoader *l) {
    if (!f->be) return;
    vil_feed_done(f);
    f->be->sync(f->be);
    for (int k = 0; k < f->nq; k++) {
        int s = f->queue[k];
        f->be->feed_wait(f->be, s);
        if (f->batch[s] && l) vil_loader_release_batch(l, f->batch[s]);
        f->batch[s] = NULL;
    }
    f->nq = 0;
}

void vil_feed_free(VilFeed *f) {
    if (!f->be) return;
    for (int i = 0; i < f->n; i++) f->be->free(f->be, f->dev[1][i]);
    memset(f, 0, sizeof *f);
}

static void *feed_host_alloc(size_t bytes, void *ctx) {
    const VilBackend *be = ctx;
    return be->host_alloc(be, bytes);
}
static void feed_host_free(void *p, void *ctx) {
    const VilBackend *be = ctx;
    be->host_free(be, p);
}

VilAllocator vil_feed_allocator(const VilBackend *be) {
    VilAllocator a = {feed_host_alloc, feed_host_free, (void *)be};
    return a;
}
