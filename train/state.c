/* state.c: the files of a training run (train.h, trainer.h): the state file that makes --resume
 * continue bitwise-identically on the CPU (its checks on reading, the restore, the repair of
 * checkpoints left behind it), the saves (state, last, ema, best, step checkpoints), and the
 * output folder (the lock, the refusal of another run's folder, the write probe; where a run
 * writes and what --resume auto takes). */
#define _GNU_SOURCE
#include "train/trainer.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/transform.h"
#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "vil/common.h"
#include "vil/limits.h"

#define STATE_FORMAT "vil-train-state"
#define STATE_VERSION "1"

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
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

char *vil_train_out_dir(const char *out, const char *resume, const char *model_name) {
    if (out) return vil_strdup(out);
    if (!resume) return vil_path_join("out", model_name);
    char *sp = vil_train_state_path(resume), *slash = strrchr(sp, '/');
    if (slash) *slash = 0;
    else strcpy(sp, ".");
    return sp;
}

const char *vil_train_resume_auto(const char *out_dir) {
    char *sp = vil_train_state_path(out_dir);
    struct stat st;
    int found = stat(sp, &st) == 0;
    free(sp);
    return found ? out_dir : NULL;
}

long vil_train_out_holder(const char *out_dir) {
    char *p = vil_path_join(out_dir, "train.lock");
    int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    free(p);
    if (fd < 0) return 0;
    long pid = 0;
    struct stat st;
    /* a shared lock is refused while a run holds its exclusive one; taken, it is dropped by the
     * close (a run starting meanwhile waits no longer than that) */
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
        char buf[32] = "";
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        buf[n > 0 ? n : 0] = 0;
        pid = strtol(buf, NULL, 10);
        if (pid <= 0) pid = -1;
    }
    close(fd);
    return pid;
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

int vil_train_state_read_config(const char *resume, VilConfig *model, VilTrainConfig *train) {
    char *state_path = vil_train_state_path(resume);
    VilSafetensors st;
    if (state_open(state_path, &st) != 0) {
        free(state_path);
        return -1;
    }
    const char *mj = vil_st_meta(&st, "vil.config"), *tj = vil_st_meta(&st, "vil.train_config");
    int rc = -1;
    if (!mj || !tj) vil_error("cannot resume: '%s' holds no configuration", state_path);
    else if (vil_config_from_json(model, mj) == 0 && vil_train_config_from_json(train, tj) == 0) rc = 0;
    vil_st_free(&st);
    free(state_path);
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

/* "2 layers x 2 directions x ..." of a state tensor's shape for a message */
static void shape_words(const VilTrainStateInfo *t, long world, char *buf, size_t cap) {
    size_t k = 0;
    const char *d = t->dims;
    buf[0] = 0;
    if (world > 0) k += (size_t)snprintf(buf + k, cap - k, "%ld ranks x ", world);
    for (int i = 0; i < t->ndim && k < cap; i++) {
        size_t dl = d ? strcspn(d, ",") : 0;
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld%s%.*s", i ? " x " : "", (long long)t->shape[i],
                              dl ? " " : "", (int)dl, d ? d : "");
        if (d) d += dl + (d[dl] == ',') + (d[dl] == ',' && d[dl + 1] == ' ');
    }
}

/* The model's training state from the file (vil_model_train_state_info, in its order): every
 * tensor looked up and checked (its size, finite values, >= 0 where nonneg) before any is taken;
 * an optional one (or a group of them) absent starts afresh, saying why; a per-rank one saved by
 * another number of ranks or with another shape starts afresh, saying so; a count saved beside
 * one is read with it. 0, or -1 (reported). */
