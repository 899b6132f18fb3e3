/* data_corpus.h: writers for the tiny datasets the data tests build in a temporary folder:
 * JPEGs through libjpeg's compressor (RGB, gray, progressive), PNGs through stb_image_write
 * (to name .JPEG), broken files, IDX files plain and gzip, tar archives member by member (plain
 * ustar headers, written here, so hostile ones can lie). Header-only, for tests/ alone. */
#ifndef VIL_TESTS_DATA_CORPUS_H
#define VIL_TESTS_DATA_CORPUS_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
/* jpeglib.h needs FILE and size_t before it */
#include <jpeglib.h>
#include <stb_image_write.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* A temporary folder, removed by corpus_rmtree at the end. */
static inline char *corpus_mkdtemp(const char *tag) {
    const char *tmp = getenv("TMPDIR");
    char *p = malloc(4096);
    snprintf(p, 4096, "%s/vil_%s_XXXXXX", tmp && *tmp ? tmp : "/tmp", tag);
    if (!mkdtemp(p)) {
        fprintf(stderr, "mkdtemp %s: %s\n", p, strerror(errno));
        exit(1);
    }
    return p;
}

static inline void corpus_rmtree(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static inline void corpus_mkdir(const char *fmt, const char *a, const char *b) {
    char p[16384];
    snprintf(p, sizeof p, fmt, a, b);
    if (mkdir(p, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "mkdir %s: %s\n", p, strerror(errno));
        exit(1);
    }
}

static inline void corpus_write(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

/* A w x h test picture (c = 1 or 3) whose colours depend on `cls` and whose pattern on `id`. */
static inline unsigned char *corpus_picture(int w, int h, int c, int cls, int id) {
    unsigned char *px = malloc((size_t)w * h * c);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++) {
                int v = cls * 70 + k * 40 + ((x * (3 + id % 5) + y * (2 + id % 3)) % 64) +
                        (((x / 8 + y / 8 + id) & 1) ? 30 : 0);
                px[((size_t)y * w + x) * c + k] = (unsigned char)(v % 256);
            }
    return px;
}

/* JPEG bytes of px (h, w, c); progressive when asked. Caller frees. */
static inline unsigned char *corpus_jpeg(const unsigned char *px, int w, int h, int c, int quality,
                                  int progressive, size_t *n) {
    struct jpeg_compress_struct cinfo;
    struct jpeg_error_mgr jerr;
    cinfo.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&cinfo);
    unsigned char *out = NULL;
    unsigned long size = 0;
    jpeg_mem_dest(&cinfo, &out, &size);
    cinfo.image_width = (JDIMENSION)w;
    cinfo.image_height = (JDIMENSION)h;
    cinfo.input_components = c;
    cinfo.in_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&cinfo);
    jpeg_set_quality(&cinfo, quality, TRUE);
    if (progressive) jpeg_simple_progression(&cinfo);
    jpeg_start_compress(&cinfo, TRUE);
    while (cinfo.next_scanline < cinfo.image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)cinfo.next_scanline * w * c);
        jpeg_write_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_compress(&cinfo);
    jpeg_destroy_compress(&cinfo);
    *n = size;
    return out;
}

static inline void corpus_write_jpeg(const char *path, int w, int h, int c, int cls, int id, int progressive) {
    unsigned char *px = corpus_picture(w, h, c, cls, id);
    size_t n;
    unsigned char *j = corpus_jpeg(px, w, h, c, 90, progressive, &n);
    corpus_write(path, j, n);
    free(j);
    free(px);
}

static inline void corpus_write_png(const char *path, int w, int h, int cls, int id) {
    unsigned char *px = corpus_picture(w, h, 3, cls, id);
    if (!stbi_write_png(path, w, h, 3, px, w * 3)) {
        fprintf(stderr, "cannot write png %s\n", path);
        exit(1);
    }
    free(px);
}

/* A JPEG cut to `keep` bytes. */
static inline void corpus_write_truncated(const char *path, int w, int h, int keep) {
    unsigned char *px = corpus_picture(w, h, 3, 0, 0);
    size_t n;
    unsigned char *j = corpus_jpeg(px, w, h, 3, 90, 0, &n);
    corpus_write(path, j, (size_t)keep < n ? (size_t)keep : n);
    free(j);
    free(px);
}

