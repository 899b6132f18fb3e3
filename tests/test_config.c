/* test_config.c: the cfg-file reader and the config values against hostile input: lines past
 * any buffer, a folder or binary bytes as a config, repeated keys, values out of range or not
 * written in full, metadata JSON that would coerce (6.7 to 6) or truncate, and the usage-error
 * code every one of them returns (VIL_EUSAGE: the commands exit 2 for it); the choice keys
 * resolved to their enum or table entry however their text arrives, and the optimizer's
 * hyperparameters and description from the training config. */
#include <float.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data_corpus.h"
#include "testing.h"
#include "vil/common.h"
#include "vil/optim.h"
#include "train/train.h"
#include "train/train_config.h"
#include "vil/config.h"
#include "vil/limits.h"
#include "data/recipe.h"
#include "vil/cfgfile.h"

static char *dir;

static const char *write_cfg(const char *name, const char *text) {
    static char p[8][1024];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    corpus_write(p[k], text, strlen(text));
    return p[k];
}

static void test_file_errors(void) {
    VilConfig c;
    VilTrainConfig t;
    vil_config_default(&c);
    /* a comment longer than any line buffer: its tail must not be read as a key */
    size_t n = 5000;
    char *text = vil_malloc(n + 64);
    strcpy(text, "# ");
    memset(text + 2, 'x', n);
    strcpy(text + 2 + n - 40, " depth = 1 and more words\ndepth = 3\n");
    int rc = vil_config_load(&c, write_cfg("long.cfg", text));
    T_CHECK(rc == 0 && c.depth == 3, "a 5,000-byte comment line is one comment (rc %d, depth %d)", rc, c.depth);
    free(text);
    /* a line past the limit is an error naming its line */
    text = vil_malloc(VIL_MAX_CONFIG_LINE + 64);
    strcpy(text, "depth = 2\nname = ");
    size_t at = strlen(text);
    memset(text + at, 'y', VIL_MAX_CONFIG_LINE + 10);
    strcpy(text + at + VIL_MAX_CONFIG_LINE + 10, "\n");
    fprintf(stderr, "---- expected errors follow ----\n");
    T_CHECK(vil_config_load(&c, write_cfg("huge.cfg", text)) == VIL_EUSAGE, "a 64 KiB line is refused");
    free(text);
    /* a folder, a missing file: not a usage error but a file error (-1) */
    T_CHECK(vil_config_load(&c, dir) == -1, "a folder as the config is refused");
    T_CHECK(vil_config_load(&c, "/nonexistent/x.cfg") == -1, "a missing config: -1");
    /* binary bytes */
    T_CHECK(vil_config_load(&c, write_cfg("bin.cfg", "depth = 2\n\001\002\003\n")) == VIL_EUSAGE, "binary bytes");
    const char nul[] = "depth = 2\0 = 3\n";
    {
        char p[1024];
        snprintf(p, sizeof p, "%s/nul2.cfg", dir);
        corpus_write(p, nul, sizeof nul - 1);
        T_CHECK(vil_config_load(&c, p) == VIL_EUSAGE, "a NUL byte in a line is refused");
    }
    /* a key twice */
    T_CHECK(vil_config_load(&c, write_cfg("dup.cfg", "depth = 2\nembed_dim = 8\ndepth = 4\n")) == VIL_EUSAGE,
            "a repeated key is refused");
    vil_config_default(&c);
    vil_train_config_default(&t);
    T_CHECK(vil_train_config_load(&c, &t, write_cfg("dup2.cfg", "epochs = 2\nbatch = 8\nepochs = 3\n")) == VIL_EUSAGE,
            "a repeated training key is refused");
    fprintf(stderr, "---- end of expected errors ----\n");
}

static void test_values(void) {
    VilConfig c;
    VilTrainConfig t;
    vil_config_default(&c);
    vil_train_config_default(&t);
    fprintf(stderr, "---- expected errors follow ----\n");
    const char *bad[] = {"depth=0", "depth=-1", "depth=1025", "embed_dim=1000000000", "img_size=3000000000",
                         "num_classes=10000001", "d_state=65", "arch=foo", "expand=0", "drop_path=1",
                         "depth=6.7", "depth=", "batch=100000", "warmup_epochs=1e30", "base_lr=nan",
                         "reprob=2", "crop_pct=0", "adam_eps=0", "optimizer=lion", "optimizer=", "name=" "0123456789012345678901234567890123456789012345678901234567890123"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        VilConfig c2 = c;
        VilTrainConfig t2 = t;
        int rc = vil_train_config_set_kv(&c2, &t2, bad[i]);
        if (rc == 0) rc = vil_config_finalize(&c2);
        if (rc == 0) rc = vil_train_config_finalize(&t2);
        T_CHECK(rc == VIL_EUSAGE, "'%s' is a usage error (rc %d)", bad[i], rc);
    }
    {
        VilConfig c2 = c;
        VilTrainConfig t2 = t;
        T_CHECK(vil_train_config_set_kv(&c2, &t2, "optimizer=adamw") == 0 && vil_train_config_finalize(&t2) == 0 &&
                    vil_optim_find(t2.optimizer) == &vil_optim_adamw,
                "optimizer=adamw is the default's optimizer (AdamW)");
    }
    /* relations: warmup past the epochs, a grid with more tokens than the limit */
    vil_train_config_set_kv(&c, &t, "epochs=3");
    vil_train_config_set_kv(&c, &t, "warmup_epochs=5");
    T_CHECK(vil_train_config_finalize(&t) == VIL_EUSAGE, "warmup_epochs 5 of 3 epochs is refused");
    VilConfig g;
    vil_config_default(&g);
    g.img_size = 8192;
    g.patch_size = 1;
    g.stride = 1;
    T_CHECK(vil_config_finalize(&g) == VIL_EUSAGE, "8192 x 8192 tokens are refused before anything is sized");
    fprintf(stderr, "---- end of expected errors ----\n");
    VilConfig ok;
    vil_config_default(&ok);
    T_CHECK(vil_config_set_kv(&ok, "depth=12") == 0 && ok.depth == 12 && vil_config_finalize(&ok) == 0,
            "a good value still sets");
}

