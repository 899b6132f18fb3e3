/* train.c: `vil train`: the flags, the configuration (cfg file, --set, or the one a --resume
 * state holds), the signal handlers, and the run's outcome as the exit code. The run itself,
 * where it writes and what it resumes are train/'s (vil_train, vil_train_out_dir,
 * vil_train_resume_auto), and so is its last line (vil_train_report). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "vil/dist.h"
#include "train/train.h"
#include "data/image.h"
#include "vil/common.h"
#include "vil/version.h"

static VilStop g_stop;

/* every SIGINT / SIGTERM / SIGUSR1 goes to the run's stop request, which tells a second request
 * from the same one delivered twice (train.h) */
static void on_signal(int sig) { vil_stop_signal(&g_stop, sig); }

/* "vil train ARGS..." as a shell would take it back: arguments with other than safe characters
 * in single quotes (malloc'd) */
static char *command_line(int argc, char **argv) {
    size_t cap = 16;
    for (int i = 0; i < argc; i++) cap += 4 * strlen(argv[i]) + 3;
    char *s = vil_malloc(cap), *p = s;
    p += sprintf(p, "vil");
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int plain = *a != 0;
        for (const char *c = a; *c; c++)
            if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=.,/:@%", *c)) plain = 0;
        *p++ = ' ';
        if (plain) {
            p += sprintf(p, "%s", a);
            continue;
        }
        *p++ = '\'';
        for (const char *c = a; *c; c++) {
            if (*c == '\'') p += sprintf(p, "'\\''");
            else *p++ = *c;
        }
        *p++ = '\'';
    }
    *p = 0;
    return s;
}

/* the flags' values: their defaults set by vil_cmd_train, then filled by vil_args_parse */
typedef struct {
    const char *config, *data, *device, *out, *resume, *names, *val_labels, *init, *decode, *progress;
    int stop_after, quiet, print_config, init_ema, threads, list_keys, dry_run, force;
    int max_pixels; /* -1: not given */
    VilArgList sets;
} Flags;
static Flags o;

static const VilArg ARGS[] = {
    {"--config", VIL_ARG_STR, &o.config, "cfg file with model and training keys (configs/*.cfg)", .meta = "CFG",
     .required = 1, .or_flag = "--resume"},
    {"--data", VIL_ARG_STR, &o.data, VIL_DATA_HELP, .meta = "DIR", .required = 1, .unless = "--print-config"},
    {"--set", VIL_ARG_LIST, &o.sets, "override a config key, key=value (repeatable)"},
    {"--device", VIL_ARG_STR, &o.device, "cpu, cuda or auto", .meta = "cpu|cuda|auto"},
    {"--out", VIL_ARG_STR, &o.out, "output folder (default out/NAME, or the --resume run's)", .meta = "DIR"},
    {"--resume", VIL_ARG_STR, &o.resume, "continue a run: OUT/last.safetensors, its .state file or OUT; "
                                         "auto: the run in --out if there is one, else a fresh one", .meta = "RUN|CKPT|auto",
     .excludes = "--init", .excludes_but = "auto",
     .message = "--init starts a new run from weights, --resume continues one: give one of them"},
    {"--init", VIL_ARG_STR, &o.init, "start from these weights (.safetensors or a PyTorch .pth): fine-tuning", .meta = "CKPT"},
    {"--init-ema", VIL_ARG_FLAG, &o.init_ema, "with --init FILE.pth: take its model_ema", .needs = "--init",
     .message = "--init-ema needs --init FILE.pth"},
    {"--names", VIL_ARG_STR, &o.names, "class names file (imagenet_classes.tsv form, or one per line)", .meta = "FILE"},
    {"--val-labels", VIL_ARG_STR, &o.val_labels, "labels file (\"filename label\" lines) of a flat DIR/val folder", .meta = "FILE"},
    {"--stop-after", VIL_ARG_INT, &o.stop_after, "save and stop after this global step (the schedule is unchanged)"},
    {"--decode", VIL_ARG_STR, &o.decode, "training JPEG decode: exact (default) or fast; = --set decode=...", .meta = "exact|fast",
     .key = "decode"},
    {"--print-config", VIL_ARG_FLAG, &o.print_config, "print the effective configuration (a loadable cfg) and exit"},
    {"--dry-run", VIL_ARG_FLAG, &o.dry_run, "check everything, print the configuration and the run's header, "
                                            "write nothing, exit"},
    {"--list-keys", VIL_ARG_FLAG, &o.list_keys, "list every config key: range, default, help; and timm's flags",
     .alone = 1},
    {"--force", VIL_ARG_FLAG, &o.force, "resume with another global batch (world x batch x accum_steps): "
                                        "the lr and steps per epoch change"},
    {"--quiet", VIL_ARG_FLAG, &o.quiet, "no progress lines"},
    {"--progress", VIL_ARG_STR, &o.progress, VIL_PROGRESS_HELP "; none keeps the header, validation and epoch lines", .meta = "bar|plain|none"},
    {"--threads", VIL_ARG_INT, &o.threads, VIL_THREADS_HELP},
    {"--max-pixels", VIL_ARG_INT, &o.max_pixels, VIL_MAX_PIXELS_HELP "; = --set max_pixels=N (default: the "
                                                 "config's, kept by --resume)", 1, VIL_IMAGE_MAX_PIXELS,
     .key = "max_pixels"},
};

