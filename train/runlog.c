/* runlog.c: the run folder's metrics.jsonl, config.cfg and run.jsonl (runlog.h). */
#define _GNU_SOURCE
#include "train/runlog.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "charts/curves.h"
#include "train/tfevents.h"
#include "vil/common.h"
#include "vil/version.h" /* VIL_VERSION: the commit comes from the command (version.o) */

struct VilRunLog {
    char *dir, *metrics_path;
    FILE *metrics;
    VilTfEvents *tb;   /* NULL after a failed write (said once) */
    double t0, offset; /* this start's clock, and the seconds the kept lines had reached */
    char cleared[128]; /* a fresh start: the earlier starts' logs it removed ("" none) */
};

/* The lines of an existing metrics.jsonl up to `step` (a torn or unreadable line ends it: what
 * follows was written by a crashed run), rewritten atomically; *seconds: the last kept "time". */
static int keep_until(const char *path, long step, double *seconds) {
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT) return 0;
    FILE *f = vil_fopen_regular(path, "r"); /* a FIFO is refused, not waited on */
    if (!f) return -1;
    char *line = NULL, *kept = NULL;
    size_t cap = 0, len = 0, kcap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        cJSON *o = line[n - 1] == '\n' ? cJSON_Parse(line) : NULL;
        const cJSON *s = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
        const cJSON *t = o ? cJSON_GetObjectItemCaseSensitive(o, "time") : NULL;
        int keep = cJSON_IsNumber(s) && s->valuedouble <= (double)step;
        if (keep && cJSON_IsNumber(t)) *seconds = t->valuedouble;
        cJSON_Delete(o);
        if (!keep) break;
        if (len + (size_t)n > kcap) {
            kcap = 2 * (len + (size_t)n) + 4096;
            kept = vil_realloc(kept, kcap);
        }
        memcpy(kept + len, line, (size_t)n);
        len += (size_t)n;
    }
    free(line);
    fclose(f);
    int rc = vil_write_file_atomic(path, kept ? kept : "", len);
    free(kept);
    return rc;
}

static double wall_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* A fresh start in a folder that earlier starts logged into (none of them saved a checkpoint,
 * or the folder would have been refused): their event files, which TensorBoard would draw in
 * the same run as this one, and curves.svg go, as their metrics.jsonl lines do; r->cleared
 * says which there were. 0, or -1 (reported). */
static int clear_earlier_logs(VilRunLog *r) {
    struct stat st;
    int had_metrics = stat(r->metrics_path, &st) == 0 && st.st_size > 0;
    int events = vil_tfevents_remove_all(r->dir);
    if (events < 0) return -1;
    char *svg = vil_path_join(r->dir, "curves.svg");
    int had_svg = unlink(svg) == 0;
    free(svg);
    char *p = r->cleared, *end = r->cleared + sizeof r->cleared;
    if (events)
        p += snprintf(p, (size_t)(end - p), "%d TensorBoard event file%s", events, events == 1 ? "" : "s");
    if (had_metrics) p += snprintf(p, (size_t)(end - p), "%smetrics.jsonl", p > r->cleared ? ", " : "");
    if (had_svg) snprintf(p, (size_t)(end - p), "%scurves.svg", p > r->cleared ? ", " : "");
    return 0;
}

VilRunLog *vil_runlog_open(const char *dir, long step) {
    VilRunLog *r = vil_calloc(1, sizeof *r);
    r->dir = vil_strdup(dir);
    r->metrics_path = vil_path_join(dir, "metrics.jsonl");
    if (step > 0 ? keep_until(r->metrics_path, step, &r->offset) != 0 : clear_earlier_logs(r) != 0) goto fail;
    if (!(r->metrics = vil_fopen_append(r->metrics_path, step == 0))) goto fail;
    r->t0 = vil_now();
    double now = wall_clock();
    if (!(r->tb = vil_tfevents_open(dir, now))) goto fail;
    /* a start record at the first step this start trains: after a resume, TensorBoard drops
     * the points a crashed start logged past the resumed step, as metrics.jsonl drops its lines
     * (the fresh start's record is the run's first, which TensorBoard takes as no restart) */
    if (vil_tfevents_restart(r->tb, step + 1, now) != 0 || vil_tfevents_flush(r->tb) != 0) goto fail;
    return r;
fail:
    vil_runlog_close(r);
    return NULL;
}

