/* recurrence.h: the state-space recurrences a scan runs (doc/scans.md), named by one enum, and
 * their table: every place that prints a recurrence's name, picks it from a config or a
 * checkpoint, or lays out its parameters reads it. Plain C, included by cuda/ through backend.h. */
#ifndef VIL_RECURRENCE_H
#define VIL_RECURRENCE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { VIL_REC_LONGHORN = 0, VIL_REC_MAMBA = 1 } VilRecurrence;
#define VIL_REC_COUNT 2

/* The parameter a recurrence adds to each direction of each block beyond the shared ones (the
 * model's A_log slot; VilScanFwd/Bwd's A_log). */
typedef struct {
    const char *key;  /* a format of the block index and the direction's suffix ("" or "_b");
                       * NULL: the recurrence adds none */
    const char *dims; /* the shape, a letter per dimension: E = d_inner, N = d_state */
    float (*init)(int n); /* its initial value at state index n (the same for every channel) */
} VilRecParam;

typedef struct {
    const char *name;   /* the scan, as printed: "Longhorn" */
    const char *family; /* the model family: "ViL" */
    const char *arch;   /* the value of the config key arch, in cfg files and checkpoints: "vil" */
    VilRecParam param;
    /* dt_proj's bias init (doc/models.md): whether the forward direction draws dt0 whatever
     * dt_init says, and the delta whose step scalar is dt (the inverse of sigmoid, softplus) */
    int dt_draw_forward;
    float (*delta_of_dt)(float dt);
} VilRecurrenceInfo;

extern const VilRecurrenceInfo vil_recurrences[VIL_REC_COUNT];

/* The recurrence whose arch string is arch: 0, or -1 (nothing reported). */
int vil_recurrence_from_arch(const char *arch, VilRecurrence *rec);

#ifdef __cplusplus
}
#endif

#endif
