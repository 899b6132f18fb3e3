/* test_common.c: the try allocators (NULL and a message for a size no machine has); the capture
 * of vil_error messages (vil/common.h): a captured message is not
 * printed, several are joined, captures nest, a long text is cut with "...", a capture belongs
 * to its thread, and releasing one that is not the innermost is fatal; vil_open_regular refuses
 * FIFOs, folders and devices at once. */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testing.h"
#include "vil/common.h"

/* stderr goes to a temporary file between stderr_begin and stderr_end, which returns what was
 * written there (at most cap - 1 bytes): the checks need to see what was printed, not just what
 * was captured. */
static int saved_fd = -1;
static FILE *tmp_err;

static void stderr_begin(void) {
    fflush(stderr);
    tmp_err = tmpfile();
    if (!tmp_err) VIL_FATAL("tmpfile failed");
    saved_fd = dup(2);
    dup2(fileno(tmp_err), 2);
}

static void stderr_end(char *out, size_t cap) {
    fflush(stderr);
    dup2(saved_fd, 2);
    close(saved_fd);
    rewind(tmp_err);
    size_t n = fread(out, 1, cap - 1, tmp_err);
    out[n] = 0;
    fclose(tmp_err);
}

static void test_capture_basics(void) {
    char printed[4096];
    VilErrCapture cap;
    stderr_begin();
    vil_error_capture(&cap);
    T_CHECK(cap.msg[0] == 0 && cap.count == 0, "a capture starts empty");
    vil_error("cannot open '%s': %s", "a.bin", "No such file");
    vil_error_release(&cap);
    stderr_end(printed, sizeof printed);
    T_CHECK(strcmp(cap.msg, "cannot open 'a.bin': No such file") == 0 && cap.count == 1,
            "one message captured: '%s' (%d)", cap.msg, cap.count);
    T_CHECK(printed[0] == 0, "a captured message is not printed: '%s'", printed);

    /* after release, messages print again */
    stderr_begin();
    vil_error("after release %d", 7);
    stderr_end(printed, sizeof printed);
    T_CHECK(strstr(printed, "vil: error: after release 7") != NULL, "printed after release: '%s'",
            printed);

    /* warnings are not captured */
    stderr_begin();
    vil_error_capture(&cap);
    vil_warn("a warning");
    vil_error_release(&cap);
    stderr_end(printed, sizeof printed);
    T_CHECK(cap.count == 0 && strstr(printed, "vil: warning: a warning"),
            "a warning prints under a capture: '%s' (%d captured)", printed, cap.count);

    vil_error_capture(&cap);
    vil_error("first");
    vil_error("second %s", "one");
    vil_error_release(&cap);
    T_CHECK(strcmp(cap.msg, "first; second one") == 0 && cap.count == 2,
            "two messages joined in order: '%s' (%d)", cap.msg, cap.count);
}

static void test_nesting(void) {
    VilErrCapture outer, inner;
    vil_error_capture(&outer);
    vil_error("outer one");
    vil_error_capture(&inner);
    vil_error("inner");
    vil_error_release(&inner);
    vil_error("outer two");
    vil_error_release(&outer);
    T_CHECK(strcmp(inner.msg, "inner") == 0 && inner.count == 1, "inner capture: '%s'", inner.msg);
    T_CHECK(strcmp(outer.msg, "outer one; outer two") == 0 && outer.count == 2,
            "release restores the outer capture: '%s' (%d)", outer.msg, outer.count);

    /* the way a caller adds context: capture the inner message, report it with its own */
    vil_error_capture(&outer);
    vil_error_capture(&inner);
    vil_error("bad magic");
    vil_error_release(&inner);
    vil_error("'%s': %s", "x.idx", inner.msg);
    vil_error_release(&outer);
    T_CHECK(strcmp(outer.msg, "'x.idx': bad magic") == 0 && outer.count == 1,
            "context added to an inner message: '%s'", outer.msg);
}