static int restore_train_state(Trainer *T, const VilSafetensors *st, const char *path, long saved_world) {
    VilModel *m = &T->m;
    int ns = vil_model_train_state_count(m), rc = -1;
    VilTrainStateInfo si[VIL_TRAIN_STATE_MAX];
    const VilStTensor *ts[VIL_TRAIN_STATE_MAX] = {0};
    long counts[VIL_TRAIN_STATE_MAX] = {0};
    int ok = 1, said_group = 0;
    for (int i = 0; i < ns; i++) {
        si[i] = vil_model_train_state_info(m, i);
        const VilTrainStateInfo *t = &si[i];
        size_t want = t->numel * (size_t)(t->per_rank ? saved_world : 1);
        const VilStTensor *x = vil_st_find(st, t->name);
        int fits = x && t->dtype == VIL_STATE_F32 && x->dtype == VIL_ST_F32 && (size_t)vil_st_numel(x) == want &&
                   (!t->per_rank || saved_world == T->world);
        if (fits) {
            ts[i] = x;
            continue;
        }
        /* a group is all there or all absent: a member absent beside another present is damage */
        int others = 0;
        for (int k = 0; t->group && k < ns; k++)
            if (k != i) {
                VilTrainStateInfo o = k < i ? si[k] : vil_model_train_state_info(m, k);
                others |= o.group == t->group && vil_st_find(st, o.name) != NULL;
            }
        if (t->per_rank && x) { /* another batch or number of ranks */
            vil_warn("%s", t->mismatch);
        } else if (t->optional && !x && !others) {
            if (!(t->group && said_group == t->group)) vil_warn("%s", t->absent);
            if (t->group) said_group = t->group;
        } else if (t->params_shaped) {
            vil_error("cannot resume: the state file's '%s' is missing or not %zu float32 values", t->name, want);
            ok = 0;
        } else {
            char words[256];
            shape_words(t, t->per_rank ? saved_world : 0, words, sizeof words);
            vil_error("cannot resume: the state file's '%s' does not match the model: %s = %zu float32 "
                      "values", t->name, words, want);
            ok = 0;
        }
    }
    if (!ok) return -1;
    size_t room = 0;
    for (int i = 0; i < ns; i++) {
        size_t r = ts[i] ? si[i].numel * (size_t)(si[i].per_rank ? saved_world : 1) : 0;
        room = r > room ? r : room;
        if (ts[i] && si[i].count_key && meta_long(st, path, si[i].count_key, 0, LONG_MAX, &counts[i])) return -1;
    }
    float *host = vil_try_malloc((room ? room : 1) * sizeof(float));
    if (!host) return -1;
    for (int i = 0; i < ns; i++) /* every tensor checked before any is taken (every rank's too) */
        if (ts[i] && state_values(path, ts[i], si[i].nonneg, host, (size_t)vil_st_numel(ts[i]))) goto out;
    for (int i = 0; i < ns; i++) {
        const float *v = ts[i] ? (const float *)ts[i]->data : NULL;
        if (v && si[i].per_rank) v += si[i].numel * (size_t)T->rank; /* this rank's */
        if (v) memcpy(host, v, si[i].numel * sizeof(float));
        if (vil_model_train_state_set(m, i, v ? host : NULL) != 0) goto out;
        if (v && si[i].count_key) vil_model_train_state_set_counter(m, i, counts[i]);
    }
    rc = 0;
out:
    free(host);
    return rc;
}

/* A resume at another global batch than the state's: refused with the commands that keep it: the
 * run's launcher and process count, or this one's ranks with accum_steps or batch made up. */
