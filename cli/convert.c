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
#include "cli/model_arg.h"
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

/* the flags' values: their defaults set by vil_cmd_convert, then filled by vil_args_parse */
typedef struct {
    const char *names;
    int ema, img_size;
} Flags;
static Flags o;

static const VilArg ARGS[] = {
    {"--ema", VIL_ARG_FLAG, &o.ema, "convert a .pth training checkpoint's model_ema instead of its model"},
    {"--img-size", VIL_ARG_INT, &o.img_size, "image size of a file that does not state it (a bare state dict); for one that does, another size interpolates pos_embed"},
    {"--names", VIL_ARG_STR, &o.names, "class names to store (imagenet_classes.tsv form, or one per line)"},
};

const VilArgSpec vil_cmd_convert_spec = {
    "convert", "IN OUT.safetensors|OUT.pth [--ema] [--img-size N] [--names FILE]",
    "Rewrites a checkpoint (a PyTorch .pth such as the published ViM files, read\n"
    "without running its pickle, a vil checkpoint, or a safetensors state dict) as\n"
    "a vil checkpoint: the same tensors under the official names plus vil's\n"
    "metadata (config, image size, class names). OUT's extension picks the format:\n"
    ".safetensors, or .pth (torch.save's zip format: {'model': the state dict,\n"
    "'vil_metadata': ...}, which torch.load(..., weights_only=True) reads); any\n"
    "other name is refused. ImageNet-1k checkpoints get ImageNet's class names.",
    ARGS, (int)(sizeof ARGS / sizeof ARGS[0]), 2, 2};

/* --names' n class names into *own (malloc'd, NULL when none were read), each valid UTF-8: they
 * go into the metadata, which is UTF-8 JSON. 0, or -1 (reported). */
static int read_names(int n, char ***own) {
    *own = NULL;
    if (vil_names_read(o.names, n, own) != 0) return -1;
    for (int i = 0; i < n; i++) {
        size_t len = strlen((*own)[i]);
        if (vil_utf8_invalid_at((const unsigned char *)(*own)[i], len) != len) {
            char shown[160];
            vil_error("the class-names file '%s' names class %d '%s', which is not valid "
                      "UTF-8; the names go into the checkpoint's metadata: write the file in "
                      "UTF-8", o.names, i, vil_printable(shown, sizeof shown, (*own)[i]));
            return -1;
        }
    }
    return 0;
}

/* What was written to out must read back as the same network with the same weights, class
 * names and evaluation crop: 0, or -1 with out removed (reported). */
static int check_written(const char *out, const VilModel *m, const VilCheckpointMeta *meta, char **class_names) {
    VilModel back;
    VilCheckpointMeta mb;
    const VilConfig *c = &m->cfg;
    if (vil_checkpoint_load(out, &vil_backend_cpu, NULL, &back, &mb) != 0) {
        vil_error("'%s' was written but does not read back: removed", out);
        remove(out);
        return -1;
    }
    int same = back.cfg.img_size == c->img_size && back.cfg.stride == c->stride &&
               same_params(m, &back) && (mb.class_names != NULL) == (class_names != NULL) &&
               fabsf(mb.eval.crop_pct - (meta->eval.crop_pct > 0 ? meta->eval.crop_pct : 0)) < 1e-6f;
    for (int i = 0; same && class_names && i < c->num_classes; i++)
        same = strcmp(mb.class_names[i], class_names[i]) == 0;
    vil_checkpoint_meta_free(&mb);
    vil_model_free(&back);
    if (same) return 0;
    vil_error("'%s' reads back with other weights, another architecture, other class names "
              "or another evaluation crop: not converted", out);
    remove(out);
    return -1;
}

/* in (loaded as m, meta) saved as out with class_names (own: --names'), checked and described */
static int convert(const char *in, const char *out, const VilModel *m, const VilCheckpointMeta *meta,
                   char **class_names, char **own) {
    const VilConfig *c = &m->cfg;
    /* the input's path as the metadata records it: escaped where it is not UTF-8 */
    char source[1100], shown_in[1024];
    vil_printable(shown_in, sizeof shown_in, in);
    snprintf(source, sizeof source, "%s%s%s", shown_in, meta->weights[0] ? ":" : "", meta->weights);
    if (vil_checkpoint_save_from(m, out, class_names, class_names ? c->num_classes : 0,
                                 meta->eval.crop_pct > 0 ? &meta->eval : NULL, source) != 0 ||
        check_written(out, m, meta, class_names) != 0)
        return 1;
    printf("%s%s%s -> %s\n", in, meta->weights[0] ? ":" : "", meta->weights, out);
    printf("  %s (%s scan), %zu parameters, %d x %d, patch %d stride %d, %d classes%s\n", c->name,
           vil_recurrences[c->rec].name, m->param_count, c->img_size,
           c->img_size, c->patch_size, c->stride, c->num_classes,
           class_names ? (own ? ", names from --names" : ", with class names") : ", no class names");
    char note[128];
    if (meta->trained_grid) printf("  %s\n", vil_cli_pos_note(c, meta, note, sizeof note));
    return 0;
}

int vil_cmd_convert(int argc, char **argv) {
    o = (Flags){0};
    char **pos;
    int npos;
    int rc = vil_args_parse_all(&vil_cmd_convert_spec, argc, argv, &pos, &npos);
    if (rc >= 0) return rc;
    const char *in = pos[0], *out = pos[1];
    free(pos);
    if (o.img_size < 0) {
        fprintf(stderr, "vil convert: --img-size must be >= 0\n");
        return 2;
    }
    if (vil_checkpoint_format_of(out) < 0) return 2; /* reported: the formats vil writes */
    /* IN (and --names) are inputs, which OUT may not be (vil/files.h): checked before the load */
    vil_inputs_track(1);
    vil_input_add(in);
    if (o.names) vil_input_add(o.names);
    if (vil_output_check(out, NULL, NULL) != 0) return 2;
    VilModel m;
    VilCheckpointMeta meta;
    VilCheckpointOpts lo = {.img_size = o.img_size, .ema = o.ema};
    if (vil_checkpoint_load(in, &vil_backend_cpu, &lo, &m, &meta) != 0) return 1;
    int NC = m.cfg.num_classes;
    char **own = NULL;
    rc = 1;
    if (!o.names || read_names(NC, &own) == 0)
        rc = convert(in, out, &m, &meta, own ? own : meta.class_names, own);
    if (own)
        for (int i = 0; i < NC; i++) free(own[i]);
    free(own);
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&m);
    return rc;
}
