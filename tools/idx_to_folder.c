/* idx_to_folder.c: writes an IDX dataset (MNIST, Fashion-MNIST) out as an ImageNet-style folder
 * of RGB JPEGs, so that the ImageNet path (configs/vil_tiny_in1k.cfg: JPEG decoding,
 * RandomResizedCrop) can run end to end on real data, e.g. Debian's Fashion-MNIST:
 *   build/tools/idx_to_folder DATA OUTDIR [--size 224] [--quality 90] [--limit N] [--threads T]
 * DATA's train split becomes OUTDIR/train/<class>/<index>.JPEG, its test split OUTDIR/val/...
 * Class folders are "<label>_<name>" with the label zero-padded, so that sorting them (how vil
 * numbers folder classes) gives back the IDX labels; every split gets every class folder, even
 * an empty one, for the same reason. Each image is the gray picture as three equal channels,
 * resized to SIZE x SIZE with vil's Pillow-exact bicubic resize, JPEG at QUALITY (4:2:0). */
#include <errno.h>
#include <omp.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
/* jpeglib.h needs FILE and size_t before it */
#include <jpeglib.h>

#include "data/dataset.h"
#include "data/transform.h"
#include "vil/common.h"
#include "vil/limits.h"

#define USAGE "usage: idx_to_folder DATA OUTDIR [--size 224] [--quality 90] [--limit N] [--threads T]\n"
#define PATH_LEN 4096
#define NAME_LEN 64 /* characters of a class name kept in its folder name */

typedef struct {
    const char *data, *outdir;
    int size, quality, limit, threads; /* limit 0: every sample; threads 0: OpenMP's default */
} Opts;

/* ---- command line ---- */

static int parse_value(const char *flag, const char *val, long lo, long hi, int *dst) {
    long v;
    if (!val) {
        fprintf(stderr, "idx_to_folder: %s needs a value\n", flag);
        return -1;
    }
    if (vil_parse_int(val, &v) != 0 || v < lo || v > hi) {
        fprintf(stderr, "idx_to_folder: %s wants an integer in %ld..%ld, got '%s'\n", flag, lo, hi, val);
        return -1;
    }
    *dst = (int)v;
    return 0;
}

/* 0, 1 after --help (exit 0), or 2 after a message and the usage line on stderr (exit 2) */
static int parse_args(int argc, char **argv, Opts *o) {
    *o = (Opts){.size = 224, .quality = 90};
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            printf(USAGE "Writes the train and test splits of an IDX dataset (MNIST, Fashion-MNIST) as\n"
                         "OUTDIR/train/<class>/<index>.JPEG and OUTDIR/val/...: RGB, SIZE x SIZE\n"
                         "(bicubic), JPEG quality QUALITY. --limit N: the first N samples of each\n"
                         "split. --threads T: encoding threads (default 0: $OMP_NUM_THREADS if set, else\n"
                         "all CPUs).\n");
            return 1;
        }
        if (s[0] != '-' || s[1] == 0) {
            if (npos == 2) {
                fprintf(stderr, "idx_to_folder: unexpected argument '%s'\n", s);
                goto usage;
            }
            if (npos++ == 0) o->data = s;
            else o->outdir = s;
            continue;
        }
        /* --flag value or --flag=value */
        char flag[32];
        const char *eq = strchr(s, '='), *val = eq ? eq + 1 : (i + 1 < argc ? argv[i + 1] : NULL);
        size_t fl = eq ? (size_t)(eq - s) : strlen(s);
        snprintf(flag, sizeof flag, "%.*s", (int)fl, s);
        int rc;
        if (strcmp(flag, "--size") == 0) rc = parse_value(flag, val, 1, VIL_MAX_IMG_SIZE, &o->size);
        else if (strcmp(flag, "--quality") == 0) rc = parse_value(flag, val, 1, 100, &o->quality);
        else if (strcmp(flag, "--limit") == 0) rc = parse_value(flag, val, 1, 2147483647L, &o->limit);
        else if (strcmp(flag, "--threads") == 0) rc = parse_value(flag, val, 0, VIL_MAX_THREADS, &o->threads);
        else {
            fprintf(stderr, "idx_to_folder: unknown option '%s'\n", flag);
            goto usage;
        }
        if (rc != 0) goto usage;
        if (!eq) i++;
    }
    if (npos == 2) return 0;
    fprintf(stderr, "idx_to_folder: DATA and OUTDIR are required\n");
