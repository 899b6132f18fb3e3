/* test_logs.c: what a run prints and the logs it leaves. The progress modes (--progress
 * bar|plain|none): the bar only on a terminal that is the process's controlling terminal
 * (script(1) gives one), never on the pseudo-terminals mpirun gives its ranks when its output
 * goes to a file; validation redrawn in place; plain mode's first line at step 1, long before
 * the first log step. A fresh run in a used folder removes the earlier starts' TensorBoard files
 * (and says so); a resume keeps them, and the event files read as TensorBoard's loaders read
 * them (their restart and preemption rules, written out here) give the curve metrics.jsonl
 * holds, also after a crash that logged past the last save. The runs go through bin/vil
 * ($VIL_BIN). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cJSON.h>

#include "tests/data_corpus.h"
#include "tests/mpi_testing.h"
#include "tests/testing.h"
#include "vil/common.h"
#include "vil/console.h"
#include "vil/dist.h"

static char *dir; /* the dataset and the run folders */
static char out[1 << 20];

/* 16 x 16 gray images of 4 classes, 2 epochs of 12 steps, a validation pass (model and EMA) of
 * 16 batches after each */
static const char *ARGS =
    "--config configs/vil_fashion.cfg --device cpu --set name=logs_test --set arch=vil --set img_size=16 "
    "--set patch_size=4 --set stride=4 --set in_chans=1 --set embed_dim=32 --set depth=2 "
    "--set num_classes=4 --set drop_path=0.1 --set base_lr=0.05 --set warmup_epochs=0.2 "
    "--set ema_decay=0.9 --set mixup=0 --set cutmix=0 --set repeats=1 --set workers=1 --set eval_batch=4";
/* the settings a run may set otherwise (a command line sets a key once): these, where it does not */
static const char *const DEFAULTS[] = {"epochs=2", "batch=16", "log_every=5", "eval_every_epochs=1"};

/* carriage returns that do not end a line (a terminal's line discipline writes "\r\n") */
static int stray_cr(const char *s) {
    int n = 0;
    for (const char *p = s; (p = strchr(p, '\r')); p++) n += p[1] != '\n';
    return n;
}

static int has_esc(const char *s) { return strchr(s, '\033') != NULL; }

/* `cmd` run with its output on a terminal: script(1) runs it on a pseudo-terminal that becomes
 * its controlling terminal. cmd starts with " bin/vil" (t_run's substitution needs the space). */
static int on_pty(const char *cmd) {
    char full[8192];
    snprintf(full, sizeof full, "TERM=xterm script -qec '%s' /dev/null < /dev/null 2>&1", cmd);
    return t_run(full, out, sizeof out);
}

static int train_cmd(char *cmd, size_t n, const char *name, const char *more) {
    char defs[256] = "", key[64];
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof key, "--set %.*s=", (int)strcspn(DEFAULTS[i], "="), DEFAULTS[i]);
        if (!strstr(more, key)) snprintf(defs + strlen(defs), sizeof defs - strlen(defs), " --set %s", DEFAULTS[i]);
    }
    return snprintf(cmd, n, " bin/vil train --data %s --out %s/%s %s%s %s", dir, dir, name, ARGS, defs, more);
}

/* ---- the console module ---- */

/* In a child of its own session with the pseudo-terminal slave as its controlling terminal:
 * the bits of the checks that failed (0: all passed). */
