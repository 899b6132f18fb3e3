/* cfgfile.c: the key-table machinery of cfgfile.h: cfg files, key=value overrides, printing
 * and the JSON form, for any struct described by a VilKey table. */
#include "cfgfile.h"

#include <cJSON.h>
#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "limits.h"

const VilKey *vil_keys_find(const VilKeyTable *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->keys[i].name, name) == 0) return &t->keys[i];
    return NULL;
}

void vil_choice_store_enum(void *field, int i) { *(int *)field = i; }

int vil_choice_find(const VilChoice *c, const char *name) {
    const char *s;
    for (int i = 0; (s = c->name(i)) != NULL; i++)
        if (strcmp(s, name) == 0) return i;
    return -1;
}

const char *vil_choice_names(const VilChoice *c, char *buf, size_t n) {
    int count = 0;
    while (c->name(count)) count++;
    size_t len = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < count && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s'%s'", i == 0 ? "" : i + 1 < count ? ", " : " or ",
                                c->name(i));
    return buf;
}

const VilKey *vil_keys_resolve(const VilKeyTable *t, void *base) {
    const VilKey *bad = NULL;
    for (int i = 0; i < t->n; i++) {
        const VilKey *k = &t->keys[i];
        if (!k->choice) continue;
        int c = vil_choice_find(k->choice, (const char *)base + k->offset);
        k->choice->store((char *)base + k->resolved, c);
        if (c < 0 && !bad) bad = k;
    }
    return bad;
}

/* the key and its target, over every table given */
static const VilKey *find(const VilKeyTarget *t, int nt, const char *name, void **base) {
    for (int i = 0; i < nt; i++) {
        const VilKey *k = vil_keys_find(t[i].table, name);
        if (k) {
            if (base) *base = t[i].base;
            return k;
        }
    }
    return NULL;
}

static void report_unknown(const VilKeyTarget *t, int nt, const char *key) {
    int best = 1 << 30;
    const char *b = NULL;
    for (int j = 0; j < nt; j++)
        for (int i = 0; i < t[j].table->n; i++) {
            int d = vil_edit_distance(key, t[j].table->keys[i].name);
            if (d < best) best = d, b = t[j].table->keys[i].name;
        }
    if (best <= 4) vil_error("unknown config key '%s' (did you mean '%s'?)", key, b);
    else vil_error("unknown config key '%s'", key);
}

/* Values come from config files, the command line and checkpoint metadata: each is checked
 * whole (no silent truncation or coercion) against the key's range. A value no run could take
 * is a usage error (VIL_EUSAGE). */
static int set_value(const VilKey *k, void *base, const char *value) {
    char *dst = (char *)base + k->offset;
    char shown[80];
    vil_printable(shown, sizeof shown, value);
    if (k->type == VIL_KEY_INT) {
        long v;
        if (vil_parse_int(value, &v) != 0 || v < k->lo || v > k->hi) {
            vil_error("config key '%s' wants an integer in %.0f..%.0f, got '%s'", k->name, k->lo, k->hi, shown);
            return VIL_EUSAGE;
        }
        *(int *)dst = (int)v;
    } else if (k->type == VIL_KEY_FLOAT) {
        double v = 0.0;
        int prc = vil_parse_float(value, &v);
        /* a nonzero number the key's float cannot hold (below ~1.4e-45, a double's 1e-400 too):
         * it would be 0, which for some keys means "off" or "forever"; one a float holds as a
         * subnormal (1e-40) is taken as that float */
        int to_zero = prc == -3 || (prc == 0 && v != 0.0 && (float)v == 0.0f);
        if (to_zero && k->lo <= 0.0 && k->hi >= 0.0) {
            vil_error("config key '%s': '%s' is too small for a float (it would be 0; the smallest is "
                      "%g): give 0 for 0", k->name, shown, (double)FLT_TRUE_MIN);
            return VIL_EUSAGE;
        }
        if (prc != 0 || v < k->lo || v > k->hi) {
            vil_error("config key '%s' wants a number in [%g, %g], got '%s'", k->name, k->lo, k->hi, shown);
            return VIL_EUSAGE;
        }
        *(float *)dst = (float)v;
    } else {
        size_t n = strlen(value);
        if (n >= k->size) {
            vil_error("config key '%s': value '%s' is longer than %zu characters", k->name, shown,
                      k->size - 1);
            return VIL_EUSAGE;
        }
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)value[i] < 0x20 || value[i] == 0x7f) {
                vil_error("config key '%s': value '%s' holds a control character", k->name, shown);
                return VIL_EUSAGE;
            }
        strcpy(dst, value);
        if (k->choice) k->choice->store((char *)base + k->resolved, vil_choice_find(k->choice, value));
    }
    return 0;
}

