/* test_states.c: `vil states` on a tiny ViL and ViM (trained grid 7 x 7 + 1 = 50 tokens, run at
 * 20 px: 82 tokens) over a small IDX set. The norms in its CSV against a double-precision
 * recurrence (doc/scans.md) run here on the model's own activations for the same image, by token
 * and scan step; the final states against the last step; the readout states (after the class
 * token) and their distance to a reference run against the same recurrence; batching that does
 * not change the numbers; the outputs' shapes; and misuse. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_corpus.h"
#include "model_testing.h"
#include "testing.h"
#include "data/dataset.h"
#include "eval/eval.h"
#include "vil/vim.h"
#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "vil/common.h"
#include "vil/config.h"
#include "vil/model.h"
#include "vil/vim.h"

static char *dir;

typedef struct {
    int layer, dir, step, token;
    double mean, sd;
} Row;

/* the CSV's rows (malloc'd, *n of them), or NULL when the header is not the expected one */
static Row *read_csv(const char *path, int *n) {
    size_t len;
    char *s = (char *)vil_read_file(path, &len);
    *n = 0;
    if (!s) return NULL;
    const char *hdr = "layer,direction,step,token,mean_norm,sd_norm\n";
    if (strncmp(s, hdr, strlen(hdr)) != 0) {
        free(s);
        return NULL;
    }
    int cap = 0;
    for (size_t i = 0; i < len; i++) cap += s[i] == '\n';
    Row *r = vil_calloc((size_t)cap, sizeof(Row));
    char *line = s + strlen(hdr), *next;
    for (; *line && *n < cap; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        else next = line + strlen(line);
        char d[16];
        Row *w = &r[*n];
        if (sscanf(line, "%d,%15[a-z],%d,%d,%lf,%lf", &w->layer, d, &w->step, &w->token, &w->mean, &w->sd) != 6) break;
        w->dir = strcmp(d, "backward") == 0 ? 1 : strcmp(d, "forward") == 0 ? 0 : -1;
        (*n)++;
    }
    free(s);
    return r;
}

/* a tiny model as cfg files describe one: 16 px gray, patch 4 stride 2, depth 2, moved off its
 * init so the states change along the sequence; saved with its config */
static double *reference_norms_opts(const char *ckpt, const VilCheckpointOpts *lo, int *L_out, double *hr, int *cls_out);
static double *reference_norms(const char *ckpt, int img_size, int *L_out, double *hr, int *cls_out) {
    return reference_norms_opts(ckpt, &(VilCheckpointOpts){.img_size = img_size}, L_out, hr, cls_out);
}

static void make_model(const char *arch, const char *path) {
    T_CHECK(t_write_tiny(arch, 1, 7, path, 0, NULL) == 0, "%s checkpoint written", arch);
}

/* ||h_t|| of every layer, direction and token (depth, 2, L) for the first image of the split at
 * img_size: the model's forward through the library (the evaluation loader, as the command),
 * then doc/scans.md's recurrence in double precision on its activations; and into hr (unless
 * NULL; depth x 2 x N x E, (n, e) at n E + e) each direction's state after it reads the class
 * token, *cls_out */
