#define _GNU_SOURCE
/* test_pth.c: PyTorch checkpoints. The restricted unpickler on hand-made pickles (every value
 * kind, and each refusal: a forbidden global, an opcode torch.save does not write, nesting,
 * memo abuse, a view past its storage, truncation); the zip side on archives written here with
 * libzip (a missing storage, a wrong entry size, a flipped byte, a big-endian file); then the
 * files of tests/data/pth, written by torch.save in the official ViM layout
 * (tests/reference/make_vim_pth.py): architecture, model / model_ema selection and logits
 * against float64 PyTorch, bare state dicts, fine-tuning init, and the `vil` commands (info,
 * classify, convert) with their exit codes. */
#include <cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>
#include <zlib.h>

#include "limited.h"
#include "testing.h"
#include "formats/checkpoint.h"
#include "vil/common.h"
#include "formats/pickle.h"
#include "formats/pth.h"
#include "formats/safetensors.h"

#define DATA "tests/data/pth/"
static char dir[] = "/tmp/vil_test_pth_XXXXXX";

static char *path(const char *name) {
    static char buf[8][1024];
    static int k = 0;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* ---------------- a pickle writer for hand-made pickles ---------------- */
typedef struct {
    unsigned char *b;
    size_t n, cap;
} Buf;

static void put(Buf *p, const void *x, size_t n) {
    if (p->n + n > p->cap) {
        p->cap = (p->n + n) * 2 + 64;
        p->b = vil_realloc(p->b, p->cap);
    }
    memcpy(p->b + p->n, x, n);
    p->n += n;
}
static void op(Buf *p, unsigned char o) { put(p, &o, 1); }
static void ustr(Buf *p, const char *s) {
    uint32_t n = (uint32_t)strlen(s);
    op(p, 'X');
    put(p, &n, 4);
    put(p, s, n);
}
static void glob(Buf *p, const char *mod, const char *name) {
    op(p, 'c');
    put(p, mod, strlen(mod));
    op(p, '\n');
    put(p, name, strlen(name));
    op(p, '\n');
}
static void int1(Buf *p, unsigned v) {
    op(p, 'K');
    op(p, (unsigned char)v);
}
static void ordered_dict(Buf *p) {
    glob(p, "collections", "OrderedDict");
    op(p, ')');
    op(p, 'R');
}

typedef struct {
    const char *global_mod, *global_name; /* storage type */
    const char *key;
    int numel, offset, ndim;
    int size[4], stride[4];
} TensorSpec;

/* {'model': OrderedDict{'w': tensor}} as torch.save writes it */
static Buf checkpoint_pickle(const TensorSpec *t) {
    Buf p = {0};
    op(&p, 0x80);
    op(&p, 2);
    op(&p, '}');
    ustr(&p, "model");
    ordered_dict(&p);
    op(&p, '(');
    ustr(&p, "w");
    glob(&p, "torch._utils", "_rebuild_tensor_v2");
    op(&p, '(');
    op(&p, '(');
    ustr(&p, "storage");
    glob(&p, t->global_mod, t->global_name);
    ustr(&p, t->key);
    ustr(&p, "cuda:0");
    int1(&p, (unsigned)t->numel);
    op(&p, 't');
    op(&p, 'Q');
    int1(&p, (unsigned)t->offset);
    op(&p, '(');
    for (int i = 0; i < t->ndim; i++) int1(&p, (unsigned)t->size[i]);
    op(&p, 't');
    op(&p, '(');
    for (int i = 0; i < t->ndim; i++) int1(&p, (unsigned)t->stride[i]);
    op(&p, 't');
    op(&p, 0x89);
    ordered_dict(&p);
    op(&p, 't');
    op(&p, 'R');
    op(&p, 'u');
    op(&p, 's');
    op(&p, '.');
    return p;
}

/* ---------------- zip archives written with libzip ---------------- */
typedef struct {
    const char *name;
    const void *data;
    size_t n;
} Entry;

static int write_zip(const char *file, const Entry *e, int n) {
    int err;
    zip_t *za = zip_open(file, ZIP_CREATE | ZIP_TRUNCATE, &err);
    if (!za) return -1;
    for (int i = 0; i < n; i++) {
        zip_source_t *s = zip_source_buffer(za, e[i].data, e[i].n, 0);
        zip_int64_t idx = s ? zip_file_add(za, e[i].name, s, ZIP_FL_ENC_UTF_8) : -1;
        if (idx < 0 || zip_set_file_compression(za, (zip_uint64_t)idx, ZIP_CM_STORE, 0) != 0) {
            zip_discard(za);
            return -1;
        }
    }
    return zip_close(za);
}

/* a whole archive: archive/data.pkl from p, archive/data/0 with `bytes` bytes of 0, 1, 2, ... */
static unsigned char *archive(const Buf *p, size_t bytes, const char *byteorder, size_t *n) {
    float *data = vil_malloc(bytes + 4);
    for (size_t i = 0; i < bytes / 4 + 1; i++) data[i] = (float)i;
    Entry e[3] = {{"archive/data.pkl", p->b, p->n}, {"archive/data/0", data, bytes},
                  {"archive/byteorder", byteorder, byteorder ? strlen(byteorder) : 0}};
    const char *f = path("a.zip");
    unsigned char *out = NULL;
    if (write_zip(f, e, byteorder ? 3 : 2) == 0) out = vil_read_file(f, n);
    free(data);
    return out;
}

/* vil_pth_parse of an archive made from t; cap gets the message */
static int parse_spec(const TensorSpec *t, size_t bytes, const char *byteorder, VilSafetensors *st,
                      VilErrCapture *cap) {
    Buf p = checkpoint_pickle(t);
    size_t n;
    unsigned char *z = archive(&p, bytes, byteorder, &n);
    VilPthInfo info;
    vil_error_capture(cap);
    int rc = z ? vil_pth_parse(z, n, 0, st, &info) : -2;
    vil_error_release(cap);
    free(z);
    free(p.b);
    return rc;
}

static void test_archives(void) {
    const TensorSpec good = {"torch", "FloatStorage", "0", 6, 0, 2, {2, 3}, {3, 1}};
    VilSafetensors st;
    VilErrCapture cap;
    int rc = parse_spec(&good, 24, NULL, &st, &cap);
    T_CHECK(rc == 0, "a hand-made checkpoint must parse: %s", cap.msg);
    if (rc == 0) {
        const VilStTensor *w = vil_st_find(&st, "w");
        T_CHECK(w && w->dtype == VIL_ST_F32 && w->ndim == 2 && w->shape[0] == 2 && w->shape[1] == 3,
                "tensor w as [2, 3] F32");
        float v[6];
        if (w && vil_st_to_f32(w, v) == 0)
            T_CHECK(v[0] == 0 && v[4] == 4 && v[5] == 5, "contiguous values");
        vil_st_free(&st);
    }
    /* a transposed view: size (3, 2), stride (1, 3) of the same 6 elements */
    TensorSpec tr = good;
    tr.size[0] = 3, tr.size[1] = 2, tr.stride[0] = 1, tr.stride[1] = 3;
    if (parse_spec(&tr, 24, "little", &st, &cap) == 0) {
        float v[6];
        vil_st_to_f32(vil_st_find(&st, "w"), v);
        T_CHECK(v[0] == 0 && v[1] == 3 && v[2] == 1 && v[3] == 4 && v[4] == 2 && v[5] == 5,
                "a strided view is gathered into row-major order (%g %g %g %g %g %g)", v[0], v[1], v[2], v[3], v[4], v[5]);
        vil_st_free(&st);
    } else {
        T_CHECK(0, "transposed view: %s", cap.msg);
    }
    /* an offset view: 2 elements from element 4 */
    TensorSpec off = good;
    off.offset = 4, off.ndim = 1, off.size[0] = 2, off.stride[0] = 1;
    if (parse_spec(&off, 24, NULL, &st, &cap) == 0) {
        float v[2];
        vil_st_to_f32(vil_st_find(&st, "w"), v);
        T_CHECK(v[0] == 4 && v[1] == 5, "a view at an offset");
        vil_st_free(&st);
    }
    TensorSpec half = good;
    half.global_name = "HalfStorage";
    if (parse_spec(&half, 12, NULL, &st, &cap) == 0) {
        T_CHECK(vil_st_find(&st, "w")->dtype == VIL_ST_F16, "HalfStorage gives F16");
        vil_st_free(&st);
    } else {
        T_CHECK(0, "HalfStorage: %s", cap.msg);
    }

    /* each refusal: rc -1 with a message naming the cause */
    struct {
        const char *what, *want;
        TensorSpec t;
        size_t bytes;
        const char *byteorder;
    } bad[] = {
        {"view past its storage", "reaches element", {"torch", "FloatStorage", "0", 6, 0, 2, {3, 3}, {3, 1}}, 24, NULL},
        {"offset past its storage", "reaches element", {"torch", "FloatStorage", "0", 6, 5, 1, {2}, {1}}, 24, NULL},
        {"entry shorter than the storage", "its tensors need", {"torch", "FloatStorage", "0", 6, 0, 2, {2, 3}, {3, 1}}, 20, NULL},
        {"missing storage entry", "no entry 'archive/data/1'", {"torch", "FloatStorage", "1", 6, 0, 2, {2, 3}, {3, 1}}, 24, NULL},
        {"storage key with a path", "holds a character", {"torch", "FloatStorage", "../0", 6, 0, 2, {2, 3}, {3, 1}}, 24, NULL},
        {"forbidden storage global", "torch.UntypedStorage", {"torch", "UntypedStorage", "0", 6, 0, 2, {2, 3}, {3, 1}}, 24, NULL},
        {"os.system as the storage type", "'os.system' is not allowed", {"os", "system", "0", 6, 0, 2, {2, 3}, {3, 1}}, 24, NULL},
        {"big-endian storages", "not little-endian", {"torch", "FloatStorage", "0", 6, 0, 2, {2, 3}, {3, 1}}, 24, "big"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rc = parse_spec(&bad[i].t, bad[i].bytes, bad[i].byteorder, &st, &cap);
        T_CHECK(rc == -1 && strstr(cap.msg, bad[i].want), "%s: rc %d, message '%s' (want '%s')",
                bad[i].what, rc, cap.msg, bad[i].want);
        if (rc == 0) vil_st_free(&st);
    }
    /* not a zip; a zip without data.pkl */
    VilPthInfo info;
    const char junk[] = "PK\003\004 this is not really a zip archive";
    vil_error_capture(&cap);
    rc = vil_pth_parse((const unsigned char *)junk, sizeof junk, 0, &st, &info);
    vil_error_release(&cap);
    T_CHECK(rc == -1 && strstr(cap.msg, "zip"), "junk after a zip signature: '%s'", cap.msg);
    Entry e = {"hello.txt", "hi", 2};
    size_t n;
    unsigned char *z = write_zip(path("b.zip"), &e, 1) == 0 ? vil_read_file(path("b.zip"), &n) : NULL;
    vil_error_capture(&cap);
    rc = z ? vil_pth_parse(z, n, 0, &st, &info) : 0;
    vil_error_release(&cap);
    T_CHECK(rc == -1 && strstr(cap.msg, "data.pkl"), "a zip without data.pkl: '%s'", cap.msg);
    free(z);
    /* the good archive cut short at every length: never a crash, always an error */
    Buf p = checkpoint_pickle(&good);
    unsigned char *full = archive(&p, 24, NULL, &n);
    int cut_fail = 0, unsaid = 0;
    for (size_t k = 0; full && k < n; k += 7) {
        vil_error_capture(&cap);
        rc = vil_pth_parse(full, k, 0, &st, &info);
        vil_error_release(&cap);
        unsaid += rc != 0 && cap.count == 0;
        if (rc == 0) {
            cut_fail++;
            vil_st_free(&st);
        }
    }
    T_CHECK(full && cut_fail == 0, "%d truncated archives parsed", cut_fail);
    T_CHECK(unsaid == 0, "%d truncated archives refused without a message", unsaid);
    free(full);
    free(p.b);
}

/* ---------------- the unpickler on its own ---------------- */
/* vil_pickle_load of p; cap gets the message */
static VilPickle *load(const Buf *p, VilErrCapture *cap) {
    vil_error_capture(cap);
    VilPickle *pk = vil_pickle_load(p->b, p->n);
    vil_error_release(cap);
    return pk;
}

static void test_pickle_values(void) {
    /* (1, -2, 300, 70000, -2**40, 1.5, 'héllo', None, True, False, [7, 7] via memo, {'k': 'v'}) */
    Buf p = {0};
    op(&p, 0x80);
    op(&p, 2);
    op(&p, '(');
    int1(&p, 1);
    op(&p, 'J');
    int32_t m2 = -2;
    put(&p, &m2, 4);
    op(&p, 'M');
    uint16_t v300 = 300;
    put(&p, &v300, 2);
    op(&p, 'J');
    int32_t v7 = 70000;
    put(&p, &v7, 4);
    op(&p, 0x8a); /* LONG1: -2**40 in 6 bytes, two's complement */
    op(&p, 6);
    const unsigned char l1[6] = {0, 0, 0, 0, 0, 0xff};
    put(&p, l1, 6);
    op(&p, 'G');
    const unsigned char f15[8] = {0x3f, 0xf8, 0, 0, 0, 0, 0, 0};
    put(&p, f15, 8);
    ustr(&p, "h\xc3\xa9llo");
    op(&p, 'N');
    op(&p, 0x88);
    op(&p, 0x89);
    op(&p, ']');
    op(&p, 'q');
    op(&p, 3); /* memo[3] = the list */
    int1(&p, 7);
    op(&p, 'a');
    op(&p, 'h');
    op(&p, 3);
    op(&p, '0' + 0); /* POP is not allowed: the list pushed by BINGET must instead be used */
    p.n--;           /* (take the POP back out) */
    int1(&p, 7);
    op(&p, 'a'); /* the memo holds the same list: [7, 7] */
    op(&p, '0');
    p.n--;
    op(&p, '}');
    ustr(&p, "k");
    ustr(&p, "old");
    op(&p, 's');
    ustr(&p, "k");
    ustr(&p, "v");
    op(&p, 's'); /* a repeated key: the last one wins */
    op(&p, 't');
    op(&p, '.');
    VilErrCapture cap;
    VilPickle *pk = load(&p, &cap);
    T_CHECK(pk != NULL, "a pickle of plain values must load: %s", cap.msg);
    if (pk) {
        const VilPkObj *t = vil_pickle_root(pk);
        T_CHECK(t->kind == VIL_PK_TUPLE && t->n == 13, "a 13-tuple (got %s of %d)", vil_pk_kind_name(t), t->n);
        if (t->kind == VIL_PK_TUPLE && t->n == 13) {
            T_CHECK(t->items[0]->i == 1 && t->items[1]->i == -2 && t->items[2]->i == 300 &&
                        t->items[3]->i == 70000 && t->items[4]->i == -((int64_t)1 << 40),
                    "ints: %lld %lld %lld %lld %lld", (long long)t->items[0]->i, (long long)t->items[1]->i,
                    (long long)t->items[2]->i, (long long)t->items[3]->i, (long long)t->items[4]->i);
            T_CHECK(t->items[5]->kind == VIL_PK_FLOAT && t->items[5]->f == 1.5, "BINFLOAT 1.5");
            T_CHECK(t->items[6]->kind == VIL_PK_STR && strcmp(t->items[6]->s, "h\xc3\xa9llo") == 0, "UTF-8 string");
            T_CHECK(t->items[7]->kind == VIL_PK_NONE && t->items[8]->i == 1 && t->items[9]->i == 0, "None True False");
            T_CHECK(t->items[10]->kind == VIL_PK_LIST && t->items[10]->n == 2 && t->items[10] == t->items[11],
                    "the memo gives back the same list, with both appends");
            const VilPkObj *v = vil_pk_get(t->items[12], "k");
            T_CHECK(v && strcmp(v->s, "v") == 0, "a repeated dict key: the last value wins");
        }
        vil_pickle_free(pk);
    }
    free(p.b);
}

static void expect_refused(const char *what, const Buf *p, const char *want) {
    VilErrCapture cap;
    VilPickle *pk = load(p, &cap);
    T_CHECK(!pk && strstr(cap.msg, want), "%s: refused with '%s' (want '%s')", what, cap.msg, want);
    vil_pickle_free(pk);
}

static void test_pickle_refusals(void) {
    Buf p = {0};
    /* the classic: os.system('touch FILE') via REDUCE */
    op(&p, 0x80), op(&p, 2);
    glob(&p, "posix", "system");
    ustr(&p, "touch /tmp/vil_pwned");
    op(&p, 0x85), op(&p, 'R'), op(&p, '.');
    expect_refused("posix.system", &p, "'posix.system' is not allowed");
    FILE *f = fopen("/tmp/vil_pwned", "r");
    T_CHECK(!f, "nothing ran");
    if (f) fclose(f);
    p.n = 0;
    op(&p, 0x80), op(&p, 2);
    glob(&p, "builtins", "eval");
    op(&p, '.');
    expect_refused("builtins.eval", &p, "'builtins.eval' is not allowed");
    /* opcodes torch.save does not write */
    const struct {
        unsigned char op;
        const char *name;
    } ops[] = {{'i', "INST"}, {0x93, "STACK_GLOBAL"}, {'o', "OBJ"}, {'S', "STRING"},
               {0x95, "FRAME"}, {'0', "POP"}, {0x82, "EXT1"}, {0xff, "not a pickle opcode"}};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        p.n = 0;
        op(&p, 0x80), op(&p, 2), op(&p, 'N'), op(&p, ops[i].op), op(&p, '.');
        expect_refused(ops[i].name, &p, ops[i].name);
    }
    p.n = 0;
    put(&p, "(tochr._nsc(", 12); /* fuzz_pickle found UB here: TUPLE after a MARK on an empty stack */
    expect_refused("an empty TUPLE, then OBJ", &p, "OBJ");
    p.n = 0;
    op(&p, 0x80), op(&p, 4), op(&p, 'N'), op(&p, '.');
    expect_refused("protocol 4", &p, "protocol 4");
    /* nesting, memo and stack bounds */
    p.n = 0;
    op(&p, 0x80), op(&p, 2);
    for (int i = 0; i < 300; i++) op(&p, ']'), op(&p, '(');
    expect_refused("300 nested lists", &p, "nested deeper");
    p.n = 0;
    op(&p, 0x80), op(&p, 2), op(&p, 'N'), op(&p, 'r');
    uint32_t big = 0xfffffff0u;
    put(&p, &big, 4);
    op(&p, '.');
    expect_refused("a memo index of 4 billion", &p, "memo index");
    p.n = 0;
    op(&p, 0x80), op(&p, 2), op(&p, 'h'), op(&p, 9), op(&p, '.');
    expect_refused("BINGET of nothing", &p, "never stored");
    p.n = 0;
    op(&p, 0x80), op(&p, 2), op(&p, 'a'), op(&p, '.');
    expect_refused("APPEND on an empty stack", &p, "stack is empty");
    p.n = 0;
    op(&p, 0x80), op(&p, 2), op(&p, 'N'), op(&p, 'N'), op(&p, '.');
    expect_refused("two objects at STOP", &p, "STOP with 2 objects");
    p.n = 0;
    op(&p, 0x80), op(&p, 2), op(&p, 'N'), op(&p, 'N'), op(&p, 'a'), op(&p, '.');
    expect_refused("APPEND to None", &p, "APPEND on None");
    p.n = 0;
    op(&p, 0x80), op(&p, 2);
    ustr(&p, "bad \xff utf-8");
    op(&p, '.');
    expect_refused("invalid UTF-8", &p, "UTF-8");
    p.n = 0;
    op(&p, 0x80), op(&p, 2), op(&p, 'X');
    uint32_t huge = 0x7fffffff;
    put(&p, &huge, 4);
    put(&p, "abc", 3);
    expect_refused("a string longer than the pickle", &p, "truncated");
    p.n = 0;
    op(&p, 0x80), op(&p, 2);
    glob(&p, "collections", "OrderedDict");
    int1(&p, 5);
    op(&p, 0x85), op(&p, 'R'), op(&p, '.');
    expect_refused("OrderedDict with arguments", &p, "OrderedDict called with 1");
    p.n = 0;
    op(&p, 0x80), op(&p, 2), op(&p, ']'), op(&p, '}'), op(&p, 'b'), op(&p, '.');
    expect_refused("BUILD on a list", &p, "BUILD of a list");
    /* every prefix of a valid checkpoint pickle: an error, never a crash */
    const TensorSpec good = {"torch", "FloatStorage", "0", 6, 0, 2, {2, 3}, {3, 1}};
    Buf c = checkpoint_pickle(&good);
    int loaded = 0;
    for (size_t k = 0; k < c.n; k++) {
        VilErrCapture cap;
        vil_error_capture(&cap);
        VilPickle *pk = vil_pickle_load(c.b, k);
        vil_error_release(&cap);
        loaded += pk != NULL;
        vil_pickle_free(pk);
    }
    VilPickle *pk = vil_pickle_load(c.b, c.n);
    T_CHECK(loaded == 0 && pk, "every proper prefix refused (%d loaded), the whole loads", loaded);
    vil_pickle_free(pk);
    free(c.b);
    free(p.b);
}

/* ---------------- the files torch.save wrote ---------------- */
typedef struct {
    char name[32], arch[8];
    int img, patch, stride, grid, dim, depth, state, classes;
    long params;
} Case;

static int read_cases(Case *cs, int max) {
    FILE *f = fopen(DATA "cases.txt", "r");
    if (!f) return 0;
    char line[512];
    int n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        Case *c = &cs[n];
        if (line[0] == '#') continue;
        if (sscanf(line, "%31s %7s img %d patch %d stride %d grid %d dim %d depth %d state %d classes %d params %ld",
                   c->name, c->arch, &c->img, &c->patch, &c->stride, &c->grid, &c->dim, &c->depth,
                   &c->state, &c->classes, &c->params) == 11)
            n++;
    }
    fclose(f);
    return n;
}

