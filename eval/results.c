/* results.c: the per-image prediction files and the evaluation summary of results.h, and the
 * one CSV text field every CSV writer of vil uses. Numbers are printed with "%.9g" (a float's
 * probability survives the round trip); text fields go through vil_utf8_lossy, and CSV fields
 * are quoted as RFC 4180 has it, a spreadsheet formula neutralized (vil_csv_field). */
#include "eval/results.h"

#include <cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "vil/common.h"

struct VilResults {
    char *path;
    VilResultsFormat format;
    int k, C, with_label;
    char *const *names;
    char *buf;
    size_t n, cap;
    long rows;
    int *idx;
    double *prob;
};

int vil_results_format(const char *path) {
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash)) return 0;
    if (strcasecmp(dot, ".csv") == 0) return VIL_RESULTS_CSV;
    if (strcasecmp(dot, ".jsonl") == 0) return VIL_RESULTS_JSONL;
    return 0;
}

/* a before b: the larger logit, ties to the lower index, NaN last */
static int ranks_before(const float *l, int a, int b) {
    if (isnan(l[b])) return !isnan(l[a]) || a < b;
    if (isnan(l[a])) return 0;
    return l[a] > l[b] || (l[a] == l[b] && a < b);
}

void vil_topk_probs(const float *logits, int C, int k, int *idx, double *prob) {
    /* insertion into the k best: k is small (5) next to C */
    int n = 0;
    for (int c = 0; c < C; c++) {
        if (n == k && !ranks_before(logits, c, idx[k - 1])) continue;
        int at = n < k ? n++ : k - 1;
        while (at > 0 && ranks_before(logits, c, idx[at - 1])) idx[at] = idx[at - 1], at--;
        idx[at] = c;
    }
    double mx = -INFINITY, sum = 0;
    for (int c = 0; c < C; c++)
        if (logits[c] > mx) mx = logits[c];
    for (int c = 0; c < C; c++) sum += isnan(logits[c]) ? 0 : exp(logits[c] - mx);
    for (int j = 0; j < k; j++) prob[j] = isnan(logits[idx[j]]) ? NAN : exp(logits[idx[j]] - mx) / sum;
}

char *vil_utf8_lossy(const char *s) {
    size_t n = strlen(s), o = 0;
    char *d = vil_malloc(3 * n + 1);
    const unsigned char *p = (const unsigned char *)s;
    while (n > 0) {
        size_t ok = vil_utf8_invalid_at(p, n);
        memcpy(d + o, p, ok);
        o += ok;
        if (ok == n) break;
        memcpy(d + o, "\xef\xbf\xbd", 3);
        o += 3;
        p += ok + 1;
        n -= ok + 1;
    }
    d[o] = 0;
    return d;
}

static void put_bytes(VilResults *r, const char *s, size_t len) {
    if (r->n + len + 1 > r->cap) {
        while (r->n + len + 1 > r->cap) r->cap = r->cap ? 2 * r->cap : 1 << 16;
        r->buf = vil_realloc(r->buf, r->cap);
    }
    memcpy(r->buf + r->n, s, len);
    r->n += len;
    r->buf[r->n] = 0;
}

__attribute__((format(printf, 2, 3))) static void put(VilResults *r, const char *fmt, ...) {
    char s[256];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(s, sizeof s, fmt, ap);
    va_end(ap);
    put_bytes(r, s, len < 0 ? 0 : (size_t)len < sizeof s ? (size_t)len : sizeof s - 1);
}

char *vil_csv_field(const char *s) {
    char *u = vil_utf8_lossy(s ? s : "");
    /* a formula to Excel, LibreOffice and Google Sheets (OWASP, "CSV Injection") */
    int formula = u[0] && strchr("=+-@\t\r", u[0]) != NULL;
    if (!formula && !u[strcspn(u, ",\"\r\n")]) return u;
    size_t n = strlen(u), o = 0;
    char *q = vil_malloc(2 * n + 4);
    q[o++] = '"';
    if (formula) q[o++] = '\'';
    for (const char *p = u; *p; p++) {
        if (*p == '"') q[o++] = '"';
        q[o++] = *p;
    }
    q[o++] = '"';
    q[o] = 0;
    free(u);
    return q;
}

/* a CSV field (vil_csv_field), after a comma unless first */
static void put_field(VilResults *r, const char *s, int first) {
    if (!first) put_bytes(r, ",", 1);
    char *f = vil_csv_field(s);
    put_bytes(r, f, strlen(f));
    free(f);
}

