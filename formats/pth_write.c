/* pth_write.c: the torch.save zip writer of pth.h. The archive is built whole in memory (libzip
 * on a buffer source, read back out after zip_close) and handed to vil_write_file_atomic, so
 * libzip never writes or renames a file of its own. Entries are stored, as torch.save stores
 * them, and each entry's data starts at a multiple of 64 bytes (torch's layout: padding in an
 * extra field of the local header, id "FB", filled with 'Z'). */
#define _GNU_SOURCE
#include "formats/pth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zip.h>

#include "vil/common.h"
#include "formats/pickle_write.h"

#define PREFIX "archive"
#define ALIGN 64
#define LOCAL_HEADER 30     /* a zip local file header before its name */
#define PAD_ID 0x4246       /* "FB" as torch's writer names its padding field */
#define DOS_DATE 0x21       /* 1980-01-01: a fixed time, so the same weights give the same bytes */
#define MAX_NAME 255        /* a tensor name (the reader's bound) */

typedef struct {
    char name[32];
    const void *data;
    size_t size;
} Entry;

static int pk_dtype(VilStDtype d, VilPkDtype *out) {
    switch (d) {
    case VIL_ST_F32: *out = VIL_PK_F32; return 0;
    case VIL_ST_F16: *out = VIL_PK_F16; return 0;
    case VIL_ST_BF16: *out = VIL_PK_BF16; return 0;
    case VIL_ST_F64: *out = VIL_PK_F64; return 0;
    case VIL_ST_I64: *out = VIL_PK_I64; return 0;
    case VIL_ST_I32: *out = VIL_PK_I32; return 0;
    case VIL_ST_BOOL: *out = VIL_PK_BOOLT; return 0;
    default: return -1;
    }
}

/* the elements of t's shape; -1 for a shape out of range (the reader's bounds) */
static int64_t numel_of(const VilStTensor *t) {
    if (t->ndim < 0 || t->ndim > VIL_PK_MAX_DIMS) return -1;
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0 || (t->shape[i] && n > ((int64_t)1 << 40) / t->shape[i])) return -1;
        n *= t->shape[i];
    }
    return n;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* the first name that appears twice in names[0..n), or NULL */
static const char *repeated(char *const *names, int n) {
    if (n < 2) return NULL;
    char **s = vil_malloc((size_t)n * sizeof *s);
    memcpy(s, names, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_str_ptr);
    const char *r = NULL;
    for (int i = 1; i < n && !r; i++)
        if (strcmp(s[i - 1], s[i]) == 0) r = s[i];
    free(s);
    return r;
}

/* data.pkl: {'model': OrderedDict(name -> tensor over storage str(i)), 'vil_metadata': {...}} */
static int pickle_checkpoint(const VilStTensor *t, int n, char *const *keys, char *const *vals,
                             int n_meta, unsigned char **out, size_t *size) {
    VilPkWriter *w = vil_pkw_new();
    vil_pkw_dict_begin(w, 0, n_meta ? 2 : 1);
    vil_pkw_str(w, "model");
    vil_pkw_dict_begin(w, 1, n);
    for (int i = 0; i < n; i++) {
        char key[24];
        snprintf(key, sizeof key, "%d", i);
        VilPkDtype dt = VIL_PK_F32;
        pk_dtype(t[i].dtype, &dt);
        vil_pkw_str(w, t[i].name);
        vil_pkw_tensor(w, dt, key, t[i].ndim, t[i].shape);
    }
    vil_pkw_dict_end(w);
    if (n_meta) {
        vil_pkw_str(w, VIL_PTH_META_KEY);
        vil_pkw_dict_begin(w, 0, n_meta);
        for (int i = 0; i < n_meta; i++) {
            vil_pkw_str(w, keys[i]);
            vil_pkw_str(w, vals[i]);
        }
        vil_pkw_dict_end(w);
    }
    vil_pkw_dict_end(w);
    int rc = vil_pkw_finish(w, out, size);
    vil_pkw_free(w);
    return rc;
}

/* The bytes of the stored zip archive of e[0..n), each entry's data 64-byte aligned. The local
 * headers libzip writes for stored entries of known size are 30 bytes, the name and the extra
 * fields asked for here (tests/test_pth_write.c walks the result to check where data lies). */
