/* safetensors.c: the safetensors reader (which treats every file as hostile: each number in
 * the header is checked before it is used) and the writer, which produces the same bytes as
 * the Python library for the same tensor order. JSON goes through cJSON. */
#define _GNU_SOURCE
#include "formats/safetensors.h"

#include "vil/common.h"

#include <cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The format is little-endian and tensors are stored and read with memcpy. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors.c assumes a little-endian host");

static const struct {
    const char *name;
    size_t size;
} DTYPES[VIL_ST_NUM_DTYPES] = {
    [VIL_ST_BOOL] = {"BOOL", 1},       [VIL_ST_U8] = {"U8", 1},
    [VIL_ST_I8] = {"I8", 1},           [VIL_ST_F8_E5M2] = {"F8_E5M2", 1},
    [VIL_ST_F8_E4M3] = {"F8_E4M3", 1}, [VIL_ST_I16] = {"I16", 2},
    [VIL_ST_U16] = {"U16", 2},         [VIL_ST_F16] = {"F16", 2},
    [VIL_ST_BF16] = {"BF16", 2},       [VIL_ST_I32] = {"I32", 4},
    [VIL_ST_U32] = {"U32", 4},         [VIL_ST_F32] = {"F32", 4},
    [VIL_ST_F64] = {"F64", 8},         [VIL_ST_I64] = {"I64", 8},
    [VIL_ST_U64] = {"U64", 8},
};

size_t vil_st_dtype_size(VilStDtype dt) {
    return (unsigned)dt < VIL_ST_NUM_DTYPES ? DTYPES[dt].size : 0;
}

const char *vil_st_dtype_name(VilStDtype dt) {
    return (unsigned)dt < VIL_ST_NUM_DTYPES ? DTYPES[dt].name : "?";
}

static int dtype_from_name(const char *s, VilStDtype *out) {
    for (int i = 0; i < VIL_ST_NUM_DTYPES; i++) {
        if (strcmp(s, DTYPES[i].name) == 0) {
            *out = (VilStDtype)i;
            return 0;
        }
    }
    return -1;
}

/* Names in messages come from untrusted files: cap how much of one is printed. */
#define NAME_MAX_SHOWN 160
#define SHOWN(s) NAME_MAX_SHOWN, (s)


/* JSON numbers arrive as doubles: accept only integers that a double holds exactly. */
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0.0) || d > 9007199254740992.0 || d != floor(d)) return -1;
    *out = (uint64_t)d;
    return 0;
}

static const char *json_kind(const cJSON *v) {
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an invalid value";
}

