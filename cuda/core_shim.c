/* core_shim.c: the module's side of vil/backend_module.h: libvil-cuda.so's entry point, which
 * keeps the core's table, and the core functions the CUDA sources call (common.h's errors and
 * checked allocations, vil_now, dist.h's broadcast and watchdog hooks), each forwarding to that
 * table. Compiled into the module only, with hidden visibility: the module needs no symbol of
 * libvil and exports only its entry point. A program that links cuda/'s objects itself (the
 * dev/cuda harnesses) leaves this file out and has libvil.a's own functions. A function the
 * CUDA sources start to call from the core is added here and to VilCoreApi (`nm -u` on the
 * module lists any that is missing: the link refuses an undefined symbol). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "vil/backend_module.h"
#include "vil/common.h"
#include "vil/dist.h"

static const VilCoreApi *core;

const VilBackendModule *vil_backend_module_open(const VilCoreApi *c) {
    if (!c || c->abi != VIL_BACKEND_MODULE_ABI || c->size != sizeof(VilCoreApi) ||
        c->backend_size != sizeof(VilBackend))
        return NULL;
    core = c;
    return vil_cuda_module();
}

void vil_error(const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    core->error(msg);
}

void vil_fatal(const char *file, int line, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    core->fatal(file, line, msg);
    abort(); /* the core's does not return: this only tells the compiler so */
}

void *vil_malloc(size_t bytes) { return core->malloc(bytes); }
void *vil_calloc(size_t n, size_t size) { return core->calloc(n, size); }
void *vil_realloc(void *p, size_t bytes) { return core->realloc(p, bytes); }
double vil_now(void) { return core->now(); }

void vil_dist_bcast(const VilDist *d, void *buf, size_t bytes, int root) {
    core->dist_bcast(d, buf, bytes, root);
}
void vil_dist_wait_begin(const char *what) { core->dist_wait_begin(what); }
void vil_dist_wait_end(void) { core->dist_wait_end(); }
void vil_dist_watch_device(const VilDistDeviceWatch *w) { core->dist_watch_device(w); }
