/* config.c: the model configuration: its key table (cfgfile.h does the parsing, printing and
 * JSON for it), the defaults and the checks that derive the sizes. */
#include "config.h"

#include <string.h>

#include "common.h"
#include "limits.h"

#define KI(f, lo, hi, h) VIL_KEY_I(VilConfig, f, lo, hi, h)
#define KF(f, lo, hi, h) VIL_KEY_F(VilConfig, f, lo, hi, h)
#define KS(f, h) VIL_KEY_S(VilConfig, f, h)
#define KC(f, r, choice, h) VIL_KEY_C(VilConfig, f, r, choice, h)

static const char *dt_init_name(int i) {
    static const char *const NAMES[] = {[VIL_DT_INIT_ZERO] = "zero", [VIL_DT_INIT_VIM] = "vim"};
    return i >= 0 && i < (int)(sizeof NAMES / sizeof NAMES[0]) ? NAMES[i] : NULL;
}
static const VilChoice DT_INIT = {dt_init_name, vil_choice_store_enum};
_Static_assert(sizeof(VilDtInit) == sizeof(int), "vil_choice_store_enum writes an int");

static const char *pos_embed_name(int i) {
    static const char *const NAMES[] = {[VIL_POS_EMBED_LEARNED] = "learned", [VIL_POS_EMBED_NONE] = "none"};
    return i >= 0 && i < (int)(sizeof NAMES / sizeof NAMES[0]) ? NAMES[i] : NULL;
}
static const VilChoice POS_EMBED = {pos_embed_name, vil_choice_store_enum};
_Static_assert(sizeof(VilPosEmbed) == sizeof(int), "vil_choice_store_enum writes an int");
static const char *family_name(int i) {
    static const char *const NAMES[] = {[VIL_FAMILY_VIM] = "vim", [VIL_FAMILY_STREAM] = "stream"};
    return i >= 0 && i < (int)(sizeof NAMES / sizeof NAMES[0]) ? NAMES[i] : NULL;
}
static const VilChoice FAMILY = {family_name, vil_choice_store_enum};
_Static_assert(sizeof(VilFamily) == sizeof(int), "vil_choice_store_enum writes an int");

static const VilKey KEYS[] = {
    KS(name, "model name"),
    KS(arch, "the recurrence, by its arch string in vil/recurrence.c (e.g. vil: Longhorn, vim: Mamba)"),
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
    KC(dt_init, dt_init_kind, DT_INIT, "ViL dt_proj bias init: zero or vim"),
    KC(pos_embed, pos_embed_kind, POS_EMBED, "position embedding: learned, or none (position only from the scan order)"),
    KC(family, family_kind, FAMILY, "the network: vim (ViL/ViM on patches) or stream (causal, a stream of images, a row per token)"),
    KI(stream_len, 1, VIL_MAX_STREAM, "stream: images per training stream"),
    KI(stream_chunk, 0, VIL_MAX_STREAM, "stream: images per forward, the truncated-BPTT chunk (0: stream_len)"),
};
#undef KI
#undef KF
#undef KS
#undef KC
const VilKeyTable vil_model_keys = {KEYS, (int)(sizeof KEYS / sizeof KEYS[0])};


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
    strcpy(c->pos_embed, "learned");
    strcpy(c->family, "vim");
    c->stream_len = 8;
    c->stream_chunk = 0;
    vil_keys_resolve(&vil_model_keys, c);
}

static const VilKeyTarget *model_target(VilConfig *c, VilKeyTarget *t) {
    t->table = &vil_model_keys;
    t->base = c;
    return t;
}

/* A string key's value goes into every checkpoint's metadata (vil.config), which a safetensors
 * file holds as UTF-8 JSON: a value that is not UTF-8 failed the first save, after the training
 * time was spent. Checked where a value comes in (--set, a cfg file), not in finalize, so a
 * run saved before these checks still resumes. */
