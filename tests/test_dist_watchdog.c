/* test_dist_watchdog.c: a rank that dies or hangs ends a 2-rank CPU run (mpirun --oversubscribe
 * -np 2) within a bounded time, in training and in the validation pass. The last rank kills or
 * stops itself through the test hook VIL_TEST_FAULT (train/train.c); the survivor's watchdog
 * (vil/dist.c, dist_timeout = 3 s) reports it and MPI_Abort ends the job; a killed rank under
 * mpirun's own error handling ends it sooner. No process of a run is left. A run with the same
 * short timeout that nothing disturbs ends normally. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/data_corpus.h"
#include "tests/mpi_testing.h"
#include "tests/testing.h"
#include "vil/common.h"
#include "vil/dist.h"

static char *dir;

#define TIMEOUT 3.0
/* the teardown after the watchdog fires (MPI_Abort, mpirun's SIGTERM then SIGKILL: ~2 s here),
 * with room for a loaded machine */
#define TEARDOWN 12.0

/* 400 16 x 16 images, batch 16 x 2 ranks: 12 steps an epoch, the validation pass after it */
static const char *ARGS =
    "--config configs/vil_fashion.cfg --device cpu --set name=watchdog_test --set arch=vil "
    "--set img_size=16 --set patch_size=4 --set stride=4 --set in_chans=1 --set embed_dim=32 "
    "--set depth=2 --set num_classes=4 --set epochs=40 --set base_lr=0.05 --set mixup=0 "
    "--set cutmix=0 --set repeats=1 --set workers=1 --set log_every=1 --set eval_every_epochs=1 "
    "--set eval_batch=50 --set batch=16";

typedef struct {
    int rc;
    double fault_s, end_s; /* since the start: the fault hook's line (-1: none) and the end */
    char out[65536];
} Run;

/* mpirun -np 2 vil train into dir/name with env and flags; its output read as it comes, the
 * time of the fault hook's line noted. timeout(1) ends a run whose watchdog failed. */
