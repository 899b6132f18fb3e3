/* results.h: per-image prediction files: `vil classify --csv` and `vil eval --results-file`.
 * One row per image: its path, the top-k classes (index, name, probability) and, for an
 * evaluation, its label; as CSV (timm's inference.py columns, one column per rank) or as JSON
 * Lines. The file is built in memory and written atomically when closed. */
#ifndef VIL_RESULTS_H
#define VIL_RESULTS_H

#include <stddef.h>

typedef enum { VIL_RESULTS_CSV = 1, VIL_RESULTS_JSONL = 2 } VilResultsFormat;

/* The format a file name asks for: .csv or .jsonl (any case); 0 for another extension. */
int vil_results_format(const char *path);

/* The k classes of logits (C) with the largest values, best first, ties to the lower index (the
 * order vil_topk_count ranks a label by; a NaN logit ranks last), and their softmax
 * probabilities (double precision). k <= C. */
void vil_topk_probs(const float *logits, int C, int k, int *idx, double *prob);

typedef struct VilResults VilResults;

/* A results file for `path` in `format`: topk classes per row (capped at C), names (C strings, or
 * NULL: the name columns stay empty / null), with_label: each row also holds the image's label
 * (columns target, target_name). CSV header: filename, label_0 .. label_{k-1} (class indices),
 * prob_0 .. prob_{k-1}, name_0 .. name_{k-1}[, target, target_name]. JSON Lines: one object a
 * row, {"file", "topk": [{"index", "name", "prob"}, ...][, "target", "target_name"]}. */
VilResults *vil_results_open(const char *path, VilResultsFormat format, int topk, int C,
                             char *const *names, int with_label);
/* One row: file (bytes that are not UTF-8 become U+FFFD), logits (C), label (with_label). */
void vil_results_add(VilResults *r, const char *file, const float *logits, int label);
long vil_results_rows(const VilResults *r);
/* Writes the file (atomically) and frees r. 0, or -1 (reported). */
int vil_results_close(VilResults *r);
/* Frees r without writing. */
void vil_results_free(VilResults *r);

/* s as valid UTF-8 (malloc'd): each byte that breaks UTF-8 is replaced by U+FFFD, as Python's
 * errors="replace" does. */
char *vil_utf8_lossy(const char *s);

#endif
