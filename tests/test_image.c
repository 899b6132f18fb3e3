/* test_image.c: the decoders. JPEGs written here with libjpeg (baseline 4:2:0 and 4:4:4,
 * progressive, grayscale, CMYK, YCCK) against their source pixels; JPEGs written by PIL
 * against PIL's own decode (tests/data, made by tools/make_test_images.py); a PNG named
 * .JPEG; and every way a file can be broken: truncated, empty, garbage, decompression bomb;
 * headers claiming more pixels than the --max-pixels limit (JPEG, PNG, GIF, BMP). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "data/image.h"
#include "tests/testing.h"
#include "vil/common.h"

#define DATA "tests/data/"

/* ---- helpers ---- */

static unsigned char *read_data(const char *name, size_t *n) {
    char path[256];
    snprintf(path, sizeof path, DATA "%s", name);
    unsigned char *b = vil_read_file(path, n);
    T_CHECK(b != NULL, "missing test file %s (run tools/make_test_images.py)", path);
    return b;
}

/* A smooth colour image (JPEG-friendly) with a little texture. px: (h, w, 3) */
static unsigned char *smooth_rgb(int w, int h) {
    unsigned char *px = vil_malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            unsigned char *p = px + ((size_t)y * w + x) * 3;
            p[0] = (unsigned char)(40 + 170 * x / (w - 1));
            p[1] = (unsigned char)(30 + 190 * y / (h - 1));
            p[2] = (unsigned char)(128 + 60 * ((x / 8 + y / 8) % 2 ? 1 : -1) * (x % 8) / 8);
        }
    return px;
}

/* Write a JPEG with libjpeg into a malloc'd buffer. ncomp/in_cs: 1 gray, 3 RGB, 4 CMYK.
 * jpeg_cs: the stored colour space (JCS_UNKNOWN: libjpeg's default for in_cs). */
static unsigned char *write_jpeg(const unsigned char *px, int w, int h, int ncomp, J_COLOR_SPACE in_cs,
                                 J_COLOR_SPACE jpeg_cs, int quality, int progressive, int s444,
                                 unsigned long *size) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    unsigned char *out = NULL;
    *size = 0;
    c.err = jpeg_std_error(&jerr); /* test-only: libjpeg's exit on error is acceptable here */
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &out, size);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = ncomp;
    c.in_color_space = in_cs;
    jpeg_set_defaults(&c);
    if (jpeg_cs != JCS_UNKNOWN) jpeg_set_colorspace(&c, jpeg_cs);
    jpeg_set_quality(&c, quality, TRUE);
    if (s444)
        for (int i = 0; i < c.num_components; i++)
            c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
    if (progressive) jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)c.next_scanline * w * ncomp);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    return out;
}

static void diff_stats(const unsigned char *a, const unsigned char *b, size_t n, int *maxd, double *meand) {
    int m = 0;
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        if (d > m) m = d;
        s += d;
    }
    *maxd = m;
    *meand = n ? s / n : 0;
}

/* ---- JPEGs written here, against their source ---- */

static void check_decoded(const char *name, const unsigned char *buf, size_t n, const unsigned char *want,
                          int w, int h, int c, int channels, int max_tol, double mean_tol) {
    VilImage im;
    int rc = vil_image_decode(buf, n, channels, &im);
    T_CHECK(rc == 0, "%s: decode failed", name);
    if (rc) return;
    T_CHECK(im.w == w && im.h == h && im.c == c, "%s: got %dx%dx%d, want %dx%dx%d", name, im.w, im.h,
            im.c, w, h, c);
    if (im.w == w && im.h == h && im.c == c) {
        int md;
        double mean;
        diff_stats(im.px, want, (size_t)w * h * c, &md, &mean);
        char label[96];
        snprintf(label, sizeof label, "%s max |diff| (mean %.2f)", name, mean);
        T_CLOSE(label, md, max_tol);
        T_CHECK(mean <= mean_tol, "%s: mean |diff| %.3f > %.3f", name, mean, mean_tol);
    }
    vil_image_free(&im);
}

