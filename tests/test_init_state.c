/* test_init_state.c: the initial-state interventions (doc/recipe.md "Initial states") on the CPU:
 * the ops against plain references (the draws' moments, the passed and dropped samples, the
 * batch moments and the running fit, the fit's ablations: statistics per group, the mean alone,
 * zero starts); training runs through the CLI on a synthetic IDX set: noise with sigma 0, passing
 * with drop 1 and fitted with init_state_fit_drop 1 train bitwise as the zero start, the scalar
 * fit and the momentum against the element fit's statistics by hand, a resume is bitwise the
 * uninterrupted run for every mode (with gradient accumulation too), noise does not depend on how
 * the global batch is cut into micro-batches, bad values exit 2, a state whose fitted statistics
 * do not fit the model is refused by name, and post-training from a checkpoint is one command. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "tests/data_corpus.h"
#include "tests/model_testing.h"
#include "tests/testing.h"
#include "vil/common.h"
#include "vil/init_state.h"
#include "vil/ops_cpu.h"

static char *dir;

/* ---------------- the ops ---------------- */

static void test_ops(void) {
    enum { B = 4000, S = 6 };
    float *h0 = vil_malloc((size_t)B * S * sizeof(float)), *prev = vil_malloc((size_t)B * S * sizeof(float));
    float mean[S], var[S];
    for (int i = 0; i < S; i++) mean[i] = 0.5f * (float)i - 1.0f, var[i] = 0.25f + 0.5f * (float)i;
    /* fitted: per element mean and variance of the draws over the batch */
    state_init(&(VilStateInit){.h0 = h0, .mean = mean, .var = var, .seed = 7, .first = 100, .B = B, .S = S});
    double worst_m = 0, worst_v = 0;
    for (int i = 0; i < S; i++) {
        double s = 0, q = 0;
        for (int b = 0; b < B; b++) s += h0[(size_t)b * S + i];
        s /= B;
        for (int b = 0; b < B; b++) q += (h0[(size_t)b * S + i] - s) * (h0[(size_t)b * S + i] - s);
        q /= B - 1;
        /* 5 standard errors: the mean's sd / sqrt(B), the variance's sqrt(2 / B) relative */
        worst_m = fmax(worst_m, fabs(s - mean[i]) / (sqrt(var[i] / B) * 5));
        worst_v = fmax(worst_v, fabs(q / var[i] - 1) / (sqrt(2.0 / B) * 5));
    }
    T_CHECK(worst_m < 1 && worst_v < 1, "fitted draws: mean within 5 standard errors (worst %.2f of it), "
            "variance too (%.2f)", worst_m, worst_v);
    /* a sample's numbers depend on its global index only: samples 100.. drawn as batch 0.. */
    float *h1 = vil_malloc((size_t)10 * S * sizeof(float));
    state_init(&(VilStateInit){.h0 = h1, .mean = mean, .var = var, .seed = 7, .first = 150, .B = 10, .S = S});
    T_CHECK(!memcmp(h1, h0 + (size_t)50 * S, (size_t)10 * S * sizeof(float)),
            "the draws of sample 150 are the same in a batch starting at 100 and one starting at 150");
    /* noise: sigma, zero mean */
    state_init(&(VilStateInit){.h0 = h0, .sigma = 0.3f, .seed = 8, .B = B, .S = S});
    double s = 0, q = 0;
    for (size_t i = 0; i < (size_t)B * S; i++) s += h0[i], q += (double)h0[i] * h0[i];
    s /= (double)B * S, q = sqrt(q / ((double)B * S));
    T_CHECK(fabs(s) < 5 * 0.3 / sqrt((double)B * S) && fabs(q / 0.3 - 1) < 0.02,
            "noise sigma 0.3: mean %.4f, rms %.4f", s, q);
    state_init(&(VilStateInit){.h0 = h0, .sigma = 0.0f, .seed = 8, .B = B, .S = S});
    int zeros = 1;
    for (size_t i = 0; i < (size_t)B * S; i++) zeros &= h0[i] == 0.0f && !signbit(h0[i]);
    T_CHECK(zeros, "noise sigma 0: every state +0.0");
    /* passing: each sample's previous state, or zero with probability drop */
    for (size_t i = 0; i < (size_t)B * S; i++) prev[i] = (float)i + 1.0f;
    state_init(&(VilStateInit){.h0 = h0, .prev = prev, .drop = 0.3f, .seed = 9, .B = B, .S = S});
    int dropped = 0, exact = 1;
    for (int b = 0; b < B; b++) {
        int z = h0[(size_t)b * S] == 0.0f;
        dropped += z;
        for (int i = 0; i < S; i++) exact &= h0[(size_t)b * S + i] == (z ? 0.0f : prev[(size_t)b * S + i]);
    }
    T_CHECK(exact, "passing: a sample's state is its previous one or all zero");
    T_CHECK(fabs(dropped / (double)B - 0.3) < 5 * sqrt(0.3 * 0.7 / B), "passing drop 0.3: %d of %d dropped", dropped, B);
    state_init(&(VilStateInit){.h0 = h0, .prev = prev, .drop = 1.0f, .seed = 9, .B = B, .S = S});
    zeros = 1;
    for (size_t i = 0; i < (size_t)B * S; i++) zeros &= h0[i] == 0.0f;
    T_CHECK(zeros, "passing drop 1: every state zero");
    state_init(&(VilStateInit){.h0 = h0, .prev = prev, .drop = 0.0f, .seed = 9, .B = B, .S = S});
    T_CHECK(!memcmp(h0, prev, (size_t)B * S * sizeof(float)), "passing drop 0: the previous states");
    /* the batch's moments against double sums, then the running fit against its formula */
    float sum[S], sq[S], m2[S], v2[S];
    state_moments(&(VilStateMoments){.sum = sum, .sq = sq, .hT = prev, .B = 50, .S = S});
    double err = 0;
    for (int i = 0; i < S; i++) {
        double rs = 0, rq = 0;
        for (int b = 0; b < 50; b++) rs += prev[(size_t)b * S + i], rq += (double)prev[(size_t)b * S + i] * prev[(size_t)b * S + i];
        err = fmax(err, fmax(fabs(sum[i] - rs) / rs, fabs(sq[i] - rq) / rq));
    }
    T_CLOSE("state_moments against double sums", err, 1e-6);
    for (int i = 0; i < S; i++) m2[i] = mean[i], v2[i] = var[i];
    state_fit(&(VilStateFit){.mean = m2, .var = v2, .sum = sum, .sq = sq, .n = S, .count = 50, .keep = 0.9f});
    err = 0;
    for (int i = 0; i < S; i++) {
        double bm = sum[i] / 50.0, bv = fmax(sq[i] / 50.0 - bm * bm, 0);
        err = fmax(err, fabs(m2[i] - (0.9 * mean[i] + 0.1 * bm)) / fabs(bm));
        err = fmax(err, fabs(v2[i] - (0.9 * var[i] + 0.1 * bv)) / (bv + var[i]));
    }
    T_CLOSE("state_fit: keep x old + (1 - keep) x the batch's", err, 1e-5);
    free(h0), free(h1), free(prev);
}

