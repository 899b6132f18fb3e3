/* dataset.c: finding the samples of a dataset (class folders, flat folder + labels file, IDX
 * files), validating them before any work starts, and reading one sample's bytes or pixels.
 * Reads are const and thread-safe: the loader's workers call them concurrently. */
#define _GNU_SOURCE
#include "data/dataset.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data/shards.h"
#include "vil/common.h"

struct VilDataset {
    VilDataKind kind;
    int n, cap, num_classes;
    int *labels;        /* (n) */
    char *root;         /* folder that relative sample paths start from, '/'-terminated */
    char *source;       /* for messages: the folder, or the IDX images file */
    /* file layouts: every sample's path relative to root, in one arena */
    char *arena;
    size_t arena_len, arena_cap;
    size_t *name_off;   /* (n) offsets into arena */
    /* IDX: the decompressed images file, pixels (n, idx_h, idx_w) after its header */
    unsigned char *idx_file, *idx_pixels;
    int idx_h, idx_w;
    char **class_ids;   /* (num_classes) folder name or decimal index */
    char **class_names; /* (num_classes) readable name or NULL */
    int *class_off;     /* (num_classes + 1) */
    int *members;       /* (n) sample indices grouped by class */
    int *orig;          /* (n) a subset's sample indices in the dataset it came from, or NULL */
    /* tar shards: the files, and where each sample's image lies (its name is in the arena) */
    VilShardSet *shards;
    VilShardMember *at; /* (n) */
};

/* What every "not found" message repeats, so the user sees the accepted layouts at once. */
static const char *k_layouts =
    "expected ROOT/train/<class>/<image> and ROOT/val/<class>/<image> (ImageNet layout), "
    "ROOT/train/*.tar and ROOT/val/*.tar (WebDataset shards) or a pattern such as "
    "'shards/train-{0000..0146}.tar', a folder of IDX files (train-images-idx3-ubyte[.gz] ...), "
    "or a flat folder plus --labels FILE";

void vil_buffer_free(VilBuffer *b) {
    if (!b) return;
    free(b->data);
    b->data = NULL;
    b->size = b->cap = 0;
}

/* ---- small growable arrays ---- */
typedef struct {
    char **v;
    int n, cap;
} StrList;

static void strlist_push(StrList *l, const char *s) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->v = vil_realloc(l->v, (size_t)l->cap * sizeof(char *));
    }
    l->v[l->n++] = vil_strdup(s);
}

