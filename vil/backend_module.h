/* backend_module.h: the boundary between vil's core and a backend built as a module loaded at
 * run time (libvil-cuda.so, from cuda/), as ggml's dynamically loaded backends are. The core
 * (libvil.a, bin/vil, the tests) links no CUDA library: vil/backend_load.c finds the module file,
 * dlopen()s it on first need and calls its one exported symbol, vil_backend_module_open, with
 * the table of the core's functions (VilCoreApi); the module answers with the table of its own
 * (VilBackendModule). The module reaches the core only through VilCoreApi: cuda/core_shim.c
 * defines vil_error, vil_malloc, vil_dist_bcast and the others the CUDA sources call, each
 * forwarding to the table, so the module needs no symbol of libvil (`nm -u` shows none) and
 * exports nothing but its entry point (`nm -D --defined-only`).
 *
 * Both sides are built from one tree by one `make`: the tables and VilBackend must match. Each
 * side checks the other's abi number and struct sizes and refuses a mismatch (the loader says
 * which); a change to either table, to VilBackend's members or to an op's argument struct (its
 * fields, or what they may hold: 2 made tokens' pos and dpos NULL for a model without a position
 * embedding) bumps VIL_BACKEND_MODULE_ABI. New members go at the end of a table. */
#ifndef VIL_BACKEND_MODULE_H
#define VIL_BACKEND_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "vil/backend.h"
#include "vil/dist.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VIL_BACKEND_MODULE_ABI 2
/* the file of the CUDA module, and the symbol every module exports */
#define VIL_CUDA_MODULE_FILE "libvil-cuda.so"
#define VIL_BACKEND_MODULE_ENTRY "vil_backend_module_open"

/* The core's functions a module may call; messages arrive formatted (the shims format them). */
typedef struct VilCoreApi {
    uint32_t abi;           /* VIL_BACKEND_MODULE_ABI of the core */
    uint32_t size;          /* sizeof(VilCoreApi) */
    uint32_t backend_size;  /* sizeof(VilBackend) */
    /* vil_error (this thread's capture included), and vil_fatal, which does not return */
    void (*error)(const char *msg);
    void (*fatal)(const char *file, int line, const char *msg);
    /* the checked allocations of common.h: they end the process with the size on failure */
    void *(*malloc)(size_t bytes);
    void *(*calloc)(size_t n, size_t size);
    void *(*realloc)(void *p, size_t bytes);
    double (*now)(void); /* vil_now: the watchdog compares the module's times with its own */
    /* dist.h: the NCCL id's broadcast and the watchdog's hooks */
    void (*dist_bcast)(const VilDist *d, void *buf, size_t bytes, int root);
    void (*dist_wait_begin)(const char *what);
    void (*dist_wait_end)(void);
    void (*dist_watch_device)(const VilDistDeviceWatch *w);
} VilCoreApi;

/* What a module gives the core. The device queries write their reason into why (n bytes). */
typedef struct VilBackendModule {
    uint32_t abi;           /* VIL_BACKEND_MODULE_ABI of the module */
    uint32_t size;          /* sizeof(VilBackendModule) */
    uint32_t backend_size;  /* sizeof(VilBackend) as the module sees it */
    const char *name;       /* the device name it serves: "cuda" */
    /* 1 when device 0 can run this module's kernels, else 0 and the reason */
    int (*available)(char *why, size_t n);
    /* 1 when the module was built with NCCL (multi-GPU training), else 0 and the reason */
    int (*nccl_available)(char *why, size_t n);
    /* how it was built: "CUDA 13.0, archs sm_90, NCCL yes (2.28.9)" (static text) */
    const char *(*build_info)(void);
    /* what it runs on: "runtime 13.0, driver 13.0, NCCL 2.28.9" into buf; returns buf */
    const char *(*runtime_info)(char *buf, size_t n);
    /* device 0's instance, shared by the process and never closed (vil_backend_get); its
     * stream and handles are created here. NULL with a vil_error message when they cannot be. */
    const VilBackend *(*shared)(void);
    /* an instance of its own on device index (vil_backend_open), its stream and handles
     * created; NULL with a vil_error message (no such device, no code for it, a handle that
     * cannot be created). close frees one after everything allocated on it. */
    const VilBackend *(*open)(int index);
    void (*close)(const VilBackend *be);
} VilBackendModule;

/* A module's entry point: NULL when it cannot work with this core (another abi, other sizes). */
typedef const VilBackendModule *(*VilBackendModuleOpen)(const VilCoreApi *core);
#if defined(__GNUC__)
__attribute__((visibility("default")))
#endif
const VilBackendModule *vil_backend_module_open(const VilCoreApi *core);

/* For a program that links a module's objects itself (the dev/cuda harnesses: their kernels
 * reach the module's context): the loader then uses m for its device and never looks for the
 * file. Call before the first use of the device; 0, or -1 with a vil_error message. */
int vil_backend_module_link(const VilBackendModule *m);
/* cuda/backend_cuda.cu's table, for vil_backend_module_link (the .so's entry point returns it) */
const VilBackendModule *vil_cuda_module(void);

#ifdef __cplusplus
}
#endif
#endif
