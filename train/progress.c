/* progress.c: what a training run prints (trainer.h): the header, the progress lines and the
 * terminal's bar with its ETA, the validation and epoch-end lines, the stop message, the run's
 * last line (vil_train_report), and the run's metrics record (runlog.h). Rank 0 alone prints. */
#include "train/trainer.h"

#include <omp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "vil/common.h"

static void fmt_duration(char *buf, size_t n, double s) {
    if (!(s >= 0) || s > 1e8) snprintf(buf, n, "?");
    else if (s >= 3600) snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else if (s >= 60) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(buf, n, "%.0fs", s);
}

/* The progress stream, the bar cleared first: every line the loop prints goes through it. */
FILE *out_log(Trainer *T) {
    T->line_at = vil_now();
    return vil_progress_line(&T->con);
}

/* Validation passes still due: after every eval_every_epochs-th epoch and after the last. */
static int evals_left(const Trainer *T) {
    if (!T->val_loader || T->spe < 1) return 0;
    int every = T->tc->eval_every_epochs, last = (int)((T->total_steps - T->sched_offset - 1) / T->spe), n = 0;
    for (int e = T->epoch; e <= last; e++) n += (e + 1) % every == 0 || e == last;
    return n;
}

/* Seconds left: the steps at this run's pace (saves in, evaluations out), plus the evaluations
 * due at the last one's length; before the first, the val images at three times the training
 * pace per pass (a forward alone), twice with an EMA. elapsed: seconds of steps_here steps. */
double eta_seconds(const Trainer *T, double elapsed) {
    if (T->steps_here <= 0) return -1;
    double per_step = (elapsed - T->eval_total) / (double)T->steps_here, per_eval = T->eval_secs;
    if (per_eval <= 0 && T->val_ds && per_step > 0)
        per_eval = (vil_model_has_ema(&T->m) ? 2 : 1) * vil_dataset_size(T->val_ds) / (3.0 * T->global_batch / per_step);
    return per_step * (double)(T->total_steps - T->step) + evals_left(T) * per_eval;
}

/* Plain lines between log steps: one after the first step of a start (a log into a file shows
 * the run going within seconds, not at step log_every), then one whenever this long passed
 * without a line. Longer than a usual log interval, so that it adds lines only where log_every
 * leaves the log silent. */
#define PACE_LINE_SECONDS 30.0

/* The bar, at most five times a second: the epoch's share, the last logged loss, the ETA. In
 * plain mode, a pace line when due: the position, the interval's images/s and the ETA (no
 * loss: reading it back waits for the device and sums over the ranks, a log step's work). */
void show_progress(Trainer *T) {
    double now = vil_now();
    if (T->steps_here == 0) return;
    char eta[32];
    if (T->con.mode == VIL_PROGRESS_PLAIN) {
        int first = T->steps_here == 1 && T->line_step != T->step; /* not a log step's */
        if (!first && now - T->line_at < PACE_LINE_SECONDS) return;
        T->line_step = T->step;
        double dt = now - T->t_int;
        fmt_duration(eta, sizeof eta, eta_seconds(T, T->train_time + dt));
        fprintf(out_log(T), "epoch %d/%d  step %ld/%ld (%d/%ld)  %.1f img/s  eta %s\n", T->epoch + 1,
                T->tc->epochs, T->step, T->total_steps, T->epoch_batch, T->spe,
                dt > 0 ? (double)T->int_steps * T->global_batch / dt : 0.0, eta);
        fflush(T->log);
        return;
    }
    if (!vil_progress_due(&T->con, 0)) return;
    enum { W = 24 };
    char bar[W + 1];
    int fill = (int)((double)T->epoch_batch / (double)T->spe * W);
    for (int i = 0; i < W; i++) bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    bar[W] = 0;
    fmt_duration(eta, sizeof eta, eta_seconds(T, T->train_time + (now - T->t_int)));
    char loss[32] = "";
    if (T->last_loss > 0) snprintf(loss, sizeof loss, "  loss %.4f", T->last_loss);
    vil_progress_redraw(&T->con, "epoch %d/%d [%s] %d/%ld  step %ld/%ld%s  eta %s", T->epoch + 1,
                        T->tc->epochs, bar, T->epoch_batch, T->spe, T->step, T->total_steps, loss, eta);
}

/* A metrics write that failed (a full disk): said once; training goes on without them. */
void runlog_failed(Trainer *T) {
    vil_warn("%s/metrics.jsonl is no longer written from step %ld on (see above); training goes on",
             T->run->out_dir, T->step);
    vil_runlog_close(T->runlog);
    T->runlog = NULL;
}

