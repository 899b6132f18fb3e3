/* test_checkpoint.c: checkpoints and the command line. Save/load round trips (exact), a
 * tensors-only file whose architecture is inferred from shapes, every broken-file case as a
 * clear error; then the `vil` program itself: classify (text and --json, logits checked against
 * the model run directly on the same transform), a missing image, info, and bad usage (exit 2). */
#include <cJSON.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "data/image.h"
#include "data/transform.h"
#include "data_corpus.h"
#include "limited.h"
#include "model_testing.h"
#include "testing.h"
#include "formats/checkpoint.h"
#include "vil/common.h"
#include "formats/safetensors.h"

static char *dir;

/* where tensor i starts in the packed form (vil_model_pack) */
static size_t packed_at(const VilModel *m, int i) {
    size_t at = 0;
    for (int k = 0; k < i; k++) at += m->info[k].numel;
    return at;
}

static void small(VilConfig *c, const char *arch, int chans) {
    vil_config_default(c);
    strcpy(c->arch, arch);
    strcpy(c->name, "tiny_test");
    c->img_size = 16;
    c->patch_size = 4;
    c->stride = 4;
    c->in_chans = chans;
    c->embed_dim = 8;
    c->depth = 2;
    c->d_state = 4;
    c->num_classes = 3;
    vil_config_finalize(c);
}

static char *path(const char *name) {
    static char buf[8][1024];
    static int k = 0;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static int same_params(VilModel *a, VilModel *b) {
    if (a->buf_len != b->buf_len) return 0;
    float *x = vil_malloc(a->buf_len * 4), *y = vil_malloc(b->buf_len * 4);
    vil_model_get_params(a, x);
    vil_model_get_params(b, y);
    int same = memcmp(x, y, a->buf_len * 4) == 0;
    free(x);
    free(y);
    return same;
}


static void test_roundtrip(const char *arch) {
    VilConfig c;
    small(&c, arch, 3);
    VilModel m, r;
    vil_model_init(&m, &c, &vil_backend_cpu);
    vil_model_init_weights(&m, 11);
    char *names[3] = {"cat", "dog, large", "\"quoted\" name"};
    const char *f = path("rt.safetensors");
    T_CHECK(vil_checkpoint_save(&m, f, 1234, names, 3, NULL) == 0, "save");
    VilCheckpointMeta meta;
    T_CHECK(vil_checkpoint_load(f, &vil_backend_cpu, NULL, &r, &meta) == 0, "load");
    T_CHECK(same_params(&m, &r), "%s: parameters differ after a round trip", arch);
    T_CHECK(meta.step == 1234 && meta.img_size == 16 && !meta.config_inferred, "metadata");
    T_CHECK(meta.class_names && strcmp(meta.class_names[2], "\"quoted\" name") == 0, "class names");
    T_CHECK(memcmp(&r.cfg, &m.cfg, sizeof c) == 0, "%s: config differs after a round trip", arch);
    /* every key of doc/models.md, in order */
    VilSafetensors st;
    T_CHECK(vil_st_read(f, &st) == 0, "raw read");
    T_CHECK(st.n_tensors == m.n_tensors, "tensor count");
    int order = 1;
    for (int i = 0; i < st.n_tensors && i < m.n_tensors; i++) order &= strcmp(st.tensors[i].name, m.info[i].name) == 0;
    T_CHECK(order, "tensor order is the state_dict order");
    T_CHECK(vil_st_find(&st, "layers.1.mixer.x_proj_b.weight") != NULL, "ViM key names");
    T_CHECK((vil_st_find(&st, "layers.0.mixer.A_log") != NULL) == (strcmp(arch, "vim") == 0), "A_log only for ViM");
    T_CHECK(vil_st_meta(&st, "format") && strcmp(vil_st_meta(&st, "format"), "pt") == 0, "format=pt");
    vil_st_free(&st);
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&r);

    /* a tensors-only file (as exported from PyTorch): the architecture comes from the shapes */
    const char *g = path("bare.safetensors");
    T_CHECK(t_save_bare(&m, g) == 0, "save bare");
    T_CHECK(vil_checkpoint_load(g, &vil_backend_cpu, &(VilCheckpointOpts){.img_size = 16}, &r, &meta) == 0, "load bare");
    T_CHECK(meta.config_inferred, "inferred flag");
    int cfg_same = r.cfg.embed_dim == c.embed_dim && r.cfg.depth == c.depth && r.cfg.d_state == c.d_state &&
                   r.cfg.dt_rank == c.dt_rank && r.cfg.d_inner == c.d_inner && r.cfg.stride == c.stride &&
                   r.cfg.num_classes == c.num_classes && r.cfg.rec == c.rec && r.cfg.in_chans == 3;
    T_CHECK(cfg_same, "%s: inferred architecture differs", arch);
    T_CHECK(same_params(&m, &r), "bare: parameters differ");
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&r);
    /* a bare file at the wrong image size: the grid does not fit */
    T_CHECK(vil_checkpoint_load(g, &vil_backend_cpu, &(VilCheckpointOpts){.img_size = 17}, &r, &meta) != 0, "bare file at a size the grid does not fit must fail");
    /* a bare file at another size: its training size follows from the 4 x 4 grid and patch 4
     * (16 px); the model is the one the file with vil's metadata gives at that size */
    for (int img = 0; img <= 32; img += 4) {
        if (img && img != 28 && img != 32) continue;
        VilModel ref;
        VilCheckpointMeta rm;
        int ok = vil_checkpoint_load(g, &vil_backend_cpu, &(VilCheckpointOpts){.img_size = img}, &r, &meta) == 0;
        T_CHECK(ok, "%s: bare file at --img-size %d (trained at 16 px) loads", arch, img);
        if (!ok) continue;
        T_CHECK(vil_checkpoint_load(f, &vil_backend_cpu, &(VilCheckpointOpts){.img_size = img}, &ref, &rm) == 0, "reference at %d", img);
        T_CHECK(r.cfg.img_size == (img ? img : 16) && r.cfg.stride == 4 && r.cfg.grid == ref.cfg.grid &&
                    meta.trained_grid == rm.trained_grid && same_params(&r, &ref),
                "%s: bare file at %d px: img %d stride %d grid %d, pos from %d grid, as the file with metadata",
                arch, img, r.cfg.img_size, r.cfg.stride, r.cfg.grid, meta.trained_grid);
        vil_checkpoint_meta_free(&rm);
        vil_model_free(&ref);
        vil_checkpoint_meta_free(&meta);
        vil_model_free(&r);
    }
    vil_model_free(&m);
}

