/* pickle_write.c: the protocol-2 pickle writer of pickle_write.h. The opcodes follow Python's
 * pickler (Lib/pickle.py) without a memo: ints by size (BININT1, BININT2, BININT, LONG1),
 * str as BINUNICODE, tuples of 0-3 items as EMPTY_TUPLE / TUPLE1-3 and longer ones as MARK ...
 * TUPLE, dict items in batches of 1000 (MARK ... SETITEMS, a batch of one as SETITEM), an
 * OrderedDict as REDUCE of the global on () followed by its items. Counts are declared when a
 * container begins, which is what lets a stream choose the opcodes Python chooses. */
#include "formats/pickle_write.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vil/common.h"

#define BATCH 1000   /* pickle.Pickler._BATCHSIZE */
#define MAX_DEPTH 64 /* containers open at once; the reader takes VIL_PK_MAX_MARKS */

typedef struct {
    char kind;        /* 'd' dict, 't' tuple */
    long n, done;     /* entries declared (dict: pairs), values written */
} Frame;

struct VilPkWriter {
    unsigned char *b;
    size_t n, cap;
    Frame f[MAX_DEPTH];
    int depth;
    int roots;
    char misuse[256]; /* the first misuse; "" while there is none */
};

/* the storage globals, by the reader's dtype */
static const char *const STORAGE[] = {
    [VIL_PK_F32] = "FloatStorage", [VIL_PK_F16] = "HalfStorage", [VIL_PK_BF16] = "BFloat16Storage",
    [VIL_PK_F64] = "DoubleStorage", [VIL_PK_I64] = "LongStorage", [VIL_PK_I32] = "IntStorage",
    [VIL_PK_BOOLT] = "BoolStorage"};

