/* test_curves.c: the metrics.jsonl reader (values, unknown keys and types, null, a torn last
 * line, a torn line continued by a resumed run, steps logged again after a resume, an empty
 * file, a missing folder), the training-curve chart of two runs (legends, series, axis labels,
 * aligned x ranges), runs without evaluations or with one point, run labels, and `vil plot`
 * (called in-process: exit codes, default output paths, --label), and the loss agreement of two
 * runs (`vil plot --agree`). With a folder as argument the
 * synthetic runs and their charts are left there to look at. */
#define _GNU_SOURCE /* cli/args.c (included below) reads the CPU affinity */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "charts/curves.h"
#include "tests/testing.h"
#include "vil/common.h"

/* the command itself, as bin/vil runs it (cli/ is not in libvil.a) */
#include "cli/args.c"
#include "cli/plot.c"

static char dir[4096];
static int keep; /* leave the runs and charts in dir to look at */


/* dir/name/metrics.jsonl holding text; returns the run folder (static buffer per slot) */
static const char *write_run(const char *name, const char *text) {
    static char runs[8][4200];
    static int slot;
    char *run = runs[slot++ % 8], path[4300];
    snprintf(run, 4200, "%s/%s", dir, name);
    mkdir(run, 0755);
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    FILE *f = fopen(path, "wb");
    if (f) fputs(text, f), fclose(f);
    return run;
}

static char *read_text(const char *path) {
    size_t n;
    return (char *)vil_read_file(path, &n);
}

/* ---- a realistic run: warmup + cosine lr, a falling noisy loss, top-1 rising to ~76% with
 * the EMA behind early and ahead late; one eval per epoch ---- */

static double top1_at(double f, double final) {
    return f <= 0 ? 0.1 : final * (1 - exp(-5.5 * pow(f, 0.7))) / (1 - exp(-5.5)) * (0.96 + 0.04 * f);
}

static const char *write_realistic(const char *name, int epochs, int done, int spe, int log_every,
                                   double peak_lr, double final_top1, int ema, double ips, uint64_t seed) {
    VilRng rng;
    vil_rng_seed(&rng, seed);
    size_t cap = (size_t)epochs * spe / log_every * 200 + (size_t)epochs * 300 + 4096, k = 0;
    char *s = vil_malloc(cap);
    long total = (long)epochs * spe, warm = 5L * spe;
    double t = 0;
    for (int e = 0; e < done; e++) {
        for (long st = (long)e * spe + 1; st <= (long)(e + 1) * spe; st++) {
            if (st % log_every) continue;
            double f = (double)st / total;
            double lr = st < warm
                            ? peak_lr * st / warm
                            : 1e-5 + 0.5 * (peak_lr - 1e-5) * (1 + cos(M_PI * (st - warm) / (total - warm)));
            double loss = 2.55 + 4.35 * exp(-3 * sqrt(f)) + 0.09 * vil_rng_normal(&rng);
            double v = ips * (1 + 0.006 * vil_rng_normal(&rng)) * (st % spe < log_every ? 0.93 : 1);
            t += log_every * 1024 / v;
            k += (size_t)snprintf(
                s + k, cap - k,
                "{\"type\":\"train\",\"step\":%ld,\"epoch\":%.4f,\"loss\":%.4f,\"lr\":%.6g,"
                "\"images_per_s\":%.1f,\"data_wait\":%.3f,\"grad_norm\":%.3f,\"time\":%.1f}\n",
                st, (double)st / spe, loss, lr, v, 0.02 + 0.01 * vil_rng_uniform(&rng),
                1.2 + 0.3 * vil_rng_normal(&rng), t);
        }
        double f = (double)(e + 1) / epochs, top1 = top1_at(f, final_top1) + 0.3 * vil_rng_normal(&rng);
        double vloss = 0.95 + 5.9 * exp(-4.5 * sqrt(f)) + 0.02 * vil_rng_normal(&rng);
        k += (size_t)snprintf(
            s + k, cap - k,
            "{\"type\":\"eval\",\"step\":%ld,\"epoch\":%d,\"top1\":%.2f,\"top5\":%.2f,\"loss\":%.4f",
            (long)(e + 1) * spe, e + 1, top1, fmin(99, top1 + 17), vloss);
        if (ema) {
            double et = top1_at(f - 0.04 * (1 - f), final_top1) + 0.5 * f;
            k += (size_t)snprintf(s + k, cap - k, ",\"ema_top1\":%.2f,\"ema_top5\":%.2f,\"ema_loss\":%.4f",
                                  et, fmin(99, et + 17), vloss - 0.05 * f);
        }
        t += 20;
        k += (size_t)snprintf(s + k, cap - k, ",\"images\":50000,\"time\":%.1f}\n", t);
    }
    const char *run = write_run(name, s);
    free(s);
    return run;
}