/* the fit's ablations: statistics shared by a group of elements, the mean alone, zero starts */
static void test_ops_ablations(void) {
    enum { B = 3000, S = 12, G = 4, K = S / G };
    float *h0 = vil_malloc((size_t)B * S * sizeof(float)), *h1 = vil_malloc((size_t)B * S * sizeof(float));
    float mean[K] = {-1.0f, 0.5f, 2.0f}, var[K] = {0.25f, 1.0f, 4.0f};
    /* group G: element i draws from N(mean[i / G], var[i / G]) with its own number i */
    state_init(&(VilStateInit){.h0 = h0, .mean = mean, .var = var, .group = G, .seed = 3, .first = 7, .B = B, .S = S});
    double worst = 0;
    for (int b = 0; b < B; b++) {
        uint64_t key = vil_state_key(3, (uint64_t)(7 + b));
        for (int i = 0; i < S; i++) {
            double want = mean[i / G] + sqrt(var[i / G]) * vil_state_normal(key, (uint64_t)i);
            worst = fmax(worst, fabs(h0[(size_t)b * S + i] - want) / (1 + fabs(want)));
        }
    }
    T_CLOSE("state_init group 4: h0[b][i] = mean[i / 4] + sqrt(var[i / 4]) g(b, i)", worst, 1e-6);
    int exact;
    /* the mean alone: every sample is the mean, no draw */
    state_init(&(VilStateInit){.h0 = h0, .mean = mean, .var = var, .group = G, .mean_only = 1, .seed = 3, .B = B, .S = S});
    exact = 1;
    for (size_t j = 0; j < (size_t)B * S; j++) exact &= h0[j] == mean[(j % S) / G];
    T_CHECK(exact, "state_init mean_only: every sample's state is the fitted mean");
    /* a zero start with probability drop: the dropped samples all zero, the kept ones the very
     * draws of the run without drops (the drop draw is off the states' numbers) */
    state_init(&(VilStateInit){.h0 = h1, .mean = mean, .var = var, .group = G, .seed = 5, .B = B, .S = S});
    state_init(&(VilStateInit){.h0 = h0, .mean = mean, .var = var, .group = G, .drop = 0.1f, .seed = 5, .B = B, .S = S});
    int dropped = 0;
    exact = 1;
    for (int b = 0; b < B; b++) {
        int z = 1;
        for (int i = 0; i < S; i++) z &= h0[(size_t)b * S + i] == 0.0f;
        dropped += z;
        if (!z) exact &= !memcmp(h0 + (size_t)b * S, h1 + (size_t)b * S, S * sizeof(float));
        /* the drop is the passing's draw: u(b) < drop */
        exact &= z == (vil_state_uniform(vil_state_key(5, (uint64_t)b), VIL_STATE_DROP_DRAW) < 0.1f);
    }
    T_CHECK(exact, "fitted drop 0.1: sample b zero exactly where its drop draw u < 0.1, else the draw without drops");
    T_CHECK(fabs(dropped / (double)B - 0.1) < 5 * sqrt(0.1 * 0.9 / B), "fitted drop 0.1: %d of %d start from zero",
            dropped, B);
    /* the grouped fit against double sums by hand: group k pools its G elements of every sample */
    for (size_t j = 0; j < (size_t)B * S; j++) h1[j] = 0.3f * (float)((j * 7919) % 101) / 101.0f + (float)(j % S) * 0.1f;
    float sum[S], sq[S], m2[K], v2[K];
    state_moments(&(VilStateMoments){.sum = sum, .sq = sq, .hT = h1, .B = 40, .S = S});
    for (int k = 0; k < K; k++) m2[k] = mean[k], v2[k] = var[k];
    state_fit(&(VilStateFit){.mean = m2, .var = v2, .sum = sum, .sq = sq, .n = S, .group = G, .count = 40, .keep = 0.9f});
    double err = 0;
    for (int k = 0; k < K; k++) {
        double s1 = 0, q1 = 0;
        for (int b = 0; b < 40; b++)
            for (int t = 0; t < G; t++) {
                double x = h1[(size_t)b * S + k * G + t];
                s1 += x, q1 += x * x;
            }
        double bm = s1 / (40.0 * G), bv = q1 / (40.0 * G) - bm * bm;
        err = fmax(err, fabs(m2[k] - (0.9 * mean[k] + 0.1 * bm)) / fabs(0.9 * mean[k] + 0.1 * bm));
        err = fmax(err, fabs(v2[k] - (0.9 * var[k] + 0.1 * bv)) / (0.9 * var[k] + 0.1 * bv));
    }
    T_CLOSE("state_fit group 4: one mean and var per group of 4 x 40 values, by hand", err, 1e-6);
    free(h0), free(h1);
}

