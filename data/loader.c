/* loader.c: worker pool, batch ring and bad-file handling behind loader.h. Work is handed
 * out in short runs of consecutive samples (batch k, slots j, j+1, ...) under one mutex;
 * whichever worker completes the second sample of a mixing pair (j, n-1-j) mixes that pair,
 * and the one completing the last sample of a batch publishes it, so no thread waits on a
 * whole batch and none is made per batch. Every random choice is keyed by (seed, epoch,
 * position, rank), never by a thread. */
#define _GNU_SOURCE
#include "data/loader.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/recipe.h"
#include "data/sampler.h"
#include "data/stream.h"
#include "vil/common.h"

/* Domain tags: keep the streams of different purposes apart although keyed alike. */
#define TAG_MIX 0x6d69787570ULL
#define TAG_RETRY 0x7265747279ULL
#define TAG_PICK 0x7069636bULL

/* A bad sample is replaced by up to this many others of its class, then by samples of any
 * class; past MAX_TRIES the data is too broken to train on and the loader stops. */
#define CLASS_TRIES 8
#define MAX_TRIES 32

enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_READY, SLOT_HELD };

typedef struct {
    VilBatch b;
    void *mem;
    int state;
    int epoch_gen;  /* which start_epoch call the slot's batch belongs to */
    int pending;    /* samples still to complete (atomic) */
    int *pair_done; /* (batch / 2 + 1) completions per mixing pair (atomic) */
} Slot;

typedef struct {
    struct VilLoader *l;
    pthread_t tid;
    VilBuffer bytes; /* encoded file, reused */
    VilImage rgb;    /* IDX gray -> RGB conversion, reused */
    size_t rgb_cap;
} Worker;

struct VilLoader {
    VilStreamSource *stream; /* streams of images (VilStreamSpec): every call below goes there */
    const VilDataset *ds;
    VilLoaderConfig cfg;
    VilSampler sampler;
    int num_classes;
    size_t img_floats; /* channels * res * res */
    int mixing;        /* train with Mixup or CutMix enabled */

    pthread_mutex_t mu;
    pthread_cond_t work_cv, ready_cv, idle_cv;
    Slot *slots;
    int nslots;
    Worker *workers;
    int nworkers;

    /* the current epoch (guarded by mu) */
    int epoch, gen, started;
    int *order;     /* (order_cap) dataset index per position */
    int order_len, order_cap, nbatches;
    long next_task, total_tasks;
    int consumed;   /* batches handed to the caller */
    int active;     /* workers running a task */
    int chunk;      /* samples handed out per lock: fewer lock round trips for small images */
    int stop;
    int epoch_reported;

    /* bad files */
    unsigned char *bad;    /* (n) 1 once a file has been found bad (atomic) */
    long epoch_bad, total_bad, distinct_bad; /* atomic */
    long decodes, samples; /* atomic */
    int share;      /* train with share_decode: runs of one file are made together */
    int failed;
    int sync_ready; /* mutex and condition variables initialised */
    char error[1024];
};

static void *default_alloc(size_t bytes, void *ctx) {
    (void)ctx;
    void *p = NULL;
    size_t rounded = (bytes + 63) / 64 * 64;
    return posix_memalign(&p, 64, rounded ? rounded : 64) == 0 ? p : NULL;
}

static void default_free(void *p, void *ctx) {
    (void)ctx;
    free(p);
}

void vil_loader_config_default(VilLoaderConfig *c, VilLoaderMode mode, int res, int channels,
                               int batch, int num_classes) {
    memset(c, 0, sizeof *c);
    c->mode = mode;
    c->batch = batch;
    c->res = res;
    c->channels = channels;
    c->threads = VIL_RECIPE_WORKERS;
    c->prefetch = 3;
    c->world = 1;
    c->rank = 0;
    c->accum = 1;
    c->seed = 0;
    c->repeats = mode == VIL_LOADER_TRAIN ? VIL_RECIPE_REPEATS : 1;
    c->drop_last = mode == VIL_LOADER_TRAIN;
    vil_train_transform_default(&c->train, res, channels);
    c->crop_pct = VIL_RECIPE_CROP_PCT;
    c->share_decode = 1;
    /* evaluation normalises as training does, whatever the train default is for 1 channel */
    for (int k = 0; k < 3; k++) {
        c->mean[k] = c->train.mean[k];
        c->std[k] = c->train.std[k];
    }
    if (mode == VIL_LOADER_TRAIN) vil_mixup_config_default(&c->mixup, num_classes);
    else vil_mixup_config_none(&c->mixup, num_classes, 0.0f);
}

