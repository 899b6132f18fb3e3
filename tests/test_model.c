/* test_model.c: the whole network on the CPU: parameter counts of the published sizes, the
 * gradient of the loss with respect to every parameter tensor and the input image against
 * central finite differences (small configs, ViL and ViM, with drop path), inference-mode
 * forward equal to training-mode forward, and a few AdamW steps lowering the loss.
 * Tolerance of the whole-model check: 0.1 relative, on directional derivatives (gradcheck.h).
 * The float32 forward of a 3-block network leaves ~1e-6 of rounding noise in the loss, and
 * the worst tensors measured 2e-2..4e-2 over five seeds; a wrong gradient measures O(1). Each
 * op alone is held to 5e-3 in test_ops.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "gradcheck.h"
#include "model_testing.h"
#include "testing.h"
#include "vil/common.h"
#include "vil/model.h"

static VilRng rng;

static void test_counts(void) {
    struct {
        const char *arch;
        int D;
        size_t want;
    } cases[] = {{"vil", 192, 6853096}, {"vil", 384, 25206760}, {"vim", 192, 7148008},
                 {"vim", 384, 25796584}, {"vim", 768, 97598440}};
    for (int i = 0; i < 5; i++) {
        VilConfig c;
        vil_config_default(&c);
        strcpy(c.arch, cases[i].arch);
        c.embed_dim = cases[i].D;
        T_CHECK(vil_config_finalize(&c) == 0, "finalize");
        size_t n = vil_model_count_params(&c);
        T_CHECK(n == cases[i].want, "%s D=%d: %zu parameters, want %zu", cases[i].arch,
                cases[i].D, n, cases[i].want);
        printf("%s %s D=%d: %zu parameters\n", n == cases[i].want ? "ok  " : "FAIL",
               cases[i].arch, cases[i].D, n);
    }
    /* the shipped cfg files */
    const char *files[2] = {"configs/vil_tiny.cfg", "configs/vil_small.cfg"};
    size_t want[2] = {6853096, 25206760};
    for (int i = 0; i < 2; i++) {
        VilConfig c;
        vil_config_default(&c);
        int ok = vil_config_load(&c, files[i]) == 0 && vil_config_finalize(&c) == 0;
        T_CHECK(ok && vil_model_count_params(&c) == want[i], "%s: parameter count", files[i]);
    }
    /* without a position embedding: L * D = 197 * 192 = 37,824 fewer */
    VilConfig c;
    vil_config_default(&c);
    int ok = vil_config_set(&c, "pos_embed", "none") == 0 && vil_config_finalize(&c) == 0;
    T_CHECK(ok && vil_model_count_params(&c) == 6853096 - 37824, "vil_tiny, pos_embed none: %zu parameters, want 6815272",
            vil_model_count_params(&c));
}

typedef struct {
    VilModel *m;
} Ctx;

static double model_loss(void *p) {
    VilModel *m = ((Ctx *)p)->m;
    vil_model_forward(m, 1);
    double s = 0;
    for (int b = 0; b < m->acts.B; b++) s += m->acts.losses[b];
    return s / m->acts.B;
}

static void small_config(VilConfig *c, const char *arch) {
    vil_config_default(c);
    strcpy(c->arch, arch);
    c->img_size = 16;
    c->patch_size = 4;
    c->stride = 3; /* overlapping patches: G = 5, L = 26 */
    c->in_chans = 3;
    c->embed_dim = 8;
    c->depth = 3;
    c->d_state = 4;
    c->num_classes = 5;
}

static void fill_batch(VilModel *m) {
    const VilConfig *c = &m->cfg;
    int B = m->acts.B;
    gc_fill(m->acts.img, (size_t)B * c->in_chans * c->img_size * c->img_size, 1.0f, &rng);
    /* soft targets: label smoothing 0.1 and a mixup pair */
    for (int b = 0; b < B; b++) {
        float *t = m->acts.targets + (size_t)b * c->num_classes;
        for (int k = 0; k < c->num_classes; k++) t[k] = 0.1f / c->num_classes;
        t[b % c->num_classes] += 0.9f * 0.6f;
        t[(b + 1) % c->num_classes] += 0.9f * 0.4f;
    }
}

