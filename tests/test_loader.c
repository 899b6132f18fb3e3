/* test_loader.c: the sampler (sharding, padding, DeiT repeated augmentation, determinism) and
 * the loader (bitwise-identical batches for 1, 2 and 4 threads, the per-sample seeding
 * contract, bad-file replacement and counts, eval's partial batch, the allocator hook, IDX),
 * on a small corpus the test writes in a temporary folder. */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "data/loader.h"
#include "data/sampler.h"
#include "tests/data_corpus.h"
#include "tests/testing.h"


/* ---- sampler ---- */

static void test_sampler(void) {
    /* DistributedSampler: padded to a multiple of world, every index at least once */
    for (int n = 997; n <= 1000; n++) {
        const int world = 4;
        int *seen = calloc((size_t)n, sizeof(int)), total = 0, len0 = -1, same_len = 1;
        for (int r = 0; r < world; r++) {
            VilSampler s;
            vil_sampler_init_train(&s, n, world, r, 1, 42);
            int len = vil_sampler_epoch_length(&s);
            if (len0 < 0) len0 = len;
            same_len &= len == len0;
            int *out = malloc((size_t)len * sizeof(int));
            T_CHECK(vil_sampler_epoch(&s, 3, out) == 0, "epoch");
            for (int p = 0; p < len; p++) seen[out[p]]++;
            total += len;
            free(out);
        }
        int missing = 0, extra = 0;
        for (int i = 0; i < n; i++) {
            missing += seen[i] == 0;
            extra += seen[i] - 1;
        }
        T_CHECK(same_len && len0 == (n + world - 1) / world, "n=%d: per-rank length %d", n, len0);
        T_CHECK(missing == 0 && extra == total - n && extra < world,
                "n=%d: every index covered, %d padding", n, extra);
        free(seen);
    }
    /* a pure function of (seed, epoch, rank, world); epochs and seeds differ */
    VilSampler a, b;
    vil_sampler_init_train(&a, 500, 2, 1, 1, 7);
    b = a;
    int la = vil_sampler_epoch_length(&a);
    int *x = malloc((size_t)la * sizeof(int)), *y = malloc((size_t)la * sizeof(int));
    vil_sampler_epoch(&a, 5, x);
    vil_sampler_epoch(&b, 5, y);
    T_CHECK(memcmp(x, y, (size_t)la * sizeof(int)) == 0, "same key, same order");
    vil_sampler_epoch(&a, 6, y);
    T_CHECK(memcmp(x, y, (size_t)la * sizeof(int)) != 0, "another epoch, another order");
    b.seed = 8;
    vil_sampler_epoch(&b, 5, y);
    T_CHECK(memcmp(x, y, (size_t)la * sizeof(int)) != 0, "another seed, another order");
    free(x);
    free(y);

    /* RASampler: each index repeated 3 times, strided over ranks, truncated to DeiT's
     * floor(n // 256 * 256 / world) */
    {
        const int n = 1000, world = 2;
        VilSampler s;
        vil_sampler_init_train(&s, n, world, 0, 3, 11);
        int len = vil_sampler_epoch_length(&s);
        T_CHECK(len == 1000 / 256 * 256 / world, "RA epoch length %d (DeiT: 384)", len);
        int *perm = malloc(n * sizeof(int));
        vil_sampler_permutation(&s, 2, perm);
        int ok = 1;
        for (int r = 0; r < world; r++) {
            s.rank = r;
            int *out = malloc((size_t)len * sizeof(int));
            vil_sampler_epoch(&s, 2, out);
            for (int p = 0; p < len; p++) ok &= out[p] == perm[(r + p * world) / 3];
            free(out);
        }
        T_CHECK(ok, "RA order = repeat(perm, 3)[rank::world]");
        free(perm);
    }
    {
        /* world 1: each sampled image three times in a row */
        VilSampler s;
        vil_sampler_init_train(&s, 600, 1, 0, 3, 5);
        int len = vil_sampler_epoch_length(&s);
        int *out = malloc((size_t)len * sizeof(int)), ok = len == 512;
        vil_sampler_epoch(&s, 0, out);
        for (int p = 0; p + 2 < len; p += 3) ok &= out[p] == out[p + 1] && out[p] == out[p + 2];
        T_CHECK(ok, "RA world 1: triples, length %d", len);
        free(out);
    }
    {
        /* world 3 = repeats: every rank reads the same images in the same order (with its
         * own augmentation), as DeiT's RASampler gives */
        VilSampler s;
        vil_sampler_init_train(&s, 3000, 3, 0, 3, 5);
        int len = vil_sampler_epoch_length(&s);
        int *o0 = malloc((size_t)len * sizeof(int)), *o2 = malloc((size_t)len * sizeof(int));
        vil_sampler_epoch(&s, 1, o0);
        s.rank = 2;
        vil_sampler_epoch(&s, 1, o2);
        T_CHECK(len == 3000 / 256 * 256 / 3 && memcmp(o0, o2, (size_t)len * sizeof(int)) == 0,
                "RA world 3: ranks share the order");
        free(o0);
        free(o2);
    }
    {
        /* below 256 samples DeiT's rule is an empty epoch; we read ceil(n / world) */
        VilSampler s;
        vil_sampler_init_train(&s, 100, 2, 1, 3, 5);
        T_CHECK(vil_sampler_epoch_length(&s) == 50, "RA tiny dataset fallback");
    }
    {
        /* eval: no shuffle, no padding, each index exactly once over the ranks */
        int n = 10, world = 3, seen[10] = {0}, lens[3];
        for (int r = 0; r < world; r++) {
            VilSampler s;
            vil_sampler_init_eval(&s, n, world, r);
            lens[r] = vil_sampler_epoch_length(&s);
            int out[10];
            vil_sampler_epoch(&s, 9, out);
            for (int p = 0; p < lens[r]; p++) {
                seen[out[p]]++;
                T_CHECK(out[p] == r + p * world, "eval order");
            }
        }
        int once = 1;
        for (int i = 0; i < n; i++) once &= seen[i] == 1;
        T_CHECK(once && lens[0] == 4 && lens[1] == 3 && lens[2] == 3, "eval shards");
    }
    VilSampler bad;
    vil_sampler_init_train(&bad, 10, 2, 2, 1, 0);
    int dummy[10];
    T_CHECK(vil_sampler_epoch(&bad, 0, dummy) != 0, "rank >= world rejected");
}

