/* pth.c: the torch.save zip reader of pth.h. The archive is NAME/data.pkl (the pickled object,
 * tensors as persistent ids), NAME/data/KEY (one storage per key, raw little-endian elements),
 * NAME/version and, since torch 2.0, NAME/byteorder. Only data.pkl and the storages of the one
 * state dict asked for are read: a training checkpoint's optimizer moments stay on disk. A file
 * vil wrote also holds vil_metadata, which becomes the VilSafetensors' metadata. */
#define _GNU_SOURCE /* qsort_r */
#include "formats/pth.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "vil/common.h"
#include "formats/pickle.h"

#define MAX_ENTRIES (1 << 20)
#define MAX_NAME 255 /* a state-dict key */


int vil_pth_sniff(const unsigned char *head, size_t n) {
    if (n >= 4 && head[0] == 'P' && head[1] == 'K' &&
        ((head[2] == 3 && head[3] == 4) || (head[2] == 5 && head[3] == 6)))
        return 1;
    /* the legacy format opens with the pickled magic number: PROTO 2, LONG1 of 10 bytes */
    if (n >= 4 && head[0] == 0x80 && head[1] == 0x02 && head[2] == 0x8a && head[3] == 0x0a) return 2;
    return 0;
}

static VilStDtype st_dtype(VilPkDtype d) {
    switch (d) {
    case VIL_PK_F32: return VIL_ST_F32;
    case VIL_PK_F16: return VIL_ST_F16;
    case VIL_PK_BF16: return VIL_ST_BF16;
    case VIL_PK_F64: return VIL_ST_F64;
    case VIL_PK_I64: return VIL_ST_I64;
    case VIL_PK_I32: return VIL_ST_I32;
    case VIL_PK_BOOLT: return VIL_ST_BOOL;
    }
    return VIL_ST_F32;
}

/* deflate never makes more than 1032 bytes of one (a 258-byte match in 2 bits) */
#define MAX_DEFLATE_RATIO 1032

/* Where entry name lies and how large it is, before anything is read: stored or deflated (what
 * zip tools write; torch.save stores), want bytes ((size_t)-1: any) up to max, and a size its
 * compressed bytes inside the archive (arch bytes) can hold, so a central directory that lies
 * about a size sizes nothing. */
static int stat_entry(zip_t *za, uint64_t arch, const char *name, size_t want, size_t max,
                      zip_int64_t *idx, zip_stat_t *zs) {
    *idx = zip_name_locate(za, name, ZIP_FL_ENC_RAW);
    if (*idx < 0) {
        vil_error("the archive has no entry '%s'", name);
        return -1;
    }
    if (zip_stat_index(za, (zip_uint64_t)*idx, 0, zs) != 0 ||
        (zs->valid & (ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD)) !=
            (ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD)) {
        vil_error("entry '%s': %s", name, zip_strerror(za));
        return -1;
    }
    if (want != (size_t)-1 && zs->size != want) {
        vil_error("entry '%s' holds %" PRIu64 " bytes, its tensors need %zu", name,
                  (uint64_t)zs->size, want);
        return -1;
    }
    if (zs->size > max) {
        vil_error("entry '%s' is %" PRIu64 " bytes, over the limit of %zu", name,
                  (uint64_t)zs->size, max);
        return -1;
    }
    if (zs->comp_method != ZIP_CM_STORE && zs->comp_method != ZIP_CM_DEFLATE) {
        vil_error("entry '%s' is compressed with method %d; vil reads stored and deflated "
                  "entries only", name, (int)zs->comp_method);
        return -1;
    }
    uint64_t c = zs->comp_size;
    if (c > arch || (zs->comp_method == ZIP_CM_STORE ? zs->size != c
                                                    : zs->size > c * MAX_DEFLATE_RATIO + 1024)) {
        vil_error("entry '%s' claims %" PRIu64 " bytes from %" PRIu64 " compressed bytes in a "
                  "%" PRIu64 "-byte archive: a damaged or forged archive", name,
                  (uint64_t)zs->size, c, arch);
        return -1;
    }
    return 0;
}