static int ctty_child(const char *slave) {
    setsid();
    int fd = open(slave, O_RDWR);
    if (fd < 0 || ioctl(fd, TIOCSCTTY, 0) != 0) return 64;
    FILE *f = fdopen(fd, "w");
    const char *launcher[] = {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMIX_SIZE",
                              "PMIX_RANK", "SLURM_NTASKS", "SLURM_STEP_ID"};
    for (size_t i = 0; i < sizeof launcher / sizeof launcher[0]; i++) unsetenv(launcher[i]);
    setenv("TERM", "xterm", 1);
    int bad = 0;
    if (!vil_console_is_terminal(f)) bad |= 1;
    VilProgress p;
    vil_progress_init(&p, f, VIL_PROGRESS_AUTO);
    if (p.mode != VIL_PROGRESS_BAR) bad |= 2;
    setenv("TERM", "dumb", 1);
    if (vil_console_is_terminal(f)) bad |= 4;
    setenv("TERM", "xterm", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    if (vil_console_is_terminal(f)) bad |= 8;
    return bad;
}

static void test_console(void) {
    T_CHECK(vil_progress_parse("bar") == VIL_PROGRESS_BAR && vil_progress_parse("plain") == VIL_PROGRESS_PLAIN &&
                vil_progress_parse("none") == VIL_PROGRESS_NONE && vil_progress_parse("auto") == VIL_PROGRESS_AUTO &&
                vil_progress_parse(NULL) == VIL_PROGRESS_AUTO && vil_progress_parse("Bar") == -1 &&
                vil_progress_parse("") == -1,
            "--progress words: bar, plain, none, auto; others -1");
    char path[4200];
    snprintf(path, sizeof path, "%s/console.txt", dir);
    FILE *f = fopen(path, "w");
    VilProgress p;
    vil_progress_init(&p, f, VIL_PROGRESS_AUTO);
    T_CHECK(!vil_console_is_terminal(f) && p.mode == VIL_PROGRESS_PLAIN, "a file: plain");
    vil_progress_init(&p, f, VIL_PROGRESS_BAR);
    T_CHECK(p.mode == VIL_PROGRESS_BAR, "bar asked for a file: bar");
    fclose(f);

    /* a pseudo-terminal that is not the controlling terminal: what mpirun gives each rank */
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    const char *slave = master >= 0 && grantpt(master) == 0 && unlockpt(master) == 0 ? ptsname(master) : NULL;
    int sfd = slave ? open(slave, O_RDWR | O_NOCTTY) : -1;
    FILE *sf = sfd >= 0 ? fdopen(sfd, "w") : NULL;
    T_CHECK(sf && isatty(sfd) && !vil_console_is_terminal(sf),
            "a pty that is not this process's controlling terminal: isatty, but not a watched terminal");
    vil_progress_init(&p, sf, VIL_PROGRESS_AUTO);
    T_CHECK(sf && p.mode == VIL_PROGRESS_PLAIN, "and auto gives plain lines on it");
    if (sf) fclose(sf);
    if (slave) {
        char name[256];
        snprintf(name, sizeof name, "%s", slave);
        pid_t pid = fork();
        if (pid == 0) _exit(ctty_child(name));
        int st = 0;
        waitpid(pid, &st, 0);
        int bad = WIFEXITED(st) ? WEXITSTATUS(st) : 255;
        T_CHECK(bad == 0, "the pty as controlling terminal: a watched terminal and a bar; not with TERM=dumb "
                "or under mpirun (failed checks 0x%x)", bad);
    }
    if (master >= 0) close(master);

    /* the redraw: "\r\033[K" then the text, cleared by the next whole line; nothing in plain mode */
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    VilProgress q = {.f = m, .mode = VIL_PROGRESS_BAR};
    T_CHECK(vil_progress_due(&q, 0), "a first redraw is due");
    vil_progress_redraw(&q, "a %d", 1);
    T_CHECK(!vil_progress_due(&q, 0) && vil_progress_due(&q, 1), "then at most five a second, or forced");
    vil_progress_redraw(&q, "b");
    fprintf(vil_progress_line(&q), "line\n");
    fprintf(vil_progress_line(&q), "more\n");
    VilProgress plain = {.f = m, .mode = VIL_PROGRESS_PLAIN};
    vil_progress_redraw(&plain, "never");
    fclose(m);
    T_CHECK(buf && !strcmp(buf, "\r\033[Ka 1\r\033[Kb\r\033[Kline\nmore\n") && !vil_progress_due(&plain, 1),
            "redraws and lines: '%s'", buf ? buf : "");
    free(buf);
}

/* ---- the modes, through the command ---- */

static void test_train_modes(void) {
    char cmd[8192];
    const char *val_done = "val   epoch 2: top-1";
    /* plain on a terminal: whole lines only, the first at step 1 (log_every 5) */
    train_cmd(cmd, sizeof cmd, "plain", "--progress plain");
    int rc = on_pty(cmd);
    T_CHECK(rc == 0 && !stray_cr(out) && !has_esc(out) && strstr(out, "epoch 1/2  step 1/24 (1/12)  ") &&
                strstr(out, val_done),
            "--progress plain on a terminal: lines only, the first at step 1 (rc %d):\n%s", rc, out);

    /* auto on a terminal: the bar, and the validation passes redrawn in place */
    train_cmd(cmd, sizeof cmd, "bar", "");
    rc = on_pty(cmd);
    int redraws = t_count(out, "\r\033[Kval   "), ema = t_count(out, "\r\033[Kval   EMA ");
    int in_place = 1; /* every validation progress text is replaced, never ended by a newline */
    for (const char *p = out; (p = strstr(p, "images/s")); p++)
        in_place = in_place && !strncmp(p + 8, "\r\033[K", 4);
    T_CHECK(rc == 0 && strstr(out, "\r\033[Kepoch 1/2 [") && redraws >= 8 && ema >= 4 && in_place &&
                strstr(out, "\r\033[Kval   epoch 1: top-1") && strstr(out, val_done) &&
                !strstr(out, "step 1/24 (1/12)"),
            "auto on a terminal: the bar; validation redrawn in place (%d redraws, %d of the EMA; "
            "in place %d) and cleared for its result line (rc %d)", redraws, ema, in_place, rc);

    /* none: the header, validation results and epoch ends only */
    train_cmd(cmd, sizeof cmd, "none", "--progress none");
    rc = on_pty(cmd);
    T_CHECK(rc == 0 && !stray_cr(out) && !has_esc(out) && strstr(out, "train: logs_test") &&
                strstr(out, "end of epoch 1") && strstr(out, val_done) && !strstr(out, "step 1/24") &&
                !strstr(out, "step 5/24"),
            "--progress none: no progress lines (rc %d):\n%s", rc, out);

    /* into a pipe: plain */
    train_cmd(cmd, sizeof cmd, "pipe", "2>&1");
    rc = t_run(cmd + 1, out, sizeof out);
    T_CHECK(rc == 0 && !stray_cr(out) && !has_esc(out) && strstr(out, "step 1/24 (1/12)  ") &&
                strstr(out, "step 5/24 (5/12)  loss "),
            "into a pipe: plain lines (rc %d):\n%s", rc, out);

    train_cmd(cmd, sizeof cmd, "bad", "--progress sideways 2>&1");
    rc = t_run(cmd + 1, out, sizeof out);
    T_CHECK(rc == 2 && strstr(out, "--progress takes bar, plain or none (got 'sideways')"),
            "--progress sideways: exit 2 (%d): %s", rc, out);
}

/* Open MPI gives each rank a pseudo-terminal even when mpirun's output goes to a file. */
static void test_mpirun(void) {
    if (!vil_dist_built_with_mpi() || t_run("command -v mpirun >/dev/null", NULL, 0) != 0) {
        T_CHECK(0, "mpirun or an MPI build missing (apt-get install libopenmpi-dev openmpi-bin)");
        return;
    }
    char cmd[8192], log[4200];
    snprintf(log, sizeof log, "%s/mpi.log", dir);
    const char *modes[2] = {"", "--progress bar"};
    for (int i = 0; i < 2; i++) {
        int n = snprintf(cmd, sizeof cmd, "mpirun --oversubscribe -np 2 ");
        n += train_cmd(cmd + n, sizeof cmd - (size_t)n, i ? "mpi_bar" : "mpi", "--set batch=8 ");
        snprintf(cmd + n, sizeof cmd - (size_t)n, "%s > %s 2>&1; cat %s", modes[i], log, log);
        int rc = t_run(cmd, out, sizeof out);
        if (i == 0)
            T_CHECK(rc == 0 && strstr(out, "ranks: 2 processes (mpirun)") && !stray_cr(out) && !has_esc(out) &&
                        strstr(out, "step 1/24 (1/12)  ") && strstr(out, "val   epoch 2:"),
                    "mpirun -np 2 > file: plain lines, no bar (rc %d):\n%s", rc, out);
        else
            T_CHECK(rc == 0 && strstr(out, "\r\033[Kepoch 1/2 ["),
                    "mpirun -np 2 --progress bar > file: the bar, as asked (rc %d)", rc);
    }
}

/* vil eval's progress: lines, or one line redrawn in place and cleared for the result */
static void test_eval_modes(void) {
    char cmd[8192];
    const char *base = " bin/vil eval --model %s/pipe/last.safetensors --data %s --split test --batch 4 "
                       "--device cpu --workers 1 %s";
    snprintf(cmd, sizeof cmd, base, dir, dir, "--progress plain");
    int rc = on_pty(cmd);
    T_CHECK(rc == 0 && !stray_cr(out) && !has_esc(out) && t_count(out, "images  top-1") >= 5 &&
                strstr(out, "\ntop-1 "),
            "vil eval --progress plain on a terminal: lines (rc %d):\n%s", rc, out);
    snprintf(cmd, sizeof cmd, base, dir, dir, "");
    rc = on_pty(cmd);
    T_CHECK(rc == 0 && strstr(out, "\r\033[K      64 images (100%)") && strstr(out, "\r\033[Ktop-1 ") &&
                !strstr(out, "images/s\r\n"),
            "vil eval on a terminal: redrawn in place, cleared for the result (rc %d)", rc);
    snprintf(cmd, sizeof cmd, base, dir, dir, "--progress none");
    rc = on_pty(cmd);
    T_CHECK(rc == 0 && !strstr(out, "images  top-1") && !strstr(out, "images (") && strstr(out, "top-1 "),
            "vil eval --progress none: the result alone (rc %d):\n%s", rc, out);
    snprintf(cmd, sizeof cmd, base, dir, dir, "--progress 1 2>&1");
    rc = t_run(cmd + 1, out, sizeof out);
    T_CHECK(rc == 2 && strstr(out, "--progress takes bar, plain or none"), "vil eval --progress 1: exit 2 (%d)", rc);
}

/* Into a file, plain mode's first line comes after the first step, while the run goes on, long
 * before the first log step (here the epoch's end, at step 1000). */
static void test_first_line(void) {
    char data[4200], cmd[16384], log[4200], pid[64];
    snprintf(data, sizeof data, "%s/big", dir);
    corpus_mkdir("%s%s", data, "");
    corpus_write_idx_set(data, "train", 4000, 16, 16, 4, 0);
    snprintf(log, sizeof log, "%s/first.log", dir);
    snprintf(cmd, sizeof cmd, "bin/vil train --data %s --out %s/first %s --set epochs=1 --set batch=4 "
             "--set log_every=100000 --set eval_every_epochs=0 > %s 2>&1 & echo $!", data, dir, ARGS, log);
    double t0 = vil_now(), seen = -1;
    T_CHECK(t_run(cmd, pid, sizeof pid) == 0 && atol(pid) > 0, "the run started in the background");
    int running = 0;
    while (seen < 0 && vil_now() - t0 < 120) {
        usleep(20000);
        size_t n;
        VilErrCapture cap;
        vil_error_capture(&cap);
        char *b = (char *)vil_read_file(log, &n);
        vil_error_release(&cap);
        if (b && strstr(b, "step 1/1000 (1/1000)  ")) {
            seen = vil_now() - t0;
            running = kill((pid_t)atol(pid), 0) == 0;
            snprintf(out, sizeof out, "%s", b);
        }
        free(b);
    }
    kill((pid_t)atol(pid), SIGTERM); /* saves and stops */
    snprintf(cmd, sizeof cmd, "while kill -0 %ld 2>/dev/null; do sleep 0.1; done", atol(pid));
    t_run(cmd, NULL, 0);
    T_CHECK(seen >= 0 && seen < 60 && running && !strstr(out, "loss "),
            "plain into a file: the line of step 1 after %.1f s, the run still going (%d), no log "
            "line before it:\n%s", seen, running, out);
}

/* ---- the run folder's TensorBoard files ---- */

typedef struct {
    int64_t step;
    int start;     /* a session_log START record */
    char tag[64];  /* a scalar's tag ("" for other records) */
    float value;
} TbRec;

static uint64_t varint(const uint8_t **p, const uint8_t *end) {
    uint64_t v = 0;
    for (int s = 0; *p < end && s < 70; s += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7F) << s;
        if (!(b & 0x80)) break;
    }
    return v;
}

