/* names.c: readable class names: the names-file reader (ImageNet's imagenet_classes.tsv and
 * simpler forms) and the built-in Fashion-MNIST names. Names end up in checkpoint metadata
 * and in `classify` output, so a mismatch between folders and the file is warned about. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/dataset.h"
#include "vil/common.h"

const char *const vil_fashion_mnist_names[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress",
                                                 "Coat",        "Sandal",  "Shirt",    "Sneaker",
                                                 "Bag",         "Ankle boot"};

typedef struct {
    long index; /* -1: by line order */
    char *id;   /* wnid or NULL */
    char *name;
} NameRow;

static char *strip(char *s) {
    while (*s && isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

static void free_rows(NameRow *rows, int nrows) {
    for (int k = 0; k < nrows; k++) {
        free(rows[k].id);
        free(rows[k].name);
    }
    free(rows);
}

/* The rows of a names file (see dataset.h for the forms). 0, or -1 (vil_error). */
static int read_rows(const char *path, NameRow **out, int *nout) {
    *out = NULL;
    *nout = 0;
    /* a FIFO or a folder is refused at once, not waited on */
    VilErrCapture why;
    vil_error_capture(&why);
    FILE *f = vil_fopen_regular(path, "r");
    vil_error_release(&why);
    if (!f) {
        vil_error("class-names file: %s", why.msg);
        return -1;
    }
    NameRow *rows = NULL;
    int nrows = 0, cap = 0, rc = 0;
    long lineno = 0;
    char *line = NULL;
    size_t lcap = 0;
    while (getline(&line, &lcap, f) >= 0) {
        lineno++;
        char *s = strip(line);
        if (!*s || *s == '#') continue;
        char *fields[3] = {s, NULL, NULL};
        int nf = 1;
        for (char *p = s; *p && nf < 3; p++)
            if (*p == '\t') {
                *p = 0;
                fields[nf++] = p + 1;
            }
        NameRow r = {-1, NULL, NULL};
        long v;
        if (nf >= 2 && vil_parse_int(strip(fields[0]), &v) == 0) {
            if (v < 0 || v > 10000000) {
                vil_error("%s:%ld: bad class index '%s'", path, lineno, fields[0]);
                rc = -1;
                break;
            }
            r.index = v;
            if (nf == 3) r.id = vil_strdup(strip(fields[1]));
            r.name = vil_strdup(strip(fields[nf - 1]));
        } else if (nf >= 2) {
            r.id = vil_strdup(strip(fields[0]));
            r.name = vil_strdup(strip(fields[nf - 1]));
        } else {
            r.name = vil_strdup(s);
        }
        if (nrows == cap) {
            cap = cap ? cap * 2 : 1024;
            rows = vil_realloc(rows, (size_t)cap * sizeof *rows);
        }
        rows[nrows++] = r;
    }
    free(line);
    fclose(f);
    if (rc == 0 && nrows == 0) {
        vil_error("class-names file '%s' holds no names", path);
        rc = -1;
    }
    if (rc != 0) {
        free_rows(rows, nrows);
        return -1;
    }
    *out = rows;
    *nout = nrows;
    return 0;
}

int vil_names_read(const char *path, int n, char ***names) {
    *names = NULL;
    NameRow *rows;
    int nrows;
    if (read_rows(path, &rows, &nrows) != 0) return -1;
    char **out = vil_calloc((size_t)n, sizeof(char *));
    int rc = 0;
    for (int k = 0; k < nrows && rc == 0; k++) {
        long idx = rows[k].index >= 0 ? rows[k].index : k;
        if (idx >= n || out[idx]) {
            vil_error("class-names file '%s': %s class %ld (the model has %d classes)",
                      path, idx >= n ? "no" : "a second name for", idx, n);
            rc = -1;
        } else {
            out[idx] = vil_strdup(rows[k].name);
        }
    }
    for (int c = 0; c < n && rc == 0; c++)
        if (!out[c]) {
            vil_error("class-names file '%s' has no name for class %d of %d", path, c, n);
            rc = -1;
        }
    free_rows(rows, nrows);
    if (rc != 0) {
        for (int c = 0; c < n; c++) free(out[c]);
        free(out);
        return -1;
    }
    *names = out;
    return 0;
}

int vil_dataset_load_names(VilDataset *ds, const char *path) {
    NameRow *rows;
    int nrows, rc = 0;
    if (read_rows(path, &rows, &nrows) != 0) return -1;
    if (rc == 0) {
        /* class folders (and shards' classes.txt ids) are matched by name (wnid) when the file
         * gives ids; else by index */
        int C = vil_dataset_num_classes(ds), by_id = 0;
        int folders = vil_dataset_kind(ds) == VIL_DATA_FOLDER;
        const char *what = folders ? "class folders" : "classes";
        if (folders || vil_dataset_kind(ds) == VIL_DATA_SHARDS)
            for (int k = 0; k < nrows && !by_id; k++)
                if (rows[k].id)
                    for (int c = 0; c < C && !by_id; c++)
                        by_id = strcmp(rows[k].id, vil_dataset_class_id(ds, c)) == 0;
        if (by_id) {
            int unnamed = 0, moved = 0;
            for (int c = 0; c < C; c++) {
                const char *cid = vil_dataset_class_id(ds, c);
                int found = 0;
                for (int k = 0; k < nrows && !found; k++)
                    if (rows[k].id && strcmp(rows[k].id, cid) == 0) {
                        vil_dataset_set_class_name(ds, c, rows[k].name);
                        found = 1;
                        if (rows[k].index >= 0 && rows[k].index != c) moved++;
                    }
                unnamed += !found;
            }
            if (unnamed)
                vil_warn("%d %s of '%s' are not in '%s'; they keep their %s", unnamed, what,
                         vil_dataset_source(ds), path, folders ? "folder names" : "ids");
            if (moved)
                vil_warn(folders ? "%d class folders of '%s' sit at another index than '%s' gives them "
                                   "(labels follow the sorted folder order; is a class folder missing?)"
                                 : "%d classes of '%s' sit at another index than '%s' gives them "
                                   "(labels follow the order of classes.txt; is a class missing?)",
                         moved, vil_dataset_source(ds), path);
        } else if (vil_dataset_kind(ds) == VIL_DATA_FOLDER && nrows != C) {
            vil_error("class-names file '%s' has %d names but '%s' has %d class folders, and no "
                      "folder name matches an id in the file",
                      path, nrows, vil_dataset_source(ds), C);
            rc = -1;
        } else {
            long maxi = -1;
            for (int k = 0; k < nrows; k++) {
                long idx = rows[k].index >= 0 ? rows[k].index : k;
                if (idx > maxi) maxi = idx;
            }
            if (vil_dataset_kind(ds) != VIL_DATA_FOLDER && maxi + 1 > C)
                vil_dataset_set_num_classes(ds, (int)(maxi + 1));
            C = vil_dataset_num_classes(ds);
            for (int k = 0; k < nrows; k++) {
                long idx = rows[k].index >= 0 ? rows[k].index : k;
                if (idx < C) vil_dataset_set_class_name(ds, (int)idx, rows[k].name);
            }
        }
    }
    free_rows(rows, nrows);
    return rc;
}