/* Bytes [lo, hi) of entry idx (size bytes) into out: the bytes before are skipped and the rest
 * is read too (through a small scratch buffer), so that libzip checks the CRC at the end. */
static int read_span(zip_t *za, zip_int64_t idx, const char *name, uint64_t size, uint64_t lo,
                     uint64_t hi, unsigned char *out) {
    zip_file_t *f = zip_fopen_index(za, (zip_uint64_t)idx, 0);
    if (!f) {
        vil_error("entry '%s': %s", name, zip_strerror(za));
        return -1;
    }
    enum { SCRATCH = 1 << 16 };
    unsigned char *scratch = vil_malloc(SCRATCH);
    uint64_t got = 0;
    int rc = 0;
    while (got < size) {
        uint64_t stop = got < lo ? lo : got < hi ? hi : size;
        uint64_t want = stop - got;
        unsigned char *dst = got >= lo && got < hi ? out + (got - lo) : scratch;
        if (dst == scratch && want > SCRATCH) want = SCRATCH;
        zip_int64_t k = zip_fread(f, dst, want);
        if (k <= 0) break;
        got += (uint64_t)k;
    }
    /* one more read: the CRC is checked when the end is reached */
    zip_int64_t tail = got == size ? zip_fread(f, scratch, 1) : -1;
    if (got != size || tail != 0) {
        vil_error("entry '%s' cannot be read whole (%" PRIu64 " of %" PRIu64 " bytes): %s", name,
                  got, size, zip_file_strerror(f));
        rc = -1;
    }
    free(scratch);
    zip_fclose(f);
    return rc;
}

/* One whole entry (up to max bytes) into a new buffer. */
static int read_entry(zip_t *za, uint64_t arch, const char *name, size_t max, unsigned char **out,
                      size_t *n) {
    *out = NULL;
    zip_int64_t idx;
    zip_stat_t zs;
    if (stat_entry(za, arch, name, (size_t)-1, max, &idx, &zs) != 0) return -1;
    unsigned char *buf = vil_try_malloc(zs.size ? (size_t)zs.size : 1);
    if (!buf) return -1;
    if (read_span(za, idx, name, zs.size, 0, zs.size, buf) != 0) {
        free(buf);
        return -1;
    }
    *out = buf;
    *n = (size_t)zs.size;
    return 0;
}

/* the prefix NAME of the one NAME/data.pkl entry */
static int find_prefix(zip_t *za, char *prefix, size_t cap) {
    zip_int64_t n = zip_get_num_entries(za, 0);
    if (n < 0 || n > MAX_ENTRIES) {
        vil_error("the archive lists %lld entries (at most %d are read)", (long long)n,
                  MAX_ENTRIES);
        return -1;
    }
    int found = 0;
    for (zip_int64_t i = 0; i < n; i++) {
        const char *nm = zip_get_name(za, (zip_uint64_t)i, ZIP_FL_ENC_RAW);
        if (!nm) continue;
        const char *slash = strchr(nm, '/');
        if (!slash || slash == nm || strcmp(slash, "/data.pkl") != 0) continue;
        if ((size_t)(slash - nm) >= cap) {
            vil_error("archive folder name too long");
            return -1;
        }
        if (found++) {
            vil_error("the archive holds more than one data.pkl");
            return -1;
        }
        memcpy(prefix, nm, (size_t)(slash - nm));
        prefix[slash - nm] = 0;
    }
    if (!found) {
        vil_error("a zip archive without NAME/data.pkl: not a file torch.save wrote");
        return -1;
    }
    return 0;
}

static void copy_str(char *dst, size_t cap, const VilPkObj *o) {
    if (o && o->kind == VIL_PK_STR) snprintf(dst, cap, "%s", o->s);
}