/* ---- reading ---- */

static void test_read(void) {
    const char *run = write_run(
        "basic",
        "{\"type\":\"train\",\"step\":50,\"epoch\":0.16,\"loss\":6.9,\"lr\":0.0001,\"images_per_s\":4400.5,"
        "\"data_wait\":0.05,\"time\":10.5,\"future_key\":[1,{\"a\":2}]}\n"
        "{\"type\":\"train\",\"step\":100,\"epoch\":0.32,\"loss\":6.5,\"lr\":0.0002,\"images_per_s\":4410,"
        "\"data_wait\":0.04,\"grad_norm\":1.25,\"time\":21}\n"
        "{\"type\":\"checkpoint\",\"step\":120,\"path\":\"x\"}\n"
        "\n"
        "{\"type\":\"eval\",\"step\":313,\"epoch\":1,\"top1\":12.3,\"top5\":30.1,\"loss\":3.21,"
        "\"ema_top1\":11,\"ema_top5\":29,\"ema_loss\":3.3,\"images\":10000,\"time\":140.2}\n"
        "{\"type\":\"train\",\"step\":350,\"epoch\":1.12,\"loss\":null,\"lr\":0.0003,\"time\":150}\n"
        "{\"type\":\"train\",\"step\":400,\"epoch\":1.28,\"lo");
    VilRunMetrics m;
    int rc = vil_run_metrics_read(run, &m);
    T_CHECK(rc == 0, "a metrics.jsonl with a torn last line reads (%d)", rc);
    T_CHECK(m.n_train == 3 && m.n_eval == 1, "3 train and 1 eval points (%d, %d)", m.n_train, m.n_eval);
    T_CHECK(m.bad_lines == 1 && m.other_lines == 1, "the torn line and the unknown type skipped (%d, %d)",
            m.bad_lines, m.other_lines);
    if (m.n_train == 3 && m.n_eval == 1) {
        const VilTrainPoint *t = m.train;
        T_CHECK(t[0].step == 50 && t[0].epoch == 0.16 && t[0].loss == 6.9 && t[0].lr == 0.0001 &&
                    t[0].images_per_s == 4400.5 && t[0].data_wait == 0.05 && t[0].time == 10.5,
                "the first train line's values");
        T_CHECK(isnan(t[0].grad_norm) && t[1].grad_norm == 1.25,
                "grad_norm NaN where absent, 1.25 where given");
        T_CHECK(t[2].step == 350 && isnan(t[2].loss) && isnan(t[2].images_per_s) && t[2].lr == 0.0003,
                "null and missing values are NaN");
        const VilEvalPoint *e = m.eval;
        T_CHECK(e->step == 313 && e->epoch == 1 && e->top1 == 12.3 && e->top5 == 30.1 && e->loss == 3.21 &&
                    e->ema_top1 == 11 && e->ema_top5 == 29 && e->ema_loss == 3.3 && e->images == 10000 &&
                    e->time == 140.2,
                "the eval line's values");
    }
    vil_run_metrics_free(&m);
    T_CHECK(!m.train && !m.eval && !m.n_train, "free leaves an empty struct");

    /* resumed from a checkpoint at step 100 after logging up to 150: the crash tore the 200
     * line and the resumed run appended to it; then the log goes on from 150 again */
    run = write_run("resumed",
                    "{\"type\":\"train\",\"step\":50,\"loss\":5}\n"
                    "{\"type\":\"train\",\"step\":100,\"loss\":4}\n"
                    "{\"type\":\"eval\",\"step\":100,\"top1\":10}\n"
                    "{\"type\":\"train\",\"step\":150,\"loss\":3}\n"
                    "{\"type\":\"train\",\"step\":200,\"lo{\"type\":\"train\",\"step\":150,\"loss\":3.5}\n"
                    "{\"type\":\"eval\",\"step\":100,\"top1\":11}\n"
                    "{\"type\":\"train\",\"step\":200,\"loss\":2.5}\n"
                    "{\"step\":300}\n[1,2]\n");
    rc = vil_run_metrics_read(run, &m);
    T_CHECK(rc == 0 && m.n_train == 4 && m.n_eval == 1, "resumed log: 4 train, 1 eval points (%d, %d)",
            m.n_train, m.n_eval);
    if (m.n_train == 4 && m.n_eval == 1)
        T_CHECK(m.train[2].step == 150 && m.train[2].loss == 3.5 && m.train[3].step == 200 &&
                    m.train[3].loss == 2.5 && m.eval[0].top1 == 11,
                "the resumed run's lines replace the steps logged again (%ld %g, %g)", m.train[2].step,
                m.train[2].loss, m.eval[0].top1);
    T_CHECK(m.replaced == 2 && m.bad_lines == 2, "2 replaced, 2 bad lines (%d, %d)", m.replaced, m.bad_lines);
    vil_run_metrics_free(&m);

    /* The embedded NULs above end the C string: write that file by hand. */
    char path[4300];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    static const char nul_text[] = "{\"type\":\"train\",\"step\":50,\"loss\":5}\n\0\0\0\0"
                                   "{\"type\":\"train\",\"step\":100,\"loss\":4}\n";
    FILE *f = fopen(path, "wb");
    if (f) fwrite(nul_text, 1, sizeof nul_text - 1, f), fclose(f);
    rc = vil_run_metrics_read(run, &m);
    T_CHECK(rc == 0 && m.n_train == 2 && m.bad_lines == 0,
            "NUL bytes a crash left before a line are skipped");
    vil_run_metrics_free(&m);

    run = write_run("empty", "");
    rc = vil_run_metrics_read(run, &m);
    T_CHECK(rc == 0 && !m.n_train && !m.n_eval && !m.bad_lines, "an empty file: no points, no error");
    vil_run_metrics_free(&m);

    char missing[4200];
    snprintf(missing, sizeof missing, "%s/no_such_run", dir);
    VilErrCapture cap;
    vil_error_capture(&cap);
    rc = vil_run_metrics_read(missing, &m);
    vil_error_release(&cap);
    T_CHECK(rc == -1 && strstr(cap.msg, "no_such_run/metrics.jsonl") && !m.n_train,
            "a folder without metrics.jsonl: -1 naming the file (%s)", cap.msg);
}

