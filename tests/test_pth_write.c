#define _GNU_SOURCE
/* test_pth_write.c: the .pth vil writes. The pickle writer against the bytes of Python's own
 * pickler (protocol 2, no memo: pickle._Pickler with fast = True) and each misuse refused; the
 * archive walked by the zip format's local headers (stored entries in torch's order, data 64-byte
 * aligned, CRCs by zlib) and read back by vil's reader; ViL and ViM models saved as .pth and as
 * safetensors, read back alike (weights bit for bit, config, class names, evaluation, metadata);
 * vil_metadata held to the checks of safetensors metadata; and `vil convert` writing .pth and
 * refusing any other output name (exit 2, nothing written). torch.load's view of the same files
 * is tests/test_pth_reference.sh. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>
#include <zlib.h>

#include "testing.h"
#include "formats/checkpoint.h"
#include "formats/pickle.h"
#include "formats/pickle_write.h"
#include "formats/pth.h"
#include "formats/safetensors.h"
#include "vil/common.h"

#define DATA "tests/data/pth/"
static char dir[] = "/tmp/vil_test_pth_write_XXXXXX";

static const char *path(const char *name) { return t_path(dir, name); }

/* ---------------- the pickle writer ---------------- */

/* Python 3.11, pickle._Pickler(f, 2) with fast = True, dumping
 * {'s': 'h\u00e9llo \u2713', 'ints': (0, 255, 256, 65535, 65536, -1, -2**31, 2**31-1, 2**31,
 *  -2**31-1, 2**40, -2**40, 2**63-1, -2**63), 'od': OrderedDict([('a', 1), ('b', ())]),
 *  'one': {'k': 'v'}, 'empty': {}, 't1': (1,), 't3': (1, 2, 3), 'nested': ((),)} */
static const unsigned char PY_REF[] =
    "\x80\x02\x7d\x28\x58\x01\x00\x00\x00\x73\x58\x0a\x00\x00\x00\x68\xc3\xa9\x6c\x6c\x6f\x20\xe2\x9c"
    "\x93\x58\x04\x00\x00\x00\x69\x6e\x74\x73\x28\x4b\x00\x4b\xff\x4d\x00\x01\x4d\xff\xff\x4a\x00\x00"
    "\x01\x00\x4a\xff\xff\xff\xff\x4a\x00\x00\x00\x80\x4a\xff\xff\xff\x7f\x8a\x05\x00\x00\x00\x80\x00"
    "\x8a\x05\xff\xff\xff\x7f\xff\x8a\x06\x00\x00\x00\x00\x00\x01\x8a\x06\x00\x00\x00\x00\x00\xff\x8a"
    "\x08\xff\xff\xff\xff\xff\xff\xff\x7f\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80\x74\x58\x02\x00\x00"
    "\x00\x6f\x64\x63\x63\x6f\x6c\x6c\x65\x63\x74\x69\x6f\x6e\x73\x0a\x4f\x72\x64\x65\x72\x65\x64\x44"
    "\x69\x63\x74\x0a\x29\x52\x28\x58\x01\x00\x00\x00\x61\x4b\x01\x58\x01\x00\x00\x00\x62\x29\x75\x58"
    "\x03\x00\x00\x00\x6f\x6e\x65\x7d\x58\x01\x00\x00\x00\x6b\x58\x01\x00\x00\x00\x76\x73\x58\x05\x00"
    "\x00\x00\x65\x6d\x70\x74\x79\x7d\x58\x02\x00\x00\x00\x74\x31\x4b\x01\x85\x58\x02\x00\x00\x00\x74"
    "\x33\x4b\x01\x4b\x02\x4b\x03\x87\x58\x06\x00\x00\x00\x6e\x65\x73\x74\x65\x64\x29\x85\x75\x2e";

static const int64_t INTS[] = {0, 255, 256, 65535, 65536, -1, INT32_MIN, INT32_MAX, (int64_t)1 << 31,
                               (int64_t)INT32_MIN - 1, (int64_t)1 << 40, -((int64_t)1 << 40),
                               INT64_MAX, INT64_MIN};