static void test_broken(void) {
    VilConfig c;
    small(&c, "vil", 3);
    VilModel m, r;
    VilCheckpointMeta meta;
    vil_model_init(&m, &c, &vil_backend_cpu);
    vil_model_init_weights(&m, 1);
    const char *f = path("ok.safetensors");
    vil_checkpoint_save(&m, f, 0, NULL, 0, NULL);
    size_t n;
    unsigned char *bytes = vil_read_file(f, &n);
    fprintf(stderr, "---- expected errors follow ----\n");
    /* missing */
    T_CHECK(vil_checkpoint_load(path("nope.safetensors"), &vil_backend_cpu, NULL, &r, &meta) != 0, "missing file");
    /* truncated, empty */
    corpus_write(path("trunc.safetensors"), bytes, n - 7);
    T_CHECK(vil_checkpoint_load(path("trunc.safetensors"), &vil_backend_cpu, NULL, &r, &meta) != 0, "truncated file");
    corpus_write(path("empty.safetensors"), bytes, 0);
    T_CHECK(vil_checkpoint_load(path("empty.safetensors"), &vil_backend_cpu, NULL, &r, &meta) != 0, "empty file");
    /* a tensor missing, a wrong shape, an extra tensor, NaN */
    float *host = vil_malloc(m.buf_len * 4);
    vil_model_get_params(&m, host);
    vil_model_pack(&m, host, host);
    for (int cse = 0; cse < 4; cse++) {
        VilStWriter *w = vil_st_writer_new();
        for (int i = 0; i < m.n_tensors; i++) {
            const VilParamInfo *p = &m.info[i];
            if (cse == 0 && strcmp(p->name, "layers.1.mixer.out_proj.weight") == 0) continue;
            int64_t shape[4];
            memcpy(shape, p->shape, sizeof shape);
            int nd = p->ndim;
            if (cse == 1 && strcmp(p->name, "layers.0.mixer.x_proj.weight") == 0) {
                /* same element count, transposed: only the shape check can catch it */
                shape[0] = p->shape[1], shape[1] = p->shape[0];
            }
            vil_st_writer_add(w, p->name, VIL_ST_F32, nd, shape, host + packed_at(&m, i));
        }
        if (cse == 2) {
            int64_t one = 1;
            vil_st_writer_add(w, "layers.0.mixer.A_log_extra", VIL_ST_F32, 1, &one, host);
        }
        float nan_host = NAN;
        if (cse == 3) host[packed_at(&m, 3)] = nan_host;
        char *cj = vil_config_to_json(&m.cfg);
        vil_st_writer_meta(w, "vil.config", cj);
        free(cj);
        const char *g = path("bad.safetensors");
        vil_st_writer_save(w, g);
        vil_st_writer_free(w);
        const char *what[4] = {"missing tensor", "transposed tensor", "unexpected tensor", "NaN parameter"};
        T_CHECK(vil_checkpoint_load(g, &vil_backend_cpu, NULL, &r, &meta) != 0, "%s must fail", what[cse]);
        if (cse == 3) vil_model_get_params(&m, host);
    }
    /* trained at 16, asked for 18: the grid cannot fit (stride 4) */
    T_CHECK(vil_checkpoint_load(f, &vil_backend_cpu, &(VilCheckpointOpts){.img_size = 18}, &r, &meta) != 0, "--img-size that does not fit the stride");
    fprintf(stderr, "---- end of expected errors ----\n");
    free(host);
    free(bytes);
    vil_model_free(&m);
}

/* the peak RSS of this process, to show a hostile file allocated nothing big */
static long peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024;
}

/* m's tensors (packed host copy) into a writer, with `drop` left out */
static VilStWriter *tensors_of(const VilModel *m, const float *packed, const char *drop) {
    VilStWriter *w = vil_st_writer_new();
    for (int i = 0; i < m->n_tensors; i++)
        if (!drop || strcmp(m->info[i].name, drop) != 0)
            vil_st_writer_add(w, m->info[i].name, VIL_ST_F32, m->info[i].ndim, m->info[i].shape, packed + packed_at(m, i));
    return w;
}

/* issue 13's crafted files, one per class: each must fail with a message, quickly, and without
 * allocating what the file claims */
