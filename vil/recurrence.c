/* recurrence.c: the table of the recurrences (recurrence.h). Their step math is in scan.c (the
 * CPU reference) and cuda/ (the kernels), per doc/scans.md. */
#include <math.h>
#include <string.h>

#include "recurrence.h"

/* Longhorn's step scalar is sigmoid(delta), Mamba's softplus(delta) */
static float logit(float dt) { return logf(dt / (1.0f - dt)); }
static float softplus_inverse(float dt) { return dt + logf(-expm1f(-dt)); }
/* Mamba's A = -(1..N) per channel (S4D-real) */
static float mamba_A_log_init(int n) { return logf((float)(n + 1)); }

const VilRecurrenceInfo vil_recurrences[VIL_REC_COUNT] = {
    [VIL_REC_LONGHORN] = {.name = "Longhorn", .family = "ViL", .arch = "vil", .delta_of_dt = logit},
    [VIL_REC_MAMBA] = {.name = "Mamba", .family = "ViM", .arch = "vim",
                       .param = {.key = "layers.%d.mixer.A%s_log", .dims = "EN", .init = mamba_A_log_init},
                       .dt_draw_forward = 1, .delta_of_dt = softplus_inverse},
};

int vil_recurrence_from_arch(const char *arch, VilRecurrence *rec) {
    for (int r = 0; r < VIL_REC_COUNT; r++)
        if (strcmp(arch, vil_recurrences[r].arch) == 0) {
            *rec = (VilRecurrence)r;
            return 0;
        }
    return -1;
}
