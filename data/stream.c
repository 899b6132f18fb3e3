/* stream.c: streams of images for the stream family (VilStreamSpec in loader.h): which images a
 * stream holds, in which order its chunks come, and the batches themselves, made on the caller's
 * thread when it asks for one (a chunk is a copy of gray pixels at the data's own size, so no
 * worker pool is needed). Every choice is a function of (seed, epoch, stream, position), never
 * of a thread or a timing. */
#include "data/stream.h"

#include <stdlib.h>
#include <string.h>

#include "data/mixup.h"
#include "vil/common.h"

/* keeps these streams apart from the loader's, keyed by the same seed */
#define TAG_STREAM 0x73747265616dULL
#define TAG_STREAM_EVAL 0x73747265766cULL

typedef struct {
    VilBatch b;
    void *mem;
    int held;
} Slot;

struct VilStreamSource {
    const VilDataset *ds;
    VilLoaderConfig cfg;
    int n, K, len, chunk, chunks; /* images, classes, a stream's images, per row, chunks per stream */
    int streams;                  /* eval: streams of the pass (all ranks) */
    float mean, std;
    int *perm;                    /* (n) the epoch's order (train), the split's permutation (eval) */
    long *offset;                 /* eval: (len) each position's offset o_p */
    int epoch, next, nbatches;
    Slot *slots;
    int nslots;
    VilImage img;                 /* a decoded image of a file layout, reused */
    VilBuffer scratch;
    long samples;
    int failed;
    char error[4096];
};

/* a uniform permutation of 0..n-1 from seed (Fisher-Yates) */
static void permute(int *p, int n, uint64_t seed) {
    VilRng r;
    vil_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) p[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)vil_rng_below(&r, (uint32_t)i + 1), t = p[i];
        p[i] = p[j], p[j] = t;
    }
}

/* the recipe's image settings a stream does not apply: a message, or NULL */
static const char *refused(const VilLoaderConfig *c) {
    if (c->mode != VIL_LOADER_TRAIN) return NULL;
    const VilTrainTransform *t = &c->train;
    if (c->mixup.prob > 0 && (c->mixup.mixup_alpha > 0 || c->mixup.cutmix_alpha > 0))
        return "Mixup / CutMix (set mixup = 0 and cutmix = 0)";
    if (t->randaug_n > 0) return "RandAugment (set randaug_n = 0)";
    if (t->reprob > 0) return "random erasing (set reprob = 0)";
    if (t->hflip > 0) return "flips (set hflip = 0)";
    if (t->scale_min < 1) return "random resized crops (set scale_min = 1)";
    if (c->repeats > 1) return "repeated augmentation (set repeats = 1)";
    return NULL;
}