static void test_hostile(void) {
    VilConfig c;
    small(&c, "vil", 3);
    VilModel m, r;
    VilCheckpointMeta meta;
    vil_model_init(&m, &c, &vil_backend_cpu);
    vil_model_init_weights(&m, 2);
    float *host = vil_malloc(m.buf_len * 4);
    vil_model_get_params(&m, host);
    vil_model_pack(&m, host, host);
    long rss0 = peak_rss_mb();
    fprintf(stderr, "---- expected errors follow ----\n");
    /* 1. no metadata, a zero-sized patch embedding: inference must not divide by it */
    VilStWriter *w = tensors_of(&m, host, "patch_embed.proj.weight");
    int64_t zero_shape[4] = {0, 1, 4, 4};
    vil_st_writer_add(w, "patch_embed.proj.weight", VIL_ST_F32, 4, zero_shape, host);
    vil_st_writer_save(w, path("zero.safetensors"));
    vil_st_writer_free(w);
    T_CHECK(vil_checkpoint_load(path("zero.safetensors"), &vil_backend_cpu, &(VilCheckpointOpts){.img_size = 16}, &r, &meta) != 0,
            "patch_embed.proj.weight [0, 1, 4, 4] without metadata is refused");
    /* 2a. one extra zero-byte tensor of layer 99999: depth 100000 inferred from one name */
    w = tensors_of(&m, host, NULL);
    int64_t none = 0;
    vil_st_writer_add(w, "layers.99999.mixer.D", VIL_ST_F32, 1, &none, host);
    vil_st_writer_save(w, path("deep.safetensors"));
    vil_st_writer_free(w);
    double t0 = vil_now();
    T_CHECK(vil_checkpoint_load(path("deep.safetensors"), &vil_backend_cpu, &(VilCheckpointOpts){.img_size = 16}, &r, &meta) != 0 &&
                vil_now() - t0 < 2.0, "a stray layers.99999 tensor is refused at once (%.2f s)", vil_now() - t0);
    /* 2b. metadata configs the tensors do not back up: 10,000,000 classes; sizes of 1e9; a
     * depth of 500 with the tensors of 2 layers */
    const char *keys[] = {"num_classes", "embed_dim", "img_size", "depth", "depth", "name"};
    const char *vals[] = {"10000000", "1000000000", "1000000000", "500", "6.7",
                          "a_name_of_more_than_sixty_three_characters_xxxxxxxxxxxxxxxxxxxxxxxxxxxx"};
    for (int k = 0; k < 6; k++) {
        w = tensors_of(&m, host, NULL);
        char *cj = vil_config_to_json(&m.cfg);
        cJSON *o = cJSON_Parse(cj);
        cJSON_DeleteItemFromObject(o, keys[k]);
        if (k == 5) cJSON_AddStringToObject(o, keys[k], vals[k]);
        else cJSON_AddRawToObject(o, keys[k], vals[k]);
        char *mod = cJSON_PrintUnformatted(o);
        vil_st_writer_meta(w, "vil.config", mod);
        vil_st_writer_save(w, path("meta.safetensors"));
        vil_st_writer_free(w);
        T_CHECK(vil_checkpoint_load(path("meta.safetensors"), &vil_backend_cpu, NULL, &r, &meta) != 0,
                "metadata %s = %s is refused", keys[k], vals[k]);
        cJSON_free(mod);
        cJSON_Delete(o);
        free(cj);
    }
    long grown = peak_rss_mb() - rss0;
    T_CHECK(grown < 200, "no hostile file made a large allocation (peak RSS grew %ld MB)", grown);
    /* 13. a training state file is named as one */
    w = vil_st_writer_new();
    int64_t one = 1;
    vil_st_writer_add(w, "params", VIL_ST_F32, 1, &one, host);
    vil_st_writer_meta(w, "vil.format", "vil-train-state");
    vil_st_writer_save(w, path("last.state.safetensors"));
    vil_st_writer_free(w);
    char cmd[2400], out[8192];
    snprintf(cmd, sizeof cmd, "bin/vil info --model %s 2>&1", path("last.state.safetensors"));
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "is a training state") && !strstr(out, "is missing"),
            "info on a state file says what it is (exit %d): %s", rc, out);
    /* 10. untrusted names are escaped on the terminal */
    char *names[3] = {"plain", "esc\x1b[31mred", "bell\a"};
    vil_checkpoint_save(&m, path("names.safetensors"), 0, names, 3, NULL);
    snprintf(cmd, sizeof cmd, "bin/vil info --model %s 2>&1", path("names.safetensors"));
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && !strchr(out, 0x1b) && !strchr(out, 0x07) && strstr(out, "esc\\x1b[31mred"),
            "class names with escape sequences print escaped: %s", out);
    fprintf(stderr, "---- end of expected errors ----\n");
    free(host);
    vil_model_free(&m);
}

/* 11. the evaluation transform travels with the checkpoint */
static void test_eval_spec(void) {
    VilConfig c;
    small(&c, "vil", 1);
    VilModel m, r;
    VilCheckpointMeta meta;
    vil_model_init(&m, &c, &vil_backend_cpu);
    vil_model_init_weights(&m, 3);
    VilEvalSpec ev = {.crop_pct = 1.0f, .has_norm = 1, .mean = {0.286f}, .std = {0.353f}};
    vil_checkpoint_save(&m, path("ev.safetensors"), 0, NULL, 0, &ev);
    T_CHECK(vil_checkpoint_load(path("ev.safetensors"), &vil_backend_cpu, NULL, &r, &meta) == 0 &&
                meta.eval.crop_pct == 1.0f && meta.eval.has_norm && meta.eval.mean[0] == 0.286f &&
                meta.eval.std[0] == 0.353f && strcmp(meta.eval_from, "the checkpoint") == 0,
            "crop_pct and normalization read back (crop %g, mean %g, std %g)", meta.eval.crop_pct,
            meta.eval.mean[0], meta.eval.std[0]);
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&r);
    VilStWriter *w;
    size_t n;
    VilSafetensors st;
    T_CHECK(vil_st_read(path("ev.safetensors"), &st) == 0 &&
                strcmp(vil_st_meta(&st, "vil.eval"), "{\"crop_pct\":1,\"resize\":\"bicubic\",\"mean\":[0.286],\"std\":[0.353]}") == 0,
            "vil.eval holds clean numbers: %s", vil_st_meta(&st, "vil.eval"));
    /* a bad one is an error, not a silent default */
    float *host = vil_malloc(m.buf_len * 4);
    vil_model_get_params(&m, host);
    vil_model_pack(&m, host, host);
    w = tensors_of(&m, host, NULL);
    char *cj = vil_config_to_json(&m.cfg);
    vil_st_writer_meta(w, "vil.config", cj);
    vil_st_writer_meta(w, "vil.eval", "{\"crop_pct\": 7}");
    vil_st_writer_save(w, path("ev_bad.safetensors"));
    vil_st_writer_free(w);
    fprintf(stderr, "---- expected errors follow ----\n");
    T_CHECK(vil_checkpoint_load(path("ev_bad.safetensors"), &vil_backend_cpu, NULL, &r, &meta) != 0, "crop_pct 7 is refused");
    fprintf(stderr, "---- end of expected errors ----\n");
    (void)n;
    free(cj);
    free(host);
    vil_st_free(&st);
    vil_model_free(&m);
}

/* issue 30: bad metadata after the class names are read frees them (LeakSanitizer in
 * test-asan; here the heap's allocated bytes); an int key of 1e300 in vil.config is refused by
 * name (the cast came before the range check: UBSan); a FIFO is refused at once */
static int do_load_refused(void *a) {
    VilModel m;
    VilCheckpointMeta meta;
    if (vil_checkpoint_load((const char *)a, &vil_backend_cpu, NULL, &m, &meta) != 0) return 0;
    vil_model_free(&m);
    vil_checkpoint_meta_free(&meta);
    return 3;
}