/* IDX: images (n, h, w) and labels (n), gzip when gz. */
static inline void corpus_write_idx(const char *path, int ndim, const unsigned *dims,
                             const unsigned char *data, size_t n, int gz) {
    unsigned char hdr[16] = {0, 0, 0x08, (unsigned char)ndim};
    for (int d = 0; d < ndim; d++) {
        hdr[4 + 4 * d] = (unsigned char)(dims[d] >> 24);
        hdr[5 + 4 * d] = (unsigned char)(dims[d] >> 16);
        hdr[6 + 4 * d] = (unsigned char)(dims[d] >> 8);
        hdr[7 + 4 * d] = (unsigned char)dims[d];
    }
    size_t hn = 4 + 4 * (size_t)ndim;
    if (gz) {
        gzFile g = gzopen(path, "wb");
        if (!g || gzwrite(g, hdr, (unsigned)hn) != (int)hn ||
            (n && gzwrite(g, data, (unsigned)n) != (int)n) || gzclose(g) != Z_OK) {
            fprintf(stderr, "cannot write %s\n", path);
            exit(1);
        }
    } else {
        unsigned char *all = malloc(hn + n);
        memcpy(all, hdr, hn);
        memcpy(all + hn, data, n);
        corpus_write(path, all, hn + n);
        free(all);
    }
}

/* A small MNIST-like pair of files named <prefix>-{images-idx3,labels-idx1}-ubyte[.gz]:
 * image i is filled with (i * 7 + 3) % 256 at pixel 0 and its label is i % classes. */
static inline void corpus_write_idx_set(const char *dir, const char *prefix, int n, int h, int w,
                                 int classes, int gz) {
    unsigned char *img = malloc((size_t)n * h * w), *lab = malloc((size_t)n);
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < h * w; k++) img[(size_t)i * h * w + k] = (unsigned char)((i * 7 + k * 3) % 256);
        lab[i] = (unsigned char)(i % classes);
    }
    char p[16384];
    unsigned dims[3] = {(unsigned)n, (unsigned)h, (unsigned)w};
    snprintf(p, sizeof p, "%s/%s-images-idx3-ubyte%s", dir, prefix, gz ? ".gz" : "");
    corpus_write_idx(p, 3, dims, img, (size_t)n * h * w, gz);
    snprintf(p, sizeof p, "%s/%s-labels-idx1-ubyte%s", dir, prefix, gz ? ".gz" : "");
    corpus_write_idx(p, 1, dims, lab, (size_t)n, gz);
    free(img);
    free(lab);
}

/* A tar archive built in memory: corpus_tar_member per member, corpus_tar_end, then write b. */
typedef struct {
    unsigned char *b;
    size_t n, cap;
} CorpusTar;

static inline void corpus_tar_grow(CorpusTar *t, size_t more) {
    if (t->n + more <= t->cap) return;
    while (t->cap < t->n + more) t->cap = t->cap ? t->cap * 2 : 65536;
    t->b = realloc(t->b, t->cap);
}

/* A ustar member: name (< 100 bytes), typeflag type ('0' file, '2' symlink, '5' folder), the
 * data, and a header that claims `claim` bytes (-1: the data's length; the data written is
 * always n bytes, padded to 512). */
static inline void corpus_tar_member(CorpusTar *t, const char *name, const void *data, size_t n,
                                     char type, long long claim) {
    corpus_tar_grow(t, 512 + n + 512);
    unsigned char *h = t->b + t->n;
    memset(h, 0, 512);
    snprintf((char *)h, 100, "%s", name);
    memcpy(h + 100, "0000644", 8);
    memcpy(h + 108, "0000000", 8);
    memcpy(h + 116, "0000000", 8);
    snprintf((char *)h + 124, 12, "%011llo", claim >= 0 ? (unsigned long long)claim : (unsigned long long)n);
    memcpy(h + 136, "00000000000", 12);
    h[156] = (unsigned char)type;
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++) sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
    t->n += 512;
    if (n) memcpy(t->b + t->n, data, n);
    size_t pad = (512 - n % 512) % 512;
    memset(t->b + t->n + n, 0, pad);
    t->n += n + pad;
}

static inline void corpus_tar_end(CorpusTar *t) {
    corpus_tar_grow(t, 1024);
    memset(t->b + t->n, 0, 1024);
    t->n += 1024;
}

#endif