static double *reference_norms_opts(const char *ckpt, const VilCheckpointOpts *lo, int *L_out, double *hr, int *cls_out) {
    VilModel m;
    VilCheckpointMeta meta;
    if (vil_checkpoint_load(ckpt, &vil_backend_cpu, lo, &m, &meta) != 0) return NULL;
    VilDataset *ds = vil_dataset_open(dir, "val", NULL);
    VilEvalSpec ev;
    vil_eval_spec_resolve(&ev, &meta, 1.0f, 1, NULL, 0);
    m.cfg.drop_path = 0;
    T_CHECK(vil_model_alloc_acts(&m, 1, 1) == 0, "vil_model_alloc_acts(&m, 1, 1)");
    VilLoader *l = vil_eval_loader(&m, ds, &ev, 1, 1, NULL);
    vil_loader_start_epoch(l, 0);
    const VilBatch *b = vil_loader_next_batch(l);
    vil_model_upload_inputs(&m, b->images, NULL);
    vil_loader_release_batch(l, b);
    vil_model_forward(&m, 0);
    const VilConfig *c = &m.cfg;
    int L = c->seq_len, E = c->d_inner, N = c->d_state, dl, xld;
    vil_vim_xdbl_layout(c, &dl, &xld);
    int mamba = strcmp(c->arch, "vim") == 0;
    float *params = vil_malloc(m.buf_len * sizeof(float));
    vil_model_get_params(&m, params);
    double *out = vil_calloc((size_t)c->depth * 2 * L, sizeof(double));
    for (int i = 0; i < c->depth; i++)
        for (int j = 0; j < 2; j++) {
            /* the activations by name (float32 on the CPU backend) */
            char nu[64], nd[64], nx[64], na[64];
            const char *sfx = j ? "_b" : "";
            snprintf(nu, sizeof nu, "layers.%d.mixer.u%s", i, sfx);
            snprintf(nd, sizeof nd, "layers.%d.mixer.delta%s", i, sfx);
            snprintf(nx, sizeof nx, "layers.%d.mixer.x_dbl%s", i, sfx);
            snprintf(na, sizeof na, "layers.%d.mixer.A%s_log", i, sfx);
            VilActView vu, vd, vx;
            if (vil_model_act(&m, nu, &vu) || vil_model_act(&m, nd, &vd) || vil_model_act(&m, nx, &vx)) return NULL;
            const float *u = vu.data, *delta = vd.data, *x = vx.data;
            const VilParamInfo *pa = vil_model_find_param(&m, na);
            const float *A_log = pa ? params + pa->offset : NULL;
            double *hsq = out + ((size_t)i * 2 + j) * L;
            for (int d = 0; d < E; d++) {
                double h[16] = {0};
                for (int s = 0; s < L; s++) {
                    int t = j ? L - 1 - s : s;
                    const float *k = x + (size_t)t * xld + dl;
                    double uu = u[(size_t)t * E + d], dd = delta[(size_t)t * E + d];
                    if (mamba) {
                        double dt = dd > 20 ? dd : log1p(exp(dd));
                        for (int n = 0; n < N; n++)
                            h[n] = exp(-dt * exp((double)A_log[d * N + n])) * h[n] + dt * uu * k[n];
                    } else {
                        double beta = 1 / (1 + exp(-dd)), kappa = 0;
                        for (int n = 0; n < N; n++) kappa += (double)k[n] * k[n];
                        double eps = beta / (1 + beta * kappa);
                        for (int n = 0; n < N; n++) h[n] += eps * k[n] * (uu - k[n] * h[n]);
                    }
                    for (int n = 0; n < N; n++) hsq[t] += h[n] * h[n];
                    if (hr && t == c->cls_pos)
                        for (int n = 0; n < N; n++) hr[(((size_t)i * 2 + j) * N + n) * E + d] = h[n];
                }
            }
            for (int t = 0; t < L; t++) hsq[t] = sqrt(hsq[t]);
        }
    *L_out = L;
    if (cls_out) *cls_out = c->cls_pos;
    free(params);
    vil_loader_free(l);
    vil_dataset_free(ds);
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&m);
    return out;
}

static cJSON *read_json(const char *path) {
    size_t n;
    char *s = (char *)vil_read_file(path, &n);
    cJSON *o = s ? cJSON_ParseWithLength(s, n) : NULL;
    free(s);
    return o;
}

