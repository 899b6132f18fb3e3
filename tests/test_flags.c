/* test_flags.c: the command line as a timm user types it (issue 45's command-line items). One
 * config key set twice on a command line, by any two routes (--set twice, a timm flag and --set,
 * two timm spellings, the command's own flag), is refused naming both, while a cfg file stays
 * the layer the command line overrides and a key a timm flag only implies is refined by --set;
 * timm's --aa strings refuse a part twice and an inc other than 0/1. Every flag that takes a
 * value refuses an empty one before anything runs; numbers too small for a float are "too
 * small", not "out of range", and a float subnormal is taken. An unknown flag is a few lines: the
 * error, a suggestion only when close, where the usage is. timm's --opt names and
 * --model-ema-warmup mean what they mean in timm. The rules of a flag table (issue 46): required
 * flags, flags that exclude each other or need another, a flag that is the command's whole work,
 * on a table of the test's own (the parser in-process) and on every command's (each required
 * flag its usage line names outside brackets is what a bare command asks for); only the commands
 * the README runs under mpirun (train, bench) start as one of several processes. Runs bin/vil
 * ($VIL_BIN). */
#define _GNU_SOURCE /* cli/args.c (included below) reads the CPU affinity */
#include <fcntl.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data_corpus.h"
#include "testing.h"

/* the flag parser itself, for a table of the test's own (cli/ is not in libvil.a) */
#include "cli/args.c"

static char *dir;
static char out[1 << 16];

/* "bin/vil ARGS 2>&1" with %1$s the temp folder: its exit status, the output in out */
static int vil(const char *fmt) {
    char args[4096], cmd[8192];
    snprintf(args, sizeof args, fmt, dir);
    snprintf(cmd, sizeof cmd, "bin/vil %s 2>&1", args);
    return t_run(cmd, out, sizeof out);
}

/* the value of "key = value" in --print-config's output, or NULL */
static const char *cfg_value(const char *key, char *v, size_t n) {
    char at[96];
    snprintf(at, sizeof at, "\n%s ", key);
    const char *p = strstr(out, at);
    if (!p) return NULL;
    p = strchr(p + 1, '=');
    if (!p) return NULL;
    snprintf(v, n, "%.*s", (int)strcspn(p + 2, "\n"), p + 2);
    return v;
}

static int lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

#define TRAIN "train --config %1$s/tiny.cfg --print-config "