static void set_error(VilLoader *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_error(VilLoader *l, const char *fmt, ...) {
    /* called with mu held */
    if (l->failed) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->error, sizeof l->error, fmt, ap);
    va_end(ap);
    l->failed = 1;
}

/* ---- one sample ---- */

/* Decode and transform dataset sample idx into out; 0 or -1 (vil_error: the caller captures). */
static int make_sample(Worker *w, int idx, VilRng *rng, float *out) {
    VilLoader *l = w->l;
    const VilLoaderConfig *c = &l->cfg;
    int train = c->mode == VIL_LOADER_TRAIN;
    VilImage view;
    if (vil_dataset_raw_image(l->ds, idx, &view) == 0) {
        if (c->channels == 3 && view.c == 1) {
            size_t px = (size_t)view.w * view.h;
            if (w->rgb_cap < px * 3) {
                free(w->rgb.px);
                w->rgb_cap = 0;
                if (!(w->rgb.px = vil_try_malloc(px * 3))) return -1; /* the image's size */
                w->rgb_cap = px * 3;
            }
            for (size_t k = 0; k < px; k++)
                w->rgb.px[3 * k] = w->rgb.px[3 * k + 1] = w->rgb.px[3 * k + 2] = view.px[k];
            w->rgb.w = view.w;
            w->rgb.h = view.h;
            w->rgb.c = 3;
            view = w->rgb;
        }
        int rc = train       ? vil_transform_train(&view, &c->train, rng, out)
                 : c->canvas ? vil_transform_canvas_eval(&view, c->res, (VilCanvasBg)c->canvas_bg, c->mean, c->std,
                                                         rng, out)
                             : vil_transform_eval(&view, c->res, c->crop_pct, c->mean, c->std, out);
        if (rc != 0) vil_error("the %s transform failed", train ? "train" : "eval");
        return rc;
    }
    if (vil_dataset_read_bytes(l->ds, idx, &w->bytes) != 0) return -1;
    __atomic_add_fetch(&l->decodes, 1, __ATOMIC_RELAXED);
    if (train)
        return vil_transform_train_file(w->bytes.data, w->bytes.size, &c->train, rng, out);
    if (c->canvas) {
        VilImage im;
        if (vil_image_decode(w->bytes.data, w->bytes.size, c->channels, &im) != 0) return -1;
        int rc = vil_transform_canvas_eval(&im, c->res, (VilCanvasBg)c->canvas_bg, c->mean, c->std, rng, out);
        vil_image_free(&im);
        return rc;
    }
    return vil_transform_eval_file(w->bytes.data, w->bytes.size, c->res, c->crop_pct, c->channels,
                                   c->mean, c->std, out);
}

/* Record a bad file: counted every time, printed the first time only. */
static void note_bad(VilLoader *l, int idx, const char *reason) {
    __atomic_add_fetch(&l->epoch_bad, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&l->total_bad, 1, __ATOMIC_RELAXED);
    if (__atomic_exchange_n(&l->bad[idx], 1, __ATOMIC_ACQ_REL) == 0) {
        __atomic_add_fetch(&l->distinct_bad, 1, __ATOMIC_RELAXED);
        if (!l->cfg.quiet) {
            /* the name comes from the dataset: escape codes and bad bytes go out as \xNN */
            char path[4096], shown[1024];
            vil_dataset_path(l->ds, idx, path, sizeof path);
            vil_warn("bad image '%s': %s (%s)", vil_printable(shown, sizeof shown, path), reason,
                     l->cfg.mode == VIL_LOADER_EVAL ? "left out of the evaluation"
                                                    : "replaced by another image of its class");
        }
    }
}

/* Which sample stands in on try t (>= 1) for the one at epoch position pos. Deterministic,
 * so the replacement is the same whatever thread meets the bad file. */