/* one image at 20 px: every row against the double-precision reference */
static void test_one_image(const char *arch) {
    char ckpt[4200], cmd[16384], out[16384], p[4200];
    snprintf(ckpt, sizeof ckpt, "%s/%s.safetensors", dir, arch);
    make_model(arch, ckpt);
    snprintf(cmd, sizeof cmd, "bin/vil states --device cpu --threads 2 --model %s --data %s --img-size 20 "
             "--limit 1 --batch 1 --workers 1 --crop-pct 1 --out %s/%s1 2>&1", ckpt, dir, dir, arch);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "82 tokens (trained at 16 px: 50 tokens)"), "%s: vil states exits 0 (%d): %s", arch, rc, out);
    int L = 0, n;
    double *ref = reference_norms(ckpt, 20, &L, NULL, NULL);
    snprintf(p, sizeof p, "%s/%s1/states.csv", dir, arch);
    Row *r = read_csv(p, &n);
    T_CHECK(ref && L == 82, "%s: reference at 20 px: %d tokens", arch, L);
    T_CHECK(r && n == 2 * 2 * 82, "%s: the CSV has depth x 2 x L = 328 rows (%d)", arch, n);
    if (!ref || !r || n != 328) {
        free(ref), free(r);
        return;
    }
    double worst = 0, lo = INFINITY, hi = 0;
    int order = 1, mapping = 1, sd0 = 1, finite = 1;
    for (int k = 0; k < n; k++) {
        const Row *w = &r[k];
        /* rows by layer, direction, step; the step is the tokens read: backward starts at L - 1 */
        order &= w->layer == k / 164 && w->dir == (k / 82) % 2 && w->step == k % 82 + 1;
        mapping &= w->token == (w->dir ? L - w->step : w->step - 1);
        sd0 &= w->sd == 0;
        finite &= isfinite(w->mean) && w->mean >= 0 && isfinite(w->sd) && w->sd >= 0;
        if (w->layer < 0 || w->layer > 1 || w->dir < 0 || w->token < 0 || w->token >= L) continue;
        double want = ref[((size_t)w->layer * 2 + w->dir) * L + w->token];
        double e = fabs(w->mean - want) / (want > 1e-3 ? want : 1e-3);
        worst = e > worst ? e : worst;
        lo = want < lo ? want : lo, hi = want > hi ? want : hi;
    }
    T_CHECK(order && mapping, "%s: rows in layer, direction, step order; token = step - 1 forward, L - step backward", arch);
    T_CHECK(sd0 && finite, "%s: one image: every sd is 0, every value finite and >= 0", arch);
    char name[96];
    snprintf(name, sizeof name, "%s: ||h_t|| against the float64 recurrence", arch);
    T_CLOSE(name, worst, 1e-4);
    T_CHECK(hi > 2 * lo && hi > 1e-2, "%s: the norms vary along the sequence (%g..%g): the check can fail", arch, lo, hi);
    /* the JSON: the model's numbers, and each final state is the state after the last step */
    snprintf(p, sizeof p, "%s/%s1/states.json", dir, arch);
    cJSON *o = read_json(p);
    cJSON *ls = cJSON_GetObjectItem(o, "layers");
    T_CHECK(o && cJSON_GetNumberValue(cJSON_GetObjectItem(o, "tokens")) == 82 &&
                cJSON_GetNumberValue(cJSON_GetObjectItem(o, "train_tokens")) == 50 &&
                cJSON_GetNumberValue(cJSON_GetObjectItem(o, "train_img_size")) == 16 &&
                cJSON_GetNumberValue(cJSON_GetObjectItem(o, "img_size")) == 20 &&
                cJSON_GetNumberValue(cJSON_GetObjectItem(o, "images")) == 1 && cJSON_GetArraySize(ls) == 4,
            "%s: JSON: 82 tokens at 20 px, trained 50 at 16, 1 image, 4 series", arch);
    double fworst = 0;
    for (int k = 0; k < cJSON_GetArraySize(ls); k++) {
        cJSON *e = cJSON_GetArrayItem(ls, k), *mn = cJSON_GetObjectItem(e, "mean_norm");
        int j = strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(e, "direction")), "backward") == 0;
        double last = ref[((size_t)(k / 2) * 2 + j) * L + (j ? 0 : L - 1)];
        double f = cJSON_GetNumberValue(cJSON_GetObjectItem(e, "final_mean"));
        double m82 = cJSON_GetNumberValue(cJSON_GetArrayItem(mn, L - 1));
        T_CHECK(cJSON_GetArraySize(mn) == L && j == k % 2, "%s: series %d: %d steps", arch, k, cJSON_GetArraySize(mn));
        fworst = fmax(fworst, fmax(fabs(f - last), fabs(m82 - last)) / last);
    }
    snprintf(name, sizeof name, "%s: final state = state after step L", arch);
    T_CLOSE(name, fworst, 1e-4);
    cJSON_Delete(o);
    snprintf(p, sizeof p, "%s/%s1/states.svg", dir, arch);
    size_t len;
    char *svg = (char *)vil_read_file(p, &len);
    T_CHECK(svg && (strncmp(svg, "<svg", 4) == 0 || strncmp(svg, "<?xml", 5) == 0) && strstr(svg, "</svg>") &&
                strstr(svg, "training length (50 tokens)") && strstr(svg, "layer 1") && !t_has_nan_inf(svg),
            "%s: the SVG: a document with the layers and the training length", arch);
    free(svg);
    free(ref);
    free(r);
}

