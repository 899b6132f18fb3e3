/* common.c: error reporting, allocation (the try family that reports and returns NULL, the
 * aborting one for fixed bookkeeping), atomic file writes, RNG, clock and strict
 * number parsing shared by every part of vil. */
#define _GNU_SOURCE
#include "common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *vil_errno_str(void) { return strerror(errno); }

/* Returns the offset of the first byte that breaks UTF-8, or n when all is valid. Overlong
 * forms, surrogates and code points past U+10FFFF are invalid, as for Rust's from_utf8. */
size_t vil_utf8_invalid_at(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return i;
        }
        if (n - i < len) return i;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += len;
    }
    return n;
}

static void vmsg(const char *kind, const char *fmt, va_list ap) {
    fprintf(stderr, "vil: %s: ", kind);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

int vil_exit_code(int rc) { return rc == 0 ? 0 : rc == VIL_EUSAGE ? 2 : 1; }

char *vil_printable(char *dst, size_t cap, const char *s) {
    size_t o = 0, n = s ? strlen(s) : 0;
    if (!cap) return dst;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c >= 0x20 && c < 0x7f ? 1 : 0;
        if (c >= 0x80) {
            size_t want = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
            if (want && i + want <= n && vil_utf8_invalid_at((const unsigned char *)s + i, want) == want) len = want;
        }
        size_t need = len ? len : 4;
        if (o + need + 4 > cap) { /* room for "..." and the NUL */
            if (o + 4 <= cap) memcpy(dst + o, "...", 3), o += 3;
            break;
        }
        if (len) memcpy(dst + o, s + i, len), o += len, i += len;
        else o += (size_t)snprintf(dst + o, cap - o, "\\x%02x", c), i++;
    }
    dst[o < cap ? o : cap - 1] = 0;
    return dst;
}

/* The innermost capture of this thread, NULL when messages go to stderr. Per thread, so that a
 * loader worker that records why a file was bad never takes another thread's message. */
static _Thread_local VilErrCapture *g_capture;

void vil_error_capture(VilErrCapture *cap) {
    cap->msg[0] = 0;
    cap->count = 0;
    cap->prev = g_capture;
    g_capture = cap;
}

void vil_error_release(VilErrCapture *cap) {
    /* releasing out of order would leave a capture on the chain that its owner has freed.
     * invariant: captures are released in the order taken by code, never by an input */
    if (g_capture != cap) VIL_FATAL("vil_error_release: not the innermost capture of this thread");
    g_capture = cap->prev;
}

/* Append one message to c->msg after "; ". What does not fit is cut and the text ends with
 * "...", so that a reader knows it is not all; later messages are counted but not added. */
static void capture_add(VilErrCapture *c, const char *fmt, va_list ap) {
    const size_t cap = sizeof c->msg;
    size_t len = strnlen(c->msg, cap - 1);
    int cut = len > 0 && len + 2 >= cap;
    if (len > 0 && !cut) {
        memcpy(c->msg + len, "; ", 3);
        len += 2;
    }
    if (!cut) {
        int k = vsnprintf(c->msg + len, cap - len, fmt, ap);
        cut = k > 0 && (size_t)k >= cap - len;
    }
    if (cut) memcpy(c->msg + cap - 4, "...", 4);
    c->count++;
}

void vil_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (g_capture) capture_add(g_capture, fmt, ap);
    else vmsg("error", fmt, ap);
    va_end(ap);
}

void vil_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vmsg("warning", fmt, ap);
    va_end(ap);
}

void vil_fatal(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "vil: fatal: %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

void *vil_try_malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) vil_error("out of memory allocating %zu bytes", bytes);
    return p;
}

void *vil_try_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) vil_error("out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *vil_try_realloc(void *p, size_t bytes) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) vil_error("out of memory allocating %zu bytes (growing a buffer)", bytes);
    return q;
}

char *vil_try_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = vil_try_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void *vil_try_malloc_aligned(size_t bytes) {
    void *p = NULL;
    /* rounded up to whole 64-byte lines; a size within 63 of SIZE_MAX would wrap to 0 */
    if (bytes > SIZE_MAX - 63 || posix_memalign(&p, 64, bytes ? (bytes + 63) / 64 * 64 : 64) != 0) {
        vil_error("out of memory allocating %zu bytes (64-byte aligned)", bytes);
        return NULL;
    }
    return p;
}

void *vil_malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) VIL_FATAL("out of memory allocating %zu bytes", bytes);
    return p;
}

