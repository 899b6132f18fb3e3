/* test_dist.c: data-parallel training on the CPU through MPI (mpirun --oversubscribe -np 2):
 * the samples of a global step and their augmentation do not depend on the number of ranks or
 * micro-batches, so 2 ranks x 16, 1 rank x 8 x 4 micro-batches and 2 ranks x 8 x 2 micro-batches
 * end 20 steps where 1 rank x 32 does (float summation order apart: within 1e-5 relative); the
 * sharded validation counts every image once; SIGTERM to one rank saves and stops all. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/data_corpus.h"
#include "tests/model_testing.h"
#include "tests/mpi_testing.h"
#include "tests/testing.h"
#include "vil/common.h"
#include "vil/dist.h"
#include "formats/safetensors.h"

static char *dir;

/* synthetic 16 x 16 gray images, 4 classes; the model and recipe small enough for seconds (the
 * epochs and log_every apart: a command line sets a key once, and the SIGTERM run sets its own) */
#define COMMON                                                                                          \
    "--config configs/vil_fashion.cfg --device cpu --set name=dist_test --set arch=vil --set img_size=16 --set patch_size=4 " \
    "--set stride=4 --set in_chans=1 --set embed_dim=32 --set depth=2 --set num_classes=4 "            \
    "--set drop_path=0.1 --set base_lr=0.05 --set warmup_epochs=0.2 "                                   \
    "--set ema_decay=0.9 --set clip_grad=5 --set label_smoothing=0.1 --set mixup=0 --set cutmix=0 "    \
    "--set repeats=3 --set randaug_n=1 --set reprob=0.25 --set scale_min=0.5 --set crop_pct=1 "        \
    "--set workers=1 --set eval_every_epochs=1 --set eval_batch=50"
static const char *ARGS = COMMON " --set epochs=3 --set log_every=5";

/* a run of `steps` steps into dir/name: np 2 under mpirun, else one process; more: flags */
static int train(const char *name, int np, int batch, int accum, int steps, const char *more,
                 char *out, size_t n) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%sbin/vil train --data %s --out %s/%s %s --set batch=%d --set accum_steps=%d "
             "--set max_steps=%d %s 2>&1",
             np == 2 ? "mpirun --oversubscribe -np 2 " : "", dir, dir, name, ARGS, batch, accum,
             steps, more ? more : "");
    int rc = t_run(cmd, out, n); /* t_run puts $VIL_BIN in place of bin/vil */
    if (rc != 0) printf("%s\n", out);
    return rc;
}

/* ||a - b|| / ||a|| of tensor key in two runs' state files (-1: unreadable or absent) */
static double state_diff(const char *a, const char *b, const char *key) { return t_state_diff(dir, a, b, key); }

/* the loss of the progress line of step `step` (NAN: none) */
static double logged_loss(const char *out, int step) {
    char key[32];
    snprintf(key, sizeof key, "step %d/", step);
    const char *p = strstr(out, key), *l = p ? strstr(p, "loss ") : NULL;
    return l ? atof(l + 5) : NAN;
}