static int pick_replacement(const VilLoader *l, int idx, uint64_t key, int t) {
    int n = vil_dataset_size(l->ds);
    uint64_t h = vil_hash_seed(key, TAG_PICK, (uint64_t)t, 0);
    if (t <= CLASS_TRIES) {
        const int *mem;
        int cnt;
        vil_dataset_class_members(l->ds, vil_dataset_label(l->ds, idx), &mem, &cnt);
        if (cnt > 1) {
            int r = (int)(h % (uint64_t)cnt);
            if (mem[r] == idx) r = (r + 1) % cnt;
            return mem[r];
        }
    }
    int r = (int)(h % (uint64_t)n);
    return r == idx ? (r + 1) % n : r;
}

/* The augmentation key of this rank's epoch position pos: its position in the global list, so
 * a sample is augmented alike for any world and accum (with one rank: pos itself). */
static uint64_t sample_key(const VilLoader *l, int epoch, long pos) {
    long g = vil_sampler_global_position(&l->sampler, pos);
    return vil_hash_seed(l->cfg.seed, (uint64_t)(int64_t)epoch, (uint64_t)g, 0);
}

/* Fill row j of slot s with the sample at epoch position pos. 0, or -1 when no replacement
 * could be read either. */
static int fill_sample(Worker *w, Slot *s, int j, long pos) {
    VilLoader *l = w->l;
    const VilLoaderConfig *c = &l->cfg;
    int idx = l->order[pos];
    uint64_t key = sample_key(l, s->b.epoch, pos);
    float *out = s->b.images + (size_t)j * l->img_floats;
    int cand = idx;
    /* why a file was bad: make_sample's messages, for note_bad (on this worker's stack: the
     * hot path allocates nothing) */
    VilErrCapture cap;
    /* training replaces a bad file (the epoch keeps its size); evaluation never does */
    int tries = c->mode == VIL_LOADER_EVAL ? 1 : MAX_TRIES;
    for (int t = 0; t < tries; t++) {
        if (t > 0) cand = pick_replacement(l, idx, key, t);
        /* a file found bad before fails again at once; skipping the read keeps the same
         * sequence of tries, so the outcome stays independent of timing */
        if (__atomic_load_n(&l->bad[cand], __ATOMIC_ACQUIRE)) {
            __atomic_add_fetch(&l->epoch_bad, 1, __ATOMIC_RELAXED);
            __atomic_add_fetch(&l->total_bad, 1, __ATOMIC_RELAXED);
            continue;
        }
        VilRng rng;
        vil_rng_seed(&rng, t == 0 ? key : vil_hash_seed(key, TAG_RETRY, (uint64_t)t, 0));
        vil_error_capture(&cap);
        int rc = make_sample(w, cand, &rng, out);
        vil_error_release(&cap);
        if (rc == 0) {
            s->b.labels[j] = vil_dataset_label(l->ds, cand);
            s->b.indices[j] = cand;
            __atomic_add_fetch(&l->samples, 1, __ATOMIC_RELAXED);
            return 0;
        }
        note_bad(l, cand, cap.msg[0] ? cap.msg : "unknown error");
    }
    memset(out, 0, l->img_floats * sizeof(float));
    if (c->mode == VIL_LOADER_EVAL) {
        /* evaluation counts real images only: the row stays empty, with no label (-1) */
        s->b.labels[j] = -1;
        s->b.indices[j] = idx;
        return 0;
    }
    s->b.labels[j] = vil_dataset_label(l->ds, idx);
    s->b.indices[j] = idx;
    char path[4096], shown[1024];
    vil_dataset_path(l->ds, idx, path, sizeof path);
    pthread_mutex_lock(&l->mu);
    set_error(l,
              "no readable image among %d tried in place of '%s' (and the file itself): is the "
              "dataset readable (permissions, a network mount gone, a --max-pixels limit)?",
              MAX_TRIES - 1, vil_printable(shown, sizeof shown, path));
    pthread_cond_broadcast(&l->ready_cv);
    pthread_mutex_unlock(&l->mu);
    return -1;
}

/* Rows j .. j+count-1 of slot s: epoch positions pos .. that all hold the same dataset index
 * (the copies of repeated augmentation). The file is read once and decoded once per distinct
 * DCT scale of their crops; each row is bit-identical to what fill_sample would make (same
 * stream, same crop), so the grouping, which depends on how work was handed out, never shows.
 * A file that fails here goes row by row through fill_sample, which replaces it. */
