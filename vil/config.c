/* config.c: the model and training configuration tables, the cfg-file parser and the JSON form
 * stored in checkpoint metadata. Two tables (KEYS: model, TKEYS: training) drive parsing,
 * printing, overrides and JSON; a model-only reader skips training keys but still rejects
 * unknown ones. */
#include "config.h"

#include <cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "limits.h"

typedef enum { K_INT, K_FLOAT, K_STR } KeyType;
typedef struct {
    const char *name;
    KeyType type;
    size_t offset;
    size_t size;    /* for strings */
    double lo, hi;  /* numbers: the values any run can take (finalize adds the relations) */
    const char *help;
} Key;

#define KI(f, lo, hi, h) {#f, K_INT, offsetof(VilConfig, f), 0, lo, hi, h}
#define KF(f, lo, hi, h) {#f, K_FLOAT, offsetof(VilConfig, f), 0, lo, hi, h}
#define KS(f, h) {#f, K_STR, offsetof(VilConfig, f), sizeof(((VilConfig *)0)->f), 0, 0, h}
static const Key KEYS[] = {
    KS(name, "model name"),
    KS(arch, "vil (Longhorn scan) or vim (Mamba scan)"),
    KI(img_size, 1, VIL_MAX_IMG_SIZE, "input resolution"),
    KI(patch_size, 1, VIL_MAX_PATCH, "patch size P"),
    KI(stride, 1, VIL_MAX_PATCH, "patch stride S (= P, or 8 for ViM stride-8)"),
    KI(in_chans, 1, 3, "input channels (3 RGB, 1 grayscale)"),
    KI(embed_dim, 1, VIL_MAX_EMBED_DIM, "embedding dimension D"),
    KI(depth, 1, VIL_MAX_DEPTH, "number of blocks"),
    KI(d_state, 1, VIL_MAX_STATE, "state size N"),
    KI(dt_rank, 0, VIL_MAX_EMBED_DIM, "dt rank R (0: ceil(D/16))"),
    KI(expand, 1, VIL_MAX_EXPAND, "inner dimension E = expand * D"),
    KI(d_conv, 1, VIL_MAX_CONV, "depthwise conv1d width"),
    KI(num_classes, 1, VIL_MAX_CLASSES, "number of classes"),
    KF(drop_path, 0, 0.999, "stochastic depth rate"),
    KS(dt_init, "ViL dt_proj bias init: zero or vim"),
};
#define NKEYS (int)(sizeof KEYS / sizeof KEYS[0])

#define TI(f, lo, hi, h) {#f, K_INT, offsetof(VilTrainConfig, f), 0, lo, hi, h}
#define TF(f, lo, hi, h) {#f, K_FLOAT, offsetof(VilTrainConfig, f), 0, lo, hi, h}
#define TS(f, h) {#f, K_STR, offsetof(VilTrainConfig, f), sizeof(((VilTrainConfig *)0)->f), 0, 0, h}
#define BIG 1e9
static const Key TKEYS[] = {
    TI(epochs, 1, 1000000, "training epochs"),
    TI(batch, 1, VIL_MAX_BATCH, "batch size per rank (global batch = batch * ranks)"),
    TF(base_lr, 0, 100, "peak lr = base_lr * global_batch / 512"),
    TF(warmup_lr, 0, 100, "lr at step 0 of the linear warmup"),
    TF(warmup_epochs, 0, 1000000, "warmup length in epochs (fractions allowed)"),
    TF(min_lr, 0, 100, "end of the cosine decay"),
    TF(weight_decay, 0, 100, "AdamW weight decay (not on 1-D tensors, pos_embed, cls_token)"),
    TF(beta1, 0, 0.999999, "AdamW beta1"),
    TF(beta2, 0, 0.999999, "AdamW beta2"),
    TF(adam_eps, 1e-30, 1, "AdamW epsilon"),
    TF(clip_grad, 0, BIG, "clip the global gradient norm to this (0: off)"),
    TF(ema_decay, 0, 0.99999999, "EMA of the weights, updated every step (0: off)"),
    TF(label_smoothing, 0, 0.999, "label smoothing of the targets"),
    TF(mixup, 0, 1000, "Mixup Beta alpha (0: off)"),
    TF(cutmix, 0, 1000, "CutMix Beta alpha (0: off)"),
    TF(mixup_prob, 0, 1, "probability that a batch is mixed"),
    TF(mixup_switch_prob, 0, 1, "with Mixup and CutMix both on: probability of CutMix"),
    TI(repeats, 1, 64, "repeated augmentation: each image this many times per epoch (1: off)"),
    TI(randaug_n, 0, 16, "RandAugment ops per image (0: off)"),
    TF(randaug_m, 0, 30, "RandAugment magnitude (of 10)"),
    TF(randaug_mstd, 0, 100, "RandAugment magnitude noise std"),
    TF(reprob, 0, 1, "random erasing probability"),
    TF(scale_min, 1e-6, 1, "RandomResizedCrop minimum area fraction"),
    TF(hflip, 0, 1, "horizontal flip probability"),
    TS(decode, "training JPEG decode: exact (PIL's pixels, the default) or fast (DCT-scaled crop, "
               "merged chroma upsampling: ~4% faster); evaluation always decodes exactly"),
    TF(crop_pct, 1e-3, 1, "evaluation: resize to img_size / crop_pct, center crop"),
    TI(seed, 0, 2147483647, "seed of the initialization, data order, augmentation and drop path"),
    TI(workers, 1, 256, "data loader threads"),
    TI(log_every, 1, BIG, "progress line every N steps"),
    TI(eval_every_epochs, 0, 1000000, "validation pass every N epochs and after the last (0: never)"),
    TI(eval_batch, 0, VIL_MAX_BATCH, "evaluation batch (0: the training batch)"),
    TI(max_steps, 0, 2147483647, "stop after this many steps, the schedule ending there (0: no limit)"),
};
#undef BIG
#define NTKEYS (int)(sizeof TKEYS / sizeof TKEYS[0])