static void test_own_jpegs(void) {
    const int w = 64, h = 48;
    unsigned char *rgb = smooth_rgb(w, h);
    unsigned char *gray = vil_malloc((size_t)w * h);
    vil_rgb_to_gray(gray, rgb, (size_t)w * h);
    unsigned char *gray3 = vil_malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h; i++) gray3[3 * i] = gray3[3 * i + 1] = gray3[3 * i + 2] = gray[i];
    unsigned long n;
    unsigned char *j;

    /* Tolerances: q95 keeps a smooth image within a few levels; 4:2:0 halves chroma
     * resolution, which costs more at the checkerboard's edges. */
    j = write_jpeg(rgb, w, h, 3, JCS_RGB, JCS_UNKNOWN, 95, 0, 0, &n);
    check_decoded("baseline 4:2:0", j, n, rgb, w, h, 3, 3, 40, 4.0);
    check_decoded("baseline 4:2:0 -> gray", j, n, gray, w, h, 1, 1, 12, 1.0);
    free(j);
    j = write_jpeg(rgb, w, h, 3, JCS_RGB, JCS_UNKNOWN, 95, 0, 1, &n);
    check_decoded("baseline 4:4:4", j, n, rgb, w, h, 3, 3, 12, 1.0);
    free(j);
    j = write_jpeg(rgb, w, h, 3, JCS_RGB, JCS_UNKNOWN, 95, 1, 0, &n);
    check_decoded("progressive 4:2:0", j, n, rgb, w, h, 3, 3, 40, 4.0);
    free(j);
    j = write_jpeg(gray, w, h, 1, JCS_GRAYSCALE, JCS_UNKNOWN, 95, 0, 0, &n);
    check_decoded("grayscale", j, n, gray, w, h, 1, 1, 6, 1.0);
    check_decoded("grayscale -> RGB", j, n, gray3, w, h, 3, 3, 6, 1.0);
    free(j);
    j = write_jpeg(gray, w, h, 1, JCS_GRAYSCALE, JCS_UNKNOWN, 95, 1, 0, &n);
    check_decoded("grayscale progressive", j, n, gray, w, h, 1, 1, 6, 1.0);
    free(j);

    /* CMYK as Photoshop writes it (Adobe marker, inverted inks): stored (R, G, B, 255) means
     * no ink where the image is white, so it decodes to about R, G, B; stored K = 200 darkens
     * every channel to about v * 200 / 255. */
    unsigned char *cmyk = vil_malloc((size_t)w * h * 4);
    unsigned char *want = vil_malloc((size_t)w * h * 3);
    for (int pass = 0; pass < 3; pass++) {
        int k = pass == 0 ? 255 : 200;
        for (int i = 0; i < w * h; i++) {
            for (int ch = 0; ch < 3; ch++) {
                cmyk[4 * i + ch] = rgb[3 * i + ch];
                want[3 * i + ch] = (unsigned char)((rgb[3 * i + ch] * k + 127) / 255);
            }
            cmyk[4 * i + 3] = (unsigned char)k;
        }
        /* pass 2 stores YCCK, which libjpeg converts back to CMYK */
        j = write_jpeg(cmyk, w, h, 4, JCS_CMYK, pass == 2 ? JCS_YCCK : JCS_UNKNOWN, 95, 0, 1, &n);
        const char *nm = pass == 0 ? "CMYK (K none)" : pass == 1 ? "CMYK (K 200)" : "YCCK (K 200)";
        check_decoded(nm, j, n, want, w, h, 3, 3, pass == 2 ? 16 : 8, 1.5);
        free(j);
    }
    free(cmyk);
    free(want);
    free(rgb);
    free(gray);
    free(gray3);
}

/* ---- files written by PIL, against PIL's decode: same libjpeg-turbo, so bit-exact ---- */