#define GROUP_ROWS 16
static int fill_group(Worker *w, Slot *s, int j, long pos, int count) {
    VilLoader *l = w->l;
    const VilLoaderConfig *c = &l->cfg;
    int idx = l->order[pos];
    VilImage view;
    /* a file that fails here is made again row by row by fill_sample, which says why: the
     * messages of this try are dropped */
    VilErrCapture dropped;
    int rc = -1;
    vil_error_capture(&dropped);
    if (count <= GROUP_ROWS && !__atomic_load_n(&l->bad[idx], __ATOMIC_ACQUIRE) &&
        vil_dataset_raw_image(l->ds, idx, &view) != 0 &&
        vil_dataset_read_bytes(l->ds, idx, &w->bytes) == 0) {
        VilRng rngs[GROUP_ROWS];
        float *outs[GROUP_ROWS];
        for (int i = 0; i < count; i++) {
            vil_rng_seed(&rngs[i], sample_key(l, s->b.epoch, pos + i));
            outs[i] = s->b.images + (size_t)(j + i) * l->img_floats;
        }
        int dec = 0;
        rc = vil_transform_train_file_group(w->bytes.data, w->bytes.size, &c->train, count, rngs,
                                            outs, &dec);
        __atomic_add_fetch(&l->decodes, dec, __ATOMIC_RELAXED);
    }
    vil_error_release(&dropped);
    if (rc == 0) {
        for (int i = 0; i < count; i++) {
            s->b.labels[j + i] = vil_dataset_label(l->ds, idx);
            s->b.indices[j + i] = idx;
        }
        __atomic_add_fetch(&l->samples, count, __ATOMIC_RELAXED);
        return 0;
    }
    for (int i = 0; i < count; i++)
        if (fill_sample(w, s, j + i, pos + i) != 0) return -1;
    return 0;
}

/* Targets and mixing once row j is complete: the pair (j, n-1-j) is mixed by whichever of
 * its two samples completes second. */
static void finish_sample(VilLoader *l, Slot *s, int j) {
    VilBatch *b = &s->b;
    int n = b->n, K = l->num_classes;
    const VilMixupConfig *m = &l->cfg.mixup;
    int jj = n - 1 - j, p = j < jj ? j : jj;
    int need = j == jj ? 1 : 2;
    if (__atomic_add_fetch(&s->pair_done[p], 1, __ATOMIC_ACQ_REL) < need) return;
    int i = p, k = n - 1 - p;
    if (l->mixing)
        vil_mixup_pair(&b->mix, b->images + (size_t)i * l->img_floats,
                       b->images + (size_t)k * l->img_floats, b->channels, b->res, b->res);
    float lam = l->mixing ? b->mix.lam : 1.0f;
    vil_mixup_target_row(b->targets + (size_t)i * K, b->labels[i], b->labels[k], lam,
                         m->smoothing, K);
    if (k != i)
        vil_mixup_target_row(b->targets + (size_t)k * K, b->labels[k], b->labels[i], lam,
                             m->smoothing, K);
}

/* ---- the ring ---- */

/* With mu held: make slot s hold batch k of the current epoch. */
static void slot_begin(VilLoader *l, Slot *s, int k) {
    VilBatch *b = &s->b;
    int B = l->cfg.batch;
    long first = (long)k * B;
    b->n = (int)((l->total_tasks - first) < B ? (l->total_tasks - first) : B);
    b->epoch = l->epoch;
    b->step = k;
    s->epoch_gen = l->gen;
    s->state = SLOT_FILLING;
    s->pending = b->n;
    memset(s->pair_done, 0, ((size_t)B / 2 + 1) * sizeof(int));
    if (l->mixing) {
        VilRng rng;
        vil_rng_seed(&rng, vil_hash_seed(vil_hash_seed(l->cfg.seed, TAG_MIX, 0, 0),
                                         (uint64_t)(int64_t)l->epoch, (uint64_t)k,
                                         (uint64_t)l->cfg.rank));
        vil_mixup_draw(&l->cfg.mixup, &rng, b->res, b->res, &b->mix);
    } else {
        memset(&b->mix, 0, sizeof b->mix);
        b->mix.lam = 1.0f;
    }
    if (b->n < B) {
        /* the rows past n of a partial batch are defined, not stale */
        memset(b->images + (size_t)b->n * l->img_floats, 0,
               (size_t)(B - b->n) * l->img_floats * sizeof(float));
        memset(b->targets + (size_t)b->n * l->num_classes, 0,
               (size_t)(B - b->n) * l->num_classes * sizeof(float));
        for (int j = b->n; j < B; j++) b->labels[j] = b->indices[j] = -1;
    }
}