/* ---------------- training runs ---------------- */

/* the lr and warmup apart: a command line sets a key once, and the post-training sets its own */
#define COMMON                                                                                          \
    "--config configs/vil_fashion.cfg --device cpu --set name=init_test --set img_size=16 --set patch_size=4 " \
    "--set stride=4 --set in_chans=1 --set embed_dim=32 --set depth=2 --set num_classes=4 "            \
    "--set drop_path=0.1 --set epochs=2 --set ema_decay=0.9 "                                           \
    "--set mixup=0 --set cutmix=0 --set randaug_n=0 --set workers=1 --set log_every=4 "                \
    "--set eval_every_epochs=0"
static const char *ARGS = COMMON " --set base_lr=0.05 --set warmup_epochs=0.2";

/* a run into dir/name (arch, batch, micro-batches, steps, more flags); rc */
static int train(const char *name, const char *arch, int batch, int accum, int steps, const char *more,
                 char *out, size_t n) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "bin/vil train --data %s --out %s/%s %s --set arch=%s --set batch=%d --set accum_steps=%d "
             "--set max_steps=%d %s 2>&1",
             dir, dir, name, ARGS, arch, batch, accum, steps, more ? more : "");
    int rc = t_run(cmd, out, n);
    if (rc != 0) printf("%s\n", out);
    return rc;
}

