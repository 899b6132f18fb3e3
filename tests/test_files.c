/* test_files.c: the files vil writes never destroy what a path names (vil/files.c; issue 45,
 * items 1, 2 and 5). Library level: an output is refused when it exists and is not a regular
 * file (FIFO, symbolic link, folder, device), when it is one of the inputs (the same device and
 * inode: a hard link or ./x too) and when its extension says another format; the temporary file
 * of an atomic write is created exclusively under a hidden name nobody can guess (a symbolic
 * link planted at the old predictable name is never followed) and the stale-temporary cleanup
 * still recognises it; appended logs (metrics.jsonl, run.jsonl) refuse links. Command level: the
 * commands refuse such outputs with exit 2 before doing their work, and leave what was there
 * unchanged. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data_corpus.h"
#include "formats/checkpoint.h"
#include "testing.h"
#include "train/runlog.h"
#include "vil/common.h"
#include "vil/model.h"

static char *dir;

static const char *path(const char *name) { return t_path(dir, name); }

/* f's bytes equal s (NUL-terminated) */
static int holds(const char *f, const char *s) {
    FILE *fp = fopen(f, "rb");
    if (!fp) return 0;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = 0;
    return strcmp(buf, s) == 0;
}

static int is_kind(const char *p, mode_t kind) {
    struct stat sb;
    return lstat(p, &sb) == 0 && (sb.st_mode & S_IFMT) == kind;
}

/* the files in dir whose name starts with prefix */
static int count_prefixed(const char *prefix) {
    char cmd[8192], out[4096];
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -c '^%s' ", dir, prefix);
    t_run(cmd, out, sizeof out);
    return atoi(out);
}

/* the calls below report on purpose: their messages go into a capture, returned in msg */
static int quiet_write(const char *p, const char *text, char *msg, size_t cap) {
    VilErrCapture c;
    vil_error_capture(&c);
    int rc = vil_write_file_atomic(p, text, strlen(text));
    vil_error_release(&c);
    snprintf(msg, cap, "%s", c.msg);
    return rc;
}

static int quiet_check(const char *p, const char *exts, char *msg, size_t cap) {
    VilErrCapture c;
    vil_error_capture(&c);
    int rc = vil_output_check(p, exts, "--out");
    vil_error_release(&c);
    snprintf(msg, cap, "%s", c.msg);
    return rc;
}

/* item 1: what exists and is not a regular file is never replaced */
static void test_not_regular(void) {
    char msg[1024];
    const char *victim = path("victim.txt"), *lnk = path("link.csv"), *fifo = path("fifo.csv");
    corpus_write(victim, "precious", 8);
    T_CHECK(symlink(victim, lnk) == 0 && mkfifo(fifo, 0644) == 0, "a symlink and a FIFO made");
    int rc = quiet_write(lnk, "new", msg, sizeof msg);
    T_CHECK(rc == VIL_EUSAGE && strstr(msg, "symbolic link") && is_kind(lnk, S_IFLNK) && holds(victim, "precious"),
            "a symlink output: refused (rc %d), the link and its target unchanged: %s", rc, msg);
    rc = quiet_write(fifo, "new", msg, sizeof msg);
    T_CHECK(rc == VIL_EUSAGE && strstr(msg, "FIFO") && is_kind(fifo, S_IFIFO),
            "a FIFO output: refused (rc %d), still a FIFO: %s", rc, msg);
    mkdir(path("folder.csv"), 0755);
    rc = quiet_write(path("folder.csv"), "new", msg, sizeof msg);
    T_CHECK(rc == VIL_EUSAGE && strstr(msg, "folder") && is_kind(path("folder.csv"), S_IFDIR),
            "a folder output: refused (rc %d): %s", rc, msg);
    /* a character device of our own (the issue: as root, --csv /dev/null replaced /dev/null);
     * mknod needs CAP_MKNOD, which a container may not grant: then /dev/null's own kind is
     * checked through a symlink, which is refused before anything is opened */
    const char *dev = path("null.csv");
    if (mknod(dev, S_IFCHR | 0666, makedev(1, 3)) == 0) {
        rc = quiet_write(dev, "new", msg, sizeof msg);
        T_CHECK(rc == VIL_EUSAGE && strstr(msg, "character device") && is_kind(dev, S_IFCHR),
                "a character device output: refused (rc %d), still a device: %s", rc, msg);
    } else {
        printf("ok   (mknod not permitted here: %s; the device case is covered by the symlink one)\n",
               strerror(errno));
    }
    rc = quiet_write("", "new", msg, sizeof msg);
    T_CHECK(rc == VIL_EUSAGE && strstr(msg, "empty"), "an empty name: refused (rc %d): %s", rc, msg);
    /* a regular file is replaced, as always */
    const char *plain = path("plain.csv");
    corpus_write(plain, "old", 3);
    rc = quiet_write(plain, "new", msg, sizeof msg);
    T_CHECK(rc == 0 && holds(plain, "new"), "a regular file is replaced (rc %d): %s", rc, msg);
    /* a regular file with another name (a hard link): the name is replaced, the other file
     * keeps its contents (rename never writes into a file) */
    const char *other = path("other_name.txt");
    T_CHECK(link(plain, other) == 0, "a hard link made");
    rc = quiet_write(plain, "newer", msg, sizeof msg);
    T_CHECK(rc == 0 && holds(plain, "newer") && holds(other, "new"),
            "a hard-linked output: the name gets the new file, the other name keeps the old one");
}