static void describe(const VilPkObj *root, VilPthInfo *info) {
    size_t k = 0;
    for (int i = 0; i + 1 < root->n; i += 2) {
        const VilPkObj *key = root->items[i];
        if (key->kind != VIL_PK_STR || k + 2 >= sizeof info->keys) continue;
        k += (size_t)snprintf(info->keys + k, sizeof info->keys - k, "%s%.40s", k ? ", " : "", key->s);
        if (k >= sizeof info->keys) k = sizeof info->keys - 1;
    }
    const VilPkObj *ep = vil_pk_get(root, "epoch"), *ema = vil_pk_get(root, "model_ema");
    info->epoch = ep && ep->kind == VIL_PK_INT ? (long)ep->i : -1;
    info->has_ema = ema && ema->kind == VIL_PK_DICT;
    const VilPkObj *args = vil_pk_get(root, "args");
    const VilPkObj *in = vil_pk_get(args, "input_size");
    if (in && in->kind == VIL_PK_INT && in->i > 0 && in->i <= 65536) info->img_size = (int)in->i;
    const VilPkObj *cr = vil_pk_get(args, "eval_crop_ratio");
    if (cr && cr->kind == VIL_PK_FLOAT && cr->f > 0 && cr->f <= 1) info->crop_pct = (float)cr->f;
    copy_str(info->model, sizeof info->model, vil_pk_get(args, "model"));
    copy_str(info->data_set, sizeof info->data_set, vil_pk_get(args, "data_set"));
}

static int all_tensors(const VilPkObj *d) {
    if (!d || d->kind != VIL_PK_DICT || d->n == 0) return 0;
    for (int i = 1; i < d->n; i += 2)
        if (d->items[i]->kind != VIL_PK_TENSOR) return 0;
    return 1;
}

/* the state dict asked for */
static const VilPkObj *select_dict(const VilPkObj *root, int ema, VilPthInfo *info) {
    if (root->kind != VIL_PK_DICT) {
        vil_error("data.pkl holds %s, not a checkpoint dict", vil_pk_kind_name(root));
        return NULL;
    }
    int is_state_dict = all_tensors(root);
    if (is_state_dict) info->keys[0] = 0; /* its keys are tensor names */
    if (ema) {
        const VilPkObj *e = vil_pk_get(root, "model_ema");
        if (!e || e->kind != VIL_PK_DICT) {
            vil_error("--ema: the file has no model_ema state dict (its keys: %s)",
                      info->keys[0] ? info->keys : "tensor names only: it is a state dict");
            return NULL;
        }
        snprintf(info->weights, sizeof info->weights, "model_ema");
        return e;
    }
    static const char *const KEYS[] = {"model", "state_dict"};
    for (int i = 0; i < 2; i++) {
        const VilPkObj *d = vil_pk_get(root, KEYS[i]);
        if (d && d->kind == VIL_PK_DICT) {
            snprintf(info->weights, sizeof info->weights, "%s", KEYS[i]);
            return d;
        }
    }
    if (is_state_dict) return root;
    vil_error("no state dict in the file: no 'model' or 'state_dict' entry, and the "
              "top level is not all tensors (its keys: %s)", info->keys);
    return NULL;
}

/* the elements [first, last] of storage a view t reaches (numel > 0) */
static void view_span(const VilPkTensor *t, int64_t *first, int64_t *last) {
    *first = *last = t->offset;
    for (int i = 0; i < t->ndim; i++) *last += (t->size[i] - 1) * t->stride[i];
}

/* the view t as a contiguous tensor at dst, from s: the storage's elements from base on (es
 * bytes each) */
static void gather(unsigned char *dst, const unsigned char *s, int64_t base, const VilPkTensor *t,
                   size_t es) {
    int contiguous = 1;
    int64_t want = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->size[i] != 1 && t->stride[i] != want) contiguous = 0;
        want *= t->size[i];
    }
    if (t->numel == 0) return;
    if (contiguous || t->numel == 1) {
        memcpy(dst, s + (size_t)(t->offset - base) * es, (size_t)t->numel * es);
        return;
    }
    int64_t idx[VIL_PK_MAX_DIMS] = {0};
    for (int64_t k = 0; k < t->numel; k++) {
        int64_t at = t->offset - base;
        for (int i = 0; i < t->ndim; i++) at += idx[i] * t->stride[i];
        memcpy(dst + (size_t)k * es, s + (size_t)at * es, es);
        for (int i = t->ndim - 1; i >= 0 && ++idx[i] == t->size[i]; i--) idx[i] = 0;
    }
}

