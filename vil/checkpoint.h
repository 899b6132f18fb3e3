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
} VilCheckpointMeta;

/* Write m's parameters (float32) and metadata atomically. class_names may be NULL. */
int vil_checkpoint_save(const VilModel *m, const char *path, long step,
                        char *const *class_names, int n_classes);

/* Read a checkpoint's config (from its metadata, or inferred from the tensor shapes with the
 * image size img_size_hint, 0 meaning 224) and validate every tensor. On success *m is
 * initialized on backend be with the file's parameters and *meta is filled. Errors name the
 * file and what is wrong; returns -1 then and leaves nothing allocated. */
int vil_checkpoint_load(const char *path, const VilBackend *be, int img_size_hint, VilModel *m,
                        VilCheckpointMeta *meta);
void vil_checkpoint_meta_free(VilCheckpointMeta *meta);

#endif