/* item 1: an input is never an output, whatever the name it is given by */
static void test_inputs(void) {
    char msg[1024];
    const char *in = path("input.pgm");
    corpus_write(in, "P5 1 1 255 x", 12);
    T_CHECK(quiet_check(in, NULL, msg, sizeof msg) == 0, "before tracking, a file is no input");
    vil_inputs_track(1);
    int fd = vil_open_regular(in);
    T_CHECK(fd >= 0, "the input opened");
    if (fd >= 0) close(fd);
    int rc = quiet_check(in, NULL, msg, sizeof msg);
    T_CHECK(rc == VIL_EUSAGE && strstr(msg, "inputs"), "the input itself: refused (rc %d): %s", rc, msg);
    char dotted[4200];
    snprintf(dotted, sizeof dotted, "%s/./input.pgm", dir);
    rc = quiet_check(dotted, NULL, msg, sizeof msg);
    T_CHECK(rc == VIL_EUSAGE && strstr(msg, "same file as the input"), "DIR/./input: refused (rc %d): %s", rc, msg);
    const char *hard = path("hard.pgm");
    link(in, hard);
    rc = quiet_write(hard, "overwritten", msg, sizeof msg);
    T_CHECK(rc == VIL_EUSAGE && strstr(msg, "input.pgm") && holds(in, "P5 1 1 255 x"),
            "a hard link of the input: the write refused naming the input, which is unchanged (rc %d): %s", rc, msg);
    /* vil_input_add: a file named but not opened yet */
    const char *later = path("later.cfg");
    corpus_write(later, "x", 1);
    T_CHECK(vil_input_add(later) == 0 && quiet_check(later, NULL, msg, sizeof msg) == VIL_EUSAGE,
            "vil_input_add: refused as an output before it is read: %s", msg);
    T_CHECK(vil_input_add(path("missing")) == -1, "vil_input_add of a missing file: -1");
    vil_inputs_track(0);
    /* many inputs: the set grows past its first table */
    int all = 1;
    for (int i = 0; i < 300; i++) {
        char name[64];
        snprintf(name, sizeof name, "many_%d.txt", i);
        corpus_write(path(name), "x", 1);
        all &= vil_input_add(path(name)) == 0;
    }
    int refused = 0;
    for (int i = 0; i < 300; i++) {
        char name[64];
        snprintf(name, sizeof name, "many_%d.txt", i);
        refused += quiet_check(path(name), NULL, msg, sizeof msg) == VIL_EUSAGE;
    }
    T_CHECK(all && refused == 300, "300 inputs: every one refused as an output (%d)", refused);
}