static void test_pickle_python(void) {
    VilPkWriter *w = vil_pkw_new();
    vil_pkw_dict_begin(w, 0, 8);
    vil_pkw_str(w, "s");
    vil_pkw_str(w, "h\xc3\xa9llo \xe2\x9c\x93");
    vil_pkw_str(w, "ints");
    int n_ints = (int)(sizeof INTS / sizeof INTS[0]);
    vil_pkw_tuple_begin(w, n_ints);
    for (int i = 0; i < n_ints; i++) vil_pkw_int(w, INTS[i]);
    vil_pkw_tuple_end(w);
    vil_pkw_str(w, "od");
    vil_pkw_dict_begin(w, 1, 2);
    vil_pkw_str(w, "a");
    vil_pkw_int(w, 1);
    vil_pkw_str(w, "b");
    vil_pkw_tuple_begin(w, 0);
    vil_pkw_tuple_end(w);
    vil_pkw_dict_end(w);
    vil_pkw_str(w, "one");
    vil_pkw_dict_begin(w, 0, 1);
    vil_pkw_str(w, "k");
    vil_pkw_str(w, "v");
    vil_pkw_dict_end(w);
    vil_pkw_str(w, "empty");
    vil_pkw_dict_begin(w, 0, 0);
    vil_pkw_dict_end(w);
    vil_pkw_str(w, "t1");
    vil_pkw_tuple_begin(w, 1);
    vil_pkw_int(w, 1);
    vil_pkw_tuple_end(w);
    vil_pkw_str(w, "t3");
    vil_pkw_tuple_begin(w, 3);
    for (int i = 1; i <= 3; i++) vil_pkw_int(w, i);
    vil_pkw_tuple_end(w);
    vil_pkw_str(w, "nested");
    vil_pkw_tuple_begin(w, 1);
    vil_pkw_tuple_begin(w, 0);
    vil_pkw_tuple_end(w);
    vil_pkw_tuple_end(w);
    vil_pkw_dict_end(w);
    unsigned char *b = NULL;
    size_t n = 0;
    int rc = vil_pkw_finish(w, &b, &n);
    vil_pkw_free(w);
    T_CHECK(rc == 0 && n == sizeof PY_REF - 1 && memcmp(b, PY_REF, n) == 0,
            "every value kind: the bytes of Python's pickler (%zu bytes, want %zu)", n, sizeof PY_REF - 1);
    /* and vil's reader takes them */
    VilPickle *pk = rc == 0 ? vil_pickle_load(b, n) : NULL;
    const VilPkObj *ints = pk ? vil_pk_get(vil_pickle_root(pk), "ints") : NULL;
    int same = ints && ints->kind == VIL_PK_TUPLE && ints->n == n_ints;
    for (int i = 0; same && i < n_ints; i++) same = ints->items[i]->i == INTS[i];
    const VilPkObj *od = pk ? vil_pk_get(vil_pickle_root(pk), "od") : NULL;
    T_CHECK(same && od && od->cls == VIL_PK_CLS_ORDERED_DICT, "vil's reader reads the ints back and the OrderedDict");
    vil_pickle_free(pk);
    free(b);

    /* dicts across SETITEMS batches of 1000: length and zlib.crc32 of Python's pickle of
     * {str(i): i for i in range(n)} */
    static const struct {
        long n;
        size_t len;
        uint32_t crc;
    } BIG[] = {{1000, 10640, 0x244bd881}, {1001, 10653, 0x30471ff9}, {2001, 22655, 0x3804cc18}};
    for (size_t k = 0; k < sizeof BIG / sizeof BIG[0]; k++) {
        w = vil_pkw_new();
        vil_pkw_dict_begin(w, 0, BIG[k].n);
        for (long i = 0; i < BIG[k].n; i++) {
            char key[24];
            snprintf(key, sizeof key, "%ld", i);
            vil_pkw_str(w, key);
            vil_pkw_int(w, i);
        }
        vil_pkw_dict_end(w);
        rc = vil_pkw_finish(w, &b, &n);
        vil_pkw_free(w);
        uint32_t crc = rc == 0 ? (uint32_t)crc32(0, b, (uInt)n) : 0;
        T_CHECK(rc == 0 && n == BIG[k].len && crc == BIG[k].crc,
                "a dict of %ld items in batches as Python's: %zu bytes crc %08x (want %zu, %08x)",
                BIG[k].n, n, crc, BIG[k].len, BIG[k].crc);
        free(b);
    }
}

/* a writer that a test misuses: finish must refuse with want in the message */
static void expect_misuse(VilPkWriter *w, const char *what, const char *want) {
    unsigned char *b = NULL;
    size_t n = 0;
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_pkw_finish(w, &b, &n);
    vil_error_release(&cap);
    T_CHECK(rc == -1 && !b && strstr(cap.msg, want), "%s: rc %d, '%s' (want '%s')", what, rc, cap.msg, want);
    free(b);
    vil_pkw_free(w);
}