static void test_labels(void) {
    char s[256], cwd[4096];
    T_CHECK(!strcmp(vil_run_label(s, sizeof s, "runs/tiny"), "tiny"), "runs/tiny -> tiny");
    T_CHECK(!strcmp(vil_run_label(s, sizeof s, "runs/tiny//"), "tiny"), "runs/tiny// -> tiny (%s)", s);
    T_CHECK(!strcmp(vil_run_label(s, sizeof s, "tiny"), "tiny"), "tiny -> tiny");
    const char *base = getcwd(cwd, sizeof cwd) ? strrchr(cwd, '/') + 1 : "?";
    T_CHECK(!strcmp(vil_run_label(s, sizeof s, "."), base), ". -> the current folder's name (%s)", s);
    T_CHECK(!strcmp(vil_run_label(s, sizeof s, "/"), "/"), "/ -> / (%s)", s);
}

/* ---- the chart ---- */

static void test_chart(void) {
    double t0 = vil_now();
    const char *a = write_realistic("vil_tiny_300ep", 300, 300, 1251, 50, 1e-3, 76.2, 1, 4400, 1);
    const char *b = write_realistic("vil_tiny_100ep_lr2e-3", 100, 100, 1251, 50, 2e-3, 70.5, 0, 4300, 2);
    double t1 = vil_now();
    VilRunMetrics m[2];
    T_CHECK(vil_run_metrics_read(a, &m[0]) == 0 && vil_run_metrics_read(b, &m[1]) == 0,
            "the two synthetic runs read");
    double t2 = vil_now();
    T_CHECK(m[0].n_train == 7506 && m[0].n_eval == 300 && m[1].n_eval == 100,
            "7506 train, 300 eval points (%d, %d)", m[0].n_train, m[0].n_eval);
    const char *labels[2] = {"vil_tiny_300ep", "vil_tiny_100ep_lr2e-3"};
    char *svg = vil_curves_svg(m, labels, 2);
    double t3 = vil_now();
    printf("     7506 + 2502 train lines: written in %.3f s, read in %.3f s, charted in %.3f s (%zu bytes)\n",
           t1 - t0, t2 - t1, t3 - t2, svg ? strlen(svg) : 0);
    T_CHECK(svg && t3 - t1 < 0.5, "reading and charting 10k lines is cheap (%.3f s)", t3 - t1);
    T_CHECK(svg && t_count(svg, ">vil_tiny_300ep (train)<") == 1 && t_count(svg, ">vil_tiny_300ep (val)<") == 1 &&
                t_count(svg, ">vil_tiny_300ep (EMA)<") == 1 && t_count(svg, ">vil_tiny_300ep<") == 3,
            "the long run's legend entries: train, val, EMA, and its name in 3 panels");
    T_CHECK(svg && t_count(svg, ">vil_tiny_100ep_lr2e-3<") == 3 && !strstr(svg, "lr2e-3 (EMA)"),
            "the run without an EMA has no EMA entry");
    /* each series is one <g> of polylines: loss 2 + 2, top-1 2 + 1, lr 2, images/s 2, and the
     * raw training loss and images/s of both runs pale under their running means */
    T_CHECK(svg && t_count(svg, "<g fill=\"none\" stroke=\"#") == 15, "15 series (%d)",
            svg ? t_count(svg, "<g fill=\"none\" stroke=\"#") : -1);
    T_CHECK(svg && t_count(svg, "stroke-opacity=\"0.3\"") == 4, "4 of them pale (%d)",
            svg ? t_count(svg, "stroke-opacity=\"0.3\"") : -1);
    T_CHECK(svg && t_count(svg, "stroke=\"#1f77b4\"") >= 6 && t_count(svg, "stroke=\"#ff7f0e\"") >= 5,
            "one colour per run, in every panel");
    T_CHECK(svg && t_count(svg, "<polyline") >= 11 && !t_has_nan_inf(svg), "polylines, no nan/inf");
    T_CHECK(svg && t_count(svg, ">step<") == 4 && strstr(svg, ">top-1 (%)<") &&
                strstr(svg, ">cross-entropy<") && strstr(svg, ">learning rate<") && strstr(svg, ">images/s<"),
            "axis labels: step (4 times), top-1 (%%), cross-entropy, learning rate, images/s");
    T_CHECK(svg && strstr(svg, ">training curves: vil_tiny_300ep, vil_tiny_100ep_lr2e-3<"),
            "the title names the runs");
    /* every panel's x axis runs from 0 to the last step of the longer run: the same labels */
    T_CHECK(svg && t_count(svg, ">0<") >= 4 && t_count(svg, ">300k<") == 4,
            "x ticks 0 .. 300k in all four panels (%d)", svg ? t_count(svg, ">300k<") : -1);
    free(svg);

    /* one run: its latest state in the title */
    svg = vil_curves_svg(m, labels, 1);
    T_CHECK(svg && strstr(svg, ">vil_tiny_300ep: step 375300, epoch 300; top-1 ") && strstr(svg, ", EMA "),
            "one run's title: step, epoch, top-1 and EMA");
    free(svg);
    if (keep) {
        char out[4300];
        const char *runs[2] = {a, b};
        snprintf(out, sizeof out, "%s/two_runs.svg", dir);
        vil_curves_write(out, runs, NULL, 2);
        snprintf(out, sizeof out, "%s/one_run.svg", dir);
        vil_curves_write(out, runs, NULL, 1);
        /* as the trainer draws it after its third and its 30th evaluation */
        runs[0] = write_realistic("early_3ep", 300, 3, 1251, 50, 1e-3, 76.2, 1, 4400, 3);
        snprintf(out, sizeof out, "%s/early_3ep.svg", dir);
        vil_curves_write(out, runs, NULL, 1);
        runs[0] = write_realistic("early_30ep", 300, 30, 1251, 50, 1e-3, 76.2, 1, 4400, 3);
        snprintf(out, sizeof out, "%s/early_30ep.svg", dir);
        vil_curves_write(out, runs, NULL, 1);
    }
    vil_run_metrics_free(&m[0]);
    vil_run_metrics_free(&m[1]);
}

