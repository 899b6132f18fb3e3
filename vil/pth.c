/* pth.c: the torch.save zip reader of pth.h. The archive is NAME/data.pkl (the pickled object,
 * tensors as persistent ids), NAME/data/KEY (one storage per key, raw little-endian elements),
 * NAME/version and, since torch 2.0, NAME/byteorder. Only data.pkl and the storages of the one
 * state dict asked for are read: a training checkpoint's optimizer moments stay on disk. */
#include "pth.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "common.h"
#include "pickle.h"

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

/* One whole entry into a new buffer of exactly want bytes (want == (size_t)-1: any size up to
 * max). libzip checks the CRC as the last byte is read. */
static int read_entry(zip_t *za, const char *name, size_t want, size_t max, unsigned char **out,
                      size_t *n) {
    *out = NULL;
    zip_int64_t idx = zip_name_locate(za, name, ZIP_FL_ENC_RAW);
    if (idx < 0) {
        vil_error("the archive has no entry '%s'", name);
        return -1;
    }
    zip_stat_t zs;
    if (zip_stat_index(za, (zip_uint64_t)idx, 0, &zs) != 0 || !(zs.valid & ZIP_STAT_SIZE)) {
        vil_error("entry '%s': %s", name, zip_strerror(za));
        return -1;
    }
    if (want != (size_t)-1 && zs.size != want) {
        vil_error("entry '%s' holds %" PRIu64 " bytes, its tensors need %zu", name,
                  (uint64_t)zs.size, want);
        return -1;
    }
    if (zs.size > max) {
        vil_error("entry '%s' is %" PRIu64 " bytes, over the limit of %zu", name,
                  (uint64_t)zs.size, max);
        return -1;
    }
    zip_file_t *f = zip_fopen_index(za, (zip_uint64_t)idx, 0);
    if (!f) {
        vil_error("entry '%s': %s", name, zip_strerror(za));
        return -1;
    }
    size_t size = (size_t)zs.size;
    unsigned char *buf = vil_malloc_aligned(size ? size : 1);
    size_t got = 0;
    while (got < size) {
        zip_int64_t k = zip_fread(f, buf + got, size - got);
        if (k <= 0) break;
        got += (size_t)k;
    }
    /* one more read: the CRC is checked when the end is reached */
    unsigned char extra;
    zip_int64_t tail = got == size ? zip_fread(f, &extra, 1) : -1;
    int rc = 0;
    if (got != size || tail != 0) {
        vil_error("entry '%s' cannot be read whole (%zu of %zu bytes): %s", name, got,
                  size, zip_file_strerror(f));
        rc = -1;
    }
    zip_fclose(f);
    if (rc != 0) {
        free(buf);
        return rc;
    }
    *out = buf;
    *n = size;
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

/* the view t of storage s (es bytes per element) as a contiguous tensor at dst */
static void gather(unsigned char *dst, const unsigned char *s, const VilPkTensor *t, size_t es) {
    int contiguous = 1;
    int64_t want = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->size[i] != 1 && t->stride[i] != want) contiguous = 0;
        want *= t->size[i];
    }
    if (contiguous || t->numel <= 1) {
        memcpy(dst, s + (size_t)t->offset * es, (size_t)t->numel * es);
        return;
    }
    int64_t idx[VIL_PK_MAX_DIMS] = {0};
    for (int64_t k = 0; k < t->numel; k++) {
        int64_t at = t->offset;
        for (int i = 0; i < t->ndim; i++) at += idx[i] * t->stride[i];
        memcpy(dst + (size_t)k * es, s + (size_t)at * es, es);
        for (int i = t->ndim - 1; i >= 0 && ++idx[i] == t->size[i]; i--) idx[i] = 0;
    }
}

