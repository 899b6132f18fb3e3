/* shards.c: finding the tar shards a dataset names (a folder of .tar files, a brace range, a
 * glob), indexing each once through libarchive's header reader, and reading a member's bytes
 * with pread. The index holds what the loader needs per sample (shard, offset, size, label), so
 * the sampler's global shuffle applies to shards as to folders. */
#define _GNU_SOURCE
#include "data/shards.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef VIL_ARCHIVE
#include <archive.h>
#include <archive_entry.h>
#include <cJSON.h>
#endif

#include "vil/common.h"
#include "vil/limits.h"

struct VilShardSet {
    int refs;      /* holders: the dataset and its subsets, all on one thread */
    int n;
    char **paths;  /* (n) */
    int *fds;      /* (n) kept open, or -1: opened per read (past the descriptor budget) */
    char *source;
};

typedef struct {
    char **v;
    int n, cap;
} List;

static void list_push(List *l, char *s) { /* takes s */
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->v = vil_realloc(l->v, (size_t)l->cap * sizeof(char *));
    }
    l->v[l->n++] = s;
}

static void list_free(List *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int is_shard_name(const char *name) {
    return ends_with(name, ".tar") || ends_with(name, ".tar.gz") || ends_with(name, ".tgz");
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The .tar files of dir, sorted; -1 when dir has a subfolder (then it is a class-folder root)
 * or cannot be listed, else their count. */
static int list_shards(const char *dir, List *out) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *e;
    int sub = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char *p = vil_path_join(dir, e->d_name);
        struct stat st;
        int ok = stat(p, &st) == 0;
        if (ok && S_ISDIR(st.st_mode)) sub = 1;
        if (!sub && out && is_shard_name(e->d_name)) list_push(out, p);
        else free(p);
        if (sub) break;
    }
    closedir(d);
    if (sub) {
        if (out) list_free(out);
        return -1;
    }
    if (out && out->n > 1) qsort(out->v, (size_t)out->n, sizeof(char *), cmp_str);
    return out ? out->n : 0;
}

static int dir_has_shards(const char *dir) {
    List l = {0};
    int n = list_shards(dir, &l);
    list_free(&l);
    return n > 0;
}

int vil_shards_detect(const char *path, const char *split) {
    if (!path || !*path) return 0;
    if (is_dir(path)) {
        char *dir = split ? vil_path_join(path, split) : vil_strdup(path);
        int yes = is_dir(dir) && dir_has_shards(dir);
        free(dir);
        return yes;
    }
    return is_shard_name(path);
}

/* ---- patterns ---- */
typedef struct {
    const char *open, *close; /* the braces */
    unsigned long long a, b;
    size_t width;             /* digits to pad to, 0: none */
} Range;

/* s[0, n) (decimal digits) as a number; -1 when it is over 2^64 - 1 */
static int parse_bound(const char *s, size_t n, unsigned long long *v) {
    unsigned long long x = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (x > (ULLONG_MAX - d) / 10) return -1;
        x = x * 10 + d;
    }
    *v = x;
    return 0;
}

/* The first {A..B} of s at or after from; 0 none, 1 found, -1 a malformed brace or a bound out
 * of range (reported). Reads the pattern from `from` to the range's '}' only. */
static int next_range(const char *pattern, const char *from, Range *r) {
    const char *o = strchr(from, '{');
    if (!o) return 0;
    const char *c = strchr(o, '}');
    const char *dots = NULL;
    for (const char *p = o + 1; c && !dots && p + 1 < c; p++)
        if (p[0] == '.' && p[1] == '.') dots = p;
    char shown[512];
    size_t la = dots ? (size_t)(dots - o - 1) : 0, lb = dots ? (size_t)(c - dots - 2) : 0;
    int ok = la > 0 && lb > 0;
    for (const char *p = o + 1; ok && p < c; p++) ok = isdigit((unsigned char)*p) || p == dots || p == dots + 1;
    if (!ok) {
        vil_error("shard pattern '%s': expected a range {A..B} of decimal numbers",
                  vil_printable(shown, sizeof shown, pattern));
        return -1;
    }
    r->open = o, r->close = c;
    r->width = la == lb ? la : 0;
    int bad_a = parse_bound(o + 1, la, &r->a) != 0, bad_b = !bad_a && parse_bound(dots + 2, lb, &r->b) != 0;
    if (bad_a || bad_b) {
        const char *t = bad_a ? o + 1 : dots + 2;
        size_t lt = bad_a ? la : lb;
        vil_error("shard pattern '%s': the bound %.*s%s is out of range (a shard number is at "
                  "most 18446744073709551615)", vil_printable(shown, sizeof shown, pattern),
                  (int)(lt < 40 ? lt : 40), t, lt < 40 ? "" : "...");
        return -1;
    }
    if (r->a > r->b) {
        vil_error("shard pattern '%s': the range {%llu..%llu} runs backwards",
                  vil_printable(shown, sizeof shown, pattern), r->a, r->b);
        return -1;
    }
    if (r->b - r->a >= VIL_SHARD_MAX_FILES) { /* b - a + 1 could wrap: not computed */
        vil_error("shard pattern '%s': the range {%llu..%llu} names too many shards (more than %d)",
                  vil_printable(shown, sizeof shown, pattern), r->a, r->b, VIL_SHARD_MAX_FILES);
        return -1;
    }
    return 1;
}

/* Every name the ranges of pattern give, in order (the last range varies fastest), into out.
 * The ranges are read once and the product of their sizes is checked against the cap before a
 * name is built; then each name is written into one buffer (a name is never longer than the
 * pattern: a number has at most its range's digits) and copied out. Memory: the pattern's
 * ranges once, and the names. 0, or -1 (reported). */