void vil_config_default(VilConfig *c) {
    memset(c, 0, sizeof *c);
    strcpy(c->name, "vil_tiny");
    strcpy(c->arch, "vil");
    c->img_size = 224;
    c->patch_size = 16;
    c->stride = 16;
    c->in_chans = 3;
    c->embed_dim = 192;
    c->depth = 24;
    c->d_state = 16;
    c->dt_rank = 0;
    c->expand = 2;
    c->d_conv = 4;
    c->num_classes = 1000;
    c->drop_path = 0.0f;
    strcpy(c->dt_init, "zero");
}

static const Key *find_in(const Key *keys, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(keys[i].name, name) == 0) return &keys[i];
    return NULL;
}
static const Key *find_key(const char *name) { return find_in(KEYS, NKEYS, name); }
static const Key *find_train_key(const char *name) { return find_in(TKEYS, NTKEYS, name); }

/* the suggestion looks at both tables: a misspelt training key in a model-only command
 * still deserves its hint */
static const char *nearest_key(const char *name) {
    int best = 1 << 30;
    const char *b = NULL;
    for (int t = 0; t < 2; t++) {
        const Key *keys = t ? TKEYS : KEYS;
        int n = t ? NTKEYS : NKEYS;
        for (int i = 0; i < n; i++) {
            int d = vil_edit_distance(name, keys[i].name);
            if (d < best) best = d, b = keys[i].name;
        }
    }
    return best <= 4 ? b : NULL;
}

static void report_unknown(const char *key) {
    const char *s = nearest_key(key);
    if (s) vil_error("unknown config key '%s' (did you mean '%s'?)", key, s);
    else vil_error("unknown config key '%s'", key);
}

/* Values come from config files, the command line and checkpoint metadata: each is checked
 * whole (no silent truncation or coercion) against the key's range. A value no run could take
 * is a usage error (VIL_EUSAGE). */
static int set_value(const Key *k, void *base, const char *key, const char *value) {
    char *dst = (char *)base + k->offset;
    char shown[80];
    vil_printable(shown, sizeof shown, value);
    if (k->type == K_INT) {
        long v;
        if (vil_parse_int(value, &v) != 0 || v < k->lo || v > k->hi) {
            vil_error("config key '%s' wants an integer in %.0f..%.0f, got '%s'", key, k->lo, k->hi, shown);
            return VIL_EUSAGE;
        }
        *(int *)dst = (int)v;
    } else if (k->type == K_FLOAT) {
        double v;
        if (vil_parse_float(value, &v) != 0 || v < k->lo || v > k->hi) {
            vil_error("config key '%s' wants a number in [%g, %g], got '%s'", key, k->lo, k->hi, shown);
            return VIL_EUSAGE;
        }
        *(float *)dst = (float)v;
    } else {
        size_t n = strlen(value);
        if (n >= k->size) {
            vil_error("config key '%s': value '%s' is longer than %zu characters", key, shown,
                      k->size - 1);
            return VIL_EUSAGE;
        }
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)value[i] < 0x20 || value[i] == 0x7f) {
                vil_error("config key '%s': value '%s' holds a control character", key, shown);
                return VIL_EUSAGE;
            }
        strcpy(dst, value);
    }
    return 0;
}

