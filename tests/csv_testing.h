/* csv_testing.h: a CSV reader for the tests of the files vil writes (RFC 4180: quoted fields,
 * doubled quotes; every row ends with a newline and has the header's column count). Written
 * here from the RFC, not with vil's writer, so a test reads what a spreadsheet would. */
#ifndef VIL_TESTS_CSV_TESTING_H
#define VIL_TESTS_CSV_TESTING_H

#include <stdlib.h>
#include <string.h>

typedef struct {
    char **f; /* fields of all rows, row-major */
    int rows, cols;
} Csv;

static inline int csv_parse(const char *s, Csv *c) {
    memset(c, 0, sizeof *c);
    int cap = 0, n = 0, cols_here = 0;
    size_t len = strlen(s);
    char *buf = malloc(len + 1);
    for (const char *p = s; *p;) {
        size_t o = 0;
        if (*p == '"') {
            for (p++; *p && !(p[0] == '"' && p[1] != '"'); p++) {
                if (p[0] == '"') p++;
                buf[o++] = *p;
            }
            if (*p != '"') break;
            p++;
        } else {
            while (*p && *p != ',' && *p != '\n') buf[o++] = *p++;
        }
        buf[o] = 0;
        if (n == cap) c->f = realloc(c->f, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *c->f);
        c->f[n++] = strdup(buf);
        cols_here++;
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p != '\n') break; /* every row ends with a newline */
        p++;
        if (c->rows == 0) c->cols = cols_here;
        if (cols_here != c->cols) break;
        c->rows++, cols_here = 0;
    }
    free(buf);
    return n == c->rows * c->cols && c->rows > 0 ? 0 : -1;
}

static inline const char *csv_at(const Csv *c, int row, const char *col) {
    for (int j = 0; j < c->cols; j++)
        if (strcmp(c->f[j], col) == 0) return c->f[(size_t)row * c->cols + j];
    return NULL;
}

static inline void csv_free(Csv *c) {
    for (int i = 0; i < c->rows * c->cols; i++) free(c->f[i]);
    free(c->f);
}

#endif
