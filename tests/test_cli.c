/* test_cli.c: the exit codes of the `vil` commands, one rule for all: misuse of the command line
 * or of a config (a value no run could take) exits 2 with the flag or the key named; a failure
 * of the environment or of a file exits 1 with a message; nothing of it ends in the internal
 * out-of-memory message. Also `vil version` and the compute threads (--threads, the default,
 * OMP_NUM_THREADS). Runs bin/vil. */
#define _GNU_SOURCE /* sched_getaffinity */
#include <ctype.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_corpus.h"
#include "model_testing.h"
#include "testing.h"
#include "formats/checkpoint.h"
#include "vil/common.h"
#include "formats/safetensors.h"
#include "vil/version.h"
#include "vil/cfgfile.h"
#include "train/train_config.h"
#include <sys/stat.h>

static char *dir;

typedef struct {
    const char *args; /* after "bin/vil "; %1$s is the temp folder */
    int want;
    const char *says; /* a piece of the output that must be there (NULL: any) */
} Case;

static void run_cases(const Case *cs, int n) {
    for (int i = 0; i < n; i++) {
        char args[2048], cmd[4096], out[16384];
        snprintf(args, sizeof args, cs[i].args, dir);
        snprintf(cmd, sizeof cmd, "bin/vil %s 2>&1", args);
        int rc = t_run(cmd, out, sizeof out);
        int said = !cs[i].says || strstr(out, cs[i].says);
        T_CHECK(rc == cs[i].want && said && !strstr(out, "out of memory"),
                "vil %s: exit %d (want %d)%s%s: %.300s", args, rc, cs[i].want,
                said ? "" : ", missing: ", said ? "" : cs[i].says, out);
    }
}

/* The text after "label:" and its padding on a line of out, up to the line's end, into v. */
static int field(const char *out, const char *label, char *v, size_t n) {
    char key[64];
    snprintf(key, sizeof key, "\n%s:", label);
    const char *at = strstr(out, key);
    if (!at) return -1;
    at += strlen(key);
    while (*at == ' ') at++;
    size_t k = strcspn(at, "\n");
    snprintf(v, n, "%.*s", (int)k, at);
    return 0;
}

/* git describe --always --dirty --abbrev=12: [TAG-N-g]HEX12[-dirty], or the build's "unknown" */
static int commit_ok(const char *c) {
    if (strcmp(c, "unknown") == 0) return 1;
    char s[128];
    snprintf(s, sizeof s, "%s", c);
    size_t n = strlen(s);
    if (n > 6 && strcmp(s + n - 6, "-dirty") == 0) s[n -= 6] = 0;
    const char *h = n >= 12 ? s + n - 12 : s;
    if (h > s && !(h - s >= 2 && h[-2] == '-' && h[-1] == 'g')) return 0;
    if (strlen(h) != 12) return 0;
    for (const char *p = h; *p; p++)
        if (!isxdigit((unsigned char)*p)) return 0;
    return 1;
}

/* vil --version, vil version, and the last lines of vil help: the same version and options */
static void test_version(void) {
    char a[4096], b[4096], help[8192], commit[128], blas[256], mpi[256], want[1024];
    int ra = t_run("bin/vil --version 2>&1", a, sizeof a);
    int rb = t_run("bin/vil version 2>&1", b, sizeof b);
    int rh = t_run("bin/vil help 2>&1", help, sizeof help);
    T_CHECK(ra == 0 && rb == 0 && rh == 0, "--version, version, help: exit %d, %d, %d", ra, rb, rh);
    T_CHECK(strcmp(a, b) == 0, "vil --version and vil version differ:\n%s\n%s", a, b);
    T_CHECK(strncmp(a, "vil " VIL_VERSION "\n", strlen("vil " VIL_VERSION "\n")) == 0,
            "vil --version does not start with vil " VIL_VERSION ": %.200s", a);
    int got = field(a, "commit", commit, sizeof commit) == 0 &&
              field(a, "BLAS", blas, sizeof blas) == 0 && field(a, "MPI", mpi, sizeof mpi) == 0;
    T_CHECK(got && strstr(a, "\ncompiler: ") && strstr(a, "\nCUDA: ") && strstr(a, "\nOpenMP: "),
            "vil --version lacks a line (commit, compiler, CUDA, BLAS, MPI, OpenMP): %s", a);
    if (!got) return;
    T_CHECK(commit_ok(commit), "commit '%s' is neither git describe's 12 hex digits nor unknown", commit);
    snprintf(want, sizeof want, "vil " VIL_VERSION " (git %s)\nbuilt with ", commit);
    T_CHECK(strstr(help, want) != NULL, "vil help does not end with '%s': %s", want, help);
    snprintf(want, sizeof want, "; BLAS %s; MPI %s;", blas, mpi);
    T_CHECK(strstr(help, want) != NULL, "vil help's build options lack '%s': %s", want, help);
    T_CHECK(t_run("bin/vil version x 2>&1", a, sizeof a) == 2, "vil version x: exit 2");
    /* `make` alone builds everything (the version object's rules once made it the default) */
    T_CHECK(t_run("make -pn 2>/dev/null | grep -q '^.DEFAULT_GOAL := all$'", NULL, 0) == 0,
            "the Makefile's default goal is all");
}

