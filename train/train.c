/* train.c: the training run (train.h) behind `vil train` (cli/train.c): the loop of
 * doc/recipe.md written once against VilModel / VilBackend in pieces (setup, step, log, end of
 * epoch, stop), the validation pass after epochs, checkpoints and the training state that makes
 * --resume continue bitwise-identically on the CPU. */
#define _GNU_SOURCE
#include "train/train.h"
#include "train/runlog.h"

#include <cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/feed.h"
#include "data/image.h"
#include "data/loader.h"
#include "data/transform.h"
#include "eval/eval.h"
#include "formats/checkpoint.h"
#include "vil/common.h"
#include "vil/model.h"
#include "formats/safetensors.h"

#define STATE_FORMAT "vil-train-state"
#define STATE_VERSION "1"
/* keeps the drop-path stream apart from the loader's streams keyed by the same seed */
#define TAG_DROP_PATH 0x64726f7070617468ULL

typedef struct {
    const VilTrainRun *run;
    const VilDist *dist;  /* NULL: one process */
    int rank, world;      /* rank 0 alone prints and writes files */
    int accum;            /* micro-batches per step */
    int quiet;            /* run->quiet, or a rank other than 0 */
    const VilConfig *mc;
    const VilTrainConfig *tc;
    const VilBackend *be;
    FILE *log;
    VilDataset *ds, *val_ds;
    VilLoader *loader, *val_loader;
    VilModel m;           /* owns its AdamW moments and its EMA (m.ema, NULL when off) */
    int model_ready;
    char **class_names;
    int n_classes;
    /* position: the next batch to train on is batch `epoch_batch` of epoch `epoch` */
    long step;
    int epoch, epoch_batch;
    long spe, total_steps, warmup_steps, global_batch;
    double peak_lr;
    float best_top1, last_loss;
    long best_step; /* the step best.safetensors holds; -1: none yet, or a state too old to say */
    int stale_removed; /* temporaries of killed saves removed from the output folder */
    char *path_last, *path_state, *path_best, *path_ema;
    int lock_fd;       /* OUT/train.lock, flock'ed by rank 0 for the run; -1: none */
    /* the inputs go to the device one step ahead (data/feed.h): images, targets and, with drop
     * path, the step's drop-path scales, staged per feed slot in dp_host */
    VilFeed feed;
    float *dp_host[2];
    /* progress: the current log interval (since t_int: int_steps steps, wait_int seconds waiting
     * for the loader) and this process's steps (train_time seconds for steps_here steps) */
    double t_start, t_int, wait_int, train_time;
    double eval_secs, eval_total; /* the last validation pass (model and EMA); all of them, in train_time */
    long steps_here, int_steps;
    float lr;             /* of the last step */
    float *host_losses;   /* (batch) */
    double loss_sum;      /* a log step's losses of the micro-batches before its last */
    VilRunLog *runlog;    /* metrics.jsonl and the run's record (rank 0; NULL after a failed write) */
    /* a terminal gets a progress bar on its last line, redrawn in place (tty); a log file or
     * Slurm's output plain lines only */
    int tty, bar_shown;
    double bar_t;
} Trainer;

/* ---------------- small helpers ---------------- */

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}


static void fmt_duration(char *buf, size_t n, double s) {
    if (!(s >= 0) || s > 1e8) snprintf(buf, n, "?");
    else if (s >= 3600) snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else if (s >= 60) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(buf, n, "%.0fs", s);
}

/* The progress stream, the bar cleared first: every line the loop prints goes through it. */
static FILE *out_log(Trainer *T) {
    if (T->bar_shown) {
        fputs("\r\033[K", T->log);
        T->bar_shown = 0;
    }
    return T->log;
}

/* Validation passes still due: after every eval_every_epochs-th epoch and after the last. */
static int evals_left(const Trainer *T) {
    if (!T->val_loader || T->spe < 1) return 0;
    int every = T->tc->eval_every_epochs, last = (int)((T->total_steps - 1) / T->spe), n = 0;
    for (int e = T->epoch; e <= last; e++) n += (e + 1) % every == 0 || e == last;
    return n;
}

/* Seconds left: the steps at this run's pace (saves in, evaluations out), plus the evaluations
 * due at the last one's length; before the first, the val images at three times the training
 * pace per pass (a forward alone), twice with an EMA. elapsed: seconds of steps_here steps. */
static double eta_seconds(const Trainer *T, double elapsed) {
    if (T->steps_here <= 0) return -1;
    double per_step = (elapsed - T->eval_total) / (double)T->steps_here, per_eval = T->eval_secs;
    if (per_eval <= 0 && T->val_ds && per_step > 0)
        per_eval = (T->m.ema ? 2 : 1) * vil_dataset_size(T->val_ds) / (3.0 * T->global_batch / per_step);
    return per_step * (double)(T->total_steps - T->step) + evals_left(T) * per_eval;
}

/* The bar, at most five times a second: the epoch's share, the last logged loss, the ETA. */
static void draw_bar(Trainer *T) {
    double now = vil_now();
    if (!T->tty || now - T->bar_t < 0.2 || T->steps_here == 0) return;
    T->bar_t = now;
    enum { W = 24 };
    char bar[W + 1];
    int fill = (int)((double)T->epoch_batch / (double)T->spe * W);
    for (int i = 0; i < W; i++) bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    bar[W] = 0;
    char eta[32];
    fmt_duration(eta, sizeof eta, eta_seconds(T, T->train_time + (now - T->t_int)));
    fprintf(T->log, "\r\033[Kepoch %d/%d [%s] %d/%ld  step %ld/%ld", T->epoch + 1, T->tc->epochs, bar,
            T->epoch_batch, T->spe, T->step, T->total_steps);
    if (T->last_loss > 0) fprintf(T->log, "  loss %.4f", T->last_loss);
    fprintf(T->log, "  eta %s", eta);
    fflush(T->log);
    T->bar_shown = 1;
}

/* A metrics write that failed (a full disk): said once; training goes on without them. */
static void runlog_failed(Trainer *T) {
    vil_warn("%s/metrics.jsonl is no longer written from step %ld on (see above); training goes on",
             T->run->out_dir, T->step);
    vil_runlog_close(T->runlog);
    T->runlog = NULL;
}

char *vil_train_state_path(const char *resume) {
    struct stat st;
    if (stat(resume, &st) == 0 && S_ISDIR(st.st_mode)) return vil_path_join(resume, "last.state.safetensors");
    if (ends_with(resume, ".state.safetensors")) return vil_strdup(resume);
    size_t n = strlen(resume) + 32;
    char *p = vil_malloc(n);
    if (ends_with(resume, ".safetensors"))
        snprintf(p, n, "%.*s.state.safetensors", (int)(strlen(resume) - strlen(".safetensors")), resume);
    else snprintf(p, n, "%s.state.safetensors", resume);
    return p;
}

/* ---------------- the state file ---------------- */

static int state_open(const char *path, VilSafetensors *st) {
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_st_read(path, st);
    vil_error_release(&cap);
    if (rc != 0) {
        vil_error("cannot resume: %s (--resume takes OUT/last.safetensors, its .state.safetensors "
                  "file or the run folder)", cap.msg);
        return -1;
    }
    const char *f = vil_st_meta(st, "vil.format");
    if (!f || strcmp(f, STATE_FORMAT) != 0) {
        vil_error("cannot resume: '%s' is not a vil training state (no vil.format = %s)", path,
                  STATE_FORMAT);
        vil_st_free(st);
        return -1;
    }
    const char *v = vil_st_meta(st, "vil.version");
    if (!v || strcmp(v, STATE_VERSION) != 0) {
        vil_error("cannot resume: '%s' has state version %s, this vil reads %s", path, v ? v : "?",
                  STATE_VERSION);
        vil_st_free(st);
        return -1;
    }
    return 0;
}

int vil_train_state_read_config(const char *state_path, VilConfig *model, VilTrainConfig *train) {
    VilSafetensors st;
    if (state_open(state_path, &st) != 0) return -1;
    const char *mj = vil_st_meta(&st, "vil.config"), *tj = vil_st_meta(&st, "vil.train_config");
    int rc = -1;
    if (!mj || !tj) vil_error("cannot resume: '%s' holds no configuration", state_path);
    else if (vil_config_from_json(model, mj) == 0 && vil_train_config_from_json(train, tj) == 0) rc = 0;
    vil_st_free(&st);
    return rc;
}

#define STATE_DAMAGED "the state file is damaged or was edited; restore it from a backup, or " \
    "start a new run in another folder (--init takes the weights of a checkpoint)"

/* A state field as an integer in lo..hi, or an error naming the field and the file: a state
 * file is read back from disk, so every number in it is checked before it places the run. */
