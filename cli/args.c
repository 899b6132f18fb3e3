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

/* Each flag's default as text, taken when parsing begins: --help after flags shows these, not the
 * values typed before it. */
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

void vil_args_usage_hint(const VilArgSpec *spec) { fprintf(stderr, "vil %s --help lists the flags\n", spec->cmd); }

static const VilArg *find_arg(const VilArgSpec *spec, const char *name) {
    for (int i = 0; i < spec->nargs; i++)
        if (strcmp(spec->args[i].name, name) == 0) return &spec->args[i];
    return NULL;
}

/* The optimal-string-alignment distance: edits, a swap of two neighbours counting one (--modle:
 * 1 from --model) */
static int osa_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return 1 << 20; /* no flag is that long */
    int d[65][65];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < c)
                c = d[i - 2][j - 2] + 1;
            d[i][j] = c;
        }
    return d[la][lb];
}

/* How many edits a typed flag may be from one it is taken to mean: one per four characters of
 * the typed name without its dashes, at least one, and fewer than its length. The slips people
 * make are one edit (--smothing, --epoch, --modle, --outt, --imgsize); the suggestions that were
 * wrong changed a third or more of a short name: --remode -> --decode (2 of 6), --ratio ->
 * --data (3 of 5), --scale -> --sched (3 of 5), --drop -> --data (3 of 4). */
static int edits_allowed(const char *typed) {
    while (*typed == '-') typed++;
    int len = (int)strlen(typed), k = len / 4 > 1 ? len / 4 : 1;
    return k < len ? k : len - 1;
}

/* An unknown flag: a key of the config spelled as a flag, or the command's (and timm's, where it
 * takes them) flag within edits_allowed, the nearest. */
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
        int d = osa_distance(name, spec->args[i].name);
        if (d < best) best = d, bname = spec->args[i].name;
    }
    for (int i = 0; spec->timm && i < vil_timm_flag_count; i++) {
        if (vil_timm_flags[i].conv == VIL_TIMM_HINT) continue;
        int d = osa_distance(name, vil_timm_flags[i].flag);
        if (d < best) best = d, bname = vil_timm_flags[i].flag;
    }
    if (bname && best <= edits_allowed(name)) fprintf(stderr, "vil %s: did you mean %s?\n", spec->cmd, bname);
}

/* A flag the command lacks that is timm's: its row, or the command's own flag when the row's key
 * is one (-b in vil bench: --batch), or a usage message (a hint row). Returns 1 with *own or *row
 * set, 0 when it is not timm's, -1 after the message. */
static int timm_flag(const VilArgSpec *spec, const char *name, const VilArg **own, const VilTimmFlag **row) {
    const VilTimmFlag *t = spec->timm ? vil_timm_find(name) : NULL;
    if (!t || !(strcmp(name, t->flag) == 0 || (t->alt && strcmp(name, t->alt) == 0))) return 0;
    if (t->conv == VIL_TIMM_HINT) {
        fprintf(stderr, "vil %s: no flag %s (timm's): %s\n", spec->cmd, name, t->note);
        return -1;
    }
    char flag[128];
    snprintf(flag, sizeof flag, "--%s", t->key);
    for (char *p = flag + 2; *p; p++)
        if (*p == '_') *p = '-';
    if ((*own = find_arg(spec, flag)) != NULL) return 1;
    *row = t;
    return 1;
}

/* The config keys the command line sets and the route of each ("-b 4", "--set batch=8"): one key
 * set twice is refused, naming both routes. */
typedef struct {
    char key[128];
    char route[96];
} Claim;

/* key_len bytes of key (a --set item's key ends at its '='); -1 after the message */
static int claim(const VilArgSpec *spec, Claim *c, int *n, const char *key, size_t key_len, const char *name,
                 const char *val, int joined) {
    char k[128], route[96], shown[80];
    snprintf(k, sizeof k, "%.*s", (int)(key_len < sizeof k ? key_len : sizeof k - 1), key);
    if (joined) snprintf(route, sizeof route, "%s", vil_printable(shown, sizeof shown, name));
    else snprintf(route, sizeof route, "%s %s", name, vil_printable(shown, sizeof shown, val));
    for (int i = 0; i < *n; i++)
        if (strcmp(c[i].key, k) == 0) {
            fprintf(stderr, "vil %s: the config key %s is set twice, by '%s' and by '%s': give it once\n",
                    spec->cmd, vil_printable(shown, sizeof shown, k), c[i].route, route);
            return -1;
        }
    snprintf(c[*n].key, sizeof c[*n].key, "%s", k);
    snprintf(c[*n].route, sizeof c[*n].route, "%s", route);
    (*n)++;
    return 0;
}

static int was_given(const VilArgSpec *spec, const char *given, const char *name) {
    const VilArg *a = name ? find_arg(spec, name) : NULL;
    return a && given[a - spec->args];
}