static int expand(const char *pattern, List *out) {
    Range *rs = NULL, r;
    size_t n = 0, cap = 0;
    unsigned long long total = 1;
    const char *from = pattern;
    int k;
    char shown[512];
    while ((k = next_range(pattern, from, &r)) == 1) {
        unsigned long long count = r.b - r.a + 1; /* <= VIL_SHARD_MAX_FILES: no wrap */
        if (total > VIL_SHARD_MAX_FILES / count) {
            vil_error("shard pattern '%s' names more than %d shards (the sizes of its ranges multiply past it)",
                      vil_printable(shown, sizeof shown, pattern), VIL_SHARD_MAX_FILES);
            k = -1;
            break;
        }
        total *= count;
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            rs = vil_realloc(rs, cap * sizeof *rs);
        }
        rs[n++] = r;
        from = r.close + 1;
    }
    if (k < 0) {
        free(rs);
        return -1;
    }
    size_t len = strlen(pattern);
    char *name = vil_malloc(len + 1);
    unsigned long long *at = vil_calloc(n ? n : 1, sizeof *at); /* each range's value - a */
    for (int more = 1; more;) {
        size_t o = 0;
        const char *p = pattern;
        for (size_t i = 0; i < n; i++) {
            memcpy(name + o, p, (size_t)(rs[i].open - p));
            o += (size_t)(rs[i].open - p);
            char num[24];
            size_t nd = (size_t)snprintf(num, sizeof num, "%llu", rs[i].a + at[i]);
            for (size_t z = nd; z < rs[i].width; z++) name[o++] = '0';
            memcpy(name + o, num, nd);
            o += nd;
            p = rs[i].close + 1;
        }
        size_t tail = len - (size_t)(p - pattern);
        memcpy(name + o, p, tail + 1);
        list_push(out, vil_strdup(name));
        more = 0;
        for (size_t i = n; i-- > 0;) { /* the next combination, the last range first */
            if (at[i] < rs[i].b - rs[i].a) {
                at[i]++;
                more = 1;
                break;
            }
            at[i] = 0;
        }
    }
    free(at);
    free(name);
    free(rs);
    return 0;
}

/* The pattern of another split: "train" replaced by split (every one in the file name, a folder
 * named "train"), every range by as many digits as its bounds have (or any text when their
 * widths differ), to glob; *replaced: how many "train" were. NULL on a malformed range
 * (reported). */
static char *split_pattern(const char *pattern, const char *split, int *replaced) {
    *replaced = 0;
    size_t cap = strlen(pattern) * 8 + 64, len = 0;
    char *o = vil_malloc(cap);
    const char *base = strrchr(pattern, '/');
    base = base ? base + 1 : pattern;
    for (const char *p = pattern; *p;) {
        Range r;
        /* in the folders only a whole "train" component: /data/training/ stays */
        if (strncmp(p, "train", 5) == 0 && (p >= base || ((p == pattern || p[-1] == '/') && p[5] == '/'))) {
            len += (size_t)snprintf(o + len, cap - len, "%s", split);
            p += 5;
            ++*replaced;
        } else if (*p == '{') {
            if (next_range(pattern, p, &r) != 1) {
                free(o);
                return NULL;
            }
            if (r.width)
                for (size_t i = 0; i < r.width && len + 6 < cap; i++) len += (size_t)snprintf(o + len, cap - len, "[0-9]");
            else
                len += (size_t)snprintf(o + len, cap - len, "*");
            p = r.close + 1;
        } else {
            o[len++] = *p++;
        }
        if (len + 64 > cap) {
            cap *= 2;
            o = vil_realloc(o, cap);
        }
        o[len] = 0;
    }
    o[len] = 0;
    return o;
}

static int has_glob(const char *s) { return strpbrk(s, "*?[") != NULL; }

/* The shard files a pattern names, in its order. 0, or -1 (reported). */
static int pattern_files(const char *pattern, const char *split, List *out) {
    char shown[512], given[512];
    char *derived = NULL;
    if (split && strcmp(split, "train") != 0) {
        /* a train pattern names the other split's shards; one that names this split is taken
         * as it is; one that names neither would make the training shards the validation set */
        int replaced;
        if (!(derived = split_pattern(pattern, split, &replaced))) return -1;
        const char *base = strrchr(pattern, '/');
        if (!replaced && !strstr(base ? base + 1 : pattern, split)) {
            vil_error("shard pattern '%s' names no split: for the %s shards vil replaces \"train\" in a "
                      "train pattern's file name (train-{0000..0146}.tar gives %s-*.tar); give a pattern "
                      "with \"train\" or \"%s\" in its file name", vil_printable(shown, sizeof shown, pattern),
                      split, split, split);
            free(derived);
            return -1;
        }
        if (!replaced) {
            free(derived);
            derived = NULL;
        }
    }
    List ex = {0};
    if (!derived && expand(pattern, &ex) != 0) {
        list_free(&ex);
        return -1;
    }
    if (derived) list_push(&ex, vil_strdup(derived));
    int rc = 0;
    for (int i = 0; i < ex.n && rc == 0; i++) {
        const char *p = ex.v[i];
        if (has_glob(p)) {
            glob_t g;
            int gr = glob(p, 0, NULL, &g);
            if (gr == GLOB_NOMATCH || (gr == 0 && g.gl_pathc == 0)) {
                if (derived)
                    vil_error("no %s shards match '%s' (the pattern '%s' with \"train\" replaced by "
                              "\"%s\")", split, vil_printable(shown, sizeof shown, derived),
                              vil_printable(given, sizeof given, pattern), split);
                else
                    vil_error("no shard matches '%s'", vil_printable(shown, sizeof shown, p));
                rc = -1;
            } else if (gr != 0) {
                vil_error("cannot list the shards of '%s'", vil_printable(shown, sizeof shown, p));
                rc = -1;
            } else if (g.gl_pathc > (size_t)(VIL_SHARD_MAX_FILES - out->n)) {
                vil_error("shard pattern '%s' names more than %d shards",
                          vil_printable(shown, sizeof shown, pattern), VIL_SHARD_MAX_FILES);
                rc = -1;
            } else {
                for (size_t k = 0; k < g.gl_pathc; k++) list_push(out, vil_strdup(g.gl_pathv[k]));
            }
            if (gr == 0) globfree(&g);
        } else if (out->n >= VIL_SHARD_MAX_FILES) {
            vil_error("shard pattern '%s' names more than %d shards", vil_printable(shown, sizeof shown, pattern),
                      VIL_SHARD_MAX_FILES);
            rc = -1;
        } else {
            list_push(out, vil_strdup(p));
        }
    }
    list_free(&ex);
    free(derived);
    if (rc == 0 && out->n == 0) {
        vil_error("shard pattern '%s' names no files", vil_printable(shown, sizeof shown, pattern));
        rc = -1;
    }
    /* a named shard that does not exist: one message with the count and the first */
    int missing = 0, why = 0;
    const char *first = NULL;
    for (int i = 0; rc == 0 && i < out->n; i++) {
        struct stat st;
        if (stat(out->v[i], &st) != 0) {
            if (!missing++) first = out->v[i], why = errno;
        }
    }
    if (missing == 1 && out->n == 1) {
        if (why == ENOENT) vil_error("shard '%s' does not exist", vil_printable(shown, sizeof shown, first));
        else vil_error("shard '%s' cannot be found: %s", vil_printable(shown, sizeof shown, first), strerror(why));
        rc = -1;
    } else if (missing) {
        char f[512];
        vil_error("%d of the %d shards of '%s' do not exist (first: '%s')", missing, out->n,
                  vil_printable(shown, sizeof shown, pattern), vil_printable(f, sizeof f, first));
        rc = -1;
    }
    return rc;
}