int vil_config_set(VilConfig *c, const char *key, const char *value) {
    const Key *k = find_key(key);
    if (k) return set_value(k, c, key, value);
    if (find_train_key(key))
        vil_error("config key '%s' is a training setting: only `vil train` reads it", key);
    else report_unknown(key);
    return VIL_EUSAGE;
}

int vil_train_config_set(VilConfig *c, VilTrainConfig *t, const char *key, const char *value) {
    const Key *k = find_key(key);
    if (k) return set_value(k, c, key, value);
    k = find_train_key(key);
    if (k) return set_value(k, t, key, value);
    report_unknown(key);
    return VIL_EUSAGE;
}

/* "key=value" -> key (truncated to fit) and a pointer to the value; -1 without '=' */
static int split_kv(const char *kv, char *key, size_t keylen, const char **value) {
    const char *eq = strchr(kv, '=');
    if (!eq) {
        vil_error("expected key=value, got '%s'", kv);
        return VIL_EUSAGE;
    }
    size_t n = (size_t)(eq - kv);
    if (n >= keylen) {
        vil_error("no config key is %zu characters long: '%.*s'", n, (int)(keylen - 1), kv);
        return VIL_EUSAGE;
    }
    memcpy(key, kv, n);
    key[n] = 0;
    *value = eq + 1;
    return 0;
}

int vil_train_config_set_kv(VilConfig *c, VilTrainConfig *t, const char *kv) {
    char key[64];
    const char *value;
    int rc = split_kv(kv, key, sizeof key, &value);
    return rc ? rc : vil_train_config_set(c, t, key, value);
}

int vil_config_set_kv(VilConfig *c, const char *kv) {
    char key[64];
    const char *value;
    int rc = split_kv(kv, key, sizeof key, &value);
    return rc ? rc : vil_config_set(c, key, value);
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

/* t NULL: a model-only reader, which skips training keys (one cfg file serves `vil train` and
 * `vil bench`). -1 when the file cannot be read, VIL_EUSAGE when what it says is wrong. */
static int load_file(VilConfig *c, VilTrainConfig *t, const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        vil_error("cannot open config '%s': %s", path, vil_errno_str());
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        vil_error("config '%s' is not a file (a folder?): give a cfg file such as configs/vil_tiny.cfg", path);
        return -1;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        vil_error("cannot open config '%s': %s", path, vil_errno_str());
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, rc = 0;
    /* the line each key was set on, so a repeated key is caught: one value per key per file */
    int set_at[64] = {0};
    const Key *seen[64];
    int nseen = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (len > VIL_MAX_CONFIG_LINE) {
            vil_error("%s:%d: line of %zd bytes (at most %d): is this a cfg file?", path, lineno,
                      len, VIL_MAX_CONFIG_LINE);
            rc = VIL_EUSAGE;
            break;
        }
        if (memchr(line, 0, (size_t)len)) {
            vil_error("%s:%d: a NUL byte: this is not a text cfg file", path, lineno);
            rc = VIL_EUSAGE;
            break;
        }
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *s = trim(line);
        if (!*s) continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            char shown[80];
            vil_printable(shown, sizeof shown, s);
            vil_error("%s:%d: expected 'key = value', got '%s'", path, lineno, shown);
            rc = VIL_EUSAGE;
            break;
        }
        *eq = 0;
        char *key = trim(s), *val = trim(eq + 1);
        const Key *k = find_key(key);
        if (!k) k = find_train_key(key);
        for (int i = 0; k && i < nseen; i++)
            if (seen[i] == k) {
                vil_error("%s:%d: '%s' was already set on line %d: one value per key", path,
                          lineno, key, set_at[i]);
                rc = VIL_EUSAGE;
            }
        if (rc) break;
        if (k && nseen < 64) {
            seen[nseen] = k;
            set_at[nseen++] = lineno;
        }
        int r;
        if (t) r = vil_train_config_set(c, t, key, val);
        else if (find_train_key(key)) r = 0;
        else r = vil_config_set(c, key, val);
        if (r != 0) {
            vil_error("... in %s:%d", path, lineno);
            rc = VIL_EUSAGE;
            break;
        }
    }
    if (rc == 0 && ferror(f)) {
        vil_error("cannot read config '%s': %s", path, vil_errno_str());
        rc = -1;
    }
    free(line);
    fclose(f);
    return rc;
}