/* Training's sliced order: a global step reads the same samples at the same global positions
 * for 1, 2, 3 and 4 ranks and 1 to 3 micro-batches per step (the single-rank list, cut into
 * slices), with and without repeated augmentation, with drop_last and with wrap-around padding. */
static void test_sampler_slices(void) {
    const int GB = 24;
    int cases[][3] = {{1000, 1, 1}, {1000, 3, 1}, {997, 1, 0}, {130, 3, 1}, {997, 3, 0}};
    for (int c = 0; c < 5; c++) {
        int n = cases[c][0], reps = cases[c][1], dl = cases[c][2];
        VilSampler one;
        vil_sampler_init_train(&one, n, 1, 0, reps, 9);
        one.batch = GB, one.drop_last = dl;
        int len1 = vil_sampler_epoch_length(&one);
        int *ref = malloc((size_t)len1 * sizeof(int));
        vil_sampler_epoch(&one, 4, ref);
        /* world 1 with slices is the plain list: the same as batch 0 where that ends evenly */
        VilSampler plain;
        vil_sampler_init_train(&plain, n, 1, 0, reps, 9);
        int lp = vil_sampler_epoch_length(&plain);
        int *pl = malloc((size_t)lp * sizeof(int));
        vil_sampler_epoch(&plain, 4, pl);
        int same = 1;
        for (int p = 0; p < len1 && p < lp; p++) same &= ref[p] == pl[p];
        T_CHECK(same && len1 % GB == 0 && (dl ? len1 <= lp && lp - len1 < GB : len1 >= lp),
                "n=%d repeats %d drop_last %d: world 1 slices = the plain list (%d vs %d)", n, reps,
                dl, len1, lp);
        int splits[][2] = {{2, 1}, {3, 1}, {4, 1}, {1, 2}, {2, 2}, {2, 3}};
        for (int sp = 0; sp < 6; sp++) {
            int world = splits[sp][0], accum = splits[sp][1];
            int ok = 1, lens = 1;
            int *seen = calloc((size_t)len1, sizeof(int));
            for (int r = 0; r < world; r++) {
                VilSampler s;
                vil_sampler_init_train(&s, n, world, r, reps, 9);
                s.batch = GB / (world * accum), s.accum = accum, s.drop_last = dl;
                int len = vil_sampler_epoch_length(&s);
                lens &= (long)len * world == len1;
                int *out = malloc((size_t)(len ? len : 1) * sizeof(int));
                vil_sampler_epoch(&s, 4, out);
                for (int p = 0; p < len; p++) {
                    long g = vil_sampler_global_position(&s, p);
                    ok &= g < len1 && out[p] == ref[g] && g / GB == p / (s.batch * accum);
                    if (g >= 0 && g < len1) seen[g]++;
                }
                free(out);
            }
            for (int g = 0; g < len1; g++) ok &= seen[g] == 1;
            free(seen);
            T_CHECK(ok && lens, "n=%d repeats %d drop_last %d world %d accum %d: the global batches "
                    "of world 1", n, reps, dl, world, accum);
        }
        free(ref);
        free(pl);
    }
}