/* An archive opened for its descriptors: what vil_st_load needs to read the storages. */
typedef struct {
    zip_t *za;
    uint64_t arch; /* the archive's bytes */
    VilPickle *pk;
    char prefix[256];
    const VilPkObj **views; /* (n_tensors) each tensor's VIL_PK_TENSOR, in st's order */
} PthSource;

static void pth_close(void *ctx) {
    PthSource *ps = ctx;
    if (!ps) return;
    vil_pickle_free(ps->pk);
    if (ps->za) zip_discard(ps->za);
    free(ps->views);
    free(ps);
}

static void entry_name(char *name, size_t cap, const PthSource *ps, const VilPkObj *s) {
    snprintf(name, cap, "%s/data/%s", ps->prefix, s->s);
}

static int same_storage(const VilPkObj *a, const VilPkObj *b) {
    return a == b || (strcmp(a->s, b->s) == 0 && a->dtype == b->dtype && a->i == b->i);
}

/* tensor indices by storage key, so that the views of one storage come together */
static int cmp_storage(const void *a, const void *b, void *ctx) {
    const PthSource *ps = ctx;
    const VilPkObj *x = ps->views[*(const int *)a]->tensor->storage;
    const VilPkObj *y = ps->views[*(const int *)b]->tensor->storage;
    int c = strcmp(x->s, y->s);
    return c ? c : *(const int *)a - *(const int *)b;
}
/* NULL (reported) without the memory */
static int *by_storage(PthSource *ps, const int *idx, int n) {
    int *o = vil_try_malloc((size_t)(n ? n : 1) * sizeof(int));
    if (!o) return NULL;
    memcpy(o, idx, (size_t)n * sizeof(int));
    qsort_r(o, (size_t)n, sizeof(int), cmp_storage, ps);
    return o;
}

/* Each storage that a wanted tensor views is read once, only the span [first, last] its wanted
 * views reach: the storages of the tensors not wanted (a training checkpoint's other dicts, or
 * what the caller's model has no place for) are never inflated. */
static int pth_load(void *ctx, VilSafetensors *st, const unsigned char *want) {
    PthSource *ps = ctx;
    int n = 0;
    int *idx = vil_try_malloc((size_t)(st->n_tensors ? st->n_tensors : 1) * sizeof(int));
    if (!idx) return -1;
    for (int i = 0; i < st->n_tensors; i++)
        if ((!want || want[i]) && ps->views[i]->tensor->numel > 0) idx[n++] = i;
    int *ord = by_storage(ps, idx, n);
    free(idx);
    if (!ord) return -1;
    int rc = 0;
    for (int a = 0; a < n && rc == 0;) {
        const VilPkObj *s = ps->views[ord[a]]->tensor->storage;
        int b = a;
        int64_t lo = INT64_MAX, hi = -1;
        for (; b < n && same_storage(ps->views[ord[b]]->tensor->storage, s); b++) {
            int64_t f, l;
            view_span(ps->views[ord[b]]->tensor, &f, &l);
            if (f < lo) lo = f;
            if (l > hi) hi = l;
        }
        size_t es = vil_pk_dtype_size(s->dtype);
        char name[VIL_PK_MAX_GLOBAL + 512];
        entry_name(name, sizeof name, ps, s);
        zip_int64_t zi;
        zip_stat_t zs;
        unsigned char *span = NULL;
        VilErrCapture cap;
        vil_error_capture(&cap);
        rc = stat_entry(ps->za, ps->arch, name, (size_t)s->i * es, VIL_PTH_MAX_ENTRY, &zi, &zs);
        /* a deflated entry may claim up to MAX_DEFLATE_RATIO times its bytes: sized by the file */
        if (rc == 0 && !(span = vil_try_malloc((size_t)(hi - lo + 1) * es))) rc = -1;
        if (rc == 0) {
            rc = read_span(ps->za, zi, name, zs.size, (uint64_t)lo * es, (uint64_t)(hi + 1) * es,
                           span);
        }
        vil_error_release(&cap);
        if (rc != 0) {
            vil_error("tensor '%s': %s", st->tensors[ord[a]].name, cap.msg);
        } else {
            for (int k = a; k < b; k++) {
                const VilPkObj *v = ps->views[ord[k]];
                gather((unsigned char *)st->tensors[ord[k]].data, span, lo, v->tensor,
                       vil_pk_dtype_size(v->dtype));
            }
        }
        free(span);
        a = b;
    }
    free(ord);
    return rc;
}