VilStreamSource *vil_stream_open(const VilDataset *ds, const VilLoaderConfig *c) {
    const VilStreamSpec *sp = &c->stream;
    int n = vil_dataset_size(ds), train = c->mode == VIL_LOADER_TRAIN;
    const char *no = refused(c);
    if (c->batch < 1 || c->res < 1 || c->prefetch < 1 || c->world < 1 || c->rank < 0 || c->rank >= c->world ||
        c->accum < 1) {
        vil_error("loader: a bad batch, size, prefetch, rank or accum for streams");
        return NULL;
    }
    if (c->channels != 1) {
        vil_error("streams are of gray images (1 channel), not %d", c->channels);
        return NULL;
    }
    if (sp->chunk < 1 || sp->len % sp->chunk != 0) {
        vil_error("a stream of %d images is not whole chunks of %d", sp->len, sp->chunk);
        return NULL;
    }
    if (no) {
        vil_error("streams take the images as they are, without %s", no);
        return NULL;
    }
    /* truncated BPTT carries one batch's state from a step to the next */
    if (train && c->accum > 1 && sp->len > sp->chunk) {
        vil_error("a stream of %d images in chunks of %d carries its state from one step to the next: "
                  "accum_steps must be 1 (or stream_chunk = stream_len)", sp->len, sp->chunk);
        return NULL;
    }
    if (n < 1 || (train && n < sp->len)) {
        vil_error("%d images make no stream of %d", n, sp->len);
        return NULL;
    }
    VilStreamSource *s = vil_calloc(1, sizeof *s);
    s->ds = ds;
    s->cfg = *c;
    s->n = n, s->K = vil_dataset_num_classes(ds), s->len = sp->len, s->chunk = sp->chunk;
    s->chunks = sp->len / sp->chunk;
    s->streams = train ? 0 : sp->streams > 0 ? sp->streams : n;
    s->mean = train ? c->train.mean[0] : c->mean[0];
    s->std = train ? c->train.std[0] : c->std[0];
    s->perm = vil_try_malloc((size_t)(n ? n : 1) * sizeof(int));
    s->offset = vil_try_malloc((size_t)s->len * sizeof(long));
    size_t R = (size_t)s->chunk, B = (size_t)c->batch, img = (size_t)c->res * c->res;
    size_t sz_img = (B * R * img * sizeof(float) + 63) / 64 * 64, sz_tgt = (B * R * s->K * sizeof(float) + 63) / 64 * 64;
    size_t sz_int = (B * R * sizeof(int) + 63) / 64 * 64, bytes = sz_img + sz_tgt + 2 * sz_int;
    s->nslots = c->prefetch + 1;
    s->slots = vil_calloc((size_t)s->nslots, sizeof(Slot));
    int ok = s->perm && s->offset;
    for (int i = 0; ok && i < s->nslots; i++) {
        Slot *sl = &s->slots[i];
        sl->mem = c->alloc.alloc ? c->alloc.alloc(bytes, c->alloc.ctx) : vil_try_malloc(bytes);
        if (!(ok = sl->mem != NULL)) break;
        memset(sl->mem, 0, bytes);
        char *m = sl->mem;
        sl->b = (VilBatch){.images = (float *)m, .targets = (float *)(m + sz_img), .labels = (int *)(m + sz_img + sz_tgt),
                           .indices = (int *)(m + sz_img + sz_tgt + sz_int), .batch = c->batch, .channels = 1,
                           .res = c->res, .num_classes = s->K, .readouts = s->chunk};
    }
    if (!ok) {
        vil_error("streams: cannot allocate %d batches of %.1f MB (lower --batch or stream_chunk)", s->nslots, bytes / 1e6);
        vil_stream_free(s);
        return NULL;
    }
    if (!train) {
        /* the split's permutation and each position's offset, for every pass alike */
        permute(s->perm, n, vil_hash_seed(c->seed, TAG_STREAM_EVAL, 0, 0));
        for (int p = 0; p < s->len; p++) s->offset[p] = (long)(vil_hash_seed(c->seed, TAG_STREAM_EVAL, 1, (uint64_t)p) % (uint64_t)n);
    }
    return s;
}

void vil_stream_free(VilStreamSource *s) {
    if (!s) return;
    for (int i = 0; s->slots && i < s->nslots; i++)
        if (s->slots[i].mem) {
            if (s->cfg.alloc.free) s->cfg.alloc.free(s->slots[i].mem, s->cfg.alloc.ctx);
            else free(s->slots[i].mem);
        }
    free(s->slots);
    free(s->perm);
    free(s->offset);
    vil_image_free(&s->img);
    vil_buffer_free(&s->scratch);
    free(s);
}

/* streams this rank reads per pass (eval) */
static int rank_streams(const VilStreamSource *s) {
    const VilLoaderConfig *c = &s->cfg;
    return s->streams > c->rank ? (s->streams - c->rank + c->world - 1) / c->world : 0;
}

int vil_stream_batches_per_epoch(const VilStreamSource *s) {
    const VilLoaderConfig *c = &s->cfg;
    if (c->mode == VIL_LOADER_TRAIN) {
        long group = (long)c->batch * c->world * c->accum;
        return (int)(s->n / s->len / group * s->chunks * c->accum);
    }
    return (rank_streams(s) + c->batch - 1) / c->batch * s->chunks;
}

int vil_stream_epoch_length(const VilStreamSource *s) {
    const VilLoaderConfig *c = &s->cfg;
    if (c->mode == VIL_LOADER_TRAIN) return vil_stream_batches_per_epoch(s) * c->batch * s->chunk;
    return rank_streams(s) * s->len;
}

int vil_stream_start_epoch(VilStreamSource *s, int epoch) {
    s->epoch = epoch, s->next = 0;
    s->nbatches = vil_stream_batches_per_epoch(s);
    if (s->cfg.mode == VIL_LOADER_TRAIN) permute(s->perm, s->n, vil_hash_seed(s->cfg.seed, TAG_STREAM, (uint64_t)epoch, 0));
    return s->nbatches;
}

