/* test_safetensors.c: vil/safetensors against its format: round trips over dtypes and
 * metadata, byte-exact output against files built by hand from the format spec, one case per
 * kind of corruption, atomic saves, and random damage to a valid file that must never crash.
 * Given file arguments, it instead reads each one and prints what it holds (cross-checks). */
#define _GNU_SOURCE
#include "tests/limited.h"
#include "tests/testing.h"
#include "vil/common.h"
#include "formats/safetensors.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

static void path_in_tmp(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", tmpdir, name);
}

/* A file from a header string and data: pad = 1 pads the header with spaces to 8 bytes. */
static unsigned char *make_file(const char *json, int pad, const void *data, size_t dn, size_t *n) {
    size_t jl = strlen(json), hl = pad ? (jl + 7) / 8 * 8 : jl;
    unsigned char *b = vil_malloc(8 + hl + dn);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, json, jl);
    memset(b + 8 + jl, ' ', hl - jl);
    if (dn) memcpy(b + 8 + hl, data, dn);
    *n = 8 + hl + dn;
    return b;
}

/* Parsing must fail with a message containing needle. */
static void expect_fail_bytes(const char *what, const unsigned char *b, size_t n,
                              const char *needle) {
    VilSafetensors st;
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_st_parse(b, n, &st);
    vil_error_release(&cap);
    T_CHECK(rc == -1, "%s: accepted a bad file", what);
    T_CHECK(st.n_tensors == 0 && st.tensors == NULL && st.buf == NULL, "%s: st not left empty",
            what);
    T_CHECK(strstr(cap.msg, needle) != NULL, "%s: message '%s' lacks '%s'", what, cap.msg, needle);
    if (rc == -1) printf("ok   rejects %-30s %s\n", what, cap.msg);
    vil_st_free(&st);
}

static void expect_fail(const char *what, const char *json, size_t dn, const char *needle) {
    unsigned char data[64] = {0};
    size_t n;
    unsigned char *b = make_file(json, 1, data, dn, &n);
    expect_fail_bytes(what, b, n, needle);
    free(b);
}

/* Runs fn with stderr sent to a file; returns what it printed (caller frees). */
static char *capture_stderr(int (*fn)(void *), void *arg, int *rc) {
    char p[300];
    path_in_tmp(p, sizeof p, "stderr.txt");
    fflush(stderr);
    int saved = dup(2), fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (saved < 0 || fd < 0) {
        *rc = fn(arg);
        return vil_strdup("");
    }
    dup2(fd, 2);
    close(fd);
    *rc = fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    size_t n = 0;
    char *s = (char *)vil_read_file(p, &n);
    unlink(p);
    return s ? s : vil_strdup("");
}

/* ---- round trip ---- */

struct ConvArgs {
    const VilStTensor *t;
    float *out;
};
static int do_convert(void *a) {
    struct ConvArgs *c = a;
    return vil_st_to_f32(c->t, c->out);
}

struct ParseArgs {
    const unsigned char *b;
    VilSafetensors *st;
};
static int do_parse_empty(void *a) {
    struct ParseArgs *p = a;
    return vil_st_parse(p->b, 0, p->st);
}

