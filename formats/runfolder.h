/* runfolder.h: the checkpoint a path names, for everything that reads a model: a file is itself,
 * a folder is a run of `vil train` (train/state.c writes last.safetensors, ema.safetensors, and
 * best.safetensors when an evaluation improved on the best top-1). */
#ifndef VIL_RUNFOLDER_H
#define VIL_RUNFOLDER_H

/* The checkpoint that `path` names. A file (or anything that is not a folder) is itself. A folder
 * is a run: its best.safetensors, else its last.safetensors; with *ema set, its ema.safetensors,
 * and *ema is cleared (the file holds the EMA alone, as a .pth's model_ema would). Returns the
 * path (path itself, or malloc'd into *owned, which the caller frees); *name and *why (may be
 * NULL) say which file of the folder and why (NULL for a file). NULL after a vil_error saying
 * what the folder lacks. Prints nothing. */
const char *vil_run_model_file(const char *path, int *ema, char **owned, const char **name, const char **why);

#endif