/* vil bench --img-size 16,32,8192 --batch 1,2: a row per size and batch, each with images/s and
 * memory, the batch-1 latency on a size's first row, and the size that cannot be built named */
static void test_bench_table(void) {
    char cmd[2048], out[16384];
    snprintf(cmd, sizeof cmd, "bin/vil bench --device cpu --model %s/tiny.cfg --img-size 16,32,8192 "
             "--batch 1,2 --steps 1 --warmup 0 2>&1", dir);
    int rc = t_run(cmd, out, sizeof out);
    int rows = 0, good = 0;
    const int want[4][3] = {{16, 17, 1}, {16, 17, 2}, {32, 65, 1}, {32, 65, 2}};
    for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        int size, tok, b;
        double tr, inf, gt, gi, lat = -1;
        char line[256];
        snprintf(line, sizeof line, "%.*s", (int)strcspn(l, "\n"), l); /* sscanf would go on to the next line */
        int n = sscanf(line, "%d %d %d %lf %lf %lf %lf %lf", &size, &tok, &b, &tr, &inf, &gt, &gi, &lat);
        if (n < 7) continue;
        int first = rows % 2 == 0;
        good += rows < 4 && size == want[rows][0] && tok == want[rows][1] && b == want[rows][2] && tr > 0 &&
                inf > 0 && gt > 0 && gi > 0 && (first ? n == 8 && lat > 0 : n == 7);
        rows++;
    }
    T_CHECK(rc == 0 && rows == 4 && good == 4 && strstr(out, "  size  tokens  batch  train img/s") &&
                strstr(out, "not measured:\n  8192 px: config: 2048 x 2048 patches"),
            "vil bench table: %d rows, %d as expected (rc %d):\n%s", rows, good, rc, out);
}

/* vil bench's per-op breakdowns: the training step's and the inference forward's, each with its
 * matrix products split by shape, whose lines add up to the "linear fwd" line. The test model
 * (embed 8, d_inner 16, d_state 4, depth 2) has in_proj 8->32, x_proj 16->16 (dt rank
 * 1 padded to 8, then 2 x 4, padded to 16), dt_proj 8->16, out_proj 16->8, the head 8->1000
 * (tiny.cfg keeps the default classes). */
static void test_bench_profile(void) {
    char cmd[2048], out[16384];
    snprintf(cmd, sizeof cmd, "bin/vil bench --device cpu --model %s/tiny.cfg --batch 1 --steps 1 --warmup 0 2>&1", dir);
    int rc = t_run(cmd, out, sizeof out);
    const char *inf = strstr(out, "per-op breakdown of the inference forward");
    T_CHECK(rc == 0 && strstr(out, "per-op breakdown of a training step") && inf,
            "vil bench: both breakdowns (rc %d):\n%s", rc, out);
    if (!inf) return;
    const struct { int C, OC, calls; } want[5] = {{8, 32, 2}, {16, 16, 4}, {8, 16, 4}, {16, 8, 2}, {8, 1000, 1}};
    int seen[5] = {0}, bad = 0, tot_calls = -1;
    double sum = 0, tot = -1;
    for (const char *l = inf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        char line[256];
        snprintf(line, sizeof line, "%.*s", (int)strcspn(l, "\n"), l);
        int C, OC, calls;
        double ms;
        if (sscanf(line, "linear fwd %lf %d", &tot, &tot_calls) == 2) continue;
        if (sscanf(line, "  linear fwd %d->%d %lf %d", &C, &OC, &ms, &calls) != 4) {
            if (strncmp(line, "  linear", 8) == 0) bad++; /* a backward line in the forward's table */
            continue;
        }
        int k = 0;
        while (k < 5 && !(want[k].C == C && want[k].OC == OC)) k++;
        if (k == 5 || calls != want[k].calls) bad++;
        else seen[k]++;
        sum += ms;
    }
    int all = seen[0] == 1 && seen[1] == 1 && seen[2] == 1 && seen[3] == 1 && seen[4] == 1;
    T_CHECK(!bad && all && tot_calls == 13 && fabs(sum - tot) <= 0.003 + 1e-3 * tot,
            "the inference breakdown's linear shapes (%d unexpected, all %d; %d calls, %.3f ms against "
            "the shapes' %.3f):\n%s", bad, all, tot_calls, tot, sum, inf);
}

/* The build folder records its options: `make CUDA=0` after a CUDA build kept the CUDA objects
 * and failed to link. A changed option rebuilds, the same options again build nothing. Tried on
 * one small object in a temp build folder (CUDA itself takes minutes to compile; OPT changes
 * objects the same way). */