static void refuse_other_batch(Trainer *T, const VilSafetensors *st, long saved_global, long saved_world,
                               long saved_accum, int saved_batch) {
    const VilTrainRun *run = T->run;
    int b = T->tc->batch, a = T->accum, W = T->world;
    long accum = saved_global % ((long)b * W) == 0 ? saved_global / ((long)b * W) : 0;
    long batch = saved_global % ((long)a * W) == 0 ? saved_global / ((long)a * W) : 0;
    int by_accum = accum >= 1 && accum <= 4096, by_batch = batch >= 1 && batch <= VIL_MAX_BATCH;
    char launch[1100] = "", here[160] = "";
    if (saved_world != W && b == saved_batch && a == saved_accum) {
        const char *l = vil_st_meta(st, "vil.launcher");
        char how[64] = "";
        if (saved_world > 1 && l && strcmp(l, "srun") == 0) snprintf(how, sizeof how, "srun -n %ld ", saved_world);
        else if (saved_world > 1) snprintf(how, sizeof how, "mpirun -np %ld ", saved_world);
        snprintf(launch, sizeof launch, "%svil train --resume %s --data %s", how, run->resume, run->data);
    }
    if (by_accum && by_batch)
        snprintf(here, sizeof here, "on %d rank%s, --set accum_steps=%ld (or --set batch=%ld)", W,
                 W == 1 ? "" : "s", accum, batch);
    else if (by_accum || by_batch)
        snprintf(here, sizeof here, "on %d rank%s, --set %s=%ld", W, W == 1 ? "" : "s",
                 by_accum ? "accum_steps" : "batch", by_accum ? accum : batch);
    vil_error("cannot resume: the run trained with a global batch of %ld (batch %d x %ld rank%s x %ld "
              "accum_steps), this start has %ld (%d x %d rank%s x %d): the lr and the steps per epoch "
              "would change. Keep the batch: %s%s%s; or give --force to go on with %ld from the same "
              "place in the epoch (the schedule goes on where it was)",
              saved_global, saved_batch, saved_world, saved_world == 1 ? "" : "s", saved_accum,
              T->global_batch, b, W, W == 1 ? "" : "s", a, launch, *launch && *here ? "; or " : "",
              *launch || *here ? here : "set batch and accum_steps so that batch x ranks x accum_steps "
              "is the run's", T->global_batch);
}