static void test_pickle_misuse(void) {
    VilPkWriter *w = vil_pkw_new();
    expect_misuse(w, "nothing written", "nothing was written");
    w = vil_pkw_new();
    vil_pkw_dict_begin(w, 0, 2);
    vil_pkw_str(w, "a");
    vil_pkw_int(w, 1);
    vil_pkw_dict_end(w);
    expect_misuse(w, "a dict of 2 with 1 pair", "declared with 2 entries");
    w = vil_pkw_new();
    vil_pkw_tuple_begin(w, 1);
    vil_pkw_int(w, 1);
    vil_pkw_int(w, 2);
    vil_pkw_tuple_end(w);
    expect_misuse(w, "a tuple of 1 with 2 values", "more values");
    w = vil_pkw_new();
    vil_pkw_tuple_end(w);
    expect_misuse(w, "an end without a begin", "not begun");
    w = vil_pkw_new();
    vil_pkw_dict_begin(w, 0, 1);
    expect_misuse(w, "an unfinished dict", "not ended");
    w = vil_pkw_new();
    vil_pkw_int(w, 1);
    vil_pkw_int(w, 2);
    expect_misuse(w, "two roots", "second value");
    w = vil_pkw_new();
    vil_pkw_str(w, "caf\xe9");
    expect_misuse(w, "Latin-1 bytes", "not valid UTF-8");
    w = vil_pkw_new();
    int64_t shape[1] = {4};
    vil_pkw_tensor(w, VIL_PK_F32, "../0", 1, shape);
    expect_misuse(w, "a storage key with a path", "storage key");
    w = vil_pkw_new();
    int64_t huge[3] = {1 << 20, 1 << 20, 1 << 20};
    vil_pkw_tensor(w, VIL_PK_F32, "0", 3, huge);
    expect_misuse(w, "a tensor of 2^60 elements", "size");
    w = vil_pkw_new();
    for (int i = 0; i < 70; i++) vil_pkw_tuple_begin(w, 1);
    expect_misuse(w, "70 nested tuples", "nested deeper");
}

/* ---------------- the archive ---------------- */

