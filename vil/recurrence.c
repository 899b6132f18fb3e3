/* recurrence.c: the table of the recurrences (recurrence.h), its rows from their headers
 * (vil/rec/<id>.h) in the order of vil/rec/list.h. */
#include <string.h>

#include "vil/rec/all.h"

#define VIL_REC_ROW_(U, l, P, ...) [VIL_REC_##U] = {.id = #l, VIL_REC_ROW_##U},
const VilRecurrenceInfo vil_recurrences[VIL_REC_COUNT] = {VIL_RECURRENCE_LIST(VIL_REC_ROW_)};

int vil_recurrence_from_arch(const char *arch, VilRecurrence *rec) {
    for (int r = 0; r < VIL_REC_COUNT; r++)
        if (vil_recurrences[r].arch && strcmp(arch, vil_recurrences[r].arch) == 0) {
            *rec = (VilRecurrence)r;
            return 0;
        }
    return -1;
}

int vil_recurrence_from_id(const char *id, VilRecurrence *rec) {
    for (int r = 0; r < VIL_REC_COUNT; r++)
        if (strcmp(id, vil_recurrences[r].id) == 0) {
            *rec = (VilRecurrence)r;
            return 0;
        }
    return -1;
}