static void test_build_options(void) {
    char b[1100], cmd[4096], out[16384];
    snprintf(b, sizeof b, "%s/build", dir);
    const char *mk = "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory";
    const char *opts[4] = {"MPI=0 OPT=-O0", "MPI=0 OPT=-O0", "MPI=0 OPT=-O1", "MPI=0 OPT=-O1"};
    const int rebuilds[4] = {1, 0, 1, 0};
    for (int i = 0; i < 4; i++) {
        snprintf(cmd, sizeof cmd, "%s BUILD=%s CUDA=0 %s %s/data/sampler.o 2>&1", mk, b, opts[i], b);
        int rc = t_run(cmd, out, sizeof out);
        int built = strstr(out, "data/sampler.c") != NULL;
        T_CHECK(rc == 0 && built == rebuilds[i], "make %s (step %d): %s (rc %d): %.500s", opts[i], i + 1,
                rebuilds[i] ? "rebuilds" : "builds nothing", rc, out);
    }
    snprintf(cmd, sizeof cmd, "%s/options", b);
    size_t n = 0;
    char *o = (char *)vil_read_file(cmd, &n);
    T_CHECK(o && strstr(o, "CUDA=0 MPI=0") && strstr(o, "-O1 "), "the build folder's options file: %.300s",
            o ? o : "(missing)");
    free(o);
}

/* The value of "key = value" in --print-config's output, or NULL */
static const char *cfg_value(const char *out, const char *key, char *v, size_t n) {
    char at[96];
    snprintf(at, sizeof at, "\n%s ", key);
    char *text = malloc(strlen(out) + 2);
    sprintf(text, "\n%s", out);
    const char *p = strstr(text, at);
    if (p) p = strchr(p + 1, '=');
    if (p) snprintf(v, n, "%.*s", (int)strcspn(p + 2, "\n"), p + 2);
    free(text);
    return p ? v : NULL;
}

/* timm's flags on vil train, every row of the table: each spelling sets the key it names (read
 * back from --print-config), timm's name of it given to --set is that key or answered with it,
 * the hints refuse with their note; the unknown flags near them; --lr converted at the global
 * batch; -b and --lr on vil bench */
