/* cfgfile.h: key tables behind every configuration struct (the model's in vil/config.c, the
 * training run's in train/train_config.c): one table per struct drives parsing of cfg files
 * ("key = value" lines, # comments, one value per key), --set overrides, printing and the JSON
 * form stored in checkpoint metadata. Values are checked whole against each key's range; an
 * unknown key is an error with the nearest key of any table suggested. Return codes: 0, -1 (a
 * file that cannot be read) or VIL_EUSAGE (what it says is wrong), each reported. */
#ifndef VIL_CFGFILE_H
#define VIL_CFGFILE_H

#include <stddef.h>
#include <stdio.h>

typedef enum { VIL_KEY_INT, VIL_KEY_FLOAT, VIL_KEY_STR } VilKeyType;
typedef struct {
    const char *name;
    VilKeyType type;
    size_t offset;  /* of the field in its struct */
    size_t size;    /* strings: the field's size */
    double lo, hi;  /* numbers: the values any run can take (finalize adds the relations) */
    const char *help;
} VilKey;

/* Table entries for a field f of struct S */
#define VIL_KEY_I(S, f, lo, hi, h) {#f, VIL_KEY_INT, offsetof(S, f), 0, lo, hi, h}
#define VIL_KEY_F(S, f, lo, hi, h) {#f, VIL_KEY_FLOAT, offsetof(S, f), 0, lo, hi, h}
#define VIL_KEY_S(S, f, h) {#f, VIL_KEY_STR, offsetof(S, f), sizeof(((S *)0)->f), 0, 0, h}

typedef struct {
    const VilKey *keys;
    int n;
} VilKeyTable;

/* A table bound to the struct its keys write into. */
typedef struct {
    const VilKeyTable *table;
    void *base;
} VilKeyTarget;

/* Set `key` in whichever target's table holds it. */
int vil_keys_set(const VilKeyTarget *t, int nt, const char *key, const char *value);
/* The same from "key=value". */
int vil_keys_set_kv(const VilKeyTarget *t, int nt, const char *kv);
/* Read a cfg file into the targets. */
int vil_keys_load(const VilKeyTarget *t, int nt, const char *path);
/* "key = value" lines (a loadable cfg), names padded to width. */
void vil_keys_print(const VilKeyTable *t, const void *base, int width, FILE *f);
/* A JSON object of every key (malloc'd), and its reading back into one target. */
char *vil_keys_to_json(const VilKeyTable *t, const void *base);
int vil_keys_from_json(const VilKeyTarget *t, const char *json, const char *what);
/* The key of this name in a table, or NULL. */
const VilKey *vil_keys_find(const VilKeyTable *t, const char *name);

#endif