int state_restore(Trainer *T, const char *path) {
    VilSafetensors st;
    if (state_open(path, &st) != 0) return -1;
    VilModel *m = &T->m;
    int rc = -1;
    float *host = vil_try_malloc(m->buf_len * sizeof(float));
    char *mine = vil_config_to_json(T->mc), *tmine = vil_train_config_to_json(T->tc);
    if (!host) goto done;
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
        vil_error("cannot resume: '%s' was trained with another model (%s): a resumed run keeps its "
                  "model, so give no model keys that differ (--set, --config); to train its weights "
                  "as another model (other classes, another image size), start a new run with --init %s",
                  path, d, T->path_last);
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
    /* the optimizer's state is the run's: another optimizer is a new run from the weights */
    if (st_tc.optim != T->tc->optim) {
        vil_error("cannot resume: '%s' was trained with optimizer %s, not %s, and its state holds %s's; "
                  "to go on with %s, start a new run from its weights: --init %s --set optimizer=%s",
                  path, st_tc.optimizer, T->tc->optimizer, st_tc.optimizer, T->tc->optimizer, T->path_last,
                  T->tc->optimizer);
        goto done;
    }
    if (meta_long(&st, path, "vil.steps_per_epoch", 1, 1L << 40, &spe) ||
        meta_long(&st, path, "vil.epoch_batch", 0, spe, &eb) ||
        meta_long(&st, path, "vil.epoch", 0, 1L << 40, &epoch) ||
        meta_long(&st, path, "vil.step", 0, INT_MAX, &step) ||
        meta_long(&st, path, "vil.adam_step", 0, INT_MAX, &adam_step))
        goto done;
    /* the schedule's position is step - vil.sched_offset (a resume at another global batch
     * moves it: see below); states of older vils lack it: 0 */
    long offset = 0;
    int has_offset = vil_st_meta(&st, "vil.sched_offset") != NULL;
    if (has_offset && meta_long(&st, path, "vil.sched_offset", -(1L << 40), 1L << 40, &offset)) goto done;
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
    if ((ep_here > T->tc->epochs || (ep_here == T->tc->epochs && eb_here > 0)) && step - offset < T->total_steps) {
        char why[160];
        snprintf(why, sizeof why, "is past the run's %d epochs while vil.step = %ld is short of its "
                 "%ld steps", T->tc->epochs, step - offset, T->total_steps);
        state_bad(path, "vil.epoch", why);
        goto done;
    }
    if (step - offset < min_step) {
        state_bad(path, "vil.step", "is smaller than vil.epoch + vil.epoch_batch (a step per batch)");
        goto done;
    }
    if (adam_step != step) {
        state_bad(path, "vil.adam_step", "differs from vil.step (one AdamW update per step)");
        goto done;
    }
    if (has_offset && step - offset != epoch * spe + eb) {
        state_bad(path, "vil.step", "is not vil.sched_offset + vil.epoch x vil.steps_per_epoch + "
                                    "vil.epoch_batch (a step per batch)");
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
     * how the all-reduce is scheduled and how long a rank waits for the others, and, with the
     * same global batch, how it is cut into ranks and micro-batches (the samples, their
     * augmentation and drop path are keyed by their place in the global batch). The optimizer
     * is checked by its state tensors' names (another optimizer's state lacks them). */
    int same_global = saved_global == T->global_batch;
    if (has_global && !same_global && !T->run->force) {
        refuse_other_batch(T, &st, saved_global, saved_world, saved_accum, st_tc.batch);
        goto done;
    }
    const char *skip[11] = {"workers", "log_every", "eval_batch", "allreduce", "bucket_mb", "recompute",
                            "optimizer", "dist_timeout"};
    if (same_global) skip[8] = "batch", skip[9] = "accum_steps";
    if ((d = json_diff(tj, tmine, skip)) != NULL) {
        vil_warn("resuming with changed training settings (%s): the run will differ from an "
                 "uninterrupted one", d);
        free(d);
    }
    if (same_global && saved_world != T->world) print_resplit(T, saved_world);
    if (has_global && !same_global) {
        /* --force: the same place in the epoch in images (its batches at the saved global batch,
         * in whole batches of this one: at most a batch's images are seen again), so epochs and
         * the schedule go on where they were; the steps go on counting updates */
        long images = eb * saved_global, eb_new = images / T->global_batch;
        print_rebatch(T, saved_global, epoch, images, eb_new);
        eb = eb_new;
        T->from_global_batch = saved_global;
    }
    if (eb >= T->spe) epoch++, eb = 0;
    if (spe != T->spe && (!has_global || same_global)) /* another batch said so above */
        vil_warn("the saved run had %ld steps per epoch, this one %ld (another dataset?): "
                 "resuming at epoch %ld, batch %ld anyway", spe, T->spe, epoch + 1, eb);
    T->best_top1 = (float)bv;
    T->best_step = best_step;
    size_t n = m->param_count; /* the files hold the tensors packed, without buffer padding */
    const VilStTensor *tp = state_tensor(&st, "params", n);
    if (!tp || state_values(path, tp, 0, host, n)) goto done;
    memcpy(host, tp->data, n * sizeof(float));
    vil_model_unpack(m, host, host);
    if (vil_model_set_params(m, host) != 0 || restore_train_state(T, &st, path, saved_world) != 0) goto done;
    vil_model_optim_set_steps(m, (int)adam_step);
    T->step = step;
    T->epoch = (int)epoch;
    T->epoch_batch = (int)eb;
    /* the schedule's position in this run's steps per epoch: the end moves with it */
    T->sched_offset = step - (epoch * T->spe + eb);
    T->total_steps += T->sched_offset;
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
/* The per-rank training state (VilTrainStateInfo.per_rank: passing's final states): every
 * rank's into T->gathered[i] on rank 0, (world, shape...) with rank r's at r, by a sum over the
 * ranks of a buffer that holds each rank's own at its place; NULL for the others. Collective:
 * 0, or -1 on every rank when any rank lacked the memory for it (reported there). */
static int gather_per_rank(Trainer *T) {
    VilModel *m = &T->m;
    const VilBackend *be = m->be;
    int ns = vil_model_train_state_count(m);
    for (int i = 0; i < VIL_TRAIN_STATE_MAX; i++) {
        free(T->gathered[i]);
        T->gathered[i] = NULL;
    }
    for (int i = 0; i < ns; i++) {
        VilTrainStateInfo t = vil_model_train_state_info(m, i);
        if (!t.per_rank) continue;
        size_t all = t.numel * (size_t)T->world;
        float *host = vil_try_calloc(all + t.room, sizeof(float));
        float *dev = host && T->world > 1 ? be->alloc(be, all * sizeof(float)) : NULL;
        /* together: a rank that could not would leave the others waiting in the sum */
        if (vil_dist_any(T->dist, !host || (T->world > 1 && !dev))) {
            vil_error("rank %d: the training state '%s' of every rank cannot be gathered for the save "
                      "(no memory on a rank)", T->rank, t.name);
            if (dev) be->free(be, dev);
            free(host);
            return -1;
        }
        vil_model_train_state_get(m, i, host + t.numel * (size_t)T->rank);
        if (T->world > 1) {
            be->to_device(be, dev, host, all * sizeof(float));
            be->grad_allreduce(be, &(VilAllReduce){.buf = dev, .n = all, .dist = T->dist});
            be->to_host(be, host, dev, all * sizeof(float));
            be->free(be, dev);
        }
        T->gathered[i] = host;
    }
    return 0;
}
/* Saves on rank 0 (every rank holds the same weights); every rank gets its result and the new
 * best, so all take the same path afterwards. */
static int save_all(Trainer *T, const float *new_best) {
    int rc = 0;
    if (gather_per_rank(T) != 0) return -1; /* on every rank */
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
    size_t n = m->buf_len, bytes = n * sizeof(float);
    int ns = vil_model_train_state_count(m);
    float *p = vil_try_malloc(bytes), *ts[VIL_TRAIN_STATE_MAX] = {0};
    int rc = -1, ok = p != NULL;
    for (int i = 0; ok && i < ns; i++)
        ok = (ts[i] = vil_try_malloc((vil_model_train_state_info(m, i).room + 1) * sizeof(float))) != NULL;
    if (!ok) {
        vil_error("no host memory to save the run at step %ld", T->step);
        goto done;
    }
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
    /* packed: the tensors without the parameter buffer's padding, so a state file does not
     * depend on the build's internal layout; then the training state in its order (the per-rank
     * tensors gathered, with the ranks as their leading dimension) */
    for (int i = 0; i < ns; i++)
        if (!T->gathered[i]) vil_model_train_state_get(m, i, ts[i]);
    vil_model_pack(m, p, p);
    VilStWriter *w = vil_st_writer_new();
    int64_t shape[1] = {(int64_t)m->param_count};
    vil_st_writer_add(w, "params", VIL_ST_F32, 1, shape, p);
    for (int i = 0; i < ns; i++) {
        VilTrainStateInfo t = vil_model_train_state_info(m, i);
        int64_t sh[7];
        int nd = 0;
        if (t.per_rank) sh[nd++] = T->world;
        for (int d = 0; d < t.ndim; d++) sh[nd++] = t.shape[d];
        vil_st_writer_add(w, t.name, VIL_ST_F32, nd, sh, T->gathered[i] ? T->gathered[i] : ts[i]);
    }
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
    META("vil.adam_step", "%d", vil_model_optim_steps(m));
    META("vil.steps_per_epoch", "%ld", T->spe);
    META("vil.sched_offset", "%ld", T->sched_offset);
    META("vil.best_top1", "%.9g", T->best_top1);
    META("vil.best_step", "%ld", T->best_step);
    META("vil.world", "%d", T->world);
    META("vil.accum_steps", "%d", T->accum);
    META("vil.global_batch", "%ld", T->global_batch);
    /* what a resume on another number of ranks names to keep this batch */
    vil_st_writer_meta(w, "vil.launcher", T->dist && T->dist->mpi ? T->dist->launcher : "none");
    /* the counts saved beside their tensors (the fit's updates) */
    for (int i = 0; i < ns; i++) {
        VilTrainStateInfo t = vil_model_train_state_info(m, i);
        if (t.count_key) {
            META(t.count_key, "%ld", vil_model_train_state_counter(m, i));
        }
    }
#undef META
    /* nothing else is random state: every stream is a pure function of (seed, epoch, step) */
    vil_st_writer_meta(w, "vil.rng", "keyed by (seed, epoch, position) in the loader and (seed, step) for drop path");
    int src = vil_st_writer_save(w, T->path_state);
    vil_st_writer_free(w);
    free(mj);
    free(tj);
    if (src != 0) goto done;
    if (save_checkpoint(T, T->path_last, 0) != 0 || (vil_model_has_ema(m) && save_checkpoint(T, T->path_ema, 1) != 0) ||
        (new_best && save_checkpoint(T, T->path_best, 0) != 0)) {
        vil_error("the training state %s is saved at step %ld but the checkpoints are not: free "
                  "space or fix the folder, then --resume brings them up to that step",
                  T->path_state, T->step);
        goto done;
    }
    rc = 0;
done:
    free(p);
    for (int i = 0; i < ns; i++) free(ts[i]);
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
int sync_run_files(Trainer *T) {
    struct {
        const char *path;
        int ema;
    } files[3];
    int nf = 0;
    files[nf].path = T->path_last, files[nf++].ema = 0;
    if (vil_model_has_ema(&T->m)) files[nf].path = T->path_ema, files[nf++].ema = 1;
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

/* ---------------- the loop's pieces ---------------- */

/* After a failure between saves (the loader, an evaluation): the weights are those of a
 * completed step, so they are kept. */
void save_after_failure(Trainer *T) {
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
void snapshot_step(Trainer *T) {
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

int snapshot_due(const Trainer *T) {
    return T->tc->save_every_steps > 0 && T->step % T->tc->save_every_steps == 0;
}

/* save_all for the loop: RUN_GO_ON when saved, else the run ends diverged (weights not
 * finite) or failed */
RunNext save_run(Trainer *T, const float *new_best) {
    int rc = save_all(T, new_best);
    return rc == 0 ? RUN_GO_ON : run_end(T, rc == -2 ? VIL_TRAIN_DIVERGED : VIL_TRAIN_FAILED);
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
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0) {
        vil_error("the output folder '%s' cannot be written (its lock file %s: %s): fix its "
                  "permissions or free space, or choose another --out", out, p,
                  errno == ELOOP ? "a symbolic link" : vil_errno_str());
        free(p);
        return -1;
    }
    /* the pid is written into it in place: a hard link there would take another file's
     * contents (O_NONBLOCK: a FIFO there opens at once and is refused here) */
    if (vil_check_own_file(fd, p) != 0) {
        close(fd);
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

int out_dir_open(Trainer *T, int resume) {
    const char *out = T->run->out_dir;
    T->path_last = vil_path_join(out, "last.safetensors");
    T->path_state = vil_path_join(out, "last.state.safetensors");
    T->path_best = vil_path_join(out, "best.safetensors");
    T->path_ema = vil_path_join(out, "ema.safetensors");
    /* a fresh run never overwrites another one's files: weeks of ImageNet are one typo away */
    /* rank 0 alone owns the folder (vil_train makes the outcome collective) */
    if (T->rank != 0) return 0;
    if (T->run->dry_run) return resume ? 0 : refuse_used_folder(T); /* nothing made */
    if (vil_mkdir_p(out) != 0 || lock_out_dir(T) != 0) return -1;
    if (!resume && refuse_used_folder(T) != 0) return -1;
    return prepare_out_dir(T);
}
