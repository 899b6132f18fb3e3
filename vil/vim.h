/* vim.h: what the family of Vision Mamba's network (ViL, ViM; vil/vim.c) tells its readers beyond
 * the model interface: the layout of its x_dbl activation, for tools and tests that read it
 * (vil_model_act "layers.I.mixer.x_dbl"). */
#ifndef VIL_VIM_H
#define VIL_VIM_H

#include "config.h"

/* x_dbl's row layout: k starts at column *dt_ld, q at *dt_ld + d_state, and rows are *xdbl_ld
 * elements apart. */
void vil_vim_xdbl_layout(const VilConfig *c, int *dt_ld, int *xdbl_ld);

#endif
