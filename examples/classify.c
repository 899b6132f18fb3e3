/* classify.c: classify images with libvil, one JSON line per image as `vil classify --json`
 * prints it (file, logits, topk with index, name, prob). Build against the installed library:
 *   cc examples/classify.c $(pkg-config --cflags --libs vil) -o classify
 *   ./classify --model vil_tiny.safetensors [--img-size S] [--crop-pct C] [--device D] a.jpg b.png */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vil.h>

static void json_string(const char *s) { /* the file and class names, escaped for JSON */
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

int main(int argc, char **argv) {
    const char *model = NULL, *device = "auto";
    vil_load_opts opts = {0};
    float crop = 0; /* 0: the model's own */
    int i = 1;
    for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        else if (!strcmp(argv[i], "--img-size")) opts.img_size = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--crop-pct")) crop = (float)atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--device")) device = argv[i + 1];
        else break;
    }
    if (!model || i >= argc) {
        fprintf(stderr, "usage: %s --model M [--img-size S] [--crop-pct C] [--device D] IMAGE...\n", argv[0]);
        return 2;
    }
    vil_ctx *ctx = NULL;
    vil_classifier *m = NULL;
    if (vil_ctx_new(device, 0, 0, &ctx) != VIL_OK || vil_classifier_load(ctx, model, &opts, &m) != VIL_OK) {
        fprintf(stderr, "classify: %s\n", vil_last_error());
        vil_ctx_free(ctx);
        return 1;
    }
    vil_classifier_info info;
    vil_classifier_get_info(m, &info);
    int C = info.n_classes, K = C < 5 ? C : 5, idx[5], failed = 0;
    double prob[5];
    float *x = malloc(vil_classifier_input_size(m) * sizeof(float)), *logits = malloc(C * sizeof(float));
    for (; i < argc; i++) {
        if (vil_classifier_transform_file(m, argv[i], crop, x) != VIL_OK ||
            vil_classifier_forward(m, x, 1, logits) != VIL_OK) {
            fprintf(stderr, "classify: %s\n", vil_last_error());
            failed++;
            continue;
        }
        vil_topk(logits, C, K, idx, prob);
        printf("{\"file\":");
        json_string(argv[i]);
        printf(",\"logits\":[");
        for (int c = 0; c < C; c++) printf("%s%.9g", c ? "," : "", logits[c]);
        printf("],\"topk\":[");
        for (int k = 0; k < K; k++) {
            printf("%s{\"index\":%d,\"name\":", k ? "," : "", idx[k]);
            if (info.has_class_names) json_string(vil_classifier_class_name(m, idx[k]));
            else printf("null");
            printf(",\"prob\":%.17g}", prob[k]);
        }
        printf("]}\n");
    }
    free(x);
    free(logits);
    vil_classifier_free(m);
    vil_ctx_free(ctx);
    return failed ? 1 : 0;
}