int vil_key_text_ok(const VilKeyTable *t, const char *key, const char *value, const char *origin) {
    const VilKey *k = vil_keys_find(t, key);
    if (!k || k->type != VIL_KEY_STR) return 0;
    size_t n = strlen(value);
    if (n == 0) {
        vil_error("config key '%s' (%s) is empty: give it a value (%s=VALUE)", key, origin, key);
        return VIL_EUSAGE;
    }
    size_t bad = vil_utf8_invalid_at((const unsigned char *)value, n);
    if (bad != n) {
        char shown[80];
        vil_printable(shown, sizeof shown, value);
        vil_error("config key '%s' (%s): '%s' is not valid UTF-8 (byte %zu), and it goes into the "
                  "checkpoints' metadata: give the value in UTF-8", key, origin, shown, bad);
        return VIL_EUSAGE;
    }
    return 0;
}

int vil_keys_text_ok(const VilKeyTable *t, const void *base, const char *origin) {
    for (int i = 0; i < t->n; i++) {
        const VilKey *k = &t->keys[i];
        if (k->type != VIL_KEY_STR) continue;
        int rc = vil_key_text_ok(t, k->name, (const char *)base + k->offset, origin);
        if (rc) return rc;
    }
    return 0;
}

/* the key of "key=value" (cut at 127 bytes: no key is longer) and its value, or NULL */
const char *vil_kv_split(const char *kv, char *key, size_t cap) {
    const char *eq = strchr(kv, '=');
    if (!eq) return NULL;
    size_t n = (size_t)(eq - kv) < cap ? (size_t)(eq - kv) : cap - 1;
    memcpy(key, kv, n);
    key[n] = 0;
    return eq + 1;
}

int vil_config_set(VilConfig *c, const char *key, const char *value) {
    VilKeyTarget t;
    int rc = vil_key_text_ok(&vil_model_keys, key, value, "--set");
    return rc ? rc : vil_keys_set(model_target(c, &t), 1, key, value);
}

int vil_config_set_kv(VilConfig *c, const char *kv) {
    VilKeyTarget t;
    char key[128];
    const char *v = vil_kv_split(kv, key, sizeof key);
    int rc = v ? vil_key_text_ok(&vil_model_keys, key, v, "--set") : 0;
    return rc ? rc : vil_keys_set_kv(model_target(c, &t), 1, kv);
}

int vil_config_load(VilConfig *c, const char *path) {
    VilKeyTarget t;
    int rc = vil_keys_load(model_target(c, &t), 1, path);
    return rc ? rc : vil_keys_text_ok(&vil_model_keys, c, path);
}

void vil_config_print(const VilConfig *c, FILE *f) { vil_keys_print(&vil_model_keys, c, 12, f); }

char *vil_config_to_json(const VilConfig *c) { return vil_keys_to_json(&vil_model_keys, c); }

int vil_config_from_json(VilConfig *c, const char *json) {
    VilKeyTarget t;
    return vil_keys_from_json(model_target(c, &t), json, "model config");
}