/* ||a - b|| / ||a|| of tensor key in two runs' state files (-1: unreadable or absent) */
static double state_diff(const char *a, const char *b, const char *key) { return t_state_diff(dir, a, b, key); }

static void test_same_as_zero(void) {
    static char out[65536];
    const char *arch[2] = {"vil", "vim"};
    for (int a = 0; a < 2; a++) {
        char zero[32], noise0[32], pass1[32], noise[32];
        snprintf(zero, sizeof zero, "zero_%s", arch[a]);
        snprintf(noise0, sizeof noise0, "noise0_%s", arch[a]);
        snprintf(pass1, sizeof pass1, "pass1_%s", arch[a]);
        snprintf(noise, sizeof noise, "noise_%s", arch[a]);
        T_CHECK(train(zero, arch[a], 16, 1, 8, NULL, out, sizeof out) == 0, "%s: zero start, 8 steps", arch[a]);
        T_CHECK(train(noise0, arch[a], 16, 1, 8, "--set init_state=noise --set init_state_sigma=0", out, sizeof out) == 0 &&
                    strstr(out, "init_state") != NULL,
                "%s: noise sigma 0 runs (its config printed)", arch[a]);
        T_CHECK(train(pass1, arch[a], 16, 1, 8, "--set init_state=passing --set init_state_drop=1", out, sizeof out) == 0,
                "%s: passing drop 1 runs", arch[a]);
        T_CHECK(train(noise, arch[a], 16, 1, 8, "--set init_state=noise --set init_state_sigma=0.5", out, sizeof out) == 0,
                "%s: noise sigma 0.5 runs", arch[a]);
        const char *keys[] = {"params", "adam_v"};
        for (int k = 0; k < 2; k++) {
            T_CHECK(state_diff(zero, noise0, keys[k]) == 0.0, "%s: noise sigma 0 trains bitwise as zero (%s)", arch[a], keys[k]);
            T_CHECK(state_diff(zero, pass1, keys[k]) == 0.0, "%s: passing drop 1 trains bitwise as zero (%s)", arch[a], keys[k]);
        }
        double d = state_diff(zero, noise, "params");
        T_CHECK(d > 1e-6, "%s: noise sigma 0.5 changes the training (%.3g)", arch[a], d);
        char pass[32];
        snprintf(pass, sizeof pass, "pass_%s", arch[a]);
        T_CHECK(train(pass, arch[a], 16, 1, 8, "--set init_state=passing", out, sizeof out) == 0, "%s: passing runs", arch[a]);
        d = state_diff(zero, pass, "params");
        T_CHECK(d > 1e-6, "%s: passing (drop 0.1) changes the training (%.3g)", arch[a], d);
        /* fitted's zero starts: with probability 1 every start is zero, whatever the fit */
        char fit1[32];
        snprintf(fit1, sizeof fit1, "fitdrop1_%s", arch[a]);
        T_CHECK(train(fit1, arch[a], 16, 1, 8, "--set init_state=fitted --set init_state_fit=scalar "
                      "--set init_state_fit_drop=1", out, sizeof out) == 0, "%s: fitted, drop 1 runs", arch[a]);
        for (int k = 0; k < 2; k++)
            T_CHECK(state_diff(zero, fit1, keys[k]) == 0.0, "%s: fitted with init_state_fit_drop 1 trains bitwise "
                    "as zero (%s)", arch[a], keys[k]);
    }
    /* the mean alone is not fitted noise */
    T_CHECK(train("fitnoise", "vil", 16, 1, 8, "--set init_state=fitted", out, sizeof out) == 0 &&
                train("fitmean", "vil", 16, 1, 8, "--set init_state=fitted --set init_state_fit_noise=0", out,
                      sizeof out) == 0,
            "fitted with and without noise run");
    double d = state_diff("fitnoise", "fitmean", "params");
    T_CHECK(d > 1e-6, "fitted: the mean alone trains otherwise than N(mean, var) (%.3g)", d);
}

