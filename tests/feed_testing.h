/* feed_testing.h: checks of the input feed (data/feed.h) that run on any backend: test_feed.c
 * runs them on the CPU, gpu_feed.c on CUDA (where the copies really are asynchronous). */
#ifndef VIL_FEED_TESTING_H
#define VIL_FEED_TESTING_H

#include <stdint.h>
#include <string.h>

#include "data/dataset.h"
#include "data/feed.h"
#include "data/loader.h"
#include "data_corpus.h"
#include "eval/eval.h"
#include "testing.h"
#include "vil/backend.h"
#include "vil/common.h"
#include "vil/model.h"

/* 1 when the n floats at device pointer dev equal host[] */
static int feed_dev_equals(const VilBackend *be, const void *dev, const float *host, size_t n) {
    float *tmp = vil_malloc(n * sizeof(float) + 1);
    be->to_host(be, tmp, dev, n * sizeof(float));
    int same = memcmp(tmp, host, n * sizeof(float)) == 0;
    free(tmp);
    return same;
}

/* Batches go through the two slots in order, each take hands back the slot's buffers holding
 * that batch's bytes, and slot 0 is the caller's own buffers. */
static void check_feed_order(const VilBackend *be) {
    enum { NB = 7 };
    const size_t n[3] = {1000, 40, 12}; /* floats per input */
    size_t bytes[3];
    void *dev0[3];
    for (int i = 0; i < 3; i++) {
        bytes[i] = n[i] * sizeof(float);
        dev0[i] = be->alloc(be, bytes[i]);
    }
    float *host[NB][3];
    VilBatch batch[NB];
    for (int k = 0; k < NB; k++) {
        memset(&batch[k], 0, sizeof batch[k]);
        batch[k].step = k;
        for (int i = 0; i < 3; i++) {
            host[k][i] = be->host_alloc(be, bytes[i]);
            T_CHECK(host[k][i] != NULL, "host_alloc of %zu bytes", bytes[i]);
            if (!host[k][i]) return;
            for (size_t e = 0; e < n[i]; e++) host[k][i][e] = (float)(k * 100000 + i * 10000 + (int)e);
        }
    }
    VilFeed f;
    vil_feed_init(&f, be, 3, dev0, bytes);
    T_CHECK(f.dev[1][0] && f.dev[1][0] != dev0[0] && f.dev[1][2] != dev0[2], "slot 1 has its own buffers");
    void *in[3];
    T_CHECK(vil_feed_take(&f, in) == NULL, "take on an empty feed gives NULL");
    /* one ahead, as the trainer runs: put k+1 after the step of k is queued */
    int ok_order = 1, ok_data = 1, ok_slot = 1;
    vil_feed_put(&f, &batch[0], (const void *const *)host[0]);
    for (int k = 0; k < 4; k++) {
        int slot = k % 2;
        const VilBatch *b = vil_feed_take(&f, in);
        ok_order &= b == &batch[k];
        ok_slot &= in[0] == f.dev[slot][0] && in[1] == f.dev[slot][1] && in[2] == f.dev[slot][2];
        for (int i = 0; i < 3; i++) ok_data &= feed_dev_equals(be, in[i], host[k][i], n[i]);
        vil_feed_done(&f);
        T_CHECK(vil_feed_next_slot(&f) == (k + 1) % 2, "next slot after step %d", k);
        vil_feed_put(&f, &batch[k + 1], (const void *const *)host[k + 1]);
    }
    /* two queued at once (eval's first batches, or a caller filling both) */
    const VilBatch *b4 = vil_feed_take(&f, in);
    ok_order &= b4 == &batch[4];
    for (int i = 0; i < 3; i++) ok_data &= feed_dev_equals(be, in[i], host[4][i], n[i]);
    vil_feed_done(&f);
    vil_feed_put(&f, &batch[5], (const void *const *)host[5]);
    vil_feed_put(&f, &batch[6], (const void *const *)host[6]);
    for (int k = 5; k < 7; k++) {
        const VilBatch *b = vil_feed_take(&f, in);
        ok_order &= b == &batch[k];
        for (int i = 0; i < 3; i++) ok_data &= feed_dev_equals(be, in[i], host[k][i], n[i]);
        vil_feed_done(&f);
    }
    T_CHECK(ok_order, "batches come out in the order they went in");
    T_CHECK(ok_slot, "slots alternate, slot 0 being the caller's buffers");
    T_CHECK(ok_data, "every take's buffers hold that batch's bytes");
    /* drain with one queued: the feed is empty after, and usable again */
    vil_feed_put(&f, &batch[0], (const void *const *)host[0]);
    vil_feed_drain(&f, NULL);
    T_CHECK(f.nq == 0 && vil_feed_take(&f, in) == NULL, "drain empties the feed");
    vil_feed_put(&f, &batch[1], (const void *const *)host[1]);
    T_CHECK(vil_feed_take(&f, in) == &batch[1] && feed_dev_equals(be, in[0], host[1][0], n[0]),
            "the feed works after a drain");
    vil_feed_drain(&f, NULL);
    vil_feed_free(&f);
    for (int k = 0; k < NB; k++)
        for (int i = 0; i < 3; i++) be->host_free(be, host[k][i]);
    for (int i = 0; i < 3; i++) be->free(be, dev0[i]);
}