static void shape_str(char *s, size_t cap, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(s, cap, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(s + k, cap - k, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (k < cap) snprintf(s + k, cap - k, "]");
}

static int cmp_by_name(const void *a, const void *b) {
    const VilStTensor *x = *(const VilStTensor *const *)a, *y = *(const VilStTensor *const *)b;
    return strcmp(x->name, y->name);
}

static int cmp_by_offset(const void *a, const void *b) {
    const VilStTensor *x = *(const VilStTensor *const *)a, *y = *(const VilStTensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return 0;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* st->by_name, refusing a repeated name; p: scratch for n_tensors pointers */
static int index_names(VilSafetensors *st, VilStTensor **p) {
    int nt = st->n_tensors;
    for (int i = 0; i < nt; i++)
        p[i] = &st->tensors[i];
    qsort(p, (size_t)nt, sizeof(*p), cmp_by_name);
    st->by_name = vil_try_malloc((size_t)(nt ? nt : 1) * sizeof(int));
    if (!st->by_name) return -1;
    for (int i = 0; i < nt; i++) {
        st->by_name[i] = (int)(p[i] - st->tensors);
        if (i > 0 && strcmp(p[i - 1]->name, p[i]->name) == 0) {
            vil_error("tensor name '%.*s' appears twice", SHOWN(p[i]->name));
            return -1;
        }
    }
    return 0;
}

/* One tensor entry: {"dtype": .., "shape": [..], "data_offsets": [b, e]}. Unknown keys are
 * ignored (as serde does); repeated known keys are errors. */
static int parse_tensor(const cJSON *item, size_t buf_size, VilStTensor *t) {
    const char *nm = t->name;
    if (!cJSON_IsObject(item)) {
        vil_error("tensor '%.*s': entry is %s, not an object", SHOWN(nm), json_kind(item));
        return -1;
    }
    const cJSON *dt = NULL, *shape = NULL, *offs = NULL;
    for (const cJSON *c = item->child; c; c = c->next) {
        const cJSON **slot = strcmp(c->string, "dtype") == 0          ? &dt
                             : strcmp(c->string, "shape") == 0        ? &shape
                             : strcmp(c->string, "data_offsets") == 0 ? &offs
                                                                      : NULL;
        if (!slot) continue;
        if (*slot) {
            vil_error("tensor '%.*s': key '%s' appears twice", SHOWN(nm), c->string);
            return -1;
        }
        *slot = c;
    }
    if (!dt || !shape || !offs) {
        vil_error("tensor '%.*s': missing \"%s\"", SHOWN(nm),
                  !dt ? "dtype" : !shape ? "shape" : "data_offsets");
        return -1;
    }
    if (!cJSON_IsString(dt)) {
        vil_error("tensor '%.*s': dtype is %s, not a string", SHOWN(nm), json_kind(dt));
        return -1;
    }
    if (dtype_from_name(dt->valuestring, &t->dtype) != 0) {
        vil_error("tensor '%.*s': unknown dtype '%.*s'", SHOWN(nm), 32, dt->valuestring);
        return -1;
    }
    if (!cJSON_IsArray(shape)) {
        vil_error("tensor '%.*s': shape is %s, not an array", SHOWN(nm), json_kind(shape));
        return -1;
    }
    int ndim = 0;
    for (const cJSON *c = shape->child; c; c = c->next) {
        if (ndim == VIL_ST_MAX_DIMS) {
            vil_error("tensor '%.*s': shape has more than %d dimensions", SHOWN(nm),
                      VIL_ST_MAX_DIMS);
            return -1;
        }
        uint64_t d;
        if (json_uint(c, &d) != 0) {
            vil_error("tensor '%.*s': shape[%d] is not a non-negative integer", SHOWN(nm), ndim);
            return -1;
        }
        t->shape[ndim++] = (int64_t)d;
    }
    t->ndim = ndim;
    uint64_t begin, end;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        json_uint(offs->child, &begin) != 0 || json_uint(offs->child->next, &end) != 0) {
        vil_error("tensor '%.*s': data_offsets must be [begin, end], two non-negative integers",
                  SHOWN(nm));
        return -1;
    }
    if (end < begin) {
        vil_error("tensor '%.*s': data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin",
                  SHOWN(nm), begin, end);
        return -1;
    }
    /* product(shape) * size, refusing anything that overflows */
    char sh[256];
    shape_str(sh, sizeof sh, ndim, t->shape);
    size_t esize = vil_st_dtype_size(t->dtype);
    uint64_t nbytes = esize;
    for (int i = 0; i < ndim; i++) {
        uint64_t d = (uint64_t)t->shape[i];
        if (d && nbytes > UINT64_MAX / d) {
            vil_error("tensor '%.*s': shape %s %s overflows a 64-bit byte count",
                      SHOWN(nm), sh, DTYPES[t->dtype].name);
            return -1;
        }
        nbytes *= d;
    }
    if (nbytes != end - begin) {
        vil_error("tensor '%.*s': data_offsets [%" PRIu64 ", %" PRIu64
                  "] but shape %s %s needs %" PRIu64 " bytes",
                  SHOWN(nm), begin, end, sh, DTYPES[t->dtype].name, nbytes);
        return -1;
    }
    if (end > buf_size) {
        vil_error("tensor '%.*s': data_offsets [%" PRIu64 ", %" PRIu64
                  "] reach past the end of the %zu-byte buffer (truncated file?)",
                  SHOWN(nm), begin, end, buf_size);
        return -1;
    }
    t->offset = (size_t)begin;
    t->nbytes = (size_t)nbytes;
    return 0;
}

static int parse_meta(const cJSON *meta, VilSafetensors *st) {
    if (!cJSON_IsObject(meta)) {
        vil_error("__metadata__ is %s, not an object of strings", json_kind(meta));
        return -1;
    }
    int n = cJSON_GetArraySize(meta);
    st->meta_keys = vil_try_calloc((size_t)n, sizeof(char *));
    st->meta_vals = vil_try_calloc((size_t)n, sizeof(char *));
    if (!st->meta_keys || !st->meta_vals) return -1;
    for (const cJSON *c = meta->child; c; c = c->next) {
        if (!cJSON_IsString(c)) {
            vil_error("__metadata__ key '%.*s' is %s; metadata values must be strings",
                      SHOWN(c->string), json_kind(c));
            return -1;
        }
        if (vil_st_meta_add(st, c->string, c->valuestring) != 0) return -1;
    }
    const char *twice = NULL;
    if (vil_st_meta_repeated(st, &twice) != 0) return -1;
    if (twice) {
        vil_error("__metadata__ key '%.*s' appears twice", SHOWN(twice));
        return -1;
    }
    return 0;
}

int vil_st_meta_add(VilSafetensors *st, const char *key, const char *val) {
    /* counted once both are copied: vil_st_free frees n_meta pairs */
    st->meta_keys[st->n_meta] = vil_try_strdup(key);
    if (!st->meta_keys[st->n_meta]) return -1;
    st->meta_vals[st->n_meta] = vil_try_strdup(val);
    if (!st->meta_vals[st->n_meta]) {
        free(st->meta_keys[st->n_meta]);
        st->meta_keys[st->n_meta] = NULL;
        return -1;
    }
    st->n_meta++;
    return 0;
}

int vil_st_meta_repeated(const VilSafetensors *st, const char **twice) {
    int n = st->n_meta;
    *twice = NULL;
    char **keys = vil_try_malloc((size_t)(n ? n : 1) * sizeof(char *));
    if (!keys) return -1;
    memcpy(keys, st->meta_keys, (size_t)n * sizeof(char *));
    qsort(keys, (size_t)n, sizeof(char *), cmp_str_ptr);
    for (int i = 1; i < n && !*twice; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0) *twice = keys[i];
    free(keys);
    return 0;
}

/* Everything after JSON parsing: the entries one by one, then the checks across entries. */
static int parse_root(const cJSON *root, size_t buf_size, VilSafetensors *st) {
    if (!cJSON_IsObject(root)) {
        vil_error("header is %s, not a JSON object", json_kind(root));
        return -1;
    }
    int n = cJSON_GetArraySize(root);
    st->tensors = vil_try_calloc((size_t)n, sizeof(VilStTensor));
    if (!st->tensors) return -1;
    const cJSON *meta = NULL;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            if (meta) {
                vil_error("key '__metadata__' appears twice");
                return -1;
            }
            meta = c;
            if (parse_meta(c, st) != 0) return -1;
            continue;
        }
        VilStTensor *t = &st->tensors[st->n_tensors];
        if (!(t->name = vil_try_strdup(c->string))) return -1;
        st->n_tensors++;
        if (parse_tensor(c, buf_size, t) != 0) return -1;
    }
    int nt = st->n_tensors;
    VilStTensor **p = vil_try_malloc((size_t)(nt ? nt : 1) * sizeof(*p));
    if (!p) return -1;
    int rc = index_names(st, p);
    if (rc != 0) goto done;
    /* The tensors, in offset order, must tile the buffer: an overlap would let two tensors
     * alias, a gap or a short cover means the header and the data disagree. */
    qsort(p, (size_t)nt, sizeof(*p), cmp_by_offset);
    size_t covered = 0;
    for (int i = 0; i < nt; i++) {
        const VilStTensor *t = p[i];
        if (t->offset < covered) {
            const VilStTensor *q = p[i - 1];
            vil_error("tensors '%.*s' (bytes [%zu, %zu]) and '%.*s' (bytes [%zu, %zu]) overlap",
                      SHOWN(q->name), q->offset, q->offset + q->nbytes, SHOWN(t->name), t->offset,
                      t->offset + t->nbytes);
            rc = -1;
            goto done;
        }
        if (t->offset > covered) {
            vil_error("bytes [%zu, %zu] of the buffer belong to no tensor (gap before tensor "
                      "'%.*s')", covered, t->offset, SHOWN(t->name));
            rc = -1;
            goto done;
        }
        covered = t->offset + t->nbytes;
    }
    if (covered != buf_size) {
        vil_error("tensors cover %zu bytes but the buffer after the header has %zu", covered,
                  buf_size);
        rc = -1;
    }
done:
    free(p);
    return rc;
}

/* The 8-byte length against the limit and the avail bytes after it; 0 or -1 (reported). */
static int check_length(uint64_t hlen, uint64_t avail) {
    if (hlen > VIL_ST_MAX_HEADER) {
        vil_error("header length %" PRIu64 " is over the %u-byte limit (not a safetensors file?)",
                  hlen, VIL_ST_MAX_HEADER);
        return -1;
    }
    if (hlen > avail) {
        vil_error("header length %" PRIu64 " but only %" PRIu64 " bytes follow it (truncated file?)",
                  hlen, avail);
        return -1;
    }
    if (hlen == 0) {
        vil_error("header length is 0; the header must be at least \"{}\"");
        return -1;
    }
    return 0;
}

/* { [ , : outside strings, up to limit + 1: what bounds cJSON's tree before it is built */
static size_t json_tokens(const char *s, size_t n, size_t limit) {
    size_t k = 0;
    int in_str = 0;
    for (size_t i = 0; i < n && k <= limit; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[' || c == ',' || c == ':') {
            k++;
        }
    }
    return k;
}

/* The header text (hlen bytes, NUL at text[hlen]) into st's tensors and metadata; the data
 * (buf_size bytes after the header) is not touched. */
static int parse_header(char *text, uint64_t hlen, size_t buf_size, VilSafetensors *st) {
    const char *nul = memchr(text, 0, (size_t)hlen);
    if (nul) {
        vil_error("header has a NUL byte at offset %zu", (size_t)(nul - text));
        return -1;
    }
    size_t bad = vil_utf8_invalid_at((const unsigned char *)text, (size_t)hlen);
    if (bad != hlen) {
        vil_error("header is not valid UTF-8 (byte %zu)", bad);
        return -1;
    }
    if (json_tokens(text, (size_t)hlen, VIL_ST_MAX_JSON_TOKENS) > VIL_ST_MAX_JSON_TOKENS) {
        vil_error("header holds more than %u JSON brackets, commas and colons (far more tensors "
                  "than a model has)", VIL_ST_MAX_JSON_TOKENS);
        return -1;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, (size_t)hlen + 1, &end, 0);
    int rc = 0;
    if (!root) {
        size_t at = end && end >= text && end <= text + hlen ? (size_t)(end - text) : 0;
        vil_error("header is not valid JSON (near byte %zu of %" PRIu64 ", or nested too deeply)",
                  at, hlen);
        return -1;
    }
    for (const char *q = end; q < text + hlen; q++) {
        if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r') {
            vil_error("unexpected byte 0x%02x after the JSON header (byte %zu)",
                      (unsigned char)*q, (size_t)(q - text));
            rc = -1;
            goto out;
        }
    }
    rc = parse_root(root, buf_size, st);
out:
    cJSON_Delete(root);
    return rc;
}