VilResults *vil_results_open(const char *path, VilResultsFormat format, int topk, int C,
                             char *const *names, int with_label) {
    if ((format != VIL_RESULTS_CSV && format != VIL_RESULTS_JSONL) || topk < 1 || C < 1) {
        vil_error("results file '%s': bad format or sizes", path);
        return NULL;
    }
    VilResults *r = vil_calloc(1, sizeof *r);
    r->path = vil_strdup(path);
    r->format = format;
    r->k = topk < C ? topk : C;
    r->C = C;
    r->names = names;
    r->with_label = with_label;
    r->idx = vil_malloc((size_t)r->k * sizeof *r->idx);
    r->prob = vil_malloc((size_t)r->k * sizeof *r->prob);
    if (format == VIL_RESULTS_CSV) {
        put(r, "filename");
        for (int j = 0; j < r->k; j++) put(r, ",label_%d", j);
        for (int j = 0; j < r->k; j++) put(r, ",prob_%d", j);
        for (int j = 0; j < r->k; j++) put(r, ",name_%d", j);
        if (with_label) put(r, ",target,target_name");
        put(r, "\n");
    }
    return r;
}

static const char *class_name(const VilResults *r, int c) {
    return r->names && c >= 0 && c < r->C ? r->names[c] : NULL;
}

static void add_json(VilResults *r, const char *file, int label) {
    cJSON *o = cJSON_CreateObject();
    char *f8 = vil_utf8_lossy(file);
    cJSON_AddStringToObject(o, "file", f8);
    free(f8);
    cJSON *t = cJSON_AddArrayToObject(o, "topk");
    for (int j = 0; j < r->k; j++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "index", r->idx[j]);
        const char *nm = class_name(r, r->idx[j]);
        if (nm) {
            char *n8 = vil_utf8_lossy(nm);
            cJSON_AddStringToObject(e, "name", n8);
            free(n8);
        } else {
            cJSON_AddNullToObject(e, "name");
        }
        cJSON_AddNumberToObject(e, "prob", r->prob[j]);
        cJSON_AddItemToArray(t, e);
    }
    if (r->with_label) {
        cJSON_AddNumberToObject(o, "target", label);
        const char *nm = class_name(r, label);
        if (nm) {
            char *n8 = vil_utf8_lossy(nm);
            cJSON_AddStringToObject(o, "target_name", n8);
            free(n8);
        } else {
            cJSON_AddNullToObject(o, "target_name");
        }
    }
    char *s = cJSON_PrintUnformatted(o);
    put_bytes(r, s, strlen(s));
    put_bytes(r, "\n", 1);
    cJSON_free(s);
    cJSON_Delete(o);
}

void vil_results_add(VilResults *r, const char *file, const float *logits, int label) {
    vil_topk_probs(logits, r->C, r->k, r->idx, r->prob);
    r->rows++;
    if (r->format == VIL_RESULTS_JSONL) {
        add_json(r, file, label);
        return;
    }
    put_field(r, file, 1);
    for (int j = 0; j < r->k; j++) put(r, ",%d", r->idx[j]);
    for (int j = 0; j < r->k; j++) put(r, ",%.9g", r->prob[j]);
    for (int j = 0; j < r->k; j++) put_field(r, class_name(r, r->idx[j]), 0);
    if (r->with_label) {
        put(r, ",%d", label);
        put_field(r, class_name(r, label), 0);
    }
    put(r, "\n");
}

long vil_results_rows(const VilResults *r) { return r->rows; }

void vil_results_free(VilResults *r) {
    if (!r) return;
    free(r->path);
    free(r->buf);
    free(r->idx);
    free(r->prob);
    free(r);
}

int vil_results_close(VilResults *r) {
    int rc = vil_write_file_atomic(r->path, r->buf ? r->buf : "", r->n) ? -1 : 0;
    vil_results_free(r);
    return rc;
}

/* ---- the evaluation summary (timm validate.py's --results-file) ---- */

int vil_summary_format(const char *path) {
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash)) return 0;
    if (strcasecmp(dot, ".csv") == 0) return VIL_RESULTS_CSV;
    if (strcasecmp(dot, ".json") == 0) return VIL_RESULTS_JSON;
    return 0;
}

/* x rounded to d decimals, as Python's round(x, d) gives it for these magnitudes */
static double round_to(double x, int d) {
    double p = pow(10.0, d);
    return isfinite(x) ? round(x * p) / p : x;
}