static int meta_long(const VilSafetensors *st, const char *path, const char *key, long lo, long hi,
                     long *out) {
    const char *s = vil_st_meta(st, key);
    if (!s || vil_parse_int(s, out) != 0) {
        vil_error("cannot resume: '%s' lacks a valid '%s' (an integer)", path, key);
        return -1;
    }
    if (*out < lo || *out > hi) {
        vil_error("cannot resume: '%s' has %s = %ld, outside %ld..%ld: " STATE_DAMAGED, path, key,
                  *out, lo, hi);
        return -1;
    }
    return 0;
}

/* the state's numbers that disagree with each other or with the run */
static int state_bad(const char *path, const char *key, const char *why) {
    vil_error("cannot resume: '%s' has a %s that %s: " STATE_DAMAGED, path, key, why);
    return -1;
}

static int listed(const char *const *list, const char *k) {
    for (; list && *list; list++)
        if (strcmp(*list, k) == 0) return 1;
    return 0;
}

/* Keys whose values differ between two flat JSON objects, as "key a -> b, ..." (malloc'd) or
 * NULL when none; the keys in skip (NULL-terminated, or NULL) aside. */
static char *json_diff(const char *a, const char *b, const char *const *skip) {
    cJSON *oa = cJSON_Parse(a), *ob = cJSON_Parse(b);
    size_t cap = 4096, len = 0;
    char *out = vil_calloc(cap, 1);
    cJSON *it;
    cJSON_ArrayForEach(it, ob) {
        if (listed(skip, it->string)) continue;
        cJSON *o = cJSON_GetObjectItemCaseSensitive(oa, it->string);
        char *sa = o ? cJSON_PrintUnformatted(o) : NULL, *sb = cJSON_PrintUnformatted(it);
        /* a float key: 0.016000000759959221 (as older state files hold it) is 0.016; an int
         * key (integral) must match exactly */
        double x = o ? o->valuedouble : 0, y = it->valuedouble;
        int same_num = o && cJSON_IsNumber(o) && cJSON_IsNumber(it) && x != floor(x) &&
                       y != floor(y) && (float)x == (float)y;
        if (!same_num && (!sa || !sb || strcmp(sa, sb) != 0)) {
            /* numbers went through float: print them short */
            char na[64], nb[64];
            if (o && cJSON_IsNumber(o)) snprintf(na, sizeof na, "%.7g", o->valuedouble);
            else snprintf(na, sizeof na, "%s", sa ? sa : "(none)");
            if (cJSON_IsNumber(it)) snprintf(nb, sizeof nb, "%.7g", it->valuedouble);
            else snprintf(nb, sizeof nb, "%s", sb ? sb : "?");
            len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s%s %s -> %s",
                                    len ? ", " : "", it->string, na, nb);
        }
        if (len >= cap) len = cap - 1;
        cJSON_free(sa);
        cJSON_free(sb);
    }
    cJSON_Delete(oa);
    cJSON_Delete(ob);
    if (!len) {
        free(out);
        return NULL;
    }
    return out;
}

static const VilStTensor *state_tensor(const VilSafetensors *st, const char *name, size_t n) {
    const VilStTensor *t = vil_st_find(st, name);
    if (!t || t->dtype != VIL_ST_F32 || (size_t)vil_st_numel(t) != n) {
        vil_error("cannot resume: the state file's '%s' is missing or not %zu float32 values", name, n);
        return NULL;
    }
    return t;
}

/* Upload one state tensor (packed: vil_model_pack; its data may sit at any alignment in the
 * file buffer) into a parameter-shaped buffer. */
static void upload(const VilModel *m, float *dst, const float *packed, float *host) {
    memcpy(host, packed, m->param_count * sizeof(float));
    vil_model_unpack(m, host, host);
    m->be->to_device(m->be, dst, host, m->buf_len * sizeof(float));
}

/* A state tensor's values copied out (packed) and checked: finite, and >= 0 where nonneg (the
 * second moments). 0, or -1 naming the tensor and the file. */