usage:
    fprintf(stderr, USAGE);
    return 2;
}

/* ---- JPEG encoding into a growable buffer that each thread keeps ---- */

typedef struct {
    struct jpeg_compress_struct cinfo;
    struct jpeg_error_mgr jerr;
    struct jpeg_destination_mgr dest;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
    unsigned char *gray; /* (size, size): the resized picture */
    unsigned char *row;  /* (size, 3): one RGB scanline */
    unsigned char *jpg;  /* the encoded file: jpg_len bytes of jpg_cap */
    size_t jpg_cap, jpg_len;
} Encoder;

static void enc_error_exit(j_common_ptr cinfo) {
    Encoder *e = cinfo->client_data;
    cinfo->err->format_message(cinfo, e->msg);
    longjmp(e->jb, 1);
}

static void dest_init(j_compress_ptr cinfo) {
    Encoder *e = cinfo->client_data;
    e->dest.next_output_byte = e->jpg;
    e->dest.free_in_buffer = e->jpg_cap;
}

/* the buffer is full: double it and go on after what is already there */
static boolean dest_grow(j_compress_ptr cinfo) {
    Encoder *e = cinfo->client_data;
    size_t used = e->jpg_cap;
    e->jpg_cap *= 2;
    e->jpg = vil_realloc(e->jpg, e->jpg_cap);
    e->dest.next_output_byte = e->jpg + used;
    e->dest.free_in_buffer = e->jpg_cap - used;
    return TRUE;
}

static void dest_term(j_compress_ptr cinfo) {
    Encoder *e = cinfo->client_data;
    e->jpg_len = e->jpg_cap - e->dest.free_in_buffer;
}

static void encoder_init(Encoder *e, int size) {
    memset(e, 0, sizeof *e);
    e->cinfo.err = jpeg_std_error(&e->jerr);
    e->jerr.error_exit = enc_error_exit;
    e->cinfo.client_data = e;
    jpeg_create_compress(&e->cinfo);
    e->dest.init_destination = dest_init;
    e->dest.empty_output_buffer = dest_grow;
    e->dest.term_destination = dest_term;
    e->cinfo.dest = &e->dest;
    e->gray = vil_malloc((size_t)size * size);
    e->row = vil_malloc((size_t)size * 3);
    e->jpg_cap = 65536;
    e->jpg = vil_malloc(e->jpg_cap);
}

static void encoder_free(Encoder *e) {
    jpeg_destroy_compress(&e->cinfo);
    free(e->gray);
    free(e->row);
    free(e->jpg);
}

/* e->gray (size x size) as an RGB JPEG of three equal channels into e->jpg. 0, or -1 (vil_error) */
static int encode_gray_as_rgb(Encoder *e, int size, int quality) {
    j_compress_ptr ci = &e->cinfo;
    if (setjmp(e->jb)) {
        jpeg_abort_compress(ci);
        vil_error("JPEG encoder: %s", e->msg);
        return -1;
    }
    ci->image_width = (JDIMENSION)size;
    ci->image_height = (JDIMENSION)size;
    ci->input_components = 3;
    ci->in_color_space = JCS_RGB;
    jpeg_set_defaults(ci); /* YCbCr 4:2:0, as PIL saves RGB */
    jpeg_set_quality(ci, quality, TRUE);
    jpeg_start_compress(ci, TRUE);
    while (ci->next_scanline < ci->image_height) {
        const unsigned char *g = e->gray + (size_t)ci->next_scanline * size;
        for (int x = 0; x < size; x++) e->row[3 * x] = e->row[3 * x + 1] = e->row[3 * x + 2] = g[x];
        JSAMPROW r = e->row;
        jpeg_write_scanlines(ci, &r, 1);
    }
    jpeg_finish_compress(ci);
    return 0;
}

/* ---- files ---- */