/* five images in batches of 2 (the last one partial) and of 5: the same numbers */
static void test_batches(void) {
    char cmd[16384], out[16384], p[4200];
    int n[2];
    Row *r[2];
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "bin/vil states --device cpu --threads 2 --model %s/vil.safetensors --data %s "
                 "--limit 5 --batch %d --workers 1 --out %s/b%d 2>&1", dir, dir, k ? 5 : 2, dir, k);
        int rc = t_run(cmd, out, sizeof out);
        T_CHECK(rc == 0 && strstr(out, "5 images in"), "--limit 5 --batch %d: exit %d: %s", k ? 5 : 2, rc, out);
        snprintf(p, sizeof p, "%s/b%d/states.csv", dir, k);
        r[k] = read_csv(p, &n[k]);
    }
    T_CHECK(r[0] && r[1] && n[0] == 2 * 2 * 50 && n[1] == n[0], "own size: 200 rows each (%d, %d)", n[0], n[1]);
    double worst = 0;
    int spread = 0;
    for (int k = 0; r[0] && r[1] && k < n[0] && k < n[1]; k++) {
        worst = fmax(worst, fabs(r[0][k].mean - r[1][k].mean) / fmax(r[1][k].mean, 1e-3));
        worst = fmax(worst, fabs(r[0][k].sd - r[1][k].sd) / fmax(r[1][k].mean, 1e-3));
        spread += r[1][k].sd > 0;
    }
    T_CLOSE("batch 2 against batch 5 (mean and sd)", worst, 1e-5);
    T_CHECK(spread > n[1] / 2, "five different images: the sd is positive (%d of %d rows)", spread, n[1]);
    free(r[0]);
    free(r[1]);
}

/* a readout reference's mean and var (depth 2, 2 directions, S each) read back, or 0 */
static int read_ref(const char *path, int S, float *mean, float *var) {
    VilSafetensors st;
    if (vil_st_read(path, &st) != 0) return 0;
    const VilStTensor *a = vil_st_find(&st, "mean"), *b = vil_st_find(&st, "var");
    int ok = a && b && a->ndim == 3 && a->shape[0] == 2 && a->shape[1] == 2 && a->shape[2] == S &&
             vil_st_to_f32(a, mean) == 0 && vil_st_to_f32(b, var) == 0;
    vil_st_free(&st);
    return ok;
}

/* the readout: one image's states after the class token (OUT/readout.safetensors, var 0) against
 * the float64 recurrence; a run against its own reference gives d = 1; one image at 20 px
 * against a 5-image reference at 16 px gives the distance the test computes from the file and
 * the recurrence's states; --pos reaches the states' loader */
