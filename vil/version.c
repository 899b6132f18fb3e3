/* version.c: the version, commit and build options of version.h. The Makefile passes the commit
 * (VIL_GIT_COMMIT) and the BLAS's pkg-config name (VIL_BLAS_NAME) to this file alone, and
 * rebuilds it when they change, so a new commit recompiles one file instead of the tree. The
 * build date is left out on purpose: two builds of one commit give the same binary. */
#include "vil/version.h"

#include <stdlib.h>
#include <string.h>

#include "vil/backend.h"
#include "vil/dist.h"
#ifdef VIL_BLAS
#include <cblas.h> /* OpenBLAS's defines OPENBLAS_VERSION */
#endif

/* a build without the Makefile's defines (tests/fuzz.mk compiles the library's files itself) */
#ifndef VIL_GIT_COMMIT
#define VIL_GIT_COMMIT "unknown"
#endif
#ifndef VIL_BLAS_NAME
#define VIL_BLAS_NAME "cblas"
#endif

#if defined(__clang__)
#define VIL_COMPILER __VERSION__ /* "Debian Clang 14.0.6" and the like: it names itself */
#elif defined(__GNUC__)
#define VIL_COMPILER "gcc " __VERSION__ /* gcc's __VERSION__ is the number alone */
#else
#define VIL_COMPILER __VERSION__
#endif

const char *vil_version_string(void) {
    return "vil " VIL_VERSION " (git " VIL_GIT_COMMIT ")";
}

const char *vil_version_commit(void) {
    return VIL_GIT_COMMIT;
}

/* the text after a prefix the caller's label already says ("CUDA 13.0" under "CUDA") */
static const char *after(const char *s, const char *prefix) {
    size_t n = strlen(prefix);
    return strncmp(s, prefix, n) == 0 ? s + n : s;
}

static const char *openmp_text(void) {
#ifdef _OPENMP
    /* the spec versions by the date _OPENMP holds; a newer date prints as the date */
    static const struct {
        long date;
        const char *v;
    } V[] = {{200505, "2.5"}, {200805, "3.0"}, {201107, "3.1"}, {201307, "4.0"},
             {201511, "4.5"}, {201811, "5.0"}, {202011, "5.1"}, {202111, "5.2"}, {202411, "6.0"}};
    static char buf[32];
    const char *v = NULL;
    for (size_t i = 0; i < sizeof V / sizeof V[0]; i++)
        if (V[i].date == _OPENMP) v = V[i].v;
    if (v) snprintf(buf, sizeof buf, "%s (%ld)", v, (long)_OPENMP);
    else snprintf(buf, sizeof buf, "%ld", (long)_OPENMP);
    return buf;
#else
    return "no (the CPU ops run on one thread)";
#endif
}

static const char *blas_text(void) {
#if defined(VIL_BLAS) && defined(OPENBLAS_VERSION)
    /* OPENBLAS_VERSION is " OpenBLAS 0.3.21 ": trimmed */
    static char buf[96];
    const char *v = OPENBLAS_VERSION;
    while (*v == ' ') v++;
    int n = (int)strlen(v);
    while (n > 0 && v[n - 1] == ' ') n--;
    snprintf(buf, sizeof buf, "%s (%.*s)", VIL_BLAS_NAME, n, v);
    return buf;
#elif defined(VIL_BLAS)
    return VIL_BLAS_NAME;
#else
    return "none (plain loops: install libopenblas-dev and rebuild)";
#endif
}

/* What the build knows of CUDA, then the module's state, read without loading it: `vil
 * version` maps no CUDA library (the runtime's and the driver's versions show once a command
 * has loaded the module) */
static const char *cuda_text(void) {
    static char buf[1024];
    char mod[768];
#ifndef VIL_CUDA
    const char *env = getenv("VIL_BACKEND_PATH");
    if (!env || !env[0]) return vil_cuda_build_info();
#endif
    snprintf(buf, sizeof buf, "%s; module %s", after(vil_cuda_build_info(), "CUDA "),
             vil_cuda_module_info(mod, sizeof mod));
    return buf;
}

typedef struct {
    const char *label, *value;
} Option;

static int options(Option *o) {
    int n = 0;
    o[n++] = (Option){"compiler", VIL_COMPILER};
    o[n++] = (Option){"CUDA", cuda_text()};
    o[n++] = (Option){"BLAS", blas_text()};
    o[n++] = (Option){"MPI", after(vil_dist_build_info(), "MPI ")};
    o[n++] = (Option){"OpenMP", openmp_text()};
    return n;
}

const char *vil_build_options(void) {
    static char buf[2048];
    Option o[8];
    int n = options(o);
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < n && k < sizeof buf; i++) {
        /* the compiler's value names it; the others read "CUDA 13.0 ...", "MPI yes ..." */
        if (i == 0) k += (size_t)snprintf(buf + k, sizeof buf - k, "%s", o[i].value);
        else k += (size_t)snprintf(buf + k, sizeof buf - k, "; %s %s", o[i].label, o[i].value);
    }
    return buf;
}

void vil_version_print(FILE *f) {
    Option o[8];
    int n = options(o);
    fprintf(f, "vil %s\ncommit:   %s\n", VIL_VERSION, VIL_GIT_COMMIT);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s:%*s%s\n", o[i].label, (int)(9 - strlen(o[i].label)), "", o[i].value);
}