static uint64_t rd(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

typedef struct {
    char name[64];
    unsigned method, flags;
    uint32_t crc;
    uint64_t size, data; /* bytes; where the data starts */
} LocalEntry;

/* The local file headers of a zip archive, in file order (APPNOTE 4.3.7: signature PK\3\4,
 * version, flags, method, time, date, crc-32, sizes, name and extra lengths, name, extra, data),
 * up to the central directory (PK\1\2). The count, or -1 when the bytes do not walk. */
static int walk_zip(const unsigned char *b, size_t n, LocalEntry *e, int max) {
    size_t at = 0;
    int k = 0;
    while (at + 4 <= n && memcmp(b + at, "PK\003\004", 4) == 0) {
        if (k == max || at + 30 > n) return -1;
        size_t nl = (size_t)rd(b + at + 26, 2), xl = (size_t)rd(b + at + 28, 2);
        LocalEntry *x = &e[k++];
        x->flags = (unsigned)rd(b + at + 6, 2);
        x->method = (unsigned)rd(b + at + 8, 2);
        x->crc = (uint32_t)rd(b + at + 14, 4);
        x->size = rd(b + at + 18, 4);
        if (nl >= sizeof x->name || rd(b + at + 22, 4) != x->size || (x->flags & 8)) return -1;
        memcpy(x->name, b + at + 30, nl);
        x->name[nl] = 0;
        x->data = at + 30 + nl + xl;
        at = (size_t)(x->data + x->size);
        if (at > n) return -1;
    }
    return at + 4 <= n && memcmp(b + at, "PK\001\002", 4) == 0 ? k : -1;
}

static void test_archive(void) {
    float w[6] = {1.5f, -2, 3.25f, 0, -0.0f, 1e-30f};
    uint16_t h[5] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x8000};
    int64_t i64 = -((int64_t)1 << 40);
    unsigned char bools[3] = {1, 0, 1};
    VilStTensor t[5] = {
        {.name = "w", .dtype = VIL_ST_F32, .ndim = 2, .shape = {2, 3}, .data = w},
        {.name = "layers.0.h\xc3\xa9", .dtype = VIL_ST_F16, .ndim = 1, .shape = {5}, .data = h},
        {.name = "scalar", .dtype = VIL_ST_I64, .ndim = 0, .data = &i64},
        {.name = "empty", .dtype = VIL_ST_F32, .ndim = 2, .shape = {0, 4}, .data = NULL},
        {.name = "mask", .dtype = VIL_ST_BOOL, .ndim = 1, .shape = {3}, .data = bools},
    };
    const void *bytes[5] = {w, h, &i64, NULL, bools};
    size_t nbytes[5] = {sizeof w, sizeof h, sizeof i64, 0, sizeof bools};
    char *keys[2] = {"vil.step", "k\xc3\xa9y"}, *vals[2] = {"7", "v \xe2\x9c\x93"};
    unsigned char *b = NULL;
    size_t n = 0;
    int rc = vil_pth_serialize(t, 5, keys, vals, 2, &b, &n);
    T_CHECK(rc == 0, "serialize 5 tensors of 4 dtypes and 2 metadata entries");
    if (rc != 0) return;
    T_CHECK(vil_pth_sniff(b, n) == 1, "a zip archive, as vil_pth_sniff sees it");

    LocalEntry e[16];
    int k = walk_zip(b, n, e, 16);
    static const char *const NAMES[] = {"archive/data.pkl", "archive/byteorder", "archive/data/0", "archive/data/1",
                                        "archive/data/2", "archive/data/3", "archive/data/4", "archive/version"};
    int names = k == 8, stored = k == 8, aligned = k == 8, crcs = k == 8;
    for (int i = 0; i < k && i < 8; i++) {
        names &= strcmp(e[i].name, NAMES[i]) == 0;
        stored &= e[i].method == 0;
        aligned &= e[i].data % 64 == 0;
        crcs &= (uint32_t)crc32(0, b + e[i].data, (uInt)e[i].size) == e[i].crc;
    }
    T_CHECK(names, "entries in torch.save's order under archive/ (%d walked)", k);
    T_CHECK(stored, "every entry stored (method 0)");
    T_CHECK(aligned, "every entry's data at a multiple of 64 bytes, as torch.save lays it out");
    T_CHECK(crcs, "each CRC-32 (zlib's) matches its data");
    if (k == 8) {
        int data = 1;
        for (int i = 0; i < 5; i++)
            data &= e[2 + i].size == nbytes[i] && (!nbytes[i] || memcmp(b + e[2 + i].data, bytes[i], nbytes[i]) == 0);
        T_CHECK(data, "each storage entry holds its tensor's bytes");
        T_CHECK(e[7].size == 2 && memcmp(b + e[7].data, "3\n", 2) == 0, "version '3\\n'");
        T_CHECK(e[1].size == 6 && memcmp(b + e[1].data, "little", 6) == 0, "byteorder 'little'");
    }

    VilSafetensors st;
    VilPthInfo info;
    rc = vil_pth_parse(b, n, 0, &st, &info);
    T_CHECK(rc == 0, "vil's reader reads the archive");
    if (rc == 0) {
        int same = st.n_tensors == 5;
        for (int i = 0; same && i < 5; i++) {
            const VilStTensor *x = &st.tensors[i];
            same = strcmp(x->name, t[i].name) == 0 && x->dtype == t[i].dtype && x->ndim == t[i].ndim &&
                   x->nbytes == nbytes[i] && (!nbytes[i] || memcmp(x->data, bytes[i], nbytes[i]) == 0);
            for (int d = 0; same && d < x->ndim; d++) same = x->shape[d] == t[i].shape[d];
        }
        T_CHECK(same, "names, order, dtypes, shapes and bytes read back");
        T_CHECK(st.n_meta == 2 && strcmp(st.meta_keys[0], keys[0]) == 0 && strcmp(st.meta_vals[0], vals[0]) == 0 &&
                    strcmp(st.meta_keys[1], keys[1]) == 0 && strcmp(st.meta_vals[1], vals[1]) == 0,
                "the metadata read back, in order (%d entries)", st.n_meta);
        T_CHECK(strcmp(info.weights, "model") == 0 && strcmp(info.keys, "model, vil_metadata") == 0,
                "the state dict is 'model' (keys: %s)", info.keys);
        vil_st_free(&st);
    }
    /* the same input gives the same bytes (a fixed time in the headers) */
    unsigned char *b2 = NULL;
    size_t n2 = 0;
    T_CHECK(vil_pth_serialize(t, 5, keys, vals, 2, &b2, &n2) == 0 && n2 == n && memcmp(b, b2, n) == 0,
            "the same tensors give the same bytes");
    free(b2);
    free(b);

    /* no metadata: no vil_metadata entry, and the reader does without */
    rc = vil_pth_serialize(t, 1, NULL, NULL, 0, &b, &n);
    T_CHECK(rc == 0 && vil_pth_parse(b, n, 0, &st, &info) == 0 && st.n_meta == 0 && strcmp(info.keys, "model") == 0,
            "without metadata: {'model': ...} alone, read with no metadata");
    if (rc == 0) vil_st_free(&st);
    free(b);

    /* misuse: VIL_EUSAGE, nothing out */
    VilStTensor twice[2] = {t[0], t[0]}, u8 = t[0], unnamed = t[0], nodata = t[0];
    u8.dtype = VIL_ST_U8;
    unnamed.name = "";
    nodata.data = NULL;
    char *dkeys[2] = {"a", "a"}, *dvals[2] = {"1", "2"};
    struct {
        const char *what, *want;
        const VilStTensor *t;
        int n;
        char **k, **v;
        int nm;
    } bad[] = {
        {"a tensor name twice", "given twice", twice, 2, NULL, NULL, 0},
        {"a U8 tensor", "no torch storage type", &u8, 1, NULL, NULL, 0},
        {"an empty name", "empty", &unnamed, 1, NULL, NULL, 0},
        {"no data", "no data", &nodata, 1, NULL, NULL, 0},
        {"a metadata key twice", "given twice", t, 1, dkeys, dvals, 2},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        VilErrCapture cap;
        vil_error_capture(&cap);
        b = (unsigned char *)"x";
        rc = vil_pth_serialize(bad[i].t, bad[i].n, bad[i].k, bad[i].v, bad[i].nm, &b, &n);
        vil_error_release(&cap);
        T_CHECK(rc == VIL_EUSAGE && !b && strstr(cap.msg, bad[i].want), "%s: rc %d, '%s'", bad[i].what, rc, cap.msg);
    }
}

