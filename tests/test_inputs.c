/* test_inputs.c: hostile inputs through the commands (bin/vil, or $VIL_BIN): a FIFO as a dataset
 * image (eval, train, train under mpirun), as classify's file, as a labels, names or cfg file;
 * a gzipped IDX whose header claims 4 GiB; a JPEG header claiming 13000x13000 and a PNG claiming
 * 65535x65535 (refused on the header, with --max-pixels to raise the limit); escape codes in a
 * dataset file name; classify --json on names that are not UTF-8; eval's batch capped at the
 * split under a memory limit; eval's words for the images it leaves out. Every run is under
 * `timeout`, so a hang fails a check instead of the suite. */
#include <cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "tests/data_corpus.h"
#include "tests/model_testing.h"
#include "tests/testing.h"
#include "vil/backend.h"
#include "formats/checkpoint.h"
#include "vil/common.h"
#include "vil/model.h"

static char *dir;
static char out[1 << 17];

/* Run "timeout SECS bin/vil ARGS 2>&1" (ARGS: printf-style, %1$s is the temp folder) with a
 * data limit of limit_kb (RLIMIT_DATA: the heap and private anonymous maps; 0: none; skipped
 * under ASan, whose shadow counts there). Not RLIMIT_AS: the CUDA build maps ~1 GB of libraries
 * before main, and when an OpenBLAS thread's buffer malloc then fails it retries forever.
 * Returns the exit status (124: timed out); the output is in `out`. */
