/* gpu_feed.c: the input feed (data/feed.h) on CUDA, where the uploads run on a copy stream while
 * the compute stream works: the order/contents and eval checks of test_feed.c, and the check
 * only real asynchrony can fail: an upload into a slot must wait until the compute that reads
 * the slot's previous batch is done. */
#include <stdint.h>

#include "feed_testing.h"

/* the CUDA backend: vil_backend_get("cuda") (the module, loaded by main) */
static const VilBackend *gpu;

static uint16_t bf16_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static void check_upload_waits_for_compute(void) {
    const VilBackend *be = gpu;
    const size_t n = (size_t)1 << 20; /* 4 MB per batch */
    size_t bytes[1] = {n * sizeof(float)};
    void *dev0[1] = {be->alloc(be, bytes[0])}, *in[1];
    float *h[3];
    for (int k = 0; k < 3; k++) {
        h[k] = be->host_alloc(be, bytes[0]);
        for (size_t e = 0; e < n; e++) h[k][e] = (float)(k * 1000 + (int)(e % 200)); /* A: exact in bf16 */
    }
    /* busy work for the compute stream: products of 8192 x 1024 by 1024 x 1024 */
    const int N = 8192, C = 1024;
    void *x = be->alloc(be, (size_t)N * C * 2), *w = be->alloc(be, (size_t)C * C * 2), *y = be->alloc(be, (size_t)N * C * 2);
    be->zero(be, x, (size_t)N * C * 2);
    be->zero(be, w, (size_t)C * C * 2);
    uint16_t *seen = be->alloc(be, n * 2);
    VilBatch b[3];
    VilFeed f;
    vil_feed_init(&f, be, 1, dev0, bytes);
    vil_feed_put(&f, &b[0], (const void *const *)&h[0]);
    vil_feed_put(&f, &b[1], (const void *const *)&h[1]);
    vil_feed_take(&f, in); /* batch 0, slot 0 */
    VilLinearFwd lin = {.out = y, .in = x, .w = w, .N = N, .C = C, .OC = C, .ld_in = C, .ld_out = C};
    for (int i = 0; i < 200; i++) be->linear_forward(be, &lin);
    be->params_to_work(be, seen, in[0], n); /* reads slot 0 after ~ms of queued work */
    vil_feed_done(&f);
    vil_feed_take(&f, in); /* batch 1, slot 1 */
    vil_feed_done(&f);
    vil_feed_put(&f, &b[2], (const void *const *)&h[2]); /* into slot 0: must wait for the read */
    vil_feed_take(&f, in);
    vil_feed_done(&f);
    uint16_t *got = vil_malloc(n * 2);
    be->to_host(be, got, seen, n * 2);
    size_t bad = 0;
    for (size_t e = 0; e < n; e++) bad += got[e] != bf16_bits(h[0][e]);
    T_CHECK(bad == 0, "the compute read batch 0 from its slot, not the next upload into it (%zu of %zu values differ)", bad, n);
    T_CHECK(feed_dev_equals(be, in[0], h[2], n), "the later upload landed");
    vil_feed_drain(&f, NULL);
    vil_feed_free(&f);
    free(got);
    be->free(be, seen);
    be->free(be, x);
    be->free(be, w);
    be->free(be, y);
    be->free(be, dev0[0]);
    for (int k = 0; k < 3; k++) be->host_free(be, h[k]);
}

int main(void) {
    char why[256];
    if (!vil_cuda_available(why, sizeof why)) {
        printf("no usable GPU: %s\n", why);
        T_CHECK(0, "gpu_feed needs a CUDA device");
        return t_finish();
    }
    if (!(gpu = vil_backend_get("cuda"))) {
        T_CHECK(0, "the CUDA backend does not open");
        return t_finish();
    }
    char *dir = corpus_mkdtemp("gpu_feed");
    check_feed_order(gpu);
    check_upload_waits_for_compute();
    check_eval_feed(gpu, dir);
    corpus_rmtree(dir);
    free(dir);
    return t_finish();
}