static void test_equal_runs(void) {
    static char out[65536];
    /* the state at step 10 of this run is resumed on 2 ranks below */
    T_CHECK(train("half", 0, 32, 1, 20, "--stop-after 10", out, sizeof out) == 0, "1 process, batch 32, 10 steps");
    T_CHECK(train("one", 0, 32, 1, 20, NULL, out, sizeof out) == 0, "1 process, batch 32");
    double loss1 = logged_loss(out, 5);
    char val1[256] = "";
    const char *v = strstr(out, "val   epoch 1:");
    if (v) snprintf(val1, sizeof val1, "%.*s", (int)strcspn(v, "\n"), v);
    /* small buckets: the overlapped all-reduce goes in several pieces */
    const char *buckets = "--set bucket_mb=0.01";
    struct {
        const char *name;
        int np, batch, accum;
        const char *more;
    } runs[] = {{"two", 2, 16, 1, buckets}, {"accum", 0, 8, 4, NULL}, {"two_accum", 2, 8, 2, buckets},
                {"two_end", 2, 16, 1, "--set allreduce=end"}};
    for (int i = 0; i < 4; i++) {
        int rc = train(runs[i].name, runs[i].np, runs[i].batch, runs[i].accum, 20, runs[i].more, out, sizeof out);
        T_CHECK(rc == 0, "%s: %d process%s x batch %d x %d micro-batches runs", runs[i].name,
                runs[i].np ? runs[i].np : 1, runs[i].np > 1 ? "es" : "", runs[i].batch, runs[i].accum);
        if (runs[i].np == 2)
            T_CHECK(strstr(out, "ranks: 2 processes (mpirun)") && strstr(out, "= 32; lr"),
                    "%s: the header names 2 ranks and the global batch 32", runs[i].name);
        /* the logged loss is the global batch's mean, over ranks and micro-batches */
        double l = logged_loss(out, 5);
        T_CHECK(fabs(l - loss1) <= 2e-4, "%s: the loss logged at step 5 (%.4f) is the 1 x 32 run's (%.4f)",
                runs[i].name, l, loss1);
        const char *keys[] = {"params", "adam_m", "adam_v", "ema"};
        for (int k = 0; k < 4; k++) {
            char nm[128];
            snprintf(nm, sizeof nm, "%s = 1 x 32 after 20 steps: %s", runs[i].name, keys[k]);
            double d = state_diff("one", runs[i].name, keys[k]);
            T_CLOSE(nm, d < 0 ? 1.0 : d, 1e-5);
        }
        /* the validation pass: each image once over the shards, the same counts */
        v = strstr(out, "val   epoch 1:");
        char val[256] = "";
        if (v) snprintf(val, sizeof val, "%.*s", (int)strcspn(v, "\n"), v);
        /* "(... images, T s)": the time differs, the rest must not */
        char *p1 = strstr(val1, " s)"), *p2 = strstr(val, " s)");
        size_t l1 = p1 ? (size_t)(strrchr(val1, ',') - val1) : 0, l2 = p2 ? (size_t)(strrchr(val, ',') - val) : 0;
        T_CHECK(l1 && l1 == l2 && memcmp(val1, val, l1) == 0 && strstr(val, "(200 images"),
                "%s: the validation line equals the single process's: '%s' vs '%s'", runs[i].name,
                val, val1);
    }
    /* only rank 0 writes and prints: one "done:" line */
    const char *d1 = strstr(out, "done:");
    T_CHECK(d1 && !strstr(d1 + 1, "done:"), "one 'done:' line from 2 ranks");
    /* two ranks sum in one order whatever the buckets: overlapped equals after-the-backward */
    T_CHECK(state_diff("two", "two_end", "params") == 0.0 && state_diff("two", "two_end", "adam_v") == 0.0,
            "2 ranks: the all-reduce overlapped in buckets gives the weights of one after the backward, bitwise");

    /* the 1 x 32 run's step 10 resumed on 2 ranks x 16: the same global batch, so no warning,
     * and the run of 20 steps it makes is the uninterrupted one's */
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "mpirun --oversubscribe -np 2 bin/vil train --data %s --resume %s/half "
             "--set batch=16 --set workers=2 2>&1", dir, dir);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "resuming a run of 1 rank on 2, at the same global batch of 32") &&
                !strstr(out, "changed training settings"),
            "resumed on 2 ranks x 16 from 1 x 32: said so, no warning (rc %d):\n%s", rc, out);
    const char *keys[] = {"params", "adam_m", "adam_v", "ema"};
    for (int k = 0; k < 4; k++) {
        char nm[128];
        snprintf(nm, sizeof nm, "1 x 32 for 10 steps, then 2 x 16 for 10 = 1 x 32 for 20: %s", keys[k]);
        double d = state_diff("one", "half", keys[k]);
        T_CLOSE(nm, d < 0 ? 1.0 : d, 1e-5);
    }
}

