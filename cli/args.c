/* args.c: the flag parser behind every `vil` subcommand, and what the commands share: the data
 * and device opening, the compute threads (see args.h). */
#define _GNU_SOURCE /* sched_getaffinity */
#include "args.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/dataset.h"
#include "data/image.h"
#include "train/train_config.h"
#include "vil/backend.h"
#include "vil/common.h"
#include "vil/console.h"
#include "vil/limits.h"

/* Each flag's default as text, taken when parsing begins: the usage after a bad flag shows these,
 * not the values typed before it. */
#define DEFAULTS_MAX 64
static struct {
    const VilArg *args;
    char text[DEFAULTS_MAX][64];
} g_defaults;

/* a number outside the flag's range is a "not given" mark, not a default */
static void default_text(const VilArg *a, char *def, size_t n) {
    def[0] = 0;
    double v = a->type == VIL_ARG_INT ? *(int *)a->dst : a->type == VIL_ARG_FLOAT ? *(float *)a->dst : 0;
    if ((a->type == VIL_ARG_INT || a->type == VIL_ARG_FLOAT) && a->lo < a->hi && (v < a->lo || v > a->hi)) return;
    if (a->type == VIL_ARG_INT) snprintf(def, n, " (default %d)", *(int *)a->dst);
    if (a->type == VIL_ARG_FLOAT) snprintf(def, n, " (default %g)", *(float *)a->dst);
    if (a->type == VIL_ARG_STR && *(const char **)a->dst) snprintf(def, n, " (default %s)", *(const char **)a->dst);
}

static void take_defaults(const VilArgSpec *spec) {
    g_defaults.args = spec->args;
    for (int i = 0; i < spec->nargs && i < DEFAULTS_MAX; i++)
        default_text(&spec->args[i], g_defaults.text[i], sizeof g_defaults.text[i]);
}

void vil_args_usage(const VilArgSpec *spec, int to_stderr) {
    FILE *f = to_stderr ? stderr : stdout;
    fprintf(f, "usage: vil %s %s\n", spec->cmd, spec->synopsis);
    if (!to_stderr && spec->summary) fprintf(f, "\n%s\n", spec->summary);
    if (spec->nargs) fprintf(f, "\noptions:\n");
    for (int i = 0; i < spec->nargs; i++) {
        const VilArg *a = &spec->args[i];
        char ph[48] = ""; /* " NAME": the placeholder the flag's table gives */
        if (a->meta && a->type != VIL_ARG_FLAG) snprintf(ph, sizeof ph, " %s", a->meta);
        const char *meta = ph[0]                      ? ph
                           : a->type == VIL_ARG_INT   ? " N"
                           : a->type == VIL_ARG_FLOAT ? " X"
                           : a->type == VIL_ARG_STR   ? " S"
                           : a->type == VIL_ARG_LIST  ? " K=V"
                                                      : "";
        char def[64];
        if (g_defaults.args == spec->args && i < DEFAULTS_MAX) snprintf(def, sizeof def, "%s", g_defaults.text[i]);
        else default_text(a, def, sizeof def);
        fprintf(f, "  %s%-*s %s%s\n", a->name, (int)(22 - strlen(a->name)), meta, a->help, def);
    }
    fprintf(f, "  %-22s %s\n", "--help", "print this help");
    if (!spec->timm) return;
    /* timm's flags, wrapped */
    fprintf(f, "\ntimm's flags, each setting a config key (vil train --list-keys says which):\n ");
    int col = 1;
    for (int i = 0; i < vil_timm_flag_count; i++) {
        const VilTimmFlag *t = &vil_timm_flags[i];
        if (t->conv == VIL_TIMM_HINT) continue;
        char item[64];
        int n = snprintf(item, sizeof item, " %s%s%s", t->alt ? t->alt : "", t->alt ? "/" : "", t->flag);
        if (col + n > 96) fprintf(f, "\n "), col = 1;
        fputs(item, f);
        col += n;
    }
    fprintf(f, "\n");
}

static const VilArg *find_arg(const VilArgSpec *spec, const char *name) {
    for (int i = 0; i < spec->nargs; i++)
        if (strcmp(spec->args[i].name, name) == 0) return &spec->args[i];
    return NULL;
}

/* An unknown flag: a key of the config spelled as a flag, or the nearest flag of the command (and
 * of timm's where it takes them). */