/* what the data go through: a stream's images as they are, else the recipe's augmentation */
static void print_aug(FILE *f, const VilConfig *c, const VilTrainConfig *t) {
    if (c->family_kind == VIL_FAMILY_STREAM) {
        fprintf(f, "data:  streams of %d images, %d per step (truncated BPTT %s); the images as they are, "
                "smoothing %g\n", c->stream_len, c->stream_chunk, c->stream_chunk < c->stream_len ? "on" : "off",
                t->label_smoothing);
        return;
    }
    if (t->canvas > 0)
        fprintf(f, "aug:   canvas %d (the item unscaled at a random place, %s background; validation alike), "
                   "flip %g, ", t->canvas, t->canvas_bg, t->hflip);
    else fprintf(f, "aug:   %s JPEG decode, crop scale (%g, 1), flip %g, ", t->decode, t->scale_min, t->hflip);
    if (t->randaug_n > 0) fprintf(f, "RandAugment n%d m%g mstd%g, ", t->randaug_n, t->randaug_m, t->randaug_mstd);
    else fprintf(f, "no RandAugment, ");
    fprintf(f, "erasing %g, ", t->reprob);
    if (t->mixup > 0 || t->cutmix > 0)
        fprintf(f, "mixup %g / cutmix %g (p %g, switch %g), ", t->mixup, t->cutmix, t->mixup_prob,
                t->mixup_switch_prob);
    else fprintf(f, "no mixup, ");
    fprintf(f, "smoothing %g, repeats %d\n", t->label_smoothing, t->repeats);
}

/* The run's opening lines: model, data, threads, batch and lr, ranks, steps, augmentation, the
 * output folder; then what --init took, the temporaries removed and where a resume starts. */
void print_header(Trainer *T, const char *init_note, const char *state_in) {
    const VilConfig *c = T->mc;
    const VilTrainConfig *t = T->tc;
    FILE *f = T->log;
    fprintf(f, "train: %s (%s, %zu parameters%s, %d x %d x %d) on %s\n", c->name, c->arch, T->m.param_count,
            c->pos_embed_kind == VIL_POS_EMBED_NONE ? ", no pos_embed" : "", c->in_chans, c->img_size, c->img_size,
            T->be->name);
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
    char sched[160], opt[96];
    fprintf(f, "\nbatch: %d x %d rank%s x %d accum_steps = %ld; lr = %g * %ld / 512 = %.4g; warmup "
               "%ld steps from %g; %s\n", t->batch, T->world, T->world == 1 ? "" : "s",
            T->accum, T->global_batch, t->base_lr, T->global_batch, T->peak_lr, T->warmup_steps,
            t->warmup_lr, vil_sched_describe(t, sched, sizeof sched));
    if (T->dist && T->dist->mpi) {
        fprintf(f, "ranks: %d process%s (%s), %d on this host; gradients summed by %s, ", T->world,
                T->world == 1 ? "" : "es", T->dist->launcher, T->dist->local_world,
                strcmp(T->be->name, "cuda") == 0 ? "NCCL" : "MPI");
        if (t->allreduce_kind == VIL_ALLREDUCE_OVERLAP)
            fprintf(f, "overlapping the backward in %g MiB buckets", t->bucket_mb);
        else
            fprintf(f, "after the backward");
        fprintf(f, "; rank 0 prints and writes\n");
        /* Open MPI's mpirun forwards a SIGTERM or Ctrl-C to the ranks and kills them 1 s later
         * (odls_base_sigkill_timeout), before a save of any size; its --mca flags reach the
         * ranks as OMPI_MCA_ variables */
        const char *kt = getenv("OMPI_MCA_odls_base_sigkill_timeout");
        if (strcmp(T->dist->launcher, "mpirun") == 0 && getenv("OMPI_COMM_WORLD_SIZE"))
            fprintf(f, "stop:  mpirun passes a SIGTERM or Ctrl-C on as SIGTERM after %s s and kills the "
                       "ranks %s s later: they save at once; to stop after the validation, signal the "
                       "ranks themselves: pkill -USR1 -f 'vil train'\n", kt ? kt : "1", kt ? kt : "1");
    }
    else if (!vil_dist_built_with_mpi())
        fprintf(f, "ranks: one process (this vil has no MPI: apt-get install libopenmpi-dev "
                   "openmpi-bin and rebuild to train with mpirun or srun)\n");
    fprintf(f, "steps: %d epoch%s x %ld = %ld", t->epochs, t->epochs == 1 ? "" : "s", T->spe,
            (long)t->epochs * T->spe);
    if (T->total_steps - T->sched_offset < (long)t->epochs * T->spe)
        fprintf(f, ", stopping at max_steps %ld", T->total_steps - T->sched_offset);
    fprintf(f, "; %s; drop path %g; EMA %g%s; clip %s\n", vil_optim_describe(t, opt, sizeof opt), c->drop_path,
            t->ema_decay, t->model_ema_warmup ? " (warmup)" : "", t->clip_grad > 0 ? "on (global norm, on the device)" : "off");
    print_aug(f, c, t);
    fprintf(f, "out:   %s\n", T->run->out_dir);
    fflush(f);
    fputs(init_note, f);
    if (T->stale_removed > 0)
        fprintf(f, "out:   removed %d temporary file%s of interrupted saves\n", T->stale_removed,
                T->stale_removed == 1 ? "" : "s");
    if (state_in)
        fprintf(f, "resume: %s at step %ld (epoch %d, batch %d)\n", state_in, T->step, T->epoch + 1,
                T->epoch_batch);
}

