/* backend_load.c: choosing a backend by name, and the CUDA module behind "cuda": found where
 * backend.h says, dlopen()ed once on its first need (under a mutex) and kept open, handed the
 * core's table and asked for its own (backend_module.h). "auto" looks for an NVIDIA driver
 * first and loads nothing without one, so a machine without a GPU never maps the CUDA
 * libraries. Nothing here exits: each failure is a message that says which step failed. */
#define _GNU_SOURCE /* dladdr1 and RTLD_DL_LINKMAP */
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "backend_module.h"
#include "common.h"
#include "dist.h"

/* ---- what this build knows of CUDA without loading anything (the Makefile's facts) ---- */
#ifdef VIL_CUDA
#ifndef VIL_CUDA_VERSION
#define VIL_CUDA_VERSION "(version unknown)"
#endif
#ifndef VIL_CUDA_ARCHS
#define VIL_CUDA_ARCHS "unknown architectures"
#endif
#if defined(VIL_CUDA_NCCL) && VIL_CUDA_NCCL
#define VIL_CUDA_NCCL_TEXT "yes"
#else
#define VIL_CUDA_NCCL_TEXT "no"
#endif
#endif

const char *vil_cuda_build_info(void) {
#ifdef VIL_CUDA
    return "CUDA " VIL_CUDA_VERSION ", archs " VIL_CUDA_ARCHS ", NCCL " VIL_CUDA_NCCL_TEXT;
#else
    return "no (CPU only)";
#endif
}

/* ---- the core's table: what a module may call (backend_module.h) ---- */
static void core_error(const char *msg) { vil_error("%s", msg); }
static void core_fatal(const char *file, int line, const char *msg) { vil_fatal(file, line, "%s", msg); }

static const VilCoreApi core_api = {
    .abi = VIL_BACKEND_MODULE_ABI,
    .size = sizeof(VilCoreApi),
    .backend_size = sizeof(VilBackend),
    .error = core_error,
    .fatal = core_fatal,
    .malloc = vil_malloc,
    .calloc = vil_calloc,
    .realloc = vil_realloc,
    .now = vil_now,
    .dist_bcast = vil_dist_bcast,
    .dist_wait_begin = vil_dist_wait_begin,
    .dist_wait_end = vil_dist_wait_end,
    .dist_watch_device = vil_dist_watch_device,
};

/* ---- the driver check of "auto": files only, no library loaded ---- */
static int path_exists(const char *p) { return access(p, F_OK) == 0; }

/* 1 when dir holds an entry other than . and .. */
static int dir_has_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int any = 0;
    while (!any && (e = readdir(d)))
        any = strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return any;
}

/* CUDA_VISIBLE_DEVICES set to an empty list or one starting with a negative index shows CUDA
 * no device at all: a way to keep a run off the GPUs that "auto" respects without loading */
static int cuda_devices_hidden(void) {
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    return v && (v[0] == '\0' || v[0] == '-');
}

/* The files an NVIDIA driver makes: the proc entries of its GPUs and the device nodes on Linux,
 * /dev/dxg under WSL2, the integrated GPU's nodes on Jetson (Orin). */
static int nvidia_driver_files(void) {
    static const char *const NODES[] = {"/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg",
                                        "/dev/nvhost-ctrl-gpu", "/dev/nvgpu"};
    for (size_t i = 0; i < sizeof NODES / sizeof NODES[0]; i++)
        if (path_exists(NODES[i])) return 1;
    return dir_has_entries("/proc/driver/nvidia/gpus");
}

int vil_gpu_driver_present(void) {
    return !cuda_devices_hidden() && nvidia_driver_files();
}

/* why vil_gpu_driver_present said no, for a message */
static const char *no_driver_text(void) {
    if (cuda_devices_hidden()) return "CUDA_VISIBLE_DEVICES hides every GPU";
    return "no NVIDIA driver on this machine (no /proc/driver/nvidia/gpus/*, /dev/nvidiactl, "
           "/dev/nvidia0 or /dev/dxg)";
}

/* ---- where the module file is looked for (backend.h) ---- */
#define MAX_CANDIDATES 5
typedef struct {
    char path[MAX_CANDIDATES][PATH_MAX];
    int n;
    const char *env; /* $VIL_BACKEND_PATH, or NULL */
} Candidates;

#ifdef VIL_CUDA
/* The folder of the binary that holds this code: the shared library's (its link map names it),
 * or the executable's (/proc/self/exe: dladdr names the main program by argv[0], which may be
 * a bare name found on PATH). -1 when neither can be resolved. */