static void suggest(const VilArgSpec *spec, const char *name) {
    if (spec->timm && strncmp(name, "--", 2) == 0) {
        char key[128];
        snprintf(key, sizeof key, "%s", name + 2);
        for (char *p = key; *p; p++)
            if (*p == '-') *p = '_';
        if (vil_keys_find(&vil_model_keys, key) || vil_keys_find(&vil_train_keys, key)) {
            fprintf(stderr, "vil %s: did you mean --set %s=VALUE?\n", spec->cmd, key);
            return;
        }
    }
    int best = 1 << 30;
    const char *bname = NULL;
    for (int i = 0; i < spec->nargs; i++) {
        int d = vil_edit_distance(name, spec->args[i].name);
        if (d < best) best = d, bname = spec->args[i].name;
    }
    for (int i = 0; spec->timm && i < vil_timm_flag_count; i++) {
        if (vil_timm_flags[i].conv == VIL_TIMM_HINT) continue;
        int d = vil_edit_distance(name, vil_timm_flags[i].flag);
        if (d < best) best = d, bname = vil_timm_flags[i].flag;
    }
    if (bname && best <= 3) fprintf(stderr, "vil %s: did you mean %s?\n", spec->cmd, bname);
}

/* A flag the command lacks that is timm's: its row, the command's own flag when the row's key is
 * one (-b in vil bench: --batch), or a usage message (a hint row, a repeat). Returns 1 with *own or
 * *row set, 0 when it is not timm's, -1 after the message. */
static int timm_flag(const VilArgSpec *spec, const char *name, char *given, const VilArg **own,
                     const VilTimmFlag **row) {
    const VilTimmFlag *t = spec->timm ? vil_timm_find(name) : NULL;
    if (!t || !(strcmp(name, t->flag) == 0 || (t->alt && strcmp(name, t->alt) == 0))) return 0;
    if (t->conv == VIL_TIMM_HINT) {
        fprintf(stderr, "vil %s: no option %s: %s\n", spec->cmd, name, t->note);
        return -1;
    }
    char flag[128];
    snprintf(flag, sizeof flag, "--%s", t->key);
    for (char *p = flag + 2; *p; p++)
        if (*p == '_') *p = '-';
    if ((*own = find_arg(spec, flag)) != NULL) return 1;
    int i = (int)(t - vil_timm_flags);
    if (given[i]) {
        fprintf(stderr, "vil %s: %s given twice: give it once\n", spec->cmd, t->flag);
        return -1;
    }
    given[i] = 1;
    *row = t;
    return 1;
}