/* The records of an event file, decoded as far as this test needs (TFRecord framing, Event's
 * step, summary value tag and simple_value, session_log status); CRCs are test_tfevents' job. */
static int tb_read(const char *path, TbRec *recs, int max) {
    size_t n;
    uint8_t *buf = vil_read_file(path, &n);
    if (!buf) return -1;
    int k = 0;
    for (size_t at = 0; at + 12 <= n && k < max;) {
        uint64_t len;
        memcpy(&len, buf + at, 8);
        if (n - at < 16 || len > n - at - 16) break;
        const uint8_t *p = buf + at + 12, *end = p + len;
        TbRec *r = &recs[k++];
        memset(r, 0, sizeof *r);
        while (p < end) {
            uint64_t key = varint(&p, end);
            int field = (int)(key >> 3), wire = (int)(key & 7);
            if (wire == 0) {
                uint64_t v = varint(&p, end);
                if (field == 2) r->step = (int64_t)v;
            } else if (wire == 1) p += 8;
            else if (wire == 5) p += 4;
            else if (wire == 2) {
                uint64_t l = varint(&p, end);
                const uint8_t *q = p, *qe = p + l;
                p += l;
                if (field == 7) { /* SessionLog { status = 1 } */
                    while (q < qe) {
                        uint64_t k2 = varint(&q, qe);
                        uint64_t v = varint(&q, qe);
                        if (k2 == (1 << 3 | 0) && v == 1) r->start = 1;
                    }
                } else if (field == 5) { /* Summary { value = 1: Value { tag = 1, simple_value = 2 } } */
                    varint(&q, qe);
                    uint64_t vl = varint(&q, qe);
                    const uint8_t *v = q, *ve = q + vl;
                    while (v < ve) {
                        uint64_t k2 = varint(&v, ve);
                        if (k2 == (1 << 3 | 2)) {
                            uint64_t tl = varint(&v, ve);
                            snprintf(r->tag, sizeof r->tag, "%.*s", (int)tl, (const char *)v);
                            v += tl;
                        } else if (k2 == (2 << 3 | 5)) {
                            memcpy(&r->value, v, 4);
                            v += 4;
                        } else break;
                    }
                }
            } else break;
        }
        at += 16 + len;
    }
    free(buf);
    return k;
}