static void test_pil_files(void) {
    const char *names[] = {"rgb420", "rgb444", "prog", "gray", "cmyk"};
    for (int i = 0; i < 5; i++) {
        char fn[64];
        size_t n, nr;
        snprintf(fn, sizeof fn, "pil_%s.jpg", names[i]);
        unsigned char *buf = read_data(fn, &n);
        if (!buf) continue;
        for (int c = 1; c <= 3; c += 2) {
            snprintf(fn, sizeof fn, "pil_%s_%s.raw", names[i], c == 3 ? "rgb" : "l");
            unsigned char *ref = read_data(fn, &nr);
            if (!ref) continue;
            char label[64];
            snprintf(label, sizeof label, "PIL %s channels=%d", names[i], c);
            check_decoded(label, buf, n, ref, 40, 30, c, c, 0, 0.0);
            free(ref);
        }
        free(buf);
    }
    /* a PNG named .JPEG, loaded by path: the bytes decide */
    VilImage im;
    int rc = vil_image_load(DATA "png_named.JPEG", 3, &im);
    T_CHECK(rc == 0, "PNG named .JPEG");
    size_t nr;
    unsigned char *ref = read_data("png_named_rgb.raw", &nr);
    if (rc == 0 && ref) {
        T_CHECK(im.w == 40 && im.h == 30 && im.c == 3, "PNG size %dx%dx%d", im.w, im.h, im.c);
        T_CHECK(nr == 3600 && memcmp(im.px, ref, nr) == 0, "PNG pixels differ from the source");
        int w, h;
        VilFormat f;
        size_t n;
        unsigned char *buf = read_data("png_named.JPEG", &n);
        T_CHECK(buf && vil_image_info(buf, n, &w, &h, &f) == 0 && w == 40 && h == 30 &&
                    f == VIL_FORMAT_PNG,
                "PNG info");
        free(buf);
    }
    free(ref);
    vil_image_free(&im);
}

/* ---- broken files ---- */

/* vil_image_decode with its message in cap */
static int decode_captured(const unsigned char *buf, size_t n, int channels, VilImage *im,
                           VilErrCapture *cap) {
    vil_error_capture(cap);
    int rc = vil_image_decode(buf, n, channels, im);
    vil_error_release(cap);
    return rc;
}

static int decode_fails(const unsigned char *buf, size_t n, const char *what) {
    VilImage im;
    VilErrCapture cap;
    int rc = decode_captured(buf, n, 3, &im, &cap);
    T_CHECK(rc != 0, "%s: decode succeeded but should fail", what);
    T_CHECK(rc == 0 || (cap.msg[0] != 0 && im.px == NULL), "%s: no message or stray buffer", what);
    if (rc == 0) vil_image_free(&im);
    else printf("ok   %-48s -> \"%s\"\n", what, cap.msg);
    return rc != 0;
}