static void test_json(void) {
    VilConfig c;
    vil_config_default(&c);
    fprintf(stderr, "---- expected errors follow ----\n");
    T_CHECK(vil_config_from_json(&c, "{\"depth\": 6.7}") == VIL_EUSAGE, "depth 6.7 in metadata is refused, not 6");
    T_CHECK(vil_config_from_json(&c, "{\"depth\": 1e9}") == VIL_EUSAGE, "depth 1e9 in metadata is refused");
    T_CHECK(vil_config_from_json(&c, "{\"embed_dim\": -3}") == VIL_EUSAGE, "a negative size is refused");
    T_CHECK(vil_config_from_json(&c, "{\"name\": \"0123456789012345678901234567890123456789012345678901234567890123456789\"}") == VIL_EUSAGE,
            "a 70-character name is refused, not cut to 63");
    T_CHECK(vil_config_from_json(&c, "{\"name\": \"a\\u001b[31m\"}") == VIL_EUSAGE, "a name with an escape sequence is refused");
    T_CHECK(vil_config_from_json(&c, "{\"depth\": [1]}") == VIL_EUSAGE, "an array value is refused");
    fprintf(stderr, "---- end of expected errors ----\n");
    vil_config_default(&c);
    char *js = vil_config_to_json(&c);
    VilConfig back;
    vil_config_default(&back);
    back.depth = 3;
    T_CHECK(vil_config_from_json(&back, js) == 0 && back.depth == c.depth && back.embed_dim == c.embed_dim,
            "a config round-trips through JSON");
    free(js);
}

static void test_printable(void) {
    char b[64];
    T_CHECK(strcmp(vil_printable(b, sizeof b, "plain text"), "plain text") == 0, "plain text unchanged");
    T_CHECK(strcmp(vil_printable(b, sizeof b, "a\x1b[31mb"), "a\\x1b[31mb") == 0, "ESC escaped: %s", b);
    T_CHECK(strcmp(vil_printable(b, sizeof b, "caf\xc3\xa9"), "caf\xc3\xa9") == 0, "UTF-8 kept");
    T_CHECK(strcmp(vil_printable(b, sizeof b, "x\xff"), "x\\xff") == 0, "a stray byte escaped: %s", b);
    char big[200];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = 0;
    vil_printable(b, 16, big);
    T_CHECK(strlen(b) < 16 && strstr(b, "..."), "cut to fit with ...: %s", b);
}

/* Numbers are whole decimal numbers: strtol / strtod alone took " 5", "+5" and hex floats. */
static void test_parse_numbers(void) {
    static const struct {
        const char *s;
        int rc;
        long v;
    } ints[] = {{"5", 0, 5}, {"-12", 0, -12}, {"0", 0, 0}, {"007", 0, 7}, {"9223372036854775807", 0, 9223372036854775807L},
                {" 5", -1, 0}, {"5 ", -1, 0}, {"+5", -1, 0}, {"0x10", -1, 0}, {"", -1, 0}, {"-", -1, 0},
                {"1e3", -1, 0}, {"1.0", -1, 0}, {"--5", -1, 0}, {"\t5", -1, 0},
                {"9223372036854775808", -2, 0}, {"-99999999999999999999", -2, 0}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        long v = 12345;
        int rc = vil_parse_int(ints[i].s, &v);
        T_CHECK(rc == ints[i].rc && (rc != 0 || v == ints[i].v), "vil_parse_int('%s') = %d (%ld), want %d",
                ints[i].s, rc, v, ints[i].rc);
    }
    static const struct {
        const char *s;
        int rc;
        double v;
    } floats[] = {{"0.5", 0, 0.5}, {".5", 0, 0.5}, {"5.", 0, 5.0}, {"-1e-3", 0, -1e-3}, {"1E+2", 0, 100.0},
                  {"3", 0, 3.0}, {"1e-300", 0, 1e-300},
                  {" 0.5", -1, 0}, {"+0.5", -1, 0}, {"0x1p3", -1, 0}, {"0x10", -1, 0}, {"inf", -1, 0},
                  {"nan", -1, 0}, {"", -1, 0}, {".", -1, 0}, {"1e", -1, 0}, {"1e+", -1, 0}, {"1.2.3", -1, 0},
                  {"0.5 ", -1, 0}, {"e5", -1, 0}, {"1e400", -2, 0},
                  /* a subnormal double is a number; one too small for a double is not 0 but -3 */
                  {"1e-320", 0, 1e-320}, {"-4.9e-324", 0, -4.9e-324}, {"2.2250738585072014e-308", 0, 2.2250738585072014e-308},
                  {"0e-999", 0, 0.0}, {"0.000e-400", 0, 0.0}, {"1e-400", -3, 0}, {"-2e-324", -3, 0}};
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++) {
        double v = 12345;
        int rc = vil_parse_float(floats[i].s, &v);
        T_CHECK(rc == floats[i].rc && (rc != 0 || v == floats[i].v), "vil_parse_float('%s') = %d (%g), want %d",
                floats[i].s, rc, v, floats[i].rc);
    }
}