int vil_config_finalize(VilConfig *c) {
    if (vil_recurrence_from_arch(c->arch, &c->rec) != 0) {
        /* the archs of the table (a recurrence of the scan ops alone has none) */
        const char *archs[VIL_REC_COUNT];
        int na = 0;
        for (int r = 0; r < VIL_REC_COUNT; r++)
            if (vil_recurrences[r].arch) archs[na++] = vil_recurrences[r].arch;
        char names[128] = "";
        for (int i = 0; i < na; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'",
                     i == 0 ? "" : i + 1 < na ? ", " : " or ", archs[i]);
        vil_error("config: arch must be %s, got '%s'", names, c->arch);
        return VIL_EUSAGE;
    }
    const VilKey *bad = vil_keys_resolve(&vil_model_keys, c);
    if (bad) {
        char names[128];
        vil_error("config: %s must be %s, got '%s'", bad->name, vil_choice_names(bad->choice, names, sizeof names),
                  (const char *)c + bad->offset);
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
    NEED(c->img_size >= 1 && c->img_size <= VIL_MAX_IMG_SIZE, "img_size must be in 1..%d (got %d)", VIL_MAX_IMG_SIZE, c->img_size);
    NEED(c->expand >= 1 && c->expand <= VIL_MAX_EXPAND, "expand must be in 1..%d (got %d)", VIL_MAX_EXPAND, c->expand);
    NEED(c->d_conv >= 1 && c->d_conv <= VIL_MAX_CONV, "d_conv must be in 1..%d (got %d)", VIL_MAX_CONV, c->d_conv);
    NEED(c->dt_rank >= 0 && c->dt_rank <= VIL_MAX_EMBED_DIM, "dt_rank must be in 0..%d (got %d)", VIL_MAX_EMBED_DIM, c->dt_rank);
    NEED(c->num_classes >= 1 && c->num_classes <= VIL_MAX_CLASSES, "num_classes must be in 1..%d (got %d)", VIL_MAX_CLASSES, c->num_classes);
    NEED(c->drop_path >= 0 && c->drop_path < 1, "drop_path must be in [0, 1)");
    if (c->dt_rank == 0) c->dt_rank = (c->embed_dim + 15) / 16;
    c->d_inner = c->expand * c->embed_dim;
    if (c->family_kind == VIL_FAMILY_STREAM) {
        /* a token is one image row of img_size pixels: the image's side is its own (no patches) */
        NEED(c->in_chans == 1, "family = stream reads gray images (a token is a row of pixels): in_chans must be 1 (got %d)", c->in_chans);
        NEED(c->drop_path == 0, "family = stream has no drop path: drop_path must be 0");
        NEED(c->stream_len >= 1 && c->stream_len <= VIL_MAX_STREAM, "stream_len must be in 1..%d (got %d)", VIL_MAX_STREAM, c->stream_len);
        int chunk = c->stream_chunk ? c->stream_chunk : c->stream_len;
        NEED(chunk >= 1 && c->stream_len % chunk == 0, "stream_chunk %d does not divide stream_len %d: a training stream is whole chunks",
             chunk, c->stream_len);
        NEED((long)chunk * c->img_size <= VIL_MAX_TOKENS, "stream_chunk %d x %d rows = %ld tokens per forward, more than %d: a smaller stream_chunk",
             chunk, c->img_size, (long)chunk * c->img_size, VIL_MAX_TOKENS);
        c->stream_chunk = chunk;
        c->grid = 0;
        c->seq_len = chunk * c->img_size;
        c->n_patches = c->seq_len; /* the tokens the input makes: its rows */
        c->cls_pos = -1;
        c->readouts = chunk;
        c->in_floats = (long)chunk * c->img_size * c->img_size;
        return 0;
    }
    NEED(c->patch_size >= 1 && c->patch_size <= VIL_MAX_PATCH && c->stride >= 1 && c->stride <= VIL_MAX_PATCH,
         "patch_size and stride must be in 1..%d (got %d and %d)", VIL_MAX_PATCH, c->patch_size, c->stride);
    NEED(c->img_size >= c->patch_size, "img_size %d is smaller than patch_size %d", c->img_size,
         c->patch_size);
    NEED((c->img_size - c->patch_size) % c->stride == 0,
         "(img_size - patch_size) = %d is not a multiple of stride %d",
         c->img_size - c->patch_size, c->stride);
    long grid = (c->img_size - c->patch_size) / c->stride + 1;
    NEED(grid * grid + 1 <= VIL_MAX_TOKENS, "%ld x %ld patches + 1 = %ld tokens, more than %d: a larger stride or a smaller img_size",
         grid, grid, grid * grid + 1, VIL_MAX_TOKENS);
#undef NEED
    c->grid = (int)grid;
    c->n_patches = c->grid * c->grid;
    c->seq_len = c->n_patches + 1;
    c->cls_pos = c->n_patches / 2;
    c->readouts = 1;
    c->in_floats = (long)c->in_chans * c->img_size * c->img_size;
    return 0;
}