static void test_roundtrip(void) {
    float f32[6] = {1.5f, -2.0f, 0.0f, 3.25f, 1e-3f, -7.0f};
    uint16_t f16[5] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00}; /* 1, -2, 65504, 2^-24, inf */
    uint16_t bf16[4] = {0x3F80, 0xC040, 0x0000, 0x4120};        /* 1, -3, 0, 10 */
    double f64[3] = {0.1, -1e10, 2.5};
    int64_t i64[2] = {-5, INT64_MAX};
    int32_t i32 = 42;
    uint8_t u8[5] = {1, 2, 3, 4, 255};
    int64_t s23[2] = {2, 3}, s5[1] = {5}, s22[2] = {2, 2}, s3[1] = {3}, s2[1] = {2},
            s04[2] = {0, 4};

    /* Mixed sizes in an order that would misalign the larger dtypes if laid out as given */
    VilStWriter *w = vil_st_writer_new();
    vil_st_writer_add(w, "u8", VIL_ST_U8, 1, s5, u8);
    vil_st_writer_add(w, "half", VIL_ST_F16, 1, s5, f16);
    vil_st_writer_add(w, "weight", VIL_ST_F32, 2, s23, f32);
    vil_st_writer_add(w, "brain", VIL_ST_BF16, 2, s22, bf16);
    vil_st_writer_add(w, "double", VIL_ST_F64, 1, s3, f64);
    vil_st_writer_add(w, "long", VIL_ST_I64, 1, s2, i64);
    vil_st_writer_add(w, "scalar", VIL_ST_I32, 0, NULL, &i32);
    vil_st_writer_add(w, "empty", VIL_ST_F32, 2, s04, NULL);
    vil_st_writer_meta(w, "format", "pt");
    vil_st_writer_meta(w, "vil.config",
                       "{\"model\": \"vil_tiny\", \"note\": \"tab\\tquote\\\" üñí\n\"}");
    vil_st_writer_meta(w, "epoch", "1");
    vil_st_writer_meta(w, "epoch", "2"); /* replaces */
    char p[300];
    path_in_tmp(p, sizeof p, "roundtrip.safetensors");
    T_CHECK(vil_st_writer_save(w, p) == 0, "save roundtrip");
    vil_st_writer_free(w);

    VilSafetensors st;
    int rc = vil_st_read(p, &st);
    T_CHECK(rc == 0, "read roundtrip");
    if (rc != 0) return;
    const char *order[] = {"u8", "half", "weight", "brain", "double", "long", "scalar", "empty"};
    T_CHECK(st.n_tensors == 8, "n_tensors %d", st.n_tensors);
    for (int i = 0; i < st.n_tensors && i < 8; i++) {
        const VilStTensor *t = &st.tensors[i];
        T_CHECK(strcmp(t->name, order[i]) == 0, "tensor %d is '%s', want '%s'", i, t->name,
                order[i]);
        T_CHECK(vil_st_find(&st, order[i]) == t, "find '%s'", order[i]);
        size_t es = vil_st_dtype_size(t->dtype);
        T_CHECK((uintptr_t)t->data % es == 0, "'%s' (%s) data misaligned at offset %zu", t->name,
                vil_st_dtype_name(t->dtype), t->offset);
    }
    T_CHECK(vil_st_find(&st, "missing") == NULL && vil_st_find(&st, "") == NULL, "find missing");
    struct {
        const char *name;
        VilStDtype dt;
        int ndim;
        int64_t d0, d1;
        const void *data;
        size_t nbytes;
    } want[] = {
        {"u8", VIL_ST_U8, 1, 5, 0, u8, 5},        {"half", VIL_ST_F16, 1, 5, 0, f16, 10},
        {"weight", VIL_ST_F32, 2, 2, 3, f32, 24}, {"brain", VIL_ST_BF16, 2, 2, 2, bf16, 8},
        {"double", VIL_ST_F64, 1, 3, 0, f64, 24}, {"long", VIL_ST_I64, 1, 2, 0, i64, 16},
        {"scalar", VIL_ST_I32, 0, 0, 0, &i32, 4}, {"empty", VIL_ST_F32, 2, 0, 4, NULL, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const VilStTensor *t = vil_st_find(&st, want[i].name);
        if (!t) {
            T_CHECK(0, "'%s' missing", want[i].name);
            continue;
        }
        T_CHECK(t->dtype == want[i].dt && t->ndim == want[i].ndim && t->nbytes == want[i].nbytes,
                "'%s': dtype %s ndim %d nbytes %zu", t->name, vil_st_dtype_name(t->dtype), t->ndim,
                t->nbytes);
        T_CHECK(t->ndim < 1 || t->shape[0] == want[i].d0, "'%s' shape[0]", t->name);
        T_CHECK(t->ndim < 2 || t->shape[1] == want[i].d1, "'%s' shape[1]", t->name);
        T_CHECK(!want[i].nbytes || memcmp(t->data, want[i].data, want[i].nbytes) == 0, "'%s' data",
                t->name);
    }
    T_CHECK(st.buf_size == 5 + 10 + 24 + 8 + 24 + 16 + 4, "buf_size %zu", st.buf_size);

    const char *fmt = vil_st_meta(&st, "format"), *cfg = vil_st_meta(&st, "vil.config");
    const char *ep = vil_st_meta(&st, "epoch");
    T_CHECK(st.n_meta == 3, "n_meta %d", st.n_meta);
    T_CHECK(fmt && strcmp(fmt, "pt") == 0, "meta format");
    T_CHECK(cfg &&
                strcmp(cfg, "{\"model\": \"vil_tiny\", \"note\": \"tab\\tquote\\\" üñí\n\"}") == 0,
            "meta vil.config with escapes: '%s'", cfg ? cfg : "(null)");
    T_CHECK(ep && strcmp(ep, "2") == 0, "repeated meta key replaces");
    T_CHECK(vil_st_meta(&st, "missing") == NULL, "missing meta is NULL");

    /* conversions to float32 */
    float out[8];
    T_CHECK(vil_st_numel(vil_st_find(&st, "half")) == 5, "numel half");
    T_CHECK(vil_st_to_f32(vil_st_find(&st, "half"), out) == 0, "to_f32 F16");
    T_CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] == 65504.0f &&
                out[3] == ldexpf(1.0f, -24) && isinf(out[4]) && out[4] > 0,
            "F16 values %g %g %g %g %g", out[0], out[1], out[2], out[3], out[4]);
    T_CHECK(vil_st_to_f32(vil_st_find(&st, "brain"), out) == 0, "to_f32 BF16");
    T_CHECK(out[0] == 1.0f && out[1] == -3.0f && out[2] == 0.0f && out[3] == 10.0f, "BF16 values");
    T_CHECK(vil_st_to_f32(vil_st_find(&st, "double"), out) == 0, "to_f32 F64");
    T_CHECK(out[0] == 0.1f && out[1] == -1e10f && out[2] == 2.5f, "F64 values");
    T_CHECK(vil_st_to_f32(vil_st_find(&st, "weight"), out) == 0 && memcmp(out, f32, 24) == 0,
            "F32 values");
    T_CHECK(vil_st_to_f32(vil_st_find(&st, "empty"), out) == 0, "to_f32 of an empty tensor");
    struct ConvArgs ca = {vil_st_find(&st, "long"), out};
    int rc_conv;
    char *msg = capture_stderr(do_convert, &ca, &rc_conv);
    T_CHECK(rc_conv == -1 && strstr(msg, "cannot convert I64"), "to_f32 I64 refused: '%s'", msg);
    free(msg);
    vil_st_free(&st);
    T_CHECK(st.n_tensors == 0 && st.tensors == NULL, "free clears");
    vil_st_free(&st); /* twice is harmless */
}