/* The events files of a run folder in name order (TensorBoard's reading order). */
static int tb_files(const char *run, glob_t *g) {
    char pat[4300];
    snprintf(pat, sizeof pat, "%s/events.out.tfevents.*", run);
    return glob(pat, 0, NULL, g) == 0 ? (int)g->gl_pathc : 0;
}

/* The points of `tag` that TensorBoard shows for a run folder, by one of its loaders' rules:
 * rust: a point of step s drops the tag's points of step >= s (the data server's reservoir
 * preemption); python: a START record after the run's first drops every point of step >= its
 * step (EventAccumulator with file_version 2). The number of points, steps and values out. */
static int tb_view(const char *run, const char *tag, int rust, int64_t *steps, float *vals, int max) {
    glob_t g;
    int nf = tb_files(run, &g), n = 0, starts = 0;
    static TbRec recs[4096];
    for (int f = 0; f < nf; f++) {
        int k = tb_read(g.gl_pathv[f], recs, 4096);
        for (int i = 0; i < k; i++) {
            TbRec *r = &recs[i];
            if (r->start && !rust && starts++ > 0)
                while (n > 0 && steps[n - 1] >= r->step) n--;
            if (strcmp(r->tag, tag) != 0) continue;
            if (rust)
                while (n > 0 && steps[n - 1] >= r->step) n--;
            if (n < max) steps[n] = r->step, vals[n] = r->value, n++;
        }
    }
    if (nf) globfree(&g);
    return n;
}