/* set: a model key=value beside the small config (NULL: none) */
static void test_gradients(const char *arch, float drop_path, const char *set) {
    VilConfig c;
    small_config(&c, arch);
    c.drop_path = drop_path;
    if (set) T_CHECK(vil_config_set_kv(&c, set) == 0, "%s", set);
    T_CHECK(vil_config_finalize(&c) == 0, "finalize small config");
    VilModel m;
    vil_model_init(&m, &c, &vil_backend_cpu);
    vil_model_init_weights(&m, 7);
    T_CHECK((vil_model_find_param(&m, "pos_embed") != NULL) == (c.pos_embed_kind == VIL_POS_EMBED_LEARNED),
            "%s: a pos_embed tensor exactly when pos_embed = learned", set ? set : arch);
    /* move the parameters off their init values (norms 1, D 1, biases 0) so that every path
     * carries gradient */
    float *p = vil_malloc(m.buf_len * sizeof(float));
    t_perturbed_params(&m, &rng, p);
    vil_model_set_params(&m, p);
    free(p);
    m.input_grad = 1;
    T_CHECK(vil_model_alloc_acts(&m, 3, 1) == 0, "vil_model_alloc_acts(&m, 3, 1)");
    fill_batch(&m);
    vil_model_sample_drop_path(&m, 99); /* fixed masks: the same in every evaluation */
    vil_model_zero_grad(&m);
    Ctx ctx = {&m};
    model_loss(&ctx);
    vil_model_backward(&m);
    float *g = vil_malloc(m.buf_len * sizeof(float));
    memcpy(g, m.grads, m.buf_len * sizeof(float));
    /* the padding of x_proj's and dt_proj's weights (VilParamInfo ld, gap, pad): set_params
     * zeroed what the perturbed buffer held there, and the gradient there is exactly 0. The
     * padding is where vil_param_store of an all-ones tensor leaves 0. */
    size_t npad = 0, padbad = 0;
    for (int i = 0; i < m.n_tensors; i++) {
        const VilParamInfo *pi = &m.info[i];
        size_t ext = vil_param_extent(pi);
        float *ones = vil_malloc(pi->numel * sizeof(float)), *lay = vil_malloc(ext * sizeof(float));
        for (size_t k = 0; k < pi->numel; k++) ones[k] = 1.0f;
        vil_param_store(pi, lay, ones);
        for (size_t k = 0; k < ext; k++)
            if (lay[k] == 0.0f) {
                npad++;
                padbad += m.params[pi->offset + k] != 0.0f || g[pi->offset + k] != 0.0f;
            }
        free(ones), free(lay);
    }
    T_CHECK(npad > 0 && padbad == 0, "%s: %zu of %zu padding elements nonzero (params or grads)", arch, padbad, npad);
    /* every tensor starts 64-element aligned (the bf16 weights cuBLASLt reads: 128 bytes), and the
     * gaps between tensors hold zeros in the parameters (set_params zeroed the perturbed values
     * there) and in the gradients */
    size_t end = 0, gaps = 0, gapbad = 0, misaligned = 0;
    for (int i = 0; i <= m.n_tensors; i++) {
        size_t start = i < m.n_tensors ? m.info[i].offset : m.buf_len;
        for (size_t k = end; k < start; k++, gaps++) gapbad += m.params[k] != 0.0f || g[k] != 0.0f;
        if (i == m.n_tensors) break;
        misaligned += start % 64 != 0;
        end = start + vil_param_extent(&m.info[i]);
    }
    T_CHECK(misaligned == 0 && gaps > 0 && gapbad == 0,
            "%s: %zu tensors not 64-element aligned; %zu of %zu gap elements nonzero", arch, misaligned, gapbad, gaps);
    double worst = 0;
    char name[160];
    for (int i = 0; i < m.n_tensors; i++) {
        const VilParamInfo *pi = &m.info[i];
        snprintf(name, sizeof name, "%s[%s%s] %s", arch, drop_path > 0 ? "dp " : "", set ? set : "", pi->name);
        double e = gc_check_dir(name, model_loss, &ctx, m.params + pi->offset, g + pi->offset,
                                vil_param_extent(pi), 3, 3e-3f, 1e-1, &rng);
        worst = fmax(worst, e);
    }
    size_t ni = (size_t)m.acts.B * c.in_chans * c.img_size * c.img_size;
    float *dimg = vil_malloc(ni * sizeof(float));
    memcpy(dimg, m.acts.dimg, ni * sizeof(float));
    snprintf(name, sizeof name, "%s%s%s%s input image", arch, drop_path > 0 ? " dp" : "", set ? " " : "", set ? set : "");
    gc_check_dir(name, model_loss, &ctx, m.acts.img, dimg, ni, 3, 3e-3f, 1e-1, &rng);
    printf("     %s%s%s%s: worst parameter-gradient error %.2e over %d tensors\n", arch,
           drop_path > 0 ? " (drop path)" : "", set ? " " : "", set ? set : "", worst, m.n_tensors);
    free(dimg);
    free(g);
    vil_model_free(&m);
}