/* ---- byte-exact output against hand-built files ---- */

static void check_exact(const char *what, VilStWriter *w, const char *json, const void *data,
                        size_t dn) {
    size_t en;
    unsigned char *expect = make_file(json, 1, data, dn, &en);
    unsigned char *got = NULL;
    size_t gn = 0;
    int rc = vil_st_writer_serialize(w, &got, &gn);
    T_CHECK(rc == 0 && gn == en && memcmp(got, expect, en) == 0,
            "%s: writer bytes differ (%zu vs %zu)", what, gn, en);
    if (rc == 0 && (gn != en || memcmp(got, expect, en) != 0))
        printf("  got header: %.*s\n", (int)(gn > 8 ? gn - 8 : 0), (const char *)got + 8);
    VilSafetensors st;
    T_CHECK(vil_st_parse(expect, en, &st) == 0, "%s: reference bytes rejected", what);
    vil_st_free(&st);
    printf("ok   byte-exact %-26s header %zu bytes\n", what, en - 8 - dn);
    free(got);
    free(expect);
    vil_st_writer_free(w);
}

static void test_exact(void) {
    /* The JSON the Python library (serde_json) writes: no spaces, __metadata__ first, then per
     * tensor dtype, shape, data_offsets; padded with spaces to a multiple of 8. */
    float v6[6] = {0, 1, 2, 3, 4, 5}, v2[2] = {1.0f, -2.0f};
    int64_t s123[3] = {1, 2, 3}, s1123[4] = {1, 1, 2, 3}, s2[1] = {2};

    VilStWriter *w = vil_st_writer_new();
    vil_st_writer_add(w, "attn.0", VIL_ST_F32, 3, s123, v6);
    const char *j1 = "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}";
    T_CHECK(strlen(j1) == 64, "attn.0 header is 64 bytes, no padding (%zu)", strlen(j1));
    check_exact("attn.0 (no padding)", w, j1, v6, 24);

    w = vil_st_writer_new();
    vil_st_writer_add(w, "attn0", VIL_ST_F32, 4, s1123, v6);
    const char *j2 = "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}";
    T_CHECK(strlen(j2) == 65, "attn0 header is 65 bytes before padding");
    check_exact("attn0 (7 spaces)", w, j2, v6, 24);

    w = vil_st_writer_new();
    check_exact("no tensors", w, "{}", NULL, 0);

    w = vil_st_writer_new();
    vil_st_writer_meta(w, "framework", "pt");
    check_exact("metadata only", w, "{\"__metadata__\":{\"framework\":\"pt\"}}", NULL, 0);

    w = vil_st_writer_new();
    vil_st_writer_add(w, "w", VIL_ST_F32, 1, s2, v2);
    vil_st_writer_meta(w, "format", "pt");
    check_exact("two F32 + metadata", w,
                "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                "\"data_offsets\":[0,8]}}",
                v2, 8);

    /* And the full file, byte for byte, for the two-value case */
    unsigned char want[8 + 88 + 8] = {88, 0, 0, 0, 0, 0, 0, 0};
    const char *j = "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                    "\"data_offsets\":[0,8]}}";
    size_t jl = strlen(j);
    T_CHECK(jl == 85, "two-value header is 85 bytes before padding (%zu)", jl);
    memcpy(want + 8, j, jl);
    memset(want + 8 + jl, ' ', 88 - jl);
    memcpy(want + 96, "\x00\x00\x80\x3f\x00\x00\x00\xc0", 8); /* 1.0f, -2.0f little-endian */
    w = vil_st_writer_new();
    vil_st_writer_add(w, "w", VIL_ST_F32, 1, s2, v2);
    vil_st_writer_meta(w, "format", "pt");
    char p[300];
    path_in_tmp(p, sizeof p, "exact.safetensors");
    T_CHECK(vil_st_writer_save(w, p) == 0, "save exact");
    vil_st_writer_free(w);
    size_t n = 0;
    unsigned char *got = vil_read_file(p, &n);
    T_CHECK(got && n == sizeof want && memcmp(got, want, n) == 0, "saved file is byte-exact");
    free(got);
}