static void test_timm_flags(void) {
    static char out[1 << 16];
    char cmd[4096], v[128];
    const char *base = "bin/vil train --config %s/tiny.cfg --print-config %s %s 2>&1";
    for (int i = 0; i < vil_timm_flag_count; i++) {
        const VilTimmFlag *f = &vil_timm_flags[i];
        for (int spelling = 0; spelling < 2; spelling++) {
            const char *flag = spelling ? f->alt : f->flag;
            if (!flag) continue;
            if (f->conv == VIL_TIMM_HINT) {
                snprintf(cmd, sizeof cmd, base, dir, flag, "x");
                int rc = t_run(cmd, out, sizeof out);
                T_CHECK(rc == 2 && strstr(out, f->note), "%s: exit 2 with its hint (rc %d): %.300s", flag, rc, out);
                continue;
            }
            if (f->conv == VIL_TIMM_SWITCH) { /* no value, as timm's store_true: the key set to 1 */
                snprintf(cmd, sizeof cmd, base, dir, flag, "");
                int rc = t_run(cmd, out, sizeof out);
                const char *got = cfg_value(out, f->key, v, sizeof v);
                T_CHECK(rc == 0 && got && strcmp(got, "1") == 0, "%s: %s = 1 (rc %d): %.300s", flag, f->key, rc, out);
                snprintf(cmd, sizeof cmd, base, dir, flag, "1");
                rc = t_run(cmd, out, sizeof out);
                T_CHECK(rc == 2 && strstr(out, "too many arguments ('1')"), "%s 1: the 1 is no value of it (rc %d): %.300s",
                        flag, rc, out);
                continue;
            }
            /* a value the key takes, other than tiny.cfg's and the default */
            const VilKey *k = vil_keys_find(&vil_model_keys, f->key);
            if (!k) k = vil_keys_find(&vil_train_keys, f->key);
            T_CHECK(k != NULL, "%s: its key %s exists", flag, f->key);
            if (!k) continue;
            /* a text key: its default (the one choice that surely exists) */
            VilConfig dc;
            VilTrainConfig dt;
            vil_config_default(&dc);
            vil_train_config_default(&dt);
            const char *text = (const char *)(vil_keys_find(&vil_model_keys, f->key) ? (void *)&dc : (void *)&dt) + k->offset;
            char ival[16]; /* an integer in the key's range: 32, or its top (a 0/1 switch: 1) */
            snprintf(ival, sizeof ival, "%d", k->hi < 32 ? (int)k->hi : 32);
            const char *val = k->type == VIL_KEY_STR ? text : k->type == VIL_KEY_INT ? ival : "0.375";
            if (f->conv == VIL_TIMM_LR) val = "0.002";
            if (f->conv == VIL_TIMM_AA) val = "rand-m7-n3-mstd1.5-inc1";
            if (strcmp(f->key, "log_every") == 0 || strcmp(f->key, "workers") == 0) val = "7";
            if (strcmp(f->key, "warmup_epochs") == 0) val = "2.5";
            snprintf(cmd, sizeof cmd, base, dir, flag, val);
            int rc = t_run(cmd, out, sizeof out);
            char want[64];
            snprintf(want, sizeof want, "%s", val);
            /* lr: timm's absolute lr at tiny.cfg's global batch of 128 x 1 x 1 */
            if (f->conv == VIL_TIMM_LR) snprintf(want, sizeof want, "%.9g", (double)(float)(0.002 * 512 / 128));
            if (f->conv == VIL_TIMM_AA) snprintf(want, sizeof want, "3");
            const char *got = cfg_value(out, f->key, v, sizeof v);
            int same = got && (k->type == VIL_KEY_STR ? strcmp(got, want) == 0 : (float)atof(got) == (float)atof(want));
            T_CHECK(rc == 0 && same, "%s %s: %s = %s (want %s; rc %d)%s%.300s", flag, val, f->key,
                    got ? got : "(none)", want, rc, rc ? ": " : "", rc ? out : "");
            if (f->conv == VIL_TIMM_AA)
                T_CHECK(cfg_value(out, "randaug_m", v, sizeof v) && atof(v) == 7 &&
                            cfg_value(out, "randaug_mstd", v, sizeof v) && atof(v) == 1.5,
                        "--aa rand-m7-n3-mstd1.5-inc1: randaug_m 7, randaug_mstd 1.5");
        }
        if (f->conv == VIL_TIMM_HINT) continue;
        /* timm's name on --set: the key itself, or refused with the vil key named */
        char name[64], set[128];
        snprintf(name, sizeof name, "%s", f->flag + 2);
        for (char *p = name; *p; p++)
            if (*p == '-') *p = '_';
        snprintf(set, sizeof set, "--set %s=1", name);
        snprintf(cmd, sizeof cmd, base, dir, set, "");
        int rc = t_run(cmd, out, sizeof out);
        const char *key = f->conv == VIL_TIMM_LR ? "base_lr" : f->key;
        if (strcmp(name, f->key) == 0)
            T_CHECK(rc == 0 || !strstr(out, "unknown config key"), "--set %s=1: a vil key (rc %d): %.300s", name, rc, out);
        else
            T_CHECK(rc == 2 && strstr(out, "unknown config key") && strstr(out, key),
                    "--set %s=1: exit 2 answering %s (rc %d): %.300s", name, key, rc, out);
    }
    const Case cases[] = {
        /* the issue's own: --set lr answers base_lr, not arch */
        {"train --config %s/tiny.cfg --print-config --set lr=0.1", 2, "vil's key is 'base_lr'"},
        {"train --config %s/tiny.cfg --print-config --set drop_path_rate=0.1", 2, "'drop_path'"},
        {"train --config %s/tiny.cfg --print-config --set grad_accum_steps=2", 2, "'accum_steps'"},
        /* an unknown flag: a key spelled as a flag, or the nearest of the command's and timm's */
        {"train --config %s/tiny.cfg --print-config --label-smoothing 0.1", 2, "did you mean --set label_smoothing=VALUE?"},
        {"train --config %s/tiny.cfg --print-config --base-lr 0.1", 2, "did you mean --set base_lr=VALUE?"},
        {"train --config %s/tiny.cfg --print-config --smothing 0.1", 2, "did you mean --smoothing?"},
        {"train --config %s/tiny.cfg --print-config --epoch 3", 2, "did you mean --epochs?"},
        /* given twice, in either spelling: the key set twice, both named */
        {"train --config %s/tiny.cfg --print-config -b 4 --batch-size 8", 2,
         "the config key batch is set twice, by '-b 4' and by '--batch-size 8'"},
        {"train --config %s/tiny.cfg --print-config --lr 0.1 --lr=0.2", 2,
         "the config key base_lr is set twice, by '--lr 0.1' and by '--lr=0.2'"},
        {"train --config %s/tiny.cfg --print-config --lr", 2, "--lr needs a value"},
        {"train --config %s/tiny.cfg --print-config --lr 0", 2, "--lr wants a number"},
        {"train --config %s/tiny.cfg --print-config --smoothing 1.5", 2, "--smoothing '1.5': config key 'label_smoothing'"},
        {"train --config %s/tiny.cfg --print-config --aa original", 2, "--aa 'original': vil has RandAugment only"},
        /* two learning rates: timm's absolute --lr beside vil's base_lr */
        {"train --config %s/tiny.cfg --print-config --lr 0.1 --set base_lr=0.01", 2,
         "base_lr is set twice, by '--lr 0.1' and by '--set base_lr=0.01'"},
        {"bench --model %s/tiny.cfg --set base_lr=0.01 --lr 0.004", 2,
         "base_lr is set twice, by '--set base_lr=0.01' and by '--lr 0.004'"},
        /* timm's flags are for train and bench; another command does not take them */
        {"info --model %s/m.safetensors --epochs 3", 2, "unknown flag '--epochs'"},
        /* -b is bench's own --batch, and --lr its step's lr */
        {"bench --model %s/tiny.cfg -b 2 --lr 0.004 --steps 1 --warmup 0 --no-profile --threads 1", 0,
         "AdamW wd 0.1 (lr 0.004),"},
        {"bench --model %s/tiny.cfg -b 2 --batch 3", 2, "given twice"},
    };
    run_cases(cases, (int)(sizeof cases / sizeof cases[0]));
    /* a timm flag and a --set of other keys: both taken */
    snprintf(cmd, sizeof cmd, "bin/vil train --config %s/tiny.cfg --print-config --smoothing 0.2 "
             "--set mixup=0.3 -j 3 2>&1", dir);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && cfg_value(out, "label_smoothing", v, sizeof v) && atof(v) == 0.2 &&
                cfg_value(out, "mixup", v, sizeof v) && atof(v) == 0.3 && cfg_value(out, "workers", v, sizeof v) &&
                atof(v) == 3,
            "--smoothing 0.2 --set mixup=0.3 -j 3: 0.2, 0.3 and 3 workers (rc %d)", rc);
    /* bench: -b 2 is the batch its header says */
    snprintf(cmd, sizeof cmd, "bin/vil bench --model %s/tiny.cfg -b 2 --steps 1 --warmup 0 --no-profile --threads 1 2>&1", dir);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, ", batch 2,"), "vil bench -b 2: batch 2 (rc %d): %.300s", rc, out);
}

