/* slurm_train.c: the README's sbatch script (tools/train.sbatch), its resources cut to one node
 * and 2 CPU tasks, on a one-node Slurm cluster of this machine (tools/slurm_local.sh): srun
 * starts 2 ranks that end 10 steps where one process of the same global batch does (test_dist.c's
 * tolerance, 1e-5 relative), a job stopped half-way then resubmitted ends there too, and SIGTERM
 * to the job (scancel --signal, and sbatch's --signal=TERM@N before the time limit) stops and
 * saves the run; vil bench warns of ranks bound to one CPU under srun. The
 * daemons are stopped at the end, on failure and on SIGINT / SIGTERM, and none is left.
 * Not in `make test` (root, Slurm and munge): `make test-slurm` runs it. */
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/data_corpus.h"
#include "tests/model_testing.h"
#include "tests/testing.h"
#include "vil/dist.h"

static char *dir;
static char root[PATH_MAX], conf[PATH_MAX + 64];
static int started; /* this test started the cluster: it stops it */

/* test_dist.c's tiny model and recipe (16 x 16 gray images, 4 classes), as vil train flags after
 * the script's CONFIG DATA OUT; the length of the run (SHORT) apart: a command line sets a key
 * once, and the SIGTERM run sets its own */
static const char *ARGS =
    "--device cpu --set name=slurm_test --set arch=vil --set img_size=16 --set patch_size=4 "
    "--set stride=4 --set in_chans=1 --set embed_dim=32 --set depth=2 --set num_classes=4 "
    "--set drop_path=0.1 --set base_lr=0.05 --set warmup_epochs=0.2 "
    "--set ema_decay=0.9 --set clip_grad=5 --set label_smoothing=0.1 --set mixup=0 --set cutmix=0 "
    "--set repeats=3 --set randaug_n=1 --set reprob=0.25 --set scale_min=0.5 --set crop_pct=1 "
    "--set workers=1 --set eval_every_epochs=1 --set eval_batch=50";
#define SHORT "--set epochs=3 --set log_every=5 "

static void stop_cluster(void) {
    if (!started) return;
    started = 0;
    char cmd[PATH_MAX + 64], out[4096];
    snprintf(cmd, sizeof cmd, "sh %s/tools/slurm_local.sh stop 2>&1", root);
    int rc = t_run(cmd, out, sizeof out);
    printf("%s", out);
    T_CHECK(rc == 0, "tools/slurm_local.sh stop (rc %d)", rc);
    snprintf(cmd, sizeof cmd, "sh %s/tools/slurm_local.sh status 2>&1", root);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc != 0 && t_count(out, "not running") == 3, "no daemon left after stop:\n%s", out);
}

static void on_signal(int sig) {
    stop_cluster();
    fflush(stdout);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* the loss of the progress line of step `step` (NAN: none) */
static double logged_loss(const char *out, int step) {
    char key[32];
    snprintf(key, sizeof key, "step %d/", step);
    const char *p = strstr(out, key), *l = p ? strstr(p, "loss ") : NULL;
    return l ? atof(l + 5) : NAN;
}

/* the job's state from scontrol ("COMPLETED", "FAILED", ...); "" when unknown */
static void job_state(const char *id, char *state, size_t n) {
    char cmd[256], out[8192];
    snprintf(cmd, sizeof cmd, "scontrol show job -o %s 2>&1", id);
    state[0] = 0;
    if (t_run(cmd, out, sizeof out) != 0) return;
    const char *s = strstr(out, "JobState=");
    if (s) snprintf(state, n, "%.*s", (int)strcspn(s + 9, " \n"), s + 9);
}

/* sbatch tools/train.sbatch CONFIG DATA dir/NAME ARGS MORE, its output in dir/job/NAME.out;
 * the job id in id (0), or the message in id (-1) */
static int submit_with(const char *name, const char *more, const char *sbatch_flags, char *id, size_t n) {
    char cmd[6 * PATH_MAX];
    snprintf(cmd, sizeof cmd,
             "sbatch --parsable --nodes=1 --ntasks-per-node=2 --gpus-per-node=0 --cpus-per-task=1 "
             "%s --chdir=%s/job --output=%s/job/%s.out %s/tools/train.sbatch "
             "%s/configs/vil_fashion.cfg %s %s/%s %s %s 2>&1",
             sbatch_flags, dir, dir, name, root, root, dir, dir, name, ARGS, more ? more : "");
    int rc = t_run(cmd, id, n);
    id[strcspn(id, ";\n")] = 0;
    return rc == 0 && id[0] && !id[strspn(id, "0123456789")] ? 0 : -1;
}

static int submit(const char *name, const char *more, char *id, size_t n) {
    return submit_with(name, more, "--time=10", id, n);
}

/* the job's output so far */
static void job_output(const char *name, char *out, size_t n) {
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "cat %s/job/%s.out 2>&1", dir, name);
    t_run(cmd, out, n);
}