/* the dataset index of image p of stream st */
static int image_of(const VilStreamSource *s, long st, int p) {
    if (s->cfg.mode == VIL_LOADER_TRAIN) return s->perm[st * s->len + p];
    return s->perm[(st % s->n + s->offset[p]) % s->n];
}

/* image idx's pixels normalized into out (res x res): 0, or -1 with s->error set */
static int fill_image(VilStreamSource *s, int idx, float *out) {
    int res = s->cfg.res;
    VilImage view;
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_dataset_raw_image(s->ds, idx, &view);
    if (rc != 0) { /* a file layout: decoded to gray */
        vil_image_free(&s->img);
        rc = vil_dataset_read_image(s->ds, idx, 1, &s->img, &s->scratch);
        view = s->img;
    }
    vil_error_release(&cap);
    char path[1024], shown[1024]; /* the name from the dataset: escape codes go out as \xNN */
    if (rc == 0 && view.w == res && view.h == res && view.c == 1) {
        for (int i = 0; i < res * res; i++) out[i] = (view.px[i] / 255.0f - s->mean) / s->std;
        return 0;
    }
    vil_dataset_path(s->ds, idx, path, sizeof path);
    vil_printable(shown, sizeof shown, path);
    if (rc == 0)
        snprintf(s->error, sizeof s->error, "'%s' is %d x %d, and a stream reads its images as they are, at the "
                 "model's %d x %d", shown, view.w, view.h, res, res);
    else
        snprintf(s->error, sizeof s->error, "'%s': %s", shown, cap.msg);
    return -1;
}

const VilBatch *vil_stream_next_batch(VilStreamSource *s) {
    const VilLoaderConfig *c = &s->cfg;
    if (s->failed || s->next >= s->nbatches) return NULL;
    Slot *sl = NULL;
    for (int i = 0; i < s->nslots && !sl; i++)
        if (!s->slots[i].held) sl = &s->slots[i];
    if (!sl) {
        snprintf(s->error, sizeof s->error, "vil_loader_next_batch: the caller holds all %d batches; release "
                 "each with vil_loader_release_batch", s->nslots);
        s->failed = 1;
        return NULL;
    }
    VilBatch *b = &sl->b;
    int k = s->next, R = s->chunk, B = c->batch, train = c->mode == VIL_LOADER_TRAIN;
    size_t img = (size_t)c->res * c->res;
    /* train: group g of world x accum x batch streams, chunk ch, micro-batch a (rank r reads
     * slice a x world + r); eval: this rank's streams g x batch .. in order, chunk ch */
    int per = train ? s->chunks * c->accum : s->chunks;
    int g = k / per, ch = train ? k / c->accum % s->chunks : k % s->chunks, a = train ? k % c->accum : 0;
    int avail = train ? B : rank_streams(s) - g * B;
    b->n = avail < B ? avail : B;
    b->epoch = s->epoch, b->step = k, b->chunk = ch;
    for (int r = 0; r < B; r++) {
        long st = train ? ((long)g * c->accum * c->world + (long)a * c->world + c->rank) * B + r
                        : ((long)g * B + r) * c->world + c->rank;
        for (int p = 0; p < R; p++) {
            size_t at = (size_t)r * R + p;
            float *row = b->images + at * img, *t = b->targets + at * s->K;
            if (r >= b->n) {
                memset(row, 0, img * sizeof(float));
                memset(t, 0, (size_t)s->K * sizeof(float));
                b->labels[at] = b->indices[at] = -1;
                continue;
            }
            int idx = image_of(s, st, ch * R + p);
            if (fill_image(s, idx, row) != 0) {
                s->failed = 1;
                return NULL;
            }
            b->labels[at] = vil_dataset_label(s->ds, idx);
            b->indices[at] = idx;
            vil_mixup_target_row(t, b->labels[at], b->labels[at], 1.0f, c->mixup.smoothing, s->K);
            s->samples++;
        }
    }
    sl->held = 1;
    s->next++;
    return b;
}

void vil_stream_release_batch(VilStreamSource *s, const VilBatch *b) {
    for (int i = 0; i < s->nslots; i++)
        if (&s->slots[i].b == b) s->slots[i].held = 0;
}

const char *vil_stream_error(const VilStreamSource *s) { return s->failed ? s->error : NULL; }

void vil_stream_stats(const VilStreamSource *s, VilLoaderStats *out) {
    memset(out, 0, sizeof *out);
    out->samples = s->samples;
}
