/* eval.c: the validation pass (eval.h): top-1 / top-5 of a model on a whole split with the
 * evaluation transform of doc/recipe.md, shared by `vil eval` (cli/eval.c) and the trainer's
 * passes after epochs. Bad files are counted and reported with the result. */
#include "eval/eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/feed.h"
#include "data/recipe.h"
#include "data/transform.h"
#include "formats/checkpoint.h"
#include "vil/common.h"
#include "vil/limits.h"

void vil_topk_count(const float *logits, const int *labels, int n, int C, long *top1, long *top5) {
    for (int i = 0; i < n; i++) {
        const float *l = logits + (size_t)i * C;
        int y = labels[i];
        if (y < 0 || y >= C || !isfinite(l[y])) continue;
        int ahead = 0;
        for (int k = 0; k < C && ahead < 5; k++)
            if (l[k] > l[y] || (l[k] == l[y] && k < y) || (k != y && isnan(l[k]))) ahead++;
        if (ahead < 1) (*top1)++;
        if (ahead < 5) (*top5)++;
    }
}

/* A batch the model cannot take: reported, -1. */
static int check_batch(const VilModel *m, const VilBatch *b) {
    if (b->num_classes <= m->cfg.num_classes && b->channels == m->cfg.in_chans &&
        b->res == m->cfg.img_size && b->readouts == m->cfg.readouts)
        return 0;
    vil_error("evaluation batch (%d classes, %d x %d x %d, %d per row) does not fit the model (%d classes, %d "
              "x %d x %d, %d per row)", b->num_classes, b->channels, b->res, b->res, b->readouts,
              m->cfg.num_classes, m->cfg.in_chans, m->cfg.img_size, m->cfg.img_size, m->cfg.readouts);
    return -1;
}

/* the bytes of a batch's images */
static size_t batch_bytes(const VilBatch *b) {
    return (size_t)b->batch * b->readouts * b->channels * b->res * b->res * sizeof(float);
}

/* a stream batch's readouts by their position in the stream */
static void count_positions(VilEvalPositions *p, const float *logits, const VilBatch *b, int rows, int C) {
    int R = b->readouts;
    for (int i = 0; i < rows; i++) {
        long at = (long)b->chunk * R + i % R;
        if (b->labels[i] < 0 || at >= p->n) continue;
        p->count[at]++;
        vil_topk_count(logits + (size_t)i * C, b->labels + i, 1, C, &p->top1[at], &(long){0});
        p->loss[at] += vil_xent_sum(logits + (size_t)i * C, b->labels + i, 1, C);
    }
}

/* Queues b's images on the feed (its upload overlaps the forward in flight); -1 if it does not
 * fit the model (then it is given back). */
static int put_batch(VilFeed *f, VilLoader *l, const VilModel *m, const VilBatch *b) {
    size_t bytes = batch_bytes(b);
    int bad = check_batch(m, b);
    if (!bad && bytes != f->bytes[0]) {
        vil_error("evaluation batch of %d images after batches of %zu bytes", b->batch, f->bytes[0]);
        bad = -1;
    }
    if (bad) {
        vil_loader_release_batch(l, b);
        return -1;
    }
    const void *src[1] = {b->images};
    vil_feed_put(f, b, src);
    return 0;
}

double vil_xent_sum(const float *logits, const int *labels, int n, int C) {
    double s = 0;
    for (int i = 0; i < n; i++) {
        if (labels[i] < 0) continue;
        const float *l = logits + (size_t)i * C;
        double mx = l[0], z = 0;
        for (int c = 1; c < C; c++) mx = l[c] > mx ? l[c] : mx;
        for (int c = 0; c < C; c++) z += exp(l[c] - mx);
        s += mx + log(z) - l[labels[i]];
    }
    return s;
}

/* The pass's progress: with the bar, its line redrawn in place (the first batch, then at most
 * five times a second, and the last); plain, a line every ~10% of the batches. */