/* Item 11: a key set twice by any two routes; the routes as typed, in the order typed */
static void test_key_twice(void) {
    static const struct {
        const char *args, *first, *second, *key;
    } twice[] = {
        {TRAIN "--drop-path 0.1 --drop-path-rate 0.2", "--drop-path 0.1", "--drop-path-rate 0.2", "drop_path"},
        {TRAIN "-b 4 --set batch=8", "-b 4", "--set batch=8", "batch"},
        {TRAIN "--set batch=4 --set batch=6", "--set batch=4", "--set batch=6", "batch"},
        {TRAIN "--set init_state=noise --set init_state=fitted", "--set init_state=noise",
         "--set init_state=fitted", "init_state"},
        {TRAIN "--set depth=2 --set=depth=3", "--set depth=2", "--set=depth=3", "depth"},
        {TRAIN "--set label_smoothing=0.3 --smoothing=0.2", "--set label_smoothing=0.3", "--smoothing=0.2",
         "label_smoothing"},
        {TRAIN "--lr 0.1 --set base_lr=0.01", "--lr 0.1", "--set base_lr=0.01", "base_lr"},
        {TRAIN "--decode fast --set decode=exact", "--decode fast", "--set decode=exact", "decode"},
        {TRAIN "--set max_pixels=99 --max-pixels 100", "--set max_pixels=99", "--max-pixels 100", "max_pixels"},
        {TRAIN "--aa rand-m9 --set randaug_m=7", "--aa rand-m9", "--set randaug_m=7", "randaug_m"},
        {TRAIN "--opt sgd --set optimizer=adamw", "--opt sgd", "--set optimizer=adamw", "optimizer"},
        {TRAIN "--model-ema-warmup --set model_ema_warmup=0", "--model-ema-warmup", "--set model_ema_warmup=0",
         "model_ema_warmup"},
        {TRAIN "--img-size 32 --set img_size=16", "--img-size 32", "--set img_size=16", "img_size"},
        {"bench --model %1$s/tiny.cfg -b 2 --set batch=3", "-b 2", "--set batch=3", "batch"},
    };
    for (size_t i = 0; i < sizeof twice / sizeof twice[0]; i++) {
        int rc = vil(twice[i].args);
        char want[256];
        snprintf(want, sizeof want, "%s is set twice, by '%s' and by '%s'", twice[i].key, twice[i].first,
                 twice[i].second);
        T_CHECK(rc == 2 && strstr(out, want) && lines(out) <= 2,
                "%s: exit 2 with '%s' (rc %d): %.400s", twice[i].args, want, rc, out);
    }
    /* allowed: a cfg file under the command line; a key a timm flag implies, refined by --set in
     * either order; the keys --aa's string leaves at timm's defaults */
    char p[1024];
    snprintf(p, sizeof p, "%s/b8.cfg", dir);
    const char *b8 = "img_size = 16\npatch_size = 4\nstride = 4\nembed_dim = 8\ndepth = 2\nd_state = 4\n"
                     "batch = 8\nnesterov = 1\noptimizer = sgd\nrandaug_mstd = 0.5\n";
    corpus_write(p, b8, strlen(b8));
    static const struct {
        const char *args, *key[3], *want[3];
    } ok[] = {
        {"train --config %1$s/b8.cfg --print-config -b 4", {"batch"}, {"4"}},
        {"train --config %1$s/b8.cfg --print-config --set batch=4", {"batch"}, {"4"}},
        {TRAIN "--opt sgd --set nesterov=0", {"optimizer", "nesterov"}, {"sgd", "0"}},
        {TRAIN "--set nesterov=0 --opt sgd", {"optimizer", "nesterov"}, {"sgd", "0"}},
        {TRAIN "--set nesterov=0 --opt nesterov", {"optimizer", "nesterov"}, {"sgd", "0"}},
        {"train --config %1$s/b8.cfg --print-config --opt momentum", {"optimizer", "nesterov"}, {"sgd", "0"}},
        {"train --config %1$s/b8.cfg --print-config --set optimizer=sgd", {"optimizer", "nesterov"}, {"sgd", "1"}},
        {TRAIN "--aa rand-m9 --set randaug_mstd=0.5", {"randaug_n", "randaug_m", "randaug_mstd"}, {"2", "9", "0.5"}},
        {"train --config %1$s/b8.cfg --print-config --aa rand-m7", {"randaug_n", "randaug_m", "randaug_mstd"},
         {"2", "7", "0"}},
        {TRAIN "--aa rand-inc0-n3", {"randaug_n", "randaug_m"}, {"3", "10"}},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int rc = vil(ok[i].args);
        int good = rc == 0;
        char v[64], got[256] = "";
        for (int k = 0; k < 3 && ok[i].key[k]; k++) {
            const char *g = cfg_value(ok[i].key[k], v, sizeof v);
            good &= g && strcmp(g, ok[i].want[k]) == 0;
            snprintf(got + strlen(got), sizeof got - strlen(got), " %s=%s", ok[i].key[k], g ? g : "?");
        }
        T_CHECK(good, "%s: exit 0,%s (rc %d): %.300s", ok[i].args, got, rc, rc ? out : "");
    }
    /* timm's --aa: a part once, inc 0 or 1 */
    static const char *const aa_bad[][2] = {{"rand-m9-n2-n3", "the part n is given twice"},
                                            {"rand-m9-mstd0.5-m7", "the part m is given twice"},
                                            {"rand-inc2", "inc takes 0 or 1"},
                                            {"rand-m9-inc1-inc1", "the part inc is given twice"}};
    for (int i = 0; i < 4; i++) {
        char a[512];
        snprintf(a, sizeof a, "%s--aa %s", TRAIN, aa_bad[i][0]);
        int rc = vil(a);
        T_CHECK(rc == 2 && strstr(out, "--aa") && strstr(out, aa_bad[i][1]), "--aa %s: exit 2, '%s' (rc %d): %.300s",
                aa_bad[i][0], aa_bad[i][1], rc, out);
    }
}