static void test_bad_metadata(void) {
    VilConfig c;
    small(&c, "vil", 3);
    VilModel m, r;
    VilCheckpointMeta meta;
    vil_model_init(&m, &c, &vil_backend_cpu);
    vil_model_init_weights(&m, 5);
    float *host = vil_malloc(m.buf_len * 4);
    vil_model_get_params(&m, host);
    vil_model_pack(&m, host, host);
    char *cj = vil_config_to_json(&m.cfg);
    VilErrCapture cap;
    fprintf(stderr, "---- expected errors follow ----\n");
    const char *evals[] = {"{\"crop_pct\":0}", "{\"crop_pct\":0.9,\"mean\":[0.5],\"std\":[0.5]}",
                           "[]", "not json"};
    for (int k = 0; k < 4; k++) {
        VilStWriter *w = tensors_of(&m, host, NULL);
        vil_st_writer_meta(w, "vil.config", cj);
        vil_st_writer_meta(w, "vil.class_names", "[\"a\",\"b\",\"c\"]");
        vil_st_writer_meta(w, "vil.eval", evals[k]);
        vil_st_writer_save(w, path("ev_names.safetensors"));
        vil_st_writer_free(w);
        size_t before = 0, after = 0;
        int rc = 0;
        /* the first warms up what stays allocated; over 16 more loads the old leak (~256 bytes
         * of class names a load) grows the heap by ~4 KB, where other threads' bookkeeping
         * (OpenMP, OpenBLAS on a 16-core machine) moved it by a few hundred bytes once */
        for (int rep = 0; rep < 17; rep++) {
            if (rep == 1) before = mallinfo2().uordblks;
            vil_error_capture(&cap);
            rc = vil_checkpoint_load(path("ev_names.safetensors"), &vil_backend_cpu, NULL, &r, &meta);
            vil_error_release(&cap);
            if (rc == 0) {
                vil_model_free(&r);
                vil_checkpoint_meta_free(&meta);
            }
        }
        after = mallinfo2().uordblks;
        T_CHECK(rc != 0 && strstr(cap.msg, "metadata vil.eval is not") && meta.class_names == NULL &&
                    after < before + 1024,
                "vil.eval %s with class names: refused, nothing kept (heap %+ld bytes): %s", evals[k],
                (long)after - (long)before, cap.msg);
    }
    char cmd[2400], out[8192];
    snprintf(cmd, sizeof cmd, "bin/vil info --model %s 2>&1", path("ev_names.safetensors"));
    VilStWriter *w = tensors_of(&m, host, NULL);
    vil_st_writer_meta(w, "vil.config", cj);
    vil_st_writer_meta(w, "vil.class_names", "[\"a\",\"b\",\"c\"]");
    vil_st_writer_meta(w, "vil.eval", "{\"crop_pct\":0}");
    vil_st_writer_save(w, path("ev_names.safetensors"));
    vil_st_writer_free(w);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "vil.eval") && strstr(out, "ev_names.safetensors"),
            "vil info on vil.eval {\"crop_pct\":0}: exit %d: %s", rc, out);
    /* an int key far outside any range: refused by name, never cast */
    const char *vals[] = {"1e300", "-1e300", "1e15", "1e16", "9.3e18"};
    for (int k = 0; k < 5; k++) {
        cJSON *o = cJSON_Parse(cj);
        cJSON_DeleteItemFromObject(o, "depth");
        cJSON_AddRawToObject(o, "depth", vals[k]);
        char *mod = cJSON_PrintUnformatted(o);
        w = tensors_of(&m, host, NULL);
        vil_st_writer_meta(w, "vil.config", mod);
        vil_st_writer_save(w, path("big_int.safetensors"));
        vil_st_writer_free(w);
        vil_error_capture(&cap);
        rc = vil_checkpoint_load(path("big_int.safetensors"), &vil_backend_cpu, NULL, &r, &meta);
        vil_error_release(&cap);
        if (rc == 0) {
            vil_model_free(&r);
            vil_checkpoint_meta_free(&meta);
        }
        T_CHECK(rc != 0 && strstr(cap.msg, "depth") && strstr(cap.msg, "big_int.safetensors"),
                "vil.config depth = %s refused by name: %s", vals[k], cap.msg);
        cJSON_free(mod);
        cJSON_Delete(o);
    }
    fprintf(stderr, "---- end of expected errors ----\n");
    /* a FIFO names the file and fails at once (it used to wait for a writer forever) */
    const char *fifo = path("model.fifo");
    T_CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    snprintf(cmd, sizeof cmd, "timeout 20 bin/vil info --model %s 2>&1", fifo);
    double t0 = vil_now();
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, fifo) && strstr(out, "not a regular file") && vil_now() - t0 < 10,
            "vil info --model FIFO: exit %d in %.2f s: %s", rc, vil_now() - t0, out);
    char msg[1024];
    rc = t_limited(do_load_refused, (void *)fifo, 4096, 10, msg, sizeof msg);
    T_CHECK(rc == 0 && strstr(msg, fifo) && t_count(msg, fifo) == 1, "load of a FIFO (under alarm, child %d): %s", rc, msg);
    unlink(fifo);
    free(cj);
    free(host);
    vil_model_free(&m);
}