int vil_summary_write(const char *path, const VilEvalSummary *s) {
    char crop[32];
    snprintf(crop, sizeof crop, "%g", s->crop_pct); /* a float's 0.9, not 0.899999976 */
    struct {
        const char *key;
        double v;
    } num[] = {
        {"top1", round_to(s->top1, 4)},
        {"top1_err", round_to(100.0 - s->top1, 4)},
        {"top5", round_to(s->top5, 4)},
        {"top5_err", round_to(100.0 - s->top5, 4)},
        {"param_count", round_to((double)s->params / 1e6, 2)},
        {"img_size", s->img_size},
        {"crop_pct", strtod(crop, NULL)},
    };
    enum { NNUM = sizeof num / sizeof num[0] };
    const char *interp = s->interpolation ? s->interpolation : "";
    int format = vil_summary_format(path), rc;
    if (format == VIL_RESULTS_CSV) {
        VilResults r = {0};
        put(&r, "model");
        for (int i = 0; i < NNUM; i++) put(&r, ",%s", num[i].key);
        put(&r, ",interpolation,loss,count\n");
        put_field(&r, s->model, 1);
        for (int i = 0; i < NNUM; i++) put(&r, ",%.12g", num[i].v);
        put_field(&r, interp, 0);
        put(&r, ",%.12g,%ld\n", round_to(s->loss, 6), s->count);
        rc = vil_write_file_atomic(path, r.buf, r.n) ? -1 : 0;
        free(r.buf);
        return rc;
    }
    if (format != VIL_RESULTS_JSON) {
        vil_error("summary file '%s': the name must end in .csv or .json", path);
        return VIL_EUSAGE;
    }
    cJSON *o = cJSON_CreateObject();
    char *m8 = vil_utf8_lossy(s->model ? s->model : "");
    cJSON_AddStringToObject(o, "model", m8);
    free(m8);
    for (int i = 0; i < NNUM; i++) cJSON_AddNumberToObject(o, num[i].key, num[i].v);
    cJSON_AddStringToObject(o, "interpolation", interp);
    cJSON_AddNumberToObject(o, "loss", round_to(s->loss, 6));
    cJSON_AddNumberToObject(o, "count", (double)s->count);
    char *text = cJSON_Print(o);
    rc = text ? (vil_write_file_atomic(path, text, strlen(text)) ? -1 : 0) : -1;
    if (!text) vil_error("summary file: out of memory");
    cJSON_free(text);
    cJSON_Delete(o);
    return rc;
}

void vil_positions_span(const VilEvalPositions *p, int lo, int hi, long *images, double *top1, double *loss) {
    long n = 0, ok = 0;
    double l = 0;
    for (int i = (lo > 1 ? lo : 1) - 1; i < hi && i < p->n; i++) n += p->count[i], ok += p->top1[i], l += p->loss[i];
    *images = n;
    *top1 = n ? 100.0 * ok / n : 0;
    *loss = n ? l / n : 0;
}

/* "images", "top1", "loss" of positions lo .. hi added to o; o */
static cJSON *span_json(cJSON *o, const VilEvalPositions *p, int lo, int hi) {
    long n;
    double t, l;
    vil_positions_span(p, lo, hi, &n, &t, &l);
    cJSON_AddNumberToObject(o, "images", (double)n);
    cJSON_AddNumberToObject(o, "top1", round_to(t, 4));
    cJSON_AddNumberToObject(o, "loss", round_to(l, 6));
    return o;
}

int vil_positions_write(const char *path, const char *model, const VilEvalPositions *p, int trained) {
    int format = vil_summary_format(path), rc;
    if (format == VIL_RESULTS_CSV) {
        VilResults r = {0};
        put(&r, "position,images,top1,loss,in_length\n");
        for (int i = 0; i < p->n; i++) {
            long n;
            double t, l;
            vil_positions_span(p, i + 1, i + 1, &n, &t, &l);
            put(&r, "%d,%ld,%.12g,%.12g,%d\n", i + 1, n, round_to(t, 4), round_to(l, 6), i < trained);
        }
        rc = vil_write_file_atomic(path, r.buf, r.n) ? -1 : 0;
        free(r.buf);
        return rc;
    }
    if (format != VIL_RESULTS_JSON) {
        vil_error("positions file '%s': the name must end in .csv or .json", path);
        return VIL_EUSAGE;
    }
    cJSON *o = cJSON_CreateObject(), *a = cJSON_CreateArray();
    char *m8 = vil_utf8_lossy(model ? model : "");
    cJSON_AddStringToObject(o, "model", m8);
    free(m8);
    cJSON_AddNumberToObject(o, "trained_length", trained);
    cJSON_AddItemToObject(o, "in_length", span_json(cJSON_CreateObject(), p, 1, trained));
    cJSON_AddItemToObject(o, "beyond", span_json(cJSON_CreateObject(), p, trained + 1, p->n));
    for (int i = 0; i < p->n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "position", i + 1);
        cJSON_AddItemToArray(a, span_json(e, p, i + 1, i + 1));
    }
    cJSON_AddItemToObject(o, "positions", a);
    char *text = cJSON_Print(o);
    rc = text ? (vil_write_file_atomic(path, text, strlen(text)) ? -1 : 0) : -1;
    if (!text) vil_error("positions file: out of memory");
    cJSON_free(text);
    cJSON_Delete(o);
    return rc;
}