static void test_inference_matches_training(void) {
    VilConfig c;
    small_config(&c, "vil");
    vil_config_finalize(&c);
    VilModel m;
    vil_model_init(&m, &c, &vil_backend_cpu);
    vil_model_init_weights(&m, 3);
    T_CHECK(vil_model_alloc_acts(&m, 2, 1) == 0, "vil_model_alloc_acts(&m, 2, 1)");
    fill_batch(&m);
    size_t ni = (size_t)2 * c.in_chans * c.img_size * c.img_size;
    float *img = vil_malloc(ni * sizeof(float));
    memcpy(img, m.acts.img, ni * sizeof(float));
    vil_model_forward(&m, 0);
    float a[10], b[10];
    memcpy(a, m.acts.logits, sizeof(float) * 2 * c.num_classes);
    T_CHECK(vil_model_alloc_acts(&m, 2, 0) == 0, "vil_model_alloc_acts(&m, 2, 0)"); /* one shared layer set */
    memcpy(m.acts.img, img, ni * sizeof(float));
    vil_model_forward(&m, 0);
    memcpy(b, m.acts.logits, sizeof(float) * 2 * c.num_classes);
    double e = 0;
    for (int i = 0; i < 2 * c.num_classes; i++) e = fmax(e, fabs(a[i] - b[i]));
    T_CLOSE("inference-mode logits == training-mode logits", e, 0.0);
    free(img);
    vil_model_free(&m);
}

static void test_adamw_lowers_loss(void) {
    VilConfig c;
    small_config(&c, "vil");
    vil_config_finalize(&c);
    VilModel m;
    vil_model_init(&m, &c, &vil_backend_cpu);
    vil_model_init_weights(&m, 5);
    T_CHECK(vil_model_alloc_acts(&m, 4, 1) == 0, "vil_model_alloc_acts(&m, 4, 1)");
    fill_batch(&m);
    Ctx ctx = {&m};
    double first = 0, last = 0;
    for (int s = 0; s < 30; s++) {
        vil_model_zero_grad(&m);
        double l = model_loss(&ctx);
        if (s == 0) first = l;
        last = l;
        vil_model_backward(&m);
        vil_model_optim_step(&m, &(VilOptimHyper){.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .wd = 0.05f});
    }
    printf("     30 AdamW steps on one batch: loss %.4f -> %.4f\n", first, last);
    T_CHECK(last < 0.7 * first, "AdamW did not lower the loss on a fixed batch: %.4f -> %.4f", first, last);
    T_CHECK(isfinite(last), "loss not finite");
    vil_model_free(&m);
}