static void show_eval(VilProgress *p, const char *prefix, const VilEvalResult *r, double t0, int k,
                      int nb, int every) {
    int last = k + 1 >= nb;
    double n = r->images > 0 ? (double)r->images : 1.0; /* none readable yet: 0%, not NaN */
    if (p->mode == VIL_PROGRESS_PLAIN && ((k + 1) % every == 0 || last)) {
        fprintf(vil_progress_line(p), "%s%6ld images  top-1 %6.2f%%  top-5 %6.2f%%  %7.1f images/s\n",
                prefix ? prefix : "", r->images, 100.0 * r->top1 / n, 100.0 * r->top5 / n,
                r->images / (vil_now() - t0));
        fflush(p->f);
    } else if (vil_progress_due(p, k == 0 || last)) {
        vil_progress_redraw(p, "%s%6ld images (%d%%)  top-1 %6.2f%%  top-5 %6.2f%%  %7.1f images/s",
                            prefix ? prefix : "", r->images, (int)(100.0 * (k + 1) / nb),
                            100.0 * r->top1 / n, 100.0 * r->top5 / n, r->images / (vil_now() - t0));
    }
}

int vil_eval_run(VilModel *m, VilLoader *l, long max_images, VilProgress *prog, const char *prefix,
                 VilEvalResult *r) {
    return vil_eval_run_sink(m, l, max_images, prog, prefix, NULL, r);
}

/* The rows of b's first n images that the loader could read, packed (the logits in place):
 * handed to the sink. */
static void sink_rows(const VilEvalSink *sink, float *logits, const VilBatch *b, int n, int C,
                      int *idx, int *lab) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (b->labels[i] < 0) continue;
        if (k != i) memmove(logits + (size_t)k * C, logits + (size_t)i * C, (size_t)C * sizeof *logits);
        idx[k] = b->indices[i], lab[k++] = b->labels[i];
    }
    if (k) sink->rows(sink->ctx, logits, idx, lab, k, C);
}

int vil_eval_run_sink(VilModel *m, VilLoader *l, long max_images, VilProgress *prog, const char *prefix,
                      const VilEvalSink *sink, VilEvalResult *r) {
    memset(r, 0, sizeof *r);
    const VilBackend *be = m->be;
    double t0 = vil_now();
    int nb = vil_loader_start_epoch(l, 0);
    float *logits = NULL;
    int *rows_idx = NULL, *rows_lab = NULL; /* the sink's rows */
    int every = nb >= 10 ? nb / 10 : 1, rc = -1;
    const int C = m->cfg.num_classes;
    VilFeed feed = {0};
    /* the first batch sizes the model's buffers; each later one is uploaded while the device
     * runs the forward of the one before */
    const VilBatch *b = vil_loader_next_batch(l);
    if (b) {
        if (check_batch(m, b) != 0) {
            vil_loader_release_batch(l, b);
            return -1;
        }
        void *dev0[3];
        size_t bytes[1] = {batch_bytes(b)}, rows = (size_t)b->batch * b->readouts;
        if (vil_model_alloc_acts(m, b->batch, 0) != 0 ||
            !(logits = vil_try_malloc(rows * C * sizeof(float))) ||
            !(rows_idx = vil_try_malloc(rows * 2 * sizeof(int))) ||
            (vil_model_input_buffers(m, dev0), vil_feed_init(&feed, be, 1, dev0, bytes)) != 0) {
            vil_error("evaluation: a batch of %d cannot be set up", b->batch);
            vil_loader_release_batch(l, b);
            goto out;
        }
        rows_lab = rows_idx + rows;
        if (put_batch(&feed, l, m, b) != 0) goto out;
    }
    for (int k = 0;; k++) {
        void *in[1];
        b = vil_feed_take(&feed, in);
        if (!b) break;
        vil_model_set_inputs(m, in[0], NULL, NULL);
        int n = b->n;
        if (max_images > 0 && r->images + n > max_images) n = (int)(max_images - r->images);
        vil_model_stream_chunk(m, b->chunk); /* streams: the batch's chunk of them, in order */
        vil_model_forward(m, 0);
        vil_feed_done(&feed);
        /* the caller may end the pass after any batch (a second Ctrl-C during training's
         * validation): what was counted stays, r->cancelled says it is not the whole split */
        int cancel = sink && sink->cancel && sink->cancel(sink->ctx);
        r->cancelled |= cancel;
        int last = (max_images > 0 && r->images + n >= max_images) || cancel;
        const VilBatch *nx = last ? NULL : vil_loader_next_batch(l);
        if (nx && put_batch(&feed, l, m, nx) != 0) {
            vil_loader_release_batch(l, b);
            goto out;
        }
        vil_model_logits(m, logits); /* (b->batch, readouts, C): the activations' batch */
        int nr = n * b->readouts;   /* a stream's row has a readout per image */
        vil_topk_count(logits, b->labels, nr, C, &r->top1, &r->top5);
        r->loss_sum += vil_xent_sum(logits, b->labels, nr, C);
        for (int i = 0; i < nr; i++) /* a file the loader could not read has no label */
            if (b->labels[i] >= 0) r->images++;
            else r->bad++;
        if (sink && sink->pos) count_positions(sink->pos, logits, b, nr, C);
        if (sink && sink->rows) sink_rows(sink, logits, b, nr, C, rows_idx, rows_lab);
        vil_loader_release_batch(l, b);
        if (prog) show_eval(prog, prefix, r, t0, last && !cancel ? nb - 1 : k, nb, every);
        if (last) break;
    }
    const char *err = vil_loader_error(l);
    if (err) {
        vil_error("evaluation: %s", err);
        goto out;
    }
    r->seconds = vil_now() - t0;
    rc = 0;
out:
    if (feed.be) {
        vil_feed_drain(&feed, l);
        vil_model_set_inputs(m, NULL, NULL, NULL);
        vil_feed_free(&feed);
    }
    free(logits);
    free(rows_idx);
    return rc;
}

