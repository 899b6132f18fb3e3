/* model_testing.h: helpers shared by the whole-model tests (test_model.c on the CPU,
 * gpu_model.c against the CUDA backend) and the command-line tests' tiny model. */
#ifndef VIL_MODEL_TESTING_H
#define VIL_MODEL_TESTING_H

#include <math.h>
#include <stdio.h>

#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "vil/backend.h"
#include "vil/common.h"
#include "vil/model.h"

/* The tiny ViL the command-line tests run (16 px, patch 4, dim 8, depth 2, d_state 4, 3
 * classes) on the CPU, weights from seed 1; vil_model_free it. */
static inline void t_tiny_model(VilModel *m) {
    VilConfig c;
    vil_config_default(&c);
    c.img_size = 16, c.patch_size = 4, c.stride = 4, c.embed_dim = 8, c.depth = 2, c.d_state = 4,
    c.num_classes = 3;
    vil_config_finalize(&c);
    vil_model_init(m, &c, &vil_backend_cpu);
    vil_model_init_weights(m, 1);
}

/* m's tensors into path as a bare state dict (safetensors, no metadata: as
 * safetensors.torch.save_file(model.state_dict()) writes one), packed without the buffer's
 * padding. 0, or -1. */
static inline int t_save_bare(const VilModel *m, const char *path) {
    float *host = vil_malloc(m->buf_len * sizeof(float));
    vil_model_get_params(m, host);
    vil_model_pack(m, host, host);
    VilStWriter *w = vil_st_writer_new();
    size_t at = 0;
    for (int i = 0; i < m->n_tensors; at += m->info[i].numel, i++)
        vil_st_writer_add(w, m->info[i].name, VIL_ST_F32, m->info[i].ndim, m->info[i].shape, host + at);
    int rc = vil_st_writer_save(w, path);
    vil_st_writer_free(w);
    free(host);
    return rc;
}

/* m's parameters into p (buf_len floats), moved off their init values (norms 1, D 1, biases 0)
 * so every path carries gradient: + 0.1 N(0, 1) everywhere, a head of unit scale (init is std
 * .02) so the early layers' gradients stay well above float32 rounding noise, and the dt biases
 * recentred (ViM's init puts softplus deep in its flat tail, dt ~ 1e-3). */
static inline void t_perturbed_params(const VilModel *m, VilRng *rng, float *p) {
    const VilConfig *c = &m->cfg;
    vil_model_get_params(m, p);
    /* tensor by tensor over their extents, not over the whole buffer: the values each tensor gets
     * do not depend on the gaps between tensors (set_params zeroes the padding again) */
    for (int t = 0; t < m->n_tensors; t++) {
        float *q = p + m->info[t].offset;
        for (size_t i = 0, n = vil_param_extent(&m->info[t]); i < n; i++) q[i] += 0.1f * vil_rng_normal(rng);
    }
    size_t head = vil_model_find_param(m, "head.weight")->offset;
    for (size_t i = 0; i < (size_t)c->num_classes * c->embed_dim; i++) p[head + i] = vil_rng_normal(rng);
    for (int l = 0; l < c->depth; l++)
        for (int j = 0; j < 2; j++) {
            char name[64];
            snprintf(name, sizeof name, "layers.%d.mixer.dt_proj%s.bias", l, j ? "_b" : "");
            const VilParamInfo *dt_b = vil_model_find_param(m, name);
            if (!dt_b) continue; /* one direction (family = stream) */
            for (int e = 0; e < c->d_inner; e++) p[dt_b->offset + e] = 0.5f * vil_rng_normal(rng);
        }
}

/* ||a - b|| / ||a|| of tensor key in the training states DIR/A/last.state.safetensors and
 * DIR/B/...; -1: a file unreadable, or the tensor absent or of another size in either */
static inline double t_state_diff(const char *dir, const char *a, const char *b, const char *key) {
    char pa[4096], pb[4096];
    snprintf(pa, sizeof pa, "%s/%s/last.state.safetensors", dir, a);
    snprintf(pb, sizeof pb, "%s/%s/last.state.safetensors", dir, b);
    VilSafetensors sa, sb;
    if (vil_st_read(pa, &sa) != 0) return -1;
    if (vil_st_read(pb, &sb) != 0) {
        vil_st_free(&sa);
        return -1;
    }
    const VilStTensor *ta = vil_st_find(&sa, key), *tb = vil_st_find(&sb, key);
    double d = -1;
    if (ta && tb && ta->nbytes == tb->nbytes) {
        const float *x = (const float *)ta->data, *y = (const float *)tb->data;
        double num = 0, den = 0;
        for (size_t i = 0; i < ta->nbytes / 4; i++) num += (x[i] - y[i]) * (double)(x[i] - y[i]), den += (double)x[i] * x[i];
        d = sqrt(num / (den + 1e-300));
    }
    vil_st_free(&sa);
    vil_st_free(&sb);
    return d;
}

/* The model of config c (set, not yet finalized) saved as a checkpoint at path with step and
 * names (NULL, or c->num_classes of them): weights from seed 1 moved off their init by
 * t_perturbed_params with seed, so that every path carries signal. 0, or -1. */
static inline int t_write_model(VilConfig *c, uint64_t seed, const char *path, long step, char *const *names) {
    VilModel m;
    if (vil_config_finalize(c) != 0 || vil_model_init(&m, c, &vil_backend_cpu) != 0) return -1;
    VilRng rng;
    vil_rng_seed(&rng, seed);
    float *p = vil_malloc(m.buf_len * sizeof(float));
    int rc = vil_model_init_weights(&m, 1);
    if (rc == 0) {
        t_perturbed_params(&m, &rng, p);
        rc = vil_model_set_params(&m, p);
    }
    if (rc == 0) rc = vil_checkpoint_save(&m, path, step, names, names ? c->num_classes : 0, NULL);
    free(p);
    vil_model_free(&m);
    return rc == 0 ? 0 : -1;
}

/* A tiny model of arch ("vil" or "vim") for the tests that read files: 16 px, patch 4 stride 2,
 * dim 8, depth 2, d_state 4, 3 classes, chans input channels; weights from seed 1 moved off
 * their init by t_perturbed_params with seed, saved as a checkpoint at path with step and names
 * (NULL: none). 0, or -1. */
static inline int t_write_tiny(const char *arch, int chans, uint64_t seed, const char *path, long step,
                               char *const *names) {
    VilConfig c;
    vil_config_default(&c);
    snprintf(c.arch, sizeof c.arch, "%s", arch);
    c.img_size = 16, c.patch_size = 4, c.stride = 2, c.in_chans = chans, c.embed_dim = 8, c.depth = 2,
    c.d_state = 4, c.num_classes = 3;
    return t_write_model(&c, seed, path, step, names);
}

#endif