static float *read_inputs(int n_img, size_t per) {
    size_t n;
    unsigned char *b = vil_read_file(DATA "inputs.f32", &n);
    if (!b || n != n_img * per * sizeof(float)) {
        free(b);
        return NULL;
    }
    return (float *)b;
}

static double *read_ref(const char *name, const char *which, size_t count) {
    char f[256];
    snprintf(f, sizeof f, DATA "%.64s.%.8s.f64", name, which);
    size_t n;
    unsigned char *b = vil_read_file(f, &n);
    if (!b || n != count * sizeof(double)) {
        free(b);
        return NULL;
    }
    return (double *)b;
}

/* forward of the model on the inputs, logits (n_img, classes) on the host */
static float *logits_of(VilModel *m, const float *inputs, int n_img) {
    const VilConfig *c = &m->cfg;
    size_t per = (size_t)c->in_chans * c->img_size * c->img_size;
    T_CHECK(vil_model_alloc_acts(m, n_img, 0) == 0, "vil_model_alloc_acts(m, n_img, 0)");
    m->be->to_device(m->be, m->acts.img, inputs, n_img * per * sizeof(float));
    vil_model_forward(m, 0);
    float *lg = vil_malloc((size_t)n_img * c->num_classes * sizeof(float));
    m->be->to_host(m->be, lg, m->acts.logits, (size_t)n_img * c->num_classes * sizeof(float));
    return lg;
}