/* torch's bicubic (A = -0.75, align_corners=False, clamped taps), written directly in 2-D */
static double cubic(double x) {
    const double A = -0.75;
    x = fabs(x);
    if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
    if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    return 0;
}
static void test_pos_resize(void) {
    int G = 4, G2 = 7, D = 3;
    VilRng r;
    vil_rng_seed(&r, 3);
    float *src = vil_malloc(((size_t)G * G + 1) * D * 4), *dst = vil_malloc(((size_t)G2 * G2 + 1) * D * 4);
    for (int i = 0; i < (G * G + 1) * D; i++) src[i] = vil_rng_normal(&r);
    vil_pos_embed_resize(dst, src, G, G2, D);
    double e = 0;
    int t = G * G / 2, t2 = G2 * G2 / 2;
    for (int y = 0; y < G2; y++)
        for (int x = 0; x < G2; x++)
            for (int d = 0; d < D; d++) {
                double sy = (y + 0.5) * G / G2 - 0.5, sx = (x + 0.5) * G / G2 - 0.5, acc = 0;
                for (int iy = (int)floor(sy) - 1; iy <= (int)floor(sy) + 2; iy++)
                    for (int ix = (int)floor(sx) - 1; ix <= (int)floor(sx) + 2; ix++) {
                        int cy = iy < 0 ? 0 : iy >= G ? G - 1 : iy, cx = ix < 0 ? 0 : ix >= G ? G - 1 : ix;
                        int p = cy * G + cx;
                        acc += cubic(sy - iy) * cubic(sx - ix) * src[(size_t)(p < t ? p : p + 1) * D + d];
                    }
                int q = y * G2 + x;
                e = fmax(e, fabs(acc - dst[(size_t)(q < t2 ? q : q + 1) * D + d]));
            }
    T_CLOSE("pos_embed bicubic resize 4x4 -> 7x7 vs direct 2-D formula", e, 1e-5);
    double ec = 0;
    for (int d = 0; d < D; d++) ec = fmax(ec, fabs(dst[(size_t)t2 * D + d] - src[(size_t)t * D + d]));
    T_CLOSE("pos_embed resize keeps the class-token row", ec, 0);
    float *same = vil_malloc(((size_t)G * G + 1) * D * 4);
    vil_pos_embed_resize(same, src, G, G, D);
    double ei = 0;
    for (int i = 0; i < (G * G + 1) * D; i++) ei = fmax(ei, fabs(same[i] - src[i]));
    T_CLOSE("pos_embed resize to the same grid is the identity", ei, 1e-6);
    free(same), free(src), free(dst);

    /* a checkpoint trained at 16 evaluated at 28: grid 4 -> 7 */
    VilConfig c;
    small(&c, "vil", 3);
    VilModel m, r2;
    vil_model_init(&m, &c, &vil_backend_cpu);
    vil_model_init_weights(&m, 2);
    const char *f = path("res.safetensors");
    vil_checkpoint_save(&m, f, 0, NULL, 0, NULL);
    VilCheckpointMeta meta;
    T_CHECK(vil_checkpoint_load(f, &vil_backend_cpu, &(VilCheckpointOpts){.img_size = 28}, &r2, &meta) == 0, "load at 28");
    T_CHECK(r2.cfg.img_size == 28 && r2.cfg.grid == 7 && r2.cfg.seq_len == 50 && meta.trained_grid == 4,
            "evaluating at 28: grid %d, L %d", r2.cfg.grid, r2.cfg.seq_len);
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&r2);
    vil_model_free(&m);
}

/* pos_embed's patch rows as a G x G grid of D-vectors, the class row (G*G/2) left out: the
 * expectation below is built on this, not on the library's row arithmetic */
static float *grid_of_rows(const float *pe, int G, int D) {
    float *g = vil_malloc((size_t)G * G * D * 4), *w = g;
    for (int row = 0; row <= G * G; row++) {
        if (row == G * G / 2) continue; /* the class token */
        memcpy(w, pe + (size_t)row * D, (size_t)D * 4);
        w += D;
    }
    return g;
}

/* vil_pos_embed_keep against a hand-built expectation: the new grid's patch (i, j) holds the
 * trained patch (ti, tj) of want_src; 0 when every patch and the class row are as expected */
static int keep_matches(const float *dst, const float *src, int G, int G2, int D, void (*want_src)(int, int, int, int, int *, int *)) {
    float *got = grid_of_rows(dst, G2, D), *old = grid_of_rows(src, G, D);
    int bad = 0;
    for (int i = 0; i < G2; i++)
        for (int j = 0; j < G2; j++) {
            int ti, tj;
            want_src(G, G2, i, j, &ti, &tj);
            bad += memcmp(got + ((size_t)i * G2 + j) * D, old + ((size_t)ti * G + tj) * D, (size_t)D * 4) != 0;
        }
    bad += memcmp(dst + (size_t)(G2 * G2 / 2) * D, src + (size_t)(G * G / 2) * D, (size_t)D * 4) != 0;
    free(got), free(old);
    return bad;
}
static int clampi(int v, int hi) { return v < 0 ? 0 : v > hi ? hi : v; }
/* keep: the trained grid at the top-left, its last row and column repeated past it */
static void src_keep(int G, int G2, int i, int j, int *ti, int *tj) {
    *ti = i < G ? i : G - 1, *tj = j < G ? j : G - 1;
}
/* center: as many new rows above the trained grid as below (the odd one below); a smaller grid
 * is the middle of the trained one (the odd row cut below) */
static void src_center(int G, int G2, int i, int j, int *ti, int *tj) {
    int above = G2 >= G ? (G2 - G) / 2 : -((G - G2) / 2);
    *ti = clampi(i - above, G - 1), *tj = clampi(j - above, G - 1);
}

