/* ref_dump.c: writes what tools/torch_reference.py checks vil against: a small random model
 * (a checkpoint), an input batch with soft targets, and vil's CPU logits, loss and every
 * parameter gradient (and the input gradient), all as safetensors in DIR.
 *   build/tools/ref_dump DIR [vil|vim] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/checkpoint.h"
#include "vil/common.h"
#include "formats/safetensors.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: ref_dump DIR [vil|vim]\n");
        return 2;
    }
    const char *dir = argv[1], *arch = argc > 2 ? argv[2] : "vil";
    VilConfig c;
    vil_config_default(&c);
    strcpy(c.arch, arch);
    c.img_size = 28;
    c.patch_size = 4;
    c.stride = 4; /* 7x7 grid, L = 50, class token at 24 */
    c.embed_dim = 16;
    c.depth = 3;
    c.num_classes = 7;
    if (vil_config_finalize(&c) != 0) return 1;
    VilModel m;
    if (vil_model_init(&m, &c, &vil_backend_cpu) != 0 || vil_model_init_weights(&m, 17) != 0) return 1;
    /* move every parameter off its init value so that every path is exercised */
    VilRng r;
    vil_rng_seed(&r, 23);
    float *p = vil_malloc(m.buf_len * sizeof(float));
    vil_model_get_params(&m, p);
    for (size_t i = 0; i < m.buf_len; i++) p[i] += 0.05f * vil_rng_normal(&r);
    int B = 3;
    m.input_grad = 1;
    if (vil_model_set_params(&m, p) != 0 || vil_model_alloc_acts(&m, B, 1) != 0) return 1;
    size_t ni = (size_t)B * c.in_chans * c.img_size * c.img_size;
    for (size_t i = 0; i < ni; i++) m.acts.img[i] = vil_rng_normal(&r);
    for (int b = 0; b < B; b++) {
        for (int k = 0; k < c.num_classes; k++) m.acts.targets[b * c.num_classes + k] = 0.1f / c.num_classes;
        m.acts.targets[b * c.num_classes + (b * 3) % c.num_classes] += 0.9f * 0.7f;
        m.acts.targets[b * c.num_classes + (b * 3 + 1) % c.num_classes] += 0.9f * 0.3f;
    }
    vil_model_zero_grad(&m);
    vil_model_forward(&m, 1);
    vil_model_backward(&m);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (vil_checkpoint_save(&m, path, 0, NULL, 0, NULL) != 0) return 1;
    VilStWriter *w = vil_st_writer_new();
    int64_t ishape[4] = {B, c.in_chans, c.img_size, c.img_size}, tshape[2] = {B, c.num_classes};
    vil_st_writer_add(w, "img", VIL_ST_F32, 4, ishape, m.acts.img);
    vil_st_writer_add(w, "targets", VIL_ST_F32, 2, tshape, m.acts.targets);
    snprintf(path, sizeof path, "%s/input.safetensors", dir);
    if (vil_st_writer_save(w, path) != 0) return 1;
    vil_st_writer_free(w);
    w = vil_st_writer_new();
    double loss = 0;
    for (int b = 0; b < B; b++) loss += m.acts.losses[b];
    float lossf = (float)(loss / B);
    int64_t one = 1;
    vil_st_writer_add(w, "logits", VIL_ST_F32, 2, tshape, m.acts.logits);
    vil_st_writer_add(w, "loss", VIL_ST_F32, 1, &one, &lossf);
    vil_st_writer_add(w, "grad.img", VIL_ST_F32, 4, ishape, m.acts.dimg);
    char **names = vil_malloc((size_t)m.n_tensors * sizeof(char *));
    float *g = vil_malloc(m.param_count * sizeof(float));
    vil_model_pack(&m, g, m.grads); /* the tensors without the buffer's padding */
    size_t at = 0;
    for (int i = 0; i < m.n_tensors; i++) {
        const VilParamInfo *pi = &m.info[i];
        names[i] = vil_malloc(strlen(pi->name) + 8);
        sprintf(names[i], "grad.%s", pi->name);
        vil_st_writer_add(w, names[i], VIL_ST_F32, pi->ndim, pi->shape, g + at);
        at += pi->numel;
    }
    snprintf(path, sizeof path, "%s/ours.safetensors", dir);
    int rc = vil_st_writer_save(w, path);
    vil_st_writer_free(w);
    for (int i = 0; i < m.n_tensors; i++) free(names[i]);
    free(names);
    free(g);
    free(p);
    printf("ref_dump: %s model (%zu parameters), batch %d, loss %.6f -> %s\n", arch, m.param_count, B, lossf, dir);
    vil_model_free(&m);
    return rc ? 1 : 0;
}