static int vil(int secs, long limit_kb, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int vil(int secs, long limit_kb, const char *fmt, ...) {
    char args[8192], cmd[9000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    char lim[64] = "";
    /* one OpenBLAS thread: each takes a 128 MB buffer and a stack against the limit, and on a
     * 16-core machine they did not fit (pthread_create failed, or a buffer malloc retried forever) */
    if (limit_kb > 0 && !T_ASAN)
        snprintf(lim, sizeof lim, "ulimit -d %ld; OPENBLAS_NUM_THREADS=1 ", limit_kb);
    snprintf(cmd, sizeof cmd, "%stimeout -k 5 %d bin/vil %s 2>&1", lim, secs, args);
    int rc = t_run(cmd, out, sizeof out);
    if (limit_kb > 0 && T_ASAN) printf("note: AddressSanitizer build: the %ld KB limit is skipped\n", limit_kb);
    return rc;
}

/* prints the check's line with the output when it fails */
#define CHECK_RUN(cond, ...)                                                                       \
    do {                                                                                           \
        int ok_ = (cond);                                                                          \
        T_CHECK(ok_, __VA_ARGS__);                                                                 \
        if (ok_) {                                                                                 \
            printf("ok   ");                                                                       \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        } else {                                                                                   \
            printf("---- output:\n%s----\n", out);                                                 \
        }                                                                                          \
    } while (0)

static void path(char *p, size_t n, const char *rel) __attribute__((unused));
static void path(char *p, size_t n, const char *rel) { snprintf(p, n, "%s/%s", dir, rel); }

static void make_fifo(const char *rel) {
    char p[4096];
    path(p, sizeof p, rel);
    if (mkfifo(p, 0644) != 0) {
        fprintf(stderr, "mkfifo %s: %s\n", p, strerror(errno));
        exit(1);
    }
}

/* ROOT/SPLIT/c0..c2/{0..n-1}.png */
static void make_split(const char *root, const char *split, int n) {
    char p[1024], q[2048];
    path(p, sizeof p, root);
    corpus_mkdir("%s%s", p, "");
    snprintf(q, sizeof q, "%s/%s", p, split);
    corpus_mkdir("%s%s", q, "");
    for (int k = 0; k < 3; k++) {
        char c[3072];
        snprintf(c, sizeof c, "%s/c%d", q, k);
        corpus_mkdir("%s%s", c, "");
        for (int i = 0; i < n; i++) {
            char f[4096];
            snprintf(f, sizeof f, "%s/%d.png", c, i);
            corpus_write_png(f, 20, 18, k, i);
        }
    }
}

static int has_fifo_words(const char *s, const char *name) {
    return strstr(s, name) && strstr(s, "FIFO");
}

/* ---- item 3: FIFOs ---- */
static void test_fifo(void) {
    make_split("fe", "val", 2);
    make_fifo("fe/val/c1/pipe.png");
    int rc = vil(60, 0, "eval --model %1$s/m.safetensors --data %1$s/fe --device cpu --workers 2", dir);
    CHECK_RUN(rc == 1 && has_fifo_words(out, "pipe.png") && strstr(out, "(6 images; 1 unreadable"),
              "eval: a FIFO image is named and left out, exit 1 (rc %d)", rc);
    rc = vil(60, 0, "eval --model %1$s/m.safetensors --data %1$s/fe --device cpu --skip-bad", dir);
    CHECK_RUN(rc == 0, "eval --skip-bad past a FIFO image exits 0 (rc %d)", rc);

    make_split("ft", "train", 4);
    make_split("ft", "val", 1);
    make_fifo("ft/train/c0/pipe.png");
    rc = vil(60, 0, "train --config %1$s/tiny.cfg --data %1$s/ft --set num_classes=3 --set max_steps=2 "
                    "--set batch=4 --set workers=2 --device cpu --out %1$s/ft_run --threads 1", dir);
    CHECK_RUN(rc == 0 && has_fifo_words(out, "pipe.png"),
              "train: a FIFO image is named and replaced, the run ends (rc %d)", rc);
    if (t_run("command -v mpirun >/dev/null 2>&1", NULL, 0) == 0) {
        /* under make test-asan: Open MPI's own leaks are suppressed (tests/lsan.supp) by library
         * name, which needs whole stacks and its components kept loaded (as test_dist does) */
        const char *asan = getenv("ASAN_OPTIONS");
        char env[2048] = "";
        if (asan && *asan) snprintf(env, sizeof env, "ASAN_OPTIONS='%s:fast_unwind_on_malloc=0' ", asan);
        char cmd[8192];
        snprintf(cmd, sizeof cmd,
                 "%2$sOMPI_MCA_mca_base_component_disable_dlclose=1 timeout -k 5 90 mpirun --oversubscribe -np 2 bin/vil train --config %1$s/tiny.cfg --data "
                 "%1$s/ft --set num_classes=3 --set max_steps=2 --set batch=2 --set workers=1 --device "
                 "cpu --out %1$s/ft_mpi --threads 1 2>&1", dir, env);
        rc = t_run(cmd, out, sizeof out);
        CHECK_RUN(rc == 0 && has_fifo_words(out, "pipe.png"),
                  "train under mpirun -np 2: a FIFO image hangs no rank (rc %d)", rc);
    } else {
        printf("note: no mpirun: the 2-rank FIFO run is skipped\n");
    }

    make_fifo("pipe");
    rc = vil(20, 0, "classify --model %1$s/m.safetensors --device cpu %1$s/pipe %1$s/fe/val/c0/0.png", dir);
    CHECK_RUN(rc == 1 && has_fifo_words(out, "pipe") && strstr(out, "0.png\n"),
              "classify: a FIFO is named at once, the other image classified, exit 1 (rc %d)", rc);
    rc = vil(20, 0, "eval --model %1$s/m.safetensors --data %1$s/fe/val/c0 --labels %1$s/pipe --device cpu", dir);
    CHECK_RUN(rc == 1 && has_fifo_words(out, "pipe"), "eval --labels FIFO refused at once (rc %d)", rc);
    rc = vil(20, 0, "train --config %1$s/tiny.cfg --data %1$s/ft --set num_classes=3 --names %1$s/pipe "
                    "--device cpu --out %1$s/ft_names", dir);
    CHECK_RUN(rc == 1 && has_fifo_words(out, "pipe"), "train --names FIFO refused at once (rc %d)", rc);
    rc = vil(20, 0, "train --config %1$s/pipe --data %1$s/ft --device cpu --out %1$s/ft_cfg", dir);
    CHECK_RUN(rc != 0 && rc != 124 && has_fifo_words(out, "pipe"), "train --config FIFO refused at once (rc %d)", rc);
    rc = vil(20, 0, "bench-data --data %1$s/fe --split val --labels %1$s/pipe", dir);
    CHECK_RUN(rc != 0 && rc != 124 && has_fifo_words(out, "pipe"), "bench-data --labels FIFO refused at once (rc %d)", rc);
}

/* ---- item 11: a gzipped IDX whose header claims 4 GiB, with 4 GiB of zeros behind it ---- */
static void gz_member(FILE *f, const void *data, size_t n) {
    /* one gzip member (gzread reads concatenated members as one stream) */
    z_stream z;
    memset(&z, 0, sizeof z);
    deflateInit2(&z, 9, Z_DEFLATED, 31, 9, Z_DEFAULT_STRATEGY);
    size_t cap = deflateBound(&z, n);
    unsigned char *buf = malloc(cap);
    z.next_in = (unsigned char *)data;
    z.avail_in = (unsigned)n;
    z.next_out = buf;
    z.avail_out = (unsigned)cap;
    deflate(&z, Z_FINISH);
    fwrite(buf, 1, cap - z.avail_out, f);
    deflateEnd(&z);
    free(buf);
}

static void test_idx_bomb(void) {
    char p[4096];
    path(p, sizeof p, "bomb");
    corpus_mkdir("%s%s", p, "");
    path(p, sizeof p, "bomb/t10k-images-idx3-ubyte.gz");
    FILE *f = fopen(p, "wb");
    unsigned char hdr[16] = {0, 0, 8, 3, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0}; /* 65536 x 256 x 256 */
    gz_member(f, hdr, sizeof hdr);
    size_t mb = 1 << 20;
    unsigned char *zero = calloc(1, mb);
    unsigned char member[4096];
    {
        /* the 1 MiB member once, then copies: 4096 x 1 MiB = 4 GiB of data in a ~4 MB file */
        FILE *m = fmemopen(member, sizeof member, "wb");
        gz_member(m, zero, mb);
        long len = ftell(m);
        fclose(m);
        for (int i = 0; i < 4096; i++) fwrite(member, 1, (size_t)len, f);
    }
    fclose(f);
    unsigned char *lab = calloc(1, 65536);
    unsigned dims[1] = {65536};
    path(p, sizeof p, "bomb/t10k-labels-idx1-ubyte.gz");
    corpus_write_idx(p, 1, dims, lab, 65536, 1);
    free(lab);
    free(zero);
    /* 1 GiB of data: the old reader died of it (out of memory) after decompressing */
    int rc = vil(60, 1L << 20, "eval --model %1$s/m.safetensors --data %1$s/bomb --device cpu", dir);
    CHECK_RUN(rc == 1 && strstr(out, "65536 x 256 x 256") && strstr(out, "limit") &&
                  !strstr(out, "out of memory"),
              "an IDX header claiming 4 GiB is refused on its header (rc %d)", rc);
}

/* ---- item 11: images claiming more pixels than the limit ---- */
static unsigned char *tiny_jpeg(int w, int h, size_t *n) {
    unsigned char *px = corpus_picture(w, h, 3, 1, 2);
    unsigned char *j = corpus_jpeg(px, w, h, 3, 90, 0, n);
    free(px);
    return j;
}

/* the JPEG's SOF0 height and width set to h x w */
static void jpeg_patch_size(unsigned char *j, size_t n, int w, int h) {
    for (size_t i = 2; i + 9 < n; i++)
        if (j[i] == 0xFF && j[i + 1] == 0xC0) {
            j[i + 5] = (unsigned char)(h >> 8), j[i + 6] = (unsigned char)h;
            j[i + 7] = (unsigned char)(w >> 8), j[i + 8] = (unsigned char)w;
            return;
        }
    fprintf(stderr, "no SOF0 marker\n");
    exit(1);
}

static void test_pixels(void) {
    char p[4096];
    size_t n;
    unsigned char *j = tiny_jpeg(16, 16, &n);
    jpeg_patch_size(j, n, 13000, 13000);
    path(p, sizeof p, "huge.jpg");
    corpus_write(p, j, n);
    printf("note: the 13000x13000 JPEG is %zu bytes\n", n);
    /* 2 GiB of data: enough for vil, not for a 507 MB decode + its copies */
    int rc = vil(30, 2L << 20, "classify --model %1$s/m.safetensors --device cpu --threads 1 %1$s/huge.jpg", dir);
    CHECK_RUN(rc == 1 && strstr(out, "13000x13000") && strstr(out, "67108864") && strstr(out, "--max-pixels"),
              "classify: a JPEG claiming 13000x13000 is refused on its header, naming the limit and "
              "--max-pixels (rc %d)", rc);
    make_split("px", "val", 1);
    path(p, sizeof p, "px/val/c2/huge.jpg");
    corpus_write(p, j, n);
    free(j);
    rc = vil(60, 2L << 20, "eval --model %1$s/m.safetensors --data %1$s/px --device cpu --threads 1 --workers 1", dir);
    CHECK_RUN(rc == 1 && strstr(out, "huge.jpg") && strstr(out, "13000x13000") && strstr(out, "--max-pixels"),
              "eval: the 13000x13000 JPEG is named with the limit and left out (rc %d)", rc);

    /* a real 64x48 JPEG (3,072 pixels) against a lowered limit, then a raised one */
    j = tiny_jpeg(64, 48, &n);
    path(p, sizeof p, "small.jpg");
    corpus_write(p, j, n);
    free(j);
    rc = vil(30, 0, "classify --model %1$s/m.safetensors --device cpu --max-pixels 3000 %1$s/small.jpg", dir);
    CHECK_RUN(rc == 1 && strstr(out, "64x48") && strstr(out, "3000"),
              "classify --max-pixels 3000 refuses a 64x48 JPEG (rc %d)", rc);
    rc = vil(30, 0, "classify --model %1$s/m.safetensors --device cpu --max-pixels 3072 %1$s/small.jpg", dir);
    CHECK_RUN(rc == 0, "classify --max-pixels 3072 takes it (rc %d)", rc);
    rc = vil(30, 0, "classify --model %1$s/m.safetensors --device cpu --max-pixels 0 %1$s/small.jpg", dir);
    CHECK_RUN(rc == 2 && strstr(out, "--max-pixels"), "classify --max-pixels 0 is a usage error (rc %d)", rc);
    /* the dataset's 20x18 PNGs (360 pixels) against --max-pixels 300 and 400 */
    rc = vil(60, 0, "eval --model %1$s/m.safetensors --data %1$s/fe --device cpu --max-pixels 300 --skip-bad", dir);
    CHECK_RUN(rc == 1 && strstr(out, "20x18") && strstr(out, "no images were evaluated"),
              "eval --max-pixels 300 leaves out 20x18 PNGs (rc %d)", rc);
    rc = vil(60, 0, "eval --model %1$s/m.safetensors --data %1$s/px --device cpu --max-pixels 400 --skip-bad", dir);
    CHECK_RUN(rc == 0 && strstr(out, "(3 images; 1 unreadable"), "eval --max-pixels 400 takes them (rc %d)", rc);
    rc = vil(60, 0, "train --config %1$s/tiny.cfg --data %1$s/ft --set num_classes=3 --set max_steps=1 "
                    "--set batch=4 --set workers=1 --device cpu --out %1$s/px_run --threads 1 --max-pixels 300", dir);
    CHECK_RUN(rc != 0 && strstr(out, "20x18") && strstr(out, "--max-pixels"),
              "train --max-pixels 300: no image fits, the run says why (rc %d)", rc);
    /* train's flag is the max_pixels key: saved with the run, so --resume keeps it */
    rc = vil(60, 0, "train --config %1$s/tiny.cfg --data %1$s/ft --set num_classes=3 --set max_steps=1 "
                    "--set batch=4 --set workers=1 --device cpu --out %1$s/px_keep --threads 1 --max-pixels 400", dir);
    char grep[4200];
    snprintf(grep, sizeof grep, "grep -c 'max_pixels[^0-9]*400[^0-9]' %s/px_keep/last.state.safetensors", dir);
    int kept = rc == 0 && t_run(grep, NULL, 0) == 0;
    CHECK_RUN(kept, "train --max-pixels 400 is saved in the run's state as max_pixels (rc %d)", rc);
    rc = vil(20, 0, "train --config %1$s/tiny.cfg --data %1$s/ft --device cpu --max-pixels 0", dir);
    CHECK_RUN(rc == 2 && strstr(out, "--max-pixels 0 is out of range"), "train --max-pixels 0 is a usage error (rc %d)", rc);
    rc = vil(60, 0, "bench-data --data %1$s/px --split val --eval --batch 2 --batches 1 --warmup 0 --threads 1 --max-pixels 300", dir);
    CHECK_RUN(strstr(out, "20x18") != NULL, "bench-data --max-pixels 300 names the limit (rc %d)", rc);

    /* a PNG whose IHDR claims 65535x65535 (the CRC made right) */
    path(p, sizeof p, "big.png");
    corpus_write_png(p, 4, 4, 0, 0);
    size_t pn;
    unsigned char *png = vil_read_file(p, &pn);
    const unsigned char wh[8] = {0, 0, 0xFF, 0xFF, 0, 0, 0xFF, 0xFF};
    memcpy(png + 16, wh, 8);
    uLong crc = crc32(0, png + 12, 17);
    png[29] = (unsigned char)(crc >> 24), png[30] = (unsigned char)(crc >> 16);
    png[31] = (unsigned char)(crc >> 8), png[32] = (unsigned char)crc;
    corpus_write(p, png, pn);
    free(png);
    rc = vil(30, 0, "classify --model %1$s/m.safetensors --device cpu %1$s/big.png", dir);
    CHECK_RUN(rc == 1 && strstr(out, "65535x65535") && strstr(out, "limit") && !strstr(out, "unknown image type"),
              "classify: a PNG claiming 65535x65535 is too large, not of an unknown type (rc %d)", rc);
}

/* ---- item 11: escape codes in a dataset file name; eval's words for left-out images ---- */
static void test_names(void) {
    make_split("esc", "val", 2);
    char p[4096];
    path(p, sizeof p, "esc/val/c1/x\x1b[31mred.png");
    corpus_write(p, "not a png", 9);
    int rc = vil(60, 0, "eval --model %1$s/m.safetensors --data %1$s/esc --device cpu", dir);
    CHECK_RUN(rc == 1 && !strchr(out, 0x1b) && strstr(out, "x\\x1b[31mred.png"),
              "eval: an escape code in a file name is printed escaped (rc %d)", rc);
    CHECK_RUN(!strstr(out, "replaced") && strstr(out, "left out"),
              "eval says the bad image was left out, not replaced");
    rc = vil(20, 0, "classify --model %1$s/m.safetensors --device cpu '%2$s'", dir, p);
    CHECK_RUN(rc == 1 && !strchr(out, 0x1b) && strstr(out, "x\\x1b[31mred.png"),
              "classify: the escape code is printed escaped (rc %d)", rc);
}

/* ---- item 4: classify --json writes valid UTF-8 JSON ---- */
static void test_json(void) {
    /* class names with a control character and a non-ASCII letter (a checkpoint's metadata is
     * UTF-8: vil refuses to write or read it otherwise) */
    VilModel m;
    t_tiny_model(&m);
    char *names[3] = {"ok", "caf\xc3\xa9", "ctl\x01"};
    char p[4096];
    path(p, sizeof p, "n.safetensors");
    vil_checkpoint_save(&m, p, 0, names, 3, NULL);
    vil_model_free(&m);
    path(p, sizeof p, "\xff\xfe\x01.png");
    corpus_write_png(p, 20, 18, 0, 0);
    int rc = vil(30, 0, "classify --model %1$s/n.safetensors --device cpu --json --topk 3 '%2$s'", dir, p);
    size_t len = strlen(out);
    size_t bad = vil_utf8_invalid_at((const unsigned char *)out, len);
    CHECK_RUN(rc == 0 && bad == len, "classify --json: the output is UTF-8 (first bad byte at %zu of %zu)", bad, len);
    const char *js = strstr(out, "\n{"); /* stdout's JSON line after stderr's header line */
    cJSON *o = js ? cJSON_ParseWithOpts(js + 1, NULL, 0) : NULL;
    const cJSON *file = cJSON_GetObjectItemCaseSensitive(o, "file");
    char want[4200];
    snprintf(want, sizeof want, "%s/\xef\xbf\xbd\xef\xbf\xbd\x01.png", dir);
    CHECK_RUN(o && cJSON_IsString(file) && strcmp(file->valuestring, want) == 0,
              "classify --json parses; the file name's bad bytes are U+FFFD, the control character kept");
    int names_ok = 0;
    const cJSON *t, *topk = cJSON_GetObjectItemCaseSensitive(o, "topk");
    cJSON_ArrayForEach(t, topk) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(t, "name");
        if (cJSON_IsString(nm) && (strcmp(nm->valuestring, "ok") == 0 ||
                                   strcmp(nm->valuestring, "caf\xc3\xa9") == 0 ||
                                   strcmp(nm->valuestring, "ctl\x01") == 0))
            names_ok++;
    }
    CHECK_RUN(names_ok == 3, "classify --json: the class names come back as they were (%d of 3)", names_ok);
    cJSON_Delete(o);
}

/* ---- item 9: eval's batch is capped at the split ---- */
static void test_eval_batch(void) {
    /* 512 MiB of data; the old code asked for ~200 MB per batch slot of 65536 images */
    int rc = vil(60, 512L << 10, "eval --model %1$s/m.safetensors --data %1$s/fe --device cpu --skip-bad "
                                  "--batch 65536 --workers 2 --threads 1", dir);
    CHECK_RUN(rc == 0 && strstr(out, "batch 7 (--batch 65536 capped at the split's 7 images)"),
              "eval --batch 65536 on 7 images runs in 512 MiB, the cap said once (rc %d)", rc);
    /* the trainer's validation loader too (its eval_batch key): 3 validation images */
    rc = vil(90, 512L << 10, "train --config %1$s/tiny.cfg --data %1$s/ft --set num_classes=3 "
                             "--set max_steps=1 --set batch=4 --set eval_batch=65536 --set workers=2 "
                             "--device cpu --out %1$s/ft_evb --threads 1", dir);
    CHECK_RUN(rc == 0 && strstr(out, "val "),
              "train with eval_batch=65536 on 3 validation images validates in 512 MiB (rc %d)", rc);
}

int main(void) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1); /* CI runs as root */
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    dir = corpus_mkdtemp("inputs");
    VilModel m;
    t_tiny_model(&m);
    char p[4096];
    path(p, sizeof p, "m.safetensors");
    vil_checkpoint_save(&m, p, 0, NULL, 0, NULL);
    vil_model_free(&m);
    path(p, sizeof p, "tiny.cfg");
    const char *cfg = "img_size = 16\npatch_size = 4\nstride = 4\nembed_dim = 8\ndepth = 2\nd_state = 4\n";
    corpus_write(p, cfg, strlen(cfg));

    test_fifo();
    test_idx_bomb();
    test_pixels();
    test_names();
    test_json();
    test_eval_batch();
    corpus_rmtree(dir);
    return t_finish();
}