/* ---- corruption ---- */

static void test_corrupt(void) {
    unsigned char b[64] = {0};
    expect_fail_bytes("empty file", b, 0, "shorter than the 8-byte");
    expect_fail_bytes("7 bytes", b, 7, "shorter than the 8-byte");
    b[0] = 100; /* header length 100 in a 20-byte file */
    expect_fail_bytes("header length > file", b, 20, "only 12 bytes follow");
    memset(b, 0xFF, 8);
    expect_fail_bytes("huge header length", b, 64, "limit");
    memset(b, 0, 8);
    expect_fail_bytes("zero header length", b, 16, "header length is 0");
    b[0] = 8;
    memcpy(b + 8, "{}  \0   ", 8);
    expect_fail_bytes("NUL in header", b, 16, "NUL byte at offset 4");
    memcpy(b + 8, "{\"\xff\":1 }", 8);
    expect_fail_bytes("invalid UTF-8", b, 16, "not valid UTF-8 (byte 2)");
    memcpy(b + 8, "{\"\xc0\xaf\":1}", 8);
    expect_fail_bytes("overlong UTF-8", b, 16, "not valid UTF-8");

    expect_fail("invalid JSON", "{\"a\": {\"dtype\": \"F32\",", 0, "not valid JSON");
    expect_fail("garbage header", "\x01\x02garbage!", 0, "not valid JSON");
    expect_fail("JSON array", "[1, 2]", 0, "not a JSON object");
    expect_fail("bytes after JSON", "{} x", 0, "after the JSON header");
    expect_fail("entry not object", "{\"a\": 5}", 0, "tensor 'a': entry is a number");
    expect_fail("missing dtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                "missing \"dtype\"");
    expect_fail("missing shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4,
                "missing \"shape\"");
    expect_fail("missing offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4,
                "missing \"data_offsets\"");
    expect_fail(
        "repeated dtype key",
        "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
        "key 'dtype' appears twice");
    expect_fail("unknown dtype", "{\"a\":{\"dtype\":\"F31\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                4, "tensor 'a': unknown dtype 'F31'");
    expect_fail("dtype not string", "{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                "dtype is a number");
    expect_fail("negative dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
                4, "shape[0] is not a non-negative integer");
    expect_fail("fractional dim",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,1.5],\"data_offsets\":[0,12]}}", 12,
                "shape[1] is not a non-negative integer");
    expect_fail("string dim",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4,
                "shape[0] is not");
    expect_fail("9 dims",
                "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
                1, "more than 8 dimensions");
    expect_fail("shape overflow",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_"
                "offsets\":[0,4]}}",
                4, "overflows");
    expect_fail("negative offset",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4,
                "data_offsets must be [begin, end]");
    expect_fail("three offsets",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4,
                "data_offsets must be [begin, end]");
    expect_fail("offset 1e300",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,1e300]}}", 4,
                "data_offsets must be [begin, end]");
    expect_fail("end before begin",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8,
                "end before they begin");
    expect_fail("offsets out of range",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 8,
                "reach past the end of the 8-byte buffer");
    expect_fail("truncated buffer",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 5,
                "reach past the end of the 5-byte buffer");
    expect_fail("shape/size mismatch",
                "{\"head.weight\":{\"dtype\":\"F32\",\"shape\":[10,5],\"data_offsets\":[0,40]}}",
                40,
                "tensor 'head.weight': data_offsets [0, 40] but shape [10, 5] F32 needs 200 bytes");
    expect_fail("overlapping tensors",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                12, "tensors 'a' (bytes [0, 8]) and 'b' (bytes [4, 12]) overlap");
    expect_fail("same range twice",
                "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                4, "overlap");
    expect_fail("gap between tensors",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
                12, "bytes [4, 8] of the buffer belong to no tensor");
    expect_fail("trailing bytes",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8,
                "tensors cover 4 bytes but the buffer after the header has 8");
    expect_fail("duplicate names",
                "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                8, "tensor name 'a' appears twice");
    expect_fail("non-string metadata", "{\"__metadata__\":{\"format\":\"pt\",\"epoch\":3}}", 0,
                "__metadata__ key 'epoch' is a number; metadata values must be strings");
    expect_fail("metadata not object", "{\"__metadata__\":\"pt\"}", 0, "__metadata__ is a string");
    expect_fail("repeated metadata key", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0,
                "__metadata__ key 'k' appears twice");
    expect_fail("two __metadata__", "{\"__metadata__\":{},\"__metadata__\":{}}", 0,
                "'__metadata__' appears twice");

    /* deep nesting, at the top and inside an entry: an error, not a stack overflow */
    size_t depth = 200000;
    char *deep = vil_malloc(2 * depth + 16);
    memset(deep, '[', depth);
    memset(deep + depth, ']', depth);
    deep[2 * depth] = 0;
    expect_fail("deep JSON (200k arrays)", deep, 0, "not valid JSON");
    memcpy(deep, "{\"a\":", 5);
    memset(deep + 5, '[', depth);
    memset(deep + 5 + depth, ']', depth);
    strcpy(deep + 5 + 2 * depth, "}");
    expect_fail("deep JSON in an entry", deep, 0, "not valid JSON");
    free(deep);

    /* the file name leads the message */
    size_t n;
    unsigned char data[40] = {0};
    unsigned char *f =
        make_file("{\"head.weight\":{\"dtype\":\"F32\",\"shape\":[10,5],\"data_offsets\":[0,40]}}",
                  1, data, 40, &n);
    char p[300], want[600];
    path_in_tmp(p, sizeof p, "x.safetensors");
    T_CHECK(vil_write_file_atomic(p, f, n) == 0, "write x.safetensors");
    free(f);
    VilSafetensors st;
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_st_read(p, &st);
    vil_error_release(&cap);
    T_CHECK(rc == -1, "read bad file");
    snprintf(
        want, sizeof want,
        "'%s': tensor 'head.weight': data_offsets [0, 40] but shape [10, 5] F32 needs 200 bytes",
        p);
    T_CHECK(strcmp(cap.msg, want) == 0 && cap.count == 1, "message with path: '%s'", cap.msg);
    unlink(p); /* keep only valid files in a VIL_ST_KEEP directory */
    path_in_tmp(p, sizeof p, "does-not-exist.safetensors");
    vil_error_capture(&cap);
    rc = vil_st_read(p, &st);
    vil_error_release(&cap);
    T_CHECK(rc == -1 && strstr(cap.msg, "cannot open") && strstr(cap.msg, "No such file") && t_count(cap.msg, p) == 1, "missing file: %s", cap.msg);
    vil_error_capture(&cap);
    rc = vil_st_read(tmpdir, &st);
    vil_error_release(&cap);
    T_CHECK(rc == -1 && strstr(cap.msg, "not a regular file"), "directory: %s", cap.msg);
    /* no capture: the message goes to stderr */
    struct ParseArgs pa = {b, &st};
    char *msg = capture_stderr(do_parse_empty, &pa, &rc);
    T_CHECK(rc == -1 && strstr(msg, "vil: error: file is 0 bytes"),
            "without a capture the message is printed: '%s'", msg);
    free(msg);
}

/* ---- writer misuse and atomic saves ---- */

static int count_entries(const char *dir, const char *needle) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, needle)) n++;
    closedir(d);
    return n;
}