static int state_values(const char *path, const VilStTensor *t, int nonneg, float *host, size_t n) {
    memcpy(host, t->data, n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        if (!isfinite(host[i]) || (nonneg && host[i] < 0.0f))
            return state_bad(path, t->name, nonneg ? "holds a negative or non-finite value"
                                                   : "holds a non-finite value");
    return 0;
}

static int state_restore(Trainer *T, const char *path) {
    VilSafetensors st;
    if (state_open(path, &st) != 0) return -1;
    VilModel *m = &T->m;
    const VilBackend *be = T->be;
    int rc = -1;
    float *host = vil_malloc(m->buf_len * sizeof(float));
    char *mine = vil_config_to_json(T->mc), *tmine = vil_train_config_to_json(T->tc);
    const char *mj = vil_st_meta(&st, "vil.config"), *tj = vil_st_meta(&st, "vil.train_config");
    VilConfig saved;
    vil_config_default(&saved);
    if (!mj || !tj || vil_config_from_json(&saved, mj) != 0 || vil_config_finalize(&saved) != 0) {
        vil_error("cannot resume: '%s' holds no valid model configuration", path);
        goto done;
    }
    char *sj = vil_config_to_json(&saved), *d = json_diff(sj, mine, NULL);
    free(sj);
    if (d) {
        vil_error("cannot resume: '%s' was trained with another model (%s); drop --config to use "
                  "the saved one", path, d);
        free(d);
        goto done;
    }
    /* every number that places the run, checked against its range and the others */
    long step, epoch, eb, adam_step, spe, best_step = -1, saved_world = 1, saved_accum = 1,
         saved_global = 0;
    VilTrainConfig st_tc;
    vil_train_config_default(&st_tc);
    if (vil_train_config_from_json(&st_tc, tj) != 0) {
        vil_error("cannot resume: '%s' holds no valid training configuration", path);
        goto done;
    }
    if (meta_long(&st, path, "vil.steps_per_epoch", 1, 1L << 40, &spe) ||
        meta_long(&st, path, "vil.epoch_batch", 0, spe, &eb) ||
        meta_long(&st, path, "vil.epoch", 0, 1L << 40, &epoch) ||
        meta_long(&st, path, "vil.step", 0, INT_MAX, &step) ||
        meta_long(&st, path, "vil.adam_step", 0, INT_MAX, &adam_step))
        goto done;
    /* states of older vils lack the split of the global batch */
    int has_global = vil_st_meta(&st, "vil.global_batch") != NULL;
    if ((vil_st_meta(&st, "vil.world") && meta_long(&st, path, "vil.world", 1, 1L << 20, &saved_world)) ||
        (vil_st_meta(&st, "vil.accum_steps") &&
         meta_long(&st, path, "vil.accum_steps", 1, 4096, &saved_accum)) ||
        (has_global && meta_long(&st, path, "vil.global_batch", 1, LONG_MAX, &saved_global)))
        goto done;
    if (has_global && saved_global != (long)st_tc.batch * saved_world * saved_accum) {
        state_bad(path, "vil.global_batch", "is not its batch x vil.world x vil.accum_steps");
        goto done;
    }
    long min_step = epoch + eb; /* at least a step per epoch before and per batch of this one */
    if (eb == spe) epoch++, eb = 0;
    /* a position past the run's epochs is done (epochs lowered on resume: nothing to do), but
     * not with steps left to train: "epoch 4/3". The epoch as this run will take it (below: an
     * epoch now shorter than the saved batch is over). */
    long ep_here = epoch + (eb >= T->spe), eb_here = eb >= T->spe ? 0 : eb;
    if ((ep_here > T->tc->epochs || (ep_here == T->tc->epochs && eb_here > 0)) && step < T->total_steps) {
        char why[160];
        snprintf(why, sizeof why, "is past the run's %d epochs while vil.step = %ld is short of its "
                 "%ld steps", T->tc->epochs, step, T->total_steps);
        state_bad(path, "vil.epoch", why);
        goto done;
    }
    if (step < min_step) {
        state_bad(path, "vil.step", "is smaller than vil.epoch + vil.epoch_batch (a step per batch)");
        goto done;
    }
    if (adam_step != step) {
        state_bad(path, "vil.adam_step", "differs from vil.step (one AdamW update per step)");
        goto done;
    }
    /* states of older vils lack it: unknown, and best.safetensors is then left as it is */
    if (vil_st_meta(&st, "vil.best_step") && meta_long(&st, path, "vil.best_step", -1, step, &best_step))
        goto done;
    const char *best = vil_st_meta(&st, "vil.best_top1");
    double bv = -1.0;
    if (!best || vil_parse_float(best, &bv) != 0 || !(bv == -1.0 || (bv >= 0.0 && bv <= 100.0))) {
        state_bad(path, "vil.best_top1", "is not a top-1 percentage (0..100, or -1: none yet)");
        goto done;
    }
    if (best_step >= 0 && bv < 0.0) {
        state_bad(path, "vil.best_step", "names a best checkpoint without a vil.best_top1");
        goto done;
    }
    /* Keys that do not change the run: the loader's threads, the log and evaluation batches,
     * how the all-reduce is scheduled, and, with the same global batch, how it is cut into
     * ranks and micro-batches (the samples, their augmentation and drop path are keyed by their
     * place in the global batch). */
    int same_global = saved_global == T->global_batch;
    const char *skip[9] = {"workers", "log_every", "eval_batch", "allreduce", "bucket_mb", "recompute"};
    if (same_global) skip[6] = "batch", skip[7] = "accum_steps";
    if ((d = json_diff(tj, tmine, skip)) != NULL) {
        vil_warn("resuming with changed training settings (%s): the run will differ from an "
                 "uninterrupted one", d);
        free(d);
    }
    if (same_global && !T->quiet && saved_world != T->world)
        fprintf(T->log, "resuming a run of %ld rank%s on %d, at the same global batch of %ld\n",
                saved_world, saved_world == 1 ? "" : "s", T->world, T->global_batch);
    if (spe != T->spe)
        vil_warn("the saved run had %ld steps per epoch, this one %ld (another dataset or batch?): "
                 "resuming at epoch %ld, batch %ld anyway", spe, T->spe, epoch, eb);
    if (eb >= T->spe) epoch++, eb = 0;
    T->best_top1 = (float)bv;
    T->best_step = best_step;
    size_t n = m->param_count; /* the files hold the tensors packed, without buffer padding */
    const VilStTensor *tp = state_tensor(&st, "params", n), *tm = state_tensor(&st, "adam_m", n),
                      *tv = state_tensor(&st, "adam_v", n);
    if (!tp || !tm || !tv) goto done;
    const VilStTensor *te = m->ema ? vil_st_find(&st, "ema") : NULL;
    if (te && !(te = state_tensor(&st, "ema", n))) goto done;
    /* every tensor checked before any is taken */
    if (state_values(path, tp, 0, host, n) || state_values(path, tm, 0, host, n) ||
        state_values(path, tv, 1, host, n) || (te && state_values(path, te, 0, host, n)))
        goto done;
    memcpy(host, tp->data, n * sizeof(float));
    vil_model_unpack(m, host, host);
    vil_model_set_params(m, host);
    upload(m, m->m, tm->data, host);
    upload(m, m->v, tv->data, host);
    m->step = (int)adam_step;
    if (m->ema) {
        if (te) {
            upload(m, m->ema, te->data, host);
        } else {
            vil_warn("the state has no EMA (it was off): starting the EMA from the weights");
            vil_model_get_params(m, host);
            be->to_device(be, m->ema, host, m->buf_len * sizeof(float));
        }
    }
    T->step = step;
    T->epoch = (int)epoch;
    T->epoch_batch = (int)eb;
    rc = 0;
done:
    free(mine);
    free(tmine);
    free(host);
    vil_st_free(&st);
    return rc;
}

static int all_finite(const float *x, size_t n) {
    int ok = 1;
#pragma omp parallel for reduction(& : ok)
    for (size_t i = 0; i < n; i++) ok &= isfinite(x[i]) ? 1 : 0;
    return ok;
}

/* One checkpoint of the run at the current step: the model's weights, or with ema its EMA. */
static int save_checkpoint(Trainer *T, const char *path, int ema) {
    /* the evaluation transform of this run's validation pass, so that eval and classify feed
     * the model what it was validated on */
    VilEvalSpec ev = {.crop_pct = T->tc->crop_pct, .has_norm = 1};
    VilTrainTransform tt;
    vil_train_transform_default(&tt, T->mc->img_size, T->mc->in_chans);
    memcpy(ev.mean, tt.mean, sizeof ev.mean);
    memcpy(ev.std, tt.std, sizeof ev.std);
    if (ema) vil_model_use_ema(&T->m, 1);
    int rc = vil_checkpoint_save(&T->m, path, T->step, T->class_names, T->n_classes, &ev);
    if (ema) vil_model_use_ema(&T->m, 0);
    return rc;
}

/* Write the state (first: it is what a resume reads), then the model checkpoint, then the EMA
 * checkpoint, then, when new_best is given (the top-1 of an evaluation that improved on the
 * best), best.safetensors. The state records every file's step before the files are written,
 * so a resume after a kill in between can tell which are behind and bring them up to it
 * (sync_run_files). Each write is atomic. Weights that are not finite are never written over
 * the last good ones: returns -2 then. */
static int save_all_here(Trainer *T, const float *new_best);
/* Saves on rank 0 (every rank holds the same weights); every rank gets its result and the new
 * best, so all take the same path afterwards. */
static int save_all(Trainer *T, const float *new_best) {
    int rc = 0;
    if (T->rank == 0) {
        rc = save_all_here(T, new_best);
    } else if (new_best) {
        T->best_top1 = *new_best;
        T->best_step = T->step;
    }
    vil_dist_bcast(T->dist, &rc, sizeof rc, 0);
    return rc;
}

static int save_all_here(Trainer *T, const float *new_best) {
    VilModel *m = &T->m;
    const VilBackend *be = T->be;
    size_t n = m->buf_len, bytes = n * sizeof(float);
    float *p = vil_malloc(bytes), *mm = vil_malloc(bytes), *vv = vil_malloc(bytes);
    float *e = m->ema ? vil_malloc(bytes) : NULL;
    int rc = -1;
    vil_model_get_params(m, p);
    if (!all_finite(p, n)) {
        vil_error("the weights are not finite at step %ld: not saving over the last good "
                  "checkpoint %s", T->step, T->path_last);
        rc = -2;
        goto done;
    }
    if (new_best) {
        T->best_top1 = *new_best;
        T->best_step = T->step;
    }
    be->to_host(be, mm, m->m, bytes);
    be->to_host(be, vv, m->v, bytes);
    if (e) be->to_host(be, e, m->ema, bytes);
    /* packed: the tensors without the parameter buffer's padding, so a state file does not
     * depend on the build's internal layout */
    vil_model_pack(m, p, p);
    vil_model_pack(m, mm, mm);
    vil_model_pack(m, vv, vv);
    if (e) vil_model_pack(m, e, e);
    VilStWriter *w = vil_st_writer_new();
    int64_t shape[1] = {(int64_t)m->param_count};
    vil_st_writer_add(w, "params", VIL_ST_F32, 1, shape, p);
    vil_st_writer_add(w, "adam_m", VIL_ST_F32, 1, shape, mm);
    vil_st_writer_add(w, "adam_v", VIL_ST_F32, 1, shape, vv);
    if (e) vil_st_writer_add(w, "ema", VIL_ST_F32, 1, shape, e);
    char *mj = vil_config_to_json(T->mc), *tj = vil_train_config_to_json(T->tc);
    char buf[64];
    vil_st_writer_meta(w, "vil.format", STATE_FORMAT);
    vil_st_writer_meta(w, "vil.version", STATE_VERSION);
    vil_st_writer_meta(w, "vil.config", mj);
    vil_st_writer_meta(w, "vil.train_config", tj);
#define META(key, fmt, v)                                                                  \
    snprintf(buf, sizeof buf, fmt, v);                                                     \
    vil_st_writer_meta(w, key, buf)
    META("vil.step", "%ld", T->step);
    META("vil.epoch", "%d", T->epoch);
    META("vil.epoch_batch", "%d", T->epoch_batch);
    META("vil.adam_step", "%d", m->step);
    META("vil.steps_per_epoch", "%ld", T->spe);
    META("vil.best_top1", "%.9g", T->best_top1);
    META("vil.best_step", "%ld", T->best_step);
    META("vil.world", "%d", T->world);
    META("vil.accum_steps", "%d", T->accum);
    META("vil.global_batch", "%ld", T->global_batch);
#undef META
    /* nothing else is random state: every stream is a pure function of (seed, epoch, step) */
    vil_st_writer_meta(w, "vil.rng", "keyed by (seed, epoch, position) in the loader and (seed, step) for drop path");
    int src = vil_st_writer_save(w, T->path_state);
    vil_st_writer_free(w);
    free(mj);
    free(tj);
    if (src != 0) goto done;
    if (save_checkpoint(T, T->path_last, 0) != 0 || (m->ema && save_checkpoint(T, T->path_ema, 1) != 0) ||
        (new_best && save_checkpoint(T, T->path_best, 0) != 0)) {
        vil_error("the training state %s is saved at step %ld but the checkpoints are not: free "
                  "space or fix the folder, then --resume brings them up to that step",
                  T->path_state, T->step);
        goto done;
    }
    rc = 0;
done:
    free(p);
    free(mm);
    free(vv);
    free(e);
    return rc;
}

/* The step a checkpoint holds (its "vil.step"), or -1 with what is wrong in `why`: missing,
 * unreadable (a torn or foreign file), or without a step. */
static long checkpoint_step(const char *path, char *why, size_t n) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        snprintf(why, n, "missing");
        return -1;
    }
    VilSafetensors st;
    /* the reason goes into why, for the caller's one message */
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_st_read(path, &st);
    vil_error_release(&cap);
    if (rc != 0) {
        snprintf(why, n, "unreadable (%.512s)", cap.msg); /* why[] is shorter than cap.msg */
        return -1;
    }
    long step = -1;
    const char *v = vil_st_meta(&st, "vil.step");
    if (!v || vil_parse_int(v, &step) != 0 || step < 0) {
        snprintf(why, n, "without a valid vil.step");
        step = -1;
    } else {
        snprintf(why, n, "at step %ld", step);
    }
    vil_st_free(&st);
    return step;
}