/* item 1: an output name whose extension says another format */
static void test_extensions(void) {
    char msg[1024];
    struct {
        const char *name, *exts;
        int ok;
    } cases[] = {
        {"preds.csv", ".csv", 1}, {"PREDS.CSV", ".csv", 1}, {"preds", ".csv", 1}, {"preds.txt", ".csv", 1},
        {"model.safetensors", ".csv", 0}, {"img.pgm", ".csv", 0}, {"x.json", ".csv", 0},
        {"r.jsonl", ".csv .jsonl", 1}, {"r.json", ".csv .jsonl", 0}, {"avg.safetensors", ".safetensors", 1},
        {"avg.pth", ".safetensors", 0}, {"curves.png", ".svg", 0}, {"dir.d/file", ".csv", 1},
        {".hidden", ".csv", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = quiet_check(path(cases[i].name), cases[i].exts, msg, sizeof msg);
        T_CHECK(cases[i].ok ? rc == 0 : rc == VIL_EUSAGE && strstr(msg, "--out") && strstr(msg, cases[i].exts),
                "--out %s for %s: %s (rc %d) %s", cases[i].name, cases[i].exts, cases[i].ok ? "taken" : "refused",
                rc, msg);
    }
}

/* item 2: the temporary file is created exclusively under an unguessable name */
static void test_temporary(void) {
    char msg[1024];
    const char *victim = path("tmp_victim.txt"), *out = path("saved.safetensors");
    corpus_write(victim, "precious", 8);
    /* the name every earlier version used, planted as a link to the victim */
    char planted[4200];
    snprintf(planted, sizeof planted, "%s.tmp.%ld", out, (long)getpid());
    T_CHECK(symlink(victim, planted) == 0, "a symlink planted at NAME.tmp.PID");
    int rc = quiet_write(out, "weights", msg, sizeof msg);
    T_CHECK(rc == 0 && holds(out, "weights") && holds(victim, "precious") && is_kind(planted, S_IFLNK),
            "the write goes elsewhere: the output written, the link's target unchanged (rc %d): %s", rc, msg);
    T_CHECK(count_prefixed("saved.safetensors.tmp.") == 1 && count_prefixed("\\.saved.safetensors.tmp.") == 0,
            "no temporary left behind (only the planted link)");
    unlink(planted);

    /* a temporary of a writer that died (a child killed while it wrote): recognised and removed
     * by the cleanup a run does at its start; a live writer's stays */
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0);
    char dead[4200], live[4200], odd[4200];
    snprintf(dead, sizeof dead, "%s/.saved.safetensors.tmp.%ld.k3j9x0a7b2c1", dir, (long)child);
    snprintf(live, sizeof live, "%s/.saved.safetensors.tmp.%ld.aaaaaaaaaaaa", dir, (long)getpid());
    snprintf(odd, sizeof odd, "%s/.saved.safetensors.tmp.%ld.notours", dir, (long)child);
    corpus_write(dead, "x", 1), corpus_write(live, "x", 1), corpus_write(odd, "x", 1);
    int n = vil_remove_stale_temps(dir);
    T_CHECK(n == 1 && access(dead, F_OK) != 0 && access(live, F_OK) == 0 && access(odd, F_OK) == 0,
            "stale temporaries: .NAME.tmp.DEADPID.RANDOM removed (%d), a live one and a foreign name kept", n);
    unlink(live), unlink(odd);
}

/* item 1: appended logs refuse links, hard links and inputs */
static void test_append(void) {
    const char *victim = path("log_victim.txt");
    corpus_write(victim, "precious", 8);
    mkdir(path("runS"), 0755);
    symlink(victim, path("runS/metrics.jsonl"));
    VilErrCapture c;
    vil_error_capture(&c);
    VilRunLog *r = vil_runlog_open(path("runS"), 0);
    vil_error_release(&c);
    T_CHECK(!r && strstr(c.msg, "symbolic link") && holds(victim, "precious"),
            "metrics.jsonl a symlink: the run log refuses it, the target unchanged: %s", c.msg);
    vil_runlog_close(r);
    mkdir(path("runH"), 0755);
    link(victim, path("runH/metrics.jsonl"));
    vil_error_capture(&c);
    r = vil_runlog_open(path("runH"), 0);
    vil_error_release(&c);
    T_CHECK(!r && strstr(c.msg, "hard links") && holds(victim, "precious"),
            "metrics.jsonl hard-linked: refused, the other file unchanged: %s", c.msg);
    vil_runlog_close(r);
    /* the ordinary case: created, appended, truncated on request */
    FILE *f = vil_fopen_append(path("plain.jsonl"), 0);
    T_CHECK(f && fputs("a\n", f) >= 0 && fclose(f) == 0, "a new log created");
    f = vil_fopen_append(path("plain.jsonl"), 0);
    T_CHECK(f && fputs("b\n", f) >= 0 && fclose(f) == 0 && holds(path("plain.jsonl"), "a\nb\n"), "appended");
    f = vil_fopen_append(path("plain.jsonl"), 1);
    T_CHECK(f && fputs("c\n", f) >= 0 && fclose(f) == 0 && holds(path("plain.jsonl"), "c\n"), "truncated");
    mkfifo(path("fifo.jsonl"), 0644);
    vil_error_capture(&c);
    f = vil_fopen_append(path("fifo.jsonl"), 0);
    vil_error_release(&c);
    T_CHECK(!f && strstr(c.msg, "FIFO"), "a FIFO log: refused at once: %s", c.msg);
}