/* the last 8 KB of the job's output */
static void job_tail(const char *name, char *out, size_t n) {
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "tail -c 8000 %s/job/%s.out 2>&1", dir, name);
    t_run(cmd, out, n);
}

/* waits for the job to end (at most 5 minutes; then cancels it); its final state in state */
static void wait_job(const char *id, char *state, size_t n) {
    for (int i = 0; i < 3000; i++) {
        job_state(id, state, n);
        if (state[0] && strcmp(state, "PENDING") && strcmp(state, "RUNNING") && strcmp(state, "CONFIGURING") &&
            strcmp(state, "COMPLETING"))
            return;
        usleep(100000);
    }
    char cmd[256], info[4096];
    snprintf(cmd, sizeof cmd, "scontrol show job %s 2>&1; scancel %s 2>&1", id, id);
    t_run(cmd, info, sizeof info);
    printf("job %s still %s after 5 minutes, cancelled:\n%s\n", id, state, info);
}

/* a job run to its end: 0 when it completed; its output in out */
static int sbatch(const char *name, const char *more, char *out, size_t n) {
    char id[256], state[64] = "";
    if (submit(name, more, id, sizeof id) != 0) {
        snprintf(out, n, "sbatch failed: %s", id);
        printf("%s\n", out);
        return -1;
    }
    wait_job(id, state, sizeof state);
    job_output(name, out, n);
    if (strcmp(state, "COMPLETED") != 0) {
        printf("job %s (%s) ended %s:\n%s\n", id, name, state[0] ? state : "(unknown)", out);
        return -1;
    }
    return 0;
}

/* the validation line of epoch 1 without its time: "(... images, T s)" */
static void val_line(const char *out, char *line, size_t n) {
    const char *v = strstr(out, "val   epoch 1:");
    line[0] = 0;
    if (!v) return;
    snprintf(line, n, "%.*s", (int)strcspn(v, "\n"), v);
    char *t = strrchr(line, ',');
    if (t) *t = 0;
}

/* the 2-rank run against the single process: the header, the logged loss, the validation, the state */
static void check_run(const char *name, const char *out, double loss1, const char *val1) {
    T_CHECK(strstr(out, "ranks: 2 processes (srun)") && strstr(out, "= 32; lr"),
            "%s: the header names 2 ranks started by srun and the global batch 32:\n%s", name, out);
    const char *d = strstr(out, "done:");
    T_CHECK(d && !strstr(d + 1, "done:"), "%s: one 'done:' line from 2 ranks", name);
    double l = logged_loss(out, 10);
    T_CHECK(fabs(l - loss1) <= 2e-4, "%s: the loss logged at step 10 (%.4f) is the 1 x 32 run's (%.4f)",
            name, l, loss1);
    char val[256];
    val_line(out, val, sizeof val);
    T_CHECK(val1[0] && strcmp(val, val1) == 0 && strstr(val, "(200 images"),
            "%s: the validation of epoch 1 equals the single process's: '%s' vs '%s'", name, val, val1);
    const char *keys[] = {"params", "adam_m", "adam_v", "ema"};
    for (int k = 0; k < 4; k++) {
        char nm[128];
        snprintf(nm, sizeof nm, "%s = 1 x 32 after 10 steps: %s", name, keys[k]);
        double e = t_state_diff(dir, "one", name, keys[k]);
        T_CLOSE(nm, e < 0 ? 1.0 : e, 1e-5);
    }
}

