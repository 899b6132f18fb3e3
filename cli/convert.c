/* convert.c: `vil convert IN OUT.safetensors|OUT.pth`: a checkpoint vil reads (a PyTorch .pth
 * such as the published ViM files, a vil checkpoint, or a bare safetensors state dict) rewritten
 * as a vil checkpoint: the same tensors under the official names plus vil's metadata (config,
 * image size, class names), as safetensors (which safetensors.torch.load_file also reads) or as
 * a .pth (torch.load(..., weights_only=True); ViM's checkpoint['model']). Any other output name
 * is refused before anything is read. The written file is read back and compared. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "data/dataset.h"
#include "cli/args.h"
#include "formats/checkpoint.h"
#include "vil/common.h"

/* the parameters of two models, bit for bit */
static int same_params(const VilModel *a, const VilModel *b) {
    if (a->buf_len != b->buf_len) return 0;
    float *x = vil_malloc(a->buf_len * sizeof(float)), *y = vil_malloc(b->buf_len * sizeof(float));
    vil_model_get_params(a, x);
    vil_model_get_params(b, y);
    int same = memcmp(x, y, a->buf_len * sizeof(float)) == 0;
    free(x);
    free(y);
    return same;
}

int vil_cmd_convert(int argc, char **argv) {
    const char *names = NULL;
    int ema = 0, img_size = 0;
    VilArg args[] = {
        {"--ema", VIL_ARG_FLAG, &ema, "convert a .pth training checkpoint's model_ema instead of its model"},
        {"--img-size", VIL_ARG_INT, &img_size, "image size of a file that does not state it (a bare state dict); for one that does, another size interpolates pos_embed"},
        {"--names", VIL_ARG_STR, &names, "class names to store (imagenet_classes.tsv form, or one per line)"},
    };
    VilArgSpec spec = {"convert", "IN OUT.safetensors|OUT.pth [--ema] [--img-size N] [--names FILE]",
                       "Rewrites a checkpoint (a PyTorch .pth such as the published ViM files, read\n"
                       "without running its pickle, a vil checkpoint, or a safetensors state dict) as\n"
                       "a vil checkpoint: the same tensors under the official names plus vil's\n"
                       "metadata (config, image size, class names). OUT's extension picks the format:\n"
                       ".safetensors, or .pth (torch.save's zip format: {'model': the state dict,\n"
                       "'vil_metadata': ...}, which torch.load(..., weights_only=True) reads); any\n"
                       "other name is refused. ImageNet-1k checkpoints get ImageNet's class names.",
                       args, (int)(sizeof args / sizeof args[0]), 2, 2};
    char **pos;
    int npos;
    int rc = vil_args_parse(&spec, argc, argv, &pos, &npos);
    if (rc == VIL_ARGS_HELP) return 0;
    if (rc != VIL_ARGS_OK) return 2;
    const char *in = pos[0], *out = pos[1];
    free(pos);
    if (img_size < 0) {
        fprintf(stderr, "vil convert: --img-size must be >= 0\n");
        return 2;
    }
    if (vil_checkpoint_format_of(out) < 0) return 2; /* reported: the formats vil writes */
    /* IN (and --names) are inputs, which OUT may not be (vil/files.h): checked before the load */
    vil_inputs_track(1);
    vil_input_add(in);
    if (names) vil_input_add(names);
    if (vil_output_check(out, NULL, NULL) != 0) return 2;
    VilModel m, back;
    VilCheckpointMeta meta, mb;
    VilCheckpointOpts lo = {.img_size = img_size, .ema = ema};
    if (vil_checkpoint_load(in, &vil_backend_cpu, &lo, &m, &meta) != 0) return 1;
    const VilConfig *c = &m.cfg;
    char **class_names = meta.class_names, **own = NULL;
    rc = 1;
    if (names) {
        if (vil_names_read(names, c->num_classes, &own) != 0) goto out;
        class_names = own;
        /* they go into the metadata, which is UTF-8 JSON */
        for (int i = 0; i < c->num_classes; i++) {
            size_t n = strlen(own[i]);
            if (vil_utf8_invalid_at((const unsigned char *)own[i], n) != n) {
                char shown[160];
                vil_error("the class-names file '%s' names class %d '%s', which is not valid "
                          "UTF-8; the names go into the checkpoint's metadata: write the file in "
                          "UTF-8", names, i, vil_printable(shown, sizeof shown, own[i]));
                goto out;
            }
        }
    }
    /* the input's path as the metadata records it: escaped where it is not UTF-8 */
    char source[1100], shown_in[1024];
    vil_printable(shown_in, sizeof shown_in, in);
    snprintf(source, sizeof source, "%s%s%s", shown_in, meta.weights[0] ? ":" : "", meta.weights);
    if (vil_checkpoint_save_from(&m, out, class_names, class_names ? c->num_classes : 0,
                                 meta.eval.crop_pct > 0 ? &meta.eval : NULL, source) != 0)
        goto out;
    /* what was written must read back as the same network with the same weights */
    if (vil_checkpoint_load(out, &vil_backend_cpu, NULL, &back, &mb) != 0) {
        vil_error("'%s' was written but does not read back: removed", out);
        remove(out);
        goto out;
    }
    int same = back.cfg.img_size == c->img_size && back.cfg.stride == c->stride &&
               same_params(&m, &back) && (mb.class_names != NULL) == (class_names != NULL) &&
               fabsf(mb.eval.crop_pct - (meta.eval.crop_pct > 0 ? meta.eval.crop_pct : 0)) < 1e-6f;
    for (int i = 0; same && class_names && i < c->num_classes; i++)
        same = strcmp(mb.class_names[i], class_names[i]) == 0;
    vil_checkpoint_meta_free(&mb);
    vil_model_free(&back);
    if (!same) {
        vil_error("'%s' reads back with other weights, another architecture, other class names "
                  "or another evaluation crop: not converted", out);
        remove(out);
        goto out;
    }
    printf("%s%s%s -> %s\n", in, meta.weights[0] ? ":" : "", meta.weights, out);
    printf("  %s (%s scan), %zu parameters, %d x %d, patch %d stride %d, %d classes%s\n", c->name,
           vil_recurrences[c->rec].name, m.param_count, c->img_size,
           c->img_size, c->patch_size, c->stride, c->num_classes,
           class_names ? (own ? ", names from --names" : ", with class names") : ", no class names");
    if (meta.pos_interpolated_from)
        printf("  pos_embed interpolated from the %d x %d grid it was trained on\n",
               meta.pos_interpolated_from, meta.pos_interpolated_from);
    rc = 0;
out:
    if (own)
        for (int i = 0; i < c->num_classes; i++) free(own[i]);
    free(own);
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&m);
    return rc;
}