const VilArgSpec vil_cmd_train_spec = {
    "train", "--config CFG --data DIR [--set key=value ...] [timm's flags: --lr X, -b N, ...] "
             "[--device cpu|cuda|auto] [--out DIR] [--resume CKPT|DIR|auto] [--dry-run]",
    "Trains a ViL / ViM classifier with the recipe of doc/recipe.md: AdamW (or\n"
    "SGD, Lamb), linear warmup then cosine (or step, multistep) lr per step, drop\n"
    "path, EMA, Mixup/CutMix, label smoothing, repeated augmentation; evaluates\n"
    "model and EMA on the val split after epochs. Writes OUT/last.safetensors,\n"
    "OUT/last.state.safetensors (for --resume), OUT/ema.safetensors and\n"
    "OUT/best.safetensors at every epoch end. SIGINT, SIGTERM or SIGUSR1 finish the\n"
    "step (or the validation), save and exit 128 + the signal (130, 143, 138); a\n"
    "second one skips the validation and saves now. --list-keys: config keys.",
    ARGS, (int)(sizeof ARGS / sizeof ARGS[0]), 0, 0, &o.sets, .mpirun = 1};

/* --resume auto without --config: nothing to start a fresh run from, so the run in --out,
 * resumed as --resume OUT. 0 with o.resume set to it, or the exit code after the message. */
static int resume_auto_without_config(void) {
    if (o.out && vil_train_resume_auto(o.out)) {
        o.resume = o.out;
        return 0;
    }
    char shown[80];
    long holder = o.out ? vil_train_out_holder(o.out) : 0;
    char pid[24] = "unknown";
    if (holder > 0) snprintf(pid, sizeof pid, "%ld", holder);
    if (holder) /* a run at work that has not saved yet: not a folder without a run */
        fprintf(stderr, "vil train: --resume auto: '%s' is in use by another vil train (pid %s) "
                        "that has saved no state yet: wait for it to end, or choose another "
                        "--out\n", vil_printable(shown, sizeof shown, o.out), pid);
    else if (o.out)
        fprintf(stderr, "vil train: --resume auto: '%s' holds no run to continue, and a fresh "
                        "run there needs --config CFG\n", vil_printable(shown, sizeof shown, o.out));
    else
        fprintf(stderr, "vil train: --resume auto continues the run in --out DIR, or starts one "
                        "there from --config CFG: give --out (and --config)\n");
    return holder ? 1 : 2;
}

/* The configuration: the --resume state's (without --config) or the cfg file's, then the
 * command line's --set, timm's flags, --decode and --max-pixels, finalized. 0, or the exit
 * code (a wrong value 2, an unreadable file 1: vil_exit_code), reported. */
static int build_config(VilTrainRun *run) {
    vil_config_default(&run->model);
    vil_train_config_default(&run->train);
    if (o.resume && !o.config && vil_train_state_read_config(o.resume, &run->model, &run->train) != 0) return 1;
    int r = o.config ? vil_train_config_load(&run->model, &run->train, o.config) : 0;
    double lr = 0.0; /* timm's --lr: base_lr once the global batch is known */
    if (r == 0) r = vil_cli_apply_sets(&run->model, &run->train, &o.sets, &lr);
    if (r == 0 && o.decode) r = vil_train_config_set(&run->model, &run->train, "decode", o.decode);
    if (r == 0 && o.max_pixels != -1) {
        char v[24];
        snprintf(v, sizeof v, "%d", o.max_pixels);
        r = vil_train_config_set(&run->model, &run->train, "max_pixels", v);
    }
    int world = vil_dist_launched() > 0 ? vil_dist_launched() : 1;
    if (r == 0 && lr > 0.0)
        r = vil_train_config_set_lr(&run->train, lr, (long)run->train.batch * run->train.accum_steps * world);
    if (r == 0) r = vil_config_finalize(&run->model);
    if (r == 0) r = vil_train_config_finalize(&run->train);
    return r != 0 ? vil_exit_code(r) : 0;
}

/* the first signal asks for a clean stop, a later one skips the validation, a third ends vil
 * (vil_stop_signal); the handler stays installed */
