/* eval.h: the validation pass shared by `vil eval` and `vil train`: a model, a loader in eval
 * mode, top-1 / top-5 over the whole split, and the counting rule on its own for the tests. */
#ifndef VIL_EVAL_H
#define VIL_EVAL_H

#include <stdio.h>

#include "data/dataset.h"
#include "data/loader.h"
#include "vil/model.h"

typedef struct {
    long images;     /* samples counted */
    long top1, top5; /* correct within the first 1 / 5 classes */
    long bad;        /* bad file reads the loader replaced during the pass */
    double seconds;
} VilEvalResult;

/* Add to *top1 / *top5 the rows of logits (n, C) whose label is ranked first / within the
 * first five. Rank of the label = the classes whose logit is larger, or equal with a smaller
 * index (a fixed tie rule); a non-finite logit of the label counts as wrong. */
void vil_topk_count(const float *logits, const int *labels, int n, int C, long *top1, long *top5);

/* One pass over the loader's epoch 0 with m (its acts are (re)allocated for the loader's
 * batch, inference mode). max_images > 0 stops after that many. With log, a progress line
 * every ~10% (prefix names the pass). 0, or -1 with the loader's error reported. */
int vil_eval_run(VilModel *m, VilLoader *l, long max_images, FILE *log, const char *prefix,
                 VilEvalResult *r);

/* The evaluation of m on a dataset as `vil eval` runs it: an eval-mode loader of `batch` images
 * (resize to img_size / crop_pct, center crop, the model's normalization; pinned buffers on
 * CUDA) with `workers` threads, then vil_eval_run. The dataset's class count is raised to the
 * model's; data with more classes than the model is an error. 0, or -1 (reported). */
int vil_eval_dataset(VilModel *m, VilDataset *ds, int batch, int workers, float crop_pct,
                     long max_images, FILE *log, const char *prefix, VilEvalResult *r);

/* Seconds per forward pass of m on what its inference activations hold now (m->acts allocated
 * for inference), after `warmup` untimed passes; the backend is synchronized around the timed
 * `steps`. The same measurement for `vil bench` and `vil compare`. */
double vil_time_forward(VilModel *m, int warmup, int steps);

#endif