/* After a resume's state_restore: save_all writes the state first, so a kill or a full disk
 * between its writes leaves checkpoints behind the state (or none). Every checkpoint the run
 * keeps current (last, ema, and best when the state says it was written at this very step) is
 * checked against the state's step and rewritten from the restored buffers when it differs,
 * so that a run is never reported done or continued while its files disagree. 0, or -1 when a
 * file could not be rewritten (reported). */
static int sync_run_files(Trainer *T) {
    struct {
        const char *path;
        int ema;
    } files[3];
    int nf = 0;
    files[nf].path = T->path_last, files[nf++].ema = 0;
    if (T->m.ema) files[nf].path = T->path_ema, files[nf++].ema = 1;
    /* the restored parameters are the best weights only when the best was saved at this step;
     * at any other step (or unknown: an older state) best.safetensors is left as it is */
    if (T->best_step >= 0 && T->best_step == T->step)
        files[nf].path = T->path_best, files[nf++].ema = 0;
    for (int i = 0; i < nf; i++) {
        char why[700];
        if (checkpoint_step(files[i].path, why, sizeof why) == T->step) continue;
        if (save_checkpoint(T, files[i].path, files[i].ema) != 0) {
            vil_error("cannot resume: '%s' was %s, the state is at step %ld, and rewriting it "
                      "failed (see above): free space or fix the folder, then resume again",
                      files[i].path, why, T->step);
            return -1;
        }
        vil_warn("resume: '%s' was %s, the state is at step %ld: rewrote it from the state",
                 files[i].path, why, T->step);
    }
    return 0;
}

/* ---------------- the steps ---------------- */

/* The mean loss of the last micro-batch over all ranks: the same value on every rank, so the
 * divergence check decides alike everywhere. */
/* the sum of the per-sample losses of the micro-batch just run (a host read: log steps only) */
static double batch_loss_sum(Trainer *T) {
    int B = T->m.acts.B;
    T->be->to_host(T->be, T->host_losses, T->m.acts.losses, (size_t)B * sizeof(float));
    double s = 0;
    for (int b = 0; b < B; b++) s += T->host_losses[b];
    return s;
}

/* the mean loss of the step just run: its micro-batches' (the earlier ones summed by step()) on
 * every rank */
static float read_loss(Trainer *T) {
    double s = T->loss_sum + batch_loss_sum(T);
    vil_dist_sum_double(T->dist, &s, 1);
    return (float)(s / (double)T->global_batch);
}

/* The counts of a validation pass summed over the ranks (each read its shard). */
static void sum_eval(const Trainer *T, VilEvalResult *r) {
    double v[5] = {(double)r->top1, (double)r->top5, (double)r->images, (double)r->bad, r->loss_sum};
    vil_dist_sum_double(T->dist, v, 5);
    r->top1 = (long)v[0], r->top5 = (long)v[1], r->images = (long)v[2], r->bad = (long)v[3];
    r->loss_sum = v[4];
}

/* The validation pass of the model and of the EMA. */
static int evaluate(Trainer *T, int epoch, VilTrainResult *res) {
    VilEvalResult r;
    FILE *plog = T->quiet ? NULL : out_log(T);
    /* on a terminal the pass shows its progress (rank 0's shard); a log gets the summary line,
     * with the pass's time, only (20 lines a pass would swamp 300 epochs of it) */
    FILE *prog = T->tty ? plog : NULL;
    /* a failure on any rank stops all: none may wait in the sums below */
    if (vil_dist_any(T->dist, vil_eval_run(&T->m, T->val_loader, 0, prog, "val   ", &r) != 0)) return -1;
    sum_eval(T, &r);
    res->top1 = r.images ? (float)(100.0 * r.top1 / r.images) : 0.0f;
    res->top5 = r.images ? (float)(100.0 * r.top5 / r.images) : 0.0f;
    long bad = r.bad, images = r.images;
    double secs = r.seconds;
    VilEvalRecord pt = {.step = T->step, .epoch = epoch + 1, .images = images, .top1 = res->top1,
                       .top5 = res->top5, .loss = r.images ? (float)(r.loss_sum / r.images) : 0.0f};
    if (T->m.ema) {
        vil_model_use_ema(&T->m, 1);
        int erc = vil_eval_run(&T->m, T->val_loader, 0, prog, "val   EMA ", &r);
        vil_model_use_ema(&T->m, 0);
        if (vil_dist_any(T->dist, erc != 0)) return -1;
        sum_eval(T, &r);
        res->ema_top1 = r.images ? (float)(100.0 * r.top1 / r.images) : 0.0f;
        res->ema_top5 = r.images ? (float)(100.0 * r.top5 / r.images) : 0.0f;
        secs += r.seconds;
        pt.has_ema = 1;
        pt.ema_top1 = res->ema_top1, pt.ema_top5 = res->ema_top5;
        pt.ema_loss = r.images ? (float)(r.loss_sum / r.images) : 0.0f;
    }
    if (T->runlog && vil_runlog_eval(T->runlog, &pt) != 0) runlog_failed(T);
    if (plog) {
        fprintf(plog, "val   epoch %d: top-1 %.2f%%  top-5 %.2f%%  loss %.4f", epoch + 1, res->top1,
                res->top5, pt.loss);
        if (T->m.ema)
            fprintf(plog, "  |  EMA top-1 %.2f%%  top-5 %.2f%%  loss %.4f", res->ema_top1, res->ema_top5,
                    pt.ema_loss);
        fprintf(plog, "  (%ld images, %.1f s)\n", images, secs);
        if (bad) fprintf(plog, "      %ld files could not be read and were left out of the count\n", bad);
        fflush(plog);
    }
    return 0;
}

/* ---------------- setup ---------------- */

/* the permutation that picks the holdout images: fixed, so that every seed (and every machine)
 * holds out the same ones */
#define VIL_HOLDOUT_SEED 20261124u

/* The class names go into every checkpoint's metadata, which is UTF-8 JSON: a folder or a
 * names-file entry that is not UTF-8 failed the first save, after the training time was spent.
 * Refused here, before any step, naming the entry (escaped) and where it came from. */
static int check_class_names(const Trainer *T) {
    for (int c = 0; c < T->n_classes; c++) {
        const char *name = T->class_names[c], *id = vil_dataset_class_id(T->ds, c);
        size_t n = strlen(name);
        if (vil_utf8_invalid_at((const unsigned char *)name, n) == n) continue;
        char shown[160];
        vil_printable(shown, sizeof shown, name);
        if (T->run->names && strcmp(name, id) != 0)
            vil_error("the class-names file '%s' names class %d '%s', which is not valid UTF-8; the "
                      "names go into the checkpoints' metadata: write the file in UTF-8",
                      T->run->names, c, shown);
        else
            vil_error("class %d of the training data (%s) is named '%s', which is not valid UTF-8; "
                      "the names go into the checkpoints' metadata: rename the folder, or give "
                      "the classes UTF-8 names with --names FILE", c, vil_dataset_source(T->ds), shown);
        return -1;
    }
    return 0;
}

static int open_data(Trainer *T) {
    const VilTrainRun *run = T->run;
    /* in range: the key's bounds are the setter's */
    if (vil_image_set_max_pixels(run->train.max_pixels) != 0) return -1;
    T->ds = vil_dataset_open(run->data, "train", NULL);
    if (!T->ds) return -1;
    int K0 = vil_dataset_num_classes(T->ds);
    if (run->names && vil_dataset_load_names(T->ds, run->names) != 0) return -1;
    int K = vil_dataset_num_classes(T->ds);
    if (K != K0) {
        vil_error("the class-names file '%s' names %d classes, the training data (%s) has %d: is "
                  "it the names file of this dataset?", run->names, K, vil_dataset_source(T->ds), K0);
        return -1;
    }
    if (K != T->mc->num_classes) {
        vil_error("the training data (%s) has %d classes but the model config says num_classes = "
                  "%d: set --set num_classes=%d", vil_dataset_source(T->ds), K,
                  T->mc->num_classes, K);
        return -1;
    }
    if (T->tc->holdout > 0) {
        if (T->tc->eval_every_epochs <= 0) {
            vil_error("holdout = %d holds images out for validation, but eval_every_epochs = 0 "
                      "never validates: set eval_every_epochs, or holdout = 0", T->tc->holdout);
            return -1;
        }
        /* a fixed choice, not the run's seed: every seed of a recipe sees the same split */
        if (vil_dataset_holdout(&T->ds, &T->val_ds, T->tc->holdout, VIL_HOLDOUT_SEED) != 0) return -1;
    } else if (T->tc->eval_every_epochs > 0) {
        T->val_ds = vil_dataset_open(run->data, "val", run->val_labels);
        if (!T->val_ds) {
            vil_error("no validation split in '%s': add one, or set eval_every_epochs=0 to train "
                      "without evaluation", run->data);
            return -1;
        }
        if (vil_dataset_num_classes(T->val_ds) > K) {
            vil_error("the validation split has %d classes, the training split %d",
                      vil_dataset_num_classes(T->val_ds), K);
            return -1;
        }
        vil_dataset_set_num_classes(T->val_ds, K);
    }
    T->n_classes = K;
    T->class_names = vil_calloc((size_t)K, sizeof(char *));
    for (int c = 0; c < K; c++) T->class_names[c] = (char *)vil_dataset_class_name(T->ds, c);
    return check_class_names(T);
}

