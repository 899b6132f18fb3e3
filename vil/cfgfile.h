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

/* A choice key: a text key whose value is one of a fixed list of names. The config keeps the text
 * (it is printed and stored as given) and, beside it, the choice it names: an enum or a table
 * entry, written whenever the text is set (a cfg file, --set, JSON) and again by the config's
 * finalize, which refuses a text that names none. Code outside the config reads that field and
 * never compares the text. */
typedef struct {
    const char *(*name)(int i);        /* the name of choice i; NULL past the last */
    void (*store)(void *field, int i); /* choice i into the field; -1: the text names none */
} VilChoice;

typedef struct {
    const char *name;
    VilKeyType type;
    size_t offset;  /* of the field in its struct */
    size_t size;    /* strings: the field's size */
    double lo, hi;  /* numbers: the values any run can take (finalize adds the relations) */
    const char *help;
    const VilChoice *choice; /* a choice key (VIL_KEY_STR): its names, or NULL */
    size_t resolved;         /* a choice key: the offset of the field its choice goes into */
} VilKey;

/* Table entries for a field f of struct S; a choice key's resolved field is r */
#define VIL_KEY_I(S, f, lo, hi, h) {#f, VIL_KEY_INT, offsetof(S, f), 0, lo, hi, h, NULL, 0}
#define VIL_KEY_F(S, f, lo, hi, h) {#f, VIL_KEY_FLOAT, offsetof(S, f), 0, lo, hi, h, NULL, 0}
#define VIL_KEY_S(S, f, h) {#f, VIL_KEY_STR, offsetof(S, f), sizeof(((S *)0)->f), 0, 0, h, NULL, 0}
#define VIL_KEY_C(S, f, r, choice, h)                                                          \
    {#f, VIL_KEY_STR, offsetof(S, f), sizeof(((S *)0)->f), 0, 0, h, &(choice), offsetof(S, r)}

typedef struct {
    const VilKey *keys;
    int n;
} VilKeyTable;

/* store for a choice whose field is an int-sized enum numbered as the names (-1: none) */
void vil_choice_store_enum(void *field, int i);
/* The choice a name is, or -1. */
int vil_choice_find(const VilChoice *c, const char *name);
/* The names of c as "'a', 'b' or 'c'" into buf (cut to n); returns buf. */
const char *vil_choice_names(const VilChoice *c, char *buf, size_t n);
/* Resolve every choice key of t in the struct at base from its text. The first key whose text
 * names no choice (its field then says none), or NULL. */
const VilKey *vil_keys_resolve(const VilKeyTable *t, void *base);

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
