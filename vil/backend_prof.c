/* backend_prof.c: the profiling wrapper of backend_prof.h. Each op of VIL_OPS (the wrappers are
 * generated from that list, so a new op cannot be missed) is timed and its time added to the line
 * of the report its label names; memsets have a line too. Where the backend has device marks
 * (CUDA events) an op is timed between two marks queued around it, the host never waiting, so
 * the ops run back to back as in an unprofiled step and the lines add up to it; the marks are
 * read when the report is made (or their pool is full). Otherwise (the CPU) the wrapper syncs,
 * runs the op and syncs again. */
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

/* the matrix products split by shape (in -> out features), forward and backward apart: which
 * linear of the layer the time goes to */
#define MAX_SHAPES 32
static struct {
    int bwd, C, OC;
    double secs;
    long calls;
} shapes[MAX_SHAPES];
static int n_shapes;
static int shape_of(int bwd, int C, int OC) {
    int i = 0;
    while (i < n_shapes && !(shapes[i].bwd == bwd && shapes[i].C == C && shapes[i].OC == OC)) i++;
    if (i == MAX_SHAPES) return -1; /* more shapes than any model has: the total line still counts them */
    if (i == n_shapes) shapes[n_shapes++] = (__typeof__(shapes[0])){.bwd = bwd, .C = C, .OC = OC};
    return i;
}
static void add_time(int line, int shape, double dt) {
    secs[line] += dt;
    calls[line]++;
    if (shape >= 0) shapes[shape].secs += dt, shapes[shape].calls++;
}

/* ops timed by device marks and not read yet: a pair of marks each, from a pool that grows to
 * MAX_PENDING pairs (read, then reused, when full) */
#define MAX_PENDING 4096
static struct {
    int line, shape;
} pending[MAX_PENDING];
static void *marks[2 * MAX_PENDING];
static int n_marks, n_pending;
static void read_pending(void) {
    for (int i = 0; i < n_pending; i++)
        add_time(pending[i].line, pending[i].shape, in->mark_elapsed(in, marks[2 * i], marks[2 * i + 1]));
    n_pending = 0;
}
static void *mark_at(int k) {
    while (n_marks <= k) marks[n_marks++] = in->mark_new(in);
    return marks[k];
}

static double t_begin(void) {
    if (in->mark_record) {
        if (n_pending == MAX_PENDING) read_pending();
        in->mark_record(in, mark_at(2 * n_pending));
        return 0.0;
    }
    in->sync(in);
    return vil_now();
}
static void t_end(double t0, const char *label, int shape) {
    if (in->mark_record) {
        in->mark_record(in, mark_at(2 * n_pending + 1));
        pending[n_pending].line = line_of(label), pending[n_pending].shape = shape;
        n_pending++;
        return;
    }
    in->sync(in);
    add_time(line_of(label), shape, vil_now() - t0);
}

static void w_zero(const VilBackend *be, void *p, size_t bytes) {
    double t0 = t_begin();
    in->zero(in, p, bytes);
    t_end(t0, "memset", -1);
}
#define VIL_PROF_WRAP(op, Args, label)                          \
    static void w_##op(const VilBackend *be, const Args *args) { \
        double t0 = t_begin();                                  \
        in->op(in, args);                                       \
        t_end(t0, label, -1);                                   \
    }
VIL_OPS(VIL_PROF_WRAP)
#undef VIL_PROF_WRAP
static void w_linear_fwd_shape(const VilBackend *be, const VilLinearFwd *args) {
    double t0 = t_begin();
    in->linear_forward(in, args);
    t_end(t0, "linear fwd", shape_of(0, args->C, args->OC));
}
static void w_linear_bwd_shape(const VilBackend *be, const VilLinearBwd *args) {
    double t0 = t_begin();
    in->linear_backward(in, args);
    t_end(t0, "linear bwd", shape_of(1, args->C, args->OC));
}

const VilBackend *vil_backend_profiled(const VilBackend *inner) {
    if (in && in != inner && n_pending) in->sync(in);
    if (in != inner) n_marks = 0, n_pending = 0; /* marks belong to their backend's device */
    in = inner;
    wrapped = *inner; /* the same device context: the other members work unchanged */
    wrapped.zero = w_zero;
    /* every op is timed alone: nothing is captured into a graph */
    wrapped.graph_begin = NULL, wrapped.graph_end = NULL, wrapped.graph_launch = NULL, wrapped.graph_free = NULL;
#define VIL_PROF_SET(op, Args, label) wrapped.op = w_##op;
    VIL_OPS(VIL_PROF_SET)
#undef VIL_PROF_SET
    wrapped.linear_forward = w_linear_fwd_shape, wrapped.linear_backward = w_linear_bwd_shape;
    vil_prof_reset();
    return &wrapped;
}

void vil_prof_reset(void) {
    if (n_pending) in->sync(in); /* the marks in flight are dropped, then reused */
    n_pending = 0;
    memset(secs, 0, sizeof secs);
    memset(calls, 0, sizeof calls);
    n_shapes = 0;
}

void vil_prof_report(FILE *f, int iters) {
    read_pending();
    double total = 0;
    for (int i = 0; i < N_LABELS; i++) total += secs[i];
    if (iters < 1) iters = 1;
    fprintf(f, "%-24s %10s %8s %7s\n", "op", "ms/step", "calls", "share");
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
        fprintf(f, "%-24s %10.3f %8ld %6.1f%%\n", LABELS[i], 1e3 * secs[i] / iters,
                calls[i] / iters, total > 0 ? 100.0 * secs[i] / total : 0.0);
    }
    fprintf(f, "%-24s %10.3f\n", in->mark_record ? "total" : "total (serialized)", 1e3 * total / iters);
    for (int i = 0; i < n_shapes; i++) {
        char name[48];
        snprintf(name, sizeof name, "  linear %s %d->%d", shapes[i].bwd ? "bwd" : "fwd", shapes[i].C, shapes[i].OC);
        fprintf(f, "%-24s %10.3f %8ld %6.1f%%\n", name, 1e3 * shapes[i].secs / iters, shapes[i].calls / iters,
                total > 0 ? 100.0 * shapes[i].secs / total : 0.0);
    }
}