/* the flags of `vil CMD --help` that take a value: "  --name META  help" (one space before the
 * placeholder; a switch's help is further), up to the blank line that ends the options */
static int value_flags(const char *help, char flags[][48], int max) {
    int n = 0;
    const char *at = strstr(help, "\noptions:\n");
    for (const char *l = at ? at + 9 : NULL; l && l[1] && l[1] != '\n' && n < max; l = strchr(l + 1, '\n')) {
        const char *s = l + 1;
        if (strncmp(s, "  -", 3) != 0) continue;
        s += 2;
        size_t nl = strcspn(s, " \n");
        if (s[nl] != ' ' || s[nl + 1] == ' ' || s[nl + 1] == '\n' || nl >= 48) continue;
        if (strncmp(s, "--help", nl) == 0) continue;
        snprintf(flags[n++], 48, "%.*s", (int)nl, s);
    }
    return n;
}

/* Item 12: an empty value, on every flag of every command that takes one; tiny numbers */
static void test_empty_and_tiny(void) {
    int rc = vil("help");
    char cmds[32][32];
    int nc = 0;
    const char *at = strstr(out, "\ncommands:\n");
    for (const char *l = at ? at + 10 : NULL; l && l[1] == ' ' && nc < 32; l = strchr(l + 1, '\n')) {
        if (sscanf(l + 1, " %31s", cmds[nc]) == 1 && strcmp(cmds[nc], "help") && strcmp(cmds[nc], "version")) nc++;
    }
    T_CHECK(rc == 0 && nc >= 10, "vil help lists the commands (%d)", nc);
    int total = 0;
    for (int c = 0; c < nc; c++) {
        char a[512], flags[64][48];
        snprintf(a, sizeof a, "%.31s --help", cmds[c]);
        rc = vil(a);
        int nf = value_flags(out, flags, 64);
        T_CHECK(rc == 0 && nf > 0, "vil %s --help lists flags with values (%d)", cmds[c], nf);
        for (int f = 0; f < nf; f++, total++) {
            char prefix[96];
            snprintf(a, sizeof a, "%.31s %.47s ''", cmds[c], flags[f]);
            snprintf(prefix, sizeof prefix, "vil %.31s: %.47s ", cmds[c], flags[f]);
            rc = vil(a);
            T_CHECK(rc == 2 && strstr(out, prefix) && !strstr(out, "error:"),
                    "vil %s: refused by the parser naming the flag (rc %d): %.300s", a, rc, out);
        }
    }
    T_CHECK(total >= 60, "%d flags with values checked", total);
    printf("     %d flags with values refuse an empty one\n", total);
    /* the issue's own: before, a run's files failed on them (exit 1) */
    corpus_mkdir("%s/%s", dir, "idx");
    char p[1024];
    snprintf(p, sizeof p, "%s/idx", dir);
    corpus_write_idx_set(p, "train", 12, 16, 16, 3, 1);
    corpus_write_idx_set(p, "t10k", 6, 16, 16, 3, 1);
    static const char *const empty[][2] = {
        {"train --config %1$s/tiny.cfg --data %1$s/idx --set num_classes=3 --set batch=4 --device cpu --dry-run "
         "--resume ''", "--resume needs a value, got an empty one"},
        {"train --config %1$s/tiny.cfg --data %1$s/idx --set num_classes=3 --set batch=4 --device cpu --dry-run "
         "--out ''", "--out needs a value, got an empty one"},
        {"classify --model %1$s/none.safetensors --csv '' x.png", "--csv needs a value, got an empty one"},
        {"train --config %1$s/tiny.cfg --data %1$s/idx --dry-run --set ''", "--set needs a value"},
    };
    for (int i = 0; i < 4; i++) {
        rc = vil(empty[i][0]);
        T_CHECK(rc == 2 && strstr(out, empty[i][1]), "%s: exit 2, '%s' (rc %d): %.300s", empty[i][0], empty[i][1], rc, out);
    }
    rc = vil("train --config %1$s/tiny.cfg --data %1$s/idx --set num_classes=3 --set batch=4 --device cpu --dry-run");
    T_CHECK(rc == 0, "the same dry run with nothing empty: exit 0 (rc %d): %.300s", rc, out);

    /* a float subnormal is a number a float key holds; below a float's smallest it would be 0 */
    char v[64];
    rc = vil(TRAIN "--set init_state_sigma=1e-40");
    const char *g = cfg_value("init_state_sigma", v, sizeof v);
    float want = (float)1e-40; /* a float subnormal, nearest to 1e-40 */
    T_CHECK(rc == 0 && g && strtof(g, NULL) == want && want > 0 && want < FLT_MIN,
            "init_state_sigma=1e-40: the subnormal float %g (rc %d): %s", (double)want, rc, g ? g : out);
    static const char *const tiny[][2] = {
        {TRAIN "--set init_state_sigma=1e-320", "'1e-320' is too small for a float (it would be 0"},
        {TRAIN "--set warmup_lr=1e-400", "'1e-400' is too small for a float"},
        {TRAIN "--set adam_eps=1e-320", "config key 'adam_eps' wants a number in [1e-30, 1], got '1e-320'"},
        {"classify --model %1$s/none.safetensors --crop-pct 1e-300 x.png", "--crop-pct 1e-300 is too small for a float"},
    };
    for (int i = 0; i < 4; i++) {
        rc = vil(tiny[i][0]);
        T_CHECK(rc == 2 && strstr(out, tiny[i][1]) && (i == 2 || !strstr(out, "out of")),
                "%s: exit 2, '%s' (rc %d): %.300s", tiny[i][0], tiny[i][1], rc, out);
    }
}