/* ---- loader ---- */

static const char *k_bad[4] = {"zero.JPEG", "cut20.JPEG", "text.JPEG", "half.JPEG"};

static void write_corpus(const char *root) {
    char p[8192];
    corpus_mkdir("%s/%s", root, "train");
    corpus_mkdir("%s/%s", root, "val");
    corpus_mkdir("%s/%s", root, "idx");
    const char *cls[3] = {"c0", "c1", "c2"};
    for (int c = 0; c < 3; c++) {
        snprintf(p, sizeof p, "%s/train", root);
        corpus_mkdir("%s/%s", p, cls[c]);
        snprintf(p, sizeof p, "%s/val", root);
        corpus_mkdir("%s/%s", p, cls[c]);
        for (int i = 0; i < 12; i++) {
            snprintf(p, sizeof p, "%s/train/%s/%02d.JPEG", root, cls[c], i);
            if (i == 5) corpus_write_png(p, 50, 40, c, i);         /* PNG named .JPEG */
            else corpus_write_jpeg(p, 48 + 4 * i, 40 + 2 * c, i == 7 ? 1 : 3, c, i, i == 3);
        }
        for (int i = 0; i < (c == 0 ? 4 : 3); i++) {
            snprintf(p, sizeof p, "%s/val/%s/%02d.JPEG", root, cls[c], i);
            corpus_write_jpeg(p, 56, 44, 3, c, 20 + i, 0);
        }
    }
    /* bad files, all in class c1 */
    snprintf(p, sizeof p, "%s/train/c1/%s", root, k_bad[0]);
    corpus_write(p, "", 0);
    snprintf(p, sizeof p, "%s/train/c1/%s", root, k_bad[1]);
    corpus_write_truncated(p, 64, 48, 20);
    snprintf(p, sizeof p, "%s/train/c1/%s", root, k_bad[2]);
    corpus_write(p, "this is not an image\n", 21);
    snprintf(p, sizeof p, "%s/train/c1/%s", root, k_bad[3]);
    corpus_write_truncated(p, 64, 48, 700);
    snprintf(p, sizeof p, "%s/idx", root);
    corpus_write_idx_set(p, "train", 40, 28, 28, 10, 1);
}

typedef struct {
    int nb;
    VilBatch *b;    /* copies */
    float **img, **tgt;
    int **lab, **ind;
} Run;

static void run_free(Run *r) {
    for (int k = 0; k < r->nb; k++) {
        free(r->img[k]);
        free(r->tgt[k]);
        free(r->lab[k]);
        free(r->ind[k]);
    }
    free(r->b);
    free(r->img);
    free(r->tgt);
    free(r->lab);
    free(r->ind);
    memset(r, 0, sizeof *r);
}

/* Every batch of epochs [e0, e0 + ne), copied. */
static int collect(VilLoader *l, int e0, int ne, Run *r) {
    memset(r, 0, sizeof *r);
    for (int e = e0; e < e0 + ne; e++) {
        vil_loader_start_epoch(l, e);
        const VilBatch *b;
        while ((b = vil_loader_next_batch(l)) != NULL) {
            int k = r->nb++;
            r->b = realloc(r->b, r->nb * sizeof(VilBatch));
            r->img = realloc(r->img, r->nb * sizeof(float *));
            r->tgt = realloc(r->tgt, r->nb * sizeof(float *));
            r->lab = realloc(r->lab, r->nb * sizeof(int *));
            r->ind = realloc(r->ind, r->nb * sizeof(int *));
            r->b[k] = *b;
            size_t ni = (size_t)b->batch * b->channels * b->res * b->res;
            size_t nt = (size_t)b->batch * b->num_classes;
            r->img[k] = malloc(ni * sizeof(float));
            memcpy(r->img[k], b->images, ni * sizeof(float));
            r->tgt[k] = malloc(nt * sizeof(float));
            memcpy(r->tgt[k], b->targets, nt * sizeof(float));
            r->lab[k] = malloc(b->batch * sizeof(int));
            memcpy(r->lab[k], b->labels, b->batch * sizeof(int));
            r->ind[k] = malloc(b->batch * sizeof(int));
            memcpy(r->ind[k], b->indices, b->batch * sizeof(int));
            vil_loader_release_batch(l, b);
        }
        if (vil_loader_error(l)) {
            printf("loader error: %s\n", vil_loader_error(l));
            return -1;
        }
    }
    return 0;
}