/* With mu held: the next tasks if their batch has a slot: up to `max` consecutive samples
 * of one batch, *count of them; 0 when none can start now. */
static int take_task(VilLoader *l, Slot **slot, int *j, long *pos, int max, int *count) {
    if (l->stop || l->failed || !l->started || l->next_task >= l->total_tasks) return 0;
    int B = l->cfg.batch;
    int k = (int)(l->next_task / B);
    Slot *s = &l->slots[k % l->nslots];
    if (s->state == SLOT_FREE) slot_begin(l, s, k);
    else if (!(s->state == SLOT_FILLING && s->epoch_gen == l->gen && s->b.step == k)) return 0;
    *slot = s;
    *j = (int)(l->next_task - (long)k * B);
    *pos = l->next_task;
    int n = s->b.n - *j; /* what is left of this batch */
    if (n > max) {
        n = max;
        /* end the chunk where a run of one file ends, so that the run is made (and its file
         * decoded) in one go; a run longer than the chunk is split */
        long e = *pos + n;
        while (l->share && e > *pos + 1 && l->order[e] == l->order[e - 1]) e--;
        if (l->order[e] != l->order[e - 1]) n = (int)(e - *pos);
    }
    *count = n;
    l->next_task += n;
    return 1;
}

static void *worker_main(void *arg) {
    Worker *w = arg;
    VilLoader *l = w->l;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        Slot *s;
        int j, n;
        long pos;
        while (!l->stop && !take_task(l, &s, &j, &pos, l->chunk, &n)) pthread_cond_wait(&l->work_cv, &l->mu);
        if (l->stop) break;
        l->active++;
        pthread_mutex_unlock(&l->mu);

        int ok = 1;
        for (int i = 0; i < n && ok;) {
            int r = 1; /* the run of positions holding the same file */
            while (l->share && i + r < n && l->order[pos + i + r] == l->order[pos + i]) r++;
            ok = (r > 1 ? fill_group(w, s, j + i, pos + i, r) : fill_sample(w, s, j + i, pos + i)) == 0;
            for (int k = 0; k < r && ok; k++) finish_sample(l, s, j + i + k);
            i += r;
        }
        /* a failed sample stops the loader; the rest of the chunk is not needed */
        int last = __atomic_sub_fetch(&s->pending, n, __ATOMIC_ACQ_REL) == 0;

        pthread_mutex_lock(&l->mu);
        l->active--;
        if (last && ok && s->epoch_gen == l->gen && s->state == SLOT_FILLING) {
            s->state = SLOT_READY;
            pthread_cond_broadcast(&l->ready_cv);
        }
        if (l->active == 0) pthread_cond_broadcast(&l->idle_cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void *slot_carve(void *mem, size_t *off, size_t bytes) {
    void *p = (char *)mem + *off;
    *off += (bytes + 63) / 64 * 64;
    return p;
}

/* A loader of streams: data/stream.c makes its batches, on the caller's thread */
static VilLoader *stream_loader(const VilDataset *ds, const VilLoaderConfig *c) {
    VilStreamSource *s = vil_stream_open(ds, c);
    if (!s) return NULL;
    VilLoader *l = vil_calloc(1, sizeof *l);
    l->stream = s;
    return l;
}

VilLoader *vil_loader_create(const VilDataset *ds, const VilLoaderConfig *cfg) {
    const VilLoaderConfig *c = cfg;
    if (c->stream.len > 0) return stream_loader(ds, c);
    int K = vil_dataset_num_classes(ds);
    const int train = c->mode == VIL_LOADER_TRAIN;
    const int canvas = train ? c->train.canvas : c->canvas, canvas_bg = train ? c->train.canvas_bg : c->canvas_bg;
    const char *bad = NULL;
    if (c->batch < 1) bad = "batch must be >= 1";
    else if (c->res < 1) bad = "res must be >= 1";
    else if (c->channels != 1 && c->channels != 3) bad = "channels must be 1 or 3";
    else if (c->threads < 1 || c->threads > 1024) bad = "threads must be in [1, 1024]";
    else if (c->prefetch < 1) bad = "prefetch must be >= 1";
    else if (c->world < 1 || c->rank < 0 || c->rank >= c->world) bad = "rank must be in [0, world)";
    else if (c->accum < 1) bad = "accum must be >= 1";
    else if (c->mode == VIL_LOADER_TRAIN && c->repeats < 1) bad = "repeats must be >= 1";
    else if (c->mixup.num_classes != K) bad = "mixup.num_classes differs from the dataset's";
    else if (c->mode == VIL_LOADER_TRAIN &&
             (c->train.res != c->res || c->train.channels != c->channels))
        bad = "train transform res/channels differ from the loader's";
    else if (c->mode == VIL_LOADER_EVAL && !(c->crop_pct > 0.0f && c->crop_pct <= 1.0f))
        bad = "crop_pct must be in (0, 1]";
    else if (canvas != 0 && canvas != c->res) bad = "canvas must be 0 (off) or res";
    else if (canvas_bg != VIL_CANVAS_ZERO && canvas_bg != VIL_CANVAS_NOISE)
        bad = "canvas_bg must be VIL_CANVAS_ZERO or VIL_CANVAS_NOISE";
    if (bad) {
        vil_error("loader: %s", bad);
        return NULL;
    }
    VilLoader *l = vil_calloc(1, sizeof *l);
    l->ds = ds;
    l->cfg = *c;
    if (!l->cfg.alloc.alloc) {
        l->cfg.alloc.alloc = default_alloc;
        l->cfg.alloc.free = default_free;
        l->cfg.alloc.ctx = NULL;
    }
    l->num_classes = K;
    l->img_floats = (size_t)c->channels * c->res * c->res;
    l->mixing = c->mode == VIL_LOADER_TRAIN && c->mixup.prob > 0.0f &&
                (c->mixup.mixup_alpha > 0.0f || c->mixup.cutmix_alpha > 0.0f);
    int n = vil_dataset_size(ds);
    if (c->mode == VIL_LOADER_TRAIN) {
        vil_sampler_init_train(&l->sampler, n, c->world, c->rank, c->repeats, c->seed);
        l->sampler.batch = c->batch;
        l->sampler.accum = c->accum;
        l->sampler.drop_last = c->drop_last;
    } else {
        vil_sampler_init_eval(&l->sampler, n, c->world, c->rank);
    }
    l->order_cap = vil_sampler_epoch_length(&l->sampler);
    l->order = vil_malloc((size_t)(l->order_cap ? l->order_cap : 1) * sizeof(int));
    l->bad = vil_calloc((size_t)n, 1);

    /* one allocation per slot, carved into the four arrays */
    int B = c->batch;
    size_t bytes = 0;
    size_t sz_img = (size_t)B * l->img_floats * sizeof(float);
    size_t sz_tgt = (size_t)B * K * sizeof(float), sz_int = (size_t)B * sizeof(int);
    bytes = (sz_img + 63) / 64 * 64 + (sz_tgt + 63) / 64 * 64 + 2 * ((sz_int + 63) / 64 * 64);
    l->nslots = c->prefetch + 1;
    l->slots = vil_calloc((size_t)l->nslots, sizeof(Slot));
    for (int i = 0; i < l->nslots; i++) {
        Slot *s = &l->slots[i];
        s->mem = l->cfg.alloc.alloc(bytes, l->cfg.alloc.ctx);
        if (!s->mem) {
            vil_error("loader: cannot allocate %d batches of %.1f MB (lower --batch or the "
                      "prefetch depth)", l->nslots, bytes / 1e6);
            vil_loader_free(l);
            return NULL;
        }
        /* touch every page now, so the first epoch's batches do not pay the page faults
         * (pinned memory from cudaHostAlloc is resident already; this is for malloc) */
        memset(s->mem, 0, bytes);
        size_t off = 0;
        s->b.images = slot_carve(s->mem, &off, sz_img);
        s->b.targets = slot_carve(s->mem, &off, sz_tgt);
        s->b.labels = slot_carve(s->mem, &off, sz_int);
        s->b.indices = slot_carve(s->mem, &off, sz_int);
        s->b.batch = B;
        s->b.channels = c->channels;
        s->b.res = c->res;
        s->b.num_classes = K;
        s->b.readouts = 1;
        s->pair_done = vil_calloc((size_t)B / 2 + 1, sizeof(int));
    }
    /* invariant: with default attributes glibc's mutex and condition initializers cannot fail */
    CHECK_LIBC(pthread_mutex_init(&l->mu, NULL), "loader mutex");
    CHECK_LIBC(pthread_cond_init(&l->work_cv, NULL), "loader condition variable");
    CHECK_LIBC(pthread_cond_init(&l->ready_cv, NULL), "loader condition variable");
    CHECK_LIBC(pthread_cond_init(&l->idle_cv, NULL), "loader condition variable");
    l->sync_ready = 1;
    /* Chunks of consecutive samples per hand-out, small enough that every thread still gets
     * work within one batch. Which thread makes a sample never matters to its value. */
    l->chunk = c->batch / (2 * c->threads);
    if (l->chunk < 1) l->chunk = 1;
    if (l->chunk > 8) l->chunk = 8;
    l->share = c->mode == VIL_LOADER_TRAIN && c->share_decode;
    /* with one rank the copies of repeated augmentation are runs of `repeats` positions:
     * a chunk of whole runs */
    if (l->share && c->world == 1 && c->repeats > 1)
        l->chunk = (l->chunk + c->repeats - 1) / c->repeats * c->repeats;
    l->workers = vil_calloc((size_t)c->threads, sizeof(Worker));
    for (int i = 0; i < c->threads; i++) {
        l->workers[i].l = l;
        int rc = pthread_create(&l->workers[i].tid, NULL, worker_main, &l->workers[i]);
        if (rc != 0) {
            vil_error("loader: cannot start worker thread %d of %d: %s", i + 1, c->threads,
                      strerror(rc));
            vil_loader_free(l);
            return NULL;
        }
        l->nworkers++;
    }
    return l;
}

void vil_loader_free(VilLoader *l) {
    if (!l) return;
    if (l->stream) {
        vil_stream_free(l->stream);
        free(l);
        return;
    }
    if (l->nworkers) {
        pthread_mutex_lock(&l->mu);
        l->stop = 1;
        pthread_cond_broadcast(&l->work_cv);
        pthread_mutex_unlock(&l->mu);
        for (int i = 0; i < l->nworkers; i++) pthread_join(l->workers[i].tid, NULL);
    }
    if (l->sync_ready) {
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->work_cv);
        pthread_cond_destroy(&l->ready_cv);
        pthread_cond_destroy(&l->idle_cv);
    }
    if (l->workers)
        for (int i = 0; i < l->cfg.threads; i++) {
            vil_buffer_free(&l->workers[i].bytes);
            free(l->workers[i].rgb.px);
        }
    free(l->workers);
    for (int i = 0; l->slots && i < l->nslots; i++) {
        if (l->slots[i].mem) l->cfg.alloc.free(l->slots[i].mem, l->cfg.alloc.ctx);
        free(l->slots[i].pair_done);
    }
    free(l->slots);
    free(l->order);
    free(l->bad);
    free(l);
}

int vil_loader_start_epoch(VilLoader *l, int epoch) {
    if (l->stream) return vil_stream_start_epoch(l->stream, epoch);
    pthread_mutex_lock(&l->mu);
    /* abandon what is left of the previous epoch: hand out no more tasks, let the running
     * ones finish, and drop every batch not held by the caller */
    l->total_tasks = l->next_task;
    while (l->active > 0) pthread_cond_wait(&l->idle_cv, &l->mu);
    for (int i = 0; i < l->nslots; i++)
        if (l->slots[i].state != SLOT_HELD) l->slots[i].state = SLOT_FREE;
    l->gen++;
    l->epoch = epoch;
    l->order_len = vil_sampler_epoch_length(&l->sampler);
    vil_sampler_epoch(&l->sampler, epoch, l->order);
    int B = l->cfg.batch;
    l->nbatches = l->cfg.drop_last ? l->order_len / B : (l->order_len + B - 1) / B;
    l->total_tasks = l->cfg.drop_last ? (long)l->nbatches * B : l->order_len;
    l->next_task = 0;
    l->consumed = 0;
    l->epoch_reported = 0;
    __atomic_store_n(&l->epoch_bad, 0, __ATOMIC_RELAXED);
    l->started = 1;
    int nb = l->nbatches;
    pthread_cond_broadcast(&l->work_cv);
    pthread_mutex_unlock(&l->mu);
    return nb;
}

int vil_loader_batches_per_epoch(const VilLoader *l) {
    if (l->stream) return vil_stream_batches_per_epoch(l->stream);
    int len = vil_sampler_epoch_length(&l->sampler), B = l->cfg.batch;
    return l->cfg.drop_last ? len / B : (len + B - 1) / B;
}

int vil_loader_epoch_length(const VilLoader *l) {
    return l->stream ? vil_stream_epoch_length(l->stream) : vil_sampler_epoch_length(&l->sampler);
}

const VilBatch *vil_loader_next_batch(VilLoader *l) {
    if (l->stream) return vil_stream_next_batch(l->stream);
    pthread_mutex_lock(&l->mu);
    if (!l->started) {
        set_error(l, "vil_loader_next_batch before vil_loader_start_epoch");
        pthread_mutex_unlock(&l->mu);
        return NULL;
    }
    if (l->consumed >= l->nbatches) {
        long bad = __atomic_load_n(&l->epoch_bad, __ATOMIC_RELAXED);
        if (!l->epoch_reported && bad > 0 && !l->cfg.quiet) {
            long distinct = __atomic_load_n(&l->distinct_bad, __ATOMIC_RELAXED);
            if (l->cfg.mode == VIL_LOADER_EVAL) /* fill_sample: an empty row, label -1 */
                vil_warn("%ld bad image%s left out of the evaluation (named above)", bad,
                         bad == 1 ? " was" : "s were");
            else
                vil_warn("epoch %d: %ld bad image reads were replaced by other images of their "
                         "class (%ld distinct bad files so far)", l->epoch, bad, distinct);
        }
        l->epoch_reported = 1;
        pthread_mutex_unlock(&l->mu);
        return NULL;
    }
    int k = l->consumed;
    Slot *s = &l->slots[k % l->nslots];
    for (;;) {
        if (l->failed) break;
        if (s->state == SLOT_READY && s->epoch_gen == l->gen && s->b.step == k) break;
        if (s->state == SLOT_HELD) {
            /* the caller holds every slot the next batch could go to */
            set_error(l, "vil_loader_next_batch: the caller holds all %d ring slots; release "
                         "each batch with vil_loader_release_batch, or raise prefetch",
                      l->nslots);
            break;
        }
        pthread_cond_wait(&l->ready_cv, &l->mu);
    }
    if (l->failed) {
        pthread_mutex_unlock(&l->mu);
        return NULL;
    }
    s->state = SLOT_HELD;
    l->consumed++;
    pthread_mutex_unlock(&l->mu);
    return &s->b;
}

void vil_loader_release_batch(VilLoader *l, const VilBatch *b) {
    if (!b) return;
    if (l->stream) {
        vil_stream_release_batch(l->stream, b);
        return;
    }
    pthread_mutex_lock(&l->mu);
    for (int i = 0; i < l->nslots; i++)
        if (&l->slots[i].b == b && l->slots[i].state == SLOT_HELD) {
            l->slots[i].state = SLOT_FREE;
            pthread_cond_broadcast(&l->work_cv);
        }
    pthread_mutex_unlock(&l->mu);
}

const char *vil_loader_error(const VilLoader *l) {
    if (l->stream) return vil_stream_error(l->stream);
    return l->failed ? l->error : NULL;
}

void vil_loader_stats(const VilLoader *l, VilLoaderStats *out) {
    if (l->stream) {
        vil_stream_stats(l->stream, out);
        return;
    }
    out->epoch_bad = __atomic_load_n(&l->epoch_bad, __ATOMIC_RELAXED);
    out->total_bad = __atomic_load_n(&l->total_bad, __ATOMIC_RELAXED);
    out->distinct_bad = __atomic_load_n(&l->distinct_bad, __ATOMIC_RELAXED);
    out->decodes = __atomic_load_n(&l->decodes, __ATOMIC_RELAXED);
    out->samples = __atomic_load_n(&l->samples, __ATOMIC_RELAXED);
}
