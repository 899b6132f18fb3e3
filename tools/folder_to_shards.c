/* folder_to_shards.c: writes an ImageNet-style folder as WebDataset-style tar shards:
 *   build/tools/folder_to_shards DATA OUTDIR [--shard-size 1000]
 * DATA/train/<class>/<image> becomes OUTDIR/train/train-0000.tar ..., DATA/val/... OUTDIR/val/...
 * (a DATA without train/ is converted as the train split). Sample i of a split (vil's folder
 * order: class folders sorted, then files sorted) is KEY.EXT + KEY.cls with KEY its index in 8+
 * digits, EXT its format (jpg, png, bmp, gif, pnm) and .cls the class index as text; shards hold
 * SHARD_SIZE samples in that order, so `--data OUTDIR` reads the same samples in the same order
 * as `--data DATA`. OUTDIR/classes.txt lists the class folder names, one per line in index
 * order (the val split's classes are numbered as the train split's). Members are written with
 * mtime 0 and no owner, so the same folder gives the same bytes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef VIL_ARCHIVE
#include <archive.h>
#include <archive_entry.h>
#endif

#include "data/dataset.h"
#include "data/image.h"
#include "vil/common.h"

#define USAGE "usage: folder_to_shards DATA OUTDIR [--shard-size 1000]\n"
#define PATH_LEN 4096

typedef struct {
    const char *data, *outdir;
    int shard_size;
} Opts;

/* 0, 1 after --help (exit 0), or 2 after a message and the usage line on stderr (exit 2) */
static int parse_args(int argc, char **argv, Opts *o) {
    *o = (Opts){.shard_size = 1000};
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            printf(USAGE "Writes DATA/train/<class>/<image> (and DATA/val/...) as WebDataset tar shards\n"
                         "OUTDIR/train/train-0000.tar ... (and OUTDIR/val/val-0000.tar ...) of\n"
                         "SHARD_SIZE samples each, in vil's folder order: KEY.jpg (or .png, ...) and\n"
                         "KEY.cls (the class index) per sample, and OUTDIR/classes.txt (the class\n"
                         "folder names in index order). Train on them with --data OUTDIR.\n");
            return 1;
        }
        if (s[0] != '-' || s[1] == 0) {
            if (npos == 2) {
                fprintf(stderr, "folder_to_shards: unexpected argument '%s'\n", s);
                goto usage;
            }
            if (npos++ == 0) o->data = s;
            else o->outdir = s;
            continue;
        }
        const char *eq = strchr(s, '='), *val = eq ? eq + 1 : (i + 1 < argc ? argv[i + 1] : NULL);
        size_t fl = eq ? (size_t)(eq - s) : strlen(s);
        if (fl == 12 && strncmp(s, "--shard-size", 12) == 0) {
            long v;
            if (!val || vil_parse_int(val, &v) != 0 || v < 1 || v > 10000000) {
                fprintf(stderr, "folder_to_shards: --shard-size wants an integer in 1..10000000, got '%s'\n",
                        val ? val : "");
                goto usage;
            }
            o->shard_size = (int)v;
            if (!eq) i++;
            continue;
        }
        fprintf(stderr, "folder_to_shards: unknown option '%.*s'\n", (int)fl, s);
        goto usage;
    }
    if (npos == 2) return 0;
    fprintf(stderr, "folder_to_shards: DATA and OUTDIR are required\n");
usage:
    fprintf(stderr, USAGE);
    return 2;
}

#ifdef VIL_ARCHIVE
/* The member extension for an image's bytes: by its format, or the file's own extension when
 * the bytes say nothing; an unrecognised file keeps .jpg, and training reports it by name. */
static const char *image_ext(const unsigned char *b, size_t n, const char *path, int *unknown) {
    *unknown = 0;
    VilFormat f = vil_image_format(b, n);
    if (f == VIL_FORMAT_JPEG) return "jpg";
    if (f == VIL_FORMAT_PNG) return "png";
    if (n >= 2 && b[0] == 'B' && b[1] == 'M') return "bmp";
    if (n >= 4 && memcmp(b, "GIF8", 4) == 0) return "gif";
    if (n >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '6') return "pnm";
    (void)path;
    *unknown = 1;
    return "jpg";
}