/* initialization of doc/models.md, by its statistics on ViL-Tiny (ViM for A_log and dt bias) */
static double tensor_std(const float *p, size_t n, double *maxabs) {
    double s = 0, s2 = 0, m = 0;
    for (size_t i = 0; i < n; i++) s += p[i], s2 += (double)p[i] * p[i], m = fmax(m, fabs(p[i]));
    *maxabs = m;
    return sqrt(s2 / n - (s / n) * (s / n));
}
/* the master weights of the tensor a checkpoint calls name */
static const float *tensor_at(const VilModel *m, const char *name) {
    const VilParamInfo *p = vil_model_find_param(m, name);
    if (!p) {
        printf("FAIL: no tensor %s\n", name);
        exit(1);
    }
    return m->params + p->offset;
}

static void test_init(void) {
    for (int vim = 0; vim < 2; vim++) {
        VilConfig c;
        vil_config_default(&c);
        if (vim) strcpy(c.arch, "vim");
        vil_config_finalize(&c);
        VilModel m;
        vil_model_init(&m, &c, &vil_backend_cpu);
        vil_model_init_weights(&m, 1);
        /* each tensor found by its checkpoint name, as any reader of the model would */
#define AT(...) tensor_at(&m, __VA_ARGS__)
        double mx, sd;
        int D = c.embed_dim, E = c.d_inner, N = c.d_state, R = c.dt_rank;
        sd = tensor_std(AT("pos_embed"), (size_t)c.seq_len * D, &mx);
        T_CHECK(fabs(sd - 0.02) < 0.002, "pos_embed std %.4f, want .02", sd);
        sd = tensor_std(AT("patch_embed.proj.weight"), (size_t)D * 3 * 256, &mx);
        T_CHECK(fabs(sd - 1 / sqrt(768.0)) < 0.003 && mx <= 2 / sqrt(768.0) / 0.8796 + 1e-6, "patch_embed lecun normal: std %.4f", sd);
        sd = tensor_std(AT("head.weight"), (size_t)1000 * D, &mx);
        T_CHECK(fabs(sd - 0.02) < 0.001, "head std %.4f", sd);
        sd = tensor_std(AT("layers.3.mixer.in_proj.weight"), (size_t)2 * E * D, &mx);
        T_CHECK(mx <= 1 / sqrt((double)D) && fabs(sd - 1 / sqrt(3.0 * D)) < 0.002, "in_proj U(+-1/sqrt(D)): std %.4f max %.4f", sd, mx);
        sd = tensor_std(AT("layers.3.mixer.out_proj.weight"), (size_t)D * E, &mx);
        double bound = 1 / sqrt((double)E) / sqrt(24.0);
        T_CHECK(mx <= bound && fabs(sd - bound / sqrt(3.0)) < 0.1 * bound, "out_proj rescaled by 1/sqrt(depth): std %.5f", sd);
        sd = tensor_std(AT("layers.3.mixer.dt_proj_b.weight"), (size_t)E * R, &mx);
        T_CHECK(mx <= 1 / sqrt((double)R), "dt_proj weight within R^-0.5");
        int ok = 1;
        const float *D0 = AT("layers.3.mixer.D"), *D1 = AT("layers.3.mixer.D_b");
        const float *nw = AT("layers.3.norm.weight"), *nf = AT("norm_f.weight");
        for (int e = 0; e < E; e++) ok &= D0[e] == 1.0f && D1[e] == 1.0f;
        for (int d = 0; d < D; d++) ok &= nw[d] == 1.0f && nf[d] == 1.0f;
        T_CHECK(ok, "D, D_b and norms are 1");
        if (!vim) {
            int z = 1;
            const float *b0 = AT("layers.3.mixer.dt_proj.bias"), *b1 = AT("layers.3.mixer.dt_proj_b.bias");
            for (int e = 0; e < E; e++) z &= b0[e] == 0.0f && b1[e] == 0.0f;
            T_CHECK(z, "ViL dt_proj biases are 0 (dt_init zero)");
        } else {
            int a = 1;
            const float *A_b = AT("layers.3.mixer.A_b_log");
            for (int n = 0; n < N; n++) a &= fabsf(A_b[(size_t)5 * N + n] - logf((float)(n + 1))) < 1e-6f;
            T_CHECK(a, "A_log = log(1..N)");
            /* softplus(bias) = dt in [1e-3, 1e-1] for the forward direction; 0 for the backward */
            int in = 1;
            const float *b0 = AT("layers.3.mixer.dt_proj.bias"), *b1 = AT("layers.3.mixer.dt_proj_b.bias");
            for (int e = 0; e < E; e++) {
                float b = b0[e], dt = log1pf(expf(b));
                in &= dt >= 0.999e-3f && dt <= 0.1001f && b1[e] == 0.0f;
            }
            T_CHECK(in, "ViM dt bias = inverse softplus of dt in [1e-3, 1e-1]");
        }
#undef AT
        vil_model_free(&m);
    }
}

