/* classify.c: `vil classify --model CKPT IMAGE...`: the evaluation transform of each image
 * (shorter side to size / crop_pct, bicubic, center crop, normalize), the model's forward
 * pass, and the top-k classes as text or as one JSON object per image. An image that cannot be
 * read is reported by name; the others are still classified and the exit code is 1. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "data/image.h"
#include "data/transform.h"
#include "cli/args.h"
#include "formats/checkpoint.h"
#include "vil/common.h"
#include "vil/limits.h"
#include "eval/eval.h"

#define CHUNK 16

typedef struct {
    const char *file;
    int ok;
} Item;

/* s as valid UTF-8 for JSON (malloc'd): each byte that breaks UTF-8 (vil_utf8_invalid_at) is
 * replaced by U+FFFD, as Python's errors="replace" does; control characters stay, cJSON escapes
 * them (\u0001). cJSON itself writes strings byte for byte, valid or not. */
static char *utf8_lossy(const char *s) {
    size_t n = strlen(s), o = 0;
    char *d = vil_malloc(3 * n + 1);
    const unsigned char *p = (const unsigned char *)s;
    while (n > 0) {
        size_t ok = vil_utf8_invalid_at(p, n);
        memcpy(d + o, p, ok);
        o += ok;
        if (ok == n) break;
        memcpy(d + o, "\xef\xbf\xbd", 3);
        o += 3;
        p += ok + 1;
        n -= ok + 1;
    }
    d[o] = 0;
    return d;
}

static void print_result(const char *file, const float *logits, int C, int topk, int json,
                         char *const *names) {
    /* softmax in double, then a partial selection of the top k */
    double mx = logits[0], sum = 0;
    for (int k = 1; k < C; k++) mx = logits[k] > mx ? logits[k] : mx;
    double *p = vil_malloc((size_t)C * sizeof(double));
    for (int k = 0; k < C; k++) sum += (p[k] = exp(logits[k] - mx));
    for (int k = 0; k < C; k++) p[k] /= sum;
    int K = topk < C ? topk : C;
    int *idx = vil_malloc((size_t)K * sizeof(int));
    for (int j = 0; j < K; j++) {
        int best = -1;
        for (int k = 0; k < C; k++) {
            int used = 0;
            for (int q = 0; q < j; q++) used |= idx[q] == k;
            if (!used && (best < 0 || p[k] > p[best])) best = k;
        }
        idx[j] = best;
    }
    if (json) {
        cJSON *o = cJSON_CreateObject();
        char *f8 = utf8_lossy(file);
        cJSON_AddStringToObject(o, "file", f8);
        free(f8);
        cJSON *l = cJSON_AddArrayToObject(o, "logits");
        for (int k = 0; k < C; k++) cJSON_AddItemToArray(l, cJSON_CreateNumber(logits[k]));
        cJSON *t = cJSON_AddArrayToObject(o, "topk");
        for (int j = 0; j < K; j++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "index", idx[j]);
            if (names) {
                char *n8 = utf8_lossy(names[idx[j]]);
                cJSON_AddStringToObject(e, "name", n8);
                free(n8);
            } else {
                cJSON_AddNullToObject(e, "name");
            }
            cJSON_AddNumberToObject(e, "prob", p[idx[j]]);
            cJSON_AddItemToArray(t, e);
        }
        char *s = cJSON_PrintUnformatted(o);
        printf("%s\n", s);
        cJSON_free(s);
        cJSON_Delete(o);
    } else {
        char shown[1024];
        printf("%s\n", vil_printable(shown, sizeof shown, file));
        for (int j = 0; j < K; j++) { /* names come from the file: nothing raw to the terminal */
            printf("  %6.2f%%  %4d  %s\n", 100.0 * p[idx[j]], idx[j],
                   names ? vil_printable(shown, sizeof shown, names[idx[j]]) : "");
        }
    }
    fflush(stdout);
    free(idx);
    free(p);
}