static void test_sbatch(void) {
    static char out[65536];
    char cmd[8192], val1[256];
    /* the reference: one process, batch 32 */
    snprintf(cmd, sizeof cmd, "bin/vil train --config configs/vil_fashion.cfg --data %s --out %s/one %s "
             SHORT "--set batch=32 --set max_steps=10 2>&1", dir, dir, ARGS);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0, "1 process, batch 32, 10 steps (rc %d):\n%s", rc, out);
    double loss1 = logged_loss(out, 10);
    val_line(out, val1, sizeof val1);

    /* 2 ranks x 16 through the script */
    rc = sbatch("two", SHORT "--set batch=16 --set max_steps=10", out, sizeof out);
    T_CHECK(rc == 0, "sbatch train.sbatch, 1 node x 2 tasks, batch 16 per rank: the job completed");
    check_run("two", out, loss1, val1);

    /* stopped after 5 steps, then the same submission again: --resume auto continues it */
    rc = sbatch("resubmit", SHORT "--set batch=16 --set max_steps=10 --stop-after 5", out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "ranks: 2 processes (srun)") && strstr(out, "stopped at step 5"),
            "the first job stopped after 5 steps:\n%s", out);
    rc = sbatch("resubmit", SHORT "--set batch=16 --set max_steps=10", out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "resume: ") && strstr(out, " at step 5 "),
            "the resubmitted job resumed the run at step 5:\n%s", out);
    check_run("resubmit", out, loss1, val1);
    T_CHECK(t_state_diff(dir, "two", "resubmit", "params") == 0.0 && t_state_diff(dir, "two", "resubmit", "adam_v") == 0.0,
            "stopped at 5 and resubmitted = the job of 10 steps, bitwise");
}

/* what the script's --signal=TERM@300 does before the time limit: Slurm sends SIGTERM to every
 * task of the step; the ranks stop at one step and rank 0 saves */
static void test_sigterm(void) {
    static char out[65536];
    char id[256], state[64] = "", cmd[512];
    int rc = submit("term", "--set batch=16 --set epochs=500 --set log_every=1", id, sizeof id);
    T_CHECK(rc == 0, "sbatch of a long run: %s", id);
    if (rc != 0) return;
    int at3 = 0;
    for (int i = 0; i < 1200 && !at3; i++) {
        usleep(100000);
        job_output("term", out, sizeof out);
        at3 = strstr(out, "step 3/") != NULL;
    }
    T_CHECK(at3, "the long run reached step 3:\n%s", out);
    snprintf(cmd, sizeof cmd, "scancel --signal=TERM %s 2>&1", id);
    T_CHECK(t_run(cmd, NULL, 0) == 0, "scancel --signal=TERM %s", id);
    wait_job(id, state, sizeof state);
    job_output("term", out, sizeof out);
    T_CHECK(strstr(out, "stop requested (SIGTERM)") && strstr(out, "stopped by SIGTERM") && strstr(out, ": saved ") &&
                !strstr(out, "done:") && !strstr(out, "vil: error"),
            "SIGTERM to the job's tasks: the ranks stopped and saved (job %s):\n%s", state, out);
    snprintf(cmd, sizeof cmd, "%s/term/last.state.safetensors", dir);
    T_CHECK(access(cmd, R_OK) == 0, "the training state was written");
}

/* sbatch's --signal=TERM@60 with a 2-minute limit (the script's #SBATCH --signal=TERM@300,
 * scaled down): Slurm signals every task of the step when a minute is left (checked on its own
 * timer, so somewhere in the first minute); the run stops and saves well before the limit */
static void test_signal_at(void) {
    static char out[65536];
    char id[256], state[64] = "", st[PATH_MAX + 64];
    int rc = submit_with("sigat", "--set batch=16 --set epochs=5000 --set log_every=100 "
                         "--progress none", "--time=2 --signal=TERM@60", id, sizeof id);
    T_CHECK(rc == 0, "sbatch --time=2 --signal=TERM@60 of a long run: %s", id);
    if (rc != 0) return;
    wait_job(id, state, sizeof state);
    job_tail("sigat", out, sizeof out);
    snprintf(st, sizeof st, "%s/sigat/last.state.safetensors", dir);
    T_CHECK(strstr(out, "stop requested (SIGTERM)") && strstr(out, "stopped by SIGTERM") && access(st, R_OK) == 0 &&
                !strstr(out, "TIME LIMIT") && !strstr(out, "vil: error"),
            "--signal=TERM@60: the ranks stopped and saved before the limit (job %s):\n%s", state, out);
}