int vil_args_parse(const VilArgSpec *spec, int argc, char **argv, char ***pos, int *npos) {
    char **p = vil_calloc((size_t)argc + 1, sizeof(char *));
    char *given = vil_calloc((size_t)spec->nargs + 1, 1);
    char *timm_given = vil_calloc((size_t)vil_timm_flag_count, 1);
    take_defaults(spec);
    int n = 0, flags_done = 0;
    for (int i = 1; i < argc; i++) {
        char *s = argv[i];
        if (!flags_done && strcmp(s, "--") == 0) {
            flags_done = 1;
            continue;
        }
        if (flags_done || s[0] != '-' || s[1] == 0) {
            p[n++] = s;
            continue;
        }
        if (strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0) {
            vil_args_usage(spec, 0);
            free(given);
            free(timm_given);
            free(p);
            return VIL_ARGS_HELP;
        }
        /* accept --name=value as well as --name value */
        char name[128];
        const char *val = NULL;
        const char *eq = strchr(s, '=');
        size_t nl = eq ? (size_t)(eq - s) : strlen(s);
        if (nl >= sizeof name) nl = sizeof name - 1;
        memcpy(name, s, nl);
        name[nl] = 0;
        if (eq) val = eq + 1;
        const VilArg *a = find_arg(spec, name);
        const VilTimmFlag *row = NULL;
        if (!a) {
            int t = timm_flag(spec, name, timm_given, &a, &row);
            if (t < 0) goto usage;
            if (t == 0) {
                fprintf(stderr, "vil %s: unknown option '%s'\n", spec->cmd, name);
                suggest(spec, name);
                goto usage;
            }
        }
        if (row) {
            if (!val) {
                if (i + 1 >= argc) {
                    fprintf(stderr, "vil %s: option %s needs a value\n", spec->cmd, name);
                    goto usage;
                }
                val = argv[++i];
            }
            VilArgList *l = spec->timm;
            if (l->n == VIL_ARG_LIST_MAX) {
                fprintf(stderr, "vil %s: too many --set and timm options\n", spec->cmd);
                goto usage;
            }
            l->timm[l->n] = row;
            l->v[l->n++] = val;
            continue;
        }
        if (a->type == VIL_ARG_FLAG) {
            if (val) {
                fprintf(stderr, "vil %s: option %s takes no value\n", spec->cmd, name);
                goto usage;
            }
            *(int *)a->dst = 1;
            continue;
        }
        if (!val) {
            if (i + 1 >= argc) {
                fprintf(stderr, "vil %s: option %s needs a value\n", spec->cmd, name);
                goto usage;
            }
            val = argv[++i];
        }
        char shown[80];
        vil_printable(shown, sizeof shown, val);
        if (a->type != VIL_ARG_LIST) {
            if (given[a - spec->args]) {
                fprintf(stderr, "vil %s: %s given twice: give it once\n", spec->cmd, name);
                goto usage;
            }
            given[a - spec->args] = 1;
        }
        if (a->type == VIL_ARG_INT) {
            long v;
            double lo = a->lo < a->hi ? a->lo : -2147483647.0, hi = a->lo < a->hi ? a->hi : 2147483647.0;
            int prc = vil_parse_int(val, &v);
            if (prc == -1) {
                fprintf(stderr, "vil %s: %s wants a whole decimal number, got '%s'\n", spec->cmd, name, shown);
                goto usage;
            }
            if (prc != 0 || v < lo || v > hi) {
                fprintf(stderr, "vil %s: %s %s is out of range: it takes %.0f..%.0f\n", spec->cmd, name,
                        shown, lo, hi);
                goto usage;
            }
            *(int *)a->dst = (int)v;
        } else if (a->type == VIL_ARG_FLOAT) {
            double v;
            int prc = vil_parse_float(val, &v);
            if (prc == -1) {
                fprintf(stderr, "vil %s: %s wants a decimal number, got '%s'\n", spec->cmd, name, shown);
                goto usage;
            }
            /* out of a float's range: 1e-300 became 0, which some flags read as "the default" */
            float f = (float)v;
            if (prc != 0 || !isfinite(f) || (v != 0.0 && !isnormal(f))) {
                fprintf(stderr, "vil %s: %s %s is out of a float's range: 0, or a magnitude of "
                                "%g..%g\n", spec->cmd, name, shown, (double)FLT_MIN, (double)FLT_MAX);
                goto usage;
            }
            if (a->lo < a->hi && (v < a->lo || v > a->hi)) {
                fprintf(stderr, "vil %s: %s %s is out of range: it takes %g..%g\n", spec->cmd, name,
                        shown, a->lo, a->hi);
                goto usage;
            }
            *(float *)a->dst = f;
        } else if (a->type == VIL_ARG_LIST) {
            VilArgList *l = a->dst;
            if (l->n == VIL_ARG_LIST_MAX) {
                fprintf(stderr, "vil %s: too many %s options\n", spec->cmd, name);
                goto usage;
            }
            l->timm[l->n] = NULL;
            l->v[l->n++] = val;
        } else {
            *(const char **)a->dst = val;
        }
    }
    if (n < spec->min_positional || (spec->max_positional >= 0 && n > spec->max_positional)) {
        if (n < spec->min_positional)
            fprintf(stderr, "vil %s: missing argument\n", spec->cmd);
        else
            fprintf(stderr, "vil %s: too many arguments ('%s')\n", spec->cmd,
                    p[spec->max_positional]);
        goto usage;
    }
    free(given);
    free(timm_given);
    *pos = p;
    *npos = n;
    return VIL_ARGS_OK;
usage:
    vil_args_usage(spec, 1);
    free(given);
    free(timm_given);
    free(p);
    return VIL_ARGS_USAGE;
}

int vil_args_require(const VilArgSpec *spec, const char *flag, const void *value) {
    if (value) return 0;
    fprintf(stderr, "vil %s: %s is required\n", spec->cmd, flag);
    vil_args_usage(spec, 1);
    return 2;
}

int vil_args_parse_flags(const VilArgSpec *spec, int argc, char **argv) {
    char **pos;
    int npos;
    int rc = vil_args_parse(spec, argc, argv, &pos, &npos);
    if (rc == VIL_ARGS_HELP) return 0;
    if (rc != VIL_ARGS_OK) return 2;
    free(pos);
    return -1;
}

int vil_cli_bad_choice(const char *cmd, const char *flag, const char *choices, const char *value) {
    char shown[1024];
    fprintf(stderr, "vil %s: %s takes %s (got '%s')\n", cmd, flag, choices, vil_printable(shown, sizeof shown, value));
    return 2;
}

int vil_cli_apply_sets(VilConfig *c, VilTrainConfig *t, const VilArgList *sets, double *lr) {
    int r = 0, base_lr = 0;
    *lr = 0.0;
    for (int i = 0; r == 0 && i < sets->n; i++) {
        r = sets->timm[i] ? vil_train_config_set_timm(c, t, sets->timm[i], sets->v[i], lr)
                          : vil_train_config_set_kv(c, t, sets->v[i]);
        if (!sets->timm[i] && strncmp(sets->v[i], "base_lr=", 8) == 0) base_lr = 1;
    }
    if (r == 0 && *lr > 0.0 && base_lr) {
        vil_error("--lr (timm's absolute peak lr) and --set base_lr both set the learning rate: give one");
        r = VIL_EUSAGE;
    }
    return r;
}

