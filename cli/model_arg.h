/* model_arg.h: what the commands that read a checkpoint share: `--model RUN` (a run folder of
 * `vil train` in place of a checkpoint file: classify, eval, compare, states, info) and the
 * check of --crop-pct. */
#ifndef VIL_CLI_MODEL_ARG_H
#define VIL_CLI_MODEL_ARG_H

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

/* The flag rows of --model CKPT|RUN and --ema, the same in every command that reads a model
 * (their Flags struct names the fields model and ema) */
#define VIL_ARG_MODEL_ROWS(o)                                                                          \
    {"--model", VIL_ARG_STR, &(o).model,                                                               \
     "checkpoint (.safetensors, or a PyTorch .pth), or a run folder: its best.safetensors",            \
     .meta = "CKPT|RUN", .required = 1},                                                               \
    {"--ema", VIL_ARG_FLAG, &(o).ema, "a .pth training checkpoint's model_ema, or a run folder's ema.safetensors"}

#endif
