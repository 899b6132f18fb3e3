/* scan_dump.c: vil's CPU bidirectional scan (vil/scan.c's scan_bidir_forward and
 * scan_bidir_backward) of one recurrence (Longhorn unless --rec names another) on random inputs,
 * the inputs and every result written to one safetensors file (metadata "recurrence": the id)
 * for tools/torch_reference.py --scan and dev/peers/bench_longhorn.py, which check them against
 * their float64 references. --causal: the causal op (direction 0 alone, out = SiLU(z) y_0), its
 * direction-0 tensors alone (metadata "causal": "1"). --list prints the ids of the recurrences,
 * one a line.
 *   build/tools/scan_dump [--causal] [--rec ID] FILE [B L E N]
 *   build/tools/scan_dump --list */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "vil/common.h"
#include "vil/ops_cpu.h"
#include "vil/recurrence.h"

/* one (B, L, cols) tensor: n random normals times scale */
static float *randn(VilRng *r, size_t n, float scale) {
    float *p = vil_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = scale * vil_rng_normal(r);
    return p;
}

/* columns [c0, c0 + w) of a (rows, ld) matrix, as a dense (rows, w) copy */
static float *cols(const float *a, size_t rows, int ld, int c0, int w) {
    float *p = vil_malloc(rows * (size_t)w * sizeof(float));
    for (size_t i = 0; i < rows; i++) memcpy(p + i * w, a + i * ld + c0, (size_t)w * sizeof(float));
    return p;
}

static int whole(const char *s, int lo, int hi, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv) {
    int B = 2, L = 197, E = 64, N = 16, causal = 0;
    VilRecurrence rec = VIL_REC_LONGHORN;
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (int r = 0; r < VIL_REC_COUNT; r++) printf("%s\n", vil_recurrences[r].id);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "--causal") == 0) causal = 1, argc--, argv++;
    if (argc >= 3 && strcmp(argv[1], "--rec") == 0) {
        if (vil_recurrence_from_id(argv[2], &rec) != 0) {
            fprintf(stderr, "scan_dump: no recurrence '%s' (scan_dump --list names them)\n", argv[2]);
            return 2;
        }
        argc -= 2, argv += 2;
    }
    if (argc != 2 && argc != 6) {
        fprintf(stderr, "usage: scan_dump [--causal] [--rec ID] FILE [B L E N]\n       scan_dump --list\n");
        return 2;
    }
    int own = vil_recurrences[rec].param.key != NULL; /* A_log (E, N) per direction */
    if (argc == 6 && (whole(argv[2], 1, 64, &B) || whole(argv[3], 1, 4096, &L) ||
                      whole(argv[4], 1, 1024, &E) || whole(argv[5], 1, 64, &N))) {
        fprintf(stderr, "scan_dump: B 1-64, L 1-4096, E 1-1024, N 1-64 (whole numbers)\n");
        return 2;
    }
    /* x_dbl rows [dt_low | k | q | pad], k at column dt_ld, 8 columns wider than the model's
     * rows so that a wrong stride shows */
    int dt_ld = 16, xdbl_ld = (dt_ld + 2 * N + 7) / 8 * 8 + 8, ldz = 2 * E;
    size_t BL = (size_t)B * L, ne = BL * E;
    VilRng r;
    vil_rng_seed(&r, 35);
    float *u[2], *dl[2], *xd[2], *Dk[2];
    for (int j = 0; j < 2; j++) {
        u[j] = randn(&r, ne, 1.0f), dl[j] = randn(&r, ne, 1.0f), xd[j] = randn(&r, BL * xdbl_ld, 0.5f);
        Dk[j] = randn(&r, E, 1.0f);
    }
    float *xz = randn(&r, BL * ldz, 1.0f), *dout = randn(&r, ne, 1.0f);
    /* A_log around S4D-real's log(1..N) (the model's init), perturbed */
    float *Al[2] = {NULL, NULL};
    for (int j = 0; j < 2 && own; j++) {
        Al[j] = vil_malloc((size_t)E * N * sizeof(float));
        for (int e = 0; e < E; e++)
            for (int n = 0; n < N; n++) Al[j][(size_t)e * N + n] = logf(n + 1.0f) + 0.1f * vil_rng_normal(&r);
    }
    float *out = vil_malloc(ne * sizeof(float)), *dxz = vil_calloc(BL * ldz, sizeof(float));
    scan_bidir_forward(&(VilScanFwd){.rec = rec, .out = out, .u = {u[0], u[1]},
                                     .delta = {dl[0], dl[1]}, .xdbl = {xd[0], xd[1]}, .z = xz + E,
                                     .D = {Dk[0], Dk[1]}, .A_log = {Al[0], Al[1]}, .B = B, .L = L, .E = E,
                                     .N = N, .dt_ld = dt_ld, .xdbl_ld = xdbl_ld, .ldz = ldz, .causal = causal});
    VilScanBwd g = {.rec = rec, .dz = dxz + E, .dout = dout, .u = {u[0], u[1]},
                    .delta = {dl[0], dl[1]}, .xdbl = {xd[0], xd[1]}, .z = xz + E, .D = {Dk[0], Dk[1]},
                    .A_log = {Al[0], Al[1]}, .B = B, .L = L, .E = E, .N = N, .dt_ld = dt_ld,
                    .xdbl_ld = xdbl_ld, .ldz = ldz, .causal = causal};
    for (int j = 0; j < 2; j++) {
        g.du[j] = vil_malloc(ne * sizeof(float)), g.ddelta[j] = vil_malloc(ne * sizeof(float));
        g.dxdbl[j] = vil_calloc(BL * xdbl_ld, sizeof(float));
        g.dD[j] = vil_calloc(E, sizeof(float)), g.ddelta_sum[j] = vil_calloc(E, sizeof(float));
        g.dA_log[j] = own ? vil_calloc((size_t)E * N, sizeof(float)) : NULL;
    }
    scan_bidir_backward(&g);

    VilStWriter *w = vil_st_writer_new();
    vil_st_writer_meta(w, "recurrence", vil_recurrences[rec].id);
    if (causal) vil_st_writer_meta(w, "causal", "1");
    int64_t sE[3] = {B, L, E}, sN[3] = {B, L, N}, s1[1] = {E}, sA[2] = {E, N};
    char nm[32];
    float *keep[16];
    int nk = 0;