/* The descriptors of state dict d: every name and view checked, every storage's entry there,
 * of the size the storage declares and one the archive can hold, and the total bounded, all
 * before anything sized by the file is allocated. */
static int describe_tensors(PthSource *ps, const VilPkObj *d, VilSafetensors *st) {
    int n = d->n / 2;
    VilStTensor *ts = vil_try_calloc((size_t)(n ? n : 1), sizeof *ts);
    ps->views = vil_try_calloc((size_t)(n ? n : 1), sizeof *ps->views);
    if (!ts || !ps->views) {
        free(ts); /* views: pth_close's */
        return -1;
    }
    int strip = n > 0, rc = 0;
    size_t total = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const VilPkObj *k = d->items[2 * i], *v = d->items[2 * i + 1];
        rc = -1;
        if (k->kind != VIL_PK_STR || k->len == 0 || k->len > MAX_NAME || strlen(k->s) != k->len) {
            vil_error("state dict key %d is %s, not a tensor name", i, vil_pk_kind_name(k));
            break;
        }
        if (v->kind != VIL_PK_TENSOR) {
            vil_error("state dict entry '%s' is %s, not a tensor", k->s, vil_pk_kind_name(v));
            break;
        }
        const VilPkTensor *t = v->tensor;
        const VilPkObj *s = t->storage;
        size_t es = vil_pk_dtype_size(v->dtype), ses = vil_pk_dtype_size(s->dtype);
        /* the unpickler has put the view inside the storage's declared elements; a view of more
         * elements than its storage holds (stride 0) would make bytes out of nothing */
        if (t->numel > s->i || (uint64_t)s->i > VIL_PTH_MAX_ENTRY / ses) {
            vil_error("tensor '%s' has %lld elements from storage '%s' of %lld: vil reads no "
                      "views larger than their storage", k->s, (long long)t->numel, s->s,
                      (long long)s->i);
            break;
        }
        char name[VIL_PK_MAX_GLOBAL + 512];
        entry_name(name, sizeof name, ps, s);
        zip_int64_t zi;
        zip_stat_t zs;
        VilErrCapture cap;
        vil_error_capture(&cap);
        int ok = stat_entry(ps->za, ps->arch, name, (size_t)s->i * ses, VIL_PTH_MAX_ENTRY, &zi, &zs) == 0;
        vil_error_release(&cap);
        if (!ok) {
            vil_error("tensor '%s': %s", k->s, cap.msg);
            break;
        }
        total = (total + 63) & ~(size_t)63; /* each tensor 64-byte aligned, as in vil's files */
        if ((size_t)t->numel * es > VIL_PTH_MAX_ENTRY - total) {
            vil_error("tensor '%s' takes the state dict over %zu bytes", k->s, VIL_PTH_MAX_ENTRY);
            break;
        }
        ts[i].name = k->s;
        ts[i].dtype = st_dtype(v->dtype);
        ts[i].ndim = t->ndim;
        for (int j = 0; j < t->ndim; j++) ts[i].shape[j] = t->size[j];
        ts[i].offset = total;
        ts[i].nbytes = (size_t)t->numel * es;
        total += ts[i].nbytes;
        ps->views[i] = v;
        strip &= strncmp(k->s, "module.", 7) == 0 && k->len > 7;
        rc = 0;
    }
    /* views may repeat a storage's bytes (tied weights), but not without bound */
    int *idx = NULL, *ord = NULL;
    if (rc == 0 && !(idx = vil_try_malloc((size_t)(n ? n : 1) * sizeof(int)))) rc = -1;
    if (rc == 0) {
        for (int i = 0; i < n; i++) idx[i] = i;
        if (!(ord = by_storage(ps, idx, n))) rc = -1;
    }
    if (rc == 0) {
        uint64_t distinct = 0;
        for (int i = 0; i < n; i++) {
            const VilPkObj *s = ps->views[ord[i]]->tensor->storage;
            if (i == 0 || !same_storage(ps->views[ord[i - 1]]->tensor->storage, s))
                distinct += (uint64_t)s->i * vil_pk_dtype_size(s->dtype);
        }
        if (total > 2 * distinct + (1u << 20)) {
            vil_error("the state dict's tensors hold %zu bytes from %" PRIu64 " bytes of storages: "
                      "vil reads views that repeat their storages at most twice over", total,
                      distinct);
            rc = -1;
        }
    }
    free(ord);
    free(idx);
    if (rc == 0) {
        for (int i = 0; strip && i < n; i++) ts[i].name += 7;
        rc = vil_st_from_memory(st, NULL, total, ts, n);
    }
    free(ts);
    return rc;
}