/* ---------------- models ---------------- */

static void small(VilConfig *c, const char *arch, int stride) {
    vil_config_default(c);
    strcpy(c->arch, arch);
    strcpy(c->name, "pth_test");
    c->img_size = 16;
    c->patch_size = 4;
    c->stride = stride;
    c->embed_dim = 8;
    c->depth = 2;
    c->d_state = 4;
    c->num_classes = 3;
    vil_config_finalize(c);
}

static int same_params(const VilModel *a, const VilModel *b) {
    if (a->buf_len != b->buf_len) return 0;
    float *x = vil_malloc(a->buf_len * 4), *y = vil_malloc(b->buf_len * 4);
    vil_model_get_params(a, x);
    vil_model_get_params(b, y);
    int same = memcmp(x, y, a->buf_len * 4) == 0;
    free(x);
    free(y);
    return same;
}

/* m saved as .pth and as safetensors reads back alike: the weights bit for bit, the config,
 * the class names, the evaluation transform; the .pth's tensors and metadata are the
 * safetensors file's (without its "format": "pt") */
static void test_model(const char *arch, int stride) {
    VilConfig c;
    small(&c, arch, stride);
    VilModel m;
    vil_model_init(&m, &c, &vil_backend_cpu);
    vil_model_init_weights(&m, 5);
    char *names[3] = {"cat", "dog, large", "\"quoted\" caf\xc3\xa9"};
    VilEvalSpec ev = {.crop_pct = 0.9f, .has_norm = 1, .mean = {0.5f, 0.25f, 0.125f}, .std = {0.2f, 0.3f, 0.4f}};
    char fp[64], fs[64];
    snprintf(fp, sizeof fp, "%s_s%d.pth", arch, stride);
    snprintf(fs, sizeof fs, "%s_s%d.safetensors", arch, stride);
    const char *p = vil_strdup(path(fp)), *s = vil_strdup(path(fs));
    T_CHECK(vil_checkpoint_save_from(&m, p, names, 3, &ev, "somewhere.pth:model") == 0, "%s: save .pth", arch);
    T_CHECK(vil_checkpoint_save_from(&m, s, names, 3, &ev, "somewhere.pth:model") == 0, "%s: save safetensors", arch);
    VilModel r;
    VilCheckpointMeta meta;
    int rc = vil_checkpoint_load(p, &vil_backend_cpu, NULL, &r, &meta);
    T_CHECK(rc == 0, "%s stride %d: the .pth loads", arch, stride);
    if (rc == 0) {
        T_CHECK(same_params(&m, &r), "%s: the weights bit for bit", arch);
        T_CHECK(memcmp(&r.cfg, &m.cfg, sizeof c) == 0 && !meta.config_inferred,
                "%s: the config from vil_metadata (img %d stride %d)", arch, r.cfg.img_size, r.cfg.stride);
        T_CHECK(strcmp(meta.format, "pth") == 0 && strcmp(meta.weights, "model") == 0 && meta.step == 0,
                "%s: a .pth, its 'model', step 0", arch);
        int cn = meta.class_names != NULL;
        for (int i = 0; cn && i < 3; i++) cn = strcmp(meta.class_names[i], names[i]) == 0;
        T_CHECK(cn, "%s: the class names", arch);
        T_CHECK(meta.eval.crop_pct == ev.crop_pct && meta.eval.has_norm && meta.eval.mean[2] == ev.mean[2] &&
                    meta.eval.std[1] == ev.std[1] && strcmp(meta.eval_from, "the checkpoint") == 0,
                "%s: the evaluation transform", arch);
        vil_checkpoint_meta_free(&meta);
        vil_model_free(&r);
    }
    VilSafetensors a, b;
    VilPthInfo info;
    int ra = vil_pth_read(p, 0, &a, &info), rb = vil_st_read(s, &b);
    T_CHECK(ra == 0 && rb == 0, "%s: both read as tensors", arch);
    if (ra == 0 && rb == 0) {
        int same = a.n_tensors == b.n_tensors && a.n_tensors == m.n_tensors;
        for (int i = 0; same && i < a.n_tensors; i++)
            same = strcmp(a.tensors[i].name, b.tensors[i].name) == 0 &&
                   strcmp(a.tensors[i].name, m.info[i].name) == 0 && a.tensors[i].nbytes == b.tensors[i].nbytes &&
                   memcmp(a.tensors[i].data, b.tensors[i].data, a.tensors[i].nbytes) == 0;
        T_CHECK(same, "%s: the .pth holds the safetensors file's tensors, in the parameter table's order", arch);
        int meta_same = b.n_meta == a.n_meta + 1 && strcmp(b.meta_keys[0], "format") == 0;
        for (int i = 0; meta_same && i < a.n_meta; i++)
            meta_same = strcmp(a.meta_keys[i], b.meta_keys[i + 1]) == 0 && strcmp(a.meta_vals[i], b.meta_vals[i + 1]) == 0;
        T_CHECK(meta_same, "%s: vil_metadata is the safetensors metadata less 'format' (%d vs %d)", arch, a.n_meta, b.n_meta);
    }
    if (ra == 0) vil_st_free(&a);
    if (rb == 0) vil_st_free(&b);
    free((void *)p);
    free((void *)s);
    vil_model_free(&m);
}