static void test_pos_keep(void) {
    int D = 3;
    VilRng r;
    vil_rng_seed(&r, 5);
    const struct {
        int G, G2;
    } sizes[] = {{4, 7}, {4, 8}, {7, 4}, {7, 3}, {5, 5}, {3, 14}, {1, 3}};
    for (int k = 0; k < (int)(sizeof sizes / sizeof sizes[0]); k++) {
        int G = sizes[k].G, G2 = sizes[k].G2;
        float *src = vil_malloc(((size_t)G * G + 1) * D * 4), *dst = vil_malloc(((size_t)G2 * G2 + 1) * D * 4);
        for (int i = 0; i < (G * G + 1) * D; i++) src[i] = vil_rng_normal(&r);
        vil_pos_embed_keep(dst, src, G, G2, D, VIL_POS_KEEP);
        T_CHECK(keep_matches(dst, src, G, G2, D, src_keep) == 0, "pos keep %dx%d -> %dx%d: %s, the class row kept", G, G,
                G2, G2, G2 > G ? "top-left, edges extended" : G2 < G ? "the top-left crop" : "the identity");
        vil_pos_embed_keep(dst, src, G, G2, D, VIL_POS_CENTER);
        T_CHECK(keep_matches(dst, src, G, G2, D, src_center) == 0, "pos center %dx%d -> %dx%d: %s, the class row kept", G,
                G, G2, G2, G2 > G ? "centred, edges extended" : G2 < G ? "the centre crop" : "the identity");
        if (G2 == G) {
            T_CHECK(memcmp(dst, src, ((size_t)G * G + 1) * D * 4) == 0, "pos keep onto the same grid: the same bytes");
        }
        free(src), free(dst);
    }
    /* a few entries by hand, 2 x 2 -> 3 x 3 with D = 1: src rows [a b | cls | c d] (class row 2)
     * keep:   a b b / c d d / c d d, class row 9/2 = 4 -> [a b b c | cls | d d c d d]
     * center (o = 0 for 3 - 2 = 1): the same as keep */
    float s[5] = {1, 2, 99, 3, 4}, d[10], want[10] = {1, 2, 2, 3, 99, 4, 4, 3, 4, 4};
    vil_pos_embed_keep(d, s, 2, 3, 1, VIL_POS_KEEP);
    T_CHECK(memcmp(d, want, sizeof d) == 0, "pos keep 2x2 -> 3x3 by hand: %g %g %g %g %g %g %g %g %g %g", d[0], d[1], d[2],
            d[3], d[4], d[5], d[6], d[7], d[8], d[9]);
    /* 2 x 2 -> 4 x 4 centred (o = 1): every patch of the outer ring takes its nearest corner;
     * row 0 = a a b b, row 1 = a a b b, row 2 = c c d d, row 3 = c c d d; class row 8 */
    float d4[17], want4[17] = {1, 1, 2, 2, 1, 1, 2, 2, 99, 3, 3, 4, 4, 3, 3, 4, 4};
    vil_pos_embed_keep(d4, s, 2, 4, 1, VIL_POS_CENTER);
    T_CHECK(memcmp(d4, want4, sizeof d4) == 0, "pos center 2x2 -> 4x4 by hand");

    /* the load: a checkpoint trained at 16 (grid 4) evaluated at 28 (grid 7) with keep */
    VilConfig c;
    small(&c, "vim", 3);
    VilModel m, k2, i2;
    vil_model_init(&m, &c, &vil_backend_cpu);
    vil_model_init_weights(&m, 4);
    const char *f = path("keep.safetensors");
    vil_checkpoint_save(&m, f, 0, NULL, 0, NULL);
    VilCheckpointMeta mk, mi;
    T_CHECK(vil_checkpoint_load(f, &vil_backend_cpu, &(VilCheckpointOpts){.img_size = 28, .pos = VIL_POS_KEEP}, &k2, &mk) == 0 &&
                vil_checkpoint_load(f, &vil_backend_cpu, &(VilCheckpointOpts){.img_size = 28}, &i2, &mi) == 0,
            "load at 28 with keep and with interp");
    T_CHECK(mk.trained_grid == 4 && mk.pos_mode == VIL_POS_KEEP && mi.pos_mode == VIL_POS_INTERP && k2.cfg.grid == 7,
            "meta says the mode and the trained grid (%d, mode %d)", mk.trained_grid, (int)mk.pos_mode);
    float *pm = vil_malloc(m.buf_len * 4), *pk = vil_malloc(k2.buf_len * 4), *pi = vil_malloc(i2.buf_len * 4);
    vil_model_get_params(&m, pm), vil_model_get_params(&k2, pk), vil_model_get_params(&i2, pi);
    const float *src = pm + vil_model_find_param(&m, "pos_embed")->offset;
    float *want_k = vil_malloc((size_t)50 * c.embed_dim * 4);
    vil_pos_embed_keep(want_k, src, 4, 7, c.embed_dim, VIL_POS_KEEP);
    size_t pos_k = vil_model_find_param(&k2, "pos_embed")->offset, pos_i = vil_model_find_param(&i2, "pos_embed")->offset;
    T_CHECK(memcmp(pk + pos_k, want_k, (size_t)50 * c.embed_dim * 4) == 0, "the loaded pos_embed is the kept grid");
    T_CHECK(keep_matches(pk + pos_k, src, 4, 7, c.embed_dim, src_keep) == 0, "... as built by hand");
    T_CHECK(memcmp(pk + pos_k, pi + pos_i, (size_t)50 * c.embed_dim * 4) != 0, "... and not the interpolated one");
    /* every other tensor as the interpolating load has it */
    int others = 1;
    for (int i = 0; i < k2.n_tensors; i++)
        if (strcmp(k2.info[i].name, "pos_embed") != 0)
            others &= memcmp(pk + k2.info[i].offset, pi + i2.info[i].offset, vil_param_extent(&k2.info[i]) * 4) == 0;
    T_CHECK(others, "every other tensor as the interpolating load's");
    free(pm), free(pk), free(pi), free(want_k);
    vil_checkpoint_meta_free(&mk), vil_checkpoint_meta_free(&mi);
    vil_model_free(&k2), vil_model_free(&i2);
    /* a mode that is none */
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_checkpoint_load(f, &vil_backend_cpu, &(VilCheckpointOpts){.img_size = 28, .pos = (VilPosMode)7}, &k2, &mk);
    vil_error_release(&cap);
    T_CHECK(rc == VIL_EUSAGE && strstr(cap.msg, "pos mode 7"), "pos mode 7 refused (%d): %s", rc, cap.msg);
    T_CHECK(vil_pos_mode_parse("keep") == VIL_POS_KEEP && vil_pos_mode_parse("center") == VIL_POS_CENTER &&
                vil_pos_mode_parse("interp") == VIL_POS_INTERP && vil_pos_mode_parse("Keep") == -1 &&
                strcmp(vil_pos_mode_name(VIL_POS_CENTER), "center") == 0 && !vil_pos_mode_name(3),
            "pos mode names");
    vil_model_free(&m);
}

/* A model trained without a position embedding (pos_embed = none): no pos_embed tensor, the
 * config says so, and another image size needs nothing moved */