static int runs_equal(const Run *a, const Run *b) {
    if (a->nb != b->nb) return 0;
    for (int k = 0; k < a->nb; k++) {
        const VilBatch *x = &a->b[k], *y = &b->b[k];
        if (x->n != y->n || x->epoch != y->epoch || x->step != y->step ||
            memcmp(&x->mix, &y->mix, sizeof x->mix) != 0)
            return 0;
        size_t ni = (size_t)x->batch * x->channels * x->res * x->res;
        if (memcmp(a->img[k], b->img[k], ni * sizeof(float)) ||
            memcmp(a->tgt[k], b->tgt[k], (size_t)x->batch * x->num_classes * sizeof(float)) ||
            memcmp(a->lab[k], b->lab[k], x->batch * sizeof(int)) ||
            memcmp(a->ind[k], b->ind[k], x->batch * sizeof(int)))
            return 0;
    }
    return 1;
}

/* the train transform's JPEG decode in make_loader's loaders */
static int g_decode = VIL_DECODE_EXACT;
/* share_decode in make_loader's loaders */
static int g_share = 1;

static VilLoader *make_loader(const VilDataset *ds, VilLoaderMode mode, int threads, int prefetch,
                              int repeats, int quiet) {
    VilLoaderConfig c;
    vil_loader_config_default(&c, mode, 32, 3, 8, vil_dataset_num_classes(ds));
    c.train.decode = g_decode;
    c.share_decode = g_share;
    c.threads = threads;
    c.prefetch = prefetch;
    c.seed = 1234;
    c.repeats = repeats;
    c.quiet = quiet;
    VilLoader *l = vil_loader_create(ds, &c);
    T_CHECK(l != NULL, "loader");
    return l;
}

/* Runs with the current g_decode; returns the 1-thread reference (caller frees) */
static void test_determinism_mode(const VilDataset *ds, Run *ref_out) {
    Run ref, r;
    VilLoader *l = make_loader(ds, VIL_LOADER_TRAIN, 1, 2, 3, 1);
    if (!l) return;
    T_CHECK(vil_loader_epoch_length(l) == 40 && vil_loader_batches_per_epoch(l) == 5,
            "train epoch: %d samples, %d batches", vil_loader_epoch_length(l),
            vil_loader_batches_per_epoch(l));
    T_CHECK(collect(l, 0, 2, &ref) == 0 && ref.nb == 10, "2 epochs of 5 batches: %d", ref.nb);
    VilLoaderStats st;
    vil_loader_stats(l, &st);
    /* 1 thread, world 1: the 3 copies of an image share a decode unless a batch boundary
     * splits them (8-sample batches: about 1 in 3 runs) */
    T_CHECK(st.samples == 80 && st.decodes < st.samples * 2 / 3 && st.decodes >= st.samples / 3,
            "shared decodes: %ld decodes for %ld samples", st.decodes, st.samples);
    vil_loader_free(l);
    int mixed = 0, finite = 1;
    for (int k = 0; k < ref.nb; k++) {
        mixed += ref.b[k].mix.lam < 1.0f;
        size_t ni = (size_t)8 * 3 * 32 * 32;
        for (size_t q = 0; q < ni; q++) finite &= isfinite(ref.img[k][q]);
        for (int j = 0; j < 8; j++) {
            double s = 0;
            for (int q = 0; q < 3; q++) s += ref.tgt[k][j * 3 + q];
            finite &= fabs(s - 1.0) < 1e-5;
        }
    }
    T_CHECK(mixed == ref.nb, "every train batch mixed (prob 1.0): %d of %d", mixed, ref.nb);
    T_CHECK(finite, "finite images, target rows summing to 1");
    const int threads[3] = {2, 4, 3}, prefetch[3] = {2, 1, 4};
    for (int t = 0; t < 3; t++) {
        l = make_loader(ds, VIL_LOADER_TRAIN, threads[t], prefetch[t], 3, 1);
        if (!l) continue;
        T_CHECK(collect(l, 0, 2, &r) == 0 && runs_equal(&ref, &r),
                "threads %d prefetch %d: bitwise the same batches as 1 thread", threads[t],
                prefetch[t]);
        run_free(&r);
        vil_loader_free(l);
    }
    /* every sample decoded on its own: the same batches, one decode per sample */
    g_share = 0;
    l = make_loader(ds, VIL_LOADER_TRAIN, 2, 2, 3, 1);
    g_share = 1;
    if (l) {
        T_CHECK(collect(l, 0, 2, &r) == 0 && runs_equal(&ref, &r),
                "share_decode 0: bitwise the same batches as with shared decodes");
        vil_loader_stats(l, &st);
        T_CHECK(st.decodes == st.samples && st.samples == 80, "share_decode 0: %ld decodes for %ld samples",
                st.decodes, st.samples);
        run_free(&r);
        vil_loader_free(l);
    }
    /* an epoch abandoned half way leaves the next one unchanged */
    l = make_loader(ds, VIL_LOADER_TRAIN, 3, 2, 3, 1);
    if (l) {
        vil_loader_start_epoch(l, 0);
        const VilBatch *b = vil_loader_next_batch(l);
        vil_loader_release_batch(l, b);
        Run tail;
        T_CHECK(collect(l, 1, 1, &tail) == 0 && tail.nb == 5, "epoch after an abandoned one");
        int same = 1;
        for (int k = 0; k < 5 && tail.nb == 5; k++)
            same &= memcmp(tail.img[k], ref.img[5 + k], (size_t)8 * 3 * 32 * 32 * sizeof(float)) == 0;
        T_CHECK(same, "abandoning an epoch changes nothing after it");
        run_free(&tail);
        vil_loader_free(l);
    }
    *ref_out = ref;
}