static int self_dir(char *dir, size_t n) {
    Dl_info info;
    struct link_map *lm = NULL;
    const char *file = "/proc/self/exe";
    if (dladdr1((void *)&vil_backend_get, &info, (void **)&lm, RTLD_DL_LINKMAP) && lm &&
        lm->l_name && lm->l_name[0])
        file = lm->l_name;
    char real[PATH_MAX];
    if (!realpath(file, real)) return -1;
    char *slash = strrchr(real, '/');
    if (!slash) return -1;
    *slash = '\0';
    if ((size_t)snprintf(dir, n, "%s", real[0] ? real : "/") >= n) return -1;
    return 0;
}
#endif

static void add_candidate(Candidates *c, const char *dir, const char *rel) {
    if (c->n == MAX_CANDIDATES) return;
    char d[PATH_MAX], real[PATH_MAX], p[PATH_MAX];
    if ((size_t)snprintf(d, sizeof d, "%s%s", dir, rel) >= sizeof d) return;
    /* the folder resolved where it exists, so one folder named two ways (the build's lib folder
     * is often D/../lib) is looked at once, and the message shows plain paths */
    if ((size_t)snprintf(p, sizeof p, "%s/" VIL_CUDA_MODULE_FILE, realpath(d, real) ? real : d) >= sizeof p)
        return;
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->path[i], p) == 0) return;
    snprintf(c->path[c->n++], PATH_MAX, "%s", p);
}

static void find_candidates(Candidates *c) {
    memset(c, 0, sizeof *c);
    const char *env = getenv("VIL_BACKEND_PATH");
    if (env && env[0]) {
        struct stat st;
        c->env = env;
        if (stat(env, &st) == 0 && S_ISDIR(st.st_mode)) add_candidate(c, env, "");
        /* a name without a '/' is a file here: dlopen would search the library path for it */
        else snprintf(c->path[c->n++], PATH_MAX, "%s%s", strchr(env, '/') ? "" : "./", env);
        return;
    }
#ifdef VIL_CUDA
    char dir[PATH_MAX];
    int have_dir = self_dir(dir, sizeof dir) == 0;
    if (have_dir) {
        add_candidate(c, dir, "");
        add_candidate(c, dir, "/../lib");
    }
#ifdef VIL_MODULE_DIR
    add_candidate(c, VIL_MODULE_DIR, "");
#endif
    if (have_dir) add_candidate(c, dir, "/../build/lib");
#endif
}

/* the first candidate that is a file, or -1 */
static int first_existing(const Candidates *c) {
    for (int i = 0; i < c->n; i++) {
        struct stat st;
        if (stat(c->path[i], &st) == 0 && !S_ISDIR(st.st_mode)) return i;
    }
    return -1;
}

/* "A, B, C" into buf */
static void list_candidates(const Candidates *c, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < c->n && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", c->path[i]);
}

/* ---- the module, loaded once ---- */
typedef enum {
    LOAD_OK,
    LOAD_NOT_BUILT,   /* a CPU-only build, and no $VIL_BACKEND_PATH */
    LOAD_FAILED,      /* not found, dlopen failed, not a module, another vil's */
} LoadState;

static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;
static int load_tried;
static LoadState load_state;
static const VilBackendModule *module; /* set once, under load_mu; never unset */
static char module_path[PATH_MAX];
static char load_why[2048];

/* the module's own table, checked against this core's */
static int module_ok(const VilBackendModule *m) {
    return m->abi == VIL_BACKEND_MODULE_ABI && m->size == sizeof(VilBackendModule) &&
           m->backend_size == sizeof(VilBackend) && m->name && strcmp(m->name, "cuda") == 0;
}

/* dlopen's text (it names the file, and a library the module needs that is missing), with what
 * to do about a missing library */
static void dlopen_failed(void) {
    const char *err = dlerror();
    int missing_lib = err && strstr(err, "cannot open shared object file");
    snprintf(load_why, sizeof load_why, "cannot load the CUDA module: %s%s",
             err ? err : "dlopen failed",
             missing_lib ? " (a CUDA library it needs is missing: install it (the CUDA runtime, "
                           "cuBLAS, cuDNN 9, NCCL) or add its folder to LD_LIBRARY_PATH; "
                           "--device cpu runs without them)"
                         : "");
}