int vil_st_parse(const unsigned char *buf, size_t n, VilSafetensors *st) {
    memset(st, 0, sizeof *st);
    if (n < 8) {
        vil_error("file is %zu bytes, shorter than the 8-byte header length (empty or truncated)",
                  n);
        return -1;
    }
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)buf[i] << (8 * i);
    if (check_length(hlen, n - 8) != 0) return -1;
    const unsigned char *hdr = buf + 8;
    /* cJSON gets its own NUL-terminated copy so that no parser path can read past it */
    char *text = vil_try_malloc((size_t)hlen + 1);
    if (!text) return -1;
    memcpy(text, hdr, (size_t)hlen);
    text[hlen] = 0;
    size_t buf_size = n - 8 - (size_t)hlen;
    int rc = parse_header(text, hlen, buf_size, st);
    free(text);
    if (rc == 0 && !(st->buf = vil_try_malloc_aligned(buf_size))) rc = -1;
    if (rc == 0) {
        if (buf_size) memcpy(st->buf, hdr + hlen, buf_size);
        st->buf_size = buf_size;
        for (int i = 0; i < st->n_tensors; i++)
            st->tensors[i].data = st->buf + st->tensors[i].offset;
    }
    if (rc != 0) vil_st_free(st);
    return rc;
}