/* The checkpoint's vil_metadata (optional; the files vil writes) as st's metadata, held to what
 * the safetensors reader asks of __metadata__: an object of strings (here a dict, or an
 * OrderedDict, of str to str), no key twice; and no NUL inside a string, which the metadata's
 * C strings could not hold. What the keys say (vil.config, ...) is checked where it is used. */
static int take_metadata(const VilPkObj *m, VilSafetensors *st) {
    if (m->kind != VIL_PK_DICT || m->cls == VIL_PK_CLS_NAMESPACE) {
        vil_error("'%s' is %s, not a dict of strings", VIL_PTH_META_KEY, vil_pk_kind_name(m));
        return -1;
    }
    int n = m->n / 2;
    st->meta_keys = vil_try_calloc((size_t)(n ? n : 1), sizeof(char *));
    st->meta_vals = vil_try_calloc((size_t)(n ? n : 1), sizeof(char *));
    if (!st->meta_keys || !st->meta_vals) return -1;
    char shown[160];
    for (int i = 0; i < n; i++) {
        const VilPkObj *k = m->items[2 * i], *v = m->items[2 * i + 1];
        if (k->kind != VIL_PK_STR || strlen(k->s) != k->len) {
            vil_error("'%s' entry %d has %s for a key, not a string without NUL bytes",
                      VIL_PTH_META_KEY, i, vil_pk_kind_name(k));
            return -1;
        }
        if (v->kind != VIL_PK_STR || strlen(v->s) != v->len) {
            vil_error("'%s' key '%s' holds %s; metadata values must be strings (without NUL bytes)",
                      VIL_PTH_META_KEY, vil_printable(shown, sizeof shown, k->s), vil_pk_kind_name(v));
            return -1;
        }
        if (vil_st_meta_add(st, k->s, v->s) != 0) return -1;
    }
    const char *twice = NULL;
    if (vil_st_meta_repeated(st, &twice) != 0) return -1;
    if (twice) {
        vil_error("'%s' key '%s' appears twice", VIL_PTH_META_KEY, vil_printable(shown, sizeof shown, twice));
        return -1;
    }
    return 0;
}

/* data.pkl of the archive and the descriptors of the state dict asked for; on success ps
 * belongs to st (its source) */