void vil_runlog_close(VilRunLog *r) {
    if (!r) return;
    if (r->metrics) fclose(r->metrics);
    vil_tfevents_close(r->tb);
    free(r->dir);
    free(r->metrics_path);
    free(r);
}

const char *vil_runlog_cleared(const VilRunLog *r) { return r->cleared; }

double vil_runlog_seconds(const VilRunLog *r) { return r->offset + (vil_now() - r->t0); }

static void tb_failed(VilRunLog *r) {
    vil_warn("the TensorBoard events of %s are no longer written (see above)", r->dir);
    vil_tfevents_close(r->tb);
    r->tb = NULL;
}

/* one object as a line, flushed: a reader (vil plot, a tail -f) sees whole lines */
static int put_line(VilRunLog *r, cJSON *o) {
    if (r->tb && vil_tfevents_flush(r->tb) != 0) tb_failed(r);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) VIL_FATAL("cJSON_PrintUnformatted failed");
    int ok = fprintf(r->metrics, "%s\n", s) >= 0 && fflush(r->metrics) == 0;
    cJSON_free(s);
    if (!ok) vil_error("cannot write '%s': %s", r->metrics_path, strerror(errno));
    return ok ? 0 : -1;
}

/* a number of a metrics line, and the same scalar for TensorBoard under prefix/k */
static void num(VilRunLog *r, cJSON *o, const char *prefix, long step, const char *k, float v) {
    cJSON_AddNumberToObject(o, k, vil_float_clean(v));
    char tag[64];
    snprintf(tag, sizeof tag, "%s/%s", prefix, k);
    if (r->tb && vil_tfevents_scalar(r->tb, tag, step, wall_clock(), v) != 0) tb_failed(r);
}

/* the run's clock, to the millisecond */
static void add_time(const VilRunLog *r, cJSON *o) {
    cJSON_AddNumberToObject(o, "time", round(vil_runlog_seconds(r) * 1e3) / 1e3);
}

int vil_runlog_train(VilRunLog *r, const VilTrainProgress *p, double epochs_done) {
    cJSON *o = cJSON_CreateObject();
    long st = p->step;
    cJSON_AddStringToObject(o, "type", "train");
    cJSON_AddNumberToObject(o, "step", (double)st);
    cJSON_AddNumberToObject(o, "epoch", round(epochs_done * 1e4) / 1e4);
    num(r, o, "train", st, "loss", p->loss);
    num(r, o, "train", st, "lr", p->lr);
    num(r, o, "train", st, "images_per_s", (float)(round(p->images_per_s * 10) / 10));
    num(r, o, "train", st, "data_wait", (float)(round(p->data_wait * 1e4) / 1e4));
    if (p->grad_norm >= 0) num(r, o, "train", st, "grad_norm", p->grad_norm);
    add_time(r, o);
    return put_line(r, o);
}

int vil_runlog_eval(VilRunLog *r, const VilEvalRecord *e) {
    cJSON *o = cJSON_CreateObject();
    long st = e->step;
    cJSON_AddStringToObject(o, "type", "eval");
    cJSON_AddNumberToObject(o, "step", (double)st);
    cJSON_AddNumberToObject(o, "epoch", e->epoch);
    num(r, o, "val", st, "top1", e->top1);
    num(r, o, "val", st, "top5", e->top5);
    num(r, o, "val", st, "loss", e->loss);
    if (e->has_ema) {
        num(r, o, "val", st, "ema_top1", e->ema_top1);
        num(r, o, "val", st, "ema_top5", e->ema_top5);
        num(r, o, "val", st, "ema_loss", e->ema_loss);
    }
    cJSON_AddNumberToObject(o, "images", (double)e->images);
    add_time(r, o);
    if (put_line(r, o) != 0) return -1;
    /* the chart from the file as it now stands; a failure is said, the run goes on */
    char *svg = vil_path_join(r->dir, "curves.svg");
    const char *dirs[1] = {r->dir};
    if (vil_curves_write(svg, dirs, NULL, 1) != 0) vil_warn("%s not drawn (see above)", svg);
    free(svg);
    return 0;
}