/* exact and fast JPEG decoding: each deterministic across thread counts; fast really used */
static void test_determinism(const VilDataset *ds) {
    Run exact, fast;
    g_decode = VIL_DECODE_EXACT;
    test_determinism_mode(ds, &exact);
    g_decode = VIL_DECODE_FAST;
    test_determinism_mode(ds, &fast);
    g_decode = VIL_DECODE_EXACT;
    T_CHECK(exact.nb == fast.nb && exact.nb > 0, "fast and exact runs of the same length");
    int differ = 0;
    for (int k = 0; k < exact.nb && k < fast.nb; k++)
        differ += memcmp(exact.img[k], fast.img[k], (size_t)8 * 3 * 32 * 32 * sizeof(float)) != 0;
    T_CHECK(differ > 0, "decode = fast gave the same batches as exact: not applied by the loader?");
    run_free(&exact);
    run_free(&fast);
}

/* With mixing off, row j of batch k is exactly the train transform of sample order[pos] with
 * the RNG seeded by vil_hash_seed(seed, epoch, pos, rank): the documented contract. */
static void test_contract(const VilDataset *ds) {
    VilLoaderConfig c;
    vil_loader_config_default(&c, VIL_LOADER_TRAIN, 32, 3, 8, vil_dataset_num_classes(ds));
    c.threads = 2;
    c.seed = 99;
    c.world = 2;
    c.rank = 1;
    c.repeats = 1;
    c.quiet = 1;
    vil_mixup_config_none(&c.mixup, vil_dataset_num_classes(ds), 0.1f);
    VilLoader *l = vil_loader_create(ds, &c);
    T_CHECK(l != NULL, "loader");
    if (!l) return;
    VilSampler s;
    vil_sampler_init_train(&s, vil_dataset_size(ds), 2, 1, 1, 99);
    s.batch = c.batch, s.drop_last = c.drop_last; /* training's sliced order */
    int len = vil_sampler_epoch_length(&s);
    int *order = malloc((size_t)len * sizeof(int));
    vil_sampler_epoch(&s, 4, order);
    vil_loader_start_epoch(l, 4);
    const VilBatch *b;
    int checked = 0, same = 1, order_ok = 1, targets_ok = 1;
    float *ref = malloc((size_t)3 * 32 * 32 * sizeof(float));
    VilBuffer buf = {0};
    while ((b = vil_loader_next_batch(l)) != NULL) {
        for (int j = 0; j < b->n; j++) {
            int pos = b->step * 8 + j;
            if (b->indices[j] != order[pos]) continue; /* a replaced bad file */
            order_ok &= b->labels[j] == vil_dataset_label(ds, order[pos]);
            VilRng rng;
            /* keyed by the sample's global position, not by the rank */
            vil_rng_seed(&rng, vil_hash_seed(99, 4, (uint64_t)vil_sampler_global_position(&s, pos), 0));
            T_CHECK(vil_dataset_read_bytes(ds, order[pos], &buf) == 0, "read");
            T_CHECK(vil_transform_train_file(buf.data, buf.size, &c.train, &rng, ref) == 0,
                    "transform");
            same &= memcmp(ref, b->images + (size_t)j * 3 * 32 * 32, 3 * 32 * 32 * sizeof(float)) == 0;
            const float *t = b->targets + (size_t)j * 3;
            for (int q = 0; q < 3; q++)
                targets_ok &= fabsf(t[q] - (q == b->labels[j] ? 0.9f + 0.1f / 3 : 0.1f / 3)) < 1e-6f;
            checked++;
        }
        vil_loader_release_batch(l, b);
    }
    T_CHECK(checked >= 10 && same, "rows = transform(order[pos], rng(seed, epoch, global position)) (%d rows)", checked);
    T_CHECK(order_ok, "rank 1 reads the sampler's order");
    T_CHECK(targets_ok, "no mixing: smoothed one-hot targets");
    vil_buffer_free(&buf);
    free(ref);
    free(order);
    vil_loader_free(l);
}