static int read_tensors(zip_t *za, const char *prefix, const VilPkObj *d, VilSafetensors *st) {
    int n = d->n / 2;
    VilStTensor *ts = vil_calloc((size_t)(n ? n : 1), sizeof *ts);
    int strip = n > 0, rc = 0;
    size_t total = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const VilPkObj *k = d->items[2 * i], *v = d->items[2 * i + 1];
        if (k->kind != VIL_PK_STR || k->len == 0 || k->len > MAX_NAME || strlen(k->s) != k->len) {
            vil_error("state dict key %d is %s, not a tensor name", i, vil_pk_kind_name(k));
            rc = -1;
            break;
        }
        if (v->kind != VIL_PK_TENSOR) {
            vil_error("state dict entry '%s' is %s, not a tensor", k->s, vil_pk_kind_name(v));
            rc = -1;
            break;
        }
        const VilPkTensor *t = v->tensor;
        size_t es = vil_pk_dtype_size(v->dtype);
        if ((uint64_t)t->numel > VIL_PTH_MAX_ENTRY / es || total + (size_t)t->numel * es > VIL_PTH_MAX_ENTRY) {
            vil_error("tensor '%s' takes the state dict over %zu bytes", k->s, VIL_PTH_MAX_ENTRY);
            rc = -1;
            break;
        }
        ts[i].name = k->s;
        ts[i].dtype = st_dtype(v->dtype);
        ts[i].ndim = t->ndim;
        for (int j = 0; j < t->ndim; j++) ts[i].shape[j] = t->size[j];
        total = (total + 63) & ~(size_t)63; /* each tensor 64-byte aligned, as in vil's files */
        ts[i].offset = total;
        ts[i].nbytes = (size_t)t->numel * es;
        total += ts[i].nbytes;
        strip &= strncmp(k->s, "module.", 7) == 0 && k->len > 7;
    }
    unsigned char *buf = rc == 0 ? vil_malloc_aligned(total ? total : 1) : NULL;
    /* the storages, each read once; tensors that share one (views) are cut from the same copy */
    unsigned char *sbuf = NULL;
    const VilPkObj *sobj = NULL;
    for (int i = 0; i < n && rc == 0; i++) {
        const VilPkObj *v = d->items[2 * i + 1];
        const VilPkObj *s = v->tensor->storage;
        if (s != sobj && (!sobj || strcmp(s->s, sobj->s) != 0 || s->dtype != sobj->dtype || s->i != sobj->i)) {
            free(sbuf);
            sbuf = NULL;
            sobj = s;
            char name[VIL_PK_MAX_GLOBAL + 512];
            snprintf(name, sizeof name, "%s/data/%s", prefix, s->s);
            size_t es = vil_pk_dtype_size(s->dtype), got;
            /* the entry's message, with the tensor that needed it */
            VilErrCapture cap;
            vil_error_capture(&cap);
            rc = read_entry(za, name, (size_t)s->i * es, VIL_PTH_MAX_ENTRY, &sbuf, &got);
            vil_error_release(&cap);
            if (rc != 0) {
                vil_error("tensor '%s': %s", d->items[2 * i]->s, cap.msg);
                break;
            }
        }
        gather(buf + ts[i].offset, sbuf, v->tensor, vil_pk_dtype_size(v->dtype));
    }
    free(sbuf);
    if (rc == 0) {
        for (int i = 0; strip && i < n; i++) ts[i].name += 7;
        rc = vil_st_from_memory(st, buf, total, ts, n);
    } else {
        free(buf);
    }
    free(ts);
    return rc;
}

static int read_archive(zip_t *za, int ema, VilSafetensors *st, VilPthInfo *info) {
    char prefix[256];
    if (find_prefix(za, prefix, sizeof prefix) != 0) return -1;
    char name[300];
    unsigned char *b = NULL;
    size_t n = 0;
    snprintf(name, sizeof name, "%s/byteorder", prefix);
    if (zip_name_locate(za, name, ZIP_FL_ENC_RAW) >= 0) {
        if (read_entry(za, name, (size_t)-1, 64, &b, &n) != 0) return -1;
        int little = n == 6 && memcmp(b, "little", 6) == 0;
        free(b);
        if (!little) {
            vil_error("the storages are not little-endian (byteorder entry)");
            return -1;
        }
    }
    snprintf(name, sizeof name, "%s/data.pkl", prefix);
    if (read_entry(za, name, (size_t)-1, VIL_PK_MAX_BYTES, &b, &n) != 0) return -1;
    VilErrCapture cap;
    vil_error_capture(&cap);
    VilPickle *pk = vil_pickle_load(b, n);
    vil_error_release(&cap);
    free(b);
    if (!pk) {
        vil_error("data.pkl: %s", cap.msg);
        return -1;
    }
    const VilPkObj *root = vil_pickle_root(pk);
    if (root->kind == VIL_PK_DICT) describe(root, info);
    const VilPkObj *d = select_dict(root, ema, info);
    int rc = d ? read_tensors(za, prefix, d, st) : -1;
    vil_pickle_free(pk);
    return rc;
}

static zip_t *open_source(zip_source_t *src) {
    zip_error_t ze;
    zip_error_init(&ze);
    zip_t *za = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
    if (!za) {
        vil_error("not a readable zip archive: %s", zip_error_strerror(&ze));
        zip_source_free(src);
    }
    zip_error_fini(&ze);
    return za;
}

int vil_pth_parse(const unsigned char *buf, size_t n, int ema, VilSafetensors *st,
                  VilPthInfo *info) {
    memset(st, 0, sizeof *st);
    memset(info, 0, sizeof *info);
    info->epoch = -1;
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_buffer_create(buf, n, 0, &ze);
    zip_error_fini(&ze);
    if (!src) {
        vil_error("cannot read the bytes as a zip archive");
        return -1;
    }
    zip_t *za = open_source(src);
    if (!za) return -1;
    int rc = read_archive(za, ema, st, info);
    zip_discard(za);
    return rc;
}

int vil_pth_read(const char *path, int ema, VilSafetensors *st, VilPthInfo *info) {
    memset(st, 0, sizeof *st);
    memset(info, 0, sizeof *info);
    info->epoch = -1;
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *src = zip_source_file_create(path, 0, -1, &ze);
    int rc = -1;
    /* the reader's messages name no file: one message that says which */
    VilErrCapture cap;
    vil_error_capture(&cap);
    if (!src) {
        vil_error("cannot open: %s", zip_error_strerror(&ze));
    } else {
        zip_t *za = open_source(src);
        if (za) {
            rc = read_archive(za, ema, st, info);
            zip_discard(za);
        }
    }
    vil_error_release(&cap);
    zip_error_fini(&ze);
    if (rc != 0) vil_error("'%s': %s", path, cap.msg);
    return rc;
}
