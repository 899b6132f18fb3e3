/* test_config.c: the cfg-file reader and the config values against hostile input: lines past
 * any buffer, a folder or binary bytes as a config, repeated keys, values out of range or not
 * written in full, metadata JSON that would coerce (6.7 to 6) or truncate, and the usage-error
 * code every one of them returns (VIL_EUSAGE: the commands exit 2 for it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data_corpus.h"
#include "testing.h"
#include "vil/common.h"
#include "vil/optim.h"
#include "train/train_config.h"
#include "vil/config.h"
#include "vil/limits.h"

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
                  {"0.5 ", -1, 0}, {"e5", -1, 0}, {"1e400", -2, 0}, {"1e-400", -2, 0}};
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

int main(void) {
    dir = corpus_mkdtemp("config");
    test_file_errors();
    test_values();
    test_json();
    test_printable();
    test_parse_numbers();
    test_text_values();
    corpus_rmtree(dir);
    return t_finish();
}
