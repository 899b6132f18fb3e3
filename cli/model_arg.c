/* model_arg.c: the flags of model_arg.h. A run folder's file names are the trainer's
 * (train/state.c): last.safetensors, ema.safetensors and best.safetensors, the last written only
 * when an evaluation improved on the best top-1. */
#include "cli/model_arg.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "vil/common.h"
#include "vil/limits.h"

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

const char *vil_cli_model_path(const char *cmd, const char *model, int *ema, char **owned) {
    struct stat st;
    *owned = NULL;
    if (stat(model, &st) != 0 || !S_ISDIR(st.st_mode)) return model;
    char shown[1024];
    vil_printable(shown, sizeof shown, model);
    const char *name = *ema ? "ema.safetensors" : "best.safetensors", *why = NULL;
    char *p = vil_path_join(model, name);
    if (*ema) {
        why = "the EMA of its last save";
    } else if (is_file(p)) {
        why = "the weights of its best evaluation";
    } else {
        free(p);
        name = "last.safetensors";
        p = vil_path_join(model, name);
        why = "its last save: no best.safetensors, no evaluation yet";
    }
    if (!is_file(p)) {
        if (*ema)
            vil_error("'%s' holds no ema.safetensors: the run kept no EMA (ema_decay 0), or it is "
                      "not a run folder of `vil train`; leave out --ema for its best weights", shown);
        else
            vil_error("'%s' is a folder without best.safetensors or last.safetensors: give a run "
                      "folder of `vil train` or a checkpoint file", shown);
        free(p);
        return NULL;
    }
    fprintf(stderr, "vil %s: %s: %s (%s)\n", cmd, shown, name, why);
    *ema = 0;
    *owned = p;
    return p;
}

int vil_cli_crop_pct_ok(const char *cmd, float crop_pct) {
    if (crop_pct == 0.0f || (crop_pct >= VIL_MIN_CROP_PCT && crop_pct <= 1.0f)) return 1;
    fprintf(stderr, "vil %s: --crop-pct takes 0 (the checkpoint's) or 0.001..1, got %g\n", cmd, crop_pct);
    return 0;
}
