/* testing.h: the tiny harness every test file uses. Each check prints one line; the binary
 * ends with "N passed, N failed" and exits non-zero when anything failed. */
#ifndef VIL_TESTING_H
#define VIL_TESTING_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>

#include "tests/rel_err.h"

/* 1 in an AddressSanitizer build (gcc or clang): its shadow takes terabytes of address space, so
 * memory-limit checks skip the limit there (tests/limited.h) */
#if defined(__SANITIZE_ADDRESS__)
#define T_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define T_ASAN 1
#endif
#endif
#ifndef T_ASAN
#define T_ASAN 0
#endif

static int t_passed = 0, t_failed = 0;

#define T_CHECK(cond, ...)                                                                 \
    do {                                                                                   \
        if (cond) {                                                                        \
            t_passed++;                                                                    \
        } else {                                                                           \
            t_failed++;                                                                    \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                    \
            printf(__VA_ARGS__);                                                           \
            printf("\n");                                                                  \
        }                                                                                  \
    } while (0)

/* A check that always prints its measured value against the tolerance. NaN fails. */
#define T_CLOSE(name, err, tol)                                                            \
    do {                                                                                   \
        double e_ = (err), t_ = (tol);                                                     \
        int ok_ = (e_ <= t_) && !isnan(e_);                                                \
        if (ok_) t_passed++;                                                               \
        else t_failed++;                                                                   \
        printf("%s %-48s err %.3e  tol %.1e\n", ok_ ? "ok  " : "FAIL", name, e_, t_);      \
    } while (0)

/* occurrences of needle in s (not overlapping) */
static inline int t_count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* 1 when s holds "nan" or "inf" in any case (a number that should not be in a document) */
static inline int t_has_nan_inf(const char *s) {
    for (const char *p = s; *p; p++)
        if (!strncasecmp(p, "nan", 3) || !strncasecmp(p, "inf", 3)) return 1;
    return 0;
}

/* Run a shell command, capture its stdout into out (may be NULL); its exit status, -1 if it
 * could not run or did not exit. The first "bin/vil " that starts a word (the command, or the
 * program after a launcher such as mpirun) runs $VIL_BIN instead when that is set (make
 * test-asan: the sanitized build's binary). */
static inline int t_run(const char *cmd, char *out, size_t outlen) {
    const char *bin = getenv("VIL_BIN");
    char alt[16384];
    const char *at = strstr(cmd, "bin/vil ");
    while (at && at != cmd && at[-1] != ' ') at = strstr(at + 1, "bin/vil ");
    if (bin && *bin && at) {
        if (snprintf(alt, sizeof alt, "%.*s%s%s", (int)(at - cmd), cmd, bin, at + 7) >= (int)sizeof alt)
            return -1;
        cmd = alt;
    }
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = 0;
    int ch;
    while ((ch = fgetc(p)) != EOF)
        if (out && n + 1 < outlen) out[n++] = (char)ch;
    if (out) out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* dir/name in one of 8 rotating buffers: a result stays valid through the next 7 calls */
static inline const char *t_path(const char *dir, const char *name) {
    static char buf[8][4096];
    static int k = 0;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* A tool of the build run with arguments (printf-style), stderr joined to stdout into out: t_run's
 * exit status. */
static inline int t_run_tool(const char *tool, char *out, size_t n, const char *fmt, ...) {
    char args[8192], cmd[16384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", tool, args);
    return t_run(cmd, out, n);
}

static inline int t_finish(void) {
    printf("%d passed, %d failed\n", t_passed, t_failed);
    return t_failed ? 1 : 0;
}

#endif