static void test_broken(void) {
    const int w = 64, h = 48;
    unsigned char *rgb = smooth_rgb(w, h);
    unsigned long n, np;
    unsigned char *j = write_jpeg(rgb, w, h, 3, JCS_RGB, JCS_UNKNOWN, 90, 0, 0, &n);
    unsigned char *p = write_jpeg(rgb, w, h, 3, JCS_RGB, JCS_UNKNOWN, 90, 1, 0, &np);

    decode_fails(j, 0, "zero-byte file");
    decode_fails(NULL, 0, "NULL buffer");
    decode_fails(j, n / 2, "baseline truncated at 50%");
    decode_fails(j, n * 9 / 10, "baseline truncated at 90%");
    decode_fails(j, 200, "baseline truncated inside the header");
    decode_fails(j, 3, "JPEG magic only");
    decode_fails(p, np / 2, "progressive truncated at 50%");
    decode_fails(p, np - 40, "progressive truncated in the last scan");

    /* garbage, alone and behind each magic number */
    VilRng r;
    vil_rng_seed(&r, 7);
    unsigned char g[4096];
    for (size_t i = 0; i < sizeof g; i++) g[i] = (unsigned char)vil_rng_u64(&r);
    decode_fails(g, sizeof g, "random garbage");
    memcpy(g, "\xFF\xD8\xFF", 3);
    decode_fails(g, sizeof g, "garbage after a JPEG magic");
    memcpy(g, "\x89PNG\r\n\x1a\n", 8);
    decode_fails(g, sizeof g, "garbage after a PNG magic");
    memcpy(g, "GIF89a", 6);
    decode_fails(g, sizeof g, "garbage after a GIF magic");

    /* decompression bomb: the SOF0 marker claims 65000 x 65000 */
    unsigned char *bomb = vil_malloc(n);
    memcpy(bomb, j, n);
    int patched = 0;
    for (unsigned long i = 2; i + 9 < n; i++)
        if (bomb[i] == 0xFF && bomb[i + 1] == 0xC0) {
            bomb[i + 5] = 65000 >> 8; bomb[i + 6] = 65000 & 255; /* height */
            bomb[i + 7] = 65000 >> 8; bomb[i + 8] = 65000 & 255; /* width */
            patched = 1;
            break;
        }
    T_CHECK(patched, "no SOF0 marker found to patch");
    VilImage im;
    VilErrCapture cap;
    double t0 = vil_now();
    int rc = decode_captured(bomb, n, 3, &im, &cap);
    T_CHECK(rc != 0 && strstr(cap.msg, "limit"),
            "JPEG bomb not refused by the pixel limit: rc %d \"%s\"", rc, cap.msg);
    T_CHECK(vil_now() - t0 < 0.5, "JPEG bomb took %.2f s: allocated before checking?", vil_now() - t0);
    if (rc == 0) vil_image_free(&im);
    free(bomb);

    /* PNG bomb: IHDR claims 15000 x 15000, over our limit but under stb's own 2^30-byte one
     * (stb does not check CRCs) */
    size_t pn;
    unsigned char *png = read_data("png_named.JPEG", &pn);
    if (png) {
        png[16] = 0; png[17] = 0; png[18] = 15000 >> 8; png[19] = 15000 & 255;
        png[20] = 0; png[21] = 0; png[22] = 15000 >> 8; png[23] = 15000 & 255;
        rc = decode_captured(png, pn, 3, &im, &cap);
        T_CHECK(rc != 0 && strstr(cap.msg, "limit"), "PNG bomb not refused: rc %d \"%s\"", rc,
                cap.msg);
        if (rc == 0) vil_image_free(&im);
        free(png);
    }

    /* corrupt entropy-coded data: must not crash; libjpeg decodes it with warnings */
    unsigned char *cor = vil_malloc(n);
    int ok = 0, bad = 0;
    for (int t = 0; t < 50; t++) {
        memcpy(cor, j, n);
        for (int k = 0; k < 8; k++) cor[n / 3 + vil_rng_below(&r, (uint32_t)(n / 2))] ^= (unsigned char)(1 + vil_rng_below(&r, 255));
        if (decode_captured(cor, n, 3, &im, &cap) == 0) {
            ok++;
            vil_image_free(&im);
        } else {
            bad++;
        }
    }
    T_CHECK(ok + bad == 50, "corrupt files");
    printf("ok   corrupted entropy data: %d decoded, %d refused, none crashed\n", ok, bad);

    /* info on the good file, and channels validation */
    int iw, ih;
    VilFormat f;
    T_CHECK(vil_image_info(j, n, &iw, &ih, &f) == 0 && iw == w && ih == h && f == VIL_FORMAT_JPEG,
            "vil_image_info on a JPEG");
    T_CHECK(decode_captured(j, n, 2, &im, &cap) != 0, "channels = 2 must be refused");
    vil_error_capture(&cap);
    rc = vil_image_load("tests/data/does-not-exist.jpg", 3, &im);
    vil_error_release(&cap);
    T_CHECK(rc != 0 && strstr(cap.msg, "does-not-exist"),
            "missing file must fail with its path in the message");
    free(cor);
    free(j);
    free(p);
    free(rgb);
}

/* ---- the --max-pixels limit, checked on the header ---- */

/* decode must fail with a message holding every one of want[] (NULL-terminated) */
static void refused_with(const unsigned char *buf, size_t n, const char *what, const char *const *want) {
    VilImage im;
    VilErrCapture cap;
    int rc = decode_captured(buf, n, 3, &im, &cap);
    int words = 1;
    for (int k = 0; want[k]; k++) words &= strstr(cap.msg, want[k]) != NULL;
    T_CHECK(rc != 0 && words && !strstr(cap.msg, "unknown image type"), "%s: rc %d, message '%s'",
            what, rc, cap.msg);
    if (rc == 0) vil_image_free(&im);
    printf("ok   %-32s -> %s\n", what, cap.msg);
}