void vil_eval_spec_resolve(VilEvalSpec *ev, const VilCheckpointMeta *meta, float user_crop,
                           int channels, char *note, size_t notelen) {
    memset(ev, 0, sizeof *ev);
    const char *from;
    if (user_crop > 0) ev->crop_pct = user_crop, from = "--crop-pct";
    else if (meta && meta->eval.crop_pct > 0) ev->crop_pct = meta->eval.crop_pct, from = meta->eval_from;
    else ev->crop_pct = VIL_RECIPE_CROP_PCT, from = "the default: the file does not say";
    if (meta && meta->eval.has_norm) {
        memcpy(ev->mean, meta->eval.mean, sizeof ev->mean);
        memcpy(ev->std, meta->eval.std, sizeof ev->std);
    } else {
        VilTrainTransform tt;
        vil_train_transform_default(&tt, 224, channels);
        memcpy(ev->mean, tt.mean, sizeof ev->mean);
        memcpy(ev->std, tt.std, sizeof ev->std);
    }
    ev->has_norm = 1;
    if (note) snprintf(note, notelen, "crop_pct %g from %s", ev->crop_pct, from);
}

int vil_eval_batch(const VilDataset *ds, int batch, long max_images) {
    long n = vil_dataset_size(ds);
    if (max_images > 0 && max_images < n) n = max_images;
    return n >= 1 && n < batch ? (int)n : batch;
}