/* vil train --list-keys: every key of both tables with its default and help; --print-config
 * stops after the config, without --data; the usage after a bad flag shows the defaults, not
 * the values typed before it */
static void test_train_info(void) {
    static char out[1 << 17];
    int rc = t_run("bin/vil train --list-keys 2>&1", out, sizeof out);
    T_CHECK(rc == 0, "vil train --list-keys exits 0 (rc %d)", rc);
    VilConfig c;
    VilTrainConfig t;
    vil_config_default(&c);
    vil_train_config_default(&t);
    const VilKeyTable *tables[2] = {&vil_model_keys, &vil_train_keys};
    const void *defaults[2] = {&c, &t};
    int missing = 0;
    for (int j = 0; j < 2; j++)
        for (int i = 0; i < tables[j]->n; i++) {
            const VilKey *k = &tables[j]->keys[i];
            const char *p = (const char *)defaults[j] + k->offset;
            char line[160], help[40];
            if (k->type == VIL_KEY_INT) snprintf(line, sizeof line, "\n  %s = %d  (integer", k->name, *(const int *)p);
            else if (k->type == VIL_KEY_FLOAT) snprintf(line, sizeof line, "\n  %s = %g  (number", k->name, *(const float *)p);
            else snprintf(line, sizeof line, "\n  %s = %s  (text", k->name, p);
            snprintf(help, sizeof help, "%s", k->help); /* its first words, before any wrap */
            char *sp = strrchr(help, ' ');
            if (sp && strlen(k->help) >= sizeof help - 1) *sp = 0;
            const char *at = strstr(out, line);
            if (!at || !strstr(at, help)) {
                printf("     --list-keys lacks '%s' or its help '%s'\n", line + 1, help);
                missing++;
            }
        }
    T_CHECK(missing == 0, "--list-keys lists every key with its default and help (%d missing)", missing);
    T_CHECK(strstr(out, "-b, --batch-size") && strstr(out, "--lr "), "--list-keys lists timm's flags");

    char cmd[4096];
    snprintf(cmd, sizeof cmd, "bin/vil train --config %s/tiny.cfg --print-config --set epochs=7 --out %s/pc 2>&1", dir, dir);
    rc = t_run(cmd, out, sizeof out);
    char v[64], pc[1100];
    snprintf(pc, sizeof pc, "%s/pc", dir);
    struct stat sb;
    T_CHECK(rc == 0 && cfg_value(out, "epochs", v, sizeof v) && atoi(v) == 7 && !strstr(out, "train:") &&
                stat(pc, &sb) != 0,
            "--print-config without --data: the config, then exit 0, no run, no folder (rc %d): %.300s", rc, out);

    snprintf(cmd, sizeof cmd, "bin/vil train --config %s/tiny.cfg --data %s --stop-after 7 --device cpu "
             "--threads 3 --help 2>&1", dir, dir);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "(default auto)") && !strstr(out, "(default cpu)") &&
                !strstr(out, "(default 7)") && !strstr(out, "(default 3)") && strstr(out, "--stop-after N") &&
                !strstr(out, "(default -1)"),
            "--help after flags shows the defaults (auto, 0), not the values typed nor a not-given "
            "mark (rc %d): %.2000s", rc, out);
    rc = t_run("bin/vil train --help 2>&1", out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "timm's flags") && strstr(out, "-b/--batch-size"), "vil train --help names timm's flags");
}