struct SaveArgs {
    VilStWriter *w;
    const char *path;
};
static int do_save(void *a) {
    struct SaveArgs *s = a;
    return vil_st_writer_save(s->w, s->path);
}

static void test_writer(void) {
    float v[4] = {1, 2, 3, 4};
    int64_t s4[1] = {4}, s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 4}, neg[1] = {-4};
    char p[300];
    path_in_tmp(p, sizeof p, "misuse.safetensors");
    struct {
        const char *what, *needle;
        const char *name;
        int ndim;
        const int64_t *shape;
        const void *data;
    } bad[] = {
        {"repeated name", "added twice", "a", 1, s4, v},
        {"9 dims", "ndim 9", "b", 9, s9, v},
        {"negative dim", "negative", "b", 1, neg, v},
        {"reserved name", "'__metadata__' cannot name a tensor", "__metadata__", 1, s4, v},
        {"NULL data", "data is NULL", "b", 1, s4, NULL},
        {"invalid UTF-8 name", "not valid UTF-8", "b\xff", 1, s4, v},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        VilStWriter *w = vil_st_writer_new();
        vil_st_writer_add(w, "a", VIL_ST_F32, 1, s4, v);
        vil_st_writer_add(w, bad[i].name, VIL_ST_F32, bad[i].ndim, bad[i].shape, bad[i].data);
        struct SaveArgs a = {w, p};
        int rc;
        char *msg = capture_stderr(do_save, &a, &rc);
        T_CHECK(rc == -1 && strstr(msg, bad[i].needle), "writer %s: rc %d, '%s'", bad[i].what, rc,
                msg);
        T_CHECK(access(p, F_OK) != 0, "writer %s left a file", bad[i].what);
        free(msg);
        vil_st_writer_free(w);
    }

    /* atomic replace: the second save replaces the first and leaves no temporary file */
    path_in_tmp(p, sizeof p, "atomic.safetensors");
    for (int round = 0; round < 2; round++) {
        float x[4] = {(float)round, 1, 2, 3};
        VilStWriter *w = vil_st_writer_new();
        vil_st_writer_add(w, round ? "second" : "first", VIL_ST_F32, 1, s4, x);
        T_CHECK(vil_st_writer_save(w, p) == 0, "atomic save %d", round);
        vil_st_writer_free(w);
    }
    VilSafetensors st;
    T_CHECK(vil_st_read(p, &st) == 0, "read atomic");
    T_CHECK(st.n_tensors == 1 && vil_st_find(&st, "second") && !vil_st_find(&st, "first"),
            "second save replaced the first");
    const VilStTensor *t = vil_st_find(&st, "second");
    T_CHECK(t && ((const float *)t->data)[0] == 1.0f, "replaced data");
    vil_st_free(&st);
    T_CHECK(count_entries(tmpdir, ".tmp") == 0, "no temporary file left in %s", tmpdir);
    T_CHECK(count_entries(tmpdir, "atomic.safetensors") == 1, "exactly one atomic.safetensors");

    /* a missing directory is a clear error and creates nothing */
    char missing[300];
    path_in_tmp(missing, sizeof missing, "no/such/dir/m.safetensors");
    VilStWriter *w = vil_st_writer_new();
    vil_st_writer_add(w, "a", VIL_ST_F32, 1, s4, v);
    struct SaveArgs a = {w, missing};
    int rc;
    char *msg = capture_stderr(do_save, &a, &rc);
    T_CHECK(rc == -1 && strstr(msg, "does not exist") && strstr(msg, "no/such/dir"),
            "missing directory: rc %d, '%s'", rc, msg);
    printf("ok   missing directory: %s", msg);
    free(msg);
    vil_st_writer_free(w);
}