/* Item 13: an unknown flag in a few lines; a suggestion only within one edit per four letters */
static void test_unknown(void) {
    static const struct {
        const char *args, *flag, *suggest; /* suggest NULL: none */
    } cases[] = {
        /* the wrong suggestions, where those flags are unknown */
        {"eval --ratio 1", "--ratio", NULL},         /* --data: 3 edits of 5 */
        {"eval --drop 1", "--drop", NULL},           /* --data: 3 of 4 */
        {"bench-data --remode x", "--remode", NULL}, /* --decode: 2 of 6 */
        {"bench-data --scale 1", "--scale", NULL},    /* --stages, --seed: 3 edits */
        {"eval --bogus", "--bogus", NULL},
        /* slips: one edit (a swap is one) */
        {TRAIN "--smothing 0.1", "--smothing", "--smoothing"},
        {TRAIN "--epoch 3", "--epoch", "--epochs"},
        {TRAIN "--mixup-switch-prb 0.5", "--mixup-switch-prb", "--mixup-switch-prob"},
        {"info --modle x", "--modle", "--model"},
        {"eval --dat x", "--dat", "--data"},
        {"eval --devcie cpu", "--devcie", "--device"},
        {"plot x --outt y", "--outt", "--out"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = vil(cases[i].args);
        char head[128], sug[128], cmd[32], hint[96];
        sscanf(cases[i].args, "%31s", cmd);
        snprintf(head, sizeof head, "vil %s: unknown flag '%s'\n", cmd, cases[i].flag);
        snprintf(sug, sizeof sug, "did you mean %s?\n", cases[i].suggest ? cases[i].suggest : "");
        snprintf(hint, sizeof hint, "vil %s --help lists the flags\n", cmd);
        int said = cases[i].suggest ? strstr(out, sug) != NULL : strstr(out, "did you mean") == NULL;
        T_CHECK(rc == 2 && strstr(out, head) && said && strstr(out, hint) && lines(out) <= 3 && !strstr(out, "options:"),
                "%s: exit 2, %s, %s, %s, at most 3 lines (rc %d): %.600s", cases[i].args, cases[i].flag,
                cases[i].suggest ? cases[i].suggest : "no suggestion", hint, rc, out);
    }
    /* timm's flags vil has no flag for: what vil has instead, no suggestion */
    static const char *const hints[][2] = {{"--scale 0.08 1", "scale_min"},
                                           {"--grad-checkpointing", "recompute"},
                                           {"--ratio 0.75 1.33", "(3/4, 4/3)"},
                                           {"--remode pixel", "reprob"},
                                           {"--drop 0.1", "drop_path"}};
    for (int i = 0; i < 5; i++) {
        char a[512];
        snprintf(a, sizeof a, "%s%s", TRAIN, hints[i][0]);
        int rc = vil(a);
        T_CHECK(rc == 2 && strstr(out, "no flag") && strstr(out, hints[i][1]) && !strstr(out, "did you mean") &&
                    lines(out) <= 2,
                "train %s: exit 2 pointing to %s (rc %d): %.400s", hints[i][0], hints[i][1], rc, out);
    }
    /* the other usage errors: the same short form */
    static const char *const shorts[][2] = {
        {"train --config %1$s/tiny.cfg", "--data and --config (or --resume) are required"},
        {"eval --model x", "--model and --data are required"},
        {"avg %1$s/a %1$s/b", "--out is required"},
        {"info --model x --img-size 0x10", "--img-size wants a whole decimal number"},
        {"plot", "missing argument: usage: vil plot "},
    };
    for (int i = 0; i < 5; i++) {
        int rc = vil(shorts[i][0]);
        T_CHECK(rc == 2 && strstr(out, shorts[i][1]) && strstr(out, "--help lists the flags") && lines(out) <= 2,
                "%s: exit 2, '%s' and where the usage is, 2 lines (rc %d): %.400s", shorts[i][0], shorts[i][1], rc, out);
    }
}

/* Item 16: timm's --opt names as timm's optimizer factory means them, --model-ema-warmup a switch */
static void test_timm_meanings(void) {
    static const struct {
        const char *args, *optimizer, *nesterov;
    } opts[] = {
        {TRAIN "--opt sgd", "sgd", "1"},      {TRAIN "--opt nesterov", "sgd", "1"},
        {TRAIN "--opt momentum", "sgd", "0"}, {TRAIN "--opt adam", "adam", "0"},
        {TRAIN "--opt adamw", "adamw", "0"},  {TRAIN "--set optimizer=sgd", "sgd", "0"},
    };
    char v[64], w[64];
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        int rc = vil(opts[i].args);
        const char *o = cfg_value("optimizer", v, sizeof v), *n = cfg_value("nesterov", w, sizeof w);
        T_CHECK(rc == 0 && o && n && strcmp(o, opts[i].optimizer) == 0 && strcmp(n, opts[i].nesterov) == 0,
                "%s: optimizer %s, nesterov %s (got %s, %s; rc %d)", opts[i].args, opts[i].optimizer, opts[i].nesterov,
                o ? o : "?", n ? n : "?", rc);
    }
    int rc = vil(TRAIN "--model-ema-warmup --lr 1e-3");
    const char *e = cfg_value("model_ema_warmup", v, sizeof v), *b = cfg_value("base_lr", w, sizeof w);
    T_CHECK(rc == 0 && e && strcmp(e, "1") == 0 && b && strtof(b, NULL) == (float)(1e-3 * 512 / 128),
            "--model-ema-warmup --lr 1e-3: a switch, and the lr its own (rc %d): %.300s", rc, out);
    rc = vil(TRAIN "--model-ema-warmup=1");
    T_CHECK(rc == 2 && strstr(out, "--model-ema-warmup takes no value"), "--model-ema-warmup=1: exit 2 (rc %d): %.300s",
            rc, out);
    /* Adam trains, its header says so, and its state resumes (the same optimizer by name) */
    rc = vil("train --config %1$s/tiny.cfg --data %1$s/idx --set num_classes=3 --set max_steps=2 --set batch=4 "
             "--set workers=1 --set eval_every_epochs=0 --device cpu --threads 1 --opt adam --weight-decay 0.05 "
             "--out %1$s/adam");
    T_CHECK(rc == 0 && strstr(out, "Adam, L2 wd 0.05"), "a run with --opt adam: exit 0, Adam in the header (rc %d): %.600s",
            rc, out);
    rc = vil("train --resume %1$s/adam --data %1$s/idx --device cpu --threads 1 --set max_steps=3 --force");
    T_CHECK(rc == 0, "its state resumes (rc %d): %.600s", rc, out);
}

