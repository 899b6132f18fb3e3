/* checkpoint.h: ViL / ViM checkpoints as safetensors files: tensors under the official ViM
 * key names (models.md), metadata with the model config, image size, class names and training
 * step. A file that holds only tensors also loads: the architecture is inferred from shapes. */
#ifndef VIL_CHECKPOINT_H
#define VIL_CHECKPOINT_H

#include "model.h"

typedef struct {
    int img_size;       /* resolution the model was trained at */
    long step;          /* training step (0: untrained / unknown) */
    int n_classes;
    char **class_names; /* (n_classes) or NULL when the file has none */
    int config_inferred;/* 1: no config in the metadata, the architecture came from shapes */
    int pos_interpolated_from; /* > 0: pos_embed was resized from this grid side (img_size_hint) */
} VilCheckpointMeta;

/* Write m's parameters (float32) and metadata atomically. class_names may be NULL. */
int vil_checkpoint_save(const VilModel *m, const char *path, long step,
                        char *const *class_names, int n_classes);

/* Read a checkpoint's config (from its metadata, or inferred from the tensor shapes with the
 * image size img_size_hint, 0 meaning 224) and validate every tensor. A file with a config
 * loaded at another img_size_hint keeps its patches and stride and gets its position
 * embedding interpolated bicubically onto the new grid (the class-token row unchanged). On success *m is
 * initialized on backend be with the file's parameters and *meta is filled. Errors name the
 * file and what is wrong; returns -1 then and leaves nothing allocated. */
int vil_checkpoint_load(const char *path, const VilBackend *be, int img_size_hint, VilModel *m,
                        VilCheckpointMeta *meta);
void vil_checkpoint_meta_free(VilCheckpointMeta *meta);

/* pos_embed (G*G + 1, D) with the class token at row G*G/2 -> (G2*G2 + 1, D), bicubic on the
 * patch grid as torch.nn.functional.interpolate(mode='bicubic', align_corners=False). */
void vil_pos_embed_resize(float *dst, const float *src, int G, int G2, int D);

#endif