static void test_pixel_limit(void) {
    T_CHECK(vil_image_max_pixels() == (64LL << 20), "default limit %lld", vil_image_max_pixels());
    VilErrCapture cap;
    vil_error_capture(&cap);
    int r0 = vil_image_set_max_pixels(0), r1 = vil_image_set_max_pixels(VIL_IMAGE_MAX_PIXELS + 1);
    vil_error_release(&cap);
    T_CHECK(r0 == VIL_EUSAGE && r1 == VIL_EUSAGE && strstr(cap.msg, "--max-pixels must be in 1..178956970"),
            "limits outside 1..%lld are usage errors: %s", VIL_IMAGE_MAX_PIXELS, cap.msg);

    /* a 40x30 JPEG's SOF0 claiming 13000x13000: refused before anything is allocated */
    int w = 40, h = 30;
    unsigned char *px = smooth_rgb(w, h);
    unsigned long n;
    unsigned char *j = write_jpeg(px, w, h, 3, JCS_RGB, JCS_UNKNOWN, 90, 0, 0, &n);
    unsigned char *big = vil_malloc(n);
    memcpy(big, j, n);
    for (size_t i = 2; i + 9 < n; i++)
        if (big[i] == 0xFF && big[i + 1] == 0xC0) {
            big[i + 5] = 13000 >> 8, big[i + 6] = 13000 & 255, big[i + 7] = 13000 >> 8, big[i + 8] = 13000 & 255;
            break;
        }
    int iw = 0, ih = 0;
    T_CHECK(vil_image_info(big, n, &iw, &ih, NULL) == 0 && iw == 13000 && ih == 13000,
            "vil_image_info reads the claimed 13000x13000");
    refused_with(big, n, "JPEG claiming 13000x13000",
                 (const char *const[]){"JPEG is 13000x13000 = 169000000 pixels", "limit of 67108864",
                                       "--max-pixels", NULL});
    /* the real 40x30 (1,200 pixels) against 1,199 and 1,200 */
    T_CHECK(vil_image_set_max_pixels(1199) == 0, "set 1199");
    refused_with(j, n, "40x30 JPEG, limit 1199",
                 (const char *const[]){"JPEG is 40x30 = 1200 pixels", "limit of 1199", NULL});
    T_CHECK(vil_image_set_max_pixels(1200) == 0, "set 1200");
    VilImage im;
    T_CHECK(vil_image_decode(j, n, 3, &im) == 0 && im.w == 40, "40x30 JPEG, limit 1200: decoded");
    vil_image_free(&im);
    T_CHECK(vil_image_set_max_pixels(VIL_IMAGE_DEFAULT_MAX_PIXELS) == 0, "default again");

    /* headers stb_image gives up on ("unknown image type" after trying every format) */
    unsigned char png[33] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R',
                             0, 0, 0xFF, 0xFF, 0, 0, 0xFF, 0xFF, 8, 2, 0, 0, 0};
    refused_with(png, sizeof png, "PNG claiming 65535x65535",
                 (const char *const[]){"PNG is 65535x65535 = 4294836225 pixels", "--max-pixels", NULL});
    unsigned char gif[32] = {'G', 'I', 'F', '8', '9', 'a', 0xFF, 0xFF, 0xFF, 0xFF, 0xF7};
    refused_with(gif, sizeof gif, "GIF claiming 65535x65535", (const char *const[]){"GIF is 65535x65535", NULL});
    unsigned char bmp[54] = {'B', 'M', [14] = 40, [18] = 0x10, [19] = 0x27, [22] = 0xF0, [23] = 0xD8,
                             [24] = 0xFF, [25] = 0xFF, [26] = 1, [28] = 24}; /* 10000 x -10000 */
    refused_with(bmp, sizeof bmp, "BMP claiming 10000x10000 top-down",
                 (const char *const[]){"BMP is 10000x10000", NULL});
    free(big);
    free(j);
    free(px);
}

int main(void) {
    test_own_jpegs();
    test_pil_files();
    test_broken();
    test_pixel_limit();
    return t_finish();
}