static void test_long(void) {
    VilErrCapture cap;
    char big[3000];
    memset(big, 'y', sizeof big - 1);
    big[sizeof big - 1] = 0;
    vil_error_capture(&cap);
    vil_error("%s", big);
    vil_error_release(&cap);
    size_t n = strlen(cap.msg);
    T_CHECK(n == sizeof cap.msg - 1 && strcmp(cap.msg + n - 3, "...") == 0 && cap.msg[0] == 'y',
            "a long message is cut with ... (%zu bytes)", n);

    /* a second message that does not fit: counted, cut, never past the buffer */
    vil_error_capture(&cap);
    vil_error("%.1000s", big);
    vil_error("%s", "tail that does not fit in what is left");
    vil_error("%s", "and a third");
    vil_error_release(&cap);
    n = strlen(cap.msg);
    T_CHECK(cap.count == 3 && n == sizeof cap.msg - 1 && strcmp(cap.msg + n - 3, "...") == 0 &&
                strncmp(cap.msg + 1000, "; tail", 6) == 0,
            "messages past the buffer are cut with ... (%d, %zu bytes)", cap.count, n);

    /* exactly full, then one more: the end shows the cut */
    vil_error_capture(&cap);
    vil_error("%.1023s", big);
    vil_error("more");
    vil_error_release(&cap);
    n = strlen(cap.msg);
    T_CHECK(cap.count == 2 && n == sizeof cap.msg - 1 && strcmp(cap.msg + n - 3, "...") == 0,
            "a message after a full buffer ends it with ... (%zu bytes)", n);
}

typedef struct {
    VilErrCapture cap; /* the thread's own capture */
} ThreadArg;

static void *report_uncaptured(void *arg) {
    (void)arg;
    vil_error("from the other thread");
    return NULL;
}

static void *report_captured(void *arg) {
    ThreadArg *a = arg;
    vil_error_capture(&a->cap);
    vil_error("captured by the other thread");
    vil_error_release(&a->cap);
    return NULL;
}

static void test_threads(void) {
    char printed[4096];
    VilErrCapture cap;
    pthread_t t;
    stderr_begin();
    vil_error_capture(&cap);
    pthread_create(&t, NULL, report_uncaptured, NULL);
    pthread_join(t, NULL);
    vil_error_release(&cap);
    stderr_end(printed, sizeof printed);
    T_CHECK(cap.count == 0 && cap.msg[0] == 0,
            "a capture does not take another thread's message: '%s'", cap.msg);
    T_CHECK(strstr(printed, "vil: error: from the other thread") != NULL,
            "the other thread's message is printed: '%s'", printed);

    ThreadArg a;
    vil_error_capture(&cap);
    pthread_create(&t, NULL, report_captured, &a);
    pthread_join(t, NULL);
    vil_error("main thread");
    vil_error_release(&cap);
    T_CHECK(strcmp(a.cap.msg, "captured by the other thread") == 0 && a.cap.count == 1,
            "each thread has its own capture: '%s'", a.cap.msg);
    T_CHECK(strcmp(cap.msg, "main thread") == 0 && cap.count == 1,
            "the main thread's capture keeps its own: '%s'", cap.msg);
}

/* releasing a capture that is not the innermost is a bug: fatal, exit status 1 */
static void test_bad_release(void) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, 2);
        VilErrCapture a, b;
        vil_error_capture(&a);
        vil_error_capture(&b);
        vil_error_release(&a);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1, "releasing an outer capture first is fatal");
}

/* vil_open_regular: a regular file opens; a FIFO with no writer, a folder and /dev/zero are
 * refused at once, by name (a FIFO would block a plain open forever: the test runs under an
 * alarm so a regression fails instead of hanging the suite) */
static void test_open_regular(void) {
    char dir[] = "/tmp/vil_test_common_XXXXXX";
    if (!mkdtemp(dir)) {
        T_CHECK(0, "mkdtemp");
        return;
    }
    char reg[256], fifo[256];
    snprintf(reg, sizeof reg, "%s/file.bin", dir);
    snprintf(fifo, sizeof fifo, "%s/pipe.jpg", dir);
    FILE *f = fopen(reg, "wb");
    fputs("abc", f);
    fclose(f);
    T_CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    alarm(20);
    int fd = vil_open_regular(reg);
    T_CHECK(fd >= 0, "a regular file opens");
    if (fd >= 0) {
        char b[4] = {0};
        T_CHECK(read(fd, b, 4) == 3 && strcmp(b, "abc") == 0, "and reads (blocking again)");
        close(fd);
    }
    const char *bad[] = {fifo, dir, "/dev/zero"};
    const char *words[] = {"FIFO", "folder", "character device"};
    for (int i = 0; i < 3; i++) {
        VilErrCapture cap;
        vil_error_capture(&cap);
        int r = vil_open_regular(bad[i]);
        FILE *g = vil_fopen_regular(bad[i], "rb");
        size_t n = 0;
        unsigned char *all = vil_read_file(bad[i], &n);
        vil_error_release(&cap);
        T_CHECK(r < 0 && !g && !all && cap.count == 3 && strstr(cap.msg, bad[i]) &&
                    strstr(cap.msg, words[i]),
                "'%s' refused, named, said to be a %s: '%s'", bad[i], words[i], cap.msg);
        if (r >= 0) close(r);
        if (g) fclose(g);
        free(all);
    }
    alarm(0);
    size_t n = 0;
    unsigned char *all = vil_read_file(reg, &n);
    T_CHECK(all && n == 3 && all[3] == 0, "vil_read_file reads a regular file whole");
    free(all);
    unlink(reg);
    unlink(fifo);
    rmdir(dir);
}