#define ADD(name, shape, nd, data) vil_st_writer_add(w, name, VIL_ST_F32, nd, shape, data)
    for (int j = 0; j < (causal ? 1 : 2); j++) {
        float *k = keep[nk++] = cols(xd[j], BL, xdbl_ld, dt_ld, N);
        float *q = keep[nk++] = cols(xd[j], BL, xdbl_ld, dt_ld + N, N);
        float *dk = keep[nk++] = cols(g.dxdbl[j], BL, xdbl_ld, dt_ld, N);
        float *dq = keep[nk++] = cols(g.dxdbl[j], BL, xdbl_ld, dt_ld + N, N);
        snprintf(nm, sizeof nm, "u%d", j), ADD(nm, sE, 3, u[j]);
        snprintf(nm, sizeof nm, "delta%d", j), ADD(nm, sE, 3, dl[j]);
        snprintf(nm, sizeof nm, "k%d", j), ADD(nm, sN, 3, k);
        snprintf(nm, sizeof nm, "q%d", j), ADD(nm, sN, 3, q);
        snprintf(nm, sizeof nm, "D%d", j), ADD(nm, s1, 1, Dk[j]);
        snprintf(nm, sizeof nm, "du%d", j), ADD(nm, sE, 3, g.du[j]);
        snprintf(nm, sizeof nm, "ddelta%d", j), ADD(nm, sE, 3, g.ddelta[j]);
        snprintf(nm, sizeof nm, "dk%d", j), ADD(nm, sN, 3, dk);
        snprintf(nm, sizeof nm, "dq%d", j), ADD(nm, sN, 3, dq);
        snprintf(nm, sizeof nm, "dD%d", j), ADD(nm, s1, 1, g.dD[j]);
        snprintf(nm, sizeof nm, "ddelta_sum%d", j), ADD(nm, s1, 1, g.ddelta_sum[j]);
        if (own) {
            snprintf(nm, sizeof nm, "A_log%d", j), ADD(nm, sA, 2, Al[j]);
            snprintf(nm, sizeof nm, "dA_log%d", j), ADD(nm, sA, 2, g.dA_log[j]);
        }
    }
    float *z = keep[nk++] = cols(xz, BL, ldz, E, E), *dz = keep[nk++] = cols(dxz, BL, ldz, E, E);
    ADD("z", sE, 3, z);
    ADD("dout", sE, 3, dout);
    ADD("out", sE, 3, out);
    ADD("dz", sE, 3, dz);
#undef ADD
    int rc = vil_st_writer_save(w, argv[1]); /* a failure is reported by vil_error */
    vil_st_writer_free(w);
    for (int j = 0; j < 2; j++) {
        free(u[j]), free(dl[j]), free(xd[j]), free(Dk[j]);
        free(g.du[j]), free(g.ddelta[j]), free(g.dxdbl[j]), free(g.dD[j]), free(g.ddelta_sum[j]);
        free(g.dA_log[j]), free(Al[j]);
    }
    for (int i = 0; i < nk; i++) free(keep[i]);
    free(xz), free(dout), free(out), free(dxz);
    return rc ? 1 : 0;
}
