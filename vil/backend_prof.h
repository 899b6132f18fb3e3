/* backend_prof.h: a profiling wrapper around any backend: every op is timed, between two device
 * marks queued around it where the backend has them (CUDA events: the host does not wait, the
 * ops run back to back), else between the backend's syncs on a wall clock, and the time is
 * summed per op name. For breakdowns only: throughput is measured without it. */
#ifndef VIL_BACKEND_PROF_H
#define VIL_BACKEND_PROF_H

#include <stdio.h>

#include "backend.h"

/* The wrapper of `inner` (one at a time: the counters are process-wide). */
const VilBackend *vil_backend_profiled(const VilBackend *inner);
void vil_prof_reset(void);
/* Print the per-op table (time per call-site group, share of the total), divided by `iters`. */
void vil_prof_report(FILE *f, int iters);

#endif