/* Under mpirun, more loader threads than CPUs this rank may run on: they would share them.
 * mpirun binds each rank to one core when it starts two or fewer, a trap on a 2-GPU machine. */
static void check_affinity(const Trainer *T) {
    cpu_set_t set;
    if (T->rank != 0 || !T->dist || !T->dist->mpi || sched_getaffinity(0, sizeof set, &set) != 0) return;
    int n = CPU_COUNT(&set);
    if (T->tc->workers > n)
        vil_warn("this rank may run on %d CPU%s, and the loader has %d workers: they will share %s "
                 "(mpirun binds each rank to a core when it starts 2 or fewer: add --bind-to none, "
                 "or --map-by slot:PE=N)", n, n == 1 ? "" : "s", T->tc->workers, n == 1 ? "it" : "them");
}

static int make_loaders(Trainer *T) {
    const VilTrainConfig *t = T->tc;
    check_affinity(T);
    const VilConfig *c = T->mc;
    VilLoaderConfig lc;
    vil_loader_config_default(&lc, VIL_LOADER_TRAIN, c->img_size, c->in_chans, t->batch,
                              T->n_classes);
    lc.threads = t->workers;
    lc.prefetch = t->workers + 1;
    lc.seed = (uint64_t)t->seed;
    lc.repeats = t->repeats;
    lc.world = T->world;
    lc.rank = T->rank;
    lc.accum = T->accum;
    lc.quiet = T->quiet;
    lc.train.scale_min = t->scale_min;
    lc.train.hflip = t->hflip;
    lc.train.randaug_n = t->randaug_n;
    lc.train.randaug_m = t->randaug_m;
    lc.train.randaug_mstd = t->randaug_mstd;
    lc.train.reprob = t->reprob;
    lc.train.decode = strcmp(t->decode, "exact") == 0 ? VIL_DECODE_EXACT : VIL_DECODE_FAST;
    lc.mixup.mixup_alpha = t->mixup;
    lc.mixup.cutmix_alpha = t->cutmix;
    lc.mixup.prob = t->mixup_prob;
    lc.mixup.switch_prob = t->mixup_switch_prob;
    lc.mixup.smoothing = t->label_smoothing;
    lc.alloc = vil_feed_allocator(T->be);
    T->loader = vil_loader_create(T->ds, &lc);
    if (!T->loader) return -1;
    if (T->val_ds) {
        VilLoaderConfig ec;
        /* no larger than the split (vil_eval_batch), as `vil eval` */
        int eb = vil_eval_batch(T->val_ds, t->eval_batch ? t->eval_batch : t->batch, 0);
        vil_loader_config_default(&ec, VIL_LOADER_EVAL, c->img_size, c->in_chans, eb, T->n_classes);
        ec.threads = t->workers;
        ec.prefetch = t->workers + 1;
        ec.crop_pct = t->crop_pct;
        ec.world = T->world; /* a shard each, every image exactly once: the counts are summed */
        ec.rank = T->rank;
        ec.quiet = T->quiet;
        ec.alloc = vil_feed_allocator(T->be);
        T->val_loader = vil_loader_create(T->val_ds, &ec);
        if (!T->val_loader) return -1;
    }
    return 0;
}

static void print_header(Trainer *T) {
    const VilConfig *c = T->mc;
    const VilTrainConfig *t = T->tc;
    FILE *f = T->log;
    fprintf(f, "train: %s (%s, %zu parameters, %d x %d x %d) on %s\n", c->name, c->arch,
            T->m.param_count, c->in_chans, c->img_size, c->img_size, T->be->name);
    fprintf(f, "data:  %s: %d images, %d classes", vil_dataset_source(T->ds),
            vil_dataset_size(T->ds), T->n_classes);
    if (T->val_ds && t->holdout > 0)
        fprintf(f, "; val: %d more training images, held out (holdout)", vil_dataset_size(T->val_ds));
    else if (T->val_ds)
        fprintf(f, "; val %s: %d images", vil_dataset_source(T->val_ds), vil_dataset_size(T->val_ds));
    if (strcmp(T->be->name, "cpu") == 0)
        fprintf(f, "\nthreads: %d compute (OpenMP), %d loader", omp_get_max_threads(), t->workers);
    else
        fprintf(f, "\nthreads: %d loader", t->workers);
    fprintf(f, "\nbatch: %d x %d rank%s x %d accum_steps = %ld; lr = %g * %ld / 512 = %.4g; warmup "
               "%ld steps from %g; cosine to %g\n", t->batch, T->world, T->world == 1 ? "" : "s",
            T->accum, T->global_batch, t->base_lr, T->global_batch, T->peak_lr, T->warmup_steps,
            t->warmup_lr, t->min_lr);
    if (T->dist && T->dist->mpi) {
        fprintf(f, "ranks: %d process%s (%s), %d on this host; gradients summed by %s, ", T->world,
                T->world == 1 ? "" : "es", T->dist->launcher, T->dist->local_world,
                strcmp(T->be->name, "cuda") == 0 ? "NCCL" : "MPI");
        if (strcmp(t->allreduce, "overlap") == 0)
            fprintf(f, "overlapping the backward in %g MiB buckets", t->bucket_mb);
        else
            fprintf(f, "after the backward");
        fprintf(f, "; rank 0 prints and writes\n");
    }
    else if (!vil_dist_built_with_mpi())
        fprintf(f, "ranks: one process (this vil has no MPI: apt-get install libopenmpi-dev "
                   "openmpi-bin and rebuild to train with mpirun or srun)\n");
    fprintf(f, "steps: %d epoch%s x %ld = %ld", t->epochs, t->epochs == 1 ? "" : "s", T->spe,
            (long)t->epochs * T->spe);
    if (T->total_steps < (long)t->epochs * T->spe) fprintf(f, ", stopping at max_steps %ld", T->total_steps);
    fprintf(f, "; AdamW wd %g; drop path %g; EMA %g; clip %s\n", t->weight_decay, c->drop_path,
            t->ema_decay, t->clip_grad > 0 ? "on (global norm, on the device)" : "off");
    fprintf(f, "aug:   %s JPEG decode, crop scale (%g, 1), flip %g, ", t->decode, t->scale_min, t->hflip);
    if (t->randaug_n > 0) fprintf(f, "RandAugment n%d m%g mstd%g, ", t->randaug_n, t->randaug_m, t->randaug_mstd);
    else fprintf(f, "no RandAugment, ");
    fprintf(f, "erasing %g, ", t->reprob);
    if (t->mixup > 0 || t->cutmix > 0)
        fprintf(f, "mixup %g / cutmix %g (p %g, switch %g), ", t->mixup, t->cutmix, t->mixup_prob,
                t->mixup_switch_prob);
    else fprintf(f, "no mixup, ");
    fprintf(f, "smoothing %g, repeats %d\n", t->label_smoothing, t->repeats);
    fprintf(f, "out:   %s\n", T->run->out_dir);
    fflush(f);
}

static void trainer_free(Trainer *T) {
    for (int i = 0; i < 2; i++)
        if (T->dp_host[i]) T->be->host_free(T->be, T->dp_host[i]);
    if (T->model_ready) vil_model_free(&T->m);
    free(T->host_losses);
    vil_runlog_close(T->runlog);
    vil_loader_free(T->loader);
    vil_loader_free(T->val_loader);
    free(T->class_names);
    if (T->ds) vil_dataset_free(T->ds);
    if (T->val_ds) vil_dataset_free(T->val_ds);
    free(T->path_last);
    free(T->path_state);
    free(T->path_best);
    free(T->path_ema);
    if (T->lock_fd >= 0) close(T->lock_fd); /* releases the lock */
}

/* ---------------- the output folder ---------------- */

/* One run per folder: rank 0 (the only writer; ranks on other hosts sharing the folder write
 * nothing) holds an exclusive flock on OUT/train.lock from before anything in the folder is
 * read or touched until it exits, however it exits: the kernel drops the lock with the process.
 * Two runs on one --out both trained and both said done, their files a mix. The file holds
 * the holder's pid, for the message; it is left in place (removing it would race a waiting
 * run). */