/* tensor key of DIR/run/last.state.safetensors as doubles (n of them), or NULL */
static double *state_tensor(const char *run, const char *key, size_t *n) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s/last.state.safetensors", dir, run);
    VilSafetensors st;
    if (vil_st_read(p, &st) != 0) return NULL;
    const VilStTensor *t = vil_st_find(&st, key);
    double *v = NULL;
    if (t && t->dtype == VIL_ST_F32) {
        *n = t->nbytes / 4;
        v = vil_malloc(*n * sizeof(double));
        for (size_t i = 0; i < *n; i++) v[i] = ((const float *)t->data)[i];
    }
    vil_st_free(&st);
    return v;
}

/* The fit's statistics by hand from the element fit's. With init_state_fit_drop = 1 every run
 * trains as the zero start, so runs with other fits see the same final states: the element fit
 * after one update is the batch's moments (m1, v1); after two with momentum 0.5 it gives the
 * second batch's, b2 = 2 fit - m1; the default momentum's fit is then 0.99 m1 + 0.01 b2, the
 * scalar fit pools a direction's N E elements: mean = their mean, var = the mean of v + m^2
 * less mean^2, each update a moving average with the momentum. */
static void test_fit_by_hand(void) {
    static char out[65536];
    const char *base = "--set init_state=fitted --set init_state_fit_drop=1";
    struct {
        const char *name, *more;
        int steps;
    } runs[] = {{"hand_e1", "", 1}, {"hand_s1", "--set init_state_fit=scalar", 1},
                {"hand_e2", "--set init_state_fit_momentum=0.5", 2}, {"hand_e2d", "", 2},
                {"hand_s2", "--set init_state_fit=scalar --set init_state_fit_momentum=0.5", 2}};
    for (int r = 0; r < 5; r++) {
        char more[512];
        snprintf(more, sizeof more, "%s %s", base, runs[r].more);
        T_CHECK(train(runs[r].name, "vil", 16, 1, runs[r].steps, more, out, sizeof out) == 0, "%s runs", runs[r].name);
    }
    size_t ne = 0, n = 0, ns = 0;
    double *m1 = state_tensor("hand_e1", "init_state_mean", &ne), *v1 = state_tensor("hand_e1", "init_state_var", &n);
    double *m2 = state_tensor("hand_e2", "init_state_mean", &n), *v2 = state_tensor("hand_e2", "init_state_var", &n);
    double *md = state_tensor("hand_e2d", "init_state_mean", &n);
    double *sm1 = state_tensor("hand_s1", "init_state_mean", &ns), *sv1 = state_tensor("hand_s1", "init_state_var", &n);
    double *sm2 = state_tensor("hand_s2", "init_state_mean", &n), *sv2 = state_tensor("hand_s2", "init_state_var", &n);
    if (!m1 || !v1 || !m2 || !v2 || !md || !sm1 || !sv1 || !sm2 || !sv2 || ns != 2 * 2 || ne % ns) {
        T_CHECK(0, "the fits read: element %zu floats, scalar %zu (want depth 2 x 2 directions)", ne, ns);
        return;
    }
    /* the momentum: the default's fit from the first and second batches' moments */
    double num = 0, den = 0;
    for (size_t i = 0; i < ne; i++) {
        double b2 = 2 * m2[i] - m1[i], want = 0.99 * m1[i] + 0.01 * b2;
        num += (md[i] - want) * (md[i] - want), den += want * want;
    }
    T_CLOSE("init_state_fit_momentum: the default 0.99's mean = 0.99 m1 + 0.01 b2, b2 from momentum 0.5's", sqrt(num / den),
            1e-5);
    /* the scalar fit: each (layer, direction) pools its g = N E elements */
    size_t g = ne / ns;
    double err = 0;
    for (size_t k = 0; k < ns; k++) {
        double a1 = 0, q1 = 0, a2 = 0, q2 = 0, a2e = 0;
        for (size_t t = k * g; t < (k + 1) * g; t++) {
            double bm2 = 2 * m2[t] - m1[t], bv2 = 2 * v2[t] - v1[t];
            a1 += m1[t], q1 += v1[t] + m1[t] * m1[t];
            a2 += bm2, q2 += bv2 + bm2 * bm2, a2e += m2[t];
        }
        a1 /= g, q1 /= g, a2 /= g, q2 /= g, a2e /= g;
        double pv1 = q1 - a1 * a1, pv2 = q2 - a2 * a2;
        err = fmax(err, fabs(sm1[k] - a1) / (fabs(a1) + sqrt(pv1)));
        err = fmax(err, fabs(sv1[k] - pv1) / pv1);
        err = fmax(err, fabs(sm2[k] - a2e) / (fabs(a2e) + sqrt(pv1)));
        err = fmax(err, fabs(sv2[k] - (0.5 * pv1 + 0.5 * pv2)) / pv1);
    }
    T_CLOSE("init_state_fit = scalar: per layer and direction, the pooled mean and variance of the element fit's", err,
            1e-4);
    double *all[] = {m1, v1, m2, v2, md, sm1, sv1, sm2, sv2};
    for (int i = 0; i < 9; i++) free(all[i]);
}