static void test_bad_files(const VilDataset *ds, const char *root) {
    int bad_idx[4] = {-1, -1, -1, -1};
    char path[4096];
    for (int i = 0; i < vil_dataset_size(ds); i++) {
        vil_dataset_path(ds, i, path, sizeof path);
        for (int k = 0; k < 4; k++)
            if (strstr(path, k_bad[k])) bad_idx[k] = i;
    }
    T_CHECK(bad_idx[0] >= 0 && bad_idx[3] >= 0, "bad files are in the dataset");

    /* capture stderr to see each bad file reported once */
    char logp[8192];
    snprintf(logp, sizeof logp, "%s/stderr.txt", root);
    fflush(stderr);
    int saved = dup(2), fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
    VilLoader *l = make_loader(ds, VIL_LOADER_TRAIN, 3, 2, 1, 0);
    Run r1;
    int rc = l ? collect(l, 0, 2, &r1) : -1;
    VilLoaderStats st = {0};
    if (l) vil_loader_stats(l, &st);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    T_CHECK(rc == 0, "bad files never stop the epoch");
    if (rc != 0) {
        vil_loader_free(l);
        return;
    }
    /* every image is read once per epoch (repeats 1): 4 bad files, 2 epochs */
    T_CHECK(st.distinct_bad == 4, "4 distinct bad files: %ld", st.distinct_bad);
    T_CHECK(st.epoch_bad >= 4 && st.total_bad >= 8, "bad reads: epoch %ld total %ld", st.epoch_bad,
            st.total_bad);
    FILE *f = fopen(logp, "r");
    char *log = calloc(1, 1 << 16);
    size_t got = f ? fread(log, 1, (1 << 16) - 1, f) : 0;
    if (f) fclose(f);
    (void)got;
    for (int k = 0; k < 4; k++) {
        int count = 0;
        for (char *q = log; (q = strstr(q, k_bad[k])) != NULL; q++) count++;
        T_CHECK(count == 1, "'%s' reported %d times (want once)", k_bad[k], count);
    }
    T_CHECK(strstr(log, "epoch 0:") && strstr(log, "epoch 1:"), "per-epoch counts reported:\n%s", log);
    printf("stderr of the bad-file run:\n%s", log);
    free(log);

    /* each bad sample was replaced by a good one of its class (c1) */
    VilSampler s;
    vil_sampler_init_train(&s, vil_dataset_size(ds), 1, 0, 1, 1234);
    int order[64], replaced = 0, ok = 1;
    for (int e = 0; e < 2; e++) {
        vil_sampler_epoch(&s, e, order);
        for (int k = 0; k < 5; k++)
            for (int j = 0; j < 8; j++) {
                int pos = k * 8 + j, want = order[pos], got_i = r1.ind[e * 5 + k][j];
                int is_bad = 0;
                for (int q = 0; q < 4; q++) is_bad |= want == bad_idx[q];
                if (is_bad) {
                    replaced++;
                    ok &= got_i != want && vil_dataset_label(ds, got_i) == vil_dataset_label(ds, want);
                    for (int q = 0; q < 4; q++) ok &= got_i != bad_idx[q];
                } else {
                    ok &= got_i == want;
                }
            }
    }
    T_CHECK(replaced == 8 && ok, "bad samples replaced within their class (%d)", replaced);
    vil_loader_free(l);
    /* and the replacements are the same with another thread count */
    l = make_loader(ds, VIL_LOADER_TRAIN, 1, 3, 1, 1);
    Run r2;
    if (l && collect(l, 0, 2, &r2) == 0) {
        T_CHECK(runs_equal(&r1, &r2), "replacements independent of the thread count");
        run_free(&r2);
    }
    vil_loader_free(l);
    run_free(&r1);
}