static void test_sparse(void) {
    const char *noeval = write_run(
        "no_eval", "{\"type\":\"train\",\"step\":50,\"loss\":6.9,\"lr\":1e-5,\"images_per_s\":900}\n"
                   "{\"type\":\"train\",\"step\":100,\"loss\":6.8,\"lr\":2e-5,\"images_per_s\":950}\n");
    const char *one =
        write_run("one_point", "{\"type\":\"train\",\"step\":50,\"epoch\":0.1,\"loss\":6.9,\"lr\":1e-5,"
                               "\"images_per_s\":900}\n"
                               "{\"type\":\"eval\",\"step\":50,\"epoch\":0.1,\"top1\":0.1,\"loss\":6.9}\n");
    const char *empty = write_run("nothing_yet", "");
    char out[4300];
    snprintf(out, sizeof out, "%s/sparse.svg", dir);

    const char *runs[3] = {noeval, one, empty};
    T_CHECK(vil_curves_write(out, runs, NULL, 1) == 0, "a run without evaluations charts");
    char *svg = read_text(out);
    T_CHECK(svg && strstr(svg, "top-1 accuracy (no evaluation yet)") && t_count(svg, ">no data<") == 1 &&
                strstr(svg, "no_eval: step 100; no evaluation yet") && !t_has_nan_inf(svg),
            "its top-1 panel says no evaluation yet, the others have lines");
    free(svg);

    T_CHECK(vil_curves_write(out, runs + 1, NULL, 1) == 0, "a run of one point charts");
    svg = read_text(out);
    T_CHECK(svg && t_count(svg, ">no data<") == 0 && t_count(svg, "<circle") >= 4 && !t_has_nan_inf(svg),
            "every panel shows its one point");
    T_CHECK(svg && strstr(svg, ">one_point: step 50, epoch 0.10; top-1 0.1% (best 0.1%)<"),
            "the title of one point");
    free(svg);

    T_CHECK(vil_curves_write(out, runs + 2, NULL, 1) == 0, "an empty metrics.jsonl charts");
    svg = read_text(out);
    T_CHECK(svg && t_count(svg, ">no data<") == 4 && strstr(svg, "nothing_yet: no metrics yet"),
            "four empty panels and \"no metrics yet\"");
    free(svg);

    T_CHECK(vil_curves_write(out, runs, NULL, 3) == 0, "the three together chart");
    free(read_text(out));

    /* two runs of the same folder name are told apart by their paths */
    char sub[4200], p2[4300];
    snprintf(sub, sizeof sub, "%s/older", dir);
    mkdir(sub, 0755);
    snprintf(sub, sizeof sub, "%s/older/no_eval", dir);
    mkdir(sub, 0755);
    snprintf(p2, sizeof p2, "%s/metrics.jsonl", sub);
    FILE *f = fopen(p2, "wb");
    if (f) fputs("{\"type\":\"train\",\"step\":10,\"loss\":7}\n", f), fclose(f);
    const char *same[2] = {noeval, sub};
    const char *names[2] = {"mine", NULL};
    snprintf(out, sizeof out, "%s/same_name.svg", dir);
    T_CHECK(vil_curves_write(out, same, NULL, 2) == 0, "two runs named no_eval chart");
    svg = read_text(out);
    T_CHECK(svg && !strstr(svg, ">no_eval (train)<") && strstr(svg, "older/no_eval"),
            "their legends show the paths");
    free(svg);
    T_CHECK(vil_curves_write(out, same, names, 2) == 0 && (svg = read_text(out)) &&
                strstr(svg, ">mine (train)<"),
            "a given label is used; a NULL one falls back to the folder");
    free(svg);

    char missing[4200];
    snprintf(missing, sizeof missing, "%s/no_such_run", dir);
    const char *bad[2] = {noeval, missing};
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_curves_write(out, bad, NULL, 2);
    vil_error_release(&cap);
    T_CHECK(rc == -1 && strstr(cap.msg, "no_such_run/metrics.jsonl"), "an unreadable run: -1 naming it (%s)",
            cap.msg);
    vil_error_capture(&cap);
    snprintf(p2, sizeof p2, "%s/no_such_folder/x.svg", dir);
    rc = vil_curves_write(p2, runs, NULL, 1);
    vil_error_release(&cap);
    T_CHECK(rc == -1 && cap.count >= 1, "an unwritable output: -1 with a message (%s)", cap.msg);
}

