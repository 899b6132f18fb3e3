/* recurrence.h: the state-space recurrences a scan runs (doc/scans.md), named by one enum made
 * from their list (vil/rec/list.h), and their table: every place that prints a recurrence's
 * name, picks it from a config or a checkpoint, or lays out its parameters reads it. Each
 * recurrence is written once, in its header vil/rec/<id>.h: its row of the table, its CPU step
 * pieces and its CUDA policy. Plain C, included by cuda/ through backend.h. */
#ifndef VIL_RECURRENCE_H
#define VIL_RECURRENCE_H

#include "vil/rec/list.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VIL_REC_ENUM_(U, l, P, ...) VIL_REC_##U,
typedef enum { VIL_RECURRENCE_LIST(VIL_REC_ENUM_) } VilRecurrence;
#undef VIL_REC_ENUM_
#define VIL_REC_ONE_(U, l, P, ...) +1
enum { VIL_REC_COUNT = 0 VIL_RECURRENCE_LIST(VIL_REC_ONE_) };
#undef VIL_REC_ONE_

/* The parameter a recurrence adds to each direction of each block beyond the shared ones (the
 * model's A_log slot; VilScanFwd/Bwd's A_log). */
typedef struct {
    const char *key;  /* a format of the block index and the direction's suffix ("" or "_b");
                       * NULL: the recurrence adds none */
    const char *dims; /* the shape, a letter per dimension: E = d_inner, N = d_state */
    float (*init)(int n); /* its initial value at state index n (the same for every channel) */
} VilRecParam;

typedef struct {
    const char *id;     /* its name in vil/rec/list.h, for tests and tools: "longhorn" */
    const char *name;   /* the scan, as printed: "Longhorn" */
    const char *family; /* the model family: "ViL" */
    const char *arch;   /* the value of the config key arch, in cfg files and checkpoints: "vil";
                         * NULL: no model runs it (a recurrence of the scan ops alone) */
    const char *kq[2];  /* what the recurrence calls k and q: "k", "q" (Mamba: "B", "C") */
    VilRecParam param;
    /* dt_proj's bias init (doc/models.md): whether the forward direction draws dt0 whatever
     * dt_init says, and the delta whose step scalar is dt (the inverse of sigmoid, softplus) */
    int dt_draw_forward;
    float (*delta_of_dt)(float dt);
} VilRecurrenceInfo;

extern const VilRecurrenceInfo vil_recurrences[VIL_REC_COUNT];

/* The recurrence whose arch string is arch: 0, or -1 (nothing reported). */
int vil_recurrence_from_arch(const char *arch, VilRecurrence *rec);
/* The recurrence whose id is id: 0, or -1 (nothing reported). */
int vil_recurrence_from_id(const char *id, VilRecurrence *rec);

#ifdef __cplusplus
}
#endif

#endif