static void install_stop_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    CHECK_LIBC(sigaction(SIGINT, &sa, NULL), "installing the SIGINT handler");
    CHECK_LIBC(sigaction(SIGTERM, &sa, NULL), "installing the SIGTERM handler");
    /* SIGUSR1 too: mpirun passes it on at once (SIGTERM and SIGINT it turns into the job's end) */
    CHECK_LIBC(sigaction(SIGUSR1, &sa, NULL), "installing the SIGUSR1 handler");
}

/* The run in the process group dist on its backend (run's configuration built): the flags into
 * run, the signal handlers, vil_train, and its report. Returns the exit code: 0 done or stopped
 * as asked, 128 + the signal of a run a signal stopped and saved, else 1. */
static int train_run(VilTrainRun *run, VilDist *dist, const char *cmdline, const char *out_dir, int pmode) {
    run->dist = dist;
    run->data = o.data;
    run->command = cmdline;
    run->commit = vil_version_commit();
    run->names = o.names;
    run->val_labels = o.val_labels;
    run->out_dir = out_dir;
    run->resume = o.resume;
    run->init = o.init;
    run->init_ema = o.init_ema;
    run->stop_after = o.stop_after;
    run->stop = &g_stop;
    run->quiet = o.quiet;
    run->dry_run = o.dry_run;
    run->force = o.force;
    if (o.dry_run && dist->rank == 0) {
        printf("# the effective configuration\n");
        vil_config_print(&run->model, stdout);
        vil_train_config_print(&run->train, stdout);
        printf("\n");
        fflush(stdout);
    }
    run->progress = (VilProgressMode)pmode;
    install_stop_handlers();
    VilTrainResult res;
    VilTrainStatus st = vil_train(run, &res);
    /* a run stopped by a signal and saved exits as shells expect of a program the signal
     * stopped: 128 + its number (130 for SIGINT, 143 for SIGTERM, 138 for SIGUSR1) */
    int code = st == VIL_TRAIN_DONE || st == VIL_TRAIN_STOPPED ? 0
             : st == VIL_TRAIN_INTERRUPTED && res.signal > 0 ? 128 + res.signal : 1;
    if (!o.dry_run) vil_train_report(run, st, &res);
    else if (code == 0 && dist->rank == 0)
        printf("dry run: nothing written; the run would write to %s\n", out_dir);
    return code;
}

int vil_cmd_train(int argc, char **argv) {
    o = (Flags){.device = "auto", .progress = "auto", .max_pixels = -1};
    int rc = vil_args_parse_flags(&vil_cmd_train_spec, argc, argv);
    if (rc >= 0) return rc;
    if (o.list_keys) {
        vil_train_config_list_keys(stdout);
        return 0;
    }
    if (o.stop_after < 0) {
        fprintf(stderr, "vil train: --stop-after must be >= 0 (got %d)\n", o.stop_after);
        return 2;
    }
    if (!vil_device_name_ok(o.device)) return vil_cli_bad_choice("train", "--device", "cpu, cuda or auto", o.device);
    int pmode = vil_cli_progress_mode("train", o.progress);
    if (pmode < 0) return 2;
    /* --resume auto: the run in the output folder when there is one (vil_train_resume_auto) */
    int resume_auto = o.resume && strcmp(o.resume, "auto") == 0;
    if (resume_auto && !o.config) {
        if ((rc = resume_auto_without_config()) != 0) return rc;
        resume_auto = 0;
    }
    if (resume_auto) o.resume = NULL;
    VilTrainRun run = {0};
    if ((rc = build_config(&run)) != 0) return rc;
    if (o.print_config) {
        vil_config_print(&run.model, stdout);
        vil_train_config_print(&run.train, stdout);
        return 0;
    }
    /* the loader's `workers` threads run beside the step the whole run */
    if (vil_cli_set_threads("train", o.threads) < 0) return 2;
    char *out_dir = vil_train_out_dir(o.out, o.resume, run.model.name);
    if (resume_auto) o.resume = vil_train_resume_auto(out_dir);
    /* the process group (mpirun / srun), and this process's GPU: local_rank */
    VilDist dist;
    if (vil_dist_init(&dist) != 0) {
        free(out_dir);
        return 1;
    }
    int code = 1;
    char *cmdline = command_line(argc, argv); /* argv[0] is "train" */
    /* under a launcher, a context of its own on this process's GPU (none on GPU 0 for the others) */
    run.be = dist.mpi ? vil_backend_open(o.device, dist.local_rank) : vil_backend_get(o.device);
    if (run.be && (!dist.mpi || run.be->dist_join(run.be, &dist) == 0))
        code = train_run(&run, &dist, cmdline, out_dir, pmode);
    free(cmdline);
    free(out_dir);
    vil_backend_close(run.be);
    vil_dist_finalize(&dist);
    return code;
}