static double rel_err(const float *got, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (got[i] - ref[i]) * (got[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return sqrt(num / (den > 0 ? den : 1e-300));
}

static void test_files(void) {
    Case cs[8];
    int nc = read_cases(cs, 8);
    T_CHECK(nc == 3, "tests/data/pth/cases.txt lists 3 cases (got %d)", nc);
    const int NI = 3;
    for (int k = 0; k < nc; k++) {
        Case *c = &cs[k];
        char file[256], what[128];
        snprintf(file, sizeof file, DATA "%.31s.pth", c->name);
        float *inputs = read_inputs(NI, (size_t)3 * c->img * c->img);
        T_CHECK(inputs != NULL, "inputs.f32");
        if (!inputs) return;
        float *lg[2] = {NULL, NULL};
        for (int ema = 0; ema < 2; ema++) {
            VilModel m;
            VilCheckpointMeta meta;
            VilCheckpointOpts o = {.ema = ema};
            int rc = vil_checkpoint_load(file, &vil_backend_cpu, &o, &m, &meta);
            T_CHECK(rc == 0, "%s%s loads", file, ema ? " --ema" : "");
            if (rc != 0) continue;
            const VilConfig *g = &m.cfg;
            T_CHECK(strcmp(g->arch, c->arch) == 0 && g->img_size == c->img && g->patch_size == c->patch &&
                        g->stride == c->stride && g->grid == c->grid && g->embed_dim == c->dim &&
                        g->depth == c->depth && g->d_state == c->state && g->num_classes == c->classes &&
                        (long)m.param_count == c->params,
                    "%s: architecture inferred (%s img %d P %d S %d G %d D %d depth %d N %d K %d, %zu params)",
                    c->name, g->arch, g->img_size, g->patch_size, g->stride, g->grid, g->embed_dim,
                    g->depth, g->d_state, g->num_classes, m.param_count);
            T_CHECK(strcmp(meta.format, "pth") == 0 && strcmp(meta.weights, ema ? "model_ema" : "model") == 0 &&
                        meta.has_ema && meta.epoch == 299 && strstr(meta.source_model, c->name[2] == 'm' ? "vim_test" : "vil_test"),
                    "%s: meta format %s weights %s epoch %ld model %s", c->name, meta.format,
                    meta.weights, meta.epoch, meta.source_model);
            lg[ema] = logits_of(&m, inputs, NI);
            double *ref = read_ref(c->name, ema ? "ema" : "model", (size_t)NI * c->classes);
            snprintf(what, sizeof what, "%.31s %s logits vs float64 torch", c->name, ema ? "model_ema" : "model");
            T_CLOSE(what, ref ? rel_err(lg[ema], ref, (size_t)NI * c->classes) : 1.0, 1e-5);
            free(ref);
            vil_checkpoint_meta_free(&meta);
            vil_model_free(&m);
        }
        if (lg[0] && lg[1]) {
            double d = 0;
            for (int i = 0; i < NI * c->classes; i++) d = fmax(d, fabs(lg[0][i] - lg[1][i]));
            T_CHECK(d > 1e-2, "%s: model and model_ema give different logits (max diff %g)", c->name, d);
        }
        free(lg[0]);
        free(lg[1]);
        free(inputs);
    }

    /* a bare state dict: without a size it is taken as trained at its 4x4 grid of patch 4 (16 px:
     * 224 does not fit the grid with a stride of at most the patch); at --img-size 16 the same
     * network as the checkpoint's model */
    VilModel a, b;
    VilCheckpointMeta ma, mb;
    int r0 = vil_checkpoint_load(DATA "vim_p4s4_state_dict.pth", &vil_backend_cpu, NULL, &a, &ma);
    T_CHECK(r0 == 0 && a.cfg.img_size == 16 && a.cfg.stride == 4 && ma.trained_grid == 0,
            "a state dict without args and no --img-size loads at its grid x patch, 16 px (rc %d, %d px)",
            r0, r0 == 0 ? a.cfg.img_size : 0);
    if (r0 == 0) {
        vil_checkpoint_meta_free(&ma);
        vil_model_free(&a);
    }
    int ra = vil_checkpoint_load(DATA "vim_p4s4_state_dict.pth", &vil_backend_cpu, &(VilCheckpointOpts){.img_size = 16}, &a, &ma);
    int rb = vil_checkpoint_load(DATA "vim_p4s4.pth", &vil_backend_cpu, NULL, &b, &mb);
    T_CHECK(ra == 0 && rb == 0, "state dict at --img-size 16 and the checkpoint load");
    if (ra == 0 && rb == 0) {
        float *x = vil_malloc(a.buf_len * 4), *y = vil_malloc(b.buf_len * 4);
        vil_model_get_params(&a, x);
        vil_model_get_params(&b, y);
        T_CHECK(a.buf_len == b.buf_len && memcmp(x, y, a.buf_len * 4) == 0,
                "the bare state dict holds the checkpoint's model");
        T_CHECK(ma.weights[0] == 0 && ma.epoch == -1, "a state dict: no weights key, no epoch");
        free(x);
        free(y);
        /* at another resolution: pos_embed interpolated from the stated 16 */
        VilModel r;
        VilCheckpointMeta mr;
        T_CHECK(vil_checkpoint_load(DATA "vim_p4s4.pth", &vil_backend_cpu, &(VilCheckpointOpts){.img_size = 24}, &r, &mr) == 0 &&
                    r.cfg.grid == 6 && mr.trained_grid == 4,
                "a checkpoint that states 16 px, loaded at 24: grid 6 from 4");
        vil_checkpoint_meta_free(&mr);
        vil_model_free(&r);
        vil_checkpoint_meta_free(&ma);
        vil_checkpoint_meta_free(&mb);
        vil_model_free(&a);
        vil_model_free(&b);
    }
    VilSafetensors st;
    VilPthInfo info;
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_pth_read(DATA "vim_p4s4_noema.pth", 1, &st, &info);
    vil_error_release(&cap);
    T_CHECK(rc == -1 && strstr(cap.msg, "no model_ema") && strstr(cap.msg, "model, epoch, args"),
            "--ema on a file without model_ema: '%s'", cap.msg);
    vil_error_capture(&cap);
    rc = vil_pth_read(DATA "vim_p4s4_state_dict.pth", 1, &st, &info);
    vil_error_release(&cap);
    T_CHECK(rc == -1 && strstr(cap.msg, "state dict"), "--ema on a bare state dict: '%s'", cap.msg);
    /* the file's tensors in the order torch.save wrote them are vil's table order */
    if (vil_pth_read(DATA "vim_p4s4.pth", 0, &st, &info) == 0) {
        VilModel m;
        VilCheckpointMeta mm;
        if (vil_checkpoint_load(DATA "vim_p4s4.pth", &vil_backend_cpu, NULL, &m, &mm) == 0) {
            int same = st.n_tensors == m.n_tensors;
            for (int i = 0; same && i < m.n_tensors; i++) same = strcmp(st.tensors[i].name, m.info[i].name) == 0;
            T_CHECK(same, "the official state_dict order is vil's parameter table order");
            vil_checkpoint_meta_free(&mm);
            vil_model_free(&m);
        }
        vil_st_free(&st);
    }
}

/* a copy of a real file with one thing broken: every case must be an error, not a crash */
static void test_broken_files(void) {
    size_t n;
    unsigned char *full = vil_read_file(DATA "vim_p4s4.pth", &n);
    T_CHECK(full != NULL, "read vim_p4s4.pth");
    if (!full) return;
    VilSafetensors st;
    VilPthInfo info;
    VilErrCapture cap;
    int parsed = 0;
    for (size_t k = 0; k < n; k += n / 97 + 1) {
        vil_error_capture(&cap);
        int rc = vil_pth_parse(full, k, 0, &st, &info);
        vil_error_release(&cap);
        if (rc == 0) {
            parsed++;
            vil_st_free(&st);
        }
    }
    T_CHECK(parsed == 0, "98 truncations of a real checkpoint: %d parsed", parsed);
    /* one flipped byte inside the first storage (cls_token, read for the model): CRC error */
    zip_t *za = zip_open(DATA "vim_p4s4.pth", ZIP_RDONLY, NULL);
    unsigned char first[64];
    zip_file_t *zf = za ? zip_fopen(za, "vim_p4s4/data/0", 0) : NULL;
    zip_int64_t got = zf ? zip_fread(zf, first, sizeof first) : -1;
    if (zf) zip_fclose(zf);
    if (za) zip_discard(za);
    unsigned char *at = got == 64 ? memmem(full, n, first, sizeof first) : NULL;
    T_CHECK(at != NULL, "found the first storage's bytes in the file");
    if (at) {
        at[10] ^= 0x40;
        vil_error_capture(&cap);
        int rc = vil_pth_parse(full, n, 0, &st, &info);
        vil_error_release(&cap);
        T_CHECK(rc == -1 && strstr(cap.msg, "data/0"), "a flipped storage byte is caught: '%s'",
                cap.msg);
        if (rc == 0) vil_st_free(&st);
        at[10] ^= 0x40;
    }
    /* the archive without its first storage */
    FILE *f = fopen(path("nostorage.pth"), "wb");
    if (f) {
        fwrite(full, 1, n, f);
        fclose(f);
    }
    za = zip_open(path("nostorage.pth"), 0, NULL);
    zip_int64_t idx = za ? zip_name_locate(za, "vim_p4s4/data/0", 0) : -1;
    T_CHECK(idx >= 0 && zip_delete(za, (zip_uint64_t)idx) == 0 && zip_close(za) == 0, "deleted data/0");
    vil_error_capture(&cap);
    int rc = vil_pth_read(path("nostorage.pth"), 0, &st, &info);
    vil_error_release(&cap);
    T_CHECK(rc == -1 && strstr(cap.msg, "cls_token") && strstr(cap.msg, "no entry"),
            "a missing storage names the tensor: '%s'", cap.msg);
    free(full);
}

/* ---------------- issue 30: files that claim more than they hold ---------------- */
static void intv(Buf *p, int64_t v) {
    if (v >= 0 && v < 256) {
        int1(p, (unsigned)v);
    } else if (v >= 0 && v < ((int64_t)1 << 31)) {
        uint32_t u = (uint32_t)v;
        op(p, 'J');
        put(p, &u, 4);
    } else {
        op(p, 0x8a);
        op(p, 8);
        put(p, &v, 8);
    }
}

typedef struct {
    const char *name, *key; /* the tensor and its storage */
    int64_t numel, offset;  /* the storage's elements (float32); the view's first */
    int ndim;
    int64_t size[4], stride[4];
} View;

/* {'model': OrderedDict(name: tensor, ...)} as torch.save writes it */
static Buf views_pickle(const View *v, int n) {
    Buf p = {0};
    op(&p, 0x80);
    op(&p, 2);
    op(&p, '}');
    ustr(&p, "model");
    ordered_dict(&p);
    op(&p, '(');
    for (int k = 0; k < n; k++) {
        ustr(&p, v[k].name);
        glob(&p, "torch._utils", "_rebuild_tensor_v2");
        op(&p, '(');
        op(&p, '(');
        ustr(&p, "storage");
        glob(&p, "torch", "FloatStorage");
        ustr(&p, v[k].key);
        ustr(&p, "cpu");
        intv(&p, v[k].numel);
        op(&p, 't');
        op(&p, 'Q');
        intv(&p, v[k].offset);
        op(&p, '(');
        for (int i = 0; i < v[k].ndim; i++) intv(&p, v[k].size[i]);
        op(&p, 't');
        op(&p, '(');
        for (int i = 0; i < v[k].ndim; i++) intv(&p, v[k].stride[i]);
        op(&p, 't');
        op(&p, 0x89);
        ordered_dict(&p);
        op(&p, 't');
        op(&p, 'R');
    }
    op(&p, 'u');
    op(&p, 's');
    op(&p, '.');
    return p;
}

/* A zip entry written by hand, so that it may be deflated already (comp bytes of raw deflate
 * for size bytes with CRC crc) or say sizes its bytes do not back (a forged central directory). */
typedef struct {
    const char *name;
    const void *data;
    uint64_t comp, size;
    uint32_t crc;
    int deflated;
} ZEntry;

static void le(FILE *f, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) fputc((int)(v >> (8 * i)) & 0xff, f);
}

static void zip_header(FILE *f, const ZEntry *e, int central, uint64_t at) {
    le(f, central ? 0x02014b50 : 0x04034b50, 4);
    if (central) le(f, 20, 2);
    le(f, 20, 2);
    le(f, 0, 2);                    /* flags */
    le(f, e->deflated ? 8 : 0, 2);  /* method */
    le(f, 0, 2);                    /* time */
    le(f, 0x21, 2);                 /* date: 1980-01-01 */
    le(f, e->crc, 4);
    le(f, e->comp, 4);
    le(f, e->size, 4);
    le(f, strlen(e->name), 2);
    le(f, 0, 2);                    /* extra */
    if (central) {
        le(f, 0, 2);                /* comment */
        le(f, 0, 2);                /* disk */
        le(f, 0, 2);                /* internal attributes */
        le(f, 0, 4);                /* external attributes */
        le(f, at, 4);               /* the local header */
    }
    fputs(e->name, f);
}

static int write_zip_raw(const char *file, const ZEntry *e, int n) {
    FILE *f = fopen(file, "wb");
    if (!f) return -1;
    uint64_t at[16];
    for (int i = 0; i < n; i++) {
        at[i] = (uint64_t)ftell(f);
        zip_header(f, &e[i], 0, 0);
        fwrite(e[i].data, 1, e[i].comp, f);
    }
    uint64_t cd = (uint64_t)ftell(f);
    for (int i = 0; i < n; i++) zip_header(f, &e[i], 1, at[i]);
    uint64_t cd_end = (uint64_t)ftell(f);
    le(f, 0x06054b50, 4);
    le(f, 0, 4);
    le(f, n, 2);
    le(f, n, 2);
    le(f, cd_end - cd, 4);
    le(f, cd, 4);
    le(f, 0, 2);
    return fclose(f);
}

static ZEntry stored(const char *name, const void *data, size_t n) {
    return (ZEntry){name, data, n, n, (uint32_t)crc32(0, data, (uInt)n), 0};
}

/* 1 GiB of zeros as raw deflate (~1 MB), made fast: 1 MiB of zeros compressed up to a full
 * flush (which resets the compressor, so each MiB compresses to the same bytes), repeated, then
 * the final empty block */
static unsigned char *deflated_zeros(uint64_t size, uint64_t *comp, uint32_t *crc) {
    const size_t chunk = 1 << 20;
    unsigned char *zero = calloc(chunk, 1), *c1 = vil_malloc(chunk), *c2 = vil_malloc(chunk);
    z_stream z = {0};
    deflateInit2(&z, 9, Z_DEFLATED, -15, 9, Z_RLE);
    size_t n1, n2;
    z.next_in = zero, z.avail_in = (uInt)chunk, z.next_out = c1, z.avail_out = (uInt)chunk;
    deflate(&z, Z_FULL_FLUSH);
    n1 = chunk - z.avail_out;
    z.next_in = zero, z.avail_in = (uInt)chunk, z.next_out = c2, z.avail_out = (uInt)chunk;
    deflate(&z, Z_FULL_FLUSH);
    n2 = chunk - z.avail_out;
    unsigned char fin[64];
    z.next_in = zero, z.avail_in = 0, z.next_out = fin, z.avail_out = sizeof fin;
    deflate(&z, Z_FINISH);
    size_t nf = sizeof fin - z.avail_out;
    deflateEnd(&z);
    uint64_t reps = size / chunk;
    unsigned char *out = NULL;
    if (n1 == n2 && memcmp(c1, c2, n1) == 0 && size % chunk == 0) {
        out = vil_malloc(n1 * reps + nf);
        for (uint64_t i = 0; i < reps; i++) memcpy(out + i * n1, c1, n1);
        memcpy(out + n1 * reps, fin, nf);
        *comp = n1 * reps + nf;
        uLong c = crc32(0, zero, (uInt)chunk), all = c;
        for (uint64_t i = 1; i < reps; i++) all = crc32_combine(all, c, (z_off_t)chunk);
        *crc = (uint32_t)all;
    }
    free(zero);
    free(c1);
    free(c2);
    return out;
}

static int do_pth_read(void *a) {
    VilSafetensors st;
    VilPthInfo info;
    if (vil_pth_read((const char *)a, 0, &st, &info) != 0) return 0;
    vil_st_free(&st);
    return 3;
}

static int do_ckpt_load(void *a) {
    VilModel m;
    VilCheckpointMeta meta;
    if (vil_checkpoint_load((const char *)a, &vil_backend_cpu,
                            &(VilCheckpointOpts){.img_size = 16}, &m, &meta) != 0)
        return 0;
    vil_model_free(&m);
    vil_checkpoint_meta_free(&meta);
    return 3;
}

/* an archive of the views, each storage stored with numel * 4 bytes (want_bytes < 0) or with
 * want_bytes bytes, plus the extra entries */
static int write_views(const char *file, const View *v, int n, int64_t want_bytes,
                       const ZEntry *extra, int n_extra) {
    Buf p = views_pickle(v, n);
    ZEntry e[16];
    int k = 0;
    e[k++] = stored("archive/data.pkl", p.b, p.n);
    char names[8][64];
    float *data[8] = {0};
    for (int i = 0; i < n && i < 8; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++) dup |= strcmp(v[j].key, v[i].key) == 0;
        if (dup) continue;
        snprintf(names[i], sizeof names[i], "archive/data/%s", v[i].key);
        size_t bytes = want_bytes >= 0 ? (size_t)want_bytes : (size_t)v[i].numel * 4;
        data[i] = calloc(bytes ? bytes : 1, 1);
        e[k++] = stored(names[i], data[i], bytes);
    }
    for (int i = 0; i < n_extra; i++) e[k++] = extra[i];
    int rc = write_zip_raw(file, e, k);
    for (int i = 0; i < 8; i++) free(data[i]);
    free(p.b);
    return rc;
}