static void test_no_pos_embed(void) {
    VilConfig c, with;
    small(&with, "vil", 3);
    c = with;
    T_CHECK(vil_config_set(&c, "pos_embed", "none") == 0 && vil_config_finalize(&c) == 0 &&
                c.pos_embed_kind == VIL_POS_EMBED_NONE, "pos_embed = none");
    size_t n0 = vil_model_count_params(&with), n1 = vil_model_count_params(&c);
    T_CHECK(n0 - n1 == (size_t)with.seq_len * with.embed_dim, "no pos_embed: %zu parameters fewer, want L*D = %d",
            n0 - n1, with.seq_len * with.embed_dim);
    VilModel m, r;
    vil_model_init(&m, &c, &vil_backend_cpu);
    vil_model_init_weights(&m, 8);
    T_CHECK(vil_model_find_param(&m, "pos_embed") == NULL && m.param_count == n1, "no pos_embed in the table");
    const char *f = path("nopos.safetensors");
    T_CHECK(vil_checkpoint_save(&m, f, 3, NULL, 0, NULL) == 0, "save");
    VilSafetensors st;
    T_CHECK(vil_st_read(f, &st) == 0, "raw read");
    const char *cj = vil_st_meta(&st, "vil.config");
    T_CHECK(!vil_st_find(&st, "pos_embed") && cj && strstr(cj, "\"pos_embed\":\"none\""),
            "the file holds no pos_embed and its vil.config says none: %s", cj ? cj : "(none)");
    vil_st_free(&st);
    VilCheckpointMeta meta;
    T_CHECK(vil_checkpoint_load(f, &vil_backend_cpu, NULL, &r, &meta) == 0 && r.cfg.pos_embed_kind == VIL_POS_EMBED_NONE &&
                same_params(&m, &r) && meta.trained_grid == 0,
            "load back: no pos_embed, the same parameters");
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&r);
    /* another size: nothing to move, every tensor the same; the trained grid still said */
    for (int mode = 0; mode < VIL_POS_MODE_COUNT; mode++) {
        int ok = vil_checkpoint_load(f, &vil_backend_cpu, &(VilCheckpointOpts){.img_size = 28, .pos = (VilPosMode)mode},
                                     &r, &meta) == 0;
        T_CHECK(ok && r.cfg.grid == 7 && meta.trained_grid == 4 && r.param_count == m.param_count &&
                    same_params(&m, &r), "no pos_embed at 28 px (--pos %s): grid 7, every tensor as trained",
                vil_pos_mode_name(mode));
        if (!ok) continue;
        vil_checkpoint_meta_free(&meta);
        vil_model_free(&r);
    }
    /* a bare state dict without pos_embed: none inferred, patches taken as not overlapping */
    const char *g = path("nopos_bare.safetensors");
    T_CHECK(t_save_bare(&m, g) == 0, "save bare");
    int ok = vil_checkpoint_load(g, &vil_backend_cpu, &(VilCheckpointOpts){.img_size = 16}, &r, &meta) == 0;
    T_CHECK(ok && meta.config_inferred && r.cfg.pos_embed_kind == VIL_POS_EMBED_NONE && r.cfg.stride == 4 &&
                r.cfg.img_size == 16 && same_params(&m, &r),
            "bare file without pos_embed: none inferred, stride = patch, the same parameters");
    if (ok) {
        vil_checkpoint_meta_free(&meta);
        vil_model_free(&r);
    }
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_checkpoint_load(g, &vil_backend_cpu, &(VilCheckpointOpts){.img_size = 18}, &r, &meta);
    vil_error_release(&cap);
    T_CHECK(rc != 0 && strstr(cap.msg, "no pos_embed") && strstr(cap.msg, "multiple of 4"),
            "bare file without pos_embed at 18 px: %s", cap.msg);
    /* fine-tuning a model with a pos_embed from one without, and back: refused by name */
    for (int k = 0; k < 2; k++) {
        VilModel into;
        vil_model_init(&into, k ? &c : &with, &vil_backend_cpu);
        vil_model_init_weights(&into, 1);
        const char *from = f;
        if (k) { /* a file of the model with one */
            VilModel w;
            vil_model_init(&w, &with, &vil_backend_cpu);
            vil_model_init_weights(&w, 2);
            from = path("withpos.safetensors");
            vil_checkpoint_save(&w, from, 0, NULL, 0, NULL);
            vil_model_free(&w);
        }
        vil_error_capture(&cap);
        rc = vil_checkpoint_init(&into, from, 0, &meta);
        vil_error_release(&cap);
        T_CHECK(rc != 0 && strstr(cap.msg, "pos_embed is"), "--init across pos_embed %s: %s", k ? "learned -> none" : "none -> learned",
                cap.msg);
        vil_model_free(&into);
    }
    vil_model_free(&m);
}

