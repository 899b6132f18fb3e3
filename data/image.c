/* image.c: image decoding. JPEG goes through libjpeg-turbo with a setjmp error manager (a
 * corrupt file returns an error, never exits) and an optional region + DCT-scale decode;
 * everything else goes through stb_image. Size limits are checked on the header. */
#include "data/image.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <jerror.h>
#include <stb_image.h>

#include "vil/common.h"

/* the --max-pixels limit; written before decoding starts, read by the loader's threads */
static long long g_max_pixels =
    VIL_IMAGE_DEFAULT_MAX_PIXELS < VIL_IMAGE_MAX_PIXELS ? VIL_IMAGE_DEFAULT_MAX_PIXELS : VIL_IMAGE_MAX_PIXELS;

int vil_image_set_max_pixels(long long n) {
    if (n < 1 || n > VIL_IMAGE_MAX_PIXELS) {
        vil_error("--max-pixels must be in 1..%lld (the default: %lld), got %lld", VIL_IMAGE_MAX_PIXELS,
                  VIL_IMAGE_DEFAULT_MAX_PIXELS < VIL_IMAGE_MAX_PIXELS ? VIL_IMAGE_DEFAULT_MAX_PIXELS
                                                                     : VIL_IMAGE_MAX_PIXELS, n);
        return VIL_EUSAGE;
    }
    __atomic_store_n(&g_max_pixels, n, __ATOMIC_RELAXED);
    return 0;
}

long long vil_image_max_pixels(void) { return __atomic_load_n(&g_max_pixels, __ATOMIC_RELAXED); }

int vil_image_check_size(const char *what, long long w, long long h) {
    long long lim = vil_image_max_pixels();
    if (w <= 0 || h <= 0) {
        vil_error("%s has an empty size %lldx%lld", what, w, h);
        return -1;
    }
    if (w > lim || h > lim || w * h > lim) { /* past the first two tests the product fits */
        unsigned long long px = (unsigned long long)w * (unsigned long long)h; /* w, h < 2^32 */
        if (lim < VIL_IMAGE_MAX_PIXELS)
            vil_error("%s is %lldx%lld = %llu pixels, over the limit of %lld pixels (--max-pixels N "
                      "raises it, up to %lld)", what, w, h, px, lim, VIL_IMAGE_MAX_PIXELS);
        else
            vil_error("%s is %lldx%lld = %llu pixels, over the limit of %lld pixels (the most "
                      "--max-pixels allows)", what, w, h, px, lim);
        return -1;
    }
    return 0;
}

void vil_image_free(VilImage *im) {
    if (!im) return;
    free(im->px);
    im->px = NULL;
    im->w = im->h = im->c = 0;
}

int vil_image_alloc(VilImage *im, int w, int h, int c) {
    im->w = w;
    im->h = h;
    im->c = c;
    im->px = NULL;
    if (w <= 0 || h <= 0 || (c != 1 && c != 3)) return -1;
    if ((long long)w * h > VIL_IMAGE_MAX_PIXELS) return -1;
    if (!(im->px = vil_try_malloc((size_t)w * h * c))) return -1;
    return 0;
}

VilFormat vil_image_format(const unsigned char *buf, size_t n) {
    if (!buf) return VIL_FORMAT_UNKNOWN;
    if (n >= 3 && buf[0] == 0xFF && buf[1] == 0xD8 && buf[2] == 0xFF) return VIL_FORMAT_JPEG;
    if (n >= 8 && memcmp(buf, "\x89PNG\r\n\x1a\n", 8) == 0) return VIL_FORMAT_PNG;
    /* Only formats with a real magic number go to stb: its TGA detection is a heuristic that
     * random bytes can satisfy. */
    if (n >= 6 && (memcmp(buf, "GIF87a", 6) == 0 || memcmp(buf, "GIF89a", 6) == 0))
        return VIL_FORMAT_OTHER;
    if (n >= 2 && buf[0] == 'B' && buf[1] == 'M') return VIL_FORMAT_OTHER;
    if (n >= 2 && buf[0] == 'P' && (buf[1] == '5' || buf[1] == '6')) return VIL_FORMAT_OTHER;
    if (n >= 4 && memcmp(buf, "8BPS", 4) == 0) return VIL_FORMAT_OTHER;
    if (n >= 10 && (memcmp(buf, "#?RADIANCE", 10) == 0 || memcmp(buf, "#?RGBE", 6) == 0))
        return VIL_FORMAT_OTHER;
    return VIL_FORMAT_UNKNOWN;
}