static void strlist_free(StrList *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Text arena holding every sample's relative path: one allocation instead of 1.28 M. */
static size_t arena_add(VilDataset *ds, const char *a, const char *b) {
    size_t la = strlen(a), lb = b ? strlen(b) : 0;
    size_t need = ds->arena_len + la + (b ? 1 + lb : 0) + 1;
    if (need > ds->arena_cap) {
        size_t cap = ds->arena_cap ? ds->arena_cap : 1 << 16;
        while (cap < need) cap *= 2;
        ds->arena = vil_realloc(ds->arena, cap);
        ds->arena_cap = cap;
    }
    size_t off = ds->arena_len;
    memcpy(ds->arena + off, a, la);
    if (b) {
        ds->arena[off + la] = '/';
        memcpy(ds->arena + off + la + 1, b, lb);
        ds->arena[off + la + 1 + lb] = 0;
    } else {
        ds->arena[off + la] = 0;
    }
    ds->arena_len = need;
    return off;
}

static void push_sample(VilDataset *ds, size_t name_off, int label) {
    if (ds->n == ds->cap) {
        ds->cap = ds->cap ? ds->cap * 2 : 1024;
        ds->name_off = vil_realloc(ds->name_off, (size_t)ds->cap * sizeof(size_t));
        ds->labels = vil_realloc(ds->labels, (size_t)ds->cap * sizeof(int));
    }
    ds->name_off[ds->n] = name_off;
    ds->labels[ds->n] = label;
    ds->n++;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Entries of a folder, hidden ones ('.'-prefixed) skipped, split into folders and other
 * entries (files, and links to them); both sorted by byte order as Python's sorted() does. */
static int list_dir(const char *dir, StrList *dirs, StrList *files) {
    DIR *d = opendir(dir);
    if (!d) {
        char shown[512]; /* a class folder's name comes from the dataset */
        vil_error("cannot open folder '%s': %s", vil_printable(shown, sizeof shown, dir), strerror(errno));
        return -1;
    }
    struct dirent *e;
    errno = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        int isdir = 0, isfile = 0;
        if (e->d_type == DT_DIR) isdir = 1;
        else if (e->d_type == DT_REG) isfile = 1;
        else {
            /* links and file systems without d_type: ask stat, following the link */
            char *p = vil_path_join(dir, e->d_name);
            struct stat st;
            if (stat(p, &st) == 0) {
                isdir = S_ISDIR(st.st_mode);
                isfile = !isdir;
            } else {
                isfile = 1; /* a dangling link is a bad file the loader will report */
            }
            free(p);
        }
        if (isdir && dirs) strlist_push(dirs, e->d_name);
        if (isfile && files) strlist_push(files, e->d_name);
        errno = 0;
    }
    int rerr = errno;
    closedir(d);
    if (rerr) {
        char shown[512];
        vil_error("cannot list folder '%s': %s", vil_printable(shown, sizeof shown, dir), strerror(rerr));
        return -1;
    }
    if (dirs && dirs->n > 1) qsort(dirs->v, (size_t)dirs->n, sizeof(char *), cmp_str);
    if (files && files->n > 1) qsort(files->v, (size_t)files->n, sizeof(char *), cmp_str);
    return 0;
}

static void set_root(VilDataset *ds, const char *dir) {
    size_t l = strlen(dir);
    ds->root = vil_malloc(l + 2);
    memcpy(ds->root, dir, l + 1);
    if (l && dir[l - 1] != '/') strcat(ds->root, "/");
    ds->source = vil_strdup(dir);
}

/* ---- class folders ---- */
static int open_folder(VilDataset *ds, const char *dir) {
    StrList classes = {0}, loose = {0};
    if (list_dir(dir, &classes, &loose) != 0) return -1;
    if (classes.n == 0) {
        if (loose.n > 0)
            vil_error("'%s' holds %d files but no class folders: expected %s/<class>/<image> "
                      "(for a flat folder of images pass a labels file, --labels FILE)",
                      dir, loose.n, dir);
        else
            vil_error("'%s' is empty: %s", dir, k_layouts);
        strlist_free(&classes);
        strlist_free(&loose);
        return -1;
    }
    if (loose.n > 0)
        vil_warn("ignoring %d files in '%s' that are outside class folders", loose.n, dir);
    strlist_free(&loose);
    set_root(ds, dir);
    ds->kind = VIL_DATA_FOLDER;
    ds->num_classes = classes.n;
    ds->class_ids = vil_calloc((size_t)classes.n, sizeof(char *));
    int empty = 0;
    const char *first_empty = NULL;
    for (int c = 0; c < classes.n; c++) {
        ds->class_ids[c] = vil_strdup(classes.v[c]);
        char *cdir = vil_path_join(dir, classes.v[c]);
        StrList files = {0};
        int rc = list_dir(cdir, NULL, &files);
        free(cdir);
        if (rc != 0) {
            strlist_free(&classes);
            return -1;
        }
        /* empty classes keep their index: class numbering must match the train split */
        if (files.n == 0 && !empty++) first_empty = ds->class_ids[c];
        for (int f = 0; f < files.n; f++) push_sample(ds, arena_add(ds, classes.v[c], files.v[f]), c);
        strlist_free(&files);
    }
    strlist_free(&classes);
    if (ds->n == 0) {
        vil_error("no images in the %d class folders of '%s': expected %s/<class>/<image>",
                  ds->num_classes, dir, dir);
        return -1;
    }
    char shown[256];
    if (empty)
        vil_warn("%d class folders of '%s' are empty (first: '%s')", empty, dir,
                 vil_printable(shown, sizeof shown, first_empty));
    return 0;
}

/* ---- flat folder + labels file ---- */
static char *trim(char *s) {
    while (*s && isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

static int open_flat(VilDataset *ds, const char *dir, const char *labels_file) {
    /* a FIFO or a folder is refused at once (vil_fopen_regular), not waited on */
    VilErrCapture why;
    vil_error_capture(&why);
    FILE *f = vil_fopen_regular(labels_file, "r");
    vil_error_release(&why);
    if (!f) {
        vil_error("labels file: %s (expected one \"filename label\" per line)", why.msg);
        return -1;
    }
    set_root(ds, dir);
    ds->kind = VIL_DATA_FLAT;
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0;
    int maxlab = -1, missing = 0, rc = 0;
    char first_missing[3][256];
    while (getline(&line, &cap, f) >= 0) {
        lineno++;
        char *s = trim(line);
        if (!*s || *s == '#') continue;
        /* the label is the last field, so file names may hold spaces */
        char *sp = s + strlen(s);
        while (sp > s && !isspace((unsigned char)sp[-1]) && sp[-1] != ',') sp--;
        char shown[256], shown2[64];
        if (sp == s) {
            vil_error("%s:%ld: expected \"filename label\", found \"%s\"", labels_file, lineno,
                      vil_printable(shown, sizeof shown, s));
            rc = -1;
            break;
        }
        char *lab = sp;
        sp[-1] = 0;
        char *name = trim(s);
        long v;
        if (vil_parse_int(lab, &v) != 0 || v < 0 || v > 1000000) {
            vil_error("%s:%ld: bad label '%s' for '%s' (expected a class index, an integer >= 0)",
                      labels_file, lineno, vil_printable(shown2, sizeof shown2, lab),
                      vil_printable(shown, sizeof shown, name));
            rc = -1;
            break;
        }
        if (!*name) {
            vil_error("%s:%ld: empty file name", labels_file, lineno);
            rc = -1;
            break;
        }
        size_t off = arena_add(ds, name, NULL);
        char *full = name[0] == '/' ? vil_strdup(name) : vil_path_join(dir, name);
        struct stat st;
        if (stat(full, &st) != 0 || !S_ISREG(st.st_mode)) {
            if (missing < 3) vil_printable(first_missing[missing], sizeof first_missing[0], name);
            missing++;
        }
        free(full);
        push_sample(ds, off, (int)v);
        if (v > maxlab) maxlab = (int)v;
    }
    if (!rc && ferror(f)) {
        vil_error("cannot read labels file '%s': %s", labels_file, strerror(errno));
        rc = -1;
    }
    free(line);
    fclose(f);
    if (rc) return -1;
    if (missing) {
        vil_error("labels file '%s' names %d files that are missing from '%s' or not regular "
                  "files (first: %s%s%s%s%s)",
                  labels_file, missing, dir, first_missing[0], missing > 1 ? ", " : "",
                  missing > 1 ? first_missing[1] : "", missing > 2 ? ", " : "",
                  missing > 2 ? first_missing[2] : "");
        return -1;
    }
    if (ds->n == 0) {
        vil_error("labels file '%s' lists no images (expected one \"filename label\" per line)",
                  labels_file);
        return -1;
    }
    ds->num_classes = maxlab + 1;
    return 0;
}

/* ---- tar shards (data/shards.c) ---- */
static void add_shard_sample(void *ctx, const char *member, int label, const VilShardMember *m) {
    VilDataset *ds = ctx;
    if (ds->n == ds->cap) ds->at = vil_realloc(ds->at, (size_t)(ds->cap ? ds->cap * 2 : 1024) * sizeof *ds->at);
    ds->at[ds->n] = *m;
    push_sample(ds, arena_add(ds, member, NULL), label);
}

static int open_shards(VilDataset *ds, const char *path, const char *split) {
    char **ids = NULL;
    int C = 0;
    ds->kind = VIL_DATA_SHARDS;
    ds->shards = vil_shards_open(path, split, add_shard_sample, ds, &C, &ids);
    if (!ds->shards) return -1;
    ds->num_classes = C;
    ds->class_ids = ids; /* NULL: fill_class_ids numbers them */
    ds->source = vil_strdup(vil_shard_set_source(ds->shards));
    return 0;
}

/* ---- IDX ---- */
/* An IDX file is held in memory whole, so its header's claim is checked before the data is
 * read, and the buffer grows with what was actually decompressed: a small gzip file whose
 * header (or whose data) claims gigabytes costs no more memory than it holds, up to the bound. */
typedef struct {
    const char *path;
    gzFile g;
    int ndim;
    uint32_t dims[3];
    size_t hdr, total; /* header bytes; data bytes the header promises */
    unsigned char *buf; /* header + data */
    size_t len;         /* bytes in buf */
} IdxFile;

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Up to want bytes into dst; *got short only at the end of the data. 0, or -1 (reported). */
static int gz_read_full(IdxFile *f, unsigned char *dst, size_t want, size_t *got) {
    *got = 0;
    while (*got < want) {
        size_t chunk = want - *got > (1u << 30) ? (1u << 30) : want - *got;
        int r = gzread(f->g, dst + *got, (unsigned)chunk);
        if (r < 0) {
            int zerr;
            vil_error("cannot read '%s': %s (corrupt gzip data?)", f->path, gzerror(f->g, &zerr));
            return -1;
        }
        if (r == 0) break;
        *got += (size_t)r;
    }
    return 0;
}

static void idx_close(IdxFile *f) {
    if (f->g) gzclose(f->g);
    f->g = NULL;
    free(f->buf);
    f->buf = NULL;
}

/* Open an IDX file of unsigned bytes with `ndim` dimensions (zlib's gzread reads plain files as
 * they are, so one path serves .gz and raw) and check its header against VIL_IDX_MAX_BYTES.
 * 0, or -1 (reported; f closed). */
static int idx_open(IdxFile *f, const char *path, int ndim) {
    memset(f, 0, sizeof *f);
    f->path = path;
    f->ndim = ndim;
    f->hdr = 4 + 4 * (size_t)ndim;
    int fd = vil_open_regular(path); /* a FIFO is refused, not waited on */
    if (fd < 0) return -1;
    if (!(f->g = gzdopen(fd, "rb"))) {
        close(fd);
        vil_error("cannot read '%s': out of memory", path);
        return -1;
    }
    gzbuffer(f->g, 1 << 17);
    f->buf = vil_malloc(f->hdr);
    const unsigned char *b = f->buf;
    size_t got;
    if (gz_read_full(f, f->buf, f->hdr, &got) != 0) goto fail;
    f->len = got;
    if (got < 4 || b[0] != 0 || b[1] != 0) {
        vil_error("'%s' is not an IDX file (bad magic number)", path);
        goto fail;
    }
    if (b[2] != 0x08) {
        vil_error("'%s': IDX element type 0x%02x is not supported (expected unsigned bytes, 0x08)",
                  path, b[2]);
        goto fail;
    }
    if (b[3] != ndim) {
        vil_error("'%s' has %d dimensions, expected %d (%s)", path, b[3], ndim,
                  ndim == 3 ? "an idx3 images file" : "an idx1 labels file");
        goto fail;
    }
    if (got < f->hdr) {
        vil_error("'%s' is truncated (header)", path);
        goto fail;
    }
    uint64_t total = 1;
    int over = 0;
    for (int d = 0; d < ndim; d++) {
        f->dims[d] = be32(b + 4 + 4 * d);
        if (f->dims[d] && total > (uint64_t)VIL_IDX_MAX_BYTES / f->dims[d]) over = 1;
        else total *= f->dims[d];
    }
    if (over || total > (uint64_t)VIL_IDX_MAX_BYTES) {
        char shape[64];
        if (ndim == 3) snprintf(shape, sizeof shape, "%u x %u x %u", f->dims[0], f->dims[1], f->dims[2]);
        else snprintf(shape, sizeof shape, "%u", f->dims[0]);
        vil_error("'%s': its header claims %s bytes of data, over the limit of %lld bytes for an "
                  "IDX file (vil holds IDX sets in memory; make a larger set image folders)",
                  path, shape, (long long)VIL_IDX_MAX_BYTES);
        goto fail;
    }
    f->total = (size_t)total;
    return 0;
fail:
    idx_close(f);
    return -1;
}

/* Read the data the header promises; the buffer doubles as data arrives (capped at the
 * promise), never sized by the header alone. 0, or -1 (reported; a short file is truncated). */
static int idx_read_data(IdxFile *f) {
    size_t want = f->hdr + f->total, cap = f->hdr;
    while (f->len < want) {
        if (f->len == cap) {
            size_t ncap = cap < ((size_t)1 << 20) ? ((size_t)1 << 20) : cap * 2;
            if (ncap > want) ncap = want;
            unsigned char *nb = realloc(f->buf, ncap);
            if (!nb) {
                vil_error("'%s': cannot hold %zu bytes of IDX data in memory", f->path, ncap);
                return -1;
            }
            f->buf = nb;
            cap = ncap;
        }
        size_t got;
        if (gz_read_full(f, f->buf + f->len, cap - f->len, &got) != 0) return -1;
        f->len += got;
        if (f->len < cap) break; /* the end of the data */
    }
    if (f->len < want) {
        /* a gzip stream cut short reads as a clean end of file; gzclose_r says which */
        int zrc = gzclose(f->g);
        f->g = NULL;
        if (zrc == Z_BUF_ERROR)
            vil_error("'%s' is truncated (the gzip stream ends early)", f->path);
        else
            vil_error("'%s' is truncated: its header promises %zu bytes of data, it holds %zu",
                      f->path, f->total, f->len - f->hdr);
        return -1;
    }
    return 0;
}

static const char *const k_digit_names[10] = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The images file for a split inside dir, or NULL. */
static char *idx_find(const char *dir, const char *prefix, const char *what) {
    const char *forms[] = {"%s-%s-idx%d-ubyte", "%s-%s-idx%d-ubyte.gz", "%s-%s.idx%d-ubyte",
                           "%s-%s.idx%d-ubyte.gz"};
    int nd = strcmp(what, "images") == 0 ? 3 : 1;
    for (size_t k = 0; k < sizeof forms / sizeof forms[0]; k++) {
        char name[128];
        snprintf(name, sizeof name, forms[k], prefix, what, nd);
        char *p = vil_path_join(dir, name);
        if (file_exists(p)) return p;
        free(p);
    }
    return NULL;
}

/* "x-images-idx3-ubyte[.gz]" -> "x-labels-idx1-ubyte[.gz]" (either .gz or not). */
static char *idx_labels_for(const char *images) {
    const char *k = strstr(images, "images");
    if (!k) return NULL;
    size_t pre = (size_t)(k - images);
    char *base = vil_malloc(strlen(images) + 8);
    memcpy(base, images, pre);
    strcpy(base + pre, "labels");
    const char *rest = k + 6; /* "-idx3-ubyte.gz" or ".idx3-ubyte" */
    strcat(base, rest);
    char *d = strstr(base + pre, "idx3");
    if (d) d[3] = '1';
    if (file_exists(base)) return base;
    /* the other compression */
    size_t l = strlen(base);
    char *alt = vil_malloc(l + 4);
    if (l > 3 && strcmp(base + l - 3, ".gz") == 0) {
        memcpy(alt, base, l - 3);
        alt[l - 3] = 0;
    } else {
        snprintf(alt, l + 4, "%s.gz", base);
    }
    free(base);
    if (file_exists(alt)) return alt;
    free(alt);
    return NULL;
}

static int contains_ci(const char *s, const char *w) {
    size_t lw = strlen(w);
    for (; *s; s++)
        if (strncasecmp(s, w, lw) == 0) return 1;
    return 0;
}

static int open_idx(VilDataset *ds, const char *images) {
    char *labels = idx_labels_for(images);
    if (!labels) {
        vil_error("no labels file beside '%s' (expected the matching *-labels-idx1-ubyte[.gz])",
                  images);
        return -1;
    }
    IdxFile fi, fl;
    int rc = -1;
    memset(&fl, 0, sizeof fl);
    if (idx_open(&fi, images, 3) != 0) {
        free(labels);
        return -1;
    }
    if (idx_open(&fl, labels, 1) != 0) goto done;
    /* both headers first: their counts must agree before any data is read */
    const uint32_t *di = fi.dims, *dl = fl.dims;
    if (di[0] != dl[0]) {
        vil_error("'%s' holds %u images but '%s' holds %u labels", images, di[0], labels, dl[0]);
        goto done;
    }
    if (di[0] == 0 || di[1] == 0 || di[2] == 0 || di[0] > INT32_MAX) {
        vil_error("'%s' holds no images (%u x %u x %u)", images, di[0], di[1], di[2]);
        goto done;
    }
    if (vil_image_check_size("an IDX image", di[2], di[1]) != 0) goto done;
    if (idx_read_data(&fi) != 0 || idx_read_data(&fl) != 0) goto done;
    ds->kind = VIL_DATA_IDX;
    ds->n = ds->cap = (int)di[0];
    ds->idx_h = (int)di[1];
    ds->idx_w = (int)di[2];
    /* keep the whole file buffer; the pixels start after the 16-byte header */
    ds->idx_file = fi.buf;
    ds->idx_pixels = fi.buf + 16;
    fi.buf = NULL;
    ds->labels = vil_malloc((size_t)ds->n * sizeof(int));
    int maxlab = 0;
    const unsigned char *bl = fl.buf;
    for (int i = 0; i < ds->n; i++) {
        ds->labels[i] = bl[8 + i];
        if (ds->labels[i] > maxlab) maxlab = ds->labels[i];
    }
    ds->num_classes = maxlab + 1;
    ds->source = vil_strdup(images);
    ds->class_ids = vil_calloc((size_t)ds->num_classes, sizeof(char *));
    ds->class_names = vil_calloc((size_t)ds->num_classes, sizeof(char *));
    int fashion = ds->num_classes == 10 && contains_ci(images, "fashion");
    for (int c = 0; c < ds->num_classes; c++) {
        char id[16];
        snprintf(id, sizeof id, "%d", c);
        ds->class_ids[c] = vil_strdup(id);
        if (fashion) ds->class_names[c] = vil_strdup(vil_fashion_mnist_names[c]);
        else if (c < 10) ds->class_names[c] = vil_strdup(k_digit_names[c]);
    }
    rc = 0;
done:
    idx_close(&fi);
    idx_close(&fl);
    free(labels);
    return rc;
}

/* ---- class membership, for replacing a bad sample by one of the same class ---- */
static void build_members(VilDataset *ds) {
    int C = ds->num_classes;
    ds->class_off = vil_calloc((size_t)C + 1, sizeof(int));
    for (int i = 0; i < ds->n; i++) ds->class_off[ds->labels[i] + 1]++;
    for (int c = 0; c < C; c++) ds->class_off[c + 1] += ds->class_off[c];
    ds->members = vil_malloc((size_t)(ds->n ? ds->n : 1) * sizeof(int));
    int *fill = vil_malloc((size_t)C * sizeof(int));
    memcpy(fill, ds->class_off, (size_t)C * sizeof(int));
    for (int i = 0; i < ds->n; i++) ds->members[fill[ds->labels[i]]++] = i;
    free(fill);
}

void vil_dataset_set_num_classes(VilDataset *ds, int num_classes) {
    if (num_classes <= ds->num_classes) return;
    ds->class_ids = vil_realloc(ds->class_ids, (size_t)num_classes * sizeof(char *));
    ds->class_names = vil_realloc(ds->class_names, (size_t)num_classes * sizeof(char *));
    for (int c = ds->num_classes; c < num_classes; c++) {
        char id[16];
        snprintf(id, sizeof id, "%d", c);
        ds->class_ids[c] = vil_strdup(id);
        ds->class_names[c] = NULL;
    }
    ds->num_classes = num_classes;
    free(ds->class_off);
    free(ds->members);
    build_members(ds);
}

static void fill_class_ids(VilDataset *ds) {
    if (!ds->class_ids) ds->class_ids = vil_calloc((size_t)ds->num_classes, sizeof(char *));
    if (!ds->class_names) ds->class_names = vil_calloc((size_t)ds->num_classes, sizeof(char *));
    for (int c = 0; c < ds->num_classes; c++) {
        if (ds->class_ids[c]) continue;
        char id[16];
        snprintf(id, sizeof id, "%d", c);
        ds->class_ids[c] = vil_strdup(id);
    }
}

int vil_dataset_split_ok(const char *split) {
    return strcmp(split, "train") == 0 || strcmp(split, "val") == 0 || strcmp(split, "test") == 0;
}

VilDataset *vil_dataset_open(const char *path, const char *split, const char *labels_file) {
    if (!path || !*path) {
        vil_error("no dataset path given: %s", k_layouts);
        return NULL;
    }
    struct stat st;
    int exists = stat(path, &st) == 0;
    if (!exists && !(!labels_file && vil_shards_detect(path, split))) {
        vil_error("dataset path '%s' does not exist: %s", path, k_layouts);
        return NULL;
    }
    VilDataset *ds = vil_calloc(1, sizeof *ds);
    int rc = -1;
    char *dir = NULL;
    if (labels_file) {
        if (!S_ISDIR(st.st_mode)) {
            vil_error("'%s' is not a folder (with --labels, --data names the folder of images)",
                      path);
            goto out;
        }
        dir = split ? vil_path_join(path, split) : NULL;
        if (!dir || !is_dir(dir)) {
            free(dir);
            dir = vil_strdup(path);
        }
        rc = open_flat(ds, dir, labels_file);
    } else if (vil_shards_detect(path, split)) {
        rc = open_shards(ds, path, split);
    } else if (!S_ISDIR(st.st_mode)) {
        if (strstr(path, "idx3")) rc = open_idx(ds, path);
        else vil_error("'%s' is a file, not a dataset folder: %s", path, k_layouts);
    } else {
        const char *sp = split ? split : "train";
        const char *prefix = strcmp(sp, "val") == 0 || strcmp(sp, "test") == 0 ? "t10k" : sp;
        char *images = idx_find(path, prefix, "images");
        if (images) {
            rc = open_idx(ds, images);
            free(images);
        } else if (split) {
            dir = vil_path_join(path, split);
            if (!is_dir(dir))
                vil_error("dataset folder '%s' has no '%s' folder: %s", path, split, k_layouts);
            else
                rc = open_folder(ds, dir);
        } else {
            char *t = vil_path_join(path, "train"), *v = vil_path_join(path, "val");
            int root = is_dir(t) && is_dir(v);
            free(t);
            free(v);
            if (root)
                vil_error("'%s' holds train/ and val/: say which split to read", path);
            else
                rc = open_folder(ds, path);
        }
    }
out:
    free(dir);
    if (rc != 0) {
        vil_dataset_free(ds);
        return NULL;
    }
    fill_class_ids(ds);
    build_members(ds);
    return ds;
}

void vil_dataset_free(VilDataset *ds) {
    if (!ds) return;
    for (int c = 0; c < ds->num_classes; c++) {
        if (ds->class_ids) free(ds->class_ids[c]);
        if (ds->class_names) free(ds->class_names[c]);
    }
    free(ds->class_ids);
    free(ds->class_names);
    free(ds->root);
    free(ds->source);
    free(ds->arena);
    free(ds->name_off);
    free(ds->labels);
    free(ds->idx_file);
    free(ds->class_off);
    free(ds->members);
    free(ds->orig);
    vil_shard_set_free(ds->shards);
    free(ds->at);
    free(ds);
}

VilDataKind vil_dataset_kind(const VilDataset *ds) { return ds->kind; }
int vil_dataset_size(const VilDataset *ds) { return ds->n; }
int vil_dataset_num_classes(const VilDataset *ds) { return ds->num_classes; }
int vil_dataset_channels(const VilDataset *ds) { return ds->kind == VIL_DATA_IDX ? 1 : 3; }
const char *vil_dataset_source(const VilDataset *ds) { return ds->source; }

int vil_dataset_label(const VilDataset *ds, int i) {
    return i >= 0 && i < ds->n ? ds->labels[i] : -1;
}

const char *vil_dataset_class_id(const VilDataset *ds, int c) {
    return c >= 0 && c < ds->num_classes ? ds->class_ids[c] : NULL;
}

void vil_dataset_set_class_name(VilDataset *ds, int c, const char *name) {
    if (c < 0 || c >= ds->num_classes) return;
    free(ds->class_names[c]);
    ds->class_names[c] = name ? vil_strdup(name) : NULL;
}

const char *vil_dataset_class_name(const VilDataset *ds, int c) {
    if (c < 0 || c >= ds->num_classes) return NULL;
    return ds->class_names[c] ? ds->class_names[c] : ds->class_ids[c];
}

void vil_dataset_class_members(const VilDataset *ds, int c, const int **members, int *count) {
    if (c < 0 || c >= ds->num_classes) {
        *members = NULL;
        *count = 0;
        return;
    }
    *members = ds->members + ds->class_off[c];
    *count = ds->class_off[c + 1] - ds->class_off[c];
}

size_t vil_dataset_path(const VilDataset *ds, int i, char *buf, size_t len) {
    if (i < 0 || i >= ds->n) return (size_t)snprintf(buf, len, "<no sample %d>", i);
    if (ds->kind == VIL_DATA_IDX)
        return (size_t)snprintf(buf, len, "%s#%d", ds->source, ds->orig ? ds->orig[i] : i);
    const char *rel = ds->arena + ds->name_off[i];
    if (ds->kind == VIL_DATA_SHARDS)
        return (size_t)snprintf(buf, len, "%s:%s", vil_shard_set_path(ds->shards, ds->at[i].shard), rel);
    if (rel[0] == '/') return (size_t)snprintf(buf, len, "%s", rel);
    return (size_t)snprintf(buf, len, "%s%s", ds->root, rel);
}

int vil_dataset_read_bytes(const VilDataset *ds, int i, VilBuffer *buf) {
    if (i < 0 || i >= ds->n) {
        vil_error("sample %d out of range [0, %d)", i, ds->n);
        return -1;
    }
    if (ds->kind == VIL_DATA_IDX) {
        vil_error("IDX samples are raw pixels, not encoded files");
        return -1;
    }
    if (ds->kind == VIL_DATA_SHARDS)
        return vil_shard_read(ds->shards, &ds->at[i], &buf->data, &buf->cap, &buf->size);
    char path[4096];
    if (vil_dataset_path(ds, i, path, sizeof path) >= sizeof path) {
        vil_error("path too long");
        return -1;
    }
    /* a FIFO is refused at once; the message gives the reason alone: the loader names the
     * file, printable */
    return vil_read_regular(path, &buf->data, &buf->cap, &buf->size);
}

int vil_dataset_raw_image(const VilDataset *ds, int i, VilImage *view) {
    if (ds->kind != VIL_DATA_IDX || i < 0 || i >= ds->n) return -1;
    size_t px = (size_t)ds->idx_h * (size_t)ds->idx_w;
    view->w = ds->idx_w;
    view->h = ds->idx_h;
    view->c = 1;
    view->px = ds->idx_pixels + (size_t)i * px;
    return 0;
}

int vil_dataset_read_image(const VilDataset *ds, int i, int channels, VilImage *out,
                           VilBuffer *scratch) {
    memset(out, 0, sizeof *out);
    if (channels != 1 && channels != 3) {
        vil_error("channels must be 1 or 3, not %d", channels);
        return -1;
    }
    VilImage raw;
    if (vil_dataset_raw_image(ds, i, &raw) == 0) {
        if (vil_image_alloc(out, raw.w, raw.h, channels) != 0) {
            vil_error("cannot allocate a %dx%d image", raw.w, raw.h);
            return -1;
        }
        size_t px = (size_t)raw.w * raw.h;
        if (channels == 1) memcpy(out->px, raw.px, px);
        else
            for (size_t k = 0; k < px; k++)
                out->px[3 * k] = out->px[3 * k + 1] = out->px[3 * k + 2] = raw.px[k];
        return 0;
    }
    VilBuffer local = {0};
    VilBuffer *b = scratch ? scratch : &local;
    int rc = vil_dataset_read_bytes(ds, i, b);
    if (rc == 0) rc = vil_image_decode(b->data, b->size, channels, out);
    vil_buffer_free(&local);
    return rc;
}

/* ---- subsets: a held-out validation split carved from the training samples ---- */
VilDataset *vil_dataset_subset(const VilDataset *ds, const int *idx, int n) {
    VilDataset *sub = vil_calloc(1, sizeof *sub);
    sub->kind = ds->kind;
    sub->n = sub->cap = n;
    sub->num_classes = ds->num_classes;
    sub->source = vil_strdup(ds->source);
    sub->root = ds->root ? vil_strdup(ds->root) : NULL;
    sub->labels = vil_malloc((size_t)(n ? n : 1) * sizeof(int));
    sub->orig = vil_malloc((size_t)(n ? n : 1) * sizeof(int));
    if (ds->kind == VIL_DATA_IDX) {
        size_t px = (size_t)ds->idx_h * (size_t)ds->idx_w;
        sub->idx_h = ds->idx_h, sub->idx_w = ds->idx_w;
        sub->idx_file = vil_malloc(16 + (size_t)n * px);
        memcpy(sub->idx_file, ds->idx_file, 16);
        sub->idx_pixels = sub->idx_file + 16;
    } else {
        sub->name_off = vil_malloc((size_t)(n ? n : 1) * sizeof(size_t));
    }
    if (ds->shards) {
        sub->shards = vil_shard_set_ref(ds->shards);
        sub->at = vil_malloc((size_t)(n ? n : 1) * sizeof *sub->at);
    }
    for (int k = 0; k < n; k++) {
        int i = idx[k];
        sub->labels[k] = ds->labels[i];
        sub->orig[k] = ds->orig ? ds->orig[i] : i;
        if (ds->kind == VIL_DATA_IDX) {
            size_t px = (size_t)ds->idx_h * (size_t)ds->idx_w;
            memcpy(sub->idx_pixels + (size_t)k * px, ds->idx_pixels + (size_t)i * px, px);
        } else {
            sub->name_off[k] = arena_add(sub, ds->arena + ds->name_off[i], NULL);
        }
        if (ds->shards) sub->at[k] = ds->at[i];
    }
    sub->class_ids = vil_calloc((size_t)ds->num_classes, sizeof(char *));
    sub->class_names = vil_calloc((size_t)ds->num_classes, sizeof(char *));
    for (int c = 0; c < ds->num_classes; c++) {
        sub->class_ids[c] = vil_strdup(ds->class_ids[c]);
        if (ds->class_names[c]) sub->class_names[c] = vil_strdup(ds->class_names[c]);
    }
    build_members(sub);
    return sub;
}

/* a fixed permutation (splitmix64 on `seed`, Fisher-Yates): the same on every machine */
static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int vil_dataset_spread(const VilDataset *ds, int n, int *idx) {
    int C = ds->num_classes, want = n < ds->n ? n : ds->n, got = 0, na = 0;
    if (want <= 0) return 0;
    int *take = vil_calloc((size_t)C, sizeof(int)), *active = vil_malloc((size_t)C * sizeof(int));
    for (int c = 0; c < C; c++)
        if (ds->class_off[c + 1] > ds->class_off[c]) active[na++] = c;
    /* one sample of each class still holding some per round: the classes that ran out leave
     * the list, so the rounds cost the samples taken plus the classes */
    while (got < want && na > 0) {
        int keep = 0;
        for (int k = 0; k < na; k++) {
            int c = active[k];
            if (got < want) take[c]++, got++;
            if (take[c] < ds->class_off[c + 1] - ds->class_off[c]) active[keep++] = c;
        }
        na = keep;
    }
    int o = 0;
    for (int c = 0; c < C; c++)
        for (int j = 0; j < take[c]; j++) idx[o++] = ds->members[ds->class_off[c] + j];
    qsort(idx, (size_t)o, sizeof(int), cmp_int);
    free(take);
    free(active);
    return o;
}

int vil_dataset_holdout(VilDataset **train, VilDataset **val, int n, uint64_t seed) {
    VilDataset *ds = *train;
    if (n <= 0 || n >= ds->n) {
        vil_error("holdout = %d: hold out between 1 and %d of the %d training images", n, ds->n - 1,
                  ds->n);
        return -1;
    }
    int N = ds->n, *perm = vil_malloc((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) perm[i] = i;
    uint64_t st = seed;
    for (int i = N - 1; i > 0; i--) {
        int j = (int)(splitmix64(&st) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    /* both parts in dataset order: the held-out images are the permutation's last n */
    qsort(perm, (size_t)(N - n), sizeof(int), cmp_int);
    qsort(perm + N - n, (size_t)n, sizeof(int), cmp_int);
    VilDataset *tr = vil_dataset_subset(ds, perm, N - n), *va = vil_dataset_subset(ds, perm + N - n, n);
    free(perm);
    vil_dataset_free(ds);
    *train = tr, *val = va;
    return 0;
}
