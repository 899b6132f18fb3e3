/* list.h: the recurrences a scan runs, one line each: X(ENUM, id, Policy, args...) names
 * VIL_REC_<ENUM>, its header vil/rec/<id>.h (its table row VIL_REC_ROW_<ENUM>, its CPU step
 * pieces <id>_*, its CUDA policy struct Policy with its tuning row) and passes on the list's
 * further arguments. The enum, the table (vil/recurrence.c), the CPU scan's dispatch
 * (vil/rec/all.h) and the CUDA scan's dispatch and instantiation (cuda/scan_rec.cuh) are all
 * made from it. A recurrence: its header, its line here and its #include below (DEVELOPERS.md
 * lists the rest). */
#ifndef VIL_REC_LIST_H
#define VIL_REC_LIST_H
#define VIL_RECURRENCE_LIST(X, ...)          \
    X(LONGHORN, longhorn, Longhorn, __VA_ARGS__) \
    X(MAMBA, mamba, Mamba, __VA_ARGS__)
#endif

/* the headers, for the step code only (vil/rec/all.h includes this file again after
 * vil/recurrence.h, with VIL_REC_HEADERS defined) */
#ifdef VIL_REC_HEADERS
#include "vil/rec/longhorn.h"
#include "vil/rec/mamba.h"
#endif