static int open_archive(PthSource *ps, int ema, VilSafetensors *st, VilPthInfo *info) {
    zip_t *za = ps->za;
    if (find_prefix(za, ps->prefix, sizeof ps->prefix) != 0) return -1;
    char name[300];
    unsigned char *b = NULL;
    size_t n = 0;
    snprintf(name, sizeof name, "%s/byteorder", ps->prefix);
    if (zip_name_locate(za, name, ZIP_FL_ENC_RAW) >= 0) {
        if (read_entry(za, ps->arch, name, 64, &b, &n) != 0) return -1;
        int little = n == 6 && memcmp(b, "little", 6) == 0;
        free(b);
        if (!little) {
            vil_error("the storages are not little-endian (byteorder entry)");
            return -1;
        }
    }
    snprintf(name, sizeof name, "%s/data.pkl", ps->prefix);
    if (read_entry(za, ps->arch, name, VIL_PK_MAX_BYTES, &b, &n) != 0) return -1;
    VilErrCapture cap;
    vil_error_capture(&cap);
    ps->pk = vil_pickle_load(b, n);
    vil_error_release(&cap);
    free(b);
    if (!ps->pk) {
        vil_error("data.pkl: %s", cap.msg);
        return -1;
    }
    const VilPkObj *root = vil_pickle_root(ps->pk);
    if (root->kind == VIL_PK_DICT) describe(root, info);
    const VilPkObj *d = select_dict(root, ema, info);
    if (!d || describe_tensors(ps, d, st) != 0) return -1;
    const VilPkObj *meta = d != root ? vil_pk_get(root, VIL_PTH_META_KEY) : NULL;
    if (meta && take_metadata(meta, st) != 0) return -1;
    st->src = (VilStSource){ps, pth_load, pth_close};
    return 0;
}

/* za (which the source becomes) opened for its descriptors; ps freed on failure */
static int open_source(zip_source_t *src, uint64_t arch, int ema, VilSafetensors *st,
                       VilPthInfo *info) {
    memset(st, 0, sizeof *st);
    zip_error_t ze;
    zip_error_init(&ze);
    zip_t *za = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
    if (!za) {
        vil_error("not a readable zip archive: %s", zip_error_strerror(&ze));
        zip_source_free(src);
        zip_error_fini(&ze);
        return -1;
    }
    zip_error_fini(&ze);
    PthSource *ps = vil_calloc(1, sizeof *ps);
    ps->za = za;
    ps->arch = arch;
    if (open_archive(ps, ema, st, info) != 0) {
        vil_st_free(st);
        pth_close(ps);
        return -1;
    }
    return 0;
}

static void info_init(VilSafetensors *st, VilPthInfo *info) {
    memset(st, 0, sizeof *st);
    memset(info, 0, sizeof *info);
    info->epoch = -1;
}

int vil_pth_parse(const unsigned char *buf, size_t n, int ema, VilSafetensors *st,
                  VilPthInfo *info) {
    info_init(st, info);
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(buf, n, 0, &ze);
    zip_error_fini(&ze);
    if (!src) {
        vil_error("cannot read the bytes as a zip archive");
        return -1;
    }
    if (open_source(src, n, ema, st, info) != 0) return -1;
    if (vil_st_load(st, NULL) != 0) {
        vil_st_free(st);
        return -1;
    }
    return 0;
}

int vil_pth_open(const char *path, int ema, VilSafetensors *st, VilPthInfo *info) {
    info_init(st, info);
    int fd = vil_open_regular(path);
    if (fd < 0) return -1;
    struct stat sb;
    FILE *f = fstat(fd, &sb) == 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        vil_error("cannot open '%s': %s", path, vil_errno_str());
        close(fd);
        return -1;
    }
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_filep_create(f, 0, -1, &ze); /* owns f from here */
    int rc = -1;
    /* the reader's messages name no file: one message that says which */
    VilErrCapture cap;
    vil_error_capture(&cap);
    if (!src) {
        vil_error("cannot open: %s", zip_error_strerror(&ze));
        fclose(f);
    } else {
        rc = open_source(src, (uint64_t)sb.st_size, ema, st, info);
    }
    vil_error_release(&cap);
    zip_error_fini(&ze);
    if (rc != 0) vil_error("'%s': %s", path, cap.msg);
    return rc;
}

int vil_pth_read(const char *path, int ema, VilSafetensors *st, VilPthInfo *info) {
    if (vil_pth_open(path, ema, st, info) != 0) return -1;
    return vil_st_load_all(st, path);
}