/* ---- the rules of a flag table, on a table of the test's own ---- */

/* the tables leave a flag's optional fields out, as cli/'s do (the Makefile builds cli/ with
 * -Wno-missing-field-initializers) */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const char *r_alpha, *r_beta, *r_gamma, *r_delta;
static int r_eps, r_zeta, r_dry, r_only;
static VilArgList r_list;
static const VilArg RULES[] = {
    {"--alpha", VIL_ARG_STR, &r_alpha, "a", .required = 1, .unless = "--dry"},
    {"--beta", VIL_ARG_STR, &r_beta, "b", .required = 1, .or_flag = "--gamma"},
    {"--list", VIL_ARG_LIST, &r_list, "l", .required = 1},
    {"--gamma", VIL_ARG_STR, &r_gamma, "g", .excludes = "--delta", .excludes_but = "auto"},
    {"--delta", VIL_ARG_STR, &r_delta, "d"},
    {"--eps", VIL_ARG_FLAG, &r_eps, "e", .needs = "--delta"},
    {"--zeta", VIL_ARG_FLAG, &r_zeta, "z", .needs = "--gamma", .message = "--zeta wants --gamma G, you see"},
    {"--dry", VIL_ARG_FLAG, &r_dry, "dry"},
    {"--only", VIL_ARG_FLAG, &r_only, "the whole work", .alone = 1},
};
static const VilArgSpec RULES_SPEC = {"rt", "--alpha A --beta B --list L [...] [ITEM...]", NULL, RULES,
                                      (int)(sizeof RULES / sizeof RULES[0]), 0, -1, .positional_of = "--list"};