/* evaluation never stands another image in for a bad one: its row is empty with label -1 */
static void test_eval_bad_files(const VilDataset *ds) {
    VilLoader *l = make_loader(ds, VIL_LOADER_EVAL, 2, 2, 1, 1);
    if (!l) return;
    int nb = vil_loader_start_epoch(l, 0), missing = 0, good = 0, wrong = 0;
    char path[4096];
    for (int k = 0; k < nb; k++) {
        const VilBatch *b = vil_loader_next_batch(l);
        if (!b) break;
        for (int j = 0; j < b->n; j++) {
            vil_dataset_path(ds, b->indices[j], path, sizeof path);
            int is_bad = 0;
            for (int q = 0; q < 4; q++) is_bad |= strstr(path, k_bad[q]) != NULL;
            if (is_bad) {
                missing += b->labels[j] == -1;
                wrong += b->labels[j] != -1;
            } else {
                good += b->labels[j] == vil_dataset_label(ds, b->indices[j]);
            }
        }
        vil_loader_release_batch(l, b);
    }
    T_CHECK(!vil_loader_error(l), "bad files do not stop an evaluation pass");
    T_CHECK(missing == 4 && wrong == 0 && good == 36,
            "eval mode: the 4 bad files come back unlabelled (%d, %d wrong), the 36 others as themselves (%d)",
            missing, wrong, good);
    vil_loader_free(l);
}

static void test_eval(const char *root) {
    VilDataset *ds = vil_dataset_open(root, "val", NULL);
    T_CHECK(ds != NULL, "val");
    if (!ds) return;
    VilLoader *l = make_loader(ds, VIL_LOADER_EVAL, 2, 2, 1, 1);
    if (!l) {
        vil_dataset_free(ds);
        return;
    }
    T_CHECK(vil_loader_batches_per_epoch(l) == 2, "10 images in batches of 8: %d batches",
            vil_loader_batches_per_epoch(l));
    Run r;
    T_CHECK(collect(l, 0, 1, &r) == 0 && r.nb == 2, "eval batches: %d", r.nb);
    if (r.nb == 2) {
        T_CHECK(r.b[0].n == 8 && r.b[1].n == 2, "last partial batch kept: n = %d, %d", r.b[0].n,
                r.b[1].n);
        int in_order = 1, pad = 1, onehot = 1, same = 1;
        float *ref = malloc((size_t)3 * 32 * 32 * sizeof(float));
        VilBuffer buf = {0};
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 8; j++) {
                int pos = k * 8 + j;
                if (j >= r.b[k].n) {
                    pad &= r.lab[k][j] == -1 && r.ind[k][j] == -1;
                    for (int q = 0; q < 3 * 32 * 32; q++) pad &= r.img[k][(size_t)j * 3 * 32 * 32 + q] == 0.0f;
                    for (int q = 0; q < 3; q++) pad &= r.tgt[k][j * 3 + q] == 0.0f;
                    continue;
                }
                in_order &= r.ind[k][j] == pos && r.lab[k][j] == vil_dataset_label(ds, pos);
                for (int q = 0; q < 3; q++) onehot &= r.tgt[k][j * 3 + q] == (q == r.lab[k][j] ? 1.0f : 0.0f);
                vil_dataset_read_bytes(ds, pos, &buf);
                vil_transform_eval_file(buf.data, buf.size, 32, 0.875f, 3, VIL_IMAGENET_MEAN,
                                        VIL_IMAGENET_STD, ref);
                same &= memcmp(ref, r.img[k] + (size_t)j * 3 * 32 * 32, 3 * 32 * 32 * sizeof(float)) == 0;
            }
        T_CHECK(in_order, "eval: dataset order, no shuffle");
        T_CHECK(pad, "eval: rows past n are zero, labels -1");
        T_CHECK(onehot, "eval: one-hot targets");
        T_CHECK(same, "eval: rows = vil_transform_eval_file");
        vil_buffer_free(&buf);
        free(ref);
    }
    run_free(&r);
    vil_loader_free(l);
    vil_dataset_free(ds);
}

typedef struct {
    int allocs, frees;
    void *blocks[16];
    size_t sizes[16];
} Counting;

static void *count_alloc(size_t n, void *ctx) {
    Counting *c = ctx;
    void *p = malloc(n);
    if (c->allocs < 16) {
        c->blocks[c->allocs] = p;
        c->sizes[c->allocs] = n;
    }
    c->allocs++;
    return p;
}

static void count_free(void *p, void *ctx) {
    ((Counting *)ctx)->frees++;
    free(p);
}

