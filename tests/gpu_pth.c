/* gpu_pth.c: the torch.save checkpoints of tests/data/pth (official ViM layout: model and
 * model_ema; stride = patch and stride 2; ViM and ViL) loaded onto the CUDA backend and run:
 * logits against the float64 PyTorch reference written beside them (tests/reference/
 * make_vim_pth.py), with the GPU's bf16 tolerance of 2e-2 relative; and the same as the CPU
 * backend's logits on the same file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testing.h"
#include "vil/backend.h"
#include "formats/checkpoint.h"
#include "vil/common.h"

/* the CUDA backend: vil_backend_get("cuda") (the module, loaded by main) */
static const VilBackend *gpu;

#define DATA "tests/data/pth/"
#define NI 3

static float *logits(const char *file, const VilBackend *be, int ema, const float *in, int *classes) {
    VilModel m;
    VilCheckpointMeta meta;
    if (vil_checkpoint_load(file, be, &(VilCheckpointOpts){.ema = ema}, &m, &meta) != 0) return NULL;
    const VilConfig *c = &m.cfg;
    size_t per = (size_t)c->in_chans * c->img_size * c->img_size;
    T_CHECK(vil_model_alloc_acts(&m, NI, 0) == 0, "vil_model_alloc_acts(&m, NI, 0)");
    be->to_device(be, m.acts.img, in, NI * per * sizeof(float));
    vil_model_forward(&m, 0);
    *classes = c->num_classes;
    float *lg = vil_malloc((size_t)NI * c->num_classes * sizeof(float));
    be->to_host(be, lg, m.acts.logits, (size_t)NI * c->num_classes * sizeof(float));
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&m);
    return lg;
}

static double rel(const float *got, const double *ref, int n) {
    double a = 0, b = 0;
    for (int i = 0; i < n; i++) {
        a += (got[i] - ref[i]) * (got[i] - ref[i]);
        b += ref[i] * ref[i];
    }
    return sqrt(a / (b > 0 ? b : 1e-300));
}

int main(void) {
    char why[256];
    if (!vil_cuda_available(why, sizeof why)) {
        printf("no usable GPU: %s\n", why);
        T_CHECK(0, "gpu_pth needs a CUDA device");
        return t_finish();
    }
    if (!(gpu = vil_backend_get("cuda"))) {
        T_CHECK(0, "the CUDA backend does not open");
        return t_finish();
    }
    size_t n;
    float *in = (float *)vil_read_file(DATA "inputs.f32", &n);
    T_CHECK(in && n == NI * 3 * 16 * 16 * sizeof(float), "inputs.f32");
    const char *cases[] = {"vim_p4s4", "vim_p4s2", "vil_p4s4"};
    for (int k = 0; in && k < 3; k++)
        for (int ema = 0; ema < 2; ema++) {
            char file[128], reff[128], what[128];
            snprintf(file, sizeof file, DATA "%s.pth", cases[k]);
            snprintf(reff, sizeof reff, DATA "%s.%s.f64", cases[k], ema ? "ema" : "model");
            int C = 0, Cc = 0;
            float *g = logits(file, gpu, ema, in, &C);
            float *c = logits(file, &vil_backend_cpu, ema, in, &Cc);
            double *ref = (double *)vil_read_file(reff, &n);
            T_CHECK(g && c && ref && C == Cc && n == (size_t)NI * C * sizeof(double), "%s loads on cuda and cpu", file);
            if (g && c && ref && n == (size_t)NI * C * sizeof(double)) {
                snprintf(what, sizeof what, "%s %s cuda vs float64 torch", cases[k], ema ? "model_ema" : "model");
                T_CLOSE(what, rel(g, ref, NI * C), 2e-2);
                double *cd = vil_malloc((size_t)NI * C * sizeof(double));
                for (int i = 0; i < NI * C; i++) cd[i] = c[i];
                snprintf(what, sizeof what, "%s %s cuda vs cpu", cases[k], ema ? "model_ema" : "model");
                T_CLOSE(what, rel(g, cd, NI * C), 2e-2);
                free(cd);
            }
            free(g);
            free(c);
            free(ref);
        }
    free(in);
    return t_finish();
}
