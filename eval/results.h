/* results.h: what evaluations write. Per-image prediction files (`vil classify --csv`, `vil
 * eval --predictions-file`): one row per image, its path, the top-k classes (index, name,
 * probability) and, for an evaluation, its label; as CSV (timm's inference.py columns, one column
 * per rank) or as JSON Lines, built in memory and written atomically when closed. The summary of
 * an evaluation (`vil eval --results-file`), as timm's validate.py writes it. And the CSV text
 * field every CSV vil writes goes through (vil_csv_field). A stream model's accuracy by position
 * in the stream (`vil eval --positions-file`). */
#ifndef VIL_RESULTS_H
#define VIL_RESULTS_H

#include <stddef.h>

typedef enum { VIL_RESULTS_CSV = 1, VIL_RESULTS_JSONL = 2, VIL_RESULTS_JSON = 3 } VilResultsFormat;

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

/* s (NULL: "") as one CSV field (malloc'd): valid UTF-8 (vil_utf8_lossy), quoted as RFC 4180
 * has it when it holds a comma, quote or line break (quotes doubled); and a field that starts
 * with =, +, -, @, a tab or a carriage return, which a spreadsheet would run as a formula, gets
 * a single quote put before it inside a quoted field ("'=cmd.png"), as OWASP's CSV-injection
 * advice has it. Every text field of every CSV vil writes goes through it. */
char *vil_csv_field(const char *s);

/* The summary of an evaluation, the fields of timm validate.py's --results-file plus loss and
 * count. */
typedef struct {
    const char *model;         /* the --model given (":weights" after a .pth's state dict) */
    double top1, top5;         /* % of count */
    double loss;               /* mean cross-entropy of the logits against the labels */
    long count;                /* images evaluated */
    size_t params;             /* parameters */
    int img_size;              /* the evaluation's image size */
    double crop_pct;
    const char *interpolation; /* the resize: "bicubic" */
} VilEvalSummary;

/* The format a summary file's name asks for: .csv (VIL_RESULTS_CSV) or .json (VIL_RESULTS_JSON),
 * any case; 0 for another extension. */
int vil_summary_format(const char *path);
/* s written atomically to path as validate.py writes it: the keys model, top1, top1_err, top5,
 * top5_err, param_count (millions), img_size, crop_pct, interpolation, loss, count; top1, top5
 * and their errors rounded to 4 decimals, param_count to 2 (as validate.py rounds), loss to 6.
 * .csv: a header and one row; .json: one object. 0, VIL_EUSAGE for another extension, -1
 * (reported). */
int vil_summary_write(const char *path, const VilEvalSummary *s);

/* A stream model's evaluation by position in the stream (`vil eval --positions-file`; the pass
 * counts into it: VilEvalSink.pos). */
typedef struct {
    int n;           /* positions: a stream's images */
    long *count;     /* (n) readouts at each position (labelled images) */
    long *top1;      /* (n) of them correct */
    double *loss;    /* (n) their cross-entropy, summed */
} VilEvalPositions;
/* Positions lo .. hi (1-based, inclusive, clipped to 1 .. n): their images, top-1 (%) and mean
 * loss summed over them (0 images: top-1 and loss 0). */
void vil_positions_span(const VilEvalPositions *p, int lo, int hi, long *images, double *top1, double *loss);
/* p written atomically to path: .csv, a row per position (position from 1, images, top1 in %,
 * loss, in_length: 1 up to the trained stream length `trained`); .json, one object {"model",
 * "trained_length", "in_length" and "beyond": {"images", "top1", "loss"}, "positions": [{"position",
 * "images", "top1", "loss"}, ...]}. top1 rounded to 4 decimals, loss to 6. 0, VIL_EUSAGE for
 * another extension, -1 (reported). */
int vil_positions_write(const char *path, const char *model, const VilEvalPositions *p, int trained);

/* s as valid UTF-8 (malloc'd): each byte that breaks UTF-8 is replaced by U+FFFD, as Python's
 * errors="replace" does. */
char *vil_utf8_lossy(const char *s);

#endif