/* metrics.jsonl (continued at T->step), config.cfg and this start's line of run.jsonl */
int open_runlog(Trainer *T) {
    const VilTrainRun *run = T->run;
    if (!(T->runlog = vil_runlog_open(run->out_dir, T->step))) return -1;
    const char *cleared = vil_runlog_cleared(T->runlog);
    if (*cleared && !T->quiet) {
        fprintf(T->log, "out:   removed the logs of earlier starts in this folder: %s\n", cleared);
        fflush(T->log);
    }
    char dev[400], name[300];
    snprintf(dev, sizeof dev, "%s:%d %s", T->be->name, T->be->device,
             T->be->device_name(T->be, name, sizeof name));
    VilRunStart s = {.command = run->command, .commit = run->commit, .device = dev, .data = run->data,
                     .train_source = vil_dataset_source(T->ds), .train_images = vil_dataset_size(T->ds),
                     .val_source = T->val_ds ? vil_dataset_source(T->val_ds) : NULL,
                     .val_images = T->val_ds ? vil_dataset_size(T->val_ds) : 0, .ranks = T->world,
                     .accum = T->accum, .global_batch = T->global_batch, .step = T->step,
                     .from_global_batch = T->from_global_batch};
    return vil_runlog_start(T->runlog, T->mc, T->tc, &s);
}

/* A resumed run of saved_world ranks that goes on with another number, at the same global batch. */
void print_resplit(Trainer *T, long saved_world) {
    if (T->quiet) return;
    fprintf(T->log, "resuming a run of %ld rank%s on %d, at the same global batch of %ld\n", saved_world,
            saved_world == 1 ? "" : "s", T->world, T->global_batch);
}

void print_rebatch(Trainer *T, long saved_global, long epoch, long images, long batch) {
    if (T->quiet) return;
    fprintf(T->log, "resuming a run of global batch %ld at %ld (--force): epoch %ld goes on after its "
                    "%ld images, at batch %ld of %ld; the lr schedule goes on from there\n",
            saved_global, T->global_batch, epoch + 1, images, batch, T->spe);
}

/* A resumed run already at the end of its schedule. */
void print_nothing_to_do(Trainer *T) {
    if (T->quiet) return;
    fprintf(T->log, "nothing to do: the run is at step %ld of %ld\n", T->step, T->total_steps);
}

/* A resume inside an epoch: the batches done before the save are decoded and dropped. */
void print_skipping(Trainer *T) {
    if (T->quiet) return;
    fprintf(out_log(T), "resume: skipping %d batches of epoch %d\n", T->epoch_batch, T->epoch + 1);
}

/* A log step's line (p: the step's progress, as on_log gets it). */
void print_progress(Trainer *T, const VilTrainProgress *p) {
    if (T->quiet || T->con.mode == VIL_PROGRESS_NONE) return;
    char eta[32];
    fmt_duration(eta, sizeof eta, p->eta_s);
    T->line_step = p->step;
    fprintf(out_log(T), "epoch %d/%d  step %ld/%ld (%d/%d)  loss %.4f  lr %.3e", p->epoch + 1,
            p->epochs, p->step, p->total_steps, p->epoch_step, p->epoch_steps, p->loss, p->lr);
    if (p->grad_norm >= 0) fprintf(out_log(T), "  gnorm %.3f", p->grad_norm);
    fprintf(out_log(T), "  %.1f img/s  data %.0f%%  eta %s\n", p->images_per_s, 100.0 * p->data_wait, eta);
    fflush(T->log);
}

/* A validation pass's line (pt: its record in metrics.jsonl; bad: files left out of the count;
 * secs: the passes' time). */
