/* eval.h: the validation pass shared by `vil eval` and `vil train`: a model, a loader in eval
 * mode, top-1 / top-5 over the whole split, and the counting rule on its own for the tests. */
#ifndef VIL_EVAL_H
#define VIL_EVAL_H

#include <stdio.h>

#include "data/dataset.h"
#include "data/loader.h"
#include "eval/results.h"
#include "formats/checkpoint.h"
#include "vil/console.h"
#include "vil/model.h"

typedef struct {
    long images;     /* images evaluated (readable ones only; a stream's: its readouts) */
    long top1, top5; /* correct within the first 1 / 5 classes */
    long bad;        /* images that could not be read: named on stderr, not counted */
    double loss_sum; /* the images' cross-entropy (no label smoothing), summed */
    double seconds;
    int cancelled;   /* the sink's cancel ended the pass early: the counts cover part of it */
} VilEvalResult;

/* Add to *top1 / *top5 the rows of logits (n, C) whose label is ranked first / within the
 * first five. Rank of the label = the classes whose logit is larger, or equal with a smaller
 * index (a fixed tie rule); a non-finite logit of the label counts as wrong. */
void vil_topk_count(const float *logits, const int *labels, int n, int C, long *top1, long *top5);
/* The sum over the rows of logits (n, C) with a label (>= 0) of -log softmax(row)[label]. */
double vil_xent_sum(const float *logits, const int *labels, int n, int C);

/* One pass over the loader's epoch 0 with m (its acts are (re)allocated for the loader's
 * batch, inference mode). max_images > 0 stops after that many. With prog, the progress
 * (prefix names the pass): plain, a line every ~10%; bar, one line redrawn in place and left
 * shown (the caller's next vil_progress_line clears it). 0, or -1 with the loader's error
 * reported. */
int vil_eval_run(VilModel *m, VilLoader *l, long max_images, VilProgress *prog, const char *prefix,
                 VilEvalResult *r);

/* Where a pass hands each batch's results, for per-image files (`vil eval --predictions-file`):
 * rows (may be NULL) gets the logits (n, C) of the batch's readable images (a stream's: every
 * readout), in the loader's order, with their dataset indices and labels; cancel (may be NULL), asked after each batch,
 * ends the pass there when it returns nonzero (VilEvalResult.cancelled). */
typedef struct {
    void (*rows)(void *ctx, const float *logits, const int *indices, const int *labels, int n, int C);
    void *ctx;
    int (*cancel)(void *ctx);
    /* Streams (the stream family): the counts by position in the stream (the caller's arrays,
     * zeroed; a readout past n positions is counted in the totals only), or NULL. */
    VilEvalPositions *pos;
} VilEvalSink;
/* vil_eval_run, each batch's rows also handed to sink (NULL: none). */
int vil_eval_run_sink(VilModel *m, VilLoader *l, long max_images, VilProgress *prog, const char *prefix,
                      const VilEvalSink *sink, VilEvalResult *r);

/* The evaluation transform to use for a checkpoint: crop_pct the user's when > 0, else the
 * checkpoint's (meta->eval), else 0.875; the checkpoint's normalization, else the channel
 * count's defaults. note (may be NULL) gets where the crop came from, for the header line. */
void vil_eval_spec_resolve(VilEvalSpec *ev, const VilCheckpointMeta *meta, float user_crop,
                           int channels, char *note, size_t notelen);

/* The batch an evaluation of ds uses for a requested `batch`: no larger than the images it reads
 * (the split, or max_images when > 0 and smaller), so a large --batch on a small split does not
 * allocate batch slots and activations for images that are not there. */
int vil_eval_batch(const VilDataset *ds, int batch, long max_images);

/* The evaluation loader of m on ds: batches of `batch` images at the model's size and channels,
 * made with the transform ev, in the split's order, `workers` threads, memory from m's backend
 * (pinned on CUDA). A stream model (family = stream) reads streams instead: `streams`' length and
 * count (NULL, or 0 in either: the model's stream_len; as many streams as the split has images),
 * in chunks of its stream_chunk, rows of `batch` streams (data/loader.h VilStreamSpec).
 * vil_loader_free it; NULL (reported) on failure. */
VilLoader *vil_eval_loader(const VilModel *m, const VilDataset *ds, const VilEvalSpec *ev, int batch,
                           int workers, const VilStreamSpec *streams);

/* The evaluation of m on the whole of ds as `vil eval` runs it (a --limit has made ds its subset,
 * vil_eval_limit): an eval-mode loader of vil_eval_batch(ds, batch, 0) images (the transform ev;
 * pinned buffers on CUDA) with `workers` threads (a stream model: `streams`, as vil_eval_loader),
 * then vil_eval_run_sink (sink may be NULL). The
 * data must have the model's classes (else the labels would not mean the model's classes), and
 * the batch must fit (vil_model_check_acts). 0, or -1 (reported). */
int vil_eval_dataset(VilModel *m, VilDataset *ds, const VilEvalSpec *ev, int batch, int workers,
                     const VilStreamSpec *streams, VilProgress *prog, const char *prefix, const VilEvalSink *sink,
                     VilEvalResult *r);

/* `--limit N` of `vil eval`, `vil compare` and `vil states`, one rule for the three: with
 * 0 < limit < its size, *ds becomes its subset of vil_dataset_spread's N samples (spread over the
 * classes round robin, each class's first ones, in dataset order; the old *ds freed). line gets
 * the one line the command prints, "--limit 200: 200 of 10000 images, 20 from each of 10
 * classes" (or "all N images" for a limit at or above the size; "" for no limit). */
void vil_eval_limit(VilDataset **ds, long limit, char *line, size_t len);

/* Seconds per forward pass of m on what its inference activations hold now (m->acts allocated
 * for inference), after `warmup` untimed passes; the backend is synchronized around the timed
 * `steps`. The same measurement for `vil bench` and `vil compare`. */
double vil_time_forward(VilModel *m, int warmup, int steps);

#endif