void vil_rgb_to_gray(unsigned char *dst, const unsigned char *src, size_t n) {
    /* Pillow's L24: weights sum to 65536, +0x8000 rounds half up */
    for (size_t i = 0; i < n; i++) {
        uint32_t v = src[3 * i] * 19595u + src[3 * i + 1] * 38470u + src[3 * i + 2] * 7471u + 0x8000u;
        dst[i] = (unsigned char)(v >> 16);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* JPEG                                                                                        */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} JpegErr;

static void jpeg_error_exit_cb(j_common_ptr cinfo) {
    JpegErr *e = (JpegErr *)cinfo->err;
    cinfo->err->format_message(cinfo, e->msg);
    longjmp(e->jb, 1);
}

static void jpeg_emit_message_cb(j_common_ptr cinfo, int level) {
    JpegErr *e = (JpegErr *)cinfo->err;
    if (level >= 0) return; /* trace messages */
    /* Warnings: a premature end of data means the rest of the image would be made-up gray,
     * which PIL reports as "image file is truncated". We never call jpeg_finish_decompress,
     * so the source runs dry only while pixels are still owed. Other warnings (extraneous
     * bytes, a bad restart marker) leave a complete image and PIL accepts them, so do we. */
    if (cinfo->err->msg_code == JWRN_JPEG_EOF) {
        snprintf(e->msg, sizeof e->msg, "truncated JPEG (premature end of data)");
        longjmp(e->jb, 1);
    }
    cinfo->err->num_warnings++;
}

static void jpeg_progress_cb(j_common_ptr cinfo) {
    j_decompress_ptr d = (j_decompress_ptr)cinfo;
    if (d->is_decompressor && d->input_scan_number > VIL_JPEG_MAX_SCANS) {
        JpegErr *e = (JpegErr *)cinfo->err;
        snprintf(e->msg, sizeof e->msg, "JPEG has more than %d scans", VIL_JPEG_MAX_SCANS);
        longjmp(e->jb, 1);
    }
}

/* The Adobe convention PIL assumes for every CMYK JPEG (rawmode "CMYK;I"): stored values are
 * inverted inks. PIL's cmyk2rgb then computes nk - nk * c / 255 with its MULDIV255 rounding. */
static inline unsigned char cmyk_channel(unsigned stored_c, unsigned stored_k) {
    unsigned c = 255 - stored_c, nk = stored_k;
    unsigned t = c * nk + 128;
    unsigned m = ((t >> 8) + t) >> 8;
    int v = (int)nk - (int)m;
    return (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Convert one decoded scanline of `ncomp` components into the output's layout. */
static void jpeg_convert_row(unsigned char *dst, const unsigned char *src, int w, int ncomp,
                             int channels) {
    if (ncomp == channels) {
        memcpy(dst, src, (size_t)w * channels);
    } else if (ncomp == 1) { /* gray -> RGB */
        for (int x = 0; x < w; x++) dst[3 * x] = dst[3 * x + 1] = dst[3 * x + 2] = src[x];
    } else if (ncomp == 3) { /* RGB -> gray */
        vil_rgb_to_gray(dst, src, (size_t)w);
    } else { /* CMYK -> RGB (-> gray) */
        for (int x = 0; x < w; x++) {
            const unsigned char *p = src + 4 * x;
            unsigned char rgb[3] = {cmyk_channel(p[0], p[3]), cmyk_channel(p[1], p[3]),
                                    cmyk_channel(p[2], p[3])};
            if (channels == 3) memcpy(dst + 3 * x, rgb, 3);
            else vil_rgb_to_gray(dst + x, rgb, 1);
        }
    }
}

/* bytes allocated past the last row libjpeg writes */
#define JPEG_ROW_SLACK 64

typedef struct {
    struct jpeg_decompress_struct cinfo;
    JpegErr jerr;
    struct jpeg_progress_mgr progress;
} JpegDec;

static void jpeg_open(JpegDec *d, const unsigned char *buf, size_t n) {
    d->cinfo.err = jpeg_std_error(&d->jerr.pub);
    d->jerr.pub.error_exit = jpeg_error_exit_cb;
    d->jerr.pub.emit_message = jpeg_emit_message_cb;
    d->jerr.msg[0] = 0;
    jpeg_create_decompress(&d->cinfo);
    d->progress.progress_monitor = jpeg_progress_cb;
    d->cinfo.progress = &d->progress;
    jpeg_mem_src(&d->cinfo, buf, (unsigned long)n);
}

/* What one decode asks for and what it allocates. Lives on the heap and is only read, never
 * reassigned, by the function that calls setjmp, so nothing is clobbered by longjmp; the
 * error path frees what the body had allocated. */
typedef struct {
    int channels, x0, y0, cw, ch; /* cw = ch = 0: the whole image */
    int scale_num, flags;         /* DCT scale scale_num / 8; VIL_JPEG_* flags */
    unsigned char *row;
    VilImage img;
    int rx, ry;
} JpegJob;

/* Everything that can longjmp. Returns 0, or -1 reported (libjpeg's errors: by the caller). */
static __attribute__((noinline)) int jpeg_decode_body(JpegDec *d, JpegJob *j) {
    struct jpeg_decompress_struct *ci = &d->cinfo;
    jpeg_read_header(ci, TRUE);
    /* on the header, before libjpeg allocates anything the size of the image */
    if (vil_image_check_size("JPEG", ci->image_width, ci->image_height) != 0) return -1;
    int ncomp;
    switch (ci->jpeg_color_space) {
    case JCS_GRAYSCALE: ci->out_color_space = JCS_GRAYSCALE; ncomp = 1; break;
    case JCS_CMYK:
    case JCS_YCCK: ci->out_color_space = JCS_CMYK; ncomp = 4; break;
    default: ci->out_color_space = JCS_RGB; ncomp = 3; break;
    }
    const int M = j->scale_num >= 1 && j->scale_num <= 16 ? j->scale_num : 8;
    ci->scale_num = (unsigned)M;
    ci->scale_denom = 8;
    /* PIL's defaults (ISLOW, fancy upsampling), so full decodes are bit-identical to PIL's;
     * the fast training decode may change both */
    ci->dct_method = (j->flags & VIL_JPEG_IFAST) ? JDCT_IFAST : JDCT_ISLOW;
    ci->do_fancy_upsampling = (j->flags & VIL_JPEG_MERGED) ? FALSE : TRUE;
    jpeg_start_decompress(ci);
    if ((int)ci->output_components != ncomp) {
        vil_error("JPEG: unexpected %d output components", ci->output_components);
        return -1;
    }
    int W = (int)ci->output_width, H = (int)ci->output_height;
    int sx0 = 0, sy0 = 0, sx1 = W, sy1 = H; /* wanted region in scaled coordinates */
    if (j->cw > 0 && j->ch > 0) {
        /* pixel i of the scaled image covers [8 i / M, 8 (i + 1) / M) of the full one: the
         * scaled pixels that touch the region, rounded outward */
        sx0 = (int)((long long)j->x0 * M / 8);
        sy0 = (int)((long long)j->y0 * M / 8);
        sx1 = (int)(((long long)(j->x0 + j->cw) * M + 7) / 8);
        sy1 = (int)(((long long)(j->y0 + j->ch) * M + 7) / 8);
        if (sx0 < 0) sx0 = 0;
        if (sy0 < 0) sy0 = 0;
        if (sx1 > W) sx1 = W;
        if (sy1 > H) sy1 = H;
        if (sx0 >= sx1 || sy0 >= sy1) {
            vil_error("JPEG region %d,%d %dx%d outside the %dx%d image", j->x0, j->y0,
                      j->cw, j->ch, (int)ci->image_width, (int)ci->image_height);
            return -1;
        }
    }
    if (j->cw > 0 && j->ch > 0 && !(j->flags & VIL_JPEG_MERGED)) {
        /* One iMCU column of margin on each side: at the left and right edges of a cropped
         * region, libjpeg-turbo's fancy (smoothing) chroma upsampling lacks its neighbour
         * samples and the border pixels differ from a full decode by a few levels. With the
         * margin the region's own pixels are bit-identical to the full decode (tested).
         * jpeg_skip_scanlines keeps the vertical context itself: no margin needed there.
         * Merged (non-fancy) upsampling uses no neighbour samples: no margin. */
#if JPEG_LIB_VERSION >= 70 /* the jpeg7/8 API (Ubuntu's libjpeg-turbo) splits it by axis */
        int mx = ci->max_h_samp_factor * ci->min_DCT_h_scaled_size;
#else
        int mx = ci->max_h_samp_factor * ci->min_DCT_scaled_size;
#endif
        sx0 = sx0 - mx < 0 ? 0 : sx0 - mx;
        sx1 = sx1 + mx > W ? W : sx1 + mx;
    }
    JDIMENSION xoff = (JDIMENSION)sx0, xw = (JDIMENSION)(sx1 - sx0);
    if (xoff != 0 || xw != (JDIMENSION)W) {
        /* widens the region to iMCU column boundaries and tells us where it starts */
        jpeg_crop_scanline(ci, &xoff, &xw);
    }
    int ow = (int)xw, oh = sy1 - sy0;
    if (ow <= 0 || oh <= 0 || (long long)ow * oh > VIL_IMAGE_MAX_PIXELS) {
        vil_error("JPEG: bad output size %dx%d", ow, oh);
        return -1;
    }
    /* Rows that need no conversion are decoded straight into the image (the slack at the
     * end is for SIMD stores that may run past a row's last sample); others through a row
     * buffer. */
    const int direct = ncomp == j->channels;
    const size_t out_row = (size_t)ow * j->channels;
    j->img.w = ow;
    j->img.h = oh;
    j->img.c = j->channels;
    /* sizes the file's header sets (within VIL_IMAGE_MAX_PIXELS) */
    j->img.px = vil_try_malloc(out_row * oh + JPEG_ROW_SLACK);
    if (!j->img.px) return -1;
    if (!direct && !(j->row = vil_try_malloc((size_t)ci->output_width * ncomp + JPEG_ROW_SLACK))) return -1;
    if (sy0 > 0 && (int)jpeg_skip_scanlines(ci, (JDIMENSION)sy0) != sy0) {
        vil_error("JPEG: could not skip %d scanlines", sy0);
        return -1;
    }
    for (int y = 0; y < oh; y++) {
        unsigned char *dst = j->img.px + (size_t)y * out_row;
        JSAMPROW rows[1] = {direct ? dst : j->row};
        if (jpeg_read_scanlines(ci, rows, 1) != 1) {
            vil_error("JPEG: read_scanlines returned no row at %d", y + sy0);
            return -1;
        }
        if (!direct) jpeg_convert_row(dst, j->row, ow, ncomp, j->channels);
    }
    /* No jpeg_finish_decompress: every pixel is in hand; trailing bytes after the last scan
     * are not our concern. jpeg_destroy_decompress aborts the rest. */
    j->rx = (int)xoff;
    j->ry = sy0;
    return 0;
}

/* Decode a JPEG: the whole image (cw = ch = 0), or a region with DCT scaling. */
static int jpeg_decode(const unsigned char *buf, size_t n, int channels, int x0, int y0, int cw,
                       int ch, int scale_num, int flags, VilImage *out, int *rx, int *ry) {
    JpegDec *d = vil_calloc(1, sizeof *d);
    JpegJob *j = vil_calloc(1, sizeof *j);
    j->channels = channels;
    j->x0 = x0;
    j->y0 = y0;
    j->cw = cw;
    j->ch = ch;
    j->scale_num = scale_num;
    j->flags = flags;
    jpeg_open(d, buf, n);
    int rc;
    if (setjmp(d->jerr.jb)) {
        vil_error("JPEG decode failed: %s", d->jerr.msg);
        rc = -1;
    } else {
        rc = jpeg_decode_body(d, j);
    }
    jpeg_destroy_decompress(&d->cinfo);
    if (rc == 0) {
        *out = j->img;
        if (rx) *rx = j->rx;
        if (ry) *ry = j->ry;
    } else {
        free(j->img.px);
    }
    free(j->row);
    free(j);
    free(d);
    return rc;
}

int vil_jpeg_decode_region_scaled(const unsigned char *buf, size_t n, int channels, int x0, int y0,
                                  int cw, int ch, int scale_num, int flags, VilImage *out, int *rx,
                                  int *ry) {
    memset(out, 0, sizeof *out);
    if (channels != 1 && channels != 3) {
        vil_error("channels must be 1 or 3, not %d", channels);
        return -1;
    }
    if (scale_num < 1 || scale_num > 16) {
        vil_error("JPEG scale %d/8 outside 1/8 .. 16/8", scale_num);
        return -1;
    }
    if (vil_image_format(buf, n) != VIL_FORMAT_JPEG) {
        vil_error("not a JPEG");
        return -1;
    }
    if (cw <= 0 || ch <= 0) {
        vil_error("empty JPEG region %dx%d", cw, ch);
        return -1;
    }
    return jpeg_decode(buf, n, channels, x0, y0, cw, ch, scale_num, flags, out, rx, ry);
}

int vil_jpeg_decode_region(const unsigned char *buf, size_t n, int channels, int x0, int y0, int cw,
                           int ch, int denom, VilImage *out, int *rx, int *ry) {
    /* 1/d is d/8 of 8: libjpeg-turbo derives the same output size and IDCT from either */
    if (denom != 1 && denom != 2 && denom != 4 && denom != 8) denom = 1;
    return vil_jpeg_decode_region_scaled(buf, n, channels, x0, y0, cw, ch, 8 / denom, 0, out, rx,
                                         ry);
}

static int jpeg_info(const unsigned char *buf, size_t n, int *w, int *h) {
    JpegDec *d = vil_calloc(1, sizeof *d);
    int rc = -1;
    jpeg_open(d, buf, n);
    if (setjmp(d->jerr.jb)) {
        vil_error("JPEG header: %s", d->jerr.msg);
        goto done;
    }
    jpeg_read_header(&d->cinfo, TRUE);
    *w = (int)d->cinfo.image_width;
    *h = (int)d->cinfo.image_height;
    rc = 0;
done:
    jpeg_destroy_decompress(&d->cinfo);
    free(d);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* stb_image                                                                                   */

static uint32_t rd_be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static uint32_t rd_le16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static int32_t rd_le32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* The format's name and, where its header holds them at fixed places (PNG, GIF, BMP, PSD), the
 * size it claims: 1 when *w, *h were read. stb_image's own header check gives up on sizes it
 * finds too large, and then stbi_info_from_memory goes on to try the other formats, leaving
 * "unknown image type" as its reason: reading the size here first lets the message say it. */
static int stb_header_size(const unsigned char *buf, size_t n, const char **name, long long *w,
                           long long *h) {
    *name = "image";
    if (n >= 8 && memcmp(buf, "\x89PNG\r\n\x1a\n", 8) == 0) {
        *name = "PNG";
        if (n < 24 || memcmp(buf + 12, "IHDR", 4) != 0) return 0;
        *w = rd_be32(buf + 16), *h = rd_be32(buf + 20);
        return 1;
    }
    if (n >= 6 && memcmp(buf, "GIF8", 4) == 0) {
        *name = "GIF";
        if (n < 10) return 0;
        *w = rd_le16(buf + 6), *h = rd_le16(buf + 8);
        return 1;
    }
    if (n >= 2 && buf[0] == 'B' && buf[1] == 'M') {
        *name = "BMP";
        if (n < 26) return 0;
        if (rd_le32(buf + 14) == 12) { /* OS/2 BITMAPCOREHEADER: 16-bit sizes */
            *w = rd_le16(buf + 18), *h = rd_le16(buf + 20);
        } else {
            long long hh = rd_le32(buf + 22); /* negative: top-down rows */
            *w = rd_le32(buf + 18), *h = hh < 0 ? -hh : hh;
        }
        return 1;
    }
    if (n >= 4 && memcmp(buf, "8BPS", 4) == 0) {
        *name = "PSD";
        if (n < 26) return 0;
        *h = rd_be32(buf + 14), *w = rd_be32(buf + 18);
        return 1;
    }
    if (n >= 2 && buf[0] == 'P') *name = "PNM";
    else if (n >= 2 && buf[0] == '#') *name = "HDR";
    return 0;
}

static int stb_decode(const unsigned char *buf, size_t n, int channels, VilImage *out) {
    int w, h, comp;
    if (n > INT32_MAX) {
        vil_error("image file too large (%zu bytes)", n);
        return -1;
    }
    const char *name;
    long long hw, hh;
    if (stb_header_size(buf, n, &name, &hw, &hh) && vil_image_check_size(name, hw, hh) != 0)
        return -1;
    if (!stbi_info_from_memory(buf, (int)n, &w, &h, &comp)) {
        /* stb's reason is that of the last format it tried: rarely this file's */
        vil_error("the %s header is corrupt or of an unsupported kind (stb_image: %s)", name,
                  stbi_failure_reason());
        return -1;
    }
    if (vil_image_check_size(name, w, h) != 0) return -1;
    /* Ask stb for gray only when the file is gray: its own RGB -> Y weights are not PIL's. */
    int want = (channels == 1 && comp <= 2) ? 1 : 3;
    int w2, h2, c2;
    unsigned char *px = stbi_load_from_memory(buf, (int)n, &w2, &h2, &c2, want);
    if (!px) {
        vil_error("image decode failed: %s", stbi_failure_reason());
        return -1;
    }
    if (w2 != w || h2 != h) {
        stbi_image_free(px);
        vil_error("image size changed between header and decode");
        return -1;
    }
    if (vil_image_alloc(out, w, h, channels) != 0) { /* the size is checked: no memory */
        stbi_image_free(px);
        vil_error("no memory for a %dx%d image", w, h);
        return -1;
    }
    if (want == channels) memcpy(out->px, px, (size_t)w * h * channels);
    else vil_rgb_to_gray(out->px, px, (size_t)w * h);
    stbi_image_free(px);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */

int vil_image_info(const unsigned char *buf, size_t n, int *w, int *h, VilFormat *fmt) {
    VilFormat f = vil_image_format(buf, n);
    if (fmt) *fmt = f;
    if (f == VIL_FORMAT_UNKNOWN) {
        vil_error("%s", n == 0 ? "empty file" : "unknown image format");
        return -1;
    }
    if (f == VIL_FORMAT_JPEG) return jpeg_info(buf, n, w, h);
    int comp;
    if (n > INT32_MAX || !stbi_info_from_memory(buf, (int)n, w, h, &comp)) {
        vil_error("image header: %s", n > INT32_MAX ? "file too large" : stbi_failure_reason());
        return -1;
    }
    return 0;
}

int vil_image_decode(const unsigned char *buf, size_t n, int channels, VilImage *out) {
    memset(out, 0, sizeof *out);
    if (channels != 1 && channels != 3) {
        vil_error("channels must be 1 or 3, not %d", channels);
        return -1;
    }
    switch (vil_image_format(buf, n)) {
    case VIL_FORMAT_JPEG:
        return jpeg_decode(buf, n, channels, 0, 0, 0, 0, 8, 0, out, NULL, NULL);
    case VIL_FORMAT_PNG:
    case VIL_FORMAT_OTHER: return stb_decode(buf, n, channels, out);
    default:
        vil_error("%s", n == 0 ? "empty file"
                               : "unknown image format (not JPEG, PNG, GIF, BMP, PNM, PSD, HDR)");
        return -1;
    }
}

int vil_read_regular(const char *path, unsigned char **data, size_t *cap, size_t *size) {
    /* a FIFO would block a plain open until a writer came (a dataset's FIFO hung the loader's
     * worker and the run) */
    int fd = vil_open_regular_unnamed(path);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        vil_error("cannot stat: %s", strerror(errno));
        close(fd);
        return -1;
    }
    if (st.st_size == 0) {
        vil_error("empty file (0 bytes)");
        close(fd);
        return -1;
    }
    size_t n = (size_t)st.st_size, got = 0;
    if (*cap < n + 1) {
        size_t c = *cap ? *cap : 4096;
        while (c < n + 1 && c <= SIZE_MAX / 2) c *= 2;
        unsigned char *d = c >= n + 1 ? vil_try_realloc(*data, c) : NULL; /* the file's size */
        if (!d) {
            vil_error("no memory to read the file's %zu bytes", n);
            close(fd);
            return -1;
        }
        *data = d;
        *cap = c;
    }
    while (got < n) {
        ssize_t r = read(fd, *data + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            vil_error("read error after %zu of %zu bytes: %s", got, n, strerror(errno));
            close(fd);
            return -1;
        }
        if (r == 0) {
            vil_error("file shrank while reading: %zu of %zu bytes", got, n);
            close(fd);
            return -1;
        }
        got += (size_t)r;
    }
    close(fd);
    (*data)[n] = 0;
    *size = n;
    return 0;
}

int vil_image_load(const char *path, int channels, VilImage *out) {
    memset(out, 0, sizeof *out);
    unsigned char *buf = NULL;
    size_t cap = 0, n = 0;
    /* the reader's and the decoder's messages name no file: one message that says which */
    VilErrCapture cap_msg;
    vil_error_capture(&cap_msg);
    int rc = vil_read_regular(path, &buf, &cap, &n);
    if (rc == 0) rc = vil_image_decode(buf, n, channels, out);
    vil_error_release(&cap_msg);
    free(buf);
    char shown[1024];
    if (rc) vil_error("'%s': %s", vil_printable(shown, sizeof shown, path), cap_msg.msg);
    return rc;
}