/* ---------------- vil_metadata's checks ---------------- */

/* a zip file of data.pkl = pk and archive/data/0 = 4 floats, as bytes */
static unsigned char *zip_with(const unsigned char *pk, size_t pn, size_t *n) {
    static const float data[4] = {1, 2, 3, 4};
    const char *f = path("hand.zip");
    int err;
    zip_t *za = zip_open(f, ZIP_CREATE | ZIP_TRUNCATE, &err);
    if (!za) return NULL;
    zip_source_t *a = zip_source_buffer(za, pk, pn, 0), *d = zip_source_buffer(za, data, sizeof data, 0);
    if (zip_file_add(za, "archive/data.pkl", a, 0) < 0 || zip_file_add(za, "archive/data/0", d, 0) < 0 ||
        zip_close(za) != 0) {
        zip_discard(za);
        return NULL;
    }
    return vil_read_file(f, n);
}

/* {'model': OrderedDict(w: 4 floats), 'vil_metadata': what meta writes} */
static unsigned char *pickle_with(void (*meta)(VilPkWriter *), size_t *n) {
    VilPkWriter *w = vil_pkw_new();
    vil_pkw_dict_begin(w, 0, 2);
    vil_pkw_str(w, "model");
    vil_pkw_dict_begin(w, 1, 1);
    vil_pkw_str(w, "w");
    int64_t shape[1] = {4};
    vil_pkw_tensor(w, VIL_PK_F32, "0", 1, shape);
    vil_pkw_dict_end(w);
    vil_pkw_str(w, VIL_PTH_META_KEY);
    meta(w);
    vil_pkw_dict_end(w);
    unsigned char *b = NULL;
    if (vil_pkw_finish(w, &b, n) != 0) b = NULL;
    vil_pkw_free(w);
    return b;
}

static void meta_int(VilPkWriter *w) { vil_pkw_int(w, 5); }
static void meta_int_value(VilPkWriter *w) {
    vil_pkw_dict_begin(w, 0, 1);
    vil_pkw_str(w, "vil.step");
    vil_pkw_int(w, 7);
    vil_pkw_dict_end(w);
}
static void meta_twice(VilPkWriter *w) {
    vil_pkw_dict_begin(w, 0, 2);
    vil_pkw_str(w, "vil.step");
    vil_pkw_str(w, "1");
    vil_pkw_str(w, "vil.step");
    vil_pkw_str(w, "2");
    vil_pkw_dict_end(w);
}
static void meta_nul(VilPkWriter *w) { /* the '#' becomes a NUL byte below */
    vil_pkw_dict_begin(w, 0, 1);
    vil_pkw_str(w, "vil.st#p");
    vil_pkw_str(w, "1");
    vil_pkw_dict_end(w);
}
static void meta_tuple_key(VilPkWriter *w) {
    vil_pkw_dict_begin(w, 0, 1);
    vil_pkw_tuple_begin(w, 0);
    vil_pkw_tuple_end(w);
    vil_pkw_str(w, "1");
    vil_pkw_dict_end(w);
}
static void meta_ordered(VilPkWriter *w) {
    vil_pkw_dict_begin(w, 1, 1);
    vil_pkw_str(w, "vil.step");
    vil_pkw_str(w, "3");
    vil_pkw_dict_end(w);
}