/* the initial-state interventions over ranks: fitted noise fits the moments of the global batch
 * (summed over the ranks), so 2 x 16 trains as 1 x 32; passing passes each rank's own states,
 * and a resume on 2 ranks is bitwise the uninterrupted run */
static void test_init_state(void) {
    static char out[65536];
    const char *fit = "--set init_state=fitted";
    T_CHECK(train("fit1", 0, 32, 1, 10, fit, out, sizeof out) == 0, "fitted: 1 process x 32");
    T_CHECK(train("fit2", 2, 16, 1, 10, fit, out, sizeof out) == 0, "fitted: 2 processes x 16");
    const char *keys[] = {"params", "init_state_mean", "init_state_var"};
    for (int k = 0; k < 3; k++) {
        char nm[128];
        snprintf(nm, sizeof nm, "fitted: 2 x 16 = 1 x 32 after 10 steps: %s", keys[k]);
        double d = state_diff("fit1", "fit2", keys[k]);
        T_CLOSE(nm, d < 0 ? 1.0 : d, 1e-5);
    }
    const char *pass = "--set init_state=passing --set init_state_drop=0.2";
    char more[256], cmd[4096];
    snprintf(more, sizeof more, "%s --stop-after 4", pass);
    T_CHECK(train("pass_full", 2, 16, 1, 10, pass, out, sizeof out) == 0, "passing: 2 processes x 16, 10 steps");
    T_CHECK(train("pass_half", 2, 16, 1, 10, more, out, sizeof out) == 0, "passing: stopped after 4");
    snprintf(cmd, sizeof cmd, "mpirun --oversubscribe -np 2 bin/vil train --data %s --resume %s/pass_half 2>&1", dir, dir);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && !strstr(out, "warning"), "passing: resumed on 2 ranks without a warning (rc %d):\n%s", rc, out);
    const char *pk[] = {"params", "adam_v", "init_state_prev"};
    for (int k = 0; k < 3; k++)
        T_CHECK(state_diff("pass_full", "pass_half", pk[k]) == 0.0,
                "passing on 2 ranks: resumed at 4 = uninterrupted at 10, bitwise: %s", pk[k]);
    /* each rank's states in its own slot of (world, depth, B, 2, N, E) */
    snprintf(cmd, sizeof cmd, "%s/pass_full/last.state.safetensors", dir);
    VilSafetensors st;
    if (vil_st_read(cmd, &st) == 0) {
        const VilStTensor *t = vil_st_find(&st, "init_state_prev");
        T_CHECK(t && t->ndim == 6 && t->shape[0] == 2 && t->shape[2] == 16,
                "passing: the state holds both ranks' final states (2, depth, 16, 2, N, E)");
        vil_st_free(&st);
    } else {
        T_CHECK(0, "passing: the state reads");
    }
}

/* vil bench under mpirun: the table of the step over the ranks and vil train's loop on the data */
static void test_bench(void) {
    static char out[65536];
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "mpirun --oversubscribe -np 2 bin/vil bench --model configs/vil_fashion.cfg --set img_size=16 "
             "--set patch_size=4 --set stride=4 --set in_chans=1 --set embed_dim=32 --set depth=2 "
             "--set num_classes=4 --set workers=1 --set bucket_mb=0.01 --batch 8 --steps 2 --warmup 1 "
             "--data %s 2>&1", dir);
    int rc = t_run(cmd, out, sizeof out);
    const char *rows[] = {"ranks: 2 (mpirun)", "rank 0 alone, no all-reduce", "all ranks, no all-reduce",
                          "all ranks, all-reduce after the backward", "all ranks, overlapped (0.01 MiB buckets)",
                          "scaling efficiency (overlapped, against 2 x rank 0 alone): ",
                          "all 2 ranks (total)", "scaling efficiency with the loader (against 2 x rank 0 alone): "};
    int all = rc == 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) all = all && strstr(out, rows[i]);
    /* each line once: rank 0 alone prints */
    all = all && !strstr(strstr(out, rows[1]) + 1, rows[1]);
    const char *e = strstr(out, rows[5]);
    double eff = e ? atof(e + strlen(rows[5])) : 0;
    T_CHECK(all && eff > 0 && eff < 1000, "vil bench under mpirun -np 2 (rc %d):\n%s", rc, out);
}

