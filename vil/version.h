/* version.h: what this vil is: its version (defined here and nowhere else), the git commit it
 * was built from and the build options. `vil --version` and `vil version` print it, and the last
 * line of `vil help` is made of the same pieces, so the two cannot disagree. */
#ifndef VIL_VERSION_H
#define VIL_VERSION_H

#include <stdio.h>

#define VIL_VERSION "0.9.0"

/* "vil 0.9.0 (git 84a0dd3abcde-dirty)"; "git unknown" for a build outside a git checkout */
const char *vil_version_string(void);
/* The git commit alone: `git describe --always --dirty --abbrev=12` at build time, or "unknown". */
const char *vil_version_commit(void);
/* One line, the build options: "gcc 12.2.0; CUDA 13.0, archs ...; BLAS openblas (OpenBLAS
 * 0.3.21); MPI yes (Open MPI 4.1.4); OpenMP 4.5" */
const char *vil_build_options(void);
/* vil_version_string, then one "option: value" line each: what `vil --version` prints. */
void vil_version_print(FILE *f);

#endif