static void test_readout(const char *arch) {
    char ckpt[4200], cmd[16384], out[16384], p[4200], name[128];
    snprintf(ckpt, sizeof ckpt, "%s/%s.safetensors", dir, arch);
    const int N = 4, E = 2 * 8, S = N * E; /* t_write_tiny: d_state 4, embed_dim 8, expand 2 */
    size_t n = (size_t)2 * 2 * S;
    double *hr = vil_calloc(n, sizeof(double));
    float *mean = vil_malloc(n * sizeof(float)), *var = vil_malloc(n * sizeof(float));
    float *rmean = vil_malloc(n * sizeof(float)), *rvar = vil_malloc(n * sizeof(float));
    int L = 0, cls = -1;
    double *norms = reference_norms(ckpt, 20, &L, hr, &cls);
    T_CHECK(norms && L == 82 && cls >= 40 && cls <= 41, "%s: reference at 20 px: 82 tokens, class token in the middle (%d, %d)",
            arch, L, cls);
    /* one image: the file's mean is its state, its variance 0 */
    snprintf(p, sizeof p, "%s/%s1/readout.safetensors", dir, arch);
    int ok = read_ref(p, S, mean, var);
    T_CHECK(ok, "%s: the one-image run wrote readout.safetensors (2, 2, %d)", arch, S);
    if (!norms || cls < 0) {
        free(norms), free(hr), free(mean), free(var), free(rmean), free(rvar);
        return;
    }
    double worst = 0, big = 0, vmax = 0;
    for (size_t i = 0; ok && i < n; i++) big = fmax(big, fabs(hr[i]));
    for (size_t i = 0; ok && i < n; i++) {
        worst = fmax(worst, fabs(mean[i] - hr[i]) / big);
        vmax = fmax(vmax, var[i]);
    }
    snprintf(name, sizeof name, "%s: readout state of one image against the float64 recurrence", arch);
    T_CLOSE(name, worst, 1e-4);
    T_CHECK(ok && vmax < 1e-6 * big * big && big > 1e-2, "%s: one image: var 0 (%g), states not all 0 (%g)", arch, vmax, big);
    /* the readout's norm in the JSON is the norm after the step that reads the class token */
    snprintf(p, sizeof p, "%s/%s1/states.json", dir, arch);
    cJSON *o = read_json(p), *ro = cJSON_GetObjectItem(o, "readout"), *ls = cJSON_GetObjectItem(ro, "layers");
    int jok = ro && cJSON_GetNumberValue(cJSON_GetObjectItem(ro, "token")) == cls && cJSON_GetArraySize(ls) == 4 &&
              !cJSON_GetObjectItem(ro, "distance_mean");
    for (int k = 0; jok && k < 4; k++) {
        double want = norms[(size_t)k * L + cls];
        jok &= fabs(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(ls, k), "norm_mean")) - want) <= 1e-4 * want;
    }
    T_CHECK(jok, "%s: JSON readout: the class token, 4 series whose norm_mean is ||h|| at the class token, no distance without a reference", arch);
    cJSON_Delete(o);
    /* the reference: 5 images at the training size, then the same run against it: d = 1 */
    snprintf(cmd, sizeof cmd, "bin/vil states --device cpu --threads 2 --model %s --data %s --limit 5 --batch 2 "
             "--workers 1 --out %s/%sref 2>&1", ckpt, dir, dir, arch);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0, "%s: reference run at 16 px: exit %d: %s", arch, rc, out);
    snprintf(cmd, sizeof cmd, "bin/vil states --device cpu --threads 2 --model %s --data %s --limit 5 --batch 5 "
             "--workers 1 --readout-ref %s/%sref/readout.safetensors --out %s/%sself 2>&1", ckpt, dir, dir, arch, dir, arch);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "readout distance") && strstr(out, "16 px, 5 images"),
            "%s: against its own reference: exit %d, the distance table naming it: %s", arch, rc, out);
    snprintf(p, sizeof p, "%s/%sself/states.json", dir, arch);
    o = read_json(p), ro = cJSON_GetObjectItem(o, "readout"), ls = cJSON_GetObjectItem(ro, "layers");
    double dself = fabs(cJSON_GetNumberValue(cJSON_GetObjectItem(ro, "distance_mean")) - 1);
    for (int k = 0; k < cJSON_GetArraySize(ls); k++)
        dself = fmax(dself, fabs(cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(ls, k), "distance_mean")) - 1));
    T_CHECK(ro && cJSON_GetArraySize(ls) == 4, "%s: JSON of the self run: a readout with 4 series", arch);
    snprintf(name, sizeof name, "%s: the reference's own images: mean d = 1 (every series and overall)", arch);
    T_CLOSE(name, dself, 1e-5);
    cJSON_Delete(o);
    /* one image at 20 px against it, --pos keep: d by hand from the file and the recurrence */
    snprintf(p, sizeof p, "%s/%sref/readout.safetensors", dir, arch);
    ok = read_ref(p, S, rmean, rvar);
    T_CHECK(ok, "%s: the reference file reads back", arch);
    snprintf(cmd, sizeof cmd, "bin/vil states --device cpu --threads 2 --model %s --data %s --img-size 20 --pos keep "
             "--limit 1 --batch 1 --workers 1 --crop-pct 1 --readout-ref %s --out %s/%s20 2>&1", ckpt, dir, p, dir, arch);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "pos_embed kept (top-left, edges extended) from the trained 7 x 7 grid"),
            "%s: at 20 px with --pos keep: exit %d, says so: %s", arch, rc, out);
    double *hk = vil_calloc(n, sizeof(double)); /* the recurrence on the kept grid's forward */
    int Lk = 0;
    VilCheckpointOpts keep = {.img_size = 20, .pos = VIL_POS_KEEP};
    double *nk = reference_norms_opts(ckpt, &keep, &Lk, hk, NULL);
    snprintf(p, sizeof p, "%s/%s20/states.json", dir, arch);
    o = read_json(p), ro = cJSON_GetObjectItem(o, "readout"), ls = cJSON_GetObjectItem(ro, "layers");
    double dworst = 0, dsum = 0, dmin = INFINITY;
    for (int k = 0; ok && nk && k < 4; k++) {
        double num = 0, tr = 0;
        for (int e = 0; e < S; e++) {
            double x = hk[(size_t)k * S + e] - rmean[(size_t)k * S + e];
            num += x * x, tr += rvar[(size_t)k * S + e];
        }
        double want = num / tr, got = cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetArrayItem(ls, k), "distance_mean"));
        dworst = fmax(dworst, fabs(got - want) / want);
        dsum += want, dmin = fmin(dmin, want);
    }
    double dall = cJSON_GetNumberValue(cJSON_GetObjectItem(ro, "distance_mean"));
    dworst = fmax(dworst, fabs(dall - dsum / 4) / (dsum / 4));
    snprintf(name, sizeof name, "%s: d of one 20-px image against the 16-px reference, by hand", arch);
    T_CLOSE(name, dworst, 1e-3);
    T_CHECK(dmin > 1e-3, "%s: the distances are not 0 (%g): the check can fail", arch, dmin);
    cJSON_Delete(o);
    free(nk), free(hk), free(norms), free(hr), free(mean), free(var), free(rmean), free(rvar);
}