void *vil_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) VIL_FATAL("out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *vil_realloc(void *p, size_t bytes) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) VIL_FATAL("out of memory reallocating to %zu bytes", bytes);
    return q;
}

void vil_fmt_float(char *buf, size_t n, float v) {
    /* whole numbers as such (90, not 9e+01) */
    if (v == truncf(v) && fabsf(v) < 1e7f) {
        snprintf(buf, n, "%.0f", (double)v);
        return;
    }
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, n, "%.*g", p, (double)v);
        if (strtof(buf, NULL) == v) return;
    }
}

double vil_float_clean(float v) {
    char b[48];
    vil_fmt_float(b, sizeof b, v);
    return isfinite(v) ? strtod(b, NULL) : (double)v;
}

char *vil_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = vil_malloc(n);
    memcpy(d, s, n);
    return d;
}

char *vil_path_join(const char *dir, const char *name) {
    size_t la = strlen(dir), lb = strlen(name);
    int slash = la > 0 && dir[la - 1] != '/';
    char *s = vil_malloc(la + slash + lb + 1);
    memcpy(s, dir, la);
    if (slash) s[la] = '/';
    memcpy(s + la + slash, name, lb + 1);
    return s;
}

void *vil_malloc_aligned(size_t bytes) {
    void *p = NULL;
    if (bytes > SIZE_MAX - 63 || posix_memalign(&p, 64, bytes ? (bytes + 63) / 64 * 64 : 64) != 0)
        VIL_FATAL("out of memory allocating %zu aligned bytes", bytes);
    return p;
}

/* ---- RNG ---- */
static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

void vil_rng_seed(VilRng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t vil_rng_u64(VilRng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float vil_rng_uniform(VilRng *r) { return (float)(vil_rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

float vil_rng_normal(VilRng *r) {
    double u1 = ((double)(vil_rng_u64(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double u2 = (double)(vil_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

uint32_t vil_rng_below(VilRng *r, uint32_t n) {
    if (n <= 1) return 0;
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = vil_rng_u64(r);
    while (x >= limit);
    return (uint32_t)(x % n);
}

uint64_t vil_hash_seed(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
    uint64_t x = a;
    uint64_t h = splitmix64(&x);
    x = h ^ b;
    h = splitmix64(&x);
    x = h ^ c;
    h = splitmix64(&x);
    x = h ^ d;
    return splitmix64(&x);
}

double vil_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whole decimal numbers only: an optional '-', digits, and for a float an optional fraction and
 * exponent. strtol / strtod alone took " 5", "+5", "0x10" (strtod) and "inf". */
static int decimal_syntax(const char *s, int real) {
    const char *p = s;
    if (*p == '-') p++;
    size_t digits = strspn(p, "0123456789");
    p += digits;
    if (real && *p == '.') {
        size_t frac = strspn(p + 1, "0123456789");
        digits += frac;
        p += 1 + frac;
    }
    if (!digits) return 0;
    if (real && (*p == 'e' || *p == 'E')) {
        p++;
        if (*p == '+' || *p == '-') p++;
        size_t e = strspn(p, "0123456789");
        if (!e) return 0;
        p += e;
    }
    return *p == 0;
}

int vil_parse_int(const char *s, long *out) {
    if (!s || !decimal_syntax(s, 0)) return -1;
    errno = 0;
    long v = strtol(s, NULL, 10);
    if (errno) return -2;
    *out = v;
    return 0;
}

int vil_parse_float(const char *s, double *out) {
    if (!s || !decimal_syntax(s, 1)) return -1;
    errno = 0;
    double v = strtod(s, NULL);
    if (!isfinite(v)) return -2; /* overflow */
    /* ERANGE also marks a subnormal result, which is a number (1e-320 is taken as it is); only a
     * nonzero number that became 0 is not ("0e-999" is 0 without ERANGE) */
    if (errno == ERANGE && v == 0.0) return -3;
    *out = v;
    return 0;
}

int vil_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    int *prev = vil_malloc((lb + 1) * sizeof(int)), *cur = vil_malloc((lb + 1) * sizeof(int));
    for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int c = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int d = prev[j] + 1, e = cur[j - 1] + 1;
            cur[j] = c < d ? (c < e ? c : e) : (d < e ? d : e);
        }
        int *t = prev;
        prev = cur;
        cur = t;
    }
    int r = prev[lb];
    free(prev);
    free(cur);
    return r;
}
