/* common.h: what every vil source uses: checked allocation and libc calls, error
 * reporting, a small deterministic RNG and a wall clock. Errors follow one rule: a library
 * function reports and returns an error code; only the CLI layer decides to exit. */
#ifndef VIL_COMMON_H
#define VIL_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "vil/files.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- error reporting ---- */
/* A failure that is the caller's misuse, not the environment's: a value no run could take,
 * from the command line or a config. Functions that can tell return it instead of -1, and the
 * commands exit 2 for it (1 for -1: a file, the machine, the data). */
#define VIL_EUSAGE (-2)
/* The process exit code for a library return code: 0, 2 (VIL_EUSAGE) or 1. */
int vil_exit_code(int rc);
/* s for a terminal: control characters, DEL and bytes that are not UTF-8 written as \xNN, cut
 * to fit cap (with "..."); untrusted text (file metadata, names) goes through it before it is
 * printed. Returns dst. */
char *vil_printable(char *dst, size_t cap, const char *s);
/* Print "vil: error: ..." to stderr, or add the message to this thread's capture when one is
 * active (vil_error_capture). Never exits. */
void vil_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Messages of vil_error on this thread go into cap instead of stderr until vil_error_release:
 * cap->msg holds them joined by "; " in the order reported (cut with "..." at the end when
 * longer), cap->count how many there were. Captures nest (release restores the outer one). */
typedef struct VilErrCapture {
    char msg[1024];
    int count;
    struct VilErrCapture *prev;
} VilErrCapture;
void vil_error_capture(VilErrCapture *cap);   /* starts: msg = "", count = 0 */
void vil_error_release(VilErrCapture *cap);   /* must be the innermost capture of this thread */
void vil_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print the message and exit(1): for a broken invariant (a bug, never an input) and for
 * running out of memory in fixed-size bookkeeping (vil_malloc & co.). No size or value a caller
 * passes may reach it: those failures return an error (DEVELOPERS.md, "What still aborts"). */
void vil_fatal(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
#define VIL_FATAL(...) vil_fatal(__FILE__, __LINE__, __VA_ARGS__)

/* Check a libc-style call that returns 0 on success (or non-NULL) and abort with the
 * expression, errno text and a hint otherwise. For calls whose failure is a bug or an
 * unrecoverable environment problem; recoverable I/O returns an error instead. */
#define CHECK_LIBC(expr, hint)                                                          \
    do {                                                                                \
        if ((expr) != 0) vil_fatal(__FILE__, __LINE__, "%s failed: %s (%s)", #expr,     \
                                   vil_errno_str(), hint);                              \
    } while (0)
const char *vil_errno_str(void);

/* ---- allocation ----
 * Two families; which one a call uses depends on where its size comes from.
 * - vil_try_*: a size that comes from outside the program: a file (a header's claim, a tensor,
 *   a string in it), an image, a caller's batch, shape or config, the model's parameters or
 *   activations. On failure they report "out of memory allocating N bytes" (vil_error) and
 *   return NULL, and the caller turns NULL into its own error return (freeing what it took).
 *   Paths a library caller reaches with such a size use them (the few that do not yet:
 *   DEVELOPERS.md, "What still aborts").
 * - vil_malloc, vil_calloc, vil_realloc, vil_strdup, vil_path_join, vil_malloc_aligned: small,
 *   fixed-size bookkeeping (a struct, a handful of pointers, a short name), whose failure means
 *   the machine has no memory left at all. They print the size and exit(1) (vil_fatal): never
 *   use them for a size an input sets.
 * A size of 0 is taken as 1 (a valid pointer to free); vil_try_realloc leaves p as it was (still
 * the caller's to free) when it fails. */
void *vil_try_malloc(size_t bytes);
void *vil_try_calloc(size_t n, size_t size);
void *vil_try_realloc(void *p, size_t bytes);
char *vil_try_strdup(const char *s);
/* 64-byte aligned, for SIMD; free with free(). */
void *vil_try_malloc_aligned(size_t bytes);
void *vil_malloc(size_t bytes);
void *vil_calloc(size_t n, size_t size);
void *vil_realloc(void *p, size_t bytes);
char *vil_strdup(const char *s);
/* "dir/name", malloc'd; no '/' is added when dir is empty or already ends in one. */
char *vil_path_join(const char *dir, const char *name);
/* The shortest decimal that reads back (strtof) as v: "0.016", not 0.016000000759959221 (as a
 * float widened to double prints); whole numbers below 1e7 in full ("90", not "9e+01");
 * non-finite values as printf's %g gives them. */
void vil_fmt_float(char *buf, size_t n, float v);
/* v as the double of that shortest decimal (for JSON writers that print doubles) */
double vil_float_clean(float v);
/* 64-byte aligned, for SIMD; free with free(). Aborting: fixed sizes only (vil_try_malloc_aligned). */
void *vil_malloc_aligned(size_t bytes);

/* ---- files: opening what vil reads, writing what it writes (vil/files.h) ---- */

/* ---- deterministic RNG (splitmix64 seeding, xoshiro256**) ---- */
typedef struct {
    uint64_t s[4];
} VilRng;
void vil_rng_seed(VilRng *r, uint64_t seed);
uint64_t vil_rng_u64(VilRng *r);
float vil_rng_uniform(VilRng *r);              /* [0, 1) */
float vil_rng_normal(VilRng *r);               /* N(0, 1), Box-Muller */
uint32_t vil_rng_below(VilRng *r, uint32_t n); /* [0, n), unbiased */
/* Mix several integers into one seed: pure function, for (seed, epoch, rank, index) keys. */
uint64_t vil_hash_seed(uint64_t a, uint64_t b, uint64_t c, uint64_t d);

/* ---- time ---- */
double vil_now(void); /* seconds, monotonic */

/* ---- strings ---- */
/* Strict number parsing: the whole string is a decimal number (an optional '-', digits; for a
 * float an optional fraction and exponent: no spaces, '+', hex, inf or nan). 0 on success, -1
 * when s is no such number, -2 when it is one out of range (a long; a finite double), -3 (a
 * float) when it is a nonzero number too small for a double (it would be 0). A subnormal double
 * (1e-320) is a number: 0 and its value. */
int vil_parse_int(const char *s, long *out);
int vil_parse_float(const char *s, double *out);
/* The offset of the first byte of s[0..n) that breaks UTF-8, or n when all of it is valid.
 * Overlong forms, surrogates and code points past U+10FFFF are invalid (as Rust's from_utf8). */
size_t vil_utf8_invalid_at(const unsigned char *s, size_t n);
/* Edit distance, for "did you mean" suggestions. */
int vil_edit_distance(const char *a, const char *b);

#ifdef __cplusplus
}
#endif
#endif
