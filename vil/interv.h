/* interv.h: the initial-state interventions of doc/recipe.md ("Initial states") for the families
 * with recurrent layers (vil/vim.c, vil/stream.c), written once: what a training forward's scans
 * start from (noise, the running fit, the passed states), the fit's update from the final states,
 * and their named training state (init_state_mean, init_state_var, init_state_prev). A family
 * holds a VilInterv in its record, says its shape (directions per layer) and decides WHEN it
 * samples and fits (ViL/ViM: every training forward; a stream: at its start, after its last
 * chunk). Internal to the model, as net.h; the ops they queue are backend.h's VilState*. */
#ifndef VIL_INTERV_H
#define VIL_INTERV_H

#include "net.h"

/* passing's messages when a state file has no passed states or others, naming what starts from
 * them: VIL_INTERV_NOUN("batch") (ViL/ViM), VIL_INTERV_NOUN("stream") */
typedef struct {
    const char *prev_absent, *prev_mismatch;
} VilIntervNoun;
#define VIL_INTERV_NOUN(noun)                                                                                 \
    ((VilIntervNoun){"the state has no passed states (init_state was not passing): the first " noun         \
                     " starts from zero",                                                                     \
                     "the state's passed states are for another batch or number of ranks: the first " noun    \
                     " starts from zero"})

typedef struct {
    int dirs;            /* directions of a layer's scan: 2 (ViL/ViM) or 1 (a stream) */
    VilIntervNoun noun;  /* passing's state file messages */
    VilInitMode mode;    /* VIL_INIT_ZERO: nothing allocated */
    float sigma, drop;   /* noise's standard deviation; passing's probability of a zero start */
    VilInitFit fit;      /* fitted: per element, or per layer and direction */
    int mean_only;       /* fitted: start from the mean, no noise */
    float keep;          /* fitted: the old fit's weight at an update */
    float fit_drop;      /* fitted: the probability of a zero start */
    int S;               /* floats of one sample's states in one layer: dirs N E */
    int batch;           /* the training micro-batch (the passed states' shape) */
    int B;               /* the batch h0 and hT are allocated for (0: none) */
    float *h0;           /* (depth, B, S) backend memory: the next training forward's initial states */
    float *hT;           /* (depth, B, S): the final states of the last training forward */
    int h0_set;          /* h0 holds this micro-batch's states (else the scans start from zero) */
    int has_prev;        /* passing: hT holds the previous micro-batch's final states */
    float *mean, *var;   /* fitted: (depth, S) each, the running fit; (depth, dirs) when fit is scalar */
    size_t stats;        /* floats of mean and of var as allocated (0: none) */
    float *mom;          /* fitted: (2, depth, S) the batch's sums and sums of squares */
    long fits;           /* fitted: updates of the running fit so far (0: none, no noise yet) */
} VilInterv;

/* A family's interventions, off (zero starts), for dirs directions per layer; free releases
 * their device buffers, with the family's record. */
void vil_interv_init(VilInterv *s, int dirs, VilIntervNoun noun);
void vil_interv_free(VilModel *m, VilInterv *s);

/* VilNet's set_init_state (the states of the training batch B allocated here, where a failure is
 * the setup's), extra_bytes, and the two halves of a training forward's intervention: sample
 * before it (h0 of this micro-batch, first: the global index of its sample 0), fit after it
 * (fitted's update from hT, the moments summed over dist's ranks; passing's hT kept). Each
 * family calls sample and fit where its starts and ends are. */
int vil_interv_set(VilModel *m, VilInterv *s, const VilInitSpec *spec, int B);
size_t vil_interv_extra_bytes(const VilModel *m, const VilInterv *s, int B);
int vil_interv_sample(VilModel *m, VilInterv *s, uint64_t seed, long first);
void vil_interv_fit(VilModel *m, VilInterv *s, const struct VilDist *dist);

/* Layer i's initial states for a training forward's scans (NULL: zero, as every evaluation
 * forward starts), and where its final states go (NULL: nowhere): (B, S), each sample's
 * directions in turn. */
const float *vil_interv_h0(const VilModel *m, const VilInterv *s, int i);
float *vil_interv_hT(const VilModel *m, const VilInterv *s, int i);

/* The named training state (VilNet's state_*): entries 0 .. count - 1, which a family with more
 * of its own puts first. */
int vil_interv_state_count(const VilInterv *s);
VilTrainStateInfo vil_interv_state_info(const VilModel *m, const VilInterv *s, int i);
void vil_interv_state_get(const VilModel *m, const VilInterv *s, int i, float *host);
int vil_interv_state_set(VilModel *m, VilInterv *s, int i, const float *host);
long vil_interv_state_counter(const VilInterv *s, int i);
void vil_interv_state_set_counter(VilInterv *s, int i, long count);

#endif