/* data into dir/name through vil's hidden temporary and a rename, so that an interrupted run
 * leaves no truncated image (and vil skips hidden files). No fsync: a crash of the machine can
 * lose files, which a rerun into a fresh OUTDIR writes again. */
static int write_image_file(const char *dir, const char *name, const unsigned char *data, size_t n) {
    char path[PATH_LEN];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        vil_error("the path '%s/%s' is too long", dir, name);
        return -1;
    }
    return vil_write_file_unsynced(path, data, n) ? -1 : 0;
}

static int digits(long v) {
    int d = 1;
    while (v >= 10) v /= 10, d++;
    return d;
}

/* "<c zero-padded>_<name with every character outside [A-Za-z0-9] as '-'>" */
static void class_folder_name(char *dst, size_t cap, int c, int num_classes, const char *name) {
    int n = snprintf(dst, cap, "%0*d_", digits(num_classes - 1), c);
    for (int k = 0; name[k] && k < NAME_LEN && (size_t)n + 1 < cap; k++) {
        char ch = name[k];
        int keep = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
        dst[n++] = keep ? ch : '-';
    }
    dst[n] = 0;
}

/* OUTDIR/split and its class folders, which must not exist yet. 0, or -1 (vil_error). */
static int make_split_dirs(const char *outdir, const char *split, char **classes, int num_classes) {
    char p[PATH_LEN];
    snprintf(p, sizeof p, "%s/%s", outdir, split);
    if (mkdir(p, 0755) != 0) {
        if (errno == EEXIST)
            vil_error("'%s' already exists: idx_to_folder writes only into new folders (remove it, "
                      "or choose another OUTDIR)", p);
        else
            vil_error("cannot create the folder '%s': %s", p, strerror(errno));
        return -1;
    }
    for (int c = 0; c < num_classes; c++) {
        if (snprintf(p, sizeof p, "%s/%s/%s", outdir, split, classes[c]) >= (int)sizeof p) {
            vil_error("the path '%s/%s/%s' is too long", outdir, split, classes[c]);
            return -1;
        }
        if (mkdir(p, 0755) != 0) {
            vil_error("cannot create the folder '%s': %s", p, strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* ---- one split ---- */

/* Sample i of ds as OUTDIR/split/<class>/<i>.JPEG. 0, or -1 (vil_error). */
static int write_sample(Encoder *e, const VilDataset *ds, int i, const char *splitdir, char **classes,
                        int name_width, const Opts *o) {
    VilImage src;
    if (vil_dataset_raw_image(ds, i, &src) != 0) {
        vil_error("sample %d of '%s' has no pixels", i, vil_dataset_source(ds));
        return -1;
    }
    if (vil_resize_bicubic_box(e->gray, src.px, src.w, src.h, (size_t)src.w * src.c, src.c, o->size, o->size, NULL) != 0 ||
        encode_gray_as_rgb(e, o->size, o->quality) != 0)
        return -1;
    char dir[PATH_LEN], name[64];
    snprintf(dir, sizeof dir, "%s/%s", splitdir, classes[vil_dataset_label(ds, i)]);
    snprintf(name, sizeof name, "%0*d.JPEG", name_width, i);
    return write_image_file(dir, name, e->jpg, e->jpg_len);
}

/* The first o->limit samples of ds (all without a limit) into OUTDIR/split. *written, *bytes:
 * images and JPEG bytes written. 0, or -1 after the first failure's message. */
static int write_split(const VilDataset *ds, const char *split, char **classes, const Opts *o, long *written,
                       double *bytes) {
    int n = vil_dataset_size(ds);
    if (o->limit > 0 && o->limit < n) n = o->limit;
    int name_width = digits(vil_dataset_size(ds)); /* the same names with or without --limit */
    char splitdir[PATH_LEN];
    snprintf(splitdir, sizeof splitdir, "%s/%s", o->outdir, split);
    int failed = 0;
    long done = 0;
    double sum = 0.0;
    int nt = o->threads > 0 ? o->threads : omp_get_max_threads();
#pragma omp parallel num_threads(nt)
    {
        Encoder e;
        encoder_init(&e, o->size);
#pragma omp for schedule(dynamic, 16) reduction(+ : sum)
        for (int i = 0; i < n; i++) {
            int stop;
#pragma omp atomic read
            stop = failed;
            if (stop) continue;
            VilErrCapture cap;
            vil_error_capture(&cap);
            int rc = write_sample(&e, ds, i, splitdir, classes, name_width, o);
            vil_error_release(&cap);
            if (rc != 0) {
                int first;
#pragma omp atomic capture
                first = failed++;
                if (first == 0) vil_error("%s", cap.msg); /* one message, not one per thread */
                continue;
            }
            sum += (double)e.jpg_len;
            long d;
#pragma omp atomic capture
            d = ++done;
            if (d * 10 / n != (d - 1) * 10 / n)
                fprintf(stderr, "idx_to_folder: %s %3ld%% (%ld / %d)\n", split, d * 100 / n, d, n);
        }
        encoder_free(&e);
    }
    *written = done;
    *bytes = sum;
    return failed ? -1 : 0;
}

int main(int argc, char **argv) {
    Opts o;
    int prc = parse_args(argc, argv, &o);
    if (prc) return prc == 1 ? 0 : 2;
    static const char *const splits[2] = {"train", "val"};     /* what vil reads */
    static const char *const idx_splits[2] = {"train", "test"}; /* what the IDX files hold */

    /* refuse early, before the datasets are read */
    for (int s = 0; s < 2; s++) {
        char p[PATH_LEN];
        struct stat st;
        if (snprintf(p, sizeof p, "%s/%s", o.outdir, splits[s]) >= (int)sizeof p - 256) {
            vil_error("OUTDIR '%s' is too long", o.outdir);
            return 1;
        }
        if (lstat(p, &st) == 0) {
            vil_error("'%s' already exists: idx_to_folder writes only into new folders (remove it, "
                      "or choose another OUTDIR)", p);
            return 1;
        }
    }

    VilDataset *ds[2] = {NULL, NULL};
    char **classes = NULL;
    int num_classes = 0, rc = 1;
    for (int s = 0; s < 2; s++) {
        ds[s] = vil_dataset_open(o.data, idx_splits[s], NULL);
        if (!ds[s]) goto done;
        if (vil_dataset_kind(ds[s]) != VIL_DATA_IDX) {
            vil_error("'%s' is not an IDX dataset (expected a folder with train-images-idx3-ubyte[.gz] "
                      "and t10k-images-idx3-ubyte[.gz] and their labels files)", o.data);
            goto done;
        }
        if (vil_dataset_num_classes(ds[s]) > num_classes) num_classes = vil_dataset_num_classes(ds[s]);
    }
    /* the test split may lack the last classes (IDX counts classes up to the largest label) */
    classes = vil_calloc((size_t)num_classes, sizeof(char *));
    for (int c = 0; c < num_classes; c++) {
        const VilDataset *named = c < vil_dataset_num_classes(ds[0]) ? ds[0] : ds[1];
        classes[c] = vil_malloc(NAME_LEN + 16);
        class_folder_name(classes[c], NAME_LEN + 16, c, num_classes, vil_dataset_class_name(named, c));
    }
    if (vil_mkdir_p(o.outdir) != 0) goto done;
    for (int s = 0; s < 2; s++)
        if (make_split_dirs(o.outdir, splits[s], classes, num_classes) != 0) goto done;

    long written[2] = {0, 0};
    double bytes[2] = {0, 0};
    double t0 = vil_now();
    for (int s = 0; s < 2; s++)
        if (write_split(ds[s], splits[s], classes, &o, &written[s], &bytes[s]) != 0) goto done;
    double secs = vil_now() - t0;
    long total = written[0] + written[1];
    printf("idx_to_folder: %s: train %ld images, val %ld images (%d classes, %dx%d, quality %d), "
           "%.1f MB, %.1f s, %.0f images/s\n",
           o.outdir, written[0], written[1], num_classes, o.size, o.size, o.quality,
           (bytes[0] + bytes[1]) / 1e6, secs, secs > 0 ? total / secs : 0.0);
    rc = 0;
done:
    for (int c = 0; classes && c < num_classes; c++) free(classes[c]);
    free(classes);
    vil_dataset_free(ds[0]);
    vil_dataset_free(ds[1]);
    return rc;
}