/* "vil CMD: A is required", "A and B are required", "A, B and C (or D) are required": every
 * required flag, the plain ones first, then those another flag stands in for */
static void say_required(const VilArgSpec *spec) {
    char list[512];
    size_t k = 0;
    int total = 0, n = 0;
    for (int i = 0; i < spec->nargs; i++) total += spec->args[i].required;
    list[0] = 0;
    for (int alt = 0; alt < 2; alt++)
        for (int i = 0; i < spec->nargs; i++) {
            const VilArg *a = &spec->args[i];
            if (!a->required || (a->or_flag != NULL) != alt) continue;
            k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", n == 0 ? "" : n == total - 1 ? " and " : ", ",
                                  a->name);
            if (k < sizeof list && a->or_flag) k += (size_t)snprintf(list + k, sizeof list - k, " (or %s)", a->or_flag);
            if (k >= sizeof list) k = sizeof list - 1;
            n++;
        }
    fprintf(stderr, "vil %s: %s %s required\n", spec->cmd, list, total == 1 ? "is" : "are");
}

/* The table's rules (VilArg's required, excludes, needs) against the flags given and npos
 * positional arguments: 0, or -1 after the message of the first one broken. */
static int check_rules(const VilArgSpec *spec, const char *given, int npos) {
    for (int i = 0; i < spec->nargs; i++) { /* a rule naming a flag the table lacks would never hold */
        const VilArg *a = &spec->args[i];
        const char *named[4] = {a->or_flag, a->unless, a->excludes, a->needs};
        for (int k = 0; k < 4; k++)
            if (named[k] && !find_arg(spec, named[k]))
                VIL_FATAL("the flag table of vil %s: %s names %s, which is not one of its flags", spec->cmd, a->name,
                          named[k]);
    }
    if (spec->positional_of && !find_arg(spec, spec->positional_of))
        VIL_FATAL("the flag table of vil %s: positional_of names %s, which is not one of its flags", spec->cmd,
                  spec->positional_of);
    for (int i = 0; i < spec->nargs; i++)
        if (given[i] && spec->args[i].alone) return 0;
    for (int i = 0; i < spec->nargs; i++) {
        const VilArg *a = &spec->args[i];
        int by_pos = npos > 0 && spec->positional_of && strcmp(spec->positional_of, a->name) == 0;
        if (!a->required || given[i] || by_pos || was_given(spec, given, a->or_flag) ||
            was_given(spec, given, a->unless))
            continue;
        say_required(spec);
        return -1;
    }
    for (int i = 0; i < spec->nargs; i++) {
        const VilArg *a = &spec->args[i];
        if (!given[i] || !was_given(spec, given, a->excludes)) continue;
        if (a->excludes_but && a->type == VIL_ARG_STR && strcmp(*(const char **)a->dst, a->excludes_but) == 0)
            continue;
        if (a->message) fprintf(stderr, "vil %s: %s\n", spec->cmd, a->message);
        else fprintf(stderr, "vil %s: %s and %s exclude each other: give one of them\n", spec->cmd, a->name, a->excludes);
        return -1;
    }
    for (int i = 0; i < spec->nargs; i++) {
        const VilArg *a = &spec->args[i];
        if (!given[i] || !a->needs || was_given(spec, given, a->needs)) continue;
        if (a->message) fprintf(stderr, "vil %s: %s\n", spec->cmd, a->message);
        else fprintf(stderr, "vil %s: %s goes with %s\n", spec->cmd, a->name, a->needs);
        return -1;
    }
    return 0;
}