/* a reference of other shapes, a file that is none, and an output that would replace it */
static void test_readout_misuse(void) {
    char p[4200], cmd[16384], out[16384];
    snprintf(p, sizeof p, "%s/wrong.safetensors", dir);
    VilStWriter *w = vil_st_writer_new();
    float z[2 * 2 * 8] = {0};
    int64_t shape[3] = {2, 2, 8};
    vil_st_writer_add(w, "mean", VIL_ST_F32, 3, shape, z);
    vil_st_writer_add(w, "var", VIL_ST_F32, 3, shape, z);
    vil_st_writer_meta(w, "format", "vil-readout-states");
    T_CHECK(vil_st_writer_save(w, p) == 0, "a reference of (2, 2, 8) written");
    vil_st_writer_free(w);
    static const struct {
        const char *ref, *out;
        int rc;
        const char *says;
    } cases[] = {
        {"wrong.safetensors", "m1", 1, "is not (2, 2, 64), this model's layers and state"},
        {"vil.safetensors", "m2", 1, "not a readout reference"},
        {"absent.safetensors", "m3", 1, "absent.safetensors"},
        {"vilref/readout.safetensors", "vilref", 2, "readout.safetensors"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(cmd, sizeof cmd, "bin/vil states --device cpu --model %s/vil.safetensors --data %s --limit 1 "
                 "--readout-ref %s/%s --out %s/%s 2>&1", dir, dir, dir, cases[i].ref, dir, cases[i].out);
        int rc = t_run(cmd, out, sizeof out);
        T_CHECK(rc == cases[i].rc && strstr(out, cases[i].says), "--readout-ref %s --out %s: exit %d (want %d), says '%s': %.300s",
                cases[i].ref, cases[i].out, rc, cases[i].rc, cases[i].says, out);
    }
}

static void test_misuse(void) {
    static const struct {
        const char *args;
        int rc;
        const char *says;
    } cases[] = {
        {"--data {D}", 2, "--model and --data are required"},
        {"--model {M}", 2, "--model and --data are required"},
        {"--model {M} --data {D} --img-size 0", 2, "--img-size 0 is out of range"},
        {"--model {M} --data {D} --limit -1", 2, "--limit -1 is out of range"},
        {"--model {M} --data {D} --images 5", 2, "unknown flag '--images'"},
        {"--model {M} --data {D} --batch 0", 2, "--batch 0 is out of range"},
        {"--model {M} --data {D} --device gpu", 2, "--device"},
        {"--model {M} --data {D} --imgsize 20", 2, "did you mean --img-size"},
        {"--model {M} --data {D} --img-size 17", 1, "does not fit patch 4 with stride 2"},
        {"--model {D}/none.safetensors --data {D}", 1, "none.safetensors"},
        {"--model {M} --data {D}/nothing", 1, "nothing"},
    };
    char m[4200], cmd[16384], out[16384];
    snprintf(m, sizeof m, "%s/vil.safetensors", dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char a[8192];
        size_t k = 0;
        for (const char *c = cases[i].args; *c && k < sizeof a - 4200; c++) {
            const char *sub = !strncmp(c, "{M}", 3) ? m : !strncmp(c, "{D}", 3) ? dir : NULL;
            if (sub) k += (size_t)snprintf(a + k, sizeof a - k, "%s", sub), c += 2;
            else a[k++] = *c;
        }
        a[k] = 0;
        snprintf(cmd, sizeof cmd, "bin/vil states --device cpu --out %s/misuse %s 2>&1", dir, a);
        if (strstr(a, "--device gpu")) snprintf(cmd, sizeof cmd, "bin/vil states --out %s/misuse %s 2>&1", dir, a);
        int rc = t_run(cmd, out, sizeof out);
        T_CHECK(rc == cases[i].rc && strstr(out, cases[i].says), "vil states %s: exit %d (want %d), says '%s': %.300s",
                a, rc, cases[i].rc, cases[i].says, out);
    }
}

int main(void) {
    dir = corpus_mkdtemp("states");
    corpus_write_idx_set(dir, "t10k", 6, 16, 16, 3, 0);
    test_one_image("vil");
    test_one_image("vim");
    test_readout("vil");
    test_readout("vim");
    test_readout_misuse();
    test_batches();
    test_misuse();
    corpus_rmtree(dir);
    free(dir);
    return t_finish();
}