/* ---- the set ---- */
VilShardSet *vil_shard_set_ref(VilShardSet *s) {
    s->refs++;
    return s;
}

void vil_shard_set_free(VilShardSet *s) {
    if (!s || --s->refs > 0) return;
    for (int i = 0; i < s->n; i++) {
        if (s->fds[i] >= 0) close(s->fds[i]);
        free(s->paths[i]);
    }
    free(s->paths);
    free(s->fds);
    free(s->source);
    free(s);
}

int vil_shard_set_count(const VilShardSet *s) { return s->n; }
const char *vil_shard_set_path(const VilShardSet *s, int shard) {
    return shard >= 0 && shard < s->n ? s->paths[shard] : "?";
}
const char *vil_shard_set_source(const VilShardSet *s) { return s->source; }

int vil_shard_read(const VilShardSet *s, const VilShardMember *m, unsigned char **data,
                   size_t *cap, size_t *size) {
    if (m->shard < 0 || m->shard >= s->n || m->off < 0 || m->size < 0 || m->size > VIL_SHARD_MAX_MEMBER) {
        vil_error("bad shard member");
        return -1;
    }
    if (m->size == 0) {
        vil_error("empty member (0 bytes)");
        return -1;
    }
    int fd = s->fds[m->shard], own = fd < 0;
    if (own && (fd = vil_open_regular_unnamed(s->paths[m->shard])) < 0) return -1;
    size_t n = (size_t)m->size, got = 0;
    if (*cap < n + 1) {
        size_t c = *cap ? *cap : 4096;
        while (c < n + 1) c *= 2;
        *data = vil_realloc(*data, c);
        *cap = c;
    }
    int rc = 0;
    while (got < n) {
        ssize_t r = pread(fd, *data + got, n - got, (off_t)(m->off + (int64_t)got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            vil_error("read error after %zu of %zu bytes: %s", got, n, strerror(errno));
            rc = -1;
            break;
        }
        if (r == 0) {
            vil_error("the shard ends %zu bytes into this %zu-byte member (it shrank after it was "
                      "indexed)", got, n);
            rc = -1;
            break;
        }
        got += (size_t)r;
    }
    if (own) close(fd);
    if (rc) return -1;
    (*data)[n] = 0;
    *size = n;
    return 0;
}

/* ---- classes.txt ---- */
static int read_classes(const char *file, int *count, char ***ids) {
    FILE *f = vil_fopen_regular(file, "r");
    if (!f) return -1;
    List l = {0};
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) {
            vil_error("'%s' line %d is empty (expected one class id per line)", file, l.n + 1);
            rc = -1;
            break;
        }
        if (l.n >= VIL_MAX_CLASSES) {
            vil_error("'%s' names more than %d classes", file, VIL_MAX_CLASSES);
            rc = -1;
            break;
        }
        list_push(&l, vil_strdup(line));
    }
    free(line);
    fclose(f);
    if (rc == 0 && l.n == 0) {
        vil_error("'%s' names no classes (expected one class id per line)", file);
        rc = -1;
    }
    if (rc) {
        list_free(&l);
        return -1;
    }
    *count = l.n;
    *ids = l.v;
    return 0;
}

/* dir's part before s ("/" when that is empty) */
static char *parent_of(const char *dir, const char *s) {
    if (s == dir) return vil_strdup("/");
    char *p = vil_malloc((size_t)(s - dir) + 1);
    memcpy(p, dir, (size_t)(s - dir));
    p[s - dir] = 0;
    return p;
}

/* classes.txt in the first shard's folder, else the folder above; NULL when neither has one */
static char *find_classes(const char *shard) {
    const char *slash = strrchr(shard, '/');
    char *dir = slash ? vil_strdup(shard) : vil_strdup(".");
    if (slash) dir[slash == shard ? 1 : slash - shard] = 0;
    char *parent;
    if (strcmp(dir, ".") == 0) parent = vil_strdup("..");
    else if (strcmp(dir, "/") == 0) parent = NULL;
    else {
        const char *s = strrchr(dir, '/');
        parent = s ? parent_of(dir, s) : vil_strdup(".");
    }
    char *found = NULL;
    const char *dirs[2] = {dir, parent};
    for (int i = 0; i < 2 && !found && dirs[i]; i++) {
        char *p = vil_path_join(dirs[i], "classes.txt");
        struct stat st;
        if (stat(p, &st) == 0) found = p;
        else free(p);
    }
    free(dir);
    free(parent);
    return found;
}

