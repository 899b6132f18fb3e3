/* backend_prof.c: the profiling wrapper of backend_prof.h. Each op of VIL_OPS (the wrappers are
 * generated from that list, so a new op cannot be missed) syncs, runs the inner op, syncs again
 * and adds the elapsed time to the line of the report its label names; memsets have a line too. */
#include "backend_prof.h"

#include <string.h>

#include "common.h"

/* the report's lines: every distinct label of VIL_OPS, then "memset" */
#define VIL_PROF_LABEL(op, Args, label) label,
static const char *const LABELS[] = {VIL_OPS(VIL_PROF_LABEL) "memset"};
#undef VIL_PROF_LABEL
#define N_LABELS (int)(sizeof LABELS / sizeof LABELS[0])
static double secs[N_LABELS];
static long calls[N_LABELS];
static const VilBackend *in;
static VilBackend wrapped;

/* the first index with the same label: ops that share a label share a line */
static int line_of(const char *label) {
    for (int i = 0; i < N_LABELS; i++)
        if (strcmp(LABELS[i], label) == 0) return i;
    return N_LABELS - 1;
}

static double t_begin(void) {
    in->sync(in);
    return vil_now();
}
static void t_end(double t0, const char *label) {
    in->sync(in);
    int k = line_of(label);
    secs[k] += vil_now() - t0;
    calls[k]++;
}

static void w_zero(const VilBackend *be, void *p, size_t bytes) {
    double t0 = t_begin();
    in->zero(in, p, bytes);
    t_end(t0, "memset");
}
#define VIL_PROF_WRAP(op, Args, label)                          \
    static void w_##op(const VilBackend *be, const Args *args) { \
        double t0 = t_begin();                                  \
        in->op(in, args);                                       \
        t_end(t0, label);                                       \
    }
VIL_OPS(VIL_PROF_WRAP)
#undef VIL_PROF_WRAP

const VilBackend *vil_backend_profiled(const VilBackend *inner) {
    in = inner;
    wrapped = *inner; /* the same device context: the other members work unchanged */
    wrapped.zero = w_zero;
    /* the timers wait for the device after every op: nothing can be captured */
    wrapped.graph_begin = NULL, wrapped.graph_end = NULL, wrapped.graph_launch = NULL, wrapped.graph_free = NULL;
#define VIL_PROF_SET(op, Args, label) wrapped.op = w_##op;
    VIL_OPS(VIL_PROF_SET)
#undef VIL_PROF_SET
    vil_prof_reset();
    return &wrapped;
}

void vil_prof_reset(void) {
    memset(secs, 0, sizeof secs);
    memset(calls, 0, sizeof calls);
}

void vil_prof_report(FILE *f, int iters) {
    double total = 0;
    for (int i = 0; i < N_LABELS; i++) total += secs[i];
    if (iters < 1) iters = 1;
    fprintf(f, "%-20s %10s %8s %7s\n", "op", "ms/step", "calls", "share");
    int order[N_LABELS];
    for (int i = 0; i < N_LABELS; i++) order[i] = i;
    for (int i = 0; i < N_LABELS; i++) /* largest first */
        for (int j = i + 1; j < N_LABELS; j++)
            if (secs[order[j]] > secs[order[i]]) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    for (int k = 0; k < N_LABELS; k++) {
        int i = order[k];
        if (!calls[i]) continue;
        fprintf(f, "%-20s %10.3f %8ld %6.1f%%\n", LABELS[i], 1e3 * secs[i] / iters,
                calls[i] / iters, total > 0 ? 100.0 * secs[i] / total : 0.0);
    }
    fprintf(f, "%-20s %10.3f\n", "total (serialized)", 1e3 * total / iters);
}
