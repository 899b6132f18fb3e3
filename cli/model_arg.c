/* model_arg.c: the flags of model_arg.h; a run folder's files: formats/runfolder.c */
#include "cli/model_arg.h"

#include <stdio.h>
#include <stdlib.h>

#include "cli/args.h"
#include "formats/runfolder.h"
#include "vil/common.h"
#include "vil/limits.h"

const char *vil_cli_model_path(const char *cmd, const char *model, int *ema, char **owned) {
    const char *name, *why;
    const char *p = vil_run_model_file(model, ema, owned, &name, &why);
    if (p && name) {
        char shown[1024];
        fprintf(stderr, "vil %s: %s: %s (%s)\n", cmd, vil_printable(shown, sizeof shown, model), name, why);
    }
    return p;
}

int vil_cli_crop_pct_ok(const char *cmd, float crop_pct) {
    if (crop_pct == 0.0f || (crop_pct >= VIL_MIN_CROP_PCT && crop_pct <= 1.0f)) return 1;
    fprintf(stderr, "vil %s: --crop-pct takes 0 (the checkpoint's) or 0.001..1, got %g\n", cmd, crop_pct);
    return 0;
}

int vil_cli_pos_mode(const char *cmd, const char *word) {
    int mode = vil_pos_mode_parse(word);
    if (mode < 0) vil_cli_bad_choice(cmd, "--pos", "interp, keep or center", word);
    return mode;
}

const char *vil_cli_pos_note(const VilConfig *c, const VilCheckpointMeta *meta, char *buf, size_t n) {
    static const char *const HOW[VIL_POS_MODE_COUNT] = {
        [VIL_POS_INTERP] = "interpolated from",
        [VIL_POS_KEEP] = "kept (top-left, edges extended) from",
        [VIL_POS_CENTER] = "kept (centred, edges extended) from"};
    int g = meta->trained_grid;
    if (!g) snprintf(buf, n, "%s", "");
    else if (c->pos_embed_kind == VIL_POS_EMBED_NONE) snprintf(buf, n, "no pos_embed to move from the trained %d x %d grid", g, g);
    else snprintf(buf, n, "pos_embed %s the trained %d x %d grid", HOW[meta->pos_mode], g, g);
    return buf;
}