#ifdef VIL_ARCHIVE
/* ---- indexing one shard ---- */
typedef struct {
    VilShardSet *set;
    int shard;
    const char *path;  /* printable */
    int64_t file_size;
    int num_classes;   /* from classes.txt, or 0 */
    int max_label;
    /* the shard's samples, handed to the caller in order once every shard before is indexed */
    long n, cap;
    char *names;       /* their image members' names, each NUL-terminated */
    size_t names_len, names_cap;
    size_t *name_off;  /* (n) */
    int *labels;       /* (n) */
    VilShardMember *at;/* (n) */
    char *error;       /* why the shard was refused, or NULL */
    /* the sample being gathered */
    char *key;
    char *img;         /* its image member's name */
    int label;         /* its class index once finished, -1 before */
    char *cls_member;  /* its .cls member's name, or NULL */
    int cls_label;     /* what that member gives */
    char *json_member; /* its .json member's name, or NULL */
    int json_kind;     /* that member's "label" (else "cls"): 0 none, 1 a number, 2 another type */
    double json_value; /* the number */
    char json_key[8];  /* "label" or "cls" */
    VilShardMember m;
    int64_t img_hdr;   /* where the image member's header started */
    int64_t data_at;   /* where the current member's data starts by the reader's count, -1: unknown */
    int64_t img_data;  /* that of the image member */
    int pending;       /* the image's offset waits for the next header */
    List keys;         /* every key of the shard, for the duplicate check */
} Indexer;

static const char *const k_image_exts[] = {"jpg", "jpeg", "png", "ppm", "pgm", "pbm", "pnm", "bmp", "gif"};
static const char *k_image_list = ".jpg, .jpeg, .png, .ppm, .pgm, .pbm, .pnm, .bmp or .gif";

static int is_image_ext(const char *ext) {
    for (size_t i = 0; i < sizeof k_image_exts / sizeof *k_image_exts; i++)
        if (strcmp(ext, k_image_exts[i]) == 0) return 1;
    return 0;
}

static int check_label(Indexer *x, long v, const char *text, const char *member) {
    char shown[256], t[64];
    long hi = x->num_classes ? x->num_classes : VIL_MAX_CLASSES;
    if (v >= 0 && v < hi) return 0;
    if (x->num_classes)
        vil_error("shard '%s': '%s' gives label %s, outside the %d classes of classes.txt", x->path,
                  vil_printable(shown, sizeof shown, member), vil_printable(t, sizeof t, text), x->num_classes);
    else
        vil_error("shard '%s': '%s' gives label %s (a class index is an integer in [0, %d))", x->path,
                  vil_printable(shown, sizeof shown, member), vil_printable(t, sizeof t, text), VIL_MAX_CLASSES);
    return -1;
}

/* The current member's data (size bytes, at most VIL_SHARD_MAX_LABEL_BYTES) as a string. */
static char *read_small(struct archive *a, Indexer *x, const char *member, int64_t size) {
    char shown[256];
    if (size > VIL_SHARD_MAX_LABEL_BYTES) {
        vil_error("shard '%s': label member '%s' holds %lld bytes (a label is at most %d)", x->path,
                  vil_printable(shown, sizeof shown, member), (long long)size, VIL_SHARD_MAX_LABEL_BYTES);
        return NULL;
    }
    char *buf = vil_malloc((size_t)size + 1);
    int64_t got = 0;
    while (got < size) {
        la_ssize_t r = archive_read_data(a, buf + got, (size_t)(size - got));
        if (r <= 0) {
            vil_error("shard '%s': cannot read member '%s': %s (truncated or corrupt tar)", x->path,
                      vil_printable(shown, sizeof shown, member),
                      r < 0 ? archive_error_string(a) : "it ends early");
            free(buf);
            return NULL;
        }
        got += r;
    }
    buf[size] = 0;
    return buf;
}

/* A second label member of one field for the sample: refused, both named. */
static int two_labels(Indexer *x, const char *field, const char *first, const char *second) {
    char k[256], a[256], b[256];
    vil_error("shard '%s': sample '%s' has two %s members ('%s' and '%s'): a sample has one label; "
              "remove one", x->path, vil_printable(k, sizeof k, x->key), field, vil_printable(a, sizeof a, first),
              vil_printable(b, sizeof b, second));
    return -1;
}

static int read_cls(struct archive *a, Indexer *x, const char *member, int64_t size) {
    if (x->cls_member) return two_labels(x, ".cls", x->cls_member, member);
    char *s = read_small(a, x, member, size);
    if (!s) return -1;
    int rc = memchr(s, 0, (size_t)size) ? -1 : 0; /* a NUL inside */
    char *b = s, *e = s + strlen(s);
    while (*b && isspace((unsigned char)*b)) b++;
    while (e > b && isspace((unsigned char)e[-1])) *--e = 0;
    long v;
    char shown[256], t[64];
    if (rc || vil_parse_int(b, &v) != 0) {
        vil_error("shard '%s': '%s' holds '%s', not a class index (an integer as text)", x->path,
                  vil_printable(shown, sizeof shown, member), vil_printable(t, sizeof t, b));
        rc = -1;
    } else if ((rc = check_label(x, v, b, member)) == 0) {
        x->cls_label = (int)v;
        x->cls_member = vil_strdup(member);
    }
    free(s);
    return rc;
}