/* ---- random damage ---- */

static void test_fuzz(void) {
    char p[300];
    path_in_tmp(p, sizeof p, "roundtrip.safetensors");
    size_t n0 = 0;
    unsigned char *good = vil_read_file(p, &n0);
    T_CHECK(good != NULL && n0 > 64, "fuzz seed file");
    if (!good) return;
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)good[i] << (8 * i);
    VilRng rng;
    vil_rng_seed(&rng, 1234);
    const char *env = getenv("VIL_ST_FUZZ_ITERS"); /* longer runs by hand, e.g. under ASan */
    int iters = env ? atoi(env) : 2000, accepted = 0, rejected = 0, bad_invariant = 0,
        empty_msg = 0;
    unsigned char *b = vil_malloc(n0 + 64);
    for (int it = 0; it < iters; it++) {
        size_t n = n0;
        memcpy(b, good, n0);
        switch (vil_rng_below(&rng, 5)) {
        case 0: /* a few random bytes anywhere */
            for (int k = 1 + (int)vil_rng_below(&rng, 8); k > 0; k--)
                b[vil_rng_below(&rng, (uint32_t)n)] = (unsigned char)vil_rng_u64(&rng);
            break;
        case 1: /* flips inside the JSON header, where structure lives */
            for (int k = 1 + (int)vil_rng_below(&rng, 3); k > 0; k--)
                b[8 + vil_rng_below(&rng, (uint32_t)hlen)] ^=
                    (unsigned char)(1u << vil_rng_below(&rng, 8));
            break;
        case 2: /* truncation */
            n = vil_rng_below(&rng, (uint32_t)n0);
            break;
        case 3: /* a damaged length field */
            b[vil_rng_below(&rng, 8)] = (unsigned char)vil_rng_u64(&rng);
            break;
        default: /* digits changed in the header: shapes and offsets that disagree */
            for (int k = 0; k < 4; k++) {
                size_t at = 8 + vil_rng_below(&rng, (uint32_t)hlen);
                if (b[at] >= '0' && b[at] <= '9')
                    b[at] = (unsigned char)('0' + vil_rng_below(&rng, 10));
            }
            if (vil_rng_below(&rng, 2)) n = n0 - vil_rng_below(&rng, 16);
            break;
        }
        /* an exact-size copy, so that reading past n is a real overrun under sanitizers */
        unsigned char *c = vil_malloc(n ? n : 1);
        memcpy(c, b, n);
        VilSafetensors st;
        VilErrCapture cap;
        vil_error_capture(&cap);
        int rc = vil_st_parse(c, n, &st);
        vil_error_release(&cap);
        if (rc == 0) {
            accepted++;
            size_t sum = 0;
            unsigned acc = 0;
            for (int i = 0; i < st.n_tensors; i++) {
                const VilStTensor *t = &st.tensors[i];
                if (t->offset + t->nbytes > st.buf_size ||
                    t->nbytes != (size_t)vil_st_numel(t) * vil_st_dtype_size(t->dtype) ||
                    vil_st_find(&st, t->name) != t)
                    bad_invariant++;
                sum += t->nbytes;
                for (size_t k = 0; k < t->nbytes; k++)
                    acc += ((const unsigned char *)t->data)[k];
            }
            if (sum != st.buf_size) bad_invariant++;
            (void)acc;
        } else {
            rejected++;
            if (!cap.msg[0]) empty_msg++;
        }
        vil_st_free(&st);
        free(c);
    }
    free(b);
    free(good);
    printf("ok   fuzz: %d damaged files, %d accepted, %d rejected\n", iters, accepted, rejected);
    T_CHECK(bad_invariant == 0, "fuzz: %d accepted files broke an invariant", bad_invariant);
    T_CHECK(empty_msg == 0, "fuzz: %d rejections without a message", empty_msg);
    T_CHECK(rejected > iters / 2, "fuzz: only %d of %d damaged files rejected", rejected, iters);
}

