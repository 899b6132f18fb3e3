/* config.c: the model configuration table, the cfg-file parser and the JSON form stored in
 * checkpoint metadata. One table (KEYS) drives parsing, printing, overrides and JSON. */
#include "config.h"

#include <cJSON.h>
#include <ctype.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

typedef enum { K_INT, K_FLOAT, K_STR } KeyType;
typedef struct {
    const char *name;
    KeyType type;
    size_t offset;
    size_t size; /* for strings */
    const char *help;
} Key;

#define KI(f, h) {#f, K_INT, offsetof(VilConfig, f), 0, h}
#define KF(f, h) {#f, K_FLOAT, offsetof(VilConfig, f), 0, h}
#define KS(f, h) {#f, K_STR, offsetof(VilConfig, f), sizeof(((VilConfig *)0)->f), h}
static const Key KEYS[] = {
    KS(name, "model name"),
    KS(arch, "vil (Longhorn scan) or vim (Mamba scan)"),
    KI(img_size, "input resolution"),
    KI(patch_size, "patch size P"),
    KI(stride, "patch stride S (= P, or 8 for ViM stride-8)"),
    KI(in_chans, "input channels (3 RGB, 1 grayscale)"),
    KI(embed_dim, "embedding dimension D"),
    KI(depth, "number of blocks"),
    KI(d_state, "state size N"),
    KI(dt_rank, "dt rank R (0: ceil(D/16))"),
    KI(expand, "inner dimension E = expand * D"),
    KI(d_conv, "depthwise conv1d width"),
    KI(num_classes, "number of classes"),
    KF(drop_path, "stochastic depth rate"),
    KS(dt_init, "ViL dt_proj bias init: zero or vim"),
};
#define NKEYS (int)(sizeof KEYS / sizeof KEYS[0])

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

static const Key *find_key(const char *name) {
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(KEYS[i].name, name) == 0) return &KEYS[i];
    return NULL;
}

static const char *nearest_key(const char *name) {
    int best = 1 << 30;
    const char *b = NULL;
    for (int i = 0; i < NKEYS; i++) {
        int d = vil_edit_distance(name, KEYS[i].name);
        if (d < best) best = d, b = KEYS[i].name;
    }
    return best <= 4 ? b : NULL;
}

int vil_config_set(VilConfig *c, const char *key, const char *value) {
    const Key *k = find_key(key);
    if (!k) {
        const char *s = nearest_key(key);
        if (s) vil_error("unknown config key '%s' (did you mean '%s'?)", key, s);
        else vil_error("unknown config key '%s'", key);
        return -1;
    }
    char *dst = (char *)c + k->offset;
    if (k->type == K_INT) {
        long v;
        if (vil_parse_int(value, &v) != 0 || v < 0 || v > 1000000000L) {
            vil_error("config key '%s' wants a non-negative integer, got '%s'", key, value);
            return -1;
        }
        *(int *)dst = (int)v;
    } else if (k->type == K_FLOAT) {
        double v;
        if (vil_parse_float(value, &v) != 0) {
            vil_error("config key '%s' wants a number, got '%s'", key, value);
            return -1;
        }
        *(float *)dst = (float)v;
    } else {
        if (strlen(value) >= k->size) {
            vil_error("config key '%s': value '%s' is longer than %zu characters", key, value,
                      k->size - 1);
            return -1;
        }
        strcpy(dst, value);
    }
    return 0;
}

int vil_config_set_kv(VilConfig *c, const char *kv) {
    const char *eq = strchr(kv, '=');
    if (!eq) {
        vil_error("expected key=value, got '%s'", kv);
        return -1;
    }
    char key[64];
    size_t n = (size_t)(eq - kv);
    if (n >= sizeof key) n = sizeof key - 1;
    memcpy(key, kv, n);
    key[n] = 0;
    return vil_config_set(c, key, eq + 1);
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

int vil_config_load(VilConfig *c, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        vil_error("cannot open config '%s': %s", path, vil_errno_str());
        return -1;
    }
    char line[1024];
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *s = trim(line);
        if (!*s) continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            vil_error("%s:%d: expected 'key = value', got '%s'", path, lineno, s);
            rc = -1;
            break;
        }
        *eq = 0;
        char *key = trim(s), *val = trim(eq + 1);
        if (vil_config_set(c, key, val) != 0) {
            vil_error("... in %s:%d", path, lineno);
            rc = -1;
            break;
        }
    }
    fclose(f);
    return rc;
}