/* metrics.jsonl's train lines: steps and losses */
static int metrics_losses(const char *run, int64_t *steps, float *vals, int max) {
    char p[4300], line[4096];
    snprintf(p, sizeof p, "%s/metrics.jsonl", run);
    FILE *f = fopen(p, "r");
    if (!f) return -1;
    int n = 0;
    while (fgets(line, sizeof line, f) && n < max) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type"), *s = cJSON_GetObjectItemCaseSensitive(o, "step"),
                    *l = cJSON_GetObjectItemCaseSensitive(o, "loss");
        if (cJSON_IsString(t) && !strcmp(t->valuestring, "train") && cJSON_IsNumber(s) && cJSON_IsNumber(l))
            steps[n] = (int64_t)s->valuedouble, vals[n] = (float)l->valuedouble, n++;
        cJSON_Delete(o);
    }
    fclose(f);
    return n;
}

/* what TensorBoard shows of train/loss (both loaders) is metrics.jsonl's curve */
static int tb_matches_metrics(const char *run, char *why, size_t wn) {
    int64_t ms[256], ts[256];
    float mv[256], tv[256];
    int nm = metrics_losses(run, ms, mv, 256);
    for (int rust = 0; rust < 2; rust++) {
        int nt = tb_view(run, "train/loss", rust, ts, tv, 256);
        int same = nt == nm && nm > 0;
        for (int i = 0; same && i < nm; i++) same = ts[i] == ms[i] && fabsf(tv[i] - mv[i]) <= 1e-5f * fabsf(mv[i]);
        if (!same) {
            int at = snprintf(why, wn, "%s loader: %d points, metrics.jsonl %d; steps", rust ? "Rust" : "Python",
                              nt, nm);
            for (int i = 0; i < nt && at < (int)wn - 8; i++) at += snprintf(why + at, wn - (size_t)at, " %ld", (long)ts[i]);
            return 0;
        }
    }
    snprintf(why, wn, "%d points", nm);
    return 1;
}