int vil_config_load(VilConfig *c, const char *path) { return load_file(c, NULL, path); }

int vil_train_config_load(VilConfig *c, VilTrainConfig *t, const char *path) {
    return load_file(c, t, path);
}

int vil_config_finalize(VilConfig *c) {
    if (strcmp(c->arch, "vil") == 0) c->arch_id = VIL_ARCH_VIL;
    else if (strcmp(c->arch, "vim") == 0) c->arch_id = VIL_ARCH_VIM;
    else {
        vil_error("config: arch must be 'vil' or 'vim', got '%s'", c->arch);
        return VIL_EUSAGE;
    }
    if (strcmp(c->dt_init, "zero") != 0 && strcmp(c->dt_init, "vim") != 0) {
        vil_error("config: dt_init must be 'zero' or 'vim', got '%s'", c->dt_init);
        return VIL_EUSAGE;
    }
#define NEED(cond, ...)                                                                   \
    if (!(cond)) {                                                                        \
        vil_error("config: " __VA_ARGS__);                                                \
        return VIL_EUSAGE;                                                                \
    }
    /* every bound first (configs also come from files: nothing below may divide by zero or
     * overflow), then the relations between keys */
    NEED(c->embed_dim >= 1 && c->embed_dim <= VIL_MAX_EMBED_DIM, "embed_dim must be in 1..%d (got %d)", VIL_MAX_EMBED_DIM, c->embed_dim);
    NEED(c->depth >= 1 && c->depth <= VIL_MAX_DEPTH, "depth must be in 1..%d (got %d)", VIL_MAX_DEPTH, c->depth);
    NEED(c->d_state >= 1 && c->d_state <= VIL_MAX_STATE, "d_state must be in 1..%d (got %d)", VIL_MAX_STATE, c->d_state);
    NEED(c->in_chans == 1 || c->in_chans == 3, "in_chans must be 1 or 3 (got %d)", c->in_chans);
    NEED(c->patch_size >= 1 && c->patch_size <= VIL_MAX_PATCH && c->stride >= 1 && c->stride <= VIL_MAX_PATCH,
         "patch_size and stride must be in 1..%d (got %d and %d)", VIL_MAX_PATCH, c->patch_size, c->stride);
    NEED(c->img_size >= 1 && c->img_size <= VIL_MAX_IMG_SIZE, "img_size must be in 1..%d (got %d)", VIL_MAX_IMG_SIZE, c->img_size);
    NEED(c->img_size >= c->patch_size, "img_size %d is smaller than patch_size %d", c->img_size,
         c->patch_size);
    NEED((c->img_size - c->patch_size) % c->stride == 0,
         "(img_size - patch_size) = %d is not a multiple of stride %d",
         c->img_size - c->patch_size, c->stride);
    NEED(c->expand >= 1 && c->expand <= VIL_MAX_EXPAND, "expand must be in 1..%d (got %d)", VIL_MAX_EXPAND, c->expand);
    NEED(c->d_conv >= 1 && c->d_conv <= VIL_MAX_CONV, "d_conv must be in 1..%d (got %d)", VIL_MAX_CONV, c->d_conv);
    NEED(c->dt_rank >= 0 && c->dt_rank <= VIL_MAX_EMBED_DIM, "dt_rank must be in 0..%d (got %d)", VIL_MAX_EMBED_DIM, c->dt_rank);
    NEED(c->num_classes >= 1 && c->num_classes <= VIL_MAX_CLASSES, "num_classes must be in 1..%d (got %d)", VIL_MAX_CLASSES, c->num_classes);
    NEED(c->drop_path >= 0 && c->drop_path < 1, "drop_path must be in [0, 1)");
    long grid = (c->img_size - c->patch_size) / c->stride + 1;
    NEED(grid * grid + 1 <= VIL_MAX_TOKENS, "%ld x %ld patches + 1 = %ld tokens, more than %d: a larger stride or a smaller img_size",
         grid, grid, grid * grid + 1, VIL_MAX_TOKENS);
#undef NEED
    if (c->dt_rank == 0) c->dt_rank = (c->embed_dim + 15) / 16;
    c->d_inner = c->expand * c->embed_dim;
    c->grid = (int)grid;
    c->n_patches = c->grid * c->grid;
    c->seq_len = c->n_patches + 1;
    c->cls_pos = c->n_patches / 2;
    return 0;
}