/* a run of 12 steps against one stopped at 5 and resumed: every tensor of the state bitwise */
static void resume_case(const char *tag, const char *arch, int batch, int accum, const char *more) {
    static char out[65536];
    char full[64], half[64], cmd[4096];
    snprintf(full, sizeof full, "full_%s", tag);
    snprintf(half, sizeof half, "half_%s", tag);
    char extra[512];
    snprintf(extra, sizeof extra, "%s --stop-after 5", more);
    T_CHECK(train(full, arch, batch, accum, 12, more, out, sizeof out) == 0, "%s: 12 steps", tag);
    T_CHECK(train(half, arch, batch, accum, 12, extra, out, sizeof out) == 0, "%s: stopped after 5", tag);
    snprintf(cmd, sizeof cmd, "bin/vil train --data %s --resume %s/%s 2>&1", dir, dir, half);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && !strstr(out, "warning"), "%s: resumed to 12 without a warning (rc %d)\n%s", tag, rc, out);
    const char *keys[] = {"params", "adam_m", "adam_v", "ema", "init_state_mean", "init_state_var", "init_state_prev"};
    for (int k = 0; k < 7; k++) {
        double d = state_diff(full, half, keys[k]);
        int mine = k < 4 || (strstr(more, "fitted") && k < 6 && k >= 4) || (strstr(more, "passing") && k == 6);
        if (!mine) {
            T_CHECK(d < 0, "%s: no %s in the state", tag, keys[k]);
            continue;
        }
        T_CHECK(d == 0.0, "%s: resumed at 5 = uninterrupted at 12, bitwise: %s (%g)", tag, keys[k], d);
    }
}