/* vil bench --data under srun, with each task held to one CPU (taskset, as Slurm's task/affinity
 * binds a task to its --cpus-per-task): the bound-ranks warning, with srun's own hint */
static void test_bench_bound(void) {
    static char out[65536];
    char cmd[PATH_MAX + 1024];
    snprintf(cmd, sizeof cmd,
             "srun -n 2 --mpi=pmix taskset -c 0 bin/vil bench --model configs/vil_fashion.cfg --set img_size=16 "
             "--set patch_size=4 --set stride=4 --set in_chans=1 --set embed_dim=32 --set depth=2 "
             "--set num_classes=4 --set workers=2 --batch 8 --steps 1 --warmup 0 --data %s 2>&1", dir);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "ranks: 2 (srun)") && t_count(out, "may run on 1 CPU, and the loader has 2 workers") == 1 &&
                strstr(out, "raise --cpus-per-task") && strstr(out, "all 2 ranks (total)"),
            "vil bench --data under srun, tasks on one CPU: one warning, naming --cpus-per-task (rc %d):\n%s", rc, out);
}

int main(void) {
    setenv("OMP_NUM_THREADS", "1", 1); /* two ranks on two cores; sbatch passes it on */
    if (!getcwd(root, sizeof root)) return 1;
    if (geteuid() != 0) {
        T_CHECK(0, "make test-slurm needs root (slurmd starts each job as its user)");
        return t_finish();
    }
    if (!vil_dist_built_with_mpi()) {
        T_CHECK(0, "this vil was built without MPI (apt-get install libopenmpi-dev openmpi-bin)");
        return t_finish();
    }
    if (t_run("command -v sbatch >/dev/null && command -v srun >/dev/null", NULL, 0) != 0) {
        T_CHECK(0, "sbatch or srun not found: tools/deps.sh slurm");
        return t_finish();
    }
    dir = corpus_mkdtemp("slurm");
    corpus_write_idx_set(dir, "train", 400, 16, 16, 4, 0);
    corpus_write_idx_set(dir, "t10k", 200, 16, 16, 4, 0);
    /* the jobs run in dir/job, where bin/vil is this test's vil */
    char cmd[3 * PATH_MAX], out[8192];
    const char *bin = getenv("VIL_BIN");
    snprintf(cmd, sizeof cmd, "mkdir -p %s/job/bin && ln -s %s%s%s %s/job/bin/vil", dir,
             bin && *bin == '/' ? "" : root, bin && *bin == '/' ? "" : "/", bin && *bin ? bin : "bin/vil", dir);
    T_CHECK(t_run(cmd, NULL, 0) == 0, "the jobs' bin/vil: %s", cmd);

    /* a cluster already up (tools/slurm_local.sh start by hand) is used and left running */
    snprintf(cmd, sizeof cmd, "sh %s/tools/slurm_local.sh status >/dev/null 2>&1", root);
    int was_up = t_run(cmd, NULL, 0) == 0;
    started = !was_up;
    atexit(stop_cluster);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    snprintf(cmd, sizeof cmd, "sh %s/tools/slurm_local.sh start 2>&1", root);
    int rc = t_run(cmd, out, sizeof out);
    printf("%s", out);
    T_CHECK(rc == 0 && strstr(out, "SLURM_CONF="), "tools/slurm_local.sh start (rc %d)", rc);
    const char *c = strstr(out, "SLURM_CONF=");
    if (rc == 0 && c) {
        snprintf(conf, sizeof conf, "%.*s", (int)strcspn(c + 11, "\n"), c + 11);
        setenv("SLURM_CONF", conf, 1);
        t_run("sinfo -h -o %c", out, sizeof out);
        T_CHECK(atoi(out) >= 2, "the node has the 2 CPUs of 2 tasks (sinfo: %s)", out);
        if (atoi(out) >= 2) {
            test_sbatch();
            test_sigterm();
            test_signal_at();
            test_bench_bound();
        }
    }
    stop_cluster();
    if (!t_failed && !getenv("VIL_KEEP")) corpus_rmtree(dir);
    return t_finish();
}