/* vil_eval_run (the feed, one batch ahead) against a plain loop (upload, forward, read back)
 * over the same loader: the same counts, also when stopped by max_images mid-batch. The data:
 * 44 IDX images of 16 x 16 in dir (t10k), so batches of 8 end with a partial one of 4. */
static void check_eval_feed(const VilBackend *be, const char *dir) {
    corpus_write_idx_set(dir, "t10k", 44, 16, 16, 4, 0);
    VilDataset *ds = vil_dataset_open(dir, "val", NULL);
    T_CHECK(ds != NULL, "eval data");
    if (!ds) return;
    VilConfig c;
    vil_config_default(&c);
    c.img_size = 16;
    c.patch_size = 4;
    c.stride = 4;
    c.in_chans = 1;
    c.embed_dim = 16;
    c.depth = 2;
    c.num_classes = 4;
    vil_config_finalize(&c);
    VilModel m;
    vil_model_init(&m, &c, be);
    vil_model_init_weights(&m, 5);
    VilLoaderConfig lc;
    vil_loader_config_default(&lc, VIL_LOADER_EVAL, 16, 1, 8, 4);
    lc.crop_pct = 1.0f;
    lc.threads = 2;
    lc.prefetch = 3;
    lc.quiet = 1;
    lc.alloc = vil_feed_allocator(be);
    VilLoader *l = vil_loader_create(ds, &lc);
    T_CHECK(l != NULL, "eval loader");
    if (!l) return;
    long limits[2] = {0, 13};
    for (int t = 0; t < 2; t++) {
        VilEvalResult r;
        int rc = vil_eval_run(&m, l, limits[t], NULL, NULL, &r);
        /* the plain loop */
        long top1 = 0, top5 = 0, images = 0;
        vil_loader_start_epoch(l, 0);
        const VilBatch *b;
        float logits[8 * 4];
        while ((b = vil_loader_next_batch(l)) != NULL) {
            T_CHECK(vil_model_alloc_acts(&m, b->batch, 0) == 0, "vil_model_alloc_acts(&m, b->batch, 0)");
            be->to_device(be, m.acts.img, b->images, (size_t)b->batch * 16 * 16 * sizeof(float));
            vil_model_forward(&m, 0);
            be->to_host(be, logits, m.acts.logits, sizeof logits);
            int nn = b->n;
            if (limits[t] > 0 && images + nn > limits[t]) nn = (int)(limits[t] - images);
            vil_topk_count(logits, b->labels, nn, 4, &top1, &top5);
            images += nn;
            vil_loader_release_batch(l, b);
            if (limits[t] > 0 && images >= limits[t]) break;
        }
        /* drop what the loader still has of the epoch */
        while (limits[t] > 0 && (b = vil_loader_next_batch(l)) != NULL) vil_loader_release_batch(l, b);
        long want = limits[t] ? limits[t] : 44;
        T_CHECK(rc == 0 && r.images == want && images == want && r.top1 == top1 && r.top5 == top5,
                "eval through the feed (limit %ld): rc %d, %ld images, top-1 %ld, top-5 %ld; plain "
                "loop: %ld images, top-1 %ld, top-5 %ld", limits[t], rc, r.images, r.top1, r.top5,
                images, top1, top5);
    }
    vil_loader_free(l);
    vil_model_free(&m);
    vil_dataset_free(ds);
}

#endif