static int count_files(const char *run) {
    glob_t g;
    int n = tb_files(run, &g);
    if (n) globfree(&g);
    return n;
}

static void copy(const char *from_dir, const char *to_dir, const char *name) {
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "cp '%s/%s' '%s/%s'", from_dir, name, to_dir, name);
    if (system(cmd) != 0) printf("could not copy %s\n", name);
}

static void test_used_folder(void) {
    char run[4200], cmd[8192], keep[4300], sub[4300], why[512];
    snprintf(run, sizeof run, "%s/used", dir);
    const char *ckpts[3] = {"last.safetensors", "last.state.safetensors", "ema.safetensors"};
    /* an earlier start whose checkpoints were deleted: its logs stay behind */
    train_cmd(cmd, sizeof cmd, "used", "--set log_every=1 --stop-after 3 2>&1");
    T_CHECK(t_run(cmd + 1, out, sizeof out) == 0 && count_files(run) == 1, "a first start (3 steps)");
    glob_t g;
    char first[4400] = "";
    if (tb_files(run, &g)) {
        snprintf(first, sizeof first, "%s", g.gl_pathv[0]);
        globfree(&g);
    }
    for (int i = 0; i < 3; i++) {
        snprintf(keep, sizeof keep, "%s/%s", run, ckpts[i]);
        unlink(keep);
    }
    snprintf(keep, sizeof keep, "%s/notes.txt", run);
    corpus_write(keep, "mine", 4);
    snprintf(sub, sizeof sub, "%s/tb", run);
    corpus_mkdir("%s%s", sub, "");
    snprintf(sub, sizeof sub, "%s/tb/events.out.tfevents.1.host.1.vil", run);
    corpus_write(sub, "", 0);
    sleep(1); /* the next start's event file is named by another second */

    /* a fresh start: the earlier start's event file goes with its metrics, and the header says so */
    train_cmd(cmd, sizeof cmd, "used", "--set log_every=1 --stop-after 3 2>&1");
    int rc = t_run(cmd + 1, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "out:   removed the logs of earlier starts in this folder: 1 TensorBoard "
                                   "event file, metrics.jsonl\n"),
            "a fresh run in a used folder says what it removed (rc %d):\n%s", rc, out);
    T_CHECK(count_files(run) == 1 && access(first, F_OK) != 0 && access(keep, F_OK) == 0 && access(sub, F_OK) == 0,
            "the earlier event file removed (%s); notes.txt and a subfolder's file kept", first);
    T_CHECK(tb_matches_metrics(run, why, sizeof why), "TensorBoard's view is metrics.jsonl's: %s", why);
    TbRec recs[64];
    int k = 0;
    if (tb_files(run, &g)) {
        k = tb_read(g.gl_pathv[0], recs, 64);
        globfree(&g);
    }
    T_CHECK(k >= 3 && !recs[0].start && recs[1].start && recs[1].step == 1 && !recs[2].start,
            "the new file: file_version, then the start record at step 1 (%d records)", k);

    /* a resume keeps it; the steps past the save that a crash logged are dropped by TensorBoard
     * as by metrics.jsonl: the folder saved at step 3 goes on to step 6, then is put back to
     * its step-3 files (a crash after step 6 whose last save was at 3) and resumed to step 5 */
    char saved[4300];
    snprintf(saved, sizeof saved, "%s/saved3", dir);
    corpus_mkdir("%s%s", saved, "");
    for (int i = 0; i < 3; i++) copy(run, saved, ckpts[i]);
    snprintf(cmd, sizeof cmd, "bin/vil train --data %s --resume %s --stop-after 6 2>&1", dir, run);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && count_files(run) == 2 && !strstr(out, "removed the logs"),
            "a resume keeps the earlier event file and adds its own (rc %d)", rc);
    for (int i = 0; i < 3; i++) copy(saved, run, ckpts[i]);
    sleep(1);
    snprintf(cmd, sizeof cmd, "bin/vil train --data %s --resume %s --stop-after 5 2>&1", dir, run);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && count_files(run) == 3 && strstr(out, "at step 3"), "resumed at step 3 (rc %d):\n%s", rc, out);
    T_CHECK(tb_matches_metrics(run, why, sizeof why),
            "after the crash and the resume, TensorBoard's view (Python and Rust loaders) is "
            "metrics.jsonl's, steps 1-5 once each: %s", why);
    k = 0;
    if (tb_files(run, &g) == 3) {
        k = tb_read(g.gl_pathv[2], recs, 64);
        globfree(&g);
    }
    T_CHECK(k >= 2 && recs[1].start && recs[1].step == 4, "the resume's start record is at step 4");
}

int main(void) {
    t_mpi_env();
    /* the runs below are not a launcher's ranks, even when this test is */
    const char *launcher[] = {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMIX_SIZE",
                              "PMIX_RANK", "SLURM_NTASKS", "SLURM_STEP_ID"};
    for (size_t i = 0; i < sizeof launcher / sizeof launcher[0]; i++) unsetenv(launcher[i]);
    dir = corpus_mkdtemp("logs");
    corpus_write_idx_set(dir, "train", 192, 16, 16, 4, 0);
    corpus_write_idx_set(dir, "t10k", 64, 16, 16, 4, 0);
    test_console();
    if (t_run("command -v script >/dev/null", NULL, 0) != 0) T_CHECK(0, "script(1) not found (util-linux)");
    else {
        test_train_modes();
        test_eval_modes();
    }
    test_mpirun();
    test_first_line();
    test_used_folder();
    corpus_rmtree(dir);
    return t_finish();
}