static int lock_out_dir(Trainer *T) {
    const char *out = T->run->out_dir;
    char *p = vil_path_join(out, "train.lock");
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        vil_error("the output folder '%s' cannot be written (its lock file %s: %s): fix its "
                  "permissions or free space, or choose another --out", out, p, vil_errno_str());
        free(p);
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        pid[strspn(pid, "0123456789")] = 0;
        if (e == EWOULDBLOCK)
            vil_error("'%s' is in use by another vil train (pid %s, holding %s): wait for it to "
                      "end, or choose another --out", out, pid[0] ? pid : "unknown", p);
        else
            vil_error("cannot lock %s: %s", p, strerror(e));
        close(fd);
        free(p);
        return -1;
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n)
        vil_warn("cannot write the pid into %s: %s", p, vil_errno_str());
    free(p);
    T->lock_fd = fd;
    return 0;
}

/* A fresh run refuses a folder that holds any file of a run: with the state, the run can be
 * continued; without it (a kill before the first state, or files copied in), the files are
 * still someone's weights. */
static int refuse_used_folder(Trainer *T) {
    const char *out = T->run->out_dir;
    const char *paths[4] = {T->path_state, T->path_last, T->path_best, T->path_ema};
    char found[1024] = "";
    size_t len = 0;
    int state = 0;
    for (int i = 0; i < 4; i++) {
        struct stat sb;
        if (lstat(paths[i], &sb) != 0) continue;
        const char *slash = strrchr(paths[i], '/'), *name = slash ? slash + 1 : paths[i];
        len += (size_t)snprintf(found + len, len < sizeof found ? sizeof found - len : 0, "%s%s",
                                len ? ", " : "", name);
        if (len >= sizeof found) len = sizeof found - 1;
        state |= i == 0;
    }
    if (!len) return 0;
    if (state)
        vil_error("'%s' holds a training run already (%s): continue it with --resume %s, or "
                  "choose another --out (or delete that run)", out, found, out);
    else
        vil_error("'%s' holds files of an earlier run (%s) and no training state to resume "
                  "from: choose another --out, or delete those files", out, found);
    return -1;
}

/* Run once the folder exists, before any work: removes what killed saves left (their
 * temporaries can be as large as a checkpoint each, and a full disk is one way saves die) and
 * proves the folder writable through the path every save takes, so that a read-only or full
 * folder shows now and not after the first epoch. */
static int prepare_out_dir(Trainer *T) {
    const char *out = T->run->out_dir;
    if ((T->stale_removed = vil_remove_stale_temps(out)) < 0) return -1;
    char *probe = vil_path_join(out, ".vil-write-probe");
    int rc = vil_write_file_atomic(probe, "vil", 3);
    int err = errno;
    if (rc != 0)
        vil_error("the output folder '%s' cannot be written (%s): fix its permissions or free "
                  "space, or choose another --out", out, strerror(err));
    else unlink(probe);
    free(probe);
    return rc;
}

/* ---------------- the input feed ---------------- */

/* Waits for the device, gives queued batches back and points the model at its own buffers. */
static void feed_stop(Trainer *T) {
    VilFeed *f = &T->feed;
    if (!f->be) return;
    vil_feed_drain(f, T->loader);
    vil_model_set_inputs(&T->m, NULL, NULL, NULL);
    vil_feed_free(f);
}

/* Queues micro-batch `micro` of global step `step` (its upload overlaps the work in flight); -1
 * when the loader has none (vil_loader_error says why, or the epoch ended early). The wait for
 * the loader counts in the interval's data wait. */
static int feed_next(Trainer *T, long step, int micro) {
    double t0 = vil_now();
    const VilBatch *b = vil_loader_next_batch(T->loader);
    T->wait_int += vil_now() - t0;
    if (!b) return -1;
    const void *src[3] = {b->images, b->targets, NULL};
    if (T->feed.n > 2) {
        float *h = T->dp_host[vil_feed_next_slot(&T->feed)];
        /* keyed by the samples' places in the global batch (the loader's slice order) */
        long first = ((long)micro * T->world + T->rank) * T->tc->batch;
        vil_model_drop_path_rows(&T->m, vil_hash_seed((uint64_t)T->tc->seed, TAG_DROP_PATH,
                                                      (uint64_t)step, 0), first, h);
        src[2] = h;
    }
    vil_feed_put(&T->feed, b, src);
    return 0;
}

/* ---------------- the run's setup ---------------- */

/* internal: the run goes on (not a VilTrainStatus) */
#define GO_ON 100

/* metrics.jsonl (continued at T->step), config.cfg and this start's line of run.jsonl */
static int open_runlog(Trainer *T) {
    const VilTrainRun *run = T->run;
    if (!(T->runlog = vil_runlog_open(run->out_dir, T->step))) return -1;
    char dev[400], name[300];
    snprintf(dev, sizeof dev, "%s:%d %s", T->be->name, T->be->device,
             T->be->device_name(T->be, name, sizeof name));
    VilRunStart s = {.command = run->command, .commit = run->commit, .device = dev, .data = run->data,
                     .train_source = vil_dataset_source(T->ds), .train_images = vil_dataset_size(T->ds),
                     .val_source = T->val_ds ? vil_dataset_source(T->val_ds) : NULL,
                     .val_images = T->val_ds ? vil_dataset_size(T->val_ds) : 0, .ranks = T->world,
                     .accum = T->accum, .global_batch = T->global_batch, .step = T->step};
    return vil_runlog_start(T->runlog, T->mc, T->tc, &s);
}

/* Everything before the first step: the data and the output folder checked before any work,
 * the loaders, the model (initialized, or from --init, or restored from the state), its
 * training state and the header. GO_ON, or the run's status (done, nothing to do; failed). */
static int trainer_setup(Trainer *T) {
    const VilTrainRun *run = T->run;
    const VilTrainConfig *t = T->tc;
    char *state_in = run->resume ? vil_train_state_path(run->resume) : NULL;
    int status = VIL_TRAIN_FAILED;

    /* everything that can be wrong with the inputs is found before any work */
    if (open_data(T) != 0) goto out;
    if (state_in) {
        struct stat st;
        if (stat(state_in, &st) != 0) {
            vil_error("cannot resume: no training state '%s' (%s)", state_in, vil_errno_str());
            goto out;
        }
    }
    T->path_last = vil_path_join(run->out_dir, "last.safetensors");
    T->path_state = vil_path_join(run->out_dir, "last.state.safetensors");
    T->path_best = vil_path_join(run->out_dir, "best.safetensors");
    T->path_ema = vil_path_join(run->out_dir, "ema.safetensors");
    /* a fresh run never overwrites another one's files: weeks of ImageNet are one typo away */
    /* rank 0 alone owns the folder (vil_train makes the outcome collective) */
    if (T->rank == 0 && (vil_mkdir_p(run->out_dir) != 0 || lock_out_dir(T) != 0)) goto out;
    if (T->rank == 0 && !state_in && refuse_used_folder(T) != 0) goto out;
    if (T->rank == 0 && prepare_out_dir(T) != 0) goto out;
    if (make_loaders(T) != 0) goto out;

    /* the loader's batches are micro-batches: accum of them make a step */
    T->spe = vil_loader_batches_per_epoch(T->loader) / T->accum;
    T->global_batch = (long)t->batch * T->world * T->accum;
    if (T->spe < 1) {
        vil_error("an epoch of %d samples holds no full global batch of %ld (batch %d x %d ranks x "
                  "%d accum_steps): lower batch or accum_steps", vil_dataset_size(T->ds),
                  T->global_batch, t->batch, T->world, T->accum);
        goto out;
    }
    T->total_steps = (long)t->epochs * T->spe;
    if (t->max_steps > 0 && t->max_steps < T->total_steps) T->total_steps = t->max_steps;
    T->warmup_steps = lround((double)t->warmup_epochs * (double)T->spe);
    T->peak_lr = vil_peak_lr(t->base_lr, T->global_batch);

    VilModel *m = &T->m;
    if (vil_model_init(m, T->mc, T->be) != 0) goto out;
    T->model_ready = 1;
    m->recompute = t->recompute;
    vil_model_init_weights(m, (uint64_t)t->seed);
    char init_note[1024] = "";
    if (run->init && !state_in) {
        VilCheckpointMeta im;
        if (vil_checkpoint_init(m, run->init, run->init_ema, &im) != 0) goto out;
        snprintf(init_note, sizeof init_note, "init:  %s%s%s%s%s\n", run->init,
                 im.weights[0] ? ":" : "", im.weights,
                 im.pos_interpolated_from ? "; pos_embed interpolated onto the run's grid" : "",
                 im.head_kept ? "; its head (other classes) not taken: the head starts fresh" : "");
        vil_checkpoint_meta_free(&im);
    }
    /* the moments (and the EMA, from the weights) exist from the start so that a save before
     * the first update is complete */
    vil_model_init_training(m, t->ema_decay > 0.0f);
    /* the loss of a micro-batch is its share of the global batch's mean (0: the batch's own) */
    m->loss_denom = T->global_batch == t->batch ? 0 : T->global_batch;
    if (state_in && state_restore(T, state_in) != 0) goto out;
    if (!T->quiet) {
        print_header(T);
        fputs(init_note, T->log);
        if (T->stale_removed > 0)
            fprintf(T->log, "out:   removed %d temporary file%s of interrupted saves\n",
                    T->stale_removed, T->stale_removed == 1 ? "" : "s");
        if (state_in)
            fprintf(T->log, "resume: %s at step %ld (epoch %d, batch %d)\n", state_in, T->step,
                    T->epoch + 1, T->epoch_batch);
    }
    /* before "nothing to do" too: a finished run whose last save was cut short is not done */
    if (state_in && T->rank == 0 && sync_run_files(T) != 0) goto out;
    if (T->step >= T->total_steps) {
        if (!T->quiet) fprintf(T->log, "nothing to do: the run is at step %ld of %ld\n", T->step, T->total_steps);
        status = VIL_TRAIN_DONE;
        goto out;
    }
    if (T->rank == 0 && open_runlog(T) != 0) goto out;
    T->host_losses = vil_malloc((size_t)t->batch * sizeof(float));
    T->t_int = vil_now();
    status = GO_ON;
out:
    free(state_in);
    return status;
}