/* vil_st_read in a limited child: 0 when refused, 3 when read */
static int do_read_refused(void *a) {
    VilSafetensors st;
    if (vil_st_read((const char *)a, &st) != 0) return 0;
    vil_st_free(&st);
    return 3;
}

/* a header of n empty tensors (names in hex: 1.7M fit in 99 MB) and no data */
static int write_empty_tensors(const char *p, int n) {
    size_t cap = (size_t)n * 64 + 16, k = 8;
    char *b = vil_malloc(cap);
    b[k++] = '{';
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(b + k, cap - k, "%s\"%x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}",
                              i ? "," : "", (unsigned)i);
    b[k++] = '}';
    uint64_t h = k - 8;
    for (int i = 0; i < 8; i++) b[i] = (char)(h >> (8 * i));
    int rc = vil_write_file_atomic(p, b, k);
    free(b);
    return rc == 0 && h <= VIL_ST_MAX_HEADER ? 0 : -1;
}

/* issue 30: the 8-byte length is checked before anything else is read, the JSON's size before
 * cJSON builds it, and open reads no data until the caller asks for it */
static void test_hostile_headers(void) {
    char p[512], msg[1024];
    /* a 3 GB sparse file that declares a 10^12-byte header: refused at once, in 256 MB */
    path_in_tmp(p, sizeof p, "sparse.safetensors");
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(1000000000000ull >> (8 * i));
    int made = fd >= 0 && write(fd, len8, 8) == 8 && ftruncate(fd, (off_t)3 << 30) == 0;
    if (fd >= 0) close(fd);
    T_CHECK(made, "a 3 GB sparse file");
    double t0 = vil_now();
    int rc = t_limited(do_read_refused, p, 256, 20, msg, sizeof msg);
    double dt = vil_now() - t0;
    T_CHECK(rc == 0 && strstr(msg, "header length 1000000000000 is over the 100000000-byte limit") &&
                strstr(msg, p) && dt < 5,
            "3 GB sparse file, 10^12-byte header: refused in %.2f s under 256 MB (child %d): %s", dt, rc, msg);
    unlink(p);
    /* 1.7M empty tensors in a 99 MB header: refused before cJSON, in 300 MB */
    path_in_tmp(p, sizeof p, "empties.safetensors");
    T_CHECK(write_empty_tensors(p, 1700000) == 0, "a 99 MB header of 1.7M empty tensors");
    t0 = vil_now();
    rc = t_limited(do_read_refused, p, 300, 60, msg, sizeof msg);
    dt = vil_now() - t0;
    T_CHECK(rc == 0 && strstr(msg, "more than 2097152 JSON brackets") && strstr(msg, p),
            "1.7M empty tensors: refused in %.2f s under 300 MB (child %d): %s", dt, rc, msg);
    unlink(p);
    /* 20,000 tensors (a model of VIL_MAX_DEPTH blocks has ~15,000) still read */
    path_in_tmp(p, sizeof p, "many.safetensors");
    VilSafetensors st;
    T_CHECK(write_empty_tensors(p, 20000) == 0 && vil_st_read(p, &st) == 0 && st.n_tensors == 20000,
            "a header of 20,000 tensors reads");
    vil_st_free(&st);
    unlink(p);
    /* open: descriptors only; load: the tensors asked for */
    float a[3] = {1, 2, 3}, b[2] = {4, 5};
    int64_t sa = 3, sb = 2;
    VilStWriter *w = vil_st_writer_new();
    vil_st_writer_add(w, "a", VIL_ST_F32, 1, &sa, a);
    vil_st_writer_add(w, "b", VIL_ST_F32, 1, &sb, b);
    vil_st_writer_meta(w, "k", "v");
    path_in_tmp(p, sizeof p, "lazy.safetensors");
    T_CHECK(vil_st_writer_save(w, p) == 0, "lazy.safetensors written");
    vil_st_writer_free(w);
    T_CHECK(vil_st_open(p, &st) == 0 && st.n_tensors == 2 && !st.tensors[0].data &&
                !st.tensors[1].data && vil_st_find(&st, "b")->shape[0] == 2 &&
                strcmp(vil_st_meta(&st, "k"), "v") == 0,
            "open: names, shapes and metadata, no data");
    unsigned char want[2] = {0, 0};
    want[vil_st_find(&st, "b") - st.tensors] = 1;
    const VilStTensor *tb = vil_st_find(&st, "b"), *ta = vil_st_find(&st, "a");
    T_CHECK(vil_st_load(&st, want) == 0 && !ta->data && tb->data && memcmp(tb->data, b, 8) == 0 &&
                st.buf_size == 8,
            "load: only the tensor asked for (%zu bytes)", st.buf_size);
    vil_st_free(&st);
    unlink(p);
}