int vil_args_parse(const VilArgSpec *spec, int argc, char **argv, char ***pos, int *npos) {
    char **p = vil_calloc((size_t)argc + 1, sizeof(char *));
    char *given = vil_calloc((size_t)spec->nargs + 1, 1);
    /* at most 3 keys an argument (timm's --aa) */
    Claim *claims = vil_calloc((size_t)argc * 3 + 1, sizeof(Claim));
    int nclaims = 0;
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
            free(claims);
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
            int t = timm_flag(spec, name, &a, &row);
            if (t < 0) goto usage;
            if (t == 0) {
                char shown[80];
                fprintf(stderr, "vil %s: unknown flag '%s'\n", spec->cmd, vil_printable(shown, sizeof shown, name));
                suggest(spec, name);
                goto usage;
            }
        }
        if ((row && row->conv == VIL_TIMM_SWITCH) || (!row && a->type == VIL_ARG_FLAG)) {
            if (val) {
                fprintf(stderr, "vil %s: %s takes no value%s\n", spec->cmd, name,
                        row ? " (a switch, as timm's)" : "");
                goto usage;
            }
            if (!row) {
                *(int *)a->dst = 1;
                given[a - spec->args] = 1;
                continue;
            }
        } else if (!val) {
            if (i + 1 >= argc) {
                fprintf(stderr, "vil %s: %s needs a value\n", spec->cmd, name);
                goto usage;
            }
            val = argv[++i];
        }
        int joined = eq != NULL || !val;
        if (row) {
            VilArgList *l = spec->timm;
            if (l->n == VIL_ARG_LIST_MAX) {
                fprintf(stderr, "vil %s: too many --set and timm flags\n", spec->cmd);
                goto usage;
            }
            if (!val) val = "1"; /* a switch */
            const char *keys[3];
            int nk = vil_timm_keys(row, val, keys);
            for (int k = 0; k < nk; k++)
                if (claim(spec, claims, &nclaims, keys[k], strlen(keys[k]), joined ? s : name, val, joined) != 0)
                    goto usage;
            l->timm[l->n] = row;
            l->v[l->n++] = val;
            continue;
        }
        char shown[80];
        vil_printable(shown, sizeof shown, val);
        if (a->type != VIL_ARG_LIST && given[a - spec->args]) {
            fprintf(stderr, "vil %s: %s given twice: give it once\n", spec->cmd, name);
            goto usage;
        }
        given[a - spec->args] = 1;
        if ((a->type == VIL_ARG_STR || a->type == VIL_ARG_LIST) && !*val) {
            fprintf(stderr, "vil %s: %s needs a value, got an empty one\n", spec->cmd, name);
            goto usage;
        }
        if (a->key && claim(spec, claims, &nclaims, a->key, strlen(a->key), joined ? s : name, val, joined) != 0)
            goto usage;
        if (a->type == VIL_ARG_LIST && a->dst == spec->timm && strchr(val, '=') &&
            claim(spec, claims, &nclaims, val, (size_t)(strchr(val, '=') - val), joined ? s : name, val, joined) != 0)
            goto usage;
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
            double v = 0.0;
            int prc = vil_parse_float(val, &v);
            if (prc == -1) {
                fprintf(stderr, "vil %s: %s wants a decimal number, got '%s'\n", spec->cmd, name, shown);
                goto usage;
            }
            float f = (float)v;
            if (prc == -2 || !isfinite(f)) {
                fprintf(stderr, "vil %s: %s %s is out of a float's range: its magnitude is at most %g\n",
                        spec->cmd, name, shown, (double)FLT_MAX);
                goto usage;
            }
            /* a float holds a subnormal (1e-40) as it is; a nonzero number below its smallest
             * would be 0, which some flags read as "the default" */
            if (prc == -3 || (v != 0.0 && f == 0.0f)) {
                fprintf(stderr, "vil %s: %s %s is too small for a float (it would be 0; the smallest is "
                                "%g): give 0 for 0\n", spec->cmd, name, shown, (double)FLT_TRUE_MIN);
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
                fprintf(stderr, "vil %s: too many %s flags\n", spec->cmd, name);
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
            fprintf(stderr, "vil %s: missing argument: usage: vil %s %s\n", spec->cmd, spec->cmd, spec->synopsis);
        else
            fprintf(stderr, "vil %s: too many arguments ('%s'): usage: vil %s %s\n", spec->cmd,
                    p[spec->max_positional], spec->cmd, spec->synopsis);
        goto usage;
    }
    if (check_rules(spec, given, n) != 0) goto usage;
    free(given);
    free(claims);
    *pos = p;
    *npos = n;
    return VIL_ARGS_OK;
usage:
    vil_args_usage_hint(spec);
    free(given);
    free(claims);
    free(p);
    return VIL_ARGS_USAGE;
}

int vil_args_parse_all(const VilArgSpec *spec, int argc, char **argv, char ***pos, int *npos) {
    int rc = vil_args_parse(spec, argc, argv, pos, npos);
    return rc == VIL_ARGS_OK ? -1 : rc == VIL_ARGS_HELP ? 0 : 2;
}

int vil_args_parse_flags(const VilArgSpec *spec, int argc, char **argv) {
    char **pos;
    int npos;
    int rc = vil_args_parse_all(spec, argc, argv, &pos, &npos);
    if (rc < 0) free(pos);
    return rc;
}

int vil_cli_bad_choice(const char *cmd, const char *flag, const char *choices, const char *value) {
    char shown[1024];
    fprintf(stderr, "vil %s: %s takes %s (got '%s')\n", cmd, flag, choices, vil_printable(shown, sizeof shown, value));
    return 2;
}

int vil_cli_apply_sets(VilConfig *c, VilTrainConfig *t, const VilArgList *sets, double *lr) {
    int r = 0;
    *lr = 0.0;
    for (int i = 0; r == 0 && i < sets->n; i++)
        if (sets->timm[i]) r = vil_train_config_set_timm(c, t, sets->timm[i], sets->v[i], lr);
    for (int i = 0; r == 0 && i < sets->n; i++)
        if (!sets->timm[i]) r = vil_train_config_set_kv(c, t, sets->v[i]);
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