int vil_st_from_memory(VilSafetensors *st, unsigned char *buf, size_t buf_size,
                       const VilStTensor *t, int n) {
    memset(st, 0, sizeof *st);
    st->buf = buf;
    st->buf_size = buf_size;
    st->tensors = vil_try_calloc((size_t)(n ? n : 1), sizeof(VilStTensor));
    if (!st->tensors) {
        vil_st_free(st); /* buf is st's, even now */
        return -1;
    }
    for (int i = 0; i < n; i++) {
        VilStTensor *d = &st->tensors[st->n_tensors];
        *d = t[i];
        if (!(d->name = vil_try_strdup(t[i].name))) {
            vil_st_free(st);
            return -1;
        }
        st->n_tensors++;
        int64_t numel = 1;
        for (int k = 0; k < d->ndim; k++) numel *= d->shape[k];
        if ((unsigned)d->dtype >= VIL_ST_NUM_DTYPES || d->ndim < 0 || d->ndim > VIL_ST_MAX_DIMS ||
            d->offset > buf_size || d->nbytes > buf_size - d->offset ||
            (uint64_t)numel * vil_st_dtype_size(d->dtype) != d->nbytes) {
            vil_st_free(st);
            vil_error("tensor '%.*s': its bytes do not match its shape and dtype",
                      SHOWN(t[i].name));
            return -1;
        }
        d->data = buf ? buf + d->offset : NULL;
    }
    VilStTensor **p = vil_try_malloc((size_t)(n ? n : 1) * sizeof(*p));
    int rc = p ? index_names(st, p) : -1;
    free(p);
    if (rc != 0) vil_st_free(st);
    return rc;
}