static int add_member(struct archive *a, const char *name, const void *data, size_t n) {
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, name);
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, (la_int64_t)n);
    archive_entry_set_mtime(e, 0, 0);
    int rc = archive_write_header(a, e) == ARCHIVE_OK &&
                     (n == 0 || archive_write_data(a, data, n) == (la_ssize_t)n) ? 0 : -1;
    archive_entry_free(e);
    if (rc) vil_error("cannot write member '%s': %s", name, archive_error_string(a));
    return rc;
}

/* One split: every sample into shards of o->shard_size; map[c]: the class index written for
 * the split's class c. */
static int write_split(const VilDataset *ds, const char *split, const int *map, const Opts *o,
                       int *shards_out, double *bytes) {
    int n = vil_dataset_size(ds), per = o->shard_size;
    int shards = (n + per - 1) / per, width = 4, kw = 8;
    for (long t = 10000; t < shards; t *= 10) width++;
    for (long t = 100000000; t < n; t *= 10) kw++;
    char dir[PATH_LEN], path[PATH_LEN + 16];
    snprintf(dir, sizeof dir, "%s/%s", o->outdir, split);
    if (vil_mkdir_p(dir) != 0) return -1;
    VilBuffer buf = {0};
    int rc = 0, unknown_files = 0;
    for (int s = 0; s < shards && rc == 0; s++) {
        if (snprintf(path, sizeof path, "%s/%s-%0*d.tar", dir, split, width, s) >= (int)sizeof path) {
            vil_error("OUTDIR '%s' is too long", o->outdir);
            return -1;
        }
        /* the shard is written into vil's temporary (created exclusively, never through a link)
         * and renamed over its name when whole */
        char *tmp;
        int fd = vil_temp_create(path, &tmp);
        if (fd < 0) return -1;
        struct archive *a = archive_write_new();
        if (!a) VIL_FATAL("archive_write_new: out of memory");
        archive_write_set_format_pax_restricted(a); /* ustar headers unless a name needs more */
        if (archive_write_open_fd(a, fd) != ARCHIVE_OK) {
            vil_error("cannot write '%s': %s", tmp, archive_error_string(a));
            archive_write_free(a);
            close(fd);
            unlink(tmp);
            free(tmp);
            return -1;
        }
        for (int i = s * per; i < n && i < (s + 1) * per && rc == 0; i++) {
            char src[PATH_LEN], name[64];
            vil_dataset_path(ds, i, src, sizeof src);
            VilErrCapture cap;
            vil_error_capture(&cap);
            int r = vil_dataset_read_bytes(ds, i, &buf);
            vil_error_release(&cap);
            if (r != 0) {
                char shown[1024];
                vil_error("'%s': %s", vil_printable(shown, sizeof shown, src), cap.msg);
                rc = -1;
                break;
            }
            int unknown;
            const char *ext = image_ext(buf.data, buf.size, src, &unknown);
            if (unknown && unknown_files++ < 3) {
                char shown[1024];
                vil_warn("'%s' is no image format vil knows: written as .jpg (training reports it)",
                         vil_printable(shown, sizeof shown, src));
            }
            rc = snprintf(name, sizeof name, "%0*d.%s", kw, i, ext) < (int)sizeof name ? 0 : -1;
            if (rc == 0) rc = add_member(a, name, buf.data, buf.size);
            char cls[16];
            int cn = snprintf(cls, sizeof cls, "%d", map[vil_dataset_label(ds, i)]);
            if (rc == 0 && snprintf(name, sizeof name, "%0*d.cls", kw, i) < (int)sizeof name)
                rc = add_member(a, name, cls, (size_t)cn);
            *bytes += (double)buf.size;
        }
        if (archive_write_close(a) != ARCHIVE_OK && rc == 0) {
            vil_error("cannot write '%s': %s", tmp, archive_error_string(a));
            rc = -1;
        }
        archive_write_free(a);
        if (rc == 0) rc = vil_temp_commit(fd, tmp, path, 1) ? -1 : 0;
        else {
            close(fd);
            unlink(tmp);
            free(tmp);
        }
    }
    if (unknown_files > 3) vil_warn("%d files of the %s split in all are no image format vil knows", unknown_files, split);
    vil_buffer_free(&buf);
    *shards_out = shards;
    return rc;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}
#endif