/* vil bench --data warns once, above its numbers, as vil train does, when a rank may run on fewer
 * CPUs than the loader has workers: mpirun binds each rank to a core when it starts 2, --bind-to
 * none does not. The reference: the CPUs nproc sees under the same mpirun flags. (mpirun forwards
 * a rank's stdout and stderr apart: joined in the rank, they keep their order.) */
static void test_bench_bound(void) {
    static char out[65536];
    const char *binds[] = {"", "--bind-to none "};
    for (int b = 0; b < 2; b++) {
        char cmd[4096];
        /* nproc counts OMP_NUM_THREADS too */
        snprintf(cmd, sizeof cmd, "mpirun --oversubscribe -np 2 %senv -u OMP_NUM_THREADS nproc", binds[b]);
        t_run(cmd, out, sizeof out);
        int n1 = atoi(out), n2 = atoi(strchr(out, '\n') ? strchr(out, '\n') + 1 : "0");
        int cpus = n1 < n2 ? n1 : n2, workers = 2;
        snprintf(cmd, sizeof cmd,
                 "mpirun --oversubscribe -np 2 %ssh -c 'exec bin/vil bench --model configs/vil_fashion.cfg "
                 "--set img_size=16 --set patch_size=4 --set stride=4 --set in_chans=1 --set embed_dim=32 "
                 "--set depth=2 --set num_classes=4 --set workers=%d --batch 8 --steps 1 --warmup 0 --data %s 2>&1' 2>&1",
                 binds[b], workers, dir);
        int rc = t_run(cmd, out, sizeof out);
        const char *w = strstr(out, "warning: this rank may run on"), *table = strstr(out, "the training step over");
        int want = cpus > 0 && cpus < workers;
        T_CHECK(rc == 0 && cpus > 0 && table && strstr(out, "all 2 ranks (total)") &&
                    (want ? w && w < table && t_count(out, "may run on") == 1 : !w),
                "vil bench --data under mpirun %s(ranks on %d CPU%s, %d workers): %s (rc %d):\n%s", binds[b], cpus,
                cpus == 1 ? "" : "s", workers, want ? "one warning, above the numbers" : "no warning", rc, out);
        if (want) T_CHECK(w && strstr(w, "--bind-to none"), "the warning names mpirun's --bind-to none");
    }
}

/* SIGTERM to one rank (as Slurm's preemption sends): every rank stops at the same step, rank 0
 * saves, and the run resumes from there. */