/* String values go into checkpoint metadata (UTF-8 JSON): refused where they come in when empty
 * or not UTF-8, by --set and by cfg files; a config already holding one (a state saved by an
 * older vil) still finalizes, so its run resumes. */
static void test_text_values(void) {
    VilConfig c;
    VilTrainConfig t;
    vil_config_default(&c);
    vil_train_config_default(&t);
    T_CHECK(vil_train_config_set_kv(&c, &t, "name=\xff") == VIL_EUSAGE, "--set name=0xff refused");
    T_CHECK(vil_train_config_set_kv(&c, &t, "name=") == VIL_EUSAGE, "--set name= refused");
    T_CHECK(vil_config_set_kv(&c, "name=caf\xc3") == VIL_EUSAGE, "model --set name= cut UTF-8 refused");
    T_CHECK(vil_config_set(&c, "name", "") == VIL_EUSAGE, "vil_config_set name '' refused");
    T_CHECK(vil_train_config_set(&c, &t, "decode", "\xfe") == VIL_EUSAGE, "decode 0xfe refused");
    T_CHECK(vil_train_config_set_kv(&c, &t, "name=caf\xc3\xa9") == 0 && strcmp(c.name, "caf\xc3\xa9") == 0,
            "--set name=café (UTF-8) taken");
    T_CHECK(vil_train_config_set_kv(&c, &t, "epochs=3") == 0 && t.epochs == 3, "other keys unaffected");
    const char *p = write_cfg("badname.cfg", "name = vil\xff\n");
    vil_config_default(&c);
    T_CHECK(vil_train_config_load(&c, &t, p) == VIL_EUSAGE, "a cfg file's name not UTF-8 refused");
    vil_config_default(&c);
    T_CHECK(vil_config_load(&c, p) == VIL_EUSAGE, "the same through vil_config_load");
    vil_config_default(&c);
    c.name[0] = 0; /* a config a state saved before the check */
    T_CHECK(vil_config_finalize(&c) == 0, "an empty name already in a config still finalizes");
}

/* the key of either table, and the struct it lives in */
static const VilKey *any_key(const char *name, VilConfig *c, VilTrainConfig *t, void **base) {
    const VilKey *k = vil_keys_find(&vil_model_keys, name);
    *base = c;
    if (!k) k = vil_keys_find(&vil_train_keys, name), *base = t;
    return k;
}

/* One config call with its message captured: the return code, the message in msg. */
static int set_captured(VilConfig *c, VilTrainConfig *t, const VilTimmFlag *f, const char *key,
                        const char *value, double *lr, char *msg, size_t n) {
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = f ? vil_train_config_set_timm(c, t, f, value, lr) : vil_train_config_set(c, t, key, value);
    vil_error_release(&cap);
    snprintf(msg, n, "%s", cap.msg);
    return rc;
}

/* timm's flags (train/train_config.c's table), every row: a row of a key sets that key to the
 * value given; timm's name of it (--drop-path: drop_path) given to --set is either that key itself
 * or refused naming it; the lr conversion against lr * 512 / global batch; --aa against timm's
 * parts and defaults; the hints refuse with their note. */
