/* all.h: every recurrence's header (vil/rec/list.h), and their CPU step pieces called by
 * VilRecurrence: what vil/scan.c's loops (and dev/cuda/scan.cu's plain version) are written
 * against. Each function is a switch over the list; the loops call them with a compile-time
 * recurrence (VIL_REC_DISPATCH), so each folds to the recurrence's own piece.
 *
 * The pieces of recurrence <id>, from its header, for h_t = a_t * h_{t-1} + s_t u_t k_t and
 * y_t = q_t . h_t + D u_t per channel (doc/scans.md):
 *   VIL_REC_<ENUM>_BLOCK   the CPU scan's channels per block (state laid out h[n][channel])
 *   VIL_REC_<ENUM>_KAPPA   s reads kappa = |k_t|^2 (once per token), whose gradient sums over
 *                          the channels into dk (dk += 2 k dkappa)
 *   VIL_REC_<ENUM>_PARAM   a parameter of its own per (channel, state), A_log (A = -exp(A_log)),
 *                          whose gradient the scan accumulates (the table row's param)
 *   <id>_params(A, A_log, c0, nd, N, DB)   per channel block, once: what the decay reads of the
 *                          parameter, A[n * DB + i] for channels c0 .. c0 + nd
 *   <id>_step(delta, kappa, &aux0, &aux1)  the step scalar s of a channel at a token; aux keeps
 *                          what the adjoint needs again
 *   <id>_decay(s, kk, A)   the decay a of a state (kk = k_t[n]^2, A its parameter value)
 *   <id>_out_init(D, u), <id>_out_final(acc, D, u)   y: where the sum over states starts, and
 *                          what it ends as (the order of the D u term is part of the bits)
 *   <id>_adjoint(l, s, a, u, k, kk, hp, A)  one state's VilRecAdj from its adjoint l and its
 *                          value hp before the step
 *   <id>_ddelta(ds, delta, aux0, aux1, &dkappa)   ddelta from ds (summed over the states); a
 *                          KAPPA recurrence adds its kappa gradient to *dkappa */
#ifndef VIL_REC_ALL_H
#define VIL_REC_ALL_H

#include "vil/recurrence.h"
#define VIL_REC_HEADERS
#include "vil/rec/list.h"
#undef VIL_REC_HEADERS

/* case VIL_REC_<ENUM>: return <id>_<piece>(args); */
#define VIL_REC_CALL_(U, l, P, piece, ...) \
    case VIL_REC_##U: return l##_##piece(__VA_ARGS__);
#define VIL_REC_CONST_(U, l, P, what) \
    case VIL_REC_##U: return VIL_REC_##U##_##what;

VIL_REC_FN int vil_rec_block(VilRecurrence rec) {
    switch (rec) { VIL_RECURRENCE_LIST(VIL_REC_CONST_, BLOCK) }
    return 1;
}
VIL_REC_FN int vil_rec_kappa(VilRecurrence rec) {
    switch (rec) { VIL_RECURRENCE_LIST(VIL_REC_CONST_, KAPPA) }
    return 0;
}
VIL_REC_FN int vil_rec_param(VilRecurrence rec) {
    switch (rec) { VIL_RECURRENCE_LIST(VIL_REC_CONST_, PARAM) }
    return 0;
}
#define VIL_REC_PARAMS_(U, l, P, ...) \
    case VIL_REC_##U: l##_params(__VA_ARGS__); break;
VIL_REC_FN void vil_rec_params(VilRecurrence rec, float *A, const float *A_log, int c0, int nd, int N, int DB) {
    switch (rec) { VIL_RECURRENCE_LIST(VIL_REC_PARAMS_, A, A_log, c0, nd, N, DB) }
}
VIL_REC_FN float vil_rec_step(VilRecurrence rec, float delta, float kappa, float *aux0, float *aux1) {
    switch (rec) { VIL_RECURRENCE_LIST(VIL_REC_CALL_, step, delta, kappa, aux0, aux1) }
    return 0.0f;
}
VIL_REC_FN float vil_rec_decay(VilRecurrence rec, float s, float kk, float A) {
    switch (rec) { VIL_RECURRENCE_LIST(VIL_REC_CALL_, decay, s, kk, A) }
    return 0.0f;
}
VIL_REC_FN float vil_rec_out_init(VilRecurrence rec, float Dskip, float ut) {
    switch (rec) { VIL_RECURRENCE_LIST(VIL_REC_CALL_, out_init, Dskip, ut) }
    return 0.0f;
}
VIL_REC_FN float vil_rec_out_final(VilRecurrence rec, float acc, float Dskip, float ut) {
    switch (rec) { VIL_RECURRENCE_LIST(VIL_REC_CALL_, out_final, acc, Dskip, ut) }
    return 0.0f;
}
VIL_REC_FN VilRecAdj vil_rec_adjoint(VilRecurrence rec, float l, float s, float a, float ut, float kn, float kk,
                                     float hp, float A) {
    switch (rec) { VIL_RECURRENCE_LIST(VIL_REC_CALL_, adjoint, l, s, a, ut, kn, kk, hp, A) }
    VilRecAdj none = {0};
    return none;
}
VIL_REC_FN float vil_rec_ddelta(VilRecurrence rec, float ds, float delta, float aux0, float aux1, float *dkappa) {
    switch (rec) { VIL_RECURRENCE_LIST(VIL_REC_CALL_, ddelta, ds, delta, aux0, aux1, dkappa) }
    return 0.0f;
}

/* Runs f(VIL_REC_<ENUM>, args...) for the recurrence rec: the loops then see it as a
 * compile-time constant. It belongs inside the parallel loops: an OpenMP region's body is
 * outlined into a function of its own, so a constant named outside it reaches the body as a
 * runtime value and the pieces' switches stay in the inner loops. */
#define VIL_REC_INST_(U, l, P, f, ...) \
    case VIL_REC_##U: f(VIL_REC_##U, __VA_ARGS__); break;
#define VIL_REC_DISPATCH(rec, f, ...) \
    switch (rec) { VIL_RECURRENCE_LIST(VIL_REC_INST_, f, __VA_ARGS__) }

#endif
