/* checkpoint.h: ViL / ViM checkpoints. vil writes safetensors files: tensors under the official
 * ViM key names (doc/models.md), metadata with the model config, image size, class names and
 * training step; `vil convert` also writes the same as a PyTorch .pth (pth.h). It reads those,
 * safetensors files that hold only tensors, and PyTorch .pth files (the published ViM
 * checkpoints), told apart by their first bytes; without a config in the file the architecture
 * is inferred from the tensor shapes. */
#ifndef VIL_CHECKPOINT_H
#define VIL_CHECKPOINT_H

#include "vil/model.h"

/* How a model's inputs are made for evaluation: the shorter side resized to img_size / crop_pct
 * (bicubic), a center crop, then (x - mean) / std per channel. Training records it in its
 * checkpoints ("vil.eval"), so eval and classify feed a model what it was validated on. */
typedef struct {
    float crop_pct;        /* (0, 1]; 0: not known */
    int has_norm;          /* mean and std are set (else the channel count's defaults) */
    float mean[3], std[3];
} VilEvalSpec;

/* How a position embedding trained on one patch grid reaches another (doc/models.md, "Another
 * resolution, another grid"): resampled bicubically, or kept, every patch keeping its trained
 * (row, col) with the trained grid at the top-left or in the centre of the new one, the grid's
 * edges extended past it and cut where the new grid is smaller. */
typedef enum { VIL_POS_INTERP, VIL_POS_KEEP, VIL_POS_CENTER } VilPosMode;
#define VIL_POS_MODE_COUNT 3
/* "interp", "keep", "center"; NULL for a value that is none of them */
const char *vil_pos_mode_name(int mode);
/* the mode a name is, or -1 */
int vil_pos_mode_parse(const char *name);

typedef struct {
    int img_size; /* evaluate at this resolution (0: the file's own, 224 when it does not say) */
    int ema;      /* 1: a .pth training checkpoint's model_ema instead of its model */
    VilPosMode pos; /* how pos_embed reaches another img_size's grid (0: interpolated) */
} VilCheckpointOpts;

typedef struct {
    int img_size;       /* resolution the model was trained at */
    long step;          /* training step (0: untrained / unknown) */
    int n_classes;
    char **class_names; /* (n_classes) or NULL when the file has none */
    int config_inferred;/* 1: no config in the metadata, the architecture came from shapes */
    int trained_grid;   /* > 0: the model runs on another patch grid than the file's, whose side
                         * this is; its pos_embed was moved as pos_mode says (a model without
                         * one, pos_embed = none, needed nothing) */
    VilPosMode pos_mode;
    char format[16];    /* "safetensors" or "pth" */
    /* .pth files only */
    char weights[16];   /* the state dict read: "model", "model_ema", "state_dict", "" (the file is one) */
    int has_ema;        /* the file holds model_ema */
    long epoch;         /* -1: not said */
    char source_model[128]; /* args.model of the run that wrote it */
    char file_keys[256];    /* the file's top-level keys */
    int head_kept;      /* vil_checkpoint_init: the head was not taken (other classes) */
    VilEvalSpec eval;   /* the evaluation transform the file states (crop_pct 0: none) */
    char eval_from[32]; /* where eval came from: "the checkpoint", "the .pth's args" or "" */
} VilCheckpointMeta;

/* The formats a checkpoint is written in */
typedef enum { VIL_CKPT_SAFETENSORS, VIL_CKPT_PTH } VilCkptFormat;
/* The format a file named path is written in, from its extension (".safetensors" or ".pth", in
 * any case), or VIL_EUSAGE with a vil_error that names the two for any other name. */
int vil_checkpoint_format_of(const char *path);

/* Write m's parameters (float32) and metadata atomically as safetensors. class_names may be NULL; ev (may be
 * NULL) is the evaluation transform the model was validated with. */
int vil_checkpoint_save(const VilModel *m, const char *path, long step,
                        char *const *class_names, int n_classes, const VilEvalSpec *ev);
/* The same for weights that came from elsewhere (vil convert): step 0, and source (such as
 * "vim_t.pth:model_ema") recorded in the metadata; in the format path's extension names
 * (vil_checkpoint_format_of: VIL_EUSAGE, nothing written, for a name it does not take). A .pth
 * holds {'model': the state dict in checkpoint order, 'vil_metadata': the same metadata}. */
int vil_checkpoint_save_from(const VilModel *m, const char *path, char *const *class_names,
                             int n_classes, const VilEvalSpec *ev, const char *source);

/* Read a checkpoint's config (from its metadata, or inferred from the tensor shapes with the
 * image size the file states, else opt->img_size, else 224) and validate every tensor. A file
 * that states its image size, loaded at another opt->img_size, keeps its patches and stride and
 * gets its position embedding moved onto the new grid as opt->pos says (the class-token row
 * unchanged). On success *m is initialized on backend be with the file's parameters and *meta
 * is filled. Errors name the file and what is wrong; returns -1 then and leaves nothing
 * allocated (VIL_EUSAGE for an opt->pos that is no VilPosMode). opt may be NULL (the file's own
 * size, its model weights). */
int vil_checkpoint_load(const char *path, const VilBackend *be, const VilCheckpointOpts *opt,
                        VilModel *m, VilCheckpointMeta *meta);
/* Initialize the parameters of m (allocated, weights drawn) from a checkpoint of the same
 * network, for fine-tuning: every tensor must match, except that pos_embed is interpolated when
 * m's grid differs (another image size or stride) and the head keeps its fresh weights when m
 * has another number of classes (meta->head_kept). 0, or -1 with every problem reported. */
int vil_checkpoint_init(VilModel *m, const char *path, int ema, VilCheckpointMeta *meta);
void vil_checkpoint_meta_free(VilCheckpointMeta *meta);

/* pos_embed (G*G + 1, D) with the class token at row G*G/2 -> (G2*G2 + 1, D), bicubic on the
 * patch grid as torch.nn.functional.interpolate(mode='bicubic', align_corners=False). 0, or -1
 * (reported) without the memory for its G x G2 x D intermediate. */
int vil_pos_embed_resize(float *dst, const float *src, int G, int G2, int D);
/* The same move, keeping the trained grid (mode VIL_POS_KEEP or VIL_POS_CENTER): the patch at
 * (i, j) of the G2 x G2 grid takes the trained row of (clamp(i - o, 0, G-1), clamp(j - o, 0, G-1)),
 * o = 0 (keep: the trained grid at the top-left) or (G2 - G) / 2 rounded toward zero (center: as
 * many new rows above as below, one more below when they differ by an odd count; a smaller grid
 * cut from the middle). The class-token row is copied as it is. */
void vil_pos_embed_keep(float *dst, const float *src, int G, int G2, int D, VilPosMode mode);

#endif
