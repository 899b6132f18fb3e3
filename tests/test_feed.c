/* test_feed.c: the input feed (data/feed.h) on the CPU backend: order, slots and contents of the
 * uploads, drain, misuse caught, and vil_eval_run (which feeds one batch ahead) against a plain
 * loop. gpu_feed.c runs the same checks on CUDA, plus the one that needs real asynchrony. */
#include <sys/wait.h>
#include <unistd.h>

#include "feed_testing.h"

/* a put into a slot still queued, or still read by the step in flight, must stop the program */
static void check_misuse(void) {
    const VilBackend *be = &vil_backend_cpu;
    for (int t = 0; t < 2; t++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            float *h = be->host_alloc(be, 64);
            void *dev0[1] = {be->alloc(be, 64)}, *in[1];
            size_t bytes[1] = {64};
            const void *src[1] = {h};
            VilBatch b[3];
            VilFeed f;
            if (!freopen("/dev/null", "w", stderr)) abort();
            vil_feed_init(&f, be, 1, dev0, bytes);
            vil_feed_put(&f, &b[0], src);
            if (t == 0) { /* three queued */
                vil_feed_put(&f, &b[1], src);
                vil_feed_put(&f, &b[2], src);
            } else { /* slot 0 taken and not done, slot 1 queued: the next put would reuse slot 0 */
                vil_feed_take(&f, in);
                vil_feed_put(&f, &b[1], src);
                vil_feed_put(&f, &b[2], src);
            }
            _exit(0);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0,
                "feed misuse %d (%s) is fatal", t, t == 0 ? "a third batch queued" : "overwriting the slot in use");
    }
}

int main(void) {
    char *dir = corpus_mkdtemp("feed");
    check_feed_order(&vil_backend_cpu);
    check_misuse();
    check_eval_feed(&vil_backend_cpu, dir);
    corpus_rmtree(dir);
    free(dir);
    return t_finish();
}
