/* api.h: what the files of api/ share behind the public include/vil.h: the handles' contents
 * and the call frame that turns the internals' vil_error messages into vil_last_error. */
#ifndef VIL_API_INTERNAL_H
#define VIL_API_INTERNAL_H

#define VIL_BUILDING_LIBRARY 1
#include "include/vil.h"

#include <stdarg.h>

#include "formats/checkpoint.h"
#include "vil/backend.h"
#include "vil/common.h"
#include "vil/model.h"

#define VIL_API_MAX_BATCH 4096

struct vil_ctx {
    const VilBackend *be;
    int cpu;          /* be is the CPU's */
    int threads;      /* a CPU context's OpenMP threads, set on each call's thread */
    int n_models;     /* models loaded on it and not yet freed */
    char device_name[256];
};

struct vil_classifier {
    vil_ctx *ctx;
    VilModel m;
    VilCheckpointMeta meta;
    VilEvalSpec ev;     /* the evaluation transform: the file's, else the defaults */
    char *source;       /* the file it was loaded from (written into a saved checkpoint) */
    int states_ready;   /* a vil_classifier_states_run is the last forward */
};

/* One entry point's frame: begin captures this thread's vil_error messages (and sets a CPU
 * context's thread count), end turns an internal return code (0, -1, VIL_EUSAGE) into the
 * API's (VIL_OK, VIL_ERR, VIL_ERR_ARG), keeping the messages for vil_last_error. */
typedef struct {
    VilErrCapture cap;
} VilApiCall;
void vil_api_begin(VilApiCall *c, const vil_ctx *ctx);
int vil_api_end(VilApiCall *c, int rc);
/* A failure found before any internal call: the message for vil_last_error; returns code. */
int vil_api_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
