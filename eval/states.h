/* states.h: the scan's state along the sequence for `vil states` (the length-generalization
 * question of doc/scans.md "Initial state": does the state drift past the training length?):
 * per layer, direction and token, the mean over images of the state norm ||h_t|| and its
 * spread, and the same of each direction's final state. */
#ifndef VIL_STATES_H
#define VIL_STATES_H

#include <stdio.h>

#include "data/dataset.h"
#include "formats/checkpoint.h"
#include "vil/model.h"

/* Running moments over images, Welford's update (exact for one image: sd 0). Index of
 * (layer i, direction j, token t): (i * 2 + j) * L + t; of a final state: i * 2 + j.
 * The readout (the class token, where the head reads the sequence): each direction's state after
 * the step that reads it, summed per element over the images; and, against a reference (the
 * same model's readout states at its training size, vil_states_ref_load), each image's squared
 * distance d = ||h - ref_mean||^2 / sum(ref_var), the reference's spread as the unit (1 on
 * average over the reference's own images). */
typedef struct {
    int depth, L;
    long images;
    double *mean, *m2;   /* (depth, 2, L): ||h_t|| after token t of that direction's scan */
    double *fmean, *fm2; /* (depth, 2): ||h|| after the direction's last step */
    int readout, S;      /* the readout token (-1: not measured) and the state's floats (N x E) */
    double *rsum, *rsq;  /* (depth, 2, S): sum over the images of the readout state, and of its square */
    const float *ref_mean, *ref_var; /* (depth, 2, S): the reference's readout moments, or NULL */
    double *dmean, *dm2; /* (depth, 2): Welford moments of d over the images (with a reference) */
    double amean, am2;   /* the same of each image's d averaged over the layers and directions */
} VilStates;

/* Zeroed moments for a model of `depth` layers and L tokens; the readout's too when readout >= 0
 * (a token of 0..L-1; S: the state's floats). 0, or -1 (reported: out of memory) */
int vil_states_init(VilStates *s, int depth, int L, int readout, int S);
void vil_states_free(VilStates *s);

/* The token that scan step s (1..L: the tokens the direction has read) of direction dir (0
 * forward, 1 backward) reads: forward s - 1, backward L - s. */
static inline int vil_states_token(int dir, int step, int L) { return dir ? L - step : step - 1; }

/* Mean and standard deviation over the images (divided by their count) at (layer, dir, token t);
 * t = -1: the final state. */
void vil_states_get(const VilStates *s, int layer, int dir, int t, double *mean, double *sd);

/* The readout state's per-element mean and variance (divided by the count) over the images,
 * (depth, 2, S) floats each (mean, var: caller's). 0, or -1 (reported: nothing measured). */
int vil_states_readout_moments(const VilStates *s, float *mean, float *var);
/* Mean and sd over the images of the distance d of (layer, dir) against the reference; layer -1:
 * of d averaged over the layers and directions of each image (sd then the images' spread of that
 * average). */
void vil_states_distance(const VilStates *s, int layer, int dir, double *mean, double *sd);

/* A reference for the distance: the readout moments a `vil states` run wrote (OUT/readout.safetensors:
 * "mean" and "var", (depth, 2, S) F32, and its metadata), checked against (depth, S); *mean and
 * *var malloc'ed (free them), meta gets its "img_size" and "images" ("?" if absent). 0, or -1
 * (reported). */
int vil_states_ref_load(const char *path, int depth, int S, float **mean, float **var, char *meta, size_t n);
/* Writes the readout moments of s to path (safetensors, as vil_states_ref_load reads them) with
 * the model, img_size and tokens as metadata. 0, or -1 (reported). */
int vil_states_ref_save(const VilStates *s, const char *path, const char *model, int img_size);

/* Adds the samples b of the last forward of m whose keep[b] is nonzero (keep NULL: all B): the
 * forward ran on training activations (vil_states_prepare) with zero initial states; the model
 * gives each stream's (layer i's direction j: stream 2 i + j) per-token squared state norms and
 * final state on its own backend (vil_model_seq_states). 0, or -1 (reported). */
int vil_states_add_batch(VilStates *s, VilModel *m, const unsigned char *keep);

/* m ready for vil_states_add_batch on batches of B: drop path off, no recomputation, training
 * activations of B (checked against the memory first). 0, or -1 (reported). */
int vil_states_prepare(VilModel *m, int B);

/* The states of m over the readable images of ds (a --limit has made ds its subset,
 * vil_eval_limit), made by the evaluation loader (vil_eval_loader: the transform ev, `vil
 * eval`'s) in batches of `batch` (capped at the images read) with `workers` threads; unreadable
 * images are named by the loader, counted in *bad and left out. log (may be NULL) gets a progress
 * line about every 10%. ref_mean and ref_var (NULL: none; vil_states_ref_load) are the
 * reference of the readout's distance (s points at them: they outlive its use). s is initialized here
 * (vil_states_free it, also after a failure). 0, or -1 (reported). */
int vil_states_dataset(VilModel *m, VilDataset *ds, const VilEvalSpec *ev, int batch, int workers,
                       const float *ref_mean, const float *ref_var, FILE *log, VilStates *s, long *bad);

/* The tokens of a model trained as cfg is but on img_size x img_size images (its grid's
 * patches and the class token); 0 when the patches do not fit that size. */
int vil_states_tokens_at(const VilConfig *cfg, int img_size);

#endif