int vil_config_finalize(VilConfig *c) {
    if (strcmp(c->arch, "vil") == 0) c->arch_id = VIL_ARCH_VIL;
    else if (strcmp(c->arch, "vim") == 0) c->arch_id = VIL_ARCH_VIM;
    else {
        vil_error("config: arch must be 'vil' or 'vim', got '%s'", c->arch);
        return -1;
    }
    if (strcmp(c->dt_init, "zero") != 0 && strcmp(c->dt_init, "vim") != 0) {
        vil_error("config: dt_init must be 'zero' or 'vim', got '%s'", c->dt_init);
        return -1;
    }
#define NEED(cond, ...)                                                                   \
    if (!(cond)) {                                                                        \
        vil_error("config: " __VA_ARGS__);                                                \
        return -1;                                                                        \
    }
    NEED(c->embed_dim > 0, "embed_dim must be > 0");
    NEED(c->depth > 0, "depth must be > 0");
    NEED(c->d_state > 0 && c->d_state <= 64, "d_state must be in 1..64 (got %d)", c->d_state);
    NEED(c->in_chans == 1 || c->in_chans == 3, "in_chans must be 1 or 3 (got %d)", c->in_chans);
    NEED(c->patch_size > 0 && c->stride > 0, "patch_size and stride must be > 0");
    NEED(c->img_size >= c->patch_size, "img_size %d is smaller than patch_size %d", c->img_size,
         c->patch_size);
    NEED((c->img_size - c->patch_size) % c->stride == 0,
         "(img_size - patch_size) = %d is not a multiple of stride %d",
         c->img_size - c->patch_size, c->stride);
    NEED(c->expand > 0, "expand must be > 0");
    NEED(c->d_conv >= 1 && c->d_conv <= 8, "d_conv must be in 1..8");
    NEED(c->num_classes > 0, "num_classes must be > 0");
    NEED(c->drop_path >= 0 && c->drop_path < 1, "drop_path must be in [0, 1)");
#undef NEED
    if (c->dt_rank == 0) c->dt_rank = (c->embed_dim + 15) / 16;
    c->d_inner = c->expand * c->embed_dim;
    c->grid = (c->img_size - c->patch_size) / c->stride + 1;
    c->n_patches = c->grid * c->grid;
    c->seq_len = c->n_patches + 1;
    c->cls_pos = c->n_patches / 2;
    return 0;
}

void vil_config_print(const VilConfig *c, FILE *f) {
    for (int i = 0; i < NKEYS; i++) {
        const Key *k = &KEYS[i];
        const char *p = (const char *)c + k->offset;
        if (k->type == K_INT) fprintf(f, "%-12s = %d\n", k->name, *(const int *)p);
        else if (k->type == K_FLOAT) fprintf(f, "%-12s = %g\n", k->name, *(const float *)p);
        else fprintf(f, "%-12s = %s\n", k->name, p);
    }
}

char *vil_config_to_json(const VilConfig *c) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; i < NKEYS; i++) {
        const Key *k = &KEYS[i];
        const char *p = (const char *)c + k->offset;
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

int vil_config_from_json(VilConfig *c, const char *json) {
    cJSON *o = cJSON_Parse(json);
    if (!o || !cJSON_IsObject(o)) {
        vil_error("model config metadata is not a JSON object");
        cJSON_Delete(o);
        return -1;
    }
    int rc = 0;
    cJSON *it;
    cJSON_ArrayForEach(it, o) {
        char buf[64];
        if (cJSON_IsString(it)) snprintf(buf, sizeof buf, "%s", it->valuestring);
        else if (cJSON_IsNumber(it)) {
            const Key *k = find_key(it->string);
            if (k && k->type == K_INT) snprintf(buf, sizeof buf, "%d", (int)it->valuedouble);
            else snprintf(buf, sizeof buf, "%.9g", it->valuedouble);
        } else {
            vil_error("model config metadata: key '%s' has a value of the wrong type", it->string);
            rc = -1;
            break;
        }
        if (vil_config_set(c, it->string, buf) != 0) {
            rc = -1;
            break;
        }
    }
    cJSON_Delete(o);
    return rc;
}