static int is_json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* A .json member: exactly one JSON object (whitespace around it, nothing else); its "label" (else
 * "cls") is kept to be checked when the sample is complete (finish_sample), so that the order of
 * a sample's .cls and .json members does not matter. */
static int read_json(struct archive *a, Indexer *x, const char *member, int64_t size) {
    if (x->json_member) return two_labels(x, ".json", x->json_member, member);
    char *s = read_small(a, x, member, size);
    if (!s) return -1;
    char shown[256];
    const char *p = s, *end = s + size, *parsed = NULL;
    if (size >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0) p += 3; /* a UTF-8 byte order mark */
    while (p < end && is_json_space(*p)) p++;
    cJSON *j = p < end && *p == '{' ? cJSON_ParseWithLengthOpts(p, (size_t)(end - p), &parsed, 0) : NULL;
    if (!j || !cJSON_IsObject(j)) {
        vil_error("shard '%s': '%s' is not a JSON object", x->path, vil_printable(shown, sizeof shown, member));
        cJSON_Delete(j);
        free(s);
        return -1;
    }
    const char *q = parsed && parsed >= p && parsed <= end ? parsed : end;
    while (q < end && is_json_space(*q)) q++;
    int rc = 0;
    if (q < end) {
        vil_error("shard '%s': '%s' holds %lld byte%s after its JSON object (a label member is one JSON "
                  "object, nothing after it but whitespace)", x->path, vil_printable(shown, sizeof shown, member),
                  (long long)(end - q), end - q == 1 ? "" : "s");
        rc = -1;
    }
    /* "label" (or, without it, "cls"); a key given twice is refused, not read first-wins */
    const cJSON *v = NULL, *c;
    for (int k = 0; k < 2 && rc == 0 && !v; k++) {
        const char *key = k ? "cls" : "label";
        int n = 0;
        cJSON_ArrayForEach(c, j) {
            if (c->string && strcmp(c->string, key) == 0 && n++ == 0) v = c;
        }
        if (n > 1) {
            vil_error("shard '%s': '%s' gives \"%s\" %d times (a label is given once)", x->path,
                      vil_printable(shown, sizeof shown, member), key, n);
            rc = -1;
        }
    }
    if (rc == 0) {
        x->json_member = vil_strdup(member);
        x->json_kind = !v ? 0 : cJSON_IsNumber(v) ? 1 : 2;
        x->json_value = v && cJSON_IsNumber(v) ? v->valuedouble : 0;
        snprintf(x->json_key, sizeof x->json_key, "%s", v ? v->string : "");
    }
    cJSON_Delete(j);
    free(s);
    return rc;
}

/* The finished sample's label into x->label from its .cls and .json members: the .cls's when it
 * has one (a .json beside it is metadata; a number it gives as its label must agree), else the
 * .json's. 0, 1 when it has none, or -1 (reported). */
static int sample_label(Indexer *x) {
    char shown[256], m1[256], m2[256], text[64];
    int has_json_label = x->json_member && x->json_kind != 0;
    if (!x->cls_member && !has_json_label) return 1;
    if (x->cls_member) {
        if (x->json_member && x->json_kind == 1 && x->json_value != (double)x->cls_label) {
            snprintf(text, sizeof text, "%.17g", x->json_value);
            vil_error("shard '%s': sample '%s': '%s' gives label %d but '%s' gives %s as its \"%s\" (the two "
                      "must agree)", x->path, vil_printable(shown, sizeof shown, x->key),
                      vil_printable(m1, sizeof m1, x->cls_member), x->cls_label, vil_printable(m2, sizeof m2, x->json_member), text, x->json_key);
            return -1;
        }
        x->label = x->cls_label;
        return 0;
    }
    const char *member = x->json_member;
    if (x->json_kind != 1) {
        vil_error("shard '%s': '%s': its \"%s\" is not a number (a class index)", x->path,
                  vil_printable(shown, sizeof shown, member), x->json_key);
        return -1;
    }
    double d = x->json_value;
    snprintf(text, sizeof text, "%.17g", d);
    if (!(d >= 0 && d < VIL_MAX_CLASSES) || d != (double)(long)d) return check_label(x, -1, text, member);
    if (check_label(x, (long)d, text, member) != 0) return -1;
    x->label = (int)d;
    return 0;
}

static void clear_sample(Indexer *x) {
    x->key = NULL;
    free(x->img);
    x->img = NULL;
    x->label = -1;
    free(x->cls_member);
    free(x->json_member);
    x->cls_member = x->json_member = NULL;
    x->json_kind = 0;
}

static int finish_sample(Indexer *x) {
    if (!x->key) return 0;
    char shown[256];
    int rc = 0, seen = 0;
    int lr = x->img ? sample_label(x) : 0;
    /* an incomplete sample whose key came before: members apart, named as such */
    if (!x->img || lr == 1)
        for (int i = 0; i < x->keys.n && !seen; i++) seen = strcmp(x->keys.v[i], x->key) == 0;
    if (seen) {
        vil_error("shard '%s': key '%s' appears twice, apart (a sample's members must be adjacent, "
                  "as WebDataset writes them)", x->path, vil_printable(shown, sizeof shown, x->key));
        rc = -1;
    } else if (!x->img) {
        vil_error("shard '%s': sample '%s' has no image member (%s)", x->path,
                  vil_printable(shown, sizeof shown, x->key), k_image_list);
        rc = -1;
    } else if (lr == 1) {
        vil_error("shard '%s': sample '%s' has no label (expected %s.cls holding the class index, or "
                  "%s.json holding {\"label\": N})", x->path, vil_printable(shown, sizeof shown, x->key),
                  shown, shown);
        rc = -1;
    } else if (lr < 0) {
        rc = -1;
    } else if (x->n >= (1L << 30)) {
        vil_error("shard '%s' holds more than %ld samples", x->path, 1L << 30);
        rc = -1;
    } else {
        if (x->n == x->cap) {
            x->cap = x->cap ? x->cap * 2 : 256;
            x->name_off = vil_realloc(x->name_off, (size_t)x->cap * sizeof *x->name_off);
            x->labels = vil_realloc(x->labels, (size_t)x->cap * sizeof *x->labels);
            x->at = vil_realloc(x->at, (size_t)x->cap * sizeof *x->at);
        }
        size_t len = strlen(x->img) + 1;
        if (x->names_len + len > x->names_cap) {
            while (x->names_len + len > x->names_cap) x->names_cap = x->names_cap ? x->names_cap * 2 : 4096;
            x->names = vil_realloc(x->names, x->names_cap);
        }
        memcpy(x->names + x->names_len, x->img, len);
        x->name_off[x->n] = x->names_len;
        x->names_len += len;
        x->labels[x->n] = x->label;
        x->at[x->n] = x->m;
        x->at[x->n].shard = x->shard;
        x->n++;
        if (x->label > x->max_label) x->max_label = x->label;
    }
    list_push(&x->keys, x->key);
    clear_sample(x);
    return rc;
}