int vil_cli_progress_mode(const char *cmd, const char *word) {
    int mode = vil_progress_parse(word);
    if (mode < 0) vil_cli_bad_choice(cmd, "--progress", "bar, plain or none", word);
    return mode;
}

int vil_cli_check_device_split(const char *cmd, const char *device, const char *split) {
    if (!vil_device_name_ok(device)) return vil_cli_bad_choice(cmd, "--device", "cpu, cuda or auto", device);
    if (!vil_dataset_split_ok(split)) return vil_cli_bad_choice(cmd, "--split", "val, test or train", split);
    return 0;
}

int vil_cli_int_list(const char *s, int *out, int max, int lo, int hi) {
    int n = 0;
    const char *p = s;
    for (;;) {
        size_t len = strcspn(p, ",");
        char item[32];
        long v;
        if (len >= sizeof item || n == max) return 0;
        memcpy(item, p, len);
        item[len] = 0;
        /* each a whole decimal number, as every other number (no " 5", "+5") */
        if (vil_parse_int(item, &v) != 0 || v < lo || v > hi) return 0;
        out[n++] = (int)v;
        if (!p[len]) return n;
        p += len + 1;
    }
}

int vil_cli_open_data_device(const char *data, const char *split, const char *labels,
                             const char *device, VilDataset **ds, const VilBackend **be) {
    *be = NULL;
    if (!(*ds = vil_dataset_open(data, split, labels))) return 1;
    if (!(*be = vil_backend_get(device))) {
        vil_dataset_free(*ds);
        *ds = NULL;
        return 1;
    }
    return 0;
}

int vil_cli_open_eval(const char *cmd, const char *model, const char *data, const char *split,
                      const char *labels, const char *device, int max_pixels, int threads,
                      const VilCheckpointOpts *lo, VilDataset **ds, const VilBackend **be, VilModel *m,
                      VilCheckpointMeta *meta) {
    if (vil_cli_check_device_split(cmd, device, split) != 0 || vil_cli_set_max_pixels(cmd, max_pixels) != 0 ||
        vil_cli_set_threads(cmd, threads) < 0)
        return 2;
    if (vil_cli_open_data_device(data, split, labels, device, ds, be) != 0) return 1;
    if (vil_checkpoint_load(model, *be, lo, m, meta) != 0) {
        vil_dataset_free(*ds);
        *ds = NULL;
        return 1;
    }
    return 0;
}

/* The CPUs this process may run on: its affinity mask, which OpenMP's own default also counts. */
static int cpus_allowed(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN); /* a mask wider than cpu_set_t's 1024 CPUs */
    return n > 0 ? (int)n : 1;
}

/* Processes of this run on this host that were not bound to their own CPUs (mpirun
 * --bind-to none): they share the machine. 1 otherwise. */
static int unbound_procs_here(void) {
    const char *v = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!v) v = getenv("MPI_LOCALNRANKS"); /* MPICH */
    int n = v ? atoi(v) : 1;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 1 && cpus_allowed() == online ? n : 1;
}

int vil_cli_set_threads(const char *cmd, int requested) {
    if (requested < 0 || requested > VIL_MAX_THREADS) {
        fprintf(stderr, "vil %s: --threads must be in 0..%d (0: $OMP_NUM_THREADS if set, else the "
                        "CPUs this process may use), got %d\n", cmd, VIL_MAX_THREADS, requested);
        return -1;
    }
    const char *env = getenv("OMP_NUM_THREADS");
    if (requested == 0 && env && env[strspn(env, " \t")]) return omp_get_max_threads();
    int n = requested;
    if (n == 0) {
        n = cpus_allowed() / unbound_procs_here();
        if (n < 1) n = 1;
    }
    /* OpenBLAS needs nothing: vil/linear.c runs it single-threaded inside these threads */
    omp_set_num_threads(n);
    return n;
}

void vil_cli_print_threads(FILE *f, int loader_threads) {
    fprintf(f, "threads: %d compute (OpenMP)", omp_get_max_threads());
    if (loader_threads > 0) fprintf(f, ", %d loader", loader_threads);
    fprintf(f, "\n");
}

int vil_cli_set_max_pixels(const char *cmd, int n) {
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_image_set_max_pixels(n);
    vil_error_release(&cap);
    if (rc) fprintf(stderr, "vil %s: %s\n", cmd, cap.msg);
    return rc ? 2 : 0;
}