VilLoader *vil_eval_loader(const VilModel *m, const VilDataset *ds, const VilEvalSpec *ev, int batch,
                           int workers, const VilStreamSpec *streams) {
    const VilConfig *c = &m->cfg;
    VilLoaderConfig lc;
    vil_loader_config_default(&lc, VIL_LOADER_EVAL, c->img_size, c->in_chans, batch,
                              vil_dataset_num_classes(ds));
    lc.crop_pct = ev->crop_pct;
    memcpy(lc.mean, ev->mean, sizeof lc.mean);
    memcpy(lc.std, ev->std, sizeof lc.std);
    lc.threads = workers;
    lc.prefetch = workers + 1;
    lc.alloc = vil_feed_allocator(m->be); /* pinned on CUDA: the feed uploads while the forward runs */
    if (c->family_kind == VIL_FAMILY_STREAM) {
        lc.stream = (VilStreamSpec){.len = streams && streams->len ? streams->len : c->stream_len,
                                    .chunk = c->stream_chunk, .streams = streams ? streams->streams : 0};
        if (lc.stream.len % lc.stream.chunk != 0) {
            vil_error("streams of %d images are not whole chunks of the model's stream_chunk %d: a length that "
                      "is a multiple of it", lc.stream.len, lc.stream.chunk);
            return NULL;
        }
    }
    return vil_loader_create(ds, &lc);
}

int vil_eval_dataset(VilModel *m, VilDataset *ds, const VilEvalSpec *ev, int batch, int workers,
                     const VilStreamSpec *streams, VilProgress *prog, const char *prefix, const VilEvalSink *sink,
                     VilEvalResult *r) {
    const VilConfig *c = &m->cfg;
    batch = vil_eval_batch(ds, batch, 0);
    if (c->family_kind == VIL_FAMILY_STREAM && streams && streams->streams > 0 && streams->streams < batch)
        batch = streams->streams; /* a row per stream: no more rows than streams */
    int K = vil_dataset_num_classes(ds);
    if (K != c->num_classes) {
        vil_error("the data (%s) has %d classes but the model %d: the labels would not be the "
                  "model's classes; evaluate on the data it was trained on", vil_dataset_source(ds),
                  K, c->num_classes);
        return -1;
    }
    if (vil_model_check_acts(m, batch, 0) != 0) return -1;
    VilLoader *l = vil_eval_loader(m, ds, ev, batch, workers, streams);
    if (!l) return -1;
    int rc = vil_eval_run_sink(m, l, 0, prog, prefix, sink, r);
    vil_loader_free(l);
    return rc;
}

void vil_eval_limit(VilDataset **ds, long limit, char *line, size_t len) {
    int size = vil_dataset_size(*ds), C = vil_dataset_num_classes(*ds);
    line[0] = 0;
    if (limit <= 0) return;
    if (limit >= size) {
        snprintf(line, len, "--limit %ld: all %d images", limit, size);
        return;
    }
    int *idx = vil_malloc((size_t)limit * sizeof(int));
    int n = vil_dataset_spread(*ds, (int)limit, idx);
    VilDataset *sub = vil_dataset_subset(*ds, idx, n);
    free(idx);
    /* what each class gave: the same k from every class that has images, else a range */
    int lo = 0, hi = 0, took = 0, have = 0;
    for (int c = 0; c < C; c++) {
        const int *mem;
        int all, k;
        vil_dataset_class_members(*ds, c, &mem, &all);
        vil_dataset_class_members(sub, c, &mem, &k);
        have += all > 0;
        if (!k) continue;
        lo = took && lo < k ? lo : k;
        hi = hi > k ? hi : k;
        took++;
    }
    char each[64];
    if (lo == hi) snprintf(each, sizeof each, "%d", lo);
    else snprintf(each, sizeof each, "%d to %d", lo, hi);
    if (took == have)
        snprintf(line, len, "--limit %ld: %d of %d images, %s from each of %d classes", limit, n, size,
                 each, took);
    else /* fewer images than classes: one from each of the first ones */
        snprintf(line, len, "--limit %ld: %d of %d images, %s from each of the first %d of %d classes",
                 limit, n, size, each, took, have);
    vil_dataset_free(*ds);
    *ds = sub;
}

double vil_time_forward(VilModel *m, int warmup, int steps) {
    for (int i = 0; i < warmup; i++) vil_model_forward(m, 0);
    m->be->sync(m->be);
    double t0 = vil_now();
    for (int i = 0; i < steps; i++) vil_model_forward(m, 0);
    m->be->sync(m->be);
    return (vil_now() - t0) / (steps > 0 ? steps : 1);
}