static long file_size(const char *file) {
    FILE *f = fopen(file, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

/* A tiny ViM as a .pth state dict (each tensor its own stored storage of 0.01s), plus extra
 * views (their storages among the extra entries) */
static int write_model_pth(const char *file, const View *more, int n_more, const char *drop,
                           const ZEntry *extra, int n_extra) {
    VilConfig c;
    vil_config_default(&c);
    strcpy(c.arch, "vim");
    c.img_size = 16, c.patch_size = 4, c.stride = 4, c.in_chans = 3, c.embed_dim = 8;
    c.depth = 2, c.d_state = 4, c.num_classes = 3;
    if (vil_config_finalize(&c) != 0) return -1;
    int n;
    VilParamInfo *info = vil_model_param_table(&c, &n);
    View *v = vil_calloc((size_t)(n + n_more), sizeof *v);
    char (*keys)[16] = vil_calloc((size_t)n, 16);
    ZEntry *e = vil_calloc((size_t)(n + n_extra + 1), sizeof *e);
    char (*names)[64] = vil_calloc((size_t)n, 64);
    size_t most = 0;
    for (int i = 0; i < n; i++) most = info[i].numel > most ? info[i].numel : most;
    float *vals = vil_malloc(most * 4);
    for (size_t i = 0; i < most; i++) vals[i] = 0.01f;
    int k = 0, ne = 1;
    for (int i = 0; i < n; i++) {
        if (drop && strcmp(info[i].name, drop) == 0) continue;
        snprintf(keys[i], 16, "%d", i);
        v[k] = (View){info[i].name, keys[i], (int64_t)info[i].numel, 0, info[i].ndim, {0}, {0}};
        int64_t st = 1;
        for (int d = info[i].ndim - 1; d >= 0; d--) {
            v[k].size[d] = info[i].shape[d];
            v[k].stride[d] = st;
            st *= info[i].shape[d];
        }
        snprintf(names[i], 64, "archive/data/%d", i);
        e[ne++] = stored(names[i], vals, info[i].numel * 4);
        k++;
    }
    for (int i = 0; i < n_more; i++) v[k++] = more[i];
    for (int i = 0; i < n_extra; i++) e[ne++] = extra[i];
    Buf p = views_pickle(v, k);
    e[0] = stored("archive/data.pkl", p.b, p.n);
    /* write_zip_raw keeps 16 offsets: this model has fewer than 60 tensors, so write in one go
     * with a larger table */
    FILE *f = fopen(file, "wb");
    int rc = f ? 0 : -1;
    uint64_t *at = vil_calloc((size_t)ne, sizeof *at);
    for (int i = 0; f && i < ne; i++) {
        at[i] = (uint64_t)ftell(f);
        zip_header(f, &e[i], 0, 0);
        fwrite(e[i].data, 1, e[i].comp, f);
    }
    if (f) {
        uint64_t cd = (uint64_t)ftell(f);
        for (int i = 0; i < ne; i++) zip_header(f, &e[i], 1, at[i]);
        uint64_t cd_end = (uint64_t)ftell(f);
        le(f, 0x06054b50, 4);
        le(f, 0, 4);
        le(f, (uint64_t)ne, 2);
        le(f, (uint64_t)ne, 2);
        le(f, cd_end - cd, 4);
        le(f, cd, 4);
        le(f, 0, 2);
        rc = fclose(f);
    }
    free(at);
    free(p.b);
    free(vals);
    free(names);
    free(e);
    free(keys);
    free(v);
    free(info);
    return rc;
}

static void test_hostile_pth(void) {
    char msg[1024];
    const int64_t G29 = (int64_t)1 << 29, G31 = (int64_t)1 << 31;
    /* 2^29 and 2^31 floats claimed of a 4-byte storage */
    const int64_t claims[2] = {G29, G31};
    for (int k = 0; k < 2; k++) {
        View v = {"w", "0", claims[k], 0, 1, {claims[k]}, {1}};
        const char *f = path("claim.pth");
        T_CHECK(write_views(f, &v, 1, 4, NULL, 0) == 0 && file_size(f) < 600,
                "a %ld-byte .pth claiming %lld floats of a 4-byte storage", file_size(f), (long long)claims[k]);
        char want[128];
        snprintf(want, sizeof want, "holds 4 bytes, its tensors need %lld", (long long)claims[k] * 4);
        int rc = t_limited(do_pth_read, (void *)f, 512, 20, msg, sizeof msg);
        T_CHECK(rc == 0 && strstr(msg, want) && strstr(msg, "'w'") && strstr(msg, f),
                "%lld floats of a 4-byte storage refused under 512 MB (child %d): %s", (long long)claims[k], rc, msg);
    }
    /* a view of 2^29 elements with stride 0 over a storage of one */
    View b = {"w", "0", 1, 0, 1, {G29}, {0}};
    const char *f = path("broadcast.pth");
    write_views(f, &b, 1, -1, NULL, 0);
    int rc = t_limited(do_pth_read, (void *)f, 512, 20, msg, sizeof msg);
    T_CHECK(rc == 0 && strstr(msg, "no views larger than their storage") && strstr(msg, "'w'"),
            "a stride-0 view of 2^29 elements over 1 refused under 512 MB (child %d): %s", rc, msg);
    /* a central directory that says 2 GiB for a 10-byte deflated entry */
    unsigned char tiny[16];
    uLongf tn = sizeof tiny;
    compress2(tiny, &tn, (const Bytef *)"\0\0\0\0", 4, 9); /* zlib wrapper: 2 bytes, then raw */
    ZEntry lie = {"archive/data/0", tiny + 2, tn - 6, (uint64_t)G29 * 4, 0, 1};
    View lv = {"w", "0", G29, 0, 1, {G29}, {1}};
    Buf lp = views_pickle(&lv, 1);
    ZEntry le2[2] = {stored("archive/data.pkl", lp.b, lp.n), lie};
    f = path("lie.pth");
    write_zip_raw(f, le2, 2);
    free(lp.b);
    rc = t_limited(do_pth_read, (void *)f, 512, 20, msg, sizeof msg);
    T_CHECK(rc == 0 && strstr(msg, "forged") && strstr(msg, "'w'"),
            "an entry claiming 2 GiB from %lu compressed bytes refused under 512 MB (child %d): %s",
            (unsigned long)(tn - 6), rc, msg);

    /* a ~1 MB archive that inflates to 1 GiB: for a tensor the model has no place for, for one
     * of the wrong shape, and (read, only the span kept) under a tensor that views its start */
    uint64_t comp = 0;
    uint32_t crc = 0;
    const uint64_t GiB = (uint64_t)1 << 30;
    double t0 = vil_now();
    unsigned char *z = deflated_zeros(GiB, &comp, &crc);
    T_CHECK(z && comp < (2u << 20), "1 GiB of zeros deflated to %llu bytes in %.2f s", (unsigned long long)comp, vil_now() - t0);
    if (!z) return;
    ZEntry big = {"archive/data/big", z, comp, GiB, crc, 1};
    f = path("model.pth");
    T_CHECK(write_model_pth(f, NULL, 0, NULL, NULL, 0) == 0 &&
                t_limited(do_ckpt_load, (void *)f, 512, 20, msg, sizeof msg) == 3,
            "the hand-made ViM .pth loads: %s", msg);
    View extra = {"extra.weight", "big", (int64_t)(GiB / 4), 0, 1, {(int64_t)(GiB / 4)}, {1}};
    f = path("extra.pth");
    write_model_pth(f, &extra, 1, NULL, &big, 1);
    T_CHECK(file_size(f) < (2 << 20), "with a 1 GiB deflated extra tensor: %ld bytes", file_size(f));
    t0 = vil_now();
    rc = t_limited(do_ckpt_load, (void *)f, 512, 20, msg, sizeof msg);
    T_CHECK(rc == 0 && strstr(msg, "unexpected tensor 'extra.weight'") && strstr(msg, f) && vil_now() - t0 < 5,
            "a 1 GiB deflated storage of a tensor with no place in the model: refused in %.2f s "
            "under 512 MB, never inflated (child %d): %s", vil_now() - t0, rc, msg);
    View wrong = {"norm_f.weight", "big", (int64_t)(GiB / 4), 0, 1, {(int64_t)(GiB / 4)}, {1}};
    f = path("wrong.pth");
    write_model_pth(f, &wrong, 1, "norm_f.weight", &big, 1);
    t0 = vil_now();
    rc = t_limited(do_ckpt_load, (void *)f, 512, 20, msg, sizeof msg);
    T_CHECK(rc == 0 && strstr(msg, "tensor 'norm_f.weight' has shape [268435456], the model needs [8]") &&
                vil_now() - t0 < 5,
            "a 1 GiB deflated storage under a tensor of the wrong shape: refused in %.2f s under "
            "512 MB (child %d): %s", vil_now() - t0, rc, msg);
    View head = {"norm_f.weight", "big", (int64_t)(GiB / 4), 0, 1, {8}, {1}};
    f = path("span.pth");
    write_model_pth(f, &head, 1, "norm_f.weight", &big, 1);
    t0 = vil_now();
    rc = t_limited(do_ckpt_load, (void *)f, 512, 30, msg, sizeof msg);
    T_CHECK(rc == 3, "norm_f.weight as the first 8 floats of a 1 GiB deflated storage loads under "
            "512 MB (the storage streamed, its CRC checked, only the span kept) in %.2f s (child %d): %s",
            vil_now() - t0, rc, msg);
    /* read whole (vil_pth_read takes every tensor), the 1 GiB one cannot be had under 512 MB: an
     * error naming the file, where the reader used to exit */
    if (!T_ASAN) {
        f = path("extra.pth");
        rc = t_limited(do_pth_read, (void *)f, 512, 20, msg, sizeof msg);
        T_CHECK(rc == 0 && strstr(msg, "out of memory") && strstr(msg, "cannot be allocated") && strstr(msg, f),
                "all of a .pth whose 1 GiB tensor does not fit 512 MB: an error, not an exit (child %d): %s", rc, msg);
    }
    free(z);
}

/* fine-tuning init: same network, another image size and class count */
static void test_init(void) {
    VilModel src;
    VilCheckpointMeta ms;
    if (vil_checkpoint_load(DATA "vim_p4s4.pth", &vil_backend_cpu, &(VilCheckpointOpts){.ema = 1}, &src, &ms) != 0) {
        T_CHECK(0, "load vim_p4s4.pth --ema");
        return;
    }
    VilConfig c = src.cfg;
    c.img_size = 24; /* grid 6 */
    c.num_classes = 7;
    vil_config_finalize(&c);
    VilModel m;
    vil_model_init(&m, &c, &vil_backend_cpu);
    vil_model_init_weights(&m, 5);
    float *fresh = vil_malloc(m.buf_len * 4), *got = vil_malloc(m.buf_len * 4), *s = vil_malloc(src.buf_len * 4);
    vil_model_get_params(&m, fresh);
    vil_model_get_params(&src, s);
    VilCheckpointMeta mi;
    int rc = vil_checkpoint_init(&m, DATA "vim_p4s4.pth", 1, &mi);
    T_CHECK(rc == 0 && mi.head_kept && mi.trained_grid == 4, "init from a 16-px 5-class EMA into 24 px / 7 classes");
    vil_model_get_params(&m, got);
    const VilParamInfo *pi = vil_model_find_param(&m, "layers.1.mixer.x_proj_b.weight");
    const VilParamInfo *ps = vil_model_find_param(&src, "layers.1.mixer.x_proj_b.weight");
    T_CHECK(pi && ps && memcmp(got + pi->offset, s + ps->offset, vil_param_extent(pi) * 4) == 0, "layer weights taken");
    size_t head = vil_model_find_param(&m, "head.weight")->offset, pos = vil_model_find_param(&m, "pos_embed")->offset;
    T_CHECK(memcmp(got + head, fresh + head, (size_t)7 * c.embed_dim * 4) == 0, "the head keeps its fresh weights");
    float *want = vil_malloc((size_t)(6 * 6 + 1) * c.embed_dim * 4);
    vil_pos_embed_resize(want, s + vil_model_find_param(&src, "pos_embed")->offset, 4, 6, c.embed_dim);
    T_CHECK(memcmp(got + pos, want, (size_t)(6 * 6 + 1) * c.embed_dim * 4) == 0, "pos_embed interpolated 4x4 -> 6x6");
    vil_checkpoint_meta_free(&mi);
    vil_model_free(&m);
    /* another network: refused */
    VilConfig d = src.cfg;
    d.depth = 3;
    vil_config_finalize(&d);
    vil_model_init(&m, &d, &vil_backend_cpu);
    vil_model_init_weights(&m, 5);
    T_CHECK(vil_checkpoint_init(&m, DATA "vim_p4s4.pth", 0, &mi) != 0, "depth 3 from a depth-2 file is refused");
    vil_model_free(&m);
    strcpy(d.arch, "vil");
    d.depth = 2;
    vil_config_finalize(&d);
    vil_model_init(&m, &d, &vil_backend_cpu);
    T_CHECK(vil_checkpoint_init(&m, DATA "vim_p4s4.pth", 0, &mi) != 0, "ViL from a ViM file is refused");
    vil_model_free(&m);
    free(want);
    free(fresh);
    free(got);
    free(s);
    vil_checkpoint_meta_free(&ms);
    vil_model_free(&src);
}

/* classify --json's logits of one image */
static int classify_logits(const char *args, double *lg, int k) {
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd, "bin/vil classify --device cpu --crop-pct 1 --json %s " DATA "img1.png 2>/dev/null", args);
    if (t_run(cmd, out, sizeof out) != 0) return -1;
    cJSON *o = cJSON_Parse(out);
    cJSON *l = cJSON_GetObjectItem(o, "logits");
    int n = cJSON_GetArraySize(l);
    for (int i = 0; i < n && i < k; i++) lg[i] = cJSON_GetArrayItem(l, i)->valuedouble;
    cJSON_Delete(o);
    return n == k ? 0 : -1;
}

static void test_cli(void) {
    char cmd[2048], out[16384];
    snprintf(cmd, sizeof cmd, "bin/vil convert " DATA "vim_p4s2.pth %s --ema", path("conv.safetensors"));
    T_CHECK(t_run(cmd, out, sizeof out) == 0 && strstr(out, "model_ema"), "vil convert --ema: %s", out);
    double a[5], b[5], c[5];
    char args[1024];
    snprintf(args, sizeof args, "--model %s", path("conv.safetensors"));
    int ra = classify_logits(args, a, 5);
    int rb = classify_logits("--model " DATA "vim_p4s2.pth --ema", b, 5);
    int rc = classify_logits("--model " DATA "vim_p4s2.pth", c, 5);
    T_CHECK(ra == 0 && rb == 0 && rc == 0, "classify the .pth, its model_ema, and the converted file");
    if (ra == 0 && rb == 0) {
        T_CHECK(memcmp(a, b, sizeof a) == 0, "converted and .pth --ema give the same logits (%.9g vs %.9g)", a[0], b[0]);
        double *ref = read_ref("vim_p4s2", "ema", 15);
        float got[5];
        for (int i = 0; i < 5; i++) got[i] = (float)a[i];
        /* img1.png is the second image of inputs.f32: classify's transform gives the same input */
        T_CLOSE("classify img1.png (PNG, normalize) vs float64 torch", ref ? rel_err(got, ref + 5, 5) : 1, 1e-5);
        free(ref);
        T_CHECK(rc == 0 && fabs(a[0] - c[0]) > 1e-3, "without --ema the model's logits differ");
    }
    /* the converted file: vil metadata, the source recorded, official names */
    VilSafetensors st;
    if (vil_st_read(path("conv.safetensors"), &st) == 0) {
        const char *src = vil_st_meta(&st, "vil.source");
        T_CHECK(vil_st_meta(&st, "vil.config") && vil_st_meta(&st, "vil.img_size") &&
                    src && strstr(src, "vim_p4s2.pth:model_ema"),
                "converted metadata: config, image size, source '%s'", src ? src : "");
        T_CHECK(st.n_tensors > 0 && strcmp(st.tensors[0].name, "cls_token") == 0 &&
                    vil_st_find(&st, "layers.1.mixer.A_b_log"), "official tensor names");
        vil_st_free(&st);
    }
    /* info on a .pth */
    T_CHECK(t_run("bin/vil info --model " DATA "vil_p4s4.pth --ema", out, sizeof out) == 0 &&
                strstr(out, "model_ema") && strstr(out, "epoch:       299") && strstr(out, "Longhorn"),
            "info on a .pth --ema: %s", out);
    /* exit codes: a hostile file and misuse */
    Buf p = {0};
    op(&p, 0x80), op(&p, 2);
    glob(&p, "posix", "system");
    ustr(&p, "touch /tmp/vil_pwned_cli");
    op(&p, 0x85), op(&p, 'R'), op(&p, '.');
    Entry e = {"evil/data.pkl", p.b, p.n};
    write_zip(path("evil.pth"), &e, 1);
    snprintf(cmd, sizeof cmd, "bin/vil info --model %s 2>&1", path("evil.pth"));
    int r = t_run(cmd, out, sizeof out);
    FILE *f = fopen("/tmp/vil_pwned_cli", "r");
    T_CHECK(r == 1 && strstr(out, "posix.system") && !f, "a pickle calling os.system: exit %d, '%s'", r, out);
    if (f) fclose(f);
    free(p.b);
    snprintf(cmd, sizeof cmd, "bin/vil classify --model %s --crop-pct 1 " DATA "img0.png 2>&1", path("evil.pth"));
    T_CHECK(t_run(cmd, out, sizeof out) == 1, "classify with it: exit 1");
    T_CHECK(t_run("bin/vil info --model " DATA "vim_p4s4_noema.pth --ema 2>&1", out, sizeof out) == 1 &&
                strstr(out, "no model_ema"), "--ema without model_ema: exit 1, '%s'", out);
    T_CHECK(t_run("bin/vil info --model " DATA "img0.png --ema 2>&1", out, sizeof out) == 1 &&
                strstr(out, "safetensors"), "--ema on a non-.pth file: exit 1: %s", out);
    T_CHECK(t_run("bin/vil convert " DATA "vim_p4s4.pth 2>/dev/null", NULL, 0) == 2, "convert with one file: exit 2");
    snprintf(cmd, sizeof cmd, "bin/vil convert " DATA "vim_p4s4.pth %s --names %s 2>&1", path("n.safetensors"), DATA "cases.txt");
    T_CHECK(t_run(cmd, out, sizeof out) == 1, "--names with the wrong count: exit 1: %s", out);
}

int main(void) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_pickle_values();
    test_pickle_refusals();
    test_archives();
    test_files();
    test_broken_files();
    test_hostile_pth();
    test_init();
    test_cli();
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return t_finish();
}