static void test_resume(void) {
    resume_case("noise", "vil", 16, 1, "--set init_state=noise --set init_state_sigma=0.3");
    resume_case("fitted", "vil", 16, 1, "--set init_state=fitted");
    resume_case("passing", "vil", 16, 1, "--set init_state=passing");
    resume_case("passing_vim", "vim", 16, 1, "--set init_state=passing --set init_state_drop=0.5");
    resume_case("passing_accum", "vil", 8, 2, "--set init_state=passing");
    resume_case("fitted_accum", "vim", 8, 2, "--set init_state=fitted");
    resume_case("fitted_scalar", "vil", 16, 1, "--set init_state=fitted --set init_state_fit=scalar "
                "--set init_state_fit_momentum=0.9");
    resume_case("fitted_mean_drop", "vim", 16, 1, "--set init_state=fitted --set init_state_fit_noise=0 "
                "--set init_state_fit_drop=0.1");
    /* the saved fit: one update per micro-batch, variances >= 0 */
    char p[4096];
    snprintf(p, sizeof p, "%s/full_fitted_accum/last.state.safetensors", dir);
    VilSafetensors st;
    if (vil_st_read(p, &st) == 0) {
        const char *fits = vil_st_meta(&st, "vil.init_state_fits");
        const VilStTensor *v = vil_st_find(&st, "init_state_var");
        int nonneg = v != NULL;
        for (size_t i = 0; v && i < v->nbytes / 4; i++) nonneg &= ((const float *)v->data)[i] >= 0.0f;
        T_CHECK(fits && strcmp(fits, "24") == 0 && v && v->ndim == 4 && v->shape[0] == 2 && v->shape[1] == 2 &&
                    nonneg,
                "fitted: 12 steps x 2 micro-batches = 24 fits (%s), var (depth 2, 2 directions, N, E) >= 0",
                fits ? fits : "none");
        vil_st_free(&st);
    } else {
        T_CHECK(0, "the fitted run's state file reads");
    }
    snprintf(p, sizeof p, "%s/full_fitted_scalar/last.state.safetensors", dir);
    if (vil_st_read(p, &st) == 0) {
        const char *fits = vil_st_meta(&st, "vil.init_state_fits");
        const VilStTensor *v = vil_st_find(&st, "init_state_mean");
        T_CHECK(fits && strcmp(fits, "12") == 0 && v && v->ndim == 2 && v->shape[0] == 2 && v->shape[1] == 2,
                "fitted scalar: 12 fits (%s), mean (depth 2, 2 directions)", fits ? fits : "none");
        vil_st_free(&st);
    } else {
        T_CHECK(0, "the scalar fit's state file reads");
    }
}

/* noise is keyed by the sample's place in the global batch: 1 x 16 = 2 x 8 micro-batches */
static void test_noise_split(void) {
    static char out[65536];
    const char *more = "--set init_state=noise --set init_state_sigma=0.3";
    T_CHECK(train("split1", "vil", 16, 1, 6, more, out, sizeof out) == 0, "noise 1 x 16");
    T_CHECK(train("split2", "vil", 8, 2, 6, more, out, sizeof out) == 0, "noise 2 x 8");
    double d = state_diff("split1", "split2", "params");
    T_CLOSE("noise: 2 micro-batches x 8 = 1 x 16 after 6 steps (params)", d < 0 ? 1.0 : d, 1e-5);
}

static void test_bad_input(void) {
    static char out[65536];
    struct {
        const char *set, *says;
    } bad[] = {{"init_state=warm", "init_state must be zero, noise, fitted or passing"},
               {"init_state_sigma=-0.1", "init_state_sigma"},
               {"init_state_drop=1.5", "init_state_drop"},
               {"init_state_drop=-0.5", "init_state_drop"},
               {"init_state_fit=head", "init_state_fit must be element or scalar"},
               {"init_state_fit_noise=2", "init_state_fit_noise"},
               {"init_state_fit_momentum=1", "init_state_fit_momentum"},
               {"init_state_fit_drop=1.5", "init_state_fit_drop"},
               {"init_state=noise --set init_state_fit=scalar", "apply to init_state = fitted"},
               {"init_state=passing --set init_state_fit_drop=0.1", "apply to init_state = fitted"}};
    for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "bin/vil train --data %s --out %s/bad %s --set %s 2>&1", dir, dir, ARGS, bad[i].set);
        int rc = t_run(cmd, out, sizeof out);
        T_CHECK(rc == 2 && strstr(out, bad[i].says), "--set %s: exit 2 naming it (rc %d): %s", bad[i].set, rc, out);
    }
}

/* DIR/run's state with its init_state_mean from the state file `from` (NULL: its own, cut to
 * half), resumed: rc, the output in out */