/* ---- vil plot, in-process with its output captured ---- */

static int plot(char *out, size_t cap, const char *fmt, ...) {
    char line[8192], *argv[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    int argc = 0;
    for (char *tok = strtok(line, " "); tok && argc < 31; tok = strtok(NULL, " ")) argv[argc++] = tok;
    argv[argc] = NULL;
    char cap_path[4300];
    snprintf(cap_path, sizeof cap_path, "%s/plot_output.txt", dir);
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2), fd = open(cap_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    int rc = vil_cmd_plot(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so), close(se), close(fd);
    char *text = read_text(cap_path);
    snprintf(out, cap, "%s", text ? text : "");
    free(text);
    return rc;
}

static void test_cli(void) {
    char out[8192], path[4300], cwd[4096];
    struct stat st;
    int rc = plot(out, sizeof out, "plot %s/basic", dir);
    snprintf(path, sizeof path, "%s/basic/curves.svg", dir);
    T_CHECK(rc == 0 && stat(path, &st) == 0 && strstr(out, "wrote ") && strstr(out, "basic/curves.svg"),
            "vil plot RUN writes RUN/curves.svg and says so (%d): %s", rc, out);
    T_CHECK(strstr(out, "skipped 1 line that did not parse"), "and names the torn line: %s", out);

    rc = plot(out, sizeof out, "plot %s/basic %s/one_point --out %s/both.svg --label A --label B", dir, dir,
              dir);
    snprintf(path, sizeof path, "%s/both.svg", dir);
    char *svg = read_text(path);
    T_CHECK(rc == 0 && svg && strstr(svg, ">A (train)<") && strstr(svg, ">B (val)<"),
            "--out and --label (%d): %s", rc, out);
    free(svg);

    /* several runs without --out: curves.svg where the command runs */
    if (getcwd(cwd, sizeof cwd) && chdir(dir) == 0) {
        rc = plot(out, sizeof out, "plot basic one_point");
        T_CHECK(rc == 0 && stat("curves.svg", &st) == 0 && strstr(out, "wrote curves.svg"),
                "several runs: ./curves.svg (%d): %s", rc, out);
        if (chdir(cwd) != 0) printf("cannot return to %s\n", cwd);
    }

    rc = plot(out, sizeof out, "plot %s/basic %s/one_point --label A", dir, dir);
    T_CHECK(rc == 2 && strstr(out, "one per run"), "one --label for two runs: exit 2 (%d): %s", rc, out);
    rc = plot(out, sizeof out, "plot");
    T_CHECK(rc == 2 && strstr(out, "usage: vil plot"), "no run: exit 2 with the usage (%d)", rc);
    rc = plot(out, sizeof out, "plot %s/basic --outt x.svg", dir);
    T_CHECK(rc == 2 && strstr(out, "did you mean --out"), "a misspelt flag: exit 2 (%d): %s", rc, out);
    rc = plot(out, sizeof out, "plot %s/basic %s/no_such_run --out %s/x.svg", dir, dir, dir);
    T_CHECK(rc == 1 && strstr(out, "no_such_run/metrics.jsonl"),
            "an unreadable run: exit 1 naming it (%d): %s", rc, out);
    rc = plot(out, sizeof out, "plot --help");
    T_CHECK(rc == 0 && strstr(out, "--label"), "--help: exit 0 with the flags (%d)", rc);
}

/* vil_loss_agreement and `vil plot --agree`: run a logs every 10 steps, run b every 5 (only
 * the multiples of 10 are common), equal losses up to step 150, then b 1% above a; run c has a
 * null loss at step 220 (how metrics.jsonl holds a NaN); run d shares no step with a. */
static void test_agreement(void) {
    char ta[8192] = "", tb[16384] = "", tc[8192] = "", td[256], te[16384] = "";
    size_t ka = 0, kb = 0, kc = 0, ke = 0;
    for (int st = 5; st <= 300; st += 5) {
        double la = 3.0 - st / 200.0, lb = st > 150 ? la * 1.01 : la;
        kb += (size_t)snprintf(tb + kb, sizeof tb - kb, "{\"type\":\"train\",\"step\":%d,\"loss\":%.9g}\n", st, lb);
        /* e: b with step 155 5% off, for the long listing (60 windows of 1 step) */
        ke += (size_t)snprintf(te + ke, sizeof te - ke, "{\"type\":\"train\",\"step\":%d,\"loss\":%.9g}\n", st,
                               st == 155 ? lb * 1.05 : lb);
        if (st % 10) continue;
        ka += (size_t)snprintf(ta + ka, sizeof ta - ka, "{\"type\":\"train\",\"step\":%d,\"loss\":%.9g}\n", st, la);
        kc += (size_t)snprintf(tc + kc, sizeof tc - kc, st == 220 ? "{\"type\":\"train\",\"step\":%d,\"loss\":null}\n"
                                                                   : "{\"type\":\"train\",\"step\":%d,\"loss\":%.9g}\n", st, la);
    }
    snprintf(td, sizeof td, "{\"type\":\"train\",\"step\":7,\"loss\":2}\n{\"type\":\"train\",\"step\":13,\"loss\":2}\n");
    const char *ra = write_run("agree_a", ta), *rb = write_run("agree_b", tb), *rc_ = write_run("agree_c", tc),
               *rd = write_run("agree_d", td);
    VilRunMetrics a, b, c, d;
    int ok = !vil_run_metrics_read(ra, &a) && !vil_run_metrics_read(rb, &b) && !vil_run_metrics_read(rc_, &c) &&
             !vil_run_metrics_read(rd, &d);
    T_CHECK(ok && a.n_train == 30 && b.n_train == 60, "the four runs read (%d: %d, %d points)", ok, a.n_train, b.n_train);
    if (!ok) return;
    VilLossWindow w[8];
    double worst;
    int at, n = vil_loss_agreement(&a, &b, 50, w, 8, &worst, &at);
    /* windows 10-50 (5 points), 60-100, ..., 260-300; the means of b are 1.01 x a's from 160 on */
    int shape = n == 6 && w[0].first == 10 && w[0].last == 50 && w[0].points == 5 && w[1].first == 60 &&
                w[5].first == 260 && w[5].last == 300 && w[5].points == 5;
    double want3 = (5 * 0.01 * (3.0 - 180 / 200.0) - 0.01 * (3.0 - 160 / 200.0) + 0.01 * (3.0 - 160 / 200.0)) /
                   (5 * (3.0 - 180 / 200.0)); /* window 160-200: all five above; = 1% */
    T_CHECK(shape && w[0].rel == 0 && w[2].rel < 1e-12 && fabs(w[3].rel - want3) < 1e-6 && fabs(worst - 0.01) < 1e-6 &&
                at >= 3 && fabs(w[at].a - (3.0 - w[at].first / 200.0 - 0.1)) < 1e-9,
            "a against b: %d windows (want 6), rel %g %g %g, worst %g at %d", n, n > 0 ? w[0].rel : -1,
            n > 3 ? w[3].rel : -1, n > 5 ? w[5].rel : -1, worst, at);
    n = vil_loss_agreement(&a, &c, 50, w, 8, &worst, &at);
    T_CHECK(n == 6 && isinf(worst) && at == 4 && w[4].first == 210 && w[3].rel == 0,
            "a NaN loss makes its window's difference infinite (%d windows, worst %g at %d)", n, worst, at);
    n = vil_loss_agreement(&a, &d, 50, w, 8, &worst, &at);
    T_CHECK(n == 0 && worst == 0 && at == -1, "no common step: no window (%d)", n);
    n = vil_loss_agreement(&a, &b, 100, w, 2, &worst, &at);
    T_CHECK(n == 3 && w[1].first == 110 && w[1].points == 10 && fabs(worst - 0.01) < 1e-6 && at == 2,
            "window 100, cap 2: 3 windows counted, 2 stored (%d; worst %g at %d)", n, worst, at);
    vil_run_metrics_free(&a), vil_run_metrics_free(&b), vil_run_metrics_free(&c), vil_run_metrics_free(&d);

    char out[16384];
    int rc = plot(out, sizeof out, "plot %s %s --agree 1.5 --out %s/agree.svg", ra, rb, dir);
    T_CHECK(rc == 0 && strstr(out, "worst window 1.00% over 6 windows, tolerance 1.5%: agrees") &&
                strstr(out, "160-200") && strstr(out, "wrote "),
            "vil plot --agree 1.5: agrees, exit 0 (%d): %s", rc, out);
    rc = plot(out, sizeof out, "plot %s %s %s --agree 1.5 --window 100 --label A --label B --label C --out %s/agree.svg",
              ra, rb, rc_, dir);
    T_CHECK(rc == 1 && strstr(out, "B: worst window 1.00% over 3 windows, tolerance 1.5%: agrees") &&
                strstr(out, "C: worst window inf% over 3 windows") && strstr(out, "DIFFERS"),
            "a run that diverges (NaN): exit 1, named by its label (%d): %s", rc, out);
    rc = plot(out, sizeof out, "plot %s %s --agree 0.5 --out %s/agree.svg", ra, rb, dir);
    T_CHECK(rc == 1 && strstr(out, "tolerance 0.5%: DIFFERS"), "--agree 0.5: differs, exit 1 (%d): %s", rc, out);
    rc = plot(out, sizeof out, "plot %s %s --agree 1 --out %s/agree.svg", ra, rd, dir);
    T_CHECK(rc == 1 && strstr(out, "nothing to compare"), "no common step: exit 1 (%d): %s", rc, out);
    const char *re = write_run("agree_e", te);
    rc = plot(out, sizeof out, "plot %s %s --agree 1 --window 1 --out %s/agree.svg", rb, re, dir);
    T_CHECK(rc == 1 && strstr(out, "155-155") && strstr(out, "5.00%  (the worst)") && strstr(out, "5-5 ") &&
                strstr(out, "300-300") && !strstr(out, "160-160") && strstr(out, "worst window 5.00% over 60 windows"),
            "60 windows: the first, the worst and the last listed (%d): %s", rc, out);
    const char *misuse[] = {"plot %s --agree 1", "plot %s %s --window 10", "plot %s %s --agree x",
                            "plot %s %s --agree -1", "plot %s %s --agree 1 --window 0"};
    const char *says[] = {"give two or more", "--window goes with --agree", "wants a percentage",
                          "wants a percentage", "at least 1 step"};
    for (int k = 0; k < 5; k++) {
        rc = plot(out, sizeof out, misuse[k], ra, rb);
        T_CHECK(rc == 2 && strstr(out, says[k]), "'%s': exit 2 saying '%s' (%d): %s", misuse[k], says[k], rc, out);
    }
}

/* a real XML parser, where python3 is installed */
static void test_xml(void) {
    char cmd[8800], out[512];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import sys, xml.etree.ElementTree as E; "
             "[E.parse(f) for f in sys.argv[1:]]' %s/both.svg %s/sparse.svg 2>&1",
             dir, dir);
    int st = t_run(cmd, out, sizeof out);
    if (st == 127)
        printf("     (no python3: XML parse check skipped)\n");
    else
        T_CHECK(st == 0, "the charts parse as XML: %s", out);
}

int main(int argc, char **argv) {
    keep = argc > 1;
    if (keep) {
        snprintf(dir, sizeof dir, "%s", argv[1]);
        if (vil_mkdir_p(dir) != 0) return 1;
    } else {
        snprintf(dir, sizeof dir, "/tmp/vil_test_curves_XXXXXX");
        if (!mkdtemp(dir)) {
            printf("mkdtemp: %s\n", strerror(errno));
            return 1;
        }
    }
    test_read();
    test_labels();
    test_chart();
    test_sparse();
    test_cli();
    test_agreement();
    test_xml();
    if (keep) {
        printf("     the runs and charts are in %s\n", dir);
    } else {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) printf("     could not remove %s\n", dir);
    }
    return t_finish();
}