/* the same gradients, bit for bit, whatever the thread count (fixed-order reductions) */
static void test_thread_determinism(void) {
    VilConfig c;
    small_config(&c, "vil");
    c.embed_dim = 40; /* E = 80: more than one vectorized channel block in the scan */
    vil_config_finalize(&c);
    float *g[2];
    size_t n = 0;
    for (int k = 0; k < 2; k++) {
        omp_set_num_threads(k == 0 ? 1 : 2);
        VilModel m;
        vil_model_init(&m, &c, &vil_backend_cpu);
        vil_model_init_weights(&m, 9);
        T_CHECK(vil_model_alloc_acts(&m, 3, 1) == 0, "vil_model_alloc_acts(&m, 3, 1)");
        VilRng save = rng;
        fill_batch(&m);
        rng = save;
        vil_model_zero_grad(&m);
        vil_model_forward(&m, 1);
        vil_model_backward(&m);
        g[k] = vil_malloc(m.buf_len * sizeof(float));
        memcpy(g[k], m.grads, m.buf_len * sizeof(float));
        n = m.buf_len;
        vil_model_free(&m);
    }
    T_CHECK(memcmp(g[0], g[1], n * sizeof(float)) == 0, "gradients differ between 1 and 2 threads");
    omp_set_num_threads(omp_get_num_procs());
    free(g[0]);
    free(g[1]);
}

static size_t tiny_free(const VilBackend *be) { return (size_t)32 << 20; } /* a device with 32 MiB free */

/* the memory and size checks that turn "cannot allocate" into a message before anything runs */
static void test_fits(void) {
    VilConfig c;
    vil_config_default(&c); /* ViL-Tiny */
    vil_config_finalize(&c);
    VilBackend small = vil_backend_cpu;
    small.mem_free = tiny_free;
    VilModel m;
    fprintf(stderr, "---- expected errors follow ----\n");
    T_CHECK(vil_model_init(&m, &c, &small) != 0, "ViL-Tiny's 55 MB of parameters and gradients do not fit 32 MiB");
    c.depth = 2;
    vil_config_finalize(&c);
    T_CHECK(vil_model_init(&m, &c, &small) == 0, "a 2-block model fits");
    size_t one = vil_model_acts_bytes(&m, 1, 1), four = vil_model_acts_bytes(&m, 4, 1);
    T_CHECK(one > 0 && four > 3 * one && four < 5 * one, "activations grow with the batch (%zu, %zu)", one, four);
    T_CHECK(vil_model_check_acts(&m, 1, 0) == 0, "one image fits");
    T_CHECK(vil_model_check_acts(&m, 4096, 1) != 0, "4096 training images do not fit 32 MiB");
    vil_model_free(&m);
    /* past the ops' 32-bit indexing: refused whatever memory says */
    c.img_size = 4092;
    c.patch_size = 4;
    c.stride = 4; /* 1023 x 1023 + 1 = 1,046,530 tokens, just under VIL_MAX_TOKENS */
    T_CHECK(vil_config_finalize(&c) == 0 && vil_model_init(&m, &c, &vil_backend_cpu) == 0, "a 4092 px model initializes");
    T_CHECK(vil_model_check_acts(&m, 4, 0) != 0, "4 x 1,046,530 tokens x 768 channels is past 2^31 elements");
    vil_model_free(&m);
    fprintf(stderr, "---- end of expected errors ----\n");
}