static void test_timm_flags(void) {
    T_CHECK(vil_timm_flag_count > 20, "the table holds timm's flags (%d)", vil_timm_flag_count);
    /* timm's train.py meanings, written out here: the flags a timm user types first and their vil keys */
    static const char *const meant[][2] = {
        {"--epochs", "epochs"}, {"-b", "batch"}, {"--batch-size", "batch"}, {"--lr", "base_lr"},
        {"--smoothing", "label_smoothing"}, {"--drop-path", "drop_path"}, {"--model-ema-decay", "ema_decay"},
        {"--grad-accum-steps", "accum_steps"}, {"--weight-decay", "weight_decay"},
        {"--warmup-epochs", "warmup_epochs"}, {"--seed", "seed"}, {"--min-lr", "min_lr"},
        {"--warmup-lr", "warmup_lr"}, {"--clip-grad", "clip_grad"}, {"--mixup", "mixup"},
        {"--cutmix", "cutmix"}, {"--aa", "randaug_n"}, {"--reprob", "reprob"}, {"-j", "workers"},
        {"--opt", "optimizer"}, {"--momentum", "momentum"}, {"--sched", "sched"},
        {"--decay-epochs", "decay_epochs"}, {"--decay-rate", "decay_rate"},
        {"--decay-milestones", "decay_milestones"}, {"--model-ema-warmup", "model_ema_warmup"},
        {"lr", "base_lr"}, {"smoothing", "label_smoothing"}, {"drop_path_rate", "drop_path"},
        {"model_ema_decay", "ema_decay"}, {"grad_accum_steps", "accum_steps"}, {"batch_size", "batch"},
    };
    for (size_t i = 0; i < sizeof meant / sizeof meant[0]; i++) {
        const VilTimmFlag *f = vil_timm_find(meant[i][0]);
        T_CHECK(f && f->key && strcmp(f->key, meant[i][1]) == 0, "timm's %s is vil's %s (table: %s)",
                meant[i][0], meant[i][1], f && f->key ? f->key : "none");
    }
    T_CHECK(vil_timm_find("--lr")->conv == VIL_TIMM_LR && vil_timm_find("--aa")->conv == VIL_TIMM_AA &&
                vil_timm_find("--model")->conv == VIL_TIMM_HINT,
            "--lr converts, --aa parses, --model hints");
    for (int i = 0; i < vil_timm_flag_count; i++) {
        const VilTimmFlag *f = &vil_timm_flags[i];
        VilConfig c;
        VilTrainConfig t;
        vil_config_default(&c);
        vil_train_config_default(&t);
        char name[64], msg[1024], value[64];
        snprintf(name, sizeof name, "%s", f->flag + 2);
        for (char *p = name; *p; p++)
            if (*p == '-') *p = '_';
        T_CHECK(strncmp(f->flag, "--", 2) == 0 && vil_timm_find(f->flag) == f && vil_timm_find(name) == f &&
                    (!f->alt || vil_timm_find(f->alt) == f),
                "%s: found by its flag, its spelling %s and timm's name %s", f->flag, f->alt ? f->alt : "-", name);
        double lr = 0.0;
        void *base;
        if (f->conv == VIL_TIMM_HINT) {
            int rc = set_captured(&c, &t, NULL, name, "1", &lr, msg, sizeof msg);
            T_CHECK(!f->key && f->note && rc == VIL_EUSAGE && strstr(msg, f->note),
                    "--set %s=1: refused with the hint '%s' (rc %d): %s", name, f->note ? f->note : "", rc, msg);
            continue;
        }
        const VilKey *k = any_key(f->key, &c, &t, &base);
        T_CHECK(k != NULL, "%s: its key '%s' is a config key", f->flag, f->key);
        if (!k) continue;
        /* timm's name: the key itself, or refused with the key named */
        const VilKey *same = any_key(name, &c, &t, &base);
        if (same) {
            T_CHECK(same == k, "%s: timm's name %s is a vil key, so it must be the row's %s", f->flag, name, f->key);
        } else {
            char want[80];
            snprintf(want, sizeof want, f->conv == VIL_TIMM_AA ? "%s" : "'%s'", f->conv == VIL_TIMM_LR ? "base_lr" : f->key);
            int rc = set_captured(&c, &t, NULL, name, "1", &lr, msg, sizeof msg);
            T_CHECK(rc == VIL_EUSAGE && strstr(msg, want) && (f->conv != VIL_TIMM_AA || strstr(msg, "randaug_m")),
                    "--set %s=1: refused naming %s (rc %d): %s", name, want, rc, msg);
        }
        if (f->conv != VIL_TIMM_KEY) continue;
        /* a value in the key's range other than its default: half the default, or 1 past it */
        any_key(f->key, &c, &t, &base);
        const char *field = (const char *)base + k->offset;
        if (k->type == VIL_KEY_INT) {
            int v = *(const int *)field + 1;
            if (strcmp(k->name, "img_size") == 0) v = 32; /* a multiple of the patches */
            snprintf(value, sizeof value, "%d", v);
        } else if (k->type == VIL_KEY_FLOAT) {
            float d = *(const float *)field;
            snprintf(value, sizeof value, "%.9g", d > 0.0f ? d * 0.5 : 0.25);
        } else {
            snprintf(value, sizeof value, "%s", field); /* the one optimizer there may be */
        }
        int rc = set_captured(&c, &t, f, NULL, value, &lr, msg, sizeof msg);
        any_key(f->key, &c, &t, &base);
        field = (const char *)base + k->offset;
        int ok = k->type == VIL_KEY_INT     ? *(const int *)field == atoi(value)
                 : k->type == VIL_KEY_FLOAT ? *(const float *)field == (float)atof(value)
                                            : strcmp(field, value) == 0;
        T_CHECK(rc == 0 && ok && lr == 0.0, "%s %s sets %s (rc %d): %s", f->flag, value, f->key, rc, msg);
        T_CHECK(vil_config_finalize(&c) == 0 && vil_train_config_finalize(&t) == 0,
                "%s %s: the config still finalizes", f->flag, value);
        /* a value out of the key's range: refused naming the flag */
        rc = set_captured(&c, &t, f, NULL, "-7", &lr, msg, sizeof msg);
        if (k->lo > -7 && k->type != VIL_KEY_STR)
            T_CHECK(rc == VIL_EUSAGE && strstr(msg, f->flag) && strstr(msg, f->key),
                    "%s -7: refused with the flag and the key named (rc %d): %s", f->flag, rc, msg);
    }

    /* --lr: timm's absolute peak lr, base_lr = lr * 512 / global batch */
    const VilTimmFlag *lrf = vil_timm_find("--lr");
    VilConfig c;
    VilTrainConfig t;
    vil_config_default(&c);
    vil_train_config_default(&t);
    double lr = 0.0;
    char msg[1024];
    int rc = set_captured(&c, &t, lrf, NULL, "0.002", &lr, msg, sizeof msg);
    T_CHECK(rc == 0 && lr == 0.002 && t.base_lr == 5e-4f, "--lr 0.002 is kept, base_lr untouched until "
            "the batch is known (rc %d, lr %g, base_lr %g)", rc, lr, t.base_lr);
    rc = vil_train_config_set_lr(&t, lr, 3 * 16 * 2);
    T_CHECK(rc == 0 && t.base_lr == (float)(0.002 * 512.0 / 96.0),
            "lr 0.002 at a global batch of 96: base_lr %.9g (want %.9g)", t.base_lr, 0.002 * 512.0 / 96.0);
    const char *bad_lr[] = {"0", "-1", "x", "1e9", "nan"};
    for (int i = 0; i < 5; i++) {
        rc = set_captured(&c, &t, lrf, NULL, bad_lr[i], &lr, msg, sizeof msg);
        T_CHECK(rc == VIL_EUSAGE && strstr(msg, "--lr"), "--lr %s refused (rc %d): %s", bad_lr[i], rc, msg);
    }
    VilErrCapture cap;
    vil_error_capture(&cap);
    rc = vil_train_config_set_lr(&t, 50.0, 1);
    vil_error_release(&cap);
    T_CHECK(rc == VIL_EUSAGE, "--lr 50 at a global batch of 1: base_lr 25600 refused (rc %d)", rc);

    /* a cfg file's key of timm's: answered as --set answers it, with the line */
    static const char *const files[][3] = {{"timm_lr.cfg", "depth = 2\nlr = 0.1\n", "'base_lr'"},
                                           {"timm_ls.cfg", "smoothing = 0.1\n", "'label_smoothing'"},
                                           {"not_timm.cfg", "depth = 2\nfooo = 1\n", "unknown config key 'fooo'"}};
    for (int i = 0; i < 3; i++) {
        const char *p = write_cfg(files[i][0], files[i][1]);
        char line[1100];
        snprintf(line, sizeof line, "... in %s:%d", p, i == 1 ? 1 : 2);
        vil_config_default(&c);
        vil_train_config_default(&t);
        vil_error_capture(&cap);
        rc = vil_train_config_load(&c, &t, p);
        vil_error_release(&cap);
        T_CHECK(rc == VIL_EUSAGE && strstr(cap.msg, files[i][2]) && strstr(cap.msg, line),
                "%s: refused naming %s and the line (rc %d): %s", files[i][0], files[i][2], rc, cap.msg);
    }

    /* --aa: timm's rand- string, its defaults n2 m10 mstd0 where a part is missing */
    const VilTimmFlag *aa = vil_timm_find("--aa");
    static const struct {
        const char *s;
        int n;
        float m, mstd;
    } good[] = {{"rand-m9-mstd0.5-inc1", 2, 9, 0.5f}, {"rand-n3-m7", 3, 7, 0}, {"rand", 2, 10, 0},
                {"rand-m9-mstd0.5", 2, 9, 0.5f}, {"rand-inc1-m6.5-n1", 1, 6.5f, 0}, {"none", 0, -1, -1}, {"", 0, -1, -1},
                {"rand-inc0-n3", 3, 10, 0}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        vil_train_config_default(&t);
        rc = set_captured(&c, &t, aa, NULL, good[i].s, &lr, msg, sizeof msg);
        T_CHECK(rc == 0 && t.randaug_n == good[i].n && (good[i].m < 0 || t.randaug_m == good[i].m) &&
                    (good[i].mstd < 0 || t.randaug_mstd == good[i].mstd),
                "--aa '%s': n%d m%g mstd%g (rc %d): %s", good[i].s, t.randaug_n, t.randaug_m, t.randaug_mstd, rc, msg);
    }
    /* a part twice (timm keeps the last n but the first mstd), inc other than 0 or 1 (timm's
     * "integer (bool)"), a part vil lacks */
    const char *bad_aa[] = {"original", "v0", "augmix-m5", "randm9", "rand-m", "rand-x3", "rand-n99",
                            "rand-m9-p0.5", "rand-mmax10", "rand-m9-", "rand-m1e99", "rand-m9-n2-n3",
                            "rand-m9-m9", "rand-mstd0.5-mstd1", "rand-inc1-inc1", "rand-inc2", "rand-inc",
                            "rand-incx", "rand-w0"};
    for (size_t i = 0; i < sizeof bad_aa / sizeof bad_aa[0]; i++) {
        vil_train_config_default(&t);
        rc = set_captured(&c, &t, aa, NULL, bad_aa[i], &lr, msg, sizeof msg);
        T_CHECK(rc == VIL_EUSAGE && strstr(msg, "--aa") && t.randaug_n == VIL_RECIPE_RANDAUG_N,
                "--aa '%s' refused, naming --aa, nothing set (rc %d): %s", bad_aa[i], rc, msg);
    }
}