static void test_allocator_and_misuse(const VilDataset *ds) {
    Counting cnt = {0};
    VilLoaderConfig c;
    vil_loader_config_default(&c, VIL_LOADER_TRAIN, 32, 3, 8, vil_dataset_num_classes(ds));
    c.threads = 2;
    c.prefetch = 1;
    c.quiet = 1;
    c.alloc.alloc = count_alloc;
    c.alloc.free = count_free;
    c.alloc.ctx = &cnt;
    VilLoader *l = vil_loader_create(ds, &c);
    T_CHECK(l != NULL, "loader");
    if (!l) return;
    T_CHECK(cnt.allocs == 2, "one allocation per ring slot: %d", cnt.allocs);
    vil_loader_start_epoch(l, 0);
    const VilBatch *a = vil_loader_next_batch(l), *b = vil_loader_next_batch(l);
    int inside = a && b;
    for (int k = 0; k < 2 && inside; k++) {
        const VilBatch *x = k ? b : a;
        int found = 0;
        for (int q = 0; q < cnt.allocs; q++) {
            char *lo = cnt.blocks[q], *hi = lo + cnt.sizes[q];
            found |= (char *)x->images >= lo && (char *)(x->indices + x->batch) <= hi &&
                     (char *)x->targets >= lo && (char *)x->labels >= lo;
        }
        inside &= found;
    }
    T_CHECK(inside, "batches live in the hook's memory");
    /* holding every slot: an error, not a deadlock */
    const VilBatch *c3 = vil_loader_next_batch(l);
    T_CHECK(c3 == NULL && vil_loader_error(l) && strstr(vil_loader_error(l), "holds"),
            "holding every slot is reported: %s", vil_loader_error(l) ? vil_loader_error(l) : "-");
    vil_loader_free(l);
    T_CHECK(cnt.frees == cnt.allocs, "every slot freed through the hook");

    VilLoaderConfig bad = c;
    bad.rank = 3;
    VilErrCapture cap;
    vil_error_capture(&cap);
    VilLoader *lb = vil_loader_create(ds, &bad);
    vil_error_release(&cap);
    T_CHECK(lb == NULL && strstr(cap.msg, "rank"), "bad rank rejected: %s", cap.msg);
    bad = c;
    bad.mixup.num_classes = 7;
    vil_error_capture(&cap);
    lb = vil_loader_create(ds, &bad);
    vil_error_release(&cap);
    T_CHECK(lb == NULL && cap.count == 1, "class count mismatch");
}

static void test_idx_loader(const char *root) {
    char p[8192];
    snprintf(p, sizeof p, "%s/idx", root);
    VilDataset *ds = vil_dataset_open(p, "train", NULL);
    T_CHECK(ds != NULL, "idx");
    if (!ds) return;
    for (int ch = 1; ch <= 3; ch += 2) {
        Run r[2];
        for (int t = 0; t < 2; t++) {
            VilLoaderConfig c;
            vil_loader_config_default(&c, VIL_LOADER_TRAIN, 28, ch, 8, 10);
            c.threads = t ? 3 : 1;
            c.quiet = 1;
            VilLoader *l = vil_loader_create(ds, &c);
            T_CHECK(l != NULL, "idx loader");
            if (!l) return;
            T_CHECK(collect(l, 0, 1, &r[t]) == 0 && r[t].nb == 5, "idx batches %d", r[t].nb);
            vil_loader_free(l);
        }
        T_CHECK(runs_equal(&r[0], &r[1]), "idx (%d channels): same batches with 1 and 3 threads", ch);
        T_CHECK(r[0].b[0].channels == ch && r[0].b[0].res == 28 && r[0].b[0].num_classes == 10,
                "idx batch shape");
        run_free(&r[0]);
        run_free(&r[1]);
    }
    /* eval on IDX */
    VilLoaderConfig c;
    vil_loader_config_default(&c, VIL_LOADER_EVAL, 28, 1, 16, 10);
    c.crop_pct = 1.0f;
    c.quiet = 1;
    VilLoader *l = vil_loader_create(ds, &c);
    Run r;
    if (l && collect(l, 0, 1, &r) == 0) {
        T_CHECK(r.nb == 3 && r.b[2].n == 8, "idx eval: 40 in batches of 16");
        run_free(&r);
    }
    vil_loader_free(l);
    vil_dataset_free(ds);
}

int main(void) {
    test_sampler();
    test_sampler_slices();
    char *root = corpus_mkdtemp("loader");
    write_corpus(root);
    VilDataset *ds = vil_dataset_open(root, "train", NULL);
    T_CHECK(ds != NULL, "train corpus");
    if (ds) {
        T_CHECK(vil_dataset_size(ds) == 40, "40 train files");
        test_determinism(ds);
        test_contract(ds);
        test_bad_files(ds, root);
        test_eval_bad_files(ds);
        test_allocator_and_misuse(ds);
        vil_dataset_free(ds);
    }
    test_eval(root);
    test_idx_loader(root);
    corpus_rmtree(root);
    free(root);
    return t_finish();
}
