/* model_arg.h: what the commands that read a checkpoint share: `--model RUN` (a run folder of
 * `vil train` in place of a checkpoint file: classify, eval, compare, states, info), the check
 * of --crop-pct and --pos (eval, compare, info). */
#ifndef VIL_CLI_MODEL_ARG_H
#define VIL_CLI_MODEL_ARG_H

#include <stddef.h>

#include "formats/checkpoint.h"

/* The checkpoint that `model` names. A file (or anything that is not a folder) is itself. A
 * folder is a run: its best.safetensors (the weights of its best evaluation), else its
 * last.safetensors; with *ema set, its ema.safetensors, and *ema is cleared (the file holds the
 * EMA alone, as a .pth's model_ema would). The pick is said on stderr ("vil CMD: RUN: its
 * best.safetensors ..."). Returns the path (model itself, or malloc'd into *owned, which the
 * caller frees), or NULL after an error saying what the folder lacks. */
const char *vil_cli_model_path(const char *cmd, const char *model, int *ema, char **owned);

/* 1 when --crop-pct's value is 0 (the checkpoint's) or in VIL_MIN_CROP_PCT..1; else 0 after
 * saying so on stderr (the caller exits 2). */
int vil_cli_crop_pct_ok(const char *cmd, float crop_pct);

/* --pos's word as a VilPosMode, or -1 after a usage message on stderr (the caller exits 2) */
int vil_cli_pos_mode(const char *cmd, const char *word);
#define VIL_POS_HELP                                                                                \
    "how pos_embed reaches another --img-size's patch grid: interp (bicubic), keep "                \
    "(each patch keeps its trained row and column: the trained grid at the top-left, its edges "     \
    "extended, cut when smaller) or center (the same with the trained grid in the middle)"
/* What happened to the position embedding of a model loaded onto another grid than its file's,
 * as "pos_embed interpolated from the trained 4 x 4 grid" (the mode's words; "no pos_embed" for
 * a model without one), into buf; "" when it runs on its own grid. Returns buf. */
const char *vil_cli_pos_note(const VilConfig *c, const VilCheckpointMeta *meta, char *buf, size_t n);

/* The flag rows of --model CKPT|RUN and --ema, the same in every command that reads a model
 * (their Flags struct names the fields model and ema) */
#define VIL_ARG_MODEL_ROWS(o)                                                                          \
    {"--model", VIL_ARG_STR, &(o).model,                                                               \
     "checkpoint (.safetensors, or a PyTorch .pth), or a run folder: its best.safetensors",            \
     .meta = "CKPT|RUN", .required = 1},                                                               \
    {"--ema", VIL_ARG_FLAG, &(o).ema, "a .pth training checkpoint's model_ema, or a run folder's ema.safetensors"}

#endif
