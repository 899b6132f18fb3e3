/* image.h: decoded 8-bit images and the decoders that make them. The format is taken from
 * the file's bytes: JPEG through libjpeg-turbo (with DCT-domain scaling and cropped decoding
 * for the training path), PNG, GIF, BMP, PNM, PSD and HDR through stb_image. */
#ifndef VIL_IMAGE_H
#define VIL_IMAGE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most pixels (width x height) --max-pixels may allow: PIL's Image.MAX_IMAGE_PIXELS * 2,
 * where PIL turns its DecompressionBombWarning into an error. The fuzz build lowers it
 * (tests/fuzz.mk) to keep each input fast. */
#ifndef VIL_IMAGE_MAX_PIXELS
#define VIL_IMAGE_MAX_PIXELS 178956970LL
#endif
/* The default limit: 64 Mi pixels (8192 x 8192; 192 MiB decoded as RGB), above every ImageNet
 * image (the largest is a few tens of megapixels) and far below what a 680-byte JPEG header
 * may claim. */
#define VIL_IMAGE_DEFAULT_MAX_PIXELS (64LL << 20)

/* The decoded-pixel limit every decoder checks on the image's header, before any pixel buffer
 * is allocated: the command's --max-pixels. Process-wide, so set it before decoding starts (the
 * loader's threads read it). 0, or VIL_EUSAGE (reported) outside 1 .. VIL_IMAGE_MAX_PIXELS. */
int vil_image_set_max_pixels(long long n);
long long vil_image_max_pixels(void);
/* 0 when a w x h image of format `what` ("JPEG", "PNG", ...) is within the limit, else -1 with
 * a vil_error naming the size, the limit and --max-pixels. */
int vil_image_check_size(const char *what, long long w, long long h);

/* A progressive JPEG may hold any number of scans; each one re-reads the whole coefficient
 * buffer, so a crafted file can take minutes. libjpeg-turbo's TurboJPEG uses the same kind
 * of limit. */
#define VIL_JPEG_MAX_SCANS 1000

typedef struct {
    int w, h, c;       /* c = 1 (gray) or 3 (RGB) */
    unsigned char *px; /* (h, w, c) interleaved */
} VilImage;

typedef enum { VIL_FORMAT_UNKNOWN = 0, VIL_FORMAT_JPEG, VIL_FORMAT_PNG, VIL_FORMAT_OTHER } VilFormat;

void vil_image_free(VilImage *im);
/* Allocate an uninitialised w x h x c image; 0 on success, -1 for a size out of range (not
 * reported: the caller names it) or without the memory (reported as out of memory). */
int vil_image_alloc(VilImage *im, int w, int h, int c);

/* Which decoder the bytes call for (magic numbers only, never the file name). */
VilFormat vil_image_format(const unsigned char *buf, size_t n);

/* Decode a whole image. channels = 1 (gray: RGB is converted with PIL's "L" weights
 * 0.299/0.587/0.114 in 16-bit fixed point) or 3 (gray is replicated; CMYK/YCCK JPEGs are
 * converted the way PIL does, Adobe-inverted CMYK included; alpha is dropped).
 * A JPEG whose data ends before the decoder has produced its last scanline is an error
 * (PIL: "image file is truncated"): libjpeg would fill the rest with gray. Corrupt-data
 * warnings that leave every pixel decoded (extraneous bytes before a marker, a bad restart
 * marker) are accepted, as PIL accepts them. An image whose header claims more pixels than
 * vil_image_max_pixels() is refused before any pixel buffer is allocated. Returns 0, or -1 with
 * a vil_error message. */
int vil_image_decode(const unsigned char *buf, size_t n, int channels, VilImage *out);
/* vil_image_decode of a file; one message, "'FILE': reason", the name made printable. */
int vil_image_load(const char *path, int channels, VilImage *out);

/* Read the whole of a regular file into *data (grown with realloc to *cap, a power of two, one
 * byte more than the file, which is a NUL after it); *size = its bytes. It opens through
 * vil_open_regular_unnamed, so a FIFO, a folder or a device is refused at once instead of
 * blocking; a zero-byte file is an error too. The message gives the reason but not
 * the path, for callers that name the file themselves (printable). 0, or -1 (vil_error). */
int vil_read_regular(const char *path, unsigned char **data, size_t *cap, size_t *size);

/* Size from the header alone (cheap: no pixel data is decoded). 0 or -1 (vil_error). */
int vil_image_info(const unsigned char *buf, size_t n, int *w, int *h, VilFormat *fmt);

/* JPEG only: decode the region [x0, x0 + cw) x [y0, y0 + ch) of the full-resolution image,
 * with libjpeg-turbo's DCT-domain downscaling by 1/denom (denom = 1, 2, 4 or 8). Only the
 * iMCU rows and columns that cover the region are decoded. The result holds a superset of the
 * region in the scaled image's coordinates: *rx, *ry receive the position of its top-left
 * pixel in the scaled image (of size ceil(W / denom) x ceil(H / denom)), so the region starts
 * at (x0 / denom - *rx, y0 / denom - *ry) inside out. */
int vil_jpeg_decode_region(const unsigned char *buf, size_t n, int channels, int x0, int y0, int cw,
                           int ch, int denom, VilImage *out, int *rx, int *ry);

/* Options of vil_jpeg_decode_region_scaled. 0: PIL's settings (JDCT_ISLOW, fancy upsampling),
 * bit-identical to the full decode's pixels. */
enum {
    VIL_JPEG_MERGED = 1, /* do_fancy_upsampling = FALSE: libjpeg-turbo's merged (nearest)
                            chroma upsampling + color conversion; no margin columns needed */
    VIL_JPEG_IFAST = 2,  /* JDCT_IFAST (matters only where an 8x8 IDCT is used) */
};

/* vil_jpeg_decode_region at the DCT scale scale_num / 8 (1..16; libjpeg-turbo's IDCT
 * scaling, so scale_num 9..16 upsamples), with the `flags` above. The scaled image is
 * ceil(W * scale_num / 8) x ceil(H * scale_num / 8); scaled pixel i covers full-resolution
 * [8 i / scale_num, 8 (i + 1) / scale_num). The result covers every scaled pixel that touches
 * the region; *rx, *ry: its top-left pixel in the scaled image. */
int vil_jpeg_decode_region_scaled(const unsigned char *buf, size_t n, int channels, int x0, int y0,
                                  int cw, int ch, int scale_num, int flags, VilImage *out, int *rx,
                                  int *ry);

/* PIL's RGB -> L conversion, in place layouts: src (n, 3), dst (n). */
void vil_rgb_to_gray(unsigned char *dst, const unsigned char *src, size_t n);

#ifdef __cplusplus
}
#endif
#endif
