/* config.h: the model configuration (ViL or ViM, sizes; doc/models.md) and its keys in cfg
 * files (vil/cfgfile.h: "key = value" lines with # comments; an unknown key is an error with the
 * nearest valid key suggested; every key can be overridden with --set key=value). The training
 * run's keys are train/train_config.h's; a cfg file may hold both, read together there. */
#ifndef VIL_CONFIG_H
#define VIL_CONFIG_H

#include <stdio.h>

#include "cfgfile.h"
#include "recurrence.h"

/* dt_init: ViL's dt_proj bias init ("zero": the official Longhorn's; "vim": Mamba's draw) */
typedef enum { VIL_DT_INIT_ZERO, VIL_DT_INIT_VIM } VilDtInit;
/* pos_embed: a learned position embedding added to the tokens (the official models), or none, so
 * that the scan's order is the model's only notion of position (doc/models.md) */
typedef enum { VIL_POS_EMBED_LEARNED, VIL_POS_EMBED_NONE } VilPosEmbed;
/* family: the network (vil/net.h): Vision Mamba's (patches, a middle class token, both
 * directions; vil/vim.c), or a causal model reading a stream of images a row per token with a
 * readout at each image's last row (vil/stream.c; doc/models.md "The stream family") */
typedef enum { VIL_FAMILY_VIM, VIL_FAMILY_STREAM } VilFamily;

typedef struct {
    /* from the file */
    char name[64];     /* free-form model name, e.g. vil_tiny */
    char arch[8];      /* the recurrence, by its arch string (vil/recurrence.c): e.g. "vil", "vim" */
    int img_size;      /* 224 */
    int patch_size;    /* P = 16 */
    int stride;        /* S = P, or 8 for ViM's stride-8 variant */
    int in_chans;      /* 3, or 1 for grayscale */
    int embed_dim;     /* D */
    int depth;         /* 24 */
    int d_state;       /* N = 16 */
    int dt_rank;       /* R; 0 means ceil(D / 16) */
    int expand;        /* E = expand * D, 2 */
    int d_conv;        /* depthwise conv width, 4 */
    int num_classes;
    float drop_path;   /* stochastic depth rate (training only) */
    char dt_init[8];   /* ViL dt_proj bias init: "zero" (official Longhorn) or "vim" */
    VilDtInit dt_init_kind; /* the choice dt_init names (cfgfile.h VilChoice): read this, not the text */
    char pos_embed[8]; /* "learned" or "none" (no pos_embed tensor) */
    VilPosEmbed pos_embed_kind; /* the choice pos_embed names */
    char family[8];    /* "vim" or "stream" */
    VilFamily family_kind; /* the choice family names */
    int stream_len;    /* stream: images per training stream (K = 8) */
    int stream_chunk;  /* stream: images per forward, the chunk of truncated BPTT (0: stream_len) */
    /* derived by vil_config_finalize */
    VilRecurrence rec; /* named by arch */
    int d_inner;       /* E */
    int grid;          /* G = (img - P) / S + 1 */
    int n_patches;     /* M = G * G */
    int seq_len;       /* L = M + 1 */
    int cls_pos;       /* t = M / 2; -1: no class token (stream) */
    int readouts;      /* outputs per sample: 1, or (stream) the chunk's images */
    long in_floats;    /* input floats per sample: C H W, or (stream) chunk C H W */
} VilConfig;

/* Defaults: ViL-Tiny at 224, 1000 classes. */
void vil_config_default(VilConfig *c);
/* The model keys (the table the functions below use). */
extern const VilKeyTable vil_model_keys;

/* Read a cfg file of model keys over *c (a training key is an error here: files that hold both
 * are read with vil_train_config_load). 0, or -1 / VIL_EUSAGE reported (file:line: what). */
int vil_config_load(VilConfig *c, const char *path);
/* Set one key from a string ("embed_dim", "192"). Returns 0, or -1 with the error reported. */
int vil_config_set(VilConfig *c, const char *key, const char *value);
/* Apply "key=value". */
int vil_config_set_kv(VilConfig *c, const char *kv);
/* A string key's value as it enters a config (from origin: "--set", a cfg file's path): not
 * empty and valid UTF-8 (it goes into checkpoint metadata). 0, or VIL_EUSAGE reported; keys of
 * other types or of no table of t pass. vil_keys_text_ok checks every string key of base. */
int vil_key_text_ok(const VilKeyTable *t, const char *key, const char *value, const char *origin);
int vil_keys_text_ok(const VilKeyTable *t, const void *base, const char *origin);
/* "key=value": the key copied into key (cap bytes), the value returned; NULL without '=' */
const char *vil_kv_split(const char *kv, char *key, size_t cap);
/* Resolve the choice keys (dt_init_kind), validate and compute the derived sizes. Returns 0, or
 * VIL_EUSAGE with the error reported. */
int vil_config_finalize(VilConfig *c);
/* Write "key = value" lines (a loadable cfg). */
void vil_config_print(const VilConfig *c, FILE *f);
/* Serialize as a JSON object string (malloc'd) and parse it back (for checkpoint metadata). */
char *vil_config_to_json(const VilConfig *c);
int vil_config_from_json(VilConfig *c, const char *json);

#endif
