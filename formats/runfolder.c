/* runfolder.c: runfolder.h */
#include "formats/runfolder.h"

#include <stdlib.h>
#include <sys/stat.h>

#include "vil/common.h"

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

const char *vil_run_model_file(const char *path, int *ema, char **owned, const char **name, const char **why) {
    struct stat st;
    *owned = NULL;
    if (name) *name = NULL;
    if (why) *why = NULL;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return path;
    char shown[1024];
    vil_printable(shown, sizeof shown, path);
    const char *n = *ema ? "ema.safetensors" : "best.safetensors", *w = NULL;
    char *p = vil_path_join(path, n);
    if (*ema) {
        w = "the EMA of its last save";
    } else if (is_file(p)) {
        w = "the weights of its best evaluation";
    } else {
        free(p);
        n = "last.safetensors";
        p = vil_path_join(path, n);
        w = "its last save: no best.safetensors, no evaluation yet";
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
    *ema = 0;
    *owned = p;
    if (name) *name = n;
    if (why) *why = w;
    return p;
}