int main(void) {
    test_version();
    dir = corpus_mkdtemp("cli");
    /* a small checkpoint and a cfg to work with */
    VilModel m;
    t_tiny_model(&m);
    char p[1024];
    snprintf(p, sizeof p, "%s/m.safetensors", dir);
    vil_checkpoint_save(&m, p, 0, NULL, 0, NULL);
    vil_model_free(&m);
    snprintf(p, sizeof p, "%s/tiny.cfg", dir);
    const char *cfg = "img_size = 16\npatch_size = 4\nstride = 4\nembed_dim = 8\ndepth = 2\nd_state = 4\n";
    corpus_write(p, cfg, strlen(cfg));
    snprintf(p, sizeof p, "%s/bad.cfg", dir);
    corpus_write(p, "depth = 0\n", 10);

    const Case cases[] = {
        /* misuse: 2 */
        {"info --model %s/m.safetensors --device foo", 2, "--device"},
        {"info --model %s/m.safetensors --img-size 2147483644", 2, "--img-size"},
        {"info --model %s/m.safetensors --img-size -5", 2, "--img-size"},
        {"classify --model %s/m.safetensors --img-size 100000 x.png", 2, "--img-size"},
        {"classify --model %s/m.safetensors --topk 0 x.png", 2, NULL},
        {"eval --model %1$s/m.safetensors --data %1$s --batch 100000", 2, "--batch"},
        {"eval --model %1$s/m.safetensors --data %1$s --split foo", 2, "--split"},
        {"eval --model %1$s/m.safetensors --data %1$s --crop-pct 2", 2, "--crop-pct"},
        {"bench --model %s/tiny.cfg --warmup -1", 2, "--warmup"},
        {"bench --model %s/tiny.cfg --steps -1", 2, "--steps"},
        {"bench --model %s/tiny.cfg --batch 0", 2, "--batch"},
        {"bench --model %s/tiny.cfg --batch 1,,2", 2, "--batch"},
        {"bench --model %s/tiny.cfg --img-size 16,x", 2, "--img-size"},
        {"bench --model %s/tiny.cfg --set depth=0", 2, "depth"},
        {"bench --model %s/tiny.cfg --set img_size=3", 2, "img_size"},
        {"bench --model %s/tiny.cfg --set arch=foo", 2, "arch"},
        {"bench --model %s/bad.cfg", 2, "depth"},
        {"bench --model %s/tiny.cfg --set img_size=-5", 2, "img_size"},
        {"bench-data --data %s --reprob 2", 2, "--reprob"},
        {"bench-data --data %s --split foo", 2, "--split"},
        {"compare --models %1$s/m.safetensors --data %1$s --device foo", 2, "--device"},
        {"convert", 2, NULL},
        {"nonsense", 2, "unknown command"},
        {"info --modle x", 2, "did you mean --model"},
        /* numbers whole and decimal, in range with the range said; a flag given once */
        {"info --model %s/m.safetensors --img-size 2147483648", 2, "--img-size 2147483648 is out of range: it takes 0..8192"},
        {"info --model %s/m.safetensors --img-size 99999999999999999999", 2, "out of range: it takes 0..8192"},
        {"info --model %s/m.safetensors --img-size ' 5'", 2, "--img-size wants a whole decimal number, got ' 5'"},
        {"info --model %s/m.safetensors --img-size +5", 2, "--img-size wants a whole decimal number"},
        {"info --model %s/m.safetensors --img-size 0x10", 2, "--img-size wants a whole decimal number"},
        {"info --model %s/m.safetensors --img-size 16 --img-size 32", 2, "--img-size given twice"},
        {"info --model %1$s/m.safetensors --model=%1$s/m.safetensors", 2, "--model given twice"},
        {"classify --model %s/m.safetensors --crop-pct 1e-300 x.png", 2, "--crop-pct 1e-300 is too small for a float (it would be 0"},
        {"classify --model %s/m.safetensors --crop-pct 1e39 x.png", 2, "out of a float's range"},
        {"classify --model %s/m.safetensors --crop-pct 1e-30 x.png", 2, "--crop-pct takes 0 (the checkpoint's) or 0.001..1, got 1e-30"},
        {"eval --model %1$s/m.safetensors --data %1$s --crop-pct 0.0009", 2, "--crop-pct takes 0 (the checkpoint's) or 0.001..1, got 0.0009"},
        {"classify --model %s/m.safetensors --topk 1 --topk 2 x.png", 2, "--topk given twice"},
        {"eval --model %1$s/m.safetensors --data %1$s --crop-pct 0x1p-2", 2, "--crop-pct wants a decimal number"},
        {"eval --model %1$s/m.safetensors --data %1$s --crop-pct ' 0.5'", 2, "--crop-pct wants a decimal number"},
        {"eval --model %1$s/m.safetensors --data %1$s --crop-pct inf", 2, "--crop-pct wants a decimal number"},
        {"eval --model %1$s/m.safetensors --data %1$s --batch 4 --batch=8", 2, "--batch given twice"},
        {"bench --model %s/tiny.cfg --steps 1 --steps 2", 2, "--steps given twice"},
        {"bench --model %s/tiny.cfg --set depth=' 2'", 2, "depth"},
        {"bench --model %s/tiny.cfg --set depth=+2", 2, "depth"},
        {"bench --model %s/tiny.cfg --set drop_path=0x0.1p0", 2, "drop_path"},
        {"bench --model %s/tiny.cfg --set name=", 2, "'name' (--set) is empty"},
        {"bench --model %s/tiny.cfg --batch +4", 2, "--batch takes sizes in 1..65536"},
        {"bench --model %s/tiny.cfg --img-size '16, 32'", 2, "--img-size takes sizes in 1..8192"},
        {"bench --model %s/tiny.cfg --device gpu", 2, "--device takes cpu, cuda or auto (got 'gpu')"},
        {"info --model %s/m.safetensors --device gpu", 2, "--device takes cpu, cuda or auto (got 'gpu')"},
        {"compare --models %1$s/m.safetensors --data %1$s --workers 0", 2, "--workers 0 is out of range: it takes 1..256"},
        {"compare --models %1$s/m.safetensors --data %1$s --img-size 0x10", 2, "--img-size wants sizes"},
        {"compare --models %1$s/m.safetensors --data %1$s --out a --out b", 2, "--out given twice"},
        {"convert %1$s/m.safetensors %1$s/o.safetensors --names a --names b", 2, "--names given twice"},
        /* the environment or a file: 1 */
        {"info --model %s/nope.safetensors", 1, "nope.safetensors"},
        {"bench --model %s", 1, "not a file"},
        {"eval --model %1$s/m.safetensors --data %1$s/nope", 1, NULL},
        {"classify --model %s/tiny.cfg x.png", 1, NULL},
    };
    run_cases(cases, (int)(sizeof cases / sizeof cases[0]));
    test_timm_flags();
    test_train_info();
    test_bench_table();
    test_bench_profile();

    /* --threads: a count out of 0..4096 is misuse, on every command that has it */
    unsetenv("OMP_NUM_THREADS"); /* the defaults below are vil's, not the caller's environment */
    const Case threads_bad[] = {
        {"bench --model %s/tiny.cfg --threads -1", 2, "--threads must be in 0..4096"},
        {"bench --model %s/tiny.cfg --threads 100000", 2, "--threads must be in 0..4096"},
        {"eval --model %1$s/m.safetensors --data %1$s --threads 4097", 2, "--threads must be in 0..4096"},
        {"classify --model %s/m.safetensors --threads -2 x.png", 2, "--threads must be in 0..4096"},
        {"compare --models %1$s/m.safetensors --data %1$s --threads -1", 2, "--threads must be in 0..4096"},
        {"train --config %1$s/tiny.cfg --data %1$s/idx --threads 5000", 2, "--threads must be in 0..4096"},
        {"bench --model %s/tiny.cfg --threads x", 2, "--threads wants a whole decimal number"},
    };
    run_cases(threads_bad, (int)(sizeof threads_bad / sizeof threads_bad[0]));
    const char *bench1 = "bench --device cpu --model %s/tiny.cfg --batch 1 --steps 1 --warmup 0 --no-profile";
    char b[512];
    snprintf(b, sizeof b, "%s --threads 1", bench1);
    const Case threads_one[] = {{b, 0, "threads: 1 compute (OpenMP)\n"}};
    run_cases(threads_one, 1);
    /* OMP_NUM_THREADS counts when --threads is not given, and --threads over it */
    setenv("OMP_NUM_THREADS", "3", 1);
    const Case threads_env[] = {{bench1, 0, "threads: 3 compute (OpenMP)\n"},
                                {b, 0, "threads: 1 compute (OpenMP)\n"}};
    run_cases(threads_env, 2);
    unsetenv("OMP_NUM_THREADS");

    /* evaluation counts real images only, and the data must have the model's classes */
    const char *cls[4] = {"c0", "c1", "c2", "c3"};
    const char *sub[4] = {"d3", "d3/val", "d4", "d4/val"};
    for (int k = 0; k < 4; k++) corpus_mkdir("%s/%s", dir, sub[k]);
    for (int k = 0; k < 4; k++) {
        snprintf(p, sizeof p, "%s/d3/val", dir);
        if (k < 3) corpus_mkdir("%s/%s", p, cls[k]);
        snprintf(p, sizeof p, "%s/d4/val", dir);
        corpus_mkdir("%s/%s", p, cls[k]);
        for (int i = 0; i < 2; i++) {
            if (k < 3) {
                snprintf(p, sizeof p, "%s/d3/val/%s/%d.png", dir, cls[k], i);
                corpus_write_png(p, 20, 18, k, i);
            }
            snprintf(p, sizeof p, "%s/d4/val/%s/%d.png", dir, cls[k], i);
            corpus_write_png(p, 20, 18, k, i);
        }
    }
    snprintf(p, sizeof p, "%s/d3/val/c1/broken.png", dir);
    corpus_write(p, "not a png", 9);
    const Case evals[] = {
        {"eval --model %1$s/m.safetensors --data %1$s/d3 --device cpu", 1, "broken.png"},
        {"eval --model %1$s/m.safetensors --data %1$s/d3 --device cpu --skip-bad", 0, "(6 images; 1 unreadable"},
        {"eval --model %1$s/m.safetensors --data %1$s/d4 --device cpu", 1, "has 4 classes but the model 3"},
    };
    run_cases(evals, 3);

    /* the default: the CPUs this process may use (the loader's threads beside them) */
    cpu_set_t set;
    int ncpu = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    char want_eval[128];
    int nc = ncpu;
    snprintf(want_eval, sizeof want_eval, "threads: %d compute (OpenMP), 2 loader\n", nc);
    const Case thread_defaults[] = {
        {"eval --model %1$s/m.safetensors --data %1$s/d3 --device cpu --skip-bad --workers 2", 0, want_eval},
        {"eval --model %1$s/m.safetensors --data %1$s/d3 --device cpu --skip-bad --threads 1", 0,
         "threads: 1 compute (OpenMP), 4 loader\n"},
        {"classify --model %1$s/m.safetensors --device cpu --threads 2 %1$s/d3/val/c0/0.png", 0,
         "; 2 compute threads (OpenMP)\n"},
        {"compare --models %1$s/m.safetensors --data %1$s/d3 --device cpu --skip-bad --steps 1 --threads 1 "
         "--workers 1 --out %1$s/cmp", 0, "threads: 1 compute (OpenMP), 1 loader\n"},
    };
    run_cases(thread_defaults, (int)(sizeof thread_defaults / sizeof thread_defaults[0]));

    /* train: config values are usage errors; a names file that does not fit names itself */
    corpus_mkdir("%s/%s", dir, "idx");
    snprintf(p, sizeof p, "%s/idx", dir);
    corpus_write_idx_set(p, "train", 20, 16, 16, 3, 1);
    const Case trains[] = {
        {"train --config %1$s/tiny.cfg --data %1$s/idx --decode foo", 2, "decode"},
        {"train --config %1$s/tiny.cfg --data %1$s/idx --set depth=0", 2, "depth"},
        {"train --config %1$s/tiny.cfg --data %1$s/idx --set img_size=3", 2, "img_size"},
        {"train --config %1$s/tiny.cfg --data %1$s/idx --set arch=foo", 2, "arch"},
        {"train --config %1$s/tiny.cfg --data %1$s/idx --set warmup_epochs=1e30", 2, "warmup_epochs"},
        {"train --config %1$s/bad.cfg --data %1$s/idx", 2, "bad.cfg:1"},
        {"train --config %1$s/tiny.cfg --data %1$s/idx --device foo", 2, "--device"},
        {"train --config %1$s/tiny.cfg --data %1$s/idx --device gpu", 2, "--device takes cpu, cuda or auto (got 'gpu')"},
        {"train --config %1$s/tiny.cfg --data %1$s/idx --stop-after -1", 2, "--stop-after must be >= 0 (got -1)"},
        {"train --config %1$s/tiny.cfg --config %1$s/tiny.cfg --data %1$s/idx", 2, "--config given twice"},
        {"train --config %1$s/tiny.cfg --data %1$s/idx --set epochs=+3", 2, "epochs"},
        {"train --config %1$s/tiny.cfg --data %1$s/idx --set name=", 2, "is empty"},
        {"train --config %1$s/nope.cfg --data %1$s/idx", 1, "nope.cfg"},
        {"train --config %1$s/tiny.cfg --data %1$s/idx --set num_classes=3 --names /etc/passwd --device cpu --out %1$s/run", 1,
         "class-names file '/etc/passwd'"},
    };
    run_cases(trains, (int)(sizeof trains / sizeof trains[0]));
    /* --threads reaches a run, and its header says so */
    corpus_write_idx_set(p, "t10k", 6, 16, 16, 3, 1);
    const Case train_threads[] = {
        {"train --config %1$s/tiny.cfg --data %1$s/idx --set num_classes=3 --set max_steps=1 --set batch=4 "
         "--set workers=2 --device cpu --out %1$s/run1 --threads 1", 0, "threads: 1 compute (OpenMP), 2 loader\n"},
    };
    run_cases(train_threads, 1);

    /* convert writes metadata too: a names entry that is not UTF-8 is refused before the save
     * naming it; an input path that is not UTF-8 is recorded escaped */
    snprintf(p, sizeof p, "%s/names_bad.txt", dir);
    corpus_write(p, "a\nb\nc\xff\n", 7);
    char m2[1100];
    snprintf(m2, sizeof m2, "%s/m\xff.safetensors", dir);
    snprintf(p, sizeof p, "%s/m.safetensors", dir);
    size_t mn;
    unsigned char *mb = vil_read_file(p, &mn);
    corpus_write(m2, mb, mn);
    free(mb);
    const Case converts[] = {
        {"convert %1$s/m.safetensors %1$s/o1.safetensors --names %1$s/names_bad.txt", 1, "class 2 'c\\xff'"},
        {"convert '%1$s/m\xff.safetensors' %1$s/o2.safetensors", 0, NULL},
    };
    run_cases(converts, 2);
    test_build_options();
    snprintf(p, sizeof p, "%s/o2.safetensors", dir);
    VilSafetensors so;
    const char *src = NULL;
    int got = vil_st_read(p, &so) == 0;
    if (got) src = vil_st_meta(&so, "vil.source");
    T_CHECK(got && src && strstr(src, "m\\xff.safetensors"), "convert: the source path recorded escaped: %s",
            src ? src : "(none)");
    if (got) vil_st_free(&so);
    corpus_rmtree(dir);
    return t_finish();
}