static void test_path_join(void) {
    const char *cases[][3] = {{"out/run", "last.safetensors", "out/run/last.safetensors"},
                              {"out/run/", "a", "out/run/a"},
                              {"/", "a", "/a"},
                              {"", "a", "a"}};
    for (int i = 0; i < 4; i++) {
        char *p = vil_path_join(cases[i][0], cases[i][1]);
        T_CHECK(strcmp(p, cases[i][2]) == 0, "vil_path_join('%s', '%s') = '%s', want '%s'",
                cases[i][0], cases[i][1], p, cases[i][2]);
        free(p);
    }
}

/* The try allocators: a size no machine has gives NULL and one "out of memory" message naming
 * the size, never an exit; vil_try_realloc leaves the old block as it was. (Under ASan, make
 * test-asan's allocator_may_return_null=1 makes its allocator return NULL too.) */
static void test_try_alloc(void) {
    const size_t huge = SIZE_MAX / 2;
    char want[64];
    snprintf(want, sizeof want, "%zu", huge);
    struct {
        const char *name;
        int which;
    } cases[] = {{"vil_try_malloc", 0}, {"vil_try_calloc", 1}, {"vil_try_realloc", 2},
                 {"vil_try_malloc_aligned", 3}};
    for (int i = 0; i < 4; i++) {
        char *old = vil_try_malloc(16);
        memcpy(old, "still here", 11);
        VilErrCapture cap;
        vil_error_capture(&cap);
        void *p = cases[i].which == 0   ? vil_try_malloc(huge)
                  : cases[i].which == 1 ? vil_try_calloc(huge, 1)
                  : cases[i].which == 2 ? vil_try_realloc(old, huge)
                                        : vil_try_malloc_aligned(huge);
        vil_error_release(&cap);
        T_CHECK(!p && cap.count == 1 && strstr(cap.msg, "out of memory") && strstr(cap.msg, want),
                "%s(SIZE_MAX / 2): NULL with a message naming the size: '%s'", cases[i].name, cap.msg);
        T_CHECK(strcmp(old, "still here") == 0, "%s: the old block is as it was", cases[i].name);
        free(p);
        free(old);
    }
    /* n x size past SIZE_MAX, and a size that rounding to 64 bytes would wrap to 0 */
    VilErrCapture cap;
    vil_error_capture(&cap);
    void *a = vil_try_calloc(huge, 4), *b = vil_try_malloc_aligned(SIZE_MAX - 10);
    vil_error_release(&cap);
    T_CHECK(!a && !b && cap.count == 2, "calloc's overflowing product and an aligned size that would "
            "wrap: NULL, two messages: '%s'", cap.msg);
    /* what fits is memory as the aborting ones give it */
    vil_error_capture(&cap);
    unsigned char *z = vil_try_calloc(100, 3), *al = vil_try_malloc_aligned(1), *e = vil_try_malloc(0);
    char *d = vil_try_strdup("abc");
    vil_error_release(&cap);
    int zero = 1;
    for (int i = 0; z && i < 300; i++) zero &= z[i] == 0;
    T_CHECK(z && zero && al && ((uintptr_t)al % 64) == 0 && e && d && strcmp(d, "abc") == 0 && cap.count == 0,
            "small sizes: zeroed, aligned, 0 bytes a valid pointer, a copy; no message");
    free(z), free(al), free(e), free(d);
}

int main(void) {
    test_try_alloc();
    test_path_join();
    test_open_regular();
    test_capture_basics();
    test_nesting();
    test_long();
    test_threads();
    test_bad_release();
    return t_finish();
}