static void misuse(VilPkWriter *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void misuse(VilPkWriter *w, const char *fmt, ...) {
    if (w->misuse[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->misuse, sizeof w->misuse, fmt, ap);
    va_end(ap);
}

static void put(VilPkWriter *w, const void *x, size_t n) {
    if (w->misuse[0]) return;
    if (n > VIL_PK_MAX_BYTES || w->n > VIL_PK_MAX_BYTES - n) {
        misuse(w, "the pickle grows past %u bytes, which no reader of vil's would take",
               VIL_PK_MAX_BYTES);
        return;
    }
    if (w->n + n > w->cap) {
        w->cap = (w->n + n) * 2 + 256;
        w->b = vil_realloc(w->b, w->cap);
    }
    memcpy(w->b + w->n, x, n);
    w->n += n;
}
static void op(VilPkWriter *w, unsigned char o) { put(w, &o, 1); }
static void le(VilPkWriter *w, uint64_t v, int bytes) {
    unsigned char b[8];
    for (int i = 0; i < bytes; i++) b[i] = (unsigned char)(v >> (8 * i));
    put(w, b, (size_t)bytes);
}

static void raw_int(VilPkWriter *w, int64_t v) {
    if (v >= 0 && v <= 0xff) {
        op(w, 'K');
        le(w, (uint64_t)v, 1);
    } else if (v >= 0 && v <= 0xffff) {
        op(w, 'M');
        le(w, (uint64_t)v, 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        op(w, 'J');
        le(w, (uint64_t)v, 4);
    } else {
        /* LONG1: the shortest little-endian two's complement (pickle.encode_long) */
        uint64_t u = (uint64_t)v;
        int n = 8;
        while (n > 1) {
            unsigned top = (unsigned)(u >> (8 * (n - 1))) & 0xff;
            unsigned next_sign = (unsigned)(u >> (8 * (n - 2) + 7)) & 1;
            if (!((top == 0 && !next_sign) || (top == 0xff && next_sign))) break;
            n--;
        }
        op(w, 0x8a);
        le(w, (uint64_t)n, 1);
        le(w, u, n);
    }
}

static void raw_str(VilPkWriter *w, const char *s) {
    size_t n = s ? strlen(s) : 0;
    if (!s) {
        misuse(w, "a NULL string");
        return;
    }
    size_t bad = vil_utf8_invalid_at((const unsigned char *)s, n);
    if (bad != n) {
        char shown[96];
        misuse(w, "string '%s' is not valid UTF-8 (byte %zu)", vil_printable(shown, sizeof shown, s), bad);
        return;
    }
    op(w, 'X');
    le(w, (uint64_t)n, 4);
    put(w, s, n);
}

static void raw_global(VilPkWriter *w, const char *module, const char *name) {
    op(w, 'c');
    put(w, module, strlen(module));
    op(w, '\n');
    put(w, name, strlen(name));
    op(w, '\n');
}

static void raw_ordered_dict(VilPkWriter *w) {
    raw_global(w, "collections", "OrderedDict");
    op(w, ')');
    op(w, 'R');
}

/* a tuple of n ints (a tensor's size or stride), as save_tuple writes it */
static void raw_int_tuple(VilPkWriter *w, const int64_t *v, int n) {
    if (n == 0) {
        op(w, ')');
        return;
    }
    if (n > 3) op(w, '(');
    for (int i = 0; i < n; i++) raw_int(w, v[i]);
    op(w, n > 3 ? 't' : (unsigned char)(0x84 + n));
}

/* before a value: a second root is a misuse; in a dict, a batch of several items opens with
 * MARK */
static void before_value(VilPkWriter *w) {
    if (w->depth == 0) {
        if (w->roots++) misuse(w, "a second value outside any container");
        return;
    }
    Frame *f = &w->f[w->depth - 1];
    long want = f->kind == 'd' ? 2 * f->n : f->n;
    if (f->done >= want) {
        misuse(w, "more values than the %ld declared for a %s", f->n, f->kind == 'd' ? "dict" : "tuple");
        return;
    }
    if (f->kind == 'd' && f->done % 2 == 0) {
        long pair = f->done / 2;
        if (pair % BATCH == 0 && f->n - pair > 1) op(w, '(');
    }
}

/* after a value: in a dict, the pair that ends a batch ends it with SETITEMS (SETITEM alone) */
static void after_value(VilPkWriter *w) {
    if (w->depth == 0) return;
    Frame *f = &w->f[w->depth - 1];
    f->done++;
    if (f->kind != 'd' || f->done % 2) return;
    long pair = f->done / 2, start = (pair - 1) / BATCH * BATCH;
    long size = f->n - start < BATCH ? f->n - start : BATCH;
    if (pair == start + size) op(w, size > 1 ? 'u' : 's');
}

VilPkWriter *vil_pkw_new(void) {
    VilPkWriter *w = vil_calloc(1, sizeof *w);
    op(w, 0x80);
    op(w, 2);
    return w;
}

void vil_pkw_free(VilPkWriter *w) {
    if (!w) return;
    free(w->b);
    free(w);
}

void vil_pkw_str(VilPkWriter *w, const char *s) {
    before_value(w);
    raw_str(w, s);
    after_value(w);
}

void vil_pkw_int(VilPkWriter *w, int64_t v) {
    before_value(w);
    raw_int(w, v);
    after_value(w);
}

static void open_frame(VilPkWriter *w, char kind, long n) {
    if (n < 0 || n > INT32_MAX / 2) {
        misuse(w, "a %s of %ld entries", kind == 'd' ? "dict" : "tuple", n);
        n = 0;
    }
    if (w->depth == MAX_DEPTH) {
        misuse(w, "containers nested deeper than %d", MAX_DEPTH);
        return;
    }
    w->f[w->depth++] = (Frame){kind, n, 0};
}

/* the frame being closed, or NULL (a misuse) when it is not one of kind with all its values */
static Frame *close_frame(VilPkWriter *w, char kind) {
    const char *name = kind == 'd' ? "dict" : "tuple";
    if (w->depth == 0 || w->f[w->depth - 1].kind != kind) {
        misuse(w, "the end of a %s that was not begun", name);
        return NULL;
    }
    Frame *f = &w->f[--w->depth];
    long want = kind == 'd' ? 2 * f->n : f->n;
    if (f->done != want) {
        misuse(w, "a %s declared with %ld entries ends after %ld values", name, f->n, f->done);
        return NULL;
    }
    return f;
}

void vil_pkw_dict_begin(VilPkWriter *w, int ordered, long n) {
    before_value(w);
    if (ordered) raw_ordered_dict(w);
    else op(w, '}');
    open_frame(w, 'd', n);
}

void vil_pkw_dict_end(VilPkWriter *w) {
    if (close_frame(w, 'd')) after_value(w);
}

void vil_pkw_tuple_begin(VilPkWriter *w, long n) {
    before_value(w);
    if (n > 3) op(w, '(');
    open_frame(w, 't', n);
}

void vil_pkw_tuple_end(VilPkWriter *w) {
    Frame *f = close_frame(w, 't');
    if (!f) return;
    op(w, f->n == 0 ? ')' : f->n > 3 ? 't' : (unsigned char)(0x84 + f->n));
    after_value(w);
}

void vil_pkw_tensor(VilPkWriter *w, VilPkDtype dtype, const char *key, int ndim,
                    const int64_t *shape) {
    size_t kn = key ? strlen(key) : 0;
    int ok_key = kn >= 1 && kn <= 64;
    for (size_t i = 0; ok_key && i < kn; i++) {
        char c = key[i];
        ok_key = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    }
    if (!ok_key) {
        misuse(w, "storage key '%.64s' is not 1-64 characters of [A-Za-z0-9_]", key ? key : "(null)");
        return;
    }
    if ((unsigned)dtype >= sizeof STORAGE / sizeof STORAGE[0] || ndim < 0 || ndim > VIL_PK_MAX_DIMS) {
        misuse(w, "tensor '%s': dtype %d or %d dimensions out of range", key, (int)dtype, ndim);
        return;
    }
    int64_t stride[VIL_PK_MAX_DIMS], numel = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        if (shape[i] < 0 || (shape[i] && numel > ((int64_t)1 << 40) / shape[i])) {
            misuse(w, "tensor '%s': size %lld in dimension %d", key, (long long)shape[i], i);
            return;
        }
        stride[i] = numel;
        numel *= shape[i];
    }
    before_value(w);
    raw_global(w, "torch._utils", "_rebuild_tensor_v2");
    op(w, '(');
    op(w, '('); /* the persistent id */
    raw_str(w, "storage");
    raw_global(w, "torch", STORAGE[dtype]);
    raw_str(w, key);
    raw_str(w, "cpu");
    raw_int(w, numel);
    op(w, 't');
    op(w, 'Q');
    raw_int(w, 0); /* storage offset */
    raw_int_tuple(w, shape, ndim);
    raw_int_tuple(w, stride, ndim);
    op(w, 0x89); /* requires_grad False */
    raw_ordered_dict(w); /* backward hooks */
    op(w, 't');
    op(w, 'R');
    after_value(w);
}

int vil_pkw_finish(VilPkWriter *w, unsigned char **out, size_t *n) {
    *out = NULL;
    *n = 0;
    if (!w->misuse[0] && w->depth) misuse(w, "%d containers not ended", w->depth);
    if (!w->misuse[0] && w->roots != 1) misuse(w, "nothing was written");
    op(w, '.');
    if (w->misuse[0]) {
        vil_error("pickle writer: %s", w->misuse);
        return -1;
    }
    *out = w->b;
    *n = w->n;
    w->b = NULL;
    w->n = w->cap = 0;
    return 0;
}