static void run(Run *r, const char *name, const char *env, const char *mpi_flags, const char *more) {
    char cmd[16384];
    const char *bin = getenv("VIL_BIN");
    snprintf(cmd, sizeof cmd,
             "%s timeout 90 mpirun --oversubscribe -np 2 %s %s train --data %s --out %s/%s %s %s 2>&1",
             env, mpi_flags, bin && *bin ? bin : "bin/vil", dir, dir, name, ARGS, more);
    memset(r, 0, sizeof *r);
    r->fault_s = -1;
    double t0 = vil_now();
    FILE *p = popen(cmd, "r");
    if (!p) {
        r->rc = -1;
        return;
    }
    size_t n = 0;
    int ch;
    while ((ch = fgetc(p)) != EOF) {
        if (n + 1 < sizeof r->out) r->out[n++] = (char)ch, r->out[n] = 0;
        if (ch == '\n' && r->fault_s < 0 && strstr(r->out, "VIL_TEST_FAULT: rank 1 sends")) r->fault_s = vil_now() - t0;
    }
    int st = pclose(p);
    r->end_s = vil_now() - t0;
    r->rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* No process of run `name` is left: any found is reported and killed. */
static void check_none_left(const char *name) {
    char cmd[8192], pids[4096];
    /* [-] keeps the pattern from matching the shell that runs pgrep */
    snprintf(cmd, sizeof cmd, "pgrep -f -- '[-]-out %s/%s ' | tr '\\n' ' '", dir, name);
    t_run(cmd, pids, sizeof pids);
    T_CHECK(pids[0] == 0, "%s: no process of the run is left (found: %s)", name, pids);
    if (pids[0]) {
        snprintf(cmd, sizeof cmd, "kill -9 %s", pids);
        t_run(cmd, NULL, 0);
    }
}

/* The survivor's watchdog message: the timeout, what it waited in (NULL: any), the phase and
 * the step. (mpirun's own report of the MPI_Abort is not required: Open MPI 4.1 prints it, or at
 * times fails to with "show_help.c ... read past end of buffer".) */
static int has_message(const char *out, const char *what, const char *phase, long step) {
    char want[256];
    snprintf(want, sizeof want, "%s during %s (step %ld); exiting", what ? what : "", phase, step);
    const char *m = strstr(out, "rank 0: no progress from the other ranks for 3 s in ");
    return m && strstr(m, want);
}

/* A fault at `fault` (VIL_TEST_FAULT's value); mpi_flags for mpirun. watchdog: the survivor's
 * watchdog must report it (else mpirun's own teardown of a killed rank). */
static void fault_case(const char *name, const char *fault, const char *mpi_flags, int watchdog,
                       const char *what, const char *phase, long step) {
    Run *r = malloc(sizeof *r);
    char env[8192], more[64];
    /* under make test-asan: a process that MPI_Abort or a signal ends leaves its buffers behind,
     * which LeakSanitizer would report as leaks (memory errors are still reported) */
    const char *asan = getenv("ASAN_OPTIONS");
    if (asan && *asan) snprintf(env, sizeof env, "ASAN_OPTIONS='%s:detect_leaks=0' VIL_TEST_FAULT=%s", asan, fault);
    else snprintf(env, sizeof env, "VIL_TEST_FAULT=%s", fault);
    snprintf(more, sizeof more, "--set dist_timeout=%g", TIMEOUT);
    run(r, name, env, mpi_flags, more);
    double after = r->fault_s >= 0 ? r->end_s - r->fault_s : -1;
    int recovery = strstr(mpi_flags, "recovery") != NULL;
    printf("%-16s %-13s %s: rc %d, the run ended %.2f s after the fault (%.2f s in all)\n", name,
           fault, mpi_flags, r->rc, after, r->end_s);
    T_CHECK(r->fault_s >= 0, "%s: the fault hook ran:\n%s", name, r->out);
    if (watchdog) {
        T_CHECK(has_message(r->out, what, phase, step), "%s: the survivor says why it stops:\n%s", name, r->out);
        /* the survivor enters its wait at most a step after the fault: the timeout is not cut */
        T_CHECK(after >= TIMEOUT - 0.5 && after <= 1.25 * TIMEOUT + TEARDOWN,
                "%s: ended %.2f s after the fault (timeout %g s, the bound %g s)", name, after,
                TIMEOUT, 1.25 * TIMEOUT + TEARDOWN);
    } else {
        /* mpirun's teardown (~2 s) comes before the watchdog's 3 s, or after it on a loaded machine */
        T_CHECK(strstr(r->out, "exited on signal 9") || has_message(r->out, NULL, "training", 5),
                "%s: mpirun names the killed rank (or the watchdog reports it):\n%s", name, r->out);
        T_CHECK(after >= 0 && after <= TEARDOWN, "%s: ended %.2f s after the fault (the bound %g s)",
                name, after, TEARDOWN);
    }
    /* under --enable-recovery mpirun's status does not carry the abort's */
    if (!recovery) T_CHECK(r->rc != 0 && r->rc != 124, "%s: mpirun exits non-zero, not by timeout(1) (rc %d)", name, r->rc);
    check_none_left(name);
    free(r);
}

int main(void) {
    t_mpi_env();
    if (!t_mpi_ready()) return t_finish();
    dir = corpus_mkdtemp("watchdog");
    corpus_write_idx_set(dir, "train", 400, 16, 16, 4, 0);
    corpus_write_idx_set(dir, "t10k", 200, 16, 16, 4, 0);

    /* undisturbed, with the short timeout and a save every 5 steps: no false alarm */
    Run *r = malloc(sizeof *r);
    run(r, "calm", "", "", "--set dist_timeout=3 --set max_steps=30 --set save_every_steps=5");
    T_CHECK(r->rc == 0 && strstr(r->out, "done:") && !strstr(r->out, "no progress"),
            "an undisturbed 2-rank run with dist_timeout=3 ends normally (rc %d):\n%s", r->rc, r->out);
    free(r);
    check_none_left("calm");

    /* a hang (SIGSTOP): MPI never notices; the watchdog does */
    fault_case("stop_train", "stop:train:5", "", 1, "a decision of all ranks", "training", 5);
    fault_case("stop_grad", "stop:grad:5", "", 1, "the gradient all-reduce", "training", 5);
    fault_case("stop_val", "stop:val:1", "", 1, NULL, "validation", 12);
    /* a crash (SIGKILL): mpirun aborts the job by itself */
    fault_case("kill_train", "kill:train:5", "", 0, NULL, NULL, 0);
    /* ... and where the launcher lets the others run on (as srun does without
     * --kill-on-bad-exit), the watchdog ends them */
    fault_case("kill_train_rec", "kill:train:5", "--enable-recovery", 1, NULL, "training", 5);
    fault_case("kill_val_rec", "kill:val:1", "--enable-recovery", 1, NULL, "validation", 12);

    /* the settings' checks */
    char out[8192], cmd[8192];
    snprintf(cmd, sizeof cmd, "bin/vil train --data %s --out %s/bad %s --set dist_timeout=-1 2>&1", dir, dir, ARGS);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 2 && strstr(out, "dist_timeout"), "dist_timeout=-1 exits 2 naming the key (rc %d): %s", rc, out);
    snprintf(cmd, sizeof cmd, "VIL_DIST_TIMEOUT=soon mpirun --oversubscribe -np 2 bin/vil train --data %s "
             "--out %s/bad %s 2>&1", dir, dir, ARGS);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc != 0 && strstr(out, "VIL_DIST_TIMEOUT='soon'"), "VIL_DIST_TIMEOUT=soon is refused (rc %d): %s", rc, out);
    check_none_left("bad");
    corpus_rmtree(dir);
    return t_finish();
}