static void print_table(const Key *keys, int n, const void *base, int width, FILE *f) {
    for (int i = 0; i < n; i++) {
        const Key *k = &keys[i];
        const char *p = (const char *)base + k->offset;
        if (k->type == K_INT) fprintf(f, "%-*s = %d\n", width, k->name, *(const int *)p);
        else if (k->type == K_FLOAT) fprintf(f, "%-*s = %g\n", width, k->name, *(const float *)p);
        else fprintf(f, "%-*s = %s\n", width, k->name, p);
    }
}

void vil_config_print(const VilConfig *c, FILE *f) { print_table(KEYS, NKEYS, c, 12, f); }

void vil_train_config_print(const VilTrainConfig *t, FILE *f) {
    print_table(TKEYS, NTKEYS, t, 17, f);
}

static char *table_to_json(const Key *keys, int n, const void *base) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; i < n; i++) {
        const Key *k = &keys[i];
        const char *p = (const char *)base + k->offset;
        if (k->type == K_INT) cJSON_AddNumberToObject(o, k->name, *(const int *)p);
        else if (k->type == K_FLOAT) cJSON_AddNumberToObject(o, k->name, *(const float *)p);
        else cJSON_AddStringToObject(o, k->name, p);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) VIL_FATAL("cJSON_PrintUnformatted failed");
    char *r = vil_strdup(s);
    cJSON_free(s);
    return r;
}

char *vil_config_to_json(const VilConfig *c) { return table_to_json(KEYS, NKEYS, c); }
char *vil_train_config_to_json(const VilTrainConfig *t) { return table_to_json(TKEYS, NTKEYS, t); }

/* which: 0 model keys into c, 1 training keys into t */
static int table_from_json(VilConfig *c, VilTrainConfig *t, const char *json, const char *what) {
    cJSON *o = cJSON_Parse(json);
    if (!o || !cJSON_IsObject(o)) {
        vil_error("%s metadata is not a JSON object", what);
        cJSON_Delete(o);
        return VIL_EUSAGE;
    }
    int rc = 0;
    cJSON *it;
    cJSON_ArrayForEach(it, o) {
        /* the value as set_value checks it: a whole string, an integer written in full (6.7 or
         * 1e9 for an int key is wrong, not 6), a float at full precision */
        char num[64];
        const char *buf = num;
        const Key *kk = c ? find_key(it->string) : find_train_key(it->string);
        if (cJSON_IsString(it)) buf = it->valuestring;
        else if (cJSON_IsNumber(it)) {
            double d = it->valuedouble;
            if (kk && kk->type == K_INT && d == (double)(long long)d && fabs(d) < 1e15)
                snprintf(num, sizeof num, "%lld", (long long)d);
            else snprintf(num, sizeof num, "%.17g", d);
        } else {
            vil_error("%s metadata: key '%s' has a value of the wrong type", what, it->string);
            rc = VIL_EUSAGE;
            break;
        }
        const Key *k;
        if (c) rc = vil_config_set(c, it->string, buf);
        else if ((k = find_train_key(it->string)) != NULL) rc = set_value(k, t, it->string, buf);
        else {
            report_unknown(it->string);
            rc = VIL_EUSAGE;
        }
        if (rc != 0) break;
    }
    cJSON_Delete(o);
    return rc;
}

int vil_config_from_json(VilConfig *c, const char *json) {
    return table_from_json(c, NULL, json, "model config");
}

int vil_train_config_from_json(VilTrainConfig *t, const char *json) {
    return table_from_json(NULL, t, json, "training config");
}

