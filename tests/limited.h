/* limited.h: one step of a test run in a child process under an address-space limit
 * (setrlimit RLIMIT_AS) and an alarm, so that a reader that allocates what a hostile file claims,
 * or hangs, fails its check instead of taking the machine or the suite. Under AddressSanitizer,
 * which reserves terabytes of address space, the limit is skipped (and said so); the rest of the
 * check holds. Header-only, for tests/ alone. */
#ifndef VIL_TESTS_LIMITED_H
#define VIL_TESTS_LIMITED_H

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/testing.h"
#include "vil/common.h"

/* the address space this process holds now (bytes) */
static inline long t_vm_bytes(void) {
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%ld", &pages) != 1) pages = 0;
    if (f) fclose(f);
    return pages * sysconf(_SC_PAGESIZE);
}

/* fn(arg) in a child that may map mb MiB more than it holds at the fork (RLIMIT_AS) and runs at
 * most secs seconds (alarm); its vil_error messages come back in msg (cap bytes). Returns what
 * fn returned (0..125) when the child exited, 200 + the signal when it was killed (SIGALRM: it
 * hung; SIGABRT: vil_malloc's "out of memory"), -1 when it could not start. */
static inline int t_limited(int (*fn)(void *), void *arg, long mb, int secs, char *msg,
                            size_t cap) {
    int fds[2];
    msg[0] = 0;
    if (pipe(fds) != 0) return -1;
    if (T_ASAN) printf("     (the %ld MB address-space limit is skipped under ASan)\n", mb);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        close(fds[0]);
        if (!T_ASAN) {
            rlim_t lim = (rlim_t)t_vm_bytes() + ((rlim_t)mb << 20);
            struct rlimit rl = {lim, lim};
            setrlimit(RLIMIT_AS, &rl);
        }
        alarm((unsigned)secs);
        VilErrCapture c;
        vil_error_capture(&c);
        int rc = fn(arg);
        vil_error_release(&c);
        ssize_t w = write(fds[1], c.msg, strlen(c.msg));
        (void)w;
        _exit(rc & 127);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t k;
    while (n + 1 < cap && (k = read(fds[0], msg + n, cap - 1 - n)) > 0) n += (size_t)k;
    msg[n] = 0;
    close(fds[0]);
    int st;
    if (waitpid(pid, &st, 0) != pid) return -1;
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    return WIFSIGNALED(st) ? 200 + WTERMSIG(st) : -1;
}

#endif