static const VilArg ONE[] = {{"--out", VIL_ARG_STR, &r_alpha, "o", .required = 1}};
static const VilArgSpec ONE_SPEC = {"one", "--out F", NULL, ONE, 1, 0, 0};

/* vil_args_parse of spec on the words of line (argv[0] "rt"), stderr captured into out: the
 * parser's return */
static int parse_words(const VilArgSpec *spec, const char *line) {
    char buf[1024], *argv[32];
    int argc = 0;
    snprintf(buf, sizeof buf, "%s %s", spec->cmd, line);
    for (char *tok = strtok(buf, " "); tok && argc < 31; tok = strtok(NULL, " ")) argv[argc++] = tok;
    argv[argc] = NULL;
    r_alpha = r_beta = r_gamma = r_delta = NULL;
    r_eps = r_zeta = r_dry = r_only = 0;
    memset(&r_list, 0, sizeof r_list);
    char path[4200];
    snprintf(path, sizeof path, "%s/stderr.txt", dir);
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    char **pos = NULL;
    int npos = 0, rc = vil_args_parse(spec, argc, argv, &pos, &npos);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so), close(se), close(fd);
    if (rc == VIL_ARGS_OK) free(pos);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[n] = 0;
    if (f) fclose(f);
    return rc;
}

static void test_rules_table(void) {
    static const struct {
        const VilArgSpec *spec;
        const char *args, *says; /* says NULL: parsed, nothing said */
    } cases[] = {
        /* every required flag named, the plain ones in the table's order, then those another
         * flag stands in for, whichever is missing */
        {&RULES_SPEC, "", "vil rt: --alpha, --list and --beta (or --gamma) are required\n"},
        {&RULES_SPEC, "--alpha a --beta b", "vil rt: --alpha, --list and --beta (or --gamma) are required\n"},
        {&RULES_SPEC, "--list l --beta b", "vil rt: --alpha, --list and --beta (or --gamma) are required\n"},
        {&ONE_SPEC, "", "vil one: --out is required\n"},
        {&ONE_SPEC, "--out o", NULL},
        {&RULES_SPEC, "--alpha a --beta b --list l", NULL},
        {&RULES_SPEC, "--alpha a --gamma g --list l", NULL},           /* --gamma stands in for --beta */
        {&RULES_SPEC, "--alpha a --beta b item", NULL},                /* items are more --list values */
        {&RULES_SPEC, "--dry --beta b --list l", NULL},                /* --alpha is not needed with --dry */
        {&RULES_SPEC, "--only", NULL},                                 /* the whole work: no rule */
        {&RULES_SPEC, "--only --gamma g --delta d --eps", NULL},
        /* excludes, either order; its value `auto` lifts it */
        {&RULES_SPEC, "--alpha a --beta b --list l --gamma g --delta d",
         "vil rt: --gamma and --delta exclude each other: give one of them\n"},
        {&RULES_SPEC, "--delta d --alpha a --beta b --list l --gamma g",
         "vil rt: --gamma and --delta exclude each other: give one of them\n"},
        {&RULES_SPEC, "--alpha a --beta b --list l --gamma auto --delta d", NULL},
        /* needs: the uniform message, or the flag's own */
        {&RULES_SPEC, "--alpha a --beta b --list l --eps", "vil rt: --eps goes with --delta\n"},
        {&RULES_SPEC, "--alpha a --beta b --list l --eps --delta d", NULL},
        {&RULES_SPEC, "--alpha a --beta b --list l --zeta", "vil rt: --zeta wants --gamma G, you see\n"},
        /* required before excludes before needs */
        {&RULES_SPEC, "--gamma g --delta d --zeta", "vil rt: --alpha, --list and --beta (or --gamma) are required\n"},
        {&RULES_SPEC, "--alpha a --list l --gamma g --delta d --eps --zeta",
         "vil rt: --gamma and --delta exclude each other: give one of them\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = parse_words(cases[i].spec, cases[i].args);
        if (!cases[i].says) {
            T_CHECK(rc == VIL_ARGS_OK && !out[0], "%s '%s': parsed, nothing said (rc %d): %s", cases[i].spec->cmd,
                    cases[i].args, rc, out);
            continue;
        }
        char want[512];
        snprintf(want, sizeof want, "%svil %s --help lists the flags\n", cases[i].says, cases[i].spec->cmd);
        T_CHECK(rc == VIL_ARGS_USAGE && strcmp(out, want) == 0, "%s '%s': a usage error, exactly\n%s(rc %d, said)\n%s",
                cases[i].spec->cmd, cases[i].args, want, rc, out);
    }
    /* --help wins over the rules, and the flags given are still read into the table */
    T_CHECK(parse_words(&RULES_SPEC, "--eps --help") == VIL_ARGS_HELP, "--help before the rules");
    parse_words(&RULES_SPEC, "--alpha a --beta b it1 --list l it2");
    T_CHECK(r_list.n == 1 && strcmp(r_list.v[0], "l") == 0 && r_eps == 0, "the items stay positional");
}

/* ---- the rules of every command's table, through bin/vil ---- */

/* The flags the usage line of `vil CMD --help` names outside brackets: the required ones */
static int usage_required(const char *cmd, char flags[][32], int max) {
    char c[128];
    snprintf(c, sizeof c, "%.64s --help", cmd);
    if (vil(c) != 0) return -1;
    const char *u = strstr(out, "usage: vil ");
    if (!u) return -1;
    int n = 0, depth = 0;
    for (const char *p = u; *p && *p != '\n'; p++) {
        if (*p == '[') depth++;
        if (*p == ']') depth--;
        if (depth == 0 && p[0] == '-' && p[1] == '-' && p[-1] == ' ' && n < max) {
            size_t len = strcspn(p, " \n]");
            snprintf(flags[n++], 32, "%.*s", (int)len, p);
        }
    }
    return n;
}

static void test_rules_commands(void) {
    /* the commands, from `vil help` */
    char cmds[24][32];
    int nc = 0;
    vil("help");
    for (const char *p = strstr(out, "commands:\n"); p && (p = strstr(p, "\n  ")) && nc < 24; p += 3)
        sscanf(p + 3, "%31s", cmds[nc++]);
    T_CHECK(nc >= 11, "vil help lists the commands (%d)", nc);
    int nreq = 0;
    for (int i = 0; i < nc; i++) {
        if (strcmp(cmds[i], "help") == 0 || strcmp(cmds[i], "version") == 0) continue;
        char flags[8][32];
        int nf = usage_required(cmds[i], flags, 8);
        T_CHECK(nf >= 0, "vil %s --help: a usage line", cmds[i]);
        if (nf <= 0) continue; /* nothing required: the bare command would run (vil bench) */
        /* bare, then with one positional argument when the command needs one first */
        int rc = vil(cmds[i]);
        if (strstr(out, "missing argument")) {
            char c[128];
            snprintf(c, sizeof c, "%.64s x", cmds[i]);
            rc = vil(c);
        }
        int named = 1;
        for (int k = 0; k < nf; k++) named &= strstr(out, flags[k]) != NULL;
        T_CHECK(rc == 2 && named && strstr(out, nf == 1 ? " is required\n" : " are required\n") &&
                    strstr(out, "--help lists the flags") && lines(out) == 2,
                "vil %s bare: its %d required flag%s (the usage line's) named, exit 2 (rc %d): %s", cmds[i], nf,
                nf == 1 ? "" : "s", rc, out);
        nreq++;
    }
    T_CHECK(nreq == 8, "8 commands require flags (train, eval, classify, info, compare, avg, states, bench-data): %d",
            nreq);
    /* train's --init and --resume exclude each other, but for --resume auto; --init-ema needs --init */
    int rc = vil("train --config %1$s/tiny.cfg --data %1$s --init a --resume b");
    T_CHECK(rc == 2 && strstr(out, "--init starts a new run from weights, --resume continues one: give one of them\n") &&
                strstr(out, "vil train --help lists the flags") && lines(out) == 2,
            "train --init --resume: exit 2, the reason, where the usage is (rc %d): %s", rc, out);
    rc = vil(TRAIN "--data %1$s --init a --resume auto");
    T_CHECK(rc == 0 && strstr(out, "\nimg_size "), "train --init --resume auto: taken (rc %d): %.300s", rc, out);
    rc = vil("train --config %1$s/tiny.cfg --data %1$s --init-ema");
    T_CHECK(rc == 2 && strstr(out, "--init-ema needs --init FILE.pth") && lines(out) == 2,
            "train --init-ema alone: exit 2 (rc %d): %s", rc, out);
    rc = vil("train --list-keys --init a --resume b --init-ema");
    T_CHECK(rc == 0 && strstr(out, "max_steps"), "train --list-keys: no rule checked (rc %d)", rc);
    /* plot's --window goes with --agree, also at its default's value */
    rc = vil("plot %1$s --window 50");
    T_CHECK(rc == 2 && strstr(out, "vil plot: --window goes with --agree\n") && lines(out) == 2,
            "plot --window 50 alone: exit 2 (rc %d): %s", rc, out);
}

/* Started as one of 2 processes (Open MPI's variable, which mpirun sets for each rank), only
 * train and bench run (the README: `mpirun -np N vil train`, `vil bench` under mpirun); every
 * other command refuses before it reads a flag, naming those two. */
static void test_rules_launcher(void) {
    static const char *const cmds[] = {"train", "bench", "eval", "classify", "info", "convert", "compare",
                                       "plot", "avg", "states", "bench-data", "version", "help"};
    for (int i = 0; i < 13; i++) {
        char c[256];
        snprintf(c, sizeof c, "env OMPI_COMM_WORLD_SIZE=2 bin/vil %s --help 2>&1", cmds[i]);
        int rc = t_run(c, out, sizeof out);
        int group = i < 2;
        char want[256];
        snprintf(want, sizeof want, "vil %s: started as one of 2 processes (mpirun / srun), but only `vil train` and "
                 "`vil bench` run as several; run vil %s as one process\n", cmds[i], cmds[i]);
        if (group)
            T_CHECK(rc == 0 && strstr(out, "usage: vil "), "%s under a launcher of 2: runs (rc %d): %.200s", cmds[i],
                    rc, out);
        else
            T_CHECK(rc == 2 && strcmp(out, want) == 0, "%s under a launcher of 2: refused, exactly\n%s(rc %d, said)\n%s",
                    cmds[i], want, rc, out);
    }
    int rc = t_run("env OMPI_COMM_WORLD_SIZE=1 bin/vil info --help 2>&1", out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "usage: vil info"), "info as one of 1 process: runs (rc %d)", rc);
}

int main(void) {
    dir = corpus_mkdtemp("flags");
    char p[1024];
    snprintf(p, sizeof p, "%s/tiny.cfg", dir);
    const char *cfg = "img_size = 16\npatch_size = 4\nstride = 4\nembed_dim = 8\ndepth = 2\nd_state = 4\n";
    corpus_write(p, cfg, strlen(cfg));
    test_key_twice();
    test_empty_and_tiny();
    test_unknown();
    test_timm_meanings();
    test_rules_table();
    test_rules_commands();
    test_rules_launcher();
    corpus_rmtree(dir);
    return t_finish();
}