int vil_cmd_classify(int argc, char **argv) {
    const char *model = NULL, *device = "auto";
    int img_size = 0, topk = 5, json = 0, ema = 0, threads = 0;
    int max_pixels = (int)vil_image_max_pixels();
    float crop_pct = 0;
    VilArg args[] = {
        {"--model", VIL_ARG_STR, &model, "checkpoint (.safetensors, or a PyTorch .pth)"},
        {"--ema", VIL_ARG_FLAG, &ema, "a .pth training checkpoint's model_ema instead of its model"},
        {"--img-size", VIL_ARG_INT, &img_size, "image size (0: the file's, or 224 without a config); another size interpolates pos_embed"},
        {"--crop-pct", VIL_ARG_FLOAT, &crop_pct, "center-crop fraction: resize the shorter side to size / crop_pct (0: the checkpoint's, else 0.875)"},
        {"--topk", VIL_ARG_INT, &topk, "classes to print per image"},
        {"--json", VIL_ARG_FLAG, &json, "one JSON object per image: file, logits, topk"},
        {"--device", VIL_ARG_STR, &device, "cpu, cuda or auto"},
        {"--threads", VIL_ARG_INT, &threads, VIL_THREADS_HELP},
        {"--max-pixels", VIL_ARG_INT, &max_pixels, VIL_MAX_PIXELS_HELP},
    };
    VilArgSpec spec = {"classify", "--model CKPT [--ema] [--img-size N] [--crop-pct F] [--topk K] [--json] IMAGE...",
                       "Classifies images (JPEG, PNG, BMP, GIF, PNM, ...; the format is read from the\n"
                       "bytes) and prints the top-k classes with their probabilities.",
                       args, (int)(sizeof args / sizeof args[0]), 1, -1};
    char **pos;
    int npos;
    int rc = vil_args_parse(&spec, argc, argv, &pos, &npos);
    if (rc == VIL_ARGS_HELP) return 0;
    if (rc != VIL_ARGS_OK) return 2;
    if (!model) {
        fprintf(stderr, "vil classify: --model is required\n");
        vil_args_usage(&spec, 1);
        free(pos);
        return 2;
    }
    if (!(crop_pct == 0.0f || (crop_pct >= VIL_MIN_CROP_PCT && crop_pct <= 1.0f)) || topk < 1 || img_size < 0 ||
        img_size > VIL_MAX_IMG_SIZE || !vil_device_name_ok(device)) {
        fprintf(stderr, "vil classify: --crop-pct must be in 0.001..1 (0: the file's), --topk >= 1, --img-size in "
                        "0..%d, --device cpu, cuda or auto\n", VIL_MAX_IMG_SIZE);
        free(pos);
        return 2;
    }
    if (vil_cli_set_max_pixels("classify", max_pixels) != 0) {
        free(pos);
        return 2;
    }
    /* no loader: the images are read between the batches */
    int nthreads = vil_cli_set_threads("classify", threads);
    if (nthreads < 0) {
        free(pos);
        return 2;
    }
    const VilBackend *be = vil_backend_get(device);
    if (!be) {
        free(pos);
        return 1;
    }
    if (strcmp(device, "auto") == 0) fprintf(stderr, "vil classify: running on %s\n", be->name);
    VilModel m;
    VilCheckpointMeta meta;
    VilCheckpointOpts lo = {.img_size = img_size, .ema = ema};
    if (vil_checkpoint_load(model, be, &lo, &m, &meta) != 0) {
        free(pos);
        return 1;
    }
    const VilConfig *c = &m.cfg;
    int S = c->img_size, C = c->in_chans, NC = c->num_classes;
    VilEvalSpec ev;
    char note[128];
    vil_eval_spec_resolve(&ev, &meta, crop_pct, C, note, sizeof note);
    fprintf(stderr, "vil classify: %d x %d, %s", S, S, note);
    if (strcmp(be->name, "cpu") == 0)
        fprintf(stderr, "; %d compute thread%s (OpenMP)", nthreads, nthreads == 1 ? "" : "s");
    fprintf(stderr, "\n");
    if (vil_model_check_acts(&m, CHUNK, 0) != 0) {
        free(pos);
        vil_checkpoint_meta_free(&meta);
        vil_model_free(&m);
        return 1;
    }
    size_t per = (size_t)C * S * S;
    float *batch = vil_malloc(CHUNK * per * sizeof(float));
    float *logits = vil_malloc((size_t)CHUNK * NC * sizeof(float));
    Item items[CHUNK];
    int failed = 0;
    vil_model_alloc_acts(&m, CHUNK, 0);
    for (int start = 0; start < npos; start += CHUNK) {
        int n = npos - start < CHUNK ? npos - start : CHUNK, good = 0;
        for (int i = 0; i < n; i++) {
            items[i].file = pos[start + i];
            items[i].ok = 0;
            VilImage im;
            VilErrCapture cap;
            vil_error_capture(&cap);
            int rc = vil_image_load(items[i].file, C, &im);
            vil_error_release(&cap);
            if (rc != 0) { /* cap.msg: "'FILE': reason", the name printable */
                vil_error("cannot classify %s", cap.msg);
                failed++;
                continue;
            }
            if (vil_transform_eval(&im, S, ev.crop_pct, ev.mean, ev.std, batch + (size_t)good * per) != 0) {
                char shown[1024];
                vil_error("cannot classify '%s': the evaluation transform failed",
                          vil_printable(shown, sizeof shown, items[i].file));
                failed++;
                vil_image_free(&im);
                continue;
            }
            vil_image_free(&im);
            items[i].ok = 1;
            good++;
        }
        if (!good) continue;
        /* unused slots of the last chunk: zeros, results ignored */
        memset(batch + (size_t)good * per, 0, (CHUNK - good) * per * sizeof(float));
        vil_model_upload_inputs(&m, batch, NULL);
        vil_model_forward(&m, 0);
        vil_model_logits(&m, logits);
        for (int i = 0, k = 0; i < n; i++)
            if (items[i].ok) print_result(items[i].file, logits + (size_t)(k++) * NC, NC, topk, json, meta.class_names);
    }
    free(batch);
    free(logits);
    free(pos);
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&m);
    if (failed) {
        vil_error("%d of %d images could not be classified", failed, npos);
        return 1;
    }
    return 0;
}