static void load_locked(void) {
    Candidates c;
    find_candidates(&c);
    if (c.n == 0) {
        load_state = LOAD_NOT_BUILT;
        snprintf(load_why, sizeof load_why,
                 "this vil was built without CUDA (no nvcc at build time, or make CUDA=0), so it "
                 "has no CUDA module: rebuild on a machine with the CUDA toolkit, set "
                 "VIL_BACKEND_PATH to a " VIL_CUDA_MODULE_FILE " built from the same tree, or "
                 "use --device cpu");
        return;
    }
    load_state = LOAD_FAILED;
    int i = first_existing(&c);
    if (i < 0) {
        char list[1536]; /* cut to fit the message */
        list_candidates(&c, list, sizeof list);
        if (c.env)
            snprintf(load_why, sizeof load_why,
                     "VIL_BACKEND_PATH=%s: the CUDA module is not there (looked for %s); name "
                     "the " VIL_CUDA_MODULE_FILE " file or its folder",
                     c.env, list);
        else
            snprintf(load_why, sizeof load_why,
                     "the CUDA module " VIL_CUDA_MODULE_FILE " was not found (looked for %s): "
                     "build it with make, or set VIL_BACKEND_PATH to the file or its folder",
                     list);
        return;
    }
    const char *path = c.path[i];
    snprintf(module_path, sizeof module_path, "%s", path);
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        dlopen_failed();
        return;
    }
    VilBackendModuleOpen open = NULL;
    /* POSIX's way to take a function from dlsym (a data pointer's bytes) */
    void *sym = dlsym(h, VIL_BACKEND_MODULE_ENTRY);
    if (sym) memcpy(&open, &sym, sizeof open);
    if (!open) {
        snprintf(load_why, sizeof load_why,
                 "%s is not a vil backend module (it has no " VIL_BACKEND_MODULE_ENTRY ")", path);
        dlclose(h);
        return;
    }
    const VilBackendModule *m = open(&core_api);
    if (!m || !module_ok(m)) {
        snprintf(load_why, sizeof load_why,
                 "%s was built by another vil: %s (this vil's module interface is %d, its "
                 "backend table %zu bytes); rebuild vil and the module together with make",
                 path, m ? "its tables differ from this vil's" : "it refused this vil's tables",
                 VIL_BACKEND_MODULE_ABI, sizeof(VilBackend));
        /* a module that took the core's table keeps it: it stays mapped, unused */
        if (!m) dlclose(h);
        return;
    }
    module = m;
    load_state = LOAD_OK;
    /* h stays open for the life of the process: the backends and their atexit cleanup live in it */
}

/* The module, loading it on the first call; NULL with the reason in why (and the state). */
static const VilBackendModule *load_module(LoadState *state, char *why, size_t n) {
    pthread_mutex_lock(&load_mu);
    if (!load_tried) {
        load_tried = 1;
        load_locked();
    }
    const VilBackendModule *m = module;
    if (state) *state = load_state;
    if (!m && why && n) snprintf(why, n, "%s", load_why);
    pthread_mutex_unlock(&load_mu);
    return m;
}

int vil_backend_module_link(const VilBackendModule *m) {
    pthread_mutex_lock(&load_mu);
    int rc = 0;
    if (load_tried && module != m) {
        vil_error("vil_backend_module_link: the device's module was looked for already");
        rc = -1;
    } else if (!module_ok(m)) {
        vil_error("vil_backend_module_link: the linked module's tables differ from this vil's");
        rc = -1;
    } else {
        load_tried = 1;
        module = m;
        load_state = LOAD_OK;
        snprintf(module_path, sizeof module_path, "(linked into this program)");
    }
    pthread_mutex_unlock(&load_mu);
    return rc;
}

int vil_cuda_module_loaded(void) {
    pthread_mutex_lock(&load_mu);
    int loaded = module != NULL;
    pthread_mutex_unlock(&load_mu);
    return loaded;
}

const char *vil_cuda_module_info(char *buf, size_t n) {
    pthread_mutex_lock(&load_mu);
    const VilBackendModule *m = module;
    int tried = load_tried;
    char why[sizeof load_why];
    snprintf(why, sizeof why, "%s", load_why);
    pthread_mutex_unlock(&load_mu);
    if (m) {
        char rt[256];
        snprintf(buf, n, "%s: %s", module_path, m->runtime_info(rt, sizeof rt));
    } else if (tried) {
        snprintf(buf, n, "not loaded: %s", why);
    } else {
        Candidates c;
        find_candidates(&c);
        int i = first_existing(&c);
        char list[1536]; /* cut to fit the message */
        list_candidates(&c, list, sizeof list);
        if (c.n == 0) snprintf(buf, n, "none");
        else if (i >= 0) snprintf(buf, n, "%s, not loaded", c.path[i]);
        else snprintf(buf, n, "not found (looked for %s)", list);
    }
    return buf;
}

