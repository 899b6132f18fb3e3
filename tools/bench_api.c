/* bench_api.c: what a forward costs through libvil's API (include/vil.h) against vil's in-process
 * path (what `vil classify` runs: the model's upload, forward and logits read), on the same model,
 * batch and device, alternated in rounds; and the first call of a context (the CUDA module's
 * load and the model's first forward) against the steady state. Prints the median milliseconds
 * per call of each. cuda/PERF_NOTES.md has the numbers.
 * MODEL: a checkpoint, or a config (.cfg: its weights drawn, saved to a temporary file).
 *   build/tools/bench_api MODEL [cpu|cuda] [B] [calls] [rounds] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "include/vil.h"

#include "formats/checkpoint.h"
#include "vil/common.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [cpu|cuda] [B] [calls] [rounds]\n", argv[0]);
        return 2;
    }
    const char *dev = argc > 2 ? argv[2] : "cpu";
    int B = argc > 3 ? atoi(argv[3]) : 1, calls = argc > 4 ? atoi(argv[4]) : 200, rounds = argc > 5 ? atoi(argv[5]) : 5;
    const char *path = argv[1];
    char tmp[] = "/tmp/bench_api_XXXXXX.safetensors";
    size_t len = strlen(path);
    if (len > 4 && strcmp(path + len - 4, ".cfg") == 0) { /* weights drawn from the config */
        VilConfig c;
        vil_config_default(&c);
        VilModel w;
        int fd = mkstemps(tmp, 12);
        if (fd < 0 || vil_config_load(&c, path) != 0 || vil_config_finalize(&c) != 0 ||
            vil_model_init(&w, &c, &vil_backend_cpu) != 0)
            return 1;
        close(fd);
        vil_model_init_weights(&w, 1);
        if (vil_checkpoint_save(&w, tmp, 0, NULL, 0, NULL) != 0) return 1;
        vil_model_free(&w);
        path = tmp;
    }
    double t0 = vil_now();
    vil_ctx *ctx;
    vil_classifier *m;
    if (vil_ctx_new(dev, 0, 0, &ctx) || vil_classifier_load(ctx, path, NULL, &m)) {
        fprintf(stderr, "bench_api: %s\n", vil_last_error());
        return 1;
    }
    size_t per = vil_classifier_input_size(m);
    vil_classifier_info info;
    vil_classifier_get_info(m, &info);
    float *x = calloc((size_t)B * per, sizeof(float)), *logits = calloc((size_t)B * info.n_classes, sizeof(float));
    for (size_t i = 0; i < (size_t)B * per; i++) x[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    double t1 = vil_now();
    vil_classifier_forward(m, x, B, logits);
    double t2 = vil_now();
    /* the in-process path on a backend of its own (the same device) */
    const VilBackend *be = vil_backend_open(dev, 0);
    VilModel im;
    VilCheckpointMeta meta = {0};
    if (!be || vil_checkpoint_load(path, be, NULL, &im, &meta) != 0) return 1;
    vil_model_alloc_acts(&im, B, 0);
    double *api = malloc(sizeof(double) * rounds), *core = malloc(sizeof(double) * rounds);
    for (int w = 0; w < 20; w++) { /* warm both: graphs recorded, caches full */
        vil_classifier_forward(m, x, B, logits);
        vil_model_upload_inputs(&im, x, NULL);
        vil_model_forward(&im, 0);
        vil_model_logits(&im, logits);
    }
    for (int r = 0; r < rounds; r++) {
        double a = vil_now();
        for (int i = 0; i < calls; i++) vil_classifier_forward(m, x, B, logits);
        double b = vil_now();
        for (int i = 0; i < calls; i++) {
            vil_model_upload_inputs(&im, x, NULL);
            vil_model_forward(&im, 0);
            vil_model_logits(&im, logits);
        }
        double c = vil_now();
        api[r] = 1e3 * (b - a) / calls;
        core[r] = 1e3 * (c - b) / calls;
    }
    qsort(api, rounds, sizeof(double), cmp_double);
    qsort(core, rounds, sizeof(double), cmp_double);
    printf("bench_api %s %s B %d (%s, %.2fM parameters): API %.4f ms, in-process %.4f ms a call (median of %d "
           "rounds of %d; API/in-process %.3f); context + load %.1f ms, first forward %.1f ms\n",
           info.name[0] ? info.name : path, dev, B, vil_ctx_device_name(ctx), info.n_params / 1e6,
           api[rounds / 2], core[rounds / 2], rounds, calls, api[rounds / 2] / core[rounds / 2], 1e3 * (t1 - t0),
           1e3 * (t2 - t1));
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&im);
    vil_backend_close(be);
    vil_classifier_free(m);
    vil_ctx_free(ctx);
    free(x), free(logits), free(api), free(core);
    if (path == tmp) unlink(tmp);
    return 0;
}