/* ---------------- the loop's pieces ---------------- */

/* After a failure between saves (the loader, an evaluation): the weights are those of a
 * completed step, so they are kept. */
static void save_after_failure(Trainer *T) {
    if (save_all(T, NULL) == 0) vil_error("saved %s at step %ld", T->path_last, T->step);
}

static int is_snapshot(const struct dirent *e) {
    long n;
    char tail[32];
    return sscanf(e->d_name, "step_%ld%31s", &n, tail) == 2 && strcmp(tail, ".safetensors") == 0;
}

/* A step checkpoint (save_every_steps), rank 0, after a save: OUT/step_N.safetensors holds the
 * model as last.safetensors does now (a hard link: last.safetensors is always replaced by a
 * rename, never rewritten in place), and the oldest beyond keep_last go. A failure is said and
 * the run goes on: last.safetensors and the state are saved. */
static void snapshot_step(Trainer *T) {
    const char *out = T->run->out_dir;
    char name[64];
    snprintf(name, sizeof name, "step_%08ld.safetensors", T->step);
    char *p = vil_path_join(out, name);
    unlink(p);
    if (link(T->path_last, p) != 0)
        vil_warn("cannot link %s to %s (%s): no step checkpoint at step %ld", T->path_last, p,
                 vil_errno_str(), T->step);
    free(p);
    struct dirent **e = NULL;
    int n = scandir(out, &e, is_snapshot, alphasort); /* zero-padded: by name is by step */
    for (int i = 0; i < n; i++) {
        if (i < n - T->tc->keep_last) {
            char *q = vil_path_join(out, e[i]->d_name);
            if (unlink(q) != 0) vil_warn("cannot remove %s: %s", q, vil_errno_str());
            free(q);
        }
        free(e[i]);
    }
    free(e);
}

static int snapshot_due(const Trainer *T) {
    return T->tc->save_every_steps > 0 && T->step % T->tc->save_every_steps == 0;
}

/* save_all as a status: GO_ON when saved, else diverged (weights not finite) or failed */
static int save_run(Trainer *T, const float *new_best) {
    int rc = save_all(T, new_best);
    return rc == 0 ? GO_ON : rc == -2 ? VIL_TRAIN_DIVERGED : VIL_TRAIN_FAILED;
}

/* The start of an epoch (or of the rest of one, on resume): training activations, the
 * loader's epoch, the batches a resumed run has done skipped, the feed and its first batch. */
static int start_epoch(Trainer *T) {
    vil_model_alloc_acts(&T->m, T->tc->batch, 1);
    vil_loader_start_epoch(T->loader, T->epoch);
    if (T->epoch_batch > 0) {
        /* the loader has no seek: decode and drop the batches done before the save, which keeps
         * every later batch exactly as an uninterrupted run sees it */
        if (!T->quiet)
            fprintf(out_log(T), "resume: skipping %d batches of epoch %d\n", T->epoch_batch, T->epoch + 1);
        for (int k = 0; k < T->epoch_batch * T->accum; k++) {
            const VilBatch *b = vil_loader_next_batch(T->loader);
            if (!b) {
                const char *e = vil_loader_error(T->loader);
                vil_error("cannot resume: the data loader stopped at batch %d of epoch %d: %s", k,
                          T->epoch + 1, e ? e : "the epoch is shorter than when saved");
                return VIL_TRAIN_FAILED;
            }
            vil_loader_release_batch(T->loader, b);
        }
        T->t_int = vil_now();
    }
    /* the feed over the model's own input buffers */
    VilModel *m = &T->m;
    const VilConfig *c = T->mc;
    size_t B = (size_t)T->tc->batch;
    size_t bytes[3] = {B * c->in_chans * c->img_size * c->img_size * sizeof(float),
                       B * c->num_classes * sizeof(float), vil_model_drop_path_bytes(m)};
    void *dev0[3] = {m->acts.img, m->acts.targets, m->acts.dp_scale};
    int n = bytes[2] ? 3 : 2;
    for (int i = 0; i < 2 && n == 3; i++)
        if (!T->dp_host[i] && !(T->dp_host[i] = T->be->host_alloc(T->be, bytes[2]))) {
            vil_error("cannot allocate %zu bytes of host memory for the drop-path scales", bytes[2]);
            return VIL_TRAIN_FAILED;
        }
    vil_feed_init(&T->feed, T->be, n, dev0, bytes);
    feed_next(T, T->step, 0); /* a failure shows as no batch at the first take */
    return GO_ON;
}

/* A progress line after global step `step`, batch `batch` of its epoch (both counted from 1):
 * every log_every steps and at the last step of an epoch or of the run. */
static int is_log_step(const Trainer *T, long step, int batch) {
    return step % T->tc->log_every == 0 || batch == T->spe || step == T->total_steps;
}

/* One step: per micro-batch, the batch the feed holds, forward and backward on it, the next
 * batch's upload queued behind it; then the update (train.h). GO_ON, or failed when the loader
 * ran dry on any rank (reported, saved). */
static int step(Trainer *T) {
    const VilTrainConfig *t = T->tc;
    T->lr = (float)vil_lr_at(T->step, T->total_steps, T->warmup_steps, T->peak_lr, t->warmup_lr,
                             t->min_lr);
    VilStepParams sp = vil_step_params(t, T->lr);
    sp.dist = T->dist;
    /* a step that logs reads each micro-batch's losses: the logged loss is the step's mean */
    int logs = is_log_step(T, T->step + 1, T->epoch_batch + 1);
    T->loss_sum = 0;
    for (int a = 0; a < T->accum; a++) {
        void *in[3];
        const VilBatch *b = vil_feed_take(&T->feed, in);
        /* together: a rank without its batch would leave the others waiting in the sums */
        if (vil_dist_any(T->dist, b == NULL)) {
            const char *e = b ? "another rank's loader stopped" : vil_loader_error(T->loader);
            vil_error("the data loader stopped at epoch %d, batch %d: %s", T->epoch + 1,
                      T->epoch_batch, e ? e : "the epoch ended early");
            if (b) vil_loader_release_batch(T->loader, b);
            save_after_failure(T);
            return VIL_TRAIN_FAILED;
        }
        vil_model_set_inputs(&T->m, in[0], in[1], T->feed.n > 2 ? in[2] : NULL);
        vil_train_micro(&T->m, &sp, a == 0, a + 1 == T->accum);
        vil_feed_done(&T->feed);
        /* the next micro-batch (this step's, or the next step's first while this epoch has
         * one): its upload runs while the device works on this one */
        if (a + 1 < T->accum) feed_next(T, T->step, a + 1);
        else if (T->epoch_batch + 1 < T->spe && T->step + 1 < T->total_steps) feed_next(T, T->step + 1, 0);
        /* the feed has finished copying the batch (vil_feed_take waited for it) */
        vil_loader_release_batch(T->loader, b);
        if (logs && a + 1 < T->accum) T->loss_sum += batch_loss_sum(T);
    }
    vil_train_update(&T->m, &sp);
    T->step++;
    T->epoch_batch++;
    T->steps_here++;
    T->int_steps++;
    return GO_ON;
}

/* A log step: the loss (and gradient norm) read back, the divergence check, the progress line
 * and the on_log callback; the next interval starts. GO_ON, or diverged. */