int vil_cuda_available(char *why, size_t n) {
    const VilBackendModule *m = load_module(NULL, why, n);
    return m ? m->available(why, n) : 0;
}

int vil_nccl_available(char *why, size_t n) {
    const VilBackendModule *m = load_module(NULL, why, n);
    return m ? m->nccl_available(why, n) : 0;
}

/* ---- choosing a backend ---- */
int vil_device_name_ok(const char *name) {
    return strcmp(name, "cpu") == 0 || strcmp(name, "cuda") == 0 || strcmp(name, "auto") == 0;
}

/* "--device cuda" once it has failed: the module's reason, and, where it lies in the machine
 * rather than in vil, the driver check's */
static void cuda_error(const char *why) {
    if (!vil_gpu_driver_present()) vil_error("--device cuda: %s; CUDA says: %s", no_driver_text(), why);
    else vil_error("--device cuda: %s", why);
}

/* "auto": CUDA when a driver is there and device 0 can run this build, else the CPU. Silent
 * where there is no GPU or it cannot run vil's kernels (as a CPU-only build is); a warning
 * where a GPU is there but the module cannot be loaded or the device opened (a broken
 * install, a GPU out of memory), which would otherwise look like a slow run. */
static const VilBackend *backend_auto(int index) {
#ifndef VIL_CUDA
    const char *env = getenv("VIL_BACKEND_PATH");
    if (!env || !env[0]) return &vil_backend_cpu; /* nothing to look for */
#endif
    if (!vil_gpu_driver_present()) return &vil_backend_cpu;
    LoadState state;
    char why[2048];
    const VilBackendModule *m = load_module(&state, why, sizeof why);
    if (!m) {
        if (state == LOAD_FAILED) vil_warn("--device auto: a GPU driver is here, but %s; running on the CPU", why);
        return &vil_backend_cpu;
    }
    if (!m->available(why, sizeof why)) return &vil_backend_cpu;
    VilErrCapture cap;
    vil_error_capture(&cap);
    const VilBackend *be = index < 0 ? m->shared() : m->open(index);
    vil_error_release(&cap);
    if (be) return be;
    vil_warn("--device auto: the GPU cannot be opened (%s); running on the CPU", cap.msg);
    return &vil_backend_cpu;
}

/* m's shared instance (index < 0) or one of its own on GPU index, its failure reported for
 * --device cuda (the module's words, and the driver check's where it found none) */
static const VilBackend *cuda_instance(const VilBackendModule *m, int index) {
    VilErrCapture cap;
    vil_error_capture(&cap);
    const VilBackend *be = index < 0 ? m->shared() : m->open(index);
    vil_error_release(&cap);
    if (!be) cuda_error(cap.msg[0] ? cap.msg : "the device could not be opened");
    return be;
}

/* the CUDA module, loaded on first use; NULL after a message saying why it cannot be had */
static const VilBackendModule *cuda_module(void) {
    char why[2048];
    const VilBackendModule *m = load_module(NULL, why, sizeof why);
    if (!m) vil_error("--device cuda: %s", why);
    return m;
}

const VilBackend *vil_backend_get(const char *name) {
    if (strcmp(name, "cpu") == 0) return &vil_backend_cpu;
    if (strcmp(name, "auto") == 0) return backend_auto(-1);
    if (strcmp(name, "cuda") != 0) {
        vil_error("unknown device '%s' (expected cpu, cuda or auto)", name);
        return NULL;
    }
    const VilBackendModule *m = cuda_module();
    if (!m) return NULL;
    char why[2048];
    if (!m->available(why, sizeof why)) {
        cuda_error(why);
        return NULL;
    }
    return cuda_instance(m, -1);
}

const VilBackend *vil_backend_open(const char *name, int index) {
    if (strcmp(name, "cpu") == 0) return &vil_backend_cpu;
    if (strcmp(name, "auto") == 0) return backend_auto(index < 0 ? 0 : index);
    if (strcmp(name, "cuda") != 0) return vil_backend_get(name); /* reports what is wrong */
    if (index < 0) {
        vil_error("--device cuda: no GPU %d", index);
        return NULL;
    }
    const VilBackendModule *m = cuda_module();
    return m ? cuda_instance(m, index) : NULL;
}

void vil_backend_close(const VilBackend *be) {
    if (!be || be == &vil_backend_cpu) return;
    pthread_mutex_lock(&load_mu);
    const VilBackendModule *m = module;
    pthread_mutex_unlock(&load_mu);
    if (m && strcmp(be->name, m->name) == 0) m->close(be);
}