int vil_keys_set(const VilKeyTarget *t, int nt, const char *key, const char *value) {
    void *base;
    const VilKey *k = find(t, nt, key, &base);
    if (k) return set_value(k, base, value);
    report_unknown(t, nt, key);
    return VIL_EUSAGE;
}

int vil_keys_set_kv(const VilKeyTarget *t, int nt, const char *kv) {
    const char *eq = strchr(kv, '=');
    if (!eq) {
        vil_error("expected key=value, got '%s'", kv);
        return VIL_EUSAGE;
    }
    char key[64];
    size_t n = (size_t)(eq - kv);
    if (n >= sizeof key) {
        vil_error("no config key is %zu characters long: '%.*s'", n, (int)(sizeof key - 1), kv);
        return VIL_EUSAGE;
    }
    memcpy(key, kv, n);
    key[n] = 0;
    return vil_keys_set(t, nt, key, eq + 1);
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

int vil_keys_load(const VilKeyTarget *t, int nt, const char *path) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        vil_error("config '%s' is not a file but a folder: give a cfg file such as configs/vil_tiny.cfg", path);
        return -1;
    }
    /* a FIFO or a device is refused at once, not waited on */
    VilErrCapture why;
    vil_error_capture(&why);
    FILE *f = vil_fopen_regular(path, "r");
    vil_error_release(&why);
    if (!f) {
        vil_error("config: %s: give a cfg file such as configs/vil_tiny.cfg", why.msg);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, rc = 0;
    /* the line each key was set on, so a repeated key is caught: one value per key per file */
    int set_at[64] = {0};
    const VilKey *seen[64];
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
        const VilKey *k = find(t, nt, key, NULL);
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
        if (vil_keys_set(t, nt, key, val) != 0) {
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

void vil_keys_print(const VilKeyTable *t, const void *base, int width, FILE *f) {
    for (int i = 0; i < t->n; i++) {
        const VilKey *k = &t->keys[i];
        const char *p = (const char *)base + k->offset;
        if (k->type == VIL_KEY_INT) fprintf(f, "%-*s = %d\n", width, k->name, *(const int *)p);
        else if (k->type == VIL_KEY_FLOAT) {
            char num[48];
            vil_fmt_float(num, sizeof num, *(const float *)p);
            fprintf(f, "%-*s = %s\n", width, k->name, num);
        } else {
            fprintf(f, "%-*s = %s\n", width, k->name, p);
        }
    }
}

char *vil_keys_to_json(const VilKeyTable *t, const void *base) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; i < t->n; i++) {
        const VilKey *k = &t->keys[i];
        const char *p = (const char *)base + k->offset;
        if (k->type == VIL_KEY_INT) cJSON_AddNumberToObject(o, k->name, *(const int *)p);
        else if (k->type == VIL_KEY_FLOAT) cJSON_AddNumberToObject(o, k->name, vil_float_clean(*(const float *)p));
        else cJSON_AddStringToObject(o, k->name, p);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    /* invariant: only out of memory fails here, for a config's few dozen keys: fixed bookkeeping
     * (vil/common.h), as vil_strdup's */
    if (!s) VIL_FATAL("cJSON_PrintUnformatted failed");
    char *r = vil_strdup(s);
    cJSON_free(s);
    return r;
}

int vil_keys_from_json(const VilKeyTarget *t, const char *json, const char *what) {
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
        const VilKey *k = vil_keys_find(t->table, it->string);
        if (cJSON_IsString(it)) buf = it->valuestring;
        else if (cJSON_IsNumber(it)) {
            double d = it->valuedouble;
            /* the range first: a cast of a double outside long long's range is undefined */
            if (k && k->type == VIL_KEY_INT && fabs(d) < 1e15 && d == (double)(long long)d)
                snprintf(num, sizeof num, "%lld", (long long)d);
            else snprintf(num, sizeof num, "%.17g", d);
        } else {
            vil_error("%s metadata: key '%s' has a value of the wrong type", what, it->string);
            rc = VIL_EUSAGE;
            break;
        }
        if ((rc = vil_keys_set(t, 1, it->string, buf)) != 0) break;
    }
    cJSON_Delete(o);
    return rc;
}