void vil_train_config_default(VilTrainConfig *t) {
    memset(t, 0, sizeof *t);
    /* recipe.md, ViL-Tiny (the model defaults): global batch 1024 = 8 ranks x 128 */
    t->epochs = 300;
    t->batch = 128;
    t->base_lr = 5e-4f;
    t->warmup_lr = 1e-6f;
    t->warmup_epochs = 5.0f;
    t->min_lr = 1e-5f;
    t->weight_decay = 0.1f;
    t->beta1 = 0.9f;
    t->beta2 = 0.999f;
    t->adam_eps = 1e-8f;
    t->clip_grad = 0.0f;
    t->ema_decay = 0.99996f;
    t->label_smoothing = 0.1f;
    t->mixup = 0.8f;
    t->cutmix = 1.0f;
    t->mixup_prob = 1.0f;
    t->mixup_switch_prob = 0.5f;
    t->repeats = 3;
    t->randaug_n = 2;
    t->randaug_m = 9.0f;
    t->randaug_mstd = 0.5f;
    t->reprob = 0.25f;
    t->scale_min = 0.08f;
    t->hflip = 0.5f;
    strcpy(t->decode, "exact");
    t->crop_pct = 0.875f;
    t->seed = 0;
    t->workers = 4;
    t->log_every = 50;
    t->eval_every_epochs = 1;
    t->eval_batch = 0;
    t->max_steps = 0;
}

int vil_train_config_finalize(const VilTrainConfig *t) {
#define NEED(cond, ...)                                                                   \
    if (!(cond)) {                                                                        \
        vil_error("config: " __VA_ARGS__);                                                \
        return VIL_EUSAGE;                                                                \
    }
#define PROB(f) NEED(t->f >= 0.0f && t->f <= 1.0f, #f " must be in [0, 1] (got %g)", t->f)
    NEED(t->epochs >= 1, "epochs must be >= 1");
    NEED(t->batch >= 1, "batch must be >= 1");
    NEED(t->base_lr > 0.0f, "base_lr must be > 0 (got %g)", t->base_lr);
    NEED(t->warmup_lr >= 0.0f && t->min_lr >= 0.0f, "warmup_lr and min_lr must be >= 0");
    NEED(t->warmup_epochs >= 0.0f && t->warmup_epochs <= t->epochs,
         "warmup_epochs must be in [0, epochs = %d] (got %g)", t->epochs, t->warmup_epochs);
    NEED(t->weight_decay >= 0.0f, "weight_decay must be >= 0");
    NEED(t->beta1 >= 0.0f && t->beta1 < 1.0f && t->beta2 >= 0.0f && t->beta2 < 1.0f,
         "beta1 and beta2 must be in [0, 1)");
    NEED(t->adam_eps > 0.0f, "adam_eps must be > 0");
    NEED(t->clip_grad >= 0.0f, "clip_grad must be >= 0 (0: off)");
    NEED(t->ema_decay >= 0.0f && t->ema_decay < 1.0f, "ema_decay must be in [0, 1) (0: off)");
    NEED(t->label_smoothing >= 0.0f && t->label_smoothing < 1.0f,
         "label_smoothing must be in [0, 1)");
    NEED(t->mixup >= 0.0f && t->cutmix >= 0.0f, "mixup and cutmix alphas must be >= 0 (0: off)");
    PROB(mixup_prob);
    PROB(mixup_switch_prob);
    PROB(reprob);
    PROB(hflip);
    NEED(t->repeats >= 1, "repeats must be >= 1 (1: no repeated augmentation)");
    NEED(t->randaug_m >= 0.0f && t->randaug_m <= 30.0f, "randaug_m must be in [0, 30]");
    NEED(t->randaug_mstd >= 0.0f, "randaug_mstd must be >= 0");
    NEED(t->scale_min > 0.0f && t->scale_min <= 1.0f, "scale_min must be in (0, 1]");
    NEED(t->crop_pct > 0.0f && t->crop_pct <= 1.0f, "crop_pct must be in (0, 1]");
    NEED(strcmp(t->decode, "fast") == 0 || strcmp(t->decode, "exact") == 0,
         "decode must be 'fast' or 'exact' (got '%s')", t->decode);
    NEED(t->workers >= 1 && t->workers <= 256, "workers must be in 1..256");
    NEED(t->log_every >= 1, "log_every must be >= 1");
    NEED(t->batch <= VIL_MAX_BATCH && t->eval_batch <= VIL_MAX_BATCH, "batch and eval_batch must be at most %d", VIL_MAX_BATCH);
#undef PROB
#undef NEED
    return 0;
}