static void cleanup_tmp(void) {
    DIR *d = opendir(tmpdir);
    if (!d) return;
    struct dirent *e;
    char p[600];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(tmpdir);
}

/* test_safetensors FILE...: read each file and print it (for cross-checks with Python) */
static int dump_files(int argc, char **argv) {
    for (int a = 1; a < argc; a++) {
        VilSafetensors st;
        int rc = vil_st_read(argv[a], &st);
        T_CHECK(rc == 0, "read %s", argv[a]);
        if (rc != 0) continue;
        printf("%s: %d tensors, %zu data bytes\n", argv[a], st.n_tensors, st.buf_size);
        for (int i = 0; i < st.n_meta; i++)
            printf("  meta %s = %s\n", st.meta_keys[i], st.meta_vals[i]);
        for (int i = 0; i < st.n_tensors; i++) {
            const VilStTensor *t = &st.tensors[i];
            printf("  %-24s %-5s [", t->name, vil_st_dtype_name(t->dtype));
            for (int d = 0; d < t->ndim; d++)
                printf("%s%" PRId64, d ? ", " : "", t->shape[d]);
            printf("] offset %zu", t->offset);
            int64_t ne = vil_st_numel(t);
            if (ne > 0 && (t->dtype == VIL_ST_F32 || t->dtype == VIL_ST_F16 ||
                           t->dtype == VIL_ST_BF16 || t->dtype == VIL_ST_F64)) {
                float *f = vil_malloc((size_t)ne * sizeof(float));
                double s = 0;
                T_CHECK(vil_st_to_f32(t, f) == 0, "convert %s", t->name);
                for (int64_t k = 0; k < ne; k++)
                    s += f[k];
                printf(" sum %.6g first %.6g", s, f[0]);
                free(f);
            }
            printf("\n");
        }
        vil_st_free(&st);
    }
    return t_finish();
}

int main(int argc, char **argv) {
    if (argc > 1) return dump_files(argc, argv);
    const char *keep = getenv("VIL_ST_KEEP"); /* a directory: keep the files for a cross-check */
    if (keep) {
        snprintf(tmpdir, sizeof tmpdir, "%s", keep);
        mkdir(tmpdir, 0755);
    } else {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/vil_test_st.XXXXXX");
        if (!mkdtemp(tmpdir)) {
            printf("FAIL cannot create a temporary directory\n");
            return 1;
        }
    }
    test_roundtrip();
    test_exact();
    test_corrupt();
    test_writer();
    test_fuzz();
    test_hostile_headers();
    if (!keep) cleanup_tmp();
    return t_finish();
}