void print_eval(Trainer *T, const VilEvalRecord *pt, long bad, double secs) {
    if (T->quiet) return;
    FILE *f = out_log(T);
    fprintf(f, "val   epoch %d: top-1 %.2f%%  top-5 %.2f%%  loss %.4f", pt->epoch, pt->top1, pt->top5,
            pt->loss);
    if (pt->has_ema)
        fprintf(f, "  |  EMA top-1 %.2f%%  top-5 %.2f%%  loss %.4f", pt->ema_top1, pt->ema_top5,
                pt->ema_loss);
    fprintf(f, "  (%ld images, %.1f s)\n", pt->images, secs);
    if (bad) fprintf(f, "      %ld files could not be read and were left out of the count\n", bad);
    fflush(f);
}

/* After a save_every_steps save inside an epoch. */
void print_saved_step(Trainer *T) {
    if (T->quiet) return;
    fprintf(out_log(T), "saved at step %ld: %s, step_%08ld.safetensors\n", T->step, T->path_last, T->step);
    fflush(T->log);
}

/* After the save at the end of epoch ep (0-based), or of the schedule inside it (max_steps). */
void print_epoch_end(Trainer *T, int epoch_done, int ep) {
    if (T->quiet) return;
    char el[32];
    fmt_duration(el, sizeof el, vil_now() - T->t_start);
    fprintf(out_log(T), "%s %d at step %ld (%s): loss %.4f; saved %s\n",
            epoch_done ? "end of epoch" : "end of the schedule (max_steps) in epoch", ep + 1, T->step,
            el, T->last_loss, T->path_last);
    fflush(T->log);
}

/* The stop message, after the save: a signal or --stop-after (why) stopped the run inside an
 * epoch (ep < 0) or at the end of epoch ep (0-based). vil_train_report gives the run's last line. */
void print_stop(Trainer *T, VilTrainStatus why, int ep) {
    if (T->quiet) return;
    char where[96];
    if (ep < 0)
        snprintf(where, sizeof where, "at step %ld (epoch %d, batch %d)", T->step, T->epoch + 1,
                 T->epoch_batch);
    else snprintf(where, sizeof where, "at the end of epoch %d", ep + 1);
    fprintf(out_log(T), "%s %s: saved %s and %s\n", why == VIL_TRAIN_INTERRUPTED ? "interrupted" : "stopped",
            where, T->path_last, T->path_state);
    fflush(T->log);
}

void print_stopping(Trainer *T, int sig, const char *what, const char *again) {
    if (T->rank != 0) return;
    /* said even with --quiet: it answers the user's signal */
    const char *name = vil_signal_name(sig);
    fprintf(out_log(T), "stop requested (%s): %s", name, what);
    if (again) fprintf(out_log(T), "; %s%s again %s", sig == SIGINT ? "Ctrl-C or " : "", name, again);
    fprintf(out_log(T), "\n");
    fflush(T->log);
}

void vil_train_report(const VilTrainRun *run, VilTrainStatus status, const VilTrainResult *res) {
    if (run->dist && run->dist->rank != 0) return; /* rank 0 speaks for the group */
    char *last = vil_path_join(run->out_dir, "last.safetensors");

    /* the launcher and process count go into the command: on fewer ranks the global batch differs */
    char how[64] = "";
    const VilDist *d = run->dist;
    if (d && d->mpi && d->world > 1)
        snprintf(how, sizeof how, strcmp(d->launcher, "srun") == 0 ? "srun -n %d " : "mpirun -np %d ", d->world);
    switch (status) {
    case VIL_TRAIN_DONE:
        printf("done: %ld steps (%.3g epochs) in %.0f s", res->step, res->epochs_done, res->seconds);
        if (res->top1 >= 0) printf("; val top-1 %.2f%% top-5 %.2f%%", res->top1, res->top5);
        if (res->ema_top1 >= 0) printf("; EMA top-1 %.2f%% top-5 %.2f%%", res->ema_top1, res->ema_top5);
        if (res->best_top1 >= 0) {
            char *best = vil_path_join(run->out_dir, "best.safetensors");
            printf("; best top-1 %.2f%% (%s)", res->best_top1, best);
            free(best);
        }
        printf("\n");
        break;
    case VIL_TRAIN_STOPPED:
        printf("stopped at step %ld (--stop-after); continue with: %svil train --resume %s --data %s\n",
               res->step, how, last, run->data);
        break;
    case VIL_TRAIN_INTERRUPTED:
        /* a clean stop, said as such (not "vil: error"); the exit code says the signal */
        fflush(stdout);
        fprintf(stderr, "vil: stopped by %s at step %ld; the run is saved (%s and its state): "
                        "continue with %svil train --resume %s --data %s\n",
                res->signal ? vil_signal_name(res->signal) : "a signal", res->step, last, how,
                run->out_dir, run->data);
        break;
    case VIL_TRAIN_DIVERGED:
        vil_error("training diverged at step %ld (see above)", res->step);
        break;
    default:
        break;
    }
    free(last);
}
