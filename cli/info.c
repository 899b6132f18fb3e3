/* info.c: `vil info --model CKPT`: what a checkpoint holds: architecture, parameter count,
 * image size, classes, training step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/args.h"
#include "cli/model_arg.h"
#include "formats/checkpoint.h"
#include "vil/common.h"
#include "vil/limits.h"

/* the flags' values: their defaults set by vil_cmd_info, then filled by vil_args_parse */
typedef struct {
    const char *model, *device, *pos;
    int img_size, ema;
} Flags;
static Flags o;

static const VilArg ARGS[] = {
    VIL_ARG_MODEL_ROWS(o),
    {"--img-size", VIL_ARG_INT, &o.img_size, "image size (0: the file's, or 224 without a config); another size moves pos_embed (--pos)", 0, VIL_MAX_IMG_SIZE},
    {"--pos", VIL_ARG_STR, &o.pos, VIL_POS_HELP, .meta = "interp|keep|center", .needs = "--img-size"},
    {"--device", VIL_ARG_STR, &o.device, "cpu or cuda: where to load it"},
};

const VilArgSpec vil_cmd_info_spec = {"info", "--model CKPT [--ema] [--img-size N [--pos interp|keep|center]]",
                                      "Prints a checkpoint's architecture, parameter count, image size and classes.",
                                      ARGS, (int)(sizeof ARGS / sizeof ARGS[0]), 0, 0};

int vil_cmd_info(int argc, char **argv) {
    o = (Flags){.device = "cpu", .pos = "interp"};
    int rc = vil_args_parse_flags(&vil_cmd_info_spec, argc, argv);
    if (rc >= 0) return rc;
    /* --img-size is range-checked as it is parsed */
    if (!vil_device_name_ok(o.device)) return vil_cli_bad_choice("info", "--device", "cpu, cuda or auto", o.device);
    int pos = vil_cli_pos_mode("info", o.pos);
    if (pos < 0) return 2;
    const VilBackend *be = vil_backend_get(o.device);
    if (!be) return 1;
    VilModel m;
    VilCheckpointMeta meta;
    char *model_file;
    const char *model = vil_cli_model_path("info", o.model, &o.ema, &model_file);
    if (!model) return 1;
    VilCheckpointOpts lo = {.img_size = o.img_size, .ema = o.ema, .pos = (VilPosMode)pos};
    rc = vil_checkpoint_load(model, be, &lo, &m, &meta);
    if (rc != 0) {
        free(model_file);
        return 1;
    }
    const VilConfig *c = &m.cfg;
    char shown[256];
    printf("file:        %s\n", model);
    if (strcmp(meta.format, "pth") == 0) {
        printf("format:      PyTorch checkpoint (torch.save zip), read without running its pickle\n");
        if (meta.file_keys[0]) printf("holds:       %s\n", vil_printable(shown, sizeof shown, meta.file_keys));
        printf("weights:     %s%s\n", meta.weights[0] ? meta.weights : "the file's state dict",
               meta.has_ema && !o.ema ? " (--ema selects model_ema)" : "");
        if (meta.source_model[0]) printf("trained as:  %s\n", vil_printable(shown, sizeof shown, meta.source_model));
        if (meta.epoch >= 0) printf("epoch:       %ld\n", meta.epoch);
    } else {
        printf("format:      safetensors\n");
    }
    printf("model:       %s (%s: %s scan)%s\n", vil_printable(shown, sizeof shown, c->name), c->arch,
           vil_recurrences[c->rec].name,
           meta.config_inferred ? ", architecture inferred from tensor shapes" : "");
    printf("parameters:  %zu\n", m.param_count);
    printf("image size:  %d x %d, %d channel%s\n", c->img_size, c->img_size, c->in_chans,
           c->in_chans == 1 ? "" : "s");
    if (c->family_kind == VIL_FAMILY_STREAM)
        printf("stream:      causal, a token per image row, a readout at each image's last; trained on streams "
               "of %d images, %d per forward (%d tokens)\n", c->stream_len, c->stream_chunk, c->seq_len);
    else
        printf("patches:     %d x %d of %d px, stride %d; %d tokens, class token at %d\n", c->grid,
               c->grid, c->patch_size, c->stride, c->seq_len, c->cls_pos);
    if (c->pos_embed_kind == VIL_POS_EMBED_NONE) printf("             (no pos_embed: position from the scan order alone)\n");
    if (meta.trained_grid) printf("             (%s)\n", vil_cli_pos_note(c, &meta, shown, sizeof shown));
    printf("blocks:      %d, embed dim %d, inner dim %d, state %d, dt rank %d, conv %d\n",
           c->depth, c->embed_dim, c->d_inner, c->d_state, c->dt_rank, c->d_conv);
    printf("classes:     %d", c->num_classes);
    if (meta.class_names) {
        printf(" (");
        int show = c->num_classes < 5 ? c->num_classes : 5;
        for (int i = 0; i < show; i++) { /* ImageNet's names list synonyms: the first will do */
            char first[256];
            const char *nm = meta.class_names[i], *comma = strstr(nm, ", ");
            snprintf(first, sizeof first, "%.*s", comma ? (int)(comma - nm) : (int)strlen(nm), nm);
            printf("%s%s", i ? ", " : "", vil_printable(shown, sizeof shown, first));
        }
        printf("%s)\n", c->num_classes > show ? ", ..." : "");
    } else {
        printf(" (no class names in the file)\n");
    }
    if (strcmp(meta.format, "pth") != 0) printf("step:        %ld\n", meta.step);
    if (meta.eval.crop_pct > 0) printf("evaluation:  crop_pct %g (from %s)\n", meta.eval.crop_pct, meta.eval_from);
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&m);
    free(model_file);
    return 0;
}