static void test_metadata_checks(void) {
    struct {
        const char *what, *want;
        void (*meta)(VilPkWriter *);
    } bad[] = {
        {"vil_metadata an int", "'vil_metadata' is an int, not a dict of strings", meta_int},
        {"an int value", "metadata values must be strings", meta_int_value},
        {"a key twice", "appears twice", meta_twice},
        {"a NUL inside a key", "without NUL bytes", meta_nul},
        {"a tuple for a key", "not a string", meta_tuple_key},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t pn = 0, zn = 0;
        unsigned char *pk = pickle_with(bad[i].meta, &pn);
        if (pk && bad[i].meta == meta_nul) *(unsigned char *)memchr(pk, '#', pn) = 0;
        unsigned char *z = pk ? zip_with(pk, pn, &zn) : NULL;
        VilSafetensors st;
        VilPthInfo info;
        VilErrCapture cap;
        vil_error_capture(&cap);
        int rc = z ? vil_pth_parse(z, zn, 0, &st, &info) : -2;
        vil_error_release(&cap);
        T_CHECK(rc == -1 && strstr(cap.msg, bad[i].want), "%s: rc %d, '%s' (want '%s')", bad[i].what, rc, cap.msg, bad[i].want);
        if (rc == 0) vil_st_free(&st);
        free(z);
        free(pk);
    }
    /* an OrderedDict of strings is taken */
    size_t pn = 0, zn = 0;
    unsigned char *pk = pickle_with(meta_ordered, &pn), *z = pk ? zip_with(pk, pn, &zn) : NULL;
    VilSafetensors st;
    VilPthInfo info;
    int rc = z ? vil_pth_parse(z, zn, 0, &st, &info) : -2;
    T_CHECK(rc == 0 && st.n_meta == 1 && strcmp(vil_st_meta(&st, "vil.step"), "3") == 0, "an OrderedDict of strings is metadata");
    if (rc == 0) vil_st_free(&st);
    free(z);
    free(pk);

    /* what the keys say is checked as in a safetensors file: a model's tensors with broken
     * metadata values */
    VilConfig c;
    small(&c, "vim", 4);
    VilModel m;
    vil_model_init(&m, &c, &vil_backend_cpu);
    vil_model_init_weights(&m, 3);
    const char *good = vil_strdup(path("good.pth"));
    T_CHECK(vil_checkpoint_save_from(&m, good, NULL, 0, NULL, NULL) == 0, "save a model as .pth");
    VilSafetensors t;
    if (vil_pth_read(good, 0, &t, &info) == 0) {
        struct {
            const char *key, *val, *want;
        } broken[] = {
            {"vil.config", "{", "bad vil.config metadata"},
            {"vil.class_names", "[\"one\"]", "1 class names for a head of 3 classes"},
            {"vil.eval", "{\"crop_pct\": 2}", "vil.eval is not"},
            {"vil.format", "vil-train-state", "is a training state"},
        };
        for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++) {
            char *keys[8], *vals[8];
            int n = 0, replaced = 0;
            for (int k = 0; k < t.n_meta && n < 7; k++, n++) {
                keys[n] = t.meta_keys[k];
                vals[n] = t.meta_vals[k];
                if (strcmp(keys[n], broken[i].key) == 0) vals[n] = (char *)broken[i].val, replaced = 1;
            }
            if (!replaced) keys[n] = (char *)broken[i].key, vals[n++] = (char *)broken[i].val;
            const char *f = path("broken.pth");
            T_CHECK(vil_pth_write(f, t.tensors, t.n_tensors, keys, vals, n) == 0, "write with %s", broken[i].key);
            VilModel r;
            VilCheckpointMeta meta;
            VilErrCapture cap;
            vil_error_capture(&cap);
            rc = vil_checkpoint_load(f, &vil_backend_cpu, NULL, &r, &meta);
            vil_error_release(&cap);
            T_CHECK(rc != 0 && strstr(cap.msg, broken[i].want), "%s '%s' refused as in safetensors: '%s'",
                    broken[i].key, broken[i].val, cap.msg);
            if (rc == 0) {
                vil_checkpoint_meta_free(&meta);
                vil_model_free(&r);
            }
        }
        vil_st_free(&t);
    } else {
        T_CHECK(0, "read good.pth back");
    }
    free((void *)good);
    vil_model_free(&m);
}

/* ---------------- vil convert ---------------- */

static int read_head(const char *f, unsigned char *head, size_t n) {
    FILE *fp = fopen(f, "rb");
    if (!fp) return -1;
    size_t got = fread(head, 1, n, fp);
    fclose(fp);
    return got == n ? 0 : -1;
}

static int files_in(const char *d) {
    DIR *dp = opendir(d);
    if (!dp) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dp)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
    closedir(dp);
    return n;
}