/* recompute = 1 (u and delta) and 2 (delta only): the same loss and gradient bits from one
 * layer's recomputed tensors, in the backward, as from every layer's kept ones; and the
 * activations take less memory (u and delta are 3072 of the 6724 bytes a layer keeps per token
 * at ViL-Tiny's shapes) */
static void test_recompute(const char *arch) {
    VilConfig c;
    small_config(&c, arch);
    c.drop_path = 0.2f;
    vil_config_finalize(&c);
    const int modes[3] = {VIL_RECOMPUTE_NONE, VIL_RECOMPUTE_ALL, VIL_RECOMPUTE_DELTA};
    const int shared[3] = {0, 4, 2}; /* (B, L, E) tensors of each later layer that layer 0's serve */
    float *g[3], loss[3];
    size_t n = 0, bytes[3];
    for (int k = 0; k < 3; k++) {
        VilModel m;
        vil_model_init(&m, &c, &vil_backend_cpu);
        vil_model_init_weights(&m, 11);
        m.recompute = modes[k];
        bytes[k] = vil_model_acts_bytes(&m, 3, 1);
        T_CHECK(vil_model_alloc_acts(&m, 3, 1) == 0, "vil_model_alloc_acts(&m, 3, 1)");
        T_CHECK(m.acts.bytes == bytes[k], "acts bytes: allocated %zu, reported %zu", m.acts.bytes, bytes[k]);
        VilRng save = rng;
        fill_batch(&m);
        vil_model_sample_drop_path(&m, 5);
        rng = save;
        vil_model_zero_grad(&m);
        vil_model_forward(&m, 1);
        vil_model_backward(&m);
        loss[k] = m.acts.losses[0];
        g[k] = vil_malloc(m.buf_len * sizeof(float));
        memcpy(g[k], m.grads, m.buf_len * sizeof(float));
        n = m.buf_len;
        vil_model_free(&m);
    }
    for (int k = 1; k < 3; k++) {
        T_CHECK(loss[0] == loss[k], "%s recompute = %d: loss %g, without %g", arch, modes[k], loss[k], loss[0]);
        T_CHECK(memcmp(g[0], g[k], n * sizeof(float)) == 0, "%s: gradients differ with recompute = %d", arch, modes[k]);
        size_t saved = (size_t)(c.depth - 1) * shared[k] * 3 * c.seq_len * c.d_inner * vil_backend_cpu.act_bytes;
        T_CHECK(bytes[0] - bytes[k] >= saved, "%s recompute = %d: %zu bytes of activations, without %zu (expected %zu less at least)",
                arch, modes[k], bytes[k], bytes[0], saved);
    }
    for (int k = 0; k < 3; k++) free(g[k]);
}

int main(void) {
    vil_rng_seed(&rng, 4321);
    test_recompute("vil");
    test_recompute("vim");
    test_fits();
    test_counts();
    test_init();
    test_gradients("vil", 0.0f, NULL);
    test_gradients("vil", 0.3f, NULL);
    test_gradients("vim", 0.0f, NULL);
    test_gradients("vil", 0.0f, "pos_embed=none");
    test_inference_matches_training();
    test_adamw_lowers_loss();
    test_thread_determinism();
    return t_finish();
}