/* a 16 x 16 RGB model of 2 classes at file */
static int save_model(const char *file) {
    VilConfig c;
    vil_config_default(&c);
    c.img_size = 16, c.patch_size = 4, c.stride = 4, c.embed_dim = 8, c.depth = 1, c.d_state = 4, c.num_classes = 2;
    vil_config_finalize(&c);
    VilModel m;
    if (vil_model_init(&m, &c, &vil_backend_cpu) != 0) return -1;
    vil_model_init_weights(&m, 1);
    int rc = vil_checkpoint_save(&m, file, 0, NULL, 0, NULL);
    vil_model_free(&m);
    return rc;
}

static unsigned char *slurp(const char *p, size_t *n) {
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    unsigned char *b = malloc(*n + 1);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

/* the command's exit code, its output in out; `keep` unchanged by it (bytes) */
static int run_keeps(const char *cmd, char *out, size_t cap, const char *keep, int *kept) {
    size_t n0 = 0, n1 = 0;
    unsigned char *before = keep ? slurp(keep, &n0) : NULL;
    int rc = t_run(cmd, out, cap);
    unsigned char *after = keep ? slurp(keep, &n1) : NULL;
    *kept = !keep || (before && after && n0 == n1 && memcmp(before, after, n0) == 0);
    free(before), free(after);
    return rc;
}

/* items 1 and 12: the commands refuse such outputs with exit 2, before their work, and leave
 * what the name held as it was */
static void test_commands(void) {
    char cmd[16384], out[8192];
    /* copies: t_path's buffers rotate */
    char *model = strdup(path("m.safetensors")), *img = strdup(path("img.png")), *data = strdup(path("data"));
    char *fifo = strdup(path("fifo.csv")), *lnk = strdup(path("link.csv")), *victim = strdup(path("victim.txt"));
    char *newst = strdup(path("new.safetensors"));
    T_CHECK(save_model(model) == 0, "a test model written");
    corpus_write_png(img, 16, 16, 0, 1);
    corpus_mkdir("%s%s", path("data"), "");
    corpus_mkdir("%s%s", path("data/val"), "");
    for (int c = 0; c < 2; c++) {
        char d[64];
        snprintf(d, sizeof d, "data/val/c%d", c);
        corpus_mkdir("%s%s", path(d), "");
        for (int i = 0; i < 3; i++) {
            char f[96];
            snprintf(f, sizeof f, "data/val/c%d/%d.png", c, i);
            corpus_write_png(path(f), 16, 16, c, i);
        }
    }
    int kept, rc;
    struct {
        const char *what, *csv, *keep, *say;
    } cls[] = {
        {"the image it classifies", img, img, "inputs"},
        {"the model", model, model, "inputs"},
        {"a FIFO", fifo, NULL, "FIFO"},
        {"a symlink to a file", lnk, victim, "symbolic link"},
        {"a name saying safetensors", newst, NULL, "safetensors"},
        {"an empty name", "", NULL, "empty"},
    };
    for (size_t i = 0; i < sizeof cls / sizeof cls[0]; i++) {
        snprintf(cmd, sizeof cmd, "timeout 20 bin/vil classify --device cpu --model %s --csv '%s' %s 2>&1", model,
                 cls[i].csv, img);
        rc = run_keeps(cmd, out, sizeof out, cls[i].keep, &kept);
        T_CHECK(rc == 2 && kept && strstr(out, cls[i].say) && !strstr(out, "top-"),
                "classify --csv %s: exit 2 before classifying, nothing changed (rc %d): %s", cls[i].what, rc, out);
    }
    T_CHECK(is_kind(fifo, S_IFIFO) && is_kind(lnk, S_IFLNK) && access(newst, F_OK) != 0,
            "the FIFO and the link are still there; nothing was written under the checkpoint's name");
    /* the same image by another spelling */
    char fixed[16500];
    const char *bin = getenv("VIL_BIN");
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) cwd[0] = 0;
    snprintf(fixed, sizeof fixed, "cd %s && timeout 20 %s/%s classify --device cpu --model %s --csv ./img.png img.png 2>&1",
             dir, bin && *bin && bin[0] == '/' ? "" : cwd, bin && *bin ? bin : "bin/vil", model);
    rc = run_keeps(fixed, out, sizeof out, img, &kept);
    T_CHECK(rc == 2 && kept && strstr(out, "same file as the input 'img.png'"),
            "classify --csv ./img.png img.png: refused (rc %d): %s", rc, out);
    snprintf(cmd, sizeof cmd, "bin/vil classify --device cpu --model %s --csv %s %s 2>&1", model, path("ok.csv"), img);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && access(path("ok.csv"), F_OK) == 0, "classify --csv ok.csv: written (rc %d): %s", rc, out);

    /* eval's two outputs */
    snprintf(cmd, sizeof cmd, "timeout 20 bin/vil eval --device cpu --model %s --data %s --results-file %s 2>&1",
             model, data, fifo);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 2 && strstr(out, "FIFO") && !strstr(out, "top-1"), "eval --results-file FIFO: exit 2 (rc %d): %s", rc, out);
    snprintf(cmd, sizeof cmd, "bin/vil eval --device cpu --model %s --data %s --results-file %s --predictions-file %s 2>&1",
             model, data, path("r.csv"), path("r.csv"));
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 2 && strstr(out, "same file"), "eval: the summary and the predictions in one file refused (rc %d): %s",
            rc, out);
    snprintf(cmd, sizeof cmd, "bin/vil eval --device cpu --model %s --data %s --predictions-file %s 2>&1", model,
             data, model);
    rc = run_keeps(cmd, out, sizeof out, model, &kept);
    T_CHECK(rc == 2 && kept, "eval --predictions-file MODEL: refused, the model unchanged (rc %d): %s", rc, out);
    snprintf(cmd, sizeof cmd, "bin/vil eval --device cpu --model %s --data %s --results-file %s 2>&1", model,
             data, path("summary.json"));
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && access(path("summary.json"), F_OK) == 0, "eval --results-file summary.json written (rc %d): %s",
            rc, out);
    /* convert: OUT may not be IN (by any name), nor a link */
    snprintf(cmd, sizeof cmd, "bin/vil convert %s %s 2>&1", model, model);
    rc = run_keeps(cmd, out, sizeof out, model, &kept);
    T_CHECK(rc == 2 && kept && strstr(out, "inputs"), "convert M M: refused, M unchanged (rc %d): %s", rc, out);
    char *lpth = strdup(path("link.pth"));
    symlink(victim, lpth);
    snprintf(cmd, sizeof cmd, "bin/vil convert %s %s 2>&1", model, lpth);
    rc = run_keeps(cmd, out, sizeof out, victim, &kept);
    T_CHECK(rc == 2 && kept && strstr(out, "symbolic link") && is_kind(lpth, S_IFLNK),
            "convert M link.pth: refused, the link's target unchanged (rc %d): %s", rc, out);
    free(lpth);
    /* plot: --out may not be the metrics it reads, by name or extension */
    corpus_mkdir("%s%s", path("runP"), "");
    const char *line = "{\"type\":\"train\",\"step\":1,\"loss\":2.5,\"lr\":0.001}\n";
    char *metrics = strdup(path("runP/metrics.jsonl"));
    corpus_write(metrics, line, strlen(line));
    snprintf(cmd, sizeof cmd, "bin/vil plot %s --out %s 2>&1", path("runP"), metrics);
    rc = run_keeps(cmd, out, sizeof out, metrics, &kept);
    T_CHECK(rc == 2 && kept, "plot RUN --out RUN/metrics.jsonl: refused, the metrics unchanged (rc %d): %s", rc, out);
    char *svgname = strdup(path("runP/metrics.svg"));
    link(metrics, svgname); /* the same file under an .svg name */
    snprintf(cmd, sizeof cmd, "bin/vil plot %s --out %s 2>&1", path("runP"), svgname);
    rc = run_keeps(cmd, out, sizeof out, metrics, &kept);
    T_CHECK(rc == 2 && kept && strstr(out, "same file as the input"),
            "plot --out a hard link of the metrics it reads: refused (rc %d): %s", rc, out);
    free(metrics), free(svgname);
    free(model), free(img), free(data), free(fifo), free(lnk), free(victim), free(newst);
}

int main(void) {
    dir = corpus_mkdtemp("files");
    test_not_regular();
    test_inputs();
    test_extensions();
    test_temporary();
    test_append();
    test_commands();
    corpus_rmtree(dir);
    return t_finish();
}