/* The pending image's data ends where the next header starts (libarchive has skipped the data
 * and its padding to the 512-byte block): its offset follows, checked against the file. */
static int place_image(Indexer *x, int64_t next_hdr) {
    if (!x->pending) return 0;
    x->pending = 0;
    int64_t padded = (x->m.size + 511) / 512 * 512;
    x->m.off = next_hdr - padded;
    /* and where the reader's count of consumed bytes put it: the two must agree (a reader that
     * put a header's position after the zero blocks before it would shift every offset) */
    if (next_hdr < 0 || x->m.off < x->img_hdr + 512 || x->m.off + x->m.size > x->file_size ||
        (x->img_data >= 0 && x->m.off != x->img_data)) {
        char shown[256];
        vil_error("shard '%s': member '%s' does not lie inside the file where its header says "
                  "(truncated or corrupt tar)", x->path, vil_printable(shown, sizeof shown, x->img));
        return -1;
    }
    return 0;
}

/* 0 when name is a plain relative path: no leading '/', no ".." part, no control character */
static int name_ok(const char *name) {
    if (name[0] == '/') return 0;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        if (*p < 0x20 || *p == 0x7f) return 0;
    for (const char *p = name; *p;) {
        const char *e = strchr(p, '/');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == 2 && p[0] == '.' && p[1] == '.') return 0;
        if (!e) break;
        p = e + 1;
    }
    return 1;
}

static int entry(struct archive *a, struct archive_entry *e, Indexer *x, int64_t hdr) {
    char shown[256];
    /* the raw name first: the UTF-8 form costs a locale conversion per member */
    const char *name = archive_entry_pathname(e);
    if (!name) name = archive_entry_pathname_utf8(e);
    if (!name || !*name) {
        vil_error("shard '%s': a member at byte %lld has no name", x->path, (long long)hdr);
        return -1;
    }
    while (name[0] == '.' && name[1] == '/') name += 2;
    mode_t type = archive_entry_filetype(e);
    if (type == AE_IFDIR) return 0;
    if (!name_ok(name)) {
        vil_error("shard '%s': member '%s' has an absolute or \"..\" name, or control characters "
                  "(a sample key is a plain relative name)", x->path, vil_printable(shown, sizeof shown, name));
        return -1;
    }
    if (type != AE_IFREG || archive_entry_hardlink(e)) {
        vil_error("shard '%s': member '%s' is a link or a special file (a sample's members are "
                  "regular files)", x->path, vil_printable(shown, sizeof shown, name));
        return -1;
    }
    if (archive_entry_sparse_count(e) > 0) {
        vil_error("shard '%s': member '%s' is a sparse file (not supported)", x->path,
                  vil_printable(shown, sizeof shown, name));
        return -1;
    }
    int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : -1;
    if (size < 0 || size > VIL_SHARD_MAX_MEMBER) {
        vil_error("shard '%s': member '%s' claims %lld bytes, over the limit of %lld bytes for one "
                  "member", x->path, vil_printable(shown, sizeof shown, name), (long long)size,
                  (long long)VIL_SHARD_MAX_MEMBER);
        return -1;
    }
    /* WebDataset's key: the path up to the first '.' of the file name; the rest is the field */
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    const char *dot = strchr(base, '.');
    if (!dot || dot == base) return 0; /* no field: not part of a sample */
    size_t klen = (size_t)(dot - name);
    char ext[16];
    size_t el = strlen(dot + 1);
    if (el >= sizeof ext) return 0;
    for (size_t i = 0; i <= el; i++) ext[i] = (char)tolower((unsigned char)dot[1 + i]);
    if (!x->key || strlen(x->key) != klen || strncmp(x->key, name, klen) != 0) {
        if (finish_sample(x) != 0) return -1;
        x->key = vil_malloc(klen + 1);
        memcpy(x->key, name, klen);
        x->key[klen] = 0;
    }
    if (is_image_ext(ext)) {
        if (x->img) {
            char s2[256];
            char s3[256];
            vil_error("shard '%s': sample '%s' has two images ('%s' and '%s')", x->path,
                      vil_printable(shown, sizeof shown, x->key), vil_printable(s2, sizeof s2, x->img),
                      vil_printable(s3, sizeof s3, name));
            return -1;
        }
        x->img = vil_strdup(name);
        x->m.size = size;
        x->img_hdr = hdr;
        x->img_data = x->data_at;
        x->pending = 1;
        return 0;
    }
    if (strcmp(ext, "cls") == 0) return read_cls(a, x, name, size);
    if (strcmp(ext, "json") == 0) return read_json(a, x, name, size);
    return 0; /* other fields (.txt, .meta, ...) are not used */
}