/* the data of a file opened by vil_st_open: bytes [at + offset, ...) of fd */
typedef struct {
    int fd;
    off_t at;
} FileSource;

static int file_load(void *ctx, VilSafetensors *st, const unsigned char *want) {
    const FileSource *fs = ctx;
    for (int i = 0; i < st->n_tensors; i++) {
        VilStTensor *t = &st->tensors[i];
        if (want && !want[i]) continue;
        size_t got = 0;
        while (got < t->nbytes) {
            ssize_t k = pread(fs->fd, (unsigned char *)t->data + got, t->nbytes - got,
                              fs->at + (off_t)(t->offset + got));
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) {
                vil_error("tensor '%.*s': %s", SHOWN(t->name),
                          k < 0 ? vil_errno_str() : "the file ends early (changed while read?)");
                return -1;
            }
            got += (size_t)k;
        }
    }
    return 0;
}

static void file_close(void *ctx) {
    FileSource *fs = ctx;
    close(fs->fd);
    free(fs);
}

/* read exactly n bytes at off; 0, or -1 */
static int read_at(int fd, void *dst, size_t n, off_t off) {
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, (unsigned char *)dst + got, n - got, off + (off_t)got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        got += (size_t)k;
    }
    return 0;
}

static int open_file(const char *path, VilSafetensors *st) {
    int fd = vil_open_regular(path);
    if (fd < 0) return -1;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        vil_error("cannot stat: %s", vil_errno_str());
        close(fd);
        return -1;
    }
    uint64_t n = (uint64_t)sb.st_size;
    unsigned char len8[8];
    if (n < 8) {
        vil_error("file is %" PRIu64 " bytes, shorter than the 8-byte header length (empty or "
                  "truncated)", n);
        close(fd);
        return -1;
    }
    if (read_at(fd, len8, 8, 0) != 0) {
        vil_error("cannot read the header length: %s", vil_errno_str());
        close(fd);
        return -1;
    }
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)len8[i] << (8 * i);
    if (check_length(hlen, n - 8) != 0) {
        close(fd);
        return -1;
    }
    char *text = vil_try_malloc((size_t)hlen + 1);
    if (!text) {
        close(fd);
        return -1;
    }
    if (read_at(fd, text, (size_t)hlen, 8) != 0) {
        vil_error("cannot read the %" PRIu64 "-byte header: %s", hlen, vil_errno_str());
        free(text);
        close(fd);
        return -1;
    }
    text[hlen] = 0;
    uint64_t buf_size = n - 8 - hlen;
    if (buf_size > SIZE_MAX / 2) {
        vil_error("the file's %" PRIu64 " data bytes are more than this machine can address", buf_size);
        free(text);
        close(fd);
        return -1;
    }
    int rc = parse_header(text, hlen, (size_t)buf_size, st);
    free(text);
    if (rc != 0) {
        close(fd);
        vil_st_free(st);
        return -1;
    }
    FileSource *fs = vil_malloc(sizeof *fs);
    fs->fd = fd;
    fs->at = (off_t)(8 + hlen);
    st->src = (VilStSource){fs, file_load, file_close};
    st->buf_size = (size_t)buf_size;
    return 0;
}

int vil_st_open(const char *path, VilSafetensors *st) {
    memset(st, 0, sizeof *st);
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = open_file(path, st);
    vil_error_release(&cap);
    /* the parser's message names no file: one message that says which (vil_open_regular's
     * name it already) */
    if (rc != 0) {
        if (strstr(cap.msg, path)) vil_error("%s", cap.msg);
        else vil_error("'%s': %s", path, cap.msg);
    }
    return rc;
}