static int resume_tampered(const char *run, const char *from, char *out, size_t n) {
    char src[4096], alt[4096], dst[4096], cmd[8192];
    snprintf(src, sizeof src, "%s/%s/last.state.safetensors", dir, run);
    snprintf(alt, sizeof alt, "%s/%s/last.state.safetensors", dir, from ? from : run);
    VilSafetensors st, sa;
    if (vil_st_read(src, &st) != 0) return -1;
    if (vil_st_read(alt, &sa) != 0) {
        vil_st_free(&st);
        return -1;
    }
    VilStWriter *w = vil_st_writer_new();
    for (int i = 0; i < st.n_tensors; i++) {
        const VilStTensor *t = &st.tensors[i], *a = vil_st_find(&sa, t->name);
        int64_t half[1] = {t->shape[0] / 2};
        if (strcmp(t->name, "init_state_mean") != 0) vil_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data);
        else if (!from) vil_st_writer_add(w, t->name, t->dtype, 1, half, t->data);
        else if (a) vil_st_writer_add(w, t->name, a->dtype, a->ndim, a->shape, a->data);
    }
    for (int i = 0; i < st.n_meta; i++) vil_st_writer_meta(w, st.meta_keys[i], st.meta_vals[i]);
    snprintf(dst, sizeof dst, "%s/tampered.state.safetensors", dir);
    int rc = vil_st_writer_save(w, dst);
    vil_st_writer_free(w);
    vil_st_free(&st);
    vil_st_free(&sa);
    if (rc != 0) return -1;
    snprintf(cmd, sizeof cmd, "rm -rf %s/tampered && mkdir -p %s/tampered && cp %s %s/tampered/last.state.safetensors && "
             "bin/vil train --data %s --resume %s/tampered 2>&1", dir, dir, dst, dir, dir, dir);
    return t_run(cmd, out, n);
}

/* a state whose fitted statistics are not the model's shape: refused by name on resume */
static void test_mismatched_fit(void) {
    static char out[65536];
    int rc = resume_tampered("half_fitted", NULL, out, sizeof out);
    T_CHECK(rc > 0 && strstr(out, "init_state_mean") && strstr(out, "does not match the model"),
            "resume refuses fitted statistics of another shape, by name (rc %d): %s", rc, out);
    /* an element fit where the run fits scalars (and the other way round) */
    rc = resume_tampered("half_fitted_scalar", "half_fitted", out, sizeof out);
    T_CHECK(rc > 0 && strstr(out, "init_state_mean") && strstr(out, "2 layers x 2 directions =") &&
                strstr(out, "does not match the model"),
            "a scalar run refuses an element fit's mean, by name and shape (rc %d): %s", rc, out);
    rc = resume_tampered("half_fitted", "half_fitted_scalar", out, sizeof out);
    T_CHECK(rc > 0 && strstr(out, "init_state_mean") && strstr(out, "does not match the model"),
            "an element run refuses a scalar fit's mean (rc %d): %s", rc, out);
}

/* post-training: a finished run's checkpoint trained on with an intervention at a lower lr */
static void test_post_training(void) {
    static char out[65536];
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "bin/vil train --data %s --out %s/post %s --set arch=vil --set batch=16 --init %s/zero_vil/last.safetensors "
             "--set init_state=passing --set base_lr=0.005 --set warmup_epochs=0 --set max_steps=6 2>&1",
             dir, dir, COMMON, dir);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "init:  ") && strstr(out, "zero_vil/last.safetensors"),
            "vil train --init CKPT --set init_state=passing: post-training runs from the checkpoint (rc %d)\n%s", rc, out);
}

int main(void) {
    setenv("OMP_NUM_THREADS", "2", 0);
    test_ops();
    test_ops_ablations();
    dir = corpus_mkdtemp("init_state");
    corpus_write_idx_set(dir, "train", 192, 16, 16, 4, 0);
    corpus_write_idx_set(dir, "t10k", 64, 16, 16, 4, 0);
    test_same_as_zero();
    test_resume();
    test_fit_by_hand();
    test_noise_split();
    test_bad_input();
    test_mismatched_fit();
    test_post_training();
    corpus_rmtree(dir);
    return t_finish();
}