static int zip_entries(const Entry *e, int n, unsigned char **out, size_t *size) {
    *out = NULL;
    *size = 0;
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(NULL, 0, 0, &ze);
    zip_t *za = src ? zip_open_from_source(src, ZIP_CREATE | ZIP_TRUNCATE, &ze) : NULL;
    if (!za) {
        vil_error("cannot start a zip archive in memory: %s", zip_error_strerror(&ze));
        if (src) zip_source_free(src);
        zip_error_fini(&ze);
        return -1;
    }
    zip_error_fini(&ze);
    zip_source_keep(src); /* read back after zip_close */
    unsigned char pad[ALIGN];
    memset(pad, 'Z', sizeof pad);
    uint64_t at = 0; /* where entry i's local header starts */
    for (int i = 0; i < n; i++) {
        size_t head = LOCAL_HEADER + strlen(e[i].name), extra = 0;
        if ((at + head) % ALIGN) extra = 4 + (ALIGN - (at + head + 4) % ALIGN) % ALIGN;
        zip_source_t *s = zip_source_buffer(za, e[i].data, e[i].size, 0);
        zip_int64_t idx = s ? zip_file_add(za, e[i].name, s, ZIP_FL_ENC_UTF_8) : -1;
        if (idx < 0 && s) zip_source_free(s);
        if (idx < 0 || zip_set_file_compression(za, (zip_uint64_t)idx, ZIP_CM_STORE, 0) != 0 ||
            zip_file_set_dostime(za, (zip_uint64_t)idx, 0, DOS_DATE, 0) != 0 ||
            (extra && zip_file_extra_field_set(za, (zip_uint64_t)idx, PAD_ID, ZIP_EXTRA_FIELD_NEW,
                                               pad, (zip_uint16_t)(extra - 4), ZIP_FL_LOCAL) < 0)) {
            vil_error("cannot add '%s' to the archive: %s", e[i].name, zip_strerror(za));
            zip_discard(za);
            zip_source_free(src);
            return -1;
        }
        at += head + extra + e[i].size;
    }
    if (zip_close(za) != 0) {
        vil_error("cannot build the archive: %s", zip_strerror(za));
        zip_discard(za);
        zip_source_free(src);
        return -1;
    }
    zip_stat_t zs;
    zip_stat_init(&zs);
    int rc = -1;
    if (zip_source_stat(src, &zs) == 0 && (zs.valid & ZIP_STAT_SIZE) && zip_source_open(src) == 0) {
        unsigned char *b = vil_malloc(zs.size ? (size_t)zs.size : 1);
        zip_int64_t got = zip_source_read(src, b, zs.size);
        zip_source_close(src);
        if (got >= 0 && (zip_uint64_t)got == zs.size) {
            *out = b;
            *size = (size_t)zs.size;
            rc = 0;
        } else {
            free(b);
        }
    }
    if (rc != 0)
        vil_error("cannot read the archive back from memory: %s",
                  zip_error_strerror(zip_source_error(src)));
    zip_source_free(src);
    return rc;
}

int vil_pth_serialize(const VilStTensor *t, int n, char *const *keys, char *const *vals, int n_meta,
                      unsigned char **out, size_t *size) {
    *out = NULL;
    *size = 0;
    if (n < 0 || n_meta < 0 || n > (1 << 20)) {
        vil_error(".pth writer: %d tensors, %d metadata entries", n, n_meta);
        return VIL_EUSAGE;
    }
    char **names = vil_malloc((size_t)(n ? n : 1) * sizeof *names);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        VilPkDtype dt;
        size_t len = t[i].name ? strlen(t[i].name) : 0;
        names[i] = t[i].name;
        if (len == 0 || len > MAX_NAME) {
            vil_error(".pth writer: tensor %d's name is empty or longer than %d bytes", i, MAX_NAME);
            rc = VIL_EUSAGE;
        } else if (pk_dtype(t[i].dtype, &dt) != 0) {
            vil_error(".pth writer: tensor '%s' has dtype %s, which has no torch storage type here",
                      t[i].name, vil_st_dtype_name(t[i].dtype));
            rc = VIL_EUSAGE;
        } else if (numel_of(&t[i]) < 0) {
            vil_error(".pth writer: tensor '%s' has %d dimensions or a size out of range",
                      t[i].name, t[i].ndim);
            rc = VIL_EUSAGE;
        } else if (!t[i].data && numel_of(&t[i]) > 0) {
            vil_error(".pth writer: tensor '%s' has no data", t[i].name);
            rc = VIL_EUSAGE;
        }
    }
    const char *dup = rc == 0 ? repeated(names, n) : NULL;
    if (dup) {
        vil_error(".pth writer: tensor '%s' given twice", dup);
        rc = VIL_EUSAGE;
    }
    free(names);
    for (int i = 0; i < n_meta && rc == 0; i++)
        if (!keys[i] || !vals[i]) {
            vil_error(".pth writer: metadata entry %d is NULL", i);
            rc = VIL_EUSAGE;
        }
    dup = rc == 0 ? repeated(keys, n_meta) : NULL;
    if (dup) {
        vil_error(".pth writer: metadata key '%s' given twice", dup);
        rc = VIL_EUSAGE;
    }
    if (rc != 0) return rc;

    unsigned char *pkl;
    size_t pkl_n;
    if (pickle_checkpoint(t, n, keys, vals, n_meta, &pkl, &pkl_n) != 0) return -1;
    Entry *e = vil_calloc((size_t)n + 3, sizeof *e);
    int k = 0;
    e[k++] = (Entry){PREFIX "/data.pkl", pkl, pkl_n};
    e[k++] = (Entry){PREFIX "/byteorder", "little", 6};
    for (int i = 0; i < n; i++) {
        snprintf(e[k].name, sizeof e[k].name, PREFIX "/data/%d", i);
        e[k].data = t[i].data;
        e[k++].size = (size_t)numel_of(&t[i]) * vil_st_dtype_size(t[i].dtype);
    }
    e[k++] = (Entry){PREFIX "/version", "3\n", 2};
    rc = zip_entries(e, k, out, size);
    free(e);
    free(pkl);
    return rc;
}

int vil_pth_write(const char *path, const VilStTensor *t, int n, char *const *keys,
                  char *const *vals, int n_meta) {
    unsigned char *b;
    size_t size;
    int rc = vil_pth_serialize(t, n, keys, vals, n_meta, &b, &size);
    if (rc != 0) return rc;
    rc = vil_write_file_atomic(path, b, size);
    free(b);
    if (rc != 0) vil_error("cannot save '%s'", path);
    return rc;
}