int main(int argc, char **argv) {
    Opts o;
    int prc = parse_args(argc, argv, &o);
    if (prc) return prc == 1 ? 0 : 2;
#ifndef VIL_ARCHIVE
    vil_error("folder_to_shards was built without libarchive: install it (Debian: libarchive-dev; "
              "tools/deps.sh build) and rebuild");
    return 1;
#else
    static const char *const splits[2] = {"train", "val"};
    char p[PATH_LEN];
    int present[2], any = 0;
    for (int s = 0; s < 2; s++) {
        snprintf(p, sizeof p, "%s/%s", o.data, splits[s]);
        present[s] = is_dir(p);
        any |= present[s];
    }
    if (!any && !is_dir(o.data)) {
        vil_error("'%s' is not a folder (expected DATA/train/<class>/<image>, or DATA/<class>/<image>)",
                  o.data);
        return 1;
    }
    for (int s = 0; s < 2; s++) {
        struct stat st;
        if (snprintf(p, sizeof p, "%s/%s", o.outdir, splits[s]) >= (int)sizeof p - 256) {
            vil_error("OUTDIR '%s' is too long", o.outdir);
            return 1;
        }
        if (lstat(p, &st) == 0) {
            vil_error("'%s' already exists: folder_to_shards writes only into new folders (remove "
                      "it, or choose another OUTDIR)", p);
            return 1;
        }
    }
    VilDataset *ds[2] = {NULL, NULL};
    int *map[2] = {NULL, NULL}, rc = 1;
    for (int s = 0; s < 2; s++) {
        if (any && !present[s]) continue;
        ds[s] = vil_dataset_open(o.data, any ? splits[s] : NULL, NULL);
        if (!ds[s]) goto done;
        if (vil_dataset_kind(ds[s]) != VIL_DATA_FOLDER) {
            vil_error("'%s' is not an ImageNet-style folder of class folders", o.data);
            goto done;
        }
    }
    /* the train split's classes number both splits (the val split may lack some) */
    const VilDataset *ref = ds[0] ? ds[0] : ds[1];
    int C = vil_dataset_num_classes(ref);
    for (int s = 0; s < 2; s++) {
        if (!ds[s]) continue;
        int K = vil_dataset_num_classes(ds[s]);
        map[s] = vil_malloc((size_t)K * sizeof(int));
        for (int c = 0; c < K; c++) {
            map[s][c] = -1;
            for (int r = 0; r < C && map[s][c] < 0; r++)
                if (strcmp(vil_dataset_class_id(ds[s], c), vil_dataset_class_id(ref, r)) == 0) map[s][c] = r;
            if (map[s][c] < 0) {
                char shown[256];
                vil_error("class folder '%s' of the %s split is not a class of the train split",
                          vil_printable(shown, sizeof shown, vil_dataset_class_id(ds[s], c)), splits[s]);
                goto done;
            }
        }
    }
    if (vil_mkdir_p(o.outdir) != 0) goto done;
    size_t cap = 1, len = 0;
    for (int c = 0; c < C; c++) cap += strlen(vil_dataset_class_id(ref, c)) + 1;
    char *classes = vil_malloc(cap);
    for (int c = 0; c < C; c++) {
        const char *id = vil_dataset_class_id(ref, c);
        if (strchr(id, '\n') || strchr(id, '\r')) {
            vil_error("class folder name with a line break: cannot list it in classes.txt");
            free(classes);
            goto done;
        }
        len += (size_t)snprintf(classes + len, cap - len, "%s\n", id);
    }
    snprintf(p, sizeof p, "%s/classes.txt", o.outdir);
    int wr = vil_write_file_atomic(p, classes, len);
    free(classes);
    if (wr != 0) goto done;
    double t0 = vil_now(), bytes = 0;
    int shards[2] = {0, 0};
    for (int s = 0; s < 2; s++)
        if (ds[s] && write_split(ds[s], splits[s], map[s], &o, &shards[s], &bytes) != 0) goto done;
    double secs = vil_now() - t0;
    printf("folder_to_shards: %s: ", o.outdir);
    for (int s = 0; s < 2; s++)
        if (ds[s])
            printf("%s %d samples in %d shards, ", splits[s], vil_dataset_size(ds[s]), shards[s]);
    printf("%d classes, %.1f MB, %.1f s\n", C, bytes / 1e6, secs);
    rc = 0;
done:
    for (int s = 0; s < 2; s++) {
        vil_dataset_free(ds[s]);
        free(map[s]);
    }
    return rc;
#endif
}