static const char *compression(const unsigned char *b, size_t n) {
    if (n >= 2 && b[0] == 0x1f && b[1] == 0x8b) return "gzip";
    if (n >= 3 && memcmp(b, "BZh", 3) == 0) return "bzip2";
    if (n >= 6 && memcmp(b, "\xfd" "7zXZ\0", 6) == 0) return "xz";
    if (n >= 4 && memcmp(b, "\x28\xb5\x2f\xfd", 4) == 0) return "zstd";
    if (n >= 4 && memcmp(b, "\x04\x22\x4d\x18", 4) == 0) return "lz4";
    return NULL;
}

/* The first offset in [from, end) of fd that holds a byte other than zero; end when there is
 * none, -1 when it cannot be read. */
static int64_t nonzero_at(int fd, int64_t from, int64_t end) {
    unsigned char b[16384];
    while (from < end) {
        size_t want = end - from < (int64_t)sizeof b ? (size_t)(end - from) : sizeof b;
        ssize_t got = pread(fd, b, want, from);
        if (got <= 0) return -1;
        for (ssize_t i = 0; i < got; i++)
            if (b[i]) return from + i;
        from += got;
    }
    return end;
}

static int index_shard(Indexer *x, int keep_open) {
    char shown[1024];
    x->path = vil_printable(shown, sizeof shown, x->set->paths[x->shard]);
    VilErrCapture cap;
    vil_error_capture(&cap);
    int fd = vil_open_regular_unnamed(x->set->paths[x->shard]);
    vil_error_release(&cap);
    if (fd < 0) {
        vil_error("shard '%s': %s", x->path, cap.msg);
        return -1;
    }
    struct stat st;
    unsigned char magic[8];
    ssize_t got = fstat(fd, &st) == 0 ? pread(fd, magic, sizeof magic, 0) : -1;
    if (got < 0) {
        vil_error("shard '%s': cannot read: %s", x->path, strerror(errno));
        close(fd);
        return -1;
    }
    x->file_size = st.st_size;
    const char *z = compression(magic, (size_t)got);
    if (z) {
        vil_error("shard '%s' is compressed (%s): vil reads each sample at its offset, which needs "
                  "a plain .tar; decompress the shards (WebDataset's usual form is plain .tar)",
                  x->path, z);
        close(fd);
        return -1;
    }
    struct archive *a = archive_read_new();
    if (!a) {
        vil_error("shard '%s': no memory for libarchive's reader", x->path);
        close(fd);
        return -1;
    }
    archive_read_support_format_tar(a);
    /* zero blocks inside the file (an end marker, then more members: `cat a.tar b.tar`) are
     * skipped and the reading goes on, as GNU tar -i does; the header positions stay those of
     * the bytes (a header's position is where its read began, before the zero blocks), so the
     * offsets below hold. Without the option (an old libarchive) the tail check below refuses
     * what it would leave unread. */
    archive_read_set_options(a, "tar:read_concatenated_archives");
    int rc = 0;
    if (archive_read_open_fd(a, fd, 1 << 16) != ARCHIVE_OK) {
        vil_error("shard '%s' is not a tar file: %s", x->path, archive_error_string(a));
        rc = -1;
    }
    long members = 0;
    int64_t last_end = 0; /* where the last member's data (padded to its block) ends */
    x->label = -1;
    while (rc == 0) {
        struct archive_entry *e;
        int r = archive_read_next_header(a, &e);
        int64_t hdr = r == ARCHIVE_OK || r == ARCHIVE_WARN || r == ARCHIVE_EOF ? archive_read_header_position(a) : -1;
        if (r == ARCHIVE_EOF) {
            /* only zero bytes may follow the end: data there is read, or refused, never dropped */
            int64_t g = hdr >= 0 && hdr <= x->file_size ? nonzero_at(fd, hdr, x->file_size) : -1;
            if (g != x->file_size) {
                if (g < 0) vil_error("shard '%s': cannot read its end (%s)", x->path, strerror(errno ? errno : EIO));
                else vil_error("shard '%s' holds data at byte %lld, after its end-of-archive blocks, that the tar "
                               "reader did not read: a damaged tar or trailing garbage; rewrite the shard",
                               x->path, (long long)g);
                rc = -1;
                break;
            }
            rc = place_image(x, hdr);
            if (rc == 0) rc = finish_sample(x);
            break;
        }
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
            const char *why = archive_error_string(a);
            /* after the last member: zero bytes to the end (a tail shorter than a block) are
             * padding; zero blocks and then bytes that are no header are refused as such */
            int64_t g = last_end % 512 == 0 && last_end <= x->file_size ? nonzero_at(fd, last_end, x->file_size) : -1;
            if (g == x->file_size) {
                rc = place_image(x, last_end);
                if (rc == 0) rc = finish_sample(x);
                break;
            }
            if (g >= last_end + 512)
                vil_error("shard '%s' holds data at byte %lld, after its end-of-archive blocks (at byte %lld), "
                          "that is no tar member (%s): trailing garbage or a damaged tar appended; vil reads on "
                          "past end blocks (concatenated tars), so it refuses this rather than drop it",
                          x->path, (long long)g, (long long)last_end, why ? why : "unrecognised header");
            else if (members == 0 && st.st_size > 0 && !(why && strstr(why, "runcated")))
                vil_error("shard '%s' is not a tar file (%s)", x->path, why ? why : "unrecognised header");
            else
                vil_error("shard '%s' is truncated or corrupt after %ld members (%s)", x->path, members,
                          why ? why : "unexpected end of data");
            rc = -1;
            break;
        }
        members++;
        int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
        int64_t data_at = archive_filter_bytes(a, 0); /* the headers are consumed: its data's start */
        x->data_at = data_at >= 0 && data_at <= x->file_size ? data_at : -1;
        last_end = size >= 0 && size <= x->file_size && x->data_at >= 0 ? x->data_at + (size + 511) / 512 * 512 : -1;
        rc = place_image(x, hdr);
        if (rc == 0) rc = entry(a, e, x, hdr);
    }
    archive_read_free(a);
    /* a key whose members are not adjacent would be two samples: refused */
    if (rc == 0 && x->keys.n > 1) {
        qsort(x->keys.v, (size_t)x->keys.n, sizeof(char *), cmp_str);
        for (int i = 1; i < x->keys.n && rc == 0; i++)
            if (strcmp(x->keys.v[i - 1], x->keys.v[i]) == 0) {
                char k[256];
                vil_error("shard '%s': key '%s' appears twice, apart (a sample's members must be "
                          "adjacent, as WebDataset writes them)", x->path, vil_printable(k, sizeof k, x->keys.v[i]));
                rc = -1;
            }
    }
    list_free(&x->keys);
    free(x->key);
    clear_sample(x);
    x->pending = 0;
    if (rc == 0 && keep_open) x->set->fds[x->shard] = fd;
    else close(fd);
    return rc;
}
#endif