/* a resume at another global batch, in metrics.jsonl where the curves read it */
static int put_rebatch(VilRunLog *r, const VilRunStart *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "resume");
    cJSON_AddNumberToObject(o, "step", (double)s->step);
    cJSON_AddNumberToObject(o, "global_batch", (double)s->global_batch);
    cJSON_AddNumberToObject(o, "from_global_batch", (double)s->from_global_batch);
    add_time(r, o);
    return put_line(r, o);
}

int vil_runlog_start(VilRunLog *r, const VilConfig *mc, const VilTrainConfig *tc, const VilRunStart *s) {
    if (s->from_global_batch > 0 && put_rebatch(r, s) != 0) return -1;
    /* config.cfg: the keys as --print-config gives them, which --config reads back */
    char *cfg = vil_path_join(r->dir, "config.cfg");
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m) VIL_FATAL("open_memstream failed");
    fprintf(m, "# the effective configuration of this run (vil %s), written at its start at step "
               "%ld;\n# vil train --config %s --data DATA trains it again\n", VIL_VERSION, s->step, cfg);
    vil_config_print(mc, m);
    vil_train_config_print(tc, m);
    fclose(m);
    int rc = vil_write_file_atomic(cfg, text, len);
    free(text);
    free(cfg);
    if (rc != 0) return -1;

    cJSON *o = cJSON_CreateObject();
    time_t now = time(NULL);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S%z", localtime(&now));
    cJSON_AddStringToObject(o, "started", when);
    cJSON_AddStringToObject(o, "start", s->step > 0 ? "resume" : "fresh");
    cJSON_AddNumberToObject(o, "step", (double)s->step);
    cJSON_AddStringToObject(o, "command", s->command ? s->command : "");
    char cwd[4096];
    cJSON_AddStringToObject(o, "cwd", getcwd(cwd, sizeof cwd) ? cwd : "?");
    cJSON_AddStringToObject(o, "version", VIL_VERSION);
    cJSON_AddStringToObject(o, "commit", s->commit ? s->commit : "unknown");
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    cJSON_AddStringToObject(o, "host", host);
    cJSON_AddStringToObject(o, "device", s->device ? s->device : "?");
    cJSON_AddNumberToObject(o, "ranks", s->ranks);
    cJSON_AddNumberToObject(o, "accum_steps", s->accum);
    cJSON_AddNumberToObject(o, "global_batch", (double)s->global_batch);
    if (s->from_global_batch > 0) cJSON_AddNumberToObject(o, "from_global_batch", (double)s->from_global_batch);
    cJSON_AddStringToObject(o, "data", s->data ? s->data : "");
    cJSON_AddStringToObject(o, "train", s->train_source ? s->train_source : "");
    cJSON_AddNumberToObject(o, "train_images", (double)s->train_images);
    if (s->val_source) {
        cJSON_AddStringToObject(o, "val", s->val_source);
        cJSON_AddNumberToObject(o, "val_images", (double)s->val_images);
    }
    char *line = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!line) VIL_FATAL("cJSON_PrintUnformatted failed");
    char *runs = vil_path_join(r->dir, "run.jsonl");
    FILE *f = vil_fopen_append(runs, 0);
    int ok = f && fprintf(f, "%s\n", line) >= 0;
    if (f && fclose(f) != 0) ok = 0;
    if (f && !ok) vil_error("cannot write '%s': %s", runs, strerror(errno));
    free(runs);
    cJSON_free(line);
    return ok ? 0 : -1;
}