int vil_st_load(VilSafetensors *st, const unsigned char *want) {
    if (!st->src.load) return 0;
    /* all: the layout the open gave (the file's own); some: packed anew */
    size_t total = want ? 0 : st->buf_size;
    for (int i = 0; want && i < st->n_tensors; i++) {
        if (!want[i]) continue;
        total = (total + 63) & ~(size_t)63;
        total += st->tensors[i].nbytes;
    }
    /* the sizes were checked against the file (or the archive's entries) by the open, but a file
     * may be sparse, or claim more than this machine has: the source stays open for vil_st_free */
    st->buf = vil_try_malloc_aligned(total ? total : 1);
    if (!st->buf) {
        vil_error("the %s tensors' %zu bytes cannot be allocated", want ? "wanted" : "file's", total);
        return -1;
    }
    st->buf_size = total;
    size_t at = 0;
    for (int i = 0; i < st->n_tensors; i++) {
        if (want && !want[i]) continue;
        at = want ? (at + 63) & ~(size_t)63 : st->tensors[i].offset;
        st->tensors[i].data = st->buf + at;
        at += st->tensors[i].nbytes;
    }
    int rc = st->src.load(st->src.ctx, st, want);
    st->src.close(st->src.ctx);
    memset(&st->src, 0, sizeof st->src);
    for (int i = 0; i < st->n_tensors; i++) {
        VilStTensor *t = &st->tensors[i];
        if (rc != 0 || (want && !want[i])) t->data = NULL;
        else t->offset = (size_t)((const unsigned char *)t->data - st->buf);
    }
    return rc;
}

int vil_st_read(const char *path, VilSafetensors *st) {
    if (vil_st_open(path, st) != 0) return -1;
    return vil_st_load_all(st, path);
}

int vil_st_load_all(VilSafetensors *st, const char *path) {
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_st_load(st, NULL);
    vil_error_release(&cap);
    if (rc != 0) {
        vil_error("'%s': %s", path, cap.msg);
        vil_st_free(st);
    }
    return rc;
}

const VilStTensor *vil_st_find(const VilSafetensors *st, const char *name) {
    int lo = 0, hi = st->n_tensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const VilStTensor *t = &st->tensors[st->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

const char *vil_st_meta(const VilSafetensors *st, const char *key) {
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_keys[i], key) == 0) return st->meta_vals[i];
    return NULL;
}

void vil_st_free(VilSafetensors *st) {
    if (!st) return;
    for (int i = 0; i < st->n_tensors; i++)
        free(st->tensors[i].name);
    for (int i = 0; i < st->n_meta; i++) {
        free(st->meta_keys[i]);
        free(st->meta_vals[i]);
    }
    free(st->tensors);
    free(st->meta_keys);
    free(st->meta_vals);
    free(st->buf);
    free(st->by_name);
    if (st->src.close) st->src.close(st->src.ctx);
    memset(st, 0, sizeof *st);
}

int64_t vil_st_numel(const VilStTensor *t) {
    size_t s = vil_st_dtype_size(t->dtype);
    return s ? (int64_t)(t->nbytes / s) : 0;
}

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    uint32_t bits;
    if (exp == 0) {
        float f = ldexpf((float)man, -24); /* zero or subnormal */
        return sign ? -f : f;
    } else if (exp == 31) {
        bits = sign | 0x7F800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

int vil_st_to_f32(const VilStTensor *t, float *dst) {
    const unsigned char *src = t->data;
    int64_t n = vil_st_numel(t);
    switch (t->dtype) {
    case VIL_ST_F32:
        if (n) memcpy(dst, src, (size_t)n * 4);
        return 0;
    case VIL_ST_F64:
        for (int64_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, src + 8 * i, 8);
            dst[i] = (float)d;
        }
        return 0;
    case VIL_ST_F16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = f16_to_f32((uint16_t)(src[2 * i] | src[2 * i + 1] << 8));
        return 0;
    case VIL_ST_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint32_t bits = (uint32_t)(src[2 * i] | src[2 * i + 1] << 8) << 16;
            memcpy(&dst[i], &bits, 4);
        }
        return 0;
    default:
        vil_error("tensor '%s': cannot convert %s to float32 (F32, F16, BF16, F64 only)", t->name,
                  vil_st_dtype_name(t->dtype));
        return -1;
    }
}

/* ---- writer ---- */

typedef struct {
    char *name;
    VilStDtype dtype;
    int ndim;
    int64_t shape[VIL_ST_MAX_DIMS];
    const void *data;
    size_t nbytes, offset;
} WEntry;

struct VilStWriter {
    WEntry *t;
    int n, cap;
    char **mk, **mv;
    int nm, mcap;
    char *misuse; /* the first misuse, reported by save: add and meta return nothing */
};