VilShardSet *vil_shards_open(const char *path, const char *split, VilShardSampleFn fn, void *ctx,
                             int *num_classes, char ***class_ids) {
    *num_classes = 0;
    *class_ids = NULL;
    char shown[1024];
    List files = {0};
    char *source;
    if (is_dir(path)) {
        char *dir = split ? vil_path_join(path, split) : vil_strdup(path);
        int n = list_shards(dir, &files);
        if (n <= 0) {
            vil_error("'%s' holds no .tar shards", vil_printable(shown, sizeof shown, dir));
            free(dir);
            list_free(&files);
            return NULL;
        }
        source = dir;
    } else {
        if (pattern_files(path, split, &files) != 0) {
            list_free(&files);
            return NULL;
        }
        source = vil_strdup(path);
    }
#ifndef VIL_ARCHIVE
    vil_error("'%s' holds tar shards, but this vil was built without libarchive: install it "
              "(Debian: libarchive-dev; tools/deps.sh build) and rebuild",
              vil_printable(shown, sizeof shown, source));
    list_free(&files);
    free(source);
    (void)fn, (void)ctx, (void)read_classes, (void)find_classes;
    return NULL;
#else
    VilShardSet *s = vil_calloc(1, sizeof *s);
    s->refs = 1;
    s->n = files.n;
    s->paths = files.v;
    s->fds = vil_malloc((size_t)files.n * sizeof(int));
    for (int i = 0; i < files.n; i++) s->fds[i] = -1;
    s->source = source;
    int C = 0;
    char *cfile = find_classes(s->paths[0]);
    if (cfile && read_classes(cfile, &C, class_ids) != 0) {
        free(cfile);
        vil_shard_set_free(s);
        return NULL;
    }
    free(cfile);
    /* descriptors stay open up to half the process's limit; past it a read opens its shard */
    struct rlimit rl;
    long budget = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (long)(rl.rlim_cur / 2) - 64 : 256;
    if (budget > 65536) budget = 65536;
    /* shards are indexed in parallel, a chunk at a time (bounded memory), and handed over in
     * order; the first refused shard in that order is the one reported */
    enum { CHUNK = 256 };
    Indexer *xs = vil_calloc(CHUNK, sizeof *xs);
    long total = 0;
    int max_label = -1, rc = 0;
    for (int k0 = 0; k0 < s->n && rc == 0; k0 += CHUNK) {
        int nk = s->n - k0 < CHUNK ? s->n - k0 : CHUNK;
        int nt = 1;
#ifdef _OPENMP
        nt = omp_get_max_threads();
        if (nt > 16) nt = 16;
        if (nt > nk) nt = nk;
#endif
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
        for (int j = 0; j < nk; j++) {
            Indexer *x = &xs[j];
            memset(x, 0, sizeof *x);
            x->set = s, x->shard = k0 + j, x->num_classes = C, x->max_label = -1, x->label = -1;
            VilErrCapture cap;
            vil_error_capture(&cap);
            int r = index_shard(x, k0 + j < budget);
            vil_error_release(&cap);
            if (r != 0) x->error = vil_strdup(cap.msg[0] ? cap.msg : "cannot be indexed");
        }
        for (int j = 0; j < nk; j++) {
            Indexer *x = &xs[j];
            if (rc == 0 && x->error) {
                vil_error("%s", x->error);
                rc = -1;
            }
            if (rc == 0 && total + x->n > (1L << 30)) {
                vil_error("the shards of '%s' hold more than %ld samples",
                          vil_printable(shown, sizeof shown, source), 1L << 30);
                rc = -1;
            }
            for (long i = 0; rc == 0 && i < x->n; i++) fn(ctx, x->names + x->name_off[i], x->labels[i], &x->at[i]);
            if (rc == 0) total += x->n;
            if (x->max_label > max_label) max_label = x->max_label;
            free(x->names), free(x->name_off), free(x->labels), free(x->at), free(x->error);
        }
    }
    free(xs);
    if (rc == 0 && total == 0) {
        if (s->n == 1)
            vil_error("shard '%s' holds no samples (a sample is KEY.jpg or another image and KEY.cls)",
                      vil_printable(shown, sizeof shown, s->paths[0]));
        else
            vil_error("the %d shards of '%s' hold no samples (a sample is KEY.jpg or another image "
                      "and KEY.cls)", s->n, vil_printable(shown, sizeof shown, source));
        rc = -1;
    }
    if (rc) {
        if (*class_ids)
            for (int c = 0; c < C; c++) free((*class_ids)[c]);
        free(*class_ids);
        *class_ids = NULL;
        vil_shard_set_free(s);
        return NULL;
    }
    *num_classes = C ? C : max_label + 1;
    return s;
#endif
}