static int log_progress(Trainer *T) {
    const VilTrainConfig *t = T->tc;
    const VilTrainRun *run = T->run;
    float grad_norm = -1.0f;
    T->last_loss = read_loss(T);
    if (t->clip_grad > 0.0f) T->be->to_host(T->be, &grad_norm, T->m.grad_norm, sizeof grad_norm);
    double now = vil_now(), dt = now - T->t_int;
    T->train_time += dt;
    if (t->clip_grad > 0.0f && !isfinite(grad_norm)) {
        vil_error("the gradient norm is %g at step %ld (epoch %d): training diverged. The last "
                  "good checkpoint %s is kept; lower base_lr or clip_grad.", grad_norm, T->step,
                  T->epoch + 1, T->path_last);
        return VIL_TRAIN_DIVERGED;
    }
    if (!isfinite(T->last_loss)) {
        vil_error("the loss is %g at step %ld (epoch %d): training diverged. The last good "
                  "checkpoint %s is kept; lower base_lr or set clip_grad.", T->last_loss, T->step,
                  T->epoch + 1, T->path_last);
        return VIL_TRAIN_DIVERGED;
    }
    VilTrainProgress p = {0};
    p.epoch = T->epoch;
    p.epochs = t->epochs;
    p.step = T->step;
    p.total_steps = T->total_steps;
    p.epoch_step = T->epoch_batch;
    p.epoch_steps = (int)T->spe;
    p.loss = T->last_loss;
    p.lr = T->lr;
    p.grad_norm = grad_norm;
    p.images_per_s = dt > 0 ? (double)T->int_steps * T->global_batch / dt : 0; /* all ranks */
    p.data_wait = dt > 0 ? T->wait_int / dt : 0;
    p.eta_s = eta_seconds(T, T->train_time);
    if (!T->quiet) {
        char eta[32];
        fmt_duration(eta, sizeof eta, p.eta_s);
        fprintf(out_log(T), "epoch %d/%d  step %ld/%ld (%d/%d)  loss %.4f  lr %.3e", p.epoch + 1,
                p.epochs, p.step, p.total_steps, p.epoch_step, p.epoch_steps, p.loss, p.lr);
        if (p.grad_norm >= 0) fprintf(out_log(T), "  gnorm %.3f", p.grad_norm);
        fprintf(out_log(T), "  %.1f img/s  data %.0f%%  eta %s\n", p.images_per_s, 100.0 * p.data_wait, eta);
        fflush(T->log);
    }
    if (T->runlog && vil_runlog_train(T->runlog, &p, (double)T->step / (double)T->spe) != 0) runlog_failed(T);
    if (run->on_log) run->on_log(run->ctx, &p);
    T->t_int = vil_now();
    T->wait_int = 0;
    T->int_steps = 0;
    return GO_ON;
}

/* --stop-after reached or a signal caught (on any rank: every rank stops at this step): the
 * status to stop with, or 0 */
static int stop_requested(const Trainer *T) {
    if (vil_dist_any(T->dist, T->run->interrupt && *T->run->interrupt)) return VIL_TRAIN_INTERRUPTED;
    if (T->run->stop_after > 0 && T->step >= T->run->stop_after) return VIL_TRAIN_STOPPED;
    return 0;
}

/* save_every_steps inside an epoch: the run saved, and a step checkpoint. */
static int save_step(Trainer *T) {
    double t0 = vil_now();
    int st = save_run(T, NULL);
    if (st != GO_ON) return st;
    if (T->rank == 0) snapshot_step(T);
    if (!T->quiet) {
        fprintf(out_log(T), "saved at step %ld: %s, step_%08ld.safetensors\n", T->step, T->path_last, T->step);
        fflush(T->log);
    }
    /* the save counts in the ETA, not in the interval's images/s */
    T->train_time += vil_now() - t0;
    T->t_int += vil_now() - t0;
    return GO_ON;
}

/* A stop inside an epoch: save and say where. */
static int stop_mid_epoch(Trainer *T, int why) {
    int st = save_run(T, NULL);
    if (st != GO_ON) return st;
    if (!T->quiet)
        fprintf(out_log(T), "%s at step %ld (epoch %d, batch %d): saved %s and %s\n",
                why == VIL_TRAIN_INTERRUPTED ? "interrupted" : "stopped", T->step, T->epoch + 1,
                T->epoch_batch, T->path_last, T->path_state);
    fflush(T->log);
    return why;
}

/* The end of an epoch, or of the schedule inside one (max_steps): the feed stopped, the
 * validation pass when due, the save (best.safetensors when the top-1 improved), and a stop
 * when one was asked for. GO_ON, or the run's status. */
static int end_of_epoch(Trainer *T, VilTrainResult *res) {
    feed_stop(T);
    double t_end = vil_now();
    int finished = T->step >= T->total_steps;
    int epoch_done = T->epoch_batch >= T->spe;
    int ep = T->epoch;
    if (epoch_done) {
        T->epoch++;
        T->epoch_batch = 0;
    }
    int every = T->tc->eval_every_epochs, improved = 0;
    if (T->val_loader && (finished || (epoch_done && (ep + 1) % every == 0))) {
        double t_eval = vil_now();
        if (evaluate(T, ep, res) != 0) {
            save_after_failure(T);
            return VIL_TRAIN_FAILED;
        }
        T->eval_secs = vil_now() - t_eval;
        T->eval_total += T->eval_secs; /* train_time takes it in below */
        improved = res->top1 > T->best_top1;
    }
    /* best.safetensors goes last, after the state that records its step (save_all) */
    int st = save_run(T, improved ? &res->top1 : NULL);
    if (st != GO_ON) return st;
    if (T->rank == 0 && snapshot_due(T)) snapshot_step(T);
    if (!T->quiet) {
        char el[32];
        fmt_duration(el, sizeof el, vil_now() - T->t_start);
        fprintf(out_log(T), "%s %d at step %ld (%s): loss %.4f; saved %s\n",
                epoch_done ? "end of epoch" : "end of the schedule (max_steps) in epoch", ep + 1,
                T->step, el, T->last_loss, T->path_last);
        fflush(T->log);
    }
    int why = stop_requested(T);
    if (!finished && why) {
        if (!T->quiet)
            fprintf(out_log(T), "%s at the end of epoch %d: saved %s and %s\n",
                    why == VIL_TRAIN_INTERRUPTED ? "interrupted" : "stopped", ep + 1, T->path_last,
                    T->path_state);
        return why;
    }
    /* the evaluation and the saves count in the ETA, not in the next interval's images/s */
    T->train_time += vil_now() - t_end;
    T->t_int = vil_now();
    T->wait_int = 0;
    return finished ? VIL_TRAIN_DONE : GO_ON;
}

/* ---------------- the run ---------------- */

static int train_loop(Trainer *T, VilTrainResult *res) {
    while (T->step < T->total_steps) {
        int st = start_epoch(T);
        while (st == GO_ON && T->epoch_batch < T->spe && T->step < T->total_steps) {
            if ((st = step(T)) != GO_ON) break;
            int last_of_epoch = T->epoch_batch == T->spe || T->step == T->total_steps;
            if (is_log_step(T, T->step, T->epoch_batch) && (st = log_progress(T)) != GO_ON) break;
            if (!last_of_epoch && snapshot_due(T) && (st = save_step(T)) != GO_ON) break;
            int why = stop_requested(T);
            if (why && !last_of_epoch) st = stop_mid_epoch(T, why);
            else draw_bar(T);
        }
        if (st == GO_ON) st = end_of_epoch(T, res);
        if (st != GO_ON) return st;
    }
    return VIL_TRAIN_DONE;
}

VilTrainStatus vil_train(const VilTrainRun *run, VilTrainResult *res) {
    Trainer TT = {0}, *T = &TT;
    memset(res, 0, sizeof *res);
    res->top1 = res->top5 = res->ema_top1 = res->ema_top5 = res->best_top1 = -1.0f;
    res->last_loss = NAN;
    T->run = run;
    T->lock_fd = -1;
    T->dist = run->dist;
    T->rank = run->dist ? run->dist->rank : 0;
    T->world = run->dist ? run->dist->world : 1;
    T->accum = run->train.accum_steps;
    T->quiet = run->quiet || T->rank != 0;
    T->mc = &run->model;
    T->tc = &run->train;
    T->be = run->be;
    T->log = run->log ? run->log : stdout;
    const char *term = getenv("TERM");
    T->tty = !T->quiet && isatty(fileno(T->log)) && !getenv("SLURM_JOB_ID") &&
             !(term && strcmp(term, "dumb") == 0);
    T->best_top1 = -1.0f;
    T->best_step = -1;
    T->last_loss = NAN;
    T->t_start = vil_now();
    int status = trainer_setup(T);
    /* together: a rank that failed its setup (rank 0 owns the folder) stops every rank */
    if (vil_dist_any(T->dist, status != GO_ON) && status == GO_ON) {
        vil_error("rank %d: another rank failed to set up the run (its message is above)", T->rank);
        status = VIL_TRAIN_FAILED;
    }
    if (status == GO_ON) status = train_loop(T, res);
    res->step = T->step;
    res->epoch = T->epoch;
    res->epochs_done = T->spe > 0 ? (double)T->step / (double)T->spe : 0.0;
    res->best_top1 = T->best_top1;
    res->last_loss = T->last_loss;
    res->seconds = vil_now() - T->t_start;
    out_log(T); /* the bar off the terminal's last line */
    feed_stop(T);
    trainer_free(T);
    return (VilTrainStatus)status;
}