static void misuse(VilStWriter *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void misuse(VilStWriter *w, const char *fmt, ...) {
    if (w->misuse) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    w->misuse = vil_strdup(msg);
}

VilStWriter *vil_st_writer_new(void) { return vil_calloc(1, sizeof(VilStWriter)); }

void vil_st_writer_add(VilStWriter *w, const char *name, VilStDtype dtype, int ndim,
                       const int64_t *shape, const void *data) {
    if (!name) {
        misuse(w, "tensor %d: name is NULL", w->n);
        return;
    }
    if (strcmp(name, "__metadata__") == 0) {
        misuse(w, "'__metadata__' cannot name a tensor");
        return;
    }
    if ((unsigned)dtype >= VIL_ST_NUM_DTYPES) {
        misuse(w, "tensor '%s': invalid dtype %d", name, (int)dtype);
        return;
    }
    if (ndim < 0 || ndim > VIL_ST_MAX_DIMS || (ndim > 0 && !shape)) {
        misuse(w, "tensor '%s': ndim %d (0..%d, with a shape)", name, ndim, VIL_ST_MAX_DIMS);
        return;
    }
    WEntry e = {.dtype = dtype, .ndim = ndim, .data = data};
    uint64_t nbytes = vil_st_dtype_size(dtype);
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            misuse(w, "tensor '%s': shape[%d] = %" PRId64 " is negative", name, i, shape[i]);
            return;
        }
        if (shape[i] && nbytes > SIZE_MAX / (uint64_t)shape[i]) {
            misuse(w, "tensor '%s': shape overflows size_t", name);
            return;
        }
        nbytes *= (uint64_t)shape[i];
        e.shape[i] = shape[i];
    }
    if (nbytes && !data) {
        misuse(w, "tensor '%s': data is NULL", name);
        return;
    }
    e.nbytes = (size_t)nbytes;
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 64;
        WEntry *t = vil_try_realloc(w->t, (size_t)cap * sizeof(WEntry));
        if (!t) {
            misuse(w, "tensor '%s': out of memory for the writer's table", name);
            return;
        }
        w->t = t, w->cap = cap;
    }
    if (!(e.name = vil_try_strdup(name))) {
        misuse(w, "tensor %d: out of memory for its name", w->n);
        return;
    }
    w->t[w->n++] = e;
}

void vil_st_writer_meta(VilStWriter *w, const char *key, const char *value) {
    if (!key || !value) {
        misuse(w, "metadata key or value is NULL");
        return;
    }
    char *v = vil_try_strdup(value);
    if (!v) {
        misuse(w, "metadata '%.64s': out of memory for its value", key);
        return;
    }
    for (int i = 0; i < w->nm; i++) {
        if (strcmp(w->mk[i], key) == 0) {
            free(w->mv[i]);
            w->mv[i] = v;
            return;
        }
    }
    if (w->nm == w->mcap) {
        int cap = w->mcap ? 2 * w->mcap : 16;
        char **mk = vil_try_realloc(w->mk, (size_t)cap * sizeof(char *));
        if (mk) w->mk = mk;
        char **mv = mk ? vil_try_realloc(w->mv, (size_t)cap * sizeof(char *)) : NULL;
        if (mv) w->mv = mv, w->mcap = cap;
        if (!mv) {
            free(v);
            misuse(w, "metadata '%.64s': out of memory for the writer's table", key);
            return;
        }
    }
    if (!(w->mk[w->nm] = vil_try_strdup(key))) {
        free(v);
        misuse(w, "metadata: out of memory for a key");
        return;
    }
    w->mv[w->nm] = v;
    w->nm++;
}

static int cmp_wentry_name(const void *a, const void *b) {
    return strcmp((*(const WEntry *const *)a)->name, (*(const WEntry *const *)b)->name);
}

static int valid_utf8(const char *s) {
    size_t n = strlen(s);
    return vil_utf8_invalid_at((const unsigned char *)s, n) == n;
}

/* Adds item to obj under key; takes ownership of item either way. */
static int add_item(cJSON *obj, const char *key, cJSON *item) {
    if (!item) return -1;
    if (!cJSON_AddItemToObject(obj, key, item)) {
        cJSON_Delete(item);
        return -1;
    }
    return 0;
}

/* Integers as raw JSON text, so that every value prints exactly (cJSON prints doubles). */
static cJSON *json_uint_raw(uint64_t v) {
    char s[24];
    snprintf(s, sizeof s, "%" PRIu64, v);
    return cJSON_CreateRaw(s);
}