static void test_sigterm_one_rank(void) {
    char cmd[8192], log[4096];
    snprintf(log, sizeof log, "%s/term.log", dir);
    snprintf(cmd, sizeof cmd,
             "mpirun --oversubscribe -np 2 bin/vil train --data %s --out %s/term %s --set batch=16 "
             "--set accum_steps=1 --set epochs=500 --set log_every=1 > %s 2>&1 & echo $!",
             dir, dir, COMMON, log);
    char pid[64];
    T_CHECK(t_run(cmd, pid, sizeof pid) == 0, "mpirun started in the background");
    /* wait for step 3, then signal the newest vil process of this run (a rank, not mpirun) */
    char out[65536];
    int started = 0;
    for (int i = 0; i < 600 && !started; i++) {
        usleep(100000);
        FILE *f = fopen(log, "r");
        if (!f) continue;
        size_t n = fread(out, 1, sizeof out - 1, f);
        out[n] = 0;
        fclose(f);
        started = strstr(out, "step 3/") != NULL;
    }
    T_CHECK(started, "the 2-rank run reached step 3");
    /* [-] keeps the pattern from matching the shell that runs pkill */
    snprintf(cmd, sizeof cmd, "pkill -TERM -n -f -- '[-]-out %s/term '", dir);
    T_CHECK(t_run(cmd, NULL, 0) == 0, "SIGTERM sent to one rank");
    snprintf(cmd, sizeof cmd, "while kill -0 %ld 2>/dev/null; do sleep 0.1; done; cat %s", atol(pid), log);
    t_run(cmd, out, sizeof out);
    /* rank 0, which got no signal, names the one another rank got */
    T_CHECK(strstr(out, "interrupted") && strstr(out, "saved") && strstr(out, "stopped by SIGTERM") &&
                strstr(out, "continue with mpirun -np 2 vil train --resume ") && !strstr(out, "vil: error"),
            "the group stopped and saved after SIGTERM to one rank; the command to continue names "
            "mpirun -np 2:\n%s", out);
    snprintf(cmd, sizeof cmd, "%s/term/last.state.safetensors", dir);
    T_CHECK(access(cmd, R_OK) == 0, "the training state was written");
}

/* A 2-rank run's hint names mpirun -np 2; resumed on one process it is refused (half the global
 * batch) with that command and the one that keeps the batch on one process, which then resumes. */
static void test_resume_hint(void) {
    static char out[65536];
    int rc = train("hint", 2, 16, 1, 20, "--stop-after 3", out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "stopped at step 3 (--stop-after); continue with: mpirun -np 2 vil train --resume "),
            "a 2-rank run stopped: its hint names mpirun -np 2 (rc %d):\n%s", rc, out);
    char cmd[4096], want[4096];
    snprintf(cmd, sizeof cmd, "bin/vil train --data %s --resume %s/hint --stop-after 5 2>&1", dir, dir);
    rc = t_run(cmd, out, sizeof out);
    snprintf(want, sizeof want, "Keep the batch: mpirun -np 2 vil train --resume %s/hint --data %s; or on 1 rank, "
             "--set accum_steps=2 (or --set batch=32); or give --force", dir, dir);
    T_CHECK(rc == 1 && strstr(out, "global batch of 32 (batch 16 x 2 ranks x 1 accum_steps), this start has 16") &&
                strstr(out, want),
            "resumed on one process: refused with the commands that keep the batch (rc %d):\n%s", rc, out);
    snprintf(cmd, sizeof cmd, "bin/vil train --data %s --resume %s/hint --set accum_steps=2 --stop-after 5 2>&1", dir, dir);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && !strstr(out, "warning") && strstr(out, "continue with: vil train --resume "),
            "--set accum_steps=2 on one process: resumed without a warning (rc %d):\n%s", rc, out);
}

int main(void) {
    t_mpi_env();
    if (!t_mpi_ready()) return t_finish();
    dir = corpus_mkdtemp("dist");
    corpus_write_idx_set(dir, "train", 400, 16, 16, 4, 0);
    corpus_write_idx_set(dir, "t10k", 200, 16, 16, 4, 0);
    test_equal_runs();
    test_init_state();
    test_sigterm_one_rank();
    test_resume_hint();
    test_bench();
    test_bench_bound();
    /* a command that is not a process group refuses to run N copies */
    char out[8192];
    int rc = t_run("mpirun --oversubscribe -np 2 bin/vil info --model none.safetensors 2>&1", out, sizeof out);
    T_CHECK(rc != 0 && strstr(out, "only `vil train` and `vil bench` run as several"),
            "vil info under mpirun -np 2 refuses: %s", out);
    return t_finish();
}