/* timm's --opt as timm's optimizer factory means its names (timm/optim/_optim_factory.py: sgd is
 * torch.optim.SGD with nesterov=True, nesterov an alias of it, momentum SGD with nesterov=False,
 * adam torch.optim.Adam), written out here; vil's own key keeps its documented nesterov = 0.
 * --model-ema-warmup is a switch. The keys each flag sets, for the command line's check. */
static void test_timm_meanings(void) {
    static const struct {
        const char *opt, *optimizer;
        int nesterov; /* -1: the cfg's, untouched */
    } opts[] = {{"sgd", "sgd", 1}, {"nesterov", "sgd", 1}, {"momentum", "sgd", 0}, {"adam", "adam", -1},
                {"adamw", "adamw", -1}, {"lamb", "lamb", -1}, {"lambc", "lambc", -1}, {"SGD", "sgd", 1}};
    const VilTimmFlag *opt = vil_timm_find("--opt");
    char msg[1024];
    double lr = 0;
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        for (int start = 0; start < 2; start++) { /* from nesterov 0 and from 1: set, or left */
            VilConfig c;
            VilTrainConfig t;
            vil_config_default(&c);
            vil_train_config_default(&t);
            t.nesterov = start;
            int rc = set_captured(&c, &t, opt, NULL, opts[i].opt, &lr, msg, sizeof msg);
            int want = opts[i].nesterov < 0 ? start : opts[i].nesterov;
            T_CHECK(rc == 0 && strcmp(t.optimizer, opts[i].optimizer) == 0 && t.nesterov == want &&
                        vil_train_config_finalize(&t) == 0,
                    "--opt %s from nesterov %d: optimizer %s nesterov %d (got %s %d, rc %d): %s", opts[i].opt, start,
                    opts[i].optimizer, want, t.optimizer, t.nesterov, rc, msg);
        }
    const char *bad[] = {"sgdw", "nadam", "lookahead_adamw", "adamp", "", "adam w"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        VilConfig c;
        VilTrainConfig t;
        vil_config_default(&c);
        vil_train_config_default(&t);
        int rc = set_captured(&c, &t, opt, NULL, bad[i], &lr, msg, sizeof msg);
        T_CHECK(rc == VIL_EUSAGE && strstr(msg, "--opt") && strstr(msg, "momentum") && strcmp(t.optimizer, "adamw") == 0,
                "--opt '%s' refused naming the names vil has, nothing set (rc %d): %s", bad[i], rc, msg);
    }
    /* vil's own key: its documented default nesterov = 0 stays */
    VilConfig c;
    VilTrainConfig t;
    vil_config_default(&c);
    vil_train_config_default(&t);
    T_CHECK(t.nesterov == 0 && vil_train_config_set(&c, &t, "optimizer", "sgd") == 0 && t.nesterov == 0,
            "--set optimizer=sgd keeps nesterov = 0");
    const VilTimmFlag *w = vil_timm_find("--model-ema-warmup");
    T_CHECK(w && w->conv == VIL_TIMM_SWITCH && set_captured(&c, &t, w, NULL, NULL, &lr, msg, sizeof msg) == 0 &&
                t.model_ema_warmup == 1,
            "--model-ema-warmup: a switch setting model_ema_warmup = 1 (%d)", t.model_ema_warmup);
    /* the keys a flag sets: the ones it names; --aa the parts given; implied ones are not */
    static const struct {
        const char *flag, *value, *keys;
    } claims[] = {{"--lr", "0.1", "base_lr"}, {"-b", "4", "batch"}, {"--opt", "sgd", "optimizer"},
                  {"--drop-path-rate", "0.1", "drop_path"}, {"--model-ema-warmup", "1", "model_ema_warmup"},
                  {"--aa", "rand-m9-mstd0.5-inc1", "randaug_m randaug_mstd"}, {"--aa", "rand-inc1-n3", "randaug_n"},
                  {"--aa", "none", "randaug_n"}, {"--aa", "rand", "randaug_n"}, {"--model", "x", ""}};
    for (size_t i = 0; i < sizeof claims / sizeof claims[0]; i++) {
        const char *keys[3];
        char got[128] = "";
        int n = vil_timm_keys(vil_timm_find(claims[i].flag), claims[i].value, keys);
        for (int k = 0; k < n; k++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", k ? " " : "", keys[k]);
        T_CHECK(strcmp(got, claims[i].keys) == 0, "%s %s sets '%s' (got '%s')", claims[i].flag, claims[i].value,
                claims[i].keys, got);
    }
}

/* A float key takes a subnormal float as that float (1e-40); a nonzero number a float cannot
 * hold is refused as too small, not as out of range, unless 0 is out of the key's range too. */
static void test_tiny_floats(void) {
    VilConfig c;
    VilTrainConfig t;
    vil_config_default(&c);
    vil_train_config_default(&t);
    char msg[1024];
    double lr = 0;
    int rc = set_captured(&c, &t, NULL, "init_state_sigma", "1e-40", &lr, msg, sizeof msg);
    T_CHECK(rc == 0 && t.init_state_sigma == (float)1e-40 && t.init_state_sigma > 0 && t.init_state_sigma < FLT_MIN,
            "init_state_sigma=1e-40: the float subnormal %g (rc %d): %s", (double)t.init_state_sigma, rc, msg);
    static const char *const tiny[] = {"1e-320", "1e-46", "1e-400", "-1e-320"};
    for (int i = 0; i < 4; i++) {
        rc = set_captured(&c, &t, NULL, "init_state_sigma", tiny[i], &lr, msg, sizeof msg);
        T_CHECK(rc == VIL_EUSAGE && strstr(msg, "too small for a float") && !strstr(msg, "wants a number in") &&
                    t.init_state_sigma == (float)1e-40,
                "init_state_sigma=%s: too small, not out of range, nothing set (rc %d): %s", tiny[i], rc, msg);
    }
    rc = set_captured(&c, &t, NULL, "adam_eps", "1e-320", &lr, msg, sizeof msg);
    T_CHECK(rc == VIL_EUSAGE && strstr(msg, "wants a number in [1e-30, 1]"),
            "adam_eps=1e-320: out of its range [1e-30, 1] (rc %d): %s", rc, msg);
    rc = set_captured(&c, &t, NULL, "clip_grad", "0e-999", &lr, msg, sizeof msg);
    T_CHECK(rc == 0 && t.clip_grad == 0.0f, "clip_grad=0e-999 is 0 (rc %d): %s", rc, msg);
}

/* ---------------- choice keys ---------------- */

/* the field a choice key resolves into, as this test reads it (the optimizer: its entry's
 * address); LONG_MIN for a key this test does not know */
static long choice_field(const char *key, const VilConfig *c, const VilTrainConfig *t) {
    if (strcmp(key, "dt_init") == 0) return (long)(int)c->dt_init_kind;
    if (strcmp(key, "pos_embed") == 0) return (long)(int)c->pos_embed_kind;
    if (strcmp(key, "family") == 0) return (long)(int)c->family_kind;
    if (strcmp(key, "optimizer") == 0) return (long)(intptr_t)t->optim;
    if (strcmp(key, "sched") == 0) return (long)(int)t->sched_kind;
    if (strcmp(key, "decode") == 0) return (long)(int)t->decode_kind;
    if (strcmp(key, "allreduce") == 0) return (long)(int)t->allreduce_kind;
    if (strcmp(key, "init_state") == 0) return (long)(int)t->init_state_kind;
    if (strcmp(key, "canvas_bg") == 0) return (long)(int)t->canvas_bg_kind;
    if (strcmp(key, "init_state_fit") == 0) return (long)(int)t->init_state_fit_kind;
    return LONG_MIN;
}

/* what a choice key needs beside it to pass finalize: init_state_fit, init_state = fitted */
static void choice_needs(const char *key, VilConfig *c, VilTrainConfig *t) {
    if (strcmp(key, "init_state_fit") == 0) vil_train_config_set(c, t, "init_state", "fitted");
}

static int finalize_quiet(VilConfig *c, VilTrainConfig *t) {
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_config_finalize(c);
    int rt = vil_train_config_finalize(t);
    vil_error_release(&cap);
    return rc ? rc : rt;
}

/* Every value of every choice key (the text keys the code decides by) resolves to its enum or
 * table entry after finalize, whether the text came through --set, was written into the struct
 * directly or read back from a state file's JSON; a value that names none is refused by
 * finalize. The rows are the expected choices; every choice key of the two tables and every
 * name it has must have a row, so a new one is checked too. */
static void test_choices(void) {
    const struct {
        const char *key, *value;
        long want;
    } R[] = {
        {"dt_init", "zero", VIL_DT_INIT_ZERO},
        {"dt_init", "vim", VIL_DT_INIT_VIM},
        {"pos_embed", "learned", VIL_POS_EMBED_LEARNED},
        {"pos_embed", "none", VIL_POS_EMBED_NONE},
        {"family", "vim", VIL_FAMILY_VIM},
        {"family", "stream", VIL_FAMILY_STREAM},
        {"optimizer", "adamw", (long)(intptr_t)&vil_optim_adamw},
        {"optimizer", "adam", (long)(intptr_t)&vil_optim_adam},
        {"optimizer", "sgd", (long)(intptr_t)&vil_optim_sgd},
        {"optimizer", "lamb", (long)(intptr_t)&vil_optim_lamb},
        {"optimizer", "lambc", (long)(intptr_t)&vil_optim_lambc},
        {"sched", "cosine", VIL_SCHED_COSINE},
        {"sched", "step", VIL_SCHED_STEP},
        {"sched", "multistep", VIL_SCHED_MULTISTEP},
        {"sched", "const_cosine", VIL_SCHED_CONST_COSINE},
        {"decode", "exact", VIL_DECODE_EXACT},
        {"decode", "fast", VIL_DECODE_FAST},
        {"allreduce", "overlap", VIL_ALLREDUCE_OVERLAP},
        {"allreduce", "end", VIL_ALLREDUCE_END},
        {"init_state", "zero", VIL_INIT_ZERO},
        {"init_state", "noise", VIL_INIT_NOISE},
        {"init_state", "fitted", VIL_INIT_FITTED},
        {"init_state", "passing", VIL_INIT_PASSING},
        {"canvas_bg", "zero", VIL_CANVAS_ZERO},
        {"canvas_bg", "noise", VIL_CANVAS_NOISE},
        {"init_state_fit", "element", VIL_INIT_FIT_ELEMENT},
        {"init_state_fit", "scalar", VIL_INIT_FIT_SCALAR},
    };
    const int nr = (int)(sizeof R / sizeof R[0]);
    /* the tables' choice keys and their names, each a row here */
    const VilKeyTable *tables[2] = {&vil_model_keys, &vil_train_keys};
    int nkeys = 0;
    for (int ti = 0; ti < 2; ti++)
        for (int i = 0; i < tables[ti]->n; i++) {
            const VilKey *k = &tables[ti]->keys[i];
            if (!k->choice) continue;
            nkeys++;
            const char *name;
            for (int j = 0; (name = k->choice->name(j)) != NULL; j++) {
                int found = 0;
                for (int r = 0; r < nr; r++) found |= strcmp(R[r].key, k->name) == 0 && strcmp(R[r].value, name) == 0;
                T_CHECK(found, "choice key %s's value '%s' has a row in test_choices", k->name, name);
            }
        }
    T_CHECK(nkeys == 10, "the tables hold the ten choice keys (%d)", nkeys);
    for (int r = 0; r < nr; r++) {
        const VilKey *k = vil_keys_find(&vil_model_keys, R[r].key);
        if (!k) k = vil_keys_find(&vil_train_keys, R[r].key);
        T_CHECK(k && k->choice && k->type == VIL_KEY_STR, "%s is a choice key", R[r].key);
    }
    for (int r = 0; r < nr; r++) {
        const char *key = R[r].key, *value = R[r].value;
        int model = vil_keys_find(&vil_model_keys, key) != NULL;
        /* --set (the config's setter) */
        VilConfig c;
        VilTrainConfig t;
        vil_config_default(&c);
        vil_train_config_default(&t);
        choice_needs(key, &c, &t);
        c.in_chans = 1; /* the stream family reads gray images */
        int rc = vil_train_config_set(&c, &t, key, value);
        T_CHECK(rc == 0 && choice_field(key, &c, &t) == R[r].want, "--set %s=%s: resolved when set", key, value);
        rc = finalize_quiet(&c, &t);
        T_CHECK(rc == 0 && choice_field(key, &c, &t) == R[r].want, "--set %s=%s: resolved after finalize (rc %d)",
                key, value, rc);
        /* the text written into the struct by hand: finalize resolves it */
        VilConfig c2;
        VilTrainConfig t2;
        vil_config_default(&c2);
        vil_train_config_default(&t2);
        choice_needs(key, &c2, &t2);
        c2.in_chans = 1;
        const VilKey *k = vil_keys_find(model ? &vil_model_keys : &vil_train_keys, key);
        char *field = (char *)(model ? (void *)&c2 : (void *)&t2) + k->offset;
        snprintf(field, k->size, "%s", value);
        rc = finalize_quiet(&c2, &t2);
        T_CHECK(rc == 0 && choice_field(key, &c2, &t2) == R[r].want, "%s = '%s' written directly: finalize resolves it "
                "(rc %d)", key, value, rc);
        /* read back from JSON (a state file's config, compared by its choice without finalize) */
        char *js = model ? vil_config_to_json(&c) : vil_train_config_to_json(&t);
        VilConfig c3;
        VilTrainConfig t3;
        vil_config_default(&c3);
        vil_train_config_default(&t3);
        rc = model ? vil_config_from_json(&c3, js) : vil_train_config_from_json(&t3, js);
        T_CHECK(rc == 0 && choice_field(key, &c3, &t3) == R[r].want, "%s = '%s' from JSON: resolved (rc %d)", key,
                value, rc);
        free(js);
    }
    /* a value that names no choice: set (a later --set may replace it), said unresolved, refused by
     * finalize */
    const char *keys[] = {"dt_init", "pos_embed", "family", "optimizer", "sched", "decode", "allreduce",
                          "init_state", "canvas_bg", "init_state_fit"};
    for (int i = 0; i < (int)(sizeof keys / sizeof *keys); i++) {
        VilConfig c;
        VilTrainConfig t;
        vil_config_default(&c);
        vil_train_config_default(&t);
        int rc = vil_train_config_set(&c, &t, keys[i], "bogus");
        long none = strcmp(keys[i], "optimizer") == 0 ? 0 : -1;
        T_CHECK(rc == 0 && choice_field(keys[i], &c, &t) == none, "%s=bogus: set, resolved to none", keys[i]);
        T_CHECK(finalize_quiet(&c, &t) == VIL_EUSAGE, "%s=bogus: refused by finalize", keys[i]);
    }
    /* the refusal names the key and its values */
    {
        VilConfig c;
        VilErrCapture cap;
        vil_config_default(&c);
        vil_config_set(&c, "dt_init", "lecun");
        vil_error_capture(&cap);
        int rc = vil_config_finalize(&c);
        vil_error_release(&cap);
        T_CHECK(rc == VIL_EUSAGE && strcmp(cap.msg, "config: dt_init must be 'zero' or 'vim', got 'lecun'") == 0,
                "dt_init=lecun: '%s'", cap.msg);
    }
}

/* The optimizer's hyperparameters come from the training keys into one struct, and the run's
 * header describes each optimizer by its table entry (not as AdamW) */
static void test_optim_hyper(void) {
    VilConfig c;
    VilTrainConfig t;
    vil_config_default(&c);
    vil_train_config_default(&t);
    const char *sets[] = {"beta1=0.8", "beta2=0.95", "adam_eps=1e-7", "weight_decay=0.02", "momentum=0.7",
                          "nesterov=1"};
    int rc = 0;
    for (int i = 0; i < 6; i++) rc |= vil_train_config_set_kv(&c, &t, sets[i]);
    rc |= vil_train_config_finalize(&t);
    VilOptimHyper h = vil_train_config_hyper(&t, 0.25f);
    T_CHECK(rc == 0 && h.lr == 0.25f && h.beta1 == 0.8f && h.beta2 == 0.95f && h.eps == 1e-7f && h.wd == 0.02f &&
                h.momentum == 0.7f && h.nesterov == 1 && h.l2 == 0 && h.trust_clip == 0,
            "vil_train_config_hyper: the keys' values, the step's lr, no variant");
    VilStepParams sp = vil_step_params(&t, 0.5f);
    T_CHECK(sp.hyper.lr == 0.5f && sp.hyper.wd == 0.02f && sp.hyper.momentum == 0.7f && sp.optim == t.optim,
            "vil_step_params carries the same struct");
    const struct {
        const char *optimizer, *want;
    } D[] = {{"adamw", "AdamW wd 0.02"},
             {"adam", "Adam, L2 wd 0.02"},
             {"sgd", "SGD momentum 0.7 (Nesterov), L2 wd 0.02"},
             {"lamb", "Lamb wd 0.02"},
             {"lambc", "Lamb (trust ratio clipped at 1) wd 0.02"}};
    for (int i = 0; i < 5; i++) {
        char buf[96];
        rc = vil_train_config_set(&c, &t, "optimizer", D[i].optimizer);
        rc |= vil_train_config_finalize(&t);
        vil_optim_describe(&t, buf, sizeof buf);
        T_CHECK(rc == 0 && strcmp(buf, D[i].want) == 0, "optimizer=%s described '%s' (got '%s')", D[i].optimizer,
                D[i].want, buf);
    }
    /* every optimizer of the table has a row above (a new one describes itself, checked here) */
    int n = 0;
    while (vil_optim_at(n)) n++;
    T_CHECK(n == 5, "the table's optimizers are the five described above (%d)", n);
}

int main(void) {
    dir = corpus_mkdtemp("config");
    test_file_errors();
    test_values();
    test_json();
    test_printable();
    test_parse_numbers();
    test_text_values();
    test_timm_flags();
    test_timm_meanings();
    test_tiny_floats();
    test_choices();
    test_optim_hyper();
    corpus_rmtree(dir);
    return t_finish();
}