static cJSON *uint_array(const uint64_t *v, int n) {
    cJSON *a = cJSON_CreateArray();
    if (!a) return NULL;
    for (int i = 0; i < n; i++) {
        cJSON *x = json_uint_raw(v[i]);
        if (!x || !cJSON_AddItemToArray(a, x)) {
            cJSON_Delete(x);
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

static cJSON *build_header(const VilStWriter *w) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    if (w->nm > 0) {
        cJSON *meta = cJSON_CreateObject();
        if (add_item(root, "__metadata__", meta) != 0) goto fail;
        for (int i = 0; i < w->nm; i++)
            if (add_item(meta, w->mk[i], cJSON_CreateString(w->mv[i])) != 0) goto fail;
    }
    for (int i = 0; i < w->n; i++) {
        const WEntry *e = &w->t[i];
        cJSON *o = cJSON_CreateObject();
        if (add_item(root, e->name, o) != 0) goto fail;
        uint64_t shape[VIL_ST_MAX_DIMS], offs[2] = {e->offset, e->offset + e->nbytes};
        for (int d = 0; d < e->ndim; d++)
            shape[d] = (uint64_t)e->shape[d];
        if (add_item(o, "dtype", cJSON_CreateString(vil_st_dtype_name(e->dtype))) != 0 ||
            add_item(o, "shape", uint_array(shape, e->ndim)) != 0 ||
            add_item(o, "data_offsets", uint_array(offs, 2)) != 0)
            goto fail;
    }
    return root;
fail:
    cJSON_Delete(root);
    return NULL;
}

int vil_st_writer_serialize(VilStWriter *w, unsigned char **out, size_t *out_size) {
    *out = NULL;
    *out_size = 0;
    if (w->misuse) {
        vil_error("safetensors writer: %s", w->misuse);
        return -1;
    }
    for (int i = 0; i < w->n; i++) {
        if (!valid_utf8(w->t[i].name)) {
            vil_error("safetensors writer: tensor name '%s' is not valid UTF-8", w->t[i].name);
            return -1;
        }
    }
    for (int i = 0; i < w->nm; i++) {
        if (!valid_utf8(w->mk[i]) || !valid_utf8(w->mv[i])) {
            vil_error("safetensors writer: metadata '%s' is not valid UTF-8", w->mk[i]);
            return -1;
        }
    }
    if (w->n > 1) {
        const WEntry **p = vil_try_malloc((size_t)w->n * sizeof(*p));
        if (!p) return -1;
        for (int i = 0; i < w->n; i++)
            p[i] = &w->t[i];
        qsort(p, (size_t)w->n, sizeof(*p), cmp_wentry_name);
        for (int i = 1; i < w->n; i++) {
            if (strcmp(p[i - 1]->name, p[i]->name) == 0) {
                vil_error("safetensors writer: tensor '%s' added twice", p[i]->name);
                free(p);
                return -1;
            }
        }
        free(p);
    }
    /* Larger dtypes first, insertion order within a size: every offset is then a multiple of
     * its dtype size, because sizes are powers of two. */
    size_t total = 0;
    for (size_t size = 8; size >= 1; size /= 2) {
        for (int i = 0; i < w->n; i++) {
            WEntry *e = &w->t[i];
            if (vil_st_dtype_size(e->dtype) != size) continue;
            if (e->nbytes > SIZE_MAX / 2 - total) {
                vil_error("safetensors writer: tensors total more than SIZE_MAX / 2 bytes");
                return -1;
            }
            e->offset = total;
            total += e->nbytes;
        }
    }
    cJSON *root = build_header(w);
    char *json = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!json) {
        vil_error("safetensors writer: out of memory building the JSON header");
        return -1;
    }
    size_t jlen = strlen(json), hlen = (jlen + 7) / 8 * 8;
    size_t n = 8 + hlen + total;
    unsigned char *b = vil_try_malloc(n);
    if (!b) {
        vil_error("safetensors writer: no memory for the file's %zu bytes", n);
        cJSON_free(json);
        return -1;
    }
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    memcpy(b + 8, json, jlen);
    memset(b + 8 + jlen, ' ', hlen - jlen);
    cJSON_free(json);
    unsigned char *data = b + 8 + hlen;
    for (int i = 0; i < w->n; i++)
        if (w->t[i].nbytes) memcpy(data + w->t[i].offset, w->t[i].data, w->t[i].nbytes);
    *out = b;
    *out_size = n;
    return 0;
}

int vil_st_writer_save(VilStWriter *w, const char *path) {
    unsigned char *b;
    size_t n;
    if (vil_st_writer_serialize(w, &b, &n) != 0) return -1;
    int rc = vil_write_file_atomic(path, b, n);
    free(b);
    if (rc != 0) vil_error("cannot save '%s'", path);
    return rc;
}

void vil_st_writer_free(VilStWriter *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++)
        free(w->t[i].name);
    for (int i = 0; i < w->nm; i++) {
        free(w->mk[i]);
        free(w->mv[i]);
    }
    free(w->t);
    free(w->mk);
    free(w->mv);
    free(w->misuse);
    free(w);
}