static void test_cli(void) {
    VilConfig c;
    small(&c, "vil", 3);
    VilModel m;
    vil_model_init(&m, &c, &vil_backend_cpu);
    vil_model_init_weights(&m, 5);
    char *names[3] = {"alpha", "beta", "gamma"};
    char ck[1024]; /* path() recycles its buffers */
    snprintf(ck, sizeof ck, "%s", path("cli.safetensors"));
    vil_checkpoint_save(&m, ck, 7, names, 3, NULL);
    /* images: a JPEG larger than the model, a PNG of exactly the model's size, a gray JPEG */
    char jpg[1024], png[1024], gray[1024];
    snprintf(jpg, sizeof jpg, "%s", path("a.jpg"));
    snprintf(png, sizeof png, "%s", path("b.JPEG"));
    snprintf(gray, sizeof gray, "%s", path("c.jpg"));
    corpus_write_jpeg(jpg, 40, 30, 3, 0, 1, 0);
    corpus_write_png(png, 16, 16, 1, 2);
    corpus_write_jpeg(gray, 20, 25, 1, 2, 3, 1);
    char cmd[8192], *out = vil_malloc(1 << 20);
    snprintf(cmd, sizeof cmd, "bin/vil classify --model %s --json --topk 2 --device cpu %s %s %s", ck, jpg, png, gray);
    int rc = t_run(cmd, out, 1 << 20);
    T_CHECK(rc == 0, "classify exit %d", rc);
    /* each line: logits equal to the model run on the same transform */
    const char *files[3] = {jpg, png, gray};
    float crops[3] = {0.875f, 0.875f, 0.875f};
    char *line = strtok(out, "\n");
    VilTrainTransform tt;
    vil_train_transform_default(&tt, 16, 3);
    T_CHECK(vil_model_alloc_acts(&m, 1, 0) == 0, "vil_model_alloc_acts(&m, 1, 0)");
    for (int i = 0; i < 3; i++) {
        T_CHECK(line != NULL, "missing JSON line %d", i);
        if (!line) break;
        cJSON *o = cJSON_Parse(line);
        T_CHECK(o && cJSON_IsObject(o), "line %d is not a JSON object: %s", i, line);
        if (!o) break;
        cJSON *f = cJSON_GetObjectItem(o, "file"), *lg = cJSON_GetObjectItem(o, "logits"), *tk = cJSON_GetObjectItem(o, "topk");
        T_CHECK(cJSON_IsString(f) && strcmp(f->valuestring, files[i]) == 0, "file field");
        T_CHECK(cJSON_IsArray(lg) && cJSON_GetArraySize(lg) == 3, "3 logits");
        T_CHECK(cJSON_IsArray(tk) && cJSON_GetArraySize(tk) == 2, "topk 2");
        VilImage im;
        vil_image_load(files[i], 3, &im);
        vil_transform_eval(&im, 16, crops[i], tt.mean, tt.std, m.acts.img);
        vil_image_free(&im);
        vil_model_forward(&m, 0);
        double e = 0, psum = 0;
        for (int k = 0; k < 3 && cJSON_IsArray(lg); k++) e = fmax(e, fabs(cJSON_GetArrayItem(lg, k)->valuedouble - m.acts.logits[k]));
        T_CLOSE("classify --json logits vs direct forward", e, 1e-5);
        cJSON *t0 = cJSON_GetArrayItem(tk, 0), *t1 = cJSON_GetArrayItem(tk, 1);
        if (t0 && t1) {
            psum = cJSON_GetObjectItem(t0, "prob")->valuedouble;
            T_CHECK(psum >= cJSON_GetObjectItem(t1, "prob")->valuedouble, "topk sorted");
            int idx = (int)cJSON_GetObjectItem(t0, "index")->valuedouble;
            T_CHECK(strcmp(cJSON_GetObjectItem(t0, "name")->valuestring, names[idx]) == 0, "topk name");
            int am = 0;
            for (int k = 1; k < 3; k++) if (m.acts.logits[k] > m.acts.logits[am]) am = k;
            T_CHECK(idx == am, "top-1 is the argmax of the logits");
        }
        cJSON_Delete(o);
        line = strtok(NULL, "\n");
    }
    /* crop-pct 1 on an image of the model's size takes it as it is */
    snprintf(cmd, sizeof cmd, "bin/vil classify --model %s --json --crop-pct 1 --device cpu %s", ck, png);
    rc = t_run(cmd, out, 1 << 20);
    {
        VilImage im;
        vil_image_load(png, 3, &im);
        vil_normalize_chw(m.acts.img, im.px, 16, 16, 3, tt.mean, tt.std);
        vil_image_free(&im);
        vil_model_forward(&m, 0);
        cJSON *o = cJSON_Parse(out);
        cJSON *lg = o ? cJSON_GetObjectItem(o, "logits") : NULL;
        double e = lg ? 0 : 1;
        for (int k = 0; k < 3 && lg; k++) e = fmax(e, fabs(cJSON_GetArrayItem(lg, k)->valuedouble - m.acts.logits[k]));
        T_CLOSE("classify --crop-pct 1 at the model's size: no resize", e, 1e-5);
        cJSON_Delete(o);
    }
    /* a missing and a broken image among good ones: reported, others classified, exit 1 */
    corpus_write_truncated(path("broken.jpg"), 30, 30, 100);
    snprintf(cmd, sizeof cmd, "bin/vil classify --model %s --device cpu %s %s %s 2>%s", ck, jpg,
             path("missing.jpg"), path("broken.jpg"), path("stderr.txt"));
    rc = t_run(cmd, out, 1 << 20);
    T_CHECK(rc == 1, "classify with a missing image: exit %d, want 1", rc);
    T_CHECK(strstr(out, jpg) != NULL && (strstr(out, "alpha") || strstr(out, "beta") || strstr(out, "gamma")), "the good image is still classified");
    size_t n;
    char *errtxt = (char *)vil_read_file(path("stderr.txt"), &n);
    T_CHECK(errtxt && strstr(errtxt, "missing.jpg") && strstr(errtxt, "broken.jpg"), "both bad images named on stderr");
    free(errtxt);
    /* info */
    snprintf(cmd, sizeof cmd, "bin/vil info --model %s", ck);
    rc = t_run(cmd, out, 1 << 20);
    char want[64];
    snprintf(want, sizeof want, "parameters:  %zu", m.param_count);
    T_CHECK(rc == 0 && strstr(out, want) && strstr(out, "alpha") && strstr(out, "step:        7"), "info output: %s", out);
    /* usage errors exit 2; help exits 0 */
    T_CHECK(t_run("bin/vil 2>/dev/null", NULL, 0) == 2, "no command: exit 2");
    T_CHECK(t_run("bin/vil frobnicate 2>/dev/null", NULL, 0) == 2, "unknown command: exit 2");
    T_CHECK(t_run("bin/vil classify --bogus 1 x.jpg 2>/dev/null", NULL, 0) == 2, "unknown flag: exit 2");
    T_CHECK(t_run("bin/vil classify --model x 2>/dev/null", NULL, 0) == 2, "no images: exit 2");
    T_CHECK(t_run("bin/vil classify --topk abc --model x y 2>/dev/null", NULL, 0) == 2, "bad number: exit 2");
    T_CHECK(t_run("bin/vil help >/dev/null", NULL, 0) == 0, "help: exit 0");
    T_CHECK(t_run("bin/vil classify --help >/dev/null", NULL, 0) == 0, "classify --help: exit 0");
    T_CHECK(t_run("bin/vil info --model /nonexistent.safetensors 2>/dev/null", NULL, 0) == 1, "missing checkpoint: exit 1");
    free(out);
    vil_model_free(&m);
}

int main(void) {
    dir = corpus_mkdtemp("ckpt");
    test_roundtrip("vil");
    test_roundtrip("vim");
    test_broken();
    test_hostile();
    test_eval_spec();
    test_bad_metadata();
    test_pos_resize();
    test_pos_keep();
    test_no_pos_embed();
    test_cli();
    corpus_rmtree(dir);
    return t_finish();
}