static void test_cli(void) {
    char cmd[4096], out[8192];
    unsigned char head[4];
    /* ViM (model) and ViL (model_ema) from the official layout to .pth */
    static const struct {
        const char *src, *flags, *out, *arch;
    } cases[] = {{DATA "vim_p4s2.pth", "", "vim.pth", "vim"}, {DATA "vil_p4s4.pth", "--ema", "vil.pth", "vil"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *o = path(cases[i].out);
        snprintf(cmd, sizeof cmd, "bin/vil convert %s %s %s 2>&1", cases[i].src, o, cases[i].flags);
        int rc = t_run(cmd, out, sizeof out);
        T_CHECK(rc == 0, "vil convert %s %s: exit %d: %s", cases[i].src, cases[i].out, rc, out);
        T_CHECK(read_head(o, head, 4) == 0 && memcmp(head, "PK\003\004", 4) == 0,
                "%s is a zip archive, not safetensors bytes under a .pth name", cases[i].out);
        /* the same weights as the source's, through vil's reader */
        VilModel a, b;
        VilCheckpointMeta ma, mb;
        int ra = vil_checkpoint_load(cases[i].src, &vil_backend_cpu, &(VilCheckpointOpts){.ema = cases[i].flags[0] != 0}, &a, &ma);
        int rb = vil_checkpoint_load(o, &vil_backend_cpu, NULL, &b, &mb);
        T_CHECK(ra == 0 && rb == 0 && strcmp(mb.format, "pth") == 0 && strcmp(b.cfg.arch, cases[i].arch) == 0 &&
                    b.cfg.stride == a.cfg.stride && same_params(&a, &b),
                "%s reads back as the source's %s model (stride %d), weights bit for bit", cases[i].out,
                cases[i].arch, rb == 0 ? b.cfg.stride : -1);
        if (ra == 0) {
            vil_checkpoint_meta_free(&ma);
            vil_model_free(&a);
        }
        if (rb == 0) {
            vil_checkpoint_meta_free(&mb);
            vil_model_free(&b);
        }
    }
    /* .pth -> safetensors -> .pth: the safetensors file's tensors are the first .pth's */
    snprintf(cmd, sizeof cmd, "bin/vil convert %s %s >/dev/null 2>&1 && bin/vil convert %s %s >/dev/null 2>&1",
             path("vim.pth"), path("vim.safetensors"), path("vim.safetensors"), path("VIM.PTH"));
    T_CHECK(t_run(cmd, NULL, 0) == 0, "vil convert X.pth Y.safetensors, then Y.safetensors Z.PTH (any case)");
    VilSafetensors x, y;
    VilPthInfo info;
    int rx = vil_pth_read(path("vim.pth"), 0, &x, &info), ry = vil_pth_read(path("VIM.PTH"), 0, &y, &info);
    int same = rx == 0 && ry == 0 && x.n_tensors == y.n_tensors;
    for (int i = 0; same && i < x.n_tensors; i++)
        same = strcmp(x.tensors[i].name, y.tensors[i].name) == 0 && x.tensors[i].nbytes == y.tensors[i].nbytes &&
               memcmp(x.tensors[i].data, y.tensors[i].data, x.tensors[i].nbytes) == 0;
    T_CHECK(same, "a round trip through safetensors gives the same tensors");
    const char *src = ry == 0 ? vil_st_meta(&y, "vil.source") : NULL;
    T_CHECK(src && strstr(src, "vim.safetensors"), "vil.source names the input (%s)", src ? src : "none");
    if (rx == 0) vil_st_free(&x);
    if (ry == 0) vil_st_free(&y);

    /* what vil does not write: exit 2, the two formats named, nothing left in the folder */
    const char *refuse = vil_strdup(path("refuse"));
    T_CHECK(vil_mkdir_p(refuse) == 0, "a folder for the refusals");
    static const char *const NAMES[] = {"x.onnx", "x.bin", "x", "x.pt", "x.pth.tmp", ".pth.d/x"};
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++) {
        snprintf(cmd, sizeof cmd, "bin/vil convert " DATA "vim_p4s4.pth %s/%s 2>&1", refuse, NAMES[i]);
        int rc = t_run(cmd, out, sizeof out);
        T_CHECK(rc == 2 && strstr(out, ".safetensors") && strstr(out, ".pth"),
                "convert to %s: exit %d (want 2), the formats named: %.200s", NAMES[i], rc, out);
    }
    T_CHECK(files_in(refuse) == 0, "nothing written for the refused names (%d files)", files_in(refuse));
    free((void *)refuse);
    /* a missing folder: a runtime failure (exit 1) that says so */
    snprintf(cmd, sizeof cmd, "bin/vil convert " DATA "vim_p4s4.pth %s 2>&1", path("nope/x.pth"));
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "does not exist"), "convert into a missing folder: exit %d: %.200s", rc, out);
    T_CHECK(t_run("bin/vil convert --help", out, sizeof out) == 0 && strstr(out, "OUT.pth"), "the help names OUT.pth");
}

int main(void) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_pickle_python();
    test_pickle_misuse();
    test_archive();
    test_model("vil", 4);
    test_model("vim", 2);
    test_metadata_checks();
    test_cli();
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return t_finish();
}
